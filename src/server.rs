//! Start-up: open or create the data directory, bind every shard's socket,
//! start one pinned reactor per shard, and report readiness.
//!
//! The main thread does everything that can fail for the whole server
//! (configuration, manifest, stores, sockets) before any reactor starts,
//! then waits for every shard to say it is serving and prints the
//! `listening on` line that scripts and tests wait for.

use crate::config::{Config, Limits};
use crate::listener;
use anyhow::{anyhow, bail, Context, Result};
use glommio::channels::channel_mesh::MeshBuilder;
use glommio::{LocalExecutorBuilder, Placement};
use shards::dn::Dn;
use shards::entry::{Attr, Entry};
use shards::manifest::Manifest;
use shards::store::{Engine, Store};
use shards::write::{add_ops, clock, run_batch};
use shards::{password, Shard};
use std::path::Path;
use std::rc::Rc;
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// What every connection of one shard shares.
pub struct Ctx {
    pub shard: Rc<Shard>,
    pub root_dn: Dn,
    /// `root_dn`'s storage key, compared with every bind's.
    pub root_key: Vec<u8>,
    pub root_password_hash: String,
    pub suffixes: Vec<Dn>,
    /// One of a mirror pair (`replication` configured).
    pub mirrored: bool,
    pub passwords: crate::config::Passwords,
    /// `server.allow_bind_v2`.
    pub allow_bind_v2: bool,
    pub tls: Option<Arc<crate::tls::Tls>>,
    pub shared: Arc<Shared>,
    /// This shard's copy of the live settings and the generation it is of.
    live: std::cell::RefCell<Rc<Live>>,
    live_seen: std::cell::Cell<u64>,
    /// Connection counts shared by the shards' accept loops.
    pub admission: Arc<listener::Admission>,
    pub connections: Arc<crate::conn::Registry>,
    /// This shard's metric handles and access-log buffer.
    pub metrics: crate::stats::ShardMetrics,
    pub log: crate::accesslog::ShardLog,
    next_conn: std::cell::Cell<u64>,
    /// The writes and the one-level and subtree searches this shard
    /// admitted and has not finished (`admit_write`, `admit_read`).
    running: crate::ops::carries::Running,
    reading: crate::ops::carries::Running,
    /// When the process started (UNIX seconds), for cn=Monitor and status.
    pub started: u64,
}

/// What `reload` can change while serving: each shard copies it when the
/// generation moves (one relaxed load per request, no lock, no shared
/// reference count).
#[derive(Clone)]
pub struct Live {
    pub limits: Limits,
    pub unindexed_result: ldap3_proto::LdapResultCode,
    pub acl: crate::acl::Acl,
    pub tls_required: bool,
}

impl Live {
    pub fn from_config(config: &Config) -> Result<Live> {
        Ok(Live {
            limits: config.limits.clone(),
            unindexed_result: config.unindexed_result()?,
            acl: config.acl()?,
            tls_required: config.tls.required,
        })
    }
}

/// What the shards share, built once at start.
pub struct Shared {
    pub root_password_hash: String,
    pub live: arc_swap::ArcSwap<Live>,
    pub generation: std::sync::atomic::AtomicU64,
    pub tls: Option<Arc<crate::tls::Tls>>,
    pub admission: Arc<listener::Admission>,
    pub connections: Arc<crate::conn::Registry>,
    pub started: u64,
    /// Set by `drain`: listeners stop, new operations get `unavailable`.
    pub draining: std::sync::atomic::AtomicBool,
    /// Every listening socket, for `drain`.
    pub listeners: std::sync::Mutex<Vec<std::os::fd::RawFd>>,
    /// Mirror mode's state, for `ctl replication`.
    pub replication: Arc<crate::repl::Shared>,
    /// Subtrees being renamed across owners (`ops::carries`).
    pub carries: crate::ops::carries::Carries,
    /// Set once shard 0 has finished the renames a crash interrupted; no
    /// shard serves before.
    pub resumed: std::sync::atomic::AtomicBool,
    /// entryUUIDs relaxed writes are setting now (`ops::add::UuidClaim`).
    pub claimed_uuids: std::sync::Mutex<std::collections::HashSet<[u8; 16]>>,
}

impl Ctx {
    /// A connection id unique in the process without a shared counter:
    /// shard `s` of `n` hands out 1000 + s, 1000 + s + n, ...
    pub fn next_conn_id(&self) -> u64 {
        let n = self.next_conn.get();
        self.next_conn.set(n + 1);
        1000 + n * self.shard.n_shards() as u64 + self.shard.id as u64
    }

    pub fn new(config: &Config, shard: Rc<Shard>, shared: &Arc<Shared>) -> Ctx {
        let shard_id = shard.id;
        let root_dn = Dn::parse(&config.directory.root_dn).expect("validated");
        Ctx {
            shard,
            root_key: root_dn.key(),
            root_dn,
            root_password_hash: shared.root_password_hash.clone(),
            suffixes: config.naming_contexts().expect("validated"),
            mirrored: config.replication.enabled(),
            passwords: config.passwords.clone(),
            allow_bind_v2: config.server.allow_bind_v2,
            live: std::cell::RefCell::new(Rc::new((**shared.live.load()).clone())),
            live_seen: std::cell::Cell::new(shared.generation.load(std::sync::atomic::Ordering::Acquire)),
            tls: shared.tls.clone(),
            admission: shared.admission.clone(),
            connections: shared.connections.clone(),
            metrics: crate::stats::ShardMetrics::register(shard_id),
            log: crate::accesslog::ShardLog::default(),
            next_conn: std::cell::Cell::new(0),
            running: Default::default(),
            reading: Default::default(),
            started: shared.started,
            shared: shared.clone(),
        }
    }

    /// The live settings (limits, access rules), refreshed after a reload.
    pub fn live(&self) -> Rc<Live> {
        let generation = self.shared.generation.load(std::sync::atomic::Ordering::Acquire);
        if generation != self.live_seen.get() {
            *self.live.borrow_mut() = Rc::new((**self.shared.live.load()).clone());
            self.live_seen.set(generation);
        }
        self.live.borrow().clone()
    }

    /// Admits a write of the entry `dn`: `busy` while a subtree rename
    /// covers it; a rename that starts before the guard is dropped waits
    /// for it (`ops::carries`).
    pub fn admit_write(&self, dn: &Dn) -> shards::Result<crate::ops::carries::Admitted<'_>> {
        self.shared.carries.admit(self.shard.id, &self.running, dn)
    }

    /// Admits a one-level or subtree search below the key `scope` (or
    /// anywhere, aliases widening it): it waits while a subtree rename
    /// overlaps it, and a rename that starts before the guard is dropped
    /// waits for it (`ops::carries`).
    pub async fn admit_read<'a>(
        &'a self,
        scope: &'a [u8],
        anywhere: bool,
        deadline: Option<std::time::Instant>,
        abandoned: &std::cell::Cell<bool>,
    ) -> shards::Result<crate::ops::carries::Reading<'a>> {
        let reading = crate::ops::carries::Wanted { shard: self.shard.id, scope, anywhere, deadline };
        self.shared.carries.admit_read(&self.reading, reading, abandoned).await
    }

    pub fn is_suffix(&self, dn: &Dn) -> bool {
        self.suffixes.iter().any(|s| s == dn)
    }

    pub fn within_suffix(&self, dn: &Dn) -> bool {
        self.naming_context(dn).is_some()
    }

    /// The suffix whose naming context holds `dn`, if any (they do not
    /// nest: `Config::naming_contexts`).
    pub fn naming_context(&self, dn: &Dn) -> Option<&Dn> {
        self.suffixes.iter().find(|s| dn.is_within(s))
    }
}

/// How long the shards may take to open their stores and join the mesh.
const STARTUP_DEADLINE: Duration = Duration::from_secs(120);

/// CPUs this process may run on (its affinity mask, which honours cpusets).
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: sched_getaffinity fills the zeroed set we pass.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return vec![0];
        }
        (0..libc::CPU_SETSIZE as usize).filter(|c| libc::CPU_ISSET(*c, &set)).collect()
    }
}

/// The number of shards a start asks for: the configuration's, or one per
/// CPU this process may run on.
pub fn shard_count(config: &Config) -> usize {
    if config.server.shards == 0 {
        allowed_cpus().len()
    } else {
        config.server.shards
    }
}

/// Opens every shard's store of a data directory, with the engine the
/// manifest names and the configuration's sync and size settings.
pub fn open_stores(config: &Config, data: &Path, manifest: &Manifest) -> Result<Arc<Vec<Arc<Engine>>>> {
    let mut options = config.store_options()?;
    options.kind = match manifest.engine.as_str() {
        "sled" => shards::store::EngineKind::Sled,
        _ => shards::store::EngineKind::Lmdb,
    };
    let stores: Vec<Arc<Engine>> = (0..manifest.shards as usize)
        .map(|i| Engine::open(&data.join(format!("shard-{i}")), options).map(Arc::new))
        .collect::<shards::Result<_>>()
        .map_err(|e| anyhow!("opening the stores in {}: {}", data.display(), e.message))?;
    Ok(Arc::new(stores))
}

/// Makes a data directory readable by its owner only (0700, files 0600):
/// the manifest holds the root password's hash and the stores every
/// `userPassword`. Directories made by older versions are fixed here;
/// new files are private anyway (`main` sets the umask to 077).
fn owner_only(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            owner_only(&entry.path())?;
        } else if kind.is_file() {
            std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(0o600))?;
        }
    }
    Ok(())
}

/// Takes the data directory's lock for the life of the returned file, so a
/// server and an offline tool never write the same directory at once.
pub fn lock_data_dir(data: &Path) -> Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    std::fs::create_dir_all(data).with_context(|| format!("creating {}", data.display()))?;
    owner_only(data).with_context(|| format!("restricting {} to its owner", data.display()))?;
    let path = data.join("lock");
    let f = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path)?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        bail!("{} is in use by another coredir process (a running server or an import); stop it first", data.display());
    }
    Ok(f)
}

/// An open data directory: its lock, manifest and stores.
pub struct Database {
    pub lock: std::fs::File,
    pub manifest: Arc<Manifest>,
    pub stores: Arc<Vec<Arc<Engine>>>,
}

/// Locks, opens (creating it when empty) and checks the data directory.
pub fn open_database(config: &Config, n_shards: usize) -> Result<Database> {
    let data = &config.server.data;
    let lock = lock_data_dir(data)?;
    let (manifest, created) = open_manifest(config, data, n_shards)?;
    manifest.check_indexes().map_err(|e| anyhow!("{}: {e}", data.display()))?;
    let mut manifest = Arc::new(manifest);
    let stores = open_stores(config, data, &manifest)?;
    if created {
        bootstrap(config, &manifest, &stores)?;
    } else if let Some(changed) = naming_contexts_changed(config, &manifest, &stores)? {
        changed.save(data).map_err(|e| anyhow!(e.message))?;
        manifest = Arc::new(changed);
    }
    let fixed = shards::repair::children_counts(&manifest, &stores)
        .map_err(|e| anyhow!("checking child counts: {}", e.message))?;
    if fixed > 0 {
        eprintln!("coredir: corrected {fixed} child counts left by an interrupted write");
    }
    // Referral checks cost nothing until some store holds a referral object.
    for store in stores.iter() {
        shards::index::note_marks(store).map_err(|e| anyhow!("referral and alias keys: {}", e.message))?;
    }
    Ok(Database { lock, manifest, stores })
}

/// The root password hash in effect: the configuration's, else the one
/// chosen when the database was created.
pub fn root_password_hash(config: &Config, manifest: &Manifest) -> String {
    config.directory.root_password_hash.clone().unwrap_or(manifest.root_password_hash.clone())
}

/// Whether reactors' rings get `COOP_TASKRUN` (`server.io_uring_coop_taskrun`);
/// read by the binary's `syscall` when glommio sets a ring up.
pub static URING_COOP_TASKRUN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

pub fn serve(config: Config) -> Result<()> {
    config.validate()?;
    let listening_fds: Vec<std::os::fd::RawFd>;
    let node = config.server.numa_node.map(|n| format!("node{n}")).unwrap_or_else(|| "all".into());
    crate::stats::install(&[("server", config.server.id.to_string()), ("numa", node)])?;
    crate::accesslog::start(config.log.file.as_deref(), config.log.format == "json", config.log_level()?)?;
    let live = Live::from_config(&config)?;
    shards::filter::set_assertion_tests(config.limits.max_filter_tests);
    // A spinning reactor only peeks at its rings, without a system call, so
    // with COOP_TASKRUN it would see no completion until it parks.
    let coop = config.server.io_uring_coop_taskrun && config.server.spin_before_park_us == 0;
    if config.server.io_uring_coop_taskrun && !coop {
        eprintln!("coredir: server.spin_before_park_us is set, so the rings are set up without COOP_TASKRUN");
    }
    URING_COOP_TASKRUN.store(coop, std::sync::atomic::Ordering::Relaxed);
    let cpus = match config.server.numa_node {
        Some(node) => crate::deploy::node_cpus(node, &allowed_cpus())?,
        None => allowed_cpus(),
    };
    let n_shards = if config.server.shards == 0 { cpus.len() } else { config.server.shards };
    if n_shards > 1024 {
        bail!("server.shards: {n_shards} is more than 1024");
    }
    let data = config.server.data.clone();
    let Database { lock: _lock, manifest, stores } = open_database(&config, n_shards)?;
    let sync = config.sync_mode()?;
    for (i, store) in stores.iter().enumerate() {
        let mib = store.size() as f64 / (1 << 20) as f64;
        eprintln!("coredir: shard {i}: {mib:.1} MiB of data ({} engine)", manifest.engine);
        // Whether deletes have left tombstones without a break (syncrepl's delete phase).
        shards::changelog::note_capture(&**store, config.stamping().capture, shards::csn::wall_us())
            .map_err(|e| anyhow!(e.message))?;
    }

    let tls = match (&config.tls.certificate_file, &config.tls.key_file) {
        (Some(cert), Some(key)) => Some(Arc::new(crate::tls::Tls::load(cert, key)?)),
        _ => None,
    };
    let admission = Arc::new(listener::Admission::new(
        n_shards,
        config.limits.max_connections,
        config.limits.max_connections_per_ip,
    ));
    let (addr, fds) = bind_all(config.listen_addr()?, &cpus, n_shards, config.server.backlog)?;
    let (tls_addr, mut tls_fds) = match &config.tls.listen {
        Some(l) => {
            let (a, fds) = bind_all(l.parse()?, &cpus, n_shards, config.server.backlog)?;
            (Some(a), fds.into_iter().map(Some).collect())
        }
        None => (None, (0..n_shards).map(|_| None).collect::<Vec<_>>()),
    };
    let mut metrics_fd = match &config.metrics.listen {
        Some(l) => {
            let addr = l.parse()?;
            listener::ensure_unserved(addr).context("metrics.listen")?;
            Some(listener::bind(addr, cpus[0], 128)?)
        }
        None => None,
    };
    if let Some(fd) = &metrics_fd {
        println!("coredir: metrics on http://{}/metrics", listener::local_addr(fd)?);
    }
    let mut replication_fd = match &config.replication.listen {
        Some(l) => {
            let addr = l.parse()?;
            listener::ensure_unserved(addr).context("replication.listen")?;
            Some(listener::bind(addr, cpus[0], 16).map_err(|e| anyhow!("replication.listen: {e:#}"))?)
        }
        None => None,
    };
    let replication = Arc::new(crate::repl::Shared::default());
    if let (Some(pin), Some((cert, key))) = (&config.replication.peer_certificate_sha256, config.replication_identity())
    {
        let channel = crate::tls::channel(cert, key, crate::tls::parse_fingerprint(pin)?)?;
        let _ = replication.tls.set(channel);
        println!(
            "coredir: replication over TLS; this server's certificate has SHA-256 {} (the peer pins it)",
            crate::tls::fingerprint_of(cert)?
        );
    }
    if config.replication.enabled() {
        println!(
            "coredir: mirror mode as server {} with {}",
            config.sid(),
            config.replication.peer.as_deref().unwrap_or_default()
        );
    }
    {
        use std::os::fd::AsRawFd;
        let mut all: Vec<_> = fds.iter().map(|f| f.as_raw_fd()).collect();
        all.extend(tls_fds.iter().flatten().map(|f| f.as_raw_fd()));
        listening_fds = all;
    }

    let mesh = (n_shards > 1).then(|| MeshBuilder::full(n_shards, 4096));
    let shared = Arc::new(Shared {
        root_password_hash: root_password_hash(&config, &manifest),
        live: arc_swap::ArcSwap::from_pointee(live),
        generation: std::sync::atomic::AtomicU64::new(0),
        tls,
        admission,
        connections: Arc::new(crate::conn::Registry::new(n_shards)),
        started: unix_now(),
        draining: Default::default(),
        listeners: std::sync::Mutex::new(listening_fds),
        replication,
        carries: crate::ops::carries::Carries::new(n_shards),
        resumed: Default::default(),
        claimed_uuids: Default::default(),
    });
    let (ready_tx, ready_rx) = mpsc::channel::<Result<usize, String>>();
    let mut handles = Vec::new();
    let floors = shards::shard::Floors::new(stores.len());
    for (i, fd) in fds.into_iter().enumerate() {
        let cpu = cpus[i % cpus.len()];
        let (manifest, stores, mesh, ready) = (manifest.clone(), stores.clone(), mesh.clone(), ready_tx.clone());
        let floors = floors.clone();
        let config = config.clone();
        let shared = shared.clone();
        let tls_fd = tls_fds[i].take();
        let metrics_fd = if i == 0 { metrics_fd.take() } else { None };
        let replication_fd = if i == 0 { replication_fd.take() } else { None };
        let handle = LocalExecutorBuilder::new(Placement::Fixed(cpu))
            .name(&format!("shard-{i}"))
            .io_memory(512 << 10)
            .spin_before_park(Duration::from_micros(config.server.spin_before_park_us))
            .spawn(move || async move {
                glommio::spawn_local(tick(Duration::ZERO)).detach();
                glommio::spawn_local(tick(TICK / 2)).detach();
                glommio::spawn_local_into(
                    async move {
                        let interval = Duration::from_millis(config.storage.sync_interval_ms);
                        let shard =
                            match Shard::start(i, config.stamping(), manifest, stores, floors, mesh, sync, interval)
                                .await
                            {
                                Ok(s) => s,
                                Err(e) => {
                                    let _ = ready.send(Err(e.message));
                                    return;
                                }
                            };
                        let ctx = Rc::new(Ctx::new(&config, shard, &shared));
                        if i == 0 {
                            // Before anything is served: a crash's unfinished renames.
                            match crate::ops::modify_dn::resume(&ctx).await {
                                Ok(0) => {}
                                Ok(n) => eprintln!("coredir: finished {n} rename(s) a crash interrupted"),
                                Err(e) => {
                                    let _ = ready.send(Err(format!("finishing interrupted renames: {}", e.message)));
                                    return;
                                }
                            }
                            shared.resumed.store(true, std::sync::atomic::Ordering::Release);
                        }
                        // Start-up only: the other shards' owners serve shard 0's
                        // resumption meanwhile; the start-up deadline bounds the wait.
                        while !shared.resumed.load(std::sync::atomic::Ordering::Acquire) {
                            glommio::timer::sleep(Duration::from_millis(1)).await;
                        }
                        glommio::spawn_local(flush_log(ctx.clone())).detach();
                        if let (0, Some(path)) = (i, &config.server.ldapi) {
                            match listener::bind_local(path) {
                                Ok(l) => {
                                    glommio::spawn_local(listener::run_local(l, ctx.clone())).detach();
                                }
                                Err(e) => {
                                    let _ = ready.send(Err(format!("{e:#}")));
                                    return;
                                }
                            }
                        }
                        if let Some(fd) = metrics_fd {
                            glommio::spawn_local(listener::run_metrics(fd)).detach();
                        }
                        if let Some(fd) = replication_fd {
                            use std::os::fd::{FromRawFd, IntoRawFd};
                            // SAFETY: a listening socket this process bound and owns.
                            let l = unsafe { glommio::net::TcpListener::from_raw_fd(fd.into_raw_fd()) };
                            let (repl, config) = (shared.replication.clone(), Arc::new(config.clone()));
                            glommio::spawn_local(crate::repl::serve(l, ctx.clone(), config.clone(), repl.clone()))
                                .detach();
                            glommio::spawn_local(crate::repl::push(ctx.clone(), config, repl)).detach();
                        }
                        if i == 0 && ctx.shard.stamping.capture {
                            let (repl, config) = (shared.replication.clone(), Arc::new(config.clone()));
                            glommio::spawn_local(crate::repl::housekeeping(ctx.clone(), config, repl)).detach();
                        }
                        if let Some(fd) = tls_fd {
                            glommio::spawn_local(listener::run(fd, ctx.clone(), listener::Kind::Ldaps)).detach();
                        }
                        let _ = ready.send(Ok(i));
                        listener::run(fd, ctx, listener::Kind::Ldap).await;
                        // Drained: the connections still running finish here; the
                        // admin thread ends the process.
                        futures_lite::future::pending::<()>().await;
                    },
                    shard_queue(),
                )
                .expect("a fresh task queue")
                .await
            })
            .map_err(|e| anyhow!("starting the reactor of shard {i} on CPU {cpu}: {e}"))?;
        handles.push(handle);
    }
    drop(ready_tx);
    // Start-up has a deadline: a shard that never reports (as one parked
    // with ready tasks did before `tick`) fails the start with a clear
    // error instead of leaving a process that never listens.
    let deadline = std::time::Instant::now() + STARTUP_DEADLINE;
    for ready in 0..n_shards {
        match ready_rx.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now())) {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => bail!("a shard failed to start: {e}"),
            Err(mpsc::RecvTimeoutError::Timeout) => bail!(
                "start-up did not finish within {} s: {ready} of {n_shards} shards reported ready",
                STARTUP_DEADLINE.as_secs()
            ),
            Err(mpsc::RecvTimeoutError::Disconnected) => bail!("a shard stopped during start-up"),
        }
    }
    if let Some(a) = tls_addr {
        println!("coredir: ldaps on {a}");
    }
    if let Some(p) = &config.server.ldapi {
        println!("coredir: ldapi on {}", p.display());
    }
    let admin = Arc::new(crate::admin::Admin {
        config: std::sync::Mutex::new(config.clone()),
        shared: shared.clone(),
        manifest: manifest.clone(),
        stores: stores.clone(),
        cpus: (0..n_shards).map(|i| cpus[i % cpus.len()]).collect(),
        started: std::time::Instant::now(),
        rate: std::sync::Mutex::new((std::time::Instant::now(), 0, 0.0)),
    });
    crate::admin::start(admin.clone(), &config.admin_socket())?;
    crate::admin::signals(admin)?;
    notify_ready();
    println!("coredir: listening on {addr} ({n_shards} shards, data in {})", data.display());
    for h in handles {
        let _ = h.join();
    }
    Ok(())
}

/// How long the shard's work runs before glommio polls for I/O again: two
/// search slices, so a costly search lets other connections in within a few
/// milliseconds (glommio's default is 100 ms).
const PREEMPT_TIMER: Duration = Duration::from_millis(4);

/// The longest a shard reactor sleeps while it has runnable tasks, when it
/// has been busy ...
const TICK: Duration = Duration::from_millis(10);

/// ... and when it has been idle: a timer wake costs ~0.15 ms of CPU on
/// the reference VM, so an idle shard ticking every 10 ms would burn ~1.5%
/// of a core for nothing.
const IDLE_TICK: Duration = Duration::from_millis(200);

/// The task queue all of a shard's work runs in (connections, commits,
/// mesh, replication: `spawn_local` inherits it). Its latency need sets the
/// preempt timer to [`PREEMPT_TIMER`] while it has work; the executor's own
/// timer stays at glommio's default, which keeps the start of the reactor
/// out of the stall [`tick`] describes (nothing can wake it yet then).
fn shard_queue() -> glommio::TaskQueueHandle {
    glommio::executor().create_task_queue(glommio::Shares::default(), glommio::Latency::Matters(PREEMPT_TIMER), "shard")
}

/// Wakes the reactor every [`TICK`] (every [`IDLE_TICK`] when nothing but
/// the ticks ran since the last round). glommio 0.9 can park a reactor that
/// still has runnable tasks: when the preempt timer fires between the I/O
/// poll and the task-queue run (the thread was descheduled in between, as
/// happens on a loaded 2-core machine), `run_task_queues` reports that
/// nothing ran and the executor sleeps in io_uring until some completion
/// arrives. Found by tracing 2-shard starts under CPU load with a 4 ms
/// timer: one hung for good in the mesh join with its connect task ready
/// to run, one before its first task ever ran (issue 17 item 11). Any timer
/// completion ends such a sleep, so this bounds the stall. Two ticks run
/// half a period apart: the round that runs one (its timer consumed) may
/// itself end in such a park, and then the other's timer is still armed.
async fn tick(offset: Duration) {
    glommio::timer::sleep(offset).await;
    loop {
        // The stats are taken (reset) by each call; nothing else reads them.
        let ran = glommio::executor().executor_stats().tasks_executed();
        glommio::timer::sleep(if ran > 2 { TICK } else { IDLE_TICK }).await;
    }
}

pub fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Binds one socket per shard on `addr` (port 0: the kernel picks one port,
/// then every shard binds that one); returns the address bound.
fn bind_all(
    mut addr: std::net::SocketAddr,
    cpus: &[usize],
    n_shards: usize,
    backlog: i32,
) -> Result<(std::net::SocketAddr, Vec<std::os::fd::OwnedFd>)> {
    listener::ensure_unserved(addr)?;
    let mut fds = Vec::with_capacity(n_shards);
    for i in 0..n_shards {
        let fd = listener::bind(addr, cpus[i % cpus.len()], backlog)?;
        if addr.port() == 0 {
            addr = listener::local_addr(&fd)?;
        }
        fds.push(fd);
    }
    Ok((addr, fds))
}

/// Hands the shard's access-log lines to the writer thread periodically.
async fn flush_log(ctx: Rc<Ctx>) {
    loop {
        glommio::timer::sleep(crate::accesslog::FLUSH_EVERY).await;
        ctx.log.flush();
    }
}

/// Tells systemd the server is ready (`Type=notify`), once every shard
/// listens: `READY=1` to `$NOTIFY_SOCKET` when it is set.
fn notify_ready() {
    let Ok(path) = std::env::var("NOTIFY_SOCKET") else { return };
    let sock = match std::os::unix::net::UnixDatagram::unbound() {
        Ok(s) => s,
        Err(_) => return,
    };
    let sent = if let Some(name) = path.strip_prefix('@') {
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
            .and_then(|addr| sock.send_to_addr(b"READY=1\n", &addr))
    } else {
        sock.send_to(b"READY=1\n", &path)
    };
    if let Err(e) = sent {
        eprintln!("coredir: telling systemd we are ready ({path}) failed: {e}");
    }
}

/// Loads the manifest, or creates the database when the directory has none
/// (then the second value is true).
pub fn open_manifest(config: &Config, data: &Path, n_shards: usize) -> Result<(Manifest, bool)> {
    std::fs::create_dir_all(data).with_context(|| format!("creating {}", data.display()))?;
    if let Some(m) = Manifest::load(data).map_err(|e| anyhow!(e.message))? {
        if m.shards as usize != n_shards {
            bail!(
                "the data directory {} was created with {} shards and this start asks for {n_shards}; \
                 start with --shards {}, or move the partitions with `coredir reshard --shards {n_shards}` \
                 (offline)",
                data.display(),
                m.shards,
                m.shards
            );
        }
        m.check_engine(&config.storage.engine).map_err(|e| anyhow!("{}: {e}", data.display()))?;
        return Ok((m, false));
    }
    // A lone lock file is not a database.
    if std::fs::read_dir(data)?.flatten().any(|e| e.file_name() != "lock") {
        bail!(
            "{} is not empty and holds no {}; refusing to create a database there",
            data.display(),
            shards::manifest::FILE
        );
    }
    // A configured hash is the root password: nothing is generated, so
    // nothing is printed that would not work.
    let hash = match (&config.directory.root_password_hash, std::env::var("COREDIR_ROOT_PASSWORD")) {
        (Some(h), _) => h.clone(),
        (None, Ok(p)) if !p.is_empty() => password::hash_ssha(p.as_bytes()),
        (None, _) => {
            let p = generate_password();
            println!("coredir: generated password for {}: {p}", config.directory.root_dn);
            println!("coredir: it is stored only as a hash and will not be shown again");
            password::hash_ssha(p.as_bytes())
        }
    };
    let suffixes = config.naming_contexts()?.iter().map(Dn::to_string_form).collect();
    let mut m = Manifest::new(n_shards as u32, suffixes, config.directory.root_dn.clone(), hash);
    m.engine = config.storage.engine.clone();
    m.save(data).map_err(|e| anyhow!(e.message))?;
    Ok((m, true))
}

fn generate_password() -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789";
    let mut rng = rand::thread_rng();
    (0..20).map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())] as char).collect()
}

/// Creates the suffix entries in a new database, with `ou=people` and
/// `ou=groups` below the first (never again: an operator may delete them).
fn bootstrap(config: &Config, manifest: &Manifest, stores: &[Arc<Engine>]) -> Result<()> {
    let suffixes = config.naming_contexts()?;
    let mut entries = Vec::new();
    for suffix in &suffixes {
        entries.push((suffix.clone(), suffix_entry(suffix)?));
    }
    for ou in ["people", "groups"] {
        let dn = Dn::parse(&format!("ou={ou},{}", suffixes[0].to_string_form()))?;
        entries.push((
            dn,
            vec![("objectClass", vec!["top".into(), "organizationalUnit".into()]), ("ou", vec![ou.into()])],
        ));
    }
    create_entries(config, manifest, stores, &suffixes, entries)
}

/// At the start of an existing database: a suffix newly configured gets
/// its entry (unless one is there); one no longer configured is forgotten
/// if it holds no entry, and refused otherwise (its entries would be kept
/// but never served). Returns the manifest to save, if it changed.
fn naming_contexts_changed(config: &Config, manifest: &Manifest, stores: &[Arc<Engine>]) -> Result<Option<Manifest>> {
    let configured = config.naming_contexts()?;
    let recorded: Vec<Dn> = manifest.suffixes.iter().filter_map(|s| Dn::parse(s).ok()).collect();
    if configured == recorded {
        return Ok(None);
    }
    let exists = |dn: &Dn| -> Result<bool> {
        use shards::store::ReadTxn;
        let txn = stores[manifest.owner_of(&dn.key())].read().map_err(|e| anyhow!(e.message))?;
        txn.has_dn(&dn.key()).map_err(|e| anyhow!(e.message))
    };
    for gone in recorded.iter().filter(|r| !configured.contains(r)) {
        if exists(gone)? {
            bail!(
                "the naming context {} holds entries in {} but is no longer in directory.suffix(es); \
                 configure it again, or delete its entries first",
                gone.to_string_form(),
                config.server.data.display()
            );
        }
    }
    let mut entries = Vec::new();
    for new in configured.iter().filter(|c| !recorded.contains(c)) {
        if exists(new)? {
            continue;
        }
        // Both servers of a pair would create it, as two entries at one
        // DN; added once by the root DN, it replicates like any entry.
        if config.replication.enabled() {
            eprintln!(
                "coredir: the new naming context {} has no entry yet; add it as {} (with replication on, \
                 coredir does not create it)",
                new.to_string_form(),
                config.directory.root_dn
            );
            continue;
        }
        entries.push((new.clone(), suffix_entry(new)?));
    }
    create_entries(config, manifest, stores, &configured, entries)?;
    let mut changed = manifest.clone();
    changed.suffixes = configured.iter().map(Dn::to_string_form).collect();
    Ok(Some(changed))
}

/// The attributes of a suffix entry, from the class its RDN names.
fn suffix_entry(suffix: &Dn) -> Result<Vec<(&'static str, Vec<String>)>> {
    let rdn = &suffix.rdns()[0].avas[0];
    let v = String::from_utf8_lossy(&rdn.value).to_string();
    let classes = |cs: &[&str]| cs.iter().map(|c| c.to_string()).collect::<Vec<_>>();
    Ok(match shards::matching::canonical(&rdn.attr).as_ref() {
        "dc" => vec![
            ("objectClass", classes(&["top", "dcObject", "organization"])),
            ("dc", vec![v.clone()]),
            ("o", vec![v]),
        ],
        "o" => vec![("objectClass", classes(&["top", "organization"])), ("o", vec![v])],
        "ou" => vec![("objectClass", classes(&["top", "organizationalUnit"])), ("ou", vec![v])],
        "c" => vec![("objectClass", classes(&["top", "country"])), ("c", vec![v])],
        other => bail!(
            "cannot create the suffix entry {}: its RDN attribute '{other}' is not dc, o, ou or c; \
             create it with `coredir import`",
            suffix.to_string_form()
        ),
    })
}

/// Writes entries as the root DN, parents first.
fn create_entries(
    config: &Config,
    manifest: &Manifest,
    stores: &[Arc<Engine>],
    suffixes: &[Dn],
    entries: Vec<(Dn, Vec<(&'static str, Vec<String>)>)>,
) -> Result<()> {
    for (dn, attrs) in entries {
        let mut entry = Entry {
            dn: dn.to_string_form(),
            attrs: attrs
                .into_iter()
                .map(|(n, vs)| Attr { name: n.into(), vals: vs.into_iter().map(String::into_bytes).collect() })
                .collect(),
        };
        crate::ops::add::check_new(&mut entry, &dn)
            .map_err(|e| anyhow!("creating {}: {}", dn.to_string_form(), e.message))?;
        crate::ops::add::stamp_new(&mut entry, &config.directory.root_dn);
        let is_suffix = suffixes.contains(&dn);
        for (owner, op) in add_ops(manifest, &dn, entry, is_suffix) {
            let store = &*stores[owner];
            let mut hlc = clock(store, config.stamping(), manifest.incarnation).map_err(|e| anyhow!(e.message))?;
            for r in run_batch(store, |k| manifest.partition_of(k), &mut [op], &mut hlc) {
                r.map_err(|e| anyhow!("creating {}: {}", dn.to_string_form(), e.message))?;
            }
        }
    }
    Ok(())
}
