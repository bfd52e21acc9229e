//! refreshAndPersist read as raw messages: what a persistent search hears, and how it ends.

use super::*;

/// A `newcookie` names no CSN of this server above a change it has not
/// sent yet: shard 1 pauses 300 ms between stamping and committing each
/// batch, so the other shard's later CSNs become visible first.
#[test]
fn no_new_cookie_claims_a_change_a_slower_shard_has_not_sent() {
    let s = Server::start_with_commit_delay(2, "[syncrepl]\nprovider = true\n", 1, 300);
    let mut r = Raw::connect(&s);
    persistent_search(&mut r, 1);
    slow_and_fast_adds(&s);
    no_cookie_claims_an_unsent_change(&mut r, &s, 52, "#001#");
}

#[test]
fn cancel_and_abandon_end_a_persistent_search() {
    use ldap3_proto::proto::{LdapExtendedRequest, LdapOp};
    let s = provider(1);
    let mut r = Raw::connect(&s);
    r.send(vec![LdapMsg::new(1, bind(ROOT_DN, ROOT_PW))]);
    assert!(
        matches!(r.recv_lenient().unwrap().op, LdapOp::BindResponse(ref b) if b.res.code == ldap3_proto::LdapResultCode::Success)
    );
    // A change while it persists arrives as an entry.
    persistent_search(&mut r, 2);
    assert_eq!(add_user(&mut s.admin(), "seen").rc, 0);
    let m = r.recv_lenient().unwrap();
    assert!(matches!(m.op, LdapOp::SearchResultEntry(ref e) if e.dn.starts_with("uid=seen,")), "{m:?}");
    // Cancel (RFC 3909): cancelRequestValue ::= SEQUENCE { cancelID 2 }.
    // A second Cancel of it while the first is under way is, as slapd's,
    // operationsError ("message ID already being cancelled").
    let cancel = LdapExtendedRequest { name: "1.3.6.1.1.8".into(), value: Some(vec![0x30, 0x03, 0x02, 0x01, 0x02]) };
    r.send(vec![
        LdapMsg::new(3, LdapOp::ExtendedRequest(cancel.clone())),
        LdapMsg::new(30, LdapOp::ExtendedRequest(cancel)),
    ]);
    let mut seen = std::collections::BTreeMap::new();
    while seen.len() < 3 {
        let m = r.recv_lenient().expect("closed");
        match (m.msgid, &m.op) {
            (2, LdapOp::SearchResultDone(res)) => seen.insert(2, res.code.clone()),
            (3 | 30, LdapOp::ExtendedResponse(res)) => seen.insert(m.msgid, res.res.code.clone()),
            (2, LdapOp::IntermediateResponse(_)) => None,
            other => panic!("unexpected {other:?}"),
        };
    }
    use ldap3_proto::LdapResultCode::{Canceled, OperationsError, Success};
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec![(2, Canceled), (3, Success), (30, OperationsError)]);
    // Abandon: the search ends without an answer; the connection goes on.
    persistent_search(&mut r, 4);
    r.send(vec![LdapMsg::new(5, LdapOp::AbandonRequest(4)), LdapMsg::new(6, whoami())]);
    loop {
        let m = r.recv_lenient().expect("closed");
        match (m.msgid, &m.op) {
            (6, LdapOp::ExtendedResponse(_)) => break,
            (4, LdapOp::SearchResultDone(_)) => panic!("an abandoned search is not answered"),
            _ => {}
        }
    }
    assert_eq!(add_user(&mut s.admin(), "unseen").rc, 0);
    r.send(vec![LdapMsg::new(7, whoami())]);
    let m = r.recv_lenient().unwrap();
    assert_eq!(m.msgid, 7, "{m:?}");
}

/// An anonymous refreshAndPersist must learn nothing of entries it may not
/// read: slapd's syncprov sends a change, or the delete of an entry that
/// left the content, only when the entry matched the search under the
/// searcher's rights before or after. Modify, rename and delete of a
/// hidden entry therefore reach it as nothing at all; a later refresh from
/// its cookie lists no hidden entry among the deleted.
#[test]
fn persist_and_refresh_say_nothing_of_hidden_entries() {
    use ldap3_proto::proto::LdapOp;
    let secret = format!("ou=secret,{SUFFIX}");
    let mut s = Server::start_with_config(
        1,
        &format!(
            "[syncrepl]\nprovider = true\n[access]\nrules = [\n  'to dn.subtree=\"{secret}\" by * none',\n  'to filter=(description=classified) by * none',\n  'to * by * read',\n]\n"
        ),
    );
    let mut root = s.admin();
    let ou = vec![("objectClass", ["organizationalUnit"].into()), ("ou", ["secret"].into())];
    assert_eq!(root.add(&secret, ou).unwrap().rc, 0);
    let device = |cn: &'static str| vec![("objectClass", ["device"].into()), ("cn", [cn].into())];
    assert_eq!(root.add(&format!("cn=hidden,{secret}"), device("hidden")).unwrap().rc, 0);
    // Hidden by a rule on its content, and one it may read.
    let classified =
        vec![("objectClass", ["device"].into()), ("cn", ["classified"].into()), ("description", ["classified"].into())];
    assert_eq!(root.add(&format!("cn=classified,{PEOPLE}"), classified).unwrap().rc, 0);
    assert_eq!(root.add(&format!("cn=visible,{PEOPLE}"), device("visible")).unwrap().rc, 0);
    let mut r = Raw::connect(&s);
    persistent_search(&mut r, 1);
    // Changes to the hidden entry, then a visible one to know they are past.
    let hidden = format!("cn=hidden,{secret}");
    let desc = Mod::Replace("description", ["changed"].into());
    assert_eq!(root.modify(&hidden, vec![desc]).unwrap().rc, 0);
    assert_eq!(root.modifydn(&hidden, "cn=hidden2", true, None).unwrap().rc, 0);
    assert_eq!(root.delete(&format!("cn=hidden2,{secret}")).unwrap().rc, 0);
    assert_eq!(root.delete(&format!("cn=classified,{PEOPLE}")).unwrap().rc, 0);
    assert_eq!(root.delete(&format!("cn=visible,{PEOPLE}")).unwrap().rc, 0);
    assert_eq!(root.add(&format!("cn=marker,{PEOPLE}"), device("marker")).unwrap().rc, 0);
    // Until the visible delete and the marker have come, then one more
    // round (a second marker) for records a pending rename held back.
    let watch = |r: &mut Raw, until: &str, also: Option<&str>| {
        let (mut seen, mut also_seen) = (false, also.is_none());
        while !(seen && also_seen) {
            let m = r.recv_lenient().expect("an announcement never came");
            if let LdapOp::SearchResultEntry(ref e) = m.op {
                let dn = e.dn.to_lowercase();
                assert!(!dn.contains("ou=secret") && !dn.contains("classified"), "a hidden entry was announced: {m:?}");
                seen |= dn.starts_with(until);
                also_seen |= also.is_some_and(|a| dn.starts_with(a));
            }
        }
    };
    watch(&mut r, "cn=marker,", Some("cn=visible,"));
    assert_eq!(root.add(&format!("cn=marker2,{PEOPLE}"), device("marker2")).unwrap().rc, 0);
    watch(&mut r, "cn=marker2,", None);
    // A refresh from a cookie lists what was deleted since only when the
    // changelog reaches 5 s before it: restart with the clock 10 s ahead.
    assert_eq!(root.add(&format!("cn=hidden4,{secret}"), device("hidden4")).unwrap().rc, 0);
    drop((root, r));
    s.env.push(("COREDIR_TEST_CLOCK_OFFSET_S".into(), "10".into()));
    s.restart();
    let mut root = s.admin();
    // A change at the new time, for the cookie to carry it.
    assert_eq!(root.modify(PEOPLE, vec![Mod::Replace("description", ["now"].into())]).unwrap().rc, 0);
    let (_, cookie) = refresh_only(&s, None);
    // After that cookie: one hidden entry changed, one added and deleted.
    let uuid_of = |root: &mut LdapConn, dn: &str| {
        get_entry(root, dn, vec!["entryUUID"]).unwrap().attrs["entryUUID"][0].parse::<uuid::Uuid>().unwrap()
    };
    let hidden4 = format!("cn=hidden4,{secret}");
    assert_eq!(root.modify(&hidden4, vec![Mod::Replace("description", ["x"].into())]).unwrap().rc, 0);
    assert_eq!(root.add(&format!("cn=hidden3,{secret}"), device("hidden3")).unwrap().rc, 0);
    let uuids = [uuid_of(&mut root, &hidden4), uuid_of(&mut root, &format!("cn=hidden3,{secret}"))];
    assert_eq!(root.delete(&format!("cn=hidden3,{secret}")).unwrap().rc, 0);
    // A visible delete, to see that the refresh runs its delete phase.
    let marker = uuid_of(&mut root, &format!("cn=marker,{PEOPLE}"));
    assert_eq!(root.delete(&format!("cn=marker,{PEOPLE}")).unwrap().rc, 0);
    let mut deleted = Vec::new();
    assert!(cookie.is_some());
    for m in refresh_only(&s, cookie).0 {
        if let LdapOp::SearchResultEntry(ref e) = m.op {
            assert!(!e.dn.to_lowercase().contains("ou=secret"), "a hidden entry was listed: {m:?}")
        }
        deleted.extend(deleted_uuids(&m));
    }
    assert!(deleted.contains(&marker), "no delete phase: {deleted:?}");
    assert!(!deleted.iter().any(|u| uuids.contains(u)), "a hidden entry was listed as deleted: {deleted:?}");
}

/// A persistent sync search whose filter names a member of a group past
/// `limits.max_filter_tests` hears of the group's change (the index decides
/// the member item, as in the refresh) instead of ending with 11.
#[test]
fn a_persistent_search_on_a_big_group_member_hears_the_groups_change() {
    use ldap3_proto::proto::{LdapFilter, LdapOp, SyncRequestMode};
    if engine() != "lmdb" {
        return; // sled has no snapshot for the index to decide in
    }
    let s = Server::start_with_config(1, "[syncrepl]\nprovider = true\n[limits]\nmax_filter_tests = 1000\n");
    let mut admin = s.admin();
    let group = big_group(&mut admin, "all", 5_000).to_lowercase();
    let mut msg = sync_search(1, SyncRequestMode::RefreshAndPersist, None);
    if let LdapOp::SearchRequest(req) = &mut msg.op {
        req.filter = LdapFilter::And(vec![
            LdapFilter::Equality("objectClass".into(), "groupOfNames".into()),
            LdapFilter::Equality("member".into(), format!("uid=m4999,{PEOPLE}")),
        ]);
        req.attrs = vec!["1.1".into()];
    }
    let mut r = Raw::connect(&s);
    r.send(vec![msg]);
    let mut refreshed = 0;
    loop {
        match r.recv_lenient().expect("closed during the refresh").op {
            LdapOp::SearchResultEntry(_) => refreshed += 1,
            LdapOp::IntermediateResponse(_) => break,
            other => panic!("the refresh ended: {other:?}"),
        }
    }
    assert_eq!(refreshed, 1);
    let change = ldap3::Mod::Replace("description", ["changed"].into());
    assert_eq!(admin.modify(&group, vec![change]).unwrap().rc, 0);
    match r.recv_lenient().expect("closed instead of announcing").op {
        LdapOp::SearchResultEntry(e) => assert_eq!(e.dn.to_lowercase(), group),
        other => panic!("not announced: {other:?}"),
    }
}

/// A subtree moved back and forth between two parents while a persistent
/// search runs: every entry of it is announced at its new DN after each
/// move. Before, an entry moved back into a partition it had been in found
/// there the state its earlier stay left (pointing the way it came), the
/// lookup went back and forth until it gave up, and the change was passed
/// over for good: the consumer kept entries at DNs they had left.
#[test]
fn a_subtree_moved_back_and_forth_is_announced_whole_each_time() {
    use ldap3_proto::proto::LdapOp;
    let s = provider(2);
    let mut root = s.admin();
    let top = format!("ou=pp,{PEOPLE}");
    let ou = vec![("objectClass", ["organizationalUnit"].into()), ("ou", ["pp"].into())];
    assert_eq!(root.add(&top, ou).unwrap().rc, 0);
    for i in 0..50 {
        let cn = format!("k{i}");
        let attrs = vec![("objectClass", ["device"].into()), ("cn", [cn.as_str()].into())];
        assert_eq!(root.add(&format!("cn={cn},{top}"), attrs).unwrap().rc, 0);
    }
    let mut r = Raw::connect(&s);
    persistent_search(&mut r, 1);
    let groups = format!("ou=groups,{SUFFIX}");
    for (round, (from, to)) in
        [(PEOPLE, &groups[..]), (&groups[..], PEOPLE), (PEOPLE, &groups[..]), (&groups[..], PEOPLE)]
            .into_iter()
            .enumerate()
    {
        let res = root.modifydn(&format!("ou=pp,{from}"), "ou=pp", true, Some(to)).unwrap();
        assert_eq!(res.rc, 0, "{res:?}");
        let under = format!(",ou=pp,{to}").to_lowercase();
        let mut announced = BTreeSet::new();
        while announced.len() < 50 {
            let m = r.recv_lenient().unwrap_or_else(|| panic!("move {round}: {} of 50 announced", announced.len()));
            if let LdapOp::SearchResultEntry(e) = m.op {
                if e.dn.to_lowercase().ends_with(&under) {
                    announced.insert(e.dn.to_lowercase());
                }
            }
        }
    }
}

/// A Bind abandons the searches still running on its connection, as
/// slapd does (RFC 4511 §4.2.1: they must complete or be abandoned before
/// it is processed): a persistent search must not go on streaming under
/// the rights of the identity the connection had before.
#[test]
fn a_bind_abandons_the_persistent_searches_of_its_connection() {
    use ldap3_proto::proto::LdapOp;
    let s = provider(1);
    let mut root = s.admin();
    let mut r = Raw::connect(&s);
    persistent_search(&mut r, 1);
    r.send(vec![LdapMsg::new(2, bind(ROOT_DN, ROOT_PW))]);
    loop {
        let m = r.recv_lenient().expect("closed");
        if let LdapOp::BindResponse(_) = m.op {
            break;
        }
    }
    // A change after the bind: the abandoned search announces nothing.
    let device = vec![("objectClass", ["device"].into()), ("cn", ["after-bind"].into())];
    assert_eq!(root.add(&format!("cn=after-bind,{PEOPLE}"), device).unwrap().rc, 0);
    r.send(vec![LdapMsg::new(3, whoami())]);
    loop {
        let m = r.recv_lenient().expect("closed");
        match (m.msgid, m.op) {
            (3, LdapOp::ExtendedResponse(_)) => break,
            (1, op) => panic!("the search went on after the bind: {op:?}"),
            other => panic!("unexpected {other:?}"),
        }
    }
    let running = || {
        ctl_json(&s, &["connections"])["connections"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["running"].as_u64().unwrap())
            .sum::<u64>()
    };
    wait_for("the search to end", || running() == 0);
}

/// Idle persistent searches cost nothing: each sleeps until a commit, an
/// Abandon or its client's going wakes it. They used to read the changelog
/// every second and wake every 100 ms to look at their Abandon flag, so
/// 5,000 of them kept a core of an idle server busy.
#[test]
fn idle_persistent_searches_sleep_until_a_change_or_an_abandon() {
    use ldap3_proto::proto::LdapOp;
    let s = provider(1);
    let rounds = || -> u64 {
        let text = ctl(&s, &["metrics"]).1;
        let lines = text.lines().filter(|l| l.starts_with("coredir_syncrepl_rounds_total"));
        lines.map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap() as u64).sum()
    };
    let running = || -> u64 {
        let list = ctl_json(&s, &["connections"])["connections"].as_array().unwrap().clone();
        list.iter().map(|c| c["running"].as_u64().unwrap()).sum()
    };
    let mut raws: Vec<Raw> = (0..4).map(|_| Raw::connect(&s)).collect();
    for r in &mut raws {
        persistent_search(r, 1);
    }
    // Once the rounds after the refresh are done, none while idle.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let settled = rounds();
    std::thread::sleep(std::time::Duration::from_millis(2500));
    assert_eq!(rounds(), settled, "rounds made by idle persistent searches");
    // A change wakes every one of them.
    assert_eq!(add_user(&mut s.admin(), "woken").rc, 0);
    for r in &mut raws {
        let m = r.recv_lenient().expect("closed");
        assert!(matches!(m.op, LdapOp::SearchResultEntry(ref e) if e.dn.starts_with("uid=woken,")), "{m:?}");
    }
    assert!(rounds() > settled);
    // An Abandon ends one at once, and a client's going another, with no
    // commit to wake them; two under one message ID end together.
    persistent_search(&mut raws[2], 1);
    wait_for("five searches running", || running() == 5);
    raws[0].send(vec![LdapMsg::new(2, LdapOp::AbandonRequest(1))]);
    wait_for("the abandoned search to end", || running() == 4);
    raws[2].send(vec![LdapMsg::new(2, LdapOp::AbandonRequest(1))]);
    wait_for("both searches under the abandoned ID to end", || running() == 2);
    drop(raws.remove(1));
    wait_for("the search of the closed connection to end", || running() == 1);
}
