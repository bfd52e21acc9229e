//! `coredir backup`, `coredir restore` and `coredir reshard`: whole-store
//! copies, tree by tree.
//!
//! - `backup DEST` copies every shard's trees from one read snapshot per
//!   shard into new stores under DEST, plus the manifest: DEST is a data
//!   directory. With LMDB it runs while the server serves (snapshots; a
//!   child count cut between two shards' snapshots is repaired when a server
//!   starts on the copy); sled allows one process per store, so a sled
//!   backup needs the server stopped (or use `coredir export`).
//! - `restore BACKUP` copies a backup into an empty data directory,
//!   records in the manifest that (and when) the data was restored, and
//!   raises the incarnation: mirror mode numbers this server's changes
//!   afresh, and its peer hands back those the backup missed.
//! - All three carry mirror mode's changelog, entry states and positions
//!   with their partitions.
//! - `reshard --shards N` moves every partition to its owner under N
//!   shards (partition p goes to shard p mod N): each key goes to the store
//!   of its partition, found from the DN key (`dn2id`, `children`) or from
//!   the entry id's top bits (`id2entry`, `index`). The new stores are
//!   written beside the old ones and swapped in at the end; the old
//!   directory is kept, renamed, until the operator deletes it.

use crate::config::Config;
use anyhow::{anyhow, bail, Context, Result};
use shards::changelog::Origin;
use shards::manifest::Manifest;
use shards::{Offline, Stores};
use std::path::{Path, PathBuf};
use std::time::Instant;

fn err(e: shards::Error) -> anyhow::Error {
    anyhow!(e.message)
}

/// An empty (or absent) directory to write a data directory into, made
/// private (0700) before anything is written there: it will hold every
/// `userPassword`. For a backup (`theirs_refused`), one another user owns
/// is refused: they could swap what is written there before someone
/// restores it (a restore's target is the operator's data directory).
fn empty_target(dir: &Path, theirs_refused: bool) -> Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if let Ok(meta) = std::fs::symlink_metadata(dir) {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let me = unsafe { libc::geteuid() };
        if !meta.is_dir() || (theirs_refused && meta.uid() != me) {
            bail!("{} is owned by another user (or is not a directory); give a new directory", dir.display());
        }
        if std::fs::read_dir(dir)?.flatten().any(|e| e.file_name() != "lock") {
            bail!("{} is not empty; give a new or empty directory", dir.display());
        }
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("making {} private", dir.display()))
}

fn load_manifest(dir: &Path) -> Result<Manifest> {
    Manifest::load(dir).map_err(err)?.ok_or_else(|| anyhow!("{} holds no database (no manifest.toml)", dir.display()))
}

/// New, unsynced stores for `manifest` under `dir` (synced once at the end).
fn create_stores(config: &Config, dir: &Path, manifest: &Manifest) -> Result<Offline> {
    let mut unsynced = config.clone();
    unsynced.storage.sync = "never".into();
    crate::database::open_stores(&unsynced, dir, manifest)
}

pub fn backup(config: Config, dest: &Path) -> Result<()> {
    config.validate()?;
    let data = config.server.data.clone();
    let manifest = load_manifest(&data)?;
    if manifest.engine_kind() == shards::EngineKind::Sled && crate::database::lock_data_dir(&data).is_err() {
        bail!("a sled database cannot be read while its server runs; stop it, or use `coredir export` instead");
    }
    empty_target(dest, true)?;
    let from = crate::database::open_stores(&config, &data, &manifest)?;
    backup_from(&config, &manifest, &from, dest)
}

/// Copies open stores (a running server's, for `ctl backup`) into `dest`.
pub fn backup_from(config: &Config, manifest: &Manifest, from: &Stores, dest: &Path) -> Result<()> {
    empty_target(dest, true)?;
    let data = &config.server.data;
    let started = Instant::now();
    let to = create_stores(config, dest, manifest)?;
    // Every key goes back to its owner's store: the same shard as it came from.
    let entries = from.copy_into(&to, manifest).map_err(err)?;
    manifest.save(dest).map_err(err)?;
    eprintln!(
        "coredir: backed up {entries} entries ({} shards) from {} into {} in {:.2} s",
        manifest.shards,
        data.display(),
        dest.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// How many restores `Manifest::lost_changes` remembers.
const LOST_CHANGES_KEPT: usize = 8;

pub fn restore(config: Config, backup: &Path) -> Result<()> {
    config.validate()?;
    let data = config.server.data.clone();
    let _lock = crate::database::lock_data_dir(&data)?;
    empty_target(&data, false)?;
    let mut manifest = load_manifest(backup)?;
    let started = Instant::now();
    let from = crate::database::open_stores(&config, backup, &manifest)?;
    let to = create_stores(&config, &data, &manifest)?;
    let entries = from.copy_into(&to, &manifest).map_err(err)?;
    manifest.restored_from = Some(format!("{} {}", shards::now_generalized(), backup.display()));
    // A new incarnation: changes made from here on are numbered afresh, so
    // a peer that saw the old numbers after this backup skips none.
    let old = Origin { sid: config.sid(), incarnation: manifest.incarnation };
    manifest.incarnation += 1;
    // What a syncrepl consumer may hold beyond the backup: this server's
    // changes after its newest one there, up to now (`Manifest::lost_change`).
    let now_us = shards::csn::wall_us();
    let held = to.restored(manifest.partitions as u16, old, now_us).map_err(err)?;
    let restored = shards::csn::Csn::top_of(now_us, config.sid());
    manifest.lost_changes.push([held.to_string(), restored.to_string()]);
    // The last few restores: a consumer older than those has been refreshed
    // since, or its cookie names changes the changelog no longer holds.
    let keep = manifest.lost_changes.len().saturating_sub(LOST_CHANGES_KEPT);
    manifest.lost_changes.drain(..keep);
    manifest.save(&data).map_err(err)?;
    eprintln!(
        "coredir: restored {entries} entries from {} into {} in {:.2} s",
        backup.display(),
        data.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

pub fn reshard(config: Config, shards: usize) -> Result<()> {
    config.validate()?;
    if shards == 0 || shards > 1024 {
        bail!("--shards: must be between 1 and 1024");
    }
    let data = config.server.data.clone();
    let lock = crate::database::lock_data_dir(&data)?;
    let old = load_manifest(&data)?;
    if old.shards as usize == shards {
        bail!("{} already has {shards} shards", data.display());
    }
    let mut new = old.clone();
    new.shards = shards as u32;
    new.owners = (0..new.partitions).map(|p| p % new.shards).collect();
    let staging = sibling(&data, "reshard")?;
    empty_target(&staging, false)?;
    let started = Instant::now();
    let entries = {
        let from = crate::database::open_stores(&config, &data, &old)?;
        let to = create_stores(&config, &staging, &new)?;
        from.copy_into(&to, &new).map_err(err)?
    };
    new.save(&staging).map_err(err)?;
    // Swap: the old directory is kept beside, renamed.
    let kept = sibling(&data, "pre-reshard")?;
    drop(lock);
    std::fs::rename(&data, &kept).with_context(|| format!("renaming {}", data.display()))?;
    std::fs::rename(&staging, &data).with_context(|| format!("renaming {}", staging.display()))?;
    eprintln!(
        "coredir: resharded {entries} entries from {} to {shards} shards in {:.2} s; the old stores are kept in {} \
         until you delete them",
        old.shards,
        started.elapsed().as_secs_f64(),
        kept.display()
    );
    Ok(())
}

/// A new name `DIR.what-<unix time>[-n]` next to `DIR`.
fn sibling(dir: &Path, what: &str) -> Result<PathBuf> {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs();
    let name = dir.file_name().ok_or_else(|| anyhow!("{} has no directory name", dir.display()))?;
    let base = format!("{}.{what}-{secs}", name.to_string_lossy());
    (0..1000)
        .map(|n| dir.with_file_name(if n == 0 { base.clone() } else { format!("{base}-{n}") }))
        .find(|p| !p.exists())
        .ok_or_else(|| anyhow!("no free name like {base} next to {}", dir.display()))
}
