//! Change capture for mirror mode: every change an owner commits, while
//! replication is on, also leaves in the same transaction
//! - a `merge::Record` in the `changelog` tree, under (partition, origin,
//!   sequence number), the origin being the server id and its incarnation
//!   (raised by a restore) and the sequence dense per (origin, partition)
//!   so that a receiver sees gaps;
//! - the entry's `merge::EntryState` in the `state` tree, under
//!   (partition, entryUUID), tombstones included.
//!
//! A record is only ever shipped once its commit is durable, so a peer
//! never holds a change this server lost. Keys begin with the partition so
//! that backups and resharding move them with their partition, like the
//! entry ids of `id2entry`. The `meta` keys kept here do the same:
//! `S` + partition -> the next local sequence number, `R` + partition +
//! origin -> the highest sequence number held from that origin (the
//! replica update vector; records of every origin are kept, so a server
//! can hand a restored peer back the changes it lost).

use crate::contexts::Contexts;
use crate::csn::Csn;
use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::merge::{decode_state, encode_state, state_of_existing, uuid_of};
use crate::merge::{Change, EntryState, Record};
use crate::store::{ReadTxn, Store, Tree, WriteTxn};
use crate::write::be_u64;
use std::collections::BTreeMap;

/// Where a change was first made: a server and its incarnation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub struct Origin {
    pub sid: u16,
    pub incarnation: u32,
}

impl Origin {
    fn bytes(self) -> [u8; 6] {
        let mut b = [0u8; 6];
        b[..2].copy_from_slice(&self.sid.to_be_bytes());
        b[2..].copy_from_slice(&self.incarnation.to_be_bytes());
        b
    }

    fn from_bytes(b: &[u8]) -> Option<Origin> {
        Some(Origin {
            sid: u16::from_be_bytes(b.get(..2)?.try_into().ok()?),
            incarnation: u32::from_be_bytes(b.get(2..6)?.try_into().ok()?),
        })
    }
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}#{}", self.sid, self.incarnation)
    }
}

/// The changelog key of an origin's `seq`th record in a partition; its
/// first `LOG_PREFIX` bytes name (partition, origin).
pub fn log_key(partition: u16, origin: Origin, seq: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..2].copy_from_slice(&partition.to_be_bytes());
    k[2..8].copy_from_slice(&origin.bytes());
    k[8..].copy_from_slice(&seq.to_be_bytes());
    k
}

pub const LOG_PREFIX: usize = 8;

pub(crate) fn state_key(partition: u16, uuid: &[u8; 16]) -> [u8; 18] {
    let mut k = [0u8; 18];
    k[..2].copy_from_slice(&partition.to_be_bytes());
    k[2..].copy_from_slice(uuid);
    k
}

/// `C` + partition + server id -> the newest CSN of that server the
/// partition has had whose record is no longer held: trimmed, or covered
/// by a resync's states instead of records. With the last record of each
/// stream it makes contextCSN (`newest`), which must never go back.
fn newest_key(partition: u16, sid: u16) -> [u8; 5] {
    let (p, s) = (partition.to_be_bytes(), sid.to_be_bytes());
    [b'C', p[0], p[1], s[0], s[1]]
}

/// Notes CSNs a partition has had without their records (`newest_key`).
pub fn note_newest<T: WriteTxn>(txn: &mut T, partition: u16, csns: &[Csn]) -> Result<()> {
    for csn in csns {
        let key = newest_key(partition, csn.sid);
        if txn.get(Tree::Meta, &key)?.and_then(Csn::from_bytes).is_none_or(|had| had < *csn) {
            txn.put(Tree::Meta, &key, &csn.to_bytes())?;
        }
    }
    Ok(())
}

/// Per server id, the newest CSN of its changes a partition has had (all
/// partitions of the store for `None`): the last record of each stream, or
/// what was noted when records went (`note_newest`). contextCSN, as slapd
/// keeps it on the suffix entry.
pub fn newest<T: ReadTxn>(txn: &T, partition: Option<u16>) -> Result<Vec<Csn>> {
    let mut by_sid: BTreeMap<u16, Csn> = BTreeMap::new();
    let mut saw = |csn: Csn| {
        let slot = by_sid.entry(csn.sid).or_insert(csn);
        *slot = (*slot).max(csn);
    };
    let prefix = match partition {
        Some(p) => [b'C', p.to_be_bytes()[0], p.to_be_bytes()[1]].to_vec(),
        None => b"C".to_vec(),
    };
    txn.scan(Tree::Meta, &prefix, &prefix, &mut |_, v| {
        if let Some(csn) = Csn::from_bytes(v) {
            saw(csn);
        }
        true
    })?;
    for (p, o, first, last) in streams(txn)? {
        if first > last || partition.is_some_and(|want| want != p) {
            continue;
        }
        if let Some(csn) = record_at(txn, p, o, last)?.and_then(record_csn) {
            saw(csn);
        }
    }
    Ok(by_sid.into_values().collect())
}

/// `T` + partition -> the time of the newest record trimmed.
fn trim_key(partition: u16) -> [u8; 3] {
    let p = partition.to_be_bytes();
    [b'T', p[0], p[1]]
}

/// `meta` key: since when (µs) this store has kept tombstones without a
/// break (capture on at every start since).
const CAPTURE_SINCE: &[u8] = b"capture_since";

/// At start: notes in `store` when capture began, or forgets it when
/// capture is off (deletes then leave no tombstones).
pub fn note_capture<S: Store>(store: &S, on: bool, now_us: u64) -> Result<()> {
    let mut txn = store.write()?;
    match (on, txn.get(Tree::Meta, CAPTURE_SINCE)?.is_some()) {
        (true, false) => txn.put(Tree::Meta, CAPTURE_SINCE, &now_us.to_be_bytes())?,
        (false, true) => txn.delete(Tree::Meta, CAPTURE_SINCE).map(|_| ())?,
        _ => {}
    }
    txn.commit()
}

/// Whether this store holds the tombstone of every delete made since
/// `since_us`: capture was on since before, and no record since was trimmed.
pub fn covers<T: ReadTxn>(txn: &T, since_us: u64) -> Result<bool> {
    let Some(from) = txn.get(Tree::Meta, CAPTURE_SINCE)?.map(be_u64) else { return Ok(false) };
    let mut trimmed = 0;
    txn.scan(Tree::Meta, b"T", b"T", &mut |k, v| {
        if k.len() == 3 {
            trimmed = trimmed.max(be_u64(v));
        }
        true
    })?;
    Ok(from <= since_us && trimmed < since_us)
}

fn seq_key(partition: u16) -> [u8; 3] {
    let p = partition.to_be_bytes();
    [b'S', p[0], p[1]]
}

pub fn ruv_key(partition: u16, origin: Origin) -> [u8; 9] {
    let mut k = [b'R'; 9];
    k[1..3].copy_from_slice(&partition.to_be_bytes());
    k[3..].copy_from_slice(&origin.bytes());
    k
}

/// `meta` key: the last record of an origin's stream of a partition the
/// peer was known to hold, saved as the sender trims (`note_held`): what
/// the backlog is counted against after a restart, before the peer is
/// reached again.
fn peer_key(partition: u16, origin: Origin) -> [u8; 9] {
    let mut k = ruv_key(partition, origin);
    k[0] = b'A';
    k
}

pub fn note_held<T: WriteTxn>(txn: &mut T, partition: u16, origin: Origin, seq: u64) -> Result<()> {
    let key = peer_key(partition, origin);
    if txn.get(Tree::Meta, &key)?.map_or(0, be_u64) < seq {
        txn.put(Tree::Meta, &key, &seq.to_be_bytes())?;
    }
    Ok(())
}

/// What `note_held` saved in this store: (partition, origin, seq).
pub fn peer_held<T: ReadTxn>(txn: &T) -> Result<Vec<(u16, Origin, u64)>> {
    let mut out = Vec::new();
    txn.scan(Tree::Meta, b"A", b"A", &mut |k, v| {
        if let (9, Some(o)) = (k.len(), k.get(3..).and_then(Origin::from_bytes)) {
            out.push((u16::from_be_bytes([k[1], k[2]]), o, be_u64(v)));
        }
        true
    })?;
    Ok(out)
}

/// Every origin a store holds records of (its vector's keys).
pub fn origins<T: ReadTxn>(txn: &T) -> Result<Vec<Origin>> {
    let mut out = Vec::new();
    txn.scan(Tree::Meta, b"R", b"R", &mut |k, _| {
        if let Some(o) = k.get(3..).and_then(Origin::from_bytes) {
            if !out.contains(&o) {
                out.push(o);
            }
        }
        true
    })?;
    Ok(out)
}

/// After a restore: the records this server made before it are marked as
/// held (so a peer's copies of them are duplicates, and the ones the
/// backup missed are not), and numbering starts again for `new`.
/// Commits and syncs it in `store`.
pub fn new_incarnation<S: Store>(store: &S, partitions: u16, old: Origin) -> Result<()> {
    let mut txn = store.write()?;
    mark_incarnation(&mut txn, partitions, old)?;
    txn.commit()?;
    store.sync()
}

fn mark_incarnation<T: WriteTxn>(txn: &mut T, partitions: u16, old: Origin) -> Result<()> {
    for p in 0..partitions {
        let next = next_seq(txn, p)?;
        if next == 1 {
            continue;
        }
        txn.delete(Tree::Meta, &seq_key(p))?;
        // A backup of another server (a new mirror seeded from its peer)
        // holds no record of this one: nothing to mark.
        let mut own = false;
        txn.scan(Tree::Changelog, &log_key(p, old, 0)[..LOG_PREFIX], b"", &mut |_, _| {
            own = true;
            false
        })?;
        if own {
            txn.put(Tree::Meta, &ruv_key(p, old), &(next - 1).to_be_bytes())?;
        }
    }
    Ok(())
}

/// The partition a `meta` key of this module belongs to, if it is one.
pub fn meta_partition(key: &[u8]) -> Option<u16> {
    match key {
        [b'S' | b'R' | b'C', a, b, ..] => Some(u16::from_be_bytes([*a, *b])),
        [b'T', a, b] => Some(u16::from_be_bytes([*a, *b])),
        _ => crate::contexts::is_note(key).or_else(|| crate::moves::parcel_partition(key)),
    }
}

pub fn load_state<T: ReadTxn + ?Sized>(txn: &T, partition: u16, uuid: &[u8; 16]) -> Result<Option<EntryState>> {
    match txn.get(Tree::State, &state_key(partition, uuid))? {
        None => Ok(None),
        Some(b) => decode_state(b).map(Some).ok_or_else(|| Error::other("a replication state record is corrupt")),
    }
}

/// Whether any partition keeps a state (live or tombstone) for this
/// entryUUID: one read transaction per store.
pub fn uuid_in_use(manifest: &crate::manifest::Manifest, stores: &crate::Stores, uuid: &[u8; 16]) -> Result<bool> {
    for store in 0..stores.len() {
        let txn = stores.read(store)?;
        let mine = manifest.owners.iter().enumerate().filter(|(_, o)| **o as usize == store);
        for (partition, _) in mine {
            if txn.get(Tree::State, &state_key(partition as u16, uuid))?.is_some() {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// Trims an origin's records of a partition: those up to `upto` (what the
/// peer holds) and older than `older_than_us`; a trimmed delete takes its
/// tombstone along (tombstones live as long as the changelog), unless
/// `keep_tombstones` (a trim the size cap forced: the peer may not hold
/// the delete, and a resync must carry it). Returns the number of records
/// removed.
/// The CSN of a stored change record (`Record::encode` puts it after the
/// format byte), without decoding the rest.
pub fn record_csn(stored: &[u8]) -> Option<Csn> {
    stored.get(1..17).and_then(Csn::from_bytes)
}

pub fn trim<T: WriteTxn>(
    txn: &mut T,
    partition: u16,
    origin: Origin,
    upto: u64,
    older_than_us: u64,
    keep_tombstones: bool,
) -> Result<u64> {
    let start = log_key(partition, origin, 1);
    let mut gone: Vec<(Vec<u8>, Option<[u8; 16]>)> = Vec::new();
    txn.scan(Tree::Changelog, &start[..LOG_PREFIX], &start, &mut |k, v| {
        let seq = be_u64(&k[LOG_PREFIX..]);
        let csn = record_csn(v).unwrap_or_default();
        // Sequence order is CSN order: the first too new ends it.
        if seq > upto || csn.phys_us >= older_than_us {
            return false;
        }
        let deleted = Record::decode(v).filter(|r| r.change == Change::Delete && !keep_tombstones).map(|r| r.uuid);
        gone.push((k.to_vec(), deleted));
        true
    })?;
    // Changes before this time may have lost their tombstones: a syncrepl
    // consumer whose cookie is older gets the present phase (`covers`).
    if let Some((key, _)) = gone.last() {
        let trimmed = txn.get(Tree::Changelog, key)?.and_then(record_csn);
        note_newest(txn, partition, trimmed.as_slice())?;
        let tkey = trim_key(partition);
        let before = txn.get(Tree::Meta, &tkey)?.map_or(0, be_u64);
        if let Some(csn) = trimmed.filter(|c| c.phys_us > before) {
            txn.put(Tree::Meta, &tkey, &csn.phys_us.to_be_bytes())?;
        }
    }
    for (key, deleted) in &gone {
        txn.delete(Tree::Changelog, key)?;
        if let Some(uuid) = deleted {
            if load_state(txn, partition, uuid)?.is_some_and(|s| s.deleted.is_some()) {
                txn.delete(Tree::State, &state_key(partition, uuid))?;
            }
        }
    }
    Ok(gone.len() as u64)
}

/// One origin's records of a partition held in a store: (partition,
/// origin, first sequence number held, last); `first > last` when none
/// are left.
pub type Stream = (u16, Origin, u64, u64);

/// Every stream of records a store holds (from its vector's keys).
pub fn streams<T: ReadTxn>(txn: &T) -> Result<Vec<Stream>> {
    let mut held = Vec::new();
    txn.scan(Tree::Meta, b"R", b"R", &mut |k, v| {
        if let (Some(p), Some(o)) = (meta_partition(k), k.get(3..).and_then(Origin::from_bytes)) {
            held.push((p, o, be_u64(v)));
        }
        true
    })?;
    let mut out = Vec::with_capacity(held.len());
    for (p, o, last) in held {
        let mut first = last + 1;
        read_stream(txn, (p, o), 0, &mut |seq, _| {
            first = seq;
            false
        })?;
        out.push((p, o, first, last));
    }
    Ok(out)
}

/// The last sequence number of `origin` this store holds for a partition
/// (the replica update vector's entry; 0 for none).
pub fn held<T: ReadTxn + ?Sized>(txn: &T, partition: u16, origin: Origin) -> Result<u64> {
    Ok(txn.get(Tree::Meta, &ruv_key(partition, origin))?.map_or(0, be_u64))
}

/// Visits the records of one stream (partition, origin) from sequence
/// number `from` on, in order, as (sequence number, stored record), until
/// `visit` returns false.
pub fn read_stream<T: ReadTxn + ?Sized>(
    txn: &T,
    (partition, origin): (u16, Origin),
    from: u64,
    visit: &mut dyn FnMut(u64, &[u8]) -> bool,
) -> Result<()> {
    let start = log_key(partition, origin, from);
    txn.scan(Tree::Changelog, &start[..LOG_PREFIX], &start, &mut |k, v| visit(be_u64(&k[LOG_PREFIX..]), v))
}

/// How many records the changelog holds (a walk of every stream).
pub fn count_records<T: ReadTxn + ?Sized>(txn: &T) -> Result<u64> {
    crate::store::count_keys(txn, Tree::Changelog)
}

/// The stored record at one sequence number of a stream.
pub fn record_at<T: ReadTxn + ?Sized>(txn: &T, partition: u16, origin: Origin, seq: u64) -> Result<Option<&[u8]>> {
    txn.get(Tree::Changelog, &log_key(partition, origin, seq))
}

/// What `states` visits: partition, entryUUID, encoded state; false stops.
pub type StateVisit<'a> = dyn FnMut(u16, [u8; 16], &[u8]) -> bool + 'a;

/// Where a walk of `states` stands: the partition and entryUUID of the
/// last state it visited.
pub type StatePosition = (u16, [u8; 16]);

/// Visits the entry states a store keeps (every partition's, tombstones
/// and the states renames left included) after `after` (from the first
/// when `None`), in order of partition then entryUUID, until `visit`
/// returns false.
pub fn states<T: ReadTxn + ?Sized>(txn: &T, after: Option<StatePosition>, visit: &mut StateVisit<'_>) -> Result<()> {
    let from = after.map(|(p, uuid)| state_key(p, &uuid));
    let from = from.as_ref().map_or(&[][..], |k| &k[..]);
    txn.scan(Tree::State, &[], from, &mut |k, v| match (
        k.get(..2).and_then(|p| <[u8; 2]>::try_from(p).ok()),
        k.get(2..).and_then(|u| u.try_into().ok()),
    ) {
        _ if k == from => true,
        (Some(p), Some(uuid)) => visit(u16::from_be_bytes(p), uuid, v),
        _ => true,
    })
}

/// Per origin, the last record of a partition this store holds: where a
/// resynced peer stands once it has the partition's states.
pub fn positions<T: ReadTxn>(txn: &T, partition: u16) -> Result<Vec<(Origin, u64)>> {
    let mut out = Vec::new();
    let prefix = [b'R', partition.to_be_bytes()[0], partition.to_be_bytes()[1]];
    txn.scan(Tree::Meta, &prefix, &prefix, &mut |k, v| {
        if let Some(o) = k.get(3..).and_then(Origin::from_bytes) {
            out.push((o, be_u64(v)));
        }
        true
    })?;
    Ok(out)
}

/// Moves the vector of a partition up to `positions` (after a resync),
/// noting the newest CSNs the resync's states covered (`note_newest`).
pub fn advance<T: WriteTxn>(txn: &mut T, partition: u16, positions: &[(Origin, u64)], newest: &[Csn]) -> Result<()> {
    note_newest(txn, partition, newest)?;
    for &(origin, seq) in positions {
        let key = ruv_key(partition, origin);
        if txn.get(Tree::Meta, &key)?.map_or(0, be_u64) < seq {
            txn.put(Tree::Meta, &key, &seq.to_be_bytes())?;
        }
    }
    Ok(())
}

/// Every entry state of a partition, encoded: the stored states (the
/// tombstones and the states renames left included) and, for entries
/// written before replication was on, their state as they stand. What a
/// resync sends.
pub fn partition_states<T: ReadTxn>(txn: &T, partition: u16) -> Result<Vec<([u8; 16], Vec<u8>)>> {
    let mut out = Vec::new();
    let prefix = partition.to_be_bytes();
    txn.scan(Tree::State, &prefix, &prefix, &mut |k, v| {
        if let Ok(uuid) = k[2..].try_into() {
            out.push((uuid, v.to_vec()));
        }
        true
    })?;
    let (first, next) = (((partition as u64) << 48).to_be_bytes(), ((partition as u64 + 1) << 48).to_be_bytes());
    let mut stateless = Vec::new();
    txn.scan(Tree::Id2entry, &[], &first, &mut |k, v| {
        if k >= &next[..] {
            return false;
        }
        stateless.push(v.to_vec());
        true
    })?;
    for bytes in stateless {
        let entry = Entry::decode(&bytes)?;
        let Ok(uuid) = uuid_of(&entry) else { continue };
        if txn.get(Tree::State, &state_key(partition, &uuid))?.is_none() {
            let mut buf = Vec::with_capacity(256);
            encode_state(&state_of_existing(&entry), &mut buf);
            out.push((uuid, buf));
        }
    }
    Ok(out)
}

/// The sequence number the next local change of a partition will take.
pub fn next_seq<T: ReadTxn>(txn: &T, partition: u16) -> Result<u64> {
    Ok(txn.get(Tree::Meta, &seq_key(partition))?.map_or(1, be_u64))
}

/// Stores the state and appends the record under this server's next
/// sequence number for the partition.
pub fn capture<T: WriteTxn>(
    txn: &mut T,
    partition: u16,
    clock: &crate::write::Clock,
    rec: &Record,
    state: &EntryState,
) -> Result<u64> {
    let (seq, origin) = (next_seq(txn, partition)?, clock.origin());
    store(txn, partition, (origin, seq), &clock.contexts, rec, state)?;
    txn.put(Tree::Meta, &seq_key(partition), &(seq + 1).to_be_bytes())?;
    // Its own records are held too: a peer handing them back after a
    // reconnection finds them duplicates.
    txn.put(Tree::Meta, &ruv_key(partition, origin), &seq.to_be_bytes())?;
    Ok(seq)
}

/// Stores the state and the record under (partition, origin, seq), and
/// notes its CSN for its naming context's contextCSN (`contexts`).
pub fn store<T: WriteTxn>(
    txn: &mut T,
    partition: u16,
    (origin, seq): (Origin, u64),
    contexts: &Contexts,
    rec: &Record,
    state: &EntryState,
) -> Result<()> {
    crate::contexts::note(txn, contexts, partition, &rec.dn, rec.csn)?;
    let mut buf = Vec::with_capacity(256);
    encode_state(state, &mut buf);
    txn.put(Tree::State, &state_key(partition, &rec.uuid), &buf)?;
    buf.clear();
    rec.encode(&mut buf);
    txn.put(Tree::Changelog, &log_key(partition, origin, seq), &buf)
}
