//! Reading a small text-protocol result set whole: column count, column names, rows, EOF.
//!
//! The relay never parses rows (it only finds where a response ends); the health monitor does,
//! for `SHOW REPLICA STATUS`. It asks without `CLIENT_DEPRECATE_EOF`, so a result set is column
//! count, column definitions, EOF, rows, EOF. Every function returns `None` on anything
//! malformed rather than guessing, and never trusts a length beyond the payload it was given.

use super::codec::{lenenc_bytes, lenenc_int};

/// The NULL marker in a text row, where a length-encoded string would start.
const NULL: u8 = 0xFB;

/// An EOF packet: 0xFE and shorter than 9 bytes (a longer 0xFE-headed packet is a row whose first
/// value is a long string, or an OK-as-EOF under `CLIENT_DEPRECATE_EOF`).
pub fn is_eof(payload: &[u8]) -> bool {
    payload.first() == Some(&0xFE) && payload.len() < 9
}

/// The column count that starts a result set.
pub fn column_count(payload: &[u8]) -> Option<u64> {
    lenenc_int(payload, 0).map(|(n, _)| n)
}

/// A text-protocol value at `pos`: `Some((None, next))` for NULL, `None` when malformed.
fn text_value(buf: &[u8], pos: usize) -> Option<(Option<&[u8]>, usize)> {
    if buf.get(pos) == Some(&NULL) {
        return Some((None, pos + 1));
    }
    let (value, next) = lenenc_bytes(buf, pos).ok()?;
    Some((Some(value), next))
}

/// The `name` (alias) of a ColumnDefinition41: its fifth length-encoded string, after catalog,
/// schema, table and original table.
pub fn column_name(payload: &[u8]) -> Option<String> {
    let mut pos = 0;
    for _ in 0..4 {
        pos = text_value(payload, pos)?.1;
    }
    let (name, _) = text_value(payload, pos)?;
    Some(String::from_utf8_lossy(name?).into_owned())
}

/// A text-protocol row of exactly `columns` values (NULL as `None`); bytes left over are an error.
pub fn text_row(payload: &[u8], columns: usize) -> Option<Vec<Option<String>>> {
    let mut pos = 0;
    // A value takes at least one byte, so a longer row cannot be valid: no allocation from a
    // count the payload cannot hold.
    let mut row = Vec::with_capacity(columns.min(payload.len()));
    for _ in 0..columns {
        let (value, next) = text_value(payload, pos)?;
        row.push(value.map(|v| String::from_utf8_lossy(v).into_owned()));
        pos = next;
    }
    (pos == payload.len()).then_some(row)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::protocol::codec::put_lenenc_bytes;

    fn lenenc(s: &str) -> Vec<u8> {
        let mut v = Vec::new();
        put_lenenc_bytes(&mut v, s.as_bytes());
        v
    }

    /// A ColumnDefinition41 as MariaDB 10.11 sends it for `SHOW SLAVE STATUS`.
    fn column_def(name: &str) -> Vec<u8> {
        let mut def = Vec::new();
        for s in ["def", "", "", "", name, ""] {
            def.extend(lenenc(s));
        }
        def.extend_from_slice(&[0x0C, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        def
    }

    #[test]
    fn column_name_is_the_fifth_string() {
        let def = column_def("Seconds_Behind_Master");
        assert_eq!(column_name(&def).as_deref(), Some("Seconds_Behind_Master"));
        assert_eq!(column_name(&def[..10]), None, "cut inside the strings");
        assert_eq!(column_name(&[]), None);
        // A NULL name is no name.
        let mut null_name = column_def("");
        null_name[7] = 0xFB;
        assert_eq!(column_name(&null_name), None);
    }

    #[test]
    fn rows_parse_with_nulls_and_empty_strings() {
        let mut row = lenenc("Yes");
        row.push(0xFB);
        row.extend(lenenc(""));
        assert_eq!(
            text_row(&row, 3),
            Some(vec![Some("Yes".into()), None, Some(String::new())])
        );
        assert_eq!(text_row(&row, 2), None, "bytes left over");
        assert_eq!(text_row(&row, 4), None, "too few values");
        assert_eq!(text_row(&[0x05, b'a'], 1), None, "length past the end");
        assert_eq!(text_row(&[], 0), Some(Vec::new()));
        assert_eq!(
            text_row(&[], usize::MAX),
            None,
            "a huge count allocates nothing"
        );
    }

    #[test]
    fn long_values_use_the_wider_length_forms() {
        let long = "x".repeat(300);
        let row = lenenc(&long);
        assert_eq!(&row[..3], &[0xFC, 0x2C, 0x01]);
        assert_eq!(text_row(&row, 1), Some(vec![Some(long)]));
        // 0xFE claiming 2^64 - 1 bytes.
        let huge = [0xFE, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, b'a'];
        assert_eq!(text_value(&huge, 0), None);
    }

    #[test]
    fn eof_is_short_and_0xfe_headed() {
        assert!(is_eof(&[0xFE, 0, 0, 2, 0]));
        assert!(is_eof(&[0xFE]));
        assert!(
            !is_eof(&[0xFE, 1, 2, 3, 4, 5, 6, 7, 8]),
            "a row of a long string"
        );
        assert!(!is_eof(&[0x00, 0, 0, 2, 0]));
        assert!(!is_eof(&[]));
    }

    #[test]
    fn column_count_reads_the_first_lenenc_int() {
        assert_eq!(column_count(&[0x03]), Some(3));
        assert_eq!(column_count(&[0xFC, 0x00, 0x01]), Some(256));
        assert_eq!(column_count(&[0xFC, 0x00]), None);
        assert_eq!(column_count(&[]), None);
    }
}
