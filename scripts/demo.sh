#!/usr/bin/env bash
# The main job, end to end on one machine: two local MariaDB backends, mysql-lb in front of them,
# a short sysbench load through mysql-lb, and the split of queries per backend as each server
# counted it. Everything runs on loopback in a temporary directory that is removed at the end.
#
#   scripts/demo.sh [SECONDS] [THREADS]      (defaults: 10 s, 8 threads)
set -euo pipefail

cd "$(dirname "$0")/.."
DURATION=${1:-10}
THREADS=${2:-8}

scripts/install-deps.sh demo
cargo build --release --quiet
BIN=$PWD/target/release/mysql-lb
source scripts/lib/backends.sh

questions() { # port -> the server's own count of statements
  mariadb --no-defaults -h127.0.0.1 -P"$1" -ubench -pbench -N -e \
    "SHOW GLOBAL STATUS LIKE 'Questions'" | awk '{print $2}'
}

echo "== starting two MariaDB backends"
start_backend db1; P1=$BACKEND_PORT
start_backend db2; P2=$BACKEND_PORT
echo "   db1 on 127.0.0.1:$P1, db2 on 127.0.0.1:$P2"
prepare_tables "$P1"
prepare_tables "$P2"

PROXY_PORT=$(free_port)
ADMIN_PORT=$(free_port)
echo "== starting mysql-lb on 127.0.0.1:$PROXY_PORT (metrics: http://127.0.0.1:$ADMIN_PORT/metrics)"
start_proxy --proxy-address "127.0.0.1:$PROXY_PORT" --admin-address "127.0.0.1:$ADMIN_PORT" \
  --proxy-backend-addresses "127.0.0.1:$P1" --proxy-backend-addresses "127.0.0.1:$P2" \
  --log-level warn

Q1=$(questions "$P1"); Q2=$(questions "$P2")
echo "== sysbench oltp_read_only through mysql-lb: $THREADS threads, $DURATION s"
sysbench oltp_read_only "${SB_COMMON[@]}" --mysql-host=127.0.0.1 --mysql-port="$PROXY_PORT" \
  --threads="$THREADS" --time="$DURATION" --report-interval=0 run |
  grep -E 'queries:|transactions:|errors:|95th percentile:'
D1=$(( $(questions "$P1") - Q1 - 1 )); D2=$(( $(questions "$P2") - Q2 - 1 ))
TOTAL=$(( D1 + D2 ))
echo "== statements per backend, as each server counted them"
printf '   db1 (127.0.0.1:%s): %8d  (%d%%)\n' "$P1" "$D1" $(( TOTAL ? 100 * D1 / TOTAL : 0 ))
printf '   db2 (127.0.0.1:%s): %8d  (%d%%)\n' "$P2" "$D2" $(( TOTAL ? 100 * D2 / TOTAL : 0 ))
echo "== as mysql-lb measured them (p50/p99 from its histograms, /backends)"
python3 - "$ADMIN_PORT" <<'PY'
import json, sys, urllib.request
data = json.load(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/backends"))
for b in data["backends"]:
    p50, p99 = b["recent_p50_seconds"], b["recent_p99_seconds"]
    fmt = lambda v: "-" if v is None else f"{v * 1000:.2f} ms"
    print(f"   {b['name']:>22}: {b['commands']:8d} commands, {b['state']}, p50 {fmt(p50)}, p99 {fmt(p99)}")
PY
