//! The [`Tracker`]: the FIFO of outstanding commands, framing of both directions, sequence-id
//! checks (or renumbering behind a compressed leg), KILL candidates held until whole, and the
//! cleartext guard on COM_CHANGE_USER. Which packet ends which command's response is asked of
//! `rules.rs`, one server packet at a time.

use std::collections::VecDeque;
use std::time::Instant;

use super::super::caps::Negotiated;
use super::super::cleartext::{
    in_change_user, in_change_user_reply, Exposure, MAX_CHANGE_USER_CHECKED,
};
use super::super::codec::{lenenc_int, Packet, PacketScanner, Renumber};
use super::rules::{end_status, expect_for, step, ClientMode, Expect};
use super::{
    cmd, may_be_kill, may_become_kill, ClientScan, Completed, TrackError, MAX_KILL_PACKET,
    MAX_PENDING,
};

/// A command sent and not yet fully answered: one entry of the tracker's FIFO.
#[derive(Debug, Clone)]
struct Outstanding {
    command: u8,
    expect: Expect,
    /// Sequence id the next packet of this exchange must carry (either direction).
    next_seq: u8,
    written_at: Option<Instant>,
    first_byte_at: Option<Instant>,
    /// What the response held so far (rows, affected rows, a prepared statement's id).
    rows: u64,
    affected: u64,
    prepared: Option<u32>,
    tag: u64,
}

/// A statement packet of the last client buffer (see [`Tracker::statements`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatementAt {
    pub command: u8,
    /// Its place in the queue of outstanding commands, for [`Tracker::tag`]; None for a command
    /// the server does not answer (COM_STMT_CLOSE).
    pub index: Option<usize>,
    /// Where its bytes are: `start..end` of the buffer scanned, or the tracker's copy of the
    /// start of a packet that spanned reads.
    start: usize,
    end: usize,
    spanning: bool,
}

/// The commands whose packets [`Tracker::statements`] reports.
fn is_statement(command: u8) -> bool {
    matches!(
        command,
        cmd::QUERY
            | cmd::STMT_PREPARE
            | cmd::STMT_EXECUTE
            | cmd::STMT_CLOSE
            | cmd::INIT_DB
            | cmd::CHANGE_USER
            | cmd::RESET_CONNECTION
            | cmd::STMT_RESET
            | cmd::STMT_SEND_LONG_DATA
            | cmd::SET_OPTION
            | cmd::STMT_FETCH
            | cmd::STMT_BULK_EXECUTE
    )
}

/// Statement reporting, when an observer asked for it (see [`Tracker::report_statements`]).
#[derive(Debug, Default)]
struct Statements {
    /// How many payload bytes of a statement the observer reads; 0 while reporting is off.
    limit: usize,
    found: Vec<StatementAt>,
    /// The first bytes (header included) of a statement packet that spans reads.
    spanning: Vec<u8>,
}

/// Tracks one session's command phase.
#[derive(Debug)]
pub struct Tracker {
    /// Visible to the module's tests, which widen it after construction.
    pub(super) caps: Negotiated,
    client: PacketScanner,
    max_client_packet: u64,
    server: PacketScanner,
    queue: VecDeque<Outstanding>,
    client_mode: ClientMode,
    /// Offsets of the KILL candidates of the last client buffer; reused, so only a session that
    /// sends a KILL ever allocates it.
    kills: Vec<(usize, usize)>,
    /// Packets the backend sent with no command outstanding (e.g. a shutdown notice).
    pub unsolicited: u64,
    statements: Statements,
    /// Rewrite, rather than refuse, sequence ids off the plain numbering, per direction (see
    /// [`renumber`](Self::renumber)).
    renumber_client: bool,
    renumber_server: bool,
    /// A COM_CHANGE_USER reply that makes the client send its password in clear is an error
    /// (see [`guard_cleartext`](Self::guard_cleartext)).
    guard_cleartext: bool,
    /// Every COM_QUERY / COM_STMT_PREPARE is a rewrite candidate, held until whole (see
    /// [`guard_statements`](Self::guard_statements)).
    guard_statements: bool,
    /// A guarded statement too long to read whole fails the scan (the backend takes no writes
    /// now); else it goes on unread.
    refuse_long: bool,
    /// Whether a prepared-statement command stops the client scan (see
    /// [`pause_statements`](Self::pause_statements)).
    pause: Pause,
    paused: bool,
}

/// When a client scan stops before a prepared-statement command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pause {
    Off,
    On,
    /// The next one goes through (it was handled already), then `On`.
    AfterFirst,
    /// The next command goes through, whatever it is, then the scan stops before any other
    /// (`Every`): a pool that splits reads from writes decides where each command of a session
    /// on a replica may run before it is relayed.
    AllAfterFirst,
    Every,
}

impl Pause {
    /// Whether the scan stops before whole command packet `command`.
    fn stops(&mut self, command: u8) -> bool {
        match *self {
            Pause::AllAfterFirst => {
                *self = Pause::Every;
                return false;
            }
            Pause::Every => return true,
            _ => {}
        }
        if !is_statement_command(command) {
            return false;
        }
        match *self {
            Pause::On | Pause::Every => true,
            Pause::AfterFirst => {
                *self = Pause::On;
                false
            }
            Pause::Off | Pause::AllAfterFirst => false,
        }
    }

    /// Whether the scan holds back a command packet cut short at the end of a read, of which
    /// `partial` arrived so far: one that may still be, or is, a statement command.
    fn holds(self, partial: &[u8]) -> bool {
        match self {
            Pause::Off => false,
            // The command byte is not here yet, or it is a statement command other than the one
            // let through (which passes whole or in parts).
            Pause::On => partial.get(4).is_none_or(|&c| is_statement_command(c)),
            Pause::AfterFirst | Pause::AllAfterFirst => partial.len() < 5,
            Pause::Every => true,
        }
    }
}

/// The commands a paused scan stops before.
fn is_statement_command(command: u8) -> bool {
    matches!(
        command,
        cmd::STMT_PREPARE
            | cmd::STMT_EXECUTE
            | cmd::STMT_SEND_LONG_DATA
            | cmd::STMT_CLOSE
            | cmd::STMT_RESET
            | cmd::STMT_FETCH
            | cmd::STMT_BULK_EXECUTE
    )
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
            statements: Statements::default(),
            renumber_client: false,
            renumber_server: false,
            guard_cleartext: false,
            guard_statements: false,
            refuse_long: false,
            pause: Pause::Off,
            paused: false,
        }
    }

    /// From now on the client scan stops before a prepared-statement command (COM_STMT_*): it
    /// and what follows are held back (see [`ClientScan::held`]) and not counted, and
    /// [`paused`](Self::paused) says so; a transaction-mode pool handles such a command before
    /// it is relayed (`crate::backends::pooling::statements`). With `let_first`, the first one is relayed
    /// (the pool handled it), whole or in parts. A command's first bytes are held until its
    /// command byte is read.
    pub fn pause_statements(&mut self, let_first: bool) {
        self.pause = if let_first {
            Pause::AfterFirst
        } else {
            Pause::On
        };
        self.paused = false;
    }

    /// From now on the client scan lets the next command through and stops before any other
    /// (held back as [`pause_statements`](Self::pause_statements) holds a statement command):
    /// a session on a replica's connection is asked where each command may run.
    pub fn pause_after_one(&mut self) {
        self.pause = Pause::AllAfterFirst;
        self.paused = false;
    }

    /// From now on the client scan stops before every command not scanned yet (what is in
    /// flight is answered first): a split session whose primary went read-only under its
    /// transaction is asked about each command from here on.
    pub fn pause_before_next(&mut self) {
        self.pause = Pause::Every;
        self.paused = false;
    }

    /// Whether the scan stops before every command after one (see
    /// [`pause_after_one`](Self::pause_after_one)).
    pub fn pauses_every_command(&self) -> bool {
        matches!(self.pause, Pause::AllAfterFirst | Pause::Every)
    }

    /// True when the last client scan stopped before a prepared-statement command.
    pub fn paused(&self) -> bool {
        self.paused
    }

    /// The capabilities the session runs with.
    pub fn caps(&self) -> Negotiated {
        self.caps
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
    /// From now on every COM_QUERY and COM_STMT_PREPARE is a [kill
    /// candidate](Self::kill_candidates), held back until it is whole, so the session's
    /// steering sees its text before any byte of it is forwarded (a session on a replica
    /// refuses writes there). One longer than [`MAX_GUARDED`] fails the scan
    /// ([`TrackError::TooLongToGuard`]): its start would be forwarded before its end is read.
    pub fn guard_statements(&mut self) {
        self.guard_statements = true;
    }

    /// Whether statements are handed over whole (see
    /// [`guard_statements`](Self::guard_statements)).
    pub fn guards_statements(&self) -> bool {
        self.guard_statements
    }

    /// Whether a guarded statement longer than [`MAX_GUARDED`] fails the scan (the backend
    /// takes no writes now) or is forwarded unread (it does); asked before each client scan.
    pub fn refuse_long_statements(&mut self, refuse: bool) {
        self.refuse_long = refuse;
    }

    pub fn guard_cleartext(&mut self) {
        self.guard_cleartext = true;
    }

    /// From now on each client scan reports the statement packets in it (COM_QUERY,
    /// COM_STMT_PREPARE / EXECUTE / CLOSE / RESET / SEND_LONG_DATA, COM_INIT_DB,
    /// COM_CHANGE_USER, COM_RESET_CONNECTION, COM_SET_OPTION),
    /// with at least their first `limit` payload bytes (all of them when shorter), for the
    /// observer to read and [`tag`](Self::tag).
    pub fn report_statements(&mut self, limit: usize) {
        self.statements.limit = limit.max(1);
    }

    /// Changes how many payload bytes statement reports keep; 0 turns reporting off. A packet
    /// that spans reads keeps what its start was kept with.
    pub fn set_statement_limit(&mut self, limit: usize) {
        self.statements.limit = limit;
    }

    /// The statement packets of the last client buffer, in order (empty unless
    /// [`report_statements`](Self::report_statements) was called).
    pub fn statements(&self) -> &[StatementAt] {
        &self.statements.found
    }

    /// The payload of `s` (command byte first), or as much of it as was kept: the whole of it
    /// up to its first `limit` bytes, also when it spanned reads. `buf` is the buffer last
    /// scanned.
    pub fn statement_payload<'b>(&'b self, s: &StatementAt, buf: &'b [u8]) -> &'b [u8] {
        let packet = if s.spanning {
            &self.statements.spanning[..]
        } else {
            buf.get(s.start..s.end).unwrap_or_default()
        };
        packet.get(4..).unwrap_or_default()
    }

    /// Tags the outstanding command at `index` of the queue (a [`StatementAt::index`] of the
    /// last client scan); its [`Completed::tag`] carries it.
    pub fn tag(&mut self, index: usize, tag: u64) {
        if let Some(p) = self.queue.get_mut(index) {
            p.tag = tag;
        }
    }

    /// Commands sent and not yet fully answered.
    pub fn pending(&self) -> usize {
        self.queue.len()
    }

    /// Forgets the one command outstanding when nothing of its answer was read and both
    /// directions sit between packets: its server was lost, and the command goes to another
    /// (see `crate::wire::sql::retryable_read`), to be tracked afresh. False (nothing changed)
    /// otherwise.
    pub fn forget_unanswered(&mut self) -> bool {
        let unanswered = self.queue.len() == 1
            && self
                .queue
                .front()
                .is_some_and(|c| c.first_byte_at.is_none())
            && self.client.at_boundary()
            && self.server.at_boundary();
        if unanswered {
            self.queue.clear();
        }
        unanswered
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
    /// `crate::backends::kill`).
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
        self.keep_spanning(buf, open_at);
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
        self.keep_spanning(buf, open_at);
        self.client_scanned(buf, scan, open_at, result)
    }

    /// With statement reporting on: keeps the first bytes of a statement packet still open at
    /// the end of `buf`, so the scan that sees its end can report it.
    fn keep_spanning(&mut self, buf: &[u8], open_at: Option<usize>) {
        let st = &mut self.statements;
        if st.limit == 0 || self.client.at_boundary() {
            return;
        }
        let want = st.limit + 4;
        match open_at {
            Some(at) => {
                st.spanning.clear();
                let packet = buf.get(at..).unwrap_or_default();
                if packet.get(4).is_some_and(|&c| is_statement(c)) {
                    st.spanning
                        .extend_from_slice(&packet[..packet.len().min(want)]);
                }
            }
            // The whole buffer continues a packet begun earlier.
            None if !st.spanning.is_empty() && st.spanning.len() < want => {
                let more = (want - st.spanning.len()).min(buf.len());
                st.spanning.extend_from_slice(&buf[..more]);
            }
            None => {}
        }
    }

    fn client_side(&mut self) -> (&mut PacketScanner, ClientSide<'_>) {
        self.kills.clear();
        self.statements.found.clear();
        if self.client.at_boundary() {
            // No packet is open: what was kept of one has been reported.
            self.statements.spanning.clear();
        }
        // Where the packet in progress at the end began, if it began in this buffer.
        let open_at = self.client.at_boundary().then_some(0);
        let side = ClientSide {
            guard: self.guard_cleartext.then_some(self.caps.capabilities),
            queue: &mut self.queue,
            mode: &mut self.client_mode,
            kills: &mut self.kills,
            statements: &mut self.statements,
            pause: &mut self.pause,
            guard_statements: self.guard_statements,
            refuse_long: self.refuse_long,
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
        self.paused = false;
        if let Err(TrackError::Paused { start }) = result {
            // Not counted: it is scanned again, from its header, once relayed.
            self.client = PacketScanner::new(self.max_client_packet);
            self.paused = true;
            scan.held = buf.len() - start;
            return Ok(scan);
        }
        // The sink never yields a backend error: a framing error here is the client's.
        result.map_err(|e| match e {
            TrackError::BackendFrame(f) => TrackError::ClientFrame(f),
            other => other,
        })?;
        if let Some(at) = open_at.filter(|&at| at < buf.len()) {
            let partial = &buf[at..];
            if self.client_mode == ClientMode::Commands && self.pause.holds(partial) {
                self.client = PacketScanner::new(self.max_client_packet);
                self.paused = partial.len() >= 5;
                scan.held = buf.len() - at;
                return Ok(scan);
            }
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
            if self.guard_statements && self.client_mode == ClientMode::Commands {
                match guarded_len(partial) {
                    Some(len) if len > MAX_GUARDED && self.refuse_long => {
                        let start = Some(at);
                        return Err(TrackError::TooLongToGuard { len, start });
                    }
                    Some(len) if len > MAX_GUARDED => {}
                    // Held like a KILL below: handed to the steering once whole.
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
        queue: &mut VecDeque<Outstanding>,
        mode: &mut ClientMode,
        p: &Packet<'_>,
        whole: Option<&[u8]>,
        scan: &mut ClientScan,
        kills: &mut Vec<(usize, usize)>,
        statements: &mut Statements,
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
        let command = p.first_byte().unwrap_or(0);
        scan.quit |= command == cmd::QUIT;
        if statements.limit > 0 && is_statement(command) {
            statements.found(p, command, expect_for(command).map(|_| queue.len()));
        }
        let Some(expect) = expect_for(command) else {
            return Ok(());
        };
        if expect == Expect::Binlog {
            *mode = ClientMode::Binlog;
        }
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
        queue.push_back(Outstanding {
            command,
            expect,
            next_seq: p.last_seq.wrapping_add(1),
            written_at: None,
            first_byte_at: None,
            rows: 0,
            affected: 0,
            prepared: None,
            tag: 0,
        });
        scan.commands += 1;
        Ok(())
    }

    /// A client packet inside the head command's exchange (a LOCAL INFILE upload, an auth answer).
    fn exchange_packet(
        queue: &mut VecDeque<Outstanding>,
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

/// The longest statement a guarded session's steering reads whole (see
/// [`Tracker::guard_statements`]).
pub const MAX_GUARDED: usize = 64 * 1024;

/// The payload length of a COM_QUERY or COM_STMT_PREPARE whose first bytes (header included,
/// possibly cut short) are `partial`, or of a command not known yet; None for any other.
fn guarded_len(partial: &[u8]) -> Option<usize> {
    let header = partial.get(..4)?;
    let len = u32::from_le_bytes([header[0], header[1], header[2], 0]) as usize;
    match partial.get(4) {
        _ if header[3] != 0 => None,
        None | Some(&(cmd::QUERY | cmd::STMT_PREPARE)) => Some(len),
        Some(_) => None,
    }
}

/// What a client scan updates besides the scanner: one packet at a time, in stream order.
struct ClientSide<'t> {
    /// The session's capabilities, when COM_CHANGE_USER is checked for a password in clear.
    guard: Option<u32>,
    queue: &'t mut VecDeque<Outstanding>,
    mode: &'t mut ClientMode,
    kills: &'t mut Vec<(usize, usize)>,
    statements: &'t mut Statements,
    pause: &'t mut Pause,
    guard_statements: bool,
    refuse_long: bool,
    scan: ClientScan,
    /// Where the packet in progress at the end began, if it began in this buffer.
    open_at: Option<usize>,
}

impl ClientSide<'_> {
    fn packet(&mut self, p: Packet<'_>, buf: &[u8]) -> Result<(), TrackError> {
        self.open_at = Some(p.end);
        if p.start.is_none() {
            // A packet begun in an earlier buffer ends here: its kept start gets its end.
            self.statements
                .end_spanning(buf.get(..p.end).unwrap_or_default());
        }
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
        if *self.mode == ClientMode::Commands && p.first_seq == 0 {
            let command = p.first_byte().unwrap_or(0);
            if let (Some(start), true) = (p.start, self.pause.stops(command)) {
                return Err(TrackError::Paused { start });
            }
        }
        if self.guard_statements && *self.mode == ClientMode::Commands && p.first_seq == 0 {
            if let (Some(start), Some(packet)) = (p.start, whole) {
                let len = guarded_len(packet);
                if let Some(len) = len.filter(|&len| len > MAX_GUARDED && self.refuse_long) {
                    return Err(TrackError::TooLongToGuard {
                        len,
                        start: Some(start),
                    });
                }
                if len.is_some_and(|len| len <= MAX_GUARDED) {
                    self.kills.push((start, p.end));
                    return Tracker::client_packet(
                        self.queue,
                        self.mode,
                        &p,
                        None,
                        &mut self.scan,
                        self.kills,
                        self.statements,
                    );
                }
            }
        }
        Tracker::client_packet(
            self.queue,
            self.mode,
            &p,
            whole,
            &mut self.scan,
            self.kills,
            self.statements,
        )
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
    queue: &'t mut VecDeque<Outstanding>,
    client_mode: &'t mut ClientMode,
    unsolicited: &'t mut u64,
    now: Instant,
    done: &'t mut F,
}

impl<F: FnMut(Completed)> ServerSide<'_, F> {
    /// Most packets of a response are rows: anything but an EOF/OK (0xFE) or an ERR (0xFF), in
    /// sequence, leaves a result set's state as it is. The rest take [`Self::any_packet`].
    #[inline]
    fn packet(&mut self, p: Packet<'_>) -> Result<(), TrackError> {
        if let Some(head) = self.queue.front_mut() {
            if head.expect == Expect::Rows
                && p.first_seq == head.next_seq
                && !matches!(p.first_byte(), Some(0xFE | 0xFF))
            {
                head.next_seq = p.last_seq.wrapping_add(1);
                head.rows += 1;
                return Ok(());
            }
        }
        self.any_packet(p)
    }

    #[inline(never)]
    fn any_packet(&mut self, p: Packet<'_>) -> Result<(), TrackError> {
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
        let before = head.expect;
        let ended = step(
            self.caps,
            head.command,
            &mut head.expect,
            self.client_mode,
            &p,
        )?;
        count(head, before, ended, &p);
        if !ended {
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
                    rows: head.rows,
                    affected: head.affected,
                    error: p.first_byte() == Some(0xFF),
                    error_code: match p.prefix {
                        [0xFF, lo, hi, ..] => u16::from_le_bytes([*lo, *hi]),
                        _ => 0,
                    },
                    prepared: head.prepared,
                    at: Some(now),
                    tag: head.tag,
                    end: end_status(head.command, p.len, p.prefix),
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

/// What one server packet adds to its command's counts, after [`step`] moved it from `before`:
/// a row (a packet of a result set's rows that did not end them), an OK's affected rows, the
/// statement id of COM_STMT_PREPARE's STMT_OK.
fn count(head: &mut Outstanding, before: Expect, ended: bool, p: &Packet<'_>) {
    match (before, p.first_byte()) {
        (Expect::Rows, _) if !ended && head.expect == Expect::Rows => head.rows += 1,
        (Expect::Response, Some(0x00)) => {
            head.affected += lenenc_int(p.prefix, 1).map_or(0, |(n, _)| n);
        }
        (Expect::PrepareOk, Some(0x00)) => {
            head.prepared = p
                .prefix
                .get(1..5)
                .map(|id| u32::from_le_bytes([id[0], id[1], id[2], id[3]]));
        }
        _ => {}
    }
}

impl Statements {
    /// Adds the last bytes of a statement packet that spanned reads to its kept start, up to
    /// `limit` payload bytes in all.
    fn end_spanning(&mut self, tail: &[u8]) {
        let want = self.limit + 4;
        if self.limit > 0 && !self.spanning.is_empty() && self.spanning.len() < want {
            let more = (want - self.spanning.len()).min(tail.len());
            self.spanning.extend_from_slice(&tail[..more]);
        }
    }

    /// Notes statement packet `p` (if its first `limit` bytes can be read) at queue `index`.
    fn found(&mut self, p: &Packet<'_>, command: u8, index: Option<usize>) {
        let (start, spanning) = match p.start {
            Some(start) => (start, false),
            // Began in an earlier buffer: its start was kept (see `Tracker::keep_spanning`).
            None if self.spanning.get(4) == Some(&command) => (0, true),
            None => return,
        };
        self.found.push(StatementAt {
            command,
            index,
            start,
            end: p.end,
            spanning,
        });
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
