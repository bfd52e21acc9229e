//! `userPassword` verification and hashing.
//!
//! Schemes verified now: `{SSHA}`, `{SHA}` and cleartext (a value without a
//! `{SCHEME}` prefix). A value with any other scheme never matches, so an
//! unsupported hash fails closed. New hashes are `{SSHA}` with an 8-byte
//! random salt, as `slappasswd` writes them.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use rand::RngCore;
use sha1::{Digest, Sha1};

pub fn verify(stored: &[u8], given: &[u8]) -> bool {
    if let Some(rest) = strip_scheme(stored, b"{SSHA}") {
        let Ok(raw) = STANDARD.decode(trim(rest)) else {
            return false;
        };
        if raw.len() <= 20 {
            return false;
        }
        let (digest, salt) = raw.split_at(20);
        let mut h = Sha1::new();
        h.update(given);
        h.update(salt);
        return constant_time_eq(&h.finalize(), digest);
    }
    if let Some(rest) = strip_scheme(stored, b"{SHA}") {
        let Ok(raw) = STANDARD.decode(trim(rest)) else {
            return false;
        };
        return constant_time_eq(&Sha1::digest(given), &raw);
    }
    if stored.first() == Some(&b'{') && stored.contains(&b'}') {
        return false;
    }
    constant_time_eq(stored, given)
}

pub fn hash_ssha(password: &[u8]) -> String {
    let mut salt = [0u8; 8];
    rand::thread_rng().fill_bytes(&mut salt);
    let mut h = Sha1::new();
    h.update(password);
    h.update(salt);
    let mut raw = h.finalize().to_vec();
    raw.extend_from_slice(&salt);
    format!("{{SSHA}}{}", STANDARD.encode(raw))
}

/// Whether a value is already in `{SCHEME}` form.
pub fn is_hashed(value: &[u8]) -> bool {
    value.first() == Some(&b'{') && value.iter().take(32).any(|b| *b == b'}')
}

fn strip_scheme<'a>(v: &'a [u8], scheme: &[u8]) -> Option<&'a [u8]> {
    (v.len() >= scheme.len() && v[..scheme.len()].eq_ignore_ascii_case(scheme)).then(|| &v[scheme.len()..])
}

fn trim(v: &[u8]) -> &[u8] {
    let end = v.iter().rposition(|b| !b.is_ascii_whitespace()).map_or(0, |e| e + 1);
    &v[..end]
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes() {
        let h = hash_ssha(b"secret");
        assert!(verify(h.as_bytes(), b"secret"));
        assert!(!verify(h.as_bytes(), b"Secret"));
        // printf secret | sha1sum | xxd -r -p | base64
        assert!(verify(b"{SHA}5en6G6MezRroT3XKqkdPOmY/BfQ=", b"secret"));
        assert!(!verify(b"{SHA}5en6G6MezRroT3XKqkdPOmY/BfQ=", b"secrets"));
        assert!(verify(b"plain", b"plain"));
        assert!(!verify(b"plain", b"plainx"));
        assert!(!verify(b"{MD5}whatever", b"{MD5}whatever"));
        assert!(is_hashed(h.as_bytes()));
    }
}
