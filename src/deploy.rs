//! NUMA topology and the one-process-per-node layout: which CPUs a node
//! has (`/sys/devices/system/node/nodeN/cpulist`), `coredir serve
//! --numa-node N`, and `coredir deploy plan`, which prints one
//! configuration per node.

use anyhow::{anyhow, bail, Context, Result};
use std::path::{Path, PathBuf};

pub const SYS_NODES: &str = "/sys/devices/system/node";

/// A CPU list as the kernel writes it: `0-3,8-11`.
pub fn parse_cpulist(text: &str) -> Result<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (usize, usize) = (
            a.trim().parse().map_err(|_| anyhow!("bad CPU list {text:?}"))?,
            b.trim().parse().map_err(|_| anyhow!("bad CPU list {text:?}"))?,
        );
        if b < a {
            bail!("bad CPU range {part:?}");
        }
        cpus.extend(a..=b);
    }
    Ok(cpus)
}

/// The NUMA nodes under `sys` (normally `/sys/devices/system/node`) and
/// their CPUs, by node number.
pub fn nodes(sys: &Path) -> Result<Vec<(usize, Vec<usize>)>> {
    let mut out = Vec::new();
    let dir = std::fs::read_dir(sys).with_context(|| format!("reading {}", sys.display()))?;
    for entry in dir.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        let Some(n) = name.strip_prefix("node").and_then(|n| n.parse::<usize>().ok()) else { continue };
        let list = std::fs::read_to_string(entry.path().join("cpulist"))
            .with_context(|| format!("reading {}", entry.path().join("cpulist").display()))?;
        let cpus = parse_cpulist(&list)?;
        if !cpus.is_empty() {
            out.push((n, cpus));
        }
    }
    out.sort();
    Ok(out)
}

/// The CPUs `serve --numa-node N` runs on: the node's, intersected with
/// the CPUs this process may use.
pub fn node_cpus(node: usize, allowed: &[usize]) -> Result<Vec<usize>> {
    let sys = std::env::var_os("COREDIR_SYS_NODES").map(PathBuf::from).unwrap_or_else(|| SYS_NODES.into());
    let all = nodes(&sys)?;
    let (_, cpus) = all
        .into_iter()
        .find(|(n, _)| *n == node)
        .ok_or_else(|| anyhow!("--numa-node {node}: this machine has no such NUMA node (see {})", sys.display()))?;
    let usable: Vec<usize> = cpus.into_iter().filter(|c| allowed.contains(c)).collect();
    if usable.is_empty() {
        bail!("--numa-node {node}: none of its CPUs is in this process's CPU set");
    }
    Ok(usable)
}

pub struct PlanOptions {
    pub sys: PathBuf,
    pub listen_host: String,
    pub base_port: u16,
    pub data_root: PathBuf,
    pub run_dir: PathBuf,
}

/// One configuration per NUMA node, as TOML with a header naming the file
/// it belongs in. Nodes pair up as mirrors (0 with 1, 2 with 3, ...):
/// each pair's replication ports are `--base-port` + 7000 + node index and
/// they share a secret made up here; an odd last node runs alone.
pub fn plan(o: &PlanOptions) -> Result<String> {
    let nodes = nodes(&o.sys)?;
    if nodes.is_empty() {
        bail!("no NUMA nodes under {}", o.sys.display());
    }
    let port = |i: usize, offset: usize| -> Result<usize> {
        let p = o.base_port as usize + offset + i;
        if p > u16::MAX as usize {
            bail!("--base-port: port {p} is out of range");
        }
        Ok(p)
    };
    let secrets: Vec<String> =
        (0..nodes.len().div_ceil(2)).map(|_| format!("{:032x}", rand::random::<u128>())).collect();
    let mut out = String::new();
    for (i, (node, cpus)) in nodes.iter().enumerate() {
        out.push_str(&format!(
            "# /etc/coredir/node{node}.toml: NUMA node {node}, CPUs {}, {} shards\n\
             # run: systemctl enable --now coredir@{node}\n\
             [server]\n\
             listen = \"{}:{}\"\n\
             data = {:?}\n\
             numa_node = {node}\n\
             shards = 0\n\
             admin_socket = {:?}\n\
             id = {}\n\n\
             [log]\n\
             level = \"stats\"\n\
             file = {:?}\n\n",
            compact(cpus),
            cpus.len(),
            o.listen_host,
            port(i, 0)?,
            o.data_root.join(format!("node{node}")).display().to_string(),
            o.run_dir.join(format!("node{node}.sock")).display().to_string(),
            i + 1,
            PathBuf::from("/var/log/coredir").join(format!("node{node}.log")).display().to_string(),
        ));
        let peer = i ^ 1;
        match nodes.get(peer) {
            Some((peer_node, _)) => {
                let seed = if i % 2 == 1 {
                    format!(
                        "# Seed this node from node {peer_node} before its first start:\n\
                         #   coredir ctl --socket {} backup /var/lib/coredir/seed\n\
                         #   coredir restore --config /etc/coredir/node{node}.toml /var/lib/coredir/seed\n",
                        o.run_dir.join(format!("node{peer_node}.sock")).display()
                    )
                } else {
                    String::new()
                };
                out.push_str(&format!(
                    "# Mirror pair with node {peer_node}: both take writes and replicate to each other.\n{seed}\
                     [replication]\n\
                     listen = \"{}:{}\"\n\
                     peer = \"{}:{}\"\n\
                     secret = \"{}\"\n\n",
                    o.listen_host,
                    port(i, 7000)?,
                    if o.listen_host == "0.0.0.0" { "127.0.0.1" } else { &o.listen_host },
                    port(peer, 7000)?,
                    secrets[i / 2],
                ));
            }
            None if nodes.len() > 1 => {
                out.push_str("# No mirror: an odd node out (mirror mode pairs two servers).\n\n");
            }
            None => {}
        }
    }
    Ok(out)
}

/// `0-3,8-11` from a sorted CPU list.
fn compact(cpus: &[usize]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        while i + 1 < cpus.len() && cpus[i + 1] == cpus[i] + 1 {
            i += 1;
        }
        parts.push(if cpus[i] == start { start.to_string() } else { format!("{start}-{}", cpus[i]) });
        i += 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpulists() {
        assert_eq!(parse_cpulist("0-3,8-9,12\n").unwrap(), vec![0, 1, 2, 3, 8, 9, 12]);
        assert_eq!(compact(&[0, 1, 2, 3, 8, 9, 12]), "0-3,8-9,12");
        assert!(parse_cpulist("3-1").is_err());
        assert!(parse_cpulist("a").is_err());
    }
}
