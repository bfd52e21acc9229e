//! Extended operations (RFC 4511 §4.12): WhoAmI (RFC 4532).
//!
//! StartTLS and Password Modify are not available in this version; they and
//! any other name get `protocolError` with a message naming the OID.

use crate::conn::Conn;
use crate::ops::result;
use ldap3_proto::proto::{LdapExtendedRequest, LdapExtendedResponse, OID_WHOAMI};
use shards::Error;

pub const SUPPORTED: &[&str] = &[OID_WHOAMI];

pub fn handle(conn: &Conn, req: &LdapExtendedRequest) -> LdapExtendedResponse {
    match req.name.as_str() {
        OID_WHOAMI => {
            let dn = conn.identity.borrow().dn().to_string();
            let authz = if dn.is_empty() { String::new() } else { format!("dn:{dn}") };
            LdapExtendedResponse { res: result(Ok(())), name: None, value: Some(authz.into_bytes()) }
        }
        other => LdapExtendedResponse {
            res: result(Err(Error::protocol(format!("extended operation {other} is not supported")))),
            name: None,
            value: None,
        },
    }
}
