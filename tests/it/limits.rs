use crate::support::*;
use ldap3::{Scope, SearchOptions};
use std::io::Read;

#[test]
fn server_size_limit_binds_all_but_the_root_dn() {
    let s = Server::start_with_config(1, "[limits]\nsize_limit = 5\n");
    let mut admin = s.admin();
    for i in 0..10 {
        assert_eq!(add_user(&mut admin, &format!("l{i}")).rc, 0);
    }
    let mut anon = s.conn();
    let res = anon.search(PEOPLE, Scope::OneLevel, "(uid=l*)", vec!["1.1"]).unwrap();
    assert_eq!((res.1.rc, res.0.len()), (4, 5), "sizeLimitExceeded after the server's limit");
    anon.with_search_options(SearchOptions::new().sizelimit(3));
    let res = anon.search(PEOPLE, Scope::OneLevel, "(uid=l*)", vec!["1.1"]).unwrap();
    assert_eq!((res.1.rc, res.0.len()), (4, 3), "a client may ask for less");
    let res = admin.search(PEOPLE, Scope::OneLevel, "(uid=l*)", vec!["1.1"]).unwrap();
    assert_eq!((res.1.rc, res.0.len()), (0, 10), "the root DN is not limited");
}

#[test]
fn idle_connections_are_closed() {
    let s = Server::start_with_config(1, "[limits]\nidle_timeout_s = 1\n");
    let mut sock = std::net::TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    // Generous: the test waits for the close, it does not time it.
    sock.set_read_timeout(Some(std::time::Duration::from_secs(60))).unwrap();
    let mut buf = [0u8; 64];
    assert_eq!(sock.read(&mut buf).unwrap(), 0, "the server closes an idle connection");
    // Busy connections are not idle.
    let mut c = s.conn();
    for _ in 0..3 {
        assert_eq!(search_dns(&mut c, PEOPLE, Scope::Base, "(objectClass=*)").len(), 1);
    }
}

#[test]
fn limits_by_identity_override_the_server_limits() {
    let config = format!(
        "[limits]\nsize_limit = 2\nby_identity = ['dn.exact=\"uid=l0,{PEOPLE}\" size=unlimited', 'users size=4']\n"
    );
    let s = Server::start_with_config(1, &config);
    let mut admin = s.admin();
    for i in 0..8 {
        assert_eq!(add_user(&mut admin, &format!("l{i}")).rc, 0);
    }
    let count = |c: &mut ldap3::LdapConn| {
        let res = c.search(PEOPLE, Scope::OneLevel, "(uid=l*)", vec!["1.1"]).unwrap();
        (res.1.rc, res.0.len())
    };
    assert_eq!(count(&mut s.conn()), (4, 2), "anonymous: the server's limit");
    let mut user = s.conn();
    user.simple_bind(&format!("uid=l5,{PEOPLE}"), "pw-l5").unwrap().success().unwrap();
    assert_eq!(count(&mut user), (4, 4), "users: their override");
    let mut l0 = s.conn();
    l0.simple_bind(&format!("uid=l0,{PEOPLE}"), "pw-l0").unwrap().success().unwrap();
    assert_eq!(count(&mut l0), (0, 8), "the first matching rule: unlimited");
}

#[test]
fn connections_beyond_the_caps_get_busy() {
    let s = Server::start_with_config(2, "[limits]\nmax_connections_per_ip = 3\n");
    let held: Vec<_> = (0..3).map(|_| s.conn()).collect();
    let mut sock = std::net::TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    sock.set_read_timeout(Some(std::time::Duration::from_secs(60))).unwrap();
    let mut notice = Vec::new();
    sock.read_to_end(&mut notice).unwrap();
    let text = String::from_utf8_lossy(&notice);
    assert!(text.contains("1.3.6.1.4.1.1466.20036"), "a Notice of Disconnection: {text:?}");
    assert!(text.contains("too many connections from 127.0.0.1"), "{text:?}");
    drop(held);
    // Places are given back when connections close.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let mut c = s.conn();
        match c.simple_bind("", "") {
            Ok(r) if r.rc == 0 => break,
            _ => assert!(std::time::Instant::now() < deadline, "the caps never came back"),
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `limits.max_connections` holds for the process, whichever shards the
/// kernel hands the connections to (each shard counts its own; the cap
/// is on the sum), and `ctl status` counts the same.
#[test]
fn the_total_connection_cap_holds_across_shards() {
    let s = Server::start_with_config(2, "[limits]\nmax_connections = 4\n");
    // Each answered once, so each holds its place before the next knock.
    let mut held: Vec<_> = (0..4).map(|_| s.conn()).collect();
    for c in &mut held {
        assert_eq!(c.simple_bind("", "").unwrap().rc, 0);
    }
    for _ in 0..6 {
        let mut sock = std::net::TcpStream::connect(("127.0.0.1", s.port)).unwrap();
        sock.set_read_timeout(Some(std::time::Duration::from_secs(60))).unwrap();
        let mut notice = Vec::new();
        sock.read_to_end(&mut notice).unwrap();
        let text = String::from_utf8_lossy(&notice);
        assert!(text.contains("too many connections (limit 4)"), "{text:?}");
    }
    assert_eq!(ctl_json(&s, &["status"])["connections"], 4);
    drop(held);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let mut c = s.conn();
        match c.simple_bind("", "") {
            Ok(r) if r.rc == 0 => break,
            _ => assert!(std::time::Instant::now() < deadline, "the cap never came back"),
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `limits.max_rename_entries` bounds what one modify-DN moves: past it
/// adminLimitExceeded and nothing moved; within it the whole subtree.
#[test]
fn subtree_renames_stop_at_max_rename_entries() {
    let s = Server::start_with_config(2, "[limits]\nmax_rename_entries = 3\n");
    let mut c = s.admin();
    for uid in ["r1", "r2", "r3"] {
        assert_eq!(add_user(&mut c, uid).rc, 0);
    }
    let renamed = format!("ou=staff,{SUFFIX}");
    assert_eq!(c.modifydn(PEOPLE, "ou=staff", true, None).unwrap().rc, 0, "3 entries below: within the limit");
    assert_eq!(search_dns(&mut c, &renamed, Scope::OneLevel, "(uid=r*)").len(), 3);
    let r4 = vec![("objectClass", ["person"].into()), ("cn", ["r4"].into()), ("sn", ["R"].into())];
    assert_eq!(c.add(&format!("cn=r4,{renamed}"), r4).unwrap().rc, 0);
    let refused = c.modifydn(&renamed, "ou=people", true, None).unwrap();
    assert_eq!(refused.rc, 11, "{refused:?}");
    assert!(refused.text.contains("max_rename_entries"), "{refused:?}");
    assert_eq!(search_dns(&mut c, &renamed, Scope::OneLevel, "(|(uid=r*)(cn=r4))").len(), 4, "nothing moved");
    assert!(get_entry(&mut c, PEOPLE, vec![]).is_none());
}

/// `limits.max_alias_scopes` bounds the aliases one search dereferences
/// in its scope (each a further scope held while it runs): past it
/// adminLimitExceeded; without dereferencing, or within it, the search runs.
#[test]
fn alias_dereferencing_stops_at_max_alias_scopes() {
    let s = Server::start_with_config(2, "[limits]\nmax_alias_scopes = 2\n");
    let mut c = s.admin();
    for i in 0..3 {
        assert_eq!(add_user(&mut c, &format!("t{i}")).rc, 0);
        let (cn, target) = (format!("a{i}"), format!("uid=t{i},{PEOPLE}"));
        let alias = vec![
            ("objectClass", ["alias", "extensibleObject"].into()),
            ("cn", [cn.as_str()].into()),
            ("aliasedObjectName", [target.as_str()].into()),
        ];
        assert_eq!(c.add(&format!("cn=a{i},{SUFFIX}"), alias).unwrap().rc, 0);
    }
    let mut search = |deref, base: &str| {
        let opts = ldap3::SearchOptions::new().deref(deref);
        c.with_search_options(opts).search(base, Scope::Subtree, "(uid=t*)", vec!["1.1"]).unwrap()
    };
    let refused = search(ldap3::DerefAliases::Always, SUFFIX);
    assert_eq!(refused.1.rc, 11, "{:?}", refused.1);
    assert!(refused.1.text.contains("max_alias_scopes"), "{:?}", refused.1);
    assert_eq!(search(ldap3::DerefAliases::Never, SUFFIX).0.len(), 3);
    let one = search(ldap3::DerefAliases::Always, &format!("cn=a0,{SUFFIX}"));
    assert_eq!((one.1.rc, one.0.len()), (0, 1), "one alias found, none searched: {:?}", one.1);
}

/// `limits.max_sort_bytes` bounds what a sorted search (or a virtual list
/// view, which keeps every row) holds: past it adminLimitExceeded.
#[test]
fn sorted_searches_stop_at_max_sort_bytes() {
    let s = Server::start_with_config(1, "[limits]\nmax_sort_bytes = 4000\n");
    let mut c = s.admin();
    for i in 0..40 {
        assert_eq!(add_user(&mut c, &format!("s{i:02}")).rc, 0);
    }
    // SEQUENCE { SEQUENCE { attributeType "cn", orderingRule [0] "caseIgnoreOrderingMatch" } }
    let rule = b"caseIgnoreOrderingMatch";
    let mut key = vec![0x04, 0x02, b'c', b'n', 0x80, rule.len() as u8];
    key.extend_from_slice(rule);
    let mut val = vec![0x30, key.len() as u8 + 2, 0x30, key.len() as u8];
    val.extend(key);
    let sort = ldap3::controls::RawControl { ctype: "1.2.840.113556.1.4.473".into(), crit: true, val: Some(val) };
    let mut search =
        |filter: &str| c.with_controls(vec![sort.clone()]).search(PEOPLE, Scope::OneLevel, filter, vec!["*"]).unwrap();
    let few = search("(uid=s0*)");
    assert_eq!((few.1.rc, few.0.len()), (0, 10), "{:?}", few.1);
    let all = search("(uid=s*)");
    assert_eq!(all.1.rc, 11, "{:?}", all.1);
    assert!(all.1.text.contains("max_sort_bytes"), "{:?}", all.1);
}

/// `limits.max_sorts_per_connection` (slapd's `sssvlv-maxperconn`): past it
/// a sorted search on the same connection is `busy`. The client reads
/// nothing until all are sent, so each sorted search waits to send its
/// answer and stays running.
#[test]
fn sorted_searches_running_at_once_on_a_connection_are_bounded() {
    use ldap3_proto::control::LdapControl;
    use ldap3_proto::proto::{LdapOp, LdapSearchRequest, LdapSearchScope};
    let s = Server::start_with_config(1, "[limits]\nmax_sorts_per_connection = 2\n");
    // Each answer (13 MB) is more than the socket buffers and queue hold.
    add_devices(&mut s.admin(), "big", 200, 64_000);
    // SEQUENCE { SEQUENCE { attributeType "cn", orderingRule [0] "caseIgnoreOrderingMatch" } }
    let rule = b"caseIgnoreOrderingMatch";
    let mut key = vec![0x04, 0x02, b'c', b'n', 0x80, rule.len() as u8];
    key.extend_from_slice(rule);
    let mut value = vec![0x30, key.len() as u8 + 2, 0x30, key.len() as u8];
    value.extend(key);
    let sort = LdapControl::Unknown { oid: "1.2.840.113556.1.4.473".into(), criticality: true, value: Some(value) };
    let search = |id: i32| {
        let mut m = ldap3_proto::proto::LdapMsg::new(
            id,
            LdapOp::SearchRequest(LdapSearchRequest {
                base: PEOPLE.into(),
                scope: LdapSearchScope::OneLevel,
                aliases: ldap3_proto::proto::LdapDerefAliases::Never,
                sizelimit: 0,
                timelimit: 0,
                typesonly: false,
                filter: ldap3_proto::proto::LdapFilter::Present("cn".into()),
                attrs: vec![],
            }),
        );
        m.ctrl = vec![sort.clone()];
        m
    };
    let mut r = Raw::connect(&s);
    r.send(vec![ldap3_proto::proto::LdapMsg::new(1, bind(ROOT_DN, ROOT_PW))]);
    assert!(matches!(r.recv().unwrap().op, LdapOp::BindResponse(_)));
    r.send((2..6).map(search).collect());
    let mut codes = Vec::new();
    while codes.len() < 4 {
        if let LdapOp::SearchResultDone(done) = r.recv().expect("the searches never ended").op {
            codes.push(done.code as u32);
        }
    }
    codes.sort();
    assert_eq!(codes, vec![0, 0, 51, 51], "two run, two are busy");
}

/// Issue 17: one entry could grow without bound, each further modify
/// costing its owner more (a user with write access to one attribute made
/// an entry of 800,000 values, ~1 s of the owner per change). As
/// back-mdb's `maxentrysize`: a modify that would make the entry larger
/// than `limits.max_entry_bytes` is adminLimitExceeded and changes
/// nothing; smaller changes of it still work.
#[test]
fn an_entry_cannot_grow_past_max_entry_bytes() {
    let s = Server::start_with_config(1, "[limits]\nmax_entry_bytes = 65536\n");
    let mut admin = s.admin();
    assert_eq!(add_user(&mut admin, "grow").rc, 0);
    let dn = format!("uid=grow,{PEOPLE}");
    let chunk: Vec<String> = (0..1000).map(|i| format!("value number {i:05}")).collect();
    let chunk: std::collections::HashSet<&str> = chunk.iter().map(String::as_str).collect();
    assert_eq!(admin.modify(&dn, vec![ldap3::Mod::Add("description", chunk)]).unwrap().rc, 0);
    let more: Vec<String> = (1000..5000).map(|i| format!("value number {i:05}")).collect();
    let more: std::collections::HashSet<&str> = more.iter().map(String::as_str).collect();
    let res = admin.modify(&dn, vec![ldap3::Mod::Add("description", more)]).unwrap();
    assert_eq!(res.rc, 11, "{res:?}");
    let (entries, _) =
        admin.search(&dn, Scope::Base, "(objectClass=*)", vec!["description"]).unwrap().success().unwrap();
    let entry = ldap3::SearchEntry::construct(entries.into_iter().next().unwrap());
    assert_eq!(entry.attrs["description"].len(), 1000, "the refused modify changed nothing");
    let res = admin.modify(&dn, vec![ldap3::Mod::Replace("sn", ["still"].into())]).unwrap();
    assert_eq!(res.rc, 0, "{res:?}");
    // An add of an entry that large, the same.
    let big = "x".repeat(70_000);
    let attrs = vec![("objectClass", ["person"].into()), ("cn", ["big"].into()), ("sn", [big.as_str()].into())];
    assert_eq!(admin.add(&format!("cn=big,{PEOPLE}"), attrs).unwrap().rc, 11);
}

/// Issue 17 item 2: a name of thousands of RDNs cost every operation work
/// in proportion to them (13 s for 10,000 before the 8 KiB bound). A name
/// deeper than `limits.max_dn_rdns` is refused (adminLimitExceeded) before
/// any lookup, in every operation; the root DN may still name an existing
/// entry that deep, but no one makes one, by an add or by a move.
#[test]
fn a_name_of_too_many_rdns_is_refused_by_every_operation() {
    let s = Server::start_with_config(1, "[limits]\nmax_dn_rdns = 20\n");
    let mut admin = s.admin();
    // PEOPLE is 3 RDNs: 17 more make 20, 18 more make 21.
    let deep = |n: usize| format!("{}{PEOPLE}", "cn=a,".repeat(n));
    let refused = |res: ldap3::LdapResult| {
        assert_eq!(res.rc, 11, "{res:?}");
        assert!(res.text.contains("max_dn_rdns"), "{res:?}");
    };
    let (over, at) = (deep(18), deep(17));
    assert_eq!(add_user(&mut admin, "u").rc, 0);
    let mut user = s.conn();
    assert_eq!(user.simple_bind(&format!("uid=u,{PEOPLE}"), "pw-u").unwrap().rc, 0);
    for c in [&mut user, &mut s.conn()] {
        refused(c.search(&over, Scope::Base, "(objectClass=*)", vec!["1.1"]).unwrap().1);
        refused(c.compare(&over, "cn", "a").unwrap().0);
    }
    refused(user.delete(&over).unwrap());
    refused(user.modify(&over, vec![ldap3::Mod::Replace("sn", ["x"].into())]).unwrap());
    refused(user.add(&over, vec![("objectClass", ["person"].into()), ("sn", ["x"].into())]).unwrap());
    refused(user.modifydn(&over, "cn=b", true, None).unwrap());
    // A new superior of 20 RDNs would name an entry of 21.
    refused(user.modifydn(&format!("uid=u,{PEOPLE}"), "uid=y", true, Some(&at)).unwrap());
    // As slapd: an anonymous write is refused for what it is first.
    assert_eq!(s.conn().delete(&over).unwrap().rc, 8);
    // The root DN looks the name up; it makes none that deep.
    let res = admin.search(&over, Scope::Base, "(objectClass=*)", vec!["1.1"]).unwrap().1;
    assert_eq!((res.rc, res.matched.as_str()), (32, PEOPLE), "{res:?}");
    refused(admin.add(&over, vec![("objectClass", ["person"].into()), ("sn", ["x"].into())]).unwrap());
    refused(admin.modifydn(&format!("uid=u,{PEOPLE}"), "uid=y", true, Some(&at)).unwrap());

    // A move takes what is below the entry deeper with it: `ou=src` (3
    // RDNs, 3 levels below it) below a chain ending at 17 RDNs would put
    // its deepest entry at 21.
    let ou = |name: String| {
        vec![("objectClass".to_string(), ["organizationalUnit".to_string()].into()), ("ou".to_string(), [name].into())]
    };
    for n in 1..=14 {
        let rdns = deep(n);
        let attrs = vec![("objectClass", ["person"].into()), ("sn", ["x"].into())];
        assert_eq!(admin.add(&rdns, attrs).unwrap().rc, 0, "{rdns}");
    }
    let mut below = format!("ou=src,{SUFFIX}");
    assert_eq!(admin.add(&below, ou("src".into())).unwrap().rc, 0);
    for level in 1..=3 {
        below = format!("ou=c{level},{below}");
        assert_eq!(admin.add(&below, ou(format!("c{level}"))).unwrap().rc, 0);
    }
    refused(admin.modifydn(&format!("ou=src,{SUFFIX}"), "ou=src", true, Some(&deep(14))).unwrap());
    assert_eq!(admin.delete(&below).unwrap().rc, 0);
    let moved = admin.modifydn(&format!("ou=src,{SUFFIX}"), "ou=src", true, Some(&deep(14))).unwrap();
    assert_eq!(moved.rc, 0, "{moved:?}");
    let deepest = format!("ou=c2,ou=c1,ou=src,{}", deep(14));
    assert_eq!(search_dns(&mut admin, &deepest, Scope::Base, "(objectClass=*)").len(), 1);

    // 0: no limit.
    let s = Server::start_with_config(1, "[limits]\nmax_dn_rdns = 0\n");
    let res = s.conn().search(&deep(1000), Scope::Base, "(objectClass=*)", vec!["1.1"]).unwrap().1;
    assert_eq!(res.rc, 32, "{res:?}");
}

/// Issue 17 item 2: an entry may hold at most `limits.max_entry_attributes`
/// attribute descriptions (operational ones included); an add or modify
/// past it is refused (adminLimitExceeded) and writes nothing. The add is
/// refused before its attributes are checked one by one.
#[test]
fn an_entry_of_too_many_attributes_is_refused() {
    let s = Server::start_with_config(1, "[limits]\nmax_entry_attributes = 50\n");
    let mut admin = s.admin();
    let entry = |n: usize| {
        let mut attrs: Vec<(String, std::collections::HashSet<String>)> =
            vec![("objectClass".into(), ["person".to_string()].into()), ("sn".into(), ["x".to_string()].into())];
        attrs.extend((0..n).map(|i| (format!("description;lang-x{i}"), ["v".to_string()].into())));
        attrs
    };
    let refused = |res: ldap3::LdapResult| {
        assert_eq!(res.rc, 11, "{res:?}");
        assert!(res.text.contains("max_entry_attributes"), "{res:?}");
    };
    // 51 given: over before anything else (an undefined type among them
    // would otherwise be answered first).
    let mut given = entry(48);
    given.push(("noSuchAttributeType".into(), ["v".to_string()].into()));
    refused(admin.add(&format!("cn=given,{SUFFIX}"), given).unwrap());
    // 43 given, `cn` from the RDN and the 7 operational attributes the
    // server adds (entryCSN among them, stamped by the owner): 51, over.
    refused(admin.add(&format!("cn=stamped,{SUFFIX}"), entry(41)).unwrap());
    // One fewer fits exactly.
    assert_eq!(admin.add(&format!("cn=exactly,{SUFFIX}"), entry(40)).unwrap().rc, 0);
    // 30 given: stored; then a modify that would take it past 50.
    let dn = format!("cn=fits,{SUFFIX}");
    assert_eq!(admin.add(&dn, entry(28)).unwrap().rc, 0);
    let more: Vec<ldap3::Mod<String>> =
        (0..30).map(|i| ldap3::Mod::Add(format!("description;lang-y{i}"), ["v".to_string()].into())).collect();
    refused(admin.modify(&dn, more).unwrap());
    let (entries, _) = admin.search(&dn, Scope::Base, "(objectClass=*)", vec!["*"]).unwrap().success().unwrap();
    // The 30 given and `cn` from the RDN.
    assert_eq!(ldap3::SearchEntry::construct(entries[0].clone()).attrs.len(), 31, "nothing written");
    for missing in ["given", "stamped"] {
        assert!(search_dns(&mut admin, SUFFIX, Scope::OneLevel, &format!("(cn={missing})")).is_empty());
    }
}
