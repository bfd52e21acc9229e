//! From entries to replicated changes and back: what a local change sends
//! (`add_of`, `deltas`, `replace_whole`), the state of an entry written
//! before replication was on, and the entry a state shows (`materialize`).

use super::{Change, Delta, EntryState, Record};
use crate::csn::Csn;
use crate::entry::{Attr, Entry};
use crate::error::{Error, Result};
use crate::matching;

/// Attributes the server derives on every server instead of replicating.
const DERIVED: [&str; 1] = ["entryCSN"];

/// An entry's `entryUUID` as 16 bytes.
pub fn uuid_of(entry: &Entry) -> Result<[u8; 16]> {
    let text = entry
        .get("entryUUID")
        .and_then(|a| a.vals.first())
        .ok_or_else(|| Error::other(format!("{}: no entryUUID, so the entry cannot be replicated", entry.dn)))?;
    let uuid = std::str::from_utf8(text).ok().and_then(|t| uuid::Uuid::parse_str(t).ok());
    uuid.map(|u| *u.as_bytes()).ok_or_else(|| Error::other(format!("{}: entryUUID is not a UUID", entry.dn)))
}

fn replicated(name: &str) -> bool {
    !DERIVED.iter().any(|d| matching::same_attr(d, name))
}

/// The replicated attributes of an entry, as an add carries them.
pub fn add_of(entry: &Entry) -> Change {
    let attrs = entry.attrs.iter().filter(|a| replicated(&a.name)).map(|a| (a.name.clone(), a.vals.clone())).collect();
    Change::Add { attrs }
}

/// What a modify changed, value by value: from the entry before and after,
/// so one change never adds and deletes the same value (a Replace is then
/// made whole by `replace_whole`).
pub fn deltas(before: &Entry, after: &Entry) -> Vec<Delta> {
    let mut out = Vec::new();
    let find = |e: &'_ Entry, name: &str| e.attrs.iter().position(|a| a.name.eq_ignore_ascii_case(name));
    for a in after.attrs.iter().filter(|a| replicated(&a.name)) {
        let old = find(before, &a.name).map(|i| &before.attrs[i].vals[..]).unwrap_or(&[]);
        // An attribute the modify left alone (a group's members when its
        // description changed): one comparison, no normalization.
        if old == &a.vals[..] {
            continue;
        }
        // Each value normalized once: linear in the values, not quadratic
        // (a group of 5,000 members took 37 s per modify).
        let norm = matching::normalizer(&a.name);
        let normalized =
            |set: &[Vec<u8>]| set.iter().map(|v| norm(v).into_owned()).collect::<std::collections::HashSet<Vec<u8>>>();
        let (old_set, new_set) = (normalized(old), normalized(&a.vals));
        let added: Vec<Vec<u8>> = a.vals.iter().filter(|v| !old_set.contains(norm(v).as_ref())).cloned().collect();
        let removed: Vec<Vec<u8>> = old.iter().filter(|v| !new_set.contains(norm(v).as_ref())).cloned().collect();
        if !removed.is_empty() && removed.len() == old.len() {
            // Nothing of the old values is left: a clear says it in one stamp.
            out.push(Delta::Clear { attr: a.name.clone() });
        } else if !removed.is_empty() {
            out.push(Delta::Delete { attr: a.name.clone(), values: removed });
        }
        if !added.is_empty() {
            out.push(Delta::Add { attr: a.name.clone(), values: added });
        }
    }
    for a in before.attrs.iter().filter(|a| replicated(&a.name) && find(after, &a.name).is_none()) {
        out.push(Delta::Clear { attr: a.name.clone() });
    }
    out
}

/// A Replace wins over every value stamped before it (as in 389-ds), also
/// over values this server has not seen yet: for each replaced attribute
/// the change says Clear and then adds every value it keeps, instead of
/// the difference `deltas` found.
pub fn replace_whole(deltas: &mut Vec<Delta>, replaced: &[&str], after: &Entry) {
    for name in replaced.iter().filter(|n| replicated(n)) {
        let ours = |d: &Delta| match d {
            Delta::Add { attr, .. } | Delta::Delete { attr, .. } | Delta::Clear { attr } => {
                attr.eq_ignore_ascii_case(name)
            }
        };
        deltas.retain(|d| !ours(d));
        let kept = after.attrs.iter().find(|a| a.name.eq_ignore_ascii_case(name));
        deltas.push(Delta::Clear { attr: kept.map_or(name.to_string(), |a| a.name.clone()) });
        if let Some(a) = kept {
            deltas.push(Delta::Add { attr: a.name.clone(), values: a.vals.clone() });
        }
    }
}

/// The state of an entry that was written before replication was on (or
/// imported): everything it holds, stamped with its `entryCSN`.
pub fn state_of_existing(entry: &Entry) -> EntryState {
    let csn = entry.csn().unwrap_or(Csn { phys_us: 1, ..Csn::default() });
    let mut state = EntryState::default();
    state.merge(&Record { csn, uuid: [0; 16], dn: entry.dn.clone(), change: add_of(entry) });
    state
}

/// The entry a state shows, with its derived `entryCSN` and, for a
/// conflict loser, its conflict DN and marks; `None` when it is deleted.
pub fn materialize(state: &EntryState, uuid: &[u8; 16]) -> Option<Entry> {
    let (_, attrs) = state.visible()?;
    let dn = state.shown_dn(uuid)?;
    let mut attrs: Vec<Attr> = attrs.into_iter().map(|(name, vals)| Attr { name, vals }).collect();
    if let Some((lost, slot)) = state.conflict.as_ref().filter(|_| state.in_conflict()) {
        if let Some(oc) = attrs.iter_mut().find(|a| a.name.eq_ignore_ascii_case("objectClass")) {
            oc.vals.push(b"coredirConflictEntry".to_vec());
        }
        attrs.push(Attr { name: "coredirConflictDN".into(), vals: vec![lost.clone().into_bytes()] });
        attrs.push(Attr { name: "coredirConflictSlot".into(), vals: vec![slot.to_string().into_bytes()] });
    }
    attrs.push(Attr { name: "entryCSN".into(), vals: vec![state.max_csn().to_string().into_bytes()] });
    Some(Entry { dn, attrs })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merge::{decode_state, encode_state};

    #[test]
    fn deltas_say_what_changed_value_by_value() {
        let before = Entry::of("cn=g,dc=x", &[("cn", &["g"]), ("member", &["cn=a", "cn=b"]), ("description", &["d"])]);
        let after = Entry::of("cn=g,dc=x", &[("cn", &["g"]), ("member", &["cn=b", "cn=c"]), ("mail", &["m"])]);
        let v = |s: &str| vec![s.as_bytes().to_vec()];
        assert_eq!(
            deltas(&before, &after),
            vec![
                Delta::Delete { attr: "member".into(), values: v("cn=a") },
                Delta::Add { attr: "member".into(), values: v("cn=c") },
                Delta::Add { attr: "mail".into(), values: v("m") },
                Delta::Clear { attr: "description".into() },
            ]
        );
        // A replace of every value is a clear and an add.
        let after = Entry::of("cn=g,dc=x", &[("cn", &["h"])]);
        let before = Entry::of("cn=g,dc=x", &[("cn", &["g"])]);
        assert_eq!(
            deltas(&before, &after),
            vec![Delta::Clear { attr: "cn".into() }, Delta::Add { attr: "cn".into(), values: v("h") }]
        );
    }

    #[test]
    fn states_round_trip_and_materialize_what_was_written() {
        let e = Entry::of(
            "cn=g,dc=x",
            &[("objectClass", &["groupOfNames"]), ("cn", &["g"]), ("member", &["cn=a,dc=x", "cn=b,dc=x"])],
        );
        let mut s = state_of_existing(&e);
        s.merge(&Record {
            csn: Csn { phys_us: 9, ..Csn::default() },
            uuid: [0; 16],
            dn: e.dn.clone(),
            change: Change::Modify {
                deltas: vec![Delta::Delete { attr: "member".into(), values: vec![b"cn=a,dc=x".to_vec()] }],
            },
        });
        let mut buf = Vec::new();
        encode_state(&s, &mut buf);
        assert_eq!(decode_state(&buf).as_ref(), Some(&s));
        assert_eq!(decode_state(&buf[..buf.len() - 1]), None);
        s.mark_conflict("cn=g,dc=x", 3);
        let mut buf = Vec::new();
        encode_state(&s, &mut buf);
        assert_eq!(decode_state(&buf).as_ref(), Some(&s));
        let shown = materialize(&s, &[0; 16]).unwrap();
        assert!(shown.dn.starts_with("entryUUID=00000000-0000-0000-0000-000000000000+coredirConflictSlot=3,"));
        assert!(shown.has_value("objectClass", b"coredirConflictEntry"));
        assert_eq!(shown.get("member").unwrap().vals, vec![b"cn=b,dc=x".to_vec()]);
        assert_eq!(shown.attrs[0].name, "objectClass");
        assert!(shown.get("entryCSN").is_some());
    }
}
