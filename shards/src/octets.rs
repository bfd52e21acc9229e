//! Octets carried in a `String`. LDAP gives assertion values and simple
//! bind passwords any octets (RFC 4511 §4.1.6, §4.2), but ldap3_proto's
//! types hold them as `String`s, and slapd answers a filter value such as
//! Latin-1 `Jos\e9` like any other (a syntax that refuses it makes the item
//! Undefined). So the request decoder (`coredir::decode`) writes each such
//! field that is not UTF-8 with every byte outside UTF-8 as a character of
//! its own, U+10FF00 + the byte (the last 256 code points of plane 16,
//! private use), and whoever reads those fields as octets reads them back
//! through `unescape`. Characters of that range in a field are written
//! byte by byte too, so a field's octets always come back exactly.

use std::borrow::Cow;

/// The first code point of the escape range.
const BASE: u32 = 0x10FF00;

/// The first byte of every character of the escape range in UTF-8
/// (U+10FF00..=U+10FFFF is F4 8F BC 80..=F4 8F BF BF).
const LEAD: u8 = 0xF4;

fn escaped(c: char) -> Option<u8> {
    (c as u32).checked_sub(BASE).and_then(|b| u8::try_from(b).ok())
}

fn escape_byte(b: u8) -> char {
    char::from_u32(BASE + b as u32).unwrap_or(char::REPLACEMENT_CHARACTER)
}

/// `bytes` as a string `unescape` reads back, or None when they are UTF-8
/// already with nothing of the escape range (the string is the same).
pub fn escape(bytes: &[u8]) -> Option<String> {
    let plain =
        std::str::from_utf8(bytes).is_ok_and(|s| !bytes.contains(&LEAD) || !s.chars().any(|c| escaped(c).is_some()));
    if plain {
        return None;
    }
    let mut out = String::with_capacity(bytes.len() * 2);
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match escaped(c) {
                Some(_) => out.extend(c.encode_utf8(&mut [0; 4]).bytes().map(escape_byte)),
                None => out.push(c),
            }
        }
        out.extend(chunk.invalid().iter().map(|b| escape_byte(*b)));
    }
    Some(out)
}

/// The octets a field written by `escape` stands for.
pub fn unescape(s: &str) -> Cow<'_, [u8]> {
    if !s.as_bytes().contains(&LEAD) {
        return Cow::Borrowed(s.as_bytes());
    }
    let mut out = Vec::with_capacity(s.len());
    for c in s.chars() {
        match escaped(c) {
            Some(b) => out.push(b),
            None => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
        }
    }
    Cow::Owned(out)
}

/// The text a field stands for when its octets are UTF-8 (an entryDN
/// assertion), None when they are not.
pub fn unescape_text(s: &str) -> Option<Cow<'_, str>> {
    match unescape(s) {
        Cow::Borrowed(_) => Some(Cow::Borrowed(s)),
        Cow::Owned(v) => String::from_utf8(v).ok().map(Cow::Owned),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_octets_come_back_exactly() {
        let cases: [&[u8]; 7] = [
            b"plain",
            b"Jos\xe9",
            b"\xff",
            "caf\u{e9}".as_bytes(),
            "\u{10FF41}".as_bytes(),
            b"a\xf4\x8f\xbd",
            b"\xf4\x8f\xbd\x81\xe9",
        ];
        for bytes in cases {
            let text = escape(bytes);
            let back = text.as_deref().map_or(Cow::Borrowed(bytes), unescape);
            assert_eq!(&*back, bytes, "{bytes:?} -> {text:?}");
        }
        assert_eq!(escape(b"plain"), None, "UTF-8 stays as it is");
        assert_eq!(unescape_text(&escape(b"Jos\xe9").unwrap()), None);
        assert_eq!(unescape_text(&escape("\u{10FF41}".as_bytes()).unwrap()).as_deref(), Some("\u{10FF41}"));
    }
}
