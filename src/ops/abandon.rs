//! Abandon (RFC 4511 §4.11): stops a running search; never answered.

use crate::conn::Conn;

pub fn handle(conn: &Conn, msgid: i32) {
    if let Some((flag, _)) = conn.running.borrow().get(&msgid) {
        flag.set(true);
    }
}
