//! The proxy's own MySQL client: the connections mysql-lb opens to a backend on its own behalf
//! (health checks, KILL, replay), and the way it ends a backend handshake without counting as a
//! connect error of the proxy's address (`decline`).

pub mod decline;
