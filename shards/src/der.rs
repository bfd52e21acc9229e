//! Just enough DER to validate the certificate syntaxes: a TLV reader
//! that never reads past its input, and the X.509 structure walks slapd's
//! `certificateValidate` and `certificateListValidate` make (RFC 5280
//! §4.1, §5.1). Nothing here trusts a length: every one is checked
//! against the bytes that remain.

/// Universal tags the walk needs.
const INTEGER: u8 = 0x02;
const BIT_STRING: u8 = 0x03;
const SEQUENCE: u8 = 0x30;
/// The context tags of TBSCertificate's optional parts.
const VERSION: u8 = 0xa0;
const ISSUER_UID: u8 = 0x81;
const SUBJECT_UID: u8 = 0x82;
const EXTENSIONS: u8 = 0xa3;
/// TBSCertList's optional `crlExtensions [0]`.
const CRL_EXTENSIONS: u8 = 0xa0;
/// Time ::= CHOICE { UTCTime, GeneralizedTime }.
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

/// One element: its tag and contents, and what follows it.
fn next(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    // Multi-byte tags do not occur in the structures read here.
    if tag & 0x1f == 0x1f {
        return None;
    }
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = match first {
        0..=0x7f => (first as usize, rest),
        // DER: the shortest long form, at most 4 length octets (4 GiB is
        // far beyond any PDU), and no indefinite length (0x80).
        0x81..=0x84 => {
            let n = (first & 0x7f) as usize;
            let bytes = rest.get(..n)?;
            let len = bytes.iter().fold(0usize, |l, b| (l << 8) | *b as usize);
            if bytes[0] == 0 || len < 0x80 {
                return None;
            }
            (len, &rest[n..])
        }
        _ => return None,
    };
    let body = rest.get(..len)?;
    Some((tag, body, &rest[len..]))
}

/// Exactly one well-formed element and nothing after it.
pub fn element(v: &[u8]) -> bool {
    next(v).is_some_and(|(_, _, rest)| rest.is_empty())
}

/// An X.509 certificate: SEQUENCE { tbsCertificate, signatureAlgorithm,
/// signatureValue }, the TBSCertificate's fields in order, its unique ids
/// only from v2 and its extensions only from v3, as slapd checks them.
pub fn certificate(v: &[u8]) -> bool {
    certificate_parts(v).is_some()
}

fn certificate_parts(v: &[u8]) -> Option<()> {
    let (tag, cert, rest) = next(v)?;
    (tag == SEQUENCE && rest.is_empty()).then_some(())?;
    signed(cert, tbs_certificate)
}

/// What a signed X.509 structure holds: SEQUENCE { to-be-signed,
/// signatureAlgorithm, signatureValue }, the first checked by `tbs`.
fn signed(body: &[u8], tbs: fn(&[u8]) -> Option<()>) -> Option<()> {
    let (tag, inner, after_tbs) = next(body)?;
    if tag != SEQUENCE {
        return None;
    }
    tbs(inner)?;
    let (tag, _, rest) = next(after_tbs)?;
    if tag != SEQUENCE {
        return None;
    }
    let (tag, _, rest) = next(rest)?;
    (tag == BIT_STRING && rest.is_empty()).then_some(())
}

fn tbs_certificate(tbs: &[u8]) -> Option<()> {
    let mut version = 0u8;
    let mut rest = tbs;
    if let Some((VERSION, explicit, after)) = next(rest) {
        let (tag, int, inner_rest) = next(explicit)?;
        if tag != INTEGER || !inner_rest.is_empty() || int.len() != 1 || int[0] > 2 {
            return None;
        }
        version = int[0];
        rest = after;
    }
    // serialNumber, then signature, issuer, validity, subject and
    // subjectPublicKeyInfo.
    let (tag, _, mut rest) = next(rest)?;
    if tag != INTEGER {
        return None;
    }
    for _ in 0..5 {
        let (tag, _, after) = next(rest)?;
        if tag != SEQUENCE {
            return None;
        }
        rest = after;
    }
    for (tag, since) in [(ISSUER_UID, 1), (SUBJECT_UID, 1), (EXTENSIONS, 2)] {
        if let Some((t, _, after)) = next(rest).filter(|(t, ..)| *t == tag) {
            if version < since || (t == EXTENSIONS && !element_is_sequence(next(rest)?.1)) {
                return None;
            }
            rest = after;
        }
    }
    rest.is_empty().then_some(())
}

/// A certificate pair as slapd takes one (its `sequenceValidate`): any
/// value that opens a SEQUENCE.
pub fn sequence(v: &[u8]) -> bool {
    v.len() >= 2 && v[0] == SEQUENCE
}

/// A PKCS#8 PrivateKeyInfo (RFC 5208 §5), as slapd checks one: SEQUENCE
/// { version INTEGER, privateKeyAlgorithm SEQUENCE, privateKey OCTET
/// STRING, attributes [0] SET OPTIONAL } (slapd reads the optional
/// attributes as a universal SET) and nothing after it.
pub fn private_key_info(v: &[u8]) -> bool {
    private_key_info_parts(v).is_some()
}

fn private_key_info_parts(v: &[u8]) -> Option<()> {
    const INTEGER: u8 = 0x02;
    const OCTET_STRING: u8 = 0x04;
    const SET: u8 = 0x31;
    let (tag, body, after) = next(v)?;
    (tag == SEQUENCE && after.is_empty()).then_some(())?;
    let (version, _, rest) = next(body)?;
    let (algorithm, _, rest) = next(rest)?;
    let (key, _, mut rest) = next(rest)?;
    (version == INTEGER && algorithm == SEQUENCE && key == OCTET_STRING).then_some(())?;
    if let Some((SET, _, after)) = next(rest) {
        rest = after;
    }
    rest.is_empty().then_some(())
}

/// An X.509 CRL: SEQUENCE { tbsCertList, signatureAlgorithm,
/// signatureValue }, its version v2 if given, its extensions only in v2.
/// Bytes after the whole are tolerated, as slapd tolerates them (OpenSSL
/// writes such lists).
pub fn certificate_list(v: &[u8]) -> bool {
    certificate_list_parts(v).is_some()
}

fn certificate_list_parts(v: &[u8]) -> Option<()> {
    let (tag, list, _) = next(v)?;
    (tag == SEQUENCE).then_some(())?;
    signed(list, tbs_cert_list)
}

fn tbs_cert_list(tbs: &[u8]) -> Option<()> {
    let is_time = |tag: u8| tag == UTC_TIME || tag == GENERALIZED_TIME;
    let mut rest = tbs;
    let mut v2 = false;
    if let Some((INTEGER, int, after)) = next(rest) {
        if int != [1] {
            return None;
        }
        (v2, rest) = (true, after);
    }
    // signature and issuer.
    for _ in 0..2 {
        let (tag, _, after) = next(rest)?;
        if tag != SEQUENCE {
            return None;
        }
        rest = after;
    }
    let (tag, _, after) = next(rest)?;
    if !is_time(tag) {
        return None;
    }
    rest = after;
    if let Some((_, _, after)) = next(rest).filter(|(t, ..)| is_time(*t)) {
        rest = after;
    }
    // revokedCertificates: SEQUENCE OF SEQUENCE, empty allowed (X.509).
    if let Some((SEQUENCE, body, after)) = next(rest) {
        if body.first().is_none_or(|t| *t == SEQUENCE) {
            rest = after;
        }
    }
    if let Some((CRL_EXTENSIONS, body, after)) = next(rest) {
        if !v2 || body.first() != Some(&SEQUENCE) {
            return None;
        }
        rest = after;
    }
    rest.is_empty().then_some(())
}

fn element_is_sequence(v: &[u8]) -> bool {
    next(v).is_some_and(|(tag, _, rest)| tag == SEQUENCE && rest.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed v3 EC certificate (openssl req -x509).
    const CERT: &str = "MIIBbTCCAROgAwIBAgIUNq0nyuxAIYIfHL1EQVPVr2ZBN8YwCgYIKoZIzj0EAwIwDDEKMAgGA1UEAwwBdDAeFw0yNjEyMDMxOTI1NDhaFw0zNjExMzAxOTI1NDhaMAwxCjAIBgNVBAMMAXQwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAARr+EfjXPvqX2ddmrP7ZpRdGaHrE0RVkvSR3NPZMnV7lAG3tKWYidRLSbdL0t+/vL26CM3UzjNuDCinZowi8HFqo1MwUTAdBgNVHQ4EFgQUBnJ3BNdtRIPyFGIV6P0VTsm2ozAwHwYDVR0jBBgwFoAUBnJ3BNdtRIPyFGIV6P0VTsm2ozAwDwYDVR0TAQH/BAUwAwEB/zAKBggqhkjOPQQDAgNIADBFAiEA/7voEUlqCynwpkdbWvDBj0zqCa/kS1clHfJ3eG0b1GICIG86GuCGkMGv9o90HlpGjgxPPHmLVdA530lyvaqmspUe";

    fn cert() -> Vec<u8> {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.decode(CERT).unwrap()
    }

    #[test]
    fn a_certificate_passes_and_every_damaged_form_fails() {
        let der = cert();
        assert!(certificate(&der));
        assert!(element(&der));
        // Every truncation, and one byte more.
        for n in 0..der.len() {
            assert!(!certificate(&der[..n]), "truncated at {n}");
        }
        let mut longer = der.clone();
        longer.push(0);
        assert!(!certificate(&longer) && !element(&longer));
        // A v1 certificate may not carry extensions.
        let mut v1 = der.clone();
        let at = der.windows(5).position(|w| w == [0xa0, 0x03, 0x02, 0x01, 0x02]).unwrap();
        v1[at + 4] = 0;
        assert!(!certificate(&v1));
        assert!(!certificate(b"x") && !certificate(&[0, 1, 2, 3, 4]) && !certificate(&[]));
    }

    /// A P-256 key as PKCS#8 (openssl pkcs8 -topk8 -nocrypt).
    const KEY: &str = "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg7kqfWaQRiTAbBU+ffybiJJdSP0nED6Fph+7srBWQeiOhRANCAAQKF8a+t34Xekv6WYeKMDY64ZXtWxA6iA9Hp2J9U+TtPhIxFc8XaSbQilupNE7/MVeFx0/syvmJgdevSJxwCu+4";

    #[test]
    fn a_private_key_info_passes_and_damaged_forms_fail() {
        use base64::Engine as _;
        let der = base64::engine::general_purpose::STANDARD.decode(KEY).unwrap();
        assert!(private_key_info(&der));
        for n in 0..der.len() {
            assert!(!private_key_info(&der[..n]), "truncated at {n}");
        }
        let mut longer = der.clone();
        longer.push(0);
        assert!(!private_key_info(&longer));
        // With the optional attributes (a SET) after the key, and then
        // anything more.
        let mut with_set = der.clone();
        with_set.extend_from_slice(&[0x31, 0x00]);
        with_set[2] += 2;
        assert!(private_key_info(&with_set));
        with_set.extend_from_slice(&[0x05, 0x00]);
        with_set[2] += 2;
        assert!(!private_key_info(&with_set));
        // A certificate is no private key.
        assert!(!private_key_info(&cert()));
    }

    /// A v2 CRL with one revoked certificate (openssl ca -gencrl).
    const CRL: &str = "MIHNMHUCAQEwCgYIKoZIzj0EAwIwDTELMAkGA1UEAwwCY2EXDTI2MTIwNTAxMjUyNFoXDTM2MTIwMjAxMjUyNFowJzAlAhQsQUE/fIVffb+GCsNCSgyCnG35lRcNMjYxMjA1MDEyNTI0WqAOMAwwCgYDVR0UBAMCAQIwCgYIKoZIzj0EAwIDSAAwRQIgen7S8W75fZIpBo//jkR/5V3rhf4z0ku4z3I8OOVGpMwCIQD0siVN9Ozqc+oVdiTwlHStzgAKIKNCDBGooepYFfDiEg==";

    #[test]
    fn a_certificate_list_passes_and_damaged_forms_fail() {
        use base64::Engine as _;
        let der = base64::engine::general_purpose::STANDARD.decode(CRL).unwrap();
        assert!(certificate_list(&der));
        for n in 0..der.len() {
            assert!(!certificate_list(&der[..n]), "truncated at {n}");
        }
        let mut longer = der.clone();
        longer.push(0);
        assert!(certificate_list(&longer), "bytes after the list are tolerated");
        // Version 1 (INTEGER 0) is not a CRL version slapd takes.
        let mut v1 = der.clone();
        let at = der.windows(3).position(|w| w == [0x02, 0x01, 0x01]).unwrap();
        v1[at + 2] = 0;
        assert!(!certificate_list(&v1));
        assert!(!certificate_list(&[0x30, 0x03, 0x02, 0x01, 0x01]) && !certificate(&der));
        assert!(sequence(&[0x30, 0x00]) && sequence(&[0x30, 0x05, 0x02]) && !sequence(&[0x04, 0x00]));
    }

    #[test]
    fn lengths_are_never_trusted() {
        // Long forms that overflow, are not minimal or are indefinite.
        for bad in [&[0x30, 0x88, 0xff, 0xff][..], &[0x30, 0x81, 0x05, 0, 0, 0, 0, 0], &[0x30, 0x80, 0, 0]] {
            assert!(!element(bad), "{bad:?}");
        }
        assert!(element(&[0x30, 0x00]) && element(&[0x04, 0x01, 0x41]));
    }
}

/// What certificateExactMatch compares of a certificate (RFC 4523 §2.5):
/// the serialNumber's content octets (two's complement) and the issuer
/// Name (its SEQUENCE body). `None` for anything `certificate` refuses.
pub fn certificate_serial_and_issuer(v: &[u8]) -> Option<(&[u8], &[u8])> {
    let (SEQUENCE, cert, _) = next(v)? else { return None };
    let (SEQUENCE, tbs, _) = next(cert)? else { return None };
    let mut rest = tbs;
    if let Some((VERSION, _, after)) = next(rest) {
        rest = after;
    }
    let (INTEGER, serial, rest) = next(rest)? else { return None };
    let (SEQUENCE, _, rest) = next(rest)? else { return None };
    let (SEQUENCE, issuer, _) = next(rest)? else { return None };
    Some((serial, issuer))
}

/// What certificateListExactMatch compares of a CRL (RFC 4523 §2.6): the
/// issuer Name's body and thisUpdate, as `YYYYMMDDHHMMSSZ` text (a
/// UTCTime's two-digit year read as X.509 says: below 50 is 20YY).
pub fn certificate_list_issuer_and_this_update(v: &[u8]) -> Option<(&[u8], String)> {
    let (SEQUENCE, list, _) = next(v)? else { return None };
    let (SEQUENCE, tbs, _) = next(list)? else { return None };
    let mut rest = tbs;
    if let Some((INTEGER, _, after)) = next(rest) {
        rest = after;
    }
    let (SEQUENCE, _, rest) = next(rest)? else { return None };
    let (SEQUENCE, issuer, rest) = next(rest)? else { return None };
    let (tag, time, _) = next(rest)?;
    let time = std::str::from_utf8(time).ok()?;
    let time = match tag {
        GENERALIZED_TIME => time.to_string(),
        UTC_TIME => {
            let century = if time.get(..2)?.parse::<u8>().ok()? < 50 { "20" } else { "19" };
            format!("{century}{time}")
        }
        _ => return None,
    };
    Some((issuer, time))
}

/// An X.509 Name (the body of its RDNSequence) as an RFC 4514 string,
/// types by numeric OID (the schema names them when the DN is
/// normalized), leaf first as LDAP writes DNs. `None` for a value that is
/// not one of the character string types, or for malformed DER.
pub fn name_to_dn(name: &[u8]) -> Option<String> {
    let mut rdns = Vec::new();
    let mut rest = name;
    while !rest.is_empty() {
        let (SET, set, after) = next(rest)? else { return None };
        rest = after;
        let mut rdn = String::new();
        let mut avas = set;
        while !avas.is_empty() {
            let (SEQUENCE, ava, after) = next(avas)? else { return None };
            avas = after;
            let (OID, oid, value) = next(ava)? else { return None };
            let (tag, value, end) = next(value)?;
            if !end.is_empty() {
                return None;
            }
            if !rdn.is_empty() {
                rdn.push('+');
            }
            rdn.push_str(&oid_text(oid)?);
            rdn.push('=');
            crate::dn::escape_value(string_value(tag, value)?.as_bytes(), &mut rdn);
        }
        rdns.push(rdn);
    }
    rdns.reverse();
    Some(rdns.join(","))
}

const OID: u8 = 0x06;
const SET: u8 = 0x31;

/// An OBJECT IDENTIFIER's content octets in dotted form.
fn oid_text(body: &[u8]) -> Option<String> {
    let mut arcs: Vec<u64> = Vec::new();
    let mut arc = 0u64;
    for (i, b) in body.iter().enumerate() {
        if arc > u64::MAX >> 7 || (arc == 0 && *b == 0x80) {
            return None;
        }
        arc = (arc << 7) | (b & 0x7f) as u64;
        if b & 0x80 == 0 {
            if arcs.is_empty() {
                let first = (arc / 40).min(2);
                arcs.push(first);
                arcs.push(arc - first * 40);
            } else {
                arcs.push(arc);
            }
            arc = 0;
        } else if i == body.len() - 1 {
            return None;
        }
    }
    (!arcs.is_empty()).then(|| arcs.iter().map(u64::to_string).collect::<Vec<_>>().join("."))
}

/// A DirectoryString or IA5String value as UTF-8: the ASCII and UTF-8
/// types as they are, TeletexString as Latin-1, BMPString as UTF-16 and
/// UniversalString as UTF-32 (both big-endian).
fn string_value(tag: u8, v: &[u8]) -> Option<String> {
    const UTF8: u8 = 0x0c;
    const NUMERIC: u8 = 0x12;
    const PRINTABLE: u8 = 0x13;
    const TELETEX: u8 = 0x14;
    const IA5: u8 = 0x16;
    const VISIBLE: u8 = 0x1a;
    const UNIVERSAL: u8 = 0x1c;
    const BMP: u8 = 0x1e;
    match tag {
        UTF8 | NUMERIC | PRINTABLE | IA5 | VISIBLE => String::from_utf8(v.to_vec()).ok(),
        TELETEX => Some(v.iter().map(|b| *b as char).collect()),
        BMP if v.len() % 2 == 0 => {
            char::decode_utf16(v.chunks(2).map(|c| u16::from_be_bytes([c[0], c[1]]))).collect::<Result<_, _>>().ok()
        }
        UNIVERSAL if v.len() % 4 == 0 => {
            v.chunks(4).map(|c| char::from_u32(u32::from_be_bytes([c[0], c[1], c[2], c[3]]))).collect()
        }
        _ => None,
    }
}
