//! Sync cookies: OpenLDAP's text form, what a consumer's cookie says it
//! holds as far as this server holds it too (`Since`), and what a cookie
//! handed out may claim.

use super::*;

/// A cookie: the consumer's replica id and, per server id, a CSN.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cookie {
    pub rid: Option<u16>,
    pub csns: BTreeMap<u16, Csn>,
}

/// The longest cookie read (bytes): about 45 CSNs of 45 bytes.
pub const MAX_COOKIE: usize = 2048;

impl Cookie {
    /// Parses `rid=NNN[,sid=SSS],csn=<csn>[;<csn>…][,delcsn=…]`; `None` for
    /// anything else (then the whole content is sent, as RFC 4533 §3.1 allows).
    pub fn parse(bytes: &[u8]) -> Option<Cookie> {
        // A cookie is kept for the life of a persistent search, and its
        // CSNs come back in every cookie handed out: one longer than any
        // a provider writes (a CSN per server id of a replication
        // topology) is not read, and the refresh starts over.
        if bytes.len() > MAX_COOKIE {
            return None;
        }
        let text = std::str::from_utf8(bytes).ok()?;
        let mut cookie = Cookie::default();
        for field in text.split(',') {
            let (key, value) = field.split_once('=')?;
            match key.trim() {
                "rid" => cookie.rid = Some(value.parse().ok()?),
                "sid" => {
                    u16::from_str_radix(value, 16).ok()?;
                }
                "csn" => {
                    for c in value.split(';').filter(|c| !c.is_empty()) {
                        let csn = Csn::parse(c)?;
                        let slot = cookie.csns.entry(csn.sid).or_insert(csn);
                        *slot = (*slot).max(csn);
                    }
                }
                _ => {}
            }
        }
        Some(cookie)
    }

    /// The text form, as slapd composes it, with this server's id.
    pub fn compose(&self, sid: u16) -> Vec<u8> {
        let mut out = String::new();
        if let Some(rid) = self.rid {
            out.push_str(&format!("rid={rid:03},"));
        }
        out.push_str(&format!("sid={sid:03x}"));
        if !self.csns.is_empty() {
            let csns: Vec<String> = self.csns.values().map(Csn::to_string).collect();
            out.push_str(&format!(",csn={}", csns.join(";")));
        }
        out.into_bytes()
    }

    /// The CSNs, none past `stop` (`Csn::just_below` a record), whatever
    /// server id: every record at or before `stop`'s time and count, of
    /// any server, was read before the record it is below.
    pub(super) fn up_to(&self, stop: Csn) -> Cookie {
        let mut out = self.clone();
        for c in out.csns.values_mut() {
            *c = (*c).min(Csn { sid: c.sid, partition: u16::MAX, ..stop });
        }
        out
    }

    /// Takes a CSN into the vector.
    pub(super) fn saw(&mut self, csn: Csn) {
        let slot = self.csns.entry(csn.sid).or_insert(csn);
        *slot = (*slot).max(csn);
    }

    /// The cookie to hand out: the CSNs seen, but this server's own no
    /// higher than `cap` and, on a server of a mirror pair (`peers`), each
    /// peer's no higher than what it settled here (none before it says);
    /// never lower than in `before` (the cookie last handed out, whose
    /// claim still holds).
    pub(super) fn capped(&self, own: u16, cap: Csn, before: &Cookie, peer: Option<PeerClaim>) -> Cookie {
        let mut out = self.clone();
        let sids: std::collections::BTreeSet<u16> = self.csns.keys().chain(before.csns.keys()).copied().collect();
        for sid in sids {
            let limit = match (sid == own, peer) {
                (true, _) => Some(cap),
                (false, Some(PeerClaim::Unknown)) => None,
                (false, Some(PeerClaim::Peer { sid: p, upto, .. })) if p == sid => upto,
                // Not the peer's (imported CSNs): static, claimed as seen.
                (false, _) => continue,
            };
            let seen = self.csns.get(&sid).copied();
            match seen.zip(limit).map(|(c, l)| c.min(l)).max(before.csns.get(&sid).copied()) {
                Some(c) => out.csns.insert(sid, c),
                None => out.csns.remove(&sid),
            };
        }
        out
    }

    /// Claims the peer up to what it settled here, though no entry showed
    /// its server id (without it, every entry a change of the peer reached
    /// would count as changed in each refresh, see `Since`): after a read
    /// that reached every record of the peer up to it, none past `stop`
    /// (where a persist round stopped, as `up_to`). Not a quiet peer's:
    /// no change of it is here to claim, and a consumer keeps a cookie's
    /// CSNs as its contextCSN, which would show one no server shows.
    pub(super) fn claiming_peer(mut self, peer: Option<PeerClaim>, stop: Option<Csn>) -> Cookie {
        if let Some(PeerClaim::Peer { sid, upto: Some(upto), quiet: false }) = peer {
            let claim = stop.map_or(upto, |s| upto.min(Csn { sid, partition: u16::MAX, ..s }));
            self.csns.entry(sid).or_insert(claim);
        }
        self
    }
}

/// What a consumer's cookie says it holds, as far as this server holds
/// it too: the cookie's CSNs, on a server of a mirror pair with the
/// peer's no higher than what the peer settled here (a cookie the peer
/// handed out may claim changes still on their way), and none of the
/// peer's while it has not said what (`PeerClaim::Unknown`).
pub(super) struct Since {
    pub(super) csns: BTreeMap<u16, Csn>,
    /// On a server of a mirror pair, a change of the peer that arrives
    /// after a later change to the same entry here leaves its `entryCSN`
    /// (the newest stamp) as it was, so the entry's state is read for its
    /// stamps.
    pub(super) mirrored: bool,
    /// Except below this: the lower of the cookie's CSNs for the two
    /// servers once it names both, which claims every change of either up
    /// to it.
    pub(super) low: Option<Csn>,
}

impl Since {
    pub(super) fn new(given: &Cookie, own: u16, peers: Peers) -> Since {
        let mut csns = given.csns.clone();
        let names = |sid: u16| given.csns.contains_key(&sid);
        let mut low = None;
        match peers {
            Some(PeerClaim::Peer { sid, upto, quiet }) => {
                match (csns.get(&sid).copied(), upto) {
                    (Some(c), Some(u)) => csns.insert(sid, c.min(u)),
                    _ => csns.remove(&sid),
                };
                // Other server ids' stamps (imported data's) are static.
                low = csns.get(&sid).zip(csns.get(&own)).map(|(p, o)| *p.min(o));
                // A peer with no change here has no stamp and no tombstone
                // a cookie without it must name: its own CSN bounds what it
                // holds (none of the peer's is claimed: any that comes is
                // newer). One that names the peer came from elsewhere (the
                // peer's changes may not be here yet): as before.
                if quiet && !names(sid) {
                    low = csns.get(&own).copied();
                }
            }
            Some(PeerClaim::Unknown) => csns.retain(|sid, _| *sid == own),
            None => {}
        }
        Since { csns, mirrored: peers.is_some(), low }
    }

    /// Whether the cookie lacks this change.
    pub(super) fn newer(&self, csn: Csn) -> bool {
        self.csns.get(&csn.sid).is_none_or(|c| csn > *c)
    }

    /// Whether the cookie names every server that makes changes here, so
    /// that the delete phase can tell what is gone since it.
    pub(super) fn complete(&self) -> bool {
        !self.mirrored || self.low.is_some()
    }

    /// Whether an entry with this `entryCSN` changed after the cookie;
    /// `state` reads its replicated state (`None` where it has none; one
    /// that cannot be read counts as changed). The stamps of a state read
    /// go into `seen`, so that the next cookie claims them (as far as it
    /// may) and the entry is not sent again.
    pub(super) fn changed(
        &self,
        csn: Option<Csn>,
        state: impl FnOnce() -> Result<Option<EntryState>>,
        seen: &mut Cookie,
    ) -> bool {
        let Some(csn) = csn else { return true };
        let newer = self.newer(csn);
        if !self.mirrored || !newer && self.low.is_some_and(|low| csn <= low) {
            return newer;
        }
        match state() {
            Ok(Some(state)) => state.csns().fold(newer, |changed, c| {
                seen.saw(c);
                changed || self.newer(c)
            }),
            Ok(None) => newer,
            Err(_) => true,
        }
    }
}

/// The highest CSN of server `own` a cookie may claim: below the lowest
/// commit floor (`floor_us`, read before the changelog) and below `held`,
/// the first record held back.
pub(super) fn claimable(own: u16, floor_us: u64, held: Option<Csn>) -> Csn {
    let floor = Csn::top_of(floor_us, own);
    held.map_or(floor, |h| floor.min(Csn { sid: own, ..h }.just_below()))
}

/// The cookie a refresh starts from, as this server holds it (`Since`):
/// what a cookie handed out after it claims at least.
pub(super) fn before(rid: Option<u16>, since: Option<&Since>) -> Cookie {
    Cookie { rid, csns: since.map(|s| s.csns.clone()).unwrap_or_default() }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cookie naming thousands of server ids (168 KB from an anonymous
    /// client, kept by each of its persistent searches and echoed in
    /// every cookie handed out: 2.1 GB for 3,000 of them) is not read.
    #[test]
    fn a_cookie_longer_than_any_provider_writes_is_not_read() {
        let csns: Vec<String> =
            (1..4096).map(|sid| format!("20261201003440.153276Z#000000#{sid:03x}#000000")).collect();
        assert_eq!(Cookie::parse(format!("rid=001,csn={}", csns.join(";")).as_bytes()), None);
        let few = format!("rid=001,csn={}", csns[..40].join(";"));
        assert_eq!(Cookie::parse(few.as_bytes()).map(|c| c.csns.len()), Some(40));
    }

    #[test]
    fn cookies_parse_and_compose_as_slapd_writes_them() {
        let text =
            "rid=001,sid=002,csn=20261201003440.153276Z#000000#001#000067;20261201003441.000001Z#000002#002#000000";
        let c = Cookie::parse(text.as_bytes()).unwrap();
        assert_eq!(c.rid, Some(1));
        assert_eq!(c.csns.len(), 2);
        assert_eq!(c.csns[&2].to_string(), "20261201003441.000001Z#000002#002#000000");
        assert_eq!(String::from_utf8(c.compose(2)).unwrap(), text);
        // A consumer's first cookie holds its rid only.
        let first = Cookie::parse(b"rid=123").unwrap();
        assert_eq!((first.rid, first.csns.len()), (Some(123), 0));
        assert_eq!(first.compose(1), b"rid=123,sid=001");
        for bad in ["rid=x", "csn=garbage", "nonsense"] {
            assert_eq!(Cookie::parse(bad.as_bytes()), None, "{bad}");
        }
    }

    #[test]
    fn entries_count_as_changed_by_every_stamp_the_cookie_lacks() {
        let csn = |t: u64, sid: u16| Csn { phys_us: t, logical: 0, sid, partition: 0 };
        let mut c = Cookie::default();
        c.saw(csn(100, 1));
        c.saw(csn(90, 2));
        let no_state = || Ok(None);
        // A lone provider: entryCSN alone, exactly.
        let lone = Since::new(&c, 1, None);
        let mut seen = Cookie::default();
        assert!(!lone.changed(Some(csn(100, 1)), no_state, &mut seen));
        assert!(lone.changed(Some(csn(101, 1)), no_state, &mut seen));
        assert!(lone.changed(Some(csn(1, 3)), no_state, &mut seen), "another server's, unknown to the cookie");
        assert!(lone.changed(None, no_state, &mut seen));
        // One of a pair whose peer (2) settled up to 95: below the
        // cookie's lowest CSN nothing is read; above it, every stamp counts.
        let pair = Since::new(&c, 1, Some(PeerClaim::Peer { sid: 2, upto: Some(csn(95, 2)), quiet: false }));
        assert!(pair.complete());
        let unread = || -> Result<Option<EntryState>> { panic!("read below the cookie") };
        assert!(!pair.changed(Some(csn(90, 1)), unread, &mut seen));
        let mut state =
            EntryState { created: csn(10, 1), dn: Some(("uid=x".into(), csn(100, 1))), ..EntryState::default() };
        assert!(!pair.changed(Some(csn(100, 1)), || Ok(Some(state.clone())), &mut seen));
        state.deleted = Some(csn(93, 2));
        assert!(pair.changed(Some(csn(100, 1)), || Ok(Some(state.clone())), &mut seen), "a late stamp of the peer");
        // Its stamps are seen: the next cookie claims them.
        assert_eq!(seen.csns[&2], csn(93, 2));
        let broken = || Err(Error::other("corrupt"));
        assert!(pair.changed(Some(csn(100, 1)), broken, &mut seen), "an unreadable state is sent again");
        // A cookie the peer handed out claims of it only what it settled here.
        let mut theirs = c.clone();
        theirs.saw(csn(99, 2));
        let clamped = Since::new(&theirs, 1, Some(PeerClaim::Peer { sid: 2, upto: Some(csn(95, 2)), quiet: false }));
        assert!(clamped.newer(csn(96, 2)));
        // A peer that has said nothing yet: none of its stamps is claimed,
        // and the delete phase cannot tell what is gone.
        let unknown = Since::new(&theirs, 1, Some(PeerClaim::Unknown));
        assert!(unknown.newer(csn(1, 2)) && !unknown.complete());
        let silent = Since::new(&theirs, 1, Some(PeerClaim::Peer { sid: 2, upto: None, quiet: false }));
        assert!(silent.newer(csn(1, 2)) && !silent.complete());
        // A quiet peer (no change of it here): a cookie without it is
        // complete, and none of its stamps counts as claimed.
        let mut own_only = Cookie::default();
        own_only.saw(csn(100, 1));
        for upto in [None, Some(csn(95, 2))] {
            let quiet = Since::new(&own_only, 1, Some(PeerClaim::Peer { sid: 2, upto, quiet: true }));
            assert!(quiet.complete() && quiet.newer(csn(1, 2)) && !quiet.newer(csn(100, 1)));
        }
        // A cookie that names the peer came from elsewhere (the peer's own,
        // say): its changes may not be here yet, so it is not complete
        // before the peer settles them here.
        let mut from_peer = own_only.clone();
        from_peer.saw(csn(120, 2));
        let quiet = Since::new(&from_peer, 1, Some(PeerClaim::Peer { sid: 2, upto: None, quiet: true }));
        assert!(!quiet.complete());
        // Nor is a quiet peer claimed in a cookie handed out.
        let claim = |quiet| Some(PeerClaim::Peer { sid: 2, upto: Some(csn(95, 2)), quiet });
        assert!(own_only.clone().claiming_peer(claim(false), None).csns.contains_key(&2));
        assert_eq!(own_only.clone().claiming_peer(claim(true), None), own_only);
    }

    #[test]
    fn a_handed_out_cookie_claims_nothing_above_the_floor_or_a_held_record() {
        let csn = |t: u64, l: u32| Csn { phys_us: t, logical: l, sid: 1, partition: 3 };
        let mut seen = Cookie::default();
        seen.saw(csn(500, 0));
        let none = Cookie::default();
        // The floor (300) is below what was seen: the cookie stops there.
        let c = seen.capped(1, claimable(1, 300, None), &none, None);
        assert_eq!(c.csns[&1].phys_us, 300);
        // A held record at 200.4 caps it just below.
        let c = seen.capped(1, claimable(1, 300, Some(csn(200, 4))), &none, None);
        assert!(c.csns[&1] < csn(200, 4) && c.csns[&1] > csn(200, 3));
        // Never below what was handed out before, never above what was seen.
        let before = seen.capped(1, claimable(1, 400, None), &none, None);
        assert_eq!(seen.capped(1, claimable(1, 0, None), &before, None).csns[&1], before.csns[&1]);
        assert_eq!(seen.capped(1, claimable(1, 900, None), &none, None).csns[&1], csn(500, 0));
    }

    #[test]
    fn of_a_mirror_peer_a_cookie_claims_only_what_it_settled_and_imported_csns_as_seen() {
        let at = |t: u64, sid: u16| Csn { phys_us: t, logical: 0, sid, partition: 0 };
        let mut seen = Cookie::default();
        for c in [at(500, 1), at(500, 2), at(100, 7)] {
            seen.saw(c);
        }
        let (none, own) = (Cookie::default(), claimable(1, 900, None));
        let peer = |upto| Some(PeerClaim::Peer { sid: 2, upto, quiet: false });
        let c = seen.capped(1, own, &none, peer(Some(at(300, 2))));
        assert_eq!((c.csns[&2], c.csns[&7]), (at(300, 2), at(100, 7)), "the peer's capped, an imported one not");
        let c = seen.capped(1, own, &none, peer(None));
        assert!(!c.csns.contains_key(&2), "nothing settled yet: nothing claimed");
        // Before the peer's hello no other server id moves past `before`.
        let mut before = Cookie::default();
        before.saw(at(50, 7));
        let c = seen.capped(1, own, &before, Some(PeerClaim::Unknown));
        assert_eq!((c.csns.get(&2), c.csns[&7], c.csns[&1]), (None, at(50, 7), at(500, 1)));
        // A round that stopped before a record claims nothing at or after it.
        let cut = seen.up_to(at(200, 5).just_below());
        assert!(cut.csns.values().all(|c| c.phys_us < 200 || c.sid == 7), "{cut:?}");
        assert_eq!(cut.csns[&7], at(100, 7));
    }
}
