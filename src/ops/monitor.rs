//! `cn=Monitor`, with OpenLDAP back-monitor's names and shape: computed at
//! search time from the same counters as the Prometheus metrics (a parse of
//! their rendering) and the connection registry. Readable by the root DN
//! and the identities `monitor.readers` names; to anyone else it does not
//! exist (`noSuchObject`).
//!
//! - `cn=Connections` (`cn=Total`, `cn=Current`: `monitorCounter`)
//! - `cn=Operations` (`monitorOpInitiated`/`monitorOpCompleted`, in total
//!   and per type: `cn=Bind`, `cn=Search`, ...)
//! - `cn=Statistics` (`cn=Bytes`, `cn=Entries`: `monitorCounter`)
//! - `cn=Time` (`cn=Start`, `cn=Current`: `monitorTimestamp`; `cn=Uptime`)
//! - `cn=Replication` (mirror mode: the peer, each direction's state,
//!   backlog, lag, records sent and applied);
//! - `cn=Shards` (one `cn=Shard N` per shard: its operations, connections, entries' store size)

use crate::ctx::Ctx;
use crate::stats::{Op, Snapshot};
use shards::entry::{Attr, Entry};

pub const BASE: &str = "cn=Monitor";

/// Whether the DN with storage `key` is cn=Monitor or below it: keys are
/// root-first, so a look at the first RDN decides.
pub fn is_monitor_key(key: &[u8]) -> bool {
    key.split(|b| *b == shards::dn::KEY_SEPARATOR).next() == Some(b"cn=monitor")
}

fn entry(dn: String, class: &str, attrs: Vec<(&str, String)>) -> Entry {
    let cn = dn.split(',').next().and_then(|r| r.split_once('=')).map(|(_, v)| v.to_string()).unwrap_or_default();
    let mut e = Entry {
        dn,
        attrs: vec![
            Attr { name: "objectClass".into(), vals: vec![class.as_bytes().to_vec()] },
            Attr { name: "cn".into(), vals: vec![cn.into_bytes()] },
        ],
    };
    for (name, value) in attrs {
        e.attrs.push(Attr { name: name.into(), vals: vec![value.into_bytes()] });
    }
    e
}

fn generalized(secs: u64) -> String {
    time::OffsetDateTime::from_unix_timestamp(secs as i64)
        .map(|t| {
            format!(
                "{:04}{:02}{:02}{:02}{:02}{:02}Z",
                t.year(),
                t.month() as u8,
                t.day(),
                t.hour(),
                t.minute(),
                t.second()
            )
        })
        .unwrap_or_default()
}

/// Every entry of the monitor subtree, parents first.
pub fn entries(ctx: &Ctx) -> Vec<Entry> {
    let snap = Snapshot::take();
    let n = |v: f64| (v.max(0.0) as u64).to_string();
    let m = |rdn: &str| format!("{rdn},{BASE}");
    let mut out = vec![entry(
        BASE.into(),
        "monitorServer",
        vec![("monitoredInfo", format!("coredir {}", env!("CARGO_PKG_VERSION")))],
    )];
    // Connections.
    out.push(entry(m("cn=Connections"), "monitorContainer", vec![]));
    let total = snap.sum("coredir_connections_accepted_total", &[]);
    let current = ctx.shared.connections.total() as f64;
    out.push(entry(m("cn=Total,cn=Connections"), "monitorCounterObject", vec![("monitorCounter", n(total))]));
    out.push(entry(m("cn=Current,cn=Connections"), "monitorCounterObject", vec![("monitorCounter", n(current))]));
    // Operations.
    let init = |op: Option<Op>| match op {
        Some(op) => snap.sum("coredir_operations_initiated_total", &[("op", op.label())]),
        None => snap.sum("coredir_operations_initiated_total", &[]),
    };
    let done = |op: Option<Op>| match op {
        Some(op) => snap.sum("coredir_operations_completed_total", &[("op", op.label())]),
        None => snap.sum("coredir_operations_completed_total", &[]),
    };
    let op_attrs = |op| vec![("monitorOpInitiated", n(init(op))), ("monitorOpCompleted", n(done(op)))];
    out.push(entry(m("cn=Operations"), "monitorContainer", op_attrs(None)));
    for op in Op::ALL {
        out.push(entry(m(&format!("cn={},cn=Operations", op.monitor_name())), "monitorOperation", op_attrs(Some(op))));
    }
    // Statistics.
    out.push(entry(m("cn=Statistics"), "monitorContainer", vec![]));
    let bytes = snap.sum("coredir_bytes_sent_total", &[]);
    let sent = snap.sum("coredir_entries_sent_total", &[]);
    out.push(entry(m("cn=Bytes,cn=Statistics"), "monitorCounterObject", vec![("monitorCounter", n(bytes))]));
    out.push(entry(m("cn=Entries,cn=Statistics"), "monitorCounterObject", vec![("monitorCounter", n(sent))]));
    // Time.
    let now = crate::server::unix_now();
    out.push(entry(m("cn=Time"), "monitorContainer", vec![]));
    out.push(entry(m("cn=Start,cn=Time"), "monitoredObject", vec![("monitorTimestamp", generalized(ctx.started))]));
    out.push(entry(m("cn=Current,cn=Time"), "monitoredObject", vec![("monitorTimestamp", generalized(now))]));
    let uptime = now.saturating_sub(ctx.started).to_string();
    out.push(entry(m("cn=Uptime,cn=Time"), "monitoredObject", vec![("monitoredInfo", uptime)]));
    // Mirror mode.
    if ctx.shard.stamping.capture {
        let r = ctx.shared.replication.snapshot();
        let info = format!(
            "peer={} sending={} receiving={} backlog={} lag_s={:.1} sent={} applied={} refused={} verified={} \
             divergences={}",
            r.peer,
            r.outbound,
            r.inbound,
            r.backlog,
            r.lag_s,
            r.records_sent,
            r.records_applied,
            r.refused.len(),
            r.partitions_verified,
            r.divergences
        );
        out.push(entry(m("cn=Replication"), "monitoredObject", vec![("monitoredInfo", info)]));
    }
    // Shards.
    out.push(entry(m("cn=Shards"), "monitorContainer", vec![]));
    for (i, store) in ctx.shard.stores.iter().enumerate() {
        let s = i.to_string();
        let shard = [("shard", s.as_str())];
        let info = format!(
            "connections={} data_bytes={} mesh_sent={} mesh_received={}",
            ctx.shared.connections.count(i),
            store.size(),
            n(snap.sum("coredir_mesh_messages_sent_total", &shard)),
            n(snap.sum("coredir_mesh_messages_received_total", &shard)),
        );
        let attrs = vec![
            ("monitorOpInitiated", n(snap.sum("coredir_operations_initiated_total", &shard))),
            ("monitorOpCompleted", n(snap.sum("coredir_operations_completed_total", &shard))),
            ("monitoredInfo", info),
        ];
        out.push(entry(m(&format!("cn=Shard {i},cn=Shards")), "monitoredObject", attrs));
    }
    out
}
