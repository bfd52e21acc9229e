//! coredir's integration tests: one binary that starts the real server
//! (each test its own port and data directory) and drives it with real
//! clients: the `ldap3` crate, raw BER over TCP, and OpenLDAP's tools.

mod access;
mod admin;
mod bind;
mod config;
mod conformance;
mod contexts;
mod controls;
mod crash;
mod deploy;
mod durability;
mod engines;
mod hostile;
mod interop;
mod limits;
mod mirror;
mod passwords;
mod protocol;
mod schema;
mod search;
mod sharding;
mod support;
mod syncrepl;
mod tls;
mod tools;
mod write;
