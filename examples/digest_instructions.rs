//! Instructions per call of the SQL text functions on the relay's hot path, for callgrind: wall
//! time on a shared machine varies by tens of percent, instruction counts do not.
//!
//! `digest_instructions <function> <text> <calls>` calls the function `calls` times on
//! variants of one of the fixed texts below (sysbench's statements, as `oltp_read_only` sends
//! them: each `#` a number, different from one call to the next) and prints nothing:
//!
//! - `digest`: `sql::digest_cached` with one `DigestCache`, as a worker digests sysbench's texts:
//!   the same shape with other numbers, so after the first call the cache answers (see
//!   `src/wire/sql/digest/cache.rs`);
//! - `digest_new`: the same on a text of a shape not seen before at every call (the table name
//!   numbered), so every call digests afresh (the fast path, or the general printer) and fills
//!   the cache;
//! - `digest_uncached`: `sql::digest`, no cache (what the capture and replay call);
//! - `digest_recent`: `RecentShapes::get`, then `sql::digest_remembered` when it misses, as a
//!   session digests (see `src/wire/sql/digest/recent.rs`);
//! - `pins`, `read_only`: `sql::pins::pins` and `sql::read_only`.
//!
//! The variants are made before the calls, the same number whatever `calls` is: counted twice,
//! at N and 3N calls, the difference over 2N is the cost of one call with start-up cancelled
//! out:
//!
//! ```text
//! cargo build --release --example digest_instructions
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     target/release/examples/digest_instructions digest point 2000   # "Collected : A"
//! valgrind ... digest point 6000                                      # "Collected : B"
//! # (B - A) / 4000 instructions per call
//! ```
//!
//! `benches/digest_instructions.sh` does exactly that for every function and text.

use std::hint::black_box;

use mysql_lb::wire::sql::{
    digest, digest_cached, digest_remembered, pins::pins, read_only, DigestCache, RecentShapes,
};

/// sysbench's statements, `#` where it sends a number; and a Hibernate select.
const TEXTS: &[(&str, &str)] = &[
    ("point", "SELECT c FROM sbtest1 WHERE id=#"),
    ("range", "SELECT c FROM sbtest1 WHERE id BETWEEN # AND #"),
    ("sum", "SELECT SUM(k) FROM sbtest1 WHERE id BETWEEN # AND #"),
    (
        "order",
        "SELECT c FROM sbtest1 WHERE id BETWEEN # AND # ORDER BY c",
    ),
    (
        "distinct",
        "SELECT DISTINCT c FROM sbtest1 WHERE id BETWEEN # AND # ORDER BY c",
    ),
    ("begin", "BEGIN"),
    ("update", "UPDATE sbtest1 SET c='#-#-#-#-#' WHERE id=#"),
    (
        "hibernate",
        "select user0_.id as id1_0_, user0_.email as email2_0_, user0_.name as name3_0_ \
         from app_user user0_ where user0_.id=# and user0_.deleted=0",
    ),
];

const MAX_LEN: usize = 1024;

/// Variants made, whatever the number of calls.
const VARIANTS: usize = 4096;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(function), Some(name), Some(calls)) = (args.get(1), args.get(2), args.get(3)) else {
        eprintln!(
            "usage: digest_instructions <digest|digest_new|digest_uncached|digest_recent|pins|read_only> <text> <calls>"
        );
        std::process::exit(2);
    };
    let Some(&(_, text)) = TEXTS.iter().find(|(n, _)| n == name) else {
        eprintln!(
            "texts: {}",
            TEXTS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(" ")
        );
        std::process::exit(2);
    };
    let Ok(calls) = calls.parse::<usize>() else {
        eprintln!("calls: a number");
        std::process::exit(2);
    };
    let new_shapes = function == "digest_new";
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let variants: Vec<Vec<u8>> = (0..VARIANTS)
        .map(|i| {
            let mut t = String::new();
            for (k, part) in text.split('#').enumerate() {
                if k > 0 {
                    seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                    t.push_str(&(seed >> 40).to_string());
                }
                t.push_str(part);
            }
            if new_shapes {
                t = t.replace("sbtest1", &format!("sbtest{i}"));
                t = t.replace("app_user", &format!("app_user{i}"));
            }
            t.into_bytes()
        })
        .collect();
    let mut cache = DigestCache::default();
    let mut recent = RecentShapes::default();
    let mut sink = 0u64;
    for i in 0..calls {
        let text = variants[i % VARIANTS].as_slice();
        sink ^= match function.as_str() {
            "digest" | "digest_new" => digest_cached(&mut cache, black_box(text), MAX_LEN).0,
            "digest_uncached" => digest(black_box(text), MAX_LEN).0,
            "digest_recent" => match recent.get(black_box(text), MAX_LEN) {
                Some(d) => d.0,
                None => digest_remembered(&mut recent, &mut cache, text, MAX_LEN).0,
            },
            "pins" => pins(black_box(text)).map_or(0, |p| p as u64),
            "read_only" => u64::from(read_only(black_box(text))),
            _ => {
                eprintln!(
                    "functions: digest digest_new digest_uncached digest_recent pins read_only"
                );
                std::process::exit(2);
            }
        };
    }
    black_box(sink);
}
