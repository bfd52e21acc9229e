//! certificateExactMatch and certificateListExactMatch (RFC 4523 §2.5,
//! §2.6) as slapd evaluates them: a certificate is its serial number and
//! issuer, a CRL its issuer and thisUpdate; an assertion names them in
//! GSER (`{ serialNumber 4660, issuer rdnSequence:"cn=CA,c=US" }`, the
//! components in either order) or, for a certificate, slapd's older
//! `4660$cn=CA,c=US`. Both sides become one text: the serial as a sign
//! and hexadecimal magnitude, the time and issuer DN normalized, so
//! equality is equality of bytes.
//!
//! Only matching uses these forms: a stored value's identity (duplicates,
//! Modify's delete) stays its octets, which keeps what earlier versions
//! stored valid.

use crate::der;
use crate::dn::Dn;

/// The longest decimal serial number read: RFC 5280 allows 20 octets
/// (49 digits); converting is quadratic in the digits, so far more than
/// that is refused rather than computed.
const MAX_SERIAL_DIGITS: usize = 256;

/// The form of a stored certificate: what an assertion on it must equal.
/// A certificate whose issuer no schema type names (or that does not
/// decode) gets a form no assertion has.
pub fn certificate_form(v: &[u8]) -> Vec<u8> {
    let form = || {
        let (serial, issuer) = der::certificate_serial_and_issuer(v)?;
        Some(format!("{}${}", twos_complement(serial), issuer_dn(issuer)?))
    };
    form().map_or_else(|| vec![0], String::into_bytes)
}

/// The form of a stored CRL, as `certificate_form`.
pub fn certificate_list_form(v: &[u8]) -> Vec<u8> {
    let form = || {
        let (issuer, time) = der::certificate_list_issuer_and_this_update(v)?;
        Some(format!("{}${}", super::generalized_time(time.as_bytes())?, issuer_dn(issuer)?))
    };
    form().map_or_else(|| vec![0], String::into_bytes)
}

/// A certificateExactMatch assertion's form; `None` when it is not one.
pub fn certificate_assertion(v: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(v).ok()?;
    let (serial, issuer) = match text.trim_start().starts_with('{') {
        true => {
            let [serial, issuer] = gser(text, ["serialNumber", "issuer"])?;
            // slapd takes the issuer's DN without its CHOICE tag too.
            let issuer = issuer.strip_prefix("rdnSequence:").unwrap_or(issuer);
            (serial_number(serial)?, normal_dn(&quoted(issuer)?)?)
        }
        false => {
            let (serial, issuer) = text.split_once('$')?;
            (decimal(serial)?, normal_dn(issuer)?)
        }
    };
    Some(format!("{serial}${issuer}").into_bytes())
}

/// A certificateListExactMatch assertion's form; `None` when it is not one.
pub fn certificate_list_assertion(v: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(v).ok()?;
    let [issuer, time] = gser(text, ["issuer", "thisUpdate"])?;
    // As slapd reads it: seconds and `Z`, no fraction, no offset.
    let time = quoted(time)?;
    let exact = time.len() == 15 && time.ends_with('Z') && time[..14].bytes().all(|c| c.is_ascii_digit());
    let time = super::generalized_time(time.as_bytes()).filter(|_| exact)?;
    let issuer = normal_dn(&quoted(issuer.strip_prefix("rdnSequence:")?)?)?;
    Some(format!("{time}${issuer}").into_bytes())
}

fn issuer_dn(name: &[u8]) -> Option<String> {
    normal_dn(&der::name_to_dn(name)?)
}

/// slapd's dnNormalize: a type the schema does not define or a value its
/// syntax refuses makes the DN (and so the assertion) invalid.
fn normal_dn(text: &str) -> Option<String> {
    Dn::parse(text).ok()?.normalized().ok()
}

/// The components `names` of a GSER SEQUENCE value, each exactly once and
/// nothing else, as their raw text: `{ name value, name value }`.
fn gser<'a, const N: usize>(text: &'a str, names: [&str; N]) -> Option<[&'a str; N]> {
    let body = text.trim_matches(' ').strip_prefix('{')?.strip_suffix('}')?;
    let mut found: [Option<&str>; N] = [None; N];
    let mut rest = body.trim_start_matches(' ');
    while !rest.is_empty() {
        let (name, after) = rest.split_once(' ')?;
        let slot = names.iter().position(|n| *n == name)?;
        let after = after.trim_start_matches(' ');
        let len = component_len(after)?;
        if found[slot].replace(&after[..len]).is_some() {
            return None;
        }
        rest = after[len..].trim_start_matches(' ');
        if let Some(more) = rest.strip_prefix(',') {
            rest = more.trim_start_matches(' ');
            if rest.is_empty() {
                return None;
            }
        } else if !rest.is_empty() {
            return None;
        }
    }
    let mut out = [""; N];
    for (o, f) in out.iter_mut().zip(found) {
        *o = f?;
    }
    Some(out)
}

/// The length of one component value: up to the end of a quoted string
/// (`""` inside is a quote), else up to a comma or space.
fn component_len(s: &str) -> Option<usize> {
    let quote = s.find('"').filter(|q| !s[..*q].contains([',', ' ']));
    let Some(open) = quote else {
        return Some(s.find([',', ' ']).unwrap_or(s.len()));
    };
    let b = s.as_bytes();
    let mut i = open + 1;
    loop {
        match b.get(i)? {
            b'"' if b.get(i + 1) == Some(&b'"') => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
}

/// A GSER string's contents, `""` read as one quote.
fn quoted(s: &str) -> Option<String> {
    let inner = s.strip_prefix('"')?.strip_suffix('"')?;
    Some(inner.replace("\"\"", "\""))
}

/// A serial number as GSER writes an INTEGER: decimal, or `'1A2B'H`,
/// which slapd reads as the magnitude without leading zeros (`'80'H` is
/// 128; `'0080'H` and `'01234'H` are no serial).
fn serial_number(s: &str) -> Option<String> {
    match s.strip_prefix('\'').and_then(|h| h.strip_suffix("'H")) {
        Some(hex) => {
            let hex = hex.to_ascii_lowercase();
            let digits = !hex.is_empty() && hex.bytes().all(|c| c.is_ascii_hexdigit());
            (digits && (hex == "0" || !hex.starts_with('0'))).then(|| format!("+{}", hex.trim_start_matches('0')))
        }
        None => decimal(s),
    }
}

/// A decimal INTEGER (no leading zeros, `-` for negatives) as a sign and
/// hexadecimal magnitude.
fn decimal(s: &str) -> Option<String> {
    let (sign, digits) = match s.strip_prefix('-') {
        Some(d) => ('-', d),
        None => ('+', s),
    };
    let valid = !digits.is_empty()
        && digits.len() <= MAX_SERIAL_DIGITS
        && digits.bytes().all(|c| c.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'))
        && !(sign == '-' && digits == "0");
    if !valid {
        return None;
    }
    // Base 10 to base 256, most significant byte first.
    let mut magnitude: Vec<u8> = Vec::new();
    for d in digits.bytes() {
        let mut carry = (d - b'0') as u32;
        for byte in magnitude.iter_mut().rev() {
            let x = *byte as u32 * 10 + carry;
            *byte = x as u8;
            carry = x >> 8;
        }
        if carry > 0 {
            magnitude.insert(0, carry as u8);
        }
    }
    Some(format!("{sign}{}", hex(&magnitude)))
}

/// A DER INTEGER's content octets as a sign and hexadecimal magnitude.
fn twos_complement(v: &[u8]) -> String {
    if v.first().is_some_and(|b| b & 0x80 != 0) {
        // Negative: the magnitude is the complement plus one.
        let mut m: Vec<u8> = v.iter().map(|b| !b).collect();
        for byte in m.iter_mut().rev() {
            let (x, overflow) = byte.overflowing_add(1);
            *byte = x;
            if !overflow {
                break;
            }
        }
        format!("-{}", hex(&m))
    } else {
        format!("+{}", hex(v))
    }
}

/// Lower-case hexadecimal without leading zeros (zero is empty).
fn hex(bytes: &[u8]) -> String {
    let text: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    text.trim_start_matches('0').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serials_agree_across_spellings() {
        assert_eq!(decimal("4660").as_deref(), Some("+1234"));
        assert_eq!(serial_number("'1234'H").as_deref(), Some("+1234"));
        assert_eq!(serial_number("'80'H").as_deref(), Some("+80"));
        assert_eq!(serial_number("'234'H").as_deref(), Some("+234"));
        for bad in ["'001234'H", "'01234'H", "''H", "'0080'H", "'12G4'H"] {
            assert_eq!(serial_number(bad), None, "{bad}");
        }
        assert_eq!(twos_complement(&[0x12, 0x34]), "+1234");
        assert_eq!(twos_complement(&[0x00, 0x80]), "+80");
        assert_eq!(decimal("-128").as_deref(), Some("-80"));
        assert_eq!(twos_complement(&[0x80]), "-80");
        assert_eq!(twos_complement(&[0xed, 0xcc]), "-1234");
        assert_eq!(decimal("0").as_deref(), Some("+"));
        assert_eq!(twos_complement(&[0]), "+");
        for bad in ["04660", "-0", "", "12a", "+5", " 5"] {
            assert_eq!(decimal(bad), None, "{bad}");
        }
        let big = "9".repeat(MAX_SERIAL_DIGITS + 1);
        assert_eq!(decimal(&big), None);
    }

    #[test]
    fn gser_takes_components_in_any_order_once_each() {
        let names = ["serialNumber", "issuer"];
        assert_eq!(gser("{ serialNumber 1, issuer rdnSequence:\"a, b\" }", names), Some(["1", "rdnSequence:\"a, b\""]));
        assert_eq!(gser("{issuer rdnSequence:\"a\",serialNumber 1}", names), Some(["1", "rdnSequence:\"a\""]));
        assert_eq!(
            gser("{ issuer rdnSequence:\"a\"\"b\", serialNumber 1 }", names).map(|c| c[1]),
            Some("rdnSequence:\"a\"\"b\"")
        );
        for bad in [
            "{ serialNumber 1 }",
            "{ serialNumber 1, serialNumber 2, issuer rdnSequence:\"a\" }",
            "{ serialNumber 1, issuer rdnSequence:\"a\", }",
            "{ serialNumber 1 issuer rdnSequence:\"a\" }",
            "{ serialNumber 1, issuer rdnSequence:\"a }",
            "serialNumber 1, issuer rdnSequence:\"a\"",
            "{ other 1, issuer rdnSequence:\"a\" }",
        ] {
            assert_eq!(gser(bad, names), None, "{bad}");
        }
    }

    const CERT: &str = "MIIBKjCB0AICEjQwCgYIKoZIzj0EAwIwMTELMAkGA1UEBhMCVVMxEDAOBgNVBAoMB0V4YW1wbGUxEDAOBgNVBAMMB1Rlc3QgQ0EwHhcNMjYxMjA3MDE0MTExWhcNMzYxMjA0MDE0MTExWjAQMQ4wDAYDVQQDDAVhbGljZTBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABAv7X9Sl3D0Oih1j32+10n5Y2wXn1loFHWIeAgumIXfTbhXXZItdEz0wXhwDA4WtNV6RhE8xwWu+k67h9BfBdA0wCgYIKoZIzj0EAwIDSQAwRgIhAIvpf6NkRVNPVk4dc+PdIwHSXhw66x8EUSIluQCmXEBMAiEAmd74LoVufnGOYfy39M43LWlHzqpEoeq2q+DTo/oSnes=";
    const CRL: &str = "MIHKMHECAQEwCgYIKoZIzj0EAwIwMTELMAkGA1UEBhMCVVMxEDAOBgNVBAoMB0V4YW1wbGUxEDAOBgNVBAMMB1Rlc3QgQ0EXDTI2MTIwMTAwMDAwMFoXDTI3MDEwNjAxNDExMVqgDzANMAsGA1UdFAQEAgIQADAKBggqhkjOPQQDAgNJADBGAiEAxYXNSq+mnpqc97HmUETHOrCXY3/OvjAcPEscgzPTV7oCIQCMJdA6HeEfqetxqU4m8shfAz1KgEZYnjoSZxGMdtC6Lg==";

    fn der(b64: &str) -> Vec<u8> {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.decode(b64).unwrap()
    }

    /// The forms of openssl's certificate (serial 0x1234 from C=US,
    /// O=Example, CN=Test CA) and CRL (2026-12-01, UTCTime) equal those of
    /// assertions naming them.
    #[test]
    fn stored_forms_equal_their_assertions() {
        let issuer = "rdnSequence:\"CN=Test CA, O=Example, C=US\"";
        let cert = certificate_assertion(format!("{{ serialNumber 4660, issuer {issuer} }}").as_bytes());
        assert_eq!(Some(certificate_form(&der(CERT))), cert);
        let crl =
            certificate_list_assertion(format!("{{ thisUpdate \"20261201000000Z\", issuer {issuer} }}").as_bytes());
        assert_eq!(Some(certificate_list_form(&der(CRL))), crl);
    }

    /// Hostile input: every truncation and 20,000 seeded mutations of the
    /// DER and of the assertions give a form or `None`, never a panic.
    #[test]
    fn mutated_values_and_assertions_never_panic() {
        let inputs = [
            der(CERT),
            der(CRL),
            b"{ serialNumber 4660, issuer rdnSequence:\"cn=Test CA,o=Example,c=US\" }".to_vec(),
            b"{ issuer rdnSequence:\"cn=a\"\"b\", thisUpdate \"20261201000000Z\" }".to_vec(),
            b"4660$cn=Test CA,o=Example,c=US".to_vec(),
        ];
        let run = |v: &[u8]| {
            certificate_form(v);
            certificate_list_form(v);
            certificate_assertion(v);
            certificate_list_assertion(v);
        };
        let mut seed = 0x2545f4914f6cdd1du64;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n.max(1) as u64) as usize
        };
        for input in &inputs {
            for cut in 0..input.len() {
                run(&input[..cut]);
            }
            for _ in 0..4000 {
                let mut v = input.clone();
                for _ in 0..1 + next(4) {
                    let at = next(v.len());
                    match next(4) {
                        0 => v[at] = next(256) as u8,
                        1 => v[at] ^= 0x80,
                        2 => drop(v.remove(at)),
                        _ => v.insert(at, [b'"', b' ', b',', b'{', b'}', b'$', 0x80, 0xff][next(8)]),
                    }
                    if v.is_empty() {
                        break;
                    }
                }
                run(&v);
            }
        }
    }
}
