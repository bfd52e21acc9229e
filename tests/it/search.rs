use crate::support::*;
use ldap3::{Scope, SearchEntry, SearchOptions};

/// A small tree: ou=people with users u0..u9 (uidNumber 1000+i), plus
/// ou=groups with one group, plus a nested ou under people.
fn populated() -> Server {
    let s = Server::start(2);
    let mut c = s.admin();
    for i in 0..10 {
        let dn = format!("uid=u{i},{PEOPLE}");
        let (uid, num, cn) = (format!("u{i}"), format!("{}", 1000 + i), format!("Person {i} Example"));
        let res = c
            .add(
                &dn,
                vec![
                    ("objectClass", ["top", "inetOrgPerson", "posixAccount"].into()),
                    ("uid", [uid.as_str()].into()),
                    ("cn", [cn.as_str()].into()),
                    ("sn", [if i % 2 == 0 { "Even" } else { "Odd" }].into()),
                    ("uidNumber", [num.as_str()].into()),
                    ("gidNumber", ["100"].into()),
                    ("homeDirectory", [format!("/home/u{i}").as_str()].into()),
                    ("mail", [format!("U{i}@Example.COM").as_str()].into()),
                    ("userPassword", ["secret"].into()),
                ],
            )
            .unwrap();
        assert_eq!(res.rc, 0, "{res:?}");
    }
    let nested = format!("ou=staff,{PEOPLE}");
    c.add(&nested, vec![("objectClass", ["organizationalUnit"].into()), ("ou", ["staff"].into())])
        .unwrap()
        .success()
        .unwrap();
    c.add(
        &format!("uid=deep,{nested}"),
        vec![
            ("objectClass", ["inetOrgPerson"].into()),
            ("uid", ["deep"].into()),
            ("cn", ["Deep"].into()),
            ("sn", ["Deep"].into()),
        ],
    )
    .unwrap()
    .success()
    .unwrap();
    s
}

#[test]
fn scopes() {
    let s = populated();
    let mut c = s.conn();
    assert_eq!(search_dns(&mut c, PEOPLE, Scope::Base, "(objectClass=*)"), vec![PEOPLE.to_string()]);
    let one = search_dns(&mut c, PEOPLE, Scope::OneLevel, "(objectClass=*)");
    assert_eq!(one.len(), 11, "{one:?}");
    assert!(!one.contains(&PEOPLE.to_string()));
    assert!(!one.iter().any(|d| d.starts_with("uid=deep")));
    let sub = search_dns(&mut c, PEOPLE, Scope::Subtree, "(objectClass=*)");
    assert_eq!(sub.len(), 13, "{sub:?}");
    let all = search_dns(&mut c, SUFFIX, Scope::Subtree, "(objectClass=*)");
    assert_eq!(all.len(), 13 + 2, "suffix and ou=groups too");
    // The base DN is matched however it is written.
    assert_eq!(search_dns(&mut c, "OU=People, DC=EXAMPLE,dc=com", Scope::Base, "(objectClass=*)").len(), 1);
    // Missing base: noSuchObject with the closest existing ancestor.
    let res = c.search(&format!("uid=x,ou=missing,{SUFFIX}"), Scope::Subtree, "(objectClass=*)", vec!["1.1"]).unwrap();
    assert_eq!(res.1.rc, 32);
    assert_eq!(res.1.matched.to_lowercase(), SUFFIX);
    let res = c.search("not a dn", Scope::Base, "(objectClass=*)", vec!["1.1"]).unwrap();
    assert_eq!(res.1.rc, 34);
}

#[test]
fn filters_of_every_kind() {
    let s = populated();
    let mut c = s.conn();
    let count = |c: &mut ldap3::LdapConn, f: &str| search_dns(c, PEOPLE, Scope::Subtree, f).len();
    for (filter, want) in [
        ("(uid=u3)", 1),
        ("(UID=U3)", 1),
        ("(userid=u3)", 1),
        ("(mail=u3@example.com)", 1),
        ("(cn=person 3 example)", 1),
        ("(cn=Person*)", 10),
        ("(cn=*example)", 10),
        ("(cn=*son 1*)", 1),
        ("(cn=p*3*e)", 1),
        ("(uidNumber>=1005)", 5),
        ("(uidNumber<=1001)", 2),
        ("(sn~=odd)", 5),
        ("(mail=*)", 10),
        ("(telephoneNumber=*)", 0),
        ("(&(sn=odd)(uidNumber>=1005))", 3),
        ("(|(uid=u1)(uid=u2)(uid=deep))", 3),
        ("(!(sn=odd))", 8),
        ("(&(objectClass=inetOrgPerson)(!(|(sn=odd)(sn=even))))", 1),
        ("(uid:caseExactMatch:=U3)", 0),
        ("(uid:caseIgnoreMatch:=U3)", 1),
        ("(uidNumber:2.5.13.14:=1003)", 1),
        ("(ou:dn:=staff)", 2),
        ("(userPassword=secret)", 0),
        ("(userPassword=*)", 0),
    ] {
        assert_eq!(count(&mut c, filter), want, "anonymous {filter}");
    }
    // The root DN may filter on passwords (stored hashed).
    let mut admin = s.admin();
    assert_eq!(count(&mut admin, "(userPassword=*)"), 10);
}

#[test]
fn attribute_selection() {
    let s = populated();
    let mut c = s.conn();
    let dn = format!("uid=u1,{PEOPLE}");
    let e = get_entry(&mut c, &dn, vec![]).unwrap();
    assert!(e.attrs.contains_key("cn") && e.attrs.contains_key("objectClass"));
    assert!(!e.attrs.contains_key("userPassword"), "never to anonymous");
    assert!(!e.attrs.contains_key("entryUUID"), "operational only with +");
    let e = get_entry(&mut c, &dn, vec!["+"]).unwrap();
    for a in [
        "entryUUID",
        "createTimestamp",
        "modifyTimestamp",
        "creatorsName",
        "modifiersName",
        "hasSubordinates",
        "numSubordinates",
    ] {
        assert!(e.attrs.contains_key(a), "{a} missing from +: {:?}", e.attrs.keys());
    }
    assert!(!e.attrs.contains_key("cn"));
    assert_eq!(e.attrs["hasSubordinates"], vec!["FALSE"]);
    assert_eq!(e.attrs["creatorsName"], vec![ROOT_DN]);
    let e = get_entry(&mut c, &dn, vec!["commonName", "SN"]).unwrap();
    assert_eq!(e.attrs.keys().count(), 2, "{:?}", e.attrs);
    let e = get_entry(&mut c, &dn, vec!["1.1"]).unwrap();
    assert!(e.attrs.is_empty());
    let e = get_entry(&mut c, &dn, vec!["*", "entryUUID"]).unwrap();
    assert!(e.attrs.contains_key("cn") && e.attrs.contains_key("entryUUID"));
    let e = get_entry(&mut c, PEOPLE, vec!["numSubordinates", "hasSubordinates"]).unwrap();
    assert_eq!(e.attrs["numSubordinates"], vec!["11"]);
    assert_eq!(e.attrs["hasSubordinates"], vec!["TRUE"]);
    let mut admin = s.admin();
    let e = get_entry(&mut admin, &dn, vec!["userPassword"]).unwrap();
    assert!(e.attrs["userPassword"][0].starts_with("{PBKDF2-SHA512}"), "cleartext is hashed on add");
    // typesOnly
    let opts = SearchOptions::new().typesonly(true);
    let (entries, _) =
        c.with_search_options(opts).search(&dn, Scope::Base, "(objectClass=*)", vec!["cn"]).unwrap().success().unwrap();
    let e = SearchEntry::construct(entries[0].clone());
    assert_eq!(e.attrs["cn"], Vec::<String>::new());
}

#[test]
fn size_and_time_limits() {
    let s = populated();
    let mut c = s.conn();
    c.with_search_options(SearchOptions::new().sizelimit(3));
    let res = c.search(PEOPLE, Scope::Subtree, "(uid=u*)", vec!["1.1"]).unwrap();
    assert_eq!(res.1.rc, 4, "sizeLimitExceeded");
    assert_eq!(res.0.len(), 3);
    // Exactly the limit is not exceeded.
    let mut c = s.conn();
    c.with_search_options(SearchOptions::new().sizelimit(10));
    let res = c.search(PEOPLE, Scope::Subtree, "(uid=u*)", vec!["1.1"]).unwrap();
    assert_eq!((res.1.rc, res.0.len()), (0, 10));
    let mut c = s.conn();
    c.with_search_options(SearchOptions::new().timelimit(30));
    let res = c.search(PEOPLE, Scope::Subtree, "(uid=u*)", vec!["1.1"]).unwrap();
    assert_eq!((res.1.rc, res.0.len()), (0, 10));
}

#[test]
fn root_dse() {
    let s = Server::start(1);
    let mut c = s.conn();
    let e = get_entry(&mut c, "", vec!["+"]).unwrap();
    assert_eq!(e.dn, "");
    assert_eq!(e.attrs["namingContexts"], vec![SUFFIX]);
    assert_eq!(e.attrs["supportedLDAPVersion"], vec!["3"]);
    assert!(e.attrs["supportedExtension"].contains(&"1.3.6.1.4.1.4203.1.11.3".to_string()));
    assert_eq!(e.attrs["vendorName"], vec!["coredir"]);
    assert!(e.attrs.contains_key("vendorVersion") && e.attrs.contains_key("supportedControl"));
    let e = get_entry(&mut c, "", vec!["namingContexts"]).unwrap();
    assert_eq!(e.attrs.len(), 1);
}

#[test]
fn search_while_writes_happen() {
    let s = Server::start(2);
    let url = s.url();
    let writer = std::thread::spawn(move || {
        let mut c = ldap3::LdapConn::new(&url).unwrap();
        c.simple_bind(ROOT_DN, ROOT_PW).unwrap().success().unwrap();
        for i in 0..300 {
            assert_eq!(add_user(&mut c, &format!("w{i}")).rc, 0);
        }
    });
    let mut c = s.conn();
    let mut last = 0;
    while !writer.is_finished() {
        let n = search_dns(&mut c, PEOPLE, Scope::OneLevel, "(uid=w*)").len();
        assert!(n >= last, "a search saw fewer entries than an earlier one ({n} < {last})");
        last = n;
    }
    writer.join().unwrap();
    assert_eq!(search_dns(&mut c, PEOPLE, Scope::OneLevel, "(uid=w*)").len(), 300);
}

#[test]
fn equality_indexes_follow_every_write() {
    let s = Server::start(2);
    let mut c = s.admin();
    for i in 0..20 {
        assert_eq!(add_user(&mut c, &format!("ix{i}")).rc, 0);
    }
    let people = |c: &mut ldap3::LdapConn, f: &str| search_dns(c, PEOPLE, Scope::Subtree, f);
    assert_eq!(people(&mut c, "(cn=user ix3)"), vec![format!("uid=ix3,{PEOPLE}")]);
    assert_eq!(people(&mut c, "(&(objectClass=person)(|(uid=ix1)(uid=IX2)))").len(), 2);
    // Modify: the old value leaves the index, the new one enters it.
    let dn = format!("uid=ix3,{PEOPLE}");
    c.modify(&dn, vec![ldap3::Mod::Replace("cn", std::collections::HashSet::from(["Renamed Person"]))])
        .unwrap()
        .success()
        .unwrap();
    assert!(people(&mut c, "(cn=user ix3)").is_empty());
    assert_eq!(people(&mut c, "(cn=renamed person)"), vec![dn.clone()]);
    // Rename: found under the new DN only.
    c.modifydn(&dn, "uid=ix3b", true, None).unwrap().success().unwrap();
    assert_eq!(people(&mut c, "(uid=ix3b)"), vec![format!("uid=ix3b,{PEOPLE}")]);
    assert!(people(&mut c, "(uid=ix3)").is_empty());
    // Delete: gone from the index.
    c.delete(&format!("uid=ix4,{PEOPLE}")).unwrap().success().unwrap();
    assert!(people(&mut c, "(uid=ix4)").is_empty());
    // Scope still applies to indexed candidates.
    assert!(search_dns(&mut c, &format!("ou=groups,{SUFFIX}"), Scope::Subtree, "(uid=ix5)").is_empty());
    assert_eq!(search_dns(&mut c, SUFFIX, Scope::OneLevel, "(uid=ix5)").len(), 0);
    assert_eq!(search_dns(&mut c, PEOPLE, Scope::OneLevel, "(uid=ix5)").len(), 1);
    // The same answers as an unindexed scan of the same filter.
    let indexed = people(&mut c, "(objectClass=inetOrgPerson)");
    let scanned = people(&mut c, "(&(objectClass=*)(|(objectClass=inetOrgPerson)(description=*)))");
    assert_eq!(indexed, scanned);
    assert_eq!(indexed.len(), 19);
}

/// Referral objects (RFC 3296) are found by every search in whose scope
/// they lie, also when `objectClass` has no index and after a restart
/// (the referral check is skipped while no store has ever held one).
#[test]
fn referral_objects_answer_after_a_restart_without_an_objectclass_index() {
    let mut s = Server::start_with_config(2, "[indexes]\nuid = \"eq\"\n");
    let mut c = s.admin();
    let people = |c: &mut ldap3::LdapConn| {
        let r = c.search(PEOPLE, Scope::Subtree, "(uid=nobody)", vec!["1.1"]).unwrap();
        let mut refs = r.1.refs.clone();
        refs.sort();
        (r.0.len(), refs)
    };
    assert_eq!(people(&mut c), (0, vec![]));
    let referral: Vec<(&str, std::collections::HashSet<&str>)> = vec![
        ("objectClass", ["referral", "extensibleObject"].into()),
        ("ou", ["far"].into()),
        ("ref", ["ldap://far.example.org/ou=far,dc=example,dc=org"].into()),
    ];
    c.add(&format!("ou=far,{PEOPLE}"), referral).unwrap().success().unwrap();
    let expected = (0, vec!["ldap://far.example.org/ou=far,dc=example,dc=org??sub".to_string()]);
    assert_eq!(people(&mut c), expected);
    s.restart();
    let mut c = s.admin();
    assert_eq!(people(&mut c), expected);
    // Below it: a referral with the target's RDNs put in front.
    let below = c.search(&format!("cn=x,ou=far,{PEOPLE}"), Scope::Base, "(objectClass=*)", vec!["1.1"]).unwrap();
    assert_eq!(below.1.rc, 10);
    assert_eq!(below.1.refs, vec!["ldap://far.example.org/cn=x,ou=far,dc=example,dc=org??base".to_string()]);
    let manage = ldap3::controls::RawControl { ctype: "2.16.840.1.113730.3.4.2".into(), crit: true, val: None };
    c.with_controls(manage).delete(&format!("ou=far,{PEOPLE}")).unwrap().success().unwrap();
    assert_eq!(people(&mut c), (0, vec![]));
}

/// A store written before referral objects and aliases had an index key
/// of their own (simulated: the keys removed behind the server's back)
/// gets them at start, found through the objectClass equality index.
#[test]
fn referral_objects_and_aliases_from_an_older_store_get_their_keys_at_start() {
    use shards::index::Marked;
    let mut s = Server::start(1);
    let mut c = s.admin();
    let referral: Vec<(&str, std::collections::HashSet<&str>)> = vec![
        ("objectClass", ["referral", "extensibleObject"].into()),
        ("ou", ["old"].into()),
        ("ref", ["ldap://old.example.org/ou=old,dc=example,dc=org"].into()),
    ];
    c.add(&format!("ou=old,{PEOPLE}"), referral).unwrap().success().unwrap();
    assert_eq!(add_user(&mut c, "target").rc, 0);
    let target = format!("uid=target,{PEOPLE}");
    let alias: Vec<(&str, std::collections::HashSet<&str>)> = vec![
        ("objectClass", ["alias", "extensibleObject"].into()),
        ("cn", ["alias"].into()),
        ("aliasedObjectName", [target.as_str()].into()),
    ];
    c.add(&format!("cn=alias,{SUFFIX}"), alias).unwrap().success().unwrap();
    drop(c);
    s.stop();
    let stores = shards::testing::Tamper::open(&s.data()).unwrap();
    let dropped: usize =
        [Marked::Referral, Marked::Alias].into_iter().map(|class| stores.drop_marks(0, class).unwrap()).sum();
    assert_eq!(dropped, 2, "the referral object's and the alias's own keys");
    drop(stores);
    s.launch();
    let mut c = s.admin();
    let r = c.search(PEOPLE, Scope::Subtree, "(uid=nobody)", vec!["1.1"]).unwrap();
    assert_eq!(r.1.refs, vec!["ldap://old.example.org/ou=old,dc=example,dc=org??sub".to_string()]);
    let opts = ldap3::SearchOptions::new().deref(ldap3::DerefAliases::Always);
    let found = c.with_search_options(opts).search(SUFFIX, Scope::Subtree, "(cn=alias)", vec!["1.1"]).unwrap();
    assert!(found.0.is_empty(), "an alias is dereferenced, not returned: {:?}", found.0);
}

/// A connection's long searches take turns a slice at a time (one of them
/// in the shard's run queue at once, `Emit::flush`): two pipelined costly
/// searches both send entries before either ends. With the turn kept by
/// whoever held it last (glommio's semaphore gives a freed unit to the
/// first to ask, not the waiter it woke), the first ran to its end alone.
#[test]
fn pipelined_long_searches_of_one_connection_take_turns() {
    use ldap3_proto::proto::{LdapFilter, LdapMsg, LdapOp, LdapSearchScope, LdapSubstringFilter};
    let mut s = Server::prepare(1, "");
    let mut ldif = String::new();
    for i in 0..3000 {
        ldif += &format!("dn: uid=t{i},{PEOPLE}\nobjectClass: inetOrgPerson\nuid: t{i}\ncn: t{i}\nsn: T\n\n");
    }
    s.import_and_launch(&ldif);
    // Every entry matches, after 300 unindexed terms that do not: many
    // slices of 2 ms each.
    let mut terms: Vec<LdapFilter> = (0..300)
        .map(|n| {
            let any = vec![format!("{n}zz")];
            LdapFilter::Substring("description".into(), LdapSubstringFilter { initial: None, any, final_: None })
        })
        .collect();
    terms.push(LdapFilter::Present("objectClass".into()));
    let costly = |msgid| {
        let mut op = search(PEOPLE, LdapSearchScope::OneLevel);
        if let LdapOp::SearchRequest(req) = &mut op {
            req.filter = LdapFilter::Or(terms.clone());
            req.attrs = vec!["1.1".into()];
        }
        LdapMsg::new(msgid, op)
    };
    let mut r = Raw::connect(&s);
    r.send(vec![LdapMsg::new(1, bind(ROOT_DN, ROOT_PW))]);
    assert_eq!(r.recv().unwrap().msgid, 1);
    r.send(vec![costly(2), costly(3)]);
    let (mut entries, mut done) = ([0usize; 2], 0);
    while done < 2 {
        let m = r.recv().expect("the searches' answers");
        match m.op {
            LdapOp::SearchResultEntry(_) => entries[(m.msgid - 2) as usize] += 1,
            LdapOp::SearchResultDone(_) => {
                assert!(entries.iter().all(|n| *n > 0), "a search ended before the other sent anything: {entries:?}");
                done += 1;
            }
            _ => {}
        }
    }
    assert_eq!(entries, [3000, 3000]);
}
