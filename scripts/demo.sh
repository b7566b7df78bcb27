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

scripts/install-deps.sh
cargo build --release --quiet
BIN=$PWD/target/release/mysql-lb

find_bin() {
  for d in $(echo "$PATH" | tr ':' ' ') /usr/sbin /usr/bin /usr/local/sbin; do
    [ -x "$d/$1" ] && { echo "$d/$1"; return 0; }
  done
  echo "missing $1: run scripts/install-deps.sh" >&2
  exit 1
}
MARIADBD=$(find_bin mariadbd)
INSTALL_DB=$(find_bin mariadb-install-db)

WORK=$(mktemp -d /tmp/mysql-lb-demo.XXXXXX)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# Run as root (as on CI) or as an ordinary user: mariadbd needs --user=root only for root.
USER_OPT=()
[ "$(id -u)" = 0 ] && USER_OPT=(--user=root)

start_backend() { # name -> prints port
  local name=$1 port dir
  port=$(free_port)
  dir=$WORK/$name
  mkdir -p "$dir"
  "$INSTALL_DB" --no-defaults "${USER_OPT[@]}" --innodb-use-native-aio=0 --datadir="$dir/data" \
    --auth-root-authentication-method=normal --skip-test-db >"$dir/install.log" 2>&1
  "$MARIADBD" --no-defaults "${USER_OPT[@]}" --datadir="$dir/data" --port="$port" \
    --bind-address=127.0.0.1 --socket="$dir/mysqld.sock" --pid-file="$dir/mysqld.pid" \
    --log-error="$dir/error.log" --innodb-use-native-aio=0 --innodb-buffer-pool-size=64M --performance-schema=OFF \
    --skip-name-resolve --max-connections=1000 --skip-log-bin >/dev/null 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 600); do
    mariadb --no-defaults -uroot -S "$dir/mysqld.sock" -e 'SELECT 1' >/dev/null 2>&1 && break
    sleep 0.1
  done
  mariadb --no-defaults -uroot -S "$dir/mysqld.sock" -e "
    CREATE USER IF NOT EXISTS 'bench'@'%' IDENTIFIED BY 'bench';
    CREATE USER IF NOT EXISTS 'bench'@'localhost' IDENTIFIED BY 'bench';
    GRANT ALL ON *.* TO 'bench'@'%'; GRANT ALL ON *.* TO 'bench'@'localhost';
    CREATE DATABASE IF NOT EXISTS sbtest;"
  echo "$port"
}

questions() { # port -> the server's own count of statements
  mariadb --no-defaults -h127.0.0.1 -P"$1" -ubench -pbench -N -e \
    "SHOW GLOBAL STATUS LIKE 'Questions'" | awk '{print $2}'
}

echo "== starting two MariaDB backends"
P1=$(start_backend db1)
P2=$(start_backend db2)
echo "   db1 on 127.0.0.1:$P1, db2 on 127.0.0.1:$P2"

SB=(sysbench oltp_read_only --db-driver=mysql --mysql-user=bench --mysql-password=bench
    --mysql-db=sbtest --tables=4 --table-size=10000)
for p in "$P1" "$P2"; do
  "${SB[@]}" --mysql-host=127.0.0.1 --mysql-port="$p" prepare >/dev/null
done

PROXY_PORT=$(free_port)
echo "== starting mysql-lb on 127.0.0.1:$PROXY_PORT"
"$BIN" --proxy-address "127.0.0.1:$PROXY_PORT" \
  --proxy-backend-addresses "127.0.0.1:$P1" --proxy-backend-addresses "127.0.0.1:$P2" \
  --log-level warn &
PIDS+=($!)
for _ in $(seq 1 100); do
  mariadb --no-defaults -h127.0.0.1 -P"$PROXY_PORT" -ubench -pbench -e 'SELECT 1' >/dev/null 2>&1 && break
  sleep 0.1
done

Q1=$(questions "$P1"); Q2=$(questions "$P2")
echo "== sysbench oltp_read_only through mysql-lb: $THREADS threads, $DURATION s"
"${SB[@]}" --mysql-host=127.0.0.1 --mysql-port="$PROXY_PORT" --threads="$THREADS" \
  --time="$DURATION" --report-interval=0 run | tee "$WORK/sysbench.out" |
  grep -E 'queries:|transactions:|errors:|95th percentile:'
D1=$(( $(questions "$P1") - Q1 - 1 )); D2=$(( $(questions "$P2") - Q2 - 1 ))
TOTAL=$(( D1 + D2 ))
echo "== statements per backend, as each server counted them"
printf '   db1 (127.0.0.1:%s): %8d  (%d%%)\n' "$P1" "$D1" $(( TOTAL ? 100 * D1 / TOTAL : 0 ))
printf '   db2 (127.0.0.1:%s): %8d  (%d%%)\n' "$P2" "$D2" $(( TOTAL ? 100 * D2 / TOTAL : 0 ))
