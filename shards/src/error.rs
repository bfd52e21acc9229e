//! The one error type of the directory: an LDAP result code and a message.
//!
//! Every failure a request can meet ends as one of these, and the front end
//! turns it into the operation's response in one place. Internal failures
//! (storage I/O, corruption) are logged where they happen and become `other`.

use ldap3_proto::LdapResultCode;
use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub struct Error {
    pub code: LdapResultCode,
    pub message: String,
    /// The longest existing ancestor of a missing entry (RFC 4511 matchedDN).
    pub matched: String,
    /// The URLs of a referral (result code 10, RFC 4511 §4.1.10).
    pub referral: Vec<String>,
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn new(code: LdapResultCode, message: impl Into<String>) -> Error {
        Error { code, message: message.into(), matched: String::new(), referral: Vec::new() }
    }
    pub fn no_such_object(dn: &str) -> Error {
        Error::new(LdapResultCode::NoSuchObject, format!("no such entry: {dn}"))
    }
    pub fn already_exists(dn: &str) -> Error {
        Error::new(LdapResultCode::EntryAlreadyExists, format!("entry already exists: {dn}"))
    }
    /// The first 64 characters of something too long to quote whole.
    pub fn clipped(text: &str) -> String {
        format!("{}…", text.chars().take(64).collect::<String>())
    }
    pub fn invalid_dn(dn: &str, why: &str) -> Error {
        Error::new(LdapResultCode::InvalidDNSyntax, format!("invalid DN \"{dn}\": {why}"))
    }
    pub fn not_allowed_on_non_leaf(dn: &str) -> Error {
        Error::new(LdapResultCode::NotAllowedOnNonLeaf, format!("entry has children: {dn}"))
    }
    pub fn unwilling(message: impl Into<String>) -> Error {
        Error::new(LdapResultCode::UnwillingToPerform, message)
    }
    pub fn protocol(message: impl Into<String>) -> Error {
        Error::new(LdapResultCode::ProtocolError, message)
    }
    pub fn other(message: impl Into<String>) -> Error {
        Error::new(LdapResultCode::Other, message)
    }
    pub fn unavailable(message: impl Into<String>) -> Error {
        Error::new(LdapResultCode::Unavailable, message)
    }
    pub fn with_matched(mut self, matched: String) -> Error {
        self.matched = matched;
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.code, self.message)
    }
}

impl std::error::Error for Error {}
