//! `coredir import`: the offline bulk load of an LDIF file (like slapadd).
//!
//! The main thread parses and checks the LDIF (schema, parents before
//! children, no duplicate DN) and routes every entry to its owner's thread.
//! Into a new database (the usual case) each owner gathers its entries in
//! memory and writes every tree once, in key order, with appends
//! (`shards::bulk::BulkLoad`): nothing is written if any entry is refused, and the
//! directory is left empty again. Into an existing database the entries go
//! in as the server would add them (an add counted on its parent's owner,
//! inserted on its own), in large write transactions, in order; entries
//! before a refused one then stay committed. Entries keep the `entryUUID`,
//! `entryCSN` and timestamps they carry; missing ones are created. The
//! first error stops the import and names its LDIF line.

use crate::config::Config;
use crate::ops::add::stamp_new;
use crate::server;
use anyhow::{anyhow, bail, Context, Result};
use shards::bulk::BulkLoad;
use shards::csn::{Hlc, DEFAULT_MAX_FORWARD_SKEW};
use shards::dn::Dn;
use shards::entry::Entry;
use shards::ldif;
use shards::manifest::Manifest;
use shards::Error;
use shards::{Insert, Offline};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::Arc;
use std::time::Instant;

/// Operations per write transaction.
const BATCH: usize = 10_000;

type Batch = Vec<(usize, Insert)>;

pub fn run(config: Config, file: &Path) -> Result<()> {
    config.validate()?;
    let data = config.server.data.clone();
    let _lock = crate::database::lock_data_dir(&data)?;
    let n_shards = server::shard_count(&config);
    let (manifest, created) = crate::database::open_manifest(&config, &data, n_shards)?;
    if manifest.format < shards::manifest::FORMAT {
        bail!(
            "{} holds data format {}: start the server on it once (it upgrades the format), or import into an \
             empty directory",
            data.display(),
            manifest.format
        );
    }
    manifest.check_indexes().map_err(|e| anyhow!("{}: {e}", data.display()))?;
    let manifest = Arc::new(manifest);
    // Like `slapadd -q`: no sync per batch, one sync of every store at the
    // end. An interrupted import is redone from an empty directory anyway.
    let mut unsynced = config.clone();
    unsynced.storage.sync = "never".into();
    let stores = crate::database::open_stores(&unsynced, &data, &manifest)?;
    let input = std::fs::File::open(file).with_context(|| format!("opening {}", file.display()))?;
    let suffixes = config.naming_contexts()?;
    let recorded: Vec<Dn> = manifest.suffixes.iter().filter_map(|s| Dn::parse(s).ok()).collect();
    if !created && recorded != suffixes {
        bail!(
            "the configured naming contexts differ from those {} was served with ({}); \
             start the server once with this configuration (it records them), then import",
            data.display(),
            manifest.suffixes.join("; ")
        );
    }
    let started = Instant::now();
    if created {
        let res = bulk(&manifest, &stores, input, &suffixes, config.sid());
        if res.is_err() {
            // Nothing was written: leave the directory as empty as it was.
            drop(stores);
            let _ = std::fs::remove_file(Manifest::path(&data));
            for i in 0..n_shards {
                let _ = std::fs::remove_dir_all(data.join(format!("shard-{i}")));
            }
        }
        let n = res.map_err(|e| anyhow!("{}: {e}", file.display()))?;
        return done(n, started, &data);
    }

    let mut senders = Vec::new();
    let mut writers = Vec::new();
    for i in 0..stores.len() {
        let (tx, rx) = sync_channel::<Batch>(2);
        let (stores, manifest) = (stores.clone(), manifest.clone());
        let stamping = config.stamping();
        writers.push(std::thread::spawn(move || -> Result<(), String> {
            let mut hlc = stores.clock(i, stamping, &manifest).map_err(|e| e.message)?;
            for batch in rx {
                let (lines, inserts): (Vec<usize>, Vec<Insert>) = batch.into_iter().unzip();
                let results = stores.insert(i, &manifest, inserts, &mut hlc);
                for (line, res) in lines.into_iter().zip(results) {
                    res.map_err(|e| format!("line {line}: {}", e.message))?;
                }
            }
            Ok(())
        }));
        senders.push(tx);
    }
    let progress = progress_bar();
    let mut router = Router {
        manifest: &manifest,
        senders: &senders,
        pending: (0..n_shards).map(|_| Vec::new()).collect(),
        sent_ok: true,
    };
    let parsed = ldif::read(std::io::BufReader::new(input), |rec| {
        let line = rec.line;
        let (dn, entry) = entry_of(rec, &suffixes).map_err(|e| format!("line {line}: {e}"))?;
        let is_suffix = suffixes.contains(&dn);
        router.route(line, &dn, entry, is_suffix);
        progress.inc(1);
        if router.sent_ok {
            Ok(())
        } else {
            Err("stopped".into())
        }
    });
    router.flush_all();
    drop(router);
    drop(senders);
    progress.finish_and_clear();
    // A writer's error explains a stop better than the parser's.
    let mut first_error = None;
    for w in writers {
        if let Err(e) = w.join().map_err(|_| "a writer thread panicked".to_string()).and_then(|r| r) {
            first_error.get_or_insert(e);
        }
    }
    if let Some(e) = first_error {
        bail!("{}: {e} (entries before that line may be committed)", file.display());
    }
    let n = parsed.map_err(|e| anyhow!("{}: {e}", file.display()))?;
    shards::repair::children_counts(&manifest, &stores).map_err(|e| anyhow!("recounting children: {}", e.message))?;
    stores.sync().map_err(|e| anyhow!("syncing the stores: {}", e.message))?;
    done(n, started, &data)
}

fn done(n: usize, started: Instant, data: &Path) -> Result<()> {
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "coredir: imported {n} entries in {secs:.2} s ({:.0} entries/s) into {}",
        n as f64 / secs,
        data.display()
    );
    Ok(())
}

/// What the parser sends an owner's thread in a bulk load.
enum Bulk {
    Entries(Vec<(Vec<u8>, u32, Entry)>),
    Children(Vec<(Vec<u8>, u64)>),
}

/// The bulk load into a new database (see the module doc).
fn bulk(manifest: &Arc<Manifest>, stores: &Offline, input: std::fs::File, suffixes: &[Dn], sid: u16) -> Result<usize> {
    let mut senders = Vec::new();
    let mut writers = Vec::new();
    for i in 0..stores.len() {
        let (tx, rx) = sync_channel::<Bulk>(4);
        let stores = stores.clone();
        writers.push(std::thread::spawn(move || -> Result<(), String> {
            let mut load = BulkLoad::new();
            for msg in rx {
                match msg {
                    Bulk::Entries(entries) => {
                        for (key, partition, entry) in entries {
                            load.add(key, partition, &entry).map_err(|e| e.message)?;
                        }
                    }
                    Bulk::Children(counts) => counts.into_iter().for_each(|(k, n)| load.children(k, n)),
                }
            }
            stores.bulk(i, load).map_err(|e| e.message)
        }));
        senders.push(tx);
    }
    let progress = progress_bar();
    let n_shards = stores.len();
    let mut seen: HashSet<Vec<u8>> = HashSet::new();
    // A new database: its first CSNs (the server's clock starts above them).
    let mut hlc = Hlc::new(sid, None, DEFAULT_MAX_FORWARD_SKEW);
    let mut children: HashMap<Vec<u8>, u64> = HashMap::new();
    let mut pending: Vec<Vec<(Vec<u8>, u32, Entry)>> = vec![Vec::new(); n_shards];
    let send = |shard: usize, batch: Vec<(Vec<u8>, u32, Entry)>| senders[shard].send(Bulk::Entries(batch)).is_ok();
    let parsed = ldif::read(std::io::BufReader::new(input), |rec| {
        let line = rec.line;
        let (dn, mut entry) = entry_of(rec, suffixes).map_err(|e| format!("line {line}: {e}"))?;
        let key = dn.key();
        if !suffixes.contains(&dn) {
            let parent = dn.parent().key();
            if !seen.contains(&parent) {
                return Err(format!("line {line}: {}", Error::no_such_object(&dn.parent().to_string_form()).message));
            }
            *children.entry(parent).or_default() += 1;
        }
        if !seen.insert(key.clone()) {
            return Err(format!("line {line}: {}", Error::already_exists(&entry.dn).message));
        }
        let owner = manifest.owner_of(&key);
        let partition = manifest.partition_of(&key);
        if entry.get("entryCSN").is_none() {
            entry.set("entryCSN", vec![hlc.tick(partition as u16).to_string().into_bytes()]);
        }
        pending[owner].push((key, partition, entry));
        if pending[owner].len() >= BATCH && !send(owner, std::mem::take(&mut pending[owner])) {
            return Err("stopped: a writer failed".into());
        }
        progress.inc(1);
        Ok(())
    });
    for (shard, batch) in pending.into_iter().enumerate() {
        send(shard, batch);
    }
    let mut counts: Vec<Vec<(Vec<u8>, u64)>> = vec![Vec::new(); n_shards];
    for (key, n) in children {
        counts[manifest.owner_of(&key)].push((key, n));
    }
    let n = match parsed {
        Ok(n) => {
            for (shard, c) in counts.into_iter().enumerate() {
                let _ = senders[shard].send(Bulk::Children(c));
            }
            drop(senders);
            n
        }
        Err(e) => {
            drop(senders);
            progress.finish_and_clear();
            let _ = writers.into_iter().map(|w| w.join()).count();
            bail!("{e}");
        }
    };
    progress.finish_and_clear();
    for w in writers {
        w.join().map_err(|_| anyhow!("a writer thread panicked"))?.map_err(|e| anyhow!("{e}"))?;
    }
    stores.sync().map_err(|e| anyhow!("syncing the stores: {}", e.message))?;
    Ok(n)
}

/// A spinner with entries per second (drawn only on a terminal).
fn progress_bar() -> indicatif::ProgressBar {
    let progress = indicatif::ProgressBar::new_spinner();
    progress
        .set_style(indicatif::ProgressStyle::with_template("{spinner} {pos} entries, {per_sec}, {elapsed}").unwrap());
    progress
}

/// Builds and checks an entry from an LDIF record.
fn entry_of(rec: ldif::Record, suffixes: &[Dn]) -> Result<(Dn, Entry), String> {
    let dn = Dn::parse(&rec.dn).map_err(|e| e.message)?;
    if !suffixes.iter().any(|s| dn.is_within(s)) {
        let names: Vec<String> = suffixes.iter().map(Dn::to_string_form).collect();
        return Err(format!("{} is outside the naming contexts ({})", rec.dn, names.join("; ")));
    }
    // Values grouped per attribute description first (options included:
    // `cn;lang-en` is an attribute of its own), so duplicate checks are one
    // pass; each line's name is checked and looked up in the schema once.
    let mut grouped: Vec<(String, Vec<Vec<u8>>)> = Vec::with_capacity(16);
    for (name, value) in rec.attrs {
        // `cn;` or an option slapd does not know is refused, as an add
        // refuses it (the `;binary` an add requires is not: LDIF from
        // elsewhere may carry certificates without it).
        shards::schema::check::check_options(&name).map_err(|e| e.message)?;
        let stored = shards::matching::stored_name(&name);
        match grouped.iter_mut().find(|(n, _)| n.eq_ignore_ascii_case(&stored)) {
            Some((_, vals)) => vals.push(value),
            None => grouped.push((stored.into_owned(), vec![value])),
        }
    }
    // Room for the six operational attributes `check_new` and `stamp_new` add.
    // In slapd's pretty form, as an add stores it (and slapadd).
    let pretty = dn.pretty().map_err(|e| e.message)?;
    let mut entry = Entry { dn: pretty, attrs: Vec::with_capacity(grouped.len() + 6) };
    for (name, vals) in grouped {
        entry.add_values(&name, &vals).map_err(|e| e.message)?;
    }
    crate::ops::add::check_new(&mut entry, &dn).map_err(|e| e.message)?;
    stamp_new(&mut entry, "");
    Ok((dn, entry))
}

/// Routes entries to their owners' batches, as `Shard::add` does online.
struct Router<'a> {
    manifest: &'a Manifest,
    senders: &'a [SyncSender<Batch>],
    pending: Vec<Batch>,
    sent_ok: bool,
}

impl Router<'_> {
    fn route(&mut self, line: usize, dn: &Dn, entry: Entry, is_suffix: bool) {
        for (shard, op) in Insert::route(self.manifest, dn, entry, is_suffix) {
            self.push(shard, line, op);
        }
    }

    fn push(&mut self, shard: usize, line: usize, op: Insert) {
        self.pending[shard].push((line, op));
        if self.pending[shard].len() >= BATCH {
            self.flush(shard);
        }
    }

    fn flush(&mut self, shard: usize) {
        let batch = std::mem::take(&mut self.pending[shard]);
        if !batch.is_empty() && self.senders[shard].send(batch).is_err() {
            self.sent_ok = false;
        }
    }

    fn flush_all(&mut self) {
        for shard in 0..self.pending.len() {
            self.flush(shard);
        }
    }
}
