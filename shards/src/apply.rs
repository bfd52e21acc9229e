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
//! 4. When the state's DN lies in another partition (a modify-DN, here or
//!    on the peer), the state is posted there too (`moves.rs`), and
//!    `absorb` joins it in on arrival (`WriteOp::Absorb`).
//!
//! The parent's child count may live on another shard: the outcome's
//! images (entry before and after) tell the caller which way to count.

use crate::changelog::{self, Origin};
use crate::digest;
use crate::dn::Dn;
use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::index;
use crate::merge::{self, Change, EntryState, Record};
use crate::moves;
use crate::store::{Tree, WriteTxn};
use crate::write::{be_u64, insert, Clock, Images, Outcome};
use ldap3_proto::LdapResultCode;

/// Where a record arrives in its origin's stream of a partition, against
/// what this store applied of it.
pub enum Arrival {
    /// Applied already.
    Duplicate,
    /// The next one.
    Next,
    /// Records are missing before it: resume from `applied + 1`.
    Gap { applied: u64 },
}

fn arrival<T: WriteTxn>(txn: &T, partition: u16, origin: Origin, seq: u64) -> Result<Arrival> {
    let applied = txn.get(Tree::Meta, &changelog::ruv_key(partition, origin))?.map_or(0, be_u64);
    Ok(match seq {
        s if s <= applied => Arrival::Duplicate,
        s if s == applied + 1 => Arrival::Next,
        _ => Arrival::Gap { applied },
    })
}

#[allow(clippy::too_many_arguments)]
pub fn replicate<T: WriteTxn>(
    txn: &mut T,
    partition_of: &impl Fn(&[u8]) -> u32,
    next_id: &mut u64,
    clock: &mut Clock,
    origin: Origin,
    seq: u64,
    rec: &Record,
) -> Outcome {
    let key = Dn::parse(&rec.dn)?.key();
    let partition = partition_of(&key) as u16;
    match arrival(txn, partition, origin, seq)? {
        Arrival::Duplicate => return Ok(None),
        Arrival::Next => {}
        Arrival::Gap { applied } => {
            return Err(Error::new(
                LdapResultCode::Busy,
                format!("replication gap: record {seq} of origin {origin} after {applied}"),
            ))
        }
    }
    clock.hlc.observe(rec.csn).map_err(|skew| Error::unwilling(format!("refused: {skew}")))?;
    let mut state = current_state(txn, partition, &rec.uuid, Some(&key))?;
    let here = Here { partition_of, partition, known: (&rec.dn, partition) };
    let was = here.home(&state);
    let before = here.shown(txn, &state, &rec.uuid)?;
    state.merge(rec);
    let mut marks = Vec::new();
    let images = settle(txn, &here, next_id, &mut state, &rec.uuid, before, &mut marks)?;
    changelog::store(txn, partition, (origin, seq), &clock.contexts, rec, &state)?;
    txn.put(Tree::Meta, &changelog::ruv_key(partition, origin), &seq.to_be_bytes())?;
    log_marks(txn, partition, clock, marks)?;
    // The partitions that may show the entry: where it was, where it is
    // now, and where the record's rename sends it.
    let to = match &rec.change {
        Change::Rename { to, .. } => here.partition(to),
        _ => None,
    };
    moves::post(txn, partition, &[was, here.home(&state), to], &rec.uuid, &state)?;
    Ok(Some(Box::new(images)))
}

/// Joins a state another partition posted (`moves.rs`), or a resync
/// carried, into this partition's; a join that changes nothing, where the
/// stored entry shows what the state does, ends the hand-over.
pub fn absorb<T: WriteTxn>(
    txn: &mut T,
    partition_of: &impl Fn(&[u8]) -> u32,
    next_id: &mut u64,
    clock: &mut Clock,
    partition: u16,
    uuid: &[u8; 16],
    incoming: &EntryState,
) -> Outcome {
    let here = Here { partition_of, partition, known: ("", partition) };
    // A resync meets entries written before replication was on.
    let key = match incoming.dn.as_ref().filter(|(dn, _)| here.partition(dn) == Some(partition)) {
        Some((dn, _)) => Some(Dn::parse(dn)?.key()),
        None => None,
    };
    let mut state = current_state(txn, partition, uuid, key.as_deref())?;
    let old = state.clone();
    state.join(incoming);
    let before = here.shown(txn, &old, uuid)?;
    // A join that changes nothing ends a hand-over, unless what is stored
    // differs from what the state shows: a resync after the anti-entropy
    // check found the partition different mends it (`digest`).
    if state == old && digest::same(before.as_ref().map(|(_, e)| e), here.entry(&state, uuid).as_ref())? {
        return Ok(None);
    }
    let mut marks = Vec::new();
    let images = settle(txn, &here, next_id, &mut state, uuid, before, &mut marks)?;
    let mut buf = Vec::with_capacity(256);
    crate::merge::encode_state(&state, &mut buf);
    txn.put(Tree::State, &changelog::state_key(partition, uuid), &buf)?;
    crate::contexts::note_state(txn, &clock.contexts, partition, &state)?;
    moves::post(txn, partition, &[here.home(&old), here.home(&state)], uuid, &state)?;
    log_marks(txn, partition, clock, marks)?;
    Ok(Some(Box::new(images)))
}

/// One partition's view of states: an entry is shown here when its DN
/// falls in this partition.
struct Here<'a, P: Fn(&[u8]) -> u32> {
    partition_of: &'a P,
    partition: u16,
    /// A DN whose partition is known already (the record's).
    known: (&'a str, u16),
}

impl<P: Fn(&[u8]) -> u32> Here<'_, P> {
    fn partition(&self, dn: &str) -> Option<u16> {
        if dn == self.known.0 {
            return Some(self.known.1);
        }
        Dn::parse(dn).ok().map(|d| (self.partition_of)(&d.key()) as u16)
    }

    /// The partition of the DN a state gives its entry.
    fn home(&self, state: &EntryState) -> Option<u16> {
        state.dn.as_ref().and_then(|(dn, _)| self.partition(dn))
    }

    /// The entry a state shows, if it shows one in this partition.
    fn entry(&self, state: &EntryState, uuid: &[u8; 16]) -> Option<Entry> {
        (self.home(state) == Some(self.partition)).then(|| crate::merge::materialize(state, uuid)).flatten()
    }

    /// What is stored for a state in this partition, with its id.
    fn shown<T: WriteTxn>(&self, txn: &T, state: &EntryState, uuid: &[u8; 16]) -> Result<Option<(Vec<u8>, Entry)>> {
        if !state.is_live() || self.home(state) != Some(self.partition) {
            return Ok(None);
        }
        let Some(dn) = state.shown_dn(uuid) else { return Ok(None) };
        Ok(stored(txn, &Dn::parse(&dn)?.key())?.filter(|(_, e)| crate::merge::uuid_of(e).ok() == Some(*uuid)))
    }
}

/// A DN conflict decided here: the loser's entryUUID, the DN it lost and
/// its slot.
type Mark = ([u8; 16], String, u32);

/// Logs each conflict decided here as a record of its own
/// (`Change::Conflict`), once the loser's state is stored: the peer may
/// never see both entries live (the winner deleted there before the
/// loser arrived), and must show the loser at the same conflict DN.
fn log_marks<T: WriteTxn>(txn: &mut T, partition: u16, clock: &mut Clock, marks: Vec<Mark>) -> Result<()> {
    if !clock.capture {
        return Ok(());
    }
    for (uuid, lost, slot) in marks {
        let state = changelog::load_state(txn, partition, &uuid)?
            .ok_or_else(|| Error::other("a conflict entry without a state"))?;
        let rec = Record { csn: clock.hlc.tick(partition), uuid, dn: lost, change: Change::Conflict { slot } };
        changelog::capture(txn, partition, clock, &rec, &state)?;
    }
    Ok(())
}

/// Puts what a state shows in this partition in place of what was stored
/// for it (`before`), settling a DN conflict first (noted in `marks`).
fn settle<T: WriteTxn, P: Fn(&[u8]) -> u32>(
    txn: &mut T,
    here: &Here<'_, P>,
    next_id: &mut u64,
    state: &mut EntryState,
    uuid: &[u8; 16],
    before: Option<(Vec<u8>, Entry)>,
    marks: &mut Vec<Mark>,
) -> Result<Images> {
    let mut after = here.entry(state, uuid);
    if let Some(new) = &after {
        let new_key = Dn::parse(&new.dn)?.key();
        let held = stored(txn, &new_key)?.filter(|(_, e)| crate::merge::uuid_of(e).ok() != Some(*uuid));
        if let Some((id, other)) = held {
            let mark = resolve_conflict(txn, here.partition_of, here.partition, state, uuid, (&new_key, &id, &other))?;
            if mark.0 == *uuid {
                after = here.entry(state, uuid);
            }
            marks.push(mark);
        }
    }
    place(txn, here.partition_of, next_id, before.as_ref(), after.as_ref())?;
    Ok(Images { before: before.map(|(_, e)| e), after })
}

/// An entry's state in a partition: the one stored, or, for an entry
/// written before replication was on and stored under `key`, its state as
/// it stands; else an empty one.
fn current_state<T: WriteTxn>(txn: &T, partition: u16, uuid: &[u8; 16], key: Option<&[u8]>) -> Result<EntryState> {
    if let Some(state) = changelog::load_state(txn, partition, uuid)? {
        return Ok(state);
    }
    Ok(match key.map(|k| stored(txn, k)).transpose()?.flatten() {
        Some((_, e)) if crate::merge::uuid_of(&e).ok() == Some(*uuid) => crate::merge::state_of_existing(&e),
        _ => EntryState::default(),
    })
}

/// The entry stored under a DN key, with its id.
fn stored<T: WriteTxn>(txn: &T, key: &[u8]) -> Result<Option<(Vec<u8>, Entry)>> {
    let Some((id, view)) = txn.entry(key)? else { return Ok(None) };
    Ok(Some((id.to_vec(), Entry::decode_view(&view)?)))
}

/// Two entries claim one DN: the later add gives it up, on both servers
/// alike. Either the incoming entry is marked (the caller shows it at its
/// conflict DN), or the stored one is marked and moved now; the mark made.
fn resolve_conflict<T: WriteTxn>(
    txn: &mut T,
    partition_of: &impl Fn(&[u8]) -> u32,
    partition: u16,
    state: &mut EntryState,
    uuid: &[u8; 16],
    (key, id, other): (&[u8], &[u8], &Entry),
) -> Result<Mark> {
    let other_uuid = crate::merge::uuid_of(other)?;
    let mut other_state = match changelog::load_state(txn, partition, &other_uuid)? {
        Some(s) => s,
        None => crate::merge::state_of_existing(other),
    };
    let place = |dn: &str| Dn::parse(dn).ok().map(|d| partition_of(&d.key()));
    let loser = merge::conflict_loser((uuid, state.created), (&other_uuid, other_state.created));
    eprintln!(
        "coredir: replication conflict: {} was added on both servers; entry {} keeps it only on the conflict DN",
        other.dn,
        uuid::Uuid::from_bytes(*loser).hyphenated()
    );
    // The mark names the DN as the loser's own state spells it: what
    // `EntryState::in_conflict` compares (the two may differ in case).
    let own_dn = |s: &EntryState, shown: &str| s.dn.as_ref().map_or(shown.to_string(), |(dn, _)| dn.clone());
    if loser == uuid {
        let lost = own_dn(state, &other.dn);
        let slot = merge::conflict_slot(uuid, &lost, partition as u32, place);
        state.mark_conflict(&lost, slot);
        return Ok((*uuid, lost, slot));
    }
    let lost = own_dn(&other_state, &other.dn);
    let slot = merge::conflict_slot(&other_uuid, &lost, partition as u32, place);
    other_state.mark_conflict(&lost, slot);
    let moved = crate::merge::materialize(&other_state, &other_uuid)
        .ok_or_else(|| Error::other("a conflict entry without content"))?;
    let mut buf = Vec::with_capacity(256);
    crate::merge::encode_state(&other_state, &mut buf);
    txn.put(Tree::State, &changelog::state_key(partition, &other_uuid), &buf)?;
    index::remove(txn, other, id)?;
    txn.delete(Tree::Dn2id, key)?;
    buf.clear();
    moved.encode(&mut buf)?;
    index::add(txn, &moved, id)?;
    txn.put(Tree::Dn2id, &Dn::parse(&moved.dn)?.key(), id)?;
    txn.put(Tree::Id2entry, id, &buf)?;
    Ok((other_uuid, lost, slot))
}

/// Puts the entry a state shows in place of what was stored for it.
fn place<T: WriteTxn>(
    txn: &mut T,
    partition_of: &impl Fn(&[u8]) -> u32,
    next_id: &mut u64,
    before: Option<&(Vec<u8>, Entry)>,
    after: Option<&Entry>,
) -> Result<()> {
    match (before, after) {
        (Some((id, old)), Some(new)) if old.dn == new.dn => {
            let mut buf = Vec::with_capacity(256);
            new.encode(&mut buf)?;
            index::update(txn, old, new, id)?;
            txn.put(Tree::Id2entry, id, &buf)
        }
        (before, after) => {
            if let Some((id, old)) = before {
                index::remove(txn, old, id)?;
                txn.delete(Tree::Dn2id, &Dn::parse(&old.dn)?.key())?;
                txn.delete(Tree::Id2entry, id)?;
            }
            match after {
                Some(new) => insert(txn, &Dn::parse(&new.dn)?.key(), new, partition_of, next_id),
                None => Ok(()),
            }
        }
    }
}
