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
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Records per frame.
const BATCH: usize = 512;
/// Largest frame accepted (a frame of big entries).
const MAX_FRAME: usize = 64 << 20;
/// Largest frame before the peer has proved the secret (the handshake).
const MAX_HANDSHAKE: usize = 64 << 10;
const HEARTBEAT: Duration = Duration::from_secs(1);
const POLL: Duration = Duration::from_millis(20);
const RETRY: Duration = Duration::from_secs(1);

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
}

/// What both sides of a pair must agree on, and who they are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Facts {
    server_id: u16,
    incarnation: u32,
    database_id: String,
    partitions: u32,
    hash: String,
}

/// What `coredir ctl replication` shows, per direction.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Status {
    pub peer: String,
    /// Sending: connecting, catching-up, streaming, refused.
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
    /// Age of the oldest unacknowledged change (0 when none).
    pub lag_s: f64,
    /// Seconds since the peer was last heard from (a frame or heartbeat).
    pub peer_silent_s: f64,
    /// Records the peer refused or that could not be applied here (the
    /// last 100 reasons).
    pub conflicts: Vec<String>,
    /// Records in this server's changelog (all origins).
    pub changelog_records: u64,
}

/// The status, shared with the admin thread.
#[derive(Default)]
pub struct Shared {
    pub status: Mutex<Status>,
    heard: Mutex<Option<Instant>>,
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
    None
}

fn proof(secret: &str, nonce: &[u8; 16]) -> Vec<u8> {
    let mut h = Sha256::new();
    h.update(b"coredir replication\0");
    h.update(secret.as_bytes());
    h.update(nonce);
    h.finalize().to_vec()
}

async fn send(stream: &mut TcpStream, frame: &Frame) -> Result<()> {
    let body = serde_json::to_vec(frame)?;
    let mut buf = Vec::with_capacity(body.len() + 4);
    buf.extend_from_slice(&(body.len() as u32).to_be_bytes());
    buf.extend_from_slice(&body);
    stream.write_all(&buf).await?;
    Ok(())
}

async fn recv(stream: &mut TcpStream, limit: usize) -> Result<Frame> {
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
    loop {
        let stream = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("coredir: replication: accept failed: {e}");
                glommio::timer::sleep(RETRY).await;
                continue;
            }
        };
        let (ctx, config, shared) = (ctx.clone(), config.clone(), shared.clone());
        glommio::spawn_local(async move {
            if let Err(e) = receive(stream, &ctx, &config, &shared).await {
                eprintln!("coredir: replication: from the peer: {e:#}");
                shared.update(|s| {
                    if s.inbound != "refused" {
                        s.inbound = "waiting".into();
                    }
                    s.inbound_error = format!("{e:#}");
                });
            }
        })
        .detach();
    }
}

async fn receive(mut stream: TcpStream, ctx: &Ctx, config: &Config, shared: &Shared) -> Result<()> {
    let applied_total = crate::stats::counter("coredir_replication_records_applied_total", 0, &[]);
    stream.set_nodelay(true).map_err(|e| anyhow!("{e}"))?;
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
        send(&mut stream, &Frame::Refuse { reason: reason.clone() }).await?;
        shared.update(|s| s.inbound = "refused".into());
        bail!("refused: {reason}");
    }
    send(&mut stream, &Frame::Ruv { applied: vector(ctx)? }).await?;
    shared.update(|s| s.inbound = "streaming".into());
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
            other => bail!("unexpected {other:?}"),
        }
    }
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
/// last sequence number held.
fn vector(ctx: &Ctx) -> Result<Vec<(Origin, Vec<u64>)>> {
    let txns = snapshots(ctx)?;
    origins(&txns)?.into_iter().map(|o| Ok((o, held(ctx, &txns, o)?))).collect()
}

/// Applies a frame's records on their owners, each partition's in order
/// (one owner's queue is first in, first out), then fixes the parents'
/// child counts; the highest sequence number applied per partition.
async fn apply_all(ctx: &Ctx, records: Vec<(u16, Origin, u64, String)>) -> Result<Vec<(u16, Origin, u64)>, String> {
    let shard = &ctx.shard;
    let mut waiting = Vec::with_capacity(records.len());
    let mut applied: std::collections::BTreeMap<(u16, Origin), u64> = Default::default();
    for (partition, origin, seq, text) in records {
        let rec = BASE64
            .decode(text.as_bytes())
            .ok()
            .and_then(|b| Record::decode(&b))
            .ok_or_else(|| format!("record {seq} of partition {partition} is corrupt"))?;
        let dn = Dn::parse(&rec.dn).map_err(|e| e.message)?;
        let owner = shard.owner_of(&dn.key());
        let s = ctx.shard.clone();
        waiting.push((
            dn,
            glommio::spawn_local(async move { s.submit_for(owner, WriteOp::Replicate { origin, seq, rec }).await }),
        ));
        let top = applied.entry((partition, origin)).or_default();
        *top = (*top).max(seq);
    }
    // Child counts, summed per parent: one write per parent and frame.
    let mut images = Vec::with_capacity(waiting.len());
    for (dn, task) in waiting {
        let outcome = task.await.map_err(|e| format!("{}: {}", dn.to_string_form(), e.message))?;
        images.extend(outcome.map(|b| *b));
    }
    let is_top = |d: &Dn| ctx.is_suffix(d);
    moves::count_children(shard, images.into_iter(), &is_top).await;
    // Renamed entries move on to their new partitions.
    moves::deliver(shard, &is_top).await.map_err(|e| e.message)?;
    Ok(applied.into_iter().map(|((p, o), seq)| (p, o, seq)).collect())
}

/// Delivers the states renames left in parcels (`shards::moves`) that no
/// one delivered: after a crash, or when a delivery failed (shard 0).
pub async fn deliver_parcels(ctx: Rc<Ctx>) {
    let is_top = |d: &Dn| ctx.is_suffix(d);
    loop {
        if let Err(e) = moves::deliver(&ctx.shard, &is_top).await {
            eprintln!("coredir: replication: delivering a renamed entry's state: {}", e.message);
        }
        glommio::timer::sleep(RETRY).await;
    }
}

// ---- Sending: this server's changes, pushed to the peer.

/// Connects to the peer and streams to it, forever (shard 0).
pub async fn push(ctx: Rc<Ctx>, config: Arc<Config>, shared: Arc<Shared>) {
    let peer = config.replication.peer.clone().unwrap_or_default();
    shared.update(|s| s.peer = peer.clone());
    loop {
        shared.update(|s| s.outbound = "connecting".into());
        if let Err(e) = push_once(&peer, &ctx, &config, &shared).await {
            let msg = format!("{e:#}");
            if shared.snapshot().outbound_error != msg {
                eprintln!("coredir: replication: to {peer}: {msg}");
            }
            shared.update(|s| {
                if s.outbound != "refused" {
                    s.outbound = "connecting".into();
                }
                s.outbound_error = msg;
            });
        }
        glommio::timer::sleep(RETRY).await;
    }
}

async fn push_once(peer: &str, ctx: &Ctx, config: &Config, shared: &Shared) -> Result<()> {
    let mut stream = TcpStream::connect(peer).await.map_err(|e| anyhow!("connecting: {e}"))?;
    stream.set_nodelay(true).map_err(|e| anyhow!("{e}"))?;
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
    shared.update(|s| s.outbound = "catching-up".into());
    let sent_total = crate::stats::counter("coredir_replication_records_sent_total", 0, &[]);
    let (lag, backlog_gauge) = (
        crate::stats::gauge("coredir_replication_lag_seconds", 0),
        crate::stats::gauge("coredir_replication_backlog_records", 0),
    );
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
        let (batch, backlog, oldest) = {
            let txns = snapshots(ctx)?;
            // What to offer: every origin held here but the receiver's own.
            for o in origins(&txns)?.into_iter().filter(|o| *o != theirs_now) {
                acked.entry(o).or_insert_with(|| vec![0; ours.partitions as usize]);
            }
            pending(ctx, &txns, &acked)?
        };
        let lag_s = oldest.map_or(0.0, |c| wall_us().saturating_sub(c.phys_us) as f64 / 1e6);
        lag.set(lag_s);
        backlog_gauge.set(backlog as f64);
        shared.update(|s| {
            s.backlog = backlog;
            s.lag_s = lag_s;
            if backlog == 0 {
                s.outbound = "streaming".into();
            }
        });
        if batch.is_empty() {
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
        match recv(&mut stream, MAX_FRAME).await? {
            Frame::Ack { applied } => {
                for (p, origin, seq) in applied {
                    if let Some(a) = acked.get_mut(&origin).and_then(|v| v.get_mut(p as usize)) {
                        *a = (*a).max(seq);
                    }
                }
                shared.heard();
                sent_total.increment(n);
                shared.update(|s| s.records_sent += n);
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
    let mut ops = Vec::new();
    for (&origin, positions) in acked {
        for (p, &upto) in positions.iter().enumerate().filter(|(_, &u)| u > 0) {
            ops.push((p as u16, origin, upto));
        }
    }
    let theirs_held = held(ctx, &snapshots(ctx)?, theirs)?;
    for (p, &have) in theirs_held.iter().enumerate().filter(|(_, &h)| h > 0) {
        ops.push((p as u16, theirs, have));
    }
    for (partition, origin, upto) in ops {
        let owner = shard.manifest.owners[partition as usize] as usize;
        let op = WriteOp::Trim { partition, origin, upto, older_than_us };
        shard.submit_to(owner, op).await.map_err(|e| anyhow!("trimming the changelog: {}", e.message))?;
    }
    Ok(())
}

/// The next frame's records (above what the peer holds, oldest CSN
/// first), how many are pending in all, and the oldest's CSN.
#[allow(clippy::type_complexity)]
fn pending(
    ctx: &Ctx,
    txns: &[EngineRead<'_>],
    acked: &std::collections::BTreeMap<Origin, Vec<u64>>,
) -> Result<(Vec<(u16, Origin, u64, String)>, u64, Option<Csn>)> {
    let owners = &ctx.shard.manifest.owners;
    let mut all: Vec<(Csn, u16, Origin, u64, Vec<u8>)> = Vec::new();
    let mut backlog = 0u64;
    for (&origin, positions) in acked {
        for (p, &done) in positions.iter().enumerate() {
            let p = p as u16;
            let txn = &txns[owners[p as usize] as usize];
            let have = txn.get(Tree::Meta, &ruv_key(p, origin)).map_err(|e| anyhow!(e.message))?.map_or(0, be_u64);
            if have <= done {
                continue;
            }
            let from = log_key(p, origin, done + 1);
            let mut taken = 0;
            txn.scan(Tree::Changelog, &from[..LOG_PREFIX], &from, &mut |k, v| {
                let csn = v.get(1..17).and_then(Csn::from_bytes).unwrap_or_default();
                all.push((csn, p, origin, be_u64(&k[LOG_PREFIX..]), v.to_vec()));
                taken += 1;
                taken < BATCH
            })
            .map_err(|e| anyhow!(e.message))?;
            // Exact while short; past a frame, the positions tell.
            backlog += if taken < BATCH { taken as u64 } else { have - done };
        }
    }
    all.sort_by_key(|r| r.0);
    let oldest = all.first().map(|r| r.0);
    // Within a partition and origin, sequence order is CSN order: cutting
    // the sorted list leaves no gap in any of them.
    all.truncate(BATCH);
    Ok((all.into_iter().map(|(_, p, o, s, v)| (p, o, s, BASE64.encode(v))).collect(), backlog, oldest))
}
