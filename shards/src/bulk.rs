//! `BulkLoad`: `coredir import` into a new database. Entries are gathered
//! in memory, then every tree is written once, in key order, with appends
//! (LMDB never searches and never splits a page twice), in write
//! transactions of bounded size.

use crate::entry::Entry;
use crate::error::Result;
use crate::index;
use crate::store::{Store, Tree, WriteTxn};
use crate::write::NEXT_ID;

/// A bulk load into an empty store (`coredir import` into a new database):
/// entries gathered in memory, then every tree written in key order with
/// appends, so LMDB never searches and never splits a page twice.
#[derive(Default)]
pub struct BulkLoad {
    next_id: u64,
    dn2id: Vec<(Vec<u8>, [u8; 8])>,
    id2entry: Vec<([u8; 8], Vec<u8>)>,
    /// Index keys (without the id) laid end to end: millions of keys,
    /// no allocation each.
    arena: Vec<u8>,
    index: Vec<IndexRow>,
    keys: Vec<Vec<u8>>,
    children: Vec<(Vec<u8>, u64)>,
}

impl BulkLoad {
    pub fn new() -> BulkLoad {
        BulkLoad { next_id: 1, ..Default::default() }
    }

    /// Adds an entry (already checked: new DN, existing parent).
    pub fn add(&mut self, key: Vec<u8>, partition: u32, entry: &Entry) -> Result<()> {
        let mut buf = Vec::with_capacity(256);
        entry.encode(&mut buf)?;
        let id = (((partition as u64) << 48) | self.next_id).to_be_bytes();
        self.next_id += 1;
        self.keys.clear();
        index::entry_keys(entry, &mut self.keys);
        for k in self.keys.drain(..) {
            let mut bytes = [0u8; HEAD];
            let n = k.len().min(HEAD);
            bytes[..n].copy_from_slice(&k[..n]);
            let head: [u64; HEAD / 8] =
                std::array::from_fn(|i| u64::from_be_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes")));
            self.index.push(IndexRow { head, at: self.arena.len() as u32, len: k.len() as u32, id });
            self.arena.extend_from_slice(&k);
        }
        self.dn2id.push((key, id));
        self.id2entry.push((id, buf));
        Ok(())
    }

    /// Records the child count of a parent this store owns.
    pub fn children(&mut self, key: Vec<u8>, count: u64) {
        self.children.push((key, count));
    }

    /// An upper bound of the bytes the load will take in the store: its
    /// keys and values, twice over for B-tree pages and node headers.
    fn bytes(&self) -> u64 {
        let entries: usize = self.id2entry.iter().map(|(_, v)| 8 + v.len()).sum();
        let dns: usize = self.dn2id.iter().map(|(k, _)| k.len() + 8).sum();
        let children: usize = self.children.iter().map(|(k, _)| k.len() + 8).sum();
        let index = self.arena.len() + 8 * self.index.len();
        2 * (entries + dns + children + index) as u64 + (1 << 20)
    }

    /// Sorts and appends everything into `store`, which must be empty.
    pub fn write<S: Store>(mut self, store: &S) -> Result<()> {
        self.dn2id.sort_unstable();
        self.id2entry.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        self.children.sort_unstable();
        let arena = &self.arena;
        let key = |r: &IndexRow| &arena[r.at as usize..(r.at + r.len) as usize];
        // The first HEAD bytes, zero-padded, as big-endian words, order like
        // the keys: most comparisons end in a few integer compares. Rows
        // with equal heads (many share a key: objectClass values) compare
        // lengths, and bytes past HEAD only when both keys are longer.
        let rest = |r: &IndexRow| &arena[r.at as usize + HEAD.min(r.len as usize)..(r.at + r.len) as usize];
        self.index.sort_unstable_by(|a, b| {
            a.head
                .cmp(&b.head)
                .then_with(|| {
                    if a.len as usize <= HEAD || b.len as usize <= HEAD {
                        a.len.cmp(&b.len)
                    } else {
                        rest(a).cmp(rest(b))
                    }
                })
                .then(a.id.cmp(&b.id))
        });
        // SAFETY: a bulk load owns its new store; no transaction is open.
        unsafe { store.make_room(self.bytes())? };
        let mut w = Appender { store, txn: Some(store.write()?), in_txn: 0 };
        for (k, v) in &self.dn2id {
            w.append(Tree::Dn2id, k, v)?;
        }
        for (k, v) in &self.id2entry {
            w.append(Tree::Id2entry, k, v)?;
        }
        let mut full = Vec::new();
        for r in &self.index {
            full.clear();
            // Most keys fit in the head: rebuilt from it, the arena (read
            // in sorted order, i.e. at random) is not touched.
            if r.len as usize <= HEAD {
                r.head.iter().for_each(|w| full.extend_from_slice(&w.to_be_bytes()));
                full.truncate(r.len as usize);
            } else {
                full.extend_from_slice(key(r));
            }
            full.extend_from_slice(&r.id);
            w.append(Tree::Index, &full, b"")?;
        }
        for (k, n) in &self.children {
            w.append(Tree::Children, k, &n.to_be_bytes())?;
        }
        let mut txn = w.txn.take().expect("open");
        txn.put(Tree::Meta, NEXT_ID, &self.next_id.to_be_bytes())?;
        txn.commit()
    }
}

/// One index key of a bulk load: its first bytes for sorting, where it
/// lies in the arena, and the entry id that ends it.
const HEAD: usize = 32;

struct IndexRow {
    head: [u64; HEAD / 8],
    at: u32,
    len: u32,
    id: [u8; 8],
}

/// Appends in transactions of bounded size (LMDB's dirty page list).
struct Appender<'a, S: Store> {
    store: &'a S,
    txn: Option<S::Write<'a>>,
    in_txn: usize,
}

impl<S: Store> Appender<'_, S> {
    fn append(&mut self, tree: Tree, key: &[u8], value: &[u8]) -> Result<()> {
        const PER_TXN: usize = 200_000;
        self.txn.as_mut().expect("open").append(tree, key, value)?;
        self.in_txn += 1;
        if self.in_txn == PER_TXN {
            // One write transaction at a time: commit before opening the next.
            self.txn.take().expect("open").commit()?;
            self.txn = Some(self.store.write()?);
            self.in_txn = 0;
        }
        Ok(())
    }
}
