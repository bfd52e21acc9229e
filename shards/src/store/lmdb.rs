//! The LMDB engine, on LMDB's C API (`lmdb-master-sys`): one environment
//! per shard.
//!
//! Read transactions are kept, not made per request. A reader's drop resets
//! its transaction (`mdb_txn_reset`) into its thread's pool for this store,
//! and the thread's next read renews one (`mdb_txn_renew`): the reader slot
//! stays tied to the transaction (`MDB_NOTLS`), so a read takes neither the
//! reader table's mutex, shared by every shard reading this store, nor an
//! allocation. Each pool is touched by its own thread alone (a reactor runs
//! many tasks, each may hold snapshots, so a pool is a stack, not one
//! transaction). heed, which this engine used before, exposes no renew.
//!
//! Commits are ordinary synced LMDB commits in `SyncMode::Always`; the other
//! modes open the environment with `NO_SYNC` (never `NO_SYNC` plus a later
//! sync for `Always`).
//!
//! The map (address space reserved for the file) starts at
//! `storage.map_size_mb` and doubles whenever less than a quarter is left
//! or a write meets `MDB_MAP_FULL` (`Store::make_room`); a store reopened
//! with its data past the configured size grows the same way at open.

use super::{ReadTxn, Store, SyncMode, Tree, WriteTxn, N_TREES, TREES};
use crate::error::{Error, Result};
use lmdb_master_sys as ffi;
use std::cell::UnsafeCell;
use std::ffi::{c_void, CStr, CString};
use std::marker::PhantomData;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard, TryLockError};

/// Threads alive at once with a pool of their own per store (an exiting
/// thread's index, with its pool, goes to the next thread); threads past
/// them begin and abort as before.
const POOLS: usize = 128;
/// Reset transactions a thread keeps per store: each holds a reader slot,
/// so pools hold at most half of `MAX_READERS`.
const KEPT: usize = 4;
const MAX_READERS: u32 = 1024;
/// The longest key a store takes: LMDB's on 4 KiB pages when built with
/// `MDB_MAXKEYSIZE=0` (lmdb-master-sys's `longer-keys`), where the
/// default build stops at 511. The file format is the same either way.
pub const MAX_STORE_KEY: usize = 1982;

pub struct LmdbStore {
    env: NonNull<ffi::MDB_env>,
    dbis: [ffi::MDB_dbi; N_TREES],
    dir: PathBuf,
    /// Set when a write met `MDB_MAP_FULL` (see `Store::take_full`).
    full: AtomicBool,
    /// Readers outside the reactors (see `Store::outside`).
    outside: RwLock<()>,
    /// Reset read transactions, one stack per thread (`thread_slot`).
    pools: Box<[Pool]>,
}

/// One thread's reset transactions, on a line of its own.
#[repr(align(64))]
struct Pool(UnsafeCell<Vec<NonNull<ffi::MDB_txn>>>);

// SAFETY: LMDB's environment is safe to share between threads; with
// `MDB_NOTLS` a transaction may move between threads when its use is
// serialized: each pool is only touched by the one thread whose slot it is
// (`thread_slot`), or by the store's drop, which has it exclusively.
unsafe impl Send for LmdbStore {}
unsafe impl Sync for LmdbStore {}

/// This thread's pool index, taken at its first read and given back when
/// it exits (admin connections each run on a thread of their own).
fn thread_slot() -> usize {
    thread_local!(static SLOT: Slot = Slot::take());
    SLOT.try_with(|s| s.0).unwrap_or(usize::MAX)
}

/// Indices given back by threads that exited, and the next never used.
/// Locked once per thread start and exit, never per read; the lock also
/// orders the old thread's last use of a pool before the new thread's
/// first (`MDB_NOTLS` lets a reset transaction change threads so).
static SLOTS: Mutex<(Vec<usize>, usize)> = Mutex::new((Vec::new(), 0));

struct Slot(usize);

impl Slot {
    fn take() -> Slot {
        let mut s = SLOTS.lock().unwrap_or_else(|e| e.into_inner());
        Slot(s.0.pop().unwrap_or_else(|| {
            s.1 += 1;
            s.1 - 1
        }))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        SLOTS.lock().unwrap_or_else(|e| e.into_inner()).0.push(self.0);
    }
}

/// Store directories open in this process: LMDB must not open one twice
/// (closing either handle would release the other's reader slots).
static OPEN: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

pub struct LmdbRead<'a> {
    txn: NonNull<ffi::MDB_txn>,
    store: &'a LmdbStore,
    /// Readers stay on the thread that began them (the pool is per thread).
    _not_send: PhantomData<*mut ()>,
}

pub struct LmdbWrite<'a> {
    /// `None` once committed.
    txn: Option<NonNull<ffi::MDB_txn>>,
    store: &'a LmdbStore,
}

fn describe(rc: i32) -> String {
    // SAFETY: mdb_strerror returns a static C string for any code.
    unsafe { CStr::from_ptr(ffi::mdb_strerror(rc)) }.to_string_lossy().into_owned()
}

fn storage_error(rc: i32) -> Error {
    let e = describe(rc);
    eprintln!("coredir: storage error: {e}");
    Error::other(format!("storage error: {e}"))
}

/// An LMDB call's return code as a result.
fn check(rc: i32) -> Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(storage_error(rc))
    }
}

/// A write's error: running out of map is remembered, and not logged (the
/// owner grows the map and runs the batch again).
fn write_error(full: &AtomicBool, rc: i32) -> Result<()> {
    match rc {
        0 => Ok(()),
        ffi::MDB_MAP_FULL => {
            full.store(true, Ordering::Relaxed);
            Err(Error::other("storage error: the LMDB map is full"))
        }
        rc => Err(storage_error(rc)),
    }
}

/// The map size that leaves a quarter of the map free after `used` bytes:
/// the current one doubled as often as needed.
fn grown(map: u64, used: u64) -> u64 {
    let mut size = map.max(1 << 20);
    while used > size / 4 * 3 {
        size *= 2;
    }
    size
}

fn val(bytes: &[u8]) -> ffi::MDB_val {
    ffi::MDB_val { mv_size: bytes.len(), mv_data: bytes.as_ptr() as *mut c_void }
}

/// The bytes an `MDB_val` LMDB filled points at, valid as long as the
/// transaction that read them.
///
/// # Safety
/// `v` was filled by LMDB inside a transaction that outlives `'t`.
unsafe fn bytes<'t>(v: &ffi::MDB_val) -> &'t [u8] {
    if v.mv_size == 0 {
        return &[];
    }
    // SAFETY: LMDB points at `mv_size` bytes of its map (or of the write
    // transaction's dirty pages), unchanged until the transaction ends.
    unsafe { std::slice::from_raw_parts(v.mv_data as *const u8, v.mv_size) }
}

impl LmdbStore {
    pub fn open(dir: &Path, sync: SyncMode, map_size: usize) -> Result<LmdbStore> {
        std::fs::create_dir_all(dir).map_err(|e| Error::other(format!("{}: {e}", dir.display())))?;
        let dir = dir.canonicalize().map_err(|e| Error::other(format!("{}: {e}", dir.display())))?;
        {
            let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
            if open.contains(&dir) {
                return Err(Error::other(format!("{}: the store is already open in this process", dir.display())));
            }
            open.push(dir.clone());
        }
        let opened = Self::open_env(&dir, sync, map_size);
        if opened.is_err() {
            OPEN.lock().unwrap_or_else(|e| e.into_inner()).retain(|d| *d != dir);
        }
        opened
    }

    fn open_env(dir: &Path, sync: SyncMode, map_size: usize) -> Result<LmdbStore> {
        const { assert!(crate::write::MAX_KEY < MAX_STORE_KEY) };
        let path = CString::new(dir.as_os_str().as_bytes()).map_err(|_| Error::other("a store path holds NUL"))?;
        let mut env = ptr::null_mut();
        // SAFETY: a fresh handle; on failure after create it is closed.
        unsafe {
            check(ffi::mdb_env_create(&mut env))?;
            let mut flags = ffi::MDB_NOTLS;
            if sync != SyncMode::Always {
                // NO_SYNC only weakens durability, never memory safety.
                flags |= ffi::MDB_NOSYNC | ffi::MDB_NOMETASYNC;
            }
            let opened = check(ffi::mdb_env_set_mapsize(env, map_size))
                .and_then(|()| check(ffi::mdb_env_set_maxdbs(env, N_TREES as ffi::MDB_dbi)))
                .and_then(|()| check(ffi::mdb_env_set_maxreaders(env, MAX_READERS)))
                .and_then(|()| check(ffi::mdb_env_open(env, path.as_ptr(), flags, 0o600)))
                // Slots of processes that died (kill -9 leaves each thread's
                // reset transactions behind) are freed now, not at the next
                // open that finds the lock file to itself.
                .and_then(|()| check(ffi::mdb_reader_check(env, &mut 0)))
                .and_then(|()| match usize::try_from(ffi::mdb_env_get_maxkeysize(env)) {
                    Ok(max) if max >= MAX_STORE_KEY => Ok(()),
                    _ => Err(Error::other(format!("LMDB takes keys of at most {} bytes; {MAX_STORE_KEY} are needed (built without lmdb-master-sys's longer-keys, or pages under 4 KiB)", ffi::mdb_env_get_maxkeysize(env)))),
                });
            if let Err(e) = opened {
                ffi::mdb_env_close(env);
                return Err(e);
            }
        }
        let pools = (0..POOLS).map(|_| Pool(UnsafeCell::new(Vec::new()))).collect();
        let mut store = LmdbStore {
            env: NonNull::new(env).expect("mdb_env_create gave an environment"),
            dbis: [0; N_TREES],
            dir: dir.to_path_buf(),
            full: AtomicBool::new(false),
            outside: RwLock::new(()),
            pools,
        };
        store.dbis = store.open_trees()?;
        // LMDB maps what it is asked for, or just the data when that is
        // more: a store that grew last time needs room again.
        // SAFETY: the environment was just opened; no transaction is open.
        unsafe { store.make_room(0) }?;
        Ok(store)
    }

    /// Opens (creating) one named database per tree, in one commit, after
    /// which every transaction may use the handles.
    fn open_trees(&self) -> Result<[ffi::MDB_dbi; N_TREES]> {
        let mut txn = self.write()?;
        let mut dbis = [0; N_TREES];
        for (t, dbi) in TREES.iter().zip(dbis.iter_mut()) {
            let name = CString::new(t.name()).expect("tree names hold no NUL");
            // SAFETY: a live write transaction; LMDB fills `dbi`.
            check(unsafe { ffi::mdb_dbi_open(txn.ptr(), name.as_ptr(), ffi::MDB_CREATE, dbi) })?;
        }
        txn.commit()?;
        Ok(dbis)
    }

    fn dbi(&self, t: Tree) -> ffi::MDB_dbi {
        const {
            let mut i = 0;
            while i < N_TREES {
                assert!(TREES[i] as usize == i, "TREES lists the trees in their declared order");
                i += 1;
            }
        }
        self.dbis[t as usize]
    }

    /// Bytes of the map in use (up to the last page), and the map's size.
    fn usage(&self) -> (u64, u64) {
        // SAFETY: an open environment; LMDB fills the struct.
        let info = unsafe {
            let mut info = std::mem::zeroed::<ffi::MDB_envinfo>();
            ffi::mdb_env_info(self.env.as_ptr(), &mut info);
            info
        };
        ((info.me_last_pgno as u64 + 1) * page_size() as u64, info.me_mapsize as u64)
    }

    /// This thread's pool, if it has one.
    fn pool(&self) -> Option<&mut Vec<NonNull<ffi::MDB_txn>>> {
        // SAFETY: the slot is this thread's alone (`thread_slot`) and no
        // caller holds the reference across another call to `pool`.
        self.pools.get(thread_slot()).map(|p| unsafe { &mut *p.0.get() })
    }

    /// A read transaction: this thread's last reset one renewed, or a new one.
    fn begin_read(&self) -> Result<NonNull<ffi::MDB_txn>> {
        if let Some(txn) = self.pool().and_then(|p| p.pop()) {
            // SAFETY: a reset read transaction of this environment.
            let rc = unsafe { ffi::mdb_txn_renew(txn.as_ptr()) };
            if rc == 0 {
                return Ok(txn);
            }
            if rc != ffi::MDB_BAD_RSLOT {
                // SAFETY: a failed renew leaves the handle to be aborted.
                unsafe { ffi::mdb_txn_abort(txn.as_ptr()) };
            }
            // A slot LMDB no longer counts as ours is left alone (leaked):
            // aborting would clear it under whoever has it now.
            return Err(storage_error(rc));
        }
        let mut txn = ptr::null_mut();
        let begin = |txn: &mut *mut ffi::MDB_txn| {
            // SAFETY: an open environment; LMDB fills `txn`.
            unsafe { ffi::mdb_txn_begin(self.env.as_ptr(), ptr::null_mut(), ffi::MDB_RDONLY, txn) }
        };
        let mut rc = begin(&mut txn);
        if rc == ffi::MDB_READERS_FULL {
            // Perhaps held by dead processes: free theirs and try once more.
            // SAFETY: an open environment.
            unsafe { ffi::mdb_reader_check(self.env.as_ptr(), &mut 0) };
            rc = begin(&mut txn);
        }
        check(rc)?;
        Ok(NonNull::new(txn).expect("mdb_txn_begin gave a transaction"))
    }

    /// A reader's end: reset into this thread's pool, or aborted.
    fn end_read(&self, txn: NonNull<ffi::MDB_txn>) {
        match self.pool() {
            Some(pool) if pool.len() < KEPT => {
                // SAFETY: an active read transaction no one reads through now.
                unsafe { ffi::mdb_txn_reset(txn.as_ptr()) };
                pool.push(txn);
            }
            // SAFETY: as above; the handle is freed.
            _ => unsafe { ffi::mdb_txn_abort(txn.as_ptr()) },
        }
    }
}

impl Drop for LmdbStore {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no reader is alive (they borrow the store)
        // and no thread touches a pool; transactions go before their
        // environment.
        unsafe {
            for pool in self.pools.iter() {
                for txn in (*pool.0.get()).drain(..) {
                    ffi::mdb_txn_abort(txn.as_ptr());
                }
            }
            ffi::mdb_env_close(self.env.as_ptr());
        }
        OPEN.lock().unwrap_or_else(|e| e.into_inner()).retain(|d| *d != self.dir);
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

impl Store for LmdbStore {
    type Read<'a> = LmdbRead<'a>;
    type Write<'a> = LmdbWrite<'a>;

    fn read(&self) -> Result<LmdbRead<'_>> {
        Ok(LmdbRead { txn: self.begin_read()?, store: self, _not_send: PhantomData })
    }

    fn write(&self) -> Result<LmdbWrite<'_>> {
        let mut txn = ptr::null_mut();
        // SAFETY: an open environment; LMDB fills `txn` (waiting for the
        // write lock, held by one owner thread per store anyway).
        check(unsafe { ffi::mdb_txn_begin(self.env.as_ptr(), ptr::null_mut(), 0, &mut txn) })?;
        Ok(LmdbWrite { txn: NonNull::new(txn), store: self })
    }

    fn sync(&self) -> Result<()> {
        // SAFETY: an open environment.
        check(unsafe { ffi::mdb_env_sync(self.env.as_ptr(), 1) })
    }

    fn size(&self) -> u64 {
        std::fs::metadata(self.dir.join("data.mdb")).map(|m| m.len()).unwrap_or(0)
    }

    fn wants_room(&self) -> bool {
        let (used, map) = self.usage();
        grown(map, used) > map
    }

    fn take_full(&self) -> bool {
        // A load first: the line stays shared while nothing failed.
        self.full.load(Ordering::Relaxed) && self.full.swap(false, Ordering::Relaxed)
    }

    fn map_size(&self) -> u64 {
        self.usage().1
    }

    unsafe fn make_room(&self, extra: u64) -> Result<Option<(u64, u64)>> {
        let (used, map) = self.usage();
        let size = grown(map, used + extra);
        if size == map {
            return Ok(None);
        }
        let size = size.next_multiple_of(page_size() as u64);
        // SAFETY: the caller promises that no transaction is active (reset
        // ones in the pools hold only their reader slots, which LMDB keeps
        // in the lock file, not in the map it maps again).
        let rc = unsafe { ffi::mdb_env_set_mapsize(self.env.as_ptr(), size as usize) };
        if rc != 0 {
            // LMDB unmapped the file and could not map it again: every
            // reader would fault. Stop here, with the reason.
            eprintln!("coredir: growing {} to {size} bytes failed: {}; stopping", self.dir.display(), describe(rc));
            std::process::abort();
        }
        Ok(Some((map, size)))
    }

    fn outside(&self) -> Option<RwLockReadGuard<'_, ()>> {
        Some(self.outside.read().unwrap_or_else(|e| e.into_inner()))
    }

    fn exclusive(&self) -> Option<RwLockWriteGuard<'_, ()>> {
        match self.outside.try_write() {
            Ok(g) => Some(g),
            Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }
}

/// `mdb_get` in `txn`.
///
/// # Safety
/// `txn` is an active transaction that outlives `'t`.
unsafe fn get<'t>(txn: NonNull<ffi::MDB_txn>, dbi: ffi::MDB_dbi, key: &[u8]) -> Result<Option<&'t [u8]>> {
    // LMDB stores no key of 0 or more than its maximum, so none is
    // there; `mdb_get` would call the request a storage failure
    // (MDB_BAD_VALSIZE): the root DSE's empty key.
    if key.is_empty() || key.len() > MAX_STORE_KEY {
        return Ok(None);
    }
    let mut k = val(key);
    let mut v = ffi::MDB_val { mv_size: 0, mv_data: ptr::null_mut() };
    // SAFETY: the caller's promise; LMDB only reads `k`.
    match unsafe { ffi::mdb_get(txn.as_ptr(), dbi, &mut k, &mut v) } {
        0 => Ok(Some(unsafe { bytes(&v) })),
        ffi::MDB_NOTFOUND => Ok(None),
        rc => Err(storage_error(rc)),
    }
}

/// A cursor, closed when dropped.
struct Cursor(*mut ffi::MDB_cursor);

impl Drop for Cursor {
    fn drop(&mut self) {
        // SAFETY: opened by `scan` in a transaction still active.
        unsafe { ffi::mdb_cursor_close(self.0) }
    }
}

/// Visits the pairs of `dbi` from `max(prefix, from)` while keys start
/// with `prefix` and `visit` says go on.
///
/// # Safety
/// `txn` is an active transaction.
unsafe fn scan(
    txn: NonNull<ffi::MDB_txn>,
    dbi: ffi::MDB_dbi,
    prefix: &[u8],
    from: &[u8],
    visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
) -> Result<()> {
    let mut cursor = Cursor(ptr::null_mut());
    // SAFETY: the caller's promise; LMDB fills the cursor.
    check(unsafe { ffi::mdb_cursor_open(txn.as_ptr(), dbi, &mut cursor.0) })?;
    let start = if from > prefix { from } else { prefix };
    let mut k = val(start);
    let mut v = ffi::MDB_val { mv_size: 0, mv_data: ptr::null_mut() };
    // LMDB refuses empty keys, so an empty start means the first key.
    let mut op = if start.is_empty() { ffi::MDB_FIRST } else { ffi::MDB_SET_RANGE };
    loop {
        // SAFETY: a cursor of an active transaction; on success LMDB
        // points `k` and `v` into the map.
        match unsafe { ffi::mdb_cursor_get(cursor.0, &mut k, &mut v, op) } {
            0 => {}
            ffi::MDB_NOTFOUND => return Ok(()),
            rc => return Err(storage_error(rc)),
        }
        // SAFETY: filled by LMDB just now, inside the transaction.
        let (key, value) = unsafe { (bytes(&k), bytes(&v)) };
        if !key.starts_with(prefix) || !visit(key, value) {
            return Ok(());
        }
        op = ffi::MDB_NEXT;
    }
}

impl Drop for LmdbRead<'_> {
    fn drop(&mut self) {
        self.store.end_read(self.txn);
    }
}

impl ReadTxn for LmdbRead<'_> {
    fn get(&self, tree: Tree, key: &[u8]) -> Result<Option<&[u8]>> {
        // SAFETY: the transaction is active while `self` lives.
        unsafe { get(self.txn, self.store.dbi(tree), key) }
    }
    fn scan(&self, tree: Tree, prefix: &[u8], from: &[u8], visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
        // SAFETY: as for `get`.
        unsafe { scan(self.txn, self.store.dbi(tree), prefix, from, visit) }
    }
}

impl LmdbWrite<'_> {
    fn ptr(&mut self) -> *mut ffi::MDB_txn {
        self.txn.expect("a write transaction is used only until its commit").as_ptr()
    }

    fn live(&self) -> NonNull<ffi::MDB_txn> {
        self.txn.expect("a write transaction is used only until its commit")
    }
}

impl Drop for LmdbWrite<'_> {
    fn drop(&mut self) {
        if let Some(txn) = self.txn.take() {
            // SAFETY: a write transaction not committed: given up.
            unsafe { ffi::mdb_txn_abort(txn.as_ptr()) }
        }
    }
}

impl ReadTxn for LmdbWrite<'_> {
    fn get(&self, tree: Tree, key: &[u8]) -> Result<Option<&[u8]>> {
        // SAFETY: the transaction is active while `self` lives, and `&self`
        // keeps writes (which may move its dirty pages) from running.
        unsafe { get(self.live(), self.store.dbi(tree), key) }
    }
    fn scan(&self, tree: Tree, prefix: &[u8], from: &[u8], visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> Result<()> {
        // SAFETY: as for `get`.
        unsafe { scan(self.live(), self.store.dbi(tree), prefix, from, visit) }
    }
}

impl WriteTxn for LmdbWrite<'_> {
    fn put(&mut self, tree: Tree, key: &[u8], value: &[u8]) -> Result<()> {
        self.put_with(tree, key, value, 0)
    }
    fn delete(&mut self, tree: Tree, key: &[u8]) -> Result<bool> {
        let (txn, dbi) = (self.ptr(), self.store.dbi(tree));
        let mut k = val(key);
        // SAFETY: a live write transaction; LMDB only reads `k`.
        match unsafe { ffi::mdb_del(txn, dbi, &mut k, ptr::null_mut()) } {
            ffi::MDB_NOTFOUND => Ok(false),
            rc => write_error(&self.store.full, rc).map(|()| true),
        }
    }
    fn append(&mut self, tree: Tree, key: &[u8], value: &[u8]) -> Result<()> {
        self.put_with(tree, key, value, ffi::MDB_APPEND)
    }
    fn clear(&mut self, tree: Tree) -> Result<()> {
        let (txn, dbi) = (self.ptr(), self.store.dbi(tree));
        // SAFETY: a live write transaction; `0` empties the database and
        // keeps its handle.
        write_error(&self.store.full, unsafe { ffi::mdb_drop(txn, dbi, 0) })
    }
    fn commit(mut self) -> Result<()> {
        let txn = self.txn.take().expect("committed once");
        // SAFETY: a live write transaction; LMDB frees it, committed or not.
        write_error(&self.store.full, unsafe { ffi::mdb_txn_commit(txn.as_ptr()) })
    }
}

impl LmdbWrite<'_> {
    fn put_with(&mut self, tree: Tree, key: &[u8], value: &[u8], flags: u32) -> Result<()> {
        let (txn, dbi) = (self.ptr(), self.store.dbi(tree));
        let (mut k, mut v) = (val(key), val(value));
        // SAFETY: a live write transaction; LMDB copies both values.
        write_error(&self.store.full, unsafe { ffi::mdb_put(txn, dbi, &mut k, &mut v, flags) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread's next read renews the transaction its last one reset,
    /// and sees what was committed since; readers held at once each have
    /// their own, and other threads theirs.
    #[test]
    fn reads_renew_this_threads_reset_transactions() {
        let dir = tempfile::tempdir().unwrap();
        let store = LmdbStore::open(dir.path(), SyncMode::Never, 1 << 20).unwrap();
        let put = |v: &[u8]| {
            let mut txn = store.write().unwrap();
            txn.put(Tree::Meta, b"k", v).unwrap();
            txn.commit().unwrap();
        };
        put(b"1");
        let first = store.read().unwrap();
        let kept = first.txn;
        assert_eq!(store.pool().map(|p| p.len()), Some(0));
        assert_eq!(first.get(Tree::Meta, b"k").unwrap(), Some(&b"1"[..]));
        drop(first);
        assert_eq!(store.pool().map(|p| p.len()), Some(1), "a reader's drop resets it into the pool");
        put(b"2");
        let again = store.read().unwrap();
        assert_eq!(store.pool().map(|p| p.len()), Some(0), "and the next read takes it");
        assert_eq!(again.txn, kept, "the reset transaction is renewed");
        assert_eq!(again.get(Tree::Meta, b"k").unwrap(), Some(&b"2"[..]), "a renewed snapshot is new");
        let beside = store.read().unwrap();
        assert_ne!(beside.txn, again.txn);
        put(b"3");
        assert_eq!(again.get(Tree::Meta, b"k").unwrap(), Some(&b"2"[..]), "a held snapshot stays");
        let theirs = std::thread::scope(|s| s.spawn(|| store.read().unwrap().txn.as_ptr() as usize).join().unwrap());
        assert!(theirs != again.txn.as_ptr() as usize && theirs != beside.txn.as_ptr() as usize);
        drop((again, beside));
        let mut seen = Vec::new();
        store.scan_all(&mut seen);
        assert_eq!(seen, [(b"k".to_vec(), b"3".to_vec())]);
    }

    /// One directory, one environment per process: a second open is
    /// refused while the first lives, and allowed once it is closed.
    #[test]
    fn a_store_opens_once_per_process() {
        let dir = tempfile::tempdir().unwrap();
        let first = LmdbStore::open(dir.path(), SyncMode::Never, 1 << 20).unwrap();
        let again = LmdbStore::open(&dir.path().join("."), SyncMode::Never, 1 << 20);
        assert!(again.is_err_and(|e| e.message.contains("already open")));
        drop(first);
        LmdbStore::open(dir.path(), SyncMode::Never, 1 << 20).unwrap();
    }

    impl LmdbStore {
        fn scan_all(&self, out: &mut Vec<(Vec<u8>, Vec<u8>)>) {
            self.read()
                .unwrap()
                .scan(Tree::Meta, b"", b"", &mut |k, v| {
                    out.push((k.to_vec(), v.to_vec()));
                    true
                })
                .unwrap();
        }
    }

    /// A write past the map fails, is remembered, and succeeds once the
    /// map has grown; a reopened store keeps room above its data.
    #[test]
    fn a_full_map_grows_and_the_write_succeeds() {
        let dir = tempfile::tempdir().unwrap();
        let store = LmdbStore::open(dir.path(), SyncMode::Never, 1 << 20).unwrap();
        let value = vec![7u8; 3 << 20];
        let put = |s: &LmdbStore| -> Result<()> {
            let mut txn = s.write()?;
            txn.put(Tree::Id2entry, b"big", &value)?;
            txn.commit()
        };
        assert!(put(&store).is_err());
        assert!(store.take_full() && !store.take_full());
        // As an owner does: at least double, and try again.
        let mut rounds = 0;
        loop {
            // SAFETY: no transaction is open.
            let (from, to) = unsafe { store.make_room(store.map_size()) }.unwrap().unwrap();
            assert_eq!(to, 2 * from);
            rounds += 1;
            if put(&store).is_ok() {
                break;
            }
            assert!(store.take_full() && rounds < 4);
        }
        assert!(store.map_size() >= 4 << 20);
        assert_eq!(store.read().unwrap().get(Tree::Id2entry, b"big").unwrap().map(<[u8]>::len), Some(3 << 20));
        drop(store);
        let store = LmdbStore::open(dir.path(), SyncMode::Never, 1 << 20).unwrap();
        assert!(!store.wants_room() && store.map_size() > 4 << 20);
    }
}
