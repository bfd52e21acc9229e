//! Bind (RFC 4511 §4.2, RFC 4513 §5.1): anonymous and simple binds.
//!
//! The root DN is checked against its configured hash and needs no entry.
//! Any other DN binds with a `userPassword` value of its entry. A DN with an
//! empty password is an unauthenticated bind, refused as RFC 4513 §5.1.2
//! advises. A failed bind leaves the connection anonymous.

use crate::conn::{Conn, Identity};
use crate::ops::result;
use ldap3_proto::proto::{LdapBindCred, LdapBindRequest, LdapResult};
use ldap3_proto::LdapResultCode;
use shards::dn::Dn;
use shards::schema::base_type;
use shards::{password, Error, Result};
use std::rc::Rc;

pub fn handle(conn: &Conn, req: &LdapBindRequest) -> (LdapResult, Option<Vec<u8>>) {
    let outcome = authenticate(conn, req);
    *conn.identity.borrow_mut() = match &outcome {
        Ok(id) => id.clone(),
        Err(_) => Identity::Anonymous,
    };
    (result(outcome.map(|_| ())), None)
}

fn authenticate(conn: &Conn, req: &LdapBindRequest) -> Result<Identity> {
    if req.version != 3 {
        return Err(Error::protocol(format!("LDAP version {} is not supported", req.version)));
    }
    let password = match &req.cred {
        LdapBindCred::Simple(p) => p.as_bytes(),
        LdapBindCred::SASL(s) => {
            return Err(Error::new(
                LdapResultCode::AuthMethodNotSupported,
                format!("SASL mechanism {} is not supported", s.mechanism),
            ))
        }
        _ => return Err(Error::new(LdapResultCode::AuthMethodNotSupported, "authentication method not supported")),
    };
    if req.dn.is_empty() {
        return if password.is_empty() { Ok(Identity::Anonymous) } else { Err(invalid()) };
    }
    if password.is_empty() {
        return Err(Error::unwilling("unauthenticated bind (DN with no password) disallowed"));
    }
    let dn = Dn::parse(&req.dn)?;
    let ctx = &conn.ctx;
    if dn == ctx.root_dn {
        return if password::verify(ctx.root_password_hash.as_bytes(), password) {
            Ok(Identity::Root(Rc::from(req.dn.as_str())))
        } else {
            Err(invalid())
        };
    }
    // Checked in place in the snapshot: a bind copies nothing but the DN.
    let bound = ctx.shard.with_entry(&dn.key(), |e| {
        let ok = e
            .attrs()
            // Entries store the type under its schema name.
            .filter(|a| base_type(a.name).eq_ignore_ascii_case("userPassword"))
            .any(|a| a.vals().any(|v| password::verify(v, password)));
        ok.then(|| Rc::from(e.dn()))
    })?;
    bound.flatten().map(Identity::User).ok_or_else(invalid)
}

fn invalid() -> Error {
    Error::new(LdapResultCode::InvalidCredentials, "")
}
