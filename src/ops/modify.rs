//! Modify (RFC 4511 §4.6): add, delete, replace and increment (RFC 4525),
//! applied in order and atomically by the entry's owner.
//!
//! Needs `write` access to every attribute modified, decided on the entry
//! as the connection's shard reads it just before the write is sent to the
//! owner: a rule with a filter on a value that a concurrent modify changes
//! may see the older value (rules by DN and identity cannot race).

use crate::acl::Level;
use crate::conn::{Conn, Identity};
use crate::ops::add::{check_uuid_free, hash_passwords, is_relaxable, UuidClaim, MOST_HASHED};
use crate::ops::controls::{self, Controls};
use crate::ops::{access, parse_dn, with_matched};
use ldap3_proto::control::LdapControl;
use ldap3_proto::proto::{LdapModifyRequest, LdapModifyType};
use ldap3_proto::LdapResultCode;
use shards::entry::{Attr, Mod};
use shards::write::{user_modifiable, Extras, Stamp};
use shards::{now_generalized, password, Error, Result};
use std::rc::Rc;

pub async fn handle(conn: Rc<Conn>, req: LdapModifyRequest, ctrls: Controls) -> Result<Vec<LdapControl>> {
    check_increments(&req.changes)?;
    let dn = parse_dn(&req.dn)?;
    for change in &req.changes {
        let adds = matches!(change.operation, LdapModifyType::Add | LdapModifyType::Replace);
        let m = &change.modification;
        if matches!(change.operation, LdapModifyType::Increment) {
            shards::schema::check::check_increment(&m.atype)?;
        }
        shards::schema::check::check_modification(&m.atype, &m.vals, adds)?;
    }
    crate::ops::referral::check_target(&conn, &ctrls.acting, &dn, ctrls.manage_dsa_it)?;
    if dn.is_root() {
        return Err(Error::unwilling("the root DSE cannot be modified"));
    }
    if shards::schema::subschema::is_subschema_key(&dn.key()) {
        // As slapd: the schema is configuration, not an entry to write.
        return Err(Error::unwilling("the subschema subentry cannot be modified"));
    }
    let key = dn.key();
    let identity = ctrls.acting.clone();
    crate::ops::require_entry(&conn, &identity, &dn, &dn)?;
    let live = conn.ctx.live();
    // On an entry the requester may not know of, only the writes the rules
    // grant go on: an empty modify, or an Assertion that fails, is refused
    // as a write to a missing entry would be (50), not applied or 122.
    // Decided only when needed: most modifies carry changes and no Assertion.
    let hidden = || !crate::ops::disclosed(&conn, &identity, &key);
    // As slapd's back-mdb: the Assertion before the rights to write.
    let as_hidden = |e| if hidden() { access::denied(Level::Write, "entry") } else { e };
    let asserted = ctrls.assertion.clone();
    let assertion =
        controls::check_assertion_before_write(&conn, &identity, ctrls.assertion, &key).map_err(as_hidden)?;
    if let Some(a) = conn.access(&live, &identity) {
        // Checked on the entry as read before the write: rules that look at
        // the entry's content see it as it was (see the module doc).
        let attrs: Vec<_> = req
            .changes
            .iter()
            .map(|c| (a.acl().class_of_request(&c.modification.atype), c.modification.atype.as_str()))
            .collect();
        access::require(&a, &conn.ctx.shard, &key, &attrs, Level::Write)?;
    }
    if req.changes.is_empty() && hidden() {
        return Err(access::denied(Level::Write, "entry"));
    }
    // After the rights, as delete and modify-DN: a requester without them
    // learns no more of a glue entry than of any entry it may not change.
    crate::glue::refuse_write(&conn, &identity, &dn, ctrls.manage_dsa_it)?;
    let mut mods = Vec::with_capacity(req.changes.len());
    let mut relaxed = Vec::new();
    let mut verifications = MOST_VERIFIED;
    let mut hashings = MOST_HASHED;
    for change in req.changes {
        // Spelled as stored (`2.5.4.35` is `userPassword`): what is decided
        // by the type (password hashing and its cost limits) must not
        // depend on the client's spelling.
        let atype = change.modification.atype;
        let name = match shards::matching::stored_name(&atype) {
            std::borrow::Cow::Borrowed(_) => atype,
            std::borrow::Cow::Owned(stored) => stored,
        };
        let mut attr = Attr { name, vals: change.modification.vals };
        shards::schema::get().spell_values(&attr.name, &mut attr.vals);
        if !user_modifiable(&attr.name) {
            if ctrls.relax.is_none() || !is_relaxable(&attr.name) {
                return Err(Error::new(
                    LdapResultCode::ConstraintViolation,
                    format!("{}: no user modification allowed", attr.name),
                ));
            }
            relaxed.push(attr.name.clone());
        }
        mods.push(match change.operation {
            LdapModifyType::Add => {
                hash_passwords(&conn, std::slice::from_mut(&mut attr), &mut hashings).await?;
                Mod::Add(attr)
            }
            LdapModifyType::Delete => {
                stored_passwords(&conn, &key, &mut attr, &mut verifications).await?;
                Mod::Delete(attr)
            }
            LdapModifyType::Replace => {
                hash_passwords(&conn, std::slice::from_mut(&mut attr), &mut hashings).await?;
                Mod::Replace(attr)
            }
            LdapModifyType::Increment => Mod::Increment(attr),
        });
    }
    // Held until the modify is written.
    let _claims = match relaxed.is_empty() {
        true => Vec::new(),
        false => relax_checks(&conn, &identity, &key, &relaxed, &mods)?,
    };
    let rdn = dn.rdn().map(|r| r.avas.iter().map(|a| (a.attr.clone(), a.value.clone())).collect()).unwrap_or_default();
    let stamp = Stamp { modifier: identity.dn().to_string(), time: now_generalized() };
    // An Assertion the owner will not check again (it names what the
    // requester may search in some entries only) is checked once more
    // here, as close to the write as it can be: hashing and verifying
    // passwords above may take a while.
    if assertion.is_none() && asserted.is_some() {
        controls::check_assertion_at(&conn, &identity, asserted.as_ref(), &key).map_err(as_hidden)?;
    }
    let extras = Extras {
        assertion,
        before: ctrls.pre_read.is_some(),
        after: ctrls.post_read.is_some(),
        relax: ctrls.relax.is_some(),
        permissive: ctrls.permissive.is_some(),
        max_bytes: live.limits.max_entry_bytes,
        max_attrs: live.limits.max_entry_attributes,
        dry: ctrls.no_op.is_some(),
    };
    let shard = &conn.ctx.shard;
    // Admitted only now: a rename waits for admitted writes, so none may
    // wait on password hashing while admitted.
    let _admitted = conn.ctx.admit_write(&dn)?;
    let images = shard
        .modify(key, req.dn.clone(), mods, rdn, stamp, extras)
        .await
        .map_err(|e| with_matched(&conn, &identity, &dn, e))?;
    Ok(controls::read_entry_controls(&conn, &identity, images, &ctrls.pre_read, &ctrls.post_read, None))
}

/// The most verifications of cleartext against stored hashes one modify
/// may cost, whatever its deletes (each is a key stretching on the shard's
/// blocking pool, which binds share).
pub const MOST_VERIFIED: usize = 4;

/// A delete of `userPassword` values given in cleartext, where the stored
/// values are hashed: each becomes the stored value it verifies against,
/// so that a client's "delete the old password, add the new one" works
/// as on a slapd that keeps cleartext (and as slapd's ppolicy overlay
/// with `ppolicy_hash_cleartext`). A value that verifies against nothing
/// stays as given, and the delete fails with noSuchAttribute. Verified on
/// a blocking thread, counted against the request's `left` verifications
/// (one per stored hash tried).
async fn stored_passwords(conn: &Conn, key: &[u8], attr: &mut Attr, left: &mut usize) -> Result<()> {
    if !shards::matching::is_user_password(&attr.name) || attr.vals.iter().all(|v| password::is_hashed(v)) {
        return Ok(());
    }
    let Some(entry) = conn.ctx.shard.get_entry(key)? else { return Ok(()) };
    let stored: Vec<Vec<u8>> = entry.get("userPassword").map(|a| a.vals.clone()).unwrap_or_default();
    let given: Vec<Vec<u8>> = std::mem::take(&mut attr.vals);
    let policy = conn.ctx.password_policy;
    let budget = *left;
    let (vals, spent) = conn
        .ctx
        .password_work(conn.id, move || {
            let mut left = budget;
            let mut out = Vec::with_capacity(given.len());
            for v in given {
                if password::is_hashed(&v) || stored.contains(&v) {
                    out.push(v);
                    continue;
                }
                let mut found = None;
                for h in stored.iter().filter(|h| password::is_hashed(h)) {
                    if left == 0 {
                        break;
                    }
                    left -= 1;
                    if policy.verify(h, &v) {
                        found = Some(h);
                        break;
                    }
                }
                match found {
                    Some(h) if !out.contains(h) => out.push(h.clone()),
                    Some(_) => {}
                    None => out.push(v),
                }
            }
            (out, budget - left)
        })
        .await;
    attr.vals = vals;
    *left -= spent;
    Ok(())
}

/// A relaxed modify of server-owned attributes: `manage` access to each,
/// and a new `entryUUID` only where nothing knows entries by it (not with
/// replication, whose records name the entry by its UUID) and no other
/// entry has it.
/// The claims on the new entryUUIDs, held until the modify is written.
fn relax_checks(
    conn: &Conn,
    identity: &Identity,
    key: &[u8],
    relaxed: &[String],
    mods: &[Mod],
) -> Result<Vec<UuidClaim>> {
    let live = conn.ctx.live();
    if let Some(a) = conn.access(&live, identity) {
        let attrs: Vec<_> = relaxed.iter().map(|n| (a.acl().class_of_request(n), n.as_str())).collect();
        access::require(&a, &conn.ctx.shard, key, &attrs, Level::Manage)?;
    }
    if !relaxed.iter().any(|n| n.eq_ignore_ascii_case("entryUUID")) {
        return Ok(Vec::new());
    }
    if conn.ctx.shard.stamping.capture {
        return Err(Error::unwilling(
            "entryUUID cannot change while replication (mirror mode, syncrepl) knows entries by it",
        ));
    }
    let mut claims = Vec::new();
    for m in mods {
        match m {
            Mod::Replace(a) if a.name.eq_ignore_ascii_case("entryUUID") => {
                let probe = shards::entry::Entry { dn: String::new(), attrs: vec![a.clone()] };
                claims.push(check_uuid_free(&conn.ctx, &probe)?);
            }
            Mod::Add(a) | Mod::Delete(a) | Mod::Increment(a) if a.name.eq_ignore_ascii_case("entryUUID") => {
                return Err(Error::new(LdapResultCode::ConstraintViolation, "entryUUID: only a replace may change it"));
            }
            _ => {}
        }
    }
    Ok(claims)
}

/// An increment takes exactly one value (RFC 4525 §2); slapd refuses any
/// other count while it decodes the request, before the DN: protocolError.
pub fn check_increments(changes: &[ldap3_proto::proto::LdapModify]) -> Result<()> {
    for change in changes.iter().filter(|c| matches!(c.operation, LdapModifyType::Increment)) {
        let why = match change.modification.vals.len() {
            1 => continue,
            0 => "modify/increment operation requires value",
            _ => "modify/increment operation requires single value",
        };
        return Err(Error::protocol(why));
    }
    Ok(())
}
