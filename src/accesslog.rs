//! The access log: slapd's `stats` lines (`conn=1000 op=1 SRCH base="…"`,
//! `conn=1000 op=1 SEARCH RESULT tag=101 err=0 qtime=… etime=… nentries=1
//! text=`) or the same fields as JSON lines, to stderr or a file.
//!
//! A shard formats lines into its own buffer (no lock, no syscall) and hands
//! the buffer to the writer thread when it grows past 64 KiB or every
//! 100 ms; the writer thread does the blocking writes. The level (`off`,
//! `stats`, `debug`) is one process-wide flag, changed at run time by
//! `coredir ctl log-level` and `reload`. Passwords and other credentials
//! are never logged.

use std::cell::RefCell;
use std::io::Write;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Off = 0,
    Stats = 1,
    Debug = 2,
}

impl LogLevel {
    pub fn parse(s: &str) -> Option<LogLevel> {
        match s {
            "off" | "none" => Some(LogLevel::Off),
            "stats" => Some(LogLevel::Stats),
            "debug" => Some(LogLevel::Debug),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            LogLevel::Off => "off",
            LogLevel::Stats => "stats",
            LogLevel::Debug => "debug",
        }
    }
}

static LEVEL: AtomicU8 = AtomicU8::new(LogLevel::Off as u8);
static JSON: AtomicU8 = AtomicU8::new(0);
static SINK: OnceLock<mpsc::Sender<String>> = OnceLock::new();

pub fn level() -> LogLevel {
    match LEVEL.load(Ordering::Relaxed) {
        0 => LogLevel::Off,
        1 => LogLevel::Stats,
        _ => LogLevel::Debug,
    }
}

pub fn set_level(l: LogLevel) {
    LEVEL.store(l as u8, Ordering::Relaxed);
}

pub fn enabled(l: LogLevel) -> bool {
    LEVEL.load(Ordering::Relaxed) >= l as u8 && l != LogLevel::Off
}

fn json() -> bool {
    JSON.load(Ordering::Relaxed) == 1
}

/// Starts the writer thread: `file` (appended) or stderr.
pub fn start(file: Option<&std::path::Path>, format_json: bool, level: LogLevel) -> anyhow::Result<()> {
    let mut out: Box<dyn Write + Send> = match file {
        Some(p) => Box::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|e| anyhow::anyhow!("log.file: {}: {e}", p.display()))?,
        ),
        None => Box::new(std::io::stderr()),
    };
    JSON.store(format_json as u8, Ordering::Relaxed);
    set_level(level);
    let (tx, rx) = mpsc::channel::<String>();
    if SINK.set(tx).is_err() {
        return Ok(());
    }
    std::thread::Builder::new().name("access-log".into()).spawn(move || {
        for chunk in rx {
            let _ = out.write_all(chunk.as_bytes());
            let _ = out.flush();
        }
    })?;
    Ok(())
}

/// One shard's buffer of formatted lines.
#[derive(Default)]
pub struct ShardLog {
    buf: RefCell<String>,
    /// The current second, formatted once (`YYYY-MM-DDTHH:MM:SS`), with
    /// its Unix time: a line adds only its fraction.
    second: RefCell<(i64, String)>,
}

const FLUSH_BYTES: usize = 64 << 10;
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);

/// A field of a log line: JSON gets typed values, stats lines `k=v`.
pub enum V<'a> {
    Num(u64),
    Secs(f64),
    /// Printed bare in stats lines.
    Word(&'a str),
    /// Quoted in stats lines (`dn="…"`).
    Quoted(&'a str),
}

impl ShardLog {
    /// Appends the time as RFC 3339 in UTC, as `time`'s `Rfc3339` writes
    /// it (`2026-12-04T17:06:02.11944818Z`: nanoseconds, trailing zeros
    /// left out), formatting the date and time of day once a second.
    fn timestamp(&self, buf: &mut String) {
        self.timestamp_at(buf, std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default());
    }

    fn timestamp_at(&self, buf: &mut String, now: Duration) {
        use std::fmt::Write as _;
        let secs = now.as_secs() as i64;
        let mut second = self.second.borrow_mut();
        if second.0 != secs || second.1.is_empty() {
            let at = time::OffsetDateTime::from_unix_timestamp(secs).unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
            let full = at.format(&time::format_description::well_known::Rfc3339).unwrap_or_default();
            // `…:SSZ` without its `Z`.
            *second = (secs, full.trim_end_matches('Z').to_string());
        }
        buf.push_str(&second.1);
        let nanos = now.subsec_nanos();
        if nanos > 0 {
            let mut digits = 9;
            let mut n = nanos;
            while n % 10 == 0 {
                n /= 10;
                digits -= 1;
            }
            let _ = write!(buf, ".{n:0digits$}");
        }
        buf.push('Z');
    }

    /// Appends one line: `conn=C op=O <event> k=v …` (or its JSON form).
    pub fn line(&self, conn: u64, op: Option<u64>, event: &str, fields: &[(&str, V)]) {
        use std::fmt::Write as _;
        let mut buf = self.buf.borrow_mut();
        if json() {
            buf.push_str("{\"time\":\"");
            self.timestamp(&mut buf);
            let _ = write!(buf, "\",\"conn\":{conn}");
            if let Some(op) = op {
                let _ = write!(buf, ",\"op\":{op}");
            }
            buf.push_str(",\"type\":");
            push_json_str(&mut buf, event);
            for (k, v) in fields {
                buf.push_str(",\"");
                buf.push_str(k);
                buf.push_str("\":");
                match v {
                    V::Num(n) => drop(write!(buf, "{n}")),
                    V::Secs(s) => drop(write!(buf, "{s:.6}")),
                    V::Word(w) | V::Quoted(w) => push_json_str(&mut buf, w),
                }
            }
            buf.push_str("}\n");
        } else {
            self.timestamp(&mut buf);
            let _ = write!(buf, " conn={conn}");
            if let Some(op) = op {
                let _ = write!(buf, " op={op}");
            }
            buf.push(' ');
            buf.push_str(event);
            for (k, v) in fields {
                buf.push(' ');
                buf.push_str(k);
                buf.push('=');
                match v {
                    V::Num(n) => drop(write!(buf, "{n}")),
                    V::Secs(s) => drop(write!(buf, "{s:.6}")),
                    V::Word(w) => push_escaped(&mut buf, w, false),
                    V::Quoted(w) => {
                        buf.push('"');
                        push_escaped(&mut buf, w, true);
                        buf.push('"');
                    }
                }
            }
            buf.push('\n');
        }
        if buf.len() >= FLUSH_BYTES {
            drop(buf);
            self.flush();
        }
    }

    /// `conn=C fd=F ACCEPT from IP=a.b.c.d:p`, as slapd writes it.
    pub fn accept(&self, conn: u64, fd: i32, peer: &str) {
        if json() {
            self.line(conn, None, "ACCEPT", &[("fd", V::Num(fd.max(0) as u64)), ("from", V::Word(peer))]);
        } else {
            self.line(conn, None, &format!("fd={} ACCEPT from {peer}", fd.max(0)), &[]);
        }
    }

    /// `conn=C fd=F closed`.
    pub fn closed(&self, conn: u64, fd: i32) {
        if json() {
            self.line(conn, None, "closed", &[("fd", V::Num(fd.max(0) as u64))]);
        } else {
            self.line(conn, None, &format!("fd={} closed", fd.max(0)), &[]);
        }
    }

    /// Hands what is buffered to the writer thread.
    pub fn flush(&self) {
        let mut buf = self.buf.borrow_mut();
        if buf.is_empty() {
            return;
        }
        let chunk = std::mem::take(&mut *buf);
        if let Some(tx) = SINK.get() {
            let _ = tx.send(chunk);
        }
    }
}

fn push_json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod timestamp_tests {
    /// The cached form is the one `time` writes, for every fraction.
    #[test]
    fn timestamps_read_as_rfc3339_writes_them() {
        let log = super::ShardLog::default();
        let base = 1_796_000_000u64;
        for (secs, nanos) in
            [(0, 0), (0, 1), (0, 10), (0, 120_000_000), (0, 999_999_999), (1, 5), (1, 119_448_180), (86_400, 0)]
        {
            let now = std::time::Duration::new(base + secs, nanos);
            let mut buf = String::new();
            log.timestamp_at(&mut buf, now);
            let at = time::OffsetDateTime::from_unix_timestamp_nanos(now.as_nanos() as i128).unwrap();
            assert_eq!(buf, at.format(&time::format_description::well_known::Rfc3339).unwrap(), "{now:?}");
        }
    }
}

/// A client's text on a stats line (a DN, an authzid, an error's text
/// that quotes them): a line break would let it write lines of its own (a
/// forged `BIND … mech=SIMPLE`), and a quote end a `"…"` field, so control
/// characters (and `"` when `quoted`) go as `\XX`, as in an escaped DN.
fn push_escaped(buf: &mut String, w: &str, quoted: bool) {
    use std::fmt::Write as _;
    let special = |b: u8| b < 0x20 || b == 0x7f || (quoted && b == b'"');
    if !w.bytes().any(special) {
        buf.push_str(w);
        return;
    }
    for c in w.chars() {
        if c.is_ascii() && special(c as u8) {
            let _ = write!(buf, "\\{:02X}", c as u8);
        } else {
            buf.push(c);
        }
    }
}
