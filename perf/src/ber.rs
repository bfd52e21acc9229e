//! Just enough BER for a load generator: requests written by hand into a
//! reused buffer, and responses read without allocating (message id,
//! operation tag, result code, entry DN), so the client stays cheaper per
//! operation than any server it measures.

pub const BIND_RESPONSE: u8 = 0x61;
pub const SEARCH_ENTRY: u8 = 0x64;
pub const SEARCH_DONE: u8 = 0x65;
pub const MODIFY_RESPONSE: u8 = 0x67;
pub const ADD_RESPONSE: u8 = 0x69;
pub const DEL_RESPONSE: u8 = 0x6b;

fn put_len(out: &mut Vec<u8>, n: usize) {
    if n < 0x80 {
        out.push(n as u8);
    } else {
        let bytes = (n as u32).to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | (4 - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
}

/// Writes `tag`, then the content produced by `f`, fixing the length after.
fn tlv(out: &mut Vec<u8>, tag: u8, f: impl FnOnce(&mut Vec<u8>)) {
    out.push(tag);
    let at = out.len();
    out.push(0);
    f(out);
    let n = out.len() - at - 1;
    if n >= 0x80 {
        let mut len = Vec::with_capacity(5);
        put_len(&mut len, n);
        out.splice(at..at + 1, len);
    } else {
        out[at] = n as u8;
    }
}

fn octets(out: &mut Vec<u8>, tag: u8, v: &[u8]) {
    out.push(tag);
    put_len(out, v.len());
    out.extend_from_slice(v);
}

fn int(out: &mut Vec<u8>, tag: u8, v: i64) {
    let b = v.to_be_bytes();
    let mut skip = 0;
    while skip < 7 && ((b[skip] == 0 && b[skip + 1] & 0x80 == 0) || (b[skip] == 0xff && b[skip + 1] & 0x80 != 0)) {
        skip += 1;
    }
    octets(out, tag, &b[skip..]);
}

fn message(out: &mut Vec<u8>, msgid: i32, op: impl FnOnce(&mut Vec<u8>)) {
    tlv(out, 0x30, |o| {
        int(o, 0x02, msgid as i64);
        op(o)
    });
}

pub fn bind(out: &mut Vec<u8>, msgid: i32, dn: &str, pw: &str) {
    message(out, msgid, |o| {
        tlv(o, 0x60, |o| {
            int(o, 0x02, 3);
            octets(o, 0x04, dn.as_bytes());
            octets(o, 0x80, pw.as_bytes());
        })
    });
}

pub fn unbind(out: &mut Vec<u8>, msgid: i32) {
    message(out, msgid, |o| o.extend_from_slice(&[0x42, 0x00]));
}

/// A search with an equality filter (`attr=value`), or a presence filter
/// on objectClass when `eq` is None; all user attributes.
/// The filter of a benchmark search.
pub enum Filter<'a> {
    Present(&'a str),
    Eq(&'a str, &'a str),
    /// `(attr=initial*)` or `(attr=*final)`.
    Initial(&'a str, &'a str),
    Final(&'a str, &'a str),
    /// `(|(attr=*v1*)(attr=*v2*)…)`.
    AnyOf(&'a str, &'a [String]),
}

pub fn search(out: &mut Vec<u8>, msgid: i32, base: &str, scope: u8, filter: Filter<'_>) {
    message(out, msgid, |o| {
        tlv(o, 0x63, |o| {
            octets(o, 0x04, base.as_bytes());
            octets(o, 0x0a, &[scope]);
            octets(o, 0x0a, &[0]);
            int(o, 0x02, 0);
            int(o, 0x02, 0);
            octets(o, 0x01, &[0]);
            match filter {
                Filter::Eq(a, v) => tlv(o, 0xa3, |o| {
                    octets(o, 0x04, a.as_bytes());
                    octets(o, 0x04, v.as_bytes());
                }),
                Filter::Initial(a, v) | Filter::Final(a, v) => {
                    let tag = if matches!(filter, Filter::Initial(..)) { 0x80 } else { 0x82 };
                    tlv(o, 0xa4, |o| {
                        octets(o, 0x04, a.as_bytes());
                        tlv(o, 0x30, |o| octets(o, tag, v.as_bytes()));
                    })
                }
                Filter::Present(a) => octets(o, 0x87, a.as_bytes()),
                Filter::AnyOf(a, values) => tlv(o, 0xa1, |o| {
                    for v in values {
                        tlv(o, 0xa4, |o| {
                            octets(o, 0x04, a.as_bytes());
                            tlv(o, 0x30, |o| octets(o, 0x81, v.as_bytes()));
                        })
                    }
                }),
            }
            tlv(o, 0x30, |_| {});
        })
    });
}

/// Modify: replace one attribute with one value.
pub fn modify_replace(out: &mut Vec<u8>, msgid: i32, dn: &str, attr: &str, value: &str) {
    message(out, msgid, |o| {
        tlv(o, 0x66, |o| {
            octets(o, 0x04, dn.as_bytes());
            tlv(o, 0x30, |o| {
                tlv(o, 0x30, |o| {
                    octets(o, 0x0a, &[2]);
                    tlv(o, 0x30, |o| {
                        octets(o, 0x04, attr.as_bytes());
                        tlv(o, 0x31, |o| octets(o, 0x04, value.as_bytes()));
                    });
                });
            });
        })
    });
}

pub fn add(out: &mut Vec<u8>, msgid: i32, dn: &str, attrs: &[(&str, &[&str])]) {
    message(out, msgid, |o| {
        tlv(o, 0x68, |o| {
            octets(o, 0x04, dn.as_bytes());
            tlv(o, 0x30, |o| {
                for (name, vals) in attrs {
                    tlv(o, 0x30, |o| {
                        octets(o, 0x04, name.as_bytes());
                        tlv(o, 0x31, |o| {
                            for v in *vals {
                                octets(o, 0x04, v.as_bytes());
                            }
                        });
                    });
                }
            });
        })
    });
}

pub fn delete(out: &mut Vec<u8>, msgid: i32, dn: &str) {
    message(out, msgid, |o| octets(o, 0x4a, dn.as_bytes()));
}

/// One response, read in place.
pub struct Response<'a> {
    pub msgid: i32,
    pub tag: u8,
    /// Result code of an LDAPResult-carrying response; the DN of an entry.
    pub code: u32,
    pub dn: &'a [u8],
}

fn read_len(b: &[u8]) -> Option<(usize, usize)> {
    let first = *b.first()?;
    if first < 0x80 {
        return Some((first as usize, 1));
    }
    let n = (first & 0x7f) as usize;
    if n == 0 || n > 4 || b.len() < 1 + n {
        return None;
    }
    Some((b[1..1 + n].iter().fold(0usize, |a, x| a << 8 | *x as usize), 1 + n))
}

/// Reads one TLV at the front of `b`: (tag, content, total length).
fn read_tlv(b: &[u8]) -> Option<(u8, &[u8], usize)> {
    let tag = *b.first()?;
    let (len, n) = read_len(&b[1..])?;
    let start = 1 + n;
    let content = b.get(start..start + len)?;
    Some((tag, content, start + len))
}

/// Total size of the message at the front of `buf`, once known.
pub fn frame_len(buf: &[u8]) -> Option<usize> {
    if buf.len() < 2 {
        return None;
    }
    let (len, n) = read_len(&buf[1..])?;
    Some(1 + n + len)
}

/// Parses a complete message (as delimited by `frame_len`).
pub fn parse(msg: &[u8]) -> Option<Response<'_>> {
    let (tag, body, _) = read_tlv(msg)?;
    if tag != 0x30 {
        return None;
    }
    let (_, id, used) = read_tlv(body)?;
    let msgid = id.iter().fold(0i64, |a, x| a << 8 | *x as i64) as i32;
    let (op, content, _) = read_tlv(&body[used..])?;
    let (code, dn) = if op == SEARCH_ENTRY {
        let (_, dn, _) = read_tlv(content)?;
        (0, dn)
    } else {
        let (_, code, _) = read_tlv(content)?;
        (code.iter().fold(0u32, |a, x| a << 8 | *x as u32), &[][..])
    };
    Some(Response { msgid, tag: op, code, dn })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lengths_are_fixed_up() {
        let mut out = Vec::new();
        let long = "x".repeat(300);
        search(&mut out, 7, &long, 2, Filter::Eq("uid", "u1"));
        assert_eq!(frame_len(&out), Some(out.len()));
        let mut out = Vec::new();
        bind(&mut out, 1, "cn=a", "b");
        assert_eq!(out[..2], [0x30, out.len() as u8 - 2]);
    }

    #[test]
    fn parses_results_and_entries() {
        let done = [0x30, 0x0c, 0x02, 0x01, 0x05, 0x65, 0x07, 0x0a, 0x01, 0x20, 0x04, 0x00, 0x04, 0x00];
        let r = parse(&done).unwrap();
        assert_eq!((r.msgid, r.tag, r.code), (5, SEARCH_DONE, 32));
        let entry = [0x30, 0x0b, 0x02, 0x01, 0x02, 0x64, 0x06, 0x04, 0x02, b'd', b'n', 0x30, 0x00];
        let r = parse(&entry).unwrap();
        assert_eq!((r.tag, r.dn), (SEARCH_ENTRY, &b"dn"[..]));
    }
}
