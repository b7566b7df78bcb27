//! Per-command response rules: what a command's response may hold, and which server packet ends
//! it (one rule per kind of command: generic result sets, cursors, prepare, one-packet replies,
//! LOCAL INFILE, change-user's auth exchange, binlog streams). Plain functions over one
//! classified packet at a time; the tracker owns the queue, the framing and the sequence ids.

use super::super::caps::{
    Negotiated, CLIENT_DEPRECATE_EOF, MARIADB_CLIENT_PROGRESS, SERVER_MORE_RESULTS_EXISTS,
    SERVER_STATUS_CURSOR_EXISTS,
};
use super::super::codec::{lenenc_int, Packet, MAX_CHUNK};
use super::{cmd, EndStatus, TrackError};

/// What the next server packet of the head command can be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Expect {
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
pub(super) enum ClientMode {
    Commands,
    /// Streaming a LOCAL INFILE file until an empty packet.
    Infile,
    /// Answering COM_CHANGE_USER's auth exchange.
    Auth,
    /// Inside a binlog stream (semi-sync acknowledgements flow upstream).
    Binlog,
}

/// What a command's response starts with, or `None` for a command the server does not answer
/// (COM_QUIT, COM_STMT_CLOSE, COM_STMT_SEND_LONG_DATA). An empty packet is dispatched by the
/// server as an unknown command (command byte 0 here): one ERR answers it.
pub(super) fn expect_for(command: u8) -> Option<Expect> {
    Some(match command {
        cmd::QUIT | cmd::STMT_CLOSE | cmd::STMT_SEND_LONG_DATA => return None,
        cmd::QUERY | cmd::STMT_EXECUTE | cmd::STMT_BULK_EXECUTE | cmd::PROCESS_INFO => {
            Expect::Response
        }
        cmd::STMT_FETCH => Expect::Rows,
        cmd::STMT_PREPARE => Expect::PrepareOk,
        cmd::FIELD_LIST => Expect::FieldList,
        cmd::CHANGE_USER => Expect::Auth,
        cmd::BINLOG_DUMP | cmd::BINLOG_DUMP_GTID => Expect::Binlog,
        _ => Expect::Single,
    })
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
pub(super) fn step(
    caps: Negotiated,
    command: u8,
    expect: &mut Expect,
    client_mode: &mut ClientMode,
    p: &Packet<'_>,
) -> Result<bool, TrackError> {
    let seen = Seen::new(caps, p);
    match *expect {
        Expect::Response => response_start(caps, expect, client_mode, p, &seen),
        Expect::ColumnDefs(_) | Expect::ColumnsEof | Expect::Rows => {
            result_set(command, expect, &seen)
        }
        Expect::PrepareOk
        | Expect::PrepareParams { .. }
        | Expect::PrepareParamsEof { .. }
        | Expect::PrepareColumns(_)
        | Expect::PrepareColumnsEof => prepare(expect, &seen),
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
    expect: &mut Expect,
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
                *expect = Expect::ColumnDefs(n);
                Ok(false)
            }
            _ => Err(seen.malformed("column count")),
        },
    }
}

/// Column definitions, their EOF (unless CLIENT_DEPRECATE_EOF), then rows to the terminator.
fn result_set(command: u8, expect: &mut Expect, seen: &Seen<'_>) -> Result<bool, TrackError> {
    match *expect {
        Expect::ColumnDefs(left) => {
            if seen.err {
                return Ok(true);
            }
            *expect = match left {
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
                if command != cmd::QUERY && status & SERVER_STATUS_CURSOR_EXISTS != 0 {
                    return Ok(true);
                }
                *expect = Expect::Rows;
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
            if command == cmd::STMT_FETCH || !more_results(seen.end_of_rows_status()) {
                return Ok(true);
            }
            *expect = Expect::Response;
            Ok(false)
        }
    }
}

/// COM_STMT_PREPARE: STMT_OK, then parameter and column definitions, each block ended by an EOF
/// unless CLIENT_DEPRECATE_EOF.
fn prepare(expect: &mut Expect, seen: &Seen<'_>) -> Result<bool, TrackError> {
    match *expect {
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
                Ok(prepare_next(expect, params, columns))
            }
            _ => Err(seen.malformed("COM_STMT_PREPARE response")),
        },
        Expect::PrepareParams { left, columns } => {
            *expect = if left > 1 {
                Expect::PrepareParams {
                    left: left - 1,
                    columns,
                }
            } else if seen.deprecate_eof {
                return Ok(prepare_next(expect, 0, columns));
            } else {
                Expect::PrepareParamsEof { columns }
            };
            Ok(false)
        }
        Expect::PrepareParamsEof { columns } => {
            if seen.first != Some(0xFE) {
                return Err(seen.malformed("end of parameter definitions"));
            }
            Ok(prepare_next(expect, 0, columns))
        }
        Expect::PrepareColumns(left) => {
            if left > 1 {
                *expect = Expect::PrepareColumns(left - 1);
                return Ok(false);
            }
            if seen.deprecate_eof {
                return Ok(true);
            }
            *expect = Expect::PrepareColumnsEof;
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
fn prepare_next(expect: &mut Expect, params: u16, columns: u16) -> bool {
    if params > 0 {
        *expect = Expect::PrepareParams {
            left: params,
            columns,
        };
        false
    } else if columns > 0 {
        *expect = Expect::PrepareColumns(columns);
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

/// What the packet that ended command `command`'s response says of the session: an OK (0x00, or
/// 0xFE and at least 7 bytes, which ends a result set under CLIENT_DEPRECATE_EOF) or an EOF
/// (0xFE, 5 bytes). None for anything else, and for COM_STMT_PREPARE, whose 0x00 packet is no OK.
pub(super) fn end_status(command: u8, len: u64, payload: &[u8]) -> Option<EndStatus> {
    if command == cmd::STMT_PREPARE {
        return None;
    }
    match payload.first() {
        Some(0xFE) if len == 5 => Some(EndStatus {
            status: eof_status(payload),
            warnings: payload
                .get(1..3)
                .map_or(0, |w| u16::from_le_bytes([w[0], w[1]])),
            insert_id: 0,
        }),
        Some(0x00 | 0xFE) if len >= 7 => {
            let (_, pos) = lenenc_int(payload, 1)?;
            let (insert_id, pos) = lenenc_int(payload, pos)?;
            let s = payload.get(pos..pos + 4)?;
            Some(EndStatus {
                status: u16::from_le_bytes([s[0], s[1]]),
                warnings: u16::from_le_bytes([s[2], s[3]]),
                insert_id,
            })
        }
        _ => None,
    }
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
