//! ERR packets: the ones the proxy itself sends, and reading the ones servers send.
//!
//! Before the client has seen a greeting it has no capabilities, so libmysqlclient and mysql_async
//! would print a `#` SQLSTATE marker as text: those packets go without it. A server does the same
//! when it refuses a connection before greeting, so the reader accepts both forms.

/// Error codes the proxy uses (the server's own codes, so clients react as they would to the server).
pub mod code {
    pub const TOO_MANY_CONNECTIONS: u16 = 1040;
    pub const HANDSHAKE_ERROR: u16 = 1043;
    pub const ACCESS_DENIED: u16 = 1045;
    pub const UNKNOWN_ERROR: u16 = 1105;
    pub const NET_PACKET_TOO_LARGE: u16 = 1153;
    /// ER_NOT_SUPPORTED_AUTH_MODE: the client cannot follow the auth plugin asked for.
    pub const NOT_SUPPORTED_AUTH_MODE: u16 = 1251;
    pub const NET_PACKETS_OUT_OF_ORDER: u16 = 1156;
    /// ER_SECURE_TRANSPORT_REQUIRED: a plaintext TCP client where TLS is required.
    pub const SECURE_TRANSPORT_REQUIRED: u16 = 3159;
    /// ER_OPTION_PREVENTS_STATEMENT: what a `read_only` server answers a write; a write that
    /// finds no primary to run on.
    pub const OPTION_PREVENTS_STATEMENT: u16 = 1290;
    /// ER_NOT_ALLOWED_COMMAND: a statement a query rule refuses (as ProxySQL answers one).
    pub const NOT_ALLOWED_COMMAND: u16 = 1148;
    /// ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION: a command a session's replica may not take.
    pub const READ_ONLY_TRANSACTION: u16 = 1792;
}

/// Every message the proxy writes starts with this, so users can tell ours from the server's.
const PREFIX: &str = "mysql-lb: ";

/// A whole ERR packet (4-byte header included) with the given sequence id.
/// `sqlstate` is written with its `#` marker when given; pass `None` before the handshake.
pub fn err_packet(seq: u8, code: u16, sqlstate: Option<&str>, message: &str) -> Vec<u8> {
    let msg = format!("{PREFIX}{message}");
    // A payload is at most 0xFFFFFF bytes; our messages are short, but never trust a formatted length.
    let msg = &msg.as_bytes()[..msg.len().min(4096)];
    let mut payload = Vec::with_capacity(9 + msg.len());
    payload.push(0xFF);
    payload.extend_from_slice(&code.to_le_bytes());
    if let Some(state) = sqlstate {
        payload.push(b'#');
        let mut state_bytes = [b'0'; 5];
        for (dst, src) in state_bytes.iter_mut().zip(state.bytes()) {
            *dst = src;
        }
        payload.extend_from_slice(&state_bytes);
    }
    payload.extend_from_slice(msg);
    let mut packet = Vec::with_capacity(4 + payload.len());
    let len = payload.len() as u32;
    packet.extend_from_slice(&len.to_le_bytes()[..3]);
    packet.push(seq);
    packet.extend_from_slice(&payload);
    packet
}

/// ERR for a client that has not seen a greeting yet: sequence id 0, no SQLSTATE marker.
pub fn pre_greeting_err(code: u16, message: &str) -> Vec<u8> {
    err_packet(0, code, None, message)
}

/// The SQLSTATE a proxy error carries once the client speaks protocol 4.1.
pub fn sqlstate_for(code: u16) -> &'static str {
    match code {
        code::TOO_MANY_CONNECTIONS | code::NOT_SUPPORTED_AUTH_MODE => "08004",
        code::ACCESS_DENIED => "28000",
        code::HANDSHAKE_ERROR | code::NET_PACKETS_OUT_OF_ORDER | code::NET_PACKET_TOO_LARGE => {
            "08S01"
        }
        code::READ_ONLY_TRANSACTION => "25006",
        code::NOT_ALLOWED_COMMAND => "42000",
        _ => "HY000",
    }
}

/// Longest message kept from a server's ERR: the servers' own limit (MYSQL_ERRMSG_SIZE), so a
/// hostile peer cannot make a log line or an error value arbitrarily long.
pub const MAX_SERVER_MESSAGE: usize = 512;

/// The code and message of an ERR packet a server sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerErr {
    pub code: u16,
    /// Without the `#` SQLSTATE marker and state, cut at [`MAX_SERVER_MESSAGE`] bytes.
    pub message: String,
}

impl ServerErr {
    /// Reads an ERR payload (0xFF, code, [`#` and 5-byte SQLSTATE], message); `None` when it is
    /// not an ERR or too short to hold a code.
    pub fn parse(payload: &[u8]) -> Option<ServerErr> {
        let [0xFF, lo, hi, rest @ ..] = payload else {
            return None;
        };
        let message = match rest.strip_prefix(b"#") {
            Some(after_marker) => after_marker.get(5..).unwrap_or_default(),
            None => rest,
        };
        let message = message.get(..MAX_SERVER_MESSAGE).unwrap_or(message);
        Some(ServerErr {
            code: u16::from_le_bytes([*lo, *hi]),
            message: String::from_utf8_lossy(message).into_owned(),
        })
    }

    /// As [`ServerErr::parse`], with code 0 and no message for a payload too short to hold one,
    /// for callers that already know the packet is an ERR and only want it for a log line.
    pub fn parse_lenient(payload: &[u8]) -> ServerErr {
        Self::parse(payload).unwrap_or(ServerErr {
            code: 0,
            message: String::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pre_greeting_err_has_seq_zero_and_no_marker() {
        let p = pre_greeting_err(code::TOO_MANY_CONNECTIONS, "Too many connections");
        assert_eq!(&p[..4], &[(p.len() - 4) as u8, 0, 0, 0]);
        assert_eq!(p[4], 0xFF);
        assert_eq!(u16::from_le_bytes([p[5], p[6]]), 1040);
        assert_eq!(&p[7..], b"mysql-lb: Too many connections");
    }

    #[test]
    fn err_with_sqlstate_has_marker_after_code() {
        let p = err_packet(2, code::HANDSHAKE_ERROR, Some("08S01"), "Bad handshake");
        assert_eq!(p[3], 2);
        assert_eq!(&p[7..13], b"#08S01");
        assert!(p.ends_with(b"mysql-lb: Bad handshake"));
    }

    fn server_err(payload: &[u8]) -> Option<(u16, String)> {
        ServerErr::parse(payload).map(|e| (e.code, e.message))
    }

    #[test]
    fn server_err_with_and_without_sqlstate() {
        let with_state = [&[0xFF, 0x15, 0x04][..], b"#28000Access denied"].concat();
        assert_eq!(
            server_err(&with_state),
            Some((1045, "Access denied".into()))
        );
        let without = [&[0xFF, 0x10, 0x04][..], b"Too many connections"].concat();
        assert_eq!(
            server_err(&without),
            Some((1040, "Too many connections".into()))
        );
        // A marker with a state cut short leaves no message rather than a piece of the state.
        assert_eq!(server_err(b"\xFF\x15\x04#280"), Some((1045, String::new())));
        assert_eq!(server_err(&[0xFF, 0x15, 0x04]), Some((1045, String::new())));
    }

    #[test]
    fn server_err_rejects_what_is_not_an_err() {
        assert_eq!(server_err(&[]), None);
        assert_eq!(server_err(&[0xFF]), None);
        assert_eq!(server_err(&[0xFF, 0x10]), None);
        assert_eq!(server_err(&[0x00, 0x10, 0x04]), None);
        assert_eq!(ServerErr::parse_lenient(&[0xFF]).code, 0);
    }

    #[test]
    fn server_err_message_is_bounded() {
        let long = [&[0xFF, 0x10, 0x04][..], &[b'x'; 5000][..]].concat();
        let e = ServerErr::parse(&long).unwrap();
        assert_eq!(e.message.len(), MAX_SERVER_MESSAGE);
        // Invalid UTF-8 is replaced, not rejected.
        let bad = [0xFF, 0x10, 0x04, b'a', 0xC3];
        assert_eq!(server_err(&bad), Some((1040, "a\u{FFFD}".into())));
    }

    #[test]
    fn proxy_errors_read_back() {
        let p = err_packet(3, code::UNKNOWN_ERROR, Some("HY000"), "boom");
        assert_eq!(server_err(&p[4..]), Some((1105, "mysql-lb: boom".into())));
        let p = pre_greeting_err(code::TOO_MANY_CONNECTIONS, "Too many connections");
        assert_eq!(
            server_err(&p[4..]),
            Some((1040, "mysql-lb: Too many connections".into()))
        );
    }
}
