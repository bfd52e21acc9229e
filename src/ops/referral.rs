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
//! None of it costs a lookup until a store has held a referral object
//! (`shards::index::Marked::may_exist`).

use crate::conn::{Conn, Identity};
use ldap3_proto::LdapResultCode;
use shards::dn::Dn;
use shards::entry::EntryView;
use shards::{Error, Result};

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

/// `url` pointed at `target`, which lies at or below the referral object
/// `at`: the URL's DN gets the target's RDNs below `at` in front (the
/// target itself where the URL names no DN), and a search's `scope` where
/// the URL names none. The rest (attributes, a scope given, filter,
/// extensions) stays as stored, and a URL of another scheme than LDAP's
/// is returned as it stands, as slapd rewrites them (libldap parses the
/// URL, sets its DN and a default scope, and writes it out again).
fn rewrite(url: &str, target: &Dn, at: &Dn, scope: Option<&str>) -> String {
    let scheme = url.find("://").map(|i| url[..i].to_ascii_lowercase());
    if !matches!(scheme.as_deref(), Some("ldap" | "ldaps" | "ldapi")) {
        return url.to_string();
    }
    let (head, query) = url.split_once('?').unwrap_or((url, ""));
    let start = head.find("://").map_or(0, |i| i + 3);
    let (host, dn) = match head[start..].find('/') {
        Some(i) => (&head[..start + i], &head[start + i + 1..]),
        None => (head, ""),
    };
    let dn = percent_decode(dn);
    let below = target.depth().saturating_sub(at.depth());
    // A target not below the object (a base reached through an alias):
    // the URL names the target itself, as slapd rewrites it.
    let new_dn = match (dn.is_empty() || !target.is_within(at), below) {
        (true, _) => target.pretty().unwrap_or_else(|_| target.to_string_form()),
        (false, 0) => dn,
        (false, n) => {
            let rel = target.head(n);
            format!("{},{dn}", rel.pretty().unwrap_or_else(|_| rel.to_string_form()))
        }
    };
    // attributes ? scope ? filter ? extensions, each possibly empty.
    let mut parts: Vec<&str> = query.splitn(4, '?').collect();
    parts.resize(4, "");
    if parts[1].is_empty() {
        parts[1] = scope.unwrap_or_default();
    }
    // As libldap writes a URL: up to the last part that is not empty.
    let used = parts.iter().rposition(|p| !p.is_empty()).map_or(0, |i| i + 1);
    let mut out = format!("{host}/{}", percent_encode(&new_dn));
    for part in &parts[..used] {
        out.push('?');
        out.push_str(part);
    }
    out
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (b[i], b.get(i + 1).copied().and_then(hex), b.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, ..) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Escapes what an LDAP URL's DN may not hold as is (RFC 4516 §2.1).
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The referral (10) for an operation on `target`, at or below the
/// referral object `at` (`view`).
fn referral(view: &EntryView<'_>, target: &Dn, at: &Dn, scope: Option<&str>) -> Error {
    let mut e = Error::new(LdapResultCode::Referral, "referral").with_matched(view.dn().to_string());
    e.referral = urls(view).iter().map(|u| rewrite(u, target, at, scope)).collect();
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
    Some(urls(view).iter().map(|u| rewrite(u, &dn, &dn, Some(scope))).collect())
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
