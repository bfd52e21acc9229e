//! Receiving: the peer's changes applied here, each on its partition's
//! owner; the peer's resyncs joined in; its anti-entropy questions answered.

use super::protocol::*;
use super::*;

/// Accepts the peer's connections on `replication.listen` (shard 0).
pub async fn serve(listener: TcpListener, ctx: Rc<Ctx>, config: Arc<Config>, shared: Arc<Link>) {
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

/// Most DNs kept for `glue::follow_parents` between heartbeats.
const MAX_MOVED: usize = 10_000;

/// One inbound connection; `proven` is set once the peer proved the secret.
async fn receive(
    tcp: TcpStream,
    ctx: &Ctx,
    config: &Config,
    shared: &Arc<Link>,
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
    let (peer_sid, peer_protocol) = (theirs.server_id, theirs.protocol);
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
    shared.met(peer_sid, peer_protocol);
    send(&mut stream, &Frame::Ruv { applied: vector(ctx)? }).await?;
    shared.update(|s| {
        s.inbound = "streaming".into();
        s.inbound_error.clear();
    });
    shared.heard();
    // DNs the peer's renames moved entries away from, to look below once
    // it has sent all it has (`glue::follow_parents`).
    let mut moved: std::collections::BTreeMap<Vec<u8>, (Dn, [u8; 16])> = Default::default();
    loop {
        let frame = recv(&mut stream, MAX_FRAME).await?;
        shared.heard();
        match frame {
            Frame::Heartbeat { settled, .. } => {
                shared.settle(settled.as_deref());
                shared.keep_settled(&config.server.data, false);
                if !moved.is_empty() {
                    let asked = std::mem::take(&mut moved).into_values().collect();
                    let again = crate::glue::follow_parents(ctx, asked).await;
                    moved.extend(again.into_iter().map(|(dn, uuid)| (dn.key(), (dn, uuid))));
                }
            }
            Frame::Records { records, settled } => {
                let n = records.len() as u64;
                match apply_all(ctx, records).await {
                    Ok((applied, away)) => {
                        // Only DNs with entries left below them, each once,
                        // and at most `MAX_MOVED` (past it they are said).
                        for (dn, uuid) in away.into_iter().filter(|(dn, _)| crate::glue::left_below(ctx, dn)) {
                            if moved.len() < MAX_MOVED {
                                moved.insert(dn.key(), (dn, uuid));
                            } else {
                                eprintln!(
                                    "coredir: replication: too many renamed parents to follow; {} is not",
                                    dn.to_string_form()
                                );
                            }
                        }
                        // Committed: what the frame says is settled now holds.
                        shared.settle(settled.as_deref());
                        shared.keep_settled(&config.server.data, true);
                        // Counted before the ack: they are applied whether or not it arrives.
                        applied_total.increment(n);
                        shared.update(|s| s.records_applied += n);
                        send(&mut stream, &Frame::Ack { applied }).await?;
                    }
                    Err(reason) => {
                        let _ = send(&mut stream, &Frame::Refuse { reason: reason.clone() }).await;
                        shared.update(|s| {
                            s.inbound = "refused".into();
                            s.note_refused(reason.clone());
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
            Frame::Resynced { partition, positions, newest } => {
                let newest = newest.iter().map(|c| Csn::parse(c).ok_or_else(|| anyhow!("a CSN is corrupt: {c:?}")));
                ctx.shard
                    .advance(partition, positions, newest.collect::<Result<_>>()?)
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
    let mut tasks = Vec::with_capacity(states.len());
    // Deleted entries: any may still have children here (`crate::glue`).
    let mut deleted = BTreeSet::new();
    for (uuid, text) in states {
        let state = BASE64
            .decode(text.as_bytes())
            .ok()
            .and_then(|b| shards::merge::decode_state(&b))
            .ok_or_else(|| anyhow!("a state is corrupt"))?;
        if state.deleted.is_some() {
            deleted.insert(uuid);
        }
        let s = shard.clone();
        tasks.push(glommio::spawn_local(async move { s.absorb(partition, uuid, state).await }));
    }
    let mut images = Vec::with_capacity(tasks.len());
    for t in tasks {
        images.extend(t.await.map_err(|e| anyhow!(e.message))?.map(|b| *b));
    }
    settle(ctx, images, &deleted).await.map(|_| ()).map_err(|e| anyhow!(e.message))
}

/// What follows applying a frame of records or states: the parents' child
/// counts, the deliveries their renames call for, and glue for deleted
/// entries that still have children here. The records stay applied (and
/// are acknowledged) whatever the glue meets: a failure there is said, and
/// the parent stays missing, rather than refusing the frame.
async fn settle(
    ctx: &Ctx,
    images: Vec<shards::write::Images>,
    deleted: &BTreeSet<[u8; 16]>,
) -> shards::Result<Vec<(Dn, [u8; 16])>> {
    let is_top = |d: &Dn| ctx.is_suffix(d);
    let removed = crate::glue::removed(&images, deleted);
    let moved = crate::glue::moved_away(&images, deleted);
    moves::count_children(&ctx.shard, images.into_iter(), &is_top).await;
    // Renamed entries move on to their new partitions.
    moves::deliver(&ctx.shard, &is_top).await?;
    if let Err(e) = crate::glue::keep_parents(ctx, removed).await {
        eprintln!("coredir: replication: keeping a deleted parent as glue: {}", e.message);
    }
    Ok(moved)
}

/// Applies a frame's records on their owners, each partition's in order
/// (one owner's queue is first in, first out), then fixes the parents'
/// child counts; the highest sequence number applied per partition.
/// Also what the records moved away from their DNs (`glue::moved_away`).
#[allow(clippy::type_complexity)]
async fn apply_all(
    ctx: &Ctx,
    records: Vec<(u16, Origin, u64, String)>,
) -> Result<(Vec<(u16, Origin, u64)>, Vec<(Dn, [u8; 16])>), String> {
    let mut waiting = Vec::with_capacity(records.len());
    let mut applied: std::collections::BTreeMap<(u16, Origin), u64> = Default::default();
    // Deleted entries: any may still have children here (`crate::glue`).
    let mut deleted = BTreeSet::new();
    let mut decoded = Vec::with_capacity(records.len());
    for (partition, origin, seq, text) in records {
        let rec = BASE64
            .decode(text.as_bytes())
            .ok()
            .and_then(|b| Record::decode(&b))
            .ok_or_else(|| format!("record {seq} of partition {partition} is corrupt"))?;
        let dn = Dn::parse(&rec.dn).map_err(|e| e.message)?;
        decoded.push((partition, origin, seq, rec, dn));
    }
    let _claims = claim_renames(ctx, &decoded).await;
    for (partition, origin, seq, rec, dn) in decoded {
        if rec.change == shards::merge::Change::Delete {
            deleted.insert(rec.uuid);
        }
        let (s, key) = (ctx.shard.clone(), dn.key());
        waiting.push((dn, glommio::spawn_local(async move { s.replicate(&key, origin, seq, rec).await })));
        let top = applied.entry((partition, origin)).or_default();
        *top = (*top).max(seq);
    }
    let mut images = Vec::with_capacity(waiting.len());
    for (dn, task) in waiting {
        let outcome = task.await.map_err(|e| format!("{}: {}", dn.to_string_form(), e.message))?;
        images.extend(outcome.map(|b| *b));
    }
    let moved = settle(ctx, images, &deleted).await.map_err(|e| e.message)?;
    Ok((applied.into_iter().map(|((p, o), seq)| (p, o, seq)).collect(), moved))
}

/// Claims the renames among a frame's records as a local rename is
/// claimed (`ops::carries`), and waits for the searches already running:
/// a peer's subtree rename arrives as one record per entry, applied on
/// their owners side by side, and a search or a sync refresh here would
/// see the subtree half moved (a consumer then glues or deletes it).
/// Only the outermost of nested renames is claimed (the subtree's top
/// covers its members); one overlapping a local rename running is applied
/// unclaimed, as before claims. The claims hold until they are dropped.
async fn claim_renames<'c>(
    ctx: &'c Ctx,
    records: &[(u16, Origin, u64, Record, Dn)],
) -> Vec<crate::ops::carries::Claim<'c>> {
    let renames: Vec<(Vec<u8>, Vec<u8>)> = records
        .iter()
        .filter_map(|(.., rec, dn)| match &rec.change {
            shards::merge::Change::Rename { to, .. } => Some((dn.key(), Dn::parse(to).ok()?.key())),
            _ => None,
        })
        .collect();
    // As for a local rename: only a carry, several commits, is claimed (a
    // subtree, whose members come as renames below it, or a move to
    // another owner); a rename in place is one commit.
    let shard = &ctx.shard;
    // Every DN some rename of the frame is below: one lookup per rename,
    // as a frame may hold a move of many thousand entries.
    let above: std::collections::HashSet<&[u8]> =
        renames.iter().flat_map(|(old, _)| shards::dn::key_ancestors(old)).collect();
    let below = |old: &[u8]| above.contains(old);
    let mut pairs: Vec<&(Vec<u8>, Vec<u8>)> =
        renames.iter().filter(|(old, new)| shard.owner_of(old) != shard.owner_of(new) || below(old)).collect();
    // Tops first: a DN key is longer than its parent's.
    pairs.sort_by_key(|(old, _)| old.len());
    let carries = &ctx.shared.carries;
    let mut claims: Vec<crate::ops::carries::Claim<'c>> = Vec::new();
    for (old, new) in pairs {
        // Covered by a claim of this frame.
        if claims.iter().any(|c| c.crosses(old, new)) {
            continue;
        }
        // Not waited for: a local rename over the same DNs may itself be
        // waiting on what this stream brings, and the stream would stall.
        if let Ok(claim) = carries.claim(old.clone(), new.clone()) {
            claims.push(claim);
        }
    }
    // Once for all (the last claim's marks cover the searches admitted
    // before any of them), and never overtaking: a search still running
    // then goes on (it may see the move in part, as before claims).
    if let Some(last) = claims.last() {
        last.settle_reads_quietly(PEER_SETTLE).await;
    }
    claims.iter().for_each(|c| c.moving());
    claims
}

/// How long a peer's renames wait for the searches running here: they
/// hold the inbound stream, so a client that does not read its results
/// must not hold it for long, and a long search (an export) must not fail
/// because the peer renamed something.
const PEER_SETTLE: std::time::Duration = std::time::Duration::from_secs(1);
