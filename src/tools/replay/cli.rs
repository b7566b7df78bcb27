//! `mysql-lb replay DIR ...`: flags to [`Options`], a runtime, the report printed and written.

use std::collections::HashMap;
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
    #[error("--account-map {path}: {error}")]
    AccountMap { path: String, error: String },
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
    let account = match (&args.user, &args.password_file) {
        (Some(user), Some(file)) => {
            let password = read_private(file)?;
            Some((user.clone(), first_line(&password).to_owned()))
        }
        _ => None,
    };
    let accounts = match &args.account_map {
        Some(file) => {
            parse_account_map(&read_private(file)?).map_err(|e| CliError::AccountMap {
                path: file.display().to_string(),
                error: e,
            })?
        }
        None => HashMap::new(),
    };
    Ok(Options {
        dir: args.dir.clone(),
        target,
        account,
        accounts,
        speed,
        read_only: args.read_only,
        sessions: args.sessions,
        progress: true,
    })
}

fn read_private(path: &Path) -> Result<String, CliError> {
    std::fs::read_to_string(path).map_err(|source| CliError::PasswordFile {
        path: path.display().to_string(),
        source,
    })
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

/// `captured_user user password` per line (the password is the rest of the line, spaces
/// included); blank lines and lines starting with `#` are skipped.
pub fn parse_account_map(text: &str) -> Result<HashMap<String, (String, String)>, String> {
    let mut map = HashMap::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let mut parts = line.trim_start().splitn(3, ' ');
        match (parts.next(), parts.next(), parts.next()) {
            (Some(captured), Some(user), Some(password)) if !user.is_empty() => {
                if map
                    .insert(captured.to_owned(), (user.to_owned(), password.to_owned()))
                    .is_some()
                {
                    return Err(format!("line {}: {captured} named twice", n + 1));
                }
            }
            _ => {
                return Err(format!(
                    "line {}: expected `captured_user user password`",
                    n + 1
                ))
            }
        }
    }
    Ok(map)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_account_map_maps_captured_users_to_accounts() {
        let map = parse_account_map("# staging\napp replay s3cret with spaces\n\nreport ro pw\n")
            .unwrap();
        assert_eq!(
            map["app"],
            ("replay".to_owned(), "s3cret with spaces".to_owned())
        );
        assert_eq!(map["report"], ("ro".to_owned(), "pw".to_owned()));
        assert!(parse_account_map("app replay\n").is_err());
        assert!(parse_account_map("a b c\na d e\n").is_err());
    }
}
