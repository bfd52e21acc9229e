//! Extended operations (RFC 4511 §4.12): WhoAmI (RFC 4532), Password
//! Modify (RFC 3062) and Cancel (RFC 3909, for searches: the search ends
//! with `canceled`).
//!
//! Password Modify: a bound user changes their own password (the old one
//! is required and checked); the root DN, and whoever the access rules
//! give `write` on another's `userPassword`, sets it without the old one.
//! Without a new password the server generates one and returns it. The new value is
//! hashed with `passwords.default_scheme` on a blocking thread and written
//! like a modify. StartTLS is answered by `start_tls` (the connection
//! does the handshake); any other name gets `protocolError` naming the OID.

use crate::acl::Level;
use crate::conn::{Conn, Identity};
use crate::ops::{access, parse_dn, result};
use ldap3_proto::proto::{
    LdapExtendedRequest, LdapExtendedResponse, LdapPasswordModifyRequest, LdapPasswordModifyResponse,
    OID_PASSWORD_MODIFY, OID_WHOAMI,
};
use ldap3_proto::LdapResultCode;
use shards::entry::{Attr, Mod};
use shards::write::Stamp;
use shards::{now_generalized, password, Error, Result};

pub const OID_START_TLS: &str = "1.3.6.1.4.1.1466.20037";
pub const OID_CANCEL: &str = "1.3.6.1.1.8";
pub const SUPPORTED: &[&str] = &[OID_WHOAMI, OID_PASSWORD_MODIFY, OID_START_TLS, OID_CANCEL];

/// StartTLS (RFC 4511 §4.14): accepted on a plain connection with TLS
/// configured and no operation in progress; the handshake follows the
/// response. As slapd's, the response has no responseName (§4.14.2 allows
/// either).
pub fn start_tls(conn: &Conn, req: &LdapExtendedRequest) -> LdapExtendedResponse {
    let refuse =
        |code, why: &str| LdapExtendedResponse { res: result(Err(Error::new(code, why))), name: None, value: None };
    if req.value.is_some() {
        // RFC 4511 §4.14.1: no value; slapd refuses one first, empty or not.
        return refuse(LdapResultCode::ProtocolError, "no request data expected");
    }
    if conn.ctx.tls.is_none() {
        // Not offered (absent from supportedExtension): answered as slapd
        // answers an extended operation it does not know.
        return refuse(LdapResultCode::ProtocolError, "TLS is not configured on this server");
    }
    if conn.tls_ssf.get() > 0 {
        return refuse(LdapResultCode::OperationsError, "TLS is already established");
    }
    if conn.transport_ssf > 0 {
        return refuse(LdapResultCode::OperationsError, "StartTLS is not available on the local socket");
    }
    if conn.pending.get() > 0 {
        return refuse(LdapResultCode::OperationsError, "operations are in progress on this connection");
    }
    LdapExtendedResponse { res: result(Ok(())), name: None, value: None }
}

/// Answers at once, or `None` for Password Modify (see `password_modify`).
/// `identity`: who the request runs as (`Controls::requester`); `msgid`:
/// the request's own message ID.
pub fn handle(
    conn: &Conn,
    (msgid, identity): (i32, &Identity),
    req: &LdapExtendedRequest,
) -> Option<LdapExtendedResponse> {
    Some(match req.name.as_str() {
        // As slapd: "no request data expected".
        OID_WHOAMI if req.value.is_some() => LdapExtendedResponse {
            res: result(Err(Error::protocol("Who am I? takes no request value"))),
            name: None,
            value: None,
        },
        OID_WHOAMI => {
            let dn = identity.dn();
            let authz = if dn.is_empty() { String::new() } else { format!("dn:{dn}") };
            LdapExtendedResponse { res: result(Ok(())), name: None, value: Some(authz.into_bytes()) }
        }
        OID_PASSWORD_MODIFY => return None,
        OID_CANCEL => LdapExtendedResponse { res: result(cancel(conn, msgid, req)), name: None, value: None },
        other => LdapExtendedResponse {
            res: result(Err(Error::protocol(format!("extended operation {other} is not supported")))),
            name: None,
            value: None,
        },
    })
}

/// Cancel: `cancelRequestValue ::= SEQUENCE { cancelID MessageID }`. A
/// Cancel of itself (`msgid`) succeeds at once, as slapd's: it is the
/// operation in progress, and is done.
fn cancel(conn: &Conn, msgid: i32, req: &LdapExtendedRequest) -> Result<()> {
    let value = req.value.as_deref().unwrap_or_default();
    let parsed = ldap3_lber::parse::Parser::default().parse(value).ok().filter(|(rest, _)| rest.is_empty());
    let id = parsed
        .and_then(|(_, tag)| tag.expect_constructed())
        .and_then(|mut items| (items.len() == 1).then(|| items.remove(0)))
        .and_then(|t| t.expect_primitive())
        .filter(|b| !b.is_empty() && b.len() <= 4)
        .map(|b| b.iter().fold(if b[0] & 0x80 != 0 { -1i32 } else { 0 }, |n, x| (n << 8) | *x as i32))
        // As slapd: a negative message ID names no operation (RFC 4511
        // §4.1.1: 0 .. maxInt) and is malformed.
        .filter(|id| *id >= 0)
        .ok_or_else(|| Error::protocol("malformed Cancel request value"))?;
    if id == msgid {
        return Ok(());
    }
    let running = conn.running.borrow();
    let (flag, _) = running
        .get(&id)
        .ok_or_else(|| Error::new(LdapResultCode::NoSuchOperation, format!("no search {id} is running")))?;
    // As slapd: one Cancel at a time; the operation ends with `canceled`.
    if !conn.canceled.borrow_mut().insert(id) {
        return Err(Error::new(LdapResultCode::OperationsError, "message ID already being cancelled"));
    }
    flag.raise();
    Ok(())
}

pub async fn password_modify(conn: &Conn, identity: &Identity, req: &LdapExtendedRequest) -> LdapExtendedResponse {
    // RFC 3062 §2: the request value is optional; without it, the bound
    // user asks for a generated password (`ldappasswd` without `-s`).
    let parsed = match &req.value {
        // As slapd: anonymous is refused before the value is read.
        _ if matches!(identity, Identity::Anonymous) => {
            Err(Error::new(LdapResultCode::StrongerAuthRequired, "only authenticated users may change passwords"))
        }
        None => Ok(LdapPasswordModifyRequest { user_identity: None, old_password: None, new_password: None }),
        Some(value) => match crate::strict::password_modify(value) {
            Err(_) => Err(Error::protocol("malformed Password Modify request value")),
            // The user identity is a DN (slapd: "Invalid DN", 21); the
            // passwords any octets (RFC 3062 §2), carried as `decode` does.
            Ok([user, old, new]) => match user.map(std::str::from_utf8).transpose() {
                Err(_) => Err(Error::new(LdapResultCode::InvalidAttributeSyntax, "Invalid DN")),
                Ok(user) => {
                    let octets =
                        |v: &[u8]| shards::octets::escape(v).unwrap_or_else(|| String::from_utf8_lossy(v).into_owned());
                    Ok(LdapPasswordModifyRequest {
                        user_identity: user.map(String::from),
                        old_password: old.map(octets),
                        new_password: new.map(octets),
                    })
                }
            },
        },
    };
    let outcome = match parsed {
        Ok(pm) => change(conn, identity, pm).await,
        Err(e) => Err(e),
    };
    let (res, gen_password) = match outcome {
        Ok(generated) => (result(Ok(())), generated),
        Err(e) => (result(Err(e)), None),
    };
    let generated = gen_password.is_some();
    let mut resp: LdapExtendedResponse = LdapPasswordModifyResponse { res, gen_password }.into();
    // RFC 3062 §2: without a generated password the response value is
    // absent (ldap3_proto would send an empty SEQUENCE, which clients such
    // as the ldap3 crate reject).
    if !generated {
        resp.value = None;
    }
    resp
}

/// slapd's refusal of an old password it cannot check (wrong, or no entry).
const UNVERIFIABLE: &str = "unwilling to verify old password";

async fn change(conn: &Conn, identity: &Identity, req: LdapPasswordModifyRequest) -> Result<Option<String>> {
    crate::ops::check_confidential(conn)?;
    let live = conn.ctx.live();
    let own = match identity {
        Identity::Anonymous => {
            return Err(Error::new(
                LdapResultCode::StrongerAuthRequired,
                "only authenticated users may change passwords",
            ));
        }
        id => id.dn().to_string(),
    };
    // As slapd: an empty new password is refused (a blank form field must
    // not set one that anybody can bind with); an absent one is generated.
    if req.new_password.as_deref() == Some("") {
        return Err(Error::unwilling("the new password must not be empty"));
    }
    // As slapd, the user identity is a DN (not an authzId: `dn:DN` and
    // `u:NAME` are no DNs), and one that is not is invalidAttributeSyntax.
    let target = match req.user_identity.as_deref() {
        None | Some("") => own.clone(),
        Some(id) => id.to_string(),
    };
    let dn = parse_dn(&target).map_err(|e| Error::new(LdapResultCode::InvalidAttributeSyntax, e.message))?;
    // Spaces only: the empty DN, no entry's (slapd: "Invalid DN").
    if dn.is_root() {
        return Err(Error::new(LdapResultCode::InvalidAttributeSyntax, "Invalid DN"));
    }
    if crate::ops::referral::at_or_below(conn, identity, &dn) {
        return Err(Error::unwilling("the entry is a referral object or lies below one"));
    }
    let is_root = identity.is_root();
    let self_change = parse_dn(&own).is_ok_and(|o| o == dn);
    let shard = &conn.ctx.shard;
    // As slapd: a missing entry is noSuchObject (no matchedDN) before any
    // right is asked; one the requester may not know of is reported so too.
    // With an old password to verify it is unwillingToPerform (the root
    // DN's own, with no entry, included), whether or not it exists.
    let missing = || match req.old_password {
        Some(_) => Error::unwilling(UNVERIFIABLE),
        None => Error::no_such_object(&target),
    };
    // One's own entry is known to its user (bound as it), whatever hides
    // it from others: slapd lets it change its password there.
    let known = |key: &[u8]| self_change || crate::ops::disclosed(conn, identity, key);
    let entry = shard.get_entry(&dn.key())?.filter(|_| known(&dn.key()));
    let entry = entry.ok_or_else(missing)?;
    // As slapd: an old password is verified first, as the requester may
    // (auth access to userPassword), before any write right is asked.
    let mut verified = None;
    if let Some(old) = req.old_password.clone() {
        if let Some(a) = conn.access(&live, identity) {
            let attr = [(a.acl().user_password(), "userPassword")];
            access::require(&a, shard, &dn.key(), &attr, Level::Auth).map_err(|_| Error::unwilling(UNVERIFIABLE))?;
        }
        // Milliseconds of key stretching: off the reactor (nothing when the
        // client has gone), against at most as many stored values as a
        // modify verifies.
        let policy = conn.ctx.password_policy;
        let stored: Vec<Vec<u8>> = entry.get("userPassword").map(|a| a.vals.clone()).unwrap_or_default();
        let matched = conn
            .ctx
            .password_check(
                conn.id,
                || conn.info.hung_up(),
                move || {
                    let old = shards::octets::unescape(&old);
                    stored.into_iter().take(crate::ops::modify::MOST_VERIFIED).find(|h| policy.verify(h, &old))
                },
            )
            .await
            .flatten();
        // The value verified, removed by the write itself: a change made
        // meanwhile (the owner's own, say) makes the write fail, not lose.
        verified = Some(matched.ok_or_else(|| Error::unwilling(UNVERIFIABLE))?);
    }
    if let Some(a) = conn.access(&live, identity) {
        let attr = [(a.acl().user_password(), "userPassword")];
        access::require(&a, shard, &dn.key(), &attr, Level::Write)?;
    }
    // A glue entry is missing for a write (slapd's passwd is a modify),
    // named without a matchedDN, as a missing one is here.
    crate::glue::refuse_write(conn, identity, &dn, false).map_err(|e| match e.code {
        LdapResultCode::NoSuchObject => missing(),
        _ => e,
    })?;
    let scheme = conn.ctx.passwords.default_scheme.clone();
    if self_change && !is_root && req.old_password.is_none() && conn.ctx.passwords.self_change_requires_old {
        return Err(Error::unwilling("the old password is required to change one's own password"));
    }
    let generated = req.new_password.is_none().then(generate);
    let new = req.new_password.clone().or_else(|| generated.clone()).expect("one of them");
    // Hashing the new one takes milliseconds too: off the reactor.
    let hashed =
        conn.ctx.password_work(conn.id, move || password::hash(&scheme, &shards::octets::unescape(&new))).await;
    let hashed = hashed.map_err(Error::other)?;
    let mut mods = Vec::with_capacity(2);
    if let Some(old) = verified {
        mods.push(Mod::Delete(Attr { name: "userPassword".into(), vals: vec![old] }));
    }
    mods.push(Mod::Replace(Attr { name: "userPassword".into(), vals: vec![hashed.into_bytes()] }));
    let stamp = Stamp { modifier: own, time: now_generalized() };
    let key = dn.key();
    let _admitted = conn.ctx.admit_write(&dn)?;
    let extras = shards::write::Extras { max_attrs: conn.ctx.live().limits.max_entry_attributes, ..Default::default() };
    shard.modify(key, target, mods, Vec::new(), stamp, extras).await.map_err(|e| match e.code {
        // The verified value went meanwhile.
        LdapResultCode::NoSuchAttribute => Error::unwilling(UNVERIFIABLE),
        _ => e,
    })?;
    Ok(generated)
}

/// A generated password: 16 characters without look-alikes.
fn generate() -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789";
    let mut rng = rand::thread_rng();
    (0..16).map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())] as char).collect()
}
