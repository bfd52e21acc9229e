//! One client connection: framing, the read loop and the writer task.
//!
//! The socket is split by duplicating its descriptor: the read loop owns
//! one glommio stream and the writer task the other, so neither half needs
//! a lock. Requests are decoded after every read; each PDU's declared length
//! is checked against the connection's limit before it is buffered (256 KiB
//! before a bind, 4 MiB after, by default), and a malformed or oversized PDU
//! closes only this connection, after a Notice of Disconnection. Responses
//! of requests answered inline are gathered and written once per read;
//! searches and writes run as their own tasks and send their own frames.

use crate::ber::{self, Frame};
use crate::ops::{self, Flow};
use crate::server::Ctx;
use bytes::BytesMut;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::channels::local_channel::{self, LocalSender};
use glommio::net::TcpStream;
use ldap3_proto::proto::LdapMsg;
use ldap3_proto::simple::DisconnectionNotice;
use ldap3_proto::{LdapCodec, LdapResultCode};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd};
use std::rc::Rc;
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
    out: LocalSender<BytesMut>,
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
    /// Queues a frame for the writer; waits while the client is not reading.
    pub async fn send(&self, frame: BytesMut) {
        if !frame.is_empty() {
            let _ = self.out.send(frame).await;
        }
    }
}

/// Appends one encoded message to `out`.
pub fn encode(out: &mut BytesMut, msg: LdapMsg) {
    if let Err(e) = LdapCodec::default().encode(msg, out) {
        eprintln!("coredir: encoding a response failed: {e}");
    }
}

pub async fn serve(stream: TcpStream, ctx: Rc<Ctx>) {
    let _ = stream.set_nodelay(true);
    // SAFETY: dup returns a new descriptor for the same socket, owned by the writer.
    let write_fd = unsafe { libc::dup(stream.as_raw_fd()) };
    if write_fd < 0 {
        eprintln!("coredir: dup failed: {}", std::io::Error::last_os_error());
        return;
    }
    let writer = unsafe { TcpStream::from_raw_fd(write_fd) };
    let (out, frames) = local_channel::new_bounded::<BytesMut>(OUT_FRAMES);
    let writer_task = glommio::spawn_local(async move {
        let mut writer = writer;
        while let Some(frame) = frames.recv().await {
            if writer.write_all(&frame).await.is_err() {
                break;
            }
        }
        let _ = writer.close().await;
    })
    .detach();
    let conn = Rc::new(Conn {
        ctx,
        identity: RefCell::new(Identity::Anonymous),
        running: RefCell::new(HashMap::new()),
        pending: Cell::new(0),
        tls_ssf: Cell::new(0),
        transport_ssf: 0,
        out,
    });
    read_loop(stream, &conn).await;
    for flag in conn.running.borrow().values() {
        flag.set(true);
    }
    drop(conn);
    let _ = writer_task.await;
}

async fn read_loop(mut stream: TcpStream, conn: &Rc<Conn>) {
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
                Ok(Some(msg)) => {
                    if ops::dispatch(conn, msg, &mut inline) == Flow::Close {
                        conn.send(inline).await;
                        return;
                    }
                }
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
                Err(_) => return,
            }
        } else {
            stream.read(&mut scratch).await
        };
        match read {
            Ok(0) | Err(_) => return,
            Ok(n) => rbuf.extend_from_slice(&scratch[..n]),
        }
    }
}

async fn disconnect(conn: &Conn, mut out: BytesMut, why: &str) {
    encode(&mut out, DisconnectionNotice::gen_response(LdapResultCode::ProtocolError, why));
    conn.send(out).await;
}
