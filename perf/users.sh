# Sourced by perf/ab.sh and perf/cg.sh: the data set both A/B scripts
# load. users_db DIR BINARY enters DIR and, unless DIR/db exists, writes
# 10,000 users and imports them with BINARY into one shard (conf.toml
# beside it: the indexes perf/compare gives both servers, and a 1 GiB
# LMDB map, which valgrind can map where it cannot the default 64 GiB).
users_db() {
  local dir=$1 bin=$2
  mkdir -p "$dir" && cd "$dir"
  [ -d db ] && return
  "$PERF" gen-ldif --users 10000 -o users.ldif
  printf '[log]\nlevel = "off"\n[indexes]\nuid = "eq,sub"\ncn = "eq,sub"\nmail = "eq,sub"\nobjectClass = "eq"\n[storage]\nmap_size_mb = 1024\n' > conf.toml
  COREDIR_ROOT_PASSWORD=secret "$bin" import --config conf.toml --shards 1 --data db users.ldif
}
