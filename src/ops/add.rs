//! Add (RFC 4511 §4.7).
//!
//! The parent must exist (`noSuchObject` with `matchedDN` otherwise) unless
//! the entry is a suffix; an existing DN gets `entryAlreadyExists`. When
//! the parent lives on another shard, the parent's owner first counts the
//! new child (which also proves the parent exists and keeps it from being
//! deleted), then the entry's owner inserts the entry; if that fails the
//! count is given back (`Shard::add`, in `shards::writes`).
//!
//! With the Relax Rules control, the server-owned attributes a migration
//! needs to carry over (`RELAXABLE`) may be given, by a requester with
//! `manage` access to them (the root DN has it); an `entryUUID` already in
//! use is refused while the changelog keeps states (replication and
//! syncrepl know entries by it).

use crate::acl::{self, Level::Manage as MANAGE, Level::Write as WRITE};
use crate::conn::Conn;
use crate::ctx::{Ctx, Shared};
use crate::ops::controls::{self, Controls, POST_READ};
use crate::ops::{access, parse_dn, with_matched};
use ldap3_proto::control::LdapControl;
use ldap3_proto::proto::{LdapAddRequest, LdapFilter};
use ldap3_proto::LdapResultCode;
use shards::dn::Dn;
use shards::entry::{Attr, Entry};
use shards::write::user_modifiable;
use shards::{now_generalized, password, Error, Result, Shard};
use std::rc::Rc;
use std::sync::Arc;

pub async fn handle(conn: Rc<Conn>, req: LdapAddRequest, ctrls: Controls) -> Result<Vec<LdapControl>> {
    let dn = parse_dn(&req.dn)?;
    let ctx = &conn.ctx;
    if dn.is_root() {
        return Err(Error::already_exists("the root DSE"));
    }
    // As slapd: the subschema subentry exists (it is configuration).
    if shards::schema::subschema::is_subschema_key(&dn.key()) {
        return Err(Error::already_exists(&req.dn));
    }
    if !ctx.within_suffix(&dn) {
        // slapd without a default referral: no superior knowledge.
        return Err(Error::unwilling("no global superior knowledge"));
    }
    if req.attributes.is_empty() {
        return Err(Error::protocol("no attributes provided"));
    }
    // As slapd's frontend (`slap_mods_check`): every attribute's type and
    // options (17), values' syntax (21) and count (19) before anything else.
    for a in &req.attributes {
        if a.vals.is_empty() {
            return Err(Error::protocol(format!("{}: no values for attribute type", a.atype)));
        }
        shards::schema::check::check_modification(&a.atype, &a.vals, true)?;
    }
    // The request is owned: its values are respelled in place, not copied.
    let mut attrs = Vec::with_capacity(req.attributes.len());
    let mut relaxed = Vec::new();
    let mut seen = std::collections::HashSet::with_capacity(req.attributes.len());
    for mut a in req.attributes {
        // As slapd: one attribute twice in the list (`cn` and `commonName`,
        // or `cn` and `CN`) is refused, not merged.
        if !seen.insert(shards::matching::description_key(&a.atype)) {
            return Err(Error::new(
                LdapResultCode::AttributeOrValueExists,
                format!("attribute '{}' provided more than once", a.atype),
            ));
        }
        if !user_modifiable(&a.atype) {
            if ctrls.relax.is_none() || !is_relaxable(&a.atype) {
                return Err(Error::new(
                    LdapResultCode::ConstraintViolation,
                    format!("{}: no user modification allowed", a.atype),
                ));
            }
            relaxed.push(a.atype.clone());
        }
        shards::schema::get().spell_values(&a.atype, &mut a.vals);
        attrs.push((a.atype, a.vals));
    }
    // Stored, and returned, in slapd's pretty form.
    let mut entry = Entry::gather(dn.pretty()?, attrs)?;
    add_rdn_values(&mut entry, &dn)?;
    // As slapd's back-mdb: the schema before the parent and the access.
    check_new_checked(&mut entry, &dn)?;
    let is_suffix = ctx.is_suffix(&dn);
    let identity = ctrls.acting.clone();
    let live = conn.ctx.live();
    let key = dn.key();
    // As slapd's back-mdb: the Assertion control next, on the entry as it
    // will be stored, with the attributes the server generates (entryUUID,
    // creatorsName, …) and before a password in clear is hashed.
    let stamps = Stamps::new(identity.dn());
    if let Some(assertion) = ctrls.assertion.as_ref() {
        let mut stored = entry.clone();
        stamps.apply(&mut stored);
        // Its entryCSN is stamped by the owner as it commits; the
        // assertion sees one of now (a value no client can predict).
        if stored.get("entryCSN").is_none() {
            let csn = shards::csn::Csn::top_of(shards::csn::wall_us(), 0);
            stored.set("entryCSN", vec![csn.to_string().into_bytes()]);
        }
        controls::check_assertion_new(&conn, &identity, Some(assertion), &key, &stored)?;
    }
    // Then a taken DN (68), before the parent and the access checks, when
    // the requester may know of the entry (a hidden one goes on as a
    // missing one would).
    if ctx.shard.exists(&key)? && crate::ops::disclosed(&conn, &identity, &key) {
        return Err(Error::already_exists(&entry.dn));
    }
    if !is_suffix {
        crate::ops::require_entry(&conn, &identity, &dn.parent(), &dn)?;
    }
    let access = conn.access(&live, &identity);
    if let Some(a) = &access {
        if is_suffix {
            // As slapd's back-mdb: a naming context's entry has no parent
            // to grant the write, so only the root DN adds it.
            return Err(Error::new(LdapResultCode::InsufficentAccessRights, "no write access to parent"));
        }
        {
            access::require(
                a,
                &ctx.shard,
                &dn.parent().key(),
                &[(acl::Attr::Children, "children of the parent")],
                WRITE,
            )?;
        }
        access::require_new(a, &dn.key(), &entry, WRITE)?;
        access::require_new_attrs(a, &dn.key(), &entry, &relaxed, MANAGE)?;
    }
    if !is_suffix {
        // As slapd's back-mdb: after the access checks, an alias, then a
        // referral object, whatever ManageDsaIT says.
        check_not_below_subentry(ctx, &dn.parent())?;
        crate::ops::alias::check_parent(&ctx.shard, &dn.parent().key(), "parent is an alias")?;
        crate::ops::referral::check_parent(&conn, &identity, &dn, &dn.parent(), false)?;
    }
    // Held until the entry is written.
    let _claim = match relaxed.iter().any(|a| a.eq_ignore_ascii_case("entryUUID")) {
        true => Some(check_uuid_free(ctx, &entry)?),
        false => None,
    };
    hash_passwords(&conn, &mut entry.attrs, &mut { MOST_HASHED }).await?;
    stamps.apply(&mut entry);
    entry.check_layout()?;
    // With the entryCSN the owner stamps as it commits.
    check_attribute_count(&live.limits, entry.attrs.len() + usize::from(entry.get("entryCSN").is_none()))?;
    let most = live.limits.max_entry_bytes;
    if most > 0 && entry.stored_len() > most {
        let why = format!("entry would exceed limits.max_entry_bytes ({most} bytes)");
        return Err(Error::new(LdapResultCode::AdminLimitExceeded, why));
    }
    // The stored entry is exactly this one: Post-Read needs no owner round trip.
    let post = ctrls
        .post_read
        .as_ref()
        .map(|attrs| controls::read_entry_control(&conn, POST_READ, &entry, attrs, access.as_ref(), None));
    // Admitted only now: a rename waits for admitted writes (see modify).
    let _admitted = conn.ctx.admit_write(&dn)?;
    // Post-Read showed the request's spelling, as slapd's does.
    entry.dn = crate::ops::stored_spelling(ctx, &dn)?.pretty()?;
    let added = match ctrls.no_op {
        Some(()) => ctx.shard.check_add(&dn, entry, is_suffix).await,
        None => ctx.shard.add(&dn, entry, is_suffix).await,
    };
    added.map_err(|e| with_matched(&conn, &identity, &dn, e))?;
    Ok(post.into_iter().collect())
}

/// An entry of `count` attribute descriptions within
/// `limits.max_entry_attributes`: checked on the request before anything
/// else, and on the entry with what the server adds to it.
pub fn check_attribute_count(limits: &crate::config::Limits, count: usize) -> Result<()> {
    match limits.max_entry_attributes {
        most if most > 0 && count > most => {
            let why = format!("entry would hold more than {most} attributes (limits.max_entry_attributes)");
            Err(Error::new(LdapResultCode::AdminLimitExceeded, why))
        }
        _ => Ok(()),
    }
}

/// What the Relax Rules control lets an add set: what slapd's `slapadd`
/// and relaxed adds carry over in a migration. Not `entryCSN`: the owner
/// stamps it, and mirror mode orders changes by it.
pub const RELAXABLE: &[&str] = &["entryUUID", "createTimestamp", "creatorsName", "modifyTimestamp", "modifiersName"];

/// Without options: `entryUUID;lang-x` would carry a forged value past
/// the checks below, next to a fresh real one.
pub fn is_relaxable(attr: &str) -> bool {
    RELAXABLE.iter().any(|r| r.eq_ignore_ascii_case(attr))
}

/// A given `entryUUID` must be one value and name no entry: not one the
/// `entryUUID` index holds (on by default; imported entries too), nor one
/// the changelog knows, live or deleted (mirror mode and syncrepl know
/// entries by it), nor one another relaxed write is setting right now
/// (both would pass the checks before either is written). The claim
/// returned holds it until dropped, after the write.
pub fn check_uuid_free(ctx: &Ctx, entry: &Entry) -> Result<UuidClaim> {
    let shard = &ctx.shard;
    let values = entry.get("entryUUID").map(|a| a.vals.as_slice()).unwrap_or_default();
    let uuid = match values {
        [one] => std::str::from_utf8(one).ok().and_then(|v| uuid::Uuid::parse_str(v).ok()),
        _ => return Err(Error::new(LdapResultCode::ConstraintViolation, "entryUUID: multiple values provided")),
    }
    .ok_or_else(|| Error::new(LdapResultCode::InvalidAttributeSyntax, "entryUUID: value #0 invalid per syntax"))?;
    let in_use = || Error::new(LdapResultCode::ConstraintViolation, format!("entryUUID {uuid} is in use"));
    let claim = UuidClaim::take(&ctx.shared, *uuid.as_bytes()).ok_or_else(in_use)?;
    if uuid_indexed(shard, &uuid.to_string())?
        || (shard.stamping.capture && shards::changelog::uuid_in_use(&shard.manifest, &shard.stores, uuid.as_bytes())?)
    {
        return Err(in_use());
    }
    Ok(claim)
}

/// An entryUUID a relaxed write is setting, held in `Shared.claimed_uuids`
/// (a lock between shards, taken only by relaxed writes of entryUUID)
/// until the write is done.
pub struct UuidClaim {
    shared: Arc<Shared>,
    uuid: [u8; 16],
}

impl UuidClaim {
    fn take(shared: &Arc<Shared>, uuid: [u8; 16]) -> Option<UuidClaim> {
        let mut claimed = shared.claimed_uuids.lock().unwrap_or_else(|p| p.into_inner());
        claimed.insert(uuid).then(|| UuidClaim { shared: shared.clone(), uuid })
    }
}

impl Drop for UuidClaim {
    fn drop(&mut self) {
        self.shared.claimed_uuids.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.uuid);
    }
}

/// Whether the `entryUUID` equality index of any store holds this value.
fn uuid_indexed(shard: &Shard, uuid: &str) -> Result<bool> {
    let node = shards::filter::compile(&LdapFilter::Equality("entryUUID".into(), uuid.into()));
    for store in shard.stores.iter() {
        if shards::index::candidates(&store.read()?, &node)?.is_some_and(|c| !c.is_empty()) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// RFC 4511 §4.7 lets a client leave the RDN's values out of the
/// attribute list; like slapd, each one missing is added as the DN spells it.
fn add_rdn_values(entry: &mut Entry, dn: &Dn) -> Result<()> {
    for ava in dn.rdn().map(|r| r.avas.as_slice()).unwrap_or_default() {
        check_naming_type(&ava.attr)?;
        if entry.has_value(&ava.attr, &ava.value) {
            continue;
        }
        // As slapd's naming check: a single-valued type holding another
        // value cannot take the RDN's (64, not the single-value rule's 19),
        // once the entry's object classes are known good (65 first).
        let single = shards::schema::get().attr(&ava.attr).is_some_and(|at| at.single_value);
        if single && entry.get(&ava.attr).is_some_and(|a| !a.vals.is_empty()) {
            shards::schema::check::structural_class(entry)?;
            return Err(Error::new(
                LdapResultCode::NamingViolation,
                format!("value of single-valued naming attribute '{}' conflicts with value present in entry", ava.attr),
            ));
        }
        entry.add_values(&ava.attr, std::slice::from_ref(&ava.value))?;
    }
    Ok(())
}

/// An operational type cannot name an entry (slapd's naming check): an
/// RDN of `entryUUID=…` or `entryCSN=…` would forge what the server owns.
pub fn check_naming_type(attr: &str) -> Result<()> {
    if shards::matching::is_operational(attr) {
        return Err(Error::new(LdapResultCode::NamingViolation, format!("naming attribute '{attr}' is operational")));
    }
    Ok(())
}

/// The schema checks of a new entry (add and import); records its
/// structural object class.
/// No entry lies below a subentry (RFC 3672 §2): as slapd's back-mdb,
/// objectClassViolation, before the alias and referral checks.
fn check_not_below_subentry(ctx: &crate::ctx::Ctx, parent: &Dn) -> Result<()> {
    if !shards::index::Marked::Subentry.may_exist() {
        return Ok(());
    }
    let below = ctx.shard.with_entry(&parent.key(), |view| shards::index::Marked::Subentry.marks(view))?;
    match below {
        Some(true) => Err(Error::new(LdapResultCode::ObjectClassViolation, "parent is a subentry")),
        _ => Ok(()),
    }
}

pub fn check_new(entry: &mut Entry, dn: &Dn) -> Result<()> {
    let structural = shards::schema::check::check_entry(entry, dn)?;
    set_structural(entry, structural);
    Ok(())
}

/// `check_new` for an entry whose values were checked as they came
/// (`check_modification`): their syntaxes are not checked twice.
fn check_new_checked(entry: &mut Entry, dn: &Dn) -> Result<()> {
    let structural = shards::schema::check::check_modified(entry, dn)?;
    set_structural(entry, structural);
    Ok(())
}

fn set_structural(entry: &mut Entry, structural: String) {
    if entry.get("structuralObjectClass").is_none() {
        entry.set("structuralObjectClass", vec![structural.into_bytes()]);
    }
}

/// Hashes cleartext `userPassword` values with `passwords.default_scheme`
/// before they are stored, on the blocking pool (key stretching takes
/// milliseconds). Values already in `{SCHEME}` form are kept as given,
/// unless verifying them would cost more than `passwords.max_*` allow
/// (constraintViolation: such a hash could never be used to bind). At
/// most `left` cleartext values are hashed (the operation's share of
/// `MOST_HASHED`); more is adminLimitExceeded, before any is hashed.
pub async fn hash_passwords(conn: &Conn, attrs: &mut [Attr], left: &mut usize) -> Result<()> {
    let scheme = &conn.ctx.passwords.default_scheme;
    let policy = conn.ctx.password_policy;
    if !scheme.eq_ignore_ascii_case("{CLEARTEXT}") {
        let cleartext = attrs
            .iter()
            .filter(|a| shards::matching::is_user_password(&a.name))
            .flat_map(|a| &a.vals)
            .filter(|v| !password::is_hashed(v))
            .count();
        *left = left.checked_sub(cleartext).ok_or_else(|| {
            Error::new(
                LdapResultCode::AdminLimitExceeded,
                format!(
                    "userPassword: more than {MOST_HASHED} cleartext values to hash in one operation; \
                     send them hashed, or in several operations"
                ),
            )
        })?;
    }
    for a in attrs.iter_mut().filter(|a| shards::matching::is_user_password(&a.name)) {
        if let Some(i) = a.vals.iter().position(|v| !policy.within(v)) {
            return Err(Error::new(
                LdapResultCode::ConstraintViolation,
                format!("{}: value #{i}: its hash parameters cost more than passwords.max_* allow", a.name),
            ));
        }
        if scheme.eq_ignore_ascii_case("{CLEARTEXT}") || a.vals.iter().all(|v| password::is_hashed(v)) {
            continue;
        }
        let (vals, scheme) = (std::mem::take(&mut a.vals), scheme.clone());
        let hashed: std::result::Result<Vec<Vec<u8>>, String> = conn
            .ctx
            .password_work(conn.id, move || {
                vals.into_iter()
                    .map(|v| {
                        if password::is_hashed(&v) {
                            Ok(v)
                        } else {
                            password::hash(&scheme, &v).map(String::into_bytes)
                        }
                    })
                    .collect()
            })
            .await;
        a.vals = hashed.map_err(Error::other)?;
    }
    Ok(())
}

/// The most cleartext passwords one add or modify may have hashed: each
/// is a key stretching (milliseconds) on the shard's password lane, which
/// binds share, and a user may change their own password. 3,000 values in
/// one modify held that lane for 20 s.
pub const MOST_HASHED: usize = 4;

/// Sets the operational attributes of a new entry that it does not carry
/// yet (an import keeps those of the LDIF; a client cannot send them).
pub fn stamp_new(entry: &mut Entry, creator: &str) {
    Stamps::new(creator).apply(entry);
}

/// The operational attributes a new entry gets, generated once: an add
/// tests its Assertion on them before it stores them.
pub struct Stamps {
    uuid: String,
    creator: String,
    now: String,
}

impl Stamps {
    pub fn new(creator: &str) -> Stamps {
        Stamps { uuid: uuid::Uuid::new_v4().to_string(), creator: creator.to_string(), now: now_generalized() }
    }

    /// Sets those the entry does not carry already.
    pub fn apply(&self, entry: &mut Entry) {
        let mut missing = |name: &str, value: &str| {
            if entry.get(name).is_none() {
                entry.set(name, vec![value.as_bytes().to_vec()]);
            }
        };
        missing("entryUUID", &self.uuid);
        missing("creatorsName", &self.creator);
        missing("createTimestamp", &self.now);
        missing("modifiersName", &self.creator);
        missing("modifyTimestamp", &self.now);
    }
}
