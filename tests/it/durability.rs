use crate::support::*;
use ldap3::Scope;

#[test]
fn data_survives_a_restart() {
    let mut s = Server::start(2);
    let mut c = s.admin();
    for i in 0..50 {
        assert_eq!(add_user(&mut c, &format!("r{i}")).rc, 0);
    }
    assert_eq!(c.delete(&format!("uid=r0,{PEOPLE}")).unwrap().rc, 0);
    drop(c);
    s.restart();
    let mut c = s.admin();
    let dns = search_dns(&mut c, PEOPLE, Scope::OneLevel, "(uid=r*)");
    assert_eq!(dns.len(), 49);
    assert_eq!(s.conn().simple_bind(&format!("uid=r7,{PEOPLE}"), "pw-r7").unwrap().rc, 0);
    assert_eq!(add_user(&mut c, "r0").rc, 0, "writes continue after restart");
    assert_eq!(add_user(&mut c, "r1").rc, 68);
    // Each start reports every shard's data size.
    let log = std::fs::read_to_string(&s.stderr).unwrap();
    assert!(log.contains("coredir: shard 0: ") && log.contains("coredir: shard 1: "), "{log}");
}

#[test]
fn acknowledged_writes_survive_kill_9() {
    let mut s = Server::start(2);
    let url = s.url();
    // Writers keep adding until the server dies; every acknowledged add is recorded.
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let url = url.clone();
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                let Ok(mut c) = ldap3::LdapConn::new(&url) else {
                    return acked;
                };
                if c.simple_bind(ROOT_DN, ROOT_PW).is_err() {
                    return acked;
                }
                for i in 0.. {
                    let uid = format!("k{w}-{i}");
                    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| add_user(&mut c, &uid))) {
                        Ok(res) if res.rc == 0 => acked.push(uid),
                        _ => break,
                    }
                }
                acked
            })
        })
        .collect();
    // Kill once the writers have something acknowledged.
    let mut probe = s.conn();
    while search_dns(&mut probe, PEOPLE, Scope::OneLevel, "(uid=k*)").len() < 200 {
        assert!(!writers.iter().all(|w| w.is_finished()), "the writers stopped before the kill");
    }
    s.kill9();
    let acked: Vec<String> = writers.into_iter().flat_map(|w| w.join().unwrap()).collect();
    assert!(acked.len() >= 100, "only {} acknowledged", acked.len());
    s.launch();
    let mut c = s.admin();
    let present: std::collections::HashSet<String> =
        search_dns(&mut c, PEOPLE, Scope::OneLevel, "(uid=k*)").into_iter().collect();
    for uid in &acked {
        assert!(present.contains(&format!("uid={uid},{PEOPLE}")), "acknowledged {uid} lost");
    }
    // Whatever is present is whole and the tree is consistent.
    for dn in &present {
        let e = get_entry(&mut c, dn, vec!["*", "+"]).unwrap();
        assert!(e.attrs.contains_key("entryUUID") && e.attrs.contains_key("userPassword"), "{dn} is partial");
    }
    let n = get_entry(&mut c, PEOPLE, vec!["numSubordinates"]).unwrap().attrs["numSubordinates"][0]
        .parse::<usize>()
        .unwrap();
    // Counts left high by a write cut between two owners are repaired at start.
    assert_eq!(n, present.len(), "child count of ou=people");
}
