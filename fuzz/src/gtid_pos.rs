//! GTID positions' properties (MariaDB's domains and MySQL's per-source sets): on any bytes, [`GtidPos::parse`] never panics; an error
//! names an offset inside the text and a short message (it echoes at most a byte of it); a
//! position it returns names at most [`MAX_DOMAINS`] domains, prints as text without whitespace
//! that parses back to itself (also spaced out as some MariaDB outputs print it), merges with
//! itself into itself, and covers itself and the empty position.

use mysql_lb::wire::sql::gtid::{GtidPos, MAX_DOMAINS};

/// The whole input is the text of a position.
pub fn gtid_pos(data: &[u8]) {
    let pos = match GtidPos::parse(data) {
        Ok(pos) => pos,
        Err(e) => {
            assert!(e.offset() <= data.len(), "{e} past {} bytes", data.len());
            let message = e.to_string();
            assert!(message.len() < 100, "a long error: {message}");
            return;
        }
    };
    assert!(pos.domains() <= MAX_DOMAINS, "{} domains", pos.domains());
    assert_eq!(pos.is_empty(), pos.domains() == 0);

    let printed = pos.to_string();
    assert!(
        !printed.bytes().any(|b| b.is_ascii_whitespace()),
        "whitespace printed: {printed:?}"
    );
    assert_eq!(
        GtidPos::parse(printed.as_bytes()).as_ref(),
        Ok(&pos),
        "{printed:?} does not parse back"
    );
    let spaced = format!(" {} \n", printed.replace(',', ",\n "));
    assert_eq!(
        GtidPos::parse(spaced.as_bytes()).as_ref(),
        Ok(&pos),
        "{spaced:?}"
    );

    let mut merged = pos.clone();
    merged.merge(&pos);
    assert_eq!(merged, pos, "merged with itself");
    assert!(pos.covers(&pos), "{printed} does not cover itself");
    assert!(pos.covers(&GtidPos::default()));
    assert_eq!(GtidPos::default().covers(&pos), pos.is_empty());
}
