//! ERR packets the proxy itself sends.
//!
//! Before the client has seen a greeting it has no capabilities, so libmysqlclient and mysql_async
//! would print a `#` SQLSTATE marker as text: those packets go without it (DESIGN.md §1).

/// Error codes the proxy uses (the server's own codes, so clients react as they would to the server).
pub mod code {
    pub const TOO_MANY_CONNECTIONS: u16 = 1040;
    pub const HANDSHAKE_ERROR: u16 = 1043;
    pub const UNKNOWN_ERROR: u16 = 1105;
    pub const NET_PACKET_TOO_LARGE: u16 = 1153;
    pub const NET_READ_ERROR: u16 = 1158;
    pub const NET_PACKETS_OUT_OF_ORDER: u16 = 1156;
    pub const NOT_SUPPORTED_YET: u16 = 1235;
}

/// Every message the proxy writes starts with this, so users can tell ours from the server's.
pub const PREFIX: &str = "mysql-lb: ";

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
        code::TOO_MANY_CONNECTIONS => "08004",
        code::HANDSHAKE_ERROR | code::NET_PACKETS_OUT_OF_ORDER | code::NET_READ_ERROR => "08S01",
        code::NET_PACKET_TOO_LARGE => "08S01",
        code::NOT_SUPPORTED_YET => "42000",
        _ => "HY000",
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
}
