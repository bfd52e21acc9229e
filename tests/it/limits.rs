use crate::support::*;
use ldap3::{Scope, SearchOptions};
use std::io::Read;

#[test]
fn server_size_limit_binds_all_but_the_root_dn() {
    let s = Server::start_with_config(1, "[limits]\nsize_limit = 5\n");
    let mut admin = s.admin();
    for i in 0..10 {
        assert_eq!(add_user(&mut admin, &format!("l{i}")).rc, 0);
    }
    let mut anon = s.conn();
    let res = anon.search(PEOPLE, Scope::OneLevel, "(uid=l*)", vec!["1.1"]).unwrap();
    assert_eq!((res.1.rc, res.0.len()), (4, 5), "sizeLimitExceeded after the server's limit");
    anon.with_search_options(SearchOptions::new().sizelimit(3));
    let res = anon.search(PEOPLE, Scope::OneLevel, "(uid=l*)", vec!["1.1"]).unwrap();
    assert_eq!((res.1.rc, res.0.len()), (4, 3), "a client may ask for less");
    let res = admin.search(PEOPLE, Scope::OneLevel, "(uid=l*)", vec!["1.1"]).unwrap();
    assert_eq!((res.1.rc, res.0.len()), (0, 10), "the root DN is not limited");
}

#[test]
fn idle_connections_are_closed() {
    let s = Server::start_with_config(1, "[limits]\nidle_timeout_s = 1\n");
    let mut sock = std::net::TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    // Generous: the test waits for the close, it does not time it.
    sock.set_read_timeout(Some(std::time::Duration::from_secs(60))).unwrap();
    let mut buf = [0u8; 64];
    assert_eq!(sock.read(&mut buf).unwrap(), 0, "the server closes an idle connection");
    // Busy connections are not idle.
    let mut c = s.conn();
    for _ in 0..3 {
        assert_eq!(search_dns(&mut c, PEOPLE, Scope::Base, "(objectClass=*)").len(), 1);
    }
}
