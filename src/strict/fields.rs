//! The fields of each request: what slapd answers with a result and goes
//! on from (`refused_fields`), and the shapes ldap3_proto would read
//! past (`op_fields`), which end the connection.

use super::*;

/// The protocolOp tags of requests (RFC 4511 §4.2-§4.12); any other is
/// no request, and the connection ends, as slapd's "unknown LDAP request".
pub(super) const REQUESTS: &[u8] = &[0x60, 0x42, 0x63, 0x66, 0x68, 0x4A, 0x6C, 0x6E, 0x50, 0x77];

type Refusal = Option<(LdapResultCode, &'static str)>;

/// The request's fields as slapd reads them before acting: a result for
/// what it answers and goes on from (protocolError for a negative bind
/// version, size or time limit, a scope or alias dereferencing out of
/// range, a modify's operation out of range or a change of other fields,
/// an add without attributes, an extended request of other fields;
/// invalidDNSyntax for a search base that is not UTF-8), checked in
/// slapd's order; an error for what ends the connection (an INTEGER of
/// more than four bytes, as liblber refuses it).
pub(super) fn refused_fields(tag: u8, content: &[u8]) -> Result<Refusal, &'static str> {
    let protocol = |why| Ok(Some((LdapResultCode::ProtocolError, why)));
    match tag {
        BIND => {
            let version = tlv(content)?;
            if version.tag != INTEGER || version.content.len() > 4 {
                return Err("a bind's version is INTEGER (1 .. 127)");
            }
            // slapd reads no bytes as 0, and answers it, after the name.
            if !in_range(version.content) {
                return Ok(bad_dn(tlv(version.rest)?.content)
                    .or(Some((LdapResultCode::ProtocolError, "a bind's version is INTEGER (1 .. 127)"))));
            }
        }
        SEARCH => return search_fields(content),
        0x66 => {
            let changes = tlv(tlv(content)?.rest)?;
            if changes.tag != SEQUENCE || !each(changes.content, modify_change)? {
                return protocol("decoding modlist error");
            }
        }
        0x68 => {
            let dn = tlv(content)?;
            let Ok(attrs) = tlv(dn.rest) else {
                return Ok(bad_dn(dn.content).or(Some((LdapResultCode::ProtocolError, "no attributes provided"))));
            };
            if attrs.tag != SEQUENCE || !each(attrs.content, |a| exactly(a, &[OCTET_STRING, SET]))? {
                return protocol("decoding attribute list error");
            }
        }
        0x77 => {
            let name = tlv(content)?;
            let value = match tlv(name.rest) {
                Ok(v) => v.tag == 0x81 && v.rest.is_empty(),
                Err(_) => name.rest.is_empty(),
            };
            if name.tag != 0x80 || !value {
                return protocol("an extended request is [0] requestName, [1] requestValue OPTIONAL");
            }
        }
        ABANDON if !int_sized(content) && !content.is_empty() => return Err("an AbandonRequest's ID is INTEGER"),
        _ => {}
    }
    Ok(None)
}

/// invalidDNSyntax for a name slapd cannot read as a DN, which it
/// answers before what it finds wrong after the name.
fn bad_dn(name: &[u8]) -> Refusal {
    let valid = std::str::from_utf8(name).is_ok_and(|t| crate::ops::parse_dn(t).is_ok());
    (!valid).then_some((LdapResultCode::InvalidDNSyntax, "invalid DN"))
}

/// A search's first six fields (slapd's `{miiiib`): each INTEGER and
/// ENUMERATED of one to four bytes, the BOOLEAN a BOOLEAN; then, as slapd
/// checks them, the limits, the scope and the dereferencing, the base.
fn search_fields(content: &[u8]) -> Result<Refusal, &'static str> {
    let base = tlv(content)?;
    let scope = tlv(base.rest)?;
    let deref = tlv(scope.rest)?;
    let size = tlv(deref.rest)?;
    let time = tlv(size.rest)?;
    let typesonly = tlv(time.rest)?;
    let ints = [(&scope, ENUMERATED), (&deref, ENUMERATED), (&size, INTEGER), (&time, INTEGER)];
    if ints.iter().any(|(f, t)| f.tag != *t || !int_sized(f.content)) || typesonly.tag != BOOLEAN {
        return Err("a search is base, scope, derefAliases, sizeLimit, timeLimit, typesOnly, filter, attributes");
    }
    let protocol = |why| Ok(Some((LdapResultCode::ProtocolError, why)));
    if !in_range(size.content) || !in_range(time.content) {
        return protocol("sizeLimit and timeLimit are INTEGER (0 .. maxInt)");
    }
    if !(0..=3).contains(&int_value(scope.content)) {
        return protocol("invalid scope");
    }
    if !(0..=3).contains(&int_value(deref.content)) {
        return protocol("invalid deref");
    }
    if std::str::from_utf8(base.content).is_err() {
        return Ok(Some((LdapResultCode::InvalidDNSyntax, "invalid DN")));
    }
    Ok(None)
}

/// A modify's change: `{ operation ENUMERATED (0 .. 3), { type, SET OF
/// value } }` exactly.
fn modify_change(change: &Tlv<'_>) -> Result<bool, &'static str> {
    if !exactly(change, &[ENUMERATED, SEQUENCE])? {
        return Ok(false);
    }
    let operation = tlv(change.content)?;
    let known = int_sized(operation.content) && (0..=3).contains(&int_value(operation.content));
    Ok(known && exactly(&tlv(operation.rest)?, &[OCTET_STRING, SET])?)
}

/// The value of an INTEGER or ENUMERATED of at most eight bytes
/// (two's complement; a leading zero or two, as liblber takes them).
fn int_value(c: &[u8]) -> i64 {
    let negative = c.first().is_some_and(|b| b & 0x80 != 0);
    c.iter().fold(if negative { -1 } else { 0 }, |acc, b| acc << 8 | i64::from(*b))
}

/// Whether `t` is a SEQUENCE of exactly the children tagged `want`.
fn exactly(t: &Tlv<'_>, want: &[u8]) -> Result<bool, &'static str> {
    Ok(match child_tags::<2>(t.content)? {
        Some((tags, n)) => t.tag == SEQUENCE && &tags[..n] == want,
        None => false,
    })
}

/// Whether every element of `list` passes `check`.
fn each(list: &[u8], check: impl Fn(&Tlv<'_>) -> Result<bool, &'static str>) -> Result<bool, &'static str> {
    let mut rest = list;
    while !rest.is_empty() {
        let item = tlv(rest)?;
        if !check(&item)? {
            return Ok(false);
        }
        rest = item.rest;
    }
    Ok(true)
}

/// The number of fields each request has (RFC 4511 §4.2-§4.12): ldap3_proto
/// ignores extra ones and some unknown tags, so they are refused here.
/// ModifyDN's fields are checked one by one (a newSuperior under another
/// tag than `[0]` was dropped, renaming in place).
pub(super) fn op_fields(tag: u8, content: &[u8]) -> Result<(), &'static str> {
    let (min, max) = match tag {
        0x60 => (3, 3),        // BindRequest
        0x63 => (8, 8),        // SearchRequest
        0x66 | 0x68 => (2, 2), // ModifyRequest, AddRequest
        0x6E => (2, 2),        // CompareRequest
        0x77 => (1, 2),        // ExtendedRequest
        MODIFY_DN => return modify_dn_fields(content),
        _ => return Ok(()),
    };
    let mut n = 0;
    let mut rest = content;
    while !rest.is_empty() {
        rest = tlv(rest)?.rest;
        n += 1;
    }
    if n < min || n > max {
        return Err("wrong number of fields in the operation");
    }
    inner_fields(tag, content)
}

/// The parts inside a request ldap3_proto reads by position and would
/// read past: a compare's assertion `{ type, value }` and a SASL bind's
/// `{ mechanism, credentials OPTIONAL }`, each exactly (an add's and a
/// modify's are read by `refused_fields`).
fn inner_fields(tag: u8, content: &[u8]) -> Result<(), &'static str> {
    let second = || tlv(tlv(content)?.rest);
    match tag {
        0x6E if !exactly(&second()?, &[OCTET_STRING, OCTET_STRING])? => {
            Err("a compare's assertion is a type and a value")
        }
        0x60 => match tlv(second()?.rest)? {
            sasl if sasl.tag == 0xA3 => match child_tags::<2>(sasl.content)? {
                Some(([OCTET_STRING, OCTET_STRING], 2) | ([OCTET_STRING, _], 1)) => Ok(()),
                _ => Err("SASL credentials are a mechanism and optional credentials"),
            },
            _ => Ok(()),
        },
        _ => Ok(()),
    }
}

/// `entry LDAPDN, newrdn RelativeLDAPDN, deleteoldrdn BOOLEAN,
/// newSuperior [0] LDAPDN OPTIONAL`, exactly.
fn modify_dn_fields(content: &[u8]) -> Result<(), &'static str> {
    let entry = tlv(content)?;
    let newrdn = tlv(entry.rest)?;
    let delete_old = tlv(newrdn.rest)?;
    if entry.tag != OCTET_STRING || newrdn.tag != OCTET_STRING || delete_old.tag != BOOLEAN {
        return Err("a modify-DN is entry, newrdn, deleteoldrdn, newSuperior");
    }
    if !delete_old.rest.is_empty() {
        let sup = tlv(delete_old.rest)?;
        if sup.tag != 0x80 || !sup.rest.is_empty() {
            return Err("a modify-DN's newSuperior is [0], and last");
        }
    }
    Ok(())
}
