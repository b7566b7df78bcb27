//! `mysql-lb replay DIR ...`: flags to [`Options`], a runtime, the report printed and written.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::{html, report, run, Options, Speed};
use crate::config::{BackendAddr, ReplayArgs};

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("--speed must be between 0.1 and 100, not {0}")]
    Speed(f64),
    #[error("--target {0:?}: {1}")]
    Target(String, String),
    #[error("--password-file {path}: {source}")]
    PasswordFile {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Replay(#[from] super::ReplayError),
    #[error("cannot start the runtime: {0}")]
    Runtime(std::io::Error),
}

/// Runs a replay from its flags; Ok(false) when it ended before replaying everything.
pub fn main(args: &ReplayArgs) -> Result<bool, CliError> {
    let opts = options(args)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(CliError::Runtime)?;
    let report = runtime.block_on(run(opts))?;
    print!("{}", report::table(&report, args.top));
    if let Some(path) = &args.json {
        let json = serde_json::to_vec_pretty(&report).unwrap_or_default();
        write(path, &json)?;
    }
    if let Some(path) = &args.html {
        write(path, html::render(&report).as_bytes())?;
    }
    Ok(report.ended_early.is_none())
}

fn options(args: &ReplayArgs) -> Result<Options, CliError> {
    let speed = if args.as_fast_as_possible {
        Speed::AsFastAsPossible
    } else if (0.1..=100.0).contains(&args.speed) {
        Speed::Times(args.speed)
    } else {
        return Err(CliError::Speed(args.speed));
    };
    let target: BackendAddr = args
        .target
        .parse()
        .map_err(|e: crate::config::AddressError| {
            CliError::Target(args.target.clone(), e.to_string())
        })?;
    let password =
        std::fs::read_to_string(&args.password_file).map_err(|source| CliError::PasswordFile {
            path: args.password_file.display().to_string(),
            source,
        })?;
    Ok(Options {
        dir: args.dir.clone(),
        target,
        user: args.user.clone(),
        password: password.trim_end_matches(['\r', '\n']).to_owned(),
        speed,
        read_only: args.read_only,
        sessions: args.sessions,
        progress: true,
    })
}

/// Writes a report file (mode 0600: it holds statement texts).
fn write(path: &Path, bytes: &[u8]) -> Result<(), CliError> {
    let err = |source| CliError::Write {
        path: path.display().to_string(),
        source,
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(err)?;
    f.write_all(bytes).map_err(err)
}
