#!/usr/bin/env bash
# The project's test command: system dependencies, formatting, lints, no dependency cycle
# between src/'s modules, then every test target (unit tests, integration tests against real
# MariaDB servers, benches built as tests).
# Extra arguments go to `cargo test`, e.g. `scripts/test.sh -- --nocapture`.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

step() {
    local name=$1
    shift
    echo "==> $name: $*" >&2
    local start=$SECONDS
    "$@"
    echo "==> $name done in $((SECONDS - start)) s" >&2
}

total=$SECONDS
step deps scripts/install-deps.sh
step fmt cargo fmt --all -- --check
step clippy cargo clippy --all-targets -- -D warnings
step cycles python3 scripts/module_cycles.py
step cycles-in-wings python3 scripts/module_cycles.py --depth 2
step wings python3 scripts/module_cycles.py --wings
step test cargo test --all-targets "$@"
echo "==> all passed in $((SECONDS - total)) s" >&2
