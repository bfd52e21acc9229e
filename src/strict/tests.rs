use super::*;

fn msg(id: &[u8], op: &[u8], controls: &[u8]) -> Vec<u8> {
    let mut body = vec![INTEGER, id.len() as u8];
    body.extend_from_slice(id);
    body.extend_from_slice(op);
    body.extend_from_slice(controls);
    let mut out = vec![SEQUENCE, body.len() as u8];
    out.extend(body);
    out
}

const UNBIND: &[u8] = &[0x42, 0x00];

/// As a server that offers the Sync Request control checks a frame, for
/// a requester who may act as anyone.
fn check(frame: &[u8]) -> Result<Check, &'static str> {
    super::check(frame, true, &|_| false)
}

#[test]
fn envelopes() {
    assert_eq!(check(&msg(&[1], UNBIND, &[])), Ok(Check::Ok));
    assert_eq!(check(&msg(&[0], UNBIND, &[])), Err("message ID out of range"));
    assert_eq!(check(&msg(&[0xFF], UNBIND, &[])), Err("negative message ID"));
    // Five bytes, even 2^31 - 1 with a leading zero: liblber reads four.
    assert_eq!(check(&msg(&[0x00, 0x80, 0, 0, 0], UNBIND, &[])), Err("bad message ID"));
    assert_eq!(check(&msg(&[0x00, 0x7F, 0xFF, 0xFF, 0xFF], UNBIND, &[])), Err("bad message ID"));
    // Constructed: no Unbind (slapd: unknown request).
    assert_eq!(check(&msg(&[1], &[0x62, 0x00], &[])), Err("not a request"));
    assert_eq!(check(&msg(&[0x7F, 0xFF, 0xFF, 0xFF], UNBIND, &[])), Ok(Check::Ok));
    // A control with type, criticality and value; then malformed ones.
    let good = [CONTROLS, 12, SEQUENCE, 10, OCTET_STRING, 3, b'1', b'.', b'2', BOOLEAN, 1, 0xFF, OCTET_STRING, 0];
    // An unknown control is left out unread (it does not apply).
    assert!(matches!(check(&msg(&[1], UNBIND, &good)), Ok(Check::Without(_))));
    let two_byte_bool = [CONTROLS, 9, SEQUENCE, 7, OCTET_STRING, 1, b'1', BOOLEAN, 2, 0, 0xFF];
    assert!(check(&msg(&[1], UNBIND, &two_byte_bool)).is_err());
    let wrong_tag = [0xA1, 2, SEQUENCE, 0];
    assert_eq!(check(&msg(&[1], UNBIND, &wrong_tag)), Err("trailing data after the operation"));
    let truncated = [CONTROLS, 5, SEQUENCE, 5, OCTET_STRING, 1, b'1'];
    assert!(check(&msg(&[1], UNBIND, &truncated)).is_err());
    let value_first = [CONTROLS, 10, SEQUENCE, 8, OCTET_STRING, 1, b'1', OCTET_STRING, 0, BOOLEAN, 1, 0];
    assert!(check(&msg(&[1], UNBIND, &value_first)).is_err());
}

#[test]
fn control_values_with_trailing_bytes() {
    let delete = t(0x4A, b"cn=x");
    let control = |value: &[u8]| {
        let oid = t(OCTET_STRING, b"1.3.6.1.1.12");
        let one = t(SEQUENCE, &[oid, t(OCTET_STRING, value)].concat());
        t(CONTROLS, &one)
    };
    let filter = t(0x87, b"cn");
    assert_eq!(check(&msg(&[3], &delete, &control(&filter))), Ok(Check::Ok));
    let trailing = [filter.as_slice(), &[0, 0]].concat();
    let refused = check(&msg(&[3], &delete, &control(&trailing)));
    assert!(matches!(refused, Ok(Check::Refuse { msgid: 3, tag: 0x6B, code: LdapResultCode::ProtocolError, .. })));
    // Not a control coredir knows: left out, its value unread.
    let other = t(SEQUENCE, &[t(OCTET_STRING, b"1.2.3"), t(OCTET_STRING, &trailing)].concat());
    let without = check(&msg(&[3], &delete, &t(CONTROLS, &other)));
    assert_eq!(without, Ok(Check::Without(msg(&[3], &delete, &[]))));
}

#[test]
fn integers_ldap3_proto_would_misread_are_refused() {
    let search = |size: &[u8], control: Vec<u8>| {
        let fields = [t(OCTET_STRING, b""), t(0x0A, &[0]), t(0x0A, &[0]), t(INTEGER, size), t(INTEGER, &[0])];
        let body = [fields.concat(), t(BOOLEAN, &[0]), t(0x87, b"cn"), t(SEQUENCE, &[])].concat();
        check(&msg(&[5], &t(0x63, &body), &control))
    };
    let refused =
        |c: Result<Check, &'static str>| matches!(c, Ok(Check::Refuse { code: LdapResultCode::ProtocolError, .. }));
    assert_eq!(search(&[0x7F], Vec::new()), Ok(Check::Ok));
    assert_eq!(search(&[0, 0x80, 0, 0, 0][..4], Vec::new()), Ok(Check::Ok));
    // -1 (read as 255) is answered, as slapd ("invalid size limit"); 2^32
    // + 1 (read as 1) and 2^31 take five bytes, which slapd disconnects on.
    assert!(refused(search(&[0xFF], Vec::new())));
    for bad in [&[1, 0, 0, 0, 1][..], &[0, 0x80, 0, 0, 0], &[]] {
        assert!(search(bad, Vec::new()).is_err(), "{bad:?}");
    }
    let paged = |value: Vec<u8>| {
        let one = t(SEQUENCE, &[t(OCTET_STRING, b"1.2.840.113556.1.4.319"), t(OCTET_STRING, &value)].concat());
        search(&[0], t(CONTROLS, &one))
    };
    assert_eq!(paged(t(SEQUENCE, &[t(INTEGER, &[5]), t(OCTET_STRING, b"")].concat())), Ok(Check::Ok));
    assert!(refused(paged(t(SEQUENCE, &[t(INTEGER, &[0xFF]), t(OCTET_STRING, b"")].concat()))));
    assert!(refused(paged(t(SEQUENCE, &[t(INTEGER, &[5]), t(OCTET_STRING, b""), t(INTEGER, &[1])].concat()))));
    // An Abandon of -1 (read as 255) is ignored, as slapd does; of 2^32 + 7
    // (read as 7) ends the connection, as there.
    assert_eq!(check(&msg(&[6], &t(ABANDON, &[7]), &[])), Ok(Check::Ok));
    assert_eq!(check(&msg(&[6], &t(ABANDON, &[0xFF]), &[])), Ok(Check::Ignore));
    assert!(check(&msg(&[6], &t(ABANDON, &[1, 0, 0, 0, 7]), &[])).is_err());
    assert!(check(&msg(&[6], &t(0x42, b"xx"), &[])).is_err());
    let bind = |version: &[u8]| t(0x60, &[t(INTEGER, version), t(OCTET_STRING, b""), t(0x80, b"")].concat());
    assert_eq!(check(&msg(&[6], &bind(&[3]), &[])), Ok(Check::Ok));
    assert!(check(&msg(&[6], &bind(&[1, 0, 0, 0, 3]), &[])).is_err());
    assert_eq!(check(&msg(&[6], &t(0x42, &[]), &[])), Ok(Check::Ok));
}

/// A base-scoped search of the root for `(cn=*)`, no attributes asked.
fn search_cn_present() -> Vec<u8> {
    let fields = [t(OCTET_STRING, b""), t(0x0A, &[0]), t(0x0A, &[0]), t(INTEGER, &[0]), t(INTEGER, &[0])];
    t(0x63, &[fields.concat(), t(BOOLEAN, &[0]), t(0x87, b"cn"), t(SEQUENCE, &[])].concat())
}

/// A control the operation's own parser will refuse (Relax with a value)
/// is left for it to answer: a later unknown critical control is not
/// refused here first, and nothing after the refused one is read.
#[test]
fn a_control_parse_refuses_is_answered_before_later_ones() {
    let delete = t(0x4A, b"cn=x");
    let relax = t(SEQUENCE, &[t(OCTET_STRING, b"1.3.6.1.4.1.4203.666.5.12"), t(OCTET_STRING, b"")].concat());
    let unknown = t(SEQUENCE, &[t(OCTET_STRING, b"1.2.3.4"), t(BOOLEAN, &[0xFF])].concat());
    let both = [relax.clone(), unknown.clone()].concat();
    assert_eq!(
        check(&msg(&[9], &delete, &t(CONTROLS, &both))),
        Ok(Check::Refusing(msg(&[9], &delete, &t(CONTROLS, &relax))))
    );
    // The other way round, the unknown one is refused where it stands.
    let both = [unknown.clone(), relax].concat();
    assert!(matches!(
        check(&msg(&[9], &delete, &t(CONTROLS, &both))),
        Ok(Check::Refuse { code: LdapResultCode::UnavailableCriticalExtension, .. })
    ));
    // Search Options without flags, then with domain scope: parse takes
    // both (they fill one place once), so nothing is left to it and the
    // unknown critical control after them is refused.
    let options = |flags: u8| {
        let value = t(SEQUENCE, &t(INTEGER, &[flags]));
        t(SEQUENCE, &[t(OCTET_STRING, b"1.2.840.113556.1.4.1340"), t(OCTET_STRING, &value)].concat())
    };
    let three = [options(0), options(1), unknown].concat();
    assert!(matches!(
        check(&msg(&[9], &search_cn_present(), &t(CONTROLS, &three))),
        Ok(Check::Refuse { code: LdapResultCode::UnavailableCriticalExtension, .. })
    ));
}

/// A Proxied Authorization the requester may not use is answered (123,
/// by dispatch) before a later control is refused: as for a control parse
/// refuses, nothing after it is read.
#[test]
fn a_denied_proxied_authorization_is_answered_before_later_controls() {
    let delete = t(0x4A, b"cn=x");
    let proxy = t(
        SEQUENCE,
        &[t(OCTET_STRING, b"2.16.840.1.113730.3.4.18"), t(BOOLEAN, &[0xFF]), t(OCTET_STRING, b"dn:")].concat(),
    );
    let unknown = t(SEQUENCE, &[t(OCTET_STRING, b"1.2.3.4"), t(BOOLEAN, &[0xFF])].concat());
    let frame = msg(&[9], &delete, &t(CONTROLS, &[proxy.clone(), unknown.clone()].concat()));
    assert_eq!(super::check(&frame, true, &|_| true), Ok(Check::Refusing(msg(&[9], &delete, &t(CONTROLS, &proxy)))));
    assert!(matches!(
        super::check(&frame, true, &|_| false),
        Ok(Check::Refuse { code: LdapResultCode::UnavailableCriticalExtension, .. })
    ));
}

/// On an operation it does not apply to, a control without a value is left out
/// when not critical (slapd ignores it) and refused when critical; the
/// message without it keeps the other controls.
#[test]
fn a_valueless_control_that_does_not_apply_is_left_out() {
    let delete = t(0x4A, b"cn=x");
    let paged = t(SEQUENCE, &t(OCTET_STRING, b"1.2.840.113556.1.4.319"));
    let manage = t(SEQUENCE, &t(OCTET_STRING, b"2.16.840.1.113730.3.4.2"));
    let both = [paged.clone(), manage.clone()].concat();
    assert_eq!(
        check(&msg(&[9], &delete, &t(CONTROLS, &both))),
        Ok(Check::Without(msg(&[9], &delete, &t(CONTROLS, &manage))))
    );
    assert_eq!(check(&msg(&[9], &delete, &t(CONTROLS, &paged))), Ok(Check::Without(msg(&[9], &delete, &[]))));
    let critical = t(SEQUENCE, &[t(OCTET_STRING, b"1.2.840.113556.1.4.319"), t(BOOLEAN, &[0xFF])].concat());
    assert!(matches!(
        check(&msg(&[9], &delete, &t(CONTROLS, &critical))),
        Ok(Check::Refuse { code: LdapResultCode::UnavailableCriticalExtension, .. })
    ));
    // Left out only once the rest passed: a rename to a newSuperior
    // that is not UTF-8 is refused, with or without such a control.
    let rename = t(
        0x6C,
        &[t(OCTET_STRING, b"cn=x"), t(OCTET_STRING, b"cn=y"), t(BOOLEAN, &[0xFF]), t(0x80, &[0xC3, 0x28])].concat(),
    );
    assert!(matches!(
        check(&msg(&[9], &rename, &t(CONTROLS, &paged))),
        Ok(Check::Refuse { code: LdapResultCode::InvalidDNSyntax, .. })
    ));
    // A long message keeps its length right.
    let mut len = Vec::new();
    push_len(&mut len, 300);
    assert_eq!(len, [0x82, 0x01, 0x2C]);
}

#[test]
fn a_paged_sort_or_sync_control_without_a_value_is_answered_not_dropped() {
    let search = |control: Vec<u8>| check(&msg(&[4], &search_cn_present(), &t(CONTROLS, &control)));
    for oid in [&b"1.2.840.113556.1.4.319"[..], b"1.2.840.113556.1.4.473", b"1.3.6.1.4.1.4203.1.9.1.1"] {
        let bare = t(SEQUENCE, &t(OCTET_STRING, oid));
        let refused = search(bare);
        assert!(matches!(refused, Ok(Check::Refuse { msgid: 4, tag: 0x65, code: LdapResultCode::ProtocolError, .. })));
        let critical = t(SEQUENCE, &[t(OCTET_STRING, oid), t(BOOLEAN, &[0xFF])].concat());
        assert!(matches!(search(critical), Ok(Check::Refuse { code: LdapResultCode::ProtocolError, .. })));
    }
    // Others that need no value pass on to their own parsers.
    assert_eq!(search(t(SEQUENCE, &t(OCTET_STRING, b"2.16.840.1.113730.3.4.2"))), Ok(Check::Ok));
    // Relax applies to updates only: left out of a search.
    let relax = search(t(SEQUENCE, &t(OCTET_STRING, b"1.3.6.1.4.1.4203.666.5.12")));
    assert!(matches!(relax, Ok(Check::Without(_))));
}

#[test]
fn matched_values_items_have_their_shapes() {
    let search = |value: Vec<u8>| {
        let fields = [t(OCTET_STRING, b""), t(0x0A, &[0]), t(0x0A, &[0]), t(INTEGER, &[0]), t(INTEGER, &[0])];
        let body = [fields.concat(), t(BOOLEAN, &[0]), t(0x87, b"cn"), t(SEQUENCE, &[])].concat();
        let control = t(SEQUENCE, &[t(OCTET_STRING, b"1.2.826.0.1.3344810.2.3"), t(OCTET_STRING, &value)].concat());
        check(&msg(&[1], &t(0x63, &body), &t(CONTROLS, &control)))
    };
    let eq = t(0xA3, &[t(OCTET_STRING, b"cn"), t(OCTET_STRING, b"x")].concat());
    assert_eq!(search(t(SEQUENCE, &eq)), Ok(Check::Ok));
    let three = t(0xA3, &[t(OCTET_STRING, b"cn"), t(OCTET_STRING, b"x"), t(OCTET_STRING, b"y")].concat());
    for bad in [t(SEQUENCE, &three), t(SEQUENCE, &t(0xA2, &eq)), eq.clone()] {
        assert!(matches!(search(bad), Ok(Check::Refuse { code: LdapResultCode::ProtocolError, .. })));
    }
}

/// A sort control needs a key, and each key is read as slapd reads it:
/// protocolError for an empty list or anything after a key's order, but
/// first noSuchAttribute or inappropriateMatching for a key slapd cannot
/// order by (it reads the first element as the type whatever its tag).
#[test]
fn sort_keys_have_their_shapes() {
    let search = |value: Vec<u8>| {
        let fields = [t(OCTET_STRING, b""), t(0x0A, &[0]), t(0x0A, &[0]), t(INTEGER, &[0]), t(INTEGER, &[0])];
        let body = [fields.concat(), t(BOOLEAN, &[0]), t(0x87, b"cn"), t(SEQUENCE, &[])].concat();
        let control = t(SEQUENCE, &[t(OCTET_STRING, b"1.2.840.113556.1.4.473"), t(OCTET_STRING, &value)].concat());
        check(&msg(&[1], &t(0x63, &body), &t(CONTROLS, &control)))
    };
    let key = t(SEQUENCE, &t(OCTET_STRING, b"createTimestamp"));
    assert_eq!(search(t(SEQUENCE, &key)), Ok(Check::Ok));
    let rule = t(0x80, b"caseIgnoreOrderingMatch");
    let reverse = t(SEQUENCE, &[t(OCTET_STRING, b"sn"), rule.clone(), t(0x81, &[0xFF])].concat());
    assert_eq!(search(t(SEQUENCE, &[key.clone(), reverse].concat())), Ok(Check::Ok));
    // cn has no ORDERING rule: answered at once, in the controls' order.
    let unordered_key = t(SEQUENCE, &t(OCTET_STRING, b"cn"));
    assert!(matches!(
        search(t(SEQUENCE, &unordered_key)),
        Ok(Check::Refuse { code: LdapResultCode::InappropriateMatching, .. })
    ));
    // reverseOrder is a BOOLEAN: one byte.
    let long_reverse = t(SEQUENCE, &[t(OCTET_STRING, b"createTimestamp"), t(0x81, &[0, 1])].concat());
    assert!(matches!(
        search(t(SEQUENCE, &long_reverse)),
        Ok(Check::Refuse { code: LdapResultCode::ProtocolError, .. })
    ));
    let int = t(INTEGER, &[1]);
    let after_rule = t(SEQUENCE, &[t(OCTET_STRING, b"cn"), rule.clone(), int.clone()].concat());
    let after_reverse = t(SEQUENCE, &[t(OCTET_STRING, b"cn"), rule, t(0x81, &[0xFF]), int.clone()].concat());
    let unordered = t(SEQUENCE, &[t(OCTET_STRING, b"cn"), int].concat());
    let untyped = t(SEQUENCE, &t(0x81, &[0xFF]));
    let refused = |value: Vec<u8>| match search(value) {
        Ok(Check::Refuse { code, .. }) => Some(code),
        _ => None,
    };
    for bad in [
        t(SEQUENCE, &[]),
        t(SEQUENCE, &t(OCTET_STRING, b"cn")),
        key.clone(),
        t(SEQUENCE, &after_rule),
        t(SEQUENCE, &[t(SEQUENCE, &t(OCTET_STRING, b"createTimestamp")), after_reverse].concat()),
    ] {
        assert_eq!(refused(bad), Some(LdapResultCode::ProtocolError));
    }
    assert_eq!(refused(t(SEQUENCE, &untyped)), Some(LdapResultCode::NoSuchAttribute));
    assert_eq!(refused(t(SEQUENCE, &[unordered, after_rule].concat())), Some(LdapResultCode::InappropriateMatching));
}

#[test]
fn filters_have_their_shapes() {
    let search = |filter: Vec<u8>| {
        let fields = [t(OCTET_STRING, b""), t(0x0A, &[0]), t(0x0A, &[0]), t(INTEGER, &[0]), t(INTEGER, &[0])];
        let body = [fields.concat(), t(BOOLEAN, &[0]), filter, t(SEQUENCE, &[])].concat();
        check(&msg(&[1], &t(0x63, &body), &[]))
    };
    let ava = |tag: u8, parts: &[&[u8]]| t(tag, &parts.iter().map(|p| t(OCTET_STRING, p)).collect::<Vec<_>>().concat());
    let eq = ava(0xA3, &[b"cn", b"x"]);
    let present = t(0x87, b"cn");
    let subs = |pieces: &[(u8, &[u8])]| {
        let inner: Vec<u8> = pieces.iter().flat_map(|(tag, v)| t(*tag, v)).collect();
        t(0xA4, &[t(OCTET_STRING, b"cn"), t(SEQUENCE, &inner)].concat())
    };
    let good = [
        eq.clone(),
        present.clone(),
        t(0xA0, &[eq.clone(), present.clone()].concat()),
        t(0xA1, &[]),
        t(0xA2, &eq),
        subs(&[(0x80, b"a"), (0x81, b"b"), (0x81, b"c"), (0x82, b"d")]),
        t(0xA9, &[t(0x81, b"caseExactMatch"), t(0x82, b"cn"), t(0x83, b"x"), t(0x84, &[0xFF])].concat()),
    ];
    for f in good {
        assert_eq!(search(f.clone()), Ok(Check::Ok), "{f:02x?}");
    }
    let bad = [
        t(0xA2, &[eq.clone(), present.clone()].concat()),
        ava(0xA3, &[b"cn", b"x", b"y"]),
        ava(0xA5, &[b"cn"]),
        subs(&[]),
        subs(&[(0x81, b"b"), (0x80, b"a")]),
        subs(&[(0x82, b"d"), (0x81, b"b")]),
        t(0xA9, &[t(0x83, b"x"), t(0x83, b"y")].concat()),
        t(0xA9, &[t(0x82, b"cn")].concat()),
        t(0xA9, &[t(0x82, b"cn"), t(0x83, b"x"), t(0x84, &[0]), t(0x85, b"")].concat()),
        t(0xAA, &[]),
    ];
    for f in bad {
        assert!(search(f.clone()).is_err(), "{f:02x?}");
    }
}

#[test]
fn dn_attributes_is_one_byte() {
    let search = |dn_attributes: &[u8]| {
        let filter = t(0xA9, &[t(0x82, b"cn"), t(0x83, b"x"), t(0x84, dn_attributes)].concat());
        let fields = [t(OCTET_STRING, b""), t(0x0A, &[0]), t(0x0A, &[0]), t(INTEGER, &[0]), t(INTEGER, &[0])];
        let body = [fields.concat(), t(BOOLEAN, &[0]), filter, t(SEQUENCE, &[])].concat();
        msg(&[1], &t(0x63, &body), &[])
    };
    assert_eq!(check(&search(&[0xFF])), Ok(Check::Ok));
    assert_eq!(check(&search(&[0, 0xFF])), Err("a BOOLEAN is one byte"));
}

fn t(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag, content.len() as u8];
    out.extend_from_slice(content);
    out
}

fn search(types_only: &[u8], trailing: &[u8]) -> Vec<u8> {
    let body = [
        t(OCTET_STRING, b""),
        t(0x0A, &[0]),
        t(0x0A, &[0]),
        t(INTEGER, &[0]),
        t(INTEGER, &[0]),
        t(BOOLEAN, types_only),
        t(0x87, b"cn"),
        t(SEQUENCE, b""),
        trailing.to_vec(),
    ]
    .concat();
    t(0x63, &body)
}

#[test]
fn operations() {
    assert_eq!(check(&msg(&[1], &search(&[0], b""), &[])), Ok(Check::Ok));
    assert_eq!(check(&msg(&[1], &search(&[0, 0], b""), &[])), Err("a BOOLEAN is one byte"));
    // A truncated element inside the operation.
    assert!(check(&msg(&[1], &search(&[0], &[OCTET_STRING, 5, 0]), &[])).is_err());
    // Extra fields, and a newSuperior under another tag.
    assert!(check(&msg(&[1], &search(&[0], &t(OCTET_STRING, b"x")), &[])).is_err());
    let other_tag = [t(OCTET_STRING, b"c=a"), t(OCTET_STRING, b"c=b"), t(BOOLEAN, &[0xFF]), t(0x81, b"c=z")];
    assert!(check(&msg(&[1], &t(MODIFY_DN, &other_tag.concat()), &[])).is_err());
    // A modify-DN to a newSuperior that is not UTF-8.
    let rename = [t(OCTET_STRING, b"c=a"), t(OCTET_STRING, b"c=b"), t(BOOLEAN, &[0xFF]), t(0x80, &[0xC3, 0x28])];
    let rename = t(MODIFY_DN, &rename.concat());
    assert!(matches!(check(&msg(&[7], &rename, &[])), Ok(Check::Refuse { msgid: 7, tag: 0x6D, .. })));
    // Every request's DN that is not UTF-8 is invalidDNSyntax, in the
    // response of its kind; a filter value that is not is carried on.
    let latin1 = b"uid=Jos\xe9";
    let bind = t(BIND, &[t(INTEGER, &[3]), t(OCTET_STRING, latin1), t(0x80, b"pw")].concat());
    let delete = t(0x4A, latin1);
    let compare = t(
        0x6E,
        &[t(OCTET_STRING, latin1), t(SEQUENCE, &[t(OCTET_STRING, b"cn"), t(OCTET_STRING, b"x")].concat())].concat(),
    );
    for (op, tag) in [(bind, 0x61), (delete, 0x6B), (compare, 0x6F)] {
        let refused = check(&msg(&[9], &op, &[]));
        assert!(
            matches!(refused, Ok(Check::Refuse { tag: t, code: LdapResultCode::InvalidDNSyntax, .. }) if t == tag),
            "{refused:?}"
        );
    }
    let filter = t(0xA3, &[t(OCTET_STRING, b"cn"), t(OCTET_STRING, b"Jos\xe9")].concat());
    let fields =
        [t(OCTET_STRING, b"o=x"), t(ENUMERATED, &[0]), t(ENUMERATED, &[0]), t(INTEGER, &[0]), t(INTEGER, &[0])];
    let search = t(SEARCH, &[fields.concat(), t(BOOLEAN, &[0]), filter, t(SEQUENCE, b"")].concat());
    assert_eq!(check(&msg(&[9], &search, &[])), Ok(Check::Ok));
}

/// What ldap3_proto reads by position inside a request has exactly
/// its fields: a compare's assertion of three elements used the later
/// ones, an add's attribute or a SASL bind's credentials with an extra
/// element were taken without it.
#[test]
fn inner_parts_have_their_fields() {
    let os = |v: &[u8]| t(OCTET_STRING, v);
    let seq = |parts: &[Vec<u8>]| t(SEQUENCE, &parts.concat());
    let compare = |ava: Vec<u8>| t(0x6E, &[os(b"c=a"), ava].concat());
    assert_eq!(check(&msg(&[1], &compare(seq(&[os(b"cn"), os(b"a")])), &[])), Ok(Check::Ok));
    assert!(check(&msg(&[1], &compare(seq(&[os(b"cn"), os(b"a"), os(b"x")])), &[])).is_err());
    let add = |attr: Vec<u8>| t(0x68, &[os(b"c=a"), seq(&[attr])].concat());
    assert_eq!(check(&msg(&[1], &add(seq(&[os(b"cn"), t(SET, &os(b"a"))])), &[])), Ok(Check::Ok));
    // An add's or a modify's parts are answered with protocolError, as slapd.
    let refused = |c| matches!(c, Ok(Check::Refuse { code: LdapResultCode::ProtocolError, .. }));
    assert!(refused(check(&msg(&[1], &add(seq(&[os(b"cn"), t(SET, &os(b"a")), os(b"x")])), &[]))));
    assert!(refused(check(&msg(&[1], &t(0x68, &os(b"cn=a")), &[]))));
    let modify = |change: Vec<u8>| t(0x66, &[os(b"c=a"), seq(&[change])].concat());
    let replace = |m: Vec<u8>| seq(&[t(ENUMERATED, &[2]), m]);
    assert_eq!(check(&msg(&[1], &modify(replace(seq(&[os(b"cn"), t(SET, b"")]))), &[])), Ok(Check::Ok));
    assert!(refused(check(&msg(&[1], &modify(replace(seq(&[os(b"cn"), t(SET, b""), os(b"x")]))), &[]))));
    let op4 = seq(&[t(ENUMERATED, &[4]), seq(&[os(b"cn"), t(SET, b"")])]);
    assert!(refused(check(&msg(&[1], &modify(op4), &[]))));
    let bind = |auth: Vec<u8>| t(0x60, &[t(INTEGER, &[3]), os(b""), auth].concat());
    assert_eq!(check(&msg(&[1], &bind(t(0xA3, &os(b"EXTERNAL"))), &[])), Ok(Check::Ok));
    assert_eq!(check(&msg(&[1], &bind(t(0xA3, &[os(b"EXTERNAL"), os(b"")].concat())), &[])), Ok(Check::Ok));
    assert!(check(&msg(&[1], &bind(t(0xA3, &[os(b"EXTERNAL"), t(INTEGER, &[1])].concat())), &[])).is_err());
    assert!(check(&msg(&[1], &bind(t(0xA3, &[os(b"EXTERNAL"), os(b""), os(b"")].concat())), &[])).is_err());
}

/// A Sync Request value is its mode (1 or 3), an optional cookie and
/// an optional reloadHint, in that order, and nothing else.
#[test]
fn sync_request_values_have_their_shape() {
    let shaped = |v: Vec<u8>| sync_shape(&tlv(&v).unwrap());
    let mode = |m: u8| t(ENUMERATED, &[m]);
    assert!(shaped(t(SEQUENCE, &mode(1))));
    assert!(shaped(t(SEQUENCE, &[mode(3), t(OCTET_STRING, b"rid=1"), t(BOOLEAN, &[0xFF])].concat())));
    assert!(shaped(t(SEQUENCE, &[mode(3), t(BOOLEAN, &[0])].concat())));
    for bad in [
        t(SEQUENCE, &mode(2)),
        t(SEQUENCE, &[mode(1), t(INTEGER, &[1])].concat()),
        t(SEQUENCE, &[mode(1), t(OCTET_STRING, b""), t(BOOLEAN, &[0]), t(OCTET_STRING, b"")].concat()),
        t(SEQUENCE, &[mode(1), t(BOOLEAN, &[0]), t(OCTET_STRING, b"")].concat()),
    ] {
        assert!(!shaped(bad.clone()), "{bad:?}");
    }
}

/// What slapd answers with protocolError and goes on from: a scope or
/// alias dereferencing out of range (before the filter is read), an
/// extended request of other fields than `[0]` name and `[1]` value (a
/// Password Modify whose value was tagged `[2]` ran without it, and
/// replaced the password with a generated one).
#[test]
fn out_of_range_fields_are_answered() {
    let os = |v: &[u8]| t(OCTET_STRING, v);
    let search = |scope: u8, deref: u8, filter: Vec<u8>| {
        let fields = [os(b""), t(ENUMERATED, &[scope]), t(ENUMERATED, &[deref]), t(INTEGER, &[0]), t(INTEGER, &[0])];
        check(&msg(&[2], &t(SEARCH, &[fields.concat(), t(BOOLEAN, &[0]), filter, t(SEQUENCE, &[])].concat()), &[]))
    };
    let answered =
        |c, want| matches!(c, Ok(Check::Refuse { tag, code: LdapResultCode::ProtocolError, .. }) if tag == want);
    assert_eq!(search(3, 3, t(0x87, b"cn")), Ok(Check::Ok));
    assert!(answered(search(4, 0, t(0x87, b"cn")), 0x65));
    assert!(answered(search(0, 4, t(0x87, b"cn")), 0x65));
    assert!(answered(search(4, 0, t(0xA2, &[])), 0x65), "before the filter");
    assert!(search(0, 0, t(0xA2, &[])).is_err());
    let exop = |fields: Vec<u8>| check(&msg(&[3], &t(0x77, &fields), &[]));
    let name = t(0x80, b"1.3.6.1.4.1.4203.1.11.1");
    assert_eq!(exop(name.clone()), Ok(Check::Ok));
    assert_eq!(exop([name.clone(), t(0x81, &t(SEQUENCE, &[]))].concat()), Ok(Check::Ok));
    for bad in [[name.clone(), t(0x82, b"x")].concat(), [name.clone(), name.clone()].concat(), os(b"1.2")] {
        assert!(answered(exop(bad), 0x78));
    }
}

/// A request's weight counts its elements: a search naming 1,000
/// one-byte attributes weighs about 128 KB, one value of 3,000 bytes
/// about its bytes; a control's value counts by its bytes.
#[test]
fn a_request_weighs_its_elements() {
    // `t` with lengths past 127 too.
    let t = |tag: u8, content: &[u8]| {
        let n = content.len();
        let mut out = match n {
            0..=127 => vec![tag, n as u8],
            _ => vec![tag, 0x82, (n >> 8) as u8, n as u8],
        };
        out.extend_from_slice(content);
        out
    };
    let os = |v: &[u8]| t(OCTET_STRING, v);
    let search = |attrs: Vec<u8>| {
        let fields = [os(b""), t(ENUMERATED, &[0]), t(ENUMERATED, &[0]), t(INTEGER, &[0]), t(INTEGER, &[0])];
        t(SEARCH, &[fields.concat(), t(BOOLEAN, &[0]), t(0x87, b"cn"), t(SEQUENCE, &attrs)].concat())
    };
    let msg = |op: Vec<u8>, controls: &[u8]| t(SEQUENCE, &[t(INTEGER, &[2]), op, controls.to_vec()].concat());
    let names = msg(search(os(b"a").repeat(1000)), &[]);
    assert_eq!(check(&names), Ok(Check::Ok));
    // The op, its 8 fields (the list among them) and the 1,000 names.
    assert_eq!(weight(&names), names.len() + PER_ELEMENT * (1 + 8 + 1000));
    let value = msg(search(os(&[b'a'; 3000])), &[]);
    assert_eq!(weight(&value), value.len() + PER_ELEMENT * (1 + 8 + 1));
    let control = t(SEQUENCE, &[os(b"1.2.840.113556.1.4.319"), os(&[0; 100])].concat());
    let controls = t(0xA0, &control);
    let with = msg(search(vec![]), &controls);
    let controls_len = controls.len();
    assert_eq!(weight(&with), with.len() + PER_ELEMENT * (1 + 8) + PER_ELEMENT / 2 * controls_len);
    // Empty names, two bytes each, weigh the most per byte; no request
    // weighs more than `MOST_WEIGHT_PER_BYTE` (what `conn::intake` leaves
    // unweighed relies on it).
    let empty = msg(search(os(b"").repeat(1000)), &[]);
    let dense = msg(search(vec![]), &t(0xA0, &os(&[0; 3000])));
    for m in [&names, &value, &with, &empty, &dense] {
        assert!(weight(m) <= MOST_WEIGHT_PER_BYTE * m.len(), "{} > {}", weight(m), MOST_WEIGHT_PER_BYTE * m.len());
    }
    assert!(weight(&empty) * 10 > MOST_WEIGHT_PER_BYTE * empty.len() * 9, "the bound is near the worst");
}
