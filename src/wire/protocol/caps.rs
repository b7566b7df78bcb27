//! Capability bits as plain `u32` masks.
//!
//! The relay patches and tests these bits in raw bytes on every handshake, so it works with the
//! wire representation directly rather than `mysql_common`'s `CapabilityFlags`, which drops bits it
//! does not know (MariaDB's extended capabilities among them).

pub const CLIENT_LONG_PASSWORD: u32 = 1;
/// In MariaDB's greeting and response this bit is clear, which says "extended MariaDB capabilities
/// follow in the reserved bytes".
pub const CLIENT_MYSQL: u32 = CLIENT_LONG_PASSWORD;
pub const CLIENT_CONNECT_WITH_DB: u32 = 1 << 3;
pub const CLIENT_COMPRESS: u32 = 1 << 5;
pub const CLIENT_LOCAL_FILES: u32 = 1 << 7;
pub const CLIENT_PROTOCOL_41: u32 = 1 << 9;
pub const CLIENT_SSL: u32 = 1 << 11;
pub const CLIENT_TRANSACTIONS: u32 = 1 << 13;
pub const CLIENT_SECURE_CONNECTION: u32 = 1 << 15;
pub const CLIENT_MULTI_STATEMENTS: u32 = 1 << 16;
pub const CLIENT_MULTI_RESULTS: u32 = 1 << 17;
pub const CLIENT_PS_MULTI_RESULTS: u32 = 1 << 18;
pub const CLIENT_PLUGIN_AUTH: u32 = 1 << 19;
pub const CLIENT_CONNECT_ATTRS: u32 = 1 << 20;
pub const CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA: u32 = 1 << 21;
pub const CLIENT_SESSION_TRACK: u32 = 1 << 23;
pub const CLIENT_DEPRECATE_EOF: u32 = 1 << 24;
pub const CLIENT_OPTIONAL_RESULTSET_METADATA: u32 = 1 << 25;
pub const CLIENT_ZSTD_COMPRESSION_ALGORITHM: u32 = 1 << 26;
pub const CLIENT_QUERY_ATTRIBUTES: u32 = 1 << 27;

/// MariaDB extended capabilities (the upper 32 bits of MariaDB's 64-bit capability set).
pub const MARIADB_CLIENT_PROGRESS: u32 = 1;
pub const MARIADB_CLIENT_STMT_BULK_OPERATIONS: u32 = 1 << 2;
pub const MARIADB_CLIENT_EXTENDED_METADATA: u32 = 1 << 3;
pub const MARIADB_CLIENT_CACHE_METADATA: u32 = 1 << 4;

/// Bits the proxy does not support yet: cleared in both directions so both ends agree.
/// `CLIENT_QUERY_ATTRIBUTES` (MySQL 8.0.23+) puts a parameter-count prefix before a COM_QUERY's
/// text, which would hide a `KILL` from [`crate::backends::kill`]; without it clients send plain text.
pub const UNSUPPORTED: u32 = CLIENT_SSL
    | CLIENT_COMPRESS
    | CLIENT_ZSTD_COMPRESSION_ALGORITHM
    | CLIENT_OPTIONAL_RESULTSET_METADATA
    | CLIENT_QUERY_ATTRIBUTES;
/// MariaDB extended bits the proxy does not support yet.
pub const MARIADB_UNSUPPORTED: u32 = MARIADB_CLIENT_CACHE_METADATA;

/// Server status flags read from OK/EOF packets.
pub const SERVER_MORE_RESULTS_EXISTS: u16 = 0x0008;
pub const SERVER_STATUS_CURSOR_EXISTS: u16 = 0x0040;

/// The capabilities a session runs with: what the backend offered ∩ what was forwarded for the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Negotiated {
    pub capabilities: u32,
    pub mariadb_capabilities: u32,
}

impl Negotiated {
    pub fn has(&self, bit: u32) -> bool {
        self.capabilities & bit != 0
    }

    pub fn has_mariadb(&self, bit: u32) -> bool {
        self.mariadb_capabilities & bit != 0
    }
}
