//! Interop with OpenLDAP's command-line clients (ldap-utils).

use crate::support::*;
use std::collections::BTreeMap;

/// 1,000 users and 20 groups, shaped like the benchmark kit's LDIF.
fn users_ldif(n: usize, groups: usize) -> String {
    let mut out = String::new();
    for i in 0..n {
        out.push_str(&format!(
            "dn: uid=user{i},{PEOPLE}\nobjectClass: top\nobjectClass: person\nobjectClass: organizationalPerson\n\
             objectClass: inetOrgPerson\nobjectClass: posixAccount\nuid: user{i}\ncn: User Number {i}\nsn: Number\n\
             givenName: User\nmail: user{i}@example.com\nuidNumber: {}\ngidNumber: {}\nhomeDirectory: /home/user{i}\n\
             loginShell: /bin/bash\nuserPassword: {{SSHA}}+RFhsab2AfzZ0VfEdyknXtUT06RhYmNk\n\n",
            10000 + i,
            20000 + i % groups
        ));
    }
    for g in 0..groups {
        out.push_str(&format!(
            "dn: cn=group{g},ou=groups,{SUFFIX}\nobjectClass: top\nobjectClass: groupOfNames\ncn: group{g}\n"
        ));
        for i in (g..n).step_by(groups) {
            out.push_str(&format!("member: uid=user{i},{PEOPLE}\n"));
        }
        out.push('\n');
    }
    out
}

/// LDIF records keyed by DN, each the record's text with base64 values
/// decoded (ldapsearch always base64-encodes `userPassword`).
fn records(ldif: &str) -> BTreeMap<String, String> {
    use base64::Engine;
    let line = |l: &str| match l.split_once(":: ") {
        Some((attr, b64)) => {
            let raw = base64::engine::general_purpose::STANDARD.decode(b64).expect("base64");
            format!("{attr}: {}", String::from_utf8(raw).expect("UTF-8"))
        }
        None => l.to_string(),
    };
    ldif.split("\n\n")
        .map(str::trim)
        .filter(|r| r.starts_with("dn:"))
        .map(|r| (r.lines().next().unwrap().to_lowercase(), r.lines().map(line).collect::<Vec<_>>().join("\n")))
        .collect()
}

fn admin_args(s: &Server) -> Vec<String> {
    ["-x", "-H", &s.url(), "-D", ROOT_DN, "-w", ROOT_PW].iter().map(|a| a.to_string()).collect()
}

fn run(name: &str, args: &[String], extra: &[&str], stdin: Option<&str>) -> (i32, String, String) {
    let mut all: Vec<&str> = args.iter().map(String::as_str).collect();
    all.extend_from_slice(extra);
    tool(name, &all, stdin)
}

#[test]
fn openldap_clients_round_trip() {
    let s = Server::start(2);
    let a = admin_args(&s);
    let ldif = users_ldif(1000, 20);
    let (code, _, err) = run("ldapadd", &a, &[], Some(&ldif));
    assert_eq!(code, 0, "ldapadd: {err}");
    // What comes back is exactly what was added, attribute order included.
    let (code, out, err) =
        run("ldapsearch", &a, &["-LLL", "-o", "ldif-wrap=no", "-b", SUFFIX, "(|(uid=user*)(cn=group*))", "*"], None);
    assert_eq!(code, 0, "{err}");
    let (want, got) = (records(&ldif), records(&out));
    assert_eq!(got.len(), 1020);
    for (dn, text) in &want {
        assert_eq!(got.get(dn), Some(text), "{dn}");
    }
    // Anonymous searches see no password.
    let (_, out, _) = tool("ldapsearch", &["-x", "-H", &s.url(), "-LLL", "-b", PEOPLE, "(uid=user7)"], None);
    assert!(out.contains("uid: user7") && !out.contains("userPassword"), "{out}");

    let (code, _, err) = run(
        "ldapmodify",
        &a,
        &[],
        Some(&format!(
            "dn: uid=user1,{PEOPLE}\nchangetype: modify\nreplace: mail\nmail: first@example.org\n-\nadd: description\ndescription: hello\n-\ndelete: loginShell\n\n\
             dn: cn=extra,{PEOPLE}\nchangetype: add\nobjectClass: device\ncn: extra\n\n"
        )),
    );
    assert_eq!(code, 0, "ldapmodify: {err}");
    let (_, out, _) = run(
        "ldapsearch",
        &a,
        &["-LLL", "-b", &format!("uid=user1,{PEOPLE}"), "-s", "base", "mail", "description", "loginShell"],
        None,
    );
    assert!(
        out.contains("mail: first@example.org") && out.contains("description: hello") && !out.contains("loginShell"),
        "{out}"
    );

    let (code, _, err) = run("ldapmodrdn", &a, &["-r", &format!("uid=user2,{PEOPLE}"), "uid=renamed2"], None);
    assert_eq!(code, 0, "ldapmodrdn: {err}");
    let (_, out, _) = run("ldapsearch", &a, &["-LLL", "-b", PEOPLE, "(uid=renamed2)", "uid"], None);
    assert!(out.contains(&format!("dn: uid=renamed2,{PEOPLE}")) && !out.contains("uid: user2"), "{out}");

    let (code, _, err) = run("ldapdelete", &a, &[&format!("uid=user3,{PEOPLE}"), &format!("cn=extra,{PEOPLE}")], None);
    assert_eq!(code, 0, "ldapdelete: {err}");
    let (code, _, err) = run("ldapdelete", &a, &[PEOPLE], None);
    assert_eq!(code, 66, "non-leaf: {err}");

    let (code, out, _) = run("ldapcompare", &a, &[&format!("uid=user4,{PEOPLE}"), "sn:number"], None);
    assert_eq!((code, out.trim()), (6, "TRUE"));
    let (code, out, _) = run("ldapcompare", &a, &[&format!("uid=user4,{PEOPLE}"), "sn:other"], None);
    assert_eq!((code, out.trim()), (5, "FALSE"));

    let (code, out, _) =
        tool("ldapwhoami", &["-x", "-H", &s.url(), "-D", &format!("uid=user5,{PEOPLE}"), "-w", "secret"], None);
    assert_eq!((code, out.trim().to_string()), (0, format!("dn:uid=user5,{PEOPLE}")));
    let (code, _, _) =
        tool("ldapwhoami", &["-x", "-H", &s.url(), "-D", &format!("uid=user5,{PEOPLE}"), "-w", "wrong"], None);
    assert_eq!(code, 49);
    let (code, out, _) = tool("ldapwhoami", &["-x", "-H", &s.url()], None);
    assert_eq!((code, out.trim()), (0, "anonymous"));

    let (_, out, _) = run("ldapsearch", &a, &["-LLL", "-b", SUFFIX, "(objectClass=*)", "1.1"], None);
    assert_eq!(out.matches("dn: ").count(), 1020 - 1 + 3, "users minus one deleted, groups, suffix and two ous");
}
