#!/bin/bash
# The mirror soak (issue 19, item 9): a pair of 2-shard servers, B's clock
# 30 s ahead of A's, both under a write mix for 60 s, apart for the middle
# 20 s, then drained, compared and verified.
#
# - 10,000 users imported into A, with ou=moved; B restored from A's backup.
# - The channel runs through two forwarders (soak/proxy.py); killing them
#   is the partition, starting them again the heal.
# - On each side: `coredir-perf run` modify and add (4 connections each),
#   and `ldapmodify -c` of soak/churn.py's stream: renames and moves across
#   shards (some of one entry on both sides at once), group member churn,
#   one DN added on both sides per round, deletes of those.
# - `ctl replication` sampled every second on both (samples.txt); after the
#   loads, the backlogs drained, both exports compared byte for byte, and
#   a full anti-entropy sweep on both sides that finds no divergence.
# Prints: writes, conflicts, lag median and max, time to drain after the
# heal, partitions verified, divergences.
# Usage: perf/mirror-soak.sh [WORKDIR]   (after cargo build --release --workspace)
set -e
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$ROOT/target/release/coredir
P=$ROOT/target/release/coredir-perf
SOAK=$ROOT/perf/soak
W=${1:-$(mktemp -d /tmp/coredir-mirror-soak.XXXXXX)}
mkdir -p "$W"; cd "$W"; rm -rf da db bk ./*.out ./*.err churn-* samples.txt; echo "work directory: $W"
PIDS=()
trap 'kill "${PIDS[@]}" $(cat da/pid db/pid 2>/dev/null) 2>/dev/null || true' EXIT
# A listens on 4501, B on 4502; A's peer is the forwarder 4511 -> 4502, B's 4512 -> 4501.
for x in a b; do
  if [ $x = a ]; then id=1; l=4501; p=4511; else id=2; l=4502; p=4512; fi
  printf '[server]\nid = %s\n[log]\nlevel = "off"\n[replication]\nlisten = "127.0.0.1:%s"\npeer = "127.0.0.1:%s"\nsecret = "pair"\nverify_interval_s = 5\n' $id $l $p > $x.toml
done
[ -f users.ldif ] || $P gen-ldif --users 10000 -o users.ldif
printf 'dn: ou=moved,dc=example,dc=com\nobjectClass: organizationalUnit\nou: moved\n' > moved.ldif
cat users.ldif moved.ldif > seed.ldif
COREDIR_ROOT_PASSWORD=secret $B import --config a.toml --data da --shards 2 seed.ldif 2>&1 | tail -1
COREDIR_ROOT_PASSWORD=secret $B serve --config a.toml --listen 127.0.0.1:3911 --data da --shards 2 > a.out 2> a.err &
echo $! > da/pid
sleep 1.5
$B ctl --socket da/admin.sock backup "$W/bk" >/dev/null
$B restore --config b.toml --data db "$W/bk" 2>&1 | tail -1
COREDIR_TEST_CLOCK_OFFSET_S=30 COREDIR_ROOT_PASSWORD=secret \
  $B serve --config b.toml --listen 127.0.0.1:3912 --data db --shards 2 > b.out 2> b.err &
echo $! > db/pid
sleep 1.5
link() { python3 "$SOAK/proxy.py" 4511 4502 & PIDS+=($!); LINK_A=$!; python3 "$SOAK/proxy.py" 4512 4501 & PIDS+=($!); LINK_B=$!; }
link
status() { $B ctl --json --socket "$1/admin.sock" replication; }
field() { python3 -c "import json,sys;print(json.load(sys.stdin)[\"$1\"])"; }
( while true; do
    for s in da db; do echo "$(date +%s.%N) $s $(status $s)" >> samples.txt; done
    sleep 1
  done ) & PIDS+=($!); SAMPLER=$!
loaders=()
for port in 3911 3912; do
  for sc in modify add; do
    $P run --addr 127.0.0.1:$port --scenario $sc --conns 4 --duration 60 --warmup 0 --users 10000 \
      > load-$port-$sc.out 2>&1 & loaders+=($!)
  done
done
churn() { # phase, first round: three streams per side, each of its own rounds
  for x in a b; do
    port=$([ $x = a ] && echo 3911 || echo 3912)
    for k in 0 1 2; do
      f=churn-$x-$1-$k
      python3 "$SOAK/churn.py" $x $(( $2 + k * 1000 )) 1000 > $f.ldif
      timeout 20 ldapmodify -c -x -H ldap://127.0.0.1:$port -D cn=admin,dc=example,dc=com -w secret \
        -f $f.ldif > $f.out 2> $f.err & loaders+=($!)
    done
  done
  sleep 20
}
churn 1 1
echo "$(date +%s.%N) partition" >> samples.txt; kill $LINK_A $LINK_B
churn 2 10001
HEAL=$(date +%s.%N); echo "$HEAL heal" >> samples.txt; link
churn 3 20001
wait "${loaders[@]}" || true
for i in $(seq 1 120); do
  [ "$(status da | field backlog)" = 0 ] && [ "$(status db | field backlog)" = 0 ] && break; sleep 1
done
# A whole sweep on each side after the drain, with no divergence.
va=$(status da | field partitions_verified); vb=$(status db | field partitions_verified)
for i in $(seq 1 120); do
  [ $(( $(status da | field partitions_verified) - va )) -ge 256 ] && \
    [ $(( $(status db | field partitions_verified) - vb )) -ge 256 ] && break; sleep 1
done
kill $SAMPLER
$B export --config a.toml --data da --out a.ldif 2>/dev/null; $B export --config b.toml --data db --out b.ldif 2>/dev/null
ls -la a.ldif b.ldif
cmp a.ldif b.ldif
echo "the exports are identical"
for s in da db; do $B ctl --socket $s/admin.sock replication; status $s > final-$s.json; done
conflicts=$($B ctl --socket da/admin.sock replication conflicts | wc -l)
python3 - "$HEAL" "$conflicts" <<'EOF'
import glob, json, statistics, sys
heal, conflicts = float(sys.argv[1]), int(sys.argv[2])
apart, joined, away, drained, lags = None, [], [], None, {}
for line in open("samples.txt"):
    t, who, *rest = line.strip().split(" ", 2)
    if who == "partition":
        apart = float(t)
    if not rest:
        continue
    t, s = float(t), json.loads(rest[0])
    if apart is None:
        joined.append(s["lag_s"])
    elif t > heal and drained is None:
        away.append(s["lag_s"])
    lags[who] = s["lag_s"]
    # Converged: both sides' lag under a second, in one sampling round.
    if t > heal and drained is None and who == "db" and max(lags.values()) < 1.0:
        drained = t - heal
count = lambda pattern, prefixes: sum(
    1 for f in glob.glob(pattern) for l in open(f) if l.startswith(prefixes))
churn = count("churn-*.out", ("modifying", "adding", "deleting"))
churn_failed = count("churn-*.err", ("ldap_",))
loads = [json.loads(l) for f in glob.glob("load-*.out") for l in open(f) if l.startswith("{")]
perf, perf_errors = sum(r["ops"] for r in loads), sum(r["errors"] for r in loads)
final = {who: json.load(open(f"final-{who}.json")) for who in ("da", "db")}
print(f"writes: {perf} modifies and adds from coredir-perf ({perf_errors} refused: the user had moved), "
      f"{churn} churn requests ({churn_failed} refused, as timing decides)")
print(f"conflict and glue entries at the end: {conflicts}")
print(f"lag before the partition: median {statistics.median(joined):.2f} s, max {max(joined):.2f} s "
      f"({len(joined)} samples)")
print(f"after the heal, both lags under 1 s after {drained if drained is None else round(drained, 1)} s "
      f"(max {max(away, default=0):.1f} s meanwhile)")
for who in ("da", "db"):
    s = final[who]
    print(f"{who}: {s['partitions_verified']} partition checks agreed, {s['verify_unsettled']} without a verdict, "
          f"{s['divergences']} divergences")
EOF
