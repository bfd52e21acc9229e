//! Simple Paged Results (RFC 2696) cookies.
//!
//! A search walks the stores in shard order, each either along an index's
//! candidate ids or along its `dn2id` key range, both sorted; the cookie
//! records where the last page stopped (store, walk, last id or key), so the
//! next page resumes strictly after it, without state on the server and on
//! any shard the client's next connection lands on. Each entry is returned
//! once, as with OpenLDAP, unless it is renamed or re-added while paging.
//! Sorted searches page by offset into the sorted result instead. The
//! cookie also carries a hash of the request and of the controls that
//! shape its result (a sort above all), so it cannot be replayed on
//! another search, and ends with a MAC under a key drawn at start over all
//! of it and the requester's name: a client cannot forge the counts of
//! entries sent and examined (which hold the size limit and the unindexed
//! lookthrough across pages) or a position, nor take a cookie to another
//! identity. Cookies do not outlive the process, as slapd's do not outlive
//! the connection.

use crate::ops::controls::Controls;
use ldap3_proto::proto::LdapSearchRequest;
use ldap3_proto::LdapResultCode;
use shards::{Error, Result};

/// 4: the cookie counts the entries sent before it, so the size limit
/// holds across the pages of one search (as slapd's), and those examined
/// without an index, so `limits.unindexed_lookthrough` does too; it ends
/// with its MAC.
const VERSION: u8 = 4;

/// Bytes before the position: version, fingerprint, sent, examined.
const HEAD: usize = 1 + 8 + 8 + 8;

/// Bytes of the MAC at the end of a cookie.
const MAC: usize = 8;

/// The MAC of a cookie's other bytes for requester `who`, by the DN's
/// normal form (a pool's connections may spell the bind DN differently).
fn mac(who: &str, body: &[u8]) -> [u8; MAC] {
    use sha2::{Digest, Sha256};
    static KEY: std::sync::OnceLock<[u8; 32]> = std::sync::OnceLock::new();
    let key = KEY.get_or_init(rand::random);
    let who = shards::dn::key_of(who).unwrap_or_else(|_| who.as_bytes().to_vec());
    let digest = Sha256::new().chain_update(key).chain_update(&who).chain_update([0]).chain_update(body).finalize();
    digest[..MAC].try_into().expect("MAC bytes")
}

/// Where the previous page stopped.
#[derive(Debug, Clone, PartialEq)]
pub enum Position {
    /// Nothing returned yet.
    Start,
    /// The base entry was returned; the stores come next.
    AfterBase,
    /// After `key` of store `store`'s `dn2id` range.
    Range { store: usize, after: Vec<u8> },
    /// After id `after` of store `store`'s index candidates.
    Index { store: usize, after: [u8; 8] },
    /// Sorted results: this many were returned.
    Offset(u64),
}

/// What a page has counted of its search so far: entries sent, and
/// entries examined without an index.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Counts {
    pub sent: u64,
    pub examined: u64,
}

/// A hash of what makes a search the same search (RFC 2696 §3): the
/// request, and the controls that decide which entries come in what
/// order and how they read (as slapd, which refuses a cookie when the
/// sort changes: its cookie names a position in one order).
fn fingerprint(req: &LdapSearchRequest, ctrls: &Controls) -> u64 {
    let text = format!(
        "{}\0{:?}\0{:?}\0{:?}\0{}\0{:?}\0{:?}\0{:?}\0{:?}\0{}",
        req.base,
        req.scope,
        req.filter,
        req.attrs,
        req.typesonly,
        req.aliases,
        ctrls.sort,
        ctrls.matched_values,
        ctrls.subentries,
        ctrls.manage_dsa_it,
    );
    shards::manifest::fnv1a64(text.as_bytes())
}

/// The cookie for `pos`, after `counts` of this search, for `who`.
pub fn encode(req: &LdapSearchRequest, ctrls: &Controls, who: &str, pos: &Position, counts: Counts) -> Vec<u8> {
    let mut out = vec![VERSION];
    out.extend_from_slice(&fingerprint(req, ctrls).to_be_bytes());
    out.extend_from_slice(&counts.sent.to_be_bytes());
    out.extend_from_slice(&counts.examined.to_be_bytes());
    match pos {
        Position::Start => out.push(b's'),
        Position::AfterBase => out.push(b'b'),
        Position::Range { store, after } => {
            out.push(b'r');
            out.extend_from_slice(&(*store as u16).to_be_bytes());
            out.extend_from_slice(after);
        }
        Position::Index { store, after } => {
            out.push(b'i');
            out.extend_from_slice(&(*store as u16).to_be_bytes());
            out.extend_from_slice(after);
        }
        Position::Offset(n) => {
            out.push(b'o');
            out.extend_from_slice(&n.to_be_bytes());
        }
    }
    let tag = mac(who, &out);
    out.extend_from_slice(&tag);
    out
}

/// The position a client's cookie names and what was counted before it;
/// an empty cookie starts a search. The cookie is the client's to keep
/// but not to change: its MAC covers the counts that hold the limits
/// across pages and the position.
pub fn decode(req: &LdapSearchRequest, ctrls: &Controls, who: &str, cookie: &[u8]) -> Result<(Position, Counts)> {
    if cookie.is_empty() {
        return Ok((Position::Start, Counts::default()));
    }
    // As slapd: a cookie that is not one of ours (forged, made for
    // another requester, or before a restart: slapd's are the
    // connection's) is a protocolError; one of ours for another search is
    // unwillingToPerform.
    let bad = || Error::new(LdapResultCode::ProtocolError, "paged results cookie is invalid");
    if cookie.len() < HEAD + 1 + MAC || cookie[0] != VERSION {
        return Err(bad());
    }
    let (cookie, tag) = cookie.split_at(cookie.len() - MAC);
    let differs = tag.iter().zip(mac(who, cookie)).fold(0u8, |acc, (a, b)| acc | (a ^ b));
    if differs != 0 {
        return Err(bad());
    }
    if cookie[1..9] != fingerprint(req, ctrls).to_be_bytes() {
        let why = "paged results cookie is invalid or old (it belongs to another search)";
        return Err(Error::new(LdapResultCode::UnwillingToPerform, why));
    }
    let count = |at: usize| u64::from_be_bytes(cookie[at..at + 8].try_into().expect("8 bytes"));
    let counts = Counts { sent: count(9), examined: count(17) };
    let (tag, rest) = (cookie[HEAD], &cookie[HEAD + 1..]);
    let store = || rest.get(..2).map(|s| u16::from_be_bytes([s[0], s[1]]) as usize).ok_or_else(bad);
    let pos = match tag {
        b's' => Position::Start,
        b'b' => Position::AfterBase,
        b'r' => Position::Range { store: store()?, after: rest[2..].to_vec() },
        b'i' => {
            Position::Index { store: store()?, after: rest.get(2..10).and_then(|b| b.try_into().ok()).ok_or_else(bad)? }
        }
        b'o' => Position::Offset(u64::from_be_bytes(rest.try_into().map_err(|_| bad())?)),
        _ => return Err(bad()),
    };
    Ok((pos, counts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ldap3_proto::proto::{LdapDerefAliases, LdapFilter, LdapSearchScope};

    fn req(filter: &str) -> LdapSearchRequest {
        LdapSearchRequest {
            base: "dc=x".into(),
            scope: LdapSearchScope::Subtree,
            aliases: LdapDerefAliases::Never,
            sizelimit: 0,
            timelimit: 0,
            typesonly: false,
            filter: LdapFilter::Present(filter.into()),
            attrs: vec![],
        }
    }

    #[test]
    fn cookies_round_trip_and_belong_to_their_search() {
        let (r, none) = (req("cn"), Controls::default());
        let counts = Counts { sent: 7, examined: 9 };
        for pos in [
            Position::Start,
            Position::AfterBase,
            Position::Range { store: 3, after: b"dc=x\0cn=y".to_vec() },
            Position::Index { store: 1, after: [0, 1, 2, 3, 4, 5, 6, 7] },
            Position::Offset(200),
        ] {
            assert_eq!(decode(&r, &none, "cn=u", &encode(&r, &none, "cn=u", &pos, counts)).unwrap(), (pos, counts));
        }
        let cookie = encode(&r, &none, "cn=u", &Position::Offset(5), Counts { sent: 5, examined: 0 });
        let code = |c: &[u8], r: &LdapSearchRequest, ctrls: &Controls| decode(r, ctrls, "cn=u", c).unwrap_err().code;
        assert_eq!(code(&cookie, &req("sn"), &none), LdapResultCode::UnwillingToPerform);
        let sorted = Controls { sort: Some(vec![]), ..Controls::default() };
        assert_eq!(code(&cookie, &r, &sorted), LdapResultCode::UnwillingToPerform);
        assert_eq!(code(&cookie[..12], &r, &none), LdapResultCode::ProtocolError);
        assert_eq!(code(b"garbage", &r, &none), LdapResultCode::ProtocolError);
        // Forged (fewer entries sent or examined, or another position), or
        // another requester's: not one of ours, as slapd's of another
        // connection.
        for at in [16, 24, 28] {
            let mut forged = cookie.clone();
            forged[at] ^= 1;
            assert_eq!(code(&forged, &r, &none), LdapResultCode::ProtocolError, "byte {at}");
        }
        assert_eq!(decode(&r, &none, "", &cookie).unwrap_err().code, LdapResultCode::ProtocolError);
        // The same requester in another spelling.
        assert_eq!(decode(&r, &none, "CN=U", &cookie).unwrap().1.sent, 5);
    }
}
