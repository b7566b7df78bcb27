#!/usr/bin/env bash
# Fuzzes mysql-lb's sans-IO protocol code with cargo-fuzz (libFuzzer), one target after another.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     default: 600 s each, all targets
#
# Targets (fuzz/fuzz_targets/): codec, greeting, handshake_response, tracker, compress,
# proxy_header, sql_digest, pooled_front, tls_records, gtid_pos, query_rules; their checks are in
# fuzz/src/checks.rs, shared with tests/properties.rs (proxy_header's in fuzz/src/proxy_in.rs,
# sql_digest's in fuzz/src/sql_digest.rs, pooled_front's in fuzz/src/pooled_front.rs,
# tls_records' in fuzz/src/tls_records.rs, gtid_pos' in fuzz/src/gtid_pos.rs,
# query_rules' in fuzz/src/query_rules.rs). Each target runs
# on one core; a crash is saved under fuzz/artifacts/TARGET/ and libFuzzer is started again
# for the time left. Seeds are read
# from fuzz/corpus/TARGET (committed, captured from a real MariaDB); what libFuzzer adds goes to
# fuzz/work/TARGET (not committed), logs to fuzz/work/logs/. Prints executions and crashes per
# target and exits 1 if any target crashed.
#
# Stable Rust is enough: RUSTC_BOOTSTRAP=1 lets cargo-fuzz pass its -Z sanitizer flags. Debug
# assertions (overflow checks) are on. No target does network I/O.
set -euo pipefail

seconds=${1:-600}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(codec greeting handshake_response tracker compress proxy_header sql_digest pooled_front
        tls_records gtid_pos query_rules)
fi
case $seconds in
'' | *[!0-9]*)
    echo "usage: $0 [SECONDS_PER_TARGET] [TARGET...]" >&2
    exit 2
    ;;
esac

cd "$(dirname "$0")/../fuzz"
export RUSTC_BOOTSTRAP=1

# libfuzzer-sys compiles libFuzzer's C++ sources.
if ! command -v c++ >/dev/null; then
    apt-get update && apt-get install -y g++
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi

# Build once: the tree may change while the targets run (others at work), and every target should
# fuzz the same code. The binaries are then run directly.
cargo fuzz build -a >/dev/null
bin="target/$(rustc -vV | sed -n 's/^host: //p')/release"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_odr_violation=0}

mkdir -p work/logs
summary=()
crashed=0
for t in "${targets[@]}"; do
    mkdir -p "work/$t" "artifacts/$t"
    before=$(find "artifacts/$t" -type f | sort)
    log="work/logs/$t.log"
    : >"$log"
    echo "== $t: ${seconds}s (corpus: $(find "corpus/$t" -type f | wc -l) seeds, $(find "work/$t" -type f | wc -l) grown)"
    started=$(date +%s)
    execs=0
    runs=0
    # libFuzzer stops at a crash (saving it under artifacts/): start it again for the time left,
    # at most 20 times, so one crash does not cut the run short.
    while :; do
        left=$((seconds - ($(date +%s) - started)))
        if [ "$left" -le 0 ] || [ "$runs" -ge 20 ]; then
            break
        fi
        runs=$((runs + 1))
        "$bin/$t" -artifact_prefix="artifacts/$t/" \
            -max_total_time="$left" -max_len=16384 -timeout=30 -report_slow_units=60 -rss_limit_mb=2048 \
            -print_final_stats=1 "work/$t" "corpus/$t" >"$log.run" 2>&1 && ok=1 || ok=0
        cat "$log.run" >>"$log"
        n=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+).*/\1/p' "$log.run" | tail -n 1)
        execs=$((execs + ${n:-0}))
        if [ "$ok" = 1 ]; then
            break
        fi
        if ! grep -q 'Test unit written to' "$log.run"; then
            echo "   libFuzzer failed without a crash; see fuzz/$log" >&2
            crashed=1
            break
        fi
    done
    rm -f "$log.run"
    elapsed=$(($(date +%s) - started))
    cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -n 1 | cut -d' ' -f2)
    after=$(find "artifacts/$t" -type f ! -name 'slow-unit-*' | sort)
    new=$(comm -13 <(echo "$before") <(echo "$after") | sed '/^$/d')
    crashes=$(sed '/^$/d' <<<"$new" | wc -l)
    if [ "$crashes" -gt 0 ]; then
        crashed=1
        echo "$new" | sed 's/^/   new artifact: fuzz\//'
    fi
    line=$(printf '%-19s executions: %-11s crashes: %-3s time: %5ss  coverage: %-5s corpus: %s files' \
        "$t" "$execs" "$crashes" "$elapsed" "${cov:-?}" "$(find "work/$t" -type f | wc -l)")
    echo "$line"
    summary+=("$line")
done

echo
echo "== summary (logs in fuzz/work/logs/)"
printf '%s\n' "${summary[@]}"
exit "$crashed"
