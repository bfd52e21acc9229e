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

/// LMDB's map grows instead of failing with map-full: online adds with two
/// shards serving reads meanwhile, the restart, and an import of the
/// result, each far past a 16 MiB `storage.map_size_mb`.
#[test]
fn the_lmdb_map_grows_when_needed() {
    if engine() != "lmdb" {
        return; // sled has no map to grow
    }
    let small = "[storage]\nmap_size_mb = 16\n";
    let mut s = Server::start_with_config(2, small);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (mut c, stop) = (s.admin(), stop.clone());
            std::thread::spawn(move || {
                let mut reads = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    assert_eq!(search_dns(&mut c, PEOPLE, Scope::Base, "(objectClass=*)").len(), 1);
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    // 160 entries of 200 KiB: 32 MiB, twice what the maps start with.
    add_devices(&mut s.admin(), "big", 160, 200 << 10);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for r in readers {
        assert!(r.join().expect("reader") > 0);
    }
    let log = std::fs::read_to_string(&s.stderr).unwrap();
    assert!(log.contains("LMDB map grown from 16 MiB to 32 MiB"), "{log}");
    let count = |s: &Server| get_entry(&mut s.admin(), PEOPLE, vec!["numSubordinates"]).unwrap().attrs;
    assert_eq!(count(&s)["numSubordinates"], vec!["160"]);
    s.restart();
    assert_eq!(count(&s)["numSubordinates"], vec!["160"]);
    let e = get_entry(&mut s.admin(), &format!("cn=big159,{PEOPLE}"), vec!["description"]).unwrap();
    assert_eq!(e.attrs["description"][0].len(), 200 << 10);
    add_devices(&mut s.admin(), "more", 1, 200 << 10);
    // An import of all that into a new directory grows its map up front.
    let dump = s.dir.path().join("dump.ldif");
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_coredir")).args(args).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    let (config, data) = (s.config_path(), s.dir.path().join("imported"));
    run(&[
        "export",
        "--config",
        config.to_str().unwrap(),
        "--data",
        s.data().to_str().unwrap(),
        "--out",
        dump.to_str().unwrap(),
    ]);
    run(&[
        "import",
        "--config",
        config.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
        "--shards",
        "1",
        dump.to_str().unwrap(),
    ]);
    let again = s.dir.path().join("again.ldif");
    run(&[
        "export",
        "--config",
        config.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
        "--out",
        again.to_str().unwrap(),
    ]);
    assert!(std::fs::read(&dump).unwrap() == std::fs::read(&again).unwrap(), "the imported copy differs");
}

/// A tmpfs of `mib` MiB mounted at `dir` for the life of the value (a
/// full disk on demand); `None` where this machine lets nobody mount.
struct SmallDisk(std::path::PathBuf);

impl SmallDisk {
    fn mount(dir: &std::path::Path, mib: u32) -> Option<SmallDisk> {
        std::fs::create_dir_all(dir).unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| SmallDisk(dir.to_path_buf()))
    }

    /// Writes a file until the disk refuses more; returns its path.
    fn fill(&self) -> std::path::PathBuf {
        use std::io::Write;
        let path = self.0.join("filler");
        let mut f = std::fs::File::create(&path).unwrap();
        for chunk in [1 << 20, 4096, 512] {
            let block = vec![0u8; chunk];
            while f.write_all(&block).and_then(|_| f.flush()).is_ok() {}
        }
        path
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn a_full_disk_refuses_writes_and_recovers_when_space_returns() {
    let mut s = Server::prepare(1, "");
    let Some(disk) = SmallDisk::mount(&s.data(), 64) else {
        eprintln!("SKIPPED a_full_disk_refuses_writes_and_recovers_when_space_returns: cannot mount a tmpfs here");
        return;
    };
    s.launch();
    let mut c = s.admin();
    assert_eq!(add_user(&mut c, "before").rc, 0);
    let filler = disk.fill();
    // A write may still fit where the store has room it already holds;
    // each is then kept. The first that does not is refused with 80 and
    // the reason, and nothing of it shows afterwards: no write the client
    // was told failed may appear, now or after a restart.
    let big = "x".repeat(8192);
    let (mut kept, mut refused) = (vec![format!("uid=before,{PEOPLE}")], 0);
    for i in 0..400 {
        let dn = format!("uid=full{i},{PEOPLE}");
        let r = c
            .add(
                &dn,
                vec![
                    ("objectClass", ["inetOrgPerson"].into()),
                    ("uid", [format!("full{i}").as_str()].into()),
                    ("cn", ["x"].into()),
                    ("sn", ["x"].into()),
                    ("description", [big.as_str()].into()),
                ],
            )
            .unwrap();
        match r.rc {
            0 => kept.push(dn),
            80 => {
                assert!(r.text.contains("No space left on device"), "{r:?}");
                assert!(get_entry(&mut c, &dn, vec!["uid"]).is_none(), "full{i} was refused but shows");
                refused += 1;
                if refused == 3 {
                    break;
                }
            }
            _ => panic!("full{i}: {r:?}"),
        }
    }
    assert_eq!(refused, 3, "the disk never filled up");
    assert_eq!(s.conn().simple_bind(&format!("uid=before,{PEOPLE}"), "pw-before").unwrap().rc, 0, "reads go on");
    std::fs::remove_file(filler).unwrap();
    assert_eq!(add_user(&mut c, "after").rc, 0, "writes resume once space returns, without a restart");
    kept.push(format!("uid=after,{PEOPLE}"));
    kept.sort();
    drop(c);
    s.restart();
    let mut c = s.admin();
    assert_eq!(search_dns(&mut c, PEOPLE, Scope::OneLevel, "(uid=*)"), kept);
    drop(c);
    s.stop();
}

/// Issue 17 item 12: after a kill -9, a server started again on the same
/// port serves every connection made as soon as it says `listening`: none
/// is reset, none lands on a listener of the killed process (io_uring can
/// keep those open for a moment after the process is gone).
#[test]
fn connections_right_after_a_restart_on_the_same_port_are_all_served() {
    let mut s = Server::start(2);
    for round in 0..8 {
        // Idle clients keep reads pending in the old process's rings.
        let idle: Vec<_> = (0..8).map(|_| s.admin()).collect();
        s.restart();
        drop(idle);
        let burst: Vec<_> = (0..32)
            .map(|i| {
                let url = s.url();
                std::thread::spawn(move || -> Result<(), String> {
                    let mut c = ldap3::LdapConn::new(&url).map_err(|e| format!("connect {i}: {e}"))?;
                    let r = c.simple_bind(ROOT_DN, ROOT_PW).map_err(|e| format!("bind {i}: {e}"))?;
                    if r.rc != 0 {
                        return Err(format!("bind {i}: {r:?}"));
                    }
                    Ok(())
                })
            })
            .collect();
        for t in burst {
            t.join().unwrap().unwrap_or_else(|e| panic!("round {round}: {e}"));
        }
    }
}
