//! The `Store` trait: the only door to persistent storage.
//!
//! A store is one shard's database: named trees of ordered byte keys, read
//! through snapshots (`ReadTxn`, any shard, no lock) and written through one
//! write transaction at a time (`WriteTxn`, the owner's group-commit thread
//! only). Transactions are synchronous and must never be held across an
//! `.await`. Two engines implement it: `lmdb` (LMDB's C API, the default) and
//! `sled`; `Engine` is the one a server opened (`storage.engine`).
//!
//! Trees, named after back-mdb's:
//! - `dn2id`: DN key (`Dn::key`, root first) -> entry id (u64 big-endian);
//! - `id2entry`: entry id -> encoded entry (`entry.rs`); the partition sits
//!   in the id's top 16 bits, so a partition is a key range here;
//! - `children`: DN key of a parent -> number of children (u64 BE);
//!   kept on the parent's owner, it serializes adds against deletes;
//! - `index`: attribute index keys (`index.rs`);
//! - `meta`: engine-level counters such as the next entry id, the owner's
//!   clock, changelog sequence numbers and the replica update vector;
//! - `changelog`: partition, origin server, sequence -> replication record
//!   (`changelog.rs`), written in the same commit as the change;
//! - `state`: partition, `entryUUID` -> the entry's replicated state
//!   (`merge::EntryState`), tombstones included.

pub mod copy;
pub mod lmdb;
pub mod sled;

use crate::error::Result;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tree {
    Dn2id,
    Id2entry,
    Children,
    Index,
    Meta,
    Changelog,
    State,
}

pub const N_TREES: usize = 7;
pub const TREES: [Tree; N_TREES] =
    [Tree::Dn2id, Tree::Id2entry, Tree::Children, Tree::Index, Tree::Meta, Tree::Changelog, Tree::State];

impl Tree {
    pub fn name(self) -> &'static str {
        match self {
            Tree::Dn2id => "dn2id",
            Tree::Id2entry => "id2entry",
            Tree::Children => "children",
            Tree::Index => "index",
            Tree::Meta => "meta",
            Tree::Changelog => "changelog",
            Tree::State => "state",
        }
    }
}

/// How commits reach the disk (`storage.sync`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncMode {
    /// Every commit is durable before it is acknowledged.
    Always,
    /// Commits are flushed by the OS or by a periodic sync; a system crash
    /// loses the last interval, a process crash loses nothing.
    Interval,
    /// Never synced explicitly; a process crash loses nothing, a system crash
    /// loses whatever the kernel had not written.
    Never,
}

pub trait Store: Send + Sync + 'static {
    type Read<'a>: ReadTxn
    where
        Self: 'a;
    type Write<'a>: WriteTxn
    where
        Self: 'a;

    fn read(&self) -> Result<Self::Read<'_>>;
    fn write(&self) -> Result<Self::Write<'_>>;
    /// Forces what was committed to disk (used by `SyncMode::Interval`).
    fn sync(&self) -> Result<()>;
    /// Bytes used on disk.
    fn size(&self) -> u64;

    /// Whether the store is running out of room (LMDB: less than a quarter
    /// of the map left). Checked by the owner before each commit.
    fn wants_room(&self) -> bool {
        false
    }
    /// Whether a write failed for lack of room since the last call (LMDB's
    /// `MDB_MAP_FULL`): the owner grows the store and runs the batch again.
    fn take_full(&self) -> bool {
        false
    }
    /// LMDB's map size (0 for engines without one).
    fn map_size(&self) -> u64 {
        0
    }
    /// Makes room for `extra` more bytes: LMDB doubles its map until a
    /// quarter is left after them. Returns the old and new map sizes when
    /// it grew.
    ///
    /// # Safety
    /// No transaction may be open on this store anywhere in the process:
    /// LMDB unmaps and maps the file again, so a reader's pointers would
    /// dangle. A server parks every reactor first (`shard::grow`) and takes
    /// `exclusive()`; offline tools call it while one thread owns the store.
    unsafe fn make_room(&self, _extra: u64) -> Result<Option<(u64, u64)>> {
        Ok(None)
    }
    /// Held by readers that are not reactors (the admin thread's backups),
    /// so that growth waits for them; reactors need nothing (they park).
    fn outside(&self) -> Option<std::sync::RwLockReadGuard<'_, ()>> {
        None
    }
    /// What growth holds: `None` while an outside reader is busy.
    fn exclusive(&self) -> Option<std::sync::RwLockWriteGuard<'_, ()>> {
        None
    }
}

pub trait ReadTxn {
    fn get(&self, tree: Tree, key: &[u8]) -> Result<Option<&[u8]>>;
    /// Visits, in key order, the pairs whose key starts with `prefix` and is
    /// at least `from`, until `visit` returns false.
    fn scan(&self, tree: Tree, prefix: &[u8], from: &[u8], visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()>;
    /// Whether all reads of the transaction see one point in time (LMDB),
    /// so that an index key read and the entry read after it agree; sled's
    /// reads are each as last committed.
    fn snapshot(&self) -> bool {
        true
    }
    /// The entry id stored under a DN key (`dn2id`).
    fn id_of(&self, key: &[u8]) -> Result<Option<&[u8]>> {
        self.get(Tree::Dn2id, key)
    }
    /// Whether an entry has this DN key.
    fn has_dn(&self, key: &[u8]) -> Result<bool> {
        Ok(self.id_of(key)?.is_some())
    }
    /// The entry with this id (an index candidate), read in place.
    fn entry_by_id(&self, id: &[u8]) -> Result<Option<crate::entry::EntryView<'_>>> {
        self.get(Tree::Id2entry, id)?.map(crate::entry::EntryView::new).transpose()
    }
    /// How many entries the store holds (a walk of `id2entry`).
    fn count_entries(&self) -> Result<u64> {
        count_keys(self, Tree::Id2entry)
    }
    /// Visits, in DN key order, the DN keys starting with `prefix` (a
    /// subtree's, `Dn::key` being root first) from `from` on, with their
    /// entry ids, until `visit` returns false.
    fn dn_keys(&self, prefix: &[u8], from: &[u8], visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
        self.scan(Tree::Dn2id, prefix, from, visit)
    }
    /// The entry stored under a DN key, with its id: `dn2id`, then
    /// `id2entry`, read in place. The one way an entry is read by DN.
    fn entry(&self, key: &[u8]) -> Result<Option<(&[u8], crate::entry::EntryView<'_>)>> {
        let Some(id) = self.get(Tree::Dn2id, key)? else { return Ok(None) };
        match self.get(Tree::Id2entry, id)? {
            Some(bytes) => Ok(Some((id, crate::entry::EntryView::new(bytes)?))),
            // Without a snapshot (sled) a delete may land between the reads.
            None if !self.snapshot() => Ok(None),
            None => Err(crate::error::Error::other("dn2id names a missing id2entry record")),
        }
    }
}

/// How many keys a tree holds (a walk of it).
pub(crate) fn count_keys<T: ReadTxn + ?Sized>(txn: &T, tree: Tree) -> Result<u64> {
    let mut n = 0;
    txn.scan(tree, &[], &[], &mut |_, _| {
        n += 1;
        true
    })?;
    Ok(n)
}

pub trait WriteTxn: ReadTxn {
    fn put(&mut self, tree: Tree, key: &[u8], value: &[u8]) -> Result<()>;
    fn delete(&mut self, tree: Tree, key: &[u8]) -> Result<bool>;
    /// Removes every key of a tree (`coredir reindex`).
    fn clear(&mut self, tree: Tree) -> Result<()>;
    /// Puts a key greater than every key of the tree (bulk loads into an
    /// empty store: LMDB appends without searching).
    fn append(&mut self, tree: Tree, key: &[u8], value: &[u8]) -> Result<()>;
    fn commit(self) -> Result<()>;
}

/// Which engine a data directory uses (`storage.engine`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineKind {
    Lmdb,
    Sled,
}

/// How to open a store.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    pub kind: EngineKind,
    pub sync: SyncMode,
    pub sync_interval_ms: u64,
    /// LMDB's map size (address space reserved).
    pub map_size: usize,
    /// sled's page cache.
    pub sled_cache_bytes: u64,
}

impl Options {
    /// Small defaults for tools and tests: 1 GiB map, 16 MiB sled cache.
    pub fn new(kind: EngineKind, sync: SyncMode) -> Options {
        Options { kind, sync, sync_interval_ms: 1000, map_size: 1 << 30, sled_cache_bytes: 16 << 20 }
    }
}

/// The engine a server runs with, chosen at start. One `match` per call
/// (perfectly predicted: a process uses one engine).
pub enum Engine {
    Lmdb(lmdb::LmdbStore),
    Sled(sled::SledStore),
}

pub enum EngineRead<'a> {
    Lmdb(lmdb::LmdbRead<'a>),
    Sled(sled::SledRead<'a>),
}

pub enum EngineWrite<'a> {
    Lmdb(lmdb::LmdbWrite<'a>),
    Sled(sled::SledWrite<'a>),
}

impl Engine {
    pub fn open(dir: &std::path::Path, o: Options) -> Result<Engine> {
        Ok(match o.kind {
            EngineKind::Lmdb => Engine::Lmdb(lmdb::LmdbStore::open(dir, o.sync, o.map_size)?),
            EngineKind::Sled => {
                Engine::Sled(sled::SledStore::open(dir, o.sync, o.sync_interval_ms, o.sled_cache_bytes)?)
            }
        })
    }
}

impl Store for Engine {
    type Read<'a> = EngineRead<'a>;
    type Write<'a> = EngineWrite<'a>;

    fn read(&self) -> Result<EngineRead<'_>> {
        Ok(match self {
            Engine::Lmdb(s) => EngineRead::Lmdb(s.read()?),
            Engine::Sled(s) => EngineRead::Sled(s.read()?),
        })
    }

    fn write(&self) -> Result<EngineWrite<'_>> {
        Ok(match self {
            Engine::Lmdb(s) => EngineWrite::Lmdb(s.write()?),
            Engine::Sled(s) => EngineWrite::Sled(s.write()?),
        })
    }

    fn sync(&self) -> Result<()> {
        match self {
            Engine::Lmdb(s) => s.sync(),
            Engine::Sled(s) => s.sync(),
        }
    }

    fn size(&self) -> u64 {
        match self {
            Engine::Lmdb(s) => s.size(),
            Engine::Sled(s) => s.size(),
        }
    }
    fn wants_room(&self) -> bool {
        matches!(self, Engine::Lmdb(s) if s.wants_room())
    }
    fn take_full(&self) -> bool {
        matches!(self, Engine::Lmdb(s) if s.take_full())
    }
    fn map_size(&self) -> u64 {
        match self {
            Engine::Lmdb(s) => s.map_size(),
            Engine::Sled(_) => 0,
        }
    }
    unsafe fn make_room(&self, extra: u64) -> Result<Option<(u64, u64)>> {
        match self {
            // SAFETY: the caller's promise, passed on.
            Engine::Lmdb(s) => unsafe { s.make_room(extra) },
            Engine::Sled(_) => Ok(None),
        }
    }
    fn outside(&self) -> Option<std::sync::RwLockReadGuard<'_, ()>> {
        match self {
            Engine::Lmdb(s) => s.outside(),
            Engine::Sled(_) => None,
        }
    }
    fn exclusive(&self) -> Option<std::sync::RwLockWriteGuard<'_, ()>> {
        match self {
            Engine::Lmdb(s) => s.exclusive(),
            Engine::Sled(_) => None,
        }
    }
}

impl ReadTxn for EngineRead<'_> {
    fn get(&self, tree: Tree, key: &[u8]) -> Result<Option<&[u8]>> {
        match self {
            EngineRead::Lmdb(t) => t.get(tree, key),
            EngineRead::Sled(t) => t.get(tree, key),
        }
    }
    fn scan(&self, tree: Tree, prefix: &[u8], from: &[u8], visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
        match self {
            EngineRead::Lmdb(t) => t.scan(tree, prefix, from, visit),
            EngineRead::Sled(t) => t.scan(tree, prefix, from, visit),
        }
    }
    fn snapshot(&self) -> bool {
        matches!(self, EngineRead::Lmdb(_))
    }
}

impl ReadTxn for EngineWrite<'_> {
    fn get(&self, tree: Tree, key: &[u8]) -> Result<Option<&[u8]>> {
        match self {
            EngineWrite::Lmdb(t) => t.get(tree, key),
            EngineWrite::Sled(t) => t.get(tree, key),
        }
    }
    fn scan(&self, tree: Tree, prefix: &[u8], from: &[u8], visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
        match self {
            EngineWrite::Lmdb(t) => t.scan(tree, prefix, from, visit),
            EngineWrite::Sled(t) => t.scan(tree, prefix, from, visit),
        }
    }
    fn snapshot(&self) -> bool {
        matches!(self, EngineWrite::Lmdb(_))
    }
}

impl WriteTxn for EngineWrite<'_> {
    fn put(&mut self, tree: Tree, key: &[u8], value: &[u8]) -> Result<()> {
        match self {
            EngineWrite::Lmdb(t) => t.put(tree, key, value),
            EngineWrite::Sled(t) => t.put(tree, key, value),
        }
    }
    fn delete(&mut self, tree: Tree, key: &[u8]) -> Result<bool> {
        match self {
            EngineWrite::Lmdb(t) => t.delete(tree, key),
            EngineWrite::Sled(t) => t.delete(tree, key),
        }
    }
    fn clear(&mut self, tree: Tree) -> Result<()> {
        match self {
            EngineWrite::Lmdb(t) => t.clear(tree),
            EngineWrite::Sled(t) => t.clear(tree),
        }
    }
    fn append(&mut self, tree: Tree, key: &[u8], value: &[u8]) -> Result<()> {
        match self {
            EngineWrite::Lmdb(t) => t.append(tree, key, value),
            EngineWrite::Sled(t) => t.append(tree, key, value),
        }
    }
    fn commit(self) -> Result<()> {
        match self {
            EngineWrite::Lmdb(t) => t.commit(),
            EngineWrite::Sled(t) => t.commit(),
        }
    }
}
