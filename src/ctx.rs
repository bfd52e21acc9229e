//! What the connections of one shard share (`Ctx`): the shard, the live
//! settings, and what every shard shares (`Shared`). Built at start-up by
//! `server`, used by the wire (`conn`, `ops`) without depending on it.

use crate::config::{Config, Limits};
use crate::listener;
use anyhow::Result;
use shards::dn::Dn;
use shards::Shard;
use std::rc::Rc;
use std::sync::Arc;

/// What every connection of one shard shares.
pub struct Ctx {
    pub shard: Rc<Shard>,
    pub root_dn: Dn,
    /// `root_dn`'s storage key, compared with every bind's.
    pub root_key: Vec<u8>,
    pub root_password_hash: String,
    pub suffixes: Vec<Dn>,
    /// One of a mirror pair (`replication` configured).
    pub mirrored: bool,
    pub passwords: crate::config::Passwords,
    /// `passwords`' verification rules and cost limits.
    pub password_policy: shards::password::Policy,
    /// One key-stretching job at a time on this shard's blocking pool
    /// (`password_work`), in turns by connection.
    password_jobs: crate::turns::Turns,
    /// KiB of answers this shard's connections may hold queued beyond
    /// their own shares (`limits.max_queued_bytes`, `conn::Room`).
    pub queued: Rc<crate::conn::Budget>,
    /// Memory this shard's running operations may hold of their requests
    /// (`limits.max_pending_bytes`, `conn::intake`).
    pub intake: crate::conn::Intake,
    /// `server.allow_bind_v2`.
    pub allow_bind_v2: bool,
    /// `server.authz_regexp`, compiled.
    pub authz_regexp: crate::ops::sasl::AuthzRegexp,
    pub tls: Option<Arc<crate::tls::Tls>>,
    pub shared: Arc<Shared>,
    /// This shard's copy of the live settings and the generation it is of.
    live: std::cell::RefCell<Rc<Live>>,
    live_seen: std::cell::Cell<u64>,
    /// Connection counts shared by the shards' accept loops.
    pub admission: Arc<listener::Admission>,
    pub connections: Arc<crate::conn::Registry>,
    /// This shard's metric handles and access-log buffer.
    pub metrics: crate::stats::ShardMetrics,
    pub log: crate::accesslog::ShardLog,
    next_conn: std::cell::Cell<u64>,
    /// The writes and the one-level and subtree searches this shard
    /// admitted and has not finished (`admit_write`, `admit_read`).
    running: crate::ops::carries::Running,
    reading: crate::ops::carries::Running,
    /// When the process started (UNIX seconds), for cn=Monitor and status.
    pub started: u64,
}

/// What `reload` can change while serving: each shard copies it when the
/// generation moves (one relaxed load per request, no lock, no shared
/// reference count).
#[derive(Clone)]
pub struct Live {
    pub limits: Limits,
    pub unindexed_result: ldap3_proto::LdapResultCode,
    pub acl: crate::acl::Acl,
    pub tls_required: bool,
}

impl Live {
    pub fn from_config(config: &Config) -> Result<Live> {
        Ok(Live {
            limits: config.limits.clone(),
            unindexed_result: config.unindexed_result()?,
            acl: config.acl()?,
            tls_required: config.tls.required,
        })
    }
}

/// What the shards share, built once at start.
pub struct Shared {
    pub root_password_hash: String,
    pub live: arc_swap::ArcSwap<Live>,
    pub generation: std::sync::atomic::AtomicU64,
    pub tls: Option<Arc<crate::tls::Tls>>,
    pub admission: Arc<listener::Admission>,
    pub connections: Arc<crate::conn::Registry>,
    pub started: u64,
    /// Set by `drain`: listeners stop, new operations get `unavailable`.
    pub draining: std::sync::atomic::AtomicBool,
    /// Every listening socket, for `drain`.
    pub listeners: std::sync::Mutex<Vec<std::os::fd::RawFd>>,
    /// Mirror mode's state, for `ctl replication`.
    pub replication: Arc<crate::repl::Link>,
    /// Subtrees being renamed across owners (`ops::carries`).
    pub carries: crate::ops::carries::Carries,
    /// Set once shard 0 has finished the renames a crash interrupted; no
    /// shard serves before.
    pub resumed: std::sync::atomic::AtomicBool,
    /// entryUUIDs relaxed writes are setting now (`ops::add::UuidClaim`).
    pub claimed_uuids: std::sync::Mutex<std::collections::HashSet<[u8; 16]>>,
}

impl Ctx {
    /// A connection id unique in the process without a shared counter:
    /// shard `s` of `n` hands out 1000 + s, 1000 + s + n, ...
    pub fn next_conn_id(&self) -> u64 {
        let n = self.next_conn.get();
        self.next_conn.set(n + 1);
        1000 + n * self.shard.n_shards() as u64 + self.shard.id as u64
    }

    pub fn new(config: &Config, shard: Rc<Shard>, shared: &Arc<Shared>) -> Ctx {
        let shard_id = shard.id;
        let root_dn = Dn::parse(&config.directory.root_dn).expect("validated");
        Ctx {
            shard,
            root_key: root_dn.key(),
            root_dn,
            root_password_hash: shared.root_password_hash.clone(),
            suffixes: config.naming_contexts().expect("validated"),
            mirrored: config.replication.enabled(),
            passwords: config.passwords.clone(),
            password_policy: config.passwords.policy(),
            password_jobs: crate::turns::Turns::default(),
            queued: Rc::new(crate::conn::Budget::new(
                config.limits.max_queued_bytes as u64 >> 10,
                config.limits.max_queued_bytes_per_connection as u64 >> 10,
                std::time::Duration::from_secs(config.limits.write_timeout_s),
            )),
            intake: crate::conn::Intake::new(config.limits.max_pending_bytes),
            allow_bind_v2: config.server.allow_bind_v2,
            authz_regexp: crate::ops::sasl::AuthzRegexp::new(&config.server.authz_regexp).expect("validated"),
            live: std::cell::RefCell::new(Rc::new((**shared.live.load()).clone())),
            live_seen: std::cell::Cell::new(shared.generation.load(std::sync::atomic::Ordering::Acquire)),
            tls: shared.tls.clone(),
            admission: shared.admission.clone(),
            connections: shared.connections.clone(),
            metrics: crate::stats::ShardMetrics::register(shard_id),
            log: crate::accesslog::ShardLog::default(),
            next_conn: std::cell::Cell::new(0),
            running: Default::default(),
            reading: Default::default(),
            started: shared.started,
            shared: shared.clone(),
        }
    }

    /// Runs key stretching (a password verified or hashed) off the
    /// reactor, on the shard's blocking pool, one job at a time: the pool
    /// has two threads (`server::BLOCKING_THREADS`), so the shard's group
    /// commits always find one free however many binds are waiting.
    /// Connections take turns (`turns`): `owner` is the connection's id.
    pub async fn password_work<R: Send + 'static>(
        &self,
        owner: crate::turns::Owner,
        job: impl FnOnce() -> R + Send + 'static,
    ) -> R {
        self.password_check(owner, || false, job).await.expect("run unless gone")
    }

    /// `password_work` for a check whose client may have gone (`gone`) by
    /// the time its turn comes: then `None`, without running it, as slapd
    /// drops the queued operations of a connection that closed, so that
    /// clients that send a bind against a costly hash and leave cost
    /// nothing.
    pub async fn password_check<R: Send + 'static>(
        &self,
        owner: crate::turns::Owner,
        gone: impl Fn() -> bool,
        job: impl FnOnce() -> R + Send + 'static,
    ) -> Option<R> {
        if gone() {
            return None;
        }
        let turn = self.password_jobs.take(owner).await;
        if gone() {
            // Its connection's next job, at once: it has likely gone too.
            turn.again(owner);
            return None;
        }
        self.metrics.password_jobs.increment(1);
        Some(glommio::executor().spawn_blocking(job).await)
    }

    /// The live settings (limits, access rules), refreshed after a reload.
    pub fn live(&self) -> Rc<Live> {
        let generation = self.shared.generation.load(std::sync::atomic::Ordering::Acquire);
        if generation != self.live_seen.get() {
            *self.live.borrow_mut() = Rc::new((**self.shared.live.load()).clone());
            self.live_seen.set(generation);
            let patience = self.live.borrow().limits.write_timeout_s;
            self.queued.set_patience(std::time::Duration::from_secs(patience));
        }
        self.live.borrow().clone()
    }

    /// Admits a write of the entry `dn`: `busy` while a subtree rename
    /// covers it; a rename that starts before the guard is dropped waits
    /// for it (`ops::carries`).
    pub fn admit_write(&self, dn: &Dn) -> shards::Result<crate::ops::carries::Admitted<'_>> {
        self.shared.carries.admit(self.shard.id, &self.running, dn)
    }

    /// Admits a one-level or subtree search below the key `scope` (or
    /// anywhere, aliases widening it): it waits while a subtree rename
    /// overlaps it, and a rename that starts before the guard is dropped
    /// waits for it (`ops::carries`).
    pub async fn admit_read<'a>(
        &'a self,
        scope: &'a [u8],
        anywhere: bool,
        deadline: Option<std::time::Instant>,
        abandoned: &crate::ops::abandon::Abandoned,
    ) -> shards::Result<crate::ops::carries::Reading<'a>> {
        let reading = crate::ops::carries::Wanted { shard: self.shard.id, scope, anywhere, deadline };
        self.shared.carries.admit_read(&self.reading, reading, abandoned).await
    }

    pub fn is_suffix(&self, dn: &Dn) -> bool {
        self.suffixes.iter().any(|s| s == dn)
    }

    pub fn within_suffix(&self, dn: &Dn) -> bool {
        self.naming_context(dn).is_some()
    }

    /// The suffix whose naming context holds `dn`, if any (they do not
    /// nest: `Config::naming_contexts`).
    pub fn naming_context(&self, dn: &Dn) -> Option<&Dn> {
        self.suffixes.iter().find(|s| dn.is_within(s))
    }
}
