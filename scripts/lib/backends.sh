# Shared by scripts/demo.sh and scripts/soak.sh (sourced, not run): local MariaDB backends in a
# temporary directory, on free loopback ports, stopped and removed on exit. Kills only the pids it
# started.
#   source scripts/lib/backends.sh; start_backend db1; echo "$BACKEND_PORT $BACKEND_SOCKET"

find_bin() {
  for d in $(echo "$PATH" | tr ':' ' ') /usr/sbin /usr/bin /usr/local/sbin; do
    [ -x "$d/$1" ] && { echo "$d/$1"; return 0; }
  done
  echo "missing $1: run scripts/install-deps.sh" >&2
  exit 1
}
MARIADBD=$(find_bin mariadbd)
INSTALL_DB=$(find_bin mariadb-install-db)

WORK=$(mktemp -d /tmp/mysql-lb-run.XXXXXX)
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
trap 'exit 130' INT TERM

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# Run as root (as on CI) or as an ordinary user: mariadbd needs --user=root only for root.
USER_OPT=()
[ "$(id -u)" = 0 ] && USER_OPT=(--user=root)

# Starts one backend; sets BACKEND_PORT and BACKEND_SOCKET. Not in a subshell: the pid must reach
# PIDS for the cleanup.
start_backend() {
  local name=$1 dir
  BACKEND_PORT=$(free_port)
  dir=$WORK/$name
  BACKEND_SOCKET=$dir/mysqld.sock
  # A private tmpdir: at start mariadbd deletes every #sql* file in its tmpdir, others' too.
  mkdir -p "$dir/tmp"
  "$INSTALL_DB" --no-defaults "${USER_OPT[@]}" --innodb-use-native-aio=0 --tmpdir="$dir/tmp" \
    --datadir="$dir/data" \
    --auth-root-authentication-method=normal --skip-test-db >"$dir/install.log" 2>&1
  "$MARIADBD" --no-defaults "${USER_OPT[@]}" --datadir="$dir/data" --port="$BACKEND_PORT" \
    --bind-address=127.0.0.1 --socket="$BACKEND_SOCKET" --pid-file="$dir/mysqld.pid" \
    --log-error="$dir/error.log" --tmpdir="$dir/tmp" --innodb-use-native-aio=0 \
    --innodb-buffer-pool-size=64M \
    --performance-schema=OFF --skip-name-resolve --max-connections=1000 --skip-log-bin \
    >/dev/null 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 600); do
    mariadb --no-defaults -uroot -S "$BACKEND_SOCKET" -e 'SELECT 1' >/dev/null 2>&1 && break
    sleep 0.1
  done
  mariadb --no-defaults -uroot -S "$BACKEND_SOCKET" -e "
    CREATE USER IF NOT EXISTS 'bench'@'%' IDENTIFIED BY 'bench';
    CREATE USER IF NOT EXISTS 'bench'@'localhost' IDENTIFIED BY 'bench';
    GRANT ALL ON *.* TO 'bench'@'%'; GRANT ALL ON *.* TO 'bench'@'localhost';
    CREATE DATABASE IF NOT EXISTS sbtest;"
}

# Starts mysql-lb (already built) with the given flags; sets PROXY_PID and waits for PROXY_PORT.
start_proxy() {
  "$BIN" "$@" &
  PROXY_PID=$!
  PIDS+=("$PROXY_PID")
  for _ in $(seq 1 100); do
    mariadb --no-defaults -h127.0.0.1 -P"$PROXY_PORT" -ubench -pbench -e 'SELECT 1' >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "mysql-lb did not come up on port $PROXY_PORT" >&2
  exit 1
}

SB_COMMON=(--db-driver=mysql --mysql-user=bench --mysql-password=bench --mysql-db=sbtest
  --tables=4 --table-size=10000)

# sysbench oltp_read_only prepare on a backend port.
prepare_tables() {
  sysbench oltp_read_only "${SB_COMMON[@]}" --mysql-host=127.0.0.1 --mysql-port="$1" prepare >/dev/null
}
