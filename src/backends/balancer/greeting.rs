//! The backends' greetings as the set keeps them for deferred connects: each backend's latest
//! ([`LearnedGreeting`], stored by every session and health check that read one), and the
//! template a deferred connect greets its clients with ([`GreetingTemplate`]), built from them
//! once and rebuilt only when one of them changed, so a connection copies it and sets its own
//! connection id and nonce rather than rebuilding it.

use std::sync::Arc;

use super::{Backend, BackendSet};
use crate::wire::protocol::handshake::{patch_greeting_with, Greeting, Strip};

/// A backend's greeting as clients get it, kept for deferred connects.
#[derive(Debug)]
pub struct LearnedGreeting {
    /// The whole packet, header included, with the proxy's capability patches applied.
    pub packet: Vec<u8>,
    pub greeting: Greeting,
}

/// The greeting a deferred connect sends (before its nonce and id are set): the first learned
/// backend greeting, with only the capabilities every backend that greeted offered.
#[derive(Debug)]
pub struct GreetingTemplate {
    /// The whole packet, header included.
    pub packet: Vec<u8>,
    pub greeting: Greeting,
    /// What it was built from: each backend's learned greeting, in set order.
    sources: Vec<Option<Arc<LearnedGreeting>>>,
}

impl BackendSet {
    /// The template deferred connects greet with; None until some backend has greeted. Built
    /// when first asked for and again only after a backend's learned greeting changed.
    pub fn greeting_template(&self) -> Option<Arc<GreetingTemplate>> {
        if let Some(kept) = self.template.load_full() {
            if self.template_is_current(&kept) {
                return Some(kept);
            }
        }
        let built = Arc::new(self.build_template()?);
        self.template.store(Some(Arc::clone(&built)));
        Some(built)
    }

    /// Whether every backend's learned greeting is still the one `template` was built from.
    fn template_is_current(&self, template: &GreetingTemplate) -> bool {
        template.sources.len() == self.backends.len()
            && self
                .backends
                .iter()
                .zip(&template.sources)
                .all(|(b, source)| match (b.greeting.load().as_ref(), source) {
                    (Some(now), Some(then)) => Arc::ptr_eq(now, then),
                    (None, None) => true,
                    _ => false,
                })
    }

    fn build_template(&self) -> Option<GreetingTemplate> {
        let sources: Vec<Option<Arc<LearnedGreeting>>> = self
            .backends
            .iter()
            .map(|b| b.greeting.load_full())
            .collect();
        let mut learned = sources.iter().flatten();
        let first = learned.next()?;
        let (mut common, mut mariadb) = (
            first.greeting.capabilities,
            first.greeting.mariadb_capabilities,
        );
        for g in learned {
            common &= g.greeting.capabilities;
            mariadb &= g.greeting.mariadb_capabilities;
        }
        let mut packet = first.packet.clone();
        let strip = Strip {
            capabilities: first.greeting.capabilities & !common,
            mariadb_capabilities: first.greeting.mariadb_capabilities & !mariadb,
        };
        let greeting = patch_greeting_with(packet.get_mut(4..)?, strip).ok()?;
        Some(GreetingTemplate {
            packet,
            greeting,
            sources,
        })
    }
}

impl Backend {
    /// Keeps `packet` (a greeting as patched for clients) as this backend's greeting, unless one
    /// with the same version and capabilities is already kept (every connect greets anew; only a
    /// changed server is worth a store, and a store rebuilds the set's template).
    pub fn learn_greeting(&self, packet: &[u8], greeting: &Greeting) {
        let kept = self.greeting.load();
        let same = kept.as_ref().is_some_and(|k| {
            k.greeting.capabilities == greeting.capabilities
                && k.greeting.mariadb_capabilities == greeting.mariadb_capabilities
                && k.greeting.server_version == greeting.server_version
                && k.greeting.auth_plugin == greeting.auth_plugin
                && k.greeting.charset == greeting.charset
        });
        if !same {
            self.greeting.store(Some(Arc::new(LearnedGreeting {
                packet: packet.to_vec(),
                greeting: greeting.clone(),
            })));
        }
    }

    /// As [`learn_greeting`](Self::learn_greeting) for a greeting as the server sent it (a
    /// health check's), patched with `strip` first; a greeting that does not parse is ignored.
    pub fn learn_raw_greeting(&self, packet: &[u8], strip: Strip) {
        let mut packet = packet.to_vec();
        if let Some(payload) = packet.get_mut(4..) {
            if let Ok(greeting) = patch_greeting_with(payload, strip) {
                self.learn_greeting(&packet, &greeting);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::metrics::Metrics;
    use crate::wire::protocol::caps::{CLIENT_CONNECT_WITH_DB, CLIENT_PLUGIN_AUTH};
    use std::time::Duration;

    /// A MariaDB-like greeting (header included) offering `caps`.
    fn greeting_packet(version: &str, caps: u32) -> Vec<u8> {
        let mut p = vec![10];
        p.extend_from_slice(version.as_bytes());
        p.push(0);
        p.extend_from_slice(&7u32.to_le_bytes());
        p.extend_from_slice(b"abcdefgh\0");
        p.extend_from_slice(&(caps as u16).to_le_bytes());
        p.push(45);
        p.extend_from_slice(&2u16.to_le_bytes());
        p.extend_from_slice(&((caps >> 16) as u16).to_le_bytes());
        p.push(21);
        p.extend_from_slice(&[0; 10]);
        p.extend_from_slice(b"ijklmnopqrst\0");
        p.extend_from_slice(b"mysql_native_password\0");
        let mut packet = crate::wire::protocol::codec::header(p.len(), 0).to_vec();
        packet.extend_from_slice(&p);
        packet
    }

    fn set_of(n: u16) -> BackendSet {
        let configs = crate::backends::balancer::tests::configs(n);
        BackendSet::new(&configs, Duration::from_secs(1), false, &Metrics::new())
    }

    const CAPS: u32 = 0x0008_a20f | crate::wire::protocol::caps::CLIENT_SECURE_CONNECTION;

    #[test]
    fn the_template_is_built_once_and_rebuilt_when_a_greeting_changes() {
        let set = set_of(2);
        assert!(set.greeting_template().is_none(), "nothing learned yet");
        let a = greeting_packet("10.11.1-MariaDB", CAPS | CLIENT_PLUGIN_AUTH);
        set.backends[0].learn_raw_greeting(&a, Strip::UNSUPPORTED);
        let first = set.greeting_template().expect("one backend greeted");
        let again = set.greeting_template().expect("still there");
        assert!(
            Arc::ptr_eq(&first, &again),
            "the same template, not a rebuild"
        );
        assert_eq!(first.greeting.server_version, "10.11.1-MariaDB");
        // The second backend lacks a capability: the template offers only what both do.
        let lacking = CAPS & !CLIENT_CONNECT_WITH_DB;
        let b = greeting_packet("10.11.1-MariaDB", lacking | CLIENT_PLUGIN_AUTH);
        set.backends[1].learn_raw_greeting(&b, Strip::UNSUPPORTED);
        let rebuilt = set.greeting_template().expect("both greeted");
        assert!(
            !Arc::ptr_eq(&first, &rebuilt),
            "a changed source rebuilds it"
        );
        assert_eq!(rebuilt.greeting.capabilities & CLIENT_CONNECT_WITH_DB, 0);
        assert_ne!(first.greeting.capabilities & CLIENT_CONNECT_WITH_DB, 0);
        // The same greeting again stores nothing, so the template stays.
        set.backends[1].learn_raw_greeting(&b, Strip::UNSUPPORTED);
        let kept = set.greeting_template().expect("both greeted");
        assert!(Arc::ptr_eq(&rebuilt, &kept));
    }
}
