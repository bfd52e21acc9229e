//! The root DSE (RFC 4512 §5.1): what this server is and supports.
//!
//! As in OpenLDAP, only `objectClass` is a user attribute; the rest is
//! operational in the schema, returned for `+` or when asked for by name.

use crate::ctx::Ctx;
use crate::ops::{controls, extended};
use shards::entry::{Attr, Entry};

/// All operational attributes (RFC 3673) and Modify-Increment (RFC 4525).
/// Modify-Increment (RFC 4525), `+` (RFC 3673), `@class` (RFC 4529),
/// `(&)`/`(|)` (RFC 4526), language tag and range options (RFC 3866).
pub const SUPPORTED_FEATURES: &[&str] = &[
    "1.3.6.1.1.14",
    "1.3.6.1.4.1.4203.1.5.1",
    "1.3.6.1.4.1.4203.1.5.2",
    "1.3.6.1.4.1.4203.1.5.3",
    "1.3.6.1.4.1.4203.1.5.4",
    "1.3.6.1.4.1.4203.1.5.5",
];

/// The root DSE as a connection sees it: `mechanisms` are the SASL
/// mechanisms offered on it (`ops::sasl::mechanisms`), as slapd lists them
/// per connection.
pub fn entry(ctx: &Ctx, mechanisms: &[&str]) -> Entry {
    let attr = |name: &str, vals: Vec<String>| Attr {
        name: name.into(),
        vals: vals.into_iter().map(String::into_bytes).collect(),
    };
    let strs = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut attrs = vec![
        attr("objectClass", vec!["top".into()]),
        attr("namingContexts", ctx.suffixes.iter().map(|s| s.to_string_form()).collect()),
        attr("supportedLDAPVersion", vec!["3".into()]),
        // StartTLS only where TLS is configured, as slapd lists it.
        attr(
            "supportedExtension",
            strs(extended::SUPPORTED)
                .into_iter()
                .filter(|oid| ctx.tls.is_some() || oid != extended::OID_START_TLS)
                .collect(),
        ),
        attr("supportedControl", {
            let mut c = strs(controls::SUPPORTED);
            // The Sync Request control, where there is a changelog to serve it from.
            if ctx.shard.stamping.capture {
                c.push(crate::ops::syncrepl::SYNC_REQUEST.to_string());
            }
            c
        }),
        attr("supportedFeatures", strs(SUPPORTED_FEATURES)),
        attr("vendorName", vec!["coredir".into()]),
        attr("vendorVersion", vec![format!("coredir {}", env!("CARGO_PKG_VERSION"))]),
        attr("subschemaSubentry", vec![shards::schema::subschema::DN.into()]),
        // Its DN, empty, as slapd returns it when asked.
        attr("entryDN", vec![String::new()]),
    ];
    if !mechanisms.is_empty() {
        attrs.push(attr("supportedSASLMechanisms", strs(mechanisms)));
    }
    Entry { dn: String::new(), attrs }
}
