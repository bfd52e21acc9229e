//! Search (RFC 4511 §4.5): base, one-level, subtree and children scopes,
//! on the connection's own shard.
//!
//! The base entry is read from its owner's snapshot; a one-level or subtree
//! search then scans every shard's `dn2id` range below the base (keys are
//! root-first, so the subtree is one key range per store), reads each
//! candidate from `id2entry` in place, evaluates the filter and writes the
//! matching entries straight into the response buffer. Work is cut into
//! chunks: no snapshot is held across an `.await`, the task yields to the
//! reactor between chunks (so other requests on the same connection and
//! other connections progress), and Abandon is checked there.

use crate::ber::{self, OutAttr};
use crate::conn::{encode, Conn};
use crate::ops::{parse_dn, result, rootdse, with_matched};
use bytes::BytesMut;
use ldap3_proto::proto::{LdapFilter, LdapMsg, LdapOp, LdapSearchRequest, LdapSearchScope};
use ldap3_proto::LdapResultCode;
use shards::dn::{key_depth, KEY_SEPARATOR};
use shards::entry::{encode_vals, EntryView, Vals};
use shards::store::{ReadTxn, Store, Tree};
use shards::write::children;
use shards::{filter, matching, Error, Result};
use std::borrow::Cow;
use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Response bytes gathered before they are handed to the writer.
const CHUNK_BYTES: usize = 64 << 10;
/// Candidates examined before the scan pauses to let other tasks run.
const CHUNK_SCANNED: usize = 2048;

pub fn start(conn: &Rc<Conn>, msgid: i32, req: LdapSearchRequest) {
    let abandoned = Rc::new(Cell::new(false));
    conn.running.borrow_mut().insert(msgid, abandoned.clone());
    let conn = conn.clone();
    glommio::spawn_local(async move {
        let res = run(&conn, msgid, &req, &abandoned).await;
        conn.running.borrow_mut().remove(&msgid);
        if abandoned.get() {
            return;
        }
        let mut out = BytesMut::new();
        encode(
            &mut out,
            LdapMsg::new(msgid, LdapOp::SearchResultDone(result(res))),
        );
        conn.send(out).await;
    })
    .detach();
}

/// Which attributes a search returns.
pub struct Selection {
    user: bool,
    operational: bool,
    names: Vec<String>,
    /// Whether the requester may see `userPassword`.
    pub passwords: bool,
    pub types_only: bool,
}

impl Selection {
    pub fn new(attrs: &[String], passwords: bool, types_only: bool) -> Selection {
        let mut sel = Selection {
            user: attrs.is_empty(),
            operational: false,
            names: Vec::new(),
            passwords,
            types_only,
        };
        for a in attrs {
            match a.as_str() {
                "*" => sel.user = true,
                "+" => sel.operational = true,
                "1.1" => {}
                name => sel.names.push(name.to_string()),
            }
        }
        sel
    }

    pub fn wants(&self, name: &str, operational: bool) -> bool {
        if !self.passwords && matching::same_attr(name, "userPassword") {
            return false;
        }
        (if operational {
            self.operational
        } else {
            self.user
        }) || self.names.iter().any(|n| matching::same_attr(n, name))
    }
}

struct Limits {
    size: usize,
    deadline: Option<Instant>,
}

async fn run(
    conn: &Conn,
    msgid: i32,
    req: &LdapSearchRequest,
    abandoned: &Cell<bool>,
) -> Result<()> {
    let ctx = &conn.ctx;
    if filter::depth(&req.filter) > ctx.limits.max_filter_depth {
        return Err(Error::new(
            LdapResultCode::AdminLimitExceeded,
            "filter nesting is too deep",
        ));
    }
    let base = parse_dn(&req.base)?;
    let is_root = conn.identity.borrow().is_root();
    let filter = if is_root {
        Cow::Borrowed(&req.filter)
    } else {
        Cow::Owned(redact(&req.filter))
    };
    let sel = Selection::new(&req.attrs, is_root, req.typesonly);
    let mut out = BytesMut::new();
    if base.is_root() {
        if req.scope != LdapSearchScope::Base {
            return Err(Error::no_such_object("").with_matched(String::new()));
        }
        rootdse::write(&mut out, msgid, ctx, &filter, &sel);
        conn.send(out).await;
        return Ok(());
    }
    let limits = Limits {
        size: if req.sizelimit > 0 {
            req.sizelimit as usize
        } else {
            usize::MAX
        },
        deadline: (req.timelimit > 0)
            .then(|| Instant::now() + Duration::from_secs(req.timelimit as u64)),
    };
    let shard = &ctx.shard;
    let base_key = base.key();
    let mut sent = 0;
    {
        let txn = shard.store_for(&base_key).read()?;
        let Some(id) = txn.get(Tree::Dn2id, &base_key)? else {
            return Err(with_matched(conn, &base, Error::no_such_object(&req.base)));
        };
        if matches!(req.scope, LdapSearchScope::Base | LdapSearchScope::Subtree) {
            let bytes = txn
                .get(Tree::Id2entry, id)?
                .ok_or_else(|| Error::other("dangling dn2id record"))?;
            let view = EntryView::new(bytes)?;
            if filter::matches(&filter, &view) {
                write_entry(&mut out, msgid, &view, children(&txn, &base_key)?, &sel);
                sent += 1;
            }
        }
    }
    if req.scope == LdapSearchScope::Base {
        conn.send(out).await;
        return Ok(());
    }
    let mut prefix = base_key;
    prefix.push(KEY_SEPARATOR);
    let one_level = req.scope == LdapSearchScope::OneLevel;
    let want_depth = key_depth(&prefix[..prefix.len() - 1]) + 1;
    for store in shard.stores.iter() {
        let mut from = prefix.clone();
        loop {
            if abandoned.get() {
                return Ok(());
            }
            let mut resume = None;
            let mut failed = None;
            let mut scanned = 0;
            let mut stop: Option<LdapResultCode> = None;
            {
                let txn = store.read()?;
                txn.scan(Tree::Dn2id, &prefix, &from, &mut |key, id| {
                    scanned += 1;
                    if scanned > CHUNK_SCANNED || out.len() >= CHUNK_BYTES {
                        resume = Some(key.to_vec());
                        return false;
                    }
                    if one_level && key_depth(key) != want_depth {
                        return true;
                    }
                    if limits.deadline.is_some_and(|d| Instant::now() >= d) {
                        stop = Some(LdapResultCode::TimeLimitExceeded);
                        return false;
                    }
                    let view = match txn
                        .get(Tree::Id2entry, id)
                        .and_then(|b| EntryView::new(b.unwrap_or_default()))
                    {
                        Ok(v) => v,
                        Err(e) => {
                            failed = Some(e);
                            return false;
                        }
                    };
                    if !filter::matches(&filter, &view) {
                        return true;
                    }
                    if sent == limits.size {
                        stop = Some(LdapResultCode::SizeLimitExceeded);
                        return false;
                    }
                    let n_children = children(&txn, key).unwrap_or(0);
                    write_entry(&mut out, msgid, &view, n_children, &sel);
                    sent += 1;
                    true
                })?;
            }
            if let Some(e) = failed {
                return Err(e);
            }
            conn.send(std::mem::take(&mut out)).await;
            match stop {
                Some(LdapResultCode::SizeLimitExceeded) => {
                    return Err(Error::new(LdapResultCode::SizeLimitExceeded, ""));
                }
                Some(code) => return Err(Error::new(code, "")),
                None => {}
            }
            match resume {
                Some(key) => {
                    from = key;
                    // glommio runs a spawned task at once until it first
                    // waits; yielding here lets the connection read further
                    // requests (an Abandon among them) between chunks.
                    futures_lite::future::yield_now().await;
                }
                None => break,
            }
        }
    }
    Ok(())
}

/// Writes one SearchResultEntry with the selected stored and computed attributes.
fn write_entry(
    out: &mut BytesMut,
    msgid: i32,
    view: &EntryView<'_>,
    n_children: u64,
    sel: &Selection,
) {
    let mut attrs: Vec<OutAttr<'_, Vals<'_>>> = view
        .attrs()
        .filter(|a| sel.wants(a.name, matching::is_operational(a.name)))
        .map(|a| OutAttr {
            name: a.name,
            vals: a.vals(),
        })
        .collect();
    let computed = computed_attrs(view.dn(), n_children, sel);
    for (name, buf) in &computed {
        attrs.push(OutAttr {
            name,
            vals: Vals::from_encoded(buf, 1),
        });
    }
    ber::search_entry(out, msgid, view.dn(), &attrs, sel.types_only);
}

/// Operational attributes computed at read time, when selected.
fn computed_attrs(dn: &str, n_children: u64, sel: &Selection) -> Vec<(&'static str, Vec<u8>)> {
    let mut res = Vec::new();
    let mut add = |name: &'static str, value: &[u8]| {
        if sel.wants(name, true) {
            let mut buf = Vec::with_capacity(value.len() + 4);
            encode_vals(&[value], &mut buf);
            res.push((name, buf));
        }
    };
    add(
        "hasSubordinates",
        if n_children > 0 { b"TRUE" } else { b"FALSE" },
    );
    add("numSubordinates", n_children.to_string().as_bytes());
    add("entryDN", dn.as_bytes());
    res
}

/// Replaces assertions on `userPassword` with a constant false, so a filter
/// cannot probe a password the requester may not read.
fn redact(f: &LdapFilter) -> LdapFilter {
    let never = || LdapFilter::Or(Vec::new());
    let pw = |a: &str| matching::same_attr(a, "userPassword");
    match f {
        LdapFilter::And(fs) => LdapFilter::And(fs.iter().map(redact).collect()),
        LdapFilter::Or(fs) => LdapFilter::Or(fs.iter().map(redact).collect()),
        LdapFilter::Not(inner) => LdapFilter::Not(Box::new(redact(inner))),
        LdapFilter::Equality(a, _)
        | LdapFilter::Substring(a, _)
        | LdapFilter::GreaterOrEqual(a, _)
        | LdapFilter::LessOrEqual(a, _)
        | LdapFilter::Present(a)
        | LdapFilter::Approx(a, _)
            if pw(a) =>
        {
            never()
        }
        LdapFilter::Extensible(m) if m.type_.as_deref().is_none_or(pw) => never(),
        other => other.clone(),
    }
}
