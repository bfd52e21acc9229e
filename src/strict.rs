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
//! - Only requests: any other protocolOp ends the connection. Bind,
//!   search, modify, add, compare and extended requests have their
//!   number of fields, and a modify-DN exactly its four, in order; every
//!   INTEGER and ENUMERATED one to four bytes, as liblber reads them.
//! - What slapd answers with a result and goes on from is answered so
//!   (`fields::refused_fields`): a scope, alias dereferencing, size or time
//!   limit or bind version out of range, a modify's operation out of range
//!   or a change of other fields, an add without attributes, an extended
//!   request of other fields than its name and value.
//! - A modify-DN's names are UTF-8 (ldap3_proto dropped a newSuperior that
//!   was not, renaming in place): `invalidDNSyntax`, as slapd answers.
//!
//! - A control on an operation it does not apply to (paged results on a
//!   modify, the Assertion on an extended operation), or one this server
//!   does not offer (Sync Request without a changelog), is left out unread
//!   when not critical (`Check::Without`, the one case that allocates: a
//!   copy of the message without it), as slapd ignores it; 12 when
//!   critical. Controls are answered in list order, the first refusal
//!   winning, as slapd parses them.
//!
//! A malformed frame is a protocolError and a disconnect (RFC 4511 §4.1.1);
//! the work is linear in the frame.

use ldap3_proto::LdapResultCode;

mod controls;
mod fields;
use controls::*;
use fields::*;

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
const EXTENDED: u8 = 0x77;
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
    /// As `Without`, where a control `ops::controls::parse` must refuse
    /// comes before any refused here: everything after it is left out,
    /// so parse has to refuse the request (`ops::dispatch` fails it
    /// closed if it does not).
    Refusing(Vec<u8>),
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
/// `sync_offered`: whether this server offers the Sync Request control
/// (without it, the control is left out unread, or 12 when critical).
/// `proxy_denied`: whether the requester may not act as an authzId
/// (`ops::proxied`): slapd decides it as it reads the Proxied
/// Authorization control, before any control after it.
pub fn check(frame: &[u8], sync_offered: bool, proxy_denied: &dyn Fn(&[u8]) -> bool) -> Result<Check, &'static str> {
    let msg = tlv(frame)?;
    if msg.tag != SEQUENCE || !msg.rest.is_empty() {
        return Err("not an LDAPMessage");
    }
    let id = tlv(msg.content)?;
    let msgid = message_id(&id)?;
    let op = tlv(id.rest)?;
    if !REQUESTS.contains(&op.tag) {
        return Err("not a request");
    }
    well_formed(op.tag, op.content, 0)?;
    // What slapd answers with a result and goes on from (a scope of 4, a
    // modify's operation 4, a change without its values), in its order.
    if let Some((code, why)) = refused_fields(op.tag, op.content)? {
        let tag = response_tag(op.tag).expect("requests refused have a response");
        return Ok(Check::Refuse { msgid, tag, code, why });
    }
    op_fields(op.tag, op.content)?;
    if op.tag == UNBIND && !op.content.is_empty() {
        return Err("an UnbindRequest is NULL");
    }
    if op.tag == SEARCH {
        filter_shape(&tlv(fields_from(op.content, 6)?)?)?;
    }
    // Controls to leave out, once every other check has passed: the
    // message decoded instead is checked only by what is done here.
    let mut leave_out = None;
    let mut abandon_refused = false;
    if !op.rest.is_empty() {
        let controls = tlv(op.rest)?;
        if controls.tag != CONTROLS || !controls.rest.is_empty() {
            return Err("trailing data after the operation");
        }
        let exop = (op.tag == EXTENDED).then(|| tlv(op.content).ok()).flatten();
        // A name that is not UTF-8 is no operation coredir knows.
        let exop = exop.map(|name| std::str::from_utf8(name.content).unwrap_or_default());
        let (refused, ignored, refusing) =
            check_controls(op.tag, exop, controls.content, (sync_offered, proxy_denied))?;
        abandon_refused = refused.is_some();
        if let Some((code, why)) = refused {
            if let Some(tag) = response_tag(op.tag) {
                return Ok(Check::Refuse { msgid, tag, code, why });
            }
        }
        leave_out = (!ignored.is_empty() || refusing).then_some((controls.content, ignored, refusing));
    }
    // An Abandon of no message a request can have (0 or negative), or
    // with a critical control it cannot take: as slapd, nothing is done,
    // once its controls have been read.
    if op.tag == ABANDON && (!in_range(op.content) || abandon_refused) {
        return Ok(Check::Ignore);
    }
    if let Some(tag) = response_tag(op.tag).filter(|_| !dns_utf8(op.tag, op.content).unwrap_or(true)) {
        let why = "invalid DN"; // slapd's text for any DN it cannot read
        return Ok(Check::Refuse { msgid, tag, code: LdapResultCode::InvalidDNSyntax, why });
    }
    Ok(match leave_out {
        Some((list, ignored, refusing)) => {
            let msg = without(&msg.content[..msg.content.len() - op.rest.len()], list, &ignored);
            if refusing {
                Check::Refusing(msg)
            } else {
                Check::Without(msg)
            }
        }
        None => Check::Ok,
    })
}

/// Whether an INTEGER's content is a value in 0..maxInt (2^31 - 1), in
/// the fewest bytes a value may take and one more for a leading zero.
fn in_range(c: &[u8]) -> bool {
    int_sized(c) && c[0] & 0x80 == 0
}

/// Whether an INTEGER or ENUMERATED has 1 to 4 content bytes: slapd's
/// liblber reads no more into its `ber_int_t`, and disconnects (it reads
/// none as 0; X.690 §8.3.1 wants one, and coredir refuses none).
fn int_sized(c: &[u8]) -> bool {
    (1..=4).contains(&c.len())
}

/// The field after the first `n` of a constructed element's content.
fn fields_from(content: &[u8], n: usize) -> Result<&[u8], &'static str> {
    let mut rest = content;
    for _ in 0..n {
        rest = tlv(rest)?.rest;
    }
    Ok(rest)
}

/// `MessageID ::= INTEGER (0 .. maxInt)`; 0 is reserved for unsolicited
/// notifications, so a request must carry 1 or more.
fn message_id(id: &Tlv<'_>) -> Result<i32, &'static str> {
    let c = id.content;
    if id.tag != INTEGER || !int_sized(c) {
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
        0x66 | 0x68 | 0x6E => utf8(tlv(content)?.content),
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
mod tests;

/// Memory taken by an element once decoded, beyond its bytes: a `String`
/// or enum node (24 to 56 bytes) and its allocation (at least 32), and
/// what the operation builds of it (a search's attribute list becomes a
/// `Selection` name of 64 bytes more). 99 searches naming 80,000
/// one-byte attributes in 240 KB each held 9 MB apiece.
const PER_ELEMENT: usize = 128;

/// The most `weight` gives a byte: every element takes two bytes at
/// least, so elements and control bytes together count `PER_ELEMENT / 2`
/// per byte at most, beyond the byte itself.
pub const MOST_WEIGHT_PER_BYTE: usize = 1 + PER_ELEMENT / 2;

/// What a checked message takes in memory once decoded, at most about:
/// its bytes and `PER_ELEMENT` for each element of its operation; a
/// control's value is BER inside an OCTET STRING, each of its elements at
/// least two bytes, so its bytes count `PER_ELEMENT / 2` each. Linear in
/// the frame (`conn::intake` bounds what running operations hold).
pub fn weight(frame: &[u8]) -> usize {
    let Ok(msg) = tlv(frame) else { return frame.len() };
    let Ok(id) = tlv(msg.content) else { return frame.len() };
    let Ok(op) = tlv(id.rest) else { return frame.len() };
    frame.len() + PER_ELEMENT * elements(op.tag, op.content, 0) + PER_ELEMENT / 2 * op.rest.len()
}

/// A checked message's ID and the tag of its response, if it has one
/// (Abandon and Unbind have none).
pub fn answer_to(frame: &[u8]) -> Option<(i32, u8)> {
    let msg = tlv(frame).ok()?;
    let id = tlv(msg.content).ok()?;
    let op = tlv(id.rest).ok()?;
    Some((message_id(&id).ok()?, response_tag(op.tag)?))
}

/// The elements of one element, itself included (nesting is bounded by
/// `check`; past `MAX_DEPTH` the rest counts as bytes).
fn elements(tag: u8, content: &[u8], depth: usize) -> usize {
    if tag & 0x20 == 0 || depth > MAX_DEPTH {
        return 1;
    }
    let (mut n, mut rest) = (1, content);
    while let Ok(child) = tlv(rest) {
        n += elements(child.tag, child.content, depth + 1);
        rest = child.rest;
    }
    n
}
