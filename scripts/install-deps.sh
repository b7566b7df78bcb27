#!/usr/bin/env bash
# Installs what the test suite needs beyond Rust: real MariaDB servers and clients (the
# integration tests start their own mariadbd instances), sysbench (smoke load), HAProxy (the
# benchmark's comparison point), and the other client libraries tests/other_clients.rs drives:
# PHP (mysqli, PDO_mysql: mysqlnd), Node.js with mysql2, Perl DBD::MariaDB, Python with PyMySQL and
# mysql-connector-python; a JDK with Debian's MariaDB Connector/J for tests/java_clients.rs;
# gcc and GnuTLS's headers for the GnuTLS client tests/tls_interop.rs compiles; and chromium
# (headless) for tests/status_page.rs. The Python and Node libraries go to .test-clients/ in the checkout
# (a venv and an npm prefix; gitignored), never into the system's site-packages.
# Idempotent: does nothing when all are present.
#
#   scripts/install-deps.sh         everything above (the test suite, CI)
#   scripts/install-deps.sh demo    only what scripts/demo.sh and scripts/soak.sh run: MariaDB
#                                   server and client, sysbench, python3
# Debian/Ubuntu only (apt-get). The packaged services may start on install; the tests never
# use them.
set -euo pipefail

PART=${1:-all}
case "$PART" in
    all | demo) ;;
    *)
        echo "usage: scripts/install-deps.sh [demo]" >&2
        exit 2
        ;;
esac
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CLIENTS="$ROOT/.test-clients"
# The versions tests/clients/ was verified with.
PY_CLIENTS=(PyMySQL==1.2.4 mysql-connector-python==26.10.0)
NODE_CLIENTS=(mysql2@3.24.6)
# tests/kubernetes.rs validates deploy/kubernetes/ with it (schemas for Kubernetes 1.25-1.37).
K8S_VALIDATE=kubernetes-validate==1.37.0

have() {
    command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/usr/bin/$1" ]
}

missing=()
packages=()
# What every part needs: servers to start, a client, the load, and python3 (free ports, JSON).
tools=(mariadbd mariadb-install-db mariadb sysbench python3)
for tool in mariadbd mariadb-install-db mariadb sysbench; do
    have "$tool" || missing+=("$tool")
done
[ "${#missing[@]}" -gt 0 ] && packages+=(mariadb-server mariadb-client sysbench)
have python3 || { missing+=(python3); packages+=(python3); }
if [ "$PART" = all ]; then
    tools+=(haproxy php node npm java javac ip nft openssl chromium gcc)
    have haproxy || { missing+=(haproxy); packages+=(haproxy); }
    if ! have php || ! php -r "exit(extension_loaded('mysqli') && extension_loaded('pdo_mysql') ? 0 : 1);" 2>/dev/null; then
        missing+=(php-mysql)
        packages+=(php-cli php-mysql)
    fi
    # tests/java_clients.rs compiles its check with javac against Debian's Connector/J jar.
    JAVA_DRIVER=/usr/share/java/mariadb-java-client.jar
    if ! have java || ! have javac; then
        missing+=(javac)
        packages+=(default-jdk-headless)
    fi
    [ -f "$JAVA_DRIVER" ] || { missing+=("$JAVA_DRIVER"); packages+=(libmariadb-java); }
    perl -MDBD::MariaDB -e 'exit 0' 2>/dev/null || { missing+=(DBD::MariaDB); packages+=(libdbd-mariadb-perl); }
    have node || { missing+=(node); packages+=(nodejs); }
    have npm || { missing+=(npm); packages+=(npm); }
    # The TLS tests make their certificates with rcgen; tests/other_clients.rs and the load
    # benchmark's TLS paths make theirs with `openssl req`.
    have openssl || { missing+=(openssl); packages+=(openssl); }
    # tests/tls_interop.rs compiles tests/clients/gnutls_check.c against libgnutls (gnutls-cli
    # cannot start TLS inside the MySQL protocol).
    GNUTLS_HEADER=/usr/include/gnutls/gnutls.h
    have gcc || { missing+=(gcc); packages+=(gcc libc6-dev); }
    [ -f "$GNUTLS_HEADER" ] || { missing+=(libgnutls28-dev); packages+=(libgnutls28-dev); }
    # tests/keepalive.rs runs the proxy in a network namespace of its own (`ip netns`) and makes a
    # peer vanish by having that namespace's loopback drop every packet (`nft`).
    have ip || { missing+=(ip); packages+=(iproute2); }
    have nft || { missing+=(nft); packages+=(nftables); }
    # tests/status_page.rs loads the admin status page in headless chromium (DevTools over a pipe).
    have chromium || { missing+=(chromium); packages+=(chromium); }
    if have python3 && ! python3 -c "import venv, ensurepip" 2>/dev/null; then
        missing+=(python3-venv)
        packages+=(python3-venv)
    fi
fi

if [ "${#missing[@]}" -gt 0 ]; then
    echo "install-deps: missing ${missing[*]}; installing with apt-get" >&2
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "install-deps: apt-get not found; install ${packages[*]} yourself" >&2
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
        "${packages[@]}"
    for tool in "${tools[@]}"; do
        if ! have "$tool"; then
            echo "install-deps: $tool still missing after apt-get install" >&2
            exit 1
        fi
    done
    if [ "$PART" = all ] && ! perl -MDBD::MariaDB -e 'exit 0' 2>/dev/null; then
        echo "install-deps: DBD::MariaDB still missing after apt-get install" >&2
        exit 1
    fi
    if [ "$PART" = all ] && [ ! -f "$JAVA_DRIVER" ]; then
        echo "install-deps: $JAVA_DRIVER still missing after apt-get install" >&2
        exit 1
    fi
    if [ "$PART" = all ] && [ ! -f "$GNUTLS_HEADER" ]; then
        echo "install-deps: $GNUTLS_HEADER still missing after apt-get install" >&2
        exit 1
    fi
fi

# The client libraries of tests/other_clients.rs and the manifest validator: the suite only.
if [ "$PART" = all ]; then
    # Python client libraries in a venv of their own.
    if ! "$CLIENTS/venv/bin/python3" -c "import pymysql, mysql.connector" 2>/dev/null; then
        echo "install-deps: installing ${PY_CLIENTS[*]} into $CLIENTS/venv" >&2
        rm -rf "$CLIENTS/venv"
        python3 -m venv "$CLIENTS/venv"
        "$CLIENTS/venv/bin/python3" -m pip install --quiet --disable-pip-version-check "${PY_CLIENTS[@]}"
    fi
    # The manifest validator, in the same venv.
    if ! "$CLIENTS/venv/bin/kubernetes-validate" --version 2>/dev/null | grep -qx "${K8S_VALIDATE#*==}"; then
        echo "install-deps: installing $K8S_VALIDATE into $CLIENTS/venv" >&2
        "$CLIENTS/venv/bin/python3" -m pip install --quiet --disable-pip-version-check "$K8S_VALIDATE"
    fi
    # Node's mysql2 under an npm prefix of its own.
    if [ ! -f "$CLIENTS/node/node_modules/mysql2/package.json" ]; then
        echo "install-deps: installing ${NODE_CLIENTS[*]} into $CLIENTS/node" >&2
        mkdir -p "$CLIENTS/node"
        npm install --prefix "$CLIENTS/node" --no-audit --no-fund --silent "${NODE_CLIENTS[@]}"
    fi
fi

if ! command -v cargo >/dev/null 2>&1; then
    echo "install-deps: cargo not found in PATH; install Rust (https://rustup.rs) and retry" >&2
    exit 1
fi
