//! The prepared-statement commands of a transaction-mode session, which the relay stops before
//! (`Tracker::pause_statements`): the session's ids are the proxy's, its statements are prepared
//! on whichever server connection runs them (`crate::backends::pooling::statements` says how). A prepare
//! runs here, its answer given the session's id; a close is the session's alone and never reaches
//! a server; the others get the server connection's id (and, when needed, the session's parameter
//! types) written in and go through the relay like any command.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite};

use super::client::{answer, consume, fill, write};
use super::{Pooled, SessionEnd};
use crate::backends::pooling::command::{self, Command, Statement};
use crate::backends::pooling::statements::{
    execute_head, handler_name, insert_types, names_statement, set_statement_id, ConnStatements,
    ExecuteHead, SessionStatements,
};
use crate::backends::pooling::{PrepareAnswer, ServerConn};
use crate::net::leg::LegStream;
use crate::proxy::relay::{Observer, RelayEnd};
use crate::wire::protocol::errors::{code, err_packet};
use crate::wire::protocol::response::{cmd, Completed};

/// How long the pool waits for a prepare's answer before it gives the connection up.
const PREPARE_TIMEOUT: Duration = Duration::from_secs(60);

/// MariaDB's errors for a statement id it does not know, for one statement too many, and for a
/// statement whose parameters changed since the client prepared it.
const UNKNOWN_STMT_HANDLER: u16 = 1243;
const MAX_PREPARED_STMT_COUNT_REACHED: u16 = 1461;
const NEED_REPREPARE: u16 = 1615;

/// COM_STMT_BULK_EXECUTE's flag: parameter types follow the flags.
const BULK_SEND_TYPES: u16 = 128;

/// What the statement command at the front of the client's buffer needs.
pub(super) enum Front {
    /// Done without a server connection: a close, or an ERR for an id the session does not
    /// hold.
    Done,
    /// Not a prepared-statement command after all: relayed as any other.
    Relay,
    /// The client's COM_STMT_PREPARE, whole in the buffer, which ends at `end`.
    Prepare { end: usize },
    /// A command naming the session's statement `id`; its first chunk ends at `end`.
    Statement {
        command: u8,
        id: u32,
        client_id: u32,
        end: usize,
    },
}

/// Where an execute's parameter types go.
enum Types {
    /// After COM_STMT_EXECUTE's `new_params_bound_flag`, at this offset; the flag is set.
    Execute(usize),
    /// After COM_STMT_BULK_EXECUTE's flags, which get `BULK_SEND_TYPES`.
    Bulk,
}

/// What [`run`] did with the front command.
pub(super) enum Ran {
    /// Answered here.
    Done,
    /// Rewritten for the server connection: the relay sends it on.
    Relay,
}

/// Reads enough of the statement command at the front of `up` to say what it needs, and does
/// what needs no server connection.
pub(super) async fn front<C>(
    client: &mut LegStream<C>,
    up: &mut BytesMut,
    observer: &mut Pooled<'_, '_>,
) -> Result<Front, RelayEnd>
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    // What the pool reads of it is decided over the bytes alone (`pooling::command`).
    let mut reads = 0usize;
    let head = loop {
        match command::statement(up) {
            // Each wait asks for more than is there; a bound all the same.
            Statement::NeedMore(n) if reads < 8 => fill(client, up, n).await?,
            head => break head,
        }
        reads += 1;
    };
    let (command, client_id, end) = match head {
        Statement::NeedMore(_) | Statement::NotStatement => return Ok(Front::Relay),
        Statement::Prepare { end } => return Ok(Front::Prepare { end }),
        Statement::PrepareTooLarge => {
            let message =
                "a statement to prepare of 16 MiB or more is refused in a transaction-mode pool";
            answer(client, up, code::NET_PACKET_TOO_LARGE, message).await?;
            return Ok(Front::Done);
        }
        Statement::Malformed { command } => {
            let message = format!("malformed {} packet", handler_name(command));
            answer(client, up, code::UNKNOWN_ERROR, &message).await?;
            return Ok(Front::Done);
        }
        Statement::Named { command, id, end } => (command, id, end),
    };
    let id = observer.statements.resolve(client_id);
    let silent = matches!(command, cmd::STMT_CLOSE | cmd::STMT_SEND_LONG_DATA);
    match id {
        Some(id) if command == cmd::STMT_CLOSE => {
            observer.relayed(true, end);
            let seen = up.get(4..end.min(up.len())).unwrap_or_default();
            observer.statement(command, seen);
            observer.statements.close(id);
            consume(client, up).await?;
            Ok(Front::Done)
        }
        Some(id) => Ok(Front::Statement {
            command,
            id,
            client_id,
            end,
        }),
        // The server answers neither a close nor long data, not even for an unknown id.
        None if silent => {
            consume(client, up).await?;
            Ok(Front::Done)
        }
        None => {
            let message = format!(
                "Unknown prepared statement handler ({client_id}) given to {}",
                handler_name(command)
            );
            answer(client, up, UNKNOWN_STMT_HANDLER, &message).await?;
            Ok(Front::Done)
        }
    }
}

/// Carries out `front` on the session's server connection `held` (`deprecate_eof` as the
/// session negotiated).
pub(super) async fn run<C>(
    front: Front,
    client: &mut LegStream<C>,
    held: &mut ServerConn,
    up: &mut BytesMut,
    observer: &mut Pooled<'_, '_>,
    deprecate_eof: bool,
) -> Result<Ran, SessionEnd>
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let mut on = OnHeld {
        client,
        up,
        held,
        observer,
        deprecate_eof,
    };
    match front {
        Front::Done | Front::Relay => Ok(Ran::Done),
        Front::Prepare { end } => Ok(on.prepare(end).await?),
        Front::Statement {
            command,
            id,
            client_id,
            end,
        } => {
            let ran = on.statement(command, id, end).await?;
            if matches!(ran, Ran::Relay) {
                on.observer.front = Some(client_id);
            }
            Ok(ran)
        }
    }
}

/// A statement command at the front of the client's buffer (`up`), carried out on the server
/// connection the session holds (`held`); `deprecate_eof` as the session negotiated.
struct OnHeld<'c, 'a, 'r, C> {
    client: &'c mut LegStream<C>,
    up: &'c mut BytesMut,
    held: &'c mut ServerConn,
    observer: &'c mut Pooled<'a, 'r>,
    deprecate_eof: bool,
}

impl<C> OnHeld<'_, '_, '_, C>
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    /// The client's COM_STMT_PREPARE, which ends at `end`: the client gets the server's answer
    /// with the session's id for the statement.
    async fn prepare(&mut self, end: usize) -> Result<Ran, RelayEnd> {
        // `front` saw it whole (`command::Statement::Prepare`): `5 <= end <= up.len()`.
        let Some(text) = self.up.get(5..end) else {
            let message = "malformed COM_STMT_PREPARE packet";
            answer(self.client, self.up, code::UNKNOWN_ERROR, message).await?;
            return Ok(Ran::Done);
        };
        if let Some(why) = self.observer.inner.rule_refuses_prepare(text) {
            // Never prepared, so no execute of it can run.
            answer(
                self.client,
                self.up,
                crate::proxy::session::rules::REFUSED,
                &why,
            )
            .await?;
            return Ok(Ran::Done);
        }
        let Some(text) = self.up.get(5..end) else {
            return Ok(Ran::Done);
        };
        let text: Arc<[u8]> = Arc::from(text);
        self.observer.relayed(true, end);
        let tag = self.observer.statement(cmd::STMT_PREPARE, &self.up[4..end]);
        let sent = Instant::now();
        let (held, deprecate_eof) = (&mut *self.held, self.deprecate_eof);
        let mut answer = within(held.prepare(&self.up[..end], deprecate_eof)).await?;
        if server_full(&answer) && make_room(held).await? {
            answer = within(held.prepare(&self.up[..end], deprecate_eof)).await?;
        }
        self.up.advance(end);
        let now = Instant::now();
        let mut bytes = answer.bytes;
        let mut done = Completed {
            command: cmd::STMT_PREPARE,
            latency: now - sent,
            first_byte: now - sent,
            at: Some(now),
            tag,
            ..Completed::default()
        };
        match answer.ok {
            Some(ok) => {
                match self.observer.statements.add(Arc::clone(&text), ok.params) {
                    Some(id) => {
                        set_statement_id(&mut bytes, id);
                        done.prepared = Some(id);
                    }
                    None => {
                        bytes = too_many_statements();
                        done.error = true;
                        done.error_code = MAX_PREPARED_STMT_COUNT_REACHED;
                    }
                }
                // Kept for the connection's sessions either way.
                if let Some(id) = held.statements.insert(text, ok.id, ok.params) {
                    held.close_statement(id)
                        .await
                        .map_err(RelayEnd::BackendIo)?;
                }
            }
            None => {
                self.observer.statements.forget_last();
                done.error = true;
                done.error_code = bytes
                    .get(5..7)
                    .map_or(0, |c| u16::from_le_bytes([c[0], c[1]]));
            }
        }
        self.observer.completed(&done);
        self.observer.relayed(false, bytes.len());
        write(self.client, &bytes).await?;
        Ok(Ran::Done)
    }

    /// A command naming the session's statement `id` (its first chunk ends at `end`): prepared
    /// on `held` first if it is not there yet, then given `held`'s id and, for an execute that
    /// does not send its parameter types, the session's, when the server statement was last
    /// bound otherwise.
    async fn statement(&mut self, command: u8, id: u32, end: usize) -> Result<Ran, SessionEnd> {
        let Some(prepared) = self.observer.statements.get(id) else {
            return Err(SessionEnd::NoServerConnection);
        };
        let (text, params) = (Arc::clone(&prepared.text), prepared.params);
        let silent = command == cmd::STMT_SEND_LONG_DATA;
        let Some((server_id, bound)) = self.on_connection(&text, params, silent).await? else {
            return Ok(Ran::Done);
        };
        set_statement_id(self.up, server_id);
        let Some((place, sent)) = self.types_place(command, end, params).await? else {
            return Ok(Ran::Relay);
        };
        let Some(prepared) = self.observer.statements.get_mut(id) else {
            return Ok(Ran::Relay);
        };
        let mut now_bound = bound.clone();
        let sent = sent.and_then(|(from, to)| self.up.get(from..to));
        let needed = prepared.rebind(&mut now_bound, sent);
        if now_bound != bound {
            bind(self.held, &text, now_bound);
        }
        let Some(types) = needed else {
            return Ok(Ran::Relay);
        };
        let up = &mut *self.up;
        let written = match place {
            Types::Execute(flag_at) => insert_types(up, flag_at + 1, Some(flag_at), &types),
            Types::Bulk => {
                let written = insert_types(up, 11, None, &types);
                if let Some(at) = up.get_mut(9..11).filter(|_| written) {
                    let flags = u16::from_le_bytes([at[0], at[1]]) | BULK_SEND_TYPES;
                    at.copy_from_slice(&flags.to_le_bytes());
                }
                written
            }
        };
        if !written {
            let message = "an execute of 16 MiB or more cannot move to another server connection without its parameter types; send them with it";
            answer(self.client, up, code::NET_PACKET_TOO_LARGE, message).await?;
            return Ok(Ran::Done);
        }
        bind(self.held, &text, Some(types));
        Ok(Ran::Relay)
    }

    /// `held`'s id for `text` (a statement of `params` parameters) and the types it was last
    /// bound with: one lookup when the connection has it (the common case), else it is prepared
    /// there now. None when the command was answered here instead (the server refused the text
    /// now, or its parameters changed; `silent`: a command the server never answers, dropped).
    async fn on_connection(
        &mut self,
        text: &Arc<[u8]>,
        params: u16,
        silent: bool,
    ) -> Result<Option<(u32, Option<Arc<[u8]>>)>, RelayEnd> {
        let held = &mut *self.held;
        if let Some(on) = held.statements.get(text) {
            return Ok(Some((on.id, on.bound.clone())));
        }
        let mut prepared = within(held.prepare_text(text, self.deprecate_eof)).await?;
        if server_full(&prepared) && make_room(held).await? {
            prepared = within(held.prepare_text(text, self.deprecate_eof)).await?;
        }
        let Some(ok) = prepared.ok else {
            // Refused now (a table gone): the command gets the server's error.
            if silent {
                consume(self.client, self.up).await?;
            } else {
                let seq = consume(self.client, self.up).await?.wrapping_add(1);
                let mut err = prepared.bytes;
                if let Some(at) = err.get_mut(3) {
                    *at = seq;
                }
                write(self.client, &err).await?;
            }
            return Ok(None);
        };
        if let Some(close) = held.statements.insert(Arc::clone(text), ok.id, ok.params) {
            held.close_statement(close)
                .await
                .map_err(RelayEnd::BackendIo)?;
        }
        if ok.params != params {
            held.statements.remove(text);
            held.close_statement(ok.id)
                .await
                .map_err(RelayEnd::BackendIo)?;
            let message = "Prepared statement needs to be re-prepared";
            if silent {
                consume(self.client, self.up).await?;
            } else {
                answer(self.client, self.up, NEED_REPREPARE, message).await?;
            }
            return Ok(None);
        }
        Ok(Some((ok.id, None)))
    }

    /// Where the execute at the front of `up` (`command`, its first chunk `len` bytes) keeps
    /// its parameter types, and the types it sends, if any (read from the client as far as
    /// needed); None for a command without.
    async fn types_place(
        &mut self,
        command: u8,
        len: usize,
        params: u16,
    ) -> Result<Option<(Types, Option<(usize, usize)>)>, RelayEnd> {
        let (client, up) = (&mut *self.client, &mut *self.up);
        Ok(match command {
            // Read within the packet's first chunk only: what follows it is the next command's.
            cmd::STMT_EXECUTE => loop {
                match execute_head(up.get(..len).unwrap_or(up), params) {
                    ExecuteHead::NeedMore(n) if n <= len => fill(client, up, n).await?,
                    ExecuteHead::Params { flag_at, types } => {
                        break Some((Types::Execute(flag_at), types))
                    }
                    ExecuteHead::NeedMore(_) | ExecuteHead::NoParams => break None,
                }
            },
            cmd::STMT_BULK_EXECUTE if params > 0 && len >= 11 => {
                fill(client, up, 11).await?;
                let flags = up
                    .get(9..11)
                    .map_or(0, |f| u16::from_le_bytes([f[0], f[1]]));
                let end = 11 + 2 * usize::from(params);
                let types = if flags & BULK_SEND_TYPES != 0 && end <= len {
                    fill(client, up, end).await?;
                    Some((11, end))
                } else {
                    None
                };
                Some((Types::Bulk, types))
            }
            _ => None,
        })
    }
}

/// The ERR of a prepare past the session's own statement limit.
fn too_many_statements() -> Vec<u8> {
    let message = format!(
        "Can't create more than max_prepared_stmt_count statements (current value: {}) in one session",
        crate::backends::pooling::statements::MAX_PER_SESSION
    );
    err_packet(1, MAX_PREPARED_STMT_COUNT_REACHED, Some("42000"), &message)
}

/// Notes the types `held`'s statement for `text` is executed with from now on.
fn bind(held: &mut ServerConn, text: &[u8], types: Option<Arc<[u8]>>) {
    if let Some(on) = held.statements.get_mut(text) {
        on.bound = types;
    }
}

/// The relay stopped before `packet` (header first, maybe with what follows, maybe cut short;
/// see `Steering::resume_statement`): rewrites it in place when the connection the session
/// holds (`conn`) has its statement prepared and bound as the session last bound it, so the
/// relay goes on instead of ending. Anything else (a prepare, a close, long data, types to write
/// in, an unknown id) is left to [`front`] and [`run`].
pub(super) fn resume(
    packet: &mut [u8],
    session: &mut SessionStatements,
    conn: &mut ConnStatements,
    front: &mut Option<u32>,
) -> bool {
    if !matches!(
        command::command(packet),
        Command::Statement(cmd::STMT_EXECUTE | cmd::STMT_RESET | cmd::STMT_FETCH)
    ) {
        return false;
    }
    let Statement::Named {
        command,
        id: client_id,
        end: len,
    } = command::statement(packet)
    else {
        return false;
    };
    let Some(prepared) = session
        .resolve(client_id)
        .and_then(|id| session.get_mut(id))
    else {
        return false;
    };
    let Some(on) = conn.get_mut(&prepared.text) else {
        return false;
    };
    if command == cmd::STMT_EXECUTE {
        let head = &packet[..len.min(packet.len())];
        let sent = match execute_head(head, prepared.params) {
            ExecuteHead::NoParams => None,
            ExecuteHead::Params { types, .. } => types.map(|(from, to)| &head[from..to]),
            ExecuteHead::NeedMore(_) => return false,
        };
        // Types to write in need the packet to grow: that is `run`'s.
        if prepared.rebind(&mut on.bound, sent).is_some() {
            return false;
        }
    }
    set_statement_id(packet, on.id);
    *front = Some(client_id);
    true
}

/// Whether a prepare was refused for the server's `max_prepared_stmt_count`, which counts the
/// statements of all its connections.
fn server_full(answer: &PrepareAnswer) -> bool {
    answer.ok.is_none()
        && answer.bytes.get(5..7) == Some(&MAX_PREPARED_STMT_COUNT_REACHED.to_le_bytes())
}

/// Closes half of the statements `held` keeps for its sessions (they are prepared again where
/// needed), so a prepare the server refused as one too many may be tried again; false when it
/// keeps none.
async fn make_room(held: &mut ServerConn) -> Result<bool, RelayEnd> {
    let closed = held.statements.evict(held.statements.len().div_ceil(2));
    for &id in &closed {
        held.close_statement(id)
            .await
            .map_err(RelayEnd::BackendIo)?;
    }
    Ok(!closed.is_empty())
}

/// A prepare on the server within [`PREPARE_TIMEOUT`]; a failure ends the session's hold on
/// the connection.
async fn within<T>(
    exchange: impl std::future::Future<Output = std::io::Result<T>>,
) -> Result<T, RelayEnd> {
    match tokio::time::timeout(PREPARE_TIMEOUT, exchange).await {
        Ok(Ok(t)) => Ok(t),
        Ok(Err(e)) => Err(RelayEnd::BackendIo(e)),
        Err(_) => Err(RelayEnd::BackendIo(std::io::ErrorKind::TimedOut.into())),
    }
}

/// The payload the session's observers see for the command the relay sends next: the client's
/// id in the server connection's place (`front`), so digests and capture follow the client's ids.
pub(super) fn as_client_sent<'p>(
    command: u8,
    payload: &'p [u8],
    front: &mut Option<u32>,
    scratch: &'p mut Vec<u8>,
) -> &'p [u8] {
    match front.take() {
        Some(id) if names_statement(command) && payload.len() >= 5 => {
            scratch.clear();
            scratch.extend_from_slice(payload);
            scratch[1..5].copy_from_slice(&id.to_le_bytes());
            scratch
        }
        other => {
            *front = other;
            payload
        }
    }
}
