//! Anti-entropy: mirror mode's check that the two servers show the same.
//!
//! Every `replication.verify_interval_s`, the sender sweeps the
//! partitions while it has nothing else to send: for each, it sums the
//! digest of what the partition shows (`shards::digest`) together with
//! the replica update vector (per origin and partition, the last record
//! held), and asks the peer for its own (`Frame::Digest`, answered by
//! `Frame::Digested`). The whole vector, not the partition's positions
//! alone: a rename logged in one partition brings an entry into another
//! without moving that one's positions. The verdict:
//!
//! - the vectors differ (records in flight either way, or writes during
//!   the sum): none, the next sweep tries again;
//! - same vector, same digest: the partition agrees;
//! - same vector, different digests: suspect. Entries a rename hands over
//!   land without moving any position, so the partition is asked again
//!   `CONFIRM` later; differing again at the same vector, it has
//!   diverged: the log raises an alert naming the entries the two sides
//!   disagree on (per entry, its DN and the head of its hash,
//!   `Frame::Hashes`), `ctl replication` and
//!   `coredir_replication_divergences_total` count it, and the partition
//!   is resynced to the peer (the states, joined into the peer's;
//!   `apply::absorb` rewrites an entry whose stored form differs from
//!   what its state shows). The peer's sender does the same the other
//!   way, so what only the peer holds comes back here. A difference that
//!   a resync did not mend (the same digests again) is said once and not
//!   resynced again until something changes.
//!
//! Summing reads one chunk of entries per snapshot and yields between
//! chunks, so a large partition never holds the reactor.

use crate::ctx::Ctx;
use anyhow::{anyhow, Result};
use serde::{Deserialize, Serialize};
use shards::changelog::Origin;
use shards::digest::{self, Digest};
use shards::dn::Dn;
use shards::entry::Entry;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Entries summed per snapshot before yielding.
const CHUNK: usize = 256;
/// The most entries a divergence report compares per partition (the
/// first by DN): a frame of at most ~12 MiB.
const MAX_LISTED: usize = 20_000;
/// How long after a first difference the partition is asked again.
pub const CONFIRM: Duration = Duration::from_secs(2);

/// The replica update vector: per origin, per partition, the last record
/// held (`repl::vector`).
pub type Vector = Vec<(Origin, Vec<u64>)>;

/// A partition's digest, and the vector it was taken at.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub vector: Vector,
    pub digest: String,
}

/// Sums a partition's digest; `None` when the vector moved meanwhile.
pub async fn summarize(ctx: &Ctx, partition: u16) -> Result<Option<Summary>> {
    if partition as u32 >= ctx.shard.manifest.partitions {
        return Err(anyhow!("there is no partition {partition}"));
    }
    let before = crate::repl::vector(ctx)?;
    let mut acc = Digest::default();
    walk(ctx, partition, &mut |_, hash| acc.add(hash)).await?;
    Ok((crate::repl::vector(ctx)? == before).then(|| Summary { vector: before, digest: acc.hex() }))
}

/// Visits every entry of a partition with its hash, a chunk per snapshot.
async fn walk(ctx: &Ctx, partition: u16, f: &mut dyn FnMut(&Entry, &[u8; 32])) -> Result<()> {
    let m = &ctx.shard.manifest;
    let store = ctx.shard.stores.get(m.owner_of_partition(partition as u32));
    let mut from = None;
    loop {
        let next = {
            let txn = store.read().map_err(|e| anyhow!(e.message))?;
            digest::visit(&txn, partition, from, CHUNK, f).map_err(|e| anyhow!(e.message))?
        };
        match next {
            Some(id) => from = Some(id),
            None => return Ok(()),
        }
        futures_lite::future::yield_now().await;
    }
}

/// A DN's normalized key (its lower-cased text if it does not parse).
fn key_of(dn: &str) -> Vec<u8> {
    Dn::parse(dn).map(|d| d.key()).unwrap_or_else(|_| dn.to_ascii_lowercase().into_bytes())
}

/// Per entry of a partition, its DN and the head of its hash: the first
/// `MAX_LISTED` by DN key, what a divergence report compares.
pub async fn hashes(ctx: &Ctx, partition: u16) -> Result<Vec<(String, String)>> {
    if partition as u32 >= ctx.shard.manifest.partitions {
        return Err(anyhow!("there is no partition {partition}"));
    }
    let mut all = Vec::new();
    walk(ctx, partition, &mut |e, hash| {
        all.push((key_of(&e.dn), e.dn.clone(), hash[..8].iter().map(|b| format!("{b:02x}")).collect::<String>()));
    })
    .await?;
    all.sort_unstable();
    all.truncate(MAX_LISTED);
    Ok(all.into_iter().map(|(_, dn, h)| (dn, h)).collect())
}

/// The entries two lists disagree on, said for the log (the first ten).
/// Past `MAX_LISTED`, only the DNs both lists cover are compared.
pub fn differences(ours: &[(String, String)], theirs: &[(String, String)]) -> String {
    let keyed = |l: &[(String, String)]| -> BTreeMap<Vec<u8>, (String, String)> {
        l.iter().map(|(dn, h)| (key_of(dn), (dn.clone(), h.clone()))).collect()
    };
    let (a, b) = (keyed(ours), keyed(theirs));
    let last = |m: &BTreeMap<Vec<u8>, _>, n: usize| (n >= MAX_LISTED).then(|| m.keys().next_back().cloned()).flatten();
    let limit = [last(&a, ours.len()), last(&b, theirs.len())].into_iter().flatten().min();
    let mut keys: Vec<&Vec<u8>> = a.keys().chain(b.keys()).filter(|k| limit.as_ref().is_none_or(|l| *k <= l)).collect();
    keys.sort_unstable();
    keys.dedup();
    let mut said: Vec<String> = Vec::new();
    for k in keys {
        match (a.get(k), b.get(k)) {
            (Some((dn, x)), Some((_, y))) if x != y => said.push(format!("{dn} differs")),
            (Some((dn, _)), None) => said.push(format!("{dn} only here")),
            (None, Some((dn, _))) => said.push(format!("{dn} only there")),
            _ => {}
        }
    }
    let n = said.len();
    said.truncate(10);
    let mut out = match n {
        0 => "no entry differs now".to_string(),
        n if n > 10 => format!("{} (and {} more)", said.join("; "), n - 10),
        _ => said.join("; "),
    };
    if limit.is_some() {
        out.push_str(&format!(" (among the first {MAX_LISTED} DNs)"));
    }
    out
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Agree,
    /// The vectors differ or moved: nothing to say.
    Unsettled,
    Differs,
}

pub fn judge(ours: Option<&Summary>, theirs: Option<&Summary>) -> Verdict {
    match (ours, theirs) {
        (Some(a), Some(b)) if a.vector == b.vector => match a.digest == b.digest {
            true => Verdict::Agree,
            false => Verdict::Differs,
        },
        _ => Verdict::Unsettled,
    }
}

/// The sender's schedule: sweeps, the suspects being confirmed, and the
/// digests each partition's last resync left.
pub struct Checker {
    interval: Option<Duration>,
    partitions: u16,
    /// The next partition of the current sweep (`partitions`: none running).
    next: u16,
    swept: Instant,
    /// Partitions that differed once: the vector then, and when.
    suspects: BTreeMap<u16, (Vector, Instant)>,
    /// Per partition resynced, the digests (ours, theirs) it differed by.
    resynced: BTreeMap<u16, (String, String)>,
}

impl Checker {
    /// The first sweep starts one interval from now.
    pub fn new(interval_s: u64, partitions: u32) -> Checker {
        let partitions = partitions as u16;
        let interval = (interval_s > 0).then(|| Duration::from_secs(interval_s));
        let (suspects, resynced) = (BTreeMap::new(), BTreeMap::new());
        Checker { interval, partitions, next: partitions, swept: Instant::now(), suspects, resynced }
    }

    /// The partition to check now, if any.
    pub fn due(&mut self) -> Option<u16> {
        let interval = self.interval?;
        if let Some((&p, _)) = self.suspects.iter().find(|(_, (_, at))| at.elapsed() >= CONFIRM) {
            return Some(p);
        }
        if self.next == self.partitions {
            if self.swept.elapsed() < interval {
                return None;
            }
            (self.next, self.swept) = (0, Instant::now());
        }
        self.next += 1;
        Some(self.next - 1)
    }

    /// Takes a partition's verdict at our vector; true when it has
    /// diverged for sure (differed twice, `CONFIRM` apart, at the same
    /// vector).
    pub fn diverged(&mut self, partition: u16, verdict: Verdict, vector: &Vector) -> bool {
        let seen = self.suspects.remove(&partition);
        match (verdict, seen) {
            (Verdict::Differs, Some((at, t))) if at == *vector && t.elapsed() >= CONFIRM => true,
            (Verdict::Differs, Some((at, t))) if at == *vector => {
                self.suspects.insert(partition, (at, t));
                false
            }
            (Verdict::Differs, _) => {
                self.suspects.insert(partition, (vector.clone(), Instant::now()));
                false
            }
            (Verdict::Agree, _) => {
                self.resynced.remove(&partition);
                false
            }
            (Verdict::Unsettled, _) => false,
        }
    }

    /// Whether a confirmed divergence is worth a resync: not when the last
    /// resync of the partition left it differing by the same digests.
    pub fn worth_a_resync(&mut self, partition: u16, ours: &str, theirs: &str) -> bool {
        let now = (ours.to_string(), theirs.to_string());
        self.resynced.insert(partition, now.clone()) != Some(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(seq: u64, digest: &str) -> Summary {
        Summary { vector: vec![(Origin { sid: 1, incarnation: 1 }, vec![0, seq])], digest: digest.into() }
    }

    #[test]
    fn only_the_same_vector_gives_a_verdict() {
        let (a, b) = (summary(3, "aa"), summary(3, "bb"));
        assert_eq!(judge(Some(&a), Some(&a.clone())), Verdict::Agree);
        assert_eq!(judge(Some(&a), Some(&b)), Verdict::Differs);
        assert_eq!(judge(Some(&a), Some(&summary(4, "bb"))), Verdict::Unsettled);
        assert_eq!(judge(None, Some(&b)), Verdict::Unsettled);
    }

    #[test]
    fn differences_name_the_entries_by_their_normalized_dn() {
        let l = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
        };
        let ours = l(&[("cn=a,dc=x", "1"), ("cn=b,dc=x", "2"), ("cn=c,dc=x", "3")]);
        let theirs = l(&[("CN=B, dc=x", "2"), ("cn=c,dc=x", "4"), ("cn=d,dc=x", "5")]);
        assert_eq!(differences(&ours, &theirs), "cn=a,dc=x only here; cn=c,dc=x differs; cn=d,dc=x only there");
        assert_eq!(differences(&ours, &ours), "no entry differs now");
    }

    #[test]
    fn a_sweep_visits_every_partition_then_waits() {
        let mut c = Checker::new(3600, 3);
        assert_eq!(c.due(), None);
        c.swept -= Duration::from_secs(3600);
        assert_eq!((c.due(), c.due(), c.due(), c.due()), (Some(0), Some(1), Some(2), None));
        assert_eq!(Checker::new(0, 3).due(), None);
    }

    fn age(c: &mut Checker, p: u16) {
        c.suspects.get_mut(&p).unwrap().1 -= CONFIRM;
    }

    #[test]
    fn a_difference_counts_once_confirmed_at_the_same_vector() {
        let mut c = Checker::new(3600, 3);
        let at = summary(3, "").vector;
        assert!(!c.diverged(1, Verdict::Differs, &at));
        // Asked again too soon: not yet.
        assert!(!c.diverged(1, Verdict::Differs, &at));
        // Several suspects at once, each confirmed on its own.
        assert!(!c.diverged(2, Verdict::Differs, &at));
        age(&mut c, 1);
        assert_eq!(c.due(), Some(1));
        assert!(c.diverged(1, Verdict::Differs, &at));
        assert!(!c.suspects.contains_key(&1) && c.suspects.contains_key(&2));
        // Agreeing, or no verdict, clears a suspect.
        assert!(!c.diverged(2, Verdict::Unsettled, &at));
        assert!(c.suspects.is_empty());
        // A moved vector starts over.
        assert!(!c.diverged(2, Verdict::Differs, &at));
        age(&mut c, 2);
        assert!(!c.diverged(2, Verdict::Differs, &summary(4, "").vector));
    }

    #[test]
    fn a_resync_that_mended_nothing_is_not_repeated() {
        let mut c = Checker::new(3600, 3);
        assert!(c.worth_a_resync(1, "a", "b"));
        assert!(!c.worth_a_resync(1, "a", "b"));
        assert!(c.worth_a_resync(1, "a", "c"));
        // Once the partition agrees, a new difference is resynced again.
        c.diverged(1, Verdict::Agree, &summary(3, "").vector);
        assert!(c.worth_a_resync(1, "a", "c"));
    }
}
