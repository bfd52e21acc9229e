//! The LMDB engine, through heed: one environment per shard.
//!
//! Readers use `read_txn_without_tls`, because a glommio thread runs many
//! tasks and each may open its own snapshot. Commits are ordinary synced
//! LMDB commits in `SyncMode::Always`; the other modes open the environment
//! with `NO_SYNC` (never `NO_SYNC` plus a later sync for `Always`).
//!
//! The map (address space reserved for the file) starts at
//! `storage.map_size_mb` and doubles whenever less than a quarter is left
//! or a write meets `MDB_MAP_FULL` (`Store::make_room`); a store reopened
//! with its data past the configured size grows the same way at open.

use super::{ReadTxn, Store, SyncMode, Tree, WriteTxn, N_TREES, TREES};
use crate::error::{Error, Result};
use heed::types::Bytes;
use heed::{CommitOrAbort, Database, Env, EnvFlags, EnvOpenOptions, MdbError, PutFlags, RoTxn, RwTxn, WithoutTls};
use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard, TryLockError};

type Db = Database<'static, Bytes, Bytes>;

pub struct LmdbStore {
    env: Env<WithoutTls>,
    dbs: [Db; N_TREES],
    /// Set when a write met `MDB_MAP_FULL` (see `Store::take_full`).
    full: AtomicBool,
    /// Readers outside the reactors (see `Store::outside`).
    outside: RwLock<()>,
}

pub struct LmdbRead<'a> {
    txn: RoTxn<'a, WithoutTls>,
    dbs: &'a [Db; N_TREES],
}

pub struct LmdbWrite<'a> {
    txn: RwTxn<'a>,
    dbs: &'a [Db; N_TREES],
    full: &'a AtomicBool,
}

fn storage_error(e: heed::Error) -> Error {
    eprintln!("coredir: storage error: {e}");
    Error::other(format!("storage error: {e}"))
}

/// A write's error: running out of map is remembered, and not logged (the
/// owner grows the map and runs the batch again).
fn write_error(full: &AtomicBool, e: heed::Error) -> Error {
    if matches!(e, heed::Error::Mdb(MdbError::MapFull)) {
        full.store(true, Ordering::Relaxed);
        return Error::other("storage error: the LMDB map is full");
    }
    storage_error(e)
}

/// The map size that leaves a quarter of the map free after `used` bytes:
/// the current one doubled as often as needed.
fn grown(map: u64, used: u64) -> u64 {
    let mut size = map.max(1 << 20);
    while used > size / 4 * 3 {
        size *= 2;
    }
    size
}

impl LmdbStore {
    pub fn open(dir: &Path, sync: SyncMode, map_size: usize) -> Result<LmdbStore> {
        std::fs::create_dir_all(dir).map_err(|e| Error::other(format!("{}: {e}", dir.display())))?;
        let mut opts = EnvOpenOptions::new().read_txn_without_tls();
        opts.map_size(map_size).max_dbs(TREES.len() as u32).max_readers(1024);
        if sync != SyncMode::Always {
            // SAFETY: NO_SYNC only weakens durability, never memory safety.
            unsafe { opts.flags(EnvFlags::NO_SYNC | EnvFlags::NO_META_SYNC) };
        }
        // SAFETY: each shard directory is opened once per process.
        let env = unsafe { opts.open(dir) }.map_err(storage_error)?;
        let wtxn = env.write_txn().map_err(storage_error)?;
        let dbs = env
            .create_databases_and_commit(wtxn, |wdo, wtxn| -> heed::Result<_> {
                let mut open = |t: Tree| wdo.create_database::<Bytes, Bytes>(wtxn, Some(t.name()));
                let mut dbs = Vec::with_capacity(N_TREES);
                for t in TREES {
                    dbs.push(open(t)?);
                }
                let Ok(dbs) = <[_; N_TREES]>::try_from(dbs) else { unreachable!("one per tree") };
                Ok(CommitOrAbort::<_, ()>::Commit(dbs))
            })
            .map_err(storage_error)?
            .unwrap_commit();
        let store = LmdbStore { env, dbs, full: AtomicBool::new(false), outside: RwLock::new(()) };
        // LMDB maps what it is asked for, or just the data when that is
        // more: a store that grew last time needs room again.
        // SAFETY: the environment was just opened; no transaction is open.
        unsafe { store.make_room(0) }?;
        Ok(store)
    }

    /// Bytes of the map in use (up to the last page), and the map's size.
    fn usage(&self) -> (u64, u64) {
        let info = self.env.info();
        ((info.last_page_number as u64 + 1) * page_size() as u64, info.map_size as u64)
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

fn idx(t: Tree) -> usize {
    TREES.iter().position(|x| *x == t).unwrap()
}

impl Store for LmdbStore {
    type Read<'a> = LmdbRead<'a>;
    type Write<'a> = LmdbWrite<'a>;

    fn read(&self) -> Result<LmdbRead<'_>> {
        Ok(LmdbRead { txn: self.env.read_txn().map_err(storage_error)?, dbs: &self.dbs })
    }

    fn write(&self) -> Result<LmdbWrite<'_>> {
        Ok(LmdbWrite { txn: self.env.write_txn().map_err(storage_error)?, dbs: &self.dbs, full: &self.full })
    }

    fn sync(&self) -> Result<()> {
        self.env.force_sync().map_err(storage_error)
    }

    fn size(&self) -> u64 {
        self.env.real_disk_size().unwrap_or(0)
    }

    fn wants_room(&self) -> bool {
        let (used, map) = self.usage();
        grown(map, used) > map
    }

    fn take_full(&self) -> bool {
        // A load first: the line stays shared while nothing failed.
        self.full.load(Ordering::Relaxed) && self.full.swap(false, Ordering::Relaxed)
    }

    fn map_size(&self) -> u64 {
        self.usage().1
    }

    unsafe fn make_room(&self, extra: u64) -> Result<Option<(u64, u64)>> {
        let (used, map) = self.usage();
        let size = grown(map, used + extra);
        if size == map {
            return Ok(None);
        }
        let size = size.next_multiple_of(page_size() as u64);
        // SAFETY: the caller promises that no transaction is open.
        unsafe { self.env.resize(size as usize) }.map_err(storage_error)?;
        Ok(Some((map, size)))
    }

    fn outside(&self) -> Option<RwLockReadGuard<'_, ()>> {
        Some(self.outside.read().unwrap_or_else(|e| e.into_inner()))
    }

    fn exclusive(&self) -> Option<RwLockWriteGuard<'_, ()>> {
        match self.outside.try_write() {
            Ok(g) => Some(g),
            Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }
}

fn get<'t>(db: &Db, txn: &'t RoTxn<'_>, key: &[u8]) -> Result<Option<&'t [u8]>> {
    db.get(txn, key).map_err(storage_error)
}

fn scan(
    db: &Db,
    txn: &RoTxn<'_>,
    prefix: &[u8],
    from: &[u8],
    visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
) -> Result<()> {
    let start = if from > prefix { from } else { prefix };
    // LMDB refuses empty keys, so an empty start means the first key.
    let range = (if start.is_empty() { Bound::Unbounded } else { Bound::Included(start) }, Bound::Unbounded);
    for item in db.range(txn, &range).map_err(storage_error)? {
        let (k, v) = item.map_err(storage_error)?;
        if !k.starts_with(prefix) || !visit(k, v) {
            break;
        }
    }
    Ok(())
}

impl ReadTxn for LmdbRead<'_> {
    fn get(&self, tree: Tree, key: &[u8]) -> Result<Option<&[u8]>> {
        get(&self.dbs[idx(tree)], &self.txn, key)
    }
    fn scan(&self, tree: Tree, prefix: &[u8], from: &[u8], visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
        scan(&self.dbs[idx(tree)], &self.txn, prefix, from, visit)
    }
}

impl ReadTxn for LmdbWrite<'_> {
    fn get(&self, tree: Tree, key: &[u8]) -> Result<Option<&[u8]>> {
        get(&self.dbs[idx(tree)], &self.txn, key)
    }
    fn scan(&self, tree: Tree, prefix: &[u8], from: &[u8], visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
        scan(&self.dbs[idx(tree)], &self.txn, prefix, from, visit)
    }
}

impl WriteTxn for LmdbWrite<'_> {
    fn put(&mut self, tree: Tree, key: &[u8], value: &[u8]) -> Result<()> {
        self.dbs[idx(tree)].put(&mut self.txn, key, value).map_err(|e| write_error(self.full, e))
    }
    fn delete(&mut self, tree: Tree, key: &[u8]) -> Result<bool> {
        self.dbs[idx(tree)].delete(&mut self.txn, key).map_err(storage_error)
    }
    fn append(&mut self, tree: Tree, key: &[u8], value: &[u8]) -> Result<()> {
        let db = &self.dbs[idx(tree)];
        db.put_with_flags(&mut self.txn, PutFlags::APPEND, key, value).map_err(|e| write_error(self.full, e))
    }
    fn clear(&mut self, tree: Tree) -> Result<()> {
        self.dbs[idx(tree)].clear(&mut self.txn).map_err(storage_error)
    }
    fn commit(self) -> Result<()> {
        self.txn.commit().map_err(|e| write_error(self.full, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A write past the map fails, is remembered, and succeeds once the
    /// map has grown; a reopened store keeps room above its data.
    #[test]
    fn a_full_map_grows_and_the_write_succeeds() {
        let dir = tempfile::tempdir().unwrap();
        let store = LmdbStore::open(dir.path(), SyncMode::Never, 1 << 20).unwrap();
        let value = vec![7u8; 3 << 20];
        let put = |s: &LmdbStore| -> Result<()> {
            let mut txn = s.write()?;
            txn.put(Tree::Id2entry, b"big", &value)?;
            txn.commit()
        };
        assert!(put(&store).is_err());
        assert!(store.take_full() && !store.take_full());
        // As an owner does: at least double, and try again.
        let mut rounds = 0;
        loop {
            // SAFETY: no transaction is open.
            let (from, to) = unsafe { store.make_room(store.map_size()) }.unwrap().unwrap();
            assert_eq!(to, 2 * from);
            rounds += 1;
            if put(&store).is_ok() {
                break;
            }
            assert!(store.take_full() && rounds < 4);
        }
        assert!(store.map_size() >= 4 << 20);
        assert_eq!(store.read().unwrap().get(Tree::Id2entry, b"big").unwrap().map(<[u8]>::len), Some(3 << 20));
        drop(store);
        let store = LmdbStore::open(dir.path(), SyncMode::Never, 1 << 20).unwrap();
        assert!(!store.wants_room() && store.map_size() > 4 << 20);
    }
}
