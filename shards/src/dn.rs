//! Distinguished names (RFC 4514): parsing, normalization and storage keys.
//!
//! A `Dn` keeps each RDN's normalized string form. Two DNs are the same
//! entry exactly when their normalized forms are equal; the partition of an
//! entry is a hash of that form. The storage key (`Dn::key`) lists the RDNs
//! from the root down, separated by a NUL byte, so every entry below a base
//! shares the base's key as a prefix and a subtree search is one ordered
//! range scan (normalized RDNs escape NUL, so the separator is unambiguous).

use crate::error::{Error, Result};
use crate::matching;

/// Equality is by normalized form: `CN=Admin` and `cn=admin` are one DN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dn {
    /// RDNs from the leftmost (the entry's own) to the rightmost.
    rdns: Vec<Rdn>,
}

#[derive(Debug, Clone)]
pub struct Rdn {
    pub avas: Vec<Ava>,
    /// Normalized form: `type=value` pairs sorted and joined by `+`.
    norm: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ava {
    /// The attribute type as written.
    pub attr: String,
    /// The unescaped value.
    pub value: Vec<u8>,
}

pub const KEY_SEPARATOR: u8 = 0;

/// The longest DN accepted, in bytes as sent: slapd's `SLAP_LDAPDN_MAXLEN`.
/// Longer is invalid syntax before any other work, which bounds what one
/// hostile name costs (every step over a DN is linear in this). A constant,
/// not a setting: stored DNs travel to peers and exports, which must accept
/// them too.
pub const MAX_DN_BYTES: usize = 8192;

impl Dn {
    pub fn root() -> Dn {
        Dn { rdns: Vec::new() }
    }

    pub fn parse(text: &str) -> Result<Dn> {
        if text.len() > MAX_DN_BYTES {
            return Err(too_long(text));
        }
        let mut rdns = Vec::new();
        let bytes = text.as_bytes();
        let mut pos = skip_spaces(bytes, 0);
        if pos == bytes.len() {
            return Ok(Dn::root());
        }
        loop {
            let (rdn, next) = parse_rdn(text, bytes, pos)?;
            rdns.push(rdn);
            pos = skip_spaces(bytes, next);
            if pos == bytes.len() {
                break;
            }
            match bytes[pos] {
                b',' | b';' => pos = skip_spaces(bytes, pos + 1),
                _ => return Err(Error::invalid_dn(text, "expected ',' between RDNs")),
            }
            if pos == bytes.len() {
                return Err(Error::invalid_dn(text, "empty RDN at the end"));
            }
        }
        Ok(Dn { rdns })
    }

    pub fn is_root(&self) -> bool {
        self.rdns.is_empty()
    }

    pub fn rdns(&self) -> &[Rdn] {
        &self.rdns
    }

    /// The entry's own RDN; `None` for the root.
    pub fn rdn(&self) -> Option<&Rdn> {
        self.rdns.first()
    }

    pub fn parent(&self) -> Dn {
        Dn { rdns: self.rdns.iter().skip(1).cloned().collect() }
    }

    /// The ancestor made of this DN's last `n` RDNs (`n` ≤ depth).
    pub fn ancestor(&self, n: usize) -> Dn {
        Dn { rdns: self.rdns[self.rdns.len() - n..].to_vec() }
    }

    /// This DN with its leftmost RDN replaced and placed under `superior`.
    pub fn renamed(rdn: Rdn, superior: &Dn) -> Dn {
        let mut rdns = Vec::with_capacity(superior.rdns.len() + 1);
        rdns.push(rdn);
        rdns.extend(superior.rdns.iter().cloned());
        Dn { rdns }
    }

    pub fn depth(&self) -> usize {
        self.rdns.len()
    }

    /// The normalized string form, `uid=jdoe,ou=people,dc=example,dc=com`.
    pub fn norm(&self) -> String {
        let mut out = String::new();
        for (i, rdn) in self.rdns.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&rdn.norm);
        }
        out
    }

    /// The storage key: normalized RDNs from the root down, NUL-separated.
    pub fn key(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.rdns.iter().map(|r| r.norm.len() + 1).sum());
        for (i, rdn) in self.rdns.iter().rev().enumerate() {
            if i > 0 {
                out.push(KEY_SEPARATOR);
            }
            out.extend_from_slice(rdn.norm.as_bytes());
        }
        out
    }

    /// Whether `self` is `base` or below it.
    pub fn is_within(&self, base: &Dn) -> bool {
        self.rdns.len() >= base.rdns.len()
            && self.rdns[self.rdns.len() - base.rdns.len()..].iter().zip(&base.rdns).all(|(a, b)| a.norm == b.norm)
    }

    /// slapd's pretty form (its `dnPretty`), in which entries store and
    /// return DNs: each type by its schema name, no spaces around
    /// separators, the AVAs of a multi-valued RDN sorted by type, and
    /// special characters escaped as `\XX` (`cn=Smith\2C John`). Fails
    /// with `invalidDNSyntax` where slapd's does: a type the schema does
    /// not define, an empty value or one its syntax refuses, one type
    /// twice in an RDN.
    pub fn pretty(&self) -> Result<String> {
        self.spelled(false)
    }

    /// slapd's normalized form (its `dnNormalize`), in which it names who
    /// a SASL or proxied authorization made a connection act as (whoami,
    /// `creatorsName`): the pretty form with each value in its equality
    /// rule's normal form (`cn=smith\2C john,dc=example,dc=com`).
    pub fn normalized(&self) -> Result<String> {
        self.spelled(true)
    }

    fn spelled(&self, normal_values: bool) -> Result<String> {
        let mut out = String::new();
        for (i, rdn) in self.rdns.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let mut avas: Vec<(&str, &[u8])> = Vec::with_capacity(rdn.avas.len());
            for ava in &rdn.avas {
                let at = self.checked_type(ava)?;
                if avas.iter().any(|(name, _)| *name == at.name()) {
                    return Err(Error::invalid_dn(&self.to_string_form(), "an attribute type twice in one RDN"));
                }
                avas.push((at.name(), &ava.value));
            }
            // By the schema's spelling, octet by octet, as slapd orders
            // them (`cNAMERecord=y+cn=x`).
            avas.sort_by_key(|(name, _)| *name);
            for (j, (name, value)) in avas.into_iter().enumerate() {
                if j > 0 {
                    out.push('+');
                }
                out.push_str(name);
                out.push('=');
                match normal_values {
                    // A value of spaces alone normalizes to nothing; slapd
                    // writes it as one escaped space (`cn=\20`).
                    true => match matching::normalize(name, value) {
                        v if v.is_empty() => pretty_value(b" ", &mut out),
                        v => pretty_value(&v, &mut out),
                    },
                    false => pretty_value(value, &mut out),
                }
            }
        }
        // What is stored must parse again: respelled types, escapes and a
        // new RDN can make it longer than the DN as sent.
        if out.len() > MAX_DN_BYTES {
            return Err(too_long(&out));
        }
        Ok(out)
    }

    /// Checks the DN as slapd's `dnNormalize` does before any operation
    /// uses it: every type defined, every value non-empty and valid per
    /// its type's syntax (`c=USA` or `dc=é` name nothing), else
    /// invalidDNSyntax.
    pub fn validate(&self) -> Result<()> {
        self.rdns.iter().flat_map(|r| &r.avas).try_for_each(|ava| self.checked_type(ava).map(|_| ()))
    }

    fn checked_type(&self, ava: &Ava) -> Result<&'static crate::schema::AttributeType> {
        let Some(at) = matching::attr_type(&ava.attr) else {
            return Err(Error::invalid_dn(&self.to_string_form(), "undefined attribute type"));
        };
        if ava.value.is_empty() {
            return Err(Error::invalid_dn(&self.to_string_form(), "empty attribute value"));
        }
        if !(at.syntax_ref.valid)(&ava.value) {
            return Err(Error::invalid_dn(&self.to_string_form(), "value invalid per its type's syntax"));
        }
        Ok(at)
    }

    /// The `n` leaf-most RDNs as a DN of their own (what a DN holds below
    /// an ancestor of depth `depth() - n`).
    pub fn head(&self, n: usize) -> Dn {
        Dn { rdns: self.rdns[..n.min(self.rdns.len())].to_vec() }
    }

    /// The user-facing string form (values re-escaped as needed).
    pub fn to_string_form(&self) -> String {
        let mut out = String::new();
        for (i, rdn) in self.rdns.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            for (j, ava) in rdn.avas.iter().enumerate() {
                if j > 0 {
                    out.push('+');
                }
                out.push_str(&ava.attr);
                out.push('=');
                escape_value(&ava.value, &mut out);
            }
        }
        out
    }
}

/// The storage key of the DN `text`: the same bytes as
/// `Dn::parse(text)?.key()`, built straight into one buffer when every RDN
/// is a plain `type=value` (no escapes, no multi-valued RDN), which is what
/// binds and searches send; anything else takes the full parser, which
/// also reports the errors.
pub fn key_of(text: &str) -> Result<Vec<u8>> {
    // Length first: nothing longer is kept among the parents' keys.
    match (text.len() <= MAX_DN_BYTES).then(|| plain_key(text)).flatten() {
        Some(key) => Ok(key),
        None => Dn::parse(text).map(|dn| dn.key()),
    }
}

/// `key_of` for DNs made of plain `type=value` RDNs; `None` for any other
/// form (or an error, which the full parser then names).
fn plain_key(text: &str) -> Option<Vec<u8>> {
    if text.bytes().any(|c| matches!(c, b'\\' | b'#' | b'+' | b'"' | b'<' | b'>' | b';' | 0)) {
        return None;
    }
    // The parent's key from the last few asked (a search's candidates
    // share theirs), then the first RDN after it: the same bytes as
    // plain_rdns(text), as keys are written root first.
    let Some((rdn, parent)) = text.split_once(',') else {
        return plain_rdns(text).map(String::into_bytes);
    };
    let mut key = PARENT_KEYS.with_borrow_mut(|cache| cache.key(parent))?;
    key.push(KEY_SEPARATOR as char);
    push_rdn(rdn, &mut key)?;
    Some(key.into_bytes())
}

/// `plain_key` for text already checked, RDN by RDN.
fn plain_rdns(text: &str) -> Option<String> {
    let mut key = String::with_capacity(text.len() + 16);
    for (i, rdn) in text.rsplit(',').enumerate() {
        if i > 0 {
            key.push(KEY_SEPARATOR as char);
        }
        push_rdn(rdn, &mut key)?;
    }
    Some(key)
}

/// One plain `type=value` RDN's part of a key.
fn push_rdn(rdn: &str, key: &mut String) -> Option<()> {
    let (attr, value) = rdn.split_once('=')?;
    let (attr, value) = (attr.trim_matches(' '), value.trim_matches(' '));
    if !plain_attr(attr) || value.contains('=') {
        return None;
    }
    let attr = matching::canonical(attr);
    key.push_str(&attr);
    key.push('=');
    escape_value(&matching::normalize(&attr, value.as_bytes()), key);
    Some(())
}

/// How many parents' keys each thread keeps, of at most how many bytes.
const PARENT_KEYS_KEPT: usize = 8;
const PARENT_KEYS_LONGEST: usize = 1024;

thread_local! {
    /// Per reactor, no lock: a key depends on the DN's text and the
    /// schema alone, and the schema is fixed once the server runs.
    static PARENT_KEYS: std::cell::RefCell<ParentKeys> = const { std::cell::RefCell::new(ParentKeys { kept: Vec::new(), next: 0 }) };
}

/// The keys of the last parents asked, replaced in turn.
struct ParentKeys {
    kept: Vec<(Box<str>, Box<str>)>,
    next: usize,
}

impl ParentKeys {
    /// The parent's key as text, with room for an RDN more.
    fn key(&mut self, parent: &str) -> Option<String> {
        let with_room = |key: &str| {
            let mut out = String::with_capacity(key.len() + 48);
            out.push_str(key);
            out
        };
        if let Some((_, key)) = self.kept.iter().find(|(text, _)| &**text == parent) {
            return Some(with_room(key));
        }
        let key = plain_rdns(parent)?;
        // Long ones are rare and would keep up to ~100 KB each (NFKC).
        if parent.len() > PARENT_KEYS_LONGEST || key.len() > PARENT_KEYS_LONGEST {
            return Some(key);
        }
        let entry = (parent.into(), key.as_str().into());
        match self.kept.len() < PARENT_KEYS_KEPT {
            true => self.kept.push(entry),
            false => self.kept[self.next] = entry,
        }
        self.next = (self.next + 1) % PARENT_KEYS_KEPT;
        Some(key)
    }
}

/// An attribute type as `parse_ava` accepts it: a name or a dotted OID.
fn plain_attr(attr: &str) -> bool {
    let b = attr.as_bytes();
    match b.first() {
        Some(c) if c.is_ascii_digit() => b.iter().all(|c| c.is_ascii_digit() || *c == b'.'),
        Some(c) if c.is_ascii_alphabetic() => b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.')),
        _ => false,
    }
}

/// Whether storage key `key` names an entry strictly below `base` (every
/// entry is below the root, whose key is empty).
pub fn key_below(key: &[u8], base: &[u8]) -> bool {
    base.is_empty() || (key.len() > base.len() && key.starts_with(base) && key[base.len()] == KEY_SEPARATOR)
}

/// The storage key of the parent of the entry with key `key`; `None` for
/// the root.
pub fn key_parent(key: &[u8]) -> Option<&[u8]> {
    match key.iter().rposition(|b| *b == KEY_SEPARATOR) {
        Some(at) => Some(&key[..at]),
        None => (!key.is_empty()).then_some(&[][..]),
    }
}

/// Number of RDNs in a storage key.
pub fn key_depth(key: &[u8]) -> usize {
    if key.is_empty() {
        0
    } else {
        1 + key.iter().filter(|b| **b == KEY_SEPARATOR).count()
    }
}

impl PartialEq for Rdn {
    fn eq(&self, other: &Rdn) -> bool {
        self.norm == other.norm
    }
}

impl Eq for Rdn {}

/// invalidDNSyntax for a DN over [`MAX_DN_BYTES`], as slapd answers.
fn too_long(text: &str) -> Error {
    Error::invalid_dn(&Error::clipped(text), &format!("longer than {MAX_DN_BYTES} bytes"))
}

impl Rdn {
    pub fn parse(text: &str) -> Result<Rdn> {
        if text.len() > MAX_DN_BYTES {
            return Err(too_long(text));
        }
        let bytes = text.as_bytes();
        let pos = skip_spaces(bytes, 0);
        let (rdn, next) = parse_rdn(text, bytes, pos)?;
        if skip_spaces(bytes, next) != bytes.len() {
            return Err(Error::invalid_dn(text, "an RDN must not contain ','"));
        }
        Ok(rdn)
    }

    pub fn norm(&self) -> &str {
        &self.norm
    }

    fn from_avas(mut avas: Vec<Ava>) -> Rdn {
        if avas.len() == 1 {
            let attr = matching::canonical(&avas[0].attr);
            let value = matching::normalize(&attr, &avas[0].value);
            let mut norm = String::with_capacity(attr.len() + value.len() + 1);
            norm.push_str(&attr);
            norm.push('=');
            escape_value(&value, &mut norm);
            return Rdn { avas, norm };
        }
        let mut parts: Vec<String> = avas
            .iter()
            .map(|a| {
                let attr = matching::canonical(&a.attr);
                let value = matching::normalize(&attr, &a.value);
                let mut s = String::with_capacity(attr.len() + value.len() + 1);
                s.push_str(&attr);
                s.push('=');
                escape_value(&value, &mut s);
                s
            })
            .collect();
        if parts.len() > 1 {
            let mut order: Vec<usize> = (0..parts.len()).collect();
            order.sort_by(|a, b| parts[*a].cmp(&parts[*b]));
            avas = order.iter().map(|i| avas[*i].clone()).collect();
            parts.sort();
        }
        Rdn { avas, norm: parts.join("+") }
    }
}

fn skip_spaces(b: &[u8], mut pos: usize) -> usize {
    while pos < b.len() && b[pos] == b' ' {
        pos += 1;
    }
    pos
}

fn parse_rdn(text: &str, b: &[u8], mut pos: usize) -> Result<(Rdn, usize)> {
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
fn pretty_value(value: &[u8], out: &mut String) {
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
            // ASCII checked just above.
            out.push_str(std::str::from_utf8(value).unwrap_or_default());
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

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(s: &str) -> String {
        Dn::parse(s).map(|d| d.norm()).unwrap_or_else(|e| format!("ERR {:?}", e.code))
    }

    #[test]
    fn key_parent_strips_the_leftmost_rdn() {
        let k = |s: &str| key_of(s).unwrap();
        assert_eq!(key_parent(&k("cn=a,ou=b,dc=c")), Some(k("ou=b,dc=c").as_slice()));
        assert_eq!(key_parent(&k("dc=c")), Some(&[][..]));
        assert_eq!(key_parent(&k("")), None);
    }

    /// As slapd's `dnNormalize` spells what whoami says after a proxied
    /// or SASL authorization: types by their schema name, values in
    /// their equality rule's normal form, escapes as the pretty form's.
    #[test]
    fn normalized_spells_types_by_schema_and_values_by_their_rule() {
        for (input, want) in [
            ("CN=Foo2, OU=P-Q,DC=Example,DC=Com", "cn=foo2,ou=p-q,dc=example,dc=com"),
            ("GIDNUMBER=0+uidNumber=1,cn=peercred", "gidNumber=0+uidNumber=1,cn=peercred"),
            ("cn=Smith\\2C  John", "cn=smith\\2C john"),
            ("cn=\\20,dc=x", "cn=\\20,dc=x"),
            ("CN=x+cNAMERecord=y", "cNAMERecord=y+cn=x"),
        ] {
            assert_eq!(Dn::parse(input).unwrap().normalized().unwrap(), want, "{input}");
        }
    }

    #[test]
    fn normalization_table() {
        for (input, want) in [
            ("", ""),
            ("dc=example,dc=com", "dc=example,dc=com"),
            ("DC=Example, DC=COM", "dc=example,dc=com"),
            ("commonName=John  Smith,o=Acme", "cn=john smith,o=acme"),
            ("cn=a\\,b,dc=x", "cn=a\\,b,dc=x"),
            ("cn=\\41bc,dc=x", "cn=abc,dc=x"),
            ("cn=#616263,dc=x", "ERR InvalidDNSyntax"),
            ("cn=b+sn=a,dc=x", "cn=b+sn=a,dc=x"),
            ("sn=a+cn=b,dc=x", "cn=b+sn=a,dc=x"),
            ("cn=x ,dc=y", "cn=x,dc=y"),
            ("cn=\\ x\\ ,dc=y", "cn=x,dc=y"),
            ("2.5.4.3=x", "cn=x"),
            ("commonName=X,DC=Y", "cn=x,dc=y"),
            ("uidNumber=007,dc=y", "uidnumber=7,dc=y"),
            ("cn=Jürgen,dc=x", "cn=jürgen,dc=x"),
            ("cn", "ERR InvalidDNSyntax"),
            ("=x", "ERR InvalidDNSyntax"),
            ("cn=x,", "ERR InvalidDNSyntax"),
            ("cn=a\"b", "ERR InvalidDNSyntax"),
            ("cn=a\\", "ERR InvalidDNSyntax"),
            ("cn=x,,dc=y", "ERR InvalidDNSyntax"),
            ("1cn=x", "ERR InvalidDNSyntax"),
        ] {
            assert_eq!(norm(input), want, "{input:?}");
        }
    }

    #[test]
    fn keys_nest() {
        let base = Dn::parse("ou=people,dc=example,dc=com").unwrap();
        let child = Dn::parse("uid=a,ou=people,dc=example,dc=com").unwrap();
        assert!(child.key().starts_with(&base.key()));
        assert_eq!(child.key()[base.key().len()], KEY_SEPARATOR);
        assert_eq!(key_depth(&child.key()), 4);
        assert!(child.is_within(&base));
        assert!(!base.is_within(&child));
        assert_eq!(child.parent(), base);
        assert_eq!(Dn::parse("CN=Admin, DC=Example").unwrap(), Dn::parse("cn=admin,dc=example").unwrap());
    }

    #[test]
    fn string_form_round_trips() {
        for s in ["cn=a\\,b+sn=c,dc=x", "cn=\\ lead,dc=x", "cn=\\#x,dc=y"] {
            let dn = Dn::parse(s).unwrap();
            assert_eq!(Dn::parse(&dn.to_string_form()).unwrap().norm(), dn.norm(), "{s}");
        }
    }

    /// `key_of` gives exactly `Dn::parse(..).key()`, or the same error, on
    /// random strings over DN-ish pieces (plain and escaped forms mixed).
    #[test]
    fn key_of_equals_the_full_parser() {
        use rand::{Rng, SeedableRng};
        let pieces = [
            "uid",
            "CN",
            "2.5.4.3",
            "ou",
            "dc",
            "uidNumber",
            "=",
            "=",
            ",",
            ",",
            " ",
            "+",
            "\\",
            "\\2c",
            "#61",
            "a",
            "B",
            "x y",
            "user42",
            "Jürgen",
            "\"",
            "<",
            ";",
            "-",
            ".",
            "0",
            "telephoneNumber",
            "+1 555-0100",
        ];
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut texts: Vec<String> = ["", " ", "uid=user1,ou=people,dc=example,dc=com", " CN = A  b , DC=X "]
            .iter()
            .map(|s| s.to_string())
            .collect();
        for _ in 0..20_000 {
            let n = rng.gen_range(1..10);
            texts.push((0..n).map(|_| pieces[rng.gen_range(0..pieces.len())]).collect());
        }
        // Each also as a parent, twice: the second time its key comes
        // from the thread's kept parents' keys.
        for text in &texts {
            let child = format!("uid=u1,{text}");
            for text in [text, &child, &child] {
                let fast = key_of(text).map_err(|e| e.code);
                let full = Dn::parse(text).map(|d| d.key()).map_err(|e| e.code);
                assert_eq!(fast, full, "{text:?}");
            }
        }
    }

    #[test]
    fn quoted_values_and_type_options_read_as_slapd_reads_them() {
        let quoted = Dn::parse("cn=\"Smith, John\" , ou=\"a+b\";dc=x").unwrap();
        assert_eq!(quoted.key(), Dn::parse("cn=Smith\\, John,ou=a\\+b,dc=x").unwrap().key());
        assert_eq!(Dn::parse("cn;lang-de=foo,dc=x").unwrap().key(), Dn::parse("cn=foo,dc=x").unwrap().key());
        // Inside quotes a backslash takes the next character as it is.
        assert_eq!(Dn::parse("cn=\"a\\q\\41\",dc=x").unwrap().key(), Dn::parse("cn=aq41,dc=x").unwrap().key());
        for bad in ["cn=\"open,dc=x", "cn=\"a\"b,dc=x", "cn=\"\",dc=x", "cn=a\"b\",dc=x", "2.5.4.3;x=foo,dc=x"] {
            assert!(Dn::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn escape_value_copies_plain_values_and_escapes_the_rest() {
        for (value, want) in
            [("abc", "abc"), (" a", "\\ a"), ("a ", "a\\ "), ("#a", "\\#a"), ("a,b", "a\\,b"), ("ü", "ü")]
        {
            let mut out = String::new();
            escape_value(value.as_bytes(), &mut out);
            assert_eq!(out, want, "{value:?}");
        }
    }
}
