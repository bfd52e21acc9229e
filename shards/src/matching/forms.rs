//! Value forms the rules normalize to: string preparation (RFC 4518),
//! integers, DNs and name-and-optional-UID, OIDs, UUIDs, CSNs and
//! Generalized Time, each refusing what is not of its syntax.

use super::*;

/// String preparation (RFC 4518 §2): optionally fold case, normalize to
/// NFKC (so a decomposed `é`, a ligature `ﬁ` or a full-width `Ａ` match
/// their plain forms, and NBSP or an ideographic space is a SPACE),
/// collapse runs of spaces and (for whole values) trim them, after the
/// mapping as §2.6.1 says (`pad` + NBSP is `pad`). Borrows when nothing
/// changes: ASCII without upper case or double spaces. Unlike slapd's
/// `UTF8bvnormalize`, case is folded after the compatibility mapping too
/// and from current Unicode (`ℌotel` is `hotel` here, not there).
pub(super) fn prep(value: &[u8], fold_case: bool, trim: bool) -> Cow<'_, [u8]> {
    let trimmed = if trim { trim_spaces(value) } else { value };
    let ascii = trimmed.is_ascii();
    let clean = trimmed.len() == value.len()
        && ascii
        && !trimmed.windows(2).any(|w| w == b"  ")
        && !(fold_case && trimmed.iter().any(|b| b.is_ascii_uppercase()));
    if clean {
        return Cow::Borrowed(value);
    }
    let mut text = String::from_utf8_lossy(trimmed);
    if !ascii {
        // Folded before and after: NFKC may map a character to an upper
        // case one (`ℌ` is `H`).
        let folded: String = if fold_case { text.chars().flat_map(char::to_lowercase).collect() } else { text.into() };
        text = Cow::Owned(unicode_normalization::UnicodeNormalization::nfkc(folded.as_str()).collect());
    }
    // The spaces NFKC made of other spaces, at the edges (`trimmed` had
    // only those; the ASCII path has none).
    let text = match trim && !ascii && !LEGACY_EDGE_SPACES.get() {
        true => text.trim_matches(' '),
        false => &text,
    };
    let mut out = String::with_capacity(text.len());
    let mut last_space = false;
    for ch in text.chars() {
        if ch == ' ' {
            if !last_space {
                out.push(' ');
            }
            last_space = true;
        } else {
            last_space = false;
            if fold_case {
                out.extend(ch.to_lowercase());
            } else {
                out.push(ch);
            }
        }
    }
    Cow::Owned(out.into_bytes())
}

thread_local! {
    /// Set only while `upgrade` computes the forms data format 2 stored,
    /// which trimmed edge spaces before NFKC mapped other spaces to SPACE.
    pub(crate) static LEGACY_EDGE_SPACES: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// caseIgnore preparation of a whole value (also used for unknown attributes).
pub fn fold(value: &[u8]) -> Cow<'_, [u8]> {
    prep(value, true, true)
}

pub(super) fn trim_spaces(v: &[u8]) -> &[u8] {
    let start = v.iter().position(|b| *b != b' ').unwrap_or(v.len());
    let end = v.iter().rposition(|b| *b != b' ').map_or(start, |e| e + 1);
    &v[start..end]
}

pub(super) fn strip(value: &[u8], drop: impl Fn(u8) -> bool) -> Cow<'_, [u8]> {
    if value.iter().any(|b| drop(*b)) {
        Cow::Owned(value.iter().copied().filter(|b| !drop(*b)).collect())
    } else {
        Cow::Borrowed(value)
    }
}

/// Postal Address: lines separated by `$`, each compared as caseIgnore.
pub(super) fn list(value: &[u8]) -> Cow<'_, [u8]> {
    let lines: Vec<Cow<'_, [u8]>> = value.split(|b| *b == b'$').map(fold).collect();
    Cow::Owned(lines.join(&b'$'))
}

/// The canonical decimal form: optional `-`, no leading zeros, no `-0`.
pub fn integer(value: &[u8]) -> Option<Vec<u8>> {
    let (neg, digits) = match value {
        [b'-', rest @ ..] => (true, rest),
        [b'+', rest @ ..] => (false, rest),
        v => (false, v),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let start = digits.iter().position(|b| *b != b'0').unwrap_or(digits.len());
    let digits = &digits[start..];
    if digits.is_empty() {
        return Some(b"0".to_vec());
    }
    let mut out = Vec::with_capacity(digits.len() + 1);
    if neg {
        out.push(b'-');
    }
    out.extend_from_slice(digits);
    Some(out)
}

/// RFC 4517 §3.3.16 as slapd checks an assertion value: no sign but `-`,
/// no leading zeros, no `-0`. Stored values and DN keys keep the lenient
/// normal form above (existing keys must not move).
pub(super) fn strict_integer(value: &[u8]) -> bool {
    let digits = value.strip_prefix(b"-").unwrap_or(value);
    match digits {
        b"0" => digits.len() == value.len(),
        [first, ..] => *first != b'0' && digits.iter().all(u8::is_ascii_digit),
        [] => false,
    }
}

/// Sign byte, then the digit count (inverted for negatives), then digits
/// (nine's complement for negatives): bytewise order is numeric order.
pub(super) fn integer_key(norm: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(norm.len() + 3);
    match norm {
        [b'-', digits @ ..] => {
            out.push(0);
            out.extend_from_slice(&(u16::MAX - digits.len() as u16).to_be_bytes());
            out.extend(digits.iter().map(|d| b'9' - d + b'0'));
        }
        b"0" => out.push(1),
        digits => {
            out.push(2);
            out.extend_from_slice(&(digits.len() as u16).to_be_bytes());
            out.extend_from_slice(digits);
        }
    }
    out
}

/// How deep DN-valued RDN values may nest (`owner=owner=…=x`): each level
/// is a `Dn::parse` on the stack, and 8 KiB of DN held 1,364 of them, most
/// of a reactor's 2 MiB stack. Deeper is not a DN (invalidDNSyntax).
pub(super) const MAX_DN_NESTING: u32 = 16;

pub(super) fn dn(value: &[u8]) -> Option<String> {
    nested(|| std::str::from_utf8(value).ok().and_then(|t| Dn::parse(t).ok()).map(|d| d.norm()))
}

/// Runs a DN or RDN normalization one level deeper, none past
/// `MAX_DN_NESTING`: parsing normalizes each RDN value by its type's
/// rule, which for a DN- or RDN-valued type parses again.
fn nested(normalize: impl FnOnce() -> Option<String>) -> Option<String> {
    thread_local!(static DEPTH: std::cell::Cell<u32> = const { std::cell::Cell::new(0) });
    let depth = DEPTH.get();
    if depth >= MAX_DN_NESTING {
        return None;
    }
    DEPTH.set(depth + 1);
    let norm = normalize();
    DEPTH.set(depth);
    norm
}

/// One RDN (`cn=a+sn=b`) of known types, normalized as in a DN; empty as
/// slapd's `rdnValidate` allows.
pub(super) fn rdn(value: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(value).ok()?;
    if text.is_empty() {
        return Some(String::new());
    }
    // Types known and values present; not `Dn::validate`, whose syntax
    // check of an RDN-valued value would normalize it a second time at
    // every level (twice the work per level of `r=r=…`).
    let known =
        |d: &Dn| d.rdns().iter().flat_map(|r| &r.avas).all(|a| attr_type(&a.attr).is_some() && !a.value.is_empty());
    nested(|| Dn::parse(text).ok().filter(|d| d.rdns().len() == 1 && known(d)).map(|d| d.norm()))
}

/// Name and Optional UID: `DN` or `DN#'0101'B`.
pub(super) fn unique_member(value: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(value).ok()?;
    let (name, uid) = match text.rfind("#'") {
        Some(at) if text.ends_with("'B") => (&text[..at], Some(&text[at..])),
        _ => (text, None),
    };
    let mut out = dn(name.as_bytes())?.into_bytes();
    if let Some(uid) = uid {
        out.extend_from_slice(uid.as_bytes());
    }
    Some(out)
}

/// The first component of a schema description value: `( 2.5.4.3 NAME …`.
pub(super) fn first_component(value: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(value).ok()?.trim();
    let text = text.strip_prefix('(').unwrap_or(text).trim_start();
    text.split_whitespace().next()
}

/// An OID in numeric form: descriptors resolve through the schema.
pub(super) fn oid(text: &str) -> Option<Vec<u8>> {
    let text = text.trim();
    if is_numeric_oid(text) {
        return Some(text.as_bytes().to_vec());
    }
    if !is_descriptor(text) {
        return None;
    }
    let schema = schema::get();
    Some(match schema.oid_of(text) {
        Some(oid) => oid.as_bytes().to_vec(),
        None => text.to_ascii_lowercase().into_bytes(),
    })
}

/// RFC 4512's `numericoid` as slapd's objectIdentifierMatch reads a
/// value: one arc or more (`7` is one), no leading zero, nothing around.
pub fn numericoid(v: &[u8]) -> bool {
    !v.is_empty()
        && v.split(|b| *b == b'.')
            .all(|arc| !arc.is_empty() && arc.iter().all(u8::is_ascii_digit) && (arc == b"0" || arc[0] != b'0'))
}

pub fn is_numeric_oid(s: &str) -> bool {
    !s.is_empty()
        && s.split('.').all(|part| {
            !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()) && (part == "0" || !part.starts_with('0'))
        })
        && s.contains('.')
}

pub fn is_descriptor(s: &str) -> bool {
    let mut bytes = s.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphabetic()) && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

pub(super) fn uuid(value: &[u8]) -> Option<Vec<u8>> {
    let ok = value.len() == 36
        && value.iter().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => *b == b'-',
            _ => b.is_ascii_hexdigit(),
        });
    ok.then(|| value.to_ascii_lowercase())
}

/// A CSN's normal form, as slapd's: the current layout
/// (`YYYYmmddHHMMSS.uuuuuuZ#count#sid#mod`, parts of 22, 6, 3 and 6
/// octets) with its sid and mod in lower case, or OpenLDAP 2.3's
/// (`YYYYmmddHHMMSSZ#count#sid#mod`, 15, 6, 2 and 6) brought to it. slapd
/// checks nothing more (probes45).
pub fn csn(value: &[u8]) -> Option<Cow<'_, [u8]>> {
    let mut split = value.split(|b| *b == b'#');
    let parts: [&[u8]; 4] = [split.next()?, split.next()?, split.next()?, split.next()?];
    if split.next().is_some() {
        return None;
    }
    let (time, count, sid, modifier) = match parts.map(<[u8]>::len) {
        [22, 6, 3, 6] if !value[23..].iter().any(u8::is_ascii_uppercase) => return Some(Cow::Borrowed(value)),
        [22, 6, 3, 6] => (parts[0].to_vec(), parts[1], parts[2].to_vec(), parts[3]),
        [15, 6, 2, 6] => {
            let mut time = parts[0][..14].to_vec();
            time.extend_from_slice(b".000000Z");
            let mut sid = b"0".to_vec();
            sid.extend_from_slice(parts[2]);
            (time, parts[1], sid, parts[3])
        }
        _ => return None,
    };
    let mut out = time;
    for (part, lower) in [(count, false), (&sid[..], true), (modifier, true)] {
        out.push(b'#');
        out.extend(part.iter().map(|b| if lower { b.to_ascii_lowercase() } else { *b }));
    }
    Some(Cow::Owned(out))
}

/// Generalized Time (RFC 4517 §3.3.13) in UTC as `YYYYMMDDHHMMSS` followed
/// by the fraction's significant digits: one string per instant, and its
/// bytewise order is time order.
pub fn generalized_time(value: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(value).ok()?;
    let (body, offset_secs) = if let Some(b) = text.strip_suffix('Z') {
        (b, 0i64)
    } else {
        let at = text.rfind(['+', '-'])?;
        let (b, off) = text.split_at(at);
        let digits = &off[1..];
        if !(digits.len() == 2 || digits.len() == 4) || !digits.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        let h: i64 = digits[..2].parse().ok()?;
        let m: i64 = if digits.len() == 4 { digits[2..].parse().ok()? } else { 0 };
        if h > 23 || m > 59 {
            return None;
        }
        let sign = if off.starts_with('-') { -1 } else { 1 };
        (b, sign * (h * 3600 + m * 60))
    };
    let (whole, frac) = match body.find(['.', ',']) {
        Some(at) => (&body[..at], Some(&body[at + 1..])),
        None => (body, None),
    };
    if !whole.bytes().all(|c| c.is_ascii_digit()) || !matches!(whole.len(), 10 | 12 | 14) {
        return None;
    }
    if let Some(f) = frac {
        if f.is_empty() || !f.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
    }
    let num = |r: std::ops::Range<usize>| whole[r].parse::<u32>().ok();
    let (year, month, day, hour) = (num(0..4)? as i32, num(4..6)?, num(6..8)?, num(8..10)?);
    let minute = if whole.len() >= 12 { num(10..12)? } else { 0 };
    let second = if whole.len() == 14 { num(12..14)? } else { 0 };
    // The fraction applies to the last unit given, in nanoseconds of a second.
    let unit_nanos: u128 = match whole.len() {
        10 => 3_600_000_000_000,
        12 => 60_000_000_000,
        _ => 1_000_000_000,
    };
    let frac_nanos = frac.map_or(0, |f| {
        let f = &f[..f.len().min(18)];
        let n: u128 = f.parse().unwrap_or(0);
        n * unit_nanos / 10u128.pow(f.len() as u32)
    });
    let month = time::Month::try_from(month as u8).ok()?;
    let date = time::Date::from_calendar_date(year, month, day as u8).ok()?;
    // Leap second 60 is allowed by the syntax; fold it into the next minute.
    // (slapd keeps it, and every digit of a fraction; changing this normal
    // form would strand the index and DN keys already written with it.)
    let (second, leap) = if second == 60 { (59, 1) } else { (second, 0) };
    let t = time::Time::from_hms(hour as u8, minute as u8, second as u8).ok()?;
    // Checked: a leap second or a zone west of UTC can carry 9999-12-31
    // past the last year `time` holds (its `+` panics there), and a zone
    // east of it carry year 0 before the first one the syntax allows.
    let at = time::PrimitiveDateTime::new(date, t)
        .assume_utc()
        .checked_add(time::Duration::seconds(leap - offset_secs))?
        .checked_add(time::Duration::nanoseconds(frac_nanos as i64))
        .filter(|at| (0..=9999).contains(&at.year()))?;
    let mut out = format!(
        "{:04}{:02}{:02}{:02}{:02}{:02}",
        at.year(),
        at.month() as u8,
        at.day(),
        at.hour(),
        at.minute(),
        at.second()
    );
    if at.nanosecond() > 0 {
        let nanos = format!("{:09}", at.nanosecond());
        out.push_str(nanos.trim_end_matches('0'));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An RDN value nests under the same bound as a DN value: a type
    /// whose equality is rdnMatch (a schema file may define one) would
    /// otherwise parse `r=r=r=…` one level per two bytes, past the stack.
    #[test]
    fn rdn_values_nest_under_the_dn_bound() {
        fn down(n: u32) -> Option<String> {
            match n {
                0 => rdn(b"cn=a"),
                _ => nested(|| down(n - 1)),
            }
        }
        assert_eq!(down(MAX_DN_NESTING - 1).as_deref(), Some("cn=a"));
        assert_eq!(down(MAX_DN_NESTING), None);
    }
}
