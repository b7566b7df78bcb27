//! The corpus of statements with their normalized text, groups that must share a digest,
//! the tokenizer and classifier on fixtures, and property tests over arbitrary bytes.

use proptest::prelude::*;

use super::*;

const MAX: usize = 4096;

fn norm(q: &str) -> String {
    normalize(q.as_bytes(), MAX)
}

fn dig(q: &str) -> Digest {
    digest(q.as_bytes(), MAX)
}

/// (statement, normalized text): MySQL and MariaDB dialects, ORMs, sysbench, every literal
/// form, comments, hints, lists, and broken text.
pub(super) const CORPUS: &[(&str, &str)] = &[
    // sysbench
    ("SELECT c FROM sbtest1 WHERE id=?", "SELECT c FROM sbtest1 WHERE id = ?"),
    ("SELECT c FROM sbtest1 WHERE id=4242", "SELECT c FROM sbtest1 WHERE id = ?"),
    ("SELECT c FROM sbtest1 WHERE id BETWEEN ? AND ?", "SELECT c FROM sbtest1 WHERE id BETWEEN ? AND ?"),
    ("SELECT SUM(k) FROM sbtest1 WHERE id BETWEEN 1 AND 100", "SELECT SUM(k) FROM sbtest1 WHERE id BETWEEN ? AND ?"),
    ("SELECT c FROM sbtest1 WHERE id BETWEEN ? AND ? ORDER BY c", "SELECT c FROM sbtest1 WHERE id BETWEEN ? AND ? ORDER BY c"),
    ("SELECT DISTINCT c FROM sbtest1 WHERE id BETWEEN ? AND ? ORDER BY c", "SELECT DISTINCT c FROM sbtest1 WHERE id BETWEEN ? AND ? ORDER BY c"),
    ("UPDATE sbtest1 SET k=k+1 WHERE id=?", "UPDATE sbtest1 SET k = k + ? WHERE id = ?"),
    ("UPDATE sbtest1 SET c=? WHERE id=?", "UPDATE sbtest1 SET c = ? WHERE id = ?"),
    ("DELETE FROM sbtest1 WHERE id=?", "DELETE FROM sbtest1 WHERE id = ?"),
    ("INSERT INTO sbtest1 (id, k, c, pad) VALUES (?, ?, ?, ?)", "INSERT INTO sbtest1(id, k, c, pad) VALUES (...)"),
    ("INSERT INTO sbtest1 (id, k, c, pad) VALUES (5, 4993, '8-1-2', '3-4')", "INSERT INTO sbtest1(id, k, c, pad) VALUES (...)"),
    ("BEGIN", "BEGIN"),
    ("COMMIT", "COMMIT"),
    ("begin;", "BEGIN"),
    // ORMs
    ("select user0_.id as id1_0_, user0_.name as name2_0_ from user user0_ where user0_.id=?",
     "SELECT user0_.id AS id1_0_, user0_.name AS name2_0_ FROM user user0_ WHERE user0_.id = ?"),
    ("SELECT `app_user`.`id`, `app_user`.`username` FROM `app_user` WHERE `app_user`.`id` = 5 LIMIT 21",
     "SELECT app_user.id, app_user.username FROM app_user WHERE app_user.id = ? LIMIT ?"),
    ("SELECT \"app_user\".\"id\" FROM \"app_user\" WHERE \"app_user\".\"id\" = 5",
     "SELECT ?.? FROM ? WHERE ?.? = ?"),
    ("SELECT `users`.* FROM `users` WHERE `users`.`email` = 'a@b.c' LIMIT 1",
     "SELECT users.* FROM users WHERE users.email = ? LIMIT ?"),
    ("SELECT * FROM t /*traceparent='00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',route='/x'*/",
     "SELECT * FROM t"),
    ("SELECT * FROM `t` /*controller='users',action='show'*/", "SELECT * FROM t"),
    // literals
    ("SELECT 'it''s', \"a\\\"b\", 'a\\\\', ''", "SELECT ?, ?, ?, ?"),
    ("SELECT 12, 1.5, .5, 1., 1e10, 2.5E-3, 1e+3", "SELECT ?, ?, ?, ?, ?, ?, ?"),
    ("SELECT -1, +2.5e-3, - - 4, (-3)", "SELECT ?, ?, ?, (...)"),
    ("SELECT a-1, a - -1, -a, 1+-2, a*-1", "SELECT a - ?, a - ?, - a, ? + ?, a * ?"),
    ("SELECT 1--1", "SELECT ? - ?"),
    ("SELECT 0x1F, X'1F', x'ab', b'01', B'1', 0b01", "SELECT ?, ?, ?, ?, ?, ?"),
    ("SELECT N'x', n'y', _utf8mb4'x', _latin1 \"y\", _binary 0x41, _UTF8MB4 X'41'", "SELECT ?, ?, ?, ?, ?, ?"),
    ("SELECT 0X1F, 0xZZ, 1abc, 12.5abc", "SELECT 0X1F, 0xZZ, 1abc, ? abc"),
    ("SELECT NULL, a IS NULL, b IS NOT NULL, TRUE, FALSE", "SELECT ?, a IS NULL, b IS NOT NULL, TRUE, FALSE"),
    ("SELECT * FROM t WHERE a <=> NULL", "SELECT * FROM t WHERE a <=> ?"),
    ("SELECT TRUE - 1, CURRENT_TIMESTAMP - 1, CASE WHEN a THEN 1 END - 1",
     "SELECT TRUE - ?, CURRENT_TIMESTAMP - ?, CASE WHEN a THEN ? END - ?"),
    ("SELECT DATE '2020-01-01', INTERVAL 1 DAY", "SELECT DATE ?, INTERVAL ? DAY"),
    ("SELECT * FROM t WHERE b = 'unterminated", "SELECT * FROM t WHERE b = ?"),
    ("SELECT * FROM t WHERE b = 'a\\'", "SELECT * FROM t WHERE b = ?"),
    ("SELECT * FROM `unterminated", "SELECT * FROM unterminated"),
    ("SELECT * FROM `a``b` JOIN `c d` JOIN `` JOIN `123` JOIN `1e5` JOIN `x1`",
     "SELECT * FROM `a``b` JOIN `c d` JOIN `` JOIN `123` JOIN `1e5` JOIN x1"),
    ("SELECT `select`, `status`, status, `Status` FROM t", "SELECT `select`, `status`, STATUS, `Status` FROM t"),
    ("SELECT `_latin1`, `null`, `N` FROM t", "SELECT _latin1, `null`, N FROM t"),
    // comments
    ("SELECT * FROM t /* /* */ WHERE id = 1", "SELECT * FROM t WHERE id = ?"),
    ("SELECT * FROM t # trailing", "SELECT * FROM t"),
    ("SELECT * FROM t -- trailing\nWHERE id = 1", "SELECT * FROM t WHERE id = ?"),
    ("SELECT * FROM t --\tx", "SELECT * FROM t"),
    ("SELECT * FROM t --", "SELECT * FROM t"),
    ("SELECT * FROM t WHERE a = 1 /* unterminated", "SELECT * FROM t WHERE a = ?"),
    ("SELECT /**/ 1 /*/ still a comment */", "SELECT ?"),
    ("/* leading */ SELECT 1", "SELECT ?"),
    // hints and executable comments
    ("SELECT /*+ BKA(t1)   NO_ICP(t2) */ * FROM t1", "SELECT /*+ BKA(t1) NO_ICP(t2) */ * FROM t1"),
    ("SELECT /*+BKA(t1)*/ * FROM t1", "SELECT /*+ BKA(t1) */ * FROM t1"),
    ("SELECT /*!40001 SQL_NO_CACHE */ * FROM t", "SELECT /*!40001 SQL_NO_CACHE */ * FROM t"),
    ("/*!40101 SET NAMES utf8 */;", "/*!40101 SET NAMES utf8 */"),
    ("CREATE TABLE t (id INT) /*M!100100 ENGINE=InnoDB*/", "CREATE TABLE t(id INT) /*M!100100 ENGINE=InnoDB */"),
    ("SELECT /*! STRAIGHT_JOIN\n\t*/ 1", "SELECT /*! STRAIGHT_JOIN */ ?"),
    ("SELECT /*+ unterminated hint", "SELECT /*+ unterminated hint */"),
    // lists
    ("SELECT * FROM t WHERE id IN (1)", "SELECT * FROM t WHERE id IN (...)"),
    ("SELECT * FROM t WHERE id IN (1, 2, 3, 4, 5)", "SELECT * FROM t WHERE id IN (...)"),
    ("SELECT * FROM t WHERE id IN (?,?,?)", "SELECT * FROM t WHERE id IN (...)"),
    ("SELECT * FROM t WHERE id IN (-1, +2, NULL, 'x')", "SELECT * FROM t WHERE id IN (...)"),
    ("SELECT * FROM t WHERE id IN (1, a)", "SELECT * FROM t WHERE id IN (?, a)"),
    ("SELECT * FROM t WHERE (a, b) IN ((1, 'a'), (2, 'b'))", "SELECT * FROM t WHERE (a, b) IN ((...))"),
    ("INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')", "INSERT INTO t VALUES (...)"),
    ("INSERT INTO t VALUES (1, NOW()), (2, NOW())", "INSERT INTO t VALUES (?, NOW()), (?, NOW())"),
    ("INSERT INTO t VALUES (1), (a)", "INSERT INTO t VALUES (...), (a)"),
    ("INSERT INTO t(a) VALUES (1) ON DUPLICATE KEY UPDATE a = VALUES(a)",
     "INSERT INTO t(a) VALUES (...) ON DUPLICATE KEY UPDATE a = VALUES (a)"),
    ("SELECT * FROM t LIMIT 10, 20", "SELECT * FROM t LIMIT ?, ?"),
    // functions, names, variables
    ("SELECT COUNT(*), now(), sleep(1), concat('a', b) FROM t", "SELECT COUNT(*), NOW(), sleep(...), concat(?, b) FROM t"),
    ("SELECT GET_LOCK('lock1', 10), RELEASE_LOCK('lock1')", "SELECT GET_LOCK(...), RELEASE_LOCK(...)"),
    ("SELECT t.select, t.`order`, `t`.`x`, t . y FROM t", "SELECT t.select, t.order, t.x, t.y FROM t"),
    ("SELECT user.id, `user`.id, status.x FROM user", "SELECT user.id, user.id, status.x FROM user"),
    ("SELECT db.t.c, t.*, t.1col FROM db.t", "SELECT db.t.c, t.*, t.1col FROM db.t"),
    ("SELECT @x, @@session.autocommit, @@AUTOCOMMIT, @'q', @`Q r`", "SELECT @x, @@session.autocommit, @@autocommit, @q, @`q r`"),
    ("SET @a := 1, @B = 'x'", "SET @a := ?, @b = ?"),
    ("SELECT a->'$.x', a->>'$.y' FROM t", "SELECT a -> ?, a ->> ? FROM t"),
    ("SELECT * FROM t WHERE a != 2 AND b <> 3 AND c >= 4 OR d || e && f",
     "SELECT * FROM t WHERE a != ? AND b <> ? AND c >= ? OR d || e && f"),
    ("SELECT {d '2020-01-01'}", "SELECT { d ? }"),
    // session state and DDL
    ("USE `my db`", "USE `my db`"),
    ("use test", "USE test"),
    ("SET autocommit=0", "SET autocommit = ?"),
    ("SET NAMES utf8mb4 COLLATE utf8mb4_general_ci", "SET NAMES utf8mb4 COLLATE utf8mb4_general_ci"),
    ("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED", "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"),
    ("START TRANSACTION READ ONLY", "START TRANSACTION READ ONLY"),
    ("SELECT * FROM t WHERE id = 1 FOR UPDATE", "SELECT * FROM t WHERE id = ? FOR UPDATE"),
    ("LOCK TABLES t WRITE, u READ", "LOCK TABLES t WRITE, u READ"),
    ("CREATE TEMPORARY TABLE tmp (a INT NOT NULL DEFAULT 0, b VARCHAR(255) DEFAULT NULL)",
     "CREATE TEMPORARY TABLE tmp(a INT NOT NULL DEFAULT ?, b VARCHAR(...) DEFAULT ?)"),
    ("PREPARE s FROM 'SELECT ?'", "PREPARE s FROM ?"),
    ("CREATE USER 'u'@'%' IDENTIFIED BY 'pw'", "CREATE USER ?@? IDENTIFIED BY ?"),
    ("GRANT SELECT ON db.* TO 'u'@localhost", "GRANT SELECT ON db.* TO ?@localhost"),
    ("WITH cte AS (SELECT 1 AS a) SELECT a FROM cte", "WITH cte AS (SELECT ? AS a) SELECT a FROM cte"),
    // semicolons, whitespace, case
    ("SELECT 1; SELECT 2;", "SELECT ?; SELECT ?"),
    ("SELECT 1 ; ; -- done", "SELECT ?"),
    ("  SELECT   *\nFROM    t\n\tWHERE id   =   1  ", "SELECT * FROM t WHERE id = ?"),
    ("sElEcT * fRoM T wHeRe Id = 1", "SELECT * FROM T WHERE Id = ?"),
    ("", ""),
    ("-- only a comment", ""),
    ("SELECT \x01 1", "SELECT \x01 ?"),
];

#[test]
fn corpus_normalizes_as_written() {
    assert!(CORPUS.len() >= 80, "{} statements", CORPUS.len());
    let mut wrong = Vec::new();
    for &(q, want) in CORPUS {
        let got = norm(q);
        if got != want {
            wrong.push(format!("{q:?}\n   got  {got:?}\n   want {want:?}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn corpus_is_idempotent_and_digests_its_normal_form() {
    for &(q, want) in CORPUS {
        assert_eq!(norm(want), want, "normalizing {want:?} again");
        assert_eq!(dig(q), dig(want), "{q:?}");
    }
}

/// Each group shares one digest; different groups do not.
const GROUPS: &[&[&str]] = &[
    &[
        "SELECT * FROM t WHERE id = 1",
        "select * from t where id=2",
        "SELECT * FROM `t` WHERE `id` = -3",
        "SELECT *\n  FROM t -- comment\n  WHERE id = 'x'",
        "SELECT * FROM t /*traceparent='00-aa-bb-01'*/ WHERE id = 0x1F;",
        "SELECT * FROM t WHERE id = ?",
        "# c\nSELECT * FROM t WHERE id = NULL",
    ],
    &[
        "SELECT * FROM t WHERE id IN (1)",
        "SELECT * FROM t WHERE id IN (1, 2)",
        "SELECT * FROM t WHERE id IN (1,2,3,4,5,6,7,8,9,10)",
        "SELECT * FROM t WHERE id IN (?, ?, ?)",
    ],
    &[
        "INSERT INTO t (a, b) VALUES (1, 'x')",
        "INSERT INTO t (a, b) VALUES (1, 'x'), (2, 'y')",
        "insert into `t` (`a`, `b`) values (?, ?), (?, ?), (?, ?)",
    ],
    &[
        "SELECT * FROM t WHERE a - 1 = 2",
        "SELECT * FROM t WHERE a-1=2",
    ],
    &["SELECT * FROM t WHERE a = -1 - 2"],
    &["SELECT * FROM t WHERE a IS NULL"],
    &[
        "SELECT * FROM t WHERE id = 1 LIMIT 1",
        "SELECT * FROM t WHERE id = 1 LIMIT 100",
    ],
    &["SELECT * FROM t WHERE id = 1 LIMIT 1, 2"],
    &["SELECT * FROM T WHERE id = 1"],
    &[
        "SELECT /*+ NO_ICP(t) */ * FROM t WHERE id = 1",
        "SELECT /*+   NO_ICP(t)\n*/ * FROM t WHERE id = 2",
    ],
];

#[test]
fn groups_share_a_digest_and_differ_from_each_other() {
    let mut seen: Vec<(Digest, usize)> = Vec::new();
    for (g, group) in GROUPS.iter().enumerate() {
        let d = dig(group[0]);
        for q in *group {
            assert_eq!(
                dig(q),
                d,
                "{q:?} vs {:?}: {:?} / {:?}",
                group[0],
                norm(q),
                norm(group[0])
            );
        }
        if let Some((_, other)) = seen.iter().find(|(e, _)| *e == d) {
            panic!("group {g} shares a digest with group {other}");
        }
        seen.push((d, g));
    }
}

#[test]
fn digest_displays_as_sixteen_hex_digits() {
    assert_eq!(Digest(0xab).to_string(), "00000000000000ab");
    assert_eq!(dig("SELECT 1").to_string().len(), 16);
}

/// Distinct normal forms that differ in one name or one byte get distinct digests (no
/// collisions among 200 000 near neighbours; the hash mixes every byte and the length).
#[test]
fn near_neighbours_do_not_collide() {
    let mut seen = std::collections::HashMap::new();
    for i in 0..100_000u32 {
        for text in [
            format!("SELECT c{i} FROM t").into_bytes(),
            i.to_le_bytes().to_vec(),
        ] {
            let normal = normalize(&text, MAX);
            if let Some(other) = seen.insert(digest(&text, MAX), normal.clone()) {
                assert_eq!(other, normal, "two normal forms share a digest");
            }
        }
    }
    assert!(seen.len() > 100_000);
    assert_ne!(digest(b"a\0", MAX), digest(b"a", MAX));
}

#[test]
fn only_the_first_max_len_bytes_count() {
    let q = "SELECT * FROM t WHERE a = 'long string' AND b = 2";
    assert_eq!(normalize(q.as_bytes(), 29), "SELECT * FROM t WHERE a = ?");
    assert_eq!(
        digest(q.as_bytes(), 29),
        dig("SELECT * FROM t WHERE a = 'lo")
    );
    assert_eq!(normalize(q.as_bytes(), 0), "");
    assert_ne!(digest(q.as_bytes(), 29), dig(q));
}

#[test]
fn invalid_utf8_becomes_replacement_characters() {
    let q = b"SELECT caf\xe9, `t\xff\xfe` FROM t WHERE a = '\xff'";
    let n = normalize(q, MAX);
    assert_eq!(
        n,
        "SELECT caf\u{fffd}, t\u{fffd}\u{fffd} FROM t WHERE a = ?"
    );
    assert_eq!(digest(q, MAX), digest(n.as_bytes(), MAX));
}

fn kinds(q: &str) -> Vec<(TokenKind, &str)> {
    tokens(q.as_bytes())
        .map(|t| (t.kind, std::str::from_utf8(t.text).unwrap_or("<bytes>")))
        .collect()
}

#[test]
fn tokens_keep_their_raw_text_and_kind() {
    use TokenKind::*;
    assert_eq!(
        kinds("SELECT /*+ H */ `a`, b.c, 'x''y', -1.5e3, 0x1F, X'01', NULL, ? FROM t -- c"),
        vec![
            (Keyword, "SELECT"),
            (Hint, "/*+ H */"),
            (QuotedIdentifier, "`a`"),
            (Operator, ","),
            (Identifier, "b"),
            (Operator, "."),
            (Identifier, "c"),
            (Operator, ","),
            (String, "'x''y'"),
            (Operator, ","),
            (Operator, "-"),
            (Number, "1.5e3"),
            (Operator, ","),
            (HexOrBitLiteral, "0x1F"),
            (Operator, ","),
            (HexOrBitLiteral, "X'01'"),
            (Operator, ","),
            (Null, "NULL"),
            (Operator, ","),
            (Placeholder, "?"),
            (Keyword, "FROM"),
            (Identifier, "t"),
        ]
    );
    assert_eq!(
        kinds("SET @@session.sql_mode = @x, @'y' /*!50100 z */ ; 'u'@'h' <=> _utf8mb4 'x'"),
        vec![
            (Keyword, "SET"),
            (Variable, "@@session.sql_mode"),
            (Operator, "="),
            (Variable, "@x"),
            (Operator, ","),
            (Variable, "@'y'"),
            (ExecutableComment, "/*!50100 z */"),
            (Operator, ";"),
            (String, "'u'"),
            (Operator, "@"),
            (String, "'h'"),
            (Operator, "<=>"),
            (String, "_utf8mb4 'x'"),
        ]
    );
    assert_eq!(kinds("a\x01"), vec![(Identifier, "a"), (Other, "\x01")]);
    let t = tokens(b"Begin").next();
    assert!(t.is_some_and(|t| t.is_keyword("BEGIN") && t.is_word("BEGIN")));
}

#[test]
fn classify_reads_the_first_keywords() {
    use std::borrow::Cow;
    let cases: &[(&str, Statement<'_>)] = &[
        ("SELECT 1", Statement::Select),
        ("  /* c */ (SELECT 1) UNION (SELECT 2)", Statement::Select),
        ("/*+ hint */ select 1", Statement::Select),
        ("VALUES (1), (2)", Statement::Select),
        ("insert into t values (1)", Statement::Insert),
        ("UPDATE t SET a = 1", Statement::Update),
        ("DELETE FROM t", Statement::Delete),
        ("REPLACE INTO t VALUES (1)", Statement::Replace),
        ("LOAD DATA LOCAL INFILE 'x' INTO TABLE t", Statement::Load),
        ("USE db", Statement::Use(Cow::Borrowed(b"db"))),
        (
            "use `my``db`;",
            Statement::Use(Cow::Owned(b"my`db".to_vec())),
        ),
        ("BEGIN", Statement::Begin),
        ("begin work", Statement::Begin),
        ("BEGIN NOT ATOMIC SELECT 1; END", Statement::Other),
        (
            "START TRANSACTION WITH CONSISTENT SNAPSHOT",
            Statement::Begin,
        ),
        ("START SLAVE", Statement::Other),
        ("COMMIT WORK", Statement::Commit),
        ("ROLLBACK", Statement::Rollback),
        (
            "ROLLBACK WORK TO SAVEPOINT s",
            Statement::RollbackToSavepoint,
        ),
        ("rollback to s", Statement::RollbackToSavepoint),
        ("SAVEPOINT s", Statement::Savepoint),
        ("RELEASE SAVEPOINT s", Statement::ReleaseSavepoint),
        ("SET autocommit = 0", Statement::Set),
        ("/*!40101 SET NAMES utf8 */", Statement::Set),
        ("/*M!100100 SET x = 1 */", Statement::Set),
        ("LOCK TABLES t WRITE", Statement::LockTables),
        ("UNLOCK TABLES", Statement::UnlockTables),
        ("PREPARE s FROM 'SELECT 1'", Statement::Prepare),
        ("EXECUTE s USING @a", Statement::Execute),
        ("DEALLOCATE PREPARE s", Statement::Deallocate),
        ("DROP PREPARE s", Statement::Deallocate),
        ("CALL p()", Statement::Call),
        ("DO SLEEP(1)", Statement::Do),
        ("SHOW TABLES", Statement::Show),
        ("EXPLAIN SELECT 1", Statement::Explain),
        ("DESC t", Statement::Explain),
        ("EXPLAIN ANALYZE UPDATE t SET a = 1", Statement::Update),
        ("ANALYZE DELETE FROM t", Statement::Delete),
        ("ANALYZE TABLE t", Statement::Other),
        ("CREATE TEMPORARY TABLE t (a INT)", Statement::Create),
        ("ALTER TABLE t ADD c INT", Statement::Alter),
        ("DROP TABLE t", Statement::Drop),
        ("RENAME TABLE a TO b", Statement::Rename),
        ("TRUNCATE t", Statement::Truncate),
        ("GRANT ALL ON *.* TO u", Statement::Grant),
        ("REVOKE ALL ON *.* FROM u", Statement::Revoke),
        ("WITH c AS (SELECT 1) SELECT * FROM c", Statement::Select),
        (
            "WITH c AS (SELECT 1) UPDATE t, c SET t.a = 1",
            Statement::Update,
        ),
        (
            "WITH RECURSIVE c (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) DELETE FROM t",
            Statement::Delete,
        ),
        ("FLUSH TABLES", Statement::Other),
        ("", Statement::Other),
        ("'just a string'", Statement::Other),
    ];
    for (q, want) in cases {
        assert_eq!(&classify(q.as_bytes()), want, "{q:?}");
    }
    assert!(classify(b"INSERT INTO t VALUES (1)").is_write());
    assert!(!classify(b"INSERT INTO t VALUES (1)").is_read_only());
    assert!(classify(b"SELECT 1").is_read_only());
    assert!(!classify(b"SELECT 1").is_write());
    assert!(!classify(b"CALL p()").is_read_only() && !classify(b"CALL p()").is_write());
    assert!(!classify(b"SET GLOBAL x = 1").is_read_only());
}

#[test]
fn keyword_table_is_sorted_upper_case_and_unique() {
    let kw = super::keywords::KEYWORDS;
    for pair in kw.windows(2) {
        assert!(pair[0].0.as_bytes() < pair[1].0.as_bytes(), "{:?}", pair);
    }
    for (k, _) in kw {
        assert_eq!(k.to_ascii_uppercase(), *k);
        assert_eq!(
            super::keywords::lookup(k.to_ascii_lowercase().as_bytes()).map(|e| e.0),
            Some(*k)
        );
    }
}

#[test]
fn keyword_index_agrees_with_a_binary_search() {
    use super::keywords::{lookup, lookup_reference, KEYWORDS};
    let mut words: Vec<Vec<u8>> = Vec::new();
    for (k, _) in KEYWORDS {
        let k = k.as_bytes();
        words.push(k.to_vec());
        words.push(k.to_ascii_lowercase());
        // Mixed case, one byte more or less, a byte changed at each end, a `_` raised to DEL,
        // a letter's case bit on a digit, a byte >= 0x80.
        words.push(
            k.iter()
                .enumerate()
                .map(|(i, b)| {
                    if i % 2 == 0 {
                        b.to_ascii_lowercase()
                    } else {
                        *b
                    }
                })
                .collect(),
        );
        words.push([k, b"S"].concat());
        words.push(k[..k.len() - 1].to_vec());
        words.push([b"X", &k[1..]].concat());
        words.push([&k[..k.len() - 1], b"Z"].concat());
        words.push(
            k.iter()
                .map(|&b| if b == b'_' { 0x7f } else { b })
                .collect(),
        );
        words.push(
            k.iter()
                .map(|&b| if b.is_ascii_digit() { b - 0x20 } else { b })
                .collect(),
        );
        words.push([k, &[0xc3][..]].concat());
        words.push(k.iter().map(|&b| b | 0x80).collect());
    }
    for w in [
        "",
        "a",
        "id",
        "c",
        "sbtest1",
        "user0_",
        "x$",
        "CURRENT_TIMESTAMPS",
        "é",
    ] {
        words.push(w.as_bytes().to_vec());
    }
    for w in &words {
        assert_eq!(
            lookup(w),
            lookup_reference(w),
            "{:?}",
            String::from_utf8_lossy(w)
        );
    }
}

/// Inputs a quadratic look-ahead would take seconds (or hours) on: each must finish in a
/// fraction of the time.
#[test]
fn work_is_linear_on_pathological_inputs() {
    let n = 1 << 16;
    let inputs: Vec<Vec<u8>> = vec![
        b"(".repeat(n),
        b"- ".repeat(n),
        b"; ".repeat(n),
        b"(1,".repeat(n / 3),
        b"(1),".repeat(n / 4),
        b"- - x ".repeat(n / 6),
        b"/*".repeat(n / 2),
        b"'".repeat(n),
        b"`a".repeat(n / 2),
        b"t.".repeat(n / 2),
    ];
    for input in &inputs {
        let started = std::time::Instant::now();
        let d = digest(input, input.len());
        let n = normalize(input, input.len());
        let took = started.elapsed();
        assert!(
            took < std::time::Duration::from_secs(2),
            "{:?}...: {took:?}",
            String::from_utf8_lossy(&input[..8])
        );
        assert_eq!(d, digest(n.as_bytes(), usize::MAX));
    }
}

/// Inputs the property tests once found printed in a form that read back differently (a
/// variable glued to `.`, a digit after a bare `.`, a quoted variable name starting with `.`,
/// a quoted keyword qualifying across whitespace).
#[test]
fn found_by_proptest_stay_idempotent() {
    for q in [
        "@x-- c\n.-",
        ".-- c\n10x1F",
        ".\t0A",
        "@`.1status",
        "`status`\t.status",
    ] {
        let once = norm(q);
        assert_eq!(norm(&once), once, "{q:?}");
    }
}

/// Pieces of SQL that meet at the interesting edges: quotes, qualifiers, signs, lists,
/// comments, `@`, keywords next to `.`.
const VOCABULARY: &[&str] = &[
    "SELECT", "select", "t", "`t`", "`a b`", "``", ".", "(", ")", ",", ";", "-", "+", "*", "=",
    "<", ">", "!", "1", "12", ".5", "1e", "e5", "0x1F", "0x", "X", "'a'", "\"b\"", "'", "\"", "`",
    "\\", "NULL", "IS", "NOT", "@", "@x", "@@y", "?", "/*+ h */", "/*!1 x*/", "/*M!", "/* c */",
    "/*", "*/", "--", "-- c\n", "#c\n", "#", " ", " ", " ", "\n", "status", "user", "_latin1", "N",
    "b", "IN", "VALUES", "TRUE", "END", "COUNT", "|", "\u{e9}", "\x01", "{", "/", "$", "_", "5abc",
    "é", "\t", "`status`", "5", "N'", "x'", "@'", "@`", "/*!", "0b1", "_binary", "NOT", "IS", "->",
    "<=", ":", "=", "e",
];

fn sqlish() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop::sample::select(VOCABULARY), 0..40)
        .prop_map(|parts| parts.concat().into_bytes())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn never_panics_and_output_is_bounded(text in prop::collection::vec(any::<u8>(), 0..300)) {
        let n = normalize(&text, MAX);
        prop_assert!(n.len() <= 3 * text.len() + 8, "{} -> {}", text.len(), n.len());
        prop_assert_eq!(digest(&text, MAX), digest(n.as_bytes(), MAX));
        let _ = classify(&text);
        prop_assert!(tokens(&text).count() <= text.len());
    }

    #[test]
    fn idempotent_on_bytes(text in prop::collection::vec(any::<u8>(), 0..200)) {
        let once = normalize(&text, MAX);
        prop_assert_eq!(normalize(once.as_bytes(), MAX), once);
    }

    #[test]
    fn idempotent_on_sql_pieces(text in sqlish()) {
        let once = normalize(&text, MAX);
        let twice = normalize(once.as_bytes(), MAX);
        prop_assert_eq!(&twice, &once, "input {:?}", String::from_utf8_lossy(&text));
        prop_assert_eq!(digest(&text, MAX), digest(once.as_bytes(), MAX));
    }

    #[test]
    fn max_len_is_a_prefix(text in sqlish(), cut in 0usize..400) {
        let prefix = text.get(..cut).unwrap_or(&text);
        prop_assert_eq!(normalize(&text, cut), normalize(prefix, MAX));
        prop_assert_eq!(digest(&text, cut), digest(prefix, MAX));
    }

    #[test]
    fn replacing_a_number_keeps_the_digest(
        template in prop::sample::select(TEMPLATES),
        a in prop::collection::vec(number(), 3),
        b in prop::collection::vec(number(), 3),
    ) {
        let fill = |nums: &[String]| {
            let mut out = template.to_string();
            for n in nums {
                out = out.replacen("{}", n, 1);
            }
            out
        };
        prop_assert_eq!(dig(&fill(&a)), dig(&fill(&b)), "{} / {}", fill(&a), fill(&b));
    }
}

const TEMPLATES: &[&str] = &[
    "SELECT c FROM sbtest1 WHERE id = {} AND k > {} LIMIT {}",
    "SELECT * FROM t WHERE a IN ({}, {}, {})",
    "UPDATE t SET a = a + {}, b = -{} WHERE id = {}",
    "INSERT INTO t VALUES ({}, {}), ({}, 'x')",
    "SELECT {} - {}, ({}) FROM t",
    "SELECT * FROM t WHERE a BETWEEN {} AND {} OR b = {}",
];

fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<u32>().prop_map(|n| n.to_string()),
        (any::<u16>(), any::<u16>()).prop_map(|(a, b)| format!("{a}.{b}")),
        any::<u16>().prop_map(|n| format!(".{n}")),
        (any::<u8>(), -30i8..30).prop_map(|(a, e)| format!("{a}e{e}")),
        any::<u32>().prop_map(|n| format!("0x{n:x}")),
        "[a-z ]{0,5}".prop_map(|s| format!("'{s}'")),
    ]
}

#[test]
fn only_reads_of_the_diagnostics_area_are_read_as_such() {
    use super::reads_diagnostics;
    for yes in [
        "SHOW WARNINGS",
        "show errors limit 10",
        "SHOW COUNT(*) WARNINGS",
        "SHOW COUNT ( * ) ERRORS",
        "SELECT @@warning_count",
        "select @@SESSION.error_count, @@warning_count;",
    ] {
        assert!(reads_diagnostics(yes.as_bytes()), "{yes}");
    }
    for no in [
        "SELECT 1",
        "SHOW TABLES",
        "SHOW COUNT(*) TABLES",
        "SELECT @@warning_count, a FROM t",
        "SELECT @@global.warning_count",
        "SELECT @warning_count",
        "SELECT @@max_error_count",
        "GET DIAGNOSTICS @n = NUMBER",
        "",
    ] {
        assert!(!reads_diagnostics(no.as_bytes()), "{no}");
    }
}
