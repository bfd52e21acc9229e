//! The write façade: what the server asks of the owners, one method per
//! step. Each sends its write to the owner of the partition it touches
//! (locally or as one mesh message) and waits for the durable result; the
//! steps that span two owners (an entry and its parent's child count) are
//! done here with their undo. No caller outside this crate builds a
//! `WriteOp`.

use crate::changelog::Origin;
use crate::csn::Csn;
use crate::dn::Dn;
use crate::entry::{Entry, Mod};
use crate::merge::{EntryState, Record};
use crate::renames::Intent;
use crate::write::{add_ops, Extras, Moving, Outcome, Parent, Stamp, WriteOp};
use crate::{Result, Shard};

/// A trim of one origin's changelog in one partition (`changelog::trim`).
#[derive(Debug, Clone, Copy)]
pub struct Trim {
    pub partition: u16,
    pub origin: Origin,
    /// The last record that may go.
    pub upto: u64,
    /// Only records older than this (µs since the epoch; `u64::MAX`: any).
    pub older_than_us: u64,
    pub keep_tombstones: bool,
    /// `upto` is what the peer was known to hold: saved for the backlog
    /// after a restart (`changelog::note_held`).
    pub peer_holds: bool,
}

impl Shard {
    /// Adds an entry, counting it on its parent first (on the parent's
    /// owner when that is another shard; the count is given back if the
    /// insert then fails), so a parent never shows fewer children than it
    /// holds and a delete of the parent sees the child coming.
    pub async fn add(&self, dn: &Dn, entry: Entry, is_suffix: bool) -> Result<()> {
        let mut ops = add_ops(&self.manifest, dn, entry, is_suffix).into_iter();
        let (owner, first) = ops.next().expect("an add has at least one op");
        let Some((entry_owner, add)) = ops.next() else { return self.submit_to(owner, first).await };
        let WriteOp::Child { parent, .. } = &first else { unreachable!("add_ops counts the parent first") };
        let parent = parent.clone();
        self.submit_to(owner, first).await?;
        let res = self.submit_to(entry_owner, add).await;
        if res.is_err() {
            let _ = self.submit_to(owner, WriteOp::Child { parent, delta: -1 }).await;
        }
        res
    }

    /// `add`'s checks on every owner it involves, nothing written (the
    /// No-Op control): the error the add would meet, if any.
    pub async fn check_add(&self, dn: &Dn, entry: Entry, is_suffix: bool) -> Result<()> {
        for (owner, op) in add_ops(&self.manifest, dn, entry, is_suffix) {
            self.submit_to(owner, dry_if(op, true)).await?;
        }
        Ok(())
    }

    /// Removes a leaf entry and uncounts it on its parent (in the same
    /// transaction when one shard owns both); returns the images `extras`
    /// asked for. `extras.dry`: only checked, and a parent of another
    /// owner is not asked (lowering a count checks nothing).
    pub async fn delete(&self, dn: &Dn, dn_text: &str, is_suffix: bool, extras: Extras) -> Outcome {
        let key = dn.key();
        let owner = self.owner_of(&key);
        let dry = extras.dry;
        let parent = (!is_suffix).then(|| Parent::of(dn));
        let local_parent = parent.as_ref().is_some_and(|p| self.owner_of(&p.key) == owner);
        let (parent, remote) = if local_parent { (parent, None) } else { (None, parent) };
        let op = WriteOp::Delete { key, dn: dn_text.to_string(), parent, extras };
        let images = self.submit_for(owner, dry_if(op, dry)).await?;
        if let (Some(p), false) = (remote, dry) {
            self.submit(&p.key.clone(), WriteOp::Child { parent: p, delta: -1 }).await?;
        }
        Ok(images)
    }

    /// Applies modifications to the entry with DN key `key` (`dn` as the
    /// client spelled it, `rdn` its naming values, which no modification
    /// may remove); returns the images `extras` asked for (`extras.dry`:
    /// only checked).
    pub async fn modify(
        &self,
        key: Vec<u8>,
        dn: String,
        mods: Vec<Mod>,
        rdn: Vec<(String, Vec<u8>)>,
        stamp: Stamp,
        extras: Extras,
    ) -> Outcome {
        let owner = self.owner_of(&key);
        let dry = extras.dry;
        self.submit_for(owner, dry_if(WriteOp::Modify { key, dn, mods, rdn, stamp, extras }, dry)).await
    }

    /// Raises (checking that the parent exists) or lowers a parent's child
    /// count: a rename holds its new parent so while it moves entries.
    pub async fn count_child(&self, parent: Parent, delta: i64) -> Result<()> {
        self.submit(&parent.key.clone(), WriteOp::Child { parent, delta }).await
    }

    /// `count_child(parent, 1)`'s check, nothing written (the No-Op
    /// control's rename): the parent exists.
    pub async fn check_parent(&self, parent: Parent) -> Result<()> {
        self.submit(&parent.key.clone(), dry_if(WriteOp::Child { parent, delta: 1 }, true)).await
    }

    /// The old DN's owner's part of a rename (the parents are counted
    /// apart, `count_child`); returns the images of what it moved.
    pub async fn move_entry(
        &self,
        old_key: &[u8],
        old_text: &str,
        new_key: Vec<u8>,
        entry: Entry,
        moving: Moving,
    ) -> Outcome {
        let op = WriteOp::Move {
            old_key: old_key.to_vec(),
            old_dn: old_text.to_string(),
            old_parent: None,
            new_key,
            new_parent: None,
            entry,
            moving,
        };
        self.submit_for(self.owner_of(old_key), op).await
    }

    /// Records (`Some`) or clears (`None`) the intent of a rename across
    /// owners on shard `home`, the old DN's owner (`renames.rs`).
    pub async fn note_intent(&self, home: usize, uuid: [u8; 16], intent: Option<Intent>) -> Result<()> {
        self.submit_to(home, WriteOp::Intent { uuid, intent }).await
    }

    /// Applies a peer's change record, the `seq`th of `origin` in its
    /// partition, on the owner of `key` (the record's DN key).
    pub async fn replicate(&self, key: &[u8], origin: Origin, seq: u64, rec: Record) -> Outcome {
        self.submit_for(self.owner_of(key), WriteOp::Replicate { origin, seq, rec }).await
    }

    /// Joins an entry's state sent whole (a partition resync) on the
    /// partition's owner.
    pub async fn absorb(&self, partition: u16, uuid: [u8; 16], state: EntryState) -> Outcome {
        let owner = self.manifest.owner_of_partition(partition as u32);
        self.submit_for(owner, WriteOp::Absorb { partition, uuid, state: Box::new(state) }).await
    }

    /// Moves a partition's replica update vector up to `positions`.
    pub async fn advance(&self, partition: u16, positions: Vec<(Origin, u64)>, newest: Vec<Csn>) -> Result<()> {
        let op = WriteOp::Advance { partition, positions, newest };
        self.submit_to(self.manifest.owner_of_partition(partition as u32), op).await
    }

    /// Trims a changelog stream on the partition's owner.
    pub async fn trim(&self, t: Trim) -> Result<()> {
        let Trim { partition, origin, upto, older_than_us, keep_tombstones, peer_holds } = t;
        let op = WriteOp::Trim { partition, origin, upto, older_than_us, keep_tombstones, peer_holds };
        self.submit_to(self.manifest.owner_of_partition(partition as u32), op).await
    }
}

/// `op`, or (`dry`) its checks only, in a transaction given up.
fn dry_if(op: WriteOp, dry: bool) -> WriteOp {
    match dry {
        true => WriteOp::Dry(Box::new(op)),
        false => op,
    }
}
