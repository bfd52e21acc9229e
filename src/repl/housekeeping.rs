//! Background work on shard 0 while the changelog is kept.

use super::*;

/// Background work (shard 0) while the changelog is kept: delivering the
/// states renames left in parcels (`shards::moves`) that no one delivered
/// (after a crash, or a failed delivery), holding the changelog to its
/// size cap, and, without a peer (a syncrepl provider alone), trimming it
/// by age (with a peer, the sender trims what the peer holds).
pub async fn housekeeping(ctx: Rc<Ctx>, config: Arc<Config>, shared: Arc<Link>) {
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
        let trim = Trim { partition, origin, upto: last, older_than_us, keep_tombstones: false, peer_holds: false };
        ctx.shard.trim(trim).await.map_err(|e| anyhow!(e.message))?;
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
async fn enforce_cap(ctx: &Ctx, cap: u64, shared: &Link) -> Result<()> {
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
        let trim = Trim {
            partition,
            origin,
            upto: first + k - 1,
            older_than_us: u64::MAX,
            keep_tombstones: true,
            peer_holds: false,
        };
        ctx.shard.trim(trim).await.map_err(|e| anyhow!(e.message))?;
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
