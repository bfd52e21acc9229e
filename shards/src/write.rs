//! The owner's side of every write: operations applied inside one write
//! transaction of a group commit.
//!
//! Each `WriteOp` checks all its preconditions before it changes anything,
//! so a refused operation leaves no trace in the shared transaction and the
//! rest of the batch commits. A storage failure aborts the whole batch.
//! Ops that span two owners (an add whose parent lives on another shard, a
//! move between shards) are split by the caller into ops that each touch one
//! owner, ordered so the parent's child count always protects the tree.
//! Bulk loads into a new database are `bulk::BulkLoad`.

use crate::changelog;
use crate::csn::{Csn, Hlc};
use crate::dn::Dn;
use crate::entry::{Entry, EntryView, Mod};
use crate::error::{Error, Result};
use crate::manifest::Manifest;
use crate::merge::{Change, EntryState, Record};
use crate::store::{ReadTxn, Store, Tree, WriteTxn};
use crate::{filter, index, matching, schema};
use ldap3_proto::proto::LdapFilter;
use ldap3_proto::LdapResultCode;

/// The longest DN key stored: a DN key is a store key (`dn2id`,
/// `children`), and LMDB built with `longer-keys` takes keys up to 1,982
/// bytes on 4 KiB pages (`store::lmdb::MAX_STORE_KEY`, checked at open).
/// slapd's back-mdb keeps each RDN apart, so a DN of many RDNs is long
/// there too: 500 refused DNs slapd stores (probes67).
pub const MAX_KEY: usize = 1900;

#[derive(Debug, Clone)]
pub(crate) enum WriteOp {
    /// Inserts a new entry. With `parent`, the parent is owned here: it is
    /// checked and its child count raised in the same transaction.
    Add { key: Vec<u8>, parent: Option<Parent>, entry: Entry },
    /// Raises (checking the parent exists) or lowers a parent's child count.
    Child { parent: Parent, delta: i64 },
    /// Counts a replicated entry's arrival or departure under a parent
    /// that need not be shown yet: records of different partitions land
    /// in any order, and the count must hold once the parent arrives.
    Tally { parent: Vec<u8>, delta: i64 },
    /// Removes a leaf entry; with `parent`, also lowers the local parent's count.
    Delete { key: Vec<u8>, dn: String, parent: Option<Parent>, extras: Extras },
    /// Applies modifications; `stamp` holds the modifiersName/modifyTimestamp values.
    Modify { key: Vec<u8>, dn: String, mods: Vec<Mod>, rdn: Vec<(String, Vec<u8>)>, stamp: Stamp, extras: Extras },
    /// Applies a peer's change record (`apply.rs`), `seq`th of its origin
    /// server in the record's partition.
    Replicate { origin: changelog::Origin, seq: u64, rec: Record },
    /// Trims an origin's changelog of a partition (`changelog::trim`).
    /// With `peer_holds`, `upto` is what the peer was known to hold, saved
    /// for the backlog after a restart (`changelog::note_held`).
    Trim {
        partition: u16,
        origin: changelog::Origin,
        upto: u64,
        older_than_us: u64,
        keep_tombstones: bool,
        peer_holds: bool,
    },
    /// Moves a partition's replica update vector up (`changelog::advance`).
    Advance { partition: u16, positions: Vec<(changelog::Origin, u64)>, newest: Vec<Csn> },
    /// Joins an entry's state handed over by another partition (`moves.rs`).
    Absorb { partition: u16, uuid: [u8; 16], state: Box<EntryState> },
    /// Removes a delivered parcel (`moves::unbox`).
    Unbox { key: Vec<u8>, state: Vec<u8> },
    /// Renames an entry whose old and new DNs have the same owner,
    /// atomically. In mirror mode the old DN's owner may differ from the
    /// new one's: it logs the rename and posts the state to the new DN's
    /// partition (`moves.rs`); the caller then delivers it.
    Move {
        old_key: Vec<u8>,
        old_dn: String,
        old_parent: Option<Parent>,
        new_key: Vec<u8>,
        new_parent: Option<Parent>,
        entry: Entry,
        moving: Moving,
    },
    /// Records or clears the intent of a rename across owners (`renames.rs`).
    Intent { uuid: [u8; 16], intent: Option<crate::renames::Intent> },
    /// The op with every check it makes, in a transaction of its own that
    /// is then given up (OpenLDAP's No-Op control): its outcome, nothing
    /// changed. Run once the batch it came with has committed.
    Dry(Box<WriteOp>),
}

/// What a `Move` moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moving {
    /// A leaf (or an entry renamed in place, children and all).
    Leaf,
    /// The top of a subtree whose entries follow it one by one (mirror
    /// mode, syncrepl: each is a logged rename of its own).
    Top,
    /// An entry below a moved top: only its DN changes, to `entry.dn`;
    /// the attributes are those stored, whatever a peer changed meanwhile.
    /// Stamped above `after` (the newest stamp of the moves before it,
    /// made on other shards' clocks), so that CSN order is the order of
    /// the moves: a parent's before its children's.
    Below { after: Csn },
}

/// What an update checks and hands back inside the owner's transaction:
/// the Assertion control's filter (RFC 4528) and the entry before and
/// after it (Pre-/Post-Read, RFC 4527).
#[derive(Debug, Clone, Default)]
pub struct Extras {
    pub assertion: Option<LdapFilter>,
    pub before: bool,
    pub after: bool,
    /// The Relax Rules control (a modify): the structural class may
    /// change, and given modifiersName/modifyTimestamp values stay.
    pub relax: bool,
    /// Permissive Modify (a modify): values added that the entry holds
    /// are left out, and a delete of an attribute it lacks does nothing
    /// (`Entry::apply_with`).
    pub permissive: bool,
    /// The most bytes the entry may take once modified (a modify;
    /// back-mdb's `maxentrysize`); 0: no limit.
    pub max_bytes: usize,
    /// The most attribute descriptions it may hold once modified (a
    /// modify; `limits.max_entry_attributes`); 0: no limit.
    pub max_attrs: usize,
    /// The No-Op control: the update's checks, nothing kept (`WriteOp::Dry`).
    pub dry: bool,
}

/// The entry images an op was asked for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Images {
    pub before: Option<Entry>,
    pub after: Option<Entry>,
}

/// An op's result: success with the images it was asked for, or why not.
pub type Outcome = Result<Option<Box<Images>>>;

#[derive(Debug, Clone)]
pub struct Parent {
    pub key: Vec<u8>,
    pub dn: String,
}

impl Parent {
    /// The parent of `dn` (not the root).
    pub fn of(dn: &Dn) -> Parent {
        let parent = dn.parent();
        Parent { key: parent.key(), dn: parent.to_string_form() }
    }
}

/// The ops that insert a new entry, with the shard each goes to: one `Add`
/// that also counts the child when entry and parent share an owner,
/// otherwise the parent's count first, then the `Add` (as `ops::add` does
/// online, without its undo; used by import and database creation).
pub(crate) fn add_ops(manifest: &Manifest, dn: &Dn, entry: Entry, is_suffix: bool) -> Vec<(usize, WriteOp)> {
    let key = dn.key();
    let owner = manifest.owner_of(&key);
    match (!is_suffix).then(|| Parent::of(dn)) {
        Some(p) if manifest.owner_of(&p.key) != owner => {
            vec![
                (manifest.owner_of(&p.key), WriteOp::Child { parent: p, delta: 1 }),
                (owner, WriteOp::Add { key, parent: None, entry }),
            ]
        }
        parent => vec![(owner, WriteOp::Add { key, parent, entry })],
    }
}

#[derive(Debug, Clone)]
pub struct Stamp {
    pub modifier: String,
    pub time: String,
}

/// `meta` key of the next entry id of a store.
pub(crate) const NEXT_ID: &[u8] = b"next_id";

/// The owner's clock's last state (`csn::Hlc::persist`).
const HLC: &[u8] = b"hlc";

/// What an owner's commits stamp and record: CSNs from its clock and,
/// while replication is on, the changes in the changelog (`changelog.rs`).
pub struct Clock {
    pub hlc: Hlc,
    pub capture: bool,
    /// This server's incarnation (`Manifest::incarnation`).
    pub incarnation: u32,
    /// The naming contexts whose changes are noted apart (contextCSN).
    pub contexts: crate::contexts::Contexts,
    /// Test only (`COREDIR_TEST_COMMIT_DELAY_MS`): a pause between stamping
    /// a batch and committing it, the window in which a later CSN of
    /// another shard becomes visible first.
    pub commit_delay: Option<std::time::Duration>,
}

impl Clock {
    pub fn origin(&self) -> changelog::Origin {
        changelog::Origin { sid: self.hlc.sid(), incarnation: self.incarnation }
    }
}

/// How an owner stamps its changes (from the configuration).
#[derive(Debug, Clone, Copy)]
pub struct Stamping {
    /// The server id in every CSN.
    pub sid: u16,
    /// Whether commits record changes for replication (`changelog.rs`).
    pub capture: bool,
    /// How far ahead of this clock a peer's CSN may be.
    pub max_forward_skew: std::time::Duration,
}

impl Stamping {
    /// Stand-alone: CSNs only.
    pub fn standalone(sid: u16) -> Stamping {
        Stamping { sid, capture: false, max_forward_skew: crate::csn::DEFAULT_MAX_FORWARD_SKEW }
    }
}

/// The owner's clock for a store, continuing from the state the store
/// recorded.
pub fn clock<S: Store>(store: &S, how: Stamping, manifest: &Manifest) -> Result<Clock> {
    let hlc = Hlc::new(how.sid, store.read()?.get(Tree::Meta, HLC)?, how.max_forward_skew);
    let (incarnation, contexts) = (manifest.incarnation, crate::contexts::Contexts::of_suffixes(&manifest.suffixes));
    Ok(Clock { hlc, capture: how.capture, incarnation, contexts, commit_delay: None })
}

/// After a restore (`coredir restore`): the newest change of server `sid`
/// the restored store holds (its clock's state or its changelog's newest)
/// is returned, and the clock is moved on to `now_us`, so that every
/// change made from here on is newer than any the backup lacked: a CSN of
/// `sid` between the two then names a change the restore lost.
pub fn restored<S: Store>(store: &S, sid: u16, now_us: u64) -> Result<Csn> {
    let mut hlc = Hlc::new(sid, store.read()?.get(Tree::Meta, HLC)?, std::time::Duration::ZERO);
    let logged = crate::changelog::newest(&store.read()?, None)?.into_iter().filter(|c| c.sid == sid).max();
    let newest = logged.map_or(hlc.issued(), |l| l.max(hlc.issued()));
    hlc.adopt(Csn::top_of(now_us, sid));
    let mut txn = store.write()?;
    if let Some(state) = hlc.persist() {
        txn.put(Tree::Meta, HLC, &state)?;
    }
    txn.commit()?;
    store.sync()?;
    Ok(newest)
}

/// Runs a batch in one write transaction and commits it; one result per op.
/// Every change gets its CSN from `hlc` (`entryCSN`); the clock's state is
/// stored in the same commit.
pub(crate) fn run_batch<S: Store>(
    store: &S,
    partition_of: impl Fn(&[u8]) -> u32,
    ops: &mut [WriteOp],
    clock: &mut Clock,
) -> Vec<Outcome> {
    let n = ops.len();
    let fail_all = |e: Error| vec![Err(e); n];
    if ops.iter().all(|op| matches!(op, WriteOp::Dry(_))) {
        // Nothing to commit: no transaction, no sync.
        let mut results = vec![Ok(None); n];
        run_dry(store, &partition_of, ops, &mut results, clock);
        return results;
    }
    let mut txn = match store.write() {
        Ok(t) => t,
        Err(e) => return fail_all(e),
    };
    let mut next_id = match txn.get(Tree::Meta, NEXT_ID) {
        Ok(v) => v.map_or(1, be_u64),
        Err(e) => return fail_all(e),
    };
    let mut results = Vec::with_capacity(ops.len());
    for op in ops.iter_mut() {
        if matches!(op, WriteOp::Dry(_)) {
            results.push(Ok(None)); // after the commit, below
            continue;
        }
        let res = apply(&mut txn, op, &partition_of, &mut next_id, clock);
        if let Err(e) = &res {
            if e.code == LdapResultCode::Other {
                return fail_all(e.clone());
            }
        }
        results.push(res);
    }
    let bound = match clock.hlc.persist() {
        Some(state) => txn.put(Tree::Meta, HLC, &state),
        None => Ok(()),
    };
    if let Some(pause) = clock.commit_delay {
        std::thread::sleep(pause); // a blocking thread's, and a test's only
    }
    if let Err(e) = bound.and_then(|_| txn.put(Tree::Meta, NEXT_ID, &next_id.to_be_bytes())).and_then(|_| txn.commit())
    {
        return fail_all(e);
    }
    run_dry(store, &partition_of, ops, &mut results, clock);
    results
}

/// The outcome of each `Dry` op of a batch, in its place.
fn run_dry<S: Store>(
    store: &S,
    partition_of: &impl Fn(&[u8]) -> u32,
    ops: &mut [WriteOp],
    results: &mut [Outcome],
    clock: &mut Clock,
) {
    for (op, res) in ops.iter_mut().zip(results.iter_mut()) {
        if let WriteOp::Dry(op) = op {
            *res = dry_run(store, partition_of, op, clock);
        }
    }
}

/// Applies `op` in a write transaction that is then given up: what it
/// would answer, nothing kept (its CSN is issued and never seen, as an
/// op that fails leaves it). A store out of room says `busy` rather than
/// asking for the batch to run again, which has committed.
fn dry_run<S: Store>(store: &S, partition_of: &impl Fn(&[u8]) -> u32, op: &mut WriteOp, clock: &mut Clock) -> Outcome {
    let res = (|| {
        let mut txn = store.write()?;
        let mut next_id = txn.get(Tree::Meta, NEXT_ID)?.map_or(1, be_u64);
        apply(&mut txn, op, partition_of, &mut next_id, clock)
        // The transaction is dropped here: given up.
    })();
    if store.take_full() {
        return Err(Error::new(LdapResultCode::Busy, "the store is growing; try again"));
    }
    res
}

/// `run_batch` for a thread that owns its store outright (offline tools):
/// when the batch runs out of room, the map grows and the batch runs again.
pub(crate) fn run_batch_owned<S: Store>(
    store: &S,
    partition_of: impl Fn(&[u8]) -> u32,
    ops: &mut [WriteOp],
    clock: &mut Clock,
) -> Vec<Outcome> {
    loop {
        let results = run_batch(store, &partition_of, ops, clock);
        if !store.take_full() {
            return results;
        }
        // SAFETY: the caller owns the store: no other transaction is open.
        if let Err(e) = unsafe { store.make_room(store.map_size()) } {
            return vec![Err(e); ops.len()];
        }
    }
}

pub fn be_u64(v: &[u8]) -> u64 {
    v.try_into().map(u64::from_be_bytes).unwrap_or(0)
}

/// A change is stamped above every stamp it supersedes: the entry's
/// `entryCSN` (in mirror mode its state's newest stamp) may come from the
/// peer's clock or another shard's, which this clock never saw.
fn supersede(hlc: &mut Hlc, old: &Entry) {
    if let Some(csn) = old.csn() {
        hlc.adopt(csn);
    }
}

/// Stamps an entry with the next CSN of its partition.
fn stamp_csn(entry: &mut Entry, partition: u16, hlc: &mut Hlc) -> Csn {
    let csn = hlc.tick(partition);
    entry.set("entryCSN", vec![csn.to_string().into_bytes()]);
    csn
}

/// Records a local change (see `changelog.rs`): merges it into the entry's
/// state (`before` stands in for a state the entry does not have yet) and
/// logs it; returns the state.
fn capture<T: WriteTxn>(
    txn: &mut T,
    partition: u16,
    clock: &Clock,
    before: Option<&Entry>,
    rec: &Record,
) -> Result<EntryState> {
    let mut state = match changelog::load_state(txn, partition, &rec.uuid)? {
        Some(s) => s,
        None => before.map(crate::merge::state_of_existing).unwrap_or_default(),
    };
    state.merge(rec);
    changelog::capture(txn, partition, clock, rec, &state)?;
    Ok(state)
}

fn apply<T: WriteTxn>(
    txn: &mut T,
    op: &mut WriteOp,
    partition_of: &impl Fn(&[u8]) -> u32,
    next_id: &mut u64,
    clock: &mut Clock,
) -> Outcome {
    match op {
        WriteOp::Add { key, parent, entry } => {
            check_key(key, &entry.dn)?;
            // Nothing may change before every precondition holds.
            entry.check_layout()?;
            if txn.get(Tree::Dn2id, key)?.is_some() {
                return Err(Error::already_exists(&entry.dn));
            }
            if let Some(p) = parent {
                child(txn, p, 1)?;
            }
            let partition = partition_of(key) as u16;
            // An import keeps the CSN its LDIF carries.
            let csn = match entry.csn() {
                Some(csn) => csn,
                None => stamp_csn(entry, partition, &mut clock.hlc),
            };
            if clock.capture {
                let rec = Record {
                    csn,
                    uuid: crate::merge::uuid_of(entry)?,
                    dn: entry.dn.clone(),
                    change: crate::merge::add_of(entry),
                };
                capture(txn, partition, clock, None, &rec)?;
            }
            insert(txn, key, entry, partition_of, next_id)?;
            Ok(None)
        }
        WriteOp::Child { parent, delta } => child(txn, parent, *delta).map(|_| None),
        WriteOp::Tally { parent, delta } => tally(txn, parent, *delta).map(|_| None),
        WriteOp::Trim { partition, origin, upto, older_than_us, keep_tombstones, peer_holds } => {
            if *peer_holds {
                changelog::note_held(txn, *partition, *origin, *upto)?;
            }
            changelog::trim(txn, *partition, *origin, *upto, *older_than_us, *keep_tombstones).map(|_| None)
        }
        WriteOp::Advance { partition, positions, newest } => {
            changelog::advance(txn, *partition, positions, newest).map(|_| None)
        }
        WriteOp::Replicate { origin, seq, rec } => {
            crate::apply::replicate(txn, partition_of, next_id, clock, *origin, *seq, rec)
        }
        WriteOp::Absorb { partition, uuid, state } => {
            // The state moved in with stamps of another shard's clock.
            clock.hlc.adopt(state.max_csn());
            crate::apply::absorb(txn, partition_of, next_id, clock, *partition, uuid, state)
        }
        WriteOp::Unbox { key, state } => crate::moves::unbox(txn, key, state).map(|_| None),
        WriteOp::Intent { uuid, intent } => crate::renames::write(txn, uuid, intent.as_ref()).map(|_| None),
        // `run_batch` runs these apart, never inside a batch's transaction.
        WriteOp::Dry(_) => Err(Error::new(LdapResultCode::OperationsError, "a dry run inside a transaction")),
        WriteOp::Delete { key, dn, parent, extras } => {
            let id = leaf_id(txn, key, dn)?;
            let old = read_checked(txn, &id, extras)?;
            if let Some(p) = parent {
                child(txn, p, -1)?;
            }
            if clock.capture {
                let partition = partition_of(key) as u16;
                supersede(&mut clock.hlc, &old);
                let csn = clock.hlc.tick(partition);
                let rec =
                    Record { csn, uuid: crate::merge::uuid_of(&old)?, dn: old.dn.clone(), change: Change::Delete };
                capture(txn, partition, clock, Some(&old), &rec)?;
            }
            index::remove(txn, &old, &id)?;
            txn.delete(Tree::Dn2id, key)?;
            txn.delete(Tree::Id2entry, &id)?;
            Ok(images(extras, Some(old), None))
        }
        WriteOp::Modify { key, dn, mods, rdn, stamp, extras } => {
            let id = txn.get(Tree::Dn2id, key)?.ok_or_else(|| Error::no_such_object(dn))?.to_vec();
            let old = read_checked(txn, &id, extras)?;
            let mut entry = old.clone();
            entry.apply_with(mods, extras.permissive)?;
            // An entry already past the limit (lowered since) may shrink.
            let size = entry.stored_len();
            if extras.max_bytes > 0 && size > extras.max_bytes && size > old.stored_len() {
                let why = format!("entry would exceed limits.max_entry_bytes ({} bytes)", extras.max_bytes);
                return Err(Error::new(LdapResultCode::AdminLimitExceeded, why));
            }
            for (attr, value) in rdn {
                if !entry.has_value(attr, value) {
                    return Err(Error::new(
                        LdapResultCode::NamingViolation,
                        format!("value of naming attribute '{attr}' is not present in entry"),
                    ));
                }
            }
            // The structural class is checked first, as slapd does: a
            // changed class makes every other complaint beside the point.
            match schema::check::structural_class(&entry) {
                Ok(structural) if extras.relax => entry.set("structuralObjectClass", vec![structural.into_bytes()]),
                Ok(structural) => keep_structural_class(&old, &mut entry, &structural)?,
                Err(_) => {}
            }
            schema::check::check_modified(&entry, &Dn::parse(dn)?)?;
            let given = |name: &str| {
                extras.relax
                    && mods
                        .iter()
                        .any(|m| matches!(m, Mod::Add(a) | Mod::Replace(a) if a.name.eq_ignore_ascii_case(name)))
            };
            if !given("modifiersName") {
                entry.set("modifiersName", vec![stamp.modifier.clone().into_bytes()]);
            }
            if !given("modifyTimestamp") {
                entry.set("modifyTimestamp", vec![stamp.time.clone().into_bytes()]);
            }
            // Counted with the stamps (entryCSN follows: every stored
            // entry has one). An entry already past the limit may shrink.
            let count = entry.attrs.len() + usize::from(entry.get("entryCSN").is_none());
            if extras.max_attrs > 0 && count > extras.max_attrs && count > old.attrs.len() {
                let why =
                    format!("entry would hold more than {} attributes (limits.max_entry_attributes)", extras.max_attrs);
                return Err(Error::new(LdapResultCode::AdminLimitExceeded, why));
            }
            entry.check_layout()?;
            let partition = partition_of(key) as u16;
            supersede(&mut clock.hlc, &old);
            let csn = stamp_csn(&mut entry, partition, &mut clock.hlc);
            if clock.capture {
                let mut deltas = crate::merge::deltas(&old, &entry);
                let mut replaced: Vec<&str> = mods
                    .iter()
                    .filter_map(|m| match m {
                        Mod::Replace(a) => Some(a.name.as_str()),
                        _ => None,
                    })
                    .collect();
                // The stamp replaces whatever stood: a modifier equal to the
                // last under DN matching, in another spelling, is recorded
                // as it bound (a difference would see no change).
                replaced.extend(["modifiersName", "modifyTimestamp"].into_iter().filter(|n| !given(n)));
                crate::merge::replace_whole(&mut deltas, &replaced, &entry);
                let change = Change::Modify { deltas };
                let rec = Record { csn, uuid: crate::merge::uuid_of(&old)?, dn: old.dn.clone(), change };
                // Stored as the state shows it, so that both servers hold the
                // same attribute and value order.
                let state = capture(txn, partition, clock, Some(&old), &rec)?;
                entry = crate::merge::materialize(&state, &rec.uuid).unwrap_or(entry);
            }
            let mut buf = Vec::with_capacity(256);
            entry.encode(&mut buf)?;
            index::update(txn, &old, &entry, &id)?;
            txn.put(Tree::Id2entry, &id, &buf)?;
            Ok(images(extras, Some(old), Some(entry)))
        }
        WriteOp::Move { old_key, old_dn, old_parent, new_key, new_parent, entry, moving } => {
            check_key(new_key, &entry.dn)?;
            // Renamed in place (another spelling of the same DN), children
            // may stay; a subtree's entries move with their children.
            let id = match new_key == old_key || *moving != Moving::Leaf {
                true => txn.get(Tree::Dn2id, old_key)?.ok_or_else(|| Error::no_such_object(old_dn))?.to_vec(),
                false => leaf_id(txn, old_key, old_dn)?,
            };
            if new_key != old_key && txn.get(Tree::Dn2id, new_key)?.is_some() {
                return Err(Error::already_exists(&entry.dn));
            }
            if let Some(p) = new_parent {
                child(txn, p, 1)?;
            }
            if let Some(p) = old_parent {
                child(txn, p, -1)?;
            }
            let old = Entry::decode(txn.get(Tree::Id2entry, &id)?.unwrap_or_default())?;
            if let Moving::Below { after } = moving {
                let dn = std::mem::take(&mut entry.dn);
                *entry = Entry { dn, ..old.clone() };
                entry.remove("entryCSN");
                clock.hlc.adopt(*after);
            }
            supersede(&mut clock.hlc, &old);
            index::remove(txn, &old, &id)?;
            txn.delete(Tree::Dn2id, old_key)?;
            txn.delete(Tree::Id2entry, &id)?;
            if clock.capture {
                return move_captured(txn, (old_key, old), (new_key, entry), partition_of, next_id, clock);
            }
            stamp_csn(entry, partition_of(new_key) as u16, &mut clock.hlc);
            insert(txn, new_key, entry, partition_of, next_id)?;
            Ok(None)
        }
    }
}

/// The rest of a `Move` in mirror mode, the old entry removed: logs the
/// rename in the old DN's partition, and shows the entry at its new DN
/// there or posts its state to the new DN's partition. The images (old
/// entry, new entry if shown here) let the caller count children.
fn move_captured<T: WriteTxn>(
    txn: &mut T,
    (old_key, old): (&[u8], Entry),
    (new_key, entry): (&[u8], &mut Entry),
    partition_of: &impl Fn(&[u8]) -> u32,
    next_id: &mut u64,
    clock: &mut Clock,
) -> Outcome {
    let (from, to) = (partition_of(old_key) as u16, partition_of(new_key) as u16);
    let csn = stamp_csn(entry, from, &mut clock.hlc);
    let uuid = crate::merge::uuid_of(&old)?;
    let change = Change::Rename { to: entry.dn.clone(), deltas: crate::merge::deltas(&old, entry) };
    let rec = Record { csn, uuid, dn: old.dn.clone(), change };
    let state = capture(txn, from, clock, Some(&old), &rec)?;
    let mut after = None;
    if from == to {
        let moved = crate::merge::materialize(&state, &uuid).ok_or_else(|| Error::other("a renamed entry vanished"))?;
        insert(txn, new_key, &moved, partition_of, next_id)?;
        after = Some(moved);
    } else {
        crate::moves::post(txn, from, &[Some(to)], &uuid, &state)?;
    }
    Ok(Some(Box::new(Images { before: Some(old), after })))
}

/// The stored entry `id`, checked against the Assertion control first; on
/// a big entry (a group of a million members) its equality items are
/// index lookups in this transaction (`index::decided_items`).
fn read_checked<T: ReadTxn>(txn: &T, id: &[u8], extras: &Extras) -> Result<Entry> {
    let view = EntryView::new(txn.get(Tree::Id2entry, id)?.unwrap_or_default())?;
    if let Some(f) = extras.assertion.as_ref() {
        let node = filter::compile(f);
        let mut decided = crate::index::decided_items(txn, &node, id, view.size())?;
        // The entry's children are counted on its own owner: here.
        decided
            .extend(node.subordinates_decided(|| Ok::<_, Error>(children(txn, &crate::dn::key_of(view.dn())?)? > 0))?);
        filter::with_decided(decided, || filter::check_assertion_node(&node, &view))?;
    }
    Entry::decode_view(&view)
}

fn images(extras: &Extras, before: Option<Entry>, after: Option<Entry>) -> Option<Box<Images>> {
    (extras.before || extras.after)
        .then(|| Box::new(Images { before: before.filter(|_| extras.before), after: after.filter(|_| extras.after) }))
}

/// A modify may add auxiliary classes but not change the structural one
/// (RFC 4512 §2.4.2: `objectClassModsProhibited`).
fn keep_structural_class(old: &Entry, entry: &mut Entry, structural: &str) -> Result<()> {
    match old.get("structuralObjectClass").and_then(|a| a.vals.first()) {
        Some(was) if !matching::values_equal("objectClass", was, structural.as_bytes()) => Err(Error::new(
            LdapResultCode::ObjectClassModsProhibited,
            format!(
                "structural object class modification from '{}' to '{structural}' not allowed",
                String::from_utf8_lossy(was)
            ),
        )),
        Some(_) => Ok(()),
        None => {
            entry.set("structuralObjectClass", vec![structural.as_bytes().to_vec()]);
            Ok(())
        }
    }
}

/// A DN's key fits the stores (LMDB's key bound): unwillingToPerform if not.
pub fn check_key(key: &[u8], dn: &str) -> Result<()> {
    if key.len() > MAX_KEY {
        return Err(Error::unwilling(format!("DN too long ({} bytes normalized, limit {MAX_KEY}): {dn}", key.len())));
    }
    Ok(())
}

/// The id of an existing entry that has no children.
fn leaf_id<T: ReadTxn>(txn: &T, key: &[u8], dn: &str) -> Result<Vec<u8>> {
    let id = txn.get(Tree::Dn2id, key)?.ok_or_else(|| Error::no_such_object(dn))?.to_vec();
    if txn.get(Tree::Children, key)?.map_or(0, be_u64) > 0 {
        return Err(Error::not_allowed_on_non_leaf(dn));
    }
    Ok(id)
}

pub(crate) fn insert<T: WriteTxn>(
    txn: &mut T,
    key: &[u8],
    entry: &Entry,
    partition_of: &impl Fn(&[u8]) -> u32,
    next_id: &mut u64,
) -> Result<()> {
    let id = (((partition_of(key) as u64) << 48) | *next_id).to_be_bytes();
    *next_id += 1;
    let mut buf = Vec::with_capacity(256);
    entry.encode(&mut buf)?;
    index::add(txn, entry, &id)?;
    txn.put(Tree::Dn2id, key, &id)?;
    txn.put(Tree::Id2entry, &id, &buf)
}

fn child<T: WriteTxn>(txn: &mut T, parent: &Parent, delta: i64) -> Result<()> {
    if delta > 0 && txn.get(Tree::Dn2id, &parent.key)?.is_none() {
        return Err(Error::no_such_object(&parent.dn));
    }
    tally(txn, &parent.key, delta)
}

/// `child` without the parent's check (`WriteOp::Tally`).
fn tally<T: WriteTxn>(txn: &mut T, key: &[u8], delta: i64) -> Result<()> {
    let count = (txn.get(Tree::Children, key)?.map_or(0, be_u64) as i64 + delta).max(0) as u64;
    match count {
        0 => txn.delete(Tree::Children, key).map(|_| ()),
        n => txn.put(Tree::Children, key, &n.to_be_bytes()),
    }
}

/// Number of children recorded for the entry with this key.
pub fn children<T: ReadTxn>(txn: &T, key: &[u8]) -> Result<u64> {
    Ok(txn.get(Tree::Children, key)?.map_or(0, be_u64))
}

/// Whether an attribute may be written by a client.
pub fn user_modifiable(name: &str) -> bool {
    !matching::is_no_user_modification(name)
}

#[cfg(test)]
mod tests;
