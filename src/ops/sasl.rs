//! SASL binds (RFC 4513 §5.2): the EXTERNAL mechanism, on the local
//! socket and over TLS with a client certificate.
//!
//! As slapd on `ldapi://`, EXTERNAL authenticates the client process by
//! its credentials (`SO_PEERCRED`) as
//! `gidNumber=<gid>+uidNumber=<uid>,cn=peercred,cn=external,cn=auth`;
//! over TLS, as the subject of the client's certificate, verified against
//! `tls.ca_certificate_file` (`tls.verify_client`, slapd's TLSVerifyClient),
//! e.g. `cn=client,ou=people,o=example`. `server.authz_regexp` (slapd's
//! `authz-regexp`) may map either to a directory DN: the root DN makes
//! the connection root. An authorization identity is taken as slapd
//! without `authz-policy` takes it (`authorize`). No other mechanism is
//! offered: they need a SASL password store this server does not keep.
//!
//! EXTERNAL whose credentials field is absent (not empty: libldap sends
//! an empty one) is a first step without the client's initial response,
//! as in slapd (Cyrus SASL): it is answered saslBindInProgress with an
//! empty challenge, and the client's next Bind carries its authorization
//! identity. Meanwhile any other request is refused with operationsError
//! "SASL bind in progress" (`Conn::sasl_in_progress`); an Unbind ends the
//! connection, and any Bind ends the exchange.

use crate::conn::{Bound, Conn, Identity, PeerCred};
use crate::stats::Op;
use ldap3_proto::proto::{LdapBindCred, LdapBindRequest, LdapMsg, LdapOp, SaslCredentials};
use ldap3_proto::LdapResultCode;
use shards::dn::Dn;
use shards::{Error, Result};
use std::rc::Rc;

pub const EXTERNAL: &str = "EXTERNAL";

/// slapd's text for a request that arrives between two steps of a SASL bind.
pub const IN_PROGRESS: &str = "SASL bind in progress";

/// Cyrus SASL's text with the empty challenge of a first step.
pub const CHALLENGE: &str = "SASL(0): successful result: ";

/// What a SASL bind step decided.
pub enum Sasl {
    Done(Identity),
    /// A first step: answered with an empty challenge, the next Bind decides.
    Challenge,
}

/// Whether a request of this kind is refused now: between two steps of a
/// SASL bind only a Bind is served, and an Unbind still ends the
/// connection. An Abandon is not carried out (it has no answer).
pub fn refuses(conn: &Conn, op: Op) -> bool {
    conn.sasl_in_progress.get() && !matches!(op, Op::Bind | Op::Unbind)
}

/// As slapd, before anything else of the request is looked at (`refuses`).
pub fn check(conn: &Conn, op: Op) -> Result<()> {
    match refuses(conn, op) {
        true => Err(Error::new(LdapResultCode::OperationsError, IN_PROGRESS)),
        false => Ok(()),
    }
}

/// A SASL Bind whose credentials read as empty: they may be absent, which
/// only the frame tells (`decode::sasl_credentials_absent`).
pub fn without_credentials(msg: &LdapMsg) -> bool {
    matches!(&msg.op, LdapOp::BindRequest(LdapBindRequest { cred: LdapBindCred::SASL(s), .. }) if s.credentials.is_empty())
}

/// `server.authz_regexp`: (pattern, replacement) pairs tried in order on
/// the authenticated DN; the first that matches gives the identity.
#[derive(Debug, Default)]
pub struct AuthzRegexp(Vec<(regex::Regex, String)>);

impl AuthzRegexp {
    /// Compiles the rules; says which one is wrong. Replacements that are
    /// LDAP URLs (slapd searches with them) are refused: a DN is needed.
    pub fn new(rules: &[(String, String)]) -> anyhow::Result<AuthzRegexp> {
        let mut out = Vec::with_capacity(rules.len());
        for (pattern, replacement) in rules {
            // POSIX extended, case-insensitive, as slapd compiles them.
            let re = regex::RegexBuilder::new(pattern)
                .case_insensitive(true)
                .build()
                .map_err(|e| anyhow::anyhow!("server.authz_regexp: {pattern:?}: {e}"))?;
            if replacement.get(..5).is_some_and(|s| s.eq_ignore_ascii_case("ldap:")) {
                anyhow::bail!(
                    "server.authz_regexp: {replacement:?}: LDAP URL replacements (a search for the identity) are \
                     not supported; give a DN"
                );
            }
            out.push((re, replacement.clone()));
        }
        Ok(AuthzRegexp(out))
    }

    /// The replacement of the first rule matching `dn`, its `$0`..`$9`
    /// filled from the match, as slapd expands them.
    pub fn map(&self, dn: &str) -> Option<String> {
        self.0.iter().find_map(|(re, replacement)| {
            let caps = re.captures(dn)?;
            let mut out = String::with_capacity(replacement.len());
            let mut chars = replacement.chars().peekable();
            while let Some(c) = chars.next() {
                match (c, chars.peek().and_then(|d| d.to_digit(10))) {
                    ('$', Some(n)) => {
                        chars.next();
                        out.push_str(caps.get(n as usize).map_or("", |m| m.as_str()));
                    }
                    _ => out.push(c),
                }
            }
            Some(out)
        })
    }
}

/// A SASL bind: who it authenticates, or why not (with slapd's texts,
/// which come from Cyrus SASL).
/// `first_step`: the credentials field is absent.
pub fn authenticate(conn: &Conn, sasl: &SaslCredentials, first_step: bool) -> Result<Sasl> {
    if !sasl.mechanism.eq_ignore_ascii_case(EXTERNAL) {
        return Err(no_mechanism(&format!("Couldn't find mech {}", sasl.mechanism)));
    }
    let authcid = external_authcid(conn).ok_or_else(|| no_mechanism(""))?;
    if first_step {
        return Ok(Sasl::Challenge);
    }
    authorize(conn, external(conn, &authcid)?, &sasl.credentials).map(Sasl::Done)
}

/// Who EXTERNAL would authenticate on this connection, before
/// `authz_regexp`: the client process on the local socket, the subject of
/// a verified client certificate over TLS.
pub fn external_authcid(conn: &Conn) -> Option<String> {
    match (conn.peer_cred, conn.tls_subject.borrow().as_deref()) {
        (Some(cred), _) => Some(authcid(cred)),
        (None, subject) => subject.map(str::to_string),
    }
}

/// The mechanisms a connection is offered (`supportedSASLMechanisms`).
pub fn mechanisms(conn: &Conn) -> &'static [&'static str] {
    match conn.peer_cred.is_some() || conn.tls_subject.borrow().is_some() {
        true => &[EXTERNAL],
        false => &[],
    }
}

fn no_mechanism(detail: &str) -> Error {
    Error::new(LdapResultCode::AuthMethodNotSupported, format!("SASL(-4): no mechanism available: {detail}"))
}

/// The identity EXTERNAL authenticates (`authcid`), mapped by
/// `server.authz_regexp`.
fn external(conn: &Conn, authcid: &str) -> Result<Identity> {
    let dn = match mapped(conn, authcid) {
        Some(dn) => dn,
        None => Dn::parse(authcid)?,
    };
    // The empty DN names no one (a mapping to it, say): not a user.
    if dn.is_root() {
        return Err(Error::new(
            LdapResultCode::InvalidCredentials,
            "SASL(-13): authentication failure: empty identity",
        ));
    }
    identity_of(conn, &dn)
}

/// Who a SASL or proxied authorization makes a connection act as: root
/// for the root DN; named, as slapd names it (whoami, `creatorsName`), by
/// the DN's normalized form, not as sent nor as an entry stores it.
pub(crate) fn identity_of(conn: &Conn, dn: &Dn) -> Result<Identity> {
    let key = dn.key();
    let named = dn.normalized()?;
    if key == conn.ctx.root_key {
        return Ok(Identity::Root(Rc::from(named.as_str())));
    }
    Ok(Identity::User(Rc::new(Bound { dn: named, key })))
}

/// Who EXTERNAL authenticates, before `authz_regexp`.
pub fn authcid(cred: PeerCred) -> String {
    format!("gidNumber={}+uidNumber={},cn=peercred,cn=external,cn=auth", cred.gid, cred.uid)
}

/// What `server.authz_regexp` maps `dn` to; a mapping to something that
/// is not a DN is ignored, as slapd does.
fn mapped(conn: &Conn, dn: &str) -> Option<Dn> {
    conn.ctx.authz_regexp.map(dn).and_then(|dn| Dn::parse(&dn).ok())
}

/// The identity a SASL bind asks to act as (its authzid, the credentials
/// of EXTERNAL): what slapd allows without `authz-policy`. None, or a
/// `dn:` naming the authenticated identity itself (directly or through
/// `authz_regexp`), keeps it; the root DN may name any DN; an empty `dn:`
/// is anonymous; anything else is refused with 50 and Cyrus SASL's reason.
fn authorize(conn: &Conn, identity: Identity, authzid: &[u8]) -> Result<Identity> {
    if authzid.is_empty() {
        return Ok(identity);
    }
    let refuse = |why: &str| {
        let text = format!("SASL(-14): authorization failure: {why}");
        Err(Error::new(LdapResultCode::InsufficentAccessRights, text))
    };
    let text = std::str::from_utf8(authzid).ok();
    let Some((kind, name)) = text.and_then(|t| t.split_once(':')) else {
        return refuse("Inappropriate authentication");
    };
    if kind.eq_ignore_ascii_case("u") {
        return refuse(if name.is_empty() { "Invalid syntax" } else { "not authorized" });
    }
    if !kind.eq_ignore_ascii_case("dn") {
        return refuse("Inappropriate authentication");
    }
    if name.is_empty() {
        return Ok(Identity::Anonymous);
    }
    // Checked as any DN a client gives (`dn:foo=bar` names no type).
    let Ok(dn) = crate::ops::parse_dn(name) else { return refuse("Invalid syntax") };
    let dn = mapped(conn, name).unwrap_or(dn);
    // Only `dn:` itself is anonymous: `dn: ` (blank) is refused, as slapd.
    if dn.is_root() {
        return refuse("Invalid syntax");
    }
    match &identity {
        // The root DN may act as any DN of its own naming contexts, as
        // with Proxied Authorization (slapd's one rule for both).
        Identity::Root(_) if conn.ctx.within_suffix(&dn) => identity_of(conn, &dn),
        Identity::User(bound) if dn.key() == bound.key => Ok(identity),
        _ => refuse("not authorized"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replacement_takes_the_groups_of_the_first_rule_that_matches() {
        let rules = [
            ("^gidNumber=5\\+".to_string(), "cn=five".to_string()),
            ("uidnumber=([0-9]+),cn=peercred".to_string(), "uid=u$1,ou=people,dc=example,dc=com".to_string()),
            (".*".to_string(), "cn=last".to_string()),
        ];
        let map = AuthzRegexp::new(&rules).unwrap();
        let dn = |g: u32, u: u32| format!("gidNumber={g}+uidNumber={u},cn=peercred,cn=external,cn=auth");
        assert_eq!(map.map(&dn(5, 7)).as_deref(), Some("cn=five"));
        // Case-insensitive, as slapd compiles the patterns.
        assert_eq!(map.map(&dn(1, 1000)).as_deref(), Some("uid=u1000,ou=people,dc=example,dc=com"));
        assert_eq!(AuthzRegexp::new(&rules[1..2]).unwrap().map("cn=other"), None);
        // `$` without a digit is itself; a group that took nothing is empty.
        let odd = AuthzRegexp::new(&[("(x)?cn=(a)".into(), "cn=$$2$1$".into())]).unwrap();
        assert_eq!(odd.map("cn=a").as_deref(), Some("cn=$a$"));
    }

    #[test]
    fn bad_rules_are_refused_with_their_text() {
        let err = AuthzRegexp::new(&[("(".into(), "cn=x".into())]).unwrap_err().to_string();
        assert!(err.contains("server.authz_regexp: \"(\""), "{err}");
        let url = AuthzRegexp::new(&[("x".into(), "ldap:///dc=example,dc=com??sub?(uid=$1)".into())]);
        assert!(url.unwrap_err().to_string().contains("not supported"));
    }

    #[test]
    fn the_peercred_dn_is_a_dn() {
        let dn = Dn::parse("gidNumber=0+uidNumber=0,cn=peercred,cn=external,cn=auth").unwrap();
        assert_eq!(dn.pretty().unwrap(), "gidNumber=0+uidNumber=0,cn=peercred,cn=external,cn=auth");
    }
}
