//! Mirror mode: two real servers, each seeded from the other's backup,
//! both taking writes and streaming them to each other.

use crate::support::*;
use ldap3::{LdapConn, Mod, Scope, SearchEntry};
use std::collections::BTreeMap;

mod channel;
mod conflicts;
mod recovery;

fn mirror_conf(id: u32, listen: u16, peer: u16) -> String {
    format!(
        "[server]\nid = {id}\n[replication]\nlisten = \"127.0.0.1:{listen}\"\npeer = \"127.0.0.1:{peer}\"\n\
         secret = \"test-pair-secret\"\nverify_interval_s = 1\n"
    )
}

/// A pair whose changelogs keep records one second once the peer holds them.
fn short_changelog(conf: String) -> String {
    conf + "changelog_max_age_s = 1\ntrim_interval_s = 1\n"
}

/// Server A, and B restored from A's online backup: the same database.
pub(crate) fn pair(shards: usize) -> (Server, Server) {
    pair_with(shards, &[])
}

fn pair_with(shards: usize, b_env: &[(&str, &str)]) -> (Server, Server) {
    let (pa, pb) = (free_port(), free_port());
    let a = Server::start_with_config(shards, &mirror_conf(1, pa, pb));
    let b = seeded_from(&a, &mirror_conf(2, pb, pa), b_env);
    (a, b)
}

/// A server with this configuration, restored from `a`'s online backup.
fn seeded_from(a: &Server, conf: &str, env: &[(&str, &str)]) -> Server {
    let mut b = Server::prepare(a.shards, conf);
    let backup = b.dir.path().join("seed");
    let (code, out, err) = ctl(a, &["backup", backup.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    restore_into(&b, &backup);
    b.env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    b.launch();
    b
}

/// `coredir restore` of a backup into a stopped server's data directory.
pub(crate) fn restore_into(s: &Server, backup: &std::path::Path) {
    let restore = std::process::Command::new(env!("CARGO_BIN_EXE_coredir"))
        .args(["restore", "--config", s.config_path().to_str().unwrap(), "--data", s.data().to_str().unwrap()])
        .arg(backup)
        .output()
        .unwrap();
    assert!(restore.status.success(), "{}", String::from_utf8_lossy(&restore.stderr));
}

/// Every entry under the suffix with all its attributes, user and
/// operational, as one server shows them.
fn dump(s: &Server) -> BTreeMap<String, BTreeMap<String, Vec<String>>> {
    let mut c = s.admin();
    // Glue entries included (hidden without ManageDsaIT, as slapd's).
    let all = c.with_controls(manage_dsa_it()).search(SUFFIX, Scope::Subtree, "(objectClass=*)", vec!["*", "+"]);
    let (entries, _) = all.unwrap().success().unwrap();
    entries
        .into_iter()
        .map(|e| {
            let mut e = SearchEntry::construct(e);
            e.attrs.remove("numSubordinates");
            (e.dn, e.attrs.into_iter().collect())
        })
        .collect()
}

/// Both sides show the same, and no anti-entropy check found them apart
/// on the way (its repair would hide the bug that set them apart).
fn converged(a: &Server, b: &Server) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while dump(a) != dump(b) {
        if std::time::Instant::now() > deadline {
            let (da, db) = (dump(a), dump(b));
            let apart: Vec<String> = da
                .keys()
                .chain(db.keys())
                .filter(|dn| da.get(*dn) != db.get(*dn))
                .map(|dn| format!("{dn}:\n  A {:?}\n  B {:?}", da.get(dn), db.get(dn)))
                .collect();
            panic!("timed out waiting for identical data; apart:\n{}", apart.join("\n"));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    for s in [a, b] {
        let status = replication(s);
        assert_eq!(status["divergences"], 0, "{status}");
    }
}

/// A partition: `on_a` runs on A while B is down, then `on_b` on B while
/// A is down; both run again after.
fn apart(a: &mut Server, b: &mut Server, on_a: impl FnOnce(&Server), on_b: impl FnOnce(&Server)) {
    // First everything acknowledged both ways, so made durable: sled shows
    // a commit to readers before its flush, and a write seen on B but not
    // yet flushed was lost to the kill under load (seen once in CI).
    for s in [&*a, &*b] {
        wait_for("nothing left unacknowledged", || replication(s)["backlog"] == 0);
    }
    b.kill9();
    on_a(a);
    a.kill9();
    b.launch();
    on_b(b);
    a.launch();
}

fn attr(c: &mut LdapConn, dn: &str, name: &str) -> Option<Vec<String>> {
    get_entry(c, dn, vec![name]).map(|e| {
        let mut v = e.attrs.get(name).cloned().unwrap_or_default();
        v.sort();
        v
    })
}

fn group(c: &mut LdapConn, cn: &str) {
    let dn = format!("cn={cn},{SUFFIX}");
    let res =
        c.add(&dn, vec![("objectClass", ["groupOfNames"].into()), ("cn", [cn].into()), ("member", [ROOT_DN].into())]);
    assert_eq!(res.unwrap().rc, 0);
}

pub(crate) fn replication(s: &Server) -> serde_json::Value {
    ctl_json(s, &["replication"])
}

/// How many entries hold this `entryUUID`, as a server shows them.
fn copies(c: &mut LdapConn, uuid: &str) -> usize {
    search_dns(c, SUFFIX, Scope::Subtree, &format!("(entryUUID={uuid})")).len()
}

fn uuid_of(c: &mut LdapConn, dn: &str) -> String {
    attr(c, dn, "entryUUID").unwrap_or_else(|| panic!("{dn} missing"))[0].clone()
}

fn status_during_a_partition((a, mut b): (Server, Server)) {
    assert_eq!(add_user(&mut a.admin(), "seen").rc, 0);
    wait_for("streaming", || replication(&a)["outbound"] == "streaming" && replication(&a)["backlog"] == 0);
    b.stop();
    for i in 0..15 {
        assert_eq!(add_user(&mut a.admin(), &format!("apart{i}")).rc, 0);
    }
    wait_for("the backlog while apart", || replication(&a)["backlog"].as_u64() == Some(15));
    let lag = |s: &Server| replication(s)["lag_s"].as_f64().unwrap_or(0.0);
    let first = lag(&a);
    assert!(first > 0.0, "{}", replication(&a));
    wait_for("the lag to grow", || lag(&a) > first + 1.0);
    assert_ne!(replication(&a)["outbound_error"], "", "the outage is said");
    b.launch();
    wait_for("healed", || {
        let s = replication(&a);
        s["outbound"] == "streaming" && s["backlog"] == 0 && s["outbound_error"] == "" && s["inbound_error"] == ""
    });
    assert_eq!(lag(&a), 0.0);
}

fn person(c: &mut LdapConn, uid: &str, description: &str) {
    let dn = format!("uid={uid},{PEOPLE}");
    let attrs = vec![
        ("objectClass", ["inetOrgPerson"].into()),
        ("uid", [uid].into()),
        ("cn", [uid].into()),
        ("sn", ["Twin"].into()),
        ("description", [description].into()),
    ];
    assert_eq!(c.add(&dn, attrs).unwrap().rc, 0);
}

/// The suffix entry's contextCSN values on `s`.
fn context_csn(s: &Server) -> Vec<String> {
    let entry = get_entry(&mut s.admin(), SUFFIX, vec!["contextCSN"]).unwrap();
    entry.attrs.get("contextCSN").cloned().unwrap_or_default()
}

/// A self-signed certificate and key for a server of a pair, written to
/// `dir`, and its SHA-256 fingerprint as `openssl x509 -fingerprint` prints it.
fn identity(dir: &std::path::Path, name: &str) -> (String, String) {
    use sha2::Digest;
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec![name.to_string()]).unwrap().self_signed(&key).unwrap();
    let (cert_file, key_file) = (dir.join(format!("{name}.pem")), dir.join(format!("{name}.key")));
    std::fs::write(&cert_file, cert.pem()).unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    let fingerprint: Vec<String> = sha2::Sha256::digest(cert.der()).iter().map(|b| format!("{b:02X}")).collect();
    let conf = format!("certificate_file = {:?}\nkey_file = {:?}\n", cert_file.display(), key_file.display());
    (conf, fingerprint.join(":"))
}

/// Adds `ou={ou}` under `base` holding `n` people, the first of whom
/// holds `n / 4` more.
fn branch(c: &mut LdapConn, base: &str, ou: &str, n: usize) -> String {
    let top = format!("ou={ou},{base}");
    let res = c.add(&top, vec![("objectClass", ["organizationalUnit"].into()), ("ou", [ou].into())]);
    assert_eq!(res.unwrap().rc, 0, "{top}");
    let person = |c: &mut LdapConn, dn: &str, cn: &str| {
        let res = c.add(dn, person_attrs(cn)).unwrap();
        assert_eq!(res.rc, 0, "{dn}: {res:?}");
    };
    for i in 0..n {
        person(c, &format!("cn={ou}{i},{top}"), &format!("{ou}{i}"));
    }
    for i in 0..n / 4 {
        person(c, &format!("cn={ou}0-{i},cn={ou}0,{top}"), &format!("{ou}0-{i}"));
    }
    top
}

/// DNs below `base` (itself included), as one server shows them; none
/// when `base` is missing.
fn tree(s: &Server, base: &str) -> Vec<String> {
    let res = s.admin().search(base, Scope::Subtree, "(objectClass=*)", vec!["1.1"]).unwrap();
    if res.1.rc == 32 {
        return Vec::new();
    }
    let mut dns: Vec<String> = res.success().unwrap().0.into_iter().map(|e| SearchEntry::construct(e).dn).collect();
    dns.sort();
    dns
}

/// Two conflict losers `uid=<uid>` made by adding the DN on both sides apart.
fn conflicts_of(a: &mut Server, b: &mut Server, uids: &[&str]) -> Vec<String> {
    let added = |s: &Server, on: &str| {
        for uid in uids {
            person(&mut s.admin(), uid, on);
        }
    };
    apart(a, b, |a| added(a, "added on a"), |b| added(b, "added on b"));
    wait_for("identical data", || dump(a) == dump(b));
    search_dns(&mut a.admin(), SUFFIX, Scope::Subtree, "(objectClass=coredirConflictEntry)")
}

/// A adds the `ou` entry `parent` and B gets it; then, apart, A deletes
/// it and B adds the person `child` below it; both run again after.
fn delete_apart_from_child_add(a: &mut Server, b: &mut Server, parent: &str, child: &str) {
    let name = parent.split(['=', ',']).nth(1).unwrap();
    let ou = vec![("objectClass", ["organizationalUnit"].into()), ("ou", [name].into())];
    assert_eq!(a.admin().add(parent, ou).unwrap().rc, 0);
    wait_for("the parent on B", || get_entry(&mut b.admin(), parent, vec!["ou"]).is_some());
    let cn = child.split(['=', ',']).nth(1).unwrap();
    apart(
        a,
        b,
        |a| assert_eq!(a.admin().delete(parent).unwrap().rc, 0),
        |b| assert_eq!(b.admin().add(child, person_attrs(cn)).unwrap().rc, 0),
    );
}

/// Rewrites, in a stopped server's store, the stored entry `dn` with
/// `edit`: what a tool or a disk does behind the server's back.
fn tamper(s: &Server, dn: &str, edit: impl FnOnce(&mut shards::entry::Entry)) {
    let dn = shards::dn::Dn::parse(dn).unwrap();
    shards::testing::Tamper::open(&s.data()).unwrap().rewrite(&dn, edit).unwrap();
}

/// How many entries a refresh sent.
fn entries_in(msgs: &[ldap3_proto::proto::LdapMsg]) -> usize {
    msgs.iter().filter(|m| matches!(m.op, ldap3_proto::proto::LdapOp::SearchResultEntry(_))).count()
}

/// A pair of 2 shards each, and a branch `ou=<ou>` (`branch` with 8)
/// made on A and seen on B: its DN and how many entries it holds.
fn pair_with_branch(ou: &str) -> (Server, Server, String, usize) {
    let (a, b) = pair(2);
    let top = branch(&mut a.admin(), SUFFIX, ou, 8);
    let count = tree(&a, &top).len();
    wait_for("the branch on B", || tree(&b, &top).len() == count);
    (a, b, top, count)
}

/// Deletes `dns`, deepest first (a parent after its children).
fn delete_leaves_first(c: &mut LdapConn, mut dns: Vec<String>) {
    dns.sort_by_key(|dn| std::cmp::Reverse(dn.matches(',').count()));
    for dn in dns {
        assert_eq!(c.delete(&dn).unwrap().rc, 0, "{dn}");
    }
}

/// The entries one server holds without their parent.
fn orphans(s: &Server) -> Vec<String> {
    let everything = tree(s, SUFFIX);
    let lower: std::collections::HashSet<String> = everything.iter().map(|dn| dn.to_lowercase()).collect();
    everything
        .into_iter()
        .filter(|dn| !dn.eq_ignore_ascii_case(SUFFIX) && !lower.contains(&dn.split_once(',').unwrap().1.to_lowercase()))
        .collect()
}
