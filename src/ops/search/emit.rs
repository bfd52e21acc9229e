//! One search's output: each candidate read, checked against the scope,
//! the access rules and the filter, and written into the response buffer
//! (`Emit`), store by store from an index's candidates or a `dn2id` range,
//! in chunks; then the continuation references.

use super::*;
use shards::subtree::{next_chunk, Row, Step};

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
    matches_under(plan, filter, target, view, tests, true)
}

/// Whether `filter` matches under the requester's `search` rights on each
/// attribute it names, whatever the rights on the entry: the Assertion
/// control, which slapd tests attribute by attribute (an operation on an
/// entry the requester may not know of then answers as for a missing one).
pub fn searchable_match(
    plan: &ReadPlan<'_>,
    filter: &filter::Node,
    target: &Target,
    view: &EntryView<'_>,
    tests: u64,
) -> Result<bool> {
    matches_under(Some(plan), filter, target, view, tests, false)
}

fn matches_under(
    plan: Option<&ReadPlan<'_>>,
    filter: &filter::Node,
    target: &Target,
    view: &EntryView<'_>,
    tests: u64,
    entry_gate: bool,
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
    if entry_gate && !plan.entry_readable(target) {
        return Ok(false);
    }
    Ok(filter.eval_bounded(view, &|names| plan.can_search(target, names), tests)? == Some(true))
}

/// The state of one search's output: the filter, the selection, the limits
/// and what has been written so far.
pub(super) struct Emit<'a> {
    pub(super) msgid: i32,
    pub(super) filter: &'a filter::Node,
    pub(super) sel: &'a Selection<'a>,
    /// Access control for the requester (`None` for the root DN).
    pub(super) plan: Option<&'a ReadPlan<'a>>,
    pub(super) limits: Limits,
    pub(super) out: &'a mut BytesMut,
    /// Room taken in the connection's queue for what `out` holds: taken
    /// before each entry is encoded (`Visit::Full` when there is none).
    pub(super) room: &'a Reservation<'a>,
    pub(super) sent: usize,
    /// Entries examined without an index.
    pub(super) examined: usize,
    /// `examined` when the last entry was sent: what a page's cookie
    /// counts, as the next page examines again what lies after that entry.
    pub(super) examined_to_sent: usize,
    /// Entries the current page still takes (paged results).
    pub(super) page_left: Option<usize>,
    /// Collects entries instead of writing them (server-side sort).
    pub(super) sorter: Option<Sorter>,
    /// The suffixes' keys and their contextCSN values, when asked for.
    pub(super) context_csn: Option<ContextCsns>,
    /// The filter's hasSubordinates items (`Node::subordinate_items`):
    /// each entry's child count answers them.
    pub(super) subordinates: Vec<(usize, [bool; 2])>,
    /// Referral objects are references, not entries (`ops::referral`):
    /// some may exist and ManageDsaIT is absent.
    pub(super) referrals: bool,
    /// Aliases are passed over, but for the one with this key (`ops::alias`).
    pub(super) hide_aliases: Option<Vec<u8>>,
    /// What aliases added to a search's scope (`alias::scopes`): a subtree
    /// search's roots, whose continuation references are those below each
    /// (and the root's own, when a referral object); a one-level search's
    /// targets (each its own reference, when a referral object).
    pub(super) roots: Option<Vec<Vec<u8>>>,
    /// Ends the search when a subtree rename overtakes it (`ops::carries`).
    pub(super) reading: Option<&'a Reading<'a>>,
    /// Where the walk is: `None` at the base, else the store and whether
    /// its candidates come from an index (for `last`).
    pub(super) walking: Option<(usize, bool)>,
    /// The connection's turn to run slices (`flush`), once it has had one.
    pub(super) turn: Option<glommio::sync::StaticPermit>,
    /// Paged: the position after the last entry sent. As slapd, a page
    /// ends only when a further entry matches, so a result that fills its
    /// last page exactly ends there, without an empty page after it.
    pub(super) last: Option<Position>,
}

/// About what an entry takes once encoded for this selection: the whole
/// record for an ordinary entry (cheap), the selected attributes only for
/// a big one (a group's `cn` must not wait for room for its members).
fn encoded_estimate(view: &EntryView<'_>, sel: &Selection) -> usize {
    // The DN, twice with entryDN, and the computed attributes' room.
    let dn = 2 * view.dn().len();
    if view.size() <= 16 << 10 {
        return view.size() + dn;
    }
    let attrs = view.attrs().filter(|a| sel.wants(a.name));
    dn + attrs.map(|a| a.name.len() + 16 + if sel.types_only { 0 } else { a.encoded_len() }).sum::<usize>()
}

/// What the requester may read in one entry (`plan` is `None` for the root DN).
struct EntryReadable<'p, 'a, 't, 'v> {
    plan: Option<&'p ReadPlan<'a>>,
    target: &'t Target<'t, 'v>,
}

impl select::Readable for EntryReadable<'_, '_, '_, '_> {
    fn rules(&self) -> u64 {
        self.plan.map_or(select::ROOT_RULES, |p| p.access.acl().id)
    }

    fn class(&self, stored: &str) -> u64 {
        self.plan.map_or(0, |p| p.class(stored))
    }

    fn allows(&self, class: u64) -> bool {
        self.plan.is_none_or(|p| p.allows_class(self.target, class, Level::Read))
    }
}

/// What visiting one candidate decided.
pub(super) enum Visit {
    Next,
    Stop(LdapResultCode),
    /// The entry just written filled the page.
    PageFull,
    /// No room in the connection's queue for this entry (KiB): nothing was
    /// written; send what is buffered, wait for the room, visit it again.
    Full(u64),
}

/// Why a walk over one store stopped early.
pub(super) enum Stop {
    Code(LdapResultCode),
    /// The page is full and another entry matches: the next page starts
    /// after the last entry sent (`Emit::last`).
    Page,
}

/// The suffixes' keys, each with the contextCSN values it shows.
pub(super) type ContextCsns = Vec<(Vec<u8>, Vec<Vec<u8>>)>;

/// The contextCSN values of the entry with this key, if it is a suffix.
pub(super) fn context<'v>(context_csn: &'v Option<ContextCsns>, key: &[u8]) -> Option<&'v [Vec<u8>]> {
    context_csn.as_ref()?.iter().find(|(k, _)| k == key).map(|(_, values)| values.as_slice())
}

impl Emit<'_> {
    /// Checks the base entry and writes it when it matches: its equality
    /// filter the index may decide (`index::decides`, or from `candidates`,
    /// its store's, when the walk read them; a scan's entries are
    /// evaluated); `read`: the entry when the caller has read it already.
    pub(super) fn visit_base<T: ReadTxn>(
        &mut self,
        txn: &T,
        key: &[u8],
        id: &[u8],
        candidates: Option<&[index::Candidate]>,
        read: Option<&EntryView<'_>>,
    ) -> Result<Visit> {
        let known = match candidates.and_then(|c| index::decides_among(txn, self.filter, c, id)) {
            Some(known) => Some(known),
            None => index::decides(txn, self.filter, id)?,
        };
        if known == Some(false) {
            return Ok(Visit::Next);
        }
        if let Some(view) = read {
            return self.visit_view(txn, key, id, view, known);
        }
        let Some(view) = txn.entry_by_id(id)? else { return Ok(Visit::Next) };
        self.visit_view(txn, key, id, &view, known)
    }

    /// Checks one entry of a scan and writes it when it matches.
    pub(super) fn visit<T: ReadTxn>(&mut self, txn: &T, key: &[u8], id: &[u8]) -> Result<Visit> {
        let Some(view) = txn.entry_by_id(id)? else { return Ok(Visit::Next) };
        self.visit_view(txn, key, id, &view, None)
    }

    /// Checks one entry already read and writes it when it matches;
    /// `matched` when the index has decided the filter (`index::decides`).
    pub(super) fn visit_view<T: ReadTxn>(
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
        let readable = EntryReadable { plan, target: &target };
        let csns = context(&self.context_csn, key);
        match &mut self.sorter {
            Some(sorter) => {
                let mut buf = BytesMut::new();
                write_entry(&mut buf, self.msgid, view, n_children, self.sel, &readable, csns)?;
                sorter.push(view, buf, &|names| plan.is_none_or(|p| p.can_search(&target, names)))?;
            }
            None => {
                let kib = self.room.kib_of(encoded_estimate(view, self.sel));
                if !self.room.try_take(kib) {
                    return Ok(Visit::Full(kib));
                }
                write_entry(self.out, self.msgid, view, n_children, self.sel, &readable, csns)?
            }
        }
        self.sent += 1;
        self.examined_to_sent = self.examined;
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
    pub(super) async fn flush(&mut self) {
        self.room.send(std::mem::take(self.out)).await;
        // glommio runs a spawned task at once until it first waits;
        // yielding here lets the connection read further requests (an
        // Abandon among them) and other connections run between chunks.
        futures_lite::future::yield_now().await;
        // One long search of a connection in the shard's run queue at a
        // time: the turn is held through the yield and handed to the
        // next search of the connection that waits for it. Each search
        // in the queue runs a slice before a request that just arrived
        // is read: 10 pipelined searches of one client added 47 ms to
        // every other client's request (50: 230 ms). A search's first
        // slice, run as its request is read, takes no turn. glommio's
        // semaphore wakes a waiter without keeping the unit for it: this
        // search yields once more after giving the turn up, so that the
        // waiter woken, now ahead of it in the run queue, takes it.
        if self.turn.take().is_some() {
            futures_lite::future::yield_now().await;
        }
        self.turn = self.room.next_turn().await;
    }

    /// Walks the candidates an index lookup gave, in chunks.
    pub(super) async fn walk_index(
        &mut self,
        store: StoreRef<'_>,
        scope: &Scope,
        candidates: &[index::Candidate],
        abandoned: &crate::ops::abandon::Abandoned,
    ) -> Result<Option<Stop>> {
        let mut at = 0;
        let mut need = None;
        while at < candidates.len() {
            // After a chunk, or before the first candidate when it found
            // no room (else it would be visited again at once, for ever).
            if at > 0 || need.is_some() {
                self.flush().await;
                if let Some(kib) = need.take() {
                    self.room.wait_for(kib).await;
                }
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
                    // Read again once there is room (`at` is past it now).
                    Visit::Full(kib) => {
                        at -= 1;
                        need = Some(kib);
                        break;
                    }
                }
            }
        }
        Ok(None)
    }

    /// Walks the `dn2id` ranges of the scope in every store at once (after
    /// `after`, when resuming a page), merged into one key order: keys are
    /// root-first, so every entry comes after its parent whichever store
    /// holds each (slapd sends entries in id order, parents first, and
    /// `ldapsearch ... | ldapadd` relies on it). `only`: one store's, after
    /// others walked by their indexes (which keep that order per store).
    pub(super) async fn walk_range(
        &mut self,
        stores: &Stores,
        only: Option<usize>,
        scope: &Scope,
        after: Option<Vec<u8>>,
        abandoned: &crate::ops::abandon::Abandoned,
    ) -> Result<Option<Stop>> {
        // Aliases may make thousands of small ranges: the reactor is
        // yielded between them too, once a slice is spent.
        let mut slice_end = Instant::now() + SLICE;
        for part in &scope.parts {
            if after.as_deref().is_some_and(|a| part.before(a)) {
                continue;
            }
            let within = after.clone().filter(|a| a.as_slice() >= part.start());
            if let Some(stop) = self.walk_part(stores, only, part, scope.except.as_deref(), within, abandoned).await? {
                return Ok(Some(stop));
            }
            if Instant::now() >= slice_end {
                if self.limits.deadline.is_some_and(|d| Instant::now() >= d) {
                    return Ok(Some(Stop::Code(LdapResultCode::TimeLimitExceeded)));
                }
                self.flush().await;
                slice_end = Instant::now() + SLICE;
            }
            if abandoned.get() {
                return Ok(None);
            }
        }
        Ok(None)
    }

    /// Walks one range of the scope in every store (or `only` the one),
    /// merged, in chunks.
    pub(super) async fn walk_part(
        &mut self,
        stores: &Stores,
        only: Option<usize>,
        part: &Part,
        except: Option<&[u8]>,
        after: Option<Vec<u8>>,
        abandoned: &crate::ops::abandon::Abandoned,
    ) -> Result<Option<Stop>> {
        // Where the next chunk starts (this key included).
        let mut from = after.clone().unwrap_or_else(|| part.start().to_vec());
        loop {
            let mut resume = None;
            let mut need = None;
            let mut outcome = Ok(Visit::Next);
            {
                let txns = match only {
                    Some(i) => vec![stores.read(i)?],
                    None => stores.snapshot()?,
                };
                let (keys, horizon) = merged_keys(&txns, part, &from)?;
                let slice_end = Instant::now() + SLICE;
                for (scanned, (key, id, store)) in keys.iter().enumerate() {
                    if scanned > 0 && (self.out.len() >= CHUNK_BYTES || Instant::now() >= slice_end) {
                        resume = Some(key.clone());
                        break;
                    }
                    if !part.contains(key) || after.as_deref() == Some(key) || except == Some(key) {
                        continue;
                    }
                    self.examined += 1;
                    if self.examined > self.limits.lookthrough && self.page_left == Some(0) {
                        // Looking past a full page for one more match: the
                        // page ends here, and the next one (its cookie
                        // carries the count) is refused at once.
                        outcome = Ok(Visit::PageFull);
                        break;
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
                        break;
                    }
                    outcome = self.visit(&txns[*store], key, id);
                    if let Ok(Visit::Full(kib)) = outcome {
                        // This key again, once there is room for it; it
                        // is examined then.
                        (resume, need) = (Some(key.clone()), Some(kib));
                        self.examined -= 1;
                    }
                    if !matches!(outcome, Ok(Visit::Next)) {
                        break;
                    }
                }
                // Every key read was visited: the next chunk starts past
                // the last one that was sure to be in order.
                if resume.is_none() && matches!(outcome, Ok(Visit::Next)) {
                    resume = horizon.map(|mut h| {
                        h.push(0);
                        h
                    });
                }
            }
            match outcome? {
                Visit::Next | Visit::Full(_) => {}
                Visit::Stop(code) => return Ok(Some(Stop::Code(code))),
                Visit::PageFull => return Ok(Some(Stop::Page)),
            }
            match resume {
                Some(key) => {
                    from = key;
                    self.flush().await;
                    if let Some(kib) = need {
                        self.room.wait_for(kib).await;
                    }
                    if abandoned.get() {
                        return Ok(None);
                    }
                }
                None => return Ok(None),
            }
        }
    }
}

/// The keys of `part` from `from` on in every store, in one key order,
/// a chunk's worth of each store (`shards::subtree::next_chunk`).
fn merged_keys<T: ReadTxn>(txns: &[T], part: &Part, from: &[u8]) -> Result<(Vec<Row>, Option<Vec<u8>>)> {
    let prefix = part.start();
    // A lone key's range is that key alone.
    let one = matches!(part, Part::Key(_));
    let each = (CHUNK_SCANNED / txns.len()).max(64);
    next_chunk(txns, prefix, from, (each, each), &mut |key| match one && key != prefix {
        true => Step::End,
        false => Step::Take,
    })
}

impl Emit<'_> {
    /// The continuation references of a one-level or subtree search,
    /// after its last entry: one per referral object in its scope the
    /// requester may read (`entry` and `ref`, as slapd checks before
    /// sending one), found with a prefix scan of the referral keys below
    /// the base (`index::Marked::below`), in chunks like the walk: each
    /// chunk sent, the reactor yielded, the time limit and Abandon checked.
    pub(super) async fn references(
        &mut self,
        conn: &Conn,
        req: &LdapSearchRequest,
        base_key: &[u8],
        abandoned: &crate::ops::abandon::Abandoned,
    ) -> Result<()> {
        if !self.referrals || req.scope == LdapSearchScope::Base {
            return Ok(());
        }
        let one_level = req.scope == LdapSearchScope::OneLevel;
        let roots = self.roots.take().unwrap_or_default();
        // An alias target that is a referral object: its own reference.
        for (i, root) in roots.iter().filter(|r| r.as_slice() != base_key).enumerate() {
            if i % REFERENCE_CHUNK == REFERENCE_CHUNK - 1 {
                self.flush().await;
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
                self.flush().await;
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
                self.flush().await;
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
pub(super) const REFERENCE_CHUNK: usize = 256;
