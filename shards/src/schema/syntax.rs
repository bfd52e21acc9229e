//! LDAP syntaxes (RFC 4517 §3.3, RFC 4530) and their value checks.
//!
//! The common syntaxes are validated exactly; certificates by their DER
//! structure (as slapd's `certificateValidate`), JPEG and audio accept any
//! octets, and some rarely used structured ones (Telex, …) only need valid
//! UTF-8, as the table says. Those slapd has no validator for (Guide, Fax,
//! Presentation Address, …) take no values at all: slapd refuses every
//! value of them with invalidAttributeSyntax, so a directory that works
//! with slapd holds none, and coredir refuses them alike. Among them are
//! the schema descriptions (`attributeTypes`, `objectClasses`, …): their
//! values exist only in the subschema subentry, which is built, not
//! written.

use crate::dn::Dn;
use crate::matching;

#[derive(Debug)]
pub struct Syntax {
    pub oid: &'static str,
    pub desc: &'static str,
    /// Binary values (X-NOT-HUMAN-READABLE): never case-folded.
    pub binary: bool,
    /// X-BINARY-TRANSFER-REQUIRED (RFC 4522): values travel only as
    /// `type;binary`, and `;binary` is refused on any other syntax, as in
    /// slapd (undefinedAttributeType either way).
    pub binary_transfer: bool,
    pub valid: fn(&[u8]) -> bool,
    /// False where slapd has no validator: every value is refused.
    pub validated: bool,
}

const fn s(oid: &'static str, desc: &'static str, valid: fn(&[u8]) -> bool) -> Syntax {
    Syntax { oid, desc, binary: false, binary_transfer: false, valid, validated: true }
}

const fn bin(oid: &'static str, desc: &'static str) -> Syntax {
    Syntax { oid, desc, binary: true, binary_transfer: false, valid: any, validated: true }
}

/// A syntax whose values are BER/DER structures that need `;binary`.
const fn transfer(oid: &'static str, desc: &'static str, valid: fn(&[u8]) -> bool) -> Syntax {
    Syntax { oid, desc, binary: true, binary_transfer: true, valid, validated: true }
}

/// A syntax slapd knows but has no validator for (`ssyn_validate` NULL).
const fn unvalidated(oid: &'static str, desc: &'static str, binary: bool) -> Syntax {
    Syntax { oid, desc, binary, binary_transfer: false, valid: none, validated: false }
}

pub const SYNTAXES: &[Syntax] = &[
    unvalidated("1.3.6.1.4.1.1466.115.121.1.3", "Attribute Type Description", false),
    bin("1.3.6.1.4.1.1466.115.121.1.4", "Audio"),
    bin("1.3.6.1.4.1.1466.115.121.1.5", "Binary"),
    s("1.3.6.1.4.1.1466.115.121.1.6", "Bit String", bit_string),
    s("1.3.6.1.4.1.1466.115.121.1.7", "Boolean", boolean),
    transfer("1.3.6.1.4.1.1466.115.121.1.8", "Certificate", crate::der::certificate),
    transfer("1.3.6.1.4.1.1466.115.121.1.9", "Certificate List", crate::der::certificate_list),
    transfer("1.3.6.1.4.1.1466.115.121.1.10", "Certificate Pair", crate::der::sequence),
    s("1.3.6.1.4.1.1466.115.121.1.11", "Country String", country),
    s("1.3.6.1.4.1.1466.115.121.1.12", "Distinguished Name", dn),
    unvalidated("1.3.6.1.4.1.1466.115.121.1.13", "Data Quality", false),
    s("1.3.6.1.4.1.1466.115.121.1.14", "Delivery Method", delivery_method),
    s("1.3.6.1.4.1.1466.115.121.1.15", "Directory String", directory_string),
    unvalidated("1.3.6.1.4.1.1466.115.121.1.16", "DIT Content Rule Description", false),
    unvalidated("1.3.6.1.4.1.1466.115.121.1.17", "DIT Structure Rule Description", false),
    unvalidated("1.3.6.1.4.1.1466.115.121.1.19", "DSA Quality", false),
    unvalidated("1.3.6.1.4.1.1466.115.121.1.21", "Enhanced Guide", false),
    s("1.3.6.1.4.1.1466.115.121.1.22", "Facsimile Telephone Number", printables),
    unvalidated("1.3.6.1.4.1.1466.115.121.1.23", "Fax", true),
    s("1.3.6.1.4.1.1466.115.121.1.24", "Generalized Time", generalized_time),
    unvalidated("1.3.6.1.4.1.1466.115.121.1.25", "Guide", false),
    s("1.3.6.1.4.1.1466.115.121.1.26", "IA5 String", ia5),
    s("1.3.6.1.4.1.1466.115.121.1.27", "Integer", integer),
    bin("1.3.6.1.4.1.1466.115.121.1.28", "JPEG"),
    unvalidated("1.3.6.1.4.1.1466.115.121.1.30", "Matching Rule Description", false),
    unvalidated("1.3.6.1.4.1.1466.115.121.1.31", "Matching Rule Use Description", false),
    s("1.3.6.1.4.1.1466.115.121.1.34", "Name And Optional UID", name_and_uid),
    unvalidated("1.3.6.1.4.1.1466.115.121.1.35", "Name Form Description", false),
    s("1.3.6.1.4.1.1466.115.121.1.36", "Numeric String", numeric_string),
    unvalidated("1.3.6.1.4.1.1466.115.121.1.37", "Object Class Description", false),
    s("1.3.6.1.4.1.1466.115.121.1.38", "OID", oid),
    s("1.3.6.1.4.1.1466.115.121.1.39", "Other Mailbox", ia5),
    s("1.3.6.1.4.1.1466.115.121.1.40", "Octet String", any),
    s("1.3.6.1.4.1.1466.115.121.1.41", "Postal Address", postal_address),
    unvalidated("1.3.6.1.4.1.1466.115.121.1.42", "Protocol Information", false),
    unvalidated("1.3.6.1.4.1.1466.115.121.1.43", "Presentation Address", false),
    s("1.3.6.1.4.1.1466.115.121.1.44", "Printable String", printable_string),
    s("1.3.6.1.4.1.1466.115.121.1.45", "SubtreeSpecification", utf8),
    transfer("1.3.6.1.4.1.1466.115.121.1.49", "Supported Algorithm", crate::der::element),
    s("1.3.6.1.4.1.1466.115.121.1.50", "Telephone Number", telephone_number),
    unvalidated("1.3.6.1.4.1.1466.115.121.1.51", "Teletex Terminal Identifier", false),
    s("1.3.6.1.4.1.1466.115.121.1.52", "Telex Number", printables),
    s("1.3.6.1.4.1.1466.115.121.1.53", "UTC Time", utf8),
    unvalidated("1.3.6.1.4.1.1466.115.121.1.54", "LDAP Syntax Description", false),
    s("1.3.6.1.4.1.1466.115.121.1.58", "Substring Assertion", utf8),
    s("1.3.6.1.1.16.1", "UUID", uuid),
    // OpenLDAP's RDN syntax (rdnMatch).
    s("1.2.36.79672281.1.5.0", "RDN", rdn),
    // OpenLDAP's change sequence numbers (entryCSN, contextCSN).
    s(CSN, "CSN", csn),
    s("1.3.6.1.1.15.1", "X.509 Certificate Exact Assertion", utf8),
    s("1.3.6.1.1.15.5", "X.509 Attribute Certificate Exact Assertion", utf8),
    s("1.3.6.1.4.1.4203.666.2.7", "OpenLDAP authz", utf8),
    // slapd's built-in X.509 attribute certificate syntax (pmi.schema).
    transfer("1.3.6.1.4.1.4203.666.11.10.2.1", "X.509 AttributeCertificate", crate::der::element),
    // RFC 5208's private keys (slapd's pKCS8PrivateKey syntax).
    Syntax {
        oid: "1.2.840.113549.1.8.1.1",
        desc: "PKCS#8 PrivateKeyInfo",
        // slapd does not mark it X-NOT-HUMAN-READABLE.
        binary: false,
        binary_transfer: false,
        valid: crate::der::private_key_info,
        validated: true,
    },
    // RFC 2307bis syntaxes OpenLDAP's nis.schema uses (slapd's nis module).
    s("1.3.6.1.1.1.0.0", "RFC2307 NIS Netgroup Triple", nis_netgroup_triple),
    s("1.3.6.1.1.1.0.1", "RFC2307 Boot Parameter", boot_parameter),
];

/// OpenLDAP's CSN syntax, which slapd does not publish.
const CSN: &str = "1.3.6.1.4.1.4203.666.11.2.1";

impl Syntax {
    /// Whether `cn=Subschema` leaves it out, as slapd does: its
    /// `SLAP_SYNTAX_HIDE`, and every syntax it has no validator for (no
    /// value of one can be stored, so slapd does not publish it).
    pub fn hidden(&self) -> bool {
        if !self.validated {
            return true;
        }
        // slapd hides its assertion syntaxes (Substring Assertion too)
        // and authz, and is built without the obsolete UTC Time.
        [
            CSN,
            "1.3.6.1.1.15.1",
            "1.3.6.1.1.15.5",
            "1.3.6.1.4.1.4203.666.2.7",
            "1.3.6.1.4.1.1466.115.121.1.53",
            "1.3.6.1.4.1.1466.115.121.1.58",
        ]
        .contains(&self.oid)
    }
}

pub fn find(oid: &str) -> Option<&'static Syntax> {
    SYNTAXES.iter().find(|s| s.oid == oid)
}

fn any(_: &[u8]) -> bool {
    true
}

fn none(_: &[u8]) -> bool {
    false
}

fn utf8(v: &[u8]) -> bool {
    std::str::from_utf8(v).is_ok()
}

fn directory_string(v: &[u8]) -> bool {
    !v.is_empty() && utf8(v)
}

pub(crate) fn ia5(v: &[u8]) -> bool {
    v.is_ascii()
}

const PRINTABLE_EXTRA: &[u8] = b"'()+,-./:? =";

pub(crate) fn printable(b: u8) -> bool {
    b.is_ascii_alphanumeric() || PRINTABLE_EXTRA.contains(&b)
}

fn printable_string(v: &[u8]) -> bool {
    !v.is_empty() && v.iter().all(|b| printable(*b))
}

fn country(v: &[u8]) -> bool {
    v.len() == 2 && v.iter().all(|b| printable(*b))
}

/// Fax and telex numbers, as slapd's `printablesStringValidate` checks
/// them: PrintableString parts joined by `$`, none empty.
fn printables(v: &[u8]) -> bool {
    v.split(|b| *b == b'$').all(printable_string)
}

/// A character of an attribute description (slapd's `AD_CHAR`): the
/// fields of NIS netgroup triples and boot parameters are made of them.
fn ad_char(b: &u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b';')
}

/// RFC 2307 `"(" host "," user "," domain ")"`, each field possibly
/// empty, as slapd's `nisNetgroupTripleValidate`.
fn nis_netgroup_triple(v: &[u8]) -> bool {
    let Some(inner) = v.strip_prefix(b"(").and_then(|v| v.strip_suffix(b")")) else { return false };
    let fields: Vec<&[u8]> = inner.split(|b| *b == b',').collect();
    fields.len() == 3 && fields.iter().all(|f| f.iter().all(ad_char))
}

/// RFC 2307 `key "=" server ":" path`, key and server of `ad_char`s (either
/// may be empty, as slapd's `bootParameterValidate` lets them be), the
/// path PrintableString characters.
fn boot_parameter(v: &[u8]) -> bool {
    let Some(eq) = v.iter().position(|b| *b == b'=') else { return false };
    let (key, rest) = (&v[..eq], &v[eq + 1..]);
    let Some(colon) = rest.iter().position(|b| *b == b':') else { return false };
    let (server, path) = (&rest[..colon], &rest[colon + 1..]);
    key.iter().all(ad_char) && server.iter().all(ad_char) && path.iter().all(|b| printable(*b))
}

pub(crate) fn numeric_string(v: &[u8]) -> bool {
    !v.is_empty() && v.iter().all(|b| b.is_ascii_digit() || *b == b' ')
}

pub(crate) fn telephone_number(v: &[u8]) -> bool {
    printable_string(v)
}

fn boolean(v: &[u8]) -> bool {
    v == b"TRUE" || v == b"FALSE"
}

/// RFC 4517 §3.3.16: no leading zeros, no `-0`.
fn integer(v: &[u8]) -> bool {
    match v {
        b"0" => true,
        [b'-', rest @ ..] => !rest.is_empty() && rest[0] != b'0' && rest.iter().all(u8::is_ascii_digit),
        [first, ..] => *first != b'0' && v.iter().all(u8::is_ascii_digit),
        [] => false,
    }
}

fn dn(v: &[u8]) -> bool {
    std::str::from_utf8(v).is_ok_and(|s| Dn::parse(s).is_ok())
}

fn name_and_uid(v: &[u8]) -> bool {
    matching::Rule::UniqueMember.normalize(v).is_some()
}

fn generalized_time(v: &[u8]) -> bool {
    matching::generalized_time(v).is_some()
}

/// A CSN as slapd takes one (`matching::csn`): the current layout or
/// OpenLDAP 2.3's.
pub(crate) fn csn(v: &[u8]) -> bool {
    matching::csn(v).is_some()
}

/// RFC 4512's `oid`: a numeric OID (of one arc too, as slapd takes `7`)
/// or a descriptor.
fn oid(v: &[u8]) -> bool {
    matching::numericoid(v) || std::str::from_utf8(v).is_ok_and(matching::is_descriptor)
}

pub(crate) fn bit_string(v: &[u8]) -> bool {
    v.len() >= 3 && v[0] == b'\'' && v.ends_with(b"'B") && v[1..v.len() - 2].iter().all(|b| *b == b'0' || *b == b'1')
}

/// RFC 4517 §3.3.28: lines of UTF-8 joined by `$`, where a backslash
/// only escapes a `$` (`\24`) or itself (`\5C`), as slapd's
/// `postalAddressValidate` checks (an empty line included, as there, and
/// so an empty value, which slapd stores).
pub(crate) fn postal_address(v: &[u8]) -> bool {
    postal_escapes(v)
}

/// UTF-8 whose backslashes each escape `$` (`\24`) or a backslash
/// (`\5C`); lines may be empty, as slapd's check lets them be.
pub(crate) fn postal_escapes(v: &[u8]) -> bool {
    let escapes_ok = v.iter().enumerate().filter(|(_, b)| **b == b'\\').all(|(i, _)| {
        let next = v.get(i + 1..i + 3).unwrap_or_default();
        next.eq_ignore_ascii_case(b"24") || next.eq_ignore_ascii_case(b"5c")
    });
    escapes_ok && utf8(v)
}

/// RFC 4517 §3.3.5: `pdm *( [SP] "$" [SP] pdm )`, the keywords in any
/// case, as slapd's `deliveryMethodValidate`.
fn delivery_method(v: &[u8]) -> bool {
    const PDM: &[&str] =
        &["any", "mhs", "physical", "telex", "teletex", "g3fax", "g4fax", "ia5", "videotex", "telephone"];
    let Ok(v) = std::str::from_utf8(v) else { return false };
    // Spaces may follow a keyword or a `$`, not open the value.
    !v.starts_with(' ') && v.split('$').all(|pdm| PDM.iter().any(|k| pdm.trim_matches(' ').eq_ignore_ascii_case(k)))
}

fn rdn(v: &[u8]) -> bool {
    matching::Rule::Rdn.normalize(v).is_some()
}

fn uuid(v: &[u8]) -> bool {
    matching::Rule::Uuid.normalize(v).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts() {
        let syn = |n: &str| find(&format!("1.3.6.1.4.1.1466.115.121.1.{n}")).unwrap();
        let table: &[(&str, &str, bool)] = &[
            ("15", "Jöhn Doe", true),
            ("15", "", false),
            ("26", "user@example.com", true),
            ("26", "jöhn", false),
            ("44", "Hello (World)", true),
            ("44", "semi;colon", false),
            ("36", "123 456", true),
            ("36", "12a", false),
            ("27", "42", true),
            ("27", "-7", true),
            ("27", "0", true),
            ("27", "007", false),
            ("27", "-0", false),
            ("27", "4.2", false),
            ("7", "TRUE", true),
            ("7", "true", false),
            ("12", "uid=a,dc=example,dc=com", true),
            ("12", "", true),
            ("12", "no equals sign", false),
            ("24", "20261130120000Z", true),
            ("24", "20261130120000", false),
            ("50", "+1 555 0100", true),
            ("50", "", false),
            ("38", "2.5.4.3", true),
            ("38", "inetOrgPerson", true),
            ("38", "1.", false),
            ("38", "7", true),
            ("38", "01.2", false),
            ("40", "\u{0}\u{ff}", true),
            ("41", "1 Main St$Springfield", true),
            ("41", "1 Main St$$x", true),
            ("41", "100\\24 a week$Springfield", true),
            ("41", "a\\zz$b", false),
            ("11", "DE", true),
            ("11", "DEU", false),
            ("6", "'0101'B", true),
            ("6", "0101", false),
            ("34", "uid=a,dc=x#'01'B", true),
            ("14", "telephone $ mhs", true),
            ("14", "ANY", true),
            ("14", "g3fax$ia5", true),
            ("14", "pigeon", false),
            ("14", "any $", false),
            ("14", " any", false),
            ("14", "g3fax$ia5 $  telephone ", true),
            ("14", "", false),
            ("8", "\u{30}\u{0}", false),
            ("25", "person#(cn$EQ)", false),
            ("23", "GIF", false),
            ("43", "TELEX+00728722+RFC-1006+03+10.0.0.6", false),
        ];
        for (n, value, ok) in table {
            assert_eq!((syn(n).valid)(value.as_bytes()), *ok, "syntax {n} value {value:?}");
        }
        // As slapd's validators (seen side by side: probes48.cases).
        let nis: &[(&str, &str, bool)] = &[
            ("1.3.6.1.4.1.1466.115.121.1.22", "+1 555 0101 $ twoDimensional", true),
            ("1.3.6.1.4.1.1466.115.121.1.22", "+1 555 0102$", false),
            ("1.3.6.1.4.1.1466.115.121.1.22", "fax@example.com", false),
            ("1.3.6.1.4.1.1466.115.121.1.52", "12345$DE$ACME", true),
            ("1.3.6.1.4.1.1466.115.121.1.52", "12345$$ACME", false),
            ("1.3.6.1.4.1.1466.115.121.1.52", "", false),
            ("1.3.6.1.1.1.0.0", "(host.example.com,alice,example.com)", true),
            ("1.3.6.1.1.1.0.0", "(,,)", true),
            ("1.3.6.1.1.1.0.0", "(host, carol, example.com)", false),
            ("1.3.6.1.1.1.0.0", "(host,svc_backup,example.com)", false),
            ("1.3.6.1.1.1.0.0", "(host,erin)", false),
            ("1.3.6.1.1.1.0.0", "(a,b,c)x", false),
            ("1.3.6.1.1.1.0.1", "root=server:/export/root", true),
            ("1.3.6.1.1.1.0.1", "=server:/a b", true),
            ("1.3.6.1.1.1.0.1", "dump=server:", true),
            ("1.3.6.1.1.1.0.1", "root=server", false),
            ("1.3.6.1.1.1.0.1", "root=boot_srv:/x", false),
            ("1.3.6.1.1.1.0.1", "root=server:/export/root_fs", false),
        ];
        for (oid, value, ok) in nis {
            assert_eq!((find(oid).unwrap().valid)(value.as_bytes()), *ok, "syntax {oid} value {value:?}");
        }
        let uuid = find("1.3.6.1.1.16.1").unwrap();
        assert!((uuid.valid)(b"6ba7b810-9dad-11d1-80b4-00c04fd430c8"));
        assert!(!(uuid.valid)(b"6ba7b810-9dad-11d1-80b4"));
    }
}
