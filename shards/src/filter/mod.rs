//! Search filters (RFC 4511 §4.5.1.7), compiled once per request and then
//! evaluated against each candidate entry.
//!
//! Compiling resolves every attribute description to its type (and the
//! names of its subtypes: `(name=x)` matches `cn` and `sn`), picks the
//! matching rule the assertion uses and normalizes the assertion value, so
//! evaluating an entry only normalizes the entry's values. Evaluation is
//! three-valued: an unknown attribute, a type without the needed matching
//! rule, or an assertion value the rule refuses is Undefined, which `!`
//! keeps Undefined and a search treats as no match. `~=` is phonetic for
//! strings (`approx`, as slapd), equality otherwise.
//!
//! Here: attribute names and compiling. `eval`: evaluation, bounded per
//! entry. `text`: the RFC 4515 string form, both ways.

use crate::approx;
use crate::dn::{self, Dn};
use crate::entry::EntryView;
use crate::matching::{self, Piece, Rule};
use crate::octets;
use crate::schema::{self, Schema};
use ldap3_proto::proto::{LdapFilter, LdapMatchingRuleAssertion};

mod eval;
mod text;

pub use eval::{check_assertion, check_assertion_node, matches, set_assertion_tests, with_decided};
pub use text::{parse, to_text};

/// An attribute type as a filter item names it: the type and its subtypes
/// (indexes into the schema's attribute types), resolved once per request.
#[derive(Debug, Clone)]
pub struct Names {
    schema: &'static Schema,
    /// The type named.
    ty: usize,
    /// It and its subtypes.
    types: &'static [usize],
    /// The description's options (`lang-en` of `description;lang-en`),
    /// which a stored description must all carry (RFC 4512 §2.5.2); rare,
    /// so allocated only when present.
    options: Option<std::sync::Arc<str>>,
}

impl Names {
    /// The type an attribute description names, with its subtypes.
    pub fn new(attr: &str) -> Option<Names> {
        Names::of(schema::get(), attr)
    }

    fn of(schema: &'static Schema, attr: &str) -> Option<Names> {
        // `cn;` is no attribute description, nor is `description;x-foo`
        // (an option slapd does not know) or `cn;binary`: its items are
        // Undefined, as slapd's.
        let options_ok =
            || crate::schema::check::options_well_formed(attr) && crate::schema::check::check_options(attr).is_ok();
        if attr.contains(';') && !options_ok() {
            return None;
        }
        let i = schema.attr_index(attr)?;
        let options: Option<std::sync::Arc<str>> = attr.split_once(';').map(|(_, o)| o.into());
        // Nor is a language tag on an operational type (as adds refuse it).
        let tagged = options.as_deref().is_some_and(|o| o.split(';').any(crate::schema::check::is_language_tag));
        if tagged && schema.attrs[i].usage.is_operational() {
            return None;
        }
        Some(Names { schema, ty: i, types: &schema.subtypes[i], options })
    }

    /// The type's schema name (as entries store it).
    pub fn name(&self) -> &'static str {
        self.schema.attrs[self.ty].name()
    }

    /// The schema names of the type and its subtypes: the stored types an
    /// item on it matches.
    pub fn type_names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.types.iter().map(|t| self.schema.attrs[*t].name())
    }

    /// Whether this names the type of `other` or one of its subtypes
    /// (with whatever options): values an item on `other` can match.
    pub fn within(&self, other: &Names) -> bool {
        other.types.contains(&self.ty)
    }

    /// Whether both name the same description: one type with the same
    /// options, in any order or case (`description;lang-en` is not
    /// `description`, nor `description;lang-de`).
    pub fn same(&self, other: &Names) -> bool {
        let set = |o: &Option<std::sync::Arc<str>>| {
            let mut v: Vec<String> = o.as_deref().unwrap_or("").split(';').map(str::to_ascii_lowercase).collect();
            v.sort();
            v.dedup();
            v
        };
        self.ty == other.ty && set(&self.options) == set(&other.options)
    }

    /// The description as an entry stores it: the type's name and options.
    pub fn stored_description(&self) -> String {
        match &self.options {
            Some(o) => format!("{};{o}", self.name()),
            None => self.name().to_string(),
        }
    }

    /// The type's own substrings rule.
    pub fn substr(&self) -> Option<Rule> {
        self.schema.attrs[self.ty].substr
    }

    /// Index keys of the type and its subtypes.
    pub fn keys(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.types.iter().map(|t| self.schema.attrs[*t].key.as_str())
    }

    /// The index key of the type when it alone is named: no subtypes
    /// (whose values its index does not hold) and no options (which its
    /// index does not tell apart).
    pub fn sole_key(&self) -> Option<&'static str> {
        (self.options.is_none() && self.types == [self.ty]).then(|| self.schema.attrs[self.ty].key.as_str())
    }

    /// Whether a stored attribute description (maybe with options) is ours:
    /// entries store types under their first name, so this is a byte compare.
    pub fn covers(&self, stored: &str) -> bool {
        let (base, options) = stored.split_once(';').unwrap_or((stored, ""));
        self.types.iter().any(|t| self.schema.attrs[*t].name().eq_ignore_ascii_case(base))
            && self.options.as_deref().is_none_or(|want| matching::options_within(want, options))
    }
}

impl Node {
    /// Whether an item of the filter is Undefined for every entry (an
    /// unknown attribute, a value its matching rule refuses).
    pub fn has_undefined(&self) -> bool {
        match self {
            Node::Undefined => true,
            Node::And(items) | Node::Or(items) => items.iter().any(Node::has_undefined),
            Node::Not(item) => item.has_undefined(),
            _ => false,
        }
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
    /// An OR's equality items on one attribute under one rule, as one
    /// sorted set of normalized values (`any_of`): each stored value is
    /// normalized and looked up once, where the items one by one cost
    /// items × values per entry (thousands of `member=` items against a
    /// group of thousands of members ran for minutes on one entry).
    AnyOf {
        attr: Names,
        rule: Rule,
        values: Vec<Vec<u8>>,
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
        /// An ordering rule: a value matches when it sorts below the
        /// assertion (RFC 4517 §4.2: the rule's `less than`).
        less: bool,
    },
    /// `~=` on a string type: each assertion's words as phonetic codes
    /// (see `approx`); a value matches when it matches any of them (an OR
    /// of `~=` items on one type is one node, `any_of`: the value's codes
    /// are made once, not once per item).
    Approx {
        attr: Names,
        any: Vec<Vec<String>>,
    },
    /// `(entryDN=<dn>)` and extensible items on it: the entry's own DN
    /// against the assertion, as storage keys, by equality or one of the
    /// DN relations (entryDN is not stored with the entry; slapd computes it).
    EntryDn {
        attr: Names,
        key: Vec<u8>,
        rule: Rule,
    },
    /// An assertion on an attribute the requester may search in some
    /// entries only (access control decides per entry, see `eval_with`).
    Guarded(Names, Box<Node>),
}

/// Whether a requester may search an attribute (access control).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Searchable {
    Yes,
    No,
    /// It depends on the entry.
    Depends,
}

/// A Matched Values item (RFC 3876): as `compile`, but a presence item
/// names its attribute even where a search filter knows it is always
/// true (`(entryDN=*)` keeps entryDN's values, and only those).
pub fn compile_value_item(f: &LdapFilter) -> Node {
    match f {
        LdapFilter::Present(a) => Names::of(schema::get(), a).map_or(Node::Undefined, Node::Present),
        _ => compile(f),
    }
}

pub fn compile(f: &LdapFilter) -> Node {
    let schema = schema::get();
    match f {
        LdapFilter::And(fs) => Node::And(fs.iter().map(compile).collect()),
        LdapFilter::Or(fs) => any_of(fs.iter().map(compile).collect()),
        LdapFilter::Not(f) => Node::Not(Box::new(compile(f))),
        // Every entry has an objectClass, and the computed entryDN,
        // subschemaSubentry and hasSubordinates (slapd matches them
        // present on every entry).
        LdapFilter::Present(a)
            if schema::check::options_well_formed(a)
                && is_one_of(a, &["objectClass", "entryDN", "subschemaSubentry", "hasSubordinates"]) =>
        {
            Node::True
        }
        LdapFilter::Present(a) => Names::of(schema, a).map_or(Node::Undefined, Node::Present),
        LdapFilter::Equality(a, v) | LdapFilter::Approx(a, v) => {
            // The type looked up once for the special ones below.
            let name = matching::AttrName::new(a);
            // objectClass, structuralObjectClass.
            if name.is_type("2.5.4.0") || name.is_type("2.5.21.9") {
                // structuralObjectClass matches with objectClass's rule,
                // as slapd's (an inetOrgPerson's structural class is also
                // a person). A class the schema does not know, by name or
                // OID, is Undefined (as slapd's objectClass rules have it).
                object_class(schema, a, v).unwrap_or(Node::Undefined)
            } else if name.is_type("1.3.6.1.1.20") {
                // Without an approximate rule, `~=` is equality (as slapd falls back).
                match (Names::of(schema, a), octets::unescape_text(v).map(|v| dn::key_of(&v))) {
                    (Some(attr), Some(Ok(key))) => Node::EntryDn { attr, key, rule: Rule::DistinguishedName },
                    _ => Node::Undefined,
                }
            } else if matches!(f, LdapFilter::Approx(..)) {
                approx(schema, a, v)
            } else {
                equality(schema, a, v)
            }
        }
        LdapFilter::Substring(a, sub) => item(
            schema,
            a,
            |at| at.substr,
            |attr, rule| {
                let piece = |p: &String, at| rule.normalize_piece_at(&octets::unescape(p), at).into_owned();
                // An empty piece (`(sn=**)` sent as BER) is no assertion
                // value of the rule: Undefined, as slapd makes it, not a
                // piece every value contains.
                let pieces = sub.initial.iter().chain(&sub.any).chain(&sub.final_);
                if !pieces.into_iter().all(|p| !p.is_empty() && rule.valid_piece(&octets::unescape(p))) {
                    return None;
                }
                Some(Node::Substrings {
                    attr,
                    rule,
                    initial: sub.initial.as_ref().map(|p| piece(p, Piece::Initial)),
                    any: sub.any.iter().map(|p| piece(p, Piece::Any)).collect(),
                    last: sub.final_.as_ref().map(|p| piece(p, Piece::Final)),
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
                    let v = octets::unescape(v);
                    let norm = rule.normalize_assertion(&v)?;
                    let key = rule.order_key(&norm).into_owned();
                    Some(Node::Order { attr, rule, key, greater })
                },
            )
        }
        LdapFilter::Extensible(m) => extensible(schema, m).unwrap_or(Node::Undefined),
    }
}

/// `~=`: phonetic for directory and IA5 strings (as slapd's approx rules
/// for caseIgnore/caseExact and their IA5 forms), equality otherwise.
fn approx(schema: &'static Schema, a: &str, v: &str) -> Node {
    let rule = schema.attr(a).and_then(|at| at.equality);
    let phonetic = rule
        .is_some_and(|r| matches!(r, Rule::CaseIgnore | Rule::CaseExact | Rule::CaseIgnoreIA5 | Rule::CaseExactIA5));
    let bytes = octets::unescape(v);
    let valid = rule.is_none_or(|r| r.valid_assertion(&bytes));
    match Names::of(schema, a) {
        Some(_) if !valid => Node::Undefined,
        Some(attr) if phonetic => Node::Approx { attr, any: vec![approx::assertion(&bytes)] },
        _ => equality(schema, a, v),
    }
}

fn equality(schema: &'static Schema, a: &str, v: &str) -> Node {
    item(schema, a, schema::AttributeType::equality_or_dn, |attr, rule| {
        let v = octets::unescape(v);
        let value = rule.normalize_assertion(&v)?.into_owned();
        Some(Node::Equal { attr, rule, value })
    })
}

/// Whether `attr` names one of `types` (`matching::same_attr`), its own
/// type looked up once.
fn is_one_of(attr: &str, types: &[&str]) -> bool {
    let name = matching::AttrName::new(attr);
    types.iter().any(|t| name.is(t))
}

/// `(objectClass=person)` matches entries of every class below `person`
/// (RFC 4512 §2.4.1): one equality per subclass, so the objectClass index
/// answers it as stored. Every entry is of class `top`. `None` for a value
/// that names no class.
fn object_class(schema: &'static Schema, attr: &str, value: &str) -> Option<Node> {
    let names = Names::of(schema, attr)?;
    let class = schema.class_index(value)?;
    if schema.classes[class].oid == "2.5.6.0" {
        return Some(Node::True);
    }
    let rule = schema.attr(attr)?.equality?;
    let mut each = schema.subclasses[class].iter().filter_map(|c| {
        let value = rule.normalize(schema.classes[*c].oid.as_bytes())?.into_owned();
        Some(Node::Equal { attr: names.clone(), rule, value })
    });
    Some(match schema.subclasses[class].len() {
        1 => each.next()?,
        _ => any_of(each.collect()),
    })
}

/// An OR of `items`, its equality items gathered into one `AnyOf` per
/// attribute description and rule (what the OR means is unchanged: a
/// value matches the set exactly when it matches one of the items).
/// Each set stands where its first item stood, so an OR that a cheap
/// early item decides still stops there.
fn any_of(items: Vec<Node>) -> Node {
    // An item kept as it is, or the index of the set standing in its place.
    let mut order: Vec<Result<Node, usize>> = Vec::new();
    let mut sets: Vec<(Names, Rule, Vec<Vec<u8>>)> = Vec::new();
    let mut at: std::collections::HashMap<(usize, Option<std::sync::Arc<str>>, Rule), usize> = Default::default();
    // `~=` items on one type, gathered as the sets are.
    let mut approx: std::collections::HashMap<(usize, Option<std::sync::Arc<str>>), usize> = Default::default();
    for item in items {
        let item = match item {
            Node::Approx { attr, any } => match approx.get(&(attr.ty, attr.options.clone())) {
                Some(&i) => {
                    if let Ok(Node::Approx { any: all, .. }) = &mut order[i] {
                        all.extend(any);
                    }
                    continue;
                }
                None => {
                    approx.insert((attr.ty, attr.options.clone()), order.len());
                    Node::Approx { attr, any }
                }
            },
            other => other,
        };
        let Node::Equal { attr, rule, value } = item else {
            order.push(Ok(item));
            continue;
        };
        let key = (attr.ty, attr.options.clone(), rule);
        match at.get(&key) {
            Some(&i) => sets[i].2.push(value),
            None => {
                at.insert(key, sets.len());
                order.push(Err(sets.len()));
                sets.push((attr, rule, vec![value]));
            }
        }
    }
    let mut sets: Vec<Option<Node>> = sets
        .into_iter()
        .map(|(attr, rule, mut values)| {
            Some(if values.len() == 1 {
                Node::Equal { attr, rule, value: values.pop().expect("one value") }
            } else {
                values.sort_unstable();
                values.dedup();
                Node::AnyOf { attr, rule, values }
            })
        })
        .collect();
    let mut items: Vec<Node> =
        order.into_iter().map(|o| o.unwrap_or_else(|i| sets[i].take().expect("each set once"))).collect();
    // The same `~=` assertion twice is one.
    for item in &mut items {
        if let Node::Approx { any, .. } = item {
            any.sort_unstable();
            any.dedup();
        }
    }
    match items.len() {
        1 => items.pop().expect("one item"),
        _ => Node::Or(items),
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
    // Also None for a type with a malformed option (`cn;`).
    let Some(names) = Names::of(schema, attr) else { return Node::Undefined };
    build(names, rule).unwrap_or(Node::Undefined)
}

fn extensible(schema: &'static Schema, m: &LdapMatchingRuleAssertion) -> Option<Node> {
    let attr = match &m.type_ {
        Some(t) => Some(Names::of(schema, t)?),
        None => None,
    };
    // Without a rule, objectClass's equality, which takes subclasses in
    // (`(objectClass:=person)` is `(objectClass=person)`).
    if let (Some(t), None) = (&m.type_, &m.matching_rule) {
        if matching::same_attr(t, "objectClass") {
            return object_class(schema, t, &m.match_value);
        }
    }
    let (rule, usage) = match &m.matching_rule {
        Some(name) => matching::rule_named(name).map(|i| (i.rule, i.usage))?,
        None => (schema.attr(m.type_.as_deref()?)?.equality?, matching::Usage::Equality),
    };
    // A rule the type cannot take is Undefined (slapd: inappropriate
    // matching); without a type, each attribute is checked (`extensible_eval`).
    if let Some(names) = &attr {
        if !rule.info().usable_with(&schema.attrs[names.ty]) {
            return None;
        }
    }
    if let Some(names) = &attr {
        if names.name() == "entryDN" {
            // entryDN is no stored attribute: the entry's own DN (the
            // dnAttributes flag adds nothing to it, as in slapd). Only DN
            // rules got past `usable_with`.
            let key = dn::key_of(&octets::unescape_text(&m.match_value)?).ok()?;
            return Some(Node::EntryDn { attr: attr?, key, rule });
        }
    }
    if usage == matching::Usage::Substrings {
        // The value is a substrings assertion: without a '*' it is not one
        // and the item is Undefined, as slapd has it.
        return substrings_assertion(attr?, rule, &m.match_value);
    }
    let raw = octets::unescape(&m.match_value);
    let value = rule.normalize_assertion(&raw)?.into_owned();
    let less = usage == matching::Usage::Ordering;
    Some(Node::Extensible { attr, rule, value, dn_attributes: m.dn_attributes, less })
}

/// `cn:caseIgnoreSubstringsMatch:=jo*n`: a substrings item.
fn substrings_assertion(attr: Names, rule: Rule, text: &str) -> Option<Node> {
    if !text.contains('*') {
        return None;
    }
    let pieces: Vec<&str> = text.split('*').collect();
    if !pieces.iter().all(|p| rule.valid_piece(&octets::unescape(p))) {
        return None;
    }
    let piece = |p: &str, at| (!p.is_empty()).then(|| rule.normalize_piece_at(&octets::unescape(p), at).into_owned());
    let (first, last) = (pieces[0], pieces[pieces.len() - 1]);
    let any = pieces[1..pieces.len() - 1].iter().filter_map(|p| piece(p, Piece::Any)).collect();
    Some(Node::Substrings { attr, rule, initial: piece(first, Piece::Initial), any, last: piece(last, Piece::Final) })
}

/// Nesting depth of a filter, for the configured maximum.
/// The terms of a filter: every item and every AND, OR and NOT.
pub fn terms(f: &LdapFilter) -> usize {
    match f {
        LdapFilter::And(fs) | LdapFilter::Or(fs) => 1 + fs.iter().map(terms).sum::<usize>(),
        LdapFilter::Not(f) => 1 + terms(f),
        _ => 1,
    }
}

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

    /// An empty substrings piece is no assertion value: the item is
    /// Undefined, as slapd makes it (a critical Assertion `(sn=**)` held,
    /// and a write went through that slapd refuses with 122).
    #[test]
    fn an_empty_substrings_piece_makes_an_item_undefined() {
        let buf = view_of(&sample());
        let view = EntryView::new(&buf).unwrap();
        let sub = |initial: Option<&str>, any: &[&str], last: Option<&str>| {
            LdapFilter::Substring(
                "cn".into(),
                ldap3_proto::proto::LdapSubstringFilter {
                    initial: initial.map(Into::into),
                    any: any.iter().map(|a| a.to_string()).collect(),
                    final_: last.map(Into::into),
                },
            )
        };
        for f in
            [sub(None, &[""], None), sub(Some(""), &[], None), sub(None, &[], Some("")), sub(Some("J"), &[""], None)]
        {
            assert!(matches!(compile(&f), Node::Undefined), "{f:?}");
            assert!(!compile(&LdapFilter::Not(Box::new(f))).matches(&view));
        }
        assert!(compile(&sub(Some("J"), &["hn"], None)).matches(&view));
    }

    /// `cn;` names no attribute (an option has a character at least): an
    /// item on it is Undefined, and so is its NOT; it matched like `cn`.
    #[test]
    fn an_empty_option_makes_an_item_undefined() {
        let buf = view_of(&sample());
        let view = EntryView::new(&buf).unwrap();
        for f in [
            LdapFilter::Equality("cn;".into(), "Johnny".into()),
            LdapFilter::Present("cn;".into()),
            LdapFilter::Present("objectClass;".into()),
            LdapFilter::Equality("objectClass;".into(), "top".into()),
            LdapFilter::Equality("cn;lang-en;".into(), "Johnny".into()),
        ] {
            let node = compile(&f);
            assert!(matches!(node, Node::Undefined), "{f:?}");
            assert!(!compile(&LdapFilter::Not(Box::new(f))).matches(&view));
        }
        assert!(compile(&LdapFilter::Equality("cn".into(), "Johnny".into())).matches(&view));
    }

    /// An option slapd does not know (`x-foo`, `binary` on a string type)
    /// and a class the schema does not know make an item Undefined, so
    /// `!` matches nothing (it matched every entry); without a rule,
    /// objectClass's extensible match takes subclasses in.
    #[test]
    fn unknown_options_and_classes_are_undefined() {
        let buf = view_of(&sample());
        let view = EntryView::new(&buf).unwrap();
        let parse = |s: &str| super::parse(s).unwrap();
        for f in [
            "(cn;x-foo=*)",
            "(cn;binary=Johnny)",
            "(objectClass=noSuchClass)",
            "(objectClass=1.2.3.4.5.6)",
            "(objectClass~=noSuchClass)",
            "(objectClass:=noSuchClass)",
            "(objectClass:objectIdentifierMatch:=noSuchClass)",
        ] {
            assert!(matches!(compile(&parse(f)), Node::Undefined), "{f}");
            assert!(!compile(&parse(&format!("(!{f})"))).matches(&view), "{f}");
        }
        for f in ["(objectClass:=person)", "(2.5.4.0:=2.5.6.6)", "(objectClass:dn:=top)", "(cn;lang-en=*)"] {
            let matched = compile(&parse(f)).matches(&view);
            assert_eq!(matched, !f.contains("lang-en"), "{f}");
        }
    }

    fn view_of(e: &Entry) -> Vec<u8> {
        let mut buf = Vec::new();
        e.encode(&mut buf).unwrap();
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
    fn an_or_of_approximate_items_on_one_type_is_one_node() {
        let f = crate::filter::text::parse("(|(cn~=smith)(sn~=x)(cn~=jonson))").unwrap();
        let Node::Or(items) = compile(&f) else { panic!() };
        assert_eq!(items.len(), 2, "{items:?}");
        assert!(matches!(&items[0], Node::Approx { any, .. } if any.len() == 2));
    }

    #[test]
    fn parse_text() {
        let f =
            parse("(&(objectClass=person)(|(uid=j*doe*x)(!(cn=a\\2ab)))(age>=3)(mail=*)(cn:dn:caseExactMatch:=Jo))")
                .unwrap();
        let LdapFilter::And(items) = f else { panic!("{f:?}") };
        assert_eq!(items.len(), 5);
        assert!(matches!(&items[1], LdapFilter::Or(v) if matches!(&v[0],
            LdapFilter::Substring(_, s) if s.initial.as_deref() == Some("j") && s.any == ["doe"] && s.final_.as_deref() == Some("x"))));
        assert!(matches!(&items[1], LdapFilter::Or(v) if matches!(&v[1],
            LdapFilter::Not(n) if **n == LdapFilter::Equality("cn".into(), "a*b".into()))));
        assert_eq!(items[3], LdapFilter::Present("mail".into()));
        assert!(
            matches!(&items[4], LdapFilter::Extensible(m) if m.dn_attributes && m.matching_rule.as_deref() == Some("caseExactMatch"))
        );
        let back = to_text(&parse("(&(objectClass=person)(|(uid=j*doe*x)(!(cn=a\\2ab)))(age>=3)(mail=*))").unwrap());
        assert_eq!(back, "(&(objectClass=person)(|(uid=j*doe*x)(!(cn=a\\2ab)))(age>=3)(mail=*))");
        for bad in ["", "(", "(cn=a", "cn=a", "(cn=a))", "(=a)", "(cn=\\zz)", "(cn=a(b)"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
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
            // Every superclass of the entry's classes (RFC 4512 §2.4.1).
            ("(objectClass=person)", t),
            ("(objectClass=2.5.6.6)", t),
            ("(objectClass=top)", t),
            ("(objectClass=device)", f),
            // slapd: a substrings rule is no rule for extensible matching
            // of a Directory String (`mr_usable_with_at`), nor is integerMatch.
            ("(cn:caseIgnoreSubstringsMatch:=jo*)", u),
            ("(cn:caseIgnoreSubstringsMatch:=johnny)", u),
            ("(cn:integerMatch:=1)", u),
            ("(!(cn:integerMatch:=1))", u),
            ("(uidNumber:integerOrderingMatch:=1000000)", t),
            ("(uidNumber:integerOrderingMatch:=1)", f),
            ("(uidNumber=01)", u),
            ("(uidNumber:1.2.840.113556.1.4.803:=40)", t),
            ("(uidNumber:1.2.840.113556.1.4.803:=41)", f),
            ("(uidNumber:integerBitOrMatch:=1032)", t),
            ("(uidNumber:integerBitOrMatch:=1025)", f),
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
            ("(uidNumber<=999)", f),
            ("(uidNumber<=0999)", u), // leading zeros: invalid (slapd: Undefined)
            ("(uidNumber=01000)", u),
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
