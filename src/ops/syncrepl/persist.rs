//! The persist stage: the changelog tailed in CSN order across every
//! stream, each change sent as its entry now stands, then a `newcookie`.
//! The same walk replays the changes since a cookie in a refresh
//! (`refresh::replay`).

use super::*;

/// Positions in every (partition, origin) stream of the changelog.
pub(super) type Marks = BTreeMap<(u16, Origin), u64>;

/// The persist stage: the changelog from `marks`, until abandoned; with
/// `until` (a refresh's replay), only until every stream has passed its
/// mark there, then where it stopped, the CSNs seen and the cookie handed
/// out (`None` when abandoned). A replay keeps the search's size and
/// time limits.
pub(super) async fn tail(
    s: &Session<'_>,
    (mut marks, until): (Marks, Option<&Marks>),
    mut cookie: Cookie,
    mut handed: Cookie,
    abandoned: &crate::ops::abandon::Abandoned,
    sent: &mut u64,
) -> Result<Option<(Marks, Cookie, Cookie)>> {
    let ctx = &s.conn.ctx;
    let own = ctx.shard.stamping.sid;
    // The record the stream waits on, and for how many rounds.
    let mut stuck: Option<(Csn, u32)> = None;
    // The first round at once: changes committed while the refresh ran.
    let (mut more, mut waiting) = (true, false);
    let (mut commits, mut last) = (ctx.shard.floors.commits(), std::time::Instant::now());
    let mut pace = shards::shard::Pace::new(ROUND, BURST);
    loop {
        match (more, waiting) {
            // A round cut short: the rest at once, after other work.
            (true, _) => futures_lite::future::yield_now().await,
            // A record held back (for the floor, or its entry in transit),
            // or a cookie the floor has yet to pass.
            (false, true) => {
                futures_lite::future::or(glommio::timer::sleep(POLL), abandoned.raised()).await;
            }
            // Up to date: it sleeps until a commit anywhere or an Abandon
            // wakes it; on a mirror pair also a round every `IDLE` (the
            // peer's claim moves apart from commits here). Otherwise it
            // only looks at the commit count every `ASLEEP`, with no round
            // while it stands: thousands of them cost next to nothing.
            (false, false) => {
                let most = if ctx.mirrored { IDLE.saturating_sub(last.elapsed()) } else { ASLEEP };
                let commit = async { Some(ctx.shard.next_commit(commits, most).await) };
                let woke = futures_lite::future::or(commit, async {
                    abandoned.raised().await;
                    None
                })
                .await;
                if abandoned.get() {
                    return Ok(None);
                }
                if woke == Some(commits) && !(ctx.mirrored && last.elapsed() >= IDLE) {
                    continue;
                }
                pace.round().await;
            }
        }
        if abandoned.get() {
            return Ok(None);
        }
        if until.is_some() && s.deadline.is_some_and(|d| std::time::Instant::now() >= d) {
            return Err(Error::new(LdapResultCode::TimeLimitExceeded, ""));
        }
        ctx.metrics.syncrepl_rounds.increment(1);
        let mut out = BytesMut::new();
        let mut changed = false;
        // Before the changelog: a commit it does not count comes after.
        (commits, last) = (ctx.shard.floors.commits(), std::time::Instant::now());
        // Before the changelog: every change below it is in what is read.
        let floor_us = ctx.shard.floors.lowest();
        let settled = ctx.mirrored.then(|| ctx.shared.replication.peer_claim());
        let txns = ctx.shard.stores.snapshot()?;
        let mut held: Option<Csn> = None;
        // A replay at the size limit with another change to send.
        let mut full = false;
        // The room the record held back for it needs (`Announce::Full`).
        let mut short = None;
        let (records, bound) = unsent(&txns, &marks)?;
        more = bound.is_some();
        let read_none = records.is_empty();
        // However many records a round reads (a replay's cookie chooses
        // its backlog), it takes about one slice of reactor time: the rest
        // follows in the next round, after other work.
        let slice_end = std::time::Instant::now() + crate::ops::search::SLICE;
        let mut cut: Option<Csn> = None;
        for (i, (csn, store, p, o, seq, bytes)) in records.into_iter().enumerate() {
            if csn.sid != own {
                // The peer's first change: claimed from now on.
                s.peer_quiet.set(false);
            }
            // Every change goes out in CSN order, across partitions (a
            // parent's move before its children's): one of this server
            // above the floor may yet have one of a slower shard before it.
            if csn.sid == own && csn.phys_us > floor_us {
                held = Some(csn);
                more = false;
                break;
            }
            if i > 0 && std::time::Instant::now() >= slice_end {
                (cut, more) = (Some(csn), true);
                break;
            }
            if let Some(rec) = Record::decode(&bytes) {
                let built = out.len();
                match announce(s, &txns[store], (p, until.is_some()), &rec, &mut out)? {
                    // A replay at the size limit with another change to
                    // send: what was built goes out, then the result.
                    Announce::Sent if until.is_some() && *sent >= s.size => {
                        out.truncate(built);
                        (full, more) = (true, false);
                        break;
                    }
                    Announce::Later if !given_up(&mut stuck, csn) => {
                        held = Some(csn);
                        more = false;
                        break;
                    }
                    // Once what was built is sent and the room is there,
                    // this record again at once.
                    Announce::Full(kib) => {
                        (held, short, more) = (Some(csn), Some(kib), true);
                        break;
                    }
                    Announce::Sent => {
                        *sent += 1;
                        changed = true;
                        // Only CSNs of changes it may see: a cookie at
                        // a hidden change's CSN would time it.
                        cookie.saw(rec.csn);
                    }
                    Announce::Later | Announce::Nothing => {}
                }
            }
            marks.insert((p, o), seq);
        }
        drop(txns);
        if full {
            // What was built goes out first, then the result.
            s.room.send(out).await;
            return Err(Error::new(LdapResultCode::SizeLimitExceeded, ""));
        }
        // Also without changes this round: the floor may have passed what
        // was sent, and the consumer's contextCSN should reach it.
        // Where the round stopped (a record held back, or the end of what
        // was read): of no server id may the cookie claim past it, though
        // the refresh may have seen later CSNs.
        let stop = held.or(cut).or(bound).map(Csn::just_below);
        let peers = peer_claims(settled, &BTreeMap::new(), s.peer_quiet.get());
        let seen = stop.map_or_else(|| cookie.clone(), |s| cookie.up_to(s));
        let next = seen.capped(own, claimable(own, floor_us, None), &handed, peers).claiming_peer(peers, stop);
        // Again soon while a record is held back, or while the floor has
        // not passed a change sent (the cookie names it once it has).
        let behind = next.csns.get(&own) < seen.csns.get(&own);
        waiting = (held.is_some() && short.is_none()) || (behind && !more);
        if changed || next != handed {
            handed = next;
            let value = new_cookie_value(&handed.compose(own));
            s.info(&mut out, LdapIntermediateResponse::Raw { name: Some(SYNC_INFO.to_string()), value: Some(value) });
            s.room.send(out).await;
        }
        // Room waited for last round, for an entry this one did not send.
        s.room.release();
        if let Some(kib) = short {
            s.room.wait_for(kib).await;
        }
        // A replay ends once every stream is past where it was at the
        // start, whatever came since (continuous writes must not hold it),
        // or once nothing is left to read (a stream's last number may be
        // above its last record: a resync advances it).
        let passed = |u: &Marks| u.iter().all(|(k, v)| marks.get(k).is_some_and(|m| m >= v));
        let drained = read_none && !more && held.is_none();
        if until.is_some_and(|u| drained || passed(u)) {
            return Ok(Some((marks, cookie, handed)));
        }
    }
}

/// Rounds a record may wait for its entry's state to arrive (a rename
/// between partitions) before the stream goes on without it: a parcel is
/// delivered within a round or two; one that never is must not hold every
/// later change back for good.
pub(super) const PATIENCE: u32 = 100;

/// Counts another round waiting on `csn`; true once past `PATIENCE`.
pub(super) fn given_up(stuck: &mut Option<(Csn, u32)>, csn: Csn) -> bool {
    let rounds = match stuck {
        Some((c, n)) if *c == csn => {
            *n += 1;
            *n
        }
        _ => {
            *stuck = Some((csn, 1));
            1
        }
    };
    if rounds == PATIENCE {
        eprintln!("coredir: syncrepl: the entry of change {csn} never arrived at its new DN; going on without it");
    }
    rounds >= PATIENCE
}

/// Records read per stream and round: what one round holds is bounded
/// (the rest waits for the next round, which follows at once).
pub(super) const PER_STREAM: usize = 256;

/// The records above `marks` in every stream, oldest CSN first: (CSN,
/// store, partition, origin, sequence number, record), at most
/// `PER_STREAM` of each, cut at the newest CSN every stream read whole
/// reaches (true when so cut: more follow).
#[allow(clippy::type_complexity)]
pub(super) fn unsent<T: ReadTxn>(
    txns: &[T],
    marks: &BTreeMap<(u16, Origin), u64>,
) -> Result<(Vec<(Csn, usize, u16, Origin, u64, Vec<u8>)>, Option<Csn>)> {
    let mut all = Vec::new();
    let mut bound: Option<Csn> = None;
    for (store, txn) in txns.iter().enumerate() {
        for (p, o, first, last) in changelog::streams(txn)? {
            let mark = marks.get(&(p, o)).copied().unwrap_or(0);
            if last <= mark {
                continue;
            }
            if first > mark + 1 {
                return Err(Error::new(
                    LdapResultCode::EsyncRefreshRequired,
                    "the changelog was trimmed past this session's position: refresh",
                ));
            }
            let (mut taken, mut newest) = (0, Csn::default());
            changelog::read_stream(txn, (p, o), mark + 1, &mut |seq, v| {
                newest = changelog::record_csn(v).unwrap_or_default();
                all.push((newest, store, p, o, seq, v.to_vec()));
                taken += 1;
                taken < PER_STREAM
            })?;
            if taken == PER_STREAM && mark + (taken as u64) < last {
                bound = Some(bound.map_or(newest, |b| b.min(newest)));
            }
        }
    }
    // Within a stream sequence order is CSN order, so no stream is cut
    // but at its end or the bound.
    all.sort_by_key(|r| r.0);
    if let Some(b) = bound {
        all.retain(|r| r.0 <= b);
    }
    Ok((all, bound))
}

pub(super) enum Announce {
    Sent,
    Nothing,
    /// The entry is on its way to another partition: look again next round.
    Later,
    /// No room in the connection's output for the entry message: again
    /// once this many KiB are free.
    Full(u64),
}

pub(crate) enum Located {
    /// Its DN key, the entry, and the filter's equality items the index
    /// decided for it in the same snapshot (`index::decided_items`).
    Found(Vec<u8>, Entry, Vec<(usize, bool)>),
    Gone,
    /// Its state is on its way to the partition of its new DN.
    Pending,
}

/// Finds an entry by entryUUID from a DN it had: where the state kept
/// there says it went, partition after partition (each rename leaves the
/// state behind with the DN it moved to).
pub(crate) fn locate(
    shard: &shards::Shard,
    uuid: &[u8; 16],
    mut shown: String,
    filter: Option<&filter::Node>,
) -> Result<Located> {
    // The stamp of the DN that led here: a state left behind by an earlier
    // stay in a partition may point back the way the entry came, with an
    // older stamp, while the newest move's state is still in its parcel.
    let mut led_by: Option<Csn> = None;
    for _hop in 0..16 {
        let key = Dn::parse(&shown)?.key();
        let txn = shard.read_for(&key)?;
        if let Some((id, view)) = txn.entry(&key)? {
            let entry = Entry::decode_view(&view)?;
            if shards::merge::uuid_of(&entry).ok() == Some(*uuid) {
                let decided = match filter {
                    Some(f) => shards::index::decided_items(&txn, f, id, view.size())?,
                    None => Vec::new(),
                };
                return Ok(Located::Found(key, entry, decided));
            }
        }
        let partition = shard.manifest.partition_of(&key) as u16;
        match changelog::load_state(&txn, partition, uuid)? {
            None => return Ok(Located::Pending),
            Some(st) if !st.is_live() => return Ok(Located::Gone),
            Some(st) => {
                let at = st.dn.as_ref().map(|(_, at)| *at);
                if led_by.is_some_and(|led| at < Some(led)) {
                    return Ok(Located::Pending);
                }
                led_by = at;
                match st.shown_dn(uuid) {
                    Some(next) if next != shown => shown = next,
                    _ => return Ok(Located::Pending),
                }
            }
        }
    }
    // Renamed over and over: its later records find it in fewer hops.
    Ok(Located::Gone)
}

/// For an entry about to go out at a DN it has left: whether the search
/// shows it where it is now (in scope, matching), and which of its
/// attributes the requester may read there. Sent at the old DN, it carries
/// only those: the rights at the old DN must not uncover what was written
/// since (the rights at the old DN apply too, when it is sent).
fn readable_now(
    s: &Session<'_>,
    key: &[u8],
    entry: &Entry,
    decided: Vec<(usize, bool)>,
) -> Result<Option<Vec<String>>> {
    let mut bytes = Vec::new();
    entry.encode(&mut bytes)?;
    let view = EntryView::new(&bytes)?;
    if !s.in_scope(key) || !shards::filter::with_decided(decided, || s.matches(key, &view))? {
        return Ok(None);
    }
    let target = Target { key, entry: Some(&view) };
    let keep = |name: &str| {
        ["entryUUID", "entryCSN"].iter().any(|k| shards::matching::same_attr(k, name))
            || s.plan.as_ref().is_none_or(|p| p.allows(&target, name, Level::Read))
    };
    Ok(Some(view.attrs().map(|a| a.name).filter(|n| keep(n)).map(String::from).collect()))
}

/// An entry as a rename it has moved on from left it: at that rename's
/// DN, with that RDN's values in place of the current RDN's; the rest as
/// it is now, which the later records bring up to date.
fn as_renamed(mut entry: Entry, (text, to): (&str, &Dn)) -> Result<Entry> {
    let now = Dn::parse(&entry.dn)?;
    // The server's own (a conflict DN's entryUUID) stay.
    let user_avas = now.rdn().map(|r| r.avas.as_slice()).unwrap_or_default().iter();
    for ava in user_avas.filter(|a| !shards::matching::is_operational(&a.attr)) {
        let old = Mod::Delete(Attr { name: ava.attr.clone(), vals: vec![ava.value.clone()] });
        entry.apply_with(std::slice::from_ref(&old), true)?;
    }
    for ava in to.rdn().map(|r| r.avas.as_slice()).unwrap_or_default() {
        if !entry.has_value(&ava.attr, &ava.value) {
            entry.add_values(&ava.attr, std::slice::from_ref(&ava.value))?;
        }
    }
    entry.dn = text.to_string();
    Ok(entry)
}

/// What one change record means to the consumer, as the entry is now.
/// `refreshing`: a refresh's replay, whose entry messages all carry the
/// add state (RFC 4533 §3.3 has no modify state in a refresh).
pub(super) fn announce<T: ReadTxn>(
    s: &Session<'_>,
    txn: &T,
    (partition, refreshing): (u16, bool),
    rec: &Record,
    out: &mut BytesMut,
) -> Result<Announce> {
    let shard = &s.conn.ctx.shard;
    let old_key = Dn::parse(&rec.dn)?.key();
    let state = match changelog::load_state(txn, partition, &rec.uuid)? {
        Some(st) if st.is_live() => st,
        tomb => {
            if tomb.as_ref().is_some_and(|tomb| s.showed_before_delete(tomb, &rec.uuid)) {
                // At the delete's own record (or past it), never at an
                // earlier one: a replay from a lagging cookie would say a
                // parent gone before the renames and deletes that emptied
                // it below on the consumer (slapd: 66, and the same
                // refresh again for good). The delete's record comes.
                let deleted = tomb.as_ref().and_then(|t| t.deleted);
                if matches!(rec.change, Change::Delete) || deleted.is_some_and(|d| rec.csn >= d) {
                    s.delete(out, &rec.dn, rec.uuid);
                    return Ok(Announce::Sent);
                }
                return Ok(Announce::Nothing);
            }
            // Deleted after this change took it out of the search (its
            // last state no longer shows it): the consumer may hold it from
            // before the change, and no later record would say it is gone.
            let left = matches!(rec.change, Change::Rename { .. } | Change::Modify { .. } | Change::Conflict { .. });
            if tomb.is_some() && left && s.in_scope(&old_key) && s.may_learn(&old_key, None) {
                s.delete(out, &rec.dn, rec.uuid);
                return Ok(Announce::Sent);
            }
            return Ok(Announce::Nothing);
        }
    };
    let Some(shown) = state.shown_dn(&rec.uuid) else { return Ok(Announce::Nothing) };
    let (mut key, mut entry, mut decided) = match locate(shard, &rec.uuid, shown, Some(&s.filter))? {
        Located::Found(key, entry, decided) => (key, entry, decided),
        // Moved, and deleted since: it leaves the consumer here, where it
        // left its old place. Its delete's record comes later, maybe after
        // that of the parent it left, which slapd refuses while it holds
        // the entry below (66, and then the same refresh again for good).
        Located::Gone if matches!(rec.change, Change::Rename { .. }) => {
            if s.in_scope(&old_key) && s.may_learn(&old_key, None) {
                s.delete(out, &rec.dn, rec.uuid);
                return Ok(Announce::Sent);
            }
            return Ok(Announce::Nothing);
        }
        // Deleted since: the delete's own record says so.
        Located::Gone => return Ok(Announce::Nothing),
        Located::Pending => return Ok(Announce::Later),
    };
    // Changed since: it goes out as this record left it, as slapd's
    // syncprov sends every change, so that the consumer takes each step
    // in order (two entries swapping DNs through a third must never be
    // told to take a DN the other still holds there): at the DN this
    // record gave it and stamped with its CSN, so that slapd, which
    // ignores an entry no newer than the one it holds, takes the later
    // steps too. An add of an entry renamed since goes out at the DN it
    // gave the entry (a child moved below it meanwhile goes out at that
    // DN too: the parent must be there first); a modify waits for the
    // rename's record.
    let renamed = match &rec.change {
        Change::Rename { to, .. } => Some((to.as_str(), Dn::parse(to)?)),
        // Not a conflict's loser: another entry holds that DN there.
        Change::Add { .. } if state.conflict.is_none() => Some((rec.dn.as_str(), Dn::parse(&rec.dn)?)),
        _ => None,
    };
    let after = renamed.as_ref().map_or_else(|| old_key.clone(), |(_, to)| to.key());
    if entry.csn().is_some_and(|now| now > rec.csn) {
        match (key != after, renamed) {
            // In a replay, an entry modified since in place goes out with
            // its later record (every change here has one, and no cookie
            // claims a record not yet read): once, not once per change.
            // Not an add: the entry may have been away and back since,
            // and what moved below it meanwhile needs it there first.
            (false, _) if refreshing && !matches!(rec.change, Change::Rename { .. } | Change::Add { .. }) => {
                return Ok(Announce::Nothing)
            }
            (false, _) => {}
            (true, None) => return Ok(Announce::Nothing),
            (true, Some((text, to))) => {
                let Some(readable) = readable_now(s, &key, &entry, decided)? else { return Ok(Announce::Nothing) };
                entry.attrs.retain(|a| readable.contains(&a.name));
                // An entry that cannot be shown so (its RDN's value gone)
                // waits for its later record, as before.
                let Ok(then) = as_renamed(entry, (text, &to)) else { return Ok(Announce::Nothing) };
                entry = then;
                (key, decided) = (after, Vec::new());
            }
        }
        entry.set("entryCSN", vec![rec.csn.to_string().into_bytes()]);
    }
    let mut bytes = Vec::new();
    entry.encode(&mut bytes)?;
    let view = EntryView::new(&bytes)?;
    if s.in_scope(&key) && shards::filter::with_decided(decided, || s.matches(&key, &view))? {
        let add = refreshing || matches!(rec.change, Change::Add { .. });
        let state = if add { SyncStateValue::Add } else { SyncStateValue::Modify };
        if let Some(kib) = s.short_of_room(&view) {
            return Ok(Announce::Full(kib));
        }
        s.entry(out, &key, &view, state)?;
        return Ok(Announce::Sent);
    }
    // Out of scope now: if it may have been in it before, the consumer drops it.
    if matches!(rec.change, Change::Rename { .. } | Change::Modify { .. } | Change::Conflict { .. })
        && s.in_scope(&old_key)
        && s.may_learn(&old_key, Some(&view))
    {
        if matches!(rec.change, Change::Rename { .. }) {
            drop_below(s, out, (&key, &old_key))?;
        }
        // The DN it had: its new one may be hidden.
        s.delete(out, &rec.dn, rec.uuid);
        return Ok(Announce::Sent);
    }
    Ok(Announce::Nothing)
}

/// Most entries below a subtree that leaves the scope whose deletes go out
/// before its top's (`drop_below`).
const MOST_BELOW: usize = 100_000;

/// A subtree moved out of the scope (from `old_key` to `key`): the
/// consumer holds what was below it, and slapd deletes no entry that
/// still has children (66). So what the requester could see below the
/// old DN goes first, deepest first, before the top's delete (each
/// entry's own record, later, says it again: harmless).
fn drop_below(s: &Session<'_>, out: &mut BytesMut, (key, old_key): (&[u8], &[u8])) -> Result<()> {
    let txns = s.conn.ctx.shard.stores.snapshot()?;
    let mut prefix = key.to_vec();
    prefix.push(shards::dn::KEY_SEPARATOR);
    let (rows, _) = shards::subtree::next_chunk(&txns, &prefix, &prefix, (MOST_BELOW, MOST_BELOW), &mut |_| {
        shards::subtree::Step::Take
    })?;
    // Reversed key order: every entry before the entries above it.
    for (below, id, store) in rows.iter().rev() {
        let Some(view) = txns[*store].entry_by_id(id)? else { continue };
        let was = [old_key, &below[key.len()..]].concat();
        if s.in_scope(&was) && s.may_learn(&was, Some(&view)) {
            s.delete(out, view.dn(), *uuid_of_view(&view)?.as_bytes());
        }
    }
    Ok(())
}
