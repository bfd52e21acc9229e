//! The admin socket: a Unix socket (mode 0600) speaking newline-delimited
//! JSON, one `Request` per line answered by one `Response` line, and
//! `coredir ctl`, its client.
//!
//! The socket is served by a thread of its own, never by a reactor: what
//! it reads is shared already (metrics through the Prometheus handle, the
//! connection registry, the stores' snapshots), and what it changes reaches
//! the shards through the live-settings generation (`reload`), the
//! listening sockets (`drain`) and the connections' own descriptors
//! (`connections kill`). SIGTERM and SIGHUP go through the same functions.

use crate::accesslog::{self, LogLevel};
use crate::config::Config;
use crate::ctx::{Live, Shared};
use crate::stats::{Op, Snapshot};
use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
use shards::manifest::Manifest;
use shards::ReadTxn;
use shards::Stores;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "kebab-case")]
pub enum Request {
    Status,
    Shards,
    Connections,
    Kill { id: u64 },
    Metrics,
    LogLevel { level: Option<String> },
    Reload,
    Drain { deadline_s: Option<u64> },
    Shutdown,
    Backup { dir: PathBuf },
    Replication,
    Conflicts,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Response {
    Status(Status),
    Shards { shards: Vec<ShardStatus> },
    Connections { connections: Vec<Connection> },
    Killed { id: u64 },
    Metrics { text: String },
    LogLevel { level: String },
    Reloaded { applied: Vec<String>, needs_restart: Vec<String> },
    Drained { in_flight: u64, connections: usize },
    ShuttingDown,
    BackedUp { dir: PathBuf },
    Replication(crate::repl::Status),
    Conflicts { conflicts: Vec<Conflict> },
    Error { message: String },
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Status {
    pub version: String,
    pub uptime_s: u64,
    pub server_id: u32,
    pub numa_node: Option<usize>,
    pub shards: usize,
    pub connections: usize,
    pub operations: u64,
    pub ops_per_s: f64,
    pub data_bytes: u64,
    pub draining: bool,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct ShardStatus {
    pub shard: usize,
    pub cpu: usize,
    pub partitions: usize,
    pub entries: u64,
    pub connections: usize,
    /// Operations initiated, by type (`search`, `bind`, ...).
    pub operations: std::collections::BTreeMap<String, u64>,
    pub mesh_sent: u64,
    pub mesh_received: u64,
    pub write_queue: u64,
    pub commit_batches: u64,
    pub mean_batch: f64,
    pub mean_sync_ms: f64,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Connection {
    pub id: u64,
    pub shard: usize,
    pub peer: String,
    pub identity: String,
    pub operations: u64,
    pub idle_s: u64,
    /// Operations running now (searches, writes, a bind being checked).
    #[serde(default)]
    pub running: u64,
}

/// What the admin thread works with.
pub struct Admin {
    pub config: Mutex<Config>,
    pub shared: Arc<Shared>,
    pub manifest: Arc<Manifest>,
    pub stores: Stores,
    pub cpus: Vec<usize>,
    pub started: Instant,
    /// The last operations-per-second sample (see `sample`).
    pub rate: Mutex<(Instant, u64, f64)>,
}

impl Admin {
    pub fn handle(&self, req: Request) -> Response {
        match self.try_handle(req) {
            Ok(r) => r,
            Err(e) => Response::Error { message: format!("{e:#}") },
        }
    }

    fn try_handle(&self, req: Request) -> Result<Response> {
        Ok(match req {
            Request::Status => Response::Status(self.status()),
            Request::Shards => Response::Shards { shards: self.shards()? },
            Request::Connections => Response::Connections { connections: self.connections() },
            Request::Kill { id } => {
                let conn = self.shared.connections.all().into_iter().find(|c| c.id == id);
                match conn {
                    Some(c) if c.kill() => Response::Killed { id },
                    Some(_) => bail!("connection {id} cannot be killed (a local-socket connection)"),
                    None => bail!("no connection {id}"),
                }
            }
            Request::Metrics => Response::Metrics { text: crate::stats::render() },
            Request::LogLevel { level } => {
                if let Some(l) = level {
                    let parsed = LogLevel::parse(&l).ok_or_else(|| anyhow!("{l:?} is not off, stats or debug"))?;
                    accesslog::set_level(parsed);
                }
                Response::LogLevel { level: accesslog::level().name().into() }
            }
            Request::Reload => self.reload()?,
            Request::Drain { deadline_s } => self.drain(Duration::from_secs(deadline_s.unwrap_or(30))),
            Request::Shutdown => Response::ShuttingDown,
            Request::Replication => {
                if !self.config.lock().unwrap_or_else(|e| e.into_inner()).replication.enabled() {
                    bail!("mirror mode is off (no [replication] listen and peer)");
                }
                let mut status = self.shared.replication.snapshot();
                status.changelog_records = self.changelog_records()?;
                Response::Replication(status)
            }
            Request::Conflicts => Response::Conflicts { conflicts: self.conflicts()? },
            Request::Backup { dir } => {
                let config = self.config.lock().unwrap_or_else(|e| e.into_inner()).clone();
                crate::backup::backup_from(&config, &self.manifest, &self.stores, &dir)?;
                Response::BackedUp { dir }
            }
        })
    }

    fn operations(snap: &Snapshot) -> u64 {
        snap.sum("coredir_operations_completed_total", &[]) as u64
    }

    /// Called every second by the signal thread: the operations rate.
    pub fn sample(&self) {
        let total = Self::operations(&Snapshot::take());
        let mut rate = self.rate.lock().unwrap_or_else(|e| e.into_inner());
        let secs = rate.0.elapsed().as_secs_f64();
        if secs > 0.0 {
            *rate = (Instant::now(), total, total.saturating_sub(rate.1) as f64 / secs);
        }
    }

    fn status(&self) -> Status {
        let snap = Snapshot::take();
        let config = self.config.lock().unwrap_or_else(|e| e.into_inner());
        Status {
            version: env!("CARGO_PKG_VERSION").into(),
            uptime_s: self.started.elapsed().as_secs(),
            server_id: config.server.id,
            numa_node: config.server.numa_node,
            shards: self.stores.len(),
            connections: self.shared.connections.total(),
            operations: Self::operations(&snap),
            ops_per_s: self.rate.lock().unwrap_or_else(|e| e.into_inner()).2,
            data_bytes: self.stores.iter().map(|s| s.size()).sum(),
            draining: self.shared.draining.load(Ordering::Relaxed),
        }
    }

    fn shards(&self) -> Result<Vec<ShardStatus>> {
        let snap = Snapshot::take();
        let mut out = Vec::new();
        for i in 0..self.stores.len() {
            let s = i.to_string();
            let shard = [("shard", s.as_str())];
            let operations = Op::ALL
                .iter()
                .map(|op| {
                    let n = snap.sum("coredir_operations_initiated_total", &[("shard", &s), ("op", op.label())]);
                    (op.label().to_string(), n as u64)
                })
                .collect();
            let batches = snap.sum("coredir_commit_batch_size_count", &shard);
            let per = |name: &str| {
                let count = snap.sum(&format!("{name}_count"), &shard);
                if count > 0.0 {
                    snap.sum(&format!("{name}_sum"), &shard) / count
                } else {
                    0.0
                }
            };
            out.push(ShardStatus {
                shard: i,
                cpu: self.cpus[i % self.cpus.len()],
                partitions: self.manifest.owners.iter().filter(|o| **o as usize == i).count(),
                entries: self.stores.read_outside(i, |txn| txn.count_entries()).map_err(|e| anyhow!(e.message))?,
                connections: self.shared.connections.count(i),
                operations,
                mesh_sent: snap.sum("coredir_mesh_messages_sent_total", &shard) as u64,
                mesh_received: snap.sum("coredir_mesh_messages_received_total", &shard) as u64,
                write_queue: snap.sum("coredir_write_queue_depth", &shard).max(0.0) as u64,
                commit_batches: batches as u64,
                mean_batch: per("coredir_commit_batch_size"),
                mean_sync_ms: per("coredir_commit_seconds") * 1000.0,
            });
        }
        Ok(out)
    }

    fn connections(&self) -> Vec<Connection> {
        self.shared
            .connections
            .all()
            .into_iter()
            .map(|c| Connection {
                id: c.id,
                shard: c.shard,
                peer: c.peer.clone(),
                identity: c.identity.load().to_string(),
                operations: c.ops.load(Ordering::Relaxed),
                idle_s: c.idle_s(),
                running: c.in_flight.load(Ordering::Relaxed),
            })
            .collect()
    }

    /// Re-reads the configuration file and applies what can change live;
    /// an invalid file changes nothing.
    pub fn reload(&self) -> Result<Response> {
        let mut current = self.config.lock().unwrap_or_else(|e| e.into_inner());
        let Some(path) = current.source.clone() else {
            bail!("the server was started without --config: there is no file to reload");
        };
        let mut new = Config::load(Some(&path))?;
        // What came from the command line stays.
        new.server.listen = current.server.listen.clone();
        new.server.data = current.server.data.clone();
        new.server.shards = current.server.shards;
        new.server.numa_node = current.server.numa_node;
        new.validate().map_err(|e| anyhow!("{}: {e:#}; nothing was changed", path.display()))?;
        let live = Live::from_config(&new).map_err(|e| anyhow!("{}: {e:#}; nothing was changed", path.display()))?;
        let level = new.log_level()?;
        let mut applied = vec!["limits".to_string(), "access".into(), "log.level".into()];
        if let Some(tls) = &self.shared.tls {
            tls.reload().map_err(|e| anyhow!("{e:#}; nothing was changed"))?;
            applied.push("tls certificates".into());
        }
        self.shared.live.store(Arc::new(live));
        self.shared.generation.fetch_add(1, Ordering::AcqRel);
        accesslog::set_level(level);
        shards::filter::set_assertion_tests(new.limits.max_filter_tests);
        let needs_restart = restart_keys(&current, &new);
        *current = new;
        Ok(Response::Reloaded { applied, needs_restart })
    }

    /// Stops accepting, refuses new operations and waits (up to `deadline`)
    /// for the running ones.
    pub fn drain(&self, deadline: Duration) -> Response {
        self.shared.draining.store(true, Ordering::Relaxed);
        // Taken, not read: once shut, an accept loop ends and closes its
        // socket, and a second drain (`ctl drain`, then SIGTERM) must not
        // shut whatever descriptor took the number since.
        let listeners = std::mem::take(&mut *self.shared.listeners.lock().unwrap_or_else(|e| e.into_inner()));
        for fd in listeners {
            // SAFETY: shutdown on a listening socket that is open until this shuts it.
            unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
        }
        let until = Instant::now() + deadline;
        loop {
            let in_flight: u64 =
                self.shared.connections.all().iter().map(|c| c.in_flight.load(Ordering::Relaxed)).sum();
            if in_flight == 0 || Instant::now() >= until {
                return Response::Drained { in_flight, connections: self.shared.connections.all().len() };
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Syncs every store and ends the process with status 0.
    pub fn exit(&self) -> ! {
        if let Err(e) = self.stores.sync() {
            eprintln!("coredir: shutdown: sync failed: {e}");
        }
        // The shards hand their log buffers over every 100 ms.
        std::thread::sleep(accesslog::FLUSH_EVERY * 3);
        let _ = std::fs::remove_file(self.config.lock().unwrap_or_else(|e| e.into_inner()).admin_socket());
        eprintln!("coredir: stopped");
        std::process::exit(0);
    }
}

/// Keys that changed but only take effect at the next start.
fn restart_keys(old: &Config, new: &Config) -> Vec<String> {
    let mut keys = Vec::new();
    let mut check = |name: &str, changed: bool| {
        if changed {
            keys.push(name.to_string());
        }
    };
    check("server.backlog", old.server.backlog != new.server.backlog);
    check("server.ldapi", old.server.ldapi != new.server.ldapi);
    check("server.authz_regexp", old.server.authz_regexp != new.server.authz_regexp);
    check("storage", format!("{:?}", old.storage) != format!("{:?}", new.storage));
    check("tls.listen", old.tls.listen != new.tls.listen);
    // The CA file itself is re-read on reload; which file, and whether
    // certificates are asked for, is fixed at start.
    check("tls.verify_client", old.tls.verify_client != new.tls.verify_client);
    check("tls.ca_certificate_file", old.tls.ca_certificate_file != new.tls.ca_certificate_file);
    check("tls.crl_file", old.tls.crl_file != new.tls.crl_file);
    check("passwords", format!("{:?}", old.passwords) != format!("{:?}", new.passwords));
    check("indexes", old.indexes != new.indexes);
    check("limits.max_queued_bytes", old.limits.max_queued_bytes != new.limits.max_queued_bytes);
    check(
        "limits.max_queued_bytes_per_connection",
        old.limits.max_queued_bytes_per_connection != new.limits.max_queued_bytes_per_connection,
    );
    check("limits.max_pending_bytes", old.limits.max_pending_bytes != new.limits.max_pending_bytes);
    check("schema", old.schema.files != new.schema.files);
    check("log.file", old.log.file != new.log.file || old.log.format != new.log.format);
    keys
}

/// A conflict entry (`ctl replication conflicts`).
#[derive(Debug, Serialize, Deserialize)]
pub struct Conflict {
    pub dn: String,
    pub lost: String,
    pub entry_uuid: String,
    /// A glue entry (`crate::glue`) rather than a DN conflict's loser.
    #[serde(default)]
    pub glue: bool,
}

impl Admin {
    /// Records in the changelogs of every store.
    fn changelog_records(&self) -> Result<u64> {
        (0..self.stores.len())
            .map(|i| self.stores.read_outside(i, |txn| shards::changelog::count_records(txn)))
            .sum::<shards::Result<u64>>()
            .map_err(|e| anyhow!(e.message))
    }

    /// Every entry marked as a DN conflict's loser, from the stores' states.
    fn conflicts(&self) -> Result<Vec<Conflict>> {
        let mut out = Vec::new();
        for i in 0..self.stores.len() {
            self.stores
                .read_outside(i, |txn| {
                    shards::changelog::states(txn, None, &mut |partition, uuid, v| {
                        let partition = Some(partition as u32);
                        if let Some(state) = shards::merge::decode_state(v) {
                            // Once, from the partition that shows it (a rename
                            // leaves a copy of the state where it was).
                            let here = |dn: &str| {
                                shards::dn::Dn::parse(dn).ok().map(|d| self.manifest.partition_of(&d.key()))
                                    == partition
                            };
                            let dn = state.shown_dn(&uuid).filter(|dn| state.in_conflict() && here(dn));
                            let entry_uuid = || uuid::Uuid::from_bytes(uuid).hyphenated().to_string();
                            if let (Some((lost, _)), Some(dn), None) = (&state.conflict, dn, state.deleted) {
                                out.push(Conflict { dn, lost: lost.clone(), entry_uuid: entry_uuid(), glue: false });
                            } else if let Some(e) = shards::merge::materialize(&state, &uuid) {
                                if e.has_value("objectClass", b"glue") && here(&e.dn) {
                                    out.push(Conflict {
                                        dn: e.dn,
                                        lost: String::new(),
                                        entry_uuid: entry_uuid(),
                                        glue: true,
                                    });
                                }
                            }
                        }
                        true
                    })
                })
                .map_err(|e| anyhow!(e.message))?;
        }
        Ok(out)
    }
}

/// Binds the admin socket (refusing one a live server answers on) and
/// serves it from a thread of its own.
pub fn start(admin: Arc<Admin>, path: &Path) -> Result<()> {
    let listener = crate::listener::unix_socket(path, 0o600, "the admin socket")?;
    std::thread::Builder::new().name("admin".into()).spawn(move || {
        for stream in listener.incoming().flatten() {
            let admin = admin.clone();
            let _ = std::thread::Builder::new().name("admin-conn".into()).spawn(move || serve(&admin, stream));
        }
    })?;
    Ok(())
}

fn serve(admin: &Admin, stream: UnixStream) {
    let Ok(mut writer) = stream.try_clone() else { return };
    for line in BufReader::new(stream).lines() {
        let Ok(line) = line else { return };
        if line.trim().is_empty() {
            continue;
        }
        let (resp, exit) = match serde_json::from_str::<Request>(&line) {
            Ok(Request::Shutdown) => (Response::ShuttingDown, true),
            Ok(req) => (admin.handle(req), false),
            Err(e) => (Response::Error { message: format!("not a request: {e}") }, false),
        };
        let mut text = serde_json::to_string(&resp).unwrap_or_default();
        text.push('\n');
        let _ = writer.write_all(text.as_bytes());
        if exit {
            let _ = writer.flush();
            admin.exit();
        }
    }
}

/// SIGTERM drains (30 s) and exits 0; SIGHUP reloads; every second the
/// operations rate is sampled and histogram upkeep runs.
pub fn signals(admin: Arc<Admin>) -> Result<()> {
    use signal_hook::consts::{SIGHUP, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGHUP, SIGTERM])?;
    let sampler = admin.clone();
    std::thread::Builder::new().name("signals".into()).spawn(move || {
        for sig in signals.forever() {
            match sig {
                SIGHUP => match admin.reload() {
                    Ok(_) => eprintln!("coredir: SIGHUP: configuration reloaded"),
                    Err(e) => eprintln!("coredir: SIGHUP: reload refused: {e:#}"),
                },
                _ => {
                    eprintln!("coredir: SIGTERM: draining");
                    admin.drain(Duration::from_secs(30));
                    admin.exit();
                }
            }
        }
    })?;
    let sizes: Vec<metrics::Gauge> =
        (0..sampler.stores.len()).map(|i| crate::stats::gauge("coredir_data_bytes", i)).collect();
    std::thread::Builder::new().name("sampler".into()).spawn(move || loop {
        std::thread::sleep(Duration::from_secs(1));
        crate::stats::upkeep();
        sampler.sample();
        for (gauge, store) in sizes.iter().zip(sampler.stores.iter()) {
            gauge.set(store.size() as f64);
        }
    })?;
    Ok(())
}

/// `coredir ctl`: sends one request and prints the response.
pub fn ctl(socket: &Path, req: Request, json: bool) -> Result<bool> {
    let mut stream =
        UnixStream::connect(socket).with_context(|| format!("connecting to the admin socket {}", socket.display()))?;
    let mut line = serde_json::to_string(&req)?;
    line.push('\n');
    stream.write_all(line.as_bytes())?;
    let mut reply = String::new();
    BufReader::new(stream).read_line(&mut reply)?;
    if reply.is_empty() {
        bail!("the server closed the admin connection without answering");
    }
    let resp: Response = serde_json::from_str(&reply).with_context(|| format!("unreadable answer {reply:?}"))?;
    let ok = !matches!(resp, Response::Error { .. });
    if json {
        print!("{reply}");
    } else {
        print_human(&resp);
    }
    Ok(ok)
}

fn print_human(resp: &Response) {
    match resp {
        Response::Conflicts { conflicts } => {
            for c in conflicts {
                match c.glue {
                    true => println!("{}\tglue\tentryUUID {}", c.dn, c.entry_uuid),
                    false => println!("{}\tlost {}\tentryUUID {}", c.dn, c.lost, c.entry_uuid),
                }
            }
        }
        Response::Replication(r) => {
            println!("peer          {}", r.peer);
            println!(
                "sending       {} ({} records sent, backlog {}, lag {:.1} s)",
                r.outbound, r.records_sent, r.backlog, r.lag_s
            );
            println!("receiving     {} ({} records applied)", r.inbound, r.records_applied);
            if !r.backlog_by_partition.is_empty() {
                let parts: Vec<String> = r.backlog_by_partition.iter().map(|(p, n)| format!("{p}:{n}")).collect();
                println!("backlog by partition  {}", parts.join(" "));
            }
            println!("changelog     {} records", r.changelog_records);
            if r.forced_trims > 0 || r.partitions_resynced > 0 {
                println!(
                    "size cap      {} records trimmed before the peer held them, {} partitions resynced",
                    r.forced_trims, r.partitions_resynced
                );
            }
            if r.partitions_verified + r.verify_unsettled + r.divergences > 0 {
                println!(
                    "verified      {} partition checks agreed, {} without a verdict (records in flight), {} diverged",
                    r.partitions_verified, r.verify_unsettled, r.divergences
                );
            }
            if !r.last_divergence.is_empty() {
                println!("divergence    {}", r.last_divergence);
            }
            if r.peer_silent_s >= 0.0 {
                println!("peer heard    {:.1} s ago", r.peer_silent_s);
            }
            if !r.outbound_error.is_empty() {
                println!("send error    {}", r.outbound_error);
            }
            if !r.inbound_error.is_empty() {
                println!("receive error {}", r.inbound_error);
            }
            for c in &r.refused {
                println!("refused       {c}");
            }
        }
        Response::Status(s) => {
            println!("version      {}", s.version);
            println!("uptime       {} s", s.uptime_s);
            println!("server id    {}", s.server_id);
            println!("NUMA node    {}", s.numa_node.map_or("-".to_string(), |n| n.to_string()));
            println!("shards       {}", s.shards);
            println!("connections  {}", s.connections);
            println!("operations   {} ({:.0}/s)", s.operations, s.ops_per_s);
            println!("data         {:.1} MiB", s.data_bytes as f64 / (1 << 20) as f64);
            if s.draining {
                println!("draining");
            }
        }
        Response::Shards { shards } => {
            println!(
                "{:>5} {:>4} {:>5} {:>9} {:>5} {:>10} {:>10} {:>9} {:>9} {:>6} {:>8} {:>8}",
                "shard",
                "cpu",
                "parts",
                "entries",
                "conns",
                "searches",
                "binds",
                "mesh-out",
                "mesh-in",
                "queue",
                "batch",
                "sync-ms"
            );
            for s in shards {
                println!(
                    "{:>5} {:>4} {:>5} {:>9} {:>5} {:>10} {:>10} {:>9} {:>9} {:>6} {:>8.1} {:>8.2}",
                    s.shard,
                    s.cpu,
                    s.partitions,
                    s.entries,
                    s.connections,
                    s.operations.get("search").unwrap_or(&0),
                    s.operations.get("bind").unwrap_or(&0),
                    s.mesh_sent,
                    s.mesh_received,
                    s.write_queue,
                    s.mean_batch,
                    s.mean_sync_ms
                );
            }
        }
        Response::Connections { connections } => {
            println!("{:>8} {:>5} {:<24} {:>6} {:>6}  identity", "id", "shard", "peer", "ops", "idle");
            for c in connections {
                let who = if c.identity.is_empty() { "(anonymous)" } else { &c.identity };
                println!("{:>8} {:>5} {:<24} {:>6} {:>5}s  {who}", c.id, c.shard, c.peer, c.operations, c.idle_s);
            }
        }
        Response::Killed { id } => println!("connection {id} closed"),
        Response::Metrics { text } => print!("{text}"),
        Response::LogLevel { level } => println!("{level}"),
        Response::Reloaded { applied, needs_restart } => {
            println!("reloaded: {}", applied.join(", "));
            if !needs_restart.is_empty() {
                println!("changed but needing a restart: {}", needs_restart.join(", "));
            }
        }
        Response::Drained { in_flight, connections } => {
            println!("drained: not accepting; {in_flight} operations still running on {connections} connections")
        }
        Response::ShuttingDown => println!("shutting down"),
        Response::BackedUp { dir } => println!("backup written to {}", dir.display()),
        Response::Error { message } => eprintln!("coredir ctl: {message}"),
    }
}
