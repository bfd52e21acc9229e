//! Damage done behind a stopped server's back, for the integration tests
//! that show the server copes with it: an entry rewritten in place, the
//! index keys an older store lacked removed, where an entry is stored.
//! Nothing in the server or its tools calls this; it exists so that tests,
//! like the server, never name an engine, a tree or a key layout.

use crate::dn::Dn;
use crate::entry::Entry;
use crate::index::Marked;
use crate::manifest::Manifest;
use crate::store::{Engine, Options, ReadTxn, Store, SyncMode, Tree, WriteTxn};
use crate::{Error, Result};
use std::path::Path;

/// The stores of a stopped server's data directory, opened with the
/// engine its manifest names.
pub struct Tamper {
    manifest: Manifest,
    engines: Vec<Engine>,
}

impl Tamper {
    pub fn open(data: &Path) -> Result<Tamper> {
        let manifest = Manifest::load(data)?.ok_or_else(|| Error::other("no manifest"))?;
        let kind = manifest.engine_kind();
        let engines = (0..manifest.shards as usize)
            .map(|i| Engine::open(&data.join(format!("shard-{i}")), Options::new(kind, SyncMode::Always)))
            .collect::<Result<Vec<_>>>()?;
        Ok(Tamper { manifest, engines })
    }

    /// Whether store `i` holds an entry named `dn`.
    pub fn holds(&self, i: usize, dn: &Dn) -> Result<bool> {
        self.engines[i].read()?.has_dn(&dn.key())
    }

    /// Removes from store `i` the index keys that mark entries of `class`
    /// (as a store written before those keys existed); returns how many.
    pub fn drop_marks(&self, i: usize, class: Marked) -> Result<usize> {
        let prefix = class.prefix();
        let mut keys = Vec::new();
        let mut txn = self.engines[i].write()?;
        txn.scan(Tree::Index, prefix, prefix, &mut |k, _| {
            keys.push(k.to_vec());
            true
        })?;
        for k in &keys {
            txn.delete(Tree::Index, k)?;
        }
        txn.commit()?;
        Ok(keys.len())
    }

    /// Rewrites the stored entry `dn` with `edit`, on its owner's store,
    /// leaving its indexes as they were.
    pub fn rewrite(&self, dn: &Dn, edit: impl FnOnce(&mut Entry)) -> Result<()> {
        let key = dn.key();
        let mut txn = self.engines[self.manifest.owner_of(&key)].write()?;
        let id = txn.get(Tree::Dn2id, &key)?.ok_or_else(|| Error::other("no such entry"))?.to_vec();
        let stored = txn.get(Tree::Id2entry, &id)?.ok_or_else(|| Error::other("no entry under its id"))?;
        let mut entry = Entry::decode(stored)?;
        edit(&mut entry);
        let mut buf = Vec::new();
        entry.encode(&mut buf)?;
        txn.put(Tree::Id2entry, &id, &buf)?;
        txn.commit()
    }
}
