//! The requests that dominate traffic (search, simple bind, compare,
//! abandon, unbind, without controls) read straight from the frame into
//! ldap3_proto's types. The general path (`super::by_tree`) first builds
//! ldap3_lber's tree of owned tags, one allocation per element, and then
//! converts it; for a `(uid=…)` search that was a tenth of the server's
//! user time.
//!
//! This path only ever answers what the general one would: each element
//! must be in the one form ldap3_proto reads (its exact tag, a definite
//! length of at most four octets, nothing left over), and any other form,
//! a filter it does not take (extensible match, nesting deeper than
//! `MAX_FILTER_DEPTH`), a SASL bind or any control leaves the frame to
//! the general path (None). Fields the general path escapes when they are
//! not UTF-8 (`shards::octets::escape`) are escaped alike; DNs are taken
//! as UTF-8 or not at all. The test below holds the two paths equal on
//! every frame this one reads, mutated ones included.

use ldap3_proto::proto::{
    LdapBindCred, LdapBindRequest, LdapCompareRequest, LdapDerefAliases, LdapFilter, LdapMsg, LdapOp,
    LdapSearchRequest, LdapSearchScope, LdapSubstringFilter,
};

/// Deeper filters are rare and left to the general path.
const MAX_FILTER_DEPTH: usize = 32;

/// One LDAPMessage without controls, when it is one of the requests read here.
pub(super) fn message(frame: &[u8]) -> Option<LdapMsg> {
    let mut msg = Elems(Elems(frame).whole(0x30)?);
    let msgid = int(msg.next(0x02)?)? as i32;
    let (tag, content) = msg.any()?;
    if !msg.0.is_empty() {
        return None;
    }
    let op = match tag {
        0x63 => LdapOp::SearchRequest(search(content)?),
        0x60 => LdapOp::BindRequest(bind(content)?),
        0x6e => LdapOp::CompareRequest(compare(content)?),
        0x50 => LdapOp::AbandonRequest(int(content)? as i32),
        0x42 => LdapOp::UnbindRequest,
        _ => return None,
    };
    Some(LdapMsg { msgid, op, ctrl: Vec::new() })
}

fn search(content: &[u8]) -> Option<LdapSearchRequest> {
    let mut e = Elems(content);
    let base = dn(e.next(0x04)?)?;
    let scope = match int(e.next(0x0a)?)? {
        0 => LdapSearchScope::Base,
        1 => LdapSearchScope::OneLevel,
        2 => LdapSearchScope::Subtree,
        3 => LdapSearchScope::Children,
        _ => return None,
    };
    let aliases = match int(e.next(0x0a)?)? {
        0 => LdapDerefAliases::Never,
        1 => LdapDerefAliases::InSearching,
        2 => LdapDerefAliases::FindingBaseObj,
        3 => LdapDerefAliases::Always,
        _ => return None,
    };
    let sizelimit = int(e.next(0x02)?)? as i32;
    let timelimit = int(e.next(0x02)?)? as i32;
    let typesonly = *e.next(0x01)?.first()? != 0;
    let (tag, f) = e.any()?;
    let filter = filter(tag, f, 1)?;
    let attrs = Elems(e.whole(0x30)?).all(|e| field(e.next(0x04)?))?;
    Some(LdapSearchRequest { base, scope, aliases, sizelimit, timelimit, typesonly, filter, attrs })
}

fn filter(tag: u8, content: &[u8], depth: usize) -> Option<LdapFilter> {
    if depth > MAX_FILTER_DEPTH {
        return None;
    }
    let mut e = Elems(content);
    Some(match tag {
        0xa0 | 0xa1 => {
            let set = e.all(|e| e.any().and_then(|(t, c)| filter(t, c, depth + 1)))?;
            match tag {
                0xa0 => LdapFilter::And(set),
                _ => LdapFilter::Or(set),
            }
        }
        0xa2 => {
            let (t, c) = e.any()?;
            let inner = filter(t, c, depth + 1)?;
            e.end()?;
            LdapFilter::Not(Box::new(inner))
        }
        0xa3 | 0xa5 | 0xa6 | 0xa8 => {
            let (attr, value) = (field(e.next(0x04)?)?, field(e.next(0x04)?)?);
            e.end()?;
            match tag {
                0xa3 => LdapFilter::Equality(attr, value),
                0xa5 => LdapFilter::GreaterOrEqual(attr, value),
                0xa6 => LdapFilter::LessOrEqual(attr, value),
                _ => LdapFilter::Approx(attr, value),
            }
        }
        0xa4 => {
            let attr = field(e.next(0x04)?)?;
            let pieces = substrings(e.whole(0x30)?)?;
            LdapFilter::Substring(attr, pieces)
        }
        0x87 => LdapFilter::Present(field(content)?),
        _ => return None,
    })
}

/// `initial` only first, `final` only last, `any` anywhere.
fn substrings(content: &[u8]) -> Option<LdapSubstringFilter> {
    let mut e = Elems(content);
    let mut pieces = LdapSubstringFilter::default();
    let mut first = true;
    while let Some((tag, c)) = e.any() {
        match tag {
            0x80 if first => pieces.initial = Some(field(c)?),
            0x81 => pieces.any.push(field(c)?),
            0x82 if e.0.is_empty() => pieces.final_ = Some(field(c)?),
            _ => return None,
        }
        first = false;
    }
    e.end()?;
    Some(pieces)
}

fn bind(content: &[u8]) -> Option<LdapBindRequest> {
    let mut e = Elems(content);
    let version = int(e.next(0x02)?)?;
    let dn = dn(e.next(0x04)?)?;
    let password = field(e.whole(0x80)?)?;
    Some(LdapBindRequest { version, dn, cred: LdapBindCred::Simple(password) })
}

fn compare(content: &[u8]) -> Option<LdapCompareRequest> {
    let mut e = Elems(content);
    let dn = dn(e.next(0x04)?)?;
    let mut ava = Elems(e.whole(0x30)?);
    let atype = field(ava.next(0x04)?)?;
    let val = ava.whole(0x04)?.to_vec();
    Some(LdapCompareRequest { dn, atype, val })
}

/// A run of elements, read front to back.
struct Elems<'a>(&'a [u8]);

impl<'a> Elems<'a> {
    /// The next element, whatever its tag.
    fn any(&mut self) -> Option<(u8, &'a [u8])> {
        let (&tag, rest) = self.0.split_first()?;
        let (&first, rest) = rest.split_first()?;
        let (len, rest) = match first {
            0..=0x7f => (first as usize, rest),
            // Indefinite (0x80) and over four octets: the general path's.
            0x81..=0x84 => {
                let n = (first & 0x7f) as usize;
                let (octets, rest) = (rest.get(..n)?, &rest[n..]);
                (octets.iter().fold(0usize, |len, b| len << 8 | *b as usize), rest)
            }
            _ => return None,
        };
        let content = rest.get(..len)?;
        self.0 = &rest[len..];
        Some((tag, content))
    }

    /// The next element's content, when it has this tag.
    fn next(&mut self, tag: u8) -> Option<&'a [u8]> {
        self.any().and_then(|(t, content)| (t == tag).then_some(content))
    }

    /// The next element, with this tag, and the last one.
    fn whole(&mut self, tag: u8) -> Option<&'a [u8]> {
        let content = self.next(tag)?;
        self.end()?;
        Some(content)
    }

    /// Some when nothing is left.
    fn end(&self) -> Option<()> {
        self.0.is_empty().then_some(())
    }

    /// Every element left, each read by `read`.
    fn all<T>(mut self, mut read: impl FnMut(&mut Self) -> Option<T>) -> Option<Vec<T>> {
        let mut out = Vec::new();
        while !self.0.is_empty() {
            out.push(read(&mut self)?);
        }
        Some(out)
    }
}

/// An INTEGER as ldap3_proto reads one: up to eight octets, big-endian,
/// without sign extension (`strict` has already refused the values that
/// would read differently).
fn int(content: &[u8]) -> Option<i64> {
    (content.len() <= 8).then(|| content.iter().fold(0u64, |v, b| v << 8 | *b as u64) as i64)
}

/// A DN: UTF-8, never escaped (`super` says why).
fn dn(content: &[u8]) -> Option<String> {
    std::str::from_utf8(content).ok().map(str::to_owned)
}

/// A field the general path escapes when it is not UTF-8.
fn field(content: &[u8]) -> Option<String> {
    match shards::octets::escape(content) {
        Some(escaped) => Some(escaped),
        None => String::from_utf8(content.to_vec()).ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use ldap3_proto::control::LdapControl;
    use ldap3_proto::proto::LdapMatchingRuleAssertion;
    use ldap3_proto::LdapCodec;
    use tokio_util::codec::Encoder;

    fn encoded(msg: LdapMsg) -> Vec<u8> {
        let mut out = BytesMut::new();
        LdapCodec::default().encode(msg, &mut out).unwrap();
        out.to_vec()
    }

    fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut out = vec![tag, content.len() as u8];
        out.extend_from_slice(content);
        out
    }

    fn search(filter: LdapFilter, attrs: &[&str]) -> LdapOp {
        LdapOp::SearchRequest(LdapSearchRequest {
            base: "ou=people,dc=example,dc=com".into(),
            scope: LdapSearchScope::Subtree,
            aliases: LdapDerefAliases::Never,
            sizelimit: 500,
            timelimit: 70_000,
            typesonly: false,
            filter,
            attrs: attrs.iter().map(|a| a.to_string()).collect(),
        })
    }

    fn eq(a: &str, v: &str) -> LdapFilter {
        LdapFilter::Equality(a.into(), v.into())
    }

    /// Frames of every kind read here, and some that are not.
    fn corpus() -> Vec<(Vec<u8>, bool)> {
        let sub = |i: Option<&str>, any: &[&str], f: Option<&str>| {
            let pieces = LdapSubstringFilter {
                initial: i.map(Into::into),
                any: any.iter().map(|s| s.to_string()).collect(),
                final_: f.map(Into::into),
            };
            LdapFilter::Substring("cn".into(), pieces)
        };
        let direct = [
            search(eq("uid", "user17"), &[]),
            search(LdapFilter::Present("objectClass".into()), &["cn", "+", "*"]),
            search(
                LdapFilter::And(vec![
                    LdapFilter::Or(vec![eq("a", "1"), LdapFilter::Not(Box::new(eq("b", "2")))]),
                    LdapFilter::GreaterOrEqual("n".into(), "5".into()),
                    LdapFilter::LessOrEqual("n".into(), "9".into()),
                    LdapFilter::Approx("sn".into(), "smith".into()),
                    sub(Some("ab"), &["c", "d"], Some("e")),
                    sub(None, &["x"], None),
                    sub(Some("only"), &[], None),
                    sub(None, &[], Some("end")),
                    LdapFilter::And(vec![]),
                ]),
                &["mail"],
            ),
            LdapOp::BindRequest(LdapBindRequest {
                version: 3,
                dn: "uid=user1,ou=people,dc=example,dc=com".into(),
                cred: LdapBindCred::Simple("secret".into()),
            }),
            LdapOp::BindRequest(LdapBindRequest {
                version: 3,
                dn: String::new(),
                cred: LdapBindCred::Simple(String::new()),
            }),
            LdapOp::CompareRequest(LdapCompareRequest {
                dn: "uid=user1,ou=people,dc=example,dc=com".into(),
                atype: "uid".into(),
                val: b"user\xff1".to_vec(),
            }),
            LdapOp::AbandonRequest(7),
            LdapOp::UnbindRequest,
        ];
        let general = [
            search(
                LdapFilter::Extensible(LdapMatchingRuleAssertion {
                    matching_rule: Some("caseExactMatch".into()),
                    type_: Some("cn".into()),
                    match_value: "x".into(),
                    dn_attributes: true,
                }),
                &[],
            ),
            LdapOp::DelRequest("uid=x,dc=example,dc=com".into()),
        ];
        let mut frames = Vec::new();
        for (i, op) in direct.into_iter().enumerate() {
            frames.push((encoded(LdapMsg { msgid: 1 + i as i32 * 40_000, op: op.clone(), ctrl: vec![] }), true));
            let ctrl = vec![LdapControl::ManageDsaIT { criticality: false }];
            frames.push((encoded(LdapMsg { msgid: 2, op, ctrl }), false));
        }
        for op in general {
            frames.push((encoded(LdapMsg { msgid: 3, op, ctrl: vec![] }), false));
        }
        // Latin-1 in a password and in a filter value and type, and a
        // long form length.
        let bind = [tlv(0x02, &[3]), tlv(0x04, b"uid=l"), tlv(0x80, b"caf\xe9")].concat();
        frames.push((tlv(0x30, &[tlv(0x02, &[1]), tlv(0x60, &bind)].concat()), true));
        let filter = tlv(0xA3, &[tlv(0x04, b"c\xf4"), tlv(0x04, b"Jos\xe9")].concat());
        let attrs = tlv(0x30, &[tlv(0x04, b"cn"), tlv(0x04, b"\xe9")].concat());
        let fields = [&[4, 0][..], &[10, 1, 0], &[10, 1, 0], &[2, 1, 0], &[2, 1, 0], &[1, 1, 0xff]].concat();
        let search = [fields, filter, attrs].concat();
        let mut long = vec![0x63, 0x81, search.len() as u8];
        long.extend_from_slice(&search);
        frames.push((tlv(0x30, &[tlv(0x02, &[9]), long].concat()), true));
        frames
    }

    fn same(frame: &[u8]) -> Option<LdapMsg> {
        let direct = message(frame)?;
        let general = super::super::by_tree(frame, ldap3_lber::parse::DEFAULT_MAX_BER_DEPTH);
        assert_eq!(Some(&direct), general.as_ref(), "frame {frame:02x?}");
        Some(direct)
    }

    #[test]
    fn reads_what_the_general_path_reads() {
        for (frame, direct) in corpus() {
            assert_eq!(same(&frame).is_some(), direct, "frame {frame:02x?}");
        }
    }

    /// Every frame this path reads, mutated at random (bytes changed,
    /// cut, inserted, removed), is read by the general path the same.
    #[test]
    fn mutated_frames_read_the_same_or_go_the_general_way() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut rand = move |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n.max(1) as u64) as usize
        };
        let (mut read, mut tried) = (0, 0);
        for (frame, _) in corpus() {
            for _ in 0..30_000 {
                let mut m = frame.clone();
                for _ in 0..1 + rand(3) {
                    let at = rand(m.len());
                    match rand(6) {
                        0 => m[at] = rand(256) as u8,
                        1 => m[at] ^= 1 << rand(8),
                        2 => m.insert(at, rand(256) as u8),
                        3 if !m.is_empty() => drop(m.remove(at)),
                        4 => m.truncate(at),
                        _ => m[at] = m[at].wrapping_add(1),
                    }
                    if m.is_empty() {
                        m.push(0x30);
                    }
                }
                tried += 1;
                read += same(&m).is_some() as usize;
            }
        }
        // Enough of them still well-formed to mean something.
        eprintln!("{read} of {tried}");
        assert!(read > tried / 50, "{read} of {tried}");
    }
}
