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
use crate::ops::controls::Controls;
use crate::ops::paging::{self, Counts, Position};
use crate::ops::record::{self, Operation};
use crate::ops::sort::Sorter;
use crate::ops::{alias, monitor, parse_dn, referral, result, rootdse};
use bytes::BytesMut;
use ldap3_proto::control::LdapControl;
use ldap3_proto::proto::{LdapMsg, LdapOp, LdapSearchRequest, LdapSearchResultReference, LdapSearchScope};
use ldap3_proto::LdapResultCode;
use shards::dn::key_of;
use shards::dn::Dn;
use shards::entry::{encode_vals, Entry, EntryView, Vals};
use shards::schema::subschema;
use shards::stores::{StoreRef, Stores};
use shards::write::children;
use shards::ReadTxn;
use shards::{filter, index, matching, Error, Result};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

mod emit;
mod limits;
mod scope;
mod select;
mod walk;

use limits::{configured_limits, effective, Limits};
pub use limits::{deadline, size_limit};
use walk::walk;

use emit::Emit;
pub use emit::{searchable_match, visible_match};
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

/// Runs a search. One that need not wait (for room on the connection, or
/// at a pause of a long scan) is answered before this returns, its bytes
/// added to `inline`, the read's batch: no task is spawned for it and it
/// has no send of its own. Otherwise it goes on as a task of its own once
/// the read's requests are dispatched (an Abandon among them is seen
/// first), as every search does once the batch holds `CHUNK_BYTES` (the
/// batch is sent only when the read's requests are done, so it must not
/// grow unbounded).
pub fn start(
    conn: &Rc<Conn>,
    msgid: i32,
    req: LdapSearchRequest,
    ctrls: Controls,
    rec: Operation,
    inline: &mut BytesMut,
) {
    // Counted in `pending` until its last bytes are queued.
    let (abandoned, in_flight) = running(conn, msgid);
    let mut task = Box::pin(answer(conn.clone(), msgid, req, ctrls, rec, abandoned));
    // Polled once outside a task: a future left pending is polled again,
    // with the task's waker, as soon as the task is spawned, so the waker
    // given here (which does nothing) is never the one waited on. The
    // first poll runs at most one chunk of a long search (`SLICE`).
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let now = match inline.len() < CHUNK_BYTES {
        true => std::future::Future::poll(task.as_mut(), &mut cx),
        false => std::task::Poll::Pending,
    };
    match now {
        std::task::Poll::Ready(out) => inline.unsplit(out),
        std::task::Poll::Pending => {
            let owner = conn.clone();
            conn.defer(Box::pin(async move {
                let out = task.await;
                owner.send(out).await;
                drop(in_flight);
            }));
        }
    }
}

/// The search as one future: what is left to send once it has ended.
async fn answer(
    conn: Rc<Conn>,
    msgid: i32,
    req: LdapSearchRequest,
    ctrls: Controls,
    rec: Operation,
    abandoned: Rc<crate::ops::abandon::Abandoned>,
) -> BytesMut {
    // Entries still buffered when the search ends leave in the same
    // write as SearchResultDone: one send for a typical search, and for
    // one entry of a usual size one allocation.
    let mut out = BytesMut::with_capacity(1024);
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
        return out;
    }
    if abandoned.get() {
        record::end(&conn, &rec, &LdapResultCode::Canceled, "", Some(sent));
        return BytesMut::new();
    }
    let mut done = LdapMsg::new(msgid, LdapOp::SearchResultDone(result(res)));
    done.ctrl = done_ctrls;
    record::end_with(&conn, &rec, &done.op, Some(sent));
    encode(&mut out, done);
    out
}

/// RFC 3672 as slapd's back-mdb applies it: with the Subentries control
/// TRUE only subentries are returned; without it (or with it FALSE) a
/// one-level or subtree search passes them over, and a base search with
/// it FALSE too (not the subschema subentry, which is served apart).
/// Added after the access rules restrict the filter (the requester's right
/// to search `objectClass` has nothing to do with it), and without the
/// control, when `lazily`, only once a store may hold a subentry: the
/// usual search tests nothing more (a persistent search outlives that
/// test, so it is not lazy).
pub(crate) fn subentry_visibility(
    node: filter::Node,
    req: &LdapSearchRequest,
    base_key: &[u8],
    control: Option<bool>,
    lazily: bool,
) -> filter::Node {
    let subentry =
        || filter::compile(&ldap3_proto::proto::LdapFilter::Equality("objectClass".into(), "subentry".into()));
    let hidden = match control {
        Some(true) => return filter::Node::And(vec![node, subentry()]),
        Some(false) => true,
        None => req.scope != LdapSearchScope::Base,
    };
    let absent = lazily && !shards::index::Marked::Subentry.may_exist();
    if !hidden || absent || subschema::is_subschema_key(base_key) {
        return node;
    }
    filter::Node::And(vec![node, filter::Node::Not(Box::new(subentry()))])
}

/// Glue entries as slapd's back-mdb treats them (`crate::glue`): without
/// ManageDsaIT a search passes them over at any scope, not what is below
/// them; when `lazily`, tested only once a store may hold one.
pub(crate) fn glue_visibility(node: filter::Node, manage_dsa_it: bool, lazily: bool) -> filter::Node {
    if manage_dsa_it || (lazily && !shards::index::Marked::Glue.may_exist()) {
        return node;
    }
    let glue = filter::compile(&ldap3_proto::proto::LdapFilter::Equality("objectClass".into(), "glue".into()));
    filter::Node::And(vec![node, filter::Node::Not(Box::new(glue))])
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
    let mut sel = Selection::new(&req.attrs, req.typesonly)
        .hiding_counts(plan.as_ref().is_some_and(|p| !p.every_entry_readable()));
    if let Some(items) = &ctrls.matched_values {
        sel.values = items.iter().map(filter::compile_value_item).collect();
        sel.value_tests = if is_root { 0 } else { live.limits.max_filter_tests };
    }
    let mut node = filter::compile(&req.filter);
    if let Some(plan) = &plan {
        // Assertions on attributes the requester may not search are Undefined.
        node = node.restrict(&|names| plan.searchable(names));
    }
    node = subentry_visibility(node, req, &base_key, ctrls.subentries, true);
    node = glue_visibility(node, ctrls.manage_dsa_it, true);
    let computed_tests = if is_root { 0 } else { live.limits.max_filter_tests };
    // A one-RDN key is that RDN's normalized form.
    if subschema::is_subschema_key(&base_key) {
        // As slapd: the subschema subentry is served to a base search
        // only; it is no container, and below it nothing exists.
        if req.scope != LdapSearchScope::Base {
            return Err(Error::no_such_object(&req.base));
        }
        let entry = subschema::entry();
        crate::ops::controls::check_assertion_computed(conn, &identity, ctrls.assertion.as_ref(), &base_key, &entry)?;
        *sent = write_computed(out, msgid, &entry, &node, &sel, computed_tests)? as u64;
        return Ok(());
    }
    if monitor::is_monitor_key(&base_key) {
        let allowed = is_root || plan.as_ref().is_some_and(|p| p.access.reads_monitor());
        if !allowed {
            return Err(Error::no_such_object(&req.base));
        }
        // The Assertion control holds on the base entry, as elsewhere.
        let holds = |e: &Entry| {
            crate::ops::controls::check_assertion_computed(conn, &identity, ctrls.assertion.as_ref(), &base_key, e)
        };
        return search_monitor(ctx, msgid, req, (&parse_dn(&req.base)?, &holds), &node, &sel, out, sent);
    }
    if base_key.is_empty() {
        if req.scope != LdapSearchScope::Base {
            return Err(Error::new(LdapResultCode::NoSuchObject, "only a base search can read the root DSE"));
        }
        let entry = rootdse::entry(ctx, crate::ops::sasl::mechanisms(conn));
        crate::ops::controls::check_assertion_computed(conn, &identity, ctrls.assertion.as_ref(), &base_key, &entry)?;
        *sent = write_computed(out, msgid, &entry, &node, &sel, computed_tests)? as u64;
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
    // As slapd's frontend: a page that holds the whole size limit the
    // client asked for pages nothing, and the control is ignored.
    let paged = ctrls.paged.as_ref().filter(|(size, _)| !(req.sizelimit > 0 && i64::from(req.sizelimit) <= *size));
    let (page_size, position, before) = match paged {
        Some((size, cookie)) => {
            let (position, counts) = paging::decode(req, ctrls, identity.dn(), cookie).map_err(|e| {
                // As slapd: a missing base (or one the requester may not
                // know of) is answered before the cookie is read.
                let computed = subschema::is_subschema_key(&base_key) || monitor::is_monitor_key(&base_key);
                let base = parse_dn(&req.base).ok().filter(|b| !b.is_root() && !computed);
                match base {
                    Some(b) if !conn.ctx.shard.exists(&base_key).unwrap_or(true) => {
                        crate::ops::with_matched(conn, &identity, &b, Error::no_such_object(&req.base))
                    }
                    // Hidden: as a search of it answers, naming nothing.
                    Some(_) if !crate::ops::disclosed(conn, &identity, &base_key) => Error::no_such_object(&req.base),
                    _ => e,
                }
            })?;
            (Some((*size).max(0) as usize), position, counts)
        }
        None => (None, Position::Start, Counts::default()),
    };
    if ctrls.vlv.is_some() {
        // As slapd's sssvlv: a view needs a sort, and is no page.
        if ctrls.sort.is_none() {
            done_ctrls.push(crate::ops::vlv::response(0, 0, LdapResultCode::VirtualListViewError as u8));
            return Err(Error::new(LdapResultCode::VirtualListViewError, "Sort control is required with VLV"));
        }
        if paged.is_some() {
            return Err(Error::unwilling("VLV incompatible with PagedResults"));
        }
    }
    let mut sorter = None;
    let mut _sorting = None;
    if let Some(keys) = &ctrls.sort {
        // Sorting by an attribute one may not search would disclose its
        // order: the key counts as absent in each entry where it may not
        // be searched (`Sorter::push`), even in all of them, so the search
        // succeeds, sorted by what may be searched. slapd sorts by the
        // hidden values (a leak not followed).
        // As slapd: a key without an ordering rule (18) or an unknown
        // attribute (16) fails the search, critical or not.
        // Only the rows that can be sent are kept: the size limit, or up
        // to the end of the page asked for.
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
    if page_size == Some(0) {
        // RFC 2696: a page size of 0 abandons the paged search, and slapd
        // answers with no control; on a new one, as slapd, no entries and
        // a cookie to go on with.
        if paged.is_some_and(|(_, c)| c.is_empty()) {
            let cookie = paging::encode(req, ctrls, identity.dn(), &Position::Start, Counts::default());
            done_ctrls.push(LdapControl::SimplePagedResults { size: 0, cookie });
        }
        return Ok(());
    }
    if sorter.is_none() {
        // The size limit holds across the pages of one search.
        limits.size = limits.size.saturating_sub(usize::try_from(before.sent).unwrap_or(usize::MAX));
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
        turn: None,
        last: None,
        msgid,
        filter: &node,
        sel: &sel,
        plan: plan.as_ref(),
        limits,
        out,
        room,
        sent: 0,
        // As the size limit, the lookthrough holds across pages (a sorted
        // search walks everything on each page; its cookie counts none).
        examined: usize::try_from(before.examined).unwrap_or(usize::MAX),
        examined_to_sent: usize::try_from(before.examined).unwrap_or(usize::MAX),
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
                let counts = Counts { sent: next as u64, examined: 0 };
                paging::encode(req, ctrls, identity.dn(), &Position::Offset(next as u64), counts)
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
        let counts =
            Counts { sent: before.sent.saturating_add(emit.sent as u64), examined: emit.examined_to_sent as u64 };
        let cookie = stopped.as_ref().map(|p| paging::encode(req, ctrls, identity.dn(), p, counts)).unwrap_or_default();
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

/// What a search stopped early by a limit (or a rename) ends with.
fn stopped(code: LdapResultCode) -> Error {
    match code {
        LdapResultCode::Busy => crate::ops::carries::overtaken_error(),
        code => Error::new(code, ""),
    }
}

/// A search of the computed cn=Monitor subtree.
#[allow(clippy::too_many_arguments)]
fn search_monitor(
    ctx: &crate::ctx::Ctx,
    msgid: i32,
    req: &LdapSearchRequest,
    (base, holds): (&Dn, &dyn Fn(&Entry) -> Result<()>),
    node: &filter::Node,
    sel: &Selection,
    out: &mut BytesMut,
    sent: &mut u64,
) -> Result<()> {
    let entries = monitor::entries(ctx);
    let dns: Vec<Dn> = entries.iter().map(|e| Dn::parse(&e.dn)).collect::<Result<_>>()?;
    let Some(at) = dns.iter().position(|d| d == base) else {
        return Err(Error::no_such_object(&req.base));
    };
    holds(&entries[at])?;
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
