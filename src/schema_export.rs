//! `coredir schema export`: the schema in use, in OpenLDAP's `.schema`
//! syntax (`attributetype` and `objectclass` lines holding the RFC 4512
//! definitions `cn=Subschema` publishes), so that a slapd replicating from
//! coredir knows every attribute an entry can carry.
//!
//! slapd defines some types and classes in its own code (the operational
//! attributes, `top`, `subschema`, …) and refuses a file that defines them
//! again, so those are left out unless `--all`; so are the definitions of
//! the schema files given with `--skip` (the consumer's own core, cosine,
//! inetorgperson, nis), which slapd would refuse twice too.

use shards::schema;

const OPENLDAP_ARC: &str = "1.3.6.1.4.1.4203.";

/// Names slapd 2.5 and 2.6 hardcode (`servers/slapd/schema_prep.c`), by
/// the lower-case first name coredir knows them by.
const SLAPD_BUILTIN: &[&str] = &[
    // Attribute types.
    "objectclass",
    "structuralobjectclass",
    "createtimestamp",
    "modifytimestamp",
    "creatorsname",
    "modifiersname",
    "hassubordinates",
    "subschemasubentry",
    "collectiveattributesubentries",
    "collectiveexclusions",
    "entrydn",
    "entryuuid",
    "entrycsn",
    "namingcsn",
    "superiorUUID",
    "syncreplcookie",
    "contextcsn",
    "syncTimestamp",
    "altserver",
    "namingcontexts",
    "supportedcontrol",
    "supportedextension",
    "supportedldapversion",
    "supportedsaslmechanisms",
    "supportedfeatures",
    "monitorcontext",
    "configcontext",
    "vendorname",
    "vendorversion",
    "administrativerole",
    "subtreespecification",
    "ditstructurerules",
    "ditcontentrules",
    "matchingrules",
    "attributetypes",
    "objectclasses",
    "nameforms",
    "matchingruleuse",
    "ldapsyntaxes",
    "aliasedobjectname",
    "ref",
    "entry",
    "children",
    "governingstructurerule",
    "entryttl",
    "dynamicsubtrees",
    "distinguishedname",
    "name",
    "cn",
    "userpassword",
    "labeleduri",
    "authpassword",
    "supportedauthpasswordschemes",
    "description",
    "seealso",
    "pwdattribute",
    "memberof",
    // Object classes.
    "top",
    "extensibleobject",
    "alias",
    "referral",
    "ldapsubentry",
    "subentry",
    "subschema",
    "collectiveattributesubentry",
    "dynamicobject",
    "glue",
    "syncconsumersubentry",
    "syncprovsubentry",
];

/// The OIDs and names an OpenLDAP schema file defines (what follows
/// `attributetype (` or `objectclass (`, and the names after `NAME`), lower-case.
pub fn defined_in(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let lower = text.to_ascii_lowercase();
    for line in lower.lines().map(str::trim_start).filter(|l| !l.starts_with('#')) {
        let Some(rest) = line.strip_prefix("attributetype").or_else(|| line.strip_prefix("objectclass")) else {
            continue;
        };
        if let Some(oid) = rest.trim_start().strip_prefix('(').and_then(|r| r.split_whitespace().next()) {
            out.push(oid.to_string());
        }
    }
    // Names may sit on continuation lines: take every NAME clause.
    for part in lower.split(" name ").skip(1) {
        let names = match part.trim_start().strip_prefix('(') {
            Some(list) => list.split(')').next().unwrap_or(""),
            None => part.split_whitespace().next().unwrap_or(""),
        };
        out.extend(names.split_whitespace().map(|n| n.trim_matches('\'').to_string()));
    }
    out
}

/// The export; `all` keeps the definitions slapd hardcodes; `skip` holds
/// the OIDs and names of definitions the consumer has already
/// (`defined_in` its own schema files).
pub fn openldap(all: bool, skip: &[String]) -> String {
    let schema = schema::get();
    let keep = |names: &[String], oid: &str| {
        let key = names.first().map_or(oid.to_string(), |n| n.to_ascii_lowercase());
        let known =
            skip.iter().any(|s| s == &oid.to_ascii_lowercase() || names.iter().any(|n| n.eq_ignore_ascii_case(s)));
        // Under OpenLDAP's own arc: slapd defines it (the monitor classes).
        let openldap = oid.starts_with(OPENLDAP_ARC);
        !known && (all || !(openldap || SLAPD_BUILTIN.iter().any(|b| b.eq_ignore_ascii_case(&key))))
    };
    let mut out = String::from("# coredir schema, exported by `coredir schema export` in OpenLDAP's syntax.\n\n");
    // slapd takes no operational type from a file: it defines its own.
    let user =
        |a: &&schema::AttributeType| all || (a.usage == schema::AttrUsage::UserApplications && !a.no_user_modification);
    for a in schema.attrs.iter().filter(user).filter(|a| keep(&a.names, &a.oid)) {
        out.push_str(&format!("attributetype {}\n", a.definition));
    }
    out.push('\n');
    for c in schema.classes.iter().filter(|c| keep(&c.names, &c.oid)) {
        out.push_str(&format!("objectclass {}\n", c.definition));
    }
    out
}
