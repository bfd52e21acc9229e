//! Aliases (RFC 4512 §2.6; RFC 4511 §4.5.1.3 `derefAliases`), as slapd's
//! back-mdb dereferences them. An entry of class `alias` names another in
//! its `aliasedObjectName`.
//!
//! - **Finding the base** (derefFindingBaseObj, derefAlways): a base that
//!   is an alias, or lies below one, is replaced by the alias's target,
//!   following chains. A chain that loops, or whose last alias names no
//!   entry, is aliasProblem (33) with the alias where it broke as
//!   matchedDN; one longer than `MAX_DEPTH` is aliasDereferencingProblem
//!   (36).
//! - **Searching** (derefInSearching, derefAlways): the aliases in a
//!   one-level or subtree scope are dereferenced and their targets become
//!   further scopes: a subtree search covers each target's subtree (and
//!   the aliases found there, in turn), a one-level search the targets
//!   themselves. Aliases are then not returned (but for a base that was
//!   not dereferenced), and aliases that cannot be dereferenced are
//!   passed over in silence. Each entry is returned once.
//! - An entry cannot be added or moved below an alias (33).
//!
//! Other operations never dereference. None of it costs a lookup until a
//! store has held an alias (`shards::index::Marked::may_exist`).

use crate::conn::{Conn, Identity};
use crate::ops::{disclosed, nearest_entry};
use ldap3_proto::proto::{LdapDerefAliases, LdapSearchScope};
use ldap3_proto::LdapResultCode;
use shards::dn::{key_below, Dn};
use shards::entry::EntryView;
use shards::index::Marked;
use shards::ReadTxn;
use shards::{Error, Result, Shard};
use std::collections::HashSet;
use std::time::Instant;

/// Longest chain of aliases followed (slapd's default `maxDerefDepth`).
const MAX_DEPTH: usize = 15;

/// Aliases read from the index at a time, between yields to the reactor.
const CHUNK: usize = 256;

/// Whether any alias may exist (else every check is skipped).
pub fn active() -> bool {
    Marked::Alias.may_exist()
}

pub fn is_alias(view: &EntryView<'_>) -> bool {
    Marked::Alias.marks(view)
}

/// Whether a search dereferences its base.
pub fn finds(deref: &LdapDerefAliases) -> bool {
    matches!(deref, LdapDerefAliases::FindingBaseObj | LdapDerefAliases::Always)
}

/// Whether a search dereferences the aliases in its scope.
pub fn searches(deref: &LdapDerefAliases) -> bool {
    matches!(deref, LdapDerefAliases::InSearching | LdapDerefAliases::Always)
}

/// `aliasProblem` (33).
fn problem(text: &str) -> Error {
    Error::new(LdapResultCode::AliasProblem, text)
}

/// An alias as read: its DN as stored and what it names.
struct Alias {
    key: Vec<u8>,
    dn: String,
    target: Result<Dn>,
}

/// What a DN key holds.
enum Found {
    Entry,
    Alias(Alias),
}

fn read(shard: &Shard, key: &[u8]) -> Result<Option<Found>> {
    shard.with_entry(key, |view| match is_alias(view) {
        false => Found::Entry,
        true => Found::Alias(Alias { key: key.to_vec(), dn: view.dn().to_string(), target: target_of(view) }),
    })
}

/// The one `aliasedObjectName` of an alias.
fn target_of(view: &EntryView<'_>) -> Result<Dn> {
    let attr = view.get("aliasedObjectName").ok_or_else(|| problem("alias missing aliasedObjectName"))?;
    let mut vals = attr.vals();
    let (Some(value), None) = (vals.next(), vals.next()) else {
        return Err(problem("alias has multivalued aliasedObjectName"));
    };
    let text = std::str::from_utf8(value).map_err(|_| problem("alias aliasedObjectName value is invalid"))?;
    Dn::parse(text).map_err(|_| problem("alias aliasedObjectName value is invalid"))
}

/// Why a chain of aliases led nowhere: the error, and the alias where it
/// broke (its DN as stored, the matchedDN).
struct Broken {
    error: Error,
    at: Alias,
}

/// Follows a chain of aliases from `alias` to the entry it ends at, as
/// slapd's `deref_base`. `passed` holds the aliases this search has gone
/// through already (searching): meeting one again ends the chain.
fn deref(
    shard: &Shard,
    mut alias: Alias,
    passed: Option<&mut HashSet<Vec<u8>>>,
) -> Result<std::result::Result<Dn, Broken>> {
    let mut chain: Vec<Vec<u8>> = Vec::new();
    let mut passed = passed;
    loop {
        if chain.len() >= MAX_DEPTH {
            let error = Error::new(LdapResultCode::AliasDereferencingProblem, "maximum deref depth exceeded");
            return Ok(Err(Broken { error, at: alias }));
        }
        if let Some(p) = passed.as_deref_mut() {
            if !p.insert(alias.key.clone()) {
                return Ok(Err(Broken { error: problem("alias seen before"), at: alias }));
            }
        }
        if chain.contains(&alias.key) {
            return Ok(Err(Broken { error: problem("circular alias"), at: alias }));
        }
        chain.push(alias.key.clone());
        let target = match &alias.target {
            Ok(t) => t.clone(),
            Err(e) => return Ok(Err(Broken { error: e.clone(), at: alias })),
        };
        match read(shard, &target.key())? {
            None => return Ok(Err(Broken { error: problem("aliasedObject not found"), at: alias })),
            Some(Found::Entry) => return Ok(Ok(target)),
            Some(Found::Alias(next)) => alias = next,
        }
    }
}

/// The entry a search that dereferences when finding starts from: `base`
/// itself, or the target of the alias it is or lies below. Where the
/// chain breaks, the error names the alias as matchedDN when the
/// requester may know of it (else noSuchObject, as slapd).
pub fn find_base(conn: &Conn, identity: &Identity, base: Dn) -> Result<Dn> {
    let shard = &conn.ctx.shard;
    let mut dn = base;
    for _ in 0..=MAX_DEPTH {
        let broken = match read(shard, &dn.key())? {
            Some(Found::Entry) => return Ok(dn),
            Some(Found::Alias(alias)) => match deref(shard, alias, None)? {
                Ok(target) => return Ok(target),
                Err(b) => b,
            },
            None => {
                // An alias above the base: the rest of the DN goes below its target.
                let Some(above) = nearest_entry(&conn.ctx, &dn) else { return Ok(dn) };
                let Some(Found::Alias(alias)) = read(shard, &above.key())? else { return Ok(dn) };
                match deref(shard, alias, None)? {
                    Ok(target) => {
                        dn = shards::renames::moved_dn(&dn, &above, &target);
                        continue;
                    }
                    Err(b) => b,
                }
            }
        };
        return Err(match disclosed(conn, identity, &broken.at.key) {
            true => broken.error.with_matched(broken.at.dn),
            false => Error::no_such_object(""),
        });
    }
    Err(Error::new(LdapResultCode::AliasDereferencingProblem, "maximum deref depth exceeded"))
}

/// The further scopes a one-level or subtree search dereferencing in
/// searching reaches from `base_key` (see the module text): for a subtree
/// search, the roots of the subtrees to walk, none within another (the
/// base among them unless a target holds it); for a one-level search, the
/// targets to return besides the base's children. `None` when no alias
/// is in scope: the search runs as without dereferencing.
pub async fn scopes(
    conn: &Conn,
    base_key: &[u8],
    scope: &LdapSearchScope,
    deadline: Option<Instant>,
    most: usize,
    abandoned: &crate::ops::abandon::Abandoned,
) -> Result<Option<Vec<Vec<u8>>>> {
    let shard = &conn.ctx.shard;
    let subtree = *scope != LdapSearchScope::OneLevel;
    let depth = shards::dn::key_depth(base_key) + 1;
    let mut passed = HashSet::new();
    let mut roots: HashSet<Vec<u8>> = HashSet::from([base_key.to_vec()]);
    let mut targets: HashSet<Vec<u8>> = HashSet::new();
    let mut pending = vec![base_key.to_vec()];
    let mut seen = 0usize;
    while let Some(root) = pending.pop() {
        for store in shard.stores.iter() {
            let mut after = None;
            loop {
                let found = {
                    let txn = store.read()?;
                    let found = Marked::Alias.below(&txn, &root, after.as_deref(), CHUNK)?;
                    let mut aliases = Vec::with_capacity(found.len());
                    for (_, id) in &found {
                        let Some(view) = txn.entry_by_id(id)? else { continue };
                        let Ok(key) = shards::dn::key_of(view.dn()) else { continue };
                        // Not the base: an alias there was dereferenced when
                        // finding, or (searching only) is returned as it is.
                        let in_scope = key_below(&key, &root) && (subtree || shards::dn::key_depth(&key) == depth);
                        if in_scope && is_alias(&view) {
                            aliases.push(Alias { key, dn: view.dn().to_string(), target: target_of(&view) });
                        }
                    }
                    after = found.last().map(|(k, _)| k.clone());
                    (found.len(), aliases)
                };
                for alias in found.1 {
                    seen += 1;
                    if most > 0 && seen > most {
                        return Err(Error::new(
                            LdapResultCode::AdminLimitExceeded,
                            format!("the search would dereference more than {most} aliases (limits.max_alias_scopes)"),
                        ));
                    }
                    // One that cannot be dereferenced is passed over, as slapd does.
                    let Ok(target) = deref(shard, alias, Some(&mut passed))? else { continue };
                    let key = target.key();
                    if subtree {
                        // Held by a root when the root is the key or one of
                        // its ancestors: a lookup per RDN, not per root.
                        let held = std::iter::once(key.as_slice())
                            .chain(shards::dn::key_ancestors(&key))
                            .any(|k| roots.contains(k));
                        if !held {
                            roots.insert(key.clone());
                            pending.push(key);
                        }
                    } else {
                        // As slapd: the base and its children are in scope already.
                        let child = key_below(&key, base_key) && shards::dn::key_depth(&key) == depth;
                        if key != base_key && !child {
                            targets.insert(key);
                        }
                    }
                }
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return Err(Error::new(LdapResultCode::TimeLimitExceeded, ""));
                }
                if abandoned.get() {
                    // Nothing is sent for an abandoned search.
                    return Err(Error::new(LdapResultCode::Canceled, "abandoned"));
                }
                if found.0 < CHUNK {
                    break;
                }
                futures_lite::future::yield_now().await;
            }
        }
    }
    if subtree {
        if roots.len() == 1 {
            return Ok(None);
        }
        // A root added later may hold one added before it: sorted, a root
        // follows the one holding it, with only roots below that between.
        let mut roots: Vec<Vec<u8>> = roots.into_iter().collect();
        roots.sort();
        let mut minimal: Vec<Vec<u8>> = Vec::with_capacity(roots.len());
        for r in roots {
            if !minimal.last().is_some_and(|held_by| key_below(&r, held_by)) {
                minimal.push(r);
            }
        }
        return Ok(Some(minimal));
    }
    Ok((!targets.is_empty()).then(|| {
        let mut targets: Vec<Vec<u8>> = targets.into_iter().collect();
        targets.sort();
        targets
    }))
}

/// `aliasProblem` for an entry added or moved below `parent` when it is
/// an alias (slapd: "parent is an alias").
pub fn check_parent(shard: &Shard, parent_key: &[u8], text: &'static str) -> Result<()> {
    if !active() {
        return Ok(());
    }
    match read(shard, parent_key)? {
        Some(Found::Alias(_)) => Err(problem(text)),
        _ => Ok(()),
    }
}
