//! Marks: index keys that referral objects, aliases and subentries have
//! whatever the configuration, so that a search finds them below a base
//! with one prefix scan, and knows without a scan when a store never held
//! one (`Marked::may_exist`).

use super::*;

/// The classes whose entries have an index key of their own whatever the
/// configuration: `\x01class \0 dn-key \0 id`, the DN key cut at
/// `MARK_DN_CUT` bytes (the key stays under LMDB's 511), so the entries
/// of the class below a base are one prefix scan (a superset where the
/// cut applies; callers check each entry's DN).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marked {
    /// Referral objects (RFC 3296): a search sends references for them.
    Referral,
    /// Aliases (RFC 4512 §2.6): a search dereferences them.
    Alias,
    /// Subentries (RFC 3672): a search below them passes them over
    /// unless the Subentries control asks for them.
    Subentry,
    /// Glue entries (mirror mode's parents deleted on one side while the
    /// other added below them; slapd's syncrepl makes them too): hidden,
    /// and missing for writes, without ManageDsaIT.
    Glue,
}

/// Per class, set once an entry of it has been indexed in this process or
/// found in a store at start (`note_marks`); never cleared. While unset,
/// searches and writes skip every check for the class: one relaxed load.
static MARKS_SEEN: [std::sync::atomic::AtomicBool; 4] = [
    std::sync::atomic::AtomicBool::new(false),
    std::sync::atomic::AtomicBool::new(false),
    std::sync::atomic::AtomicBool::new(false),
    std::sync::atomic::AtomicBool::new(false),
];

const MARK_DN_CUT: usize = 480;

impl Marked {
    pub const ALL: [Marked; 4] = [Marked::Referral, Marked::Alias, Marked::Subentry, Marked::Glue];

    pub(crate) fn prefix(self) -> &'static [u8] {
        match self {
            Marked::Referral => b"\x01referral\0",
            Marked::Alias => b"\x01alias\0",
            Marked::Subentry => b"\x01subentry\0",
            Marked::Glue => b"\x01glue\0",
        }
    }

    /// The class's name and OID.
    fn names(self) -> (&'static str, &'static str) {
        match self {
            Marked::Referral => ("referral", "2.16.840.1.113730.3.2.6"),
            Marked::Alias => ("alias", "2.5.6.1"),
            Marked::Subentry => ("subentry", "2.5.17.0"),
            Marked::Glue => ("glue", "1.3.6.1.4.1.4203.666.3.4"),
        }
    }

    /// Whether an `objectClass` value names this class.
    pub fn is_class(self, value: &[u8]) -> bool {
        let (name, oid) = self.names();
        value.eq_ignore_ascii_case(name.as_bytes()) || value == oid.as_bytes()
    }

    /// Whether an entry is of this class (one of its `objectClass` values).
    pub fn marks(self, view: &crate::entry::EntryView<'_>) -> bool {
        view.get("objectClass").is_some_and(|a| a.vals().any(|v| self.is_class(v)))
    }

    /// Whether some store may hold an entry of this class.
    pub fn may_exist(self) -> bool {
        MARKS_SEEN[self as usize].load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(super) fn seen(self) {
        MARKS_SEEN[self as usize].store(true, std::sync::atomic::Ordering::Relaxed);
    }

    pub(super) fn key(self, dn_key: &[u8]) -> Vec<u8> {
        let mut k = self.prefix().to_vec();
        k.extend_from_slice(&dn_key[..dn_key.len().min(MARK_DN_CUT)]);
        k
    }

    /// Up to `most` entries of this class in this store whose DN key
    /// starts with `below` (a DN key; cut as the index cuts it, so a
    /// superset), after the index key `after` when resuming: (index key,
    /// id), in key order.
    pub fn below<T: ReadTxn>(
        self,
        txn: &T,
        below: &[u8],
        after: Option<&[u8]>,
        most: usize,
    ) -> Result<Vec<(Vec<u8>, Candidate)>> {
        let prefix = self.key(below);
        let mut out = Vec::new();
        txn.scan(Tree::Index, &prefix, after.unwrap_or(&prefix), &mut |k, _| {
            if Some(k) == after {
                return true;
            }
            if let Some(id) = k.len().checked_sub(8).filter(|at| *at >= prefix.len()).map(|at| &k[at..]) {
                out.push((k.to_vec(), id.try_into().expect("8 bytes")));
            }
            out.len() < most
        })?;
        Ok(out)
    }
}

/// At start: notes which marked classes this store holds, and gives the
/// entries written before their class was marked their key. They are
/// found through the `objectClass` equality index, so a store without any
/// costs one prefix scan per class and no write; where `objectClass` has
/// no equality index, `coredir reindex` gives them their keys.
pub(crate) fn note_marks(store: &crate::store::Engine) -> Result<()> {
    use crate::store::Store;
    let missing = {
        let txn = store.read()?;
        let mut missing = Vec::new();
        for mark in Marked::ALL {
            missing.extend(unmarked(&txn, mark)?);
        }
        missing
    };
    if !missing.is_empty() {
        let mut txn = store.write()?;
        for k in &missing {
            txn.put(Tree::Index, k, b"")?;
        }
        txn.commit()?;
    }
    let txn = store.read()?;
    for mark in Marked::ALL {
        let mut found = false;
        txn.scan(Tree::Index, mark.prefix(), mark.prefix(), &mut |_, _| {
            found = true;
            false
        })?;
        if found {
            mark.seen();
        }
    }
    Ok(())
}

/// The keys of `mark` missing for entries of its class (found through
/// the `objectClass` equality index, when there is one).
fn unmarked<T: ReadTxn>(txn: &T, mark: Marked) -> Result<Vec<Vec<u8>>> {
    let mut missing = Vec::new();
    let at = schema::get().attr("objectClass").expect("objectClass is built in");
    let norm = at.equality.and_then(|r| r.normalize(mark.names().0.as_bytes()));
    let (true, Some(norm)) = (config().kinds(&at.key).is_some_and(|k| k.eq), norm) else { return Ok(missing) };
    let mut prefix = head(&at.key, b'e');
    prefix.extend_from_slice(&norm);
    prefix.push(0);
    let mut ids: Vec<Candidate> = Vec::new();
    txn.scan(Tree::Index, &prefix, &prefix, &mut |k, _| {
        if let Some(id) = k.len().checked_sub(8).filter(|at| *at >= prefix.len()).map(|at| &k[at..]) {
            ids.push(id.try_into().expect("8 bytes"));
        }
        true
    })?;
    for id in ids {
        let Some(bytes) = txn.get(Tree::Id2entry, &id)? else { continue };
        let Ok(key) = crate::dn::key_of(crate::entry::EntryView::new(bytes)?.dn()) else { continue };
        let mut k = mark.key(&key);
        k.push(0);
        k.extend_from_slice(&id);
        if txn.get(Tree::Index, &k)?.is_none() {
            missing.push(k);
        }
    }
    Ok(missing)
}
