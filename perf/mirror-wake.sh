#!/bin/bash
# A mirror pair (2 shards each, syncrepl provider on) from one binary:
# CPU of each idle server over 20 s with one persistent search open on A,
# then the replication lag of 40 adds on A (until B answers a base search).
# usage: perf/mirror-wake.sh BIN TAG   (needs ldap-utils and `pip install ldap3`)
set -u
BIN=$1; TAG=$2; D=${TMPDIR:-/tmp}/mirror-wake/$TAG; rm -rf "$D"; mkdir -p "$D"
PA=$((20000 + RANDOM % 10000)); PB=$((PA+1)); LA=$((PA+2)); LB=$((PA+3))
conf() { printf '[server]\nid = %s\nlisten = "127.0.0.1:%s"\nshards = 2\n[replication]\nlisten = "127.0.0.1:%s"\npeer = "127.0.0.1:%s"\nsecret = "s"\n[syncrepl]\nprovider = true\n' "$@"; }
conf 1 $LA $PA $PB > "$D/a.toml"; conf 2 $LB $PB $PA > "$D/b.toml"
up() { for _ in $(seq 100); do grep -q "listening on" "$1" && return; sleep 0.1; done; echo "no start: $1"; exit 1; }
"$BIN" serve --config "$D/a.toml" --data "$D/a" > "$D/a.log" 2>&1 & A=$!; up "$D/a.log"
"$BIN" ctl --socket "$D/a/admin.sock" backup "$D/seed" > /dev/null 2>&1
"$BIN" restore --config "$D/b.toml" --data "$D/b" "$D/seed" > /dev/null 2>&1
"$BIN" serve --config "$D/b.toml" --data "$D/b" > "$D/b.log" 2>&1 & B=$!; up "$D/b.log"
trap 'kill $A $B 2>/dev/null' EXIT
sleep 3
ldapsearch -x -H ldap://127.0.0.1:$LA -b dc=example,dc=com -E 'sync=rp' '(objectClass=*)' dn > /dev/null 2>&1 & S=$!
sleep 2
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
a0=$(cpu $A); b0=$(cpu $B); sleep 20; a1=$(cpu $A); b1=$(cpu $B)
kill $S 2>/dev/null
echo "$TAG idle CPU over 20 s: A $(( (a1-a0)*10 )) ms, B $(( (b1-b0)*10 )) ms"
PW=$(grep -o "generated password for [^:]*: .*" "$D/a.log" | sed "s/.*: //")
python3 - $LA $LB "$PW" "$TAG" <<'PY'
import sys, time, statistics, ldap3
la, lb, pw, tag = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
c = lambda p: ldap3.Connection(ldap3.Server('127.0.0.1', port=p), 'cn=admin,dc=example,dc=com', pw, auto_bind=True)
a, b, lags = c(la), c(lb), []
for i in range(40):
    dn = f'uid=lag{i},ou=people,dc=example,dc=com'
    a.add(dn, ['inetOrgPerson'], {'cn': 'x', 'sn': 'y', 'uid': f'lag{i}'})
    t0 = time.perf_counter()
    while not (b.search(dn, '(objectClass=*)', search_scope=ldap3.BASE, attributes=['1.1']) or b.response):
        if time.perf_counter() - t0 > 5: sys.exit('timeout')
    lags.append((time.perf_counter() - t0) * 1000)
    time.sleep(0.05)
lags.sort()
print(f"{tag} replication lag: median {statistics.median(lags):.1f} ms, p90 {lags[36]:.1f} ms, max {lags[-1]:.1f} ms")
PY
