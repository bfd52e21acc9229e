//! The LMDB engine, through heed: one environment per shard.
//!
//! Readers use `read_txn_without_tls`, because a glommio thread runs many
//! tasks and each may open its own snapshot. Commits are ordinary synced
//! LMDB commits in `SyncMode::Always`; the other modes open the environment
//! with `NO_SYNC` (never `NO_SYNC` plus a later sync for `Always`).

use super::{ReadTxn, Store, SyncMode, Tree, WriteTxn, TREES};
use crate::error::{Error, Result};
use heed::types::Bytes;
use heed::{CommitOrAbort, Database, Env, EnvFlags, EnvOpenOptions, PutFlags, RoTxn, RwTxn, WithoutTls};
use std::ops::Bound;
use std::path::Path;

type Db = Database<'static, Bytes, Bytes>;

pub struct LmdbStore {
    env: Env<WithoutTls>,
    dbs: [Db; 5],
}

pub struct LmdbRead<'a> {
    txn: RoTxn<'a, WithoutTls>,
    dbs: &'a [Db; 5],
}

pub struct LmdbWrite<'a> {
    txn: RwTxn<'a>,
    dbs: &'a [Db; 5],
}

fn storage_error(e: heed::Error) -> Error {
    eprintln!("coredir: storage error: {e}");
    Error::other(format!("storage error: {e}"))
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
                Ok(CommitOrAbort::<_, ()>::Commit([
                    open(TREES[0])?,
                    open(TREES[1])?,
                    open(TREES[2])?,
                    open(TREES[3])?,
                    open(TREES[4])?,
                ]))
            })
            .map_err(storage_error)?
            .unwrap_commit();
        Ok(LmdbStore { env, dbs })
    }
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
        Ok(LmdbWrite { txn: self.env.write_txn().map_err(storage_error)?, dbs: &self.dbs })
    }

    fn sync(&self) -> Result<()> {
        self.env.force_sync().map_err(storage_error)
    }

    fn size(&self) -> u64 {
        self.env.real_disk_size().unwrap_or(0)
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
        self.dbs[idx(tree)].put(&mut self.txn, key, value).map_err(storage_error)
    }
    fn delete(&mut self, tree: Tree, key: &[u8]) -> Result<bool> {
        self.dbs[idx(tree)].delete(&mut self.txn, key).map_err(storage_error)
    }
    fn append(&mut self, tree: Tree, key: &[u8], value: &[u8]) -> Result<()> {
        self.dbs[idx(tree)].put_with_flags(&mut self.txn, PutFlags::APPEND, key, value).map_err(storage_error)
    }
    fn clear(&mut self, tree: Tree) -> Result<()> {
        self.dbs[idx(tree)].clear(&mut self.txn).map_err(storage_error)
    }
    fn commit(self) -> Result<()> {
        self.txn.commit().map_err(storage_error)
    }
}
