//! Reading a request's controls: where each applies (`applies`), each
//! value as slapd's parser of that control reads it (`read_value`), and
//! the whole list into `Controls` (`parse`). The strict check asks the
//! first two too (`strict::controls`), so that both passes agree.

use super::*;

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
        // As slapd: updates, searches and compares (ignored on the last two).
        NO_OP => updates || matches!(k, Op::Search | Op::Compare),
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
    let mut no_op = None; // on a search or compare: checked, then ignored
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
                    Read::NoOp if matches!(k, Op::Search | Op::Compare) => once(&mut no_op, (), NO_OP)?,
                    Read::NoOp => once(&mut out.no_op, (), NO_OP)?,
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
    NoOp,
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
            Read::NoOp => NO_OP,
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
        NO_OP => absent(Read::NoOp, "noop")?,
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
