use super::*;
use shards::dn::Dn;
use shards::entry::{Attr as EntryAttr, Entry};

/// Members: (group DN, member DN).
struct Fixed(Vec<(&'static str, &'static str)>);

impl Groups for Fixed {
    fn is_member(&self, group: &[u8], class: &str, attr: &str, member: &[u8]) -> bool {
        assert_eq!((class, attr), ("groupOfNames", "member"));
        self.0.iter().any(|(g, m)| key(g) == group && key(m) == member)
    }
}

fn key(dn: &str) -> Vec<u8> {
    Dn::parse(dn).unwrap().key()
}

fn rules(list: &[&str]) -> Acl {
    parse::compile(&list.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
}

fn entry_bytes(dn: &str, classes: &[&str]) -> Vec<u8> {
    let e = Entry {
        dn: dn.into(),
        attrs: vec![EntryAttr {
            name: "objectClass".into(),
            vals: classes.iter().map(|c| c.as_bytes().to_vec()).collect(),
        }],
    };
    let mut out = Vec::new();
    e.encode(&mut out).unwrap();
    out
}

const PEOPLE: &str = "ou=people,dc=example,dc=com";
const ALICE: &str = "uid=alice,ou=people,dc=example,dc=com";
const BOB: &str = "uid=bob,ou=people,dc=example,dc=com";
const ADMINS: &str = "cn=admins,ou=groups,dc=example,dc=com";

/// (rules, requester or "" for anonymous, TLS ssf, entry, entry classes,
/// attribute, level) -> granted?
#[test]
fn decision_table() {
    let default: Vec<&str> = DEFAULT_RULES.to_vec();
    let scoped = [
        "to dn.subtree=\"ou=people,dc=example,dc=com\" attrs=mail by self write by users read by * none",
        "to filter=(objectClass=posixAccount) attrs=loginShell by self write by * read",
        "to dn.children=\"ou=people,dc=example,dc=com\" by group=\"cn=admins,ou=groups,dc=example,dc=com\" write by * break",
        "to dn.regex=\"uid=[^,]+,ou=people,dc=example,dc=com\" attrs=entry,cn by users read by anonymous disclose",
        "to * by ssf=128 read by * search",
    ];
    // A tagged subtype and its untagged type are two rule targets: the
    // rule on `description` must not be read as one on `;lang-en` only.
    let tagged = ["to attrs=description;lang-en by * none", "to attrs=description by * read", "to * by * write"];
    let table: &[(&[&str], &str, u32, &str, &[&str], &str, Level, bool)] = &[
        (&tagged, "", 0, ALICE, &["person"], "description", Level::Read, true),
        (&tagged, "", 0, ALICE, &["person"], "description", Level::Write, false),
        (&tagged, "", 0, ALICE, &["person"], "description;lang-en", Level::Read, false),
        (&tagged, "", 0, ALICE, &["person"], "description;lang-de", Level::Write, false),
        (&tagged, "", 0, ALICE, &["person"], "cn", Level::Write, true),
        // The default rules.
        (&default, "", 0, ALICE, &["person"], "userPassword", Level::Auth, true),
        (&default, "", 0, ALICE, &["person"], "userPassword", Level::Compare, false),
        (&default, "", 0, ALICE, &["person"], "cn", Level::Read, true),
        (&default, "", 0, ALICE, &["person"], "cn", Level::Write, false),
        (&default, ALICE, 0, ALICE, &["person"], "userPassword", Level::Write, true),
        (&default, ALICE, 0, ALICE, &["person"], "userPassword", Level::Auth, true),
        (&default, ALICE, 0, ALICE, &["person"], "userPassword", Level::Read, false),
        (&default, ALICE, 0, ALICE, &["person"], "userPassword", Level::Compare, false),
        (&default, ALICE, 0, ALICE, &["person"], "shadowLastChange", Level::Write, true),
        (&default, BOB, 0, ALICE, &["person"], "shadowLastChange", Level::Read, true),
        (&default, ALICE, 0, ALICE, &["person"], "cn", Level::Write, false),
        (&default, BOB, 0, ALICE, &["person"], "userPassword", Level::Read, false),
        (&default, BOB, 0, ALICE, &["person"], "userPassword", Level::Auth, false),
        (&default, BOB, 0, ALICE, &["person"], "entry", Level::Read, true),
        // DN scopes, self and users.
        (&scoped, ALICE, 0, ALICE, &["person"], "mail", Level::Write, true),
        (&scoped, BOB, 0, ALICE, &["person"], "mail", Level::Read, true),
        (&scoped, BOB, 0, ALICE, &["person"], "mail", Level::Write, false),
        (&scoped, "", 0, ALICE, &["person"], "mail", Level::Disclose, false),
        (&scoped, "", 0, PEOPLE, &["organizationalUnit"], "ou", Level::Search, true),
        // Filters.
        (&scoped, ALICE, 0, ALICE, &["posixAccount"], "loginShell", Level::Write, true),
        (&scoped, ALICE, 0, ALICE, &["person"], "loginShell", Level::Write, false),
        (&scoped, BOB, 0, ALICE, &["posixAccount"], "loginShell", Level::Read, true),
        // Groups and break.
        (&scoped, BOB, 0, ALICE, &["person"], "sn", Level::Write, true),
        (&scoped, BOB, 0, PEOPLE, &["organizationalUnit"], "sn", Level::Write, false),
        (&scoped, ALICE, 0, BOB, &["person"], "cn", Level::Read, true),
        (&scoped, ALICE, 0, BOB, &["person"], "cn", Level::Write, false),
        // Regex and anonymous.
        (&scoped, "", 0, BOB, &["person"], "cn", Level::Disclose, true),
        (&scoped, "", 0, BOB, &["person"], "cn", Level::Search, false),
        (&scoped, "", 0, BOB, &["person"], "entry", Level::Disclose, true),
        // ssf.
        (&scoped, "", 256, PEOPLE, &["organizationalUnit"], "ou", Level::Read, true),
        (&scoped, "", 0, PEOPLE, &["organizationalUnit"], "ou", Level::Read, false),
        // Nothing matches: default deny.
        (&["to dn.base=\"dc=example,dc=com\" by * read"], BOB, 0, ALICE, &["person"], "cn", Level::Disclose, false),
        // continue: a later clause of the same rule may decide.
        (
            &["to * by users read continue by dn.exact=\"uid=bob,ou=people,dc=example,dc=com\" write"],
            BOB,
            0,
            ALICE,
            &["person"],
            "cn",
            Level::Write,
            true,
        ),
        (
            &["to * by users read continue by dn.exact=\"uid=bob,ou=people,dc=example,dc=com\" write"],
            ALICE,
            0,
            ALICE,
            &["person"],
            "cn",
            Level::Read,
            true,
        ),
        (
            &["to * by users read continue by dn.exact=\"uid=bob,ou=people,dc=example,dc=com\" write"],
            ALICE,
            0,
            ALICE,
            &["person"],
            "cn",
            Level::Write,
            false,
        ),
    ];
    let groups = Fixed(vec![(ADMINS, BOB)]);
    for (i, (list, who, ssf, dn, classes, attr, level, want)) in table.iter().enumerate() {
        let acl = rules(list);
        let who_key = (!who.is_empty()).then(|| key(who));
        let subject = Subject { key: who_key.as_deref(), tls_ssf: *ssf, transport_ssf: 0 };
        let access = Access::new(&acl, subject, &groups);
        let bytes = entry_bytes(dn, classes);
        let view = EntryView::new(&bytes).unwrap();
        let target_key = key(dn);
        let target = Target { key: &target_key, entry: Some(&view) };
        let a = match *attr {
            "entry" => Attr::Entry,
            "children" => Attr::Children,
            name => acl.class(name),
        };
        let got = access.decide(&target, a);
        assert_eq!(got.privs.has(*level), *want, "row {i}: {who:?} {attr} of {dn} at {level:?}: {got:?}");
        assert_eq!(access.allows(&target, a, *level), *want, "row {i} (allows)");
        if let Some(fixed) = access.fixed(a) {
            assert_eq!(fixed, got.privs, "row {i}: fixed disagrees with decide");
        }
    }
}

#[test]
fn default_rules_fix_most_decisions() {
    let acl = rules(DEFAULT_RULES);
    let groups = Fixed(vec![]);
    let anonymous = Access::new(&acl, Subject::default(), &groups);
    assert_eq!(anonymous.fixed(acl.class("cn")), Some(Level::Read.cumulative()));
    assert_eq!(anonymous.fixed(acl.class("userPassword")), Some(Level::Auth.cumulative()));
    assert_eq!(anonymous.fixed(Attr::Entry), Some(Level::Read.cumulative()));
    let k = key(ALICE);
    let user = Access::new(&acl, Subject { key: Some(&k), ..Subject::default() }, &groups);
    assert_eq!(user.fixed(acl.class("mail")), Some(Level::Read.cumulative()));
    assert_eq!(user.fixed(acl.class("userPassword")), None, "self depends on the entry");
}

/// The class a bind asks for is the one `class` works out, whichever
/// rules name userPassword (first, last, or none of them).
#[test]
fn the_kept_user_password_class_is_the_computed_one() {
    for list in [
        DEFAULT_RULES,
        &["to attrs=cn,userPassword by * read"],
        &["to attrs=mail by * read", "to attrs=cn by * read", "to attrs=userPassword by * auth"],
        &["to * by * read"],
    ] {
        let acl = rules(list);
        assert_eq!(acl.user_password(), acl.class("userPassword"), "{list:?}");
    }
}

#[test]
fn an_entry_is_decided_by_its_dn_only_where_no_filter_rule_could_apply() {
    let acl = rules(&[
        "to dn.subtree=\"ou=groups,dc=example,dc=com\" filter=(objectClass=secret) by * none",
        "to attrs=mail filter=(objectClass=secret) by * none",
        "to * by * read",
    ]);
    let groups = Fixed(vec![]);
    let anonymous = Access::new(&acl, Subject::default(), &groups);
    assert!(anonymous.decided_by_dn(&key(ALICE), Attr::Entry), "no filter rule covers its entry");
    assert!(!anonymous.decided_by_dn(&key(ADMINS), Attr::Entry), "a filter rule could hide it");
    assert!(!anonymous.decided_by_dn(&key(ALICE), acl.class("mail")));
}

#[test]
fn bad_rules_are_refused_with_their_number() {
    let cases = [
        ("by * read", "starts with 'to'"),
        ("to * by * reed", "not a <who> or an access level"),
        ("to attrs=nosuchattr by * read", "not an attribute type"),
        ("to dn.sideways=\"dc=x\" by * read", "unknown style"),
        ("to * by peername.ip=1.2.3.4 read", "not understood in <who>"),
        ("to *", "at least one"),
        ("to filter=(cn=a by * read", "unbalanced"),
        ("to attrs=@person by * read", "not supported"),
        ("to * by self", "without an access level"),
    ];
    for (text, want) in cases {
        let list = vec!["to * by * read".to_string(), text.to_string()];
        let err = parse::compile(&list).unwrap_err();
        assert!(err.starts_with("access rule 1"), "{err}");
        assert!(err.contains(want), "{text}: {err}");
    }
    assert!(parse::compile(&["{0}to * by * read".into(), "access to * by * none".into()]).is_ok());
}

#[test]
fn privilege_sets() {
    assert_eq!(Level::Write.cumulative().describe(), "write (=wrscxd)");
    assert_eq!(Level::None.cumulative().describe(), "none");
    let wx = Privs::parse("wx").unwrap();
    assert_eq!(wx.describe(), "=wx");
    assert!(wx.has(Level::Write) && wx.has(Level::Auth) && !wx.has(Level::Read) && !wx.has(Level::Disclose));
    assert!(Privs::parse("q").is_none());
    let acl = rules(&["to * by users =rs by * =0"]);
    assert!(acl.rules[0].by[0].privs.has(Level::Search));
}

#[test]
fn dn_patterns() {
    let base = key(PEOPLE);
    let cases = [
        (DnPattern::Base(base.clone()), [true, false, false]),
        (DnPattern::One(base.clone()), [false, true, false]),
        (DnPattern::Subtree(base.clone()), [true, true, true]),
        (DnPattern::Children(base.clone()), [false, true, true]),
    ];
    let dns = [PEOPLE, ALICE, "cn=x,uid=alice,ou=people,dc=example,dc=com"];
    for (p, want) in cases {
        for (dn, w) in dns.iter().zip(want) {
            assert_eq!(p.matches(&key(dn)), w, "{p:?} {dn}");
        }
    }
    assert!(!DnPattern::Subtree(base).matches(&key("ou=peoplex,dc=example,dc=com")));
    assert_eq!(norm_of_key(&key("UID=Alice, ou=People,DC=example,dc=com")), "uid=alice,ou=people,dc=example,dc=com");
}
