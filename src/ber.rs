//! A BER writer for the responses that dominate traffic: SearchResultEntry,
//! written straight from an entry's stored layout, and the plain LDAPResult
//! that ends every bind, search and write.
//!
//! ldap3_proto builds a tree of owned tags for every message; for entries
//! that would copy every value twice. Here the lengths are computed first
//! and the bytes written once, in definite minimal-length form.

use bytes::BytesMut;
use ldap3_proto::proto::{LdapOp, LdapResult};

/// One attribute of an entry being written: a name and its values. The
/// values are walked twice, to measure and to write (`with_lens`), so a
/// clone of `vals` must yield what the first walk yielded: a PDU is sized
/// before it is written.
pub struct OutAttr<'a, I: Iterator<Item = &'a [u8]> + Clone> {
    pub name: &'a str,
    pub vals: I,
}

/// Bytes a definite length takes: one below 128, else one more than the
/// bytes of `n` (RFC 4511 §5.1: the shortest form).
fn len_of_len(n: usize) -> usize {
    match n {
        0..=0x7f => 1,
        _ => 1 + (usize::BITS - n.leading_zeros()).div_ceil(8) as usize,
    }
}

fn tlv(content: usize) -> usize {
    1 + len_of_len(content) + content
}

/// One primitive or already-encoded element: tag, definite length, contents.
pub fn put_tlv(out: &mut BytesMut, tag: u8, bytes: &[u8]) {
    sized(out, tlv(bytes.len()), |put| put.tlv(tag, bytes))
}

fn int_bytes(v: i32) -> ([u8; 4], usize) {
    let b = v.to_be_bytes();
    let mut skip = 0;
    while skip < 3 && ((b[skip] == 0 && b[skip + 1] & 0x80 == 0) || (b[skip] == 0xff && b[skip + 1] & 0x80 != 0)) {
        skip += 1;
    }
    (b, skip)
}

fn attr_len<'a, I: Iterator<Item = &'a [u8]> + Clone>(a: &OutAttr<'a, I>, types_only: bool) -> (usize, usize) {
    let set: usize = if types_only { 0 } else { a.vals.clone().map(|v| tlv(v.len())).sum() };
    (tlv(tlv(a.name.len()) + tlv(set)), set)
}

/// Calls `f` with `attr_len` of each of `attrs`, each measured once (a
/// value set is walked once to measure, once to write): on the stack for
/// up to `ON_STACK` attributes, what entries have.
fn with_lens<'a, I, R>(attrs: &[OutAttr<'a, I>], types_only: bool, f: impl FnOnce(&[(usize, usize)]) -> R) -> R
where
    I: Iterator<Item = &'a [u8]> + Clone,
{
    const ON_STACK: usize = 48;
    if attrs.len() <= ON_STACK {
        let mut lens = [(0, 0); ON_STACK];
        lens.iter_mut().zip(attrs).for_each(|(l, a)| *l = attr_len(a, types_only));
        f(&lens[..attrs.len()])
    } else {
        f(&attrs.iter().map(|a| attr_len(a, types_only)).collect::<Vec<_>>())
    }
}

/// Length of the `[APPLICATION 4]` body for `dn` and attributes of
/// `lens`, and of its attribute list.
fn entry_body(dn: &str, lens: &[(usize, usize)]) -> (usize, usize) {
    let list: usize = lens.iter().map(|l| l.0).sum();
    (tlv(dn.len()) + tlv(list), list)
}

/// Appends the `SearchResultEntry` protocol op alone (`[APPLICATION 4]`),
/// as Pre-/Post-Read controls carry it.
pub fn entry_op<'a, I>(out: &mut BytesMut, dn: &str, attrs: &[OutAttr<'a, I>], types_only: bool)
where
    I: Iterator<Item = &'a [u8]> + Clone,
{
    with_lens(attrs, types_only, |lens| {
        sized(out, tlv(entry_body(dn, lens).0), |put| put_entry_op(put, dn, attrs, lens, types_only))
    })
}

/// Appends exactly `total` bytes, written by `f` through a `Put`: the
/// lengths are worked out first, so the room is made once and each piece
/// is a copy into it, without the capacity check and length update that
/// every `BufMut` call makes (33 pieces for an ordinary entry).
fn sized(out: &mut BytesMut, total: usize, f: impl FnOnce(&mut Put<'_>)) {
    let start = out.len();
    out.resize(start + total, 0);
    let mut put = Put { buf: &mut out[start..], at: 0 };
    f(&mut put);
    debug_assert_eq!(put.at, total, "BER lengths worked out wrong");
}

/// A writer into bytes already sized for what it writes (`sized`). A
/// piece past the end is left out rather than panic the reactor; the
/// lengths come from the same functions as the pieces, so none is.
struct Put<'b> {
    buf: &'b mut [u8],
    at: usize,
}

impl Put<'_> {
    #[inline]
    fn u8(&mut self, b: u8) {
        if let Some(slot) = self.buf.get_mut(self.at) {
            *slot = b;
        }
        self.at += 1;
    }

    #[inline]
    fn bytes(&mut self, b: &[u8]) {
        if let Some(dst) = self.buf.get_mut(self.at..self.at + b.len()) {
            dst.copy_from_slice(b);
        }
        self.at += b.len();
    }

    /// A definite length in its shortest form.
    #[inline]
    fn len(&mut self, n: usize) {
        if n < 0x80 {
            return self.u8(n as u8);
        }
        let k = len_of_len(n) - 1;
        self.u8(0x80 | k as u8);
        for i in (0..k).rev() {
            self.u8((n >> (8 * i)) as u8);
        }
    }

    #[inline]
    fn tlv(&mut self, tag: u8, b: &[u8]) {
        self.u8(tag);
        self.len(b.len());
        self.bytes(b);
    }
}

/// `entry_op` with the attributes' lengths measured (`with_lens`).
fn put_entry_op<'a, I>(put: &mut Put<'_>, dn: &str, attrs: &[OutAttr<'a, I>], lens: &[(usize, usize)], types_only: bool)
where
    I: Iterator<Item = &'a [u8]> + Clone,
{
    let (body, list) = entry_body(dn, lens);
    put.u8(0x64); // [APPLICATION 4]
    put.len(body);
    put.tlv(0x04, dn.as_bytes());
    put.u8(0x30);
    put.len(list);
    for (a, &(_, set)) in attrs.iter().zip(lens) {
        put.u8(0x30);
        put.len(tlv(a.name.len()) + tlv(set));
        put.tlv(0x04, a.name.as_bytes());
        put.u8(0x31);
        put.len(set);
        if !types_only {
            for v in a.vals.clone() {
                put.tlv(0x04, v);
            }
        }
    }
}

/// Appends the LDAPMessage `SearchResultEntry` for `dn` with `attrs`
/// (values omitted when `types_only`).
pub fn search_entry<'a, I>(out: &mut BytesMut, msgid: i32, dn: &str, attrs: &[OutAttr<'a, I>], types_only: bool)
where
    I: Iterator<Item = &'a [u8]> + Clone,
{
    with_lens(attrs, types_only, |lens| {
        let (body, _) = entry_body(dn, lens);
        let (id, skip) = int_bytes(msgid);
        let msg = tlv(4 - skip) + tlv(body);
        sized(out, tlv(msg), |put| {
            put.u8(0x30);
            put.len(msg);
            put.tlv(0x02, &id[skip..]);
            put_entry_op(put, dn, attrs, lens, types_only);
        })
    })
}

/// The response of `op` when it is a plain LDAPResult (no referral, no
/// SASL credentials): its `[APPLICATION n]` tag and the result.
pub fn plain_result(op: &LdapOp) -> Option<(u8, &LdapResult)> {
    let (tag, res) = match op {
        LdapOp::BindResponse(b) if b.saslcreds.is_none() => (0x61, &b.res),
        LdapOp::SearchResultDone(r) => (0x65, r),
        LdapOp::ModifyResponse(r) => (0x67, r),
        LdapOp::AddResponse(r) => (0x69, r),
        LdapOp::DelResponse(r) => (0x6b, r),
        LdapOp::ModifyDNResponse(r) => (0x6d, r),
        LdapOp::CompareResult(r) => (0x6f, r),
        _ => return None,
    };
    res.referral.is_empty().then_some((tag, res))
}

/// Appends the LDAPMessage (without controls) whose protocolOp is the
/// LDAPResult `res` under `tag` (see `plain_result`).
pub fn result_message(out: &mut BytesMut, msgid: i32, tag: u8, res: &LdapResult) {
    result_with_code(out, msgid, tag, res.code.clone() as i32, res);
}

/// `result_message` with result code `code`, which may be one outside
/// ldap3_proto's list (OpenLDAP's x-no-operation, 16654).
pub fn result_with_code(out: &mut BytesMut, msgid: i32, tag: u8, code: i32, res: &LdapResult) {
    let (id, id_skip) = int_bytes(msgid);
    let (code, code_skip) = int_bytes(code);
    let body = tlv(4 - code_skip) + tlv(res.matcheddn.len()) + tlv(res.message.len());
    let msg = tlv(4 - id_skip) + tlv(body);
    sized(out, tlv(msg), |put| {
        put.u8(0x30);
        put.len(msg);
        put.tlv(0x02, &id[id_skip..]);
        put.u8(tag);
        put.len(body);
        put.tlv(0x0a, &code[code_skip..]);
        put.tlv(0x04, res.matcheddn.as_bytes());
        put.tlv(0x04, res.message.as_bytes());
    })
}

/// What the BER header at the front of `buf` says about the next PDU.
#[derive(Debug, PartialEq)]
pub enum Peeked {
    /// Not enough bytes yet to know; or this many bytes in total.
    Incomplete,
    Size(usize),
    /// Not an LDAPMessage (a SEQUENCE with a definite length).
    Malformed,
}

pub fn peek_frame(buf: &[u8]) -> Peeked {
    if buf.is_empty() {
        return Peeked::Incomplete;
    }
    if buf[0] != 0x30 {
        return Peeked::Malformed;
    }
    let Some(&first) = buf.get(1) else {
        return Peeked::Incomplete;
    };
    if first < 0x80 {
        return Peeked::Size(2 + first as usize);
    }
    let n = (first & 0x7f) as usize;
    if n == 0 || n > 8 {
        return Peeked::Malformed; // indefinite length is not allowed in LDAP
    }
    if buf.len() < 2 + n {
        return Peeked::Incomplete;
    }
    let len = buf[2..2 + n].iter().fold(0u64, |acc, b| acc << 8 | *b as u64);
    Peeked::Size((2 + n as u64).saturating_add(len).min(usize::MAX as u64) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ldap3_proto::proto::{LdapMsg, LdapOp, LdapPartialAttribute, LdapSearchResultEntry};
    use ldap3_proto::LdapCodec;
    use tokio_util::codec::{Decoder, Encoder};

    #[test]
    fn matches_ldap3_proto_encoding() {
        // Every length form up to three bytes after the first: values of
        // each boundary's length (0x81 .., 0x82 .. .., 0x83 .. .. ..).
        let sized: Vec<Vec<u8>> =
            [0, 127, 128, 200, 255, 256, 65535, 65536, 70_000].iter().map(|n| vec![b'x'; *n]).collect();
        let vals: Vec<&[u8]> = vec![b"top", b"person"];
        let bigs: Vec<&[u8]> = sized.iter().map(Vec::as_slice).collect();
        for msgid in [0, 1, 127, 128, 255, 256, 65535, i32::MAX] {
            let attrs = [
                OutAttr { name: "objectClass", vals: vals.iter().copied() },
                OutAttr { name: "description", vals: bigs.iter().copied() },
            ];
            let mut mine = BytesMut::new();
            search_entry(&mut mine, msgid, "cn=a,dc=x", &attrs, false);
            let msg = LdapMsg::new(
                msgid,
                LdapOp::SearchResultEntry(LdapSearchResultEntry {
                    dn: "cn=a,dc=x".into(),
                    attributes: vec![
                        LdapPartialAttribute {
                            atype: "objectClass".into(),
                            vals: vec![b"top".to_vec(), b"person".to_vec()],
                        },
                        LdapPartialAttribute { atype: "description".into(), vals: sized.clone() },
                    ],
                }),
            );
            let mut theirs = BytesMut::new();
            LdapCodec::default().encode(msg.clone(), &mut theirs).unwrap();
            assert_eq!(mine, theirs, "msgid {msgid}");
            // The protocolOp alone, as Pre- and Post-Read carry it.
            let mut op = BytesMut::new();
            entry_op(&mut op, "cn=a,dc=x", &attrs, false);
            assert!(mine.ends_with(&op) && op.len() > 70_000, "msgid {msgid}");
            assert_eq!(LdapCodec::new(Some(1 << 20), None).decode(&mut mine).unwrap(), Some(msg));
        }
        // Four bytes after the first: a value of 16 MiB (encoded only).
        let huge = vec![b'z'; 1 << 24];
        let attrs = [OutAttr { name: "description", vals: std::iter::once(huge.as_slice()) }];
        let mut mine = BytesMut::new();
        search_entry(&mut mine, 1, "cn=a,dc=x", &attrs, false);
        let entry = LdapSearchResultEntry {
            dn: "cn=a,dc=x".into(),
            attributes: vec![LdapPartialAttribute { atype: "description".into(), vals: vec![huge.clone()] }],
        };
        let mut theirs = BytesMut::new();
        LdapCodec::default().encode(LdapMsg::new(1, LdapOp::SearchResultEntry(entry)), &mut theirs).unwrap();
        assert!(mine == theirs && mine[1] == 0x84, "16 MiB");
        for (n, k) in
            [(0x7f, 1), (0x80, 2), (0xff, 2), (0x100, 3), (0xff_ffff, 4), (0x100_0000, 5), (u32::MAX as usize, 5)]
        {
            assert_eq!(len_of_len(n), k, "{n:#x}");
        }
        assert_eq!(len_of_len(1 << 32), 6);
        // More attributes than are measured on the stack, with and
        // without their values.
        let names: Vec<String> = (0..60).map(|i| format!("a{i}")).collect();
        for types_only in [false, true] {
            let attrs: Vec<_> = names.iter().map(|n| OutAttr { name: n, vals: vals.iter().copied() }).collect();
            let mut mine = BytesMut::new();
            search_entry(&mut mine, 7, "cn=a,dc=x", &attrs, types_only);
            let attributes = names
                .iter()
                .map(|n| LdapPartialAttribute {
                    atype: n.clone(),
                    vals: if types_only { vec![] } else { vec![b"top".to_vec(), b"person".to_vec()] },
                })
                .collect();
            let entry = LdapSearchResultEntry { dn: "cn=a,dc=x".into(), attributes };
            let mut theirs = BytesMut::new();
            LdapCodec::default().encode(LdapMsg::new(7, LdapOp::SearchResultEntry(entry)), &mut theirs).unwrap();
            assert_eq!(mine, theirs, "types only: {types_only}");
        }
    }

    /// Every plain result, written here, is byte for byte what ldap3_proto
    /// writes (and what it decodes back).
    #[test]
    fn results_match_ldap3_proto_encoding() {
        use ldap3_proto::proto::LdapBindResponse;
        use ldap3_proto::LdapResultCode as Code;
        let long = "m".repeat(300);
        for msgid in [0, 1, 127, 128, 65535, i32::MAX] {
            for (code, matched, message) in
                [(Code::Success, "", ""), (Code::NoSuchObject, "dc=x", "no such"), (Code::Other, "", &*long)]
            {
                let res = LdapResult { code, matcheddn: matched.into(), message: message.into(), referral: vec![] };
                let bind = LdapBindResponse { res: res.clone(), saslcreds: None };
                for op in [
                    LdapOp::BindResponse(bind),
                    LdapOp::SearchResultDone(res.clone()),
                    LdapOp::ModifyResponse(res.clone()),
                    LdapOp::AddResponse(res.clone()),
                    LdapOp::DelResponse(res.clone()),
                    LdapOp::ModifyDNResponse(res.clone()),
                    LdapOp::CompareResult(res.clone()),
                ] {
                    let (tag, r) = plain_result(&op).expect("a plain result");
                    let mut mine = BytesMut::new();
                    result_message(&mut mine, msgid, tag, r);
                    let msg = LdapMsg::new(msgid, op);
                    let mut theirs = BytesMut::new();
                    LdapCodec::default().encode(msg.clone(), &mut theirs).unwrap();
                    assert_eq!(mine, theirs, "msgid {msgid} {:?}", msg.op);
                    assert_eq!(LdapCodec::default().decode(&mut mine).unwrap(), Some(msg));
                }
            }
        }
        let referral = LdapResult {
            code: Code::Referral,
            matcheddn: String::new(),
            message: String::new(),
            referral: vec!["ldap://x/".into()],
        };
        assert!(plain_result(&LdapOp::SearchResultDone(referral)).is_none());
    }

    #[test]
    fn frames() {
        assert_eq!(peek_frame(b""), Peeked::Incomplete);
        assert_eq!(peek_frame(b"\x30"), Peeked::Incomplete);
        assert_eq!(peek_frame(b"\x30\x05"), Peeked::Size(7));
        assert_eq!(peek_frame(b"\x30\x84\x7f\xff"), Peeked::Incomplete);
        assert_eq!(peek_frame(b"\x30\x84\x7f\xff\xff\xff"), Peeked::Size(6 + 0x7fff_ffff));
        assert_eq!(peek_frame(b"\x30\x80"), Peeked::Malformed);
        assert_eq!(peek_frame(b"\x02\x01"), Peeked::Malformed);
    }
}
