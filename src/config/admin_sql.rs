//! `admin_sql:`: the SQL admin port (see `crate::control::admin_sql`) and the one account that
//! logs in there.
//!
//! The account is the proxy's own, not a client's: it is given as the hash a MariaDB server
//! keeps (`SELECT PASSWORD('…')` for mysql_native_password, `SELECT ED25519_PASSWORD('…')` for
//! ed25519), never as a password, so the configuration file holds nothing a client could log in
//! to a server with. A client's account never works on the admin port (the proxy holds no
//! client password to compare with), and this one never works on the proxy port (the servers
//! do not know it).

use std::net::SocketAddr;

use serde::Deserialize;

use super::ConfigError;

/// The SQL admin listener; absent from the file, it is off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminSqlConfig {
    /// Fixed at start (a reload reports a change as needing a restart).
    pub address: SocketAddr,
    /// The account, reloadable: each login reads the one in force.
    pub account: AdminAccount,
}

/// The admin port's account: its name and what a login is checked against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminAccount {
    pub user: String,
    pub credential: AdminCredential,
}

/// What a login answers: the hash as a server stores it, never the password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminCredential {
    /// mysql_native_password: SHA1(SHA1(password)), from `password_hash: "*<40 hex>"`.
    Native([u8; 20]),
    /// MariaDB's client_ed25519: the public key, from `ed25519_key:` (43 characters of
    /// unpadded base64, as `ED25519_PASSWORD()` prints it).
    Ed25519([u8; 32]),
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAdminSql {
    address: Option<String>,
    user: Option<String>,
    password_hash: Option<String>,
    ed25519_key: Option<String>,
}

impl RawAdminSql {
    pub(super) fn into_config(self) -> Result<AdminSqlConfig, ConfigError> {
        let address = self.address.ok_or_else(|| {
            ConfigError::invalid("admin_sql.address", "set the address to listen on")
        })?;
        let address: SocketAddr = address.trim().parse().map_err(|_| {
            ConfigError::invalid(
                "admin_sql.address",
                format!("`{address}` is not an IP address and port (like 127.0.0.1:6032)"),
            )
        })?;
        let user = self
            .user
            .filter(|u| !u.is_empty())
            .ok_or_else(|| ConfigError::invalid("admin_sql.user", "set the account's name"))?;
        let credential = match (self.password_hash, self.ed25519_key) {
            (Some(hash), None) => AdminCredential::Native(
                parse_native_hash(&hash)
                    .map_err(|m| ConfigError::invalid("admin_sql.password_hash", m))?,
            ),
            (None, Some(key)) => AdminCredential::Ed25519(
                parse_ed25519_key(&key)
                    .map_err(|m| ConfigError::invalid("admin_sql.ed25519_key", m))?,
            ),
            (Some(_), Some(_)) => {
                return Err(ConfigError::invalid(
                    "admin_sql.ed25519_key",
                    "set either admin_sql.password_hash or admin_sql.ed25519_key, not both",
                ))
            }
            (None, None) => {
                return Err(ConfigError::invalid(
                    "admin_sql.password_hash",
                    "set the account's hash (SELECT PASSWORD('…') on any MariaDB server), \
                     or admin_sql.ed25519_key (SELECT ED25519_PASSWORD('…'))",
                ))
            }
        };
        Ok(AdminSqlConfig {
            address,
            account: AdminAccount { user, credential },
        })
    }
}

/// `*` and 40 hex digits (either case), as `PASSWORD()` and `mysql.user` print it.
pub fn parse_native_hash(text: &str) -> Result<[u8; 20], String> {
    let hex = text.trim().strip_prefix('*').ok_or_else(|| {
        "expected `*` followed by 40 hex digits, as SELECT PASSWORD('…') prints it".to_owned()
    })?;
    if hex.len() != 40 || !hex.is_ascii() {
        return Err(format!(
            "expected 40 hex digits after `*`, found {} characters",
            hex.chars().count()
        ));
    }
    let mut out = [0u8; 20];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
            .map_err(|_| format!("`{}` is not hex", &hex[2 * i..2 * i + 2]))?;
    }
    Ok(out)
}

/// 43 characters of unpadded standard base64 (one `=` of padding allowed) decoding to 32 bytes.
pub fn parse_ed25519_key(text: &str) -> Result<[u8; 32], String> {
    let text = text.trim();
    let text = text.strip_suffix('=').unwrap_or(text);
    if text.len() != 43 {
        return Err(format!(
            "expected the 43 characters ED25519_PASSWORD('…') prints, found {}",
            text.chars().count()
        ));
    }
    let mut bits: u32 = 0;
    let mut held = 0;
    let mut out = Vec::with_capacity(33);
    for c in text.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return Err(format!("`{}` is not a base64 character", c as char)),
        };
        bits = (bits << 6) | u32::from(v);
        held += 6;
        if held >= 8 {
            held -= 8;
            out.push((bits >> held) as u8);
            bits &= (1 << held) - 1;
        }
    }
    out.try_into()
        .map_err(|_| "does not decode to a 32-byte key".to_owned())
}

/// An address off loopback serves the admin port only to TLS clients (`tls.require`): the
/// tables name every backend, user and statement shape.
pub(super) fn validate(admin: &AdminSqlConfig, tls_required: bool) -> Result<(), ConfigError> {
    if !admin.address.ip().is_loopback() && !tls_required {
        return Err(ConfigError::invalid(
            "admin_sql.address",
            format!(
                "{} is not a loopback address: the admin port is served off loopback only with \
                 `tls.require: true`",
                admin.address
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_native_hash_is_read_as_password_prints_it() {
        // SELECT PASSWORD('secret') on MariaDB 10.11.
        let h = parse_native_hash("*14E65567ABDB5135D0CFD9A70B3032C179A49EE7").unwrap();
        assert_eq!(h[0], 0x14);
        assert_eq!(h[19], 0xE7);
        assert!(parse_native_hash("14E65567ABDB5135D0CFD9A70B3032C179A49EE7").is_err());
        assert!(parse_native_hash("*14E65567ABDB5135D0CFD9A70B3032C179A49EE").is_err());
        assert!(parse_native_hash("*14E65567ABDB5135D0CFD9A70B3032C179A49EEZ").is_err());
        assert!(parse_native_hash("*14E65567ABDB5135D0CFD9A70B3032C179A49EÉ").is_err());
    }

    #[test]
    fn an_ed25519_key_is_read_as_ed25519_password_prints_it() {
        // SELECT ED25519_PASSWORD('secret') on MariaDB 10.11.
        let k = parse_ed25519_key("ZIgUREUg5PVgQ6LskhXmO+eZLS0nC8be6HPjYWR4YJY").unwrap();
        assert_eq!(k[0], 0x64);
        assert!(parse_ed25519_key("ZIgUREUg5PVgQ6LskhXmO+eZLS0nC8be6HPjYWR4YJ").is_err());
        assert!(parse_ed25519_key("ZIgUREUg5PVgQ6LskhXmO+eZLS0nC8be6HPjYWR4YJ!").is_err());
    }
}
