#!/bin/bash
# A/B of two coredir binaries on the request path, alternated:
#
#   perf/ab.sh OLD NEW ROUNDS "bind search read search8"
#
# One shard pinned to CPU 0, `coredir-perf run --conns 16 --duration 4
# --warmup 1` pinned to CPU 1 (search8: search at depth 8), 10,000 users
# imported once into $AB (default /tmp/ab) by NEW. Prints one line per
# run: scenario, old|new, ops/s, ops per server CPU-second; then the
# medians and new/old per scenario. Build first:
# cargo build --release --workspace
set -eu
OLD=$(realpath "$1"); NEW=$(realpath "$2"); ROUNDS=$3; SCENARIOS=$4
REPO=$(cd "$(dirname "$0")/.." && pwd)
PERF=$REPO/target/release/coredir-perf
. "$REPO/perf/users.sh"
users_db "${AB:-/tmp/ab}" "$NEW"
port=$((20000 + RANDOM % 20000))

one() { # binary scenario
  local bin=$1 scenario=$2 depth=1
  [ "$scenario" = search8 ] && { scenario=search; depth=8; }
  rm -rf run && cp -a db run
  COREDIR_ROOT_PASSWORD=secret taskset -c 0 "$bin" serve --config conf.toml \
    --listen 127.0.0.1:$port --data run --shards 1 > /dev/null 2>&1 &
  local pid=$!
  for _ in $(seq 100); do
    (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break
    sleep 0.05
  done
  taskset -c 1 "$PERF" run --addr 127.0.0.1:$port --scenario $scenario --conns 16 --depth $depth \
    --duration 4 --warmup 1 --server-pid $pid 2>&1 |
    awk '/^\{/ { match($0, /"ops_per_s":[0-9]+/); ops = substr($0, RSTART + 12, RLENGTH - 12) }
         /ops per server CPU-second/ { cpu = $1 } END { print ops, cpu }'
  kill $pid; wait $pid 2>/dev/null || true
}

for s in $SCENARIOS; do
  for _ in $(seq "$ROUNDS"); do
    echo "$s old $(one "$OLD" $s)"
    echo "$s new $(one "$NEW" $s)"
  done
done | tee runs.txt
python3 - runs.txt <<'EOF'
import collections, statistics, sys
runs = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1]):
    p = line.split()
    if len(p) == 4:
        runs[p[0]][p[1]].append((int(p[2]), int(p[3])))
for s, v in runs.items():
    med = lambda side, i: statistics.median(x[i] for x in v[side])
    print(f"{s}: old {med('old', 0):.0f} new {med('new', 0):.0f} ops/s ({med('new', 0) / med('old', 0):.2f}); "
          f"per CPU-second {med('new', 1) / med('old', 1):.2f}")
EOF
