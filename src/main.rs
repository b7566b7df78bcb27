//! The `mysql-lb` binary: flags → logging → configuration → descriptor limit → [`mysql_lb::Proxy`]
//! (or `mysql-lb top`, [`mysql_lb::tools::top`]; `mysql-lb replay`, [`mysql_lb::tools::replay`]).

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;

use mysql_lb::config::limits::raise_fd_limit;
use mysql_lb::config::{Cli, Command, Config};
use mysql_lb::proxy::lifecycle::watch::ConfigWatch;
use mysql_lb::Proxy;

fn main() -> ExitCode {
    pin_mmap_threshold();
    let cli = Cli::parse();
    if let Some(Command::Replay(args)) = &cli.command {
        return match mysql_lb::tools::replay::cli::main(args) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::FAILURE,
            Err(e) => {
                eprintln!("mysql-lb replay: {e}");
                ExitCode::from(2)
            }
        };
    }
    if let Some(Command::Top(args)) = &cli.command {
        return match mysql_lb::tools::top::run(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("mysql-lb top: {e}");
                ExitCode::FAILURE
            }
        };
    }
    // The file's version is taken before it is read: a change made while the proxy starts
    // (after the read, before the watch's first look) still reloads it.
    let watch = cli.config.clone().map(ConfigWatch::new);
    let mut config = match Config::load(&cli) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mysql-lb: {e}");
            return ExitCode::from(2);
        }
    };
    if cli.check_config {
        if let Err(e) = mysql_lb::backends::balancer::script::check(&config) {
            eprintln!("mysql-lb: {e}");
            return ExitCode::from(2);
        }
        // The certificate files' contents, not only their presence.
        if let Err(e) = mysql_lb::net::tls::TlsMaterial::load(&config) {
            eprintln!("mysql-lb: {e}");
            return ExitCode::from(2);
        }
        println!(
            "configuration OK: {} listener(s), {} backend(s) in {} pool(s), {} route(s)",
            config.listen.len(),
            config.backends.len(),
            config.pools.len(),
            config.routes.len()
        );
        println!("{}", config.instances.summary());
        println!("{}", config.proxy_protocol_summary());
        return ExitCode::SUCCESS;
    }
    mysql_lb::telemetry::logging::init(&config, std::io::stderr().is_terminal());
    match run(&mut config, &cli, watch) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(config: &mut Config, cli: &Cli, watch: Option<ConfigWatch>) -> anyhow::Result<()> {
    let plan = raise_fd_limit(
        config.max_connections,
        config.max_open_files,
        config.max_connections_chosen,
        config.descriptor_budget(),
    )
    .context("raising the open-files limit")?;
    config.max_connections = plan.max_connections;
    // This thread runs the accept loops, the admin endpoint, health checks and signals; the
    // sessions run on the worker threads `Proxy::bind` starts (see `workers.rs`).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(async {
        let reload_cli = cli.clone();
        let mut proxy = Proxy::bind(config)
            .await?
            .with_reload(std::sync::Arc::new(move || Config::load(&reload_cli)));
        if let (Some(watch), true) = (watch, config.lifecycle.watch_config) {
            proxy = proxy.with_config_watch(watch);
        }
        // SIGTERM/SIGINT: not ready, shutdown_delay, drain; see `mysql_lb::proxy::lifecycle`.
        let stop = mysql_lb::control::tasks::on_signals(proxy.state());
        proxy.run_with_abort(stop.drain, stop.abort).await;
        Ok(())
    })
}

/// A relay buffer that grew for a bulk transfer (256 KiB) is freed once its session goes quiet.
/// glibc maps allocations that large apart from its heap and unmaps them on free, but after the
/// first such free it raises its threshold and serves later ones from the heap, where freed
/// buffers fragment and stay resident. Pinning the threshold keeps them mapped, so the memory a
/// quiet session gives back really leaves the process.
fn pin_mmap_threshold() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}
