//! A connection's room for answers queued and not yet written.
//!
//! Each connection may queue `limits.max_queued_bytes_per_connection`
//! (4 MiB unless set) for a client that is slow
//! to read, and the first `OWN_KIB` of it is its own. Beyond that share it
//! draws on its shard's budget (`limits.max_queued_bytes`, a `Budget`),
//! which all the shard's connections share: 1,000 clients that never read
//! held 4 MiB each (7.3 GB with what came with it), and now hold the
//! budget and their shares. A client that reads keeps being answered
//! within its share while others hold the budget. Those that never read
//! are cut off after `limits.write_timeout_s` without a write; one that
//! reads just enough to keep each write alive is cut off when, while
//! another connection waits for the budget, it has read less in a window
//! of `write_timeout_s` than it holds (it could not drain its queue in
//! that time: `Budget::evict_stalled`). A client that reads fast keeps
//! its queue full without harm: it drains it many times a window.

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
    /// Each connection's own bound, in KiB
    /// (`limits.max_queued_bytes_per_connection`).
    per_connection: u64,
    holders: RefCell<Vec<Weak<Room>>>,
    /// The holders list's length after its last pruning.
    pruned: Cell<usize>,
    /// The window a holder must drain what it holds in, while others wait
    /// (`limits.write_timeout_s`, followed by reload; zero: no cut-off).
    patience: Cell<Duration>,
    /// When the holders were last looked at: once a second at most,
    /// however many tasks wait.
    swept: Cell<Option<Instant>>,
}

impl Budget {
    pub fn new(kib: u64, per_connection: u64, patience: Duration) -> Budget {
        Budget {
            sem: Semaphore::new(kib),
            per_connection,
            holders: RefCell::default(),
            pruned: Cell::new(0),
            patience: Cell::new(patience),
            swept: Cell::new(None),
        }
    }

    /// `limits.write_timeout_s` after a reload.
    pub fn set_patience(&self, patience: Duration) {
        self.patience.set(patience);
    }

    /// Cuts off the holders (but `waiting`) that read less in their last
    /// window of `patience` than they hold: their sockets are shut down,
    /// their writers fail and give back all they hold. Returns how many.
    fn evict_stalled(&self, waiting: &Room) -> usize {
        let patience = self.patience.get();
        if patience.is_zero() || self.swept.get().is_some_and(|t| t.elapsed() < CHECK) {
            return 0;
        }
        self.swept.set(Some(Instant::now()));
        let mut cut = 0;
        self.holders.borrow_mut().retain(|w| {
            let Some(room) = w.upgrade() else { return false };
            if room.held.get() == 0 {
                room.listed.set(false);
                return false;
            }
            if std::ptr::eq(&*room, waiting) || room.window.get().elapsed() < patience {
                return true;
            }
            if room.drained.get() >= room.held.get() {
                // It drains what it holds within the window: a new window.
                room.window.set(Instant::now());
                room.drained.set(0);
            } else if !room.evicted.replace(true) && room.fd >= 0 {
                // SAFETY: the connection still owns its socket (the room
                // lives only while its writer and connection do).
                unsafe { libc::shutdown(room.fd, libc::SHUT_RDWR) };
                cut += 1;
            }
            true
        });
        self.pruned.set(self.holders.borrow().len());
        if cut > 0 {
            eprintln!(
                "coredir: cut off {cut} connection(s) reading their queued answers too slowly while others waited"
            );
        }
        cut
    }

    /// Lists a room that began to hold part of the budget; past twice its
    /// length at the last pruning, the list drops those gone or holding
    /// nothing (when nobody waits, no sweep prunes it).
    fn list(&self, room: Weak<Room>) {
        let mut holders = self.holders.borrow_mut();
        holders.push(room);
        if holders.len() > 64 && holders.len() > 2 * self.pruned.get() {
            holders.retain(|w| match w.upgrade() {
                Some(r) if r.held.get() > 0 => true,
                Some(r) => {
                    r.listed.set(false);
                    false
                }
                None => false,
            });
            self.pruned.set(holders.len());
        }
    }
}

pub struct Room {
    /// The connection's own bound (`Budget::per_connection`).
    own: Semaphore,
    /// The shard's budget, shared by its connections.
    budget: Rc<Budget>,
    /// KiB of the budget this connection holds: at least what it has
    /// taken beyond `OWN_KIB`, given back as its frames are written.
    held: Cell<u64>,
    /// Since when its drain is measured (it began to hold, or its last
    /// window passed), and the KiB its writer wrote since.
    window: Cell<Instant>,
    drained: Cell<u64>,
    /// Listed among the budget's holders.
    listed: Cell<bool>,
    evicted: Cell<bool>,
    /// KiB taken from `own` by tasks still waiting for the budget.
    waiting: Cell<u64>,
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
        self.0.signal(self.1);
    }
}

/// KiB of a task waiting for the budget: not counted as needing cover
/// while it waits (`Room::covered`), whether the wait ends or is dropped.
struct Waiting<'a>(&'a Room, u64);

impl<'a> Waiting<'a> {
    fn new(room: &'a Room, kib: u64) -> Waiting<'a> {
        room.waiting.set(room.waiting.get() + kib);
        Waiting(room, kib)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.set(self.0.waiting.get() - self.1);
    }
}

impl Room {
    pub fn new(budget: Rc<Budget>, fd: RawFd) -> Rc<Room> {
        Rc::new_cyclic(|me| Room {
            own: Semaphore::new(budget.per_connection),
            budget,
            held: Cell::new(0),
            window: Cell::new(Instant::now()),
            drained: Cell::new(0),
            listed: Cell::new(false),
            evicted: Cell::new(false),
            waiting: Cell::new(0),
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
            self.window.set(Instant::now());
            self.drained.set(0);
            if !self.listed.replace(true) {
                self.budget.list(self.me.clone());
            }
        }
        self.held.set(self.held.get() + kib);
    }

    /// Gives back `kib` its writer wrote: it counts toward its drain.
    pub fn written(&self, kib: u64) {
        self.drained(kib);
        self.signal(kib);
    }

    /// Counts `kib` written toward the drain (also what the connection
    /// wrote in place, which held no room).
    pub fn drained(&self, kib: u64) {
        self.drained.set(self.drained.get() + kib);
    }

    /// KiB taken from `own` for frames queued or about to be: all but
    /// those of tasks waiting for the budget. What the connection holds of
    /// the budget covers these beyond `OWN_KIB`, no more: a waiting task's
    /// part goes back to the budget, and comes to it through its wait.
    fn covered(&self) -> u64 {
        (self.budget.per_connection - self.own.available()).saturating_sub(self.waiting.get())
    }

    /// KiB of the shard's budget still needed to cover what is taken.
    fn wanted(&self) -> u64 {
        self.covered().saturating_sub(OWN_KIB).saturating_sub(self.held.get())
    }

    /// KiB a frame takes of the room: its size, or the whole room for a
    /// frame larger than it (it waits for an empty queue).
    pub fn kib_of_frame(&self, bytes: usize) -> u64 {
        (bytes as u64).div_ceil(1024).min(self.budget.per_connection)
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
        // What it needs is asked again after each second of waiting: the
        // connection's writes may have left it covered meanwhile. While it
        // waits, holders that drain too slowly are cut off (a wait dropped
        // leaves no units behind).
        loop {
            let more = self.wanted();
            if more == 0 {
                break;
            }
            let wait = Waiting::new(self, kib);
            let granted = futures_lite::future::or(async { Some(self.budget.sem.acquire(more).await) }, async {
                glommio::timer::sleep(CHECK).await;
                None
            });
            let granted = granted.await;
            drop(wait);
            match granted {
                Some(Ok(())) => {
                    self.hold(more);
                    break;
                }
                Some(Err(_)) => return false,
                None => {
                    self.budget.evict_stalled(self);
                }
            }
        }
        // Tasks of this connection that waited at once may together hold
        // more than they need: the rest goes back at once.
        self.settle();
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
        let spare = self.held.get().saturating_sub(self.covered().saturating_sub(OWN_KIB));
        if spare > 0 {
            self.held.set(self.held.get() - spare);
            self.budget.sem.signal(spare);
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
            let budget = Rc::new(Budget::new(0, 4 << 10, Duration::ZERO));
            let room = Room::new(budget.clone(), -1);
            assert!(room.try_acquire(OWN_KIB));
            assert!(!room.try_acquire(1), "past its share, with no budget left");
            room.signal(OWN_KIB);
            assert_eq!(room.own.available(), 4 << 10);
        });
    }

    #[test]
    fn the_budget_is_given_back_as_frames_are_written() {
        run(|| async {
            let budget = Rc::new(Budget::new(1000, 4 << 10, Duration::ZERO));
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
            let budget = Rc::new(Budget::new(1000, 4 << 10, Duration::from_millis(100)));
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

    /// A sweep cuts off the holders that drained less than they hold in
    /// their window, not those that read fast and keep their queue full.
    #[test]
    fn a_sweep_cuts_off_only_those_that_drain_too_slowly() {
        run(|| async {
            let budget = Rc::new(Budget::new(2000, 4 << 10, Duration::from_millis(100)));
            let (fast, slow, waiting) =
                (Room::new(budget.clone(), -1), Room::new(budget.clone(), -1), Room::new(budget.clone(), -1));
            assert!(fast.try_acquire(OWN_KIB + 1000));
            assert!(slow.try_acquire(OWN_KIB + 1000));
            // The fast one's writer writes and its search refills; the slow
            // one's writes nothing.
            let until = Instant::now() + Duration::from_millis(300);
            while Instant::now() < until {
                fast.written(500);
                assert!(fast.try_acquire(500));
                glommio::timer::sleep(Duration::from_millis(20)).await;
            }
            assert_eq!(budget.evict_stalled(&waiting), 0, "fd -1: nothing to shut down");
            assert!(!fast.evicted.get(), "a fast reader was cut off");
            assert!(slow.evicted.get(), "a slow reader was not");
            assert_eq!(budget.evict_stalled(&waiting), 0, "once a second at most");
        });
    }

    /// Two connections each wait for more of a spent budget while their
    /// earlier frames are written: what those frames held goes back to the
    /// budget, not kept for the waiting tasks, and both get their room
    /// (kept, each held its part and waited for more: for good).
    #[test]
    fn waiters_of_two_connections_both_get_their_room_as_frames_are_written() {
        run(|| async {
            // Room for both waiters' frames, not for those and the earlier.
            let budget = Rc::new(Budget::new(1100, 4 << 10, Duration::ZERO));
            let (a, b) = (Room::new(budget.clone(), -1), Room::new(budget.clone(), -1));
            assert!(a.try_acquire(OWN_KIB + 500) && b.try_acquire(OWN_KIB + 500));
            let wait = |room: &Rc<Room>| {
                let room = room.clone();
                glommio::spawn_local(async move { room.acquire(600).await })
            };
            let (wa, wb) = (wait(&a), wait(&b));
            glommio::timer::sleep(Duration::from_millis(10)).await;
            a.written(OWN_KIB + 500);
            b.written(OWN_KIB + 500);
            let both = futures_lite::future::zip(wa, wb);
            // A wait asks again after a second (`CHECK`): its need shrank.
            let done = glommio::timer::timeout(Duration::from_secs(3), async { Ok(both.await) }).await;
            assert_eq!(done.ok(), Some((true, true)), "a waiter never got its room");
        });
    }
}
