//! Whole-store copies, tree by tree (`coredir backup`, `restore` and
//! `reshard`): every key goes to the store of the shard that owns its
//! partition under a manifest, found from the DN key (`dn2id`,
//! `children`), from the entry id's top bits (`id2entry`, `index`), or
//! from the partition a key starts with (`changelog`, `state`, the
//! replication positions in `meta`).

use super::{ReadTxn, Store, Tree, WriteTxn, TREES};
use crate::changelog;
use crate::error::Result;
use crate::manifest::Manifest;
use crate::write::be_u64;
use std::sync::Arc;

/// Keys written per transaction while copying.
const BATCH: usize = 20_000;
const NEXT_ID: &[u8] = b"next_id";

/// Copies every key of every tree of `from` into the new stores `to`, each
/// key into its owner's store under `manifest`; `meta`'s next id becomes
/// the largest seen. Returns the number of entries copied.
pub fn copy_stores<S: Store>(from: &[Arc<S>], to: &[Arc<S>], manifest: &Manifest) -> Result<u64> {
    let mut entries = 0u64;
    let mut next_id = 0u64;
    // Room for everything at once: `to` is new and only this thread uses it.
    let total: u64 = from.iter().map(|s| s.size()).sum();
    for store in to {
        // SAFETY: no transaction is open on a store the caller just created.
        unsafe { store.make_room(total) }?;
    }
    for store in from {
        // A running server's store (`ctl backup`) may grow meanwhile: hold it off.
        let _outside = store.outside();
        let txn = store.read()?;
        for tree in TREES {
            let mut pending: Vec<Vec<(Vec<u8>, Vec<u8>)>> = vec![Vec::new(); to.len()];
            let mut failed = None;
            txn.scan(tree, b"", b"", &mut |k, v| {
                if tree == Tree::Meta {
                    if k == NEXT_ID {
                        next_id = next_id.max(be_u64(v));
                    }
                    // Of the rest, only the replication positions go with
                    // their partitions; the clock restarts on its own.
                    if changelog::meta_partition(k).is_none() {
                        return true;
                    }
                }
                if tree == Tree::Id2entry {
                    entries += 1;
                }
                let target = owner(manifest, tree, k);
                pending[target].push((k.to_vec(), v.to_vec()));
                if pending[target].len() >= BATCH {
                    if let Err(e) = write_all(&*to[target], tree, &mut pending[target]) {
                        failed = Some(e);
                        return false;
                    }
                }
                true
            })?;
            if let Some(e) = failed {
                return Err(e);
            }
            for (target, batch) in pending.iter_mut().enumerate() {
                write_all(&*to[target], tree, batch)?;
            }
        }
    }
    for store in to {
        let mut txn = store.write()?;
        txn.put(Tree::Meta, NEXT_ID, &next_id.to_be_bytes())?;
        txn.commit()?;
        store.sync()?;
    }
    Ok(entries)
}

fn write_all<S: Store>(store: &S, tree: Tree, batch: &mut Vec<(Vec<u8>, Vec<u8>)>) -> Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    let mut txn = store.write()?;
    for (k, v) in batch.drain(..) {
        txn.put(tree, &k, &v)?;
    }
    txn.commit()
}

/// The shard that keeps `key` of `tree` under `manifest`.
fn owner(manifest: &Manifest, tree: Tree, key: &[u8]) -> usize {
    // A partition out of range (a key of another layout) wraps, as before.
    let by_id = |id: &[u8]| {
        manifest.owner_of_partition(u16::from_be_bytes([id[0], id[1]]) as u32 % manifest.owners.len() as u32)
    };
    match tree {
        Tree::Dn2id | Tree::Children => manifest.owner_of(key),
        Tree::Id2entry if key.len() == 8 => by_id(key),
        Tree::Index if key.len() >= 8 => by_id(&key[key.len() - 8..]),
        // Both start with the partition, as an entry id does.
        Tree::Changelog | Tree::State if key.len() >= 2 => by_id(key),
        Tree::Meta => changelog::meta_partition(key).map_or(0, |p| by_id(&p.to_be_bytes())),
        _ => 0,
    }
}
