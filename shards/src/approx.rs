//! Approximate match (`~=`) for directory and IA5 strings, as slapd's
//! `directoryStringApproxMatch`: a value matches when every word of the
//! assertion sounds like some word of the value, in the same order. Words
//! are split at spaces, accents are dropped, and each word is reduced to
//! its Metaphone code (Lawrence Philips, 1990) of at most four sounds, so
//! `Smyth` finds `Smith` and `john smith` finds `Jane Smythe`. Types with
//! other syntaxes match `~=` by equality (RFC 4511 §4.5.1.7.6 leaves the
//! algorithm to the server).

use std::borrow::Cow;
use unicode_normalization::UnicodeNormalization;

/// Longest code kept per word, as slapd's `MAXPHONEMELEN`.
const CODE_LEN: usize = 4;
/// Letters of a word looked at (slapd reads at most 31).
const WORD_LEN: usize = 31;

/// The assertion's words as codes, compiled once.
pub fn assertion(value: &[u8]) -> Vec<String> {
    words(value).map(|w| metaphone(w.as_bytes())).collect()
}

/// Whether a value matches any of the assertions compiled by `assertion`:
/// each code of one is found among the value's word codes after the one
/// the previous code matched. An assertion without words matches nothing.
/// The value's codes are made once, however many assertions there are.
pub fn matches(any: &[Vec<String>], value: &[u8]) -> bool {
    if any.iter().all(Vec::is_empty) {
        return false;
    }
    let codes: Vec<String> = words(value).map(|w| metaphone(w.as_bytes())).collect();
    any.iter().filter(|a| !a.is_empty()).any(|assertion| {
        let mut have = codes.iter();
        assertion.iter().all(|want| have.by_ref().any(|c| c == want))
    })
}

/// Words of a value, accents removed (`Ünïcode` → `Unicode`) and, as
/// slapd's approximate normalization, every other character outside
/// ASCII too (`Ørsted` sounds as `rsted`; `日本語` is no word at all).
fn words(value: &[u8]) -> impl Iterator<Item = String> + '_ {
    let text = String::from_utf8_lossy(value);
    let plain: Cow<'_, str> =
        if text.is_ascii() { text } else { Cow::Owned(text.nfkd().filter(char::is_ascii).collect()) };
    // slapd's normalization collapses runs of spaces first: no empty words.
    plain.split(' ').filter(|w| !w.is_empty()).map(str::to_string).collect::<Vec<_>>().into_iter()
}

fn vowel(c: u8) -> bool {
    matches!(c, b'A' | b'E' | b'I' | b'O' | b'U')
}

/// E, I and Y soften C and G.
fn front_vowel(c: u8) -> bool {
    matches!(c, b'E' | b'I' | b'Y')
}

/// Letters that stand for themselves.
fn plain(c: u8) -> bool {
    matches!(c, b'F' | b'J' | b'L' | b'M' | b'N' | b'R')
}

/// Letters after which H is silent.
fn hushes_h(c: u8) -> bool {
    matches!(c, b'C' | b'G' | b'P' | b'S' | b'T')
}

/// The Metaphone code of one word, as slapd computes it, which differs
/// from the textbook: soft G is `G`, -GH- and -GN are `K`, and B sounds
/// only at the end of a word.
pub fn metaphone(word: &[u8]) -> String {
    // The word ends at the first space, punctuation, digit or non-ASCII
    // byte (`john.smith@x` sounds as `john`, `(parens)` as nothing), as
    // in slapd; other bytes that are not letters are skipped.
    let breaks = |c: &&u8| !c.is_ascii() || c.is_ascii_whitespace() || c.is_ascii_punctuation() || c.is_ascii_digit();
    let letters = word.iter().take_while(|c| !breaks(c)).filter(|c| c.is_ascii_alphabetic());
    let mut w: Vec<u8> = letters.take(WORD_LEN).map(u8::to_ascii_uppercase).collect();
    if w.is_empty() {
        return String::new();
    }
    // Initial letters spoken otherwise: AE → E, GN/KN/PN → N, WR → R,
    // WH → W, X → S.
    match (w[0], w.get(1).copied()) {
        (b'A', Some(b'E')) | (b'G' | b'K' | b'P', Some(b'N')) | (b'W', Some(b'R')) => {
            w.remove(0);
        }
        (b'W', Some(b'H')) => {
            w.remove(1);
        }
        (b'X', _) => w[0] = b'S',
        _ => {}
    }
    let at = |i: usize, back: usize| i.checked_sub(back).and_then(|j| w.get(j).copied()).unwrap_or(0);
    let mut code = String::new();
    let mut i = 0;
    while i < w.len() && code.len() < CODE_LEN {
        let (prev, c, next, after) = (at(i, 1), w[i], at(i + 1, 0), at(i + 2, 0));
        let (first, last) = (i == 0, i + 1 == w.len());
        i += 1;
        // Doubled letters sound once, except CC.
        if prev == c && c != b'C' {
            continue;
        }
        if plain(c) || (first && vowel(c)) {
            code.push(c as char);
            continue;
        }
        let sound: Option<&str> = match c {
            // Only a last B sounds, and not in -MB (slapd's reading of
            // "B unless in -MB").
            b'B' if last && prev != b'M' => Some("B"),
            b'C' if prev == b'S' && front_vowel(next) => None,
            b'C' if next == b'I' && after == b'A' => Some("X"),
            b'C' if front_vowel(next) => Some("S"),
            b'C' if next == b'H' => Some(if (first && !vowel(after)) || prev == b'S' { "K" } else { "X" }),
            b'C' => Some("K"),
            b'D' if next == b'G' && front_vowel(after) => Some("J"),
            b'D' => Some("T"),
            b'G' => g_sound(prev, next, after, at(i + 2, 0)),
            b'H' if !hushes_h(prev) && (!vowel(prev) || vowel(next)) => Some("H"),
            b'K' if prev != b'C' => Some("K"),
            b'P' if next == b'H' => Some("F"),
            b'P' => Some("P"),
            b'Q' => Some("K"),
            b'S' if next == b'H' || (next == b'I' && matches!(after, b'O' | b'A')) => Some("X"),
            b'S' => Some("S"),
            b'T' if next == b'I' && matches!(after, b'O' | b'A') => Some("X"),
            b'T' if next == b'H' => Some("0"),
            b'T' if !(next == b'C' && after == b'H') => Some("T"),
            b'V' => Some("F"),
            b'W' | b'Y' if vowel(next) => Some(if c == b'W' { "W" } else { "Y" }),
            // KS, and the S takes the next letter's turn.
            b'X' => {
                i += 1;
                Some("KS")
            }
            b'Z' => Some("S"),
            _ => None,
        };
        if let Some(s) = sound {
            code.push_str(s);
        }
    }
    code.truncate(CODE_LEN);
    code
}

/// G: silent in -GNED, in -DGE-, -DGI-, -DGY- and before a J not followed
/// by a vowel; else `G` before E, I, Y (not in -GG-), else `K` (so -GH-
/// and -GN are `K`, as in slapd).
fn g_sound(prev: u8, next: u8, after: u8, after2: u8) -> Option<&'static str> {
    let gj = next == b'J' && !vowel(after);
    let gned = next == b'N' && after == b'E' && after2 == b'D';
    let dg = prev == b'D' && front_vowel(next);
    (!gj && !gned && !dg).then_some(if front_vowel(next) && after != b'G' { "G" } else { "K" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes() {
        for (word, code) in [
            ("John", "JN"),
            ("Bob", "B"),
            ("Bobb", ""),
            ("(parens)", ""),
            ("Jane", "JN"),
            ("Smith", "SM0"),
            ("Smythe", "SM0"),
            ("Thompson", "0MPS"),
            ("Knight", "NKT"),
            ("Xavier", "SFR"),
            ("Phillips", "FLPS"),
            ("", ""),
            ("123", ""),
            ("John.Smith@Example.COM", "JN"),
            ("Sign", "SKN"),
            ("Agent", "AGNT"),
        ] {
            assert_eq!(metaphone(word.as_bytes()), code, "{word}");
        }
    }

    /// Letters outside ASCII that do not decompose to ASCII are dropped:
    /// a word of them alone sounds as nothing and matches nothing (it
    /// matched every such word), and `Ørsted` is found by `rsted`.
    #[test]
    fn letters_outside_ascii_are_dropped() {
        for v in ["日本語".as_bytes(), "Ørsted".as_bytes(), b"Smith"] {
            assert!(!matches(&[assertion("中文".as_bytes())], v));
        }
        assert!(matches(&[assertion(b"rsted")], "Ørsted".as_bytes()));
        assert!(matches(&[assertion("Müller".as_bytes())], b"Muller"));
    }

    #[test]
    fn words_in_order() {
        let a = assertion(b"john smith");
        assert!(matches(&[a.clone()], b"John  Smith"));
        assert!(matches(&[a.clone()], b"Jane Smythe"));
        assert!(!matches(&[a.clone()], b"Smith John"));
        assert!(matches(&[assertion(b"smyth")], b"Adam Smith"));
        assert!(!matches(&[assertion(b"   ")], b"x"));
        assert!(matches(&[assertion(b"unicode")], "Ünïcode".as_bytes()));
    }
}
