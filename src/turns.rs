//! One lane of work taken in turns by connection: the shard's key
//! stretching (`Ctx::password_work`). A FIFO queue let one client that
//! pipelines Compares of a costly `userPassword` hash (up to
//! `limits.max_pending` of them) put every other client's Bind behind
//! all of its checks. Here each connection waiting has one place in a
//! ring, and the lane goes round it: a connection's next job waits until
//! every other connection waiting has had one. Reactor-local: no lock.

use futures_channel::oneshot;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;

/// Who waits for the lane: a connection's id (slapd's `conn=`).
pub type Owner = u64;

#[derive(Default)]
pub struct Turns {
    busy: Cell<bool>,
    /// The owners waiting, in the order their turns come, each with its
    /// jobs' wake-ups in arrival order.
    ring: RefCell<VecDeque<(Owner, VecDeque<oneshot::Sender<()>>)>>,
}

/// The lane, held until dropped; then the next owner's turn.
pub struct Turn<'a>(&'a Turns);

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.0.pass();
    }
}

impl Turns {
    /// Waits for `owner`'s turn on the lane.
    pub async fn take(&self, owner: Owner) -> Turn<'_> {
        if !self.busy.get() {
            self.busy.set(true);
            return Turn(self);
        }
        let (wake, woken) = oneshot::channel();
        {
            let mut ring = self.ring.borrow_mut();
            match ring.iter_mut().find(|(o, _)| *o == owner) {
                Some((_, jobs)) => jobs.push_back(wake),
                None => ring.push_back((owner, VecDeque::from([wake]))),
            }
        }
        // A waiter dropped before its turn is skipped by `pass`; the lane
        // is handed on only to one still waiting, so this never fails
        // while the future is alive.
        let _ = woken.await;
        Turn(self)
    }

    /// Hands the lane to the next owner in the ring (its oldest job), and
    /// puts that owner at the back if it has more; or frees the lane.
    fn pass(&self) {
        let mut ring = self.ring.borrow_mut();
        while let Some((owner, mut jobs)) = ring.pop_front() {
            let Some(wake) = jobs.pop_front() else { continue };
            if !jobs.is_empty() {
                ring.push_back((owner, jobs));
            }
            if wake.send(()).is_ok() {
                return;
            }
        }
        self.busy.set(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    /// Three jobs of owner 1 queued before one of owner 2: owner 2's runs
    /// second, not fourth; a waiter that gave up is skipped.
    #[test]
    fn owners_take_turns_and_a_waiter_that_left_is_skipped() {
        glommio::LocalExecutor::default().run(async {
            let turns = Rc::new(Turns::default());
            let order = Rc::new(RefCell::new(Vec::new()));
            let first = turns.take(0).await;
            let mut tasks = Vec::new();
            for (owner, job) in [(1, "a1"), (1, "a2"), (1, "a3"), (3, "gone"), (2, "b1")] {
                let (turns, order) = (turns.clone(), order.clone());
                tasks.push(glommio::spawn_local(async move {
                    let _turn = turns.take(owner).await;
                    order.borrow_mut().push(job);
                    glommio::yield_if_needed().await;
                }));
            }
            // Every task waits in the ring now.
            futures_lite::future::yield_now().await;
            let gone = tasks.remove(3);
            gone.cancel().await;
            drop(first);
            for t in tasks {
                t.await;
            }
            assert_eq!(*order.borrow(), ["a1", "b1", "a2", "a3"]);
            // The lane is free again.
            drop(turns.take(9).await);
            assert!(!turns.busy.get());
        });
    }
}
