//! Anti-entropy: mirror mode's check that the two servers show the same.
//!
//! Every `replication.verify_interval_s`, the sender sweeps the
//! partitions while it has nothing else to send: for each, it sums the
//! digest of what the partition shows (`shards::digest`) together with the
//! partition's replication positions (per origin, the last record held),
//! and asks the peer for its own (`Frame::Digest`, answered by
//! `Frame::Digested`). The verdict:
//!
//! - positions differ (records in flight, or writes during the sum): no
//!   verdict, the next sweep tries again;
//! - same positions, same digest: the partition agrees;
//! - same positions, different digests: suspect. Entries a rename hands
//!   over between partitions land without moving any position, so the
//!   same partition is asked again `CONFIRM` later; differing again at
//!   the same positions, it has diverged: the log raises an alert, `ctl
//!   replication` and `coredir_replication_divergences_total` count it,
//!   the log names the entries the two sides disagree on (per entry, its
//!   DN and the head of its hash, `Frame::Hashes`), and the partition is
//!   resynced to the peer (the states, joined into
//!   the peer's; `apply::absorb` rewrites an entry whose stored form
//!   differs from what its state shows). The peer's sender does the same
//!   the other way, so what only the peer holds comes back here.
//!
//! Summing reads one chunk of entries per snapshot and yields between
//! chunks, so a large partition never holds the reactor.

use crate::server::Ctx;
use anyhow::{anyhow, Result};
use serde::{Deserialize, Serialize};
use shards::changelog::{self, Origin};
use shards::digest::{self, Digest};
use shards::entry::Entry;
use shards::store::Store;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// Entries summed per snapshot before yielding.
const CHUNK: usize = 256;
/// The most entries a divergence report lists per partition.
const MAX_LISTED: usize = 100_000;
/// How long after a first difference the partition is asked again.
pub const CONFIRM: Duration = Duration::from_secs(2);

/// A partition's digest at its replication positions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Per origin, the last record of the partition held (those above 0).
    pub positions: Vec<(Origin, u64)>,
    pub digest: String,
}

/// Sums a partition's digest; `None` when its positions moved meanwhile.
pub async fn summarize(ctx: &Ctx, partition: u16) -> Result<Option<Summary>> {
    let m = &ctx.shard.manifest;
    if partition as u32 >= m.partitions {
        return Err(anyhow!("there is no partition {partition}"));
    }
    let store = &ctx.shard.stores[m.owners[partition as usize] as usize];
    let positions = || -> Result<Vec<(Origin, u64)>> {
        let txn = store.read().map_err(|e| anyhow!(e.message))?;
        let mut p = changelog::positions(&txn, partition).map_err(|e| anyhow!(e.message))?;
        p.retain(|&(_, seq)| seq > 0);
        p.sort();
        Ok(p)
    };
    let before = positions()?;
    let mut acc = Digest::default();
    walk(ctx, partition, &mut |_, hash| acc.add(hash)).await?;
    Ok((positions()? == before).then(|| Summary { positions: before, digest: acc.hex() }))
}

/// Visits every entry of a partition with its hash, a chunk per snapshot.
async fn walk(ctx: &Ctx, partition: u16, f: &mut dyn FnMut(&Entry, &[u8; 32])) -> Result<()> {
    let m = &ctx.shard.manifest;
    let store = &ctx.shard.stores[m.owners[partition as usize] as usize];
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

/// Per entry of a partition, its DN (lower case) and the head of its hash,
/// in DN order: what a divergence report compares (at most `MAX_LISTED`).
pub async fn hashes(ctx: &Ctx, partition: u16) -> Result<Vec<(String, String)>> {
    if partition as u32 >= ctx.shard.manifest.partitions {
        return Err(anyhow!("there is no partition {partition}"));
    }
    let mut out = Vec::new();
    walk(ctx, partition, &mut |e, hash| {
        if out.len() < MAX_LISTED {
            out.push((e.dn.to_ascii_lowercase(), hash[..8].iter().map(|b| format!("{b:02x}")).collect()));
        }
    })
    .await?;
    out.sort();
    Ok(out)
}

/// The entries two lists disagree on, said for the log (the first ten).
pub fn differences(ours: &[(String, String)], theirs: &[(String, String)]) -> String {
    let (a, b): (BTreeMap<_, _>, BTreeMap<_, _>) = (ours.iter().cloned().collect(), theirs.iter().cloned().collect());
    let mut said: Vec<String> = Vec::new();
    let dns: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    for dn in dns {
        match (a.get(dn), b.get(dn)) {
            (Some(x), Some(y)) if x != y => said.push(format!("{dn} differs")),
            (Some(_), None) => said.push(format!("{dn} only here")),
            (None, Some(_)) => said.push(format!("{dn} only there")),
            _ => {}
        }
    }
    let n = said.len();
    said.truncate(10);
    match n {
        0 => "no entry differs now".into(),
        n if n > 10 => format!("{} (and {} more)", said.join("; "), n - 10),
        _ => said.join("; "),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Agree,
    /// Either side's positions differ or moved: nothing to say.
    Unsettled,
    Differs,
}

pub fn judge(ours: Option<&Summary>, theirs: Option<&Summary>) -> Verdict {
    match (ours, theirs) {
        (Some(a), Some(b)) if a.positions == b.positions => match a.digest == b.digest {
            true => Verdict::Agree,
            false => Verdict::Differs,
        },
        _ => Verdict::Unsettled,
    }
}

/// The sender's schedule: sweeps, and the suspect being confirmed.
pub struct Checker {
    interval: Option<Duration>,
    partitions: u16,
    /// The next partition of the current sweep (`partitions`: none running).
    next: u16,
    swept: Instant,
    /// A partition that differed once: its positions then, and when.
    suspect: Option<(u16, Vec<(Origin, u64)>, Instant)>,
}

impl Checker {
    /// The first sweep starts one interval from now.
    pub fn new(interval_s: u64, partitions: u32) -> Checker {
        let partitions = partitions as u16;
        let interval = (interval_s > 0).then(|| Duration::from_secs(interval_s));
        Checker { interval, partitions, next: partitions, swept: Instant::now(), suspect: None }
    }

    /// The partition to check now, if any.
    pub fn due(&mut self) -> Option<u16> {
        let interval = self.interval?;
        if let Some((p, _, at)) = &self.suspect {
            if at.elapsed() >= CONFIRM {
                return Some(*p);
            }
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

    /// Takes a partition's verdict at our positions; true when it has
    /// diverged for sure (differed twice, `CONFIRM` apart, at the same
    /// positions): the caller resyncs it.
    pub fn diverged(&mut self, partition: u16, verdict: Verdict, positions: &[(Origin, u64)]) -> bool {
        let same_suspect = matches!(&self.suspect, Some((p, at, _)) if *p == partition && at == positions);
        match verdict {
            Verdict::Differs if same_suspect => {
                let confirmed = self.suspect.as_ref().is_some_and(|(_, _, t)| t.elapsed() >= CONFIRM);
                if confirmed {
                    self.suspect = None;
                }
                confirmed
            }
            Verdict::Differs => {
                self.suspect = Some((partition, positions.to_vec(), Instant::now()));
                false
            }
            _ => {
                if self.suspect.as_ref().is_some_and(|(p, _, _)| *p == partition) {
                    self.suspect = None;
                }
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(seq: u64, digest: &str) -> Summary {
        Summary { positions: vec![(Origin { sid: 1, incarnation: 1 }, seq)], digest: digest.into() }
    }

    #[test]
    fn only_the_same_positions_give_a_verdict() {
        let (a, b) = (summary(3, "aa"), summary(3, "bb"));
        assert_eq!(judge(Some(&a), Some(&a.clone())), Verdict::Agree);
        assert_eq!(judge(Some(&a), Some(&b)), Verdict::Differs);
        assert_eq!(judge(Some(&a), Some(&summary(4, "bb"))), Verdict::Unsettled);
        assert_eq!(judge(None, Some(&b)), Verdict::Unsettled);
    }

    #[test]
    fn differences_name_the_entries() {
        let l = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
        };
        let ours = l(&[("a", "1"), ("b", "2"), ("c", "3")]);
        let theirs = l(&[("b", "2"), ("c", "4"), ("d", "5")]);
        assert_eq!(differences(&ours, &theirs), "a only here; c differs; d only there");
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

    #[test]
    fn a_difference_counts_once_confirmed_at_the_same_positions() {
        let mut c = Checker::new(3600, 3);
        let at = summary(3, "").positions;
        assert!(!c.diverged(1, Verdict::Differs, &at));
        // Asked again too soon, or at other positions: not yet.
        assert!(!c.diverged(1, Verdict::Differs, &at));
        c.suspect.as_mut().unwrap().2 -= CONFIRM;
        assert_eq!(c.due(), Some(1));
        assert!(c.diverged(1, Verdict::Differs, &at));
        assert!(c.suspect.is_none());
        // Agreeing clears a suspect.
        assert!(!c.diverged(2, Verdict::Differs, &at));
        assert!(!c.diverged(2, Verdict::Agree, &at));
        assert!(c.suspect.is_none());
        // Moved positions start over.
        assert!(!c.diverged(2, Verdict::Differs, &at));
        c.suspect.as_mut().unwrap().2 -= CONFIRM;
        assert!(!c.diverged(2, Verdict::Differs, &summary(4, "").positions));
    }
}
