//! The config-file watch: a change to the `--config` file reloads as SIGHUP does.
//!
//! Polling rather than inotify, for two reasons: a Kubernetes ConfigMap volume changes by
//! swapping a symlink (`..data`) to a new directory, which an inotify watch on the file itself
//! never sees; and a stat plus a read of a small file twice a second costs nothing next to the
//! proxy's traffic, with no new dependency. A version of the file is its path resolved through
//! every symlink, that file's device, inode, size and mtime, and a hash of its bytes; any
//! difference is a change. A reload is due once the file has stayed the same for a quiet
//! period, so an editor's or a deploy tool's several writes make one reload, not several
//! half-written ones. While the file cannot be read (between an unlink and its replacement) no
//! reload is asked for.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// How often the file is looked at.
pub const POLL_EVERY: Duration = Duration::from_millis(500);
/// How long the file must stay unchanged after a change before it is reloaded.
pub const QUIET: Duration = Duration::from_millis(500);

/// One version of the file, as far as the watch can tell them apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    target: PathBuf,
    dev: u64,
    ino: u64,
    len: u64,
    mtime: Option<SystemTime>,
    content: u64,
}

impl Fingerprint {
    /// The file at `path` now; None while it cannot be resolved or read.
    pub fn of(path: &Path) -> Option<Self> {
        let target = std::fs::canonicalize(path).ok()?;
        let meta = std::fs::metadata(&target).ok()?;
        let bytes = std::fs::read(&target).ok()?;
        let mut h = DefaultHasher::new();
        bytes.hash(&mut h);
        Some(Self {
            target,
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime: meta.modified().ok(),
            content: h.finish(),
        })
    }
}

/// Decides from successive looks at the file when a reload is due (no I/O: fed by [`run`]).
#[derive(Debug)]
pub struct Debounce {
    seen: Option<Fingerprint>,
    /// When the last change was seen, while its reload is still to come.
    pending_since: Option<Instant>,
    quiet: Duration,
}

impl Debounce {
    /// Starts from the version the running configuration was read from.
    pub fn new(initial: Option<Fingerprint>, quiet: Duration) -> Self {
        Self {
            seen: initial,
            pending_since: None,
            quiet,
        }
    }

    /// One look at the file at `now`; true when a reload is due.
    pub fn observe(&mut self, now_seen: Option<Fingerprint>, now: Instant) -> bool {
        if now_seen != self.seen {
            self.seen = now_seen;
            self.pending_since = Some(now);
            return false;
        }
        match self.pending_since {
            Some(since) if self.seen.is_some() && now.duration_since(since) >= self.quiet => {
                self.pending_since = None;
                true
            }
            _ => false,
        }
    }
}

/// A watch on one file, from the version read at start.
#[derive(Debug, Clone)]
pub struct ConfigWatch {
    pub path: PathBuf,
    pub initial: Option<Fingerprint>,
}

impl ConfigWatch {
    /// Takes the current version of `path` as the one in force.
    pub fn new(path: PathBuf) -> Self {
        let initial = Fingerprint::of(&path);
        Self { path, initial }
    }
}

/// Looks at the file every `every` until `shutdown`, and wakes `reload` (the reload task that
/// SIGHUP wakes too, so reloads never overlap) each time a change has settled.
pub async fn run(
    watch: ConfigWatch,
    every: Duration,
    quiet: Duration,
    reload: Arc<Notify>,
    shutdown: CancellationToken,
) {
    let ConfigWatch { path, initial } = watch;
    info!(file = %path.display(), "watching the config file: a change reloads it as SIGHUP does");
    let mut debounce = Debounce::new(initial, quiet);
    let mut was_readable = true;
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let p = path.clone();
        // A stat and a small read, but of a file that may sit on a slow volume.
        let seen = match tokio::task::spawn_blocking(move || Fingerprint::of(&p)).await {
            Ok(seen) => seen,
            Err(e) => {
                warn!("config file watch: the look at the file failed: {e}");
                continue;
            }
        };
        let readable = seen.is_some();
        if was_readable && !readable {
            warn!(file = %path.display(), "config file watch: the file cannot be read; the running configuration stays");
        }
        was_readable = readable;
        if debounce.observe(seen, Instant::now()) {
            info!(file = %path.display(), "config file changed: reloading the configuration");
            reload.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(n: u64) -> Option<Fingerprint> {
        Some(Fingerprint {
            target: PathBuf::from("/c.yaml"),
            dev: 1,
            ino: n,
            len: 10,
            mtime: None,
            content: n,
        })
    }

    const Q: Duration = Duration::from_millis(500);

    #[test]
    fn an_unchanged_file_never_reloads() {
        let t = Instant::now();
        let mut d = Debounce::new(fp(1), Q);
        for i in 0..10 {
            assert!(!d.observe(fp(1), t + Q * i));
        }
    }

    #[test]
    fn a_change_reloads_once_after_the_quiet_period() {
        let t = Instant::now();
        let mut d = Debounce::new(fp(1), Q);
        assert!(!d.observe(fp(2), t), "not while it may still be changing");
        assert!(!d.observe(fp(2), t + Q / 2));
        assert!(d.observe(fp(2), t + Q), "settled: reload");
        assert!(!d.observe(fp(2), t + Q * 2), "once");
    }

    #[test]
    fn changes_in_quick_succession_make_one_reload() {
        let t = Instant::now();
        let mut d = Debounce::new(fp(1), Q);
        assert!(!d.observe(fp(2), t));
        assert!(!d.observe(fp(3), t + Q / 2));
        assert!(!d.observe(fp(4), t + Q));
        assert!(!d.observe(fp(4), t + Q + Q / 2));
        assert!(d.observe(fp(4), t + Q * 2));
        assert!(!d.observe(fp(4), t + Q * 3));
    }

    #[test]
    fn a_missing_file_is_not_reloaded_but_its_return_is() {
        let t = Instant::now();
        let mut d = Debounce::new(fp(1), Q);
        assert!(!d.observe(None, t));
        assert!(!d.observe(None, t + Q * 4), "nothing to read");
        assert!(!d.observe(fp(2), t + Q * 5));
        assert!(d.observe(fp(2), t + Q * 6));
    }

    #[test]
    fn a_file_put_back_as_it_was_is_still_reloaded() {
        // Edited and restored: the running configuration may have been reloaded by SIGHUP in
        // between, so a reload is the safe answer.
        let t = Instant::now();
        let mut d = Debounce::new(fp(1), Q);
        assert!(!d.observe(fp(2), t));
        assert!(!d.observe(fp(1), t + Q / 4));
        assert!(d.observe(fp(1), t + Q * 2));
    }

    #[test]
    fn fingerprints_follow_a_configmap_style_symlink_swap() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let same = "backends: [\"127.0.0.1:3306\"]\n";
        for v in ["..v1", "..v2"] {
            std::fs::create_dir(root.join(v)).unwrap();
            std::fs::write(root.join(v).join("config.yaml"), same).unwrap();
        }
        std::os::unix::fs::symlink("..v1", root.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/config.yaml", root.join("config.yaml")).unwrap();
        let path = root.join("config.yaml");
        let before = Fingerprint::of(&path).expect("readable through the links");
        std::os::unix::fs::symlink("..v2", root.join("..data_tmp")).unwrap();
        std::fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
        let after = Fingerprint::of(&path).expect("readable after the swap");
        assert_ne!(before, after, "same bytes, but another file: a change");
        std::fs::remove_dir_all(root.join("..v2")).unwrap();
        assert_eq!(Fingerprint::of(&path), None, "dangling link: unreadable");
    }

    #[test]
    fn a_rewrite_in_place_is_a_change() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.yaml");
        std::fs::write(&path, "weight: 1\n").unwrap();
        let before = Fingerprint::of(&path).unwrap();
        // Same size, and possibly the same mtime tick: the content hash tells them apart.
        std::fs::write(&path, "weight: 2\n").unwrap();
        assert_ne!(Fingerprint::of(&path).unwrap(), before);
    }
}
