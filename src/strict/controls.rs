//! The controls field of a request, checked before ldap3_proto reads it:
//! each control's shape, the values coredir decodes exactly, and the
//! controls slapd would ignore and ldap3_proto could not decode.

use super::*;
use crate::ops;
use crate::stats::Op;

/// The controls whose values coredir decodes (paged results, sort, sync
/// request, assertion, pre-/post-read, matched values, subentries).
pub(super) const DECODED: &[&[u8]] = &[
    b"1.2.840.113556.1.4.319",
    b"1.2.840.113556.1.4.473",
    b"1.3.6.1.4.1.4203.1.9.1.1",
    b"1.3.6.1.1.12",
    b"1.3.6.1.1.13.1",
    b"1.3.6.1.1.13.2",
    b"1.2.826.0.1.3344810.2.3",
    b"1.3.6.1.4.1.4203.1.10.1",
    b"2.16.840.1.113730.3.4.9",
];

/// The response to a request, where it has one.
pub(super) fn response_tag(op: u8) -> Option<u8> {
    match op {
        0x4A => Some(0x6B),
        0x63 => Some(0x65),
        0x60 | 0x66 | 0x68 | 0x6C | 0x6E | 0x77 => Some(op + 1),
        _ => None,
    }
}

/// Controls ldap3_proto decodes into its own types, which need a value:
/// without one it cannot decode the message at all, where slapd answers
/// protocolError ("paged results control value is absent") and goes on.
pub(super) const VALUE_REQUIRED: &[&[u8]] =
    &[b"1.2.840.113556.1.4.319", b"1.2.840.113556.1.4.473", b"1.3.6.1.4.1.4203.1.9.1.1"];

const SYNC_REQUEST: &[u8] = b"1.3.6.1.4.1.4203.1.9.1.1";

/// The operation of request tag `tag`, for `ops::controls::applies`.
fn op_of(tag: u8) -> Op {
    match tag {
        BIND => Op::Bind,
        UNBIND => Op::Unbind,
        SEARCH => Op::Search,
        0x66 => Op::Modify,
        0x68 => Op::Add,
        0x4A => Op::Delete,
        MODIFY_DN => Op::Modrdn,
        0x6E => Op::Compare,
        ABANDON => Op::Abandon,
        _ => Op::Extended,
    }
}

/// Checks the controls field of an operation with tag `op`; the result to
/// refuse it with, if any, for the first control in the list that has
/// one (as slapd parses them in order and stops at the first it refuses):
/// - protocolError when a control coredir decodes is malformed or has
///   bytes after the one element of its value. slapd ignores such bytes;
///   coredir refuses them, so no part of a control goes unread (listed in
///   tests/conformance/differences.toml); a sort key slapd cannot order
///   by is answered with its own code (`sort_refusal`);
/// - protocolError when one of `VALUE_REQUIRED` comes without a value, or
///   one of `DECODED` is given twice;
/// - unavailableCriticalExtension for a critical control coredir does
///   not know, or one that does not apply to the operation
///   (`ops::controls::applies`, the one table of them), in its place in
///   the list: slapd refuses an unknown critical control as it meets it;
/// - no refusal at all when a control `ops::controls::parse` will refuse
///   (a value `ops::controls::read_value` does not take, or one given
///   twice), or a Proxied Authorization `proxy_denied` refuses, comes
///   before any refused here: it is answered once parse has read it, and
///   every control after it is left out unread;
/// - and the controls to leave out, unread, by their offsets in `list`:
///   the others of those (as slapd ignores any such control). This also
///   keeps from ldap3_proto the controls it decodes into types of its own
///   that coredir does not act on (response controls sent in a request,
///   AD's Show Deleted or DirSync, the password policy request), so that
///   a value it cannot decode is not a malformed message.
///
/// The third element: whether `ops::controls::parse` must refuse what is
/// left (`Check::Refusing`). `exop`: an extended request's name.
pub(super) type Controls = (Option<(LdapResultCode, &'static str)>, Vec<std::ops::Range<usize>>, bool);

pub(super) fn check_controls(
    op: u8,
    exop: Option<&str>,
    all: &[u8],
    (sync_offered, proxy_denied): (bool, &dyn Fn(&[u8]) -> bool),
) -> Result<Controls, &'static str> {
    // The first refusal, by the control's place in the list.
    let mut first: Option<(usize, (LdapResultCode, &'static str))> = None;
    // The first control `ops::controls::parse` will refuse, and where it ends.
    let mut deferred: Option<(usize, usize)> = None;
    let mut ignored = Vec::new();
    let mut decoded_seen = 0u16;
    // The places parse fills (`Read::slot`), and whether ManageDsaIT
    // (which ldap3_proto decodes) came already.
    let mut slots: Vec<&'static str> = Vec::new();
    let mut manage_dsa_it = false;
    let mut list = all;
    let mut n = 0;
    while !list.is_empty() {
        n += 1;
        let mut refuse = |code, why| {
            first.get_or_insert((n, (code, why)));
        };
        let at = all.len() - list.len();
        let control = tlv(list)?;
        if control.tag != SEQUENCE {
            return Err("a control is a SEQUENCE");
        }
        let oid = tlv(control.content)?;
        // An empty type is no control coredir knows: unavailable when
        // critical, else ignored, as slapd treats it.
        if oid.tag != OCTET_STRING {
            return Err("a control starts with its type");
        }
        let mut rest = oid.rest;
        let mut seen_value = None;
        let mut seen_criticality = false;
        let mut critical = false;
        // slapd does not read the value of a control on an operation it
        // does not apply to, nor of one it does not offer (it is ignored,
        // or 12 when critical).
        let applies = std::str::from_utf8(oid.content).ok().and_then(|o| ops::controls::applies(o, op_of(op), exop));
        let elsewhere = applies != Some(true) || (oid.content == SYNC_REQUEST && !sync_offered);
        while !rest.is_empty() {
            let field = tlv(rest)?;
            match field.tag {
                BOOLEAN if !seen_criticality && seen_value.is_none() && field.content.len() == 1 => {
                    seen_criticality = true;
                    critical = field.content[0] != 0;
                }
                OCTET_STRING if seen_value.is_none() => {
                    seen_value = Some(field.content);
                    // A control given twice is refused as it is met, before
                    // its value is read (slapd: "specified multiple times").
                    let decoded = DECODED.iter().position(|d| *d == oid.content).filter(|_| !elsewhere);
                    if let Some(i) = decoded {
                        if decoded_seen & (1 << i) != 0 {
                            refuse(LdapResultCode::ProtocolError, "control specified multiple times");
                        }
                        decoded_seen |= 1 << i;
                    }
                    match decoded.and_then(|_| value_refusal(oid.content, field.content)) {
                        Some(LdapResultCode::ProtocolError) => {
                            refuse(LdapResultCode::ProtocolError, "malformed control value, or bytes after it")
                        }
                        Some(code) => refuse(code, "a sort key names no type or ordering rule to sort by"),
                        None => {}
                    }
                    // slapd tests "absent" (`BER_BVISNULL`): empty is a value.
                    if oid.content == b"2.16.840.1.113730.3.4.2" && !elsewhere {
                        refuse(LdapResultCode::ProtocolError, "manageDSAit control value not absent");
                    }
                }
                _ => return Err("a control is type, criticality, value"),
            }
            rest = field.rest;
        }
        if elsewhere {
            if critical && oid.content == SYNC_REQUEST && op == SEARCH {
                refuse(
                    LdapResultCode::UnavailableCriticalExtension,
                    "this server is not a syncrepl provider: set [syncrepl] provider = true (it keeps a changelog)",
                );
            }
            if critical {
                refuse(
                    LdapResultCode::UnavailableCriticalExtension,
                    "critical control not supported with this operation",
                );
            }
            ignored.push(at..all.len() - control.rest.len());
            list = control.rest;
            continue;
        }
        if seen_value.is_none() && VALUE_REQUIRED.contains(&oid.content) {
            refuse(LdapResultCode::ProtocolError, "control value is absent");
        }
        // The controls ldap3_proto leaves undecoded are read by
        // `ops::controls::parse`: one it will refuse (its value, or given
        // twice) is answered there, so no later control's refusal here may
        // overtake it.
        if deferred.is_none() && !LDAP3_TYPES.contains(&oid.content) {
            let name = std::str::from_utf8(oid.content).unwrap_or_default();
            let refused = match ops::controls::read_value(name, critical, seen_value) {
                Err(_) => true,
                // Refused by `ops::dispatch` once parse has read it.
                Ok(ops::controls::Read::Proxied(authzid)) if proxy_denied(&authzid) => true,
                Ok(read) => match read.slot() {
                    Some(slot) if slots.contains(&slot) => true,
                    Some(slot) => {
                        slots.push(slot);
                        false
                    }
                    None => false,
                },
            };
            if refused {
                deferred = Some((n, all.len() - control.rest.len()));
            }
        }
        if oid.content == b"2.16.840.1.113730.3.4.2" {
            if manage_dsa_it {
                refuse(LdapResultCode::ProtocolError, "manageDSAit control specified multiple times");
            }
            manage_dsa_it = true;
        }
        list = control.rest;
    }
    Ok(match (first, deferred) {
        // Nothing after the control parse refuses is read: left out.
        (None, Some((_, end))) => (None, up_to(ignored, end, all.len()), true),
        (Some((i, _)), Some((d, end))) if d < i => (None, up_to(ignored, end, all.len()), true),
        (first, _) => (first.map(|(_, refusal)| refusal), ignored, false),
    })
}

/// The controls to leave out when only those up to `end` are read: the
/// ones ignored before it, and everything after it.
fn up_to(mut ignored: Vec<std::ops::Range<usize>>, end: usize, len: usize) -> Vec<std::ops::Range<usize>> {
    ignored.retain(|r| r.start < end);
    if end < len {
        ignored.push(end..len);
    }
    ignored
}

/// The controls ldap3_proto decodes into types of its own (paged results,
/// sort, sync request, ManageDsaIT), checked here alone.
const LDAP3_TYPES: &[&[u8]] =
    &[b"1.2.840.113556.1.4.319", b"1.2.840.113556.1.4.473", b"1.3.6.1.4.1.4203.1.9.1.1", b"2.16.840.1.113730.3.4.2"];

/// The LDAPMessage of `head` (its messageID and operation) with the
/// controls of `list` but those in `ignored`.
pub(super) fn without(head: &[u8], list: &[u8], ignored: &[std::ops::Range<usize>]) -> Vec<u8> {
    let mut kept = Vec::with_capacity(list.len());
    let mut from = 0;
    for r in ignored {
        kept.extend_from_slice(&list[from..r.start]);
        from = r.end;
    }
    kept.extend_from_slice(&list[from..]);
    let mut content = head.to_vec();
    if !kept.is_empty() {
        content.push(CONTROLS);
        push_len(&mut content, kept.len());
        content.extend_from_slice(&kept);
    }
    let mut msg = vec![SEQUENCE];
    push_len(&mut msg, content.len());
    msg.extend_from_slice(&content);
    msg
}

/// A BER definite length.
pub(super) fn push_len(out: &mut Vec<u8>, n: usize) {
    match n {
        0..=0x7f => out.push(n as u8),
        _ => {
            let bytes = n.to_be_bytes();
            let skip = bytes.iter().take_while(|b| **b == 0).count();
            out.push(0x80 | (bytes.len() - skip) as u8);
            out.extend_from_slice(&bytes[skip..]);
        }
    }
}

/// What to refuse a control value coredir decodes with, if anything: a
/// value must be one well-formed element and nothing after it (an
/// Assertion's, a well-formed filter; Matched Values', well-formed filter
/// items), and a sort key list as slapd reads it (`sort_refusal`).
pub(super) fn value_refusal(oid: &[u8], value: &[u8]) -> Option<LdapResultCode> {
    let malformed = Some(LdapResultCode::ProtocolError);
    let Ok(v) = tlv(value) else { return malformed };
    let shaped = v.rest.is_empty()
        && well_formed(v.tag, v.content, 0).is_ok()
        && (oid != b"1.2.840.113556.1.4.319" || paged_shape(&v))
        && (oid != b"1.3.6.1.1.12" || filter_shape(&v).is_ok())
        && (oid != b"1.2.826.0.1.3344810.2.3" || items_shape(&v).is_ok())
        && (oid != b"1.3.6.1.4.1.4203.1.9.1.1" || sync_shape(&v));
    if !shaped {
        return malformed;
    }
    (oid == b"1.2.840.113556.1.4.473").then(|| sort_refusal(&v)).flatten()
}

/// `SortKeyList ::= SEQUENCE OF SEQUENCE { attributeType
/// AttributeDescription, orderingRule [0] OPTIONAL, reverseOrder [1]
/// OPTIONAL }` (RFC 2891 §1.1), read key by key as slapd reads it: the
/// type, then the rule, then the order, then nothing else
/// (protocolError). slapd stops at the first key it cannot order by
/// (16 or 18) and reads nothing after it, so a malformed key behind
/// such a one is refused with its code. A list without keys is a
/// protocolError. `None`: well-formed and orderable, for `ops::sort`
/// to judge (which also refuses too many keys first; ldap3_proto would
/// read what is left over in a key as more keys).
fn sort_refusal(v: &Tlv<'_>) -> Option<LdapResultCode> {
    let malformed = Some(LdapResultCode::ProtocolError);
    if v.tag != SEQUENCE || v.content.is_empty() {
        return malformed;
    }
    let (mut keys, mut refused, mut count) = (v.content, None, 0);
    while !keys.is_empty() {
        let Ok(key) = tlv(keys) else { return malformed };
        let Ok(attr) = tlv(key.content) else { return malformed };
        if key.tag != SEQUENCE {
            return malformed;
        }
        let mut rest = attr.rest;
        let mut rule = None;
        if let Some(field) = tlv(rest).ok().filter(|f| f.tag == 0x80) {
            (rule, rest) = (Some(field.content), field.rest);
        }
        fn text(b: &[u8]) -> &str {
            std::str::from_utf8(b).unwrap_or("")
        }
        if refused.is_none() {
            refused = crate::ops::sort::resolve(text(attr.content), rule.map(text)).err();
        }
        // reverseOrder, a BOOLEAN: one byte (ldap3_proto reads the first
        // only, slapd all of them as a number).
        if let Some(field) = tlv(rest).ok().filter(|f| f.tag == 0x81 && f.content.len() == 1) {
            rest = field.rest;
        }
        if attr.tag != OCTET_STRING || !rest.is_empty() {
            return refused.or(malformed);
        }
        (keys, count) = (key.rest, count + 1);
    }
    // A key slapd cannot order by is answered now, in the order of the
    // controls, unless there are so many keys that the number is
    // answered first (`ops::sort::Sorter::new`).
    refused.filter(|_| count <= crate::ops::sort::MAX_KEYS_AT_ONCE)
}

/// `syncRequestValue ::= SEQUENCE { mode ENUMERATED { refreshOnly (1),
/// refreshAndPersist (3) }, cookie OCTET STRING OPTIONAL, reloadHint
/// BOOLEAN DEFAULT FALSE }` (RFC 4533 §2.2), exactly.
pub(super) fn sync_shape(v: &Tlv<'_>) -> bool {
    let Ok(mode) = tlv(v.content) else { return false };
    let mut rest = mode.rest;
    for optional in [OCTET_STRING, BOOLEAN] {
        match tlv(rest) {
            Ok(field) if field.tag == optional => rest = field.rest,
            _ => {}
        }
    }
    v.tag == SEQUENCE && mode.tag == ENUMERATED && matches!(mode.content, [1] | [3]) && rest.is_empty()
}

/// `realSearchControlValue ::= SEQUENCE { size INTEGER (0..maxInt),
/// cookie OCTET STRING }` (RFC 2696), exactly.
pub(super) fn paged_shape(v: &Tlv<'_>) -> bool {
    let Ok(size) = tlv(v.content) else { return false };
    let Ok(cookie) = tlv(size.rest) else { return false };
    v.tag == SEQUENCE
        && size.tag == INTEGER
        && in_range(size.content)
        && cookie.tag == OCTET_STRING
        && cookie.rest.is_empty()
}
