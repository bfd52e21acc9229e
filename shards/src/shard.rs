//! `Shard`: what one core owns, and the only way its partitions are written.
//!
//! Every shard can read every store through snapshots. Writes go to the
//! owner of the entry's partition: locally onto this shard's write queue, or
//! as one mesh message to the owner, whose reply comes back the same way.
//! The commit loop drains the queue into one batch, runs it as one write
//! transaction on the shard's blocking thread (pinned to the same CPU) and
//! answers every request of the batch only after the commit: group commit,
//! with the reactor serving reads meanwhile and never waiting on fsync.

use crate::entry::{Entry, EntryView};
use crate::error::{Error, Result};
use crate::manifest::Manifest;
use crate::store::{Engine, ReadTxn, Store, SyncMode};
use crate::stores::{Read, Stores};
use crate::write::{self, run_batch, Outcome, WriteOp};
use futures_channel::oneshot;
use glommio::channels::channel_mesh::{MeshBuilder, Senders};
use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Most operations one commit takes from the queue.
pub const MAX_BATCH: usize = 1024;

/// What crosses cores (`Message`), opaque outside this crate: the server
/// builds the mesh but never reads or writes what travels on it.
pub struct MeshMsg(Message);

/// Write requests to an owner and their results, the owner's request to
/// stop reading while its store grows, and a commit's wake-up.
pub(crate) enum Message {
    Request {
        from: usize,
        id: u64,
        op: WriteOp,
    },
    Response {
        id: u64,
        result: Outcome,
    },
    Park(Arc<Gate>),
    /// A store committed a batch while this shard had readers waiting for
    /// one (`Shard::next_commit`).
    Committed,
}

/// Where reactors wait while one store's LMDB map grows (`grow`): a
/// reactor handling `Park` is between transactions (none is held across an
/// `.await`), and blocking its thread keeps it there.
#[derive(Default)]
pub struct Gate {
    /// (reactors parked, released)
    state: Mutex<(usize, bool)>,
    changed: Condvar,
}

impl Gate {
    fn park(&self) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.0 += 1;
        self.changed.notify_all();
        while !s.1 {
            s = self.changed.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn wait_parked(&self, n: usize) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while s.0 < n {
            s = self.changed.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn release(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).1 = true;
        self.changed.notify_all();
    }
}

/// One growth at a time in the process: two owners parking each other
/// would wait forever.
static GROWING: AtomicBool = AtomicBool::new(false);

pub type Mesh = MeshBuilder<MeshMsg, glommio::channels::channel_mesh::Full>;

enum Reply {
    Local(oneshot::Sender<Outcome>),
    Remote { to: usize, id: u64 },
}

struct Pending {
    op: WriteOp,
    reply: Reply,
}

pub struct Shard {
    pub id: usize,
    /// How the shard stamps (and, in mirror mode, records) its changes.
    pub stamping: write::Stamping,
    pub manifest: Arc<Manifest>,
    /// Every shard's store, indexed by shard id; only `stores[id]` is written here.
    pub stores: Stores,
    /// Every store's commit floor (shared by all shards).
    pub floors: Arc<Floors>,
    queue: LocalSender<Pending>,
    mesh: Option<Senders<MeshMsg>>,
    waiting: RefCell<HashMap<u64, oneshot::Sender<Outcome>>>,
    next_request: Cell<u64>,
    /// Readers of the changelog waiting for the next commit anywhere.
    commit_waiters: RefCell<Vec<oneshot::Sender<()>>>,
    /// The length of `commit_waiters` at which it is next swept.
    sweep_waiters_at: std::cell::Cell<usize>,
    pub metrics: ShardMetrics,
}

/// Commit floors, one per store (`Shard::floors`): a time such that every
/// CSN its owner has not yet made visible, or will stamp, lies above it
/// (its `phys_us` is greater). A syncrepl cookie may name no CSN above
/// the lowest floor, or a change of a slower shard would come after a
/// cookie that claims it. Each owner raises its own after every commit
/// and, while idle, every `FLOOR_TICK`; others only read.
pub struct Floors(Vec<Floor>);

/// One store's floor and its commits, on a cache line of their own:
/// owners raising theirs once per commit do not take each other's line
/// away.
#[repr(align(128))]
struct Floor {
    phys_us: AtomicU64,
    /// Batches committed: what readers of the changelog watch.
    commits: AtomicU64,
    /// Readers on this shard waiting for the next commit on any store
    /// (`Shard::next_commit`): owners tell the shard only while some wait.
    waiting: AtomicU64,
    /// A `Committed` message is on its way to this shard: one at a time
    /// (a busy shard must not find its mesh channels full of them).
    told: AtomicBool,
}

/// How often an idle owner raises its floor to the clock.
const FLOOR_TICK: Duration = Duration::from_millis(50);

impl Floors {
    pub fn new(stores: usize) -> Arc<Floors> {
        let floor = || Floor {
            phys_us: AtomicU64::new(0),
            commits: AtomicU64::new(0),
            waiting: AtomicU64::new(0),
            told: AtomicBool::new(false),
        };
        Arc::new(Floors((0..stores).map(|_| floor()).collect()))
    }

    /// Raises `store`'s floor (its owner only; after the commit it covers).
    fn raise(&self, store: usize, phys_us: u64) {
        self.0[store].phys_us.fetch_max(phys_us, Ordering::Release);
    }

    /// Counts a batch `store`'s owner committed (its owner only); then
    /// the shards with readers waiting for it.
    fn committed(&self, store: usize) -> impl Iterator<Item = usize> + '_ {
        // Sequentially consistent with `Shard::next_commit`: a reader that
        // registers after this count sees it, one before is told.
        self.0[store].commits.fetch_add(1, Ordering::SeqCst);
        (0..self.0.len()).filter(|&i| self.0[i].waiting.load(Ordering::SeqCst) > 0)
    }

    /// The lowest floor: read it before the changelog it is to cover.
    /// Zero until every owner has published one.
    pub fn lowest(&self) -> u64 {
        self.0.iter().map(|f| f.phys_us.load(Ordering::Acquire)).min().unwrap_or(0)
    }

    /// Batches committed on every store so far: read it before the
    /// changelog, and a change it did not count comes after.
    pub fn commits(&self) -> u64 {
        self.0.iter().map(|f| f.commits.load(Ordering::SeqCst)).sum()
    }
}

/// Paces the rounds of a reader woken by commits (`Shard::next_commit`):
/// a few at once (a write that commits on two shards wakes it twice
/// within a millisecond), then one per `every` under a stream of commits,
/// as each round reads every stream of the changelog. A token bucket.
pub struct Pace {
    every: Duration,
    burst: f64,
    tokens: f64,
    at: std::time::Instant,
}

impl Pace {
    pub fn new(every: Duration, burst: u32) -> Pace {
        Pace { every, burst: burst as f64, tokens: burst as f64, at: std::time::Instant::now() }
    }

    /// Waits, if need be, until the next round may start.
    pub async fn round(&mut self) {
        let now = std::time::Instant::now();
        let earned = now.duration_since(self.at).as_secs_f64() / self.every.as_secs_f64();
        (self.tokens, self.at) = ((self.tokens + earned).min(self.burst), now);
        if self.tokens < 1.0 {
            let wait = self.every.mul_f64(1.0 - self.tokens);
            glommio::timer::sleep(wait).await;
            (self.tokens, self.at) = (1.0, std::time::Instant::now());
        }
        self.tokens -= 1.0;
    }
}

/// The write path's metric handles, registered on the shard's own thread
/// (`shard="N"`); see the server's `stats` module for how they are read.
pub struct ShardMetrics {
    pub mesh_sent: metrics::Counter,
    pub mesh_received: metrics::Counter,
    pub commit_batch: metrics::Histogram,
    pub commit_seconds: metrics::Histogram,
    pub queue_depth: metrics::Gauge,
}

impl ShardMetrics {
    fn register(shard: usize) -> ShardMetrics {
        let label = || vec![metrics::Label::new("shard", shard.to_string())];
        let key = |name: &'static str| metrics::Key::from_parts(name, label());
        static META: metrics::Metadata<'static> =
            metrics::Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));
        metrics::with_recorder(|r| ShardMetrics {
            mesh_sent: r.register_counter(&key("coredir_mesh_messages_sent_total"), &META),
            mesh_received: r.register_counter(&key("coredir_mesh_messages_received_total"), &META),
            commit_batch: r.register_histogram(&key("coredir_commit_batch_size"), &META),
            commit_seconds: r.register_histogram(&key("coredir_commit_seconds"), &META),
            queue_depth: r.register_gauge(&key("coredir_write_queue_depth"), &META),
        })
    }
}

impl Shard {
    /// Starts the shard's commit loop and joins the mesh (when there is more
    /// than one shard). Must run on the shard's own executor.
    #[allow(clippy::too_many_arguments)]
    pub async fn start(
        id: usize,
        stamping: write::Stamping,
        manifest: Arc<Manifest>,
        stores: Stores,
        floors: Arc<Floors>,
        mesh: Option<Mesh>,
        sync: SyncMode,
        sync_interval: Duration,
    ) -> Result<Rc<Shard>> {
        let (queue, rx) = local_channel::new_unbounded();
        let (senders, receivers) = match mesh {
            Some(m) => {
                let (s, r) = m.join().await.map_err(|_| Error::other("joining the shard mesh failed"))?;
                (Some(s), Some(r))
            }
            None => (None, None),
        };
        let shard = Rc::new(Shard {
            id,
            stamping,
            manifest,
            stores,
            floors,
            queue,
            mesh: senders,
            waiting: RefCell::new(HashMap::new()),
            commit_waiters: RefCell::new(Vec::new()),
            sweep_waiters_at: std::cell::Cell::new(64),
            next_request: Cell::new(0),
            metrics: ShardMetrics::register(id),
        });
        glommio::spawn_local(commit_loop(shard.clone(), rx)).detach();
        if let Some(mut receivers) = receivers {
            for (_, stream) in receivers.streams() {
                let shard = shard.clone();
                glommio::spawn_local(async move {
                    while let Some(msg) = stream.recv().await {
                        shard.on_mesh(msg);
                    }
                })
                .detach();
            }
        }
        if sync == SyncMode::Interval {
            glommio::spawn_local(sync_loop(shard.stores.engine(id).clone(), sync_interval)).detach();
        }
        Ok(shard)
    }

    pub fn n_shards(&self) -> usize {
        self.stores.len()
    }

    pub fn owner_of(&self, key: &[u8]) -> usize {
        self.manifest.owner_of(key)
    }

    /// A snapshot of the store holding the entry with this DN key.
    pub fn read_for(&self, key: &[u8]) -> Result<Read<'_>> {
        self.stores.read(self.owner_of(key))
    }

    /// Reads an entry through a snapshot of its owner's store.
    pub fn get_entry(&self, key: &[u8]) -> Result<Option<Entry>> {
        self.with_entry(key, Entry::decode_view)?.transpose()
    }

    /// Runs `f` on an entry in place, inside a snapshot of its owner's
    /// store (no copy of the entry); `None` when there is no such entry.
    pub fn with_entry<R>(&self, key: &[u8], f: impl FnOnce(&EntryView<'_>) -> R) -> Result<Option<R>> {
        Ok(self.read_for(key)?.entry(key)?.map(|(_, view)| f(&view)))
    }

    /// Whether an entry has this DN key, through a snapshot of its owner's store.
    pub fn exists(&self, key: &[u8]) -> Result<bool> {
        self.read_for(key)?.has_dn(key)
    }

    /// How many children the entry with this DN key has (0 when there is
    /// no such entry), through a snapshot of its owner's store.
    pub fn children(&self, key: &[u8]) -> Result<u64> {
        crate::write::children(&self.read_for(key)?, key)
    }

    /// Waits until some store committed after `seen` (`Floors::commits`),
    /// or for `most`; returns the count then. Readers of the changelog
    /// (the replication sender, syncrepl's persist stage) read it when it
    /// moved, woken by the committing owner (a `Committed` mesh message,
    /// sent only while this shard has a reader waiting), not by a timer.
    pub async fn next_commit(&self, seen: u64, most: Duration) -> u64 {
        /// Counts the reader as waiting while it lives (however the wait ends).
        struct Waiting<'a>(&'a AtomicU64);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        let (tx, rx) = oneshot::channel();
        {
            let mut waiters = self.commit_waiters.borrow_mut();
            // Readers that stopped waiting (their time was up) leave, now
            // and then: once the list has doubled since the last sweep, so
            // that thousands of waiting readers (persistent searches) cost
            // a constant per wait, not a walk over all of them each.
            if waiters.len() >= self.sweep_waiters_at.get() {
                waiters.retain(|w| !w.is_canceled());
                self.sweep_waiters_at.set((2 * waiters.len()).max(64));
            }
            waiters.push(tx);
        }
        let waiting = &self.floors.0[self.id].waiting;
        waiting.fetch_add(1, Ordering::SeqCst);
        let _waiting = Waiting(waiting);
        // After registering: a commit counted before it is seen here.
        if self.floors.commits() == seen {
            futures_lite::future::or(
                async {
                    let _ = rx.await;
                },
                glommio::timer::sleep(most),
            )
            .await;
        }
        self.floors.commits()
    }

    /// Wakes the readers waiting for a commit (`next_commit`).
    fn wake_committed(&self) {
        // Before they look: a commit after this tells the shard again.
        self.floors.0[self.id].told.store(false, Ordering::SeqCst);
        for tx in self.commit_waiters.borrow_mut().drain(..) {
            let _ = tx.send(());
        }
    }

    /// Tells the shards with readers waiting that this one committed.
    fn tell_committed(&self) {
        for shard in self.floors.committed(self.id) {
            match &self.mesh {
                _ if shard == self.id => self.wake_committed(),
                Some(mesh) => {
                    let told = &self.floors.0[shard].told;
                    // One at a time; a full channel (a busy shard) drops it,
                    // and its readers look again within their `most`.
                    if !told.swap(true, Ordering::SeqCst)
                        && mesh.try_send_to(shard, MeshMsg(Message::Committed)).is_err()
                    {
                        told.store(false, Ordering::SeqCst);
                    }
                }
                None => {}
            }
        }
    }

    /// Sends a write to the owner of `key` and waits for its durable result.
    pub(crate) async fn submit(&self, key: &[u8], op: WriteOp) -> Result<()> {
        self.submit_to(self.owner_of(key), op).await
    }

    /// Sends a write to shard `owner` and waits for its durable result.
    pub(crate) async fn submit_to(&self, owner: usize, op: WriteOp) -> Result<()> {
        self.submit_for(owner, op).await.map(|_| ())
    }

    /// Submits an op to its owner and returns the images it was asked for.
    pub(crate) async fn submit_for(&self, owner: usize, op: WriteOp) -> Outcome {
        let (tx, rx) = oneshot::channel();
        if owner == self.id {
            self.metrics.queue_depth.increment(1.0);
            let _ = self.queue.try_send(Pending { op, reply: Reply::Local(tx) });
        } else {
            self.metrics.mesh_sent.increment(1);
            let mesh = self.mesh.as_ref().ok_or_else(|| Error::other("no mesh for a remote owner"))?;
            let id = self.next_request.get();
            self.next_request.set(id + 1);
            self.waiting.borrow_mut().insert(id, tx);
            if mesh.send_to(owner, MeshMsg(Message::Request { from: self.id, id, op })).await.is_err() {
                self.waiting.borrow_mut().remove(&id);
                return Err(Error::unavailable("the owning shard is not reachable"));
            }
        }
        rx.await.unwrap_or_else(|_| Err(Error::unavailable("the owning shard stopped")))
    }

    /// Handles one message from another shard; never waits, so the mesh drains.
    fn on_mesh(&self, msg: MeshMsg) {
        self.metrics.mesh_received.increment(1);
        match msg.0 {
            Message::Request { from, id, op } => {
                self.metrics.queue_depth.increment(1.0);
                let _ = self.queue.try_send(Pending { op, reply: Reply::Remote { to: from, id } });
            }
            Message::Response { id, result } => {
                if let Some(tx) = self.waiting.borrow_mut().remove(&id) {
                    let _ = tx.send(result);
                }
            }
            Message::Park(gate) => gate.park(),
            Message::Committed => self.wake_committed(),
        }
    }

    /// Grows this shard's store (see `Store::make_room`): parks every
    /// other reactor through the mesh, then this one (by blocking in
    /// place), and holds off the admin thread's readers. Returns false when
    /// another growth or an admin reader is busy: the caller tries again.
    async fn grow(&self, extra: u64) -> bool {
        if GROWING.swap(true, Ordering::Acquire) {
            return false;
        }
        let store = self.stores.engine(self.id);
        let gate = Arc::new(Gate::default());
        // Wait only for the reactors that got the message: one that has
        // stopped (shutdown) reads nothing any more.
        let mut parking = 0;
        if let Some(mesh) = &self.mesh {
            for p in (0..self.n_shards()).filter(|&p| p != self.id) {
                parking += mesh.send_to(p, MeshMsg(Message::Park(gate.clone()))).await.is_ok() as usize;
            }
        }
        gate.wait_parked(parking);
        // SAFETY: every reactor is parked between transactions, the admin
        // thread's readers are held off by the guard, and this shard's
        // commit loop (the only writer) is here.
        let result = store.exclusive().map(|_outside| unsafe { store.make_room(extra) });
        gate.release();
        let grew = match result {
            None => false,
            Some(Ok(Some((from, to)))) => {
                eprintln!("coredir: shard {}: LMDB map grown from {} MiB to {} MiB", self.id, from >> 20, to >> 20);
                true
            }
            Some(Ok(None)) => true,
            Some(Err(e)) => {
                eprintln!("coredir: shard {}: growing the LMDB map failed: {e}", self.id);
                false
            }
        };
        GROWING.store(false, Ordering::Release);
        grew
    }

    async fn reply(&self, reply: Reply, result: Outcome) {
        match reply {
            Reply::Local(tx) => {
                let _ = tx.send(result);
            }
            Reply::Remote { to, id } => {
                if let Some(mesh) = &self.mesh {
                    self.metrics.mesh_sent.increment(1);
                    let _ = mesh.send_to(to, MeshMsg(Message::Response { id, result })).await;
                }
            }
        }
    }
}

async fn commit_loop(shard: Rc<Shard>, rx: LocalReceiver<Pending>) {
    let store = shard.stores.engine(shard.id);
    let mut clock = match write::clock(&**store, shard.stamping, &shard.manifest) {
        Ok(h) => h,
        Err(e) => {
            // Nothing can be written without a clock: say so on every write.
            eprintln!("coredir: shard {}: reading the clock's bound failed: {e}", shard.id);
            while let Some(p) = rx.recv().await {
                shard.reply(p.reply, Err(e.clone())).await;
            }
            return;
        }
    };
    clock.commit_delay = test_commit_delay(shard.id);
    clock.hlc.close();
    shard.floors.raise(shard.id, clock.hlc.floor());
    // The ticker wakes the loop while idle; a full channel means it is busy.
    let (tick, ticks) = local_channel::new_bounded::<()>(1);
    glommio::spawn_local(async move {
        loop {
            glommio::timer::sleep(FLOOR_TICK).await;
            if let Err(glommio::GlommioError::Closed(_)) = tick.try_send(()) {
                return;
            }
        }
    })
    .detach();
    loop {
        let first = match futures_lite::future::or(async { rx.recv().await.map(Some) }, async {
            ticks.recv().await.map(|_| None)
        })
        .await
        {
            None => return,
            Some(None) => {
                // Idle: nothing stamped is unseen, so the floor is now.
                clock.hlc.close();
                shard.floors.raise(shard.id, clock.hlc.floor());
                continue;
            }
            Some(Some(p)) => p,
        };
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match futures_lite::future::poll_once(rx.recv()).await {
                Some(Some(p)) => batch.push(p),
                _ => break,
            }
        }
        let (mut ops, replies): (Vec<WriteOp>, Vec<Reply>) = batch.into_iter().map(|p| (p.op, p.reply)).unzip();
        let m = &shard.metrics;
        m.queue_depth.decrement(ops.len() as f64);
        m.commit_batch.record(ops.len() as f64);
        if store.wants_room() {
            shard.grow(0).await;
        }
        let started = std::time::Instant::now();
        let results = loop {
            let (owned, manifest) = (store.clone(), shard.manifest.clone());
            let (back, kept, results) = glommio::executor()
                .spawn_blocking(move || {
                    let results = run_batch(&*owned, |k| manifest.partition_of(k), &mut ops, &mut clock);
                    (ops, clock, results)
                })
                .await;
            (ops, clock) = (back, kept);
            // Out of room: nothing of the batch was committed; at least
            // double the map and run it again.
            if !store.take_full() {
                break results;
            }
            while !shard.grow(store.map_size()).await {
                glommio::timer::sleep(Duration::from_millis(10)).await;
            }
        };
        m.commit_seconds.record(started.elapsed().as_secs_f64());
        shard.floors.raise(shard.id, clock.hlc.floor());
        shard.tell_committed();
        for (reply, result) in replies.into_iter().zip(results) {
            shard.reply(reply, result).await;
        }
    }
}

/// `COREDIR_TEST_COMMIT_DELAY_MS=SHARD:MS`: that shard pauses every
/// batch between stamping and commit (tests of the cookie's floor).
fn test_commit_delay(shard: usize) -> Option<Duration> {
    let v = std::env::var("COREDIR_TEST_COMMIT_DELAY_MS").ok()?;
    let (s, ms) = v.split_once(':')?;
    let ms: u64 = ms.parse().ok()?;
    (s.parse::<usize>().ok()? == shard).then(|| Duration::from_millis(ms))
}

async fn sync_loop(store: Arc<Engine>, every: Duration) {
    loop {
        glommio::timer::sleep(every).await;
        let store = store.clone();
        if let Err(e) = glommio::executor().spawn_blocking(move || store.sync()).await {
            eprintln!("coredir: periodic sync failed: {e}");
        }
    }
}
