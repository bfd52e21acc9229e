//! `coredir-perf compare`: coredir and OpenLDAP slapd side by side, on the
//! same machine, the same data and the same load.
//!
//! For each data-set size: generate the LDIF, bulk-load slapd (`slapadd -q`)
//! and coredir (`coredir import`), both timed, start slapd back-mdb, coredir with 1 shard (both pinned to CPU 0) and
//! coredir with 2 shards (all CPUs), plus slapd back-null as the protocol
//! ceiling and the floor (`coredir-perf sink`, pinned to CPU 0: a trivial
//! responder, what the kernel and loopback cost per request); then run every scenario against each server in alternation
//! (A B C A B C …), with the load pinned to CPU 1 (against the 2-shard
//! server, which uses both CPUs, one load reactor on each CPU). Each run records throughput,
//! latency and the server's CPU time; the table gives medians with
//! min–max and the ratio coredir/slapd.

use crate::load::{self, Opts, Report, Scenario};
use anyhow::{anyhow, bail, Context, Result};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(clap::Args, Clone)]
pub struct Args {
    /// Data-set sizes (users).
    #[arg(long, value_delimiter = ',', default_values_t = [10_000usize, 100_000])]
    users: Vec<usize>,
    /// Runs per scenario and server.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Measured seconds per run.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    #[arg(long, default_value_t = 32)]
    conns: usize,
    /// `search8` is the search with 8 requests in flight per connection;
    /// `latency` is the search on one connection.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "bind,bindnew,search,search8,substring,read,modify,add,latency,mixed"
    )]
    scenarios: Vec<String>,
    /// Where the table and the JSON lines are written.
    #[arg(long, default_value = "perf/results")]
    out: PathBuf,
}

const SUFFIX: &str = "dc=example,dc=com";
const ROOT_DN: &str = "cn=admin,dc=example,dc=com";
const ROOT_PW: &str = "secret";

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    SlapdMdb,
    SlapdNull,
    Coredir(usize),
    /// `coredir-perf sink`.
    Floor,
}

impl Kind {
    /// The fixed responders answer only binds and searches, with entries
    /// of any DN.
    fn fixed(self) -> bool {
        matches!(self, Kind::SlapdNull | Kind::Floor)
    }
}

struct Server {
    name: &'static str,
    kind: Kind,
    port: u16,
    pid: u32,
    child: Option<Child>,
    load_seconds: Option<f64>,
}

impl Drop for Server {
    fn drop(&mut self) {
        // SAFETY: signalling a process we started.
        unsafe { libc::kill(self.pid as i32, libc::SIGTERM) };
        if let Some(c) = &mut self.child {
            let _ = c.wait();
        }
    }
}

pub fn run(args: Args) -> Result<()> {
    ensure_packages()?;
    let coredir = std::env::current_exe()?.with_file_name("coredir");
    if !coredir.exists() {
        bail!("{} is missing: run `cargo build --release --workspace` first (perf/compare does)", coredir.display());
    }
    std::fs::create_dir_all(&args.out)?;
    let mut report = String::new();
    writeln!(report, "{}", machine())?;
    for &users in &args.users {
        let work = tempdir()?;
        eprintln!("== {users} users (work dir {})", work.display());
        let table = one_size(&args, &coredir, &work, users)?;
        writeln!(report, "\n### {users} users\n\n{table}")?;
        let _ = std::fs::remove_dir_all(&work);
    }
    let path = args.out.join("latest.md");
    std::fs::write(&path, &report)?;
    println!("{report}");
    eprintln!("written to {}", path.display());
    Ok(())
}

fn ensure_packages() -> Result<()> {
    if Path::new("/usr/sbin/slapd").exists() && Path::new("/usr/bin/ldapadd").exists() {
        return Ok(());
    }
    eprintln!("installing slapd and ldap-utils with apt-get");
    let ok = Command::new("sh")
        .args(["-c", "apt-get install -y slapd ldap-utils || (apt-get update && apt-get install -y slapd ldap-utils)"])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()?
        .success();
    // The package starts a system slapd on port 389; it is not ours.
    let _ = Command::new("sh").args(["-c", "service slapd stop || true"]).status();
    if !ok {
        bail!("could not install slapd and ldap-utils");
    }
    Ok(())
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    let slapd = Command::new("/usr/sbin/slapd")
        .arg("-VV")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stderr).lines().next().unwrap_or("").trim().to_string())
        .unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!(
        "machine: {} CPUs ({cpu}), kernel {}; {slapd}",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        kernel.trim()
    )
}

fn tempdir() -> Result<PathBuf> {
    let out = Command::new("mktemp").args(["-d", "/tmp/coredir-compare.XXXXXX"]).output()?;
    Ok(PathBuf::from(String::from_utf8(out.stdout)?.trim()))
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn one_size(args: &Args, coredir: &Path, work: &Path, users: usize) -> Result<String> {
    let full = work.join("full.ldif");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&full)?);
    crate::ldif::write(&mut f, SUFFIX, users, 100, true)?;
    drop(f);
    let mut servers = vec![
        start_slapd(work, Kind::SlapdMdb, &full)?,
        start_coredir(coredir, work, 1, &full)?,
        start_coredir(coredir, work, 2, &full)?,
        start_slapd(work, Kind::SlapdNull, &full)?,
        start_floor()?,
    ];
    let mut results: BTreeMap<(String, &'static str), Vec<Sample>> = BTreeMap::new();
    // Memory is compared on the loaded data set before any write scenario
    // grows it (a faster server adds more entries in the same time).
    let mut rss_loaded: Vec<(&str, u64)> = Vec::new();
    let writes = |s: &str| matches!(s, "modify" | "add" | "mixed");
    for scenario in &args.scenarios {
        if writes(scenario) && rss_loaded.is_empty() {
            rss_loaded = servers.iter().map(|s| (s.name, rss_kib(s.pid, "VmHWM:"))).collect();
        }
        for run in 0..args.runs {
            for server in &mut servers {
                let answers = match server.kind {
                    Kind::SlapdNull => {
                        matches!(scenario.as_str(), "bind" | "bindnew" | "search" | "search8" | "latency")
                    }
                    Kind::Floor => {
                        matches!(scenario.as_str(), "bind" | "bindnew" | "search" | "search8" | "read" | "latency")
                    }
                    _ => true,
                };
                if !answers {
                    continue;
                }
                eprintln!("   {scenario} run {} on {}", run + 1, server.name);
                let s = measure(args, server, scenario, users, run)?;
                let line = serde_json::json!({"users": users, "server": server.name, "scenario": scenario, "run": run,
                    "ops_per_s": s.report.ops_per_s, "p50_us": s.report.p50_us, "p99_us": s.report.p99_us,
                    "p999_us": s.report.p999_us, "errors": s.report.errors, "server_cpu_s": s.cpu_seconds,
                    "server_user_s": s.report.server_user_s, "server_sys_s": s.report.server_sys_s,
                    "server_syscalls": s.syscalls,
                    "seconds": s.report.seconds});
                append(&args.out.join("runs.jsonl"), &line.to_string())?;
                if s.report.errors > 0 {
                    eprintln!("   {} errors; first: {:?}", s.report.errors, s.report.first_error);
                }
                results.entry((scenario.clone(), server.name)).or_default().push(s);
            }
        }
    }
    if rss_loaded.is_empty() {
        rss_loaded = servers.iter().map(|s| (s.name, rss_kib(s.pid, "VmHWM:"))).collect();
    }
    let rss_end: Vec<(&str, u64)> = servers.iter().map(|s| (s.name, rss_kib(s.pid, "VmHWM:"))).collect();
    Ok(table(
        args,
        &servers,
        &results,
        &[
            ("peak RSS, loaded data set, before writes (MiB)", rss_loaded),
            ("peak RSS at the end, after the write scenarios (MiB)", rss_end),
        ],
    ))
}

fn append(path: &Path, line: &str) -> Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    writeln!(f, "{line}")?;
    Ok(())
}

/// The indexes both servers keep: the same set, so loads, sizes and
/// searches compare like with like.
const INDEXES: &[(&str, &str)] = &[
    ("objectClass", "eq"),
    ("uid", "eq,sub"),
    ("cn", "eq,sub"),
    ("mail", "eq,sub"),
    ("uidNumber", "eq"),
    ("memberUid", "eq"),
    ("member", "eq"),
];

/// coredir's configuration: the same indexes as slapd, and no access log
/// (slapd runs with `loglevel 0`).
fn coredir_conf() -> String {
    let lines: String = INDEXES.iter().map(|(a, k)| format!("{a} = \"{k}\"\n")).collect();
    format!("[log]\nlevel = \"off\"\n[indexes]\n{lines}")
}

fn slapd_conf(dir: &Path, kind: Kind) -> String {
    let d = dir.display();
    let head = format!(
        "include /etc/ldap/schema/core.schema\ninclude /etc/ldap/schema/cosine.schema\n\
         include /etc/ldap/schema/inetorgperson.schema\ninclude /etc/ldap/schema/nis.schema\n\
         modulepath /usr/lib/ldap\nmoduleload {}\npidfile {d}/slapd.pid\nargsfile {d}/slapd.args\nloglevel 0\nthreads 16\n",
        if kind == Kind::SlapdNull { "back_null" } else { "back_mdb" }
    );
    match kind {
        Kind::SlapdNull => format!("{head}database null\nsuffix \"{SUFFIX}\"\nrootdn \"{ROOT_DN}\"\nbind on\ndosearch on\n"),
        _ => format!(
            "{head}access to attrs=userPassword\n  by self write\n  by anonymous auth\n  by * none\naccess to *\n  by * read\n\
             database mdb\nsuffix \"{SUFFIX}\"\nrootdn \"{ROOT_DN}\"\nrootpw {ROOT_PW}\ndirectory {d}/db\nmaxsize 10737418240\n\
             {}",
            INDEXES.iter().map(|(a, k)| format!("index {a} {k}\n")).collect::<String>()
        ),
    }
}

fn start_slapd(work: &Path, kind: Kind, ldif: &Path) -> Result<Server> {
    let name = if kind == Kind::SlapdNull { "slapd-null" } else { "slapd-mdb" };
    let dir = work.join(name);
    std::fs::create_dir_all(dir.join("db"))?;
    let conf = dir.join("slapd.conf");
    std::fs::write(&conf, slapd_conf(&dir, kind))?;
    let mut load_seconds = None;
    if kind == Kind::SlapdMdb {
        let t = Instant::now();
        let out = Command::new("taskset")
            .args(["-c", "0", "/usr/sbin/slapadd", "-q", "-f"])
            .arg(&conf)
            .arg("-l")
            .arg(ldif)
            .output()?;
        if !out.status.success() {
            bail!("slapadd failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        load_seconds = Some(t.elapsed().as_secs_f64());
    }
    let port = free_port()?;
    let out = Command::new("taskset")
        .args(["-c", "0", "/usr/sbin/slapd", "-h", &format!("ldap://127.0.0.1:{port}/"), "-f"])
        .arg(&conf)
        .output()?;
    if !out.status.success() {
        bail!("slapd failed to start: {}", String::from_utf8_lossy(&out.stderr));
    }
    let pidfile = dir.join("slapd.pid");
    let pid = wait_for(|| std::fs::read_to_string(&pidfile).ok().and_then(|p| p.trim().parse().ok()))
        .ok_or_else(|| anyhow!("slapd wrote no pid file"))?;
    wait_for(|| std::net::TcpStream::connect(("127.0.0.1", port)).ok())
        .ok_or_else(|| anyhow!("slapd does not listen"))?;
    Ok(Server { name, kind, port, pid, child: None, load_seconds })
}

fn wait_for<T>(mut f: impl FnMut() -> Option<T>) -> Option<T> {
    for _ in 0..200 {
        if let Some(v) = f() {
            return Some(v);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

fn start_coredir(coredir: &Path, work: &Path, shards: usize, ldif: &Path) -> Result<Server> {
    let name = if shards == 1 { "coredir-1" } else { "coredir-2" };
    start_coredir_as(coredir, work, shards, ldif, name, "")
}

/// Imports the LDIF into a new data directory and serves it, with `extra`
/// appended to the configuration.
fn start_coredir_as(
    coredir: &Path,
    work: &Path,
    shards: usize,
    ldif: &Path,
    name: &'static str,
    extra: &str,
) -> Result<Server> {
    let dir = work.join(name);
    let cpus = if shards == 1 { "0" } else { "0-1" };
    std::fs::create_dir_all(work)?;
    let conf = work.join(format!("{name}.toml"));
    std::fs::write(&conf, format!("{}{extra}", coredir_conf()))?;
    // The offline import, pinned like the server that will serve the data.
    let t = Instant::now();
    let out = Command::new("taskset")
        .args(["-c", cpus])
        .arg(coredir)
        .arg("import")
        .arg("--config")
        .arg(&conf)
        .args(["--shards", &shards.to_string(), "--data"])
        .arg(&dir)
        .arg(ldif)
        .env("COREDIR_ROOT_PASSWORD", ROOT_PW)
        .output()?;
    if !out.status.success() {
        bail!("coredir import ({name}) failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let load_seconds = Some(t.elapsed().as_secs_f64());
    let port = free_port()?;
    let mut child = Command::new("taskset")
        .args(["-c", cpus])
        .arg(coredir)
        .arg("serve")
        .arg("--config")
        .arg(&conf)
        .args(["--listen", &format!("127.0.0.1:{port}"), "--shards", &shards.to_string(), "--data"])
        .arg(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
    loop {
        match lines.next() {
            Some(Ok(l)) if l.starts_with("coredir: listening on") => break,
            Some(Ok(_)) => {}
            _ => bail!("coredir ({shards} shards) did not start"),
        }
    }
    std::thread::spawn(move || for _ in lines {});
    Ok(Server { name, kind: Kind::Coredir(shards), port, pid: child.id(), child: Some(child), load_seconds })
}

/// The floor, `coredir-perf sink`, pinned to CPU 0 like the servers.
fn start_floor() -> Result<Server> {
    let port = free_port()?;
    let mut child = Command::new("taskset")
        .args(["-c", "0"])
        .arg(std::env::current_exe()?)
        .args(["sink", "--listen", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::piped())
        .spawn()?;
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
    match lines.next() {
        Some(Ok(l)) if l.contains("listening on") => {}
        _ => bail!("coredir-perf sink did not start"),
    }
    Ok(Server { name: "floor", kind: Kind::Floor, port, pid: child.id(), child: Some(child), load_seconds: None })
}

struct Sample {
    report: Report,
    cpu_seconds: f64,
    /// System calls of the server in the measured window, if counted.
    syscalls: Option<f64>,
}

/// A memory figure of /proc/PID/status (`VmHWM:` is the peak RSS), in KiB.
fn rss_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with(field)).and_then(|l| l.split_whitespace().nth(1)?.parse().ok()))
        .unwrap_or(0)
}

fn measure(args: &Args, server: &Server, scenario: &str, users: usize, run: usize) -> Result<Sample> {
    let (scn, conns, depth) = match scenario {
        "latency" => (Scenario::Search, 1, 1),
        "search8" => (Scenario::Search, args.conns, 8),
        "mixed" => (Scenario::Mixed, 8, 1),
        other => (
            <Scenario as clap::ValueEnum>::from_str(other, true).map_err(|e| anyhow!("scenario {other}: {e}"))?,
            args.conns,
            1,
        ),
    };
    let opts = Opts {
        addr: format!("127.0.0.1:{}", server.port),
        scenario: scn,
        conns,
        depth,
        duration: Duration::from_secs_f64(args.duration),
        warmup: Duration::from_secs_f64(args.warmup),
        users,
        base: SUFFIX.into(),
        bind_dn: ROOT_DN.into(),
        bind_pw: ROOT_PW.into(),
        // The 2-shard server uses both CPUs; the load then shares them, one
        // reactor per CPU, so that SO_INCOMING_CPU steers connections to
        // both shards.
        cpus: if server.kind == Kind::Coredir(2) { vec![0, 1] } else { vec![1] },
        tag: format!("{}-{run}-{}", server.name, rand::random::<u32>()),
        check_dn: !server.kind.fixed(),
        server_pid: Some(server.pid),
    };
    // The server's system calls over the measured window (as near as a
    // second process can start and stop with it), where `perf` can count
    // them; none otherwise.
    let (pid, warmup, duration) = (server.pid, args.warmup, args.duration);
    let syscalls = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs_f64(warmup));
        count_syscalls(pid, duration)
    });
    let report = load::run(opts).context(format!("{scenario} against {}", server.name))?;
    let syscalls = syscalls.join().ok().flatten();
    Ok(Sample { cpu_seconds: report.server_cpu_s, report, syscalls })
}

/// System calls process `pid` makes in the next `seconds`, from `perf stat`
/// (tracepoint `raw_syscalls:sys_enter`); `None` where perf cannot count.
fn count_syscalls(pid: u32, seconds: f64) -> Option<f64> {
    let out = Command::new("perf")
        .args(["stat", "-x", ",", "-e", "raw_syscalls:sys_enter", "-p", &pid.to_string(), "--", "sleep"])
        .arg(format!("{seconds}"))
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stderr);
    text.lines().find(|l| l.contains("raw_syscalls:sys_enter"))?.split(',').next()?.trim().parse().ok()
}

#[derive(clap::Args)]
pub struct CommitArgs {
    #[arg(long, default_value_t = 10_000)]
    users: usize,
    #[arg(long, default_value_t = 3)]
    runs: usize,
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Where the table and the JSON lines are written.
    #[arg(long, default_value = "perf/results")]
    out: PathBuf,
}

/// `coredir-perf commit`: group commit measured. One shard with
/// `storage.sync = "always"` and one with `"never"`, both pinned to CPU 0,
/// take modifies from 1 and from 32 connections in alternation: writes per
/// second and the latency of an acknowledged write (which, with `always`,
/// includes the shared durable sync).
pub fn commit(args: CommitArgs) -> Result<()> {
    let coredir = std::env::current_exe()?.with_file_name("coredir");
    std::fs::create_dir_all(&args.out)?;
    let work = tempdir()?;
    let ldif = work.join("full.ldif");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&ldif)?);
    crate::ldif::write(&mut f, SUFFIX, args.users, 100, true)?;
    drop(f);
    let servers = [
        start_coredir_as(&coredir, &work, 1, &ldif, "sync-always", "[storage]\nsync = \"always\"\n")?,
        start_coredir_as(&coredir, &work, 1, &ldif, "sync-never", "[storage]\nsync = \"never\"\n")?,
    ];
    let base = Args {
        users: vec![args.users],
        runs: args.runs,
        duration: args.duration,
        warmup: args.warmup,
        conns: 1,
        scenarios: vec![],
        out: args.out.clone(),
    };
    let mut table = String::from("| connections | sync | writes/s | p50 µs | p99 µs |\n|---|---|---|---|---|\n");
    for conns in [1, 32] {
        let mut samples: BTreeMap<&str, Vec<Sample>> = BTreeMap::new();
        for run in 0..args.runs {
            for server in &servers {
                eprintln!("   modify ×{conns} run {} on {}", run + 1, server.name);
                let a = Args { conns, ..base.clone() };
                let s = measure(&a, server, "modify", args.users, run)?;
                let line = serde_json::json!({"users": args.users, "server": server.name, "scenario": "modify",
                    "conns": conns, "run": run, "ops_per_s": s.report.ops_per_s, "p50_us": s.report.p50_us,
                    "p99_us": s.report.p99_us, "errors": s.report.errors});
                append(&args.out.join("commit.jsonl"), &line.to_string())?;
                samples.entry(server.name).or_default().push(s);
            }
        }
        for server in &servers {
            let v = &samples[server.name];
            let ops = median_range(v.iter().map(|s| s.report.ops_per_s).collect());
            let p50 = median_range(v.iter().map(|s| s.report.p50_us as f64).collect());
            let p99 = median_range(v.iter().map(|s| s.report.p99_us as f64).collect());
            writeln!(table, "| {conns} | {} | {} | {} | {} |", server.name, fmt(ops, ""), fmt(p50, ""), fmt(p99, ""))?;
        }
    }
    let _ = std::fs::remove_dir_all(&work);
    let report = format!("{}\n\n{table}", machine());
    std::fs::write(args.out.join("commit.md"), &report)?;
    println!("{report}");
    Ok(())
}

fn median_range(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn fmt(v: (f64, f64, f64), unit: &str) -> String {
    if v.0 >= 100.0 {
        format!("{:.0}{unit} ({:.0}–{:.0})", v.0, v.1, v.2)
    } else {
        format!("{:.2}{unit} ({:.2}–{:.2})", v.0, v.1, v.2)
    }
}

fn table(
    args: &Args,
    servers: &[Server],
    results: &BTreeMap<(String, &'static str), Vec<Sample>>,
    rss: &[(&str, Vec<(&str, u64)>)],
) -> String {
    let names: Vec<&str> = servers.iter().map(|s| s.name).collect();
    let mut t = String::new();
    let _ = writeln!(t, "| figure | {} | coredir-1 / slapd-mdb | coredir-2 / slapd-mdb |", names.join(" | "));
    let _ = writeln!(t, "|---|{}---|---|", "---|".repeat(names.len()));
    let mut row = |label: String, cell: &dyn Fn(&str) -> Option<(f64, f64, f64)>, unit: &str, lower_is_better: bool| {
        let vals: Vec<Option<(f64, f64, f64)>> = names.iter().map(|n| cell(n)).collect();
        let ratio = |i: usize| match (vals[i], vals[0]) {
            (Some(c), Some(s)) if s.0 > 0.0 => {
                let r = c.0 / s.0;
                format!("{r:.2}×{}", if lower_is_better { " (lower is better)" } else { "" })
            }
            _ => "–".into(),
        };
        let cells: Vec<String> = vals.iter().map(|v| v.map(|v| fmt(v, unit)).unwrap_or("–".into())).collect();
        let _ = writeln!(t, "| {label} | {} | {} | {} |", cells.join(" | "), ratio(1), ratio(2));
    };
    let load = |n: &str| servers.iter().find(|s| s.name == n).and_then(|s| s.load_seconds).map(|v| (v, v, v));
    row("bulk load of the LDIF (s; slapadd -q vs coredir import)".into(), &load, " s", true);
    for scenario in &args.scenarios {
        let get = |n: &str| results.get(&(scenario.clone(), names.iter().copied().find(|x| *x == n).unwrap()));
        match scenario.as_str() {
            "latency" => {
                row(
                    "latency, 1 conn, search p50 (µs)".into(),
                    &|n| get(n).map(|s| median_range(s.iter().map(|x| x.report.p50_us).collect())),
                    "",
                    true,
                );
                row(
                    "latency, 1 conn, search p99 (µs)".into(),
                    &|n| get(n).map(|s| median_range(s.iter().map(|x| x.report.p99_us).collect())),
                    "",
                    true,
                );
            }
            "mixed" => {
                row(
                    "mixed sequence ×2, 8 conns (s)".into(),
                    &|n| get(n).map(|s| median_range(s.iter().map(|x| x.report.seconds).collect())),
                    " s",
                    true,
                );
            }
            _ => {
                row(
                    format!("{scenario} ops/s, {} conns", args.conns),
                    &|n| get(n).map(|s| median_range(s.iter().map(|x| x.report.ops_per_s).collect())),
                    "",
                    false,
                );
                row(
                    format!("{scenario} ops per server CPU-second"),
                    &|n| {
                        get(n).map(|s| {
                            median_range(s.iter().map(|x| x.report.ops as f64 / x.cpu_seconds.max(1e-9)).collect())
                        })
                    },
                    "",
                    false,
                );
                // Where the time goes: the floor's kernel time is what the
                // loopback costs; anything above it is the server's own.
                let per_op = |n: &str, cpu: fn(&Report) -> f64| {
                    get(n).map(|s| {
                        median_range(s.iter().map(|x| cpu(&x.report) * 1e6 / (x.report.ops as f64).max(1.0)).collect())
                    })
                };
                row(format!("{scenario}: server user CPU µs per op"), &|n| per_op(n, |r| r.server_user_s), "", true);
                row(format!("{scenario}: server kernel CPU µs per op"), &|n| per_op(n, |r| r.server_sys_s), "", true);
                row(
                    format!("{scenario}: server system calls per op"),
                    &|n| {
                        let v: Vec<f64> = get(n)?
                            .iter()
                            .filter_map(|x| x.syscalls.map(|c| c / (x.report.ops as f64).max(1.0)))
                            .collect();
                        (!v.is_empty()).then(|| median_range(v))
                    },
                    "",
                    true,
                );
            }
        }
    }
    for (label, values) in rss {
        let mib = |n: &str| values.iter().find(|r| r.0 == n).map(|r| r.1 as f64 / 1024.0).map(|v| (v, v, v));
        row(label.to_string(), &mib, "", true);
    }
    t
}
