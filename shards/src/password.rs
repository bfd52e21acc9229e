//! `userPassword` schemes: verification of the hashes OpenLDAP and 389-ds
//! write, and hashing of new passwords.
//!
//! Verified: `{SSHA}`, `{SHA}`, `{MD5}`, `{SMD5}` (legacy data; never
//! written), `{SSHA256}`, `{SSHA384}`, `{SSHA512}`,
//! `{SHA256}`, `{SHA384}`, `{SHA512}` (digest, then salt, in base64, as
//! slapd's pw-sha2 writes them); `{PBKDF2}`/`{PBKDF2-SHA1}`,
//! `{PBKDF2-SHA256}`, `{PBKDF2-SHA512}` in the `iterations$salt$hash` form
//! of slapd's pw-pbkdf2 and 389-ds's pwdchan (adapted base64: `.` for `+`,
//! no padding); 389-ds's older `{PBKDF2_SHA256}` (base64 of a 4-byte
//! iteration count, 64 bytes of salt, 256 bytes of hash); `{ARGON2}` with a
//! PHC string; `{CRYPT}` with `$1$`, `$5$`, `$6$`, `$2b$`/`$2y$`, yescrypt
//! (`$y$`, the default of current Debian and Fedora `/etc/shadow`) and
//! scrypt (`$7$`), and traditional DES. A value without a scheme is
//! cleartext and matches only where the configuration allows cleartext. A
//! value with an unknown scheme never matches: unsupported hashes fail
//! closed.
//!
//! Slow schemes (PBKDF2, Argon2, crypt's) are `is_slow`: the
//! server verifies and hashes them off the reactor.

use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use base64::Engine;
use rand::RngCore;
use sha1::Sha1;
use sha2::{Digest, Sha256, Sha384, Sha512};

/// The scheme new passwords get unless `passwords.default_scheme` says otherwise.
pub const DEFAULT_SCHEME: &str = "{PBKDF2-SHA512}";
/// PBKDF2 iterations of new hashes (slapd's pw-pbkdf2 default).
pub const PBKDF2_ITERATIONS: u32 = 10_000;

/// The longest password a `{CRYPT}` value is verified against
/// (libxcrypt's `CRYPT_MAX_PASSPHRASE_SIZE`).
pub const MAX_CRYPT_PASSWORD: usize = 512;

/// The schemes `hash` can write (`coredir hash-password --scheme`).
pub const WRITABLE: &[&str] = &[
    "{SSHA}",
    "{SHA}",
    "{SSHA256}",
    "{SSHA384}",
    "{SSHA512}",
    "{SHA256}",
    "{SHA384}",
    "{SHA512}",
    "{PBKDF2}",
    "{PBKDF2-SHA1}",
    "{PBKDF2-SHA256}",
    "{PBKDF2-SHA512}",
    "{ARGON2}",
    "{CRYPT}",
    "{CLEARTEXT}",
];

/// How passwords are verified: whether cleartext values count, and what
/// one verification may cost (`passwords.max_*`). A stored hash whose
/// parameters ask for more than that never verifies: a user who may
/// write their own `userPassword` could otherwise store
/// `{PBKDF2-SHA512}4000000000$…` and make every bind as them (anonymous
/// can try one) burn minutes of a shard's CPU, or an Argon2 hash that
/// allocates terabytes. Writes of such hashes are refused (`within`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Policy {
    pub allow_cleartext: bool,
    /// PBKDF2: iterations times output blocks (a 64-byte SHA-512 hash is
    /// one block; 389-ds's 256-byte SHA-256 hash is eight).
    pub max_pbkdf2_iterations: u64,
    /// Argon2: memory (KiB) and passes.
    pub max_argon2_memory_kib: u32,
    pub max_argon2_iterations: u32,
    /// `{CRYPT}`: bcrypt's cost (log2 of its rounds) and sha-crypt's rounds.
    pub max_bcrypt_cost: u32,
    pub max_sha_crypt_rounds: u32,
    /// `{CRYPT}` scrypt and yescrypt: memory (KiB: 128·r·(N + p + 2)
    /// bytes, `scrypt_within`) and how often it is filled (p, times t + 1
    /// for yescrypt).
    pub max_scrypt_memory_kib: u32,
    pub max_scrypt_passes: u32,
}

impl Default for Policy {
    /// Well above what slapd, 389-ds and the OWASP recommendations write
    /// (PBKDF2-SHA512 210,000; Argon2 19–64 MiB, 2–3 passes; bcrypt 10–12;
    /// sha-crypt 5,000; yescrypt 16 MiB and scrypt 64 MiB, one pass, as
    /// libxcrypt writes them by default), and below a second of CPU per
    /// verification.
    fn default() -> Policy {
        Policy {
            allow_cleartext: false,
            max_pbkdf2_iterations: 1_000_000,
            max_argon2_memory_kib: 256 << 10,
            max_argon2_iterations: 10,
            max_bcrypt_cost: 14,
            max_sha_crypt_rounds: 1_000_000,
            max_scrypt_memory_kib: 128 << 10,
            max_scrypt_passes: 2,
        }
    }
}

impl Policy {
    /// Verifies `given` against a stored value. crypt(3)'s schemes cost
    /// rounds times the password's length (sha-crypt even its square), so
    /// they take at most libxcrypt's 512 bytes of password.
    pub fn verify(&self, stored: &[u8], given: &[u8]) -> bool {
        // The scheme read once: a bind runs this for every value.
        let Some((scheme, rest)) = split_scheme(stored) else {
            return self.allow_cleartext && constant_time_eq(stored, given);
        };
        let (scheme, rest) = (scheme.as_str(), trim(rest));
        self.scheme_within(scheme, rest)
            && !(scheme == "CRYPT" && given.len() > MAX_CRYPT_PASSWORD)
            && verify_scheme(scheme, rest, given)
    }

    /// `verify` of a value that is no key stretching, reading its scheme
    /// once; None for one that is (`is_slow`), which a bind verifies on a
    /// blocking thread.
    pub fn verify_fast(&self, stored: &[u8], given: &[u8]) -> Option<bool> {
        let Some((scheme, rest)) = split_scheme(stored) else {
            return Some(self.allow_cleartext && constant_time_eq(stored, given));
        };
        let scheme = scheme.as_str();
        if is_slow_scheme(scheme) {
            return None;
        }
        let rest = trim(rest);
        Some(self.scheme_within(scheme, rest) && verify_scheme(scheme, rest, given))
    }

    /// Whether verifying `stored` stays within the limits (a value that is
    /// no hash, or a scheme without parameters, always does).
    pub fn within(&self, stored: &[u8]) -> bool {
        let Some((scheme, rest)) = split_scheme(stored) else { return true };
        self.scheme_within(scheme.as_str(), trim(rest))
    }

    /// `within` for a value's upper-cased scheme and trimmed rest.
    fn scheme_within(&self, scheme: &str, rest: &[u8]) -> bool {
        let text = || std::str::from_utf8(rest).unwrap_or("");
        match scheme {
            "PBKDF2" | "PBKDF2-SHA1" => self.pbkdf2_within(rest, 20),
            "PBKDF2-SHA256" => self.pbkdf2_within(rest, 32),
            "PBKDF2-SHA512" => self.pbkdf2_within(rest, 64),
            // 389-ds: 256 bytes of SHA-256 output, 8 blocks; read as its
            // verifier reads it (a value it cannot read costs nothing).
            "PBKDF2_SHA256" => {
                pbkdf2_389_parts(rest).is_none_or(|(iter, ..)| u64::from(iter) * 8 <= self.max_pbkdf2_iterations)
            }
            "ARGON2" => self.argon2_within(text()),
            "CRYPT" => self.crypt_within(text()),
            _ => true,
        }
    }

    fn pbkdf2_within(&self, rest: &[u8], block: usize) -> bool {
        // Read as its verifier reads it: what it cannot read costs nothing.
        pbkdf2_parts(rest).is_none_or(|(iter, _, want)| {
            u64::from(iter).saturating_mul(want.len().div_ceil(block) as u64) <= self.max_pbkdf2_iterations
        })
    }

    fn argon2_within(&self, rest: &str) -> bool {
        let Ok(parsed) = argon2::password_hash::PasswordHash::new(rest) else { return true };
        let Ok(params) = argon2::Params::try_from(&parsed) else { return true };
        params.m_cost() <= self.max_argon2_memory_kib && params.t_cost() <= self.max_argon2_iterations
    }

    /// Every form `pwhash::unix::verify` takes, bounded; any other fails
    /// closed (a form added to that crate must be bounded here first).
    fn crypt_within(&self, rest: &str) -> bool {
        let rounds_within = |r: u64| r <= u64::from(self.max_sha_crypt_rounds);
        if let Some(count) = rest.strip_prefix('_') {
            // BSDi: 4 characters of 6 bits, least significant first.
            return count.len() >= 4
                && count
                    .bytes()
                    .take(4)
                    .enumerate()
                    .try_fold(0u64, |n, (i, c)| Some(n | crypt_digit(c)? << (6 * i)))
                    .is_some_and(rounds_within);
        }
        if !rest.starts_with('$') {
            // Traditional DES: 25 rounds, fixed.
            return true;
        }
        let mut fields = rest[1..].split('$');
        let (Some(id), Some(param)) = (fields.next(), fields.next()) else { return false };
        match id {
            "1" => true,
            "2a" | "2b" | "2x" | "2y" => param.parse::<u32>().is_ok_and(|cost| cost <= self.max_bcrypt_cost),
            // Without `rounds=`, sha-crypt's default of 5,000.
            "5" | "6" => {
                param.strip_prefix("rounds=").map_or(Some(5_000), |r| r.parse().ok()).is_some_and(rounds_within)
            }
            "sha1" => param.parse().is_ok_and(rounds_within),
            "7" | "y" => scrypt_shaped(rest).is_some_and(|c| self.scrypt_within(c)),
            _ => false,
        }
    }

    /// Memory: the N blocks, the p blocks of B and two of scratch, 128·r
    /// bytes each, and yescrypt's S-boxes (12 KiB per thread); passes:
    /// p times t + 1.
    fn scrypt_within(&self, c: ScryptCost) -> bool {
        let blocks = (1u128 << c.n_log2) + u128::from(c.p) + 2;
        let bytes = 128 * u128::from(c.r) * blocks + u128::from(c.p) * (12 << 10);
        bytes <= u128::from(self.max_scrypt_memory_kib) << 10
            && u128::from(c.p) * (u128::from(c.t) + 1) <= u128::from(self.max_scrypt_passes)
    }
}

/// An scrypt (`$7$`) or yescrypt (`$y$`) hash in the shape libxcrypt
/// writes, with its cost: a 32-byte hash (43 characters), a salt of at
/// most 64 bytes (86 characters), 384 bytes in all (`CRYPT_OUTPUT_SIZE`).
/// The crates run PBKDF2 over the whole of B once per 32 bytes of the
/// expected hash and hash the salt once per 32 bytes of B, so a longer
/// salt or hash would cost what the bounds do not count.
fn scrypt_shaped(rest: &str) -> Option<ScryptCost> {
    const HASH: usize = 43;
    const SALT: usize = 86;
    if rest.len() > 384 {
        return None;
    }
    let fields: Vec<&str> = rest.strip_prefix('$')?.split('$').collect();
    match fields[..] {
        // Parameters (11 characters) and salt in one field.
        ["7", params_salt, hash] if hash.len() == HASH && params_salt.len() <= 11 + SALT => scrypt_cost(params_salt),
        ["y", params, salt, hash] if hash.len() == HASH && salt.len() <= SALT => yescrypt_cost(params),
        _ => None,
    }
}

/// What verifying an scrypt or yescrypt hash costs: N = 2^n_log2 blocks of
/// 128·r bytes, filled p times (t + 1 times each for yescrypt).
#[derive(Debug, PartialEq)]
struct ScryptCost {
    n_log2: u32,
    r: u32,
    p: u32,
    t: u32,
}

/// scrypt's `$7$` parameters, as libxcrypt writes them before the salt:
/// one character for log2(N), then r and p in five characters each (30
/// bits, least significant first). Read as the `scrypt` crate reads them.
fn scrypt_cost(param: &str) -> Option<ScryptCost> {
    let b = param.as_bytes();
    let fixed = |at: usize| -> Option<u32> {
        b.get(at..at + 5)?.iter().rev().try_fold(0u32, |n, &c| Some(n << 6 | crypt_digit(c)? as u32))
    };
    let n_log2 = crypt_digit(*b.first()?)? as u32;
    let cost = ScryptCost { n_log2, r: fixed(1)?, p: fixed(6)?, t: 0 };
    // scrypt's own limit, checked here in 64 bits (the crate multiplies
    // in 32, which overflows in a debug build).
    if u64::from(cost.r) * u64::from(cost.p) >= 1 << 30 {
        return None;
    }
    let same = scrypt::Params::new(n_log2 as u8, cost.r, cost.p).is_ok_and(|p| p.log_n() as u32 == n_log2);
    same.then_some(cost)
}

/// yescrypt's `$y$` parameters: flavor, log2(N), r, then optionally a set
/// of flags and p, t, g and NROM, each in yescrypt's variable-length
/// encoding. A value the `yescrypt` crate would read otherwise is refused.
fn yescrypt_cost(param: &str) -> Option<ScryptCost> {
    let mut digits = param.bytes();
    let mut next = |min: u32| yescrypt_number(&mut digits, min);
    let (_flavor, n_log2, r) = (next(0)?, next(1)?, next(1)?);
    let (mut p, mut t) = (1, 0);
    if let Some(have) = next(1) {
        if have & 1 != 0 {
            p = next(2)?;
        }
        if have & 2 != 0 {
            t = next(1)?;
        }
    }
    let theirs: yescrypt::Params = param.parse().ok()?;
    let cost = ScryptCost { n_log2, r, p, t };
    (n_log2 < 64 && theirs.n() == 1u64 << n_log2 && theirs.r() == r && theirs.p() == p).then_some(cost)
}

/// One number in yescrypt's encoding: the first character's value says
/// how many characters follow (0–47: none, 48–55: one, 56–59: two, …),
/// each adding six bits below the previous ones.
fn yescrypt_number(digits: &mut std::str::Bytes<'_>, min: u32) -> Option<u32> {
    let first = crypt_digit(digits.next()?)? as u32;
    let (mut start, mut end, mut extra) = (0u32, 47u32, 0u32);
    let mut value = u64::from(min);
    while first > end {
        value += u64::from(end + 1 - start) << (6 * extra);
        start = end + 1;
        end = start + (62 - end) / 2;
        extra += 1;
    }
    value += u64::from(first - start) << (6 * extra);
    for shift in (0..extra).rev() {
        value += crypt_digit(digits.next()?)? << (6 * shift);
    }
    u32::try_from(value).ok()
}

/// Verifies `given` against a stored value, whatever its parameters cost
/// (`Policy::verify` bounds them); cleartext values match only when
/// `cleartext` allows them.
pub fn verify_with(stored: &[u8], given: &[u8], cleartext: bool) -> bool {
    let Some((scheme, rest)) = split_scheme(stored) else {
        return cleartext && constant_time_eq(stored, given);
    };
    verify_scheme(scheme.as_str(), trim(rest), given)
}

/// `verify_with` for a value's upper-cased scheme and trimmed rest.
fn verify_scheme(scheme: &str, rest: &[u8], given: &[u8]) -> bool {
    match scheme {
        "SSHA" => salted::<Sha1>(rest, given),
        "SSHA256" => salted::<Sha256>(rest, given),
        "SSHA384" => salted::<Sha384>(rest, given),
        "SSHA512" => salted::<Sha512>(rest, given),
        "SHA" => plain::<Sha1>(rest, given),
        // Legacy data (slapd and 389-ds still verify them); never written.
        "MD5" => plain::<md5::Md5>(rest, given),
        "SMD5" => salted::<md5::Md5>(rest, given),
        "SHA256" => plain::<Sha256>(rest, given),
        "SHA384" => plain::<Sha384>(rest, given),
        "SHA512" => plain::<Sha512>(rest, given),
        "PBKDF2" | "PBKDF2-SHA1" => pbkdf2_openldap(Prf::Sha1, rest, given),
        "PBKDF2-SHA256" => pbkdf2_openldap(Prf::Sha256, rest, given),
        "PBKDF2-SHA512" => pbkdf2_openldap(Prf::Sha512, rest, given),
        "PBKDF2_SHA256" => pbkdf2_389(rest, given),
        "ARGON2" => argon2_verify(rest, given),
        "CRYPT" => std::str::from_utf8(rest).is_ok_and(|h| crypt_verify(h, given)),
        _ => false,
    }
}

/// crypt(3) as libxcrypt does it: yescrypt and scrypt, then what
/// `pwhash` knows.
fn crypt_verify(hash: &str, given: &[u8]) -> bool {
    use yescrypt::PasswordVerifier;
    if hash.starts_with("$y$") {
        yescrypt::Yescrypt::default().verify_password(given, hash).is_ok()
    } else if hash.starts_with("$7$") {
        scrypt::mcf::PasswordHashRef::new(hash).is_ok_and(|h| scrypt::Scrypt::new().verify_password(given, h).is_ok())
    } else {
        pwhash::unix::verify(given, hash)
    }
}

/// Verification as the directory does it by default: no cleartext.
pub fn verify(stored: &[u8], given: &[u8]) -> bool {
    verify_with(stored, given, false)
}

/// Whether verifying this value costs milliseconds (key stretching).
pub fn is_slow(stored: &[u8]) -> bool {
    split_scheme(stored).is_some_and(|(s, _)| is_slow_scheme(s.as_str()))
}

/// `is_slow` by a value's upper-cased scheme.
fn is_slow_scheme(s: &str) -> bool {
    s.starts_with("PBKDF2") || s == "ARGON2" || s == "CRYPT"
}

/// Hashes a password with a scheme of `WRITABLE`.
pub fn hash(scheme: &str, password: &[u8]) -> Result<String, String> {
    let salt = |n: usize| {
        let mut s = vec![0u8; n];
        rand::thread_rng().fill_bytes(&mut s);
        s
    };
    let upper = scheme.to_ascii_uppercase();
    Ok(match upper.as_str() {
        "{SSHA}" => salted_hash::<Sha1>("{SSHA}", password, &salt(8)),
        "{SSHA256}" => salted_hash::<Sha256>("{SSHA256}", password, &salt(8)),
        "{SSHA384}" => salted_hash::<Sha384>("{SSHA384}", password, &salt(8)),
        "{SSHA512}" => salted_hash::<Sha512>("{SSHA512}", password, &salt(8)),
        "{SHA}" => format!("{{SHA}}{}", STANDARD.encode(Sha1::digest(password))),
        "{SHA256}" => format!("{{SHA256}}{}", STANDARD.encode(Sha256::digest(password))),
        "{SHA384}" => format!("{{SHA384}}{}", STANDARD.encode(Sha384::digest(password))),
        "{SHA512}" => format!("{{SHA512}}{}", STANDARD.encode(Sha512::digest(password))),
        "{PBKDF2}" | "{PBKDF2-SHA1}" => pbkdf2_hash(Prf::Sha1, &upper, password, &salt(16), 20),
        "{PBKDF2-SHA256}" => pbkdf2_hash(Prf::Sha256, &upper, password, &salt(16), 32),
        "{PBKDF2-SHA512}" => pbkdf2_hash(Prf::Sha512, &upper, password, &salt(16), 64),
        "{ARGON2}" => {
            use argon2::password_hash::{PasswordHasher, SaltString};
            let salt = SaltString::generate(&mut argon2::password_hash::rand_core::OsRng);
            let phc = argon2::Argon2::default().hash_password(password, &salt).map_err(|e| e.to_string())?;
            format!("{{ARGON2}}{phc}")
        }
        "{CRYPT}" => {
            let h = pwhash::sha512_crypt::hash(password).map_err(|e| e.to_string())?;
            format!("{{CRYPT}}{h}")
        }
        "{CLEARTEXT}" => String::from_utf8(password.to_vec()).map_err(|_| "the password is not UTF-8".to_string())?,
        _ => return Err(format!("unknown password scheme {scheme} (one of {})", WRITABLE.join(", "))),
    })
}

/// SSHA with an 8-byte salt, as `slappasswd` writes it.
pub fn hash_ssha(password: &[u8]) -> String {
    hash("{SSHA}", password).expect("SSHA is always available")
}

/// Whether a value is already in `{SCHEME}` form.
pub fn is_hashed(value: &[u8]) -> bool {
    split_scheme(value).is_some()
}

/// A value's `{SCHEME}` name, upper-cased on the stack: read for every
/// value a bind looks at, it allocates nothing.
struct Scheme {
    upper: [u8; 31],
    len: usize,
}

impl Scheme {
    fn as_str(&self) -> &str {
        // ASCII upper-casing keeps `split_scheme`'s UTF-8 valid.
        std::str::from_utf8(&self.upper[..self.len]).unwrap_or("")
    }
}

/// The scheme of a `{SCHEME}rest` value (a name of 1 to 30 bytes, as
/// `take(32)` of the braces allows) and the rest.
fn split_scheme(v: &[u8]) -> Option<(Scheme, &[u8])> {
    if v.first() != Some(&b'{') {
        return None;
    }
    let end = v.iter().take(32).position(|b| *b == b'}')?;
    let name = &v[1..end];
    if name.is_empty() || std::str::from_utf8(name).is_err() {
        return None;
    }
    let mut upper = [0u8; 31];
    upper[..name.len()].copy_from_slice(name);
    upper[..name.len()].make_ascii_uppercase();
    Some((Scheme { upper, len: name.len() }, &v[end + 1..]))
}

fn trim(v: &[u8]) -> &[u8] {
    let end = v.iter().rposition(|b| !b.is_ascii_whitespace()).map_or(0, |e| e + 1);
    &v[..end]
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `base64(digest(password + salt) + salt)`.
fn salted<D: Digest>(rest: &[u8], given: &[u8]) -> bool {
    // Decoded on the stack: a bind allocates nothing for its hash (a
    // longer salt than fits is rare).
    let mut buf = [0u8; 128];
    let owned;
    let raw = match STANDARD.decode_slice(rest, &mut buf) {
        Ok(n) => &buf[..n],
        Err(base64::DecodeSliceError::OutputSliceTooSmall) => {
            let Ok(v) = STANDARD.decode(rest) else { return false };
            owned = v;
            &owned[..]
        }
        Err(_) => return false,
    };
    let n = <D as Digest>::output_size();
    if raw.len() <= n {
        return false;
    }
    let (digest, salt) = raw.split_at(n);
    let mut h = D::new();
    h.update(given);
    h.update(salt);
    constant_time_eq(&h.finalize(), digest)
}

fn salted_hash<D: Digest>(scheme: &str, password: &[u8], salt: &[u8]) -> String {
    let mut h = D::new();
    h.update(password);
    h.update(salt);
    let mut raw = h.finalize().to_vec();
    raw.extend_from_slice(salt);
    format!("{scheme}{}", STANDARD.encode(raw))
}

fn plain<D: Digest>(rest: &[u8], given: &[u8]) -> bool {
    STANDARD.decode(rest).is_ok_and(|raw| constant_time_eq(&D::digest(given), &raw))
}

/// Adapted base64 (passlib's "ab64"): `.` instead of `+`, no padding.
fn ab64_decode(s: &str) -> Option<Vec<u8>> {
    STANDARD_NO_PAD.decode(s.replace('.', "+").trim_end_matches('=')).ok()
}

fn ab64_encode(b: &[u8]) -> String {
    STANDARD_NO_PAD.encode(b).replace('+', ".")
}

/// The HMAC a PBKDF2 scheme uses.
#[derive(Clone, Copy)]
enum Prf {
    Sha1,
    Sha256,
    Sha512,
}

fn derive(prf: Prf, password: &[u8], salt: &[u8], rounds: u32, out: &mut [u8]) {
    match prf {
        Prf::Sha1 => pbkdf2::pbkdf2_hmac::<Sha1>(password, salt, rounds, out),
        Prf::Sha256 => pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, rounds, out),
        Prf::Sha512 => pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, rounds, out),
    }
}

/// A character of crypt's base64 alphabet (`./0-9A-Za-z`), as its value.
fn crypt_digit(c: u8) -> Option<u64> {
    let i = match c {
        b'.' => 0,
        b'/' => 1,
        b'0'..=b'9' => c - b'0' + 2,
        b'A'..=b'Z' => c - b'A' + 12,
        b'a'..=b'z' => c - b'a' + 38,
        _ => return None,
    };
    Some(u64::from(i))
}

/// The `iterations$salt$hash` form: iterations, salt, expected hash.
fn pbkdf2_parts(rest: &[u8]) -> Option<(u32, Vec<u8>, Vec<u8>)> {
    let text = std::str::from_utf8(rest).ok()?;
    let mut parts = text.split('$');
    let (Some(iter), Some(salt), Some(hash), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return None;
    };
    let (iter, salt, want) = (iter.parse::<u32>().ok()?, ab64_decode(salt)?, ab64_decode(hash)?);
    (iter > 0 && !want.is_empty() && want.len() <= 1024).then_some((iter, salt, want))
}

fn pbkdf2_openldap(prf: Prf, rest: &[u8], given: &[u8]) -> bool {
    let Some((iter, salt, want)) = pbkdf2_parts(rest) else { return false };
    let mut got = vec![0u8; want.len()];
    derive(prf, given, &salt, iter, &mut got);
    constant_time_eq(&got, &want)
}

fn pbkdf2_hash(prf: Prf, scheme: &str, password: &[u8], salt: &[u8], len: usize) -> String {
    let mut out = vec![0u8; len];
    derive(prf, password, salt, PBKDF2_ITERATIONS, &mut out);
    format!("{scheme}{PBKDF2_ITERATIONS}${}${}", ab64_encode(salt), ab64_encode(&out))
}

/// 389-ds's `{PBKDF2_SHA256}`: base64 of iterations (u32, big-endian),
/// 64 bytes of salt and 256 bytes of PBKDF2-HMAC-SHA256 output.
fn pbkdf2_389(rest: &[u8], given: &[u8]) -> bool {
    let Some((iter, raw)) = pbkdf2_389_parts(rest) else { return false };
    let (salt, want) = raw[4..].split_at(64);
    let mut got = vec![0u8; 256];
    derive(Prf::Sha256, given, salt, iter, &mut got);
    constant_time_eq(&got, want)
}

/// Its iterations and the decoded record (iterations, salt, hash).
fn pbkdf2_389_parts(rest: &[u8]) -> Option<(u32, Vec<u8>)> {
    let raw = STANDARD.decode(rest.iter().copied().filter(|b| !b.is_ascii_whitespace()).collect::<Vec<u8>>()).ok()?;
    if raw.len() != 4 + 64 + 256 {
        return None;
    }
    let iter = u32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]);
    (iter > 0).then_some((iter, raw))
}

fn argon2_verify(rest: &[u8], given: &[u8]) -> bool {
    use argon2::password_hash::{PasswordHash, PasswordVerifier};
    let Ok(text) = std::str::from_utf8(rest) else { return false };
    let Ok(parsed) = PasswordHash::new(text) else { return false };
    argon2::Argon2::default().verify_password(given, &parsed).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hashes of "secret" as other servers and tools wrote them.
    const FOREIGN: &[&str] = &[
        "{SHA}5en6G6MezRroT3XKqkdPOmY/BfQ=",
        "{MD5}Xr4ilOzQ4PCOq3aQ0qbuaQ==",
        "{SMD5}t6xns2DCS6727SipGd221U5hQ2w=",
        "{SHA512}vSsar3708Jvp9Szi2NWZZ02Bqp1qRCFpbcTZPdBhnWgs5WtNZKnvCXdhztmeD2cmW192CF5bDufKRpayrW/isg==",
        "{PBKDF2-SHA512}10000$/oQ4xZi382mk7kvCd3ZdkA$2wqjpuyV2l0U/a1QwoQPOtlQL.UcJGNACj1O24balruqQb/NgPW6OCvvrrJP8.SzA3/5iYvLnwWPzeX8IK/bEQ",
        "{PBKDF2-SHA256}10000$jq40ImWtmpTE.aYDYV1GfQ$mpiL4ui02ACmYOAnCjp/MI1gQk50xLbZ54RZneU0fCg",
        "{PBKDF2-SHA1}10000$QJTEclnXgh9Cz3ChCWpdAg$9.s98jwFJM.NXJK9ca/oJ5AyoAQ",
        "{PBKDF2}10000$QJTEclnXgh9Cz3ChCWpdAg$9.s98jwFJM.NXJK9ca/oJ5AyoAQ",
    ];

    /// A 389-ds `{PBKDF2_SHA256}` hash of "Password123".
    const DS389: &str = "{PBKDF2_SHA256}AAAnEGTxXtnR/oox922/jZyjH6fmiIdW4AwIYZE2LfCVL/SUz5GbAHfjRj4NbN2u8ul0/j/dUzJ4gQSawGALGHZV74nOAtPttoZDTsh7BeGCLD/Ps7vRugwDdz9uPARXzF3bD/8qCpumvRGb4pehzfQsk+FnGgTwi0rUeVaN8a7Kbv8ZpRfU2sd+208F/YL42BWAh/2tv0I4vY7ZsrCZcrUJtgKWy5Nr+t78zmPkrZsX/kgfnGdXhr50kN10cmkLQ0/cZOXo9CAkpeZyFu+wQ5vQdUaES2Vd5kBjJYPCkr4b2ocr4ETQi3IGO2GGCoCetmMIETsudRVSxUNBbva+Vgxin5Apu4wIP/0ZyuGK6TuWLqLnNpmK3RkRx0xjqJ4nN2Ok0ul0XYBJcYIBt4UoaVM2uSa/Etw28Uy+zAsUv2AOiRo5";

    /// A salted hash verifies whatever its salt's length: one that does
    /// not fit the decoding buffer on the stack too; and `verify_fast`
    /// answers as `verify` for a fast scheme and leaves a slow one.
    #[test]
    fn salted_hashes_verify_with_any_salt() {
        let policy = Policy::default();
        for len in [1, 8, 63, 64, 65, 200] {
            let salt: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let stored = salted_hash::<Sha512>("{SSHA512}", b"secret", &salt);
            assert!(verify(stored.as_bytes(), b"secret"), "salt of {len}");
            assert!(!verify(stored.as_bytes(), b"secreT"), "salt of {len}");
            assert_eq!(policy.verify_fast(stored.as_bytes(), b"secret"), Some(true), "salt of {len}");
            assert_eq!(policy.verify_fast(stored.as_bytes(), b"other"), Some(false), "salt of {len}");
        }
        assert_eq!(policy.verify_fast(FOREIGN[4].as_bytes(), b"secret"), None);
        assert_eq!(policy.verify_fast(b"secret", b"secret"), Some(policy.verify(b"secret", b"secret")));
    }

    /// Hashes whose parameters cost more than the policy allows never
    /// verify (and return at once), whatever the password.
    #[test]
    fn costly_parameters_are_refused_before_any_work() {
        let p = Policy { allow_cleartext: false, ..Policy::default() };
        let costly = [
            "{PBKDF2-SHA512}4000000000$/oQ4xZi382mk7kvCd3ZdkA$2wqjpuyV2l0U/a1QwoQPOtlQL.UcJGNACj1O24balruqQb/NgPW6OCvvrrJP8.SzA3/5iYvLnwWPzeX8IK/bEQ",
            "{ARGON2}$argon2id$v=19$m=4194304,t=3,p=1$c29tZXNhbHRzb21lc2FsdA$aGFzaGhhc2hoYXNoaGFzaGhhc2hoYXNoaGFzaGhhc2g",
            "{ARGON2}$argon2id$v=19$m=19456,t=1000,p=1$c29tZXNhbHRzb21lc2FsdA$aGFzaGhhc2hoYXNoaGFzaGhhc2hoYXNoaGFzaGhhc2g",
            "{CRYPT}$2b$31$abcdefghijklmnopqrstuuNwOF0u5pFVmUMJG8zWCyF6BqfrbiZ1e",
            "{CRYPT}$6$rounds=999999999$saltsalt$abc",
            "{CRYPT}$sha1$4294967295$abc$x",
            // BSDi with 16.7 million rounds, and a form no bound knows.
            "{CRYPT}_zzzzsalt0123456789a",
            "{CRYPT}$7$whatever$x",
            "{CRYPT}$y$whatever$x",
        ];
        // 389-ds's form with whitespace its verifier skips: 4 billion iterations.
        let mut raw = u32::MAX.to_be_bytes().to_vec();
        raw.extend([0u8; 320]);
        let spaced = format!("{{PBKDF2_SHA256}} \n{}", STANDARD.encode(&raw));
        // Within the iterations, but 16 SHA-1 blocks of output (320 bytes).
        let long = format!("{{PBKDF2-SHA1}}100000$QJTEclnXgh9Cz3ChCWpdAg${}", "A".repeat(427));
        let costly = costly.iter().map(|h| h.to_string()).chain([spaced, long]);
        let start = std::time::Instant::now();
        for h in costly {
            assert!(!p.within(h.as_bytes()), "{h}");
            assert!(!p.verify(h.as_bytes(), b"secret"), "{h}");
        }
        // What the others write stays within, and verifies.
        for h in FOREIGN.iter().chain([DS389].iter()) {
            assert!(p.within(h.as_bytes()), "{h}");
        }
        for scheme in WRITABLE {
            let h = hash(scheme, b"pw").unwrap();
            assert!(p.within(h.as_bytes()), "{h}");
        }
        assert!(start.elapsed() < std::time::Duration::from_secs(30), "the refusals did the work");
        // crypt(3) takes up to 512 bytes of password: a longer one (its cost
        // grows with the square of the length) never verifies.
        for (n, verifies) in [(MAX_CRYPT_PASSWORD, true), (MAX_CRYPT_PASSWORD + 1, false)] {
            let pw = vec![b'p'; n];
            let h = hash("{CRYPT}", &pw).unwrap();
            assert_eq!(p.verify(h.as_bytes(), &pw), verifies, "{n} bytes");
        }
        assert!(p.verify(DS389.as_bytes(), b"Password123"));
    }

    /// Hashes from libxcrypt's crypt(3) (Perl's `crypt` on Debian 12), as
    /// `/etc/shadow` holds them: yescrypt with Debian's default parameters,
    /// and scrypt. (An empty yescrypt salt, which crypt_gensalt never
    /// writes, is not read.)
    const SHADOW: [(&str, &str); 2] = [
        ("$y$j9T$F5Jx5fExrKuPp53xLKQ..1$GmcwIgvdUC9qLWcKCi6gklUa1dM3ziD43YxYNURLKy0", "secret"),
        ("$7$CU..../....abcdefgh$XWs9HxtpA2.6U5CDBBbcW.h3o9pYlC.MIIb8JqMgZx6", "secret"),
    ];

    #[test]
    fn yescrypt_and_scrypt_verify_within_bounds() {
        let p = Policy::default();
        for (h, pw) in SHADOW {
            let stored = format!("{{CRYPT}}{h}");
            assert!(p.within(stored.as_bytes()), "{h}");
            assert!(p.verify(stored.as_bytes(), pw.as_bytes()), "{h}");
            assert!(!p.verify(stored.as_bytes(), b"wrong"), "{h}");
        }
        // Debian's default: N = 4096 blocks of 128·32 bytes (16 MiB), once.
        let debian = ScryptCost { n_log2: 12, r: 32, p: 1, t: 0 };
        assert_eq!(yescrypt_cost("j9T"), Some(debian));
        // p = 11 in the optional fields (yescrypt's own test vectors).
        assert_eq!(yescrypt_cost("jD5.7"), Some(ScryptCost { n_log2: 16, r: 8, p: 11, t: 0 }));
        assert_eq!(scrypt_cost("CU..../....abcdefgh"), Some(ScryptCost { n_log2: 14, r: 32, p: 1, t: 0 }));
        // What a stored hash may ask for beyond the bounds is refused: 2^32
        // blocks, 2^63 blocks, eleven passes, t = 17, an scrypt of 2^63;
        // a tiny N with a huge r·p (the p blocks of B: 2.5 GiB), in both;
        // a hash or a salt longer than libxcrypt writes (the crates hash
        // all of B once per 32 bytes of it); r·p past scrypt's limit.
        let h43 = "GmcwIgvdUC9qLWcKCi6gklUa1dM3ziD43YxYNURLKy0";
        let costly = [
            format!("$y$jUT$salt${h43}"),
            format!("$y$jzT$salt${h43}"),
            "$y$jD5.7$LdJMENpBABJJ3hIHjB1Bi.$TyDI3HanZm6CbVPjw7EQz9N2DwYqytHiwJv7wd5p510".to_string(),
            format!("$y$j9T/E$salt${h43}"),
            format!("$7$zU..../....salt${h43}"),
            format!("$7$....6.8....abcdefgh${h43}"),
            format!("$y$..y/vrD.6$abcdefgh${h43}"),
            format!("$y$j9T$F5Jx5fExrKuPp53xLKQ..1${}", ".".repeat(4096)),
            format!("$y$j9T${}${h43}", "a".repeat(87)),
            format!("$7$CU..../....{}${h43}", "a".repeat(87)),
            format!("$7$...E....E..salt${h43}"),
        ];
        for h in &costly {
            let stored = format!("{{CRYPT}}{h}");
            assert!(!p.within(stored.as_bytes()), "{h}");
            assert!(!p.verify(stored.as_bytes(), b"pw"), "{h}");
        }
        let roomy = Policy { max_scrypt_passes: 11, max_scrypt_memory_kib: 256 << 10, ..Policy::default() };
        assert!(roomy.within(b"{CRYPT}$y$jD5.7$LdJMENpBABJJ3hIHjB1Bi.$TyDI3HanZm6CbVPjw7EQz9N2DwYqytHiwJv7wd5p510"));
    }

    /// Odd parameters (every flavor, zero and tiny N and r, flags with and
    /// without their fields, truncated) are refused or verified, never a
    /// panic; a form neither crate reads is not within (fails closed).
    #[test]
    fn odd_scrypt_parameters_never_panic() {
        let p = Policy::default();
        let digits = [".", "/", "0", "1", "9", "j", "z"];
        for a in digits {
            for b in digits {
                for c in ["", ".", "/", "0", "z"] {
                    for d in ["", ".", "/", "0.", "1", "3..", "z", "./"] {
                        let y = format!("{{CRYPT}}$y${a}{b}{c}{d}$abcd$GmcwIgvdUC9qLWcKCi6gklUa1dM3ziD43YxYNURLKy0");
                        p.verify(y.as_bytes(), b"pw");
                        let s = format!("{{CRYPT}}$7${a}{b}{c}{d}..../....$abcd");
                        p.verify(s.as_bytes(), b"pw");
                    }
                }
            }
        }
        for h in ["$y$", "$y$$", "$y$j$s$h", "$7$", "$7$C$s", "$7$CU..../...."] {
            assert!(!p.verify(format!("{{CRYPT}}{h}").as_bytes(), b"pw"), "{h}");
        }
    }

    #[test]
    fn ds389_pbkdf2_sha256_verifies() {
        assert!(verify(DS389.as_bytes(), b"Password123"));
        assert!(!verify(DS389.as_bytes(), b"Password124"));
    }

    #[test]
    fn foreign_hashes_verify() {
        for h in FOREIGN {
            assert!(verify(h.as_bytes(), b"secret"), "{h}");
            assert!(!verify(h.as_bytes(), b"Secret"), "{h}");
        }
    }

    #[test]
    fn every_writable_scheme_round_trips() {
        for scheme in WRITABLE {
            let h = hash(scheme, b"s3cret pw").unwrap();
            let cleartext = *scheme == "{CLEARTEXT}";
            assert!(verify_with(h.as_bytes(), b"s3cret pw", cleartext), "{scheme}: {h}");
            assert!(!verify_with(h.as_bytes(), b"s3cret pW", cleartext), "{scheme}");
            assert_eq!(is_hashed(h.as_bytes()), !cleartext, "{scheme}");
        }
        assert!(hash("{MD5}", b"x").is_err());
    }

    #[test]
    #[allow(deprecated)] // MD5 and SHA-256 crypt: hashes as old systems wrote them
    fn crypt_and_cleartext() {
        for h in [
            pwhash::md5_crypt::hash("secret").unwrap(),
            pwhash::sha256_crypt::hash("secret").unwrap(),
            pwhash::sha512_crypt::hash("secret").unwrap(),
            pwhash::bcrypt::hash("secret").unwrap(),
        ] {
            let stored = format!("{{CRYPT}}{h}");
            assert!(verify(stored.as_bytes(), b"secret"), "{stored}");
            assert!(!verify(stored.as_bytes(), b"secreT"), "{stored}");
        }
        assert!(!verify(b"plain", b"plain"), "cleartext is off by default");
        assert!(verify_with(b"plain", b"plain", true));
        assert!(!verify_with(b"{MD5}whatever", b"{MD5}whatever", true), "unknown schemes fail closed");
    }
}
