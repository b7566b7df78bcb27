use super::*;

fn sample() -> Vec<Record> {
    vec![
        Record {
            session: 1,
            t_us: 5,
            body: Body::SessionStart(SessionStart {
                flags: STARTED_BEFORE,
                capabilities: 0xA20F,
                charset: 45,
                user: "app".into(),
                schema: "shop".into(),
                pool: "rw".into(),
                backend: "db1".into(),
                client: "127.0.0.1:5000".into(),
            }),
        },
        Record {
            session: 1,
            t_us: 90,
            body: Body::Command(Command {
                seq: 0,
                flags: 0,
                payload: b"\x03SELECT 1".to_vec(),
            }),
        },
        Record {
            session: 1,
            t_us: 120,
            body: Body::Response(Response {
                seq: 0,
                command: 3,
                error: true,
                rows: 1,
                affected: 0,
                latency_us: 30,
                prepared: 0,
                error_code: 1064,
            }),
        },
        Record {
            session: 1,
            t_us: 130,
            body: Body::SessionEnd,
        },
    ]
}

fn file(blocks: &[&[Record]]) -> Vec<u8> {
    let mut out = FileHeader {
        started_unix_us: 77,
        index: 1,
    }
    .encode()
    .to_vec();
    for block in blocks {
        let mut raw = Vec::new();
        for r in *block {
            r.encode(&mut raw);
        }
        out.extend_from_slice(&encode_block(&raw));
    }
    out
}

#[test]
fn records_round_trip_through_blocks() {
    let records = sample();
    let bytes = file(&[&records[..2], &records[2..]]);
    let d = decode_file(&bytes).unwrap();
    assert_eq!(d.header.started_unix_us, 77);
    assert_eq!(d.records, records);
    assert!(d.stopped.is_none());
}

#[test]
fn a_truncated_file_keeps_the_whole_blocks_and_names_where_it_stopped() {
    let records = sample();
    let whole = file(&[&records[..2], &records[2..]]);
    let first_block_end = file(&[&records[..2]]).len();
    for cut in first_block_end..whole.len() {
        let d = decode_file(&whole[..cut]).unwrap();
        assert_eq!(d.records, records[..2]);
        if cut > first_block_end {
            let (at, e) = d.stopped.unwrap();
            assert_eq!(at, first_block_end);
            assert_eq!(e, FormatError::ShortBlock);
        } else {
            assert!(d.stopped.is_none());
        }
    }
}

#[test]
fn a_flipped_byte_stops_at_its_block() {
    let records = sample();
    let mut bytes = file(&[&records[..2], &records[2..]]);
    let second = file(&[&records[..2]]).len();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x55;
    let d = decode_file(&bytes).unwrap();
    assert_eq!(d.records, records[..2]);
    assert_eq!(d.stopped.map(|s| s.0), Some(second));
}

#[test]
fn unknown_record_kinds_are_skipped() {
    let mut raw = Vec::new();
    raw.extend_from_slice(&[99, 3, 0, 0, 0, 1, 2, 3]);
    sample()[1].encode(&mut raw);
    assert_eq!(Record::decode_all(&raw).unwrap(), vec![sample()[1].clone()]);
}

#[test]
fn foreign_files_and_other_versions_are_refused() {
    assert_eq!(decode_file(b"hello").unwrap_err(), FormatError::ShortHeader);
    let mut h = file(&[]);
    h[0] = b'X';
    assert_eq!(decode_file(&h).unwrap_err(), FormatError::NotACapture);
    let mut h = file(&[]);
    h[8] = 9;
    assert_eq!(decode_file(&h).unwrap_err(), FormatError::Version(9));
}

#[test]
fn huge_block_lengths_are_corrupt_not_allocated() {
    let mut bytes = file(&[]);
    bytes.extend_from_slice(&u32::MAX.to_le_bytes());
    bytes.extend_from_slice(&u32::MAX.to_le_bytes());
    bytes.extend_from_slice(&[0; 4]);
    let d = decode_file(&bytes).unwrap();
    assert_eq!(d.stopped, Some((HEADER_LEN, FormatError::BadBlockLength)));
}

#[test]
fn a_command_encoded_from_its_payload_is_the_same_record() {
    let r = &sample()[1];
    let mut a = Vec::new();
    r.encode(&mut a);
    let mut b = Vec::new();
    Record::encode_command(&mut b, 1, 90, (0, 0, b"\x03SELECT 1"));
    assert_eq!(a, b);
}

#[test]
fn a_move_is_a_kind_5_record_naming_the_backend_and_round_trips() {
    let moved = Record {
        session: 1,
        t_us: 100,
        body: Body::Moved {
            backend: "db2".into(),
        },
    };
    let mut raw = Vec::new();
    moved.encode(&mut raw);
    let mut want = vec![KIND_MOVED, 21, 0, 0, 0];
    want.extend_from_slice(&1u64.to_le_bytes());
    want.extend_from_slice(&100u64.to_le_bytes());
    want.extend_from_slice(b"\x03\x00db2");
    assert_eq!(raw, want);

    let mut records = sample();
    records.insert(2, moved);
    let bytes = file(&[&records[..3], &records[3..]]);
    let d = decode_file(&bytes).unwrap();
    assert_eq!(d.records, records);
    assert_eq!(
        d.header,
        FileHeader::decode(&file(&[])).unwrap(),
        "still version 1"
    );
}

#[test]
fn a_reader_that_knows_no_move_keeps_everything_around_it() {
    // What a reader of the first version 1 did with kind 5: skipped it by its length.
    let mut raw = Vec::new();
    sample()[1].encode(&mut raw);
    Record {
        session: 1,
        t_us: 100,
        body: Body::Moved {
            backend: "db2".into(),
        },
    }
    .encode(&mut raw);
    sample()[2].encode(&mut raw);
    let mut kept = Vec::new();
    let mut b = &raw[..];
    while let Some((&kind, rest)) = b.split_first() {
        let len = u32::from_le_bytes(rest[..4].try_into().unwrap()) as usize;
        if kind <= KIND_SESSION_END {
            kept.extend(Record::decode_all(&b[..5 + len]).unwrap());
        }
        b = &rest[4 + len..];
    }
    assert_eq!(kept, sample()[1..3]);
}

#[test]
fn a_move_cut_short_is_a_bad_record() {
    let mut raw = vec![KIND_MOVED, 19, 0, 0, 0];
    raw.extend_from_slice(&[0; 16]);
    raw.extend_from_slice(b"\x09\x00d");
    assert_eq!(Record::decode_all(&raw), Err(FormatError::BadRecord));
}
