//! Requests built as BER (filters, controls, sort keys, views) and response controls written down.

use super::*;

pub(super) fn encode(tag: Tag) -> Vec<u8> {
    let mut buf = bytes::BytesMut::new();
    write::encode_into(&mut buf, tag.into_structure()).unwrap();
    buf.to_vec()
}

pub(super) fn octets(id: u64, class: TagClass, v: &[u8]) -> Tag {
    Tag::OctetString(OctetString { id, class, inner: v.to_vec() })
}

pub(super) fn int(v: i64) -> Tag {
    Tag::Integer(Integer { inner: v, ..Default::default() })
}

pub(super) fn seq(inner: Vec<Tag>) -> Tag {
    Tag::Sequence(Sequence { inner, ..Default::default() })
}

pub(super) fn filter_ber(f: &str) -> Vec<u8> {
    let tag = ldap3::parse_filter(f).unwrap_or_else(|_| panic!("filter {f} does not parse"));
    encode(tag)
}

/// A request control from its case spelling (`!` first: critical).
pub(super) fn control(spec: &str) -> RawControl {
    let (crit, spec) = match spec.strip_prefix('!') {
        Some(rest) => (true, rest),
        None => (false, spec),
    };
    let (name, rest) = spec.split_once(' ').unwrap_or((spec, ""));
    let (oid, val): (&str, Option<Vec<u8>>) = match name {
        "sort" => ("1.2.840.113556.1.4.473", Some(sort_keys(rest))),
        "assert" => ("1.3.6.1.1.12", Some(filter_ber(rest))),
        "mv" => {
            let t = ldap3::controls::MatchedValues::new(rest);
            ("1.2.826.0.1.3344810.2.3", t.val)
        }
        "manageDsaIT" => ("2.16.840.1.113730.3.4.2", None),
        "relax" => ("1.3.6.1.4.1.4203.666.5.12", None),
        "subentries" => (
            "1.3.6.1.4.1.4203.1.10.1",
            Some(encode(Tag::Boolean(Boolean { inner: rest == "TRUE", ..Default::default() }))),
        ),
        "preread" | "postread" => {
            let attrs = rest.split_whitespace().map(|a| octets(4, TagClass::Universal, a.as_bytes())).collect();
            (if name == "preread" { "1.3.6.1.1.13.1" } else { "1.3.6.1.1.13.2" }, Some(encode(seq(attrs))))
        }
        "vlv" => ("2.16.840.1.113730.3.4.9", Some(vlv(rest))),
        "proxyauth" => ("2.16.840.1.113730.3.4.18", Some(rest.as_bytes().to_vec())),
        "raw" => {
            let (oid, hex) = rest.split_once(' ').unwrap_or((rest, ""));
            let val = if hex.is_empty() { None } else { Some(unhex(hex)) };
            return RawControl { ctype: oid.into(), crit, val };
        }
        other => panic!("unknown control {other}"),
    };
    RawControl { ctype: oid.into(), crit, val }
}

/// `cn -sn:caseExactOrderingMatch`: RFC 2891 sort keys.
pub(super) fn sort_keys(spec: &str) -> Vec<u8> {
    let keys = spec
        .split_whitespace()
        .map(|k| {
            let (reverse, k) = match k.strip_prefix('-') {
                Some(k) => (true, k),
                None => (false, k),
            };
            let (attr, rule) = k.split_once(':').map_or((k, None), |(a, r)| (a, Some(r)));
            let mut parts = vec![octets(4, TagClass::Universal, attr.as_bytes())];
            if let Some(r) = rule {
                parts.push(octets(0, TagClass::Context, r.as_bytes()));
            }
            if reverse {
                parts.push(Tag::Boolean(Boolean { id: 1, class: TagClass::Context, inner: true }));
            }
            seq(parts)
        })
        .collect();
    encode(seq(keys))
}

/// `before after offset count` or `before after =value`.
pub(super) fn vlv(spec: &str) -> Vec<u8> {
    let p: Vec<&str> = spec.split_whitespace().collect();
    let n = |i: usize| p[i].parse::<i64>().expect("vlv number");
    let target = if let Some(v) = p[2].strip_prefix('=') {
        octets(1, TagClass::Context, v.as_bytes())
    } else {
        Tag::Sequence(Sequence { id: 0, class: TagClass::Context, inner: vec![int(n(2)), int(n(3))] })
    };
    encode(seq(vec![int(n(0)), int(n(1)), target]))
}

pub(super) fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex")).collect()
}

pub(super) fn hex(v: &[u8]) -> String {
    v.iter().map(|b| format!("{b:02x}")).collect()
}

/// A response control as the transcript shows it: opaque parts (cookies,
/// context ids) are left out, entries are written like search entries.
pub(super) fn show_control(c: &ldap3::controls::Control, out: &mut Vec<String>) {
    let raw = &c.1;
    let val = raw.val.as_deref().unwrap_or_default();
    let fields = || parse_tag(val).ok().and_then(|(_, t)| t.expect_constructed()).unwrap_or_default();
    match raw.ctype.as_str() {
        "1.2.840.113556.1.4.319" => {
            let f = fields();
            let size = f.first().and_then(|t| t.clone().expect_primitive()).map(|b| hex(&b));
            let more = f.get(1).and_then(|t| t.clone().expect_primitive()).is_some_and(|b| !b.is_empty());
            out.push(format!("  control paged size={size:?} more={more}"));
        }
        "2.16.840.1.113730.3.4.10" => {
            let f = fields();
            let p: Vec<String> =
                f.iter().take(3).map(|t| t.clone().expect_primitive().map(|b| hex(&b)).unwrap_or_default()).collect();
            out.push(format!("  control vlv position/count/result {}", p.join("/")));
        }
        "1.3.6.1.1.13.1" | "1.3.6.1.1.13.2" => {
            out.push(format!("  control {}", raw.ctype));
            match parse_tag(val) {
                Ok((_, t)) => show_entry(t, "    ", out),
                Err(_) => out.push(format!("    undecodable {}", hex(val))),
            }
        }
        oid => out.push(format!("  control {oid} {}", hex(val))),
    }
}
