//! `coredir reindex`: rebuilds every shard's indexes offline after the
//! index configuration changed (like `slapindex`), then records the new
//! configuration in the manifest so the server starts again.

use crate::config::Config;
use anyhow::{anyhow, bail, Result};
use shards::index;
use shards::manifest::Manifest;
use std::time::Instant;

pub fn run(config: Config) -> Result<()> {
    config.validate()?;
    let data = config.server.data.clone();
    let _lock = crate::database::lock_data_dir(&data)?;
    let Some(mut manifest) = Manifest::load(&data).map_err(|e| anyhow!(e.message))? else {
        bail!("{} holds no database ({} is missing)", data.display(), shards::manifest::FILE);
    };
    let stores = crate::database::open_stores(&config, &data, &manifest)?;
    let started = Instant::now();
    let mut total = 0;
    for i in 0..stores.len() {
        total += stores.reindex(i).map_err(|e| anyhow!("shard {i}: {}", e.message))?;
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
