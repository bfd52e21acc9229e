//! The writer task of a connection: sends the queued frames in order,
//! gathering what is queued into one write, and disconnects a client that
//! stops reading for `limits.write_timeout_s`.

use super::Conn;
use bytes::BytesMut;
use futures_lite::{AsyncRead, AsyncWrite, AsyncWriteExt};
use glommio::channels::local_channel::LocalReceiver;
use std::cell::RefCell;
use std::os::fd::RawFd;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

/// Most bytes the writer gathers into one write.
const COALESCE: usize = 64 << 10;

/// What the writer task is asked to do.
pub(super) enum Out {
    /// A frame and the KiB of queue room it holds until written.
    Frame(BytesMut, u64),
    /// Stop after what is queued and hand the stream back (StartTLS).
    Handoff,
}

/// The writer: sends queued frames in order. A client that stops reading
/// for `limits.write_timeout_s` is disconnected (the socket is shut down,
/// which also ends the read loop), so it can never make the server buffer
/// more than the queue. Returns the stream and the queue on `Handoff`.
pub(super) fn spawn_writer<W: AsyncWrite + Unpin + 'static>(
    mut writer: W,
    frames: LocalReceiver<Out>,
    fd: RawFd,
    conn: &Conn,
) -> glommio::task::JoinHandle<Option<(W, LocalReceiver<Out>)>> {
    let timeout = Duration::from_secs(conn.ctx.live().limits.write_timeout_s);
    let ctx = conn.ctx.clone();
    let room = conn.room.clone();
    let queued = conn.queued.clone();
    // Frames written or dropped no longer hold back writes in place.
    let done = move |n: usize| queued.set(queued.get() - n);
    glommio::spawn_local(async move {
        let mut handoff = false;
        while let Some(out) = frames.recv().await {
            let (mut frame, mut kib, mut n) = match out {
                Out::Frame(f, kib) => (f, kib, 1),
                Out::Handoff => return Some((writer, frames)),
            };
            // Responses queued behind it go out in the same write: a read
            // of many pipelined requests costs one send, not one each.
            let mut closed = false;
            while frame.len() < COALESCE && !handoff && !closed {
                match futures_lite::future::poll_once(frames.recv()).await {
                    Some(Some(Out::Frame(next, more))) => {
                        frame.extend_from_slice(&next);
                        kib += more;
                        n += 1;
                    }
                    Some(Some(Out::Handoff)) => handoff = true,
                    Some(None) => closed = true,
                    None => break,
                }
            }
            ctx.metrics.bytes_out.increment(frame.len() as u64);
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
            room.written(kib);
            done(n);
            if written.is_err() {
                if fd >= 0 {
                    // SAFETY: shutting down a socket the connection still owns.
                    unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
                }
                if handoff {
                    // StartTLS: the read loop waits for this task while its
                    // connection holds the sender, and nothing else sends
                    // (no operation may run beside StartTLS): end now.
                    return None;
                }
                break;
            }
            if handoff {
                return Some((writer, frames));
            }
            if closed {
                break;
            }
        }
        let _ = writer.close().await;
        // The queue is drained, not dropped, until every sender is gone:
        // tasks waiting for room in it are woken only by a receive or a
        // signal of the room (a dropped glommio receiver leaves them
        // asleep for good, and with them the connection and its admission
        // slot). They then see the connection abandoned (`finish`) and
        // end. A handoff found here has no stream left to hand: done.
        while let Some(out) = frames.recv().await {
            match out {
                Out::Frame(_, kib) => {
                    room.signal(kib);
                    done(1);
                }
                Out::Handoff => return None,
            }
        }
        None
    })
    .detach()
}

/// One half of a stream shared by the read loop and the writer task.
pub(super) struct Half<S>(pub(super) Rc<RefCell<S>>);

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
