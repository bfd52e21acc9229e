//! The entries under a DN key in every store at once, in one key order:
//! the walk a search's range and a sync refresh share. Keys are root
//! first, so a parent comes before its children whichever store holds
//! each (slapd sends entries parents first; `ldapsearch | ldapadd` and a
//! consumer renaming a moved subtree rely on it).

use crate::store::ReadTxn;
use crate::Result;

/// A key of the walk: the DN key, its entry's id and the store it is in
/// (an index into the transactions walked).
pub type Row = (Vec<u8>, Vec<u8>, usize);

/// What the walk does with a key it meets.
pub enum Step {
    /// A row of the chunk.
    Take,
    /// Passed over (it counts toward the keys seen).
    Pass,
    /// This store's walk ends before this key.
    End,
}

/// The next chunk of the walk of the keys starting with `prefix` from
/// `from` on (included): from each store at most `take` rows and `see`
/// keys, merged, and cut at the least last key seen in a store that has
/// more (past it, that store's next keys may come first). Returns the
/// rows in key order and that key, the bound, when cut: the walk goes on
/// after it.
pub fn next_chunk<T: ReadTxn>(
    txns: &[T],
    prefix: &[u8],
    from: &[u8],
    (take, see): (usize, usize),
    step: &mut impl FnMut(&[u8]) -> Step,
) -> Result<(Vec<Row>, Option<Vec<u8>>)> {
    let mut rows: Vec<Row> = Vec::new();
    let mut bound: Option<Vec<u8>> = None;
    for (store, txn) in txns.iter().enumerate() {
        let (mut taken, mut seen, mut last, mut more) = (0, 0, None::<Vec<u8>>, false);
        txn.dn_keys(prefix, from, &mut |key, id| {
            if taken == take || seen == see {
                more = true;
                return false;
            }
            match step(key) {
                Step::End => return false,
                Step::Take => {
                    rows.push((key.to_vec(), id.to_vec(), store));
                    taken += 1;
                }
                Step::Pass => {}
            }
            seen += 1;
            last = Some(key.to_vec());
            true
        })?;
        if let (true, Some(last)) = (more, last) {
            if bound.as_ref().is_none_or(|b| last < *b) {
                bound = Some(last);
            }
        }
    }
    rows.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    if let Some(b) = &bound {
        rows.retain(|r| r.0 <= *b);
    }
    Ok((rows, bound))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::lmdb::LmdbStore;
    use crate::store::{Store, SyncMode, Tree, WriteTxn};

    fn store(keys: &[&str]) -> (tempfile::TempDir, LmdbStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = LmdbStore::open(dir.path(), SyncMode::Never, 1 << 20).unwrap();
        let mut txn = store.write().unwrap();
        for k in keys {
            txn.put(Tree::Dn2id, k.as_bytes(), b"id").unwrap();
        }
        txn.commit().unwrap();
        (dir, store)
    }

    /// The whole walk, chunk after chunk from each bound on (past it).
    fn walk(txns: &[impl ReadTxn], per_store: usize, step: &mut impl FnMut(&[u8]) -> Step) -> Vec<Vec<String>> {
        let (mut chunks, mut from) = (Vec::new(), b"p".to_vec());
        loop {
            let (rows, bound) = next_chunk(txns, b"p", &from, (per_store, per_store * 2), step).unwrap();
            chunks.push(rows.iter().map(|r| format!("{}@{}", String::from_utf8_lossy(&r.0), r.2)).collect());
            let Some(mut bound) = bound else { return chunks };
            bound.push(0);
            from = bound;
        }
    }

    /// Rows of two stores come out in one key order, each key once, and
    /// no chunk gives a key before one a later chunk gives.
    #[test]
    fn chunks_of_two_stores_are_merged_in_key_order() {
        let (_a, a) = store(&["p", "p1", "p3", "p5", "p7", "q"]);
        let (_b, b) = store(&["p2", "p4", "p6", "p8", "p9"]);
        let txns = [a.read().unwrap(), b.read().unwrap()];
        let chunks = walk(&txns, 2, &mut |_| Step::Take);
        assert_eq!(
            chunks,
            [vec!["p@0", "p1@0"], vec!["p2@1", "p3@0", "p4@1"], vec!["p5@0", "p6@1", "p7@0", "p8@1"], vec!["p9@1"]]
        );
        // Passed-over keys count toward what a chunk sees, not its rows;
        // End stops a store's walk.
        let mut odd = |k: &[u8]| match k.last() {
            Some(b'9') => Step::End,
            Some(d) if d % 2 == 1 => Step::Take,
            _ => Step::Pass,
        };
        let all: Vec<String> = walk(&txns, 1, &mut odd).concat();
        assert_eq!(all, ["p1@0", "p3@0", "p5@0", "p7@0"]);
    }
}
