//! Glue entries for mirror mode: a parent deleted on one server while the
//! other added an entry below it.
//!
//! Each server applies the other's records, and a replicated delete or add
//! does not ask about children or parents (the local checks ran on the
//! server that took the write). So after such a pair both servers would
//! hold the child without its parent. Instead, when applying the peer's
//! delete removes an entry that still has children here, it comes back at
//! once as a *glue* entry (as 389-ds keeps it, and as slapd names such
//! entries): `objectClass: glue` and `extensibleObject`, its RDN values,
//! and an entryUUID derived from its DN and the deleted entry's, so that
//! the two servers, each making it on its own, make the same entry. Its
//! add is logged and travels like any other, so the server that deleted
//! the parent gets it too.
//!
//! As slapd's back-mdb treats glue (`refuse_write`, and the search's
//! `glue_visibility`): without the ManageDsaIT control searches pass glue
//! entries over (not what is below them), and a modify, delete or rename
//! of one is noSuchObject with the glue entry as matchedDN; a compare and
//! an add below it work. An operator finds glue with `ldapsearch -M
//! '(objectClass=glue)'` or `coredir ctl replication conflicts`, and
//! removes it by deleting what is below it, then it with `ldapdelete -M`.

use crate::ctx::Ctx;
use crate::ops::syncrepl::Located;
use sha2::{Digest, Sha256};
use shards::dn::Dn;
use shards::entry::Entry;
use shards::write::Images;
use shards::ReadTxn;
use shards::{now_generalized, Result};
use std::collections::BTreeSet;

/// A modify, delete or rename of a glue entry without ManageDsaIT: as
/// slapd, noSuchObject, the glue entry itself the matchedDN (when the
/// requester may know it exists; otherwise as any missing entry).
pub fn refuse_write(
    conn: &crate::conn::Conn,
    identity: &crate::conn::Identity,
    dn: &Dn,
    manage_dsa_it: bool,
) -> Result<()> {
    if manage_dsa_it || !shards::index::Marked::Glue.may_exist() || dn.is_root() {
        return Ok(());
    }
    let key = dn.key();
    if conn.ctx.shard.with_entry(&key, |view| shards::index::Marked::Glue.marks(view))? != Some(true) {
        return Ok(());
    }
    let text = dn.to_string_form();
    let e = shards::Error::no_such_object(&text);
    Err(match crate::ops::disclosed(conn, identity, &key) {
        true => e.with_matched(text),
        false => crate::ops::with_matched_in(conn, identity, dn, dn, e, None),
    })
}

/// The entries a frame's delete records removed here: (DN key as stored
/// here, entryUUID). Taken from the images, not the records' DNs: a delete
/// applies by entryUUID, to the entry wherever this server shows it.
pub fn removed(images: &[Images], deleted: &BTreeSet<[u8; 16]>) -> Vec<(Vec<u8>, [u8; 16])> {
    let gone = images.iter().filter(|i| i.after.is_none()).filter_map(|i| i.before.as_ref());
    gone.filter_map(|e| {
        let uuid = shards::merge::uuid_of(e).ok().filter(|u| deleted.contains(u))?;
        Some((Dn::parse(&e.dn).ok()?.key(), uuid))
    })
    .collect()
}

/// Makes glue for every entry the peer's records deleted that still has
/// entries below it here, and for its missing ancestors, parents first.
/// Not for an entry shown without its parent: the parent's own add may
/// simply come later (records of different partitions are stamped on
/// different clocks); the server that deleted the parent learns of the
/// glue from the one that makes it. Each glue's entryUUID derives from
/// its DN and the deleted entry's, so both servers make the same one, and
/// a later incident at the same DN (the glue itself deleted under a new
/// child) makes a new one rather than meeting the old one's tombstone.
pub async fn keep_parents(ctx: &Ctx, removed: Vec<(Vec<u8>, [u8; 16])>) -> Result<()> {
    let shard = &ctx.shard;
    let mut missing: Vec<(Dn, [u8; 16])> = Vec::new();
    for (key, uuid) in removed {
        if shard.get_entry(&key)?.is_some() || shards::write::children(&shard.read_for(&key)?, &key)? == 0 {
            continue;
        }
        // The DN itself, from an entry below it (keys do not spell it).
        let Some(dn) = dn_below(ctx, &key)? else { continue };
        let mut at = dn;
        while !at.is_root() && !ctx.is_suffix(&at) && shard.get_entry(&at.key())?.is_none() {
            missing.push((at.clone(), uuid));
            at = at.parent();
        }
    }
    missing.sort_by_key(|(d, _)| d.depth());
    missing.dedup_by(|a, b| a.0.key() == b.0.key());
    for (dn, cause) in missing {
        let entry = glue_entry(&dn, &cause)?;
        eprintln!("coredir: replication: {} was deleted while the peer added below it: kept as glue", entry.dn);
        match shard.add(&dn, entry, false).await {
            // The peer's glue (the same entry) got here first.
            Err(e) if e.code == ldap3_proto::LdapResultCode::EntryAlreadyExists => {}
            r => r?,
        }
    }
    Ok(())
}

/// The entries a frame's records moved away from their DN here, by a
/// rename of the peer: (the DN they left, entryUUID).
pub fn moved_away(images: &[Images], deleted: &BTreeSet<[u8; 16]>) -> Vec<(Dn, [u8; 16])> {
    let moved = images.iter().filter_map(|i| {
        let before = i.before.as_ref()?;
        let uuid = shards::merge::uuid_of(before).ok()?;
        let old = Dn::parse(&before.dn).ok()?;
        let gone = match &i.after {
            Some(after) => Dn::parse(&after.dn).ok()?.key() != old.key(),
            // To another partition (its state in a parcel), not deleted.
            None => !deleted.contains(&uuid),
        };
        gone.then_some((old, uuid))
    });
    moved.collect()
}

/// Entries left below a DN the peer's rename moved away from here: added
/// (or moved) below it here while the peer renamed it, so the peer's
/// rename did not know of them. As 389-ds places a child by its parent's
/// unique id, they follow their parent to its new DN, each a logged
/// rename that travels to the peer (which holds them below the old DN
/// too, without a parent). Asked only once the peer has nothing more to
/// send (a heartbeat): until then, its own renames of what its rename
/// moved may still be on their way. Returns what must be asked again (the
/// parent's new place not known here yet).
pub async fn follow_parents(ctx: &Ctx, moved: Vec<(Dn, [u8; 16])>) -> Vec<(Dn, [u8; 16])> {
    let shard = &ctx.shard;
    let is_top = |d: &Dn| ctx.is_suffix(d);
    let mut again = Vec::new();
    for (old, uuid) in moved {
        if !left_below(ctx, &old) {
            continue;
        }
        // Where the entry is now, however many renames on (`locate`
        // checks its entryUUID there).
        let located = crate::ops::syncrepl::locate(shard, &uuid, old.to_string_form(), None);
        let new = match located {
            Ok(Located::Found(key, entry, _)) => match Dn::parse(&entry.dn) {
                Ok(dn) if dn.key() == key => dn,
                _ => continue,
            },
            // Deleted since: what is below stays, as below a deleted parent.
            Ok(Located::Gone) => continue,
            Ok(Located::Pending) | Err(_) => {
                again.push((old, uuid));
                continue;
            }
        };
        eprintln!(
            "coredir: replication: entries below {} (renamed by the peer to {}) follow it",
            old.to_string_form(),
            new.to_string_form()
        );
        if let Err(e) = crate::ops::modify_dn::finish_replicated(shard, &is_top, &old, &new).await {
            eprintln!("coredir: replication: moving what was below {}: {}", old.to_string_form(), e.message);
        }
    }
    again
}

/// Whether entries are below `dn` here while no entry is at it.
pub fn left_below(ctx: &Ctx, dn: &Dn) -> bool {
    let (shard, key) = (&ctx.shard, dn.key());
    let left =
        || -> Result<bool> { Ok(!shard.exists(&key)? && shards::write::children(&shard.read_for(&key)?, &key)? > 0) };
    left().unwrap_or(false)
}

/// The DN with storage key `key`, from an entry stored below it.
fn dn_below(ctx: &Ctx, key: &[u8]) -> Result<Option<Dn>> {
    let mut prefix = key.to_vec();
    prefix.push(shards::dn::KEY_SEPARATOR);
    for store in ctx.shard.stores.iter() {
        let mut found = None;
        store.read()?.dn_keys(&prefix, &prefix, &mut |k, _| {
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

/// The glue entry at `dn` for the deleted entry `cause`: the same on both
/// servers but for its stamps.
fn glue_entry(dn: &Dn, cause: &[u8; 16]) -> Result<Entry> {
    let digest = Sha256::new().chain_update(b"coredir glue\0").chain_update(cause).chain_update(dn.key()).finalize();
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
