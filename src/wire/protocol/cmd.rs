//! The command bytes of the command phase that the proxy tells apart. A module of their own so
//! the tracker (which response each command expects) and statement parsing (is this a KILL?)
//! both read them from below, neither importing the other.

/// COM_SLEEP, the server's own; also what an empty packet (no command byte) is taken for.
pub const SLEEP: u8 = 0x00;
pub const QUIT: u8 = 0x01;
pub const INIT_DB: u8 = 0x02;
pub const QUERY: u8 = 0x03;
pub const FIELD_LIST: u8 = 0x04;
pub const STATISTICS: u8 = 0x09;
pub const PING: u8 = 0x0E;
pub const PROCESS_INFO: u8 = 0x0A;
pub const PROCESS_KILL: u8 = 0x0C;
pub const CHANGE_USER: u8 = 0x11;
pub const BINLOG_DUMP: u8 = 0x12;
pub const STMT_PREPARE: u8 = 0x16;
pub const STMT_EXECUTE: u8 = 0x17;
pub const STMT_SEND_LONG_DATA: u8 = 0x18;
pub const STMT_CLOSE: u8 = 0x19;
pub const STMT_RESET: u8 = 0x1A;
pub const SET_OPTION: u8 = 0x1B;
pub const STMT_FETCH: u8 = 0x1C;
pub const RESET_CONNECTION: u8 = 0x1F;
pub const BINLOG_DUMP_GTID: u8 = 0x1E;
pub const STMT_BULK_EXECUTE: u8 = 0xFA;
