//! The backends and what the proxy holds of them: the backend set with its counters, pools,
//! policies and the Lua hook (`balancer`), where a client goes (`route`), health checks
//! (`health`), transaction pooling's shared connections (`pooling`) and KILL across backends and
//! instances (`kill`), and the proxy's own client of a backend (`client`).
//!
//! Below the proxy's sessions, which take backends and connections from here; nothing here
//! knows a session beyond the handle it was given.

pub mod balancer;
pub mod client;
pub mod health;
pub mod kill;
pub mod pooling;
pub mod route;
pub mod rules;
