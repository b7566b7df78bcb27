#!/usr/bin/env bash
# Soak test (not in CI): sysbench oltp_read_only through mysql-lb for a long time, sampling the
# proxy's RSS and open descriptors every minute. A leak shows as growth between the first and the
# last sample; the summary prints both.
#
#   scripts/soak.sh [MINUTES] [THREADS]      (defaults: 30 min, 16 threads)
set -euo pipefail

cd "$(dirname "$0")/.."
MINUTES=${1:-30}
THREADS=${2:-16}

scripts/install-deps.sh demo
cargo build --release --quiet
BIN=$PWD/target/release/mysql-lb
source scripts/lib/backends.sh

start_backend db1; P1=$BACKEND_PORT
start_backend db2; P2=$BACKEND_PORT
prepare_tables "$P1"
prepare_tables "$P2"
PROXY_PORT=$(free_port)
ADMIN_PORT=$(free_port)
start_proxy --proxy-address "127.0.0.1:$PROXY_PORT" --admin-address "127.0.0.1:$ADMIN_PORT" \
  --proxy-backend-addresses "127.0.0.1:$P1" --proxy-backend-addresses "127.0.0.1:$P2" \
  --log-level warn

sample() { # -> "rss_kib fds"
  echo "$(awk '/VmRSS/ {print $2}' "/proc/$PROXY_PID/status") $(ls "/proc/$PROXY_PID/fd" | wc -l)"
}

echo "== soak: $MINUTES min, $THREADS threads; sysbench restarts every minute, so connections churn too"
echo "minute rss_kib open_fds"
echo "0 $(sample)" | tee "$WORK/samples"
: >"$WORK/sysbench.out"
for m in $(seq 1 "$MINUTES"); do
  sysbench oltp_read_only "${SB_COMMON[@]}" --mysql-host=127.0.0.1 --mysql-port="$PROXY_PORT" \
    --threads="$THREADS" --time=60 --report-interval=0 --mysql-ignore-errors=none run \
    >>"$WORK/sysbench.out"
  echo "$m $(sample)" | tee -a "$WORK/samples"
done
sleep 2
echo "idle $(sample)" | tee -a "$WORK/samples"
awk '/queries:/ {q += $2} /ignored errors:/ {e += $3} END {printf "queries: %d, errors: %d\n", q, e}' \
  "$WORK/sysbench.out"
read -r _ rss0 fd0 < <(head -1 "$WORK/samples")
read -r _ rss1 fd1 < <(tail -1 "$WORK/samples")
echo "== RSS ${rss0} KiB -> ${rss1} KiB, open fds ${fd0} -> ${fd1} (idle, after the load)"
