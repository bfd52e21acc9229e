//! Attribute indexes, kept beside the entries in each shard's store
//! (back-mdb's `index.c` and `filterindex.c`).
//!
//! One tree, `index`, holds every key of every indexed value of every entry,
//! with an empty value; the entry id ends the key, so one key range lists
//! the candidates for one assertion:
//!
//! - `eq`: `type \0 e normalized-value \0 id` (values cut at `MAX_VALUE`);
//! - `pres`: `type \0 p \0 id`;
//! - `sub`: `type \0 s suffix \0 id` for the suffixes of the normalized
//!   value that start at an even character position (the empty one at
//!   the end included when the length is even), ending in `\x02` and cut
//!   at `SUB_LEN` bytes: half the keys of every suffix, as slapd's
//!   `subany` step of 2. A piece that starts at an even position is a
//!   prefix of a key; one at an odd position has its rest (the piece
//!   without its first character) as a prefix of the next key. So an
//!   `any` or `final` piece is two prefix scans, the piece and its rest
//!   (`final` scans `final\x02`); `initial` starts at 0, one scan (a
//!   superset: the piece may also occur later in a value). The cost
//!   follows the number of matches, not the size of the directory. A value
//!   longer than `SUB_MAX_CHARS` gets one `type \0 s \xFF \0 id` key
//!   instead, which every substring lookup adds to its candidates: keys and
//!   memory per value stay bounded, and long values are still found;
//!   Stores indexed before 2026-12-01 keep every suffix; they still
//!   answer right, their extra keys only widening candidate sets until
//!   `coredir reindex` drops them;
//! - `ordering`: `type \0 o order-key \0 id`, so `>=` and `<=` are range scans;
//! - referral objects (RFC 3296) and aliases (RFC 4512 §2.6): `\x01referral
//!   \0 dn-key \0 id` and `\x01alias \0 dn-key \0 id`, whatever the
//!   configuration, so a search finds those in its scope with one prefix
//!   scan (`Marked::below`); and until a store has held one,
//!   `Marked::may_exist` says so without any lookup.
//!
//! Cut keys make a lookup a superset of the matches; every candidate is
//! checked against the whole filter, so indexes only ever narrow the work.
//! Which attributes are indexed is configuration (`[indexes]`), installed
//! once at start like the schema; the data directory records the indexes
//! it was built with, and `coredir reindex` rebuilds them when that changes.

use crate::entry::Entry;
use crate::error::Result;
use crate::filter::{Names, Node};
use crate::schema;
use crate::store::{ReadTxn, Store, Tree, WriteTxn};
use std::collections::BTreeMap;
use std::sync::OnceLock;

mod marks;
pub(crate) use marks::note_marks;
pub use marks::Marked;

const MAX_VALUE: usize = 256;
/// Long enough to tell `user12345@` from its neighbours; every byte more
/// is paid once per character of every indexed value.
const SUB_LEN: usize = 12;
/// Values longer than this (in characters) get no piece keys but one
/// `LONG` key, which every substring lookup includes: a value costs at
/// most `SUB_MAX_CHARS / 2 + 1` keys of at most `SUB_LEN` bytes, and a
/// piece deep inside a long value is still found (by evaluation).
const SUB_MAX_CHARS: usize = 256;
/// After `type \0 s`: marks a long value (0xFF never occurs in the UTF-8
/// or IA5 values substring rules index).
const LONG: u8 = 0xFF;
const ANCHOR_END: u8 = 0x02;

/// Index types of one attribute.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Kinds {
    pub eq: bool,
    pub pres: bool,
    pub sub: bool,
    pub ordering: bool,
}

/// Which attribute types are indexed, and how, by type key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    by_key: BTreeMap<String, Kinds>,
}

/// The defaults: what an OpenLDAP directory for logins and address books indexes.
pub const DEFAULTS: &[(&str, &str)] = &[
    ("objectClass", "eq"),
    ("uid", "eq,sub"),
    ("cn", "eq,sub"),
    ("sn", "eq,sub"),
    ("mail", "eq,sub"),
    ("member", "eq"),
    ("uniqueMember", "eq"),
    ("memberUid", "eq"),
    ("uidNumber", "eq"),
    ("gidNumber", "eq"),
    ("entryUUID", "eq"),
];

impl Config {
    /// Builds and checks an index configuration: known attribute types,
    /// known index types, and the matching rule each index needs.
    pub fn new<'a>(spec: impl IntoIterator<Item = (&'a str, &'a str)>) -> std::result::Result<Config, String> {
        let schema = schema::get();
        let mut by_key = BTreeMap::new();
        for (attr, kinds) in spec {
            let at = schema.attr(attr).ok_or_else(|| format!("indexes.{attr}: unknown attribute type"))?;
            let mut k = Kinds::default();
            for kind in kinds.split(',').map(str::trim) {
                let (flag, has_rule) = match kind {
                    "eq" | "approx" => (&mut k.eq, at.equality.is_some()),
                    "pres" => (&mut k.pres, true),
                    "sub" => (&mut k.sub, at.substr.is_some()),
                    "ordering" => (&mut k.ordering, at.ordering.is_some()),
                    other => {
                        return Err(format!("indexes.{attr}: unknown index type '{other}' (eq, pres, sub, ordering)"))
                    }
                };
                if !has_rule {
                    return Err(format!("indexes.{attr}: '{kind}' needs a matching rule the attribute type lacks"));
                }
                *flag = true;
            }
            by_key.insert(at.key.clone(), k);
        }
        Ok(Config { by_key })
    }

    /// Whether an equality index covers an attribute whose equality rule
    /// `rule` passes.
    pub fn indexes_equality_by(&self, rule: impl Fn(crate::matching::Rule) -> bool) -> bool {
        let schema = schema::get();
        self.by_key.iter().any(|(key, k)| k.eq && schema.attr(key).and_then(|at| at.equality).is_some_and(&rule))
    }

    pub fn defaults() -> Config {
        Config::new(DEFAULTS.iter().copied()).expect("the default indexes are valid")
    }

    /// A stable description, recorded in the data directory's manifest.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        for (key, k) in &self.by_key {
            let kinds: Vec<&str> = [("eq", k.eq), ("pres", k.pres), ("sub", k.sub), ("ordering", k.ordering)]
                .iter()
                .filter(|(_, on)| *on)
                .map(|(n, _)| *n)
                .collect();
            parts.push(format!("{key} {}", kinds.join(",")));
        }
        parts.join("; ")
    }

    fn kinds(&self, key: &str) -> Option<Kinds> {
        self.by_key.get(key).copied()
    }
}

static CONFIG: OnceLock<Config> = OnceLock::new();

/// The process-wide index configuration (the defaults unless installed).
pub fn config() -> &'static Config {
    CONFIG.get_or_init(Config::defaults)
}

pub fn install(c: Config) -> std::result::Result<(), String> {
    CONFIG.set(c).map_err(|_| "the index configuration was already in use".to_string())
}

fn head(key: &str, kind: u8) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 40);
    k.extend_from_slice(key.as_bytes());
    k.push(0);
    k.push(kind);
    k
}

/// Every index key of an entry (without the id), sorted.
pub fn entry_keys(entry: &Entry, out: &mut Vec<Vec<u8>>) {
    for mark in Marked::ALL {
        if entry.get("objectClass").is_some_and(|oc| oc.vals.iter().any(|v| mark.is_class(v))) {
            if let Ok(key) = crate::dn::key_of(&entry.dn) {
                mark.seen();
                let mut k = mark.key(&key);
                k.push(0);
                out.push(k);
            }
        }
    }
    let schema = schema::get();
    let config = config();
    for a in &entry.attrs {
        let Some(at) = schema.attr(&a.name) else { continue };
        let Some(kinds) = config.kinds(&at.key) else { continue };
        if kinds.pres {
            let mut k = head(&at.key, b'p');
            k.push(0);
            out.push(k);
        }
        for v in &a.vals {
            if let Some(norm) = kinds.eq.then(|| at.equality.and_then(|r| r.normalize(v))).flatten() {
                let mut k = head(&at.key, b'e');
                k.extend_from_slice(&norm[..norm.len().min(MAX_VALUE)]);
                k.push(0);
                out.push(k);
            }
            if let Some(rule) = at.ordering.filter(|_| kinds.ordering) {
                if let Some(norm) = rule.normalize(v) {
                    let ord = rule.order_key(&norm);
                    let mut k = head(&at.key, b'o');
                    k.extend_from_slice(&ord[..ord.len().min(MAX_VALUE)]);
                    k.push(0);
                    out.push(k);
                }
            }
            if let Some(norm) = at.substr.filter(|_| kinds.sub).and_then(|r| r.normalize(v)) {
                sub_keys(&at.key, &norm, out);
            }
        }
    }
    out.sort();
    out.dedup();
}

fn sub_keys(key: &str, norm: &[u8], out: &mut Vec<Vec<u8>>) {
    let piece = |from: &[u8]| {
        let mut k = head(key, b's');
        k.reserve_exact(SUB_LEN + 2);
        let take = from.len().min(SUB_LEN);
        k.extend_from_slice(&from[..take]);
        if take < SUB_LEN {
            k.push(ANCHOR_END);
        }
        k.push(0);
        k
    };
    // Suffixes start at character boundaries (not UTF-8 continuation
    // bytes), every second one; the end counts as a position.
    let starts = (0..=norm.len()).filter(|i| norm.get(*i).is_none_or(|b| b & 0xC0 != 0x80));
    if starts.clone().nth(SUB_MAX_CHARS + 1).is_some() {
        let mut k = head(key, b's');
        k.extend_from_slice(&[LONG, 0]);
        out.push(k);
        return;
    }
    for i in starts.step_by(2) {
        out.push(piece(&norm[i..]));
    }
}

/// `piece` without its first character.
fn rest(piece: &[u8]) -> &[u8] {
    let next = (1..piece.len()).find(|i| piece[*i] & 0xC0 != 0x80).unwrap_or(piece.len());
    &piece[next..]
}

pub fn add<T: WriteTxn>(txn: &mut T, entry: &Entry, id: &[u8]) -> Result<()> {
    let mut ks = Vec::new();
    entry_keys(entry, &mut ks);
    for mut k in ks {
        k.extend_from_slice(id);
        txn.put(Tree::Index, &k, b"")?;
    }
    Ok(())
}

pub fn remove<T: WriteTxn>(txn: &mut T, entry: &Entry, id: &[u8]) -> Result<()> {
    let mut ks = Vec::new();
    entry_keys(entry, &mut ks);
    for mut k in ks {
        k.extend_from_slice(id);
        txn.delete(Tree::Index, &k)?;
    }
    Ok(())
}

/// Moves an entry's index keys from `old` to `new` (a modify): only the
/// keys that differ are written.
pub fn update<T: WriteTxn>(txn: &mut T, old: &Entry, new: &Entry, id: &[u8]) -> Result<()> {
    let (mut before, mut after) = (Vec::new(), Vec::new());
    entry_keys(old, &mut before);
    entry_keys(new, &mut after);
    for k in before.iter().filter(|k| after.binary_search(k).is_err()) {
        let mut k = k.clone();
        k.extend_from_slice(id);
        txn.delete(Tree::Index, &k)?;
    }
    for k in after.iter().filter(|k| before.binary_search(k).is_err()) {
        let mut k = k.clone();
        k.extend_from_slice(id);
        txn.put(Tree::Index, &k, b"")?;
    }
    Ok(())
}

/// A candidate from an index: an entry id.
pub type Candidate = [u8; 8];

/// Index keys one term of a filter may read for its candidates: past it
/// the term is broad (every entry in scope is a candidate, as slapd's
/// back-mdb turns an ID list past 2^16 ids into a range).
pub const MAX_TERM_KEYS: usize = 1 << 15;
/// Index keys (and seeks) a search's lookup may read in one store, in all
/// its terms together: past it what is left is broad. The lookup is one
/// step of the reactor and holds 8 bytes per key read, so this bounds
/// both (an anonymous OR of a thousand one-letter substrings over 100,000
/// entries read a billion keys and held gigabytes, the shard frozen).
pub const MAX_STORE_KEYS: usize = 1 << 17;
/// Keys each term of an AND may read in a first pass: a narrow term (a
/// uid, a mail) decides without a broad one (objectClass) read in full.
const PROBE_KEYS: usize = 64;

/// What a store's indexes say of a filter's entries.
#[derive(Debug, PartialEq)]
pub enum Found {
    /// These ids, sorted (a superset of the matching entries).
    Ids(Vec<Candidate>),
    /// No index answers the filter (it depends on the filter alone).
    Unindexed,
    /// Indexed, but for more entries than a lookup may read
    /// (`MAX_TERM_KEYS`, `MAX_STORE_KEYS`): walk the scope.
    Broad,
}

/// Candidates for a compiled filter from this store's indexes, sorted, or
/// `None` when the filter cannot be answered from them (the caller scans);
/// read whole, however many (for lookups of one value: `lookup` bounds a
/// search's).
pub fn candidates<T: ReadTxn>(txn: &T, filter: &Node) -> Result<Option<Vec<Candidate>>> {
    Ok(match lookup(txn, filter, &std::cell::Cell::new(usize::MAX), usize::MAX)? {
        Found::Ids(ids) => Some(ids),
        Found::Unindexed | Found::Broad => None,
    })
}

/// A search's candidates in one store: at most `keys` index keys read in
/// all, each term at most `MAX_TERM_KEYS`.
pub fn candidates_within<T: ReadTxn>(txn: &T, filter: &Node, keys: usize) -> Result<Found> {
    lookup(txn, filter, &std::cell::Cell::new(keys), MAX_TERM_KEYS)
}

/// An AND's running intersection this small is tested entry by entry
/// rather than narrowed by reading its further terms' keys.
const FEW: usize = 8;

fn lookup<T: ReadTxn>(txn: &T, filter: &Node, left: &std::cell::Cell<usize>, per_term: usize) -> Result<Found> {
    let config = config();
    let indexed = |attr: &Names, f: fn(Kinds) -> bool| attr.keys().all(|k| config.kinds(k).is_some_and(f));
    let new_term = || Term { search: left, term: per_term };
    let found = |ids: Option<Vec<Candidate>>| ids.map_or(Found::Broad, Found::Ids);
    Ok(match filter {
        Node::Undefined => Found::Ids(Vec::new()),
        // The guard only narrows: the assertion's candidates are a superset.
        Node::Guarded(_, inner) => lookup(txn, inner, left, per_term)?,
        Node::Equal { .. } | Node::AnyOf { .. } => match filter.equalities() {
            Some((attr, values)) if indexed(attr, |k| k.eq) => {
                let mut term = new_term();
                let mut all = Vec::new();
                for value in values {
                    let v = &value[..value.len().min(MAX_VALUE)];
                    let Some(ids) = union(txn, attr, b'e', &mut term, |p| {
                        p.extend_from_slice(v);
                        p.push(0);
                    })?
                    else {
                        return Ok(Found::Broad);
                    };
                    all.extend(ids);
                }
                if values.len() > 1 {
                    all.sort_unstable();
                    all.dedup();
                }
                Found::Ids(all)
            }
            _ => Found::Unindexed,
        },
        Node::Present(attr) if indexed(attr, |k| k.pres) => {
            found(union(txn, attr, b'p', &mut new_term(), |p| p.push(0))?)
        }
        // The `sub` index holds pieces under the type's own rule; an
        // extensible match with another rule is evaluated, not looked up.
        Node::Substrings { attr, rule, initial, any, last }
            if indexed(attr, |k| k.sub) && attr.substr() == Some(*rule) =>
        {
            let (piece, at_start) = best_piece(initial.as_deref(), any, last.as_deref());
            let mut term = new_term();
            let mut scan = |piece: &[u8]| {
                union(txn, attr, b's', &mut term, |p| p.extend_from_slice(&piece[..piece.len().min(SUB_LEN)]))
            };
            let mut found = Vec::new();
            let pieces = [Some(piece.as_slice()), (!at_start).then(|| rest(&piece)), Some(&[LONG, 0][..])];
            for piece in pieces.into_iter().flatten() {
                match scan(piece)? {
                    Some(ids) => found.extend(ids),
                    None => return Ok(Found::Broad),
                }
            }
            found.sort_unstable();
            found.dedup();
            Found::Ids(found)
        }
        Node::Order { attr, key, greater, .. } if indexed(attr, |k| k.ordering) => {
            found(range(txn, attr, &key[..key.len().min(MAX_VALUE)], *greater, &mut new_term())?)
        }
        Node::And(fs) => {
            let mut best: Option<Vec<Candidate>> = None;
            let mut broad = false;
            let few = |best: &Option<Vec<Candidate>>| best.as_ref().is_some_and(|b| b.len() <= FEW);
            // First each term within a few keys, then those that needed
            // more, in full, while the intersection is not yet small.
            let mut wider = Vec::new();
            for f in fs {
                if few(&best) {
                    break;
                }
                let probe = std::cell::Cell::new(PROBE_KEYS.min(left.get()));
                let found = lookup(txn, f, &probe, per_term)?;
                left.set(left.get() - (PROBE_KEYS.min(left.get()) - probe.get()));
                match found {
                    Found::Ids(c) => best = Some(intersect(best, c)),
                    Found::Broad => wider.push(f),
                    Found::Unindexed => {}
                }
            }
            for f in wider {
                if few(&best) {
                    break;
                }
                match lookup(txn, f, left, per_term)? {
                    Found::Ids(c) => best = Some(intersect(best, c)),
                    Found::Broad => broad = true,
                    Found::Unindexed => {}
                }
            }
            match (best, broad) {
                (Some(ids), _) => Found::Ids(ids),
                (None, true) => Found::Broad,
                (None, false) => Found::Unindexed,
            }
        }
        Node::Or(fs) if !fs.is_empty() => {
            let mut all = Vec::new();
            let mut broad = false;
            for f in fs {
                match lookup(txn, f, left, per_term)? {
                    Found::Ids(c) if !broad => all.extend(c),
                    Found::Ids(_) => {}
                    // Broad is the search's to walk, unless a later term
                    // is no index's at all: read on (with no keys left,
                    // each indexed term is broad at once).
                    Found::Broad => {
                        broad = true;
                        all = Vec::new();
                    }
                    Found::Unindexed => return Ok(Found::Unindexed),
                }
            }
            if broad {
                return Ok(Found::Broad);
            }
            all.sort_unstable();
            all.dedup();
            Found::Ids(all)
        }
        _ => Found::Unindexed,
    })
}

/// The ids of two sorted sets both hold (`None`: the first is everything).
fn intersect(best: Option<Vec<Candidate>>, c: Vec<Candidate>) -> Vec<Candidate> {
    match best {
        None => c,
        Some(b) => {
            let (mut small, large) = if b.len() <= c.len() { (b, c) } else { (c, b) };
            small.retain(|id| large.binary_search(id).is_ok());
            small
        }
    }
}

/// The keys one term may still read.
struct Term<'a> {
    search: &'a std::cell::Cell<usize>,
    term: usize,
}

impl Term<'_> {
    /// Counts one key read; false once either bound is spent.
    fn take(&mut self) -> bool {
        if self.term == 0 || self.search.get() == 0 {
            return false;
        }
        self.term -= 1;
        self.search.set(self.search.get() - 1);
        true
    }
}

/// Whether entry `id` of this store matches `filter`, from its equality
/// index alone, for a filter the index decides exactly: one equality item
/// or an OR set of them, on an indexed type named alone (`Names::sole_key`),
/// every value shorter than the cut. A point lookup per value, where
/// evaluating reads every value of the entry: a base search of a group of
/// a million members for one `member` costs one lookup. `None`: evaluate.
/// Not with sled, whose index key and entry are read at different moments
/// (a write between them would answer for an entry no longer so), and not
/// for sets of more than `DECIDED_SET` values (a lookup each, where the
/// evaluation costs a binary search per stored value).
pub fn decides<T: ReadTxn>(txn: &T, filter: &Node, id: &[u8]) -> Result<Option<bool>> {
    let Some((key, values)) = exact_equalities(txn, filter) else { return Ok(None) };
    let mut k = head(key, b'e');
    let at = k.len();
    for v in values {
        k.truncate(at);
        k.extend_from_slice(v);
        k.push(0);
        k.extend_from_slice(id);
        if txn.get(Tree::Index, &k)?.is_some() {
            return Ok(Some(true));
        }
    }
    Ok(Some(false))
}

/// The sole index key and values of a filter the equality index decides
/// exactly in `txn` (`decides`).
fn exact_equalities<'f, T: ReadTxn>(txn: &T, filter: &'f Node) -> Option<(&'static str, &'f [Vec<u8>])> {
    const DECIDED_SET: usize = 16;
    let (attr, values) = filter.equalities().filter(|(_, v)| v.len() <= DECIDED_SET)?;
    let key = attr.sole_key().filter(|k| config().kinds(k).is_some_and(|k| k.eq))?;
    (txn.snapshot() && values.iter().all(|v| v.len() < MAX_VALUE)).then_some((key, values))
}

/// `decides` from the filter's `candidates` in the same `txn`, without a
/// lookup: a subtree search's base, whose store's candidates the walk
/// reads anyway. `None` where `decides` would not decide, or for a set
/// too big to scan.
pub fn decides_among<T: ReadTxn>(txn: &T, filter: &Node, candidates: &[Candidate], id: &[u8]) -> Option<bool> {
    const SCANNED: usize = 64;
    exact_equalities(txn, filter)?;
    (candidates.len() <= SCANNED).then(|| candidates.iter().any(|c| c.as_slice() == id))
}

/// Entries bigger than this (bytes of attributes) have their filter's
/// equality items answered by the index (`decided_items`).
const DECIDE_ABOVE: usize = 64 << 10;
/// Most equality items decided per entry (each up to 16 lookups).
const DECIDED_ITEMS: usize = 64;

/// Every equality item of `filter` the index decides for entry `id` (as
/// `decides` does for a whole filter), for `filter::with_decided`; only
/// for an entry bigger than `DECIDE_ABOVE` (`size`), where a lookup per
/// item is cheaper than a test per value: a group of a million members.
pub fn decided_items<T: ReadTxn>(txn: &T, filter: &Node, id: &[u8], size: usize) -> Result<Vec<(usize, bool)>> {
    if size <= DECIDE_ABOVE {
        return Ok(Vec::new());
    }
    let mut items = Vec::new();
    filter.equality_items(false, &mut items);
    // Bounded work: past this many items the filter is evaluated as it is
    // (within `limits.max_filter_tests`), not looked up item by item.
    if items.len() > DECIDED_ITEMS {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for (item, negated) in items {
        match decides(txn, item, id)? {
            // The index holds only values that have a normal form: where the
            // entry has others, "not found" is Undefined, not false, which
            // differs under a NOT.
            Some(false) if negated => {}
            Some(b) => out.push((item as *const Node as usize, b)),
            None => {}
        }
    }
    Ok(out)
}

/// The most selective piece of a substring assertion, as a `sub` key
/// prefix, and whether it is the `initial` piece (which starts at 0).
fn best_piece(initial: Option<&[u8]>, any: &[Vec<u8>], last: Option<&[u8]>) -> (Vec<u8>, bool) {
    let mut options: Vec<(Vec<u8>, bool)> = any.iter().map(|a| (a.clone(), false)).collect();
    options.extend(initial.map(|i| (i.to_vec(), true)));
    if let Some(l) = last {
        let mut p = l.to_vec();
        p.push(ANCHOR_END);
        options.push((p, false));
    }
    options.into_iter().max_by_key(|(p, _)| p.len()).unwrap_or_default()
}

/// The ids under one key prefix for the type and each of its subtypes;
/// `None` once `term` is spent.
fn union<T: ReadTxn>(
    txn: &T,
    attr: &Names,
    kind: u8,
    term: &mut Term<'_>,
    finish: impl Fn(&mut Vec<u8>),
) -> Result<Option<Vec<Candidate>>> {
    let mut out = Vec::new();
    let mut spent = false;
    for key in attr.keys() {
        // The seek counts as a key: terms that find nothing cost too.
        if !term.take() {
            return Ok(None);
        }
        let mut prefix = head(key, kind);
        finish(&mut prefix);
        txn.scan(Tree::Index, &prefix, &prefix, &mut |k, _| {
            if !term.take() {
                spent = true;
                return false;
            }
            if let Some(id) = k.len().checked_sub(8).filter(|at| *at >= prefix.len()).map(|at| &k[at..]) {
                out.push(id.try_into().expect("8 bytes"));
            }
            true
        })?;
        if spent {
            return Ok(None);
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(Some(out))
}

/// The ids whose order key is `>= bound` (or `<= bound`); `None` once
/// `term` is spent.
fn range<T: ReadTxn>(
    txn: &T,
    attr: &Names,
    bound: &[u8],
    greater: bool,
    term: &mut Term<'_>,
) -> Result<Option<Vec<Candidate>>> {
    let mut out = Vec::new();
    let mut spent = false;
    for key in attr.keys() {
        if !term.take() {
            return Ok(None);
        }
        let prefix = head(key, b'o');
        let mut from = prefix.clone();
        if greater {
            from.extend_from_slice(bound);
        }
        txn.scan(Tree::Index, &prefix, &from, &mut |k, _| {
            let Some(end) = k.len().checked_sub(9).filter(|e| *e >= prefix.len()) else { return true };
            if !greater && &k[prefix.len()..end] > bound {
                return false;
            }
            if !term.take() {
                spent = true;
                return false;
            }
            out.push(k[end + 1..].try_into().expect("8 bytes"));
            true
        })?;
        if spent {
            return Ok(None);
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(Some(out))
}

/// Entries indexed per write transaction by `rebuild`.
const REINDEX_BATCH: usize = 10_000;

/// Clears the store's index tree and indexes every entry again, in
/// batches (`coredir reindex`, offline, like slapindex).
pub fn rebuild<S: Store>(store: &S) -> Result<usize> {
    let mut txn = store.write()?;
    txn.clear(Tree::Index)?;
    txn.commit()?;
    let mut done = 0;
    let mut after: Option<Vec<u8>> = None;
    loop {
        let mut txn = store.write()?;
        let mut batch: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(REINDEX_BATCH);
        let from = after.clone().unwrap_or_default();
        txn.scan(Tree::Id2entry, b"", &from, &mut |id, bytes| {
            if after.as_deref() != Some(id) {
                batch.push((id.to_vec(), bytes.to_vec()));
            }
            batch.len() < REINDEX_BATCH
        })?;
        if batch.is_empty() {
            return Ok(done);
        }
        for (id, bytes) in &batch {
            add(&mut txn, &Entry::decode(bytes)?, id)?;
        }
        txn.commit()?;
        done += batch.len();
        after = batch.pop().map(|(id, _)| id);
    }
}

#[cfg(test)]
mod property;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_checks() {
        assert!(Config::new([("uid", "eq,sub,pres")]).is_ok());
        assert!(Config::new([("uidNumber", "ordering")]).is_ok());
        let err = |spec: (&str, &str)| Config::new([spec]).unwrap_err();
        assert!(err(("nope", "eq")).contains("unknown attribute type"));
        assert!(err(("uid", "fuzzy")).contains("unknown index type"));
        assert!(err(("homeDirectory", "sub")).contains("needs a matching rule"));
        assert_eq!(Config::new([("commonName", "eq"), ("UID", "sub,eq")]).unwrap().describe(), "cn eq; uid eq,sub");
    }

    #[test]
    fn sub_keys_keep_every_second_suffix() {
        let parts = |value: &[u8]| {
            let mut out = Vec::new();
            sub_keys("cn", value, &mut out);
            out.iter().map(|k| k[4..k.len() - 1].to_vec()).collect::<Vec<_>>()
        };
        assert_eq!(parts(b"abc"), vec![b"abc\x02".to_vec(), b"c\x02".to_vec()]);
        assert_eq!(parts(b"ab"), vec![b"ab\x02".to_vec(), b"\x02".to_vec()], "the end of an even value");
        let wide = "é".repeat(40);
        assert_eq!(parts(wide.as_bytes()).len(), 21, "every second character, and the end");
        assert!(parts(wide.as_bytes()).iter().all(|k| k.len() <= SUB_LEN));
        assert_eq!(rest("éa".as_bytes()), b"a");
        assert_eq!(rest(b"a"), b"");
    }

    /// A long value costs a bounded number of bounded keys (issue 17: a
    /// 32 KiB `cn` grew the server by 317 MB), not one per position with
    /// the whole suffix behind it.
    #[test]
    fn a_long_value_has_a_bounded_number_of_short_keys() {
        let mut out = Vec::new();
        sub_keys("cn", &vec![b'a'; 32 * 1024], &mut out);
        assert!(out.len() <= SUB_MAX_CHARS / 2 + 1, "{} keys", out.len());
        let bytes: usize = out.iter().map(|k| k.capacity()).sum();
        assert!(bytes <= out.len() * 64, "{bytes} bytes held by {} keys", out.len());
        let mut short = Vec::new();
        sub_keys("cn", &vec![b'a'; 200], &mut short);
        assert!(short.iter().all(|k| k.capacity() <= 64), "pieces of a value below the limit are short too");
    }
}
