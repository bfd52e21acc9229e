//! Anti-entropy digests: what a partition shows, summed so that two
//! servers showing the same entries get the same digest, whatever order
//! the entries were written in (mirror mode's divergence check,
//! `src/verify.rs`).
//!
//! An entry's hash covers what a client reads of it: its DN (normalized),
//! and every attribute (the name folded to lower case) with its values,
//! both sorted, since neither order means anything in LDAP. Left out are
//! what servers keep apart by design: entry ids, child counts (counted
//! from the `children` tree), and entry states (each server trims
//! tombstones at its own pace). A repair compares entries the same way
//! (`apply::absorb`), so what the check reports is what a resync mends.
//!
//! A partition's digest is the sum of its entries' hashes in four 64-bit
//! lanes: commutative, and unlike XOR, no two equal hashes cancel.

use crate::dn::Dn;
use crate::entry::Entry;
use crate::error::Result;
use crate::store::{ReadTxn, Tree};
use sha2::{Digest as _, Sha256};

/// A partition's digest (or a part of one, while it is being summed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Digest([u64; 4]);

impl Digest {
    pub fn add(&mut self, hash: &[u8; 32]) {
        for (lane, chunk) in self.0.iter_mut().zip(hash.chunks_exact(8)) {
            *lane = lane.wrapping_add(u64::from_be_bytes(chunk.try_into().expect("8 bytes")));
        }
    }

    /// 64 hex digits: what the channel carries and the log shows.
    pub fn hex(&self) -> String {
        self.0.iter().map(|l| format!("{l:016x}")).collect()
    }
}

/// The hash of what an entry shows (see the module's text).
pub fn entry_hash(entry: &Entry) -> Result<[u8; 32]> {
    let mut h = Sha256::new();
    let piece = |h: &mut Sha256, b: &[u8]| {
        h.update((b.len() as u64).to_be_bytes());
        h.update(b);
    };
    piece(&mut h, &Dn::parse(&entry.dn)?.key());
    let mut attrs: Vec<(String, Vec<&[u8]>)> = entry
        .attrs
        .iter()
        .map(|a| {
            let mut vals: Vec<&[u8]> = a.vals.iter().map(Vec::as_slice).collect();
            vals.sort_unstable();
            (a.name.to_ascii_lowercase(), vals)
        })
        .collect();
    attrs.sort_unstable();
    h.update((attrs.len() as u64).to_be_bytes());
    for (name, vals) in attrs {
        piece(&mut h, name.as_bytes());
        h.update((vals.len() as u64).to_be_bytes());
        for v in vals {
            piece(&mut h, v);
        }
    }
    Ok(h.finalize().into())
}

/// Whether two entries (or their absence) show the same.
pub fn same(a: Option<&Entry>, b: Option<&Entry>) -> Result<bool> {
    Ok(match (a, b) {
        (Some(a), Some(b)) => entry_hash(a)? == entry_hash(b)?,
        (a, b) => a.is_none() && b.is_none(),
    })
}

/// Visits at most `limit` entries of a partition with their hashes, in
/// id order from the id `from` (the partition's first when `None`); the id
/// to go on from, when entries remain. Entries of partition p have ids in
/// `[p << 48, (p + 1) << 48)` (`write::insert`).
pub fn visit<T: ReadTxn>(
    txn: &T,
    partition: u16,
    from: Option<[u8; 8]>,
    limit: usize,
    f: &mut dyn FnMut(&Entry, &[u8; 32]),
) -> Result<Option<[u8; 8]>> {
    let first = from.unwrap_or(((partition as u64) << 48).to_be_bytes());
    let end = ((partition as u64 + 1) << 48).to_be_bytes();
    let (mut taken, mut next, mut failed) = (0, None, None);
    txn.scan(Tree::Id2entry, &[], &first, &mut |k, v| {
        if k >= &end[..] {
            return false;
        }
        if taken == limit {
            next = k.try_into().ok();
            return false;
        }
        taken += 1;
        match Entry::decode(v).and_then(|e| Ok((entry_hash(&e)?, e))) {
            Ok((hash, e)) => f(&e, &hash),
            Err(e) => failed = Some(e),
        }
        failed.is_none()
    })?;
    match failed {
        Some(e) => Err(e),
        None => Ok(next),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_and_spelling_mean_nothing_values_do() {
        let a = Entry::of("uid=a,dc=example,dc=com", &[("cn", &["x", "y"]), ("sn", &["s"])]);
        let b = Entry::of("UID=a, dc=Example,dc=com", &[("SN", &["s"]), ("cn", &["y", "x"])]);
        assert_eq!(entry_hash(&a).unwrap(), entry_hash(&b).unwrap());
        let c = Entry::of("uid=a,dc=example,dc=com", &[("cn", &["x", "z"]), ("sn", &["s"])]);
        assert_ne!(entry_hash(&a).unwrap(), entry_hash(&c).unwrap());
        // A value moved to another attribute is a difference.
        let d = Entry::of("uid=a,dc=example,dc=com", &[("cn", &["x"]), ("sn", &["s", "y"])]);
        assert_ne!(entry_hash(&a).unwrap(), entry_hash(&d).unwrap());
        assert!(same(None, None).unwrap() && !same(Some(&a), None).unwrap());
    }

    #[test]
    fn the_sum_is_commutative_and_counts_twice() {
        let (h1, h2) = ([1u8; 32], [0xffu8; 32]);
        let (mut x, mut y, mut z) = (Digest::default(), Digest::default(), Digest::default());
        x.add(&h1);
        x.add(&h2);
        y.add(&h2);
        y.add(&h1);
        assert_eq!(x, y);
        z.add(&h1);
        z.add(&h1);
        assert_ne!(z, Digest::default());
    }
}
