//! Command-phase tracking: which command each response answers and where it ends.
//!
//! Where a response ends depends on the command that asked for it (one rule per kind of command,
//! see `Expect`: generic result sets that end on an OK/EOF without SERVER_MORE_RESULTS_EXISTS,
//! cursors, prepare, one-packet replies, LOCAL INFILE, change-user's auth exchange, binlog
//! streams), and clients may pipeline, so the tracker keeps a FIFO of outstanding commands. It
//! sees both directions of one session as the relay forwards them, classifies each logical packet
//! from its first bytes only, and yields one [`Completed`] per finished command for latency
//! metrics. The only bytes held back are a short command that may still turn out to be a KILL
//! (see [`may_become_kill`]), so the KILL mapping sees it whole.
//! Violations it is sure of (sequence ids out of order, oversized packets, responses that cannot
//! be parsed) are errors that say which side sent them; the relay ends the session on them.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

pub use super::statement::{
    is_sql_space, may_be_kill, may_become_kill, statement_start, CutInComment, MAX_KILL_PACKET,
};

use thiserror::Error;

use super::caps::{
    Negotiated, CLIENT_DEPRECATE_EOF, MARIADB_CLIENT_PROGRESS, SERVER_MORE_RESULTS_EXISTS,
    SERVER_STATUS_CURSOR_EXISTS,
};
use super::cleartext::{in_change_user, in_change_user_reply, Exposure, MAX_CHANGE_USER_CHECKED};
use super::codec::{lenenc_int, FrameError, Packet, PacketScanner, Renumber, MAX_CHUNK};

/// Command bytes the tracker needs to tell apart.
pub mod cmd {
    pub const QUIT: u8 = 0x01;
    pub const INIT_DB: u8 = 0x02;
    pub const QUERY: u8 = 0x03;
    pub const FIELD_LIST: u8 = 0x04;
    pub const STATISTICS: u8 = 0x09;
    pub const PROCESS_INFO: u8 = 0x0A;
    pub const PROCESS_KILL: u8 = 0x0C;
    pub const CHANGE_USER: u8 = 0x11;
    pub const BINLOG_DUMP: u8 = 0x12;
    pub const STMT_PREPARE: u8 = 0x16;
    pub const STMT_EXECUTE: u8 = 0x17;
    pub const STMT_SEND_LONG_DATA: u8 = 0x18;
    pub const STMT_CLOSE: u8 = 0x19;
    pub const STMT_FETCH: u8 = 0x1C;
    pub const BINLOG_DUMP_GTID: u8 = 0x1E;
    pub const STMT_BULK_EXECUTE: u8 = 0xFA;
}

/// The bounded set of command kinds metrics are labelled with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CommandKind {
    Query,
    Prepare,
    Execute,
    Other,
}

impl CommandKind {
    pub fn of(command: u8) -> Self {
        match command {
            cmd::QUERY => Self::Query,
            cmd::STMT_PREPARE => Self::Prepare,
            cmd::STMT_EXECUTE | cmd::STMT_BULK_EXECUTE | cmd::STMT_FETCH => Self::Execute,
            _ => Self::Other,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Query => "query",
            Self::Prepare => "prepare",
            Self::Execute => "execute",
            Self::Other => "other",
        }
    }

    pub const ALL: [CommandKind; 4] = [Self::Query, Self::Prepare, Self::Execute, Self::Other];
}

/// One command answered in full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completed {
    pub command: u8,
    /// From the last byte written to the backend to the end of the response.
    pub latency: Duration,
    /// From the last byte written to the first response packet.
    pub first_byte: Duration,
}

impl Completed {
    pub fn kind(&self) -> CommandKind {
        CommandKind::of(self.command)
    }
}

/// What the client's bytes contained, for the relay to act on.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ClientScan {
    /// A COM_QUIT was seen: the client is leaving politely.
    pub quit: bool,
    /// Commands added to the queue by this read.
    pub commands: usize,
    /// Bytes at the end of the buffer to hold back: the start of a short command that may be a
    /// KILL, not whole yet. The tracker has not counted them; the caller forwards what precedes
    /// them, keeps them, and passes them again at the front of the next buffer.
    pub held: usize,
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum TrackError {
    #[error("client: {0}")]
    ClientFrame(FrameError),
    #[error("backend: {0}")]
    BackendFrame(FrameError),
    #[error("client sent a packet with sequence id {got} where {expected} was expected")]
    ClientOutOfOrder {
        expected: u8,
        got: u8,
        start: Option<usize>,
    },
    #[error("backend sent a packet with sequence id {got} where {expected} was expected")]
    BackendOutOfOrder {
        expected: u8,
        got: u8,
        start: Option<usize>,
    },
    #[error("backend sent a malformed {what} (first byte {first:#04x})")]
    BackendMalformed {
        what: &'static str,
        first: u8,
        start: Option<usize>,
    },
    #[error("client pipelined more than {max} commands without reading a response")]
    TooManyPending { max: usize, start: Option<usize> },
    #[error(
        "{exposure} during COM_CHANGE_USER, and the backend leg is plaintext TCP leaving this host"
    )]
    CleartextPassword {
        exposure: Exposure,
        start: Option<usize>,
    },
}

impl TrackError {
    /// Offset in the scanned buffer where the offending packet began, if it began there.
    pub fn start(&self) -> Option<usize> {
        match *self {
            Self::ClientFrame(e) | Self::BackendFrame(e) => match e {
                FrameError::TooLarge { start, .. } | FrameError::ChunkOutOfOrder { start, .. } => {
                    start
                }
            },
            Self::ClientOutOfOrder { start, .. }
            | Self::BackendOutOfOrder { start, .. }
            | Self::BackendMalformed { start, .. }
            | Self::TooManyPending { start, .. }
            | Self::CleartextPassword { start, .. } => start,
        }
    }

    /// True when the client's bytes were at fault.
    pub fn is_client(&self) -> bool {
        match self {
            Self::ClientFrame(_) | Self::ClientOutOfOrder { .. } | Self::TooManyPending { .. } => {
                true
            }
            Self::CleartextPassword { exposure, .. } => exposure.from_client(),
            _ => false,
        }
    }
}

/// Generous: pipelining clients send a handful; this only bounds a misbehaving one.
pub const MAX_PENDING: usize = 4096;

/// What the next server packet of the head command can be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// OK, ERR, LOCAL INFILE request or a result set's column count.
    Response,
    ColumnDefs(u64),
    ColumnsEof,
    Rows,
    PrepareOk,
    PrepareParams {
        left: u16,
        columns: u16,
    },
    PrepareParamsEof {
        columns: u16,
    },
    PrepareColumns(u16),
    PrepareColumnsEof,
    /// Any one packet ends it.
    Single,
    /// Column definitions until EOF/ERR (COM_FIELD_LIST).
    FieldList,
    /// Auth exchange of COM_CHANGE_USER until OK/ERR.
    Auth,
    /// Binlog events until EOF/ERR.
    Binlog,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClientMode {
    Commands,
    /// Streaming a LOCAL INFILE file until an empty packet.
    Infile,
    /// Answering COM_CHANGE_USER's auth exchange.
    Auth,
    /// Inside a binlog stream (semi-sync acknowledgements flow upstream).
    Binlog,
}

#[derive(Debug, Clone)]
struct Pending {
    command: u8,
    expect: Expect,
    /// Sequence id the next packet of this exchange must carry (either direction).
    next_seq: u8,
    written_at: Option<Instant>,
    first_byte_at: Option<Instant>,
}

/// Tracks one session's command phase.
#[derive(Debug)]
pub struct Tracker {
    caps: Negotiated,
    client: PacketScanner,
    max_client_packet: u64,
    server: PacketScanner,
    queue: VecDeque<Pending>,
    client_mode: ClientMode,
    /// Offsets of the KILL candidates of the last client buffer; reused, so only a session that
    /// sends a KILL ever allocates it.
    kills: Vec<(usize, usize)>,
    /// Packets the backend sent with no command outstanding (e.g. a shutdown notice).
    pub unsolicited: u64,
    /// Rewrite, rather than refuse, sequence ids off the plain numbering, per direction (see
    /// [`renumber`](Self::renumber)).
    renumber_client: bool,
    renumber_server: bool,
    /// A COM_CHANGE_USER reply that makes the client send its password in clear is an error
    /// (see [`guard_cleartext`](Self::guard_cleartext)).
    guard_cleartext: bool,
}

impl Tracker {
    pub fn new(caps: Negotiated, max_packet_size: u64) -> Self {
        Self {
            caps,
            client: PacketScanner::new(max_packet_size),
            max_client_packet: max_packet_size,
            // The backend enforces its own max_allowed_packet; result rows may legitimately be
            // large, so only the protocol's own limit applies to what it sends.
            server: PacketScanner::new(u64::MAX),
            queue: VecDeque::new(),
            client_mode: ClientMode::Commands,
            kills: Vec::new(),
            unsolicited: 0,
            renumber_client: false,
            renumber_server: false,
            guard_cleartext: false,
        }
    }

    /// Per direction, whether [`on_client_mut`](Self::on_client_mut) and
    /// [`on_server_mut`](Self::on_server_mut) rewrite sequence ids to the plain protocol's
    /// numbering instead of refusing the ones off it. For a direction whose source is a
    /// compressed leg: its inner ids restart from the frame counter at every flush, and compressed
    /// readers never check them, so rewriting is harmless even when the destination compresses.
    /// A command's first packet gets 0, every later packet of its exchange (either direction) the
    /// previous packet's last id + 1, every continuation chunk the previous chunk's + 1. Packets
    /// nothing is expected of are left as sent: server packets with no command outstanding, and
    /// the client's inside a binlog stream.
    pub fn renumber(&mut self, client: bool, server: bool) {
        self.renumber_client = client;
        self.renumber_server = server;
    }

    /// From now on a backend packet in COM_CHANGE_USER's auth exchange that would make the
    /// client send its password in clear (a switch to a cleartext plugin, caching_sha2's full
    /// authentication) is a [`TrackError::CleartextPassword`]: the relay stops before it. For
    /// sessions whose client leg is secure and whose backend leg is plaintext TCP leaving the
    /// host, as their connection phase was guarded.
    pub fn guard_cleartext(&mut self) {
        self.guard_cleartext = true;
    }

    /// Commands sent and not yet fully answered.
    pub fn pending(&self) -> usize {
        self.queue.len()
    }

    /// True when no command is outstanding and both directions sit between packets: a safe point
    /// to close a session or to inject a packet of our own.
    pub fn idle(&self) -> bool {
        self.queue.is_empty() && self.client.at_boundary() && self.server.at_boundary()
    }

    /// True when everything forwarded to the client so far ends on a packet boundary.
    pub fn server_at_boundary(&self) -> bool {
        self.server.at_boundary()
    }

    /// The sequence id a packet injected towards the client now should carry.
    pub fn next_server_seq(&self) -> u8 {
        self.queue.front().map_or(1, |p| p.next_seq)
    }

    /// True while the head command's response will not end without more from the client: the
    /// server waits for a LOCAL INFILE upload or an auth answer, or streams a binlog.
    pub fn open_ended(&self) -> bool {
        matches!(
            self.client_mode,
            ClientMode::Infile | ClientMode::Auth | ClientMode::Binlog
        )
    }

    /// Whole command packets of the last [`on_client`](Self::on_client) buffer that may be a
    /// KILL, as (start, end) offsets in it, in order: the session may rewrite them (see
    /// `crate::kill`).
    pub fn kill_candidates(&self) -> &[(usize, usize)] {
        &self.kills
    }

    /// Scans bytes read from the client (before they are written to the backend). Bytes the
    /// returned [`ClientScan::held`] counts were not taken: pass them again, first, next time.
    /// Read-only, so it never renumbers: ids off the plain numbering are errors.
    pub fn on_client(&mut self, buf: &[u8]) -> Result<ClientScan, TrackError> {
        let (client, mut side) = self.client_side();
        let result = client.scan(buf, |p| side.packet(p, buf));
        let (scan, open_at) = (side.scan, side.open_at);
        self.client_scanned(buf, scan, open_at, result)
    }

    /// As [`on_client`](Self::on_client), and when client renumbering is on (see
    /// [`renumber`](Self::renumber)) rewrites sequence ids in `buf`; the KILL candidates and
    /// everything else the tracker reports then see the rewritten bytes.
    pub fn on_client_mut(&mut self, buf: &mut [u8]) -> Result<ClientScan, TrackError> {
        if !self.renumber_client {
            return self.on_client(buf);
        }
        let (client, mut side) = self.client_side();
        let result = client.scan_renumbering(buf, &mut side);
        let (scan, open_at) = (side.scan, side.open_at);
        self.client_scanned(buf, scan, open_at, result)
    }

    fn client_side(&mut self) -> (&mut PacketScanner, ClientSide<'_>) {
        self.kills.clear();
        // Where the packet in progress at the end began, if it began in this buffer.
        let open_at = self.client.at_boundary().then_some(0);
        let side = ClientSide {
            guard: self.guard_cleartext.then_some(self.caps.capabilities),
            queue: &mut self.queue,
            mode: &mut self.client_mode,
            kills: &mut self.kills,
            scan: ClientScan::default(),
            open_at,
        };
        (&mut self.client, side)
    }

    /// After a client scan: blames framing errors on the client, holds back a KILL not whole yet.
    fn client_scanned(
        &mut self,
        buf: &[u8],
        mut scan: ClientScan,
        open_at: Option<usize>,
        result: Result<(), TrackError>,
    ) -> Result<ClientScan, TrackError> {
        // The sink never yields a backend error: a framing error here is the client's.
        result.map_err(|e| match e {
            TrackError::BackendFrame(f) => TrackError::ClientFrame(f),
            other => other,
        })?;
        if let Some(at) = open_at.filter(|&at| at < buf.len()) {
            let partial = &buf[at..];
            if self.guard_cleartext && self.client_mode == ClientMode::Commands {
                match change_user_len(partial) {
                    Some(len) if len > MAX_CHANGE_USER_CHECKED => {
                        let exposure = Exposure::Unchecked { len };
                        let start = Some(at);
                        return Err(TrackError::CleartextPassword { exposure, start });
                    }
                    // Held like a KILL below: checked once whole.
                    Some(_) => {
                        self.client = PacketScanner::new(self.max_client_packet);
                        scan.held = buf.len() - at;
                        return Ok(scan);
                    }
                    None => {}
                }
            }
            if self.client_mode == ClientMode::Commands && may_become_kill(partial) {
                // Forget the partial packet: it is scanned again, whole, from its header.
                self.client = PacketScanner::new(self.max_client_packet);
                scan.held = buf.len() - at;
            }
        }
        Ok(scan)
    }

    fn client_packet(
        queue: &mut VecDeque<Pending>,
        mode: &mut ClientMode,
        p: &Packet<'_>,
        whole: Option<&[u8]>,
        scan: &mut ClientScan,
        kills: &mut Vec<(usize, usize)>,
    ) -> Result<(), TrackError> {
        match *mode {
            ClientMode::Commands => {}
            ClientMode::Binlog => return Ok(()),
            ClientMode::Infile | ClientMode::Auth => return Self::exchange_packet(queue, mode, p),
        }
        if p.first_seq != 0 {
            return Err(TrackError::ClientOutOfOrder {
                expected: 0,
                got: p.first_seq,
                start: p.start,
            });
        }
        // An empty packet is dispatched by the server as an unknown command: one ERR answers it.
        let command = p.first_byte().unwrap_or(0);
        let expect = match command {
            cmd::QUIT => {
                scan.quit = true;
                return Ok(());
            }
            cmd::STMT_CLOSE | cmd::STMT_SEND_LONG_DATA => return Ok(()),
            cmd::QUERY | cmd::STMT_EXECUTE | cmd::STMT_BULK_EXECUTE | cmd::PROCESS_INFO => {
                Expect::Response
            }
            cmd::STMT_FETCH => Expect::Rows,
            cmd::STMT_PREPARE => Expect::PrepareOk,
            cmd::FIELD_LIST => Expect::FieldList,
            cmd::CHANGE_USER => Expect::Auth,
            cmd::BINLOG_DUMP | cmd::BINLOG_DUMP_GTID => {
                *mode = ClientMode::Binlog;
                Expect::Binlog
            }
            _ => Expect::Single,
        };
        if queue.len() >= MAX_PENDING {
            return Err(TrackError::TooManyPending {
                max: MAX_PENDING,
                start: p.start,
            });
        }
        if let (Some(start), Some(packet)) = (p.start, whole) {
            if packet.len() <= MAX_KILL_PACKET + 4 && may_be_kill(&packet[4..]) {
                kills.push((start, p.end));
            }
        }
        queue.push_back(Pending {
            command,
            expect,
            next_seq: p.last_seq.wrapping_add(1),
            written_at: None,
            first_byte_at: None,
        });
        scan.commands += 1;
        Ok(())
    }

    /// A client packet inside the head command's exchange (a LOCAL INFILE upload, an auth answer).
    fn exchange_packet(
        queue: &mut VecDeque<Pending>,
        mode: &mut ClientMode,
        p: &Packet<'_>,
    ) -> Result<(), TrackError> {
        let Some(head) = queue.front_mut() else {
            *mode = ClientMode::Commands;
            return Ok(());
        };
        if p.first_seq != head.next_seq {
            return Err(TrackError::ClientOutOfOrder {
                expected: head.next_seq,
                got: p.first_seq,
                start: p.start,
            });
        }
        head.next_seq = p.last_seq.wrapping_add(1);
        if *mode == ClientMode::Infile && p.len == 0 {
            *mode = ClientMode::Commands;
        }
        if *mode == ClientMode::Auth {
            // The client answered; the server speaks next, then maybe the client again.
            *mode = ClientMode::Commands;
        }
        Ok(())
    }

    /// Call once the bytes passed to [`on_client`](Self::on_client) are written to the backend.
    pub fn on_written(&mut self, now: Instant) {
        for p in self.queue.iter_mut().rev() {
            if p.written_at.is_some() {
                break;
            }
            p.written_at = Some(now);
        }
    }

    /// Scans bytes read from the backend (before they are written to the client); every command
    /// answered in full is passed to `done`. Read-only, so it never renumbers.
    pub fn on_server(
        &mut self,
        buf: &[u8],
        now: Instant,
        mut done: impl FnMut(Completed),
    ) -> Result<(), TrackError> {
        let (server, mut side) = self.server_side(now, &mut done);
        server.scan(buf, |p| side.packet(p))
    }

    /// As [`on_server`](Self::on_server), and when server renumbering is on (see
    /// [`renumber`](Self::renumber)) rewrites sequence ids in `buf`.
    pub fn on_server_mut(
        &mut self,
        buf: &mut [u8],
        now: Instant,
        mut done: impl FnMut(Completed),
    ) -> Result<(), TrackError> {
        if !self.renumber_server {
            return self.on_server(buf, now, done);
        }
        let (server, mut side) = self.server_side(now, &mut done);
        server.scan_renumbering(buf, &mut side)
    }

    fn server_side<'t, F: FnMut(Completed)>(
        &'t mut self,
        now: Instant,
        done: &'t mut F,
    ) -> (&'t mut PacketScanner, ServerSide<'t, F>) {
        let side = ServerSide {
            caps: self.caps,
            guard_cleartext: self.guard_cleartext,
            queue: &mut self.queue,
            client_mode: &mut self.client_mode,
            unsolicited: &mut self.unsolicited,
            now,
            done,
        };
        (&mut self.server, side)
    }
}

/// The payload length of a command packet cut short that is, or may still turn out to be, a
/// COM_CHANGE_USER (0 while even its header is incomplete).
fn change_user_len(partial: &[u8]) -> Option<usize> {
    let Some(header) = partial.get(..4) else {
        return Some(0);
    };
    let len = u32::from_le_bytes([header[0], header[1], header[2], 0]) as usize;
    match partial.get(4) {
        _ if header[3] != 0 => None,
        None | Some(&cmd::CHANGE_USER) => Some(len),
        Some(_) => None,
    }
}

/// What a client scan updates besides the scanner: one packet at a time, in stream order.
struct ClientSide<'t> {
    /// The session's capabilities, when COM_CHANGE_USER is checked for a password in clear.
    guard: Option<u32>,
    queue: &'t mut VecDeque<Pending>,
    mode: &'t mut ClientMode,
    kills: &'t mut Vec<(usize, usize)>,
    scan: ClientScan,
    /// Where the packet in progress at the end began, if it began in this buffer.
    open_at: Option<usize>,
}

impl ClientSide<'_> {
    fn packet(&mut self, p: Packet<'_>, buf: &[u8]) -> Result<(), TrackError> {
        self.open_at = Some(p.end);
        let whole = p.start.map(|start| &buf[start..p.end]);
        if let (Some(caps), Some(packet)) = (self.guard, whole) {
            let command = *self.mode == ClientMode::Commands && p.first_seq == 0;
            if command && p.first_byte() == Some(cmd::CHANGE_USER) {
                if let Some(exposure) = in_change_user(&packet[4..], caps) {
                    let start = p.start;
                    return Err(TrackError::CleartextPassword { exposure, start });
                }
            }
        }
        Tracker::client_packet(self.queue, self.mode, &p, whole, &mut self.scan, self.kills)
    }
}

impl Renumber for ClientSide<'_> {
    type Error = TrackError;

    fn first_seq(&mut self) -> Option<u8> {
        match *self.mode {
            ClientMode::Commands => Some(0),
            ClientMode::Infile | ClientMode::Auth => self.queue.front().map(|head| head.next_seq),
            // Semi-sync acknowledgements are not followed (nor checked).
            ClientMode::Binlog => None,
        }
    }

    fn packet(&mut self, p: Packet<'_>, buf: &[u8]) -> Result<(), TrackError> {
        ClientSide::packet(self, p, buf)
    }
}

/// What a server scan updates besides the scanner.
struct ServerSide<'t, F> {
    caps: Negotiated,
    guard_cleartext: bool,
    queue: &'t mut VecDeque<Pending>,
    client_mode: &'t mut ClientMode,
    unsolicited: &'t mut u64,
    now: Instant,
    done: &'t mut F,
}

impl<F: FnMut(Completed)> ServerSide<'_, F> {
    fn packet(&mut self, p: Packet<'_>) -> Result<(), TrackError> {
        let (queue, now) = (&mut *self.queue, self.now);
        let Some(head) = queue.front_mut() else {
            *self.unsolicited += 1;
            return Ok(());
        };
        if p.first_seq != head.next_seq {
            return Err(TrackError::BackendOutOfOrder {
                expected: head.next_seq,
                got: p.first_seq,
                start: p.start,
            });
        }
        if self.guard_cleartext && head.expect == Expect::Auth {
            // Checked before the sequence advances: our ERR takes this packet's place.
            if let Some(exposure) = in_change_user_reply(p.prefix, p.len) {
                return Err(TrackError::CleartextPassword {
                    exposure,
                    start: p.start,
                });
            }
        }
        head.next_seq = p.last_seq.wrapping_add(1);
        if head.first_byte_at.is_none() {
            head.first_byte_at = Some(now);
        }
        if !step(self.caps, head, self.client_mode, &p)? {
            return Ok(());
        }
        if let Some(head) = queue.pop_front() {
            let written = head.written_at.unwrap_or(now);
            let first = head.first_byte_at.unwrap_or(now);
            if !matches!(head.expect, Expect::Binlog) {
                (self.done)(Completed {
                    command: head.command,
                    latency: now.saturating_duration_since(written),
                    first_byte: first.saturating_duration_since(written),
                });
            }
        }
        *self.client_mode = match queue.front().map(|p| p.expect) {
            Some(Expect::Binlog) => ClientMode::Binlog,
            _ => ClientMode::Commands,
        };
        Ok(())
    }
}

impl<F: FnMut(Completed)> Renumber for ServerSide<'_, F> {
    type Error = TrackError;

    fn first_seq(&mut self) -> Option<u8> {
        // With nothing outstanding (a shutdown notice) no id is expected.
        self.queue.front().map(|head| head.next_seq)
    }

    fn packet(&mut self, p: Packet<'_>, _buf: &[u8]) -> Result<(), TrackError> {
        ServerSide::packet(self, p)
    }
}

impl From<FrameError> for TrackError {
    fn from(e: FrameError) -> Self {
        // The scanner closures of each direction map their own; this one serves the backend side.
        TrackError::BackendFrame(e)
    }
}

/// What [`step`] needs to know about one server packet, worked out once.
struct Seen<'p> {
    first: Option<u8>,
    prefix: &'p [u8],
    deprecate_eof: bool,
    /// An EOF, or with CLIENT_DEPRECATE_EOF the OK that stands in for it (not a 0xFE-led row).
    terminator: bool,
    err: bool,
    start: Option<usize>,
}

impl<'p> Seen<'p> {
    fn new(caps: Negotiated, p: &Packet<'p>) -> Self {
        let deprecate_eof = caps.has(CLIENT_DEPRECATE_EOF);
        let first = p.first_byte();
        let terminator = first == Some(0xFE)
            && if deprecate_eof {
                p.first_chunk_len < MAX_CHUNK
            } else {
                p.len < 9
            };
        Self {
            first,
            prefix: p.prefix,
            deprecate_eof,
            terminator,
            err: first == Some(0xFF),
            start: p.start,
        }
    }

    fn malformed(&self, what: &'static str) -> TrackError {
        TrackError::BackendMalformed {
            what,
            first: self.first.unwrap_or(0),
            start: self.start,
        }
    }

    /// Status flags of the packet that ends a result set.
    fn end_of_rows_status(&self) -> u16 {
        if self.deprecate_eof {
            ok_status(self.prefix)
        } else {
            eof_status(self.prefix)
        }
    }
}

/// Advances the head command by one server packet; returns true when the response is complete.
fn step(
    caps: Negotiated,
    head: &mut Pending,
    client_mode: &mut ClientMode,
    p: &Packet<'_>,
) -> Result<bool, TrackError> {
    let seen = Seen::new(caps, p);
    match head.expect {
        Expect::Response => response_start(caps, head, client_mode, p, &seen),
        Expect::ColumnDefs(_) | Expect::ColumnsEof | Expect::Rows => result_set(head, &seen),
        Expect::PrepareOk
        | Expect::PrepareParams { .. }
        | Expect::PrepareParamsEof { .. }
        | Expect::PrepareColumns(_)
        | Expect::PrepareColumnsEof => prepare(head, &seen),
        Expect::Single => Ok(true),
        Expect::FieldList => Ok(seen.err || seen.terminator),
        Expect::Auth => match seen.first {
            Some(0x00) | Some(0xFF) => Ok(true),
            _ => {
                *client_mode = ClientMode::Auth;
                Ok(false)
            }
        },
        Expect::Binlog => Ok(seen.err || (seen.first == Some(0xFE) && p.len < 9)),
    }
}

/// The first packet of a generic response (or of the next result of a multi-result one): OK,
/// ERR, a LOCAL INFILE request, an EOF, or a result set's column count.
fn response_start(
    caps: Negotiated,
    head: &mut Pending,
    client_mode: &mut ClientMode,
    p: &Packet<'_>,
    seen: &Seen<'_>,
) -> Result<bool, TrackError> {
    match seen.first {
        None => Err(seen.malformed("empty response")),
        Some(0x00) => Ok(!more_results(ok_status(p.prefix))),
        Some(0xFF) => Ok(!is_progress(caps, p.prefix)),
        Some(0xFB) => {
            *client_mode = ClientMode::Infile;
            Ok(false)
        }
        Some(0xFE) if p.len < 9 => Ok(!more_results(eof_status(p.prefix))),
        Some(_) => match lenenc_int(p.prefix, 0) {
            Some((n, _)) if n > 0 => {
                head.expect = Expect::ColumnDefs(n);
                Ok(false)
            }
            _ => Err(seen.malformed("column count")),
        },
    }
}

/// Column definitions, their EOF (unless CLIENT_DEPRECATE_EOF), then rows to the terminator.
fn result_set(head: &mut Pending, seen: &Seen<'_>) -> Result<bool, TrackError> {
    match head.expect {
        Expect::ColumnDefs(left) => {
            if seen.err {
                return Ok(true);
            }
            head.expect = match left {
                0 | 1 if seen.deprecate_eof => Expect::Rows,
                0 | 1 => Expect::ColumnsEof,
                n => Expect::ColumnDefs(n - 1),
            };
            Ok(false)
        }
        Expect::ColumnsEof => match seen.first {
            Some(0xFE) => {
                let status = eof_status(seen.prefix);
                // A cursor opened by COM_STMT_EXECUTE: rows come later, with COM_STMT_FETCH.
                if head.command != cmd::QUERY && status & SERVER_STATUS_CURSOR_EXISTS != 0 {
                    return Ok(true);
                }
                head.expect = Expect::Rows;
                Ok(false)
            }
            Some(0xFF) => Ok(true),
            _ => Err(seen.malformed("end of column definitions")),
        },
        _ => {
            if seen.err {
                return Ok(true);
            }
            if !seen.terminator {
                return Ok(false);
            }
            if head.command == cmd::STMT_FETCH || !more_results(seen.end_of_rows_status()) {
                return Ok(true);
            }
            head.expect = Expect::Response;
            Ok(false)
        }
    }
}

/// COM_STMT_PREPARE: STMT_OK, then parameter and column definitions, each block ended by an EOF
/// unless CLIENT_DEPRECATE_EOF.
fn prepare(head: &mut Pending, seen: &Seen<'_>) -> Result<bool, TrackError> {
    match head.expect {
        Expect::PrepareOk => match seen.first {
            Some(0xFF) => Ok(true),
            Some(0x00) => {
                let (columns, params) = match (seen.prefix.get(5..7), seen.prefix.get(7..9)) {
                    (Some(c), Some(pa)) => (
                        u16::from_le_bytes([c[0], c[1]]),
                        u16::from_le_bytes([pa[0], pa[1]]),
                    ),
                    _ => return Err(seen.malformed("COM_STMT_PREPARE response")),
                };
                Ok(prepare_next(head, params, columns))
            }
            _ => Err(seen.malformed("COM_STMT_PREPARE response")),
        },
        Expect::PrepareParams { left, columns } => {
            head.expect = if left > 1 {
                Expect::PrepareParams {
                    left: left - 1,
                    columns,
                }
            } else if seen.deprecate_eof {
                return Ok(prepare_next(head, 0, columns));
            } else {
                Expect::PrepareParamsEof { columns }
            };
            Ok(false)
        }
        Expect::PrepareParamsEof { columns } => {
            if seen.first != Some(0xFE) {
                return Err(seen.malformed("end of parameter definitions"));
            }
            Ok(prepare_next(head, 0, columns))
        }
        Expect::PrepareColumns(left) => {
            if left > 1 {
                head.expect = Expect::PrepareColumns(left - 1);
                return Ok(false);
            }
            if seen.deprecate_eof {
                return Ok(true);
            }
            head.expect = Expect::PrepareColumnsEof;
            Ok(false)
        }
        _ => {
            if seen.first != Some(0xFE) {
                return Err(seen.malformed("end of column definitions"));
            }
            Ok(true)
        }
    }
}

/// After STMT_OK or a finished block of definitions: what comes next; true when nothing does.
fn prepare_next(head: &mut Pending, params: u16, columns: u16) -> bool {
    if params > 0 {
        head.expect = Expect::PrepareParams {
            left: params,
            columns,
        };
        false
    } else if columns > 0 {
        head.expect = Expect::PrepareColumns(columns);
        false
    } else {
        true
    }
}

fn more_results(status: u16) -> bool {
    status & SERVER_MORE_RESULTS_EXISTS != 0
}

/// Status flags of an OK packet (also the 0xFE-headed OK that ends a result set with
/// CLIENT_DEPRECATE_EOF): header, affected rows, last insert id, status.
fn ok_status(payload: &[u8]) -> u16 {
    lenenc_int(payload, 1)
        .and_then(|(_, pos)| lenenc_int(payload, pos))
        .and_then(|(_, pos)| payload.get(pos..pos + 2))
        .map_or(0, |s| u16::from_le_bytes([s[0], s[1]]))
}

/// Status flags of an EOF packet: header, warnings, status.
fn eof_status(payload: &[u8]) -> u16 {
    payload
        .get(3..5)
        .map_or(0, |s| u16::from_le_bytes([s[0], s[1]]))
}

/// MariaDB progress reports are ERR-headed packets with code 0xFFFF; they do not end a response.
fn is_progress(caps: Negotiated, payload: &[u8]) -> bool {
    caps.has_mariadb(MARIADB_CLIENT_PROGRESS) && payload.get(1..3) == Some(&[0xFF, 0xFF])
}

#[cfg(test)]
#[path = "response_tests.rs"]
mod tests;
