//! Entries: the owned form used by writes and the zero-copy view used by reads.
//!
//! `id2entry` stores an entry as its DN followed by its attributes in the
//! order they were written, each name followed by its values: a search
//! walks this layout straight from the storage snapshot into the response
//! without building an intermediate entry.
//!
//! Layout (little-endian): `u32 dn_len, dn, u16 n_attrs`, then per
//! attribute `u8 name_len, name, u32 n_vals`, then per value `u32 len, bytes`.

use crate::error::{Error, Result};
use crate::matching;
use ldap3_proto::LdapResultCode;
use std::collections::{hash_map, HashMap, HashSet};

#[derive(Debug, Clone, PartialEq)]
pub struct Attr {
    pub name: String,
    pub vals: Vec<Vec<u8>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub dn: String,
    pub attrs: Vec<Attr>,
}

/// The most attributes, and the longest attribute description, an entry
/// may have: the stored layout holds a `u16` count (less some room for the
/// server's own stamps, added after the check) and a `u8` name length.
/// More is refused before anything is written, never truncated.
pub const MAX_ATTRS: usize = u16::MAX as usize - 16;
pub const MAX_DESCRIPTION_BYTES: usize = u8::MAX as usize;

/// adminLimitExceeded for a description the stored layout cannot hold.
pub fn description_too_long(name: &str) -> Error {
    Error::new(
        LdapResultCode::AdminLimitExceeded,
        format!("{}: attribute description longer than {MAX_DESCRIPTION_BYTES} bytes", Error::clipped(name)),
    )
}

/// One change of a Modify request (RFC 4511 §4.6).
#[derive(Debug, Clone, PartialEq)]
pub enum Mod {
    Add(Attr),
    Delete(Attr),
    Replace(Attr),
    Increment(Attr),
}

impl Entry {
    pub fn get(&self, name: &str) -> Option<&Attr> {
        let want = matching::AttrName::new(name);
        self.attrs.iter().find(|a| want.is(&a.name))
    }

    /// The entry's `entryCSN`, if it has a valid one.
    pub fn csn(&self) -> Option<crate::csn::Csn> {
        let v = self.get("entryCSN")?.vals.first()?;
        crate::csn::Csn::parse(std::str::from_utf8(v).ok()?)
    }

    fn position(&self, name: &str) -> Option<usize> {
        let want = matching::AttrName::new(name);
        self.attrs.iter().position(|a| want.is(&a.name))
    }

    /// Sets an attribute to exactly these values, keeping its position.
    pub fn set(&mut self, name: &str, vals: Vec<Vec<u8>>) {
        match self.position(name) {
            Some(i) => self.attrs[i].vals = vals,
            None => self.attrs.push(Attr { name: matching::stored_name(name).into_owned(), vals }),
        }
    }

    pub fn remove(&mut self, name: &str) {
        if let Some(i) = self.position(name) {
            self.attrs.remove(i);
        }
    }

    pub fn has_value(&self, name: &str, value: &[u8]) -> bool {
        self.get(name).is_some_and(|a| a.vals.iter().any(|v| matching::values_equal(name, v, value)))
    }

    /// An entry from a request's attribute list, in time linear in its
    /// length however many descriptions it carries or repeats (one add may
    /// hold tens of thousands; `add_values` per description would scan the
    /// entry each time): repeated descriptions are merged, and a value given
    /// twice is refused as `add_values` refuses it.
    pub fn gather(dn: String, attrs: Vec<(String, Vec<Vec<u8>>)>) -> Result<Entry> {
        let mut at: HashMap<String, usize> = HashMap::with_capacity(attrs.len());
        let mut groups: Vec<(String, Vec<Vec<u8>>)> = Vec::with_capacity(attrs.len());
        for (name, vals) in attrs {
            match at.entry(matching::description_key(&name)) {
                hash_map::Entry::Occupied(e) => groups[*e.get()].1.extend(vals),
                hash_map::Entry::Vacant(e) => {
                    e.insert(groups.len());
                    groups.push((name, vals));
                }
            }
        }
        let mut entry = Entry { dn, attrs: Vec::with_capacity(groups.len() + 6) };
        for (name, vals) in groups {
            entry.attrs.push(Attr { name: matching::stored_name(&name).into_owned(), vals: Vec::new() });
            entry.extend_at(entry.attrs.len() - 1, &name, vals)?;
        }
        Ok(entry)
    }

    /// Adds values, refusing a value that is already present (compared in
    /// normal form; through a set once there are many: groups carry
    /// thousands of members).
    pub fn add_values(&mut self, name: &str, vals: &[Vec<u8>]) -> Result<()> {
        let i = match self.position(name) {
            Some(i) => i,
            None => {
                self.attrs.push(Attr { name: matching::stored_name(name).into_owned(), vals: Vec::new() });
                self.attrs.len() - 1
            }
        };
        self.extend_at(i, name, vals.to_vec())
    }

    /// `add_values` on the attribute at `i`.
    fn extend_at(&mut self, i: usize, name: &str, vals: Vec<Vec<u8>>) -> Result<()> {
        let norm = matching::normalizer(name);
        let attr = &mut self.attrs[i];
        let dup = |at: usize| {
            Error::new(LdapResultCode::AttributeOrValueExists, format!("{name}: value #{at} provided more than once"))
        };
        if attr.vals.len() + vals.len() <= 8 {
            // Few values (the usual case): pairwise, without a set.
            for v in vals {
                let n = norm(&v);
                if attr.vals.iter().any(|old| norm(old) == n) {
                    return Err(dup(attr.vals.len()));
                }
                drop(n);
                attr.vals.push(v);
            }
            return Ok(());
        }
        let mut seen: HashSet<Vec<u8>> = attr.vals.iter().map(|v| norm(v).into_owned()).collect();
        for v in vals {
            if !seen.insert(norm(&v).into_owned()) {
                return Err(dup(attr.vals.len()));
            }
            attr.vals.push(v);
        }
        Ok(())
    }

    /// Applies the changes of a Modify request in order (all or nothing),
    /// in time linear in the request and the entry however many changes it
    /// holds (a hostile modify may carry a hundred thousand): a run of adds
    /// to one description is one add; attributes are found through a map
    /// once there are many changes; an attribute that loses its last value
    /// is left empty until the end (so positions stay valid), and one added
    /// again after that goes to the end, as removing and appending would.
    pub fn apply(&mut self, mods: &[Mod]) -> Result<()> {
        self.apply_with(mods, false)
    }

    /// `apply`, and with `permissive` (the Permissive Modify control, as
    /// slapd obeys it): values added that the attribute holds, or that an
    /// earlier add of the request gave it, are left out; a delete of an
    /// attribute the entry lacks does nothing, and an increment of one
    /// gives it the increment's value. A delete of a value that a present
    /// attribute lacks still fails, as in slapd.
    pub fn apply_with(&mut self, mods: &[Mod], permissive: bool) -> Result<()> {
        let mut at = Positions::new(self, mods.len());
        let mut i = 0;
        while i < mods.len() {
            match &mods[i] {
                Mod::Add(a) => {
                    if a.vals.is_empty() {
                        return Err(Error::protocol(format!("{}: add with no values", a.name)));
                    }
                    let run = mods[i..]
                        .iter()
                        .map_while(|m| match m {
                            Mod::Add(b) if !b.vals.is_empty() && matching::same_attr(&b.name, &a.name) => Some(b),
                            _ => None,
                        })
                        .collect::<Vec<&Attr>>();
                    let held = at.find(self, &a.name).is_some_and(|p| !self.attrs[p].vals.is_empty());
                    if (held || run.len() > 1) && without_equality(&a.name) {
                        return Err(no_equality("add", &a.name));
                    }
                    let mut vals: Vec<Vec<u8>> = run.iter().flat_map(|b| b.vals.iter().cloned()).collect();
                    if permissive {
                        vals = self.new_values(&at, &a.name, vals);
                    }
                    if !vals.is_empty() {
                        let p = at.find_or_push(self, &a.name);
                        self.extend_at(p, &a.name, vals)?;
                    }
                    i += run.len();
                    continue;
                }
                Mod::Delete(a) if !a.vals.is_empty() && without_equality(&a.name) => {
                    return Err(no_equality("delete", &a.name))
                }
                Mod::Delete(a) if permissive && at.find(self, &a.name).is_none() => {}
                Mod::Delete(a) => self.delete_values(&mut at, a)?,
                Mod::Replace(a) => match (at.find(self, &a.name), a.vals.is_empty()) {
                    (Some(p), true) => {
                        self.attrs[p].vals.clear();
                        at.cleared(&a.name);
                    }
                    (None, true) => {}
                    // In place: a replaced attribute keeps its position.
                    (found, false) => {
                        let p = found.unwrap_or_else(|| at.find_or_push(self, &a.name));
                        self.attrs[p].vals.clear();
                        self.extend_at(p, &a.name, a.vals.clone())?;
                    }
                },
                // As slapd: permissive, an increment of an absent attribute
                // gives it the increment's value.
                Mod::Increment(a) if permissive && at.find(self, &a.name).is_none() => {
                    let p = at.find_or_push(self, &a.name);
                    self.extend_at(p, &a.name, a.vals.clone())?;
                }
                Mod::Increment(a) => self.increment(&at, a)?,
            }
            i += 1;
        }
        self.attrs.retain(|a| !a.vals.is_empty());
        Ok(())
    }

    /// Of `vals`, those the attribute does not hold yet, each once.
    fn new_values(&self, at: &Positions, name: &str, vals: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
        let norm = matching::normalizer(name);
        let held = at.find(self, name).map(|p| self.attrs[p].vals.as_slice()).unwrap_or_default();
        let mut seen: HashSet<Vec<u8>> = held.iter().map(|v| norm(v).into_owned()).collect();
        vals.into_iter().filter(|v| seen.insert(norm(v).into_owned())).collect()
    }

    fn delete_values(&mut self, at: &mut Positions, a: &Attr) -> Result<()> {
        let no_such = || Error::new(LdapResultCode::NoSuchAttribute, format!("{}: no such attribute or value", a.name));
        let i = at.find(self, &a.name).ok_or_else(no_such)?;
        let vals = &mut self.attrs[i].vals;
        // Two values equal under the matching rule (`one`, `ONE`) delete
        // the one stored value, as in slapd: each must match a stored value.
        if a.vals.len() <= 8 {
            let mut hit = vec![false; vals.len()];
            for v in &a.vals {
                let at = vals.iter().position(|old| matching::values_equal(&a.name, old, v)).ok_or_else(no_such)?;
                hit[at] = true;
            }
            let mut k = 0;
            vals.retain(|_| {
                k += 1;
                !hit[k - 1]
            });
        } else {
            // Many values (members leaving a large group): one pass with a set.
            let norm = matching::normalizer(&a.name);
            let mut gone: HashSet<Vec<u8>> = a.vals.iter().map(|v| norm(v).into_owned()).collect();
            vals.retain(|old| !gone.remove(norm(old).as_ref()));
            if !gone.is_empty() {
                return Err(no_such());
            }
        }
        if a.vals.is_empty() || self.attrs[i].vals.is_empty() {
            self.attrs[i].vals.clear();
            at.cleared(&a.name);
        }
        Ok(())
    }

    fn increment(&mut self, at: &Positions, a: &Attr) -> Result<()> {
        let by = parse_int(a.vals.first().map(Vec::as_slice).unwrap_or_default()).ok_or_else(|| {
            Error::new(LdapResultCode::InvalidAttributeSyntax, format!("{}: increment is not an integer", a.name))
        })?;
        let i = at
            .find(self, &a.name)
            .ok_or_else(|| Error::new(LdapResultCode::NoSuchAttribute, format!("{}: no such attribute", a.name)))?;
        // As slapd: only an INTEGER-syntax type increments
        // (constraintViolation); a stored value past 64 bits, or a sum past
        // them, is refused as slapd refuses a value it cannot parse
        // (invalidAttributeSyntax).
        let integer = matching::attr_type(&a.name).is_some_and(|t| t.syntax == "1.3.6.1.4.1.1466.115.121.1.27");
        if !integer {
            return Err(Error::new(
                LdapResultCode::ConstraintViolation,
                format!("{}: increment not supported for the value syntax", a.name),
            ));
        }
        for v in &mut self.attrs[i].vals {
            let sum = parse_int(v).and_then(|n| n.checked_add(by)).ok_or_else(|| {
                Error::new(LdapResultCode::InvalidAttributeSyntax, format!("{}: value out of the 64-bit range", a.name))
            })?;
            *v = sum.to_string().into_bytes();
        }
        Ok(())
    }

    /// Refuses what the stored layout cannot hold (see `MAX_ATTRS`).
    pub fn check_layout(&self) -> Result<()> {
        if self.attrs.len() > MAX_ATTRS {
            return Err(Error::new(
                LdapResultCode::AdminLimitExceeded,
                format!("{}: more than {MAX_ATTRS} attribute descriptions", self.dn),
            ));
        }
        match self.attrs.iter().find(|a| a.name.len() > MAX_DESCRIPTION_BYTES) {
            Some(a) => Err(description_too_long(&a.name)),
            None => Ok(()),
        }
    }

    /// The stored form; fails, writing nothing, when the layout cannot hold
    /// the entry (writes call `check_layout` first, before any change).
    /// The bytes `encode` writes.
    pub fn stored_len(&self) -> usize {
        let values = |a: &Attr| a.vals.iter().map(|v| 4 + v.len()).sum::<usize>();
        4 + self.dn.len() + 2 + self.attrs.iter().map(|a| 1 + a.name.len() + 4 + values(a)).sum::<usize>()
    }

    pub fn encode(&self, out: &mut Vec<u8>) -> Result<()> {
        if self.attrs.len() > u16::MAX as usize || self.attrs.iter().any(|a| a.name.len() > MAX_DESCRIPTION_BYTES) {
            return self.check_layout();
        }
        out.extend_from_slice(&(self.dn.len() as u32).to_le_bytes());
        out.extend_from_slice(self.dn.as_bytes());
        out.extend_from_slice(&(self.attrs.len() as u16).to_le_bytes());
        for a in &self.attrs {
            out.push(a.name.len() as u8);
            out.extend_from_slice(a.name.as_bytes());
            out.extend_from_slice(&(a.vals.len() as u32).to_le_bytes());
            for v in &a.vals {
                out.extend_from_slice(&(v.len() as u32).to_le_bytes());
                out.extend_from_slice(v);
            }
        }
        Ok(())
    }

    pub fn decode(bytes: &[u8]) -> Result<Entry> {
        Entry::decode_view(&EntryView::new(bytes)?)
    }

    pub fn decode_view(view: &EntryView<'_>) -> Result<Entry> {
        Ok(Entry {
            dn: view.dn().to_string(),
            attrs: view
                .attrs()
                .map(|a| Attr { name: a.name.to_string(), vals: a.vals().map(<[u8]>::to_vec).collect() })
                .collect(),
        })
    }
}

/// Where `Entry::apply` finds an attribute: a scan for a few changes, a
/// map keyed by `description_key` for many. An attribute emptied during
/// the request is no longer found (see `apply`).
enum Positions {
    Scan,
    Map(HashMap<String, usize>),
}

impl Positions {
    fn new(entry: &Entry, n_mods: usize) -> Positions {
        if n_mods <= 8 {
            return Positions::Scan;
        }
        let keys = entry.attrs.iter().enumerate().map(|(i, a)| (matching::description_key(&a.name), i));
        Positions::Map(keys.collect())
    }

    fn find(&self, entry: &Entry, name: &str) -> Option<usize> {
        match self {
            Positions::Scan => {
                let want = matching::AttrName::new(name);
                entry.attrs.iter().position(|a| !a.vals.is_empty() && want.is(&a.name))
            }
            Positions::Map(map) => map.get(&matching::description_key(name)).copied(),
        }
    }

    fn find_or_push(&mut self, entry: &mut Entry, name: &str) -> usize {
        if let Some(i) = self.find(entry, name) {
            return i;
        }
        entry.attrs.push(Attr { name: matching::stored_name(name).into_owned(), vals: Vec::new() });
        if let Positions::Map(map) = self {
            map.insert(matching::description_key(name), entry.attrs.len() - 1);
        }
        entry.attrs.len() - 1
    }

    /// The attribute `name` was emptied: later changes no longer find it.
    fn cleared(&mut self, name: &str) {
        if let Positions::Map(map) = self {
            map.remove(&matching::description_key(name));
        }
    }
}

/// An INTEGER value (RFC 4517 §3.3.16: an optional `-`, digits; no `+`,
/// which Rust's parser would take).
pub fn parse_int(v: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(v).ok()?.trim();
    if text.starts_with('+') {
        return None;
    }
    text.parse().ok()
}

/// A borrowed, validated view of an encoded entry.
#[derive(Clone, Copy)]
pub struct EntryView<'a> {
    dn: &'a str,
    attrs: &'a [u8],
    n_attrs: u16,
    /// The attributes already located (`with_table`): a filter of many
    /// terms reads them without walking every value before them each time
    /// (a group of 100,000 members times 1,000 terms is 10^8 steps).
    table: &'a [AttrView<'a>],
}

#[derive(Clone, Copy)]
pub struct AttrView<'a> {
    pub name: &'a str,
    n_vals: u32,
    vals: &'a [u8],
}

/// Whether a known attribute type has no equality rule (`jpegPhoto`,
/// `audio`): its values cannot be told apart, so, as in slapd, one cannot
/// be added beside others nor deleted by value (inappropriateMatching);
/// replacing and deleting the attribute whole work.
fn without_equality(name: &str) -> bool {
    crate::schema::get().attr(name).is_some_and(|at| at.equality_or_dn().is_none())
}

fn no_equality(op: &str, name: &str) -> Error {
    Error::new(LdapResultCode::InappropriateMatching, format!("modify/{op}: {name}: no equality matching rule"))
}

fn corrupt() -> Error {
    Error::other("corrupt entry record in id2entry")
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.buf.len() < n {
            return Err(corrupt());
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
}

/// Stored text as `str`: names and most DNs are ASCII, checked a word at
/// a time inline; `from_utf8` (a call, per character) for the rest.
#[inline]
fn utf8(bytes: &[u8]) -> Result<&str> {
    match bytes.is_ascii() {
        // SAFETY: ASCII is UTF-8.
        true => Ok(unsafe { std::str::from_utf8_unchecked(bytes) }),
        false => std::str::from_utf8(bytes).map_err(|_| corrupt()),
    }
}

impl<'a> EntryView<'a> {
    /// Validates the whole record once, so the iterators below cannot fail.
    pub fn new(bytes: &'a [u8]) -> Result<EntryView<'a>> {
        let mut r = Reader { buf: bytes };
        let dn_len = r.u32()? as usize;
        let dn = utf8(r.take(dn_len)?)?;
        let n_attrs = u16::from_le_bytes(r.take(2)?.try_into().unwrap());
        let attrs = r.buf;
        for _ in 0..n_attrs {
            let name_len = r.take(1)?[0] as usize;
            utf8(r.take(name_len)?)?;
            for _ in 0..r.u32()? {
                let len = r.u32()? as usize;
                r.take(len)?;
            }
        }
        Ok(EntryView { dn, attrs, n_attrs, table: &[] })
    }

    /// Every attribute located once, for `with_table`.
    pub fn attr_table(&self) -> Vec<AttrView<'a>> {
        self.attrs().collect()
    }

    /// This view reading its attributes from `table` (its `attr_table`).
    pub fn with_table<'t>(&self, table: &'t [AttrView<'t>]) -> EntryView<'t>
    where
        'a: 't,
    {
        EntryView { table, ..*self }
    }

    pub fn dn(&self) -> &'a str {
        self.dn
    }

    /// Bytes of the attributes (names and values).
    pub fn size(&self) -> usize {
        self.attrs.len()
    }

    /// How many attributes the entry holds.
    pub fn n_attrs(&self) -> usize {
        self.n_attrs as usize
    }

    pub fn attrs(&self) -> Attrs<'a> {
        let left = if self.table.is_empty() { self.n_attrs } else { 0 };
        Attrs { table: self.table.iter(), buf: self.attrs, left }
    }

    pub fn get(&self, name: &str) -> Option<AttrView<'a>> {
        let want = matching::AttrName::new(name);
        self.attrs().find(|a| want.is(a.name))
    }
}

/// The attributes of an `EntryView`, in stored order.
pub struct Attrs<'a> {
    table: std::slice::Iter<'a, AttrView<'a>>,
    buf: &'a [u8],
    left: u16,
}

impl<'a> Iterator for Attrs<'a> {
    type Item = AttrView<'a>;

    fn next(&mut self) -> Option<AttrView<'a>> {
        if let Some(a) = self.table.next() {
            return Some(*a);
        }
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let buf = self.buf;
        let name_len = buf[0] as usize;
        // Validated in `EntryView::new`.
        let name = unsafe { std::str::from_utf8_unchecked(&buf[1..1 + name_len]) };
        let n_vals = u32::from_le_bytes(buf[1 + name_len..5 + name_len].try_into().unwrap());
        let start = 5 + name_len;
        let mut end = start;
        for _ in 0..n_vals {
            let len = u32::from_le_bytes(buf[end..end + 4].try_into().unwrap()) as usize;
            end += 4 + len;
        }
        self.buf = &buf[end..];
        Some(AttrView { name, n_vals, vals: &buf[start..end] })
    }
}

impl<'a> AttrView<'a> {
    pub fn n_vals(&self) -> usize {
        self.n_vals as usize
    }

    /// The bytes its values take as stored (each with its length), about
    /// what they take on the wire.
    pub fn encoded_len(&self) -> usize {
        self.vals.len()
    }

    pub fn vals(&self) -> Vals<'a> {
        Vals { buf: self.vals, left: self.n_vals }
    }
}

/// The values of one attribute, read in place.
#[derive(Clone)]
pub struct Vals<'a> {
    buf: &'a [u8],
    left: u32,
}

impl<'a> Vals<'a> {
    /// Values laid out by `encode_vals` (for attributes computed at read time).
    pub fn from_encoded(buf: &'a [u8], n: u32) -> Vals<'a> {
        Vals { buf, left: n }
    }
}

/// Lays out values the way `id2entry` does, for `Vals::from_encoded`.
pub fn encode_vals(vals: &[&[u8]], out: &mut Vec<u8>) {
    for v in vals {
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        out.extend_from_slice(v);
    }
}

impl<'a> Iterator for Vals<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.left == 0 || self.buf.len() < 4 {
            return None;
        }
        self.left -= 1;
        let len = u32::from_le_bytes(self.buf[..4].try_into().unwrap()) as usize;
        let v = self.buf.get(4..4 + len)?;
        self.buf = &self.buf[4 + len..];
        Some(v)
    }
}

impl Entry {
    /// An entry from text, for tests: `(name, values)` per attribute.
    #[cfg(test)]
    pub(crate) fn of(dn: &str, attrs: &[(&str, &[&str])]) -> Entry {
        let attr = |(n, vs): &(&str, &[&str])| Attr {
            name: n.to_string(),
            vals: vs.iter().map(|v| v.as_bytes().to_vec()).collect(),
        };
        Entry { dn: dn.into(), attrs: attrs.iter().map(attr).collect() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(name: &str, vals: &[&str]) -> Attr {
        Attr { name: name.into(), vals: vals.iter().map(|v| v.as_bytes().to_vec()).collect() }
    }

    fn sample() -> Entry {
        Entry { dn: "cn=a,dc=x".into(), attrs: vec![attr("objectClass", &["top", "person"]), attr("cn", &["a"])] }
    }

    #[test]
    fn encode_round_trip() {
        let e = sample();
        let mut buf = Vec::new();
        e.encode(&mut buf).unwrap();
        assert_eq!(Entry::decode(&buf).unwrap(), e);
        let v = EntryView::new(&buf).unwrap();
        assert_eq!(v.get("commonName").unwrap().vals().collect::<Vec<_>>(), vec![b"a"]);
        let table = v.attr_table();
        let names = |v: &EntryView| v.attrs().map(|a| (a.name.to_string(), a.vals().count())).collect::<Vec<_>>();
        assert_eq!(names(&v.with_table(&table)), names(&v));
        for cut in 0..buf.len() {
            assert!(EntryView::new(&buf[..cut]).is_err(), "truncated at {cut}");
        }
    }

    /// Many changes at once (the map, runs, sets) give exactly what the
    /// same changes give one by one, order of attributes included.
    #[test]
    fn many_changes_apply_as_one_by_one() {
        let names = ["cn", "CN", "commonName", "description", "description;lang-en", "sn", "telephoneNumber"];
        let mut seed = 7u64;
        let mut next = |n: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        let mut applied = 0;
        for _ in 0..300 {
            // Adds bring fresh values; deletes take back some of them (or a
            // whole attribute); replaces reset: most sequences apply.
            let mut fresh = 0;
            let mut added: Vec<(&str, String)> = Vec::new();
            let mut mods = Vec::new();
            for _ in 0..24 {
                let name = names[next(names.len() as u64) as usize];
                let m = match next(10) {
                    0..=4 => {
                        let vals: Vec<String> =
                            (0..1 + next(10)).map(|_| (fresh += 1, format!("v{fresh}")).1).collect();
                        added.extend(vals.iter().map(|v| (name, v.clone())));
                        Mod::Add(attr(name, &vals.iter().map(String::as_str).collect::<Vec<_>>()))
                    }
                    5..=7 if !added.is_empty() => {
                        let (name, v) = added.swap_remove(next(added.len() as u64) as usize);
                        Mod::Delete(attr(name, &[&v]))
                    }
                    8 => Mod::Delete(attr(name, &[])),
                    _ => Mod::Replace(attr(name, &[&format!("r{}", next(3)), "r9"])),
                };
                mods.push(m);
            }
            let (mut all, mut one) = (sample(), sample());
            let at_once = all.apply(&mods).map_err(|e| e.code);
            let singly = mods.iter().try_for_each(|m| one.apply(std::slice::from_ref(m))).map_err(|e| e.code);
            assert_eq!(at_once, singly, "{mods:?}");
            if at_once.is_ok() {
                assert_eq!(all, one, "{mods:?}");
                applied += 1;
            }
        }
        assert!(applied > 30, "only {applied} sequences applied: the test compares too few outcomes");
    }

    #[test]
    fn modify_semantics() {
        let code = |e: &mut Entry, m: Mod| e.apply(&[m]).map_err(|e| e.code);
        let mut e = sample();
        assert_eq!(code(&mut e, Mod::Add(attr("cn", &["A"]))), Err(LdapResultCode::AttributeOrValueExists));
        assert_eq!(code(&mut e, Mod::Add(attr("sn", &["s"]))), Ok(()));
        assert_eq!(code(&mut e, Mod::Delete(attr("sn", &["t"]))), Err(LdapResultCode::NoSuchAttribute));
        assert_eq!(code(&mut e, Mod::Delete(attr("sn", &["s"]))), Ok(()));
        assert!(e.get("sn").is_none());
        assert_eq!(code(&mut e, Mod::Delete(attr("mail", &[]))), Err(LdapResultCode::NoSuchAttribute));
        assert_eq!(code(&mut e, Mod::Replace(attr("cn", &["b", "c"]))), Ok(()));
        assert_eq!(e.attrs[1], attr("cn", &["b", "c"]));
        assert_eq!(code(&mut e, Mod::Replace(attr("mail", &[]))), Ok(()));
        assert_eq!(code(&mut e, Mod::Replace(attr("uidNumber", &["5"]))), Ok(()));
        assert_eq!(code(&mut e, Mod::Increment(attr("uidNumber", &["2"]))), Ok(()));
        assert_eq!(e.get("uidNumber").unwrap().vals, vec![b"7".to_vec()]);
    }

    #[test]
    fn permissive_modify_leaves_out_held_values_and_absent_attributes() {
        let permissive = |e: &mut Entry, mods: &[Mod]| e.apply_with(mods, true).map_err(|e| e.code);
        let mut e = sample();
        // Held already (in another case), and twice in one request: once.
        let adds = [Mod::Add(attr("cn", &["A", "b"])), Mod::Add(attr("cn", &["B"]))];
        assert_eq!(permissive(&mut e, &adds), Ok(()));
        assert_eq!(e.get("cn").unwrap().vals, vec![b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(permissive(&mut e, &[Mod::Add(attr("cn", &["a"]))]), Ok(()));
        assert_eq!(permissive(&mut e, &[Mod::Delete(attr("mail", &[]))]), Ok(()));
        assert_eq!(permissive(&mut e, &[Mod::Delete(attr("mail", &["x"]))]), Ok(()));
        // As slapd: a value a present attribute lacks is still an error.
        assert_eq!(permissive(&mut e, &[Mod::Delete(attr("cn", &["zzz"]))]), Err(LdapResultCode::NoSuchAttribute));
        assert_eq!(e.attrs.len(), 2, "nothing empty left behind");
        // An increment of an absent attribute gives it the increment's value.
        assert_eq!(permissive(&mut e, &[Mod::Increment(attr("uidNumber", &["3"]))]), Ok(()));
        assert_eq!(e.get("uidNumber").unwrap().vals, vec![b"3".to_vec()]);
        assert_eq!(permissive(&mut e, &[Mod::Increment(attr("uidNumber", &["2"]))]), Ok(()));
        assert_eq!(e.get("uidNumber").unwrap().vals, vec![b"5".to_vec()]);
        // Without the control, nothing changes.
        assert_eq!(
            e.apply(&[Mod::Add(attr("cn", &["a"]))]).map_err(|e| e.code),
            Err(LdapResultCode::AttributeOrValueExists)
        );
    }
}
