#!/bin/sh
# Instructions per call of sql::digest (as sysbench's texts come, and on a new shape every call),
# sql::pins::pins and sql::read_only on sysbench's statements, counted by callgrind (see
# examples/digest_instructions.rs). From the repository's root, after
# `cargo build --release --example digest_instructions`.
set -eu
bin=${BIN:-target/release/examples/digest_instructions}
n=${N:-2000}
count() {
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$@" 2>&1 \
        | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
for f in ${FUNCTIONS:-digest digest_new digest_uncached pins read_only}; do
    for t in ${TEXTS:-point range sum order distinct begin update hibernate}; do
        a=$(count "$f" "$t" "$n")
        b=$(count "$f" "$t" $((3 * n)))
        echo "$f $t $(((b - a) / (2 * n)))"
    done
done
