//! Strict decoding of an LDAPMessage (RFC 4511 §4.1.1) before ldap3_proto
//! reads it: ldap3_proto skips what it does not understand (a malformed
//! controls field was dropped, so a modify whose critical Assertion did
//! not hold was applied), so every byte of a frame is checked here first.
//!
//! - The envelope: `SEQUENCE { messageID INTEGER (1..2^31-1), protocolOp,
//!   controls [0] SEQUENCE OF Control OPTIONAL }` and nothing after it;
//!   each Control is `{ OCTET STRING, BOOLEAN OPTIONAL, OCTET STRING
//!   OPTIONAL }` in that order (message ID 0 is reserved for notices).
//! - The protocolOp is well-formed BER throughout: definite lengths, every
//!   constructed element exactly filled by its children, every BOOLEAN one
//!   byte (an extensible match's `dnAttributes [4]` too), nesting at most
//!   `MAX_DEPTH` deep.
//! - A control coredir decodes has nothing after the one element of its
//!   value: protocolError, with an answer (slapd ignores such bytes).
//! - Bind, search, modify, add, compare and extended requests have their
//!   number of fields, and a modify-DN exactly its four, in order.
//! - A modify-DN's names are UTF-8 (ldap3_proto dropped a newSuperior that
//!   was not, renaming in place): `invalidDNSyntax`, as slapd answers.
//!
//! - A paged results, sort or sync control without a value, not critical,
//!   on an operation it does not apply to is left out (`Check::Without`,
//!   the one case that allocates: a copy of the message without it), as
//!   slapd ignores it; ldap3_proto could not decode the message with it.
//!
//! A malformed frame is a protocolError and a disconnect (RFC 4511 §4.1.1);
//! the work is linear in the frame.

use ldap3_proto::LdapResultCode;

/// How deep a protocolOp may nest (filters are bounded again, by depth
/// and terms, when they are compiled).
const MAX_DEPTH: usize = 128;

const BOOLEAN: u8 = 0x01;
const INTEGER: u8 = 0x02;
const ENUMERATED: u8 = 0x0A;
const SET: u8 = 0x31;
const OCTET_STRING: u8 = 0x04;
const SEQUENCE: u8 = 0x30;
const CONTROLS: u8 = 0xA0;
const MODIFY_DN: u8 = 0x6C;
const SEARCH: u8 = 0x63;
const ABANDON: u8 = 0x50;
const UNBIND: u8 = 0x42;
const BIND: u8 = 0x60;
/// A filter's `extensibleMatch [9]` and its `dnAttributes [4]` (the only
/// `[9]` in a protocolOp is the filter's).
const EXTENSIBLE_MATCH: u8 = 0xA9;
const DN_ATTRIBUTES: u8 = 0x84;

/// What the checks found in a frame.
#[derive(Debug, PartialEq)]
pub enum Check {
    /// Well-formed: ldap3_proto may decode it.
    Ok,
    /// Well-formed but refused with a result: the message's ID, the
    /// response tag to answer with, the code and why.
    Refuse { msgid: i32, tag: u8, code: LdapResultCode, why: &'static str },
    /// Well-formed, and ignored as slapd ignores it (an Abandon of a
    /// message ID out of range): nothing is done, nothing answered.
    Ignore,
    /// Well-formed, with controls slapd would ignore and ldap3_proto could
    /// not decode (a non-critical paged results control without a value
    /// on a modify): the message without them, to decode instead.
    Without(Vec<u8>),
}

/// One TLV: its tag, its content, and what follows it.
struct Tlv<'a> {
    tag: u8,
    content: &'a [u8],
    rest: &'a [u8],
}

fn tlv(buf: &[u8]) -> Result<Tlv<'_>, &'static str> {
    let (&tag, buf) = buf.split_first().ok_or("truncated element")?;
    if tag & 0x1F == 0x1F {
        return Err("multi-byte tags are not LDAP");
    }
    let (&first, buf) = buf.split_first().ok_or("truncated length")?;
    let (len, buf) = if first < 0x80 {
        (first as usize, buf)
    } else {
        let n = (first & 0x7F) as usize;
        if n == 0 {
            return Err("indefinite length");
        }
        if n > 4 || buf.len() < n {
            return Err("bad length");
        }
        (buf[..n].iter().fold(0usize, |acc, b| acc << 8 | *b as usize), &buf[n..])
    };
    if len > buf.len() {
        return Err("element longer than its container");
    }
    Ok(Tlv { tag, content: &buf[..len], rest: &buf[len..] })
}

/// A Password Modify request value (RFC 3062 §2), read whole: `SEQUENCE {
/// userIdentity [0], oldPasswd [1], newPasswd [2] }`, each an optional
/// primitive OCTET STRING, in that order, once, and nothing after the
/// sequence, as slapd reads it ("data decoding error" otherwise). Not
/// checked with the frame: it is an extended request's opaque value.
pub fn password_modify(value: &[u8]) -> Result<[Option<&[u8]>; 3], &'static str> {
    let seq = tlv(value)?;
    if seq.tag != SEQUENCE || !seq.rest.is_empty() {
        return Err("not one SEQUENCE");
    }
    let (mut fields, mut next, mut rest) = ([None; 3], 0, seq.content);
    while !rest.is_empty() {
        let field = tlv(rest)?;
        let at = match field.tag {
            0x80..=0x82 => (field.tag - 0x80) as usize,
            _ => return Err("unknown field"),
        };
        if at < next {
            return Err("field out of order or given twice");
        }
        fields[at] = Some(field.content);
        (next, rest) = (at + 1, field.rest);
    }
    Ok(fields)
}

/// Checks a whole frame (one LDAPMessage, as `ber::peek_frame` sized it).
pub fn check(frame: &[u8]) -> Result<Check, &'static str> {
    let msg = tlv(frame)?;
    if msg.tag != SEQUENCE || !msg.rest.is_empty() {
        return Err("not an LDAPMessage");
    }
    let id = tlv(msg.content)?;
    let msgid = message_id(&id)?;
    let op = tlv(id.rest)?;
    well_formed(op.tag, op.content, 0)?;
    op_fields(op.tag, op.content)?;
    // ldap3_proto reads an INTEGER without its sign and cuts it to 32
    // bits (`ff` is 255, not -1): every INTEGER it would act on is
    // checked to be in 0..maxInt here.
    if op.tag == ABANDON && (op.content.is_empty() || !in_range(op.content)) {
        return Ok(Check::Ignore);
    }
    if op.tag == UNBIND && !op.content.is_empty() {
        return Err("an UnbindRequest is NULL");
    }
    // A bind's version, `2^32 + 3` read as 3, would pass for LDAPv3.
    if op.tag == BIND && tlv(op.content).is_ok_and(|v| v.tag != INTEGER || !in_range(v.content)) {
        return Err("a bind's version is INTEGER (1 .. 127)");
    }
    if op.tag == SEARCH {
        let mut rest = op.content;
        for i in 0..6 {
            let field = tlv(rest)?;
            if (i == 3 || i == 4) && (field.tag != INTEGER || !in_range(field.content)) {
                let why = "sizeLimit and timeLimit are INTEGER (0 .. maxInt)";
                return Ok(Check::Refuse { msgid, tag: 0x65, code: LdapResultCode::ProtocolError, why });
            }
            rest = field.rest;
        }
        filter_shape(&tlv(rest)?)?;
    }
    // Controls to leave out, once every other check has passed: the
    // message decoded instead is checked only by what is done here.
    let mut leave_out = None;
    if !op.rest.is_empty() {
        let controls = tlv(op.rest)?;
        if controls.tag != CONTROLS || !controls.rest.is_empty() {
            return Err("trailing data after the operation");
        }
        let (refused, ignored) = check_controls(op.tag, controls.content)?;
        if let Some((code, why)) = refused {
            if let Some(tag) = response_tag(op.tag) {
                return Ok(Check::Refuse { msgid, tag, code, why });
            }
        }
        leave_out = (!ignored.is_empty()).then_some((controls.content, ignored));
    }
    if let Some(tag) = response_tag(op.tag).filter(|_| !dns_utf8(op.tag, op.content).unwrap_or(true)) {
        let why = "a DN is not UTF-8";
        return Ok(Check::Refuse { msgid, tag, code: LdapResultCode::InvalidDNSyntax, why });
    }
    Ok(match leave_out {
        Some((list, ignored)) => {
            Check::Without(without(&msg.content[..msg.content.len() - op.rest.len()], list, &ignored))
        }
        None => Check::Ok,
    })
}

/// Whether an INTEGER's content is a value in 0..maxInt (2^31 - 1), in
/// the fewest bytes a value may take and one more for a leading zero.
fn in_range(c: &[u8]) -> bool {
    !c.is_empty() && c[0] & 0x80 == 0 && (c.len() < 5 || (c.len() == 5 && c[0] == 0 && c[1] & 0x80 == 0))
}

/// `MessageID ::= INTEGER (0 .. maxInt)`; 0 is reserved for unsolicited
/// notifications, so a request must carry 1 or more.
fn message_id(id: &Tlv<'_>) -> Result<i32, &'static str> {
    let c = id.content;
    if id.tag != INTEGER || c.is_empty() || c.len() > 5 || (c.len() == 5 && c[0] != 0) {
        return Err("bad message ID");
    }
    if c[0] & 0x80 != 0 {
        return Err("negative message ID");
    }
    let v = c.iter().fold(0i64, |acc, b| acc << 8 | *b as i64);
    match i32::try_from(v) {
        Ok(v) if v > 0 => Ok(v),
        _ => Err("message ID out of range"),
    }
}

/// BER well-formedness of one element: a constructed one exactly filled by
/// well-formed children, a universal BOOLEAN of one byte.
fn well_formed(tag: u8, content: &[u8], depth: usize) -> Result<(), &'static str> {
    if depth > MAX_DEPTH {
        return Err("nested too deep");
    }
    if tag == BOOLEAN && content.len() != 1 {
        return Err("a BOOLEAN is one byte");
    }
    if tag & 0x20 == 0 {
        return Ok(());
    }
    let mut rest = content;
    while !rest.is_empty() {
        let child = tlv(rest)?;
        // An extensibleMatch's dnAttributes: `[4] BOOLEAN`, one byte too.
        if tag == EXTENSIBLE_MATCH && child.tag == DN_ATTRIBUTES && child.content.len() != 1 {
            return Err("a BOOLEAN is one byte");
        }
        well_formed(child.tag, child.content, depth + 1)?;
        rest = child.rest;
    }
    Ok(())
}

/// The controls whose values coredir decodes (paged results, sort, sync
/// request, assertion, pre-/post-read, matched values, subentries).
const DECODED: &[&[u8]] = &[
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
fn response_tag(op: u8) -> Option<u8> {
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
const VALUE_REQUIRED: &[&[u8]] = &[b"1.2.840.113556.1.4.319", b"1.2.840.113556.1.4.473", b"1.3.6.1.4.1.4203.1.9.1.1"];

/// Controls ldap3_proto decodes without their criticality, with the
/// operation each applies to in coredir (none: not implemented).
const CRITICALITY_DROPPED: &[(&[u8], Option<u8>)] = &[
    (b"1.2.840.113556.1.4.319", Some(SEARCH)),
    (b"1.2.840.113556.1.4.473", Some(SEARCH)),
    // Active Directory's DirSync.
    (b"1.2.840.113556.1.4.841", None),
];

/// Checks the controls field of an operation with tag `op`; the result to
/// refuse it with, if any:
/// - protocolError when a control coredir decodes has bytes after the one
///   element of its value. slapd ignores such bytes; coredir refuses
///   them, so no part of a control goes unread (listed in
///   tests/conformance/differences.toml);
/// - protocolError when one of `VALUE_REQUIRED` comes without a value;
/// - unavailableCriticalExtension for a critical control of those whose
///   criticality ldap3_proto drops, on an operation it does not apply to.
/// - and the controls to leave out: one of `VALUE_REQUIRED` without a value,
///   not critical, on an operation it does not apply to (as slapd ignores
///   any such control), by their offsets in `list`.
type Controls = (Option<(LdapResultCode, &'static str)>, Vec<std::ops::Range<usize>>);

fn check_controls(op: u8, all: &[u8]) -> Result<Controls, &'static str> {
    let mut trailing = false;
    let mut absent = false;
    let mut unavailable = false;
    let mut ignored = Vec::new();
    let mut list = all;
    while !list.is_empty() {
        let at = all.len() - list.len();
        let control = tlv(list)?;
        if control.tag != SEQUENCE {
            return Err("a control is a SEQUENCE");
        }
        let oid = tlv(control.content)?;
        if oid.tag != OCTET_STRING || oid.content.is_empty() {
            return Err("a control starts with its type");
        }
        let mut rest = oid.rest;
        let mut seen_value = false;
        let mut seen_criticality = false;
        let mut critical = false;
        while !rest.is_empty() {
            let field = tlv(rest)?;
            match field.tag {
                BOOLEAN if !seen_criticality && !seen_value && field.content.len() == 1 => {
                    seen_criticality = true;
                    critical = field.content[0] != 0;
                    let applies = CRITICALITY_DROPPED.iter().find(|(o, _)| *o == oid.content).map(|(_, to)| *to);
                    unavailable |= field.content[0] != 0 && applies.is_some_and(|to| to != Some(op));
                }
                OCTET_STRING if !seen_value => {
                    seen_value = true;
                    if DECODED.contains(&oid.content) {
                        trailing |= !value_shape(oid.content, field.content);
                    }
                    // slapd: "manageDSAit control value not absent".
                    trailing |= oid.content == b"2.16.840.1.113730.3.4.2" && !field.content.is_empty();
                }
                _ => return Err("a control is type, criticality, value"),
            }
            rest = field.rest;
        }
        if !seen_value && VALUE_REQUIRED.contains(&oid.content) {
            // Each of them applies to a search only.
            match (op == SEARCH, critical) {
                (true, _) => absent = true,
                (false, true) => unavailable = true,
                (false, false) => ignored.push(at..all.len() - control.rest.len()),
            }
        }
        list = control.rest;
    }
    let refused = match (trailing, unavailable) {
        _ if absent => Some((LdapResultCode::ProtocolError, "control value is absent")),
        (true, _) => Some((LdapResultCode::ProtocolError, "bytes after the value of a control")),
        (_, true) => {
            Some((LdapResultCode::UnavailableCriticalExtension, "critical control not supported with this operation"))
        }
        _ => None,
    };
    Ok((refused, ignored))
}

/// The LDAPMessage of `head` (its messageID and operation) with the
/// controls of `list` but those in `ignored`.
fn without(head: &[u8], list: &[u8], ignored: &[std::ops::Range<usize>]) -> Vec<u8> {
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
fn push_len(out: &mut Vec<u8>, n: usize) {
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

/// Whether a control value coredir decodes is one well-formed element and
/// nothing after it (an Assertion's, a well-formed filter; Matched
/// Values', well-formed filter items).
fn value_shape(oid: &[u8], value: &[u8]) -> bool {
    let Ok(v) = tlv(value) else { return false };
    v.rest.is_empty()
        && well_formed(v.tag, v.content, 0).is_ok()
        && (oid != b"1.2.840.113556.1.4.319" || paged_shape(&v))
        && (oid != b"1.3.6.1.1.12" || filter_shape(&v).is_ok())
        && (oid != b"1.2.826.0.1.3344810.2.3" || items_shape(&v).is_ok())
        && (oid != b"1.3.6.1.4.1.4203.1.9.1.1" || sync_shape(&v))
}

/// `syncRequestValue ::= SEQUENCE { mode ENUMERATED { refreshOnly (1),
/// refreshAndPersist (3) }, cookie OCTET STRING OPTIONAL, reloadHint
/// BOOLEAN DEFAULT FALSE }` (RFC 4533 §2.2), exactly.
fn sync_shape(v: &Tlv<'_>) -> bool {
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
fn paged_shape(v: &Tlv<'_>) -> bool {
    let Ok(size) = tlv(v.content) else { return false };
    let Ok(cookie) = tlv(size.rest) else { return false };
    v.tag == SEQUENCE
        && size.tag == INTEGER
        && in_range(size.content)
        && cookie.tag == OCTET_STRING
        && cookie.rest.is_empty()
}

/// `ValuesReturnFilter ::= SEQUENCE OF SimpleFilterItem` (RFC 3876): filter
/// items, each of its choice's shape, and no AND, OR or NOT.
fn items_shape(v: &Tlv<'_>) -> Result<(), &'static str> {
    if v.tag != SEQUENCE {
        return Err("a values return filter is a SEQUENCE");
    }
    let mut rest = v.content;
    while !rest.is_empty() {
        let item = tlv(rest)?;
        if matches!(item.tag, 0xA0..=0xA2) {
            return Err("a values return filter has no AND, OR or NOT");
        }
        filter_shape(&item)?;
        rest = item.rest;
    }
    Ok(())
}

/// A Filter has the shape RFC 4511 §4.5.1 gives each choice; ldap3_proto
/// keeps what it understood of a wrong one (the last child of a NOT with
/// two, two of an AVA's three elements, four of an extensible match's
/// five), so a filter would be evaluated as something else than was sent.
/// Depth is bounded by `well_formed`, which has been over it first.
fn filter_shape(f: &Tlv<'_>) -> Result<(), &'static str> {
    match f.tag {
        0xA0 | 0xA1 => {
            let mut rest = f.content;
            while !rest.is_empty() {
                let c = tlv(rest)?;
                filter_shape(&c)?;
                rest = c.rest;
            }
        }
        0xA2 => {
            let c = tlv(f.content)?;
            if !c.rest.is_empty() {
                return Err("a NOT filter has one filter");
            }
            filter_shape(&c)?;
        }
        0xA3 | 0xA5 | 0xA6 | 0xA8 => {
            if !matches!(child_tags::<2>(f.content)?, Some(([OCTET_STRING, OCTET_STRING], 2))) {
                return Err("an attribute value assertion is a type and a value");
            }
        }
        0xA4 => substrings_shape(f.content)?,
        0x87 => {}
        EXTENSIBLE_MATCH => {
            let ordered = child_tags::<4>(f.content)?.is_some_and(|(tags, n)| {
                let tags = &tags[..n];
                tags.windows(2).all(|w| w[0] < w[1])
                    && tags.iter().all(|t| (0x81..=0x84).contains(t))
                    && tags.contains(&0x83)
            });
            if !ordered {
                return Err("an extensible match is [1] rule, [2] type, [3] value, [4] dnAttributes, in order");
            }
        }
        _ => return Err("not a filter"),
    }
    Ok(())
}

/// A substrings filter: a type, then at least one piece, `initial` only
/// first and `final` only last.
fn substrings_shape(content: &[u8]) -> Result<(), &'static str> {
    const WHY: &str = "a substrings filter is a type and initial, any and final pieces in order";
    let ty = tlv(content)?;
    let subs = tlv(ty.rest)?;
    if ty.tag != OCTET_STRING || subs.tag != SEQUENCE || !subs.rest.is_empty() || subs.content.is_empty() {
        return Err(WHY);
    }
    let (mut rest, mut first, mut ended) = (subs.content, true, false);
    while !rest.is_empty() {
        let piece = tlv(rest)?;
        let placed = !ended
            && match piece.tag {
                0x80 => first,
                0x81 => true,
                0x82 => {
                    ended = true;
                    true
                }
                _ => false,
            };
        if !placed {
            return Err(WHY);
        }
        (rest, first) = (piece.rest, false);
    }
    Ok(())
}

/// The tags of an element's children and how many there are, when there
/// are at most `N` (the frame check allocates nothing).
fn child_tags<const N: usize>(mut rest: &[u8]) -> Result<Option<([u8; N], usize)>, &'static str> {
    let (mut tags, mut n) = ([0u8; N], 0);
    while !rest.is_empty() {
        let child = tlv(rest)?;
        if n == N {
            return Ok(None);
        }
        tags[n] = child.tag;
        n += 1;
        rest = child.rest;
    }
    Ok(Some((tags, n)))
}

/// The number of fields each request has (RFC 4511 §4.2-§4.12): ldap3_proto
/// ignores extra ones and some unknown tags, so they are refused here.
/// ModifyDN's fields are checked one by one (a newSuperior under another
/// tag than `[0]` was dropped, renaming in place).
fn op_fields(tag: u8, content: &[u8]) -> Result<(), &'static str> {
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
/// read past: a compare's assertion `{ type, value }`, an add's attributes
/// `{ type, SET OF value }`, a modify's changes `{ operation, { type, SET
/// OF value } }`, a SASL bind's `{ mechanism, credentials OPTIONAL }`,
/// each exactly.
fn inner_fields(tag: u8, content: &[u8]) -> Result<(), &'static str> {
    let exactly = |t: &Tlv<'_>, want: &[u8]| -> Result<(), &'static str> {
        match child_tags::<2>(t.content)? {
            Some((tags, n)) if t.tag == SEQUENCE && &tags[..n] == want => Ok(()),
            _ => Err("a part of the request has other fields than its type says"),
        }
    };
    let each = |list: &Tlv<'_>, check: &dyn Fn(&Tlv<'_>) -> Result<(), &'static str>| {
        let mut rest = list.content;
        while !rest.is_empty() {
            let item = tlv(rest)?;
            check(&item)?;
            rest = item.rest;
        }
        Ok(())
    };
    let second = || tlv(tlv(content)?.rest);
    match tag {
        0x6E => exactly(&second()?, &[OCTET_STRING, OCTET_STRING]),
        0x68 => each(&second()?, &|attr| exactly(attr, &[OCTET_STRING, SET])),
        0x66 => each(&second()?, &|change| {
            exactly(change, &[ENUMERATED, SEQUENCE])?;
            exactly(&tlv(tlv(change.content)?.rest)?, &[OCTET_STRING, SET])
        }),
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

/// Whether a request's DNs are UTF-8 (an LDAPDN is a UTF-8 string, RFC
/// 4514): the bind name, the entry or base of a delete, search, modify,
/// add or compare, and a modify-DN's three names. One that is not is
/// invalidDNSyntax, as slapd answers, and the request goes no further:
/// `decode` carries octets only where LDAP allows any (values, passwords).
fn dns_utf8(op: u8, content: &[u8]) -> Result<bool, &'static str> {
    let utf8 = |b: &[u8]| std::str::from_utf8(b).is_ok();
    Ok(match op {
        0x4A => utf8(content),
        MODIFY_DN => modify_dn_utf8(content)?,
        BIND => utf8(tlv(tlv(content)?.rest)?.content),
        SEARCH | 0x66 | 0x68 | 0x6E => utf8(tlv(content)?.content),
        _ => true,
    })
}

/// Whether a ModifyDNRequest's entry, newrdn and newSuperior are UTF-8
/// (its structure is checked by `well_formed` and ldap3_proto).
fn modify_dn_utf8(content: &[u8]) -> Result<bool, &'static str> {
    let mut rest = content;
    while !rest.is_empty() {
        let field = tlv(rest)?;
        if matches!(field.tag, OCTET_STRING | 0x80) && std::str::from_utf8(field.content).is_err() {
            return Ok(false);
        }
        rest = field.rest;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(id: &[u8], op: &[u8], controls: &[u8]) -> Vec<u8> {
        let mut body = vec![INTEGER, id.len() as u8];
        body.extend_from_slice(id);
        body.extend_from_slice(op);
        body.extend_from_slice(controls);
        let mut out = vec![SEQUENCE, body.len() as u8];
        out.extend(body);
        out
    }

    const UNBIND: &[u8] = &[0x42, 0x00];

    #[test]
    fn envelopes() {
        assert_eq!(check(&msg(&[1], UNBIND, &[])), Ok(Check::Ok));
        assert_eq!(check(&msg(&[0], UNBIND, &[])), Err("message ID out of range"));
        assert_eq!(check(&msg(&[0xFF], UNBIND, &[])), Err("negative message ID"));
        assert_eq!(check(&msg(&[0x00, 0x80, 0, 0, 0], UNBIND, &[])), Err("message ID out of range"));
        assert_eq!(check(&msg(&[0x7F, 0xFF, 0xFF, 0xFF], UNBIND, &[])), Ok(Check::Ok));
        // A control with type, criticality and value; then malformed ones.
        let good = [CONTROLS, 12, SEQUENCE, 10, OCTET_STRING, 3, b'1', b'.', b'2', BOOLEAN, 1, 0xFF, OCTET_STRING, 0];
        assert_eq!(check(&msg(&[1], UNBIND, &good)), Ok(Check::Ok));
        let two_byte_bool = [CONTROLS, 9, SEQUENCE, 7, OCTET_STRING, 1, b'1', BOOLEAN, 2, 0, 0xFF];
        assert!(check(&msg(&[1], UNBIND, &two_byte_bool)).is_err());
        let wrong_tag = [0xA1, 2, SEQUENCE, 0];
        assert_eq!(check(&msg(&[1], UNBIND, &wrong_tag)), Err("trailing data after the operation"));
        let truncated = [CONTROLS, 5, SEQUENCE, 5, OCTET_STRING, 1, b'1'];
        assert!(check(&msg(&[1], UNBIND, &truncated)).is_err());
        let value_first = [CONTROLS, 10, SEQUENCE, 8, OCTET_STRING, 1, b'1', OCTET_STRING, 0, BOOLEAN, 1, 0];
        assert!(check(&msg(&[1], UNBIND, &value_first)).is_err());
    }

    #[test]
    fn control_values_with_trailing_bytes() {
        let delete = t(0x4A, b"cn=x");
        let control = |value: &[u8]| {
            let oid = t(OCTET_STRING, b"1.3.6.1.1.12");
            let one = t(SEQUENCE, &[oid, t(OCTET_STRING, value)].concat());
            t(CONTROLS, &one)
        };
        let filter = t(0x87, b"cn");
        assert_eq!(check(&msg(&[3], &delete, &control(&filter))), Ok(Check::Ok));
        let trailing = [filter.as_slice(), &[0, 0]].concat();
        let refused = check(&msg(&[3], &delete, &control(&trailing)));
        assert!(matches!(refused, Ok(Check::Refuse { msgid: 3, tag: 0x6B, code: LdapResultCode::ProtocolError, .. })));
        // Not a control coredir decodes: its value is its own business.
        let other = t(SEQUENCE, &[t(OCTET_STRING, b"1.2.3"), t(OCTET_STRING, &trailing)].concat());
        assert_eq!(check(&msg(&[3], &delete, &t(CONTROLS, &other))), Ok(Check::Ok));
    }

    #[test]
    fn integers_ldap3_proto_would_misread_are_refused() {
        let search = |size: &[u8], control: Vec<u8>| {
            let fields = [t(OCTET_STRING, b""), t(0x0A, &[0]), t(0x0A, &[0]), t(INTEGER, size), t(INTEGER, &[0])];
            let body = [fields.concat(), t(BOOLEAN, &[0]), t(0x87, b"cn"), t(SEQUENCE, &[])].concat();
            check(&msg(&[5], &t(0x63, &body), &control))
        };
        let refused =
            |c: Result<Check, &'static str>| matches!(c, Ok(Check::Refuse { code: LdapResultCode::ProtocolError, .. }));
        assert_eq!(search(&[0x7F], Vec::new()), Ok(Check::Ok));
        assert_eq!(search(&[0, 0x80, 0, 0, 0][..4], Vec::new()), Ok(Check::Ok));
        // -1 (read as 255), 2^32 + 1 (read as 1), 2^31.
        for bad in [&[0xFF][..], &[1, 0, 0, 0, 1], &[0, 0x80, 0, 0, 0]] {
            assert!(refused(search(bad, Vec::new())), "{bad:?}");
        }
        let paged = |value: Vec<u8>| {
            let one = t(SEQUENCE, &[t(OCTET_STRING, b"1.2.840.113556.1.4.319"), t(OCTET_STRING, &value)].concat());
            search(&[0], t(CONTROLS, &one))
        };
        assert_eq!(paged(t(SEQUENCE, &[t(INTEGER, &[5]), t(OCTET_STRING, b"")].concat())), Ok(Check::Ok));
        assert!(refused(paged(t(SEQUENCE, &[t(INTEGER, &[0xFF]), t(OCTET_STRING, b"")].concat()))));
        assert!(refused(paged(t(SEQUENCE, &[t(INTEGER, &[5]), t(OCTET_STRING, b""), t(INTEGER, &[1])].concat()))));
        // An Abandon of -1 (read as 255) or of 2^32 + 7 (read as 7) is ignored, as slapd does.
        assert_eq!(check(&msg(&[6], &t(ABANDON, &[7]), &[])), Ok(Check::Ok));
        assert_eq!(check(&msg(&[6], &t(ABANDON, &[0xFF]), &[])), Ok(Check::Ignore));
        assert_eq!(check(&msg(&[6], &t(ABANDON, &[1, 0, 0, 0, 7]), &[])), Ok(Check::Ignore));
        assert!(check(&msg(&[6], &t(0x42, b"xx"), &[])).is_err());
        let bind = |version: &[u8]| t(0x60, &[t(INTEGER, version), t(OCTET_STRING, b""), t(0x80, b"")].concat());
        assert_eq!(check(&msg(&[6], &bind(&[3]), &[])), Ok(Check::Ok));
        assert!(check(&msg(&[6], &bind(&[1, 0, 0, 0, 3]), &[])).is_err());
        assert_eq!(check(&msg(&[6], &t(0x42, &[]), &[])), Ok(Check::Ok));
    }

    /// On an operation it does not apply to, such a control is left out
    /// when not critical (slapd ignores it) and refused when critical; the
    /// message without it keeps the other controls.
    #[test]
    fn a_valueless_control_that_does_not_apply_is_left_out() {
        let delete = t(0x4A, b"cn=x");
        let paged = t(SEQUENCE, &t(OCTET_STRING, b"1.2.840.113556.1.4.319"));
        let manage = t(SEQUENCE, &t(OCTET_STRING, b"2.16.840.1.113730.3.4.2"));
        let both = [paged.clone(), manage.clone()].concat();
        assert_eq!(
            check(&msg(&[9], &delete, &t(CONTROLS, &both))),
            Ok(Check::Without(msg(&[9], &delete, &t(CONTROLS, &manage))))
        );
        assert_eq!(check(&msg(&[9], &delete, &t(CONTROLS, &paged))), Ok(Check::Without(msg(&[9], &delete, &[]))));
        let critical = t(SEQUENCE, &[t(OCTET_STRING, b"1.2.840.113556.1.4.319"), t(BOOLEAN, &[0xFF])].concat());
        assert!(matches!(
            check(&msg(&[9], &delete, &t(CONTROLS, &critical))),
            Ok(Check::Refuse { code: LdapResultCode::UnavailableCriticalExtension, .. })
        ));
        // Left out only once the rest passed: a rename to a newSuperior
        // that is not UTF-8 is refused, with or without such a control.
        let rename = t(
            0x6C,
            &[t(OCTET_STRING, b"cn=x"), t(OCTET_STRING, b"cn=y"), t(BOOLEAN, &[0xFF]), t(0x80, &[0xC3, 0x28])].concat(),
        );
        assert!(matches!(
            check(&msg(&[9], &rename, &t(CONTROLS, &paged))),
            Ok(Check::Refuse { code: LdapResultCode::InvalidDNSyntax, .. })
        ));
        // A long message keeps its length right.
        let mut len = Vec::new();
        push_len(&mut len, 300);
        assert_eq!(len, [0x82, 0x01, 0x2C]);
    }

    #[test]
    fn a_paged_sort_or_sync_control_without_a_value_is_answered_not_dropped() {
        let search = |control: Vec<u8>| {
            let fields = [t(OCTET_STRING, b""), t(0x0A, &[0]), t(0x0A, &[0]), t(INTEGER, &[0]), t(INTEGER, &[0])];
            let body = [fields.concat(), t(BOOLEAN, &[0]), t(0x87, b"cn"), t(SEQUENCE, &[])].concat();
            check(&msg(&[4], &t(0x63, &body), &t(CONTROLS, &control)))
        };
        for oid in [&b"1.2.840.113556.1.4.319"[..], b"1.2.840.113556.1.4.473", b"1.3.6.1.4.1.4203.1.9.1.1"] {
            let bare = t(SEQUENCE, &t(OCTET_STRING, oid));
            let refused = search(bare);
            assert!(matches!(
                refused,
                Ok(Check::Refuse { msgid: 4, tag: 0x65, code: LdapResultCode::ProtocolError, .. })
            ));
            let critical = t(SEQUENCE, &[t(OCTET_STRING, oid), t(BOOLEAN, &[0xFF])].concat());
            assert!(matches!(search(critical), Ok(Check::Refuse { code: LdapResultCode::ProtocolError, .. })));
        }
        // Others that need no value pass on to their own parsers.
        assert_eq!(search(t(SEQUENCE, &t(OCTET_STRING, b"1.3.6.1.4.1.4203.666.5.12"))), Ok(Check::Ok));
    }

    #[test]
    fn matched_values_items_have_their_shapes() {
        let search = |value: Vec<u8>| {
            let fields = [t(OCTET_STRING, b""), t(0x0A, &[0]), t(0x0A, &[0]), t(INTEGER, &[0]), t(INTEGER, &[0])];
            let body = [fields.concat(), t(BOOLEAN, &[0]), t(0x87, b"cn"), t(SEQUENCE, &[])].concat();
            let control = t(SEQUENCE, &[t(OCTET_STRING, b"1.2.826.0.1.3344810.2.3"), t(OCTET_STRING, &value)].concat());
            check(&msg(&[1], &t(0x63, &body), &t(CONTROLS, &control)))
        };
        let eq = t(0xA3, &[t(OCTET_STRING, b"cn"), t(OCTET_STRING, b"x")].concat());
        assert_eq!(search(t(SEQUENCE, &eq)), Ok(Check::Ok));
        let three = t(0xA3, &[t(OCTET_STRING, b"cn"), t(OCTET_STRING, b"x"), t(OCTET_STRING, b"y")].concat());
        for bad in [t(SEQUENCE, &three), t(SEQUENCE, &t(0xA2, &eq)), eq.clone()] {
            assert!(matches!(search(bad), Ok(Check::Refuse { code: LdapResultCode::ProtocolError, .. })));
        }
    }

    #[test]
    fn filters_have_their_shapes() {
        let search = |filter: Vec<u8>| {
            let fields = [t(OCTET_STRING, b""), t(0x0A, &[0]), t(0x0A, &[0]), t(INTEGER, &[0]), t(INTEGER, &[0])];
            let body = [fields.concat(), t(BOOLEAN, &[0]), filter, t(SEQUENCE, &[])].concat();
            check(&msg(&[1], &t(0x63, &body), &[]))
        };
        let ava =
            |tag: u8, parts: &[&[u8]]| t(tag, &parts.iter().map(|p| t(OCTET_STRING, p)).collect::<Vec<_>>().concat());
        let eq = ava(0xA3, &[b"cn", b"x"]);
        let present = t(0x87, b"cn");
        let subs = |pieces: &[(u8, &[u8])]| {
            let inner: Vec<u8> = pieces.iter().flat_map(|(tag, v)| t(*tag, v)).collect();
            t(0xA4, &[t(OCTET_STRING, b"cn"), t(SEQUENCE, &inner)].concat())
        };
        let good = [
            eq.clone(),
            present.clone(),
            t(0xA0, &[eq.clone(), present.clone()].concat()),
            t(0xA1, &[]),
            t(0xA2, &eq),
            subs(&[(0x80, b"a"), (0x81, b"b"), (0x81, b"c"), (0x82, b"d")]),
            t(0xA9, &[t(0x81, b"caseExactMatch"), t(0x82, b"cn"), t(0x83, b"x"), t(0x84, &[0xFF])].concat()),
        ];
        for f in good {
            assert_eq!(search(f.clone()), Ok(Check::Ok), "{f:02x?}");
        }
        let bad = [
            t(0xA2, &[eq.clone(), present.clone()].concat()),
            ava(0xA3, &[b"cn", b"x", b"y"]),
            ava(0xA5, &[b"cn"]),
            subs(&[]),
            subs(&[(0x81, b"b"), (0x80, b"a")]),
            subs(&[(0x82, b"d"), (0x81, b"b")]),
            t(0xA9, &[t(0x83, b"x"), t(0x83, b"y")].concat()),
            t(0xA9, &[t(0x82, b"cn")].concat()),
            t(0xA9, &[t(0x82, b"cn"), t(0x83, b"x"), t(0x84, &[0]), t(0x85, b"")].concat()),
            t(0xAA, &[]),
        ];
        for f in bad {
            assert!(search(f.clone()).is_err(), "{f:02x?}");
        }
    }

    #[test]
    fn dn_attributes_is_one_byte() {
        let search = |dn_attributes: &[u8]| {
            let filter = t(0xA9, &[t(0x82, b"cn"), t(0x83, b"x"), t(0x84, dn_attributes)].concat());
            let fields = [t(OCTET_STRING, b""), t(0x0A, &[0]), t(0x0A, &[0]), t(INTEGER, &[0]), t(INTEGER, &[0])];
            let body = [fields.concat(), t(BOOLEAN, &[0]), filter, t(SEQUENCE, &[])].concat();
            msg(&[1], &t(0x63, &body), &[])
        };
        assert_eq!(check(&search(&[0xFF])), Ok(Check::Ok));
        assert_eq!(check(&search(&[0, 0xFF])), Err("a BOOLEAN is one byte"));
    }

    fn t(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut out = vec![tag, content.len() as u8];
        out.extend_from_slice(content);
        out
    }

    fn search(types_only: &[u8], trailing: &[u8]) -> Vec<u8> {
        let body = [
            t(OCTET_STRING, b""),
            t(0x0A, &[0]),
            t(0x0A, &[0]),
            t(INTEGER, &[0]),
            t(INTEGER, &[0]),
            t(BOOLEAN, types_only),
            t(0x87, b"cn"),
            t(SEQUENCE, b""),
            trailing.to_vec(),
        ]
        .concat();
        t(0x63, &body)
    }

    #[test]
    fn operations() {
        assert_eq!(check(&msg(&[1], &search(&[0], b""), &[])), Ok(Check::Ok));
        assert_eq!(check(&msg(&[1], &search(&[0, 0], b""), &[])), Err("a BOOLEAN is one byte"));
        // A truncated element inside the operation.
        assert!(check(&msg(&[1], &search(&[0], &[OCTET_STRING, 5, 0]), &[])).is_err());
        // Extra fields, and a newSuperior under another tag.
        assert!(check(&msg(&[1], &search(&[0], &t(OCTET_STRING, b"x")), &[])).is_err());
        let other_tag = [t(OCTET_STRING, b"c=a"), t(OCTET_STRING, b"c=b"), t(BOOLEAN, &[0xFF]), t(0x81, b"c=z")];
        assert!(check(&msg(&[1], &t(MODIFY_DN, &other_tag.concat()), &[])).is_err());
        // A modify-DN to a newSuperior that is not UTF-8.
        let rename = [t(OCTET_STRING, b"c=a"), t(OCTET_STRING, b"c=b"), t(BOOLEAN, &[0xFF]), t(0x80, &[0xC3, 0x28])];
        let rename = t(MODIFY_DN, &rename.concat());
        assert!(matches!(check(&msg(&[7], &rename, &[])), Ok(Check::Refuse { msgid: 7, tag: 0x6D, .. })));
        // Every request's DN that is not UTF-8 is invalidDNSyntax, in the
        // response of its kind; a filter value that is not is carried on.
        let latin1 = b"uid=Jos\xe9";
        let bind = t(BIND, &[t(INTEGER, &[3]), t(OCTET_STRING, latin1), t(0x80, b"pw")].concat());
        let delete = t(0x4A, latin1);
        let compare = t(
            0x6E,
            &[t(OCTET_STRING, latin1), t(SEQUENCE, &[t(OCTET_STRING, b"cn"), t(OCTET_STRING, b"x")].concat())].concat(),
        );
        for (op, tag) in [(bind, 0x61), (delete, 0x6B), (compare, 0x6F)] {
            let refused = check(&msg(&[9], &op, &[]));
            assert!(
                matches!(refused, Ok(Check::Refuse { tag: t, code: LdapResultCode::InvalidDNSyntax, .. }) if t == tag),
                "{refused:?}"
            );
        }
        let filter = t(0xA3, &[t(OCTET_STRING, b"cn"), t(OCTET_STRING, b"Jos\xe9")].concat());
        let fields =
            [t(OCTET_STRING, b"o=x"), t(ENUMERATED, &[0]), t(ENUMERATED, &[0]), t(INTEGER, &[0]), t(INTEGER, &[0])];
        let search = t(SEARCH, &[fields.concat(), t(BOOLEAN, &[0]), filter, t(SEQUENCE, b"")].concat());
        assert_eq!(check(&msg(&[9], &search, &[])), Ok(Check::Ok));
    }

    /// What ldap3_proto reads by position inside a request has exactly
    /// its fields: a compare's assertion of three elements used the later
    /// ones, an add's attribute or a SASL bind's credentials with an extra
    /// element were taken without it.
    #[test]
    fn inner_parts_have_their_fields() {
        let os = |v: &[u8]| t(OCTET_STRING, v);
        let seq = |parts: &[Vec<u8>]| t(SEQUENCE, &parts.concat());
        let compare = |ava: Vec<u8>| t(0x6E, &[os(b"c=a"), ava].concat());
        assert_eq!(check(&msg(&[1], &compare(seq(&[os(b"cn"), os(b"a")])), &[])), Ok(Check::Ok));
        assert!(check(&msg(&[1], &compare(seq(&[os(b"cn"), os(b"a"), os(b"x")])), &[])).is_err());
        let add = |attr: Vec<u8>| t(0x68, &[os(b"c=a"), seq(&[attr])].concat());
        assert_eq!(check(&msg(&[1], &add(seq(&[os(b"cn"), t(SET, &os(b"a"))])), &[])), Ok(Check::Ok));
        assert!(check(&msg(&[1], &add(seq(&[os(b"cn"), t(SET, &os(b"a")), os(b"x")])), &[])).is_err());
        let modify = |change: Vec<u8>| t(0x66, &[os(b"c=a"), seq(&[change])].concat());
        let replace = |m: Vec<u8>| seq(&[t(ENUMERATED, &[2]), m]);
        assert_eq!(check(&msg(&[1], &modify(replace(seq(&[os(b"cn"), t(SET, b"")]))), &[])), Ok(Check::Ok));
        assert!(check(&msg(&[1], &modify(replace(seq(&[os(b"cn"), t(SET, b""), os(b"x")]))), &[])).is_err());
        let bind = |auth: Vec<u8>| t(0x60, &[t(INTEGER, &[3]), os(b""), auth].concat());
        assert_eq!(check(&msg(&[1], &bind(t(0xA3, &os(b"EXTERNAL"))), &[])), Ok(Check::Ok));
        assert_eq!(check(&msg(&[1], &bind(t(0xA3, &[os(b"EXTERNAL"), os(b"")].concat())), &[])), Ok(Check::Ok));
        assert!(check(&msg(&[1], &bind(t(0xA3, &[os(b"EXTERNAL"), t(INTEGER, &[1])].concat())), &[])).is_err());
        assert!(check(&msg(&[1], &bind(t(0xA3, &[os(b"EXTERNAL"), os(b""), os(b"")].concat())), &[])).is_err());
    }

    /// A Sync Request value is its mode (1 or 3), an optional cookie and
    /// an optional reloadHint, in that order, and nothing else.
    #[test]
    fn sync_request_values_have_their_shape() {
        let shaped = |v: Vec<u8>| sync_shape(&tlv(&v).unwrap());
        let mode = |m: u8| t(ENUMERATED, &[m]);
        assert!(shaped(t(SEQUENCE, &mode(1))));
        assert!(shaped(t(SEQUENCE, &[mode(3), t(OCTET_STRING, b"rid=1"), t(BOOLEAN, &[0xFF])].concat())));
        assert!(shaped(t(SEQUENCE, &[mode(3), t(BOOLEAN, &[0])].concat())));
        for bad in [
            t(SEQUENCE, &mode(2)),
            t(SEQUENCE, &[mode(1), t(INTEGER, &[1])].concat()),
            t(SEQUENCE, &[mode(1), t(OCTET_STRING, b""), t(BOOLEAN, &[0]), t(OCTET_STRING, b"")].concat()),
            t(SEQUENCE, &[mode(1), t(BOOLEAN, &[0]), t(OCTET_STRING, b"")].concat()),
        ] {
            assert!(!shaped(bad.clone()), "{bad:?}");
        }
    }
}
