//! The offline tools: `coredir import`, `export`, `backup`, `restore`, `reshard`.

use crate::support::*;
use ldap3::Scope;
use std::path::Path;

/// The suffix, two ous, `n` users with binary photos, long descriptions and
/// non-ASCII names, written with base64 and folding where LDIF needs them.
fn write_ldif(path: &Path, n: usize) {
    let mut out = Vec::new();
    let rec = |out: &mut Vec<u8>, dn: &str, attrs: &[(&str, Vec<u8>)]| {
        shards::ldif::write_line(out, "dn", dn.as_bytes()).unwrap();
        for (name, v) in attrs {
            shards::ldif::write_line(out, name, v).unwrap();
        }
        out.push(b'\n');
    };
    let s = |v: &str| v.as_bytes().to_vec();
    rec(
        &mut out,
        SUFFIX,
        &[
            ("objectClass", s("top")),
            ("objectClass", s("dcObject")),
            ("objectClass", s("organization")),
            ("dc", s("example")),
            ("o", s("Example")),
        ],
    );
    rec(&mut out, PEOPLE, &[("objectClass", s("organizationalUnit")), ("ou", s("people"))]);
    rec(&mut out, &format!("ou=groups,{SUFFIX}"), &[("objectClass", s("organizationalUnit")), ("ou", s("groups"))]);
    for i in 0..n {
        let cn = format!("Jürgen Ñandú {i}");
        let photo: Vec<u8> = (0..64u8).map(|b| b.wrapping_mul(i as u8 | 1)).chain([0, 0xff, b'\n']).collect();
        rec(
            &mut out,
            &format!("cn={cn},{PEOPLE}"),
            &[
                ("objectClass", s("inetOrgPerson")),
                ("cn", s(&cn)),
                ("sn", s("Ñandú")),
                ("uid", s(&format!("u{i}"))),
                ("description", s(&format!("{i} {}", "long text ".repeat(40)))),
                ("jpegPhoto", photo),
                ("userPassword", s("{SSHA}+RFhsab2AfzZ0VfEdyknXtUT06RhYmNk")),
            ],
        );
    }
    std::fs::write(path, out).unwrap();
}

#[test]
fn import_export_round_trip_is_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    write_ldif(dir.path().join("in.ldif").as_path(), 10_000);
    let (ok, err) = coredir(&["import", "--data", &p("d1"), "--shards", "2", &p("in.ldif")]);
    assert!(ok, "{err}");
    assert!(err.contains("imported 10003 entries"), "{err}");
    let (ok, err) = coredir(&["export", "--data", &p("d1"), "--out", &p("e1.ldif")]);
    assert!(ok, "{err}");
    let (ok, err) = coredir(&["import", "--data", &p("d2"), "--shards", "1", &p("e1.ldif")]);
    assert!(ok, "{err}");
    let (ok, err) = coredir(&["export", "--data", &p("d2"), "--out", &p("e2.ldif")]);
    assert!(ok, "{err}");
    let (e1, e2) = (std::fs::read(p("e1.ldif")).unwrap(), std::fs::read(p("e2.ldif")).unwrap());
    assert!(e1 == e2, "export -> import -> export differs");
    let text = String::from_utf8(e1).unwrap();
    assert_eq!(text.matches("\ndn").count() + 1, 10_003);
    assert!(text.contains("entryUUID: ") && text.lines().all(|l| l.len() <= 76));
    // Without operational attributes, the export is the input.
    let (ok, _) = coredir(&["export", "--data", &p("d1"), "--no-operational", "--out", &p("e3.ldif")]);
    assert!(ok);
    let mut want: Vec<String> =
        std::fs::read_to_string(p("in.ldif")).unwrap().split("\n\n").map(str::to_string).collect();
    let mut got: Vec<String> =
        std::fs::read_to_string(p("e3.ldif")).unwrap().split("\n\n").map(str::to_string).collect();
    want.sort();
    got.sort();
    assert_eq!(want, got);
    // The imported directory serves.
    let (mut child, port) =
        spawn(Path::new(&p("d1")), 2, &dir.path().join("err"), &[]).unwrap_or_else(|e| panic!("{e}"));
    let url = format!("ldap://127.0.0.1:{port}");
    let mut c = ldap3::LdapConn::new(&url).unwrap();
    assert_eq!(search_dns(&mut c, PEOPLE, Scope::Subtree, "(uid=u9999)").len(), 1);
    let dn = format!("cn=Jürgen Ñandú 7,{PEOPLE}");
    assert_eq!(ldap3::LdapConn::new(&url).unwrap().simple_bind(&dn, "secret").unwrap().rc, 0);
    assert_eq!(get_entry(&mut c, PEOPLE, vec!["numSubordinates"]).unwrap().attrs["numSubordinates"], vec!["10000"]);
    // Export works while the server runs; import does not.
    let (ok, err) = coredir(&["export", "--data", &p("d1"), "--out", &p("e4.ldif")]);
    assert!(ok, "{err}");
    assert_eq!(std::fs::read(p("e4.ldif")).unwrap(), std::fs::read(p("e1.ldif")).unwrap());
    let (ok, err) = coredir(&["import", "--data", &p("d1"), &p("in.ldif")]);
    assert!(!ok && err.contains("in use"), "{err}");
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn import_errors_name_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let base = format!("dn: {SUFFIX}\nobjectClass: dcObject\nobjectClass: organization\ndc: example\no: x\n\n");
    for (body, line, why) in [
        (format!("{base}dn: cn=a,ou=missing,{SUFFIX}\nobjectClass: device\ncn: a\n"), 7, "no such entry"),
        (format!("{base}dn: cn=a,{SUFFIX}\nchangetype: add\ncn: a\n"), 8, "change records"),
        (format!("{base}dn: cn=a,{SUFFIX}\nobjectClass: device\ncn: b\n"), 7, "naming attribute"),
        (format!("{base}dn: cn=a,dc=elsewhere\nobjectClass: device\ncn: a\n"), 7, "outside the naming context"),
        (format!("{base}dn: cn=a,{SUFFIX}\ncn:: %%%\n"), 8, "base64"),
        (format!("{base}{base}"), 7, "already exists"),
        (format!("{base}dn: cn=a,{SUFFIX}\nobjectClass: device\ncn: a\ndescription;: x\n"), 7, "inappropriate option"),
    ] {
        let data = p(&format!("d{line}{}", why.len()));
        std::fs::write(p("bad.ldif"), &body).unwrap();
        let (ok, err) = coredir(&["import", "--data", &data, "--shards", "2", &p("bad.ldif")]);
        assert!(!ok, "{body}");
        assert!(err.contains(&format!("line {line}:")) && err.contains(why), "expected line {line} ({why}): {err}");
        // A refused import into a new database writes nothing: the same
        // directory takes a good file next.
        std::fs::write(p("good.ldif"), &base).unwrap();
        let (ok, err) = coredir(&["import", "--data", &data, "--shards", "2", &p("good.ldif")]);
        assert!(ok && err.contains("imported 1 entries"), "{err}");
    }
    // Into an existing database the entries go in as adds.
    let data = p("d-existing");
    std::fs::write(p("base.ldif"), &base).unwrap();
    assert!(coredir(&["import", "--data", &data, "--shards", "2", &p("base.ldif")]).0);
    std::fs::write(p("more.ldif"), format!("dn: cn=a,{SUFFIX}\nobjectClass: device\ncn: a\n")).unwrap();
    let (ok, err) = coredir(&["import", "--data", &data, "--shards", "2", &p("more.ldif")]);
    assert!(ok && err.contains("imported 1 entries"), "{err}");
    let (ok, err) = coredir(&["import", "--data", &data, "--shards", "2", &p("more.ldif")]);
    assert!(!ok && err.contains("line 1:") && err.contains("already exists"), "{err}");
}

#[test]
fn backup_restore_and_reshard_keep_every_entry() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    std::fs::write(p("conf.toml"), with_engine("")).unwrap();
    let conf = p("conf.toml");
    write_ldif(dir.path().join("in.ldif").as_path(), 2_000);
    let (ok, err) = coredir(&["import", "--config", &conf, "--data", &p("d1"), "--shards", "2", &p("in.ldif")]);
    assert!(ok, "{err}");
    let export = |data: &str, out: &str| {
        let (ok, err) = coredir(&["export", "--config", &conf, "--data", &p(data), "--out", &p(out)]);
        assert!(ok, "{err}");
        std::fs::read(p(out)).unwrap()
    };
    let original = export("d1", "e1.ldif");

    // LMDB backs up while serving; sled needs the server stopped.
    let (mut child, _) = spawn(Path::new(&p("d1")), 2, &dir.path().join("err"), &["--config", &conf]).unwrap();
    if engine() == "sled" {
        let (ok, err) = coredir(&["backup", "--config", &conf, "--data", &p("d1"), &p("b1")]);
        assert!(!ok && err.contains("stop it"), "{err}");
        let _ = child.kill();
        let _ = child.wait();
    }
    let (ok, err) = coredir(&["backup", "--config", &conf, "--data", &p("d1"), &p("b1")]);
    assert!(ok && err.contains("backed up 2003 entries"), "{err}");
    let _ = child.kill();
    let _ = child.wait();
    let (ok, err) = coredir(&["backup", "--config", &conf, "--data", &p("d1"), &p("b1")]);
    assert!(!ok && err.contains("not empty"), "{err}");

    let (ok, err) = coredir(&["restore", "--config", &conf, "--data", &p("d2"), &p("b1")]);
    assert!(ok && err.contains("restored 2003 entries"), "{err}");
    let manifest = std::fs::read_to_string(dir.path().join("d2/manifest.toml")).unwrap();
    assert!(manifest.contains("restored_from"), "{manifest}");
    assert!(export("d2", "e2.ldif") == original, "the restored database differs");

    // 2 -> 1 -> 2 shards, each time with the same export.
    for shards in [1, 2] {
        let (ok, err) = coredir(&["reshard", "--config", &conf, "--data", &p("d2"), "--shards", &shards.to_string()]);
        assert!(ok && err.contains("resharded 2003 entries"), "{err}");
        assert!(export("d2", "e3.ldif") == original, "resharding to {shards} changed the data");
        let (mut child, port) =
            spawn(Path::new(&p("d2")), shards, &dir.path().join("err"), &["--config", &conf]).unwrap();
        let url = format!("ldap://127.0.0.1:{port}");
        let mut c = ldap3::LdapConn::new(&url).unwrap();
        assert_eq!(search_dns(&mut c, PEOPLE, Scope::Subtree, "(uid=u1999)").len(), 1);
        let n = &get_entry(&mut c, PEOPLE, vec!["numSubordinates"]).unwrap().attrs["numSubordinates"];
        assert_eq!(n, &vec!["2000"]);
        let mut admin = ldap3::LdapConn::new(&url).unwrap();
        admin.simple_bind(ROOT_DN, ROOT_PW).unwrap().success().unwrap();
        assert_eq!(add_user(&mut admin, &format!("new{shards}")).rc, 0, "writes go on after resharding");
        assert_eq!(admin.delete(&format!("uid=new{shards},{PEOPLE}")).unwrap().rc, 0);
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// An imported DN is stored in slapd's pretty form, as an add stores it
/// (and slapadd): exported and served as `ou=People,dc=example,dc=com`,
/// whatever case and spacing the LDIF's types had, and a quoted value
/// (RFC 2253) in its RFC 4514 form.
#[test]
fn an_imported_dn_is_stored_in_its_pretty_form() {
    let ldif = "dn: DC=example , DC=com\nobjectClass: domain\ndc: example\n\n\
                dn: OU=People ,  DC=example,DC=com\nobjectClass: organizationalUnit\nou: People\n\n\
                dn: CN=\"Smith, John\",OU=People,DC=example,DC=com\nobjectClass: device\ncn: Smith, John\n\n";
    let out = import_then_export(ldif);
    let dns: Vec<&str> = out.lines().filter(|l| l.starts_with("dn: ")).collect();
    let want = [
        "dn: dc=example,dc=com",
        "dn: ou=People,dc=example,dc=com",
        "dn: cn=Smith\\2C John,ou=People,dc=example,dc=com",
    ];
    assert_eq!(dns, want, "{out}");
}

/// Values with a language tag stay apart from the untagged ones on import
/// (they were grouped by type, so `cn;lang-en` lost its tag next to `cn`).
#[test]
fn an_import_keeps_attribute_options() {
    let ldif = format!(
        "dn: {SUFFIX}\nobjectClass: domain\ndc: example\n\n\
         dn: cn=a,{SUFFIX}\nobjectClass: device\ncn: a\ndescription: plain\ndescription;lang-en: tagged\n\n"
    );
    let out = import_then_export(&ldif);
    assert!(out.contains("description: plain\n") && out.contains("description;lang-en: tagged\n"), "{out}");
}

/// `ldif` imported into a new one-shard database, and its export without
/// operational attributes.
fn import_then_export(ldif: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    std::fs::write(p("in.ldif"), ldif).unwrap();
    let (ok, err) = coredir(&["import", "--data", &p("d"), "--shards", "1", &p("in.ldif")]);
    assert!(ok, "{err}");
    let (ok, err) = coredir(&["export", "--data", &p("d"), "--no-operational", "--out", &p("out.ldif")]);
    assert!(ok, "{err}");
    std::fs::read_to_string(p("out.ldif")).unwrap()
}

/// A data directory of format 2 is upgraded at start when nothing in it
/// normalizes otherwise under format 3, and is refused, naming the entry
/// and the way out, when a value has a NBSP at an edge (format 3 drops
/// it, as RFC 4518 and slapd: its keys changed); export still reads it.
#[test]
fn format_2_directories_upgrade_or_name_what_changed() {
    let mut s = Server::start(1);
    let mut admin = s.admin();
    fn ou<'a>(name: &str, description: &'a str) -> (String, Vec<(&'a str, std::collections::HashSet<&'a str>)>) {
        let attrs = vec![("objectClass", ["organizationalUnit"].into()), ("description", [description].into())];
        (format!("ou={name},{SUFFIX}"), attrs)
    }
    let (dn, attrs) = ou("plain", "caf\u{e9}\u{a0}au lait");
    assert_eq!(admin.add(&dn, attrs).unwrap().rc, 0);
    let manifest = s.data().join("manifest.toml");
    let set_format = |from: &str, to: &str| {
        let text = std::fs::read_to_string(&manifest).unwrap();
        assert!(text.contains(from), "{text}");
        std::fs::write(&manifest, text.replace(from, to)).unwrap();
    };
    s.stop();
    set_format("format = 3", "format = 2");
    s.launch();
    assert!(std::fs::read_to_string(&manifest).unwrap().contains("format = 3"), "upgraded");
    assert_eq!(search_dns(&mut s.conn(), SUFFIX, Scope::OneLevel, "(description=caf\u{e9} au lait)").len(), 1);

    let (dn, attrs) = ou("edge", "pad\u{a0}");
    assert_eq!(s.admin().add(&dn, attrs).unwrap().rc, 0);
    s.stop();
    set_format("format = 3", "format = 2");
    let conf = s.config_path().display().to_string();
    let refused = spawn(&s.data(), 1, &s.stderr, &["--config", &conf]);
    let err = refused.err().expect("a format 2 directory with a changed key is refused");
    assert!(err.contains("ou=edge,dc=example,dc=com") && err.contains("coredir export"), "{err}");
    let ldif = s.dir.path().join("out.ldif");
    let data = s.data().display().to_string();
    let (ok, err) = coredir(&["export", "--config", &conf, "--data", &data, "--out", &ldif.display().to_string()]);
    assert!(ok, "{err}");
    assert!(std::fs::read_to_string(&ldif).unwrap().contains("dn: ou=edge,dc=example,dc=com"));
}
