//! Compare (RFC 4511 §4.10): `compareTrue`/`compareFalse` under the
//! attribute's matching rule; `userPassword` values are verified as
//! passwords. Needs `compare` access to the attribute; without even
//! `disclose` on the entry the answer is `noSuchObject`.

use crate::acl::{Attr, Level};
use crate::conn::Conn;
use crate::ops::access;
use crate::ops::controls::{self, Controls};
use crate::ops::{parse_dn, with_matched};
use ldap3_proto::proto::LdapCompareRequest;
use ldap3_proto::LdapResultCode;
use shards::{matching, password, Error, Result};

pub fn handle(conn: &Conn, req: &LdapCompareRequest, ctrls: &Controls) -> Result<LdapResultCode> {
    let dn = parse_dn(&req.dn)?;
    let Some(at) = matching::attr_type(&req.atype) else {
        return Err(Error::new(
            LdapResultCode::UndefinedAttributeType,
            format!("{}: attribute type undefined", req.atype),
        ));
    };
    let Some(rule) = at.equality else {
        return Err(Error::new(
            LdapResultCode::InappropriateMatching,
            format!("{}: attribute type has no equality matching rule", req.atype),
        ));
    };
    let is_password = matching::same_attr(&req.atype, "userPassword");
    let key = dn.key();
    let entry =
        conn.ctx.shard.get_entry(&key)?.ok_or_else(|| with_matched(conn, &dn, Error::no_such_object(&req.dn)))?;
    let identity = conn.identity.borrow().clone();
    let live = conn.ctx.live();
    if let Some(access) = conn.access(&live, &identity) {
        let shard = &conn.ctx.shard;
        let attr = [(access.acl().class(&req.atype), req.atype.as_str())];
        if access::require(&access, shard, &key, &attr, Level::Compare).is_err() {
            if access::require(&access, shard, &key, &[(Attr::Entry, "entry")], Level::Disclose).is_err() {
                return Err(with_matched(conn, &dn, Error::no_such_object(&req.dn)));
            }
            return Err(access::denied(Level::Compare, &req.atype));
        }
    }
    controls::check_assertion(ctrls.assertion.as_ref(), &entry)?;
    let attr = entry
        .get(&req.atype)
        .ok_or_else(|| Error::new(LdapResultCode::NoSuchAttribute, format!("{}: no such attribute", req.atype)))?;
    let found = if is_password {
        attr.vals.iter().any(|v| password::verify_with(v, &req.val, conn.ctx.passwords.allow_cleartext))
    } else {
        let Some(want) = rule.normalize(&req.val) else {
            return Err(Error::new(
                LdapResultCode::InvalidAttributeSyntax,
                format!("{}: assertion value invalid per syntax", req.atype),
            ));
        };
        attr.vals.iter().any(|v| rule.normalize(v).is_some_and(|n| n == want))
    };
    Ok(if found { LdapResultCode::CompareTrue } else { LdapResultCode::CompareFalse })
}
