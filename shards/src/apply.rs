//! Applying a peer's change record on the partition's owner, inside the
//! owner's write transaction (`WriteOp::Replicate`).
//!
//! 1. The replica update vector (`changelog::ruv_key`) says whether the
//!    record was applied already (a duplicate after a reconnection: done)
//!    or whether one is missing before it (a gap: refused, the channel
//!    resumes from the vector).
//! 2. The record's CSN goes through the owner's clock: one too far ahead
//!    is refused (`csn::Hlc::observe`), not adopted.
//! 3. The record is merged into the entry's state and the entry the state
//!    shows replaces what is stored: inserted, rewritten or removed, with
//!    its indexes. The record is logged under its origin, and the vector
//!    moves on, all in the same commit.
//!
//! The parent's child count may live on another shard: the outcome's
//! images (entry before and after) tell the caller which way to count.

use crate::changelog;
use crate::dn::Dn;
use crate::entry::{Entry, EntryView};
use crate::error::{Error, Result};
use crate::index;
use crate::merge::Record;
use crate::store::{Tree, WriteTxn};
use crate::write::{be_u64, insert, Clock, Images, Outcome};
use ldap3_proto::LdapResultCode;

/// Where a receiver stands in an origin's stream of a partition.
pub enum Position {
    /// Applied already.
    Duplicate,
    /// The next one.
    Next,
    /// Records are missing before it: resume from `applied + 1`.
    Gap { applied: u64 },
}

pub fn position<T: WriteTxn>(txn: &T, partition: u16, origin: u16, seq: u64) -> Result<Position> {
    let applied = txn.get(Tree::Meta, &changelog::ruv_key(partition, origin))?.map_or(0, be_u64);
    Ok(match seq {
        s if s <= applied => Position::Duplicate,
        s if s == applied + 1 => Position::Next,
        _ => Position::Gap { applied },
    })
}

#[allow(clippy::too_many_arguments)]
pub fn replicate<T: WriteTxn>(
    txn: &mut T,
    partition_of: &impl Fn(&[u8]) -> u32,
    next_id: &mut u64,
    clock: &mut Clock,
    origin: u16,
    seq: u64,
    rec: &Record,
) -> Outcome {
    let key = Dn::parse(&rec.dn)?.key();
    let partition = partition_of(&key) as u16;
    match position(txn, partition, origin, seq)? {
        Position::Duplicate => return Ok(None),
        Position::Next => {}
        Position::Gap { applied } => {
            return Err(Error::new(
                LdapResultCode::Busy,
                format!("replication gap: record {seq} of server {origin} after {applied}"),
            ))
        }
    }
    clock.hlc.observe(rec.csn).map_err(|skew| Error::unwilling(format!("refused: {skew}")))?;
    let stored = match txn.get(Tree::Dn2id, &key)? {
        Some(id) => {
            let id = id.to_vec();
            let entry = Entry::decode_view(&EntryView::new(txn.get(Tree::Id2entry, &id)?.unwrap_or_default())?)?;
            Some((id, entry))
        }
        None => None,
    };
    let same = stored.as_ref().filter(|(_, e)| changelog::uuid_of(e).ok() == Some(rec.uuid));
    if stored.is_some() && same.is_none() {
        return Err(Error::new(
            LdapResultCode::EntryAlreadyExists,
            format!("replication conflict: {} holds another entry (conflict entries are not resolved yet)", rec.dn),
        ));
    }
    let mut state = match changelog::load_state(txn, partition, &rec.uuid)? {
        Some(s) => s,
        None => same.map(|(_, e)| changelog::state_of_existing(e)).unwrap_or_default(),
    };
    state.merge(rec);
    let shown = changelog::materialize(&state);
    changelog::store(txn, partition, origin, seq, rec, &state)?;
    txn.put(Tree::Meta, &changelog::ruv_key(partition, origin), &seq.to_be_bytes())?;
    let before = stored.map(|(id, e)| (id, e));
    match (&before, &shown) {
        (Some((id, old)), Some(new)) => {
            let mut buf = Vec::with_capacity(256);
            new.encode(&mut buf);
            index::update(txn, old, new, id)?;
            txn.put(Tree::Id2entry, id, &buf)?;
        }
        (Some((id, old)), None) => {
            index::remove(txn, old, id)?;
            txn.delete(Tree::Dn2id, &key)?;
            txn.delete(Tree::Id2entry, id)?;
        }
        (None, Some(new)) => insert(txn, &key, new, partition_of, next_id)?,
        (None, None) => {}
    }
    Ok(Some(Box::new(Images { before: before.map(|(_, e)| e), after: shown })))
}
