use super::*;

/// `select 1` as `mariadb --compress` sent it to MariaDB 10.11: a stored frame, id 0.
const CLIENT_SELECT_1: &str = "0d00000000000009000000" /* header, inner header */;
const CLIENT_SELECT_1_BODY: &[u8] = b"\x03select 1";
/// MariaDB 10.11's answer to it: one compressed frame, id 1, 54 bytes inflating to 58.
const SERVER_SELECT_1: &str = "360000013a0000789c63626060646494606060624e494d6300f20c191878ec1918\
                               814ce64620c1c00a64fc03ca0321030ba32190cb0ae602007b4d049e";
/// The 58 plain bytes: column count, column definition, EOF, row, EOF (inner ids 1 to 5).
const SERVER_SELECT_1_PLAIN: &str = "0200000101011800000203646566000000013100000c3f00010000000381\
                                     0000000005000003fe0000020002000004013105000005fe00000200";
/// zlib's `compress(b"x" * 100)`.
const ZLIB_100_X: &str = "789caba8a03d0000401b2ee1";

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex fixture"))
        .collect()
}

fn client_select_1() -> Vec<u8> {
    let mut v = hex(CLIENT_SELECT_1);
    v.extend_from_slice(CLIENT_SELECT_1_BODY);
    v
}

fn decode_all(d: &mut FrameDecoder, input: &[u8]) -> Result<Vec<u8>, CompressError> {
    let mut out = BytesMut::new();
    let consumed = d.decode(input, &mut out)?;
    assert_eq!(consumed, input.len());
    Ok(out.to_vec())
}

/// A frame compressing `plain` (zlib), declaring `declared` uncompressed bytes.
fn zframe(seq: u8, plain: &[u8], declared: usize) -> Vec<u8> {
    let mut z = Compress::new(Compression::default(), true);
    let mut body = vec![0; plain.len() + 64];
    let st = z.compress(plain, &mut body, FlushCompress::Finish).unwrap();
    assert_eq!(st, Status::StreamEnd);
    body.truncate(z.total_out() as usize);
    let mut v = frame_header(body.len(), seq, declared).to_vec();
    v.extend_from_slice(&body);
    v
}

fn stored(seq: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = frame_header(payload.len(), seq, 0).to_vec();
    v.extend_from_slice(payload);
    v
}

/// Decodes every frame in `frames` and returns (header, payload inflated) per frame.
fn frames_of(bytes: &[u8]) -> Vec<(usize, u8, usize, Vec<u8>)> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < bytes.len() {
        let h = &bytes[pos..pos + HEADER_LEN];
        let len = u32::from_le_bytes([h[0], h[1], h[2], 0]) as usize;
        let ulen = u32::from_le_bytes([h[4], h[5], h[6], 0]) as usize;
        let frame = &bytes[pos..pos + HEADER_LEN + len];
        let plain = decode_all(&mut FrameDecoder::new(), frame).expect("own frame decodes");
        out.push((len, h[3], ulen, plain));
        pos += HEADER_LEN + len;
    }
    out
}

fn packet(seq: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = (payload.len() as u32).to_le_bytes()[..3].to_vec();
    v.push(seq);
    v.extend_from_slice(payload);
    v
}

// ---------------------------------------------------------------------------------------------
// decoding

#[test]
fn stored_frame_from_mariadb_client_decodes_to_its_payload() {
    let mut d = FrameDecoder::new();
    let plain = decode_all(&mut d, &client_select_1()).unwrap();
    assert_eq!(&plain[..4], &[9, 0, 0, 0]);
    assert_eq!(&plain[4..], CLIENT_SELECT_1_BODY);
    assert_eq!(d.last_seq(), Some(0));
    assert!(d.at_boundary());
}

#[test]
fn compressed_frame_from_mariadb_inflates_to_the_result_set() {
    let mut d = FrameDecoder::new();
    let plain = decode_all(&mut d, &hex(SERVER_SELECT_1)).unwrap();
    assert_eq!(plain, hex(SERVER_SELECT_1_PLAIN));
    assert_eq!(d.last_seq(), Some(1));
    assert_eq!(d.frames(), 1);
    assert!(d.at_boundary());
}

#[test]
fn several_frames_in_one_buffer_decode_in_order() {
    let mut input = client_select_1();
    input.extend(hex(SERVER_SELECT_1));
    input.extend(stored(7, b"tail"));
    let mut d = FrameDecoder::new();
    let plain = decode_all(&mut d, &input).unwrap();
    let mut expected = hex("09000000");
    expected.extend_from_slice(CLIENT_SELECT_1_BODY);
    expected.extend(hex(SERVER_SELECT_1_PLAIN));
    expected.extend_from_slice(b"tail");
    assert_eq!(plain, expected);
    assert_eq!((d.last_seq(), d.frames()), (Some(7), 3));
}

#[test]
fn a_split_at_every_offset_decodes_the_same() {
    let mut input = hex(SERVER_SELECT_1);
    input.extend(client_select_1());
    input.extend(zframe(2, &[b'y'; 300], 300));
    let whole = decode_all(&mut FrameDecoder::new(), &input).unwrap();
    for cut in 0..=input.len() {
        let mut d = FrameDecoder::new();
        let mut out = BytesMut::new();
        assert_eq!(d.decode(&input[..cut], &mut out).unwrap(), cut);
        assert_eq!(
            d.decode(&input[cut..], &mut out).unwrap(),
            input.len() - cut
        );
        assert_eq!(out.to_vec(), whole, "cut at {cut}");
        assert!(d.at_boundary());
    }
}

#[test]
fn one_byte_at_a_time_with_one_byte_of_room_decodes_the_same() {
    let mut input = hex(SERVER_SELECT_1);
    input.extend(zframe(2, &[b'z'; 1000], 1000));
    let whole = decode_all(&mut FrameDecoder::new(), &input).unwrap();
    let mut d = FrameDecoder::new();
    let mut got = Vec::new();
    let mut pos = 0;
    let mut rounds = 0;
    while pos < input.len() || !d.at_boundary() {
        let mut room = [0u8; 1];
        let end = (pos + 1).min(input.len());
        let p = d.decode_into(&input[pos..end], &mut room).unwrap();
        pos += p.consumed;
        got.extend_from_slice(&room[..p.written]);
        rounds += 1;
        assert!(rounds < 10 * (input.len() + whole.len()), "no progress");
    }
    assert_eq!(got, whole);
}

#[test]
fn an_empty_frame_gives_nothing_but_its_sequence_id() {
    let mut input = hex("00000005000000");
    input.extend(stored(6, b"ab"));
    let mut d = FrameDecoder::new();
    let mut out = BytesMut::new();
    assert_eq!(
        d.decode(&input[..HEADER_LEN], &mut out).unwrap(),
        HEADER_LEN
    );
    assert!(out.is_empty());
    assert_eq!(d.last_seq(), Some(5));
    assert!(d.at_boundary());
    assert_eq!(decode_all(&mut d, &input[HEADER_LEN..]).unwrap(), b"ab");
    assert_eq!(d.last_seq(), Some(6));
}

#[test]
fn a_header_alone_is_mid_frame_until_its_payload_arrives() {
    let frame = stored(3, b"0123456789");
    let mut d = FrameDecoder::new();
    let mut out = BytesMut::new();
    for n in 1..HEADER_LEN {
        let mut d = FrameDecoder::new();
        assert_eq!(d.decode(&frame[..n], &mut out).unwrap(), n);
        assert!(!d.at_boundary(), "{n} header bytes");
        assert_eq!(d.last_seq(), None);
    }
    assert_eq!(
        d.decode(&frame[..HEADER_LEN], &mut out).unwrap(),
        HEADER_LEN
    );
    assert!(out.is_empty());
    assert!(!d.at_boundary());
    assert_eq!(d.output_pending(), 10);
    assert_eq!(d.last_seq(), Some(3));
}

#[test]
fn bad_zlib_data_is_corrupt() {
    let mut frame = frame_header(12, 4, 100).to_vec();
    frame.extend_from_slice(b"not zlib!!!!");
    let err = decode_all(&mut FrameDecoder::new(), &frame).unwrap_err();
    assert!(
        matches!(err, CompressError::Corrupt { seq: 4, .. }),
        "{err}"
    );
}

#[test]
fn a_zlib_stream_cut_short_is_corrupt() {
    let z = hex(ZLIB_100_X);
    let mut frame = frame_header(z.len() - 4, 4, 100).to_vec();
    frame.extend_from_slice(&z[..z.len() - 4]);
    let err = decode_all(&mut FrameDecoder::new(), &frame).unwrap_err();
    assert!(
        matches!(err, CompressError::Corrupt { seq: 4, .. }),
        "{err}"
    );
}

#[test]
fn a_compressed_frame_with_no_payload_is_corrupt() {
    let err = decode_all(&mut FrameDecoder::new(), &frame_header(0, 2, 10)).unwrap_err();
    assert!(
        matches!(err, CompressError::Corrupt { seq: 2, .. }),
        "{err}"
    );
}

#[test]
fn declared_length_too_large_is_a_mismatch() {
    let z = hex(ZLIB_100_X);
    let mut frame = frame_header(z.len(), 9, 101).to_vec();
    frame.extend_from_slice(&z);
    let err = decode_all(&mut FrameDecoder::new(), &frame).unwrap_err();
    assert_eq!(
        err,
        CompressError::LengthMismatch {
            seq: 9,
            declared: 101,
            inflated: Inflated::Exactly(100)
        }
    );
}

#[test]
fn declared_length_too_small_is_a_mismatch() {
    let z = hex(ZLIB_100_X);
    let mut frame = frame_header(z.len(), 9, 99).to_vec();
    frame.extend_from_slice(&z);
    let err = decode_all(&mut FrameDecoder::new(), &frame).unwrap_err();
    assert_eq!(
        err,
        CompressError::LengthMismatch {
            seq: 9,
            declared: 99,
            inflated: Inflated::MoreThanDeclared
        }
    );
}

#[test]
fn a_zip_bomb_inflates_no_further_than_declared() {
    let bomb = zframe(1, &vec![0u8; 8 << 20], 100);
    assert!(bomb.len() < 16 * 1024, "the bomb is small: {}", bomb.len());
    let mut d = FrameDecoder::new();
    let mut out = BytesMut::new();
    let err = d.decode(&bomb, &mut out).unwrap_err();
    assert!(matches!(
        err,
        CompressError::LengthMismatch {
            inflated: Inflated::MoreThanDeclared,
            ..
        }
    ));
    assert_eq!(out.len(), 100, "only the declared bytes came out");
    assert!(out.capacity() < 128 * 1024, "capacity {}", out.capacity());
}

#[test]
fn an_error_sticks() {
    let mut frame = frame_header(4, 4, 10).to_vec();
    frame.extend_from_slice(b"junk");
    let mut d = FrameDecoder::new();
    let first = decode_all(&mut d, &frame).unwrap_err();
    let again = d
        .decode_into(&client_select_1(), &mut [0u8; 64])
        .unwrap_err();
    assert_eq!(first, again);
}

#[test]
fn bytes_after_the_end_of_the_zlib_stream_are_ignored() {
    let mut z = hex(ZLIB_100_X);
    z.extend_from_slice(b"trailing");
    let mut frame = frame_header(z.len(), 1, 100).to_vec();
    frame.extend_from_slice(&z);
    frame.extend(stored(2, b"next"));
    let plain = decode_all(&mut FrameDecoder::new(), &frame).unwrap();
    let mut expected = vec![b'x'; 100];
    expected.extend_from_slice(b"next");
    assert_eq!(plain, expected);
}

#[test]
fn a_large_payload_in_full_size_stored_frames_decodes_whole() {
    let big: Vec<u8> = (0..MAX_FRAME_PAYLOAD + 10)
        .map(|i| (i % 251) as u8)
        .collect();
    let mut input = stored(0, &big[..MAX_FRAME_PAYLOAD]);
    input.extend(stored(1, &big[MAX_FRAME_PAYLOAD..]));
    let mut d = FrameDecoder::new();
    assert_eq!(decode_all(&mut d, &input).unwrap(), big);
    assert_eq!((d.frames(), d.last_seq()), (2, Some(1)));
}

// ---------------------------------------------------------------------------------------------
// encoding

fn encode(e: &mut FrameEncoder, plain: &[u8]) -> Vec<(usize, u8, usize, Vec<u8>)> {
    let mut out = BytesMut::new();
    e.encode(plain, &mut out);
    frames_of(&out)
}

#[test]
fn payloads_under_50_bytes_are_stored() {
    let mut e = FrameEncoder::new(Role::Server);
    let plain = packet(1, &[b'a'; 45]);
    assert_eq!(plain.len(), 49);
    assert_eq!(encode(&mut e, &plain), vec![(49, 0, 0, plain)]);
}

#[test]
fn compressible_payloads_are_compressed() {
    let mut e = FrameEncoder::new(Role::Server);
    let plain = packet(1, &[b'a'; 46]);
    let frames = encode(&mut e, &plain);
    assert_eq!(frames.len(), 1);
    let (len, _, ulen, ref got) = frames[0];
    assert_eq!(ulen, 50);
    assert!(len < 50, "compressed to {len}");
    assert_eq!(got, &plain);
}

#[test]
fn incompressible_payloads_are_stored() {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let noise: Vec<u8> = (0..4000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let mut e = FrameEncoder::new(Role::Server);
    let frames = encode(&mut e, &noise);
    assert_eq!(frames, vec![(4000, 0, 0, noise)]);
}

#[test]
fn level_zero_stores_everything() {
    let mut e = FrameEncoder::with_level(Role::Server, 0);
    let plain = vec![0u8; 1000];
    assert_eq!(encode(&mut e, &plain), vec![(1000, 0, 0, plain)]);
}

#[test]
fn more_than_16_mib_is_cut_into_frames_of_at_most_0xffffff() {
    let plain = vec![7u8; MAX_FRAME_PAYLOAD + 100];
    let mut e = FrameEncoder::new(Role::Server);
    e.on_frame_read(3);
    let frames = encode(&mut e, &plain);
    assert_eq!(frames.len(), 2);
    assert_eq!((frames[0].1, frames[0].2), (4, MAX_FRAME_PAYLOAD));
    assert_eq!((frames[1].1, frames[1].2), (5, 100));
    let joined: Vec<u8> = frames.into_iter().flat_map(|f| f.3).collect();
    assert_eq!(joined, plain);
}

#[test]
fn server_role_continues_from_the_clients_last_frame() {
    let mut e = FrameEncoder::new(Role::Server);
    e.on_frame_read(0);
    let seqs: Vec<u8> = (0..3)
        .flat_map(|_| encode(&mut e, &packet(1, b"ok")))
        .map(|f| f.1)
        .collect();
    assert_eq!(seqs, [1, 2, 3]);
    e.on_frame_read(5);
    assert_eq!(encode(&mut e, &packet(1, b"ok"))[0].1, 6);
    e.on_frame_read(255);
    assert_eq!(encode(&mut e, &packet(1, b"ok"))[0].1, 0, "wraps");
}

#[test]
fn client_role_starts_each_command_at_zero() {
    let mut e = FrameEncoder::new(Role::Client);
    e.on_frame_read(7);
    // Two commands pipelined in one write: a frame each, both id 0.
    let mut plain = packet(0, b"\x03select 1");
    plain.extend(packet(0, b"\x0e"));
    let frames = encode(&mut e, &plain);
    assert_eq!(frames.len(), 2);
    assert_eq!(
        (frames[0].1, &frames[0].3[..]),
        (0, &packet(0, b"\x03select 1")[..])
    );
    assert_eq!(
        (frames[1].1, &frames[1].3[..]),
        (0, &packet(0, b"\x0e")[..])
    );
}

#[test]
fn client_role_continues_from_the_server_within_load_data() {
    let mut e = FrameEncoder::new(Role::Client);
    assert_eq!(
        encode(&mut e, &packet(0, b"\x03load data local ..."))[0].1,
        0
    );
    e.on_frame_read(1); // the server's 0xFB request
    let seqs: Vec<u8> = [packet(2, b"a,1\n"), packet(3, b"b,2\n"), packet(4, b"")]
        .iter()
        .flat_map(|p| encode(&mut e, p))
        .map(|f| f.1)
        .collect();
    assert_eq!(seqs, [2, 3, 4]);
}

#[test]
fn client_role_does_not_restart_when_inner_ids_wrap_in_an_upload() {
    let mut e = FrameEncoder::new(Role::Client);
    e.on_frame_read(1);
    let mut plain = packet(255, b"row\n");
    plain.extend(packet(0, b"row\n"));
    plain.extend(packet(1, b""));
    let frames = encode(&mut e, &plain);
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert_eq!(frames[0].1, 2);
    // Once the server answered, an id-0 packet is a new command again.
    e.on_frame_read(3);
    assert_eq!(encode(&mut e, &packet(0, b"\x0e"))[0].1, 0);
}

#[test]
fn client_role_keeps_continuation_chunks_in_the_command() {
    // Connector/C writes every chunk of a long command with inner id 0 when compressing.
    let mut plain = packet(0, &vec![b'q'; MAX_CHUNK]);
    plain[4] = 0x03;
    plain.extend(packet(0, b"tail"));
    let mut e = FrameEncoder::with_level(Role::Client, 0);
    e.on_frame_read(9);
    let frames = encode(&mut e, &plain);
    let seqs: Vec<u8> = frames.iter().map(|f| f.1).collect();
    assert_eq!(seqs, [0, 1], "one command: ids count on from 0");
    let joined: Vec<u8> = frames.into_iter().flat_map(|f| f.3).collect();
    assert_eq!(joined, plain);
}

#[test]
fn client_role_holds_back_a_split_header_until_it_is_whole() {
    let mut e = FrameEncoder::new(Role::Client);
    e.on_frame_read(4);
    let first = packet(5, b"auth answer");
    let second = packet(0, b"\x0e");
    let mut plain = first.clone();
    plain.extend_from_slice(&second[..2]);
    let frames = encode(&mut e, &plain);
    assert_eq!(frames, vec![(first.len(), 5, 0, first)]);
    assert_eq!(e.held_back(), 2);
    let frames = encode(&mut e, &second[2..]);
    assert_eq!(frames, vec![(second.len(), 0, 0, second.clone())]);
    assert_eq!(e.held_back(), 0);
}

#[test]
fn client_role_split_at_every_offset_starts_each_command_in_a_frame_of_id_0() {
    let mut plain = packet(0, &[b's'; 70]);
    plain.extend(packet(0, b"\x0e"));
    plain.extend(packet(0, &[b't'; 20]));
    let command_starts = [0, 74, 79];
    for cut in 0..=plain.len() {
        let mut e = FrameEncoder::new(Role::Client);
        e.on_frame_read(200);
        let mut out = BytesMut::new();
        e.encode(&plain[..cut], &mut out);
        e.encode(&plain[cut..], &mut out);
        assert_eq!(e.held_back(), 0);
        let frames = frames_of(&out);
        let mut at = 0;
        let mut prev: Option<u8> = None;
        for (_, seq, _, bytes) in &frames {
            if command_starts.contains(&at) {
                assert_eq!(*seq, 0, "cut {cut}: a command starting at {at}");
            } else {
                assert_eq!(Some(*seq), prev.map(|p| p + 1), "cut {cut}: frame at {at}");
            }
            at += bytes.len();
            prev = Some(*seq);
        }
        let joined: Vec<u8> = frames.into_iter().flat_map(|f| f.3).collect();
        assert_eq!(joined, plain, "cut {cut}");
    }
}

#[test]
fn finish_frames_a_header_that_never_completed() {
    let mut e = FrameEncoder::new(Role::Client);
    let mut out = BytesMut::new();
    e.encode(&[1, 0], &mut out);
    assert!(out.is_empty());
    e.finish(&mut out);
    assert_eq!(frames_of(&out), vec![(2, 0, 0, vec![1, 0])]);
}

#[test]
fn encoded_frames_decode_back_in_both_roles() {
    let mut plain = Vec::new();
    for i in 0..200u32 {
        plain.extend(packet(
            (i % 7) as u8,
            format!("row {i} with some text").as_bytes(),
        ));
    }
    for role in [Role::Server, Role::Client] {
        let mut e = FrameEncoder::new(role);
        let mut d = FrameDecoder::new();
        let mut wire = BytesMut::new();
        for chunk in plain.chunks(333) {
            e.encode(chunk, &mut wire);
        }
        e.finish(&mut wire);
        if role == Role::Server {
            assert!(wire.len() < plain.len() / 2, "{} bytes", wire.len());
        }
        assert_eq!(decode_all(&mut d, &wire).unwrap(), plain, "{role:?}");
    }
}

#[test]
fn shrink_drops_zlib_state_and_encoding_goes_on() {
    let mut e = FrameEncoder::new(Role::Server);
    let mut d = FrameDecoder::new();
    let plain = vec![b'r'; 500];
    for _ in 0..2 {
        let mut wire = BytesMut::new();
        e.encode(&plain, &mut wire);
        assert_eq!(decode_all(&mut d, &wire).unwrap(), plain);
        assert!(e.deflate.is_some() && d.inflate.is_some());
        e.shrink();
        d.shrink();
        assert!(e.deflate.is_none() && d.inflate.is_none());
    }
}

#[test]
fn a_large_compressed_frame_fed_in_socket_sized_reads_decodes() {
    // A 16 MiB-class frame as mysql_async and libmariadb send it (pattern data, zlib default),
    // arriving in 64 KiB reads with 8 KiB of output room at a time, as the relay reads it.
    let plain: Vec<u8> = (0..(MAX_FRAME_PAYLOAD as u32))
        .map(|i| (i % 251) as u8 ^ (i >> 13) as u8)
        .collect();
    let frame = zframe(0, &plain, plain.len());
    assert_decodes_in_socket_sized_reads(&frame, &plain);
}

/// Decodes `wire` fed in 64 KiB reads with 8 KiB of output room at a time, as the relay reads a
/// leg, and checks it gives `plain`.
fn assert_decodes_in_socket_sized_reads(wire: &[u8], plain: &[u8]) {
    let mut d = FrameDecoder::new();
    let mut got = Vec::with_capacity(plain.len());
    let mut out = vec![0u8; 8192];
    for input in wire.chunks(65536) {
        let mut at = 0;
        loop {
            let p = d.decode_into(&input[at..], &mut out).expect("decodes");
            got.extend_from_slice(&out[..p.written]);
            at += p.consumed;
            if p.written == 0 && at == input.len() {
                break;
            }
        }
    }
    assert_eq!(got.len(), plain.len());
    assert!(got == plain);
    assert!(d.at_boundary());
}

#[test]
fn mysql_commons_frames_of_a_20_mib_packet_decode() {
    let plain: Vec<u8> = (0..(20u32 << 20)).map(|i| (i % 251) as u8).collect();
    let mut src = BytesMut::from(&plain[..]);
    let mut dst = BytesMut::new();
    mysql_common::proto::codec::compress(
        0,
        flate2::Compression::default(),
        64 << 20,
        &mut src,
        &mut dst,
    )
    .unwrap();
    assert_decodes_in_socket_sized_reads(&dst, &plain);
}
