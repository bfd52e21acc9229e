//! Glue entries for mirror mode: a parent deleted on one server while the
//! other added an entry below it.
//!
//! Each server applies the other's records, and a replicated delete or add
//! does not ask about children or parents (the local checks ran on the
//! server that took the write). So after such a pair both servers would
//! hold the child without its parent. Instead, when applying the peer's
//! delete removes an entry that still has children here, it comes back at
//! once as a *glue* entry (as
//! 389-ds keeps it, and as slapd names such entries): `objectClass: glue`
//! and `extensibleObject`, its RDN values, and an entryUUID derived from
//! its DN, so that the two servers, each making it on its own, make the
//! same entry. Its add is logged and travels like any other, so the
//! server that deleted the parent gets it too. An operator finds glue with
//! `(objectClass=glue)` or `coredir ctl replication conflicts`, and
//! removes it by deleting what is below it, then it.

use crate::server::Ctx;
use sha2::{Digest, Sha256};
use shards::dn::Dn;
use shards::entry::Entry;
use shards::store::{ReadTxn, Store};
use shards::{now_generalized, Result};
use std::collections::BTreeSet;

/// Makes glue for every entry the peer's records deleted (by DN key) that
/// still has entries below it here, and for its missing ancestors,
/// parents first. A rename away is no such case (its children follow it),
/// nor is an entry shown without its parent: the parent's own add may
/// simply come later (records of different partitions are stamped on
/// different clocks); the server that deleted the parent learns of the
/// glue from the one that makes it.
pub async fn keep_parents(ctx: &Ctx, deleted: BTreeSet<Vec<u8>>) -> Result<()> {
    let shard = &ctx.shard;
    let mut needed: BTreeSet<Vec<u8>> = BTreeSet::new();
    for key in deleted {
        if shard.get_entry(&key)?.is_some() || shards::write::children(&shard.store_for(&key).read()?, &key)? == 0 {
            continue;
        }
        needed.insert(key);
    }
    if needed.is_empty() {
        return Ok(());
    }
    // The DNs themselves, from an entry below each (keys do not spell them).
    let mut missing: Vec<Dn> = Vec::new();
    for key in &needed {
        let Some(dn) = dn_below(ctx, key)? else { continue };
        let mut at = dn;
        while !at.is_root() && !ctx.is_suffix(&at) && shard.get_entry(&at.key())?.is_none() {
            missing.push(at.clone());
            at = at.parent();
        }
    }
    missing.sort_by_key(|d| d.depth());
    missing.dedup_by(|a, b| a.key() == b.key());
    for dn in missing {
        let entry = glue_entry(&dn)?;
        eprintln!("coredir: replication: {} was deleted while the peer added below it: kept as glue", entry.dn);
        match crate::ops::add::insert(shard, &dn, entry, false).await {
            // The peer's glue (the same entry) got here first.
            Err(e) if e.code == ldap3_proto::LdapResultCode::EntryAlreadyExists => {}
            r => r?,
        }
    }
    Ok(())
}

/// The DN with storage key `key`, from an entry stored below it.
fn dn_below(ctx: &Ctx, key: &[u8]) -> Result<Option<Dn>> {
    let mut prefix = key.to_vec();
    prefix.push(shards::dn::KEY_SEPARATOR);
    for store in ctx.shard.stores.iter() {
        let mut found = None;
        store.read()?.scan(shards::store::Tree::Dn2id, &prefix, &prefix, &mut |k, _| {
            found = Some(k.to_vec());
            false
        })?;
        if let Some(child) = found {
            let Some(entry) = ctx.shard.get_entry(&child)? else { continue };
            return Ok(Some(Dn::parse(&entry.dn)?.ancestor(shards::dn::key_depth(key))));
        }
    }
    Ok(None)
}

/// The glue entry at `dn`: the same on both servers but for its stamps.
fn glue_entry(dn: &Dn) -> Result<Entry> {
    let digest = Sha256::new().chain_update(b"coredir glue\0").chain_update(dn.key()).finalize();
    let mut bytes: [u8; 16] = digest[..16].try_into().expect("16 bytes");
    // An RFC 9562 version 8 (custom) UUID.
    bytes[6] = (bytes[6] & 0x0f) | 0x80;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let uuid = uuid::Uuid::from_bytes(bytes).hyphenated().to_string();
    let mut entry = Entry { dn: dn.pretty()?, attrs: Vec::new() };
    let now = now_generalized();
    let set =
        |e: &mut Entry, name: &str, vals: &[&str]| e.set(name, vals.iter().map(|v| v.as_bytes().to_vec()).collect());
    set(&mut entry, "objectClass", &["top", "glue", "extensibleObject"]);
    for ava in &dn.rdn().expect("not the root").avas {
        entry.add_values(&ava.attr, std::slice::from_ref(&ava.value))?;
    }
    set(&mut entry, "structuralObjectClass", &["glue"]);
    set(&mut entry, "entryUUID", &[&uuid]);
    set(&mut entry, "createTimestamp", &[&now]);
    set(&mut entry, "modifyTimestamp", &[&now]);
    Ok(entry)
}
