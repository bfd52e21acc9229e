//! The crash harness: writers add, modify and delete entries and record
//! what was acknowledged; the server is killed with SIGKILL at a random
//! moment; after the restart every acknowledged change must be there,
//! nothing may be half-applied, the indexes must agree with the entries and
//! the child counts with the tree, and the server must start on its own.
//!
//! The regular suite runs a few iterations; the long mode runs 20 per
//! engine: `COREDIR_CRASH_ITERATIONS=20 cargo test --release --test it crash`.
//! Proves `storage.sync = "always"` (the default).

use crate::support::*;
use ldap3::{LdapConn, Mod, Scope, SearchEntry};
use rand::{Rng, SeedableRng};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

const WRITERS: usize = 4;

/// What a writer knows about one of its entries.
#[derive(Clone, Debug, PartialEq)]
enum State {
    Absent,
    /// Present with this `description`.
    Present(String),
}

/// A writer's view after the crash: the acknowledged state of each of its
/// entries, and the one operation whose outcome it never learned.
struct Outcome {
    acked: HashMap<String, State>,
    in_flight: Option<(String, State)>,
}

fn attrs<'a>(uid: &'a str, cn: &'a str, desc: &'a str) -> Vec<(&'a str, HashSet<&'a str>)> {
    vec![
        ("objectClass", HashSet::from(["inetOrgPerson"])),
        ("uid", HashSet::from([uid])),
        ("cn", HashSet::from([cn])),
        ("sn", HashSet::from(["Crash"])),
        ("description", HashSet::from([desc])),
        ("userPassword", HashSet::from(["pw"])),
    ]
}

/// Adds, modifies and deletes its own entries until the server dies.
fn writer(url: String, w: usize, round: usize, mut acked: HashMap<String, State>, total: Arc<AtomicUsize>) -> Outcome {
    let mut rng = rand::rngs::SmallRng::seed_from_u64((w * 1000 + round) as u64);
    let Ok(mut c) = LdapConn::new(&url) else { return Outcome { acked, in_flight: None } };
    if !c.simple_bind(ROOT_DN, ROOT_PW).is_ok_and(|r| r.rc == 0) {
        return Outcome { acked, in_flight: None };
    }
    for n in 0.. {
        let present: Vec<String> =
            acked.iter().filter(|(_, s)| matches!(s, State::Present(_))).map(|(k, _)| k.clone()).collect();
        let (uid, next) = match (rng.gen_range(0..10), present.is_empty()) {
            (0..=4, _) | (_, true) => (format!("c{w}-{round}-{n}"), State::Present("v0".into())),
            (5..=7, false) => (present[rng.gen_range(0..present.len())].clone(), State::Present(format!("v{n}"))),
            _ => (present[rng.gen_range(0..present.len())].clone(), State::Absent),
        };
        let dn = format!("uid={uid},{PEOPLE}");
        let before = acked.get(&uid).cloned().unwrap_or(State::Absent);
        let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match (&before, &next) {
            (State::Absent, State::Present(d)) => c.add(&dn, attrs(&uid, &format!("Crash {uid}"), d)),
            (State::Present(_), State::Present(d)) => {
                c.modify(&dn, vec![Mod::Replace("description", HashSet::from([d.as_str()]))])
            }
            _ => c.delete(&dn),
        }));
        match res {
            Ok(Ok(r)) if r.rc == 0 => {
                acked.insert(uid, next);
                total.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Ok(r)) => panic!("{dn}: unexpected result {r:?}"),
            // The connection died: this op may or may not have been applied.
            _ => return Outcome { acked, in_flight: Some((uid, next)) },
        }
    }
    unreachable!()
}

/// The entries under ou=people as `uid -> description`, found by `filter`.
fn people(c: &mut LdapConn, filter: &str) -> HashMap<String, String> {
    let (entries, _) = c.search(PEOPLE, Scope::OneLevel, filter, vec!["*", "+"]).unwrap().success().unwrap();
    entries
        .into_iter()
        .map(SearchEntry::construct)
        .filter(|e| e.attrs.get("uid").is_some_and(|u| u[0].starts_with('c')))
        .map(|e| {
            for attr in ["objectClass", "cn", "sn", "userPassword", "entryUUID", "createTimestamp", "description"] {
                assert!(e.attrs.contains_key(attr), "{} is partial: no {attr}", e.dn);
            }
            (e.attrs["uid"][0].clone(), e.attrs["description"][0].clone())
        })
        .collect()
}

fn check(c: &mut LdapConn, models: &[HashMap<String, State>], in_flight: &[Option<(String, State)>]) {
    let scanned = people(c, "(!(uid=nobody))");
    // Indexes agree with the entries: the substring and equality indexes
    // find exactly what a full scan finds.
    assert_eq!(people(c, "(uid=c*)"), scanned, "the uid substring index disagrees with a scan");
    for uid in scanned.keys().take(50) {
        assert_eq!(people(c, &format!("(uid={uid})")).len(), 1, "the uid equality index lost {uid}");
    }
    for (model, flight) in models.iter().zip(in_flight) {
        for (uid, state) in model {
            let found = scanned.get(uid).map(|d| State::Present(d.clone())).unwrap_or(State::Absent);
            match flight {
                Some((f, after)) if f == uid => {
                    assert!(found == *state || found == *after, "{uid}: {found:?} is neither {state:?} nor {after:?}")
                }
                _ => assert_eq!(&found, state, "{uid}: acknowledged state lost"),
            }
        }
    }
    let all = search_dns(c, PEOPLE, Scope::OneLevel, "(objectClass=*)").len();
    let n: usize = get_entry(c, PEOPLE, vec!["numSubordinates"]).unwrap().attrs["numSubordinates"][0].parse().unwrap();
    assert_eq!(n, all, "child count of ou=people");
}

#[test]
fn crash_harness() {
    let iterations: usize = std::env::var("COREDIR_CRASH_ITERATIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
    let mut s = Server::start(2);
    let mut models: Vec<HashMap<String, State>> = vec![HashMap::new(); WRITERS];
    for round in 0..iterations {
        let total = Arc::new(AtomicUsize::new(0));
        let handles: Vec<_> = models
            .iter()
            .cloned()
            .enumerate()
            .map(|(w, model)| {
                let (url, total) = (s.url(), total.clone());
                std::thread::spawn(move || writer(url, w, round, model, total))
            })
            .collect();
        // A random moment: after a random number of acknowledged writes.
        let kill_after = rng.gen_range(20..300);
        while total.load(Ordering::Relaxed) < kill_after {
            assert!(!handles.iter().all(|h| h.is_finished()), "the writers stopped before the kill");
            std::thread::yield_now();
        }
        s.kill9();
        let outcomes: Vec<Outcome> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        s.launch();
        let mut c = s.admin();
        let in_flight: Vec<_> = outcomes.iter().map(|o| o.in_flight.clone()).collect();
        models = outcomes.into_iter().map(|o| o.acked).collect();
        check(&mut c, &models, &in_flight);
        // The in-flight operation's outcome is now known: learn it.
        let scanned = people(&mut c, "(!(uid=nobody))");
        for (model, flight) in models.iter_mut().zip(in_flight) {
            if let Some((uid, _)) = flight {
                let state = scanned.get(&uid).map(|d| State::Present(d.clone())).unwrap_or(State::Absent);
                model.insert(uid, state);
            }
        }
    }
}
