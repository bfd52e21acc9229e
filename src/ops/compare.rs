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
use shards::ReadTxn;
use shards::{matching, password, Error, Result};

/// The class a Compare of `objectClass` asks about, if it names one. A
/// name the schema does not know is invalidAttributeSyntax, as slapd's
/// objectIdentifierMatch finds no OID for it; an unknown numeric OID is
/// merely no class of the entry.
fn object_class(atype: &str, value: &[u8]) -> Result<Option<usize>> {
    // structuralObjectClass too, as slapd compares it with objectClass's rule.
    if !matching::same_attr(atype, "objectClass") && !matching::same_attr(atype, "structuralObjectClass") {
        return Ok(None);
    }
    let name = std::str::from_utf8(value).unwrap_or("");
    match shards::schema::get().class_index(name) {
        Some(c) => Ok(Some(c)),
        None if name.starts_with(|c: char| c.is_ascii_digit()) => Ok(None),
        None => Err(Error::new(
            LdapResultCode::InvalidAttributeSyntax,
            format!("objectClass: assertion value invalid per syntax (unknown object class '{name}')"),
        )),
    }
}

/// hasSubordinates is computed from the entry's child count, as a search
/// returns it (RFC 3045-style booleans, `TRUE`/`FALSE`).
fn compare_has_subordinates(conn: &Conn, key: &[u8], value: &[u8]) -> Result<LdapResultCode> {
    let rule = matching::Rule::Boolean;
    let Some(want) = rule.normalize_assertion(value) else {
        return Err(Error::new(LdapResultCode::InvalidAttributeSyntax, "hasSubordinates: assertion value invalid"));
    };
    let has = conn.ctx.shard.children(key)? > 0;
    Ok(match (want.as_ref() == b"TRUE") == has {
        true => LdapResultCode::CompareTrue,
        false => LdapResultCode::CompareFalse,
    })
}

/// entryDN is not stored with the entry: slapd refuses to compare it
/// (unwillingToPerform) once the value is a valid DN; search with an
/// `(entryDN=...)` filter instead.
fn compare_entry_dn(value: &[u8]) -> Result<LdapResultCode> {
    if std::str::from_utf8(value).ok().and_then(|v| shards::dn::key_of(v).ok()).is_none() {
        return Err(Error::new(LdapResultCode::InvalidAttributeSyntax, "entryDN: assertion value invalid per syntax"));
    }
    Err(Error::new(LdapResultCode::UnwillingToPerform, "entryDN: Compare not supported; search with (entryDN=...)"))
}

/// A Compare's answer: now, or once a password is verified off the reactor.
pub enum Answer {
    Now(LdapResultCode),
    Verify(crate::ops::bind::Check),
}

pub fn handle(conn: &Conn, req: &LdapCompareRequest, ctrls: &Controls) -> Result<Answer> {
    let dn = parse_dn(&req.dn)?;
    let Some(at) = matching::attr_type(&req.atype) else {
        return Err(Error::new(
            LdapResultCode::UndefinedAttributeType,
            format!("{}: attribute type undefined", req.atype),
        ));
    };
    let Some(rule) = at.equality_or_dn() else {
        return Err(Error::new(
            LdapResultCode::InappropriateMatching,
            format!("{}: attribute type has no equality matching rule", req.atype),
        ));
    };
    // The description and the value are checked before the entry is
    // looked for, as slapd's frontend does: a bad one is refused (17, 21)
    // whether or not the entry exists.
    shards::schema::check::check_options(&req.atype)?;
    // With options too: their values are hashed as userPassword's are
    // (`ops::add::hash_passwords`), and verified so.
    let is_password = matching::attr_type(&req.atype).is_some_and(|t| t.oid == "2.5.4.35");
    let class = object_class(&req.atype, &req.val)?;
    let want = match is_password {
        true => None,
        false => Some(rule.normalize_assertion(&req.val).ok_or_else(|| {
            Error::new(
                LdapResultCode::InvalidAttributeSyntax,
                format!("{}: assertion value invalid per syntax", req.atype),
            )
        })?),
    };
    crate::ops::referral::check_target(conn, &ctrls.acting, &dn, ctrls.manage_dsa_it)?;
    let key = dn.key();
    // The root DSE and cn=Subschema compare as slapd compares them: as
    // the entries a search reads, open to everyone as that search is.
    let computed = match key.is_empty() {
        true => Some(crate::ops::rootdse::entry(&conn.ctx, crate::ops::sasl::mechanisms(conn))),
        false => shards::schema::subschema::is_subschema_key(&key).then(shards::schema::subschema::entry),
    };
    let is_computed = computed.is_some();
    let identity = ctrls.acting.clone();
    let live = conn.ctx.live();
    // One snapshot for the entry compared and the Assertion checked on it.
    let (entry, access, snapshot) = match computed {
        Some(entry) => (entry, None, None),
        None => {
            let txn = conn.ctx.shard.read_for(&key)?;
            let entry = txn.entry(&key)?.map(|(_, view)| shards::entry::Entry::decode_view(&view)).transpose()?;
            let missing = || with_matched(conn, &identity, &dn, Error::no_such_object(&req.dn));
            (entry.ok_or_else(missing)?, conn.access(&live, &identity), Some(txn))
        }
    };
    let shard = &conn.ctx.shard;
    if let Some(access) = &access {
        let attr = [(access.acl().class_of_request(&req.atype), req.atype.as_str())];
        if access::require(access, shard, &key, &attr, Level::Compare).is_err() {
            if access::require(access, shard, &key, &[(Attr::Entry, "entry")], Level::Disclose).is_err() {
                return Err(with_matched(conn, &identity, &dn, Error::no_such_object(&req.dn)));
            }
            return Err(access::denied(Level::Compare, &req.atype));
        }
    }
    // As slapd: on an entry the requester may not know of, any answer
    // but TRUE or FALSE (a failed assertion, no such attribute) is that
    // of a missing entry.
    let undisclosed = |e: Error| match &access {
        Some(a) if access::require(a, shard, &key, &[(Attr::Entry, "entry")], Level::Disclose).is_err() => {
            with_matched(conn, &identity, &dn, Error::no_such_object(&req.dn))
        }
        _ => e,
    };
    let assertion = ctrls.assertion.as_ref();
    let asserted = match (assertion, &snapshot) {
        (None, _) => Ok(()),
        (Some(_), None) => controls::check_assertion_computed(conn, &identity, assertion, &key, &entry),
        // On a big group, index lookups in that snapshot.
        (Some(_), Some(txn)) => match txn.entry(&key)? {
            Some((id, view)) => controls::check_assertion_read(conn, &identity, assertion, &key, (txn, id), &view),
            // Read in the same snapshot above: cannot be missing.
            None => return Err(Error::no_such_object(&req.dn)),
        },
    };
    asserted.map_err(undisclosed)?;
    drop(snapshot);
    if matching::same_attr(&req.atype, "entryDN") {
        return compare_entry_dn(&req.val).map(Answer::Now).map_err(undisclosed);
    }
    if matching::same_attr(&req.atype, "subschemaSubentry") && !is_computed {
        // Computed, not stored: slapd refuses to compare it.
        return Err(undisclosed(Error::unwilling("subschemaSubentry: Compare not supported; read it instead")));
    }
    if matching::same_attr(&req.atype, "hasSubordinates") && !is_computed {
        return compare_has_subordinates(conn, &key, &req.val).map(Answer::Now);
    }
    // A supertype compares the values of its subtypes too (`name`: `cn`, `sn`).
    let names = shards::filter::Names::new(&req.atype)
        .ok_or_else(|| Error::new(LdapResultCode::UndefinedAttributeType, format!("{}: undefined", req.atype)))?;
    // Each subtype needs its own compare right, as in slapd: `name` must
    // not answer for an `sn` the rules hide.
    let may_compare = |name: &str| {
        matching::same_attr(name, &req.atype)
            || access
                .as_ref()
                .is_none_or(|a| access::require(a, shard, &key, &[(a.acl().class(name), name)], Level::Compare).is_ok())
    };
    let vals: Vec<&Vec<u8>> =
        entry.attrs.iter().filter(|a| names.covers(&a.name) && may_compare(&a.name)).flat_map(|a| &a.vals).collect();
    if vals.is_empty() {
        return Err(undisclosed(Error::new(
            LdapResultCode::NoSuchAttribute,
            format!("{}: no such attribute", req.atype),
        )));
    }
    let policy = conn.ctx.password_policy;
    let found = if is_password {
        // The stored value itself matches, as slapd's octetStringMatch; a
        // cleartext matches the hash it verifies against, as it would on a
        // slapd that keeps cleartext (coredir never does). Key stretching
        // goes to the blocking pool, as for a bind.
        if vals.iter().any(|v| **v == req.val) {
            return Ok(Answer::Now(code(true)));
        }
        if vals.iter().any(|v| password::is_slow(v)) {
            return Ok(Answer::Verify(crate::ops::bind::Check::new(
                vals.into_iter().cloned().collect(),
                &req.val,
                policy,
            )));
        }
        vals.iter().any(|v| policy.verify(v, &req.val))
    } else if let Some(class) = class {
        // An entry is of every superclass of its classes (RFC 4512 §2.4.1).
        let schema = shards::schema::get();
        schema.classes[class].oid == "2.5.6.0"
            || vals
                .iter()
                .any(|v| schema.class_index(&String::from_utf8_lossy(v)).is_some_and(|c| schema.is_subclass(c, class)))
    } else {
        let want = want.expect("checked above unless a password");
        vals.iter().any(|v| rule.normalize(v).is_some_and(|n| n == want))
    };
    Ok(Answer::Now(code(found)))
}

pub fn code(found: bool) -> LdapResultCode {
    if found {
        LdapResultCode::CompareTrue
    } else {
        LdapResultCode::CompareFalse
    }
}
