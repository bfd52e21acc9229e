//! Losses and their repair: kill -9, restores from backup, trimmed and capped changelogs, stores edited behind the servers' backs, and syncrepl cookies across the pair.

use super::*;

#[test]
fn kill_9_during_a_stream_of_writes_loses_nothing_acknowledged() {
    let (mut a, b) = pair(2);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Writers on both sides record what was acknowledged until A dies.
    let writers: Vec<_> = [(a.url(), "ka"), (b.url(), "kb")]
        .into_iter()
        .map(|(url, side)| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                let Ok(mut c) = LdapConn::new(&url) else { return acked };
                if c.simple_bind(ROOT_DN, ROOT_PW).is_err() {
                    return acked;
                }
                for i in 0.. {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) && side == "kb" {
                        break;
                    }
                    let uid = format!("{side}{i}");
                    match c.add(
                        &format!("uid={uid},{PEOPLE}"),
                        vec![("objectClass", ["account"].into()), ("uid", [uid.as_str()].into())],
                    ) {
                        Ok(r) if r.rc == 0 => acked.push(uid),
                        _ => break,
                    }
                }
                acked
            })
        })
        .collect();
    let mut c = b.admin();
    wait_for("traffic both ways", || search_dns(&mut c, PEOPLE, Scope::OneLevel, "(uid=ka*)").len() >= 20);
    a.kill9();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let acked: Vec<String> = writers.into_iter().flat_map(|w| w.join().unwrap()).collect();
    a.launch();
    converged(&a, &b);
    let present: std::collections::BTreeSet<String> = search_dns(&mut a.admin(), PEOPLE, Scope::OneLevel, "(uid=k*)")
        .into_iter()
        .map(|dn| dn.trim_start_matches("uid=").split(',').next().unwrap().to_string())
        .collect();
    for uid in &acked {
        assert!(present.contains(uid), "acknowledged {uid} is missing");
    }
    // An add that was never acknowledged may be there, but only whole.
    for s in [&a, &b] {
        let mut c = s.admin();
        let n = present.len().to_string();
        wait_for("the count", || attr(&mut c, PEOPLE, "numSubordinates") == Some(vec![n.clone()]));
    }
}

#[test]
fn a_server_restored_from_an_old_backup_gets_back_what_it_lost() {
    let (mut a, b) = pair(1);
    let has = |s: &Server, uid: &str| get_entry(&mut s.admin(), &format!("uid={uid},{PEOPLE}"), vec!["uid"]).is_some();
    for i in 0..5 {
        assert_eq!(add_user(&mut a.admin(), &format!("r{i}")).rc, 0);
    }
    let backup = a.dir.path().join("old-backup");
    let (code, out, err) = ctl(&a, &["backup", backup.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    for i in 5..10 {
        assert_eq!(add_user(&mut a.admin(), &format!("r{i}")).rc, 0);
    }
    wait_for("B has everything", || has(&b, "r9"));
    // A's disk is lost: it comes back from the older backup.
    a.kill9();
    std::fs::remove_dir_all(a.data()).unwrap();
    restore_into(&a, &backup);
    a.launch();
    assert!(!has(&a, "r9") || has(&b, "r9"));
    // New changes on A are not mistaken for ones B has seen...
    assert_eq!(add_user(&mut a.admin(), "r10").rc, 0);
    wait_for("A's new change on B", || has(&b, "r10"));
    // ...and B hands back what the backup missed.
    converged(&a, &b);
    assert!(has(&a, "r7"));
    assert_eq!(search_dns(&mut a.admin(), PEOPLE, Scope::OneLevel, "(uid=r*)").len(), 11);
}

#[test]
fn the_changelog_is_trimmed_by_age_but_never_past_what_the_peer_holds() {
    let (pa, pb) = (free_port(), free_port());
    let a = Server::start_with_config(1, &short_changelog(mirror_conf(1, pa, pb)));
    let mut b = seeded_from(&a, &short_changelog(mirror_conf(2, pb, pa)), &[]);
    let records = |s: &Server| replication(s)["changelog_records"].as_u64().unwrap();
    assert_eq!(add_user(&mut a.admin(), "t1").rc, 0);
    assert_eq!(a.admin().delete(&format!("uid=t1,{PEOPLE}")).unwrap().rc, 0);
    let newest = context_csn(&a);
    assert_eq!(newest.len(), 1, "{newest:?}");
    wait_for("both trimmed", || records(&a) == 0 && records(&b) == 0);
    // contextCSN stays the newest change's, as slapd keeps it, on both:
    // monitoring compares it across servers.
    assert_eq!(context_csn(&a), newest);
    assert_eq!(context_csn(&b), newest);
    // A backup keeps it: a server restored from A's shows the same.
    let restored = seeded_from(&a, "[syncrepl]\nprovider = true\n", &[]);
    assert_eq!(context_csn(&restored), newest);
    drop(restored);
    // With B away, A keeps what B has not acknowledged, however old.
    b.kill9();
    assert_eq!(add_user(&mut a.admin(), "t2").rc, 0);
    std::thread::sleep(std::time::Duration::from_millis(3000));
    assert!(records(&a) >= 1, "A trimmed what B never had");
    b.launch();
    wait_for("t2 on B", || get_entry(&mut b.admin(), &format!("uid=t2,{PEOPLE}"), vec!["uid"]).is_some());
    wait_for("trimmed again", || records(&a) == 0);
    converged(&a, &b);
}

#[test]
fn a_peer_behind_a_capped_changelog_is_resynced_by_merging() {
    let (pa, pb) = (free_port(), free_port());
    let capped = |conf: String| conf + "changelog_max_records = 40\ntrim_interval_s = 1\n";
    let mut a = Server::start_with_config(2, &capped(mirror_conf(1, pa, pb)));
    let mut b = seeded_from(&a, &capped(mirror_conf(2, pb, pa)), &[]);
    let user = |uid: &str| format!("uid={uid},{PEOPLE}");
    for i in 0..10 {
        assert_eq!(add_user(&mut a.admin(), &format!("early{i}")).rc, 0);
    }
    let rs = format!("ou=rs,{SUFFIX}");
    let ou = vec![("objectClass", ["organizationalUnit"].into()), ("ou", ["rs"].into())];
    assert_eq!(a.admin().add(&rs, ou).unwrap().rc, 0);
    // All of them: records of different partitions commit in any order.
    wait_for("the users on B", || search_dns(&mut b.admin(), PEOPLE, Scope::OneLevel, "(uid=early*)").len() == 10);
    wait_for("ou=rs on B", || get_entry(&mut b.admin(), &rs, vec!["ou"]).is_some());
    // Seen is not yet durable on sled (a commit shows before its flush):
    // B acknowledges only what it has flushed, so A's backlog says when
    // the kill below cannot lose ou=rs on B.
    wait_for("B to acknowledge everything", || replication(&a)["backlog"] == 0);
    // B away while A writes past the cap: adds, deletes, a modify and a
    // rename of entries B holds; A deletes ou=rs, below which B will add.
    b.stop();
    assert_eq!(a.admin().delete(&rs).unwrap().rc, 0);
    let mut ca = a.admin();
    for i in 0..60 {
        assert_eq!(add_user(&mut ca, &format!("late{i}")).rc, 0);
    }
    for i in 0..3 {
        assert_eq!(ca.delete(&user(&format!("early{i}"))).unwrap().rc, 0);
    }
    assert_eq!(ca.modify(&user("early5"), vec![Mod::Replace("description", ["from a"].into())]).unwrap().rc, 0);
    assert_eq!(ca.modifydn(&user("early6"), "uid=early6x", true, None).unwrap().rc, 0);
    wait_for("A marking B lagging", || replication(&a)["outbound"] == "lagging");
    assert!(replication(&a)["forced_trims"].as_u64().unwrap() > 0);
    // B's own changes while A is away survive the resync: it merges.
    a.stop();
    b.launch();
    assert_eq!(add_user(&mut b.admin(), "bonly").rc, 0);
    let desc = vec![Mod::Replace("description", ["from b"].into())];
    assert_eq!(b.admin().modify(&user("early7"), desc).unwrap().rc, 0);
    assert_eq!(b.admin().add(&format!("cn=kid,{rs}"), person_attrs("kid")).unwrap().rc, 0);
    a.launch();
    // contextCSN included: a partition resynced from states brings no
    // records, but the newest CSNs they cover (stop 37; before, B's value
    // for A lagged A's own, seen in CI at stop 30).
    converged(&a, &b);
    // The delete came to B in the resync: ou=rs stays as glue on both.
    for s in [&a, &b] {
        let glue = get_entry_managed(&mut s.admin(), &rs, vec!["objectClass"])
            .unwrap_or_else(|| panic!("no {rs} on {}", s.url()));
        assert!(get_entry(&mut s.admin(), &rs, vec!["objectClass"]).is_none(), "glue is hidden without ManageDsaIT");
        assert!(glue.attrs["objectClass"].iter().any(|o| o == "glue"), "{glue:?}");
    }
    let mut cb = b.admin();
    assert_eq!(search_dns(&mut cb, PEOPLE, Scope::OneLevel, "(uid=late*)").len(), 60);
    assert!(get_entry(&mut cb, &user("early0"), vec!["uid"]).is_none());
    assert!(get_entry(&mut cb, &user("early6"), vec!["uid"]).is_none());
    assert_eq!(attr(&mut cb, &user("early5"), "description"), Some(vec!["from a".into()]));
    assert_eq!(attr(&mut cb, &user("early6x"), "uid"), Some(vec!["early6x".into()]));
    assert_eq!(attr(&mut a.admin(), &user("early7"), "description"), Some(vec!["from b".into()]));
    assert!(get_entry(&mut a.admin(), &user("bonly"), vec!["uid"]).is_some());
    assert!(replication(&a)["partitions_resynced"].as_u64().unwrap() > 0);
    for s in [&a, &b] {
        let mut c = s.admin();
        wait_for("the count", || attr(&mut c, PEOPLE, "numSubordinates") == Some(vec!["68".to_string()]));
    }
}

/// The anti-entropy check (issue 19, item 8): both sides compare partition
/// digests at equal replication positions; an entry rewritten in B's store
/// behind its back is found, reported and mended by the resync, after
/// which every partition agrees again.
#[test]
fn a_store_edited_behind_the_servers_back_is_found_and_mended() {
    let (pa, pb) = (free_port(), free_port());
    let a = Server::start_with_config(2, &mirror_conf(1, pa, pb));
    let mut b = seeded_from(&a, &mirror_conf(2, pb, pa), &[]);
    let mut ca = a.admin();
    for i in 0..12 {
        person(&mut ca, &format!("ae{i}"), "as added");
    }
    let dn = format!("uid=ae5,{PEOPLE}");
    converged(&a, &b);
    // Without a difference, every partition agrees and none is reported.
    let agreed = |s: &Server| replication(s)["partitions_verified"].as_u64().unwrap_or(0);
    wait_for("checks that agree on both sides", || agreed(&a) > 20 && agreed(&b) > 20);
    for s in [&a, &b] {
        assert_eq!(replication(s)["divergences"], 0, "{}", replication(s));
    }
    b.stop();
    tamper(&b, &dn, |e| {
        e.set("description", vec![b"tampered".to_vec()]);
        e.remove("sn");
    });
    b.launch();
    let mut cb = b.admin();
    assert_eq!(attr(&mut cb, &dn, "description"), Some(vec!["tampered".to_string()]), "the edit took");
    wait_for("the divergence found and mended", || {
        attr(&mut cb, &dn, "description") == Some(vec!["as added".to_string()])
            && attr(&mut cb, &dn, "sn") == Some(vec!["Twin".to_string()])
    });
    let found = |s: &Server| replication(s)["divergences"].as_u64().unwrap_or(0);
    assert!(found(&a) >= 1, "{}", replication(&a));
    let status = replication(&a);
    assert!(status["last_divergence"].as_str().unwrap_or_default().contains("partition"), "{status}");
    let log = std::fs::read_to_string(&a.stderr).unwrap();
    assert!(log.contains("ALERT: partition"), "{log}");
    // The alert names the entry.
    assert!(log.contains(&format!("{dn} differs")), "{log}");
    let (_, metrics, _) = ctl(&a, &["metrics"]);
    assert!(metrics.contains("coredir_replication_divergences_total"), "{metrics}");
    wait_for("identical data", || dump(&a) == dump(&b));
    // Mended, the partitions agree again and no new divergence comes.
    let settled = || {
        let (va, vb) = (agreed(&a), agreed(&b));
        wait_for("checks that agree", || agreed(&a) > va + 20 && agreed(&b) > vb + 20);
    };
    settled();
    let (fa, fb) = (found(&a), found(&b));
    settled();
    assert_eq!((found(&a), found(&b)), (fa, fb));
}

/// Restarted while the peer is away, a server counts its backlog against
/// what the peer was last known to hold (saved as it trims), not 0.
#[test]
fn the_backlog_after_a_restart_while_the_peer_is_away_is_counted() {
    let (pa, pb) = (free_port(), free_port());
    let mut a = Server::start_with_config(2, &short_changelog(mirror_conf(1, pa, pb)));
    let mut b = seeded_from(&a, &short_changelog(mirror_conf(2, pb, pa)), &[]);
    assert_eq!(add_user(&mut a.admin(), "held").rc, 0);
    // Trimmed: the sender saved what B holds.
    wait_for("the trim", || replication(&a)["changelog_records"] == 0 && replication(&a)["backlog"] == 0);
    b.stop();
    for i in 0..15 {
        assert_eq!(add_user(&mut a.admin(), &format!("while{i}")).rc, 0);
    }
    a.restart();
    wait_for("the backlog after the restart", || replication(&a)["backlog"].as_u64() == Some(15));
    b.launch();
    wait_for("healed", || replication(&a)["backlog"] == 0 && replication(&a)["outbound"] == "streaming");
    converged(&a, &b);
}

/// A `newcookie` of one server of a pair names no CSN of the peer above a
/// change of the peer it has not sent yet (issue 19). The peer's shard 1
/// pauses 300 ms between stamping and committing each batch, so its later
/// CSNs, from shard 0, reach this server first; a stock slapd consumer
/// would drop the earlier ones as "not new enough" for good.
#[test]
fn no_new_cookie_claims_a_change_of_the_peer_not_sent_yet() {
    let (pa, pb) = (free_port(), free_port());
    let a = Server::start_with_config(2, &(mirror_conf(1, pa, pb) + "[syncrepl]\nprovider = true\n"));
    let b = seeded_from(&a, &mirror_conf(2, pb, pa), &[("COREDIR_TEST_COMMIT_DELAY_MS", "1:300")]);
    wait_for("the pair to stream", || {
        let status = replication(&a);
        status["outbound"] == "streaming" && status["inbound"] == "streaming"
    });
    let mut r = Raw::connect(&a);
    crate::syncrepl::persistent_search(&mut r, 1);
    crate::syncrepl::slow_and_fast_adds(&b);
    crate::syncrepl::no_cookie_claims_an_unsent_change(&mut r, &a, 52, "#002#");
    // And the cookie does come to claim the peer's last change (each read
    // waits 30 s at most: a silent stream ends the loop).
    let mut c = a.admin();
    let (found, _) = c.search(PEOPLE, Scope::OneLevel, "(cn=*)", vec!["entryCSN"]).unwrap().success().unwrap();
    let last = found.into_iter().map(|e| SearchEntry::construct(e).attrs["entryCSN"][0].clone()).max().unwrap();
    let claimed = std::iter::from_fn(|| r.recv_frame()).any(|frame| {
        let text = String::from_utf8_lossy(&frame).into_owned();
        let csn = text.split("csn=").nth(1).and_then(|c| c.split(';').find(|c| c.contains("#002#")));
        csn.is_some_and(|c| c[..40] >= *last)
    });
    assert!(claimed, "no cookie came to claim the peer's last change ({last})");
}

/// A change of the peer that arrives after a later change here to the
/// same entry leaves its `entryCSN` as it was; a refresh from a cookie
/// handed out in between still sends the entry (issue 19: no margin of
/// time decides it). A is restarted with its clock 10 s ahead, so that
/// the cookie's CSN is well past the entry's.
#[test]
fn a_refresh_sends_an_entry_a_late_older_change_of_the_peer_reached() {
    use ldap3_proto::proto::LdapOp;
    let (pa, pb) = (free_port(), free_port());
    let mut a = Server::start_with_config(1, &(mirror_conf(1, pa, pb) + "[syncrepl]\nprovider = true\n"));
    let mut b = seeded_from(&a, &mirror_conf(2, pb, pa), &[]);
    person(&mut a.admin(), "late", "first");
    converged(&a, &b);
    let dn = format!("uid=late,{PEOPLE}");
    // Apart, B changes the entry, then A later: B's change reaches A late.
    let apart = |a: &mut Server, b: &mut Server, tag: &str| {
        a.kill9();
        let desc = format!("from-b{tag}");
        assert_eq!(b.admin().modify(&dn, vec![Mod::Replace("description", [desc.as_str()].into())]).unwrap().rc, 0);
        b.kill9();
        a.launch();
        let sn = format!("from-a{tag}");
        assert_eq!(a.admin().modify(&dn, vec![Mod::Replace("sn", [sn.as_str()].into())]).unwrap().rc, 0);
    };
    apart(&mut a, &mut b, "");
    a.kill9();
    a.env = vec![("COREDIR_TEST_CLOCK_OFFSET_S".into(), "10".into())];
    a.launch();
    person(&mut a.admin(), "later", "ahead");
    let (_, cookie) = crate::syncrepl::refresh_only(&a, None);
    let cookie = cookie.expect("a cookie");
    b.launch();
    converged(&a, &b);
    let (msgs, handed) = crate::syncrepl::refresh_only(&a, Some(cookie.clone()));
    let sent = msgs.iter().find_map(|m| match &m.op {
        LdapOp::SearchResultEntry(e) if e.dn.eq_ignore_ascii_case(&dn) => Some(e.clone()),
        _ => None,
    });
    let sent = sent.unwrap_or_else(|| panic!("{dn} not sent from {}", String::from_utf8_lossy(&cookie)));
    let description: Vec<&[u8]> = sent
        .attributes
        .iter()
        .filter(|a| a.atype.eq_ignore_ascii_case("description"))
        .flat_map(|a| a.vals.iter().map(|v| v.as_slice()))
        .collect();
    assert_eq!(description, vec![b"from-b".as_slice()], "{sent:?}");
    // The cookie that refresh handed out names both servers, and from it
    // nothing is sent again.
    let handed = handed.expect("a cookie");
    assert!(String::from_utf8_lossy(&handed).contains("#002#"), "{}", String::from_utf8_lossy(&handed));
    let (msgs, _) = crate::syncrepl::refresh_only(&a, Some(handed.clone()));
    assert_eq!(entries_in(&msgs), 0, "{msgs:?}");
    // Once more, now that the cookie names the peer: the entry is sent
    // once, and the cookie then claims the peer's late change too.
    apart(&mut a, &mut b, "2");
    b.launch();
    converged(&a, &b);
    let (msgs, next) = crate::syncrepl::refresh_only(&a, Some(handed));
    assert_eq!(entries_in(&msgs), 1, "{msgs:?}");
    let (msgs, _) = crate::syncrepl::refresh_only(&a, next);
    assert_eq!(entries_in(&msgs), 0, "sent again: {msgs:?}");
}
