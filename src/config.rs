//! The configuration: one TOML file, every key with a default, flags on top.
//!
//! Unknown keys and bad values are refused with a message naming the key,
//! so a typo never silently falls back to a default.

use anyhow::{anyhow, bail, Context, Result};
use serde::Deserialize;
use shards::dn::Dn;
use shards::store::SyncMode;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub server: Server,
    pub directory: Directory,
    pub storage: Storage,
    pub limits: Limits,
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
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Directory {
    /// The naming context created with a new database.
    pub suffix: String,
    /// The root identity; it needs no entry and bypasses access checks.
    pub root_dn: String,
    /// `{SSHA}` hash of the root password; overrides the hash chosen when
    /// the database was created.
    pub root_password_hash: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Storage {
    /// Storage engine: "lmdb".
    pub engine: String,
    /// "always" (default), "interval" or "never"; see README.
    pub sync: String,
    /// Period of the background sync in "interval" mode.
    pub sync_interval_ms: u64,
    /// Address space reserved for each shard's LMDB map.
    pub map_size_mb: usize,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Largest request PDU accepted after a successful bind.
    pub max_pdu_bytes: usize,
    /// Largest request PDU accepted from an anonymous connection.
    pub max_pdu_bytes_anonymous: usize,
    /// Deepest filter nesting accepted.
    pub max_filter_depth: usize,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            server: Server::default(),
            directory: Directory::default(),
            storage: Storage::default(),
            limits: Limits::default(),
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
        }
    }
}

impl Default for Directory {
    fn default() -> Directory {
        Directory {
            suffix: "dc=example,dc=com".into(),
            root_dn: "cn=admin,dc=example,dc=com".into(),
            root_password_hash: None,
        }
    }
}

impl Default for Storage {
    fn default() -> Storage {
        Storage { engine: "lmdb".into(), sync: "always".into(), sync_interval_ms: 1000, map_size_mb: 64 * 1024 }
    }
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { max_pdu_bytes: 4 << 20, max_pdu_bytes_anonymous: 256 << 10, max_filter_depth: 64 }
    }
}

impl Config {
    pub fn load(path: Option<&Path>) -> Result<Config> {
        let Some(path) = path else {
            return Ok(Config::default());
        };
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let config: Config = toml::from_str(&text).map_err(|e| anyhow!("{}: {e}", path.display()))?;
        Ok(config)
    }

    /// Checks every value, naming the key of the first bad one.
    pub fn validate(&self) -> Result<()> {
        self.listen_addr()?;
        Dn::parse(&self.directory.suffix).map_err(|e| anyhow!("directory.suffix: {}", e.message))?;
        if Dn::parse(&self.directory.suffix)?.is_root() {
            bail!("directory.suffix: must not be empty");
        }
        Dn::parse(&self.directory.root_dn).map_err(|e| anyhow!("directory.root_dn: {}", e.message))?;
        if let Some(h) = &self.directory.root_password_hash {
            if !h.starts_with("{SSHA}") && !h.starts_with("{SHA}") {
                bail!("directory.root_password_hash: expected an {{SSHA}} or {{SHA}} hash");
            }
        }
        match self.storage.engine.as_str() {
            "lmdb" => {}
            "sled" => {
                bail!("storage.engine: \"sled\" is not available in this build yet; use \"lmdb\"")
            }
            other => bail!("storage.engine: unknown engine {other:?} (expected \"lmdb\")"),
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
        if self.server.backlog <= 0 {
            bail!("server.backlog: must be positive");
        }
        Ok(())
    }

    pub fn listen_addr(&self) -> Result<SocketAddr> {
        self.server
            .listen
            .parse()
            .map_err(|_| anyhow!("server.listen: {:?} is not an address like 127.0.0.1:3389", self.server.listen))
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
