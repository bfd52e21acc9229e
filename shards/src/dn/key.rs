//! Storage keys of DNs: built straight from plain DN text, and the
//! prefix relations (below, parent, depth) a subtree scan relies on.

use super::{escape_value, Dn, KEY_SEPARATOR, MAX_DN_BYTES};
use crate::error::Result;
use crate::matching;

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

/// The bytes that make a DN other than plain `type=value` RDNs (an
/// escape, a hex value, a multi-valued RDN, quotes, old separators, NUL):
/// one load per byte of every bind DN and every candidate's DN.
const NOT_PLAIN: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    let special = *b"\\#+\"<>;\0";
    while i < special.len() {
        t[special[i] as usize] = true;
        i += 1;
    }
    t
};

/// `key_of` for DNs made of plain `type=value` RDNs; `None` for any other
/// form (or an error, which the full parser then names).
fn plain_key(text: &str) -> Option<Vec<u8>> {
    if text.bytes().any(|c| NOT_PLAIN[c as usize]) {
        return None;
    }
    // A parent's own DN (a search's base, most often the parent of what
    // it finds) is among the parents kept.
    if let Some(key) = PARENT_KEYS.with_borrow(|cache| cache.known(text).map(|k| k.as_bytes().to_vec())) {
        return Some(key);
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
    let (attr, normal) = matching::canonical_and_normal(attr, value.as_bytes());
    key.push_str(&attr);
    key.push('=');
    escape_value(&normal, key);
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
    /// The key kept for the parent `text`, if it is kept.
    fn known(&self, text: &str) -> Option<&str> {
        self.kept.iter().find(|(t, _)| &**t == text).map(|(_, key)| &**key)
    }

    /// The parent's key as text, with room for an RDN more.
    fn key(&mut self, parent: &str) -> Option<String> {
        let with_room = |key: &str| {
            let mut out = String::with_capacity(key.len() + 48);
            out.push_str(key);
            out
        };
        if let Some(key) = self.known(parent) {
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

/// The keys of every ancestor of a storage key, its parent first and the
/// root (the empty key) last: what a walk up the tree visits.
pub fn key_ancestors(key: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::successors(key_parent(key), |k| key_parent(k))
}

/// Number of RDNs in a storage key.
pub fn key_depth(key: &[u8]) -> usize {
    if key.is_empty() {
        0
    } else {
        1 + key.iter().filter(|b| **b == KEY_SEPARATOR).count()
    }
}
