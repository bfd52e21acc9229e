//! Mirror mode's channel: this server pushes its own changes to its peer,
//! and applies the peer's.
//!
//! Each direction is one TCP connection from the sender to the receiver's
//! `replication.listen`, served on shard 0's reactor:
//!
//! 1. The receiver speaks first: `Challenge` (a nonce, its server id,
//!    database id, partition count and hash). The sender refuses a peer
//!    with another database or partitioning, or its own server id; else it
//!    answers `Hello` with the same facts and SHA-256(secret, nonce). The
//!    receiver checks them the same way and answers `Ruv`: for every
//!    origin (server id and incarnation) and partition, the last sequence
//!    number it holds (the replica update vector), or `Refuse` with the
//!    reason.
//! 2. The sender streams its changelog records above those positions:
//!    its own, and those of any other origin except the receiver's current
//!    one (a restored receiver gets back what it lost), of every
//!    partition, oldest CSN first (a parent's add before its children's),
//!    in frames of `BATCH` records, or more to hold a subtree move whole
//!    (`sender::whole_moves`); one frame is in
//!    flight at a time (the flow control) and the receiver acknowledges it
//!    once every record is committed. Idle, the sender sends a heartbeat
//!    every second.
//! 3. The receiver hands each record to its partition's owner
//!    (`Shard::replicate`, `shards::apply`), which drops duplicates, so a
//!    resend after any interruption is harmless; a record whose CSN is too
//!    far ahead is refused and the connection closed with the reason.
//!
//! Records are read from committed snapshots: with `storage.sync =
//! "always"` (the default) only durable records are shipped. Any error
//! closes the connection; the sender reconnects after a second and resumes
//! from the receiver's vector.
//!
//! Files: `protocol` (frames, the facts both sides check, framing),
//! `receiver` (the peer's changes applied here), `sender` (this server's
//! changes pushed, resyncs, anti-entropy checks, trimming what the peer
//! holds), `housekeeping` (parcels, the size cap, trimming without a
//! peer). The status, the replica update vector and what both directions
//! share live here, with what the peer settled here (kept in the data
//! directory as `replication-settled`, so that syncrepl cookies may claim
//! it after a restart).

mod housekeeping;
mod protocol;
mod receiver;
mod sender;

pub use housekeeping::housekeeping;
pub use receiver::serve;
pub use sender::push;

use crate::config::Config;
use crate::ctx::Ctx;
use crate::verify::{self, Verdict};
use anyhow::{anyhow, bail, Result};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use shards::changelog::{self, Origin};
use shards::csn::{wall_us, Csn};
use shards::dn::Dn;
use shards::merge::Record;
use shards::moves;
use shards::stores::Read;
use shards::writes::Trim;
use std::collections::BTreeSet;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The channel's protocol (`Facts::protocol`).
const PROTOCOL: u32 = 3;
/// Records per frame.
const BATCH: usize = 512;
/// Largest frame accepted (a frame of big entries).
const MAX_FRAME: usize = 64 << 20;
/// Largest frame before the peer has proved the secret (the handshake).
const MAX_HANDSHAKE: usize = 64 << 10;
const HEARTBEAT: Duration = Duration::from_secs(1);
/// An idle sender waits for a commit, or for its next heartbeat; woken by
/// a stream of commits, it makes `BURST` rounds at once, then one per
/// `POLL` (`shards::shard::Pace`).
const POLL: Duration = Duration::from_millis(20);
/// How soon the sender looks again while a rename running here holds
/// this server's changes back (its end commits nothing to wake it).
const HELD_POLL: Duration = Duration::from_millis(10);
const BURST: u32 = 4;
const RETRY: Duration = Duration::from_secs(1);
/// How soon the same connection error is logged again.
const SAY_AGAIN: Duration = Duration::from_secs(60);

/// What `coredir ctl replication` shows, per direction.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Status {
    pub peer: String,
    /// Sending: connecting, catching-up, streaming, lagging (the size cap
    /// trimmed records the peer may lack), resyncing, refused.
    pub outbound: String,
    /// Receiving: waiting, streaming, refused.
    pub inbound: String,
    /// Why the last outbound connection ended or was refused.
    pub outbound_error: String,
    /// Why the last inbound connection ended or was refused.
    pub inbound_error: String,
    pub records_sent: u64,
    pub records_applied: u64,
    /// Records committed here and not yet acknowledged by the peer.
    pub backlog: u64,
    /// The same per partition: (partition, records), those with any.
    pub backlog_by_partition: Vec<(u16, u64)>,
    /// Age of the oldest unacknowledged change (0 when none).
    pub lag_s: f64,
    /// Seconds since the peer was last heard from (a frame or heartbeat).
    pub peer_silent_s: f64,
    /// Records the peer refused or that could not be applied here (the
    /// last 100 reasons). Not conflict entries: `ctl replication
    /// conflicts` lists those. Read as `conflicts` from an older server.
    #[serde(default, alias = "conflicts")]
    pub refused: Vec<String>,
    /// Records in this server's changelog (all origins).
    pub changelog_records: u64,
    /// Records the size cap trimmed before the peer was known to hold them.
    pub forced_trims: u64,
    /// Whether a forced trim left the peer needing a resync.
    pub lagging: bool,
    /// Partitions resynced to the peer (sent whole, as states).
    pub partitions_resynced: u64,
    /// Inbound connections refused (wrong secret, another database, ...).
    #[serde(default)]
    pub refusals: u64,
    /// Anti-entropy (`crate::verify`): partition checks that agreed, that
    /// gave no verdict (records in flight), and divergences found (each
    /// then resynced), with the last one's description.
    #[serde(default)]
    pub partitions_verified: u64,
    #[serde(default)]
    pub verify_unsettled: u64,
    #[serde(default)]
    pub divergences: u64,
    #[serde(default)]
    pub last_divergence: String,
    /// The CSN up to which every change of the peer is committed here, as
    /// kept in the data directory: what syncrepl cookies may claim of the
    /// peer, from the start, before it is back (empty: nothing yet).
    #[serde(default)]
    pub peer_settled: String,
}

/// The peer's settled CSN as kept in `SETTLED_FILE`.
#[derive(Default)]
struct Kept {
    /// Written, or read at start.
    csn: Option<Csn>,
    /// To write: the settled CSN once the last frame of records applied.
    want: Option<Csn>,
    /// Commits are durable when acknowledged (`storage.sync = "always"`):
    /// only then may the file speak for them.
    durable: bool,
    writing: bool,
    /// Records were applied since the last heartbeat: the settled CSN the
    /// next one carries covers them (a frame's own may not).
    applied: bool,
    /// The last write failed (said once, until one succeeds).
    failing: bool,
}

/// In the data directory: the peer's CSN up to which every one of its
/// changes is committed here, written after the commits it speaks of.
const SETTLED_FILE: &str = "replication-settled";

/// The most of `SETTLED_FILE` read: a CSN and a newline.
const SETTLED_MOST: u64 = 64;

/// What this server knows of its link to the peer: the status (shared
/// with the admin thread), when it last heard from it, what of its
/// changes is settled here, and the channel's TLS.
#[derive(Default)]
pub struct Link {
    pub status: Mutex<Status>,
    heard: Mutex<Option<Instant>>,
    /// The peer's server id and protocol, once it has said hello, and the
    /// CSN up to which every change of the peer is committed here
    /// (`Frame::Records::settled`): what a syncrepl cookie may claim of it.
    settled: Mutex<(Option<(u16, u32)>, Option<Csn>)>,
    /// What of `settled` is kept in the data directory (`keep_settled`).
    kept: Mutex<Kept>,
    /// The channel's TLS, when certificates are pinned (set at start).
    pub tls: std::sync::OnceLock<crate::tls::Channel>,
}

impl Status {
    /// Records a refused record's reason, keeping the last 100.
    fn note_refused(&mut self, reason: String) {
        if self.refused.len() == 100 {
            self.refused.remove(0);
        }
        self.refused.push(reason);
    }
}

impl Link {
    pub fn snapshot(&self) -> Status {
        let mut s = self.status.lock().unwrap_or_else(|e| e.into_inner()).clone();
        s.peer_silent_s =
            self.heard.lock().unwrap_or_else(|e| e.into_inner()).map_or(-1.0, |t| t.elapsed().as_secs_f64());
        s
    }
    fn update(&self, f: impl FnOnce(&mut Status)) {
        f(&mut self.status.lock().unwrap_or_else(|e| e.into_inner()));
    }
    fn heard(&self) {
        *self.heard.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
    }

    /// Notes the peer's server id and protocol (its hello).
    fn met(&self, sid: u16, protocol: u32) {
        let mut settled = self.settled.lock().unwrap_or_else(|e| e.into_inner());
        if settled.0.is_some_and(|(known, _)| known != sid) {
            settled.1 = None;
            // Another peer: what was kept of the one before is not its.
            let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
            (kept.csn, kept.want) = (None, None);
            self.update(|s| s.peer_settled.clear());
        }
        settled.0 = Some((sid, protocol));
    }

    /// Takes the peer's word that every change of its own up to `csn` is
    /// committed here (only once it is).
    fn settle(&self, csn: Option<&str>) {
        let Some(csn) = csn.and_then(Csn::parse) else { return };
        let mut settled = self.settled.lock().unwrap_or_else(|e| e.into_inner());
        if settled.0.is_some_and(|(sid, _)| sid == csn.sid) {
            settled.1 = Some(settled.1.map_or(csn, |c| c.max(csn)));
        }
    }

    /// Takes what the peer had settled here when this server last ran
    /// (`keep_settled`): a fact of this server's data, so syncrepl cookies
    /// may claim it before the peer says hello again. Without it a refresh
    /// after a restart named no CSN of the peer, and slapd deletes only
    /// entries whose `entryCSN` the cookie covers at the end of a present
    /// phase: what the peer had added and this server deleted stayed.
    /// `own`: this server's id (a file naming it came from elsewhere);
    /// `durable`: whether commits are durable when acknowledged, without
    /// which none is written (an old one still holds: it claims less).
    pub fn load_settled(&self, data: &std::path::Path, own: u16, durable: bool) {
        self.kept.lock().unwrap_or_else(|e| e.into_inner()).durable = durable;
        let path = data.join(SETTLED_FILE);
        let mut text = String::new();
        let read = std::fs::File::open(&path)
            .and_then(|f| std::io::Read::read_to_string(&mut std::io::Read::take(f, SETTLED_MOST), &mut text));
        let csn = match read {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(e) => Err(e.to_string()),
            Ok(_) => match Csn::parse(text.trim()) {
                Some(csn) if csn.sid == own => Err(format!("it names this server's own id {own:03x}")),
                Some(csn) => Ok(csn),
                None => Err("it holds no CSN".into()),
            },
        };
        match csn {
            Ok(csn) => {
                *self.settled.lock().unwrap_or_else(|e| e.into_inner()) = (Some((csn.sid, PROTOCOL)), Some(csn));
                self.kept.lock().unwrap_or_else(|e| e.into_inner()).csn = Some(csn);
                self.update(|s| s.peer_settled = csn.to_string());
            }
            Err(why) => eprintln!(
                "coredir: replication: {} is not used ({why}); nothing of the peer is claimed until it says",
                path.display()
            ),
        }
    }

    /// After a frame of records is committed (`records`), and at the next
    /// heartbeat after one: the settled CSN is written to the data
    /// directory, off the reactor and without holding up the frame's
    /// acknowledgement, one write at a time (the last value wins). An idle
    /// peer's heartbeats move it on too, but claim no more records: no write.
    fn keep_settled(self: &Arc<Self>, data: &std::path::Path, records: bool) {
        let Some(csn) = self.settled.lock().unwrap_or_else(|e| e.into_inner()).1 else { return };
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if !kept.durable || !std::mem::replace(&mut kept.applied, records) && !records {
            return;
        }
        kept.want = Some(csn);
        if kept.writing {
            return;
        }
        kept.writing = true;
        // glommio runs a task it spawns at once, up to its first wait.
        drop(kept);
        let (shared, path) = (self.clone(), data.join(SETTLED_FILE));
        glommio::spawn_local(async move { shared.write_kept(path).await }).detach();
    }

    async fn write_kept(&self, path: std::path::PathBuf) {
        loop {
            let csn = {
                let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
                match kept.want {
                    Some(want) if kept.csn.is_none_or(|had| had.sid != want.sid || had < want) => want,
                    _ => {
                        kept.writing = false;
                        return;
                    }
                }
            };
            let text = csn.to_string();
            let written = {
                let (path, text) = (path.clone(), text.clone());
                glommio::executor().spawn_blocking(move || shards::manifest::replace_file(&path, text.as_bytes())).await
            };
            let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
            match written {
                Ok(()) => {
                    (kept.csn, kept.failing) = (Some(csn), false);
                    self.update(|s| s.peer_settled = text);
                }
                Err(e) => {
                    if !kept.failing {
                        eprintln!(
                            "coredir: replication: writing {}: {e} (a restart forgets what the peer settled)",
                            path.display()
                        );
                    }
                    kept.failing = true;
                    kept.writing = false;
                    return;
                }
            }
        }
    }

    /// What a syncrepl cookie may claim of the peer (see `settled`).
    pub fn peer_claim(&self) -> PeerClaim {
        match *self.settled.lock().unwrap_or_else(|e| e.into_inner()) {
            (None, _) => PeerClaim::Unknown,
            // A peer before protocol 3 never says: nothing of it is claimed
            // (a refresh is then a present phase, its entries read whole).
            (Some((sid, protocol)), _) if protocol < 3 => PeerClaim::Peer { sid, upto: None, quiet: false },
            (Some((sid, _)), upto) => PeerClaim::Peer { sid, upto, quiet: false },
        }
    }
}

/// What a syncrepl cookie may claim of the mirror peer.
#[derive(Debug, Clone, Copy)]
pub enum PeerClaim {
    /// The peer has not said hello since this server started: no server id
    /// but this one's may be claimed beyond what the consumer holds.
    Unknown,
    /// Of server `sid`, up to `upto` (none yet: nothing more). `quiet`:
    /// no change of it is here, none ever was (syncrepl's to say: the
    /// replication link does not read the changelog).
    Peer { sid: u16, upto: Option<Csn>, quiet: bool },
}

/// Connection errors said on stderr: the same one at most once a minute
/// (a peer refused every second), any at most once a second (a stranger
/// can vary the text of the errors it causes).
#[derive(Default)]
struct Said {
    last: String,
    at: Option<Instant>,
}

impl Said {
    fn should(&mut self, msg: &str) -> bool {
        let wait = if msg == self.last { SAY_AGAIN } else { Duration::from_secs(1) };
        if self.at.is_some_and(|t| t.elapsed() < wait) {
            return false;
        }
        (self.last, self.at) = (msg.to_string(), Some(Instant::now()));
        true
    }
}

/// One read snapshot per store (indexed by shard), taken together for a
/// whole pass over the partitions; never held across an `.await`.
fn snapshots(ctx: &Ctx) -> Result<Vec<Read<'_>>> {
    ctx.shard.stores.iter().map(|s| s.read().map_err(|e| anyhow!(e.message))).collect()
}

/// Every origin the stores hold records of.
fn origins(txns: &[Read<'_>]) -> Result<Vec<Origin>> {
    let mut out = Vec::new();
    for txn in txns {
        for o in changelog::origins(txn).map_err(|e| anyhow!(e.message))? {
            if !out.contains(&o) {
                out.push(o);
            }
        }
    }
    Ok(out)
}

/// Per partition, the last sequence number of `origin` held here (from the
/// partition owner's `meta`).
fn held(ctx: &Ctx, txns: &[Read<'_>], origin: Origin) -> Result<Vec<u64>> {
    let m = &ctx.shard.manifest;
    (0..m.partitions as u16)
        .map(|p| {
            let txn = &txns[owner(ctx, p)];
            changelog::held(txn, p, origin).map_err(|e| anyhow!(e.message))
        })
        .collect()
}

/// The replica update vector: for every origin held, per partition, the
/// last sequence number held; in origin order, origins with none held
/// left out, so that two servers holding the same records show the same
/// (`crate::verify`).
pub(crate) fn vector(ctx: &Ctx) -> Result<Vec<(Origin, Vec<u64>)>> {
    let txns = snapshots(ctx)?;
    let mut v: Vec<(Origin, Vec<u64>)> =
        origins(&txns)?.into_iter().map(|o| Ok((o, held(ctx, &txns, o)?))).collect::<Result<_>>()?;
    v.retain(|(_, seqs)| seqs.iter().any(|&s| s > 0));
    v.sort_by_key(|(o, _)| *o);
    Ok(v)
}

/// The shard that owns `partition`.
fn owner(ctx: &Ctx, partition: u16) -> usize {
    ctx.shard.manifest.owner_of_partition(partition as u32)
}
