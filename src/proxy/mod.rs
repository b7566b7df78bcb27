//! The proxy proper: listeners and admission (`server`), the worker threads (`workers`), one
//! client connection from accept to close (`session`), its connection phase (`auth`) and
//! command phase (`relay`), the gated futures a session waits on (`gate`), the proxy-wide state
//! (`state`) and the readiness and stop sequence (`lifecycle`).
//!
//! Every failure a client can still be told about gets an ERR starting `mysql-lb:`; a session
//! never touches another one.

pub mod auth;
pub mod gate;
pub mod lifecycle;
pub mod pauses;
pub mod relay;
pub mod server;
pub mod session;
pub mod state;
pub mod workers;
