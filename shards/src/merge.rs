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

mod conflict;
mod entries;
mod record_codec;
mod state_codec;
#[cfg(test)]
mod tests;
pub use conflict::{conflict_dn, conflict_loser, conflict_slot};
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
