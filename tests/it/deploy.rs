//! `config check`, `deploy plan` on a fake topology, and `--numa-node`.

use crate::support::*;
use std::path::Path;
use std::process::Command;

fn coredir(args: &[&str], env: &[(&str, &Path)]) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_coredir"));
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// node0 and node1 with the given CPU lists.
fn fake_topology(dir: &Path, lists: &[&str]) {
    for (i, l) in lists.iter().enumerate() {
        let node = dir.join(format!("node{i}"));
        std::fs::create_dir_all(&node).unwrap();
        std::fs::write(node.join("cpulist"), format!("{l}\n")).unwrap();
    }
    std::fs::write(dir.join("online"), "0-1\n").unwrap();
}

#[test]
fn config_check_accepts_good_files_and_names_the_bad_key() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.toml");
    std::fs::write(
        &good,
        "[server]\nlisten = \"127.0.0.1:1389\"\n[limits]\nsize_limit = 10\n[access]\nrules = ['to * by users read']\n",
    )
    .unwrap();
    let (code, out, err) = coredir(&["config", "check", good.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("good.toml: OK"), "{out}");
    for (text, want) in [
        ("[server]\nlisten = \"nowhere\"\n", "server.listen"),
        ("[limits]\nsize_limt = 3\n", "size_limt"),
        ("[access]\nrules = ['to * by everyone read']\n", "access rule 0"),
        ("[log]\nlevel = \"loud\"\n", "log.level"),
        ("[tls]\ncertificate_file = \"/nonexistent.pem\"\nkey_file = \"/nonexistent.key\"\n", "tls.certificate_file"),
    ] {
        let bad = dir.path().join("bad.toml");
        std::fs::write(&bad, text).unwrap();
        let (code, _, err) = coredir(&["config", "check", bad.to_str().unwrap()], &[]);
        assert_eq!(code, 1, "{text}");
        assert!(err.contains(want), "{text}: {err}");
    }
}

#[test]
fn deploy_plan_writes_one_configuration_per_node() {
    let dir = tempfile::tempdir().unwrap();
    fake_topology(dir.path(), &["0-3,8-11", "4-7,12-15"]);
    let (code, out, err) =
        coredir(&["deploy", "plan", "--sys", dir.path().to_str().unwrap(), "--base-port", "3389"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("# /etc/coredir/node0.toml: NUMA node 0, CPUs 0-3,8-11, 8 shards"), "{out}");
    assert!(out.contains("# /etc/coredir/node1.toml: NUMA node 1, CPUs 4-7,12-15, 8 shards"), "{out}");
    // Each block is a valid configuration of its own.
    let blocks: Vec<&str> = out.split("# /etc/coredir/").skip(1).collect();
    assert_eq!(blocks.len(), 2);
    for (i, block) in blocks.iter().enumerate() {
        let file = dir.path().join(format!("node{i}.toml"));
        std::fs::write(&file, format!("# {block}")).unwrap();
        let (code, _, err) = coredir(&["config", "check", file.to_str().unwrap()], &[]);
        assert_eq!(code, 0, "{block}: {err}");
        assert!(block.contains(&format!("listen = \"0.0.0.0:{}\"", 3389 + i)), "{block}");
        assert!(block.contains(&format!("numa_node = {i}")), "{block}");
        assert!(block.contains(&format!("admin_socket = \"/run/coredir/node{i}.sock\"")), "{block}");
        // The two nodes are a mirror pair: each sends to the other's listener.
        assert!(block.contains(&format!("listen = \"0.0.0.0:{}\"", 10389 + i)), "{block}");
        assert!(block.contains(&format!("peer = \"127.0.0.1:{}\"", 10389 + (1 - i))), "{block}");
    }
    let secret = |b: &str| b.lines().find(|l| l.starts_with("secret = ")).map(str::to_string);
    assert!(secret(blocks[0]).is_some() && secret(blocks[0]) == secret(blocks[1]), "{out}");
    assert!(blocks[1].contains("coredir restore --config /etc/coredir/node1.toml"), "{out}");
    let (code, _, err) = coredir(&["deploy", "plan", "--sys", "/nonexistent"], &[]);
    assert_eq!(code, 1);
    assert!(err.contains("/nonexistent"), "{err}");
}

#[test]
fn serve_numa_node_runs_one_shard_per_cpu_of_the_node() {
    let cpus = allowed_cpus();
    let last = *cpus.last().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let topo = dir.path().join("nodes");
    fake_topology(&topo, &["0", &last.to_string()]);
    let data = dir.path().join("data");
    let mut child = Command::new(env!("CARGO_BIN_EXE_coredir"))
        .args(["serve", "--listen", "127.0.0.1:0", "--numa-node", "1", "--data"])
        .arg(&data)
        .env("COREDIR_SYS_NODES", &topo)
        .env("COREDIR_ROOT_PASSWORD", ROOT_PW)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
    assert!(lines.any(|l| l.unwrap().starts_with("coredir: listening on")), "the server did not start");
    let socket = data.join("admin.sock");
    let out = Command::new(env!("CARGO_BIN_EXE_coredir"))
        .args(["ctl", "--json", "--socket", socket.to_str().unwrap(), "shards"])
        .output()
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let shards: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let list = shards["shards"].as_array().unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["cpu"], last as u64);
}
