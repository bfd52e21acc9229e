//! The channel itself: writes crossing, status and lag, refusals, TLS and the sockets it accepts.

use super::*;

#[test]
fn a_write_on_either_side_is_readable_on_the_other() {
    let (a, b) = pair(2);
    assert_eq!(add_user(&mut a.admin(), "froma").rc, 0);
    assert_eq!(add_user(&mut b.admin(), "fromb").rc, 0);
    let (mut ca, mut cb) = (a.admin(), b.admin());
    wait_for("A's add on B", || get_entry(&mut cb, &format!("uid=froma,{PEOPLE}"), vec!["uid"]).is_some());
    wait_for("B's add on A", || get_entry(&mut ca, &format!("uid=fromb,{PEOPLE}"), vec!["uid"]).is_some());
    // A replicated user can bind on the other side; the parent counts it.
    assert_eq!(b.conn().simple_bind(&format!("uid=froma,{PEOPLE}"), "pw-froma").unwrap().rc, 0);
    wait_for("the count", || attr(&mut cb, PEOPLE, "numSubordinates") == Some(vec!["2".to_string()]));
    // Modify and delete travel too.
    let dn = format!("uid=froma,{PEOPLE}");
    assert_eq!(ca.modify(&dn, vec![Mod::Replace("sn", ["Changed"].into())]).unwrap().rc, 0);
    wait_for("the modify on B", || attr(&mut cb, &dn, "sn") == Some(vec!["Changed".into()]));
    assert_eq!(cb.delete(&dn).unwrap().rc, 0);
    wait_for("the delete on A", || get_entry(&mut ca, &dn, vec!["uid"]).is_none());
    converged(&a, &b);
    // The counters follow the commits they count (the data shows first).
    wait_for("A's status to count B's two records", || {
        let status = replication(&a);
        status["outbound"] == "streaming"
            && status["inbound"] == "streaming"
            && status["records_applied"].as_u64().unwrap_or(0) >= 2
    });
    // The same under cn=Monitor and in the metrics.
    let info = attr(&mut ca, "cn=Replication,cn=Monitor", "monitoredInfo").unwrap_or_default().join(" ");
    assert!(info.contains("sending=streaming") && info.contains("receiving=streaming"), "{info}");
    let (_, metrics, _) = ctl(&a, &["metrics"]);
    for name in ["coredir_replication_records_applied_total", "coredir_replication_lag_seconds"] {
        assert!(metrics.contains(name), "{name} missing");
    }
    // A rename travels: the entry leaves its old DN on B and shows at the new one.
    let res = ca.modifydn(&format!("uid=fromb,{PEOPLE}"), "uid=renamed", true, None).unwrap();
    assert_eq!(res.rc, 0, "{res:?}");
    wait_for("the rename on B", || get_entry(&mut cb, &format!("uid=renamed,{PEOPLE}"), vec!["uid"]).is_some());
    assert!(get_entry(&mut cb, &format!("uid=fromb,{PEOPLE}"), vec!["uid"]).is_none());
    converged(&a, &b);
}

#[test]
fn writes_made_apart_converge_after_reconnection() {
    let (mut a, mut b) = pair(2);
    apart(
        &mut a,
        &mut b,
        |a| {
            for i in 0..30 {
                assert_eq!(add_user(&mut a.admin(), &format!("a{i}")).rc, 0);
            }
        },
        |b| {
            for i in 0..30 {
                assert_eq!(add_user(&mut b.admin(), &format!("b{i}")).rc, 0);
            }
            group(&mut b.admin(), "apart");
        },
    );
    converged(&a, &b);
    let mut c = a.admin();
    assert_eq!(search_dns(&mut c, PEOPLE, Scope::OneLevel, "(uid=*)").len(), 60);
    // Parents are counted after their children's records are applied.
    for s in [&a, &b] {
        let mut c = s.admin();
        wait_for("the count", || attr(&mut c, PEOPLE, "numSubordinates") == Some(vec!["60".to_string()]));
    }
}

#[test]
fn a_peer_whose_clock_runs_ten_minutes_ahead_is_refused() {
    let (a, b) = pair_with(1, &[("COREDIR_TEST_CLOCK_OFFSET_S", "600")]);
    assert_eq!(add_user(&mut b.admin(), "future").rc, 0);
    wait_for("A's refusal", || replication(&a)["inbound"] == "refused");
    let status = replication(&a);
    assert!(status["refused"][0].as_str().unwrap().contains("ahead"), "{status}");
    wait_for("B told", || replication(&b)["outbound"] == "refused");
    // Not adopted: A's own changes keep A's time, and still reach B.
    assert!(get_entry(&mut a.admin(), &format!("uid=future,{PEOPLE}"), vec!["uid"]).is_none());
    assert_eq!(add_user(&mut a.admin(), "present").rc, 0);
    let csn = get_entry(&mut a.admin(), &format!("uid=present,{PEOPLE}"), vec!["entryCSN"]).unwrap().attrs["entryCSN"]
        [0]
    .clone();
    let now = shards::csn::Csn::parse(&csn).unwrap().phys_us as i64;
    let wall = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as i64;
    assert!((now - wall).abs() < 60_000_000, "A's clock moved: {csn}");
    wait_for("A's add on B", || get_entry(&mut b.admin(), &format!("uid=present,{PEOPLE}"), vec!["uid"]).is_some());
}

#[test]
fn a_peer_without_the_secret_or_with_another_database_is_refused() {
    let (pa, pb) = (free_port(), free_port());
    let a = Server::start_with_config(1, &mirror_conf(1, pa, pb));
    // B: a database of its own, not a restore of A's.
    let b = Server::start_with_config(1, &mirror_conf(2, pb, pa));
    wait_for("A refusing B", || replication(&a)["outbound"] == "refused");
    let err = replication(&a)["outbound_error"].as_str().unwrap().to_string();
    assert!(err.contains("another database"), "{err}");
    drop(b);
    // C: A's database, the wrong secret.
    let c = seeded_from(&a, &mirror_conf(2, pb, pa).replace("test-pair-secret", "wrong"), &[]);
    wait_for("A refusing C", || replication(&a)["inbound"] == "refused");
    let err = replication(&a)["inbound_error"].as_str().unwrap().to_string();
    assert!(err.contains("secret"), "{err}");
    assert_eq!(add_user(&mut c.admin(), "never").rc, 0);
    assert_eq!(replication(&a)["records_applied"], 0);
    // C retries every second; A counts each refusal but logs it once.
    wait_for("three refusals", || replication(&a)["refusals"].as_u64().unwrap_or(0) >= 3);
    let log = std::fs::read_to_string(&a.stderr).unwrap_or_default();
    assert_eq!(log.lines().filter(|l| l.contains("from the peer: refused")).count(), 1, "{log}");
}

/// While the peer is away, the status tells the truth: the backlog counts
/// what it lacks and the lag grows with the oldest of it; once healed, the
/// error of the outage is gone.
#[test]
fn the_status_during_a_partition_is_live_and_clears_when_healed() {
    status_during_a_partition(pair(2));
}

/// The same once A's clock adopted B's stamps from 30 s ahead (one shard,
/// so that every change A makes apart is stamped by that clock): CSNs then
/// stand still, and the lag must still grow with the outage.
#[test]
fn the_lag_during_a_partition_grows_when_the_peer_stamps_ahead() {
    let (a, b) = pair_with(1, &[("COREDIR_TEST_CLOCK_OFFSET_S", "30")]);
    assert_eq!(add_user(&mut b.admin(), "ahead").rc, 0);
    wait_for("B's add on A", || get_entry(&mut a.admin(), &format!("uid=ahead,{PEOPLE}"), vec!["uid"]).is_some());
    status_during_a_partition((a, b));
}

#[test]
fn garbage_on_the_replication_port_is_refused_and_the_server_carries_on() {
    use std::io::{Read, Write};
    let (pa, pb) = (free_port(), free_port());
    let a = Server::start_with_config(1, &mirror_conf(1, pa, pb));
    for junk in [vec![0xff, 0xff, 0xff, 0xff, 1, 2, 3], b"\x00\x00\x00\x05hello".to_vec()] {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", pa)).unwrap();
        let mut len = [0u8; 4];
        s.read_exact(&mut len).unwrap();
        let mut challenge = vec![0u8; u32::from_be_bytes(len) as usize];
        s.read_exact(&mut challenge).unwrap();
        assert!(String::from_utf8_lossy(&challenge).contains("Challenge"));
        s.write_all(&junk).unwrap();
        // The server hangs up on it.
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
    }
    wait_for("the refusal reported", || !replication(&a)["inbound_error"].as_str().unwrap().is_empty());
    assert_eq!(add_user(&mut a.admin(), "still-here").rc, 0);
}

#[test]
fn the_channel_runs_over_tls_with_pinned_certificates() {
    let dir = tempfile::tempdir().unwrap();
    let (pa, pb) = (free_port(), free_port());
    let ((a_id, a_fp), (b_id, b_fp), (c_id, _)) =
        (identity(dir.path(), "a"), identity(dir.path(), "b"), identity(dir.path(), "c"));
    // No secret: the pinned certificates authenticate both ends.
    let conf = |id: u32, listen: u16, peer: u16, own: &str, pin: &str| {
        format!(
            "[server]\nid = {id}\n[replication]\nlisten = \"127.0.0.1:{listen}\"\npeer = \"127.0.0.1:{peer}\"\n\
             peer_certificate_sha256 = \"{pin}\"\n{own}"
        )
    };
    let a = Server::start_with_config(1, &conf(1, pa, pb, &a_id, &b_fp));
    assert!(a.banner.contains("replication over TLS"), "{}", a.banner);
    let b = seeded_from(&a, &conf(2, pb, pa, &b_id, &a_fp), &[]);
    assert_eq!(add_user(&mut a.admin(), "over-tls").rc, 0);
    assert_eq!(add_user(&mut b.admin(), "back-over-tls").rc, 0);
    wait_for("A's add on B", || get_entry(&mut b.admin(), &format!("uid=over-tls,{PEOPLE}"), vec!["uid"]).is_some());
    wait_for("B's add on A", || {
        get_entry(&mut a.admin(), &format!("uid=back-over-tls,{PEOPLE}"), vec!["uid"]).is_some()
    });
    drop(b);
    // C has A's database and pins A, but its certificate is not the one A pins.
    let c = seeded_from(&a, &conf(2, pb, pa, &c_id, &a_fp), &[]);
    wait_for("A refusing C's certificate", || {
        let status = replication(&a);
        let pinned = |key: &str| {
            status[key].as_str().unwrap().contains("is not the one replication.peer_certificate_sha256 pins")
        };
        pinned("outbound_error") && pinned("inbound_error")
    });
    assert_eq!(add_user(&mut c.admin(), "never").rc, 0);
    assert!(get_entry(&mut a.admin(), &format!("uid=never,{PEOPLE}"), vec!["uid"]).is_none());
}

#[test]
fn both_naming_contexts_replicate_and_a_peer_serving_others_is_refused() {
    let contexts = format!("[directory]\nsuffixes = [{SUFFIX:?}, \"o=second\"]\n");
    let (pa, pb) = (free_port(), free_port());
    let a = Server::start_with_config(2, &(contexts.clone() + &mirror_conf(1, pa, pb)));
    let b = seeded_from(&a, &(contexts.clone() + &mirror_conf(2, pb, pa)), &[]);
    let (mut ca, mut cb) = (a.admin(), b.admin());
    assert_eq!(ca.add("cn=a1,o=second", person_attrs("a1")).unwrap().rc, 0);
    assert_eq!(cb.add("cn=b1,o=second", person_attrs("b1")).unwrap().rc, 0);
    wait_for("A's add on B", || get_entry(&mut cb, "cn=a1,o=second", vec!["cn"]).is_some());
    wait_for("B's add on A", || get_entry(&mut ca, "cn=b1,o=second", vec!["cn"]).is_some());
    assert_eq!(ca.modifydn("cn=a1,o=second", "cn=a2", true, None).unwrap().rc, 0);
    wait_for("the rename on B", || get_entry(&mut cb, "cn=a2,o=second", vec!["cn"]).is_some());
    drop((a, b, ca, cb));

    // A peer that also serves o=third (no entry yet) would get changes it
    // cannot place: refused, naming the contexts.
    let (pa, pb) = (free_port(), free_port());
    let a = Server::start_with_config(1, &(contexts.clone() + &mirror_conf(1, pa, pb)));
    let more = format!("[directory]\nsuffixes = [{SUFFIX:?}, \"o=second\", \"o=third\"]\n");
    let _b = seeded_from(&a, &(more + &mirror_conf(2, pb, pa)), &[]);
    wait_for("A refusing B", || replication(&a)["outbound"] == "refused");
    let err = replication(&a)["outbound_error"].as_str().unwrap().to_string();
    assert!(err.contains("naming contexts") && err.contains("o=third"), "{err}");
}

/// A peer on this host, down, whose port lies in the kernel's ephemeral
/// range: the kernel may give the socket connecting to it that very port,
/// and the socket connects to itself. Held, it kept the peer from binding
/// its port when it came back. Made certain here in a network namespace
/// of its own whose ephemeral range is that one port.
#[test]
fn a_socket_connected_to_itself_is_dropped_and_the_peer_can_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name).display().to_string();
    let conf = |listen: u16, peer: u16| {
        format!(
            "[server]\nid = {}\n[replication]\nlisten = \"127.0.0.1:{listen}\"\npeer = \"127.0.0.1:{peer}\"\nsecret = \"s\"\n",
            listen % 7 + 1
        )
    };
    // A listens on 41001 and sends to 41000, where B will listen.
    std::fs::write(p("a.toml"), with_engine(&conf(41001, 41000))).unwrap();
    std::fs::write(p("b.toml"), with_engine(&conf(41000, 41001))).unwrap();
    let bin = env!("CARGO_BIN_EXE_coredir");
    let script = format!(
        "ip link set lo up && echo '41000 41000' > /proc/sys/net/ipv4/ip_local_port_range || exit 99\n\
         {bin} serve --listen 127.0.0.1:41010 --data {a} --shards 1 --config {ac} >/dev/null 2>{aerr} & A=$!\n\
         for i in $(seq 200); do grep -q 'connected to itself' {aerr} && break; sleep 0.1; done\n\
         grep -q 'connected to itself' {aerr} || {{ kill -9 $A; exit 3; }}\n\
         {bin} serve --listen 127.0.0.1:41020 --data {b} --shards 1 --config {bc} >{bout} 2>{berr} & B=$!\n\
         for i in $(seq 200); do grep -q 'listening on' {bout} && break; sleep 0.1; done\n\
         grep -q 'listening on' {bout} && echo B-STARTED\n\
         kill -9 $A $B\n\
         exit 0\n",
        a = p("a"),
        ac = p("a.toml"),
        aerr = p("a.err"),
        b = p("b"),
        bc = p("b.toml"),
        berr = p("b.err"),
        bout = p("b.out"),
    );
    let mut child = std::process::Command::new("unshare")
        .args(["-n", "sh", "-c", &script])
        .env("COREDIR_ROOT_PASSWORD", ROOT_PW)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("unshare");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("the namespace script did not finish in 60 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut out = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut out).unwrap();
    let read = |f: &str| std::fs::read_to_string(p(f)).unwrap_or_default();
    if status.code() == Some(99) || (status.code() == Some(1) && read("a.err").is_empty()) {
        eprintln!("SKIPPED: no network namespace of our own here (unshare -n needs root)");
        return;
    }
    assert_eq!(status.code(), Some(0), "A never dropped a self-connected socket:\n{}", read("a.err"));
    assert!(out.contains("B-STARTED"), "B could not bind its port:\n{}", read("b.err"));
}

/// A subtree moved back and forth on B: a search on A never sees it half
/// moved. A peer's rename is one record per entry, applied on their
/// owners side by side; before, a search here met the box at one place
/// and its children at the other (or neither), and a sync refresh sent
/// that to a consumer, which glued or deleted the subtree.
#[test]
fn a_subtree_moved_on_the_peer_is_seen_whole() {
    moved_back_and_forth_seen_whole(40, 30);
}

/// A move of more records than one frame carries (512): the frame that
/// holds the subtree's top holds all of it, or between two frames A's
/// readers see the members left below a parent gone.
#[test]
fn a_subtree_moved_on_the_peer_bigger_than_a_frame_is_seen_whole() {
    moved_back_and_forth_seen_whole(480, 4);
}

/// B moves a branch of `n` people (`branch`) `moves` times between two
/// parents while A is searched all along for entries without a parent.
fn moved_back_and_forth_seen_whole(n: usize, moves: usize) {
    let (a, b) = pair(2);
    let mut cb = b.admin();
    for ou in ["here", "there"] {
        let res = cb.add(
            &format!("ou={ou},{SUFFIX}"),
            vec![("objectClass", ["organizationalUnit"].into()), ("ou", [ou].into())],
        );
        assert_eq!(res.unwrap().rc, 0);
    }
    branch(&mut cb, &format!("ou=here,{SUFFIX}"), "box", n);
    converged(&a, &b);
    let mover = std::thread::spawn(move || {
        let mut at = "here";
        for _ in 0..moves {
            let to = if at == "here" { "there" } else { "here" };
            let res =
                cb.modifydn(&format!("ou=box,ou={at},{SUFFIX}"), "ou=box", true, Some(&format!("ou={to},{SUFFIX}")));
            assert_eq!(res.unwrap().rc, 0);
            at = to;
        }
    });
    let mut looks = 0;
    while !mover.is_finished() || looks == 0 {
        let orphans = orphans(&a);
        assert!(orphans.is_empty(), "A showed the subtree half moved: {orphans:?}");
        looks += 1;
    }
    mover.join().unwrap();
    converged(&a, &b);
    assert!(orphans(&a).is_empty());
}
