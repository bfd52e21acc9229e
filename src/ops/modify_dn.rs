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
//! carry runs, writes within either DN are `busy` and searches overlapping
//! them wait (`ops::carries`), so a client sees the old tree or the new one
//! whole; the rename is answered only once the old tree is gone.
//!
//! With the changelog on (mirror mode, syncrepl) the entry keeps its
//! replicated state: the old DN's owner logs the rename and hands the
//! state to the new DN's partition (`shards::moves`), which shows the entry
//! there; the images of both steps count the parents. An entry with
//! children moves so first (`Moving::Top`, under an intent), then its
//! descendants follow one depth at a time, parents first, each a logged
//! rename that changes only the stored entry's DN (`Moving::Below`): a
//! peer and a syncrepl consumer meet the moves in that order, and a
//! start finishes what a crash left below the old DN.

use crate::acl::{Attr, Level};
use crate::conn::Conn;
use crate::ops::controls::{self, Controls};
use crate::ops::{access, parse_dn, with_matched};
use ldap3_proto::control::LdapControl;
use ldap3_proto::proto::LdapModifyDNRequest;
use ldap3_proto::LdapResultCode;
use shards::csn::Csn;
use shards::dn::{Dn, Rdn};
use shards::entry::Entry;
use shards::moves;
use shards::renames::{self, Intent, Member};
use shards::write::{children, Extras, Images, Moving, Parent};
use shards::{now_generalized, Error, Result, Shard};
use std::rc::Rc;

/// A rename in mirror mode or with syncrepl: the new parent counted (and
/// so kept) while the old DN's owner moves the entry and the state is
/// delivered; the images count both parents. With entries below, the
/// carry's way of moving them (see the module text).
async fn move_replicated(
    conn: &Conn,
    old: &Dn,
    old_text: &str,
    new: &Dn,
    entry: Entry,
    below: Vec<Member>,
) -> Result<()> {
    let shard = &conn.ctx.shard;
    if shard.get_entry(&new.key())?.is_some() {
        return Err(Error::already_exists(&entry.dn));
    }
    if below.is_empty() {
        return move_one(conn, old, old_text, new, entry, Moving::Leaf).await;
    }
    // Every new DN is made and checked (not too long, not taken) first.
    let mut followers = Vec::with_capacity(below.len());
    for m in below {
        let was = m.entry.dn.clone();
        let (dn, entry) = moved(m.entry, old, new)?;
        if shard.get_entry(&dn.key())?.is_some() {
            return Err(Error::already_exists(&entry.dn));
        }
        followers.push(Follower { old_key: m.old_key, old_text: was, dn, entry });
    }
    let uuid = shards::merge::uuid_of(&entry)?;
    let intent = Intent { uuid, old: old.to_string_form(), new: entry.dn.clone() };
    let home = shard.owner_of(&old.key());
    shard.note_intent(home, uuid, Some(intent)).await?;
    if let Err(e) = move_one(conn, old, old_text, new, entry, Moving::Top).await {
        let _ = shard.note_intent(home, uuid, None).await;
        return Err(e);
    }
    // From here on the rename is done for a crash: what fails now is
    // finished by the next start (`resume`), which keeps the intent.
    let is_top = |d: &Dn| conn.ctx.is_suffix(d);
    if let Err(e) = follow(shard, &is_top, new, followers).await {
        // Done but for what cannot follow (a DN the peer took meanwhile),
        // which stays where it is, said on stderr.
        eprintln!("coredir: the rename of {old_text} to {}: {}; finishing it", new.to_string_form(), e.message);
        finish_replicated(shard, &is_top, old, new).await?;
    }
    shard.note_intent(home, uuid, None).await
}

/// One entry's logged rename (see `move_replicated`).
async fn move_one(conn: &Conn, old: &Dn, old_text: &str, new: &Dn, entry: Entry, moving: Moving) -> Result<()> {
    let shard = &conn.ctx.shard;
    let (old_key, new_key) = (old.key(), new.key());
    let guard = Parent::of(new);
    shard.count_child(guard.clone(), 1).await?;
    let moved = shard.move_entry(&old_key, old_text, new_key, entry, moving).await;
    let is_top = |d: &Dn| conn.ctx.is_suffix(d);
    if let Ok(images) = &moved {
        moves::count_children(shard, images.iter().map(|b| (**b).clone()), &is_top).await;
    }
    let delivered = match &moved {
        Ok(_) => moves::deliver(shard, &is_top).await,
        Err(_) => Ok(()),
    };
    let _ = shard.count_child(guard, -1).await;
    moved.and(delivered)
}

/// The No-Op control's rename, checked as far as the reads above go, then
/// for what the commits would find: every new DN fits a key and is free
/// (taken by an entry the requester may not know of too: the owner would
/// refuse it so), and the new parent exists.
async fn check_rename(shard: &Rc<Shard>, old: &Dn, new: &Dn, in_place: bool, below: Vec<Member>) -> Result<()> {
    let free = |dn: &Dn, text: &str| {
        shards::write::check_key(&dn.key(), text)?;
        match shard.exists(&dn.key())? {
            true => Err(Error::already_exists(text)),
            false => Ok(()),
        }
    };
    match in_place {
        true => shards::write::check_key(&new.key(), &new.to_string_form())?,
        false => free(new, &new.to_string_form())?,
    }
    for m in below.into_iter().filter(|_| !in_place) {
        let (dn, entry) = moved(m.entry, old, new)?;
        free(&dn, &entry.dn)?;
    }
    shard.check_parent(Parent::of(new)).await
}

/// An entry below a moved top, to follow it: where it is, and where it goes.
#[derive(Clone)]
struct Follower {
    old_key: Vec<u8>,
    old_text: String,
    dn: Dn,
    /// At its new DN.
    entry: Entry,
}

/// The newest entryCSN of the entries at these DNs.
fn newest_stamp<'a>(shard: &Shard, dns: impl Iterator<Item = &'a Dn>) -> Result<Csn> {
    let mut newest = Csn::default();
    for dn in dns {
        if let Some(csn) = shard.get_entry(&dn.key())?.and_then(|e| e.csn()) {
            newest = newest.max(csn);
        }
    }
    Ok(newest)
}

/// Moves the entries below a moved top (now at `top`) after it, each a
/// logged rename keeping what is stored but the DN: one depth at a time,
/// parents first, each depth's states delivered and its stamps adopted
/// before the next moves. Every entry is tried; the first failure is
/// returned.
async fn follow(shard: &Rc<Shard>, is_top: &dyn Fn(&Dn) -> bool, top: &Dn, mut followers: Vec<Follower>) -> Result<()> {
    followers.sort_by_key(|f| f.dn.depth());
    let mut result = Ok(());
    let mut after = newest_stamp(shard, std::iter::once(top))?;
    for level in followers.chunk_by(|a, b| a.dn.depth() == b.dn.depth()) {
        let writes = side_by_side(level.to_vec(), |f| {
            let s = shard.clone();
            async move { s.move_entry(&f.old_key, &f.old_text, f.dn.key(), f.entry, Moving::Below { after }).await }
        });
        let mut images = Vec::with_capacity(level.len());
        for r in writes.await {
            match r {
                Ok(i) => images.extend(i.map(|b| *b)),
                Err(e) => result = result.and(Err(e)),
            }
        }
        moves::count_children(shard, images.into_iter(), is_top).await;
        moves::deliver(shard, is_top).await?;
        after = after.max(newest_stamp(shard, level.iter().map(|f| &f.dn))?);
    }
    result
}

/// The request's names as slapd's frontend reads them, before anything
/// else is asked (invalidDNSyntax): the entry's DN, the new DN, the new
/// superior.
pub fn parse_names(req: &LdapModifyDNRequest) -> Result<(Dn, Dn, Dn)> {
    let old = parse_dn(&req.dn)?;
    let rdn = Rdn::parse(&req.newrdn)?;
    // As slapd: a new RDN its types' syntaxes refuse is invalidDNSyntax
    // before the naming context is looked at.
    Dn::renamed(rdn.clone(), &Dn::root()).validate()?;
    let superior = match &req.new_superior {
        Some(s) => parse_dn(s)?,
        None => old.parent(),
    };
    let new = Dn::renamed(rdn, &superior);
    Ok((old, new, superior))
}

pub async fn handle(conn: Rc<Conn>, req: LdapModifyDNRequest, ctrls: Controls) -> Result<Vec<LdapControl>> {
    let (old, new, superior) = parse_names(&req)?;
    check_placement(&old, &new, &superior)?;
    let ctx = &conn.ctx;
    // As slapd: a rename that leaves its naming context (the suffix itself
    // included), into another or none, would span two DSAs.
    let context = ctx.naming_context(&old);
    if context.is_none() && !old.is_root() {
        // slapd without a default referral, as for an add.
        return Err(Error::unwilling("no global superior knowledge"));
    }
    if context.is_none() || ctx.is_suffix(&old) || ctx.naming_context(&new) != context || ctx.is_suffix(&new) {
        return Err(Error::new(
            LdapResultCode::AffectsMultipleDSAs,
            format!("{} is outside the naming context of {}", new.to_string_form(), req.dn),
        ));
    }
    // Stored, and returned, in slapd's pretty form (which also validates it).
    let new_text = new.pretty()?;
    let shard = &ctx.shard;
    let identity = ctrls.acting.clone();
    let live = conn.ctx.live();
    if let Some(a) = conn.access(&live, &identity) {
        // As slapd: write on the entry, on both parents' children, on the
        // new RDN's attributes and, when the old RDN's values go, on
        // theirs (the modifications a rename makes; `rename_entry` keeps
        // the types no user writes).
        let mut attrs = vec![(Attr::Entry, "entry")];
        let rdn = new.rdn().expect("a renamed entry has an RDN");
        attrs.extend(rdn.avas.iter().map(|ava| (a.acl().class_of_request(&ava.attr), ava.attr.as_str())));
        let old_rdn = old.rdn().map(|r| r.avas.as_slice()).unwrap_or_default();
        let deleted = old_rdn.iter().filter(|ava| req.deleteoldrdn && shards::write::user_modifiable(&ava.attr));
        attrs.extend(deleted.map(|ava| (a.acl().class_of_request(&ava.attr), ava.attr.as_str())));
        access::require(&a, shard, &old.key(), &attrs, Level::Write)?;
        let children = [(Attr::Children, "children of the parent")];
        access::require(&a, shard, &old.parent().key(), &children, Level::Write)?;
        if superior != old.parent() {
            access::require(&a, shard, &superior.key(), &children, Level::Write)?;
        }
    }
    // As slapd's back-mdb: a referral object, and a new superior that is
    // an alias or one, are refused after the access checks.
    crate::ops::referral::check_target(&conn, &identity, &old, ctrls.manage_dsa_it)?;
    crate::glue::refuse_write(&conn, &identity, &old, ctrls.manage_dsa_it)?;
    if superior != old.parent() {
        crate::ops::alias::check_parent(shard, &superior.key(), "newSuperior is an alias")?;
    }
    if req.new_superior.is_some() {
        crate::ops::referral::check_parent(&conn, &identity, &old, &superior, true)?;
    }
    // Held until the rename is done: writes within either DN are `busy`,
    // searches overlapping them wait. Not for the No-Op control's check,
    // which moves nothing: it must not hold up the subtree's writes.
    let claim = match ctrls.no_op {
        Some(()) => None,
        None => {
            let claim = ctx.shared.carries.claim(old.key(), new.key())?;
            claim.settle_writes().await?;
            Some(claim)
        }
    };
    let in_place = old.key() == new.key();
    let (mut entry, below) = read_subtree(&conn, &old, &req.dn, in_place).map_err(|e| {
        let mut e = with_matched(&conn, &identity, &old, e);
        // As slapd's back-mdb, which looks the parent up first: a missing
        // parent is named by no matchedDN (a referral above still refers).
        if e.code == LdapResultCode::NoSuchObject && parent_missing(&conn, &old) {
            e.matched.clear();
        }
        e
    })?;
    // Checked on the entry as read: a rename is not one owner transaction.
    controls::check_assertion(&conn, &identity, ctrls.assertion.as_ref(), &old.key(), &entry)?;
    let before = ctrls.pre_read.as_ref().map(|_| entry.clone());
    // As slapd's back-mdb: a taken new DN (68) before what the renamed
    // entry would break (65). The owner checks again as it writes.
    if !in_place && shard.exists(&new.key())? && crate::ops::disclosed(&conn, &identity, &new.key()) {
        return Err(Error::already_exists(&new.to_string_form()));
    }
    check_operational_rdn(&entry, &new)?;
    check_moved_depth(&live.limits, (&old, &new), &below)?;
    let count = entry.attrs.len();
    rename_entry(&mut entry, &old, &new, new_text, req.deleteoldrdn, identity.dn());
    if entry.attrs.len() > count {
        crate::ops::add::check_attribute_count(&live.limits, entry.attrs.len())?;
    }
    // The new RDN's values were checked with its DN (`validate`, 34);
    // those the entry held are not checked again (`check_modified`).
    shards::schema::check::check_modified(&entry, &new)?;
    // The entry (and its subtree) is stored below its new parent as stored.
    let stored = crate::ops::stored_spelling(ctx, &new)?;
    // Post-Read names it as slapd's does: below the new parent as stored
    // when it moves, below the request DN's parent as spelled when not
    // (newSuperior naming the current parent included).
    let after = match ctrls.post_read {
        Some(_) => {
            let named = match superior != old.parent() {
                true => stored.clone(),
                false => Dn::renamed(new.rdn().expect("a renamed entry has an RDN").clone(), &old.parent()),
            };
            Some(Entry { dn: named.pretty()?, attrs: entry.attrs.clone() })
        }
        None => None,
    };
    let new = stored;
    entry.dn = new.pretty()?;
    let Some(claim) = claim else {
        return check_rename(shard, &old, &new, in_place, below).await.map(|_| Vec::new());
    };
    if !below.is_empty() || shard.owner_of(&old.key()) != shard.owner_of(&new.key()) {
        // Several commits: the searches that could see them half done end first.
        claim.settle_reads().await;
    }
    claim.moving();
    let moved = match shard.stamping.capture {
        true => move_replicated(&conn, &old, &req.dn, &new, entry, below).await,
        false => move_subtree(shard, &old, &new, entry, below).await,
    };
    // slapd names no matchedDN for a missing newSuperior.
    moved?;
    let images = Some(Box::new(Images { before, after }));
    let moved_to = new.to_string_form();
    Ok(controls::read_entry_controls(&conn, &identity, images, &ctrls.pre_read, &ctrls.post_read, Some(&moved_to)))
}

/// A new RDN of an operational type, refused as slapd's back-mdb refuses
/// it once the rename is applied: a second value of a single-valued type
/// the entry holds (another entryUUID, structuralObjectClass) breaks the
/// single-value rule (19); otherwise the naming check refuses an
/// operational type (64). After the access checks, as there.
fn check_operational_rdn(entry: &Entry, new: &Dn) -> Result<()> {
    for ava in new.rdn().map(|r| r.avas.as_slice()).unwrap_or_default() {
        // A type any client may write can still be operational (`ref`,
        // the schema's own types): no name for an entry either (64).
        if shards::write::user_modifiable(&ava.attr) {
            crate::ops::add::check_naming_type(&ava.attr)?;
            continue;
        }
        let single = shards::schema::get().attr(&ava.attr).is_some_and(|at| at.single_value);
        let held = entry.get(&ava.attr).is_some_and(|a| !a.vals.is_empty());
        if single && held && !entry.has_value(&ava.attr, &ava.value) {
            return Err(Error::new(
                LdapResultCode::ConstraintViolation,
                format!("attribute '{}' cannot have multiple values", ava.attr),
            ));
        }
        crate::ops::add::check_naming_type(&ava.attr)?;
        return Err(Error::new(
            LdapResultCode::ConstraintViolation,
            format!("{}: no user modification allowed", ava.attr),
        ));
    }
    Ok(())
}

/// As slapd's frontend, before a backend is chosen, anything is looked up
/// or the requester asked about: the root DSE is not renamed, and an
/// entry goes neither above itself (to its parent, an ancestor, its naming
/// context's root) nor at or below itself.
pub fn check_placement(old: &Dn, new: &Dn, superior: &Dn) -> Result<()> {
    if old.is_root() {
        return Err(Error::unwilling("the root DSE cannot be renamed"));
    }
    if old.key() != new.key() && old.is_within(new) {
        return Err(Error::unwilling("cannot place an entry above itself"));
    }
    if superior.is_within(old) {
        return Err(Error::unwilling("newSuperior is the entry itself or below it"));
    }
    Ok(())
}

/// Whether the renamed entry's parent is missing too (a naming context's
/// root has none to miss).
fn parent_missing(conn: &Conn, dn: &Dn) -> bool {
    !conn.ctx.is_suffix(dn) && matches!(conn.ctx.shard.exists(&dn.parent().key()), Ok(false))
}

/// The entry to rename and, when it has children that move with it (not
/// `in_place`), every entry below it (within `limits.max_rename_entries`).
fn read_subtree(conn: &Conn, dn: &Dn, dn_text: &str, in_place: bool) -> Result<(Entry, Vec<Member>)> {
    let (shard, key) = (&conn.ctx.shard, dn.key());
    let entry = shard.get_entry(&key)?.ok_or_else(|| Error::no_such_object(dn_text))?;
    if children(&shard.read_for(&key)?, &key)? == 0 || (in_place && shard.stamping.capture) {
        return Ok((entry, Vec::new()));
    }
    let limit = conn.ctx.live().limits.max_rename_entries;
    Ok((entry, renames::below(&shard.stores, &key, limit)?))
}

/// The entries a move takes deeper stay within `limits.max_dn_rdns`:
/// the deepest below `old` gains what the entry gains. A move that takes
/// nothing deeper is let through, so what is past a lowered limit can
/// still be moved up.
fn check_moved_depth(limits: &crate::config::Limits, (old, new): (&Dn, &Dn), below: &[Member]) -> Result<()> {
    let deepest = below.iter().map(|m| shards::dn::key_depth(&m.old_key)).max().unwrap_or(old.depth());
    let moved = new.depth() + (deepest - old.depth());
    match limits.max_dn_rdns {
        most if most > 0 && moved > most && moved > deepest => Err(crate::ops::too_deep(moved, most)),
        _ => Ok(()),
    }
}

const CONFLICT_SLOT: &str = "coredirConflictSlot";

/// Applies the RDN change to the entry's attributes and stamps it.
fn rename_entry(entry: &mut Entry, old: &Dn, new: &Dn, new_text: String, delete_old_rdn: bool, modifier: &str) {
    let new_rdn = new.rdn().expect("not the root");
    if delete_old_rdn {
        // A conflict entry's RDN (`entryUUID=…+coredirConflictSlot=…`)
        // names its identity and a mark the state derives: renamed away,
        // the entry keeps its entryUUID and the marks go by themselves.
        let conflict = entry.has_value("objectClass", b"coredirConflictEntry");
        let kept = |attr: &str| {
            !shards::write::user_modifiable(attr) || (conflict && attr.eq_ignore_ascii_case(CONFLICT_SLOT))
        };
        for ava in old.rdn().expect("not the root").avas.iter().filter(|a| !kept(&a.attr)) {
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

async fn move_subtree(shard: &Rc<Shard>, old: &Dn, new: &Dn, entry: Entry, below: Vec<Member>) -> Result<()> {
    let (old_key, new_key) = (old.key(), new.key());
    let old_text = old.to_string_form();
    // The same DN in another spelling (`cn=Leaf` to `cn=leaf`) stays in
    // place, children and all; their stored DNs take the new spelling.
    if old_key == new_key {
        shard.move_entry(&old_key, &old_text, new_key, entry, Moving::Leaf).await?;
        return respell(shard, old, new, below).await;
    }
    if !below.is_empty() || shard.owner_of(&old_key) != shard.owner_of(&new_key) {
        return carry(shard, old, new, entry, below).await;
    }
    let old_parent = Parent::of(old);
    let new_parent = Parent::of(new);
    let parent_changed = old_parent.key != new_parent.key;
    if parent_changed {
        shard.count_child(new_parent.clone(), 1).await?;
    }
    if let Err(e) = shard.move_entry(&old_key, &old_text, new_key, entry, Moving::Leaf).await {
        if parent_changed {
            let _ = shard.count_child(new_parent, -1).await;
        }
        return Err(e);
    }
    if parent_changed {
        shard.count_child(old_parent, -1).await?;
    }
    Ok(())
}

/// A rename as several commits (see the module text): intent, inserts at
/// the new DNs parents first, removals deepest first, intent cleared. An
/// insert that fails undoes the inserts before it.
async fn carry(shard: &Rc<Shard>, old: &Dn, new: &Dn, entry: Entry, below: Vec<Member>) -> Result<()> {
    let uuid = shards::merge::uuid_of(&entry)?;
    let intent = Intent { uuid, old: old.to_string_form(), new: entry.dn.clone() };
    // Every new DN is made (and checked: not too long) before anything is written.
    let mut arrivals = vec![(new.clone(), entry)];
    arrivals.extend(below.into_iter().map(|m| moved(m.entry, old, new)).collect::<Result<Vec<_>>>()?);
    let departures: Vec<Dn> = arrivals.iter().map(|(dn, _)| renames::moved_dn(dn, new, old)).collect();
    let home = shard.owner_of(&old.key());
    shard.note_intent(home, uuid, Some(intent)).await?;
    let mut inserted = Vec::new();
    if let Err(e) = insert_all(shard, arrivals, false, &mut inserted).await {
        // Only what this carry inserted: the new DN may be taken by another entry.
        let _ = remove_all(shard, inserted, GONE).await;
        let _ = shard.note_intent(home, uuid, None).await;
        return Err(e);
    }
    // From here on the rename is done for a crash: what fails now is
    // finished by the next start (`resume`), which keeps the intent.
    remove_all(shard, departures, &[]).await?;
    shard.note_intent(home, uuid, None).await
}

/// An entry from below the old DN as it is below the new one.
fn moved(mut entry: Entry, old: &Dn, new: &Dn) -> Result<(Dn, Entry)> {
    let dn = renames::moved_dn(&Dn::parse(&entry.dn)?, old, new);
    entry.dn = dn.pretty()?;
    Ok((dn, entry))
}

/// Rewrites the stored DNs below an entry renamed in place.
async fn respell(shard: &Rc<Shard>, old: &Dn, new: &Dn, below: Vec<Member>) -> Result<()> {
    let mut ops = Vec::with_capacity(below.len());
    for m in below {
        let (dn, entry) = moved(m.entry, old, new)?;
        ops.push((m.old_key, dn.to_string_form(), entry));
    }
    let writes = side_by_side(ops, |(key, text, entry)| {
        let s = shard.clone();
        async move { s.move_entry(&key, &text, key.clone(), entry, Moving::Leaf).await.map(|_| ()) }
    });
    writes.await.into_iter().collect()
}

/// Most inserts or removals of one carry in flight at once.
const WAVE: usize = 256;

/// Runs one write per item, `WAVE` at a time side by side so that group
/// commits take many; the results in the items' order.
async fn side_by_side<T, R, Fut>(items: Vec<T>, write: impl Fn(T) -> Fut) -> Vec<Result<R>>
where
    R: 'static,
    Fut: std::future::Future<Output = Result<R>> + 'static,
{
    let mut out = Vec::with_capacity(items.len());
    let mut items = items.into_iter().peekable();
    while items.peek().is_some() {
        let tasks: Vec<_> = items.by_ref().take(WAVE).map(|i| glommio::spawn_local(write(i))).collect();
        for t in tasks {
            out.push(t.await);
        }
    }
    out
}

/// Inserts entries, parents before children: one depth at a time; the DNs
/// inserted go to `inserted`. With `resuming`, an entry already there is
/// left alone.
async fn insert_all(
    shard: &Rc<Shard>,
    mut entries: Vec<(Dn, Entry)>,
    resuming: bool,
    inserted: &mut Vec<Dn>,
) -> Result<()> {
    entries.sort_by_key(|(dn, _)| dn.depth());
    for level in entries.chunk_by(|a, b| a.0.depth() == b.0.depth()) {
        let writes = side_by_side(level.to_vec(), |(dn, entry)| {
            let s = shard.clone();
            async move { s.add(&dn, entry, false).await.map(|_| dn) }
        });
        let mut result = Ok(());
        for r in writes.await {
            match r {
                Err(e) if resuming && e.code == LdapResultCode::EntryAlreadyExists => {}
                Err(e) => result = result.and(Err(e)),
                Ok(dn) => inserted.push(dn),
            }
        }
        result?;
    }
    Ok(())
}

/// What an undo tolerates: an entry already gone.
const GONE: &[LdapResultCode] = &[LdapResultCode::NoSuchObject];

/// Removes entries, children before parents; a removal that fails with
/// one of the `tolerated` codes is no failure.
async fn remove_all(shard: &Rc<Shard>, mut dns: Vec<Dn>, tolerated: &[LdapResultCode]) -> Result<()> {
    dns.sort_by_key(|dn| std::cmp::Reverse(dn.depth()));
    for level in dns.chunk_by(|a, b| a.depth() == b.depth()) {
        let writes = side_by_side(level.to_vec(), |dn| {
            let s = shard.clone();
            async move { s.delete(&dn, &dn.to_string_form(), false, Extras::default()).await.map(|_| ()) }
        });
        for r in writes.await {
            match r {
                Err(e) if tolerated.contains(&e.code) => {}
                r => r?,
            }
        }
    }
    Ok(())
}

/// Finishes the carries a crash interrupted (see the module text); run on
/// shard 0 at start, before any shard serves. Returns how many it finished.
pub async fn resume(ctx: &crate::ctx::Ctx) -> Result<usize> {
    let shard = &ctx.shard;
    let is_top = |d: &Dn| ctx.is_suffix(d);
    if shard.stamping.capture {
        // A moved top may still be in its parcel: shown only once delivered.
        moves::deliver(shard, &is_top).await?;
    }
    let mut finished = 0;
    for (home, store) in shard.stores.iter().enumerate() {
        // Read, and the snapshot dropped, before the awaits below.
        let intents = renames::pending(&store.read()?)?;
        for intent in intents {
            let (old, new) = (Dn::parse(&intent.old)?, Dn::parse(&intent.new)?);
            if uuid_at(shard, &new)? == Some(intent.uuid) {
                match shard.stamping.capture {
                    true => finish_replicated(shard, &is_top, &old, &new).await?,
                    false => finish(shard, &old, &new, intent.uuid).await?,
                }
                finished += 1;
            }
            shard.note_intent(home, intent.uuid, None).await?;
        }
    }
    Ok(finished)
}

/// `finish` with the changelog on: what is still below `old` follows the
/// top to below `new`, except an entry whose new DN holds another entry
/// (said on stderr), and what is below it.
pub(crate) async fn finish_replicated(
    shard: &Rc<Shard>,
    is_top: &dyn Fn(&Dn) -> bool,
    old: &Dn,
    new: &Dn,
) -> Result<()> {
    let (o, n) = (old.to_string_form(), new.to_string_form());
    let mut followers: Vec<Follower> = Vec::new();
    let mut stays: Vec<Dn> = Vec::new();
    for m in renames::below(&shard.stores, &old.key(), 0)? {
        let was = m.entry.dn.clone();
        let dn = Dn::parse(&was)?;
        if stays.iter().any(|s| dn.is_within(s)) {
            continue;
        }
        let (dn_new, entry) = match moved(m.entry, old, new) {
            Ok(moved) if shard.get_entry(&moved.0.key())?.is_none() => moved,
            Ok(_) => {
                eprintln!("coredir: finishing the rename of {o} to {n}: {was} stays: another entry holds its new DN");
                stays.push(dn);
                continue;
            }
            Err(e) => {
                eprintln!("coredir: finishing the rename of {o} to {n}: {was} stays: {}", e.message);
                stays.push(dn);
                continue;
            }
        };
        followers.push(Follower { old_key: m.old_key, old_text: was, dn: dn_new, entry });
    }
    follow(shard, is_top, new, followers).await
}

/// The entryUUID of the entry at `dn`, if there is one.
fn uuid_at(shard: &Shard, dn: &Dn) -> Result<Option<[u8; 16]>> {
    Ok(shard.get_entry(&dn.key())?.and_then(|e| shards::merge::uuid_of(&e).ok()))
}

/// Moves what is still below `old` (whose entry `uuid` is at `new`) to
/// below `new`: an entry whose copy is there leaves; one whose new DN holds
/// another entry stays where it is, said on stderr, and so do its
/// ancestors.
async fn finish(shard: &Rc<Shard>, old: &Dn, new: &Dn, uuid: [u8; 16]) -> Result<()> {
    let (mut arrivals, mut departures) = (Vec::new(), Vec::new());
    let (o, n) = (old.to_string_form(), new.to_string_form());
    for m in renames::below(&shard.stores, &old.key(), 0)? {
        let (was, own) = (m.entry.dn.clone(), shards::merge::uuid_of(&m.entry)?);
        let (dn, entry) = match moved(m.entry, old, new) {
            Ok(moved) => moved,
            Err(e) => {
                eprintln!("coredir: finishing the rename of {o} to {n}: {was} stays: {}", e.message);
                continue;
            }
        };
        match uuid_at(shard, &dn)? {
            Some(there) if there != own => {
                eprintln!("coredir: finishing the rename of {o} to {n}: {was} stays: another entry holds its new DN");
            }
            Some(_) => departures.push(renames::moved_dn(&dn, new, old)),
            None => {
                departures.push(renames::moved_dn(&dn, new, old));
                arrivals.push((dn, entry));
            }
        }
    }
    insert_all(shard, arrivals, true, &mut Vec::new()).await?;
    if uuid_at(shard, old)? == Some(uuid) {
        departures.push(old.clone());
    }
    // An entry kept above keeps its ancestors: they stay, not being leaves.
    remove_all(shard, departures, &[LdapResultCode::NoSuchObject, LdapResultCode::NotAllowedOnNonLeaf]).await
}
