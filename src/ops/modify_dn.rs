//! Modify DN (RFC 4511 §4.9): new RDN, `deleteoldrdn`, `newSuperior`.
//!
//! A rename is a move (DESIGN.md): a leaf whose old and new DNs have the
//! same owner moves in one atomic `Move`. Anything else (another owner, or
//! an entry with children, whose descendants all change DN and so
//! partition) is a *carry* made crash-atomic by an intent record
//! (`shards::renames`): the intent is committed, the entry and then its
//! descendants, parents first, are inserted at their new DNs, the old
//! entries are removed deepest first, and the intent is cleared; a start
//! that finds an intent finishes the carry (`resume`). A subtree is bounded
//! by `limits.max_rename_entries` (`adminLimitExceeded` past it). While a
//! carry runs, a search may see parts of both trees; clients are answered
//! only once the old tree is gone.
//!
//! In mirror mode the entry keeps its replicated state: the old DN's owner
//! logs the rename and hands the state to the new DN's partition
//! (`shards::moves`), which shows the entry there; the images of both steps
//! count the parents. Entries with children cannot be renamed there yet
//! (`notAllowedOnNonLeaf`, saying so).

use crate::acl::{Attr, Level};
use crate::conn::Conn;
use crate::ops::add::insert;
use crate::ops::controls::{self, Controls};
use crate::ops::delete::remove;
use crate::ops::{access, parse_dn, with_matched};
use ldap3_proto::control::LdapControl;
use ldap3_proto::proto::LdapModifyDNRequest;
use ldap3_proto::LdapResultCode;
use shards::dn::{Dn, Rdn};
use shards::entry::Entry;
use shards::moves;
use shards::renames::{self, Intent, Member};
use shards::store::Store;
use shards::write::{children, Extras, Images, Parent, WriteOp};
use shards::{now_generalized, Error, Result, Shard};
use std::rc::Rc;

/// The old DN's owner's part of a rename (the parents are counted apart).
fn move_op(old_key: &[u8], old_text: &str, new_key: Vec<u8>, entry: Entry) -> WriteOp {
    WriteOp::Move {
        old_key: old_key.to_vec(),
        old_dn: old_text.to_string(),
        old_parent: None,
        new_key,
        new_parent: None,
        entry,
    }
}

/// A rename in mirror mode: the new parent counted (and so kept) while the
/// old DN's owner moves the entry and the state is delivered; the images
/// count both parents.
async fn move_replicated(conn: &Conn, old: &Dn, old_text: &str, new: &Dn, entry: Entry) -> Result<()> {
    let shard = &conn.ctx.shard;
    let (old_key, new_key) = (old.key(), new.key());
    if shard.get_entry(&new_key)?.is_some() {
        return Err(Error::already_exists(&entry.dn));
    }
    let guard = Parent::of(new);
    shard.submit(&guard.key.clone(), WriteOp::Child { parent: guard.clone(), delta: 1 }).await?;
    let moved = shard.submit_for(shard.owner_of(&old_key), move_op(&old_key, old_text, new_key, entry)).await;
    let is_top = |d: &Dn| conn.ctx.is_suffix(d);
    if let Ok(images) = &moved {
        moves::count_children(shard, images.iter().map(|b| (**b).clone()), &is_top).await;
    }
    let delivered = match &moved {
        Ok(_) => moves::deliver(shard, &is_top).await,
        Err(_) => Ok(()),
    };
    let _ = shard.submit(&guard.key.clone(), WriteOp::Child { parent: guard, delta: -1 }).await;
    moved.and(delivered)
}

pub async fn handle(conn: Rc<Conn>, req: LdapModifyDNRequest, ctrls: Controls) -> Result<Vec<LdapControl>> {
    let old = parse_dn(&req.dn)?;
    let rdn = Rdn::parse(&req.newrdn)?;
    let superior = match &req.new_superior {
        Some(s) => parse_dn(s)?,
        None => old.parent(),
    };
    let ctx = &conn.ctx;
    let new = Dn::renamed(rdn, &superior);
    // As slapd: a rename that leaves its naming context (the suffix itself
    // included) would span two DSAs.
    if old.is_root() || ctx.is_suffix(&old) || !ctx.within_suffix(&new) || ctx.is_suffix(&new) {
        return Err(Error::new(
            LdapResultCode::AffectsMultipleDSAs,
            format!("{} is outside the naming context of {}", new.to_string_form(), req.dn),
        ));
    }
    // Stored, and returned, in slapd's pretty form (which also validates it).
    let new_text = new.pretty()?;
    for ava in new.rdn().map(|r| r.avas.as_slice()).unwrap_or_default() {
        // As slapd: the rename would write a no-user-modification type.
        if !shards::write::user_modifiable(&ava.attr) {
            return Err(Error::new(
                LdapResultCode::ConstraintViolation,
                format!("{}: no user modification allowed", ava.attr),
            ));
        }
        crate::ops::add::check_naming_type(&ava.attr)?;
    }
    if superior.is_within(&old) {
        return Err(Error::unwilling("newSuperior is the entry itself or below it"));
    }
    let shard = &ctx.shard;
    let identity = conn.identity.borrow().clone();
    let live = conn.ctx.live();
    if let Some(a) = conn.access(&live, &identity) {
        // As slapd: write on the entry, on both parents' children and on
        // the new RDN's attributes.
        let mut attrs = vec![(Attr::Entry, "entry")];
        let rdn = new.rdn().expect("a renamed entry has an RDN");
        attrs.extend(rdn.avas.iter().map(|ava| (a.acl().class(&ava.attr), ava.attr.as_str())));
        access::require(&a, shard, &old.key(), &attrs, Level::Write)?;
        let children = [(Attr::Children, "children of the parent")];
        access::require(&a, shard, &old.parent().key(), &children, Level::Write)?;
        if superior != old.parent() {
            access::require(&a, shard, &superior.key(), &children, Level::Write)?;
        }
    }
    let in_place = old.key() == new.key();
    let (mut entry, below) = read_subtree(&conn, &old, &req.dn, in_place).map_err(|e| with_matched(&conn, &old, e))?;
    // Checked on the entry as read: a rename is not one owner transaction.
    controls::check_assertion(&conn, ctrls.assertion.as_ref(), &old.key(), &entry)?;
    let before = ctrls.pre_read.as_ref().map(|_| entry.clone());
    rename_entry(&mut entry, &old, &new, new_text, req.deleteoldrdn, identity.dn());
    shards::schema::check::check_entry(&entry, &new)?;
    let after = ctrls.post_read.as_ref().map(|_| entry.clone());
    let moved = match shard.stamping.capture {
        true => move_replicated(&conn, &old, &req.dn, &new, entry).await,
        false => move_entry(shard, &old, &new, entry, below).await,
    };
    // slapd names no matchedDN for a missing newSuperior.
    moved?;
    let images = Some(Box::new(Images { before, after }));
    Ok(controls::read_entry_controls(&conn, images, &ctrls.pre_read, &ctrls.post_read))
}

/// The entry to rename and, when it has children that move with it (not
/// `in_place`), every entry below it (within `limits.max_rename_entries`).
fn read_subtree(conn: &Conn, dn: &Dn, dn_text: &str, in_place: bool) -> Result<(Entry, Vec<Member>)> {
    let (shard, key) = (&conn.ctx.shard, dn.key());
    let entry = shard.get_entry(&key)?.ok_or_else(|| Error::no_such_object(dn_text))?;
    if children(&shard.store_for(&key).read()?, &key)? == 0 || (in_place && shard.stamping.capture) {
        return Ok((entry, Vec::new()));
    }
    if shard.stamping.capture {
        return Err(Error::new(
            LdapResultCode::NotAllowedOnNonLeaf,
            format!(
                "{dn_text} has children: subtree rename is not available with replication (mirror mode, syncrepl) yet"
            ),
        ));
    }
    let limit = conn.ctx.live().limits.max_rename_entries;
    Ok((entry, renames::below(&shard.stores, &key, limit)?))
}

/// Applies the RDN change to the entry's attributes and stamps it.
fn rename_entry(entry: &mut Entry, old: &Dn, new: &Dn, new_text: String, delete_old_rdn: bool, modifier: &str) {
    let new_rdn = new.rdn().expect("not the root");
    if delete_old_rdn {
        for ava in &old.rdn().expect("not the root").avas {
            // A value the new RDN keeps in another spelling (`cn=leaf` to
            // `cn=LEAF`) goes too: slapd stores the new spelling.
            let _ = entry.apply(&[shards::entry::Mod::Delete(shards::entry::Attr {
                name: ava.attr.clone(),
                vals: vec![ava.value.clone()],
            })]);
        }
    }
    for ava in &new_rdn.avas {
        if !entry.has_value(&ava.attr, &ava.value) {
            let _ = entry.add_values(&ava.attr, std::slice::from_ref(&ava.value));
        }
    }
    entry.dn = new_text;
    entry.set("modifiersName", vec![modifier.as_bytes().to_vec()]);
    entry.set("modifyTimestamp", vec![now_generalized().into_bytes()]);
    // The new DN's owner stamps the rename's CSN (an add keeps one it finds).
    entry.remove("entryCSN");
}

async fn move_entry(shard: &Rc<Shard>, old: &Dn, new: &Dn, entry: Entry, below: Vec<Member>) -> Result<()> {
    let (old_key, new_key) = (old.key(), new.key());
    let old_text = old.to_string_form();
    // The same DN in another spelling (`cn=Leaf` to `cn=leaf`) stays in
    // place, children and all; their stored DNs take the new spelling.
    if old_key == new_key {
        shard.submit(&old_key, move_op(&old_key, &old_text, new_key, entry)).await?;
        return respell(shard, old, new, below).await;
    }
    if !below.is_empty() || shard.owner_of(&old_key) != shard.owner_of(&new_key) {
        return carry(shard, old, new, entry, below).await;
    }
    let old_parent = Parent::of(old);
    let new_parent = Parent::of(new);
    let parent_changed = old_parent.key != new_parent.key;
    if parent_changed {
        shard.submit(&new_parent.key.clone(), WriteOp::Child { parent: new_parent.clone(), delta: 1 }).await?;
    }
    if let Err(e) = shard.submit(&old_key, move_op(&old_key, &old_text, new_key, entry)).await {
        if parent_changed {
            let _ = shard.submit(&new_parent.key.clone(), WriteOp::Child { parent: new_parent, delta: -1 }).await;
        }
        return Err(e);
    }
    if parent_changed {
        shard.submit(&old_parent.key.clone(), WriteOp::Child { parent: old_parent, delta: -1 }).await?;
    }
    Ok(())
}

/// A rename as several commits (see the module text): intent, inserts at
/// the new DNs parents first, removals deepest first, intent cleared. An
/// insert that fails undoes the inserts before it.
async fn carry(shard: &Rc<Shard>, old: &Dn, new: &Dn, entry: Entry, below: Vec<Member>) -> Result<()> {
    let uuid = shards::changelog::uuid_of(&entry)?;
    let intent = Intent { uuid, old: old.to_string_form(), new: entry.dn.clone() };
    let home = shard.owner_of(&old.key());
    shard.submit_to(home, WriteOp::Intent { uuid, intent: Some(intent) }).await?;
    let mut arrivals = vec![(new.clone(), entry)];
    arrivals.extend(below.into_iter().map(|m| moved(m.entry, old, new)).collect::<Result<Vec<_>>>()?);
    let departures: Vec<Dn> = arrivals.iter().map(|(dn, _)| renames::moved_dn(dn, new, old)).collect();
    let mut inserted = Vec::new();
    if let Err(e) = insert_all(shard, arrivals, false, &mut inserted).await {
        // Only what this carry inserted: the new DN may be taken by another entry.
        let _ = remove_all(shard, inserted, true).await;
        let _ = shard.submit_to(home, WriteOp::Intent { uuid, intent: None }).await;
        return Err(e);
    }
    // From here on the rename is done for a crash: what fails now is
    // finished by the next start (`resume`), which keeps the intent.
    remove_all(shard, departures, false).await?;
    shard.submit_to(home, WriteOp::Intent { uuid, intent: None }).await
}

/// An entry from below the old DN as it is below the new one.
fn moved(mut entry: Entry, old: &Dn, new: &Dn) -> Result<(Dn, Entry)> {
    let dn = renames::moved_dn(&Dn::parse(&entry.dn)?, old, new);
    entry.dn = dn.pretty()?;
    Ok((dn, entry))
}

/// Rewrites the stored DNs below an entry renamed in place.
async fn respell(shard: &Rc<Shard>, old: &Dn, new: &Dn, below: Vec<Member>) -> Result<()> {
    for wave in below.chunks(WAVE) {
        let mut tasks = Vec::with_capacity(wave.len());
        for m in wave {
            let (dn, entry) = moved(m.entry.clone(), old, new)?;
            let op = move_op(&m.old_key, &dn.to_string_form(), m.old_key.clone(), entry);
            let s = shard.clone();
            let key = m.old_key.clone();
            tasks.push(glommio::spawn_local(async move { s.submit(&key, op).await }));
        }
        for t in tasks {
            t.await?;
        }
    }
    Ok(())
}

/// Most inserts or removals of one carry in flight at once.
const WAVE: usize = 256;

/// Inserts entries, parents before children: one depth at a time, side by
/// side within it so that group commits take many; the DNs inserted go to
/// `inserted`. With `resuming`, an entry already there is left alone.
async fn insert_all(
    shard: &Rc<Shard>,
    mut entries: Vec<(Dn, Entry)>,
    resuming: bool,
    inserted: &mut Vec<Dn>,
) -> Result<()> {
    entries.sort_by_key(|(dn, _)| dn.depth());
    let mut result = Ok(());
    for level in entries.chunk_by(|a, b| a.0.depth() == b.0.depth()) {
        for wave in level.chunks(WAVE) {
            let tasks: Vec<_> = wave
                .iter()
                .cloned()
                .map(|(dn, entry)| {
                    let s = shard.clone();
                    glommio::spawn_local(async move { insert(&s, &dn, entry, false).await.map(|_| dn) })
                })
                .collect();
            for t in tasks {
                match t.await {
                    Err(e) if resuming && e.code == LdapResultCode::EntryAlreadyExists => {}
                    Err(e) => result = result.and(Err(e)),
                    Ok(dn) => inserted.push(dn),
                }
            }
            result.clone()?;
        }
    }
    result
}

/// Removes entries, children before parents. With `tolerant`, one that is
/// already gone is no failure (an undo, a resumed carry).
async fn remove_all(shard: &Rc<Shard>, mut dns: Vec<Dn>, tolerant: bool) -> Result<()> {
    dns.sort_by_key(|dn| std::cmp::Reverse(dn.depth()));
    let mut result = Ok(());
    for level in dns.chunk_by(|a, b| a.depth() == b.depth()) {
        for wave in level.chunks(WAVE) {
            let tasks: Vec<_> = wave
                .iter()
                .cloned()
                .map(|dn| {
                    let s = shard.clone();
                    glommio::spawn_local(async move {
                        remove(&s, &dn, &dn.to_string_form(), false, Extras::default()).await.map(|_| ())
                    })
                })
                .collect();
            for t in tasks {
                match t.await {
                    Err(e) if tolerant && e.code == LdapResultCode::NoSuchObject => {}
                    r => result = result.and(r),
                }
            }
            result.clone()?;
        }
    }
    result
}

/// Finishes the carries a crash interrupted (see the module text); run on
/// one shard at start, before it serves. Returns how many it finished.
pub async fn resume(shard: &Rc<Shard>) -> Result<usize> {
    let mut finished = 0;
    for (home, store) in shard.stores.iter().enumerate() {
        for intent in renames::pending(store)? {
            let (old, new) = (Dn::parse(&intent.old)?, Dn::parse(&intent.new)?);
            let arrived =
                shard.get_entry(&new.key())?.is_some_and(|e| shards::changelog::uuid_of(&e).ok() == Some(intent.uuid));
            if arrived {
                let below = renames::below(&shard.stores, &old.key(), 0)?;
                let arrivals = below.into_iter().map(|m| moved(m.entry, &old, &new)).collect::<Result<Vec<_>>>()?;
                let mut departures: Vec<Dn> =
                    arrivals.iter().map(|(dn, _)| renames::moved_dn(dn, &new, &old)).collect();
                insert_all(shard, arrivals, true, &mut Vec::new()).await?;
                if shard
                    .get_entry(&old.key())?
                    .is_some_and(|e| shards::changelog::uuid_of(&e).ok() == Some(intent.uuid))
                {
                    departures.push(old.clone());
                }
                remove_all(shard, departures, true).await?;
                finished += 1;
            }
            shard.submit_to(home, WriteOp::Intent { uuid: intent.uuid, intent: None }).await?;
        }
    }
    Ok(finished)
}
