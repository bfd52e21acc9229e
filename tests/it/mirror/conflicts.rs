//! Concurrent changes on both sides: conflicts, renames and moves, and how they converge.

use super::*;

#[test]
fn renames_travel_and_concurrent_renames_converge() {
    let (mut a, mut b) = pair(2);
    let moved = format!("ou=moved,{SUFFIX}");
    let ou = a.admin().add(&moved, vec![("objectClass", ["organizationalUnit"].into()), ("ou", ["moved"].into())]);
    assert_eq!(ou.unwrap().rc, 0);
    for i in 1..=6 {
        assert_eq!(add_user(&mut a.admin(), &format!("r{i}")).rc, 0);
    }
    let user = |uid: &str| format!("uid={uid},{PEOPLE}");
    let (mut ca, mut cb) = (a.admin(), b.admin());
    // All of them: records of different partitions commit in any order.
    wait_for("the users on B", || search_dns(&mut cb, PEOPLE, Scope::OneLevel, "(uid=r*)").len() == 6);
    let uuids: Vec<String> = (1..=6).map(|i| uuid_of(&mut ca, &user(&format!("r{i}")))).collect();
    // Renames on both sides, within a parent and to another, and back again.
    assert_eq!(ca.modifydn(&user("r1"), "uid=r1x", true, None).unwrap().rc, 0);
    assert_eq!(ca.modifydn(&user("r2"), "uid=r2", true, Some(&moved)).unwrap().rc, 0);
    assert_eq!(cb.modifydn(&user("r3"), "uid=r3b", false, None).unwrap().rc, 0);
    wait_for("r1x on B", || get_entry(&mut cb, &user("r1x"), vec!["uid"]).is_some());
    assert_eq!(cb.modifydn(&user("r1x"), "uid=r1", true, None).unwrap().rc, 0);
    wait_for("r3b on A", || get_entry(&mut ca, &user("r3b"), vec!["uid"]).is_some());
    let r3b = vec![Mod::Replace("description", ["renamed on b"].into())];
    assert_eq!(ca.modify(&user("r3b"), r3b).unwrap().rc, 0);
    converged(&a, &b);
    let r2 = format!("uid=r2,{moved}");
    assert_eq!(attr(&mut cb, &r2, "entryUUID"), Some(vec![uuids[1].clone()]));
    assert_eq!(attr(&mut cb, &user("r3b"), "uid"), Some(vec!["r3".into(), "r3b".into()]));
    assert_eq!(attr(&mut ca, &user("r1"), "entryUUID"), Some(vec![uuids[0].clone()]));
    // Apart: the same entry renamed on both sides (B's is later and wins),
    // one renamed on B and modified on A under its old DN.
    b.stop();
    assert_eq!(a.admin().modifydn(&user("r4"), "uid=r4a", true, None).unwrap().rc, 0);
    let r5 = vec![Mod::Replace("description", ["changed on a"].into())];
    assert_eq!(a.admin().modify(&user("r5"), r5).unwrap().rc, 0);
    a.stop();
    b.launch();
    assert_eq!(b.admin().modifydn(&user("r4"), "uid=r4b", true, Some(&moved)).unwrap().rc, 0);
    assert_eq!(b.admin().modifydn(&user("r5"), "uid=r5b", true, None).unwrap().rc, 0);
    a.launch();
    wait_for("identical data after the meeting", || dump(&a) == dump(&b));
    for s in [&a, &b] {
        let mut c = s.admin();
        for uuid in &uuids {
            assert_eq!(copies(&mut c, uuid), 1, "{uuid} on {}", s.url());
        }
        // Each rename replaced the whole RDN attribute: the later one wins.
        assert_eq!(attr(&mut c, &format!("uid=r4b,{moved}"), "uid"), Some(vec!["r4b".into()]));
        assert_eq!(attr(&mut c, &user("r5b"), "description"), Some(vec!["changed on a".into()]));
        wait_for("the counts", || {
            attr(&mut c, &moved, "numSubordinates") == Some(vec!["2".to_string()])
                && attr(&mut c, PEOPLE, "numSubordinates") == Some(vec!["4".to_string()])
        });
    }
}

#[test]
fn concurrent_changes_to_one_entry_on_both_sides_all_survive() {
    let (a, b) = pair(2);
    group(&mut a.admin(), "team");
    let dn = format!("cn=team,{SUFFIX}");
    let mut cb = b.admin();
    wait_for("the group on B", || get_entry(&mut cb, &dn, vec!["cn"]).is_some());
    // Both sides at once: members from each, and different attributes.
    let writers: Vec<_> = [(a.url(), "a"), (b.url(), "b")]
        .into_iter()
        .map(|(url, side)| {
            let dn = dn.clone();
            std::thread::spawn(move || {
                let mut c = LdapConn::new(&url).unwrap();
                c.simple_bind(ROOT_DN, ROOT_PW).unwrap().success().unwrap();
                for i in 0..20 {
                    let member = format!("cn=member-{side}-{i},{SUFFIX}");
                    let res = c.modify(&dn, vec![Mod::Add("member", [member.as_str()].into())]).unwrap();
                    assert_eq!(res.rc, 0);
                }
                let (name, value) = if side == "a" { ("description", "set on a") } else { ("o", "set on b") };
                assert_eq!(c.modify(&dn, vec![Mod::Replace(name, [value].into())]).unwrap().rc, 0);
            })
        })
        .collect();
    writers.into_iter().for_each(|w| w.join().unwrap());
    let mut ca = a.admin();
    for c in [&mut ca, &mut cb] {
        wait_for("every member on both sides", || attr(c, &dn, "member").is_some_and(|m| m.len() == 41));
        wait_for("both attributes", || {
            attr(c, &dn, "description") == Some(vec!["set on a".into()])
                && attr(c, &dn, "o") == Some(vec!["set on b".into()])
        });
    }
    converged(&a, &b);
}

#[test]
fn a_delete_on_one_side_beats_a_modify_on_the_other() {
    let (mut a, mut b) = pair(1);
    assert_eq!(add_user(&mut a.admin(), "doomed").rc, 0);
    let dn = format!("uid=doomed,{PEOPLE}");
    wait_for("the user on B", || get_entry(&mut b.admin(), &dn, vec!["uid"]).is_some());
    // Apart: B modifies the entry, then A deletes it; then they meet.
    a.stop();
    assert_eq!(b.admin().modify(&dn, vec![Mod::Replace("sn", ["Late"].into())]).unwrap().rc, 0);
    b.stop();
    a.launch();
    assert_eq!(a.admin().delete(&dn).unwrap().rc, 0);
    b.launch();
    converged(&a, &b);
    assert!(get_entry(&mut a.admin(), &dn, vec!["uid"]).is_none());
    assert!(get_entry(&mut b.admin(), &dn, vec!["uid"]).is_none());
    // And an older modify never brings it back: B's reached A after the delete.
    wait_for("A receiving", || replication(&a)["inbound"] == "streaming");
}

#[test]
fn the_same_dn_added_on_both_sides_keeps_the_older_and_flags_the_later() {
    let (mut a, mut b) = pair(2);
    apart(
        &mut a,
        &mut b,
        |a| person(&mut a.admin(), "twin", "added on a"),
        |b| person(&mut b.admin(), "twin", "added on b"),
    );
    converged(&a, &b);
    let dn = format!("uid=twin,{PEOPLE}");
    for s in [&a, &b] {
        let mut c = s.admin();
        assert_eq!(attr(&mut c, &dn, "description"), Some(vec!["added on a".to_string()]));
        let flagged = search_dns(&mut c, SUFFIX, Scope::Subtree, "(objectClass=coredirConflictEntry)");
        assert_eq!(flagged.len(), 1, "{flagged:?}");
        assert!(flagged[0].starts_with("entryUUID=") && flagged[0].ends_with(PEOPLE), "{flagged:?}");
        assert_eq!(attr(&mut c, &flagged[0], "description"), Some(vec!["added on b".to_string()]));
        assert_eq!(attr(&mut c, &flagged[0], "coredirConflictDN"), Some(vec![dn.clone()]));
        wait_for("the count", || attr(&mut c, PEOPLE, "numSubordinates") == Some(vec!["2".to_string()]));
        let (code, out, err) = ctl(s, &["replication", "conflicts"]);
        assert_eq!(code, 0, "{err}");
        assert_eq!(out.lines().count(), 1, "{out}");
        assert!(out.contains(&format!("lost {dn}")), "{out}");
    }
}

/// A change is stamped above every stamp it supersedes: B's clock runs
/// 30 s ahead (within the skew allowed); B modifies an entry, then A
/// renames it twice (so that it moves between A's shards, whose clocks
/// never saw B's stamp): the entry ends at the last DN with the modify,
/// on both sides, and nowhere else.
#[test]
fn renames_after_a_change_from_a_peer_ahead_in_time_keep_the_entry() {
    let (a, b) = pair_with(2, &[("COREDIR_TEST_CLOCK_OFFSET_S", "30")]);
    let (mut ca, mut cb) = (a.admin(), b.admin());
    for i in 0..6 {
        assert_eq!(add_user(&mut ca, &format!("sk{i}")).rc, 0);
    }
    for i in 0..6 {
        let dn = format!("uid=sk{i},{PEOPLE}");
        wait_for("the add on B", || get_entry(&mut cb, &dn, vec!["uid"]).is_some());
        assert_eq!(cb.modify(&dn, vec![Mod::Replace("description", ["from B"].into())]).unwrap().rc, 0);
        wait_for("B's modify on A", || attr(&mut ca, &dn, "description") == Some(vec!["from B".to_string()]));
        for step in ["a", "b"] {
            let from = if step == "a" { dn.clone() } else { format!("uid=sk{i}a,{PEOPLE}") };
            let res = ca.modifydn(&from, &format!("uid=sk{i}{step}"), true, None).unwrap();
            assert_eq!(res.rc, 0, "{res:?}");
        }
    }
    for s in [&a, &b] {
        let mut c = s.admin();
        for i in 0..6 {
            let last = format!("uid=sk{i}b,{PEOPLE}");
            wait_for("the last name", || attr(&mut c, &last, "description") == Some(vec!["from B".to_string()]));
            for gone in [format!("uid=sk{i},{PEOPLE}"), format!("uid=sk{i}a,{PEOPLE}")] {
                assert!(get_entry(&mut c, &gone, vec!["uid"]).is_none(), "{gone} is still there");
            }
        }
    }
    // A replace on A after the moves wins over B's earlier value.
    for i in 0..6 {
        let last = format!("uid=sk{i}b,{PEOPLE}");
        assert_eq!(ca.modify(&last, vec![Mod::Replace("description", ["from A"].into())]).unwrap().rc, 0);
        assert_eq!(attr(&mut ca, &last, "description"), Some(vec!["from A".to_string()]));
        wait_for("A's replace on B", || attr(&mut cb, &last, "description") == Some(vec!["from A".to_string()]));
    }
    converged(&a, &b);
}

/// A replace wins over every value stamped before it (389-ds): B adds a
/// value while apart, then A, later, replaces the attribute (keeping one
/// of its values): after the heal both hold exactly A's values.
#[test]
fn a_later_replace_wins_over_a_value_added_apart() {
    let (mut a, mut b) = pair(2);
    let dn = format!("uid=rep,{PEOPLE}");
    assert_eq!(add_user(&mut a.admin(), "rep").rc, 0);
    let both = Mod::Replace("description", ["keep", "old"].into());
    assert_eq!(a.admin().modify(&dn, vec![both]).unwrap().rc, 0);
    wait_for("the entry on B", || attr(&mut b.admin(), &dn, "description").is_some_and(|d| d.len() == 2));
    a.kill9();
    assert_eq!(b.admin().modify(&dn, vec![Mod::Add("description", ["fromB"].into())]).unwrap().rc, 0);
    b.kill9();
    a.launch();
    std::thread::sleep(std::time::Duration::from_millis(5)); // a later stamp than B's, on any clock
    let replace = Mod::Replace("description", ["keep", "fromA"].into());
    assert_eq!(a.admin().modify(&dn, vec![replace]).unwrap().rc, 0);
    b.launch();
    let want = |s: &Server| {
        let mut d = attr(&mut s.admin(), &dn, "description").unwrap_or_default();
        d.sort();
        d == vec!["fromA".to_string(), "keep".to_string()]
    };
    wait_for("A's replace on both", || want(&a) && want(&b) && dump(&a) == dump(&b));
}

/// A subtree rename travels as a whole: every entry leaves its old DN and
/// shows at its new one on both sides, keeps its entryUUID, and the
/// parents count their children; a move of part of it on the other side
/// travels back the same way.
#[test]
fn a_subtree_renamed_on_either_side_moves_whole_on_both() {
    let (a, b) = pair(2);
    let (mut ca, mut cb) = (a.admin(), b.admin());
    let old = branch(&mut ca, SUFFIX, "dept", 24);
    let count = tree(&a, &old).len();
    wait_for("the branch on B", || tree(&b, &old).len() == count);
    let uuid = uuid_of(&mut ca, &format!("cn=dept0-3,cn=dept0,{old}"));
    let res = ca.modifydn(&old, "ou=dept2", true, None).unwrap();
    assert_eq!(res.rc, 0, "{res:?}");
    let new = format!("ou=dept2,{SUFFIX}");
    for s in [&a, &b] {
        wait_for("the whole branch at its new DN", || tree(s, &new).len() == count);
        assert!(tree(s, &old).is_empty(), "entries left at the old DN on {}", s.url());
        let mut c = s.admin();
        assert_eq!(uuid_of(&mut c, &format!("cn=dept0-3,cn=dept0,{new}")), uuid);
        assert_eq!(attr(&mut c, &new, "numSubordinates"), Some(vec!["24".to_string()]));
    }
    // B moves part of it under ou=people; A sees it whole there.
    let res = cb.modifydn(&format!("cn=dept0,{new}"), "cn=dept0", true, Some(PEOPLE)).unwrap();
    assert_eq!(res.rc, 0, "{res:?}");
    let moved = format!("cn=dept0,{PEOPLE}");
    for s in [&a, &b] {
        wait_for("the part moved", || tree(s, &moved).len() == 7 && tree(s, &new).len() == count - 7);
        let mut c = s.admin();
        wait_for("the counts", || {
            attr(&mut c, &new, "numSubordinates") == Some(vec!["23".to_string()])
                && attr(&mut c, &moved, "numSubordinates") == Some(vec!["6".to_string()])
        });
        assert_eq!(copies(&mut c, &uuid), 1);
    }
    converged(&a, &b);
    // Counted right: the emptied branch can be deleted leaf by leaf.
    delete_leaves_first(&mut ca, tree(&a, &moved));
    wait_for("the deletes on B", || tree(&b, &moved).is_empty());
}

/// What an operator does with a conflict entry works, on both sides: a
/// rename to a free DN (with deleteoldrdn, as `ldapmodrdn -r` does) makes
/// it an ordinary entry that keeps its entryUUID and can be modified and
/// deleted; a delete removes it. `ctl replication conflicts` then lists
/// none, and never one twice.
#[test]
fn a_conflict_entry_is_resolved_by_renaming_or_deleting_it() {
    let (mut a, mut b) = pair(2);
    let flagged = conflicts_of(&mut a, &mut b, &["twin1", "twin2"]);
    assert_eq!(flagged.len(), 2, "{flagged:?}");
    let (renamed, deleted) = (&flagged[0], &flagged[1]);
    let mut ca = a.admin();
    let uuid = uuid_of(&mut ca, renamed);
    let res = ca.modifydn(renamed, "uid=twin-b", true, None).unwrap();
    assert_eq!(res.rc, 0, "{res:?}");
    let free = format!("uid=twin-b,{PEOPLE}");
    assert_eq!(ca.delete(deleted).unwrap().rc, 0);
    for s in [&a, &b] {
        let mut c = s.admin();
        wait_for("the rename", || get_entry(&mut c, &free, vec!["uid"]).is_some());
        assert_eq!(uuid_of(&mut c, &free), uuid);
        let e = get_entry(&mut c, &free, vec!["*", "+"]).unwrap();
        assert!(!e.attrs["objectClass"].iter().any(|o| o.eq_ignore_ascii_case("coredirConflictEntry")), "{e:?}");
        assert!(!e.attrs.contains_key("coredirConflictSlot") && !e.attrs.contains_key("coredirConflictDN"), "{e:?}");
        wait_for("the delete", || get_entry(&mut c, deleted, vec!["uid"]).is_none());
        let (code, out, err) = ctl(s, &["replication", "conflicts"]);
        assert_eq!(code, 0, "{err}");
        assert_eq!(out.trim(), "", "{out}");
    }
    // An ordinary entry now: modified on one side, deleted on the other.
    assert_eq!(ca.modify(&free, vec![Mod::Replace("description", ["resolved"].into())]).unwrap().rc, 0);
    wait_for("the modify on B", || attr(&mut b.admin(), &free, "description") == Some(vec!["resolved".into()]));
    assert_eq!(b.admin().delete(&free).unwrap().rc, 0);
    wait_for("the delete on A", || get_entry(&mut ca, &free, vec!["uid"]).is_none());
    converged(&a, &b);
}

/// A parent deleted on one side while a child is added below it on the
/// other: after the heal the parent is back on both sides as the same
/// glue entry (slapd's syncrepl and 389-ds make such entries), holding the
/// child; it counts the child, is hidden and missing for writes without
/// ManageDsaIT (as slapd's), cannot be deleted before the child, and `ctl
/// replication conflicts` names it.
#[test]
fn a_parent_deleted_apart_from_a_child_added_below_it_survives_as_glue() {
    let (mut a, mut b) = pair(2);
    let orph = format!("ou=orph,{SUFFIX}");
    let kid = format!("cn=kid,{orph}");
    delete_apart_from_child_add(&mut a, &mut b, &orph, &kid);
    wait_for("identical data", || dump(&a) == dump(&b) && get_entry(&mut a.admin(), &kid, vec!["cn"]).is_some());
    let mut uuids = Vec::new();
    for s in [&a, &b] {
        let mut c = s.admin();
        let glue = get_entry_managed(&mut c, &orph, vec!["objectClass", "entryUUID", "numSubordinates"])
            .unwrap_or_else(|| panic!("no parent on {}", s.url()));
        assert!(get_entry(&mut c, &orph, vec!["objectClass"]).is_none(), "hidden without ManageDsaIT");
        let refused = c.delete(&orph).unwrap();
        assert_eq!((refused.rc, refused.matched.as_str()), (32, orph.as_str()), "missing for a write");
        assert!(glue.attrs["objectClass"].iter().any(|o| o == "glue"), "{glue:?}");
        assert_eq!(glue.attrs["numSubordinates"], vec!["1".to_string()]);
        uuids.push(glue.attrs["entryUUID"].clone());
        assert_eq!(c.with_controls(manage_dsa_it()).delete(&orph).unwrap().rc, 66, "deleted with its child below");
        let (code, out, err) = ctl(s, &["replication", "conflicts"]);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains(&orph) && out.contains("glue"), "{out}");
    }
    assert_eq!(uuids[0], uuids[1], "the same glue entry on both sides");
    // The operator's way out: the child goes, then the glue.
    assert_eq!(a.admin().delete(&kid).unwrap().rc, 0);
    assert_eq!(a.admin().with_controls(manage_dsa_it()).delete(&orph).unwrap().rc, 0);
    wait_for("gone on B", || get_entry_managed(&mut b.admin(), &orph, vec!["ou"]).is_none());
    converged(&a, &b);
    // The same again at the same DN: a new glue entry (not the old one's
    // tombstone) on both sides.
    delete_apart_from_child_add(&mut a, &mut b, &orph, &kid);
    wait_for("glue again on both", || {
        [&a, &b].iter().all(|s| get_entry_managed(&mut s.admin(), &orph, vec!["ou"]).is_some()) && dump(&a) == dump(&b)
    });
    let again = get_entry_managed(&mut a.admin(), &orph, vec!["entryUUID"]).unwrap().attrs["entryUUID"].clone();
    assert_ne!(again, uuids[0], "a new glue entry");
}

/// An add deleted while apart from a later add of the same DN on the
/// other side: only B sees both entries live (A's add arrives before its
/// delete), so only B marks its own entry the loser. The mark travels as a
/// record of its own, so that A shows the entry at the same conflict DN;
/// before, A kept it at the plain DN and the sides differed for good (the
/// mirror soak's anti-entropy check found it).
#[test]
fn a_conflict_only_one_side_saw_is_shown_the_same_on_both() {
    let (mut a, mut b) = pair(2);
    let dn = format!("uid=brief,{PEOPLE}");
    let on_a = |a: &Server| {
        person(&mut a.admin(), "brief", "added on a");
        assert_eq!(a.admin().delete(&dn).unwrap().rc, 0);
    };
    apart(&mut a, &mut b, on_a, |b| person(&mut b.admin(), "brief", "added on b"));
    converged(&a, &b);
    for s in [&a, &b] {
        let mut c = s.admin();
        assert_eq!(get_entry(&mut c, &dn, vec!["uid"]).map(|e| e.dn), None);
        let flagged = search_dns(&mut c, SUFFIX, Scope::Subtree, "(objectClass=coredirConflictEntry)");
        assert_eq!(flagged.len(), 1, "{flagged:?}");
        assert_eq!(attr(&mut c, &flagged[0], "description"), Some(vec!["added on b".to_string()]));
    }
}

/// The same DN added apart on both sides in different case: the later
/// add's entry is marked by its own spelling, so it moves to its conflict
/// DN on both sides (marked by the winner's spelling, it stayed at the
/// plain DN on the side where it arrived second, over the winner's index
/// entry).
#[test]
fn a_dn_conflict_in_different_case_keeps_both_entries() {
    let (mut a, mut b) = pair(2);
    apart(
        &mut a,
        &mut b,
        |a| person(&mut a.admin(), "Casey", "added on a"),
        |b| person(&mut b.admin(), "casey", "added on b"),
    );
    converged(&a, &b);
    for s in [&a, &b] {
        let mut c = s.admin();
        let both = search_dns(&mut c, SUFFIX, Scope::Subtree, "(uid=casey)");
        assert_eq!(both.len(), 2, "{both:?}");
        let flagged = search_dns(&mut c, SUFFIX, Scope::Subtree, "(objectClass=coredirConflictEntry)");
        assert_eq!(flagged.len(), 1, "{flagged:?}");
        assert_eq!(attr(&mut c, &flagged[0], "description"), Some(vec!["added on b".to_string()]));
        assert_eq!(attr(&mut c, &format!("uid=casey,{PEOPLE}"), "description"), Some(vec!["added on a".into()]));
    }
}

/// A subtree renamed on both sides apart, to two different DNs, while a
/// child is modified and another added below it on one side: after the
/// heal both servers hold one copy of every entry, the whole subtree under
/// one of the two new DNs, with the modify, and the counts agree with the
/// entries (the branch can be emptied leaf by leaf).
#[test]
fn a_subtree_renamed_apart_on_both_sides_ends_whole_and_the_same() {
    let (mut a, mut b, old, count) = pair_with_branch("twin");
    let uuid = uuid_of(&mut a.admin(), &format!("cn=twin0-1,cn=twin0,{old}"));
    apart(
        &mut a,
        &mut b,
        |a| assert_eq!(a.admin().modifydn(&old, "ou=twina", true, None).unwrap().rc, 0),
        |b| {
            let mut c = b.admin();
            assert_eq!(c.modifydn(&old, "ou=twinb", true, None).unwrap().rc, 0);
            let kid = format!("cn=twin3,ou=twinb,{SUFFIX}");
            assert_eq!(c.modify(&kid, vec![Mod::Replace("description", ["seen"].into())]).unwrap().rc, 0);
        },
    );
    converged(&a, &b);
    let (ta, tb) = (format!("ou=twina,{SUFFIX}"), format!("ou=twinb,{SUFFIX}"));
    let (na, nb) = (tree(&a, &ta).len(), tree(&a, &tb).len());
    assert!(tree(&a, &old).is_empty(), "entries left at the old DN: {:?}", tree(&a, &old));
    assert!((na, nb) == (count, 0) || (na, nb) == (0, count), "split subtree: {na} under twina, {nb} under twinb");
    let top = if na == count { &ta } else { &tb };
    let mut c = a.admin();
    assert_eq!(copies(&mut c, &uuid), 1);
    assert_eq!(attr(&mut c, &format!("cn=twin3,{top}"), "description"), Some(vec!["seen".to_string()]));
    delete_leaves_first(&mut c, tree(&a, top));
    converged(&a, &b);
}

/// A subtree renamed on one side while, apart, the other adds a child
/// below its old DN and renames one of its entries: after the heal both
/// servers are the same, every entry once, and the counts agree with the
/// entries.
#[test]
fn a_subtree_renamed_apart_from_an_add_below_it_ends_the_same() {
    let (mut a, mut b, old, count) = pair_with_branch("mov");
    apart(
        &mut a,
        &mut b,
        |a| assert_eq!(a.admin().modifydn(&old, "ou=moved", true, None).unwrap().rc, 0),
        |b| {
            let mut c = b.admin();
            let res = c.add(&format!("cn=newkid,{old}"), person_attrs("newkid")).unwrap();
            assert_eq!(res.rc, 0, "{res:?}");
            let res = c.modifydn(&format!("cn=mov2,{old}"), "cn=mov2b", true, None).unwrap();
            assert_eq!(res.rc, 0, "{res:?}");
        },
    );
    // Both sides show the same at once (the adds without a parent); what
    // was left below the old DN follows once the peer has sent everything.
    converged(&a, &b);
    wait_for("nothing left below the old DN", || [&a, &b].iter().all(|s| orphans(s).is_empty()));
    converged(&a, &b);
    let mut all = tree(&a, SUFFIX);
    all.retain(|dn| dn.contains("mov") || dn.contains("newkid"));
    let uuids: std::collections::BTreeSet<String> = all.iter().map(|dn| uuid_of(&mut a.admin(), dn)).collect();
    assert_eq!(uuids.len(), all.len(), "an entry twice: {all:?}");
    // Every entry below its parent: what B added or renamed below the old
    // DN followed the branch to its new one (as 389-ds places a child by
    // its parent's unique id), and nothing is left at the old DN.
    assert!(orphans(&a).is_empty(), "entries without a parent: {:?}", orphans(&a));
    let moved = format!("ou=moved,{SUFFIX}");
    assert_eq!(tree(&a, &moved).len(), count + 1, "{all:?}");
    delete_leaves_first(&mut a.admin(), all);
    converged(&a, &b);
}
