//! TLS with a CA generated at test time: StartTLS (`ldapwhoami -ZZ`),
//! `ldaps://`, `tls.required`, and a certificate reload on SIGHUP that
//! leaves an established session working.

use crate::support::*;
use ldap3_proto::proto::*;
use ldap3_proto::LdapResultCode;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A CA, a server certificate for 127.0.0.1 and localhost it signed, and
/// a client certificate it signed (`cn=Client One`, `ou=people`, `o=example`).
struct Pki {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
}

fn make_pki(dir: &Path, name: &str) -> Pki {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(DnType::CommonName, format!("coredir test CA {name}"));
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let mut leaf_params = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
    leaf_params.distinguished_name.push(DnType::CommonName, "127.0.0.1");
    let leaf = leaf_params.signed_by(&leaf_key, &ca, &ca_key).unwrap();
    let client_key = KeyPair::generate().unwrap();
    let mut client_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    client_params.distinguished_name.push(DnType::OrganizationName, "example");
    client_params.distinguished_name.push(DnType::OrganizationalUnitName, "people");
    client_params.distinguished_name.push(DnType::CommonName, "Client One");
    let client = client_params.signed_by(&client_key, &ca, &ca_key).unwrap();
    // The same key, a subject in a BMPString (as Windows CAs write it)
    // with a comma and a non-ASCII letter.
    let mut odd_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    odd_params.distinguished_name.push(DnType::OrganizationName, "example");
    let bmp = rcgen::BmpString::try_from("Zoë, Two").unwrap();
    odd_params.distinguished_name.push(DnType::CommonName, rcgen::DnValue::BmpString(bmp));
    let odd = odd_params.signed_by(&client_key, &ca, &ca_key).unwrap();
    std::fs::write(dir.join(format!("{name}-odd-cert.pem")), odd.pem()).unwrap();
    // No subject at all, a name in subjectAltName only (as SPIFFE's).
    let mut empty_params = CertificateParams::new(vec!["client.example".to_string()]).unwrap();
    empty_params.distinguished_name = rcgen::DistinguishedName::new();
    let empty = empty_params.signed_by(&client_key, &ca, &ca_key).unwrap();
    std::fs::write(dir.join(format!("{name}-empty-cert.pem")), empty.pem()).unwrap();
    let pki = Pki {
        ca: dir.join(format!("{name}-ca.pem")),
        cert: dir.join(format!("{name}-cert.pem")),
        key: dir.join(format!("{name}-key.pem")),
        client_cert: dir.join(format!("{name}-client-cert.pem")),
        client_key: dir.join(format!("{name}-client-key.pem")),
    };
    std::fs::write(&pki.ca, ca.pem()).unwrap();
    std::fs::write(&pki.cert, leaf.pem()).unwrap();
    std::fs::write(&pki.key, leaf_key.serialize_pem()).unwrap();
    std::fs::write(&pki.client_cert, client.pem()).unwrap();
    std::fs::write(&pki.client_key, client_key.serialize_pem()).unwrap();
    pki
}

/// A server with TLS on StartTLS and on an ldaps port; the files it reads
/// are `live-cert.pem` and `live-key.pem` (copies of `pki`'s), so a test
/// can replace them.
fn tls_server(pki: &Pki, dir: &Path, required: bool) -> (Server, u16) {
    let (cert, key) = (dir.join("live-cert.pem"), dir.join("live-key.pem"));
    std::fs::copy(&pki.cert, &cert).unwrap();
    std::fs::copy(&pki.key, &key).unwrap();
    let config = format!(
        "[tls]\ncertificate_file = {:?}\nkey_file = {:?}\nlisten = \"127.0.0.1:0\"\nrequired = {required}\n",
        cert.display().to_string(),
        key.display().to_string()
    );
    let s = Server::start_with_config(2, &config);
    let line = s.banner.lines().find_map(|l| l.strip_prefix("coredir: ldaps on ")).expect("ldaps line");
    let port = line.rsplit(':').next().unwrap().parse().unwrap();
    assert_eq!(s.admin_over_tls(&pki.ca).add_user_raw("alice"), LdapResultCode::Success);
    (s, port)
}

/// Runs an OpenLDAP tool trusting `ca`.
fn tool_with_ca(ca: &Path, name: &str, args: &[&str]) -> (i32, String, String) {
    ldap_utils();
    let out = std::process::Command::new(name)
        .args(args)
        .env("LDAPTLS_CACERT", ca)
        .env("LDAPTLS_REQCERT", "demand")
        .env("LDAPCONF", "/dev/null")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

const ALICE: &str = "uid=alice,ou=people,dc=example,dc=com";

#[test]
fn starttls_and_ldaps() {
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki(dir.path(), "one");
    let (s, tls_port) = tls_server(&pki, dir.path(), false);
    let url = s.url();
    let (code, out, err) =
        tool_with_ca(&pki.ca, "ldapwhoami", &["-ZZ", "-x", "-H", &url, "-D", ALICE, "-w", "pw-alice"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out.trim(), format!("dn:{ALICE}"));
    let ldaps = format!("ldaps://127.0.0.1:{tls_port}");
    let (code, out, err) =
        tool_with_ca(&pki.ca, "ldapsearch", &["-x", "-H", &ldaps, "-LLL", "-b", PEOPLE, "(uid=alice)", "uid"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&format!("dn: {ALICE}")) && out.contains("uid: alice"), "{out}");
    // A client that does not trust the CA gets no session.
    let other = make_pki(dir.path(), "other");
    let (code, _, err) = tool_with_ca(&other.ca, "ldapwhoami", &["-ZZ", "-x", "-H", &url]);
    assert_ne!(code, 0, "{err}");
    // StartTLS twice is refused; the session goes on.
    let mut c = s.raw_tls(&pki.ca);
    c.send(vec![LdapMsg::new(9, start_tls())]);
    let reply = c.recv().unwrap();
    assert!(matches!(&reply.op, LdapOp::ExtendedResponse(r) if r.res.code == LdapResultCode::OperationsError));
    assert_eq!(c.whoami(10), "");
}

#[test]
fn cleartext_binds_and_writes_refused_when_tls_is_required() {
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki(dir.path(), "one");
    let (s, _) = tls_server(&pki, dir.path(), true);
    let url = s.url();
    let (code, out, err) = tool_with_ca(&pki.ca, "ldapwhoami", &["-x", "-H", &url, "-D", ALICE, "-w", "pw-alice"]);
    assert_eq!(code, 13, "confidentialityRequired: {out}{err}");
    assert!(err.contains("Confidentiality required"), "{err}");
    let (code, out, err) =
        tool_with_ca(&pki.ca, "ldapwhoami", &["-ZZ", "-x", "-H", &url, "-D", ALICE, "-w", "pw-alice"]);
    assert_eq!(code, 0, "{out}{err}");
    // Anonymous reads stay open; an anonymous write is refused for TLS first.
    let mut plain = s.conn();
    assert_eq!(search_dns(&mut plain, PEOPLE, ldap3::Scope::Subtree, "(uid=alice)"), vec![ALICE.to_string()]);
    assert_eq!(plain.delete(ALICE).unwrap().rc, 13);
}

#[test]
fn sighup_reloads_the_certificate_without_dropping_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let one = make_pki(dir.path(), "one");
    let two = make_pki(dir.path(), "two");
    let (s, _) = tls_server(&one, dir.path(), false);
    let url = s.url();
    let mut session = s.raw_tls(&one.ca);
    bind_raw(&mut session, 2, ALICE, "pw-alice");
    // Replace the files, then SIGHUP.
    std::fs::copy(&two.cert, dir.path().join("live-cert.pem")).unwrap();
    std::fs::copy(&two.key, dir.path().join("live-key.pem")).unwrap();
    s.signal(libc::SIGHUP);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&s.stderr).unwrap().contains("SIGHUP: configuration reloaded") {
        assert!(Instant::now() < deadline, "no reload logged");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (code, _, err) = tool_with_ca(&two.ca, "ldapwhoami", &["-ZZ", "-x", "-H", &url]);
    assert_eq!(code, 0, "the new certificate: {err}");
    let (code, _, _) = tool_with_ca(&one.ca, "ldapwhoami", &["-ZZ", "-x", "-H", &url]);
    assert_ne!(code, 0, "the old CA no longer verifies");
    assert_eq!(session.whoami(3), format!("dn:{ALICE}"), "the established session goes on");
    // A broken pair is refused and the current certificate kept.
    std::fs::write(dir.path().join("live-key.pem"), "not a key").unwrap();
    s.signal(libc::SIGHUP);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&s.stderr).unwrap().contains("SIGHUP: reload refused") {
        assert!(Instant::now() < deadline, "no refusal logged");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (code, _, err) = tool_with_ca(&two.ca, "ldapwhoami", &["-ZZ", "-x", "-H", &url]);
    assert_eq!(code, 0, "{err}");
}

fn start_tls() -> LdapOp {
    LdapOp::ExtendedRequest(LdapExtendedRequest { name: "1.3.6.1.4.1.1466.20037".into(), value: None })
}

/// The answer to a StartTLS (message `id`, then `id + 1`, … while the
/// server still counts an answered request as outstanding: slapd may, for
/// a moment after its answer).
fn starttls_answer(plain: &mut Raw, id: i32) -> LdapResultCode {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    for id in id.. {
        plain.send(vec![LdapMsg::new(id, start_tls())]);
        match plain.recv().map(|m| m.op) {
            Some(LdapOp::ExtendedResponse(r))
                if r.res.message.contains("outstanding") && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(10))
            }
            Some(LdapOp::ExtendedResponse(r)) => return r.res.code,
            other => panic!("{other:?}"),
        }
    }
    unreachable!("message IDs ran out")
}

/// `plain` after a StartTLS (from message `id`), trusting `ca`.
fn starttls_over(mut plain: Raw, id: i32, ca: &Path) -> Raw {
    assert_eq!(starttls_answer(&mut plain, id), LdapResultCode::Success);
    let Raw { sock, .. } = plain;
    let mut roots = rustls::RootCertStore::empty();
    use rustls::pki_types::pem::PemObject;
    for c in rustls::pki_types::CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    Raw::over(rustls::StreamOwned::new(conn, sock))
}

fn bind_raw(c: &mut Raw, id: i32, dn: &str, pw: &str) {
    c.send(vec![LdapMsg::new(id, bind(dn, pw))]);
    let reply = c.recv().unwrap();
    assert!(matches!(&reply.op, LdapOp::BindResponse(r) if r.res.code == LdapResultCode::Success), "{reply:?}");
}

impl Raw {
    fn whoami(&mut self, id: i32) -> String {
        self.send(vec![LdapMsg::new(id, whoami())]);
        match self.recv().map(|m| m.op) {
            Some(LdapOp::ExtendedResponse(r)) => String::from_utf8(r.value.unwrap_or_default()).unwrap(),
            other => panic!("{other:?}"),
        }
    }

    fn add_user_raw(&mut self, uid: &str) -> LdapResultCode {
        let attr = |n: &str, v: &str| LdapPartialAttribute { atype: n.into(), vals: vec![v.as_bytes().to_vec()] };
        self.send(vec![LdapMsg::new(
            50,
            LdapOp::AddRequest(LdapAddRequest {
                dn: format!("uid={uid},{PEOPLE}"),
                attributes: vec![
                    attr("objectClass", "inetOrgPerson"),
                    attr("uid", uid),
                    attr("cn", uid),
                    attr("sn", "User"),
                    attr("userPassword", &format!("pw-{uid}")),
                ],
            }),
        )]);
        match self.recv().map(|m| m.op) {
            Some(LdapOp::AddResponse(r)) => r.code,
            other => panic!("{other:?}"),
        }
    }
}

impl Server {
    /// A raw client after StartTLS, trusting `ca`.
    fn raw_tls(&self, ca: &Path) -> Raw {
        starttls_over(Raw::connect(self), 1, ca)
    }

    /// The root DN over StartTLS.
    fn admin_over_tls(&self, ca: &Path) -> Raw {
        let mut c = self.raw_tls(ca);
        bind_raw(&mut c, 2, ROOT_DN, ROOT_PW);
        c
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.pid() as i32, sig) };
    }
}

#[test]
fn the_local_socket_counts_as_protected() {
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki(dir.path(), "one");
    let ldapi = dir.path().join("ldapi");
    let config = format!(
        "[server]\nldapi = {:?}\n[tls]\ncertificate_file = {:?}\nkey_file = {:?}\nrequired = true\n",
        ldapi.display().to_string(),
        pki.cert.display().to_string(),
        pki.key.display().to_string()
    );
    let s = Server::start_with_config(2, &config);
    assert!(s.banner.contains("coredir: ldapi on"), "{}", s.banner);
    assert_eq!(s.admin_over_tls(&pki.ca).add_user_raw("alice"), LdapResultCode::Success);
    let url = format!("ldapi://{}", ldapi.display().to_string().replace('/', "%2F"));
    // A simple bind over the local socket is allowed with tls.required, as over TLS.
    let (code, out, err) = tool_with_ca(&pki.ca, "ldapwhoami", &["-x", "-H", &url, "-D", ALICE, "-w", "pw-alice"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out.trim(), format!("dn:{ALICE}"));
    let (code, out, err) =
        tool_with_ca(&pki.ca, "ldapsearch", &["-x", "-H", &url, "-LLL", "-b", PEOPLE, "(uid=alice)", "uid"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("uid: alice"), "{out}");
    // StartTLS makes no sense there.
    let (code, _, err) = tool_with_ca(&pki.ca, "ldapwhoami", &["-ZZ", "-x", "-H", &url]);
    assert_ne!(code, 0, "{err}");
}

/// A client that asks for StartTLS and resets the connection before the
/// answer is written: the writer fails with the handoff pending, and must
/// end there (review of stop 30: it drained a queue whose sender the
/// connection still held, and both waited on each other for good, keeping
/// the connection and its admission). Whether the answer's write fails
/// depends on when the reset arrives, so it is tried many times.
#[test]
fn a_start_tls_reset_before_its_answer_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki(dir.path(), "reset");
    let (s, _) = tls_server(&pki, dir.path(), false);
    for _ in 0..200 {
        let sock = std::net::TcpStream::connect(("127.0.0.1", s.port)).unwrap();
        let sock2 = socket2::Socket::from(sock);
        sock2.set_linger(Some(Duration::ZERO)).unwrap();
        let mut sock: std::net::TcpStream = sock2.into();
        std::io::Write::write_all(&mut sock, &encode_msgs(vec![LdapMsg::new(1, start_tls())])).unwrap();
        drop(sock);
    }
    wait_for("every reset connection to be gone", || ctl_json(&s, &["status"])["connections"] == 0);
}

/// slapd on 127.0.0.1 with StartTLS: `tls` (its TLS directives) and an
/// empty database. Killed on drop.
struct TcpSlapd {
    dir: tempfile::TempDir,
    port: u16,
    child: std::process::Child,
}

impl TcpSlapd {
    fn start(tls: &str) -> TcpSlapd {
        slapd_installed();
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("db")).unwrap();
        let includes = slapd_schema_includes(dir.path());
        let conf = format!(
            "{includes}pidfile {d}/slapd.pid\nmodulepath /usr/lib/ldap\nmoduleload back_mdb\n{tls}\
             database mdb\nsuffix \"{SUFFIX}\"\nrootdn \"{ROOT_DN}\"\nrootpw {ROOT_PW}\ndirectory {d}/db\n",
            d = dir.path().display(),
        );
        std::fs::write(dir.path().join("slapd.conf"), conf).unwrap();
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("slapd.log")).unwrap();
        let child = std::process::Command::new("slapd")
            .arg("-f")
            .arg(dir.path().join("slapd.conf"))
            .args(["-h", &format!("ldap://127.0.0.1:{port}/"), "-d", "stats"])
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .expect("slapd");
        wait_for("slapd to listen", || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
        TcpSlapd { dir, port, child }
    }

    fn url(&self) -> String {
        format!("ldap://127.0.0.1:{}", self.port)
    }
}

impl Drop for TcpSlapd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = &self.dir;
    }
}

/// `ldapwhoami -ZZ` with SASL EXTERNAL, presenting the client certificate
/// `cert` (its key `pki.client_key`) or none: its exit code and what it printed.
fn whoami_external(pki: &Pki, url: &str, cert: Option<&Path>) -> (i32, String) {
    ldap_utils();
    let mut cmd = std::process::Command::new("ldapwhoami");
    cmd.args(["-ZZ", "-Y", "EXTERNAL", "-H", url])
        .env("LDAPTLS_CACERT", &pki.ca)
        .env("LDAPTLS_REQCERT", "demand")
        .env("LDAPCONF", "/dev/null");
    if let Some(cert) = cert {
        cmd.env("LDAPTLS_CERT", cert).env("LDAPTLS_KEY", &pki.client_key);
    }
    let out = cmd.output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into())
}

/// SASL EXTERNAL over TLS authenticates the client certificate's subject,
/// as slapd does with TLSVerifyClient: `try` takes a client without a
/// certificate (EXTERNAL then has nothing to offer), `demand` ends its
/// handshake. A BMPString subject with a comma is named as slapd names
/// it, `authz-regexp` maps the normalized form, and an empty subject is
/// no one. The same from both, side by side.
#[test]
fn sasl_external_over_tls_is_the_client_certificates_subject() {
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki(dir.path(), "ext");
    let (odd, empty) = (dir.path().join("ext-odd-cert.pem"), dir.path().join("ext-empty-cert.pem"));
    let path = |p: &Path| p.display().to_string();
    // Only the odd certificate's subject (`o=example,cn=…` in rcgen's
    // order) matches.
    let (pattern, replacement) = ("^o=example,cn=(.+)$", "uid=$1,ou=people,dc=example,dc=com");
    for mode in ["try", "demand"] {
        let config = format!(
            "[server]\nauthz_regexp = [[{pattern:?}, {replacement:?}]]\n\
             [tls]\ncertificate_file = {:?}\nkey_file = {:?}\nca_certificate_file = {:?}\nverify_client = \"{mode}\"\n",
            path(&pki.cert),
            path(&pki.key),
            path(&pki.ca)
        );
        let coredir = Server::start_with_config(1, &config);
        let slapd = TcpSlapd::start(&format!(
            "TLSCACertificateFile {}\nTLSCertificateFile {}\nTLSCertificateKeyFile {}\nTLSVerifyClient {mode}\n\
             authz-regexp \"{pattern}\" \"{replacement}\"\n",
            path(&pki.ca),
            path(&pki.cert),
            path(&pki.key)
        ));
        // Without a certificate only the outcome is compared: which
        // client-side error libldap reports depends on when it reads the
        // server's alert (TLS 1.3 ends the client's handshake first).
        let answers = |url: &str| {
            let refused = |cert| whoami_external(&pki, url, cert).0 != 0;
            let named = |cert| whoami_external(&pki, url, Some(cert));
            (named(&pki.client_cert), named(&odd), refused(None), refused(Some(&empty)))
        };
        let (ours, theirs) = (answers(&coredir.url()), answers(&slapd.url()));
        assert_eq!(ours, theirs, "{mode}: coredir, then slapd");
        // In the certificate's order (rcgen's), normalized.
        assert_eq!(ours.0, (0, "dn:ou=people,o=example,cn=client one\n".to_string()), "{mode}");
        assert_eq!(ours.1, (0, "dn:uid=zoë\\2C two,ou=people,dc=example,dc=com\n".to_string()), "{mode}");
        assert!(ours.2, "{mode}: EXTERNAL without a certificate");
        assert!(ours.3, "{mode}: EXTERNAL with an empty subject");
    }
}

/// The StartTLS response as slapd sends it: success, and no responseName
/// (RFC 4511 §4.14.2 allows it either way; some clients match on slapd's).
#[test]
fn the_starttls_response_is_slapds() {
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki(dir.path(), "starttls");
    let path = |p: &Path| p.display().to_string();
    let config = format!("[tls]\ncertificate_file = {:?}\nkey_file = {:?}\n", path(&pki.cert), path(&pki.key));
    let coredir = Server::start_with_config(1, &config);
    let slapd =
        TcpSlapd::start(&format!("TLSCertificateFile {}\nTLSCertificateKeyFile {}\n", path(&pki.cert), path(&pki.key)));
    let answer = |port: u16, value: Option<Vec<u8>>| {
        let sock = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut raw = Raw::over(sock);
        let req = LdapExtendedRequest { name: "1.3.6.1.4.1.1466.20037".into(), value };
        raw.send(vec![LdapMsg { msgid: 1, op: LdapOp::ExtendedRequest(req), ctrl: vec![] }]);
        match raw.recv().map(|m| m.op) {
            Some(LdapOp::ExtendedResponse(r)) => (r.res.code, r.name, r.value),
            other => panic!("{other:?}"),
        }
    };
    let ours = answer(coredir.port, None);
    assert_eq!(ours, answer(slapd.port, None));
    assert_eq!(ours.0, LdapResultCode::Success);
    // RFC 4511 §4.14.1: the request has no value. With one (empty or not),
    // slapd answers protocolError ("no request data expected") and stays
    // in the clear.
    for value in [vec![], b"x".to_vec()] {
        let ours = answer(coredir.port, Some(value.clone()));
        assert_eq!(ours, answer(slapd.port, Some(value)));
        assert_eq!(ours.0, LdapResultCode::ProtocolError);
    }
}

/// A Bind made in the clear does not carry over into TLS: after StartTLS
/// the connection is anonymous until the client binds again, as in slapd
/// (clients that bind first and then start TLS, such as ldap3 for Python
/// used that way, see the same on both).
#[test]
fn starttls_after_a_bind_leaves_the_connection_anonymous_as_in_slapd() {
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki(dir.path(), "rebind");
    let path = |p: &Path| p.display().to_string();
    let config = format!("[tls]\ncertificate_file = {:?}\nkey_file = {:?}\n", path(&pki.cert), path(&pki.key));
    let coredir = Server::start_with_config(1, &config);
    let slapd =
        TcpSlapd::start(&format!("TLSCertificateFile {}\nTLSCertificateKeyFile {}\n", path(&pki.cert), path(&pki.key)));
    let identities = |port: u16| {
        let sock = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut plain = Raw::over(sock);
        bind_raw(&mut plain, 1, ROOT_DN, ROOT_PW);
        let before = plain.whoami(2);
        let mut tls = starttls_over(plain, 3, &pki.ca);
        let after = tls.whoami(1003);
        bind_raw(&mut tls, 1004, ROOT_DN, ROOT_PW);
        (before, after, tls.whoami(1005))
    };
    let ours = identities(coredir.port);
    assert_eq!(ours, identities(slapd.port));
    assert_eq!(ours, (format!("dn:{ROOT_DN}"), String::new(), format!("dn:{ROOT_DN}")));
    // A StartTLS refused (no TLS on either server) leaves the bind as
    // slapd leaves it.
    let (coredir, slapd) = (Server::start(1), TcpSlapd::start(""));
    let refused = |port: u16| {
        let sock = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut plain = Raw::over(sock);
        bind_raw(&mut plain, 1, ROOT_DN, ROOT_PW);
        let code = starttls_answer(&mut plain, 2);
        (code, plain.whoami(1000))
    };
    assert_eq!(refused(coredir.port), refused(slapd.port));
}

/// A client certificate the CA revoked is refused once `tls.crl_file`
/// (slapd's TLSCRLFile) holds the CA's revocation list, as slapd refuses
/// it; one the list does not name still authenticates, and the CRL is
/// read again on SIGHUP. Side by side with slapd, `try` and `demand`.
#[test]
fn a_revoked_client_certificate_is_refused_as_slapd_refuses_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = |p: &Path| p.display().to_string();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(DnType::CommonName, "coredir test CA crl");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut leaf_params = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    leaf_params.distinguished_name.push(DnType::CommonName, "127.0.0.1");
    let leaf = leaf_params.signed_by(&key, &ca, &ca_key).unwrap();
    let client = |cn: &str, serial: u8| {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.serial_number = Some(rcgen::SerialNumber::from(vec![serial]));
        let file = dir.path().join(format!("{cn}.pem"));
        std::fs::write(&file, params.signed_by(&key, &ca, &ca_key).unwrap().pem()).unwrap();
        file
    };
    let (kept, revoked) = (client("kept", 7), client("revoked", 9));
    let crl = |serials: &[u8]| {
        let params = rcgen::CertificateRevocationListParams {
            this_update: rcgen::date_time_ymd(2024, 1, 1),
            next_update: rcgen::date_time_ymd(2099, 1, 1),
            crl_number: rcgen::SerialNumber::from(vec![1]),
            issuing_distribution_point: None,
            revoked_certs: serials
                .iter()
                .map(|s| rcgen::RevokedCertParams {
                    serial_number: rcgen::SerialNumber::from(vec![*s]),
                    revocation_time: rcgen::date_time_ymd(2025, 1, 1),
                    reason_code: Some(rcgen::RevocationReason::KeyCompromise),
                    invalidity_date: None,
                })
                .collect(),
            key_identifier_method: rcgen::KeyIdMethod::Sha256,
        };
        params.signed_by(&ca, &ca_key).unwrap().pem().unwrap()
    };
    let pki = Pki {
        ca: dir.path().join("ca.pem"),
        cert: dir.path().join("cert.pem"),
        key: dir.path().join("key.pem"),
        client_cert: kept.clone(),
        client_key: dir.path().join("key.pem"),
    };
    std::fs::write(&pki.ca, ca.pem()).unwrap();
    std::fs::write(&pki.cert, leaf.pem()).unwrap();
    std::fs::write(&pki.key, key.serialize_pem()).unwrap();
    let crl_file = dir.path().join("crl.pem");
    std::fs::write(&crl_file, crl(&[9])).unwrap();
    for mode in ["try", "demand"] {
        let config = format!(
            "[tls]\ncertificate_file = {:?}\nkey_file = {:?}\nca_certificate_file = {:?}\nverify_client = \"{mode}\"\n\
             crl_file = {:?}\n",
            path(&pki.cert),
            path(&pki.key),
            path(&pki.ca),
            path(&crl_file)
        );
        let coredir = Server::start_with_config(1, &config);
        let slapd = TcpSlapd::start(&format!(
            "TLSCACertificateFile {}\nTLSCertificateFile {}\nTLSCertificateKeyFile {}\nTLSVerifyClient {mode}\n\
             TLSCRLFile {}\n",
            path(&pki.ca),
            path(&pki.cert),
            path(&pki.key),
            path(&crl_file)
        ));
        let answers =
            |url: &str| (whoami_external(&pki, url, Some(&kept)), whoami_external(&pki, url, Some(&revoked)).0 != 0);
        let (ours, theirs) = (answers(&coredir.url()), answers(&slapd.url()));
        assert_eq!(ours, theirs, "{mode}: coredir, then slapd");
        assert_eq!(ours.0, (0, "dn:cn=kept\n".to_string()), "{mode}");
        assert!(ours.1, "{mode}: the revoked certificate was accepted");
        // A new list, read on SIGHUP: now the other one is revoked.
        std::fs::write(&crl_file, crl(&[7])).unwrap();
        // SAFETY: a signal to the server this test started.
        unsafe { libc::kill(coredir.pid() as i32, libc::SIGHUP) };
        wait_for("the new CRL", || whoami_external(&pki, &coredir.url(), Some(&kept)).0 != 0);
        assert_eq!(whoami_external(&pki, &coredir.url(), Some(&revoked)).0, 0, "{mode}: revoked no longer");
        // A file that does not read, or holds two lists of the CA: the
        // lists in force stay.
        for bad in ["not a list".to_string(), crl(&[9]) + &crl(&[7])] {
            let refused = std::fs::read_to_string(&coredir.stderr).unwrap().matches("reload refused").count();
            std::fs::write(&crl_file, bad).unwrap();
            // SAFETY: as above.
            unsafe { libc::kill(coredir.pid() as i32, libc::SIGHUP) };
            wait_for("the reload refused", || {
                std::fs::read_to_string(&coredir.stderr).unwrap().matches("reload refused").count() > refused
            });
            assert_ne!(whoami_external(&pki, &coredir.url(), Some(&kept)).0, 0, "{mode}: the old list dropped");
        }
        std::fs::write(&crl_file, crl(&[9])).unwrap();
    }
}
