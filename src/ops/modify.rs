//! Modify (RFC 4511 §4.6): add, delete, replace and increment (RFC 4525),
//! applied in order and atomically by the entry's owner.
//!
//! Needs `write` access to every attribute modified, decided on the entry
//! as the connection's shard reads it just before the write is sent to the
//! owner: a rule with a filter on a value that a concurrent modify changes
//! may see the older value (rules by DN and identity cannot race).

use crate::acl::Level;
use crate::conn::Conn;
use crate::ops::add::hash_passwords;
use crate::ops::controls::{self, Controls};
use crate::ops::{access, parse_dn, with_matched};
use ldap3_proto::control::LdapControl;
use ldap3_proto::proto::{LdapModifyRequest, LdapModifyType};
use ldap3_proto::LdapResultCode;
use shards::entry::{Attr, Mod};
use shards::write::{user_modifiable, Extras, Stamp, WriteOp};
use shards::{now_generalized, Error, Result};
use std::rc::Rc;

pub async fn handle(conn: Rc<Conn>, req: LdapModifyRequest, ctrls: Controls) -> Result<Vec<LdapControl>> {
    let dn = parse_dn(&req.dn)?;
    if dn.is_root() {
        return Err(Error::unwilling("the root DSE cannot be modified"));
    }
    let key = dn.key();
    let identity = conn.identity.borrow().clone();
    let live = conn.ctx.live();
    if let Some(a) = conn.access(&live, &identity) {
        // Checked on the entry as read before the write: rules that look at
        // the entry's content see it as it was (see the module doc).
        let attrs: Vec<_> =
            req.changes.iter().map(|c| (a.acl().class(&c.modification.atype), c.modification.atype.as_str())).collect();
        access::require(&a, &conn.ctx.shard, &key, &attrs, Level::Write)?;
    }
    let mut mods = Vec::with_capacity(req.changes.len());
    for change in req.changes {
        let mut attr = Attr { name: change.modification.atype, vals: change.modification.vals };
        shards::schema::check::check_options(&attr.name)?;
        shards::schema::get().spell_values(&attr.name, &mut attr.vals);
        if !user_modifiable(&attr.name) {
            return Err(Error::new(
                LdapResultCode::ConstraintViolation,
                format!("{}: no user modification allowed", attr.name),
            ));
        }
        mods.push(match change.operation {
            LdapModifyType::Add => {
                hash_passwords(&conn, std::slice::from_mut(&mut attr)).await?;
                Mod::Add(attr)
            }
            LdapModifyType::Delete => Mod::Delete(attr),
            LdapModifyType::Replace => {
                hash_passwords(&conn, std::slice::from_mut(&mut attr)).await?;
                Mod::Replace(attr)
            }
            LdapModifyType::Increment => Mod::Increment(attr),
        });
    }
    let rdn = dn.rdn().map(|r| r.avas.iter().map(|a| (a.attr.clone(), a.value.clone())).collect()).unwrap_or_default();
    let stamp = Stamp { modifier: identity.dn().to_string(), time: now_generalized() };
    let assertion = controls::check_assertion_before_write(&conn, ctrls.assertion, &key)?;
    let extras = Extras { assertion, before: ctrls.pre_read.is_some(), after: ctrls.post_read.is_some() };
    let op = WriteOp::Modify { key: key.clone(), dn: req.dn.clone(), mods, rdn, stamp, extras };
    let shard = &conn.ctx.shard;
    let images = shard.submit_for(shard.owner_of(&key), op).await.map_err(|e| with_matched(&conn, &dn, e))?;
    Ok(controls::read_entry_controls(&conn, images, &ctrls.pre_read, &ctrls.post_read))
}
