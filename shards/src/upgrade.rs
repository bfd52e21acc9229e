//! Upgrades of a data directory's format (`manifest::FORMAT`), at start.
//!
//! Format 3 prepares strings as RFC 4518 §2.6.1 says: a space other than
//! U+0020 (NBSP, U+2000..U+200A, U+3000) at a value's edge is dropped
//! once NFKC has mapped it to SPACE, so `pad` + NBSP equals `pad`, as in
//! slapd. Format 2 trimmed before the mapping and kept it. Only values
//! with such a character at an edge normalize otherwise, and their normal
//! forms are written in DN keys (which also place an entry in its
//! partition), index keys and merge state. A format 2 directory holding
//! none is format 3 as it is; one holding some is not opened, and the
//! entries are named: exporting and importing rewrites them.

use crate::entry::EntryView;
use crate::error::Result;
use crate::matching::{self, LEGACY_EDGE_SPACES};
use crate::store::{ReadTxn, Store};
use crate::stores::Offline;

/// The DNs of up to `most` entries whose DN or values format 3 normalizes
/// otherwise than format 2 did.
pub fn edge_space_entries(stores: &Offline, most: usize) -> Result<Vec<String>> {
    let mut found = Vec::new();
    for store in stores.engines() {
        let txn = store.read()?;
        // Entry by entry inside the scan: nothing kept per entry.
        let mut failed = None;
        txn.dn_keys(b"", b"", &mut |_, id| match txn.entry_by_id(id) {
            Ok(view) => {
                if let Some(view) = view.filter(normalizes_otherwise) {
                    found.push(view.dn().to_string());
                }
                found.len() < most
            }
            Err(e) => {
                failed = Some(e);
                false
            }
        })?;
        if let Some(e) = failed {
            return Err(e);
        }
        if found.len() >= most {
            break;
        }
    }
    Ok(found)
}

/// Whether the DN or a value has another normal form under format 3. An
/// ASCII text never does: only the mapping of other spaces changed.
fn normalizes_otherwise(view: &EntryView<'_>) -> bool {
    let dn = view.dn();
    // Parsed whole each time: `key_of` keeps parent keys per thread, which
    // would answer the second call with the first's.
    let key = |legacy: bool| with_legacy(legacy, || crate::dn::Dn::parse(dn).ok().map(|d| d.key()));
    if !dn.is_ascii() && key(true) != key(false) {
        return true;
    }
    view.attrs().any(|a| a.vals().any(|v| !v.is_ascii() && forms(a.name, v, true) != forms(a.name, v, false)))
}

/// Every normal form the store keeps of a value: its identity (merge
/// state, duplicates) and its ordering and substring index keys.
fn forms(name: &str, v: &[u8], legacy: bool) -> [Option<Vec<u8>>; 3] {
    with_legacy(legacy, || {
        let at = matching::attr_type(name);
        let by = |rule: Option<matching::Rule>| rule.and_then(|r| r.normalize(v)).map(|n| n.into_owned());
        [
            Some(matching::normalize(name, v).into_owned()),
            by(at.and_then(|t| t.ordering)),
            by(at.and_then(|t| t.substr)),
        ]
    })
}

fn with_legacy<T>(legacy: bool, f: impl FnOnce() -> T) -> T {
    LEGACY_EDGE_SPACES.set(legacy);
    let out = f();
    LEGACY_EDGE_SPACES.set(false);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dn::Dn;
    use crate::entry::{Attr, Entry};
    use crate::store::{EngineKind, Options, SyncMode};
    use crate::write::{run_batch, WriteOp};

    /// Entries written with format 2's forms (trimmed before the mapping)
    /// are found when their DN or a value has a NBSP or U+3000 at an edge,
    /// and only then.
    #[test]
    fn finds_the_entries_format_2_normalized_otherwise() {
        let dir = tempfile::tempdir().unwrap();
        let all = Offline::open(dir.path(), 1, Options::new(EngineKind::Lmdb, SyncMode::Never)).unwrap();
        let store = &all.engines()[0];
        let clock = || crate::write::Clock {
            hlc: crate::csn::Hlc::new(1, None, crate::csn::DEFAULT_MAX_FORWARD_SKEW),
            capture: false,
            incarnation: 0,
            contexts: Default::default(),
            commit_delay: None,
        };
        let put = |dn: &str, description: &str| {
            let attr = |name: &str, v: &str| Attr { name: name.into(), vals: vec![v.as_bytes().to_vec()] };
            let attrs = vec![attr("objectClass", "organizationalUnit"), attr("description", description)];
            let op =
                WriteOp::Add { key: Dn::parse(dn).unwrap().key(), parent: None, entry: Entry { dn: dn.into(), attrs } };
            run_batch(&**store, |_| 0, &mut [op], &mut clock()).pop().unwrap().unwrap();
        };
        with_legacy(true, || {
            put("ou=plain,dc=x", "ascii only");
            put("ou=\u{e9} inside,dc=x", "caf\u{e9} au\u{a0}lait");
            put("ou=nbsp\u{a0},dc=x", "x");
            put("ou=value,dc=x", "\u{3000}wide");
            // Only a parent's RDN changes (a parent that is no entry).
            put("ou=child,o=acme\u{a0},dc=x", "x");
        });
        let mut found = edge_space_entries(&all, 10).unwrap();
        found.sort();
        assert_eq!(found, ["ou=child,o=acme\u{a0},dc=x", "ou=nbsp\u{a0},dc=x", "ou=value,dc=x"]);
        assert_eq!(edge_space_entries(&all, 1).unwrap().len(), 1);
    }
}
