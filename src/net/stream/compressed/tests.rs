use crate::wire::protocol::codec::header;
use std::time::Duration;

use tokio::io::{duplex, AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::*;
use crate::wire::protocol::compress::{frame_header, CompressError, Inflated, HEADER_LEN};

const DEADLINE: Duration = Duration::from_secs(30);

fn packet(seq: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = (payload.len() as u32).to_le_bytes()[..3].to_vec();
    v.push(seq);
    v.extend_from_slice(payload);
    v
}

/// A result-set-like stream of rows, compressible as real ones are.
fn rows(n: usize) -> Vec<u8> {
    let mut v = Vec::new();
    for i in 0..n {
        let row = format!("\x05{i:05}\x0bsome text {}", i % 97);
        v.extend(packet((i % 256) as u8, row.as_bytes()));
    }
    v
}

fn stored(seq: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = frame_header(payload.len(), seq, 0).to_vec();
    v.extend_from_slice(payload);
    v
}

/// Reads raw frames until `n` are in; returns (seq, plain payload) per frame.
async fn read_frames(raw: &mut DuplexStream, n: usize) -> Vec<(u8, Vec<u8>)> {
    let mut frames = Vec::new();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while frames.len() < n {
        let mut pos = 0;
        while buf.len() - pos >= HEADER_LEN {
            let h = &buf[pos..pos + HEADER_LEN];
            let len = u32::from_le_bytes([h[0], h[1], h[2], 0]) as usize;
            if buf.len() - pos < HEADER_LEN + len {
                break;
            }
            let mut d = FrameDecoder::new();
            let mut plain = BytesMut::new();
            d.decode(&buf[pos..pos + HEADER_LEN + len], &mut plain)
                .expect("frame decodes");
            frames.push((h[3], plain.to_vec()));
            pos += HEADER_LEN + len;
        }
        buf.drain(..pos);
        if frames.len() >= n {
            break;
        }
        let got = tokio::time::timeout(DEADLINE, raw.read(&mut chunk))
            .await
            .expect("frames within the deadline")
            .expect("read");
        assert!(got > 0, "closed after {} frames", frames.len());
        buf.extend_from_slice(&chunk[..got]);
    }
    assert!(
        buf.is_empty(),
        "{} bytes past the frames expected",
        buf.len()
    );
    frames
}

async fn read_exact_timed<R: AsyncRead + Unpin>(r: &mut R, n: usize) -> Vec<u8> {
    let mut got = vec![0; n];
    tokio::time::timeout(DEADLINE, r.read_exact(&mut got))
        .await
        .expect("data within the deadline")
        .expect("read");
    got
}

#[tokio::test]
async fn plain_bytes_round_trip_both_ways_between_the_roles() {
    let (a, b) = duplex(16 * 1024);
    let mut client_side = Compressed::new(a, Role::Client, BytesMut::new());
    let mut server_side = Compressed::new(b, Role::Server, BytesMut::new());
    let command = packet(0, b"\x03select * from t");
    let answer = rows(20_000);
    let writer = {
        let answer = answer.clone();
        tokio::spawn(async move {
            let got = read_exact_timed(&mut server_side, command_len()).await;
            server_side.write_all(&answer).await.unwrap();
            server_side.flush().await.unwrap();
            (got, server_side)
        })
    };
    client_side.write_all(&command).await.unwrap();
    client_side.flush().await.unwrap();
    let got = read_exact_timed(&mut client_side, answer.len()).await;
    assert!(got == answer, "the answer arrived changed");
    let (got_command, server_side) = writer.await.unwrap();
    assert_eq!(got_command, command);
    let c = server_side.counters();
    assert_eq!(c.plain_written, answer.len() as u64);
    assert!(
        c.wire_written * 3 < c.plain_written,
        "rows compress: {} wire bytes for {}",
        c.wire_written,
        c.plain_written
    );
}

fn command_len() -> usize {
    packet(0, b"\x03select * from t").len()
}

#[tokio::test]
async fn eof_at_a_frame_boundary_is_a_clean_end() {
    let (a, mut raw) = duplex(4096);
    let mut s = Compressed::new(a, Role::Server, BytesMut::new());
    raw.write_all(&stored(0, b"hello")).await.unwrap();
    drop(raw);
    let mut got = Vec::new();
    s.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"hello");
}

#[tokio::test]
async fn eof_inside_a_frame_is_unexpected_eof() {
    let (a, mut raw) = duplex(4096);
    let mut s = Compressed::new(a, Role::Server, BytesMut::new());
    let frame = stored(0, b"hello world");
    raw.write_all(&frame[..frame.len() - 3]).await.unwrap();
    drop(raw);
    let mut got = Vec::new();
    let err = s.read_to_end(&mut got).await.unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
    assert!(
        err.to_string()
            .contains("connection closed in the middle of a compressed frame"),
        "{err}"
    );
    assert_eq!(got, b"hello wo", "bytes before the cut were handed out");
}

#[tokio::test]
async fn a_corrupt_frame_is_invalid_data_carrying_the_compress_error() {
    let (a, mut raw) = duplex(4096);
    let mut s = Compressed::new(a, Role::Server, BytesMut::new());
    let mut bad = frame_header(8, 3, 100).to_vec();
    bad.extend_from_slice(b"garbage!");
    raw.write_all(&bad).await.unwrap();
    let mut buf = [0u8; 64];
    let err = tokio::time::timeout(DEADLINE, s.read(&mut buf))
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    let inner = err
        .get_ref()
        .and_then(|e| e.downcast_ref::<CompressError>())
        .expect("a CompressError inside");
    assert!(
        matches!(inner, CompressError::Corrupt { seq: 3, .. }),
        "{inner}"
    );
}

#[tokio::test]
async fn a_length_mismatch_after_good_bytes_surfaces_on_the_next_read() {
    let (a, mut raw) = duplex(1 << 20);
    let mut s = Compressed::new(a, Role::Server, BytesMut::new());
    // 100 bytes that inflate to more than the 60 the header declares.
    let mut z = flate2::Compress::new(flate2::Compression::default(), true);
    let mut body = vec![0; 200];
    z.compress(&[b'x'; 100], &mut body, flate2::FlushCompress::Finish)
        .unwrap();
    body.truncate(z.total_out() as usize);
    let mut frame = frame_header(body.len(), 1, 60).to_vec();
    frame.extend_from_slice(&body);
    raw.write_all(&frame).await.unwrap();
    let got = read_exact_timed(&mut s, 60).await;
    assert_eq!(got, [b'x'; 60]);
    let mut buf = [0u8; 16];
    let err = s.read(&mut buf).await.unwrap_err();
    let inner = err
        .get_ref()
        .and_then(|e| e.downcast_ref::<CompressError>());
    assert!(
        matches!(
            inner,
            Some(CompressError::LengthMismatch {
                declared: 60,
                inflated: Inflated::MoreThanDeclared,
                ..
            })
        ),
        "{err}"
    );
}

#[tokio::test]
async fn bytes_read_during_the_handshake_are_decoded_first() {
    let (a, mut raw) = duplex(4096);
    let mut already = BytesMut::from(&stored(0, b"first ")[..]);
    already.extend_from_slice(&stored(1, b"sec")[..4]);
    let mut s = Compressed::new(a, Role::Server, already);
    let rest = stored(1, b"sec");
    raw.write_all(&rest[4..]).await.unwrap();
    raw.write_all(&stored(2, b"!")).await.unwrap();
    assert_eq!(read_exact_timed(&mut s, 10).await, b"first sec!");
}

/// Hands out its data one byte per read, with a Pending (and a wake) between reads.
struct OneByteReader {
    data: Vec<u8>,
    pos: usize,
    pending: bool,
}

impl AsyncRead for OneByteReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.pending = !self.pending;
        if self.pending {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        if self.pos < self.data.len() {
            buf.put_slice(&[self.data[self.pos]]);
            self.pos += 1;
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for OneByteReader {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, b: &[u8]) -> Poll<io::Result<usize>> {
        Poll::Ready(Ok(b.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[tokio::test]
async fn a_reader_fed_one_byte_at_a_time_gets_every_byte() {
    let plain = rows(300);
    let mut enc = FrameEncoder::new(Role::Server);
    let mut wire = BytesMut::new();
    for chunk in plain.chunks(1000) {
        enc.encode(chunk, &mut wire);
    }
    wire.extend_from_slice(&frame_header(0, 9, 0));
    let reader = OneByteReader {
        data: wire.to_vec(),
        pos: 0,
        pending: false,
    };
    let mut s = Compressed::new(reader, Role::Client, BytesMut::new());
    let mut got = Vec::new();
    tokio::time::timeout(DEADLINE, s.read_to_end(&mut got))
        .await
        .unwrap()
        .unwrap();
    assert!(got == plain, "got {} bytes of {}", got.len(), plain.len());
    assert_eq!(s.decoder.last_seq(), Some(9));
}

/// Accepts one byte per write, with a Pending (and a wake) before each; keeps what it got.
#[derive(Default)]
struct OneByteWriter {
    got: Vec<u8>,
    pending: bool,
    flushes: usize,
}

impl AsyncWrite for OneByteWriter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        b: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.pending = !self.pending;
        if self.pending {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        self.got.push(b[0]);
        Poll::Ready(Ok(1))
    }
    fn poll_flush(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.flushes += 1;
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl AsyncRead for OneByteWriter {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        _: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[tokio::test]
async fn a_writer_that_takes_one_byte_at_a_time_gets_whole_frames_after_flush() {
    let plain = rows(500);
    let mut s = Compressed::new(OneByteWriter::default(), Role::Server, BytesMut::new());
    tokio::time::timeout(DEADLINE, async {
        for chunk in plain.chunks(777) {
            s.write_all(chunk).await.unwrap();
            s.flush().await.unwrap();
        }
    })
    .await
    .unwrap();
    assert!(s.raw_out.is_empty());
    let inner = s.get_ref();
    assert_eq!(inner.flushes, plain.len().div_ceil(777));
    let mut back = BytesMut::new();
    FrameDecoder::new().decode(&inner.got, &mut back).unwrap();
    assert!(
        back == plain,
        "decoded {} of {} bytes",
        back.len(),
        plain.len()
    );
}

#[tokio::test]
async fn client_role_restarts_at_each_command_and_continues_within_load_data() {
    let (a, mut raw) = duplex(64 * 1024);
    let mut s = Compressed::new(a, Role::Client, BytesMut::new());
    let query = packet(0, b"\x03load data local infile 'f' into table t");
    s.write_all(&query).await.unwrap();
    s.flush().await.unwrap();
    assert_eq!(read_frames(&mut raw, 1).await, vec![(0, query.clone())]);
    // The server asks for the file in frame 1.
    raw.write_all(&stored(1, &packet(1, b"\xfbf")))
        .await
        .unwrap();
    assert_eq!(read_exact_timed(&mut s, 6).await, packet(1, b"\xfbf"));
    let data = [packet(2, b"1,a\n"), packet(3, b"2,b\n"), packet(4, b"")];
    for p in &data {
        s.write_all(p).await.unwrap();
        s.flush().await.unwrap();
    }
    let frames = read_frames(&mut raw, 3).await;
    assert_eq!(frames.iter().map(|f| f.0).collect::<Vec<_>>(), [2, 3, 4]);
    // OK in frame 5; then the next command starts at 0 again.
    raw.write_all(&stored(5, &packet(5, b"\x00\x00\x00\x02\x00\x00\x00")))
        .await
        .unwrap();
    read_exact_timed(&mut s, 11).await;
    let ping = packet(0, b"\x0e");
    s.write_all(&ping).await.unwrap();
    s.flush().await.unwrap();
    assert_eq!(read_frames(&mut raw, 1).await, vec![(0, ping)]);
}

#[tokio::test]
async fn client_role_frames_pipelined_commands_apart() {
    let (a, mut raw) = duplex(64 * 1024);
    let mut s = Compressed::new(a, Role::Client, BytesMut::new());
    raw.write_all(&stored(4, &packet(4, b"\x00\x00\x00\x02\x00\x00\x00")))
        .await
        .unwrap();
    read_exact_timed(&mut s, 11).await;
    let prepare = packet(0, b"\x16select ?");
    let execute = packet(0, b"\x17\xff\xff\xff\xff\x00\x01\x00\x00\x00");
    let mut both = prepare.clone();
    both.extend_from_slice(&execute);
    s.write_all(&both).await.unwrap();
    s.flush().await.unwrap();
    assert_eq!(
        read_frames(&mut raw, 2).await,
        vec![(0, prepare), (0, execute)]
    );
}

#[tokio::test]
async fn server_role_answers_from_the_clients_last_frame() {
    let (a, mut raw) = duplex(64 * 1024);
    let mut s = Compressed::new(a, Role::Server, BytesMut::new());
    let query = packet(0, b"\x03select 1");
    raw.write_all(&stored(0, &query)).await.unwrap();
    assert_eq!(read_exact_timed(&mut s, query.len()).await, query);
    let answer = rows(3);
    for p in answer.chunks(answer.len() / 3 + 1) {
        s.write_all(p).await.unwrap();
        s.flush().await.unwrap();
    }
    let frames = read_frames(&mut raw, 3).await;
    assert_eq!(frames.iter().map(|f| f.0).collect::<Vec<_>>(), [1, 2, 3]);
    // A LOAD DATA upload continues from the last frame written; the answer follows it.
    raw.write_all(&stored(4, &packet(2, b""))).await.unwrap();
    read_exact_timed(&mut s, 4).await;
    s.write_all(&packet(3, b"\x00\x00\x00\x02\x00\x00\x00"))
        .await
        .unwrap();
    s.flush().await.unwrap();
    assert_eq!(read_frames(&mut raw, 1).await[0].0, 5);
}

/// Never accepts a byte; counts how often it was asked.
#[derive(Default)]
struct Stuck {
    asked: usize,
}

impl AsyncWrite for Stuck {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        _: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.asked += 1;
        Poll::Pending
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[tokio::test]
async fn a_peer_that_does_not_read_stalls_the_writer_with_bounded_memory() {
    let mut s = Compressed::with_level(Stuck::default(), Role::Server, BytesMut::new(), 0);
    let plain = whole_packets(b'p', 1 << 20);
    let mut accepted = 0;
    let waker = std::task::Waker::noop();
    let mut cx = Context::from_waker(waker);
    loop {
        match Pin::new(&mut s).poll_write(&mut cx, &plain[accepted..]) {
            Poll::Ready(Ok(n)) => accepted += n,
            Poll::Ready(Err(e)) => panic!("{e}"),
            Poll::Pending => break,
        }
        assert!(
            accepted < plain.len(),
            "everything accepted by a stuck peer"
        );
    }
    assert!(
        accepted <= OUT_HIGH_WATER + WRITE_CHUNK,
        "accepted {accepted}"
    );
    assert!(s.raw_out.len() <= OUT_HIGH_WATER + WRITE_CHUNK + 2 * HEADER_LEN);
    assert!(Pin::new(&mut s).poll_flush(&mut cx).is_pending());
}

#[tokio::test]
async fn shrink_gives_back_buffer_capacity_after_a_large_transfer() {
    // A small pipe: the writer's frames pile up in its out-buffer while the reader lags.
    let (a, b) = duplex(4096);
    let mut already = BytesMut::with_capacity(100 * 1024);
    already.extend_from_slice(&stored(0, b"early"));
    let mut reader = Compressed::new(a, Role::Client, already);
    let mut writer = Compressed::with_level(b, Role::Server, BytesMut::new(), 0);
    let big = whole_packets(b'b', 600 * 1024);
    let task = tokio::spawn(async move {
        writer.write_all(&big).await.unwrap();
        writer.flush().await.unwrap();
        writer
    });
    let mut got = 0;
    let mut buf = vec![0u8; 256 * 1024];
    while got < 5 + 600 * 1024 {
        // (`whole_packets` makes exactly the length asked for.)
        let n = tokio::time::timeout(DEADLINE, reader.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0);
        got += n;
    }
    let mut writer = task.await.unwrap();
    assert!(writer.raw_out.is_empty() && reader.raw_in.is_empty());
    assert!(writer.raw_out.capacity() > KEEP, "the out-buffer grew");
    assert!(reader.raw_in.capacity() > KEEP);
    writer.shrink();
    reader.shrink();
    assert!(
        writer.raw_out.capacity() <= KEEP,
        "{}",
        writer.raw_out.capacity()
    );
    assert!(
        reader.raw_in.capacity() <= KEEP,
        "{}",
        reader.raw_in.capacity()
    );
    // Both go on working after shrinking.
    let more = whole_packets(b'm', 8);
    writer.write_all(&more).await.unwrap();
    writer.flush().await.unwrap();
    assert_eq!(read_exact_timed(&mut reader, 8).await, more);
}

/// `len` bytes of plain packets (1 KiB each, the last one shorter) filled with `fill`: what a
/// server-role stream frames as it is written.
fn whole_packets(fill: u8, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        let payload = (len - out.len() - 4).min(1020);
        out.extend_from_slice(&header(payload, 1));
        out.resize(out.len() + payload, fill);
    }
    out
}

#[test]
fn the_server_role_frames_whole_packets_however_they_are_written() {
    let packets = [whole_packets(b'a', 3000), whole_packets(b'z', 70_000)].concat();
    for cut in [1, 3, 4, 5, 1023, 1024, 1025, 2999, 3000, 3001, 40_000] {
        let mut s = Compressed::with_level(Vec::new(), Role::Server, BytesMut::new(), 0);
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        for piece in [&packets[..cut], &packets[cut..]] {
            let mut at = 0;
            while at < piece.len() {
                match Pin::new(&mut s).poll_write(&mut cx, &piece[at..]) {
                    Poll::Ready(Ok(n)) => at += n,
                    other => panic!("{other:?}"),
                }
            }
        }
        assert!(Pin::new(&mut s).poll_flush(&mut cx).is_ready());
        let wire = s.get_ref().clone();
        let mut at = 0;
        let mut plain = Vec::new();
        while at < wire.len() {
            let len = usize::from(wire[at])
                | usize::from(wire[at + 1]) << 8
                | usize::from(wire[at + 2]) << 16;
            let frame = &wire[at + 7..at + 7 + len];
            // Level 0 stores: the frame holds the plain bytes, and they end at a packet end.
            let mut p = 0;
            while p < frame.len() {
                let n = usize::from(frame[p]) | usize::from(frame[p + 1]) << 8;
                p += 4 + n;
            }
            assert_eq!(p, frame.len(), "cut {cut}: a frame ends inside a packet");
            plain.extend_from_slice(frame);
            at += 7 + len;
        }
        assert_eq!(plain, packets, "cut {cut}");
    }
}

#[test]
fn a_16_mib_packet_to_a_client_goes_out_as_it_is_written_not_once_it_is_whole() {
    // Pseudo-random bytes, which zlib cannot shrink: what goes out tracks what came in.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let payload: Vec<u8> = (0..0xFF_FFFF)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let packet = packet(1, &payload);
    let mut s = Compressed::new(Vec::new(), Role::Server, BytesMut::new());
    let waker = std::task::Waker::noop();
    let mut cx = Context::from_waker(waker);
    let mut at = 0;
    while at < packet.len() {
        match Pin::new(&mut s).poll_write(&mut cx, &packet[at..]) {
            Poll::Ready(Ok(n)) => at += n,
            other => panic!("{other:?}"),
        }
        // What the stream holds back of a packet is bounded (a few hundred KiB), however
        // large the packet.
        let sent = s.get_ref().len();
        assert!(
            at < sent + 512 * 1024,
            "{at} bytes written, {sent} sent: the stream holds the packet back"
        );
    }
    assert!(Pin::new(&mut s).poll_flush(&mut cx).is_ready());
    let mut plain = BytesMut::new();
    FrameDecoder::new().decode(s.get_ref(), &mut plain).unwrap();
    assert!(plain[..] == packet[..], "the packet comes back whole");
}
