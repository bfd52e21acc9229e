//! Renames that span owners, made crash-atomic by an intent record.
//!
//! DNs place entries in partitions, so a modify-DN whose new DN has another
//! owner, and every rename of an entry with children (each descendant's DN
//! changes, and with it its partition), is several commits on several
//! owners. Before the first of them, the rename's *intent* (the old and new
//! DN of the renamed entry, under `N` + its entryUUID in `meta`) is
//! committed; it is removed after the last. A start that finds an intent
//! finishes the rename (`ops::modify_dn::resume`): once the entry is at its
//! new DN, every entry still below the old DN is moved below the new one,
//! and the old entries are removed, deepest first. An intent whose entry
//! never reached its new DN is dropped: the rename never happened. So a
//! crash leaves the old tree or the new one, never both and never half.
//! With the changelog on, entries are not copied but moved, each a logged
//! rename (`ops::modify_dn`): finishing moves what is still below the old
//! DN after the top.

use crate::dn::{Dn, KEY_SEPARATOR};
use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::store::{ReadTxn, Store, Tree, WriteTxn};
use crate::stores::Stores;

const INTENT: u8 = b'N';

/// A rename in progress: the renamed entry's UUID and its DNs.
#[derive(Debug, Clone, PartialEq)]
pub struct Intent {
    pub uuid: [u8; 16],
    pub old: String,
    pub new: String,
}

fn key(uuid: &[u8; 16]) -> [u8; 17] {
    let mut k = [INTENT; 17];
    k[1..].copy_from_slice(uuid);
    k
}

impl Intent {
    fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.old.len() + self.new.len() + 1);
        v.extend_from_slice(self.old.as_bytes());
        v.push(0);
        v.extend_from_slice(self.new.as_bytes());
        v
    }

    fn decode(k: &[u8], v: &[u8]) -> Option<Intent> {
        let uuid = k.get(1..17)?.try_into().ok()?;
        let cut = v.iter().position(|b| *b == 0)?;
        let text = |b: &[u8]| String::from_utf8(b.to_vec()).ok();
        Some(Intent { uuid, old: text(&v[..cut])?, new: text(&v[cut + 1..])? })
    }
}

/// Records (`Some`) or clears (`None`) an intent (`WriteOp::Intent`). One
/// rename of an entry at a time: two carrying one subtree to two places
/// would leave both copies.
pub fn write<T: WriteTxn>(txn: &mut T, uuid: &[u8; 16], intent: Option<&Intent>) -> Result<()> {
    match intent {
        Some(_) if txn.get(Tree::Meta, &key(uuid))?.is_some() => {
            Err(Error::new(ldap3_proto::LdapResultCode::Busy, "another rename of this entry is in progress"))
        }
        Some(i) => txn.put(Tree::Meta, &key(uuid), &i.encode()),
        None => txn.delete(Tree::Meta, &key(uuid)).map(|_| ()),
    }
}

/// Every intent a store holds.
pub fn pending<T: ReadTxn>(txn: &T) -> Result<Vec<Intent>> {
    let mut out = Vec::new();
    let mut corrupt = false;
    txn.scan(Tree::Meta, &[INTENT], &[INTENT], &mut |k, v| {
        match Intent::decode(k, v) {
            Some(i) if k.len() == 17 => out.push(i),
            _ => corrupt = true,
        }
        true
    })?;
    if corrupt {
        return Err(Error::other("a rename intent in meta is corrupt"));
    }
    Ok(out)
}

/// One entry of a subtree being renamed: its old DN key and the entry.
pub struct Member {
    pub old_key: Vec<u8>,
    pub entry: Entry,
}

/// The entries strictly below `base` in every store, parents before their
/// children; past `limit` entries (0: none), `adminLimitExceeded`.
pub fn below(stores: &Stores, base: &[u8], limit: usize) -> Result<Vec<Member>> {
    let mut prefix = base.to_vec();
    prefix.push(KEY_SEPARATOR);
    let mut out = Vec::new();
    let mut failed = None;
    for store in stores.engines() {
        // Each entry read in the snapshot that found its DN.
        let txn = store.read()?;
        txn.scan(Tree::Dn2id, &prefix, &prefix, &mut |k, id| {
            if limit > 0 && out.len() == limit {
                failed = Some(Error::new(
                    ldap3_proto::LdapResultCode::AdminLimitExceeded,
                    format!("the subtree has more than {limit} entries below it (limits.max_rename_entries)"),
                ));
                return false;
            }
            let read = txn
                .get(Tree::Id2entry, id)
                .and_then(|bytes| Entry::decode(bytes.ok_or_else(|| Error::other("dn2id names a missing entry"))?));
            match read {
                Ok(entry) => out.push(Member { old_key: k.to_vec(), entry }),
                Err(e) => failed = Some(e),
            }
            failed.is_none()
        })?;
        if let Some(e) = failed {
            return Err(e);
        }
    }
    // Keys run from the root down: a parent's key sorts before its children's.
    out.sort_unstable_by(|a, b| a.old_key.cmp(&b.old_key));
    Ok(out)
}

/// The DN an entry below `old_base` takes below `new_base`.
pub fn moved_dn(dn: &Dn, old_base: &Dn, new_base: &Dn) -> Dn {
    let extra = dn.depth() - old_base.depth();
    let mut out = new_base.clone();
    for rdn in dn.rdns()[..extra].iter().rev() {
        out = Dn::renamed(rdn.clone(), &out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_intent_reads_back() {
        let i = Intent { uuid: [7; 16], old: "cn=a,dc=x".into(), new: "cn=b,ou=y,dc=x".into() };
        assert_eq!(Intent::decode(&key(&i.uuid), &i.encode()), Some(i));
        assert_eq!(Intent::decode(&key(&[1; 16]), b"no separator"), None);
    }

    #[test]
    fn descendants_keep_their_rdns_under_the_new_base() {
        let (old, new) = (Dn::parse("ou=a,dc=x").unwrap(), Dn::parse("ou=b,ou=c,dc=x").unwrap());
        let dn = Dn::parse("cn=k,ou=s,ou=a,dc=x").unwrap();
        assert_eq!(moved_dn(&dn, &old, &new).norm(), "cn=k,ou=s,ou=b,ou=c,dc=x");
    }
}
