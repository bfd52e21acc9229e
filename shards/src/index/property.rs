//! Property test: for random entries and random filters, the candidates the
//! indexes give, checked against the filter, are exactly the entries a full
//! scan with the same filter finds; also after random modifies and deletes.
//! Seeds are fixed, so a failure reproduces.

use crate::dn::Dn;
use crate::entry::{Attr, Entry, EntryView, Mod};
use crate::store::{Engine, EngineKind, Options, ReadTxn, Store, SyncMode, Tree};
use crate::write::{run_batch, Stamp, WriteOp};
use crate::{filter, index};
use ldap3_proto::proto::{LdapFilter, LdapSubstringFilter};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeSet;

const FIRST: &[&str] = &["Alice", "alice", "Bob", "Carol", "Dave", "Ève", "Zoë"];
const LAST: &[&str] = &["Smith", "SMITH", "Smithson", "Jones", "de  la Cruz", "Müller", "O'Neil"];

fn pick<'a>(rng: &mut SmallRng, from: &[&'a str]) -> &'a str {
    from[rng.gen_range(0..from.len())]
}

fn attr(name: &str, vals: Vec<String>) -> Attr {
    Attr { name: name.into(), vals: vals.into_iter().map(String::into_bytes).collect() }
}

fn random_entry(rng: &mut SmallRng, i: usize) -> Entry {
    let (first, last) = (pick(rng, FIRST), pick(rng, LAST));
    let mut attrs = vec![
        attr("objectClass", vec!["top".into(), "inetOrgPerson".into(), "extensibleObject".into()]),
        attr("uid", vec![format!("u{}", rng.gen_range(0..40))]),
        attr("cn", vec![format!("{first} {last}")]),
        attr("sn", vec![last.to_string()]),
    ];
    if rng.gen_bool(0.7) {
        attrs.push(attr("mail", vec![format!("{}.{}@Example.com", first.to_lowercase(), rng.gen_range(0..9))]));
    }
    if rng.gen_bool(0.6) {
        attrs.push(attr("uidNumber", vec![rng.gen_range(-20..60).to_string()]));
    }
    if rng.gen_bool(0.5) {
        attrs.push(attr("description", vec![format!("{last} team")]));
    }
    // Long values (past the `sub` index's piece limit) are found too.
    if rng.gen_bool(0.1) {
        let filler = "x".repeat(rng.gen_range(250..400));
        let (other_first, other_last) = (pick(rng, FIRST), pick(rng, LAST));
        attrs[2].vals.push(format!("{other_first} {filler} {other_last}").into_bytes());
    }
    // The id decides the DN: `uid` values repeat, DNs may not.
    Entry { dn: format!("cn=e{i},dc=example,dc=com"), attrs }
}

fn random_item(rng: &mut SmallRng) -> LdapFilter {
    let attrs = ["uid", "cn", "sn", "mail", "uidNumber", "description", "objectClass", "commonName", "name"];
    let a = pick(rng, &attrs).to_string();
    let word = |rng: &mut SmallRng| {
        let w = match rng.gen_range(0..4) {
            0 => pick(rng, FIRST).to_string(),
            1 => pick(rng, LAST).to_string(),
            2 => format!("u{}", rng.gen_range(0..40)),
            _ => rng.gen_range(-20..60).to_string(),
        };
        let cut = rng.gen_range(1..=w.chars().count());
        // Pieces start at every position, odd and even (the `sub` index
        // keeps every second suffix; the lookup covers the other half).
        let skip = rng.gen_range(0..cut);
        w.chars().take(cut).skip(skip).collect::<String>()
    };
    match rng.gen_range(0..6) {
        0 => LdapFilter::Equality(a, word(rng)),
        1 => LdapFilter::Present(a),
        2 => LdapFilter::GreaterOrEqual(a, rng.gen_range(-20..60).to_string()),
        3 => LdapFilter::LessOrEqual(a, rng.gen_range(-20..60).to_string()),
        _ => LdapFilter::Substring(
            a,
            LdapSubstringFilter {
                initial: rng.gen_bool(0.5).then(|| word(rng)),
                any: (0..rng.gen_range(0..2)).map(|_| word(rng)).collect(),
                final_: rng.gen_bool(0.4).then(|| word(rng)),
            },
        ),
    }
}

fn random_filter(rng: &mut SmallRng, depth: usize) -> LdapFilter {
    if depth == 0 || rng.gen_bool(0.4) {
        return random_item(rng);
    }
    let kids = |rng: &mut SmallRng| (0..rng.gen_range(1..4)).map(|_| random_filter(rng, depth - 1)).collect();
    match rng.gen_range(0..3) {
        0 => LdapFilter::And(kids(rng)),
        1 => LdapFilter::Or(kids(rng)),
        _ => LdapFilter::Not(Box::new(random_filter(rng, depth - 1))),
    }
}

/// Compares the indexed and the scanned answer of `n` random filters;
/// returns how many were answered from indexes.
fn compare<S: Store>(store: &S, rng: &mut SmallRng, n: usize) -> usize {
    let txn = store.read().unwrap();
    let mut all: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    txn.scan(Tree::Id2entry, b"", b"", &mut |k, v| {
        all.push((k.to_vec(), v.to_vec()));
        true
    })
    .unwrap();
    let mut from_index = 0;
    for _ in 0..n {
        let f = random_filter(rng, 3);
        let node = filter::compile(&f);
        let scanned: BTreeSet<Vec<u8>> = all
            .iter()
            .filter(|(_, bytes)| node.matches(&EntryView::new(bytes).unwrap()))
            .map(|(id, _)| id.clone())
            .collect();
        let check = |candidates: &[index::Candidate], what: &str| {
            let candidates: BTreeSet<Vec<u8>> = candidates.iter().map(|c| c.to_vec()).collect();
            assert!(scanned.is_subset(&candidates), "index missed matches of {f:?} ({what})");
            let checked: BTreeSet<Vec<u8>> = candidates
                .into_iter()
                .filter(|id| {
                    let bytes = txn.get(Tree::Id2entry, id).unwrap().expect("a candidate exists");
                    node.matches(&EntryView::new(bytes).unwrap())
                })
                .collect();
            assert_eq!(checked, scanned, "{f:?} ({what})");
        };
        // Within a small budget of keys: the same candidates, or broad
        // (never fewer, and unindexed exactly when unbounded says so).
        let (left, per_term) = (rng.gen_range(0..300), rng.gen_range(1..200));
        let bounded = index::lookup(&txn, &node, &std::cell::Cell::new(left), per_term).unwrap();
        let Some(candidates) = index::candidates(&txn, &node).unwrap() else {
            assert_eq!(bounded, index::Found::Unindexed, "{f:?}");
            continue;
        };
        from_index += 1;
        check(&candidates, "unbounded");
        match bounded {
            index::Found::Ids(ids) => check(&ids, &format!("within {left} keys, {per_term} a term")),
            index::Found::Broad => {}
            index::Found::Unindexed => panic!("{f:?} unindexed within a budget"),
        }
    }
    from_index
}

#[test]
fn indexed_search_equals_full_scan() {
    install_indexes();
    for kind in [EngineKind::Lmdb, EngineKind::Sled] {
        let dir = tempfile::tempdir().unwrap();
        property(&Engine::open(dir.path(), Options::new(kind, SyncMode::Never)).unwrap());
    }
}

fn install_indexes() {
    index::install(
        index::Config::new([
            ("objectClass", "eq"),
            ("uid", "eq,sub,pres"),
            ("cn", "eq,sub"),
            ("sn", "eq,sub,pres"),
            ("mail", "eq,sub"),
            ("uidNumber", "eq,ordering,pres"),
        ])
        .unwrap(),
    )
    .unwrap();
}

/// Random entries, random filters, then random modifies and deletes.
fn property<S: Store>(store: &S) {
    let mut rng = SmallRng::seed_from_u64(4);
    let entries: Vec<Entry> = (0..400).map(|i| random_entry(&mut rng, i)).collect();
    let mut ops: Vec<WriteOp> = entries
        .iter()
        .map(|e| WriteOp::Add { key: Dn::parse(&e.dn).unwrap().key(), parent: None, entry: e.clone() })
        .collect();
    assert!(run_batch(store, |_| 0, &mut ops, &mut clock()).iter().all(|r| r.is_ok()));
    let used = compare(store, &mut rng, 600);
    assert!(used > 250, "only {used} of 600 filters used an index");

    // Modifies and deletes must keep the indexes exact.
    let stamp = Stamp { modifier: "cn=admin".into(), time: "20261130000000Z".into() };
    let mut ops = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let key = Dn::parse(&e.dn).unwrap().key();
        match i % 4 {
            0 => ops.push(WriteOp::Delete { key, dn: e.dn.clone(), parent: None, extras: Default::default() }),
            1 => {
                let other = random_entry(&mut rng, i);
                let mods = vec![
                    Mod::Replace(other.get("sn").unwrap().clone()),
                    Mod::Replace(attr("cn", vec![format!("e{i}"), "Changed Name".into()])),
                    Mod::Replace(attr("uidNumber", vec![rng.gen_range(-20..60).to_string()])),
                    Mod::Replace(attr("mail", vec![])),
                ];
                ops.push(WriteOp::Modify {
                    key,
                    dn: e.dn.clone(),
                    mods,
                    rdn: Vec::new(),
                    stamp: stamp.clone(),
                    extras: Default::default(),
                });
            }
            _ => {}
        }
    }
    let results = run_batch(store, |_| 0, &mut ops, &mut clock());
    assert!(results.iter().all(|r| r.is_ok()), "{:?}", results.iter().find(|r| r.is_err()));
    compare(store, &mut rng, 600);
}

fn clock() -> crate::write::Clock {
    let hlc = crate::csn::Hlc::new(1, None, crate::csn::DEFAULT_MAX_FORWARD_SKEW);
    crate::write::Clock { hlc, capture: false, incarnation: 0, contexts: Default::default(), commit_delay: None }
}
