use crate::support::*;
use std::process::Command;

fn serve_fails(args: &[&str], config: Option<&str>) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_coredir"));
    // No --listen: it would override the file, and every case fails before binding.
    cmd.arg("serve").args(["--data"]).arg(dir.path().join("d")).args(args);
    if let Some(text) = config {
        let path = dir.path().join("coredir.toml");
        std::fs::write(&path, text).unwrap();
        cmd.arg("--config").arg(&path);
    }
    let out = cmd.output().unwrap();
    assert!(!out.status.success(), "expected a refusal for {args:?} {config:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn bad_configuration_is_refused_naming_the_key() {
    for (config, key) in [
        ("[server]\nlisten = \"nowhere\"\n", "server.listen"),
        ("[storage]\nsync = \"sometimes\"\n", "storage.sync"),
        ("[storage]\nengine = \"rocksdb\"\n", "storage.engine"),
        ("[directory]\nsuffix = \"not a dn\"\n", "directory.suffix"),
        ("[limits]\nmax_pdu_bytes = 10\n", "limits.max_pdu_bytes"),
        ("[server]\nlisten_address = \"x\"\n", "listen_address"),
        ("[strage]\nsync = \"always\"\n", "strage"),
        ("[server]\nshards = \"two\"\n", "shards"),
        // A revocation list with no client certificates to check.
        ("[tls]\ncertificate_file = \"/c\"\nkey_file = \"/k\"\ncrl_file = \"/l\"\n", "tls.crl_file"),
    ] {
        let err = serve_fails(&[], Some(config));
        assert!(err.contains(key), "{config:?}: message does not name {key}: {err}");
    }
    assert!(serve_fails(&["--shards", "0"], None).contains("--shards"));
}

#[test]
fn config_file_and_flags() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("coredir.toml");
    std::fs::write(
        &config,
        "[server]\nlisten = \"127.0.0.1:1\"\n\n[directory]\nsuffix = \"o=acme\"\nroot_dn = \"cn=boss,o=acme\"\n\n[storage]\nsync = \"never\"\n",
    )
    .unwrap();
    // --listen and --data override the file.
    let stderr = dir.path().join("err");
    let (mut child, port) = spawn(&dir.path().join("data"), 1, &stderr, &["--config", config.to_str().unwrap()])
        .unwrap_or_else(|e| panic!("{e}"));
    let mut c = ldap3::LdapConn::new(&format!("ldap://127.0.0.1:{port}")).unwrap();
    assert_eq!(c.simple_bind("cn=boss,o=acme", ROOT_PW).unwrap().rc, 0);
    assert!(get_entry(&mut c, "o=acme", vec![]).is_some());
    assert!(get_entry(&mut c, "ou=people,o=acme", vec![]).is_some());
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn restart_with_another_shard_count_is_refused() {
    let mut s = Server::start(2);
    s.kill9();
    let err = spawn(&s.data(), 1, &s.stderr, &[]).err().expect("must refuse");
    assert!(err.contains("created with 2 shards") && err.contains("--shards 2"), "{err}");
}

#[test]
fn generated_root_password_is_printed_once() {
    let dir = tempfile::tempdir().unwrap();
    let run = || {
        let mut child = Command::new(env!("CARGO_BIN_EXE_coredir"))
            .args(["serve", "--listen", "127.0.0.1:0", "--shards", "1", "--data"])
            .arg(dir.path())
            .env_remove("COREDIR_ROOT_PASSWORD")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
        let mut printed = Vec::new();
        for line in lines.by_ref() {
            let line = line.unwrap();
            if line.starts_with("coredir: listening on ") {
                printed.push(line);
                break;
            }
            printed.push(line);
        }
        (child, printed)
    };
    let (mut child, first) = run();
    let pw_line = first.iter().find(|l| l.contains("generated password")).expect("password printed");
    let password = pw_line.rsplit(' ').next().unwrap().to_string();
    let port: u16 =
        first.last().unwrap().split_whitespace().nth(3).unwrap().rsplit(':').next().unwrap().parse().unwrap();
    let mut c = ldap3::LdapConn::new(&format!("ldap://127.0.0.1:{port}")).unwrap();
    assert_eq!(c.simple_bind(ROOT_DN, &password).unwrap().rc, 0);
    let _ = child.kill();
    let _ = child.wait();
    let manifest = std::fs::read_to_string(dir.path().join("manifest.toml")).unwrap();
    assert!(!manifest.contains(&password) && manifest.contains("{SSHA}"), "stored only as a hash");
    let (mut child, second) = run();
    assert!(!second.iter().any(|l| l.contains("generated password")), "printed once: {second:?}");
    let _ = child.kill();
    let _ = child.wait();
}
