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

use crate::acl::{Level, ReadPlan, Target};
use crate::ber::{self, OutAttr};
use crate::conn::{encode, Conn};
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
use shards::dn::{key_depth, Dn, KEY_SEPARATOR};
use shards::entry::{encode_vals, Entry, EntryView, Vals};
use shards::schema::subschema;
use shards::store::{Engine, ReadTxn, Store};
use shards::write::children;
use shards::{filter, index, matching, Error, Result};
use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Response bytes gathered before they are handed to the writer.
const CHUNK_BYTES: usize = 64 << 10;
/// Candidates examined before the scan pauses to let other tasks run.
const CHUNK_SCANNED: usize = 2048;
/// Reactor time one chunk may take before the scan pauses, however costly
/// each candidate is (a filter of thousands of terms): other requests on
/// the shard wait at most about this long for a search.
pub const SLICE: Duration = Duration::from_millis(2);

/// Registers a running search: its Abandon flag, and its place among the
/// connection's pending operations while it lives.
pub fn running(conn: &Rc<Conn>, msgid: i32) -> (Rc<Cell<bool>>, crate::conn::InFlight) {
    let abandoned = Rc::new(Cell::new(false));
    conn.running.borrow_mut().insert(msgid, abandoned.clone());
    (abandoned, crate::conn::InFlight::new(conn))
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
        let res = run(&conn, msgid, &req, &ctrls, &abandoned, &mut out, &mut done_ctrls, &mut sent).await;
        conn.running.borrow_mut().remove(&msgid);
        // Nothing to hash on the usual path: no Cancel on this connection.
        let canceled = !conn.canceled.borrow().is_empty() && conn.canceled.borrow_mut().remove(&msgid);
        if canceled {
            let done = LdapMsg::new(
                msgid,
                LdapOp::SearchResultDone(result(Err(shards::Error::new(LdapResultCode::Canceled, "canceled")))),
            );
            record::end_with(&conn, &rec, &done.op, Some(sent));
            encode(&mut out, done);
            conn.send(out).await;
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
        conn.send(out).await;
    })
    .detach();
}

/// The attribute types an `@class` selection names; none for an unknown class.
fn class_attrs(class: &str) -> Vec<matching::AttrName<'static>> {
    let schema = shards::schema::get();
    let Some(c) = schema.class_index(class) else { return Vec::new() };
    let mut chain = Vec::new();
    schema.closure(c, &mut chain);
    let mut types: Vec<usize> =
        chain.iter().flat_map(|c| schema.classes[*c].must.iter().chain(&schema.classes[*c].may)).copied().collect();
    types.sort_unstable();
    types.dedup();
    types.into_iter().map(|t| matching::AttrName::with_subtypes(schema.attrs[t].name())).collect()
}

/// Which attributes a search returns, with the requested names resolved
/// once per request.
pub struct Selection<'a> {
    user: bool,
    operational: bool,
    names: Vec<matching::AttrName<'a>>,
    pub types_only: bool,
    /// Matched Values items (RFC 3876): of an attribute one of them names,
    /// only the values some item matches are returned.
    pub values: Vec<filter::Node>,
}

impl<'a> Selection<'a> {
    pub fn new(attrs: &'a [String], types_only: bool) -> Selection<'a> {
        let mut sel =
            Selection { user: attrs.is_empty(), operational: false, names: Vec::new(), types_only, values: Vec::new() };
        for a in attrs {
            match a.as_str() {
                "*" => sel.user = true,
                "+" => sel.operational = true,
                "1.1" => {}
                // RFC 4529: every attribute the class (and its superclasses) allows.
                name if name.starts_with('@') => sel.names.extend(class_attrs(&name[1..])),
                name => sel.names.push(matching::AttrName::with_subtypes(name)),
            }
        }
        sel
    }

    /// Whether a stored attribute is returned.
    pub fn wants(&self, name: &str) -> bool {
        if self.names.iter().any(|n| n.is(name)) {
            return true;
        }
        if self.user == self.operational {
            return self.user;
        }
        if matching::is_operational(name) {
            self.operational
        } else {
            self.user
        }
    }

    /// Whether an operational attribute computed at read time is returned.
    pub fn wants_computed(&self, name: &str) -> bool {
        self.operational || self.names.iter().any(|n| n.is(name))
    }

    /// Whether an entry's children must be counted for it (a `children`
    /// lookup per entry is otherwise wasted).
    fn counts_children(&self) -> bool {
        self.wants_computed("hasSubordinates") || self.wants_computed("numSubordinates")
    }
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

async fn run(
    conn: &Conn,
    msgid: i32,
    req: &LdapSearchRequest,
    ctrls: &Controls,
    abandoned: &Cell<bool>,
    out: &mut BytesMut,
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
    // RFC 3672: with the Subentries control TRUE only subentries are
    // returned, with FALSE (or without it) only the others.
    if ctrls.subentries == Some(true) {
        let subentry = ldap3_proto::proto::LdapFilter::Equality("objectClass".into(), "subentry".into());
        node = filter::Node::And(vec![node, filter::compile(&subentry)]);
    }
    if let Some(plan) = &plan {
        // Assertions on attributes the requester may not search are Undefined.
        node = node.restrict(&|names| plan.searchable(names));
    }
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
        *sent = write_computed(out, msgid, &rootdse::entry(ctx), &node, &sel, computed_tests)? as u64;
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
    // The server's limits, or the requester's override (`limits.by_identity`).
    let (mut size_limit, mut time_limit) = (live.limits.size_limit, live.limits.time_limit_s);
    if let Some(over) = plan.as_ref().and_then(|p| p.access.limits()) {
        size_limit = over.size.unwrap_or(size_limit);
        time_limit = over.time_s.unwrap_or(time_limit);
    }
    let mut limits = Limits {
        size: effective(req.sizelimit, size_limit, is_root),
        deadline: match effective(req.timelimit, time_limit as usize, is_root) {
            usize::MAX => None,
            secs => Some(Instant::now() + Duration::from_secs(secs as u64)),
        },
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
            let (position, sent) = paging::decode(req, cookie)?;
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
        let cookie = if fresh { paging::encode(req, &Position::Start, 0) } else { Vec::new() };
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
        true => Some((ctx.suffixes.iter().map(Dn::key).collect(), crate::ops::syncrepl::context_csn(ctx)?)),
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
                paging::encode(req, &Position::Offset(next as u64), next as u64)
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
        if next >= visible {
            emit.references(conn, req, &base_key, abandoned).await?;
        }
        return Ok(());
    }
    if stopped.is_none() {
        emit.references(conn, req, &base_key, abandoned).await?;
    }
    if page_size.is_some() {
        let sent_now = sent_before.saturating_add(emit.sent as u64);
        let cookie = stopped.as_ref().map(|p| paging::encode(req, p, sent_now)).unwrap_or_default();
        done_ctrls.push(LdapControl::SimplePagedResults { size: 0, cookie });
    }
    Ok(())
}

impl Emit<'_> {
    /// The continuation references of a one-level or subtree search,
    /// after its last entry: one per referral object in its scope the
    /// requester may read (`entry` and `ref`, as slapd checks before
    /// sending one), found with a prefix scan of the referral keys below
    /// the base (`index::Marked::below`), in chunks like the walk: each
    /// chunk sent, the reactor yielded, the time limit and Abandon checked.
    async fn references(
        &mut self,
        conn: &Conn,
        req: &LdapSearchRequest,
        base_key: &[u8],
        abandoned: &Cell<bool>,
    ) -> Result<()> {
        if !self.referrals || req.scope == LdapSearchScope::Base {
            return Ok(());
        }
        let one_level = req.scope == LdapSearchScope::OneLevel;
        let roots = self.roots.take().unwrap_or_default();
        // An alias target that is a referral object: its own reference.
        for (i, root) in roots.iter().filter(|r| r.as_slice() != base_key).enumerate() {
            if i % REFERENCE_CHUNK == REFERENCE_CHUNK - 1 {
                self.flush(conn).await;
                if abandoned.get() {
                    return Ok(());
                }
            }
            let shard = &conn.ctx.shard;
            let uris = shard.with_entry(root, |view| {
                let target = Target { key: root, entry: Some(view) };
                let readable =
                    self.plan.is_none_or(|p| p.entry_readable(&target) && p.allows(&target, "ref", Level::Read));
                readable.then(|| referral::reference_to(view, one_level)).flatten()
            })?;
            if let Some(uris) = uris.flatten() {
                let reference = LdapOp::SearchResultReference(LdapSearchResultReference { uris });
                encode(self.out, LdapMsg::new(self.msgid, reference));
            }
        }
        let bases = match (one_level, roots.is_empty()) {
            (false, false) => roots.iter().map(Vec::as_slice).collect(),
            _ => vec![base_key],
        };
        let mut slice_end = Instant::now() + SLICE;
        for (base_key, store) in bases.into_iter().flat_map(|b| conn.ctx.shard.stores.iter().map(move |s| (b, s))) {
            // Thousands of alias roots, each a small scan: paused between too.
            if Instant::now() >= slice_end {
                if self.limits.deadline.is_some_and(|d| Instant::now() >= d) {
                    return Err(Error::new(LdapResultCode::TimeLimitExceeded, ""));
                }
                self.flush(conn).await;
                if abandoned.get() {
                    return Ok(());
                }
                slice_end = Instant::now() + SLICE;
            }
            let mut after: Option<Vec<u8>> = None;
            loop {
                if self.reading.is_some_and(|r| r.overtaken()) {
                    // Read after a rename began: not the tree the entries were.
                    return Err(crate::ops::carries::overtaken_error());
                }
                let found = {
                    let txn = store.read()?;
                    let found = index::Marked::Referral.below(&txn, base_key, after.as_deref(), REFERENCE_CHUNK)?;
                    for (_, id) in &found {
                        let Some(view) = txn.entry_by_id(id)? else { continue };
                        let Some(uris) = referral::reference(&view, base_key, one_level) else { continue };
                        let key = key_of(view.dn())?;
                        let target = Target { key: &key, entry: Some(&view) };
                        if self
                            .plan
                            .is_some_and(|p| !p.entry_readable(&target) || !p.allows(&target, "ref", Level::Read))
                        {
                            continue;
                        }
                        let reference = LdapOp::SearchResultReference(LdapSearchResultReference { uris });
                        encode(self.out, LdapMsg::new(self.msgid, reference));
                    }
                    found
                };
                if found.len() < REFERENCE_CHUNK {
                    break;
                }
                if self.limits.deadline.is_some_and(|d| Instant::now() >= d) {
                    return Err(Error::new(LdapResultCode::TimeLimitExceeded, ""));
                }
                self.flush(conn).await;
                if abandoned.get() {
                    return Ok(());
                }
                after = found.last().map(|(k, _)| k.clone());
            }
        }
        Ok(())
    }
}

/// Referral objects read per chunk of `Emit::references`.
const REFERENCE_CHUNK: usize = 256;

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
    abandoned: &Cell<bool>,
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
    {
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
            }
        }
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
            Some(c) => {
                let after = match &position {
                    Position::Index { store, after } if *store == i => Some(*after),
                    _ => None,
                };
                let from = after.map_or(0, |a| c.partition_point(|id| *id <= a));
                emit.from_index(conn, store, &scope, &c[from..], abandoned).await?
            }
            None => {
                let after = match &position {
                    Position::Range { store, after } if *store == i => Some(after.clone()),
                    _ => None,
                };
                emit.from_range(conn, store, &scope, after, abandoned).await?
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

/// What a search stopped early by a limit (or a rename) ends with.
fn stopped(code: LdapResultCode) -> Error {
    match code {
        LdapResultCode::Busy => crate::ops::carries::overtaken_error(),
        code => Error::new(code, ""),
    }
}

/// A size or time limit: the client's request, capped by the server's
/// configured limit for everyone but the root DN (0 means none).
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
    ctx: &crate::server::Ctx,
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

/// Which DN keys below the base a one-level, subtree or children search
/// covers (the base itself is decided apart): key ranges, disjoint and in
/// key order; one, or more where aliases widen the scope (`ops::alias`).
pub struct Scope {
    /// Inline: a search without aliases allocates no list.
    parts: smallvec::SmallVec<[Part; 1]>,
    /// A key the ranges hold but the scope does not: a children search's
    /// base, within the subtree of an alias target above it.
    except: Option<Vec<u8>>,
}

/// One key range of a scope.
enum Part {
    /// The keys starting with `prefix` (a base's key and the separator);
    /// with `depth`, only those at that depth or in `also` (a one-level
    /// search's children, and its alias targets within the range).
    Below { prefix: Vec<u8>, depth: Option<usize>, also: Vec<Vec<u8>> },
    /// One key (an alias target: of a one-level search, or the root of a
    /// further subtree).
    Key(Vec<u8>),
}

impl Part {
    fn contains(&self, key: &[u8]) -> bool {
        match self {
            Part::Below { prefix, depth, also } => {
                key.starts_with(prefix)
                    && (depth.is_none_or(|d| key_depth(key) == d)
                        || also.binary_search_by(|a| a.as_slice().cmp(key)).is_ok())
            }
            Part::Key(k) => key == k.as_slice(),
        }
    }

    /// The first key of the range (and the scan prefix).
    fn start(&self) -> &[u8] {
        match self {
            Part::Below { prefix, .. } => prefix,
            Part::Key(k) => k,
        }
    }

    /// Whether every key of the range sorts at or before `after`.
    fn before(&self, after: &[u8]) -> bool {
        match self {
            Part::Below { prefix, .. } => after > prefix.as_slice() && !after.starts_with(prefix),
            Part::Key(k) => after >= k.as_slice(),
        }
    }
}

fn below_part(base_key: &[u8], scope: &LdapSearchScope) -> Part {
    let mut prefix = base_key.to_vec();
    prefix.push(KEY_SEPARATOR);
    let depth = (*scope == LdapSearchScope::OneLevel).then(|| key_depth(&prefix));
    Part::Below { prefix, depth, also: Vec::new() }
}

impl Scope {
    pub fn below(base_key: &[u8], scope: &LdapSearchScope) -> Scope {
        Scope { parts: smallvec::smallvec![below_part(base_key, scope)], except: None }
    }

    /// The scope widened by the aliases in it (`alias::scopes`): for a
    /// one-level search, the base's children and the `extra` targets; for
    /// a subtree, the `extra` roots each with its subtree (the base's own
    /// entry, a root, is decided apart).
    fn widened(base_key: &[u8], scope: &LdapSearchScope, extra: Vec<Vec<u8>>) -> Scope {
        let mut parts: smallvec::SmallVec<[Part; 1]> = smallvec::SmallVec::new();
        if *scope == LdapSearchScope::OneLevel {
            let Part::Below { prefix, depth, .. } = below_part(base_key, scope) else { unreachable!() };
            // `extra` is sorted, and so is `also`.
            let (also, outside): (Vec<_>, Vec<_>) = extra.into_iter().partition(|t| t.starts_with(&prefix));
            parts.push(Part::Below { prefix, depth, also });
            parts.extend(outside.into_iter().map(Part::Key));
        } else {
            for root in extra {
                if root != base_key {
                    parts.push(Part::Key(root.clone()));
                }
                parts.push(below_part(&root, &LdapSearchScope::Subtree));
            }
        }
        parts.sort_by(|a, b| a.start().cmp(b.start()));
        let except = (*scope == LdapSearchScope::Children).then(|| base_key.to_vec());
        Scope { parts, except }
    }

    /// The one range that may hold `key` (they are disjoint and sorted) decides.
    pub fn contains(&self, key: &[u8]) -> bool {
        let at = self.parts.partition_point(|p| p.start() <= key);
        at > 0 && self.parts[at - 1].contains(key) && self.except.as_deref() != Some(key)
    }
}

/// Whether the requester may see the entry and it matches the filter
/// (`plan` is `None` for the root DN).
///
/// `tests` bounds the attribute and value tests the filter may take on this
/// entry (`limits.max_filter_tests`; 0: no bound); past it the operation
/// ends with adminLimitExceeded. The root DN is not bounded.
pub fn visible_match(
    plan: Option<&ReadPlan<'_>>,
    filter: &filter::Node,
    target: &Target,
    view: &EntryView<'_>,
    tests: u64,
) -> Result<bool> {
    // Many terms: locate the attributes once, not once per term.
    let table;
    let view = if filter.more_terms_than(4) {
        table = view.attr_table();
        &view.with_table(&table)
    } else {
        view
    };
    let Some(plan) = plan else { return Ok(filter.matches(view)) };
    if !plan.entry_readable(target) {
        return Ok(false);
    }
    Ok(filter.eval_bounded(view, &|names| plan.can_search(target, names), tests)? == Some(true))
}

/// The state of one search's output: the filter, the selection, the limits
/// and what has been written so far.
struct Emit<'a> {
    msgid: i32,
    filter: &'a filter::Node,
    sel: &'a Selection<'a>,
    /// Access control for the requester (`None` for the root DN).
    plan: Option<&'a ReadPlan<'a>>,
    limits: Limits,
    out: &'a mut BytesMut,
    sent: usize,
    /// Entries examined without an index.
    examined: usize,
    /// Entries the current page still takes (paged results).
    page_left: Option<usize>,
    /// Collects entries instead of writing them (server-side sort).
    sorter: Option<Sorter>,
    /// The suffixes' keys and their contextCSN values, when asked for.
    context_csn: Option<(Vec<Vec<u8>>, Vec<Vec<u8>>)>,
    /// The filter's hasSubordinates items (`Node::subordinate_items`):
    /// each entry's child count answers them.
    subordinates: Vec<(usize, [bool; 2])>,
    /// Referral objects are references, not entries (`ops::referral`):
    /// some may exist and ManageDsaIT is absent.
    referrals: bool,
    /// Aliases are passed over, but for the one with this key (`ops::alias`).
    hide_aliases: Option<Vec<u8>>,
    /// What aliases added to a search's scope (`alias::scopes`): a subtree
    /// search's roots, whose continuation references are those below each
    /// (and the root's own, when a referral object); a one-level search's
    /// targets (each its own reference, when a referral object).
    roots: Option<Vec<Vec<u8>>>,
    /// Ends the search when a subtree rename overtakes it (`ops::carries`).
    reading: Option<&'a Reading<'a>>,
    /// Where the walk is: `None` at the base, else the store and whether
    /// its candidates come from an index (for `last`).
    walking: Option<(usize, bool)>,
    /// Paged: the position after the last entry sent. As slapd, a page
    /// ends only when a further entry matches, so a result that fills its
    /// last page exactly ends there, without an empty page after it.
    last: Option<Position>,
}

/// What visiting one candidate decided.
enum Visit {
    Next,
    Stop(LdapResultCode),
    /// The entry just written filled the page.
    PageFull,
}

/// Why a walk over one store stopped early.
enum Stop {
    Code(LdapResultCode),
    /// The page is full and another entry matches: the next page starts
    /// after the last entry sent (`Emit::last`).
    Page,
}

/// The contextCSN values of the entry with this key, if it is a suffix.
fn context<'v>(context_csn: &'v Option<(Vec<Vec<u8>>, Vec<Vec<u8>>)>, key: &[u8]) -> Option<&'v [Vec<u8>]> {
    let (keys, values) = context_csn.as_ref()?;
    keys.iter().any(|k| k == key).then_some(values.as_slice())
}

impl Emit<'_> {
    /// Checks one candidate entry and writes it when it matches.
    /// `decide`: the base entry, whose equality filter the index may decide
    /// (`index::decides`; a scan's entries are evaluated); `read`: the
    /// entry when the caller has read it already.
    fn visit<T: ReadTxn>(
        &mut self,
        txn: &T,
        key: &[u8],
        id: &[u8],
        decide: bool,
        read: Option<&EntryView<'_>>,
    ) -> Result<Visit> {
        let known = if decide { index::decides(txn, self.filter, id)? } else { None };
        if known == Some(false) {
            return Ok(Visit::Next);
        }
        if let Some(view) = read {
            return self.visit_view(txn, key, id, view, known);
        }
        let Some(view) = txn.entry_by_id(id)? else { return Ok(Visit::Next) };
        self.visit_view(txn, key, id, &view, known)
    }

    /// Checks one entry already read and writes it when it matches;
    /// `matched` when the index has decided the filter (`index::decides`).
    fn visit_view<T: ReadTxn>(
        &mut self,
        txn: &T,
        key: &[u8],
        id: &[u8],
        view: &EntryView<'_>,
        matched: Option<bool>,
    ) -> Result<Visit> {
        if self.limits.deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(Visit::Stop(LdapResultCode::TimeLimitExceeded));
        }
        if self.reading.is_some_and(|r| r.overtaken()) {
            return Ok(Visit::Stop(LdapResultCode::Busy));
        }
        if self.referrals && referral::is_referral(view) {
            // Sent as a continuation reference once the walk is done.
            return Ok(Visit::Next);
        }
        if self.hide_aliases.as_deref().is_some_and(|kept| key != kept && alias::is_alias(view)) {
            return Ok(Visit::Next);
        }
        let target = Target { key, entry: Some(view) };
        // Read once, for a hasSubordinates item or the attributes.
        let mut n_children = None;
        let visible = match matched {
            Some(m) => m && self.plan.is_none_or(|p| p.entry_readable(&target)),
            None => {
                // A big entry's equality items are index lookups (a group
                // of a million members checked for one).
                let mut decided = index::decided_items(txn, self.filter, id, view.size())?;
                if !self.subordinates.is_empty() {
                    let has = usize::from(*n_children.insert(children(txn, key)?) > 0);
                    decided.extend(self.subordinates.iter().map(|(item, matches)| (*item, matches[has])));
                }
                let (plan, filter, tests) = (self.plan, self.filter, self.limits.tests);
                filter::with_decided(decided, || visible_match(plan, filter, &target, view, tests))?
            }
        };
        if !visible {
            return Ok(Visit::Next);
        }
        // A sorted search collects every match; the limit applies after the sort.
        if self.sent == self.limits.size && self.sorter.is_none() {
            return Ok(Visit::Stop(LdapResultCode::SizeLimitExceeded));
        }
        if self.page_left == Some(0) {
            // A match past a full page: the page ends before it.
            return Ok(Visit::PageFull);
        }
        let n_children = match n_children {
            Some(n) => n,
            None if self.sel.counts_children() => children(txn, key)?,
            None => 0,
        };
        let plan = self.plan;
        let readable = |name: &str| plan.is_none_or(|p| p.allows(&target, name, Level::Read));
        let csns = context(&self.context_csn, key);
        match &mut self.sorter {
            Some(sorter) => {
                let mut buf = BytesMut::new();
                write_entry(&mut buf, self.msgid, view, n_children, self.sel, &readable, csns);
                sorter.push(view, buf, &|names| plan.is_none_or(|p| p.can_search(&target, names)))?;
            }
            None => write_entry(self.out, self.msgid, view, n_children, self.sel, &readable, csns),
        }
        self.sent += 1;
        if let Some(left) = &mut self.page_left {
            *left -= 1;
        }
        if self.page_left == Some(0) {
            // The page is full: where the next one starts, should a
            // further entry match (`Visit::PageFull`).
            self.last = Some(match self.walking {
                None => Position::AfterBase,
                Some((store, true)) => Position::Index { store, after: id.try_into().unwrap_or_default() },
                Some((store, false)) => Position::Range { store, after: key.to_vec() },
            });
        }
        Ok(Visit::Next)
    }

    /// Sends what is buffered and lets other tasks run.
    async fn flush(&mut self, conn: &Conn) {
        conn.send(std::mem::take(self.out)).await;
        // glommio runs a spawned task at once until it first waits;
        // yielding here lets the connection read further requests (an
        // Abandon among them) and other connections run between chunks.
        futures_lite::future::yield_now().await;
    }

    /// Walks the candidates an index lookup gave, in chunks.
    async fn from_index(
        &mut self,
        conn: &Conn,
        store: &Engine,
        scope: &Scope,
        candidates: &[index::Candidate],
        abandoned: &Cell<bool>,
    ) -> Result<Option<Stop>> {
        let mut at = 0;
        while at < candidates.len() {
            if at > 0 {
                self.flush(conn).await;
                if abandoned.get() {
                    return Ok(None);
                }
            }
            let txn = store.read()?;
            let slice_end = Instant::now() + SLICE;
            let start = at;
            for id in &candidates[start..] {
                // Skipped candidates count too: a million outside the scope
                // must not run without a pause.
                if at > start
                    && (at - start >= CHUNK_SCANNED || self.out.len() >= CHUNK_BYTES || Instant::now() >= slice_end)
                {
                    break;
                }
                at += 1;
                // A candidate may have been deleted since the lookup; the
                // index holds ids only, so the entry's DN decides its scope.
                let Some(view) = txn.entry_by_id(id)? else { continue };
                let Ok(key) = key_of(view.dn()) else { continue };
                if !scope.contains(&key) {
                    continue;
                }
                match self.visit_view(&txn, &key, id, &view, None)? {
                    Visit::Next => {}
                    Visit::Stop(code) => return Ok(Some(Stop::Code(code))),
                    Visit::PageFull => return Ok(Some(Stop::Page)),
                }
            }
        }
        Ok(None)
    }

    /// Walks the store's `dn2id` ranges of the scope (after `after`, when
    /// resuming a page), in key order.
    async fn from_range(
        &mut self,
        conn: &Conn,
        store: &Engine,
        scope: &Scope,
        after: Option<Vec<u8>>,
        abandoned: &Cell<bool>,
    ) -> Result<Option<Stop>> {
        // Aliases may make thousands of small ranges: the reactor is
        // yielded between them too, once a slice is spent.
        let mut slice_end = Instant::now() + SLICE;
        for part in &scope.parts {
            if after.as_deref().is_some_and(|a| part.before(a)) {
                continue;
            }
            let within = after.clone().filter(|a| a.as_slice() >= part.start());
            if let Some(stop) = self.from_part(conn, store, part, scope.except.as_deref(), within, abandoned).await? {
                return Ok(Some(stop));
            }
            if Instant::now() >= slice_end {
                if self.limits.deadline.is_some_and(|d| Instant::now() >= d) {
                    return Ok(Some(Stop::Code(LdapResultCode::TimeLimitExceeded)));
                }
                self.flush(conn).await;
                slice_end = Instant::now() + SLICE;
            }
            if abandoned.get() {
                return Ok(None);
            }
        }
        Ok(None)
    }

    /// Walks one range of the scope, in chunks.
    async fn from_part(
        &mut self,
        conn: &Conn,
        store: &Engine,
        part: &Part,
        except: Option<&[u8]>,
        after: Option<Vec<u8>>,
        abandoned: &Cell<bool>,
    ) -> Result<Option<Stop>> {
        let prefix = part.start();
        let one = matches!(part, Part::Key(_));
        let mut from = after.clone().unwrap_or_else(|| prefix.to_vec());
        loop {
            let mut resume = None;
            let mut outcome = Ok(Visit::Next);
            {
                let txn = store.read()?;
                let mut scanned = 0;
                let slice_end = Instant::now() + SLICE;
                txn.dn_keys(prefix, &from, &mut |key, id| {
                    if one && key != prefix {
                        // A lone key's range is that key alone.
                        return false;
                    }
                    scanned += 1;
                    if scanned > CHUNK_SCANNED
                        || self.out.len() >= CHUNK_BYTES
                        || (scanned > 1 && Instant::now() >= slice_end)
                    {
                        resume = Some(key.to_vec());
                        return false;
                    }
                    if !part.contains(key) || after.as_deref() == Some(key) || except == Some(key) {
                        return true;
                    }
                    self.examined += 1;
                    if self.examined > self.limits.lookthrough && self.page_left == Some(0) {
                        // Looking past a full page for one more match: the
                        // page ends here, and the next one counts afresh.
                        outcome = Ok(Visit::PageFull);
                        return false;
                    }
                    if self.examined > self.limits.lookthrough {
                        outcome = Err(Error::new(
                            self.limits.lookthrough_code.clone(),
                            format!(
                                "the filter is not indexed and the search examined more than {} entries \
                                 (limits.unindexed_lookthrough)",
                                self.limits.lookthrough
                            ),
                        ));
                        return false;
                    }
                    outcome = self.visit(&txn, key, id, false, None);
                    matches!(outcome, Ok(Visit::Next))
                })?;
            }
            match outcome? {
                Visit::Next => {}
                Visit::Stop(code) => return Ok(Some(Stop::Code(code))),
                Visit::PageFull => return Ok(Some(Stop::Page)),
            }
            match resume {
                Some(key) => {
                    from = key;
                    self.flush(conn).await;
                    if abandoned.get() {
                        return Ok(None);
                    }
                }
                None => return Ok(None),
            }
        }
    }
}

/// Writes one SearchResultEntry with the selected stored and computed
/// attributes the requester may read.
fn write_entry(
    out: &mut BytesMut,
    msgid: i32,
    view: &EntryView<'_>,
    n_children: u64,
    sel: &Selection,
    readable: &impl Fn(&str) -> bool,
    context_csn: Option<&[Vec<u8>]>,
) {
    let mut attrs: Vec<OutAttr<'_, Vals<'_>>> = view
        .attrs()
        .filter(|a| sel.wants(a.name) && readable(a.name))
        .map(|a| OutAttr { name: a.name, vals: a.vals() })
        .collect();
    let mut computed = computed_attrs(view.dn(), n_children, sel);
    computed.retain(|(name, _)| readable(name));
    for (name, buf) in &computed {
        attrs.push(OutAttr { name, vals: Vals::from_encoded(buf, 1) });
    }
    let mut csns = Vec::new();
    if let Some(values) = context_csn.filter(|v| !v.is_empty() && readable("contextCSN")) {
        let slices: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
        encode_vals(&slices, &mut csns);
        attrs.push(OutAttr { name: "contextCSN", vals: Vals::from_encoded(&csns, values.len() as u32) });
    }
    let matched;
    if !sel.values.is_empty() {
        matched = matched_values(&sel.values, &attrs);
        attrs = matched.iter().map(|(name, buf, n)| OutAttr { name, vals: Vals::from_encoded(buf, *n) }).collect();
    }
    ber::search_entry(out, msgid, view.dn(), &attrs, sel.types_only);
}

/// What Matched Values (RFC 3876) leaves of the attributes: the values
/// some item matches, encoded; as slapd, an attribute no item names (or
/// whose items are Undefined) is left out.
fn matched_values<'v>(items: &[filter::Node], attrs: &[OutAttr<'v, Vals<'v>>]) -> Vec<(&'v str, Vec<u8>, u32)> {
    let mut out = Vec::new();
    for a in attrs {
        let kept: Vec<&[u8]> =
            a.vals.clone().filter(|v| items.iter().any(|i| i.value_matches(a.name, v) == Some(true))).collect();
        if !kept.is_empty() {
            let mut buf = Vec::new();
            encode_vals(&kept, &mut buf);
            out.push((a.name, buf, kept.len() as u32));
        }
    }
    out
}

/// Operational attributes computed at read time, when selected.
fn computed_attrs(dn: &str, n_children: u64, sel: &Selection) -> Vec<(&'static str, Vec<u8>)> {
    let mut res = Vec::new();
    let mut add = |name: &'static str, value: &[u8]| {
        if sel.wants_computed(name) {
            let mut buf = Vec::with_capacity(value.len() + 4);
            encode_vals(&[value], &mut buf);
            res.push((name, buf));
        }
    };
    add("hasSubordinates", if n_children > 0 { b"TRUE" } else { b"FALSE" });
    if sel.wants_computed("numSubordinates") {
        add("numSubordinates", n_children.to_string().as_bytes());
    }
    add("entryDN", dn.as_bytes());
    add("subschemaSubentry", subschema::DN.as_bytes());
    res
}

/// Writes an entry the server computes (root DSE, `cn=Subschema`) when it
/// matches: only `objectClass` and other user attributes for `*`.
/// Returns whether it was written. `tests` bounds the filter on it
/// (`limits.max_filter_tests`; 0 for the root DN): `cn=Subschema` holds
/// thousands of values, open to anyone.
fn write_computed(
    out: &mut BytesMut,
    msgid: i32,
    entry: &Entry,
    filter: &filter::Node,
    sel: &Selection,
    tests: u64,
) -> Result<bool> {
    let mut bytes = Vec::new();
    if entry.encode(&mut bytes).is_err() {
        return Ok(false);
    }
    let view = EntryView::new(&bytes).expect("encoded just now");
    if filter.eval_bounded(&view, &|_| true, tests)? != Some(true) {
        return Ok(false);
    }
    let attrs: Vec<_> =
        view.attrs().filter(|a| sel.wants(a.name)).map(|a| OutAttr { name: a.name, vals: a.vals() }).collect();
    ber::search_entry(out, msgid, entry.dn.as_str(), &attrs, sel.types_only);
    Ok(true)
}
