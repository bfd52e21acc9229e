//! A connection's room for answers queued and not yet written.
//!
//! Each connection may queue `OUT_KIB` (4 MiB) for a client that is slow
//! to read, and the first `OWN_KIB` of it is its own. Beyond that share it
//! draws on its shard's budget (`limits.max_queued_bytes`), which all the
//! shard's connections share: 1,000 clients that never read held 4 MiB
//! each (7.3 GB with what came with it), and now hold the budget and
//! their shares. A client that reads keeps being answered within its
//! share while others hold the budget; they are cut off after
//! `limits.write_timeout_s`.

use super::OUT_KIB;
use glommio::sync::Semaphore;
use std::cell::Cell;
use std::rc::Rc;

/// KiB of queued answers a connection holds without the shard's budget:
/// one coalesced write (`conn::COALESCE`).
pub const OWN_KIB: u64 = 64;

pub struct Room {
    /// The connection's own bound (`OUT_KIB`).
    own: Semaphore,
    /// The shard's budget, shared by its connections.
    shared: Rc<Semaphore>,
    /// KiB of `shared` this connection holds: at least what it has taken
    /// beyond `OWN_KIB`, given back as its frames are written.
    held: Cell<u64>,
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
    pub fn new(shared: Rc<Semaphore>) -> Room {
        Room { own: Semaphore::new(OUT_KIB), shared, held: Cell::new(0) }
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
        if more > 0 && !self.shared.try_acquire(more).unwrap_or(false) {
            self.own.signal(kib);
            return false;
        }
        self.held.set(self.held.get() + more);
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
            if self.shared.acquire(more).await.is_err() {
                return false;
            }
            self.held.set(self.held.get() + more);
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
            self.shared.signal(spare);
        }
    }
}

impl Drop for Room {
    fn drop(&mut self) {
        self.shared.signal(self.held.get());
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
            let shared = Rc::new(Semaphore::new(0));
            let room = Room::new(shared.clone());
            assert!(room.try_acquire(OWN_KIB));
            assert!(!room.try_acquire(1), "past its share, with no budget left");
            room.signal(OWN_KIB);
            assert_eq!(room.own.available(), OUT_KIB);
        });
    }

    #[test]
    fn the_budget_is_given_back_as_frames_are_written() {
        run(|| async {
            let shared = Rc::new(Semaphore::new(1000));
            let (a, b) = (Room::new(shared.clone()), Room::new(shared.clone()));
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
}
