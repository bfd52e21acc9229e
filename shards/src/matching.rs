//! Attribute names and value matching until the schema arrives.
//!
//! Interim rules, stated plainly so nobody mistakes them for schema-driven
//! matching: attribute names match case-insensitively and through the alias
//! table below; values of every attribute compare as directory strings
//! (case-folded, insignificant spaces removed) except the octet-string
//! attributes listed in `CASE_EXACT`, which compare byte for byte.

use std::borrow::Cow;

/// Short name and long alias pairs from RFC 4519 / 4524 / 2798.
const ALIASES: &[(&str, &str)] = &[
    ("cn", "commonname"),
    ("sn", "surname"),
    ("c", "countryname"),
    ("l", "localityname"),
    ("st", "stateorprovincename"),
    ("o", "organizationname"),
    ("ou", "organizationalunitname"),
    ("uid", "userid"),
    ("mail", "rfc822mailbox"),
    ("gn", "givenname"),
    ("dc", "domaincomponent"),
    ("street", "streetaddress"),
];

/// Attributes whose values are compared as octets (passwords, binary data).
const CASE_EXACT: &[&str] = &["userpassword", "jpegphoto", "usercertificate", "entryuuid"];

/// Attributes the server maintains; returned for `+`, never for `*`.
pub const OPERATIONAL: &[&str] = &[
    "entryuuid",
    "entrydn",
    "createtimestamp",
    "modifytimestamp",
    "creatorsname",
    "modifiersname",
    "hassubordinates",
    "numsubordinates",
    "subschemasubentry",
    "structuralobjectclass",
];

/// The canonical lower-case short name of an attribute type.
pub fn canonical(name: &str) -> Cow<'_, str> {
    let lower: Cow<'_, str> = if name.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(name.to_ascii_lowercase())
    } else {
        Cow::Borrowed(name)
    };
    for (short, long) in ALIASES {
        if lower == *long {
            return Cow::Borrowed(short);
        }
    }
    lower
}

/// Whether two attribute descriptions name the same type (allocation-free:
/// it runs for every attribute an entry is searched for).
pub fn same_attr(a: &str, b: &str) -> bool {
    if a.eq_ignore_ascii_case(b) {
        return true;
    }
    let alias = |n: &str| ALIASES.iter().position(|(s, l)| n.eq_ignore_ascii_case(s) || n.eq_ignore_ascii_case(l));
    match alias(a) {
        Some(i) => alias(b) == Some(i),
        None => false,
    }
}

pub fn is_operational(name: &str) -> bool {
    OPERATIONAL.contains(&canonical(name).as_ref())
}

/// Every operational attribute this server knows is maintained by the
/// server itself (RFC 4512 NO-USER-MODIFICATION).
pub fn is_no_user_modification(name: &str) -> bool {
    is_operational(name)
}

fn case_exact(attr: &str) -> bool {
    CASE_EXACT.contains(&canonical(attr).as_ref())
}

/// The normal form of a value of `attr`, used for equality, ordering and
/// substring matching and for duplicate detection.
pub fn normalize<'a>(attr: &str, value: &'a [u8]) -> Cow<'a, [u8]> {
    if case_exact(attr) {
        Cow::Borrowed(value)
    } else {
        fold(value)
    }
}

/// caseIgnore normalization: trim, collapse inner runs of spaces, fold case.
pub fn fold(value: &[u8]) -> Cow<'_, [u8]> {
    let trimmed = trim_spaces(value);
    let clean = trimmed.len() == value.len()
        && !trimmed.windows(2).any(|w| w == b"  ")
        && !trimmed.iter().any(|b| b.is_ascii_uppercase() || *b >= 0x80);
    if clean {
        return Cow::Borrowed(value);
    }
    let text = String::from_utf8_lossy(trimmed);
    let mut out = String::with_capacity(text.len());
    let mut last_space = false;
    for ch in text.chars() {
        if ch == ' ' {
            if !last_space {
                out.push(' ');
            }
            last_space = true;
        } else {
            last_space = false;
            out.extend(ch.to_lowercase());
        }
    }
    Cow::Owned(out.into_bytes())
}

fn trim_spaces(v: &[u8]) -> &[u8] {
    let start = v.iter().position(|b| *b != b' ').unwrap_or(v.len());
    let end = v.iter().rposition(|b| *b != b' ').map_or(start, |e| e + 1);
    &v[start..end]
}

/// Equality under the attribute's (interim) matching rule.
pub fn values_equal(attr: &str, a: &[u8], b: &[u8]) -> bool {
    a == b || normalize(attr, a) == normalize(attr, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fold_table() {
        for (input, want) in [("abc", "abc"), ("  Abc  ", "abc"), ("A  B   c", "a b c"), ("ÄÖü", "äöü"), ("", "")]
        {
            assert_eq!(fold(input.as_bytes()).as_ref(), want.as_bytes(), "{input:?}");
        }
    }

    #[test]
    fn aliases() {
        assert!(same_attr("cn", "commonName"));
        assert!(same_attr("SURNAME", "sn"));
        assert!(!same_attr("cn", "sn"));
        assert!(values_equal("cn", b"Foo Bar", b"foo  bar"));
        assert!(!values_equal("userPassword", b"Secret", b"secret"));
    }
}
