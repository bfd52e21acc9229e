//! Equality indexes, kept beside the entries in each shard's store
//! (back-mdb's `index.c` and `filterindex.c`).
//!
//! One tree, `index`, holds for every indexed attribute value of every
//! entry the key `attr \0 normalized-value \0 id`, with an empty value:
//! a search reads each candidate entry anyway, and checks its scope there.
//! Values are cut at `MAX_VALUE` bytes; a lookup is therefore a superset of
//! the matches, and every candidate is checked against the whole filter.
//!
//! Indexed attributes (equality): the defaults operators expect from an
//! OpenLDAP configuration; configurable indexes and `reindex` come with the
//! schema work.

use crate::entry::Entry;
use crate::error::Result;
use crate::matching::{self, normalize};
use crate::store::{ReadTxn, Tree, WriteTxn};
use ldap3_proto::proto::LdapFilter;

pub const EQUALITY: &[&str] = &[
    "objectclass",
    "uid",
    "cn",
    "sn",
    "mail",
    "member",
    "uniquemember",
    "memberuid",
    "uidnumber",
    "gidnumber",
    "entryuuid",
];

const MAX_VALUE: usize = 256;

fn indexed(attr: &str) -> Option<String> {
    let canon = matching::canonical(attr);
    EQUALITY.contains(&canon.as_ref()).then(|| canon.into_owned())
}

fn prefix(attr: &str, value: &[u8]) -> Vec<u8> {
    let norm = normalize(attr, value);
    let norm = &norm[..norm.len().min(MAX_VALUE)];
    let mut key = Vec::with_capacity(attr.len() + norm.len() + 10);
    key.extend_from_slice(attr.as_bytes());
    key.push(0);
    key.extend_from_slice(norm);
    key.push(0);
    key
}

/// The index keys of an entry.
fn keys(entry: &Entry, id: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for a in &entry.attrs {
        if let Some(canon) = indexed(&a.name) {
            for v in &a.vals {
                let mut k = prefix(&canon, v);
                k.extend_from_slice(id);
                out.push(k);
            }
        }
    }
    out
}

pub fn add<T: WriteTxn>(txn: &mut T, entry: &Entry, id: &[u8]) -> Result<()> {
    for k in keys(entry, id) {
        txn.put(Tree::Index, &k, b"")?;
    }
    Ok(())
}

pub fn remove<T: WriteTxn>(txn: &mut T, entry: &Entry, id: &[u8]) -> Result<()> {
    for k in keys(entry, id) {
        txn.delete(Tree::Index, &k)?;
    }
    Ok(())
}

/// A candidate from an index: an entry id.
pub type Candidate = [u8; 8];

/// Candidates for `filter` from this store's indexes, or `None` when the
/// filter cannot be answered from them (the caller scans instead).
pub fn candidates<T: ReadTxn>(txn: &T, filter: &LdapFilter) -> Result<Option<Vec<Candidate>>> {
    Ok(match filter {
        LdapFilter::Equality(a, v) => match indexed(a) {
            Some(canon) => Some(lookup(txn, &canon, v.as_bytes())?),
            None => None,
        },
        LdapFilter::And(fs) => {
            let mut best: Option<Vec<Candidate>> = None;
            for f in fs {
                if let Some(c) = candidates(txn, f)? {
                    if best.as_ref().is_none_or(|b| c.len() < b.len()) {
                        best = Some(c);
                    }
                }
            }
            best
        }
        LdapFilter::Or(fs) if !fs.is_empty() => {
            let mut all = Vec::new();
            for f in fs {
                match candidates(txn, f)? {
                    Some(c) => all.extend(c),
                    None => return Ok(None),
                }
            }
            all.sort();
            all.dedup();
            Some(all)
        }
        _ => None,
    })
}

fn lookup<T: ReadTxn>(txn: &T, attr: &str, value: &[u8]) -> Result<Vec<Candidate>> {
    let prefix = prefix(attr, value);
    let mut out = Vec::new();
    txn.scan(Tree::Index, &prefix, &prefix, &mut |k, _| {
        if let Some(id) = k.len().checked_sub(8).filter(|at| *at >= prefix.len()).map(|at| &k[at..]) {
            out.push(id.try_into().expect("8 bytes"));
        }
        true
    })?;
    Ok(out)
}
