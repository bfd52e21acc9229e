//! One client connection: framing, the read loop and the writer task.
//!
//! A plain TCP socket is split by duplicating its descriptor: the read loop
//! owns one glommio stream and the writer task the other, so neither half
//! needs a lock. A TLS or local-socket stream is shared by the two through
//! an `Rc<RefCell<_>>` borrowed only inside a poll. StartTLS hands the
//! writer's queue over to a new writer once the response is written and the
//! handshake is done. Requests are decoded after every read; each PDU's declared length
//! is checked against the connection's limit before it is buffered (256 KiB
//! before a bind, 4 MiB after, by default), and a malformed or oversized PDU
//! closes only this connection, after a Notice of Disconnection. Responses
//! of requests answered inline are gathered and written once per read;
//! searches and writes run as their own tasks and send their own frames.

mod intake;
mod registry;
mod room;
mod writer;
pub use intake::Intake;
pub use registry::{ConnInfo, Registry};
pub use room::Budget;
use room::Room;
use writer::{spawn_writer, Half, Out};

use crate::accesslog::{self, LogLevel};
use crate::ber::{self, Peeked};
use crate::ctx::Ctx;
use crate::ops::{self, Flow};
use crate::strict::Check;
use bytes::BytesMut;
use futures_lite::{AsyncRead, AsyncWrite};
use futures_rustls::server::TlsStream;
use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use glommio::net::TcpStream;
use ldap3_proto::proto::LdapMsg;
use ldap3_proto::proto::LdapResult;
use ldap3_proto::simple::DisconnectionNotice;
use ldap3_proto::{LdapCodec, LdapResultCode};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::codec::Encoder;

/// Frames queued for the writer before request tasks wait (backpressure
/// from a client that does not read). What such a client can make the
/// server hold is bounded in bytes (`limits.max_queued_bytes_per_connection`,
/// `Room`; a frame counts at least 1 KiB): a frame may be one entry, and
/// 64 frames of 1 MB entries were 64 MB per connection.
const OUT_FRAMES: usize = 64;
/// Most bytes one read takes, into the shard's `SCRATCH`.
const READ_CHUNK: usize = 64 << 10;
/// A connection keeps a read buffer no larger than this while it waits
/// with nothing unread: idle connections hold next to nothing.
const IDLE_RBUF: usize = 4 << 10;

thread_local! {
    /// The shard's one read buffer: a read copies what arrived into its
    /// connection's `rbuf` inside the same poll, so no connection holds
    /// it across a wait (glommio's reads are readiness-based: the buffer
    /// is only touched within `poll_read`).
    static SCRATCH: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0u8; READ_CHUNK]);
}

/// Notes after a read what `rbuf` holds at least: `capacity` counts only
/// from the read position, and a buffer read to its end shows none.
fn note_held(rbuf: &BytesMut, held: &mut usize) {
    *held = (*held).max(rbuf.len() + rbuf.capacity());
}

/// Before a wait: a drained `rbuf` that grew past `IDLE_RBUF` (a burst of
/// pipelined requests, one big request) is given back.
fn give_back(rbuf: &mut BytesMut, held: &mut usize) {
    if rbuf.is_empty() && *held > IDLE_RBUF {
        (*rbuf, *held) = (BytesMut::new(), 0);
    }
}

/// Reads what the socket has into `rbuf`, through the shard's `SCRATCH`.
async fn read_into<R: AsyncRead + Unpin>(stream: &mut R, rbuf: &mut BytesMut) -> std::io::Result<usize> {
    std::future::poll_fn(|cx| {
        SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            let read = std::pin::Pin::new(&mut *stream).poll_read(cx, &mut scratch);
            if let std::task::Poll::Ready(Ok(n)) = read {
                rbuf.extend_from_slice(&scratch[..n]);
            }
            read
        })
    })
    .await
}
/// How deep ldap3_proto's parser may nest (its default; `strict` bounds
/// the protocolOp again).
const MAX_BER_DEPTH: usize = ldap3_lber::parse::DEFAULT_MAX_BER_DEPTH;

/// Who the connection is bound as.
#[derive(Clone, Debug, Default)]
pub enum Identity {
    #[default]
    Anonymous,
    Root(Rc<str>),
    User(Rc<Bound>),
}

/// A user bound with an entry's password: the DN as stored and its key.
#[derive(Debug)]
pub struct Bound {
    pub dn: String,
    pub key: Vec<u8>,
}

impl Identity {
    pub fn dn(&self) -> &str {
        match self {
            Identity::Anonymous => "",
            Identity::Root(dn) => dn,
            Identity::User(b) => &b.dn,
        }
    }

    pub fn is_root(&self) -> bool {
        matches!(self, Identity::Root(_))
    }

    /// The DN key of a bound user, for access decisions.
    pub fn key(&self) -> Option<&[u8]> {
        match self {
            Identity::User(b) => Some(&b.key),
            _ => None,
        }
    }
}

pub struct Conn {
    pub ctx: Rc<Ctx>,
    /// Unique in the process (slapd's `conn=`).
    pub id: u64,
    ops: Cell<u64>,
    /// What the admin socket sees of this connection.
    pub info: Arc<ConnInfo>,
    pub identity: RefCell<Identity>,
    /// Running searches by message id, and how many run under it; setting
    /// the flag abandons them (`ops::search::running`).
    pub running: RefCell<HashMap<i32, (Rc<crate::ops::abandon::Abandoned>, usize)>>,
    /// Searches a Cancel operation stopped: they end with `canceled`.
    pub canceled: RefCell<std::collections::HashSet<i32>>,
    /// Searches begun in the read's batch that go on as tasks once the
    /// batch is dispatched (`ops::search::start`), so that an Abandon
    /// read with them is seen before they go on.
    later: RefCell<Vec<std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>>>,
    /// Operations running as tasks (searches and writes), for the
    /// `max_pending` limits.
    pub pending: Cell<usize>,
    /// What the running operations hold of their requests (`intake`).
    held: intake::Held,
    /// Which of the connection's long searches runs its next slice
    /// (`Reservation::next_turn`).
    turn: Rc<glommio::sync::Semaphore>,
    /// Sorted searches running (`limits.max_sorts_per_connection`).
    pub sorting: Cell<usize>,
    /// Security strength of TLS on this connection (0 without).
    pub tls_ssf: Cell<u32>,
    /// The subject of the client's verified TLS certificate, as slapd
    /// names it (`tls::client_subject`, a normalized DN): who SASL
    /// EXTERNAL authenticates over TLS (`ops::sasl`).
    pub tls_subject: RefCell<Option<Rc<str>>>,
    /// Of the transport (71 for the local socket, as slapd; 0 for TCP).
    pub transport_ssf: u32,
    /// On the local socket, the client process's credentials: who SASL
    /// EXTERNAL authenticates (`ops::sasl`).
    pub peer_cred: Option<PeerCred>,
    /// A SASL bind answered saslBindInProgress and waits for the client's
    /// next step: anything but a Bind is refused meanwhile, as slapd does
    /// (`ops::sasl`).
    pub sasl_in_progress: Cell<bool>,
    out: LocalSender<Out>,
    /// The plain socket (TCP or ldapi) answers are written to in place
    /// while the writer holds none (`send_now`); -1 under TLS, after
    /// StartTLS and once the read loop has ended.
    direct: Cell<RawFd>,
    /// Frames handed to the writer and not yet written (or dropped): while
    /// any is, a write in place would overtake it.
    queued: Rc<Cell<usize>>,
    /// KiB the queue may still take (`limits.max_queued_bytes_per_connection`, and the shard's budget
    /// beyond `room::OWN_KIB`): each frame takes its size, and the writer
    /// gives it back once the frame is written (or dropped).
    room: Rc<Room>,
}

/// Room in a connection's queue taken before entries are encoded: a
/// search that took room only to send what it had built could build one
/// entry per pending operation while the queue was full (100 pipelined
/// reads of a 1 MB entry: 100 MB). An entry is written only once its room
/// is taken (`try_take`); otherwise the search sends what it has, waits
/// for that room (`wait_for`) and reads the entry again. What is left is
/// given back when the reservation ends.
pub struct Reservation<'c> {
    conn: &'c Conn,
    /// KiB taken from the queue's room and not yet handed to a frame.
    reserved: Cell<u64>,
    /// Of those, KiB the entries buffered since the last send account for.
    used: Cell<u64>,
}

impl Reservation<'_> {
    /// Gives back what is held and not yet sent (an entry the room was
    /// waited for that the next round no longer sends).
    pub fn release(&self) {
        self.conn.room.signal(self.reserved.replace(0));
        self.used.set(0);
    }

    /// KiB an entry of about `bytes` encoded bytes takes, with room for the
    /// computed attributes and the framing.
    pub fn kib_of(&self, bytes: usize) -> u64 {
        self.conn.room.kib_of_frame(bytes + 512)
    }

    fn credit(&self) -> u64 {
        self.reserved.get() - self.used.get()
    }

    /// Waits for the connection's turn to run slices of a long search,
    /// held until the permit is dropped (`search::Emit::flush`).
    pub async fn next_turn(&self) -> Option<glommio::sync::StaticPermit> {
        self.conn.turn.acquire_static_permit(1).await.ok()
    }

    /// Takes room for an entry now, if there is some.
    pub fn try_take(&self, kib: u64) -> bool {
        let more = kib.saturating_sub(self.credit());
        if more > 0 && !self.conn.room.try_acquire(more) {
            return false;
        }
        self.reserved.set(self.reserved.get() + more);
        self.used.set(self.used.get() + kib);
        true
    }

    /// Waits until `kib` more is reserved (for the entry `try_take` refused).
    pub async fn wait_for(&self, kib: u64) {
        let more = kib.saturating_sub(self.credit());
        if more > 0 && self.conn.room.acquire(more).await {
            self.reserved.set(self.reserved.get() + more);
        }
    }

    /// Queues `frame`, whose entries took their room here; the rest is
    /// given back. A frame that needs more than was taken (a result message,
    /// an estimate short of the truth) gives back all it holds and waits
    /// for the whole as `Conn::send` does: a search waiting while it holds
    /// room could, with others doing the same, hold all of it, with nothing
    /// queued to free any.
    pub async fn send(&self, frame: BytesMut) {
        let kib = self.conn.room.kib_of_frame(frame.len());
        let held = self.reserved.replace(0);
        self.used.set(0);
        if held >= kib {
            self.conn.room.signal(held - kib);
            if !frame.is_empty() {
                self.conn.send_taken(frame, kib).await;
            }
            return;
        }
        self.conn.room.signal(held);
        self.conn.send(frame).await;
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.conn.room.signal(self.reserved.get());
    }
}

/// What a write in place did with a frame (`Conn::send_now`).
enum InPlace {
    All,
    /// The socket took part: the rest.
    Part(BytesMut),
    /// Not tried, or the socket took nothing: the frame.
    None(BytesMut),
}

/// One frame counted in `Conn::queued` while it is handed to the writer;
/// a hand-over that fails or is dropped uncounts it.
struct Queued<'a>(&'a Cell<usize>);

impl<'a> Queued<'a> {
    fn new(queued: &'a Cell<usize>) -> Queued<'a> {
        queued.set(queued.get() + 1);
        Queued(queued)
    }

    /// The writer has it: it uncounts it once written.
    fn keep(self) {
        std::mem::forget(self);
    }
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

/// Counts one running operation of a connection while it lives, with
/// what its request holds of the connection's and shard's bounds
/// (`intake`).
pub struct InFlight(Rc<Conn>, intake::Charge);

impl InFlight {
    pub fn new(conn: &Rc<Conn>) -> InFlight {
        conn.pending.set(conn.pending.get() + 1);
        conn.info.in_flight.store(conn.pending.get() as u64, Ordering::Relaxed);
        InFlight(conn.clone(), conn.held.take_arriving())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.pending.set(self.0.pending.get() - 1);
        self.0.info.in_flight.store(self.0.pending.get() as u64, Ordering::Relaxed);
        self.0.held.release(&self.0.ctx.intake, std::mem::take(&mut self.1));
    }
}

impl Conn {
    fn new(ctx: Rc<Ctx>, transport_ssf: u32, peer: String, fd: RawFd) -> (Rc<Conn>, LocalReceiver<Out>) {
        Conn::with_cred(ctx, (transport_ssf, None), peer, fd)
    }

    fn with_cred(
        ctx: Rc<Ctx>,
        (transport_ssf, peer_cred): (u32, Option<PeerCred>),
        peer: String,
        fd: RawFd,
    ) -> (Rc<Conn>, LocalReceiver<Out>) {
        let (out, frames) = local_channel::new_bounded::<Out>(OUT_FRAMES);
        let ctx_queued = ctx.queued.clone();
        let id = ctx.next_conn_id();
        let info = Arc::new(ConnInfo::new(id, ctx.shard.id, peer, fd));
        ctx.connections.insert(info.clone());
        ctx.metrics.accepted.increment(1);
        ctx.metrics.open.increment(1.0);
        if accesslog::enabled(LogLevel::Stats) {
            ctx.log.accept(id, fd, &info.peer);
        }
        let conn = Rc::new(Conn {
            id,
            ops: Cell::new(0),
            info,
            ctx,
            identity: RefCell::new(Identity::Anonymous),
            running: RefCell::new(HashMap::new()),
            canceled: RefCell::default(),
            later: RefCell::default(),
            pending: Cell::new(0),
            held: intake::Held::default(),
            turn: Rc::new(glommio::sync::Semaphore::new(1)),
            sorting: Cell::new(0),
            tls_ssf: Cell::new(0),
            tls_subject: RefCell::new(None),
            transport_ssf,
            peer_cred,
            sasl_in_progress: Cell::new(false),
            out,
            direct: Cell::new(-1),
            queued: Rc::default(),
            room: Room::new(ctx_queued, fd),
        });
        (conn, frames)
    }

    /// Queues a frame for the writer; waits while the client is not
    /// reading (`OUT_FRAMES`, `Room`).
    pub async fn send(&self, frame: BytesMut) {
        if frame.is_empty() {
            return;
        }
        let frame = match self.send_now(frame) {
            InPlace::All => return,
            InPlace::Part(rest) => return self.queue_rest(rest, 0),
            InPlace::None(frame) => frame,
        };
        let kib = self.room.kib_of_frame(frame.len());
        // Counted before the wait: what this task sends next cannot pass it.
        let queued = Queued::new(&self.queued);
        if self.room.acquire(kib).await && self.out.send(Out::Frame(frame, kib)).await.is_ok() {
            queued.keep();
        }
    }

    /// `send` of a frame whose room is taken: what is written in place
    /// gives its room back.
    async fn send_taken(&self, frame: BytesMut, kib: u64) {
        let frame = match self.send_now(frame) {
            InPlace::All => return self.room.signal(kib),
            InPlace::Part(rest) => return self.queue_rest(rest, kib),
            InPlace::None(frame) => frame,
        };
        let queued = Queued::new(&self.queued);
        if self.out.send(Out::Frame(frame, kib)).await.is_ok() {
            queued.keep();
        }
    }

    /// Writes `frame` to a plain socket at once when the writer holds
    /// nothing, as much as the socket takes without waiting; what is left
    /// (all of it under TLS, with frames queued, or on any error, which
    /// the writer then meets and acts on) goes to the writer. A response
    /// so sent costs no hand-over to the writer task: for a bind or a
    /// search of one entry that was a tenth of the request's work.
    fn send_now(&self, frame: BytesMut) -> InPlace {
        let fd = self.direct.get();
        if fd < 0 || self.queued.get() > 0 {
            return InPlace::None(frame);
        }
        // SAFETY: `fd` is the connection's open socket (`direct` is reset
        // before the read loop's stream can be closed); `frame` is valid
        // for its length.
        let n = unsafe { libc::send(fd, frame.as_ptr().cast(), frame.len(), libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
        if n <= 0 {
            return InPlace::None(frame);
        }
        let n = n as usize;
        self.ctx.metrics.bytes_out.increment(n as u64);
        // A client that reads keeps draining (`room::Budget::evict_stalled`).
        self.room.drained(self.room.kib_of_frame(n));
        if n == frame.len() {
            return InPlace::All;
        }
        // A small rest keeps no big frame's allocation.
        let rest = match frame.len() - n < frame.capacity() / 2 {
            true => BytesMut::from(&frame[n..]),
            false => {
                let mut frame = frame;
                bytes::Buf::advance(&mut frame, n);
                frame
            }
        };
        InPlace::Part(rest)
    }

    /// Hands the rest of a frame cut short in place to the writer at once,
    /// before anything else can be sent (no wait: the queue is empty, as
    /// nothing was queued). It keeps its share of the `held` room the
    /// whole frame took, else takes room if there is some, else goes
    /// unaccounted: one such rest per connection at most, as a write in
    /// place is only tried with nothing queued.
    fn queue_rest(&self, rest: BytesMut, held: u64) {
        let need = self.room.kib_of_frame(rest.len());
        let kib = match held >= need {
            true => {
                self.room.signal(held - need);
                need
            }
            false if self.room.try_acquire(need) => need,
            false => 0,
        };
        let queued = Queued::new(&self.queued);
        match self.out.try_send(Out::Frame(rest, kib)) {
            Ok(()) => queued.keep(),
            Err(_) => self.room.signal(kib),
        }
    }

    /// Lets answers be written in place on the plain socket `fd`.
    fn write_in_place(&self, fd: RawFd) {
        self.direct.set(fd);
    }

    /// From now on every answer goes through the writer (TLS follows, or
    /// the stream is about to close).
    fn stop_writing_in_place(&self) {
        self.direct.set(-1);
    }

    /// Runs `task` once the requests of the read now dispatched are.
    pub fn defer(&self, task: std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>) {
        self.later.borrow_mut().push(task);
    }

    /// Spawns the tasks `defer` holds.
    fn start_deferred(&self) {
        if self.later.borrow().is_empty() {
            return;
        }
        for task in self.later.take() {
            glommio::spawn_local(task).detach();
        }
    }

    /// A reservation on the queue's bytes, for a search that takes room
    /// before it encodes each entry (`Reservation`).
    pub fn reservation(&self) -> Reservation<'_> {
        Reservation { conn: self, reserved: Cell::new(0), used: Cell::new(0) }
    }

    /// Sets who the connection is bound as (also for `ctl connections`).
    pub fn set_identity(&self, id: Identity) {
        *self.identity.borrow_mut() = id;
        self.publish_identity();
    }

    /// Shows the connection's identity to `ctl connections` when it
    /// changed (an `ArcSwap` store costs the writer more than the check).
    pub fn publish_identity(&self) {
        let id = self.identity.borrow();
        if self.info.identity.load().as_str() != id.dn() {
            self.info.identity.store(Arc::new(id.dn().to_string()));
        }
    }

    /// The next operation number; also marks the connection active.
    pub fn next_op(&self) -> u64 {
        let n = self.ops.get();
        self.ops.set(n + 1);
        self.info.ops.store(n + 1, Ordering::Relaxed);
        self.info.touch();
        n
    }

    /// Whether the connection is protected: TLS or the local socket (for
    /// `tls.required`).
    pub fn is_confidential(&self) -> bool {
        self.tls_ssf.get() > 0 || self.transport_ssf > 0
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.ctx.connections.remove(self.info.shard, self.id);
        self.ctx.metrics.open.decrement(1.0);
        if accesslog::enabled(LogLevel::Stats) {
            self.ctx.log.closed(self.id, self.info.fd_number);
        }
    }
}

/// Appends one encoded message to `out`.
pub fn encode(out: &mut BytesMut, msg: LdapMsg) {
    // Results end every request: written directly, without ldap3_proto's
    // tag tree, when they carry no controls and no referral.
    if msg.ctrl.is_empty() {
        if let Some((tag, res)) = crate::ber::plain_result(&msg.op) {
            return crate::ber::result_message(out, msg.msgid, tag, res);
        }
    }
    if let Err(e) = LdapCodec::default().encode(msg, out) {
        eprintln!("coredir: encoding a response failed: {e}");
    }
}

/// A plain LDAP connection. The read loop and the writer own one descriptor
/// each (a `dup`), so neither half needs a lock; StartTLS turns it into a
/// TLS connection in place.
pub async fn serve_tcp(stream: TcpStream, peer: Option<std::net::SocketAddr>, ctx: Rc<Ctx>) {
    let _ = stream.set_nodelay(true);
    let fd = stream.as_raw_fd();
    let Some(writer) = writer_of(fd) else { return };
    let (conn, frames) = Conn::new(ctx, 0, peer_name(peer), fd);
    conn.write_in_place(fd);
    let writer_task = spawn_writer(writer, frames, fd, &conn);
    let mut stream = stream;
    let end = read_loop(&mut stream, &conn).await;
    let End::StartTls = end else { return finish(conn, writer_task).await };
    // The writer wrote the StartTLS response and handed back the queue.
    let Some(Some((plain_writer, frames))) = writer_task.await else { return };
    drop(plain_writer);
    // As slapd: a Bind made in the clear does not carry over into TLS;
    // the connection goes on as anonymous until the client binds again
    // (and shows so while the handshake runs).
    conn.set_identity(Identity::Anonymous);
    let Some(tls) = handshake(&conn, stream).await else { return };
    serve_split(tls, conn, frames, fd).await;
}

/// An `ldaps://` connection: TLS from the first byte.
pub async fn serve_tls(stream: TcpStream, peer: Option<std::net::SocketAddr>, ctx: Rc<Ctx>) {
    let _ = stream.set_nodelay(true);
    let fd = stream.as_raw_fd();
    let (conn, frames) = Conn::new(ctx, 0, peer_name(peer), fd);
    let Some(tls) = handshake(&conn, stream).await else { return };
    serve_split(tls, conn, frames, fd).await;
}

/// The writer's half of a plain connection: a `dup` of its descriptor.
fn writer_of(fd: RawFd) -> Option<TcpStream> {
    // SAFETY: dup returns a new descriptor for the same socket, owned by the writer.
    let write_fd = unsafe { libc::dup(fd) };
    if write_fd < 0 {
        let why = format!("dup of a new connection failed: {}", std::io::Error::last_os_error());
        crate::listener::OUT_OF_DESCRIPTORS.with(|o| o.failed(&why));
        return None;
    }
    Some(unsafe { TcpStream::from_raw_fd(write_fd) })
}

/// A connection on the local socket (ldapi), which counts as protected,
/// with its client's credentials. glommio's stream types are thin
/// wrappers of a socket's descriptor whose reads and writes are the same
/// for a Unix socket; its `UnixStream` does not give the descriptor out,
/// so the accept loop (`listener::run_local`) hands the connection over
/// as a `TcpStream`, of which only reads, writes and the descriptor are
/// used here.
pub async fn serve_unix(stream: TcpStream, peer_cred: Option<PeerCred>, ctx: Rc<Ctx>) {
    let fd = stream.as_raw_fd();
    let Some(writer) = writer_of(fd) else { return };
    let (conn, frames) = Conn::with_cred(ctx, (LOCAL_SSF, peer_cred), "PATH=ldapi".into(), fd);
    conn.write_in_place(fd);
    let writer_task = spawn_writer(writer, frames, fd, &conn);
    let mut stream = stream;
    let _ = read_loop(&mut stream, &conn).await;
    finish(conn, writer_task).await;
}

/// The uid and gid of the process at the other end of a Unix socket.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PeerCred {
    pub uid: u32,
    pub gid: u32,
}

impl PeerCred {
    /// `SO_PEERCRED`: as the client was when it connected.
    pub fn of(fd: RawFd) -> Option<PeerCred> {
        let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        // SAFETY: `cred` and `len` are valid for the kernel to write.
        let rc = unsafe { libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_PEERCRED, (&raw mut cred).cast(), &mut len) };
        (rc == 0).then_some(PeerCred { uid: cred.uid, gid: cred.gid })
    }
}

/// Serves a client that sent `data` and closed its side, discarding the
/// responses: the fuzz target's way in (`crate::harness`). Returns once
/// every operation the bytes started has finished.
pub async fn serve_bytes(data: Vec<u8>, ctx: Rc<Ctx>) {
    let (conn, frames) = Conn::new(ctx, 0, "fuzz".into(), -1);
    let writer_task = spawn_writer(futures_lite::io::sink(), frames, -1, &conn);
    let _ = read_loop(&mut futures_lite::io::Cursor::new(data), &conn).await;
    while conn.pending.get() > 0 {
        glommio::timer::sleep(Duration::from_micros(50)).await;
    }
    finish(conn, writer_task).await;
}

/// `IP=a.b.c.d:port`, as slapd's ACCEPT line names a peer.
fn peer_name(peer: Option<std::net::SocketAddr>) -> String {
    peer.map(|a| format!("IP={a}")).unwrap_or_else(|| "IP=unknown".into())
}

/// slapd's security strength for the local socket.
const LOCAL_SSF: u32 = 71;
/// How long a client may take to complete a TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

async fn handshake(conn: &Conn, stream: TcpStream) -> Option<TlsStream<TcpStream>> {
    let tls = conn.ctx.tls.as_ref()?;
    let accept = tls.acceptor().accept(stream);
    let tls = match glommio::timer::timeout(HANDSHAKE_TIMEOUT, async { Ok(accept.await) }).await {
        Ok(Ok(s)) => s,
        _ => return None,
    };
    conn.tls_ssf.set(crate::tls::ssf(tls.get_ref().1));
    *conn.tls_subject.borrow_mut() = crate::tls::client_subject(tls.get_ref().1).map(Rc::from);
    Some(tls)
}

/// Serves a stream whose halves share one state (TLS): both halves borrow
/// it only inside a poll, never across an `.await`.
async fn serve_split<S: AsyncRead + AsyncWrite + Unpin + 'static>(
    stream: S,
    conn: Rc<Conn>,
    frames: LocalReceiver<Out>,
    fd: RawFd,
) {
    let stream = Rc::new(RefCell::new(stream));
    let writer_task = spawn_writer(Half(stream.clone()), frames, fd, &conn);
    let _ = read_loop(&mut Half(stream), &conn).await;
    finish(conn, writer_task).await;
}

/// After the read loop: abandons running searches and lets the writer
/// drain what the remaining tasks send.
async fn finish<W>(conn: Rc<Conn>, writer_task: glommio::task::JoinHandle<Option<W>>) {
    conn.stop_writing_in_place();
    for (flag, _) in conn.running.borrow().values() {
        flag.raise();
    }
    drop(conn);
    let _ = writer_task.await;
}

/// Answers a request refused before it is decoded (`response_tag` its
/// response's tag) in the read's batch.
fn answer_refused(conn: &Conn, out: &mut BytesMut, (msgid, response_tag): (i32, u8), code: LdapResultCode, why: &str) {
    if response_tag == 0x61 {
        ops::bind_begins(conn);
    }
    ops::record::refused(conn, response_tag, &code, why);
    let res = LdapResult { code, matcheddn: String::new(), message: why.into(), referral: vec![] };
    crate::ber::result_message(out, msgid, response_tag, &res);
}

/// What running operations hold of their requests is bounded before the
/// next one (`frame`) is decoded (`intake`): waits while it does not fit,
/// for at most `limits.request_timeout_s` (`HELD_BACK_S` when that is 0:
/// no limit on partial requests), after which the request is to
/// be refused (its message ID and response tag are returned). Abandon and
/// Unbind, which have no answer, free and never wait. With nothing
/// running, a frame too short to weigh past the connection's own share
/// is not weighed (the usual case costs a comparison).
async fn held_back(
    conn: &Conn,
    frame: &[u8],
    inline: &mut BytesMut,
    limits: &crate::config::Limits,
) -> Option<(i32, u8)> {
    if conn.pending.get() == 0 && intake::always_taken(frame.len()) {
        return None;
    }
    let answered = crate::strict::answer_to(frame)?;
    let (weight, most) = (crate::strict::weight(frame), limits.max_pending_bytes_per_connection);
    if conn.held.try_admit(&conn.ctx.intake, weight, most) {
        return None;
    }
    // What is deferred must run for one of them to end.
    conn.start_deferred();
    conn.send(std::mem::take(inline)).await;
    let admit = conn.held.admit(&conn.ctx.intake, weight, most, || conn.pending.get());
    // Operations that do not end (a persistent search) or others holding
    // the shard's budget: refused, as past `max_pending`, and the
    // connection read again.
    let secs = match limits.request_timeout_s {
        0 => HELD_BACK_S,
        secs => secs,
    };
    (!within(secs, admit).await).then_some(answered)
}

/// How long a request waits for room when `limits.request_timeout_s` is 0:
/// never for good, or a connection whose room others hold (persistent
/// searches) would read nothing more, not even its client's close.
const HELD_BACK_S: u64 = 60;

/// Runs `fut` for at most `secs` seconds (0: no limit); whether it ended.
async fn within(secs: u64, fut: impl std::future::Future<Output = ()>) -> bool {
    if secs == 0 {
        fut.await;
        return true;
    }
    glommio::timer::timeout(Duration::from_secs(secs), async { Ok(fut.await) }).await.is_ok()
}

/// Why a read loop ended.
enum End {
    Closed,
    /// StartTLS was accepted: its response is queued before a `Handoff`.
    StartTls,
}

/// Starts what the read deferred (`Conn::defer`) however the read ends.
struct StartDeferred<'c>(&'c Conn);

impl Drop for StartDeferred<'_> {
    fn drop(&mut self) {
        self.0.start_deferred();
    }
}

async fn read_loop<R: AsyncRead + Unpin>(stream: &mut R, conn: &Rc<Conn>) -> End {
    let _deferred = StartDeferred(conn);
    let mut rbuf = BytesMut::new();
    // The most `rbuf` was seen to hold since it was last given back.
    let mut held = 0usize;
    // When the request now partly in `rbuf` began to arrive.
    let mut partial_since: Option<std::time::Instant> = None;
    loop {
        let live = conn.ctx.live();
        let limits = &live.limits;
        let mut inline = BytesMut::new();
        let before = rbuf.len();
        // Requests answered in place (searches, compares) run back to
        // back; past a slice of reactor time the other connections of the
        // shard are let in.
        let mut turn = std::time::Instant::now();
        loop {
            // The message to decode instead of the next in `rbuf`
            // (`Check::Without`), and whether parse must refuse its
            // controls (`Check::Refusing`).
            let mut instead = None;
            let mut refusing = false;
            let mut size = 0;
            let limit = match &*conn.identity.borrow() {
                Identity::Anonymous => limits.max_pdu_bytes_anonymous,
                _ => limits.max_pdu_bytes,
            };
            match ber::peek_frame(&rbuf) {
                Peeked::Incomplete => break,
                Peeked::Malformed => return disconnect(conn, inline, "malformed LDAP message").await,
                Peeked::Size(n) if n > limit => {
                    let why = format!("message of {n} bytes exceeds the limit of {limit} bytes");
                    return disconnect(conn, inline, &why).await;
                }
                Peeked::Size(n) if n > rbuf.len() => break,
                Peeked::Size(n) => match crate::strict::check(&rbuf[..n], conn.ctx.shard.stamping.capture, &|authzid| {
                    ops::proxied(conn, authzid).is_err()
                }) {
                    Ok(Check::Ok) => size = n,
                    Ok(Check::Without(msg)) => {
                        bytes::Buf::advance(&mut rbuf, n);
                        instead = Some(msg);
                    }
                    Ok(Check::Refusing(msg)) => {
                        bytes::Buf::advance(&mut rbuf, n);
                        (instead, refusing) = (Some(msg), true);
                    }
                    Ok(Check::Ignore) => {
                        bytes::Buf::advance(&mut rbuf, n);
                        continue;
                    }
                    Ok(Check::Refuse { msgid, tag, mut code, mut why }) => {
                        if tag != 0x61 && conn.sasl_in_progress.get() {
                            // As slapd, before the request is read any further.
                            (code, why) = (LdapResultCode::OperationsError, crate::ops::sasl::IN_PROGRESS);
                        }
                        answer_refused(conn, &mut inline, (msgid, tag), code, why);
                        bytes::Buf::advance(&mut rbuf, n);
                        continue;
                    }
                    Err(why) => return disconnect(conn, inline, &format!("malformed LDAP message: {why}")).await,
                },
            }
            let frame = instead.as_deref().unwrap_or(&rbuf[..size]);
            if let Some((msgid, tag)) = held_back(conn, frame, &mut inline, limits).await {
                turn = std::time::Instant::now();
                let why = "too much held by operations in progress on this connection or server";
                answer_refused(conn, &mut inline, (msgid, tag), LdapResultCode::Busy, why);
                bytes::Buf::advance(&mut rbuf, size);
                continue;
            }
            let decoded = crate::decode::message(frame, MAX_BER_DEPTH).map(|msg| {
                let first_step =
                    crate::ops::sasl::without_credentials(&msg) && crate::decode::sasl_credentials_absent(frame);
                (msg, first_step)
            });
            bytes::Buf::advance(&mut rbuf, size);
            match decoded {
                Some((msg, first_step)) => match conn
                    .held
                    .settle(&conn.ctx.intake, ops::dispatch(conn, msg, (first_step, refusing), &mut inline))
                {
                    // Its answers wait in `inline`: sending them here could
                    // wait for room, and a client that reads nothing would
                    // then stop the reading of what it sent after them.
                    Flow::Continue if turn.elapsed() >= crate::ops::search::SLICE => {
                        futures_lite::future::yield_now().await;
                        turn = std::time::Instant::now();
                    }
                    Flow::Continue => {}
                    Flow::Binding(later) => {
                        // Answers to what came before first, then the Bind's.
                        conn.start_deferred();
                        conn.send(std::mem::take(&mut inline)).await;
                        if let Some(bind) = later {
                            bind.await;
                        }
                    }
                    Flow::Close => {
                        conn.send(inline).await;
                        return End::Closed;
                    }
                    Flow::StartTls if rbuf.is_empty() => {
                        conn.send(inline).await;
                        conn.stop_writing_in_place();
                        let _ = conn.out.send(Out::Handoff).await;
                        return End::StartTls;
                    }
                    // RFC 4511 §4.14.1: nothing may follow StartTLS before its response.
                    Flow::StartTls => return disconnect(conn, inline, "data after the StartTLS request").await,
                },
                None => {
                    conn.held.settle(&conn.ctx.intake, ());
                    return disconnect(conn, inline, "malformed LDAP message").await;
                }
            }
        }
        conn.start_deferred();
        conn.send(inline).await;
        // A client that pipelines may always leave a request half read:
        // the one now partial began no earlier than the last one whole.
        partial_since = match (rbuf.is_empty(), rbuf.len() < before) {
            (true, _) => None,
            (false, true) => Some(std::time::Instant::now()),
            (false, false) => partial_since.or_else(|| Some(std::time::Instant::now())),
        };
        let idle = limits.idle_timeout_s;
        let wait = match partial_since {
            // A request partly arrived: the rest within `request_timeout_s`
            // of its first bytes, however slowly they trickle in.
            Some(since) if limits.request_timeout_s > 0 => {
                let deadline = since + Duration::from_secs(limits.request_timeout_s);
                Some(deadline.saturating_duration_since(std::time::Instant::now()))
            }
            // Idle: no request for `idle_timeout_s` and no operation running.
            _ if idle > 0 && conn.pending.get() == 0 => Some(Duration::from_secs(idle)),
            _ => None,
        };
        give_back(&mut rbuf, &mut held);
        let read = match wait {
            Some(wait) => match glommio::timer::timeout(wait, async { Ok(read_into(stream, &mut rbuf).await) }).await {
                Ok(r) => r,
                Err(_) => return End::Closed,
            },
            None => read_into(stream, &mut rbuf).await,
        };
        match read {
            Ok(0) | Err(_) => return End::Closed,
            Ok(n) => {
                conn.ctx.metrics.bytes_in.increment(n as u64);
                note_held(&rbuf, &mut held);
            }
        }
    }
}

async fn disconnect(conn: &Conn, mut out: BytesMut, why: &str) -> End {
    encode(&mut out, DisconnectionNotice::gen_response(LdapResultCode::ProtocolError, why));
    conn.send(out).await;
    End::Closed
}

#[cfg(test)]
mod read_buffer_tests {
    use super::*;

    /// A buffer one big request filled to its end shows no capacity once
    /// read, yet holds it all: it is given back all the same; a small one
    /// is kept (no allocation per request).
    #[test]
    fn a_drained_buffer_that_grew_is_given_back() {
        for (size, kept) in [(60 << 10, false), (300, true)] {
            let (mut rbuf, mut held) = (BytesMut::new(), 0);
            rbuf.extend_from_slice(&vec![1u8; size]);
            note_held(&rbuf, &mut held);
            bytes::Buf::advance(&mut rbuf, size);
            give_back(&mut rbuf, &mut held);
            rbuf.extend_from_slice(b"next");
            assert_eq!(rbuf.capacity() >= size - 4, kept, "{size}: capacity {}", rbuf.capacity());
        }
    }
}
