//! RFC 4533 interop: a stock OpenLDAP slapd (Debian's, installed when
//! missing) replicates from coredir with its `syncrepl` directive, in
//! refreshAndPersist and refreshOnly mode, loading `coredir schema export`.

use crate::support::*;
use ldap3::{LdapConn, Mod};
use ldap3_proto::proto::LdapMsg;
use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};

mod persist;
mod refresh;
mod slapd;

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
            // -M: slapd's glue entries (a consumer told of an entry below
            // a parent it lacks) are entries too, and must not be there.
            &["-LLL", "-M", "-o", "ldif-wrap=no", "-b", base, "(objectClass=*)", "*", "entryUUID", "entryCSN"],
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
