//! Content synchronization (RFC 4533, "syncrepl"), the provider side: a
//! search with the Sync Request control, so that a stock OpenLDAP consumer
//! (slapd's `syncrepl` directive) replicates from coredir.
//!
//! - **Refresh** (both modes): every entry in scope goes out, in DN key
//!   order across all stores (parents first; the walk admitted as a
//!   search is, so that a subtree rename is met whole, and walked again
//!   in full when a rename overtook it), in full with
//!   the `add` state when it changed since the cookie (or there is no
//!   usable cookie), else as a `present` message (its DN and entryUUID
//!   only). That is RFC 4533's present phase: the consumer deletes what was
//!   not named, so deletes need no history. Then refreshOnly ends with
//!   SearchResultDone and a Sync Done control carrying the new cookie;
//!   refreshAndPersist sends Sync Info `refreshPresent` (refreshDone) and
//!   goes on. With a cookie the changelog covers, off a mirror pair, the
//!   refresh instead replays the changes since it in CSN order as the
//!   persist stage sends them (`refresh::replay`): a delete phase whose
//!   consumer goes through the provider's states (DN swaps included).
//! - **Persist**: the changelog (`shards::changelog`, kept when mirror mode
//!   or `syncrepl.provider` is on) is tailed from the positions taken
//!   before the refresh began, after every commit (the committing owner
//!   wakes it: `Shard::next_commit`) and at least every `IDLE`: each
//!   record names an entry by
//!   entryUUID, and the entry goes out as it is now (`modify`, `add`), or
//!   as `delete` when it is gone; a rename is the entry at its new DN,
//!   which the consumer applies as a modify-DN (it matches by entryUUID).
//!   Records go out in CSN order across every stream, this server's own
//!   only below the commit floor; a record whose entry changed again
//!   since goes out as that change left it (`persist::announce`: a rename
//!   at its DN, stamped with its CSN), and in a refresh's replay a change
//!   in place superseded since says nothing (the later record does): a
//!   consumer meets a subtree's moves parents first. After each round with
//!   changes, a Sync Info `newcookie`.
//! - **Cookies** are OpenLDAP's: `rid=NNN,sid=SSS,csn=<csn>[;<csn>…]`, one
//!   CSN per server id (both servers of a mirror pair), the consumer's
//!   `rid` echoed. A cookie claims every change up to its CSNs, so this
//!   server's own CSN in it is never above the lowest commit floor
//!   (`shards::shard::Floors`, read before the changelog is) nor at or
//!   above a record held back for a pending rename: a change stamped on a
//!   slower shard cannot come after a cookie that claims it; the peer's
//!   CSN never above what the peer settled here. An entry counts as
//!   changed when its `entryCSN` is above the cookie's CSN for its
//!   server; on a server of a mirror pair also when any stamp of its
//!   replicated state is (see `Since`: a late change of the peer, older
//!   than one made here, does not move `entryCSN`), and a cookie the
//!   peer handed out counts only as far as this server holds it. No
//!   margin of time decides anything (sending an entry twice would be
//!   harmless, missing one is not). Entries in the persist stage
//!   carry no cookie; the `newcookie` messages carry it.
//! - Abandon and Cancel (RFC 3909) end a persistent search.
//!
//! ldap3_proto 0.9 writes `newcookie` as a constructed `[0]`; slapd expects
//! the primitive `0x80` (research/replication.md §6), so it is built here.
//!
//! Here: the request and the session (scope, filter, access, messages).
//! `cookie`: cookies and their claims. `refresh` and `persist`: the stages.

use crate::acl::{Level, ReadPlan, Target};
use crate::conn::{encode, Conn, Identity, Reservation};
use crate::ops::controls::Controls;
use crate::ops::record::{self, Operation};
use crate::ops::search::{visible_match, Scope, Selection};
use crate::ops::{parse_dn, result, with_matched};
use crate::repl::PeerClaim;
use bytes::BytesMut;
use ldap3_proto::control::LdapControl;
use ldap3_proto::proto::{
    LdapIntermediateResponse, LdapMsg, LdapOp, LdapPartialAttribute, LdapSearchRequest, LdapSearchResultEntry,
    LdapSearchScope, SyncStateValue,
};
use ldap3_proto::LdapResultCode;
use shards::changelog::{self, Origin};
use shards::csn::Csn;
use shards::dn::Dn;
use shards::entry::{Attr, Entry, EntryView, Mod};
use shards::merge::{Change, EntryState, Record};
use shards::ReadTxn;
use shards::{filter, Error, Result};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

pub const SYNC_REQUEST: &str = "1.3.6.1.4.1.4203.1.9.1.1";
const SYNC_INFO: &str = "1.3.6.1.4.1.4203.1.9.1.4";
/// How often a persistent search holding a record back (for the commit
/// floor, or its entry in transit) looks at the changelog again.
const POLL: Duration = Duration::from_millis(100);
/// How often an idle persistent search on a mirror pair looks at the
/// changelog (a commit anywhere wakes it at once:
/// `shards::Shard::next_commit`).
const IDLE: Duration = Duration::from_secs(1);
/// How long an idle persistent search off a mirror pair sleeps when
/// nothing wakes it: then it looks whether the commit count moved (a
/// wake-up the owner dropped with its mesh channel full) and makes a
/// round only if it did.
const ASLEEP: Duration = Duration::from_secs(2);
/// A persistent search woken by a stream of commits makes `BURST` rounds
/// at once, then one per `ROUND` (`shards::shard::Pace`): no more than
/// when it looked every 100 ms.
const ROUND: Duration = Duration::from_millis(100);
const BURST: u32 = 4;
/// Entries read per snapshot in the refresh before yielding.
const CHUNK: usize = 1024;
/// Most keys a refresh chunk walks in one store.
const SCANNED: usize = 4 * CHUNK;

mod cookie;
mod persist;
mod refresh;

pub use cookie::Cookie;
use cookie::{before, claimable, Since};
use persist::tail;
pub(crate) use persist::{locate, Located};
use refresh::{phase, refresh, replay, Phase};

/// The Sync Info `newcookie` message's value (primitive `[0]`).
pub fn new_cookie_value(cookie: &[u8]) -> Vec<u8> {
    let mut out = bytes::BytesMut::with_capacity(cookie.len() + 4);
    crate::ber::put_tlv(&mut out, 0x80, cookie);
    out.to_vec()
}

/// Starts a syncrepl search (`persist`: refreshAndPersist).
/// `identity`: who the search runs as (`Controls::requester`).
pub fn start(
    conn: &Rc<Conn>,
    ctrls: &Controls,
    msgid: i32,
    req: LdapSearchRequest,
    persist: bool,
    cookie: Option<Vec<u8>>,
    rec: Operation,
) {
    let (abandoned, in_flight) = crate::ops::search::running(conn, msgid);
    let conn = conn.clone();
    let (identity, manage_dsa_it) = (ctrls.acting.clone(), ctrls.manage_dsa_it);
    glommio::spawn_local(async move {
        let _in_flight = in_flight;
        let mut sent = 0u64;
        let from = (cookie.as_deref(), manage_dsa_it);
        let res = run(&conn, &identity, msgid, &req, persist, from, &abandoned, &mut sent).await;
        crate::ops::search::finished(&conn, msgid, &abandoned);
        let canceled = conn.canceled.borrow_mut().remove(&msgid);
        if abandoned.get() && !canceled {
            record::end(&conn, &rec, &LdapResultCode::Canceled, "", Some(sent));
            return;
        }
        let (res, ctrl) = match res {
            Ok(_) if canceled => (Err(Error::new(LdapResultCode::Canceled, "canceled")), Vec::new()),
            Ok(done) => (Ok(()), done.into_iter().collect()),
            Err(e) => (Err(e), Vec::new()),
        };
        let mut done = LdapMsg::new(msgid, LdapOp::SearchResultDone(result(res)));
        done.ctrl = ctrl;
        record::end_with(&conn, &rec, &done.op, Some(sent));
        let mut out = BytesMut::new();
        encode(&mut out, done);
        conn.send(out).await;
    })
    .detach();
}

/// One syncrepl search: what scope, filter and access allow.
struct Session<'a> {
    conn: &'a Conn,
    msgid: i32,
    base: Dn,
    base_key: Vec<u8>,
    scope: LdapSearchScope,
    below: Scope,
    filter: filter::Node,
    sel: Selection<'a>,
    plan: Option<ReadPlan<'a>>,
    /// `limits.max_filter_tests`.
    tests: u64,
    /// The most entry messages the refresh sends (the size limit, as for
    /// a search: slapd's replicator needs `limits` to lift it too).
    size: u64,
    /// When the refresh ends with `timeLimitExceeded` (the search's time
    /// limit, as slapd's backend applies it to the refresh; the persist
    /// stage has none).
    deadline: Option<std::time::Instant>,
    /// Room in the connection's output, taken before an entry message is
    /// built: a sync search waiting to send holds at most what it took.
    room: Reservation<'a>,
    /// No change of the mirror peer is here (`peer_quiet`): until the
    /// persist stage reads one.
    peer_quiet: std::cell::Cell<bool>,
}

impl Session<'_> {
    /// Whether the search's scope takes the entry with this DN key.
    fn in_scope(&self, key: &[u8]) -> bool {
        match key == self.base_key.as_slice() {
            true => matches!(self.scope, LdapSearchScope::Base | LdapSearchScope::Subtree),
            false => self.scope != LdapSearchScope::Base && self.below.contains(key),
        }
    }

    /// Whether the requester sees this entry and it matches the filter;
    /// past `limits.max_filter_tests` on it the sync search ends with
    /// adminLimitExceeded, as a search does.
    fn matches(&self, key: &[u8], view: &EntryView<'_>) -> Result<bool> {
        visible_match(self.plan.as_ref(), &self.filter, &Target { key, entry: Some(view) }, view, self.tests)
    }

    /// Whether the requester may learn that the entry at `key` left its
    /// content (deleted, renamed away, no longer matching). slapd's syncprov
    /// sends such a delete only for an entry that matched the search under
    /// the searcher's rights; the content before the change is not kept
    /// here, so this asks whether the entry at its old DN, with what is
    /// known of it now (nothing, for a delete), may be read at all.
    fn may_learn(&self, key: &[u8], entry: Option<&EntryView<'_>>) -> bool {
        self.plan.as_ref().is_none_or(|plan| plan.entry_readable(&Target { key, entry }))
    }

    /// Whether a deleted entry was one this search showed: in scope and
    /// matching under the requester's rights as it stood before the delete
    /// (the tombstone keeps every value), as syncprov decides a delete.
    fn showed_before_delete(&self, tomb: &EntryState, uuid: &[u8; 16]) -> bool {
        let mut before = tomb.clone();
        before.deleted = None;
        let Some(entry) = shards::merge::materialize(&before, uuid) else { return false };
        let Ok(key) = Dn::parse(&entry.dn).map(|d| d.key()) else { return false };
        let mut bytes = Vec::new();
        if entry.encode(&mut bytes).is_err() {
            return false;
        }
        // Past the filter's bound it counts as matched: the consumer is told
        // of the departure rather than keep an entry it may hold.
        EntryView::new(&bytes).is_ok_and(|view| self.in_scope(&key) && self.matches(&key, &view).unwrap_or(true))
    }

    /// Takes room in the connection's output for the entry message of
    /// `view` before it is built; the KiB to wait for (`Reservation::wait_for`,
    /// after sending what was built) when there is none now.
    fn short_of_room(&self, view: &EntryView<'_>) -> Option<u64> {
        let kib = self.room.kib_of(view.size());
        (!self.room.try_take(kib)).then_some(kib)
    }

    /// The entry message: stored attributes the selection asks for and the
    /// requester may read (no computed ones: a consumer's schema may not
    /// know them), with its Sync State.
    fn entry(&self, out: &mut BytesMut, key: &[u8], view: &EntryView<'_>, state: SyncStateValue) -> Result<()> {
        let target = Target { key, entry: Some(view) };
        let uuid = uuid_of_view(view)?;
        let attributes = match state {
            SyncStateValue::Present => Vec::new(),
            _ => view
                .attrs()
                .filter(|a| self.sel.wants(a.name))
                .filter(|a| self.plan.as_ref().is_none_or(|p| p.allows(&target, a.name, Level::Read)))
                .map(|a| LdapPartialAttribute {
                    atype: a.name.to_string(),
                    vals: a.vals().map(<[u8]>::to_vec).collect(),
                })
                .collect(),
        };
        let mut msg = LdapMsg::new(
            self.msgid,
            LdapOp::SearchResultEntry(LdapSearchResultEntry { dn: view.dn().to_string(), attributes }),
        );
        msg.ctrl = vec![LdapControl::SyncState { state, entry_uuid: uuid, cookie: None }];
        encode(out, msg);
        Ok(())
    }

    /// A delete message: the DN and entryUUID of an entry that is gone.
    fn delete(&self, out: &mut BytesMut, dn: &str, uuid: [u8; 16]) {
        let mut msg = LdapMsg::new(
            self.msgid,
            LdapOp::SearchResultEntry(LdapSearchResultEntry { dn: dn.to_string(), attributes: Vec::new() }),
        );
        msg.ctrl = vec![LdapControl::SyncState {
            state: SyncStateValue::Delete,
            entry_uuid: uuid::Uuid::from_bytes(uuid),
            cookie: None,
        }];
        encode(out, msg);
    }

    fn info(&self, out: &mut BytesMut, info: LdapIntermediateResponse) {
        encode(out, LdapMsg::new(self.msgid, LdapOp::IntermediateResponse(info)));
    }
}

fn uuid_of_view(view: &EntryView<'_>) -> Result<uuid::Uuid> {
    let text = view.attrs().find(|a| a.name.eq_ignore_ascii_case("entryUUID")).and_then(|a| a.vals().next());
    let text = text.and_then(|t| std::str::from_utf8(t).ok()).unwrap_or_default();
    uuid::Uuid::parse_str(text).map_err(|_| Error::other(format!("{}: no entryUUID", view.dn())))
}

fn entry_csn(view: &EntryView<'_>) -> Option<Csn> {
    let a = view.attrs().find(|a| a.name.eq_ignore_ascii_case("entryCSN"))?;
    Csn::parse(std::str::from_utf8(a.vals().next()?).ok()?)
}

/// The search; for refreshOnly, the Sync Done control of SearchResultDone.
#[allow(clippy::too_many_arguments)]
async fn run(
    conn: &Conn,
    identity: &Identity,
    msgid: i32,
    req: &LdapSearchRequest,
    persist: bool,
    (cookie, manage_dsa_it): (Option<&[u8]>, bool),
    abandoned: &crate::ops::abandon::Abandoned,
    sent: &mut u64,
) -> Result<Option<LdapControl>> {
    let ctx = &conn.ctx;
    if !ctx.shard.stamping.capture {
        return Err(Error::new(
            LdapResultCode::UnavailableCriticalExtension,
            "this server is not a syncrepl provider: set [syncrepl] provider = true (it keeps a changelog)",
        ));
    }
    let base = parse_dn(&req.base)?;
    if !ctx.within_suffix(&base) {
        return Err(Error::no_such_object(&req.base));
    }
    let live = ctx.live();
    let plan = conn.access(&live, identity).map(ReadPlan::new);
    let mut node = filter::compile(&req.filter);
    if let Some(plan) = &plan {
        node = node.restrict(&|names| plan.searchable(names));
    }
    let base_key = base.key();
    // What a search would pass over (slapd's refresh is back-mdb's search).
    node = crate::ops::search::subentry_visibility(node, req, &base_key, None, !persist);
    node = crate::ops::search::glue_visibility(node, manage_dsa_it, !persist);
    let size = crate::ops::search::size_limit(&live, plan.as_ref(), req) as u64;
    let deadline = crate::ops::search::deadline(&live, plan.as_ref(), req);
    let session = Session {
        conn,
        msgid,
        below: Scope::below(&base_key, &req.scope),
        base,
        base_key,
        scope: req.scope.clone(),
        filter: node,
        sel: Selection::new(&req.attrs, false).hiding_counts(plan.as_ref().is_some_and(|p| !p.every_entry_readable())),
        plan,
        tests: live.limits.max_filter_tests,
        size,
        deadline,
        room: conn.reservation(),
        peer_quiet: std::cell::Cell::new(false),
    };
    // A base the requester may not know of is missing, as for a search.
    let known = ctx.shard.with_entry(&session.base_key, |view| {
        let target = Target { key: &session.base_key, entry: Some(view) };
        session.plan.as_ref().is_none_or(|p| p.entry_disclosed(&target))
    })?;
    match known {
        None => return Err(with_matched(conn, identity, &session.base, Error::no_such_object(&req.base))),
        Some(false) => return Err(Error::no_such_object(&req.base)),
        Some(true) => {}
    }
    let given = cookie.and_then(Cookie::parse);
    let rid = given.as_ref().and_then(|c| c.rid).or_else(|| cookie.and_then(rid_only));
    // A consumer holding changes of this server that a restore lost gets
    // everything as if it had no cookie, and a present phase that ends
    // with a cookie past the restore: newer than its own, so slapd deletes
    // what was not present. (e-syncRefreshRequired would not do: slapd's
    // consumer retries with the same cookie for ever.) Not on a mirror
    // pair, whose peer hands the lost changes back with their own CSNs.
    let own = given.as_ref().and_then(|g| g.csns.get(&ctx.shard.stamping.sid));
    let lost = own.and_then(|csn| ctx.shard.manifest.lost_change(*csn)).filter(|_| !ctx.mirrored);
    let given = given.filter(|_| lost.is_none());
    // Where the persist stage will start: before anything the refresh
    // reads; the floor before that, so that every change below it is in.
    let floor_us = floors_past_newest(ctx, abandoned).await?;
    // The channel's lock: only on a server of a mirror pair.
    let settled = ctx.mirrored.then(|| ctx.shared.replication.peer_claim());
    let transit = in_transit(ctx)?;
    let moving = transit.get(&ctx.shard.stamping.sid).copied();
    let marks = positions(ctx)?;
    // After the persist stage's start: a first change of the peer that
    // comes later is the persist stage's to send.
    let quiet = settled.as_ref().map_or(Ok(false), |claim| peer_quiet(ctx, claim))?;
    session.peer_quiet.set(quiet);
    let peers = peer_claims(settled, &transit, quiet);
    let since = given.as_ref().map(|g| Since::new(g, ctx.shard.stamping.sid, peers));
    let sid = ctx.shard.stamping.sid;
    // A cookie the changelog covers, off a mirror pair, and not too old:
    // its changes replayed.
    let replayed = match &since {
        Some(since) if !ctx.mirrored && phase(ctx, Some(since))? == Phase::Delete => {
            let from = refresh::marks_since(ctx, since).await?;
            from.filter(|f| refresh::records_between(f, &marks) <= refresh::REPLAY_MOST).map(|f| (since, f))
        }
        _ => None,
    };
    if let Some((since, from)) = replayed {
        let Some((marks, next, handed)) = replay(&session, (since, rid), (from, &marks), abandoned, sent).await? else {
            return Ok(None);
        };
        let cookie = Some(handed.compose(sid));
        if !persist {
            return Ok(Some(LdapControl::SyncDone { cookie, refresh_deletes: true }));
        }
        let mut out = BytesMut::new();
        session.info(&mut out, LdapIntermediateResponse::SyncInfoRefreshDelete { cookie, done: true });
        // Through the reservation: room it still holds (an entry waited
        // for and not sent) is given back first, else this could wait for good.
        session.room.send(out).await;
        tail(&session, (marks, None), next, handed, abandoned, sent).await?;
        return Ok(None);
    }
    let mut next = Cookie { rid, csns: since.as_ref().map(|s| s.csns.clone()).unwrap_or_default() };
    if let Some(restored) = lost {
        next.saw(restored);
    }
    let cap = (floor_us, moving, &peers);
    let (phase, handed) = refresh(&session, since.as_ref(), &mut next, cap, abandoned, sent).await?;
    let (cookie, deletes) = (Some(handed.compose(sid)), phase != Phase::Present);
    if !persist {
        return Ok(Some(LdapControl::SyncDone { cookie, refresh_deletes: deletes }));
    }
    let mut out = BytesMut::new();
    let end = match deletes {
        true => LdapIntermediateResponse::SyncInfoRefreshDelete { cookie, done: true },
        false => LdapIntermediateResponse::SyncInfoRefreshPresent { cookie, done: true },
    };
    session.info(&mut out, end);
    // Through the reservation: room it still holds (an entry waited
    // for and not sent) is given back first, else this could wait for good.
    session.room.send(out).await;
    tail(&session, (marks, None), next, handed, abandoned, sent).await?;
    Ok(None)
}

/// The lowest commit floor, once it has passed this server's newest
/// change, a few floor ticks at most. Right after a write the other
/// shards' floors are up to a tick behind it, and a cookie may not claim
/// past the lowest: the refresh would end with a cookie short of that
/// write, and a `newcookie` would follow a moment later. slapd's refresh
/// ends with the contextCSN and then says nothing while nothing changes,
/// which clients rely on (python-ldap's own tests poll for that silence).
async fn floors_past_newest(ctx: &crate::ctx::Ctx, abandoned: &crate::ops::abandon::Abandoned) -> Result<u64> {
    const PATIENCE: Duration = Duration::from_secs(1);
    let own = ctx.shard.stamping.sid;
    let mut newest = 0;
    for store in ctx.shard.stores.iter() {
        let csns = changelog::newest(&store.read()?, None)?;
        newest = csns.iter().filter(|c| c.sid == own).map(|c| c.phys_us).fold(newest, u64::max);
    }
    let give_up = std::time::Instant::now() + PATIENCE;
    loop {
        let floor = ctx.shard.floors.lowest();
        // An abandoned search stops waiting (the stages after it see the
        // flag and end at once).
        if floor >= newest || abandoned.get() || std::time::Instant::now() >= give_up {
            return Ok(floor);
        }
        glommio::timer::sleep(Duration::from_millis(10)).await;
    }
}

/// The rid of a cookie that carries nothing else usable (`rid=001`).
fn rid_only(bytes: &[u8]) -> Option<u16> {
    let text = std::str::from_utf8(bytes).ok()?;
    text.split(',').find_map(|f| f.strip_prefix("rid=")).and_then(|r| r.parse().ok())
}

/// `contextCSN` of the naming context with this suffix key (one value per
/// server id), as slapd keeps it on each database's suffix entry: the
/// newest CSN of each server among the context's changes
/// (`shards::contexts`), or with one context among all changes
/// (`changelog::newest`).
pub fn context_csn(ctx: &crate::ctx::Ctx, suffix_key: &[u8]) -> Result<Vec<Vec<u8>>> {
    let mut cookie = Cookie::default();
    context_newest(ctx, suffix_key, &mut cookie)?;
    Ok(cookie.csns.values().map(|c| c.to_string().into_bytes()).collect())
}

/// `context_csn`'s CSNs, seen by `cookie`.
fn context_newest(ctx: &crate::ctx::Ctx, suffix_key: &[u8], cookie: &mut Cookie) -> Result<()> {
    for store in ctx.shard.stores.iter() {
        let txn = store.read()?;
        let newest = match ctx.suffixes.len() {
            1 => changelog::newest(&txn, None)?,
            _ => shards::contexts::newest(&txn, suffix_key)?,
        };
        newest.into_iter().for_each(|csn| cookie.saw(csn));
    }
    Ok(())
}

/// Per server id, the oldest stamp among the renames still on their way
/// between partitions (their parcels): such an entry shows at neither DN,
/// so a refresh cannot send it and its cookie may not claim it. A parcel
/// that is gone was delivered before, and the entry shows at its new DN.
fn in_transit(ctx: &crate::ctx::Ctx) -> Result<BTreeMap<u16, Csn>> {
    let mut oldest: BTreeMap<u16, Csn> = BTreeMap::new();
    for store in ctx.shard.stores.iter() {
        for parcel in shards::moves::pending(&store.read()?)? {
            let Some(state) = shards::merge::decode_state(&parcel.state) else { continue };
            let csn = state.max_csn();
            let slot = oldest.entry(csn.sid).or_insert(csn);
            *slot = (*slot).min(csn);
        }
    }
    Ok(oldest)
}

/// On a server of a mirror pair, what a cookie may claim of the peer:
/// what it settled here (`repl::Link::peer_claim`, read before the
/// changelog or entries the cookie covers), below its renames in transit;
/// `quiet` when no change of the peer is here (`peer_quiet`).
fn peer_claims(claim: Option<PeerClaim>, transit: &BTreeMap<u16, Csn>, quiet: bool) -> Peers {
    claim.map(|claim| match claim {
        PeerClaim::Peer { sid, upto, .. } => {
            let upto = upto.map(|c| transit.get(&sid).map_or(c, |t| c.min(t.just_below())));
            PeerClaim::Peer { sid, upto, quiet }
        }
        unknown => unknown,
    })
}

/// Whether the changelog holds no change of the mirror peer, and never
/// did (`changelog::newest` also keeps what trimming took): a standby
/// that takes no writes. Read after the persist stage's start
/// (`positions`): a change of it committed later is the persist stage's.
fn peer_quiet(ctx: &crate::ctx::Ctx, claim: &PeerClaim) -> Result<bool> {
    let PeerClaim::Peer { sid, .. } = *claim else { return Ok(false) };
    for store in ctx.shard.stores.iter() {
        if changelog::newest(&store.read()?, None)?.iter().any(|c| c.sid == sid) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// What a cookie may claim of the mirror peer (`peer_claims`); `None`
/// when this server is not one of a mirror pair.
type Peers = Option<PeerClaim>;

/// The last record of every (partition, origin) stream.
fn positions(ctx: &crate::ctx::Ctx) -> Result<BTreeMap<(u16, Origin), u64>> {
    let mut marks = BTreeMap::new();
    for store in ctx.shard.stores.iter() {
        for (p, o, _, last) in changelog::streams(&store.read()?)? {
            marks.insert((p, o), last);
        }
    }
    Ok(marks)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The message's bytes as the server writes them.
    fn wire(op: LdapOp, ctrl: Vec<LdapControl>) -> Vec<u8> {
        let mut msg = LdapMsg::new(7, op);
        msg.ctrl = ctrl;
        let mut out = BytesMut::new();
        encode(&mut out, msg);
        out.to_vec()
    }

    fn holds(haystack: &[u8], needle: &[u8]) -> bool {
        haystack.windows(needle.len()).any(|w| w == needle)
    }

    /// Sync State, Sync Done and the Sync Info choices, against bytes
    /// written out from RFC 4533 §2 (and as slapd reads them).
    #[test]
    fn sync_messages_encode_as_rfc_4533_says() {
        let uuid = uuid::Uuid::from_bytes([0x11; 16]);
        let entry = LdapOp::SearchResultEntry(LdapSearchResultEntry { dn: "dc=x".into(), attributes: vec![] });
        let state = LdapControl::SyncState { state: SyncStateValue::Add, entry_uuid: uuid, cookie: None };
        let bytes = wire(entry, vec![state]);
        // controlType, then the value: SEQUENCE { ENUMERATED add(1), OCTET STRING uuid }.
        assert!(holds(&bytes, b"\x04\x181.3.6.1.4.1.4203.1.9.1.2"), "{bytes:02x?}");
        let mut value = vec![0x04, 0x17, 0x30, 0x15, 0x0a, 0x01, 0x01, 0x04, 0x10];
        value.extend_from_slice(&[0x11; 16]);
        assert!(holds(&bytes, &value), "{bytes:02x?}");

        let done = LdapControl::SyncDone { cookie: Some(b"ck".to_vec()), refresh_deletes: true };
        let bytes = wire(LdapOp::SearchResultDone(result(Ok(()))), vec![done]);
        // SEQUENCE { cookie, refreshDeletes TRUE }.
        assert!(holds(&bytes, &[0x04, 0x09, 0x30, 0x07, 0x04, 0x02, b'c', b'k', 0x01, 0x01, 0xff]), "{bytes:02x?}");

        let info = |i: LdapIntermediateResponse| wire(LdapOp::IntermediateResponse(i), vec![]);
        // refreshPresent [2] { cookie } (refreshDone TRUE is the default: left out).
        let bytes = info(LdapIntermediateResponse::SyncInfoRefreshPresent { cookie: Some(b"ck".to_vec()), done: true });
        assert!(holds(&bytes, &[0x81, 0x06, 0xa2, 0x04, 0x04, 0x02, b'c', b'k']), "{bytes:02x?}");
        let bytes = info(LdapIntermediateResponse::SyncInfoRefreshDelete { cookie: Some(b"ck".to_vec()), done: true });
        assert!(holds(&bytes, &[0x81, 0x06, 0xa1, 0x04, 0x04, 0x02, b'c', b'k']), "{bytes:02x?}");
        // syncIdSet [3] { refreshDeletes TRUE, SET OF uuid }.
        let bytes = info(LdapIntermediateResponse::SyncInfoIdSet {
            cookie: None,
            refresh_deletes: true,
            syncuuids: vec![uuid],
        });
        let mut set = vec![0xa3, 0x17, 0x01, 0x01, 0xff, 0x31, 0x12, 0x04, 0x10];
        set.extend_from_slice(&[0x11; 16]);
        assert!(holds(&bytes, &set), "{bytes:02x?}");
        // newcookie [0], primitive, with the Sync Info OID as the name.
        let raw =
            LdapIntermediateResponse::Raw { name: Some(SYNC_INFO.to_string()), value: Some(new_cookie_value(b"ck")) };
        let bytes = info(raw);
        assert!(holds(&bytes, b"\x80\x181.3.6.1.4.1.4203.1.9.1.4\x81\x04\x80\x02ck"), "{bytes:02x?}");
    }

    #[test]
    fn new_cookie_is_a_primitive_context_tag() {
        // RFC 4533: syncInfoValue ::= CHOICE { newcookie [0] syncCookie, … }, IMPLICIT TAGS.
        assert_eq!(new_cookie_value(b"abc"), [0x80, 3, b'a', b'b', b'c']);
        let long = vec![b'x'; 300];
        let v = new_cookie_value(&long);
        assert_eq!(&v[..4], &[0x80, 0x82, 0x01, 0x2c]);
        assert_eq!(v.len(), 304);
    }
}
