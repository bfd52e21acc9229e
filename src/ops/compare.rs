//! Compare (RFC 4511 §4.10): `compareTrue`/`compareFalse` under the
//! attribute's matching rule; `userPassword` values are verified as
//! passwords, and only the root DN may compare them.

use crate::conn::Conn;
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
    if is_password && !conn.identity.borrow().is_root() {
        return Err(Error::new(LdapResultCode::InsufficentAccessRights, "userPassword: compare not allowed"));
    }
    let entry =
        conn.ctx.shard.get_entry(&dn.key())?.ok_or_else(|| with_matched(conn, &dn, Error::no_such_object(&req.dn)))?;
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
