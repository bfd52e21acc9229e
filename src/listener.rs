//! The per-shard listening socket and accept loop.
//!
//! Every shard binds the same address itself with `SO_REUSEPORT`, so the
//! kernel spreads connections and there is no acceptor thread;
//! `SO_INCOMING_CPU` asks it to prefer the listener on the CPU that took the
//! connection's packets. A connection stays on the shard that accepted it.

use crate::conn;
use crate::ctx::Ctx;
use anyhow::{Context, Result};
use bytes::BytesMut;
use futures_lite::AsyncWriteExt;
use ldap3_proto::simple::DisconnectionNotice;
use ldap3_proto::LdapResultCode;
use socket2::{Domain, Protocol, Socket, Type};
use std::cell::Cell;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

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

/// Refuses an address another process already serves, as slapd does:
/// SO_REUSEPORT (which the shards share) would let the kernel split
/// clients between two servers and their two databases. A probe without
/// SO_REUSEPORT cannot bind where anyone listens; port 0 is always free.
///
/// A server killed a moment ago can still hold its listeners after it is
/// gone: io_uring drops the sockets of its pending accepts only when a
/// kernel worker tears the ring down, later and under load much later.
/// So an address in use is probed again for `PORT_WAIT` before the start
/// is refused (this runs before any reactor, so the sleep stalls nothing).
pub fn ensure_unserved(addr: SocketAddr) -> Result<()> {
    const PORT_WAIT: std::time::Duration = std::time::Duration::from_secs(5);
    if addr.port() == 0 {
        return Ok(());
    }
    let deadline = std::time::Instant::now() + PORT_WAIT;
    loop {
        let probe = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        probe.set_reuse_address(true)?;
        match probe.bind(&addr.into()) {
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                if std::time::Instant::now() >= deadline {
                    anyhow::bail!(
                        "binding {addr}: address in use (another process listens there; waited {} s for it to go)",
                        PORT_WAIT.as_secs()
                    )
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => return Err(e).with_context(|| format!("binding {addr}")),
            Ok(()) => return Ok(()),
        }
    }
}

/// Refuses an address another process listens on besides `ours` (the
/// sockets this one bound there): two servers started at the same moment
/// can both pass `ensure_unserved` before either binds, and then share the
/// port through SO_REUSEPORT. Each looks once it listens, so the later of
/// two always sees the earlier (both may refuse; neither serves a port
/// with another).
pub fn ensure_alone(addr: SocketAddr, ours: &[&OwnedFd]) -> Result<()> {
    let inodes: Vec<u64> = ours.iter().filter_map(|fd| inode_of(fd)).collect();
    let table = match addr {
        SocketAddr::V4(_) => "/proc/net/tcp",
        SocketAddr::V6(_) => "/proc/net/tcp6",
    };
    // Without /proc (a container without it) the probe alone decides.
    let Ok(text) = std::fs::read_to_string(table) else { return Ok(()) };
    let other = text.lines().skip(1).filter_map(listening).find(|(at, inode)| {
        at.port() == addr.port()
            && !inodes.contains(inode)
            && (at.ip() == addr.ip() || at.ip().is_unspecified() || addr.ip().is_unspecified())
    });
    match other {
        Some((at, _)) => anyhow::bail!("binding {addr}: address in use (another process listens on {at})"),
        None => Ok(()),
    }
}

/// A socket's inode number, as `/proc/net/tcp` names it.
fn inode_of(fd: &OwnedFd) -> Option<u64> {
    // SAFETY: `stat` is plain data the kernel fills; the descriptor is open.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    (unsafe { libc::fstat(fd.as_raw_fd(), &mut stat) } == 0).then_some(stat.st_ino)
}

/// A listening socket's address and inode from a line of `/proc/net/tcp`
/// or `tcp6` (addresses in hex, each 32-bit word in host order).
fn listening(line: &str) -> Option<(SocketAddr, u64)> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    if fields.get(3) != Some(&"0A") {
        return None;
    }
    let (ip, port) = fields.get(1)?.split_once(':')?;
    let mut octets = Vec::with_capacity(16);
    for word in ip.as_bytes().chunks(8) {
        let word = u32::from_str_radix(std::str::from_utf8(word).ok()?, 16).ok()?;
        octets.extend_from_slice(&word.to_le_bytes());
    }
    let ip = match octets.len() {
        4 => IpAddr::from(<[u8; 4]>::try_from(octets).ok()?),
        16 => IpAddr::from(<[u8; 16]>::try_from(octets).ok()?),
        _ => return None,
    };
    let port = u16::from_str_radix(port, 16).ok()?;
    Some((SocketAddr::new(ip, port), fields.get(9)?.parse().ok()?))
}

pub fn local_addr(fd: &OwnedFd) -> Result<SocketAddr> {
    let socket = Socket::from(fd.try_clone()?);
    socket.local_addr()?.as_socket().context("listening socket has no IP address")
}

/// Which protocol a listener speaks.
#[derive(Clone, Copy)]
pub enum Kind {
    Ldap,
    Ldaps,
}

/// A count on a cache line of its own: written by one shard only, read by
/// the others only when a limit needs the sum.
#[repr(align(128))]
#[derive(Default)]
pub struct ShardCount(AtomicUsize);

impl ShardCount {
    /// Adds `by` (may wrap: -1 as `usize::MAX`); only the owning shard
    /// calls it, so a load and a store do, without a locked instruction.
    pub fn add(&self, by: usize) {
        self.0.store(self.0.load(Ordering::Relaxed).wrapping_add(by), Ordering::Relaxed);
    }

    pub fn get(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

/// Stripes of the per-IP counts (a power of two).
const IP_STRIPES: usize = 64;

/// Connection counts for `limits.max_connections` and
/// `max_connections_per_ip`, touched once when a connection opens and once
/// when it closes, never per request. Each shard counts its own open
/// connections (summed only when `max_connections` is set). The per-IP
/// counts are process-wide by nature (the kernel spreads one client's
/// connections over every shard), so they sit behind locks, striped by the
/// address's hash: kept only when that limit is set, and two shards meet
/// on a lock only for clients that hash alike.
pub struct Admission {
    max_total: usize,
    max_per_ip: usize,
    open: Box<[ShardCount]>,
    per_ip: Box<[Mutex<HashMap<IpAddr, usize>>]>,
}

/// Holds a connection's place until dropped (on the shard that took it).
pub struct Admitted {
    admission: std::sync::Arc<Admission>,
    shard: usize,
    ip: Option<IpAddr>,
}

impl Admission {
    pub fn new(shards: usize, max_total: usize, max_per_ip: usize) -> Admission {
        let stripes = if max_per_ip > 0 { IP_STRIPES } else { 0 };
        Admission {
            max_total,
            max_per_ip,
            open: (0..shards.max(1)).map(|_| ShardCount::default()).collect(),
            per_ip: (0..stripes).map(|_| Mutex::default()).collect(),
        }
    }

    fn stripe(&self, ip: &IpAddr) -> std::sync::MutexGuard<'_, HashMap<IpAddr, usize>> {
        use std::hash::{BuildHasher, BuildHasherDefault};
        let h = BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default().hash_one(ip);
        self.per_ip[h as usize & (IP_STRIPES - 1)].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place on `shard` for a new connection from `ip`, or why there is none.
    pub fn admit(self: &std::sync::Arc<Self>, shard: usize, ip: Option<IpAddr>) -> Result<Admitted, String> {
        let shard = shard % self.open.len();
        self.open[shard].add(1);
        let mut admitted = Admitted { admission: self.clone(), shard, ip: None };
        if self.max_total > 0 && self.open.iter().map(ShardCount::get).sum::<usize>() > self.max_total {
            return Err(format!("too many connections (limit {})", self.max_total));
        }
        let (Some(ip), true) = (ip, self.max_per_ip > 0) else { return Ok(admitted) };
        let mut map = self.stripe(&ip);
        let n = map.entry(ip).or_insert(0);
        if *n >= self.max_per_ip {
            return Err(format!("too many connections from {ip} (limit {})", self.max_per_ip));
        }
        *n += 1;
        admitted.ip = Some(ip);
        Ok(admitted)
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.admission.open[self.shard].add(usize::MAX);
        if let Some(ip) = self.ip {
            let mut map = self.admission.stripe(&ip);
            if let Some(n) = map.get_mut(&ip) {
                *n -= 1;
                if *n == 0 {
                    map.remove(&ip);
                }
            }
        }
    }
}

thread_local! {
    /// The shard's failures to take a connection (out of descriptors under
    /// a flood: the accept, or a connection's own descriptors).
    pub(crate) static OUT_OF_DESCRIPTORS: Failures =
        const { Failures { said: Cell::new(None), since: Cell::new(0), unsaid_recovery: Cell::new(false) } };
}

/// Failures said at most once a minute, with how many there were since
/// the last report, not at every retry (a flood would fill the log a
/// hundred lines a second per shard); and once after each report, that
/// connections are taken again.
pub(crate) struct Failures {
    said: Cell<Option<std::time::Instant>>,
    since: Cell<u64>,
    unsaid_recovery: Cell<bool>,
}

impl Failures {
    /// `what`: the failure, named with its shard.
    pub(crate) fn failed(&self, what: &str) {
        self.since.set(self.since.get() + 1);
        if self.said.get().is_none_or(|said| said.elapsed() >= std::time::Duration::from_secs(60)) {
            let n = self.since.replace(0);
            eprintln!("coredir: {what} ({n} failures since the last report; retrying every 10 ms)");
            self.said.set(Some(std::time::Instant::now()));
            self.unsaid_recovery.set(true);
        }
    }

    fn recovered(&self, shard: usize) {
        if self.unsaid_recovery.replace(false) {
            let n = self.since.replace(0);
            eprintln!("coredir: shard {shard}: taking connections again ({n} more failed meanwhile)");
        }
    }
}

/// Accepts connections until the process ends; each runs as its own task.
pub async fn run(fd: OwnedFd, ctx: Rc<Ctx>, kind: Kind) {
    // SAFETY: the descriptor is a bound, listening TCP socket handed over whole.
    let listener = unsafe { glommio::net::TcpListener::from_raw_fd(fd.into_raw_fd()) };
    loop {
        match listener.accept().await {
            Ok(stream) => {
                OUT_OF_DESCRIPTORS.with(|o| o.recovered(ctx.shard.id));
                // One getpeername per connection: admission and the log share it.
                let peer = stream.peer_addr().ok();
                let ctx = ctx.clone();
                glommio::spawn_local(async move {
                    let _admitted = match ctx.admission.admit(ctx.shard.id, peer.map(|a| a.ip())) {
                        Ok(a) => a,
                        Err(why) => return refuse(stream, &why).await,
                    };
                    match kind {
                        Kind::Ldap => conn::serve_tcp(stream, peer, ctx).await,
                        Kind::Ldaps => conn::serve_tls(stream, peer, ctx).await,
                    }
                })
                .detach();
            }
            Err(_) if ctx.shared.draining.load(std::sync::atomic::Ordering::Relaxed) => return,
            Err(e) => {
                OUT_OF_DESCRIPTORS.with(|o| o.failed(&format!("shard {}: accept failed: {e}", ctx.shard.id)));
                glommio::timer::sleep(std::time::Duration::from_millis(10)).await;
            }
        }
    }
}

/// Turns a connection away with a Notice of Disconnection (`busy`). On
/// ldaps the notice is written before any TLS, which clients report as a
/// failed handshake: the connection is closed either way.
async fn refuse(mut stream: glommio::net::TcpStream, why: &str) {
    let mut out = BytesMut::new();
    conn::encode(&mut out, DisconnectionNotice::gen_response(LdapResultCode::Busy, why));
    let _ = stream.write_all(&out).await;
    let _ = stream.close().await;
}

/// The local socket (ldapi) listener, on one shard: a stale socket file
/// left by a crash is replaced, a live server's is not. Accepted through
/// glommio's `TcpListener`, an accept on any listening descriptor: its
/// `UnixListener` gives out streams without their descriptor, which
/// `SO_PEERCRED` needs (`conn::serve_unix`). Also its descriptor, which
/// `drain` shuts.
pub fn bind_local(path: &std::path::Path) -> Result<(glommio::net::TcpListener, std::os::fd::RawFd)> {
    // Anyone may connect, as to slapd's (its directory decides who can
    // reach it); the process's umask would leave it to this user alone.
    let fd = unix_socket(path, 0o777, "server.ldapi")?.into_raw_fd();
    // SAFETY: a listening socket this process bound and owns.
    Ok((unsafe { glommio::net::TcpListener::from_raw_fd(fd) }, fd))
}

/// Binds a Unix socket at `path` with `mode` (the ldapi and admin
/// sockets), refusing one a live server answers on. A chmod by the final
/// path would follow a symlink another user of that directory swapped in
/// after the bind (and change the mode of the file it names), and the
/// umask cannot be changed for one thread; so the socket is bound in a
/// directory of this process's own, made beside `path` and then reached
/// only through a descriptor of it (whatever is renamed in its place
/// afterwards), given its mode there and renamed over `path`.
pub fn unix_socket(path: &std::path::Path, mode: u32, what: &str) -> Result<std::os::unix::net::UnixListener> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let shown = path.display();
    // sun_path holds 107 bytes and a NUL: a longer path could be renamed
    // into place, but no client could reach it by its name.
    if path.as_os_str().len() > 107 {
        anyhow::bail!("{what}: {shown} is longer than a socket path may be (107 bytes)");
    }
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        anyhow::bail!("{what}: {shown} is in use by a running server");
    }
    let fail = |e: &dyn std::fmt::Display| anyhow::anyhow!("{what}: {shown}: {e}");
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    let private = tempfile::Builder::new()
        .prefix(".")
        .rand_bytes(4)
        .tempdir_in(parent)
        .map_err(|e| anyhow::anyhow!("{what}: a private directory in {}: {e}", parent.display()))?;
    let dir = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(private.path())
        .map_err(|e| fail(&e))?;
    let meta = dir.metadata().map_err(|e| fail(&e))?;
    // SAFETY: geteuid has no preconditions.
    if meta.uid() != unsafe { libc::geteuid() } {
        anyhow::bail!("{what}: {shown}: the private directory beside it was replaced");
    }
    let dirfd = std::os::fd::AsRawFd::as_raw_fd(&dir);
    // SAFETY: a directory descriptor we hold. No one else may enter it.
    if unsafe { libc::fchmod(dirfd, 0o700) } != 0 {
        return Err(fail(&std::io::Error::last_os_error()));
    }
    let l = std::os::unix::net::UnixListener::bind(format!("/proc/self/fd/{dirfd}/s")).map_err(|e| fail(&e))?;
    let target = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|e| fail(&e))?;
    // SAFETY: a directory descriptor we hold and NUL-terminated names.
    let moved = unsafe {
        libc::fchmodat(dirfd, c"s".as_ptr(), mode, 0) == 0
            // Replaces a stale socket (or anything else but a directory) at once.
            && libc::renameat(dirfd, c"s".as_ptr(), libc::AT_FDCWD, target.as_ptr()) == 0
    };
    if !moved {
        return Err(fail(&std::io::Error::last_os_error()));
    }
    Ok(l)
}

pub async fn run_local(listener: glommio::net::TcpListener, ctx: Rc<Ctx>) {
    loop {
        match listener.accept().await {
            Ok(stream) => {
                let ctx = ctx.clone();
                glommio::spawn_local(async move {
                    let _admitted = match ctx.admission.admit(ctx.shard.id, None) {
                        Ok(a) => a,
                        Err(_) => return,
                    };
                    let cred = conn::PeerCred::of(stream.as_raw_fd());
                    conn::serve_unix(stream, cred, ctx).await
                })
                .detach();
            }
            Err(_) if ctx.shared.draining.load(std::sync::atomic::Ordering::Relaxed) => return,
            Err(e) => {
                eprintln!("coredir: shard {}: accept on the local socket failed: {e}", ctx.shard.id);
                glommio::timer::sleep(std::time::Duration::from_millis(10)).await;
            }
        }
    }
}

/// `metrics.listen`: a minimal HTTP/1.0 endpoint on one shard's reactor
/// (no runtime of its own) answering `GET /metrics` with the Prometheus
/// exposition and anything else with 404.
pub async fn run_metrics(fd: OwnedFd) {
    // SAFETY: the descriptor is a bound, listening TCP socket handed over whole.
    let listener = unsafe { glommio::net::TcpListener::from_raw_fd(fd.into_raw_fd()) };
    while let Ok(mut stream) = listener.accept().await {
        glommio::spawn_local(async move {
            use futures_lite::AsyncReadExt;
            let mut req = Vec::new();
            let mut buf = [0u8; 1024];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 8192 {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => req.extend_from_slice(&buf[..n]),
                }
            }
            let (status, body) = if req.starts_with(b"GET /metrics ") || req.starts_with(b"GET /metrics?") {
                ("200 OK", crate::stats::render())
            } else {
                ("404 Not Found", "only /metrics is served here\n".to_string())
            };
            let head = format!(
                "HTTP/1.0 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.write_all(body.as_bytes()).await;
            let _ = stream.close().await;
        })
        .detach();
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    /// Two servers started at once can both find the port free and both
    /// bind it with SO_REUSEPORT: each then sees the other's listener.
    #[test]
    fn a_listener_of_another_process_on_the_address_is_seen() {
        let any: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
        let ours = super::bind(any, 0, 8).unwrap();
        let addr = super::local_addr(&ours).unwrap();
        super::ensure_alone(addr, &[&ours]).unwrap();
        let theirs = super::bind(addr, 0, 8).unwrap();
        let e = super::ensure_alone(addr, &[&ours]).unwrap_err().to_string();
        assert!(e.contains("address in use"), "{e}");
        super::ensure_alone(addr, &[&ours, &theirs]).unwrap();
        // A wildcard listener on the port takes the address's clients too.
        drop(theirs);
        let wildcard = super::bind(std::net::SocketAddr::new([0, 0, 0, 0].into(), addr.port()), 0, 8).unwrap();
        assert!(super::ensure_alone(addr, &[&ours]).is_err());
        drop(wildcard);
        super::ensure_alone(addr, &[&ours]).unwrap();
    }

    /// The ldapi socket is made world-writable (0777) without following a
    /// path another user can swap: with the socket's directory writable by
    /// them, a symlink put in its place between the bind and a chmod by
    /// path made the file it names 0777 (for a server run as root, any
    /// file, /etc/shadow included). The admin socket's 0600 likewise.
    #[test]
    fn the_local_socket_mode_never_reaches_a_file_swapped_in_for_it() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "secret").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
        let path = dir.path().join("ldapi");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        // Their own directory whose `s` names the victim, for the server's
        // private directory to be swapped for.
        let evil = dir.path().join("evil");
        std::fs::create_dir(&evil).unwrap();
        std::os::unix::fs::symlink(&victim, evil.join("s")).unwrap();
        let swapper = {
            let evil = evil.clone();
            let (path, victim, stop, top) = (path.clone(), victim.clone(), stop.clone(), dir.path().to_owned());
            std::thread::spawn(move || {
                let aside = path.with_extension("aside");
                let mut n = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = std::os::unix::fs::symlink(&victim, &aside);
                    let _ = std::fs::rename(&aside, &path);
                    // The private directory, renamed away and replaced by a
                    // symlink to theirs.
                    for e in std::fs::read_dir(&top).unwrap().flatten() {
                        let name = e.path();
                        let private = e.file_name().to_string_lossy().starts_with('.');
                        if private && e.file_type().is_ok_and(|t| t.is_dir()) {
                            n += 1;
                            if std::fs::rename(&name, top.join(format!("grabbed{n}"))).is_ok() {
                                let _ = std::os::unix::fs::symlink(&evil, &name);
                            }
                        }
                    }
                }
            })
        };
        let mut bound = 0;
        for _ in 0..2000 {
            // Refused or bound: either way the victim keeps its mode.
            bound += super::unix_socket(&path, 0o777, "test").is_ok() as usize;
            let mode = std::fs::metadata(&victim).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "the victim's mode after {bound} binds");
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        swapper.join().unwrap();
        // Unhindered, the socket is there with its mode and nothing else is left.
        std::fs::remove_file(&path).unwrap();
        let quiet = tempfile::tempdir().unwrap();
        let path = quiet.path().join("ldapi");
        let _l = super::unix_socket(&path, 0o777, "test").unwrap();
        assert_eq!(std::fs::symlink_metadata(&path).unwrap().permissions().mode() & 0o777, 0o777);
        assert_eq!(std::fs::read_dir(quiet.path()).unwrap().count(), 1);
        let long = quiet.path().join("x".repeat(120));
        assert!(super::unix_socket(&long, 0o777, "test").unwrap_err().to_string().contains("longer than"));
    }
}
