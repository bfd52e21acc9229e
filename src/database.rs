//! The data directory: its lock, manifest and stores, and a new
//! database's first entries (the suffixes, and the root DN's password).

use crate::config::Config;
use anyhow::{anyhow, bail, Context, Result};
use shards::dn::Dn;
use shards::entry::{Attr, Entry};
use shards::manifest::Manifest;
use shards::matching::Rule;
use shards::password;
use shards::Offline;
use std::path::Path;
use std::sync::Arc;

/// Opens every shard's store of a data directory, with the engine the
/// manifest names and the configuration's sync and size settings.
pub fn open_stores(config: &Config, data: &Path, manifest: &Manifest) -> Result<Offline> {
    let mut options = config.store_options()?;
    options.kind = manifest.engine_kind();
    Offline::open(data, manifest.shards as usize, options)
        .map_err(|e| anyhow!("opening the stores in {}: {}", data.display(), e.message))
}

/// Makes a data directory readable by its owner only (0700, files 0600):
/// the manifest holds the root password's hash and the stores every
/// `userPassword`. Directories made by older versions are fixed here;
/// new files are private anyway (`main` sets the umask to 077).
fn owner_only(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            owner_only(&entry.path())?;
        } else if kind.is_file() {
            std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(0o600))?;
        }
    }
    Ok(())
}

/// Takes the data directory's lock for the life of the returned file, so a
/// server and an offline tool never write the same directory at once.
pub fn lock_data_dir(data: &Path) -> Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    std::fs::create_dir_all(data).with_context(|| format!("creating {}", data.display()))?;
    owner_only(data).with_context(|| format!("restricting {} to its owner", data.display()))?;
    let path = data.join("lock");
    let f = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path)?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        bail!("{} is in use by another coredir process (a running server or an import); stop it first", data.display());
    }
    Ok(f)
}

/// An open data directory: its lock, manifest and stores (to serve once
/// the start-up notes are written: `Offline::serve`).
pub struct Database {
    pub lock: std::fs::File,
    pub manifest: Arc<Manifest>,
    pub stores: Offline,
}

/// Locks, opens (creating it when empty) and checks the data directory.
pub fn open_database(config: &Config, n_shards: usize) -> Result<Database> {
    let data = &config.server.data;
    let lock = lock_data_dir(data)?;
    let (manifest, created) = open_manifest(config, data, n_shards)?;
    manifest.check_indexes().map_err(|e| anyhow!("{}: {e}", data.display()))?;
    let mut manifest = Arc::new(manifest);
    let stores = open_stores(config, data, &manifest)?;
    // Before anything writes with this version's keys.
    if manifest.format < shards::manifest::FORMAT {
        manifest = Arc::new(upgrade(data, &manifest, &stores)?);
    }
    if created {
        bootstrap(config, &manifest, &stores)?;
    } else if let Some(changed) = naming_contexts_changed(config, &manifest, &stores)? {
        changed.save(data).map_err(|e| anyhow!(e.message))?;
        manifest = Arc::new(changed);
    }
    let fixed = shards::repair::children_counts(&manifest, &stores)
        .map_err(|e| anyhow!("checking child counts: {}", e.message))?;
    if fixed > 0 {
        eprintln!("coredir: corrected {fixed} child counts left by an interrupted write");
    }
    // Referral, alias and subentry checks cost nothing until some store
    // holds an entry of the class.
    stores.note_marks().map_err(|e| anyhow!("referral, alias and subentry keys: {}", e.message))?;
    Ok(Database { lock, manifest, stores })
}

/// Marks a data directory of format 2 as format 3 when no value it holds
/// normalizes otherwise under format 3 (`shards::upgrade`); else refuses
/// to serve it, naming the entries, with the way to rewrite them.
fn upgrade(data: &Path, manifest: &Manifest, stores: &Offline) -> Result<Manifest> {
    const NAMED: usize = 20;
    let found = shards::upgrade::edge_space_entries(stores, NAMED).map_err(|e| {
        anyhow!("checking {} for the format {} upgrade: {}", data.display(), shards::manifest::FORMAT, e.message)
    })?;
    if !found.is_empty() {
        bail!(
            "{} holds data format {}, and {} entries (listed below, at most {NAMED}) have a DN or value with a \
             space other than U+0020 (such as NBSP) at an edge, which format {} drops as RFC 4518 and slapd do, \
             so their stored keys change: export the database with `coredir export` (it reads format {}), \
             and import the LDIF into an empty data directory with `coredir import` (values or sibling DNs \
             that differ only by such a space become one: keep one of each first)\n  {}",
            data.display(),
            manifest.format,
            if found.len() == NAMED { format!("{NAMED} or more") } else { found.len().to_string() },
            shards::manifest::FORMAT,
            manifest.format,
            found.join("\n  ")
        );
    }
    // Equality index keys of certificates and CRLs are their serial and
    // issuer (or issuer and thisUpdate) since format 3, their octets before.
    let certificates = |r| matches!(r, Rule::CertificateExact | Rule::CertificateListExact);
    if shards::index::config().indexes_equality_by(certificates) {
        for i in 0..stores.len() {
            stores.reindex(i).map_err(|e| anyhow!("reindexing shard {i} for format 3: {}", e.message))?;
        }
        eprintln!("coredir: reindexed for data format 3 (certificate equality indexes)");
    }
    let mut upgraded = manifest.clone();
    upgraded.format = shards::manifest::FORMAT;
    upgraded.save(data).map_err(|e| anyhow!(e.message))?;
    eprintln!("coredir: data format {} upgraded to {} (no stored key changed)", manifest.format, upgraded.format);
    Ok(upgraded)
}

/// The root password hash in effect: the configuration's, else the one
/// chosen when the database was created.
pub fn root_password_hash(config: &Config, manifest: &Manifest) -> String {
    config.directory.root_password_hash.clone().unwrap_or(manifest.root_password_hash.clone())
}

/// Loads the manifest, or creates the database when the directory has none
/// (then the second value is true).
pub fn open_manifest(config: &Config, data: &Path, n_shards: usize) -> Result<(Manifest, bool)> {
    std::fs::create_dir_all(data).with_context(|| format!("creating {}", data.display()))?;
    if let Some(m) = Manifest::load(data).map_err(|e| anyhow!(e.message))? {
        if m.shards as usize != n_shards {
            bail!(
                "the data directory {} was created with {} shards and this start asks for {n_shards}; \
                 start with --shards {}, or move the partitions with `coredir reshard --shards {n_shards}` \
                 (offline)",
                data.display(),
                m.shards,
                m.shards
            );
        }
        m.check_engine(&config.storage.engine).map_err(|e| anyhow!("{}: {e}", data.display()))?;
        return Ok((m, false));
    }
    // A lone lock file is not a database.
    if std::fs::read_dir(data)?.flatten().any(|e| e.file_name() != "lock") {
        bail!(
            "{} is not empty and holds no {}; refusing to create a database there",
            data.display(),
            shards::manifest::FILE
        );
    }
    // A configured hash is the root password: nothing is generated, so
    // nothing is printed that would not work.
    let hash = match (&config.directory.root_password_hash, std::env::var("COREDIR_ROOT_PASSWORD")) {
        (Some(h), _) => h.clone(),
        (None, Ok(p)) if !p.is_empty() => password::hash_ssha(p.as_bytes()),
        (None, _) => {
            let p = generate_password();
            println!("coredir: generated password for {}: {p}", config.directory.root_dn);
            println!("coredir: it is stored only as a hash and will not be shown again");
            password::hash_ssha(p.as_bytes())
        }
    };
    let suffixes = config.naming_contexts()?.iter().map(Dn::to_string_form).collect();
    let mut m = Manifest::new(n_shards as u32, suffixes, config.directory.root_dn.clone(), hash);
    m.engine = config.storage.engine.clone();
    m.save(data).map_err(|e| anyhow!(e.message))?;
    Ok((m, true))
}

fn generate_password() -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789";
    let mut rng = rand::thread_rng();
    (0..20).map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())] as char).collect()
}

/// Creates the suffix entries in a new database, with `ou=people` and
/// `ou=groups` below the first (never again: an operator may delete them).
fn bootstrap(config: &Config, manifest: &Manifest, stores: &Offline) -> Result<()> {
    let suffixes = config.naming_contexts()?;
    let mut entries = Vec::new();
    for suffix in &suffixes {
        entries.push((suffix.clone(), suffix_entry(suffix)?));
    }
    for ou in ["people", "groups"] {
        let dn = Dn::parse(&format!("ou={ou},{}", suffixes[0].to_string_form()))?;
        entries.push((
            dn,
            vec![("objectClass", vec!["top".into(), "organizationalUnit".into()]), ("ou", vec![ou.into()])],
        ));
    }
    create_entries(config, manifest, stores, &suffixes, entries)
}

/// At the start of an existing database: a suffix newly configured gets
/// its entry (unless one is there); one no longer configured is forgotten
/// if it holds no entry, and refused otherwise (its entries would be kept
/// but never served). Returns the manifest to save, if it changed.
fn naming_contexts_changed(config: &Config, manifest: &Manifest, stores: &Offline) -> Result<Option<Manifest>> {
    let configured = config.naming_contexts()?;
    let recorded: Vec<Dn> = manifest.suffixes.iter().filter_map(|s| Dn::parse(s).ok()).collect();
    if configured == recorded {
        return Ok(None);
    }
    let exists = |dn: &Dn| -> Result<bool> {
        use shards::ReadTxn;
        let txn = stores.read(manifest.owner_of(&dn.key())).map_err(|e| anyhow!(e.message))?;
        txn.has_dn(&dn.key()).map_err(|e| anyhow!(e.message))
    };
    for gone in recorded.iter().filter(|r| !configured.contains(r)) {
        if exists(gone)? {
            bail!(
                "the naming context {} holds entries in {} but is no longer in directory.suffix(es); \
                 configure it again, or delete its entries first",
                gone.to_string_form(),
                config.server.data.display()
            );
        }
    }
    let mut entries = Vec::new();
    for new in configured.iter().filter(|c| !recorded.contains(c)) {
        if exists(new)? {
            continue;
        }
        // Both servers of a pair would create it, as two entries at one
        // DN; added once by the root DN, it replicates like any entry.
        if config.replication.enabled() {
            eprintln!(
                "coredir: the new naming context {} has no entry yet; add it as {} (with replication on, \
                 coredir does not create it)",
                new.to_string_form(),
                config.directory.root_dn
            );
            continue;
        }
        entries.push((new.clone(), suffix_entry(new)?));
    }
    create_entries(config, manifest, stores, &configured, entries)?;
    let mut changed = manifest.clone();
    changed.suffixes = configured.iter().map(Dn::to_string_form).collect();
    Ok(Some(changed))
}

/// The attributes of a suffix entry, from the class its RDN names.
fn suffix_entry(suffix: &Dn) -> Result<Vec<(&'static str, Vec<String>)>> {
    let rdn = &suffix.rdns()[0].avas[0];
    let v = String::from_utf8_lossy(&rdn.value).to_string();
    let classes = |cs: &[&str]| cs.iter().map(|c| c.to_string()).collect::<Vec<_>>();
    Ok(match shards::matching::canonical(&rdn.attr).as_ref() {
        "dc" => vec![
            ("objectClass", classes(&["top", "dcObject", "organization"])),
            ("dc", vec![v.clone()]),
            ("o", vec![v]),
        ],
        "o" => vec![("objectClass", classes(&["top", "organization"])), ("o", vec![v])],
        "ou" => vec![("objectClass", classes(&["top", "organizationalUnit"])), ("ou", vec![v])],
        "c" => vec![("objectClass", classes(&["top", "country"])), ("c", vec![v])],
        other => bail!(
            "cannot create the suffix entry {}: its RDN attribute '{other}' is not dc, o, ou or c; \
             create it with `coredir import`",
            suffix.to_string_form()
        ),
    })
}

/// Writes entries as the root DN, parents first.
fn create_entries(
    config: &Config,
    manifest: &Manifest,
    stores: &Offline,
    suffixes: &[Dn],
    entries: Vec<(Dn, Vec<(&'static str, Vec<String>)>)>,
) -> Result<()> {
    for (dn, attrs) in entries {
        let mut entry = Entry {
            dn: dn.to_string_form(),
            attrs: attrs
                .into_iter()
                .map(|(n, vs)| Attr { name: n.into(), vals: vs.into_iter().map(String::into_bytes).collect() })
                .collect(),
        };
        crate::ops::add::check_new(&mut entry, &dn)
            .map_err(|e| anyhow!("creating {}: {}", dn.to_string_form(), e.message))?;
        crate::ops::add::stamp_new(&mut entry, &config.directory.root_dn);
        let is_suffix = suffixes.contains(&dn);
        for (owner, insert) in shards::Insert::route(manifest, &dn, entry, is_suffix) {
            let mut hlc = stores.clock(owner, config.stamping(), manifest).map_err(|e| anyhow!(e.message))?;
            for r in stores.insert(owner, manifest, vec![insert], &mut hlc) {
                r.map_err(|e| anyhow!("creating {}: {}", dn.to_string_form(), e.message))?;
            }
        }
    }
    Ok(())
}
