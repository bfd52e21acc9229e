//! The per-shard listening socket and accept loop.
//!
//! Every shard binds the same address itself with `SO_REUSEPORT`, so the
//! kernel spreads connections and there is no acceptor thread;
//! `SO_INCOMING_CPU` asks it to prefer the listener on the CPU that took the
//! connection's packets. A connection stays on the shard that accepted it.

use crate::conn;
use crate::server::Ctx;
use anyhow::{Context, Result};
use socket2::{Domain, Protocol, Socket, Type};
use std::net::SocketAddr;
use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd};
use std::rc::Rc;

/// Binds one shard's listening socket (called for every shard before the
/// reactors start, so a busy port fails the start, not one shard).
pub fn bind(addr: SocketAddr, cpu: usize, backlog: i32) -> Result<OwnedFd> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_tcp_nodelay(true)?;
    // Steering is an optimization; a kernel without it still works.
    let _ = socket.set_cpu_affinity(cpu);
    socket.bind(&addr.into()).with_context(|| format!("binding {addr}"))?;
    socket.listen(backlog)?;
    // SAFETY: the descriptor comes straight from a socket we own.
    Ok(unsafe { OwnedFd::from_raw_fd(socket.into_raw_fd()) })
}

pub fn local_addr(fd: &OwnedFd) -> Result<SocketAddr> {
    let socket = Socket::from(fd.try_clone()?);
    socket.local_addr()?.as_socket().context("listening socket has no IP address")
}

/// Accepts connections until the process ends; each runs as its own task.
pub async fn run(fd: OwnedFd, ctx: Rc<Ctx>) {
    // SAFETY: the descriptor is a bound, listening TCP socket handed over whole.
    let listener = unsafe { glommio::net::TcpListener::from_raw_fd(fd.into_raw_fd()) };
    loop {
        match listener.accept().await {
            Ok(stream) => {
                glommio::spawn_local(conn::serve(stream, ctx.clone())).detach();
            }
            Err(e) => {
                eprintln!("coredir: shard {}: accept failed: {e}", ctx.shard.id);
                glommio::timer::sleep(std::time::Duration::from_millis(10)).await;
            }
        }
    }
}
