//! Backend roles in a replication cluster (`role: primary | replica | auto`), and how the
//! older `type: rw | ro` (MySQL Proxy's `--proxy-backend-addresses` /
//! `--proxy-read-only-backend-addresses`) says the same.
//!
//! A pool has roles when any of its backends declares one: a `role:`, or `type: ro`. In such a
//! pool every backend has one, and a backend that declares none is what its `type` says (`rw`,
//! the default, is the primary). A pool where nobody declares anything has no roles: its
//! backends are equal servers, as before roles existed. At most one backend of a pool is
//! configured `primary` (`auto` ones are elected from what the servers say at run time), and
//! `auto` needs the health check's login, which reads `@@read_only`.

use super::{BackendConfig, BackendKind, Config, ConfigError, Role};

/// Gives every backend of a pool with roles its role (see the module's docs). A backend that
/// declares none is a replica for `type: ro`; for `rw` it is the primary when it is the only
/// candidate (no backend declares `primary` or `auto`, and no other `rw` is undeclared), else
/// `auto`: its server says (MySQL Proxy's several `--proxy-backend-addresses`).
pub(super) fn resolve(backends: &mut [BackendConfig]) {
    let pools: Vec<String> = backends
        .iter()
        .filter(|b| b.role.is_some())
        .map(|b| b.pool.clone())
        .collect();
    for pool in pools {
        let in_pool = |b: &&BackendConfig| b.pool == pool;
        let declared_writer = backends
            .iter()
            .filter(in_pool)
            .any(|b| matches!(b.role, Some(Role::Primary | Role::Auto)));
        let undeclared_rw = backends
            .iter()
            .filter(in_pool)
            .filter(|b| b.role.is_none() && b.kind == BackendKind::Rw)
            .count();
        let rw = if !declared_writer && undeclared_rw == 1 {
            Role::Primary
        } else {
            Role::Auto
        };
        for b in backends
            .iter_mut()
            .filter(|b| b.pool == pool && b.role.is_none())
        {
            b.role = Some(match b.kind {
                BackendKind::Rw => rw,
                BackendKind::Ro => Role::Replica,
            });
        }
    }
}

/// What a backend entry declares: `role:` first, else `type: ro` (a replica). `type: rw` alone
/// declares nothing (it is every backend's default).
pub(super) fn declared(role: Option<Role>, kind: Option<BackendKind>) -> Option<Role> {
    role.or((kind == Some(BackendKind::Ro)).then_some(Role::Replica))
}

impl Config {
    /// At most one configured primary per pool; `auto` only with a health check login; a
    /// split only in a pool with roles.
    pub(super) fn validate_roles(&self) -> Result<(), ConfigError> {
        for p in self.pools.iter().filter(|p| p.pooling.read_write_split) {
            if !self
                .backends
                .iter()
                .any(|b| b.pool == p.name && b.role.is_some())
            {
                let key = if p.name == super::DEFAULT_POOL {
                    "pooling.read_write_split".to_owned()
                } else {
                    format!("pools.{}.pooling.read_write_split", p.name)
                };
                return Err(ConfigError::invalid(
                    key,
                    format!(
                        "pool `{}` has no roles: give its backends `role: primary`, `replica` \
                         or `auto` (or `type: ro` to the replicas)",
                        p.name
                    ),
                ));
            }
        }
        for (i, b) in self.backends.iter().enumerate() {
            if b.role == Some(Role::Auto) && self.health_check.user.is_none() {
                return Err(ConfigError::invalid(
                    format!("{}.role", self.backend_key(i)),
                    "`auto` reads @@read_only in the health check's login: set health_check.user",
                ));
            }
            if b.role != Some(Role::Primary) {
                continue;
            }
            let first = self.backends[..i]
                .iter()
                .position(|o| o.pool == b.pool && o.role == Some(Role::Primary));
            if let Some(first) = first {
                return Err(ConfigError::invalid(
                    format!("{}.role", self.backend_key(i)),
                    format!(
                        "pool `{}` has two primaries, `{}` and `{}` (a backend without `role:` \
                         in a pool with roles is what its `type` says, `rw` by default): make \
                         one `role: replica`, or both `role: auto` to follow the servers",
                        b.pool, self.backends[first].name, b.name
                    ),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roles(yaml: &str) -> Result<Vec<(String, Option<Role>)>, String> {
        let c = Config::from_yaml_str(yaml).map_err(|e| e.to_string())?;
        Ok(c.backends.into_iter().map(|b| (b.name, b.role)).collect())
    }

    fn named(list: &[(&str, Option<Role>)]) -> Vec<(String, Option<Role>)> {
        list.iter().map(|(n, r)| ((*n).to_owned(), *r)).collect()
    }

    #[test]
    fn a_pool_where_nobody_declares_a_role_has_none() {
        let got = roles("backends: [h:1, h:2, {address: h:3, type: rw}]").unwrap();
        assert_eq!(got, named(&[("h:1", None), ("h:2", None), ("h:3", None)]));
    }

    #[test]
    fn type_ro_makes_replicas_and_the_one_rw_the_primary() {
        let got = roles("backends: [h:1, {address: h:2, type: ro}, {address: h:3, type: ro}]");
        assert_eq!(
            got.unwrap(),
            named(&[
                ("h:1", Some(Role::Primary)),
                ("h:2", Some(Role::Replica)),
                ("h:3", Some(Role::Replica)),
            ])
        );
    }

    #[test]
    fn several_undeclared_rw_follow_their_servers() {
        let yaml = "health_check: {user: mon, password: x}\n\
                    backends: [h:1, h:2, {address: h:3, type: ro}]";
        assert_eq!(
            roles(yaml).unwrap(),
            named(&[
                ("h:1", Some(Role::Auto)),
                ("h:2", Some(Role::Auto)),
                ("h:3", Some(Role::Replica)),
            ])
        );
        let explicit = "backends: [{address: h:1, role: primary}, h:2]";
        assert_eq!(
            roles(explicit).unwrap(),
            named(&[("h:1", Some(Role::Primary)), ("h:2", Some(Role::Auto))]),
            "an undeclared rw beside a declared primary waits for its server to say"
        );
    }

    #[test]
    fn two_declared_primaries_and_auto_without_a_login_are_refused() {
        let two = roles("backends: [{address: h:1, role: primary}, {address: h:2, role: primary}]");
        let e = two.unwrap_err();
        assert!(
            e.contains("backends[1].role") && e.contains("h:1") && e.contains("h:2"),
            "{e}"
        );
        let auto = roles("backends: [{address: h:1, role: auto}]").unwrap_err();
        assert!(auto.contains("health_check.user"), "{auto}");
    }

    #[test]
    fn a_split_needs_roles_across_backends_and_transactions() {
        let no_roles = "backends: [h:1, h:2]\npooling: {mode: transaction, across_backends: true, \
                        read_write_split: true}";
        let e = roles(no_roles).unwrap_err();
        assert!(
            e.contains("read_write_split") && e.contains("no roles"),
            "{e}"
        );
        let no_across = "backends: [h:1, {address: h:2, role: replica}]\n\
                         pooling: {mode: transaction, read_write_split: true}";
        let e = roles(no_across).unwrap_err();
        assert!(e.contains("across_backends"), "{e}");
        let ok = "backends: [h:1, {address: h:2, role: replica}]\npooling: {mode: transaction, \
                  across_backends: true, read_write_split: true, causal_reads: global, \
                  reads_without_replica: error}";
        let c = Config::from_yaml_str(ok).unwrap();
        let p = &c.pools[0].pooling;
        assert!(p.read_write_split);
        assert_eq!(p.causal_reads, super::super::CausalReads::Global);
        assert_eq!(
            p.reads_without_replica,
            super::super::ReadsWithoutReplica::Error
        );
        let bad = ok.replace(
            "reads_without_replica: error",
            "reads_without_replica: nowhere",
        );
        assert!(Config::from_yaml_str(&bad).is_err());
        assert!(c.defers_connect(), "logins are placed by their user");
        // A read-only route needs a split pool.
        let route = "\nroutes: [{user: reporting, pool: default, read_only: true}]";
        let c = Config::from_yaml_str(&format!("{ok}{route}")).unwrap();
        assert!(c.routes[0].read_only);
        let e = roles(&format!("backends: [h:1, h:2]{route}")).unwrap_err();
        assert!(
            e.contains("routes[0].read_only") && e.contains("read_write_split"),
            "{e}"
        );
    }
}
