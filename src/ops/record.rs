//! One request from arrival to result: counted in the shard's metrics
//! (initiated, completed by result code, latency) and written to the
//! access log in slapd's `stats` form, from the same two calls.

use crate::accesslog::{self, LogLevel, V};
use crate::conn::Conn;
use crate::stats::Op;
use ldap3_proto::proto::{LdapBindResponse, LdapExtendedResponse, LdapOp, LdapResult};
use ldap3_proto::LdapResultCode;
use std::time::Instant;

/// An operation as its log lines and metrics follow it.
pub struct Operation {
    pub op: Op,
    /// The connection's operation number (slapd's `op=`).
    opn: u64,
    started: Instant,
}

/// Starts recording a request; `None` when the message is not a request.
pub fn begin(conn: &Conn, req: &LdapOp) -> Option<Operation> {
    let op = Op::of(req)?;
    let opn = conn.next_op();
    conn.ctx.metrics.initiated(op);
    // One refused between two steps of a SASL bind is not read, as in
    // slapd: only its result is logged.
    if accesslog::enabled(LogLevel::Stats) && !crate::ops::sasl::refuses(conn, op) {
        log_request(conn, opn, req);
    }
    Some(Operation { op, opn, started: Instant::now() })
}

/// Logs who a Proxied Authorization control made the operation run as
/// (slapd's `PROXYAUTHZ dn="…"` line).
pub fn proxied(conn: &Conn, rec: &Operation, dn: &str) {
    if accesslog::enabled(LogLevel::Stats) {
        conn.ctx.log.line(conn.id, Some(rec.opn), "PROXYAUTHZ", &[("dn", V::Quoted(dn))]);
    }
}

/// Logs who a successful SASL EXTERNAL bind authenticated and the
/// authorization identity it asked for (slapd's `BIND authcid="…"
/// authzid="…"`, the authcid again when none was given).
pub fn sasl(conn: &Conn, rec: &Operation, authzid: &[u8]) {
    if !accesslog::enabled(LogLevel::Stats) {
        return;
    }
    let Some(authcid) = crate::ops::sasl::external_authcid(conn) else { return };
    let authzid = match authzid.is_empty() {
        true => std::borrow::Cow::Borrowed(authcid.as_str()),
        false => String::from_utf8_lossy(authzid),
    };
    let fields = [("authcid", V::Quoted(&authcid)), ("authzid", V::Quoted(&authzid))];
    conn.ctx.log.line(conn.id, Some(rec.opn), "BIND", &fields);
}

/// Logs who a successful bind made the connection (slapd's second `BIND`
/// line: `BIND dn="…" mech=SIMPLE bind_ssf=0 ssf=…`); nothing for an
/// anonymous bind, as slapd.
pub fn bound(conn: &Conn, rec: &Operation, mech: &str) {
    if !accesslog::enabled(LogLevel::Stats) {
        return;
    }
    let identity = conn.identity.borrow();
    if identity.dn().is_empty() {
        return;
    }
    let ssf = conn.tls_ssf.get().max(conn.transport_ssf) as u64;
    let fields =
        [("dn", V::Quoted(identity.dn())), ("mech", V::Word(mech)), ("bind_ssf", V::Num(0)), ("ssf", V::Num(ssf))];
    conn.ctx.log.line(conn.id, Some(rec.opn), "BIND", &fields);
}

/// Records the result carried by a response message.
pub fn end_with(conn: &Conn, rec: &Operation, resp: &LdapOp, nentries: Option<u64>) {
    let res = match resp {
        LdapOp::BindResponse(b) => &b.res,
        LdapOp::ExtendedResponse(e) => &e.res,
        LdapOp::SearchResultDone(r)
        | LdapOp::AddResponse(r)
        | LdapOp::ModifyResponse(r)
        | LdapOp::DelResponse(r)
        | LdapOp::ModifyDNResponse(r)
        | LdapOp::CompareResult(r) => r,
        _ => return,
    };
    end(conn, rec, &res.code, &res.message, nentries);
}

/// Records an operation's end.
pub fn end(conn: &Conn, rec: &Operation, code: &LdapResultCode, text: &str, nentries: Option<u64>) {
    end_code(conn, rec, code.clone() as i64, text, nentries)
}

/// `end` with a result code outside ldap3_proto's list (16654).
pub fn end_code(conn: &Conn, rec: &Operation, code: i64, text: &str, nentries: Option<u64>) {
    let elapsed = rec.started.elapsed();
    conn.ctx.metrics.completed(rec.op, code, elapsed);
    if let Some(n) = nentries {
        conn.ctx.metrics.entries_sent.increment(n);
    }
    if !accesslog::enabled(LogLevel::Stats) || matches!(rec.op, Op::Unbind | Op::Abandon) {
        return;
    }
    let tag = match rec.op {
        Op::Bind => 97,
        Op::Search => 101,
        Op::Modify => 103,
        Op::Add => 105,
        Op::Delete => 107,
        Op::Modrdn => 109,
        Op::Compare => 111,
        _ => 120,
    };
    let event = if rec.op == Op::Search { "SEARCH RESULT" } else { "RESULT" };
    let err = code as u64;
    let mut fields = vec![
        ("tag", V::Num(tag)),
        ("err", V::Num(err)),
        ("qtime", V::Secs(0.0)),
        ("etime", V::Secs(elapsed.as_secs_f64())),
    ];
    if let Some(n) = nentries {
        fields.push(("nentries", V::Num(n)));
    }
    fields.push(("text", V::Word(text)));
    conn.ctx.log.line(conn.id, Some(rec.opn), event, &fields);
}

/// A request `strict` answered before it was decoded (a DN that is not
/// UTF-8, a control it cannot take), by its response's tag: counted and
/// logged like one that ran (slapd's `RESULT` line), so that an operator
/// sees it.
pub fn refused(conn: &Conn, response_tag: u8, code: &LdapResultCode, text: &str) {
    let op = match response_tag {
        0x61 => Op::Bind,
        0x65 => Op::Search,
        0x67 => Op::Modify,
        0x69 => Op::Add,
        0x6B => Op::Delete,
        0x6D => Op::Modrdn,
        0x6F => Op::Compare,
        _ => Op::Extended,
    };
    conn.ctx.metrics.initiated(op);
    end(conn, &Operation { op, opn: conn.next_op(), started: Instant::now() }, code, text, None);
}

impl Op {
    /// Which request a message is (`None`: not a request): the one match
    /// over request types that metrics, the access log, control checks,
    /// admission and error responses all start from.
    pub fn of(req: &LdapOp) -> Option<Op> {
        Some(match req {
            LdapOp::BindRequest(_) => Op::Bind,
            LdapOp::UnbindRequest => Op::Unbind,
            LdapOp::SearchRequest(_) => Op::Search,
            LdapOp::CompareRequest(_) => Op::Compare,
            LdapOp::AddRequest(_) => Op::Add,
            LdapOp::DelRequest(_) => Op::Delete,
            LdapOp::ModifyRequest(_) => Op::Modify,
            LdapOp::ModifyDNRequest(_) => Op::Modrdn,
            LdapOp::AbandonRequest(_) => Op::Abandon,
            LdapOp::ExtendedRequest(_) => Op::Extended,
            _ => return None,
        })
    }

    /// Whether the request may run as a task of its own (and so counts
    /// toward `limits.max_pending`): a Compare and an extended operation
    /// may wait for key stretching.
    pub fn spawns(self) -> bool {
        !matches!(self, Op::Bind | Op::Unbind | Op::Abandon)
    }

    /// The response that carries a result for this request, if it has one.
    pub fn response(self, res: LdapResult) -> Option<LdapOp> {
        Some(match self {
            Op::Bind => LdapOp::BindResponse(LdapBindResponse { res, saslcreds: None }),
            Op::Search => LdapOp::SearchResultDone(res),
            Op::Add => LdapOp::AddResponse(res),
            Op::Modify => LdapOp::ModifyResponse(res),
            Op::Delete => LdapOp::DelResponse(res),
            Op::Modrdn => LdapOp::ModifyDNResponse(res),
            Op::Compare => LdapOp::CompareResult(res),
            Op::Extended => LdapOp::ExtendedResponse(LdapExtendedResponse { res, name: None, value: None }),
            Op::Unbind | Op::Abandon => return None,
        })
    }
}

/// The request line, as slapd writes it (credentials never appear).
fn log_request(conn: &Conn, opn: u64, req: &LdapOp) {
    let log = &conn.ctx.log;
    let line = |event: &str, fields: &[(&str, V)]| log.line(conn.id, Some(opn), event, fields);
    match req {
        LdapOp::BindRequest(b) => {
            let method = match b.cred {
                ldap3_proto::proto::LdapBindCred::Simple(_) => 128,
                _ => 163,
            };
            line("BIND", &[("dn", V::Quoted(&b.dn)), ("method", V::Num(method))]);
        }
        LdapOp::UnbindRequest => line("UNBIND", &[]),
        LdapOp::SearchRequest(s) => {
            let scope = match s.scope {
                ldap3_proto::proto::LdapSearchScope::Base => 0,
                ldap3_proto::proto::LdapSearchScope::OneLevel => 1,
                ldap3_proto::proto::LdapSearchScope::Subtree => 2,
                ldap3_proto::proto::LdapSearchScope::Children => 3,
            };
            let filter = shards::filter::to_text(&s.filter);
            let fields = [
                ("base", V::Quoted(&s.base)),
                ("scope", V::Num(scope)),
                ("deref", V::Num(s.aliases.clone() as u64)),
                ("filter", V::Quoted(&filter)),
            ];
            line("SRCH", &fields);
            if accesslog::enabled(LogLevel::Debug) && !s.attrs.is_empty() {
                line("SRCH", &[("attr", V::Word(&s.attrs.join(" ")))]);
            }
        }
        LdapOp::CompareRequest(c) => line("CMP", &[("dn", V::Quoted(&c.dn)), ("attr", V::Quoted(&c.atype))]),
        LdapOp::AddRequest(a) => line("ADD", &[("dn", V::Quoted(&a.dn))]),
        LdapOp::DelRequest(dn) => line("DEL", &[("dn", V::Quoted(dn))]),
        LdapOp::ModifyRequest(m) => {
            line("MOD", &[("dn", V::Quoted(&m.dn))]);
            if accesslog::enabled(LogLevel::Debug) {
                let attrs: Vec<&str> = m.changes.iter().map(|c| c.modification.atype.as_str()).collect();
                line("MOD", &[("attr", V::Word(&attrs.join(" ")))]);
            }
        }
        LdapOp::ModifyDNRequest(m) => {
            let mut fields = vec![
                ("dn", V::Quoted(&m.dn)),
                ("newrdn", V::Quoted(&m.newrdn)),
                ("deleteoldrdn", V::Num(m.deleteoldrdn as u64)),
            ];
            // Where a move takes the entry: without it the log names a DN
            // the entry never had.
            if let Some(superior) = &m.new_superior {
                fields.push(("newsuperior", V::Quoted(superior)));
            }
            line("MODRDN", &fields);
        }
        LdapOp::AbandonRequest(id) => line("ABANDON", &[("msg", V::Num(*id as u64))]),
        LdapOp::ExtendedRequest(e) => line("EXT", &[("oid", V::Word(&e.name))]),
        _ => {}
    }
}
