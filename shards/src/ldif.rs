//! LDIF content records (RFC 2849): reading for `coredir import`, writing
//! for `coredir export`.
//!
//! Reading handles folded lines, comments, `version: 1`, base64 values
//! (`::`) and attribute options; change records and URL values (`:<`) are
//! refused with the line they start on. Writing base64-encodes every value
//! RFC 2849 does not allow as a SAFE-STRING and folds lines at 76 columns,
//! so export → import → export is byte-identical.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use std::io::{self, BufRead, Write};

/// One content record: its DN, its attributes in order, and the line it
/// starts on (for error messages).
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub line: usize,
    pub dn: String,
    pub attrs: Vec<(String, Vec<u8>)>,
}

/// Reads records one at a time, calling `each` for every record; stops at
/// the first error, returned as `line N: why`.
pub fn read(input: impl BufRead, mut each: impl FnMut(Record) -> Result<(), String>) -> Result<usize, String> {
    let mut logical: Vec<(usize, String)> = Vec::new();
    let mut n_records = 0;
    let mut first_record = true;
    let mut flush = |logical: &mut Vec<(usize, String)>, first: &mut bool| -> Result<(), String> {
        if logical.is_empty() {
            return Ok(());
        }
        let lines = std::mem::take(logical);
        let mut it = lines.into_iter().peekable();
        if *first {
            *first = false;
            if let Some((_, l)) = it.peek() {
                if l.starts_with("version:") {
                    it.next();
                    if it.peek().is_none() {
                        return Ok(());
                    }
                }
            }
        }
        let (line, dn_line) = it.next().expect("not empty");
        let (name, dn) = split(line, &dn_line)?;
        if !name.eq_ignore_ascii_case("dn") {
            return Err(format!("line {line}: a record must start with \"dn:\", found \"{name}:\""));
        }
        let dn = String::from_utf8(dn).map_err(|_| format!("line {line}: the DN is not UTF-8"))?;
        let mut attrs = Vec::new();
        for (l, text) in it {
            let (name, value) = split(l, &text)?;
            if name.eq_ignore_ascii_case("changetype") || name.eq_ignore_ascii_case("control") {
                return Err(format!(
                    "line {l}: change records are not accepted by import (use ldapmodify against a running server)"
                ));
            }
            attrs.push((name, value));
        }
        n_records += 1;
        each(Record { line, dn, attrs })
    };
    let mut in_comment = false;
    for (i, line) in input.lines().enumerate() {
        let n = i + 1;
        let line = line.map_err(|e| format!("line {n}: {e}"))?;
        let line = line.strip_suffix('\r').unwrap_or(&line);
        if line.is_empty() {
            in_comment = false;
            flush(&mut logical, &mut first_record)?;
            continue;
        }
        if let Some(rest) = line.strip_prefix(' ') {
            if in_comment {
                continue;
            }
            match logical.last_mut() {
                Some((_, prev)) => prev.push_str(rest),
                None => return Err(format!("line {n}: continuation line without a line to continue")),
            }
            continue;
        }
        in_comment = line.starts_with('#');
        if !in_comment {
            logical.push((n, line.to_string()));
        }
    }
    flush(&mut logical, &mut first_record)?;
    Ok(n_records)
}

/// Splits `name: value`, `name:: base64` (and refuses `name:< url`).
fn split(line: usize, text: &str) -> Result<(String, Vec<u8>), String> {
    let colon = text.find(':').ok_or_else(|| format!("line {line}: expected \"name: value\""))?;
    let name = &text[..colon];
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b';' || b == b'.') {
        return Err(format!("line {line}: bad attribute description \"{name}\""));
    }
    let rest = &text[colon + 1..];
    let value = if let Some(b64) = rest.strip_prefix(':') {
        STANDARD.decode(b64.trim()).map_err(|e| format!("line {line}: bad base64 value for {name}: {e}"))?
    } else if rest.starts_with('<') {
        return Err(format!("line {line}: URL values (\"{name}:<\") are not supported"));
    } else {
        rest.trim_start_matches(' ').as_bytes().to_vec()
    };
    Ok((name.to_string(), value))
}

/// Whether RFC 2849 requires base64 for this value.
fn needs_base64(v: &[u8]) -> bool {
    match (v.first(), v.last()) {
        (Some(b' ' | b':' | b'<'), _) | (_, Some(b' ')) => true,
        _ => v.iter().any(|b| matches!(b, 0 | b'\n' | b'\r') || *b >= 0x80),
    }
}

/// Writes `name: value` (or `name:: base64`), folded at 76 columns.
pub fn write_line(out: &mut impl Write, name: &str, value: &[u8]) -> io::Result<()> {
    let line = if needs_base64(value) {
        format!("{name}:: {}", STANDARD.encode(value))
    } else if value.is_empty() {
        format!("{name}:")
    } else {
        // Safe: needs_base64 refused every byte >= 0x80.
        format!("{name}: {}", std::str::from_utf8(value).expect("ASCII"))
    };
    let bytes = line.as_bytes();
    let mut start = 0;
    let mut width = 76;
    while bytes.len() - start > width {
        out.write_all(&bytes[start..start + width])?;
        out.write_all(b"\n ")?;
        start += width;
        width = 75;
    }
    out.write_all(&bytes[start..])?;
    out.write_all(b"\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<Record>, String> {
        let mut out = Vec::new();
        read(text.as_bytes(), |r| {
            out.push(r);
            Ok(())
        })?;
        Ok(out)
    }

    #[test]
    fn reads_folding_comments_base64() {
        let text = "version: 1\n\n# a comment\n#  folded\ndn: cn=a,dc=x\nobjectClass: top\ndescription: one\n  two\ncn:: w6l0w6k=\n\ndn:: Y249YixkYz14\ncn: b\n";
        let r = parse(text).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].line, 5);
        assert_eq!(r[0].attrs[1], ("description".into(), b"one two".to_vec()));
        assert_eq!(r[0].attrs[2].1, "été".as_bytes());
        assert_eq!(r[1].dn, "cn=b,dc=x");
    }

    #[test]
    fn errors_name_the_line() {
        let e = parse("dn: cn=a,dc=x\nchangetype: add\ncn: a\n").unwrap_err();
        assert!(e.starts_with("line 2:") && e.contains("change records"), "{e}");
        let e = parse("dn: cn=a,dc=x\ncn: a\n\ncn: b\n").unwrap_err();
        assert!(e.starts_with("line 4:"), "{e}");
        let e = parse("dn: cn=a\njpegPhoto:< file:///x\n").unwrap_err();
        assert!(e.starts_with("line 2:"), "{e}");
        let e = parse("dn: cn=a\ncn:: !!!\n").unwrap_err();
        assert!(e.starts_with("line 2:"), "{e}");
    }

    #[test]
    fn writes_what_it_reads() {
        let long = "x".repeat(200);
        let values: Vec<&[u8]> =
            vec![b"plain", b" lead", b"trail ", b":colon", b"<lt", "ünï".as_bytes(), b"a\nb", b"", long.as_bytes()];
        let mut out = Vec::new();
        write_line(&mut out, "dn", b"cn=a,dc=x").unwrap();
        for v in &values {
            write_line(&mut out, "description", v).unwrap();
        }
        let text = String::from_utf8(out).unwrap();
        assert!(text.lines().all(|l| l.len() <= 76), "{text}");
        let r = parse(&text).unwrap();
        let got: Vec<&[u8]> = r[0].attrs.iter().map(|(_, v)| v.as_slice()).collect();
        assert_eq!(got, values);
    }
}
