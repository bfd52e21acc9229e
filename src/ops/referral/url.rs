//! LDAP URLs (RFC 4516) as OpenLDAP's libldap reads and writes them, for
//! the referrals slapd rewrites: it parses each `ref` value, sets its DN
//! and a default scope, and writes it out again, so that what comes back
//! is libldap's spelling (scheme in lower case, each part decoded and
//! escaped again, scope by its short name, trailing empty parts gone).

/// How a `ref` value reads.
#[derive(Debug, PartialEq)]
pub enum Parsed {
    Url(LdapUrl),
    /// Not an LDAP URL (`http://…`, `cldap://…`): passed on as it stands.
    Other,
    /// An LDAP URL libldap cannot write again (a port past 65535): passed
    /// on as it stands too.
    Kept,
    /// An LDAP URL libldap cannot parse: left out of the referral.
    Bad,
}

/// What a DN part holds.
#[derive(Debug, PartialEq)]
pub enum UrlDn {
    /// No DN: the referral names the target itself.
    Absent,
    /// One that is not a DN (or not UTF-8): the URL goes out without one.
    Invalid,
    Dn(String),
}

#[derive(Debug, PartialEq)]
pub struct LdapUrl {
    scheme: &'static str,
    /// Decoded; an IPv6 address without its brackets.
    host: Vec<u8>,
    port: u16,
    pub dn: UrlDn,
    /// Present (`?…` given, even empty) or not.
    attrs: Option<Vec<Vec<u8>>>,
    pub scope: Option<String>,
    filter: Option<Vec<u8>>,
    exts: Vec<Vec<u8>>,
}

/// The URL of a `ref` value: slapd reads it up to the first white space
/// (the rest is a label), and skips a value that is empty so.
pub fn of_ref_value(value: &str) -> Option<&str> {
    let url = value.split(|c: char| c.is_ascii_whitespace() || c == '\u{b}').next().unwrap_or_default();
    (!url.is_empty()).then_some(url)
}

/// Parses `text` as libldap's `ldap_url_parse_ext` does.
pub fn parse(text: &str) -> Parsed {
    let mut rest = text;
    let enclosed = rest.starts_with('<');
    if enclosed {
        rest = &rest[1..];
    }
    if rest.get(..4).is_some_and(|p| p.eq_ignore_ascii_case("URL:")) {
        rest = &rest[4..];
    }
    let Some(scheme) = ["ldap", "ldaps", "ldapi", "pldap", "pldaps"].into_iter().find(|s| {
        rest.get(..s.len() + 3).is_some_and(|p| p[..s.len()].eq_ignore_ascii_case(s) && &p[s.len()..] == "://")
    }) else {
        return Parsed::Other;
    };
    rest = &rest[scheme.len() + 3..];
    if enclosed {
        match rest.strip_suffix('>') {
            Some(inner) => rest = inner,
            None => return Parsed::Bad,
        }
    }
    // Without a '/', what follows a '?' is dropped (libldap's old
    // `ldap://host?attrs` form), and there is no DN.
    let (hostport, path) = match rest.split_once('/') {
        Some((h, p)) => (h, Some(p)),
        None => (rest.split('?').next().unwrap_or_default(), None),
    };
    let (host, port) = match scheme {
        // A socket's path: no port.
        "ldapi" => (hostport, None),
        _ => match host_port(hostport) {
            Some(hp) => hp,
            None => return Parsed::Bad,
        },
    };
    // In an IPv6 address a `%` not escaping anything starts a zone: kept.
    let host = match hostport.starts_with('[') && scheme != "ldapi" {
        true => decode_with(host, true),
        false => decode(host),
    };
    let port = match port.map(port_of) {
        None => 0,
        Some(None) => return Parsed::Bad,
        Some(Some(p)) => p,
    };
    // libldap's writer fails on a port past 65535 or below 0, and on a
    // host it would escape after a port (it counts the escaped host and
    // writes it raw): slapd then passes the value on as it stands.
    if !(0..=65535).contains(&port) || (port != 0 && !host.iter().all(|b| spared(*b, false, true))) {
        return Parsed::Kept;
    }
    let mut url = LdapUrl {
        scheme,
        host,
        port: port as u16,
        dn: UrlDn::Absent,
        attrs: None,
        scope: None,
        filter: None,
        exts: Vec::new(),
    };
    let Some(path) = path else { return Parsed::Url(url) };
    let mut parts = path.split('?');
    url.dn = match parts.next().map(decode) {
        Some(dn) if dn.is_empty() => UrlDn::Absent,
        Some(dn) => String::from_utf8(dn).map_or(UrlDn::Invalid, UrlDn::Dn),
        None => UrlDn::Absent,
    };
    // The list is decoded whole, then split: present, even if empty.
    if let Some(attrs) = parts.next().filter(|a| !a.is_empty()) {
        url.attrs = Some(decode(attrs).split(|b| *b == b',').filter(|a| !a.is_empty()).map(<[u8]>::to_vec).collect());
    }
    if let Some(scope) = parts.next().filter(|s| !s.is_empty()) {
        let Some(scope) = scope_of(&decode(scope)) else { return Parsed::Bad };
        url.scope = Some(scope.to_string());
    }
    if let Some(filter) = parts.next().filter(|f| !f.is_empty()) {
        match decode(filter) {
            f if f.is_empty() => return Parsed::Bad,
            f => url.filter = Some(f),
        }
    }
    if let Some(exts) = parts.next() {
        // Split, then each decoded: at least one, empty or not.
        url.exts = exts.split(',').filter(|e| !e.is_empty()).map(decode).collect();
        if url.exts.is_empty() {
            return Parsed::Bad;
        }
    }
    match parts.next() {
        Some(_) => Parsed::Bad,
        None => Parsed::Url(url),
    }
}

/// The host and the port's text of `host[:port]` or `[v6]:port`; text
/// after `]` without a `:` is ignored, as libldap ignores it.
fn host_port(text: &str) -> Option<(&str, Option<&str>)> {
    match text.strip_prefix('[') {
        Some(v6) => {
            let (host, after) = v6.split_once(']')?;
            Some((host, after.strip_prefix(':')))
        }
        None => Some(match text.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (text, None),
        }),
    }
}

/// A port as libldap reads it: decoded, then C's `strtol` (white space and
/// a sign first, digits, nothing after) into an `int`.
fn port_of(text: &str) -> Option<i64> {
    let decoded = decode(text);
    let t = std::str::from_utf8(&decoded).ok()?.trim_start_matches(|c: char| c.is_ascii_whitespace() || c == '\u{b}');
    let (negative, digits) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // strtol saturates at the long's bounds; the int keeps the low bits.
    let long = digits.parse::<i64>().unwrap_or(i64::MAX);
    let long = if negative { long.saturating_neg().max(i64::MIN) } else { long };
    Some(i64::from(long as i32))
}

/// libldap's scope names, any case.
fn scope_of(name: &[u8]) -> Option<&'static str> {
    let name = std::str::from_utf8(name).ok()?.to_ascii_lowercase();
    Some(match name.as_str() {
        "base" => "base",
        "one" | "onelevel" => "one",
        "sub" | "subtree" => "sub",
        "subord" | "subordinate" | "children" => "subordinate",
        _ => return None,
    })
}

/// Percent-decoding as libldap's `ldap_pvt_hex_unescape`: up to a NUL, as
/// C strings end; a `%` not followed by two hex digits empties the part.
fn decode(text: &str) -> Vec<u8> {
    decode_with(text, false)
}

/// `decode`; `lenient`: a `%` that is not an escape stays as it is.
fn decode_with(text: &str, lenient: bool) -> Vec<u8> {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let byte = match b[i] {
            b'%' => {
                let hex = |c: Option<&u8>| c.and_then(|c| (*c as char).to_digit(16));
                match (hex(b.get(i + 1)), hex(b.get(i + 2))) {
                    (Some(h), Some(l)) => {
                        i += 3;
                        (h * 16 + l) as u8
                    }
                    _ if lenient => {
                        i += 1;
                        b'%'
                    }
                    _ => return Vec::new(),
                }
            }
            c => {
                i += 1;
                c
            }
        };
        if byte == 0 {
            break;
        }
        out.push(byte);
    }
    out
}

/// What an escape spares besides letters and digits (libldap's
/// `hex_escape`): RFC 2396's reserved characters but `?`, and its marks.
const SPARED: &[u8] = b";:@&=+$-_.!~*'(),/";

/// Whether libldap writes `b` as it is; `comma`, `slash`: those escaped too.
fn spared(b: u8, comma: bool, slash: bool) -> bool {
    b.is_ascii_alphanumeric() || (SPARED.contains(&b) && !(comma && b == b',') && !(slash && b == b'/'))
}

/// libldap's escaping (`spared`).
fn escape(value: &[u8], comma: bool, slash: bool, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in value {
        match spared(b, comma, slash) {
            true => out.push(b as char),
            false => out.extend(['%', HEX[usize::from(b >> 4)] as char, HEX[usize::from(b & 15)] as char]),
        }
    }
}

impl LdapUrl {
    /// The URL as libldap's `ldap_url_desc2str` writes it: up to the last
    /// part that is set.
    pub fn render(&self) -> String {
        let dn = match &self.dn {
            UrlDn::Dn(dn) => dn.as_bytes(),
            _ => &[],
        };
        let last = match () {
            _ if !self.exts.is_empty() => 5,
            _ if self.filter.is_some() => 4,
            _ if self.scope.is_some() => 3,
            _ if self.attrs.is_some() => 2,
            _ if !dn.is_empty() => 1,
            _ => 0,
        };
        let mut out = format!("{}://", self.scheme);
        // Brackets for a host of two colons or more (not a socket's path).
        let v6 = self.scheme != "ldapi" && self.host.iter().filter(|b| **b == b':').count() > 1;
        if v6 {
            out.push('[');
        }
        escape(&self.host, false, true, &mut out);
        if v6 {
            out.push(']');
        }
        if self.port != 0 {
            out.push_str(&format!(":{}", self.port));
        }
        let list = |items: &[Vec<u8>], comma: bool, out: &mut String| {
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                escape(item, comma, false, out);
            }
        };
        for part in 1..=last {
            out.push(if part == 1 { '/' } else { '?' });
            match part {
                1 => escape(dn, false, false, &mut out),
                2 => list(self.attrs.as_deref().unwrap_or_default(), false, &mut out),
                3 => out.push_str(self.scope.as_deref().unwrap_or_default()),
                4 => escape(self.filter.as_deref().unwrap_or_default(), false, false, &mut out),
                _ => list(&self.exts, true, &mut out),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn again(text: &str) -> String {
        match parse(text) {
            Parsed::Url(u) => u.render(),
            other => format!("{other:?}"),
        }
    }

    /// Each as slapd 2.5 wrote it back in a referral (probes66).
    #[test]
    fn urls_are_written_again_as_libldap_writes_them() {
        for (given, written) in [
            ("LDAP://H.Example.ORG/ou=x??SUB", "ldap://H.Example.ORG/ou=x??sub"),
            ("<URL:ldap://h/ou=x>", "ldap://h/ou=x"),
            ("ldap://h/ou=x??sub?(|(cn=a)(sn=b))", "ldap://h/ou=x??sub?(%7C(cn=a)(sn=b))"),
            ("ldap://h/ou=x??sub?(cn=a%20b)", "ldap://h/ou=x??sub?(cn=a%20b)"),
            ("ldap://h/ou=x?cn,,sn", "ldap://h/ou=x?cn,sn"),
            ("ldap://h/ou=x?c%2Cn", "ldap://h/ou=x?c,n"),
            ("ldap://h/ou=x?%2C", "ldap://h/ou=x?"),
            ("ldap://h/ou=x?c%zz", "ldap://h/ou=x?"),
            ("ldap://h%zz/ou=x", "ldap:///ou=x"),
            ("ldap://h/ou=x????!", "ldap://h/ou=x????!"),
            ("ldap://h:%33%38%39/ou=x", "ldap://h:389/ou=x"),
            ("ldap://h:+389/ou=x", "ldap://h:389/ou=x"),
            ("ldap://h:4294967297/ou=x", "ldap://h:1/ou=x"),
            ("ldap://h%3Ax/ou=x", "ldap://h:x/ou=x"),
            ("ldap://[fe80::1%eth0]/ou=x", "ldap://[fe80::1%25eth0]/ou=x"),
            ("ldap://[fe80::1%25eth0]/ou=x", "ldap://[fe80::1%25eth0]/ou=x"),
            ("ldap://[::1]x/ou=x", "ldap://[::1]/ou=x"),
            ("ldapi://[::1]/ou=x", "ldapi://%5B::1%5D/ou=x"),
            ("ldapi://a:b/ou=x", "ldapi://a:b/ou=x"),
            ("PLDAP://h", "pldap://h"),
            ("ldap://h/ou=x????!x-ext=1", "ldap://h/ou=x????!x-ext=1"),
            ("ldap://h:0/ou=x", "ldap://h/ou=x"),
            ("ldap://[::1]:389/ou=x", "ldap://[::1]:389/ou=x"),
            ("ldapi://%2Fvar%2Frun%2Fldapi/ou=x", "ldapi://%2Fvar%2Frun%2Fldapi/ou=x"),
            ("ldap://h%2Eexample/ou=a%3Fb", "ldap://h.example/ou=a%3Fb"),
            ("ldap://h?cn", "ldap://h"),
        ] {
            assert_eq!(again(given), written, "{given}");
        }
        for (given, parsed) in [
            ("ldap://h/ou=x??bogus", Parsed::Bad),
            ("ldap://h/ou=x?cn?sub?(cn=a)?e?f", Parsed::Bad),
            ("<ldap://h/ou=x", Parsed::Bad),
            ("ldap://h/ou=x??sub?%00", Parsed::Bad),
            ("ldap://h/ou=x????", Parsed::Bad),
            ("ldap://h:abc/ou=x", Parsed::Bad),
            ("ldap://h:99999/ou=x", Parsed::Kept),
            ("ldap://h:-1/ou=x", Parsed::Kept),
            ("ldap://h%20x:389/ou=x", Parsed::Kept),
            ("ldap://[fe80::1%eth0]:389/ou=x", Parsed::Kept),
            ("cldap://h/ou=x", Parsed::Other),
            ("http://h/x?y", Parsed::Other),
        ] {
            assert_eq!(parse(given), parsed, "{given}");
        }
        assert_eq!(of_ref_value("ldap://h/ou=x the label"), Some("ldap://h/ou=x"));
        assert_eq!(of_ref_value(" ldap://h"), None);
    }
}
