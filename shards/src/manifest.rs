//! The manifest: what a data directory is, fixed when the database is created.
//!
//! It records the database identity, the number of partitions and the name
//! of the hash that maps a DN to a partition, which shard owns each
//! partition, and the root password hash chosen at creation. Written once
//! atomically (temporary file, fsync, rename, fsync of the directory).

use crate::csn::Csn;
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

pub const FILE: &str = "manifest.toml";
/// 2: index keys carry their index type (`index.rs`); `indexes` recorded.
/// 3: other spaces at a value's edges are dropped (`upgrade`).
pub const FORMAT: u32 = 3;
/// The oldest format a start upgrades (`upgrade`); offline tools read it.
pub const UPGRADABLE: u32 = 2;
pub const DEFAULT_PARTITIONS: u32 = 256;
pub const HASH_NAME: &str = "fnv1a-64/v1";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub format: u32,
    pub database_id: String,
    pub created: String,
    pub partitions: u32,
    pub hash: String,
    pub shards: u32,
    /// `owners[p]` is the shard that owns partition `p`.
    pub owners: Vec<u32>,
    pub suffixes: Vec<String>,
    pub root_dn: String,
    pub root_password_hash: String,
    /// The storage engine of the stores ("lmdb" or "sled").
    pub engine: String,
    /// Set by `coredir restore`: when and from which backup (replication
    /// treats restored data as a new incarnation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored_from: Option<String>,
    /// Raised by every restore: this server's changes are numbered afresh
    /// under (server id, incarnation), so a peer never takes a reused
    /// sequence number for one it has seen.
    #[serde(default)]
    pub incarnation: u32,
    /// Set by `coredir restore`: for each restore, the newest change of
    /// this server the backup held and the restore's time, as CSNs. A
    /// syncrepl cookie naming a change of this server between the two
    /// comes from the history the restore lost (`lost_change`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lost_changes: Vec<[String; 2]>,
    /// The index configuration the stores' indexes were built with
    /// (`index::Config::describe`); `coredir reindex` rewrites it.
    pub indexes: String,
}

impl Manifest {
    /// The engine the stores were written with: "sled", else LMDB (the
    /// default, also of manifests written before the field had values).
    pub fn engine_kind(&self) -> crate::EngineKind {
        if self.engine == "sled" {
            crate::EngineKind::Sled
        } else {
            crate::EngineKind::Lmdb
        }
    }

    pub fn new(shards: u32, suffixes: Vec<String>, root_dn: String, root_password_hash: String) -> Manifest {
        Manifest {
            format: FORMAT,
            database_id: uuid::Uuid::new_v4().to_string(),
            created: crate::now_generalized(),
            partitions: DEFAULT_PARTITIONS,
            hash: HASH_NAME.to_string(),
            shards,
            owners: (0..DEFAULT_PARTITIONS).map(|p| p % shards).collect(),
            suffixes,
            root_dn,
            root_password_hash,
            engine: "lmdb".into(),
            restored_from: None,
            incarnation: 0,
            lost_changes: Vec::new(),
            indexes: crate::index::config().describe(),
        }
    }

    /// When `csn` names a change a restore lost (a change of the restored
    /// server newer than any its backup held and older than the restore,
    /// whose clock issues only later ones): the restore's CSN (the top one
    /// of its microsecond).
    pub fn lost_change(&self, csn: Csn) -> Option<Csn> {
        let at = |c: Csn| (c.phys_us, c.logical);
        let windows =
            self.lost_changes.iter().filter_map(|[held, restored]| Some((Csn::parse(held)?, Csn::parse(restored)?)));
        // Below the restore's own CSN: a cookie ending such a refresh names
        // that one, and must not count as lost again. The latest restore
        // whose window holds it: a cookie ending an earlier one's refresh
        // may lie in a later window (the same backup restored twice).
        let lost =
            |(held, restored): &(Csn, Csn)| csn.sid == held.sid && at(csn) > at(*held) && at(csn) < at(*restored);
        windows.filter(lost).map(|(_, restored)| restored).max()
    }

    pub fn path(dir: &Path) -> PathBuf {
        dir.join(FILE)
    }

    pub fn load(dir: &Path) -> Result<Option<Manifest>> {
        let path = Manifest::path(dir);
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::other(format!("{}: {e}", path.display()))),
        };
        let m: Manifest = toml::from_str(&text).map_err(|e| Error::other(format!("{}: {e}", path.display())))?;
        m.validate().map_err(|why| Error::other(format!("{}: {why}", path.display())))?;
        Ok(Some(m))
    }

    fn validate(&self) -> std::result::Result<(), String> {
        if !(UPGRADABLE..=FORMAT).contains(&self.format) {
            return Err(format!(
                "manifest format {} is not supported (expected {UPGRADABLE} to {FORMAT})",
                self.format
            ));
        }
        if self.hash != HASH_NAME {
            return Err(format!("partition hash {:?} is not supported (expected {HASH_NAME:?})", self.hash));
        }
        if self.owners.len() != self.partitions as usize || self.partitions == 0 {
            return Err("owners must list one shard per partition".into());
        }
        if self.shards == 0 || self.owners.iter().any(|o| *o >= self.shards) {
            return Err("owners name a shard that does not exist".into());
        }
        Ok(())
    }

    /// Refuses to open the stores with another engine than created them.
    pub fn check_engine(&self, configured: &str) -> std::result::Result<(), String> {
        if configured != self.engine {
            return Err(format!(
                "the database was created with storage.engine = {:?} and the configuration says {configured:?}; \
                 export it and import it into an empty directory to change engines",
                self.engine
            ));
        }
        Ok(())
    }

    /// Refuses to serve with indexes other than those the stores hold.
    pub fn check_indexes(&self) -> std::result::Result<(), String> {
        let configured = crate::index::config().describe();
        if configured != self.indexes {
            return Err(format!(
                "the index configuration changed: the database was indexed with [{}] and the configuration asks \
                 for [{configured}]; stop the server and run `coredir reindex` with this configuration",
                self.indexes
            ));
        }
        Ok(())
    }

    pub fn save(&self, dir: &Path) -> Result<()> {
        let io = |e: std::io::Error| Error::other(format!("writing {}: {e}", Manifest::path(dir).display()));
        let text = toml::to_string(self).map_err(|e| Error::other(e.to_string()))?;
        replace_file(&Manifest::path(dir), text.as_bytes()).map_err(io)
    }

    /// The partition of an entry, from its DN key (`Dn::key`).
    pub fn partition_of(&self, key: &[u8]) -> u32 {
        (fnv1a64(key) % self.partitions as u64) as u32
    }

    pub fn owner_of(&self, key: &[u8]) -> usize {
        self.owner_of_partition(self.partition_of(key))
    }

    /// The shard that owns a partition.
    pub fn owner_of_partition(&self, partition: u32) -> usize {
        self.owners[partition as usize] as usize
    }
}

/// FNV-1a, 64 bit: stable across versions and platforms, which is what a
/// partition map written to disk needs.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Replaces the file at `path` with `bytes`, durably and whole: a crash
/// leaves the old content or the new, never part of either.
pub fn replace_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let mut f = fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    fs::rename(&tmp, path)?;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    fs::File::open(dir).and_then(|d| d.sync_all())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only this server's CSNs after the backup's newest and before the
    /// restore's own CSN name lost changes.
    #[test]
    fn lost_changes_are_the_restored_servers_between_backup_and_restore() {
        let mut m = Manifest::new(1, vec!["dc=x".into()], "cn=admin,dc=x".into(), String::new());
        let csn = |us: u64, sid: u16| Csn { phys_us: us, logical: 0, sid, partition: 3 };
        m.lost_changes.push([Csn::top_of(100, 1).to_string(), Csn::top_of(200, 1).to_string()]);
        assert_eq!(m.lost_change(csn(150, 1)), Some(Csn::top_of(200, 1)));
        assert_eq!(m.lost_change(csn(200, 1)), Some(Csn::top_of(200, 1)));
        assert_eq!(m.lost_change(Csn::top_of(200, 1)), None);
        for (us, sid) in [(100, 1), (50, 1), (201, 1), (150, 2)] {
            assert_eq!(m.lost_change(csn(us, sid)), None, "{us} {sid}");
        }
        // Through the manifest's file form.
        let text = toml::to_string(&m).unwrap();
        assert_eq!(toml::from_str::<Manifest>(&text).unwrap().lost_change(csn(150, 1)), Some(Csn::top_of(200, 1)));
    }

    #[test]
    fn hash_is_stable() {
        // Known FNV-1a 64 test vectors; changing them moves every entry.
        assert_eq!(fnv1a64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x85944171f73967e8);
    }

    #[test]
    fn save_load() {
        let dir = tempfile::tempdir().unwrap();
        let m = Manifest::new(2, vec!["dc=x".into()], "cn=admin,dc=x".into(), "{SSHA}x".into());
        m.save(dir.path()).unwrap();
        assert_eq!(Manifest::load(dir.path()).unwrap(), Some(m.clone()));
        assert_eq!(m.owners.iter().filter(|o| **o == 0).count(), 128);
    }
}
