//! Operating a running server: `coredir ctl` over the admin socket,
//! metrics, cn=Monitor, the access log, reload, drain and signals.

use crate::support::*;
use ldap3::{LdapConn, Scope, SearchEntry};
use serde_json::Value;
use std::io::{Read, Write};
use std::process::Command;
use std::time::Duration;

/// Operations initiated per type, summed over shards.
fn ops(s: &Server, op: &str) -> u64 {
    let shards = ctl_json(s, &["shards"]);
    shards["shards"].as_array().unwrap().iter().map(|sh| sh["operations"][op].as_u64().unwrap()).sum()
}

#[test]
fn ctl_reports_the_traffic_sent() {
    let s = Server::start_with_config(2, "[log]\nlevel = \"off\"\n");
    let status = ctl_json(&s, &["status"]);
    assert_eq!(status["type"], "status");
    assert_eq!(status["shards"], 2);
    assert_eq!(status["server_id"], 1);
    let (searches, binds) = (ops(&s, "search"), ops(&s, "bind"));
    let mut c = s.admin();
    for _ in 0..7 {
        assert_eq!(search_dns(&mut c, PEOPLE, Scope::Base, "(objectClass=*)").len(), 1);
    }
    assert_eq!(ops(&s, "search"), searches + 7);
    assert_eq!(ops(&s, "bind"), binds + 1);
    // The same counters in the Prometheus exposition.
    let (code, text, _) = ctl(&s, &["metrics"]);
    assert_eq!(code, 0);
    let total: f64 = text
        .lines()
        .filter(|l| l.starts_with("coredir_operations_initiated_total{") && l.contains("op=\"search\""))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum();
    assert_eq!(total as u64, searches + 7);
    assert!(text.contains("# TYPE coredir_operation_duration_seconds histogram"), "{text}");
    // Connections: ours, bound as the root DN; killing it closes it.
    let conns = ctl_json(&s, &["connections"]);
    let list = conns["connections"].as_array().unwrap();
    let mine = list.iter().find(|c| c["identity"] == ROOT_DN).expect("the admin connection is listed");
    assert!(mine["operations"].as_u64().unwrap() >= 8);
    let id = mine["id"].as_u64().unwrap().to_string();
    let killed = ctl_json(&s, &["connections", "kill", &id]);
    assert_eq!(killed["type"], "killed");
    assert!(c.search(PEOPLE, Scope::Base, "(objectClass=*)", vec!["1.1"]).is_err(), "the connection is gone");
    let (code, _, err) = ctl(&s, &["connections", "kill", "999999"]);
    assert_eq!(code, 1);
    assert!(err.contains("no connection 999999"), "{err}");
    // A backup of the running server, then the data size gauge.
    let backup = tempfile::tempdir().unwrap();
    let dest = backup.path().join("b");
    let r = ctl_json(&s, &["backup", dest.to_str().unwrap()]);
    assert_eq!(r["type"], "backed-up", "{r}");
    assert!(dest.join("manifest.toml").exists());
    wait_for("the data size gauge", || ctl(&s, &["metrics"]).1.contains("coredir_data_bytes{"));
    // Human-readable forms.
    let (code, out, _) = ctl(&s, &["shards"]);
    assert_eq!(code, 0);
    assert!(out.lines().next().unwrap().contains("entries"), "{out}");
    let (_, out, _) = ctl(&s, &["status"]);
    assert!(out.contains("shards       2"), "{out}");
}

#[test]
fn access_log_lines_match_the_operations() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let s =
        Server::start_with_config(1, &format!("[log]\nlevel = \"stats\"\nfile = {:?}\n", log.display().to_string()));
    let mut c = s.admin();
    assert_eq!(add_user(&mut c, "logged").rc, 0);
    assert_eq!(search_dns(&mut c, PEOPLE, Scope::Subtree, "(uid=logged)").len(), 1);
    // A proxied operation names who it ran as, as slapd's PROXYAUTHZ line.
    let authzid = format!("dn:uid=logged,{PEOPLE}").into_bytes();
    let proxy =
        ldap3::controls::RawControl { ctype: "2.16.840.1.113730.3.4.18".into(), crit: true, val: Some(authzid) };
    c.with_controls(proxy).search(PEOPLE, Scope::Base, "(objectClass=*)", vec!["1.1"]).unwrap().success().unwrap();
    // A rename names where it moves the entry to.
    assert_eq!(c.modifydn(&format!("uid=logged,{PEOPLE}"), "uid=moved", true, Some(SUFFIX)).unwrap().rc, 0);
    // A DN with a line break cannot write a line of its own.
    let forged = "cn=x\nforged BIND dn=\"cn=admin\" mech=SIMPLE";
    assert_ne!(s.conn().simple_bind(forged, "pw").unwrap().rc, 0);
    // A Bind refused before it is decoded (its DN is not UTF-8) is logged.
    let mut raw = Raw::connect(&s);
    raw.send_bytes(b"\x30\x12\x02\x01\x07\x60\x0d\x02\x01\x03\x04\x04cn=\xe9\x80\x02pw");
    assert!(
        matches!(raw.recv().map(|m| m.op), Some(ldap3_proto::proto::LdapOp::BindResponse(b)) if b.res.code == ldap3_proto::LdapResultCode::InvalidDNSyntax)
    );
    c.unbind().unwrap();
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    wait_for("the closed line", || read().contains(" closed"));
    wait_for("the forged bind's line", || read().contains("cn=x\\0Aforged BIND dn=\\22cn=admin\\22"));
    assert!(!read().lines().any(|l| l.starts_with("forged")), "{}", read());
    let text = read();
    let line = |needle: &str| text.lines().find(|l| l.contains(needle)).unwrap_or_else(|| panic!("{needle}: {text}"));
    let accept = line("ACCEPT from IP=127.0.0.1:");
    let conn = accept.split_whitespace().find(|w| w.starts_with("conn=")).unwrap().to_string();
    assert!(line(&format!("{conn} op=0 BIND dn=\"{ROOT_DN}\" method=128")).contains("BIND"));
    // Who the bind made the connection, as slapd's second BIND line.
    assert!(line(&format!("{conn} op=0 BIND dn=\"{ROOT_DN}\" mech=SIMPLE bind_ssf=0 ssf=0")).contains("BIND"));
    assert!(line(&format!("{conn} op=0 RESULT tag=97 err=0")).contains("etime="));
    assert!(text.lines().any(|l| l.contains("RESULT tag=97 err=34") && l.ends_with("text=invalid DN")), "{text}");
    assert!(line(&format!("{conn} op=1 ADD dn=\"uid=logged,{PEOPLE}\"")).contains("ADD"));
    assert!(line(&format!("{conn} op=1 RESULT tag=105 err=0")).contains("qtime="));
    assert!(
        line(&format!("{conn} op=2 SRCH base=\"{PEOPLE}\" scope=2 deref=0 filter=\"(uid=logged)\"")).contains("SRCH")
    );
    assert!(line(&format!("{conn} op=2 SEARCH RESULT tag=101 err=0")).contains("nentries=1 text="));
    assert!(line(&format!("{conn} op=3 PROXYAUTHZ dn=\"uid=logged,{PEOPLE}\"")).contains("PROXYAUTHZ"));
    let modrdn = format!("{conn} op=4 MODRDN dn=\"uid=logged,{PEOPLE}\" newrdn=\"uid=moved\" deleteoldrdn=1");
    assert!(line(&modrdn).contains(&format!(" newsuperior=\"{SUFFIX}\"")), "{text}");
    assert!(line(&format!("{conn} op=5 UNBIND")).contains("UNBIND"));
    assert!(line(&format!("{conn} fd=")).contains("ACCEPT"));
    assert!(!text.contains("pw-logged"), "a password was logged");
    // Off at run time: nothing more is written; back on: lines again.
    assert_eq!(ctl_json(&s, &["log-level", "off"])["level"], "off");
    let before = read().len();
    let mut c = s.conn();
    c.simple_bind("", "").unwrap();
    c.unbind().unwrap();
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(read().len(), before, "nothing is logged at level off");
    assert_eq!(ctl_json(&s, &["log-level", "stats"])["level"], "stats");
    let (code, _, err) = ctl(&s, &["log-level", "loud"]);
    assert_eq!(code, 1, "{err}");
}

#[test]
fn reload_applies_or_refuses_as_a_whole() {
    let s = Server::start_with_config(1, "[log]\nlevel = \"stats\"\n[limits]\nsize_limit = 500\n");
    let mut admin = s.admin();
    for i in 0..4 {
        assert_eq!(add_user(&mut admin, &format!("r{i}")).rc, 0);
    }
    let count = || {
        let res = s.conn().search(PEOPLE, Scope::OneLevel, "(uid=r*)", vec!["1.1"]).unwrap();
        (res.1.rc, res.0.len())
    };
    assert_eq!(count(), (0, 4));
    let config = std::fs::read_to_string(s.config_path()).unwrap();
    let edited = config.replace("size_limit = 500", "size_limit = 2").replace("level = \"stats\"", "level = \"off\"");
    std::fs::write(s.config_path(), &edited).unwrap();
    let r = ctl_json(&s, &["reload"]);
    assert_eq!(r["type"], "reloaded", "{r}");
    assert_eq!(ctl_json(&s, &["log-level"])["level"], "off");
    assert_eq!(count(), (4, 2), "the new size limit applies to the next search");
    // An invalid file changes nothing.
    std::fs::write(s.config_path(), edited.replace("size_limit = 2", "size_limit = 3\nbogus_key = 1")).unwrap();
    let (code, _, err) = ctl(&s, &["reload"]);
    assert_eq!(code, 1);
    assert!(err.contains("bogus_key") && err.contains("nothing was changed") || err.contains("unknown field"), "{err}");
    let bad_rule = edited.replace("[limits]", "[access]\nrules = ['to * by nobody read']\n[limits]");
    std::fs::write(s.config_path(), bad_rule).unwrap();
    let (code, _, err) = ctl(&s, &["reload"]);
    assert_eq!(code, 1);
    assert!(err.contains("access rule 0"), "{err}");
    assert_eq!(count(), (4, 2), "still the last good configuration");
    // Who SASL EXTERNAL maps to is fixed at start: a reload says so.
    assert!(!edited.contains("[server]"), "{edited}");
    std::fs::write(s.config_path(), edited + "\n[server]\nauthz_regexp = [['x', 'cn=y']]\n").unwrap();
    let r = ctl_json(&s, &["reload"]);
    assert!(r["needs_restart"].as_array().unwrap().iter().any(|k| k == "server.authz_regexp"), "{r}");
}

/// A search remembers, per reactor, what each stored attribute name comes
/// to under the access rules (`search::select`): a reload that hides an
/// attribute must hide it from the next search on the same connection.
#[test]
fn reloaded_access_rules_apply_to_the_next_search_on_the_same_connection() {
    let open = "[access]\nrules = ['to * by * read']\n";
    let s = Server::start_with_config(1, open);
    let mut admin = s.admin();
    assert_eq!(add_user(&mut admin, "shown").rc, 0);
    let mut anon = s.conn();
    let mut names = || {
        let ldap3::SearchResult(entries, res) = anon.search(PEOPLE, Scope::OneLevel, "(uid=shown)", vec!["*"]).unwrap();
        assert_eq!(res.rc, 0, "{res:?}");
        assert_eq!(entries.len(), 1);
        let mut names: Vec<String> = SearchEntry::construct(entries[0].clone()).attrs.into_keys().collect();
        names.sort();
        names
    };
    assert!(names().contains(&"cn".to_string()));
    let hidden = "[access]\nrules = ['to attrs=cn by * none', 'to * by * read']\n";
    std::fs::write(s.config_path(), with_engine(hidden)).unwrap();
    assert_eq!(ctl_json(&s, &["reload"])["type"], "reloaded");
    let after = names();
    assert!(!after.contains(&"cn".to_string()) && after.contains(&"sn".to_string()), "{after:?}");
    std::fs::write(s.config_path(), with_engine(open)).unwrap();
    assert_eq!(ctl_json(&s, &["reload"])["type"], "reloaded");
    assert!(names().contains(&"cn".to_string()));
}

/// The root DN, whom no rule applies to, and anonymous search one after
/// the other on one reactor: what is kept about the root's search (every
/// attribute readable) must not let anonymous read a password.
#[test]
fn root_then_anonymous_on_one_reactor_each_see_what_they_may() {
    let rules =
        "[access]\nrules = ['to attrs=userPassword by self write by anonymous auth by * none', 'to * by * read']\n";
    let s = Server::start_with_config(1, rules);
    let mut admin = s.admin();
    assert_eq!(add_user(&mut admin, "kept").rc, 0);
    let mut anon = s.conn();
    for _ in 0..2 {
        for (who, shown) in [(&mut admin, true), (&mut anon, false)] {
            let ldap3::SearchResult(entries, res) =
                who.search(PEOPLE, Scope::OneLevel, "(uid=kept)", vec!["*"]).unwrap();
            assert_eq!((res.rc, entries.len()), (0, 1), "{res:?}");
            let attrs = SearchEntry::construct(entries[0].clone()).attrs;
            assert_eq!(attrs.contains_key("userPassword"), shown, "{attrs:?}");
            assert!(attrs.contains_key("cn"), "{attrs:?}");
        }
    }
}

#[test]
fn monitor_counts_the_traffic_and_hides_from_anonymous() {
    let s = Server::start_with_config(2, "[log]\nlevel = \"off\"\n");
    let mut root = s.admin();
    let read_ops = |c: &mut LdapConn| {
        let (entries, res) = c
            .search("cn=Search,cn=Operations,cn=Monitor", Scope::Base, "(objectClass=*)", vec!["+"])
            .unwrap()
            .success()
            .unwrap_or_else(|e| panic!("{e:?}"));
        let _ = res;
        let e = SearchEntry::construct(entries.into_iter().next().unwrap());
        let n = |a: &str| e.attrs[a][0].parse::<u64>().unwrap();
        (n("monitorOpInitiated"), n("monitorOpCompleted"))
    };
    let (init, done) = read_ops(&mut root);
    for _ in 0..5 {
        search_dns(&mut root, PEOPLE, Scope::Base, "(objectClass=*)");
    }
    let (init2, done2) = read_ops(&mut root);
    // Five searches, plus the first monitor read itself, completed; the second is in progress.
    assert_eq!(init2, init + 6);
    assert_eq!(done2, done + 6);
    let all = search_dns(&mut root, "cn=Monitor", Scope::Subtree, "(objectClass=*)");
    for want in ["cn=Total,cn=Connections,cn=Monitor", "cn=Start,cn=Time,cn=Monitor", "cn=Shard 1,cn=Shards,cn=Monitor"]
    {
        assert!(all.iter().any(|d| d == want), "{want} in {all:?}");
    }
    let (entries, _) = root
        .search("cn=Current,cn=Connections,cn=Monitor", Scope::Base, "(monitorCounter>=1)", vec!["monitorCounter"])
        .unwrap()
        .success()
        .unwrap();
    assert_eq!(entries.len(), 1, "at least our connection is current");
    let res = s.conn().search("cn=Monitor", Scope::Base, "(objectClass=*)", vec!["+"]).unwrap();
    assert_eq!(res.1.rc, 32, "anonymous does not see cn=Monitor");
    // A critical Assertion is tested on the base entry, as on stored ones.
    for (assertion, want) in [("(objectClass=nothing)", 122), ("(cn=Monitor)", 0)] {
        let (code, _, err) = tool(
            "ldapsearch",
            &["-x", "-H", &s.url(), "-D", ROOT_DN, "-w", ROOT_PW, "-b", "cn=Monitor", "-s", "base", "-e"]
                .into_iter()
                .chain([format!("!assert={assertion}").as_str(), "1.1"])
                .collect::<Vec<_>>(),
            None,
        );
        assert_eq!(code, want, "{assertion}: {err}");
    }
}

#[test]
fn monitor_readers_from_the_configuration() {
    let s = Server::start_with_config(1, "[monitor]\nreaders = ['users']\n");
    let mut admin = s.admin();
    assert_eq!(add_user(&mut admin, "watcher").rc, 0);
    let mut c = s.conn();
    c.simple_bind(&format!("uid=watcher,{PEOPLE}"), "pw-watcher").unwrap().success().unwrap();
    assert_eq!(search_dns(&mut c, "cn=Monitor", Scope::Base, "(objectClass=*)"), vec!["cn=Monitor".to_string()]);
}

/// Drain closes the local socket as it closes the TCP listeners: nobody
/// new gets in there either (before, the ldapi listener kept accepting).
#[test]
fn drain_closes_the_local_socket_too() {
    let dir = tempfile::tempdir().unwrap();
    let ldapi = dir.path().join("ldapi");
    let s = Server::start_with_config(1, &format!("[server]\nldapi = {:?}\n", ldapi.display().to_string()));
    let drained = ctl_json(&s, &["drain", "--deadline", "1"]);
    assert_eq!(drained["in_flight"], 0, "{drained}");
    wait_for("the local socket to close", || {
        let Ok(mut c) = std::os::unix::net::UnixStream::connect(&ldapi) else { return true };
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let whoami = ldap3_proto::proto::LdapMsg::new(1, crate::support::whoami());
        if c.write_all(&encode_msgs(vec![whoami])).is_err() {
            return true;
        }
        // Answered (unavailable): accepted, so still listening.
        match c.read(&mut [0u8; 64]) {
            Ok(n) => n == 0,
            Err(e) => !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
        }
    });
}

#[test]
fn drain_waits_for_a_long_search_then_shutdown_exits_zero() {
    let s = Server::start_with_config(1, "[storage]\nsync = \"never\"\n[log]\nlevel = \"off\"\n");
    let mut admin = s.admin();
    add_devices(&mut admin, "d", 5000, 2000);
    // A search of ~10 MB whose client does not read yet: it stays in flight.
    let mut raw = std::net::TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    let msgs = vec![
        ldap3_proto::proto::LdapMsg::new(6, bind(ROOT_DN, ROOT_PW)),
        ldap3_proto::proto::LdapMsg::new(7, search(PEOPLE, ldap3_proto::proto::LdapSearchScope::Subtree)),
    ];
    raw.write_all(&encode_msgs(msgs)).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let socket = s.data().join("admin.sock");
    let mut drain = Command::new(env!("CARGO_BIN_EXE_coredir"))
        .args(["ctl", "--json", "--socket"])
        .arg(&socket)
        .args(["drain", "--deadline", "60"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Soon nobody new gets in.
    wait_for("the listener to close", || {
        let Ok(mut c) = std::net::TcpStream::connect(("127.0.0.1", s.port)) else { return true };
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut b = [0u8; 1];
        matches!(c.read(&mut b), Ok(0) | Err(_))
    });
    assert!(drain.try_wait().unwrap().is_none(), "drain waits for the search");
    // Read the whole search; then drain returns with nothing in flight.
    raw.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut total = 0usize;
    let mut buf = vec![0u8; 1 << 16];
    let mut tail = Vec::new();
    loop {
        let n = raw.read(&mut buf).unwrap();
        assert!(n > 0, "closed before the search ended");
        total += n;
        tail.extend_from_slice(&buf[..n]);
        let keep = tail.len().saturating_sub(64);
        tail.drain(..keep);
        // SearchResultDone: tag 0x65 with result 0.
        if tail.windows(5).any(|w| w == [0x65, 0x07, 0x0a, 0x01, 0x00]) {
            break;
        }
    }
    assert!(total > 5000 * 2000);
    let out = drain.wait_with_output().unwrap();
    assert!(out.status.success());
    let drained: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(drained["in_flight"], 0, "{drained}");
    let (code, _, _) = ctl(&s, &["shutdown"]);
    assert_eq!(code, 0);
    let mut s = s;
    let status = s.wait_exit(Duration::from_secs(30));
    assert_eq!(status, Some(0), "exit status after shutdown");
}

#[test]
fn sigterm_drains_and_exits_zero_and_metrics_are_served_over_http() {
    let s = Server::start_with_config(1, "[metrics]\nlisten = \"127.0.0.1:0\"\n");
    let addr = s
        .banner
        .lines()
        .find_map(|l| l.strip_prefix("coredir: metrics on http://"))
        .unwrap()
        .trim_end_matches("/metrics")
        .to_string();
    let mut c = s.admin();
    search_dns(&mut c, PEOPLE, Scope::Base, "(objectClass=*)");
    let mut http = std::net::TcpStream::connect(&addr).unwrap();
    http.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut body = String::new();
    http.read_to_string(&mut body).unwrap();
    assert!(body.starts_with("HTTP/1.0 200 OK"), "{body}");
    assert!(body.contains("coredir_operations_initiated_total{"), "{body}");
    let mut http = std::net::TcpStream::connect(&addr).unwrap();
    http.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    let mut body = String::new();
    http.read_to_string(&mut body).unwrap();
    assert!(body.starts_with("HTTP/1.0 404"), "{body}");
    // SIGTERM: drain, sync, exit 0.
    unsafe { libc::kill(s.pid() as i32, libc::SIGTERM) };
    let mut s = s;
    assert_eq!(s.wait_exit(Duration::from_secs(60)), Some(0));
}

#[test]
fn systemd_hears_ready_once_the_shards_listen() {
    let dir = tempfile::tempdir().unwrap();
    let notify = dir.path().join("notify");
    let sock = std::os::unix::net::UnixDatagram::bind(&notify).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_coredir"))
        .args(["serve", "--listen", "127.0.0.1:0", "--shards", "2", "--data"])
        .arg(dir.path().join("data"))
        .env("NOTIFY_SOCKET", &notify)
        .env("COREDIR_ROOT_PASSWORD", ROOT_PW)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut buf = [0u8; 64];
    let n = sock.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"READY=1\n");
    // Ready means listening: the port is printed right after and answers.
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
    let line = lines.find(|l| l.as_ref().unwrap().starts_with("coredir: listening on")).unwrap().unwrap();
    let addr = line.trim_start_matches("coredir: listening on ").split_whitespace().next().unwrap().to_string();
    let mut c = LdapConn::new(&format!("ldap://{addr}")).unwrap();
    assert_eq!(c.simple_bind("", "").unwrap().rc, 0);
    let _ = child.kill();
    let _ = child.wait();
}
