//! RLIMIT_NOFILE sizing. Each proxied connection holds two descriptors (client and backend), plus a
//! reserve for listeners, health checks, logs and the admin endpoint; when every pool is in
//! transaction mode a client holds one, and the pools' shared server connections are counted
//! once ([`Budget`]). The soft limit is raised toward
//! what that needs at start-up; when the hard limit (or an explicit `max_open_files`) cannot cover it,
//! max_connections is lowered to fit, so the proxy refuses extra clients with ERR 1040 instead of
//! failing `accept()` with EMFILE under load. The arithmetic is a pure function so it can be tested
//! without touching the process.

use rlimit::Resource;
use tracing::{debug, info, warn};

/// Descriptors kept free for listeners, backend health checks, logs, admin HTTP, etc.
pub const FD_RESERVE: u64 = 64;

/// What client connections cost in descriptors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Per client connection: 2 (its own and its backend's), or 1 when every pool shares server
    /// connections (transaction mode).
    pub per_connection: u64,
    /// Beside them: the shared server connections (the pools' `max_server_connections` × their
    /// backends).
    pub shared: u64,
}

impl Budget {
    /// One server connection per client.
    pub const SESSION: Budget = Budget {
        per_connection: 2,
        shared: 0,
    };

    /// Descriptors needed to run `max_connections` at full load.
    fn needed(self, max_connections: usize) -> u64 {
        u64::try_from(max_connections)
            .unwrap_or(u64::MAX)
            .saturating_mul(self.per_connection)
            .saturating_add(self.shared)
            .saturating_add(FD_RESERVE)
    }

    /// Client connections that fit in `descriptors`.
    fn fit(self, descriptors: u64) -> u64 {
        descriptors
            .saturating_sub(FD_RESERVE)
            .saturating_sub(self.shared)
            / self.per_connection.max(1)
    }
}

/// What `raise_fd_limit` found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdPlan {
    pub soft_before: u64,
    pub hard: u64,
    pub soft_after: u64,
    /// The descriptor budget asked for: `max_open_files`, or what `max_connections` need (see
    /// [`Budget`]) + reserve.
    pub wanted: u64,
    /// Effective max_connections, to use instead of the configured one.
    pub max_connections: usize,
    pub lowered: bool,
}

/// Messages include the OS error; it is not repeated through `source()`.
#[derive(Debug, thiserror::Error)]
pub enum LimitsError {
    #[error("cannot read RLIMIT_NOFILE: {error}")]
    Read { error: std::io::Error },
    #[error("cannot raise the RLIMIT_NOFILE soft limit from {from} to {to}: {error}")]
    Raise {
        from: u64,
        to: u64,
        error: std::io::Error,
    },
}

fn wanted_fds(max_connections: usize, max_open_files: Option<u64>, budget: Budget) -> u64 {
    max_open_files.unwrap_or_else(|| budget.needed(max_connections))
}

/// Connections that fit in `soft` descriptors, also honouring an explicit, smaller budget (`wanted`).
fn effective_connections(configured: usize, wanted: u64, soft: u64, budget: Budget) -> usize {
    let fit = budget.fit(soft.min(wanted));
    configured
        .min(usize::try_from(fit).unwrap_or(usize::MAX))
        .max(1)
}

/// Returns (target soft limit, effective max_connections) for the current `soft`/`hard` limits. The
/// target is `wanted` capped at `hard`, and never below `soft`. With an explicit `max_open_files`
/// smaller than 2 x max_connections + reserve, max_connections is lowered to fit it even when the
/// soft limit is higher, since that is the budget the operator asked for.
pub fn plan(
    max_connections: usize,
    max_open_files: Option<u64>,
    (soft, hard): (u64, u64),
    budget: Budget,
) -> (u64, usize) {
    let wanted = wanted_fds(max_connections, max_open_files, budget);
    let target = soft.max(wanted.min(hard));
    (
        target,
        effective_connections(max_connections, wanted, target, budget),
    )
}

fn read_nofile() -> Result<(u64, u64), LimitsError> {
    Resource::NOFILE
        .get()
        .map_err(|error| LimitsError::Read { error })
}

/// Raises the soft RLIMIT_NOFILE toward `max_open_files` (default 2 x max_connections + reserve), never
/// lowering it, and works out how many connections the result allows. Lowering a `chosen`
/// max_connections (set in the file or by flag) is a warning; fitting the default is not.
pub fn raise_fd_limit(
    max_connections: usize,
    max_open_files: Option<u64>,
    chosen: bool,
    budget: Budget,
) -> Result<FdPlan, LimitsError> {
    let (soft_before, hard) = read_nofile()?;
    let wanted = wanted_fds(max_connections, max_open_files, budget);
    let hard = if wanted > hard {
        try_raise_hard(soft_before, hard, wanted)?
    } else {
        hard
    };
    let (target, _) = plan(max_connections, max_open_files, (soft_before, hard), budget);
    info!(
        soft = soft_before,
        hard, wanted, "RLIMIT_NOFILE at start-up"
    );
    let soft_after = if target > soft_before {
        rlimit::increase_nofile_limit(target).map_err(|error| LimitsError::Raise {
            from: soft_before,
            to: target,
            error,
        })?;
        // Re-read: the platform may cap below what was asked.
        read_nofile()?.0
    } else {
        soft_before
    };
    let effective = effective_connections(max_connections, wanted, soft_after, budget);
    let fd_plan = FdPlan {
        soft_before,
        hard,
        soft_after,
        wanted,
        max_connections: effective,
        lowered: effective < max_connections,
    };
    report(&fd_plan, max_connections, chosen, budget);
    Ok(fd_plan)
}

/// Raising the hard limit needs CAP_SYS_RESOURCE (root, or granted to the service); without it
/// this fails and the hard limit stays as it was. Returns the hard limit in force.
fn try_raise_hard(soft: u64, hard: u64, wanted: u64) -> Result<u64, LimitsError> {
    match Resource::NOFILE.set(soft.max(hard), wanted) {
        Ok(()) => {
            let (_, raised) = read_nofile()?;
            info!(from = hard, to = raised, "RLIMIT_NOFILE hard limit raised");
            Ok(raised)
        }
        Err(e) => {
            debug!(
                hard,
                wanted, "cannot raise the RLIMIT_NOFILE hard limit: {e}"
            );
            Ok(hard)
        }
    }
}

/// Logs the limits in force, and a lowered max_connections: at info for the default, as a warning
/// with the fix for one the operator chose.
fn report(p: &FdPlan, configured: usize, chosen: bool, b: Budget) {
    let effective = p.max_connections;
    info!(
        soft = p.soft_after,
        hard = p.hard,
        max_connections = effective,
        "RLIMIT_NOFILE soft limit {}",
        if p.soft_after > p.soft_before {
            "raised"
        } else {
            "unchanged"
        }
    );
    if !p.lowered {
        return;
    }
    let budget = p.soft_after.min(p.wanted);
    if !chosen {
        info!(
            max_connections = effective,
            "max_connections fitted to the file descriptor limit: {effective} (default \
             {configured}; {budget} descriptors, {} per connection, {} for shared server \
             connections, {FD_RESERVE} reserved)",
            b.per_connection,
            b.shared,
        );
        return;
    }
    let needed = b.needed(configured);
    let fix = if p.wanted < needed {
        format!("raise max_open_files (--max-open-files) to at least {needed}")
    } else {
        format!(
            "raise the hard limit to at least {needed} (ulimit -Hn {needed}, or LimitNOFILE={needed} in the systemd unit)"
        )
    };
    warn!(
        configured,
        effective,
        soft = p.soft_after,
        hard = p.hard,
        "max_connections lowered from {configured} to {effective}: {budget} file descriptors allow \
         {effective} proxied connections ({} each, {} for shared server connections, \
         {FD_RESERVE} reserved); {fix}",
        b.per_connection,
        b.shared,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_of_a_transaction_mode_pool_costs_one_descriptor_and_the_shared_ones_count_once() {
        let pooled = Budget {
            per_connection: 1,
            shared: 150,
        };
        // 10,000 clients + 150 shared server connections + 64 reserved.
        assert_eq!(plan(10_000, None, (1024, 20_000), pooled), (10_214, 10_000));
        // The same limit in session mode fits fewer than half.
        assert_eq!(
            plan(10_000, None, (1024, 20_000), Budget::SESSION),
            (20_000, 9_968)
        );
        assert_eq!(plan(10_000, None, (1024, 1_000), pooled), (1024, 810));
    }

    #[test]
    fn fits_when_hard_limit_allows_the_wanted_budget() {
        // 2 x 1000 + 64 = 2064 wanted; soft 1024 rises to it.
        assert_eq!(
            plan(1000, None, (1024, 1 << 20), Budget::SESSION),
            (2064, 1000)
        );
    }

    #[test]
    fn hard_limit_too_low_lowers_max_connections() {
        // Soft can only reach 4096: (4096 - 64) / 2 = 2016 connections.
        assert_eq!(
            plan(10_000, None, (1024, 4096), Budget::SESSION),
            (4096, 2016)
        );
    }

    #[test]
    fn explicit_max_open_files_smaller_than_needed_lowers_max_connections() {
        // Even though the soft limit (20000) is higher, the operator's budget of 1064 holds 500.
        assert_eq!(
            plan(10_000, Some(1064), (20_000, 20_000), Budget::SESSION),
            (20_000, 500)
        );
        // And with a low soft limit, the soft limit is raised to that budget.
        assert_eq!(
            plan(10_000, Some(1064), (256, 20_000), Budget::SESSION),
            (1064, 500)
        );
    }

    #[test]
    fn explicit_max_open_files_larger_than_needed_is_granted() {
        assert_eq!(
            plan(100, Some(50_000), (1024, 1 << 20), Budget::SESSION),
            (50_000, 100)
        );
    }

    #[test]
    fn never_lowers_the_soft_limit_below_current() {
        assert_eq!(
            plan(10, None, (65_536, 65_536), Budget::SESSION),
            (65_536, 10)
        );
        assert_eq!(
            plan(10, Some(100), (65_536, 65_536), Budget::SESSION).0,
            65_536
        );
        // A soft limit already above a lower hard limit cannot happen, but stays put anyway.
        assert_eq!(plan(10, None, (4096, 1024), Budget::SESSION).0, 4096);
    }

    #[test]
    fn tiny_limits_still_allow_one_connection() {
        assert_eq!(plan(100, None, (10, 10), Budget::SESSION), (10, 1));
    }

    #[test]
    fn huge_values_do_not_overflow() {
        let (target, effective) = plan(usize::MAX, None, (1024, u64::MAX), Budget::SESSION);
        assert_eq!(target, u64::MAX);
        assert!(effective > 0);
        assert_eq!(
            plan(
                usize::MAX,
                Some(u64::MAX),
                (u64::MAX, u64::MAX),
                Budget::SESSION
            )
            .0,
            u64::MAX
        );
        // RLIM_INFINITY for both limits: the wanted budget decides.
        assert_eq!(
            plan(10, None, (u64::MAX, u64::MAX), Budget::SESSION),
            (u64::MAX, 10)
        );
    }

    #[test]
    fn raise_fd_limit_never_lowers_the_soft_limit() {
        let p = raise_fd_limit(10, None, true, Budget::SESSION).unwrap();
        assert!(p.soft_after >= p.soft_before, "{p:?}");
        assert!(p.soft_after <= p.hard, "{p:?}");
        assert_eq!(p.wanted, 2 * 10 + FD_RESERVE);
        assert_eq!(p.lowered, p.max_connections < 10);
        let (soft, _) = Resource::NOFILE.get().unwrap();
        assert!(soft >= p.soft_after);
    }
}
