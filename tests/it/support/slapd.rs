//! Debian's slapd, started by a test on a local socket.

use super::*;

/// Debian's slapd listening on a local socket only, its suffix entry in
/// place, `global` (lines before its database) in its configuration, and
/// one access rule (`rule`): the test process's peercred identity may
/// write, anyone may read. Killed on drop.
pub struct LocalSlapd {
    pub dir: tempfile::TempDir,
    child: Option<Child>,
    pub rule: String,
}

impl LocalSlapd {
    pub fn start(global: &str) -> LocalSlapd {
        slapd_installed();
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("db")).unwrap();
        // SAFETY: plain getters.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let rule = format!(
            "to * by dn.exact=\"gidNumber={gid}+uidNumber={uid},cn=peercred,cn=external,cn=auth\" write by * read"
        );
        let mut s = LocalSlapd { dir, child: None, rule };
        s.restart(global);
        let suffix =
            format!("dn: {SUFFIX}\nobjectClass: dcObject\nobjectClass: organization\ndc: example\no: example\n");
        let (code, _, err) = tool("ldapadd", &["-x", "-H", &s.url(), "-D", ROOT_DN, "-w", ROOT_PW], Some(&suffix));
        assert_eq!(code, 0, "{err}");
        s
    }

    /// (Re)starts it on its database with `global` in its configuration.
    pub fn restart(&mut self, global: &str) {
        self.stop();
        let dir = self.dir.path();
        let includes = slapd_schema_includes(dir);
        let conf = format!(
            "{includes}pidfile {d}/slapd.pid\nmodulepath /usr/lib/ldap\nmoduleload back_mdb\n{global}\
             database mdb\nsuffix \"{SUFFIX}\"\nrootdn \"{ROOT_DN}\"\nrootpw {ROOT_PW}\ndirectory {d}/db\n\
             access {rule}\n",
            d = dir.display(),
            rule = self.rule,
        );
        std::fs::write(dir.join("slapd.conf"), conf).unwrap();
        let log = std::fs::File::create(dir.join("slapd.log")).unwrap();
        let child = Command::new("slapd")
            .arg("-f")
            .arg(dir.join("slapd.conf"))
            .args(["-h", &self.url(), "-d", "stats"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("slapd");
        self.child = Some(child);
        let socket = dir.join("ldapi");
        wait_for("slapd's local socket", || std::os::unix::net::UnixStream::connect(&socket).is_ok());
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_file(self.dir.path().join("ldapi"));
    }

    pub fn url(&self) -> String {
        format!("ldapi://{}", self.dir.path().join("ldapi").display().to_string().replace('/', "%2F"))
    }
}

impl Drop for LocalSlapd {
    fn drop(&mut self) {
        self.stop();
    }
}
