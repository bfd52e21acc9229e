//! Hostile clients: deep nesting, invalid UTF-8, and a client that sends
//! without reading. Each gets its error or a disconnection, and a
//! well-behaved client on another connection is served throughout.

use crate::support::*;
use ldap3::asn1::ASNTag;
use ldap3::{LdapConn, Scope};
use ldap3_proto::proto::*;
use ldap3_proto::LdapResultCode;
use std::io::Write;
use std::time::{Duration, Instant};

mod clients;
mod cost;
mod input;

/// A SearchRequest PDU built by hand (so its bytes can be invalid),
/// subtree unless `base_scope`, with an already encoded filter.
fn raw_search(msgid: u8, base: &[u8], base_scope: bool, filter: Vec<u8>) -> Vec<u8> {
    let body = [
        tlv(0x04, base),
        tlv(0x0a, &[if base_scope { 0 } else { 2 }]),
        tlv(0x0a, &[0]),
        tlv(0x02, &[0]),
        tlv(0x02, &[0]),
        tlv(0x01, &[0]),
        filter,
        tlv(0x30, &[]),
    ]
    .concat();
    tlv(0x30, &[tlv(0x02, &[msgid]), tlv(0x63, &body)].concat())
}

/// A SearchRequest (msgid 2) whose filter is `depth` nested NOTs around `(cn=x)`.
fn nested_not_search(depth: usize) -> Vec<u8> {
    let mut filter = tlv(0xa3, &[tlv(0x04, b"cn"), tlv(0x04, b"x")].concat());
    for _ in 0..depth {
        filter = tlv(0xa2, &filter);
    }
    raw_search(2, PEOPLE.as_bytes(), false, filter)
}

/// The next message or None when the server closed the connection.
fn outcome(r: &mut Raw) -> Option<LdapMsg> {
    r.recv()
}

fn is_disconnect(m: &Option<LdapMsg>) -> bool {
    match m {
        None => true,
        Some(m) => matches!(&m.op, LdapOp::ExtendedResponse(e) if e.name.as_deref() == Some("1.3.6.1.4.1.1466.20036")),
    }
}

fn bound_raw(s: &Server) -> Raw {
    let mut r = Raw::connect(s);
    r.send(vec![LdapMsg::new(1, bind(ROOT_DN, ROOT_PW))]);
    assert!(matches!(r.recv().unwrap().op, LdapOp::BindResponse(b) if b.res.code == LdapResultCode::Success));
    r
}

/// A ModifyRequest (replace description with `value`) by hand, with
/// `controls` (already encoded, `[0]` included) after it.
fn raw_modify(msgid: u8, dn: &str, value: &str, controls: &[u8]) -> Vec<u8> {
    let change = tlv(
        0x30,
        &[tlv(0x0a, &[2]), tlv(0x30, &[tlv(0x04, b"description"), tlv(0x31, &tlv(0x04, value.as_bytes()))].concat())]
            .concat(),
    );
    let op = tlv(0x66, &[tlv(0x04, dn.as_bytes()), tlv(0x30, &change)].concat());
    tlv(0x30, &[tlv(0x02, &[msgid]), op, controls.to_vec()].concat())
}

fn description(s: &Server, dn: &str) -> Vec<String> {
    let mut c = s.admin();
    let (rs, _) = c.search(dn, ldap3::Scope::Base, "(objectClass=*)", vec!["description"]).unwrap().success().unwrap();
    ldap3::SearchEntry::construct(rs[0].clone()).attrs.remove("description").unwrap_or_default()
}

/// The BER of a filter string, as an Assertion control carries it.
fn filter_ber(text: &str) -> Vec<u8> {
    let tag = ldap3::parse_filter(text).unwrap();
    let mut buf = bytes::BytesMut::new();
    ldap3::asn1::write::encode_into(&mut buf, tag.into_structure()).unwrap();
    buf.to_vec()
}

/// A connection bound as a new user `uid` (added by `admin`).
fn user_conn(s: &Server, admin: &mut ldap3::LdapConn, uid: &str) -> ldap3::LdapConn {
    assert_eq!(add_user(admin, uid).rc, 0);
    let mut user = s.conn();
    user.simple_bind(&format!("uid={uid},{PEOPLE}"), &format!("pw-{uid}")).unwrap().success().unwrap();
    user
}

/// A base search of `dn`: how many entries came back, and the result code.
fn base_search(c: &mut ldap3::LdapConn, dn: &str, filter: &str) -> (usize, u32) {
    counted_search(c, dn, ldap3::Scope::Base, filter)
}

/// A search: how many entries came back, and the result code.
fn counted_search(c: &mut ldap3::LdapConn, base: &str, scope: ldap3::Scope, filter: &str) -> (usize, u32) {
    let r = c.search(base, scope, filter, vec!["1.1"]).unwrap();
    (r.0.len(), r.1.rc)
}

/// 100 refreshAndPersist searches of the entry `base` with `filter`.
fn sync_searches(base: &str, filter: &str) -> Vec<LdapMsg> {
    let (attr, value) = filter.split_once('=').unwrap();
    let filter = match value {
        "*" => LdapFilter::Present(attr.into()),
        _ => LdapFilter::Substring(
            attr.into(),
            LdapSubstringFilter { initial: Some(value.trim_end_matches('*').into()), any: vec![], final_: None },
        ),
    };
    let sync = ldap3_proto::control::LdapControl::SyncRequest {
        criticality: true,
        mode: SyncRequestMode::RefreshAndPersist,
        cookie: None,
        reload_hint: false,
    };
    let op = LdapSearchRequest {
        base: base.into(),
        scope: LdapSearchScope::Base,
        aliases: LdapDerefAliases::Never,
        sizelimit: 0,
        timelimit: 0,
        typesonly: false,
        filter,
        attrs: vec![],
    };
    (1..=100).map(|msgid| LdapMsg { msgid, op: LdapOp::SearchRequest(op.clone()), ctrl: vec![sync.clone()] }).collect()
}

/// The most the server's anonymous memory (kB) grew past `before`,
/// sampled every 100 ms for `secs` seconds.
fn peak_growth(s: &Server, before: u64, secs: u64) -> u64 {
    let mut most = 0;
    let until = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < until {
        most = most.max(proc_kib(s, "RssAnon:").saturating_sub(before));
        std::thread::sleep(Duration::from_millis(100));
    }
    most
}

/// A field of the server's /proc status in kB (`VmRSS:`, `RssAnon:`).
fn proc_kib(s: &Server, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", s.pid())).unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap().to_string();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// `n` connections that read nothing, each having asked for every entry
/// below `ou=big` (`add_big_entries`).
fn clients_reading_no_big_entries(s: &Server, n: usize) -> Vec<std::net::TcpStream> {
    let base = format!("ou=big,{SUFFIX}");
    (0..n)
        .map(|_| {
            let mut sock = unread_client(s);
            let all = LdapMsg { msgid: 1, op: search(&base, LdapSearchScope::OneLevel), ctrl: vec![] };
            sock.write_all(&encode_msgs(vec![all])).unwrap();
            sock
        })
        .collect()
}
