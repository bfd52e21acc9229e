//! The RFC 4514 string form: parsing RDNs and values, and writing them back
//! escaped (keys) or pretty (as slapd returns them).

use super::{Ava, Rdn};
use crate::error::{Error, Result};

pub(super) fn skip_spaces(b: &[u8], mut pos: usize) -> usize {
    while pos < b.len() && b[pos] == b' ' {
        pos += 1;
    }
    pos
}

pub(super) fn parse_rdn(text: &str, b: &[u8], mut pos: usize) -> Result<(Rdn, usize)> {
    let mut avas = Vec::new();
    loop {
        let (ava, next) = parse_ava(text, b, pos)?;
        avas.push(ava);
        pos = next;
        if pos < b.len() && b[pos] == b'+' {
            pos = skip_spaces(b, pos + 1);
            continue;
        }
        break;
    }
    Ok((Rdn::from_avas(avas), pos))
}

fn parse_ava(text: &str, b: &[u8], mut pos: usize) -> Result<(Ava, usize)> {
    let start = pos;
    while pos < b.len() && (b[pos].is_ascii_alphanumeric() || b[pos] == b'-' || b[pos] == b'.') {
        pos += 1;
    }
    let attr = &text[start..pos];
    if attr.is_empty() {
        return Err(Error::invalid_dn(text, "missing attribute type"));
    }
    let first = attr.as_bytes()[0];
    let is_oid = first.is_ascii_digit();
    if is_oid && !attr.bytes().all(|c| c.is_ascii_digit() || c == b'.') {
        return Err(Error::invalid_dn(text, "bad attribute type"));
    }
    if !is_oid && !first.is_ascii_alphabetic() {
        return Err(Error::invalid_dn(text, "bad attribute type"));
    }
    // Options (`cn;lang-de=x`), which RFC 4514 has no place for, are
    // dropped as slapd drops them: the RDN names the type itself.
    while !is_oid && b.get(pos) == Some(&b';') && b.get(pos + 1).is_some_and(u8::is_ascii_alphanumeric) {
        pos += 1;
        while pos < b.len() && (b[pos].is_ascii_alphanumeric() || b[pos] == b'-') {
            pos += 1;
        }
    }
    pos = skip_spaces(b, pos);
    if pos >= b.len() || b[pos] != b'=' {
        return Err(Error::invalid_dn(text, "expected '=' after attribute type"));
    }
    pos = skip_spaces(b, pos + 1);
    // RFC 4514 §2.4 allows `#` and a BER encoding; slapd refuses it as
    // unsupported (invalidDNSyntax), and clients never need it for the
    // string syntaxes a directory names entries by.
    if pos < b.len() && b[pos] == b'#' {
        return Err(Error::invalid_dn(text, "#hex (BER-encoded) values are not supported"));
    }
    let (value, next) = match b.get(pos) {
        Some(b'"') => parse_quoted_value(text, b, pos + 1)?,
        _ => parse_string_value(text, b, pos)?,
    };
    Ok((Ava { attr: attr.to_string(), value }, next))
}

/// A value in quotes, the form of RFC 2253 §3 and RFC 1779 (`cn="Smith,
/// John"`), read as slapd reads it: everything up to the closing quote is
/// the value, a backslash takes the next character as it is (no hex
/// pairs inside quotes); spaces may follow the quote, then the RDN ends.
/// `pos` is just past the opening quote.
fn parse_quoted_value(text: &str, b: &[u8], mut pos: usize) -> Result<(Vec<u8>, usize)> {
    let mut out = Vec::new();
    loop {
        match b.get(pos) {
            None => return Err(Error::invalid_dn(text, "unterminated quoted value")),
            Some(b'"') => break,
            Some(b'\\') => match b.get(pos + 1) {
                None | Some(0) => return Err(Error::invalid_dn(text, "dangling '\\'")),
                Some(&c) => {
                    out.push(c);
                    pos += 2;
                }
            },
            Some(0) => return Err(Error::invalid_dn(text, "NUL in a quoted value")),
            Some(&c) => {
                out.push(c);
                pos += 1;
            }
        }
    }
    let pos = skip_spaces(b, pos + 1);
    if b.get(pos).is_some_and(|c| !matches!(c, b',' | b';' | b'+')) {
        return Err(Error::invalid_dn(text, "characters after a quoted value"));
    }
    if out.is_empty() || std::str::from_utf8(&out).is_err() {
        return Err(Error::invalid_dn(text, "quoted value empty or not UTF-8"));
    }
    Ok((out, pos))
}

fn parse_string_value(text: &str, b: &[u8], mut pos: usize) -> Result<(Vec<u8>, usize)> {
    let mut out = Vec::new();
    // Index in `out` after the last escaped or non-space byte: trailing
    // unescaped spaces are not part of the value.
    let mut keep = 0;
    while pos < b.len() {
        match b[pos] {
            b',' | b';' | b'+' => break,
            b'\\' => {
                pos += 1;
                if pos >= b.len() {
                    return Err(Error::invalid_dn(text, "dangling '\\'"));
                }
                if b[pos].is_ascii_hexdigit() && pos + 1 < b.len() && b[pos + 1].is_ascii_hexdigit() {
                    out.push(hex(b[pos]) << 4 | hex(b[pos + 1]));
                    pos += 2;
                } else if b" \"#+,;<=>\\".contains(&b[pos]) {
                    out.push(b[pos]);
                    pos += 1;
                } else {
                    return Err(Error::invalid_dn(text, "bad escape"));
                }
                keep = out.len();
            }
            // RFC 4514 §3 lets '=' stand unescaped in a value (slapd agrees).
            b'"' | b'<' | b'>' | 0 => return Err(Error::invalid_dn(text, "unescaped special character in value")),
            c => {
                out.push(c);
                pos += 1;
                if c != b' ' {
                    keep = out.len();
                }
            }
        }
    }
    out.truncate(keep);
    if std::str::from_utf8(&out).is_err() {
        return Err(Error::invalid_dn(text, "value is not UTF-8"));
    }
    Ok((out, pos))
}

fn hex(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        _ => c - b'A' + 10,
    }
}

/// Escapes a value as slapd's pretty DNs do: RFC 4514's special
/// characters and `=` as `\XX`, a leading `#` or space and a trailing
/// space likewise; other UTF-8 as it is.
pub(super) fn pretty_value(value: &[u8], out: &mut String) {
    let text = String::from_utf8_lossy(value);
    let n = text.len();
    for (i, ch) in text.char_indices() {
        let escape = matches!(ch, '"' | '+' | ',' | ';' | '<' | '>' | '\\' | '=' | '\0')
            || (i == 0 && matches!(ch, '#' | ' '))
            || (i + 1 == n && ch == ' ');
        if escape {
            out.push_str(&format!("\\{:02X}", ch as u32));
        } else {
            out.push(ch);
        }
    }
}

/// Escapes a value for the string form of a DN (RFC 4514 §2.4).
pub fn escape_value(value: &[u8], out: &mut String) {
    // Most values need no escape at all: copy them as they are.
    if let (Some(first), Some(last)) = (value.first(), value.last()) {
        let plain = |c: &u8| c.is_ascii() && !matches!(c, b'"' | b'+' | b',' | b';' | b'<' | b'>' | b'\\' | b'=' | 0);
        if *first != b'#' && *first != b' ' && *last != b' ' && value.iter().all(plain) {
            // SAFETY: every byte was checked to be ASCII just above.
            out.push_str(unsafe { std::str::from_utf8_unchecked(value) });
            return;
        }
    }
    let text = String::from_utf8_lossy(value);
    let n = text.chars().count();
    for (i, ch) in text.chars().enumerate() {
        match ch {
            '"' | '+' | ',' | ';' | '<' | '>' | '\\' | '=' => {
                out.push('\\');
                out.push(ch);
            }
            '#' if i == 0 => out.push_str("\\#"),
            ' ' if i == 0 || i + 1 == n => out.push_str("\\ "),
            '\0' => out.push_str("\\00"),
            _ => out.push(ch),
        }
    }
}
