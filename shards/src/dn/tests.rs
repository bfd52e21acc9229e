use super::*;

fn norm(s: &str) -> String {
    Dn::parse(s).map(|d| d.norm()).unwrap_or_else(|e| format!("ERR {:?}", e.code))
}

#[test]
fn key_parent_strips_the_leftmost_rdn() {
    let k = |s: &str| key_of(s).unwrap();
    assert_eq!(key_parent(&k("cn=a,ou=b,dc=c")), Some(k("ou=b,dc=c").as_slice()));
    assert_eq!(key_parent(&k("dc=c")), Some(&[][..]));
    assert_eq!(key_parent(&k("")), None);
}

#[test]
fn key_ancestors_walk_up_to_the_root() {
    let k = |s: &str| key_of(s).unwrap();
    let key = k("cn=a,ou=b,dc=c");
    let up: Vec<&[u8]> = key_ancestors(&key).collect();
    assert_eq!(up, [k("ou=b,dc=c").as_slice(), k("dc=c").as_slice(), &[][..]]);
    assert_eq!(key_ancestors(&k("")).count(), 0);
}

/// As slapd's `dnNormalize` spells what whoami says after a proxied
/// or SASL authorization: types by their schema name, values in
/// their equality rule's normal form, escapes as the pretty form's.
#[test]
fn normalized_spells_types_by_schema_and_values_by_their_rule() {
    for (input, want) in [
        ("CN=Foo2, OU=P-Q,DC=Example,DC=Com", "cn=foo2,ou=p-q,dc=example,dc=com"),
        ("GIDNUMBER=0+uidNumber=1,cn=peercred", "gidNumber=0+uidNumber=1,cn=peercred"),
        ("cn=Smith\\2C  John", "cn=smith\\2C john"),
        ("cn=\\20,dc=x", "cn=\\20,dc=x"),
        ("CN=x+cNAMERecord=y", "cNAMERecord=y+cn=x"),
    ] {
        assert_eq!(Dn::parse(input).unwrap().normalized().unwrap(), want, "{input}");
    }
}

#[test]
fn normalization_table() {
    for (input, want) in [
        ("", ""),
        ("dc=example,dc=com", "dc=example,dc=com"),
        ("DC=Example, DC=COM", "dc=example,dc=com"),
        ("commonName=John  Smith,o=Acme", "cn=john smith,o=acme"),
        ("cn=a\\,b,dc=x", "cn=a\\,b,dc=x"),
        ("cn=\\41bc,dc=x", "cn=abc,dc=x"),
        ("cn=#616263,dc=x", "ERR InvalidDNSyntax"),
        ("cn=b+sn=a,dc=x", "cn=b+sn=a,dc=x"),
        ("sn=a+cn=b,dc=x", "cn=b+sn=a,dc=x"),
        ("cn=x ,dc=y", "cn=x,dc=y"),
        ("cn=\\ x\\ ,dc=y", "cn=x,dc=y"),
        ("2.5.4.3=x", "cn=x"),
        ("commonName=X,DC=Y", "cn=x,dc=y"),
        ("uidNumber=007,dc=y", "uidnumber=7,dc=y"),
        ("cn=Jürgen,dc=x", "cn=jürgen,dc=x"),
        ("cn", "ERR InvalidDNSyntax"),
        ("=x", "ERR InvalidDNSyntax"),
        ("cn=x,", "ERR InvalidDNSyntax"),
        ("cn=a\"b", "ERR InvalidDNSyntax"),
        ("cn=a\\", "ERR InvalidDNSyntax"),
        ("cn=x,,dc=y", "ERR InvalidDNSyntax"),
        ("1cn=x", "ERR InvalidDNSyntax"),
    ] {
        assert_eq!(norm(input), want, "{input:?}");
    }
}

#[test]
fn keys_nest() {
    let base = Dn::parse("ou=people,dc=example,dc=com").unwrap();
    let child = Dn::parse("uid=a,ou=people,dc=example,dc=com").unwrap();
    assert!(child.key().starts_with(&base.key()));
    assert_eq!(child.key()[base.key().len()], KEY_SEPARATOR);
    assert_eq!(key_depth(&child.key()), 4);
    assert!(child.is_within(&base));
    assert!(!base.is_within(&child));
    assert_eq!(child.parent(), base);
    assert_eq!(Dn::parse("CN=Admin, DC=Example").unwrap(), Dn::parse("cn=admin,dc=example").unwrap());
}

#[test]
fn string_form_round_trips() {
    for s in ["cn=a\\,b+sn=c,dc=x", "cn=\\ lead,dc=x", "cn=\\#x,dc=y"] {
        let dn = Dn::parse(s).unwrap();
        assert_eq!(Dn::parse(&dn.to_string_form()).unwrap().norm(), dn.norm(), "{s}");
    }
}

/// `key_of` gives exactly `Dn::parse(..).key()`, or the same error, on
/// random strings over DN-ish pieces (plain and escaped forms mixed).
#[test]
fn key_of_equals_the_full_parser() {
    use rand::{Rng, SeedableRng};
    let pieces = [
        "uid",
        "CN",
        "2.5.4.3",
        "ou",
        "dc",
        "uidNumber",
        "=",
        "=",
        ",",
        ",",
        " ",
        "+",
        "\\",
        "\\2c",
        "#61",
        "a",
        "B",
        "x y",
        "user42",
        "Jürgen",
        "\"",
        "<",
        ";",
        "-",
        ".",
        "0",
        "telephoneNumber",
        "+1 555-0100",
    ];
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut texts: Vec<String> = ["", " ", "uid=user1,ou=people,dc=example,dc=com", " CN = A  b , DC=X "]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for _ in 0..20_000 {
        let n = rng.gen_range(1..10);
        texts.push((0..n).map(|_| pieces[rng.gen_range(0..pieces.len())]).collect());
    }
    // Each also as a parent, twice: the second time its key comes
    // from the thread's kept parents' keys; then itself again, as a
    // search's base is after its children's keys were made.
    for text in &texts {
        let child = format!("uid=u1,{text}");
        for text in [text, &child, &child, text] {
            let fast = key_of(text).map_err(|e| e.code);
            let full = Dn::parse(text).map(|d| d.key()).map_err(|e| e.code);
            assert_eq!(fast, full, "{text:?}");
        }
    }
}

#[test]
fn quoted_values_and_type_options_read_as_slapd_reads_them() {
    let quoted = Dn::parse("cn=\"Smith, John\" , ou=\"a+b\";dc=x").unwrap();
    assert_eq!(quoted.key(), Dn::parse("cn=Smith\\, John,ou=a\\+b,dc=x").unwrap().key());
    assert_eq!(Dn::parse("cn;lang-de=foo,dc=x").unwrap().key(), Dn::parse("cn=foo,dc=x").unwrap().key());
    // Inside quotes a backslash takes the next character as it is.
    assert_eq!(Dn::parse("cn=\"a\\q\\41\",dc=x").unwrap().key(), Dn::parse("cn=aq41,dc=x").unwrap().key());
    for bad in ["cn=\"open,dc=x", "cn=\"a\"b,dc=x", "cn=\"\",dc=x", "cn=a\"b\",dc=x", "2.5.4.3;x=foo,dc=x"] {
        assert!(Dn::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn escape_value_copies_plain_values_and_escapes_the_rest() {
    for (value, want) in [("abc", "abc"), (" a", "\\ a"), ("a ", "a\\ "), ("#a", "\\#a"), ("a,b", "a\\,b"), ("ü", "ü")]
    {
        let mut out = String::new();
        escape_value(value.as_bytes(), &mut out);
        assert_eq!(out, want, "{value:?}");
    }
}
