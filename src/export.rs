//! `coredir export`: the directory as LDIF (like slapcat), parents before
//! children, from snapshots, so it works offline and while the server runs
//! (each shard's part is one consistent snapshot).

use crate::config::Config;
use anyhow::{anyhow, bail, Result};
use shards::manifest::Manifest;
use shards::ReadTxn;
use shards::{ldif, matching};
use std::io::Write;
use std::path::Path;

pub fn run(config: Config, out: Option<&Path>, operational: bool) -> Result<()> {
    config.validate()?;
    let data = &config.server.data;
    let Some(manifest) = Manifest::load(data).map_err(|e| anyhow!(e.message))? else {
        bail!("there is no database in {}", data.display());
    };
    let stores = crate::database::open_stores(&config, data, &manifest)?;
    let txns = stores.iter().map(|s| s.read()).collect::<shards::Result<Vec<_>>>().map_err(|e| anyhow!(e.message))?;
    // Keys are root-first, so sorting them puts every parent before its children.
    let mut keys: Vec<(Vec<u8>, usize, Vec<u8>)> = Vec::new();
    for (i, txn) in txns.iter().enumerate() {
        txn.dn_keys(b"", b"", &mut |k, id| {
            keys.push((k.to_vec(), i, id.to_vec()));
            true
        })
        .map_err(|e| anyhow!(e.message))?;
    }
    keys.sort_unstable();
    let mut w: Box<dyn Write> = match out {
        Some(p) => Box::new(std::io::BufWriter::new(std::fs::File::create(p)?)),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    for (_, shard, id) in keys {
        let Some(view) = txns[shard].entry_by_id(&id).map_err(|e| anyhow!(e.message))? else { continue };
        ldif::write_line(&mut w, "dn", view.dn().as_bytes())?;
        for a in view.attrs().filter(|a| operational || !matching::is_operational(a.name)) {
            for v in a.vals() {
                ldif::write_line(&mut w, a.name, v)?;
            }
        }
        w.write_all(b"\n")?;
    }
    w.flush()?;
    Ok(())
}
