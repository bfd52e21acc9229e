use crate::support::*;
use ldap3::exop::{WhoAmI, WhoAmIResp};
use ldap3_proto::proto::{LdapCompareRequest, LdapMsg, LdapOp, LdapSearchScope};
use ldap3_proto::LdapCodec;
use std::io::Write;

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

/// SASL EXTERNAL on the local socket, side by side with slapd on
/// `ldapi://`: the client process's uid and gid make the identity, which
/// `authz_regexp` (slapd's `authz-regexp`) maps; another authorization
/// identity is refused, and EXTERNAL is offered on that socket only.
#[test]
fn sasl_external_on_the_local_socket_answers_as_slapd_does() {
    // SAFETY: plain getters.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let authcid = format!("gidNumber={gid}+uidNumber={uid},cn=peercred,cn=external,cn=auth");
    let pattern = format!("^gidNumber={gid}\\+uidNumber={uid},cn=peercred,cn=external,cn=auth$");
    for mapped in [false, true] {
        // slapd.conf unescapes a quoted value once: the regex's `\+` is `\\+`.
        let authz = format!("authz-regexp \"{}\" \"{ROOT_DN}\"\n", pattern.replace('\\', "\\\\"));
        let slapd = LocalSlapd::start(if mapped { &authz } else { "" });
        let dir = tempfile::tempdir().unwrap();
        let ldapi = dir.path().join("ldapi");
        let mut config = format!("[server]\nldapi = {:?}\n", ldapi.display().to_string());
        if mapped {
            config += &format!("authz_regexp = [[{pattern:?}, {ROOT_DN:?}]]\n");
        }
        // Unmapped, access rules name the identity itself.
        config += &format!("[access]\nrules = [{:?}]\n", slapd.rule);
        let log = dir.path().join("access.log");
        config += &format!("[log]\nlevel = \"stats\"\nfile = {:?}\n", log.display().to_string());
        let s = Server::start_with_config(1, &config);
        let urls = [slapd.url(), format!("ldapi://{}", ldapi.display().to_string().replace('/', "%2F"))];
        let answers: Vec<Vec<(i32, String, String)>> = urls
            .iter()
            .map(|url| {
                let external = ["-Y", "EXTERNAL", "-Q", "-H", url.as_str()];
                let as_root = format!("dn:{ROOT_DN}");
                let child = format!("dn: ou=sasl,{SUFFIX}\nobjectClass: organizationalUnit\nou: sasl\n");
                let mechanisms = ["-x", "-H", url, "-LLL", "-s", "base", "-b", "", "supportedSASLMechanisms"];
                let as_authzid = |authzid: &str| tool("ldapwhoami", &[&external[..], &["-X", authzid]].concat(), None);
                let answers = vec![
                    tool("ldapwhoami", &external, None),
                    as_authzid(&as_root),
                    as_authzid("u:someone"),
                    tool("ldapadd", &external, Some(&child)),
                    tool("ldapsearch", &mechanisms, None),
                    as_authzid(&format!("dn:{authcid}")),
                    as_authzid("dn:"),
                    as_authzid("u:"),
                    as_authzid("dn:not a DN"),
                    as_authzid("dn: "),
                    as_authzid("dn:foo=bar"),
                    as_authzid(&format!("dn:uid=other,{SUFFIX}")),
                ];
                // slapd lists its Cyrus mechanisms too; the texts compared
                // are SASL's (an access refusal's are worded apart).
                answers
                    .into_iter()
                    .map(|(code, out, err)| {
                        let out = out.lines().filter(|l| !l.contains(": ") || l.contains("EXTERNAL")).collect();
                        (code, out, err.lines().filter(|l| l.contains("SASL")).collect())
                    })
                    .collect()
            })
            .collect();
        for (i, (slapd, ours)) in answers[0].iter().zip(&answers[1]).enumerate() {
            assert_eq!(slapd, ours, "answer {i}: slapd, then coredir (mapped: {mapped})");
        }
        // Both logs say who authenticated and who the bind made it, alike.
        let who = if mapped { ROOT_DN.to_string() } else { authcid.clone() };
        let lines = [
            format!(" BIND authcid=\"{authcid}\" authzid=\"{authcid}\""),
            format!(" BIND authcid=\"{authcid}\" authzid=\"dn:{ROOT_DN}\""),
            format!(" BIND dn=\"{who}\" mech=EXTERNAL bind_ssf=0 ssf=71"),
        ];
        let slapd_log = std::fs::read_to_string(slapd.dir.path().join("slapd.log")).unwrap();
        for line in &lines[..if mapped { 3 } else { 1 }] {
            assert!(slapd_log.contains(line.as_str()), "slapd: {line}\n{slapd_log}");
            wait_for("coredir's log line", || {
                std::fs::read_to_string(&log).unwrap_or_default().contains(line.as_str())
            });
        }
        // Anyone may connect, as to slapd's socket.
        let mode =
            |p: &std::path::Path| std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(p).unwrap().permissions());
        assert_eq!(mode(&ldapi) & 0o777, mode(&slapd.dir.path().join("ldapi")) & 0o777);
        let whoami = &answers[1][0].1;
        let expected = if mapped { format!("dn:{ROOT_DN}") } else { format!("dn:{authcid}") };
        assert_eq!(whoami.trim(), expected);
        assert_eq!(answers[1][2].0, 50, "{:?}", answers[1][2]);
        assert_eq!(answers[1][3].0, 0, "{:?}", answers[1][3]);
        // Over TCP there is no EXTERNAL to offer.
        let (code, _, err) = tool("ldapwhoami", &["-Y", "EXTERNAL", "-Q", "-H", &s.url()], None);
        assert_ne!(code, 0, "{err}");
        let (_, out, _) = tool("ldapsearch", &["-x", "-H", &s.url(), "-LLL", "-s", "base", "-b", "", "+"], None);
        assert!(!out.contains("supportedSASLMechanisms"), "{out}");
    }
}

/// SASL EXTERNAL whose credentials field is absent, not empty, over the
/// local socket, side by side with slapd: the bind is a first step that
/// answers saslBindInProgress with an empty challenge, other operations
/// meanwhile are refused, and the client's next step (its authorization
/// identity, empty for its own) decides. libldap always sends the field,
/// so only raw bytes reach this.
#[test]
fn sasl_external_without_credentials_is_a_first_step_as_in_slapd() {
    let slapd = LocalSlapd::start("");
    let dir = tempfile::tempdir().unwrap();
    let ldapi = dir.path().join("ldapi");
    let config = format!("[server]\nldapi = {:?}\n[access]\nrules = [{:?}]\n", ldapi.display().to_string(), slapd.rule);
    let _s = Server::start_with_config(1, &config);
    let external = |id: u8, creds: Option<&[u8]>| {
        let sasl = [tlv(0x04, b"EXTERNAL"), creds.map_or(vec![], |c| tlv(0x04, c))].concat();
        let op = [tlv(0x02, &[3]), tlv(0x04, b""), tlv(0xA3, &sasl)].concat();
        tlv(0x30, &[tlv(0x02, &[id]), tlv(0x60, &op)].concat())
    };
    let plain = |id: u8, msg: LdapOp| encode_msgs(vec![LdapMsg { msgid: id as i32, op: msg, ctrl: vec![] }]);
    let root_dse = |id: u8| {
        let mut op = search("", LdapSearchScope::Base);
        if let LdapOp::SearchRequest(r) = &mut op {
            r.attrs = vec!["1.1".into()];
        }
        plain(id, op)
    };
    let compare = |id: u8| {
        let op = LdapOp::CompareRequest(LdapCompareRequest {
            dn: SUFFIX.into(),
            atype: "dc".into(),
            val: b"example".to_vec(),
        });
        plain(id, op)
    };
    let other = format!("dn:uid=other,{SUFFIX}");
    // A Bind refused before it is read whole (its DN is not UTF-8): it
    // too ends the exchange.
    let refused_bind = |id: u8| {
        let op = [tlv(0x02, &[3]), tlv(0x04, b"cn=\xff"), tlv(0x80, b"x")].concat();
        tlv(0x30, &[tlv(0x02, &[id]), tlv(0x60, &op)].concat())
    };
    // (message, answered): Abandon and Unbind have no answer.
    let steps: Vec<(Vec<u8>, bool)> = vec![
        (external(1, None), true),
        (root_dse(2), true),
        (plain(3, whoami()), true),
        (external(4, None), true),
        (external(5, Some(b"")), true),
        (plain(6, whoami()), true),
        (external(7, None), true),
        (plain(8, bind("", "")), true),
        (plain(9, whoami()), true),
        (external(10, None), true),
        (external(11, Some(other.as_bytes())), true),
        (plain(12, whoami()), true),
        (external(13, None), true),
        (compare(14), true),
        (external(15, Some(b"")), true),
        (plain(16, whoami()), true),
        (external(17, None), true),
        (refused_bind(18), true),
        (plain(19, whoami()), true),
        (external(20, None), true),
        (plain(21, LdapOp::AbandonRequest(20)), false),
        // A request the server refuses on its first reading: still 1.
        (plain(22, search("not a DN", LdapSearchScope::Base)), true),
        (plain(23, LdapOp::UnbindRequest), false),
        (plain(24, whoami()), true),
    ];
    let transcript = |socket: &std::path::Path| {
        let sock = std::os::unix::net::UnixStream::connect(socket).unwrap();
        sock.set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
        let mut raw = Raw::over(sock);
        let mut out = vec![];
        for (id, (step, answered)) in (1..).zip(&steps) {
            if raw.sock.write_all(step).is_err() {
                out.push("closed".to_string());
                return out;
            }
            if !answered {
                continue;
            }
            loop {
                let Some(frame) = raw.recv_frame() else {
                    out.push("closed".to_string());
                    return out;
                };
                let mut copy = frame.clone();
                let Ok(Some(m)) = tokio_util::codec::Decoder::decode(&mut LdapCodec::default(), &mut copy) else {
                    out.push(format!("undecodable {:02x?}", &frame[..]));
                    continue;
                };
                // Entries differ between the two root DSEs; results must not.
                if matches!(m.op, LdapOp::SearchResultEntry(_)) {
                    continue;
                }
                let value = match &m.op {
                    LdapOp::ExtendedResponse(r) => format!(" {:?}", r.value.as_deref().map(String::from_utf8_lossy)),
                    _ => String::new(),
                };
                out.push(format!("#{} {:?}{value}", m.msgid, m.op));
                if m.msgid == id {
                    break;
                }
            }
        }
        out
    };
    let mut theirs = transcript(&slapd.dir.path().join("ldapi"));
    // Deliberate difference: slapd answers the Abandon sent meanwhile, and
    // at times the Unbind before it closes, with a message no client can
    // read (message ID 0, a bare SEQUENCE for its protocolOp, "SASL bind
    // in progress"); coredir answers neither, as RFC 4511 §4.3 and §4.11 say.
    // Not always: slapd marks the exchange in progress after it has sent
    // the Bind's answer, so an Abandon read in between is taken silently
    // (1 run in 24 with a dozen at once). Any other answer of slapd stays
    // in the comparison below and fails it.
    let junk = |l: &String| l.starts_with("undecodable [30, 21, 02, 01, 00, 30, 1c, 0a, 01, 01,");
    theirs.retain(|l| !junk(l));
    // slapd's reader thread goes on reading while a worker handles the
    // Unbind, so at times it answers the request sent after it before it
    // closes; what follows an Unbind is never answered by coredir.
    if theirs.last().is_some_and(|l| l.starts_with("#24 ")) {
        *theirs.last_mut().unwrap() = "closed".to_string();
    }
    let ours = transcript(&ldapi);
    for (i, (t, o)) in theirs.iter().zip(&ours).enumerate() {
        assert_eq!(t, o, "step {i}: slapd, then coredir\nslapd: {theirs:#?}\ncoredir: {ours:#?}");
    }
    assert_eq!(theirs.len(), ours.len());
}
