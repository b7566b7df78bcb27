//! Instructions per call of the SQL text functions on the relay's hot path, for callgrind: wall
//! time on a shared machine varies by tens of percent, instruction counts do not.
//!
//! `digest_instructions <digest|pins|read_only> <text> <calls>` calls the function `calls`
//! times on one of the fixed texts below (sysbench's statements, as `oltp_read_only` sends
//! them) and prints nothing. Counted twice, at N and 3N calls, the difference over 2N is the
//! cost of one call with start-up cancelled out:
//!
//! ```text
//! cargo build --release --example digest_instructions
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     target/release/examples/digest_instructions digest point 1000   # "Collected : A"
//! valgrind ... digest point 3000                                      # "Collected : B"
//! # (B - A) / 2000 instructions per call
//! ```
//!
//! `benches/digest_instructions.sh` does exactly that for every function and text.

use std::hint::black_box;

use mysql_lb::wire::sql::{digest, pins::pins, read_only};

/// sysbench's statements with the values it would send (`id` and ranges vary per query).
const TEXTS: &[(&str, &str)] = &[
    ("point", "SELECT c FROM sbtest1 WHERE id=50321"),
    (
        "range",
        "SELECT c FROM sbtest1 WHERE id BETWEEN 50321 AND 50420",
    ),
    (
        "sum",
        "SELECT SUM(k) FROM sbtest1 WHERE id BETWEEN 50321 AND 50420",
    ),
    (
        "order",
        "SELECT c FROM sbtest1 WHERE id BETWEEN 50321 AND 50420 ORDER BY c",
    ),
    (
        "distinct",
        "SELECT DISTINCT c FROM sbtest1 WHERE id BETWEEN 50321 AND 50420 ORDER BY c",
    ),
    ("begin", "BEGIN"),
    (
        "update",
        "UPDATE sbtest1 SET c='83868641912-28773972837-60736120486-75162659906-27563526494' WHERE id=50321",
    ),
    (
        "hibernate",
        "select user0_.id as id1_0_, user0_.email as email2_0_, user0_.name as name3_0_ \
         from app_user user0_ where user0_.id=? and user0_.deleted=0",
    ),
];

const MAX_LEN: usize = 1024;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(function), Some(name), Some(calls)) = (args.get(1), args.get(2), args.get(3)) else {
        eprintln!("usage: digest_instructions <digest|pins|read_only> <text> <calls>");
        std::process::exit(2);
    };
    let Some(&(_, text)) = TEXTS.iter().find(|(n, _)| n == name) else {
        eprintln!(
            "texts: {}",
            TEXTS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(" ")
        );
        std::process::exit(2);
    };
    let Ok(calls) = calls.parse::<u64>() else {
        eprintln!("calls: a number");
        std::process::exit(2);
    };
    let text = text.as_bytes();
    let mut sink = 0u64;
    for _ in 0..calls {
        sink ^= match function.as_str() {
            "digest" => digest(black_box(text), MAX_LEN).0,
            "pins" => pins(black_box(text)).map_or(0, |p| p as u64),
            "read_only" => u64::from(read_only(black_box(text))),
            _ => {
                eprintln!("functions: digest pins read_only");
                std::process::exit(2);
            }
        };
    }
    black_box(sink);
}
