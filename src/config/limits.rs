//! `[limits]`: what one request, connection and client may cost, with
//! slapd-like defaults (`sizelimit 500`, `timelimit 3600`).

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Largest request PDU accepted after a successful bind.
    pub max_pdu_bytes: usize,
    /// Largest request PDU accepted from an anonymous connection.
    pub max_pdu_bytes_anonymous: usize,
    /// Deepest filter nesting accepted.
    pub max_filter_depth: usize,
    /// Most terms (items, ANDs, ORs, NOTs) in one filter, a search's or an
    /// Assertion control's; past it adminLimitExceeded. 0: no limit.
    pub max_filter_terms: usize,
    /// Attribute and value tests a filter may take on one entry (its terms
    /// times the entry's attributes and values: one entry of 60,000 values
    /// against 10,000 terms would hold its shard for minutes), for everyone
    /// but the root DN; past it adminLimitExceeded. 0: no limit.
    pub max_filter_tests: u64,
    /// Most RDNs in a DN a request names (a search's base, an entry to
    /// add, compare, delete, modify or rename, a new superior with the
    /// new RDN) or a move makes (the entries below the one moved): past
    /// it adminLimitExceeded before any lookup. The root DN may still name
    /// an existing entry that deep (an import, a peer or a lowered limit
    /// can leave one). slapd bounds only a DN's bytes (8 KiB, as here).
    /// 0: no limit.
    pub max_dn_rdns: usize,
    /// Most attribute descriptions (a type with its options; operational
    /// ones included) an entry may hold after an add, a modify, a rename
    /// or a password change: past it
    /// adminLimitExceeded, nothing written. slapd has no such bound.
    /// 0: no limit.
    pub max_entry_attributes: usize,
    /// Most entries below an entry that modify-DN moves with it (a subtree
    /// rename, held in memory while it runs; 389-ds bounds it too, slapd
    /// does not); past it adminLimitExceeded. 0: no limit.
    pub max_rename_entries: usize,
    /// Aliases one search may dereference in its scope (derefInSearching,
    /// derefAlways: each target a further scope, held while the search
    /// runs; slapd does not bound it); past it adminLimitExceeded. 0: no limit.
    pub max_alias_scopes: usize,
    /// Most bytes the entries of one sorted search (server-side sort, a
    /// virtual list view) may take while they are sorted; past it
    /// adminLimitExceeded. 0: no limit.
    pub max_sort_bytes: usize,
    /// Sorted searches (sort, virtual list view) one connection may have
    /// running at once (slapd's `sssvlv-maxperconn`); past it `busy`.
    pub max_sorts_per_connection: usize,
    /// Entries a search may examine without an index (everyone but the
    /// root DN), like 389-ds's look-through limit; 0 means no limit.
    pub unindexed_lookthrough: usize,
    /// The result past that limit: "adminLimitExceeded" or "unwillingToPerform".
    pub unindexed_result: String,
    /// Entries a search returns to anyone but the root DN (slapd's
    /// `sizelimit`); a client may ask for fewer. 0: no limit.
    pub size_limit: usize,
    /// Seconds a search may run for anyone but the root DN (slapd's
    /// `timelimit`); a client may ask for less. 0: no limit.
    pub time_limit_s: u64,
    /// Seconds a connection may stay idle (no request and none running)
    /// before it is closed (slapd's `idletimeout`). 0: never.
    pub idle_timeout_s: u64,
    /// Seconds a request may take to arrive once its first bytes have: a
    /// connection holding a partial request longer is closed. 0: never.
    /// slapd has no such limit (with `idletimeout 0`, a client sending a
    /// request a byte a minute holds its connection and buffer for ever).
    pub request_timeout_s: u64,
    /// Searches and writes one anonymous connection may have running at
    /// once (slapd's `conn_max_pending`); past it `busy`. 0: no limit.
    pub max_pending: usize,
    /// The same once bound (slapd's `conn_max_pending_auth`).
    pub max_pending_auth: usize,
    /// Seconds a client may leave a response unread before it is
    /// disconnected (slapd's `writetimeout`); also the window in which a
    /// client holding part of its shard's `max_queued_bytes` must read as
    /// much as it holds while another connection waits for it; 0: never.
    pub write_timeout_s: u64,
    /// Bytes of answers the connections of one shard may hold queued for
    /// clients that have not read them, together (read at start). Each
    /// connection holds up to 64 KiB of its own beyond it, and at most
    /// `max_queued_bytes_per_connection` in all; past them its operations
    /// wait for the client to read.
    /// slapd's threads block on such a client instead.
    pub max_queued_bytes: usize,
    /// Bytes of answers one connection may hold queued for a client that
    /// has not read them (read at start): past it its operations wait for
    /// the client to read. An answer larger than this waits for an empty
    /// queue, so one entry of any size can still be sent.
    pub max_queued_bytes_per_connection: usize,
    /// Memory the requests of one connection's running operations may
    /// hold (searches waiting for their client to read, writes for their
    /// commit), estimated from their BER before they are decoded (a list
    /// of short names takes about 40 times its bytes); past it the
    /// connection's next request waits, unread, for one to end, and is
    /// answered `busy` after `request_timeout_s` (a persistent search never
    /// ends on its own; 60 s when `request_timeout_s` is 0). The first
    /// 256 KiB are always taken; a request on a connection with none
    /// running is bounded by the shard's budget alone, all of it at most,
    /// so one of several MB may wait (and be answered `busy`) while
    /// others' operations hold the budget; at least 262144.
    pub max_pending_bytes_per_connection: usize,
    /// The same for all the connections of one shard together (read at
    /// start), beyond each connection's first request.
    pub max_pending_bytes: usize,
    /// Largest an entry may become by a modify (its stored form), as
    /// back-mdb's `maxentrysize`; past it adminLimitExceeded. Each change
    /// of an entry costs its owner in proportion to its size. 0: no limit.
    pub max_entry_bytes: usize,
    /// Connections open at once in this process; past it new ones get a
    /// Notice of Disconnection (`busy`). 0: no limit.
    pub max_connections: usize,
    /// The same per client IP address. 0: no limit.
    pub max_connections_per_ip: usize,
    /// Per-identity overrides of `size_limit` and `time_limit_s`, in
    /// slapd's `limits` syntax: `'<who> size=N|unlimited time=N|unlimited'`
    /// with `<who>` = anonymous, users, dn.<style>=DN or group=DN; the
    /// first that matches applies.
    pub by_identity: Vec<String>,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_pdu_bytes: 4 << 20,
            max_pdu_bytes_anonymous: 256 << 10,
            max_filter_depth: 64,
            max_filter_terms: 10_000,
            max_filter_tests: 1_000_000,
            max_dn_rdns: 128,
            max_entry_attributes: 1000,
            max_rename_entries: 10_000,
            max_alias_scopes: 10_000,
            max_sort_bytes: 64 << 20,
            max_sorts_per_connection: 5,
            unindexed_lookthrough: 100_000,
            unindexed_result: "adminLimitExceeded".into(),
            size_limit: 500,
            time_limit_s: 3600,
            idle_timeout_s: 0,
            request_timeout_s: 60,
            max_pending: 100,
            max_pending_auth: 1000,
            write_timeout_s: 60,
            max_queued_bytes: 64 << 20,
            max_queued_bytes_per_connection: 4 << 20,
            max_pending_bytes_per_connection: 16 << 20,
            max_pending_bytes: 64 << 20,
            max_entry_bytes: 32 << 20,
            max_connections: 0,
            max_connections_per_ip: 0,
            by_identity: Vec::new(),
        }
    }
}
