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
    attrs: Vec<Vec<u8>>,
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
    let Some(scheme) = ["ldap", "ldaps", "ldapi"].into_iter().find(|s| {
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
    let Some((host, port)) = host_port(hostport) else { return Parsed::Bad };
    let Ok(port) = u16::try_from(port) else { return Parsed::Kept };
    let Some(host) = decode(host) else { return Parsed::Bad };
    let mut url = LdapUrl {
        scheme,
        host,
        port,
        dn: UrlDn::Absent,
        attrs: Vec::new(),
        scope: None,
        filter: None,
        exts: Vec::new(),
    };
    let Some(path) = path else { return Parsed::Url(url) };
    let mut parts = path.split('?');
    url.dn = match parts.next().map(decode) {
        Some(Some(dn)) if dn.is_empty() => UrlDn::Absent,
        Some(Some(dn)) => String::from_utf8(dn).map_or(UrlDn::Invalid, UrlDn::Dn),
        // An escape that is not one leaves no DN, as slapd's rewrite shows.
        _ => UrlDn::Absent,
    };
    if let Some(attrs) = parts.next() {
        let each = attrs.split(',').filter(|a| !a.is_empty()).map(decode);
        let Some(attrs) = each.collect::<Option<Vec<_>>>() else { return Parsed::Bad };
        url.attrs = attrs;
    }
    if let Some(scope) = parts.next().filter(|s| !s.is_empty()) {
        let Some(scope) = decode(scope).and_then(|s| scope_of(&s)) else { return Parsed::Bad };
        url.scope = Some(scope.to_string());
    }
    if let Some(filter) = parts.next().filter(|f| !f.is_empty()) {
        match decode(filter) {
            Some(f) if !f.is_empty() => url.filter = Some(f),
            _ => return Parsed::Bad,
        }
    }
    if let Some(exts) = parts.next() {
        let each = exts.split(',').filter(|e| !e.is_empty()).map(decode);
        let Some(exts) = each.collect::<Option<Vec<_>>>() else { return Parsed::Bad };
        let empty = |e: &Vec<u8>| e.strip_prefix(b"!").unwrap_or(e).is_empty();
        if exts.is_empty() || exts.iter().any(empty) {
            return Parsed::Bad;
        }
        url.exts = exts;
    }
    match parts.next() {
        Some(_) => Parsed::Bad,
        None => Parsed::Url(url),
    }
}

/// The host and port of `host[:port]` or `[v6]:port` (port 0: none given).
fn host_port(text: &str) -> Option<(&str, u32)> {
    let (host, port) = match text.strip_prefix('[') {
        Some(v6) => {
            let (host, after) = v6.split_once(']')?;
            (host, if after.is_empty() { None } else { Some(after.strip_prefix(':')?) })
        }
        None => match text.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (text, None),
        },
    };
    let port = match port {
        None => 0,
        Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => p.parse().unwrap_or(u32::MAX),
        Some(_) => return None,
    };
    Some((host, port))
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

/// Percent-decoding, up to a NUL as C strings end; `None` for a `%` not
/// followed by two hex digits.
fn decode(text: &str) -> Option<Vec<u8>> {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let byte = match b[i] {
            b'%' => {
                let hex = |c: Option<&u8>| c.and_then(|c| (*c as char).to_digit(16));
                let byte = (hex(b.get(i + 1))? * 16 + hex(b.get(i + 2))?) as u8;
                i += 3;
                byte
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
    Some(out)
}

/// What an escape spares besides letters and digits (libldap's
/// `hex_escape`): RFC 2396's reserved characters but `?`, and its marks.
const SPARED: &[u8] = b";:@&=+$-_.!~*'(),/";

/// libldap's escaping; `comma`, `slash`: those are escaped too.
fn escape(value: &[u8], comma: bool, slash: bool, out: &mut String) {
    for &b in value {
        let spared =
            b.is_ascii_alphanumeric() || (SPARED.contains(&b) && !(comma && b == b',') && !(slash && b == b'/'));
        match spared {
            true => out.push(b as char),
            false => out.push_str(&format!("%{b:02X}")),
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
            _ if !self.attrs.is_empty() => 2,
            _ if !dn.is_empty() => 1,
            _ => 0,
        };
        let mut out = format!("{}://", self.scheme);
        match self.host.contains(&b':') {
            true => out.push_str(&format!("[{}]", String::from_utf8_lossy(&self.host))),
            false => escape(&self.host, false, true, &mut out),
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
                2 => list(&self.attrs, false, &mut out),
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
            ("cldap://h/ou=x", Parsed::Other),
            ("http://h/x?y", Parsed::Other),
        ] {
            assert_eq!(parse(given), parsed, "{given}");
        }
        assert_eq!(of_ref_value("ldap://h/ou=x the label"), Some("ldap://h/ou=x"));
        assert_eq!(of_ref_value(" ldap://h"), None);
    }
}
