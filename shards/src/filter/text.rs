//! The string form of filters (RFC 4515), both ways.

use ldap3_proto::proto::{LdapFilter, LdapMatchingRuleAssertion};

/// Parses a filter's string form (RFC 4515), as access rules and tools
/// write it: `(&(objectClass=person)(uid=j*))`, `\2a` escapes, extensible
/// `(cn:caseExactMatch:=Jo)`. Errors say what is wrong and where.
pub fn parse(text: &str) -> Result<LdapFilter, String> {
    let mut p = Text { s: text.trim().as_bytes(), pos: 0 };
    let f = p.filter(0)?;
    if p.pos != p.s.len() {
        return Err(format!("unexpected text after the filter at offset {}", p.pos));
    }
    Ok(f)
}

pub(crate) struct Text<'a> {
    s: &'a [u8],
    pos: usize,
}

impl Text<'_> {
    fn filter(&mut self, depth: usize) -> Result<LdapFilter, String> {
        if depth > 256 {
            return Err("filter nested too deeply".into());
        }
        self.expect(b'(')?;
        let f = match self.s.get(self.pos) {
            Some(b'&') | Some(b'|') => {
                let and = self.s[self.pos] == b'&';
                self.pos += 1;
                let mut items = Vec::new();
                while self.s.get(self.pos) == Some(&b'(') {
                    items.push(self.filter(depth + 1)?);
                }
                if and {
                    LdapFilter::And(items)
                } else {
                    LdapFilter::Or(items)
                }
            }
            Some(b'!') => {
                self.pos += 1;
                LdapFilter::Not(Box::new(self.filter(depth + 1)?))
            }
            _ => self.item()?,
        };
        self.expect(b')')?;
        Ok(f)
    }

    fn expect(&mut self, c: u8) -> Result<(), String> {
        if self.s.get(self.pos) == Some(&c) {
            self.pos += 1;
            Ok(())
        } else {
            Err(format!("expected '{}' at offset {}", c as char, self.pos))
        }
    }

    /// `attr op value`, with the value running to the closing parenthesis.
    fn item(&mut self) -> Result<LdapFilter, String> {
        let start = self.pos;
        while self.pos < self.s.len() && !b"=~<>)(".contains(&self.s[self.pos]) {
            self.pos += 1;
        }
        let left = std::str::from_utf8(&self.s[start..self.pos]).map_err(|_| "attribute is not UTF-8")?.trim();
        if left.is_empty() {
            return Err(format!("missing attribute description at offset {start}"));
        }
        let op = match self.s.get(self.pos..self.pos + 2) {
            Some(b"~=") => "~=",
            Some(b">=") => ">=",
            Some(b"<=") => "<=",
            _ if self.s.get(self.pos) == Some(&b'=') => "=",
            _ => return Err(format!("expected '=', '~=', '>=' or '<=' at offset {}", self.pos)),
        };
        self.pos += op.len();
        let vstart = self.pos;
        while self.pos < self.s.len() && self.s[self.pos] != b')' {
            if self.s[self.pos] == b'(' {
                return Err(format!("unescaped '(' in a value at offset {}", self.pos));
            }
            self.pos += 1;
        }
        let raw = &self.s[vstart..self.pos];
        if let Some(attr) = left.strip_suffix(':') {
            return extensible_text(attr, &unescape(raw)?);
        }
        let attr = left.to_string();
        Ok(match op {
            "~=" => LdapFilter::Approx(attr, unescape(raw)?),
            ">=" => LdapFilter::GreaterOrEqual(attr, unescape(raw)?),
            "<=" => LdapFilter::LessOrEqual(attr, unescape(raw)?),
            _ if raw == b"*" => LdapFilter::Present(attr),
            _ if raw.contains(&b'*') => {
                let parts: Vec<&[u8]> = raw.split(|b| *b == b'*').collect();
                let piece = |p: &[u8]| if p.is_empty() { Ok(None) } else { unescape(p).map(Some) };
                let mut any = Vec::new();
                for p in &parts[1..parts.len() - 1] {
                    if !p.is_empty() {
                        any.push(unescape(p)?);
                    }
                }
                LdapFilter::Substring(
                    attr,
                    ldap3_proto::proto::LdapSubstringFilter {
                        initial: piece(parts[0])?,
                        any,
                        final_: piece(parts[parts.len() - 1])?,
                    },
                )
            }
            _ => LdapFilter::Equality(attr, unescape(raw)?),
        })
    }
}

/// `attr[:dn][:rule]:=value` or `[:dn]:rule:=value` (the trailing ':' is
/// already cut off `left`).
fn extensible_text(left: &str, value: &str) -> Result<LdapFilter, String> {
    let mut parts = left.split(':');
    let first = parts.next().unwrap_or("");
    let type_ = (!first.is_empty()).then(|| first.to_string());
    let mut dn_attributes = false;
    let mut matching_rule = None;
    for p in parts {
        if p.eq_ignore_ascii_case("dn") && matching_rule.is_none() {
            dn_attributes = true;
        } else if !p.is_empty() && matching_rule.is_none() {
            matching_rule = Some(p.to_string());
        } else {
            return Err(format!("malformed extensible match {left:?}"));
        }
    }
    if type_.is_none() && matching_rule.is_none() {
        return Err("an extensible match needs an attribute or a matching rule".into());
    }
    Ok(LdapFilter::Extensible(LdapMatchingRuleAssertion {
        matching_rule,
        type_,
        match_value: value.to_string(),
        dn_attributes,
    }))
}

/// Undoes RFC 4515 `\\XX` escapes; the value must be UTF-8.
fn unescape(raw: &[u8]) -> Result<String, String> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'\\' {
            let hex = raw.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
            let byte =
                hex.and_then(|h| u8::from_str_radix(h, 16).ok()).ok_or("a '\\' must be followed by two hex digits")?;
            out.push(byte);
            i += 3;
        } else {
            out.push(raw[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "value is not UTF-8".to_string())
}

/// The string form of a filter (RFC 4515), for logs: values escaped so
/// the text parses back to the same filter.
pub fn to_text(f: &LdapFilter) -> String {
    let mut out = String::new();
    write_text(f, &mut out);
    out
}

fn write_text(f: &LdapFilter, out: &mut String) {
    let esc = |v: &str, out: &mut String| {
        for c in v.chars() {
            match c {
                '*' | '(' | ')' | '\\' | '\0' => out.push_str(&format!("\\{:02x}", c as u32)),
                c => out.push(c),
            }
        }
    };
    out.push('(');
    match f {
        LdapFilter::And(fs) | LdapFilter::Or(fs) => {
            out.push(if matches!(f, LdapFilter::And(_)) { '&' } else { '|' });
            for f in fs {
                write_text(f, out);
            }
        }
        LdapFilter::Not(f) => {
            out.push('!');
            write_text(f, out);
        }
        LdapFilter::Equality(a, v)
        | LdapFilter::Approx(a, v)
        | LdapFilter::GreaterOrEqual(a, v)
        | LdapFilter::LessOrEqual(a, v) => {
            out.push_str(a);
            out.push_str(match f {
                LdapFilter::Approx(..) => "~=",
                LdapFilter::GreaterOrEqual(..) => ">=",
                LdapFilter::LessOrEqual(..) => "<=",
                _ => "=",
            });
            esc(v, out);
        }
        LdapFilter::Present(a) => {
            out.push_str(a);
            out.push_str("=*");
        }
        LdapFilter::Substring(a, s) => {
            out.push_str(a);
            out.push('=');
            if let Some(i) = &s.initial {
                esc(i, out);
            }
            out.push('*');
            for piece in &s.any {
                esc(piece, out);
                out.push('*');
            }
            if let Some(l) = &s.final_ {
                esc(l, out);
            }
        }
        LdapFilter::Extensible(m) => {
            if let Some(t) = &m.type_ {
                out.push_str(t);
            }
            if m.dn_attributes {
                out.push_str(":dn");
            }
            if let Some(r) = &m.matching_rule {
                out.push(':');
                out.push_str(r);
            }
            out.push_str(":=");
            esc(&m.match_value, out);
        }
    }
    out.push(')');
}
