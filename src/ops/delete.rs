//! Delete (RFC 4511 §4.8): leaves only (`notAllowedOnNonLeaf` otherwise).
//!
//! The entry's owner checks and removes it; the parent's child count is
//! lowered in the same transaction when the parent has the same owner, or
//! by a second message to the parent's owner afterwards.

use crate::conn::Conn;
use crate::ops::{check_write_access, parse_dn, with_matched};
use shards::dn::Dn;
use shards::write::{Parent, WriteOp};
use shards::{Error, Result, Shard};
use std::rc::Rc;

pub async fn handle(conn: Rc<Conn>, dn_text: String) -> Result<()> {
    check_write_access(&conn)?;
    let dn = parse_dn(&dn_text)?;
    if dn.is_root() {
        return Err(Error::unwilling("the root DSE cannot be deleted"));
    }
    let is_suffix = conn.ctx.is_suffix(&dn);
    remove(&conn.ctx.shard, &dn, &dn_text, is_suffix).await.map_err(|e| with_matched(&conn, &dn, e))
}

/// Removes a leaf entry and uncounts it on its parent.
pub async fn remove(shard: &Shard, dn: &Dn, dn_text: &str, is_suffix: bool) -> Result<()> {
    let key = dn.key();
    let parent = (!is_suffix).then(|| Parent::of(dn));
    let local_parent = parent.as_ref().is_some_and(|p| shard.owner_of(&p.key) == shard.owner_of(&key));
    let op = WriteOp::Delete {
        key: key.clone(),
        dn: dn_text.to_string(),
        parent: if local_parent { parent.clone() } else { None },
    };
    shard.submit(&key, op).await?;
    if let (Some(p), false) = (parent, local_parent) {
        shard.submit(&p.key.clone(), WriteOp::Child { parent: p, delta: -1 }).await?;
    }
    Ok(())
}
