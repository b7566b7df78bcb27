//! Secrets the configuration holds: the admin token and the health-check password. One type whose
//! `Debug` prints `<redacted>`, so a `{:?}` of any config (a log line, `--check-config`, a test
//! failure) never shows one, and one reader for the files they come from (`admin_token_file`,
//! `health_check.password_file`), run at start and at each reload with the rest of validation.

use std::fmt;
use std::path::Path;

/// A value that must never be printed. Compared by content, so a reload sees a changed one.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value itself, for the one place that sends it (a login, a bearer header).
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// The content of `path` less one trailing line ending (`\n` or `\r\n`, as editors and `echo`
/// leave it); `what` names the content in the errors (a missing, unreadable or empty file).
pub(super) fn read_file(path: &Path, what: &str) -> Result<Secret, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let line = text
        .strip_suffix('\n')
        .map_or(text.as_str(), |t| t.strip_suffix('\r').unwrap_or(t));
    if line.is_empty() {
        return Err(format!("{} holds no {what}", path.display()));
    }
    Ok(Secret(line.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_value() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s:?}"), "<redacted>");
        assert_eq!(format!("{:?}", Some(&s)), "Some(<redacted>)");
        assert_eq!(s.expose(), "hunter2");
    }

    #[test]
    fn reads_the_file_less_one_line_ending() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        for (content, read) in [
            ("pw\n", "pw"),
            ("pw\r\n", "pw"),
            ("pw", "pw"),
            (" pw \n\n", " pw \n"),
        ] {
            std::fs::write(&path, content).unwrap();
            assert_eq!(read_file(&path, "x").unwrap().expose(), read, "{content:?}");
        }
        std::fs::write(&path, "\n").unwrap();
        let e = read_file(&path, "password").unwrap_err();
        assert!(e.ends_with("holds no password"), "{e}");
        let e = read_file(&dir.path().join("missing"), "password").unwrap_err();
        assert!(
            e.starts_with("cannot read ") && e.contains("missing"),
            "{e}"
        );
    }

    fn health_check_yaml(keys: &str) -> String {
        format!("backends: ['127.0.0.1:3306']\nhealth_check: {{user: mon, {keys}}}\n")
    }

    fn invalid(yaml: &str) -> (String, String) {
        match crate::config::Config::from_yaml_str(yaml) {
            Err(crate::config::ConfigError::Invalid { key, message, .. }) => (key, message),
            other => panic!("expected an invalid key, got {other:?}"),
        }
    }

    #[test]
    fn health_check_password_file_is_read_and_never_shown() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("monitor-password");
        std::fs::write(&path, "s3cr3t-from-file\n").unwrap();
        let yaml = health_check_yaml(&format!("password_file: '{}'", path.display()));
        let c = crate::config::Config::from_yaml_str(&yaml).unwrap();
        let password = c.health_check.password.as_ref().map(Secret::expose);
        assert_eq!(password, Some("s3cr3t-from-file"));
        let shown = format!("{c:?} {c:#?}");
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert!(shown.contains("password: Some(<redacted>)"), "{shown}");
        // An inline password is just as hidden.
        let c = crate::config::Config::from_yaml_str(&health_check_yaml("password: inline-pw"))
            .unwrap();
        assert!(!format!("{c:?}").contains("inline-pw"));
    }

    #[test]
    fn health_check_password_file_errors_name_the_key_and_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("monitor-password");
        std::fs::write(&path, "pw\n").unwrap();
        let file = format!("password_file: '{}'", path.display());
        let (key, message) = invalid(&health_check_yaml(&format!("password: x, {file}")));
        assert_eq!(key, "health_check.password_file");
        assert!(message.contains("not both"), "{message}");
        let missing = dir.path().join("nope");
        let (key, message) = invalid(&health_check_yaml(&format!(
            "password_file: '{}'",
            missing.display()
        )));
        assert_eq!(key, "health_check.password_file");
        assert!(
            message.contains(&missing.display().to_string()),
            "{message}"
        );
        let (key, message) = invalid(&format!(
            "backends: ['127.0.0.1:3306']\nhealth_check: {{{file}}}\n"
        ));
        assert_eq!(key, "health_check.password_file");
        assert!(message.contains("health_check.user"), "{message}");
    }
}
