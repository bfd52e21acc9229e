//! Modify DN (RFC 4511 §4.9): new RDN, `deleteoldrdn`, `newSuperior`.
//!
//! A rename is a move (DESIGN.md): when the old and new DNs have the same
//! owner it is one atomic `Move`; otherwise the new owner inserts the entry
//! (same `entryUUID`) and then the old owner deletes it, and a failure of the
//! second step removes the copy again. A new parent is counted first (which
//! also proves it exists) and the old parent uncounted last. Entries with
//! children cannot be renamed yet (`notAllowedOnNonLeaf`).
//!
//! In mirror mode the entry keeps its replicated state: the old DN's owner
//! logs the rename and hands the state to the new DN's partition
//! (`shards::moves`), which shows the entry there; the images of both steps
//! count the parents.

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
    let mut entry = read_leaf(shard, &old, &req.dn).map_err(|e| with_matched(&conn, &old, e))?;
    // Checked on the entry as read: a rename is not one owner transaction.
    controls::check_assertion(&conn, ctrls.assertion.as_ref(), &old.key(), &entry)?;
    let before = ctrls.pre_read.as_ref().map(|_| entry.clone());
    rename_entry(&mut entry, &old, &new, new_text, req.deleteoldrdn, identity.dn());
    shards::schema::check::check_entry(&entry, &new)?;
    let after = ctrls.post_read.as_ref().map(|_| entry.clone());
    let moved = match shard.stamping.capture {
        true => move_replicated(&conn, &old, &req.dn, &new, entry).await,
        false => move_entry(shard, &old, &req.dn, &new, entry).await,
    };
    // slapd names no matchedDN for a missing newSuperior.
    moved?;
    let images = Some(Box::new(Images { before, after }));
    Ok(controls::read_entry_controls(&conn, images, &ctrls.pre_read, &ctrls.post_read))
}

fn read_leaf(shard: &Shard, dn: &Dn, dn_text: &str) -> Result<Entry> {
    let key = dn.key();
    let entry = shard.get_entry(&key)?.ok_or_else(|| Error::no_such_object(dn_text))?;
    if children(&shard.store_for(&key).read()?, &key)? > 0 {
        return Err(Error::not_allowed_on_non_leaf(dn_text));
    }
    Ok(entry)
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

async fn move_entry(shard: &Shard, old: &Dn, old_text: &str, new: &Dn, entry: Entry) -> Result<()> {
    let (old_key, new_key) = (old.key(), new.key());
    let old_parent = Parent::of(old);
    let new_parent = Parent::of(new);
    let parent_changed = old_parent.key != new_parent.key;
    if shard.owner_of(&old_key) == shard.owner_of(&new_key) {
        if parent_changed {
            shard.submit(&new_parent.key.clone(), WriteOp::Child { parent: new_parent.clone(), delta: 1 }).await?;
        }
        if let Err(e) = shard.submit(&old_key, move_op(&old_key, old_text, new_key, entry)).await {
            if parent_changed {
                let _ = shard.submit(&new_parent.key.clone(), WriteOp::Child { parent: new_parent, delta: -1 }).await;
            }
            return Err(e);
        }
    } else {
        insert(shard, new, entry, false).await?;
        if let Err(e) = remove(shard, old, old_text, false, Extras::default()).await {
            let _ = remove(shard, new, &new.to_string_form(), false, Extras::default()).await;
            return Err(e);
        }
        return Ok(());
    }
    if parent_changed {
        shard.submit(&old_parent.key.clone(), WriteOp::Child { parent: old_parent, delta: -1 }).await?;
    }
    Ok(())
}
