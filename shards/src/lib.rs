//! # shards: what one core of coredir owns
//!
//! ## Bird's eye view
//!
//! The directory is split into P partitions (256 by default) by a stable
//! hash of each entry's normalized DN; each partition is owned by one shard,
//! and each shard (one per core) keeps its partitions in its own store. Any
//! shard reads any store through a snapshot, with no lock and no message;
//! only the owner writes, in group commits. This crate is everything a shard
//! needs and nothing about sockets or the LDAP wire format.
//!
//! ## Code map
//!
//! - `dn`: DN parsing, normalization (`dn/text`: the RFC 4514 string form
//!   both ways) and the root-first storage key (`dn/key`, with the keys of
//!   each thread's last few parents kept).
//! - `entry`: the owned `Entry`, Modify semantics, and `EntryView`, the
//!   zero-copy view of an encoded `id2entry` record.
//! - `filter/`: search filters compiled against the schema (`mod.rs`),
//!   evaluated on an `EntryView`, three-valued and bounded per entry, with
//!   `Guarded` items that access control decides per entry (`eval`); the
//!   RFC 4515 string form both ways (`text`).
//! - `schema`: attribute types, object classes and syntaxes (built-in and
//!   custom files: `parse`, over `desc`'s RFC 4512 description syntax),
//!   entry checks, `cn=Subschema`; `der`, the DER walk that validates
//!   certificate and CRL values and reads what their matching compares.
//! - `matching`: matching rules (normal forms, ordering); `matching/forms`:
//!   string preparation and the other value forms; `matching/certs`: the
//!   certificate and CRL rules' forms and GSER assertions;
//!   `matching/names`: attribute names (canonical and stored spellings,
//!   options).
//! - `approx`: `~=` for strings, slapd's phonetic word match (Metaphone).
//! - `index`: configurable eq/pres/sub/ordering indexes and filter ->
//!   candidate ids; `index/marks`, the keys referral objects, aliases and
//!   subentries always have.
//! - `ldif`: RFC 2849 reading and writing (import and export).
//! - `password`: `userPassword` schemes (verify, hash).
//! - `octets`: octets that are not UTF-8 carried in ldap3_proto's strings
//!   (filter values, passwords) and read back.
//! - `manifest`: the data directory's identity and partition map, and the
//!   changes restores lost (`lost_change`); `replace_file`, a file
//!   replaced whole and durably.
//! - `store`: the `Store` trait (trees `dn2id`, `id2entry`, `children`,
//!   `index`, `meta`, `changelog`, `state`) with reads by name (`entry`,
//!   `entry_by_id`, `dn_keys`, …), its LMDB and sled engines and `Engine`;
//!   `store::copy`, whole-store copies routed by partition (backup,
//!   restore, reshard). Private to this crate: outside it, only the
//!   engine's options and `ReadTxn`'s reads by name are public, so no
//!   code outside names an engine, a tree or a write transaction.
//! - `stores`: `Stores`, every shard's store of one database: the one
//!   door the server has to them. It reads (`read`, `snapshot`,
//!   `StoreRef`) and syncs; it hands out no engine and no write
//!   transaction. `Offline`, the same stores before a server serves or in
//!   an offline tool, adds the writes around group commit (inserts routed
//!   by `Insert::route`, bulk loads, start-up notes, a restore's marks,
//!   copies into new stores).
//! - `subtree`: the entries under a DN key in every store at once, merged
//!   into one key order in chunks (a search's range, a sync refresh).
//! - `write`: `WriteOp`s as applied by an owner inside one transaction
//!   (`WriteOp` itself is crate-private: the server sends writes only
//!   through `writes`; it uses this module's domain rules, `children`,
//!   `Images`, `Stamping`, `check_key`, `user_modifiable`).
//! - `bulk`: `BulkLoad`, imports into a new database by appends.
//! - `writes`: the write façade, `Shard::add`, `delete`, `modify`,
//!   `move_entry`, `count_child`, `note_intent` and replication's
//!   `replicate`, `absorb`, `advance`, `trim`: each sends its write to the
//!   owner, with the undo of a step that spans two owners.
//! - `testing`: damage done to a stopped server's stores, for the
//!   integration tests (so that tests name no engine or tree either).
//! - `repair`: start-up recount of child counts after a crash.
//! - `upgrade`: a data directory of the previous format checked at start
//!   (the values whose normal forms changed), then marked current.
//! - `csn`: CSNs (OpenLDAP's text form) and each owner's hybrid logical clock.
//! - `merge`: mirror mode's replicated entry state and records, and the
//!   merge that converges in any order; `merge/conflict`, conflict DNs;
//!   `merge/entries`, from entries to changes (`deltas`) and back
//!   (`materialize`); `merge/state_codec` and `merge/record_codec`, the
//!   stored and wire forms of states and records.
//! - `changelog`: change capture in the owner's commit (records, states,
//!   sequence numbers, the replica update vector, trimming) and the keys
//!   of the `changelog`, `state` and its `meta` trees.
//! - `contexts`: contextCSN per naming context, noted by the commits
//!   that record changes when the server has several.
//! - `apply`: a peer's record applied on the owner (`WriteOp::Replicate`),
//!   and a state another partition hands over (`WriteOp::Absorb`).
//! - `digest`: what a partition shows, hashed entry by entry and summed
//!   (mirror mode's anti-entropy check).
//! - `moves`: modify-DN in mirror mode: an entry's state handed from
//!   partition to partition through parcels in `meta`.
//! - `renames`: renames across owners (and of subtrees) made crash-atomic
//!   by an intent record that a start finishes.
//! - `shard`: `Shard`, routing of writes to owners over the mesh, and the
//!   group-commit loop, with its metric handles (mesh messages, batch
//!   sizes, commit time, queue depth) registered on the shard's thread;
//!   `Floors`, each store's commit floor (what a syncrepl cookie may claim)
//!   and commit count; `Shard::next_commit`, where readers of the
//!   changelog wait to be woken by the next commit, and `Pace`.
//!
//! ## Architecture invariants
//!
//! 1. Only a partition's owner writes it; other shards only read snapshots.
//! 2. Values cross cores only as `MeshMsg`s. The shared words per store
//!    are on one cache line (`Floors`): its commit floor and commit count,
//!    written by its owner alone, once per commit (the floor also per idle
//!    tick), read by syncrepl and the replication sender; and the number
//!    of readers waiting on that shard with its `told` flag, written by
//!    them and read by committing owners, so that a commit wakes them with
//!    at most one `Committed` message in flight per shard. The
//!    one lock is the park `Gate`, taken only while an LMDB map grows (every
//!    reactor is stopped then by design); LMDB's `outside` lock is taken
//!    only by readers that are not reactors (backups).
//! 3. Only `store` touches LMDB or sled; no transaction is held across an `.await`.
//! 4. A write op checks before it changes: a refused op leaves no trace in a
//!    shared batch, and every op of a batch is answered only after commit.
//! 5. This crate uses ldap3_proto's data types (filters, result codes) but
//!    never its messages.

pub mod apply;
pub mod approx;
pub mod bulk;
pub mod changelog;
pub mod contexts;
pub mod csn;
mod der;
pub mod digest;
pub mod dn;
pub mod entry;
pub mod error;
pub mod filter;
pub mod index;
pub mod ldif;
pub mod manifest;
pub mod matching;
pub mod merge;
pub mod moves;
pub mod octets;
pub mod password;
pub mod renames;
pub mod repair;
pub mod schema;
pub mod shard;
mod store;
pub mod stores;
pub mod subtree;
#[doc(hidden)]
pub mod testing;
pub mod upgrade;
pub mod write;
pub mod writes;

pub use error::{Error, Result};
pub use shard::Shard;
pub use store::{EngineKind, Options, ReadTxn, SyncMode};
pub use stores::{Insert, Offline, Read, Stores};

/// The current time as LDAP Generalized Time (`20261129214500Z`).
pub fn now_generalized() -> String {
    let t = time::OffsetDateTime::now_utc();
    format!("{:04}{:02}{:02}{:02}{:02}{:02}Z", t.year(), t.month() as u8, t.day(), t.hour(), t.minute(), t.second())
}
