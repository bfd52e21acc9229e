//! The test fixture: a real `coredir serve` process with its own data
//! directory and its own port (the kernel picks it; the server prints it),
//! driven by real clients.

use ldap3::{LdapConn, Scope, SearchEntry};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

mod raw;
mod slapd;
pub use raw::*;
pub use slapd::LocalSlapd;

pub const ROOT_DN: &str = "cn=admin,dc=example,dc=com";
pub const ROOT_PW: &str = "test-root-secret";
pub const SUFFIX: &str = "dc=example,dc=com";
pub const PEOPLE: &str = "ou=people,dc=example,dc=com";

pub struct Server {
    child: Option<Child>,
    pub port: u16,
    pub shards: usize,
    pub dir: tempfile::TempDir,
    pub stderr: PathBuf,
    /// Extra `serve` arguments (`--config FILE`).
    pub extra: Vec<String>,
    /// What the server printed before its `listening on` line.
    pub banner: String,
    /// Extra environment variables (the test clock offset).
    pub env: Vec<(String, String)>,
}

/// The storage engine the integration tests run against: `lmdb`, or the
/// one named by `COREDIR_TEST_ENGINE` (the `engines` test re-runs the whole
/// suite with `sled`).
pub fn engine() -> String {
    std::env::var("COREDIR_TEST_ENGINE").unwrap_or_else(|_| "lmdb".into())
}

/// A configuration text with `storage.engine` set to the engine under test.
pub fn with_engine(toml: &str) -> String {
    let mut table: toml::Table = toml.parse().expect("test configuration is TOML");
    let storage = table.entry("storage").or_insert_with(|| toml::Value::Table(Default::default()));
    storage.as_table_mut().expect("[storage] is a table").insert("engine".into(), engine().into());
    table.to_string()
}

impl Server {
    pub fn start(shards: usize) -> Server {
        Server::start_with_config(shards, "")
    }

    /// A server with this TOML configuration file (plus the engine under test).
    pub fn start_with_config(shards: usize, toml: &str) -> Server {
        let mut s = Server::prepare(shards, toml);
        s.launch();
        s
    }

    /// `start_with_config` without the start: its data directory can be
    /// filled first (`coredir restore`).
    /// A server whose shard `shard` pauses `ms` between stamping and
    /// committing each batch (`COREDIR_TEST_COMMIT_DELAY_MS`).
    pub fn start_with_commit_delay(shards: usize, toml: &str, shard: usize, ms: u64) -> Server {
        let mut s = Server::prepare(shards, toml);
        s.env.push(("COREDIR_TEST_COMMIT_DELAY_MS".into(), format!("{shard}:{ms}")));
        s.launch();
        s
    }

    pub fn prepare(shards: usize, toml: &str) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let stderr = dir.path().join("stderr.log");
        let config = dir.path().join("coredir.toml");
        std::fs::write(&config, with_engine(toml)).unwrap();
        let extra = vec!["--config".to_string(), config.display().to_string()];
        // A port of its own for the life of the test, kept across restarts:
        // a client still holding a killed server's address must never reach
        // another test's server that the kernel gave the same port.
        let port = free_port();
        Server { child: None, port, shards, dir, stderr, extra, banner: String::new(), env: Vec::new() }
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("coredir.toml")
    }

    pub fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Loads the suffix, `ou=people` and `entries` (LDIF records) with
    /// `coredir import` into the empty data directory, then starts.
    pub fn import_and_launch(&mut self, entries: &str) {
        let head = format!(
            "dn: {SUFFIX}\nobjectClass: dcObject\nobjectClass: organization\ndc: example\no: Example\n\n\
             dn: {PEOPLE}\nobjectClass: organizationalUnit\nou: people\n\n"
        );
        let file = self.data().with_extension("ldif");
        std::fs::write(&file, head + entries).unwrap();
        let (data, conf) = (self.data().display().to_string(), self.config_path().display().to_string());
        let shards = self.shards.to_string();
        let (ok, err) =
            coredir(&["import", "--config", &conf, "--data", &data, "--shards", &shards, file.to_str().unwrap()]);
        assert!(ok, "{err}");
        self.launch();
    }

    /// Runs `coredir serve` on the existing data directory and waits for
    /// its `listening on` line.
    pub fn launch(&mut self) {
        let extra: Vec<&str> = self.extra.iter().map(String::as_str).collect();
        let (child, port, banner) = spawn_on(self.port, &self.data(), self.shards, &self.stderr, &extra, &self.env)
            .unwrap_or_else(|e| panic!("{e}"));
        self.child = Some(child);
        self.port = port;
        self.banner = banner;
    }

    /// Waits for the server to exit on its own; its exit code.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let child = self.child.as_mut()?;
        let deadline = std::time::Instant::now() + limit;
        loop {
            if let Some(status) = child.try_wait().ok()? {
                self.child = None;
                return status.code();
            }
            if std::time::Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub fn url(&self) -> String {
        format!("ldap://127.0.0.1:{}", self.port)
    }

    pub fn conn(&self) -> LdapConn {
        LdapConn::new(&self.url()).expect("connect")
    }

    pub fn admin(&self) -> LdapConn {
        let mut c = self.conn();
        c.simple_bind(ROOT_DN, ROOT_PW).unwrap().success().unwrap();
        c
    }

    /// SIGKILL, as a crash would.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stops the server (SIGKILL) and leaves it stopped.
    pub fn stop(&mut self) {
        self.kill9();
    }

    pub fn restart(&mut self) {
        self.kill9();
        self.launch();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Starts the server binary; returns it and its port, or what it printed.
pub fn spawn(data: &Path, shards: usize, stderr: &Path, extra: &[&str]) -> Result<(Child, u16), String> {
    spawn_with_banner(data, shards, stderr, extra).map(|(c, p, _)| (c, p))
}

/// `spawn`, also returning the lines printed before `listening on`.
pub fn spawn_with_banner(
    data: &Path,
    shards: usize,
    stderr: &Path,
    extra: &[&str],
) -> Result<(Child, u16, String), String> {
    spawn_on(0, data, shards, stderr, extra, &[])
}

/// `spawn_with_banner` on `port` (0: the kernel's pick), with extra
/// environment variables.
pub fn spawn_on(
    port: u16,
    data: &Path,
    shards: usize,
    stderr: &Path,
    extra: &[&str],
    env: &[(String, String)],
) -> Result<(Child, u16, String), String> {
    // Appended: earlier runs' lines stay readable after a restart.
    let err_file = std::fs::OpenOptions::new().create(true).append(true).open(stderr).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_coredir"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--data"])
        .arg(data)
        .args(["--shards", &shards.to_string()])
        .args(extra)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("COREDIR_ROOT_PASSWORD", ROOT_PW)
        .stdout(Stdio::piped())
        .stderr(err_file)
        .spawn()
        .expect("spawn coredir");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = String::new();
    while let Some(Ok(line)) = lines.next() {
        if let Some(rest) = line.strip_prefix("coredir: listening on ") {
            let addr = rest.split_whitespace().next().unwrap();
            let port = addr.rsplit(':').next().unwrap().parse().unwrap();
            // Keep draining stdout so the server never blocks on it.
            std::thread::spawn(move || for _ in lines {});
            // A test that keeps one server for long says how long (`TEST_DEADLINE`).
            let limit = env.iter().find(|(k, _)| k == TEST_DEADLINE).and_then(|(_, v)| v.parse().ok());
            watchdog(child.id(), port, stderr.to_path_buf(), limit.map_or_else(deadline, Duration::from_secs));
            return Ok((child, port, seen));
        }
        seen.push_str(&line);
        seen.push('\n');
    }
    let _ = child.wait();
    let mut err = String::new();
    let _ = std::fs::File::open(stderr).and_then(|mut f| f.read_to_string(&mut err));
    Err(format!("coredir did not start.\nstdout:\n{seen}\nstderr:\n{err}"))
}

/// How long one server process may live: `COREDIR_TEST_DEADLINE_S` (0:
/// no deadline), or 300 s (the whole integration suite takes about as
/// long, and no other test keeps one server for more than a minute). Past
/// it, the test waiting on the server is stuck. A test that keeps one
/// server for the whole run (the conformance corpus: 4 minutes alone on a
/// slow 2-CPU machine, more beside the rest of the suite) sets its own in
/// the server's environment under this name.
pub const TEST_DEADLINE: &str = "COREDIR_TEST_DEADLINE_S";

fn deadline() -> Duration {
    let secs = std::env::var(TEST_DEADLINE).ok().and_then(|s| s.parse().ok());
    Duration::from_secs(secs.unwrap_or(300))
}

/// Every wait of a test on the server gets a deadline: a server still alive
/// past `deadline()` is described (its threads, its sockets' queues, its
/// stacks when gdb is there, its log) and killed, so the client waiting on
/// it gets an error instead of hanging the suite. The process is known by
/// its pid and start time, so a pid the kernel gave to another process
/// after the test stopped this one is left alone.
fn watchdog(pid: u32, port: u16, stderr: PathBuf, limit: Duration) {
    let started = start_time(pid);
    if limit.is_zero() {
        return;
    }
    std::thread::spawn(move || {
        std::thread::sleep(limit);
        let alive = std::fs::read_to_string(format!("/proc/{pid}/stat")).map(|s| !s.contains(") Z ")).unwrap_or(false);
        if started.is_none() || start_time(pid) != started || !alive {
            return;
        }
        eprintln!("coredir pid {pid} (port {port}) outlived the test deadline of {limit:?}; killing it");
        eprintln!("{}", describe(pid, port, &stderr));
        // SAFETY: a signal to the process this test started (same pid, same start time).
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    });
}

/// Field 22 of /proc/PID/stat: when the process started, in clock ticks.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 2..];
    after_name.split_whitespace().nth(19)?.parse().ok()
}

/// What a stuck server is doing: each thread's state and wait channel, the
/// send and receive queues of its port's sockets, its stacks, its log.
fn describe(pid: u32, port: u16, stderr: &Path) -> String {
    let mut out = String::new();
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for task in tasks.flatten() {
            let path = task.path();
            let read = |f: &str| std::fs::read_to_string(path.join(f)).unwrap_or_default();
            let stat = read("stat");
            let state = stat.rsplit(") ").next().unwrap_or("").split_whitespace().next().unwrap_or("?").to_string();
            out +=
                &format!("thread {}: {} state {state} wchan {}\n", path.display(), read("comm").trim(), read("wchan"));
        }
    }
    let run =
        |cmd: &mut Command| cmd.output().map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
    out += &run(Command::new("ss").args(["-tni", &format!("( sport = :{port} or dport = :{port} )")]));
    out += &run(Command::new("timeout").args([
        "30",
        "gdb",
        "-p",
        &pid.to_string(),
        "-batch",
        "-ex",
        "thread apply all bt",
    ]));
    let log = std::fs::read_to_string(stderr).unwrap_or_default();
    let tail: Vec<&str> = log.lines().rev().take(40).collect();
    out += &tail.into_iter().rev().collect::<Vec<_>>().join("\n");
    out
}

/// The attributes of a `person` named `cn` (sn "x"), for an add.
pub fn person_attrs(cn: &str) -> Vec<(&str, std::collections::HashSet<&str>)> {
    vec![("objectClass", ["person"].into()), ("cn", [cn].into()), ("sn", ["x"].into())]
}

/// Distinguished names of a subtree search, sorted.
pub fn search_dns(c: &mut LdapConn, base: &str, scope: Scope, filter: &str) -> Vec<String> {
    let (entries, _) = c.search(base, scope, filter, vec!["1.1"]).unwrap().success().unwrap();
    let mut dns: Vec<String> = entries.into_iter().map(|e| SearchEntry::construct(e).dn).collect();
    dns.sort();
    dns
}

pub fn get_entry(c: &mut LdapConn, dn: &str, attrs: Vec<&str>) -> Option<SearchEntry> {
    let res = c.search(dn, Scope::Base, "(objectClass=*)", attrs).unwrap();
    if res.1.rc == 32 {
        return None;
    }
    let (mut entries, _) = res.success().unwrap();
    entries.pop().map(SearchEntry::construct)
}

/// The ManageDsaIT control (RFC 3296): referral objects and glue entries
/// are then entries like any other.
pub fn manage_dsa_it() -> ldap3::controls::RawControl {
    ldap3::controls::RawControl { ctype: "2.16.840.1.113730.3.4.2".into(), crit: false, val: None }
}

/// `get_entry` with ManageDsaIT: glue entries too.
pub fn get_entry_managed(c: &mut LdapConn, dn: &str, attrs: Vec<&str>) -> Option<SearchEntry> {
    let res = c.with_controls(manage_dsa_it()).search(dn, Scope::Base, "(objectClass=*)", attrs).unwrap();
    if res.1.rc == 32 {
        return None;
    }
    let (mut entries, _) = res.success().unwrap();
    entries.pop().map(SearchEntry::construct)
}

/// An inetOrgPerson under ou=people.
pub fn add_user(c: &mut LdapConn, uid: &str) -> ldap3::LdapResult {
    let dn = format!("uid={uid},{PEOPLE}");
    let cn = format!("User {uid}");
    let pw = format!("pw-{uid}");
    c.add(
        &dn,
        vec![
            ("objectClass", ["top", "person", "organizationalPerson", "inetOrgPerson"].into()),
            ("uid", [uid].into()),
            ("cn", [cn.as_str()].into()),
            ("sn", ["User"].into()),
            ("userPassword", [pw.as_str()].into()),
        ],
    )
    .unwrap()
}

/// `n` device entries `cn={prefix}{i}` under ou=people, each with a
/// description of `desc_len` bytes (large searches).
pub fn add_devices(c: &mut LdapConn, prefix: &str, n: usize, desc_len: usize) {
    let desc = "x".repeat(desc_len);
    for i in 0..n {
        let cn = format!("{prefix}{i}");
        let attrs = vec![
            ("objectClass", ["device"].into()),
            ("cn", [cn.as_str()].into()),
            ("description", [desc.as_str()].into()),
        ];
        let res = c.add(&format!("cn={cn},{PEOPLE}"), attrs).unwrap();
        assert_eq!(res.rc, 0, "{res:?}");
    }
}

/// The OpenLDAP command-line clients, installed from Debian when missing.
pub fn ldap_utils() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        if Command::new("ldapsearch").arg("-VV").output().is_ok() {
            return;
        }
        let ok = Command::new("sh")
            .args([
                "-c",
                "(apt-get install -y ldap-utils || (apt-get update && apt-get install -y ldap-utils)) >/dev/null 2>&1",
            ])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            ok,
            "ldap-utils is missing and `apt-get install -y ldap-utils` failed; install it to run the interop tests"
        );
    });
}

/// OpenLDAP's `slappasswd` with the pw-sha2, pw-pbkdf2 and argon2 modules
/// (Debian's slapd and slapd-contrib), installed when missing. Debian's
/// policy-rc.d keeps the package from starting a slapd service.
pub fn slappasswd(args: &[&str]) -> String {
    slapd_installed();
    let out = Command::new("slappasswd").args(args).output().expect("slappasswd");
    assert!(out.status.success(), "slappasswd {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Debian's slapd and slapd-contrib, installed when missing.
pub fn slapd_installed() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        if Path::new("/usr/lib/ldap/pw-pbkdf2.la").exists() && Command::new("slappasswd").arg("-VV").output().is_ok() {
            return;
        }
        let install =
            "apt-get install -y slapd slapd-contrib || (apt-get update && apt-get install -y slapd slapd-contrib)";
        let ok = Command::new("sh")
            .args(["-c", &format!("({install}) >/dev/null 2>&1")])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "slapd is missing and `apt-get install -y slapd slapd-contrib` failed");
    });
}

/// The `include` lines that give a slapd in `dir` coredir's schema:
/// Debian's core, cosine, inetorgperson and nis files, then what
/// `coredir schema export` defines beyond them (written into `dir`).
pub fn slapd_schema_includes(dir: &Path) -> String {
    let files = ["core", "cosine", "inetorgperson", "nis"].map(|f| format!("/etc/ldap/schema/{f}.schema"));
    let mut export = Command::new(env!("CARGO_BIN_EXE_coredir"));
    export.args(["schema", "export"]);
    for f in &files {
        export.args(["--skip", f]);
    }
    let out = export.output().unwrap();
    assert!(out.status.success(), "coredir schema export: {}", String::from_utf8_lossy(&out.stderr));
    let extra = dir.join("coredir.schema");
    std::fs::write(&extra, &out.stdout).unwrap();
    files.iter().chain(std::iter::once(&extra.display().to_string())).map(|f| format!("include {f}\n")).collect()
}

/// Runs an OpenLDAP client tool; returns (exit code, stdout, stderr).
pub fn tool(name: &str, args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
    ldap_utils();
    let mut child = Command::new(name)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut input = child.stdin.take().unwrap();
    // Written from a thread of its own: a tool that answers as it reads
    // (ldapadd) would otherwise fill its output pipe and wait forever.
    let text = stdin.unwrap_or_default().to_string();
    let writer = std::thread::spawn(move || std::io::Write::write_all(&mut input, text.as_bytes()));
    let out = child.wait_with_output().unwrap();
    let _ = writer.join();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// Pins the calling thread to one CPU (so SO_INCOMING_CPU steers its
/// connections to that CPU's shard).
pub fn pin_to_cpu(cpu: usize) -> bool {
    // SAFETY: plain libc calls on a zeroed cpu_set_t.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: as above.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set);
        (0..libc::CPU_SETSIZE as usize).filter(|c| libc::CPU_ISSET(*c, &set)).collect()
    }
}

/// `coredir ARGS` (an offline tool: import, export, backup, ...): whether
/// it succeeded, and its stderr.
pub fn coredir(args: &[&str]) -> (bool, String) {
    let out =
        Command::new(env!("CARGO_BIN_EXE_coredir")).args(args).env("COREDIR_ROOT_PASSWORD", ROOT_PW).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// `coredir ctl ARGS` against a running server: exit code, stdout, stderr.
pub fn ctl(s: &Server, args: &[&str]) -> (i32, String, String) {
    let socket = s.data().join("admin.sock");
    let out = Command::new(env!("CARGO_BIN_EXE_coredir"))
        .arg("ctl")
        .arg("--socket")
        .arg(&socket)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// `coredir ctl --json ARGS`, parsed.
pub fn ctl_json(s: &Server, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let (code, out, err) = ctl(s, &all);
    assert_eq!(code, 0, "ctl {args:?}: {out}{err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// Waits up to 30 s for `f` to hold (a bounded wait, not a timing test).
pub fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A port on 127.0.0.1 that nothing listens on now and that no other test
/// is given, in this process or in another one running the suite at the
/// same time (the sled run of `engines` is one): a server restarted after
/// a kill must find its port free. Ports come from below the kernel's
/// ephemeral range, so no `bind(0)` and no outgoing connection takes one,
/// and each is held by a lock on a file for the life of the process (a
/// lock, unlike the file, goes with a killed process: nothing is left
/// behind that could refuse a later run).
pub fn free_port() -> u16 {
    static HELD: std::sync::Mutex<Vec<(u16, std::fs::File)>> = std::sync::Mutex::new(Vec::new());
    let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
    // One directory per user: another user's would refuse our lock files.
    // SAFETY: getuid has no preconditions.
    let dir = std::env::temp_dir().join(format!("coredir-test-ports-{}", unsafe { libc::getuid() }));
    std::fs::create_dir_all(&dir).unwrap();
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let (low, high) = (10_000u16, ephemeral.min(32768));
    assert!(high > low + 1000, "the ephemeral port range starts at {ephemeral}: no room below it for test ports");
    let span = (high - low) as u32;
    let start = std::process::id().wrapping_mul(7919) % span;
    for step in 0..span {
        let port = low + ((start + step) % span) as u16;
        if held.iter().any(|(p, _)| *p == port) || std::net::TcpListener::bind(("127.0.0.1", port)).is_err() {
            continue;
        }
        let Ok(file) = std::fs::File::options().create(true).write(true).open(dir.join(port.to_string())) else {
            continue;
        };
        if file.try_lock().is_ok() {
            held.push((port, file));
            return port;
        }
    }
    panic!("no free test port in {low}..{high}");
}

/// A groupOfNames `cn=<cn>` of `n` members uid=m0.., under the suffix; its DN.
pub fn big_group(admin: &mut ldap3::LdapConn, cn: &str, n: usize) -> String {
    let dn = format!("cn={cn},{SUFFIX}");
    let members: Vec<String> = (0..n).map(|i| format!("uid=m{i},{PEOPLE}")).collect();
    let group = vec![
        ("objectClass", ["groupOfNames"].into()),
        ("cn", [cn].into()),
        ("member", members.iter().map(String::as_str).collect()),
    ];
    assert_eq!(admin.add(&dn, group).unwrap().rc, 0);
    dn
}

/// The DNs of a subtree search in the order sent (paged by `page`).
pub fn dns_in_order(c: &mut ldap3::LdapConn, base: &str, filter: &str, page: Option<i32>) -> Vec<String> {
    let entries = match page {
        None => c.search(base, ldap3::Scope::Subtree, filter, vec!["1.1"]).unwrap().success().unwrap().0,
        Some(size) => {
            let adapters: Vec<Box<dyn ldap3::adapters::Adapter<_, _>>> =
                vec![Box::new(ldap3::adapters::EntriesOnly::new()), Box::new(ldap3::adapters::PagedResults::new(size))];
            let mut stream =
                c.streaming_search_with(adapters, base, ldap3::Scope::Subtree, filter, vec!["1.1"]).unwrap();
            let mut all = Vec::new();
            while let Some(e) = stream.next().unwrap() {
                all.push(e);
            }
            stream.result().success().unwrap();
            all
        }
    };
    entries.into_iter().map(|e| ldap3::SearchEntry::construct(e).dn).collect()
}

/// `n` entries `cn=b{i},ou=big` of 1 MB each.
pub fn add_big_entries(admin: &mut ldap3::LdapConn, n: usize) {
    let big = "x".repeat(1 << 20);
    let ou = vec![("objectClass", ["organizationalUnit"].into()), ("ou", ["big"].into())];
    assert_eq!(admin.add(&format!("ou=big,{SUFFIX}"), ou).unwrap().rc, 0);
    for i in 0..n {
        let cn = format!("b{i}");
        let entry = vec![
            ("objectClass", ["person"].into()),
            ("cn", [cn.as_str()].into()),
            ("sn", ["x"].into()),
            ("description", [big.as_str()].into()),
        ];
        assert_eq!(admin.add(&format!("cn=b{i},ou=big,{SUFFIX}"), entry).unwrap().rc, 0);
    }
}

/// A connection whose client reads nothing, with a 4 KB receive buffer:
/// what the server answers stays queued on its side.
pub fn unread_client(s: &Server) -> std::net::TcpStream {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    sock.connect(&std::net::SocketAddr::from(([127, 0, 0, 1], s.port)).into()).unwrap();
    sock.into()
}
