//! `coredir acl check`: one access decision from the command line, with
//! the rule and clause that made it, like slapacl.
//!
//! The entry and group memberships are read from the data directory when
//! it holds a database (an LMDB database can be read while the server
//! runs); without one, rules that need the entry's content do not apply
//! and group clauses do not match, and the output says so.

use super::{Access, Attr, Groups, Level, Subject, Target};
use crate::config::Config;
use crate::ops::access::is_member_in;
use anyhow::{anyhow, bail, Result};
use shards::dn::Dn;
use shards::entry::EntryView;
use shards::manifest::Manifest;
use shards::ReadTxn;
use shards::Stores;

pub struct Request {
    pub as_dn: String,
    pub entry: String,
    pub attr: String,
    pub level: String,
    pub tls_ssf: u32,
}

/// The stores of a data directory, read offline.
struct DataDir {
    manifest: Manifest,
    stores: Stores,
}

impl DataDir {
    fn with_entry<R>(&self, key: &[u8], f: impl FnOnce(&EntryView<'_>) -> R) -> shards::Result<Option<R>> {
        Ok(self.stores.read(self.manifest.owner_of(key))?.entry(key)?.map(|(_, view)| f(&view)))
    }
}

impl Groups for DataDir {
    fn is_member(&self, group: &[u8], class: &str, attr: &str, member: &[u8]) -> bool {
        is_member_in(group, class, attr, member, |key, f| self.with_entry(key, f))
    }
}

struct NoGroups;

impl Groups for NoGroups {
    fn is_member(&self, _: &[u8], _: &str, _: &str, _: &[u8]) -> bool {
        false
    }
}

/// Prints the decision; returns whether the level is granted.
pub fn run(config: &Config, req: &Request) -> Result<bool> {
    let acl = config.acl()?;
    let level = Level::parse(&req.level)
        .ok_or_else(|| anyhow!("--level: {:?} is not one of {}", req.level, Level::ALL.map(|l| l.name()).join(", ")))?;
    let entry_dn = Dn::parse(&req.entry).map_err(|e| anyhow!("--entry: {}", e.message))?;
    let attr = match req.attr.as_str() {
        "entry" => Attr::Entry,
        "children" => Attr::Children,
        name if shards::matching::attr_type(name).is_some() => acl.class_of_request(name),
        name => bail!("--attr: {name:?} is not an attribute type of the schema, 'entry' or 'children'"),
    };
    let as_dn = if req.as_dn.eq_ignore_ascii_case("anonymous") { "" } else { req.as_dn.as_str() };
    let who = Dn::parse(as_dn).map_err(|e| anyhow!("--as: {}", e.message))?;
    let root_dn = Dn::parse(&config.directory.root_dn)?;
    let what = format!("{} access to {} of {}", level.name(), req.attr, req.entry);
    let as_text = if who.is_root() { "anonymous".to_string() } else { req.as_dn.clone() };
    if who == root_dn {
        println!("{what} as {as_text}: ALLOWED (the root DN bypasses access control)");
        return Ok(true);
    }
    let offline = open(config)?;
    if offline.is_none() {
        println!("note: no database in {}: filter rules do not apply, groups are empty", config.server.data.display());
    }
    let groups: &dyn Groups = match &offline {
        Some(o) => o,
        None => &NoGroups,
    };
    let who_key = (!who.is_root()).then(|| who.key());
    let subject = Subject { key: who_key.as_deref(), tls_ssf: req.tls_ssf, transport_ssf: 0 };
    let access = Access::new(&acl, subject, groups);
    let key = entry_dn.key();
    let decide = |entry: Option<&EntryView<'_>>| access.decide(&Target { key: &key, entry }, attr);
    let decision = match &offline {
        Some(o) => match o.with_entry(&key, |v| decide(Some(v))).map_err(|e| anyhow!(e.message))? {
            Some(d) => d,
            None => {
                println!("note: {} is not in the database: filter rules do not apply", req.entry);
                decide(None)
            }
        },
        None => decide(None),
    };
    let allowed = decision.privs.has(level);
    let verdict = if allowed { "ALLOWED" } else { "DENIED" };
    println!("{what} as {as_text}: {verdict} (granted: {})", decision.privs.describe());
    match decision.rule {
        None => println!("  by the implicit final rule: to * by * none"),
        Some(i) => {
            let rule = &acl.rules[i];
            println!("  by rule {i}: {}", rule.text);
            match decision.clause {
                Some(j) => println!("  clause {j}: {}", rule.by[j].text),
                None => println!("  no clause matched: the implicit by * none"),
            }
        }
    }
    Ok(allowed)
}

/// The data directory's stores, when it holds a database.
fn open(config: &Config) -> Result<Option<DataDir>> {
    let data = &config.server.data;
    let Some(manifest) = Manifest::load(data).map_err(|e| anyhow!(e.message))? else { return Ok(None) };
    let stores = crate::database::open_stores(config, data, &manifest).map_err(|e| {
        let hint = if manifest.engine_kind() == shards::EngineKind::Sled {
            " (a sled database cannot be read while the server runs)"
        } else {
            ""
        };
        anyhow!("{e:#}{hint}")
    })?;
    Ok(Some(DataDir { manifest, stores: stores.serve() }))
}
