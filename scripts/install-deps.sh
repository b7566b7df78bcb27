#!/usr/bin/env bash
# Installs what the test suite needs beyond Rust: real MariaDB servers and clients (the
# integration tests start their own mariadbd instances), sysbench (smoke load) and HAProxy
# (the benchmark's comparison point). Idempotent: does nothing when all are present.
# Debian/Ubuntu only (apt-get). The packaged services may start on install; the tests never
# use them.
set -euo pipefail

have() {
    command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/usr/bin/$1" ]
}

missing=()
for tool in mariadbd mariadb-install-db mariadb sysbench haproxy; do
    have "$tool" || missing+=("$tool")
done

if [ "${#missing[@]}" -gt 0 ]; then
    echo "install-deps: missing ${missing[*]}; installing with apt-get" >&2
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "install-deps: apt-get not found; install mariadb-server mariadb-client sysbench haproxy yourself" >&2
        exit 1
    fi
    sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1; then
            sudo=(sudo)
        else
            echo "install-deps: not root and no sudo; cannot install ${missing[*]}" >&2
            exit 1
        fi
    fi
    ${sudo[@]+"${sudo[@]}"} apt-get update
    ${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        mariadb-server mariadb-client sysbench haproxy
    for tool in "${missing[@]}"; do
        if ! have "$tool"; then
            echo "install-deps: $tool still missing after apt-get install" >&2
            exit 1
        fi
    done
fi

if ! command -v cargo >/dev/null 2>&1; then
    echo "install-deps: cargo not found in PATH; install Rust (https://rustup.rs) and retry" >&2
    exit 1
fi
