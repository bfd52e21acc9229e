//! Two entries that claim one DN: which one gives it up, and where it is
//! shown meanwhile.

use super::EntryState;
use crate::csn::Csn;

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
