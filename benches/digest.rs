//! What the query digest costs per statement on the relay's hot path: `sql::digest` (one pass,
//! no allocation) on sysbench's point select and a few longer shapes, beside `sql::normalize`
//! (which allocates, and runs only for a digest seen the first time). Inputs are built outside
//! the timed loop.
//!
//! `cargo bench --bench digest`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};

use mysql_lb::wire::sql::{digest, normalize};

const MAX_LEN: usize = 1024;

fn statements() -> [(&'static str, Vec<u8>); 4] {
    [
        (
            "point_select_60b",
            b"SELECT c FROM sbtest1 WHERE id=4242 /* point select query */".to_vec(),
        ),
        (
            "hibernate_select_160b",
            b"select user0_.id as id1_0_, user0_.email as email2_0_, user0_.name as name3_0_ \
              from app_user user0_ where user0_.id=? and user0_.deleted=0"
                .to_vec(),
        ),
        (
            "insert_4_rows_250b",
            b"INSERT INTO sbtest1 (id, k, c, pad) VALUES (1, 4993, '83868641912-28773972837', \
              '67847967377'), (2, 5020, '38014276128-25250245652', '23183251411'), (3, 5044, \
              '33973744704-80540844748', '38615512647'), (4, 4997, '37002370280', '63947013338')"
                .to_vec(),
        ),
        (
            "in_list_100_values",
            format!(
                "SELECT * FROM t WHERE id IN ({})",
                (1..=100)
                    .map(|i| i.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
            .into_bytes(),
        ),
    ]
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("digest");
    for (name, text) in statements() {
        assert_eq!(
            digest(&text, MAX_LEN),
            digest(normalize(&text, MAX_LEN).as_bytes(), MAX_LEN)
        );
        group.bench_function(name, |b| b.iter(|| digest(black_box(&text), MAX_LEN)));
    }
    group.finish();
    let mut group = c.benchmark_group("normalize");
    for (name, text) in statements() {
        group.bench_function(name, |b| b.iter(|| normalize(black_box(&text), MAX_LEN)));
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
