//! contextCSN per naming context. slapd keeps one contextCSN per database,
//! on its suffix entry, and operators compare a provider's with each
//! consumer's, suffix by suffix. A store here holds the entries of every
//! naming context, mixed by partition, so with more than one context each
//! commit that records a change (`changelog::store`, a resync's states)
//! also notes its CSN under the context its entry lies in:
//! `X` + partition + context id + server id -> the newest CSN, never
//! lowered. Notes outlive the records they came from (trimming does not
//! touch them), and the partition comes first, as in every `meta` key of a
//! partition (`changelog::meta_partition`), so that resharding, backups and
//! restores move them with their partition.
//!
//! With one naming context nothing is noted: its contextCSN is the
//! changelog's newest CSNs (`changelog::newest`). A server whose contexts
//! change notes what its states hold at its next start (`note_states`).

use crate::csn::Csn;
use crate::dn::{self, Dn};
use crate::error::Result;
use crate::merge::EntryState;
use crate::store::{ReadTxn, Store, Tree, WriteTxn};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The naming contexts whose changes are noted apart: each suffix's key
/// and its id. Empty (nothing noted) with one context.
#[derive(Debug, Clone, Default)]
pub struct Contexts(Arc<[(Vec<u8>, u64)]>);

impl Contexts {
    /// The contexts of these suffix keys, noted apart only when there are
    /// several.
    pub fn new(suffix_keys: Vec<Vec<u8>>) -> Contexts {
        match suffix_keys.len() {
            0 | 1 => Contexts::default(),
            _ => Contexts(suffix_keys.into_iter().map(|k| (k.clone(), id(&k))).collect()),
        }
    }

    /// The contexts of the manifest's suffixes (those it cannot parse are
    /// not served either).
    pub fn of_suffixes(suffixes: &[String]) -> Contexts {
        Contexts::new(suffixes.iter().filter_map(|s| Dn::parse(s).ok()).map(|d| d.key()).collect())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The id of the context an entry with this storage key lies in.
    fn of_key(&self, key: &[u8]) -> Option<u64> {
        self.0.iter().find(|(suffix, _)| key == suffix.as_slice() || dn::key_below(key, suffix)).map(|(_, id)| *id)
    }

    /// The id of the context a DN lies in.
    fn of_dn(&self, dn: &str) -> Option<u64> {
        match self.is_empty() {
            true => None,
            false => self.of_key(&Dn::parse(dn).ok()?.key()),
        }
    }
}

/// A context's id: FNV-1a of its suffix key, stable across versions and
/// across the order the configuration lists the suffixes in.
pub fn id(suffix_key: &[u8]) -> u64 {
    crate::manifest::fnv1a64(suffix_key)
}

const NOTE: u8 = b'X';

fn note_key(partition: u16, context: u64, sid: u16) -> [u8; 13] {
    let mut k = [0u8; 13];
    k[0] = NOTE;
    k[1..3].copy_from_slice(&partition.to_be_bytes());
    k[3..11].copy_from_slice(&context.to_be_bytes());
    k[11..].copy_from_slice(&sid.to_be_bytes());
    k
}

/// Whether a `meta` key is a note of this module (of `partition`).
pub fn is_note(key: &[u8]) -> Option<u16> {
    match key {
        [NOTE, a, b, ..] if key.len() == 13 => Some(u16::from_be_bytes([*a, *b])),
        _ => None,
    }
}

/// Notes a change of the entry at `dn`, stamped `csn`, in a partition.
pub fn note<T: WriteTxn + ?Sized>(txn: &mut T, contexts: &Contexts, partition: u16, dn: &str, csn: Csn) -> Result<()> {
    match contexts.of_dn(dn) {
        Some(context) => raise(txn, note_key(partition, context, csn.sid), csn),
        None => Ok(()),
    }
}

/// Notes every CSN a state holds under the context of its DN (a resync's
/// state).
pub fn note_state<T: WriteTxn + ?Sized>(
    txn: &mut T,
    contexts: &Contexts,
    partition: u16,
    state: &EntryState,
) -> Result<()> {
    let mut notes = BTreeMap::new();
    gather(&mut notes, contexts, partition, state);
    notes.into_iter().try_for_each(|(key, csn)| raise(txn, key, csn))
}

/// Adds what a state holds to `notes`: per note key, the newest CSN.
fn gather(notes: &mut BTreeMap<[u8; 13], Csn>, contexts: &Contexts, partition: u16, state: &EntryState) {
    let Some(context) = state.dn.as_ref().and_then(|(dn, _)| contexts.of_dn(dn)) else { return };
    for csn in state.csns() {
        let slot = notes.entry(note_key(partition, context, csn.sid)).or_insert(csn);
        *slot = (*slot).max(csn);
    }
}

fn raise<T: WriteTxn + ?Sized>(txn: &mut T, key: [u8; 13], csn: Csn) -> Result<()> {
    match txn.get(Tree::Meta, &key)?.and_then(Csn::from_bytes) {
        Some(had) if had >= csn => Ok(()),
        _ => txn.put(Tree::Meta, &key, &csn.to_bytes()),
    }
}

/// Per server id, the newest CSN noted for the context with this suffix
/// key, over every partition of the store.
pub fn newest<T: ReadTxn>(txn: &T, suffix_key: &[u8]) -> Result<Vec<Csn>> {
    let want = id(suffix_key).to_be_bytes();
    let mut by_sid: BTreeMap<u16, Csn> = BTreeMap::new();
    txn.scan(Tree::Meta, &[NOTE], &[NOTE], &mut |k, v| {
        if let (Some(_), Some(csn)) = (is_note(k), Csn::from_bytes(v)) {
            if k[3..11] == want {
                let slot = by_sid.entry(csn.sid).or_insert(csn);
                *slot = (*slot).max(csn);
            }
        }
        true
    })?;
    Ok(by_sid.into_values().collect())
}

/// `meta` key: the contexts (their ids, sorted) by which the states of
/// this store were last noted.
const NOTED: &[u8] = b"contexts_noted";

/// At start, with several contexts and a changelog: notes the CSNs of
/// every state the store keeps, once for each set of contexts (the store
/// may hold changes made while it served one context, or other ones, or
/// by a version that noted none).
pub fn note_states<S: Store>(store: &S, contexts: &Contexts) -> Result<()> {
    let mut ids: Vec<u64> = contexts.0.iter().map(|(_, id)| *id).collect();
    ids.sort_unstable();
    let ids: Vec<u8> = ids.iter().flat_map(|id| id.to_be_bytes()).collect();
    if contexts.is_empty() || store.read()?.get(Tree::Meta, NOTED)? == Some(&ids[..]) {
        return Ok(());
    }
    let mut notes = BTreeMap::new();
    crate::changelog::states(&store.read()?, None, &mut |partition, _, bytes| {
        if let Some(state) = crate::merge::decode_state(bytes) {
            gather(&mut notes, contexts, partition, &state);
        }
        true
    })?;
    let mut txn = store.write()?;
    for (key, csn) in notes {
        raise(&mut txn, key, csn)?;
    }
    txn.put(Tree::Meta, NOTED, &ids)?;
    txn.commit()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merge::{Change, Record};
    use crate::store::{Engine, EngineKind, Options, SyncMode};

    fn csn(us: u64, sid: u16) -> Csn {
        Csn { phys_us: us, sid, ..Csn::default() }
    }

    #[test]
    fn each_context_keeps_its_own_newest_csns() {
        let dir = tempfile::tempdir().unwrap();
        let store = Engine::open(dir.path(), Options::new(EngineKind::Lmdb, SyncMode::Never)).unwrap();
        let (a, b) = (Dn::parse("dc=a").unwrap().key(), Dn::parse("o=b").unwrap().key());
        let contexts = Contexts::new(vec![a.clone(), b.clone()]);
        let mut txn = store.write().unwrap();
        note(&mut txn, &contexts, 3, "cn=x,dc=a", csn(10, 1)).unwrap();
        note(&mut txn, &contexts, 7, "cn=y,dc=a", csn(30, 1)).unwrap();
        note(&mut txn, &contexts, 7, "cn=y,dc=a", csn(20, 1)).unwrap(); // never lowered
        note(&mut txn, &contexts, 3, "O=B", csn(15, 2)).unwrap();
        note(&mut txn, &contexts, 3, "cn=z,dc=c", csn(99, 1)).unwrap(); // in no context
        txn.commit().unwrap();
        let txn = store.read().unwrap();
        assert_eq!(newest(&txn, &a).unwrap(), vec![csn(30, 1)]);
        assert_eq!(newest(&txn, &b).unwrap(), vec![csn(15, 2)]);
        assert_eq!(
            crate::changelog::meta_partition(&note_key(7, id(&a), 1)),
            Some(7),
            "notes move with their partition"
        );
        // One context: nothing is noted (the changelog's newest serve).
        assert!(Contexts::new(vec![a]).of_dn("cn=x,dc=a").is_none());
    }

    #[test]
    fn states_written_before_are_noted_once_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let store = Engine::open(dir.path(), Options::new(EngineKind::Lmdb, SyncMode::Never)).unwrap();
        let mut state = EntryState::default();
        let add = Change::Add { attrs: vec![("cn".into(), vec![b"x".to_vec()])] };
        state.merge(&Record { csn: csn(40, 2), uuid: [1; 16], dn: "cn=x,o=b".into(), change: add });
        let mut buf = Vec::new();
        crate::merge::encode_state(&state, &mut buf);
        let mut txn = store.write().unwrap();
        txn.put(Tree::State, &crate::changelog::state_key(5, &[1; 16]), &buf).unwrap();
        txn.commit().unwrap();
        let b = Dn::parse("o=b").unwrap().key();
        let contexts = Contexts::new(vec![Dn::parse("dc=a").unwrap().key(), b.clone()]);
        note_states(&store, &contexts).unwrap();
        assert_eq!(newest(&store.read().unwrap(), &b).unwrap(), vec![csn(40, 2)]);
    }
}
