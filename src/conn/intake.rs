//! What a connection's running operations hold of their requests.
//!
//! A request that runs as a task (a search waiting for its client to read,
//! a write waiting for its commit) holds its decoded request until it
//! ends, about 40 times its bytes for a list of short names: 99 pipelined
//! anonymous searches of 240 KB each, waiting behind answers their client
//! does not read, held 9 MB apiece (4 clients: 2.4 GB). slapd bounds the
//! count alone (`conn_max_pending`), and so does `limits.max_pending`.
//!
//! So a request's memory is estimated from its BER (`strict::weight`)
//! before it is decoded, and a connection with operations running takes
//! the next one only while what they hold stays within
//! `limits.max_pending_bytes_per_connection` and its shard's
//! `limits.max_pending_bytes` (`Intake`), which all its connections share.
//! Past them the read loop stops reading (TCP holds the client back, as
//! slapd's deferred operations do) until an operation ends or the budget
//! frees, for at most `limits.request_timeout_s`: then the request is
//! answered `busy` and reading goes on (operations that never end on
//! their own, persistent searches, would otherwise hold the connection
//! unread for good, its Abandon and its close unseen). Abandon and Unbind
//! never wait. The first `OWN_BYTES` a connection's operations hold are
//! its own: each client keeps being served, pipelining requests of a usual
//! size, whoever holds the budget. A request on a connection with none
//! running counts against the shard's budget alone (what one request may
//! take is the PDU limit's business), up to all of it.

use glommio::sync::Semaphore;
use std::cell::Cell;
use std::task::{Poll, Waker};

/// What a connection's running operations may hold without the shard's
/// budget: 100 pipelined searches of a usual size (2 KB each, as
/// estimated) never wait for it, whoever holds it (a persistent search
/// holds its part for as long as it runs).
const OWN_BYTES: usize = 256 << 10;

/// Whether a request of `len` bytes fits the share of a connection with
/// nothing running, however it weighs (`strict::MOST_WEIGHT_PER_BYTE`).
pub fn always_taken(len: usize) -> bool {
    len.saturating_mul(crate::strict::MOST_WEIGHT_PER_BYTE) <= OWN_BYTES
}

/// A shard's budget of request memory held by running operations, in KiB.
pub struct Intake {
    sem: Semaphore,
    kib: u64,
}

impl Intake {
    pub fn new(bytes: usize) -> Intake {
        let kib = (bytes >> 10) as u64;
        Intake { sem: Semaphore::new(kib), kib }
    }
}

/// The KiB of the shard's budget `weight` bytes take.
fn kib_of(weight: usize) -> u64 {
    (weight as u64).div_ceil(1024)
}

/// What one running operation holds of the budgets: its estimate in bytes
/// on its connection, and in KiB of its shard's `Intake`.
#[derive(Default)]
pub struct Charge {
    pub bytes: usize,
    pub kib: u64,
}

/// A connection's side: what its running operations hold, and the read
/// loop waiting for one of them to end.
#[derive(Default)]
pub struct Held {
    bytes: Cell<usize>,
    /// Operations that ended, counted, so a wait begun after the last
    /// one does not end at once.
    ended: Cell<u64>,
    waiter: Cell<Option<Waker>>,
    /// What the request being dispatched took (`admit`), handed to the
    /// operation that runs it (`take_arriving`) or given back after the
    /// dispatch.
    arriving: Cell<Option<Charge>>,
}

impl Held {
    /// Takes `weight` bytes of a request for the connection if its running
    /// operations and its shard's leave room (`limit`: the connection's
    /// bound).
    pub fn try_admit(&self, intake: &Intake, weight: usize, limit: usize) -> bool {
        if self.bytes.get() + weight <= OWN_BYTES {
            self.hold(Charge { bytes: weight, kib: 0 });
            return true;
        }
        let kib = kib_of(weight);
        if !self.may_take(intake, weight, limit) || !intake.sem.try_acquire(kib).unwrap_or(false) {
            return false;
        }
        self.hold(Charge { bytes: weight, kib });
        true
    }

    /// Whether `weight` more stays within the connection's bound and could
    /// ever come from the shard's budget.
    fn may_take(&self, intake: &Intake, weight: usize, limit: usize) -> bool {
        self.bytes.get() + weight <= limit && kib_of(weight) <= intake.kib
    }

    /// `try_admit`, waiting for room while the connection has operations
    /// running (`running` of them). With none, the connection's bound does
    /// not apply (what one request may hold is the PDU limit's business)
    /// but the shard's does, up to all of it: every connection's first
    /// big request holding its operation's memory for as long as it runs
    /// (a persistent search: for good) took the shard's memory times the
    /// connections. The caller has started what it deferred: only a
    /// running operation's end, or another connection's, can make room.
    pub async fn admit(&self, intake: &Intake, weight: usize, limit: usize, running: impl Fn() -> usize) {
        let kib = kib_of(weight);
        while !self.try_admit(intake, weight, limit) {
            if running() == 0 {
                let kib = kib.min(intake.kib);
                if intake.sem.acquire(kib).await.is_ok() {
                    self.hold(Charge { bytes: weight, kib });
                }
                return;
            }
            let ended = self.ended.get();
            let one_ends = std::future::poll_fn(|cx| {
                if self.ended.get() != ended {
                    return Poll::Ready(false);
                }
                self.waiter.set(Some(cx.waker().clone()));
                Poll::Pending
            });
            // Past the connection's own bound, only its operations can
            // make room; else the shard's budget may, too.
            let granted = match self.may_take(intake, weight, limit) {
                true => futures_lite::future::or(async { intake.sem.acquire(kib).await.is_ok() }, one_ends).await,
                false => one_ends.await,
            };
            if granted {
                return self.hold(Charge { bytes: weight, kib });
            }
        }
    }

    fn hold(&self, charge: Charge) {
        self.bytes.set(self.bytes.get() + charge.bytes);
        self.arriving.set(Some(charge));
    }

    /// The charge of the request being dispatched, for the operation that
    /// goes on running it.
    pub fn take_arriving(&self) -> Charge {
        self.arriving.take().unwrap_or_default()
    }

    /// After a dispatch: what no running operation took (the request was
    /// answered at once) is given back.
    pub fn settle<T>(&self, intake: &Intake, dispatched: T) -> T {
        if let Some(charge) = self.arriving.take() {
            self.release(intake, charge);
        }
        dispatched
    }

    /// An operation ended (or a request was answered at once): gives back
    /// what it held and wakes the read loop if it waits.
    pub fn release(&self, intake: &Intake, charge: Charge) {
        self.bytes.set(self.bytes.get() - charge.bytes);
        if charge.kib > 0 {
            intake.sem.signal(charge.kib);
        }
        self.ended.set(self.ended.get() + 1);
        if let Some(w) = self.waiter.take() {
            w.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    #[test]
    fn a_connection_waits_past_its_bounds_until_an_operation_ends() {
        const K: usize = 1024;
        glommio::LocalExecutorBuilder::default()
            .spawn(|| async {
                let intake = Rc::new(Intake::new(640 * K));
                let held = Rc::new(Held::default());
                let running = Rc::new(Cell::new(0));
                let r = running.clone();
                // None running: past the connection's bound, charged to
                // the shard's budget, at most all of it.
                held.admit(&intake, 1 << 20, 512 * K, || r.get()).await;
                let alone = held.take_arriving();
                assert_eq!((alone.kib, intake.sem.available()), (640, 0));
                held.release(&intake, alone);
                running.set(1);
                // Within the connection's own share: no charge either.
                held.admit(&intake, 100 * K, 1024 * K, || r.get()).await;
                let small = held.take_arriving();
                assert_eq!((small.bytes, small.kib), (100 * K, 0));
                held.release(&intake, small);
                held.admit(&intake, 400 * K, 1024 * K, || r.get()).await;
                let first = held.take_arriving();
                assert_eq!((first.bytes, first.kib, intake.sem.available()), (400 * K, 400, 240));
                // A request of `weight` admitted in a task of its own, left
                // to wait: whether it is done yet, and its charge.
                let admitting = |weight: usize| {
                    let done = Rc::new(Cell::new(false));
                    let (h, i, r, d) = (held.clone(), intake.clone(), running.clone(), done.clone());
                    let task = glommio::spawn_local(async move {
                        h.admit(&i, weight, 1024 * K, || r.get()).await;
                        d.set(true);
                        h.take_arriving()
                    });
                    async move {
                        for _ in 0..3 {
                            futures_lite::future::yield_now().await;
                        }
                        (done.get(), task)
                    }
                };
                // The shard's budget is short: it waits for it.
                let (done, waiting) = admitting(400 * K).await;
                assert!(!done);
                held.release(&intake, first);
                let second = waiting.await;
                assert_eq!((second.kib, held.bytes.get()), (400, 400 * K));
                // Past the connection's bound, only an operation's end
                // lets it on (here the last: then the shard's budget alone
                // bounds it, all of it at most).
                let (done, waiting) = admitting(800 * K).await;
                assert!(!done);
                running.set(0);
                held.release(&intake, second);
                let last = waiting.await;
                assert_eq!((last.kib, intake.sem.available()), (640, 0));
                // Another connection's first big request waits for it.
                let other = Rc::new(Held::default());
                let (o, i) = (other.clone(), intake.clone());
                let alone = glommio::spawn_local(async move {
                    o.admit(&i, 300 * K, 1024 * K, || 0).await;
                    o.take_arriving()
                });
                futures_lite::future::yield_now().await;
                assert_eq!(other.bytes.get(), 0);
                held.release(&intake, last);
                assert_eq!(alone.await.kib, 300);
                assert_eq!((held.bytes.get(), intake.sem.available()), (0, 340));
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
