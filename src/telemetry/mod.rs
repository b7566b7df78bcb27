//! What the proxy tells about the traffic it relays: the Prometheus registry and its
//! per-backend histograms, the query digest table, traffic capture, the log subscriber, and the
//! one HTML escape of the pages that print what clients sent.
//!
//! Below the proxy and the backends: those report into it, it never steers them; nothing here
//! is on a session's hot path beyond a counter, a histogram observation or a queue `try_send`.

pub mod capture;
pub mod digest;
pub mod html;
pub mod logging;
pub mod metrics;
