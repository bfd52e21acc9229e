//! The load engine: one glommio reactor (pinned with `--cpu`) driving many
//! connections, each keeping `depth` requests in flight; every response is
//! checked and every operation's latency recorded.

use crate::ber::{self, Filter};
use anyhow::{anyhow, bail, Result};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use glommio::{LocalExecutorBuilder, Placement};
use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    Bind,
    Bindnew,
    Search,
    /// Substring searches answered by one entry: `(uid=*serN)`,
    /// `(mail=userN@*)`, `(cn=* N)` in turn.
    Substring,
    Read,
    Modify,
    Add,
    Mixed,
}

#[derive(Clone, Debug)]
pub struct Opts {
    pub addr: String,
    pub scenario: Scenario,
    pub conns: usize,
    pub depth: usize,
    pub duration: Duration,
    pub warmup: Duration,
    pub users: usize,
    pub base: String,
    pub bind_dn: String,
    pub bind_pw: String,
    /// One load reactor pinned to each of these CPUs (connections split
    /// between them); none: one unpinned reactor. Mixed uses the first only.
    pub cpus: Vec<usize>,
    /// Distinguishes the DNs of entries added by different runs.
    pub tag: String,
    /// Check that searches return the expected DN (off for slapd's
    /// back-null, which answers every search with its suffix entry).
    pub check_dn: bool,
    /// Server process whose CPU time is sampled around the measured window.
    pub server_pid: Option<u32>,
}

#[derive(Debug, Default, Clone)]
pub struct Report {
    pub ops: u64,
    pub errors: u64,
    pub seconds: f64,
    pub ops_per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    /// Mixed scenario: (phase, seconds).
    pub phases: Vec<(String, f64)>,
    pub first_error: Option<String>,
    /// CPU seconds the server used in the measured window (with `server_pid`).
    pub server_cpu_s: f64,
    /// Of which in user space and in the kernel.
    pub server_user_s: f64,
    pub server_sys_s: f64,
}

/// What a response must look like.
#[derive(Clone)]
enum Expect {
    Result(u8),
    OneEntry(String),
}

/// Which operations a connection performs next.
#[derive(Clone, Copy)]
enum Op {
    Bind(usize),
    Search(usize),
    Substring(usize),
    Read(usize),
    Modify(usize, u64),
    Add(usize),
    Delete(usize),
}

struct Shared {
    opts: Opts,
    hist: RefCell<Histogram<u64>>,
    ops: Cell<u64>,
    errors: Cell<u64>,
    /// Connections that ended with an error, warm-up included: a load that
    /// could not even bind must not report zero operations and no error.
    lost: Cell<u64>,
    first_error: RefCell<Option<String>>,
    measuring: Cell<bool>,
    stop: Cell<bool>,
    /// Fixed-size phases: ops handed out so far and the phase's ops.
    next: Cell<usize>,
    phase: RefCell<Vec<Op>>,
}

impl Shared {
    fn error(&self, what: String) {
        self.errors.set(self.errors.get() + 1);
        self.first_error.borrow_mut().get_or_insert(what);
    }

    fn user_dn(&self, i: usize) -> String {
        format!("uid=user{i},ou=people,{}", self.opts.base)
    }

    fn added_dn(&self, i: usize) -> String {
        format!("uid=perf-{}-{i},ou=people,{}", self.opts.tag, self.opts.base)
    }
}

pub fn run(opts: Opts) -> Result<Report> {
    let n = if opts.scenario == Scenario::Mixed { 1 } else { opts.cpus.len().max(1) };
    let handles = (0..n)
        .map(|i| {
            let mut o = opts.clone();
            o.conns = opts.conns / n + usize::from(i < opts.conns % n);
            o.tag = format!("{}-{i}", opts.tag);
            // The first reactor samples the server's CPU time.
            o.server_pid = opts.server_pid.filter(|_| i == 0);
            let placement = opts.cpus.get(i).map_or(Placement::Unbound, |c| Placement::Fixed(*c));
            LocalExecutorBuilder::new(placement)
                .name("coredir-perf")
                .io_memory(512 << 10)
                .spawn(move || async move { drive(o).await })
                .map_err(|e| anyhow!("starting a load reactor: {e}"))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut parts = Vec::new();
    for h in handles {
        parts.push(h.join().map_err(|e| anyhow!("load reactor: {e:?}"))??);
    }
    Ok(merge(parts))
}

/// One report from several reactors' (reports, histograms).
fn merge(parts: Vec<(Report, Histogram<u64>)>) -> Report {
    let mut iter = parts.into_iter();
    let (mut total, mut hist) = iter.next().expect("at least one reactor");
    for (r, h) in iter {
        let _ = hist.add(&h);
        total.ops += r.ops;
        total.errors += r.errors;
        total.ops_per_s += r.ops_per_s;
        total.first_error = total.first_error.or(r.first_error);
    }
    let q = |p: f64| if hist.is_empty() { 0.0 } else { hist.value_at_quantile(p) as f64 };
    (total.p50_us, total.p99_us, total.p999_us) = (q(0.5), q(0.99), q(0.999));
    total
}

async fn drive(opts: Opts) -> Result<(Report, Histogram<u64>)> {
    let shared = Rc::new(Shared {
        opts: opts.clone(),
        hist: RefCell::new(Histogram::new_with_bounds(1, 60_000_000, 3)?),
        ops: Cell::new(0),
        errors: Cell::new(0),
        lost: Cell::new(0),
        first_error: RefCell::new(None),
        measuring: Cell::new(false),
        stop: Cell::new(false),
        next: Cell::new(0),
        phase: RefCell::new(Vec::new()),
    });
    if opts.scenario == Scenario::Mixed {
        return mixed(shared).await;
    }
    let mut tasks = Vec::new();
    for c in 0..opts.conns {
        let shared = shared.clone();
        tasks.push(glommio::spawn_local(async move {
            if let Err(e) = connection(&shared, c).await {
                shared.lost.set(shared.lost.get() + 1);
                shared.error(e.to_string());
            }
        }));
    }
    glommio::timer::sleep(opts.warmup).await;
    shared.hist.borrow_mut().reset();
    shared.ops.set(0);
    shared.errors.set(0);
    shared.measuring.set(true);
    let cpu0 = opts.server_pid.map(cpu_times).unwrap_or_default();
    let started = Instant::now();
    glommio::timer::sleep(opts.duration).await;
    shared.measuring.set(false);
    let seconds = started.elapsed().as_secs_f64();
    let cpu1 = opts.server_pid.map(cpu_times).unwrap_or_default();
    shared.stop.set(true);
    for t in tasks {
        t.await;
    }
    let mut r = report(&shared, seconds);
    r.set_cpu(cpu0, cpu1);
    let hist = shared.hist.borrow().clone();
    Ok((r, hist))
}

fn report(shared: &Shared, seconds: f64) -> Report {
    let h = shared.hist.borrow();
    let q = |p: f64| if h.is_empty() { 0.0 } else { h.value_at_quantile(p) as f64 };
    Report {
        ops: shared.ops.get(),
        errors: shared.errors.get().max(shared.lost.get()),
        seconds,
        ops_per_s: shared.ops.get() as f64 / seconds,
        p50_us: q(0.50),
        p99_us: q(0.99),
        p999_us: q(0.999),
        phases: Vec::new(),
        first_error: shared.first_error.borrow().clone(),
        server_cpu_s: 0.0,
        server_user_s: 0.0,
        server_sys_s: 0.0,
    }
}

/// Picks the next operation of a timed scenario.
fn next_op(shared: &Shared, rng: &mut SmallRng, conn: usize, seq: &mut usize) -> Op {
    let user = rng.gen_range(0..shared.opts.users);
    *seq += 1;
    match shared.opts.scenario {
        Scenario::Bind | Scenario::Bindnew => Op::Bind(user),
        Scenario::Search => Op::Search(user),
        Scenario::Substring => Op::Substring(user),
        Scenario::Read => Op::Read(user),
        Scenario::Modify => Op::Modify(user, rng.gen()),
        Scenario::Add => Op::Add(conn * 100_000_000 + *seq),
        Scenario::Mixed => unreachable!("mixed runs phases"),
    }
}

fn encode(shared: &Shared, op: Op, msgid: i32, out: &mut Vec<u8>) -> Expect {
    let base = &shared.opts.base;
    match op {
        Op::Bind(u) => {
            ber::bind(out, msgid, &shared.user_dn(u), &format!("pw{u}"));
            Expect::Result(ber::BIND_RESPONSE)
        }
        Op::Search(u) => {
            ber::search(out, msgid, &format!("ou=people,{base}"), 2, Filter::Eq("uid", &format!("user{u}")));
            Expect::OneEntry(shared.user_dn(u).to_ascii_lowercase())
        }
        Op::Substring(u) => {
            let people = format!("ou=people,{base}");
            let (uid, mail, cn) = (format!("ser{u}"), format!("user{u}@"), format!(" {u}"));
            let filter = match u % 3 {
                0 => Filter::Final("uid", &uid),
                1 => Filter::Initial("mail", &mail),
                _ => Filter::Final("cn", &cn),
            };
            ber::search(out, msgid, &people, 2, filter);
            Expect::OneEntry(shared.user_dn(u).to_ascii_lowercase())
        }
        Op::Read(u) => {
            let dn = shared.user_dn(u);
            ber::search(out, msgid, &dn, 0, Filter::Present("objectClass"));
            Expect::OneEntry(dn.to_ascii_lowercase())
        }
        Op::Modify(u, v) => {
            ber::modify_replace(out, msgid, &shared.user_dn(u), "description", &format!("perf {v}"));
            Expect::Result(ber::MODIFY_RESPONSE)
        }
        Op::Add(i) => {
            let uid = format!("perf-{}-{i}", shared.opts.tag);
            let dn = shared.added_dn(i);
            let cn = format!("Perf {i}");
            ber::add(
                out,
                msgid,
                &dn,
                &[
                    ("objectClass", &["top", "person", "organizationalPerson", "inetOrgPerson"]),
                    ("uid", &[&uid]),
                    ("cn", &[&cn]),
                    ("sn", &["Perf"]),
                    ("mail", &[&format!("{uid}@example.com")]),
                ],
            );
            Expect::Result(ber::ADD_RESPONSE)
        }
        Op::Delete(i) => {
            ber::delete(out, msgid, &shared.added_dn(i));
            Expect::Result(ber::DEL_RESPONSE)
        }
    }
}

struct Conn {
    stream: TcpStream,
    rbuf: Vec<u8>,
    wbuf: Vec<u8>,
    msgid: i32,
}

impl Conn {
    async fn open(shared: &Shared, as_root: bool) -> Result<Conn> {
        let stream = TcpStream::connect(shared.opts.addr.as_str())
            .await
            .map_err(|e| anyhow!("connecting to {}: {e}", shared.opts.addr))?;
        stream.set_nodelay(true).map_err(|e| anyhow!("{e}"))?;
        let mut c = Conn { stream, rbuf: Vec::with_capacity(64 << 10), wbuf: Vec::with_capacity(4096), msgid: 0 };
        if as_root {
            c.wbuf.clear();
            c.msgid += 1;
            ber::bind(&mut c.wbuf, c.msgid, &shared.opts.bind_dn, &shared.opts.bind_pw);
            c.stream.write_all(&c.wbuf).await?;
            let mut expect = vec![Expect::Result(ber::BIND_RESPONSE)];
            let mut failures = Vec::new();
            c.collect(c.msgid, &mut expect, &mut failures, &mut vec![Instant::now()], None).await?;
            if let Some(f) = failures.pop() {
                bail!("bind as {}: {f}", shared.opts.bind_dn);
            }
        }
        Ok(c)
    }

    /// Sends a batch of operations and waits for all their responses.
    async fn batch(&mut self, shared: &Shared, ops: &[Op]) -> Result<()> {
        self.wbuf.clear();
        let first = self.msgid + 1;
        let mut expect = Vec::with_capacity(ops.len());
        for op in ops {
            self.msgid += 1;
            expect.push(encode(shared, *op, self.msgid, &mut self.wbuf));
        }
        let start = Instant::now();
        let mut starts = vec![start; ops.len()];
        self.stream.write_all(&self.wbuf).await?;
        let mut failures = Vec::new();
        self.collect(first, &mut expect, &mut failures, &mut starts, Some(shared)).await?;
        for f in failures {
            shared.error(f);
        }
        Ok(())
    }

    /// Reads responses for msgids `first..first+expect.len()`.
    async fn collect(
        &mut self,
        first: i32,
        expect: &mut [Expect],
        failures: &mut Vec<String>,
        starts: &mut [Instant],
        shared: Option<&Shared>,
    ) -> Result<()> {
        let mut entries = vec![0u32; expect.len()];
        let mut pending = expect.len();
        let mut chunk = [0u8; 32 << 10];
        while pending > 0 {
            let mut used = 0;
            while let Some(n) = ber::frame_len(&self.rbuf[used..]) {
                if self.rbuf.len() - used < n {
                    break;
                }
                let msg = &self.rbuf[used..used + n];
                used += n;
                let r = ber::parse(msg).ok_or_else(|| anyhow!("unparsable response"))?;
                let i = (r.msgid - first) as usize;
                if i >= expect.len() {
                    bail!("response to unknown message id {}", r.msgid);
                }
                if r.tag == ber::SEARCH_ENTRY {
                    entries[i] += 1;
                    if let (Expect::OneEntry(dn), Some(true)) = (&expect[i], shared.map(|s| s.opts.check_dn)) {
                        if !r.dn.eq_ignore_ascii_case(dn.as_bytes()) {
                            failures.push(format!("unexpected entry {}", String::from_utf8_lossy(r.dn)));
                        }
                    }
                    continue;
                }
                pending -= 1;
                let ok = match &expect[i] {
                    Expect::Result(tag) => r.tag == *tag && r.code == 0,
                    Expect::OneEntry(_) => r.tag == ber::SEARCH_DONE && r.code == 0 && entries[i] == 1,
                };
                if !ok {
                    failures.push(format!(
                        "op {} failed: tag {:#x} code {} entries {}",
                        r.msgid, r.tag, r.code, entries[i]
                    ));
                } else if let Some(s) = shared {
                    if s.measuring.get() {
                        let us = starts[i].elapsed().as_micros() as u64;
                        let _ = s.hist.borrow_mut().record(us.max(1));
                        s.ops.set(s.ops.get() + 1);
                    }
                }
            }
            self.rbuf.drain(..used);
            if pending == 0 {
                break;
            }
            let n = self.stream.read(&mut chunk).await?;
            if n == 0 {
                bail!("server closed the connection");
            }
            self.rbuf.extend_from_slice(&chunk[..n]);
        }
        Ok(())
    }
}

fn needs_root(s: Scenario) -> bool {
    matches!(s, Scenario::Modify | Scenario::Add | Scenario::Mixed)
}

async fn connection(shared: &Shared, conn: usize) -> Result<()> {
    let mut rng = SmallRng::seed_from_u64(conn as u64 * 7919 + 1);
    let mut seq = 0;
    if shared.opts.scenario == Scenario::Bindnew {
        while !shared.stop.get() {
            let op = next_op(shared, &mut rng, conn, &mut seq);
            let mut c = Conn::open(shared, false).await?;
            c.batch(shared, &[op]).await?;
            c.wbuf.clear();
            ber::unbind(&mut c.wbuf, c.msgid + 1);
            c.stream.write_all(&c.wbuf).await?;
            let _ = c.stream.close().await;
        }
        return Ok(());
    }
    let mut c = Conn::open(shared, needs_root(shared.opts.scenario)).await?;
    let mut ops = Vec::with_capacity(shared.opts.depth);
    while !shared.stop.get() {
        ops.clear();
        for _ in 0..shared.opts.depth {
            ops.push(next_op(shared, &mut rng, conn, &mut seq));
        }
        c.batch(shared, &ops).await?;
    }
    Ok(())
}

/// The classic mixed sequence, twice; reports the total and per-phase times.
async fn mixed(shared: Rc<Shared>) -> Result<(Report, Histogram<u64>)> {
    let mut conns = Vec::new();
    for _ in 0..shared.opts.conns {
        conns.push(Rc::new(RefCell::new(Conn::open(&shared, true).await?)));
    }
    shared.measuring.set(true);
    let cpu0 = shared.opts.server_pid.map(cpu_times).unwrap_or_default();
    let mut rng = SmallRng::seed_from_u64(42);
    let mut phases = Vec::new();
    let started = Instant::now();
    for cycle in 0..2 {
        let base = cycle * 10_000;
        let users = shared.opts.users;
        let plan: Vec<(&str, Vec<Op>)> = vec![
            ("add", (0..1000).map(|i| Op::Add(base + i)).collect()),
            ("search", (0..10_000).map(|_| Op::Search(rng.gen_range(0..users))).collect()),
            ("modify", (0..500).map(|_| Op::Modify(rng.gen_range(0..users), rng.gen())).collect()),
            ("read", (0..10_000).map(|_| Op::Read(rng.gen_range(0..users))).collect()),
            ("delete", (0..200).map(|i| Op::Delete(base + i)).collect()),
            ("add2", (1000..2000).map(|i| Op::Add(base + i)).collect()),
        ];
        for (name, ops) in plan {
            let t = Instant::now();
            *shared.phase.borrow_mut() = ops;
            shared.next.set(0);
            let mut tasks = Vec::new();
            for c in &conns {
                let (c, shared) = (c.clone(), shared.clone());
                tasks.push(glommio::spawn_local(async move { run_phase(&shared, &mut c.borrow_mut()).await }));
            }
            for t in tasks {
                t.await?;
            }
            phases.push((format!("{name}#{}", cycle + 1), t.elapsed().as_secs_f64()));
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let mut r = report(&shared, seconds);
    r.phases = phases;
    r.set_cpu(cpu0, shared.opts.server_pid.map(cpu_times).unwrap_or_default());
    let hist = shared.hist.borrow().clone();
    Ok((r, hist))
}

async fn run_phase(shared: &Shared, c: &mut Conn) -> Result<()> {
    let mut ops = Vec::with_capacity(shared.opts.depth);
    loop {
        ops.clear();
        {
            let phase = shared.phase.borrow();
            while ops.len() < shared.opts.depth && shared.next.get() < phase.len() {
                ops.push(phase[shared.next.get()]);
                shared.next.set(shared.next.get() + 1);
            }
        }
        if ops.is_empty() {
            return Ok(());
        }
        c.batch(shared, &ops).await?;
    }
}

impl Report {
    /// The server's CPU time between two `cpu_times` samples.
    fn set_cpu(&mut self, before: (f64, f64), after: (f64, f64)) {
        self.server_user_s = after.0 - before.0;
        self.server_sys_s = after.1 - before.1;
        self.server_cpu_s = self.server_user_s + self.server_sys_s;
    }
}

/// User and system CPU seconds of a process, from /proc.
pub fn cpu_times(pid: u32) -> (f64, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name, which may contain spaces.
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    let field = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // SAFETY: sysconf has no preconditions.
    let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (field(11) / tick, field(12) / tick)
}
