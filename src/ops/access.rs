//! Access control on the request path: binds the compiled rules
//! (`crate::acl`) to a connection's identity and checks what each
//! operation needs, with `insufficientAccessRights` (50) when it is missing
//! and `noSuchObject` when even the entry's existence may not be disclosed.

use crate::acl::{Access, Attr, Groups, Level, Subject, Target};
use crate::conn::{Conn, Identity};
use crate::ctx::Live;
use ldap3_proto::LdapResultCode;
use shards::dn::Dn;
use shards::entry::{Entry, EntryView};
use shards::{Error, Result, Shard};

/// Group membership read from the owners' snapshots.
impl Groups for Shard {
    fn is_member(&self, group: &[u8], class: &str, attr: &str, member: &[u8]) -> bool {
        is_member_in(group, class, attr, member, |key, f| self.with_entry(key, f))
    }
}

/// Whether `member` is listed in `attr` of the entry at `group`, which must
/// have objectClass `class`; `read` runs a closure on an entry in place.
pub fn is_member_in(
    group: &[u8],
    class: &str,
    attr: &str,
    member: &[u8],
    read: impl FnOnce(&[u8], &dyn Fn(&EntryView<'_>) -> bool) -> Result<Option<bool>>,
) -> bool {
    let check = |e: &EntryView<'_>| {
        let has = |name: &str, test: &dyn Fn(&[u8]) -> bool| {
            e.attrs().filter(|a| shards::matching::same_attr(a.name, name)).flat_map(|a| a.vals()).any(test)
        };
        has("objectClass", &|v| v.eq_ignore_ascii_case(class.as_bytes()))
            && has(attr, &|v| {
                // uniqueMember values may carry a `#'0101'B` UID suffix.
                let text = String::from_utf8_lossy(v);
                let dn = text.rsplit_once("#'").map_or(text.as_ref(), |(dn, _)| dn);
                Dn::parse(dn).is_ok_and(|d| d.key() == member)
            })
    };
    read(group, &check).ok().flatten().unwrap_or(false)
}

impl Conn {
    /// Who asks, for access decisions.
    pub fn subject<'a>(&self, id: &'a Identity) -> Subject<'a> {
        Subject { key: id.key(), tls_ssf: self.tls_ssf.get(), transport_ssf: self.transport_ssf }
    }

    /// The rules bound to `id`; `None` for the root DN, which bypasses them.
    pub fn access<'a>(&'a self, live: &'a Live, id: &'a Identity) -> Option<Access<'a>> {
        (!id.is_root()).then(|| Access::new(&live.acl, self.subject(id), &*self.ctx.shard))
    }
}

/// Fails unless `level` is granted on each of `attrs` (with the names
/// errors use) of the entry at `key`, read once from its owner's snapshot
/// for rules that look at its content.
pub fn require(access: &Access, shard: &Shard, key: &[u8], attrs: &[(Attr, &str)], level: Level) -> Result<()> {
    let first_denied = |entry: Option<&EntryView<'_>>| {
        let target = Target { key, entry };
        attrs.iter().find(|(a, _)| !access.allows(&target, *a, level)).map(|(_, name)| name.to_string())
    };
    let missing = match shard.with_entry(key, |view| first_denied(Some(view)))? {
        Some(m) => m,
        None => first_denied(None),
    };
    match missing {
        None => Ok(()),
        Some(name) => Err(denied(level, &name)),
    }
}

/// Fails unless `level` is granted on every attribute of an entry not
/// stored yet (add) and on its `entry`.
pub fn require_new(access: &Access, key: &[u8], entry: &Entry, level: Level) -> Result<()> {
    let mut bytes = Vec::new();
    entry.encode(&mut bytes)?;
    let view = EntryView::new(&bytes)?;
    let target = Target { key, entry: Some(&view) };
    if !access.allows(&target, Attr::Entry, level) {
        return Err(denied(level, "entry"));
    }
    for a in &entry.attrs {
        if !access.allows(&target, access.acl().class(&a.name), level) {
            return Err(denied(level, &a.name));
        }
    }
    Ok(())
}

/// Fails unless `level` is granted on the named attributes of an entry not
/// stored yet.
pub fn require_new_attrs(access: &Access, key: &[u8], entry: &Entry, names: &[String], level: Level) -> Result<()> {
    if names.is_empty() {
        return Ok(());
    }
    let mut bytes = Vec::new();
    entry.encode(&mut bytes)?;
    let view = EntryView::new(&bytes)?;
    let target = Target { key, entry: Some(&view) };
    match names.iter().find(|n| !access.allows(&target, access.acl().class_of_request(n), level)) {
        Some(name) => Err(denied(level, name)),
        None => Ok(()),
    }
}

/// `insufficientAccessRights`, naming what was missing.
pub fn denied(level: Level, what: &str) -> Error {
    Error::new(LdapResultCode::InsufficentAccessRights, format!("no {} access to {what}", level.name()))
}

/// Which attributes of `entry` the requester may read, in order (all for
/// the root DN), then which of `computed` (attributes computed at read
/// time, not stored): for Pre-Read and Post-Read.
pub fn readable(access: Option<&Access>, entry: &Entry, computed: &[&str]) -> Vec<bool> {
    let n = entry.attrs.len() + computed.len();
    let Some(a) = access else { return vec![true; n] };
    let mut bytes = Vec::new();
    if entry.encode(&mut bytes).is_err() {
        return vec![false; n];
    }
    let key = Dn::parse(&entry.dn).map(|d| d.key()).unwrap_or_default();
    let Ok(view) = EntryView::new(&bytes) else { return vec![false; n] };
    let target = Target { key: &key, entry: Some(&view) };
    let entry_ok = a.allows(&target, Attr::Entry, Level::Read);
    let names = entry.attrs.iter().map(|x| x.name.as_str()).chain(computed.iter().copied());
    names.map(|name| entry_ok && a.allows(&target, a.acl().class(name), Level::Read)).collect()
}
