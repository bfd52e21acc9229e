#!/bin/bash
# Instructions per request of two coredir binaries, under callgrind:
#
#   perf/cg.sh OLD NEW "search read bind"
#
# Where timed A/B runs (perf/ab.sh) are too noisy to see a few percent
# (a shared VM whose CPU time per request varies by ±15% from run to
# run), the instructions a request costs in the server's user space do
# not vary: this counts them. One shard under `valgrind --tool=callgrind`,
# 10,000 users imported once into $CG (default /tmp/cg) by NEW, `coredir-perf
# run --conns 16` for 1 s of warm-up, then the counters are zeroed and
# dumped around a 10 s run. Prints, per scenario and binary, the requests
# run, all instructions of the process per request (reactor loop, the
# admin thread's metrics sampling) and those under `ops::dispatch` (the
# request's own work). Kernel time is not counted: compare only what
# changes in user space. Needs valgrind (apt-get install valgrind).
set -eu
OLD=$(realpath "$1"); NEW=$(realpath "$2"); SCENARIOS=$3
REPO=$(cd "$(dirname "$0")/.." && pwd)
PERF=$REPO/target/release/coredir-perf
. "$REPO/perf/users.sh"
users_db "${CG:-/tmp/cg}" "$NEW"

one() { # binary scenario
  local bin=$1 scenario=$2 depth=1 port=$((20000 + RANDOM % 20000))
  [ "$scenario" = search8 ] && { scenario=search; depth=8; }
  rm -rf run out.* && cp -a db run
  COREDIR_ROOT_PASSWORD=secret valgrind --tool=callgrind --callgrind-out-file="$PWD/out.%p" \
    "$bin" serve --config conf.toml --listen 127.0.0.1:$port --data run --shards 1 > valgrind.log 2>&1 &
  local pid=$!
  for _ in $(seq 120); do
    (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break
    sleep 0.5
  done
  local load=("$PERF" run --addr 127.0.0.1:$port --scenario $scenario --conns 16 --depth $depth)
  "${load[@]}" --duration 1 --warmup 0 > /dev/null 2>&1
  callgrind_control -z $pid > /dev/null 2>&1
  local ops
  ops=$("${load[@]}" --duration 10 --warmup 0 2>&1 | grep -o '"ops":[0-9]*' | cut -d: -f2)
  callgrind_control -d $pid > /dev/null 2>&1
  kill $pid; wait $pid 2>/dev/null || true
  local f total dispatch
  f=$(ls out.*.1 | head -1)
  total=$(awk '/^summary/ { print $2 }' "$f")
  dispatch=$(callgrind_annotate --inclusive=yes "$f" 2>/dev/null |
    awk '/coredir::ops::dispatch \[/ { gsub(",", "", $1); print $1; exit }')
  echo "$ops $((total / ops)) $((dispatch / ops))"
}

echo "scenario binary requests instructions/request dispatch/request"
for s in $SCENARIOS; do
  echo "$s old $(one "$OLD" $s)"
  echo "$s new $(one "$NEW" $s)"
done
