//! Content synchronization (RFC 4533, "syncrepl"), the provider side: a
//! search with the Sync Request control, so that a stock OpenLDAP consumer
//! (slapd's `syncrepl` directive) replicates from coredir.
//!
//! - **Refresh** (both modes): every entry in scope goes out, in DN key
//!   order across all stores (parents first), in full with
//!   the `add` state when it changed since the cookie (or there is no
//!   usable cookie), else as a `present` message (its DN and entryUUID
//!   only). That is RFC 4533's present phase: the consumer deletes what was
//!   not named, so deletes need no history. Then refreshOnly ends with
//!   SearchResultDone and a Sync Done control carrying the new cookie;
//!   refreshAndPersist sends Sync Info `refreshPresent` (refreshDone) and
//!   goes on.
//! - **Persist**: the changelog (`shards::changelog`, kept when mirror mode
//!   or `syncrepl.provider` is on) is tailed from the positions taken
//!   before the refresh began, every `POLL`: each record names an entry by
//!   entryUUID, and the entry goes out as it is now (`modify`, `add`), or
//!   as `delete` when it is gone; a rename is the entry at its new DN,
//!   which the consumer applies as a modify-DN (it matches by entryUUID).
//!   Records go out in CSN order across every stream, this server's own
//!   only below the commit floor, and a record whose entry changed again
//!   since says nothing (the later record does, in its turn): a consumer
//!   meets a subtree's moves parents first. After each round with
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

use crate::acl::{Level, ReadPlan, Target};
use crate::conn::{encode, Conn, Identity};
use crate::ops::record::{self, Record};
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
use shards::entry::{Entry, EntryView};
use shards::merge::{Change, EntryState, Record as ChangeRecord};
use shards::store::{ReadTxn, Store};
use shards::{filter, Error, Result};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

pub const SYNC_REQUEST: &str = "1.3.6.1.4.1.4203.1.9.1.1";
const SYNC_INFO: &str = "1.3.6.1.4.1.4203.1.9.1.4";
/// How often a persistent search looks at the changelog.
const POLL: Duration = Duration::from_millis(100);
/// Entries read per snapshot in the refresh before yielding.
const CHUNK: usize = 1024;
/// Most keys a refresh chunk walks in one store.
const SCANNED: usize = 4 * CHUNK;

/// A cookie: the consumer's replica id and, per server id, a CSN.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cookie {
    pub rid: Option<u16>,
    pub csns: BTreeMap<u16, Csn>,
}

impl Cookie {
    /// Parses `rid=NNN[,sid=SSS],csn=<csn>[;<csn>…][,delcsn=…]`; `None` for
    /// anything else (then the whole content is sent, as RFC 4533 §3.1 allows).
    pub fn parse(bytes: &[u8]) -> Option<Cookie> {
        let text = std::str::from_utf8(bytes).ok()?;
        let mut cookie = Cookie::default();
        for field in text.split(',') {
            let (key, value) = field.split_once('=')?;
            match key.trim() {
                "rid" => cookie.rid = Some(value.parse().ok()?),
                "sid" => {
                    u16::from_str_radix(value, 16).ok()?;
                }
                "csn" => {
                    for c in value.split(';').filter(|c| !c.is_empty()) {
                        let csn = Csn::parse(c)?;
                        let slot = cookie.csns.entry(csn.sid).or_insert(csn);
                        *slot = (*slot).max(csn);
                    }
                }
                _ => {}
            }
        }
        Some(cookie)
    }

    /// The text form, as slapd composes it, with this server's id.
    pub fn compose(&self, sid: u16) -> Vec<u8> {
        let mut out = String::new();
        if let Some(rid) = self.rid {
            out.push_str(&format!("rid={rid:03},"));
        }
        out.push_str(&format!("sid={sid:03x}"));
        if !self.csns.is_empty() {
            let csns: Vec<String> = self.csns.values().map(Csn::to_string).collect();
            out.push_str(&format!(",csn={}", csns.join(";")));
        }
        out.into_bytes()
    }

    /// The CSNs, none past `stop` (`Csn::just_below` a record), whatever
    /// server id: every record at or before `stop`'s time and count, of
    /// any server, was read before the record it is below.
    fn up_to(&self, stop: Csn) -> Cookie {
        let mut out = self.clone();
        for c in out.csns.values_mut() {
            *c = (*c).min(Csn { sid: c.sid, partition: u16::MAX, ..stop });
        }
        out
    }

    /// Takes a CSN into the vector.
    fn saw(&mut self, csn: Csn) {
        let slot = self.csns.entry(csn.sid).or_insert(csn);
        *slot = (*slot).max(csn);
    }

    /// The cookie to hand out: the CSNs seen, but this server's own no
    /// higher than `cap` and, on a server of a mirror pair (`peers`), each
    /// peer's no higher than what it settled here (none before it says);
    /// never lower than in `before` (the cookie last handed out, whose
    /// claim still holds).
    fn capped(&self, own: u16, cap: Csn, before: &Cookie, peer: Option<PeerClaim>) -> Cookie {
        let mut out = self.clone();
        let sids: std::collections::BTreeSet<u16> = self.csns.keys().chain(before.csns.keys()).copied().collect();
        for sid in sids {
            let limit = match (sid == own, peer) {
                (true, _) => Some(cap),
                (false, Some(PeerClaim::Unknown)) => None,
                (false, Some(PeerClaim::Peer { sid: p, upto })) if p == sid => upto,
                // Not the peer's (imported CSNs): static, claimed as seen.
                (false, _) => continue,
            };
            let seen = self.csns.get(&sid).copied();
            match seen.zip(limit).map(|(c, l)| c.min(l)).max(before.csns.get(&sid).copied()) {
                Some(c) => out.csns.insert(sid, c),
                None => out.csns.remove(&sid),
            };
        }
        // The peer's claim, though no entry showed its server id: without
        // it, every entry a change of the peer reached would count as
        // changed in each refresh (see `Since`).
        if let Some(PeerClaim::Peer { sid, upto: Some(upto) }) = peer {
            out.csns.entry(sid).or_insert(upto);
        }
        out
    }
}

/// What a consumer's cookie says it holds, as far as this server holds
/// it too: the cookie's CSNs, on a server of a mirror pair with the
/// peer's no higher than what the peer settled here (a cookie the peer
/// handed out may claim changes still on their way), and none of the
/// peer's while it has not said what (`PeerClaim::Unknown`).
struct Since {
    csns: BTreeMap<u16, Csn>,
    /// On a server of a mirror pair, a change of the peer that arrives
    /// after a later change to the same entry here leaves its `entryCSN`
    /// (the newest stamp) as it was, so the entry's state is read for its
    /// stamps; except below `low`, the lower of the cookie's CSNs for the
    /// two servers once it names both, which claims every change of
    /// either up to it.
    mirrored: bool,
    low: Option<Csn>,
}

impl Since {
    fn new(given: &Cookie, own: u16, peers: Peers) -> Since {
        let mut csns = given.csns.clone();
        let mut low = None;
        match peers {
            Some(PeerClaim::Peer { sid, upto }) => {
                match (csns.get(&sid).copied(), upto) {
                    (Some(c), Some(u)) => csns.insert(sid, c.min(u)),
                    _ => csns.remove(&sid),
                };
                // Other server ids' stamps (imported data's) are static.
                low = csns.get(&sid).zip(csns.get(&own)).map(|(p, o)| *p.min(o));
            }
            Some(PeerClaim::Unknown) => csns.retain(|sid, _| *sid == own),
            None => {}
        }
        Since { csns, mirrored: peers.is_some(), low }
    }

    /// Whether the cookie lacks this change.
    fn newer(&self, csn: Csn) -> bool {
        self.csns.get(&csn.sid).is_none_or(|c| csn > *c)
    }

    /// Whether the cookie names every server that makes changes here, so
    /// that the delete phase can tell what is gone since it.
    fn complete(&self) -> bool {
        !self.mirrored || self.low.is_some()
    }

    /// Whether an entry with this `entryCSN` changed after the cookie;
    /// `state` reads its replicated state (`None` where it has none).
    fn changed(&self, csn: Option<Csn>, state: impl FnOnce() -> Result<Option<EntryState>>) -> Result<bool> {
        let Some(csn) = csn else { return Ok(true) };
        if self.newer(csn) {
            return Ok(true);
        }
        if !self.mirrored || self.low.is_some_and(|low| csn <= low) {
            return Ok(false);
        }
        Ok(state()?.is_some_and(|state| state.csns().any(|c| self.newer(c))))
    }
}

/// The highest CSN of server `own` a cookie may claim: below the lowest
/// commit floor (`floor_us`, read before the changelog) and below `held`,
/// the first record held back.
fn claimable(own: u16, floor_us: u64, held: Option<Csn>) -> Csn {
    let floor = Csn::top_of(floor_us, own);
    held.map_or(floor, |h| floor.min(Csn { sid: own, ..h }.just_below()))
}

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
    identity: Identity,
    msgid: i32,
    req: LdapSearchRequest,
    persist: bool,
    cookie: Option<Vec<u8>>,
    rec: Record,
) {
    let (abandoned, in_flight) = crate::ops::search::running(conn, msgid);
    let conn = conn.clone();
    glommio::spawn_local(async move {
        let _in_flight = in_flight;
        let mut sent = 0u64;
        let res = run(&conn, &identity, msgid, &req, persist, cookie.as_deref(), &abandoned, &mut sent).await;
        conn.running.borrow_mut().remove(&msgid);
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
        let Some(entry) = changelog::materialize(&before, uuid) else { return false };
        let Ok(key) = Dn::parse(&entry.dn).map(|d| d.key()) else { return false };
        let mut bytes = Vec::new();
        if entry.encode(&mut bytes).is_err() {
            return false;
        }
        // Past the filter's bound it counts as matched: the consumer is told
        // of the departure rather than keep an entry it may hold.
        EntryView::new(&bytes).is_ok_and(|view| self.in_scope(&key) && self.matches(&key, &view).unwrap_or(true))
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
async fn run(
    conn: &Conn,
    identity: &Identity,
    msgid: i32,
    req: &LdapSearchRequest,
    persist: bool,
    cookie: Option<&[u8]>,
    abandoned: &Cell<bool>,
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
    let session = Session {
        conn,
        msgid,
        below: Scope::below(&base_key, &req.scope),
        base,
        base_key,
        scope: req.scope.clone(),
        filter: node,
        sel: Selection::new(&req.attrs, false),
        plan,
        tests: live.limits.max_filter_tests,
    };
    if ctx.shard.get_entry(&session.base_key)?.is_none() {
        return Err(with_matched(conn, identity, &session.base, Error::no_such_object(&req.base)));
    }
    let given = cookie.and_then(Cookie::parse);
    let rid = given.as_ref().and_then(|c| c.rid).or_else(|| cookie.and_then(rid_only));
    // Where the persist stage will start: before anything the refresh
    // reads; the floor before that, so that every change below it is in.
    let floor_us = ctx.shard.floors.lowest();
    // The channel's lock: only on a server of a mirror pair.
    let settled = ctx.mirrored.then(|| ctx.shared.replication.peer_claim());
    let transit = in_transit(ctx)?;
    let moving = transit.get(&ctx.shard.stamping.sid).copied();
    let peers = peer_claims(settled, &transit);
    let marks = positions(ctx)?;
    let since = given.as_ref().map(|g| Since::new(g, ctx.shard.stamping.sid, peers));
    let mut next = Cookie { rid, csns: since.as_ref().map(|s| s.csns.clone()).unwrap_or_default() };
    let cap = (floor_us, moving, &peers);
    let (phase, handed) = refresh(&session, since.as_ref(), &mut next, cap, abandoned, sent).await?;
    let sid = ctx.shard.stamping.sid;
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
    conn.send(out).await;
    tail(&session, marks, next, handed, abandoned, sent).await?;
    Ok(None)
}

/// The rid of a cookie that carries nothing else usable (`rid=001`).
fn rid_only(bytes: &[u8]) -> Option<u16> {
    let text = std::str::from_utf8(bytes).ok()?;
    text.split(',').find_map(|f| f.strip_prefix("rid=")).and_then(|r| r.parse().ok())
}

/// How a refresh tells the consumer what is gone.
#[derive(Clone, Copy, PartialEq)]
enum Phase {
    /// Every entry named, unchanged ones as present: the rest is gone.
    Present,
    /// Only changed entries, then the entryUUIDs of those deleted since
    /// the cookie (the changelog's tombstones cover it).
    Delete,
}

fn phase(ctx: &crate::server::Ctx, since: Option<&Since>) -> Result<Phase> {
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
async fn refresh(
    s: &Session<'_>,
    since: Option<&Since>,
    next: &mut Cookie,
    (floor_us, moving, peers): (u64, Option<Csn>, &Peers),
    abandoned: &Cell<bool>,
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
    loop {
        let mut out = BytesMut::new();
        let next_from;
        {
            let txns = shard.stores.iter().map(|st| st.read()).collect::<Result<Vec<_>>>()?;
            let (rows, bound) = next_rows(s, &txns, &from, resumed)?;
            // However costly the filter, a chunk takes about one slice
            // of reactor time: the walk resumes after the last row seen.
            let slice_end = std::time::Instant::now() + crate::ops::search::SLICE;
            let mut cut = None;
            for (i, (key, id, store)) in rows.iter().enumerate() {
                if i > 0 && std::time::Instant::now() >= slice_end {
                    cut = Some(rows[i - 1].0.clone());
                    break;
                }
                let txn = &txns[*store];
                let Some(view) = txn.entry_by_id(id)? else { continue };
                let csn = entry_csn(&view);
                if let Some(csn) = csn {
                    next.saw(csn);
                }
                let changed = match since {
                    Some(since) => since.changed(csn, || state_of(shard, txn, key, &view))?,
                    None => true,
                };
                let decided = shards::index::decided_items(txn, &s.filter, id, view.size())?;
                let state = match (shards::filter::with_decided(decided, || s.matches(key, &view))?, changed, phase) {
                    (true, true, _) => SyncStateValue::Add,
                    (true, false, Phase::Present) => SyncStateValue::Present,
                    // Changed so that the filter no longer takes it.
                    (false, true, Phase::Delete) => {
                        if s.may_learn(key, Some(&view)) {
                            gone.push(uuid_of_view(&view)?);
                        }
                        continue;
                    }
                    _ => continue,
                };
                s.entry(&mut out, key, &view, state)?;
                *sent += 1;
            }
            next_from = cut.or(bound);
        }
        s.conn.send(out).await;
        futures_lite::future::yield_now().await;
        if abandoned.get() {
            return Ok((phase, before(next.rid, since)));
        }
        match next_from {
            Some(k) => (from, resumed) = (k, true),
            None => break,
        }
    }
    let before = before(next.rid, since);
    let Some(since) = since.filter(|_| phase == Phase::Delete) else {
        return Ok((phase, next.capped(own, claimable(own, floor_us, moving), &before, *peers)));
    };
    // What it learns is gone counts for the cookie too.
    for (uuid, csn) in departed(s, since)? {
        next.saw(csn);
        gone.push(uuid);
    }
    // The set carries the new cookie: slapd deletes only entries whose
    // entryCSN the cookie it holds reaches, and an entry sent in an
    // earlier refresh may be newer than the cookie that refresh ended with.
    let handed = next.capped(own, claimable(own, floor_us, moving), &before, *peers);
    let mut out = BytesMut::new();
    for chunk in gone.chunks(CHUNK) {
        let info = LdapIntermediateResponse::SyncInfoIdSet {
            cookie: Some(handed.compose(own)),
            refresh_deletes: true,
            syncuuids: chunk.to_vec(),
        };
        s.info(&mut out, info);
    }
    s.conn.send(out).await;
    Ok((phase, handed))
}

/// The cookie a refresh starts from, as this server holds it (`Since`):
/// what a cookie handed out after it claims at least.
fn before(rid: Option<u16>, since: Option<&Since>) -> Cookie {
    Cookie { rid, csns: since.map(|s| s.csns.clone()).unwrap_or_default() }
}

/// The replicated state of the entry at `key` (its partition's, in the
/// store that holds the entry).
fn state_of<T: ReadTxn>(
    shard: &shards::shard::Shard,
    txn: &T,
    key: &[u8],
    view: &EntryView<'_>,
) -> Result<Option<EntryState>> {
    let partition = shard.manifest.partition_of(key) as u16;
    changelog::load_state(txn, partition, uuid_of_view(view)?.as_bytes())
}

/// The next rows of the refresh in DN key order across stores: up to
/// `CHUNK` in scope from each store after `from` (or from it, unless
/// `resumed`), as (key, id, store), cut at the lowest last key of a store
/// that had more; that key, the bound, is where the next chunk starts.
#[allow(clippy::type_complexity)]
fn next_rows<T: ReadTxn>(
    s: &Session<'_>,
    txns: &[T],
    from: &[u8],
    resumed: bool,
) -> Result<(Vec<(Vec<u8>, Vec<u8>, usize)>, Option<Vec<u8>>)> {
    let mut rows = Vec::new();
    let mut bound: Option<Vec<u8>> = None;
    for (store, txn) in txns.iter().enumerate() {
        let (mut taken, mut scanned, mut last) = (0, 0, None);
        // A one-level scope walks the whole subtree's keys: the keys seen,
        // not only those taken, bound a chunk.
        txn.dn_keys(&s.base_key, from, &mut |k, v| {
            scanned += 1;
            if resumed && k == from {
                return true;
            }
            if s.in_scope(k) {
                rows.push((k.to_vec(), v.to_vec(), store));
                taken += 1;
            }
            last = Some(k.to_vec());
            taken < CHUNK && scanned < SCANNED
        })?;
        if taken == CHUNK || scanned == SCANNED {
            bound = match (bound, last) {
                (Some(b), Some(l)) => Some(b.min(l)),
                (b, l) => b.or(l),
            };
        }
    }
    rows.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    if let Some(b) = &bound {
        rows.retain(|r| r.0 <= *b);
    }
    Ok((rows, bound))
}

/// The entries deleted since the cookie (their tombstones), and those a
/// rename since took out of scope.
fn departed(s: &Session<'_>, since: &Since) -> Result<Vec<(uuid::Uuid, Csn)>> {
    let shard = &s.conn.ctx.shard;
    let mut out = Vec::new();
    for store in shard.stores.iter() {
        // Only what changed since the cookie is kept from the walk.
        let mut renamed = Vec::new();
        changelog::states(&store.read()?, &mut |p, uuid, bytes| {
            let Some(state) = changelog::decode_state(bytes) else { return true };
            if let Some(deleted) = state.deleted {
                if since.newer(deleted) && s.showed_before_delete(&state, &uuid) {
                    out.push((uuid::Uuid::from_bytes(uuid), deleted));
                }
                return true;
            }
            // A state a rename left behind, renamed since the cookie.
            let Some((dn, at)) = state.dn else { return true };
            let home = Dn::parse(&dn).map(|d| shard.manifest.partition_of(&d.key()) as u16);
            if !home.is_ok_and(|h| h == p) && since.newer(at) {
                renamed.push((uuid, dn, at));
            }
            true
        })?;
        for (uuid, dn, at) in renamed {
            if let Located::Found(key, ..) = locate(shard, &uuid, dn, None)? {
                if !s.in_scope(&key) {
                    out.push((uuid::Uuid::from_bytes(uuid), at));
                }
            }
        }
    }
    out.sort_unstable();
    out.dedup_by_key(|(uuid, _)| *uuid);
    Ok(out)
}

/// `contextCSN` (one value per server id): the newest CSN of each origin
/// in the changelog, as slapd keeps it on the suffix entry.
pub fn context_csn(ctx: &crate::server::Ctx) -> Result<Vec<Vec<u8>>> {
    let mut cookie = Cookie::default();
    for store in ctx.shard.stores.iter() {
        let txn = store.read()?;
        for (p, o, first, last) in changelog::streams(&txn)? {
            if first > last {
                continue;
            }
            let rec = changelog::record_at(&txn, p, o, last)?;
            if let Some(csn) = rec.and_then(changelog::record_csn) {
                cookie.saw(csn);
            }
        }
    }
    Ok(cookie.csns.values().map(|c| c.to_string().into_bytes()).collect())
}

/// Per server id, the oldest stamp among the renames still on their way
/// between partitions (their parcels): such an entry shows at neither DN,
/// so a refresh cannot send it and its cookie may not claim it. A parcel
/// that is gone was delivered before, and the entry shows at its new DN.
fn in_transit(ctx: &crate::server::Ctx) -> Result<BTreeMap<u16, Csn>> {
    let mut oldest: BTreeMap<u16, Csn> = BTreeMap::new();
    for store in ctx.shard.stores.iter() {
        for parcel in shards::moves::pending(&store.read()?)? {
            let Some(state) = changelog::decode_state(&parcel.state) else { continue };
            let csn = state.max_csn();
            let slot = oldest.entry(csn.sid).or_insert(csn);
            *slot = (*slot).min(csn);
        }
    }
    Ok(oldest)
}

/// On a server of a mirror pair, what a cookie may claim of the peer:
/// what it settled here (`repl::Shared::peer_claim`, read before the
/// changelog or entries the cookie covers), below its renames in transit.
fn peer_claims(claim: Option<PeerClaim>, transit: &BTreeMap<u16, Csn>) -> Peers {
    claim.map(|claim| match claim {
        PeerClaim::Peer { sid, upto } => {
            let upto = upto.map(|c| transit.get(&sid).map_or(c, |t| c.min(t.just_below())));
            PeerClaim::Peer { sid, upto }
        }
        unknown => unknown,
    })
}

/// What a cookie may claim of the mirror peer (`peer_claims`); `None`
/// when this server is not one of a mirror pair.
type Peers = Option<PeerClaim>;

/// The last record of every (partition, origin) stream.
fn positions(ctx: &crate::server::Ctx) -> Result<BTreeMap<(u16, Origin), u64>> {
    let mut marks = BTreeMap::new();
    for store in ctx.shard.stores.iter() {
        for (p, o, _, last) in changelog::streams(&store.read()?)? {
            marks.insert((p, o), last);
        }
    }
    Ok(marks)
}

/// The persist stage: the changelog from `marks`, until abandoned.
async fn tail(
    s: &Session<'_>,
    mut marks: BTreeMap<(u16, Origin), u64>,
    mut cookie: Cookie,
    mut handed: Cookie,
    abandoned: &Cell<bool>,
    sent: &mut u64,
) -> Result<()> {
    let ctx = &s.conn.ctx;
    let own = ctx.shard.stamping.sid;
    // The record the stream waits on, and for how many rounds.
    let mut stuck: Option<(Csn, u32)> = None;
    let mut more = false;
    loop {
        match more {
            // A round cut short: the rest at once, after other work.
            true => futures_lite::future::yield_now().await,
            false => glommio::timer::sleep(POLL).await,
        }
        if abandoned.get() {
            return Ok(());
        }
        let mut out = BytesMut::new();
        let mut changed = false;
        // Before the changelog: every change below it is in what is read.
        let floor_us = ctx.shard.floors.lowest();
        let settled = ctx.mirrored.then(|| ctx.shared.replication.peer_claim());
        let txns = ctx.shard.stores.iter().map(|st| st.read()).collect::<Result<Vec<_>>>()?;
        let mut held: Option<Csn> = None;
        let (records, bound) = unsent(&txns, &marks)?;
        more = bound.is_some();
        for (csn, store, p, o, seq, bytes) in records {
            // Every change goes out in CSN order, across partitions (a
            // parent's move before its children's): one of this server
            // above the floor may yet have one of a slower shard before it.
            if csn.sid == own && csn.phys_us > floor_us {
                held = Some(csn);
                more = false;
                break;
            }
            if let Some(rec) = ChangeRecord::decode(&bytes) {
                match announce(s, &txns[store], p, &rec, &mut out)? {
                    Announce::Later if !given_up(&mut stuck, csn) => {
                        held = Some(csn);
                        more = false;
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
        // Also without changes this round: the floor may have passed what
        // was sent, and the consumer's contextCSN should reach it.
        // Where the round stopped (a record held back, or the end of what
        // was read): of no server id may the cookie claim past it, though
        // the refresh may have seen later CSNs.
        let stop = held.or(bound).map(Csn::just_below);
        let peers = peer_claims(settled, &BTreeMap::new());
        let seen = stop.map_or_else(|| cookie.clone(), |s| cookie.up_to(s));
        let next = seen.capped(own, claimable(own, floor_us, None), &handed, peers);
        if changed || next != handed {
            handed = next;
            let value = new_cookie_value(&handed.compose(own));
            s.info(&mut out, LdapIntermediateResponse::Raw { name: Some(SYNC_INFO.to_string()), value: Some(value) });
            s.conn.send(out).await;
        }
    }
}

/// Rounds a record may wait for its entry's state to arrive (a rename
/// between partitions) before the stream goes on without it: a parcel is
/// delivered within a round or two; one that never is must not hold every
/// later change back for good.
const PATIENCE: u32 = 100;

/// Counts another round waiting on `csn`; true once past `PATIENCE`.
fn given_up(stuck: &mut Option<(Csn, u32)>, csn: Csn) -> bool {
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
const PER_STREAM: usize = 256;

/// The records above `marks` in every stream, oldest CSN first: (CSN,
/// store, partition, origin, sequence number, record), at most
/// `PER_STREAM` of each, cut at the newest CSN every stream read whole
/// reaches (true when so cut: more follow).
#[allow(clippy::type_complexity)]
fn unsent<T: ReadTxn>(
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

enum Announce {
    Sent,
    Nothing,
    /// The entry is on its way to another partition: look again next round.
    Later,
}

enum Located {
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
fn locate(shard: &shards::Shard, uuid: &[u8; 16], mut shown: String, filter: Option<&filter::Node>) -> Result<Located> {
    for _hop in 0..16 {
        let key = Dn::parse(&shown)?.key();
        let txn = shard.store_for(&key).read()?;
        if let Some((id, view)) = txn.entry(&key)? {
            let entry = Entry::decode_view(&view)?;
            if changelog::uuid_of(&entry).ok() == Some(*uuid) {
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
            Some(st) => match st.shown_dn(uuid) {
                Some(next) if next != shown => shown = next,
                _ => return Ok(Located::Pending),
            },
        }
    }
    // Renamed over and over: its later records find it in fewer hops.
    Ok(Located::Gone)
}

/// What one change record means to the consumer, as the entry is now.
fn announce<T: ReadTxn>(
    s: &Session<'_>,
    txn: &T,
    partition: u16,
    rec: &ChangeRecord,
    out: &mut BytesMut,
) -> Result<Announce> {
    let shard = &s.conn.ctx.shard;
    let old_key = Dn::parse(&rec.dn)?.key();
    let state = match changelog::load_state(txn, partition, &rec.uuid)? {
        Some(st) if st.is_live() => st,
        tomb => {
            if tomb.is_some_and(|tomb| s.showed_before_delete(&tomb, &rec.uuid)) {
                s.delete(out, &rec.dn, rec.uuid);
                return Ok(Announce::Sent);
            }
            return Ok(Announce::Nothing);
        }
    };
    let Some(shown) = state.shown_dn(&rec.uuid) else { return Ok(Announce::Nothing) };
    let (key, entry, decided) = match locate(shard, &rec.uuid, shown, Some(&s.filter))? {
        Located::Found(key, entry, decided) => (key, entry, decided),
        // Deleted since: the delete's own record says so.
        Located::Gone => return Ok(Announce::Nothing),
        Located::Pending => return Ok(Announce::Later),
    };
    let mut bytes = Vec::new();
    entry.encode(&mut bytes)?;
    let view = EntryView::new(&bytes)?;
    // Renamed again since: the later rename's record tells, in its place
    // in CSN order (an entry moved twice must not reach the consumer at
    // its last DN before the move of its new parent). Changed otherwise,
    // it goes out as it is now, at the DN this record gave it.
    let after = match &rec.change {
        Change::Rename { to, .. } => Dn::parse(to)?.key(),
        _ => old_key.clone(),
    };
    if key != after && entry_csn(&view).is_some_and(|now| now > rec.csn) {
        return Ok(Announce::Nothing);
    }
    if s.in_scope(&key) && shards::filter::with_decided(decided, || s.matches(&key, &view))? {
        let state = if matches!(rec.change, Change::Add { .. }) { SyncStateValue::Add } else { SyncStateValue::Modify };
        s.entry(out, &key, &view, state)?;
        return Ok(Announce::Sent);
    }
    // Out of scope now: if it may have been in it before, the consumer drops it.
    if matches!(rec.change, Change::Rename { .. } | Change::Modify { .. } | Change::Conflict { .. })
        && s.in_scope(&old_key)
        && s.may_learn(&old_key, Some(&view))
    {
        // The DN it had: its new one may be hidden.
        s.delete(out, &rec.dn, rec.uuid);
        return Ok(Announce::Sent);
    }
    Ok(Announce::Nothing)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_parse_and_compose_as_slapd_writes_them() {
        let text =
            "rid=001,sid=002,csn=20261201003440.153276Z#000000#001#000067;20261201003441.000001Z#000002#002#000000";
        let c = Cookie::parse(text.as_bytes()).unwrap();
        assert_eq!(c.rid, Some(1));
        assert_eq!(c.csns.len(), 2);
        assert_eq!(c.csns[&2].to_string(), "20261201003441.000001Z#000002#002#000000");
        assert_eq!(String::from_utf8(c.compose(2)).unwrap(), text);
        // A consumer's first cookie holds its rid only.
        let first = Cookie::parse(b"rid=123").unwrap();
        assert_eq!((first.rid, first.csns.len()), (Some(123), 0));
        assert_eq!(first.compose(1), b"rid=123,sid=001");
        for bad in ["rid=x", "csn=garbage", "nonsense"] {
            assert_eq!(Cookie::parse(bad.as_bytes()), None, "{bad}");
        }
    }

    #[test]
    fn entries_count_as_changed_by_every_stamp_the_cookie_lacks() {
        let csn = |t: u64, sid: u16| Csn { phys_us: t, logical: 0, sid, partition: 0 };
        let mut c = Cookie::default();
        c.saw(csn(100, 1));
        c.saw(csn(90, 2));
        let no_state = || Ok(None);
        // A lone provider: entryCSN alone, exactly.
        let lone = Since::new(&c, 1, None);
        assert!(!lone.changed(Some(csn(100, 1)), no_state).unwrap());
        assert!(lone.changed(Some(csn(101, 1)), no_state).unwrap());
        assert!(lone.changed(Some(csn(1, 3)), no_state).unwrap(), "another server's, unknown to the cookie");
        assert!(lone.changed(None, no_state).unwrap());
        // One of a pair whose peer (2) settled up to 95: below the
        // cookie's lowest CSN nothing is read; above it, every stamp counts.
        let pair = Since::new(&c, 1, Some(PeerClaim::Peer { sid: 2, upto: Some(csn(95, 2)) }));
        assert!(pair.complete());
        let unread = || -> Result<Option<EntryState>> { panic!("read below the cookie") };
        assert!(!pair.changed(Some(csn(90, 1)), unread).unwrap());
        let mut state = EntryState::default();
        state.created = csn(10, 1);
        state.dn = Some(("uid=x".into(), csn(100, 1)));
        assert!(!pair.changed(Some(csn(100, 1)), || Ok(Some(state.clone()))).unwrap());
        state.deleted = Some(csn(93, 2));
        assert!(pair.changed(Some(csn(100, 1)), || Ok(Some(state.clone()))).unwrap(), "a late stamp of the peer");
        // A cookie the peer handed out claims of it only what it settled here.
        let mut theirs = c.clone();
        theirs.saw(csn(99, 2));
        let clamped = Since::new(&theirs, 1, Some(PeerClaim::Peer { sid: 2, upto: Some(csn(95, 2)) }));
        assert!(clamped.newer(csn(96, 2)));
        // A peer that has said nothing yet: none of its stamps is claimed,
        // and the delete phase cannot tell what is gone.
        let unknown = Since::new(&theirs, 1, Some(PeerClaim::Unknown));
        assert!(unknown.newer(csn(1, 2)) && !unknown.complete());
        let silent = Since::new(&theirs, 1, Some(PeerClaim::Peer { sid: 2, upto: None }));
        assert!(silent.newer(csn(1, 2)) && !silent.complete());
    }

    #[test]
    fn a_handed_out_cookie_claims_nothing_above_the_floor_or_a_held_record() {
        let csn = |t: u64, l: u32| Csn { phys_us: t, logical: l, sid: 1, partition: 3 };
        let mut seen = Cookie::default();
        seen.saw(csn(500, 0));
        let none = Cookie::default();
        // The floor (300) is below what was seen: the cookie stops there.
        let c = seen.capped(1, claimable(1, 300, None), &none, None);
        assert_eq!(c.csns[&1].phys_us, 300);
        // A held record at 200.4 caps it just below.
        let c = seen.capped(1, claimable(1, 300, Some(csn(200, 4))), &none, None);
        assert!(c.csns[&1] < csn(200, 4) && c.csns[&1] > csn(200, 3));
        // Never below what was handed out before, never above what was seen.
        let before = seen.capped(1, claimable(1, 400, None), &none, None);
        assert_eq!(seen.capped(1, claimable(1, 0, None), &before, None).csns[&1], before.csns[&1]);
        assert_eq!(seen.capped(1, claimable(1, 900, None), &none, None).csns[&1], csn(500, 0));
    }

    #[test]
    fn of_a_mirror_peer_a_cookie_claims_only_what_it_settled_and_imported_csns_as_seen() {
        let at = |t: u64, sid: u16| Csn { phys_us: t, logical: 0, sid, partition: 0 };
        let mut seen = Cookie::default();
        for c in [at(500, 1), at(500, 2), at(100, 7)] {
            seen.saw(c);
        }
        let (none, own) = (Cookie::default(), claimable(1, 900, None));
        let peer = |upto| Some(PeerClaim::Peer { sid: 2, upto });
        let c = seen.capped(1, own, &none, peer(Some(at(300, 2))));
        assert_eq!((c.csns[&2], c.csns[&7]), (at(300, 2), at(100, 7)), "the peer's capped, an imported one not");
        let c = seen.capped(1, own, &none, peer(None));
        assert!(!c.csns.contains_key(&2), "nothing settled yet: nothing claimed");
        // Before the peer's hello no other server id moves past `before`.
        let mut before = Cookie::default();
        before.saw(at(50, 7));
        let c = seen.capped(1, own, &before, Some(PeerClaim::Unknown));
        assert_eq!((c.csns.get(&2), c.csns[&7], c.csns[&1]), (None, at(50, 7), at(500, 1)));
        // A round that stopped before a record claims nothing at or after it.
        let cut = seen.up_to(at(200, 5).just_below());
        assert!(cut.csns.values().all(|c| c.phys_us < 200 || c.sid == 7), "{cut:?}");
        assert_eq!(cut.csns[&7], at(100, 7));
    }

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
