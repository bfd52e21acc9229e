//! Several naming contexts in one server (`directory.suffixes`): each
//! served, importable, exportable and replicated; one added later gets its
//! entry, one dropped while it holds entries is refused. What they answer
//! is compared with slapd's in `tests/conformance/contexts.cases`.

use crate::support::*;
use ldap3::{LdapConn, Scope};

const SECOND: &str = "o=second";

fn two_contexts() -> String {
    format!("[directory]\nsuffixes = [{SUFFIX:?}, {SECOND:?}]\n")
}

fn naming_contexts(c: &mut LdapConn) -> Vec<String> {
    let entry = get_entry(c, "", vec!["namingContexts"]).expect("root DSE");
    entry.attrs.get("namingContexts").cloned().unwrap_or_default()
}

fn add_person(c: &mut LdapConn, dn: &str) -> ldap3::LdapResult {
    c.add(dn, person_attrs(dn.split(['=', ',']).nth(1).unwrap())).unwrap()
}

#[test]
fn two_naming_contexts_are_served_exported_and_imported() {
    let s = Server::start_with_config(2, &two_contexts());
    let mut c = s.admin();
    assert_eq!(naming_contexts(&mut c), vec![SUFFIX.to_string(), SECOND.to_string()]);
    // A new database: every suffix entry, the demo ous below the first only.
    assert!(get_entry(&mut c, SECOND, vec![]).is_some());
    assert!(get_entry(&mut c, &format!("ou=people,{SECOND}"), vec![]).is_none());
    for i in 0..20 {
        assert_eq!(add_person(&mut c, &format!("cn=p{i},{SECOND}")).rc, 0);
    }
    assert_eq!(search_dns(&mut c, SECOND, Scope::Subtree, "(cn=p*)").len(), 20);
    assert!(search_dns(&mut c, SUFFIX, Scope::Subtree, "(cn=p*)").is_empty(), "one context's search stays in it");
    let res = c.modifydn(&format!("cn=p0,{SECOND}"), "cn=p0", true, Some(&format!("ou=people,{SUFFIX}"))).unwrap();
    assert_eq!(res.rc, 71, "a rename between naming contexts affects multiple DSAs: {res:?}");

    // Export holds both; an import of it into a new database with the same
    // configuration gives the same export.
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n).display().to_string();
    let conf = p("coredir.toml");
    std::fs::write(&conf, two_contexts()).unwrap();
    drop(c);
    let mut s = s;
    s.stop();
    let data = s.data().display().to_string();
    let (ok, err) = coredir(&["export", "--config", &conf, "--data", &data, "--out", &p("a.ldif")]);
    assert!(ok, "{err}");
    let exported = std::fs::read_to_string(p("a.ldif")).unwrap();
    assert!(exported.contains(&format!("dn: {SECOND}\n")) && exported.contains(&format!("dn: cn=p19,{SECOND}\n")));
    let (ok, err) = coredir(&["import", "--config", &conf, "--data", &p("d2"), &p("a.ldif")]);
    assert!(ok, "{err}");
    let (ok, err) = coredir(&["export", "--config", &conf, "--data", &p("d2"), "--out", &p("b.ldif")]);
    assert!(ok, "{err}");
    assert_eq!(exported, std::fs::read_to_string(p("b.ldif")).unwrap());
    // An entry in neither context is refused, naming both.
    std::fs::write(p("out.ldif"), "dn: cn=x,o=third\nobjectClass: person\ncn: x\nsn: x\n").unwrap();
    let (ok, err) = coredir(&["import", "--config", &conf, "--data", &p("d3"), &p("out.ldif")]);
    assert!(!ok && err.contains("line 1") && err.contains(SECOND), "{err}");
}

#[test]
fn a_naming_context_added_later_gets_its_entry_and_one_in_use_cannot_be_dropped() {
    let mut s = Server::start(1);
    s.stop();
    std::fs::write(s.config_path(), with_engine(&two_contexts())).unwrap();
    s.launch();
    let mut c = s.admin();
    assert_eq!(naming_contexts(&mut c), vec![SUFFIX.to_string(), SECOND.to_string()]);
    assert!(get_entry(&mut c, SECOND, vec![]).is_some(), "the new suffix's entry is created");
    assert_eq!(add_person(&mut c, &format!("cn=kept,{SECOND}")).rc, 0);
    drop(c);
    s.stop();
    // Dropped from the configuration while it holds entries: refused.
    std::fs::write(s.config_path(), with_engine("")).unwrap();
    let err = spawn(&s.data(), 1, &s.stderr, &["--config", s.config_path().to_str().unwrap()])
        .err()
        .expect("a start without a naming context that holds entries must fail");
    assert!(err.contains(SECOND) && err.contains("no longer"), "{err}");
    // Configured again, emptied, then dropped: the start forgets it.
    std::fs::write(s.config_path(), with_engine(&two_contexts())).unwrap();
    s.launch();
    let mut c = s.admin();
    assert_eq!(
        get_entry(&mut c, &format!("cn=kept,{SECOND}"), vec!["cn"]).map(|e| e.dn),
        Some(format!("cn=kept,{SECOND}"))
    );
    assert_eq!(c.delete(&format!("cn=kept,{SECOND}")).unwrap().rc, 0);
    assert_eq!(c.delete(SECOND).unwrap().rc, 0);
    drop(c);
    s.stop();
    std::fs::write(s.config_path(), with_engine("")).unwrap();
    s.launch();
    assert_eq!(naming_contexts(&mut s.admin()), vec![SUFFIX.to_string()]);
}

#[test]
fn naming_contexts_that_nest_repeat_or_compete_are_refused() {
    for (config, says) in [
        (format!("[directory]\nsuffixes = [{SUFFIX:?}, \"ou=x,{SUFFIX}\"]\n"), "overlaps"),
        (format!("[directory]\nsuffixes = [{SUFFIX:?}, \"DC=Example,dc=COM\"]\n"), "repeats"),
        (format!("[directory]\nsuffix = {SUFFIX:?}\nsuffixes = [{SECOND:?}]\n"), "not both"),
        ("[directory]\nsuffixes = [\"\"]\n".to_string(), "directory.suffixes"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("coredir.toml");
        std::fs::write(&path, &config).unwrap();
        let err = spawn(&dir.path().join("d"), 1, &dir.path().join("err"), &["--config", path.to_str().unwrap()])
            .err()
            .unwrap_or_else(|| panic!("{config:?} must be refused"));
        assert!(err.contains(says), "{config:?}: {err}");
    }
}

/// A naming context's entry has no parent whose rules could let a user
/// add it: only the root DN may (slapd: "no write access to parent").
#[test]
fn only_the_root_dn_adds_a_suffix_entry() {
    let s = Server::start_with_config(1, &(two_contexts() + "[access]\nrules = [\"to * by users write by * read\"]\n"));
    let mut root = s.admin();
    let user = format!("uid=writer,{PEOPLE}");
    assert_eq!(add_user(&mut root, "writer").rc, 0);
    assert_eq!(root.delete(SECOND).unwrap().rc, 0);
    let mut c = s.conn();
    assert_eq!(c.simple_bind(&user, "pw-writer").unwrap().rc, 0);
    let org = vec![("objectClass", ["organization"].into()), ("o", ["second"].into())];
    assert_eq!(c.add(&format!("cn=below,{PEOPLE}"), person_attrs("below")).unwrap().rc, 0, "the rules let it write");
    let res = c.add(SECOND, org.clone()).unwrap();
    assert_eq!(res.rc, 50, "{res:?}");
    assert_eq!(root.add(SECOND, org).unwrap().rc, 0);
}

/// An import into an existing database under other naming contexts than
/// it was served with is refused (the manifest would not record them).
#[test]
fn an_import_under_changed_naming_contexts_is_refused() {
    let mut s = Server::start(1);
    s.stop();
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("coredir.toml");
    std::fs::write(&conf, with_engine(&two_contexts())).unwrap();
    let ldif = dir.path().join("more.ldif");
    std::fs::write(&ldif, format!("dn: cn=x,{SECOND}\nobjectClass: person\ncn: x\nsn: x\n")).unwrap();
    let data = s.data().display().to_string();
    let args = ["import", "--config", conf.to_str().unwrap(), "--data", &data, "--shards", "1", ldif.to_str().unwrap()];
    let (ok, err) = coredir(&args);
    assert!(!ok && err.contains("naming contexts differ"), "{err}");
}
