//! The `Store` trait: the only door to persistent storage.
//!
//! A store is one shard's database: named trees of ordered byte keys, read
//! through snapshots (`ReadTxn`, any shard, no lock) and written through one
//! write transaction at a time (`WriteTxn`, the owner's group-commit thread
//! only). Transactions are synchronous and must never be held across an
//! `.await`. `lmdb` (heed) is the only engine so far; `Engine` names the
//! one the server is built with, so a second engine (sled) plugs in here.
//!
//! Trees, named after back-mdb's:
//! - `dn2id`: DN key (`Dn::key`, root first) -> entry id (u64 big-endian);
//! - `id2entry`: entry id -> encoded entry (`entry.rs`); the partition sits
//!   in the id's top 16 bits, so a partition is a key range here;
//! - `children`: DN key of a parent -> number of children (u64 BE);
//!   kept on the parent's owner, it serializes adds against deletes;
//! - `index`: attribute index keys (`index.rs`);
//! - `meta`: engine-level counters such as the next entry id.

pub mod lmdb;

use crate::error::Result;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tree {
    Dn2id,
    Id2entry,
    Children,
    Index,
    Meta,
}

pub const TREES: [Tree; 5] = [Tree::Dn2id, Tree::Id2entry, Tree::Children, Tree::Index, Tree::Meta];

impl Tree {
    pub fn name(self) -> &'static str {
        match self {
            Tree::Dn2id => "dn2id",
            Tree::Id2entry => "id2entry",
            Tree::Children => "children",
            Tree::Index => "index",
            Tree::Meta => "meta",
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
}

pub trait ReadTxn {
    fn get(&self, tree: Tree, key: &[u8]) -> Result<Option<&[u8]>>;
    /// Visits, in key order, the pairs whose key starts with `prefix` and is
    /// at least `from`, until `visit` returns false.
    fn scan(&self, tree: Tree, prefix: &[u8], from: &[u8], visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()>;
}

pub trait WriteTxn: ReadTxn {
    fn put(&mut self, tree: Tree, key: &[u8], value: &[u8]) -> Result<()>;
    fn delete(&mut self, tree: Tree, key: &[u8]) -> Result<bool>;
    /// Removes every key of a tree (`coredir reindex`).
    fn clear(&mut self, tree: Tree) -> Result<()>;
    fn commit(self) -> Result<()>;
}

/// The engine this build serves with.
pub type Engine = lmdb::LmdbStore;
