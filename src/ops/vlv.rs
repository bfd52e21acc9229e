//! Virtual List View (draft-ietf-ldapext-ldapv3-vlv-09), as slapd's
//! `sssvlv` overlay answers it: a window of a sorted search result, found
//! by position (`byOffset`, scaled when the client's count differs) or by
//! the first sort key's value (`greaterThanOrEqual`), `before` entries
//! before the target and `after` after it.
//!
//! coredir keeps no result between requests: each one sorts the search
//! again (bounded by `sort::MAX_SORTED`), and no contextID is returned
//! (one sent is accepted and ignored). Without a sort control, or with a
//! paged-results one, the search fails as slapd's does.

use crate::ber::put_tlv;
use bytes::BytesMut;
use ldap3_lber::common::TagClass;
use ldap3_lber::structure::{StructureTag, PL};
use ldap3_proto::control::LdapControl;
use ldap3_proto::LdapResultCode;
use shards::{Error, Result};

pub const REQUEST: &str = "2.16.840.1.113730.3.4.9";
pub const RESPONSE: &str = "2.16.840.1.113730.3.4.10";

/// slapd's `virtualListViewResult` when the target offset is past the
/// list (its `LDAP_VLV_RANGE_ERROR`, not the draft's offsetRangeError 61).
const RANGE_ERROR: u8 = 0x4d;

#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// `byOffset`: a 1-based position in a list of `count` entries as the
    /// client knows it (0: unknown).
    Offset { offset: usize, count: usize },
    /// `greaterThanOrEqual`: the first entry whose first sort key is not
    /// below this value.
    Value(Vec<u8>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub before: usize,
    pub after: usize,
    pub target: Target,
}

fn malformed() -> Error {
    Error::protocol("malformed vlv control value")
}

/// A non-negative INTEGER that fits slapd's `ber_int_t`.
fn count(t: &StructureTag) -> Result<usize> {
    let PL::P(bytes) = &t.payload else { return Err(malformed()) };
    if t.class != TagClass::Universal || t.id != 2 || bytes.is_empty() || bytes.len() > 4 || bytes[0] & 0x80 != 0 {
        return Err(malformed());
    }
    Ok(bytes.iter().fold(0usize, |n, b| (n << 8) | *b as usize))
}

/// The request control's value: `SEQUENCE { beforeCount, afterCount,
/// target CHOICE { byOffset [0] SEQUENCE { offset, contentCount },
/// greaterThanOrEqual [1] AssertionValue }, contextID OCTET STRING OPTIONAL }`.
pub fn parse(value: &[u8]) -> Result<Request> {
    if value.is_empty() {
        return Err(Error::protocol("vlv control value is absent"));
    }
    let (rest, tag) = ldap3_lber::parse::Parser::default().parse(value).map_err(|_| malformed())?;
    let fields = tag.expect_constructed().filter(|_| rest.is_empty()).ok_or_else(malformed)?;
    let [before, after, target, context @ ..] = fields.as_slice() else { return Err(malformed()) };
    if target.class != TagClass::Context {
        return Err(malformed());
    }
    let target = match (target.id, &target.payload) {
        (0, PL::C(pair)) => match pair.as_slice() {
            [offset, n] => Target::Offset { offset: count(offset)?, count: count(n)? },
            _ => return Err(malformed()),
        },
        (1, PL::P(v)) => Target::Value(v.clone()),
        _ => return Err(malformed()),
    };
    match context {
        [] => {}
        [c] if c.class == TagClass::Universal && c.id == 4 && matches!(c.payload, PL::P(_)) => {}
        _ => return Err(malformed()),
    }
    Ok(Request { before: count(before)?, after: count(after)?, target })
}

/// The response control: `SEQUENCE { targetPosition, contentCount,
/// virtualListViewResult }`.
pub fn response(target: usize, content: usize, result: u8) -> LdapControl {
    let mut inner = BytesMut::new();
    put_int(&mut inner, target);
    put_int(&mut inner, content);
    put_tlv(&mut inner, 0x0a, &[result]);
    let mut value = BytesMut::new();
    put_tlv(&mut value, 0x30, &inner);
    LdapControl::Unknown { oid: RESPONSE.into(), criticality: false, value: Some(value.to_vec()) }
}

/// A non-negative INTEGER in its shortest form.
fn put_int(out: &mut BytesMut, n: usize) {
    let bytes = (n as u64).to_be_bytes();
    let skip = bytes.iter().take_while(|b| **b == 0).count().min(7);
    let mut v = bytes[skip..].to_vec();
    if v[0] & 0x80 != 0 {
        v.insert(0, 0);
    }
    put_tlv(out, 0x02, &v);
}

/// The failure of a VLV search, with its response control.
pub fn failure(target: usize, content: usize, result: u8, why: &str) -> (Error, LdapControl) {
    (Error::new(LdapResultCode::VirtualListViewError, why), response(target, content, result))
}

/// Which rows of a sorted list of `n` a request selects, and the target's
/// 1-based position: `first_not_below` is, for a `greaterThanOrEqual`
/// request, the index of the first row not below its value (`n` for none).
pub fn window(
    req: &Request,
    n: usize,
    first_not_below: Option<usize>,
) -> std::result::Result<Window, (Error, LdapControl)> {
    if n == 0 {
        return Ok(Window { rows: 0..0, target: 0 });
    }
    // The row the window is built around, how many rows before it already
    // count toward `before` (slapd counts the last row when the value is
    // past the end), and the position reported.
    let (at, counted, target) = match (&req.target, first_not_below) {
        (_, Some(i)) if i >= n => (n - 1, 1, n + 1),
        (_, Some(i)) => (i, 0, i + 1),
        (Target::Offset { offset, count }, None) => {
            let (offset, count) = (*offset, *count);
            let target = if offset == count {
                n
            } else if offset == 1 {
                1
            } else if count != 0 && count != n {
                if offset > count {
                    return Err(failure(0, n, RANGE_ERROR, "VLV offset out of range"));
                }
                n * offset / count
            } else if offset > n {
                return Err(failure(0, n, RANGE_ERROR, "VLV offset out of range"));
            } else {
                offset
            };
            (target.clamp(1, n) - 1, 0, target)
        }
        (Target::Value(_), None) => unreachable!("a value target comes with its row"),
    };
    let back = req.before.saturating_sub(counted).min(at);
    let start = at - back;
    let len = (back + counted).saturating_add(req.after).saturating_add(1);
    Ok(Window { rows: start..start.saturating_add(len).min(n), target })
}

/// The rows to send and the position to report.
#[derive(Debug, PartialEq)]
pub struct Window {
    pub rows: std::ops::Range<usize>,
    pub target: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn by_offset(before: usize, after: usize, offset: usize, count: usize) -> Request {
        Request { before, after, target: Target::Offset { offset, count } }
    }

    #[test]
    fn offsets_select_as_sssvlv_does() {
        let w = |r: Request, n| window(&r, n, None).map_err(|e| e.1);
        assert_eq!(w(by_offset(1, 1, 3, 0), 5).unwrap(), Window { rows: 1..4, target: 3 });
        // offset == count: the last entry; offset 1: the first.
        assert_eq!(w(by_offset(2, 2, 4, 4), 10).unwrap(), Window { rows: 7..10, target: 10 });
        assert_eq!(w(by_offset(2, 2, 1, 0), 10).unwrap(), Window { rows: 0..3, target: 1 });
        // Scaled to the real count: 5 of 10 in a list of 20 is the 10th.
        assert_eq!(w(by_offset(0, 0, 5, 10), 20).unwrap(), Window { rows: 9..10, target: 10 });
        assert_eq!(w(by_offset(0, 1, 99, 5), 5).unwrap_err(), response(0, 5, RANGE_ERROR));
        assert_eq!(w(by_offset(0, 1, 6, 0), 5).unwrap_err(), response(0, 5, RANGE_ERROR));
        assert_eq!(w(by_offset(0, 1, 6, 0), 0).unwrap(), Window { rows: 0..0, target: 0 });
    }

    #[test]
    fn values_past_the_end_show_the_last_rows() {
        let r = Request { before: 2, after: 3, target: Target::Value(b"z".to_vec()) };
        assert_eq!(window(&r, 5, Some(5)).unwrap(), Window { rows: 3..5, target: 6 });
        assert_eq!(window(&r, 5, Some(2)).unwrap(), Window { rows: 0..5, target: 3 });
    }

    #[test]
    fn requests_parse_strictly() {
        // {before 1, after 2, byOffset {3, 0}}
        let v = [0x30, 0x0e, 2, 1, 1, 2, 1, 2, 0xa0, 0x06, 2, 1, 3, 2, 1, 0];
        assert_eq!(parse(&v).unwrap(), by_offset(1, 2, 3, 0));
        let gte = [0x30, 0x09, 2, 1, 0, 2, 1, 2, 0x81, 0x01, b'c'];
        assert_eq!(parse(&gte).unwrap().target, Target::Value(b"c".to_vec()));
        assert!(parse(&[]).is_err());
        assert!(parse(&[0x30, 0x06, 2, 1, 0, 2, 1, 0]).is_err(), "no target");
        let negative = [0x30, 0x0e, 2, 1, 0xff, 2, 1, 2, 0xa0, 0x06, 2, 1, 3, 2, 1, 0];
        assert!(parse(&negative).is_err());
    }
}
