//! Change sequence numbers and the hybrid logical clock that issues them.
//!
//! A `Csn` orders every change of the replicated directory: physical time
//! in microseconds, a logical counter for changes within one microsecond
//! (or while the wall clock stands still or steps back), the issuing
//! server's id and the partition. Comparison is lexicographic in that
//! order, so two servers never issue equal CSNs.
//!
//! Each owner keeps its own `Hlc` (no state shared between cores). The
//! clock never runs backwards, not even across a restart on a host whose
//! clock stepped back: the last CSN issued is stored in the same commit as
//! the changes it stamped (one small `meta` key, next to the entry id
//! counter every commit writes anyway) and the clock restarts from it, as
//! 389-ds' `nsState` does. A remote CSN more than `max_forward_skew` ahead
//! of the local wall clock is refused, not adopted: one bad clock must not
//! drag every server into the future.
//!
//! The text form is OpenLDAP's (`20261130235959.123456Z#000000#001#000000`:
//! time, counter, server id, and the partition in the "mod" field), so
//! `entryCSN` and syncrepl cookies read as slapd's do and sort the same.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// OpenLDAP's counter field has 6 hex digits.
pub const MAX_LOGICAL: u32 = 0xff_ffff;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Csn {
    pub phys_us: u64,
    pub logical: u32,
    pub sid: u16,
    pub partition: u16,
}

impl Csn {
    /// Fixed-width big-endian bytes that sort as the CSN does (keys).
    pub fn to_bytes(self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.phys_us.to_be_bytes());
        b[8..12].copy_from_slice(&self.logical.to_be_bytes());
        b[12..14].copy_from_slice(&self.sid.to_be_bytes());
        b[14..].copy_from_slice(&self.partition.to_be_bytes());
        b
    }

    pub fn from_bytes(b: &[u8]) -> Option<Csn> {
        let b: &[u8; 16] = b.try_into().ok()?;
        Some(Csn {
            phys_us: u64::from_be_bytes(b[..8].try_into().ok()?),
            logical: u32::from_be_bytes(b[8..12].try_into().ok()?),
            sid: u16::from_be_bytes(b[12..14].try_into().ok()?),
            partition: u16::from_be_bytes(b[14..].try_into().ok()?),
        })
    }

    /// The highest CSN of server `sid` at time `phys_us`: what a cookie may
    /// claim below a commit floor.
    pub fn top_of(phys_us: u64, sid: u16) -> Csn {
        Csn { phys_us, logical: MAX_LOGICAL, sid, partition: u16::MAX }
    }

    /// The highest CSN of the same server below this one.
    pub fn just_below(self) -> Csn {
        match self.logical {
            0 => Csn::top_of(self.phys_us.saturating_sub(1), self.sid),
            l => Csn { phys_us: self.phys_us, logical: l - 1, sid: self.sid, partition: u16::MAX },
        }
    }

    /// Parses OpenLDAP's text form (`YYYYmmddHHMMSS.uuuuuuZ#cnt#sid#mod`).
    pub fn parse(s: &str) -> Option<Csn> {
        let mut parts = s.split('#');
        let (time, cnt, sid, modf) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || time.len() != 22 || !time.ends_with('Z') || time.as_bytes()[14] != b'.' {
            return None;
        }
        let num = |r: std::ops::Range<usize>| time.get(r)?.parse::<u32>().ok();
        let date = time::Date::from_calendar_date(
            num(0..4)? as i32,
            time::Month::try_from(num(4..6)? as u8).ok()?,
            num(6..8)? as u8,
        )
        .ok()?;
        let t = time::Time::from_hms(num(8..10)? as u8, num(10..12)? as u8, num(12..14)? as u8).ok()?;
        let secs = date.with_time(t).assume_utc().unix_timestamp();
        let micros = num(15..21)? as u64;
        if secs < 0 || micros >= 1_000_000 {
            return None;
        }
        let hex = |h: &str, max: usize| (h.len() <= max).then(|| u32::from_str_radix(h, 16).ok()).flatten();
        Some(Csn {
            phys_us: secs as u64 * 1_000_000 + micros,
            logical: hex(cnt, 6)?,
            sid: u16::try_from(hex(sid, 3)?).ok()?,
            partition: u16::try_from(hex(modf, 6)?).ok()?,
        })
    }
}

impl fmt::Display for Csn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = time::OffsetDateTime::from_unix_timestamp((self.phys_us / 1_000_000) as i64)
            .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
        write!(
            f,
            "{:04}{:02}{:02}{:02}{:02}{:02}.{:06}Z#{:06x}#{:03x}#{:06x}",
            t.year(),
            t.month() as u8,
            t.day(),
            t.hour(),
            t.minute(),
            t.second(),
            self.phys_us % 1_000_000,
            self.logical,
            self.sid,
            self.partition
        )
    }
}

/// The wall clock, in microseconds since the epoch, plus a test offset
/// (`COREDIR_TEST_CLOCK_OFFSET_S`: the replication tests' skewed clock).
pub fn wall_us() -> u64 {
    static OFFSET_US: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    let offset = *OFFSET_US.get_or_init(|| {
        std::env::var("COREDIR_TEST_CLOCK_OFFSET_S").ok().and_then(|v| v.parse::<i64>().ok()).unwrap_or(0) * 1_000_000
    });
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO).as_micros() as i64;
    (now + offset).max(0) as u64
}

/// The default bound on how far ahead of the local clock a peer's CSN may be.
pub const DEFAULT_MAX_FORWARD_SKEW: Duration = Duration::from_secs(60);

/// A remote CSN too far in the future: refused, not adopted.
#[derive(Debug, Clone, PartialEq)]
pub struct Skew {
    pub remote: Csn,
    pub ahead_us: u64,
}

impl fmt::Display for Skew {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CSN {} from server {} is {:.1} s ahead of this server's clock",
            self.remote,
            self.remote.sid,
            self.ahead_us as f64 / 1e6
        )
    }
}

/// One owner's hybrid logical clock (Kulkarni et al.).
#[derive(Debug, Clone)]
pub struct Hlc {
    sid: u16,
    phys_us: u64,
    logical: u32,
    /// Ticked since the state was last handed out by `persist`.
    moved: bool,
    max_forward_skew_us: u64,
}

impl Hlc {
    /// A clock that continues from a persisted state (`persist`'s bytes;
    /// none for a new database).
    pub fn new(sid: u16, persisted: Option<&[u8]>, max_forward_skew: Duration) -> Hlc {
        let (phys_us, logical) = match persisted.and_then(|b| <[u8; 12]>::try_from(b).ok()) {
            Some(b) => (
                u64::from_be_bytes(b[..8].try_into().expect("8 bytes")),
                u32::from_be_bytes(b[8..].try_into().expect("4 bytes")),
            ),
            None => (0, 0),
        };
        Hlc { sid, phys_us, logical, moved: false, max_forward_skew_us: max_forward_skew.as_micros() as u64 }
    }

    /// The newest CSN this clock has issued (or adopted).
    pub fn issued(&self) -> Csn {
        Csn { phys_us: self.phys_us, logical: self.logical, sid: self.sid, partition: u16::MAX }
    }

    /// The server id in the CSNs this clock issues.
    pub fn sid(&self) -> u16 {
        self.sid
    }

    /// The next CSN for a change to `partition`.
    pub fn tick(&mut self, partition: u16) -> Csn {
        self.tick_at(wall_us(), partition)
    }

    fn tick_at(&mut self, wall: u64, partition: u16) -> Csn {
        self.moved = true;
        if wall > self.phys_us {
            self.phys_us = wall;
            self.logical = 0;
        } else if self.logical == MAX_LOGICAL {
            // The text form has six hex digits: move time on instead.
            self.phys_us += 1;
            self.logical = 0;
        } else {
            self.logical += 1;
        }
        Csn { phys_us: self.phys_us, logical: self.logical, sid: self.sid, partition }
    }

    /// A time every CSN this clock issues from now on lies above (its
    /// `phys_us` is greater): the commit floor (`shard::Floors`).
    pub fn floor(&self) -> u64 {
        match self.logical == MAX_LOGICAL {
            true => self.phys_us,
            false => self.phys_us.saturating_sub(1),
        }
    }

    /// Moves the clock to the wall clock and past every CSN of this
    /// microsecond, so that `floor` reaches now while nothing is written.
    pub fn close(&mut self) {
        self.phys_us = self.phys_us.max(wall_us());
        self.logical = MAX_LOGICAL;
        self.moved = true;
    }

    /// Moves the clock to at least `csn` without the skew check: a stamp
    /// already accepted (an entry's, moved or replicated in), which the
    /// next change to that entry must sort after.
    pub fn adopt(&mut self, csn: Csn) {
        if (csn.phys_us, csn.logical) > (self.phys_us, self.logical) {
            (self.phys_us, self.logical) = (csn.phys_us, csn.logical);
            self.moved = true;
        }
    }

    /// Takes a remote CSN into account, so that later local CSNs sort after
    /// it; refuses one too far ahead of the wall clock.
    pub fn observe(&mut self, remote: Csn) -> Result<(), Skew> {
        self.observe_at(wall_us(), remote)
    }

    fn observe_at(&mut self, wall: u64, remote: Csn) -> Result<(), Skew> {
        if remote.phys_us > wall + self.max_forward_skew_us {
            return Err(Skew { remote, ahead_us: remote.phys_us - wall });
        }
        if remote.phys_us > self.phys_us {
            self.phys_us = remote.phys_us;
            self.logical = remote.logical;
        } else if remote.phys_us == self.phys_us {
            self.logical = self.logical.max(remote.logical);
        }
        Ok(())
    }

    /// The state to store with the commit, when the clock has ticked
    /// since the last call.
    pub fn persist(&mut self) -> Option<[u8; 12]> {
        if !std::mem::take(&mut self.moved) {
            return None;
        }
        let mut b = [0u8; 12];
        b[..8].copy_from_slice(&self.phys_us.to_be_bytes());
        b[8..].copy_from_slice(&self.logical.to_be_bytes());
        Some(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_form_is_openldaps_and_round_trips() {
        let c = Csn { phys_us: 1_796_083_199_123_456, logical: 0x1f, sid: 0x2a, partition: 0xff };
        assert_eq!(c.to_string(), "20261130235959.123456Z#00001f#02a#0000ff");
        assert_eq!(Csn::parse(&c.to_string()), Some(c));
        assert_eq!(Csn::from_bytes(&c.to_bytes()), Some(c));
        // slapd's own: 2.5 writes `#000000#000#000000` for server id 0.
        let s = Csn::parse("20240102030405.000006Z#000000#000#000000").unwrap();
        assert_eq!((s.phys_us % 1_000_000, s.logical, s.sid), (6, 0, 0));
        for bad in ["", "20240102030405Z#000000#000#000000", "20241302030405.000000Z#000000#000#000000", "x#y#z#w"] {
            assert_eq!(Csn::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn text_and_bytes_sort_as_csns() {
        let a = Csn { phys_us: 1_000_000_000_000_000, logical: 0xffff, sid: 2, partition: 0 };
        let b = Csn { phys_us: 1_000_000_000_000_001, logical: 0, sid: 1, partition: 0 };
        let c = Csn { phys_us: 1_000_000_000_000_001, logical: 0, sid: 3, partition: 0 };
        assert!(a < b && b < c);
        assert!(a.to_string() < b.to_string() && b.to_string() < c.to_string());
        assert!(a.to_bytes() < b.to_bytes() && b.to_bytes() < c.to_bytes());
    }

    #[test]
    fn the_clock_never_goes_back_and_refuses_a_far_future() {
        let mut h = Hlc::new(1, None, Duration::from_secs(60));
        let a = h.tick_at(1_000, 0);
        let b = h.tick_at(900, 0); // the wall clock stepped back
        let c = h.tick_at(1_000, 0);
        assert!(a < b && b < c && b.phys_us == 1_000 && c.logical == 2);
        // A remote CSN a little ahead is adopted; later local ones follow it.
        h.observe_at(1_000, Csn { phys_us: 5_000, logical: 7, sid: 2, partition: 0 }).unwrap();
        let d = h.tick_at(1_000, 0);
        assert!(d.phys_us == 5_000 && d.logical == 8);
        // Ten minutes ahead is refused and leaves the clock alone.
        let far = Csn { phys_us: 1_000 + 600_000_000, logical: 0, sid: 2, partition: 0 };
        let e = h.observe_at(1_000, far).unwrap_err();
        assert_eq!(e.ahead_us, 600_000_000);
        assert_eq!(h.tick_at(1_000, 0).phys_us, 5_000);
        // The counter's six hex digits never wrap.
        h.logical = MAX_LOGICAL;
        let f = h.tick_at(0, 0);
        assert!(f.phys_us == 5_001 && f.logical == 0);
    }

    #[test]
    fn a_restart_continues_from_the_persisted_state() {
        let mut h = Hlc::new(1, None, Duration::from_secs(60));
        assert_eq!(h.persist(), None);
        h.tick_at(5_000, 0);
        let before = h.tick_at(5_000, 0);
        let state = h.persist().expect("it ticked");
        assert_eq!(h.persist(), None);
        // The wall clock stepped back across the restart.
        let mut after = Hlc::new(1, Some(&state), Duration::from_secs(60));
        assert!(after.tick_at(1_000, 0) > before);
    }
}
