//! Dispatch: the one `match` over LDAP operations, and the one place an
//! error becomes a response.
//!
//! Bind, compare, abandon, extended operations and unbind are answered
//! inline (their responses join the connection's per-read batch), and so
//! is a search that needs no wait (`search::start`); writes, and searches
//! that wait, run as tasks, so one slow request never blocks the others
//! on the same connection.

pub mod abandon;
pub mod access;
pub mod add;
pub mod alias;
pub mod bind;
pub mod carries;
pub mod compare;
pub mod controls;
pub mod delete;
pub mod extended;
pub mod modify;
pub mod modify_dn;
pub mod monitor;
pub mod paging;
pub mod record;
pub mod referral;
pub mod rootdse;
pub mod sasl;
pub mod search;
pub mod sort;
pub mod syncrepl;
pub mod vlv;

use crate::conn::{encode, Conn, Identity};
use crate::stats::Op;
use bytes::BytesMut;
use ldap3_proto::control::LdapControl;
use ldap3_proto::proto::{LdapBindResponse, LdapMsg, LdapOp, LdapResult};
use ldap3_proto::LdapResultCode;
use shards::{Error, Result};
use std::future::Future;
use std::rc::Rc;

#[derive(Debug)]
pub enum Flow {
    Continue,
    Close,
    /// StartTLS accepted: its response is in the batch; the TLS handshake
    /// follows once it is written.
    StartTls,
    /// A Bind, answered in the batch or finishing later (a password hash
    /// checked off the reactor): its answer goes out before anything is
    /// read after it, as slapd holds every request that arrives during a
    /// Bind, so what a client pipelines behind a Bind runs as who it binds
    /// and is answered after it.
    Binding(Option<glommio::task::JoinHandle<()>>),
}

/// `first_step`: a SASL bind whose credentials field is absent (`ops::sasl`).
/// `controls_refused`: the strict check left controls out behind one
/// parse must refuse, or a Proxied Authorization the requester may not
/// use (`strict::Check::Refusing`).
pub fn dispatch(
    conn: &Rc<Conn>,
    msg: LdapMsg,
    (first_step, controls_refused): (bool, bool),
    out: &mut BytesMut,
) -> Flow {
    let msgid = msg.msgid;
    let Some(rec) = record::begin(conn, &msg.op) else {
        let e = Error::protocol(format!("{} is not a request", op_name(&msg.op)));
        encode(out, ldap3_proto::simple::DisconnectionNotice::gen_response(e.code, &e.message));
        return Flow::Close;
    };
    let ctrls = match sasl::check(conn, rec.op)
        .and_then(|_| {
            let exop = match &msg.op {
                LdapOp::ExtendedRequest(r) => Some(r.name.as_str()),
                _ => None,
            };
            let parsed = controls::parse(&msg.ctrl, (rec.op, exop), conn.ctx.shard.stamping.capture);
            // Fail closed: the strict check left controls out because
            // parse would refuse one before them, or the requester may not
            // act as the authzId read last; run without them, never.
            match parsed {
                Ok(c) if controls_refused => match c.proxied.as_deref().map(|authzid| proxied(conn, authzid)) {
                    Some(Err(denied)) => Err(denied),
                    _ => Err(Error::protocol("controls that could not be read in order")),
                },
                parsed => parsed,
            }
        })
        .and_then(|c| check_pending(conn, rec.op).map(|_| c))
        .and_then(|mut c| {
            c.acting = match c.proxied.take() {
                Some(authzid) => {
                    let acting = proxied(conn, &authzid)?;
                    record::proxied(conn, &rec, acting.dn());
                    acting
                }
                None => conn.identity.borrow().clone(),
            };
            check_write(conn, &msg.op, &c.acting).map(|_| c)
        })
        .and_then(|c| {
            let live = conn.ctx.live();
            check_filters(&live.limits, &msg.op, &c)?;
            check_shape(&live.limits, &msg.op, &c.acting).map(|_| c)
        }) {
        Ok(c) => c,
        Err(e) => {
            let bind = matches!(msg.op, LdapOp::BindRequest(_));
            if bind {
                bind_begins(conn);
            }
            if let Some(op) = rec.op.response(result(Err(e))) {
                reply(conn, &rec, out, LdapMsg::new(msgid, op));
            }
            return if bind { Flow::Binding(None) } else { Flow::Continue };
        }
    };
    // A write's message ID, and whether it carries No-Op (answered 16654).
    let write = (msgid, ctrls.no_op.is_some());
    match msg.op {
        LdapOp::BindRequest(req) => match bind::handle(conn, &req, first_step) {
            bind::Outcome::Now(res) => {
                if res.code == LdapResultCode::Success {
                    if let ldap3_proto::proto::LdapBindCred::SASL(sasl) = &req.cred {
                        record::sasl(conn, &rec, &sasl.credentials);
                    }
                    record::bound(conn, &rec, bind::mechanism(&req));
                }
                // A SASL first step's challenge is present and empty.
                let saslcreds = (res.code == LdapResultCode::SaslBindInProgress).then(Vec::new);
                let op = LdapOp::BindResponse(LdapBindResponse { res, saslcreds });
                reply(conn, &rec, out, LdapMsg::new(msgid, op));
                return Flow::Binding(None);
            }
            bind::Outcome::Later(pending) => {
                let in_flight = crate::conn::InFlight::new(conn);
                let conn = conn.clone();
                let bind = glommio::spawn_local(async move {
                    let _in_flight = in_flight;
                    // A client that has gone is not answered; the log says
                    // canceled (no password was checked).
                    let Some(res) = bind::finish(&conn, pending).await else {
                        return record::end(&conn, &rec, &LdapResultCode::Canceled, "client gone", None);
                    };
                    if res.code == LdapResultCode::Success {
                        record::bound(&conn, &rec, "SIMPLE");
                    }
                    let op = LdapOp::BindResponse(LdapBindResponse { res, saslcreds: None });
                    send_reply(&conn, &rec, LdapMsg::new(msgid, op)).await;
                })
                .detach();
                return Flow::Binding(Some(bind));
            }
        },
        LdapOp::UnbindRequest => {
            record::end(conn, &rec, &LdapResultCode::Success, "", None);
            return Flow::Close;
        }
        LdapOp::SearchRequest(req) => match ctrls.sync.clone() {
            Some((persist, cookie)) => syncrepl::start(conn, &ctrls, msgid, req, persist, cookie, rec),
            None => search::start(conn, msgid, req, ctrls, rec, out),
        },
        LdapOp::AddRequest(req) => {
            spawn_write(conn, write, rec, LdapOp::AddResponse, add::handle(conn.clone(), req, ctrls))
        }
        LdapOp::ModifyRequest(req) => {
            spawn_write(conn, write, rec, LdapOp::ModifyResponse, modify::handle(conn.clone(), req, ctrls))
        }
        LdapOp::DelRequest(dn) => {
            spawn_write(conn, write, rec, LdapOp::DelResponse, delete::handle(conn.clone(), dn, ctrls))
        }
        LdapOp::ModifyDNRequest(req) => {
            spawn_write(conn, write, rec, LdapOp::ModifyDNResponse, modify_dn::handle(conn.clone(), req, ctrls))
        }
        LdapOp::CompareRequest(req) => {
            let done = |code| LdapResult { code, matcheddn: String::new(), message: String::new(), referral: vec![] };
            match compare::handle(conn, &req, &ctrls) {
                Ok(compare::Answer::Now(code)) => {
                    reply(conn, &rec, out, LdapMsg::new(msgid, LdapOp::CompareResult(done(code))))
                }
                Ok(compare::Answer::Verify(check)) => {
                    let in_flight = crate::conn::InFlight::new(conn);
                    let conn = conn.clone();
                    glommio::spawn_local(async move {
                        let _in_flight = in_flight;
                        let Some(matched) = check.run(&conn).await else {
                            return record::end(&conn, &rec, &LdapResultCode::Canceled, "client gone", None);
                        };
                        let res = done(compare::code(matched));
                        send_reply(&conn, &rec, LdapMsg::new(msgid, LdapOp::CompareResult(res))).await;
                    })
                    .detach();
                }
                Err(e) => reply(conn, &rec, out, LdapMsg::new(msgid, LdapOp::CompareResult(result(Err(e))))),
            }
        }
        LdapOp::AbandonRequest(id) => {
            abandon::handle(conn, id);
            record::end(conn, &rec, &LdapResultCode::Success, "", None);
        }
        LdapOp::ExtendedRequest(req) if req.name == extended::OID_START_TLS => {
            let res = extended::start_tls(conn, &req);
            let accepted = res.res.code == LdapResultCode::Success;
            reply(conn, &rec, out, LdapMsg::new(msgid, LdapOp::ExtendedResponse(res)));
            if accepted {
                return Flow::StartTls;
            }
        }
        LdapOp::ExtendedRequest(req) => match extended::handle(conn, (msgid, &ctrls.acting), &req) {
            Some(res) => reply(conn, &rec, out, LdapMsg::new(msgid, LdapOp::ExtendedResponse(res))),
            None => {
                let in_flight = crate::conn::InFlight::new(conn);
                let identity = ctrls.acting;
                let conn = conn.clone();
                glommio::spawn_local(async move {
                    let _in_flight = in_flight;
                    let res = extended::password_modify(&conn, &identity, &req).await;
                    send_reply(&conn, &rec, LdapMsg::new(msgid, LdapOp::ExtendedResponse(res))).await;
                })
                .detach();
            }
        },
        _ => unreachable!("record::begin accepts requests only"),
    }
    Flow::Continue
}

/// Records a response's result and adds it to the connection's batch.
fn reply(conn: &Conn, rec: &record::Operation, out: &mut BytesMut, msg: LdapMsg) {
    record::end_with(conn, rec, &msg.op, None);
    encode(out, msg);
}

/// Records a response's result and sends it on its own.
async fn send_reply(conn: &Conn, rec: &record::Operation, msg: LdapMsg) {
    let mut out = BytesMut::new();
    reply(conn, rec, &mut out, msg);
    conn.send(out).await;
}

/// Searches and writes run as tasks; a connection may have at most
/// `limits.max_pending` of them running (`max_pending_auth` once bound),
/// like slapd's `conn_max_pending`. Past it: `busy`.
fn check_pending(conn: &Conn, op: Op) -> Result<()> {
    if conn.ctx.shared.draining.load(std::sync::atomic::Ordering::Relaxed) && !matches!(op, Op::Unbind | Op::Abandon) {
        return Err(Error::unavailable("the server is shutting down"));
    }
    let spawns = op.spawns();
    let live = conn.ctx.live();
    let limits = &live.limits;
    let max = if matches!(*conn.identity.borrow(), crate::conn::Identity::Anonymous) {
        limits.max_pending
    } else {
        limits.max_pending_auth
    };
    if spawns && max > 0 && conn.pending.get() >= max {
        return Err(Error::new(
            LdapResultCode::Busy,
            format!("too many operations in progress on this connection (limit {max})"),
        ));
    }
    Ok(())
}

/// Runs a write as its own task and sends its response (with its response
/// controls) when it is durable. `no_op`: the No-Op control's, whose
/// success is x-no-operation.
fn spawn_write(
    conn: &Rc<Conn>,
    (msgid, no_op): (i32, bool),
    rec: record::Operation,
    response: fn(LdapResult) -> LdapOp,
    fut: impl Future<Output = Result<Vec<LdapControl>>> + 'static,
) {
    let in_flight = crate::conn::InFlight::new(conn);
    let conn = conn.clone();
    glommio::spawn_local(async move {
        let _in_flight = in_flight;
        let (res, ctrl) = match fut.await {
            Ok(_) if no_op => return send_no_operation(&conn, &rec, msgid, response).await,
            Ok(ctrl) => (result(Ok(())), ctrl),
            Err(e) => (result(Err(e)), Vec::new()),
        };
        let mut msg = LdapMsg::new(msgid, response(res));
        msg.ctrl = ctrl;
        send_reply(&conn, &rec, msg).await;
    })
    .detach();
}

/// OpenLDAP's LDAP_X_NO_OPERATION: an update with the No-Op control that
/// would have succeeded.
pub const X_NO_OPERATION: i32 = 0x410e;

/// Answers x-no-operation, a code ldap3_proto's result has no name for,
/// written as `ber::result_message` writes any plain result.
async fn send_no_operation(conn: &Conn, rec: &record::Operation, msgid: i32, response: fn(LdapResult) -> LdapOp) {
    let op = response(result(Ok(())));
    let Some((tag, res)) = crate::ber::plain_result(&op) else { return };
    let mut out = BytesMut::new();
    crate::ber::result_with_code(&mut out, msgid, tag, X_NO_OPERATION, res);
    record::end_code(conn, rec, X_NO_OPERATION as i64, "", None);
    conn.send(out).await;
}

/// With `tls.required`, simple binds and writes need TLS or the local
/// socket (`confidentialityRequired` otherwise), as slapd's
/// `security simple_bind=` and `update_ssf=`.
pub fn check_confidential(conn: &Conn) -> Result<()> {
    if conn.ctx.live().tls_required && !conn.is_confidential() {
        return Err(Error::new(
            LdapResultCode::ConfidentialityRequired,
            "TLS is required for this operation (use StartTLS or ldaps://)",
        ));
    }
    Ok(())
}

/// A write needs a confidential connection under `tls.required`, and is
/// refused to anonymous before access control, as slapd does without
/// `allow update_anon`: `strongAuthRequired`.
fn check_write(conn: &Conn, op: &LdapOp, acting: &Identity) -> Result<()> {
    use LdapOp::*;
    if !matches!(op, AddRequest(_) | ModifyRequest(_) | DelRequest(_) | ModifyDNRequest(_)) {
        return Ok(());
    }
    check_confidential(conn)?;
    if matches!(acting, Identity::Anonymous) {
        decoded_write(conn, op)?;
        return Err(Error::new(LdapResultCode::StrongerAuthRequired, "modifications require authentication"));
    }
    Ok(())
}

/// What slapd's frontend answers while it decodes a write, before it asks
/// who may write: the DNs' syntax (34), an increment's value count (2),
/// a write aimed at the root DSE or the subschema entry (68 for an add,
/// else 53), an undefined attribute type (17), and a DN outside every
/// naming context (53, "no global superior knowledge"). Asked here only
/// of anonymous writes, which are refused right after (a value's syntax
/// is not: slapd answers 8 first for it too).
fn decoded_write(conn: &Conn, op: &LdapOp) -> Result<()> {
    use shards::schema::check::check_type;
    use LdapOp::*;
    let (target, types): (&str, Vec<&str>) = match op {
        AddRequest(r) => (&r.dn, r.attributes.iter().map(|a| a.atype.as_str()).collect()),
        ModifyRequest(r) => {
            modify::check_increments(&r.changes)?;
            (&r.dn, r.changes.iter().map(|c| c.modification.atype.as_str()).collect())
        }
        DelRequest(dn) => (dn, Vec::new()),
        ModifyDNRequest(r) => {
            let (dn, new, superior) = modify_dn::parse_names(r)?;
            modify_dn::check_placement(&dn, &new, &superior)?;
            return within_contexts(conn, &dn);
        }
        _ => return Ok(()),
    };
    let dn = parse_dn(target)?;
    let fixed = dn.is_root() || shards::schema::subschema::is_subschema_key(&dn.key());
    match (fixed, op) {
        (true, AddRequest(_)) => return Err(Error::already_exists(target)),
        (true, _) => return Err(Error::unwilling("the root DSE and the subschema entry cannot be written")),
        (false, _) => {}
    }
    for name in types {
        check_type(name)?;
    }
    within_contexts(conn, &dn)
}

/// A DN below none of the naming contexts: slapd without a default
/// referral answers unwillingToPerform.
fn within_contexts(conn: &Conn, dn: &shards::dn::Dn) -> Result<()> {
    match conn.ctx.within_suffix(dn) {
        true => Ok(()),
        false => Err(Error::unwilling("no global superior knowledge")),
    }
}

/// The one mapping from an operation's outcome to an `LDAPResult`.
pub fn result(res: Result<()>) -> LdapResult {
    match res {
        Ok(()) => LdapResult {
            code: LdapResultCode::Success,
            matcheddn: String::new(),
            message: String::new(),
            referral: vec![],
        },
        Err(e) => LdapResult { code: e.code, matcheddn: e.matched, message: e.message, referral: e.referral },
    }
}

fn op_name(op: &LdapOp) -> &'static str {
    match op {
        LdapOp::BindResponse(_) => "BindResponse",
        LdapOp::SearchResultEntry(_) | LdapOp::SearchResultDone(_) | LdapOp::SearchResultReference(_) => {
            "a search result"
        }
        LdapOp::IntermediateResponse(_) => "IntermediateResponse",
        _ => "this message",
    }
}

/// The filters of a request (a search's, an Assertion control's, Matched
/// Values' items, whose terms count together) within
/// `limits.max_filter_depth` and `limits.max_filter_terms`: what one
/// evaluation costs per entry is bounded before any entry is read.
fn check_filters(limits: &crate::config::Limits, op: &LdapOp, ctrls: &controls::Controls) -> Result<()> {
    let search = match op {
        LdapOp::SearchRequest(req) => Some(&req.filter),
        _ => None,
    };
    let values = ctrls.matched_values.as_deref().unwrap_or_default();
    let singles = search.into_iter().chain(ctrls.assertion.as_ref());
    if singles.clone().chain(values).any(|f| shards::filter::depth(f) > limits.max_filter_depth) {
        return Err(Error::new(LdapResultCode::AdminLimitExceeded, "filter nesting is too deep"));
    }
    let value_terms = values.iter().map(shards::filter::terms).sum();
    for terms in singles.map(shards::filter::terms).chain([value_terms]) {
        if limits.max_filter_terms > 0 && terms > limits.max_filter_terms {
            return Err(Error::new(
                LdapResultCode::AdminLimitExceeded,
                format!(
                    "the filter has {terms} terms, more than {} (limits.max_filter_terms)",
                    limits.max_filter_terms
                ),
            ));
        }
    }
    Ok(())
}

/// The names a request gives within `limits.max_dn_rdns`, and an add's
/// attributes within `limits.max_entry_attributes`: absurd shapes are
/// refused before any lookup or check that each would cost (issue 17),
/// after what slapd answers first (an anonymous write's 8 or 50, a denied
/// proxy's 123). A name that makes one (an add's, a rename's new superior
/// with the new RDN) binds everyone; one that names an existing entry
/// binds all but the root DN, who can still reach what a lowered limit,
/// an import or a peer left deeper.
fn check_shape(limits: &crate::config::Limits, op: &LdapOp, acting: &Identity) -> Result<()> {
    let root = matches!(acting, Identity::Root(_));
    let existing = |dn| (!root).then_some((dn, 0));
    let names: [Option<(&str, usize)>; 2] = match op {
        LdapOp::SearchRequest(r) => [existing(r.base.as_str()), None],
        LdapOp::AddRequest(r) => {
            add::check_attribute_count(limits, r.attributes.len())?;
            [Some((&r.dn, 0)), None]
        }
        LdapOp::ModifyRequest(r) => [existing(r.dn.as_str()), None],
        LdapOp::DelRequest(dn) => [existing(dn.as_str()), None],
        LdapOp::CompareRequest(r) => [existing(r.dn.as_str()), None],
        LdapOp::ModifyDNRequest(r) => [existing(r.dn.as_str()), r.new_superior.as_deref().map(|s| (s, 1))],
        _ => return Ok(()),
    };
    let most = limits.max_dn_rdns;
    if most == 0 {
        return Ok(());
    }
    for (name, more) in names.into_iter().flatten() {
        if let Some(rdns) = rdns_past(name, most.saturating_sub(more)) {
            return Err(too_deep(rdns + more, most));
        }
    }
    Ok(())
}

/// adminLimitExceeded for a DN of `rdns` RDNs, past `most`.
pub fn too_deep(rdns: usize, most: usize) -> Error {
    let why = format!("the DN names {rdns} RDNs, more than {most} (limits.max_dn_rdns)");
    Error::new(LdapResultCode::AdminLimitExceeded, why)
}

/// How many RDNs `text` holds when that is more than `most`; `None` when
/// it is not, or when it is no DN (its operation says so). An RDN takes
/// two bytes at least (`a=`) and a separator one, which bounds a usual
/// name's RDNs by its length alone; past that, counting the separators
/// bounds them, so a name is parsed here only when it may be too deep.
fn rdns_past(text: &str, most: usize) -> Option<usize> {
    if (text.len() + 1) / 3 <= most {
        return None;
    }
    let bound = 1 + text.bytes().filter(|b| matches!(b, b',' | b';')).count();
    if bound <= most {
        return None;
    }
    let rdns = shards::dn::Dn::parse(text).ok()?.depth();
    (rdns > most).then_some(rdns)
}

/// What any Bind does first, as slapd's `do_bind`, however it ends
/// (refused for its controls or its DN included): the earlier
/// authentication ends, and the searches still running end unanswered.
pub fn bind_begins(conn: &Conn) {
    bind_starts(conn);
    conn.publish_identity();
}

/// `bind_begins` for a bind that publishes its outcome's identity in the
/// same turn (`bind::handle`): one store for `ctl connections`, not two.
pub fn bind_starts(conn: &Conn) {
    *conn.identity.borrow_mut() = Identity::Anonymous;
    conn.sasl_in_progress.set(false);
    abandon_searches(conn);
}

/// RFC 4511 §4.2.1: what is outstanding completes or is abandoned before
/// a Bind: the searches still running end unanswered, so none goes on
/// under the identity before it (a persistent search streaming with the
/// old rights). Writes finish.
fn abandon_searches(conn: &Conn) {
    for (flag, _) in conn.running.borrow().values() {
        flag.raise();
    }
}

/// A DN from a request, checked as slapd checks one (`Dn::validate`).
pub fn parse_dn(text: &str) -> Result<shards::dn::Dn> {
    let dn = shards::dn::Dn::parse(text)?;
    dn.validate()?;
    Ok(dn)
}

/// The longest existing ancestor of `dn`, for `matchedDN`; none when the
/// requester may not know of it (no `disclose` on its `entry`), as slapd.
///
/// Below a suffix, existence is monotone along the ancestor chain (an
/// entry's parent exists), so the depth is found by bisection: a hostile
/// DN of two thousand RDNs costs a dozen lookups, not two thousand.
pub fn matched_entry(conn: &Conn, identity: &Identity, dn: &shards::dn::Dn) -> Option<shards::dn::Dn> {
    let found = nearest_entry(&conn.ctx, dn)?;
    disclosed(conn, identity, &found.key()).then_some(found)
}

/// The nearest entry above `dn` that exists, within its naming context,
/// whoever asks: a bisection over the DN's ancestors.
pub fn nearest_entry(ctx: &crate::ctx::Ctx, dn: &shards::dn::Dn) -> Option<shards::dn::Dn> {
    let shard = &ctx.shard;
    let exists = |key: &[u8]| shard.exists(key);
    let Some(top) = ctx.suffixes.iter().filter(|s| dn.is_within(s)).map(|s| s.depth()).max() else {
        return None;
    };
    if dn.depth() <= top || !exists(&dn.ancestor(top).key()).unwrap_or(false) {
        return None;
    }
    // The ancestor of depth `lo` exists; none at `hi` or deeper is known to.
    let (mut lo, mut hi) = (top, dn.depth());
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if exists(&dn.ancestor(mid).key()).unwrap_or(false) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(dn.ancestor(lo))
}

/// Whether the requester may learn that the entry with storage `key`
/// exists (`disclose` on its `entry`); always under no access rules.
pub fn disclosed(conn: &Conn, identity: &Identity, key: &[u8]) -> bool {
    let live = conn.ctx.live();
    conn.access(&live, identity).is_none_or(|a| {
        access::require(&a, &conn.ctx.shard, key, &[(crate::acl::Attr::Entry, "entry")], crate::acl::Level::Disclose)
            .is_ok()
    })
}

/// The identity a Proxied Authorization control (RFC 4370) names, when
/// the requester may act as it. As slapd under its default `authz-policy
/// none`: anonymous may not use it; the root DN may act as any DN of its
/// own naming contexts; a user may name itself or anonymous. The authzId is `dn:DN` (`dn:` or
/// empty: anonymous); the
/// `u:NAME` form needs an authz mapping coredir does not have. Every
/// refusal is authorizationDenied (123), as slapd's.
pub fn proxied(conn: &Conn, authzid: &[u8]) -> Result<Identity> {
    let denied = |why: &str| Error::new(LdapResultCode::AuthorizationError, format!("proxied authorization: {why}"));
    let text = std::str::from_utf8(authzid).map_err(|_| denied("the authzId is not UTF-8"))?;
    let bound = conn.identity.borrow().clone();
    if matches!(bound, Identity::Anonymous) {
        return Err(denied("anonymous may not use proxied authorization"));
    }
    let target = match text {
        "" | "dn:" => Identity::Anonymous,
        _ => {
            let Some(dn) = text.strip_prefix("dn:") else {
                return Err(denied("only dn: authorization identities are supported"));
            };
            let dn = parse_dn(dn).map_err(|_| denied("invalid DN"))?;
            crate::ops::sasl::identity_of(conn, &dn).map_err(|_| denied("invalid DN"))?
        }
    };
    let allowed = match (&bound, &target) {
        (_, Identity::Anonymous) => true,
        // As slapd: the root DN acts as any DN of its own databases, and
        // as nothing outside them (cn=Monitor, cn=Subschema, elsewhere).
        (Identity::Root(_), Identity::User(t)) => parse_dn(&t.dn).is_ok_and(|dn| conn.ctx.within_suffix(&dn)),
        (Identity::Root(_), _) => true,
        (Identity::User(b), Identity::User(t)) => b.key == t.key,
        _ => false,
    };
    if !allowed {
        return Err(denied("not authorized to act as another identity"));
    }
    Ok(target)
}

/// The DN an entry is stored under: its own RDN as the request gave it,
/// below its parent as the parent is stored. slapd's back-mdb builds every
/// DN from the stored RDNs up the tree, so a child spells its parents as
/// they are spelled whatever the request said (`cn=kid,CN=K,ou=t` is
/// stored as `cn=kid,cn=k,ou=t`). The DN as given where there is no parent
/// entry (a naming context's top; a missing parent fails the write anyway).
pub fn stored_spelling(ctx: &crate::ctx::Ctx, dn: &shards::dn::Dn) -> Result<shards::dn::Dn> {
    use shards::dn::Dn;
    let (Some(rdn), parent) = (dn.rdn(), dn.parent()) else { return Ok(dn.clone()) };
    if parent.is_root() {
        return Ok(dn.clone());
    }
    match ctx.shard.with_entry(&parent.key(), |v| Dn::parse(v.dn()))? {
        Some(Ok(stored)) => Ok(Dn::renamed(rdn.clone(), &stored)),
        _ => Ok(dn.clone()),
    }
}

/// As slapd's back-mdb answers a write on a missing entry before its
/// access checks: with the referral of a referral object above it, or
/// noSuchObject naming the nearest entry above, when the requester may
/// know of that entry. Only where the rules would disclose the entry at
/// `dn` were it there (decided by its DN alone): else a missing entry and
/// a hidden one must answer alike, and the access checks answer both (50).
/// Under no access rules, the write itself finds it missing.
/// `named`: the DN a referral names (an add's new entry, for its parent).
pub fn require_entry(conn: &Conn, identity: &Identity, dn: &shards::dn::Dn, named: &shards::dn::Dn) -> Result<()> {
    let live = conn.ctx.live();
    let Some(access) = conn.access(&live, identity) else { return Ok(()) };
    let key = dn.key();
    let (target, entry) = (crate::acl::Target { key: &key, entry: None }, crate::acl::Attr::Entry);
    // Decided by the DN alone, or not at all: a rule on the entry's content
    // could hide an existing one that a missing one would not.
    if dn.is_root() || !access.decided_by_dn(&key, entry) || !access.allows(&target, entry, crate::acl::Level::Disclose)
    {
        return Ok(());
    }
    if conn.ctx.shard.exists(&key)? {
        return Ok(());
    }
    match matched_entry(conn, identity, dn) {
        Some(at) => Err(referral::below(conn, named, &at, None)
            .unwrap_or_else(|| Error::no_such_object(&dn.to_string_form()).with_matched(at.to_string_form()))),
        None => Ok(()),
    }
}

/// Adds `matchedDN` to a `noSuchObject` error, or makes it the referral
/// of a referral object above (`referral::below`).
pub fn with_matched(conn: &Conn, identity: &Identity, dn: &shards::dn::Dn, e: Error) -> Error {
    with_matched_in(conn, identity, dn, dn, e, None)
}

/// `with_matched` for a search: its referral's URLs carry `scope`, and
/// name `named`, the DN the request named (an alias on the way may have
/// led to `dn`), as slapd's do.
pub fn with_matched_in(
    conn: &Conn,
    identity: &Identity,
    dn: &shards::dn::Dn,
    named: &shards::dn::Dn,
    e: Error,
    scope: Option<&str>,
) -> Error {
    if e.code != LdapResultCode::NoSuchObject || !e.matched.is_empty() {
        return e;
    }
    match matched_entry(conn, identity, dn) {
        Some(at) => referral::below(conn, named, &at, scope).unwrap_or_else(|| e.with_matched(at.to_string_form())),
        None => e,
    }
}
