//! The packets of a server the proxy is itself: the SQL admin port (`crate::control::admin_sql`).
//!
//! Everywhere else the proxy relays a server's packets; on the admin port nothing stands behind
//! it, so it greets, checks a login against the hash its configuration holds, and answers with
//! OK, EOF and text result sets of its own. It speaks the plainest dialect every client reads:
//! no `CLIENT_DEPRECATE_EOF` (result sets end with EOF packets), no session tracking, no
//! compression, one statement per query.
//!
//! A login is checked the way a server checks it, against what a server stores: for
//! mysql_native_password `SHA1(SHA1(password))`, for MariaDB's client_ed25519 the public key. The
//! proxy never holds the password, so a leaked configuration gives no login to anything.

use ring::digest::{digest, SHA1_FOR_LEGACY_USE_ONLY};

use super::caps;
use super::codec::{header, put_lenenc_bytes, put_lenenc_int, MAX_CHUNK};

/// What the admin port offers: enough for the CLI, the connectors and Grafana, nothing that
/// changes framing (compression, DEPRECATE_EOF, session tracking) or reads files.
pub const ADMIN_CAPABILITIES: u32 = caps::CLIENT_LONG_PASSWORD
    | 2 // CLIENT_FOUND_ROWS
    | 4 // CLIENT_LONG_FLAG
    | caps::CLIENT_CONNECT_WITH_DB
    | caps::CLIENT_PROTOCOL_41
    | caps::CLIENT_TRANSACTIONS
    | caps::CLIENT_SECURE_CONNECTION
    | caps::CLIENT_MULTI_RESULTS
    | caps::CLIENT_PLUGIN_AUTH
    | caps::CLIENT_CONNECT_ATTRS
    | caps::CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA;

/// SERVER_STATUS_AUTOCOMMIT: the admin port has no transactions.
pub const STATUS_AUTOCOMMIT: u16 = 0x0002;
/// utf8mb4_general_ci, the character set every text column is sent in.
const UTF8MB4: u8 = 45;
/// The binary collation numbers are sent in.
const BINARY: u16 = 63;

pub const NATIVE_PLUGIN: &str = "mysql_native_password";
pub const ED25519_PLUGIN: &str = "client_ed25519";

/// A whole packet: header with `seq`, then `payload` (shorter than one chunk).
pub fn packet(seq: u8, payload: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(4 + payload.len());
    p.extend_from_slice(&header(payload.len(), seq));
    p.extend_from_slice(payload);
    p
}

/// A protocol-10 greeting payload offering `capabilities`, with `nonce` as its scramble and
/// mysql_native_password as the plugin.
pub fn greeting(version: &str, connection_id: u32, nonce: &[u8; 20], capabilities: u32) -> Vec<u8> {
    let mut p = Vec::with_capacity(80 + version.len());
    p.push(10);
    p.extend(version.bytes().filter(|&b| b != 0));
    p.push(0);
    p.extend_from_slice(&connection_id.to_le_bytes());
    p.extend_from_slice(&nonce[..8]);
    p.push(0);
    p.extend_from_slice(&(capabilities as u16).to_le_bytes());
    p.push(UTF8MB4);
    p.extend_from_slice(&STATUS_AUTOCOMMIT.to_le_bytes());
    p.extend_from_slice(&((capabilities >> 16) as u16).to_le_bytes());
    p.push(21);
    p.extend_from_slice(&[0; 10]);
    p.extend_from_slice(&nonce[8..]);
    p.push(0);
    p.extend_from_slice(NATIVE_PLUGIN.as_bytes());
    p.push(0);
    p
}

/// An AuthSwitchRequest payload asking for `plugin` with `data` (its nonce).
pub fn auth_switch(plugin: &str, data: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(2 + plugin.len() + data.len() + 1);
    p.push(0xFE);
    p.extend_from_slice(plugin.as_bytes());
    p.push(0);
    p.extend_from_slice(data);
    if plugin == NATIVE_PLUGIN {
        // As servers send it: the 20-byte scramble with its NUL.
        p.push(0);
    }
    p
}

/// Whether `answer` is mysql_native_password's answer to `nonce` for the password whose
/// `SHA1(SHA1(password))` is `stored`: the answer is `SHA1(password) XOR SHA1(nonce + stored)`,
/// so XOR gives back a candidate `SHA1(password)` whose SHA1 must be `stored`.
pub fn native_matches(stored: &[u8; 20], nonce: &[u8], answer: &[u8]) -> bool {
    let Ok(answer) = <&[u8; 20]>::try_from(answer) else {
        return false;
    };
    let mut salted = Vec::with_capacity(nonce.len() + 20);
    salted.extend_from_slice(nonce);
    salted.extend_from_slice(stored);
    let mask = digest(&SHA1_FOR_LEGACY_USE_ONLY, &salted);
    let mut candidate = [0u8; 20];
    for ((c, a), m) in candidate.iter_mut().zip(answer).zip(mask.as_ref()) {
        *c = a ^ m;
    }
    let check = digest(&SHA1_FOR_LEGACY_USE_ONLY, &candidate);
    // Constant time: a timing difference must not tell how much of a guess was right.
    check
        .as_ref()
        .iter()
        .zip(stored)
        .fold(0u8, |acc, (a, b)| acc | (a ^ b))
        == 0
}

/// Whether `answer` is client_ed25519's signature of `nonce` by the key `public` (MariaDB's
/// plugin signs the server's 32-byte nonce with standard Ed25519).
pub fn ed25519_matches(public: &[u8; 32], nonce: &[u8], answer: &[u8]) -> bool {
    let key = ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, public);
    answer.len() == 64 && key.verify(nonce, answer).is_ok()
}

/// An OK payload: no rows affected, no insert id, autocommit, no warnings.
pub fn ok() -> Vec<u8> {
    let mut p = vec![0x00, 0, 0];
    p.extend_from_slice(&STATUS_AUTOCOMMIT.to_le_bytes());
    p.extend_from_slice(&[0, 0]);
    p
}

/// An EOF payload: no warnings, autocommit.
pub fn eof() -> Vec<u8> {
    let mut p = vec![0xFE, 0, 0];
    p.extend_from_slice(&STATUS_AUTOCOMMIT.to_le_bytes());
    p
}

/// How a column's values are typed for the client (text protocol: every value travels as text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    Integer,
    Double,
    Text,
}

impl ColumnType {
    /// MYSQL_TYPE_LONGLONG, MYSQL_TYPE_DOUBLE, MYSQL_TYPE_VAR_STRING.
    fn code(self) -> u8 {
        match self {
            Self::Integer => 0x08,
            Self::Double => 0x05,
            Self::Text => 0xFD,
        }
    }
}

/// A column of an answer: its name and type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    pub kind: ColumnType,
}

/// A whole answer to a query: columns, then rows of text values (NULL as None).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResultSet {
    pub columns: Vec<Column>,
    pub rows: Vec<Vec<Option<String>>>,
}

/// A result set whose one row does not fit one packet (no admin value is that long).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a row of the answer is longer than one packet")]
pub struct RowTooLong;

impl ResultSet {
    /// Columns of text named `names`, no rows yet.
    pub fn text(names: &[&str]) -> Self {
        ResultSet {
            columns: names
                .iter()
                .map(|n| Column {
                    name: (*n).to_owned(),
                    kind: ColumnType::Text,
                })
                .collect(),
            rows: Vec::new(),
        }
    }

    /// The whole answer as packets, the first with sequence id `seq`: column count, column
    /// definitions, EOF, rows, EOF.
    pub fn encode(&self, mut seq: u8) -> Result<Vec<u8>, RowTooLong> {
        let mut out = Vec::new();
        let mut payload = Vec::new();
        let mut push = |out: &mut Vec<u8>, payload: &mut Vec<u8>| {
            out.extend_from_slice(&header(payload.len(), seq));
            out.extend_from_slice(payload);
            payload.clear();
            seq = seq.wrapping_add(1);
        };
        put_lenenc_int(&mut payload, self.columns.len() as u64);
        push(&mut out, &mut payload);
        for c in &self.columns {
            column_definition(&mut payload, c);
            push(&mut out, &mut payload);
        }
        payload.extend_from_slice(&eof());
        push(&mut out, &mut payload);
        for row in &self.rows {
            for value in row {
                match value {
                    Some(v) => put_lenenc_bytes(&mut payload, v.as_bytes()),
                    None => payload.push(0xFB),
                }
            }
            if payload.len() >= MAX_CHUNK {
                return Err(RowTooLong);
            }
            push(&mut out, &mut payload);
        }
        payload.extend_from_slice(&eof());
        push(&mut out, &mut payload);
        Ok(out)
    }
}

/// A ColumnDefinition41 for `c`: catalog `def`, no schema or table.
fn column_definition(p: &mut Vec<u8>, c: &Column) {
    put_lenenc_bytes(p, b"def");
    put_lenenc_bytes(p, b"");
    put_lenenc_bytes(p, b"");
    put_lenenc_bytes(p, b"");
    put_lenenc_bytes(p, c.name.as_bytes());
    put_lenenc_bytes(p, c.name.as_bytes());
    p.push(0x0C);
    let (charset, length, decimals, flags): (u16, u32, u8, u16) = match c.kind {
        // BINARY_FLAG | NUM_FLAG for numbers.
        ColumnType::Integer => (BINARY, 20, 0, 0x0080 | 0x8000),
        ColumnType::Double => (BINARY, 22, 31, 0x0080 | 0x8000),
        ColumnType::Text => (u16::from(UTF8MB4), 1 << 24, 0, 0),
    };
    p.extend_from_slice(&charset.to_le_bytes());
    p.extend_from_slice(&length.to_le_bytes());
    p.push(c.kind.code());
    p.extend_from_slice(&flags.to_le_bytes());
    p.push(decimals);
    p.extend_from_slice(&[0, 0]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::protocol::handshake::{greeting_scramble, parse_greeting};
    use crate::wire::protocol::resultset::{column_count, column_name, is_eof, text_row};
    use mysql_common::auth::plugins::mysql_native_password::scramble_native;

    const NONCE: &[u8; 20] = b"abcdefghijklmnopqrst";

    #[test]
    fn the_greeting_reads_back_as_a_greeting_with_its_nonce() {
        let g = greeting("5.7.99-mysql-lb-admin", 7, NONCE, ADMIN_CAPABILITIES);
        let parsed = parse_greeting(&g).unwrap();
        assert_eq!(parsed.capabilities, ADMIN_CAPABILITIES);
        assert_eq!(greeting_scramble(&g).unwrap(), NONCE.to_vec());
    }

    #[test]
    fn a_native_answer_matches_only_its_password() {
        // SELECT PASSWORD('secret') on MariaDB 10.11 (SHA1(SHA1('secret'))).
        let stored = hex("14E65567ABDB5135D0CFD9A70B3032C179A49EE7");
        let answer = scramble_native(NONCE, b"secret").unwrap();
        assert!(native_matches(&stored, NONCE, &answer));
        let wrong = scramble_native(NONCE, b"secreT").unwrap();
        assert!(!native_matches(&stored, NONCE, &wrong));
        assert!(!native_matches(&stored, b"another nonce 123456", &answer));
        assert!(!native_matches(&stored, NONCE, &answer[..19]));
        assert!(!native_matches(&stored, NONCE, &[]));
    }

    #[test]
    fn an_ed25519_answer_is_a_signature_of_the_nonce() {
        use ring::signature::KeyPair;
        let seed = [7u8; 32];
        let pair = ring::signature::Ed25519KeyPair::from_seed_unchecked(&seed).unwrap();
        let public: [u8; 32] = pair.public_key().as_ref().try_into().unwrap();
        let nonce = [9u8; 32];
        let sig = pair.sign(&nonce);
        assert!(ed25519_matches(&public, &nonce, sig.as_ref()));
        assert!(!ed25519_matches(&public, &[8u8; 32], sig.as_ref()));
        assert!(!ed25519_matches(&public, &nonce, &sig.as_ref()[..63]));
    }

    #[test]
    fn a_result_set_reads_back_with_the_health_checks_reader() {
        let mut rs = ResultSet::text(&["name", "n"]);
        rs.columns[1].kind = ColumnType::Integer;
        rs.rows.push(vec![Some("db1".into()), Some("3".into())]);
        rs.rows.push(vec![None, Some("x".repeat(300))]);
        let bytes = rs.encode(1).unwrap();
        let mut packets = Vec::new();
        let mut pos = 0;
        while pos < bytes.len() {
            let len = usize::from(bytes[pos])
                | usize::from(bytes[pos + 1]) << 8
                | usize::from(bytes[pos + 2]) << 16;
            packets.push((bytes[pos + 3], &bytes[pos + 4..pos + 4 + len]));
            pos += 4 + len;
        }
        let seqs: Vec<u8> = packets.iter().map(|p| p.0).collect();
        assert_eq!(seqs, (1..=7).collect::<Vec<u8>>());
        assert_eq!(column_count(packets[0].1), Some(2));
        assert_eq!(column_name(packets[1].1).as_deref(), Some("name"));
        assert_eq!(column_name(packets[2].1).as_deref(), Some("n"));
        assert!(is_eof(packets[3].1));
        assert_eq!(
            text_row(packets[4].1, 2),
            Some(vec![Some("db1".into()), Some("3".into())])
        );
        assert_eq!(
            text_row(packets[5].1, 2),
            Some(vec![None, Some("x".repeat(300))])
        );
        assert!(is_eof(packets[6].1));
    }

    fn hex(s: &str) -> [u8; 20] {
        let mut out = [0u8; 20];
        for (i, b) in out.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap();
        }
        out
    }
}
