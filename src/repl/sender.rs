//! Sending: this server's changes pushed to the peer, oldest CSN first,
//! one frame in flight; resyncs of the partitions it is behind on; the
//! anti-entropy check; trimming what it holds.

use super::protocol::*;
use super::*;

/// Connects to the peer and streams to it, forever (shard 0).
pub async fn push(ctx: Rc<Ctx>, config: Arc<Config>, shared: Arc<Link>) {
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
            // Only the backlog is wanted: no floor, so no settled CSN.
            let nobody = (Origin { sid: 0, incarnation: 0 }, 0);
            match snapshots(&ctx).and_then(|txns| pending(&ctx, &txns, acked, &mut ages, nobody, false)) {
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
/// `Shard::trim`), from each partition's owner; `None` if never.
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
fn show(shared: &Link, p: &Pending) {
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
    shared: &Link,
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
    let ours_now = Origin { sid: ours.server_id, incarnation: ours.incarnation };
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
    let mut pace = shards::shard::Pace::new(POLL, BURST);
    let r = &config.replication;
    let trim_every = Duration::from_secs(r.trim_interval_s.unwrap_or(60));
    let max_age_us = r.changelog_max_age_s.unwrap_or(7 * 24 * 3600) * 1_000_000;
    loop {
        if last_trim.elapsed() >= trim_every {
            last_trim = Instant::now();
            trim(ctx, &acked, theirs_now, wall_us().saturating_sub(max_age_us)).await?;
        }
        // Before the snapshots: a commit it does not count comes after them.
        let commits = ctx.shard.floors.commits();
        let p = {
            // Before the snapshots: every change of ours below it is in them.
            let floor_us = ctx.shard.floors.lowest();
            let txns = snapshots(ctx)?;
            // What to offer: every origin held here but the receiver's own.
            for o in origins(&txns)?.into_iter().filter(|o| *o != theirs_now) {
                acked.entry(o).or_insert_with(|| vec![0; ours.partitions as usize]);
            }
            pending(ctx, &txns, &acked, ages, (ours_now, floor_us), true)?
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
            // The heartbeat before any digest check: a sweep of checks
            // longer than the heartbeat (verify_interval_s shorter than a
            // sweep takes) must not keep the peer from hearing what is
            // settled here, or its syncrepl cookies stop short of it.
            if last_sent.elapsed() >= HEARTBEAT {
                let settled = p.settled.map(|c| c.to_string());
                send(&mut stream, &Frame::Heartbeat { backlog: 0, settled }).await?;
                last_sent = Instant::now();
            }
            if let Some(partition) = checker.due().filter(|_| theirs.protocol >= 2) {
                check(&mut stream, ctx, partition, checker, &mut acked, shared).await?;
                continue;
            }
            // Nothing to send: look again after the next commit, or when
            // the next heartbeat is due; soon, while a rename holds ours.
            let most = match p.held {
                true => HELD_POLL,
                false => HEARTBEAT.saturating_sub(last_sent.elapsed()).max(POLL),
            };
            ctx.shard.next_commit(commits, most).await;
            pace.round().await;
            continue;
        }
        let n = batch.len() as u64;
        let settled = p.settled.map(|c| c.to_string());
        send(&mut stream, &Frame::Records { records: batch, settled }).await?;
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
    shared: &Link,
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
async fn await_ack(stream: &mut Stream, shared: &Link) -> Result<Vec<(u16, Origin, u64)>> {
    match recv(stream, MAX_FRAME).await? {
        Frame::Ack { applied } => {
            shared.heard();
            Ok(applied)
        }
        Frame::Refuse { reason } => {
            shared.update(|s| {
                s.outbound = "refused".into();
                s.note_refused(reason.clone());
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
    shared: &Link,
) -> Result<()> {
    shared.update(|s| s.outbound = "resyncing".into());
    let (states, positions, newest) = {
        let txn = ctx.shard.stores.read(owner(ctx, partition)).map_err(|e| anyhow!(e.message))?;
        let states = changelog::partition_states(&txn, partition).map_err(|e| anyhow!(e.message))?;
        let positions = changelog::positions(&txn, partition).map_err(|e| anyhow!(e.message))?;
        let newest = changelog::newest(&txn, Some(partition)).map_err(|e| anyhow!(e.message))?;
        (states, positions, newest.iter().map(Csn::to_string).collect())
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
    send(stream, &Frame::Resynced { partition, positions: positions.clone(), newest }).await?;
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
        let trim = Trim { partition, origin, upto, older_than_us, keep_tombstones: false, peer_holds };
        shard.trim(trim).await.map_err(|e| anyhow!("trimming the changelog: {}", e.message))?;
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
    /// Every change of this server's own up to this CSN is in `batch` or
    /// held by the peer (`settled`).
    settled: Option<Csn>,
    /// Changes of ours wait for a rename running here to end.
    held: bool,
}

/// What the peer lacks, and the next frame of it; `sending` false when
/// only the backlog is measured (the peer is away): the frame is not
/// widened for whole moves then.
fn pending(
    ctx: &Ctx,
    txns: &[Read<'_>],
    acked: &std::collections::BTreeMap<Origin, Vec<u64>>,
    ages: &mut Ages,
    (own, floor_us): (Origin, u64),
    sending: bool,
) -> Result<Pending> {
    let (now, mut seen) = (Instant::now(), None::<Instant>);
    let mut all: Vec<(Csn, u16, Origin, u64, Vec<u8>)> = Vec::new();
    let mut backlog = 0u64;
    let mut gaps = Vec::new();
    let mut by_partition = std::collections::BTreeMap::<u16, u64>::new();
    // The lowest last record read of a stream of ours read only in part
    // (`cut`), and of any stream read only in part (`read_to`).
    let mut cut: Option<Option<Csn>> = None;
    let mut read_to = None::<Csn>;
    for (&origin, positions) in acked {
        for (p, &done) in positions.iter().enumerate() {
            let p = p as u16;
            let txn = &txns[owner(ctx, p)];
            let have = changelog::held(txn, p, origin).map_err(|e| anyhow!(e.message))?;
            let Some(first_seen) = ages.note((p, origin), have, done, now) else { continue };
            seen = Some(seen.map_or(first_seen, |s| s.min(first_seen)));
            let (mut taken, mut gap, mut last) = (0, true, None);
            changelog::read_stream(txn, (p, origin), done + 1, &mut |seq, v| {
                if taken == 0 && seq != done + 1 {
                    return false;
                }
                gap = false;
                let csn = changelog::record_csn(v).unwrap_or_default();
                last = Some(csn);
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
            // Every incarnation of this server: a restored one's records too.
            if origin.sid == own.sid && taken == BATCH {
                // The stream goes on past what was read: no further.
                cut = Some(cut.map_or(last, |c: Option<Csn>| c.min(last)));
            }
            if let Some(last) = last.filter(|_| taken == BATCH) {
                read_to = Some(read_to.map_or(last, |c| c.min(last)));
            }
            // Exact while short; past a frame, the positions tell.
            let behind = if taken < BATCH { taken as u64 } else { have - done };
            backlog += behind;
            *by_partition.entry(p).or_default() += behind;
        }
    }
    all.sort_by_key(|r| r.0);
    let oldest = all.first().map(|r| r.0);
    // Changes of ours stamped since a rename here began to move wait for
    // its end: a subtree's move is one record per entry, and a frame with
    // part of them would show the peer's readers the subtree half moved.
    let since = ctx.shared.carries.oldest_claim_us();
    let held = since.and_then(|us| all.iter().position(|r| r.2.sid == own.sid && r.0.phys_us >= us));
    // A frame of BATCH records never passes the last record read of a
    // stream read only in part; a wider one must not either (a record
    // past it may need one not read yet: a parent's add, a move's top).
    let limit = held.unwrap_or(all.len()).min(read_to.map_or(all.len(), |c| all.partition_point(|r| r.0 <= c)));
    let end = match sending {
        true => whole_moves(&all, limit),
        false => BATCH.min(held.unwrap_or(BATCH)),
    };
    let unsent = all.iter().skip(end).find(|r| r.2.sid == own.sid).map(|r| r.0);
    let settled = settled(own.sid, floor_us, cut.flatten(), unsent, gaps.is_empty());
    // Within a partition and origin, sequence order is CSN order: cutting
    // the sorted list leaves no gap in any of them.
    all.truncate(end);
    let batch = all.into_iter().map(|(_, p, o, s, v)| (p, o, s, BASE64.encode(v))).collect();
    let by_partition = by_partition.into_iter().filter(|(_, n)| *n > 0).collect();
    Ok(Pending { batch, backlog, by_partition, oldest, seen, gaps, settled, held: held.is_some() })
}

/// How many of `all` (sorted by CSN) the next frame takes: `BATCH`, or
/// more so that no subtree move it holds is split. A move is one rename
/// record per entry, the top first, then its members parents first; the
/// receiver claims and applies a frame whole, so a frame with a part of a
/// move would show its readers members left below a parent gone. So the
/// frame reaches the last record read that is a member of a rename it
/// holds: renamed from below the rename's old DN to below its new one
/// (records between, of other entries, come along: a prefix of the
/// sorted list leaves no gap in any stream). Renames the frame comes to
/// hold as it widens count too. Never past `limit` (a rename running
/// here, a stream read only in part) nor `MOVE_BYTES` of frame: past
/// that the move is split.
fn whole_moves(all: &[(Csn, u16, Origin, u64, Vec<u8>)], limit: usize) -> usize {
    let end = BATCH.min(limit);
    if limit <= end {
        return end;
    }
    // Old DN key -> new DN keys of the renames the frame holds (both
    // servers may have renamed one entry apart).
    let mut tops = std::collections::HashMap::<Vec<u8>, Vec<Vec<u8>>>::new();
    let hold = |tops: &mut std::collections::HashMap<_, Vec<_>>, (old, new)| tops.entry(old).or_default().push(new);
    all[..end].iter().filter_map(|r| renamed_keys(&r.4)).for_each(|rename| hold(&mut tops, rename));
    if tops.is_empty() {
        return end;
    }
    let mut bytes = all[..end].iter().map(|r| frame_bytes(r.4.len())).sum::<usize>();
    // Renames read past the frame's end so far: tops once it reaches them.
    let mut outside = Vec::new();
    let mut last = end;
    for (i, r) in all.iter().enumerate().take(limit).skip(end) {
        bytes += frame_bytes(r.4.len());
        if bytes > MOVE_BYTES {
            break;
        }
        let Some((old, new)) = renamed_keys(&r.4) else { continue };
        let member = shards::dn::key_ancestors(&old)
            .any(|a| tops.get(a).is_some_and(|news| news.iter().any(|n| shards::dn::key_below(&new, n))));
        if member {
            last = i + 1;
            outside.drain(..).for_each(|rename| hold(&mut tops, rename));
        } else {
            outside.push((old, new));
        }
    }
    last
}

/// The old and new DN keys of a rename record in its encoded form.
fn renamed_keys(record: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let (old, new) = Record::renamed_dns(record)?;
    Some((shards::dn::key_of(old).ok()?, shards::dn::key_of(new).ok()?))
}

/// What a record of `n` bytes takes in a frame: base64, and the JSON of
/// its partition, origin and sequence number.
fn frame_bytes(n: usize) -> usize {
    n.div_ceil(3) * 4 + 80
}

/// The most a frame widened to hold a whole move takes, under the
/// receiver's `MAX_FRAME` with room to spare.
const MOVE_BYTES: usize = MAX_FRAME / 4 * 3;

/// Up to which CSN every change of server `sid` has gone to the peer once
/// this frame is applied: below the commit floor (`floor_us`, read before
/// the snapshots: a slower shard may still commit an older change), at
/// most the last record read of a stream read only in part (`read_to`),
/// below the first record read but left for a later frame (`unsent`).
/// None while a partition waits for a resync.
fn settled(sid: u16, floor_us: u64, read_to: Option<Csn>, unsent: Option<Csn>, whole: bool) -> Option<Csn> {
    if !whole || floor_us == 0 {
        return None;
    }
    let mut settled = Csn::top_of(floor_us, sid);
    if let Some(c) = read_to {
        settled = settled.min(c);
    }
    if let Some(c) = unsent {
        settled = settled.min(c.just_below());
    }
    Some(settled)
}
