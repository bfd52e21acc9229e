//! The subschema subentry (RFC 4512 §4.2): `cn=Subschema`, which every
//! entry and the root DSE name in `subschemaSubentry`.

use super::{get, syntax::SYNTAXES};
use crate::entry::{Attr, Entry};
use crate::matching::RULES;

pub const DN: &str = "cn=Subschema";

/// Whether the DN with storage `key` names the subschema subentry (the
/// key of a one-RDN DN is that RDN's normal form).
pub fn is_subschema_key(key: &[u8]) -> bool {
    key == b"cn=subschema"
}

/// Elements slapd knows but leaves out of its subschema subentry
/// (`SLAP_AT_HIDE`, `SLAP_OC_HIDE`): RFC 3672's administrativeRole and
/// subtreeSpecification, the DIT structure and content rule types and
/// governingStructureRule, and the glue class. Clients list what a
/// server publishes; these they could not use here either.
const HIDDEN: [&str; 7] =
    ["2.5.18.5", "2.5.18.6", "2.5.21.1", "2.5.21.2", "2.5.21.7", "2.5.21.10", "1.3.6.1.4.1.4203.666.3.4"];

fn published<'a>(elements: impl Iterator<Item = (&'a String, &'a String)>) -> Vec<String> {
    elements.filter(|(oid, _)| !HIDDEN.contains(&oid.as_str())).map(|(_, d)| d.clone()).collect()
}

/// The subschema entry; its schema attributes are operational
/// (`directoryOperation`), so clients ask for them by name or with `+`.
pub fn entry() -> Entry {
    let schema = get();
    let attr = |name: &str, vals: Vec<String>| Attr {
        name: name.into(),
        vals: vals.into_iter().map(String::into_bytes).collect(),
    };
    let syntaxes = SYNTAXES
        .iter()
        .filter(|s| !s.hidden())
        .map(|s| {
            let transfer = if s.binary_transfer { " X-BINARY-TRANSFER-REQUIRED 'TRUE'" } else { "" };
            let binary = if s.binary { " X-NOT-HUMAN-READABLE 'TRUE'" } else { "" };
            format!("( {} DESC '{}'{transfer}{binary} )", s.oid, s.desc)
        })
        .collect();
    let rules = RULES
        .iter()
        .filter(|r| r.published())
        .map(|r| format!("( {} NAME '{}' SYNTAX {} )", r.oid, r.name, r.syntax_oid()))
        .collect();
    let uses = matching_rule_uses(schema);
    Entry {
        dn: DN.into(),
        attrs: vec![
            attr("objectClass", vec!["top".into(), "subentry".into(), "subschema".into(), "extensibleObject".into()]),
            attr("cn", vec!["Subschema".into()]),
            attr("structuralObjectClass", vec!["subentry".into()]),
            // No subtreeSpecification, though `subentry` requires it: slapd
            // publishes none, and clients reading `+` see what they see there.
            attr("ldapSyntaxes", syntaxes),
            attr("matchingRules", rules),
            attr("matchingRuleUse", uses),
            attr("attributeTypes", published(schema.attrs.iter().map(|a| (&a.oid, &a.definition)))),
            attr("objectClasses", published(schema.classes.iter().map(|c| (&c.oid, &c.definition)))),
            attr("createTimestamp", vec![loaded_at().into()]),
            attr("modifyTimestamp", vec![loaded_at().into()]),
            attr("entryDN", vec![DN.into()]),
            attr("subschemaSubentry", vec![DN.into()]),
        ],
    }
}

/// When this process loaded its schema: the subentry's create and modify
/// timestamps (slapd gives its schema's), the same for every read.
fn loaded_at() -> &'static str {
    static AT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    AT.get_or_init(crate::now_generalized)
}

/// `matchingRuleUse` (RFC 4512 §4.1.4): for each rule, the attribute types
/// an extensible match may apply it to (`RuleInfo::usable_with`, as slapd
/// lists them). Rules that apply to nothing are left out.
fn matching_rule_uses(schema: &super::Schema) -> Vec<String> {
    RULES
        .iter()
        .filter(|r| r.published())
        .filter_map(|r| {
            // As slapd's: the hidden types are in no rule's use either.
            let applies: Vec<&str> = schema
                .attrs
                .iter()
                .filter(|a| r.usable_with(a) && !HIDDEN.contains(&a.oid.as_str()))
                .map(|a| a.name())
                .collect();
            let list = match applies.as_slice() {
                [] => return None,
                [one] => one.to_string(),
                many => format!("( {} )", many.join(" $ ")),
            };
            Some(format!("( {} NAME '{}' APPLIES {list} )", r.oid, r.name))
        })
        .collect()
}
