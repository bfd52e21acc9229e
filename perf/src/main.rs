//! # coredir-perf: load generator and side-by-side benchmark
//!
//! - `coredir-perf run`: drives any LDAP server with one scenario (`bind`,
//!   `bindnew`, `search`, `read`, `modify`, `add`, `mixed`) from one pinned
//!   reactor, checks every response, and prints ops/s and latency
//!   percentiles as a table row and a JSON line.
//! - `coredir-perf gen-ldif`: the benchmark data set.
//! - `coredir-perf compare`: the whole side-by-side run against OpenLDAP
//!   slapd (what `perf/compare` calls).
//! - `coredir-perf commit`: group commit, `storage.sync` always vs never.
//! - `coredir-perf probe`: a probe client's latency while another
//!   connection on the same shard runs a costly search.
//! - `coredir-perf sink`: the floor, a trivial responder that answers
//!   bind and search with fixed results (what the kernel costs).
//!
//! Code map: `ber` (hand-written requests, allocation-free response
//! parsing), `load` (the engine), `ldif` (data set), `compare`
//! (orchestration of servers, runs and the table), `probe`, `sink`;
//! `uring` is coredir's (`src/uring.rs`): rings that do not make the
//! server's CPU interrupt the load generator's.

mod ber;
mod compare;
mod ldif;
mod load;
mod probe;
mod sink;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[path = "../../src/uring.rs"]
mod uring;

/// Whether `uring` gives glommio's rings `COOP_TASKRUN`: yes, unless
/// `COREDIR_PERF_PLAIN_RINGS` is set (to measure as before stop 50, when
/// the load generator's rings made the server's CPU kick the client's).
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn coop_taskrun() -> bool {
    std::env::var_os("COREDIR_PERF_PLAIN_RINGS").is_none()
}

use anyhow::Result;
use clap::{Parser, Subcommand};
use load::{Opts, Report, Scenario};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser)]
#[command(name = "coredir-perf", about = "LDAP load generator and benchmark against OpenLDAP")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args, Clone)]
struct LoadArgs {
    /// Server address.
    #[arg(long, default_value = "127.0.0.1:3389")]
    addr: String,
    #[arg(long, value_enum)]
    scenario: Scenario,
    #[arg(long, default_value_t = 32)]
    conns: usize,
    /// Requests in flight per connection.
    #[arg(long, default_value_t = 1)]
    depth: usize,
    /// Measured seconds.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Unmeasured seconds before.
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Users uid=user0..userN-1 in the data set.
    #[arg(long, default_value_t = 10_000)]
    users: usize,
    #[arg(long, default_value = "dc=example,dc=com")]
    base: String,
    #[arg(long, default_value = "cn=admin,dc=example,dc=com")]
    bind_dn: String,
    #[arg(long, default_value = "secret")]
    bind_pw: String,
    /// Run one load reactor pinned to each of these CPUs (e.g. `1` or `0,1`);
    /// without it, one unpinned reactor.
    #[arg(long, value_delimiter = ',')]
    cpus: Vec<usize>,
    /// Label for the output.
    #[arg(long, default_value = "server")]
    label: String,
    /// Do not check the DN of search results (for slapd's back-null).
    #[arg(long)]
    any_dn: bool,
    /// The server's process id: its CPU time over the measured window is
    /// sampled (/proc/PID/stat) and operations per server CPU-second printed.
    #[arg(long)]
    server_pid: Option<u32>,
}

#[derive(Subcommand)]
enum Command {
    /// Run one scenario against a server.
    Run(LoadArgs),
    /// Write the benchmark LDIF.
    GenLdif {
        #[arg(long, default_value_t = 10_000)]
        users: usize,
        #[arg(long, default_value_t = 100)]
        groups: usize,
        #[arg(long, default_value = "dc=example,dc=com")]
        base: String,
        /// Leave out the suffix and the two ous.
        #[arg(long)]
        no_base: bool,
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// The side-by-side benchmark against OpenLDAP slapd.
    Compare(compare::Args),
    /// Group commit: writes/s and write latency, storage.sync always vs never.
    Commit(compare::CommitArgs),
    /// A probe client's latency while a costly search runs on its shard.
    Probe(probe::Args),
    /// The floor: a trivial responder (fixed bind and search answers).
    Sink(sink::Args),
}

fn main() {
    if let Err(e) = run(Cli::parse()) {
        eprintln!("coredir-perf: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Run(a) => {
            let r = load::run(opts(&a))?;
            print_row_header();
            print_row(&a.label, &format!("{:?}", a.scenario).to_lowercase(), a.conns, a.depth, &r);
            println!("{}", json(&a.label, &format!("{:?}", a.scenario).to_lowercase(), a.conns, a.depth, &r));
            if r.server_cpu_s > 0.0 {
                println!(
                    "{:.0} ops per server CPU-second ({:.2} CPU-seconds)",
                    r.ops as f64 / r.server_cpu_s,
                    r.server_cpu_s
                );
            }
            if r.errors > 0 {
                anyhow::bail!("{} errors; first: {}", r.errors, r.first_error.unwrap_or_default());
            }
            Ok(())
        }
        Command::GenLdif { users, groups, base, no_base, output } => {
            let mut out: Box<dyn std::io::Write> = match output {
                Some(p) => Box::new(std::io::BufWriter::new(std::fs::File::create(p)?)),
                None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
            };
            ldif::write(&mut out, &base, users, groups, !no_base)?;
            Ok(())
        }
        Command::Compare(args) => compare::run(args),
        Command::Commit(args) => compare::commit(args),
        Command::Probe(args) => probe::run(args),
        Command::Sink(args) => sink::run(args),
    }
}

fn opts(a: &LoadArgs) -> Opts {
    Opts {
        addr: a.addr.clone(),
        scenario: a.scenario,
        conns: a.conns,
        depth: a.depth.max(1),
        duration: Duration::from_secs_f64(a.duration),
        warmup: Duration::from_secs_f64(a.warmup),
        users: a.users,
        base: a.base.clone(),
        bind_dn: a.bind_dn.clone(),
        bind_pw: a.bind_pw.clone(),
        cpus: a.cpus.clone(),
        tag: format!("{}-{}", std::process::id(), rand::random::<u32>()),
        check_dn: !a.any_dn,
        server_pid: a.server_pid,
    }
}

pub fn print_row_header() {
    println!(
        "{:<16} {:<8} {:>5} {:>5} {:>10} {:>9} {:>9} {:>9} {:>7}",
        "server", "scenario", "conns", "depth", "ops/s", "p50 µs", "p99 µs", "p99.9 µs", "errors"
    );
}

pub fn print_row(label: &str, scenario: &str, conns: usize, depth: usize, r: &Report) {
    println!(
        "{:<16} {:<8} {:>5} {:>5} {:>10.0} {:>9.0} {:>9.0} {:>9.0} {:>7}",
        label, scenario, conns, depth, r.ops_per_s, r.p50_us, r.p99_us, r.p999_us, r.errors
    );
    for (phase, s) in &r.phases {
        println!("    {phase:<10} {s:.3} s");
    }
}

pub fn json(label: &str, scenario: &str, conns: usize, depth: usize, r: &Report) -> serde_json::Value {
    serde_json::json!({
        "server": label, "scenario": scenario, "conns": conns, "depth": depth,
        "ops": r.ops, "seconds": r.seconds, "ops_per_s": r.ops_per_s,
        "p50_us": r.p50_us, "p99_us": r.p99_us, "p999_us": r.p999_us, "errors": r.errors,
        "phases": r.phases.iter().map(|(p, s)| serde_json::json!({"phase": p, "seconds": s})).collect::<Vec<_>>(),
    })
}
