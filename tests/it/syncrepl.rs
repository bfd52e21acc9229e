//! RFC 4533 interop: a stock OpenLDAP slapd (Debian's, installed when
//! missing) replicates from coredir with its `syncrepl` directive, in
//! refreshAndPersist and refreshOnly mode, loading `coredir schema export`.

use crate::support::*;
use ldap3::{LdapConn, Mod};
use ldap3_proto::proto::LdapMsg;
use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};

/// A slapd consuming from a coredir server; stopped (by its pid) on drop.
struct Consumer {
    dir: tempfile::TempDir,
    port: u16,
    child: Option<Child>,
}

impl Consumer {
    /// `kind`: `refreshAndPersist`, or `refreshOnly` polling every second.
    fn new(provider: &Server, kind: &str) -> Consumer {
        Consumer::of(provider, kind, SUFFIX)
    }

    /// A consumer of the naming context `suffix` only (slapd's root DN
    /// must lie within it to have a password: `cn=admin,` and the suffix).
    fn of(provider: &Server, kind: &str, suffix: &str) -> Consumer {
        Consumer::with(provider, kind, (suffix, suffix))
    }

    /// A consumer of the subtree at `base` only, into a database of the
    /// whole suffix (slapd glues the entries above it).
    fn of_base(provider: &Server, kind: &str, base: &str) -> Consumer {
        Consumer::with(provider, kind, (SUFFIX, base))
    }

    fn with(provider: &Server, kind: &str, (suffix, base): (&str, &str)) -> Consumer {
        Consumer::bound(provider, kind, (suffix, base), (ROOT_DN, ROOT_PW))
    }

    /// A consumer that binds to coredir as `bind_dn` with `password`.
    fn bound(
        provider: &Server,
        kind: &str,
        (suffix, base): (&str, &str),
        (bind_dn, password): (&str, &str),
    ) -> Consumer {
        let root_dn = if suffix == SUFFIX { ROOT_DN.to_string() } else { format!("cn=admin,{suffix}") };
        slapd_installed();
        let dir = tempfile::tempdir().unwrap();
        let includes = slapd_schema_includes(dir.path());
        std::fs::create_dir(dir.path().join("db")).unwrap();
        let interval = if kind == "refreshOnly" { " interval=00:00:00:01" } else { "" };
        let conf = format!(
            "{includes}pidfile {dir}/slapd.pid\nmodulepath /usr/lib/ldap\nmoduleload back_mdb\n\
             database mdb\nsuffix \"{suffix}\"\nrootdn \"{root_dn}\"\nrootpw {ROOT_PW}\ndirectory {dir}/db\n\
             index entryUUID eq\nindex entryCSN eq\n\
             syncrepl rid=001 provider={url} type={kind}{interval} searchbase=\"{base}\" scope=sub \
             attrs=\"*,+\" bindmethod=simple binddn=\"{bind_dn}\" credentials={password} retry=\"1 +\"\n",
            dir = dir.path().display(),
            url = provider.url(),
        );
        std::fs::write(dir.path().join("slapd.conf"), conf).unwrap();
        let mut c = Consumer { dir, port: free_port(), child: None };
        c.start();
        c
    }

    /// Starts slapd on its database (and so with the cookie it stored).
    fn start(&mut self) {
        let log = std::fs::File::create(self.dir.path().join("slapd.log")).unwrap();
        let child = Command::new("slapd")
            .arg("-f")
            .arg(self.dir.path().join("slapd.conf"))
            .args(["-h", &format!("ldap://127.0.0.1:{}/", self.port), "-d", "sync"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("slapd");
        self.child = Some(child);
        wait_for("slapd to listen", || std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok());
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn url(&self) -> String {
        format!("ldap://127.0.0.1:{}", self.port)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("slapd.log")).unwrap_or_default()
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Every entry under the suffix, as `ldapsearch` prints it (user
/// attributes, entryUUID and entryCSN), one record per entry, sorted.
fn content(url: &str) -> BTreeSet<String> {
    content_of(url, SUFFIX)
}

/// `content` of the subtree at `base`; outside the first suffix read
/// anonymously (its root DN differs on the two sides; what the tests
/// write there holds no password).
fn content_of(url: &str, base: &str) -> BTreeSet<String> {
    let bind: &[&str] = if base == SUFFIX { &["-D", ROOT_DN, "-w", ROOT_PW] } else { &[] };
    let (code, out, err) = tool(
        "ldapsearch",
        &[
            &["-x", "-H", url],
            bind,
            &["-LLL", "-o", "ldif-wrap=no", "-b", base, "(objectClass=*)", "*", "entryUUID", "entryCSN"],
        ]
        .concat(),
        None,
    );
    assert!(code == 0 || code == 32, "ldapsearch on {url}: {err}");
    // One record per entry, its lines sorted: slapd's modify-DN puts the
    // new RDN value last, coredir keeps the attribute's place.
    let record = |r: &str| {
        let mut lines: Vec<&str> = r.lines().collect();
        lines[1..].sort_unstable();
        lines.join("\n")
    };
    out.split("\n\n").map(str::trim).filter(|r| !r.is_empty()).map(record).collect()
}

fn same_content(provider: &Server, consumer: &Consumer) {
    same_content_of(provider, consumer, SUFFIX)
}

fn same_content_of(provider: &Server, consumer: &Consumer, base: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let last = (content_of(&provider.url(), base), content_of(&consumer.url(), base));
        if last.0 == last.1 {
            return;
        }
        if std::time::Instant::now() > deadline {
            let _ = std::fs::write(std::env::temp_dir().join("coredir-syncrepl-consumer.log"), consumer.log());
            let only_provider: Vec<_> = last.0.difference(&last.1).take(3).collect();
            let only_consumer: Vec<_> = last.1.difference(&last.0).take(3).collect();
            panic!(
                "slapd never caught up: {} entries on coredir, {} on slapd\nonly on coredir: {only_provider:#?}\n\
                 only on slapd: {only_consumer:#?}\nslapd log tail:\n{}",
                last.0.len(),
                last.1.len(),
                consumer.log().lines().rev().take(30).collect::<Vec<_>>().join("\n")
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// A scripted mix of `n` changes: adds, modifies, renames (within a parent
/// and to another), deletes and group member additions.
fn mixed_changes(c: &mut LdapConn, tag: &str, n: usize) {
    let group = format!("cn=team-{tag},ou=groups,{SUFFIX}");
    let res = c.add(
        &group,
        vec![
            ("objectClass", ["groupOfNames"].into()),
            ("cn", [format!("team-{tag}").as_str()].into()),
            ("member", [ROOT_DN].into()),
        ],
    );
    assert_eq!(res.unwrap().rc, 0);
    let mut live: Vec<String> = Vec::new();
    let mut members = BTreeSet::new();
    let user = |uid: &str| format!("uid={uid},{PEOPLE}");
    for i in 0..n {
        let pick = |live: &Vec<String>| live[(i * 7) % live.len()].clone();
        match i % 10 {
            0..=3 => {
                let uid = format!("{tag}{i}");
                assert_eq!(add_user(c, &uid).rc, 0);
                live.push(uid);
            }
            4 | 5 if !live.is_empty() => {
                let uid = pick(&live);
                let text = format!("change {i}");
                let change = vec![Mod::Replace("description", [text.as_str()].into())];
                assert_eq!(c.modify(&user(&uid), change).unwrap().rc, 0);
            }
            6 if !live.is_empty() => {
                let uid = pick(&live);
                let new = format!("{uid}r");
                assert_eq!(c.modifydn(&user(&uid), &format!("uid={new}"), true, None).unwrap().rc, 0);
                live.retain(|u| *u != uid);
                live.push(new);
            }
            7 if !live.is_empty() => {
                let uid = pick(&live);
                assert_eq!(c.delete(&user(&uid)).unwrap().rc, 0);
                live.retain(|u| *u != uid);
            }
            8 if !live.is_empty() => {
                let member = user(&pick(&live));
                if members.insert(member.clone()) {
                    assert_eq!(c.modify(&group, vec![Mod::Add("member", [member.as_str()].into())]).unwrap().rc, 0);
                }
            }
            _ => {
                // A move to another parent and back out of it.
                let uid = format!("{tag}{i}m");
                assert_eq!(add_user(c, &uid).rc, 0);
                let res = c.modifydn(&user(&uid), &format!("uid={uid}"), true, Some(&format!("ou=groups,{SUFFIX}")));
                assert_eq!(res.unwrap().rc, 0);
            }
        }
    }
}

fn provider(shards: usize) -> Server {
    Server::start_with_config(shards, "[syncrepl]\nprovider = true\n")
}

#[test]
fn slapd_replicates_from_coredir_in_refresh_and_persist() {
    ldap_utils();
    let s = provider(2);
    let mut c = s.admin();
    // Content before the consumer first connects.
    mixed_changes(&mut c, "before", 100);
    let mut consumer = Consumer::new(&s, "refreshAndPersist");
    same_content(&s, &consumer);
    // Changes while it listens: 1,000 of them.
    mixed_changes(&mut c, "live", 1000);
    same_content(&s, &consumer);
    // contextCSN on the suffix: the newest change, which slapd learns too.
    let context = |url: &str| {
        let (_, out, _) =
            tool("ldapsearch", &["-x", "-H", url, "-LLL", "-s", "base", "-b", SUFFIX, "contextCSN"], None);
        out.lines().filter_map(|l| l.strip_prefix("contextCSN: ")).map(String::from).collect::<Vec<_>>()
    };
    let ours = context(&s.url());
    assert_eq!(ours.len(), 1, "{ours:?}");
    let newest = content(&s.url())
        .iter()
        .filter_map(|r| r.lines().find_map(|l| l.strip_prefix("entryCSN: ")))
        .map(String::from)
        .max();
    assert!(Some(&ours[0]) >= newest.as_ref(), "{ours:?} {newest:?}");
    wait_for("slapd's contextCSN", || context(&consumer.url()) == ours);
    // Stopped, changes made, restarted with its cookie: only what changed
    // comes in full; what was deleted meanwhile is deleted there too.
    consumer.stop();
    mixed_changes(&mut c, "apart", 100);
    consumer.start();
    same_content(&s, &consumer);
    assert!(consumer.log().contains("cookie=rid=001,sid=001,csn="), "no cookie in slapd's log");
    // The changelog covered its cookie: only the changes and the deleted
    // entries' UUIDs came (RFC 4533's delete phase).
    assert!(consumer.log().contains("REFRESH_DELETE"), "the restart did not use the delete phase");
}

#[test]
fn slapd_replicates_from_coredir_in_refresh_only() {
    ldap_utils();
    let s = provider(2);
    let mut c = s.admin();
    mixed_changes(&mut c, "before", 100);
    let consumer = Consumer::new(&s, "refreshOnly");
    same_content(&s, &consumer);
    mixed_changes(&mut c, "polled", 1000);
    same_content(&s, &consumer);
}

#[test]
fn slapd_replicates_one_of_two_naming_contexts() {
    ldap_utils();
    let second = "o=second";
    let s = Server::start_with_config(
        2,
        &format!("[directory]\nsuffixes = [{SUFFIX:?}, {second:?}]\n[syncrepl]\nprovider = true\n"),
    );
    let mut c = s.admin();
    for i in 0..30 {
        let cn = format!("before{i}");
        assert_eq!(c.add(&format!("cn={cn},{second}"), person_attrs(&cn)).unwrap().rc, 0);
    }
    mixed_changes(&mut c, "first", 50);
    let consumer = Consumer::of(&s, "refreshAndPersist", second);
    same_content_of(&s, &consumer, second);
    // Live changes in both contexts: those of the second arrive.
    mixed_changes(&mut c, "elsewhere", 50);
    for i in 0..30 {
        let dn = format!("cn=before{i},{second}");
        let rc = match i % 3 {
            0 => c.modify(&dn, vec![Mod::Replace("sn", ["changed"].into())]).unwrap().rc,
            1 => c.modifydn(&dn, &format!("cn=renamed{i}"), true, None).unwrap().rc,
            _ => c.delete(&dn).unwrap().rc,
        };
        assert_eq!(rc, 0, "{dn}");
    }
    same_content_of(&s, &consumer, second);
    assert_eq!(content_of(&s.url(), second).len(), 21, "the suffix and 20 entries");
    // Each naming context has its own contextCSN, as each slapd database
    // does: the consumer of one reaches its provider's, and changes in the
    // other context move neither (monitoring compares them per suffix).
    let context = |url: &str, base: &str| {
        let (_, out, _) = tool("ldapsearch", &["-x", "-H", url, "-LLL", "-s", "base", "-b", base, "contextCSN"], None);
        out.lines().filter_map(|l| l.strip_prefix("contextCSN: ")).map(String::from).collect::<Vec<_>>()
    };
    let ours = context(&s.url(), second);
    assert_eq!(ours.len(), 1, "{ours:?}");
    wait_for("slapd's contextCSN", || context(&consumer.url(), second) == ours);
    let first = context(&s.url(), SUFFIX);
    mixed_changes(&mut c, "first-only", 20);
    assert!(context(&s.url(), SUFFIX) > first, "the first context's contextCSN did not move");
    assert_eq!(context(&s.url(), second), ours, "a change in the first context moved the second's contextCSN");
    assert_eq!(context(&consumer.url(), second), ours);
}

/// Two entries that swap DNs through a third (a->t, b->a, t->b) reach a
/// live consumer rename by rename, as slapd's syncprov sends them: an
/// entry renamed again before the persist stage read its first rename
/// was sent only at its last DN, so the consumer was told to move the
/// other entry onto a DN the first still held there (68), and stayed
/// stuck on it.
#[test]
fn slapd_follows_entries_that_swap_dns() {
    ldap_utils();
    let s = provider(2);
    let mut c = s.admin();
    let consumer = Consumer::new(&s, "refreshAndPersist");
    same_content(&s, &consumer);
    let base = format!("ou=swap,{SUFFIX}");
    let ou = vec![("objectClass", ["organizationalUnit"].into()), ("ou", ["swap"].into())];
    assert_eq!(c.add(&base, ou).unwrap().rc, 0);
    for cn in ["a", "b"] {
        assert_eq!(c.add(&format!("cn={cn},{base}"), person_attrs(cn)).unwrap().rc, 0);
    }
    for _ in 0..150 {
        for (from, to) in [("a", "t"), ("b", "a"), ("t", "b")] {
            let rc = c.modifydn(&format!("cn={from},{base}"), &format!("cn={to}"), true, None).unwrap().rc;
            assert_eq!(rc, 0, "{from} -> {to}");
        }
    }
    same_content(&s, &consumer);
}

/// Issue 19: a refresh sent changed entries at their DNs now, in DN
/// order, so entries that swapped DNs while a consumer was away (or
/// between two polls of a refreshOnly one) met on it: whatever the
/// order, each must take a DN the other still holds there (68), and
/// slapd then modified the other entry with its content. The refresh of
/// a cookie the changelog covers now goes through the changes in their
/// order, as the provider went through them.
#[test]
fn a_consumer_back_from_away_follows_entries_that_swapped_dns() {
    ldap_utils();
    let s = provider(2);
    let mut c = s.admin();
    let base = format!("ou=swap,{SUFFIX}");
    let ou = vec![("objectClass", ["organizationalUnit"].into()), ("ou", ["swap"].into())];
    assert_eq!(c.add(&base, ou).unwrap().rc, 0);
    for cn in ["a", "b", "c"] {
        assert_eq!(c.add(&format!("cn={cn},{base}"), person_attrs(cn)).unwrap().rc, 0);
    }
    let mut rename = |from: &str, to: &str| {
        let rc = c.modifydn(&format!("cn={from},{base}"), &format!("cn={to}"), true, None).unwrap().rc;
        assert_eq!(rc, 0, "{from} -> {to}");
    };
    for kind in ["refreshOnly", "refreshAndPersist"] {
        let mut consumer = Consumer::new(&s, kind);
        same_content(&s, &consumer);
        consumer.stop();
        // a and b swap through t; then a, b and c rotate.
        for (from, to) in [("a", "t"), ("b", "a"), ("t", "b"), ("a", "t"), ("b", "a"), ("c", "b"), ("t", "c")] {
            rename(from, to);
        }
        consumer.start();
        same_content(&s, &consumer);
        consumer.stop();
    }
}

/// Subtree renames reach slapd whole: live in persist, and in the refresh
/// of a consumer that was away (its cookie older than every move).
#[test]
fn slapd_follows_subtree_renames() {
    ldap_utils();
    let s = provider(2);
    let mut c = s.admin();
    let ou = |c: &mut LdapConn, dn: &str, name: &str| {
        let res = c.add(dn, vec![("objectClass", ["organizationalUnit"].into()), ("ou", [name].into())]);
        assert_eq!(res.unwrap().rc, 0, "{dn}");
    };
    for branch in ["b1", "b2"] {
        let top = format!("ou={branch},{SUFFIX}");
        ou(&mut c, &top, branch);
        for i in 0..20 {
            let cn = format!("{branch}-{i}");
            assert_eq!(c.add(&format!("cn={cn},{top}"), person_attrs(&cn)).unwrap().rc, 0);
        }
        ou(&mut c, &format!("ou=inner,{top}"), "inner");
        for i in 0..5 {
            let cn = format!("{branch}-inner{i}");
            assert_eq!(c.add(&format!("cn={cn},ou=inner,{top}"), person_attrs(&cn)).unwrap().rc, 0);
        }
    }
    let mut consumer = Consumer::new(&s, "refreshAndPersist");
    same_content(&s, &consumer);
    let rename = |c: &mut LdapConn, dn: &str, rdn: &str, superior: Option<&str>| {
        let res = c.modifydn(dn, rdn, true, superior).unwrap();
        assert_eq!(res.rc, 0, "{dn}: {res:?}");
    };
    rename(&mut c, &format!("ou=b1,{SUFFIX}"), "ou=b1r", None);
    rename(&mut c, &format!("ou=inner,ou=b1r,{SUFFIX}"), "ou=inner", Some(PEOPLE));
    same_content(&s, &consumer);
    // Within one poll: a subtree renamed and its top then modified (its
    // rename record must still go out before its children's), a leaf
    // renamed twice.
    rename(&mut c, &format!("ou=b1r,{SUFFIX}"), "ou=b1s", None);
    let b1s = format!("ou=b1s,{SUFFIX}");
    assert_eq!(c.modify(&b1s, vec![Mod::Replace("description", ["moved"].into())]).unwrap().rc, 0);
    rename(&mut c, &format!("cn=b1-3,{b1s}"), "cn=b1-3x", None);
    rename(&mut c, &format!("cn=b1-3x,{b1s}"), "cn=b1-3y", None);
    same_content(&s, &consumer);
    consumer.stop();
    rename(&mut c, &format!("ou=b2,{SUFFIX}"), "ou=b2r", Some(PEOPLE));
    rename(&mut c, &format!("ou=inner,ou=b2r,{PEOPLE}"), "ou=inner2", Some(SUFFIX));
    consumer.start();
    same_content(&s, &consumer);
    assert_eq!(content(&s.url()).iter().filter(|r| r.contains("ou=b2r,ou=people")).count(), 21);
}

#[test]
fn a_sync_request_without_a_changelog_is_refused_loudly() {
    ldap_utils();
    let s = Server::start(1);
    let (code, out, err) = tool(
        "ldapsearch",
        &["-x", "-H", &s.url(), "-D", ROOT_DN, "-w", ROOT_PW, "-o", "ldif-wrap=no", "-E", "!sync=ro", "-b", SUFFIX],
        None,
    );
    assert_eq!(code, 12, "{out}{err}");
    assert!(out.contains("set [syncrepl] provider = true"), "{out}");
}

/// A sync search of the whole suffix for every entry.
fn sync_search(msgid: i32, mode: ldap3_proto::proto::SyncRequestMode, cookie: Option<Vec<u8>>) -> LdapMsg {
    use ldap3_proto::proto::{LdapOp, LdapSearchRequest, LdapSearchScope};
    let mut msg = LdapMsg::new(
        msgid,
        LdapOp::SearchRequest(LdapSearchRequest {
            base: SUFFIX.into(),
            scope: LdapSearchScope::Subtree,
            aliases: ldap3_proto::proto::LdapDerefAliases::Never,
            sizelimit: 0,
            timelimit: 0,
            typesonly: false,
            filter: ldap3_proto::proto::LdapFilter::Present("objectClass".into()),
            attrs: vec![],
        }),
    );
    msg.ctrl =
        vec![ldap3_proto::control::LdapControl::SyncRequest { criticality: true, mode, cookie, reload_hint: false }];
    msg
}

/// A refreshOnly sync search from `cookie`: the messages before its
/// SearchResultDone, and the cookie its Sync Done control carries.
pub fn refresh_only(s: &Server, cookie: Option<Vec<u8>>) -> (Vec<LdapMsg>, Option<Vec<u8>>) {
    refresh_only_of(s, ldap3_proto::proto::LdapFilter::Present("objectClass".into()), cookie)
}

/// `refresh_only` with this filter.
fn refresh_only_of(
    s: &Server,
    filter: ldap3_proto::proto::LdapFilter,
    cookie: Option<Vec<u8>>,
) -> (Vec<LdapMsg>, Option<Vec<u8>>) {
    use ldap3_proto::control::LdapControl;
    let mut r = Raw::connect(s);
    let mut msg = sync_search(1, ldap3_proto::proto::SyncRequestMode::RefreshOnly, cookie);
    if let ldap3_proto::proto::LdapOp::SearchRequest(req) = &mut msg.op {
        req.filter = filter;
    }
    r.send(vec![msg]);
    let mut got = Vec::new();
    loop {
        let m = r.recv_lenient().expect("the refresh never ended");
        if let ldap3_proto::proto::LdapOp::SearchResultDone(_) = m.op {
            let cookie = m.ctrl.into_iter().find_map(|c| match c {
                LdapControl::SyncDone { cookie, .. } => cookie,
                _ => None,
            });
            return (got, cookie);
        }
        got.push(m);
    }
}

/// The entryUUID a refresh message names as deleted: a Sync Info
/// syncIdSet's, or an entry message's with the delete state (a replay
/// sends each delete in its place among the changes).
fn deleted_uuids(m: &LdapMsg) -> Vec<uuid::Uuid> {
    use ldap3_proto::control::LdapControl;
    use ldap3_proto::proto::{LdapIntermediateResponse::SyncInfoIdSet, LdapOp, SyncStateValue};
    match &m.op {
        LdapOp::IntermediateResponse(SyncInfoIdSet { syncuuids, .. }) => syncuuids.clone(),
        LdapOp::SearchResultEntry(_) => m
            .ctrl
            .iter()
            .filter_map(|c| match c {
                LdapControl::SyncState { state: SyncStateValue::Delete, entry_uuid, .. } => Some(*entry_uuid),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// A persistent sync search on a raw connection: the refresh is read up
/// to its Sync Info message, then the search stays open.
pub fn persistent_search(r: &mut Raw, msgid: i32) {
    use ldap3_proto::proto::{LdapOp, SyncRequestMode};
    let msg = sync_search(msgid, SyncRequestMode::RefreshAndPersist, None);
    r.send(vec![msg]);
    loop {
        let m = r.recv_lenient().expect("closed");
        match m.op {
            LdapOp::SearchResultEntry(_) => {}
            LdapOp::IntermediateResponse(_) => return,
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// A `newcookie` names no CSN of this server above a change it has not
/// sent yet: shard 1 pauses 300 ms between stamping and committing each
/// batch, so the other shard's later CSNs become visible first.
#[test]
fn no_new_cookie_claims_a_change_a_slower_shard_has_not_sent() {
    let s = Server::start_with_commit_delay(2, "[syncrepl]\nprovider = true\n", 1, 300);
    let mut r = Raw::connect(&s);
    persistent_search(&mut r, 1);
    slow_and_fast_adds(&s);
    no_cookie_claims_an_unsent_change(&mut r, &s, 52, "#001#");
}

/// Two writers add devices below ou=people on `s`, 12 `slowN` at once and
/// 40 `fastN` 20 ms later; returns once all 52 are added.
pub fn slow_and_fast_adds(s: &Server) {
    let writer = |tag: &'static str, n: usize, pause_ms: u64| {
        let mut c = s.admin();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(pause_ms));
            for i in 0..n {
                let cn = format!("{tag}{i}");
                let attrs = vec![("objectClass", ["device"].into()), ("cn", [cn.as_str()].into())];
                assert_eq!(c.add(&format!("cn={cn},{PEOPLE}"), attrs).unwrap().rc, 0);
            }
        })
    };
    let (a, b) = (writer("slow", 12, 0), writer("fast", 40, 20));
    a.join().unwrap();
    b.join().unwrap();
}

/// Reads a persistent search's stream until `expected` entries came, and
/// checks that no `newcookie` CSN of the server id `sid` ("#001#") claims
/// a change (an entry's entryCSN on `s`) announced only after it.
pub fn no_cookie_claims_an_unsent_change(r: &mut Raw, s: &Server, expected: usize, sid: &str) {
    use ldap3_proto::proto::LdapOp;
    // The stream in order: entries (their DNs) and cookies (that server's CSN).
    let mut events: Vec<(bool, String)> = Vec::new();
    let mut entries = 0;
    while entries < expected {
        let frame = r.recv_frame().expect("the announcements never all came");
        let mut one = frame.clone();
        match tokio_util::codec::Decoder::decode(&mut ldap3_proto::LdapCodec::default(), &mut one) {
            Ok(Some(LdapMsg { op: LdapOp::SearchResultEntry(e), .. })) => {
                entries += 1;
                events.push((false, e.dn.to_lowercase()));
            }
            _ => {
                let text = String::from_utf8_lossy(&frame).into_owned();
                if let Some(csn) = text.split("csn=").nth(1) {
                    let theirs = csn.split(';').find(|c| c.contains(sid)).map(|c| c[..40].to_string());
                    events.extend(theirs.map(|c| (true, c)));
                }
            }
        }
    }
    let mut c = s.admin();
    let (found, _) = c.search(PEOPLE, ldap3::Scope::OneLevel, "(cn=*)", vec!["entryCSN"]).unwrap().success().unwrap();
    let csn_of: std::collections::HashMap<String, String> = found
        .into_iter()
        .map(ldap3::SearchEntry::construct)
        .map(|e| (e.dn.to_lowercase(), e.attrs["entryCSN"][0].clone()))
        .filter(|(_, csn)| csn.contains(sid))
        .collect();
    let mut announced = BTreeSet::new();
    for (is_cookie, v) in &events {
        if !is_cookie {
            announced.insert(v.clone());
            continue;
        }
        let claimed: Vec<&String> =
            csn_of.iter().filter(|(dn, csn)| *csn <= v && !announced.contains(*dn)).map(|(dn, _)| dn).collect();
        assert!(claimed.is_empty(), "a cookie ({v}) claims changes not yet sent: {claimed:?}");
    }
}

/// refreshOnly rounds from each round's cookie while two writers add
/// entries, one on a shard whose commits lag 300 ms: every entry comes in
/// some round (a cookie never skips a change the next round would miss).
#[test]
fn refresh_only_rounds_from_their_cookies_miss_nothing_across_shards() {
    use ldap3_proto::proto::LdapOp;
    let s = Server::start_with_commit_delay(2, "[syncrepl]\nprovider = true\n", 1, 300);
    let round = |cookie: Option<Vec<u8>>| {
        let (msgs, cookie) = refresh_only(&s, cookie);
        let dns = msgs.into_iter().filter_map(|m| match m.op {
            LdapOp::SearchResultEntry(e) => Some(e.dn.to_lowercase()),
            _ => None,
        });
        (dns.collect::<Vec<_>>(), cookie)
    };
    let (_, mut cookie) = round(None);
    let writer = |tag: &'static str, n: usize| {
        let mut c = s.admin();
        std::thread::spawn(move || {
            for i in 0..n {
                let cn = format!("{tag}{i}");
                let attrs = vec![("objectClass", ["device"].into()), ("cn", [cn.as_str()].into())];
                assert_eq!(c.add(&format!("cn={cn},{PEOPLE}"), attrs).unwrap().rc, 0);
            }
        })
    };
    let writers = [writer("slow", 12), writer("fast", 40)];
    let mut got = BTreeSet::new();
    while writers.iter().any(|w| !w.is_finished()) {
        let (dns, next) = round(cookie.clone());
        got.extend(dns);
        cookie = next.or(cookie);
    }
    for w in writers {
        w.join().unwrap();
    }
    let (dns, _) = round(cookie);
    got.extend(dns);
    let mut c = s.admin();
    for dn in search_dns(&mut c, PEOPLE, ldap3::Scope::OneLevel, "(cn=*)") {
        assert!(got.contains(&dn.to_lowercase()), "{dn} never came in a round");
    }
}

#[test]
fn cancel_and_abandon_end_a_persistent_search() {
    use ldap3_proto::proto::{LdapExtendedRequest, LdapOp};
    let s = provider(1);
    let mut r = Raw::connect(&s);
    r.send(vec![LdapMsg::new(1, bind(ROOT_DN, ROOT_PW))]);
    assert!(
        matches!(r.recv_lenient().unwrap().op, LdapOp::BindResponse(ref b) if b.res.code == ldap3_proto::LdapResultCode::Success)
    );
    // A change while it persists arrives as an entry.
    persistent_search(&mut r, 2);
    assert_eq!(add_user(&mut s.admin(), "seen").rc, 0);
    let m = r.recv_lenient().unwrap();
    assert!(matches!(m.op, LdapOp::SearchResultEntry(ref e) if e.dn.starts_with("uid=seen,")), "{m:?}");
    // Cancel (RFC 3909): cancelRequestValue ::= SEQUENCE { cancelID 2 }.
    let cancel = LdapExtendedRequest { name: "1.3.6.1.1.8".into(), value: Some(vec![0x30, 0x03, 0x02, 0x01, 0x02]) };
    r.send(vec![LdapMsg::new(3, LdapOp::ExtendedRequest(cancel))]);
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let m = r.recv_lenient().expect("closed");
        match (m.msgid, &m.op) {
            (2, LdapOp::SearchResultDone(res)) => seen.push(res.code.clone()),
            (3, LdapOp::ExtendedResponse(res)) => seen.push(res.res.code.clone()),
            (2, LdapOp::IntermediateResponse(_)) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(seen.contains(&ldap3_proto::LdapResultCode::Canceled), "{seen:?}");
    assert!(seen.contains(&ldap3_proto::LdapResultCode::Success), "{seen:?}");
    // Abandon: the search ends without an answer; the connection goes on.
    persistent_search(&mut r, 4);
    r.send(vec![LdapMsg::new(5, LdapOp::AbandonRequest(4)), LdapMsg::new(6, whoami())]);
    loop {
        let m = r.recv_lenient().expect("closed");
        match (m.msgid, &m.op) {
            (6, LdapOp::ExtendedResponse(_)) => break,
            (4, LdapOp::SearchResultDone(_)) => panic!("an abandoned search is not answered"),
            _ => {}
        }
    }
    assert_eq!(add_user(&mut s.admin(), "unseen").rc, 0);
    r.send(vec![LdapMsg::new(7, whoami())]);
    let m = r.recv_lenient().unwrap();
    assert_eq!(m.msgid, 7, "{m:?}");
}

/// An anonymous refreshAndPersist must learn nothing of entries it may not
/// read: slapd's syncprov sends a change, or the delete of an entry that
/// left the content, only when the entry matched the search under the
/// searcher's rights before or after. Modify, rename and delete of a
/// hidden entry therefore reach it as nothing at all; a later refresh from
/// its cookie lists no hidden entry among the deleted.
#[test]
fn persist_and_refresh_say_nothing_of_hidden_entries() {
    use ldap3_proto::proto::LdapOp;
    let secret = format!("ou=secret,{SUFFIX}");
    let mut s = Server::start_with_config(
        1,
        &format!(
            "[syncrepl]\nprovider = true\n[access]\nrules = [\n  'to dn.subtree=\"{secret}\" by * none',\n  'to filter=(description=classified) by * none',\n  'to * by * read',\n]\n"
        ),
    );
    let mut root = s.admin();
    let ou = vec![("objectClass", ["organizationalUnit"].into()), ("ou", ["secret"].into())];
    assert_eq!(root.add(&secret, ou).unwrap().rc, 0);
    let device = |cn: &'static str| vec![("objectClass", ["device"].into()), ("cn", [cn].into())];
    assert_eq!(root.add(&format!("cn=hidden,{secret}"), device("hidden")).unwrap().rc, 0);
    // Hidden by a rule on its content, and one it may read.
    let classified =
        vec![("objectClass", ["device"].into()), ("cn", ["classified"].into()), ("description", ["classified"].into())];
    assert_eq!(root.add(&format!("cn=classified,{PEOPLE}"), classified).unwrap().rc, 0);
    assert_eq!(root.add(&format!("cn=visible,{PEOPLE}"), device("visible")).unwrap().rc, 0);
    let mut r = Raw::connect(&s);
    persistent_search(&mut r, 1);
    // Changes to the hidden entry, then a visible one to know they are past.
    let hidden = format!("cn=hidden,{secret}");
    let desc = Mod::Replace("description", ["changed"].into());
    assert_eq!(root.modify(&hidden, vec![desc]).unwrap().rc, 0);
    assert_eq!(root.modifydn(&hidden, "cn=hidden2", true, None).unwrap().rc, 0);
    assert_eq!(root.delete(&format!("cn=hidden2,{secret}")).unwrap().rc, 0);
    assert_eq!(root.delete(&format!("cn=classified,{PEOPLE}")).unwrap().rc, 0);
    assert_eq!(root.delete(&format!("cn=visible,{PEOPLE}")).unwrap().rc, 0);
    assert_eq!(root.add(&format!("cn=marker,{PEOPLE}"), device("marker")).unwrap().rc, 0);
    // Until the visible delete and the marker have come, then one more
    // round (a second marker) for records a pending rename held back.
    let watch = |r: &mut Raw, until: &str, also: Option<&str>| {
        let (mut seen, mut also_seen) = (false, also.is_none());
        while !(seen && also_seen) {
            let m = r.recv_lenient().expect("an announcement never came");
            if let LdapOp::SearchResultEntry(ref e) = m.op {
                let dn = e.dn.to_lowercase();
                assert!(!dn.contains("ou=secret") && !dn.contains("classified"), "a hidden entry was announced: {m:?}");
                seen |= dn.starts_with(until);
                also_seen |= also.is_some_and(|a| dn.starts_with(a));
            }
        }
    };
    watch(&mut r, "cn=marker,", Some("cn=visible,"));
    assert_eq!(root.add(&format!("cn=marker2,{PEOPLE}"), device("marker2")).unwrap().rc, 0);
    watch(&mut r, "cn=marker2,", None);
    // A refresh from a cookie lists what was deleted since only when the
    // changelog reaches 5 s before it: restart with the clock 10 s ahead.
    assert_eq!(root.add(&format!("cn=hidden4,{secret}"), device("hidden4")).unwrap().rc, 0);
    drop((root, r));
    s.env.push(("COREDIR_TEST_CLOCK_OFFSET_S".into(), "10".into()));
    s.restart();
    let mut root = s.admin();
    // A change at the new time, for the cookie to carry it.
    assert_eq!(root.modify(PEOPLE, vec![Mod::Replace("description", ["now"].into())]).unwrap().rc, 0);
    let (_, cookie) = refresh_only(&s, None);
    // After that cookie: one hidden entry changed, one added and deleted.
    let uuid_of = |root: &mut LdapConn, dn: &str| {
        get_entry(root, dn, vec!["entryUUID"]).unwrap().attrs["entryUUID"][0].parse::<uuid::Uuid>().unwrap()
    };
    let hidden4 = format!("cn=hidden4,{secret}");
    assert_eq!(root.modify(&hidden4, vec![Mod::Replace("description", ["x"].into())]).unwrap().rc, 0);
    assert_eq!(root.add(&format!("cn=hidden3,{secret}"), device("hidden3")).unwrap().rc, 0);
    let uuids = [uuid_of(&mut root, &hidden4), uuid_of(&mut root, &format!("cn=hidden3,{secret}"))];
    assert_eq!(root.delete(&format!("cn=hidden3,{secret}")).unwrap().rc, 0);
    // A visible delete, to see that the refresh runs its delete phase.
    let marker = uuid_of(&mut root, &format!("cn=marker,{PEOPLE}"));
    assert_eq!(root.delete(&format!("cn=marker,{PEOPLE}")).unwrap().rc, 0);
    let mut deleted = Vec::new();
    assert!(cookie.is_some());
    for m in refresh_only(&s, cookie).0 {
        if let LdapOp::SearchResultEntry(ref e) = m.op {
            assert!(!e.dn.to_lowercase().contains("ou=secret"), "a hidden entry was listed: {m:?}")
        }
        deleted.extend(deleted_uuids(&m));
    }
    assert!(deleted.contains(&marker), "no delete phase: {deleted:?}");
    assert!(!deleted.iter().any(|u| uuids.contains(u)), "a hidden entry was listed as deleted: {deleted:?}");
}

/// A persistent sync search whose filter names a member of a group past
/// `limits.max_filter_tests` hears of the group's change (the index decides
/// the member item, as in the refresh) instead of ending with 11.
#[test]
fn a_persistent_search_on_a_big_group_member_hears_the_groups_change() {
    use ldap3_proto::proto::{LdapFilter, LdapOp, SyncRequestMode};
    if engine() != "lmdb" {
        return; // sled has no snapshot for the index to decide in
    }
    let s = Server::start_with_config(1, "[syncrepl]\nprovider = true\n[limits]\nmax_filter_tests = 1000\n");
    let mut admin = s.admin();
    let group = big_group(&mut admin, "all", 5_000).to_lowercase();
    let mut msg = sync_search(1, SyncRequestMode::RefreshAndPersist, None);
    if let LdapOp::SearchRequest(req) = &mut msg.op {
        req.filter = LdapFilter::And(vec![
            LdapFilter::Equality("objectClass".into(), "groupOfNames".into()),
            LdapFilter::Equality("member".into(), format!("uid=m4999,{PEOPLE}")),
        ]);
        req.attrs = vec!["1.1".into()];
    }
    let mut r = Raw::connect(&s);
    r.send(vec![msg]);
    let mut refreshed = 0;
    loop {
        match r.recv_lenient().expect("closed during the refresh").op {
            LdapOp::SearchResultEntry(_) => refreshed += 1,
            LdapOp::IntermediateResponse(_) => break,
            other => panic!("the refresh ended: {other:?}"),
        }
    }
    assert_eq!(refreshed, 1);
    let change = ldap3::Mod::Replace("description", ["changed"].into());
    assert_eq!(admin.modify(&group, vec![change]).unwrap().rc, 0);
    match r.recv_lenient().expect("closed instead of announcing").op {
        LdapOp::SearchResultEntry(e) => assert_eq!(e.dn.to_lowercase(), group),
        other => panic!("not announced: {other:?}"),
    }
}

/// A one-level refresh walks the keys of the whole subtree below its base
/// but takes only the children: a chunk is bounded by the keys it walks,
/// and the children after a big grandchild subtree still come.
#[test]
fn a_one_level_refresh_over_a_deep_subtree_sends_every_child() {
    let s = Server::start_with_config(2, "[syncrepl]\nprovider = true\n[storage]\nsync = \"never\"\n");
    let big = format!("ou=big,{SUFFIX}");
    let mut ldif = format!("dn: {big}\nobjectClass: organizationalUnit\nou: big\n\n");
    for child in ["a", "m", "z"] {
        ldif += &format!("dn: ou={child},{big}\nobjectClass: organizationalUnit\nou: {child}\n\n");
    }
    for i in 0..5000 {
        ldif += &format!("dn: cn=g{i},ou=a,{big}\nobjectClass: person\ncn: g{i}\nsn: g\n\n");
    }
    let (code, out, err) = tool("ldapadd", &["-x", "-H", &s.url(), "-D", ROOT_DN, "-w", ROOT_PW], Some(&ldif));
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = tool(
        "ldapsearch",
        &["-x", "-H", &s.url(), "-D", ROOT_DN, "-w", ROOT_PW, "-E", "!sync=ro", "-b", &big, "-s", "one", "1.1"],
        None,
    );
    assert_eq!(code, 0, "{out}{err}");
    let mut dns: Vec<&str> = out.lines().filter_map(|l| l.strip_prefix("dn: ")).collect();
    dns.sort();
    assert_eq!(dns, [format!("ou=a,{big}"), format!("ou=m,{big}"), format!("ou=z,{big}")]);
}

/// An entry changed so that the filter no longer takes it and then deleted
/// while the consumer was away: the consumer holds it from before, and
/// the delete's own record judged the entry as it last stood (out of the
/// filter), so no refresh ever said it was gone.
#[test]
fn an_entry_changed_out_of_the_filter_then_deleted_is_named_gone() {
    use ldap3_proto::proto::{LdapFilter, LdapOp};
    let mut s = Server::start_with_config(1, "[syncrepl]\nprovider = true\n");
    // A refresh from a cookie replays the changelog only when it reaches
    // 5 s before the cookie: restart with the clock 10 s ahead.
    s.env.push(("COREDIR_TEST_CLOCK_OFFSET_S".into(), "10".into()));
    s.restart();
    let mut root = s.admin();
    let dn = format!("cn=leaving,{PEOPLE}");
    let attrs = vec![("objectClass", ["device"].into()), ("cn", ["leaving"].into()), ("description", ["keep"].into())];
    assert_eq!(root.add(&dn, attrs).unwrap().rc, 0);
    let keep = LdapFilter::Equality("description".into(), "keep".into());
    let (msgs, cookie) = refresh_only_of(&s, keep.clone(), None);
    let sent = |msgs: &[LdapMsg]| {
        msgs.iter()
            .filter_map(|m| match &m.op {
                LdapOp::SearchResultEntry(e) if deleted_uuids(m).is_empty() => Some(e.dn.to_lowercase()),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(sent(&msgs), [dn.to_lowercase()]);
    let uuid: uuid::Uuid = get_entry(&mut root, &dn, vec!["entryUUID"]).unwrap().attrs["entryUUID"][0].parse().unwrap();
    assert_eq!(root.modify(&dn, vec![Mod::Replace("description", ["other"].into())]).unwrap().rc, 0);
    assert_eq!(root.delete(&dn).unwrap().rc, 0);
    let (msgs, _) = refresh_only_of(&s, keep, cookie);
    let gone: Vec<_> = msgs.iter().flat_map(deleted_uuids).collect();
    assert!(gone.contains(&uuid), "the consumer keeps an entry deleted since: {msgs:?}");
}

/// A refresh that replays the changes since a cookie sends an entry
/// changed many times in place once, as it is now, not once per change.
#[test]
fn a_replayed_refresh_sends_an_entry_changed_many_times_once() {
    use ldap3_proto::proto::LdapOp;
    let mut s = Server::start_with_config(1, "[syncrepl]\nprovider = true\n");
    s.env.push(("COREDIR_TEST_CLOCK_OFFSET_S".into(), "10".into()));
    s.restart();
    let mut root = s.admin();
    let dn = format!("cn=busy,{PEOPLE}");
    let attrs = vec![("objectClass", ["device"].into()), ("cn", ["busy"].into())];
    assert_eq!(root.add(&dn, attrs).unwrap().rc, 0);
    let (_, cookie) = refresh_only(&s, None);
    for i in 0..20 {
        let value = format!("v{i}");
        assert_eq!(root.modify(&dn, vec![Mod::Replace("description", [value.as_str()].into())]).unwrap().rc, 0);
    }
    let (msgs, _) = refresh_only(&s, cookie);
    let sent: Vec<_> = msgs
        .iter()
        .filter_map(|m| match &m.op {
            LdapOp::SearchResultEntry(e) => Some(e.dn.to_lowercase()),
            _ => None,
        })
        .collect();
    assert_eq!(sent, [dn.to_lowercase()], "{msgs:?}");
}

/// A delete phase names every entry deleted since the cookie, however
/// many tombstones it walks: more than one chunk of them (1,024) here.
#[test]
fn a_delete_phase_names_every_entry_deleted_since_the_cookie() {
    const N: usize = 1100;
    // Read as anonymous: past the default size limit (500) only once lifted.
    let s = Server::start_with_config(2, "[syncrepl]\nprovider = true\n[limits]\nsize_limit = 0\n");
    let each = |f: fn(&mut LdapConn, usize)| {
        let workers: Vec<_> = (0..4)
            .map(|w| {
                let mut c = s.admin();
                std::thread::spawn(move || (w..N).step_by(4).for_each(|i| f(&mut c, i)))
            })
            .collect();
        workers.into_iter().for_each(|w| w.join().unwrap());
    };
    each(|c, i| {
        let cn = format!("gone{i}");
        let attrs = vec![("objectClass", ["device"].into()), ("cn", [cn.as_str()].into())];
        assert_eq!(c.add(&format!("cn={cn},{PEOPLE}"), attrs).unwrap().rc, 0);
    });
    let (_, cookie) = refresh_only(&s, None);
    each(|c, i| assert_eq!(c.delete(&format!("cn=gone{i},{PEOPLE}")).unwrap().rc, 0));
    let (msgs, _) = refresh_only(&s, cookie);
    let gone: BTreeSet<_> = msgs.iter().flat_map(deleted_uuids).collect();
    assert_eq!(gone.len(), N);
}

/// A refreshOnly sync search of `base` (subtree, every entry) on a new
/// connection: its result code, the entries and the deleted entryUUIDs
/// it was sent, and the cookie it ended with.
fn refresh_of(s: &Server, base: &str, cookie: Option<Vec<u8>>) -> (u32, Vec<String>, Vec<uuid::Uuid>, Option<Vec<u8>>) {
    use ldap3_proto::control::LdapControl;
    use ldap3_proto::proto::{LdapOp, SyncRequestMode};
    let mut msg = sync_search(1, SyncRequestMode::RefreshOnly, cookie);
    if let LdapOp::SearchRequest(req) = &mut msg.op {
        req.base = base.into();
    }
    let mut r = Raw::connect(s);
    r.send(vec![msg]);
    let (mut entries, mut deleted) = (Vec::new(), Vec::new());
    loop {
        let m = r.recv_lenient().expect("the refresh never ended");
        let gone = deleted_uuids(&m);
        match m.op {
            LdapOp::SearchResultEntry(_) | LdapOp::IntermediateResponse(_) if !gone.is_empty() => deleted.extend(gone),
            LdapOp::SearchResultEntry(e) => entries.push(e.dn),
            LdapOp::SearchResultDone(res) => {
                let cookie = m.ctrl.into_iter().find_map(|c| match c {
                    LdapControl::SyncDone { cookie, .. } => cookie,
                    _ => None,
                });
                return (res.code as u32, entries, deleted, cookie);
            }
            _ => {}
        }
    }
}

/// A sync search answers as a plain search does for what the requester
/// may not see and may not have: a hidden base is missing (32, whether it
/// exists or not), the size limit ends the refresh (4), a change to a
/// hidden entry in scope does not move the cookie, and an entry moved
/// out of the scope and out of sight is among the deleted of a refresh
/// from a cookie.
#[test]
fn a_sync_search_tells_anonymous_nothing_a_search_would_not() {
    let (secret, secret2) = (format!("ou=secret,{PEOPLE}"), format!("ou=secret,ou=groups,{SUFFIX}"));
    let conf = format!(
        "[syncrepl]\nprovider = true\n[limits]\nsize_limit = 3\n[access]\nrules = [\n  'to dn.subtree=\"{secret}\" by * none',\n  'to dn.subtree=\"{secret2}\" by * none',\n  'to * by * read',\n]\n"
    );
    let mut s = Server::start_with_config(1, &conf);
    let mut root = s.admin();
    for dn in [&secret, &secret2] {
        let ou = vec![("objectClass", ["organizationalUnit"].into()), ("ou", ["secret"].into())];
        assert_eq!(root.add(dn, ou).unwrap().rc, 0);
    }
    let device = |cn: &'static str| vec![("objectClass", ["device"].into()), ("cn", [cn].into())];
    let hidden = format!("cn=hidden,{secret}");
    assert_eq!(root.add(&hidden, device("hidden")).unwrap().rc, 0);
    let seen_dn = format!("cn=seen,{PEOPLE}");
    assert_eq!(root.add(&seen_dn, device("seen")).unwrap().rc, 0);
    let (code, entries, ..) = refresh_of(&s, &hidden, None);
    assert_eq!((code, entries.len()), (32, 0), "a hidden base");
    assert_eq!(refresh_of(&s, &format!("cn=nothing,{secret}"), None).0, 32);
    let (code, entries, ..) = refresh_of(&s, SUFFIX, None);
    assert_eq!((code, entries.len()), (4, 3), "the size limit: {entries:?}");
    // After a hidden change, the newest, the cookie settles at the newest
    // change anonymous may see (it follows the commit floor until then).
    assert_eq!(root.modify(&hidden, vec![Mod::Replace("description", ["changed"].into())]).unwrap().rc, 0);
    let csn_of =
        |root: &mut LdapConn, dn: &str| get_entry(root, dn, vec!["entryCSN"]).unwrap().attrs["entryCSN"][0].clone();
    let (seen, secret_csn) = (csn_of(&mut root, &seen_dn), csn_of(&mut root, &hidden));
    let mut settled = String::new();
    wait_for("the cookie to settle", || {
        let (code, entries, _, cookie) = refresh_of(&s, PEOPLE, None);
        assert_eq!(code, 0, "{entries:?}");
        settled = String::from_utf8_lossy(&cookie.unwrap_or_default()).split("csn=").nth(1).unwrap_or_default().into();
        settled == seen || settled >= secret_csn
    });
    assert_eq!(settled, seen, "a hidden change moved the cookie");
    // A refresh from a cookie runs its delete phase only when the
    // changelog reaches 5 s before it: restart with the clock 10 s ahead.
    drop(root);
    s.env.push(("COREDIR_TEST_CLOCK_OFFSET_S".into(), "10".into()));
    s.restart();
    let mut root = s.admin();
    assert_eq!(root.modify(&seen_dn, vec![Mod::Replace("description", ["now"].into())]).unwrap().rc, 0);
    let uuid_of = |root: &mut LdapConn, dn: &str| -> uuid::Uuid {
        get_entry(root, dn, vec!["entryUUID"]).unwrap().attrs["entryUUID"][0].parse().unwrap()
    };
    // A visible entry moved where anonymous may not read, out of scope: a
    // consumer holding it must drop it (a disabled account moved away must
    // not stay on a replica). Its DN before is not kept, so a hidden
    // entry moved out of scope is named too (its entryUUID, and that it
    // moved): the lesser harm.
    let moved = format!("cn=moved,{PEOPLE}");
    assert_eq!(root.add(&moved, device("moved")).unwrap().rc, 0);
    let (_, _, _, cookie) = refresh_of(&s, PEOPLE, None);
    let (away, gone) = (uuid_of(&mut root, &moved), uuid_of(&mut root, &seen_dn));
    assert_eq!(root.modifydn(&moved, "cn=moved", true, Some(&secret2)).unwrap().rc, 0);
    assert_eq!(root.delete(&seen_dn).unwrap().rc, 0);
    let (code, _, deleted, _) = refresh_of(&s, PEOPLE, cookie);
    assert_eq!(code, 0);
    assert!(deleted.contains(&gone), "no delete phase: {deleted:?}");
    assert!(deleted.contains(&away), "an entry moved out of sight is kept by the consumer: {deleted:?}");
}

/// A subtree moved back and forth between two parents while a persistent
/// search runs: every entry of it is announced at its new DN after each
/// move. Before, an entry moved back into a partition it had been in found
/// there the state its earlier stay left (pointing the way it came), the
/// lookup went back and forth until it gave up, and the change was passed
/// over for good: the consumer kept entries at DNs they had left.
#[test]
fn a_subtree_moved_back_and_forth_is_announced_whole_each_time() {
    use ldap3_proto::proto::LdapOp;
    let s = provider(2);
    let mut root = s.admin();
    let top = format!("ou=pp,{PEOPLE}");
    let ou = vec![("objectClass", ["organizationalUnit"].into()), ("ou", ["pp"].into())];
    assert_eq!(root.add(&top, ou).unwrap().rc, 0);
    for i in 0..50 {
        let cn = format!("k{i}");
        let attrs = vec![("objectClass", ["device"].into()), ("cn", [cn.as_str()].into())];
        assert_eq!(root.add(&format!("cn={cn},{top}"), attrs).unwrap().rc, 0);
    }
    let mut r = Raw::connect(&s);
    persistent_search(&mut r, 1);
    let groups = format!("ou=groups,{SUFFIX}");
    for (round, (from, to)) in
        [(PEOPLE, &groups[..]), (&groups[..], PEOPLE), (PEOPLE, &groups[..]), (&groups[..], PEOPLE)]
            .into_iter()
            .enumerate()
    {
        let res = root.modifydn(&format!("ou=pp,{from}"), "ou=pp", true, Some(to)).unwrap();
        assert_eq!(res.rc, 0, "{res:?}");
        let under = format!(",ou=pp,{to}").to_lowercase();
        let mut announced = BTreeSet::new();
        while announced.len() < 50 {
            let m = r.recv_lenient().unwrap_or_else(|| panic!("move {round}: {} of 50 announced", announced.len()));
            if let LdapOp::SearchResultEntry(e) = m.op {
                if e.dn.to_lowercase().ends_with(&under) {
                    announced.insert(e.dn.to_lowercase());
                }
            }
        }
    }
}

/// A control a sync search would ignore (a page, a sort, an assertion,
/// matched values) is refused with unavailableCriticalExtension, not
/// dropped: a false critical Assertion had all entries sent.
#[test]
fn controls_a_sync_search_would_ignore_are_refused() {
    use ldap3_proto::control::LdapControl;
    use ldap3_proto::proto::{LdapOp, SyncRequestMode};
    let s = provider(1);
    let assertion = LdapControl::Unknown {
        oid: "1.3.6.1.1.12".into(),
        criticality: true,
        value: Some(vec![0x87, 0x03, b'z', b'z', b'z']),
    };
    let paged = LdapControl::SimplePagedResults { size: 2, cookie: vec![] };
    for extra in [assertion, paged] {
        let mut msg = sync_search(1, SyncRequestMode::RefreshOnly, None);
        msg.ctrl.push(extra.clone());
        let mut r = Raw::connect(&s);
        r.send(vec![msg]);
        let m = r.recv_lenient().expect("closed");
        match m.op {
            LdapOp::SearchResultDone(res) => assert_eq!(res.code as u32, 12, "{extra:?}"),
            other => panic!("{extra:?}: {other:?}"),
        }
    }
}

/// A Bind abandons the searches still running on its connection, as
/// slapd does (RFC 4511 §4.2.1: they must complete or be abandoned before
/// it is processed): a persistent search must not go on streaming under
/// the rights of the identity the connection had before.
#[test]
fn a_bind_abandons_the_persistent_searches_of_its_connection() {
    use ldap3_proto::proto::LdapOp;
    let s = provider(1);
    let mut root = s.admin();
    let mut r = Raw::connect(&s);
    persistent_search(&mut r, 1);
    r.send(vec![LdapMsg::new(2, bind(ROOT_DN, ROOT_PW))]);
    loop {
        let m = r.recv_lenient().expect("closed");
        if let LdapOp::BindResponse(_) = m.op {
            break;
        }
    }
    // A change after the bind: the abandoned search announces nothing.
    let device = vec![("objectClass", ["device"].into()), ("cn", ["after-bind"].into())];
    assert_eq!(root.add(&format!("cn=after-bind,{PEOPLE}"), device).unwrap().rc, 0);
    r.send(vec![LdapMsg::new(3, whoami())]);
    loop {
        let m = r.recv_lenient().expect("closed");
        match (m.msgid, m.op) {
            (3, LdapOp::ExtendedResponse(_)) => break,
            (1, op) => panic!("the search went on after the bind: {op:?}"),
            other => panic!("unexpected {other:?}"),
        }
    }
    let running = || {
        ctl_json(&s, &["connections"])["connections"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["running"].as_u64().unwrap())
            .sum::<u64>()
    };
    wait_for("the search to end", || running() == 0);
}

/// Idle persistent searches cost nothing: each sleeps until a commit, an
/// Abandon or its client's going wakes it. They used to read the changelog
/// every second and wake every 100 ms to look at their Abandon flag, so
/// 5,000 of them kept a core of an idle server busy.
#[test]
fn idle_persistent_searches_sleep_until_a_change_or_an_abandon() {
    use ldap3_proto::proto::LdapOp;
    let s = provider(1);
    let rounds = || -> u64 {
        let text = ctl(&s, &["metrics"]).1;
        let lines = text.lines().filter(|l| l.starts_with("coredir_syncrepl_rounds_total"));
        lines.map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap() as u64).sum()
    };
    let running = || -> u64 {
        let list = ctl_json(&s, &["connections"])["connections"].as_array().unwrap().clone();
        list.iter().map(|c| c["running"].as_u64().unwrap()).sum()
    };
    let mut raws: Vec<Raw> = (0..4).map(|_| Raw::connect(&s)).collect();
    for r in &mut raws {
        persistent_search(r, 1);
    }
    // Once the rounds after the refresh are done, none while idle.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let settled = rounds();
    std::thread::sleep(std::time::Duration::from_millis(2500));
    assert_eq!(rounds(), settled, "rounds made by idle persistent searches");
    // A change wakes every one of them.
    assert_eq!(add_user(&mut s.admin(), "woken").rc, 0);
    for r in &mut raws {
        let m = r.recv_lenient().expect("closed");
        assert!(matches!(m.op, LdapOp::SearchResultEntry(ref e) if e.dn.starts_with("uid=woken,")), "{m:?}");
    }
    assert!(rounds() > settled);
    // An Abandon ends one at once, and a client's going another, with no
    // commit to wake them; two under one message ID end together.
    persistent_search(&mut raws[2], 1);
    wait_for("five searches running", || running() == 5);
    raws[0].send(vec![LdapMsg::new(2, LdapOp::AbandonRequest(1))]);
    wait_for("the abandoned search to end", || running() == 4);
    raws[2].send(vec![LdapMsg::new(2, LdapOp::AbandonRequest(1))]);
    wait_for("both searches under the abandoned ID to end", || running() == 2);
    drop(raws.remove(1));
    wait_for("the search of the closed connection to end", || running() == 1);
}

/// A sync refresh keeps the search's time limit, as slapd's does (its
/// backend's search loop checks it): a refresh whose client reads slowly
/// ends with timeLimitExceeded once the limit has passed, instead of
/// holding its place and the reactor's time for as long as the client
/// likes. (The limit passes while the server waits for the client to
/// read, so nothing here depends on how fast either side runs.)
#[test]
fn a_sync_refresh_ends_at_its_time_limit() {
    use ldap3_proto::proto::{LdapOp, SyncRequestMode};
    let s = provider(1);
    let mut c = s.admin();
    let big = "x".repeat(50 << 10);
    for i in 0..400 {
        let dn = format!("cn=big{i},{PEOPLE}");
        let cn = format!("big{i}");
        let attrs = vec![
            ("objectClass", ["device"].into()),
            ("cn", [cn.as_str()].into()),
            ("description", [big.as_str()].into()),
        ];
        assert_eq!(c.add(&dn, attrs).unwrap().rc, 0);
    }
    let mut r = Raw::connect(&s);
    r.send(vec![LdapMsg::new(1, bind(ROOT_DN, ROOT_PW))]);
    assert!(matches!(r.recv_lenient().unwrap().op, LdapOp::BindResponse(_)));
    let mut search = sync_search(2, SyncRequestMode::RefreshOnly, None);
    if let LdapOp::SearchRequest(req) = &mut search.op {
        req.timelimit = 1;
    }
    r.send(vec![search]);
    // 20 MB of entries: more than the connection's queue and the socket's
    // buffers hold, so the refresh waits for room until this reads.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let done = loop {
        let m = r.recv_lenient().expect("closed");
        if let LdapOp::SearchResultDone(res) = m.op {
            break res.code;
        }
    };
    assert_eq!(done, ldap3_proto::LdapResultCode::TimeLimitExceeded);
}

/// A sync search sees what a search with the same controls sees, as
/// slapd's syncprov (back-mdb runs the refresh): glue entries only with
/// ManageDsaIT (slapd's consumers send it), subentries below the base
/// only with the Subentries control, and what lies under glue always.
#[test]
fn a_sync_refresh_passes_over_glue_and_subentries_as_a_search_does() {
    use ldap3_proto::control::LdapControl;
    use ldap3_proto::proto::{LdapOp, SyncRequestMode};
    let s = provider(1);
    let mut c = s.admin();
    let glue = format!("cn=g,{PEOPLE}");
    let below = format!("cn=c,{glue}");
    let subentry = format!("cn=s,{PEOPLE}");
    let adds: [(&str, Vec<(&str, std::collections::HashSet<&str>)>); 3] = [
        (&glue, vec![("objectClass", ["glue", "extensibleObject"].into()), ("cn", ["g"].into())]),
        (&below, vec![("objectClass", ["device"].into()), ("cn", ["c"].into())]),
        (
            &subentry,
            vec![("objectClass", ["subentry"].into()), ("cn", ["s"].into()), ("subtreeSpecification", ["{}"].into())],
        ),
    ];
    for (dn, attrs) in adds {
        assert_eq!(c.add(dn, attrs).unwrap().rc, 0, "{dn}");
    }
    let refresh = |extra: Option<LdapControl>| {
        let mut msg = sync_search(1, SyncRequestMode::RefreshOnly, None);
        msg.ctrl.extend(extra);
        let mut r = Raw::connect(&s);
        r.send(vec![msg]);
        let mut dns = BTreeSet::new();
        loop {
            let m = r.recv_lenient().expect("the refresh never ended");
            match m.op {
                LdapOp::SearchResultEntry(e) => drop(dns.insert(e.dn.to_lowercase())),
                LdapOp::SearchResultDone(res) => {
                    assert_eq!(res.code as u32, 0, "{}", res.message);
                    return dns;
                }
                _ => {}
            }
        }
    };
    let plain = refresh(None);
    assert!(plain.contains(&below.to_lowercase()), "{plain:?}");
    assert!(!plain.contains(&glue.to_lowercase()), "glue without ManageDsaIT: {plain:?}");
    assert!(!plain.contains(&subentry.to_lowercase()), "a subentry without the control: {plain:?}");
    let managing =
        refresh(Some(LdapControl::Unknown { oid: "2.16.840.1.113730.3.4.2".into(), criticality: false, value: None }));
    assert!(managing.contains(&glue.to_lowercase()), "{managing:?}");
    assert!(!managing.contains(&subentry.to_lowercase()), "{managing:?}");
}

/// A refresh started right after a write ends with a cookie that names
/// it, on two shards too (the other shard's commit floor lags the write
/// by up to a tick): as slapd's refresh ends with the contextCSN, so
/// that no `newcookie` has to follow while nothing changes.
#[test]
fn a_refresh_right_after_a_write_ends_with_a_cookie_that_names_it() {
    let s = provider(2);
    let mut c = s.admin();
    for i in 0..5 {
        let dn = format!("cn=fresh{i},{PEOPLE}");
        let cn = format!("fresh{i}");
        c.add(&dn, vec![("objectClass", ["device"].into()), ("cn", [cn.as_str()].into())]).unwrap().success().unwrap();
        let (_, cookie) = refresh_only(&s, None);
        let cookie = String::from_utf8(cookie.expect("a cookie")).unwrap();
        let (found, _) =
            c.search(&dn, ldap3::Scope::Base, "(objectClass=*)", vec!["entryCSN"]).unwrap().success().unwrap();
        let csn = ldap3::SearchEntry::construct(found[0].clone()).attrs["entryCSN"][0].clone();
        let sid = &csn[csn.len() - 10..csn.len() - 7];
        let claimed =
            cookie.split("csn=").nth(1).unwrap().split(';').find(|c| c.contains(&format!("#{sid}#"))).unwrap();
        assert!(claimed >= csn.as_str(), "round {i}: the cookie {cookie} does not reach the write's CSN {csn}");
    }
}

/// A child moved out of its parent, the parent deleted, then the child
/// deleted: the consumer, live or back from away, meets the child's leave
/// before the parent's delete (the child's move said nothing once the
/// child was gone, and slapd then failed the parent's delete with 66 and
/// retried the same refresh for good, replicating nothing more).
#[test]
fn a_parent_deleted_after_its_child_moved_out_and_went_reaches_slapd() {
    ldap_utils();
    let s = provider(2);
    let mut c = s.admin();
    for (kind, away) in [("refreshAndPersist", false), ("refreshAndPersist", true), ("refreshOnly", true)] {
        let ou = format!("ou=p{},{SUFFIX}", kind.len() + away as usize);
        let child = format!("uid=kid{},{ou}", away as u8);
        let mut consumer = Consumer::new(&s, kind);
        let attrs =
            vec![("objectClass", ["organizationalUnit"].into()), ("ou", [&ou[3..ou.find(',').unwrap()]].into())];
        c.add(&ou, attrs).unwrap().success().unwrap();
        let uid = &child[4..child.find(',').unwrap()];
        c.add(&child, vec![("objectClass", ["account"].into()), ("uid", [uid].into())]).unwrap().success().unwrap();
        same_content(&s, &consumer);
        if away {
            consumer.stop();
        }
        c.modifydn(&child, &format!("uid={uid}"), true, Some(PEOPLE)).unwrap().success().unwrap();
        c.delete(&ou).unwrap().success().unwrap();
        c.delete(&format!("uid={uid},{PEOPLE}")).unwrap().success().unwrap();
        // A change after them must reach the consumer too.
        let after = format!("cn=after{},{PEOPLE}", kind.len() + away as usize);
        c.add(&after, vec![("objectClass", ["device"].into()), ("cn", [&after[3..after.find(',').unwrap()]].into())])
            .unwrap()
            .success()
            .unwrap();
        if away {
            consumer.start();
        }
        same_content(&s, &consumer);
        consumer.stop();
    }
}

/// A replay from a cookie older than entries the consumer holds (a cookie
/// may lag what was sent: it claims only what every shard has settled,
/// and slapd may stop before it keeps a refresh's last one): an entry
/// deleted since is said gone at its delete, never at an earlier record
/// of it, so a parent's delete never comes before the move of a child it
/// had. Told first, slapd failed to delete the parent (66) and retried
/// the same cookie for good; seen once in the sled run under load.
#[test]
fn a_replay_from_a_lagging_cookie_deletes_a_parent_after_its_child_left() {
    let s = provider(2);
    let mut c = s.admin();
    // A cookie that names a change: the next refresh replays from it.
    let first = vec![("objectClass", ["device"].into()), ("cn", ["first"].into())];
    c.add(&format!("cn=first,{PEOPLE}"), first).unwrap().success().unwrap();
    let (_, cookie) = refresh_only(&s, None);
    let (ou, kid) = (format!("ou=lag,{SUFFIX}"), format!("uid=kid,ou=lag,{SUFFIX}"));
    c.add(&ou, vec![("objectClass", ["organizationalUnit"].into()), ("ou", ["lag"].into())])
        .unwrap()
        .success()
        .unwrap();
    c.add(&kid, vec![("objectClass", ["account"].into()), ("uid", ["kid"].into())]).unwrap().success().unwrap();
    let uuid_of = |c: &mut ldap3::LdapConn, dn: &str| {
        let e = get_entry(c, dn, vec!["entryUUID"]).unwrap();
        uuid::Uuid::parse_str(&e.attrs["entryUUID"][0]).unwrap()
    };
    let (ou_uuid, kid_uuid) = (uuid_of(&mut c, &ou), uuid_of(&mut c, &kid));
    c.modifydn(&kid, "uid=kid", true, Some(PEOPLE)).unwrap().success().unwrap();
    c.delete(&ou).unwrap().success().unwrap();
    c.delete(&format!("uid=kid,{PEOPLE}")).unwrap().success().unwrap();
    let (msgs, _) = refresh_only(&s, cookie);
    let gone: Vec<uuid::Uuid> = msgs.iter().flat_map(deleted_uuids).collect();
    let at = |u: uuid::Uuid| gone.iter().position(|g| *g == u).unwrap_or_else(|| panic!("{u} not said gone: {gone:?}"));
    assert!(at(kid_uuid) < at(ou_uuid), "the parent was said gone before its child: {gone:?}");
}

/// A subtree moved out of a consumer's search base leaves it children
/// first: slapd refuses to delete an entry that still has children (66),
/// and a consumer told to drop the top first retried for good.
#[test]
fn a_subtree_moved_out_of_a_consumers_base_leaves_it_children_first() {
    ldap_utils();
    let s = provider(2);
    let mut c = s.admin();
    let consumer = Consumer::of_base(&s, "refreshAndPersist", PEOPLE);
    let sub = format!("ou=sub,{PEOPLE}");
    c.add(&sub, vec![("objectClass", ["organizationalUnit"].into()), ("ou", ["sub"].into())])
        .unwrap()
        .success()
        .unwrap();
    let kid = format!("uid=k,{sub}");
    c.add(&kid, vec![("objectClass", ["account"].into()), ("uid", ["k"].into())]).unwrap().success().unwrap();
    same_content_of(&s, &consumer, PEOPLE);
    c.modifydn(&sub, "ou=sub", true, Some(&format!("ou=groups,{SUFFIX}"))).unwrap().success().unwrap();
    let after = format!("cn=later,{PEOPLE}");
    c.add(&after, vec![("objectClass", ["device"].into()), ("cn", ["later"].into())]).unwrap().success().unwrap();
    same_content_of(&s, &consumer, PEOPLE);
}

/// Issue 19: a rename that keeps its old RDN value (deleteoldrdn 0) after
/// one that dropped it: slapd's consumer ended with the new value only.
/// It takes an RDN attribute found at another position than in its own
/// copy for a dropped old RDN value, and coredir kept attributes where
/// they were first added; slapd moves one that lost every value to the end.
#[test]
fn slapd_keeps_an_rdn_value_a_second_rename_kept() {
    ldap_utils();
    let s = provider(2);
    let mut c = s.admin();
    let base = format!("ou=keep,{SUFFIX}");
    let ou = vec![("objectClass", ["organizationalUnit"].into()), ("ou", ["keep"].into())];
    assert_eq!(c.add(&base, ou).unwrap().rc, 0);
    let mut consumer = Consumer::new(&s, "refreshAndPersist");
    same_content(&s, &consumer);
    let rename = |c: &mut LdapConn, from: &str, to: &str, delete_old: bool| {
        let rc = c.modifydn(&format!("uid={from},{base}"), &format!("uid={to}"), delete_old, None).unwrap().rc;
        assert_eq!(rc, 0, "{from} -> {to}");
    };
    for (live, tag) in [(true, "p"), (false, "r")] {
        let first = format!("{tag}0");
        let mail = format!("{first}@example.com");
        let person = vec![
            ("objectClass", ["inetOrgPerson"].into()),
            ("uid", [first.as_str()].into()),
            ("cn", [first.as_str()].into()),
            ("sn", [first.as_str()].into()),
            ("mail", [mail.as_str()].into()),
        ];
        assert_eq!(c.add(&format!("uid={first},{base}"), person).unwrap().rc, 0);
        same_content(&s, &consumer);
        if !live {
            consumer.stop();
        }
        rename(&mut c, &first, &format!("{tag}1"), true);
        rename(&mut c, &format!("{tag}1"), &format!("{tag}2"), false);
        // Replaced attributes move as well, the RDN's among them.
        let dn = format!("uid={tag}2,{base}");
        let uids = [format!("{tag}2"), format!("{tag}v")];
        let mods = vec![
            Mod::Replace("mail", ["x@example.com"].into()),
            Mod::Replace("uid", uids.iter().map(String::as_str).collect()),
        ];
        assert_eq!(c.modify(&dn, mods).unwrap().rc, 0);
        rename(&mut c, &format!("{tag}2"), &format!("{tag}3"), false);
        // A class added: slapd's consumer replaces objectClass (ITS#5517).
        let dn = format!("uid={tag}3,{base}");
        assert_eq!(c.modify(&dn, vec![Mod::Add("objectClass", ["extensibleObject"].into())]).unwrap().rc, 0);
        if live {
            same_content(&s, &consumer);
        }
        rename(&mut c, &format!("{tag}3"), &format!("{tag}4"), false);
        if !live {
            consumer.start();
        }
        same_content(&s, &consumer);
    }
}

/// Issue 19: a mirror node restarted while its peer was away answered a
/// consumer's refresh with a present phase whose cookie named no CSN of
/// the peer (what the peer settled here was known only from its word,
/// lost with the restart), and slapd deletes only the entries absent from
/// a present phase whose `entryCSN` the new cookie covers: entries the
/// peer had added and this node deleted stayed on the consumer for good.
#[test]
fn a_mirror_node_restarted_without_its_peer_still_passes_deletes_to_slapd() {
    ldap_utils();
    let (mut a, mut b) = crate::mirror::pair(2);
    let mut on_b = b.admin();
    let gone: Vec<String> = (0..4).map(|i| format!("cn=gone{i},{SUFFIX}")).collect();
    for (i, dn) in gone.iter().enumerate() {
        assert_eq!(on_b.add(dn, person_attrs(&format!("gone{i}"))).unwrap().rc, 0);
    }
    wait_for("B's adds on A", || gone.iter().all(|dn| get_entry(&mut a.admin(), dn, vec!["cn"]).is_some()));
    // A keeps what B settled there (written after a short delay).
    let newest = gone
        .iter()
        .filter_map(|dn| get_entry(&mut a.admin(), dn, vec!["entryCSN"]))
        .map(|e| e.attrs["entryCSN"][0].clone())
        .max()
        .unwrap();
    wait_for("A to keep B's adds as settled", || {
        crate::mirror::replication(&a)["peer_settled"].as_str().is_some_and(|kept| *kept >= *newest)
    });
    let mut consumer = Consumer::new(&a, "refreshAndPersist");
    same_content(&a, &consumer);
    consumer.stop();
    let mut on_a = a.admin();
    for dn in &gone {
        assert_eq!(on_a.delete(dn).unwrap().rc, 0);
    }
    b.kill9();
    a.restart();
    consumer.start();
    same_content(&a, &consumer);
}

/// Issue 19: a refresh whose cookie predates the changelog (a consumer
/// that had seen only the entries the database started with) is a
/// present phase, and its cookie named no delete made since: slapd then
/// keeps what the present phase left out, as the cookie it got back was
/// no newer than the one it sent.
#[test]
fn a_present_phase_after_a_delete_ends_with_a_cookie_that_names_it() {
    ldap_utils();
    let s = provider(1);
    let mut consumer = Consumer::new(&s, "refreshAndPersist");
    same_content(&s, &consumer);
    consumer.stop();
    assert_eq!(s.admin().delete(&format!("ou=groups,{SUFFIX}")).unwrap().rc, 0);
    consumer.start();
    same_content(&s, &consumer);
}

/// Issue 19: a consumer away longer than the changelog keeps deletes (its
/// tombstones trimmed) got a present phase whose cookie named none of
/// them, so slapd kept the deleted entries. To a requester no access rule
/// restricts, the cookie now names the newest change of every server, as
/// syncprov ends a present phase with the contextCSN.
#[test]
fn a_present_phase_after_the_changelog_trimmed_a_delete_still_ends_it() {
    consumer_away_past_the_changelog(None);
}

/// The same for a consumer bound as a replicator that access rules
/// restrict but let read the suffix's contextCSN: the cookie may name
/// what that attribute tells it anyway.
#[test]
fn a_replicator_that_reads_the_context_csn_gets_deletes_past_the_changelog() {
    let rules = "[access]\nrules = ['to * by * read']\n";
    consumer_away_past_the_changelog(Some(rules));
}

/// A delete while the consumer is stopped and its tombstone trimmed
/// before it comes back; with `rules`, it binds as `cn=repl`.
fn consumer_away_past_the_changelog(rules: Option<&str>) {
    ldap_utils();
    let config = "[syncrepl]\nprovider = true\n[replication]\nchangelog_max_age_s = 1\ntrim_interval_s = 1\n";
    let s = Server::start_with_config(2, &format!("{config}{}", rules.unwrap_or("")));
    let mut root = s.admin();
    let repl = format!("cn=repl,{SUFFIX}");
    let mut attrs = person_attrs("repl");
    attrs.push(("userPassword", ["replpw"].into()));
    assert_eq!(root.add(&repl, attrs).unwrap().rc, 0);
    let dn = format!("cn=brief,{SUFFIX}");
    assert_eq!(root.add(&dn, person_attrs("brief")).unwrap().rc, 0);
    let mut consumer = match rules {
        Some(_) => Consumer::bound(&s, "refreshAndPersist", (SUFFIX, SUFFIX), (&repl, "replpw")),
        None => Consumer::new(&s, "refreshAndPersist"),
    };
    same_content(&s, &consumer);
    consumer.stop();
    let (_, _, _, cookie) = refresh_of(&s, SUFFIX, None);
    let uuid: uuid::Uuid = get_entry(&mut root, &dn, vec!["entryUUID"]).unwrap().attrs["entryUUID"][0].parse().unwrap();
    assert_eq!(root.delete(&dn).unwrap().rc, 0);
    wait_for("the delete's tombstone to be trimmed", || {
        let (code, _, deleted, _) = refresh_of(&s, SUFFIX, cookie.clone());
        code == 0 && !deleted.contains(&uuid)
    });
    consumer.start();
    same_content(&s, &consumer);
}

/// Issue 19: a provider restored from an older backup left its consumer
/// ahead for good: the consumer's cookie named changes the provider no
/// longer had, so nothing was sent and slapd kept the entries the
/// provider lost. A cookie naming a change of this server between the
/// newest the backup held and the restore now gets everything as if it
/// had none, in a present phase whose cookie is past the restore, so
/// slapd deletes what was not present; changes after the restore follow.
/// (A write after the restore, before the consumer returns, already made
/// the present phase's cookie newer than the consumer's.)
/// (Entries the lost history deleted or modified slapd does not take
/// back: it ignores an entry whose entryCSN is older than its cookie.)
#[test]
fn a_provider_restored_from_an_older_backup_refreshes_its_consumer() {
    ldap_utils();
    for kind in ["refreshAndPersist", "refreshOnly"] {
        let mut s = provider(2);
        let mut root = s.admin();
        assert_eq!(root.add(&format!("cn=kept,{SUFFIX}"), person_attrs("kept")).unwrap().rc, 0);
        let backup = s.dir.path().join("backup");
        let (code, out, err) = ctl(&s, &["backup", backup.to_str().unwrap()]);
        assert_eq!(code, 0, "{out}{err}");
        for cn in ["lost", "lost-too"] {
            assert_eq!(root.add(&format!("cn={cn},{SUFFIX}"), person_attrs(cn)).unwrap().rc, 0);
        }
        let mut consumer = Consumer::new(&s, kind);
        same_content(&s, &consumer);
        consumer.stop();
        s.stop();
        std::fs::remove_dir_all(s.data()).unwrap();
        crate::mirror::restore_into(&s, &backup);
        s.launch();
        consumer.start();
        same_content(&s, &consumer);
        // Back again with the cookie that refresh ended with, nothing
        // changed since: no entry is sent whole again (a present phase
        // names them only).
        consumer.stop();
        consumer.start();
        let ended = if kind == "refreshOnly" { "LDAP_RES_SEARCH_RESULT" } else { "LDAP_RES_INTERMEDIATE - REFRESH_" };
        wait_for("the consumer's refresh to end", || consumer.log().contains(ended));
        assert!(!consumer.log().contains("(LDAP_SYNC_ADD)"), "{kind}: entries sent whole again");
        let mut root = s.admin();
        assert_eq!(root.add(&format!("cn=later,{SUFFIX}"), person_attrs("later")).unwrap().rc, 0);
        same_content(&s, &consumer);
    }
}
