//! Just enough DER to validate the certificate syntaxes: a TLV reader
//! that never reads past its input, and the X.509 structure walk slapd's
//! `certificateValidate` makes (RFC 5280 §4.1). Nothing here trusts a
//! length: every one is checked against the bytes that remain.

/// Universal tags the walk needs.
const INTEGER: u8 = 0x02;
const BIT_STRING: u8 = 0x03;
const SEQUENCE: u8 = 0x30;
/// The context tags of TBSCertificate's optional parts.
const VERSION: u8 = 0xa0;
const ISSUER_UID: u8 = 0x81;
const SUBJECT_UID: u8 = 0x82;
const EXTENSIONS: u8 = 0xa3;

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
    if tag != SEQUENCE || !rest.is_empty() {
        return None;
    }
    let (tag, tbs, after_tbs) = next(cert)?;
    if tag != SEQUENCE {
        return None;
    }
    tbs_certificate(tbs)?;
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

    #[test]
    fn lengths_are_never_trusted() {
        // Long forms that overflow, are not minimal or are indefinite.
        for bad in [&[0x30, 0x88, 0xff, 0xff][..], &[0x30, 0x81, 0x05, 0, 0, 0, 0, 0], &[0x30, 0x80, 0, 0]] {
            assert!(!element(bad), "{bad:?}");
        }
        assert!(element(&[0x30, 0x00]) && element(&[0x04, 0x01, 0x41]));
    }
}
