//! Request controls (RFC 4511 §4.1.11) this server implements, parsed once
//! per request, and the response controls it returns.
//!
//! - Simple Paged Results (RFC 2696), Server-Side Sort (RFC 2891), Virtual
//!   List View (`ops::vlv`, with a sort): search.
//! - Assertion (RFC 4528): search (on the base entry), compare, add (on the
//!   new entry), modify and delete (on the entry, inside the owner's
//!   transaction), modify-DN (on the entry as read before the rename).
//! - Pre-Read / Post-Read (RFC 4527): modify and delete / modify, add and
//!   modify-DN; the images come from the owner's transaction.
//! - ManageDsaIT (RFC 3296): referral objects are plain entries for the
//!   operation (`ops::referral`).
//! - Matched Values (RFC 3876): search; applied in `search::write_entry`.
//! - Subentries (RFC 3672): search; TRUE returns only subentries, FALSE
//!   (or no control) passes them over below the base (`search::mod.rs`,
//!   `subentry_visibility`).
//! - Sync Request (RFC 4533): search (`ops::syncrepl`).
//! - Don't Use Copy (RFC 6171): search and compare; always met (no
//!   server here holds a shadow copy).
//! - AD's Lazy Commit: searches, compares and updates; writes stay as
//!   durable as `storage.sync` makes them, which it allows.
//! - Proxied Authorization (RFC 4370): every operation but bind, abandon
//!   and unbind runs as the identity it names (`ops::proxied`): the
//!   handlers take who they act for from `Controls::acting`, never from
//!   the connection directly.
//!
//! An unknown control marked critical, or a known one on an operation it
//! does not apply to, fails the operation with
//! `unavailableCriticalExtension` when critical and is ignored otherwise.
//! ldap3_proto drops the criticality of paged-results and sort requests;
//! both are implemented, so nothing is lost.

use crate::acl::{ReadPlan, Target};
use crate::ber::{self, OutAttr};
use crate::conn::{Conn, Identity};
use crate::ops::access::readable;
use crate::ops::search::{searchable_match, Selection};
use crate::stats::Op;
use bytes::BytesMut;
use ldap3_proto::control::{LdapControl, ServerSortRequet};
use ldap3_proto::proto::LdapFilter;
use ldap3_proto::LdapResultCode;
use shards::entry::{encode_vals, Entry, EntryView, Vals};
use shards::index;
use shards::write::Images;
use shards::ReadTxn;
use shards::{Error, Result};

mod read;
pub use read::{applies, parse, read_value, Read};

pub const PAGED_RESULTS: &str = "1.2.840.113556.1.4.319";
pub const SORT_REQUEST: &str = "1.2.840.113556.1.4.473";
pub const ASSERTION: &str = "1.3.6.1.1.12";
pub const PRE_READ: &str = "1.3.6.1.1.13.1";
pub const POST_READ: &str = "1.3.6.1.1.13.2";
pub const MANAGE_DSA_IT: &str = "2.16.840.1.113730.3.4.2";
pub const MATCHED_VALUES: &str = "1.2.826.0.1.3344810.2.3";
pub const SUBENTRIES: &str = "1.3.6.1.4.1.4203.1.10.1";
/// OpenLDAP's Relax Rules (draft-zeilenga-ldap-relax): for migrations, an
/// add may carry `entryUUID`, `createTimestamp`, `creatorsName`,
/// `modifyTimestamp` and `modifiersName` (with `manage` access).
pub const RELAX: &str = "1.3.6.1.4.1.4203.666.5.12";
pub const PROXY_AUTHZ: &str = "2.16.840.1.113730.3.4.18";
/// Active Directory's Permissive Modify, which slapd obeys on a modify
/// without listing it (as slapd, not in `SUPPORTED`): an add of a value
/// the entry holds, and a delete of an attribute it lacks, succeed.
pub const PERMISSIVE_MODIFY: &str = "1.2.840.113556.1.4.1413";
/// OpenLDAP's No-Op (draft-zeilenga-ldap-noop), which slapd obeys without
/// listing it (so not in `SUPPORTED` here either): an update runs every
/// check and changes nothing, answering x-no-operation (16654) where it
/// would have succeeded. Searches and compares take it and ignore it.
pub const NO_OP: &str = "1.3.6.1.4.1.4203.666.5.2";
/// Session Tracking (draft-wahl-ldap-session): who the end user behind a
/// proxy or web application is. slapd decodes it strictly and does not
/// list it; so does coredir, and it only checks it (nothing here logs it).
pub const SESSION_TRACKING: &str = "1.3.6.1.4.1.21008.108.63.1";
/// Don't Use Copy (RFC 6171): the answer must come from the original, not
/// a shadow copy. Every coredir server holds the original of what it
/// serves (both servers of a mirror pair take writes; there are no
/// read-only replicas or caches), so on a search or compare it is always
/// met, as slapd meets it on a back-mdb database.
pub const DONT_USE_COPY: &str = "1.3.6.1.1.22";
/// Active Directory's Domain Scope (no value) and Search Options
/// (`SEQUENCE { flags INTEGER }`, flag 1 being domain scope), which
/// AD-minded clients send. slapd parses both on a search without listing
/// them; domain scope asks a server not to chase referrals, which coredir
/// (as back-mdb) never does, so it changes nothing but the checks.
pub const DOMAIN_SCOPE: &str = "1.2.840.113556.1.4.1339";
pub const SEARCH_OPTIONS: &str = "1.2.840.113556.1.4.1340";
/// Active Directory's Lazy Commit (no value): the client allows the
/// server to acknowledge a write before it is durable. slapd takes it on
/// searches, compares and updates without listing it, and so does
/// coredir; its writes stay as durable as `storage.sync` makes them,
/// which the control allows (it permits laziness, it does not ask for
/// it).
pub const LAZY_COMMIT: &str = "1.2.840.113556.1.4.619";

/// What `supportedControl` lists: exactly what works.
pub const SUPPORTED: &[&str] = &[
    PAGED_RESULTS,
    SORT_REQUEST,
    crate::ops::vlv::REQUEST,
    ASSERTION,
    PRE_READ,
    POST_READ,
    MANAGE_DSA_IT,
    MATCHED_VALUES,
    SUBENTRIES,
    RELAX,
    PROXY_AUTHZ,
    DONT_USE_COPY,
];

#[derive(Debug, Default)]
pub struct Controls {
    pub paged: Option<(i64, Vec<u8>)>,
    pub sort: Option<Vec<ServerSortRequet>>,
    pub assertion: Option<LdapFilter>,
    /// Attributes of the Pre-Read and Post-Read controls.
    pub pre_read: Option<Vec<String>>,
    pub post_read: Option<Vec<String>>,
    /// The Matched Values control's items (RFC 3876).
    pub matched_values: Option<Vec<LdapFilter>>,
    /// The Subentries control (RFC 3672): whether only subentries are wanted.
    pub subentries: Option<bool>,
    /// The Sync Request control: refreshAndPersist (else refreshOnly), and the cookie.
    pub sync: Option<(bool, Option<Vec<u8>>)>,
    /// The Relax Rules control (it changes what an add and a modify may do).
    pub relax: Option<()>,
    /// Permissive Modify (a modify).
    pub permissive: Option<()>,
    /// No-Op (an update): checked, not done.
    pub no_op: Option<()>,
    /// The Virtual List View request (search, with a sort).
    pub vlv: Option<crate::ops::vlv::Request>,
    /// ManageDsaIT (RFC 3296): referral objects are plain entries.
    pub manage_dsa_it: bool,
    /// The Proxied Authorization control's authzId, as sent.
    pub proxied: Option<Vec<u8>>,
    /// Who the operation runs as: the identity that control named, else
    /// the connection's, fixed by `ops::dispatch` when the request arrives
    /// (a Bind pipelined after it cannot change it).
    pub acting: Identity,
}

/// Fails with `assertionFailed` unless the entry (with storage `key`)
/// matches the assertion as the requester may see it: evaluated like a
/// search filter under their access rights, attribute by attribute (as
/// slapd: without asking for read access to the entry itself; an
/// operation on an entry the requester may not know of answers as for a
/// missing one), so an assertion on an attribute they may not search, and
/// `(objectClass=*)` without search on objectClass, is Undefined and
/// fails. Without that, `!assert=(userPassword=<hash>)` told anonymous
/// whether a guess was right (issue 17). Writes check it here on the entry as read; see
/// `check_assertion_before_write` for the owner's second check.
pub fn check_assertion(
    conn: &Conn,
    identity: &Identity,
    assertion: Option<&LdapFilter>,
    key: &[u8],
    entry: &Entry,
) -> Result<()> {
    assertion_on_entry(conn, identity, assertion, (key, Subordinates::Stored), entry)
}

/// `check_assertion` on an entry the server computes (the root DSE,
/// cn=Subschema, cn=Monitor's): hasSubordinates is absent from it, as
/// slapd answers (an item on it is FALSE, its NOT TRUE); nothing stored
/// is read.
pub fn check_assertion_computed(
    conn: &Conn,
    identity: &Identity,
    assertion: Option<&LdapFilter>,
    key: &[u8],
    entry: &Entry,
) -> Result<()> {
    assertion_on_entry(conn, identity, assertion, (key, Subordinates::Absent), entry)
}

/// `check_assertion` on an encoded entry.
pub fn check_assertion_view(
    conn: &Conn,
    identity: &Identity,
    assertion: Option<&LdapFilter>,
    key: &[u8],
    view: &EntryView<'_>,
) -> Result<()> {
    assertion_holds(conn, identity, assertion, (key, Subordinates::Stored), view, |_| Ok(Vec::new()))
}

/// `check_assertion` on an entry about to be added: it has no children,
/// whatever the store holds at its DN (an entry the requester may not
/// know of, whose children would otherwise answer `hasSubordinates`).
pub fn check_assertion_new(
    conn: &Conn,
    identity: &Identity,
    assertion: Option<&LdapFilter>,
    key: &[u8],
    entry: &Entry,
) -> Result<()> {
    assertion_on_entry(conn, identity, assertion, (key, Subordinates::Known(false)), entry)
}

/// The assertion on an entry not yet encoded; `children` as for
/// `subordinates_decided`.
fn assertion_on_entry(
    conn: &Conn,
    identity: &Identity,
    assertion: Option<&LdapFilter>,
    at: (&[u8], Subordinates),
    entry: &Entry,
) -> Result<()> {
    let Some(f) = assertion else { return Ok(()) };
    let mut bytes = Vec::new();
    entry.encode(&mut bytes)?;
    assertion_holds(conn, identity, Some(f), at, &EntryView::new(&bytes)?, |_| Ok(Vec::new()))
}

/// `check_assertion` on the entry `view` with id `id` as read in `txn`:
/// on a big entry (a group of a million members) its equality items are
/// index lookups in that snapshot (`index::decided_items`), as in a search.
pub fn check_assertion_read<T: ReadTxn>(
    conn: &Conn,
    identity: &Identity,
    assertion: Option<&LdapFilter>,
    key: &[u8],
    (txn, id): (&T, &[u8]),
    view: &EntryView<'_>,
) -> Result<()> {
    let decide = |node: &_| index::decided_items(txn, node, id, view.size());
    assertion_holds(conn, identity, assertion, (key, Subordinates::Stored), view, decide)
}

/// `check_assertion_read` on the entry stored at `key` (none: nothing to check).
pub fn check_assertion_at(conn: &Conn, identity: &Identity, assertion: Option<&LdapFilter>, key: &[u8]) -> Result<()> {
    if assertion.is_none() {
        return Ok(());
    }
    let txn = conn.ctx.shard.read_for(key)?;
    match txn.entry(key)? {
        Some((id, view)) => check_assertion_read(conn, identity, assertion, key, (&txn, id), &view),
        None => Ok(()),
    }
}

/// The assertion's hasSubordinates items answered from the entry's child
/// count (kept on its own owner), as a search answers them: computed, the
/// filter cannot read them from the entry.
fn subordinates_decided(
    conn: &Conn,
    node: &shards::filter::Node,
    (key, children): (&[u8], Subordinates),
) -> Result<Vec<(usize, bool)>> {
    match children {
        // No entry is stored at the empty DN (the root DSE).
        Subordinates::Absent => {
            Ok(node.subordinates_decided(|| Ok(false))?.into_iter().map(|(i, _)| (i, false)).collect())
        }
        _ if key.is_empty() => subordinates_decided(conn, node, (key, Subordinates::Absent)),
        Subordinates::Known(known) => node.subordinates_decided(|| Ok(known)),
        Subordinates::Stored => {
            node.subordinates_decided(|| Ok(shards::write::children(&conn.ctx.shard.read_for(key)?, key)? > 0))
        }
    }
}

/// What an entry's hasSubordinates is to an assertion on it.
#[derive(Clone, Copy)]
enum Subordinates {
    /// Whether it has children, counted in the store.
    Stored,
    /// Known without the store (an entry being added has none).
    Known(bool),
    /// Not an attribute of it: a computed entry (see `check_assertion_computed`).
    Absent,
}

/// Whether the assertion holds on `view` under the requester's rights;
/// `decide` answers the items of the filter as compiled that an index can.
fn assertion_holds(
    conn: &Conn,
    identity: &Identity,
    assertion: Option<&LdapFilter>,
    (key, children): (&[u8], Subordinates),
    view: &EntryView<'_>,
    decide: impl FnOnce(&shards::filter::Node) -> Result<Vec<(usize, bool)>>,
) -> Result<()> {
    let Some(f) = assertion else { return Ok(()) };
    let live = conn.ctx.live();
    let node = shards::filter::compile(f);
    let holds = match conn.access(&live, identity).map(ReadPlan::new) {
        None => {
            let mut decided = decide(&node)?;
            decided.extend(subordinates_decided(conn, &node, (key, children))?);
            shards::filter::with_decided(decided, || node.matches(view))
        }
        Some(plan) => {
            let node = node.restrict_assertion(&|names| plan.searchable(names));
            let mut decided = decide(&node)?;
            decided.extend(subordinates_decided(conn, &node, (key, children))?);
            let (target, tests) = (Target { key, entry: Some(view) }, live.limits.max_filter_tests);
            shards::filter::with_decided(decided, || searchable_match(&plan, &node, &target, view, tests))?
        }
    };
    if holds {
        Ok(())
    } else {
        Err(shards::Error::new(LdapResultCode::AssertionFailed, "assertion control: the assertion does not hold"))
    }
}

/// For a write the owner applies: the assertion under the requester's
/// rights on the entry as it is now, and the assertion the owner should
/// check again in its transaction. That is the whole filter only when the
/// requester may search every attribute it names in any entry: otherwise
/// a change between the two checks (an empty modify of their own, say)
/// would let the owner's unrestricted evaluation answer for a hidden
/// term, so the owner checks nothing and the check here is the only one.
pub fn check_assertion_before_write(
    conn: &Conn,
    identity: &Identity,
    assertion: Option<LdapFilter>,
    key: &[u8],
) -> Result<Option<LdapFilter>> {
    let Some(f) = assertion else { return Ok(None) };
    check_assertion_at(conn, identity, Some(&f), key)?;
    let live = conn.ctx.live();
    let Some(plan) = conn.access(&live, identity).map(ReadPlan::new) else { return Ok(Some(f)) };
    let mut everywhere = true;
    shards::filter::compile(&f).for_each_attr(&mut |names| {
        everywhere &= plan.searchable(names) == shards::filter::Searchable::Yes;
    });
    Ok(everywhere.then_some(f))
}

/// The Pre-Read and Post-Read response controls for an update's images;
/// `moved_to`: a rename's new DN, where the entry's children are now.
pub fn read_entry_controls(
    conn: &Conn,
    identity: &Identity,
    images: Option<Box<Images>>,
    pre: &Option<Vec<String>>,
    post: &Option<Vec<String>>,
    moved_to: Option<&str>,
) -> Vec<LdapControl> {
    let Some(images) = images else { return Vec::new() };
    let live = conn.ctx.live();
    let access = conn.access(&live, identity);
    let mut out = Vec::new();
    // Children are counted after the write: a renamed entry's are at its
    // new DN by then, where its Pre-Read counts them too.
    let now = moved_to.or(images.before.as_ref().map(|e| e.dn.as_str()));
    if let (Some(attrs), Some(e)) = (pre, &images.before) {
        out.push(read_entry_control(conn, PRE_READ, e, attrs, access.as_ref(), now));
    }
    if let (Some(attrs), Some(e)) = (post, &images.after) {
        out.push(read_entry_control(conn, POST_READ, e, attrs, access.as_ref(), now));
    }
    out
}

/// A Pre-Read or Post-Read response control carrying `entry` with the
/// selected attributes the requester may read, the entry as a search
/// returns it (RFC 4527 §3.1): the operational attributes computed at
/// read time too (`+` asks for them), the children counted now at the
/// entry's DN `now` (none: its own).
pub fn read_entry_control(
    conn: &Conn,
    oid: &str,
    entry: &Entry,
    attrs: &[String],
    access: Option<&crate::acl::Access>,
    now: Option<&str>,
) -> LdapControl {
    let sel = Selection::new(attrs, false).hiding_counts(access.is_some_and(|a| !a.every_entry_readable()));
    let key = || shards::dn::key_of(now.unwrap_or(&entry.dn));
    let children = match sel.counts_children() {
        true => key().and_then(|k| conn.ctx.shard.children(&k)).unwrap_or(0),
        false => 0,
    };
    let computed = crate::ops::search::computed_attrs(&entry.dn, children, &sel);
    let names: Vec<&str> = computed.iter().map(|(name, _)| *name).collect();
    let readable = readable(access, entry, &names);
    let (stored_ok, computed_ok) = readable.split_at(entry.attrs.len());
    // Stored and computed values alike in the stored layout (not a hot path).
    let stored: Vec<(&str, Vec<u8>, u32)> = entry
        .attrs
        .iter()
        .zip(stored_ok)
        .filter(|(a, ok)| **ok && sel.wants(&a.name))
        .map(|(a, _)| {
            let (mut buf, slices) = (Vec::new(), a.vals.iter().map(Vec::as_slice).collect::<Vec<_>>());
            encode_vals(&slices, &mut buf);
            (a.name.as_str(), buf, slices.len() as u32)
        })
        .collect();
    let computed = computed.iter().zip(computed_ok).filter(|(_, ok)| **ok).map(|((name, buf), _)| (*name, buf, 1));
    let out: Vec<OutAttr<'_, Vals<'_>>> = stored
        .iter()
        .map(|(name, buf, n)| (*name, buf, *n))
        .chain(computed)
        .map(|(name, buf, n)| OutAttr { name, vals: Vals::from_encoded(buf, n) })
        .collect();
    let mut value = BytesMut::new();
    ber::entry_op(&mut value, &entry.dn, &out, false);
    LdapControl::Unknown { oid: oid.to_string(), criticality: false, value: Some(value.to_vec()) }
}
