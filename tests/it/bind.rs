use crate::support::*;
use ldap3::exop::{WhoAmI, WhoAmIResp};

#[test]
fn bind_result_codes() {
    let s = Server::start(1);
    let mut c = s.admin();
    assert_eq!(add_user(&mut c, "alice").rc, 0);
    let alice = format!("uid=alice,{PEOPLE}");
    let rc = |dn: &str, pw: &str| s.conn().simple_bind(dn, pw).unwrap().rc;
    assert_eq!(rc(ROOT_DN, ROOT_PW), 0);
    assert_eq!(rc("CN=Admin, DC=Example, DC=Com", ROOT_PW), 0, "DNs compare normalized");
    assert_eq!(rc(ROOT_DN, "wrong"), 49);
    assert_eq!(rc(&alice, "pw-alice"), 0, "cleartext password stored hashed, verified");
    assert_eq!(rc(&alice, "pw-bob"), 49);
    assert_eq!(rc(&format!("uid=nobody,{PEOPLE}"), "x"), 49, "unknown DN looks like a bad password");
    assert_eq!(rc(&alice, ""), 53, "RFC 4513 unauthenticated bind refused");
    assert_eq!(rc("", ""), 0, "anonymous");
    assert_eq!(rc("", "secret"), 49);
    assert_eq!(rc("not a dn", "x"), 34);
}

#[test]
fn ssha_password_from_openldap_verifies() {
    let s = Server::start(1);
    let mut c = s.admin();
    let dn = format!("uid=hashed,{PEOPLE}");
    // {SSHA} of "secret" with salt "abcd", the format slappasswd writes.
    let hash = "{SSHA}+RFhsab2AfzZ0VfEdyknXtUT06RhYmNk";
    let res = c
        .add(
            &dn,
            vec![
                ("objectClass", ["inetOrgPerson"].into()),
                ("uid", ["hashed"].into()),
                ("cn", ["h"].into()),
                ("sn", ["h"].into()),
                ("userPassword", [hash].into()),
            ],
        )
        .unwrap();
    assert_eq!(res.rc, 0, "{res:?}");
    assert_eq!(s.conn().simple_bind(&dn, "secret").unwrap().rc, 0);
    assert_eq!(s.conn().simple_bind(&dn, "Secret").unwrap().rc, 49);
}

#[test]
fn whoami_follows_the_bind() {
    let s = Server::start(1);
    let mut c = s.conn();
    let (exop, res) = c.extended(WhoAmI).unwrap().success().unwrap();
    assert_eq!(res.rc, 0);
    assert_eq!(exop.parse::<WhoAmIResp>().authzid, "");
    c.simple_bind(ROOT_DN, ROOT_PW).unwrap().success().unwrap();
    let (exop, _) = c.extended(WhoAmI).unwrap().success().unwrap();
    assert_eq!(exop.parse::<WhoAmIResp>().authzid, format!("dn:{ROOT_DN}"));
    // A failed bind leaves the connection anonymous.
    assert_eq!(c.simple_bind(ROOT_DN, "bad").unwrap().rc, 49);
    let (exop, _) = c.extended(WhoAmI).unwrap().success().unwrap();
    assert_eq!(exop.parse::<WhoAmIResp>().authzid, "");
}
