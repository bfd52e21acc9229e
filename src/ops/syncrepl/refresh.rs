//! The refresh stage: every entry in scope in DN key order across the
//! stores, in full when it changed since the cookie, then (delete phase)
//! the entryUUIDs of what is gone; or, for a cookie the changelog covers,
//! the changes since it replayed in their order (`replay`).

use super::persist::Marks;
use super::*;
use shards::subtree::{next_chunk, Row, Step};

/// How a refresh tells the consumer what is gone.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Phase {
    /// Every entry named, unchanged ones as present: the rest is gone.
    Present,
    /// Only changed entries, then the entryUUIDs of those deleted since
    /// the cookie (the changelog's tombstones cover it).
    Delete,
}

pub(super) fn phase(ctx: &crate::ctx::Ctx, since: Option<&Since>) -> Result<Phase> {
    let since = since.filter(|s| s.complete());
    let Some(floor_us) = since.and_then(|s| s.csns.values().map(|c| c.phys_us).min()) else {
        return Ok(Phase::Present);
    };
    for store in ctx.shard.stores.iter() {
        if !changelog::covers(&store.read()?, floor_us)? {
            return Ok(Phase::Present);
        }
    }
    Ok(Phase::Delete)
}

/// The refresh stage: every entry in scope, in full if it changed since
/// the cookie (`since`), else as present or (delete phase) not at all,
/// then for the delete phase the entryUUIDs of what is gone. `next`
/// gathers the CSNs seen.
pub(super) async fn refresh(
    s: &Session<'_>,
    since: Option<&Since>,
    next: &mut Cookie,
    (floor_us, moving, peers): (u64, Option<Csn>, &Peers),
    abandoned: &crate::ops::abandon::Abandoned,
    sent: &mut u64,
) -> Result<(Phase, Cookie)> {
    let shard = &s.conn.ctx.shard;
    let own = shard.stamping.sid;
    let phase = phase(&s.conn.ctx, since)?;
    let mut gone: Vec<uuid::Uuid> = Vec::new();
    let base_key = s.base_key.as_slice();
    // Every store's entries merged in DN key order, so that a parent goes
    // out before its children wherever each lives: a consumer renaming a
    // moved subtree must meet its top first (slapd glues a missing parent,
    // and then the top's own rename fails with alreadyExists).
    let mut from = base_key.to_vec();
    // Once resumed, `from` was handled already.
    let mut resumed = false;
    // Admitted as a search is (`ops::carries`): a subtree rename in scope
    // waits for the walk, which so meets the subtree whole at one place.
    // One that overtakes it (a walk outlasting the rename's wait) makes
    // it walk again, every entry in full as it is now: what went out
    // before may have named the subtree at neither place, or half.
    let mut reading = admit(s, abandoned).await?;
    let mut walks = 1;
    let mut again = false;
    loop {
        if reading.as_ref().is_some_and(|r| r.overtaken()) {
            if walks > REWALKS {
                return Err(crate::ops::carries::overtaken_error());
            }
            drop(reading);
            reading = admit(s, abandoned).await?;
            (walks, again, from, resumed) = (walks + 1, true, base_key.to_vec(), false);
        }
        let mut out = BytesMut::new();
        let next_from;
        // The room the entry the chunk stopped at needs, waited for once
        // what was built is sent (the chunk's snapshot is not held across).
        let mut short = None;
        // The size limit reached with another entry to send.
        let mut full = false;
        {
            let txns = shard.stores.snapshot()?;
            let (rows, bound) = next_rows(s, &txns, &from, resumed)?;
            // However costly the filter, a chunk takes about one slice
            // of reactor time: the walk resumes after the last row seen.
            let slice_end = std::time::Instant::now() + crate::ops::search::SLICE;
            let mut cut = None;
            for (i, (key, id, store)) in rows.iter().enumerate() {
                if i > 0 && std::time::Instant::now() >= slice_end {
                    cut = Some((rows[i - 1].0.clone(), true));
                    break;
                }
                let txn = &txns[*store];
                let Some(view) = txn.entry_by_id(id)? else { continue };
                let csn = entry_csn(&view);
                // Only the stamps of entries the requester may know of go
                // into the cookie: one at a hidden entry's would time its
                // changes.
                let known = s.may_learn(key, Some(&view));
                let mut unseen = Cookie::default();
                let seen = if known { &mut *next } else { &mut unseen };
                if let Some(csn) = csn {
                    seen.saw(csn);
                }
                let changed = match since {
                    Some(since) => since.changed(csn, || state_of(shard, txn, key, &view), seen),
                    None => true,
                };
                let decided = shards::index::decided_items(txn, &s.filter, id, view.size())?;
                let state = match (shards::filter::with_decided(decided, || s.matches(key, &view))?, changed, phase) {
                    (true, true, _) => SyncStateValue::Add,
                    (true, false, _) if again => SyncStateValue::Add,
                    (true, false, Phase::Present) => SyncStateValue::Present,
                    // Changed so that the filter no longer takes it.
                    (false, true, Phase::Delete) => {
                        if known {
                            gone.push(uuid_of_view(&view)?);
                        }
                        continue;
                    }
                    _ => continue,
                };
                if *sent >= s.size {
                    // What was built goes out first, then the result.
                    full = true;
                    break;
                }
                if state != SyncStateValue::Present {
                    short = s.short_of_room(&view);
                    if short.is_some() {
                        // This entry again, in the next chunk.
                        cut = Some((key.clone(), false));
                        break;
                    }
                }
                s.entry(&mut out, key, &view, state)?;
                *sent += 1;
            }
            next_from = cut.or(bound.map(|b| (b, true)));
        }
        s.room.send(out).await;
        if full {
            return Err(Error::new(LdapResultCode::SizeLimitExceeded, ""));
        }
        if let Some(kib) = short {
            s.room.wait_for(kib).await;
        }
        futures_lite::future::yield_now().await;
        if s.deadline.is_some_and(|d| std::time::Instant::now() >= d) {
            return Err(Error::new(LdapResultCode::TimeLimitExceeded, ""));
        }
        if abandoned.get() {
            return Ok((phase, before(next.rid, since)));
        }
        match next_from {
            Some(next) => (from, resumed) = next,
            // Overtaken: walked again from the top of the loop.
            None if reading.as_ref().is_some_and(|r| r.overtaken()) => {}
            None => break,
        }
    }
    drop(reading);
    let before = before(next.rid, since);
    let Some(since) = since.filter(|_| phase == Phase::Delete) else {
        // A present phase tells of a delete only by leaving the entry
        // out, and slapd deletes what it left out only when the cookie it
        // ends with is newer than the one it sent: the deletes since the
        // cookie that the requester may know of count for it too.
        // A requester no access rule restricts (the root DN) may learn the
        // newest change of every server, the contextCSN that syncprov ends
        // a present phase with: it counts deletes whose tombstones the
        // changelog no longer keeps too. So may one that can read the
        // naming context's contextCSN, which tells it as much. Others
        // would learn from it when hidden entries change: for them, the
        // tombstones they may know of.
        let context = match (&since, &s.plan) {
            (Some(_), Some(_)) => context_csn_readable(s)?,
            _ => None,
        };
        match since {
            Some(_) if s.plan.is_none() => {
                for store in shard.stores.iter() {
                    changelog::newest(&store.read()?, None)?.into_iter().for_each(|csn| next.saw(csn));
                }
            }
            Some(_) if let Some(suffix_key) = &context => {
                context_newest(&s.conn.ctx, suffix_key, next)?;
            }
            Some(since) => {
                let Some(departed) = departed(s, since, abandoned).await? else {
                    return Ok((phase, before));
                };
                departed.into_iter().for_each(|(_, csn)| next.saw(csn));
            }
            None => {}
        }
        let handed = next.capped(own, claimable(own, floor_us, moving), &before, *peers);
        return Ok((phase, handed.claiming_peer(*peers, None)));
    };
    // What it learns is gone counts for the cookie too.
    let Some(departed) = departed(s, since, abandoned).await? else {
        return Ok((phase, before));
    };
    for (uuid, csn) in departed {
        next.saw(csn);
        gone.push(uuid);
    }
    // The set carries the new cookie: slapd deletes only entries whose
    // entryCSN the cookie it holds reaches, and an entry sent in an
    // earlier refresh may be newer than the cookie that refresh ended with.
    let handed = next.capped(own, claimable(own, floor_us, moving), &before, *peers).claiming_peer(*peers, None);
    let mut out = BytesMut::new();
    for chunk in gone.chunks(CHUNK) {
        let info = LdapIntermediateResponse::SyncInfoIdSet {
            cookie: Some(handed.compose(own)),
            refresh_deletes: true,
            syncuuids: chunk.to_vec(),
        };
        s.info(&mut out, info);
    }
    s.room.send(out).await;
    Ok((phase, handed))
}

/// How many times a refresh walks again after renames overtook it
/// before it ends with `busy` (the consumer retries).
const REWALKS: u32 = 2;

/// A walk below the base admitted as a search's is (`Ctx::admit_read`).
async fn admit<'a>(
    s: &'a Session<'_>,
    abandoned: &crate::ops::abandon::Abandoned,
) -> Result<Option<crate::ops::carries::Reading<'a>>> {
    Ok(match s.scope {
        LdapSearchScope::Base => None,
        _ => Some(s.conn.ctx.admit_read(&s.base_key, false, s.deadline, abandoned).await?),
    })
}

/// The key of the naming context the session synchronizes, when the
/// requester may read that suffix entry's contextCSN.
fn context_csn_readable(s: &Session<'_>) -> Result<Option<Vec<u8>>> {
    let ctx = &s.conn.ctx;
    let Some(suffix) = ctx.naming_context(&s.base) else { return Ok(None) };
    let key = suffix.key();
    let readable = ctx.shard.with_entry(&key, |view| {
        let target = Target { key: &key, entry: Some(view) };
        s.plan.as_ref().is_none_or(|p| p.entry_readable(&target) && p.allows(&target, "contextCSN", Level::Read))
    })?;
    Ok(readable.unwrap_or(false).then_some(key))
}

/// The replicated state of the entry at `key` (its partition's, in the
/// store that holds the entry).
pub(super) fn state_of<T: ReadTxn>(
    shard: &shards::shard::Shard,
    txn: &T,
    key: &[u8],
    view: &EntryView<'_>,
) -> Result<Option<EntryState>> {
    let partition = shard.manifest.partition_of(key) as u16;
    changelog::load_state(txn, partition, uuid_of_view(view)?.as_bytes())
}

/// The next rows of the refresh in DN key order across stores: up to
/// `CHUNK` in scope (and `SCANNED` keys seen: a one-level scope walks the
/// whole subtree's keys) from each store after `from` (or from it, unless
/// `resumed`), and the bound where the next chunk starts.
pub(super) fn next_rows<T: ReadTxn>(
    s: &Session<'_>,
    txns: &[T],
    from: &[u8],
    resumed: bool,
) -> Result<(Vec<Row>, Option<Vec<u8>>)> {
    next_chunk(txns, &s.base_key, from, (CHUNK, SCANNED), &mut |k| match (resumed && k == from) || !s.in_scope(k) {
        true => Step::Pass,
        false => Step::Take,
    })
}

/// The entries deleted since the cookie (their tombstones), and those a
/// rename since took out of scope; `None` when abandoned. The states are
/// walked in chunks of `CHUNK`, the reactor yielded between them.
pub(super) async fn departed(
    s: &Session<'_>,
    since: &Since,
    abandoned: &crate::ops::abandon::Abandoned,
) -> Result<Option<Vec<(uuid::Uuid, Csn)>>> {
    let mut out = Vec::new();
    for store in s.conn.ctx.shard.stores.iter() {
        let mut from = None;
        loop {
            let (walked, last) = departed_chunk(s, since, store, from, &mut out)?;
            if walked < CHUNK {
                break;
            }
            from = last;
            futures_lite::future::yield_now().await;
            if abandoned.get() {
                return Ok(None);
            }
            if s.deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                return Err(Error::new(LdapResultCode::TimeLimitExceeded, ""));
            }
        }
    }
    out.sort_unstable();
    out.dedup_by_key(|(uuid, _)| *uuid);
    Ok(Some(out))
}

/// One chunk of `departed` in one store: up to `CHUNK` states after
/// `from`; returns how many it walked and where it stopped.
fn departed_chunk(
    s: &Session<'_>,
    since: &Since,
    store: shards::stores::StoreRef<'_>,
    from: Option<changelog::StatePosition>,
    out: &mut Vec<(uuid::Uuid, Csn)>,
) -> Result<(usize, Option<changelog::StatePosition>)> {
    let shard = &s.conn.ctx.shard;
    let (mut walked, mut last) = (0, None);
    // Only what changed since the cookie is kept from the walk.
    let mut renamed = Vec::new();
    {
        let txn = store.read()?;
        changelog::states(&txn, from, &mut |p, uuid, bytes| {
            (walked, last) = (walked + 1, Some((p, uuid)));
            let Some(state) = shards::merge::decode_state(bytes) else { return walked < CHUNK };
            if let Some(deleted) = state.deleted {
                if since.newer(deleted) && s.showed_before_delete(&state, &uuid) {
                    out.push((uuid::Uuid::from_bytes(uuid), deleted));
                }
                return walked < CHUNK;
            }
            // A state a rename left behind, renamed since the cookie.
            let Some((dn, at)) = state.dn else { return walked < CHUNK };
            let home = Dn::parse(&dn).map(|d| shard.manifest.partition_of(&d.key()) as u16);
            if !home.is_ok_and(|h| h == p) && since.newer(at) {
                renamed.push((uuid, dn, at));
            }
            walked < CHUNK
        })?;
    }
    for (uuid, dn, at) in renamed {
        if let Located::Found(key, ..) = locate(shard, &uuid, dn, None)? {
            // Its DN before the rename is not kept, so whether the
            // requester saw it there is not known: it is named, since a
            // consumer that held it must drop it (a disabled account moved
            // where it may not read must not stay on the replica). That
            // tells a hidden entry's entryUUID and that it moved.
            if !s.in_scope(&key) {
                out.push((uuid::Uuid::from_bytes(uuid), at));
            }
        }
    }
    Ok((walked, last))
}

/// Where a replay of the changes since the cookie starts: in every stream
/// of the changelog, the last record the cookie holds. A stream's records
/// are in CSN order (one origin's, in sequence), so it is found by halving;
/// the reactor is yielded after every `STREAMS_PER_TURN` streams. `None`
/// when a stream's trimmed records may hold changes the cookie lacks.
pub(super) async fn marks_since(ctx: &crate::ctx::Ctx, since: &Since) -> Result<Option<Marks>> {
    const STREAMS_PER_TURN: usize = 32;
    let mut marks = Marks::new();
    for store in ctx.shard.stores.iter() {
        let streams = changelog::streams(&store.read()?)?;
        for some in streams.chunks(STREAMS_PER_TURN) {
            if !marks_of(&store.read()?, some, since, &mut marks)? {
                return Ok(None);
            }
            futures_lite::future::yield_now().await;
        }
    }
    Ok(Some(marks))
}

/// `marks_since` for some streams of one store; false when one of them
/// was trimmed and the cookie names none of its server's changes (the
/// changelog's coverage is judged by the cookie's CSNs: the trimmed
/// records of a server it does not name may be newer).
fn marks_of<T: ReadTxn>(txn: &T, streams: &[changelog::Stream], since: &Since, marks: &mut Marks) -> Result<bool> {
    for &(p, o, first, last) in streams {
        let held = |seq: u64| -> Result<bool> {
            let mut csn = None;
            changelog::read_stream(txn, (p, o), seq, &mut |at, v| {
                if at == seq {
                    csn = changelog::record_csn(v);
                }
                false
            })?;
            Ok(csn.is_some_and(|c| !since.newer(c)))
        };
        // Every record up to `lo` is held, none after `hi`.
        let (mut lo, mut hi) = (first.saturating_sub(1), last);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            match held(mid)? {
                true => lo = mid,
                false => hi = mid - 1,
            }
        }
        if first > 1 && lo + 1 == first && !since.csns.contains_key(&o.sid) {
            return Ok(false);
        }
        marks.insert((p, o), lo);
    }
    Ok(true)
}

/// Most records a refresh replays (`replay`): a cookie older than more
/// changes than this is refreshed by a walk of the entries instead, whose
/// cost the entries bound (a forged old cookie must not make a refresh
/// walk a changelog of millions of records).
pub(super) const REPLAY_MOST: u64 = 100_000;

/// How many records lie between `from` and `until`.
pub(super) fn records_between(from: &Marks, until: &Marks) -> u64 {
    until.iter().map(|(k, last)| last.saturating_sub(from.get(k).copied().unwrap_or(0))).sum()
}

/// The refresh of a cookie the changelog covers, off a mirror pair: the
/// changes since it, replayed in CSN order up to where the changelog
/// stood at the start (`until`), each as the persist stage sends it (as
/// that change left its entry, deletes included). The consumer goes
/// through the states the provider went through: entries that swapped
/// DNs since the cookie, sent at their DNs now, would each have to take
/// a DN the other still held on the consumer, in any order (slapd's
/// modify-DN fails with 68 and it then modifies the other entry). A
/// mirror pair's resyncs change entries without records, so there the
/// refresh compares entries. Returns where it stopped, the CSNs seen and
/// the cookie handed out; `None` when abandoned.
pub(super) async fn replay(
    s: &Session<'_>,
    (since, rid): (&Since, Option<u16>),
    (from, until): (Marks, &Marks),
    abandoned: &crate::ops::abandon::Abandoned,
    sent: &mut u64,
) -> Result<Option<(Marks, Cookie, Cookie)>> {
    let start = before(rid, Some(since));
    super::persist::tail(s, (from, Some(until)), start.clone(), start, abandoned, sent).await
}
