//! Search (RFC 4511 §4.5): base, one-level, subtree and children scopes,
//! on the connection's own shard.
//!
//! The base entry is read from its owner's snapshot; a one-level or subtree
//! search then takes, in every shard's store, either the candidates of an
//! equality index (`index::candidates`) or the whole `dn2id` range below
//! the base (keys are root-first, so the subtree is one key range), reads
//! each candidate from `id2entry` in place, evaluates the filter and writes
//! the matching entries straight into the response buffer. Work is cut into
//! chunks: no snapshot is held across an `.await`, the task yields to the
//! reactor between chunks (so other requests on the same connection and
//! other connections progress), and Abandon is checked there.
//!
//! Here: the request (limits, controls, the base, paging, sort, VLV) and
//! the walk over the stores. `scope`: which keys the search covers.
//! `emit`: each candidate checked and written, and the continuation
//! references. `select`: which attributes are returned, and the writing of
//! one entry.

use crate::acl::{Level, ReadPlan, Target};
use crate::ber::{self, OutAttr};
use crate::conn::{encode, Conn, Reservation};
use crate::ops::carries::Reading;
use crate::ops::controls::{self, Controls};
use crate::ops::paging::{self, Position};
use crate::ops::record::{self, Record};
use crate::ops::sort::Sorter;
use crate::ops::{alias, monitor, parse_dn, referral, result, rootdse, with_matched_in};
use bytes::BytesMut;
use ldap3_proto::control::LdapControl;
use ldap3_proto::proto::{LdapMsg, LdapOp, LdapSearchRequest, LdapSearchResultReference, LdapSearchScope};
use ldap3_proto::LdapResultCode;
use shards::dn::key_of;
use shards::dn::Dn;
use shards::entry::{encode_vals, Entry, EntryView, Vals};
use shards::schema::subschema;
use shards::store::{Engine, ReadTxn, Store};
use shards::write::children;
use shards::{filter, index, matching, Error, Result};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod emit;
mod scope;
mod select;

pub use emit::visible_match;
use emit::{Emit, Stop, Visit};
use scope::Part;
pub use scope::Scope;
use select::write_computed;
pub use select::Selection;
pub(crate) use select::{computed_attrs, write_entry};

/// Response bytes gathered before they are handed to the writer.
const CHUNK_BYTES: usize = 64 << 10;
/// Candidates examined before the scan pauses to let other tasks run.
const CHUNK_SCANNED: usize = 2048;
/// Reactor time one chunk may take before the scan pauses, however costly
/// each candidate is (a filter of thousands of terms): other requests on
/// the shard wait at most about this long for a search.
pub const SLICE: Duration = Duration::from_millis(2);

/// Registers a running search: its Abandon flag, and its place among the
/// connection's pending operations while it lives. Searches a client runs
/// under one message ID at once (RFC 4511 forbids it; nothing stops it)
/// share the ID's flag, so an Abandon or the client's going stops every
/// one of them; the flag goes when the last ends (`finished`).
pub fn running(conn: &Rc<Conn>, msgid: i32) -> (Rc<crate::ops::abandon::Abandoned>, crate::conn::InFlight) {
    let mut running = conn.running.borrow_mut();
    let slot = running.entry(msgid).or_insert_with(|| (Rc::default(), 0));
    // Those abandoned and still winding down keep their flag; a new search
    // under their ID gets its own (else it would end at once, unanswered).
    if slot.0.get() {
        *slot = (Rc::default(), 0);
    }
    slot.1 += 1;
    (slot.0.clone(), crate::conn::InFlight::new(conn))
}

/// A search registered with `running` (its flag `abandoned`) has ended.
pub fn finished(conn: &Conn, msgid: i32, abandoned: &Rc<crate::ops::abandon::Abandoned>) {
    let mut running = conn.running.borrow_mut();
    if let Some((_, count)) = running.get_mut(&msgid).filter(|(flag, _)| Rc::ptr_eq(flag, abandoned)) {
        *count -= 1;
        if *count == 0 {
            running.remove(&msgid);
        }
    }
}

pub fn start(conn: &Rc<Conn>, msgid: i32, req: LdapSearchRequest, ctrls: Controls, rec: Record) {
    let (abandoned, in_flight) = running(conn, msgid);
    let conn = conn.clone();
    glommio::spawn_local(async move {
        let _in_flight = in_flight;
        // Entries still buffered when the search ends leave in the same
        // write as SearchResultDone: one send for a typical search.
        let mut out = BytesMut::new();
        let mut done_ctrls = Vec::new();
        let mut sent = 0;
        let room = conn.reservation();
        let res = run(&conn, msgid, &req, &ctrls, &abandoned, (&mut out, &room), &mut done_ctrls, &mut sent).await;
        finished(&conn, msgid, &abandoned);
        // Nothing to hash on the usual path: no Cancel on this connection.
        let canceled = !conn.canceled.borrow().is_empty() && conn.canceled.borrow_mut().remove(&msgid);
        if canceled {
            let done = LdapMsg::new(
                msgid,
                LdapOp::SearchResultDone(result(Err(shards::Error::new(LdapResultCode::Canceled, "canceled")))),
            );
            record::end_with(&conn, &rec, &done.op, Some(sent));
            encode(&mut out, done);
            room.send(out).await;
            return;
        }
        if abandoned.get() {
            record::end(&conn, &rec, &LdapResultCode::Canceled, "", Some(sent));
            return;
        }
        let mut done = LdapMsg::new(msgid, LdapOp::SearchResultDone(result(res)));
        done.ctrl = done_ctrls;
        record::end_with(&conn, &rec, &done.op, Some(sent));
        encode(&mut out, done);
        room.send(out).await;
    })
    .detach();
}

/// RFC 3672 as slapd's back-mdb applies it: with the Subentries control
/// TRUE only subentries are returned; without it (or with it FALSE) a
/// one-level or subtree search passes them over, and a base search with
/// it FALSE too (not the subschema subentry, which is served apart).
/// Added after the access rules restrict the filter (the requester's right
/// to search `objectClass` has nothing to do with it), and without the
/// control only once a store may hold a subentry: the usual search tests
/// nothing more.
fn subentry_visibility(
    node: filter::Node,
    req: &LdapSearchRequest,
    base_key: &[u8],
    control: Option<bool>,
) -> filter::Node {
    let subentry =
        || filter::compile(&ldap3_proto::proto::LdapFilter::Equality("objectClass".into(), "subentry".into()));
    let hidden = match control {
        Some(true) => return filter::Node::And(vec![node, subentry()]),
        Some(false) => true,
        None => req.scope != LdapSearchScope::Base,
    };
    if !hidden || !shards::index::Marked::Subentry.may_exist() || subschema::is_subschema_key(base_key) {
        return node;
    }
    filter::Node::And(vec![node, filter::Node::Not(Box::new(subentry()))])
}

struct Limits {
    size: usize,
    deadline: Option<Instant>,
    /// Entries an unindexed search may examine, and the result past it.
    lookthrough: usize,
    lookthrough_code: LdapResultCode,
    /// `limits.max_filter_tests`: the filter's work on one entry.
    tests: u64,
}

#[allow(clippy::too_many_arguments)]
async fn run(
    conn: &Conn,
    msgid: i32,
    req: &LdapSearchRequest,
    ctrls: &Controls,
    abandoned: &crate::ops::abandon::Abandoned,
    (out, room): (&mut BytesMut, &Reservation<'_>),
    done_ctrls: &mut Vec<LdapControl>,
    sent: &mut u64,
) -> Result<()> {
    let ctx = &conn.ctx;
    let live = ctx.live();
    // The base as its storage key, without building a `Dn`.
    let base_key = key_of(&req.base)?;
    let identity = ctrls.acting.clone();
    let is_root = identity.is_root();
    let plan = conn.access(&live, &identity).map(ReadPlan::new);
    let mut sel = Selection::new(&req.attrs, req.typesonly);
    if let Some(items) = &ctrls.matched_values {
        sel.values = items.iter().map(filter::compile).collect();
    }
    let mut node = filter::compile(&req.filter);
    if let Some(plan) = &plan {
        // Assertions on attributes the requester may not search are Undefined.
        node = node.restrict(&|names| plan.searchable(names));
    }
    node = subentry_visibility(node, req, &base_key, ctrls.subentries);
    let computed_tests = if is_root { 0 } else { live.limits.max_filter_tests };
    // A one-RDN key is that RDN's normalized form.
    if subschema::is_subschema_key(&base_key) {
        // As slapd: the subschema subentry is served to a base search
        // only; it is no container, and below it nothing exists.
        if req.scope != LdapSearchScope::Base {
            return Err(Error::no_such_object(&req.base));
        }
        *sent = write_computed(out, msgid, &subschema::entry(), &node, &sel, computed_tests)? as u64;
        return Ok(());
    }
    if monitor::is_monitor_key(&base_key) {
        let allowed = is_root || plan.as_ref().is_some_and(|p| p.access.reads_monitor());
        if !allowed {
            return Err(Error::no_such_object(&req.base));
        }
        return search_monitor(ctx, msgid, req, &parse_dn(&req.base)?, &node, &sel, out, sent);
    }
    if base_key.is_empty() {
        if req.scope != LdapSearchScope::Base {
            return Err(Error::new(LdapResultCode::NoSuchObject, "only a base search can read the root DSE"));
        }
        *sent = write_computed(
            out,
            msgid,
            &rootdse::entry(ctx, crate::ops::sasl::mechanisms(conn)),
            &node,
            &sel,
            computed_tests,
        )? as u64;
        return Ok(());
    }
    // Dereferencing when finding: the search starts at the alias's target.
    let found_base = match alias::finds(&req.aliases) && alias::active() {
        true => Some(alias::find_base(conn, &identity, parse_dn(&req.base)?)?),
        false => None,
    };
    let (base_key, found_text) = match &found_base {
        Some(dn) => (dn.key(), Some(dn.pretty()?)),
        None => (base_key, None),
    };
    let base_text = found_text.as_deref().unwrap_or(&req.base);
    let mut limits = Limits {
        size: effective(req.sizelimit, configured_limits(&live, plan.as_ref()).0, is_root),
        deadline: deadline(&live, plan.as_ref(), req),
        lookthrough: match live.limits.unindexed_lookthrough {
            0 => usize::MAX,
            _ if is_root => usize::MAX,
            n => n,
        },
        lookthrough_code: live.unindexed_result.clone(),
        tests: live.limits.max_filter_tests,
    };
    let (page_size, position, sent_before) = match &ctrls.paged {
        Some((size, cookie)) => {
            let (position, sent) = paging::decode(req, identity.dn(), cookie)?;
            (Some((*size).max(0) as usize), position, sent)
        }
        None => (None, Position::Start, 0),
    };
    if ctrls.vlv.is_some() {
        // As slapd's sssvlv: a view needs a sort, and is no page.
        if ctrls.sort.is_none() {
            done_ctrls.push(crate::ops::vlv::response(0, 0, LdapResultCode::VirtualListViewError as u8));
            return Err(Error::new(LdapResultCode::VirtualListViewError, "Sort control is required with VLV"));
        }
        if ctrls.paged.is_some() {
            return Err(Error::unwilling("VLV incompatible with PagedResults"));
        }
    }
    let mut sorter = None;
    let mut _sorting = None;
    if let Some(keys) = &ctrls.sort {
        // Sorting by an attribute one may not search would disclose its
        // order: refused when no entry allows it; decided per entry (the
        // key counts as absent where it may not be searched) when the
        // rules depend on the entry, as slapd decides per entry.
        let hidden = plan.as_ref().and_then(|p| {
            keys.iter().find(|k| {
                shards::filter::Names::new(&k.attribute_name)
                    .is_some_and(|n| p.searchable(Some(&n)) == shards::filter::Searchable::No)
            })
        });
        match hidden {
            // Sent unsorted, the sortResult saying why.
            Some(k) => done_ctrls
                .push(crate::ops::sort::response(LdapResultCode::InsufficentAccessRights, Some(&k.attribute_name))),
            // As slapd: a key without an ordering rule (18) or an unknown
            // attribute (16) fails the search, critical or not.
            None => {
                // Only the rows that can be sent are kept: the size limit,
                // or up to the end of the page asked for.
                let skip = match position {
                    Position::Offset(n) => n as usize,
                    _ => 0,
                };
                // A view may start anywhere: every row is kept.
                let keep = match ctrls.vlv {
                    Some(_) => crate::ops::sort::MAX_SORTED,
                    None => limits.size.min(skip.saturating_add(page_size.unwrap_or(usize::MAX))),
                };
                let s = Sorter::new(keys, keep, live.limits.max_sort_bytes)
                    .map_err(|r| Error::new(r.result_code, "cannot sort by those keys"))?;
                _sorting = Some(Sorting::start(conn, live.limits.max_sorts_per_connection)?);
                sorter = Some(s);
            }
        }
    }
    if page_size == Some(0) {
        // RFC 2696: a page size of 0 abandons the paged search; on a new
        // one, as slapd, it returns no entries and a cookie to go on with.
        let fresh = ctrls.paged.as_ref().is_some_and(|(_, c)| c.is_empty());
        let cookie = if fresh { paging::encode(req, identity.dn(), &Position::Start, 0) } else { Vec::new() };
        done_ctrls.push(LdapControl::SimplePagedResults { size: 0, cookie });
        return Ok(());
    }
    if sorter.is_none() {
        // The size limit holds across the pages of one search.
        limits.size = limits.size.saturating_sub(usize::try_from(sent_before).unwrap_or(usize::MAX));
    }
    let sorting = sorter.is_some();
    // contextCSN, on the suffix entries, where there is a changelog.
    let context_csn = match ctx.shard.stamping.capture && sel.wants_computed("contextCSN") {
        true => Some(
            ctx.suffixes
                .iter()
                .map(|s| {
                    let key = s.key();
                    crate::ops::syncrepl::context_csn(ctx, &key).map(|values| (key, values))
                })
                .collect::<Result<_>>()?,
        ),
        false => None,
    };
    let mut subordinates = Vec::new();
    node.subordinate_items(&mut subordinates);
    let deref_searching = alias::searches(&req.aliases) && alias::active();
    // Many entries, read in chunks from every store: admitted so that a
    // subtree rename is seen whole or not at all (`ops::carries`).
    let reading = match req.scope {
        LdapSearchScope::Base => None,
        _ => Some(ctx.admit_read(&base_key, deref_searching, limits.deadline, abandoned).await?),
    };
    let mut emit = Emit {
        context_csn,
        subordinates,
        referrals: referral::active() && !ctrls.manage_dsa_it,
        // Dereferencing in searching: aliases are not returned, but for
        // a base not dereferenced.
        hide_aliases: deref_searching.then(|| base_key.clone()),
        roots: None,
        reading: reading.as_ref(),
        walking: None,
        last: None,
        msgid,
        filter: &node,
        sel: &sel,
        plan: plan.as_ref(),
        limits,
        out,
        room,
        sent: 0,
        examined: 0,
        page_left: if sorting { None } else { page_size },
        sorter,
    };
    let walked = walk(conn, &mut emit, req, ctrls, (&base_key, base_text), position.clone(), abandoned).await;
    *sent = emit.sent as u64;
    let stopped = walked?;
    if reading.as_ref().is_some_and(|r| r.overtaken()) {
        // The rest of the scope may have moved away unseen: not a whole result.
        return Err(crate::ops::carries::overtaken_error());
    }
    if let (Some(view), true) = (&ctrls.vlv, emit.sorter.is_some()) {
        let sorter = emit.sorter.take().expect("checked");
        return send_view(sorter, view, emit.out, emit.limits.size, done_ctrls, sent);
    }
    if let Some(sorter) = emit.sorter.take() {
        let (rows, total) = sorter.finish();
        let skip = match position {
            Position::Offset(n) => n as usize,
            _ => 0,
        };
        // The size limit applies to the sorted result: its first entries.
        let visible = total.min(emit.limits.size);
        let take = page_size.unwrap_or(usize::MAX);
        *sent = 0;
        for row in rows.iter().take(visible).skip(skip).take(take) {
            emit.out.extend_from_slice(row);
            *sent += 1;
        }
        let next = skip.saturating_add(take);
        let over = total > visible && next >= visible;
        if !over {
            // slapd's order: the sort response first, then the page's.
            done_ctrls.push(crate::ops::sort::response(LdapResultCode::Success, None));
        }
        if page_size.is_some() {
            let cookie = if next < visible {
                paging::encode(req, identity.dn(), &Position::Offset(next as u64), next as u64)
            } else {
                Vec::new()
            };
            // slapd's estimate: the entries still to come.
            let size = visible.saturating_sub(next) as i64;
            done_ctrls.push(LdapControl::SimplePagedResults { size, cookie });
        }
        if over {
            return Err(Error::new(LdapResultCode::SizeLimitExceeded, ""));
        }
        if next >= visible && ctrls.subentries != Some(true) {
            emit.references(conn, req, &base_key, abandoned).await?;
        }
        return Ok(());
    }
    // With the Subentries control TRUE only subentries are visible: no
    // referral object either, as slapd.
    if stopped.is_none() && ctrls.subentries != Some(true) {
        emit.references(conn, req, &base_key, abandoned).await?;
    }
    if page_size.is_some() {
        let sent_now = sent_before.saturating_add(emit.sent as u64);
        let cookie = stopped.as_ref().map(|p| paging::encode(req, identity.dn(), p, sent_now)).unwrap_or_default();
        done_ctrls.push(LdapControl::SimplePagedResults { size: 0, cookie });
    }
    Ok(())
}

/// A sorted search counted on its connection while it runs: what each
/// holds is bounded by `limits.max_sort_bytes`, how many by this.
struct Sorting<'c>(&'c Conn);

impl<'c> Sorting<'c> {
    fn start(conn: &'c Conn, most: usize) -> Result<Sorting<'c>> {
        if most > 0 && conn.sorting.get() >= most {
            return Err(Error::new(LdapResultCode::Busy, "Other sort requests already in progress"));
        }
        conn.sorting.set(conn.sorting.get() + 1);
        Ok(Sorting(conn))
    }
}

impl Drop for Sorting<'_> {
    fn drop(&mut self) {
        self.0.sorting.set(self.0.sorting.get() - 1);
    }
}

/// Sends the window of a Virtual List View, within the size limit, after
/// the sort and view response controls.
fn send_view(
    sorter: Sorter,
    view: &crate::ops::vlv::Request,
    out: &mut BytesMut,
    size: usize,
    done_ctrls: &mut Vec<LdapControl>,
    sent: &mut u64,
) -> Result<()> {
    let (rows, response) = sorter.select(view).map_err(|(e, response)| {
        done_ctrls.push(response);
        e
    })?;
    done_ctrls.push(crate::ops::sort::response(LdapResultCode::Success, None));
    done_ctrls.push(response);
    *sent = 0;
    for row in rows.iter().take(size) {
        out.extend_from_slice(row);
        *sent += 1;
    }
    if rows.len() > size {
        return Err(Error::new(LdapResultCode::SizeLimitExceeded, ""));
    }
    Ok(())
}

/// Visits the base entry and the stores in order from `position`; returns
/// where a full page stopped.
async fn walk(
    conn: &Conn,
    emit: &mut Emit<'_>,
    req: &LdapSearchRequest,
    ctrls: &Controls,
    (base_key, base_text): (&[u8], &str),
    position: Position,
    abandoned: &crate::ops::abandon::Abandoned,
) -> Result<Option<Position>> {
    let shard = &conn.ctx.shard;
    // The further scopes the aliases in this one reach (`ops::alias`);
    // for a base the requester may know of only, which the base block
    // below then answers for.
    let known = |view: &EntryView<'_>| {
        emit.plan.is_none_or(|p| p.entry_disclosed(&Target { key: base_key, entry: Some(view) }))
    };
    let widen = emit.hide_aliases.is_some() && req.scope != LdapSearchScope::Base;
    let widened = match widen && shard.with_entry(base_key, known)? == Some(true) {
        true => {
            let most = conn.ctx.live().limits.max_alias_scopes;
            alias::scopes(conn, base_key, &req.scope, emit.limits.deadline, most, abandoned).await?
        }
        false => None,
    };
    emit.roots.clone_from(&widened);
    // Read again, in a new snapshot, when its room had to be waited for.
    let mut need = None;
    loop {
        if let Some(kib) = need.take() {
            emit.flush().await;
            emit.room.wait_for(kib).await;
            if abandoned.get() {
                return Ok(None);
            }
        }
        let txn = shard.store_for(base_key).read()?;
        // The entry is read once for the access plan, the Assertion and
        // the visit; without either, the visit may decide the filter from
        // the index without reading it (`index::decides`).
        let found = match emit.plan.is_some() || ctrls.assertion.is_some() || emit.referrals {
            true => txn.entry(base_key)?.map(|(id, view)| (id, Some(view))),
            false => txn.id_of(base_key)?.map(|id| (id, None)),
        };
        let Some((id, view)) = found else {
            let scope = Some(referral::scope_name(&req.scope));
            // The text names the DN asked for: a dereferenced one may be hidden.
            let e = Error::no_such_object(&req.base);
            return Err(with_matched_in(conn, &ctrls.acting, &parse_dn(base_text)?, e, scope));
        };
        // A base the requester may not know of is reported as missing,
        // with no matchedDN, as slapd reports it (the search's own plan:
        // no second rights lookup per request).
        if let (Some(plan), Some(view)) = (emit.plan, &view) {
            if !plan.entry_disclosed(&Target { key: base_key, entry: Some(view) }) {
                return Err(Error::no_such_object(&req.base));
            }
        }
        if let (true, Some(view)) = (emit.referrals, &view) {
            // The base itself a referral object: a referral, for any scope.
            let scope = Some(referral::scope_name(&req.scope));
            referral::check_entry_for(view, &parse_dn(&req.base)?, &parse_dn(base_text)?, scope)?;
        }
        if let (Some(_), Some(view)) = (&ctrls.assertion, &view) {
            let read = (&txn, id);
            controls::check_assertion_read(conn, &ctrls.acting, ctrls.assertion.as_ref(), base_key, read, view)?;
        }
        // A base below an alias target is that target's to return.
        let covered = widened.as_ref().is_some_and(|roots| {
            req.scope != LdapSearchScope::OneLevel && !roots.iter().any(|r| r.as_slice() == base_key)
        });
        let base_wanted = matches!(req.scope, LdapSearchScope::Base | LdapSearchScope::Subtree) && !covered;
        if base_wanted && matches!(position, Position::Start | Position::Offset(_)) {
            match emit.visit(&txn, base_key, id, true, view.as_ref())? {
                Visit::Next => {}
                Visit::Stop(code) => return Err(stopped(code)),
                Visit::PageFull => return Ok(emit.last.take()),
                Visit::Full(kib) => {
                    need = Some(kib);
                    continue;
                }
            }
        }
        break;
    }
    if req.scope == LdapSearchScope::Base {
        return Ok(None);
    }
    let scope = match widened {
        Some(extra) => Scope::widened(base_key, &req.scope, extra),
        None => Scope::below(base_key, &req.scope),
    };
    let first = match &position {
        Position::Range { store, .. } | Position::Index { store, .. } => *store,
        _ => 0,
    };
    for (i, store) in shard.stores.iter().enumerate().skip(first) {
        let candidates = index::candidates(&store.read()?, emit.filter)?;
        emit.walking = Some((i, candidates.is_some()));
        let stop = match candidates {
            Some(mut c) => {
                // In the order the store made the entries, as slapd sends
                // id order: a parent before its children.
                c.sort_unstable_by_key(made);
                let after = match &position {
                    Position::Index { store, after } if *store == i => Some(*after),
                    _ => None,
                };
                let from = after.map_or(0, |a| c.partition_point(|id| made(id) <= made(&a)));
                emit.walk_index(store, &scope, &c[from..], abandoned).await?
            }
            // No index answers the filter (in any store: that depends on
            // the filter alone): every store's range in one walk, in key
            // order, and the page's position is a key of any of them.
            None => {
                let after = match &position {
                    Position::Range { after, .. } => Some(after.clone()),
                    _ => None,
                };
                let stop = emit.walk_range(&shard.stores, &scope, after, abandoned).await?;
                if let Some(stop) = stop {
                    return match stop {
                        Stop::Code(code) => Err(stopped(code)),
                        Stop::Page => Ok(emit.last.take()),
                    };
                }
                return Ok(None);
            }
        };
        match stop {
            None => {}
            Some(Stop::Code(code)) => return Err(stopped(code)),
            Some(Stop::Page) => return Ok(emit.last.take()),
        }
        if abandoned.get() {
            return Ok(None);
        }
    }
    Ok(None)
}

/// Where an entry id falls in the order its store made the entries: the
/// low 48 bits count them (`shards::write::insert`), the high 16 name the
/// partition.
fn made(id: &index::Candidate) -> (u64, u16) {
    let n = u64::from_be_bytes(*id);
    (n & ((1 << 48) - 1), (n >> 48) as u16)
}

/// What a search stopped early by a limit (or a rename) ends with.
fn stopped(code: LdapResultCode) -> Error {
    match code {
        LdapResultCode::Busy => crate::ops::carries::overtaken_error(),
        code => Error::new(code, ""),
    }
}

/// A size or time limit: the client's request, capped by the server's
/// configured limit for everyone but the root DN (0 means none).
/// The server's size and time limits, or the requester's override
/// (`limits.by_identity`).
fn configured_limits(live: &crate::ctx::Live, plan: Option<&ReadPlan<'_>>) -> (usize, u64) {
    let (mut size_limit, mut time_limit) = (live.limits.size_limit, live.limits.time_limit_s);
    if let Some(over) = plan.and_then(|p| p.access.limits()) {
        size_limit = over.size.unwrap_or(size_limit);
        time_limit = over.time_s.unwrap_or(time_limit);
    }
    (size_limit, time_limit)
}

/// The most entries a search of `req` may return: what it asks, within
/// what the requester's limits allow (`None` for the root DN: what it
/// asks).
pub fn size_limit(live: &crate::ctx::Live, plan: Option<&ReadPlan<'_>>, req: &LdapSearchRequest) -> usize {
    effective(req.sizelimit, configured_limits(live, plan).0, plan.is_none())
}

/// When the search must end (`timeLimitExceeded`): the requested time
/// limit, within the configured one but for the root DN.
pub fn deadline(live: &crate::ctx::Live, plan: Option<&ReadPlan<'_>>, req: &LdapSearchRequest) -> Option<Instant> {
    match effective(req.timelimit, configured_limits(live, plan).1 as usize, plan.is_none()) {
        usize::MAX => None,
        secs => Some(Instant::now() + Duration::from_secs(secs as u64)),
    }
}

fn effective(requested: i32, configured: usize, is_root: bool) -> usize {
    let requested = if requested > 0 { requested as usize } else { usize::MAX };
    if is_root || configured == 0 {
        requested
    } else {
        requested.min(configured)
    }
}

/// A search of the computed cn=Monitor subtree.
#[allow(clippy::too_many_arguments)]
fn search_monitor(
    ctx: &crate::ctx::Ctx,
    msgid: i32,
    req: &LdapSearchRequest,
    base: &Dn,
    node: &filter::Node,
    sel: &Selection,
    out: &mut BytesMut,
    sent: &mut u64,
) -> Result<()> {
    let entries = monitor::entries(ctx);
    let dns: Vec<Dn> = entries.iter().map(|e| Dn::parse(&e.dn)).collect::<Result<_>>()?;
    if !dns.iter().any(|d| d == base) {
        return Err(Error::no_such_object(&req.base));
    }
    for (e, dn) in entries.iter().zip(&dns) {
        let in_scope = match req.scope {
            LdapSearchScope::Base => dn == base,
            LdapSearchScope::OneLevel => dn.depth() == base.depth() + 1 && dn.is_within(base),
            LdapSearchScope::Subtree => dn.is_within(base),
            LdapSearchScope::Children => dn != base && dn.is_within(base),
        };
        if in_scope && write_computed(out, msgid, e, node, sel, 0)? {
            *sent += 1;
        }
    }
    Ok(())
}
