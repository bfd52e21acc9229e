//! Counters and latency histograms through the `metrics` facade, rendered by
//! metrics-exporter-prometheus (no HTTP server of its own).
//!
//! Each shard registers its own labelled handles (`shard="N"`) on its own
//! thread when it starts; a request only increments a handle it already
//! holds (one uncontended atomic add), never looks a name up. Result-code
//! counters are registered the first time a shard sees that (operation,
//! code) pair. `ctl`, `cn=Monitor` and `/metrics` all read the same
//! counters, through `Snapshot`, a parse of the rendered exposition.

use metrics::{Counter, Gauge, Histogram, Key, Label, Level, Metadata};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::Duration;

/// LDAP operations as slapd's `cn=Operations` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Bind,
    Unbind,
    Search,
    Compare,
    Add,
    Delete,
    Modify,
    Modrdn,
    Abandon,
    Extended,
}

impl Op {
    pub const ALL: [Op; 10] = [
        Op::Bind,
        Op::Unbind,
        Op::Search,
        Op::Compare,
        Op::Add,
        Op::Delete,
        Op::Modify,
        Op::Modrdn,
        Op::Abandon,
        Op::Extended,
    ];

    /// The label value (`op="search"`).
    pub fn label(self) -> &'static str {
        match self {
            Op::Bind => "bind",
            Op::Unbind => "unbind",
            Op::Search => "search",
            Op::Compare => "compare",
            Op::Add => "add",
            Op::Delete => "delete",
            Op::Modify => "modify",
            Op::Modrdn => "modrdn",
            Op::Abandon => "abandon",
            Op::Extended => "extended",
        }
    }

    /// slapd's `cn=Operations` child name.
    pub fn monitor_name(self) -> &'static str {
        match self {
            Op::Bind => "Bind",
            Op::Unbind => "Unbind",
            Op::Search => "Search",
            Op::Compare => "Compare",
            Op::Add => "Add",
            Op::Delete => "Delete",
            Op::Modify => "Modify",
            Op::Modrdn => "Modrdn",
            Op::Abandon => "Abandon",
            Op::Extended => "Extended",
        }
    }
}

/// Latency buckets (seconds): Prometheus histograms aggregate across
/// shards and processes, summaries do not.
const BUCKETS: &[f64] =
    &[0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the Prometheus recorder for this process (once; later calls
/// keep the first). `labels` are added to every series (`node`).
pub fn install(labels: &[(&str, String)]) -> anyhow::Result<&'static PrometheusHandle> {
    if let Some(h) = HANDLE.get() {
        return Ok(h);
    }
    let batch = metrics_exporter_prometheus::Matcher::Full("coredir_commit_batch_size".into());
    let mut builder = PrometheusBuilder::new()
        .set_buckets(BUCKETS)?
        .set_buckets_for_metric(batch, &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0])?;
    for (k, v) in labels {
        builder = builder.add_global_label(*k, v.clone());
    }
    let handle = builder.install_recorder()?;
    let _ = HANDLE.set(handle);
    Ok(HANDLE.get().expect("set just now"))
}

/// The Prometheus text exposition of every series ('' before `install`).
pub fn render() -> String {
    HANDLE.get().map(|h| h.render()).unwrap_or_default()
}

/// Histogram upkeep; the server calls it periodically from its signal thread.
pub fn upkeep() {
    if let Some(h) = HANDLE.get() {
        h.run_upkeep();
    }
}

static META: Metadata<'static> = Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

fn key(name: &'static str, labels: Vec<Label>) -> Key {
    Key::from_parts(name, labels)
}

fn shard_label(shard: usize) -> Label {
    Label::new("shard", shard.to_string())
}

pub fn counter(name: &'static str, shard: usize, extra: &[(&'static str, &str)]) -> Counter {
    let mut labels = vec![shard_label(shard)];
    labels.extend(extra.iter().map(|(k, v)| Label::new(*k, v.to_string())));
    metrics::with_recorder(|r| r.register_counter(&key(name, labels), &META))
}

pub fn gauge(name: &'static str, shard: usize) -> Gauge {
    metrics::with_recorder(|r| r.register_gauge(&key(name, vec![shard_label(shard)]), &META))
}

pub fn histogram(name: &'static str, shard: usize, extra: &[(&'static str, &str)]) -> Histogram {
    let mut labels = vec![shard_label(shard)];
    labels.extend(extra.iter().map(|(k, v)| Label::new(*k, v.to_string())));
    metrics::with_recorder(|r| r.register_histogram(&key(name, labels), &META))
}

/// One shard's request-path handles.
pub struct ShardMetrics {
    shard: usize,
    initiated: Vec<Counter>,
    latency: Vec<Histogram>,
    /// `(op, code)` -> handle, filled on first use.
    completed: RefCell<Vec<Option<Counter>>>,
    pub bytes_in: Counter,
    pub bytes_out: Counter,
    pub entries_sent: Counter,
    pub accepted: Counter,
    pub open: Gauge,
    /// Rounds of reading the changelog made by persistent sync searches:
    /// one per wake-up that found work, none while the directory is idle
    /// (on a mirror pair, one a second per search).
    pub syncrepl_rounds: Counter,
    /// Key-stretching jobs run on the blocking pool: binds and compares
    /// against PBKDF2, Argon2 or crypt hashes, and the hashing of written
    /// passwords.
    pub password_jobs: Counter,
}

/// Result codes above this share one counter (`code="other"`).
const MAX_CODE: usize = 128;

impl ShardMetrics {
    /// Registers the shard's handles; call on the shard's own thread.
    pub fn register(shard: usize) -> ShardMetrics {
        ShardMetrics {
            shard,
            initiated: Op::ALL
                .iter()
                .map(|op| counter("coredir_operations_initiated_total", shard, &[("op", op.label())]))
                .collect(),
            latency: Op::ALL
                .iter()
                .map(|op| histogram("coredir_operation_duration_seconds", shard, &[("op", op.label())]))
                .collect(),
            completed: RefCell::new(vec![None; Op::ALL.len() * (MAX_CODE + 1)]),
            bytes_in: counter("coredir_bytes_received_total", shard, &[]),
            bytes_out: counter("coredir_bytes_sent_total", shard, &[]),
            entries_sent: counter("coredir_entries_sent_total", shard, &[]),
            accepted: counter("coredir_connections_accepted_total", shard, &[]),
            open: gauge("coredir_connections_open", shard),
            syncrepl_rounds: counter("coredir_syncrepl_rounds_total", shard, &[]),
            password_jobs: counter("coredir_password_jobs_total", shard, &[]),
        }
    }

    pub fn initiated(&self, op: Op) {
        self.initiated[op as usize].increment(1);
    }

    /// One operation done: its result code and how long it took.
    pub fn completed(&self, op: Op, code: i64, elapsed: Duration) {
        self.latency[op as usize].record(elapsed.as_secs_f64());
        let n = code.clamp(0, MAX_CODE as i64) as usize;
        let slot = op as usize * (MAX_CODE + 1) + n;
        let mut completed = self.completed.borrow_mut();
        let handle = completed[slot].get_or_insert_with(|| {
            let code = if n == MAX_CODE { "other".to_string() } else { n.to_string() };
            counter("coredir_operations_completed_total", self.shard, &[("op", op.label()), ("code", &code)])
        });
        handle.increment(1);
    }
}

/// The rendered exposition parsed back: series name and labels to value.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub series: BTreeMap<String, Vec<(BTreeMap<String, String>, f64)>>,
}

impl Snapshot {
    pub fn take() -> Snapshot {
        Snapshot::parse(&render())
    }

    pub fn parse(text: &str) -> Snapshot {
        let mut snap = Snapshot::default();
        for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
            let Some((head, value)) = line.rsplit_once(' ') else { continue };
            let Ok(value) = value.parse::<f64>() else { continue };
            let (name, labels) = match head.split_once('{') {
                Some((n, rest)) => (n, parse_labels(rest.trim_end_matches('}'))),
                None => (head, BTreeMap::new()),
            };
            snap.series.entry(name.to_string()).or_default().push((labels, value));
        }
        snap
    }

    /// The sum of a series over every label set matching `want`.
    pub fn sum(&self, name: &str, want: &[(&str, &str)]) -> f64 {
        self.series
            .get(name)
            .map(|rows| {
                rows.iter()
                    .filter(|(labels, _)| want.iter().all(|(k, v)| labels.get(*k).map(String::as_str) == Some(*v)))
                    .map(|(_, v)| v)
                    .sum()
            })
            .unwrap_or(0.0)
    }
}

fn parse_labels(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = text;
    while let Some((k, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, n)) = chars.next() {
                        value.push(if n == 'n' { '\n' } else { n });
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        out.insert(k.trim_start_matches(',').trim().to_string(), value);
        rest = &after[end..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_exposition() {
        let text = "# TYPE x counter\nx{shard=\"0\",op=\"search\"} 3\nx{shard=\"1\",op=\"search\"} 4\ny 2.5\nz{a=\"q\\\"uote\"} 1\n";
        let s = Snapshot::parse(text);
        assert_eq!(s.sum("x", &[("op", "search")]), 7.0);
        assert_eq!(s.sum("x", &[("shard", "1")]), 4.0);
        assert_eq!(s.sum("y", &[]), 2.5);
        assert_eq!(s.sum("z", &[("a", "q\"uote")]), 1.0);
    }
}
