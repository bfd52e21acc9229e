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
use shards::store::ReadTxn;
use shards::write::Images;
use shards::{Error, Result};

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

/// Dynamic Directory Services' Refresh (RFC 2589), for `applies`.
const DDS_REFRESH: &str = "1.3.6.1.4.1.1466.101.119.1";

/// The Sync Request control (RFC 4533), for `applies`.
const SYNC_REQUEST: &str = "1.3.6.1.4.1.4203.1.9.1.1";

/// Whether control `oid` applies to operation `k` (`exop`: an extended
/// request's name), as slapd applies them; `None` for a control this
/// server does not know. The one table both readers of controls ask:
/// `strict`, which leaves a control that does not apply out of the
/// request unread, or refuses it with unavailableCriticalExtension when
/// critical, in the order of the list as slapd does; and `parse`.
pub fn applies(oid: &str, k: Op, exop: Option<&str>) -> Option<bool> {
    let updates = matches!(k, Op::Add | Op::Delete | Op::Modify | Op::Modrdn);
    // Among extended operations, Proxied Authorization and Session
    // Tracking apply to Who am I?, Password Modify and (RFC 2589) Refresh,
    // as in slapd (which then answers Refresh as an operation it does not
    // have).
    let proxied_exop = exop.is_none_or(|o| {
        o == ldap3_proto::proto::OID_WHOAMI || o == ldap3_proto::proto::OID_PASSWORD_MODIFY || o == DDS_REFRESH
    });
    Some(match oid {
        PAGED_RESULTS
        | SORT_REQUEST
        | SYNC_REQUEST
        | MATCHED_VALUES
        | SUBENTRIES
        | crate::ops::vlv::REQUEST
        | DOMAIN_SCOPE
        | SEARCH_OPTIONS => k == Op::Search,
        // RFC 3296 and RFC 4528: searches, compares and updates.
        MANAGE_DSA_IT | ASSERTION => updates || matches!(k, Op::Search | Op::Compare),
        // As slapd: not on a bind (nor abandon, unbind).
        PROXY_AUTHZ => !matches!(k, Op::Bind | Op::Unbind | Op::Abandon) && proxied_exop,
        PRE_READ => matches!(k, Op::Modify | Op::Delete | Op::Modrdn),
        POST_READ => matches!(k, Op::Modify | Op::Add | Op::Modrdn),
        // As slapd: any update (it relaxes add and modify).
        RELAX => updates,
        PERMISSIVE_MODIFY => k == Op::Modify,
        // As slapd: binds, searches, compares, updates, and the extended
        // operations Proxied Authorization applies to.
        SESSION_TRACKING => !matches!(k, Op::Unbind | Op::Abandon) && proxied_exop,
        DONT_USE_COPY => matches!(k, Op::Search | Op::Compare),
        LAZY_COMMIT => updates || matches!(k, Op::Search | Op::Compare),
        _ => return None,
    })
}

fn unavailable(oid: &str, why: &str) -> Error {
    let oid = if oid.is_empty() { "(an empty type)" } else { oid };
    Error::new(LdapResultCode::UnavailableCriticalExtension, format!("critical control {oid} {why}"))
}

/// Parses the controls of a request for operation `op`. A control that
/// applies given twice is a protocolError, as slapd's parsers say ("…
/// control specified multiple times"): which of the two would hold?
/// `provider`: whether this server offers the Sync Request control.
/// `exop`: an extended request's name (Proxied Authorization applies to
/// Who am I? and Password Modify only, as slapd's).
pub fn parse(ctrls: &[LdapControl], (k, exop): (Op, Option<&str>), provider: bool) -> Result<Controls> {
    let mut out = Controls::default();
    let (mut manage_dsa_it, mut dont_use_copy, mut domain_scope, mut lazy_commit) = (None, None, None, None);
    for c in ctrls {
        match c {
            LdapControl::SimplePagedResults { size, cookie } if k == Op::Search => {
                once(&mut out.paged, (*size, cookie.clone()), PAGED_RESULTS)?;
            }
            LdapControl::ServerSort { sort_requests } if k == Op::Search => {
                once(&mut out.sort, sort_requests.clone(), SORT_REQUEST)?
            }
            // RFC 3296: searches, compares and updates; as slapd, a
            // critical one elsewhere (a bind, an extended operation) is
            // refused, not followed by the operation done without it.
            LdapControl::ManageDsaIT { criticality } if matches!(k, Op::Bind | Op::Extended) => {
                if *criticality {
                    return Err(unavailable(MANAGE_DSA_IT, "is not supported with this operation"));
                }
            }
            LdapControl::ManageDsaIT { .. } => once(&mut manage_dsa_it, (), MANAGE_DSA_IT)?,
            // Not offered, and not critical: ignored (RFC 4511 §4.1.11), as
            // slapd without syncprov does; a critical one is refused.
            LdapControl::SyncRequest { criticality: false, .. } if !provider => {}
            LdapControl::SyncRequest { mode, cookie, .. } if k == Op::Search => {
                let persist = matches!(mode, ldap3_proto::proto::SyncRequestMode::RefreshAndPersist);
                once(&mut out.sync, (persist, cookie.clone()), oid_of(c))?;
            }
            LdapControl::Unknown { oid, criticality, value } => {
                let applies = applies(oid, k, exop) == Some(true);
                if !applies {
                    if *criticality {
                        return Err(unavailable(oid, "is not supported with this operation"));
                    }
                    continue;
                }
                match read_value(oid, *criticality, value.as_deref())? {
                    Read::Proxied(authzid) => once(&mut out.proxied, authzid, PROXY_AUTHZ)?,
                    Read::Assertion(f) => once(&mut out.assertion, f, ASSERTION)?,
                    Read::PreRead(attrs) => once(&mut out.pre_read, attrs, PRE_READ)?,
                    Read::PostRead(attrs) => once(&mut out.post_read, attrs, POST_READ)?,
                    Read::MatchedValues(items) => once(&mut out.matched_values, items, MATCHED_VALUES)?,
                    Read::Subentries(only) => once(&mut out.subentries, only, SUBENTRIES)?,
                    Read::Vlv(view) => once(&mut out.vlv, view, crate::ops::vlv::REQUEST)?,
                    Read::Relax => once(&mut out.relax, (), RELAX)?,
                    Read::Permissive => once(&mut out.permissive, (), PERMISSIVE_MODIFY)?,
                    Read::DontUseCopy => once(&mut dont_use_copy, (), DONT_USE_COPY)?,
                    Read::LazyCommit => once(&mut lazy_commit, (), LAZY_COMMIT)?,
                    // Domain scope once, by either control.
                    Read::DomainScope => once(&mut domain_scope, (), oid)?,
                    Read::Nothing => {}
                }
            }
            other => {
                if criticality(other) {
                    return Err(unavailable(oid_of(other), "is not supported with this operation"));
                }
            }
        }
    }
    out.manage_dsa_it = manage_dsa_it.is_some();
    if out.sync.is_some() {
        beside_sync(&out)?;
    }
    Ok(out)
}

/// A control ldap3_proto leaves undecoded, that applies, its value read.
pub enum Read {
    Proxied(Vec<u8>),
    Assertion(LdapFilter),
    PreRead(Vec<String>),
    PostRead(Vec<String>),
    MatchedValues(Vec<LdapFilter>),
    Subentries(bool),
    Vlv(crate::ops::vlv::Request),
    Relax,
    Permissive,
    DontUseCopy,
    LazyCommit,
    DomainScope,
    /// Checked, and nothing to keep (Session Tracking, Search Options
    /// without domain scope).
    Nothing,
}

impl Read {
    /// The one place in a request this control fills, as `parse` keeps
    /// it: a second control filling it is refused ("specified multiple
    /// times"). Domain Scope and Search Options' domain-scope flag fill
    /// one place; what fills none may come any number of times.
    pub fn slot(&self) -> Option<&'static str> {
        Some(match self {
            Read::Proxied(_) => PROXY_AUTHZ,
            Read::Assertion(_) => ASSERTION,
            Read::PreRead(_) => PRE_READ,
            Read::PostRead(_) => POST_READ,
            Read::MatchedValues(_) => MATCHED_VALUES,
            Read::Subentries(_) => SUBENTRIES,
            Read::Vlv(_) => crate::ops::vlv::REQUEST,
            Read::Relax => RELAX,
            Read::Permissive => PERMISSIVE_MODIFY,
            Read::DontUseCopy => DONT_USE_COPY,
            Read::LazyCommit => LAZY_COMMIT,
            Read::DomainScope => DOMAIN_SCOPE,
            Read::Nothing => return None,
        })
    }
}

/// Reads the value of control `oid`, one that applies and that
/// ldap3_proto leaves undecoded, as slapd's parser of that control reads
/// it: what it asks for, or the error the operation is refused with.
/// `parse` keeps what it returns; `strict` asks it whether a control will
/// be refused, so that a refusal of a later control does not overtake it
/// (slapd answers the first control it refuses, in list order).
pub fn read_value(oid: &str, critical: bool, value: Option<&[u8]>) -> Result<Read> {
    // slapd tests "value absent" (`BER_BVISNULL`): an empty value is a
    // value, and refused where none may be given.
    let absent = |read: Read, what: &str| if value.is_some() { Err(protocol(what)) } else { Ok(read) };
    let given = value.unwrap_or_default();
    Ok(match oid {
        // RFC 4370 §3: the value is the authzId itself, and present
        // (empty is anonymous).
        PROXY_AUTHZ => Read::Proxied(value.ok_or_else(|| protocol("proxied authorization"))?.to_vec()),
        SESSION_TRACKING => {
            // slapd: "Session Tracking Control must not be critical".
            if critical {
                return Err(protocol("session tracking (critical)"));
            }
            check_session_tracking(value)?;
            Read::Nothing
        }
        // slapd: "… control value not absent".
        DONT_USE_COPY => absent(Read::DontUseCopy, "don't use copy")?,
        LAZY_COMMIT => absent(Read::LazyCommit, "lazy commit")?,
        RELAX => absent(Read::Relax, "relax")?,
        PERMISSIVE_MODIFY => absent(Read::Permissive, "permissive modify")?,
        // slapd: "domainScope control value not absent" (an empty one
        // passes, for AD clients that send one).
        DOMAIN_SCOPE if !given.is_empty() => return Err(protocol("domain scope")),
        DOMAIN_SCOPE => Read::DomainScope,
        SEARCH_OPTIONS => {
            let flags = parse_search_flags(value)?;
            // As slapd: a flag it does not know (2, phantom root) makes
            // the whole control unwilling when critical, ignored when not.
            if flags & !SEARCH_FLAG_DOMAIN_SCOPE != 0 {
                if critical {
                    return Err(Error::new(
                        LdapResultCode::UnwillingToPerform,
                        "searchOptions contained unrecognized flag",
                    ));
                }
                Read::Nothing
            } else if flags & SEARCH_FLAG_DOMAIN_SCOPE != 0 {
                Read::DomainScope
            } else {
                Read::Nothing
            }
        }
        ASSERTION => Read::Assertion(parse_filter(given)?),
        PRE_READ => Read::PreRead(parse_attr_list(given, critical)?),
        POST_READ => Read::PostRead(parse_attr_list(given, critical)?),
        MATCHED_VALUES => Read::MatchedValues(parse_values_filter(given)?),
        SUBENTRIES => Read::Subentries(parse_boolean(given)?),
        crate::ops::vlv::REQUEST => Read::Vlv(crate::ops::vlv::parse(given)?),
        _ => Read::Nothing,
    })
}

/// A sync search sends every entry in scope as the filter takes it and
/// then every change: a page, a sort, a view, an assertion or matched
/// values would be ignored there, so they are refused, not dropped.
fn beside_sync(out: &Controls) -> Result<()> {
    let given = [
        (out.paged.is_some(), PAGED_RESULTS),
        (out.sort.is_some(), SORT_REQUEST),
        (out.vlv.is_some(), crate::ops::vlv::REQUEST),
        (out.assertion.is_some(), ASSERTION),
        (out.matched_values.is_some(), MATCHED_VALUES),
        (out.subentries.is_some(), SUBENTRIES),
    ];
    match given.iter().find(|(is, _)| *is) {
        Some((_, oid)) => Err(unavailable(oid, "is not supported with the Sync Request control")),
        None => Ok(()),
    }
}

/// Fills a control's slot, refusing a second one.
fn once<T>(slot: &mut Option<T>, value: T, oid: &str) -> Result<()> {
    if slot.is_some() {
        return Err(Error::protocol(format!("control {oid} specified multiple times")));
    }
    *slot = Some(value);
    Ok(())
}

fn criticality(c: &LdapControl) -> bool {
    match c {
        LdapControl::SyncRequest { criticality, .. }
        | LdapControl::PasswordPolicyRequest { criticality }
        | LdapControl::SearchOptions { criticality, .. }
        | LdapControl::ShowDeleted { criticality }
        | LdapControl::SdFlags { criticality, .. }
        | LdapControl::ExtendedDn { criticality, .. } => *criticality,
        _ => false,
    }
}

fn oid_of(c: &LdapControl) -> &'static str {
    match c {
        LdapControl::SyncRequest { .. } => "1.3.6.1.4.1.4203.1.9.1.1",
        LdapControl::PasswordPolicyRequest { .. } => "1.3.6.1.4.1.42.2.27.8.5.1",
        // ldap3_proto's SearchOptions is AD's Verify Name OID.
        LdapControl::SearchOptions { .. } => "1.2.840.113556.1.4.1338",
        LdapControl::ShowDeleted { .. } => "1.2.840.113556.1.4.417",
        LdapControl::SdFlags { .. } => "1.2.840.113556.1.4.801",
        LdapControl::ExtendedDn { .. } => "1.2.840.113556.1.4.529",
        _ => "(response control)",
    }
}

fn protocol(what: &str) -> Error {
    Error::protocol(format!("malformed {what} control value"))
}

/// The Assertion control's value: one BER-encoded Filter.
fn parse_filter(value: &[u8]) -> Result<LdapFilter> {
    let (rest, tag) = ldap3_lber::parse::Parser::default().parse(value).map_err(|_| protocol("assertion"))?;
    if !rest.is_empty() {
        return Err(protocol("assertion"));
    }
    crate::decode::filter(tag).ok_or_else(|| protocol("assertion"))
}

/// The Matched Values value: `SEQUENCE OF SimpleFilterItem`, filter
/// items without `and`, `or` or `not` (RFC 3876 §2); anything else is
/// malformed.
fn parse_values_filter(value: &[u8]) -> Result<Vec<LdapFilter>> {
    let (rest, tag) = ldap3_lber::parse::Parser::default().parse(value).map_err(|_| protocol("matched values"))?;
    let items = tag.expect_constructed().filter(|_| rest.is_empty()).ok_or_else(|| protocol("matched values"))?;
    items
        .into_iter()
        .map(|t| match crate::decode::filter(t) {
            Some(LdapFilter::And(_) | LdapFilter::Or(_) | LdapFilter::Not(_)) | None => Err(protocol("matched values")),
            Some(f) => Ok(f),
        })
        .collect()
}

/// The Session Tracking value: `SEQUENCE { sessionSourceIp,
/// sessionSourceName, formatOID, sessionTrackingIdentifier }`, four
/// OCTET STRINGs, with slapd's bound on the address (128 bytes; slapd
/// takes any format OID). Absent or malformed is a protocolError even on
/// a non-critical control, as in slapd.
fn check_session_tracking(value: Option<&[u8]>) -> Result<()> {
    let bad = || protocol("session tracking");
    let value = value.filter(|v| !v.is_empty()).ok_or_else(bad)?;
    let (rest, tag) = ldap3_lber::parse::Parser::default().parse(value).map_err(|_| bad())?;
    let fields = tag.expect_constructed().filter(|_| rest.is_empty()).ok_or_else(bad)?;
    let strings: Vec<Vec<u8>> = fields
        .into_iter()
        .map(|t| (t.class == ldap3_lber::common::TagClass::Universal && t.id == 4).then_some(t))
        .map(|t| t.and_then(|t| t.expect_primitive()))
        .collect::<Option<_>>()
        .ok_or_else(bad)?;
    match strings.as_slice() {
        [ip, _name, _format, _id] if ip.len() <= 128 => Ok(()),
        _ => Err(bad()),
    }
}

/// Search Options' flag asking for domain scope.
const SEARCH_FLAG_DOMAIN_SCOPE: i64 = 1;

/// The Search Options value: `SEQUENCE { flags INTEGER }`, present and
/// whole (slapd reads the first element and ignores any after it;
/// coredir leaves no part of a control unread).
fn parse_search_flags(value: Option<&[u8]>) -> Result<i64> {
    let bad = || protocol("search options");
    let (rest, tag) = ldap3_lber::parse::Parser::default().parse(value.ok_or_else(bad)?).map_err(|_| bad())?;
    let fields = tag.expect_constructed().filter(|_| rest.is_empty()).ok_or_else(bad)?;
    let [flags] = fields.as_slice() else { return Err(bad()) };
    if flags.class != ldap3_lber::common::TagClass::Universal || flags.id != 2 {
        return Err(bad());
    }
    match flags.clone().expect_primitive().as_deref() {
        // Two's complement, big-endian, in 32 bits as slapd's ber_int_t
        // (a longer one is its decoding error).
        Some(b @ [first, ..]) if b.len() <= 4 => {
            Ok(b[1..].iter().fold(*first as i8 as i64, |n, byte| (n << 8) | *byte as i64))
        }
        _ => Err(bad()),
    }
}

/// The Subentries value: one BER BOOLEAN (one content byte).
fn parse_boolean(value: &[u8]) -> Result<bool> {
    match value {
        [0x01, 0x01, b] => Ok(*b != 0),
        _ => Err(protocol("subentries")),
    }
}

/// The Pre-/Post-Read value: `SEQUENCE OF LDAPString` (attribute selection).
/// A Pre-/Post-Read control's attribute list (RFC 4527 §3.1): attribute
/// descriptions, `*`, `+` and `1.1`, as slapd reads it: anything else (an
/// unknown type or option, an object class, `@class`, a constructed
/// element) fails the operation with undefinedAttributeType when the
/// control is critical, and is left out when it is not.
fn parse_attr_list(value: &[u8], critical: bool) -> Result<Vec<String>> {
    let (rest, tag) = ldap3_lber::parse::Parser::default().parse(value).map_err(|_| protocol("read entry"))?;
    let items = tag.expect_constructed().filter(|_| rest.is_empty()).ok_or_else(|| protocol("read entry"))?;
    let (mut names, listed_none) = (Vec::new(), items.is_empty());
    for item in items {
        // Any string, whatever its tag, as slapd's decoder reads it.
        let name = item.expect_primitive().and_then(|b| String::from_utf8(b).ok());
        match name {
            Some(n) if matches!(n.as_str(), "*" | "+" | "1.1") || shards::filter::Names::new(&n).is_some() => {
                names.push(n)
            }
            _ if critical => {
                return Err(Error::new(LdapResultCode::UndefinedAttributeType, "read control: unknown attributeType"))
            }
            _ => {}
        }
    }
    // What was left out still asked for something: not for all
    // attributes, as an empty list does.
    if names.is_empty() && !listed_none {
        names.push("1.1".into());
    }
    Ok(names)
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
