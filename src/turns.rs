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

impl Turn<'_> {
    /// Hands the lane straight to `owner`'s next job, if one waits, else
    /// as a drop does: a connection that has gone ends its queued jobs
    /// one after another at once, not one a round (each round a costly
    /// job of every other connection waiting).
    pub fn again(self, owner: Owner) {
        let turns = self.0;
        std::mem::forget(self);
        let next = {
            let mut ring = turns.ring.borrow_mut();
            let at = ring.iter().position(|(o, _)| *o == owner);
            at.and_then(|at| {
                let jobs = &mut ring[at].1;
                let next = std::iter::from_fn(|| jobs.pop_front()).find(|wake| !wake.is_canceled());
                if ring[at].1.is_empty() {
                    ring.remove(at);
                }
                next
            })
        };
        if !next.is_some_and(|wake| wake.send(()).is_ok()) {
            turns.pass();
        }
    }
}

/// A job waiting for its turn. Dropped after the lane was handed to it
/// but before it took it (its task cancelled meanwhile), it hands the
/// lane on: else the lane would stay busy with no one to pass it.
struct Waiter<'a> {
    turns: &'a Turns,
    woken: oneshot::Receiver<()>,
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        // Received already (the job holds its Turn): nothing is left here.
        if let Ok(Some(())) = self.woken.try_recv() {
            self.turns.pass();
        }
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
        // A waiter dropped before its turn is skipped by `pass`; one
        // dropped after the lane was handed to it, before it ran, hands
        // the lane on (`Waiter`'s drop). The lane goes only to a live
        // receiver, so the wait never ends in an error.
        let mut waiter = Waiter { turns: self, woken };
        (&mut waiter.woken).await.expect("a wake-up is dropped unsent only when its waiter is gone");
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

    /// `again` gives the lane to the same owner's next job, past others.
    #[test]
    fn again_keeps_the_lane_with_its_owner() {
        glommio::LocalExecutor::default().run(async {
            let turns = Rc::new(Turns::default());
            let order = Rc::new(RefCell::new(Vec::new()));
            let first = turns.take(1).await;
            let mut tasks = Vec::new();
            for (owner, job) in [(2, "b1"), (1, "a2"), (1, "a3")] {
                let (turns, order) = (turns.clone(), order.clone());
                tasks.push(glommio::spawn_local(async move {
                    let turn = turns.take(owner).await;
                    order.borrow_mut().push(job);
                    if owner == 1 {
                        turn.again(1);
                    }
                }));
            }
            futures_lite::future::yield_now().await;
            first.again(1);
            for t in tasks {
                t.await;
            }
            assert_eq!(*order.borrow(), ["a2", "a3", "b1"]);
            assert!(!turns.busy.get());
        });
    }

    /// A job handed the lane and cancelled before it ran hands it on.
    #[test]
    fn a_job_cancelled_after_its_turn_came_hands_the_lane_on() {
        glommio::LocalExecutor::default().run(async {
            let turns = Rc::new(Turns::default());
            let ran = Rc::new(Cell::new(false));
            let first = turns.take(0).await;
            let chosen = glommio::spawn_local({
                let turns = turns.clone();
                async move { drop(turns.take(1).await) }
            });
            let next = glommio::spawn_local({
                let (turns, ran) = (turns.clone(), ran.clone());
                async move {
                    let _turn = turns.take(2).await;
                    ran.set(true);
                }
            });
            futures_lite::future::yield_now().await;
            // Owner 1's turn comes; it is cancelled before it runs.
            drop(first);
            chosen.cancel().await;
            next.await;
            assert!(ran.get());
            assert!(!turns.busy.get());
        });
    }
}
