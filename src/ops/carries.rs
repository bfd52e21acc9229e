//! The renames running in this process, shared by every shard, and the
//! reads and writes they must not cross (`ops::modify_dn`).
//!
//! A rename of a subtree, or of an entry to another owner, is a *carry*:
//! several commits, on several stores (the copies inserted, then the
//! originals removed). So is a frame of the mirror peer's records that
//! renames (one record per entry of a subtree, applied side by side:
//! `repl::receiver` claims it the same way, and `repl::sender` holds back
//! this server's changes stamped since a claim began, so that a frame
//! carries a move whole). Two things make it look like one step:
//!
//! - **Writes.** An add, delete or modify of an entry within the old or
//!   new DN of a running rename, or a rename touching either, is `busy`
//!   until it is done, so no update is lost to a copy and no entry appears
//!   or vanishes below a subtree while it moves. A write admitted just
//!   before the claim may still be on its way to the owner: the rename
//!   waits for every write admitted before its claim (`Claim::settle_writes`)
//!   before it reads the subtree, and fails with `busy` past `SETTLE_LIMIT`.
//! - **Reads.** A one-level or subtree search reads many entries, from
//!   every store, in chunks of fresh read transactions: during a carry it
//!   could see parts of both trees. One whose scope overlaps a running
//!   rename waits until the rename is done (`Carries::admit_read`), and a
//!   carry waits for the searches admitted before its claim
//!   (`Claim::settle_reads`). So a search sees the old tree or the new one
//!   whole. A search still running `SETTLE_LIMIT` after the claim (a
//!   client that does not read its results holds one for up to
//!   `limits.write_timeout_s`) does not hold the rename up: it is
//!   *overtaken*, and ends with `busy` before it sends anything read after
//!   the move began, if its scope overlaps the rename.
//!
//! Cost when no rename runs: an operation stores its number to its shard's
//! own `Lane` (a cache line written only by that shard) and loads
//! `active`, both sequentially consistent: either the operation sees the
//! claim, or the rename sees the operation admitted and waits for it; when
//! it ends, it stores how far its shard's operations have all finished to
//! the same line. A search checks its lane's `overtaken` per entry (an
//! acquire load of a line no one else writes unless a rename overtakes
//! it). The lock is taken only while a rename runs, and by a search a
//! rename overtook (once per rename) until the searches it overtook end.

use ldap3_proto::LdapResultCode;
use shards::dn::{key_below, Dn};
use shards::{Error, Result};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// See the module text.
pub struct Carries {
    active: AtomicUsize,
    /// Each running rename: old and new DN keys, and the wall clock (µs)
    /// when it began to move (`Claim::moving`), before any of its changes
    /// was stamped; `u64::MAX` while it waits.
    table: Mutex<Vec<(Vec<u8>, Vec<u8>, u64)>>,
    /// Per shard: its writes, and its one-level and subtree searches.
    writes: Box<[Lane]>,
    reads: Box<[Lane]>,
    /// The renames that overtook searches still running (see the module
    /// text), kept until every search they overtook has ended.
    overtakes: Mutex<Vec<Overtake>>,
}

/// A rename that did not wait for some searches (`Claim::settle_reads`).
struct Overtake {
    old: Vec<u8>,
    new: Vec<u8>,
    /// Per shard, the last search admitted before the claim.
    marks: Box<[u64]>,
}

/// One shard's admitted operations of one kind as the other shards see
/// them, on a cache line of its own; written only by that shard, but for
/// `overtaken`.
#[repr(align(128))]
#[derive(Default)]
struct Lane {
    /// The number of the last operation admitted (0: none yet).
    admitted: AtomicU64,
    /// Every operation numbered up to this one has finished.
    done: AtomicU64,
    /// Searches numbered up to this one were overtaken by a rename.
    overtaken: AtomicU64,
}

/// A shard's own record of its running operations of one kind (kept in
/// its `Ctx`): whether each admitted since the oldest still running has
/// finished, in the order admitted.
#[derive(Default)]
pub struct Running {
    /// How many operations finished before the oldest one in `finished`.
    done: Cell<u64>,
    finished: RefCell<VecDeque<bool>>,
}

impl Running {
    /// Numbers a new operation (from 1).
    fn enter(&self) -> u64 {
        let mut finished = self.finished.borrow_mut();
        finished.push_back(false);
        self.done.get() + finished.len() as u64
    }

    /// Marks operation `number` finished; returns up to which number all
    /// have. Mostly the oldest ends first: amortized constant time.
    fn leave(&self, number: u64) -> u64 {
        let mut finished = self.finished.borrow_mut();
        let at = (number - self.done.get() - 1) as usize;
        finished[at] = true;
        while finished.front() == Some(&true) {
            finished.pop_front();
            self.done.set(self.done.get() + 1);
        }
        self.done.get()
    }
}

/// An admitted operation: counted as running until dropped.
pub struct Admitted<'a> {
    lane: &'a Lane,
    running: &'a Running,
    number: u64,
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        let done = self.running.leave(self.number);
        self.lane.done.store(done, Ordering::Release);
    }
}

/// A one-level or subtree search to admit (`Carries::admit_read`).
pub struct Wanted<'a> {
    pub shard: usize,
    /// The key of its base; `anywhere`: aliases may widen it.
    pub scope: &'a [u8],
    pub anywhere: bool,
    /// Its time limit: it waits for a rename no longer.
    pub deadline: Option<Instant>,
}

/// An admitted one-level or subtree search.
pub struct Reading<'a> {
    carries: &'a Carries,
    admitted: Admitted<'a>,
    wanted: Wanted<'a>,
    /// The lane's `overtaken` when last found not to concern this search:
    /// until it moves, no lock is taken again.
    cleared: Cell<u64>,
}

impl Reading<'_> {
    /// Whether a rename overlapping this search's scope overtook it: the
    /// search must send nothing more (see the module text).
    pub fn overtaken(&self) -> bool {
        let mark = self.admitted.lane.overtaken.load(Ordering::Acquire);
        if mark < self.admitted.number || mark == self.cleared.get() {
            return false;
        }
        let w = &self.wanted;
        let overtaken = self.carries.overtook(w.shard, self.admitted.number, w.scope, w.anywhere);
        if !overtaken {
            self.cleared.set(mark);
        }
        overtaken
    }
}

/// How long a rename waits for the operations admitted before it.
const SETTLE_LIMIT: Duration = Duration::from_secs(10);
/// How long a search waits for a rename overlapping it (longer than the
/// rename's own wait, so that one slow search does not fail the others).
const READ_WAIT_LIMIT: Duration = Duration::from_secs(60);
/// How often a waiting operation looks again.
const POLL: Duration = Duration::from_millis(2);

/// Whether storage key `key` is `base` or below it.
fn within(key: &[u8], base: &[u8]) -> bool {
    key == base || key_below(key, base)
}

/// Whether the subtrees at two keys overlap (either within the other).
fn overlap(a: &[u8], b: &[u8]) -> bool {
    within(a, b) || within(b, a)
}

/// Whether two renames (old and new DN keys each) touch a common subtree,
/// which two claims may not.
fn crossing(a: (&[u8], &[u8]), b: (&[u8], &[u8])) -> bool {
    [a.0, a.1].iter().any(|k| overlap(k, b.0) || overlap(k, b.1))
}

fn busy() -> Error {
    Error::new(LdapResultCode::Busy, "a rename of a subtree holding this entry is in progress")
}

/// What an overtaken search ends with.
pub fn overtaken_error() -> Error {
    Error::new(LdapResultCode::Busy, "a rename of a subtree in this search's scope overtook it; search again")
}

impl Carries {
    /// For `shards` shards, each admitting operations on its own lanes.
    pub fn new(shards: usize) -> Carries {
        Carries {
            active: AtomicUsize::new(0),
            table: Mutex::default(),
            writes: (0..shards).map(|_| Lane::default()).collect(),
            reads: (0..shards).map(|_| Lane::default()).collect(),
            overtakes: Mutex::default(),
        }
    }

    fn enter<'a>(lane: &'a Lane, running: &'a Running) -> Admitted<'a> {
        let number = running.enter();
        // Before `active` is read (see the module text).
        lane.admitted.store(number, Ordering::SeqCst);
        Admitted { lane, running, number }
    }

    /// Admits a write of the entry `dn` on shard `shard` (whose record is
    /// `running`): `busy` when a running rename covers the entry;
    /// otherwise the write counts as running until the guard is dropped.
    pub fn admit<'a>(&'a self, shard: usize, running: &'a Running, dn: &Dn) -> Result<Admitted<'a>> {
        let admitted = Carries::enter(&self.writes[shard], running);
        if self.active.load(Ordering::SeqCst) != 0 {
            let key = dn.key();
            if self.running_over(|old, new| within(&key, old) || within(&key, new)) {
                return Err(busy());
            }
        }
        Ok(admitted)
    }

    /// Admits a one-level or subtree search on its shard (whose record is
    /// `running`): while a running rename overlaps it, waits (polling the
    /// reactor's timer; `busy` past `READ_WAIT_LIMIT`, timeLimitExceeded
    /// past its time limit, nothing when abandoned); then the search counts
    /// as running until the guard is dropped.
    pub async fn admit_read<'a>(
        &'a self,
        running: &'a Running,
        wanted: Wanted<'a>,
        abandoned: &crate::ops::abandon::Abandoned,
    ) -> Result<Reading<'a>> {
        let limit = Instant::now() + READ_WAIT_LIMIT;
        let crossed = || {
            self.active.load(Ordering::SeqCst) != 0
                && self.running_over(|old, new| {
                    wanted.anywhere || overlap(wanted.scope, old) || overlap(wanted.scope, new)
                })
        };
        loop {
            // Not counted while it waits: the rename does not wait for it.
            while crossed() {
                if wanted.deadline.is_some_and(|d| Instant::now() >= d) {
                    return Err(Error::new(LdapResultCode::TimeLimitExceeded, ""));
                }
                if Instant::now() > limit {
                    return Err(busy());
                }
                if abandoned.get() {
                    return Err(Error::new(LdapResultCode::Canceled, "abandoned"));
                }
                glommio::timer::sleep(POLL).await;
            }
            let admitted = Carries::enter(&self.reads[wanted.shard], running);
            // Again once admitted: a rename may have claimed in between.
            if !crossed() {
                return Ok(Reading { carries: self, admitted, wanted, cleared: Cell::new(0) });
            }
        }
    }

    /// Whether a running rename from `old` to `new` satisfies `test`.
    fn running_over(&self, test: impl Fn(&[u8], &[u8]) -> bool) -> bool {
        let table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        table.iter().any(|(old, new, _)| test(old, new))
    }

    /// Whether a rename overlapping `scope` overtook search `number` of
    /// shard `shard`. Forgets renames whose overtaken searches all ended.
    fn overtook(&self, shard: usize, number: u64, scope: &[u8], anywhere: bool) -> bool {
        let mut overtakes = self.overtakes.lock().unwrap_or_else(|p| p.into_inner());
        self.prune(&mut overtakes);
        overtakes
            .iter()
            .any(|o| o.marks[shard] >= number && (anywhere || overlap(scope, &o.old) || overlap(scope, &o.new)))
    }

    /// Forgets the renames whose overtaken searches have all ended.
    fn prune(&self, overtakes: &mut Vec<Overtake>) {
        overtakes.retain(|o| !settled(&self.reads, &o.marks));
    }

    /// When the oldest rename moving now began to (wall clock, µs): the
    /// replication sender holds back this server's changes stamped since,
    /// so that a frame carries a subtree's move whole (`repl::sender`).
    /// Not while a rename still waits for searches or writes: that may
    /// take `SETTLE_LIMIT`, and holding every change that long would lag.
    pub fn oldest_claim_us(&self) -> Option<u64> {
        if self.active.load(Ordering::SeqCst) == 0 {
            return None;
        }
        let table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        table.iter().map(|(.., since)| *since).filter(|s| *s != u64::MAX).min()
    }

    /// Registers a rename from `old` to `new` until the claim is dropped;
    /// `busy` when it overlaps one running (either within the other).
    pub fn claim(&self, old: Vec<u8>, new: Vec<u8>) -> Result<Claim<'_>> {
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        if table.iter().any(|(o, n, _)| crossing((&old, &new), (o, n))) {
            return Err(busy());
        }
        table.push((old.clone(), new.clone(), u64::MAX));
        self.active.fetch_add(1, Ordering::SeqCst);
        drop(table);
        let marks = |lanes: &[Lane]| lanes.iter().map(|l| l.admitted.load(Ordering::SeqCst)).collect();
        Ok(Claim { carries: self, writes: marks(&self.writes), reads: marks(&self.reads), old, new })
    }
}

/// A registered rename, with the operations admitted before it on each
/// shard; dropping it ends the registration.
pub struct Claim<'a> {
    carries: &'a Carries,
    writes: Box<[u64]>,
    reads: Box<[u64]>,
    old: Vec<u8>,
    new: Vec<u8>,
}

/// Whether every operation on `lanes` up to `marks` has finished.
fn settled(lanes: &[Lane], marks: &[u64]) -> bool {
    lanes.iter().zip(marks).all(|(lane, &mark)| lane.done.load(Ordering::Acquire) >= mark)
}

impl Claim<'_> {
    /// Marks the rename as moving from now (`Carries::oldest_claim_us`):
    /// called once it has waited, before its first commit.
    pub fn moving(&self) {
        let mut table = self.carries.table.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = table.iter_mut().find(|(o, ..)| *o == self.old) {
            entry.2 = shards::csn::wall_us();
        }
    }

    /// Whether a rename from `old` to `new` touches this one's subtrees
    /// (`Carries::claim` would refuse it while this one is held).
    pub fn crosses(&self, old: &[u8], new: &[u8]) -> bool {
        crossing((old, new), (&self.old, &self.new))
    }

    /// Waits until every write admitted on any shard before the claim has
    /// finished: one that passed its check before the claim may still be
    /// committing. `busy` when that takes longer than `SETTLE_LIMIT`.
    pub async fn settle_writes(&self) -> Result<()> {
        let deadline = Instant::now() + SETTLE_LIMIT;
        while !settled(&self.carries.writes, &self.writes) {
            if Instant::now() > deadline {
                return Err(Error::new(LdapResultCode::Busy, "writes below the entry did not finish in time"));
            }
            // A rename is rare: polling the reactor's timer costs no one else.
            glommio::timer::sleep(POLL).await;
        }
        Ok(())
    }

    /// Waits until every search admitted on any shard before the claim has
    /// finished, for a rename that is several commits; those still running
    /// after `SETTLE_LIMIT` are overtaken (see the module text).
    pub async fn settle_reads(&self) {
        self.settle_reads_within(SETTLE_LIMIT).await
    }

    /// Waits up to `limit` for the searches admitted before the claim, as
    /// `settle_reads`, but overtakes none: the mirror receiver's, which
    /// holds the inbound stream while it waits.
    pub async fn settle_reads_quietly(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        while !settled(&self.carries.reads, &self.reads) && Instant::now() <= deadline {
            glommio::timer::sleep(POLL).await;
        }
    }

    async fn settle_reads_within(&self, limit: Duration) {
        let carries = self.carries;
        let deadline = Instant::now() + limit;
        while !settled(&carries.reads, &self.reads) {
            if Instant::now() > deadline {
                let mut overtakes = carries.overtakes.lock().unwrap_or_else(|p| p.into_inner());
                carries.prune(&mut overtakes);
                let (old, new, marks) = (self.old.clone(), self.new.clone(), self.reads.clone());
                overtakes.push(Overtake { old, new, marks });
                drop(overtakes);
                for (lane, &mark) in carries.reads.iter().zip(&self.reads) {
                    lane.overtaken.fetch_max(mark, Ordering::Release);
                }
                return;
            }
            glommio::timer::sleep(POLL).await;
        }
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        let mut table = self.carries.table.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = table.iter().position(|(o, ..)| *o == self.old) {
            table.swap_remove(i);
            self.carries.active.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(dn: &str) -> Vec<u8> {
        Dn::parse(dn).unwrap().key()
    }

    fn wanted(shard: usize, scope: &[u8]) -> Wanted<'_> {
        Wanted { shard, scope, anywhere: false, deadline: None }
    }

    fn check(carries: &Carries, dn: &Dn) -> Result<()> {
        carries.admit(0, &Running::default(), dn).map(|_| ())
    }

    #[test]
    fn a_lane_counts_writes_done_up_to_the_oldest_still_running() {
        let (carries, running) = (Carries::new(2), Running::default());
        let w = |d: &str| carries.admit(1, &running, &Dn::parse(d).unwrap()).unwrap();
        let (first, second, third) = (w("cn=a,dc=t"), w("cn=b,dc=t"), w("cn=c,dc=t"));
        let lane = &carries.writes[1];
        assert_eq!((lane.admitted.load(Ordering::SeqCst), lane.done.load(Ordering::SeqCst)), (3, 0));
        drop(second);
        assert_eq!(lane.done.load(Ordering::SeqCst), 0, "the first still runs");
        drop(first);
        assert_eq!(lane.done.load(Ordering::SeqCst), 2);
        drop(third);
        assert_eq!(lane.done.load(Ordering::SeqCst), 3);
        let _claim = carries.claim(key("ou=a,dc=t"), key("ou=b,dc=t")).unwrap();
        assert!(carries.admit(1, &running, &Dn::parse("cn=x,ou=a,dc=t").unwrap()).is_err());
        assert_eq!(lane.done.load(Ordering::SeqCst), 4, "a refused write is done");
        assert_eq!(carries.writes[0].admitted.load(Ordering::SeqCst), 0, "another shard's lane");
    }

    /// Runs `f` on a glommio reactor (timers need one).
    fn on_reactor<F: std::future::Future<Output = ()> + 'static>(f: impl FnOnce() -> F + Send + 'static) {
        let ex = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound).spawn(move || f()).unwrap();
        ex.join().unwrap();
    }

    #[test]
    fn a_search_running_past_the_limit_is_overtaken_only_by_a_rename_of_its_scope() {
        on_reactor(|| async {
            let carries = Carries::new(2);
            let running = Running::default();
            let (a, c, top) = (key("ou=a,dc=t"), key("ou=c,dc=t"), key("dc=t"));
            let no = crate::ops::abandon::Abandoned::default();
            let read = |scope| carries.admit_read(&running, wanted(1, scope), &no);
            let in_a = read(&a).await.unwrap();
            let in_c = read(&c).await.unwrap();
            let above = read(&top).await.unwrap();
            let claim = carries.claim(key("ou=a,dc=t"), key("ou=b,dc=t")).unwrap();
            // A search overlapping a running rename waits for it.
            let waiting = read(&top);
            futures_lite::pin!(waiting);
            assert!(futures_lite::future::poll_once(&mut waiting).await.is_none(), "waits while the rename runs");
            claim.settle_reads_within(Duration::from_millis(5)).await;
            assert!(in_a.overtaken(), "its scope is the renamed subtree");
            assert!(above.overtaken(), "its scope holds the renamed subtree");
            assert!(!in_c.overtaken(), "a scope apart from the rename goes on");
            drop(claim);
            let after = waiting.await.unwrap();
            assert!(!after.overtaken(), "admitted once the rename was done");
            drop((in_a, in_c, above));
            assert!(!carries.overtook(1, 1, &top, true), "forgotten once the searches it overtook ended");
            assert!(carries.overtakes.lock().unwrap().is_empty());
        });
    }

    #[test]
    fn a_rename_waits_for_the_searches_admitted_before_it() {
        on_reactor(|| async {
            let carries = Carries::new(1);
            let running = Running::default();
            let top = key("dc=t");
            let no = crate::ops::abandon::Abandoned::default();
            let search = carries.admit_read(&running, wanted(0, &top), &no).await.unwrap();
            let claim = carries.claim(key("ou=a,dc=t"), key("ou=b,dc=t")).unwrap();
            let settle = claim.settle_reads_within(Duration::from_secs(60));
            futures_lite::pin!(settle);
            assert!(futures_lite::future::poll_once(&mut settle).await.is_none(), "the search still runs");
            drop(search);
            settle.await;
            assert_eq!(carries.reads[0].overtaken.load(Ordering::SeqCst), 0, "nothing overtaken");
        });
    }

    #[test]
    fn a_running_rename_makes_writes_below_either_dn_busy() {
        let carries = Carries::new(1);
        let dn = |d: &str| Dn::parse(d).unwrap();
        assert!(check(&carries, &dn("cn=x,ou=a,dc=t")).is_ok(), "nothing runs");
        let claim = carries.claim(key("ou=a,dc=t"), key("ou=b,dc=t")).unwrap();
        for busy in ["ou=a,dc=t", "cn=x,ou=a,dc=t", "cn=y,cn=x,ou=b,dc=t"] {
            assert_eq!(check(&carries, &dn(busy)).unwrap_err().code, LdapResultCode::Busy, "{busy}");
        }
        for free in ["dc=t", "ou=ab,dc=t", "cn=x,ou=c,dc=t"] {
            assert!(check(&carries, &dn(free)).is_ok(), "{free}");
        }
        // Renames overlapping it either way wait too; others go on.
        assert!(carries.claim(key("cn=x,ou=a,dc=t"), key("cn=x,ou=c,dc=t")).is_err());
        assert!(carries.claim(key("ou=c,dc=t"), key("ou=d,ou=b,dc=t")).is_err());
        assert!(carries.claim(key("dc=t"), key("dc=u")).is_err(), "an ancestor of the subtree");
        let other = carries.claim(key("ou=c,dc=t"), key("ou=d,dc=t")).unwrap();
        drop(claim);
        assert!(check(&carries, &dn("cn=x,ou=a,dc=t")).is_ok(), "done");
        assert_eq!(check(&carries, &dn("ou=d,dc=t")).unwrap_err().code, LdapResultCode::Busy);
        drop(other);
        assert_eq!(carries.active.load(Ordering::Relaxed), 0);
    }
}
