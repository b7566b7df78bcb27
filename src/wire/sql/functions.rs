//! Which built-in SQL functions a statement may call and still be a plain read: the functions of
//! MariaDB (10.11) and MySQL 8 that have no side effect on the server or the session and read no
//! per-session state that an earlier statement left. A call to one of them may run on a
//! read-only replica, may be sent again to another server when the first was lost before
//! answering ([`retryable_read`](super::retryable_read)), and does not pin a pooled session
//! ([`pins`](super::pins)). The pins, the retry after a lost server and the read/write route share
//! this one list, so that they agree on which calls are harmless.
//!
//! Non-determinism is fine (`NOW()`, `RAND()`, `UUID()`: a second run may answer differently,
//! as the first run on another server would have), and so is reading the session's identity or
//! configuration (`USER()`, `DATABASE()`, `VERSION()`, `CHARSET(x)`). Not allowed: waiting or
//! burning a server (`SLEEP`, `BENCHMARK`), user locks, replication waits, sequences, what the
//! previous statement on that connection left (`LAST_INSERT_ID()`, `FOUND_ROWS()`,
//! `ROW_COUNT()`), the connection's id, a server file (`LOAD_FILE`): see `NOT_PURE` for the
//! reasons, name by name.
//!
//! # An allow-list, not a deny-list
//!
//! A name followed by `(` that the server does not know as a built-in is a stored function of
//! the current schema (or a UDF), and a stored function may do anything a session can: write,
//! take locks, set user variables, sleep. So may a function a view calls. And a built-in's name
//! reaches the built-in only when written bare: `db.ABS(1)` always calls a stored function, and
//! a name in backticks is resolved like any identifier, to the native function of that name if
//! MariaDB registers one (`` `ABS`(1) ``, `` `CONCAT`(..) ``), else to the schema's stored
//! function: `` `LEFT`('a', 1) ``, `` `IF`(..) ``, `` `SUM`(..) ``, `` `USER`() `` call the
//! schema's `left`, `if`, `sum`, `user` if it has one (95 of the allow-list's names are such
//! keywords on MariaDB 10.11). A deny-list of the harmful built-ins would let all of these
//! through; the allow-list names what is known to be harmless, and everything else is not. When
//! unsure about a function, it is left out.
//!
//! [`pure_builtin`] answers for a name written bare (no qualifier, no quotes) with its `(`
//! directly after it. Directly: 46 of the names (`COUNT`, `SUM`, `MAX`, `NOW`, `CURDATE`,
//! `CAST`, `SUBSTRING`, `TRIM`, `EXTRACT`, `POSITION`, `GROUP_CONCAT`, `LAG`, ...; the anchor
//! test lists them) are keywords to the servers' lexers only when `(` follows without a space or
//! a comment between: under the default `sql_mode` (no `IGNORE_SPACE`), `SUM (x)` and
//! `SUM/**/(x)` call a stored function `sum` of the current schema. Left out altogether: the
//! geometry constructors (`POINT`, `LINESTRING`, `POLYGON`, `MULTIPOINT`, `MULTILINESTRING`,
//! `MULTIPOLYGON`, `GEOMETRYCOLLECTION`), which MariaDB takes for built-ins only with the
//! arguments they accept (`POINT(1, 2)` is the built-in, `POINT(1)` calls a stored function
//! `point`), and `JSON_TABLE`, a table function after `FROM` but a stored function's name in an
//! expression.
//!
//! [`syntax_paren`] names the reserved words after which `(` opens syntax, not a call (`IN (`,
//! `EXISTS (`, `OVER (`, `VARCHAR(`, ...). Only reserved words: written bare, a reserved word
//! cannot name a function, so its `(` is never a call wherever it stands (the anchor test
//! checks each in an expression, with and without a space). Non-reserved words that open syntax
//! in one place are left out (`COLUMNS`, `PATH` and `NESTED` of `JSON_TABLE`, `AGAINST` of
//! `MATCH`, `ESCAPE`, `OF`, `THAN`, MySQL's `LATERAL`): in an expression, `AGAINST(1)` calls a
//! stored function `against`.
//!
//! Both lists are the union of the two flavours: a name only one of them knows is, on the
//! other, the name of whatever stored function a schema may define (see `MYSQL_ONLY`).
//!
//! # Anchored against MariaDB
//!
//! MariaDB answers a call to a name it resolves as a stored function that does not exist with
//! error 1305 (`ER_SP_DOES_NOT_EXIST`) or, for a name that is also a built-in's keyword, 1630
//! (`ER_FUNC_INEXISTENT_NAME_COLLISION`); a built-in answers with a result, a syntax error or a
//! wrong parameter count instead. `tests/functions_anchor.rs` calls every name of the allow-list
//! with zero to three arguments on MariaDB 10.11 and fails on either error; checks that each
//! `MYSQL_ONLY` name is unknown there; that no word of [`syntax_paren`] followed by `(` is ever
//! read as a call; that exactly the 46 names above turn into a stored function's when a space
//! comes before their `(`; and that a stored function is not [`pure_builtin`].
//!
//! Sans-IO, no allocation: each list is sorted upper case, and a word is upper-cased into a
//! stack buffer and binary-searched.

/// Longest name a list may hold: longer words are in no list.
const MAX_NAME: usize = 32;

/// The names of the allow-list that MariaDB's lexer takes as keywords only when `(` follows
/// directly: with a space (or a comment) before their `(`, under the default `sql_mode`, they
/// are plain identifiers, and the call goes to a stored function of the current schema. Sorted.
pub(crate) const ADJACENT_PAREN: &[&str] = &[
    "ADDDATE",
    "BIT_AND",
    "BIT_OR",
    "BIT_XOR",
    "CAST",
    "COUNT",
    "CUME_DIST",
    "CURDATE",
    "CURTIME",
    "DATE_ADD",
    "DATE_SUB",
    "DENSE_RANK",
    "EXTRACT",
    "FIRST_VALUE",
    "GROUP_CONCAT",
    "JSON_ARRAYAGG",
    "JSON_OBJECTAGG",
    "LAG",
    "LEAD",
    "MAX",
    "MEDIAN",
    "MID",
    "MIN",
    "NOW",
    "NTH_VALUE",
    "NTILE",
    "PERCENTILE_CONT",
    "PERCENTILE_DISC",
    "PERCENT_RANK",
    "POSITION",
    "RANK",
    "SESSION_USER",
    "STD",
    "STDDEV",
    "STDDEV_POP",
    "STDDEV_SAMP",
    "SUBDATE",
    "SUBSTR",
    "SUBSTRING",
    "SUM",
    "SYSTEM_USER",
    "TRIM",
    "TRIM_ORACLE",
    "VARIANCE",
    "VAR_POP",
    "VAR_SAMP",
];

/// Whether `name`, an allowed built-in, calls it only when its `(` follows directly (see
/// [`ADJACENT_PAREN`]): with a space or a comment between, a stored function of that name.
pub fn needs_adjacent_paren(name: &[u8]) -> bool {
    let mut buf = [0; MAX_NAME];
    upper(name, &mut buf).is_some_and(|up| listed(ADJACENT_PAREN, up))
}

/// Whether `name` (as written, any case, no quotes) is a built-in function of the allow-list.
///
/// True only for a call written bare: a qualified (`db.f(`) or quoted (`` `f`( ``) name may be
/// a stored function, and for the names the lexers know as keywords only before an adjacent
/// `(` (see the module's docs), `f (` with a space or comment between may be one too.
pub fn pure_builtin(name: &[u8]) -> bool {
    let mut buf = [0; MAX_NAME];
    upper(name, &mut buf).is_some_and(|up| listed(PURE, up) || listed(MYSQL_ONLY, up))
}

/// Whether `word` is a keyword after which `(` opens syntax, not a call (`IN (`, `EXISTS (`,
/// `VALUES (`, `OVER (`, `AS (`, `USING (`, `INDEX (`, `PARTITION (`, a type such as
/// `DECIMAL(` or `VARCHAR(` in `CAST`/`CONVERT`, `JOIN (`, `FROM (`, `SELECT (`, ...). Reserved
/// words only (see the module's docs).
pub fn syntax_paren(word: &[u8]) -> bool {
    let mut buf = [0; MAX_NAME];
    upper(word, &mut buf).is_some_and(|up| listed(SYNTAX, up))
}

/// `word` upper-cased (ASCII letters only) into `buf`; None when it is too long for any list.
fn upper<'b>(word: &[u8], buf: &'b mut [u8; MAX_NAME]) -> Option<&'b [u8]> {
    let up = buf.get_mut(..word.len())?;
    up.copy_from_slice(word);
    up.make_ascii_uppercase();
    Some(up)
}

/// Whether the sorted `list` holds `up`.
fn listed(list: &[&str], up: &[u8]) -> bool {
    list.binary_search_by(|name| name.as_bytes().cmp(up))
        .is_ok()
}

/// The built-ins of MariaDB 10.11 (most of them MySQL 8's too) that are harmless to call (see
/// the module's docs). Sorted by bytes, upper case.
///
/// Taken from MariaDB's own lists (`INFORMATION_SCHEMA.SQL_FUNCTIONS`, the native functions of
/// `sql/item_create.cc` and `sql/item_geofunc.cc`, the functions with a grammar of their own in
/// `sql/sql_yacc.yy`), less the ones of `NOT_PURE` and those left out when unsure, and checked
/// against the server by the anchor test.
pub(crate) const PURE: &[&str] = &[
    "ABS",
    "ACOS",
    "ADDDATE",
    "ADDTIME",
    "ADD_MONTHS",
    "AES_DECRYPT",
    "AES_ENCRYPT",
    "AREA",
    "ASBINARY",
    "ASCII",
    "ASIN",
    "ASTEXT",
    "ASWKB",
    "ASWKT",
    "ATAN",
    "ATAN2",
    "AVG",
    "BIN",
    "BIT_AND",
    "BIT_COUNT",
    "BIT_LENGTH",
    "BIT_OR",
    "BIT_XOR",
    "BOUNDARY",
    "BUFFER",
    "CAST",
    "CEIL",
    "CEILING",
    "CENTROID",
    "CHAR",
    "CHARACTER_LENGTH",
    "CHARSET",
    "CHAR_LENGTH",
    "CHR",
    "COALESCE",
    "COERCIBILITY",
    "COLLATION",
    "COLUMN_ADD",
    "COLUMN_CHECK",
    "COLUMN_CREATE",
    "COLUMN_DELETE",
    "COLUMN_EXISTS",
    "COLUMN_GET",
    "COLUMN_JSON",
    "COLUMN_LIST",
    "COMPRESS",
    "CONCAT",
    "CONCAT_OPERATOR_ORACLE",
    "CONCAT_WS",
    "CONTAINS",
    "CONV",
    "CONVERT",
    "CONVERT_TZ",
    "CONVEXHULL",
    "COS",
    "COT",
    "COUNT",
    "CRC32",
    "CRC32C",
    "CROSSES",
    "CUME_DIST",
    "CURDATE",
    "CURRENT_DATE",
    "CURRENT_ROLE",
    "CURRENT_TIME",
    "CURRENT_TIMESTAMP",
    "CURRENT_USER",
    "CURTIME",
    "DATABASE",
    "DATE",
    "DATEDIFF",
    "DATE_ADD",
    "DATE_FORMAT",
    "DATE_SUB",
    "DAY",
    "DAYNAME",
    "DAYOFMONTH",
    "DAYOFWEEK",
    "DAYOFYEAR",
    "DECODE",
    "DECODE_HISTOGRAM",
    "DECODE_ORACLE",
    "DEFAULT",
    "DEGREES",
    "DENSE_RANK",
    "DIMENSION",
    "DISJOINT",
    "ELT",
    "ENCODE",
    "ENCRYPT",
    "ENDPOINT",
    "ENVELOPE",
    "EQUALS",
    "EXP",
    "EXPORT_SET",
    "EXTERIORRING",
    "EXTRACT",
    "EXTRACTVALUE",
    "FIELD",
    "FIND_IN_SET",
    "FIRST_VALUE",
    "FLOOR",
    "FORMAT",
    "FROM_BASE64",
    "FROM_DAYS",
    "FROM_UNIXTIME",
    "GEOMCOLLFROMTEXT",
    "GEOMCOLLFROMWKB",
    "GEOMETRYCOLLECTIONFROMTEXT",
    "GEOMETRYCOLLECTIONFROMWKB",
    "GEOMETRYFROMTEXT",
    "GEOMETRYFROMWKB",
    "GEOMETRYN",
    "GEOMETRYTYPE",
    "GEOMFROMTEXT",
    "GEOMFROMWKB",
    "GET_FORMAT",
    "GLENGTH",
    "GREATEST",
    "GROUP_CONCAT",
    "HEX",
    "HOUR",
    "IF",
    "IFNULL",
    "INET6_ATON",
    "INET6_NTOA",
    "INET_ATON",
    "INET_NTOA",
    "INSERT",
    "INSTR",
    "INTERIORRINGN",
    "INTERSECTS",
    "INTERVAL",
    "ISCLOSED",
    "ISEMPTY",
    "ISNULL",
    "ISRING",
    "ISSIMPLE",
    "IS_IPV4",
    "IS_IPV4_COMPAT",
    "IS_IPV4_MAPPED",
    "IS_IPV6",
    "JSON_ARRAY",
    "JSON_ARRAYAGG",
    "JSON_ARRAY_APPEND",
    "JSON_ARRAY_INSERT",
    "JSON_COMPACT",
    "JSON_CONTAINS",
    "JSON_CONTAINS_PATH",
    "JSON_DEPTH",
    "JSON_DETAILED",
    "JSON_EQUALS",
    "JSON_EXISTS",
    "JSON_EXTRACT",
    "JSON_INSERT",
    "JSON_KEYS",
    "JSON_LENGTH",
    "JSON_LOOSE",
    "JSON_MERGE",
    "JSON_MERGE_PATCH",
    "JSON_MERGE_PRESERVE",
    "JSON_NORMALIZE",
    "JSON_OBJECT",
    "JSON_OBJECTAGG",
    "JSON_OVERLAPS",
    "JSON_PRETTY",
    "JSON_QUERY",
    "JSON_QUOTE",
    "JSON_REMOVE",
    "JSON_REPLACE",
    "JSON_SEARCH",
    "JSON_SET",
    "JSON_TYPE",
    "JSON_UNQUOTE",
    "JSON_VALID",
    "JSON_VALUE",
    "LAG",
    "LAST_DAY",
    "LAST_VALUE",
    "LCASE",
    "LEAD",
    "LEAST",
    "LEFT",
    "LENGTH",
    "LENGTHB",
    "LINEFROMTEXT",
    "LINEFROMWKB",
    "LINESTRINGFROMTEXT",
    "LINESTRINGFROMWKB",
    "LN",
    "LOCALTIME",
    "LOCALTIMESTAMP",
    "LOCATE",
    "LOG",
    "LOG10",
    "LOG2",
    "LOWER",
    "LPAD",
    "LPAD_ORACLE",
    "LTRIM",
    "LTRIM_ORACLE",
    "MAKEDATE",
    "MAKETIME",
    "MAKE_SET",
    "MATCH",
    "MAX",
    "MBRCONTAINS",
    "MBRDISJOINT",
    "MBREQUAL",
    "MBREQUALS",
    "MBRINTERSECTS",
    "MBROVERLAPS",
    "MBRTOUCHES",
    "MBRWITHIN",
    "MD5",
    "MEDIAN",
    "MICROSECOND",
    "MID",
    "MIN",
    "MINUTE",
    "MLINEFROMTEXT",
    "MLINEFROMWKB",
    "MOD",
    "MONTH",
    "MONTHNAME",
    "MPOINTFROMTEXT",
    "MPOINTFROMWKB",
    "MPOLYFROMTEXT",
    "MPOLYFROMWKB",
    "MULTILINESTRINGFROMTEXT",
    "MULTILINESTRINGFROMWKB",
    "MULTIPOINTFROMTEXT",
    "MULTIPOINTFROMWKB",
    "MULTIPOLYGONFROMTEXT",
    "MULTIPOLYGONFROMWKB",
    "NAME_CONST",
    "NATURAL_SORT_KEY",
    "NOW",
    "NTH_VALUE",
    "NTILE",
    "NULLIF",
    "NUMGEOMETRIES",
    "NUMINTERIORRINGS",
    "NUMPOINTS",
    "NVL",
    "NVL2",
    "OCT",
    "OCTET_LENGTH",
    "OLD_PASSWORD",
    "ORD",
    "OVERLAPS",
    "PASSWORD",
    "PERCENTILE_CONT",
    "PERCENTILE_DISC",
    "PERCENT_RANK",
    "PERIOD_ADD",
    "PERIOD_DIFF",
    "PI",
    "POINTFROMTEXT",
    "POINTFROMWKB",
    "POINTN",
    "POINTONSURFACE",
    "POLYFROMTEXT",
    "POLYFROMWKB",
    "POLYGONFROMTEXT",
    "POLYGONFROMWKB",
    "POSITION",
    "POW",
    "POWER",
    "QUARTER",
    "QUOTE",
    "RADIANS",
    "RAND",
    "RANDOM_BYTES",
    "RANK",
    "REGEXP_INSTR",
    "REGEXP_REPLACE",
    "REGEXP_SUBSTR",
    "REPEAT",
    "REPLACE",
    "REPLACE_ORACLE",
    "REVERSE",
    "RIGHT",
    "ROUND",
    "ROWNUM",
    "ROW_NUMBER",
    "RPAD",
    "RPAD_ORACLE",
    "RTRIM",
    "RTRIM_ORACLE",
    "SCHEMA",
    "SECOND",
    "SEC_TO_TIME",
    "SESSION_USER",
    "SFORMAT",
    "SHA",
    "SHA1",
    "SHA2",
    "SIGN",
    "SIN",
    "SOUNDEX",
    "SPACE",
    "SQRT",
    "SRID",
    "STARTPOINT",
    "STD",
    "STDDEV",
    "STDDEV_POP",
    "STDDEV_SAMP",
    "STRCMP",
    "STR_TO_DATE",
    "ST_AREA",
    "ST_ASBINARY",
    "ST_ASGEOJSON",
    "ST_ASTEXT",
    "ST_ASWKB",
    "ST_ASWKT",
    "ST_BOUNDARY",
    "ST_BUFFER",
    "ST_CENTROID",
    "ST_CONTAINS",
    "ST_CONVEXHULL",
    "ST_CROSSES",
    "ST_DIFFERENCE",
    "ST_DIMENSION",
    "ST_DISJOINT",
    "ST_DISTANCE",
    "ST_DISTANCE_SPHERE",
    "ST_ENDPOINT",
    "ST_ENVELOPE",
    "ST_EQUALS",
    "ST_EXTERIORRING",
    "ST_GEOMCOLLFROMTEXT",
    "ST_GEOMCOLLFROMWKB",
    "ST_GEOMETRYCOLLECTIONFROMTEXT",
    "ST_GEOMETRYCOLLECTIONFROMWKB",
    "ST_GEOMETRYFROMTEXT",
    "ST_GEOMETRYFROMWKB",
    "ST_GEOMETRYN",
    "ST_GEOMETRYTYPE",
    "ST_GEOMFROMGEOJSON",
    "ST_GEOMFROMTEXT",
    "ST_GEOMFROMWKB",
    "ST_INTERIORRINGN",
    "ST_INTERSECTION",
    "ST_INTERSECTS",
    "ST_ISCLOSED",
    "ST_ISEMPTY",
    "ST_ISRING",
    "ST_ISSIMPLE",
    "ST_LENGTH",
    "ST_LINEFROMTEXT",
    "ST_LINEFROMWKB",
    "ST_LINESTRINGFROMTEXT",
    "ST_LINESTRINGFROMWKB",
    "ST_MLINEFROMTEXT",
    "ST_MLINEFROMWKB",
    "ST_MPOINTFROMTEXT",
    "ST_MPOINTFROMWKB",
    "ST_MPOLYFROMTEXT",
    "ST_MPOLYFROMWKB",
    "ST_MULTILINESTRINGFROMTEXT",
    "ST_MULTILINESTRINGFROMWKB",
    "ST_MULTIPOINTFROMTEXT",
    "ST_MULTIPOINTFROMWKB",
    "ST_MULTIPOLYGONFROMTEXT",
    "ST_MULTIPOLYGONFROMWKB",
    "ST_NUMGEOMETRIES",
    "ST_NUMINTERIORRINGS",
    "ST_NUMPOINTS",
    "ST_OVERLAPS",
    "ST_POINTFROMTEXT",
    "ST_POINTFROMWKB",
    "ST_POINTN",
    "ST_POINTONSURFACE",
    "ST_POLYFROMTEXT",
    "ST_POLYFROMWKB",
    "ST_POLYGONFROMTEXT",
    "ST_POLYGONFROMWKB",
    "ST_RELATE",
    "ST_SRID",
    "ST_STARTPOINT",
    "ST_SYMDIFFERENCE",
    "ST_TOUCHES",
    "ST_UNION",
    "ST_WITHIN",
    "ST_X",
    "ST_Y",
    "SUBDATE",
    "SUBSTR",
    "SUBSTRING",
    "SUBSTRING_INDEX",
    "SUBSTR_ORACLE",
    "SUBTIME",
    "SUM",
    "SYSDATE",
    "SYSTEM_USER",
    "SYS_GUID",
    "TAN",
    "TIME",
    "TIMEDIFF",
    "TIMESTAMP",
    "TIMESTAMPADD",
    "TIMESTAMPDIFF",
    "TIME_FORMAT",
    "TIME_TO_SEC",
    "TOUCHES",
    "TO_BASE64",
    "TO_CHAR",
    "TO_DAYS",
    "TO_SECONDS",
    "TRIM",
    "TRIM_ORACLE",
    "TRUNCATE",
    "UCASE",
    "UNCOMPRESS",
    "UNCOMPRESSED_LENGTH",
    "UNHEX",
    "UNIX_TIMESTAMP",
    "UPDATEXML",
    "UPPER",
    "USER",
    "UTC_DATE",
    "UTC_TIME",
    "UTC_TIMESTAMP",
    "UUID",
    "UUID_SHORT",
    "VALUE",
    "VALUES",
    "VARIANCE",
    "VAR_POP",
    "VAR_SAMP",
    "VERSION",
    "WEEK",
    "WEEKDAY",
    "WEEKOFYEAR",
    "WEIGHT_STRING",
    "WITHIN",
    "X",
    "Y",
    "YEAR",
    "YEARWEEK",
];

/// Built-ins of MySQL 8 that MariaDB 10.11 does not have; part of the allow-list, but skipped
/// by the anchor test's oracle (on MariaDB each of them resolves as a stored function of the
/// current schema, error 1305 when there is none; the test checks that instead, so a name
/// MariaDB gains moves to `PURE`).
///
/// Hence a caveat: on MariaDB, a schema may define a stored function of one of these names (an
/// `ANY_VALUE` to run queries written for MySQL, say), and `pure_builtin` calls it harmless.
/// The same holds the other way for the MariaDB-only names of `PURE` (`NVL`, `DECODE_ORACLE`,
/// `COLUMN_GET`, `JSON_DETAILED`, ...) on MySQL. A caller that knows its backend's flavour may
/// want to drop the other flavour's names.
pub(crate) const MYSQL_ONLY: &[&str] = &[
    "ANY_VALUE",
    "BIN_TO_UUID",
    "FORMAT_BYTES",
    "FORMAT_PICO_TIME",
    "GROUPING",
    "GTID_SUBSET",
    "GTID_SUBTRACT",
    "ICU_VERSION",
    "IS_UUID",
    "JSON_SCHEMA_VALID",
    "JSON_SCHEMA_VALIDATION_REPORT",
    "JSON_STORAGE_FREE",
    "JSON_STORAGE_SIZE",
    "MBRCOVEREDBY",
    "MBRCOVERS",
    "REGEXP_LIKE",
    "STATEMENT_DIGEST",
    "STATEMENT_DIGEST_TEXT",
    "ST_BUFFER_STRATEGY",
    "ST_COLLECT",
    "ST_FRECHETDISTANCE",
    "ST_GEOHASH",
    "ST_GEOMCOLLFROMTXT",
    "ST_HAUSDORFFDISTANCE",
    "ST_ISVALID",
    "ST_LATFROMGEOHASH",
    "ST_LATITUDE",
    "ST_LINEINTERPOLATEPOINT",
    "ST_LINEINTERPOLATEPOINTS",
    "ST_LONGFROMGEOHASH",
    "ST_LONGITUDE",
    "ST_MAKEENVELOPE",
    "ST_NUMINTERIORRING",
    "ST_POINTATDISTANCE",
    "ST_POINTFROMGEOHASH",
    "ST_SIMPLIFY",
    "ST_SWAPXY",
    "ST_TRANSFORM",
    "ST_VALIDATE",
    "UUID_TO_BIN",
];

/// Examples of built-ins that are not in the allow-list, each for a reason (the unit tests check
/// that none is allowed):
///
/// - `SLEEP`, `BENCHMARK`: they occupy a server (a retry doubles the wait).
/// - `GET_LOCK`, `RELEASE_LOCK`, `RELEASE_ALL_LOCKS`, `IS_FREE_LOCK`, `IS_USED_LOCK`, and
///   MySQL's locking service `SERVICE_GET_READ_LOCKS`, `SERVICE_GET_WRITE_LOCKS`,
///   `SERVICE_RELEASE_LOCKS`: user locks are held by a connection, on one server; taking or
///   releasing one changes the session, and asking about one answers for that server only.
/// - `MASTER_POS_WAIT`, `MASTER_GTID_WAIT`, MySQL's `SOURCE_POS_WAIT`,
///   `WAIT_FOR_EXECUTED_GTID_SET`, `WAIT_UNTIL_SQL_THREAD_AFTER_GTIDS`, and Galera's
///   `WSREP_SYNC_WAIT_UPTO_GTID`: replication waits, which block, and answer for that server.
/// - `WSREP_LAST_SEEN_GTID`, `WSREP_LAST_WRITTEN_GTID`: what the session's earlier statements
///   left on that connection.
/// - `NEXTVAL`, `LASTVAL`, `SETVAL`: sequences (advanced, and the last value kept per session).
/// - `LAST_INSERT_ID`, `FOUND_ROWS`, `ROW_COUNT`: they read what the previous statement on that
///   connection left (and `LAST_INSERT_ID(x)` sets it).
/// - `CONNECTION_ID`, MySQL's `PS_CURRENT_THREAD_ID`, `PS_THREAD_ID`: they name one server
///   connection, which the client may later refer to (`KILL QUERY <id>`).
/// - `LOAD_FILE`: reads a file of that server.
/// - `BINLOG_GTID_POS`: reads that server's binary logs.
/// - `DES_ENCRYPT`, `DES_DECRYPT`: their default keys come from that server's `--des-key-file`.
/// - `POINT`, `LINESTRING`, `POLYGON`, `MULTIPOINT`, `MULTILINESTRING`, `MULTIPOLYGON`,
///   `GEOMETRYCOLLECTION`: MariaDB takes them for the built-in constructors only with the
///   arguments those accept, else for a stored function of the same name (`POINT(1)`).
/// - `JSON_TABLE`: a table function after `FROM`, but in an expression a stored function's name.
/// - Any UDF, and any name not in the allow-list.
#[cfg(test)]
const NOT_PURE: &[&str] = &[
    "BENCHMARK",
    "BINLOG_GTID_POS",
    "CONNECTION_ID",
    "DES_DECRYPT",
    "DES_ENCRYPT",
    "FOUND_ROWS",
    "GEOMETRYCOLLECTION",
    "GET_LOCK",
    "IS_FREE_LOCK",
    "IS_USED_LOCK",
    "JSON_TABLE",
    "LASTVAL",
    "LAST_INSERT_ID",
    "LINESTRING",
    "LOAD_FILE",
    "MASTER_GTID_WAIT",
    "MASTER_POS_WAIT",
    "MULTILINESTRING",
    "MULTIPOINT",
    "MULTIPOLYGON",
    "NEXTVAL",
    "POINT",
    "POLYGON",
    "PS_CURRENT_THREAD_ID",
    "PS_THREAD_ID",
    "RELEASE_ALL_LOCKS",
    "RELEASE_LOCK",
    "ROW_COUNT",
    "SERVICE_GET_READ_LOCKS",
    "SERVICE_GET_WRITE_LOCKS",
    "SERVICE_RELEASE_LOCKS",
    "SETVAL",
    "SLEEP",
    "SOURCE_POS_WAIT",
    "WAIT_FOR_EXECUTED_GTID_SET",
    "WAIT_UNTIL_SQL_THREAD_AFTER_GTIDS",
    "WSREP_LAST_SEEN_GTID",
    "WSREP_LAST_WRITTEN_GTID",
    "WSREP_SYNC_WAIT_UPTO_GTID",
];

/// Reserved words after which `(` opens syntax: clauses and operators (`IN (`, `EXISTS (`,
/// `OVER (`, `FROM (`, ...), statement words (`SELECT (`, `VALUES (`, `TABLE (`, `DO (`), key
/// and partition definitions (`INDEX (`, `KEY (`, `PARTITION (`, `RANGE (`, `CHECK (`) and data
/// types with a length (`DECIMAL(`, `VARCHAR(`, `BINARY(`, ...). Some are functions as well
/// (`CHAR(65)`, `INTERVAL(n, ..)`, `MOD(a, b)`, `VALUES(col)`), which are in `PURE` too. Sorted
/// by bytes, upper case.
pub(crate) const SYNTAX: &[&str] = &[
    "ALL",
    "AND",
    "ANY",
    "AS",
    "BETWEEN",
    "BIGINT",
    "BINARY",
    "BIT",
    "BLOB",
    "BOTH",
    "BY",
    "CASE",
    "CHAR",
    "CHARACTER",
    "CHECK",
    "DATETIME",
    "DEC",
    "DECIMAL",
    "DISTINCT",
    "DISTINCTROW",
    "DIV",
    "DO",
    "DOUBLE",
    "ELSE",
    "ELSEIF",
    "ENUM",
    "EXCEPT",
    "EXISTS",
    "FIXED",
    "FLOAT",
    "FLOAT4",
    "FLOAT8",
    "FOR",
    "FROM",
    "FULLTEXT",
    "GROUP",
    "HAVING",
    "IN",
    "INDEX",
    "INT",
    "INT1",
    "INT2",
    "INT3",
    "INT4",
    "INT8",
    "INTEGER",
    "INTERSECT",
    "INTERVAL",
    "INTO",
    "IS",
    "JOIN",
    "KEY",
    "KEYS",
    "LEADING",
    "LIKE",
    "LIMIT",
    "MEDIUMINT",
    "MIDDLEINT",
    "MOD",
    "NCHAR",
    "NOT",
    "NUMBER",
    "NUMERIC",
    "NVARCHAR",
    "ON",
    "OR",
    "OVER",
    "PARTITION",
    "PRECISION",
    "RANGE",
    "RAW",
    "REAL",
    "RECURSIVE",
    "REGEXP",
    "RETURN",
    "RETURNING",
    "RLIKE",
    "ROW",
    "SELECT",
    "SET",
    "SMALLINT",
    "SOME",
    "SPATIAL",
    "STRAIGHT_JOIN",
    "TABLE",
    "TEXT",
    "THEN",
    "TINYINT",
    "TO",
    "TRAILING",
    "UNION",
    "UNIQUE",
    "USING",
    "VALUE",
    "VALUES",
    "VARBINARY",
    "VARCHAR",
    "VARCHAR2",
    "VARCHARACTER",
    "VARYING",
    "WHEN",
    "WHERE",
    "WHILE",
    "WINDOW",
    "WITH",
    "XOR",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_are_sorted_upper_case_and_without_duplicates() {
        // NOT_PURE is never searched: a name too long for the buffer is allowed nowhere anyway
        // (`WAIT_UNTIL_SQL_THREAD_AFTER_GTIDS` is 33 bytes).
        for (what, list, max) in [
            ("PURE", PURE, MAX_NAME),
            ("MYSQL_ONLY", MYSQL_ONLY, MAX_NAME),
            ("NOT_PURE", NOT_PURE, usize::MAX),
            ("SYNTAX", SYNTAX, MAX_NAME),
        ] {
            for pair in list.windows(2) {
                assert!(
                    pair[0] < pair[1],
                    "{what}: {:?} before {:?}",
                    pair[0],
                    pair[1]
                );
            }
            for name in list {
                assert!(
                    !name.is_empty()
                        && name.len() <= max
                        && name
                            .bytes()
                            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_'),
                    "{what}: {name:?}"
                );
            }
        }
    }

    #[test]
    fn the_lists_do_not_overlap_where_they_must_not() {
        for name in NOT_PURE {
            assert!(!pure_builtin(name.as_bytes()), "{name} is in NOT_PURE");
            assert!(!syntax_paren(name.as_bytes()), "{name} is in NOT_PURE");
        }
        for name in MYSQL_ONLY {
            assert!(!listed(PURE, name.as_bytes()), "{name} is in both");
        }
    }

    #[test]
    fn words_match_in_any_case() {
        for name in [
            "count",
            "Count",
            "COUNT",
            "json_extract",
            "St_AsText",
            "group_concat",
            "any_value",
            "sha2",
            "utc_timestamp",
            "ST_GEOMETRYCOLLECTIONFROMTEXT",
        ] {
            assert!(pure_builtin(name.as_bytes()), "{name}");
        }
        for word in [
            "in", "Exists", "VALUES", "over", "varchar", "decimal", "join",
        ] {
            assert!(syntax_paren(word.as_bytes()), "{word}");
        }
        for word in ["over", "exists", "join"] {
            assert!(!pure_builtin(word.as_bytes()), "{word}");
        }
        for name in ["count", "sum", "sleep", "f"] {
            assert!(!syntax_paren(name.as_bytes()), "{name}");
        }
    }

    #[test]
    fn anything_else_is_not_allowed() {
        let long = [b'A'; MAX_NAME + 1];
        for name in [
            &b"sleep"[..],
            b"Get_Lock",
            b"last_insert_id",
            b"nextval",
            b"point",
            b"json_table",
            b"f",
            b"my_func",
            b"",
            b"COUNT ",
            b" COUNT",
            b"`COUNT`",
            b"db.count",
            b"COUNT(",
            // A dotless i (UTF-8): the server does not fold it into `IFNULL` either.
            "\u{131}fnull".as_bytes(),
            b"\xff\xfe",
            &long,
        ] {
            assert!(!pure_builtin(name), "{:?}", String::from_utf8_lossy(name));
            assert!(!syntax_paren(name), "{:?}", String::from_utf8_lossy(name));
        }
    }
}
