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

mod key;
#[cfg(test)]
mod tests;
mod text;

pub use key::{key_ancestors, key_below, key_depth, key_of, key_parent};
pub use text::escape_value;
use text::{parse_rdn, pretty_value, skip_spaces};

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
        if bytes.is_empty() {
            return Ok(Dn::root());
        }
        // As slapd: spaces alone are no DN, not the empty one (34, and 21
        // for a value of DN syntax).
        let mut pos = skip_spaces(bytes, 0);
        if pos == bytes.len() {
            return Err(Error::invalid_dn(text, "a DN of spaces only"));
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
