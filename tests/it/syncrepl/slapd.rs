//! A stock slapd consuming from coredir (refreshOnly and refreshAndPersist), checked by its content.

use super::*;

#[test]
fn slapd_replicates_from_coredir_in_refresh_and_persist() {
    ldap_utils();
    let s = provider(2);
    let mut c = s.admin();
    // Content before the consumer first connects.
    mixed_changes(&mut c, "before", 100);
    let mut consumer = Consumer::new(&s, "refreshAndPersist");
    same_content(&s, &consumer);
    // Changes while it listens: 1,000 of them.
    mixed_changes(&mut c, "live", 1000);
    same_content(&s, &consumer);
    // contextCSN on the suffix: the newest change, which slapd learns too.
    let context = |url: &str| {
        let (_, out, _) =
            tool("ldapsearch", &["-x", "-H", url, "-LLL", "-s", "base", "-b", SUFFIX, "contextCSN"], None);
        out.lines().filter_map(|l| l.strip_prefix("contextCSN: ")).map(String::from).collect::<Vec<_>>()
    };
    let ours = context(&s.url());
    assert_eq!(ours.len(), 1, "{ours:?}");
    let newest = content(&s.url())
        .iter()
        .filter_map(|r| r.lines().find_map(|l| l.strip_prefix("entryCSN: ")))
        .map(String::from)
        .max();
    assert!(Some(&ours[0]) >= newest.as_ref(), "{ours:?} {newest:?}");
    wait_for("slapd's contextCSN", || context(&consumer.url()) == ours);
    // Stopped, changes made, restarted with its cookie: only what changed
    // comes in full; what was deleted meanwhile is deleted there too.
    consumer.stop();
    mixed_changes(&mut c, "apart", 100);
    consumer.start();
    same_content(&s, &consumer);
    assert!(consumer.log().contains("cookie=rid=001,sid=001,csn="), "no cookie in slapd's log");
    // The changelog covered its cookie: only the changes and the deleted
    // entries' UUIDs came (RFC 4533's delete phase).
    assert!(consumer.log().contains("REFRESH_DELETE"), "the restart did not use the delete phase");
}

#[test]
fn slapd_replicates_from_coredir_in_refresh_only() {
    ldap_utils();
    let s = provider(2);
    let mut c = s.admin();
    mixed_changes(&mut c, "before", 100);
    let consumer = Consumer::new(&s, "refreshOnly");
    same_content(&s, &consumer);
    mixed_changes(&mut c, "polled", 1000);
    same_content(&s, &consumer);
}

#[test]
fn slapd_replicates_one_of_two_naming_contexts() {
    ldap_utils();
    let second = "o=second";
    let s = Server::start_with_config(
        2,
        &format!("[directory]\nsuffixes = [{SUFFIX:?}, {second:?}]\n[syncrepl]\nprovider = true\n"),
    );
    let mut c = s.admin();
    for i in 0..30 {
        let cn = format!("before{i}");
        assert_eq!(c.add(&format!("cn={cn},{second}"), person_attrs(&cn)).unwrap().rc, 0);
    }
    mixed_changes(&mut c, "first", 50);
    let consumer = Consumer::of(&s, "refreshAndPersist", second);
    same_content_of(&s, &consumer, second);
    // Live changes in both contexts: those of the second arrive.
    mixed_changes(&mut c, "elsewhere", 50);
    for i in 0..30 {
        let dn = format!("cn=before{i},{second}");
        let rc = match i % 3 {
            0 => c.modify(&dn, vec![Mod::Replace("sn", ["changed"].into())]).unwrap().rc,
            1 => c.modifydn(&dn, &format!("cn=renamed{i}"), true, None).unwrap().rc,
            _ => c.delete(&dn).unwrap().rc,
        };
        assert_eq!(rc, 0, "{dn}");
    }
    same_content_of(&s, &consumer, second);
    assert_eq!(content_of(&s.url(), second).len(), 21, "the suffix and 20 entries");
    // Each naming context has its own contextCSN, as each slapd database
    // does: the consumer of one reaches its provider's, and changes in the
    // other context move neither (monitoring compares them per suffix).
    let context = |url: &str, base: &str| {
        let (_, out, _) = tool("ldapsearch", &["-x", "-H", url, "-LLL", "-s", "base", "-b", base, "contextCSN"], None);
        out.lines().filter_map(|l| l.strip_prefix("contextCSN: ")).map(String::from).collect::<Vec<_>>()
    };
    let ours = context(&s.url(), second);
    assert_eq!(ours.len(), 1, "{ours:?}");
    wait_for("slapd's contextCSN", || context(&consumer.url(), second) == ours);
    let first = context(&s.url(), SUFFIX);
    mixed_changes(&mut c, "first-only", 20);
    assert!(context(&s.url(), SUFFIX) > first, "the first context's contextCSN did not move");
    assert_eq!(context(&s.url(), second), ours, "a change in the first context moved the second's contextCSN");
    assert_eq!(context(&consumer.url(), second), ours);
}

/// Two entries that swap DNs through a third (a->t, b->a, t->b) reach a
/// live consumer rename by rename, as slapd's syncprov sends them: an
/// entry renamed again before the persist stage read its first rename
/// was sent only at its last DN, so the consumer was told to move the
/// other entry onto a DN the first still held there (68), and stayed
/// stuck on it.
#[test]
fn slapd_follows_entries_that_swap_dns() {
    ldap_utils();
    let s = provider(2);
    let mut c = s.admin();
    let consumer = Consumer::new(&s, "refreshAndPersist");
    same_content(&s, &consumer);
    let base = format!("ou=swap,{SUFFIX}");
    let ou = vec![("objectClass", ["organizationalUnit"].into()), ("ou", ["swap"].into())];
    assert_eq!(c.add(&base, ou).unwrap().rc, 0);
    for cn in ["a", "b"] {
        assert_eq!(c.add(&format!("cn={cn},{base}"), person_attrs(cn)).unwrap().rc, 0);
    }
    for _ in 0..150 {
        for (from, to) in [("a", "t"), ("b", "a"), ("t", "b")] {
            let rc = c.modifydn(&format!("cn={from},{base}"), &format!("cn={to}"), true, None).unwrap().rc;
            assert_eq!(rc, 0, "{from} -> {to}");
        }
    }
    same_content(&s, &consumer);
}

/// Issue 19: a refresh sent changed entries at their DNs now, in DN
/// order, so entries that swapped DNs while a consumer was away (or
/// between two polls of a refreshOnly one) met on it: whatever the
/// order, each must take a DN the other still holds there (68), and
/// slapd then modified the other entry with its content. The refresh of
/// a cookie the changelog covers now goes through the changes in their
/// order, as the provider went through them.
#[test]
fn a_consumer_back_from_away_follows_entries_that_swapped_dns() {
    ldap_utils();
    let s = provider(2);
    let mut c = s.admin();
    let base = format!("ou=swap,{SUFFIX}");
    let ou = vec![("objectClass", ["organizationalUnit"].into()), ("ou", ["swap"].into())];
    assert_eq!(c.add(&base, ou).unwrap().rc, 0);
    for cn in ["a", "b", "c"] {
        assert_eq!(c.add(&format!("cn={cn},{base}"), person_attrs(cn)).unwrap().rc, 0);
    }
    let mut rename = |from: &str, to: &str| {
        let rc = c.modifydn(&format!("cn={from},{base}"), &format!("cn={to}"), true, None).unwrap().rc;
        assert_eq!(rc, 0, "{from} -> {to}");
    };
    for kind in ["refreshOnly", "refreshAndPersist"] {
        let mut consumer = Consumer::new(&s, kind);
        same_content(&s, &consumer);
        consumer.stop();
        // a and b swap through t; then a, b and c rotate.
        for (from, to) in [("a", "t"), ("b", "a"), ("t", "b"), ("a", "t"), ("b", "a"), ("c", "b"), ("t", "c")] {
            rename(from, to);
        }
        consumer.start();
        same_content(&s, &consumer);
        consumer.stop();
    }
}

/// Subtree renames reach slapd whole: live in persist, and in the refresh
/// of a consumer that was away (its cookie older than every move).
#[test]
fn slapd_follows_subtree_renames() {
    ldap_utils();
    let s = provider(2);
    let mut c = s.admin();
    let ou = |c: &mut LdapConn, dn: &str, name: &str| {
        let res = c.add(dn, vec![("objectClass", ["organizationalUnit"].into()), ("ou", [name].into())]);
        assert_eq!(res.unwrap().rc, 0, "{dn}");
    };
    for branch in ["b1", "b2"] {
        let top = format!("ou={branch},{SUFFIX}");
        ou(&mut c, &top, branch);
        for i in 0..20 {
            let cn = format!("{branch}-{i}");
            assert_eq!(c.add(&format!("cn={cn},{top}"), person_attrs(&cn)).unwrap().rc, 0);
        }
        ou(&mut c, &format!("ou=inner,{top}"), "inner");
        for i in 0..5 {
            let cn = format!("{branch}-inner{i}");
            assert_eq!(c.add(&format!("cn={cn},ou=inner,{top}"), person_attrs(&cn)).unwrap().rc, 0);
        }
    }
    let mut consumer = Consumer::new(&s, "refreshAndPersist");
    same_content(&s, &consumer);
    let rename = |c: &mut LdapConn, dn: &str, rdn: &str, superior: Option<&str>| {
        let res = c.modifydn(dn, rdn, true, superior).unwrap();
        assert_eq!(res.rc, 0, "{dn}: {res:?}");
    };
    rename(&mut c, &format!("ou=b1,{SUFFIX}"), "ou=b1r", None);
    rename(&mut c, &format!("ou=inner,ou=b1r,{SUFFIX}"), "ou=inner", Some(PEOPLE));
    same_content(&s, &consumer);
    // Within one poll: a subtree renamed and its top then modified (its
    // rename record must still go out before its children's), a leaf
    // renamed twice.
    rename(&mut c, &format!("ou=b1r,{SUFFIX}"), "ou=b1s", None);
    let b1s = format!("ou=b1s,{SUFFIX}");
    assert_eq!(c.modify(&b1s, vec![Mod::Replace("description", ["moved"].into())]).unwrap().rc, 0);
    rename(&mut c, &format!("cn=b1-3,{b1s}"), "cn=b1-3x", None);
    rename(&mut c, &format!("cn=b1-3x,{b1s}"), "cn=b1-3y", None);
    same_content(&s, &consumer);
    consumer.stop();
    rename(&mut c, &format!("ou=b2,{SUFFIX}"), "ou=b2r", Some(PEOPLE));
    rename(&mut c, &format!("ou=inner,ou=b2r,{PEOPLE}"), "ou=inner2", Some(SUFFIX));
    consumer.start();
    same_content(&s, &consumer);
    assert_eq!(content(&s.url()).iter().filter(|r| r.contains("ou=b2r,ou=people")).count(), 21);
}

/// A child moved out of its parent, the parent deleted, then the child
/// deleted: the consumer, live or back from away, meets the child's leave
/// before the parent's delete (the child's move said nothing once the
/// child was gone, and slapd then failed the parent's delete with 66 and
/// retried the same refresh for good, replicating nothing more).
#[test]
fn a_parent_deleted_after_its_child_moved_out_and_went_reaches_slapd() {
    ldap_utils();
    let s = provider(2);
    let mut c = s.admin();
    for (kind, away) in [("refreshAndPersist", false), ("refreshAndPersist", true), ("refreshOnly", true)] {
        let ou = format!("ou=p{},{SUFFIX}", kind.len() + away as usize);
        let child = format!("uid=kid{},{ou}", away as u8);
        let mut consumer = Consumer::new(&s, kind);
        let attrs =
            vec![("objectClass", ["organizationalUnit"].into()), ("ou", [&ou[3..ou.find(',').unwrap()]].into())];
        c.add(&ou, attrs).unwrap().success().unwrap();
        let uid = &child[4..child.find(',').unwrap()];
        c.add(&child, vec![("objectClass", ["account"].into()), ("uid", [uid].into())]).unwrap().success().unwrap();
        same_content(&s, &consumer);
        if away {
            consumer.stop();
        }
        c.modifydn(&child, &format!("uid={uid}"), true, Some(PEOPLE)).unwrap().success().unwrap();
        c.delete(&ou).unwrap().success().unwrap();
        c.delete(&format!("uid={uid},{PEOPLE}")).unwrap().success().unwrap();
        // A change after them must reach the consumer too.
        let after = format!("cn=after{},{PEOPLE}", kind.len() + away as usize);
        c.add(&after, vec![("objectClass", ["device"].into()), ("cn", [&after[3..after.find(',').unwrap()]].into())])
            .unwrap()
            .success()
            .unwrap();
        if away {
            consumer.start();
        }
        same_content(&s, &consumer);
        consumer.stop();
    }
}

/// A subtree moved out of a consumer's search base leaves it children
/// first: slapd refuses to delete an entry that still has children (66),
/// and a consumer told to drop the top first retried for good.
#[test]
fn a_subtree_moved_out_of_a_consumers_base_leaves_it_children_first() {
    ldap_utils();
    let s = provider(2);
    let mut c = s.admin();
    let consumer = Consumer::of_base(&s, "refreshAndPersist", PEOPLE);
    let sub = format!("ou=sub,{PEOPLE}");
    c.add(&sub, vec![("objectClass", ["organizationalUnit"].into()), ("ou", ["sub"].into())])
        .unwrap()
        .success()
        .unwrap();
    let kid = format!("uid=k,{sub}");
    c.add(&kid, vec![("objectClass", ["account"].into()), ("uid", ["k"].into())]).unwrap().success().unwrap();
    same_content_of(&s, &consumer, PEOPLE);
    c.modifydn(&sub, "ou=sub", true, Some(&format!("ou=groups,{SUFFIX}"))).unwrap().success().unwrap();
    let after = format!("cn=later,{PEOPLE}");
    c.add(&after, vec![("objectClass", ["device"].into()), ("cn", ["later"].into())]).unwrap().success().unwrap();
    same_content_of(&s, &consumer, PEOPLE);
}

/// Issue 19: a rename that keeps its old RDN value (deleteoldrdn 0) after
/// one that dropped it: slapd's consumer ended with the new value only.
/// It takes an RDN attribute found at another position than in its own
/// copy for a dropped old RDN value, and coredir kept attributes where
/// they were first added; slapd moves one that lost every value to the end.
/// Issue 19: an add superseded by a rename of its entry said nothing
/// (the rename's record would bring the entry), but a child moved into
/// the new entry in between went out at its DN then: slapd put a glue
/// entry there, and once the parent came back to that DN refused its
/// rename (68) and retried it for good. The add now goes out at the DN
/// it gave the entry, live and in the replay of a consumer back from away.
#[test]
fn a_child_moved_into_a_parent_renamed_since_reaches_slapd_without_glue() {
    ldap_utils();
    let s = provider(2);
    let mut c = s.admin();
    for ou in ["ga", "gb", "ghome"] {
        let attrs = vec![("objectClass", ["organizationalUnit"].into()), ("ou", [ou].into())];
        assert_eq!(c.add(&format!("ou={ou},{SUFFIX}"), attrs).unwrap().rc, 0);
    }
    let [a, b, home] = ["ga", "gb", "ghome"].map(|ou| format!("ou={ou},{SUFFIX}"));
    let mut consumer = Consumer::new(&s, "refreshAndPersist");
    for (live, tag) in [(true, "p"), (false, "r")] {
        let (kid, bx) = (format!("cn=k{tag}"), format!("ou=bx{tag}"));
        assert_eq!(c.add(&format!("{kid},{home}"), person_attrs(&format!("k{tag}"))).unwrap().rc, 0);
        same_content(&s, &consumer);
        if !live {
            consumer.stop();
        }
        let attrs = vec![("objectClass", ["organizationalUnit"].into()), ("ou", [&bx[3..]].into())];
        assert_eq!(c.add(&format!("{bx},{a}"), attrs).unwrap().rc, 0);
        let moves =
            [(format!("{kid},{home}"), &kid, format!("{bx},{a}")), (format!("{kid},{bx},{a}"), &kid, home.clone())];
        for (from, rdn, to) in moves {
            assert_eq!(c.modifydn(&from, rdn, true, Some(&to)).unwrap().rc, 0, "{from} below {to}");
        }
        assert_eq!(c.modifydn(&format!("{bx},{a}"), &bx, true, Some(&b)).unwrap().rc, 0);
        if !live {
            consumer.start();
        }
        same_content(&s, &consumer);
        // Back to the DN a glue entry held on the consumer.
        assert_eq!(c.modifydn(&format!("{bx},{b}"), &bx, true, Some(&a)).unwrap().rc, 0);
        same_content(&s, &consumer);
    }
    // All while away, the parent back at the DN of its add at the end:
    // the replay must still say the add before the child's moves. (The
    // child stays out before the parent moves: slapd 2.5's back-mdb
    // refuses, 80, to move a parent whose only child came by modify-DN,
    // whoever the provider.)
    consumer.stop();
    let attrs = vec![("objectClass", ["organizationalUnit"].into()), ("ou", ["bxa"].into())];
    assert_eq!(c.add(&format!("ou=bxa,{a}"), attrs).unwrap().rc, 0);
    assert_eq!(c.modifydn(&format!("cn=kr,{home}"), "cn=kr", true, Some(&format!("ou=bxa,{a}"))).unwrap().rc, 0);
    assert_eq!(c.modifydn(&format!("cn=kr,ou=bxa,{a}"), "cn=kr", true, Some(&home)).unwrap().rc, 0);
    assert_eq!(c.modifydn(&format!("ou=bxa,{a}"), "ou=bxa", true, Some(&b)).unwrap().rc, 0);
    assert_eq!(c.modifydn(&format!("ou=bxa,{b}"), "ou=bxa", true, Some(&a)).unwrap().rc, 0);
    consumer.start();
    same_content(&s, &consumer);
}

/// Issue 19: a rename that keeps the old RDN value, in a later second
/// than the change before it, changes modifyTimestamp. The entry sent put
/// modifyTimestamp where that replace leaves it (after the RDN's
/// attribute), so the RDN's attribute sat one place earlier than in the
/// consumer's copy, and slapd takes an old RDN attribute found elsewhere
/// as its value deleted: `uid=x1` was lost on the consumer. The stamps a
/// change replaces are sent where they were before it.
#[test]
fn slapd_keeps_an_rdn_value_a_rename_in_a_later_second_kept() {
    ldap_utils();
    let s = provider(2);
    let mut c = s.admin();
    let base = format!("ou=later,{SUFFIX}");
    let ou = vec![("objectClass", ["organizationalUnit"].into()), ("ou", ["later"].into())];
    assert_eq!(c.add(&base, ou).unwrap().rc, 0);
    let consumer = Consumer::new(&s, "refreshAndPersist");
    same_content(&s, &consumer);
    let stamp = |c: &mut LdapConn, dn: &str, attr: &str| -> String {
        let (found, _) = c.search(dn, ldap3::Scope::Base, "(objectClass=*)", vec![attr]).unwrap().success().unwrap();
        let mut e = ldap3::SearchEntry::construct(found.into_iter().next().expect("the entry"));
        e.attrs.remove(attr).and_then(|v| v.into_iter().next()).expect(attr)
    };
    // An add and a first rename (dropping the old value) in one second:
    // a pair that straddles a second is tried again under another name.
    let mut kept = None;
    for i in 0..20 {
        let (first, second) = (format!("x{i}"), format!("x{i}b"));
        let person = vec![
            ("objectClass", ["inetOrgPerson"].into()),
            ("uid", [first.as_str()].into()),
            ("cn", ["x"].into()),
            ("sn", ["x"].into()),
        ];
        assert_eq!(c.add(&format!("uid={first},{base}"), person).unwrap().rc, 0);
        let rc = c.modifydn(&format!("uid={first},{base}"), &format!("uid={second}"), true, None).unwrap().rc;
        assert_eq!(rc, 0);
        let dn = format!("uid={second},{base}");
        if stamp(&mut c, &dn, "createTimestamp") == stamp(&mut c, &dn, "modifyTimestamp") {
            kept = Some((dn, second));
            break;
        }
    }
    let (dn, second) = kept.expect("an add and a rename within one second in 20 tries");
    same_content(&s, &consumer);
    // The second rename, keeping the old value, in a later second.
    let before = stamp(&mut c, &dn, "modifyTimestamp");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while now_generalized_second() == before[..14] {
        assert!(std::time::Instant::now() < deadline, "the clock's second never changed");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let rc = c.modifydn(&dn, &format!("uid={second}c"), false, None).unwrap().rc;
    assert_eq!(rc, 0);
    same_content(&s, &consumer);
}

/// This machine's UTC time as a generalized time's first 14 digits.
fn now_generalized_second() -> String {
    let out = std::process::Command::new("date").args(["-u", "+%Y%m%d%H%M%S"]).output().expect("date");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn slapd_keeps_an_rdn_value_a_second_rename_kept() {
    ldap_utils();
    let s = provider(2);
    let mut c = s.admin();
    let base = format!("ou=keep,{SUFFIX}");
    let ou = vec![("objectClass", ["organizationalUnit"].into()), ("ou", ["keep"].into())];
    assert_eq!(c.add(&base, ou).unwrap().rc, 0);
    let mut consumer = Consumer::new(&s, "refreshAndPersist");
    same_content(&s, &consumer);
    let rename = |c: &mut LdapConn, from: &str, to: &str, delete_old: bool| {
        let rc = c.modifydn(&format!("uid={from},{base}"), &format!("uid={to}"), delete_old, None).unwrap().rc;
        assert_eq!(rc, 0, "{from} -> {to}");
    };
    for (live, tag) in [(true, "p"), (false, "r")] {
        let first = format!("{tag}0");
        let mail = format!("{first}@example.com");
        let person = vec![
            ("objectClass", ["inetOrgPerson"].into()),
            ("uid", [first.as_str()].into()),
            ("cn", [first.as_str()].into()),
            ("sn", [first.as_str()].into()),
            ("mail", [mail.as_str()].into()),
        ];
        assert_eq!(c.add(&format!("uid={first},{base}"), person).unwrap().rc, 0);
        same_content(&s, &consumer);
        if !live {
            consumer.stop();
        }
        rename(&mut c, &first, &format!("{tag}1"), true);
        rename(&mut c, &format!("{tag}1"), &format!("{tag}2"), false);
        // Replaced attributes move as well, the RDN's among them.
        let dn = format!("uid={tag}2,{base}");
        let uids = [format!("{tag}2"), format!("{tag}v")];
        let mods = vec![
            Mod::Replace("mail", ["x@example.com"].into()),
            Mod::Replace("uid", uids.iter().map(String::as_str).collect()),
        ];
        assert_eq!(c.modify(&dn, mods).unwrap().rc, 0);
        rename(&mut c, &format!("{tag}2"), &format!("{tag}3"), false);
        // A class added: slapd's consumer replaces objectClass (ITS#5517).
        let dn = format!("uid={tag}3,{base}");
        assert_eq!(c.modify(&dn, vec![Mod::Add("objectClass", ["extensibleObject"].into())]).unwrap().rc, 0);
        if live {
            same_content(&s, &consumer);
        }
        rename(&mut c, &format!("{tag}3"), &format!("{tag}4"), false);
        if !live {
            consumer.start();
        }
        same_content(&s, &consumer);
    }
}

/// Issue 19: a mirror node restarted while its peer was away answered a
/// consumer's refresh with a present phase whose cookie named no CSN of
/// the peer (what the peer settled here was known only from its word,
/// lost with the restart), and slapd deletes only the entries absent from
/// a present phase whose `entryCSN` the new cookie covers: entries the
/// peer had added and this node deleted stayed on the consumer for good.
#[test]
fn a_mirror_node_restarted_without_its_peer_still_passes_deletes_to_slapd() {
    ldap_utils();
    let (mut a, mut b) = crate::mirror::pair(2);
    let mut on_b = b.admin();
    let gone: Vec<String> = (0..4).map(|i| format!("cn=gone{i},{SUFFIX}")).collect();
    for (i, dn) in gone.iter().enumerate() {
        assert_eq!(on_b.add(dn, person_attrs(&format!("gone{i}"))).unwrap().rc, 0);
    }
    wait_for("B's adds on A", || gone.iter().all(|dn| get_entry(&mut a.admin(), dn, vec!["cn"]).is_some()));
    // A keeps what B settled there (written after a short delay).
    let newest = gone
        .iter()
        .filter_map(|dn| get_entry(&mut a.admin(), dn, vec!["entryCSN"]))
        .map(|e| e.attrs["entryCSN"][0].clone())
        .max()
        .unwrap();
    wait_for("A to keep B's adds as settled", || {
        crate::mirror::replication(&a)["peer_settled"].as_str().is_some_and(|kept| *kept >= *newest)
    });
    let mut consumer = Consumer::new(&a, "refreshAndPersist");
    same_content(&a, &consumer);
    consumer.stop();
    let mut on_a = a.admin();
    for dn in &gone {
        assert_eq!(on_a.delete(dn).unwrap().rc, 0);
    }
    b.kill9();
    a.restart();
    consumer.start();
    same_content(&a, &consumer);
}

/// Issue 19: a refresh whose cookie predates the changelog (a consumer
/// that had seen only the entries the database started with) is a
/// present phase, and its cookie named no delete made since: slapd then
/// keeps what the present phase left out, as the cookie it got back was
/// no newer than the one it sent.
#[test]
fn a_present_phase_after_a_delete_ends_with_a_cookie_that_names_it() {
    ldap_utils();
    let s = provider(1);
    let mut consumer = Consumer::new(&s, "refreshAndPersist");
    same_content(&s, &consumer);
    consumer.stop();
    assert_eq!(s.admin().delete(&format!("ou=groups,{SUFFIX}")).unwrap().rc, 0);
    consumer.start();
    same_content(&s, &consumer);
}

/// Issue 19: a consumer away longer than the changelog keeps deletes (its
/// tombstones trimmed) got a present phase whose cookie named none of
/// them, so slapd kept the deleted entries. To a requester no access rule
/// restricts, the cookie now names the newest change of every server, as
/// syncprov ends a present phase with the contextCSN.
#[test]
fn a_present_phase_after_the_changelog_trimmed_a_delete_still_ends_it() {
    consumer_away_past_the_changelog(None);
}

/// The same for a consumer bound as a replicator that access rules
/// restrict but let read the suffix's contextCSN: the cookie may name
/// what that attribute tells it anyway.
#[test]
fn a_replicator_that_reads_the_context_csn_gets_deletes_past_the_changelog() {
    let rules = "[access]\nrules = ['to * by * read']\n";
    consumer_away_past_the_changelog(Some(rules));
}

/// Issue 19: a provider restored from an older backup left its consumer
/// ahead for good: the consumer's cookie named changes the provider no
/// longer had, so nothing was sent and slapd kept the entries the
/// provider lost. A cookie naming a change of this server between the
/// newest the backup held and the restore now gets everything as if it
/// had none, in a present phase whose cookie is past the restore, so
/// slapd deletes what was not present; changes after the restore follow.
/// (A write after the restore, before the consumer returns, already made
/// the present phase's cookie newer than the consumer's.)
/// (Entries the lost history deleted or modified slapd does not take
/// back: it ignores an entry whose entryCSN is older than its cookie.)
#[test]
fn a_provider_restored_from_an_older_backup_refreshes_its_consumer() {
    ldap_utils();
    for kind in ["refreshAndPersist", "refreshOnly"] {
        let mut s = provider(2);
        let mut root = s.admin();
        assert_eq!(root.add(&format!("cn=kept,{SUFFIX}"), person_attrs("kept")).unwrap().rc, 0);
        let backup = s.dir.path().join("backup");
        let (code, out, err) = ctl(&s, &["backup", backup.to_str().unwrap()]);
        assert_eq!(code, 0, "{out}{err}");
        for cn in ["lost", "lost-too"] {
            assert_eq!(root.add(&format!("cn={cn},{SUFFIX}"), person_attrs(cn)).unwrap().rc, 0);
        }
        let mut consumer = Consumer::new(&s, kind);
        same_content(&s, &consumer);
        consumer.stop();
        s.stop();
        std::fs::remove_dir_all(s.data()).unwrap();
        crate::mirror::restore_into(&s, &backup);
        s.launch();
        consumer.start();
        same_content(&s, &consumer);
        // Back again with the cookie that refresh ended with, nothing
        // changed since: no entry is sent whole again (a present phase
        // names them only).
        consumer.stop();
        consumer.start();
        let ended = if kind == "refreshOnly" { "LDAP_RES_SEARCH_RESULT" } else { "LDAP_RES_INTERMEDIATE - REFRESH_" };
        wait_for("the consumer's refresh to end", || consumer.log().contains(ended));
        assert!(!consumer.log().contains("(LDAP_SYNC_ADD)"), "{kind}: entries sent whole again");
        let mut root = s.admin();
        assert_eq!(root.add(&format!("cn=later,{SUFFIX}"), person_attrs("later")).unwrap().rc, 0);
        same_content(&s, &consumer);
    }
}

/// Issue 19: a server of a mirror pair whose peer has written nothing
/// hands out cookies that claim only real changes. slapd keeps the
/// cookie's CSNs as its contextCSN, which must then equal the provider's:
/// a synthetic CSN for the quiet peer (what it settled) showed there as a
/// value neither server had, and a monitor comparing them saw a
/// difference for good. A restart with that cookie is still a delete
/// phase: a peer with no change here needs no claim.
#[test]
fn a_consumer_of_a_mirror_node_whose_peer_wrote_nothing_has_its_context_csn() {
    ldap_utils();
    let (a, b) = crate::mirror::pair(2);
    let context = |url: &str| {
        let (_, out, _) =
            tool("ldapsearch", &["-x", "-H", url, "-LLL", "-s", "base", "-b", SUFFIX, "contextCSN"], None);
        out.lines().filter_map(|l| l.strip_prefix("contextCSN: ")).map(String::from).collect::<Vec<_>>()
    };
    let mut c = a.admin();
    mixed_changes(&mut c, "before", 20);
    let mut consumer = Consumer::new(&a, "refreshAndPersist");
    same_content(&a, &consumer);
    mixed_changes(&mut c, "live", 20);
    same_content(&a, &consumer);
    let ours = context(&a.url());
    assert_eq!(ours.len(), 1, "B wrote nothing: {ours:?}");
    wait_for("slapd's contextCSN to be A's", || context(&consumer.url()) == context(&a.url()));
    consumer.stop();
    mixed_changes(&mut c, "apart", 20);
    consumer.start();
    same_content(&a, &consumer);
    // (slapd's log starts afresh with each start.)
    assert!(consumer.log().contains("REFRESH_DELETE"), "the restart did not use the delete phase");
    wait_for("slapd's contextCSN to be A's again", || context(&consumer.url()) == context(&a.url()));
    // Once B writes, its CSN shows on A, and a value for it on slapd too.
    let dn = format!("cn=from-b,{SUFFIX}");
    assert_eq!(b.admin().add(&dn, person_attrs("from-b")).unwrap().rc, 0);
    wait_for("B's add on A", || get_entry(&mut a.admin(), &dn, vec!["cn"]).is_some());
    mixed_changes(&mut c, "after-b", 20);
    same_content(&a, &consumer);
    wait_for("two contextCSN values on A", || context(&a.url()).len() == 2);
    wait_for("slapd's contextCSN to be A's with B's", || context(&consumer.url()) == context(&a.url()));
    consumer.stop();
    consumer.start();
    same_content(&a, &consumer);
    assert!(consumer.log().contains("REFRESH_DELETE"), "the second restart did not use the delete phase");
    wait_for("slapd's contextCSN to be A's after a restart", || context(&consumer.url()) == context(&a.url()));
}
