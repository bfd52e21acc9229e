use crate::support::*;
use ldap3::{Mod, Scope, SearchEntry};
use std::collections::HashSet;
use std::process::Command;

type Attrs<'a> = Vec<(&'a str, HashSet<&'a str>)>;

fn person<'a>(uid: &'a str, extra: Attrs<'a>) -> Attrs<'a> {
    let mut attrs: Attrs<'a> = vec![
        ("objectClass", ["top", "inetOrgPerson"].into()),
        ("uid", [uid].into()),
        ("cn", ["Some One"].into()),
        ("sn", ["One"].into()),
    ];
    for (name, vals) in extra {
        match attrs.iter_mut().find(|(n, _)| *n == name) {
            Some((_, v)) => v.extend(vals),
            None => attrs.push((name, vals)),
        }
    }
    attrs
}

#[test]
fn schema_violations_have_their_codes() {
    let s = Server::start(2);
    let mut c = s.admin();
    let add = |c: &mut ldap3::LdapConn, uid: &str, attrs: Attrs<'_>| {
        let res = c.add(&format!("uid={uid},{PEOPLE}"), attrs).unwrap();
        (res.rc, res.text)
    };
    assert_eq!(add(&mut c, "ok", person("ok", vec![])).0, 0);
    let without_sn: Attrs<'_> = person("a", vec![]).into_iter().filter(|(n, _)| *n != "sn").collect();
    for (uid, attrs, code, words) in [
        ("a", without_sn, 65, "requires attribute 'sn'"),
        ("b", person("b", vec![("fooBar", ["x"].into())]), 17, "fooBar"),
        ("c", person("c", vec![("uidNumber", ["5"].into())]), 65, "'uidNumber' not allowed"),
        ("d", person("d", vec![("displayName", ["x", "y"].into())]), 19, "displayName"),
        ("e", person("e", vec![("mail", ["jöhn@example.com"].into())]), 21, "mail"),
        ("f", person("f", vec![("objectClass", ["device"].into())]), 65, "structural object class chain"),
        ("g", person("g", vec![("objectClass", ["noSuchClass"].into())]), 21, "noSuchClass"),
        // The RDN value is added when the attribute list lacks it (RFC 4511 §4.7, as slapd).
        ("h", person("x", vec![]), 0, ""),
        (
            "i",
            person(
                "i",
                vec![
                    ("objectClass", ["posixAccount"].into()),
                    ("uidNumber", ["ten"].into()),
                    ("gidNumber", ["1"].into()),
                    ("homeDirectory", ["/"].into()),
                ],
            ),
            21,
            "uidNumber",
        ),
    ] {
        let (rc, text) = add(&mut c, uid, attrs);
        assert_eq!(rc, code, "uid={uid}: {text}");
        assert!(text.contains(words), "uid={uid}: {text:?} should name {words:?}");
    }
    assert_eq!(add(&mut c, "j", person("j", vec![("cn", ["X", "x "].into())])).0, 20, "duplicate under caseIgnore");

    let dn = format!("uid=ok,{PEOPLE}");
    let modify = |c: &mut ldap3::LdapConn, mods: Vec<Mod<&str>>| c.modify(&dn, mods).unwrap().rc;
    assert_eq!(modify(&mut c, vec![Mod::Delete("sn", HashSet::new())]), 65, "MUST attribute removed");
    assert_eq!(modify(&mut c, vec![Mod::Replace("objectClass", ["top", "account"].into())]), 69);
    assert_eq!(modify(&mut c, vec![Mod::Add("uidNumber", ["5"].into())]), 65);
    assert_eq!(modify(&mut c, vec![Mod::Add("displayName", ["a", "b"].into())]), 19);
    assert_eq!(modify(&mut c, vec![Mod::Replace("telephoneNumber", ["semi;colon"].into())]), 21);
    let aux = vec![
        Mod::Add("objectClass", ["posixAccount"].into()),
        Mod::Add("uidNumber", ["1000"].into()),
        Mod::Add("gidNumber", ["100"].into()),
        Mod::Add("homeDirectory", ["/home/ok"].into()),
    ];
    assert_eq!(modify(&mut c, aux), 0, "an auxiliary class with its required attributes");
    let e = get_entry(&mut c, &dn, vec!["structuralObjectClass", "uidNumber"]).unwrap();
    assert_eq!(e.attrs["structuralObjectClass"], vec!["inetOrgPerson"]);
    // A rename to an RDN the classes do not allow.
    let res = c.modifydn(&dn, "description=x", false, None).unwrap();
    assert_eq!(res.rc, 0, "inetOrgPerson allows description: {res:?}");
    let res = c.modifydn(&format!("description=x,{PEOPLE}"), "gecos=x", false, None).unwrap();
    assert_eq!(res.rc, 0, "posixAccount allows gecos: {res:?}");
    let res = c.modifydn(&format!("gecos=x,{PEOPLE}"), "dc=x", false, None).unwrap();
    assert_eq!(res.rc, 65, "{res:?}");
}

fn populated() -> Server {
    let s = Server::start(2);
    let mut c = s.admin();
    for (i, (cn, phone, home)) in [
        ("Ann Lee", "+1 555-0100", "/home/Ann"),
        ("Bob Lee", "+1 555 0101", "/home/bob"),
        ("Cy Young", "555.0102", "/x"),
    ]
    .iter()
    .enumerate()
    {
        let uid = format!("p{i}");
        let num = (990 + i * 10).to_string();
        let attrs = person(
            &uid,
            vec![
                ("objectClass", ["posixAccount"].into()),
                ("cn", [*cn].into()),
                ("telephoneNumber", [*phone].into()),
                ("uidNumber", [num.as_str()].into()),
                ("gidNumber", ["100"].into()),
                ("homeDirectory", [*home].into()),
            ],
        );
        let attrs = attrs.into_iter().map(|(n, v)| if n == "cn" { (n, [*cn].into()) } else { (n, v) }).collect();
        let res = c.add(&format!("uid={uid},{PEOPLE}"), attrs).unwrap();
        assert_eq!(res.rc, 0, "{res:?}");
    }
    s
}

fn uids(c: &mut ldap3::LdapConn, filter: &str) -> Vec<String> {
    let (entries, _) = c.search(PEOPLE, Scope::OneLevel, filter, vec!["uid"]).unwrap().success().unwrap();
    let mut out: Vec<String> = entries.into_iter().map(|e| SearchEntry::construct(e).attrs["uid"][0].clone()).collect();
    out.sort();
    out
}

#[test]
fn matching_rules_decide_searches() {
    let s = populated();
    let mut c = s.admin();
    for (filter, want) in [
        ("(cn=ANN LEE)", vec!["p0"]),
        ("(cn=ann   lee)", vec!["p0"]),
        ("(commonName=bob lee)", vec!["p1"]),
        ("(cn=*lee)", vec!["p0", "p1"]),
        ("(cn=b*)", vec!["p1"]),
        ("(uid=P*)", vec!["p0", "p1", "p2"]),
        ("(homeDirectory=/home/Ann)", vec!["p0"]),
        ("(homeDirectory=/home/ann)", vec![]),
        ("(uidNumber>=1000)", vec!["p1", "p2"]),
        ("(uidNumber<=1000)", vec!["p0", "p1"]),
        ("(uidNumber=0990)", vec![]), // leading zeros: invalid, so Undefined (as slapd)
        ("(uidNumber=990)", vec!["p0"]),
        ("(telephoneNumber=+15550101)", vec!["p1"]),
        ("(telephoneNumber=+1 555 0100)", vec!["p0"]),
        ("(createTimestamp>=20000101000000Z)", vec!["p0", "p1", "p2"]),
        ("(createTimestamp<=20000101000000Z)", vec![]),
        ("(sn>=A)", vec![]),
        ("(!(uidNumber=abc))", vec![]),
        ("(objectClass=2.5.6.6)", vec!["p0", "p1", "p2"]), // person, a superclass (RFC 4512 §2.4.1)
        ("(objectClass=posixaccount)", vec!["p0", "p1", "p2"]),
        ("(cn~=ann lee)", vec!["p0"]),
    ] {
        assert_eq!(uids(&mut c, filter), want, "{filter}");
    }
    // Compare uses the equality rule too.
    let dn = format!("uid=p0,{PEOPLE}");
    assert_eq!(c.compare(&dn, "cn", "ann LEE").unwrap().0.rc, 6);
    assert_eq!(c.compare(&dn, "uidNumber", "990").unwrap().0.rc, 6);
    assert_eq!(c.compare(&dn, "uidNumber", "00990").unwrap().0.rc, 21, "leading zeros are invalid, as slapd says");
    assert_eq!(c.compare(&dn, "homeDirectory", "/home/ann").unwrap().0.rc, 5);
    assert_eq!(c.compare(&dn, "noSuchAttr", "x").unwrap().0.rc, 17);
}

#[test]
fn subschema_is_published_and_parses() {
    let s = Server::start(1);
    let mut c = s.conn();
    let root = get_entry(&mut c, "", vec!["subschemaSubentry"]).unwrap();
    assert_eq!(root.attrs["subschemaSubentry"], vec!["cn=Subschema"]);
    let e = get_entry(&mut c, "cn=Subschema", vec!["+"]).unwrap();
    let types = &e.attrs["attributeTypes"];
    let classes = &e.attrs["objectClasses"];
    assert!(types.len() > 100 && classes.len() > 30, "{} types, {} classes", types.len(), classes.len());
    assert!(types.contains(&"( 2.5.4.3 NAME ( 'cn' 'commonName' ) SUP name )".to_string()));
    assert!(e.attrs["ldapSyntaxes"].iter().any(|v| v.contains("Directory String")));
    assert!(e.attrs["matchingRules"].iter().any(|v| v.contains("'caseIgnoreMatch'")));
    // What is published is a complete schema: our own parser, given only
    // those values, resolves every reference, but to the types slapd
    // leaves out too while its subentry and subschema classes name them.
    let hidden = ["subtreeSpecification", "dITStructureRules", "dITContentRules", "nameForms"];
    for name in hidden {
        assert!(!types.iter().any(|t| t.contains(&format!("'{name}'"))), "{name} is published");
    }
    let mut text = String::new();
    for t in types {
        text.push_str(&format!("attributetype {t}\n"));
    }
    for name in hidden {
        text.push_str(&format!("attributetype {}\n", shards::schema::get().attr(name).unwrap().definition));
    }
    for oc in classes {
        text.push_str(&format!("objectclass {oc}\n"));
    }
    let mut b = shards::schema::parse::Builder::default();
    b.add_text("published", &text).unwrap();
    let parsed = b.build().unwrap();
    assert_eq!((parsed.attrs.len(), parsed.classes.len()), (types.len() + hidden.len(), classes.len()));
    let users = get_entry(&mut c, PEOPLE, vec!["+"]).unwrap();
    assert_eq!(users.attrs["subschemaSubentry"], vec!["cn=Subschema"]);
    assert_eq!(users.attrs["structuralObjectClass"], vec!["organizationalUnit"]);

    ldap_utils();
    let out = Command::new("ldapsearch")
        .args(["-x", "-LLL", "-o", "ldif-wrap=no", "-H", &s.url(), "-b", "cn=Subschema", "-s", "base"])
        .args(["(objectClass=*)", "+"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("attributeTypes: ( 0.9.2342.19200300.100.1.1 NAME ( 'uid' 'userid' )"), "{text}");
    assert!(text.contains("objectClasses: ( 2.16.840.1.113730.3.2.2 NAME 'inetOrgPerson'"));
}

const SITE_SCHEMA: &str = "# site schema\n\
objectidentifier siteOID 1.3.6.1.4.1.99999\n\
attributetype ( siteOID:1 NAME 'mailRoute' DESC 'next hop'\n\
\tEQUALITY caseIgnoreIA5Match SUBSTR caseIgnoreIA5SubstringsMatch SYNTAX 1.3.6.1.4.1.1466.115.121.1.26 )\n\
objectclass ( siteOID:2 NAME 'mailRouted' SUP top AUXILIARY MUST mailRoute )\n";

#[test]
fn custom_schema_files_load_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let schema = dir.path().join("site.schema");
    std::fs::write(&schema, SITE_SCHEMA).unwrap();
    let config = format!("[schema]\nfiles = [{:?}]\n[indexes]\nobjectClass = \"eq\"\nmailRoute = \"eq,sub\"\n", schema);
    let s = Server::start_with_config(1, &config);
    let mut c = s.admin();
    let attrs = person("r", vec![("objectClass", ["mailRouted"].into()), ("mailRoute", ["MX1.Example.com"].into())]);
    assert_eq!(c.add(&format!("uid=r,{PEOPLE}"), attrs).unwrap().rc, 0);
    assert_eq!(
        c.add(&format!("uid=q,{PEOPLE}"), person("q", vec![("objectClass", ["mailRouted"].into())])).unwrap().rc,
        65
    );
    assert_eq!(uids(&mut c, "(mailRoute=mx1.example.COM)"), vec!["r"]);
    assert_eq!(uids(&mut c, "(mailRoute=*example*)"), vec!["r"]);
    let sub = get_entry(&mut c, "cn=Subschema", vec!["attributeTypes"]).unwrap();
    assert!(sub.attrs["attributeTypes"].iter().any(|t| t.starts_with("( 1.3.6.1.4.1.99999.1 NAME 'mailRoute'")));

    // A bad definition stops the start, naming the file and the line.
    let bad = dir.path().join("bad.schema");
    std::fs::write(
        &bad,
        "# x\n\nattributetype ( 1.2.3.4 NAME 'x' EQUALITY nope SYNTAX 1.3.6.1.4.1.1466.115.121.1.15 )\n",
    )
    .unwrap();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(&cfg, format!("[schema]\nfiles = [{bad:?}]\n")).unwrap();
    let err =
        spawn(&dir.path().join("d2"), 1, &dir.path().join("err"), &["--config", cfg.to_str().unwrap()]).unwrap_err();
    assert!(err.contains("bad.schema:3: x: unknown matching rule 'nope'"), "{err}");
}

/// OpenLDAP's stock schema files load unchanged over the built-in schema:
/// definitions identical to built-in ones are accepted, and what they add
/// (misc.schema's mail routing, dyngroup's groupOfURLs) is usable.
#[test]
fn openldap_stock_schema_files_load() {
    slapd_installed();
    let stock = ["core", "cosine", "inetorgperson", "nis", "openldap", "collective", "corba", "duaconf"]
        .iter()
        .chain(&["dyngroup", "java", "misc", "pmi", "namedobject", "msuser"])
        .map(|f| format!("{:?}", format!("/etc/ldap/schema/{f}.schema")))
        .collect::<Vec<_>>()
        .join(", ");
    let s = Server::start_with_config(1, &format!("[schema]\nfiles = [{stock}]\n"));
    let mut c = s.admin();
    let attrs =
        person("m", vec![("objectClass", ["inetLocalMailRecipient"].into()), ("mailLocalAddress", ["m@x"].into())]);
    assert_eq!(c.add(&format!("uid=m,{PEOPLE}"), attrs).unwrap().rc, 0);
    let url = vec![
        ("objectClass", ["groupOfURLs"].into()),
        ("cn", ["u"].into()),
        ("memberURL", ["ldap:///??sub?(uid=m)"].into()),
    ];
    assert_eq!(c.add(&format!("cn=u,{PEOPLE}"), url).unwrap().rc, 0);
    let sub = get_entry(&mut c, "cn=Subschema", vec!["matchingRuleUse", "ldapSyntaxes"]).unwrap();
    let uses = &sub.attrs["matchingRuleUse"];
    assert!(
        uses.iter().any(|u| u.starts_with("( 2.5.13.2 NAME 'caseIgnoreMatch' APPLIES (") && u.contains(" cn ")),
        "{uses:?}"
    );
    // As slapd: a syntax without a validator is not published (no value
    // of it can be stored), a validated one is.
    let syntaxes = &sub.attrs["ldapSyntaxes"];
    assert!(!syntaxes.iter().any(|v| v.contains("Presentation Address")), "{syntaxes:?}");
    assert!(syntaxes.iter().any(|v| v.contains("'Postal Address'")), "{syntaxes:?}");

    // A definition that differs from a built-in one names both places.
    let dir = tempfile::tempdir().unwrap();
    let clash = dir.path().join("clash.schema");
    std::fs::write(&clash, "attributetype ( 2.5.4.3 NAME ( 'cn' 'commonName' ) SUP name SINGLE-VALUE )\n").unwrap();
    let cfg = dir.path().join("clash.toml");
    std::fs::write(&cfg, format!("[schema]\nfiles = [{clash:?}]\n")).unwrap();
    let err =
        spawn(&dir.path().join("d"), 1, &dir.path().join("err"), &["--config", cfg.to_str().unwrap()]).unwrap_err();
    assert!(
        err.contains("clash.schema:1: attribute type cn (2.5.4.3) conflicts with the definition at builtin.schema:"),
        "{err}"
    );
}

#[test]
fn index_changes_need_reindex() {
    let mut s = Server::start_with_config(2, "");
    let mut c = s.admin();
    for i in 0..20 {
        assert_eq!(add_user(&mut c, &format!("r{i}")).rc, 0);
    }
    drop(c);
    s.stop();
    std::fs::write(
        s.config_path(),
        with_engine("[indexes]\nuid = \"eq\"\nsn = \"eq,pres\"\ndescription = \"eq,sub\"\n"),
    )
    .unwrap();
    let extra: Vec<&str> = s.extra.iter().map(String::as_str).collect();
    let err = spawn(&s.data(), 2, &s.stderr, &extra).unwrap_err();
    assert!(err.contains("index configuration changed") && err.contains("coredir reindex"), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_coredir"))
        .args(["reindex", "--config", &s.extra[1], "--data"])
        .arg(s.data())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("reindexed 23 entries"));
    s.launch();
    let mut c = s.admin();
    assert_eq!(uids(&mut c, "(uid=r7)"), vec!["r7"]);
    assert_eq!(uids(&mut c, "(uid=r1*)").len(), 11);
    assert_eq!(uids(&mut c, "(sn=*)").len(), 20);
}

#[test]
fn unindexed_searches_are_bounded() {
    let config = "[limits]\nunindexed_lookthrough = 5\nunindexed_result = \"unwillingToPerform\"\n";
    let s = Server::start_with_config(2, config);
    let mut c = s.admin();
    for i in 0..10 {
        assert_eq!(add_user(&mut c, &format!("b{i}")).rc, 0);
    }
    let mut anon = s.conn();
    let res = anon.search(SUFFIX, Scope::Subtree, "(description=*)", vec!["1.1"]).unwrap();
    assert_eq!(res.1.rc, 53, "{:?}", res.1);
    assert!(res.1.text.contains("limits.unindexed_lookthrough"));
    // Indexed filters and the root DN are not bounded.
    assert_eq!(anon.search(SUFFIX, Scope::Subtree, "(uid=b*)", vec!["1.1"]).unwrap().success().unwrap().0.len(), 10);
    assert_eq!(c.search(SUFFIX, Scope::Subtree, "(cn=*)", vec!["1.1"]).unwrap().success().unwrap().0.len(), 10);
    assert_eq!(c.search(SUFFIX, Scope::Subtree, "(description=*)", vec!["1.1"]).unwrap().success().unwrap().0.len(), 0);
}

/// A modify validates the values it writes, not those the entry already
/// holds, as slapd's `slap_mods_check` does: an entry whose value a later
/// schema (or a stricter validator of a newer version) no longer accepts
/// stays modifiable, its other attributes and that one alike. Before,
/// every value was checked again, and such an entry could not even have
/// its password changed (21).
#[test]
fn a_modify_checks_the_values_it_writes_not_those_already_held() {
    let dir = tempfile::tempdir().unwrap();
    let schema = |syntax: &str, equality: &str| {
        let path = dir.path().join(format!("{equality}.schema"));
        let text = format!(
            "attributetype ( 1.3.6.1.4.1.99999.1.1 NAME 'testCode' EQUALITY {equality} SYNTAX {syntax} )\n\
             objectclass ( 1.3.6.1.4.1.99999.2.1 NAME 'testCoded' AUXILIARY MAY testCode )\n"
        );
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let (text, integer) = (
        schema("1.3.6.1.4.1.1466.115.121.1.15", "caseIgnoreMatch"),
        schema("1.3.6.1.4.1.1466.115.121.1.27", "integerMatch"),
    );
    let mut slapd = LocalSlapd::start(&format!("include {text}\n"));
    let mut s = Server::start_with_config(1, &format!("[schema]\nfiles = [{text:?}]\n"));
    let dn = format!("cn=coded,{SUFFIX}");
    let entry = format!("dn: {dn}\nobjectClass: person\nobjectClass: testCoded\ncn: coded\nsn: x\ntestCode: abc\n");
    let urls = [slapd.url(), s.url()];
    for url in &urls {
        let (code, _, err) = tool("ldapadd", &["-x", "-H", url, "-D", ROOT_DN, "-w", ROOT_PW], Some(&entry));
        assert_eq!(code, 0, "{url}: {err}");
    }
    // testCode becomes an INTEGER: "abc" is no longer valid.
    slapd.restart(&format!("include {integer}\n"));
    s.stop();
    let config = std::fs::read_to_string(s.config_path()).unwrap();
    assert!(config.contains(&text), "{config}");
    std::fs::write(s.config_path(), config.replace(&text, &integer)).unwrap();
    s.launch();
    let urls = [slapd.url(), s.url()];
    let modify = |url: &str, change: &str| {
        let ldif = format!("dn: {dn}\nchangetype: modify\n{change}\n");
        let (code, _, err) = tool("ldapmodify", &["-x", "-H", url, "-D", ROOT_DN, "-w", ROOT_PW], Some(&ldif));
        (code, err.lines().find(|l| l.contains("additional info")).map(str::to_string))
    };
    // Renamed away and back, as slapd allows.
    for (from, to) in [(dn.clone(), "cn=coded2"), (format!("cn=coded2,{SUFFIX}"), "cn=coded")] {
        let codes: Vec<i32> = urls
            .iter()
            .map(|u| tool("ldapmodrdn", &["-x", "-H", u, "-D", ROOT_DN, "-w", ROOT_PW, "-r", &from, to], None).0)
            .collect();
        assert_eq!(codes, [0, 0], "{from} to {to}: slapd, then coredir");
    }
    // A valid value beside the invalid one: slapd 2.5.13 aborts on it (an
    // assertion in attr_merge), so only coredir is asked.
    assert_eq!(modify(&urls[1], "add: testCode\ntestCode: 5").0, 0);
    for change in [
        "replace: description\ndescription: changed",
        "replace: userPassword\nuserPassword: secret",
        "add: testCode\ntestCode: xyz",
        "delete: testCode\ntestCode: abc",
        "replace: testCode\ntestCode: 7",
    ] {
        let answers: Vec<_> = urls.iter().map(|u| modify(u, change)).collect();
        assert_eq!(answers[0].0, answers[1].0, "{change}: slapd, then coredir: {answers:?}");
    }
    assert_eq!(modify(&urls[1], "replace: testCode\ntestCode: abc").0, 21);
}
