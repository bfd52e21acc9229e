//! Delete (RFC 4511 §4.8): leaves only (`notAllowedOnNonLeaf` otherwise).
//!
//! The entry's owner checks and removes it; the parent's child count is
//! lowered in the same transaction when the parent has the same owner, or
//! by a second message to the parent's owner afterwards (`Shard::delete`).

use crate::acl::{Attr, Level};
use crate::conn::Conn;
use crate::ops::controls::{self, Controls};
use crate::ops::{access, parse_dn, with_matched};
use ldap3_proto::control::LdapControl;
use shards::write::Extras;
use shards::{Error, Result};
use std::rc::Rc;

pub async fn handle(conn: Rc<Conn>, dn_text: String, ctrls: Controls) -> Result<Vec<LdapControl>> {
    let dn = parse_dn(&dn_text)?;
    let _admitted = conn.ctx.admit_write(&dn)?;
    if dn.is_root() {
        return Err(Error::unwilling("the root DSE cannot be deleted"));
    }
    if shards::schema::subschema::is_subschema_key(&dn.key()) {
        // As slapd: the schema is configuration, not an entry to write.
        return Err(Error::unwilling("the subschema subentry cannot be deleted"));
    }
    let is_suffix = conn.ctx.is_suffix(&dn);
    let identity = ctrls.acting.clone();
    crate::ops::require_entry(&conn, &identity, &dn, &dn)?;
    let live = conn.ctx.live();
    if let Some(a) = conn.access(&live, &identity) {
        let shard = &conn.ctx.shard;
        access::require(&a, shard, &dn.key(), &[(Attr::Entry, "entry")], Level::Write)?;
        if !is_suffix {
            access::require(
                &a,
                shard,
                &dn.parent().key(),
                &[(Attr::Children, "children of the parent")],
                Level::Write,
            )?;
        }
    }
    // As slapd's back-mdb: a glue placeholder is missing, then the
    // Assertion control is tested, then a referral object's delete is
    // refused, after the access checks (a modify's before them).
    crate::glue::refuse_write(&conn, &identity, &dn, ctrls.manage_dsa_it)?;
    let assertion = controls::check_assertion_before_write(&conn, &identity, ctrls.assertion, &dn.key())?;
    crate::ops::referral::check_target(&conn, &identity, &dn, ctrls.manage_dsa_it)?;
    let dry = ctrls.no_op.is_some();
    let extras = Extras { assertion, before: ctrls.pre_read.is_some(), dry, ..Extras::default() };
    let images = conn
        .ctx
        .shard
        .delete(&dn, &dn_text, is_suffix, extras)
        .await
        .map_err(|e| with_matched(&conn, &identity, &dn, e))?;
    Ok(controls::read_entry_controls(&conn, &identity, images, &ctrls.pre_read, &None, None))
}
