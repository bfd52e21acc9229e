//! `run_batch` on a temporary store, driven by scripts: each step a batch
//! of ops and the result code each must get, then the tree the steps must
//! leave. A refused op leaves no trace and the rest of its batch commits
//! (invariant 4 of the crate).

use super::*;
use crate::entry::Attr;
use crate::store::lmdb::LmdbStore;
use crate::store::SyncMode;
use LdapResultCode::*;

fn dn(s: &str) -> Dn {
    Dn::parse(s).unwrap()
}

fn entry(d: &str, attrs: &[(&str, &str)]) -> Entry {
    let attrs = attrs.iter().map(|(n, v)| Attr { name: n.to_string(), vals: vec![v.as_bytes().to_vec()] }).collect();
    Entry { dn: d.into(), attrs }
}

fn parent(d: &str) -> Option<Parent> {
    Some(Parent::of(&dn(d)))
}

fn add(d: &str) -> WriteOp {
    let rdn = d.split(',').next().unwrap();
    let (attr, value) = rdn.split_once('=').unwrap();
    let class = match attr {
        "dc" => "domain",
        "ou" => "organizationalUnit",
        _ => "account",
    };
    let suffix = d == "dc=x";
    let entry = entry(d, &[("objectClass", class), (attr, value)]);
    WriteOp::Add { key: dn(d).key(), parent: if suffix { None } else { parent(d) }, entry }
}

fn delete(d: &str) -> WriteOp {
    WriteOp::Delete { key: dn(d).key(), dn: d.into(), parent: parent(d), extras: Extras::default() }
}

fn modify(d: &str, description: &str, assertion: Option<LdapFilter>) -> WriteOp {
    let mods = vec![Mod::Replace(Attr { name: "description".into(), vals: vec![description.as_bytes().to_vec()] })];
    let stamp = Stamp { modifier: "cn=admin".into(), time: "20261205000000Z".into() };
    let extras = Extras { assertion, ..Extras::default() };
    WriteOp::Modify { key: dn(d).key(), dn: d.into(), mods, rdn: vec![], stamp, extras }
}

fn rename(old: &str, new: &str) -> WriteOp {
    let uid = new.split(',').next().unwrap().trim_start_matches("uid=");
    let entry = entry(new, &[("objectClass", "account"), ("uid", uid)]);
    WriteOp::Move {
        old_key: dn(old).key(),
        old_dn: old.into(),
        old_parent: parent(old),
        new_key: dn(new).key(),
        new_parent: parent(new),
        entry,
        moving: Moving::Leaf,
    }
}

fn child(d: &str, delta: i64) -> WriteOp {
    WriteOp::Child { parent: Parent::of(&dn(&format!("cn=c,{d}"))), delta }
}

/// Runs each step as one batch and checks every op's result code.
fn run(store: &LmdbStore, steps: Vec<(&str, Vec<WriteOp>, Vec<LdapResultCode>)>) {
    let manifest = Manifest::new(1, vec!["dc=x".into()], "cn=admin".into(), String::new());
    let mut clock = clock(store, Stamping::standalone(1), &manifest).unwrap();
    for (what, mut ops, want) in steps {
        let got: Vec<_> = run_batch(store, |_| 0, &mut ops, &mut clock)
            .into_iter()
            .map(|r| r.map_or_else(|e| e.code, |_| Success))
            .collect();
        assert_eq!(got, want, "{what}");
    }
}

/// The DNs a store holds, and the child count of each that has children.
fn tree(store: &LmdbStore) -> Vec<(String, u64)> {
    let txn = store.read().unwrap();
    let mut keys = Vec::new();
    txn.dn_keys(b"", b"", &mut |k, _| {
        keys.push(k.to_vec());
        true
    })
    .unwrap();
    keys.iter()
        .map(|k| {
            let (_, view) = txn.entry(k).unwrap().unwrap();
            (view.dn().to_string(), children(&txn, k).unwrap())
        })
        .collect()
}

fn store() -> (tempfile::TempDir, LmdbStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = LmdbStore::open(dir.path(), SyncMode::Never, 1 << 24).unwrap();
    (dir, store)
}

#[test]
fn refused_ops_leave_no_trace_and_their_batch_commits() {
    let (_dir, store) = store();
    run(
        &store,
        vec![
            ("a tree", vec![add("dc=x"), add("ou=a,dc=x"), add("uid=1,ou=a,dc=x")], vec![Success; 3]),
            (
                "an orphan and a duplicate are refused, the rest commits",
                vec![add("uid=2,ou=gone,dc=x"), add("uid=1,ou=a,dc=x"), add("uid=3,ou=a,dc=x")],
                vec![NoSuchObject, EntryAlreadyExists, Success],
            ),
            ("a parent with children stays", vec![delete("ou=a,dc=x")], vec![NotAllowedOnNonLeaf]),
            ("a leaf that is not there", vec![delete("uid=9,ou=a,dc=x")], vec![NoSuchObject]),
            ("a count under a missing parent", vec![child("ou=gone,dc=x", 1)], vec![NoSuchObject]),
        ],
    );
    assert_eq!(
        tree(&store),
        [("dc=x".into(), 1), ("ou=a,dc=x".into(), 2), ("uid=1,ou=a,dc=x".into(), 0), ("uid=3,ou=a,dc=x".into(), 0)]
    );
}

#[test]
fn an_assertion_that_fails_changes_nothing() {
    let (_dir, store) = store();
    let holds = |v: &str| Some(LdapFilter::Equality("description".into(), v.into()));
    run(
        &store,
        vec![
            ("a tree", vec![add("dc=x"), add("uid=1,dc=x")], vec![Success; 2]),
            ("a first value", vec![modify("uid=1,dc=x", "one", None)], vec![Success]),
            ("asserted wrong", vec![modify("uid=1,dc=x", "two", holds("nope"))], vec![AssertionFailed]),
            ("asserted right", vec![modify("uid=1,dc=x", "three", holds("one"))], vec![Success]),
            ("a missing entry", vec![modify("uid=9,dc=x", "x", None)], vec![NoSuchObject]),
        ],
    );
    let txn = store.read().unwrap();
    let (_, view) = txn.entry(&dn("uid=1,dc=x").key()).unwrap().unwrap();
    let values: Vec<_> = view.get("description").unwrap().vals().collect();
    assert_eq!(values, [&b"three"[..]]);
}

#[test]
fn renames_and_deletes_keep_child_counts_in_one_batch() {
    let (_dir, store) = store();
    run(
        &store,
        vec![
            (
                "a tree",
                vec![add("dc=x"), add("ou=a,dc=x"), add("uid=1,ou=a,dc=x"), add("uid=2,ou=a,dc=x")],
                vec![Success; 4],
            ),
            ("a leaf moves up", vec![rename("uid=2,ou=a,dc=x", "uid=2,dc=x")], vec![Success]),
            ("onto a taken DN", vec![rename("uid=1,ou=a,dc=x", "uid=2,dc=x")], vec![EntryAlreadyExists]),
            (
                "the last child, then its parent, in one batch",
                vec![delete("uid=1,ou=a,dc=x"), delete("ou=a,dc=x")],
                vec![Success, Success],
            ),
        ],
    );
    assert_eq!(tree(&store), [("dc=x".into(), 1), ("uid=2,dc=x".into(), 0)]);
}

/// One origin's record: its stream's `seq`th, at `us` on its clock.
fn record(sid: u16, seq: u64, us: u64, change: crate::merge::Change) -> WriteOp {
    let csn = Csn { phys_us: us, logical: 0, sid, partition: 0 };
    let rec = Record { csn, uuid: [7; 16], dn: "uid=u,dc=x".into(), change };
    WriteOp::Replicate { origin: changelog::Origin { sid, incarnation: 0 }, seq, rec }
}

fn values(attr: &str, vs: &[&str]) -> crate::merge::Delta {
    crate::merge::Delta::Add { attr: attr.into(), values: vs.iter().map(|v| v.as_bytes().to_vec()).collect() }
}

/// What the replicated entry shows: its DN and its sorted descriptions.
fn shown(store: &LmdbStore) -> Option<(String, Vec<String>)> {
    let txn = store.read().unwrap();
    let (_, view) = txn.entry(&dn("uid=u,dc=x").key()).unwrap()?;
    let mut d: Vec<String> = view
        .get("description")
        .map(|a| a.vals().map(|v| String::from_utf8_lossy(v).into()).collect())
        .unwrap_or_default();
    d.sort();
    Some((view.dn().to_string(), d))
}

/// Two origins' streams applied in either order give one entry: a Replace
/// wins over the values stamped before it, not over those after; a record
/// applied again is a duplicate (done, nothing changes); one after a gap
/// is refused with busy (the channel resumes from the vector).
#[test]
fn replicated_streams_converge_in_any_order() {
    use crate::merge::{Change, Delta};
    let a = || {
        let add = Change::Add {
            attrs: vec![
                ("objectClass".into(), vec![b"account".to_vec()]),
                ("uid".into(), vec![b"u".to_vec()]),
                ("entryUUID".into(), vec![b"07070707-0707-0707-0707-070707070707".to_vec()]),
                ("description".into(), vec![b"a".to_vec()]),
            ],
        };
        let replace = Change::Modify {
            deltas: vec![Delta::Clear { attr: "description".into() }, values("description", &["a2"])],
        };
        vec![record(2, 1, 10, add), record(2, 2, 30, replace)]
    };
    let b = || {
        vec![
            record(3, 1, 20, Change::Modify { deltas: vec![values("description", &["b"])] }),
            record(3, 2, 40, Change::Modify { deltas: vec![values("description", &["b2"])] }),
        ]
    };
    let want = Some(("uid=u,dc=x".to_string(), vec!["a2".to_string(), "b2".to_string()]));
    let mut seen = Vec::new();
    for streams in [[a(), b()], [b(), a()]] {
        let (_dir, store) = store();
        let [first, second] = streams;
        run(
            &store,
            vec![
                ("the suffix", vec![add("dc=x")], vec![Success]),
                ("one origin", first, vec![Success; 2]),
                ("the other", second, vec![Success; 2]),
                ("a duplicate, whatever it says", vec![record(2, 2, 30, Change::Delete)], vec![Success]),
                ("past a gap", vec![record(3, 5, 50, Change::Delete)], vec![Busy]),
            ],
        );
        assert_eq!(shown(&store), want);
        seen.push(tree(&store));
    }
    assert_eq!(seen[0], seen[1]);
}
