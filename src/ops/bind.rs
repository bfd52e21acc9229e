//! Bind (RFC 4511 §4.2, RFC 4513 §5.1): anonymous and simple binds; SASL
//! EXTERNAL on the local socket is `sasl`'s.
//!
//! The root DN is checked against its configured hash and needs no entry.
//! Any other DN binds with a `userPassword` value of its entry. A DN with an
//! empty password is an unauthenticated bind, refused as RFC 4513 §5.1.2
//! advises. A failed bind leaves the connection anonymous.

use crate::acl::{Access, Level, Subject, Target};
use crate::conn::{Bound, Conn, Identity};
use crate::ops::result;
use crate::ops::sasl::Sasl;
use ldap3_proto::proto::{LdapBindCred, LdapBindRequest, LdapResult};
use ldap3_proto::LdapResultCode;
use shards::dn::key_of;
use shards::matching::is_user_password;
use shards::{password, Error, Result};
use std::rc::Rc;

/// What a bind decided: now, or after a slow hash is verified off the reactor.
pub enum Outcome {
    Now(LdapResult),
    Later(SlowBind),
}

/// A bind waiting for a key-stretching verification (PBKDF2, Argon2,
/// crypt): milliseconds of CPU that must not stall the reactor's other
/// connections.
pub struct SlowBind {
    identity: Identity,
    check: Check,
}

/// A password to verify against stored values off the reactor: what the
/// blocking thread needs (and nothing reactor-local). Compare uses it too.
pub struct Check {
    hashes: Vec<Vec<u8>>,
    password: Vec<u8>,
    policy: password::Policy,
}

impl Check {
    pub fn new(hashes: Vec<Vec<u8>>, password: &[u8], policy: password::Policy) -> Check {
        Check { hashes, password: password.to_vec(), policy }
    }

    /// At most `MOST_VERIFIED` key stretchings per operation: each is
    /// bounded by the policy, but a user who stored a thousand such hashes
    /// would make every bind attempt as them cost a thousand.
    fn verify(&self) -> bool {
        let mut slow = 0;
        self.hashes.iter().any(|h| {
            if password::is_slow(h) {
                if slow == crate::ops::modify::MOST_VERIFIED {
                    return false;
                }
                slow += 1;
            }
            self.policy.verify(h, &self.password)
        })
    }

    /// Verifies on the shard's blocking pool (`Ctx::password_work`);
    /// `None` when the client has gone before its turn.
    pub async fn run(self, conn: &Conn) -> Option<bool> {
        conn.ctx.password_check(conn.id, || conn.info.hung_up(), move || self.verify()).await
    }
}

/// `first_step`: a SASL bind whose credentials field is absent (`ops::sasl`).
pub fn handle(conn: &Conn, req: &LdapBindRequest, first_step: bool) -> Outcome {
    // Anonymous first (RFC 4511 §4.2.1), the running searches ended;
    // published below with the outcome.
    crate::ops::bind_starts(conn);
    let outcome = match authenticate(conn, req, first_step) {
        Ok(Step::Done(id)) => {
            *conn.identity.borrow_mut() = id;
            Outcome::Now(result(Ok(())))
        }
        Ok(Step::Challenge) => {
            conn.sasl_in_progress.set(true);
            let message = crate::ops::sasl::CHALLENGE.to_string();
            Outcome::Now(LdapResult { code: LdapResultCode::SaslBindInProgress, message, ..result(Ok(())) })
        }
        Ok(Step::Slow(p)) => Outcome::Later(p),
        Err(e) => Outcome::Now(result(Err(e))),
    };
    conn.publish_identity();
    outcome
}

/// Verifies a pending bind on a blocking thread, then sets the identity;
/// `None` when the client went before its turn (nothing is answered).
pub async fn finish(conn: &Conn, pending: SlowBind) -> Option<LdapResult> {
    if pending.check.run(conn).await? {
        conn.set_identity(pending.identity);
        Some(result(Ok(())))
    } else {
        Some(result(Err(invalid())))
    }
}

/// The mechanism slapd's log names for a bind (`mech=`).
pub fn mechanism(req: &LdapBindRequest) -> &'static str {
    match &req.cred {
        LdapBindCred::SASL(s) if s.mechanism.eq_ignore_ascii_case(crate::ops::sasl::EXTERNAL) => "EXTERNAL",
        LdapBindCred::SASL(_) => "SASL",
        _ => "SIMPLE",
    }
}

enum Step {
    Done(Identity),
    /// A SASL first step, answered with an empty challenge.
    Challenge,
    Slow(SlowBind),
}

fn authenticate(conn: &Conn, req: &LdapBindRequest, first_step: bool) -> Result<Step> {
    // The name first, as slapd parses it before anything else (its
    // version too): an invalid one is invalidDNSyntax even without a
    // password.
    let key = match req.dn.is_empty() {
        true => None,
        false => Some(key_of(&req.dn)?),
    };
    // As slapd: version 2 only with `allow bind_v2`; the session then
    // goes on as version 3 would (DNs and results are the same here).
    if req.version != 3 && !(req.version == 2 && conn.ctx.allow_bind_v2) {
        // The name checked whole (types too) first, as slapd's
        // dnPrettyNormal: only here, off the bind's hot path.
        if !req.dn.is_empty() {
            crate::ops::parse_dn(&req.dn)?;
        }
        return Err(Error::protocol("requested protocol version not allowed"));
    }
    // Any octets (RFC 4511 §4.2): a Latin-1 password binds as in slapd.
    let password = match &req.cred {
        LdapBindCred::Simple(p) => shards::octets::unescape(p),
        LdapBindCred::SASL(s) => {
            return crate::ops::sasl::authenticate(conn, s, first_step).map(|step| match step {
                Sasl::Done(id) => Step::Done(id),
                Sasl::Challenge => Step::Challenge,
            })
        }
        _ => return Err(Error::new(LdapResultCode::AuthMethodNotSupported, "authentication method not supported")),
    };
    let Some(key) = key else {
        return if password.is_empty() { Ok(Step::Done(Identity::Anonymous)) } else { Err(invalid()) };
    };
    if password.is_empty() {
        return Err(Error::unwilling("unauthenticated bind (DN with no password) disallowed"));
    }
    crate::ops::check_confidential(conn)?;
    let ctx = &conn.ctx;
    let policy = ctx.password_policy;
    if key == ctx.root_key {
        // Bound as slapd's pretty form of the DN given (whoami, logs).
        let identity = Identity::Root(Rc::from(shards::dn::Dn::parse(&req.dn)?.pretty()?.as_str()));
        let hash = ctx.root_password_hash.as_bytes();
        if password::is_slow(hash) {
            let check = Check::new(vec![hash.to_vec()], &password, policy);
            return Ok(Step::Slow(SlowBind { identity, check }));
        }
        return if policy.verify(hash, &password) { Ok(Step::Done(identity)) } else { Err(invalid()) };
    }
    // A bind is decided as anonymous (as slapd): `auth` on userPassword.
    let subject = Subject { key: None, tls_ssf: conn.tls_ssf.get(), transport_ssf: conn.transport_ssf };
    let live = ctx.live();
    let access = Access::new(&live.acl, subject, &*ctx.shard);
    let password_class = live.acl.user_password();
    let bound =
        |e: &shards::entry::EntryView<'_>| Identity::User(Rc::new(Bound { dn: e.dn().to_string(), key: key.clone() }));
    // Checked in place in the snapshot: a bind copies nothing but the DN,
    // unless a slow hash has to go to a blocking thread.
    let step = ctx.shard.with_entry(&key, |e| {
        // As slapd's back-mdb: a subentry, an alias or a referral object
        // is no identity to bind as, whatever it holds (none is looked at
        // until some store has held one).
        use shards::index::Marked;
        let stands_for_another =
            [Marked::Subentry, Marked::Alias, Marked::Referral].into_iter().any(|m| m.may_exist() && m.marks(e));
        if stands_for_another || !access.allows(&Target { key: &key, entry: Some(e) }, password_class, Level::Auth) {
            return None;
        }
        // One walk of the attributes: a fast hash that matches decides;
        // else, with any slow one, the slow ones go to a blocking thread
        // (`Check`).
        // `userPassword` itself: as slapd, a value under a subtype
        // (`userPassword;lang-en`) is no password to bind with, else a
        // user could keep one an administrator's reset leaves behind.
        let values = || {
            e.attrs()
                .filter(|a| is_user_password(a.name) && a.name.len() == "userPassword".len())
                .flat_map(|a| a.vals())
        };
        let mut slow = false;
        for v in values() {
            match policy.verify_fast(v, &password) {
                None => slow = true,
                Some(true) => return Some(Step::Done(bound(e))),
                Some(false) => {}
            }
        }
        if slow {
            // The fast ones were just tried.
            let check =
                Check::new(values().filter(|v| password::is_slow(v)).map(<[u8]>::to_vec).collect(), &password, policy);
            return Some(Step::Slow(SlowBind { identity: bound(e), check }));
        }
        None
    })?;
    if step.is_none() {
        // No entry there: a DN slapd would refuse is invalidDNSyntax (34),
        // as slapd checks every bind DN; none such can exist to bind as.
        crate::ops::parse_dn(&req.dn)?;
    }
    step.flatten().ok_or_else(invalid)
}

pub fn invalid() -> Error {
    Error::new(LdapResultCode::InvalidCredentials, "")
}
