//! Referral objects (RFC 3296; RFC 4511 §4.1.10 and §4.5.3), as slapd's
//! back-mdb serves them. An entry of class `referral` stands for a subtree
//! another server holds; its `ref` values are LDAP URLs. Without the
//! ManageDsaIT control:
//!
//! - an operation on a referral object gets referral (10) with its URLs
//!   and the object's DN as matchedDN; a search's URLs carry its scope;
//! - an operation on a DN below one gets the same, each URL's DN replaced
//!   by the target's RDNs below the object put above the URL's DN; so does
//!   an add below one, and these even with ManageDsaIT, as slapd;
//! - a one-level or subtree search sends a continuation reference for
//!   each referral object in its scope other than its base, whatever the
//!   filter, in place of the entry, once the entries are sent.
//!
//! URLs are rewritten as slapd's libldap reads and writes them (`url`):
//! one it cannot parse is left out, and a referral with none left is
//! noSuchObject, a reference with none is not sent.
//!
//! None of it costs a lookup until a store has held a referral object
//! (`shards::index::Marked::may_exist`).

mod url;

use crate::conn::{Conn, Identity};
use ldap3_proto::LdapResultCode;
use shards::dn::Dn;
use shards::entry::EntryView;
use shards::{Error, Result};
use url::UrlDn;

/// Whether any referral object may exist (else every check is skipped).
pub fn active() -> bool {
    shards::index::Marked::Referral.may_exist()
}

pub fn is_referral(view: &EntryView<'_>) -> bool {
    shards::index::Marked::Referral.marks(view)
}

/// The object's `ref` URLs, as stored.
fn urls(view: &EntryView<'_>) -> Vec<String> {
    view.get("ref").map(|a| a.vals().map(|v| String::from_utf8_lossy(v).into_owned()).collect()).unwrap_or_default()
}

/// A search scope as an LDAP URL spells it.
pub fn scope_name(scope: &ldap3_proto::proto::LdapSearchScope) -> &'static str {
    use ldap3_proto::proto::LdapSearchScope::*;
    match scope {
        Base => "base",
        OneLevel => "one",
        Subtree => "sub",
        // libldap's name for it, as slapd writes it into a referral.
        Children => "subordinate",
    }
}

/// A `ref` value pointed at `target`, which lies at or below the
/// referral object `at`, as slapd rewrites it: libldap parses the URL
/// (`url`), its DN gets the target's RDNs below `at` in front (the target
/// itself where the URL names no DN), a search's `scope` where it names
/// none, and libldap writes it again. `None` for a URL slapd leaves out
/// (one libldap cannot parse); one of another scheme stays as it is.
fn rewrite(value: &str, target: &Dn, at: &Dn, scope: Option<&str>) -> Option<String> {
    let text = url::of_ref_value(value)?;
    let mut u = match url::parse(text) {
        url::Parsed::Url(u) => u,
        url::Parsed::Other | url::Parsed::Kept => return Some(text.to_string()),
        url::Parsed::Bad => return None,
    };
    let pretty = |dn: &Dn| dn.pretty().unwrap_or_else(|_| dn.to_string_form());
    u.dn = match std::mem::replace(&mut u.dn, UrlDn::Absent) {
        UrlDn::Invalid => UrlDn::Invalid,
        UrlDn::Absent => UrlDn::Dn(pretty(target)),
        UrlDn::Dn(text) => match Dn::parse(&text).and_then(|d| d.pretty()) {
            Err(_) => UrlDn::Invalid,
            Ok(named) => UrlDn::Dn(mucked(&named, target, at).unwrap_or_else(|| pretty(target))),
        },
    };
    if u.scope.is_none() {
        u.scope = scope.map(str::to_string);
    }
    Some(u.render())
}

/// The URL's DN `named` (pretty) with the target's RDNs below `at` (the
/// object's DN as stored) in front, as slapd's `referral_dn_muck` puts
/// them: the pretty target's text before a tail that equals the object's
/// pretty DN but for ASCII case. `None` where slapd names the whole
/// target instead: a DN that is empty or the object's own, or a target
/// whose tail differs (spelled otherwise, with other insignificant
/// spaces or another case of a letter beyond ASCII, or reached through
/// an alias).
fn mucked(named: &str, target: &Dn, at: &Dn) -> Option<String> {
    let (target, base) = (target.pretty().ok()?, at.pretty().ok()?);
    if named.is_empty() || named == base {
        return None;
    }
    let cut = target.len().checked_sub(base.len())?;
    let tail = target.get(cut..)?;
    tail.eq_ignore_ascii_case(&base).then(|| format!("{}{named}", &target[..cut]))
}

/// The referral (10) for an operation on `target`, at or below the
/// referral object `at` (`view`).
/// With no URL left, noSuchObject, as slapd answers a referral without one.
/// An operation other than a search on the object itself gets the URLs
/// as stored, as slapd's back-mdb answers it (it rewrites them only for a
/// search or a target below).
fn referral(view: &EntryView<'_>, target: &Dn, at: &Dn, scope: Option<&str>) -> Error {
    let urls: Vec<String> = match scope.is_none() && target == at {
        true => urls(view).iter().filter_map(|u| url::of_ref_value(u)).map(str::to_string).collect(),
        false => {
            // slapd compares texts: the object's DN as stored, not as named.
            let stored = Dn::parse(view.dn()).unwrap_or_else(|_| at.clone());
            urls(view).iter().filter_map(|u| rewrite(u, target, &stored, scope)).collect()
        }
    };
    let e = match urls.is_empty() {
        true => Error::no_such_object(&target.to_string_form()),
        false => Error::new(LdapResultCode::Referral, "referral"),
    };
    let mut e = e.with_matched(view.dn().to_string());
    e.referral = urls;
    e
}

/// Refuses an operation (without ManageDsaIT) on an existing referral
/// object; `scope` for a search.
pub fn check_entry(view: &EntryView<'_>, dn: &Dn, scope: Option<&str>) -> Result<()> {
    check_entry_for(view, dn, dn, scope)
}

/// `check_entry` for the object at `at`, reached for `target` (a search
/// base that an alias led to it from).
pub fn check_entry_for(view: &EntryView<'_>, target: &Dn, at: &Dn, scope: Option<&str>) -> Result<()> {
    match active() && is_referral(view) {
        true => Err(referral(view, target, at, scope)),
        false => Ok(()),
    }
}

/// The continuation reference for the referral object `view` itself, an
/// alias's target a search reached (`??base` from a one-level search,
/// `??sub` from a subtree one, as slapd).
pub fn reference_to(view: &EntryView<'_>, one_level: bool) -> Option<Vec<String>> {
    if !is_referral(view) {
        return None;
    }
    let dn = Dn::parse(view.dn()).ok()?;
    let scope = if one_level { "base" } else { "sub" };
    let urls: Vec<String> = urls(view).iter().filter_map(|u| rewrite(u, &dn, &dn, Some(scope))).collect();
    // No URL left: no reference, as slapd sends none.
    (!urls.is_empty()).then_some(urls)
}

/// `check_entry` for an entry read here by DN (compare, modify, delete,
/// rename), when the requester may know the entry exists: else the
/// operation goes on and its access checks answer as for any entry.
pub fn check_target(conn: &Conn, identity: &Identity, dn: &Dn, manage_dsa_it: bool) -> Result<()> {
    if manage_dsa_it || !active() || dn.is_root() {
        return Ok(());
    }
    let key = dn.key();
    let refused = conn.ctx.shard.with_entry(&key, |view| check_entry(view, dn, None).err())?.flatten();
    match refused {
        Some(e) if crate::ops::disclosed(conn, identity, &key) => Err(e),
        _ => Ok(()),
    }
}

/// The referral for a missing `dn` whose nearest existing ancestor `at`
/// (one the requester may know of) is a referral object.
pub fn below(conn: &Conn, dn: &Dn, at: &Dn, scope: Option<&str>) -> Option<Error> {
    if !active() {
        return None;
    }
    let found = conn.ctx.shard.with_entry(&at.key(), |view| is_referral(view).then(|| referral(view, dn, at, scope)));
    found.ok().flatten().flatten()
}

/// Whether `dn` names a referral object, or a missing entry whose nearest
/// existing ancestor is one, that the requester may know of (a Password
/// Modify there is unwillingToPerform, as slapd's, with or without
/// ManageDsaIT). The ancestor is found by bisection (`nearest_entry`).
pub fn at_or_below(conn: &Conn, identity: &Identity, dn: &Dn) -> bool {
    if !active() {
        return false;
    }
    let referral_at = |key: &[u8]| conn.ctx.shard.with_entry(key, is_referral).ok().flatten();
    let at = match referral_at(&dn.key()) {
        Some(found) => found.then(|| dn.key()),
        None => crate::ops::nearest_entry(&conn.ctx, dn).map(|a| a.key()).filter(|k| referral_at(k) == Some(true)),
    };
    at.is_some_and(|key| crate::ops::disclosed(conn, identity, &key))
}

/// Refuses an add below a referral object (even with ManageDsaIT, as
/// slapd), and a rename under one (`other`, as slapd), when the
/// requester may know the object exists.
pub fn check_parent(conn: &Conn, identity: &Identity, dn: &Dn, parent: &Dn, renaming: bool) -> Result<()> {
    if !active() || parent.is_root() {
        return Ok(());
    }
    let key = parent.key();
    let refused = conn.ctx.shard.with_entry(&key, |view| {
        is_referral(view).then(|| match renaming {
            true => Error::other("the new superior is a referral object"),
            false => referral(view, dn, parent, None),
        })
    })?;
    match refused.flatten() {
        Some(e) if crate::ops::disclosed(conn, identity, &key) => Err(e),
        _ => Ok(()),
    }
}

/// The continuation reference for an entry a one-level or subtree search
/// below `base_key` found through `index::referrals_below`: its URLs,
/// when it is a referral object in that scope other than the base
/// (`??base` for one-level, `??sub` for subtree, as slapd).
pub fn reference(view: &EntryView<'_>, base_key: &[u8], one_level: bool) -> Option<Vec<String>> {
    let key = shards::dn::key_of(view.dn()).ok()?;
    let inside = match one_level {
        true => shards::dn::key_parent(&key) == Some(base_key),
        false => key != base_key && shards::dn::key_below(&key, base_key),
    };
    match inside {
        true => reference_to(view, one_level),
        false => None,
    }
}
