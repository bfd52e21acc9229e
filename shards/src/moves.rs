//! Moving an entry's replicated state between partitions: modify-DN in
//! mirror mode.
//!
//! DNs place entries in partitions, and an entry's `merge::EntryState`
//! lives in the partition of the DN it is shown at, with the entry, so that
//! every local write stays one owner transaction. A modify-DN to a DN of
//! another partition is logged once, as a `Change::Rename` in the old DN's
//! partition (where the peer's copy of the entry is); then, on each server,
//! the old partition keeps the state (with its new DN, so later records
//! that still name the old DN find it) and hands a copy to the new one.
//!
//! The hand-over is a parcel: the state, written to the `meta` tree under
//! `O` + source partition + target partition + entryUUID in the same commit
//! as the change that calls for it, then joined (`EntryState::join`) into
//! the target partition's state by its owner (`WriteOp::Absorb`), and only
//! then removed (`WriteOp::Unbox`, if no newer state replaced it). A crash
//! in between leaves the parcel for the next `deliver`; joining twice is
//! harmless. A join that changes the target's state posts parcels in turn
//! to the partitions of the DNs it replaced, so that a server holding the
//! entry at the loser of two concurrent renames learns of the winner. Joins
//! only grow states, so the parcels run out.
//!
//! Applying a parcel or a record hands back the entry images before and
//! after (`write::Images`); `count_children` turns them into child counts
//! of the parents, which may live on any shard.

use crate::dn::Dn;
use crate::error::{Error, Result};
use crate::merge::EntryState;
use crate::shard::Shard;
use crate::store::{ReadTxn, Tree, WriteTxn};
use crate::write::{Images, Parent, WriteOp};
use std::collections::HashMap;
use std::rc::Rc;

const OUTBOX: u8 = b'O';

fn parcel_key(source: u16, target: u16, uuid: &[u8; 16]) -> [u8; 21] {
    let mut k = [OUTBOX; 21];
    k[1..3].copy_from_slice(&source.to_be_bytes());
    k[3..5].copy_from_slice(&target.to_be_bytes());
    k[5..].copy_from_slice(uuid);
    k
}

/// The source partition of a parcel's `meta` key.
pub fn parcel_partition(key: &[u8]) -> Option<u16> {
    match key {
        [OUTBOX, a, b, _, _, ..] if key.len() == 21 => Some(u16::from_be_bytes([*a, *b])),
        _ => None,
    }
}

/// Posts `state` from `source` to every other partition among `targets`.
pub fn post<T: WriteTxn>(
    txn: &mut T,
    source: u16,
    targets: &[Option<u16>],
    uuid: &[u8; 16],
    state: &EntryState,
) -> Result<()> {
    let mut buf = Vec::new();
    for (i, target) in targets.iter().enumerate() {
        let Some(target) = *target else { continue };
        if target == source || targets[..i].contains(&Some(target)) {
            continue;
        }
        if buf.is_empty() {
            crate::merge::encode_state(state, &mut buf);
        }
        txn.put(Tree::Meta, &parcel_key(source, target, uuid), &buf)?;
    }
    Ok(())
}

/// A state on its way to another partition.
#[derive(Debug, Clone)]
pub struct Parcel {
    pub key: Vec<u8>,
    pub target: u16,
    pub uuid: [u8; 16],
    pub state: Vec<u8>,
}

/// Every parcel a store holds.
pub fn pending<T: ReadTxn>(txn: &T) -> Result<Vec<Parcel>> {
    let mut out = Vec::new();
    txn.scan(Tree::Meta, &[OUTBOX], &[OUTBOX], &mut |k, v| {
        if parcel_partition(k).is_some() {
            out.push(Parcel {
                key: k.to_vec(),
                target: u16::from_be_bytes([k[3], k[4]]),
                uuid: k[5..21].try_into().expect("16 bytes"),
                state: v.to_vec(),
            });
        }
        true
    })?;
    Ok(out)
}

/// Removes a delivered parcel, unless a newer state took its place.
pub fn unbox<T: WriteTxn>(txn: &mut T, key: &[u8], state: &[u8]) -> Result<()> {
    if txn.get(Tree::Meta, key)? == Some(state) {
        txn.delete(Tree::Meta, key)?;
    }
    Ok(())
}

/// Delivers every parcel of every store, and those the deliveries post in
/// turn (a few rounds; any left wait for the next call). `is_top` says
/// which DNs have no parent to count (the root and the suffixes).
///
/// A round's parcels go side by side, so that each owner joins them in
/// one group commit (a subtree's move posts one per entry; one by one,
/// three synced commits each, 150 entries took seconds): every parcel is
/// joined, then the child counts raised and lowered, then the parcels
/// removed. One entry's parcels (to several partitions) are joined in
/// turn.
pub async fn deliver(shard: &Rc<Shard>, is_top: &dyn Fn(&Dn) -> bool) -> Result<()> {
    for _round in 0..4 {
        let mut by_entry: HashMap<[u8; 16], Vec<(usize, Parcel)>> = HashMap::new();
        for owner in 0..shard.stores.len() {
            for p in pending(&shard.stores.read(owner)?)? {
                by_entry.entry(p.uuid).or_default().push((owner, p));
            }
        }
        if by_entry.is_empty() {
            break;
        }
        let (mut images, mut delivered, mut failed) = (Vec::new(), Vec::new(), None);
        let entries: Vec<_> = by_entry.into_values().collect();
        for wave in entries.chunks(WAVE) {
            let joins: Vec<_> = wave.iter().map(|p| glommio::spawn_local(join(shard.clone(), p.clone()))).collect();
            for j in joins {
                let (got, done, err) = j.await;
                images.extend(got);
                delivered.extend(done);
                failed = failed.or(err);
            }
        }
        count_children(shard, images.into_iter(), is_top).await;
        for wave in delivered.chunks(WAVE) {
            let unboxes: Vec<_> = wave
                .iter()
                .map(|(owner, p): &(usize, Parcel)| {
                    let (s, owner, op) =
                        (shard.clone(), *owner, WriteOp::Unbox { key: p.key.clone(), state: p.state.clone() });
                    glommio::spawn_local(async move { s.submit_to(owner, op).await })
                })
                .collect();
            for u in unboxes {
                failed = failed.or(u.await.err());
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
    }
    Ok(())
}

/// How many entries' parcels are joined (or removed) side by side: enough
/// for full group commits, few enough that a subtree's move does not
/// queue thousands of writes at once.
const WAVE: usize = 256;

/// Joins one entry's parcels into their target partitions, in turn: the
/// images of each join, the parcels joined, and the first failure (the
/// parcels after it wait for the next `deliver`).
async fn join(shard: Rc<Shard>, parcels: Vec<(usize, Parcel)>) -> (Vec<Images>, Vec<(usize, Parcel)>, Option<Error>) {
    let (mut images, mut done) = (Vec::new(), Vec::new());
    for (owner, p) in parcels {
        let Some(state) = crate::merge::decode_state(&p.state) else {
            return (images, done, Some(Error::other("a parcel of replication state is corrupt")));
        };
        let op = WriteOp::Absorb { partition: p.target, uuid: p.uuid, state: Box::new(state) };
        match shard.submit_for(shard.manifest.owner_of_partition(p.target as u32), op).await {
            Ok(got) => images.extend(got.map(|b| *b)),
            Err(e) => return (images, done, Some(e)),
        }
        done.push((owner, p));
    }
    (images, done, None)
}

/// Raises and lowers the child counts of the parents an entry left and
/// joined, summed per parent: one write per parent. A parent not shown
/// yet is counted all the same (`WriteOp::Tally`): its own record may
/// come later, from another partition.
pub async fn count_children(shard: &Rc<Shard>, images: impl Iterator<Item = Images>, is_top: &dyn Fn(&Dn) -> bool) {
    let mut counts: HashMap<Vec<u8>, (Parent, i64)> = HashMap::new();
    let parent = |e: &Option<crate::entry::Entry>| {
        let dn = e.as_ref().and_then(|e| Dn::parse(&e.dn).ok());
        dn.filter(|d| !d.is_root() && !is_top(d)).map(|d| Parent::of(&d))
    };
    for images in images {
        let (was, now) = (parent(&images.before), parent(&images.after));
        if was.as_ref().map(|p| &p.key) != now.as_ref().map(|p| &p.key) {
            for (p, delta) in was.map(|p| (p, -1)).into_iter().chain(now.map(|p| (p, 1))) {
                counts.entry(p.key.clone()).or_insert((p, 0)).1 += delta;
            }
        }
    }
    let updates: Vec<_> = counts
        .into_values()
        .filter(|(_, delta)| *delta != 0)
        .map(|(parent, delta)| {
            // Side by side, so that one group commit takes them all.
            let s = shard.clone();
            glommio::spawn_local(async move {
                let owner = s.owner_of(&parent.key);
                if let Err(e) = s.submit_to(owner, WriteOp::Tally { parent: parent.key, delta }).await {
                    eprintln!("coredir: replication: counting children: {}", e.message);
                }
            })
        })
        .collect();
    for u in updates {
        u.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::csn::Csn;
    use crate::store::lmdb::LmdbStore;
    use crate::store::{Store, SyncMode};

    fn state(dn: &str, us: u64) -> EntryState {
        let csn = Csn { phys_us: us, logical: 0, sid: 1, partition: 0 };
        EntryState { created: csn, dn: Some((dn.into(), csn)), ..EntryState::default() }
    }

    /// A parcel goes once to each other partition named, none to its own;
    /// each names its source and target and carries the state whole.
    #[test]
    fn a_state_is_posted_once_to_each_other_partition() {
        let dir = tempfile::tempdir().unwrap();
        let store = LmdbStore::open(dir.path(), SyncMode::Never, 1 << 20).unwrap();
        let uuid = [7u8; 16];
        let sent = state("cn=a,dc=x", 10);
        let mut txn = store.write().unwrap();
        post(&mut txn, 4, &[Some(3), Some(4), Some(3), None, Some(5)], &uuid, &sent).unwrap();
        txn.commit().unwrap();
        let parcels = pending(&store.read().unwrap()).unwrap();
        let targets: Vec<u16> = parcels.iter().map(|p| p.target).collect();
        assert_eq!(targets, [3, 5]);
        for p in &parcels {
            assert_eq!(parcel_partition(&p.key), Some(4));
            assert_eq!(p.uuid, uuid);
            assert_eq!(crate::merge::decode_state(&p.state), Some(sent.clone()));
        }
    }

    /// A delivered parcel is removed, unless a newer state was posted in
    /// its place meanwhile: that one is delivered in turn.
    #[test]
    fn unboxing_keeps_a_parcel_replaced_since() {
        let dir = tempfile::tempdir().unwrap();
        let store = LmdbStore::open(dir.path(), SyncMode::Never, 1 << 20).unwrap();
        let uuid = [9u8; 16];
        let post_one = |s: &EntryState| {
            let mut txn = store.write().unwrap();
            post(&mut txn, 1, &[Some(2)], &uuid, s).unwrap();
            txn.commit().unwrap();
            pending(&store.read().unwrap()).unwrap().remove(0)
        };
        let unbox_one = |p: &Parcel| {
            let mut txn = store.write().unwrap();
            unbox(&mut txn, &p.key, &p.state).unwrap();
            txn.commit().unwrap();
            pending(&store.read().unwrap()).unwrap().len()
        };
        let old = post_one(&state("cn=a,dc=x", 10));
        let new = post_one(&state("cn=b,dc=x", 20));
        assert_eq!(old.key, new.key);
        assert_eq!(unbox_one(&old), 1, "a newer state took the old parcel's place");
        assert_eq!(unbox_one(&new), 0);
    }
}
