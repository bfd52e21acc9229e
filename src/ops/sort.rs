//! Server-Side Sort (RFC 2891): the matching entries of a search are
//! collected with their sort keys, ordered with each key's ordering rule,
//! then sent. At most `MAX_SORTED` entries, held in at most
//! `limits.max_sort_bytes`, are sorted (`adminLimitExceeded` past either). Multi-valued attributes sort by their
//! least value, reversed or not; entries without the attribute come last
//! (first when reversed).

use crate::ops::vlv;
use bytes::BytesMut;
use ldap3_proto::control::{LdapControl, ServerSortRequet, ServerSortResult};
use ldap3_proto::LdapResultCode;
use shards::entry::EntryView;
use shards::filter::Names;
use shards::matching::{self, Rule};
use shards::{Error, Result};
use std::cmp::Ordering;

pub const MAX_SORTED: usize = 100_000;

/// The Sort Response control (RFC 2891 §1.2): `attributeType` is `[0]`
/// and only present on failure (ldap3_proto always writes it, untagged).
pub fn response(code: LdapResultCode, attr: Option<&str>) -> LdapControl {
    let mut inner = BytesMut::new();
    crate::ber::put_tlv(&mut inner, 0x0a, &[code as u8]);
    if let Some(a) = attr {
        crate::ber::put_tlv(&mut inner, 0x80, a.as_bytes());
    }
    let mut value = BytesMut::new();
    crate::ber::put_tlv(&mut value, 0x30, &inner);
    LdapControl::Unknown { oid: "1.2.840.113556.1.4.474".into(), criticality: false, value: Some(value.to_vec()) }
}

struct Key {
    attr: Names,
    rule: Rule,
    reverse: bool,
    /// An equality rule named as the ordering rule (`sn:caseIgnoreMatch`):
    /// slapd orders by its matching function, which for string rules
    /// compares normalized values' lengths first, then their bytes.
    by_length: bool,
}

/// Sorted output in the making. Only the first `keep` rows of the order
/// can be sent (the size limit, or the page asked for), so the sorter
/// holds at most twice that many: memory is bounded by what the requester
/// may receive, not by how many entries match.
pub struct Sorter {
    keys: Vec<Key>,
    rows: Vec<(Vec<Option<Vec<u8>>>, BytesMut)>,
    keep: usize,
    /// Rows dropped because `keep` earlier rows sorted before them.
    dropped: usize,
    /// Bytes the rows hold, and the most they may (`limits.max_sort_bytes`).
    bytes: usize,
    max_bytes: usize,
}

/// slapd's `sssvlv-maxkeys` default.
pub const MAX_KEYS: usize = 5;

/// Past this many keys the request is refused (53) before any key is
/// read; up to it, each key is checked (16, 18) before their number.
pub const MAX_KEYS_AT_ONCE: usize = 8 * MAX_KEYS;

/// A sort key's type and ordering rule, or what slapd refuses the key
/// with: noSuchAttribute for a type the schema lacks (or a malformed
/// option, `sn;`), inappropriateMatching when the named rule is unknown,
/// or none is named and the type has no ORDERING rule.
pub fn resolve(attr: &str, rule: Option<&str>) -> std::result::Result<(Names, Rule), LdapResultCode> {
    let names = Names::new(attr).ok_or(LdapResultCode::NoSuchAttribute)?;
    let rule = match rule {
        Some(name) => matching::rule_named(name).map(|i| i.rule),
        None => matching::attr_type(attr).expect("Names resolved it").ordering,
    };
    Ok((names, rule.ok_or(LdapResultCode::InappropriateMatching)?))
}

impl Sorter {
    /// A sorter for the request's keys that keeps the first `keep` rows,
    /// or the sortResult explaining why the results cannot be sorted.
    pub fn new(
        requests: &[ServerSortRequet],
        keep: usize,
        max_bytes: usize,
    ) -> std::result::Result<Sorter, ServerSortResult> {
        let too_many = ServerSortResult { result_code: LdapResultCode::UnwillingToPerform, attribute_type: None };
        // As slapd: each key is checked (an unknown one is 16) before
        // their number is (53); past a few dozen, at once.
        if requests.len() > MAX_KEYS_AT_ONCE {
            return Err(too_many);
        }
        let mut keys = Vec::new();
        for r in requests {
            let (attr, rule) = resolve(&r.attribute_name, r.ordering_rule.as_deref()).map_err(|code| {
                ServerSortResult { result_code: code, attribute_type: Some(r.attribute_name.clone()) }
            })?;
            let by_length = r
                .ordering_rule
                .as_deref()
                .and_then(matching::rule_named)
                .is_some_and(|i| i.usage == matching::Usage::Equality && i.rule != Rule::Integer);
            keys.push(Key { attr, rule, reverse: r.reverse_order, by_length });
        }
        if keys.len() > MAX_KEYS {
            return Err(too_many);
        }
        let max_bytes = if max_bytes == 0 { usize::MAX } else { max_bytes };
        Ok(Sorter { keys, rows: Vec::new(), keep: keep.clamp(1, MAX_SORTED), dropped: 0, bytes: 0, max_bytes })
    }

    /// Takes one entry; a key the requester may not search in this entry
    /// (`searchable`) counts as absent, so its order discloses nothing.
    pub fn push(&mut self, view: &EntryView<'_>, encoded: BytesMut, searchable: &dyn Fn(&Names) -> bool) -> Result<()> {
        if self.rows.len() == MAX_SORTED {
            return Err(Error::new(
                LdapResultCode::AdminLimitExceeded,
                format!("more than {MAX_SORTED} entries to sort; narrow the search"),
            ));
        }
        let keys: Vec<Option<Vec<u8>>> =
            self.keys.iter().map(|k| sort_key(view, k).filter(|_| searchable(&k.attr))).collect();
        self.bytes += row_bytes(&keys, &encoded);
        self.rows.push((keys, encoded));
        if self.rows.len() >= self.keep.saturating_mul(2) {
            self.trim();
        }
        if self.bytes > self.max_bytes {
            return Err(Error::new(
                LdapResultCode::AdminLimitExceeded,
                format!("the entries to sort take more than {} bytes (limits.max_sort_bytes)", self.max_bytes),
            ));
        }
        Ok(())
    }

    /// Sorts and drops every row past the first `keep` (a stable sort:
    /// equal keys keep the order they were found in).
    fn trim(&mut self) {
        let keys = &self.keys;
        self.rows.sort_by(|(a, _), (b, _)| order(keys, a, b));
        if self.rows.len() > self.keep {
            self.dropped += self.rows.len() - self.keep;
            for (keys, encoded) in &self.rows[self.keep..] {
                self.bytes -= row_bytes(keys, encoded);
            }
            self.rows.truncate(self.keep);
        }
    }

    /// The window a Virtual List View request selects (the sorter kept
    /// every row), with its response control; or why it cannot be given.
    pub fn select(
        mut self,
        req: &vlv::Request,
    ) -> std::result::Result<(Vec<BytesMut>, LdapControl), (Error, LdapControl)> {
        self.trim();
        let n = self.rows.len();
        let first = match &req.target {
            vlv::Target::Value(v) => {
                let k = &self.keys[0];
                let Some(key) = k.rule.normalize(v).map(|x| order_key(k, &x)) else {
                    let code = LdapResultCode::InappropriateMatching as u8;
                    return Err(vlv::failure(0, n, code, "the value does not fit the first sort key"));
                };
                let key = Some(key);
                Some(self.rows.iter().position(|(keys, _)| order_by(k, &keys[0], &key) != Ordering::Less).unwrap_or(n))
            }
            vlv::Target::Offset { .. } => None,
        };
        let w = vlv::window(req, n, first)?;
        let rows = self.rows.drain(w.rows).map(|(_, bytes)| bytes).collect();
        Ok((rows, vlv::response(w.target, n, 0)))
    }

    /// The first `keep` encoded entries in order, and how many matched.
    pub fn finish(mut self) -> (Vec<BytesMut>, usize) {
        self.trim();
        let total = self.rows.len() + self.dropped;
        (self.rows.into_iter().map(|(_, bytes)| bytes).collect(), total)
    }
}

/// What one row costs: its entry as encoded and its keys.
fn row_bytes(keys: &[Option<Vec<u8>>], encoded: &BytesMut) -> usize {
    encoded.len() + keys.iter().map(|k| k.as_ref().map_or(0, Vec::len) + 24).sum::<usize>()
}

fn order(keys: &[Key], a: &[Option<Vec<u8>>], b: &[Option<Vec<u8>>]) -> Ordering {
    keys.iter()
        .enumerate()
        .map(|(i, k)| order_by(k, &a[i], &b[i]))
        .find(|o| *o != Ordering::Equal)
        .unwrap_or(Ordering::Equal)
}

/// The order one key gives two rows' values.
fn order_by(k: &Key, a: &Option<Vec<u8>>, b: &Option<Vec<u8>>) -> Ordering {
    // RFC 2891 §2.2: no value sorts above every value, so it comes
    // last, or first when the key is reversed.
    let ord = match (a, b) {
        (Some(x), Some(y)) => x.cmp(y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    };
    if k.reverse {
        ord.reverse()
    } else {
        ord
    }
}

/// The entry's order key for one sort key: its least value, reversed or
/// not (RFC 2891 §2.2: reversing a key reverses the order it gives).
fn sort_key(view: &EntryView<'_>, k: &Key) -> Option<Vec<u8>> {
    view.attrs()
        .filter(|a| k.attr.covers(a.name))
        .flat_map(|a| a.vals())
        .filter_map(|v| k.rule.normalize(v).map(|n| order_key(k, &n)))
        .min()
}

/// A normalized value's key for `k`'s order: the rule's order key, or for
/// an equality rule its length (four bytes, big-endian) and bytes.
fn order_key(k: &Key, normalized: &[u8]) -> Vec<u8> {
    match k.by_length {
        true => [&(normalized.len() as u32).to_be_bytes()[..], normalized].concat(),
        false => k.rule.order_key(normalized).into_owned(),
    }
}
