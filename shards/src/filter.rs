//! Search filters (RFC 4511 §4.5.1.7), compiled once per request and then
//! evaluated against each candidate entry.
//!
//! Compiling resolves every attribute description to its type (and the
//! names of its subtypes: `(name=x)` matches `cn` and `sn`), picks the
//! matching rule the assertion uses and normalizes the assertion value, so
//! evaluating an entry only normalizes the entry's values. Evaluation is
//! three-valued: an unknown attribute, a type without the needed matching
//! rule, or an assertion value the rule refuses is Undefined, which `!`
//! keeps Undefined and a search treats as no match. `~=` is equality.

use crate::dn::Dn;
use crate::entry::EntryView;
use crate::matching::{self, Rule};
use crate::schema::{self, Schema};
use ldap3_proto::proto::{LdapFilter, LdapMatchingRuleAssertion};

/// An attribute type as a filter item names it: the type and its subtypes
/// (indexes into the schema's attribute types), resolved once per request.
#[derive(Debug, Clone, Copy)]
pub struct Names {
    schema: &'static Schema,
    types: &'static [usize],
}

impl Names {
    /// The type an attribute description names, with its subtypes.
    pub fn new(attr: &str) -> Option<Names> {
        Names::of(schema::get(), attr)
    }

    fn of(schema: &'static Schema, attr: &str) -> Option<Names> {
        let i = schema.attr_index(attr)?;
        Some(Names { schema, types: &schema.subtypes[i] })
    }

    /// Index keys of the type and its subtypes.
    pub fn keys(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.types.iter().map(|t| self.schema.attrs[*t].key.as_str())
    }

    /// Whether a stored attribute description (maybe with options) is ours:
    /// entries store types under their first name, so this is a byte compare.
    pub fn covers(&self, stored: &str) -> bool {
        let base = stored.split(';').next().unwrap_or(stored);
        self.types.iter().any(|t| self.schema.attrs[*t].name().eq_ignore_ascii_case(base))
    }
}

#[derive(Debug, Clone)]
pub enum Node {
    And(Vec<Node>),
    Or(Vec<Node>),
    Not(Box<Node>),
    /// `(objectClass=*)` and its equivalents: true for every entry.
    True,
    Undefined,
    Present(Names),
    Equal {
        attr: Names,
        rule: Rule,
        value: Vec<u8>,
    },
    Substrings {
        attr: Names,
        rule: Rule,
        initial: Option<Vec<u8>>,
        any: Vec<Vec<u8>>,
        last: Option<Vec<u8>>,
    },
    /// `>=` (`greater`) or `<=`; `key` is the assertion's order key.
    Order {
        attr: Names,
        rule: Rule,
        key: Vec<u8>,
        greater: bool,
    },
    Extensible {
        attr: Option<Names>,
        rule: Rule,
        value: Vec<u8>,
        dn_attributes: bool,
    },
}

pub fn compile(f: &LdapFilter) -> Node {
    let schema = schema::get();
    match f {
        LdapFilter::And(fs) => Node::And(fs.iter().map(compile).collect()),
        LdapFilter::Or(fs) => Node::Or(fs.iter().map(compile).collect()),
        LdapFilter::Not(f) => Node::Not(Box::new(compile(f))),
        LdapFilter::Present(a) if matching::same_attr(a, "objectClass") => Node::True,
        LdapFilter::Present(a) => Names::of(schema, a).map_or(Node::Undefined, Node::Present),
        LdapFilter::Equality(a, v) | LdapFilter::Approx(a, v) => item(
            schema,
            a,
            |at| at.equality,
            |attr, rule| {
                let value = rule.normalize(v.as_bytes())?.into_owned();
                Some(Node::Equal { attr, rule, value })
            },
        ),
        LdapFilter::Substring(a, sub) => item(
            schema,
            a,
            |at| at.substr,
            |attr, rule| {
                let piece = |p: &String| rule.normalize_piece(p.as_bytes()).into_owned();
                Some(Node::Substrings {
                    attr,
                    rule,
                    initial: sub.initial.as_ref().map(piece),
                    any: sub.any.iter().map(piece).collect(),
                    last: sub.final_.as_ref().map(piece),
                })
            },
        ),
        LdapFilter::GreaterOrEqual(a, v) | LdapFilter::LessOrEqual(a, v) => {
            let greater = matches!(f, LdapFilter::GreaterOrEqual(..));
            item(
                schema,
                a,
                |at| at.ordering,
                |attr, rule| {
                    let norm = rule.normalize(v.as_bytes())?;
                    let key = rule.order_key(&norm).into_owned();
                    Some(Node::Order { attr, rule, key, greater })
                },
            )
        }
        LdapFilter::Extensible(m) => extensible(schema, m).unwrap_or(Node::Undefined),
    }
}

fn item(
    schema: &'static Schema,
    attr: &str,
    rule_of: impl Fn(&schema::AttributeType) -> Option<Rule>,
    build: impl FnOnce(Names, Rule) -> Option<Node>,
) -> Node {
    let Some(at) = schema.attr(attr) else { return Node::Undefined };
    let Some(rule) = rule_of(at) else { return Node::Undefined };
    let names = Names::of(schema, attr).expect("the type exists");
    build(names, rule).unwrap_or(Node::Undefined)
}

fn extensible(schema: &'static Schema, m: &LdapMatchingRuleAssertion) -> Option<Node> {
    let attr = match &m.type_ {
        Some(t) => Some(Names::of(schema, t)?),
        None => None,
    };
    let rule = match &m.matching_rule {
        Some(name) => matching::rule_named(name)?.rule,
        None => schema.attr(m.type_.as_deref()?)?.equality?,
    };
    let value = rule.normalize(m.match_value.as_bytes())?.into_owned();
    Some(Node::Extensible { attr, rule, value, dn_attributes: m.dn_attributes })
}

/// Three-valued AND / OR / NOT.
impl Node {
    pub fn eval(&self, e: &EntryView<'_>) -> Option<bool> {
        match self {
            Node::And(ns) => {
                let mut undefined = false;
                for n in ns {
                    match n.eval(e) {
                        Some(false) => return Some(false),
                        None => undefined = true,
                        Some(true) => {}
                    }
                }
                (!undefined).then_some(true)
            }
            Node::Or(ns) => {
                let mut undefined = false;
                for n in ns {
                    match n.eval(e) {
                        Some(true) => return Some(true),
                        None => undefined = true,
                        Some(false) => {}
                    }
                }
                (!undefined).then_some(false)
            }
            Node::Not(n) => n.eval(e).map(|b| !b),
            Node::True => Some(true),
            Node::Undefined => None,
            Node::Present(attr) => Some(e.attrs().any(|a| attr.covers(a.name))),
            Node::Equal { attr, rule, value } => any_value(e, attr, *rule, |v| v == value.as_slice()),
            Node::Substrings { attr, rule, initial, any, last } => {
                any_value(e, attr, *rule, |v| substrings(v, initial.as_deref(), any, last.as_deref()))
            }
            Node::Order { attr, rule, key, greater } => any_value(e, attr, *rule, |v| {
                let have = rule.order_key(v);
                if *greater {
                    have.as_ref() >= key.as_slice()
                } else {
                    have.as_ref() <= key.as_slice()
                }
            }),
            Node::Extensible { attr, rule, value, dn_attributes } => {
                extensible_eval(e, attr, *rule, value, *dn_attributes)
            }
        }
    }

    /// Whether the entry matches (Undefined does not).
    pub fn matches(&self, e: &EntryView<'_>) -> bool {
        self.eval(e) == Some(true)
    }
}

/// True if some value of the attribute, normalized by `rule`, passes `test`;
/// Undefined if none passes and some value had no normal form.
fn any_value(e: &EntryView<'_>, attr: &Names, rule: Rule, mut test: impl FnMut(&[u8]) -> bool) -> Option<bool> {
    let mut undefined = false;
    for a in e.attrs().filter(|a| attr.covers(a.name)) {
        for v in a.vals() {
            match rule.normalize(v) {
                Some(n) if test(&n) => return Some(true),
                Some(_) => {}
                None => undefined = true,
            }
        }
    }
    (!undefined).then_some(false)
}

fn substrings(value: &[u8], initial: Option<&[u8]>, any: &[Vec<u8>], last: Option<&[u8]>) -> bool {
    let mut rest = value;
    if let Some(init) = initial {
        if !rest.starts_with(init) {
            return false;
        }
        rest = &rest[init.len()..];
    }
    for piece in any {
        match find(rest, piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    last.is_none_or(|l| rest.ends_with(l))
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return Some(0);
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

fn extensible_eval(e: &EntryView<'_>, attr: &Option<Names>, rule: Rule, want: &[u8], dn_attrs: bool) -> Option<bool> {
    let ours = |name: &str| attr.as_ref().is_none_or(|a| a.covers(name));
    let hit = |v: &[u8]| rule.normalize(v).is_some_and(|n| n.as_ref() == want);
    if e.attrs().filter(|a| ours(a.name)).any(|a| a.vals().any(hit)) {
        return Some(true);
    }
    if dn_attrs {
        let dn = Dn::parse(e.dn()).ok()?;
        let in_dn = dn
            .rdns()
            .iter()
            .flat_map(|r| r.avas.iter())
            .any(|ava| ours(&matching::stored_name(&ava.attr)) && hit(&ava.value));
        return Some(in_dn);
    }
    Some(false)
}

/// The Assertion control (RFC 4528): `assertionFailed` unless the entry
/// matches the control's filter.
pub fn check_assertion(assertion: Option<&LdapFilter>, entry: &EntryView<'_>) -> crate::Result<()> {
    match assertion {
        Some(f) if !matches(f, entry) => Err(crate::Error::new(
            ldap3_proto::LdapResultCode::AssertionFailed,
            "the assertion control's filter does not match",
        )),
        _ => Ok(()),
    }
}

/// Evaluates an uncompiled filter once (the root DSE, `cn=Subschema`).
pub fn matches(f: &LdapFilter, e: &EntryView<'_>) -> bool {
    compile(f).matches(e)
}

/// Nesting depth of a filter, for the configured maximum.
pub fn depth(f: &LdapFilter) -> usize {
    match f {
        LdapFilter::And(fs) | LdapFilter::Or(fs) => 1 + fs.iter().map(depth).max().unwrap_or(0),
        LdapFilter::Not(f) => 1 + depth(f),
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::{Attr, Entry};
    use ldap3_proto::parse_ldap_filter_str;

    fn view_of(e: &Entry) -> Vec<u8> {
        let mut buf = Vec::new();
        e.encode(&mut buf);
        buf
    }

    fn sample() -> Entry {
        Entry {
            dn: "uid=jdoe,ou=People,dc=example,dc=com".into(),
            attrs: [
                ("objectClass", vec!["top", "inetOrgPerson", "posixAccount"]),
                ("uid", vec!["jdoe"]),
                ("cn", vec!["John Doe", "Johnny"]),
                ("sn", vec!["Doe"]),
                ("mail", vec!["John.Doe@Example.com"]),
                ("uidNumber", vec!["1000"]),
                ("userPassword", vec!["Secret"]),
                ("homeDirectory", vec!["/home/JDoe"]),
                ("telephoneNumber", vec!["+1 555-0100"]),
                ("createTimestamp", vec!["20261129214500Z"]),
            ]
            .into_iter()
            .map(|(n, vs)| Attr { name: n.into(), vals: vs.into_iter().map(|v| v.as_bytes().to_vec()).collect() })
            .collect(),
        }
    }

    fn eval(f: &LdapFilter) -> Option<bool> {
        let buf = view_of(&sample());
        compile(f).eval(&EntryView::new(&buf).unwrap())
    }

    #[test]
    fn filter_table() {
        let (t, f, u) = (Some(true), Some(false), None);
        for (filter, want) in [
            ("(uid=jdoe)", t),
            ("(UID=JDOE)", t),
            ("(userid=jdoe)", t),
            ("(uid=other)", f),
            ("(mail=*)", t),
            ("(telephoneNumber=*)", t),
            ("(description=*)", f),
            ("(objectClass=*)", t),
            ("(objectClass=inetorgperson)", t),
            ("(objectClass=2.16.840.1.113730.3.2.2)", t),
            ("(objectClass=person)", f),
            ("(name=johnny)", t),
            ("(cn=jo*)", t),
            ("(cn=*doe)", t),
            ("(cn=j*n*d*e)", t),
            ("(cn=*ohn*oe*)", t),
            ("(cn=x*)", f),
            ("(cn=john*doe*x)", f),
            ("(uidNumber>=999)", t),
            ("(uidNumber>=1001)", f),
            ("(uidNumber<=1000)", t),
            ("(uidNumber<=0999)", f),
            ("(uidNumber=01000)", t),
            ("(uidNumber=abc)", u),
            ("(!(uidNumber=abc))", u),
            ("(|(uidNumber=abc)(uid=jdoe))", t),
            ("(&(uidNumber=abc)(uid=jdoe))", u),
            ("(&(uidNumber=abc)(uid=x))", f),
            ("(sn>=C)", u),
            ("(createTimestamp>=20261129000000Z)", t),
            ("(createTimestamp<=20261129224500+0200)", f),
            ("(createTimestamp>=2026112921Z)", t),
            ("(homeDirectory=/home/JDoe)", t),
            ("(homeDirectory=/home/jdoe)", f),
            ("(homeDirectory=/home/*)", u),
            ("(telephoneNumber=+15550100)", t),
            ("(telephoneNumber=*555-01*)", t),
            ("(mail=JOHN.DOE@example.COM)", t),
            ("(cn~=JOHNNY)", t),
            ("(noSuchAttr=x)", u),
            ("(!(noSuchAttr=x))", u),
            ("(!(uid=jdoe))", f),
            ("(!(uid=x))", t),
            ("(userPassword=secret)", f),
            ("(userPassword=Secret)", t),
            ("(cn:caseExactMatch:=Johnny)", t),
            ("(cn:caseExactMatch:=johnny)", f),
            ("(cn:2.5.13.2:=johnny)", t),
            ("(uidNumber:integerMatch:=1000)", t),
            ("(:caseIgnoreMatch:=doe)", t),
            ("(ou:dn:=people)", t),
            ("(ou=people)", f),
            ("(cn:noSuchRule:=x)", u),
        ] {
            let parsed = parse_ldap_filter_str(filter).unwrap_or_else(|e| panic!("{filter}: {e:?}"));
            assert_eq!(eval(&parsed), want, "{filter}");
        }
        // ldap3_proto's string parser stops at spaces; build these directly.
        for (attr, value, want) in [
            ("commonName", "john doe", t),
            ("2.5.4.3", "john   doe ", t),
            ("cn", "johndoe", f),
            ("0.9.2342.19200300.100.1.1", "JDOE", t),
        ] {
            assert_eq!(eval(&LdapFilter::Equality(attr.into(), value.into())), want, "{attr}={value}");
        }
    }
}
