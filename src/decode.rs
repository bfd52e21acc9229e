//! An LDAPMessage (checked whole by `strict`) into ldap3_proto's types,
//! keeping the octets of fields that are not UTF-8. ldap3_proto holds
//! DNs, attribute descriptions, filter assertion values, simple bind
//! passwords and OIDs as `String`s and refused a whole message over one
//! Latin-1 byte, so coredir dropped the connection where slapd answers a
//! filter `(cn=Jos\e9)` with its entries and binds a user whose password
//! is Latin-1. Before ldap3_proto converts the BER tree, each such field
//! that is not UTF-8 is rewritten as `shards::octets::escape` says; the
//! fields read as octets (assertion values, passwords) are read back with
//! `shards::octets::unescape`, and attribute descriptions and OIDs so
//! written name nothing known. DNs are not rewritten: one that is not
//! UTF-8 never gets here (`strict` answers invalidDNSyntax), so a DN is
//! always exactly the text it was sent as. Fields ldap3_proto keeps as
//! bytes (attribute values, control values) are left as they are.

use ldap3_lber::common::TagClass;
use ldap3_lber::parse::Parser;
use ldap3_lber::structure::{StructureTag, PL};
use ldap3_proto::proto::{LdapFilter, LdapMsg};

mod direct;

/// One whole LDAPMessage; None when ldap3_proto cannot read it. The hot
/// requests without controls are read straight from the octets
/// (`direct`), the rest through ldap3_lber's tree.
pub fn message(frame: &[u8], max_depth: usize) -> Option<LdapMsg> {
    direct::message(frame).or_else(|| by_tree(frame, max_depth))
}

/// `message` through ldap3_lber's tree of tags and ldap3_proto's
/// conversions.
fn by_tree(frame: &[u8], max_depth: usize) -> Option<LdapMsg> {
    let (rest, mut msg) = Parser::new(max_depth).parse(frame).ok()?;
    if !rest.is_empty() {
        return None;
    }
    if let PL::C(parts) = &mut msg.payload {
        if let Some(op) = parts.get_mut(1) {
            request(op);
        }
        if let Some(StructureTag { class: TagClass::Context, id: 0, payload: PL::C(controls) }) = parts.get_mut(2) {
            for control in controls {
                field(control, 0); // controlType
            }
        }
    }
    LdapMsg::try_from(msg).ok()
}

/// Whether a BindRequest's SaslCredentials lack the credentials field
/// (ldap3_proto reads absent and empty alike): a SASL first step without
/// an initial response. Asked only of a SASL bind whose credentials read
/// as empty, so the second parse costs the hot path nothing.
pub fn sasl_credentials_absent(frame: &[u8]) -> bool {
    let Ok((_, msg)) = Parser::new(8).parse(frame) else { return false };
    let PL::C(parts) = &msg.payload else { return false };
    match parts.get(1).map(|op| (op.class, op.id, &op.payload)) {
        Some((TagClass::Application, 0, PL::C(bind))) => {
            matches!(bind.get(2), Some(StructureTag { class: TagClass::Context, id: 3, payload: PL::C(sasl) }) if sasl.len() == 1)
        }
        _ => false,
    }
}

/// A filter in a control's value (Assertion, Matched Values), its
/// fields as in a search.
pub fn filter(mut tag: StructureTag) -> Option<LdapFilter> {
    escape_filter(&mut tag);
    LdapFilter::try_from(tag).ok()
}

/// The `String` fields of a protocolOp, by its [APPLICATION n] tag.
fn request(op: &mut StructureTag) {
    if op.class != TagClass::Application {
        return;
    }
    match op.id {
        // Bind: a simple password [0] (the name is a DN: `strict`).
        0 => {
            if let Some(auth) = child(op, 2).filter(|a| a.class == TagClass::Context && a.id == 0) {
                escape(auth);
            }
        }
        // Search: filter and attribute list.
        3 => {
            if let Some(f) = child(op, 6) {
                escape_filter(f);
            }
            children(op, 7).for_each(escape);
        }
        // Modify: each change's type.
        6 => children(op, 1).for_each(|change| {
            if let Some(modification) = child(change, 1) {
                field(modification, 0);
            }
        }),
        // Add: each attribute's type.
        8 => children(op, 1).for_each(|attribute| field(attribute, 0)),
        // Compare: the assertion's type (its value is bytes).
        14 => {
            if let Some(ava) = child(op, 1) {
                field(ava, 0);
            }
        }
        // Extended: requestName [0].
        23 => field(op, 0),
        // DNs are never escaped: `strict` refuses one that is not UTF-8
        // (34), so that no DN can stand for another.
        _ => {}
    }
}

/// A Filter's `String` fields (RFC 4511 §4.5.1), by its context tag.
fn escape_filter(f: &mut StructureTag) {
    match f.id {
        0 | 1 => children(f, usize::MAX).for_each(escape_filter),
        2 => {
            if let Some(inner) = child(f, 0) {
                escape_filter(inner);
            }
        }
        // An AttributeValueAssertion: type and value.
        3 | 5 | 6 | 8 => {
            field(f, 0);
            field(f, 1);
        }
        4 => {
            field(f, 0);
            children(f, 1).for_each(escape);
        }
        7 => escape(f),
        // Extensible: matchingRule [1], type [2], matchValue [3].
        9 => children(f, usize::MAX).filter(|t| (1..=3).contains(&t.id)).for_each(escape),
        _ => {}
    }
}

fn child(tag: &mut StructureTag, at: usize) -> Option<&mut StructureTag> {
    match &mut tag.payload {
        PL::C(parts) => parts.get_mut(at),
        PL::P(_) => None,
    }
}

/// The children of child `at` (of `tag` itself for `usize::MAX`).
fn children(tag: &mut StructureTag, at: usize) -> impl Iterator<Item = &mut StructureTag> {
    let parent = match at {
        usize::MAX => Some(tag),
        _ => child(tag, at),
    };
    parent
        .and_then(|p| match &mut p.payload {
            PL::C(parts) => Some(parts.iter_mut()),
            PL::P(_) => None,
        })
        .into_iter()
        .flatten()
}

fn field(tag: &mut StructureTag, at: usize) {
    if let Some(f) = child(tag, at) {
        escape(f);
    }
}

/// A primitive field, rewritten when it is not plain UTF-8.
fn escape(tag: &mut StructureTag) {
    if let PL::P(bytes) = &mut tag.payload {
        if let Some(text) = shards::octets::escape(bytes) {
            *bytes = text.into_bytes();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ldap3_proto::proto::{LdapBindCred, LdapOp};

    fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut out = vec![tag, content.len() as u8];
        out.extend_from_slice(content);
        out
    }

    #[test]
    fn octets_that_are_not_utf8_reach_the_operation() {
        // Bind uid=l with the Latin-1 password "caf\xe9".
        let bind = [tlv(0x02, &[3]), tlv(0x04, b"uid=l"), tlv(0x80, b"caf\xe9")].concat();
        let frame = tlv(0x30, &[tlv(0x02, &[1]), tlv(0x60, &bind)].concat());
        let Some(LdapMsg { op: LdapOp::BindRequest(req), .. }) = message(&frame, 64) else { panic!() };
        let LdapBindCred::Simple(pw) = req.cred else { panic!() };
        assert_eq!(&*shards::octets::unescape(&pw), b"caf\xe9");
        // Search with the filter (cn=Jos\e9); a genuine U+10FF41 in the
        // base is the base's, never read back as an octet.
        let filter = tlv(0xA3, &[tlv(0x04, b"cn"), tlv(0x04, b"Jos\xe9")].concat());
        let search = [
            tlv(0x04, "o=\u{10FF41}".as_bytes()),
            tlv(0x0A, &[2]),
            tlv(0x0A, &[0]),
            tlv(0x02, &[0]),
            tlv(0x02, &[0]),
            tlv(0x01, &[0]),
            filter,
            tlv(0x30, &[]),
        ]
        .concat();
        let frame = tlv(0x30, &[tlv(0x02, &[2]), tlv(0x63, &search)].concat());
        let Some(LdapMsg { op: LdapOp::SearchRequest(req), .. }) = message(&frame, 64) else { panic!() };
        let LdapFilter::Equality(_, v) = &req.filter else { panic!() };
        assert_eq!(&*shards::octets::unescape(v), b"Jos\xe9");
        assert_eq!(req.base, "o=\u{10FF41}");
    }

    #[test]
    fn absent_sasl_credentials_are_told_from_empty_ones() {
        let bind = |sasl: &[u8]| {
            let op = [tlv(0x02, &[3]), tlv(0x04, b""), tlv(0xA3, sasl)].concat();
            tlv(0x30, &[tlv(0x02, &[1]), tlv(0x60, &op)].concat())
        };
        let mechanism = tlv(0x04, b"EXTERNAL");
        assert!(sasl_credentials_absent(&bind(&mechanism)));
        assert!(!sasl_credentials_absent(&bind(&[mechanism.clone(), tlv(0x04, b"")].concat())));
        assert!(!sasl_credentials_absent(&bind(&[mechanism, tlv(0x04, b"dn:")].concat())));
        let simple = [tlv(0x02, &[3]), tlv(0x04, b""), tlv(0x80, b"")].concat();
        assert!(!sasl_credentials_absent(&tlv(0x30, &[tlv(0x02, &[1]), tlv(0x60, &simple)].concat())));
    }
}
