//! Wire-level behaviour, with hand-built PDUs over a plain TCP socket.

use crate::support::*;
use ldap3_proto::control::LdapControl;
use ldap3_proto::proto::*;
use ldap3_proto::LdapResultCode;
use std::io::Write;

fn result_code(op: &LdapOp) -> Option<LdapResultCode> {
    Some(match op {
        LdapOp::SearchResultDone(r)
        | LdapOp::AddResponse(r)
        | LdapOp::ModifyResponse(r)
        | LdapOp::DelResponse(r)
        | LdapOp::ModifyDNResponse(r)
        | LdapOp::CompareResult(r) => r.code.clone(),
        LdapOp::BindResponse(b) => b.res.code.clone(),
        LdapOp::ExtendedResponse(e) => e.res.code.clone(),
        _ => return None,
    })
}

#[test]
fn pipelined_requests_all_answered() {
    let s = Server::start(2);
    let mut r = Raw::connect(&s);
    let mut msgs = vec![LdapMsg::new(1, bind(ROOT_DN, ROOT_PW))];
    for id in 2..102 {
        let op = match id % 4 {
            0 => search(SUFFIX, LdapSearchScope::Subtree),
            1 => search(PEOPLE, LdapSearchScope::Base),
            2 => whoami(),
            _ => LdapOp::CompareRequest(LdapCompareRequest {
                dn: PEOPLE.into(),
                atype: "ou".into(),
                val: b"people".to_vec(),
            }),
        };
        msgs.push(LdapMsg::new(id, op));
    }
    r.send(msgs);
    let mut done = std::collections::BTreeSet::new();
    while done.len() < 101 {
        let m = r.recv().expect("connection closed early");
        if let Some(code) = result_code(&m.op) {
            assert!(matches!(code, LdapResultCode::Success | LdapResultCode::CompareTrue), "{m:?}");
            assert!(done.insert(m.msgid), "msgid {} answered twice", m.msgid);
        }
    }
    assert_eq!(done.into_iter().collect::<Vec<_>>(), (1..102).collect::<Vec<_>>());
}

/// Answers written straight to the socket and those queued for the
/// writer task never interleave: a client that reads nothing while big
/// searches and small requests pile up (so writes in place are cut short
/// and what is left is queued, and later answers queue behind it) then
/// reads every message whole, each search's entries before its result,
/// every request answered once.
#[test]
fn answers_written_in_place_and_queued_never_interleave() {
    // Entries of 1 MiB, 6 MiB a search: a few searches hold all of a
    // connection's room (4 MiB), so one waits for room with an entry cut
    // short on the socket while others have theirs.
    const ENTRIES: usize = 6;
    let s = Server::start(1);
    add_big_entries(&mut s.admin(), ENTRIES);
    let sock = unread_client(&s);
    sock.set_read_timeout(Some(std::time::Duration::from_secs(60))).unwrap();
    let mut r = Raw::over(sock);
    let big_base = format!("ou=big,{SUFFIX}");
    const N: i32 = 24;
    let msgs = (1..=N)
        .map(|id| {
            let op = match id % 3 {
                0 => search(&big_base, LdapSearchScope::OneLevel),
                1 => whoami(),
                _ => search(PEOPLE, LdapSearchScope::Base),
            };
            LdapMsg::new(id, op)
        })
        .collect();
    r.send(msgs);
    let mut entries = std::collections::HashMap::<i32, usize>::new();
    let mut done = std::collections::BTreeSet::new();
    while done.len() < N as usize {
        let m = r.recv().expect("connection closed early");
        assert!(!done.contains(&m.msgid), "msgid {} answered after its result", m.msgid);
        match &m.op {
            LdapOp::SearchResultEntry(e) => {
                if m.msgid % 3 == 0 {
                    assert_eq!(e.attributes.iter().find(|a| a.atype == "description").unwrap().vals[0].len(), 1 << 20);
                }
                *entries.entry(m.msgid).or_default() += 1;
            }
            op => {
                let code = result_code(op).unwrap_or_else(|| panic!("{m:?}"));
                assert_eq!(code, LdapResultCode::Success, "{m:?}");
                let want = match m.msgid % 3 {
                    0 => ENTRIES,
                    1 => 0,
                    _ => 1,
                };
                assert_eq!(entries.get(&m.msgid).copied().unwrap_or(0), want, "entries of msgid {}", m.msgid);
                done.insert(m.msgid);
            }
        }
    }
}

#[test]
fn abandon_stops_a_running_search() {
    let s = Server::start(2);
    let mut c = s.admin();
    for i in 0..3000 {
        let dn = format!("cn=e{i},{PEOPLE}");
        let name = format!("e{i}");
        let desc = "x".repeat(200);
        let res = c
            .add(
                &dn,
                vec![
                    ("objectClass", ["device"].into()),
                    ("cn", [name.as_str()].into()),
                    ("description", [desc.as_str()].into()),
                ],
            )
            .unwrap();
        assert_eq!(res.rc, 0);
    }
    let mut r = Raw::connect(&s);
    // The abandon arrives in the same packet as the search, so it is seen
    // before the search's first chunk is done.
    r.send(vec![LdapMsg::new(1, search(PEOPLE, LdapSearchScope::Subtree)), LdapMsg::new(2, LdapOp::AbandonRequest(1))]);
    r.send(vec![LdapMsg::new(3, whoami())]);
    let mut entries = 0;
    loop {
        let m = r.recv().expect("closed");
        match (&m.msgid, &m.op) {
            (1, LdapOp::SearchResultEntry(_)) => entries += 1,
            (1, other) => panic!("an abandoned search must not be answered (after {entries} entries): {other:?}"),
            (3, LdapOp::ExtendedResponse(_)) => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    // Wait for the whoami of a second round to be sure nothing else arrives.
    r.send(vec![LdapMsg::new(4, whoami())]);
    loop {
        let m = r.recv().expect("closed");
        match m.msgid {
            1 if matches!(m.op, LdapOp::SearchResultEntry(_)) => entries += 1,
            4 => break,
            _ => panic!("unexpected {m:?}"),
        }
    }
    assert!(entries < 3001, "the search ran to the end ({entries} entries)");
}

#[test]
fn unknown_extended_operation_and_critical_control() {
    let s = Server::start(1);
    let mut r = Raw::connect(&s);
    r.send(vec![LdapMsg::new(
        1,
        LdapOp::ExtendedRequest(LdapExtendedRequest { name: "1.2.3.4.5".into(), value: None }),
    )]);
    let m = r.recv().unwrap();
    assert_eq!(result_code(&m.op), Some(LdapResultCode::ProtocolError));
    let critical = LdapControl::Unknown { oid: "1.2.3.4.5.6".into(), criticality: true, value: None };
    let lax = LdapControl::Unknown { oid: "1.2.3.4.5.6".into(), criticality: false, value: None };
    r.send(vec![LdapMsg::new_with_ctrls(2, search(PEOPLE, LdapSearchScope::Base), vec![critical.clone()])]);
    assert_eq!(result_code(&r.recv().unwrap().op), Some(LdapResultCode::UnavailableCriticalExtension));
    r.send(vec![LdapMsg::new_with_ctrls(3, LdapOp::DelRequest(PEOPLE.into()), vec![critical])]);
    assert_eq!(result_code(&r.recv().unwrap().op), Some(LdapResultCode::UnavailableCriticalExtension));
    r.send(vec![LdapMsg::new_with_ctrls(4, search(PEOPLE, LdapSearchScope::Base), vec![lax])]);
    assert!(matches!(r.recv().unwrap().op, LdapOp::SearchResultEntry(_)));
    assert_eq!(result_code(&r.recv().unwrap().op), Some(LdapResultCode::Success));
    // LDAPv2 binds are refused.
    r.send(vec![LdapMsg::new(
        5,
        LdapOp::BindRequest(LdapBindRequest { version: 2, dn: "".into(), cred: LdapBindCred::Simple("".into()) }),
    )]);
    assert_eq!(result_code(&r.recv().unwrap().op), Some(LdapResultCode::ProtocolError));
}

/// Sends raw bytes; expects a Notice of Disconnection, then the close.
fn expect_disconnect(s: &Server, bytes: &[u8]) {
    let mut r = Raw::connect(s);
    r.sock.write_all(bytes).unwrap();
    let m = r.recv().expect("a notice of disconnection");
    match &m.op {
        LdapOp::ExtendedResponse(e) => {
            assert_eq!(m.msgid, 0);
            assert_eq!(e.name.as_deref(), Some("1.3.6.1.4.1.1466.20036"));
            assert_eq!(e.res.code, LdapResultCode::ProtocolError);
        }
        other => panic!("expected a notice of disconnection, got {other:?}"),
    }
    assert!(r.recv().is_none(), "the connection must be closed");
}

#[test]
fn bad_pdus_close_only_their_connection() {
    let s = Server::start(2);
    let mut good = s.admin();
    expect_disconnect(&s, b"\x04\x03abc");
    expect_disconnect(&s, b"\x30\x80\x00\x00");
    expect_disconnect(&s, b"\x30\x84\x7f\xff\xff\xff");
    expect_disconnect(&s, b"\x30\x03\x02\x01\x01");
    expect_disconnect(&s, b"\x30\x06\x02\x01\x01\x63\x01\xff");
    // Over the anonymous limit (256 KiB) before a bind is accepted.
    let mut r = Raw::connect(&s);
    let big = LdapOp::CompareRequest(LdapCompareRequest {
        dn: PEOPLE.into(),
        atype: "description".into(),
        val: vec![b'x'; 300 << 10],
    });
    r.send(vec![LdapMsg::new(1, big.clone())]);
    assert!(matches!(r.recv().unwrap().op, LdapOp::ExtendedResponse(_)));
    assert!(r.recv().is_none());
    // ...and after a bind, up to 4 MiB.
    let mut r = Raw::connect(&s);
    r.send(vec![LdapMsg::new(1, bind(ROOT_DN, ROOT_PW)), LdapMsg::new(2, big)]);
    assert_eq!(result_code(&r.recv().unwrap().op), Some(LdapResultCode::Success));
    assert_eq!(result_code(&r.recv().unwrap().op), Some(LdapResultCode::NoSuchAttribute));
    // A response sent as a request is a protocol error.
    let mut r = Raw::connect(&s);
    r.send(vec![LdapMsg::new(
        1,
        LdapOp::DelResponse(LdapResult {
            code: LdapResultCode::Success,
            matcheddn: "".into(),
            message: "".into(),
            referral: vec![],
        }),
    )]);
    assert!(matches!(r.recv().unwrap().op, LdapOp::ExtendedResponse(_)));
    assert!(r.recv().is_none());
    // A client that drops mid-PDU.
    let mut r = Raw::connect(&s);
    r.sock.write_all(b"\x30\x50\x02\x01").unwrap();
    drop(r);
    // The well-behaved client was served throughout.
    assert_eq!(search_dns(&mut good, PEOPLE, ldap3::Scope::Base, "(objectClass=*)").len(), 1);
    assert_eq!(add_user(&mut good, "still-fine").rc, 0);
}

#[test]
fn unbind_closes() {
    let s = Server::start(1);
    let mut r = Raw::connect(&s);
    r.send(vec![LdapMsg::new(1, LdapOp::UnbindRequest)]);
    assert!(r.recv().is_none());
}

#[test]
fn too_many_pending_operations_get_busy() {
    let s = Server::start_with_config(1, "[storage]\nsync = \"never\"\n[limits]\nmax_pending = 3\nsize_limit = 0\n");
    let mut c = s.admin();
    add_devices(&mut c, "p", 1200, 200);
    // Twenty large searches in one packet: each needs several chunks, so
    // the first three are still running when the others arrive.
    let mut r = Raw::connect(&s);
    r.send((1..=20).map(|id| LdapMsg::new(id, search(PEOPLE, LdapSearchScope::Subtree))).collect());
    let (mut ok, mut busy) = (0, 0);
    while ok + busy < 20 {
        let m = r.recv().expect("connection closed early");
        match result_code(&m.op) {
            Some(LdapResultCode::Success) => ok += 1,
            Some(LdapResultCode::Busy) => busy += 1,
            Some(other) => panic!("{other:?}"),
            None => {}
        }
    }
    assert_eq!((ok, busy), (3, 17));
    // Once they are done the connection takes new work again.
    r.send(vec![LdapMsg::new(21, search(PEOPLE, LdapSearchScope::Base))]);
    loop {
        let m = r.recv().expect("closed");
        if let Some(code) = result_code(&m.op) {
            assert_eq!((m.msgid, code), (21, LdapResultCode::Success));
            break;
        }
    }
}

/// `server.allow_bind_v2`, as slapd's `allow bind_v2`: LDAPv2 binds work,
/// anonymous and simple; other versions stay protocol errors.
#[test]
fn ldapv2_binds_when_allowed() {
    let s = Server::start_with_config(1, "[server]\nallow_bind_v2 = true\n");
    let mut r = Raw::connect(&s);
    let v = |version, dn: &str, pw: &str| {
        LdapOp::BindRequest(LdapBindRequest { version, dn: dn.into(), cred: LdapBindCred::Simple(pw.into()) })
    };
    r.send(vec![LdapMsg::new(1, v(2, "", ""))]);
    assert_eq!(result_code(&r.recv().unwrap().op), Some(LdapResultCode::Success));
    r.send(vec![LdapMsg::new(2, v(2, ROOT_DN, ROOT_PW))]);
    assert_eq!(result_code(&r.recv().unwrap().op), Some(LdapResultCode::Success));
    r.send(vec![LdapMsg::new(3, v(2, ROOT_DN, "wrong"))]);
    assert_eq!(result_code(&r.recv().unwrap().op), Some(LdapResultCode::InvalidCredentials));
    r.send(vec![LdapMsg::new(4, v(1, "", ""))]);
    assert_eq!(result_code(&r.recv().unwrap().op), Some(LdapResultCode::ProtocolError));
}
