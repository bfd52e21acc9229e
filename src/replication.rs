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
//!    in frames of at most `BATCH` records; one frame is in
//!    flight at a time (the flow control) and the receiver acknowledges it
//!    once every record is committed. Idle, the sender sends a heartbeat
//!    every second.
//! 3. The receiver hands each record to its partition's owner
//!    (`WriteOp::Replicate`, `shards::apply`), which drops duplicates, so a
//!    resend after any interruption is harmless; a record whose CSN is too
//!    far ahead is refused and the connection closed with the reason.
//!
//! Records are read from committed snapshots: with `storage.sync =
//! "always"` (the default) only durable records are shipped. Any error
//! closes the connection; the sender reconnects after a second and resumes
//! from the receiver's vector.

use crate::config::Config;
use crate::server::Ctx;
use crate::verify::{self, Verdict};
use anyhow::{anyhow, bail, Result};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use shards::changelog::{self, log_key, ruv_key, Origin, LOG_PREFIX};
use shards::csn::{wall_us, Csn};
use shards::dn::Dn;
use shards::merge::Record;
use shards::moves;
use shards::store::{EngineRead, ReadTxn, Store, Tree};
use shards::write::{be_u64, WriteOp};
use std::collections::BTreeSet;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The channel's protocol (`Facts::protocol`).
const PROTOCOL: u32 = 2;
/// Records per frame.
const BATCH: usize = 512;
/// Largest frame accepted (a frame of big entries).
const MAX_FRAME: usize = 64 << 20;
/// Largest frame before the peer has proved the secret (the handshake).
const MAX_HANDSHAKE: usize = 64 << 10;
const HEARTBEAT: Duration = Duration::from_secs(1);
const POLL: Duration = Duration::from_millis(20);
const RETRY: Duration = Duration::from_secs(1);
/// How soon the same connection error is logged again.
const SAY_AGAIN: Duration = Duration::from_secs(60);

#[derive(Debug, Serialize, Deserialize)]
enum Frame {
    Challenge {
        nonce: [u8; 16],
        facts: Facts,
    },
    Hello {
        proof: Vec<u8>,
        facts: Facts,
    },
    /// Per origin, per partition: the last sequence number held.
    Ruv {
        applied: Vec<(Origin, Vec<u64>)>,
    },
    Refuse {
        reason: String,
    },
    /// (partition, origin, sequence number, record in base64).
    Records {
        records: Vec<(u16, Origin, u64, String)>,
    },
    Ack {
        applied: Vec<(u16, Origin, u64)>,
    },
    Heartbeat {
        backlog: u64,
    },
    /// A resync: entry states of a partition (entryUUID, state in base64),
    /// joined into the receiver's (`WriteOp::Absorb`).
    States {
        partition: u16,
        states: Vec<([u8; 16], String)>,
    },
    /// A resync's end: the positions the states cover, per origin.
    Resynced {
        partition: u16,
        positions: Vec<(Origin, u64)>,
    },
    /// The anti-entropy check (`crate::verify`): the sender asks for the
    /// receiver's digest of a partition (`Digested`: `None` when its
    /// vector moved while it summed).
    Digest {
        partition: u16,
    },
    Digested {
        summary: Option<verify::Summary>,
    },
    /// A divergence report's question: per entry of the partition, its
    /// DN and the head of its hash (answered by `HashList`).
    Hashes {
        partition: u16,
    },
    HashList {
        entries: Vec<(String, String)>,
    },
}

/// What both sides of a pair must agree on, and who they are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Facts {
    server_id: u16,
    incarnation: u32,
    database_id: String,
    partitions: u32,
    hash: String,
    /// The naming contexts served (absent from peers before 2026-12-02).
    #[serde(default)]
    suffixes: Vec<String>,
    /// The channel's protocol: 2 answers `Frame::Digest` and takes
    /// `Change::Conflict` records (0: peers before 2026-12-02).
    #[serde(default)]
    protocol: u32,
}

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
    /// last 100 reasons).
    pub conflicts: Vec<String>,
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
}

/// The status, shared with the admin thread.
#[derive(Default)]
pub struct Shared {
    pub status: Mutex<Status>,
    heard: Mutex<Option<Instant>>,
    /// The channel's TLS, when certificates are pinned (set at start).
    pub tls: std::sync::OnceLock<crate::tls::Channel>,
}

impl Status {
    /// Records a refused record's reason, keeping the last 100.
    fn refused(&mut self, reason: String) {
        if self.conflicts.len() == 100 {
            self.conflicts.remove(0);
        }
        self.conflicts.push(reason);
    }
}

impl Shared {
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
}

fn facts(ctx: &Ctx, config: &Config) -> Facts {
    let m = &ctx.shard.manifest;
    Facts {
        server_id: config.sid(),
        incarnation: m.incarnation,
        database_id: m.database_id.clone(),
        partitions: m.partitions,
        hash: m.hash.clone(),
        suffixes: ctx.suffixes.iter().map(Dn::to_string_form).collect(),
        protocol: PROTOCOL,
    }
}

/// Why a peer's facts rule it out, if they do.
fn mismatch(ours: &Facts, theirs: &Facts) -> Option<String> {
    if theirs.server_id == ours.server_id {
        return Some(format!("the peer has this server's id {}", ours.server_id));
    }
    if theirs.database_id != ours.database_id {
        return Some(format!(
            "the peer holds another database ({} here, {} there); seed it from a backup of this one",
            ours.database_id, theirs.database_id
        ));
    }
    if (theirs.partitions, &theirs.hash) != (ours.partitions, &ours.hash) {
        return Some(format!(
            "the peer partitions differently ({} by {} here, {} by {} there)",
            ours.partitions, ours.hash, theirs.partitions, theirs.hash
        ));
    }
    let contexts = |f: &Facts| -> Vec<Vec<u8>> {
        let mut keys: Vec<Vec<u8>> = f.suffixes.iter().filter_map(|s| Dn::parse(s).ok()).map(|d| d.key()).collect();
        keys.sort();
        keys
    };
    if !theirs.suffixes.is_empty() && contexts(theirs) != contexts(ours) {
        return Some(format!(
            "the peer serves other naming contexts ({} here, {} there); configure the same directory.suffixes",
            ours.suffixes.join("; "),
            theirs.suffixes.join("; ")
        ));
    }
    None
}

fn proof(secret: &str, nonce: &[u8; 16]) -> Vec<u8> {
    let mut h = Sha256::new();
    h.update(b"coredir replication\0");
    h.update(secret.as_bytes());
    h.update(nonce);
    h.finalize().to_vec()
}

/// The channel's byte stream: TCP, or TLS over it.
trait Io: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin {}
impl<T: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin> Io for T {}
type Stream = Box<dyn Io>;

/// A new connection's stream: with `replication.peer_certificate_sha256`,
/// TLS 1.3 with both certificates pinned, before any frame.
async fn secure(tcp: TcpStream, shared: &Shared, inbound: bool) -> Result<Stream> {
    tcp.set_nodelay(true).map_err(|e| anyhow!("{e}"))?;
    let Some(tls) = shared.tls.get() else { return Ok(Box::new(tcp)) };
    Ok(if inbound {
        Box::new(tls.acceptor.accept(tcp).await.map_err(|e| anyhow!("TLS: {e}"))?)
    } else {
        let name = futures_rustls::rustls::pki_types::ServerName::try_from("coredir-peer").expect("a DNS name");
        Box::new(tls.connector.connect(name, tcp).await.map_err(|e| anyhow!("TLS: {e}"))?)
    })
}

async fn send(stream: &mut Stream, frame: &Frame) -> Result<()> {
    let body = serde_json::to_vec(frame)?;
    let mut buf = Vec::with_capacity(body.len() + 4);
    buf.extend_from_slice(&(body.len() as u32).to_be_bytes());
    buf.extend_from_slice(&body);
    stream.write_all(&buf).await?;
    // TLS buffers what it encrypts.
    stream.flush().await?;
    Ok(())
}

async fn recv(stream: &mut Stream, limit: usize) -> Result<Frame> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).await?;
    let n = u32::from_be_bytes(len) as usize;
    if n > limit {
        bail!("a {n}-byte frame is over the {limit}-byte limit");
    }
    let mut body = vec![0u8; n];
    stream.read_exact(&mut body).await?;
    Ok(serde_json::from_slice(&body)?)
}

// ---- Receiving: the peer's changes, applied here.

/// Accepts the peer's connections on `replication.listen` (shard 0).
pub async fn serve(listener: TcpListener, ctx: Rc<Ctx>, config: Arc<Config>, shared: Arc<Shared>) {
    shared.update(|s| s.inbound = "waiting".into());
    let said = Rc::new(std::cell::RefCell::new(Said::default()));
    loop {
        let stream = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("coredir: replication: accept failed: {e}");
                glommio::timer::sleep(RETRY).await;
                continue;
            }
        };
        let (ctx, config, shared, said) = (ctx.clone(), config.clone(), shared.clone(), said.clone());
        glommio::spawn_local(async move {
            let proven = std::cell::Cell::new(false);
            if let Err(e) = receive(stream, &ctx, &config, &shared, &proven).await {
                let msg = format!("{e:#}");
                if said.borrow_mut().should(&msg) {
                    eprintln!("coredir: replication: from the peer: {msg}");
                }
                shared.update(|s| {
                    // One that never proved the secret says nothing of
                    // the peer's stream while that one runs.
                    if proven.get() || s.inbound != "streaming" {
                        if s.inbound != "refused" {
                            s.inbound = "waiting".into();
                        }
                        s.inbound_error = msg;
                    }
                });
            }
        })
        .detach();
    }
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

/// One inbound connection; `proven` is set once the peer proved the secret.
async fn receive(
    tcp: TcpStream,
    ctx: &Ctx,
    config: &Config,
    shared: &Shared,
    proven: &std::cell::Cell<bool>,
) -> Result<()> {
    let applied_total = crate::stats::counter("coredir_replication_records_applied_total", 0, &[]);
    let mut stream = secure(tcp, shared, true).await?;
    let ours = facts(ctx, config);
    let nonce: [u8; 16] = rand::random();
    send(&mut stream, &Frame::Challenge { nonce, facts: ours.clone() }).await?;
    let hello = recv(&mut stream, MAX_HANDSHAKE)
        .await
        .map_err(|e| anyhow!("the peer hung up after the challenge ({e}): see its log"))?;
    let Frame::Hello { proof: given, facts: theirs } = hello else {
        bail!("the peer did not say hello");
    };
    let secret = config.replication.secret.as_deref().unwrap_or_default();
    let why = if given != proof(secret, &nonce) {
        Some("the peer does not hold this server's replication.secret".to_string())
    } else {
        mismatch(&ours, &theirs)
    };
    if let Some(reason) = why {
        shared.update(|s| {
            if s.inbound != "streaming" {
                s.inbound = "refused".into();
            }
            s.refusals += 1;
        });
        send(&mut stream, &Frame::Refuse { reason: reason.clone() }).await?;
        bail!("refused: {reason}");
    }
    proven.set(true);
    send(&mut stream, &Frame::Ruv { applied: vector(ctx)? }).await?;
    shared.update(|s| {
        s.inbound = "streaming".into();
        s.inbound_error.clear();
    });
    shared.heard();
    loop {
        let frame = recv(&mut stream, MAX_FRAME).await?;
        shared.heard();
        match frame {
            Frame::Heartbeat { .. } => {}
            Frame::Records { records } => {
                let n = records.len() as u64;
                match apply_all(ctx, records).await {
                    Ok(applied) => {
                        // Counted before the ack: they are applied whether or not it arrives.
                        applied_total.increment(n);
                        shared.update(|s| s.records_applied += n);
                        send(&mut stream, &Frame::Ack { applied }).await?;
                    }
                    Err(reason) => {
                        let _ = send(&mut stream, &Frame::Refuse { reason: reason.clone() }).await;
                        shared.update(|s| {
                            s.inbound = "refused".into();
                            s.refused(reason.clone());
                        });
                        bail!("{reason}");
                    }
                }
            }
            Frame::States { partition, states } => {
                absorb_all(ctx, partition, states)
                    .await
                    .map_err(|e| anyhow!("resync of partition {partition}: {e}"))?;
                send(&mut stream, &Frame::Ack { applied: vec![] }).await?;
            }
            Frame::Resynced { partition, positions } => {
                let owner = ctx.shard.manifest.owners[partition as usize] as usize;
                ctx.shard
                    .submit_to(owner, WriteOp::Advance { partition, positions })
                    .await
                    .map_err(|e| anyhow!("resync of partition {partition}: {}", e.message))?;
                eprintln!("coredir: replication: partition {partition} resynced from the peer");
                send(&mut stream, &Frame::Ack { applied: vec![] }).await?;
            }
            Frame::Digest { partition } => {
                let summary = verify::summarize(ctx, partition).await?;
                send(&mut stream, &Frame::Digested { summary }).await?;
            }
            Frame::Hashes { partition } => {
                let entries = verify::hashes(ctx, partition).await?;
                send(&mut stream, &Frame::HashList { entries }).await?;
            }
            other => bail!("unexpected {other:?}"),
        }
    }
}

/// Joins a resync's states into a partition, on its owner, then counts
/// children and delivers what the joins moved.
async fn absorb_all(ctx: &Ctx, partition: u16, states: Vec<([u8; 16], String)>) -> Result<()> {
    let shard = &ctx.shard;
    let owner = shard.manifest.owners[partition as usize] as usize;
    let mut tasks = Vec::with_capacity(states.len());
    // Deleted entries: any may still have children here (`crate::glue`).
    let mut deleted = BTreeSet::new();
    for (uuid, text) in states {
        let state = BASE64
            .decode(text.as_bytes())
            .ok()
            .and_then(|b| changelog::decode_state(&b))
            .ok_or_else(|| anyhow!("a state is corrupt"))?;
        if state.deleted.is_some() {
            deleted.insert(uuid);
        }
        let s = shard.clone();
        let op = WriteOp::Absorb { partition, uuid, state: Box::new(state) };
        tasks.push(glommio::spawn_local(async move { s.submit_for(owner, op).await }));
    }
    let mut images = Vec::with_capacity(tasks.len());
    for t in tasks {
        images.extend(t.await.map_err(|e| anyhow!(e.message))?.map(|b| *b));
    }
    settle(ctx, images, &deleted).await.map_err(|e| anyhow!(e.message))
}

/// What follows applying a frame of records or states: the parents' child
/// counts, the deliveries their renames call for, and glue for deleted
/// entries that still have children here. The records stay applied (and
/// are acknowledged) whatever the glue meets: a failure there is said, and
/// the parent stays missing, rather than refusing the frame.
async fn settle(ctx: &Ctx, images: Vec<shards::write::Images>, deleted: &BTreeSet<[u8; 16]>) -> shards::Result<()> {
    let is_top = |d: &Dn| ctx.is_suffix(d);
    let removed = crate::glue::removed(&images, deleted);
    moves::count_children(&ctx.shard, images.into_iter(), &is_top).await;
    // Renamed entries move on to their new partitions.
    moves::deliver(&ctx.shard, &is_top).await?;
    if let Err(e) = crate::glue::keep_parents(ctx, removed).await {
        eprintln!("coredir: replication: keeping a deleted parent as glue: {}", e.message);
    }
    Ok(())
}

/// One read snapshot per store (indexed by shard), taken together for a
/// whole pass over the partitions; never held across an `.await`.
fn snapshots(ctx: &Ctx) -> Result<Vec<EngineRead<'_>>> {
    ctx.shard.stores.iter().map(|s| s.read().map_err(|e| anyhow!(e.message))).collect()
}

/// Every origin the stores hold records of.
fn origins(txns: &[EngineRead<'_>]) -> Result<Vec<Origin>> {
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
fn held(ctx: &Ctx, txns: &[EngineRead<'_>], origin: Origin) -> Result<Vec<u64>> {
    let m = &ctx.shard.manifest;
    (0..m.partitions as u16)
        .map(|p| {
            let txn = &txns[m.owners[p as usize] as usize];
            Ok(txn.get(Tree::Meta, &ruv_key(p, origin)).map_err(|e| anyhow!(e.message))?.map_or(0, be_u64))
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

/// Applies a frame's records on their owners, each partition's in order
/// (one owner's queue is first in, first out), then fixes the parents'
/// child counts; the highest sequence number applied per partition.
async fn apply_all(ctx: &Ctx, records: Vec<(u16, Origin, u64, String)>) -> Result<Vec<(u16, Origin, u64)>, String> {
    let shard = &ctx.shard;
    let mut waiting = Vec::with_capacity(records.len());
    let mut applied: std::collections::BTreeMap<(u16, Origin), u64> = Default::default();
    // Deleted entries: any may still have children here (`crate::glue`).
    let mut deleted = BTreeSet::new();
    for (partition, origin, seq, text) in records {
        let rec = BASE64
            .decode(text.as_bytes())
            .ok()
            .and_then(|b| Record::decode(&b))
            .ok_or_else(|| format!("record {seq} of partition {partition} is corrupt"))?;
        let dn = Dn::parse(&rec.dn).map_err(|e| e.message)?;
        if rec.change == shards::merge::Change::Delete {
            deleted.insert(rec.uuid);
        }
        let owner = shard.owner_of(&dn.key());
        let s = ctx.shard.clone();
        waiting.push((
            dn,
            glommio::spawn_local(async move { s.submit_for(owner, WriteOp::Replicate { origin, seq, rec }).await }),
        ));
        let top = applied.entry((partition, origin)).or_default();
        *top = (*top).max(seq);
    }
    let mut images = Vec::with_capacity(waiting.len());
    for (dn, task) in waiting {
        let outcome = task.await.map_err(|e| format!("{}: {}", dn.to_string_form(), e.message))?;
        images.extend(outcome.map(|b| *b));
    }
    settle(ctx, images, &deleted).await.map_err(|e| e.message)?;
    Ok(applied.into_iter().map(|((p, o), seq)| (p, o, seq)).collect())
}

/// Background work (shard 0) while the changelog is kept: delivering the
/// states renames left in parcels (`shards::moves`) that no one delivered
/// (after a crash, or a failed delivery), holding the changelog to its
/// size cap, and, without a peer (a syncrepl provider alone), trimming it
/// by age (with a peer, the sender trims what the peer holds).
pub async fn housekeeping(ctx: Rc<Ctx>, config: Arc<Config>, shared: Arc<Shared>) {
    let is_top = |d: &Dn| ctx.is_suffix(d);
    let r = &config.replication;
    let (cap, every) = (r.changelog_max_records.unwrap_or(0), Duration::from_secs(r.trim_interval_s.unwrap_or(60)));
    let max_age_us = r.changelog_max_age_s.unwrap_or(7 * 24 * 3600) * 1_000_000;
    let mut trimmed: Option<Instant> = None;
    loop {
        if let Err(e) = moves::deliver(&ctx.shard, &is_top).await {
            eprintln!("coredir: replication: delivering a renamed entry's state: {}", e.message);
        }
        if trimmed.is_none_or(|t| t.elapsed() >= every) {
            trimmed = Some(Instant::now());
            if cap > 0 {
                if let Err(e) = enforce_cap(&ctx, cap, &shared).await {
                    eprintln!("coredir: replication: holding the changelog to its cap: {e:#}");
                }
            }
            if r.peer.is_none() {
                if let Err(e) = trim_by_age(&ctx, wall_us().saturating_sub(max_age_us)).await {
                    eprintln!("coredir: trimming the changelog: {e:#}");
                }
            }
        }
        glommio::timer::sleep(RETRY).await;
    }
}

/// Trims every stream's records older than `older_than_us`.
async fn trim_by_age(ctx: &Ctx, older_than_us: u64) -> Result<()> {
    let streams = all_streams(ctx)?;
    for (partition, origin, _, last) in streams.into_iter().filter(|(_, _, first, last)| first <= last) {
        let op =
            WriteOp::Trim { partition, origin, upto: last, older_than_us, keep_tombstones: false, peer_holds: false };
        let owner = ctx.shard.manifest.owners[partition as usize] as usize;
        ctx.shard.submit_to(owner, op).await.map_err(|e| anyhow!(e.message))?;
    }
    Ok(())
}

/// Every stream of records in every store.
fn all_streams(ctx: &Ctx) -> Result<Vec<changelog::Stream>> {
    let mut all = Vec::new();
    for txn in &snapshots(ctx)? {
        all.extend(changelog::streams(txn).map_err(|e| anyhow!(e.message))?);
    }
    Ok(all)
}

/// Trims the oldest records of every stream, in proportion, when the
/// changelog holds more than `cap`: past what the peer may hold, so the
/// peer is marked lagging (and resynced when it next connects) and the
/// log says so. Deletes keep their tombstones for that resync.
async fn enforce_cap(ctx: &Ctx, cap: u64, shared: &Shared) -> Result<()> {
    let streams = all_streams(ctx)?;
    let count = |&(_, _, first, last): &changelog::Stream| (last + 1).saturating_sub(first);
    let total: u64 = streams.iter().map(count).sum();
    if total <= cap {
        return Ok(());
    }
    let excess = total - cap;
    let mut trimmed = 0;
    for stream in &streams {
        let k = (count(stream) * excess).div_ceil(total).min(count(stream));
        if k == 0 {
            continue;
        }
        let &(partition, origin, first, _) = stream;
        let op = WriteOp::Trim {
            partition,
            origin,
            upto: first + k - 1,
            older_than_us: u64::MAX,
            keep_tombstones: true,
            peer_holds: false,
        };
        let owner = ctx.shard.manifest.owners[partition as usize] as usize;
        ctx.shard.submit_to(owner, op).await.map_err(|e| anyhow!(e.message))?;
        trimmed += k;
    }
    eprintln!(
        "coredir: replication: ALERT: the changelog held {total} records, over replication.changelog_max_records = \
         {cap}; the oldest {trimmed} were trimmed whether or not the peer holds them: a peer that lacks them gets \
         the partitions resynced when it connects"
    );
    crate::stats::counter("coredir_replication_forced_trim_records_total", 0, &[]).increment(trimmed);
    shared.update(|s| {
        s.forced_trims += trimmed;
        s.lagging = true;
        if s.outbound != "refused" {
            s.outbound = "lagging".into();
        }
    });
    Ok(())
}

// ---- Sending: this server's changes, pushed to the peer.

/// Connects to the peer and streams to it, forever (shard 0).
pub async fn push(ctx: Rc<Ctx>, config: Arc<Config>, shared: Arc<Shared>) {
    let peer = config.replication.peer.clone().unwrap_or_default();
    shared.update(|s| s.peer = peer.clone());
    let waiting = |s: &Status| if s.lagging { "lagging" } else { "connecting" }.to_string();
    // What the peer was last known to hold: while it is away, the backlog
    // and lag shown are measured against it, live.
    let mut held = saved_held(&ctx).unwrap_or_else(|e| {
        eprintln!("coredir: replication: reading what the peer last held: {e:#}");
        None
    });
    let mut ages = Ages::default();
    let mut said = Said::default();
    let mut checker =
        verify::Checker::new(config.replication.verify_interval_s.unwrap_or(600), ctx.shard.manifest.partitions);
    loop {
        shared.update(|s| s.outbound = waiting(s));
        if let Err(e) = push_once(&peer, &ctx, &config, &shared, (&mut held, &mut ages), &mut checker).await {
            let msg = format!("{e:#}");
            if said.should(&msg) {
                eprintln!("coredir: replication: to {peer}: {msg}");
            }
            shared.update(|s| {
                if s.outbound != "refused" {
                    s.outbound = waiting(s);
                }
                s.outbound_error = msg;
            });
        }
        if let Some(acked) = &held {
            match snapshots(&ctx).and_then(|txns| pending(&ctx, &txns, acked, &mut ages)) {
                Ok(p) => show(&shared, &p),
                Err(e) => eprintln!("coredir: replication: measuring the backlog: {e:#}"),
            }
        }
        glommio::timer::sleep(RETRY).await;
    }
}

/// Per origin, per partition: the last sequence number the peer holds.
type Vector = std::collections::BTreeMap<Origin, Vec<u64>>;

/// What the peer was known to hold when the sender last trimmed (saved by
/// `WriteOp::Trim`), from each partition's owner; `None` if never.
fn saved_held(ctx: &Ctx) -> Result<Option<Vector>> {
    let (txns, m) = (snapshots(ctx)?, &ctx.shard.manifest);
    let mut v = Vector::new();
    for (i, txn) in txns.iter().enumerate() {
        for (p, origin, seq) in changelog::peer_held(txn).map_err(|e| anyhow!(e.message))? {
            if m.owners.get(p as usize).is_some_and(|&o| o as usize == i) {
                v.entry(origin).or_insert_with(|| vec![0; m.partitions as usize])[p as usize] = seq;
            }
        }
    }
    Ok((!v.is_empty()).then_some(v))
}

/// Per stream (partition, origin): when this server first saw it reach a
/// position, sampled whenever the sender looks (at least every second):
/// the lag's own clock. A CSN does not tell time once the clock adopted a
/// peer's stamps from ahead: its physical part then stands still until
/// the wall clock catches up, so the lag shown is the larger of the
/// oldest pending record's CSN age and the time since a record above
/// what the peer holds was first seen here.
#[derive(Default)]
struct Ages(std::collections::BTreeMap<(u16, Origin), std::collections::VecDeque<(u64, Instant)>>);

/// Samples kept per stream; past it, every other one goes (a long
/// outage's lag is then told at a coarser grain, never without bound).
const AGE_SAMPLES: usize = 64;

impl Ages {
    /// Notes that a stream holds `have` records now, forgets what the
    /// peer holds (`done`): when the first record above `done` was seen.
    fn note(&mut self, stream: (u16, Origin), have: u64, done: u64, now: Instant) -> Option<Instant> {
        if have <= done {
            self.0.remove(&stream);
            return None;
        }
        let q = self.0.entry(stream).or_default();
        if q.back().is_none_or(|&(seq, _)| seq < have) {
            q.push_back((have, now));
            if q.len() > AGE_SAMPLES {
                let last = q.len() - 1;
                *q = q.iter().enumerate().filter(|&(i, _)| i % 2 == 0 || i == last).map(|(_, x)| *x).collect();
            }
        }
        while q.len() > 1 && q[1].0 <= done {
            q.pop_front();
        }
        // The front sample may be at or below `done`: the record after
        // it was seen by the next one.
        let i = usize::from(q[0].0 <= done);
        q.get(i).map(|&(_, t)| t)
    }
}

/// The backlog and lag of what the peer lacks, in the status and metrics.
fn show(shared: &Shared, p: &Pending) {
    let by_csn = p.oldest.map_or(0.0, |c| wall_us().saturating_sub(c.phys_us) as f64 / 1e6);
    let lag_s = by_csn.max(p.seen.map_or(0.0, |t| t.elapsed().as_secs_f64()));
    crate::stats::gauge("coredir_replication_lag_seconds", 0).set(lag_s);
    crate::stats::gauge("coredir_replication_backlog_records", 0).set(p.backlog as f64);
    shared.update(|s| {
        s.backlog = p.backlog;
        s.backlog_by_partition = p.by_partition.clone();
        s.lag_s = lag_s;
    });
}

async fn push_once(
    peer: &str,
    ctx: &Ctx,
    config: &Config,
    shared: &Shared,
    (held, ages): (&mut Option<Vector>, &mut Ages),
    checker: &mut verify::Checker,
) -> Result<()> {
    let tcp = TcpStream::connect(peer).await.map_err(|e| anyhow!("connecting: {e}"))?;
    // A peer on this host whose port lies in the ephemeral range can be
    // "reached" while it is down: the kernel may give the connecting socket
    // that very port, and the socket connects to itself. Holding it would
    // keep the peer from binding its port when it comes back.
    if tcp.local_addr().ok().is_some_and(|ours| tcp.peer_addr().ok() == Some(ours)) {
        // Closed with a reset, not into TIME_WAIT: a socket in TIME_WAIT on
        // that port (bound without SO_REUSEADDR) would still keep the peer
        // from binding it for a minute.
        // SAFETY: the descriptor stays open while `tcp` lives, past this use.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(std::os::fd::AsRawFd::as_raw_fd(&tcp)) };
        let _ = socket2::SockRef::from(&fd).set_linger(Some(std::time::Duration::ZERO));
        bail!("connecting: the socket connected to itself (the peer is down)");
    }
    let mut stream = secure(tcp, shared, false).await?;
    let ours = facts(ctx, config);
    let Frame::Challenge { nonce, facts: theirs } = recv(&mut stream, MAX_HANDSHAKE).await? else {
        bail!("the peer did not challenge");
    };
    if let Some(reason) = mismatch(&ours, &theirs) {
        shared.update(|s| s.outbound = "refused".into());
        bail!("not sending: {reason}");
    }
    let secret = config.replication.secret.as_deref().unwrap_or_default();
    send(&mut stream, &Frame::Hello { proof: proof(secret, &nonce), facts: ours.clone() }).await?;
    let theirs_now = Origin { sid: theirs.server_id, incarnation: theirs.incarnation };
    let mut acked: std::collections::BTreeMap<Origin, Vec<u64>> = match recv(&mut stream, MAX_FRAME).await? {
        Frame::Ruv { applied } if applied.iter().all(|(_, v)| v.len() == ours.partitions as usize) => {
            applied.into_iter().collect()
        }
        Frame::Refuse { reason } => {
            shared.update(|s| s.outbound = "refused".into());
            bail!("the peer refused: {reason}");
        }
        other => bail!("unexpected {other:?}"),
    };
    // The receiver's own changes are not offered back to it.
    acked.remove(&theirs_now);
    shared.update(|s| {
        s.outbound = "catching-up".into();
        s.outbound_error.clear();
    });
    let sent_total = crate::stats::counter("coredir_replication_records_sent_total", 0, &[]);
    let mut last_sent = Instant::now();
    let mut last_trim = Instant::now();
    let r = &config.replication;
    let trim_every = Duration::from_secs(r.trim_interval_s.unwrap_or(60));
    let max_age_us = r.changelog_max_age_s.unwrap_or(7 * 24 * 3600) * 1_000_000;
    loop {
        if last_trim.elapsed() >= trim_every {
            last_trim = Instant::now();
            trim(ctx, &acked, theirs_now, wall_us().saturating_sub(max_age_us)).await?;
        }
        let p = {
            let txns = snapshots(ctx)?;
            // What to offer: every origin held here but the receiver's own.
            for o in origins(&txns)?.into_iter().filter(|o| *o != theirs_now) {
                acked.entry(o).or_insert_with(|| vec![0; ours.partitions as usize]);
            }
            pending(ctx, &txns, &acked, ages)?
        };
        *held = Some(acked.clone());
        if !p.gaps.is_empty() {
            for &partition in &p.gaps {
                resync(&mut stream, ctx, partition, &mut acked, shared).await?;
            }
            continue;
        }
        // Nothing the peer needs is trimmed: whatever a forced trim took, it held.
        shared.update(|s| s.lagging = false);
        show(shared, &p);
        let (mut batch, backlog) = (p.batch, p.backlog);
        if theirs.protocol < 2 {
            downgrade(&mut batch);
        }
        shared.update(|s| {
            if backlog == 0 {
                s.outbound = "streaming".into();
            } else if s.outbound == "lagging" || s.outbound == "resyncing" {
                s.outbound = "catching-up".into();
            }
        });
        if batch.is_empty() {
            if let Some(partition) = checker.due().filter(|_| theirs.protocol >= 2) {
                check(&mut stream, ctx, partition, checker, &mut acked, shared).await?;
                continue;
            }
            if last_sent.elapsed() >= HEARTBEAT {
                send(&mut stream, &Frame::Heartbeat { backlog: 0 }).await?;
                last_sent = Instant::now();
            }
            glommio::timer::sleep(POLL).await;
            continue;
        }
        let n = batch.len() as u64;
        send(&mut stream, &Frame::Records { records: batch }).await?;
        last_sent = Instant::now();
        for (p, origin, seq) in await_ack(&mut stream, shared).await? {
            if let Some(a) = acked.get_mut(&origin).and_then(|v| v.get_mut(p as usize)) {
                *a = (*a).max(seq);
            }
        }
        sent_total.increment(n);
        shared.update(|s| s.records_sent += n);
    }
}

/// Compares a partition's digest with the peer's (`crate::verify`), and
/// resyncs it to the peer once it has diverged for sure.
async fn check(
    stream: &mut Stream,
    ctx: &Ctx,
    partition: u16,
    checker: &mut verify::Checker,
    acked: &mut std::collections::BTreeMap<Origin, Vec<u64>>,
    shared: &Shared,
) -> Result<()> {
    let checked = |verdict: Verdict| {
        let result = match verdict {
            Verdict::Agree => "agree",
            Verdict::Unsettled => "unsettled",
            Verdict::Differs => "differ",
        };
        crate::stats::counter("coredir_replication_digest_checks_total", 0, &[("result", result)]).increment(1);
        shared.update(|s| match verdict {
            Verdict::Agree => s.partitions_verified += 1,
            Verdict::Unsettled => s.verify_unsettled += 1,
            Verdict::Differs => {}
        });
    };
    let Some(ours) = verify::summarize(ctx, partition).await? else {
        checker.diverged(partition, Verdict::Unsettled, &Vec::new());
        checked(Verdict::Unsettled);
        return Ok(());
    };
    send(stream, &Frame::Digest { partition }).await?;
    let theirs = match recv(stream, MAX_FRAME).await? {
        Frame::Digested { summary } => summary,
        other => bail!("unexpected {other:?}"),
    };
    shared.heard();
    let verdict = verify::judge(Some(&ours), theirs.as_ref());
    checked(verdict);
    if !checker.diverged(partition, verdict, &ours.vector) {
        return Ok(());
    }
    let theirs = theirs.map(|t| t.digest).unwrap_or_default();
    send(stream, &Frame::Hashes { partition }).await?;
    let Frame::HashList { entries } = recv(stream, MAX_FRAME).await? else {
        bail!("the peer did not list its entries");
    };
    let which = verify::differences(&verify::hashes(ctx, partition).await?, &entries);
    let what = format!(
        "partition {partition} shows other entries than the peer's at the same replica update vector \
         (digest {} here, {theirs} there: {which})",
        ours.digest
    );
    if !checker.worth_a_resync(partition, &ours.digest, &theirs) {
        eprintln!("coredir: replication: ALERT: {what}: a resync did not mend it; not resyncing it again");
        return Ok(());
    }
    eprintln!("coredir: replication: ALERT: {what}: resyncing it to the peer");
    crate::stats::counter("coredir_replication_divergences_total", 0, &[]).increment(1);
    shared.update(|s| {
        s.divergences += 1;
        s.last_divergence = format!("{what} (at unix time {})", crate::server::unix_now());
    });
    resync(stream, ctx, partition, acked, shared).await
}

/// For a peer before protocol 2, which cannot read a `Change::Conflict`:
/// an empty modify in its place keeps the sequence unbroken (that peer
/// then marks only the conflicts it sees itself, as it always did).
fn downgrade(batch: &mut [(u16, Origin, u64, String)]) {
    for (_, _, _, text) in batch {
        let rec = BASE64.decode(text.as_bytes()).ok().and_then(|b| Record::decode(&b));
        if let Some(mut rec) = rec.filter(|r| matches!(r.change, shards::merge::Change::Conflict { .. })) {
            rec.change = shards::merge::Change::Modify { deltas: vec![] };
            let mut buf = Vec::new();
            rec.encode(&mut buf);
            *text = BASE64.encode(buf);
        }
    }
}

/// The peer's acknowledgement of the last frame: what it applied.
async fn await_ack(stream: &mut Stream, shared: &Shared) -> Result<Vec<(u16, Origin, u64)>> {
    match recv(stream, MAX_FRAME).await? {
        Frame::Ack { applied } => {
            shared.heard();
            Ok(applied)
        }
        Frame::Refuse { reason } => {
            shared.update(|s| {
                s.outbound = "refused".into();
                s.refused(reason.clone());
            });
            bail!("the peer refused a record: {reason}");
        }
        other => bail!("unexpected {other:?}"),
    }
}

/// Sends a partition whole, as the states of its entries, to a peer whose
/// position lies before what the changelog still holds (the size cap
/// trimmed it, or the peer was restored from an old backup). The peer
/// joins them into its own (a merge: what it holds that this server does
/// not stays), then moves its vector to the positions the states cover;
/// the stream goes on from there.
async fn resync(
    stream: &mut Stream,
    ctx: &Ctx,
    partition: u16,
    acked: &mut std::collections::BTreeMap<Origin, Vec<u64>>,
    shared: &Shared,
) -> Result<()> {
    shared.update(|s| s.outbound = "resyncing".into());
    let (states, positions) = {
        let txn = ctx.shard.stores[ctx.shard.manifest.owners[partition as usize] as usize]
            .read()
            .map_err(|e| anyhow!(e.message))?;
        let states = changelog::partition_states(&txn, partition).map_err(|e| anyhow!(e.message))?;
        (states, changelog::positions(&txn, partition).map_err(|e| anyhow!(e.message))?)
    };
    eprintln!(
        "coredir: replication: the peer is behind the changelog of partition {partition}: resyncing it ({} entries)",
        states.len()
    );
    for chunk in states.chunks(BATCH) {
        let states = chunk.iter().map(|(uuid, b)| (*uuid, BASE64.encode(b))).collect();
        send(stream, &Frame::States { partition, states }).await?;
        await_ack(stream, shared).await?;
    }
    send(stream, &Frame::Resynced { partition, positions: positions.clone() }).await?;
    await_ack(stream, shared).await?;
    for (origin, seq) in positions {
        if let Some(a) = acked.get_mut(&origin).and_then(|v| v.get_mut(partition as usize)) {
            *a = (*a).max(seq);
        }
    }
    shared.update(|s| s.partitions_resynced += 1);
    Ok(())
}

/// Trims, on every partition's owner, the records older than
/// `older_than_us` that the peer holds: up to its acknowledged positions,
/// and all of its own origin's.
async fn trim(
    ctx: &Ctx,
    acked: &std::collections::BTreeMap<Origin, Vec<u64>>,
    theirs: Origin,
    older_than_us: u64,
) -> Result<()> {
    let shard = &ctx.shard;
    // What the peer acknowledged is saved for the backlog after a restart;
    // its own records are not counted as its backlog.
    let mut ops = Vec::new();
    for (&origin, positions) in acked {
        for (p, &upto) in positions.iter().enumerate().filter(|(_, &u)| u > 0) {
            ops.push((p as u16, origin, upto, true));
        }
    }
    let theirs_held = held(ctx, &snapshots(ctx)?, theirs)?;
    for (p, &have) in theirs_held.iter().enumerate().filter(|(_, &h)| h > 0) {
        ops.push((p as u16, theirs, have, false));
    }
    for (partition, origin, upto, peer_holds) in ops {
        let owner = shard.manifest.owners[partition as usize] as usize;
        let op = WriteOp::Trim { partition, origin, upto, older_than_us, keep_tombstones: false, peer_holds };
        shard.submit_to(owner, op).await.map_err(|e| anyhow!("trimming the changelog: {}", e.message))?;
    }
    Ok(())
}

/// What the sender has for the peer.
struct Pending {
    /// The next frame's records (above what the peer holds, oldest CSN first).
    batch: Vec<(u16, Origin, u64, String)>,
    /// How many records are pending in all.
    backlog: u64,
    /// And per partition (those with any).
    by_partition: Vec<(u16, u64)>,
    /// The oldest pending record's CSN.
    oldest: Option<Csn>,
    /// When the first pending record was first seen (`Ages`).
    seen: Option<Instant>,
    /// Partitions where the next record the peer needs is trimmed already.
    gaps: Vec<u16>,
}

fn pending(
    ctx: &Ctx,
    txns: &[EngineRead<'_>],
    acked: &std::collections::BTreeMap<Origin, Vec<u64>>,
    ages: &mut Ages,
) -> Result<Pending> {
    let owners = &ctx.shard.manifest.owners;
    let (now, mut seen) = (Instant::now(), None::<Instant>);
    let mut all: Vec<(Csn, u16, Origin, u64, Vec<u8>)> = Vec::new();
    let mut backlog = 0u64;
    let mut gaps = Vec::new();
    let mut by_partition = std::collections::BTreeMap::<u16, u64>::new();
    for (&origin, positions) in acked {
        for (p, &done) in positions.iter().enumerate() {
            let p = p as u16;
            let txn = &txns[owners[p as usize] as usize];
            let have = txn.get(Tree::Meta, &ruv_key(p, origin)).map_err(|e| anyhow!(e.message))?.map_or(0, be_u64);
            let Some(first_seen) = ages.note((p, origin), have, done, now) else { continue };
            seen = Some(seen.map_or(first_seen, |s| s.min(first_seen)));
            let from = log_key(p, origin, done + 1);
            let (mut taken, mut gap) = (0, true);
            txn.scan(Tree::Changelog, &from[..LOG_PREFIX], &from, &mut |k, v| {
                let seq = be_u64(&k[LOG_PREFIX..]);
                if taken == 0 && seq != done + 1 {
                    return false;
                }
                gap = false;
                let csn = changelog::record_csn(v).unwrap_or_default();
                all.push((csn, p, origin, seq, v.to_vec()));
                taken += 1;
                taken < BATCH
            })
            .map_err(|e| anyhow!(e.message))?;
            if gap {
                if !gaps.contains(&p) {
                    gaps.push(p);
                }
                continue;
            }
            // Exact while short; past a frame, the positions tell.
            let behind = if taken < BATCH { taken as u64 } else { have - done };
            backlog += behind;
            *by_partition.entry(p).or_default() += behind;
        }
    }
    all.sort_by_key(|r| r.0);
    let oldest = all.first().map(|r| r.0);
    // Within a partition and origin, sequence order is CSN order: cutting
    // the sorted list leaves no gap in any of them.
    all.truncate(BATCH);
    let batch = all.into_iter().map(|(_, p, o, s, v)| (p, o, s, BASE64.encode(v))).collect();
    let by_partition = by_partition.into_iter().filter(|(_, n)| *n > 0).collect();
    Ok(Pending { batch, backlog, by_partition, oldest, seen, gaps })
}
