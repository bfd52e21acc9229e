//! Start-up: open or create the data directory, bind every shard's socket,
//! start one pinned reactor per shard, and report readiness.
//!
//! The main thread does everything that can fail for the whole server
//! (configuration, manifest, stores, sockets) before any reactor starts,
//! then waits for every shard to say it is serving and prints the
//! `listening on` line that scripts and tests wait for.

use crate::config::Config;
use crate::ctx::{Ctx, Live, Shared};
use crate::database::{open_database, root_password_hash, Database};
use crate::listener;
use anyhow::{anyhow, bail, Context, Result};
use glommio::channels::channel_mesh::MeshBuilder;
use glommio::{LocalExecutorBuilder, Placement};
use shards::Shard;
use std::rc::Rc;
use std::sync::{mpsc, Arc};
use std::time::Duration;

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
    let contexts = shards::contexts::Contexts::of_suffixes(&manifest.suffixes);
    for i in 0..stores.len() {
        let mib = stores.size(i) as f64 / (1 << 20) as f64;
        eprintln!("coredir: shard {i}: {mib:.1} MiB of data ({} engine)", manifest.engine);
        // Whether deletes have left tombstones without a break (syncrepl's
        // delete phase), and contextCSN per naming context.
        stores.note_start(i, config.stamping().capture, &contexts).map_err(|e| anyhow!(e.message))?;
    }
    let stores = stores.serve();

    let tls = match (&config.tls.certificate_file, &config.tls.key_file) {
        (Some(_), Some(_)) => Some(Arc::new(crate::tls::Tls::load(&config.tls)?)),
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
            let fd = listener::bind(addr, cpus[0], 128)?;
            listener::ensure_alone(listener::local_addr(&fd)?, &[&fd]).context("metrics.listen")?;
            Some(fd)
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
            let fd = listener::bind(addr, cpus[0], 16).map_err(|e| anyhow!("replication.listen: {e:#}"))?;
            listener::ensure_alone(listener::local_addr(&fd)?, &[&fd]).context("replication.listen")?;
            Some(fd)
        }
        None => None,
    };
    let replication = Arc::new(crate::repl::Link::default());
    let durable = config.sync_mode()? == shards::SyncMode::Always;
    replication.load_settled(&config.server.data, config.sid(), durable);
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
            .blocking_thread_pool_placement(blocking_pool(cpu))
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
                                Ok((l, fd)) => {
                                    // `drain` shuts it with the others.
                                    shared.listeners.lock().unwrap_or_else(|e| e.into_inner()).push(fd);
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

/// Threads in each shard's blocking pool, both on the shard's CPU: one
/// for its commits and syncs, one for key stretching (`Ctx::password_work`
/// lets one such job run at a time), so binds never queue ahead of a
/// commit.
pub const BLOCKING_THREADS: usize = 2;

fn blocking_pool(cpu: usize) -> glommio::PoolPlacement {
    match glommio::CpuSet::online() {
        Ok(set) => glommio::PoolPlacement::Fenced(BLOCKING_THREADS, set.filter(|l| l.cpu == cpu)),
        Err(_) => glommio::PoolPlacement::Unbound(BLOCKING_THREADS),
    }
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
    listener::ensure_alone(addr, &fds.iter().collect::<Vec<_>>())?;
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
