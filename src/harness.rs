//! An in-process server for the fuzz target (`tests/fuzz`): one shard on
//! a glommio executor of the calling thread, over a database in a
//! temporary directory, fed whole client byte streams.

use crate::config::Config;
use crate::ctx::{Ctx, Shared};
use crate::server;
use anyhow::Result;
use glommio::{LocalExecutor, LocalExecutorBuilder, Placement};
use std::rc::Rc;
use std::sync::Arc;

pub struct Harness {
    ex: LocalExecutor,
    ctx: Rc<Ctx>,
    _lock: std::fs::File,
    _dir: tempfile::TempDir,
}

impl Harness {
    /// A fresh database (the demo suffix, `storage.sync = "never"`: the
    /// fuzzer looks for crashes, not durability).
    pub fn new() -> Result<Harness> {
        let dir = tempfile::tempdir()?;
        let mut config = Config::default();
        config.server.data = dir.path().join("data");
        config.server.shards = 1;
        config.storage.sync = "never".into();
        config.storage.map_size_mb = 256;
        config.install_schema()?;
        config.validate()?;
        std::env::set_var("COREDIR_ROOT_PASSWORD", "fuzz");
        let db = crate::database::open_database(&config, 1)?;
        let shared = Arc::new(Shared {
            root_password_hash: crate::database::root_password_hash(&config, &db.manifest),
            live: arc_swap::ArcSwap::from_pointee(crate::ctx::Live::from_config(&config)?),
            generation: std::sync::atomic::AtomicU64::new(0),
            tls: None,
            admission: Arc::new(crate::listener::Admission::new(1, 0, 0)),
            connections: Arc::new(crate::conn::Registry::new(1)),
            started: server::unix_now(),
            draining: Default::default(),
            listeners: Default::default(),
            replication: Default::default(),
            carries: crate::ops::carries::Carries::new(1),
            resumed: std::sync::atomic::AtomicBool::new(true),
            claimed_uuids: Default::default(),
        });
        let ex = LocalExecutorBuilder::new(Placement::Unbound)
            .io_memory(512 << 10)
            .make()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let crate::database::Database { lock, manifest, stores } = db;
        let (manifest, stores, sync) = (manifest.clone(), stores.serve(), config.sync_mode()?);
        let interval = std::time::Duration::from_millis(config.storage.sync_interval_ms);
        let shard = ex
            .run(shards::Shard::start(
                0,
                shards::write::Stamping::standalone(config.sid()),
                manifest,
                stores.clone(),
                shards::shard::Floors::new(stores.len()),
                None,
                sync,
                interval,
            ))
            .map_err(|e| anyhow::anyhow!(e.message))?;
        let ctx = Rc::new(Ctx::new(&config, shard, &shared));
        Ok(Harness { ex, ctx, _lock: lock, _dir: dir })
    }

    /// Runs one connection that sends `data`, until all it started is done.
    pub fn feed(&self, data: &[u8]) {
        let ctx = self.ctx.clone();
        let data = data.to_vec();
        self.ex.run(crate::conn::serve_bytes(data, ctx));
    }
}
