//! `coredir reindex`: rebuilds every shard's indexes offline after the
//! index configuration changed (like `slapindex`), then records the new
//! configuration in the manifest so the server starts again.

use crate::config::Config;
use crate::server;
use anyhow::{anyhow, bail, Result};
use shards::entry::Entry;
use shards::manifest::Manifest;
use shards::store::{ReadTxn, Store, Tree, WriteTxn};
use shards::{index, Error};
use std::time::Instant;

/// Entries indexed per write transaction.
const BATCH: usize = 10_000;

pub fn run(config: Config) -> Result<()> {
    config.validate()?;
    let data = config.server.data.clone();
    let _lock = server::lock_data_dir(&data)?;
    let Some(mut manifest) = Manifest::load(&data).map_err(|e| anyhow!(e.message))? else {
        bail!("{} holds no database ({} is missing)", data.display(), shards::manifest::FILE);
    };
    let stores = server::open_stores(&config, &data, &manifest)?;
    let started = Instant::now();
    let mut total = 0;
    for (i, store) in stores.iter().enumerate() {
        total += reindex_store(&**store).map_err(|e| anyhow!("shard {i}: {}", e.message))?;
    }
    manifest.indexes = index::config().describe();
    manifest.save(&data).map_err(|e| anyhow!(e.message))?;
    eprintln!(
        "coredir: reindexed {total} entries in {:.2} s; indexes now [{}]",
        started.elapsed().as_secs_f64(),
        manifest.indexes
    );
    Ok(())
}

/// Clears the store's index tree and indexes every entry again, in batches.
fn reindex_store<S: Store>(store: &S) -> Result<usize, Error> {
    let mut txn = store.write()?;
    txn.clear(Tree::Index)?;
    txn.commit()?;
    let mut done = 0;
    let mut after: Option<Vec<u8>> = None;
    loop {
        let mut txn = store.write()?;
        let mut batch: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(BATCH);
        let from = after.clone().unwrap_or_default();
        txn.scan(Tree::Id2entry, b"", &from, &mut |id, bytes| {
            if after.as_deref() != Some(id) {
                batch.push((id.to_vec(), bytes.to_vec()));
            }
            batch.len() < BATCH
        })?;
        if batch.is_empty() {
            return Ok(done);
        }
        for (id, bytes) in &batch {
            index::add(&mut txn, &Entry::decode(bytes)?, id)?;
        }
        txn.commit()?;
        done += batch.len();
        after = batch.pop().map(|(id, _)| id);
    }
}
