use super::*;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

fn csn(t: u64, sid: u16) -> Csn {
    Csn { phys_us: t, logical: 0, sid, partition: 0 }
}

fn add(t: u64, sid: u16, dn: &str, attrs: &[(&str, &[&str])]) -> Record {
    let attrs =
        attrs.iter().map(|(n, vs)| (n.to_string(), vs.iter().map(|v| v.as_bytes().to_vec()).collect())).collect();
    Record { csn: csn(t, sid), uuid: [1; 16], dn: dn.into(), change: Change::Add { attrs } }
}

fn modify(t: u64, sid: u16, deltas: Vec<Delta>) -> Record {
    Record { csn: csn(t, sid), uuid: [1; 16], dn: "cn=g,dc=x".into(), change: Change::Modify { deltas } }
}

fn vals(vs: &[&str]) -> Vec<Vec<u8>> {
    vs.iter().map(|v| v.as_bytes().to_vec()).collect()
}

fn state(records: &[Record]) -> EntryState {
    let mut s = EntryState::default();
    records.iter().for_each(|r| s.merge(r));
    s
}

fn group() -> Record {
    add(10, 1, "cn=g,dc=x", &[("objectClass", &["groupOfNames"]), ("cn", &["g"]), ("member", &["cn=a,dc=x"])])
}

#[test]
fn concurrent_member_additions_both_survive() {
    let a = modify(20, 1, vec![Delta::Add { attr: "member".into(), values: vals(&["cn=b,dc=x"]) }]);
    let b = modify(20, 2, vec![Delta::Add { attr: "member".into(), values: vals(&["cn=c,dc=x"]) }]);
    let s = state(&[group(), a, b]);
    let (_, attrs) = s.visible().unwrap();
    assert_eq!(attrs[2], ("member".to_string(), vals(&["cn=a,dc=x", "cn=b,dc=x", "cn=c,dc=x"])));
}

#[test]
fn single_valued_attributes_keep_the_last_writer() {
    let e = add(10, 1, "uid=u,dc=x", &[("objectClass", &["inetOrgPerson"]), ("displayName", &["one"])]);
    let replace = |t, sid, v: &str| {
        modify(
            t,
            sid,
            vec![
                Delta::Clear { attr: "displayName".into() },
                Delta::Add { attr: "displayName".into(), values: vals(&[v]) },
            ],
        )
    };
    let (later, earlier) = (replace(30, 1, "three"), replace(20, 2, "two"));
    let s = state(&[e.clone(), later.clone(), earlier.clone()]);
    assert_eq!(s.visible().unwrap().1[1].1, vals(&["three"]));
    assert_eq!(s, state(&[earlier, e, later]));
    // Concurrent plain adds to a single-valued attribute: the newest stays.
    let x = modify(40, 1, vec![Delta::Add { attr: "employeeNumber".into(), values: vals(&["1"]) }]);
    let y = modify(40, 2, vec![Delta::Add { attr: "employeeNumber".into(), values: vals(&["2"]) }]);
    let s = state(&[add(10, 1, "uid=u,dc=x", &[("objectClass", &["inetOrgPerson"])]), x, y]);
    assert_eq!(s.visible().unwrap().1[1].1, vals(&["2"]));
}

/// As slapd orders an entry: an attribute that lost every value and got
/// one again goes last (a replace, a rename dropping its old RDN value,
/// a delete and an add apart); one that always held a value stays.
#[test]
fn an_attribute_emptied_and_filled_again_goes_last() {
    let names = |s: &EntryState| s.visible().unwrap().1.into_iter().map(|(n, _)| n).collect::<Vec<_>>();
    let person =
        add(10, 1, "uid=a,dc=x", &[("objectClass", &["person"]), ("uid", &["a"]), ("cn", &["a"]), ("sn", &["s"])]);
    let v = |attr: &str, v: &str| (attr.to_string(), vals(&[v]));
    let (add_v, del_v) = (
        |(attr, values): (String, Vec<Vec<u8>>)| Delta::Add { attr, values },
        |(attr, values): (String, Vec<Vec<u8>>)| Delta::Delete { attr, values },
    );
    // Another value kept all along, or added before the last one went: in place.
    let kept = [modify(20, 1, vec![add_v(v("uid", "b"))]), modify(30, 1, vec![del_v(v("uid", "a"))])];
    let s = state(&[&[person.clone()][..], &kept].concat());
    assert_eq!(names(&s), ["objectClass", "uid", "cn", "sn"]);
    // The last value deleted by the change that adds another: last,
    // whatever the order within the change (slapd's consumer replaces it).
    let swapped = modify(20, 1, vec![add_v(v("cn", "c")), del_v(v("cn", "a"))]);
    assert_eq!(names(&state(&[person.clone(), swapped])), ["objectClass", "uid", "sn", "cn"]);
    // The old RDN value dropped as the new one came: last.
    let renamed = modify(20, 1, vec![Delta::Clear { attr: "uid".into() }, add_v(v("uid", "b"))]);
    assert_eq!(names(&state(&[person.clone(), renamed.clone()])), ["objectClass", "cn", "sn", "uid"]);
    // Deleted, then added later: last; then kept by a rename that adds a value: still last.
    let apart = [modify(20, 1, vec![del_v(v("cn", "a"))]), modify(30, 1, vec![add_v(v("cn", "b"))])];
    let s = state(&[&[person.clone()][..], &apart, &[modify(40, 1, vec![add_v(v("cn", "c"))])]].concat());
    assert_eq!(names(&s), ["objectClass", "uid", "sn", "cn"]);
    // A class added moves objectClass (slapd's consumer replaces it); one deleted does not.
    let class = |t, d: Delta| modify(t, 1, vec![d]);
    let s = state(&[person.clone(), class(20, add_v(v("objectClass", "extensibleObject")))]);
    assert_eq!(names(&s), ["uid", "cn", "sn", "objectClass"]);
    let s = state(&[
        add(10, 1, "uid=a,dc=x", &[("objectClass", &["person", "extensibleObject"]), ("uid", &["a"])]),
        class(20, del_v(v("objectClass", "extensibleObject"))),
    ]);
    assert_eq!(names(&s), ["objectClass", "uid"]);
    // In any order of arrival.
    let mut shuffled = vec![person, renamed];
    shuffled.reverse();
    assert_eq!(names(&state(&shuffled)), ["objectClass", "cn", "sn", "uid"]);
}

#[test]
fn a_delete_is_final() {
    let del = Record { csn: csn(20, 1), uuid: [1; 16], dn: "cn=g,dc=x".into(), change: Change::Delete };
    let older = modify(15, 2, vec![Delta::Add { attr: "member".into(), values: vals(&["cn=z,dc=x"]) }]);
    let newer = modify(25, 2, vec![Delta::Add { attr: "member".into(), values: vals(&["cn=z,dc=x"]) }]);
    assert_eq!(state(&[group(), del.clone(), older.clone(), newer.clone()]).visible(), None);
    assert_eq!(state(&[newer, del, group(), older]).visible(), None);
}

#[test]
fn values_compare_by_matching_rule_and_the_newest_spelling_wins() {
    let a = modify(20, 1, vec![Delta::Add { attr: "cn".into(), values: vals(&["Foo"]) }]);
    let b = modify(21, 2, vec![Delta::Add { attr: "CN".into(), values: vals(&["foo"]) }]);
    let s = state(&[group(), a, b]);
    assert_eq!(s.visible().unwrap().1[1], ("cn".to_string(), vals(&["g", "foo"])));
}

#[test]
fn conflicts_pick_the_later_add_and_rename_it() {
    let (a, b) = ([1u8; 16], [2u8; 16]);
    assert_eq!(conflict_loser((&a, csn(10, 1)), (&b, csn(11, 2))), &b);
    assert_eq!(conflict_loser((&b, csn(11, 2)), (&a, csn(10, 1))), &b);
    assert_eq!(
        conflict_dn(&a, "cn=x\\,y,ou=p,dc=x", 7),
        "entryUUID=01010101-0101-0101-0101-010101010101+coredirConflictSlot=7,ou=p,dc=x"
    );
    let slot = conflict_slot(&a, "cn=x,dc=x", 3, |dn| Some(dn.len() as u32 % 5));
    assert_eq!(conflict_dn(&a, "cn=x,dc=x", slot).len() % 5, 3);
}

#[test]
fn records_round_trip_and_garbage_is_refused() {
    let recs = [
        group(),
        modify(
            5,
            2,
            vec![
                Delta::Clear { attr: "cn".into() },
                Delta::Add { attr: "cn".into(), values: vals(&["x", "y"]) },
                Delta::Delete { attr: "member".into(), values: vals(&["cn=a,dc=x"]) },
            ],
        ),
        Record {
            csn: csn(6, 1),
            uuid: [9; 16],
            dn: "cn=g,dc=x".into(),
            change: Change::Rename {
                to: "cn=h,dc=x".into(),
                deltas: vec![Delta::Add { attr: "cn".into(), values: vals(&["h"]) }],
            },
        },
        Record { csn: csn(7, 1), uuid: [9; 16], dn: "cn=h,dc=x".into(), change: Change::Delete },
        Record { csn: csn(8, 2), uuid: [9; 16], dn: "cn=h,dc=x".into(), change: Change::Conflict { slot: 70000 } },
    ];
    for r in &recs {
        let mut buf = Vec::new();
        r.encode(&mut buf);
        assert_eq!(Record::decode(&buf).as_ref(), Some(r));
        let renamed = match &r.change {
            Change::Rename { to, .. } => Some((r.dn.as_str(), to.as_str())),
            _ => None,
        };
        assert_eq!(Record::renamed_dns(&buf), renamed);
        for cut in 0..buf.len() {
            assert_eq!(Record::decode(&buf[..cut]), None);
            // Never past the end: both DNs must be whole.
            let whole = renamed.is_some_and(|(from, to)| cut >= 37 + from.len() + 1 + 4 + to.len());
            assert_eq!(Record::renamed_dns(&buf[..cut]), renamed.filter(|_| whole));
        }
        buf.push(0);
        assert_eq!(Record::decode(&buf), None);
    }
    assert_eq!(Record::decode(&[1; 40]), None);
}

/// Random histories of adds, modifies, renames and deletes from two
/// servers, applied in random orders and with duplicates: every order
/// ends in the same state and the same visible entry.
#[test]
fn any_order_of_any_history_converges() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
    let attrs = ["member", "description", "cn", "displayName", "mail"];
    let values = ["a", "b", "B", "c", "d"];
    for _ in 0..500 {
        let mut history = vec![add(1, 1, "cn=g,dc=x", &[("objectClass", &["groupOfNames"]), ("cn", &["g"])])];
        for _ in 0..rng.gen_range(1..12) {
            let (t, sid) = (rng.gen_range(2..40), rng.gen_range(1..3));
            let attr = attrs.choose(&mut rng).unwrap().to_string();
            let (from, n) = (rng.gen_range(0..4), rng.gen_range(1..3));
            let some = vals(&values[from..(from + n).min(values.len())]);
            let dn = "cn=g,dc=x".to_string();
            let change = match rng.gen_range(0..11) {
                0 => Change::Delete,
                10 => Change::Conflict { slot: rng.gen_range(0..3) },
                1 => Change::Rename {
                    to: format!("cn=g{},dc=x", rng.gen_range(0..3)),
                    deltas: vec![Delta::Add { attr: "cn".into(), values: some }],
                },
                2..=4 => Change::Modify { deltas: vec![Delta::Add { attr, values: some }] },
                5..=6 => Change::Modify { deltas: vec![Delta::Delete { attr, values: some }] },
                _ => Change::Modify {
                    deltas: vec![Delta::Clear { attr: attr.clone() }, Delta::Add { attr, values: some }],
                },
            };
            history.push(Record { csn: csn(t, sid), uuid: [1; 16], dn, change });
        }
        let want = state(&history);
        // Any split of the history, merged apart and then joined
        // (a state moving between partitions), gives the same.
        let cut = rng.gen_range(0..=history.len());
        let mut joined = state(&history[..cut]);
        joined.join(&state(&history[cut..]));
        assert_eq!(joined, want, "history {history:?} joined at {cut}");
        for _ in 0..6 {
            let mut order = history.clone();
            order.extend(history.iter().filter(|_| rng.gen_bool(0.3)).cloned());
            order.shuffle(&mut rng);
            let got = state(&order);
            assert_eq!(got, want, "history {history:?}");
            assert_eq!(got.visible(), want.visible());
        }
    }
}
