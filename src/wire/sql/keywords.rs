//! The fixed keyword list the tokenizer upper-cases, and the character set names a literal's
//! introducer (`_utf8mb4'x'`) may carry.
//!
//! A word is a keyword only if it is in this list: MySQL's and MariaDB's reserved words, the
//! non-reserved words that start or shape common statements (`BEGIN`, `COMMIT`, `ISOLATION`,
//! `NAMES`, ...), data types and the functions the servers' own lexers treat as keywords
//! (`COUNT`, `NOW`, `CAST`, ...). A column named like one of them (`status`, `date`) is
//! upper-cased too when written bare, and keeps its backticks when quoted (as Performance
//! Schema does); words outside the list (`user`, `id`, `concat`) are identifiers, printed as
//! written. The list is fixed so that a digest never depends on the server version.

/// Printed without a space before a directly following `(`: functions and data types
/// (`COUNT(*)`, `VARCHAR(...)`), unlike `IN (...)` or `VALUES (...)`.
pub(crate) const CALL_PAREN: u8 = 1;
/// A value by itself (`TRUE`, `CURRENT_TIMESTAMP`, `END` of `CASE`): a `-` after it is binary.
pub(crate) const OPERAND: u8 = 2;

/// Sorted by bytes (upper case) for the reader; the tests check it.
pub(crate) const KEYWORDS: &[(&str, u8)] = &[
    ("ACCESSIBLE", 0),
    ("ADD", 0),
    ("AFTER", 0),
    ("ALGORITHM", 0),
    ("ALL", 0),
    ("ALTER", 0),
    ("ANALYZE", 0),
    ("AND", 0),
    ("ANY", 0),
    ("AS", 0),
    ("ASC", 0),
    ("ASENSITIVE", 0),
    ("ATOMIC", 0),
    ("AUTO_INCREMENT", 0),
    ("AVG", CALL_PAREN),
    ("BEFORE", 0),
    ("BEGIN", 0),
    ("BETWEEN", 0),
    ("BIGINT", CALL_PAREN),
    ("BINARY", CALL_PAREN),
    ("BINLOG", 0),
    ("BIT", CALL_PAREN),
    ("BLOB", CALL_PAREN),
    ("BOOL", CALL_PAREN),
    ("BOOLEAN", CALL_PAREN),
    ("BOTH", 0),
    ("BY", 0),
    ("CALL", 0),
    ("CASCADE", 0),
    ("CASE", 0),
    ("CAST", CALL_PAREN),
    ("CHAIN", 0),
    ("CHANGE", 0),
    ("CHAR", CALL_PAREN),
    ("CHARACTER", CALL_PAREN),
    ("CHARSET", 0),
    ("CHECK", 0),
    ("CHECKSUM", 0),
    ("CLOSE", 0),
    ("COLLATE", 0),
    ("COLUMN", 0),
    ("COLUMNS", 0),
    ("COMMENT", 0),
    ("COMMIT", 0),
    ("COMMITTED", 0),
    ("CONCURRENT", 0),
    ("CONDITION", 0),
    ("CONNECTION", 0),
    ("CONSISTENT", 0),
    ("CONSTRAINT", 0),
    ("CONTINUE", 0),
    ("CONVERT", CALL_PAREN),
    ("COUNT", CALL_PAREN),
    ("CREATE", 0),
    ("CROSS", 0),
    ("CUBE", 0),
    ("CUME_DIST", CALL_PAREN),
    ("CURRENT", 0),
    ("CURRENT_DATE", CALL_PAREN | OPERAND),
    ("CURRENT_ROLE", CALL_PAREN | OPERAND),
    ("CURRENT_TIME", CALL_PAREN | OPERAND),
    ("CURRENT_TIMESTAMP", CALL_PAREN | OPERAND),
    ("CURRENT_USER", CALL_PAREN | OPERAND),
    ("CURSOR", 0),
    ("DATABASE", CALL_PAREN),
    ("DATABASES", 0),
    ("DATE", CALL_PAREN),
    ("DATETIME", CALL_PAREN),
    ("DAY", 0),
    ("DAY_HOUR", 0),
    ("DAY_MICROSECOND", 0),
    ("DAY_MINUTE", 0),
    ("DAY_SECOND", 0),
    ("DEALLOCATE", 0),
    ("DEC", CALL_PAREN),
    ("DECIMAL", CALL_PAREN),
    ("DECLARE", 0),
    ("DEFAULT", 0),
    ("DEFINER", 0),
    ("DELAYED", 0),
    ("DELETE", 0),
    ("DENSE_RANK", CALL_PAREN),
    ("DESC", 0),
    ("DESCRIBE", 0),
    ("DETERMINISTIC", 0),
    ("DISABLE", 0),
    ("DISTINCT", 0),
    ("DISTINCTROW", 0),
    ("DIV", 0),
    ("DO", 0),
    ("DOUBLE", CALL_PAREN),
    ("DROP", 0),
    ("DUAL", 0),
    ("DUPLICATE", 0),
    ("EACH", 0),
    ("ELSE", 0),
    ("ELSEIF", 0),
    ("ENABLE", 0),
    ("ENCLOSED", 0),
    ("END", OPERAND),
    ("ENGINE", 0),
    ("ENGINES", 0),
    ("ENUM", CALL_PAREN),
    ("ERRORS", 0),
    ("ESCAPE", 0),
    ("ESCAPED", 0),
    ("EVENT", 0),
    ("EXCEPT", 0),
    ("EXECUTE", 0),
    ("EXISTS", 0),
    ("EXIT", 0),
    ("EXPLAIN", 0),
    ("EXTENDED", 0),
    ("EXTRACT", CALL_PAREN),
    ("FALSE", OPERAND),
    ("FETCH", 0),
    ("FIELDS", 0),
    ("FIRST", 0),
    ("FIRST_VALUE", CALL_PAREN),
    ("FLOAT", CALL_PAREN),
    ("FLOAT4", CALL_PAREN),
    ("FLOAT8", CALL_PAREN),
    ("FLUSH", 0),
    ("FOLLOWING", 0),
    ("FOR", 0),
    ("FORCE", 0),
    ("FOREIGN", 0),
    ("FORMAT", 0),
    ("FROM", 0),
    ("FULL", 0),
    ("FULLTEXT", 0),
    ("FUNCTION", 0),
    ("GENERATED", 0),
    ("GET", 0),
    ("GLOBAL", 0),
    ("GRANT", 0),
    ("GRANTS", 0),
    ("GROUP", 0),
    ("GROUPING", CALL_PAREN),
    ("GROUPS", 0),
    ("GROUP_CONCAT", CALL_PAREN),
    ("HANDLER", 0),
    ("HAVING", 0),
    ("HELP", 0),
    ("HIGH_PRIORITY", 0),
    ("HOUR", 0),
    ("HOUR_MICROSECOND", 0),
    ("HOUR_MINUTE", 0),
    ("HOUR_SECOND", 0),
    ("IDENTIFIED", 0),
    ("IF", CALL_PAREN),
    ("IGNORE", 0),
    ("IN", 0),
    ("INDEX", 0),
    ("INDEXES", 0),
    ("INFILE", 0),
    ("INNER", 0),
    ("INOUT", 0),
    ("INSENSITIVE", 0),
    ("INSERT", CALL_PAREN),
    ("INT", CALL_PAREN),
    ("INT1", CALL_PAREN),
    ("INT2", CALL_PAREN),
    ("INT3", CALL_PAREN),
    ("INT4", CALL_PAREN),
    ("INT8", CALL_PAREN),
    ("INTEGER", CALL_PAREN),
    ("INTERSECT", 0),
    ("INTERVAL", CALL_PAREN),
    ("INTO", 0),
    ("INVOKER", 0),
    ("IS", 0),
    ("ISOLATION", 0),
    ("ITERATE", 0),
    ("JOIN", 0),
    ("JSON", CALL_PAREN),
    ("JSON_TABLE", CALL_PAREN),
    ("KEY", 0),
    ("KEYS", 0),
    ("KILL", 0),
    ("LAG", CALL_PAREN),
    ("LAST", 0),
    ("LAST_VALUE", CALL_PAREN),
    ("LATERAL", 0),
    ("LEAD", CALL_PAREN),
    ("LEADING", 0),
    ("LEAVE", 0),
    ("LEFT", CALL_PAREN),
    ("LEVEL", 0),
    ("LIKE", 0),
    ("LIMIT", 0),
    ("LINEAR", 0),
    ("LINES", 0),
    ("LOAD", 0),
    ("LOCAL", 0),
    ("LOCALTIME", CALL_PAREN | OPERAND),
    ("LOCALTIMESTAMP", CALL_PAREN | OPERAND),
    ("LOCK", 0),
    ("LOCKED", 0),
    ("LOGS", 0),
    ("LONG", 0),
    ("LONGBLOB", CALL_PAREN),
    ("LONGTEXT", CALL_PAREN),
    ("LOOP", 0),
    ("LOW_PRIORITY", 0),
    ("MASTER", 0),
    ("MATCH", CALL_PAREN),
    ("MAX", CALL_PAREN),
    ("MAXVALUE", OPERAND),
    ("MEDIUMBLOB", CALL_PAREN),
    ("MEDIUMINT", CALL_PAREN),
    ("MEDIUMTEXT", CALL_PAREN),
    ("MICROSECOND", 0),
    ("MIDDLEINT", CALL_PAREN),
    ("MIN", CALL_PAREN),
    ("MINUTE", 0),
    ("MINUTE_MICROSECOND", 0),
    ("MINUTE_SECOND", 0),
    ("MOD", CALL_PAREN),
    ("MODE", 0),
    ("MODIFIES", 0),
    ("MONTH", 0),
    ("NAMES", 0),
    ("NATURAL", 0),
    ("NEXT", 0),
    ("NO", 0),
    ("NOT", 0),
    ("NOW", CALL_PAREN),
    ("NOWAIT", 0),
    ("NO_WRITE_TO_BINLOG", 0),
    ("NTH_VALUE", CALL_PAREN),
    ("NTILE", CALL_PAREN),
    ("NUMERIC", CALL_PAREN),
    ("OF", 0),
    ("OFFSET", 0),
    ("ON", 0),
    ("ONLY", 0),
    ("OPEN", 0),
    ("OPTIMIZE", 0),
    ("OPTION", 0),
    ("OPTIONALLY", 0),
    ("OR", 0),
    ("ORDER", 0),
    ("OUT", 0),
    ("OUTER", 0),
    ("OUTFILE", 0),
    ("OVER", 0),
    ("PARTITION", 0),
    ("PERCENT_RANK", CALL_PAREN),
    ("PERSIST", 0),
    ("PERSIST_ONLY", 0),
    ("PLUGINS", 0),
    ("POSITION", CALL_PAREN),
    ("PRECEDING", 0),
    ("PRECISION", 0),
    ("PREPARE", 0),
    ("PRIMARY", 0),
    ("PROCEDURE", 0),
    ("PROCESSLIST", 0),
    ("PURGE", 0),
    ("QUARTER", 0),
    ("QUERY", 0),
    ("QUICK", 0),
    ("RANGE", 0),
    ("RANK", CALL_PAREN),
    ("READ", 0),
    ("READS", 0),
    ("READ_WRITE", 0),
    ("REAL", CALL_PAREN),
    ("RECURSIVE", 0),
    ("REFERENCES", 0),
    ("REGEXP", 0),
    ("RELEASE", 0),
    ("RENAME", 0),
    ("REPAIR", 0),
    ("REPEAT", 0),
    ("REPEATABLE", 0),
    ("REPLACE", CALL_PAREN),
    ("REPLICA", 0),
    ("REQUIRE", 0),
    ("RESET", 0),
    ("RESIGNAL", 0),
    ("RESTRICT", 0),
    ("RETURN", 0),
    ("RETURNING", 0),
    ("RETURNS", 0),
    ("REVOKE", 0),
    ("RIGHT", CALL_PAREN),
    ("RLIKE", 0),
    ("ROLE", 0),
    ("ROLLBACK", 0),
    ("ROW", CALL_PAREN),
    ("ROWS", 0),
    ("ROW_NUMBER", CALL_PAREN),
    ("SAVEPOINT", 0),
    ("SCHEMA", CALL_PAREN),
    ("SCHEMAS", 0),
    ("SECOND", 0),
    ("SECOND_MICROSECOND", 0),
    ("SECURITY", 0),
    ("SELECT", 0),
    ("SENSITIVE", 0),
    ("SEPARATOR", 0),
    ("SERIALIZABLE", 0),
    ("SESSION", 0),
    ("SET", 0),
    ("SHARE", 0),
    ("SHOW", 0),
    ("SIGNAL", 0),
    ("SKIP", 0),
    ("SLAVE", 0),
    ("SMALLINT", CALL_PAREN),
    ("SNAPSHOT", 0),
    ("SOME", 0),
    ("SPATIAL", 0),
    ("SPECIFIC", 0),
    ("SQL", 0),
    ("SQLEXCEPTION", 0),
    ("SQLSTATE", 0),
    ("SQLWARNING", 0),
    ("SQL_BIG_RESULT", 0),
    ("SQL_BUFFER_RESULT", 0),
    ("SQL_CACHE", 0),
    ("SQL_CALC_FOUND_ROWS", 0),
    ("SQL_NO_CACHE", 0),
    ("SQL_SMALL_RESULT", 0),
    ("SSL", 0),
    ("START", 0),
    ("STARTING", 0),
    ("STATUS", 0),
    ("STORED", 0),
    ("STRAIGHT_JOIN", 0),
    ("SUBSTR", CALL_PAREN),
    ("SUBSTRING", CALL_PAREN),
    ("SUM", CALL_PAREN),
    ("SYSTEM", 0),
    ("TABLE", 0),
    ("TABLES", 0),
    ("TEMPORARY", 0),
    ("TERMINATED", 0),
    ("TEXT", CALL_PAREN),
    ("THEN", 0),
    ("TIME", CALL_PAREN),
    ("TIMESTAMP", CALL_PAREN),
    ("TINYBLOB", CALL_PAREN),
    ("TINYINT", CALL_PAREN),
    ("TINYTEXT", CALL_PAREN),
    ("TO", 0),
    ("TRAILING", 0),
    ("TRANSACTION", 0),
    ("TRIGGER", 0),
    ("TRIGGERS", 0),
    ("TRIM", CALL_PAREN),
    ("TRUE", OPERAND),
    ("TRUNCATE", 0),
    ("UNBOUNDED", 0),
    ("UNCOMMITTED", 0),
    ("UNDO", 0),
    ("UNION", 0),
    ("UNIQUE", 0),
    ("UNKNOWN", OPERAND),
    ("UNLOCK", 0),
    ("UNSIGNED", 0),
    ("UPDATE", 0),
    ("USAGE", 0),
    ("USE", 0),
    ("USING", 0),
    ("UTC_DATE", CALL_PAREN | OPERAND),
    ("UTC_TIME", CALL_PAREN | OPERAND),
    ("UTC_TIMESTAMP", CALL_PAREN | OPERAND),
    ("VALUES", 0),
    ("VARBINARY", CALL_PAREN),
    ("VARCHAR", CALL_PAREN),
    ("VARCHARACTER", CALL_PAREN),
    ("VARIABLES", 0),
    ("VARYING", 0),
    ("VIEW", 0),
    ("VIRTUAL", 0),
    ("WARNINGS", 0),
    ("WEEK", 0),
    ("WHEN", 0),
    ("WHERE", 0),
    ("WHILE", 0),
    ("WINDOW", 0),
    ("WITH", 0),
    ("WORK", 0),
    ("WRITE", 0),
    ("XA", 0),
    ("XOR", 0),
    ("YEAR", CALL_PAREN),
    ("YEAR_MONTH", 0),
    ("ZEROFILL", 0),
];

/// The longest keyword, in bytes: longer words are never looked up.
const MAX_KEYWORD_LEN: usize = 24;

/// Slots of the open-addressing index into [`KEYWORDS`] (a power of two, over twice the
/// keywords, so a probe sequence is short).
const SLOTS: usize = 2048;

const FOLD: u64 = 0x2020_2020_2020_2020;

/// A word's first and last (up to) 8 bytes as little-endian words, each byte folded to lower
/// case by `| 0x20`, short words zero-padded (both words are then the same). Among the bytes a
/// word can hold, `| 0x20` only merges the two cases of a letter: a digit, `_` or `$` has no
/// other byte that can share a word with a keyword folding alike, and a byte of 0x80 or more
/// stays so, which no keyword has. So for a word of at most 16 bytes, its length and the two
/// words equal a keyword's exactly when it spells that keyword in some case: a look-up is two
/// 8-byte loads and compares, not a byte-by-byte upper-casing and comparison.
const fn folded_const(word: &[u8]) -> (u64, u64) {
    let n = word.len();
    let mut first = 0u64;
    let mut last = 0u64;
    let off = n.saturating_sub(8);
    let mut i = 0;
    while i < 8 && i < n {
        first |= ((word[i] | 0x20) as u64) << (8 * i);
        last |= ((word[off + i] | 0x20) as u64) << (8 * i);
        i += 1;
    }
    (first, last)
}

/// [`folded_const`] at run time: two loads for a word of 8 bytes or more.
#[inline]
pub(crate) fn folded(word: &[u8]) -> (u64, u64) {
    match (word.first_chunk::<8>(), word.last_chunk::<8>()) {
        (Some(first), Some(last)) => (
            u64::from_le_bytes(*first) | FOLD,
            u64::from_le_bytes(*last) | FOLD,
        ),
        _ => {
            let mut w = 0u64;
            for (i, &b) in word.iter().enumerate() {
                w |= u64::from(b | 0x20) << (8 * i);
            }
            (w, w)
        }
    }
}

/// The folded form of a word shorter than 8 bytes from its bytes loaded as a little-endian
/// word, the bytes after it included (`n` < 8): what [`folded`] gives, without a loop.
#[inline]
pub(crate) fn folded_short(loaded: u64, n: usize) -> u64 {
    (loaded | FOLD) & ((1u64 << (8 * n)) - 1)
}

/// The slot of a word's folded form and length.
#[inline]
const fn slot_of(n: usize, first: u64, last: u64) -> usize {
    let h = (first ^ last.rotate_left(29) ^ n as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (h >> 53) as usize & (SLOTS - 1)
}

/// Each keyword's folded words and length, in [`KEYWORDS`]' order: what a probe compares.
static FOLDED: [(u64, u64, usize); KEYWORDS.len()] = {
    let mut out = [(0u64, 0u64, 0usize); KEYWORDS.len()];
    let mut k = 0;
    while k < KEYWORDS.len() {
        let word = KEYWORDS[k].0.as_bytes();
        let (first, last) = folded_const(word);
        out[k] = (first, last, word.len());
        k += 1;
    }
    out
};

/// `KEYWORDS` index + 1 per slot (0: empty), built at compile time: a lookup costs two loads of
/// the word and about one comparison, not a binary search (this runs for every word of every
/// statement).
static INDEX: [u16; SLOTS] = {
    let mut index = [0u16; SLOTS];
    let mut k = 0;
    while k < KEYWORDS.len() {
        let word = KEYWORDS[k].0.as_bytes();
        let (first, last) = folded_const(word);
        let mut s = slot_of(word.len(), first, last);
        while index[s] != 0 {
            s = (s + 1) & (SLOTS - 1);
        }
        index[s] = (k + 1) as u16;
        k += 1;
    }
    index
};

/// The keyword `word` spells (any case), with its flags. Any bytes: where a keyword has a digit
/// or `_`, which a control byte or DEL folds alike, the candidate is checked byte by byte, so a
/// byte no word holds cannot make a keyword (a letter folds only with its other case).
#[inline]
pub(crate) fn lookup(word: &[u8]) -> Option<(&'static str, u8)> {
    let (first, last) = folded(word);
    let k = index_folded(word, first, last)?;
    let entry = *KEYWORDS.get(k)?;
    let letters_only = LETTERS_ONLY.get(k).copied().unwrap_or(false);
    (letters_only || entry.0.as_bytes().eq_ignore_ascii_case(word)).then_some(entry)
}

/// Per keyword: true if it is letters only (no digit, no `_`).
static LETTERS_ONLY: [bool; KEYWORDS.len()] = {
    let mut out = [false; KEYWORDS.len()];
    let mut k = 0;
    while k < KEYWORDS.len() {
        let name = KEYWORDS[k].0.as_bytes();
        let mut letters = true;
        let mut i = 0;
        while i < name.len() {
            letters &= name[i].is_ascii_alphabetic();
            i += 1;
        }
        out[k] = letters;
        k += 1;
    }
    out
};

/// The index in [`KEYWORDS`] of the keyword `word` spells, given its [`folded`] form: exact for a
/// word of ASCII letters, digits, `_` and `$` (what the digest's fast path gives it); a word
/// with other bytes may get a keyword that differs in them (see [`lookup`]).
#[inline]
pub(crate) fn index_folded(word: &[u8], first: u64, last: u64) -> Option<usize> {
    let n = word.len();
    if n > MAX_KEYWORD_LEN || n == 0 {
        return None;
    }
    let mut s = slot_of(n, first, last);
    loop {
        let k = usize::from(*INDEX.get(s)?).checked_sub(1)?;
        if FOLDED.get(k) == Some(&(first, last, n))
            && (n <= 16 || KEYWORDS.get(k)?.0.as_bytes().eq_ignore_ascii_case(word))
        {
            return Some(k);
        }
        s = (s + 1) & (SLOTS - 1);
    }
}

/// A look-up by binary search of the upper-cased word: what the tests hold [`lookup`] to.
#[cfg(test)]
pub(crate) fn lookup_reference(word: &[u8]) -> Option<(&'static str, u8)> {
    if word.len() > MAX_KEYWORD_LEN || word.is_empty() {
        return None;
    }
    let upper = word.to_ascii_uppercase();
    KEYWORDS
        .binary_search_by(|(k, _)| k.as_bytes().cmp(&upper[..]))
        .ok()
        .and_then(|i| KEYWORDS.get(i).copied())
}

/// Character sets an introducer can name (`_latin1'x'`, `_binary 0x41`), MySQL's and MariaDB's.
const CHARSETS: &[&str] = &[
    "armscii8", "ascii", "big5", "binary", "cp1250", "cp1251", "cp1256", "cp1257", "cp850",
    "cp852", "cp866", "cp932", "dec8", "eucjpms", "euckr", "filename", "gb18030", "gb2312", "gbk",
    "geostd8", "greek", "hebrew", "hp8", "keybcs2", "koi8r", "koi8u", "latin1", "latin2", "latin5",
    "latin7", "macce", "macroman", "sjis", "swe7", "tis620", "ucs2", "ujis", "utf16", "utf16le",
    "utf32", "utf8", "utf8mb3", "utf8mb4",
];

/// True if `word` is `_` followed by a character set name (any case).
pub(crate) fn is_introducer(word: &[u8]) -> bool {
    match word.split_first() {
        Some((b'_', name)) => CHARSETS
            .iter()
            .any(|c| c.as_bytes().eq_ignore_ascii_case(name)),
        _ => false,
    }
}
