use crate::support::*;
use ldap3::exop::{PasswordModify, PasswordModifyResp};
use ldap3::LdapConn;
use std::collections::HashSet;
use std::io::Write;
use std::process::{Command, Stdio};

fn hash_password(scheme: &str, password: &str) -> String {
    let out =
        Command::new(env!("CARGO_BIN_EXE_coredir")).args(["hash-password", "--scheme", scheme, password]).output();
    let out = out.unwrap();
    assert!(out.status.success(), "{scheme}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Adds `uid` with exactly this `userPassword` value (hashes are kept as given).
fn user_with(c: &mut LdapConn, uid: &str, value: &str) {
    let res = add_with(c, uid, value);
    assert_eq!(res.rc, 0, "{res:?}");
}

/// The add `user_with` makes, whatever its answer.
fn add_with(c: &mut LdapConn, uid: &str, value: &str) -> ldap3::LdapResult {
    c.add(
        &format!("uid={uid},{PEOPLE}"),
        vec![
            ("objectClass", HashSet::from(["inetOrgPerson"])),
            ("uid", HashSet::from([uid])),
            ("cn", HashSet::from([uid])),
            ("sn", HashSet::from(["P"])),
            ("userPassword", HashSet::from([value])),
        ],
    )
    .unwrap()
}

fn bind(s: &Server, uid: &str, pw: &str) -> u32 {
    s.conn().simple_bind(&format!("uid={uid},{PEOPLE}"), pw).unwrap().rc
}

#[test]
fn every_scheme_verifies_on_bind() {
    let s = Server::start(2);
    let mut c = s.admin();
    let mut users = Vec::new();
    for (i, scheme) in
        ["{SSHA}", "{SHA}", "{SSHA256}", "{SSHA512}", "{SHA256}", "{SHA512}", "{PBKDF2}", "{PBKDF2-SHA256}"]
            .iter()
            .chain(&["{PBKDF2-SHA512}", "{ARGON2}", "{CRYPT}"])
            .enumerate()
    {
        let h = hash_password(scheme, "pass word");
        assert!(h.to_ascii_uppercase().starts_with(&scheme.to_ascii_uppercase()), "{h}");
        users.push((format!("s{i}"), h));
    }
    // Written by other servers: OpenLDAP's pw-pbkdf2 ("secret") and 389-ds ("Password123").
    users.push((
        "ol".into(),
        "{PBKDF2-SHA256}10000$jq40ImWtmpTE.aYDYV1GfQ$mpiL4ui02ACmYOAnCjp/MI1gQk50xLbZ54RZneU0fCg".into(),
    ));
    for (uid, h) in &users {
        user_with(&mut c, uid, h);
    }
    for (uid, h) in &users {
        let right = if uid == "ol" { "secret" } else { "pass word" };
        assert_eq!(bind(&s, uid, right), 0, "{h}");
        assert_eq!(bind(&s, uid, "wrong"), 49, "{h}");
    }
    // Reading the password from standard input, like slappasswd.
    let mut child = Command::new(env!("CARGO_BIN_EXE_coredir"))
        .args(["hash-password", "--scheme", "{SSHA512}"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"from stdin\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let h = String::from_utf8(out.stdout).unwrap().trim().to_string();
    user_with(&mut c, "stdin", &h);
    assert_eq!(bind(&s, "stdin", "from stdin"), 0);
    let out = Command::new(env!("CARGO_BIN_EXE_coredir")).args(["hash-password", "--scheme", "{MD4}", "x"]).output();
    assert!(!out.unwrap().status.success());
}

/// Every OpenLDAP format, hashed by OpenLDAP's own slappasswd.
#[test]
fn hashes_from_slappasswd_verify() {
    let cases: &[(&str, &[&str])] = &[
        ("{SSHA}", &[]),
        ("{SHA}", &[]),
        ("{MD5}", &[]),
        ("{SMD5}", &[]),
        ("{SSHA256}", &["-o", "module-load=pw-sha2.la"]),
        ("{SSHA384}", &["-o", "module-load=pw-sha2.la"]),
        ("{SSHA512}", &["-o", "module-load=pw-sha2.la"]),
        ("{SHA256}", &["-o", "module-load=pw-sha2.la"]),
        ("{SHA512}", &["-o", "module-load=pw-sha2.la"]),
        ("{PBKDF2}", &["-o", "module-load=pw-pbkdf2.la"]),
        ("{PBKDF2-SHA1}", &["-o", "module-load=pw-pbkdf2.la"]),
        ("{PBKDF2-SHA256}", &["-o", "module-load=pw-pbkdf2.la"]),
        ("{PBKDF2-SHA512}", &["-o", "module-load=pw-pbkdf2.la"]),
        ("{ARGON2}", &["-o", "module-load=argon2.la"]),
        ("{CRYPT}", &["-c", "$1$%.8s"]),
        ("{CRYPT}", &["-c", "$5$%.16s"]),
        ("{CRYPT}", &["-c", "$6$%.16s"]),
        ("{CRYPT}", &["-c", "$2b$10$%.22s"]),
    ];
    let s = Server::start(2);
    let mut c = s.admin();
    let mut users = Vec::new();
    for (i, (scheme, extra)) in cases.iter().enumerate() {
        let pw = format!("s3cret {i}");
        let mut args = vec!["-h", scheme, "-s", &pw];
        args.extend_from_slice(extra);
        let h = slappasswd(&args);
        assert!(h.starts_with(scheme), "{h}");
        let uid = format!("slap{i}");
        user_with(&mut c, &uid, &h);
        users.push((uid, pw, h));
    }
    for (uid, pw, h) in &users {
        assert_eq!(bind(&s, uid, pw), 0, "{h}");
        assert_eq!(bind(&s, uid, &format!("{pw}x")), 49, "{h}");
        assert_eq!(bind(&s, uid, ""), 53, "an empty password is an unauthenticated bind");
    }
}

#[test]
fn new_passwords_get_the_default_scheme_and_cleartext_is_off() {
    let s = Server::start(1);
    let mut c = s.admin();
    assert_eq!(add_user(&mut c, "d").rc, 0);
    let e = get_entry(&mut c, &format!("uid=d,{PEOPLE}"), vec!["userPassword"]).unwrap();
    assert!(e.attrs["userPassword"][0].starts_with("{PBKDF2-SHA512}10000$"), "{:?}", e.attrs);
    assert_eq!(bind(&s, "d", "pw-d"), 0);

    // Stored as cleartext: verified only where the configuration allows it.
    for (allow, want) in [(false, 49), (true, 0)] {
        let config = format!("[passwords]\ndefault_scheme = \"{{CLEARTEXT}}\"\nallow_cleartext = {allow}\n");
        let s = Server::start_with_config(1, &config);
        let mut c = s.admin();
        assert_eq!(add_user(&mut c, "t").rc, 0);
        let e = get_entry(&mut c, &format!("uid=t,{PEOPLE}"), vec!["userPassword"]).unwrap();
        assert_eq!(e.attrs["userPassword"], vec!["pw-t"]);
        assert_eq!(bind(&s, "t", "pw-t"), want, "allow_cleartext = {allow}");
    }
}

#[test]
fn password_modify() {
    let s = Server::start(2);
    let mut admin = s.admin();
    for uid in ["a", "b"] {
        assert_eq!(add_user(&mut admin, uid).rc, 0);
    }
    let (a, b) = (format!("uid=a,{PEOPLE}"), format!("uid=b,{PEOPLE}"));
    let mut user = s.conn();
    user.simple_bind(&a, "pw-a").unwrap().success().unwrap();
    let pm = |c: &mut LdapConn, id: Option<&str>, old: Option<&str>, new: Option<&str>| {
        let ldap3::result::ExopResult(exop, res) =
            c.extended(PasswordModify { user_id: id, old_pass: old, new_pass: new }).unwrap();
        (res.rc, exop.val.is_some().then(|| exop.parse::<PasswordModifyResp>().gen_pass))
    };
    assert_eq!(pm(&mut user, None, Some("wrong"), Some("n1")).0, 53, "old password checked (slapd: unwilling)");
    // As slapd: the old password is not required when the rules allow the write.
    assert_eq!(pm(&mut user, None, None, Some("n0")).0, 0, "old password not required");
    assert_eq!(pm(&mut user, None, Some("n0"), Some("n1")).0, 0);
    assert_eq!(bind(&s, "a", "n1"), 0);
    assert_eq!(bind(&s, "a", "pw-a"), 49);
    // As slapd (p50-passwd-other-user-with-old): another's old password is
    // verified first, as the requester may (no auth access): 53, not 50.
    assert_eq!(pm(&mut user, Some(&b), Some("pw-b"), Some("x")).0, 53, "not another's");
    assert_eq!(pm(&mut user, Some(&b), None, Some("x")).0, 50, "not another's, without the old one");
    // As slapd: the user identity is a DN, not an authzId (edges.cases).
    assert_eq!(pm(&mut user, Some(&format!("dn:{b}")), Some("pw-b"), Some("x")).0, 21, "dn: is no DN");
    assert_eq!(pm(&mut s.conn(), Some(&b), None, Some("x")).0, 8, "anonymous");
    // The root DN resets anyone's; without a new password one is generated.
    assert_eq!(pm(&mut admin, Some(&b), None, Some("reset")).0, 0);
    assert_eq!(bind(&s, "b", "reset"), 0);
    let (rc, generated) = pm(&mut admin, Some(&b), None, None);
    assert_eq!(rc, 0);
    let generated = generated.expect("a generated password");
    assert_eq!(generated.len(), 16);
    assert_eq!(bind(&s, "b", &generated), 0);
    let stored = get_entry(&mut admin, &b, vec!["userPassword"]).unwrap().attrs["userPassword"][0].clone();
    assert!(stored.starts_with("{PBKDF2-SHA512}"), "{stored}");

    // OpenLDAP's ldappasswd.
    ldap_utils();
    let out = Command::new("ldappasswd")
        .args(["-x", "-H", &s.url(), "-D", &a, "-w", "n1", "-a", "n1", "-s", "from-ldappasswd"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(bind(&s, "a", "from-ldappasswd"), 0);
}

#[test]
fn self_change_can_require_the_old_password() {
    let s = Server::start_with_config(1, "[passwords]\nself_change_requires_old = true\n");
    assert_eq!(add_user(&mut s.admin(), "a").rc, 0);
    let mut user = s.conn();
    user.simple_bind(&format!("uid=a,{PEOPLE}"), "pw-a").unwrap().success().unwrap();
    let change = |c: &mut LdapConn, old: Option<&str>| {
        c.extended(PasswordModify { user_id: None, old_pass: old, new_pass: Some("n1") }).unwrap().1.rc
    };
    assert_eq!(change(&mut user, None), 53, "the old password is required");
    assert_eq!(change(&mut user, Some("pw-a")), 0);
    assert_eq!(bind(&s, "a", "n1"), 0);
}

/// With `directory.root_password_hash` set, a new database prints no
/// generated password: the configured hash is the root password.
#[test]
fn a_configured_root_hash_prints_no_generated_password() {
    let hash = hash_password("{SSHA}", "configured-secret");
    let mut s = Server::prepare(1, &format!("[directory]\nroot_password_hash = \"{hash}\"\n"));
    s.env = vec![("COREDIR_ROOT_PASSWORD".into(), String::new())];
    s.launch();
    assert!(!s.banner.contains("generated password"), "{}", s.banner);
    assert_eq!(s.conn().simple_bind(ROOT_DN, "configured-secret").unwrap().rc, 0);
}

/// `{PBKDF2-SHA512}` with this many iterations: a well-formed hash (of no
/// password anyone sends) whose verification costs what the count says.
fn pbkdf2_with(iterations: u64) -> String {
    format!("{{PBKDF2-SHA512}}{iterations}$/oQ4xZi382mk7kvCd3ZdkA$2wqjpuyV2l0U/a1QwoQPOtlQL.UcJGNACj1O24balruqQb/NgPW6OCvvrrJP8.SzA3/5iYvLnwWPzeX8IK/bEQ")
}

/// A user who may write their own password cannot store a hash whose
/// verification would cost minutes (every bind attempt as them, anonymous
/// included, would burn that much of a shard); one already stored (the
/// limit lowered since) never verifies, and fails at once.
#[test]
fn a_hash_beyond_the_cost_limits_is_refused_and_never_verified() {
    let mut s = Server::start_with_config(1, "[passwords]\nmax_pbkdf2_iterations = 20000\n");
    let mut c = s.admin();
    for (uid, value) in [("cost-ok", pbkdf2_with(10_000)), ("costly", pbkdf2_with(4_000_000_000))] {
        let res = add_with(&mut c, uid, &value);
        assert_eq!(res.rc, if uid == "costly" { 19 } else { 0 }, "{uid}: {res:?}");
    }
    let costly = pbkdf2_with(1_000_000);
    let replace = vec![ldap3::Mod::Replace("userPassword", HashSet::from([costly.as_str()]))];
    let res = c.modify(&format!("uid=cost-ok,{PEOPLE}"), replace).unwrap();
    assert_eq!(res.rc, 19, "{res:?}");
    // Named by its OID or in another case, userPassword is still checked
    // (and a cleartext still hashed): the limit is on the type, not on a
    // spelling of it.
    for name in ["2.5.4.35", "USERPASSWORD"] {
        let replace = vec![ldap3::Mod::Replace(name, HashSet::from([costly.as_str()]))];
        let res = c.modify(&format!("uid=cost-ok,{PEOPLE}"), replace).unwrap();
        assert_eq!(res.rc, 19, "{name}: {res:?}");
    }
    let replace = vec![ldap3::Mod::Replace("2.5.4.35", HashSet::from(["in clear"]))];
    c.modify(&format!("uid=cost-ok,{PEOPLE}"), replace).unwrap().success().unwrap();
    let stored = get_entry(&mut c, &format!("uid=cost-ok,{PEOPLE}"), vec!["userPassword"]).unwrap();
    assert!(stored.attrs["userPassword"][0].starts_with("{PBKDF2-SHA512}"), "{stored:?}");
    let secret = pbkdf2_with(10_000);
    let replace = vec![ldap3::Mod::Replace("userPassword", HashSet::from([secret.as_str()]))];
    c.modify(&format!("uid=cost-ok,{PEOPLE}"), replace).unwrap().success().unwrap();
    // "secret" is what pbkdf2_with(10_000) hashes: it binds, until the
    // limit falls below what its hash costs.
    assert_eq!(bind(&s, "cost-ok", "secret"), 0);
    std::fs::write(s.config_path(), with_engine("[passwords]\nmax_pbkdf2_iterations = 5000\n")).unwrap();
    s.restart();
    assert_eq!(bind(&s, "cost-ok", "secret"), 49);
}

/// Key stretching runs on the shard's blocking pool, one job at a time,
/// beside its commits: a write is answered while binds against slow
/// hashes are still queued, not after all of them.
#[test]
fn a_write_does_not_wait_behind_queued_binds() {
    use std::io::Read;
    let s = Server::start(1);
    let mut c = s.admin();
    user_with(&mut c, "slow", &pbkdf2_with(400_000));
    let dn = format!("uid=slow,{PEOPLE}");
    let mut binders: Vec<std::net::TcpStream> = (0..8)
        .map(|_| {
            let mut t = std::net::TcpStream::connect(("127.0.0.1", s.port)).unwrap();
            t.write_all(&encode_msgs(vec![ldap3_proto::LdapMsg::new(1, crate::support::bind(&dn, "wrong"))])).unwrap();
            t
        })
        .collect();
    let answered = |binders: &[std::net::TcpStream]| {
        binders
            .iter()
            .filter(|t| {
                t.set_nonblocking(true).unwrap();
                let ready = t.peek(&mut [0u8; 1]).is_ok();
                t.set_nonblocking(false).unwrap();
                ready
            })
            .count()
    };
    // Once one bind is answered, the server has read them all (they were
    // sent first) and the other 7 wait for the blocking pool.
    wait_for("a first bind answer", || answered(&binders) > 0);
    let res = c.modify(&dn, vec![ldap3::Mod::Replace("description", HashSet::from(["written"]))]).unwrap();
    assert_eq!(res.rc, 0, "{res:?}");
    // With the write's commit queued behind the binds, all 8 would be answered by now.
    let done = answered(&binders);
    assert!(done < 5, "{done} of 8 slow binds were answered before the write");
    for t in &mut binders {
        t.set_read_timeout(Some(std::time::Duration::from_secs(60))).unwrap();
        let mut answer = [0u8; 14];
        t.read_exact(&mut answer).unwrap();
        // BindResponse (0x61) with resultCode 49, invalidCredentials.
        assert_eq!((answer[5], answer[7], answer[9]), (0x61, 0x0a, 49), "{answer:?}");
    }
}

/// A bind whose client has gone before its turn on the blocking pool is
/// not verified, as slapd drops the queued operations of a connection
/// that closed: 20 anonymous connections that each send a bind against a
/// costly hash and close would otherwise cost 20 verifications, and keep
/// every other slow bind of the shard waiting behind them.
#[test]
fn binds_of_clients_that_left_are_not_verified() {
    let s = Server::start(1);
    let mut c = s.admin();
    user_with(&mut c, "slow", &pbkdf2_with(400_000));
    let dn = format!("uid=slow,{PEOPLE}");
    let metric = |name: &str| -> u64 {
        let text = ctl(&s, &["metrics"]).1;
        let lines = text
            .lines()
            .filter(|l| l.starts_with(name) && (l[name.len()..].starts_with('{') || l[name.len()..].starts_with(' ')));
        lines.map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap() as u64).sum()
    };
    let binds = |code: &str| -> u64 {
        let text = ctl(&s, &["metrics"]).1;
        let lines = text.lines().filter(|l| {
            l.starts_with("coredir_operations_completed_total{")
                && l.contains("op=\"bind\"")
                && l.contains(&format!("code=\"{code}\""))
        });
        lines.map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap() as u64).sum()
    };
    let (verified, refused) = (metric("coredir_password_jobs_total"), binds("49"));
    for _ in 0..20 {
        let mut t = std::net::TcpStream::connect(("127.0.0.1", s.port)).unwrap();
        t.write_all(&encode_msgs(vec![ldap3_proto::LdapMsg::new(1, crate::support::bind(&dn, "wrong"))])).unwrap();
        drop(t);
    }
    let open = || ctl_json(&s, &["connections"])["connections"].as_array().unwrap().len();
    wait_for("the 20 connections to end", || open() == 1);
    let run = metric("coredir_password_jobs_total") - verified;
    assert!(run < 5, "{run} of 20 binds of clients that had gone were verified");
    // Nor answered, nor counted or logged as a failed password (none was
    // checked): canceled.
    assert_eq!(binds("49"), refused + run);
    assert_eq!(binds("118"), 20 - run);
    // One whose client waits is verified and answered.
    assert_eq!(bind(&s, "slow", "wrong"), 49);
    assert_eq!(metric("coredir_password_jobs_total"), verified + run + 1);
}

/// Each cleartext `userPassword` value costs a key stretching to store
/// (the default scheme): one modify of a user's own password with 3,000
/// values held the shard's password lane, and every bind behind it, for
/// 20 s of CPU. At most `MOST_HASHED` per operation are hashed; more is
/// adminLimitExceeded before any is, in an add and across a modify's
/// changes; values sent hashed are not counted.
#[test]
fn an_operation_hashes_at_most_a_few_cleartext_passwords() {
    let s = Server::start(1);
    let mut c = s.admin();
    user_with(&mut c, "many", "first");
    let dn = format!("uid=many,{PEOPLE}");
    let values = |n: usize| (0..n).map(|i| format!("pw{i}")).collect::<HashSet<String>>();
    fn as_strs(v: &HashSet<String>) -> HashSet<&str> {
        v.iter().map(String::as_str).collect()
    }
    let five = values(5);
    let res = c.modify(&dn, vec![ldap3::Mod::Replace("userPassword", as_strs(&five))]).unwrap();
    assert_eq!(res.rc, 11, "{res:?}");
    // Across changes: three, then two more.
    let (three, two) = (values(3), ["x1", "x2"].into_iter().collect::<HashSet<&str>>());
    let res = c
        .modify(&dn, vec![ldap3::Mod::Replace("userPassword", as_strs(&three)), ldap3::Mod::Add("userPassword", two)])
        .unwrap();
    assert_eq!(res.rc, 11, "{res:?}");
    assert_eq!(bind(&s, "many", "first"), 0, "a refused modify changed the password");
    let four = values(4);
    let res = c.modify(&dn, vec![ldap3::Mod::Replace("userPassword", as_strs(&four))]).unwrap();
    assert_eq!(res.rc, 0, "{res:?}");
    assert_eq!(bind(&s, "many", "pw3"), 0);
    // Hashed values are not counted.
    let hashed: Vec<String> = (0..6).map(|i| hash_password("{SSHA}", &format!("h{i}"))).collect();
    let res =
        c.modify(&dn, vec![ldap3::Mod::Replace("userPassword", hashed.iter().map(String::as_str).collect())]).unwrap();
    assert_eq!(res.rc, 0, "{res:?}");
    // An add alike.
    let res = c
        .add(
            &format!("uid=many2,{PEOPLE}"),
            vec![
                ("objectClass", HashSet::from(["inetOrgPerson"])),
                ("uid", HashSet::from(["many2"])),
                ("cn", HashSet::from(["many2"])),
                ("sn", HashSet::from(["P"])),
                ("userPassword", as_strs(&five)),
            ],
        )
        .unwrap();
    assert_eq!(res.rc, 11, "{res:?}");
}
