//! Schema checks of an entry as it will be stored (after an add, a modify or
//! a rename): object classes, required and allowed attributes, single
//! values, syntaxes and the RDN. Each violation has its own result code and
//! a message naming the attribute, as OpenLDAP words them.

use super::{get, AttributeType, ClassKind, Schema};
use crate::dn::Dn;
use crate::entry::Entry;
use crate::error::{Error, Result};
use ldap3_proto::LdapResultCode as Code;

/// objectClass's OID.
const OBJECT_CLASS: &str = "2.5.4.0";

/// Checks `entry` (named `dn`) against the schema; returns the name of its
/// structural object class, for `structuralObjectClass`.
pub fn check_entry(entry: &Entry, dn: &Dn) -> Result<String> {
    check_entry_with(entry, dn, Values::All)
}

/// `check_entry` without the values' syntaxes, for an entry a modify, a
/// rename or an add made: the values they wrote were checked on the way
/// in (`check_modification`; a new RDN's with its DN), and those the entry
/// held already are not checked again, as slapd checks only the
/// modifications: a value a later schema, or a stricter validator, no
/// longer accepts does not make its entry unmodifiable.
pub fn check_modified(entry: &Entry, dn: &Dn) -> Result<String> {
    check_entry_with(entry, dn, Values::Written)
}

/// Which values `check_contents` checks against their syntaxes.
#[derive(Clone, Copy, PartialEq)]
enum Values {
    All,
    /// None: they were checked as they were written.
    Written,
}

fn check_entry_with(entry: &Entry, dn: &Dn, values: Values) -> Result<String> {
    let schema = get();
    let classes = classes(schema, entry)?;
    let structural = structural(schema, &classes)?;
    check_contents(schema, entry, dn, &classes, values)?;
    Ok(schema.classes[structural].name().to_string())
}

/// One modification as slapd's frontend checks it (`slap_mods_check`),
/// before the entry is looked for and before any other check: its type
/// and options (17), its values' syntax (21), several values for a
/// single-valued type (19). `adds`: an add or a replace.
pub fn check_modification(name: &str, vals: &[Vec<u8>], adds: bool) -> Result<()> {
    let at = check_type(name)?;
    check_syntaxes(at, name, vals)?;
    // slapd reads objectClass values as classes here (those a delete
    // names too), in the request's order: an unknown class is refused
    // before a later undefined type.
    if at.oid == OBJECT_CLASS {
        let schema = get();
        for (i, v) in vals.iter().enumerate() {
            if schema.class_index(&String::from_utf8_lossy(v)).is_none() {
                return Err(unknown_class(i, v));
            }
        }
    }
    if adds && at.single_value && vals.len() > 1 {
        return Err(Error::new(Code::ConstraintViolation, format!("{name}: multiple values provided")));
    }
    Ok(())
}

/// An increment's type is defined (17) and of INTEGER syntax: slapd
/// refuses any other with constraintViolation (19) while it checks the
/// request, before its values and before looking for the entry.
pub fn check_increment(name: &str) -> Result<()> {
    if check_type(name)?.syntax != "1.3.6.1.4.1.1466.115.121.1.27" {
        return Err(Error::new(Code::ConstraintViolation, format!("{name}: increment not supported for value syntax")));
    }
    Ok(())
}

/// An attribute description's type is defined and its options allowed:
/// undefinedAttributeType (17) otherwise.
pub fn check_type(name: &str) -> Result<&'static AttributeType> {
    check_transfer(name)?;
    get()
        .attr(name)
        .ok_or_else(|| Error::new(Code::UndefinedAttributeType, format!("{name}: attribute type undefined")))
}

/// The name of the entry's structural object class.
pub fn structural_class(entry: &Entry) -> Result<String> {
    let schema = get();
    Ok(schema.classes[structural(schema, &classes(schema, entry)?)?].name().to_string())
}

/// Required and allowed attributes, values, RDN.
fn check_contents(schema: &Schema, entry: &Entry, dn: &Dn, classes: &[usize], values: Values) -> Result<()> {
    // Each attribute's type, resolved once.
    let mut types = Vec::with_capacity(entry.attrs.len());
    for a in &entry.attrs {
        match schema.attr_index(&a.name) {
            Some(i) => types.push(i),
            None => {
                return Err(Error::new(Code::UndefinedAttributeType, format!("{}: attribute type undefined", a.name)))
            }
        }
    }
    let has = |oid: &str| classes.iter().any(|c| schema.classes[*c].oid == oid);
    if has(SUBSCHEMA) {
        let why = "objectClass 'subschema' only allowed in the subschema subentry";
        return Err(Error::new(Code::ObjectClassViolation, why));
    }
    if has(DYNAMIC_OBJECT) {
        // As slapd without its dds overlay: nothing would expire it.
        let why = "objectClass 'dynamicObject': no dynamic object support (RFC 2589)";
        return Err(Error::new(Code::ObjectClassViolation, why));
    }
    // As slapd's entry_schema_check: each type's own rule and a second
    // value of a single-valued type (19) before the classes' MUSTs (65).
    for (a, t) in entry.attrs.iter().zip(&types) {
        check_placement(&schema.attrs[*t], &a.name, &has)?;
        check_single_value(&schema.attrs[*t], &a.name, &a.vals)?;
    }
    let extensible = has("1.3.6.1.4.1.1466.101.120.111");
    let mut allowed = vec![false; schema.attrs.len()];
    for c in classes {
        let oc = &schema.classes[*c];
        for must in &oc.must {
            if !types.contains(must) {
                return Err(Error::new(
                    Code::ObjectClassViolation,
                    format!("object class '{}' requires attribute '{}'", oc.name(), schema.attrs[*must].name()),
                ));
            }
        }
        for t in oc.must.iter().chain(&oc.may) {
            allowed[*t] = true;
        }
    }
    for (a, t) in entry.attrs.iter().zip(&types) {
        let at = &schema.attrs[*t];
        if !extensible && !at.usage.is_operational() && !allowed_or_supertype(schema, &allowed, *t) {
            return Err(Error::new(Code::ObjectClassViolation, format!("attribute '{}' not allowed", a.name)));
        }
        if values == Values::All {
            check_syntaxes(at, &a.name, &a.vals)?;
        }
    }
    check_rdn(entry, dn)
}

/// The `subschema` class: only the subschema subentry is of it.
const SUBSCHEMA: &str = "2.5.20.1";
const DYNAMIC_OBJECT: &str = "1.3.6.1.4.1.1466.101.119.2";

/// Types slapd allows only in certain entries (its schema's checks per
/// type), whatever the classes or extensibleObject allow: the root DSE's
/// own, `ref` outside a referral object, `aliasedObjectName` outside an
/// alias, `subtreeSpecification` outside a subentry: objectClassViolation.
/// RFC 3672's administrativeRole is in no entry: slapd defines it and
/// refuses it anywhere, as coredir has no administrative areas.
fn check_placement(at: &AttributeType, name: &str, has: &dyn Fn(&str) -> bool) -> Result<()> {
    let only_in = match at.oid.as_str() {
        "2.5.18.5" => {
            let why = format!("attribute \"{name}\" not supported in context");
            return Err(Error::new(Code::ObjectClassViolation, why));
        }
        // namingContexts, altServer, supportedExtension, supportedControl,
        // supportedSASLMechanisms, supportedLDAPVersion, supportedFeatures,
        // vendorName, vendorVersion.
        "1.3.6.1.4.1.1466.101.120.5"
        | "1.3.6.1.4.1.1466.101.120.6"
        | "1.3.6.1.4.1.1466.101.120.7"
        | "1.3.6.1.4.1.1466.101.120.13"
        | "1.3.6.1.4.1.1466.101.120.14"
        | "1.3.6.1.4.1.1466.101.120.15"
        | "1.3.6.1.4.1.4203.1.3.5"
        | "1.3.6.1.1.4"
        | "1.3.6.1.1.5" => "the root DSE",
        "2.16.840.1.113730.3.1.34" if !has("2.16.840.1.113730.3.2.6") => "the referral",
        "2.5.4.1" if !has("2.5.6.1") => "the alias",
        "2.5.18.6" if !has("2.5.17.0") => "the subentry",
        _ => return Ok(()),
    };
    Err(Error::new(Code::ObjectClassViolation, format!("attribute \"{name}\" only allowed in {only_in}")))
}

/// Whether a type or one of its supertypes is allowed (a class that
/// allows `name` allows `cn`).
fn allowed_or_supertype(schema: &Schema, allowed: &[bool], mut t: usize) -> bool {
    loop {
        if allowed[t] {
            return true;
        }
        match schema.attrs[t].sup {
            Some(s) => t = s,
            None => return false,
        }
    }
}

/// The options of an attribute description, as slapd accepts them:
/// language tags (RFC 3866) and `binary` on a syntax that needs binary
/// transfer (RFC 4522); any other is refused rather than silently dropped.
pub fn check_options(name: &str) -> Result<()> {
    // As it will be stored: `2.5.4.13;…` is kept as `description;…`.
    if crate::matching::stored_name(name).len() > crate::entry::MAX_DESCRIPTION_BYTES {
        return Err(crate::entry::description_too_long(name));
    }
    // `cn;` has one option, empty: refused (RFC 4512 §2.5: an option is
    // at least one character), as slapd refuses it.
    let Some((base, options)) = name.split_once(';') else { return Ok(()) };
    let at = get().attr(base);
    let binary = at.is_some_and(|at| at.syntax_ref.binary_transfer);
    // As slapd: language tags only on user attributes.
    let tags = at.is_none_or(|at| !at.usage.is_operational());
    for o in options.split(';') {
        // slapd's option characters: letters, digits, '-' and '.'; `lang-`
        // alone is the range of every tag (RFC 3866 §2.2).
        let chars = o.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
        let lang = tags && chars && is_language_tag(o);
        if !(lang || (binary && o.eq_ignore_ascii_case("binary"))) {
            return Err(Error::new(
                Code::UndefinedAttributeType,
                format!("{name}: attribute description contains inappropriate option"),
            ));
        }
    }
    Ok(())
}

/// Whether an option is a language tag or range (`lang-en`, `lang-`).
pub fn is_language_tag(option: &str) -> bool {
    option.len() >= 5 && option.as_bytes()[..5].eq_ignore_ascii_case(b"lang-")
}

/// Whether every option of an attribute description has a character at
/// least (RFC 4512 §2.5): `cn;` and `cn;lang-en;` name no attribute.
pub fn options_well_formed(name: &str) -> bool {
    name.split(';').skip(1).all(|o| !o.is_empty())
}

/// What an add or a modify may name (slapd's `slap_mods_check`): valid
/// options, and `;binary` on a type whose values travel only that way.
pub fn check_transfer(name: &str) -> Result<()> {
    check_options(name)?;
    let (base, options) = name.split_once(';').unwrap_or((name, ""));
    // A range (`lang-en-`) names values to find, never values to store.
    if options.split(';').any(|o| o.ends_with('-')) {
        return Err(Error::new(
            Code::UndefinedAttributeType,
            format!("{name}: inappropriate use of tag range in attribute description"),
        ));
    }
    let needs_binary = get().attr(base).is_some_and(|at| at.syntax_ref.binary_transfer);
    if needs_binary && !options.split(';').any(|o| o.eq_ignore_ascii_case("binary")) {
        return Err(Error::new(Code::UndefinedAttributeType, format!("{name}: requires ;binary transfer")));
    }
    Ok(())
}

fn check_single_value(at: &AttributeType, name: &str, vals: &[Vec<u8>]) -> Result<()> {
    if at.single_value && vals.len() > 1 {
        return Err(Error::new(Code::ConstraintViolation, format!("attribute '{name}' cannot have multiple values")));
    }
    Ok(())
}

fn check_syntaxes(at: &AttributeType, name: &str, vals: &[Vec<u8>]) -> Result<()> {
    if !at.syntax_ref.validated && !vals.is_empty() {
        return Err(Error::new(
            Code::InvalidAttributeSyntax,
            format!("{name}: no validator for syntax {}", at.syntax_ref.oid),
        ));
    }
    for (i, v) in vals.iter().enumerate() {
        if !(at.syntax_ref.valid)(v) {
            return Err(Error::new(
                Code::InvalidAttributeSyntax,
                format!("{name}: value #{i} invalid per syntax ({})", at.syntax_ref.desc),
            ));
        }
        // As slapd: a value its equality rule cannot normalize (a
        // descriptor of a type matched by objectIdentifierMatch) is refused.
        if at.equality.is_some_and(|rule| rule.normalize(v).is_none()) {
            return Err(Error::new(Code::InvalidAttributeSyntax, format!("{name}: value #{i} normalization failed")));
        }
    }
    Ok(())
}

/// The entry's object classes with all their superclasses.
fn classes(schema: &Schema, entry: &Entry) -> Result<Vec<usize>> {
    let Some(oc) = entry.get("objectClass") else {
        return Err(Error::new(Code::ObjectClassViolation, "no objectClass attribute"));
    };
    let mut out = Vec::new();
    for (i, v) in oc.vals.iter().enumerate() {
        let Some(c) = schema.class_index(&String::from_utf8_lossy(v)) else { return Err(unknown_class(i, v)) };
        schema.closure(c, &mut out);
    }
    Ok(out)
}

/// objectClass value `i`, `v`, names no class (slapd: invalid per syntax).
fn unknown_class(i: usize, v: &[u8]) -> Error {
    let name = String::from_utf8_lossy(v);
    Error::new(
        Code::InvalidAttributeSyntax,
        format!("objectClass: value #{i} invalid per syntax (unknown object class '{name}')"),
    )
}

/// The one most specific structural class: every other structural class of
/// the entry must be one of its superclasses.
fn structural(schema: &Schema, classes: &[usize]) -> Result<usize> {
    let structurals: Vec<usize> =
        classes.iter().copied().filter(|c| schema.classes[*c].kind == ClassKind::Structural).collect();
    if structurals.is_empty() {
        return Err(Error::new(Code::ObjectClassViolation, "no structural object class provided"));
    }
    for s in &structurals {
        let mut chain = Vec::new();
        schema.closure(*s, &mut chain);
        if structurals.iter().all(|o| chain.contains(o)) {
            return Ok(*s);
        }
    }
    let names: Vec<&str> = structurals.iter().map(|s| schema.classes[*s].name()).collect();
    Err(Error::new(Code::ObjectClassViolation, format!("invalid structural object class chain ({})", names.join("/"))))
}

fn check_rdn(entry: &Entry, dn: &Dn) -> Result<()> {
    let schema = get();
    for ava in dn.rdn().map(|r| r.avas.as_slice()).unwrap_or_default() {
        let Some(at) = schema.attr(&ava.attr) else {
            return Err(Error::new(
                Code::UndefinedAttributeType,
                format!("{}: attribute type undefined (in the RDN)", ava.attr),
            ));
        };
        if at.equality.is_none() {
            return Err(Error::new(
                Code::NamingViolation,
                format!("naming attribute '{}' has no equality matching rule", ava.attr),
            ));
        }
        if !entry.has_value(&ava.attr, &ava.value) {
            return Err(Error::new(
                Code::NamingViolation,
                format!("value of naming attribute '{}' is not present in entry", ava.attr),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::Attr;

    fn entry(dn: &str, attrs: &[(&str, &[&str])]) -> (Entry, Dn) {
        let e = Entry::of(dn, attrs);
        (e, Dn::parse(dn).unwrap())
    }

    #[test]
    fn violations_have_their_codes() {
        let person: &[(&str, &[&str])] =
            &[("objectClass", &["top", "inetOrgPerson"]), ("uid", &["jdoe"]), ("cn", &["J"]), ("sn", &["D"])];
        let dn = "uid=jdoe,ou=people,dc=example,dc=com";
        let check = |extra: &[(&str, &[&str])], drop: &str| {
            let mut attrs: Vec<(&str, &[&str])> = person.iter().filter(|(n, _)| *n != drop).copied().collect();
            attrs.extend_from_slice(extra);
            let (e, d) = entry(dn, &attrs);
            check_entry(&e, &d).map_err(|e| (e.code, e.message))
        };
        assert_eq!(check(&[], ""), Ok("inetOrgPerson".into()));
        let table: &[(&[(&str, &[&str])], &str, Code, &str)] = &[
            (&[], "sn", Code::ObjectClassViolation, "requires attribute 'sn'"),
            (&[], "objectClass", Code::ObjectClassViolation, "no objectClass"),
            (&[("fooBar", &["x"])], "", Code::UndefinedAttributeType, "fooBar"),
            (&[("uidNumber", &["1"])], "", Code::ObjectClassViolation, "'uidNumber' not allowed"),
            (&[("displayName", &["a", "b"])], "", Code::ConstraintViolation, "displayName"),
            (&[("mail", &["jöhn@x"])], "", Code::InvalidAttributeSyntax, "mail: value #0"),
            (&[("manager", &["not a dn"])], "", Code::InvalidAttributeSyntax, "manager"),
            (&[("objectClass", &["posixGroup"])], "", Code::ObjectClassViolation, "structural object class chain"),
            (&[("objectClass", &["noSuchClass"])], "", Code::InvalidAttributeSyntax, "noSuchClass"),
        ];
        for (extra, drop, code, msg) in table {
            let mut attrs: Vec<(&str, &[&str])> = person.iter().filter(|(n, _)| n != drop).copied().collect();
            // A second objectClass attribute in the table extends the first.
            let mut e = entry(dn, &attrs).0;
            for (n, vs) in extra.iter() {
                let vals: Vec<Vec<u8>> = vs.iter().map(|v| v.as_bytes().to_vec()).collect();
                if e.get(n).is_some() {
                    e.add_values(n, &vals).unwrap();
                } else {
                    e.attrs.push(Attr { name: n.to_string(), vals });
                }
            }
            attrs.clear();
            let err = check_entry(&e, &Dn::parse(dn).unwrap()).unwrap_err();
            assert_eq!(err.code, *code, "{extra:?} -{drop}: {}", err.message);
            assert!(err.message.contains(msg), "{} should contain {msg}", err.message);
        }
        let (e, d) = entry("uid=other,dc=example,dc=com", person);
        assert_eq!(check_entry(&e, &d).unwrap_err().code, Code::NamingViolation);
        let (e, d) = entry(
            "cn=x,dc=example,dc=com",
            &[("objectClass", &["device", "extensibleObject"]), ("cn", &["x"]), ("uidNumber", &["5"])],
        );
        assert!(check_entry(&e, &d).is_ok(), "extensibleObject allows any attribute");
        let (e, d) = entry(
            "cn=g,dc=example,dc=com",
            &[("objectClass", &["posixGroup"]), ("cn", &["g"]), ("gidNumber", &["5"]), ("memberUid", &["a", "b"])],
        );
        assert_eq!(check_entry(&e, &d).unwrap(), "posixGroup");
    }
}
