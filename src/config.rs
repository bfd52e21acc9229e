//! The configuration: one TOML file, every key with a default, flags on top.
//!
//! Unknown keys and bad values are refused with a message naming the key,
//! so a typo never silently falls back to a default.

use anyhow::{anyhow, bail, Context, Result};
use serde::Deserialize;
use shards::dn::Dn;
use shards::{EngineKind, Options, SyncMode};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

mod limits;
pub use limits::Limits;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub server: Server,
    pub directory: Directory,
    pub storage: Storage,
    pub limits: Limits,
    pub schema: SchemaFiles,
    pub passwords: Passwords,
    pub access: AccessRules,
    pub tls: TlsConfig,
    pub log: Log,
    pub metrics: Metrics,
    pub monitor: Monitor,
    pub replication: Replication,
    pub syncrepl: Syncrepl,
    /// Indexed attributes and their index types (`uid = "eq,sub"`); when
    /// present it replaces the default list entirely, like slapd's `index`
    /// lines.
    pub indexes: Option<BTreeMap<String, String>>,
    /// The file this was read from (for `reload`).
    #[serde(skip)]
    pub source: Option<PathBuf>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Passwords {
    /// The scheme cleartext passwords are hashed with when written
    /// (add, modify, Password Modify), like slapd's `password-hash`.
    pub default_scheme: String,
    /// Whether a `userPassword` value without a `{SCHEME}` verifies.
    pub allow_cleartext: bool,
    /// Whether Password Modify of one's own password needs the old one.
    /// slapd does not ask for it when the access rules allow the write.
    pub self_change_requires_old: bool,
    /// What verifying one stored hash may cost (`shards::password::Policy`):
    /// a hash above these never verifies and cannot be written.
    pub max_pbkdf2_iterations: u64,
    pub max_argon2_memory_kib: u32,
    pub max_argon2_iterations: u32,
    pub max_bcrypt_cost: u32,
    pub max_sha_crypt_rounds: u32,
    pub max_scrypt_memory_kib: u32,
    pub max_scrypt_passes: u32,
}

impl Default for Passwords {
    fn default() -> Passwords {
        let limits = shards::password::Policy::default();
        Passwords {
            default_scheme: shards::password::DEFAULT_SCHEME.into(),
            allow_cleartext: false,
            self_change_requires_old: false,
            max_pbkdf2_iterations: limits.max_pbkdf2_iterations,
            max_argon2_memory_kib: limits.max_argon2_memory_kib,
            max_argon2_iterations: limits.max_argon2_iterations,
            max_bcrypt_cost: limits.max_bcrypt_cost,
            max_sha_crypt_rounds: limits.max_sha_crypt_rounds,
            max_scrypt_memory_kib: limits.max_scrypt_memory_kib,
            max_scrypt_passes: limits.max_scrypt_passes,
        }
    }
}

impl Passwords {
    pub fn policy(&self) -> shards::password::Policy {
        shards::password::Policy {
            allow_cleartext: self.allow_cleartext,
            max_pbkdf2_iterations: self.max_pbkdf2_iterations,
            max_argon2_memory_kib: self.max_argon2_memory_kib,
            max_argon2_iterations: self.max_argon2_iterations,
            max_bcrypt_cost: self.max_bcrypt_cost,
            max_sha_crypt_rounds: self.max_sha_crypt_rounds,
            max_scrypt_memory_kib: self.max_scrypt_memory_kib,
            max_scrypt_passes: self.max_scrypt_passes,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Log {
    /// The access log: "off", "stats" (slapd's default) or "debug".
    pub level: String,
    /// "stats" (slapd's line format) or "json".
    pub format: String,
    /// A file to append to; standard error when absent.
    pub file: Option<PathBuf>,
}

impl Default for Log {
    fn default() -> Log {
        Log { level: "stats".into(), format: "stats".into(), file: None }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Metrics {
    /// Serve `http://ADDR/metrics` (Prometheus) from shard 0's reactor.
    pub listen: Option<String>,
}

/// Mirror mode (`[replication]`): this server and its peer both take
/// writes and stream their changes to each other.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Replication {
    /// This server's id in CSNs and the changelog, 1..4095 (`server.id`
    /// when absent); the peer's must differ.
    pub server_id: Option<u32>,
    /// Where the peer connects to send its changes ("host:port").
    pub listen: Option<String>,
    /// The peer's `replication.listen`: where this server sends its changes.
    pub peer: Option<String>,
    /// A secret both servers hold; each proves it to the other at connect.
    pub secret: Option<String>,
    /// The SHA-256 fingerprint of the peer's certificate (hex, colons
    /// optional). Set, the channel runs over TLS 1.3 and each side accepts
    /// only the certificate the other pins; the secret is then optional.
    pub peer_certificate_sha256: Option<String>,
    /// This server's certificate and key on the channel (PEM; default:
    /// `tls.certificate_file` and `tls.key_file`).
    pub certificate_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    /// How far ahead of this server's clock a peer's CSN may be before
    /// the peer is refused (seconds; default 60).
    pub max_forward_skew_s: Option<u64>,
    /// How long changelog records (and deleted entries' tombstones) are
    /// kept once the peer holds them (seconds; default 7 days). Records
    /// the peer has not acknowledged are never trimmed.
    pub changelog_max_age_s: Option<u64>,
    /// How often the changelog is trimmed (seconds; default 60).
    pub trim_interval_s: Option<u64>,
    /// The most records the changelog may hold (0, the default: no cap, as
    /// 389-ds's nsslapd-changelogmaxentries). Over it, the oldest records
    /// are trimmed even if the peer lacks them; the peer is then marked
    /// lagging and gets the partitions it misses resynced.
    pub changelog_max_records: Option<u64>,
    /// How often every partition's digest is compared with the peer's
    /// (seconds; default 600; 0: never). A partition that differs at the
    /// same replication positions is reported and resynced (`verify.rs`).
    pub verify_interval_s: Option<u64>,
}

/// The RFC 4533 provider (`ops::syncrepl`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Syncrepl {
    /// Serve syncrepl consumers (slapd's `syncrepl` directive). It keeps
    /// the changelog (as mirror mode does, which serves them too), trimmed
    /// by `replication.changelog_max_age_s`.
    pub provider: bool,
}

impl Replication {
    /// Whether mirror mode is on: commits then record their changes.
    pub fn enabled(&self) -> bool {
        self.listen.is_some() || self.peer.is_some()
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Monitor {
    /// Who besides the root DN may read cn=Monitor, in the access rules'
    /// `<who>` syntax (`users`, `dn.exact="…"`, `group="…"`).
    pub readers: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// PEM certificate chain (slapd's TLSCertificateFile); with `key_file`
    /// it enables StartTLS on the plain listener.
    pub certificate_file: Option<PathBuf>,
    /// PEM private key (TLSCertificateKeyFile).
    pub key_file: Option<PathBuf>,
    /// An `ldaps://` listen address (TLS from the first byte), if any.
    pub listen: Option<String>,
    /// Simple binds with a password, and writes, only over TLS or the
    /// local socket; `confidentialityRequired` otherwise.
    pub required: bool,
    /// PEM certificates of the CAs whose client certificates are trusted
    /// (slapd's TLSCACertificateFile); needed unless `verify_client` is
    /// `never`.
    pub ca_certificate_file: Option<PathBuf>,
    /// Client certificates, as slapd's TLSVerifyClient: `never` (the
    /// default: none asked for), `try` (asked for; a client may send none,
    /// one that does not verify ends the handshake) or `demand` (required).
    /// A verified certificate's subject is who SASL EXTERNAL authenticates.
    /// slapd's `allow` (a certificate that does not verify accepted
    /// without an identity) is refused: `try` is the nearest.
    pub verify_client: Option<String>,
    /// PEM certificate revocation lists (slapd's TLSCRLFile): a client
    /// certificate one of them names ends the handshake. Read again on
    /// SIGHUP, with the certificates. A certificate whose issuer has no
    /// list here is not checked, as GnuTLS's slapd does not.
    pub crl_file: Option<PathBuf>,
}

impl TlsConfig {
    /// `verify_client` as slapd reads TLSVerifyClient (any case; `hard`
    /// and `true` are `demand`): `None` for never, else whether a client
    /// certificate is required.
    pub fn client_demand(&self) -> Result<Option<bool>> {
        let mode = self.verify_client.as_deref().unwrap_or("never").to_ascii_lowercase();
        Ok(match mode.as_str() {
            "never" => None,
            "try" => Some(false),
            "demand" | "hard" | "true" => Some(true),
            "allow" => bail!(
                "tls.verify_client = \"allow\" (a certificate that does not verify accepted without an identity) is \
                 not supported: use \"try\", which ends a handshake whose certificate does not verify"
            ),
            other => bail!("tls.verify_client: {other:?} is not one of never, try, demand"),
        })
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AccessRules {
    /// Access rules in slapd's syntax (`to <what> by <who> <level> ...`),
    /// first match wins; absent: `acl::DEFAULT_RULES`.
    pub rules: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SchemaFiles {
    /// Schema files loaded after the built-in schema, in order: OpenLDAP
    /// `.schema` syntax or its LDIF form (`olcAttributeTypes`, ...).
    pub files: Vec<PathBuf>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Server {
    /// LDAP listen address; every shard binds it with SO_REUSEPORT.
    pub listen: String,
    /// Data directory (manifest and one store per shard).
    pub data: PathBuf,
    /// Number of shards; 0 means one per CPU this process may run on.
    pub shards: usize,
    /// Listen backlog of each shard's socket.
    pub backlog: i32,
    /// How long an idle reactor spins before parking (µs); trades idle CPU
    /// for lower cross-core latency.
    pub spin_before_park_us: u64,
    /// Set the reactors' io_uring rings up with `COOP_TASKRUN`: completions
    /// wait for the reactor's next system call instead of interrupting it
    /// (see `src/uring.rs`). On by default; ignored by kernels before 5.19
    /// and when `spin_before_park_us` is set (a spinning reactor makes no
    /// system call that would post them).
    pub io_uring_coop_taskrun: bool,
    /// Path of a local (Unix) socket listener, slapd's `ldapi://`; it counts
    /// as a protected transport (ssf 71). None by default.
    pub ldapi: Option<PathBuf>,
    /// The admin socket (`coredir ctl`); default `admin.sock` in the data
    /// directory.
    pub admin_socket: Option<PathBuf>,
    /// Accept LDAPv2 binds, as slapd's `allow bind_v2` (off by default:
    /// such a bind is a protocolError).
    pub allow_bind_v2: bool,
    /// slapd's `authz-regexp`: `[pattern, replacement]` pairs mapping the
    /// DN SASL EXTERNAL authenticates on the local socket
    /// (`gidNumber=G+uidNumber=U,cn=peercred,cn=external,cn=auth`) to a
    /// directory DN; the first pattern that matches (case-insensitive)
    /// wins, `$1`..`$9` taking its groups. None by default.
    pub authz_regexp: Vec<(String, String)>,
    /// This server's id (replication and `ctl status`), 1..4095.
    pub id: u32,
    /// Run one shard per CPU of this NUMA node (`--numa-node`).
    pub numa_node: Option<usize>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Directory {
    /// The naming context (slapd's `suffix`); its entry, with `ou=people`
    /// and `ou=groups`, is created with a new database.
    pub suffix: Option<String>,
    /// Several naming contexts, in the order `namingContexts` lists them
    /// (instead of `suffix`). Each one's entry is created when the suffix
    /// is first configured; the first also gets `ou=people` and `ou=groups`
    /// in a new database.
    pub suffixes: Vec<String>,
    /// The root identity; it needs no entry and bypasses access checks.
    pub root_dn: String,
    /// `{SSHA}` hash of the root password; overrides the hash chosen when
    /// the database was created.
    pub root_password_hash: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Storage {
    /// Storage engine: "lmdb" (default) or "sled".
    pub engine: String,
    /// "always" (default), "interval" or "never"; see README.
    pub sync: String,
    /// Period of the background sync in "interval" mode.
    pub sync_interval_ms: u64,
    /// Address space first reserved for each shard's LMDB map (it doubles
    /// when a quarter is left; see README).
    pub map_size_mb: usize,
    /// sled's page cache per shard.
    pub sled_cache_mb: u64,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            server: Server::default(),
            directory: Directory::default(),
            storage: Storage::default(),
            limits: Limits::default(),
            schema: SchemaFiles::default(),
            passwords: Passwords::default(),
            access: AccessRules::default(),
            tls: TlsConfig::default(),
            log: Log::default(),
            metrics: Metrics::default(),
            monitor: Monitor::default(),
            replication: Replication::default(),
            syncrepl: Syncrepl::default(),
            indexes: None,
            source: None,
        }
    }
}

impl Default for Server {
    fn default() -> Server {
        Server {
            listen: "127.0.0.1:3389".into(),
            data: "./coredir-data".into(),
            shards: 0,
            backlog: 1024,
            spin_before_park_us: 0,
            io_uring_coop_taskrun: true,
            ldapi: None,
            admin_socket: None,
            allow_bind_v2: false,
            authz_regexp: Vec::new(),
            id: 1,
            numa_node: None,
        }
    }
}

/// The naming context of a configuration that names none.
pub const DEFAULT_SUFFIX: &str = "dc=example,dc=com";

impl Default for Directory {
    fn default() -> Directory {
        Directory {
            suffix: None,
            suffixes: Vec::new(),
            root_dn: "cn=admin,dc=example,dc=com".into(),
            root_password_hash: None,
        }
    }
}

impl Default for Storage {
    fn default() -> Storage {
        Storage {
            engine: "lmdb".into(),
            sync: "always".into(),
            sync_interval_ms: 1000,
            map_size_mb: 64 * 1024,
            sled_cache_mb: 256,
        }
    }
}

impl Config {
    pub fn load(path: Option<&Path>) -> Result<Config> {
        let Some(path) = path else {
            return Ok(Config::default());
        };
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let mut config: Config = toml::from_str(&text).map_err(|e| anyhow!("{}: {e}", path.display()))?;
        config.source = Some(path.to_path_buf());
        Ok(config)
    }

    /// The configured naming contexts, checked: `directory.suffix` or
    /// `directory.suffixes` (not both), else `dc=example,dc=com`. None may
    /// be empty or lie within another: slapd serves a nested suffix only
    /// as a glued subordinate database, which coredir does not have.
    pub fn naming_contexts(&self) -> Result<Vec<Dn>> {
        let d = &self.directory;
        let (key, texts) = match (&d.suffix, d.suffixes.is_empty()) {
            (Some(_), false) => bail!("directory: give suffix or suffixes, not both"),
            (Some(s), true) => ("directory.suffix", vec![s.clone()]),
            (None, false) => ("directory.suffixes", d.suffixes.clone()),
            (None, true) => ("directory.suffix", vec![DEFAULT_SUFFIX.to_string()]),
        };
        let mut dns: Vec<Dn> = Vec::with_capacity(texts.len());
        for t in &texts {
            let dn = Dn::parse(t).map_err(|e| anyhow!("{key}: {t:?}: {}", e.message))?;
            if dn.is_root() {
                bail!("{key}: a suffix must not be empty");
            }
            if let Some(other) = dns.iter().find(|o| dn.is_within(o) || o.is_within(&dn)) {
                bail!(
                    "{key}: {t:?} {} {:?}; nested naming contexts are not supported",
                    if *other == dn { "repeats" } else { "overlaps" },
                    other.to_string_form()
                );
            }
            dns.push(dn);
        }
        Ok(dns)
    }

    /// The server id in this server's CSNs.
    pub fn sid(&self) -> u16 {
        self.replication.server_id.unwrap_or(self.server.id) as u16
    }

    /// How owners stamp and record changes.
    pub fn stamping(&self) -> shards::write::Stamping {
        shards::write::Stamping {
            sid: self.sid(),
            capture: self.replication.enabled() || self.syncrepl.provider,
            max_forward_skew: std::time::Duration::from_secs(self.replication.max_forward_skew_s.unwrap_or(60)),
        }
    }

    /// The certificate and key this server shows on the replication channel.
    pub fn replication_identity(&self) -> Option<(&std::path::Path, &std::path::Path)> {
        let r = &self.replication;
        match (&r.certificate_file, &r.key_file) {
            (Some(c), Some(k)) => Some((c, k)),
            _ => Some((self.tls.certificate_file.as_deref()?, self.tls.key_file.as_deref()?)),
        }
    }

    /// Checks every value, naming the key of the first bad one.
    pub fn validate(&self) -> Result<()> {
        self.listen_addr()?;
        crate::ops::sasl::AuthzRegexp::new(&self.server.authz_regexp)?;
        if !(1..=4095).contains(&self.replication.server_id.unwrap_or(1)) {
            bail!("replication.server_id: must be between 1 and 4095");
        }
        let r = &self.replication;
        let authenticated = r.secret.as_deref().is_some_and(|s| !s.is_empty()) || r.peer_certificate_sha256.is_some();
        if r.enabled() && (r.listen.is_none() || r.peer.is_none() || !authenticated) {
            bail!("replication: mirror mode needs listen, peer, and secret or peer_certificate_sha256");
        }
        if let Some(pin) = &r.peer_certificate_sha256 {
            crate::tls::parse_fingerprint(pin)?;
            if self.replication_identity().is_none() {
                bail!(
                    "replication.peer_certificate_sha256 needs this server's certificate: \
                     replication.certificate_file and key_file (or tls.certificate_file and key_file)"
                );
            }
        }
        if let Some(a) = &r.listen {
            a.parse::<std::net::SocketAddr>().map_err(|e| anyhow!("replication.listen: {a:?}: {e}"))?;
        }
        // The peer may be a host name: "ldap2.example.com:7389".
        if let Some(a) = &r.peer {
            let port = a.rsplit_once(':').and_then(|(host, port)| (!host.is_empty()).then_some(port));
            port.and_then(|p| p.parse::<u16>().ok())
                .ok_or_else(|| anyhow!("replication.peer: {a:?} is not host:port"))?;
        }
        self.naming_contexts()?;
        Dn::parse(&self.directory.root_dn).map_err(|e| anyhow!("directory.root_dn: {}", e.message))?;
        if let Some(h) = &self.directory.root_password_hash {
            if !shards::password::is_hashed(h.as_bytes()) {
                bail!("directory.root_password_hash: expected a hash such as {{SSHA}}… or {{PBKDF2-SHA512}}… (see `coredir hash-password`)");
            }
            if !self.passwords.policy().within(h.as_bytes()) {
                bail!("directory.root_password_hash: its parameters cost more than passwords.max_* allow");
            }
        }
        if !shards::password::WRITABLE.iter().any(|w| w.eq_ignore_ascii_case(&self.passwords.default_scheme)) {
            bail!(
                "passwords.default_scheme: {:?} is not one of {}",
                self.passwords.default_scheme,
                shards::password::WRITABLE.join(", ")
            );
        }
        self.engine_kind()?;
        if self.storage.sled_cache_mb == 0 {
            bail!("storage.sled_cache_mb: must be at least 1");
        }
        self.sync_mode()?;
        if self.storage.sync_interval_ms == 0 {
            bail!("storage.sync_interval_ms: must be at least 1");
        }
        if self.storage.map_size_mb < 16 {
            bail!("storage.map_size_mb: must be at least 16");
        }
        if self.limits.max_pdu_bytes < 1024 || self.limits.max_pdu_bytes_anonymous < 1024 {
            bail!("limits.max_pdu_bytes: must be at least 1024");
        }
        if self.limits.max_pdu_bytes_anonymous > self.limits.max_pdu_bytes {
            bail!("limits.max_pdu_bytes_anonymous: must not exceed limits.max_pdu_bytes");
        }
        if self.limits.max_filter_depth == 0 {
            bail!("limits.max_filter_depth: must be at least 1");
        }
        // A connection's own share of its queue (`conn::room::OWN_KIB`) and
        // of its requests (`conn::intake::OWN_BYTES`); one answer or request
        // may take a connection's whole bound.
        let l = &self.limits;
        bounds_per_connection("max_queued_bytes", (l.max_queued_bytes_per_connection, l.max_queued_bytes), 64 << 10)?;
        bounds_per_connection(
            "max_pending_bytes",
            (l.max_pending_bytes_per_connection, l.max_pending_bytes),
            256 << 10,
        )?;
        self.unindexed_result()?;
        match (&self.tls.certificate_file, &self.tls.key_file) {
            (Some(_), Some(_)) | (None, None) => {}
            _ => bail!("tls: certificate_file and key_file go together"),
        }
        if self.tls.certificate_file.is_none() && (self.tls.listen.is_some() || self.tls.required) {
            bail!("tls: listen and required need certificate_file and key_file");
        }
        let asks_clients = self.tls.client_demand()?.is_some();
        if self.tls.certificate_file.is_none() && (asks_clients || self.tls.ca_certificate_file.is_some()) {
            bail!("tls: verify_client and ca_certificate_file need certificate_file and key_file");
        }
        if asks_clients && self.tls.ca_certificate_file.is_none() {
            bail!("tls.verify_client: client certificates need tls.ca_certificate_file");
        }
        if self.tls.crl_file.is_some() && !asks_clients {
            bail!("tls.crl_file: revocation lists are for client certificates; set tls.verify_client to try or demand");
        }
        self.log_level()?;
        if !matches!(self.log.format.as_str(), "stats" | "json") {
            bail!("log.format: {:?} is not \"stats\" or \"json\"", self.log.format);
        }
        if let Some(l) = &self.metrics.listen {
            l.parse::<SocketAddr>()
                .map_err(|_| anyhow!("metrics.listen: {l:?} is not an address like 127.0.0.1:9389"))?;
        }
        if !(1..=4095).contains(&self.server.id) {
            bail!("server.id: must be between 1 and 4095");
        }
        if let Some(l) = &self.tls.listen {
            l.parse::<SocketAddr>().map_err(|_| anyhow!("tls.listen: {l:?} is not an address like 127.0.0.1:3636"))?;
        }
        if self.server.backlog <= 0 {
            bail!("server.backlog: must be positive");
        }
        Ok(())
    }

    pub fn log_level(&self) -> Result<crate::accesslog::LogLevel> {
        crate::accesslog::LogLevel::parse(&self.log.level)
            .ok_or_else(|| anyhow!("log.level: {:?} is not \"off\", \"stats\" or \"debug\"", self.log.level))
    }

    /// The admin socket's path.
    pub fn admin_socket(&self) -> PathBuf {
        self.server.admin_socket.clone().unwrap_or_else(|| self.server.data.join("admin.sock"))
    }

    pub fn unindexed_result(&self) -> Result<ldap3_proto::LdapResultCode> {
        use ldap3_proto::LdapResultCode as Code;
        Ok(match self.limits.unindexed_result.as_str() {
            "adminLimitExceeded" => Code::AdminLimitExceeded,
            "unwillingToPerform" => Code::UnwillingToPerform,
            other => {
                bail!("limits.unindexed_result: {other:?} is not \"adminLimitExceeded\" or \"unwillingToPerform\"")
            }
        })
    }

    /// The compiled access rules (after `install_schema`: rules name
    /// attribute types and filters).
    pub fn acl(&self) -> Result<crate::acl::Acl> {
        let defaults: Vec<String>;
        let rules = match &self.access.rules {
            Some(r) => r,
            None => {
                defaults = crate::acl::DEFAULT_RULES.iter().map(|s| s.to_string()).collect();
                &defaults
            }
        };
        let mut acl = crate::acl::parse::compile(rules).map_err(|e| anyhow!("access.rules: {e}"))?;
        crate::acl::parse::compile_limits(&mut acl, &self.limits.by_identity).map_err(|e| anyhow!("limits: {e}"))?;
        crate::acl::parse::compile_monitor_readers(&mut acl, &self.monitor.readers)
            .map_err(|e| anyhow!("monitor.readers: {e}"))?;
        Ok(acl)
    }

    /// The index configuration: `[indexes]` or the defaults.
    pub fn index_config(&self) -> Result<shards::index::Config> {
        let made = match &self.indexes {
            Some(map) => shards::index::Config::new(map.iter().map(|(a, k)| (a.as_str(), k.as_str()))),
            None => Ok(shards::index::Config::defaults()),
        };
        made.map_err(|e| anyhow!(e))
    }

    /// Loads the schema files and the index configuration and installs
    /// them for this process (before anything reads the schema).
    pub fn install_schema(&self) -> Result<()> {
        let schema = shards::schema::Schema::load(&self.schema.files).map_err(|e| anyhow!("schema: {e}"))?;
        shards::schema::install(schema).map_err(|e| anyhow!(e))?;
        shards::index::install(self.index_config()?).map_err(|e| anyhow!(e))
    }

    pub fn listen_addr(&self) -> Result<SocketAddr> {
        self.server
            .listen
            .parse()
            .map_err(|_| anyhow!("server.listen: {:?} is not an address like 127.0.0.1:3389", self.server.listen))
    }

    pub fn engine_kind(&self) -> Result<EngineKind> {
        Ok(match self.storage.engine.as_str() {
            "lmdb" => EngineKind::Lmdb,
            "sled" => EngineKind::Sled,
            other => bail!("storage.engine: unknown engine {other:?} (expected \"lmdb\" or \"sled\")"),
        })
    }

    /// How to open this configuration's stores.
    pub fn store_options(&self) -> Result<Options> {
        Ok(Options {
            kind: self.engine_kind()?,
            sync: self.sync_mode()?,
            sync_interval_ms: self.storage.sync_interval_ms,
            map_size: self.storage.map_size_mb << 20,
            sled_cache_bytes: self.storage.sled_cache_mb << 20,
        })
    }

    pub fn sync_mode(&self) -> Result<SyncMode> {
        Ok(match self.storage.sync.as_str() {
            "always" => SyncMode::Always,
            "interval" => SyncMode::Interval,
            "never" => SyncMode::Never,
            other => {
                bail!("storage.sync: {other:?} is not one of \"always\", \"interval\", \"never\"")
            }
        })
    }
}

/// `limits.<name>_per_connection` at least `least`, and `limits.<name>`
/// (the shard's) at least that.
fn bounds_per_connection(name: &str, (per_connection, shard): (usize, usize), least: usize) -> Result<()> {
    if per_connection < least {
        bail!("limits.{name}_per_connection: must be at least {least}");
    }
    if shard < per_connection {
        bail!("limits.{name}: must be at least limits.{name}_per_connection ({per_connection})");
    }
    Ok(())
}
