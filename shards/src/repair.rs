//! Start-up consistency repair of the `children` counts.
//!
//! An add or delete whose parent lives on another shard changes the
//! parent's count and the entry in two commits on two owners. A crash
//! between them leaves a count one too high (an add whose insert never
//! committed) or one too high the other way round (a delete whose parent
//! was not yet uncounted): never a lost entry, but a parent that can no
//! longer be deleted. Before any shard serves, the counts are recomputed
//! from every store's `dn2id` and corrected where they differ.

use crate::dn::KEY_SEPARATOR;
use crate::error::Result;
use crate::manifest::Manifest;
use crate::store::{ReadTxn, Store, Tree, WriteTxn};
use crate::stores::Offline;
use crate::write::be_u64;
use std::collections::HashMap;

/// Recounts children; returns how many counts were corrected.
pub fn children_counts(manifest: &Manifest, stores: &Offline) -> Result<usize> {
    let stores = stores.engines();
    let mut counted: HashMap<Vec<u8>, u64> = HashMap::new();
    for store in stores {
        let txn = store.read()?;
        txn.scan(Tree::Dn2id, b"", b"", &mut |key, _| {
            if let Some(cut) = key.iter().rposition(|b| *b == KEY_SEPARATOR) {
                *counted.entry(key[..cut].to_vec()).or_default() += 1;
            }
            true
        })?;
    }
    // Entries right below a suffix name a parent that is not an entry.
    let exists =
        |key: &[u8]| -> Result<bool> { Ok(stores[manifest.owner_of(key)].read()?.get(Tree::Dn2id, key)?.is_some()) };
    let mut real = HashMap::new();
    for (key, n) in counted {
        if exists(&key)? {
            real.insert(key, n);
        }
    }
    let counted = real;
    let mut fixed = 0;
    for (shard, store) in stores.iter().enumerate() {
        let mut stored = Vec::new();
        store.read()?.scan(Tree::Children, b"", b"", &mut |k, v| {
            stored.push((k.to_vec(), be_u64(v)));
            true
        })?;
        let mut txn = store.write()?;
        for (key, n) in &stored {
            if counted.get(key) != Some(n) {
                match counted.get(key) {
                    Some(real) => txn.put(Tree::Children, key, &real.to_be_bytes())?,
                    None => drop(txn.delete(Tree::Children, key)?),
                }
                fixed += 1;
            }
        }
        for (key, n) in &counted {
            if manifest.owner_of(key) == shard && !stored.iter().any(|(k, _)| k == key) {
                txn.put(Tree::Children, key, &n.to_be_bytes())?;
                fixed += 1;
            }
        }
        txn.commit()?;
    }
    Ok(fixed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dn::Dn;
    use crate::entry::{Attr, Entry};
    use crate::store::{EngineKind, Options, SyncMode};
    use crate::write::{children, run_batch, Parent, WriteOp};

    fn entry(dn: &str) -> Entry {
        Entry { dn: dn.into(), attrs: vec![Attr { name: "objectClass".into(), vals: vec![b"top".to_vec()] }] }
    }

    #[test]
    fn counts_left_by_a_crash_are_corrected() {
        let dir = tempfile::tempdir().unwrap();
        let manifest = Manifest::new(2, vec!["dc=x".into()], "cn=admin,dc=x".into(), String::new());
        let all = Offline::open(dir.path(), 2, Options::new(EngineKind::Lmdb, SyncMode::Never)).unwrap();
        let stores = all.engines();
        let hlc = || crate::write::Clock {
            hlc: crate::csn::Hlc::new(1, None, crate::csn::DEFAULT_MAX_FORWARD_SKEW),
            capture: false,
            incarnation: 0,
            contexts: Default::default(),
            commit_delay: None,
        };
        let put = |dn: &str, parent: Option<Parent>| {
            let key = Dn::parse(dn).unwrap().key();
            let store = &stores[manifest.owner_of(&key)];
            let op = WriteOp::Add { key, parent, entry: entry(dn) };
            run_batch(&**store, |k| manifest.partition_of(k), &mut [op], &mut hlc()).pop().unwrap().unwrap();
        };
        let parent = |dn: &str| Parent { key: Dn::parse(dn).unwrap().key(), dn: dn.into() };
        // The suffix and ou=a, whose four children are written without
        // counting them (as if every count message had been lost), and
        // ou=b, counted once for a child that never arrived.
        put("dc=x", None);
        put("ou=a,dc=x", None);
        put("ou=b,dc=x", None);
        for i in 0..4 {
            put(&format!("cn={i},ou=a,dc=x"), None);
        }
        let b = parent("ou=b,dc=x");
        let owner = &stores[manifest.owner_of(&b.key)];
        run_batch(
            &**owner,
            |k| manifest.partition_of(k),
            &mut [WriteOp::Child { parent: b.clone(), delta: 1 }],
            &mut hlc(),
        );
        let fixed = children_counts(&manifest, &all).unwrap();
        assert!(fixed >= 2, "{fixed}");
        let count = |dn: &str| {
            let key = Dn::parse(dn).unwrap().key();
            children(&stores[manifest.owner_of(&key)].read().unwrap(), &key).unwrap()
        };
        assert_eq!((count("dc=x"), count("ou=a,dc=x"), count("ou=b,dc=x")), (2, 4, 0));
        assert_eq!(children_counts(&manifest, &all).unwrap(), 0, "nothing left to fix");
    }
}
