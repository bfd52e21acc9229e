use crate::support::*;
use ldap3::controls::{
    Assertion, MakeCritical, PagedResults, PostRead, PostReadResp, PreRead, PreReadResp, RawControl,
};
use ldap3::{LdapConn, Mod, Scope, SearchEntry};
use std::collections::{HashMap, HashSet};
use std::process::Command;

const FAST: &str = "[storage]\nsync = \"never\"\n";

/// `n` users p0..p{n-1} with posixAccount, uidNumber descending from 10000.
fn users(s: &Server, n: usize) {
    let mut c = s.admin();
    for i in 0..n {
        let (uid, num, cn) = (format!("p{i}"), (10_000 - i * 7 % 1000).to_string(), format!("Name {}", i % 17));
        let res = c
            .add(
                &format!("uid={uid},{PEOPLE}"),
                vec![
                    ("objectClass", HashSet::from(["inetOrgPerson", "posixAccount"])),
                    ("uid", HashSet::from([uid.as_str()])),
                    ("cn", HashSet::from([cn.as_str()])),
                    ("sn", HashSet::from(["User"])),
                    ("uidNumber", HashSet::from([num.as_str()])),
                    ("gidNumber", HashSet::from(["100"])),
                    ("homeDirectory", HashSet::from(["/home"])),
                ],
            )
            .unwrap();
        assert_eq!(res.rc, 0, "{res:?}");
    }
}

/// Pages through a search; returns the DNs in order and the page sizes.
fn paged(c: &mut LdapConn, filter: &str, size: i32, sort: Option<RawControl>) -> (Vec<String>, Vec<usize>) {
    let (mut dns, mut pages, mut cookie) = (Vec::new(), Vec::new(), Vec::new());
    loop {
        let mut ctrls: Vec<RawControl> = vec![PagedResults { size, cookie: cookie.clone() }.critical().into()];
        ctrls.extend(sort.clone());
        let res = c.with_controls(ctrls).search(PEOPLE, Scope::Subtree, filter, vec!["1.1"]).unwrap();
        let (entries, done) = res.success().unwrap();
        pages.push(entries.len());
        dns.extend(entries.into_iter().map(|e| SearchEntry::construct(e).dn));
        let ctrl = done.ctrls.iter().find(|c| c.1.ctype == "1.2.840.113556.1.4.319").expect("a paged response");
        cookie = ctrl.1.parse::<PagedResults>().cookie;
        if cookie.is_empty() {
            return (dns, pages);
        }
        assert!(pages.len() < 1000, "paging does not end");
    }
}

#[test]
fn paged_results_return_every_entry_once() {
    let s = Server::start_with_config(2, FAST);
    users(&s, 2000);
    let mut c = s.admin();
    for filter in ["(objectClass=*)", "(uid=p*)", "(!(uid=nobody))", "(|(uid=p1*)(uid=p2*))"] {
        let (dns, pages) = paged(&mut c, filter, 100, None);
        let unique: HashSet<&String> = dns.iter().collect();
        assert_eq!(unique.len(), dns.len(), "{filter}: an entry came twice");
        let want = match filter {
            "(objectClass=*)" | "(!(uid=nobody))" => 2001,
            "(uid=p*)" => 2000,
            _ => 1111 + 111,
        };
        assert_eq!(dns.len(), want, "{filter}");
        assert!(pages.iter().all(|p| *p <= 100), "{filter}: {pages:?}");
        assert!(pages.len() >= want / 100, "{filter}: {pages:?}");
    }
    // A cookie belongs to its search.
    let res = c
        .with_controls(RawControl::from(PagedResults { size: 10, cookie: Vec::new() }.critical()))
        .search(PEOPLE, Scope::Subtree, "(uid=p*)", vec!["1.1"])
        .unwrap();
    let cookie = res.1.ctrls[0].1.parse::<PagedResults>().cookie;
    let res = c
        .with_controls(RawControl::from(PagedResults { size: 10, cookie }.critical()))
        .search(PEOPLE, Scope::Subtree, "(uid=q*)", vec!["1.1"])
        .unwrap();
    assert_eq!(res.1.rc, 53, "{:?}", res.1);

    ldap_utils();
    let out = Command::new("ldapsearch")
        .args(["-x", "-LLL", "-H", &s.url(), "-D", ROOT_DN, "-w", ROOT_PW, "-b", PEOPLE, "-E", "pr=100/noprompt"])
        .args(["(uid=*)", "uid"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let uids: HashSet<&str> = text.lines().filter_map(|l| l.strip_prefix("uid: ")).collect();
    assert_eq!(uids.len(), 2000);
    assert_eq!(text.lines().filter(|l| l.starts_with("dn: ")).count(), 2000);
}

/// The Server-Side Sort request control (RFC 2891) for one key.
fn sort_control(attr: &str, rule: Option<&str>, reverse: bool) -> RawControl {
    let mut key = vec![0x04, attr.len() as u8];
    key.extend_from_slice(attr.as_bytes());
    if let Some(r) = rule {
        key.extend_from_slice(&[0x80, r.len() as u8]);
        key.extend_from_slice(r.as_bytes());
    }
    if reverse {
        key.extend_from_slice(&[0x81, 0x01, 0xff]);
    }
    let mut inner = vec![0x30, key.len() as u8];
    inner.extend(key);
    let mut val = vec![0x30, inner.len() as u8];
    val.extend(inner);
    RawControl { ctype: "1.2.840.113556.1.4.473".into(), crit: true, val: Some(val) }
}

fn sorted(c: &mut LdapConn, ctrl: RawControl, attr: &str) -> (Vec<String>, Vec<u8>) {
    let res = c.with_controls(vec![ctrl]).search(PEOPLE, Scope::OneLevel, "(uid=p*)", vec![attr]).unwrap();
    let (entries, done) = res.success().unwrap();
    let sort = done.ctrls.iter().find(|c| c.1.ctype == "1.2.840.113556.1.4.474").expect("a sort response");
    let vals = entries.into_iter().map(|e| SearchEntry::construct(e).attrs[attr][0].clone()).collect();
    (vals, sort.1.val.clone().unwrap())
}

#[test]
fn sorted_results() {
    let s = Server::start_with_config(2, FAST);
    users(&s, 60);
    let mut c = s.admin();
    let num = |v: &String| v.parse::<i64>().unwrap();
    let (vals, done) = sorted(&mut c, sort_control("uidNumber", None, false), "uidNumber");
    assert_eq!(done[2..5], [0x0a, 0x01, 0x00], "sortResult success");
    assert_eq!(vals.len(), 60);
    assert!(vals.windows(2).all(|w| num(&w[0]) <= num(&w[1])), "{vals:?}");
    let (vals, _) = sorted(&mut c, sort_control("uidNumber", None, true), "uidNumber");
    assert!(vals.windows(2).all(|w| num(&w[0]) >= num(&w[1])), "{vals:?}");
    let (vals, _) = sorted(&mut c, sort_control("cn", Some("caseIgnoreOrderingMatch"), false), "cn");
    assert!(vals.windows(2).all(|w| w[0].to_lowercase() <= w[1].to_lowercase()), "{vals:?}");
    // cn has no ORDERING rule: as slapd, the search fails with inappropriateMatching.
    let res =
        c.with_controls(vec![sort_control("cn", None, false)]).search(PEOPLE, Scope::OneLevel, "(uid=p*)", vec!["cn"]);
    assert_eq!(res.unwrap().1.rc, 18);
    // Sorted and paged: pages of 7 make up the sorted whole.
    let (all, _) = sorted(&mut c, sort_control("uidNumber", None, false), "uid");
    let (dns, pages) = paged(&mut c, "(uid=p*)", 7, Some(sort_control("uidNumber", None, false)));
    assert_eq!(pages.iter().sum::<usize>(), 60);
    let uids: Vec<String> =
        dns.iter().map(|d| d.split(',').next().unwrap().trim_start_matches("uid=").to_string()).collect();
    assert_eq!(uids, all);

    ldap_utils();
    let out = Command::new("ldapsearch")
        .args(["-x", "-LLL", "-H", &s.url(), "-b", PEOPLE, "-E", "sss=-uidNumber", "(uid=p*)", "uidNumber"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let nums: Vec<i64> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("uidNumber: ").map(|v| v.parse().unwrap()))
        .collect();
    assert_eq!(nums.len(), 60);
    assert!(nums.windows(2).all(|w| w[0] >= w[1]), "{nums:?}");
}

#[test]
fn assertion_control() {
    let s = Server::start(2);
    let mut c = s.admin();
    assert_eq!(add_user(&mut c, "a").rc, 0);
    let dn = format!("uid=a,{PEOPLE}");
    let assert = |f: &str| {
        let mut ctrl = Assertion::new(f.to_string());
        ctrl.crit = true;
        vec![ctrl]
    };
    let m = || vec![Mod::Replace("sn", HashSet::from(["Changed"]))];
    assert_eq!(c.with_controls(assert("(sn=Wrong)")).modify(&dn, m()).unwrap().rc, 122);
    assert_eq!(get_entry(&mut c, &dn, vec!["sn"]).unwrap().attrs["sn"], vec!["User"]);
    assert_eq!(c.with_controls(assert("(sn=user)")).modify(&dn, m()).unwrap().rc, 0);
    assert_eq!(c.with_controls(assert("(sn=User)")).compare(&dn, "sn", "Changed").unwrap().0.rc, 122);
    let res = c.with_controls(assert("(sn=User)")).search(&dn, Scope::Base, "(objectClass=*)", vec!["1.1"]).unwrap();
    assert_eq!(res.1.rc, 122);
    let res = c.with_controls(assert("(sn=Changed)")).search(&dn, Scope::Base, "(objectClass=*)", vec!["1.1"]).unwrap();
    assert_eq!(res.success().unwrap().0.len(), 1);
    assert_eq!(c.with_controls(assert("(cn=nobody)")).delete(&dn).unwrap().rc, 122);
    assert_eq!(c.with_controls(assert("(cn=nobody)")).modifydn(&dn, "uid=b", true, None).unwrap().rc, 122);
    let attrs = vec![
        ("objectClass", HashSet::from(["inetOrgPerson"])),
        ("uid", HashSet::from(["n"])),
        ("cn", HashSet::from(["N"])),
        ("sn", HashSet::from(["N"])),
    ];
    assert_eq!(c.with_controls(assert("(sn=Other)")).add(&format!("uid=n,{PEOPLE}"), attrs.clone()).unwrap().rc, 122);
    assert_eq!(c.with_controls(assert("(sn=N)")).add(&format!("uid=n,{PEOPLE}"), attrs).unwrap().rc, 0);
    assert_eq!(c.with_controls(assert("(cn=Changed*)")).delete(&dn).unwrap().rc, 122);
    assert_eq!(c.with_controls(assert("(sn=Changed)")).delete(&dn).unwrap().rc, 0);
    // An unknown critical control fails the operation; a non-critical one is ignored.
    let unknown = |crit| vec![RawControl { ctype: "1.2.3.4.5".into(), crit, val: None }];
    assert_eq!(c.with_controls(unknown(true)).compare(PEOPLE, "ou", "people").unwrap().0.rc, 12);
    assert_eq!(c.with_controls(unknown(false)).compare(PEOPLE, "ou", "people").unwrap().0.rc, 6);
}

fn read_entry(res: &ldap3::LdapResult, oid: &str) -> HashMap<String, Vec<String>> {
    let ctrl = res.ctrls.iter().find(|c| c.1.ctype == oid).unwrap_or_else(|| panic!("no {oid} in {res:?}"));
    let entry: PreReadResp = ctrl.1.parse();
    entry.attrs
}

#[test]
fn pre_and_post_read() {
    let s = Server::start(2);
    let mut c = s.admin();
    assert_eq!(add_user(&mut c, "a").rc, 0);
    let dn = format!("uid=a,{PEOPLE}");
    let ctrls = vec![PreRead::new(vec!["sn"]), PostRead::new(vec!["sn", "modifiersName"])];
    let res = c.with_controls(ctrls).modify(&dn, vec![Mod::Replace("sn", HashSet::from(["Changed"]))]).unwrap();
    assert_eq!(res.rc, 0);
    assert_eq!(read_entry(&res, "1.3.6.1.1.13.1")["sn"], vec!["User"]);
    let after = read_entry(&res, "1.3.6.1.1.13.2");
    assert_eq!(after["sn"], vec!["Changed"]);
    assert_eq!(after["modifiersName"], vec![ROOT_DN]);

    let attrs = vec![
        ("objectClass", HashSet::from(["inetOrgPerson"])),
        ("uid", HashSet::from(["n"])),
        ("cn", HashSet::from(["N"])),
        ("sn", HashSet::from(["N"])),
    ];
    let res = c.with_controls(PostRead::new(vec!["entryUUID", "cn"])).add(&format!("uid=n,{PEOPLE}"), attrs).unwrap();
    assert_eq!(res.rc, 0);
    let after: PostReadResp = res.ctrls[0].1.parse();
    assert_eq!(after.attrs["cn"], vec!["N"]);
    assert_eq!(after.attrs["entryUUID"][0].len(), 36);

    let res = c.with_controls(PostRead::new(vec!["uid"])).modifydn(&dn, "uid=b", true, None).unwrap();
    assert_eq!(res.rc, 0);
    assert_eq!(read_entry(&res, "1.3.6.1.1.13.2")["uid"], vec!["b"]);
    let res = c.with_controls(PreRead::new(vec!["*"])).delete(&format!("uid=b,{PEOPLE}")).unwrap();
    assert_eq!(res.rc, 0);
    let before = read_entry(&res, "1.3.6.1.1.13.1");
    assert_eq!(before["sn"], vec!["Changed"]);
    assert_eq!(before["uid"], vec!["b"]);

    let root = get_entry(&mut c, "", vec!["supportedControl"]).unwrap();
    let mut listed = root.attrs["supportedControl"].clone();
    listed.sort();
    let mut want = vec![
        "1.2.840.113556.1.4.319",
        "1.2.840.113556.1.4.473",
        "1.3.6.1.1.12",
        "1.3.6.1.1.13.1",
        "1.3.6.1.1.13.2",
        "2.16.840.1.113730.3.4.2",
        "1.2.826.0.1.3344810.2.3",
        "1.3.6.1.4.1.4203.1.10.1",
        "1.3.6.1.4.1.4203.666.5.12",
        "2.16.840.1.113730.3.4.9",
        "2.16.840.1.113730.3.4.18",
        "1.3.6.1.1.22",
    ];
    want.sort();
    assert_eq!(listed, want);
}

/// A sorted search past the size limit returns the first entries of the
/// whole sort (not of what was found first), with sizeLimitExceeded; the
/// sorter keeps only that many rows, so a client cannot make the server
/// hold every match.
#[test]
fn sorted_results_stop_at_the_size_limit() {
    let s = Server::start_with_config(2, &format!("{FAST}[limits]\nsize_limit = 5\n"));
    users(&s, 60);
    let mut all = Vec::new();
    let mut root = s.admin();
    let res = root
        .with_controls(vec![sort_control("uidNumber", None, false)])
        .search(PEOPLE, Scope::OneLevel, "(uid=p*)", vec!["uidNumber"])
        .unwrap();
    for e in res.0 {
        all.push(SearchEntry::construct(e).attrs["uidNumber"][0].parse::<i64>().unwrap());
    }
    assert_eq!(all.len(), 60, "the root DN has no size limit");
    for reverse in [false, true] {
        let mut anon = s.conn();
        let res = anon
            .with_controls(vec![sort_control("uidNumber", None, reverse)])
            .search(PEOPLE, Scope::OneLevel, "(uid=p*)", vec!["uidNumber"])
            .unwrap();
        assert_eq!(res.1.rc, 4, "sizeLimitExceeded");
        let got: Vec<i64> =
            res.0.into_iter().map(|e| SearchEntry::construct(e).attrs["uidNumber"][0].parse().unwrap()).collect();
        let mut want = all.clone();
        if reverse {
            want.reverse();
        }
        assert_eq!(got, want[..5], "the first five of the sort (reverse: {reverse})");
    }
}

/// Relax Rules on add: the root DN carries a migrated entry's entryUUID
/// and timestamps over; the same entryUUID twice is refused while the
/// changelog knows entries by it; a user with write but not manage access
/// may not.
#[test]
fn relax_rules_carry_a_migrated_entry_over() {
    let rules = format!(
        "[syncrepl]\nprovider = true\n[access]\nrules = [\n  'to dn.subtree=\"{PEOPLE}\" by users write by * read',\n  'to * by * read',\n]\n"
    );
    let s = Server::start_with_config(2, &rules);
    let mut root = s.admin();
    let relax = || RawControl { ctype: "1.3.6.1.4.1.4203.666.5.12".into(), crit: true, val: None };
    let uuid = "597ae2f6-16a6-1027-98f4-d28b5365dc14";
    let device = |cn: &'static str| {
        vec![
            ("objectClass", HashSet::from(["device"])),
            ("cn", HashSet::from([cn])),
            ("entryUUID", HashSet::from([uuid])),
            ("createTimestamp", HashSet::from(["20200101000000Z"])),
        ]
    };
    let add = |c: &mut LdapConn, cn: &'static str| {
        c.with_controls(relax()).add(&format!("cn={cn},{PEOPLE}"), device(cn)).unwrap().rc
    };
    assert_eq!(add(&mut root, "migrated"), 0);
    let e = get_entry(&mut root, &format!("cn=migrated,{PEOPLE}"), vec!["entryUUID", "createTimestamp"]).unwrap();
    assert_eq!(e.attrs["entryUUID"], vec![uuid]);
    assert_eq!(e.attrs["createTimestamp"], vec!["20200101000000Z"]);
    // Its DN hashes to another partition than the first's, on either shard.
    assert_eq!(add(&mut root, "again"), 19);
    assert_eq!(root.delete(&format!("cn=migrated,{PEOPLE}")).unwrap().rc, 0);
    assert_eq!(add(&mut root, "after-delete"), 19, "a deleted entry's entryUUID stays taken");
    // An option would carry a forged entryUUID next to a fresh one: no
    // operational attribute takes a language tag (17, as slapd).
    let tagged = vec![
        ("objectClass", HashSet::from(["device"])),
        ("cn", HashSet::from(["tagged"])),
        ("entryUUID;lang-x", HashSet::from(["597ae2f6-16a6-1027-98f4-d28b5365dc15"])),
    ];
    assert_eq!(root.with_controls(relax()).add(&format!("cn=tagged,{PEOPLE}"), tagged).unwrap().rc, 17);
    assert_eq!(add_user(&mut root, "writer").rc, 0);
    let mut writer = s.conn();
    writer.simple_bind(&format!("uid=writer,{PEOPLE}"), "pw-writer").unwrap().success().unwrap();
    assert_eq!(add(&mut writer, "by-writer"), 50);
    // A relaxed modify likewise needs manage access, and with replication
    // on (syncrepl here) an entry keeps its entryUUID.
    let dn = format!("uid=writer,{PEOPLE}");
    let stamp = |c: &mut LdapConn| {
        let m = vec![Mod::Replace("modifyTimestamp", HashSet::from(["20200101000000Z"]))];
        c.with_controls(relax()).modify(&dn, m).unwrap().rc
    };
    assert_eq!(stamp(&mut writer), 50, "write is not manage");
    assert_eq!(stamp(&mut root), 0);
    assert_eq!(
        get_entry(&mut root, &dn, vec!["modifyTimestamp"]).unwrap().attrs["modifyTimestamp"],
        vec!["20200101000000Z"]
    );
    let new_uuid = vec![Mod::Replace("entryUUID", HashSet::from(["597ae2f6-16a6-1027-98f4-d28b5365dc16"]))];
    assert_eq!(root.with_controls(relax()).modify(&dn, new_uuid).unwrap().rc, 53);
}

/// Two relaxed adds of one entryUUID at the same moment, on two shards:
/// each checked that no entry held it before either was written, and both
/// were added. Exactly one may be.
#[test]
fn relaxed_adds_of_one_entry_uuid_at_once_add_one_entry() {
    let s = Server::start(2);
    let relax = || RawControl { ctype: "1.3.6.1.4.1.4203.666.5.12".into(), crit: true, val: None };
    let rounds = 40;
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
    let side = |name: &'static str| {
        let (url, barrier) = (s.url(), barrier.clone());
        std::thread::spawn(move || {
            let mut c = LdapConn::new(&url).unwrap();
            c.simple_bind(ROOT_DN, ROOT_PW).unwrap().success().unwrap();
            (0..rounds)
                .map(|i| {
                    let uuid = format!("597ae2f6-16a6-1027-98f4-{i:012x}");
                    let cn = format!("{name}{i}");
                    let attrs = vec![
                        ("objectClass", HashSet::from(["device"])),
                        ("cn", HashSet::from([cn.as_str()])),
                        ("entryUUID", HashSet::from([uuid.as_str()])),
                    ];
                    barrier.wait();
                    c.with_controls(relax()).add(&format!("cn={cn},{PEOPLE}"), attrs).unwrap().rc
                })
                .collect::<Vec<_>>()
        })
    };
    let (a, b) = (side("left"), side("right"));
    let (a, b) = (a.join().unwrap(), b.join().unwrap());
    for i in 0..rounds {
        let mut rcs = [a[i], b[i]];
        rcs.sort();
        assert_eq!(rcs, [0, 19], "round {i}: one add of the entryUUID succeeds, the other is a constraint violation");
    }
}

/// One page of `filter` under the people container; the result code and
/// the page's cookie (empty when there is none).
fn page(c: &mut LdapConn, filter: &str, cookie: Vec<u8>, sort: Option<RawControl>) -> (u32, usize, Vec<u8>) {
    let mut ctrls: Vec<RawControl> = vec![PagedResults { size: 3, cookie }.critical().into()];
    ctrls.extend(sort);
    let ldap3::SearchResult(entries, done) =
        c.with_controls(ctrls).search(PEOPLE, Scope::Subtree, filter, vec!["1.1"]).unwrap();
    let cookie =
        done.ctrls.iter().find(|c| c.1.ctype == "1.2.840.113556.1.4.319").map(|c| c.1.parse::<PagedResults>().cookie);
    (done.rc, entries.len(), cookie.unwrap_or_default())
}

/// A cookie belongs to its whole search, the sort that orders it
/// included: one of an unsorted walk sent with a sort (or a sorted one
/// without) is refused as slapd refuses it (53, "cookie is invalid or
/// old"), so the size limit counted in it cannot start again.
#[test]
fn a_paged_cookie_belongs_to_its_sort() {
    let s = Server::start_with_config(2, &format!("{FAST}[limits]\nsize_limit = 5\n"));
    users(&s, 30);
    let mut anon = s.conn();
    let (rc, n, unsorted) = page(&mut anon, "(uid=p*)", Vec::new(), None);
    assert_eq!((rc, n), (0, 3));
    let (rc, n, _) = page(&mut anon, "(uid=p*)", unsorted, Some(sort_control("uidNumber", None, false)));
    assert_eq!((rc, n), (53, 0), "an unsorted walk's cookie taken on by a sort");
    let (rc, n, sorted) = page(&mut anon, "(uid=p*)", Vec::new(), Some(sort_control("uidNumber", None, false)));
    assert_eq!((rc, n), (0, 3));
    let (rc, n, _) = page(&mut anon, "(uid=p*)", sorted.clone(), None);
    assert_eq!((rc, n), (53, 0), "a sorted walk's cookie without its sort");
    let (rc, n, _) = page(&mut anon, "(uid=p*)", sorted.clone(), Some(sort_control("uidNumber", None, true)));
    assert_eq!((rc, n), (53, 0), "a sorted walk's cookie with another order");
    // Its own sort goes on, and stops at the size limit.
    let (rc, n, _) = page(&mut anon, "(uid=p*)", sorted, Some(sort_control("uidNumber", None, false)));
    assert_eq!((rc, n), (4, 2));
}

/// `limits.unindexed_lookthrough` bounds what an unindexed search
/// examines over all its pages, not afresh on each: paging cannot walk a
/// directory the limit keeps a single search from walking.
/// ... and counts each entry once: a page that looks past its last entry
/// for one more match does not count what the next page examines again.
#[test]
fn paging_does_not_restart_the_unindexed_lookthrough() {
    // 31 entries in scope (the container and 30 users), all matching.
    for (lookthrough, unpaged, paged) in [(12, 11, 11), (35, 0, 0)] {
        let s = Server::start_with_config(2, &format!("{FAST}[limits]\nunindexed_lookthrough = {lookthrough}\n"));
        users(&s, 30);
        let mut anon = s.conn();
        let res = anon.search(PEOPLE, Scope::Subtree, "(homeDirectory=/home)", vec!["1.1"]).unwrap();
        assert_eq!(res.1.rc, unpaged, "{lookthrough}: {:?}", res.1);
        let (mut cookie, mut returned) = (Vec::new(), 0);
        let rc = loop {
            let (rc, n, next) = page(&mut anon, "(homeDirectory=/home)", cookie, None);
            returned += n;
            if rc != 0 || next.is_empty() {
                break rc;
            }
            cookie = next;
        };
        assert_eq!(rc, paged, "{lookthrough}: paged, {returned} entries returned");
        assert!(returned <= lookthrough, "{lookthrough}: {returned} entries returned");
    }
}

/// OpenLDAP's No-Op control on a rename answers what the rename would,
/// nothing moved: a new DN too long for a key, the entry's own or one of
/// its children's, is refused by both.
#[test]
fn a_no_op_rename_answers_as_the_rename_would() {
    let s = Server::start_with_config(2, FAST);
    let mut c = s.admin();
    let no_op = || RawControl { ctype: "1.3.6.1.4.1.4203.666.5.2".into(), crit: true, val: None };
    let ou = |c: &mut LdapConn, dn: &str| {
        let name = dn.split([',', '=']).nth(1).unwrap().to_string();
        c.add(dn, vec![("objectClass", HashSet::from(["organizationalUnit"])), ("ou", HashSet::from([name.as_str()]))])
    };
    let team = format!("ou=team,{PEOPLE}");
    assert_eq!(ou(&mut c, &team).unwrap().rc, 0);
    assert_eq!(ou(&mut c, &format!("ou=member-with-a-long-name,{team}")).unwrap().rc, 0);
    // `shards::write::MAX_KEY` is 1,900 bytes.
    let leaf = format!("ou={},{PEOPLE}", "l".repeat(1880));
    let below = format!("ou={},{PEOPLE}", "b".repeat(1860));
    for (dn, rdn) in
        [(team.as_str(), leaf.split(',').next().unwrap()), (team.as_str(), below.split(',').next().unwrap())]
    {
        let checked = c.with_controls(no_op()).modifydn(dn, rdn, true, None).unwrap().rc;
        let done = c.modifydn(dn, rdn, true, None).unwrap().rc;
        assert_eq!((checked, done), (53, 53), "{rdn}");
    }
    // And one that would succeed: 16654, nothing moved.
    let rc = c.with_controls(no_op()).modifydn(&team, "ou=team2", true, None).unwrap().rc;
    assert_eq!(rc, 16654);
    assert_eq!(search_dns(&mut c, PEOPLE, Scope::Subtree, "(ou=team*)").len(), 1);
    assert_eq!(search_dns(&mut c, &team, Scope::OneLevel, "(objectClass=*)").len(), 1);
}
