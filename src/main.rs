//! # coredir: a thread-per-core LDAPv3 directory server
//!
//! ## Bird's eye view
//!
//! One process serves one NUMA node. Inside it, one glommio reactor per CPU
//! (a *shard*) is pinned to its CPU, binds the LDAP port itself with
//! `SO_REUSEPORT` and serves the connections the kernel hands it, start to
//! finish. The directory is split into 256 partitions by a hash of the
//! normalized DN; each shard owns some partitions and keeps them in its own
//! LMDB store. Reads (bind, compare, search) run entirely on the
//! connection's shard through snapshots of every store; writes go to the
//! owner of the entry's partition, locally or as one mesh message, and are
//! acknowledged after the owner's group commit is durable.
//!
//! ## Entry points
//!
//! - `main` -> `run`: the command line (`coredir serve`, `import`, `export`, `reindex`,
//!   `backup`, `restore`, `reshard`, `hash-password`, `acl check`, `ctl`,
//!   `config check`, `schema export`, `deploy plan`).
//! - `server::serve`: start-up, one reactor per shard, readiness.
//! - `listener::run` -> `conn::serve_tcp` (`serve_tls`, `serve_unix` for
//!   ldapi): accept, then one connection's read loop; `ops::dispatch` is
//!   the one `match` over LDAP operations.
//!
//! ## Code map
//!
//! - `config`: the TOML configuration and its validation; `config/limits`,
//!   the `[limits]` table.
//! - `admin`: the admin socket (`coredir ctl`), reload, drain, signals.
//! - `stats`, `accesslog`: metrics handles per shard, the stats access log.
//! - `turns`: the shard's key-stretching lane, taken in turns by connection.
//! - `deploy`: NUMA topology, `--numa-node`, `deploy plan`.
//! - `tls`: rustls configuration, certificate reload, client certificates
//!   (their subject is who SASL EXTERNAL authenticates over TLS).
//! - `uring` (this binary only): its `syscall()` gives glommio's io_uring
//!   rings `COOP_TASKRUN` (`server.io_uring_coop_taskrun`).
//! - `acl`: access rules (slapd's `access to ... by ...`), compiled at
//!   start; `ops::access` applies them per operation.
//! - `server`: start-up: sockets, one pinned reactor per shard, readiness.
//! - `database`: the data directory's lock, manifest and stores; a new
//!   database's first entries.
//! - `ctx`: `Ctx`, what one shard's connections share (the shard, the
//!   live settings, `Shared` across shards).
//! - `listener`: per-shard socket (socket2) and accept loop; `Failures`,
//!   out-of-descriptor failures said once a minute per shard.
//! - `import`, `export`: offline LDIF load (parallel per shard) and dump.
//! - `reindex`: offline index rebuild after `[indexes]` changed.
//! - `schema_export`: `coredir schema export` (OpenLDAP .schema syntax).
//! - `backup`: `backup`, `restore` and `reshard`, tree-by-tree store copies.
//! - `repl/`: mirror mode's channel on shard 0: `protocol` (frames,
//!   handshake, framing), `receiver` (apply on the owners, a frame's
//!   renames claimed as local ones are), `sender` (push
//!   from the changelog, resync, trimming), `housekeeping`; the status for
//!   `ctl replication`, the replica update vector and the peer's settled
//!   CSN (`replication-settled` in the data directory) in `mod.rs`.
//! - `verify`: mirror mode's anti-entropy check (partition digests
//!   compared with the peer's, a difference resynced).
//! - `glue`: a parent the peer deleted while children were added below it
//!   here comes back as a glue entry, the same on both servers; entries
//!   left below a DN the peer renamed away follow it to its new DN.
//! - `conn`: framing with PDU limits and the partial-request timeout, read
//!   loop (through the shard's one read buffer, `SCRATCH`), `Reservation` (a search's room in the writer's queue, taken
//!   before each entry is encoded), `Identity`, answers written to a
//!   plain socket in place while the writer holds none (`send_now`);
//!   `conn/writer`: the writer
//!   task (its queue bounded in frames and bytes, drained when the client
//!   is gone, coalesced into one write); `conn/room`: that
//!   room, beyond a small share drawn from the shard's budget
//!   (`limits.max_queued_bytes`); `conn/intake`: what running operations
//!   hold of their requests, bounded per connection and per shard before
//!   a request is decoded (`limits.max_pending_bytes`); `conn/registry`:
//!   what the admin thread sees of each connection (`ConnInfo`) and the
//!   `Registry` of them.
//! - `ber`: direct BER encoding of search entries and plain results (lengths
//!   first, then written into room made once); PDU header peeking.
//! - `strict`: every byte of an LDAPMessage checked before ldap3_proto
//!   decodes it (envelope, BER well-formedness, message IDs);
//!   `strict/controls`: the controls field, and controls slapd would
//!   ignore left out of it.
//! - `decode`: the checked message into ldap3_proto's types, fields that
//!   are not UTF-8 kept as `shards::octets` carries them; `decode/direct`,
//!   the hot requests without controls read straight from the octets.
//! - `ops/`: one file per LDAP operation (`bind`, `search` (a folder:
//!   the request, `limits`, `walk` (the stores' candidates, chunk by
//!   chunk), `scope`, `emit`, `select`), `add`, `modify`, `delete`,
//!   `modify_dn`, `compare`, `abandon`, `extended`),
//!   plus `syncrepl` (the RFC 4533 provider on the changelog: `cookie`,
//!   `refresh`, `persist`),
//!   `rootdse` (root DSE), `sasl` (SASL EXTERNAL binds on ldapi),
//!   `controls` (request/response controls; `controls/read`: where each
//!   applies and how each value is read, shared with the strict check),
//!   `paging`, `sort` and `vlv` (search controls), `referral` (referral
//!   objects) and `alias` (alias dereferencing), and `mod.rs` (dispatch
//!   and the one place errors become responses); `record`: the one match
//!   over request types (`stats::Op::of`: metrics, access log, controls,
//!   admission, error responses). `modify_dn` also holds
//!   the renames across owners (intent, carry, resumption at start);
//!   `carries` keeps the writes and searches they must not cross.
//! - `shards` (crate): everything a shard owns: DNs, entries, filters,
//!   stores, write ops, routing, the mesh and group commit. This crate
//!   reaches the stores only through `shards::Stores` (snapshots to read)
//!   and writes through the owner's group commit (`shards::writes`); it
//!   names an engine only by kind (`shards::EngineKind`, the manifest's
//!   choice at open), never opens a write transaction, and cannot name
//!   a tree (`shards`'s `store` is private to it).
//!   Writes around group commit (offline tools' batches, bulk loads, the
//!   start-up notes) take `shards::Offline`, which a server has only
//!   until it serves (`Offline::serve`).
//!
//! ## Architecture invariants
//!
//! 1. A connection stays on the shard that accepted it.
//! 2. Only a partition's owner writes it; other shards read snapshots.
//! 3. Values cross cores only as mesh messages. No lock is taken between
//!    shards on the request path. What shards do share, each justified:
//!    - per-shard counts read by the others (`listener::ShardCount`:
//!      open connections, summed for `limits.max_connections`, cn=Monitor
//!      and `ctl status`), each store's commit floor and commit count and
//!      each shard's readers waiting for a commit (`shards::shard::Floors`), the
//!      live settings (an `ArcSwap`, loaded per request, stored by reload);
//!    - locks taken only by rare work: the per-IP counts (striped, only
//!      with `limits.max_connections_per_ip`, once per connection open and
//!      close: a per-IP cap is process-wide by nature), the running
//!      subtree renames (`ops::carries`: per write and per one-level or
//!      subtree search, two stores to the shard's own lane and one load,
//!      per entry a search sends one load of it; locked only while a
//!      rename runs, by a search it overtook, and by the replication
//!      sender, which holds back changes stamped since one began), a mirror pair's settled
//!      CSN of the peer (`repl::Link`, read by syncrepl rounds on a
//!      server of a pair, written per replication frame), relaxed entryUUID claims
//!      (`claimed_uuids`, root's Relax writes only), the park `Gate` while
//!      an LMDB map grows;
//!    - LMDB's reader table is not among them: each thread keeps its
//!      reset read transactions per store and renews them
//!      (`shards`'s `store::lmdb`), so a read takes no reader-table mutex;
//!      only a thread's first reads of a store (or a thread past the
//!      pooled ones) begin a transaction under it.
//!    Between a shard and the admin thread (never another shard): the
//!    connection registry's per-shard maps (locked by the shard only at
//!    open and close), mirror mode's status (`repl::Link`), the LMDB
//!    `outside` lock (backups), the listening sockets (`drain`).
//!    A connection's identity for `ctl connections` is an `ArcSwap`,
//!    stored only by a bind that changes it.
//! 4. No storage transaction is held across an `.await`.
//! 5. A request's error becomes its LDAP result code; only a codec error or
//!    an Unbind closes a connection.
//! 6. A write is acknowledged only once durable under `storage.sync`.

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod uring;

/// Whether `uring` gives glommio's rings `COOP_TASKRUN`.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn coop_taskrun() -> bool {
    server::URING_COOP_TASKRUN.load(std::sync::atomic::Ordering::Relaxed)
}

use coredir::{acl, backup, config, export, import, reindex, server};

use anyhow::Result;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(name = "coredir", version, about = "A thread-per-core LDAPv3 directory server")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve LDAP (creates the database on first start).
    Serve {
        /// TOML configuration file; every key has a default.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Listen address, overriding server.listen.
        #[arg(long)]
        listen: Option<String>,
        /// Data directory, overriding server.data.
        #[arg(long)]
        data: Option<PathBuf>,
        /// Number of shards (reactors), overriding server.shards.
        #[arg(long)]
        shards: Option<usize>,
        /// Serve with one shard per CPU of this NUMA node.
        #[arg(long)]
        numa_node: Option<usize>,
    },
    /// Load an LDIF file offline (like slapadd); creates the database when
    /// the data directory is empty.
    Import {
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long)]
        data: Option<PathBuf>,
        #[arg(long)]
        shards: Option<usize>,
        /// The LDIF file (content records only).
        file: PathBuf,
    },
    /// Write the directory as LDIF (like slapcat), offline or while serving.
    Export {
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long)]
        data: Option<PathBuf>,
        /// Output file; standard output by default.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Leave out operational attributes (entryUUID, timestamps, ...).
        #[arg(long)]
        no_operational: bool,
    },
    /// Copy the whole database into a new directory (while serving, with LMDB).
    Backup {
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long)]
        data: Option<PathBuf>,
        /// A new or empty directory; it becomes a data directory.
        dest: PathBuf,
    },
    /// Copy a backup into an empty data directory (offline).
    Restore {
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long)]
        data: Option<PathBuf>,
        /// A directory written by `coredir backup`.
        backup: PathBuf,
    },
    /// Change the number of shards of a database (offline).
    Reshard {
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long)]
        data: Option<PathBuf>,
        /// The new number of shards.
        #[arg(long)]
        shards: usize,
    },
    /// Print a userPassword hash (like slappasswd); reads the password from
    /// standard input when it is not given.
    HashPassword {
        /// The scheme, e.g. '{PBKDF2-SHA512}' (the default), '{SSHA}', '{ARGON2}'.
        #[arg(long, default_value = shards::password::DEFAULT_SCHEME)]
        scheme: String,
        password: Option<String>,
    },
    /// Talk to a running server through its admin socket.
    Ctl {
        /// The admin socket; default: server.admin_socket of --config, or
        /// admin.sock in the default data directory.
        #[arg(long)]
        socket: Option<PathBuf>,
        #[arg(long)]
        config: Option<PathBuf>,
        /// Print the server's JSON answer instead of text.
        #[arg(long, global = true)]
        json: bool,
        #[command(subcommand)]
        command: CtlCommand,
    },
    /// Configuration tools.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// The schema in use (built-in and `schema.files`).
    Schema {
        #[command(subcommand)]
        command: SchemaCommand,
    },
    /// Deployment tools.
    Deploy {
        #[command(subcommand)]
        command: DeployCommand,
    },
    /// Access control tools.
    Acl {
        #[command(subcommand)]
        command: AclCommand,
    },
    /// Rebuild the indexes offline after `[indexes]` changed (like slapindex).
    Reindex {
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long)]
        data: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum CtlCommand {
    /// Version, uptime, shards, connections, operations per second, data size.
    Status,
    /// Per shard: CPU, partitions, entries, connections, operations, mesh, commits.
    Shards,
    /// Open connections; `connections kill ID` closes one.
    Connections {
        #[command(subcommand)]
        action: Option<ConnAction>,
    },
    /// The Prometheus text exposition.
    Metrics,
    /// Show or set the access log level (off, stats, debug).
    LogLevel { level: Option<String> },
    /// Re-read the configuration file and apply what can change live.
    Reload,
    /// Stop accepting and wait for running operations (up to --deadline seconds).
    Drain {
        #[arg(long, default_value_t = 30)]
        deadline: u64,
    },
    /// Sync and exit.
    Shutdown,
    /// Copy the database into DIR while serving (like `coredir backup`).
    Backup { dir: PathBuf },
    /// Mirror mode: the peer, each direction's state, backlog, lag, refused
    /// records; `replication conflicts` lists the conflict entries.
    Replication {
        #[command(subcommand)]
        what: Option<ReplicationWhat>,
    },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Validate a configuration file without starting (schema files,
    /// access rules, limits, TLS files included); exits 1 on the first error.
    Check { file: PathBuf },
}

#[derive(Subcommand)]
enum SchemaCommand {
    /// Print it in OpenLDAP's .schema syntax, for a slapd that replicates
    /// from coredir: `include` it after the slapd's own schema files, named
    /// with `--skip` so that what they define is left out.
    Export {
        #[arg(long)]
        config: Option<PathBuf>,
        /// Include the definitions slapd hardcodes (for other servers).
        #[arg(long)]
        all: bool,
        /// A schema file the consumer loads already (repeatable).
        #[arg(long)]
        skip: Vec<PathBuf>,
    },
}

#[derive(Subcommand)]
enum DeployCommand {
    /// Print one configuration per NUMA node of this machine.
    Plan {
        /// Where the NUMA topology is read.
        #[arg(long, default_value = coredir::deploy::SYS_NODES)]
        sys: PathBuf,
        #[arg(long, default_value = "0.0.0.0")]
        listen_host: String,
        /// Node i listens on base-port + i.
        #[arg(long, default_value_t = 389)]
        base_port: u16,
        #[arg(long, default_value = "/var/lib/coredir")]
        data_root: PathBuf,
        /// Where the admin sockets go.
        #[arg(long, default_value = "/run/coredir")]
        run_dir: PathBuf,
    },
}

#[derive(Subcommand)]
enum ReplicationWhat {
    /// Entries that lost their DN to an older entry added on the peer.
    Conflicts,
}

#[derive(Subcommand)]
enum ConnAction {
    Kill { id: u64 },
}

#[derive(Subcommand)]
enum AclCommand {
    /// Print one access decision and the rule that made it (like slapacl);
    /// exits 0 when granted, 1 when denied.
    Check {
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long)]
        data: Option<PathBuf>,
        /// The requester's DN ('anonymous' or '' for none).
        #[arg(long = "as")]
        as_dn: String,
        /// The entry's DN.
        #[arg(long)]
        entry: String,
        /// An attribute type, or the pseudo-attributes 'entry' and 'children'.
        #[arg(long)]
        attr: String,
        /// none, disclose, auth, compare, search, read, write or manage.
        #[arg(long)]
        level: String,
        /// Decide as over TLS with this security strength.
        #[arg(long, default_value_t = 0)]
        tls_ssf: u32,
    },
}

fn main() {
    // Everything coredir writes (stores, manifest, backups, exports) holds
    // password hashes: private to the owner from the first byte.
    // SAFETY: umask only sets the process's file-creation mask.
    unsafe { libc::umask(0o077) };
    if let Err(e) = run(Cli::parse()) {
        eprintln!("coredir: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Serve { config, listen, data, shards, numa_node } => {
            let mut config = load_config(config, data, shards)?;
            if let Some(listen) = listen {
                config.server.listen = listen;
            }
            if numa_node.is_some() {
                config.server.numa_node = numa_node;
            }
            server::serve(config)
        }
        Command::Import { config, data, shards, file } => import::run(load_config(config, data, shards)?, &file),
        Command::Export { config, data, out, no_operational } => {
            export::run(load_config(config, data, None)?, out.as_deref(), !no_operational)
        }
        Command::Reindex { config, data } => reindex::run(load_config(config, data, None)?),
        Command::HashPassword { scheme, password } => hash_password(&scheme, password),
        Command::Backup { config, data, dest } => backup::backup(load_config(config, data, None)?, &dest),
        Command::Restore { config, data, backup } => backup::restore(load_config(config, data, None)?, &backup),
        Command::Reshard { config, data, shards } => backup::reshard(load_config(config, data, None)?, shards),
        Command::Config { command: ConfigCommand::Check { file } } => {
            let config = config::Config::load(Some(&file))?;
            config.install_schema()?;
            config.validate()?;
            config.acl()?;
            if let (Some(_), Some(_)) = (&config.tls.certificate_file, &config.tls.key_file) {
                coredir::tls::Tls::load(&config.tls)?;
            }
            println!("{}: OK", file.display());
            Ok(())
        }
        Command::Schema { command: SchemaCommand::Export { config, all, skip } } => {
            let config = config::Config::load(config.as_deref())?;
            config.install_schema()?;
            let mut known = Vec::new();
            for file in &skip {
                let text =
                    std::fs::read_to_string(file).map_err(|e| anyhow::anyhow!("--skip {}: {e}", file.display()))?;
                known.extend(coredir::schema_export::defined_in(&text));
            }
            print!("{}", coredir::schema_export::openldap(all, &known));
            Ok(())
        }
        Command::Deploy { command: DeployCommand::Plan { sys, listen_host, base_port, data_root, run_dir } } => {
            let o = coredir::deploy::PlanOptions { sys, listen_host, base_port, data_root, run_dir };
            print!("{}", coredir::deploy::plan(&o)?);
            Ok(())
        }
        Command::Ctl { socket, config, json, command } => {
            let socket = match socket {
                Some(s) => s,
                None => config::Config::load(config.as_deref())?.admin_socket(),
            };
            use coredir::admin::Request;
            let req = match command {
                CtlCommand::Status => Request::Status,
                CtlCommand::Shards => Request::Shards,
                CtlCommand::Connections { action: None } => Request::Connections,
                CtlCommand::Connections { action: Some(ConnAction::Kill { id }) } => Request::Kill { id },
                CtlCommand::Metrics => Request::Metrics,
                CtlCommand::LogLevel { level } => Request::LogLevel { level },
                CtlCommand::Reload => Request::Reload,
                CtlCommand::Drain { deadline } => Request::Drain { deadline_s: Some(deadline) },
                CtlCommand::Shutdown => Request::Shutdown,
                CtlCommand::Backup { dir } => Request::Backup { dir: std::path::absolute(dir)? },
                CtlCommand::Replication { what: None } => Request::Replication,
                CtlCommand::Replication { what: Some(ReplicationWhat::Conflicts) } => Request::Conflicts,
            };
            if !coredir::admin::ctl(&socket, req, json)? {
                std::process::exit(1);
            }
            Ok(())
        }
        Command::Acl { command: AclCommand::Check { config, data, as_dn, entry, attr, level, tls_ssf } } => {
            let config = load_config(config, data, None)?;
            let req = acl::check::Request { as_dn, entry, attr, level, tls_ssf };
            if !acl::check::run(&config, &req)? {
                std::process::exit(1);
            }
            Ok(())
        }
    }
}

fn hash_password(scheme: &str, password: Option<String>) -> Result<()> {
    let password = match password {
        Some(p) => p,
        None => {
            let mut line = String::new();
            std::io::stdin().read_line(&mut line)?;
            line.trim_end_matches(['\n', '\r']).to_string()
        }
    };
    if password.is_empty() {
        anyhow::bail!("the password is empty");
    }
    println!("{}", shards::password::hash(scheme, password.as_bytes()).map_err(|e| anyhow::anyhow!(e))?);
    Ok(())
}

/// The configuration file (or the defaults) with the common flags on top.
fn load_config(file: Option<PathBuf>, data: Option<PathBuf>, shards: Option<usize>) -> Result<config::Config> {
    let mut config = config::Config::load(file.as_deref())?;
    if let Some(data) = data {
        config.server.data = data;
    }
    if let Some(shards) = shards {
        if shards == 0 {
            anyhow::bail!("--shards: must be at least 1");
        }
        config.server.shards = shards;
    }
    config.install_schema()?;
    Ok(config)
}
