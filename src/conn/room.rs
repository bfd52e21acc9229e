//! A connection's room for answers queued and not yet written.
//!
//! Each connection may queue `OUT_KIB` (4 MiB) for a client that is slow
//! to read, and the first `OWN_KIB` of it is its own. Beyond that share it
//! draws on its shard's budget (`limits.max_queued_bytes`, a `Budget`),
//! which all the shard's connections share: 1,000 clients that never read
//! held 4 MiB each (7.3 GB with what came with it), and now hold the
//! budget and their shares. A client that reads keeps being answered
//! within its share while others hold the budget. Those that never read
//! are cut off after `limits.write_timeout_s` without a write; one that
//! reads just enough to keep each write alive is cut off once it has held
//! part of the budget that long while another connection waits for it
//! (`Budget::evict_stalled`): slow readers cannot keep the budget for good.

use super::OUT_KIB;
use glommio::sync::Semaphore;
use std::cell::{Cell, RefCell};
use std::os::fd::RawFd;
use std::rc::{Rc, Weak};
use std::time::{Duration, Instant};

/// KiB of queued answers a connection holds without the shard's budget:
/// one coalesced write (`conn::COALESCE`).
pub const OWN_KIB: u64 = 64;

/// How often a connection waiting for the budget looks for holders to cut
/// off.
const CHECK: Duration = Duration::from_secs(1);

/// A shard's budget of queued answers, and the connections holding part
/// of it.
pub struct Budget {
    sem: Semaphore,
    holders: RefCell<Vec<Weak<Room>>>,
    /// How long a connection may hold part of the budget while others
    /// wait for it (`limits.write_timeout_s`; zero: for ever).
    patience: Duration,
}

impl Budget {
    pub fn new(kib: u64, patience: Duration) -> Budget {
        Budget { sem: Semaphore::new(kib), holders: RefCell::default(), patience }
    }

    /// Cuts off the connections that have held part of the budget for
    /// longer than `patience` (their sockets shut down: their writers fail
    /// and give back what they hold). Returns how many.
    fn evict_stalled(&self) -> usize {
        if self.patience.is_zero() {
            return 0;
        }
        let mut cut = 0;
        self.holders.borrow_mut().retain(|w| {
            let Some(room) = w.upgrade() else { return false };
            let Some(since) = room.since.get() else { return false };
            if since.elapsed() >= self.patience && !room.evicted.replace(true) && room.fd >= 0 {
                // SAFETY: the connection still owns its socket (the room lives).
                unsafe { libc::shutdown(room.fd, libc::SHUT_RDWR) };
                cut += 1;
            }
            true
        });
        if cut > 0 {
            eprintln!("coredir: cut off {cut} connection(s) holding queued answers unread while others waited");
        }
        cut
    }
}

pub struct Room {
    /// The connection's own bound (`OUT_KIB`).
    own: Semaphore,
    /// The shard's budget, shared by its connections.
    budget: Rc<Budget>,
    /// KiB of the budget this connection holds: at least what it has
    /// taken beyond `OWN_KIB`, given back as its frames are written.
    held: Cell<u64>,
    /// Since when it has held some of the budget without a pause.
    since: Cell<Option<Instant>>,
    /// Listed among the budget's holders.
    listed: Cell<bool>,
    evicted: Cell<bool>,
    /// The connection's socket (-1: none).
    fd: RawFd,
    me: Weak<Room>,
}

/// KiB taken from a connection's own bound and not yet covered by the
/// shard's budget: given back if the wait for the budget ends early (its
/// task dropped).
struct Taken<'a>(&'a Room, u64);

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        self.0.own.signal(self.1);
    }
}

impl Room {
    pub fn new(budget: Rc<Budget>, fd: RawFd) -> Rc<Room> {
        Rc::new_cyclic(|me| Room {
            own: Semaphore::new(OUT_KIB),
            budget,
            held: Cell::new(0),
            since: Cell::new(None),
            listed: Cell::new(false),
            evicted: Cell::new(false),
            fd,
            me: me.clone(),
        })
    }

    /// Adds `kib` of the budget to what it holds.
    fn hold(&self, kib: u64) {
        if kib == 0 {
            return;
        }
        if self.held.get() == 0 {
            self.since.set(Some(Instant::now()));
            if !self.listed.replace(true) {
                self.budget.holders.borrow_mut().push(self.me.clone());
            }
        }
        self.held.set(self.held.get() + kib);
    }

    /// KiB of the shard's budget still needed to cover what is taken.
    fn wanted(&self) -> u64 {
        let taken = OUT_KIB - self.own.available();
        taken.saturating_sub(OWN_KIB).saturating_sub(self.held.get())
    }

    /// Takes `kib` now, if both bounds have room.
    pub fn try_acquire(&self, kib: u64) -> bool {
        if !self.own.try_acquire(kib).unwrap_or(false) {
            return false;
        }
        let more = self.wanted();
        if more > 0 && !self.budget.sem.try_acquire(more).unwrap_or(false) {
            self.own.signal(kib);
            return false;
        }
        self.hold(more);
        true
    }

    /// Waits until `kib` is taken; false if the room was closed.
    pub async fn acquire(&self, kib: u64) -> bool {
        if self.own.acquire(kib).await.is_err() {
            return false;
        }
        let taken = Taken(self, kib);
        let more = self.wanted();
        if more > 0 {
            // While it waits, holders that have kept their part too long
            // are cut off (a wait dropped leaves no units behind).
            loop {
                let granted = futures_lite::future::or(async { Some(self.budget.sem.acquire(more).await) }, async {
                    glommio::timer::sleep(CHECK).await;
                    None
                });
                match granted.await {
                    Some(Ok(())) => break,
                    Some(Err(_)) => return false,
                    None => {
                        self.budget.evict_stalled();
                    }
                }
            }
            self.hold(more);
            // Tasks of this connection waiting at once each asked for what
            // the others had taken too: what is now more than needed goes
            // back at once (it would otherwise wait for the next write).
            self.settle();
        }
        std::mem::forget(taken);
        true
    }

    /// Gives back `kib` (written or dropped), and what of the shard's
    /// budget the rest no longer needs.
    pub fn signal(&self, kib: u64) {
        self.own.signal(kib);
        self.settle();
    }

    /// Gives back what of the shard's budget is more than what is taken
    /// beyond `OWN_KIB` needs.
    fn settle(&self) {
        let taken = OUT_KIB - self.own.available();
        let spare = self.held.get().saturating_sub(taken.saturating_sub(OWN_KIB));
        if spare > 0 {
            self.held.set(self.held.get() - spare);
            self.budget.sem.signal(spare);
        }
        if self.held.get() == 0 {
            self.since.set(None);
        }
    }
}

impl Drop for Room {
    fn drop(&mut self) {
        self.budget.sem.signal(self.held.get());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `f` on a glommio reactor (a semaphore's waits need one).
    fn run<F: std::future::Future<Output = ()> + 'static>(f: impl FnOnce() -> F + Send + 'static) {
        glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound).spawn(f).unwrap().join().unwrap();
    }

    #[test]
    fn a_connections_own_share_needs_none_of_the_budget() {
        run(|| async {
            let budget = Rc::new(Budget::new(0, Duration::ZERO));
            let room = Room::new(budget.clone(), -1);
            assert!(room.try_acquire(OWN_KIB));
            assert!(!room.try_acquire(1), "past its share, with no budget left");
            room.signal(OWN_KIB);
            assert_eq!(room.own.available(), OUT_KIB);
        });
    }

    #[test]
    fn the_budget_is_given_back_as_frames_are_written() {
        run(|| async {
            let budget = Rc::new(Budget::new(1000, Duration::ZERO));
            let shared = &budget.sem;
            let (a, b) = (Room::new(budget.clone(), -1), Room::new(budget.clone(), -1));
            assert!(a.try_acquire(600));
            assert_eq!(shared.available(), 1000 - (600 - OWN_KIB));
            assert!(!b.try_acquire(OWN_KIB + 600), "the budget is a's");
            assert!(b.acquire(OWN_KIB).await, "b's own share");
            a.signal(300);
            assert_eq!(shared.available(), 1000 - (300 - OWN_KIB));
            assert!(b.try_acquire(400));
            a.signal(300);
            b.signal(OWN_KIB + 400);
            assert_eq!(shared.available(), 1000);
            assert!(a.try_acquire(900));
            drop(a);
            assert_eq!(shared.available(), 1000, "a connection gone gives its part back");
        });
    }

    /// A connection that holds part of the budget longer than the
    /// patience while another waits for it is cut off (its socket shut
    /// down), and what its writer then gives back reaches the waiter.
    #[test]
    fn a_holder_past_its_patience_is_cut_off_for_a_waiter() {
        run(|| async {
            let (mut fds, mut other) = ([0; 2], [0; 2]);
            // SAFETY: arrays of two descriptors for socketpair to fill.
            unsafe {
                assert_eq!(libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, fds.as_mut_ptr()), 0);
                assert_eq!(libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, other.as_mut_ptr()), 0);
            }
            let budget = Rc::new(Budget::new(1000, Duration::from_millis(100)));
            let (slow, waiting) = (Room::new(budget.clone(), fds[0]), Room::new(budget.clone(), other[0]));
            assert!(slow.try_acquire(OWN_KIB + 1000), "the whole budget");
            let granted = Rc::new(Cell::new(false));
            let task = glommio::spawn_local({
                let (waiting, granted) = (waiting.clone(), granted.clone());
                async move { granted.set(waiting.acquire(OWN_KIB + 500).await) }
            });
            // The slow connection's writer sees its socket shut down and
            // drops what it queued.
            let mut byte = [0u8; 1];
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                // SAFETY: reading one byte into a live buffer, non-blocking.
                let n = unsafe { libc::recv(fds[1], byte.as_mut_ptr().cast(), 1, libc::MSG_DONTWAIT) };
                if n == 0 {
                    break;
                }
                assert!(Instant::now() < deadline, "the holder was never cut off");
                glommio::timer::sleep(Duration::from_millis(50)).await;
            }
            slow.signal(OWN_KIB + 1000);
            task.await;
            assert!(granted.get(), "the waiter got the budget");
            assert!(!waiting.evicted.get(), "the waiter was not cut off");
            for fd in fds.into_iter().chain(other) {
                // SAFETY: closing descriptors this test opened.
                unsafe { libc::close(fd) };
            }
        });
    }
}
