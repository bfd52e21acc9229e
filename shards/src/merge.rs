//! The replicated state of an entry and the merge that makes two servers
//! converge (mirror mode; see DESIGN.md and research/replication.md §7.7).
//!
//! An entry's `EntryState` keeps a CSN for everything a change can touch:
//! - each value: when it was last added and last deleted (it is present
//!   when its add is newer than both its delete and its attribute's clear);
//! - each attribute: when it was last cleared (a Replace or a Delete of
//!   the whole attribute clears it at its CSN; a Replace's new values are
//!   added at the same CSN and survive it);
//! - the DN: a last-writer-wins register (modify-DN);
//! - the entry: when it was added and, once deleted, the tombstone's CSN.
//!
//! `merge` joins a `Record` into the state by taking the newer stamp of
//! each, so applying records twice or in any order gives the same state;
//! `visible` derives the entry clients see from it. The rules:
//! - single-valued attributes: the newest value wins;
//! - multi-valued attributes: per value, so concurrent additions of
//!   different members to one group both survive;
//! - a delete is final: a tombstoned entry stays deleted, whatever older
//!   or newer modifications arrive after it (kanidm's one-way street).
//!
//! Two entries that claim one DN (the same DN added on both sides) are a
//! matter between entries, decided by `conflict_loser` where entries are
//! stored.

use crate::csn::Csn;
use crate::matching;
use std::collections::BTreeMap;

mod entries;
mod state_codec;
pub use entries::{add_of, deltas, materialize, replace_whole, state_of_existing, uuid_of};
pub use state_codec::{decode_state, encode_state};

/// One replicated change to one entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub csn: Csn,
    /// The entry's `entryUUID`: its identity (the DN is an attribute).
    pub uuid: [u8; 16],
    /// The entry's DN before the change (after it, for an add): where a
    /// receiver finds it, since DNs place entries in partitions.
    pub dn: String,
    pub change: Change,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// A new entry with its whole content, attributes in order.
    Add {
        attrs: Vec<(String, Vec<Vec<u8>>)>,
    },
    /// Value-level changes, in order.
    Modify {
        deltas: Vec<Delta>,
    },
    /// A modify-DN: the new DN, and the value changes that came with it
    /// (the new RDN's values, the old one's with `deleteoldrdn`). Logged in
    /// the old DN's partition; each server moves the entry's state to the
    /// new DN's partition itself (`moves.rs`).
    Rename {
        to: String,
        deltas: Vec<Delta>,
    },
    Delete,
    /// The entry lost its DN (the record's `dn`) to an older add: shown
    /// at its conflict DN (`conflict_dn`) with this slot. Logged by the
    /// server that saw both entries live, so that a server that never
    /// did (the winner was deleted there before the loser arrived) marks
    /// it too.
    Conflict {
        slot: u32,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub enum Delta {
    Add {
        attr: String,
        values: Vec<Vec<u8>>,
    },
    Delete {
        attr: String,
        values: Vec<Vec<u8>>,
    },
    /// Removes every value older than the change: an LDAP Replace is
    /// `Clear` then `Add`, a Delete without values is `Clear`.
    Clear {
        attr: String,
    },
}

/// An entry as clients see it: its DN and its attributes with their values.
pub type Visible = (String, Vec<(String, Vec<Vec<u8>>)>);

#[derive(Debug, Clone, PartialEq, Default)]
pub struct EntryState {
    /// The add's CSN (zero until the add has been seen).
    pub created: Csn,
    /// The DN and the CSN that set it (`None` until the add has been seen).
    pub dn: Option<(String, Csn)>,
    /// The tombstone: once set, the entry is gone for good.
    pub deleted: Option<Csn>,
    /// Set where an older entry holds the DN this one was added with: the
    /// DN it lost and the slot of its conflict DN (`conflict_dn`). Both
    /// servers find the same and set the same.
    pub conflict: Option<(String, u32)>,
    /// Attributes by lower-case stored name.
    pub attrs: BTreeMap<String, AttrState>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AttrState {
    /// The attribute's name as the entry shows it.
    pub name: String,
    /// The first add's CSN and its position in that change (the earliest
    /// wins, so both sides agree): where the attribute sits among those
    /// held since the same change (`held_since` comes first).
    pub order: (Csn, u16),
    /// The last `Clear`.
    pub cleared: Csn,
    /// Values by normalized form.
    pub values: BTreeMap<Vec<u8>, ValueState>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ValueState {
    /// The value as last added (its normalized form is the map's key).
    pub value: Vec<u8>,
    pub added: Csn,
    /// Its position among the values of the change that added it, so that
    /// values keep the order they were given in.
    pub pos: u32,
    pub deleted: Csn,
}

impl ValueState {
    /// A change clears an attribute before it adds (an LDAP Replace), so
    /// an add survives a clear with the same CSN. One change never adds
    /// and deletes the same value (`deltas` are computed from the entry
    /// before and after it).
    fn present(&self, cleared: Csn) -> bool {
        self.added > self.deleted && self.added >= cleared
    }

    /// When the value stopped being held: its delete or the attribute's
    /// clear, whichever came first after its add; `None` while held.
    fn held_until(&self, cleared: Csn) -> Option<Csn> {
        let deleted = Some(self.deleted).filter(|d| *d >= self.added);
        let cleared = Some(cleared).filter(|c| *c > self.added);
        deleted.into_iter().chain(cleared).min()
    }
}

/// The stamps every write of slapd's replaces (`slap_mods_opattrs`).
const STAMPS: [&str; 2] = ["modifiersName", "modifyTimestamp"];

impl AttrState {
    /// `held_since`, except that a stamp whose value the entry's newest
    /// change replaced stays where it was before that change when that
    /// change was a rename (`renamed`: its CSN). slapd's syncrepl consumer
    /// compares a renamed entry with its own copy, made before the
    /// change: had the stamp moved behind the old RDN's attribute, that
    /// attribute would sit a place earlier than in the copy, which the
    /// consumer takes as the old RDN value deleted. The consumer moves the
    /// stamp as it applies the rename; from the next change on, the stamp
    /// is placed where that left it.
    fn placed_since(&self, renamed: Option<Csn>) -> Csn {
        let since = self.held_since();
        let Some(newest) = renamed.filter(|n| *n == since) else { return since };
        if !STAMPS.iter().any(|s| s.eq_ignore_ascii_case(&self.name)) {
            return since;
        }
        // The value it held before: its add is where that value began.
        let before = self.values.values().map(|v| v.added).filter(|a| *a < newest && *a != Csn::default()).max();
        before.unwrap_or(since)
    }

    /// Since when the attribute has held a value without a break: the
    /// change that last gave it a value when it had none. It places the
    /// attribute in its entry as slapd does, which appends an attribute
    /// that lost every value and got one again (a replace, a rename that
    /// drops the old RDN value) at the end. slapd's syncrepl consumer
    /// depends on it: it takes a renamed entry's old RDN attribute found
    /// at another position than its own copy holds it as a sign that the
    /// old RDN value was deleted, and deletes it. A value deleted in the
    /// change that adds another leaves a break, as an old RDN value does.
    /// The consumer also replaces (so moves) `objectClass` when a class is
    /// added, and an attribute without an equality rule at any change: for
    /// those, such a change is a break too.
    fn held_since(&self) -> Csn {
        let none = Csn::default();
        let (mut since, mut newest_add, mut newest) = (None::<Csn>, none, self.cleared);
        // Spans of values held once and no more: (until, from).
        let mut ended: Vec<(Csn, Csn)> = Vec::new();
        for v in self.values.values().filter(|v| v.added != none) {
            (newest_add, newest) = (newest_add.max(v.added), newest.max(v.added).max(v.deleted));
            match v.held_until(self.cleared) {
                None => since = Some(since.map_or(v.added, |s| s.min(v.added))),
                Some(until) if until > v.added => ended.push((until, v.added)),
                Some(_) => {}
            }
        }
        let Some(mut since) = since else { return none };
        // Newest end first: a span ending after the run began joins it
        // (and may reach back further); the first that ends before it, or
        // as it began, is a break, and so is every older one.
        ended.sort_unstable_by(|x, y| y.cmp(x));
        for (until, from) in ended {
            if until <= since {
                break;
            }
            since = since.min(from);
        }
        if self.name.eq_ignore_ascii_case("objectClass") {
            since = since.max(newest_add);
        } else if newest > since
            && crate::schema::get().attr(&self.name).is_some_and(|at| at.equality_or_dn().is_none())
        {
            since = since.max(newest);
        }
        since
    }
}

impl EntryState {
    /// Joins one record into the state.
    pub fn merge(&mut self, rec: &Record) {
        let csn = rec.csn;
        match &rec.change {
            Change::Add { attrs } => {
                self.created = self.created.max(csn);
                self.set_dn(&rec.dn, csn);
                for (i, (name, values)) in attrs.iter().enumerate() {
                    self.add_values(name, values, csn, i as u16);
                }
            }
            Change::Modify { deltas } => self.apply_deltas(deltas, csn),
            Change::Rename { to, deltas } => {
                self.apply_deltas(deltas, csn);
                self.set_dn(to, csn);
            }
            Change::Delete => self.deleted = Some(self.deleted.map_or(csn, |d| d.max(csn))),
            Change::Conflict { slot } => self.mark_conflict(&rec.dn, *slot),
        }
    }

    fn apply_deltas(&mut self, deltas: &[Delta], csn: Csn) {
        for (i, d) in deltas.iter().enumerate() {
            match d {
                Delta::Add { attr, values } => self.add_values(attr, values, csn, i as u16),
                Delta::Delete { attr, values } => {
                    let a = self.attr(attr, csn, i as u16);
                    let norm = matching::normalizer(attr);
                    for v in values {
                        let slot = a.values.entry(norm(v).into_owned()).or_insert_with(|| ValueState {
                            value: v.clone(),
                            added: Csn::default(),
                            pos: 0,
                            deleted: Csn::default(),
                        });
                        slot.deleted = slot.deleted.max(csn);
                        // Never added: the spelling must not depend on arrival order.
                        if slot.added == Csn::default() && v < &slot.value {
                            slot.value = v.clone();
                        }
                    }
                }
                Delta::Clear { attr } => {
                    let a = self.attr(attr, csn, i as u16);
                    a.cleared = a.cleared.max(csn);
                }
            }
        }
    }

    /// Joins another copy of the same entry's state into this one (the
    /// state moving with a modify-DN, `moves.rs`): the newer stamp of each,
    /// as `merge` takes, so joining the states of any two sets of records
    /// gives the state of all of them.
    pub fn join(&mut self, other: &EntryState) {
        self.created = self.created.max(other.created);
        if let Some((dn, csn)) = &other.dn {
            self.set_dn(dn, *csn);
        }
        self.deleted = self.deleted.max(other.deleted);
        if other.conflict > self.conflict {
            self.conflict = other.conflict.clone();
        }
        for theirs in other.attrs.values() {
            let (at, pos) = theirs.order;
            let a = self.attr(&theirs.name, at, pos);
            a.cleared = a.cleared.max(theirs.cleared);
            for (norm, v) in &theirs.values {
                let Some(slot) = a.values.get_mut(norm) else {
                    a.values.insert(norm.clone(), v.clone());
                    continue;
                };
                let rank = |v: &ValueState| (v.added, std::cmp::Reverse(v.pos), std::cmp::Reverse(v.value.clone()));
                if rank(v) > rank(slot) {
                    (slot.added, slot.pos, slot.value) = (v.added, v.pos, v.value.clone());
                }
                slot.deleted = slot.deleted.max(v.deleted);
            }
        }
    }

    fn set_dn(&mut self, dn: &str, csn: Csn) {
        // CSNs are unique; the DN breaks a tie all the same, so that no
        // order of arrival can matter.
        if self.dn.as_ref().is_none_or(|(cur, at)| (csn, dn) > (*at, cur.as_str())) {
            self.dn = Some((dn.to_string(), csn));
        }
    }

    fn attr(&mut self, name: &str, csn: Csn, pos: u16) -> &mut AttrState {
        let stored = matching::stored_name(name);
        let a = self.attrs.entry(stored.to_ascii_lowercase()).or_insert_with(|| AttrState {
            name: stored.to_string(),
            order: (csn, pos),
            cleared: Csn::default(),
            values: BTreeMap::new(),
        });
        a.order = a.order.min((csn, pos));
        if *stored < *a.name {
            a.name = stored.into_owned();
        }
        a
    }

    fn add_values(&mut self, name: &str, values: &[Vec<u8>], csn: Csn, pos: u16) {
        let a = self.attr(name, csn, pos);
        let norm = matching::normalizer(name);
        for (i, v) in values.iter().enumerate() {
            let slot = a.values.entry(norm(v).into_owned()).or_insert_with(|| ValueState {
                value: v.clone(),
                added: Csn::default(),
                pos: 0,
                deleted: Csn::default(),
            });
            // The newest add also decides the value's spelling ("Foo" or
            // "foo") and place.
            let i = i as u32;
            if (csn, std::cmp::Reverse(i), std::cmp::Reverse(v))
                > (slot.added, std::cmp::Reverse(slot.pos), std::cmp::Reverse(&slot.value))
            {
                slot.added = csn;
                slot.pos = i;
                slot.value = v.clone();
            }
        }
    }

    /// Whether the entry exists: added and not deleted.
    pub fn is_live(&self) -> bool {
        self.deleted.is_none() && self.created != Csn::default()
    }

    /// The newest CSN in the state: the entry's `entryCSN`.
    pub fn max_csn(&self) -> Csn {
        self.csns().max().unwrap_or_default()
    }

    /// Every stamp the state holds (creation, DN, tombstone, clears,
    /// values added and deleted); unset ones left out.
    pub fn csns(&self) -> impl Iterator<Item = Csn> + '_ {
        let entry = [Some(self.created), self.deleted, self.dn.as_ref().map(|(_, c)| *c)].into_iter().flatten();
        let attrs = self
            .attrs
            .values()
            .flat_map(|a| std::iter::once(a.cleared).chain(a.values.values().flat_map(|v| [v.added, v.deleted])));
        entry.chain(attrs).filter(|c| *c != Csn::default())
    }

    /// What clients see: the DN and the present values, attributes in
    /// their agreed order (see `held_since`), values oldest first; `None`
    /// for a tombstone or an entry whose add has not arrived yet.
    pub fn visible(&self) -> Option<Visible> {
        if !self.is_live() {
            return None;
        }
        let (dn, dn_set) = self.dn.as_ref()?;
        // The newest change when it renamed the entry (`placed_since`).
        let newest = self.max_csn();
        let renamed = (*dn_set == newest).then_some(newest);
        let mut attrs: Vec<(Csn, &AttrState, Vec<&ValueState>)> = self
            .attrs
            .values()
            .filter_map(|a| {
                let mut present: Vec<&ValueState> = a.values.values().filter(|v| v.present(a.cleared)).collect();
                if present.is_empty() {
                    return None;
                }
                present.sort_by(|x, y| (x.added, x.pos, &x.value).cmp(&(y.added, y.pos, &y.value)));
                if matching::attr_type(&a.name).is_some_and(|t| t.single_value) {
                    // Last writer wins: concurrent adds leave the newest.
                    present.drain(..present.len().saturating_sub(1));
                }
                Some((a.placed_since(renamed), a, present))
            })
            .collect();
        attrs.sort_by(|x, y| (x.0, x.1.order, &x.1.name).cmp(&(y.0, y.1.order, &y.1.name)));
        let attrs = attrs
            .into_iter()
            .map(|(_, a, present)| (a.name.clone(), present.into_iter().map(|v| v.value.clone()).collect()))
            .collect();
        Some((dn.clone(), attrs))
    }
}

fn bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

fn values(out: &mut Vec<u8>, vs: &[Vec<u8>]) {
    out.extend_from_slice(&(vs.len() as u32).to_le_bytes());
    vs.iter().for_each(|v| bytes(out, v));
}

fn encode_deltas(out: &mut Vec<u8>, deltas: &[Delta]) {
    out.extend_from_slice(&(deltas.len() as u32).to_le_bytes());
    for d in deltas {
        let (tag, attr, vs): (u8, &str, &[Vec<u8>]) = match d {
            Delta::Add { attr, values } => (0, attr, values),
            Delta::Delete { attr, values } => (1, attr, values),
            Delta::Clear { attr } => (2, attr, &[]),
        };
        out.push(tag);
        bytes(out, attr.as_bytes());
        values(out, vs);
    }
}

/// The wire and changelog form of a record: a version byte, the CSN and
/// UUID, then the change, with `u32` little-endian lengths.
impl Record {
    const VERSION: u8 = 1;

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(Self::VERSION);
        out.extend_from_slice(&self.csn.to_bytes());
        out.extend_from_slice(&self.uuid);
        bytes(out, self.dn.as_bytes());
        match &self.change {
            Change::Add { attrs } => {
                out.push(0);
                out.extend_from_slice(&(attrs.len() as u32).to_le_bytes());
                for (name, vs) in attrs {
                    bytes(out, name.as_bytes());
                    values(out, vs);
                }
            }
            Change::Modify { deltas } => {
                out.push(1);
                encode_deltas(out, deltas);
            }
            Change::Rename { to, deltas } => {
                out.push(2);
                bytes(out, to.as_bytes());
                encode_deltas(out, deltas);
            }
            Change::Delete => out.push(3),
            Change::Conflict { slot } => {
                out.push(4);
                out.extend_from_slice(&slot.to_le_bytes());
            }
        }
    }

    pub fn decode(mut b: &[u8]) -> Option<Record> {
        fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
            let (head, rest) = (b.get(..n)?, b.get(n..)?);
            *b = rest;
            Some(head)
        }
        fn len(b: &mut &[u8]) -> Option<usize> {
            Some(u32::from_le_bytes(take(b, 4)?.try_into().ok()?) as usize)
        }
        fn bytes(b: &mut &[u8]) -> Option<Vec<u8>> {
            let n = len(b)?;
            take(b, n).map(<[u8]>::to_vec)
        }
        fn text(b: &mut &[u8]) -> Option<String> {
            String::from_utf8(bytes(b)?).ok()
        }
        fn values(b: &mut &[u8]) -> Option<Vec<Vec<u8>>> {
            let n = len(b)?;
            // Every value takes at least its 4-byte length: bound the allocation.
            (n <= b.len() / 4).then_some(())?;
            (0..n).map(|_| bytes(b)).collect()
        }
        fn deltas(b: &mut &[u8]) -> Option<Vec<Delta>> {
            let n = len(b)?;
            (n <= b.len() / 9).then_some(())?;
            (0..n)
                .map(|_| {
                    let tag = take(b, 1)?[0];
                    let (attr, values) = (text(b)?, values(b)?);
                    match tag {
                        0 => Some(Delta::Add { attr, values }),
                        1 => Some(Delta::Delete { attr, values }),
                        2 => Some(Delta::Clear { attr }),
                        _ => None,
                    }
                })
                .collect()
        }
        if take(&mut b, 1)? != [Self::VERSION] {
            return None;
        }
        let csn = Csn::from_bytes(take(&mut b, 16)?)?;
        let uuid: [u8; 16] = take(&mut b, 16)?.try_into().ok()?;
        let dn = text(&mut b)?;
        let change = match take(&mut b, 1)?[0] {
            0 => {
                let n = len(&mut b)?;
                (n <= b.len() / 8).then_some(())?;
                let attrs = (0..n).map(|_| Some((text(&mut b)?, values(&mut b)?))).collect::<Option<_>>()?;
                Change::Add { attrs }
            }
            1 => Change::Modify { deltas: deltas(&mut b)? },
            2 => Change::Rename { to: text(&mut b)?, deltas: deltas(&mut b)? },
            3 => Change::Delete,
            4 => Change::Conflict { slot: len(&mut b)? as u32 },
            _ => return None,
        };
        b.is_empty().then_some(Record { csn, uuid, dn, change })
    }
}

/// Of two entries that claim the same DN, the one that must give it up:
/// the later add (the CSN orders, the UUID breaks a tie), on both servers.
pub fn conflict_loser<'a>(a: (&'a [u8; 16], Csn), b: (&'a [u8; 16], Csn)) -> &'a [u8; 16] {
    if (a.1, a.0) > (b.1, b.0) {
        a.0
    } else {
        b.0
    }
}

/// The DN a conflict loser is renamed to: `entryUUID=<uuid>+
/// coredirConflictSlot=<slot>` under the same parent, unique, recognisable,
/// and (by the choice of `slot`, see `conflict_slot`) in the same partition
/// as the DN it lost, so that its owner does not change.
pub fn conflict_dn(uuid: &[u8; 16], dn: &str, slot: u32) -> String {
    let uuid = uuid::Uuid::from_bytes(*uuid).hyphenated().to_string();
    match split_first_rdn(dn) {
        (_, Some(parent)) => format!("entryUUID={uuid}+coredirConflictSlot={slot},{parent}"),
        (_, None) => format!("entryUUID={uuid}+coredirConflictSlot={slot}"),
    }
}

/// The smallest slot whose conflict DN falls in `partition` (`place` maps
/// a DN to its partition; both servers partition alike, the handshake
/// makes sure of it).
pub fn conflict_slot(uuid: &[u8; 16], dn: &str, partition: u32, place: impl Fn(&str) -> Option<u32>) -> u32 {
    (0..u32::MAX).find(|&slot| place(&conflict_dn(uuid, dn, slot)) == Some(partition)).unwrap_or(0)
}

impl EntryState {
    /// Marks the entry as the loser of a DN conflict.
    pub fn mark_conflict(&mut self, lost: &str, slot: u32) {
        let mark = Some((lost.to_string(), slot));
        if mark > self.conflict {
            self.conflict = mark;
        }
    }

    /// Whether the entry is shown at its conflict DN: it holds the DN it
    /// lost (renamed away since, it is an ordinary entry again).
    pub fn in_conflict(&self) -> bool {
        matches!((&self.dn, &self.conflict), (Some((dn, _)), Some((lost, _))) if dn == lost)
    }

    /// Where the entry is shown: its DN, or its conflict DN while it holds
    /// the DN it lost.
    pub fn shown_dn(&self, uuid: &[u8; 16]) -> Option<String> {
        let (dn, _) = self.dn.as_ref()?;
        match &self.conflict {
            Some((lost, slot)) if lost == dn => Some(conflict_dn(uuid, dn, *slot)),
            _ => Some(dn.clone()),
        }
    }
}

/// The first RDN of a DN and the rest, split at the first unescaped comma.
fn split_first_rdn(dn: &str) -> (&str, Option<&str>) {
    let mut escaped = false;
    for (i, c) in dn.char_indices() {
        match c {
            '\\' if !escaped => escaped = true,
            ',' if !escaped => return (&dn[..i], Some(&dn[i + 1..])),
            _ => escaped = false,
        }
    }
    (dn, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::seq::SliceRandom;
    use rand::{Rng, SeedableRng};

    fn csn(t: u64, sid: u16) -> Csn {
        Csn { phys_us: t, logical: 0, sid, partition: 0 }
    }

    fn add(t: u64, sid: u16, dn: &str, attrs: &[(&str, &[&str])]) -> Record {
        let attrs =
            attrs.iter().map(|(n, vs)| (n.to_string(), vs.iter().map(|v| v.as_bytes().to_vec()).collect())).collect();
        Record { csn: csn(t, sid), uuid: [1; 16], dn: dn.into(), change: Change::Add { attrs } }
    }

    fn modify(t: u64, sid: u16, deltas: Vec<Delta>) -> Record {
        Record { csn: csn(t, sid), uuid: [1; 16], dn: "cn=g,dc=x".into(), change: Change::Modify { deltas } }
    }

    fn vals(vs: &[&str]) -> Vec<Vec<u8>> {
        vs.iter().map(|v| v.as_bytes().to_vec()).collect()
    }

    fn state(records: &[Record]) -> EntryState {
        let mut s = EntryState::default();
        records.iter().for_each(|r| s.merge(r));
        s
    }

    fn group() -> Record {
        add(10, 1, "cn=g,dc=x", &[("objectClass", &["groupOfNames"]), ("cn", &["g"]), ("member", &["cn=a,dc=x"])])
    }

    #[test]
    fn concurrent_member_additions_both_survive() {
        let a = modify(20, 1, vec![Delta::Add { attr: "member".into(), values: vals(&["cn=b,dc=x"]) }]);
        let b = modify(20, 2, vec![Delta::Add { attr: "member".into(), values: vals(&["cn=c,dc=x"]) }]);
        let s = state(&[group(), a, b]);
        let (_, attrs) = s.visible().unwrap();
        assert_eq!(attrs[2], ("member".to_string(), vals(&["cn=a,dc=x", "cn=b,dc=x", "cn=c,dc=x"])));
    }

    #[test]
    fn single_valued_attributes_keep_the_last_writer() {
        let e = add(10, 1, "uid=u,dc=x", &[("objectClass", &["inetOrgPerson"]), ("displayName", &["one"])]);
        let replace = |t, sid, v: &str| {
            modify(
                t,
                sid,
                vec![
                    Delta::Clear { attr: "displayName".into() },
                    Delta::Add { attr: "displayName".into(), values: vals(&[v]) },
                ],
            )
        };
        let (later, earlier) = (replace(30, 1, "three"), replace(20, 2, "two"));
        let s = state(&[e.clone(), later.clone(), earlier.clone()]);
        assert_eq!(s.visible().unwrap().1[1].1, vals(&["three"]));
        assert_eq!(s, state(&[earlier, e, later]));
        // Concurrent plain adds to a single-valued attribute: the newest stays.
        let x = modify(40, 1, vec![Delta::Add { attr: "employeeNumber".into(), values: vals(&["1"]) }]);
        let y = modify(40, 2, vec![Delta::Add { attr: "employeeNumber".into(), values: vals(&["2"]) }]);
        let s = state(&[add(10, 1, "uid=u,dc=x", &[("objectClass", &["inetOrgPerson"])]), x, y]);
        assert_eq!(s.visible().unwrap().1[1].1, vals(&["2"]));
    }

    /// As slapd orders an entry: an attribute that lost every value and got
    /// one again goes last (a replace, a rename dropping its old RDN value,
    /// a delete and an add apart); one that always held a value stays.
    #[test]
    fn an_attribute_emptied_and_filled_again_goes_last() {
        let names = |s: &EntryState| s.visible().unwrap().1.into_iter().map(|(n, _)| n).collect::<Vec<_>>();
        let person =
            add(10, 1, "uid=a,dc=x", &[("objectClass", &["person"]), ("uid", &["a"]), ("cn", &["a"]), ("sn", &["s"])]);
        let v = |attr: &str, v: &str| (attr.to_string(), vals(&[v]));
        let (add_v, del_v) = (
            |(attr, values): (String, Vec<Vec<u8>>)| Delta::Add { attr, values },
            |(attr, values): (String, Vec<Vec<u8>>)| Delta::Delete { attr, values },
        );
        // Another value kept all along, or added before the last one went: in place.
        let kept = [modify(20, 1, vec![add_v(v("uid", "b"))]), modify(30, 1, vec![del_v(v("uid", "a"))])];
        let s = state(&[&[person.clone()][..], &kept].concat());
        assert_eq!(names(&s), ["objectClass", "uid", "cn", "sn"]);
        // The last value deleted by the change that adds another: last,
        // whatever the order within the change (slapd's consumer replaces it).
        let swapped = modify(20, 1, vec![add_v(v("cn", "c")), del_v(v("cn", "a"))]);
        assert_eq!(names(&state(&[person.clone(), swapped])), ["objectClass", "uid", "sn", "cn"]);
        // The old RDN value dropped as the new one came: last.
        let renamed = modify(20, 1, vec![Delta::Clear { attr: "uid".into() }, add_v(v("uid", "b"))]);
        assert_eq!(names(&state(&[person.clone(), renamed.clone()])), ["objectClass", "cn", "sn", "uid"]);
        // Deleted, then added later: last; then kept by a rename that adds a value: still last.
        let apart = [modify(20, 1, vec![del_v(v("cn", "a"))]), modify(30, 1, vec![add_v(v("cn", "b"))])];
        let s = state(&[&[person.clone()][..], &apart, &[modify(40, 1, vec![add_v(v("cn", "c"))])]].concat());
        assert_eq!(names(&s), ["objectClass", "uid", "sn", "cn"]);
        // A class added moves objectClass (slapd's consumer replaces it); one deleted does not.
        let class = |t, d: Delta| modify(t, 1, vec![d]);
        let s = state(&[person.clone(), class(20, add_v(v("objectClass", "extensibleObject")))]);
        assert_eq!(names(&s), ["uid", "cn", "sn", "objectClass"]);
        let s = state(&[
            add(10, 1, "uid=a,dc=x", &[("objectClass", &["person", "extensibleObject"]), ("uid", &["a"])]),
            class(20, del_v(v("objectClass", "extensibleObject"))),
        ]);
        assert_eq!(names(&s), ["objectClass", "uid"]);
        // In any order of arrival.
        let mut shuffled = vec![person, renamed];
        shuffled.reverse();
        assert_eq!(names(&state(&shuffled)), ["objectClass", "cn", "sn", "uid"]);
    }

    #[test]
    fn a_delete_is_final() {
        let del = Record { csn: csn(20, 1), uuid: [1; 16], dn: "cn=g,dc=x".into(), change: Change::Delete };
        let older = modify(15, 2, vec![Delta::Add { attr: "member".into(), values: vals(&["cn=z,dc=x"]) }]);
        let newer = modify(25, 2, vec![Delta::Add { attr: "member".into(), values: vals(&["cn=z,dc=x"]) }]);
        assert_eq!(state(&[group(), del.clone(), older.clone(), newer.clone()]).visible(), None);
        assert_eq!(state(&[newer, del, group(), older]).visible(), None);
    }

    #[test]
    fn values_compare_by_matching_rule_and_the_newest_spelling_wins() {
        let a = modify(20, 1, vec![Delta::Add { attr: "cn".into(), values: vals(&["Foo"]) }]);
        let b = modify(21, 2, vec![Delta::Add { attr: "CN".into(), values: vals(&["foo"]) }]);
        let s = state(&[group(), a, b]);
        assert_eq!(s.visible().unwrap().1[1], ("cn".to_string(), vals(&["g", "foo"])));
    }

    #[test]
    fn conflicts_pick_the_later_add_and_rename_it() {
        let (a, b) = ([1u8; 16], [2u8; 16]);
        assert_eq!(conflict_loser((&a, csn(10, 1)), (&b, csn(11, 2))), &b);
        assert_eq!(conflict_loser((&b, csn(11, 2)), (&a, csn(10, 1))), &b);
        assert_eq!(
            conflict_dn(&a, "cn=x\\,y,ou=p,dc=x", 7),
            "entryUUID=01010101-0101-0101-0101-010101010101+coredirConflictSlot=7,ou=p,dc=x"
        );
        let slot = conflict_slot(&a, "cn=x,dc=x", 3, |dn| Some(dn.len() as u32 % 5));
        assert_eq!(conflict_dn(&a, "cn=x,dc=x", slot).len() % 5, 3);
    }

    #[test]
    fn records_round_trip_and_garbage_is_refused() {
        let recs = [
            group(),
            modify(
                5,
                2,
                vec![
                    Delta::Clear { attr: "cn".into() },
                    Delta::Add { attr: "cn".into(), values: vals(&["x", "y"]) },
                    Delta::Delete { attr: "member".into(), values: vals(&["cn=a,dc=x"]) },
                ],
            ),
            Record {
                csn: csn(6, 1),
                uuid: [9; 16],
                dn: "cn=g,dc=x".into(),
                change: Change::Rename {
                    to: "cn=h,dc=x".into(),
                    deltas: vec![Delta::Add { attr: "cn".into(), values: vals(&["h"]) }],
                },
            },
            Record { csn: csn(7, 1), uuid: [9; 16], dn: "cn=h,dc=x".into(), change: Change::Delete },
            Record { csn: csn(8, 2), uuid: [9; 16], dn: "cn=h,dc=x".into(), change: Change::Conflict { slot: 70000 } },
        ];
        for r in &recs {
            let mut buf = Vec::new();
            r.encode(&mut buf);
            assert_eq!(Record::decode(&buf).as_ref(), Some(r));
            for cut in 0..buf.len() {
                assert_eq!(Record::decode(&buf[..cut]), None);
            }
            buf.push(0);
            assert_eq!(Record::decode(&buf), None);
        }
        assert_eq!(Record::decode(&[1; 40]), None);
    }

    /// Random histories of adds, modifies, renames and deletes from two
    /// servers, applied in random orders and with duplicates: every order
    /// ends in the same state and the same visible entry.
    #[test]
    fn any_order_of_any_history_converges() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
        let attrs = ["member", "description", "cn", "displayName", "mail"];
        let values = ["a", "b", "B", "c", "d"];
        for _ in 0..500 {
            let mut history = vec![add(1, 1, "cn=g,dc=x", &[("objectClass", &["groupOfNames"]), ("cn", &["g"])])];
            for _ in 0..rng.gen_range(1..12) {
                let (t, sid) = (rng.gen_range(2..40), rng.gen_range(1..3));
                let attr = attrs.choose(&mut rng).unwrap().to_string();
                let (from, n) = (rng.gen_range(0..4), rng.gen_range(1..3));
                let some = vals(&values[from..(from + n).min(values.len())]);
                let dn = "cn=g,dc=x".to_string();
                let change = match rng.gen_range(0..11) {
                    0 => Change::Delete,
                    10 => Change::Conflict { slot: rng.gen_range(0..3) },
                    1 => Change::Rename {
                        to: format!("cn=g{},dc=x", rng.gen_range(0..3)),
                        deltas: vec![Delta::Add { attr: "cn".into(), values: some }],
                    },
                    2..=4 => Change::Modify { deltas: vec![Delta::Add { attr, values: some }] },
                    5..=6 => Change::Modify { deltas: vec![Delta::Delete { attr, values: some }] },
                    _ => Change::Modify {
                        deltas: vec![Delta::Clear { attr: attr.clone() }, Delta::Add { attr, values: some }],
                    },
                };
                history.push(Record { csn: csn(t, sid), uuid: [1; 16], dn, change });
            }
            let want = state(&history);
            // Any split of the history, merged apart and then joined
            // (a state moving between partitions), gives the same.
            let cut = rng.gen_range(0..=history.len());
            let mut joined = state(&history[..cut]);
            joined.join(&state(&history[cut..]));
            assert_eq!(joined, want, "history {history:?} joined at {cut}");
            for _ in 0..6 {
                let mut order = history.clone();
                order.extend(history.iter().filter(|_| rng.gen_bool(0.3)).cloned());
                order.shuffle(&mut rng);
                let got = state(&order);
                assert_eq!(got, want, "history {history:?}");
                assert_eq!(got.visible(), want.visible());
            }
        }
    }
}
