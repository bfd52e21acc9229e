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

use crate::ber::{self, Frame};
use crate::ops::{self, Flow};
use crate::server::Ctx;
use bytes::BytesMut;
use futures_lite::{AsyncRead, AsyncWrite};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use futures_rustls::server::TlsStream;
use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use glommio::net::{TcpStream, UnixStream};
use ldap3_proto::proto::LdapMsg;
use ldap3_proto::simple::DisconnectionNotice;
use ldap3_proto::{LdapCodec, LdapResultCode};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio_util::codec::{Decoder, Encoder};

/// Frames queued for the writer before request tasks wait (backpressure
/// from a client that does not read).
const OUT_FRAMES: usize = 64;
const READ_CHUNK: usize = 64 << 10;

/// Who the connection is bound as.
#[derive(Clone, Debug)]
pub enum Identity {
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
    pub identity: RefCell<Identity>,
    /// Running searches by message id; setting the flag abandons one.
    pub running: RefCell<HashMap<i32, Rc<Cell<bool>>>>,
    /// Operations running as tasks (searches and writes), for the
    /// `max_pending` limits.
    pub pending: Cell<usize>,
    /// Security strength of TLS on this connection (0 without).
    pub tls_ssf: Cell<u32>,
    /// Of the transport (71 for the local socket, as slapd; 0 for TCP).
    pub transport_ssf: u32,
    out: LocalSender<Out>,
}

/// Counts one running operation of a connection while it lives.
pub struct InFlight(Rc<Conn>);

impl InFlight {
    pub fn new(conn: &Rc<Conn>) -> InFlight {
        conn.pending.set(conn.pending.get() + 1);
        InFlight(conn.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.pending.set(self.0.pending.get() - 1);
    }
}

impl Conn {
    fn new(ctx: Rc<Ctx>, transport_ssf: u32) -> (Rc<Conn>, LocalReceiver<Out>) {
        let (out, frames) = local_channel::new_bounded::<Out>(OUT_FRAMES);
        let conn = Rc::new(Conn {
            ctx,
            identity: RefCell::new(Identity::Anonymous),
            running: RefCell::new(HashMap::new()),
            pending: Cell::new(0),
            tls_ssf: Cell::new(0),
            transport_ssf,
            out,
        });
        (conn, frames)
    }

    /// Queues a frame for the writer; waits while the client is not reading.
    pub async fn send(&self, frame: BytesMut) {
        if !frame.is_empty() {
            let _ = self.out.send(Out::Frame(frame)).await;
        }
    }

    /// Whether the connection is protected: TLS or the local socket (for
    /// `tls.required`).
    pub fn is_confidential(&self) -> bool {
        self.tls_ssf.get() > 0 || self.transport_ssf > 0
    }
}

/// What the writer task is asked to do.
enum Out {
    Frame(BytesMut),
    /// Stop after what is queued and hand the stream back (StartTLS).
    Handoff,
}

/// Appends one encoded message to `out`.
pub fn encode(out: &mut BytesMut, msg: LdapMsg) {
    if let Err(e) = LdapCodec::default().encode(msg, out) {
        eprintln!("coredir: encoding a response failed: {e}");
    }
}

/// A plain LDAP connection. The read loop and the writer own one descriptor
/// each (a `dup`), so neither half needs a lock; StartTLS turns it into a
/// TLS connection in place.
pub async fn serve_tcp(stream: TcpStream, ctx: Rc<Ctx>) {
    let _ = stream.set_nodelay(true);
    let fd = stream.as_raw_fd();
    // SAFETY: dup returns a new descriptor for the same socket, owned by the writer.
    let write_fd = unsafe { libc::dup(fd) };
    if write_fd < 0 {
        eprintln!("coredir: dup failed: {}", std::io::Error::last_os_error());
        return;
    }
    let writer = unsafe { TcpStream::from_raw_fd(write_fd) };
    let (conn, frames) = Conn::new(ctx, 0);
    let writer_task = spawn_writer(writer, frames, fd, &conn);
    let mut stream = stream;
    let end = read_loop(&mut stream, &conn).await;
    let End::StartTls = end else { return finish(conn, writer_task).await };
    // The writer wrote the StartTLS response and handed back the queue.
    let Some(Some((plain_writer, frames))) = writer_task.await else { return };
    drop(plain_writer);
    let Some(tls) = handshake(&conn, stream).await else { return };
    serve_split(tls, conn, frames, fd).await;
}

/// An `ldaps://` connection: TLS from the first byte.
pub async fn serve_tls(stream: TcpStream, ctx: Rc<Ctx>) {
    let _ = stream.set_nodelay(true);
    let fd = stream.as_raw_fd();
    let (conn, frames) = Conn::new(ctx, 0);
    let Some(tls) = handshake(&conn, stream).await else { return };
    serve_split(tls, conn, frames, fd).await;
}

/// A connection on the local socket (ldapi), which counts as protected.
pub async fn serve_unix(stream: UnixStream, ctx: Rc<Ctx>) {
    // glommio's UnixStream does not expose its descriptor: a stalled local
    // client loses its writer (and its responses) but not its socket.
    let fd = -1;
    let (conn, frames) = Conn::new(ctx, LOCAL_SSF);
    let stream = Rc::new(RefCell::new(stream));
    let writer_task = spawn_writer(Half(stream.clone()), frames, fd, &conn);
    let _ = read_loop(&mut Half(stream), &conn).await;
    finish(conn, writer_task).await;
}

/// Serves a client that sent `data` and closed its side, discarding the
/// responses: the fuzz target's way in (`crate::harness`). Returns once
/// every operation the bytes started has finished.
pub async fn serve_bytes(data: Vec<u8>, ctx: Rc<Ctx>) {
    let (conn, frames) = Conn::new(ctx, 0);
    let writer_task = spawn_writer(futures_lite::io::sink(), frames, -1, &conn);
    let _ = read_loop(&mut futures_lite::io::Cursor::new(data), &conn).await;
    while conn.pending.get() > 0 {
        glommio::timer::sleep(Duration::from_micros(50)).await;
    }
    finish(conn, writer_task).await;
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
    for flag in conn.running.borrow().values() {
        flag.set(true);
    }
    drop(conn);
    let _ = writer_task.await;
}

/// The writer: sends queued frames in order. A client that stops reading
/// for `limits.write_timeout_s` is disconnected (the socket is shut down,
/// which also ends the read loop), so it can never make the server buffer
/// more than the queue. Returns the stream and the queue on `Handoff`.
fn spawn_writer<W: AsyncWrite + Unpin + 'static>(
    mut writer: W,
    frames: LocalReceiver<Out>,
    fd: RawFd,
    conn: &Conn,
) -> glommio::task::JoinHandle<Option<(W, LocalReceiver<Out>)>> {
    let timeout = Duration::from_secs(conn.ctx.limits.write_timeout_s);
    glommio::spawn_local(async move {
        while let Some(out) = frames.recv().await {
            let frame = match out {
                Out::Frame(f) => f,
                Out::Handoff => return Some((writer, frames)),
            };
            let write = async {
                writer.write_all(&frame).await?;
                writer.flush().await
            };
            let written = if timeout.is_zero() {
                write.await
            } else {
                match glommio::timer::timeout(timeout, async { Ok(write.await) }).await {
                    Ok(r) => r,
                    Err(_) => Err(std::io::ErrorKind::TimedOut.into()),
                }
            };
            if written.is_err() {
                if fd >= 0 {
                    // SAFETY: shutting down a socket the connection still owns.
                    unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
                }
                break;
            }
        }
        let _ = writer.close().await;
        None
    })
    .detach()
}

/// One half of a stream shared by the read loop and the writer task.
struct Half<S>(Rc<RefCell<S>>);

impl<S: AsyncRead + Unpin> AsyncRead for Half<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Half<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_flush(cx)
    }
    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_close(cx)
    }
}

/// Why a read loop ended.
enum End {
    Closed,
    /// StartTLS was accepted: its response is queued before a `Handoff`.
    StartTls,
}

async fn read_loop<R: AsyncRead + Unpin>(stream: &mut R, conn: &Rc<Conn>) -> End {
    let limits = &conn.ctx.limits;
    let mut codec = LdapCodec::new(Some(limits.max_pdu_bytes), None);
    let mut rbuf = BytesMut::with_capacity(16 << 10);
    let mut scratch = vec![0u8; READ_CHUNK];
    loop {
        let mut inline = BytesMut::new();
        loop {
            let limit = match &*conn.identity.borrow() {
                Identity::Anonymous => limits.max_pdu_bytes_anonymous,
                _ => limits.max_pdu_bytes,
            };
            match ber::peek_frame(&rbuf) {
                Frame::Incomplete => break,
                Frame::Malformed => return disconnect(conn, inline, "malformed LDAP message").await,
                Frame::Size(n) if n > limit => {
                    let why = format!("message of {n} bytes exceeds the limit of {limit} bytes");
                    return disconnect(conn, inline, &why).await;
                }
                Frame::Size(n) if n > rbuf.len() => break,
                Frame::Size(_) => {}
            }
            match codec.decode(&mut rbuf) {
                Ok(Some(msg)) => match ops::dispatch(conn, msg, &mut inline) {
                    Flow::Continue => {}
                    Flow::Close => {
                        conn.send(inline).await;
                        return End::Closed;
                    }
                    Flow::StartTls if rbuf.is_empty() => {
                        conn.send(inline).await;
                        let _ = conn.out.send(Out::Handoff).await;
                        return End::StartTls;
                    }
                    // RFC 4511 §4.14.1: nothing may follow StartTLS before its response.
                    Flow::StartTls => return disconnect(conn, inline, "data after the StartTLS request").await,
                },
                Ok(None) => break,
                Err(_) => return disconnect(conn, inline, "malformed LDAP message").await,
            }
        }
        conn.send(inline).await;
        let idle = limits.idle_timeout_s;
        let read = if idle > 0 && conn.pending.get() == 0 {
            // Idle: no request for `idle_timeout_s` and no operation running.
            let timed =
                glommio::timer::timeout(Duration::from_secs(idle), async { Ok(stream.read(&mut scratch).await) });
            match timed.await {
                Ok(r) => r,
                Err(_) => return End::Closed,
            }
        } else {
            stream.read(&mut scratch).await
        };
        match read {
            Ok(0) | Err(_) => return End::Closed,
            Ok(n) => rbuf.extend_from_slice(&scratch[..n]),
        }
    }
}

async fn disconnect(conn: &Conn, mut out: BytesMut, why: &str) -> End {
    encode(&mut out, DisconnectionNotice::gen_response(LdapResultCode::ProtocolError, why));
    conn.send(out).await;
    End::Closed
}
