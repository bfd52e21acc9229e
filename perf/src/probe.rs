//! `coredir-perf probe`: what one costly request does to everyone else on
//! its shard. One connection sends an attack search over and over (an OR
//! of unindexed substring terms, as anonymous; `--depth` of them in flight
//! at once), another sends a base search
//! every few milliseconds and records how long each took. Run it against a
//! one-shard server so both connections share the reactor. The figure that
//! matters is the probe's p99 and max while the attack runs.

use crate::ber::{self, Filter};
use anyhow::{bail, Context, Result};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Args, Clone)]
pub struct Args {
    #[arg(long, default_value = "127.0.0.1:3389")]
    addr: String,
    #[arg(long, default_value = "dc=example,dc=com")]
    base: String,
    /// Terms in the attack's OR, each `(description=*<n>zz*)`, matching nothing.
    #[arg(long, default_value_t = 1000)]
    terms: usize,
    /// Measured seconds.
    #[arg(long, default_value_t = 20.0)]
    duration: f64,
    /// Milliseconds between two probe searches.
    #[arg(long, default_value_t = 5)]
    interval_ms: u64,
    /// Attack searches the attacker keeps in flight on its one connection.
    #[arg(long, default_value_t = 1)]
    depth: usize,
    /// Label for the output.
    #[arg(long, default_value = "server")]
    label: String,
}

pub fn run(a: Args) -> Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    let attacks = Arc::new(AtomicU64::new(0));
    let attacker = {
        let (a, stop, attacks) = (a.clone(), stop.clone(), attacks.clone());
        std::thread::spawn(move || attack(&a, &stop, &attacks))
    };
    // Let the first attack search start before the probe does.
    std::thread::sleep(Duration::from_millis(200));
    let probe = probe(&a);
    stop.store(true, Ordering::Relaxed);
    let probe = probe?;
    attacker.join().map_err(|_| anyhow::anyhow!("the attack thread panicked"))??;
    let mut h = hdrhistogram::Histogram::<u64>::new(3)?;
    for us in &probe {
        h.record(*us)?;
    }
    println!(
        "{:<16} terms {:>5}  probes {:>6}  p50 {:>8.1} ms  p99 {:>8.1} ms  max {:>8.1} ms  attack searches {}",
        a.label,
        a.terms,
        h.len(),
        h.value_at_quantile(0.5) as f64 / 1000.0,
        h.value_at_quantile(0.99) as f64 / 1000.0,
        h.max() as f64 / 1000.0,
        attacks.load(Ordering::Relaxed),
    );
    Ok(())
}

/// Base searches every `interval_ms` for `duration`; the latency of each, µs.
fn probe(a: &Args) -> Result<Vec<u64>> {
    let mut c = Conn::open(&a.addr)?;
    let (mut out, mut lat) = (Vec::new(), Vec::new());
    let end = Instant::now() + Duration::from_secs_f64(a.duration);
    let mut msgid = 1;
    while Instant::now() < end {
        out.clear();
        ber::search(&mut out, msgid, &a.base, 0, Filter::Present("objectClass"));
        let t = Instant::now();
        c.send(&out)?;
        c.until_done(Some(msgid))?;
        lat.push(t.elapsed().as_micros() as u64);
        msgid += 1;
        std::thread::sleep(Duration::from_millis(a.interval_ms));
    }
    Ok(lat)
}

/// The attack search, again and again until `stop`.
fn attack(a: &Args, stop: &AtomicBool, attacks: &AtomicU64) -> Result<()> {
    let mut c = Conn::open(&a.addr)?;
    let terms: Vec<String> = (0..a.terms).map(|n| format!("{n}zz")).collect();
    let mut out = Vec::new();
    let mut msgid = 1;
    let mut send = |c: &mut Conn, msgid: i32| {
        out.clear();
        ber::search(&mut out, msgid, &a.base, 2, Filter::AnyOf("description", &terms));
        c.send(&out)
    };
    // `depth` in flight: one more each time one ends.
    for _ in 0..a.depth {
        send(&mut c, msgid)?;
        msgid += 1;
    }
    while !stop.load(Ordering::Relaxed) {
        c.until_done(None)?;
        attacks.fetch_add(1, Ordering::Relaxed);
        send(&mut c, msgid)?;
        msgid += 1;
    }
    Ok(())
}

struct Conn {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    fn open(addr: &str) -> Result<Conn> {
        let s = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
        s.set_nodelay(true)?;
        // A deadline on every read: a server that stops answering ends the run.
        s.set_read_timeout(Some(Duration::from_secs(600)))?;
        Ok(Conn { s, buf: Vec::new() })
    }

    fn send(&mut self, msg: &[u8]) -> Result<()> {
        Ok(self.s.write_all(msg)?)
    }

    /// Reads responses until the SearchResultDone of `msgid` (`None`: of any).
    fn until_done(&mut self, msgid: Option<i32>) -> Result<()> {
        let mut chunk = [0u8; 16384];
        loop {
            while let Some(n) = ber::frame_len(&self.buf).filter(|n| *n <= self.buf.len()) {
                let r = ber::parse(&self.buf[..n]).context("an unreadable response")?;
                let done = msgid.is_none_or(|m| r.msgid == m) && r.tag == ber::SEARCH_DONE;
                self.buf.drain(..n);
                if done {
                    return Ok(());
                }
            }
            let n = self.s.read(&mut chunk)?;
            if n == 0 {
                bail!("the server closed the connection");
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}
