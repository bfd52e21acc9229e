use super::*;

fn build(file: &str, text: &str) -> Result<Schema, String> {
    let mut b = Builder::default();
    b.add_text("builtin.schema", super::super::BUILTIN)?;
    b.add_text(file, text)?;
    b.build()
}

/// Run with STOCK_SCHEMA=1 on a machine with OpenLDAP's schema files.
#[test]
fn stock_schema_files_load() {
    let dir = std::path::Path::new("/etc/ldap/schema");
    if std::env::var("STOCK_SCHEMA").is_err() || !dir.exists() {
        return;
    }
    let files: Vec<_> = [
        "core",
        "cosine",
        "inetorgperson",
        "nis",
        "openldap",
        "collective",
        "corba",
        "duaconf",
        "dyngroup",
        "java",
        "misc",
    ]
    .iter()
    .map(|f| dir.join(format!("{f}.schema")))
    .collect();
    Schema::load(&files).unwrap();
}

#[test]
fn builtin_schema_resolves() {
    let s = Schema::builtin();
    let cn = s.attr("commonName").unwrap();
    assert_eq!(cn.oid, "2.5.4.3");
    assert_eq!(cn.equality, Some(Rule::CaseIgnore), "inherited from name");
    assert_eq!(cn.syntax, "1.3.6.1.4.1.1466.115.121.1.15");
    assert_eq!(cn.definition, "( 2.5.4.3 NAME ( 'cn' 'commonName' ) SUP name )");
    assert!(s.attr("2.5.4.4").is_some());
    assert_eq!(s.attr("uidNumber").unwrap().oid, "1.3.6.1.1.1.1.0");
    let person = s.class("inetorgperson").unwrap();
    assert_eq!(person.kind, ClassKind::Structural);
    assert!(s.attr("entryUUID").unwrap().no_user_modification);
}

/// The shape filter in `is_operational` never hides an operational
/// type: it agrees with a full lookup for every name, OID, case and
/// option form, including a custom operational type's.
#[test]
fn is_operational_agrees_with_the_lookup() {
    let s = build(
        "x.schema",
        "attributetype ( 1.2.3.4 NAME 'fooTime' SYNTAX 1.3.6.1.4.1.1466.115.121.1.15 USAGE directoryOperation )",
    )
    .unwrap();
    let mut names = vec!["unknownThing".to_string(), String::new(), "x".repeat(80)];
    for at in &s.attrs {
        for n in at.names.iter().chain(std::iter::once(&at.oid)) {
            names.extend([n.clone(), n.to_ascii_uppercase(), format!("{n};binary")]);
        }
    }
    for n in &names {
        let full = s.attr(n).is_some_and(|at| at.usage.is_operational());
        assert_eq!(s.is_operational(n), full, "{n}");
    }
    assert!(s.is_operational("FOOTIME") && s.is_operational("entryUUID") && !s.is_operational("cn"));
}

#[test]
fn custom_schema_file() {
    let text = "# a comment\n\
objectidentifier myOID 1.3.6.1.4.1.99999\n\
objectIdentifier myAttrs myOID:1\n\
attributetype ( myAttrs:1 NAME 'mailRoute'\n\
\tDESC 'where mail goes'\n\
\tEQUALITY caseIgnoreIA5Match SYNTAX 1.3.6.1.4.1.1466.115.121.1.26{256} SINGLE-VALUE )\n\
objectclass ( myOID:2.1 NAME 'mailRecipient' SUP top AUXILIARY MAY mailRoute )\n";
    let s = build("site.schema", text).unwrap();
    let at = s.attr("MAILROUTE").unwrap();
    assert_eq!(at.oid, "1.3.6.1.4.1.99999.1.1");
    assert_eq!(at.syntax_len, Some(256));
    assert!(at.single_value);
    assert_eq!(s.class("mailRecipient").unwrap().kind, ClassKind::Auxiliary);
}

#[test]
fn ldif_schema_file() {
    let text = "dn: cn=site,cn=schema,cn=config\nobjectClass: olcSchemaConfig\ncn: site\n\
olcObjectIdentifier: {0}siteOID 1.3.6.1.4.1.99998\n\
olcAttributeTypes: {0}( siteOID:1 NAME 'badgeNumber' EQUALITY integerMatch\n  SYNTAX 1.3.6.1.4.1.1466.115.121.1.27 )\n\
olcObjectClasses: {0}( siteOID:2 NAME 'badged' AUXILIARY MUST badgeNumber )\n";
    let s = build("site.ldif", text).unwrap();
    assert_eq!(s.attr("badgeNumber").unwrap().equality, Some(Rule::Integer));
    assert_eq!(s.class("badged").unwrap().must.len(), 1);
}

#[test]
fn a_definition_identical_to_a_built_in_one_is_accepted() {
    let same = "attributetype ( 2.5.4.3 NAME ( 'cn' 'commonName' ) DESC 'RFC4519: common name(s)' SUP name )\n\
                objectclass ( 2.5.6.6 NAME 'person' DESC 'RFC2256: a person' SUP top STRUCTURAL\n\
                \tMUST ( surname $ commonName ) MAY ( userPassword $ telephoneNumber $ seeAlso $ description ) )";
    let s = build("core.schema", same).unwrap();
    assert_eq!(s.attr("commonName").unwrap().oid, "2.5.4.3");
    let other = "attributetype ( 2.5.4.3 NAME ( 'cn' 'commonName' ) SUP name SINGLE-VALUE )";
    assert!(build("core.schema", other).unwrap_err().contains("conflicts with the definition at builtin.schema:101"));
}

#[test]
fn ldapsyntax_substitutes_a_known_syntax() {
    let mut b = Builder::default();
    let text = "ldapsyntax ( 1.2.3.4 NAME 'Mine' DESC 'x' X-SUBST '1.3.6.1.4.1.1466.115.121.1.15' )\n\
                attributetype ( 1.2.3.5 NAME 'mine' SYNTAX 1.2.3.4 )";
    b.add_text("f.schema", text).unwrap();
    let schema = b.build().unwrap();
    assert_eq!(schema.attrs.iter().find(|a| a.names[0] == "mine").unwrap().syntax, "1.3.6.1.4.1.1466.115.121.1.15");
    let mut bare = Builder::default();
    let err = bare.add_text("f.schema", "ldapsyntax ( 1.2.3.4 DESC 'no stand-in' )").unwrap_err();
    assert!(err.contains("X-SUBST"), "{err}");
}

#[test]
fn bad_definitions_name_file_and_line() {
    for (text, want) in [
        (
            "\nattributetype ( 1.2.3 NAME 'x' EQUALITY noSuchMatch SYNTAX 1.3.6.1.4.1.1466.115.121.1.15 )",
            "f.schema:2: x: unknown matching rule 'noSuchMatch'",
        ),
        ("attributetype ( 1.2.3 NAME 'x' SYNTAX 9.9.9 )", "f.schema:1: x: unknown syntax 9.9.9"),
        (
            "attributetype ( foo:1 NAME 'x' SYNTAX 1.3.6.1.4.1.1466.115.121.1.15 )",
            "f.schema:1: 'foo:1' is not a numeric OID",
        ),
        (
            "objectclass ( 1.2.4 NAME 'y' MUST noSuchAttr )",
            "f.schema:1: y: MUST names unknown attribute type 'noSuchAttr'",
        ),
        ("attributetype ( 1.2.3 NAME 'x' SYNTAX 1.3.6.1.4.1.1466.115.121.1.15", "f.schema:1: missing ')'"),
        (
            "attributetype ( 1.2.3 NAME 'cn' SYNTAX 1.3.6.1.4.1.1466.115.121.1.15 )",
            "attribute type cn (1.2.3) conflicts with the definition at builtin.schema:",
        ),
        (
            "attributetype ( 1.2.3 NAME 'x' ORDERING caseIgnoreMatch SYNTAX 1.3.6.1.4.1.1466.115.121.1.15 )",
            "cannot be used as ORDERING",
        ),
        ("ditcontentrule ( 1.2.3 )", "f.schema:1: unsupported schema statement"),
    ] {
        let err = build("f.schema", text).unwrap_err();
        assert!(err.contains(want), "{err:?} should contain {want:?}");
    }
}

/// ppolicy's `pwdAttribute` names an attribute type, as slapd's overlay
/// reads it: by name or OID, one value; another OID-syntax type takes
/// numeric OIDs only (slapd's objectIdentifierMatch).
#[test]
fn pwd_attribute_values_name_attribute_types() {
    let text = "attributetype ( 1.3.6.1.4.1.42.2.27.8.1.1 NAME 'pwdAttribute'\n\
\tEQUALITY objectIdentifierMatch SYNTAX 1.3.6.1.4.1.1466.115.121.1.38 )\n\
attributetype ( 1.3.6.1.4.1.99999.9 NAME 'someOid'\n\
\tEQUALITY objectIdentifierMatch SYNTAX 1.3.6.1.4.1.1466.115.121.1.38 )\n";
    let s = build("ppolicy.schema", text).unwrap();
    let by_name = s.attr("pwdAttribute").unwrap().equality.unwrap();
    assert_eq!(by_name, Rule::ObjectClass);
    let other = s.attr("someOid").unwrap().equality.unwrap();
    assert_eq!(other, Rule::ObjectIdentifier);
    assert_eq!(other.normalize(b"userPassword"), None);
}
