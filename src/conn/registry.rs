//! What the admin thread sees of the connections: each one's `ConnInfo`
//! (written by its shard with relaxed stores, read by `ctl connections`,
//! cn=Monitor and `drain`), and the `Registry` of them all.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A connection as the admin socket sees it: written by its shard with
/// relaxed stores (one owner, no contention), read by `ctl connections`.
pub struct ConnInfo {
    pub id: u64,
    pub shard: usize,
    pub peer: String,
    pub started: u64,
    pub ops: AtomicU64,
    /// Operations running as tasks (mirrors `Conn::pending`), for `drain`.
    pub in_flight: AtomicU64,
    last_active: AtomicU64,
    /// Who it is bound as: stored by its shard on a bind that changes it,
    /// loaded by the admin thread; no lock on either side.
    pub identity: arc_swap::ArcSwap<String>,
    /// The connection's descriptor number, for the log.
    pub fd_number: i32,
    /// A descriptor of its own for the socket, so `connections kill` can
    /// shut it down from another thread without racing a close.
    fd: Option<OwnedFd>,
}

impl ConnInfo {
    pub(super) fn new(id: u64, shard: usize, peer: String, fd: RawFd) -> ConnInfo {
        let raw = fd;
        // SAFETY: dup of a socket this connection owns; the copy is owned here.
        let fd =
            (fd >= 0).then(|| unsafe { libc::dup(fd) }).filter(|d| *d >= 0).map(|d| unsafe { OwnedFd::from_raw_fd(d) });
        let now = crate::server::unix_now();
        ConnInfo {
            id,
            shard,
            peer,
            started: now,
            ops: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            last_active: AtomicU64::new(now),
            identity: arc_swap::ArcSwap::from_pointee(String::new()),
            fd_number: raw,
            fd,
        }
    }

    pub(super) fn touch(&self) {
        self.last_active.store(crate::server::unix_now(), Ordering::Relaxed);
    }

    pub fn idle_s(&self) -> u64 {
        crate::server::unix_now().saturating_sub(self.last_active.load(Ordering::Relaxed))
    }

    /// Whether the client has closed its side or the socket failed (one
    /// `poll` that does not wait): a request it left queued need not run.
    pub fn hung_up(&self) -> bool {
        let Some(fd) = &self.fd else { return false };
        let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLRDHUP, revents: 0 };
        // SAFETY: one pollfd of a descriptor we own; a zero timeout.
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        n == 1 && p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
    }

    /// Shuts the socket down; the connection's read loop then ends.
    pub fn kill(&self) -> bool {
        match &self.fd {
            // SAFETY: shutdown on a descriptor we own.
            Some(fd) => unsafe { libc::shutdown(fd.as_raw_fd(), libc::SHUT_RDWR) == 0 },
            None => false,
        }
    }
}

/// Every open connection of the process, by shard. A shard locks only its
/// own map, only when a connection opens or closes; the only other thread
/// that takes it is the admin thread's (`ctl connections`, `kill`,
/// `drain`). The counts beside the maps are what shards read of each other
/// (cn=Monitor, `ctl status`), without a lock.
pub struct Registry {
    shards: Vec<Mutex<HashMap<u64, Arc<ConnInfo>>>>,
    open: Box<[crate::listener::ShardCount]>,
}

impl Registry {
    pub fn new(shards: usize) -> Registry {
        Registry {
            shards: (0..shards).map(|_| Mutex::new(HashMap::new())).collect(),
            open: (0..shards).map(|_| Default::default()).collect(),
        }
    }

    fn map(&self, shard: usize) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<ConnInfo>>> {
        self.shards[shard % self.shards.len()].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Called by the connection's own shard only (its count has one writer).
    pub(super) fn insert(&self, info: Arc<ConnInfo>) {
        self.open[info.shard % self.open.len()].add(1);
        self.map(info.shard).insert(info.id, info);
    }

    /// Called by the connection's own shard only.
    pub(super) fn remove(&self, shard: usize, id: u64) {
        if self.map(shard).remove(&id).is_some() {
            self.open[shard % self.open.len()].add(usize::MAX);
        }
    }

    /// Every connection, by id (the admin thread).
    pub fn all(&self) -> Vec<Arc<ConnInfo>> {
        let mut all: Vec<_> =
            (0..self.shards.len()).flat_map(|s| self.map(s).values().cloned().collect::<Vec<_>>()).collect();
        all.sort_by_key(|c| c.id);
        all
    }

    /// Connections open on `shard`.
    pub fn count(&self, shard: usize) -> usize {
        self.open[shard % self.open.len()].get()
    }

    /// Connections open in the process.
    pub fn total(&self) -> usize {
        self.open.iter().map(crate::listener::ShardCount::get).sum()
    }
}
