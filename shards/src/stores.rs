//! `Stores`: the stores of one database, one per shard, as the server and
//! its tools see them. The engine behind them (LMDB or sled, `store`) is
//! chosen when they open and named nowhere outside this crate; what this
//! door offers is reading (`read`, `snapshot`) and the whole-store chores
//! of tools (`sync`, sizes, copies). Writes go through the owner's group
//! commit (`writes`, `Shard`), or for offline tools and start-up through
//! `Offline`: `insert` (adds only), `bulk` and the notes on one store by
//! its index.

use crate::bulk::BulkLoad;
use crate::changelog::Origin;
use crate::csn::Csn;
use crate::dn::Dn;
use crate::entry::Entry;
use crate::manifest::Manifest;
use crate::store::{Engine, EngineRead, Options, Store};
use crate::write::{Clock, Outcome, Stamping, WriteOp};
use crate::Result;
use std::path::Path;
use std::sync::Arc;

/// A read transaction of one store: a snapshot read without a lock.
pub type Read<'a> = EngineRead<'a>;

/// Every shard's store of one database. Cloning shares them.
#[derive(Clone)]
pub struct Stores(Arc<Vec<Arc<Engine>>>);

impl Stores {
    pub(crate) fn engines(&self) -> &[Arc<Engine>] {
        &self.0
    }

    pub(crate) fn engine(&self, i: usize) -> &Arc<Engine> {
        &self.0[i]
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Each store in shard order, to read.
    pub fn iter(&self) -> impl Iterator<Item = StoreRef<'_>> {
        self.0.iter().map(|e| StoreRef(e))
    }

    /// Store `i`, to read.
    pub fn get(&self, i: usize) -> StoreRef<'_> {
        StoreRef(&self.0[i])
    }

    /// A snapshot of store `i`.
    pub fn read(&self, i: usize) -> Result<Read<'_>> {
        self.0[i].read()
    }

    /// A snapshot of every store, taken one after another (each is
    /// consistent; together they are as of about one moment).
    pub fn snapshot(&self) -> Result<Vec<Read<'_>>> {
        self.0.iter().map(|s| s.read()).collect()
    }

    /// `read` on a snapshot of store `i` from a thread that is not a
    /// reactor (the admin socket's): an LMDB map's growth waits for it.
    pub fn read_outside<R>(&self, i: usize, read: impl FnOnce(&Read<'_>) -> Result<R>) -> Result<R> {
        let _outside = self.0[i].outside();
        // Named, so that the transaction ends before the guard does.
        let txn = self.0[i].read()?;
        read(&txn)
    }

    /// Bytes store `i` takes on disk.
    pub fn size(&self, i: usize) -> u64 {
        self.0[i].size()
    }

    /// Copies every key into the new stores `to`, each into its owner's store under
    /// `manifest` (`store::copy`); returns the number of entries.
    pub fn copy_into(&self, to: &Offline, manifest: &Manifest) -> Result<u64> {
        crate::store::copy::copy_stores(self.engines(), to.engines(), manifest)
    }

    /// Flushes every store to disk.
    pub fn sync(&self) -> Result<()> {
        self.0.iter().try_for_each(|s| s.sync())
    }
}

/// Stores opened by an offline tool, or by a server before it serves:
/// the only ones writes outside the owners' group commits may go to
/// (offline tools' batches, bulk loads, the start-up notes, a restore's
/// marks, copies into new stores). A server turns them into `Stores`
/// once it is ready to serve (`serve`), and nothing turns them back.
#[derive(Clone)]
pub struct Offline(Stores);

/// One owner's step of adding an entry offline, as an add online splits
/// it (`Insert::route`): the entry on its owner, and when the parent lives
/// on another owner, the parent's child count there. Offline tools only
/// ever add; they never build the owners' other writes.
pub struct Insert(WriteOp);

impl Insert {
    /// The steps of adding `entry` at `dn`, each with the store it runs
    /// on (`Offline::insert`). A naming context's root (`is_suffix`) has
    /// no parent to count on.
    pub fn route(manifest: &Manifest, dn: &Dn, entry: Entry, is_suffix: bool) -> Vec<(usize, Insert)> {
        crate::write::add_ops(manifest, dn, entry, is_suffix)
            .into_iter()
            .map(|(owner, op)| (owner, Insert(op)))
            .collect()
    }
}

impl std::ops::Deref for Offline {
    type Target = Stores;

    fn deref(&self) -> &Stores {
        &self.0
    }
}

impl Offline {
    /// Opens (creating them when missing) the stores `shard-0` ..
    /// `shard-{count-1}` under `data`.
    pub fn open(data: &Path, count: usize, options: Options) -> Result<Offline> {
        let engines = (0..count)
            .map(|i| Engine::open(&data.join(format!("shard-{i}")), options).map(Arc::new))
            .collect::<Result<Vec<_>>>()?;
        Ok(Offline(Stores(Arc::new(engines))))
    }

    /// The same stores, to serve: reads only from here on.
    pub fn serve(self) -> Stores {
        self.0
    }

    /// The write clock of store `i` (`write::clock`), for offline writers.
    pub fn clock(&self, i: usize, how: Stamping, manifest: &Manifest) -> Result<Clock> {
        crate::write::clock(&**self.engine(i), how, manifest)
    }

    /// Runs inserts on store `i` in one transaction, the map grown and
    /// the batch run again when it runs out of room
    /// (`write::run_batch_owned`): whoever holds `Offline` owns the stores
    /// outright, no reactor reads. One outcome per insert, in order.
    pub fn insert(&self, i: usize, manifest: &Manifest, inserts: Vec<Insert>, clock: &mut Clock) -> Vec<Outcome> {
        let mut ops: Vec<WriteOp> = inserts.into_iter().map(|Insert(op)| op).collect();
        crate::write::run_batch_owned(&**self.engine(i), |k| manifest.partition_of(k), &mut ops, clock)
    }

    /// Gives every store the keys its referrals, aliases and subentries
    /// lack (`index::note_marks`), at start.
    pub fn note_marks(&self) -> Result<()> {
        self.engines().iter().try_for_each(|s| crate::index::note_marks(s))
    }

    /// At start, store `i` notes whether change capture is on
    /// (`changelog::note_capture`) and, with it on, the contextCSN of
    /// each naming context from what was written before
    /// (`contexts::note_states`).
    pub fn note_start(&self, i: usize, capture: bool, contexts: &crate::contexts::Contexts) -> Result<()> {
        crate::changelog::note_capture(&**self.engine(i), capture, crate::csn::wall_us())?;
        if capture {
            crate::contexts::note_states(&**self.engine(i), contexts)?;
        }
        Ok(())
    }

    /// Rebuilds store `i`'s indexes from its entries (`index::rebuild`);
    /// returns how many entries it indexed.
    pub fn reindex(&self, i: usize) -> Result<usize> {
        crate::index::rebuild(&**self.engine(i))
    }

    /// After a restore: every store numbers its changes as a new
    /// incarnation of this server (`changelog::new_incarnation`), its
    /// clock past the restore; returns the newest CSN of server `sid` the
    /// stores held (`write::restored`).
    pub fn restored(&self, partitions: u16, old: Origin, now_us: u64) -> Result<Csn> {
        let mut held = Csn::top_of(0, old.sid);
        for s in self.engines().iter() {
            crate::changelog::new_incarnation(&**s, partitions, old)?;
            held = held.max(crate::write::restored(&**s, old.sid, now_us)?);
        }
        Ok(held)
    }

    /// Writes a bulk load into store `i`, new and empty (`bulk`).
    pub fn bulk(&self, i: usize, load: BulkLoad) -> Result<()> {
        load.write(&**self.engine(i))
    }
}

/// One store of `Stores`, to read.
#[derive(Clone, Copy)]
pub struct StoreRef<'a>(&'a Engine);

impl<'a> StoreRef<'a> {
    /// A snapshot of this store.
    pub fn read(self) -> Result<Read<'a>> {
        self.0.read()
    }

    /// Bytes it takes on disk.
    pub fn size(self) -> u64 {
        self.0.size()
    }
}
