use crate::support::*;
use ldap3::{Mod, Scope};
use std::collections::HashSet;

fn ou(c: &mut ldap3::LdapConn, dn: &str, name: &str) -> u32 {
    c.add(dn, vec![("objectClass", ["organizationalUnit"].into()), ("ou", [name].into())]).unwrap().rc
}

#[test]
fn add_result_codes() {
    let s = Server::start(2);
    let mut c = s.admin();
    assert_eq!(add_user(&mut c, "a").rc, 0);
    assert_eq!(add_user(&mut c, "a").rc, 68, "entryAlreadyExists");
    let res = c
        .add(
            &format!("cn=x,ou=nowhere,{SUFFIX}"),
            vec![("objectClass", ["person"].into()), ("cn", ["x"].into()), ("sn", ["x"].into())],
        )
        .unwrap();
    assert_eq!(res.rc, 32, "parent missing");
    assert_eq!(res.matched.to_lowercase(), SUFFIX);
    assert_eq!(
        c.add("uid=x,dc=other", vec![("objectClass", ["person"].into())]).unwrap().rc,
        53,
        "outside the suffix (slapd: no global superior knowledge)"
    );
    assert_eq!(c.add("nodn", vec![("objectClass", ["person"].into())]).unwrap().rc, 34);
    assert_eq!(c.add(&format!("uid=y,{PEOPLE}"), vec![("uid", ["y"].into())]).unwrap().rc, 65, "no objectClass");
    let res = c
        .add(
            &format!("uid=z,{PEOPLE}"),
            vec![("objectClass", ["inetOrgPerson"].into()), ("cn", ["z"].into()), ("sn", ["z"].into())],
        )
        .unwrap();
    assert_eq!(res.rc, 0, "RDN value taken from the DN (RFC 4511 §4.7, as slapd): {res:?}");
    let res = c
        .add(
            &format!("uid=z,{PEOPLE}"),
            vec![("objectClass", ["person"].into()), ("uid", ["z"].into()), ("entryUUID", ["x"].into())],
        )
        .unwrap();
    assert_eq!(res.rc, 21, "the value's syntax first, as slapd's slap_mods_check");
    let uuid = "6ba7b810-9dad-11d1-80b4-00c04fd430c8";
    let res = c
        .add(
            &format!("uid=z,{PEOPLE}"),
            vec![("objectClass", ["person"].into()), ("uid", ["z"].into()), ("entryUUID", [uuid].into())],
        )
        .unwrap();
    assert_eq!(res.rc, 19, "no user modification");
    let res = c
        .add(&format!("uid=z,{PEOPLE}"), vec![("objectClass", ["person"].into()), ("uid", ["z", "Z"].into())])
        .unwrap();
    assert_eq!(res.rc, 20, "duplicate values");
    // Anonymous writes need authentication (slapd: strongAuthRequired); ordinary users lack access.
    assert_eq!(add_user(&mut s.conn(), "anon").rc, 8);
    let mut user = s.conn();
    user.simple_bind(&format!("uid=a,{PEOPLE}"), "pw-a").unwrap().success().unwrap();
    assert_eq!(add_user(&mut user, "b").rc, 50);
}

#[test]
fn modify_result_codes() {
    let s = Server::start(2);
    let mut c = s.admin();
    assert_eq!(add_user(&mut c, "m").rc, 0);
    let dn = format!("uid=m,{PEOPLE}");
    let res = c
        .modify(
            &dn,
            vec![
                Mod::Add("mail", HashSet::from(["m@example.com"])),
                Mod::Replace("sn", HashSet::from(["Changed"])),
                Mod::Add("description", HashSet::from(["one"])),
                Mod::Delete("description", HashSet::new()),
                Mod::Add("objectClass", HashSet::from(["posixAccount"])),
                Mod::Add("gidNumber", HashSet::from(["10"])),
                Mod::Add("homeDirectory", HashSet::from(["/home/m"])),
                Mod::Replace("uidNumber", HashSet::from(["10"])),
                Mod::Increment("uidNumber", "5"),
            ],
        )
        .unwrap();
    assert_eq!(res.rc, 0, "{res:?}");
    let e = get_entry(&mut c, &dn, vec!["*", "+"]).unwrap();
    assert_eq!(e.attrs["mail"], vec!["m@example.com"]);
    assert_eq!(e.attrs["sn"], vec!["Changed"]);
    assert_eq!(e.attrs["uidNumber"], vec!["15"]);
    assert!(!e.attrs.contains_key("description"));
    assert_eq!(e.attrs["modifiersName"], vec![ROOT_DN]);
    let rc = |c: &mut ldap3::LdapConn, m: Vec<Mod<&str>>| c.modify(&dn, m).unwrap().rc;
    assert_eq!(rc(&mut c, vec![Mod::Add("mail", HashSet::from(["M@EXAMPLE.COM"]))]), 20);
    assert_eq!(rc(&mut c, vec![Mod::Delete("mail", HashSet::from(["other@x"]))]), 16);
    assert_eq!(rc(&mut c, vec![Mod::Delete("telephoneNumber", HashSet::new())]), 16);
    assert_eq!(rc(&mut c, vec![Mod::Delete("uid", HashSet::from(["m"]))]), 64, "namingViolation, as slapd");
    // As slapd: the value's syntax first (21), then no user modification (19).
    assert_eq!(rc(&mut c, vec![Mod::Replace("entryUUID", HashSet::from(["x"]))]), 21);
    let uuid = "6ba7b810-9dad-11d1-80b4-00c04fd430c8";
    assert_eq!(rc(&mut c, vec![Mod::Replace("entryUUID", HashSet::from([uuid]))]), 19);
    // All or nothing: the good first change is not applied either.
    assert_eq!(
        rc(&mut c, vec![Mod::Replace("sn", HashSet::from(["Again"])), Mod::Delete("mail", HashSet::from(["nope"]))]),
        16
    );
    assert_eq!(get_entry(&mut c, &dn, vec!["sn"]).unwrap().attrs["sn"], vec!["Changed"]);
    let res = c.modify(&format!("uid=ghost,{PEOPLE}"), vec![Mod::Replace("sn", HashSet::from(["x"]))]).unwrap();
    assert_eq!((res.rc, res.matched.to_lowercase()), (32, PEOPLE.to_string()));
    // A replaced password is stored hashed and binds.
    assert_eq!(rc(&mut c, vec![Mod::Replace("userPassword", HashSet::from(["new-pw"]))]), 0);
    assert_eq!(s.conn().simple_bind(&dn, "new-pw").unwrap().rc, 0);
}

#[test]
fn delete_result_codes() {
    let s = Server::start(2);
    let mut c = s.admin();
    let branch = format!("ou=branch,{SUFFIX}");
    assert_eq!(ou(&mut c, &branch, "branch"), 0);
    assert_eq!(ou(&mut c, &format!("ou=leaf,{branch}"), "leaf"), 0);
    assert_eq!(c.delete(&branch).unwrap().rc, 66, "notAllowedOnNonLeaf");
    assert_eq!(c.delete(&format!("ou=leaf,{branch}")).unwrap().rc, 0);
    assert_eq!(c.delete(&format!("ou=leaf,{branch}")).unwrap().rc, 32);
    assert_eq!(c.delete(&branch).unwrap().rc, 0, "a leaf once its child is gone");
    assert_eq!(c.delete("cn=x,dc=nowhere").unwrap().rc, 32);
    assert_eq!(c.delete("bad").unwrap().rc, 34);
    assert_eq!(s.conn().delete(PEOPLE).unwrap().rc, 8, "anonymous: strongAuthRequired, as slapd");
    assert!(get_entry(&mut c, &branch, vec![]).is_none());
}

#[test]
fn suffix_entry_can_be_deleted_and_added_again() {
    let s = Server::start(2);
    let mut c = s.admin();
    assert_eq!(c.delete(SUFFIX).unwrap().rc, 66);
    assert_eq!(c.delete(PEOPLE).unwrap().rc, 0);
    assert_eq!(c.delete(&format!("ou=groups,{SUFFIX}")).unwrap().rc, 0);
    assert_eq!(c.delete(SUFFIX).unwrap().rc, 0);
    assert_eq!(c.delete(SUFFIX).unwrap().rc, 32);
    let res = c
        .add(
            SUFFIX,
            vec![
                ("objectClass", ["dcObject", "organization"].into()),
                ("dc", ["example"].into()),
                ("o", ["Example"].into()),
            ],
        )
        .unwrap();
    assert_eq!(res.rc, 0, "{res:?}");
    assert_eq!(ou(&mut c, PEOPLE, "people"), 0);
}

#[test]
fn modify_dn() {
    let s = Server::start(2);
    let mut c = s.admin();
    assert_eq!(add_user(&mut c, "old").rc, 0);
    let old = format!("uid=old,{PEOPLE}");
    let uuid = get_entry(&mut c, &old, vec!["entryUUID"]).unwrap().attrs["entryUUID"].clone();
    // New RDN keeping the old value.
    assert_eq!(c.modifydn(&old, "uid=new", false, None).unwrap().rc, 0);
    let new = format!("uid=new,{PEOPLE}");
    assert!(get_entry(&mut c, &old, vec![]).is_none());
    let e = get_entry(&mut c, &new, vec!["uid", "entryUUID"]).unwrap();
    assert_eq!(e.dn, new);
    assert_eq!(e.attrs["uid"], vec!["old", "new"]);
    assert_eq!(e.attrs["entryUUID"], uuid, "a rename keeps the entry's identity");
    // deleteoldrdn and newSuperior.
    let groups = format!("ou=groups,{SUFFIX}");
    assert_eq!(c.modifydn(&new, "uid=moved", true, Some(&groups)).unwrap().rc, 0);
    let moved = format!("uid=moved,{groups}");
    assert_eq!(get_entry(&mut c, &moved, vec!["uid"]).unwrap().attrs["uid"], vec!["old", "moved"]);
    assert_eq!(search_dns(&mut c, PEOPLE, Scope::OneLevel, "(objectClass=*)").len(), 0);
    assert_eq!(get_entry(&mut c, &groups, vec!["numSubordinates"]).unwrap().attrs["numSubordinates"], vec!["1"]);
    assert_eq!(get_entry(&mut c, PEOPLE, vec!["numSubordinates"]).unwrap().attrs["numSubordinates"], vec!["0"]);
    // The moved entry still binds.
    assert_eq!(s.conn().simple_bind(&moved, "pw-old").unwrap().rc, 0);
    // Error codes.
    assert_eq!(add_user(&mut c, "taken").rc, 0);
    assert_eq!(c.modifydn(&format!("uid=taken,{PEOPLE}"), "uid=moved", false, Some(&groups)).unwrap().rc, 68);
    assert_eq!(c.modifydn(&format!("uid=ghost,{PEOPLE}"), "uid=g2", false, None).unwrap().rc, 32);
    assert_eq!(c.modifydn(&moved, "uid=x", false, Some(&format!("ou=nowhere,{SUFFIX}"))).unwrap().rc, 32);
    assert_eq!(c.delete(&format!("uid=taken,{PEOPLE}")).unwrap().rc, 0);
    assert_eq!(c.modifydn(PEOPLE, "ou=persons", false, None).unwrap().rc, 0, "an empty ou is a leaf");
    assert_eq!(c.modifydn(&format!("ou=persons,{SUFFIX}"), "ou=people", false, None).unwrap().rc, 0);
    // A subtree moves whole.
    assert_eq!(c.modifydn(&groups, "ou=teams", true, None).unwrap().rc, 0, "a subtree rename");
    let teams = format!("ou=teams,{SUFFIX}");
    assert_eq!(search_dns(&mut c, &teams, Scope::OneLevel, "(uid=moved)"), vec![format!("uid=moved,{teams}")]);
    assert!(get_entry(&mut c, &moved, vec![]).is_none(), "nothing left at the old DN");
    assert_eq!(c.modifydn(&teams, "ou=groups", true, None).unwrap().rc, 0);
    assert_eq!(c.modifydn(&moved, "bad", false, None).unwrap().rc, 34);
    // Case-only rename stays the same entry.
    assert_eq!(c.modifydn(&moved, "uid=MOVED", false, None).unwrap().rc, 0);
    assert_eq!(get_entry(&mut c, &moved, vec![]).unwrap().dn, format!("uid=MOVED,{groups}"));
}

#[test]
fn compare_result_codes() {
    let s = Server::start(1);
    let mut c = s.admin();
    assert_eq!(add_user(&mut c, "cmp").rc, 0);
    let dn = format!("uid=cmp,{PEOPLE}");
    let mut anon = s.conn();
    assert_eq!(anon.compare(&dn, "sn", "user").unwrap().0.rc, 6, "compareTrue, case-insensitive");
    assert_eq!(anon.compare(&dn, "surname", "other").unwrap().0.rc, 5);
    assert_eq!(anon.compare(&dn, "mail", "x").unwrap().0.rc, 16);
    assert_eq!(anon.compare(&format!("uid=ghost,{PEOPLE}"), "sn", "x").unwrap().0.rc, 32);
    assert_eq!(anon.compare(&dn, "userPassword", "pw-cmp").unwrap().0.rc, 50);
    assert_eq!(c.compare(&dn, "userPassword", "pw-cmp").unwrap().0.rc, 6, "verified against the hash");
    assert_eq!(c.compare(&dn, "userPassword", "nope").unwrap().0.rc, 5);
}

/// Every change stamps `entryCSN` in OpenLDAP's form, with this server's
/// id, growing with each change; a rename keeps counting.
#[test]
fn entry_csn_is_stamped_on_every_change() {
    let s = Server::start_with_config(2, "[server]\nid = 42\n");
    let mut c = s.admin();
    let csn = |c: &mut ldap3::LdapConn, dn: &str| {
        let e = get_entry(c, dn, vec!["entryCSN"]).unwrap();
        let v = e.attrs["entryCSN"][0].clone();
        let parts: Vec<&str> = v.split('#').collect();
        assert!(parts.len() == 4 && parts[0].len() == 22 && parts[0].ends_with('Z'), "{v}");
        assert_eq!(parts[2], "02a", "{v}");
        v
    };
    assert_eq!(add_user(&mut c, "csn1").rc, 0);
    let dn = format!("uid=csn1,{PEOPLE}");
    let added = csn(&mut c, &dn);
    let res = c.modify(&dn, vec![ldap3::Mod::Replace("sn", ["Other"].into())]).unwrap();
    assert_eq!(res.rc, 0);
    let modified = csn(&mut c, &dn);
    assert!(modified > added, "{added} then {modified}");
    assert_eq!(c.modifydn(&dn, "uid=csn2", true, None).unwrap().rc, 0);
    let renamed = csn(&mut c, &format!("uid=csn2,{PEOPLE}"));
    assert!(renamed > modified, "{modified} then {renamed}");
    // The entries the server created at start carry one too.
    csn(&mut c, SUFFIX);
}

/// A modify names its modifier as bound, in the spelling it bound with,
/// also where changes are captured for replication (a syncrepl provider,
/// a mirror pair): there the new modifiersName, equal to the old under DN
/// matching, was taken for no change and the old spelling stayed, as
/// slapd without syncprov does not (p43-modifiersname-root-other-spelling).
#[test]
fn a_modifier_in_another_spelling_is_recorded_as_it_bound() {
    for config in ["", "[syncrepl]\nprovider = true\n"] {
        let s = Server::start_with_config(1, config);
        let mut c = s.admin();
        let dn = format!("cn=e,{PEOPLE}");
        c.add(&dn, vec![("objectClass", ["device"].into()), ("cn", ["e"].into())]).unwrap().success().unwrap();
        let spelled = "CN=Admin, DC=Example,DC=Com";
        c.simple_bind(spelled, ROOT_PW).unwrap().success().unwrap();
        c.modify(&dn, vec![ldap3::Mod::Replace("description", ["x"].into())]).unwrap().success().unwrap();
        let e = get_entry(&mut c, &dn, vec!["modifiersName"]).unwrap();
        assert_eq!(e.attrs["modifiersName"], ["cn=Admin,dc=Example,dc=Com"], "with {config:?}");
    }
}
