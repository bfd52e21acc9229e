#!/bin/bash
# A mirror pair under the perf write mix on both sides for a minute:
# 10,000 users imported into A, B restored from A's backup, then on each
# side `coredir-perf run` modify and add (8 connections each) for 60 s,
# `ctl replication` sampled every 2 s on both (samples.txt), the backlogs
# drained, and both exports compared byte for byte.
# Usage: perf/mirror-soak.sh [WORKDIR]   (after cargo build --release --workspace)
set -e
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$ROOT/target/release/coredir
P=$ROOT/target/release/coredir-perf
W=${1:-$(mktemp -d /tmp/coredir-mirror-soak.XXXXXX)}
mkdir -p "$W"; cd "$W"; rm -rf da db bk *.out *.err samples.txt; echo "work directory: $W"
for x in a b; do
  if [ $x = a ]; then id=1; l=4501; p=4502; port=3911; else id=2; l=4502; p=4501; port=3912; fi
  printf '[server]\nid = %s\n[log]\nlevel = "off"\n[replication]\nlisten = "127.0.0.1:%s"\npeer = "127.0.0.1:%s"\nsecret = "pair"\n' $id $l $p > $x.toml
done
[ -f users.ldif ] || $P gen-ldif --users 10000 -o users.ldif
COREDIR_ROOT_PASSWORD=secret $B import --config a.toml --data da --shards 2 users.ldif 2>&1 | tail -1
COREDIR_ROOT_PASSWORD=secret $B serve --config a.toml --listen 127.0.0.1:3911 --data da --shards 2 > a.out 2> a.err &
echo $! > da/pid
sleep 1.5
$B ctl --socket da/admin.sock backup "$W/bk" >/dev/null
$B restore --config b.toml --data db "$W/bk" 2>&1 | tail -1
COREDIR_ROOT_PASSWORD=secret $B serve --config b.toml --listen 127.0.0.1:3912 --data db --shards 2 > b.out 2> b.err &
echo $! > db/pid
sleep 1.5
for port in 3911 3912; do
  for sc in modify add; do
    $P run --addr 127.0.0.1:$port --scenario $sc --conns 8 --duration 60 --warmup 0 --users 10000 > load-$port-$sc.out 2>&1 &
    loaders="$loaders $!"
  done
done
for i in $(seq 1 32); do
  for s in da db; do echo "$(date +%s) $s $($B ctl --json --socket $s/admin.sock replication)" >> samples.txt; done
  sleep 2
done
wait $loaders
for i in $(seq 1 60); do
  ba=$($B ctl --json --socket da/admin.sock replication | python3 -c 'import json,sys;print(json.load(sys.stdin)["backlog"])')
  bb=$($B ctl --json --socket db/admin.sock replication | python3 -c 'import json,sys;print(json.load(sys.stdin)["backlog"])')
  [ "$ba" = 0 ] && [ "$bb" = 0 ] && break; sleep 1
done
sleep 3
$B export --config a.toml --data da --out a.ldif 2>/dev/null; $B export --config b.toml --data db --out b.ldif 2>/dev/null
ls -la a.ldif b.ldif
cmp a.ldif b.ldif
echo "the exports are identical"
for s in da db; do $B ctl --socket $s/admin.sock replication; done
kill $(cat da/pid db/pid 2>/dev/null) 2>/dev/null || true
