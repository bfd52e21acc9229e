//! Modify (RFC 4511 §4.6): add, delete, replace and increment (RFC 4525),
//! applied in order and atomically by the entry's owner.

use crate::conn::Conn;
use crate::ops::add::hash_passwords;
use crate::ops::controls::{self, Controls};
use crate::ops::{check_write_access, parse_dn, with_matched};
use ldap3_proto::control::LdapControl;
use ldap3_proto::proto::{LdapModifyRequest, LdapModifyType};
use ldap3_proto::LdapResultCode;
use shards::entry::{Attr, Mod};
use shards::write::{user_modifiable, Extras, Stamp, WriteOp};
use shards::{now_generalized, Error, Result};
use std::rc::Rc;

pub async fn handle(conn: Rc<Conn>, req: LdapModifyRequest, ctrls: Controls) -> Result<Vec<LdapControl>> {
    check_write_access(&conn)?;
    let dn = parse_dn(&req.dn)?;
    if dn.is_root() {
        return Err(Error::unwilling("the root DSE cannot be modified"));
    }
    let mut mods = Vec::with_capacity(req.changes.len());
    for change in req.changes {
        let mut attr = Attr { name: change.modification.atype, vals: change.modification.vals };
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
    let stamp = Stamp { modifier: conn.identity.borrow().dn().to_string(), time: now_generalized() };
    let key = dn.key();
    let extras =
        Extras { assertion: ctrls.assertion, before: ctrls.pre_read.is_some(), after: ctrls.post_read.is_some() };
    let op = WriteOp::Modify { key: key.clone(), dn: req.dn.clone(), mods, rdn, stamp, extras };
    let shard = &conn.ctx.shard;
    let images = shard.submit_for(shard.owner_of(&key), op).await.map_err(|e| with_matched(&conn, &dn, e))?;
    Ok(controls::read_entry_controls(&conn, images, &ctrls.pre_read, &ctrls.post_read))
}
