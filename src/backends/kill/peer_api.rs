//! What instances say to each other: the one request of the peer protocol and its JSON answer.
//!
//! An instance that receives a KILL of another instance's id asks that instance's admin
//! endpoint `GET /connections/{id}` where the session is (`crate::backends::kill::peer` asks,
//! `crate::control::admin` answers). The wire format lives here, below both, so the admin endpoint does
//! not depend on the KILL client and the client not on the endpoint.

use serde::{Deserialize, Serialize};

/// The path the request names, followed by the connection id in decimal.
pub const CONNECTIONS_PATH: &str = "/connections/";

/// The body of `GET /connections/{id}`, both ways.
#[derive(Debug, Serialize, Deserialize)]
pub struct ConnectionInfo {
    pub id: u32,
    pub instance_id: u8,
    pub backend: String,
    pub address: String,
    pub thread_id: u32,
    /// The user the session authenticated as (absent from older instances, and while unknown).
    #[serde(default)]
    pub user: Option<String>,
}
