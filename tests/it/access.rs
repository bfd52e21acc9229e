//! Access control end to end: the default rules, a group's rights, the
//! result code of every refused operation, and `coredir acl check`.

use crate::support::*;
use ldap3::exop::PasswordModify;
use ldap3::{LdapConn, Mod, Scope, SearchEntry};
use std::collections::HashSet;
use std::process::Command;

const ADMINS: &str = "cn=admins,ou=groups,dc=example,dc=com";

fn dn(uid: &str) -> String {
    format!("uid={uid},{PEOPLE}")
}

fn as_user(s: &Server, uid: &str) -> LdapConn {
    let mut c = s.conn();
    c.simple_bind(&dn(uid), &format!("pw-{uid}")).unwrap().success().unwrap();
    c
}

/// alice, bob and carol, with bob in cn=admins.
fn populate(s: &Server) {
    let mut c = s.admin();
    for uid in ["alice", "bob", "carol"] {
        assert_eq!(add_user(&mut c, uid).rc, 0);
    }
    let bob = dn("bob");
    let res = c
        .add(
            ADMINS,
            vec![
                ("objectClass", HashSet::from(["groupOfNames"])),
                ("cn", HashSet::from(["admins"])),
                ("member", HashSet::from([bob.as_str()])),
            ],
        )
        .unwrap();
    assert_eq!(res.rc, 0, "{res:?}");
}

fn all_attrs(c: &mut LdapConn, base: &str, filter: &str) -> Vec<SearchEntry> {
    let (entries, _) =
        c.search(base, Scope::Subtree, filter, vec!["*", "+", "userPassword"]).unwrap().success().unwrap();
    entries.into_iter().map(SearchEntry::construct).collect()
}

fn has_password(e: &SearchEntry) -> bool {
    e.attrs.keys().chain(e.bin_attrs.keys()).any(|k| k.eq_ignore_ascii_case("userPassword"))
}

#[test]
fn default_rules_hide_password_hashes() {
    let s = Server::start(2);
    populate(&s);
    // Anonymous: every entry readable, no hash, and filters cannot probe it.
    let mut anon = s.conn();
    let entries = all_attrs(&mut anon, SUFFIX, "(objectClass=*)");
    assert!(entries.len() >= 6, "{}", entries.len());
    assert!(entries.iter().all(|e| !has_password(e)));
    assert!(all_attrs(&mut anon, SUFFIX, "(userPassword=*)").is_empty());
    assert!(all_attrs(&mut anon, SUFFIX, "(!(userPassword=nothing))").is_empty(), "Undefined, not true");
    assert_eq!(all_attrs(&mut anon, SUFFIX, "(|(uid=alice)(userPassword=*))").len(), 1);
    // Users: no hash either, not even their own (=wx: they may set it).
    let mut alice = as_user(&s, "alice");
    let people = all_attrs(&mut alice, PEOPLE, "(uid=*)");
    assert_eq!(people.len(), 3);
    assert!(people.iter().all(|e| !has_password(e)));
    assert!(search_dns(&mut alice, PEOPLE, Scope::Subtree, "(userPassword=*)").is_empty());
    // The root DN sees everything.
    let mut root = s.admin();
    assert!(all_attrs(&mut root, PEOPLE, "(uid=*)").iter().all(has_password));
    // Nor can a server-side sort reveal the order of the hashes: the key
    // counts as absent in every entry, so the order is the same both ways
    // (and the search succeeds, sorted by what may be searched).
    let sorted = |key: &str| {
        let (code, out, err) = tool(
            "ldapsearch",
            &["-x", "-H", &s.url(), "-b", PEOPLE, "-E", &format!("sss={key}"), "(uid=*)", "1.1"],
            None,
        );
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("sortResult: (0)"), "{out}");
        out.lines().filter(|l| l.starts_with("dn: ")).map(str::to_string).collect::<Vec<_>>()
    };
    let forward = sorted("userPassword:octetStringOrderingMatch");
    assert_eq!(forward.len(), 3, "{forward:?}");
    assert_eq!(forward, sorted("-userPassword:octetStringOrderingMatch"));
    // Compare on a password: nobody but the root DN (no password oracle).
    let cmp = anon.compare(&dn("alice"), "userPassword", "pw-alice").unwrap();
    assert_eq!(cmp.0.rc, 50, "{cmp:?}");
    let cmp = alice.compare(&dn("alice"), "userPassword", "pw-alice").unwrap();
    assert_eq!(cmp.0.rc, 50, "{cmp:?}");
    let cmp = root.compare(&dn("alice"), "userPassword", "pw-alice").unwrap();
    assert_eq!(cmp.0.rc, 6, "compareTrue: {cmp:?}");
    let cmp = alice.compare(&dn("bob"), "userPassword", "pw-bob").unwrap();
    assert_eq!(cmp.0.rc, 50, "{cmp:?}");
    // The rules name a type, whatever the client calls it: by its OID or
    // in other case, userPassword is no oracle and no one else's to write.
    for name in ["2.5.4.35", "USERPASSWORD"] {
        let cmp = anon.compare(&dn("alice"), name, "pw-alice").unwrap();
        assert_eq!(cmp.0.rc, 50, "{name}: {cmp:?}");
        let res = alice.modify(&dn("bob"), vec![Mod::Replace(name, HashSet::from(["stolen"]))]).unwrap();
        assert_eq!(res.rc, 50, "{name}: {res:?}");
    }
}

#[test]
fn users_change_only_their_own_password() {
    let s = Server::start(2);
    populate(&s);
    let mut alice = as_user(&s, "alice");
    let pm = |old: Option<&'static str>, user: Option<String>, new: &'static str| {
        let user = user.map(|u| Box::leak(u.into_boxed_str()) as &str);
        PasswordModify { user_id: user, old_pass: old, new_pass: Some(new) }
    };
    let res = alice.extended(pm(Some("pw-alice"), None, "alice-2")).unwrap().1;
    assert_eq!(res.rc, 0, "{res:?}");
    let res = alice.extended(pm(None, Some(dn("bob")), "stolen")).unwrap().1;
    assert_eq!(res.rc, 50, "{res:?}");
    // With modify: one's own userPassword yes, anything else no.
    let res = alice.modify(&dn("alice"), vec![Mod::Replace("userPassword", HashSet::from(["alice-3"]))]).unwrap();
    assert_eq!(res.rc, 0, "{res:?}");
    let res = alice.modify(&dn("alice"), vec![Mod::Replace("cn", HashSet::from(["Queen"]))]).unwrap();
    assert_eq!(res.rc, 50, "{res:?}");
    let res = alice.modify(&dn("bob"), vec![Mod::Replace("userPassword", HashSet::from(["x"]))]).unwrap();
    assert_eq!(res.rc, 50, "{res:?}");
    assert_eq!(s.conn().simple_bind(&dn("alice"), "alice-3").unwrap().rc, 0);
    assert_eq!(s.conn().simple_bind(&dn("bob"), "pw-bob").unwrap().rc, 0, "bob's password is unchanged");
}

/// The group's rights, and the exact code of each refused operation.
#[test]
fn group_members_get_the_groups_rights() {
    let rules = format!(
        r#"
[access]
rules = [
  'to dn.subtree="{PEOPLE}" by group="{ADMINS}" write by * break',
  'to attrs=userPassword by self write by anonymous auth by * none',
  'to dn.base="uid=carol,{PEOPLE}" by users search by * none',
  'to * by users read by * none',
]
"#
    );
    let s = Server::start_with_config(2, &rules);
    let mut root = s.admin();
    for uid in ["alice", "bob", "carol"] {
        assert_eq!(add_user(&mut root, uid).rc, 0);
    }
    let bob_dn = dn("bob");
    let group = vec![
        ("objectClass", HashSet::from(["groupOfNames"])),
        ("cn", HashSet::from(["admins"])),
        ("member", HashSet::from([bob_dn.as_str()])),
    ];
    assert_eq!(root.add(ADMINS, group).unwrap().rc, 0);
    let mut bob = as_user(&s, "bob");
    let mut alice = as_user(&s, "alice");
    let mut anon = s.conn();
    let cn = |v: &'static str| vec![Mod::Replace("cn", HashSet::from([v]))];
    // (who, operation, expected result code)
    let table: Vec<(&str, &mut LdapConn, Box<dyn Fn(&mut LdapConn) -> u32>, u32)> = vec![
        ("bob modifies alice", &mut bob, Box::new(move |c| c.modify(&dn("alice"), cn("By Bob")).unwrap().rc), 0),
        ("alice modifies bob", &mut alice, Box::new(move |c| c.modify(&dn("bob"), cn("By Alice")).unwrap().rc), 50),
        ("anonymous modifies", &mut anon, Box::new(move |c| c.modify(&dn("bob"), cn("x")).unwrap().rc), 8),
    ];
    for (what, c, op, want) in table {
        assert_eq!(op(c), want, "{what}");
    }
    // Adds and deletes need write on the parent's children and the entry.
    let mut bob = as_user(&s, "bob");
    let mut alice = as_user(&s, "alice");
    assert_eq!(add_user(&mut bob, "dave").rc, 0, "a group member adds");
    assert_eq!(add_user(&mut alice, "eve").rc, 50, "a non-member may not");
    assert_eq!(alice.delete(&dn("dave")).unwrap().rc, 50);
    assert_eq!(bob.delete(&dn("dave")).unwrap().rc, 0);
    assert_eq!(alice.modifydn(&dn("carol"), "uid=caroline", true, None).unwrap().rc, 50);
    // carol: searchable by users but not readable: not returned.
    assert!(search_dns(&mut alice, PEOPLE, Scope::Subtree, "(uid=carol)").is_empty());
    assert_eq!(search_dns(&mut alice, PEOPLE, Scope::OneLevel, "(uid=alice)"), vec![dn("alice")]);
    // Anonymous reads nothing under these rules but may still bind; the
    // base it may not know of is missing to it (32, no matchedDN), as slapd.
    let r = anon.search(SUFFIX, Scope::Subtree, "(objectClass=*)", vec!["1.1"]).unwrap();
    assert_eq!((r.0.len(), r.1.rc, r.1.matched.as_str()), (0, 32, ""));
    assert_eq!(s.conn().simple_bind(&dn("alice"), "pw-alice").unwrap().rc, 0);
    let cmp = alice.compare(&dn("carol"), "cn", "User carol").unwrap();
    assert_eq!(cmp.0.rc, 6, "search includes compare: {cmp:?}");
    let cmp = anon.compare(&dn("carol"), "cn", "User carol").unwrap();
    assert_eq!(cmp.0.rc, 32, "without disclose the entry does not exist: {cmp:?}");
}

#[test]
fn acl_check_prints_the_deciding_rule() {
    let mut s = Server::start(1);
    populate(&s);
    // Offline, like slapacl (an LMDB database could be read while serving; sled's cannot).
    s.stop();
    let run = |as_dn: &str, entry: &str, attr: &str, level: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_coredir"))
            .args(["acl", "check", "--config"])
            .arg(s.config_path())
            .arg("--data")
            .arg(s.data())
            .args(["--as", as_dn, "--entry", entry, "--attr", attr, "--level", level])
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, out, err) = run("anonymous", &dn("alice"), "userPassword", "auth");
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("ALLOWED (granted: auth (=xd))"), "{out}");
    assert!(out.contains("by rule 0: to attrs=userPassword by self =wx"), "{out}");
    assert!(out.contains("clause 1: by anonymous auth"), "{out}");
    let (code, out, _) = run(&dn("bob"), &dn("alice"), "userPassword", "read");
    assert_eq!(code, Some(1), "{out}");
    // By its OID, as the server decides it: the same rule.
    let (code, out, _) = run(&dn("bob"), &dn("alice"), "2.5.4.35", "read");
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("by rule 0: to attrs=userPassword"), "{out}");
    assert!(out.contains("DENIED (granted: none)") && out.contains("clause 2: by * none"), "{out}");
    let (code, out, _) = run(&dn("alice"), &dn("alice"), "userPassword", "write");
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("ALLOWED (granted: =wx)"), "{out}");
    let (code, out, _) = run(&dn("alice"), &dn("alice"), "userPassword", "read");
    assert_eq!(code, Some(1), "{out}");
    let (code, out, _) = run(ROOT_DN, &dn("alice"), "userPassword", "manage");
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("root DN bypasses"), "{out}");
    let (code, _, err) = run("anonymous", &dn("alice"), "cn", "snoop");
    assert_eq!(code, Some(1));
    assert!(err.contains("--level"), "{err}");
}

#[test]
fn a_bad_rule_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("c.toml");
    std::fs::write(&config, "[access]\nrules = ['to * by * read', 'to attrs=nosuch by * read']\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_coredir"))
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&config)
        .arg("--data")
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("access.rules: access rule 1") && err.contains("nosuch"), "{err}");
}

/// Issue 17: the Assertion control was an oracle: anonymous learned
/// whether a guessed `userPassword` hash was right (0 against 122) on a
/// base search or a Compare, with no bind to log or lock out. The
/// assertion is a filter under the requester's rights: without `search`
/// on userPassword it is Undefined, so true and false guesses look alike.
#[test]
fn the_assertion_control_is_no_oracle() {
    use ldap3::controls::Assertion;
    let s = Server::start(2);
    populate(&s);
    let alice = dn("alice");
    let mut root = s.admin();
    let (rs, _) = root.search(&alice, Scope::Base, "(objectClass=*)", vec!["userPassword"]).unwrap().success().unwrap();
    let hash = SearchEntry::construct(rs[0].clone()).attrs["userPassword"][0].clone();
    let right = format!("(userPassword={hash})");
    let wrong = "(userPassword={SSHA}AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA)".to_string();
    let assert = |f: &str| {
        let mut ctrl = Assertion::new(f.to_string());
        ctrl.crit = true;
        ctrl
    };
    let base_rc = |c: &mut LdapConn, f: &str| {
        c.with_controls(assert(f)).search(&alice, Scope::Base, "(objectClass=*)", vec!["1.1"]).unwrap().1.rc
    };
    let compare_rc =
        |c: &mut LdapConn, f: &str| c.with_controls(assert(f)).compare(&alice, "sn", "alice").unwrap().0.rc;
    // The root may search everything: the assertion decides.
    assert_eq!((base_rc(&mut root, &right), base_rc(&mut root, &wrong)), (0, 122));
    for mut c in [s.conn(), as_user(&s, "carol")] {
        assert_eq!((base_rc(&mut c, &right), base_rc(&mut c, &wrong)), (122, 122), "search");
        assert_eq!((compare_rc(&mut c, &right), compare_rc(&mut c, &wrong)), (122, 122), "compare");
        // An assertion the requester may evaluate still works.
        assert_eq!(base_rc(&mut c, "(sn=*)"), 0);
    }
    // A write carries it too. The default rule gives self `=wx` on
    // userPassword (write and auth, not search): her own hash is no
    // assertion she may make either.
    let mut carol = as_user(&s, "carol");
    let m = || vec![Mod::Replace("userPassword", HashSet::from(["pw-carol"]))];
    let (rs, _) =
        root.search(&dn("carol"), Scope::Base, "(objectClass=*)", vec!["userPassword"]).unwrap().success().unwrap();
    let own = format!("(userPassword={})", SearchEntry::construct(rs[0].clone()).attrs["userPassword"][0]);
    let rc = carol.with_controls(assert(&own)).modify(&dn("carol"), m()).unwrap().rc;
    assert_eq!(rc, 122, "self has =wx on userPassword, not search");
    let rc = carol.with_controls(assert("(sn=nobody)")).modify(&dn("carol"), m()).unwrap().rc;
    assert_eq!(rc, 122);
    let rc = carol.with_controls(assert("(sn=*)")).modify(&dn("carol"), m()).unwrap().rc;
    assert_eq!(rc, 0);
    let rc = carol.with_controls(assert(&right)).modify(&dn("carol"), m()).unwrap().rc;
    assert_eq!(rc, 122, "alice's hash is no match for carol's entry either way");
}

/// A Password Modify at or below a referral object is unwillingToPerform,
/// as slapd's, but only for a referral the requester may know of: below a
/// hidden one it answers as below any entry it may not see (it told the
/// hidden object's existence and class).
#[test]
fn a_password_change_below_a_hidden_referral_tells_nothing_of_it() {
    let rules = format!(
        r#"
[access]
rules = [
  'to dn.base="ou=ref,{SUFFIX}" by * none',
  'to attrs=userPassword by self =wx by anonymous auth by * none',
  'to * by users write by * read',
]
"#
    );
    let s = Server::start_with_config(1, &rules);
    let mut root = s.admin();
    assert_eq!(add_user(&mut root, "alice").rc, 0);
    let referral = vec![
        ("objectClass", HashSet::from(["referral", "extensibleObject"])),
        ("ou", HashSet::from(["ref"])),
        ("ref", HashSet::from(["ldap://elsewhere.example.com/ou=ref,dc=example,dc=com"])),
    ];
    assert_eq!(root.add(&format!("ou=ref,{SUFFIX}"), referral).unwrap().rc, 0);
    let plain = vec![("objectClass", HashSet::from(["organizationalUnit"])), ("ou", HashSet::from(["plain"]))];
    assert_eq!(root.add(&format!("ou=plain,{SUFFIX}"), plain).unwrap().rc, 0);
    let mut alice = as_user(&s, "alice");
    let mut change = |target: String| {
        let target: &'static str = Box::leak(target.into_boxed_str());
        alice.extended(PasswordModify { user_id: Some(target), old_pass: None, new_pass: Some("x") }).unwrap().1.rc
    };
    let below_hidden = change(format!("uid=x,ou=ref,{SUFFIX}"));
    let below_plain = change(format!("uid=x,ou=plain,{SUFFIX}"));
    assert_eq!(below_hidden, below_plain, "the hidden referral object shows through");
    // The root DN may know of it: slapd's answer.
    let res = root.extended(PasswordModify {
        user_id: Some("uid=x,ou=ref,dc=example,dc=com"),
        old_pass: None,
        new_pass: Some("x"),
    });
    assert_eq!(res.unwrap().1.rc, 53);
}

/// A filter, a sort key or an Assertion on a supertype (`name`) or on a
/// type without options (`description`) matches the stored subtypes and
/// tagged values too; each of those needs the search right its own rules
/// give, as in slapd. Before, the rules of the name asked decided alone,
/// and `(name=Smith)` found the entry by an sn the rules hide.
#[test]
fn an_item_on_a_supertype_or_untagged_type_needs_search_on_what_it_matches() {
    let rules = r#"
[access]
rules = [
  'to attrs=sn by users read by * none',
  'to attrs=description;lang-en by users read by * none',
  'to * by * read',
]
"#;
    let s = Server::start_with_config(1, rules);
    populate(&s);
    let mut root = s.admin();
    let tagged = vec![Mod::Add("description;lang-en", HashSet::from(["hidden-tag"]))];
    root.modify(&dn("alice"), tagged).unwrap().success().unwrap();
    // Every user's sn is "User", their cn "User <uid>".
    let mut anon = s.conn();
    for filter in ["(name=User)", "(name=*ser)", "(description=hidden-tag)", "(description=hidden*)"] {
        let found = search_dns(&mut anon, PEOPLE, Scope::Subtree, &filter);
        assert!(found.is_empty(), "{filter}: {found:?}");
    }
    // What the rules let everyone search still matches.
    assert_eq!(search_dns(&mut anon, PEOPLE, Scope::Subtree, "(cn=*)").len(), 3);
    // A user may search sn and the tagged description: both match.
    let mut bob = as_user(&s, "bob");
    assert_eq!(search_dns(&mut bob, PEOPLE, Scope::Subtree, "(name=User)").len(), 3);
    assert_eq!(search_dns(&mut bob, PEOPLE, Scope::Subtree, "(description=hidden-tag)"), vec![dn("alice")]);
}

/// A rename that deletes the old RDN's values deletes them as a modify
/// would: it needs write on that attribute too, as slapd checks the
/// modifications a rename makes. Before, a user who may rename their
/// entry but not write `uid` deleted `uid` that way.
#[test]
fn a_rename_deleting_the_old_rdn_needs_write_on_it() {
    let rules = format!(
        r#"
[access]
rules = [
  'to dn.base="{PEOPLE}" attrs=children by users write by * read',
  'to attrs=uid by * read',
  'to * by self write by * read',
]
"#
    );
    let s = Server::start_with_config(1, &rules);
    populate(&s);
    let mut alice = as_user(&s, "alice");
    let res = alice.modifydn(&dn("alice"), "cn=alice", true, None).unwrap();
    assert_eq!(res.rc, 50, "{res:?}");
    let mut root = s.admin();
    assert!(get_entry(&mut root, &dn("alice"), vec!["uid"]).is_some(), "not renamed");
    // Keeping the old RDN's value writes nothing the rules refuse.
    let res = alice.modifydn(&dn("alice"), "cn=alice", false, None).unwrap();
    assert_eq!(res.rc, 0, "{res:?}");
    let moved = get_entry(&mut root, &format!("cn=alice,{PEOPLE}"), vec!["uid"]).unwrap();
    assert_eq!(moved.attrs["uid"], vec!["alice"]);
}
