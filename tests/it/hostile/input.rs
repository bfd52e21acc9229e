//! Malformed and odd input: nesting, bad UTF-8, controls, message IDs, edge values, requests that never complete.

use super::*;

#[test]
fn deep_nesting_and_bad_utf8() {
    let s = Server::start(2);
    let mut good = s.admin();
    // 100,000 nested NOTs: over the anonymous PDU limit, and after a bind
    // refused by nesting depth before it is decoded.
    for bound in [false, true] {
        let mut r = if bound { bound_raw(&s) } else { Raw::connect(&s) };
        r.sock.write_all(&nested_not_search(100_000)).unwrap();
        let m = outcome(&mut r);
        assert!(is_disconnect(&m), "bound={bound}: {m:?}");
    }
    // 100 NOTs decode and get adminLimitExceeded (the filter depth limit).
    let mut r = bound_raw(&s);
    r.sock.write_all(&nested_not_search(100)).unwrap();
    let m = outcome(&mut r).expect("a result");
    assert!(matches!(&m.op, LdapOp::SearchResultDone(d) if d.code == LdapResultCode::AdminLimitExceeded), "{m:?}");
    // Octets that are not UTF-8: a DN is invalidDNSyntax, a filter value
    // an assertion like any other (a directory string's is Undefined), as
    // slapd answers them (octets.cases); the connection stays up.
    let bad_dn = raw_search(3, b"uid=\xff\xfe,ou=people", true, tlv(0x87, b"objectClass"));
    let bad_filter =
        raw_search(4, PEOPLE.as_bytes(), false, tlv(0xa3, &[tlv(0x04, b"cn"), tlv(0x04, b"\xc3\x28")].concat()));
    for (pdu, code) in [(bad_dn, LdapResultCode::InvalidDNSyntax), (bad_filter, LdapResultCode::Success)] {
        let mut r = Raw::connect(&s);
        r.sock.write_all(&pdu).unwrap();
        let m = outcome(&mut r);
        assert!(matches!(&m, Some(m) if matches!(&m.op, LdapOp::SearchResultDone(d) if d.code == code)), "{m:?}");
    }
    assert_eq!(search_dns(&mut good, PEOPLE, ldap3::Scope::Base, "(objectClass=*)").len(), 1);
}

/// Issue 17: a malformed controls field was dropped, so a modify whose
/// critical Assertion did not hold was applied (at every truncation
/// point). Every truncation of the controls, a wrong `[0]` tag, a 2-byte
/// BOOLEAN and trailing data are a protocolError and a disconnect, and the
/// modify is not applied.
#[test]
fn malformed_controls_are_refused_not_dropped() {
    let s = Server::start(1);
    assert_eq!(add_user(&mut s.admin(), "m").rc, 0);
    let dn = format!("uid=m,{PEOPLE}");
    // A critical Assertion (sn=nobody) that does not hold.
    let filter = tlv(0xa3, &[tlv(0x04, b"sn"), tlv(0x04, b"nobody")].concat());
    let control = tlv(0x30, &[tlv(0x04, b"1.3.6.1.1.12"), tlv(0x01, &[0xff]), tlv(0x04, &filter)].concat());
    let controls = tlv(0xa0, &control);
    let mut r = bound_raw(&s);
    r.sock.write_all(&raw_modify(2, &dn, "held", &controls)).unwrap();
    assert!(
        matches!(outcome(&mut r), Some(LdapMsg { op: LdapOp::ModifyResponse(res), .. }) if res.code == LdapResultCode::AssertionFailed)
    );
    let mut bad: Vec<Vec<u8>> = (1..controls.len()).map(|cut| controls[..cut].to_vec()).collect();
    bad.push([&[0xa1][..], &controls[1..]].concat());
    let two_byte = tlv(0x30, &[tlv(0x04, b"1.3.6.1.1.12"), tlv(0x01, &[0, 0xff]), tlv(0x04, &filter)].concat());
    bad.push(tlv(0xa0, &two_byte));
    bad.push([controls.clone(), vec![0x04, 0x00]].concat());
    for (i, ctrls) in bad.iter().enumerate() {
        let mut r = bound_raw(&s);
        r.sock.write_all(&raw_modify(2, &dn, &format!("applied{i}"), ctrls)).unwrap();
        let m = outcome(&mut r);
        assert!(is_disconnect(&m), "case {i}: {m:?}");
    }
    assert!(description(&s, &dn).is_empty(), "no malformed modify was applied: {:?}", description(&s, &dn));
}

/// Issue 17: message ID 0 (reserved for notices) and negative IDs are
/// protocol errors; an Unbind ends the session whatever controls it
/// carries; a modify-DN whose newSuperior is not UTF-8 is invalidDNSyntax
/// (it returned 0 and did nothing).
#[test]
fn message_ids_unbind_controls_and_bad_utf8_names() {
    let s = Server::start(1);
    assert_eq!(add_user(&mut s.admin(), "n").rc, 0);
    for id in [vec![0u8], vec![0xff], vec![0x80, 0, 0, 0]] {
        let mut r = Raw::connect(&s);
        let op = tlv(0x60, &[tlv(0x02, &[3]), tlv(0x04, b""), tlv(0x80, b"")].concat());
        r.sock.write_all(&tlv(0x30, &[tlv(0x02, &id), op].concat())).unwrap();
        let m = outcome(&mut r);
        assert!(is_disconnect(&m), "message ID {id:?}: {m:?}");
    }
    let mut r = bound_raw(&s);
    let control = tlv(0xa0, &tlv(0x30, &[tlv(0x04, b"1.2.3.4"), tlv(0x01, &[0xff])].concat()));
    r.sock.write_all(&tlv(0x30, &[tlv(0x02, &[2]), vec![0x42, 0x00], control].concat())).unwrap();
    assert!(outcome(&mut r).is_none(), "an Unbind with controls closes the connection");

    let mut r = bound_raw(&s);
    let dn = format!("uid=n,{PEOPLE}");
    let op = tlv(
        0x6c,
        &[
            tlv(0x04, dn.as_bytes()),
            tlv(0x04, b"uid=n2"),
            tlv(0x01, &[0xff]),
            tlv(0x80, &[b'o', b'u', b'=', 0xc3, 0x28]),
        ]
        .concat(),
    );
    r.sock.write_all(&tlv(0x30, &[tlv(0x02, &[2]), op].concat())).unwrap();
    let m = outcome(&mut r);
    assert!(
        matches!(&m, Some(LdapMsg { msgid: 2, op: LdapOp::ModifyDNResponse(res), .. }) if res.code == LdapResultCode::InvalidDNSyntax),
        "{m:?}"
    );
    // The connection goes on, and nothing was renamed.
    r.send(vec![LdapMsg::new(3, search(&dn, LdapSearchScope::Base))]);
    assert!(matches!(outcome(&mut r).unwrap().op, LdapOp::SearchResultEntry(_)));
}

/// Any Bind first ends the earlier authentication, as slapd's `do_bind`,
/// also one refused before it is decoded (a DN that is not UTF-8): the
/// connection stayed bound as the root DN after such a Bind failed.
#[test]
fn a_bind_refused_for_its_dn_leaves_the_connection_anonymous() {
    let s = Server::start(1);
    let mut r = bound_raw(&s);
    let bind = [tlv(0x02, &[3]), tlv(0x04, b"uid=Jos\xe9,ou=people"), tlv(0x80, b"pw")].concat();
    r.send_bytes(&tlv(0x30, &[tlv(0x02, &[5]), tlv(0x60, &bind)].concat()));
    let m = r.recv().expect("an answer");
    assert!(matches!(&m.op, LdapOp::BindResponse(b) if b.res.code == LdapResultCode::InvalidDNSyntax), "{m:?}");
    r.send(vec![LdapMsg::new(6, whoami())]);
    let m = r.recv().expect("an answer");
    assert!(matches!(&m.op, LdapOp::ExtendedResponse(e) if e.value.as_deref() == Some(&b""[..])), "{m:?}");
}

/// A request that trickles in is cut off `limits.request_timeout_s` after
/// its first bytes, however slowly the rest comes; an idle connection
/// (nothing partly sent) stays, as `idle_timeout_s = 0` says.
#[test]
fn a_request_that_never_completes_is_cut_off() {
    use std::io::Read;
    let s = Server::start_with_config(1, "[limits]\nrequest_timeout_s = 2\n");
    let idle = std::net::TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    let mut slow = std::net::TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    let bind = encode_msgs(vec![LdapMsg { msgid: 1, op: crate::support::bind("", ""), ctrl: vec![] }]);
    slow.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    // One byte every half second: each read resets no deadline.
    let mut closed = false;
    for b in &bind[..bind.len() - 1] {
        if slow.write_all(&[*b]).is_err() {
            closed = true;
            break;
        }
        match slow.read(&mut [0u8; 64]) {
            Ok(0) => {
                closed = true;
                break;
            }
            Ok(_) => panic!("an answer to a request not yet sent"),
            Err(_) => {}
        }
    }
    assert!(closed, "a request sent over {} s was never cut off", bind.len() / 2);
    // The idle connection is still served.
    let mut raw = Raw::over(idle);
    raw.send(vec![LdapMsg { msgid: 1, op: whoami(), ctrl: vec![] }]);
    assert!(raw.recv().is_some(), "the idle connection was closed");
}

/// A refreshAndPersist search followed by another search with the same
/// message ID, then the client closes: the persist search ends with its
/// connection. Before, the second search took over the ID's Abandon flag
/// and removed it when done, so the first never learned the client had
/// gone: each such connection stayed open for good with its descriptors,
/// and 6,300 of them (anonymous) used up the process's file limit.
#[test]
fn a_persist_search_whose_message_id_is_reused_ends_with_its_connection() {
    let s = Server::start_with_config(1, "[syncrepl]\nprovider = true\n");
    for _ in 0..4 {
        let mut raw = Raw::connect(&s);
        let mut persist = sync_searches(SUFFIX, "objectClass=*").remove(0);
        persist.msgid = 2;
        raw.send(vec![persist, LdapMsg { msgid: 2, op: search(PEOPLE, LdapSearchScope::Base), ctrl: vec![] }]);
        // The plain search's answer: both have run.
        while !matches!(raw.recv_lenient().map(|m| m.op), Some(LdapOp::SearchResultDone(_)) | None) {}
        drop(raw);
    }
    wait_for("the closed connections to be gone", || ctl_json(&s, &["status"])["connections"] == 0);
}

/// Values that broke an invariant deep inside the server, sent by an
/// anonymous client: a time a leap second or a zone carries past year 9999
/// (`time`'s `+` panicked) in a filter, a compare and a DN, and an 8 KiB
/// DN of DN-valued RDNs nested 1,364 deep (each level a parse on the
/// reactor's stack). Each gets an answer, and the server serves on.
#[test]
fn values_at_the_edges_of_their_syntax_are_answered() {
    let s = Server::start(1);
    let mut c = LdapConn::new(&s.url()).unwrap();
    for filter in ["(createTimestamp>=99991231235960Z)", "(modifyTimestamp=9999123123-2359)"] {
        let res = c.search(SUFFIX, Scope::Base, filter, vec!["1.1"]).unwrap();
        assert_eq!(res.1.rc, 0, "{filter}: {res:?}");
    }
    assert!(c.compare(SUFFIX, "createTimestamp", "99991231235959-0001").is_ok());
    let res = c.search("createTimestamp=99991231235960Z", Scope::Base, "(objectClass=*)", vec!["1.1"]).unwrap();
    assert_ne!(res.1.rc, 0);
    let nested = format!("{}x", "owner=".repeat(1364));
    let res = c.search(&nested, Scope::Base, "(objectClass=*)", vec!["1.1"]).unwrap();
    assert_ne!(res.1.rc, 0);
    let (entries, _) =
        s.admin().search(SUFFIX, Scope::Base, "(objectClass=*)", vec!["1.1"]).unwrap().success().unwrap();
    assert_eq!(entries.len(), 1, "the server still serves");
}
