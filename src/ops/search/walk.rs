//! The walk of a one-level or subtree search: the base entry, then each
//! store's candidates (an index's, or the subtree's DN keys) in the order
//! their entries were made, in chunks that yield to the reactor, page by
//! page.

use super::emit::{Emit, Stop, Visit};
use super::scope::Scope;
use super::stopped;
use crate::acl::Target;
use crate::conn::Conn;
use crate::ops::controls::{self, Controls};
use crate::ops::paging::Position;
use crate::ops::{alias, parse_dn, referral, with_matched_in};
use ldap3_proto::proto::{LdapSearchRequest, LdapSearchScope};
use shards::entry::EntryView;
use shards::index::{self, Found};
use shards::ReadTxn;
use shards::{Error, Result};

/// Visits the base entry and the stores in order from `position`; returns
/// where a full page stopped.
pub(super) async fn walk(
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
    // The base's store and its candidates, when read with the base.
    let mut base_candidates = None;
    loop {
        if let Some(kib) = need.take() {
            emit.flush().await;
            emit.room.wait_for(kib).await;
            if abandoned.get() {
                return Ok(None);
            }
        }
        let txn = shard.read_for(base_key)?;
        // The entry is read once for an access plan that depends on the
        // entry, the Assertion and the visit; without them, the visit may
        // decide the filter from the index without reading it
        // (`index::decides`).
        let entry_needed = emit.plan.is_some_and(|p| !p.entry_fixed());
        let found = match entry_needed || ctrls.assertion.is_some() || emit.referrals {
            true => txn.entry(base_key)?.map(|(id, view)| (id, Some(view))),
            false => txn.id_of(base_key)?.map(|id| (id, None)),
        };
        let Some((id, view)) = found else {
            let scope = Some(referral::scope_name(&req.scope));
            // The text names the DN asked for: a dereferenced one may be hidden.
            let e = Error::no_such_object(&req.base);
            return Err(with_matched_in(conn, &ctrls.acting, &parse_dn(base_text)?, &parse_dn(&req.base)?, e, scope));
        };
        // A base the requester may not know of is reported as missing,
        // with no matchedDN, as slapd reports it (the search's own plan:
        // no second rights lookup per request).
        if let Some(plan) = emit.plan {
            // Read above unless the plan decides without it.
            if !plan.entry_disclosed(&Target { key: base_key, entry: view.as_ref() }) {
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
            // A subtree's walk reads the index of the base's store anyway:
            // read first, in this snapshot, it decides the base too.
            // (Once: a wait for room does not read them again.)
            if req.scope == LdapSearchScope::Subtree && base_candidates.is_none() {
                let found = index::candidates_within(&txn, emit.filter, index::MAX_STORE_KEYS)?;
                base_candidates = Some((shard.owner_of(base_key), found));
            }
            let among = match &base_candidates {
                Some((_, Found::Ids(ids))) => Some(ids.as_slice()),
                _ => None,
            };
            match emit.visit_base(&txn, base_key, id, among, view.as_ref())? {
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
    // When the walk last let other tasks run.
    let mut step = std::time::Instant::now();
    for (i, store) in shard.stores.iter().enumerate().skip(first) {
        if step.elapsed() >= super::SLICE {
            // The stores walked so far took their slice: the next lookup
            // is a step of its own.
            emit.flush().await;
            step = std::time::Instant::now();
            if abandoned.get() {
                return Ok(None);
            }
        }
        // A page that stopped in a store's range goes on there (a lookup
        // of no keys only tells an indexed filter from an unindexed one).
        let keys = match &position {
            Position::Range { store, .. } if *store == i => 0,
            _ => index::MAX_STORE_KEYS,
        };
        let found = match base_candidates.take_if(|(owner, _)| *owner == i) {
            Some((_, found)) => found,
            None => index::candidates_within(&store.read()?, emit.filter, keys)?,
        };
        if found == Found::Broad && matches!(position, Position::Index { store, .. } if store == i) {
            // Its pages walked this store's index, which now holds more
            // than a lookup reads: by range it would send them again.
            return Err(Error::new(
                ldap3_proto::LdapResultCode::UnwillingToPerform,
                "the search's index candidates grew past what one lookup reads since its previous page: \
                 start it again",
            ));
        }
        let (stop, every_store) = match found {
            Found::Ids(mut c) => {
                emit.walking = Some((i, true));
                // In the order the store made the entries, as slapd sends
                // id order: a parent before its children.
                c.sort_unstable_by_key(made);
                let after = match &position {
                    Position::Index { store, after } if *store == i => Some(*after),
                    _ => None,
                };
                let from = after.map_or(0, |a| c.partition_point(|id| made(id) <= made(&a)));
                (emit.walk_index(store, &scope, &c[from..], abandoned).await?, false)
            }
            // By range. Unindexed (in every store: that depends on the
            // filter alone), or broad from the first store: every store's
            // range in one walk, in key order (parents first), the page's
            // position a key of any of them. Broad after stores walked by
            // their indexes: this store's range alone. A broad filter is
            // indexed, for more entries than a lookup reads: walked as
            // slapd walks a range of ids, not held to the unindexed
            // lookthrough.
            found => {
                let broad = found == Found::Broad;
                if broad {
                    emit.limits.lookthrough = usize::MAX;
                }
                emit.walking = Some((i, false));
                let after = match &position {
                    Position::Range { store, after } if *store == i => Some(after.clone()),
                    _ => None,
                };
                let only = (broad && i > 0).then_some(i);
                (emit.walk_range(&shard.stores, only, &scope, after, abandoned).await?, only.is_none())
            }
        };
        match stop {
            None if every_store => return Ok(None),
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
