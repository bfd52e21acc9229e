//! The `coredir` library: everything the binary runs, so that the fuzz
//! target (`tests/fuzz`) can drive the real decoder and dispatch. The code
//! map is at the top of `main.rs`.

pub mod accesslog;
pub mod acl;
pub mod admin;
pub mod backup;
pub mod ber;
pub mod config;
pub mod conn;
pub mod ctx;
pub mod database;
pub mod decode;
pub mod deploy;
pub mod export;
pub mod glue;
pub mod harness;
pub mod import;
pub mod listener;
pub mod ops;
pub mod reindex;
pub mod repl;
pub mod schema_export;
pub mod server;
pub mod stats;
pub mod strict;
pub mod tls;
pub mod turns;
pub mod verify;
