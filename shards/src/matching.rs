//! Matching rules (RFC 4517 §4.2, string preparation after RFC 4518) and the
//! attribute-name helpers every other module uses.
//!
//! A rule turns a value into its normal form; equality is equality of normal
//! forms, ordering compares `order_key`s bytewise, substring matching works
//! on normal forms too. A value that is not valid for the rule has no normal
//! form (`None`): a filter on it evaluates to Undefined (RFC 4511 §4.5.1.7).
//! String rules fold case (the caseIgnore family), remove leading and
//! trailing spaces and collapse inner runs of spaces; telephone numbers also
//! drop hyphens, numeric strings drop every space. `approx` (`~=`) is
//! equality under the attribute's equality rule: there is no phonetic match.
//!
//! Index keys, duplicate-value detection, DN normalization, filters,
//! Compare and server-side sorting all go through `normalize`/`order_key`
//! here, so they can never disagree.

mod certs;
mod forms;
mod names;
pub(crate) use forms::LEGACY_EDGE_SPACES;
use forms::*;
pub use forms::{csn, fold, generalized_time, integer, is_descriptor, is_numeric_oid, numericoid};
pub use names::*;

use crate::dn::Dn;
use crate::schema::{self, AttributeType};
use std::borrow::Cow;
use std::cmp::Ordering;

/// Where a piece stands in a substrings assertion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece {
    Initial,
    Any,
    Final,
}

/// The matching rules this server implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rule {
    /// objectIdentifierMatch as slapd normalizes it: numeric OIDs only, so
    /// a descriptor is no value or assertion of such a type.
    ObjectIdentifier,
    /// The same rule for the types whose values slapd reads by name too:
    /// object classes (`objectClass`, `structuralObjectClass`, matched by
    /// class) and ppolicy's `pwdAttribute` (attribute types), so a name
    /// and its OID are one value. Never named by a filter:
    /// `objectIdentifierMatch` is `ObjectIdentifier`.
    ObjectClass,
    DistinguishedName,
    /// RFC 4517's RDN syntax as OpenLDAP defines it (`rdnMatch`).
    Rdn,
    /// OpenLDAP's DN relations for extensible matching (slapd hides them
    /// from `cn=Subschema`): the value is the assertion or below it; one
    /// level below it; strictly below it; strictly above it.
    DnSubtree,
    DnOneLevel,
    DnSubordinate,
    DnSuperior,
    CaseIgnore,
    CaseIgnoreOrdering,
    CaseIgnoreSubstrings,
    CaseExact,
    CaseExactOrdering,
    CaseExactSubstrings,
    NumericString,
    NumericStringOrdering,
    NumericStringSubstrings,
    CaseIgnoreList,
    CaseIgnoreListSubstrings,
    Boolean,
    Integer,
    IntegerOrdering,
    BitString,
    OctetString,
    OctetStringOrdering,
    TelephoneNumber,
    TelephoneNumberSubstrings,
    UniqueMember,
    GeneralizedTime,
    GeneralizedTimeOrdering,
    IntegerFirstComponent,
    /// Extensible match only (slapd, Active Directory): every bit of the
    /// assertion set, or any of them.
    IntegerBitAnd,
    IntegerBitOr,
    ObjectIdentifierFirstComponent,
    DirectoryStringFirstComponent,
    CaseExactIA5,
    CaseIgnoreIA5,
    CaseIgnoreIA5Substrings,
    CaseExactIA5Substrings,
    Uuid,
    UuidOrdering,
    /// OpenLDAP's CSN rules: valid CSNs compare as their octets.
    Csn,
    CsnOrdering,
    /// RFC 4523's: a certificate by serial number and issuer, a CRL by
    /// issuer and thisUpdate (`certs`). A stored value's identity stays
    /// its octets.
    CertificateExact,
    CertificateListExact,
    /// Rules OpenLDAP's stock schema files name that no filter can
    /// evaluate here (slapd implements the first two as no-ops too; it
    /// parses the X.509 assertions of `attributeCertificateExactMatch`
    /// and the authz rules of `authzMatch`): stored values compare as
    /// octets (for Modify), assertions are Undefined.
    PresentationAddress,
    ProtocolInformation,
    AttributeCertificateExact,
    Authz,
}

/// What a rule is used for (the EQUALITY, ORDERING or SUBSTR slot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Usage {
    Equality,
    Ordering,
    Substrings,
}

pub struct RuleInfo {
    pub rule: Rule,
    pub name: &'static str,
    pub oid: &'static str,
    /// The syntax of the assertion value.
    pub syntax: &'static str,
    pub usage: Usage,
}

const fn r(rule: Rule, name: &'static str, oid: &'static str, syntax: &'static str, usage: Usage) -> RuleInfo {
    RuleInfo { rule, name, oid, syntax, usage }
}

const S: &str = "1.3.6.1.4.1.1466.115.121.1.";
use Usage::{Equality as EQ, Ordering as ORD, Substrings as SUB};

/// Every rule with its RFC 4517 (or RFC 4530, OpenLDAP) name and OID, as
/// published in `cn=Subschema`.
pub const RULES: &[RuleInfo] = &[
    r(Rule::ObjectIdentifier, "objectIdentifierMatch", "2.5.13.0", "38", EQ),
    r(Rule::ObjectClass, "objectIdentifierMatch", "2.5.13.0", "38", EQ),
    r(Rule::DistinguishedName, "distinguishedNameMatch", "2.5.13.1", "12", EQ),
    r(Rule::Rdn, "rdnMatch", "1.2.36.79672281.1.13.3", "1.2.36.79672281.1.5.0", EQ),
    r(Rule::CaseIgnore, "caseIgnoreMatch", "2.5.13.2", "15", EQ),
    r(Rule::CaseIgnoreOrdering, "caseIgnoreOrderingMatch", "2.5.13.3", "15", ORD),
    r(Rule::CaseIgnoreSubstrings, "caseIgnoreSubstringsMatch", "2.5.13.4", "58", SUB),
    r(Rule::CaseExact, "caseExactMatch", "2.5.13.5", "15", EQ),
    r(Rule::CaseExactOrdering, "caseExactOrderingMatch", "2.5.13.6", "15", ORD),
    r(Rule::CaseExactSubstrings, "caseExactSubstringsMatch", "2.5.13.7", "58", SUB),
    r(Rule::NumericString, "numericStringMatch", "2.5.13.8", "36", EQ),
    r(Rule::NumericStringOrdering, "numericStringOrderingMatch", "2.5.13.9", "36", ORD),
    r(Rule::NumericStringSubstrings, "numericStringSubstringsMatch", "2.5.13.10", "58", SUB),
    r(Rule::CaseIgnoreList, "caseIgnoreListMatch", "2.5.13.11", "41", EQ),
    r(Rule::CaseIgnoreListSubstrings, "caseIgnoreListSubstringsMatch", "2.5.13.12", "58", SUB),
    r(Rule::Boolean, "booleanMatch", "2.5.13.13", "7", EQ),
    r(Rule::Integer, "integerMatch", "2.5.13.14", "27", EQ),
    r(Rule::IntegerOrdering, "integerOrderingMatch", "2.5.13.15", "27", ORD),
    r(Rule::BitString, "bitStringMatch", "2.5.13.16", "6", EQ),
    r(Rule::OctetString, "octetStringMatch", "2.5.13.17", "40", EQ),
    r(Rule::OctetStringOrdering, "octetStringOrderingMatch", "2.5.13.18", "40", ORD),
    r(Rule::TelephoneNumber, "telephoneNumberMatch", "2.5.13.20", "50", EQ),
    r(Rule::TelephoneNumberSubstrings, "telephoneNumberSubstringsMatch", "2.5.13.21", "58", SUB),
    r(Rule::UniqueMember, "uniqueMemberMatch", "2.5.13.23", "34", EQ),
    r(Rule::GeneralizedTime, "generalizedTimeMatch", "2.5.13.27", "24", EQ),
    r(Rule::GeneralizedTimeOrdering, "generalizedTimeOrderingMatch", "2.5.13.28", "24", ORD),
    r(Rule::IntegerFirstComponent, "integerFirstComponentMatch", "2.5.13.29", "27", EQ),
    r(Rule::IntegerBitAnd, "integerBitAndMatch", "1.2.840.113556.1.4.803", "27", EQ),
    r(Rule::IntegerBitOr, "integerBitOrMatch", "1.2.840.113556.1.4.804", "27", EQ),
    r(Rule::ObjectIdentifierFirstComponent, "objectIdentifierFirstComponentMatch", "2.5.13.30", "38", EQ),
    r(Rule::DirectoryStringFirstComponent, "directoryStringFirstComponentMatch", "2.5.13.31", "15", EQ),
    r(Rule::CaseExactIA5, "caseExactIA5Match", "1.3.6.1.4.1.1466.109.114.1", "26", EQ),
    r(Rule::CaseIgnoreIA5, "caseIgnoreIA5Match", "1.3.6.1.4.1.1466.109.114.2", "26", EQ),
    r(Rule::CaseIgnoreIA5Substrings, "caseIgnoreIA5SubstringsMatch", "1.3.6.1.4.1.1466.109.114.3", "58", SUB),
    r(Rule::CaseExactIA5Substrings, "caseExactIA5SubstringsMatch", "1.3.6.1.4.1.4203.1.2.1", "58", SUB),
    r(Rule::Uuid, "UUIDMatch", "1.3.6.1.1.16.2", "1.3.6.1.1.16.1", EQ),
    r(Rule::UuidOrdering, "UUIDOrderingMatch", "1.3.6.1.1.16.3", "1.3.6.1.1.16.1", ORD),
    r(Rule::Csn, "CSNMatch", "1.3.6.1.4.1.4203.666.11.2.2", "1.3.6.1.4.1.4203.666.11.2.1", EQ),
    r(Rule::CsnOrdering, "CSNOrderingMatch", "1.3.6.1.4.1.4203.666.11.2.3", "1.3.6.1.4.1.4203.666.11.2.1", ORD),
    r(Rule::PresentationAddress, "presentationAddressMatch", "2.5.13.22", "43", EQ),
    r(Rule::ProtocolInformation, "protocolInformationMatch", "2.5.13.24", "42", EQ),
    r(Rule::CertificateExact, "certificateExactMatch", "2.5.13.34", "1.3.6.1.1.15.1", EQ),
    r(Rule::CertificateListExact, "certificateListExactMatch", "2.5.13.38", "1.3.6.1.1.15.5", EQ),
    r(Rule::AttributeCertificateExact, "attributeCertificateExactMatch", "2.5.13.45", "1.3.6.1.1.15.5", EQ),
    r(Rule::Authz, "authzMatch", "1.3.6.1.4.1.4203.666.4.12", "1.3.6.1.4.1.4203.666.2.7", EQ),
    r(Rule::DnOneLevel, "dnOneLevelMatch", "1.3.6.1.4.1.4203.666.4.8", "12", EQ),
    r(Rule::DnSubtree, "dnSubtreeMatch", "1.3.6.1.4.1.4203.666.4.9", "12", EQ),
    r(Rule::DnSubordinate, "dnSubordinateMatch", "1.3.6.1.4.1.4203.666.4.10", "12", EQ),
    r(Rule::DnSuperior, "dnSuperiorMatch", "1.3.6.1.4.1.4203.666.4.11", "12", EQ),
];

impl RuleInfo {
    /// Whether `cn=Subschema` lists the rule, as slapd's does: it hides
    /// the DN relations, the CSN and authz rules and
    /// attributeCertificateExactMatch, and lists no
    /// presentationAddressMatch or directoryStringFirstComponentMatch.
    pub fn published(&self) -> bool {
        use Rule::*;
        !self.rule.is_dn_relation()
            && !matches!(
                self.rule,
                ObjectClass
                    | Csn
                    | CsnOrdering
                    | Authz
                    | AttributeCertificateExact
                    | PresentationAddress
                    | DirectoryStringFirstComponent
            )
    }

    /// The full OID of the assertion syntax.
    pub fn syntax_oid(&self) -> String {
        if self.syntax.contains('.') {
            self.syntax.to_string()
        } else {
            format!("{S}{}", self.syntax)
        }
    }
}

impl RuleInfo {
    /// Whether an extensible match may apply this rule to values of `at`,
    /// as slapd's `mr_usable_with_at` decides (and so `matchingRuleUse`):
    /// a rule made for extensible matching applies to its own assertion
    /// syntax, to a type whose equality it is, and to Country String for
    /// the string syntaxes that syntax refines; some rules also list
    /// compatible syntaxes. Substrings rules and the UUID and authz rules
    /// are not for extensible matching; `directoryStringFirstComponentMatch`
    /// slapd does not know. Anything else makes the item Undefined.
    pub fn usable_with(&self, at: &AttributeType) -> bool {
        use Rule::*;
        let extensible = self.usage != Usage::Substrings
            && !matches!(self.rule, Uuid | UuidOrdering | Authz | DirectoryStringFirstComponent | Csn);
        // Without allocating: a type-less extensible filter asks this of
        // every attribute of every entry it looks at.
        let short = at.syntax.strip_prefix(S);
        let own_syntax = match self.syntax.contains('.') {
            true => at.syntax == self.syntax,
            false => short == Some(self.syntax),
        };
        let refines = short == Some("11") && ["15", "26", "44"].contains(&self.syntax);
        let compat: &[&str] = match self.rule {
            CaseIgnore | CaseIgnoreOrdering | CaseIgnoreSubstrings | CaseExact | CaseExactOrdering
            | CaseExactSubstrings => &["11", "44", "50"],
            IntegerFirstComponent => &["27", "17"],
            ObjectIdentifierFirstComponent => &["38", "3", "16", "54", "30", "31", "35", "37"],
            CertificateExact => &["8"],
            CertificateListExact => &["9"],
            AttributeCertificateExact => &["1.3.6.1.4.1.4203.666.11.10.2.1"],
            _ => &[],
        };
        let compatible = compat.iter().any(|c| match c.contains('.') {
            true => at.syntax == *c,
            false => short == Some(c),
        });
        (extensible && (own_syntax || at.equality == Some(self.rule) || refines)) || compatible
    }
}

/// A rule by name or OID (case-insensitive), as filters and schema files name them.
pub fn rule_named(name: &str) -> Option<&'static RuleInfo> {
    RULES.iter().find(|r| r.name.eq_ignore_ascii_case(name) || r.oid == name)
}

impl Rule {
    fn is_dn_relation(self) -> bool {
        matches!(self, Rule::DnSubtree | Rule::DnOneLevel | Rule::DnSubordinate | Rule::DnSuperior)
    }

    /// For a DN relation, whether DN storage key `have` stands in it to
    /// the assertion's key `want`.
    pub fn dn_relates(self, have: &[u8], want: &[u8]) -> bool {
        use crate::dn::key_below;
        match self {
            Rule::DnSubtree => have == want || key_below(have, want),
            Rule::DnOneLevel => crate::dn::key_parent(have) == Some(want),
            Rule::DnSubordinate => have != want && key_below(have, want),
            Rule::DnSuperior => have != want && key_below(want, have),
            _ => have == want,
        }
    }

    pub fn info(self) -> &'static RuleInfo {
        RULES.iter().find(|r| r.rule == self).expect("every rule is listed")
    }

    /// The normal form of `value`, or `None` when the value is not valid
    /// for this rule.
    pub fn normalize(self, value: &[u8]) -> Option<Cow<'_, [u8]>> {
        use Rule::*;
        match self {
            CaseIgnore
            | CaseIgnoreOrdering
            | CaseIgnoreSubstrings
            | CaseIgnoreIA5
            | CaseIgnoreIA5Substrings
            | DirectoryStringFirstComponent => Some(prep(value, true, true)),
            CaseExact | CaseExactOrdering | CaseExactSubstrings | CaseExactIA5 | CaseExactIA5Substrings => {
                Some(prep(value, false, true))
            }
            NumericString | NumericStringOrdering | NumericStringSubstrings => Some(strip(value, |b| b == b' ')),
            TelephoneNumber | TelephoneNumberSubstrings => {
                let stripped = strip(value, |b| b == b' ' || b == b'-');
                Some(match prep(&stripped, true, false) {
                    Cow::Borrowed(_) => stripped,
                    Cow::Owned(v) => Cow::Owned(v),
                })
            }
            CaseIgnoreList | CaseIgnoreListSubstrings => Some(list(value)),
            // RFC 4517 §3.3.3, as slapd's booleanValidate: exactly TRUE or
            // FALSE; `true` is no Boolean (an item with it is Undefined).
            Boolean => match value {
                b"TRUE" | b"FALSE" => Some(Cow::Borrowed(value)),
                _ => None,
            },
            Integer | IntegerOrdering | IntegerBitAnd | IntegerBitOr => integer(value).map(Cow::Owned),
            IntegerFirstComponent => first_component(value).and_then(|c| integer(c.as_bytes())).map(Cow::Owned),
            BitString | OctetString | OctetStringOrdering => Some(Cow::Borrowed(value)),
            PresentationAddress | ProtocolInformation | AttributeCertificateExact | Authz => Some(Cow::Borrowed(value)),
            CertificateExact => Some(Cow::Owned(certs::certificate_form(value))),
            CertificateListExact => Some(Cow::Owned(certs::certificate_list_form(value))),
            DistinguishedName => dn(value).map(|d| Cow::Owned(d.into_bytes())),
            Rdn => rdn(value).map(|d| Cow::Owned(d.into_bytes())),
            // As storage keys: the relations are prefix tests on them.
            DnSubtree | DnOneLevel | DnSubordinate | DnSuperior => {
                crate::dn::key_of(std::str::from_utf8(value).ok()?).ok().map(Cow::Owned)
            }
            UniqueMember => unique_member(value).map(Cow::Owned),
            GeneralizedTime | GeneralizedTimeOrdering => generalized_time(value).map(|t| Cow::Owned(t.into_bytes())),
            ObjectIdentifier => numericoid(value).then_some(Cow::Borrowed(value)),
            ObjectClass => std::str::from_utf8(value).ok().and_then(oid).map(Cow::Owned),
            // The first component of a schema description: a matching
            // rule's (`(matchingRules=caseIgnoreMatch)`) may be named too.
            ObjectIdentifierFirstComponent => {
                let first = first_component(value)?;
                match rule_named(first).filter(|_| is_descriptor(first)) {
                    Some(rule) => Some(Cow::Owned(rule.oid.as_bytes().to_vec())),
                    None => oid(first).map(Cow::Owned),
                }
            }
            Uuid | UuidOrdering => uuid(value).map(Cow::Owned),
            Csn | CsnOrdering => csn(value),
        }
    }

    /// `normalize_piece` for a piece at `at` in its assertion, with the
    /// edge spaces slapd drops there: IA5 pieces are trimmed at both ends
    /// wherever they stand; for the directory-string rules, the leading
    /// spaces of an initial piece and the trailing ones of a final piece
    /// (a value has none there), while the others stay significant. An
    /// initial piece of spaces only is one space, as slapd prepares it:
    /// `(cn=\20*)` matches no value (a final one, `(cn=*\20)`, all).
    pub fn normalize_piece_at(self, piece: &[u8], at: Piece) -> Cow<'_, [u8]> {
        use Rule::*;
        let start = || piece.iter().position(|b| *b != b' ').unwrap_or(piece.len().saturating_sub(1));
        let end = || piece.iter().rposition(|b| *b != b' ').map_or(0, |e| e + 1);
        let piece = match (self, at) {
            (CaseIgnoreIA5 | CaseIgnoreIA5Substrings | CaseExactIA5 | CaseExactIA5Substrings, _) => trim_spaces(piece),
            (CaseIgnore | CaseIgnoreSubstrings | CaseExact | CaseExactSubstrings, Piece::Initial)
            | (CaseIgnoreList | CaseIgnoreListSubstrings, Piece::Initial) => &piece[start()..],
            (CaseIgnore | CaseIgnoreSubstrings | CaseExact | CaseExactSubstrings, Piece::Final)
            | (CaseIgnoreList | CaseIgnoreListSubstrings, Piece::Final) => &piece[..end()],
            _ => piece,
        };
        self.normalize_piece(piece)
    }

    /// The normal form of one piece of a substring assertion: prepared like
    /// a value but not trimmed (spaces at a piece's edge are significant).
    pub fn normalize_piece(self, piece: &[u8]) -> Cow<'_, [u8]> {
        use Rule::*;
        match self {
            CaseExact | CaseExactOrdering | CaseExactSubstrings | CaseExactIA5 | CaseExactIA5Substrings => {
                prep(piece, false, false)
            }
            NumericString | NumericStringOrdering | NumericStringSubstrings => strip(piece, |b| b == b' '),
            TelephoneNumber | TelephoneNumberSubstrings => {
                Cow::Owned(prep(&strip(piece, |b| b == b' ' || b == b'-'), true, false).into_owned())
            }
            OctetString | OctetStringOrdering | BitString => Cow::Borrowed(piece),
            _ => prep(piece, true, false),
        }
    }

    /// A key whose bytewise order is the rule's order (integers are
    /// encoded sign, length, digits; every other normal form already sorts).
    pub fn order_key(self, norm: &[u8]) -> Cow<'_, [u8]> {
        match self {
            Rule::Integer | Rule::IntegerOrdering | Rule::IntegerFirstComponent => Cow::Owned(integer_key(norm)),
            _ => Cow::Borrowed(norm),
        }
    }

    /// The normal form of an assertion value (filter, Compare), `None`
    /// when it is not valid for the rule: a stored value's form, except
    /// under the certificate rules, whose assertions name parts of one.
    pub fn normalize_assertion(self, value: &[u8]) -> Option<Cow<'_, [u8]>> {
        match self {
            Rule::CertificateExact => certs::certificate_assertion(value).map(Cow::Owned),
            Rule::CertificateListExact => certs::certificate_list_assertion(value).map(Cow::Owned),
            _ => self.valid_assertion(value).then(|| self.normalize(value))?,
        }
    }

    /// A stored value's identity (duplicates, Modify's delete, DN keys):
    /// its normal form, but its octets under the certificate rules, so
    /// what earlier versions stored keeps its keys.
    fn identity(self, value: &[u8]) -> Cow<'_, [u8]> {
        match self {
            Rule::CertificateExact | Rule::CertificateListExact => Cow::Borrowed(value),
            _ => self.normalize(value).unwrap_or(Cow::Borrowed(value)),
        }
    }

    /// Whether an assertion value (filter, Compare) is valid for the rule:
    /// slapd makes an item with an invalid one Undefined.
    pub fn valid_assertion(self, value: &[u8]) -> bool {
        use crate::schema::syntax;
        use Rule::*;
        match self {
            Integer | IntegerOrdering | IntegerBitAnd | IntegerBitOr => strict_integer(value),
            // As slapd validates them with their syntaxes: a `mail` or `dc`
            // assertion outside IA5, a numeric string with a letter, a
            // telephone number outside PrintableString, a malformed bit or
            // postal string are Undefined (and a Compare's 21), never a
            // plain mismatch that `!` would turn into a match.
            CaseIgnoreIA5 | CaseExactIA5 => syntax::ia5(value),
            NumericString | NumericStringOrdering => syntax::numeric_string(value),
            TelephoneNumber => syntax::telephone_number(value),
            BitString => syntax::bit_string(value),
            CaseIgnoreList => syntax::postal_address(value),
            Csn | CsnOrdering => csn(value).is_some(),
            PresentationAddress | ProtocolInformation | AttributeCertificateExact | Authz => false,
            CertificateExact => certs::certificate_assertion(value).is_some(),
            CertificateListExact => certs::certificate_list_assertion(value).is_some(),
            // Directory, numeric and printable strings have at least one
            // character (RFC 4517 §3.3): `(cn=)` is Undefined, as in slapd.
            // And they are UTF-8: slapd's `UTF8StringValidate` refuses a
            // Latin-1 `Jos\xe9` (LDAP lets a filter carry any octets).
            CaseIgnore | CaseIgnoreOrdering | CaseExact | CaseExactOrdering | DirectoryStringFirstComponent => {
                !value.is_empty() && std::str::from_utf8(value).is_ok()
            }
            _ => true,
        }
    }

    /// Whether one piece of a substrings assertion is valid for the rule:
    /// what `valid_assertion` asks of a value, of the characters alone.
    pub fn valid_piece(self, piece: &[u8]) -> bool {
        use Rule::*;
        match self {
            CaseIgnoreIA5 | CaseExactIA5 | CaseIgnoreIA5Substrings | CaseExactIA5Substrings => piece.is_ascii(),
            NumericString | NumericStringOrdering | NumericStringSubstrings => {
                piece.iter().all(|b| b.is_ascii_digit() || *b == b' ')
            }
            TelephoneNumber | TelephoneNumberSubstrings => piece.iter().all(|b| crate::schema::syntax::printable(*b)),
            // A piece of a postal address, checked as slapd checks it with
            // the equality rule's syntax: its escapes (a piece may end a line).
            CaseIgnoreList | CaseIgnoreListSubstrings => crate::schema::syntax::postal_escapes(piece),
            CaseIgnore | CaseExact | CaseIgnoreSubstrings | CaseExactSubstrings => std::str::from_utf8(piece).is_ok(),
            _ => true,
        }
    }

    pub fn compare(self, a: &[u8], b: &[u8]) -> Ordering {
        self.order_key(a).cmp(&self.order_key(b))
    }
}

/// The equality normal form of a value of `attr`. Values the rule refuses
/// and unknown attributes keep a caseIgnore form, so DNs that name them
/// still get one stable key.
pub fn normalize<'a>(attr: &str, value: &'a [u8]) -> Cow<'a, [u8]> {
    normalizer(attr)(value)
}

/// The equality normal form for values of one attribute, with the type
/// resolved once (for loops over many values).
pub fn normalizer(attr: &str) -> impl Fn(&[u8]) -> Cow<'_, [u8]> {
    let rule = match attr_type(attr) {
        Some(at) => at.equality.map(Some),
        None => Some(None),
    };
    move |value: &[u8]| match rule {
        Some(Some(r)) => r.identity(value),
        Some(None) => fold(value),
        None => Cow::Borrowed(value),
    }
}

/// `canonical(attr)` and `normalize(attr, value)` with the type looked up
/// once: a DN key's RDN, built for every entry a search reads.
pub fn canonical_and_normal<'n, 'v>(attr: &'n str, value: &'v [u8]) -> (Cow<'n, str>, Cow<'v, [u8]>) {
    match attr_type(attr) {
        Some(at) => {
            let normal = match at.equality {
                Some(rule) => rule.identity(value),
                None => Cow::Borrowed(value),
            };
            (Cow::Borrowed(at.key.as_str()), normal)
        }
        None => (canonical(attr), fold(value)),
    }
}

/// Equality under the attribute's equality rule.
pub fn values_equal(attr: &str, a: &[u8], b: &[u8]) -> bool {
    a == b || normalize(attr, a) == normalize(attr, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A description is stored as slapd stores it: the schema's name, the
    /// options in lower case, sorted, each once.
    #[test]
    fn descriptions_are_stored_as_slapd_stores_them() {
        for (given, stored) in [
            ("description", "description"),
            ("CN", "cn"),
            ("2.5.4.13;Lang-FR", "description;lang-fr"),
            ("description;lang-fr;lang-en", "description;lang-en;lang-fr"),
            ("description;lang-en;LANG-EN", "description;lang-en"),
            ("cn;lang-de;binary", "cn;binary;lang-de"),
        ] {
            assert_eq!(stored_name(given), stored, "{given}");
        }
        assert!(matches!(stored_name("description;lang-en;lang-fr"), std::borrow::Cow::Borrowed(_)));
    }

    /// CSNs normalize as slapd's: sid and mod in lower case, OpenLDAP
    /// 2.3's layout brought to the current one, other layouts invalid.
    #[test]
    fn csns_normalize_as_slapds() {
        let now = b"20261206012554.926574Z#000000#001#0000af";
        assert_eq!(csn(now).as_deref(), Some(&now[..]));
        let upper = b"20261206012554.926574Z#00000A#00F#0000AF";
        assert_eq!(csn(upper).as_deref(), Some(&b"20261206012554.926574Z#00000A#00f#0000af"[..]));
        let old = b"20070101120000Z#000001#0A#00000B";
        assert_eq!(csn(old).as_deref(), Some(&b"20070101120000.000000Z#000001#00a#00000b"[..]));
        for bad in [&b"garbage"[..], b"20000101000000Z#000000#000#000000", b"20000101000000.000000Z#000000#000#000000#"]
        {
            assert_eq!(csn(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    fn norm(rule: Rule, v: &str) -> Option<String> {
        rule.normalize(v.as_bytes()).map(|c| String::from_utf8_lossy(&c).into_owned())
    }

    /// Times that a leap second or a zone carry past year 9999 (or before
    /// year 0) are no times: `time`'s `+` panicked on them, from one filter,
    /// compare or DN of any client.
    #[test]
    fn generalized_times_past_the_last_year_are_invalid() {
        for v in ["99991231235960Z", "99991231235959-0001", "9999123123-2359", "00000101000000+0001"] {
            assert_eq!(generalized_time(v.as_bytes()), None, "{v}");
        }
        assert_eq!(generalized_time(b"99991231235959Z").as_deref(), Some("99991231235959"));
        assert_eq!(generalized_time(b"20261205235960Z").as_deref(), Some("20261206000000"));
    }

    /// DN-valued RDN values nest at most `MAX_DN_NESTING` deep: each level
    /// is stack, and an 8 KiB DN held 1,364 of them.
    #[test]
    fn nested_dn_values_are_bounded() {
        let nested = |n: usize| format!("{}x", "owner=".repeat(n));
        assert!(Dn::parse(&nested(10)).is_ok());
        // 1,364 levels on a 256 KiB stack: without the bound, a stack
        // overflow (the whole process) instead of an answer.
        let deep =
            std::thread::Builder::new().stack_size(256 << 10).spawn(move || Dn::parse(&nested(1364)).map(|_| ()));
        let _ = deep.unwrap().join().expect("parsed without running out of stack");
    }

    #[test]
    fn normal_forms() {
        use Rule::*;
        let table: &[(Rule, &str, Option<&str>)] = &[
            (CaseIgnore, "abc", Some("abc")),
            (CaseIgnore, "  Abc  ", Some("abc")),
            (CaseIgnore, "A  B   c", Some("a b c")),
            (CaseIgnore, "ÄÖü", Some("äöü")),
            // RFC 4518: NFKC after case folding (and folded again).
            (CaseIgnore, "Jose\u{301}", Some("josé")),
            (CaseIgnore, "\u{FB01}le", Some("file")),
            (CaseIgnore, "\u{FF21}\u{FF42}", Some("ab")),
            (CaseIgnore, "\u{210C}x", Some("hx")),
            (CaseExact, "Jose\u{301}", Some("José")),
            (CaseExact, "\u{FB01}le", Some("file")),
            (CaseExact, " A  B ", Some("A B")),
            (CaseIgnoreIA5, "Foo@Example.COM", Some("foo@example.com")),
            (CaseExactIA5, "/home/Foo", Some("/home/Foo")),
            (NumericString, " 12 34 5 ", Some("12345")),
            (TelephoneNumber, "+1 555-0100 X", Some("+15550100x")),
            (CaseIgnoreList, "1 Main St $ Springfield", Some("1 main st$springfield")),
            (Boolean, "TRUE", Some("TRUE")),
            (Boolean, "false", None),
            (Boolean, "yes", None),
            (Integer, "0042", Some("42")),
            (Integer, "-0", Some("0")),
            (Integer, "-17", Some("-17")),
            (Integer, "+5", Some("5")),
            (Integer, "4x", None),
            (Integer, "", None),
            (GeneralizedTime, "20261129214500Z", Some("20261129214500")),
            (GeneralizedTime, "202611292145Z", Some("20261129214500")),
            (GeneralizedTime, "2026112921Z", Some("20261129210000")),
            (GeneralizedTime, "20261129234500+0200", Some("20261129214500")),
            (GeneralizedTime, "20261129214500.500Z", Some("202611292145005")),
            (GeneralizedTime, "2026112921.5Z", Some("20261129213000")),
            (GeneralizedTime, "20261329214500Z", None),
            (GeneralizedTime, "20261129214500", None),
            (DistinguishedName, "CN=John  Doe , DC=Example,dc=COM", Some("cn=john doe,dc=example,dc=com")),
            (DistinguishedName, "not a dn", None),
            (UniqueMember, "UID=a,DC=x#'0101'B", Some("uid=a,dc=x#'0101'B")),
            (ObjectIdentifier, "inetOrgPerson", None),
            (ObjectIdentifier, "2.5.6.6", Some("2.5.6.6")),
            (ObjectIdentifier, "7", Some("7")),
            (ObjectIdentifier, " 2.5.6.6", None),
            (ObjectIdentifier, "2.5.06", None),
            (ObjectIdentifier, "1..2", None),
            (ObjectClass, "inetOrgPerson", Some("2.16.840.1.113730.3.2.2")),
            (ObjectClass, "2.5.6.6", Some("2.5.6.6")),
            (ObjectClass, "1..2", None),
            (ObjectIdentifierFirstComponent, "( 2.5.4.3 NAME 'cn' )", Some("2.5.4.3")),
            (OctetString, "Secret", Some("Secret")),
            (Uuid, "6BA7B810-9DAD-11D1-80B4-00C04FD430C8", Some("6ba7b810-9dad-11d1-80b4-00c04fd430c8")),
            (Uuid, "6ba7b810", None),
        ];
        for (rule, input, want) in table {
            assert_eq!(norm(*rule, input).as_deref(), *want, "{rule:?} {input:?}");
        }
    }

    #[test]
    fn orderings() {
        let int = |a: &str, b: &str| {
            let (x, y) = (integer(a.as_bytes()).unwrap(), integer(b.as_bytes()).unwrap());
            Rule::IntegerOrdering.compare(&x, &y)
        };
        assert_eq!(int("9", "10"), Ordering::Less);
        assert_eq!(int("-9", "-10"), Ordering::Greater);
        assert_eq!(int("-1", "0"), Ordering::Less);
        assert_eq!(int("0", "1"), Ordering::Less);
        assert_eq!(int("007", "7"), Ordering::Equal);
        for (v, ok) in [("0", true), ("-17", true), ("42", true), ("0042", false), ("-0", false), ("+5", false)] {
            assert_eq!(Rule::Integer.valid_assertion(v.as_bytes()), ok, "{v}");
        }
        assert_eq!(int("-100", "99"), Ordering::Less);
        let t = |v: &str| generalized_time(v.as_bytes()).unwrap();
        assert!(t("20260101000000Z") < t("20260101000000.5Z"));
        assert!(t("20260101000000.5Z") < t("20260101000001Z"));
        assert!(t("20260101010000+0200") < t("20260101000000Z"));
    }

    #[test]
    fn names() {
        assert!(same_attr("cn", "commonName"));
        assert!(same_attr("SURNAME", "sn"));
        assert!(same_attr("2.5.4.3", "CN"));
        assert!(!same_attr("cn", "sn"));
        assert_eq!(canonical("commonName"), "cn");
        assert_eq!(stored_name("commonName;lang-de"), "cn;lang-de");
        assert_eq!(stored_name("objectclass"), "objectClass");
        assert!(values_equal("cn", b"Foo Bar", b"foo  bar"));
        assert!(!values_equal("userPassword", b"Secret", b"secret"));
        assert!(values_equal("uidNumber", b"010", b"10"));
        assert!(is_operational("entryUUID") && !is_operational("cn"));
    }
}
