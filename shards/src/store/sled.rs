//! The sled engine (`storage.engine = "sled"`): one sled `Db` per shard,
//! one sled tree per `Tree`.
//!
//! sled has no read snapshots: a `SledRead` sees each key as last
//! committed, so a search that runs while the owner commits may see one
//! write and not another (read committed, per key), where LMDB gives a
//! point-in-time view. Values come back as owned `IVec`s; a read
//! transaction keeps the ones it handed out alive until it ends, so the
//! trait's borrowed `&[u8]` stays valid.
//!
//! Writes gather in an overlay (only the owner's commit thread writes, so
//! reading the committed trees plus the overlay is exact) and commit as one
//! serializable multi-tree sled transaction. Durability: sled acknowledges
//! writes from memory, so `SyncMode::Always` calls `flush()` (fsync) after
//! every commit; `Interval` lets sled's own flusher run every
//! `sync_interval`; `Never` flushes only at shutdown and on `sync()`. Unlike
//! LMDB, a killed *process* loses what sled had not flushed in the latter
//! two modes. `clear` (reindex only, offline) is not atomic with the rest.
//!
//! Per research/crates.md, sled is the second engine, not the default: it
//! is kept for the comparison the storage issue asks for.

use super::{ReadTxn, Store, SyncMode, Tree, WriteTxn, N_TREES, TREES};
use crate::error::{Error, Result};
use sled::transaction::{ConflictableTransactionError, TransactionError};
use sled::{IVec, Transactional};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::Path;

pub struct SledStore {
    db: sled::Db,
    trees: [sled::Tree; N_TREES],
    sync: SyncMode,
    dir: std::path::PathBuf,
    /// Why sled stopped taking writes, once it has: sled keeps the first
    /// failed write to its log as an error every later write returns,
    /// until the store is opened again.
    failed: std::sync::OnceLock<String>,
}

/// Free space a commit leaves untouched before sled is given it: two log
/// segments (sled writes its log a segment at a time, 512 KiB by default,
/// and cleans old segments by rewriting them) plus four times the batch.
const ROOM_SEGMENTS: u64 = 2 * 512 * 1024;
const ROOM_PER_BATCH_BYTE: u64 = 4;

fn storage_error(e: impl std::fmt::Display) -> Error {
    eprintln!("coredir: storage error: {e}");
    Error::other(format!("storage error: {e}"))
}

fn idx(t: Tree) -> usize {
    TREES.iter().position(|x| *x == t).unwrap()
}

impl SledStore {
    /// Opens (or creates) the store. Call from an unpinned thread: sled's
    /// I/O pool inherits the affinity of the thread that starts it.
    pub fn open(dir: &Path, sync: SyncMode, sync_interval_ms: u64, cache_bytes: u64) -> Result<SledStore> {
        let flush_every = match sync {
            SyncMode::Interval => Some(sync_interval_ms),
            SyncMode::Always | SyncMode::Never => None,
        };
        let db = sled::Config::new()
            .path(dir)
            .cache_capacity(cache_bytes)
            .flush_every_ms(flush_every)
            .open()
            .map_err(|e| Error::other(format!("{}: {e}", dir.display())))?;
        let open = |t: Tree| db.open_tree(t.name()).map_err(storage_error);
        let trees: Vec<sled::Tree> = TREES.iter().map(|&t| open(t)).collect::<Result<_>>()?;
        let trees = trees.try_into().unwrap_or_else(|_| unreachable!("one per tree"));
        Ok(SledStore { db, trees, sync, dir: dir.to_path_buf(), failed: Default::default() })
    }

    /// Refuses a commit that might not fit on the filesystem, before sled
    /// sees it: sled takes a failed log write as the end of the store (it
    /// keeps the failed transaction visible in memory, loses it at the next
    /// start, and fails every later write until then), where LMDB only
    /// fails that one commit. Refused here, the write leaves no trace, and
    /// writes resume by themselves once space returns.
    fn ensure_room(&self, batch_bytes: u64) -> Result<()> {
        if let Some(why) = self.failed.get() {
            return Err(Error::other(format!(
                "storage error: the sled store stopped taking writes ({why}); restart the server"
            )));
        }
        let needed = ROOM_SEGMENTS + ROOM_PER_BATCH_BYTE * batch_bytes;
        let free = free_bytes(&self.dir).map_err(storage_error)?;
        if free < needed {
            return Err(Error::other(format!(
                "storage error: No space left on device ({} KiB free where the sled store lives, {} KiB needed)",
                free / 1024,
                needed / 1024
            )));
        }
        Ok(())
    }

    /// A sled write that failed anyway: every later one will, so say it
    /// once, loudly, and refuse the rest up front.
    fn failing(&self, e: impl std::fmt::Display) -> Error {
        let why = e.to_string();
        if self.failed.set(why.clone()).is_ok() {
            eprintln!(
                "coredir: ALERT: the sled store in {} failed a write ({why}): it takes no more writes until the \
                 server restarts; the write that failed may show until then, and whether it is there after the \
                 restart is not known (its log may have reached the disk before the flush failed)",
                self.dir.display()
            );
        }
        storage_error(why)
    }
}

/// Bytes an unprivileged writer may still use on the filesystem of `dir`.
fn free_bytes(dir: &Path) -> std::io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes())?;
    // SAFETY: a valid C string and a zeroed out-parameter of the right type.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st.f_bavail as u64 * st.f_frsize as u64)
}

impl Drop for SledStore {
    fn drop(&mut self) {
        let _ = self.db.flush();
    }
}

pub struct SledRead<'a> {
    trees: &'a [sled::Tree; N_TREES],
    /// The values handed out, boxed so their bytes never move.
    held: RefCell<Vec<Box<IVec>>>,
}

impl SledRead<'_> {
    fn hold(&self, v: IVec) -> &[u8] {
        let boxed = Box::new(v);
        let ptr: *const [u8] = boxed.as_ref().as_ref();
        self.held.borrow_mut().push(boxed);
        // SAFETY: the box is kept in `held` until `self` is dropped and is
        // never moved out or mutated; its heap contents do not move when
        // the vector grows, so the slice lives as long as `&self`.
        unsafe { &*ptr }
    }
}

/// Visits the pairs of `tree` whose key starts with `prefix` and is at
/// least `from`, merged with `overlay` (overlay entries win; `None` deletes).
fn scan_merged(
    tree: &sled::Tree,
    overlay: Option<&BTreeMap<Vec<u8>, Option<Vec<u8>>>>,
    skip_tree: bool,
    prefix: &[u8],
    from: &[u8],
    visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
) -> Result<()> {
    let start = if from > prefix { from } else { prefix };
    let empty = BTreeMap::new();
    let overlay = overlay.unwrap_or(&empty);
    let mut over = overlay.range::<[u8], _>((Bound::Included(start), Bound::Unbounded)).peekable();
    let mut base = (!skip_tree).then(|| tree.range(start..)).into_iter().flatten().peekable();
    loop {
        let next_base = match base.peek() {
            Some(Ok((k, _))) => Some(k.clone()),
            Some(Err(_)) => return Err(storage_error(base.next().unwrap().unwrap_err())),
            None => None,
        };
        let next_over = over.peek().map(|(k, _)| k.as_slice());
        let (key, value): (Vec<u8>, Option<Vec<u8>>) = match (next_base, next_over) {
            (None, None) => return Ok(()),
            (Some(b), Some(o)) if o <= b.as_ref() => {
                if o == b.as_ref() {
                    base.next();
                }
                let (k, v) = over.next().unwrap();
                (k.clone(), v.clone())
            }
            (Some(_), _) => {
                let (k, v) = base.next().unwrap().map_err(storage_error)?;
                (k.to_vec(), Some(v.to_vec()))
            }
            (None, Some(_)) => {
                let (k, v) = over.next().unwrap();
                (k.clone(), v.clone())
            }
        };
        if !key.starts_with(prefix) {
            return Ok(());
        }
        if let Some(v) = value {
            if !visit(&key, &v) {
                return Ok(());
            }
        }
    }
}

impl ReadTxn for SledRead<'_> {
    fn get(&self, tree: Tree, key: &[u8]) -> Result<Option<&[u8]>> {
        Ok(self.trees[idx(tree)].get(key).map_err(storage_error)?.map(|v| self.hold(v)))
    }

    fn scan(&self, tree: Tree, prefix: &[u8], from: &[u8], visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
        scan_merged(&self.trees[idx(tree)], None, false, prefix, from, visit)
    }
}

pub struct SledWrite<'a> {
    store: &'a SledStore,
    read: SledRead<'a>,
    overlay: [BTreeMap<Vec<u8>, Option<Vec<u8>>>; N_TREES],
    cleared: [bool; N_TREES],
}

impl ReadTxn for SledWrite<'_> {
    fn get(&self, tree: Tree, key: &[u8]) -> Result<Option<&[u8]>> {
        let i = idx(tree);
        match self.overlay[i].get(key) {
            Some(v) => Ok(v.as_deref()),
            None if self.cleared[i] => Ok(None),
            None => self.read.get(tree, key),
        }
    }

    fn scan(&self, tree: Tree, prefix: &[u8], from: &[u8], visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
        let i = idx(tree);
        scan_merged(&self.store.trees[i], Some(&self.overlay[i]), self.cleared[i], prefix, from, visit)
    }
}

impl WriteTxn for SledWrite<'_> {
    fn put(&mut self, tree: Tree, key: &[u8], value: &[u8]) -> Result<()> {
        self.overlay[idx(tree)].insert(key.to_vec(), Some(value.to_vec()));
        Ok(())
    }

    fn delete(&mut self, tree: Tree, key: &[u8]) -> Result<bool> {
        let existed = self.get(tree, key)?.is_some();
        self.overlay[idx(tree)].insert(key.to_vec(), None);
        Ok(existed)
    }

    fn append(&mut self, tree: Tree, key: &[u8], value: &[u8]) -> Result<()> {
        self.put(tree, key, value)
    }

    fn clear(&mut self, tree: Tree) -> Result<()> {
        let i = idx(tree);
        self.overlay[i].clear();
        self.cleared[i] = true;
        Ok(())
    }

    fn commit(self) -> Result<()> {
        let s = self.store;
        let batch: usize = self.overlay.iter().flatten().map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len)).sum();
        s.ensure_room(batch as u64)?;
        for (i, cleared) in self.cleared.iter().enumerate() {
            if *cleared {
                s.trees[i].clear().map_err(|e| s.failing(e))?;
            }
        }
        let overlay = &self.overlay;
        let t = &s.trees;
        // One transaction over every tree: the tuple names them all.
        const _: () = assert!(N_TREES == 7, "list every tree in the transaction below");
        let res: std::result::Result<(), TransactionError<()>> = (&t[0], &t[1], &t[2], &t[3], &t[4], &t[5], &t[6])
            .transaction(|(a, b, c, d, e, f, g)| {
                for (tx, changes) in [a, b, c, d, e, f, g].into_iter().zip(overlay) {
                    for (k, v) in changes {
                        match v {
                            Some(v) => tx.insert(k.as_slice(), v.as_slice())?,
                            None => tx.remove(k.as_slice())?,
                        };
                    }
                }
                Ok::<_, ConflictableTransactionError<()>>(())
            });
        res.map_err(|e| s.failing(format!("{e:?}")))?;
        if s.sync == SyncMode::Always {
            s.db.flush().map_err(|e| s.failing(e))?;
        }
        Ok(())
    }
}

impl Store for SledStore {
    type Read<'a> = SledRead<'a>;
    type Write<'a> = SledWrite<'a>;

    fn read(&self) -> Result<SledRead<'_>> {
        Ok(SledRead { trees: &self.trees, held: RefCell::new(Vec::new()) })
    }

    fn write(&self) -> Result<SledWrite<'_>> {
        Ok(SledWrite {
            store: self,
            read: SledRead { trees: &self.trees, held: RefCell::new(Vec::new()) },
            overlay: Default::default(),
            cleared: [false; N_TREES],
        })
    }

    fn sync(&self) -> Result<()> {
        self.db.flush().map(|_| ()).map_err(|e| self.failing(e))
    }

    fn size(&self) -> u64 {
        self.db.size_on_disk().unwrap_or(0)
    }
}
