//! The OS identity a unix-socket backend sees when mysql-lb connects to it.
//!
//! A server may authenticate a unix-socket connection by the OS user of the process at the other
//! end (MariaDB's `unix_socket`, MySQL's `auth_socket`): the kernel records the connecting
//! thread's effective uid at connect(2) and the server reads it back (SO_PEERCRED). Through a
//! proxy that process is mysql-lb, so a client naming the account of mysql-lb's own OS user would
//! be admitted with any password — on Debian and Ubuntu `root@localhost` and `mysql@localhost`
//! are `... OR unix_socket`, and daemons often run as root. Hence:
//!
//! - Running as root, mysql-lb connects unix-socket backends from one thread of its own whose
//!   uid, gid and groups are those of `backend_socket_user` (default `nobody`). The switch uses
//!   the raw `setres[ug]id`/`setgroups` system calls, which change only the calling thread
//!   (glibc's wrappers would change every thread); the thread does nothing but connect.
//! - Whatever the identity, [`SocketIdentity::admits`] refuses a login that names it (checked
//!   before a client's response reaches a unix-socket backend), and `crate::control::identity_check` asks
//!   each unix-socket backend at start and on reload whether it admits that name with no
//!   password, refusing a configuration where it does.

use std::ffi::{CStr, CString};
use std::io;
use std::os::unix::net::UnixStream as StdUnixStream;
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use socket2::{Domain, SockAddr, Socket, Type};
use thiserror::Error;
use tokio::net::UnixStream;
use tokio::sync::oneshot;

use crate::config::{BackendAddr, Config};

/// The account name the server would see for an unprivileged mysql-lb: the usual user with no
/// database account.
pub const DEFAULT_SOCKET_USER: &str = "nobody";

/// Why the identity for unix-socket backends could not be set up (a start or reload error).
#[derive(Debug, Error)]
pub enum IdentityError {
    #[error("no OS user named `{0}` on this host")]
    NoSuchUser(String),
    #[error("`{0}` is root: unix-socket backends must not see root as their peer")]
    Root(String),
    #[error(
        "mysql-lb runs as {running} and cannot connect as `{wanted}`: only a mysql-lb started \
         as root can switch; remove the key to connect as {running}"
    )]
    NotRoot { running: String, wanted: String },
    #[error("cannot look up OS users: {0}")]
    Lookup(io::Error),
    #[error("cannot switch the connecting thread to `{user}`: {source}")]
    Switch { user: String, source: io::Error },
    #[error("no identity was set up for unix-socket backends")]
    NotSetUp,
    #[error("unix-socket backends cannot be used: at start, {0}")]
    Unavailable(String),
    #[error(
        "unix-socket backend {backend} admits mysql-lb's OS user {identity} as account \
         `{user}` without a password (unix_socket/auth_socket), so a client could log in as it \
         through mysql-lb: run mysql-lb as root (it then connects as `backend_socket_user`, \
         default `nobody`) or as an OS user with no database account, or reach this server over TCP"
    )]
    Admitted {
        backend: String,
        identity: String,
        user: String,
    },
}

/// One connect request for the switched thread: the socket path and where to send the result.
type Request = (PathBuf, oneshot::Sender<io::Result<StdUnixStream>>);

/// Who unix-socket backends see as their peer, and how to connect as it.
#[derive(Debug)]
pub struct SocketIdentity {
    /// The OS user name the server maps the connection to (None: the uid has no name here, so a
    /// server on this host cannot map it to an account either).
    user: Option<String>,
    uid: u32,
    /// The thread running as `user`, when mysql-lb is root; None connects from any thread.
    switched: Option<mpsc::Sender<Request>>,
    /// Why no safe identity could be set up: every unix-socket connect fails with this.
    refused: Option<String>,
}

impl SocketIdentity {
    /// The identity for this process: `configured` (or [`DEFAULT_SOCKET_USER`]) when running as
    /// root, the process's own user otherwise (where `configured`, if set, must be that user).
    pub fn resolve(configured: Option<&str>) -> Result<SocketIdentity, IdentityError> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let euid = unsafe { libc::geteuid() };
        if euid != 0 {
            let own = user_by_uid(euid).map_err(IdentityError::Lookup)?;
            let running = own
                .as_ref()
                .map_or_else(|| format!("uid {euid}"), |u| format!("`{}`", u.name));
            if let Some(wanted) = configured {
                if own.as_ref().is_none_or(|u| u.name != wanted) {
                    return Err(IdentityError::NotRoot {
                        running,
                        wanted: wanted.to_owned(),
                    });
                }
            }
            return Ok(SocketIdentity {
                user: own.map(|u| u.name),
                uid: euid,
                switched: None,
                refused: None,
            });
        }
        let name = configured.unwrap_or(DEFAULT_SOCKET_USER);
        let user = user_by_name(name)
            .map_err(IdentityError::Lookup)?
            .ok_or_else(|| IdentityError::NoSuchUser(name.to_owned()))?;
        if user.uid == 0 {
            return Err(IdentityError::Root(name.to_owned()));
        }
        let switched = spawn_connector(&user)?;
        Ok(SocketIdentity {
            uid: user.uid,
            user: Some(user.name),
            switched: Some(switched),
            refused: None,
        })
    }

    /// The identity for `config`: [`resolve`](Self::resolve)d, where a failure is an error only
    /// if some backend is a unix socket (a TCP-only proxy need not have a `nobody`).
    pub fn for_config(config: &Config) -> Result<SocketIdentity, IdentityError> {
        match Self::resolve(config.backend_socket_user.as_deref()) {
            Ok(identity) => Ok(identity),
            Err(e) if has_unix_backend(config) => Err(e),
            Err(e) => Ok(Self::unavailable(&e)),
        }
    }

    /// An identity that connects to no unix socket, for a configuration without unix-socket
    /// backends whose safe identity could not be set up (e.g. no `nobody` in a minimal image):
    /// a reload that adds one is refused with `error`.
    pub fn unavailable(error: &IdentityError) -> SocketIdentity {
        SocketIdentity {
            user: None,
            uid: u32::MAX,
            switched: None,
            refused: Some(error.to_string()),
        }
    }

    /// Why unix-socket backends cannot be connected, if they cannot.
    pub fn refused(&self) -> Option<&str> {
        self.refused.as_deref()
    }

    /// This process's own identity, switching nothing (for tools and tests that never reach a
    /// unix-socket backend on behalf of clients).
    pub fn own() -> SocketIdentity {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let euid = unsafe { libc::geteuid() };
        SocketIdentity {
            user: user_by_uid(euid).ok().flatten().map(|u| u.name),
            uid: euid,
            switched: None,
            refused: None,
        }
    }

    /// The OS user name the server sees, if the uid has one.
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// `user (uid N)` for messages.
    pub fn describe(&self) -> String {
        match &self.user {
            Some(name) => format!("`{name}` (uid {})", self.uid),
            None => format!("uid {}", self.uid),
        }
    }

    /// Whether a client may log in as `account` through a unix-socket backend: not under the
    /// name the server would authenticate by the socket's peer.
    pub fn admits(&self, account: &str) -> bool {
        self.user.as_deref() != Some(account)
    }

    /// Connects to the unix socket at `path` as this identity.
    pub async fn connect(&self, path: &Path) -> io::Result<UnixStream> {
        if let Some(reason) = &self.refused {
            return Err(io::Error::other(format!(
                "unix-socket backends cannot be reached safely: {reason}"
            )));
        }
        let Some(thread) = &self.switched else {
            return UnixStream::connect(path).await;
        };
        let (tx, rx) = oneshot::channel();
        thread
            .send((path.to_owned(), tx))
            .map_err(|_| io::Error::other("the unix-socket connecting thread has stopped"))?;
        let stream = rx
            .await
            .map_err(|_| io::Error::other("the unix-socket connecting thread has stopped"))??;
        UnixStream::from_std(stream)
    }
}

/// Whether any backend of `config` (any pool) is reached over a unix socket.
pub fn has_unix_backend(config: &Config) -> bool {
    config
        .backends
        .iter()
        .any(|b| matches!(b.address, BackendAddr::Unix(_)))
}

/// An OS user as the password database has it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct OsUser {
    name: String,
    uid: u32,
    gid: u32,
}

/// Starts the thread that connects as `user`, and waits until it has switched (or failed to).
fn spawn_connector(user: &OsUser) -> Result<mpsc::Sender<Request>, IdentityError> {
    let (tx, rx) = mpsc::channel::<Request>();
    let (ready_tx, ready_rx) = mpsc::channel::<io::Result<()>>();
    let (uid, gid) = (user.uid, user.gid);
    let switch_failed = |source| IdentityError::Switch {
        user: user.name.clone(),
        source,
    };
    std::thread::Builder::new()
        .name("unix-connect".into())
        .spawn(move || {
            let switched = switch_this_thread(uid, gid);
            let ok = switched.is_ok();
            let _ = ready_tx.send(switched);
            if ok {
                for (path, reply) in rx {
                    let _ = reply.send(connect_nonblocking(&path));
                }
            }
        })
        .map_err(switch_failed)?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(tx),
        Ok(Err(e)) => Err(switch_failed(e)),
        Err(_) => Err(switch_failed(io::Error::other("thread ended"))),
    }
}

/// Drops this thread (only) to `uid`/`gid` with no supplementary groups, and checks it took.
fn switch_this_thread(uid: u32, gid: u32) -> io::Result<()> {
    let none: *const libc::gid_t = std::ptr::null();
    // SAFETY: raw system calls with plain integer arguments (and a null list of zero groups);
    // they change the credentials of the calling thread only, which is this dedicated thread.
    let results = unsafe {
        [
            libc::syscall(libc::SYS_setgroups, 0usize, none),
            libc::syscall(libc::SYS_setresgid, gid, gid, gid),
            libc::syscall(libc::SYS_setresuid, uid, uid, uid),
        ]
    };
    if results.iter().any(|&r| r != 0) {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: no preconditions; both read the calling thread's credentials.
    let (euid, egid) = unsafe {
        (
            libc::syscall(libc::SYS_geteuid),
            libc::syscall(libc::SYS_getegid),
        )
    };
    if euid != i64::from(uid) || egid != i64::from(gid) {
        return Err(io::Error::other(format!(
            "credentials are uid {euid}, gid {egid} after the switch"
        )));
    }
    Ok(())
}

/// A non-blocking connect, as tokio's own would be: a unix socket either connects at once or
/// fails (EAGAIN when the server's backlog is full).
fn connect_nonblocking(path: &Path) -> io::Result<StdUnixStream> {
    let socket = Socket::new(Domain::UNIX, Type::STREAM.cloexec(), None)?;
    socket.set_nonblocking(true)?;
    socket.connect(&SockAddr::unix(path)?)?;
    Ok(socket.into())
}

fn user_by_name(name: &str) -> io::Result<Option<OsUser>> {
    let Ok(cname) = CString::new(name) else {
        return Ok(None);
    };
    lookup(|pwd, buf, result| {
        // SAFETY: every pointer is valid for the call; `buf` is as long as the length passed.
        unsafe { libc::getpwnam_r(cname.as_ptr(), pwd, buf.as_mut_ptr(), buf.len(), result) }
    })
}

fn user_by_uid(uid: u32) -> io::Result<Option<OsUser>> {
    lookup(|pwd, buf, result| {
        // SAFETY: every pointer is valid for the call; `buf` is as long as the length passed.
        unsafe { libc::getpwuid_r(uid, pwd, buf.as_mut_ptr(), buf.len(), result) }
    })
}

/// Runs a `getpw*_r` call with a buffer that grows until the entry fits.
fn lookup(
    call: impl Fn(&mut libc::passwd, &mut [libc::c_char], &mut *mut libc::passwd) -> libc::c_int,
) -> io::Result<Option<OsUser>> {
    let mut size = 1024;
    loop {
        // SAFETY: an all-zero passwd is a valid value for an out-parameter.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut buf: Vec<libc::c_char> = vec![0; size];
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        match call(&mut pwd, &mut buf, &mut result) {
            0 if result.is_null() => return Ok(None),
            0 => {
                // SAFETY: on success pw_name points to a NUL-terminated string inside `buf`.
                let name = unsafe { CStr::from_ptr(pwd.pw_name) };
                return Ok(Some(OsUser {
                    name: name.to_string_lossy().into_owned(),
                    uid: pwd.pw_uid,
                    gid: pwd.pw_gid,
                }));
            }
            libc::ERANGE if size < 1 << 20 => size *= 4,
            libc::ENOENT | libc::ESRCH | libc::EBADF | libc::EPERM => return Ok(None),
            code => return Err(io::Error::from_raw_os_error(code)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_and_nobody_are_found_by_name_and_uid() {
        let root = user_by_name("root")
            .unwrap()
            .expect("root in the password database");
        assert_eq!(root.uid, 0);
        assert_eq!(user_by_uid(0).unwrap().map(|u| u.name), Some("root".into()));
        assert_eq!(user_by_name("no-such-user-mysql-lb").unwrap(), None);
        assert_eq!(user_by_name("nul\0inside").unwrap(), None);
    }

    #[test]
    fn a_login_under_the_identity_name_is_not_admitted() {
        let id = SocketIdentity {
            user: Some("nobody".into()),
            uid: 65534,
            switched: None,
            refused: None,
        };
        assert!(!id.admits("nobody"));
        assert!(id.admits("root"));
        assert!(
            id.admits("Nobody"),
            "account names are compared as the server does, exactly"
        );
        let nameless = SocketIdentity {
            user: None,
            uid: 4242,
            switched: None,
            refused: None,
        };
        assert!(nameless.admits("root"));
        assert_eq!(nameless.describe(), "uid 4242");
    }

    #[test]
    fn root_is_refused_as_the_socket_user() {
        // SAFETY: no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            let e = SocketIdentity::resolve(Some("root")).unwrap_err();
            assert!(e.to_string().contains("`root` is root"), "{e}");
            let e = SocketIdentity::resolve(Some("no-such-user-mysql-lb")).unwrap_err();
            assert!(e.to_string().contains("no OS user named"), "{e}");
        } else {
            let e = SocketIdentity::resolve(Some("root")).unwrap_err();
            assert!(e.to_string().contains("cannot connect as `root`"), "{e}");
        }
    }

    #[tokio::test]
    async fn the_server_sees_the_switched_user_as_its_peer_and_other_threads_keep_theirs() {
        // SAFETY: no preconditions.
        let euid = unsafe { libc::geteuid() };
        assert_eq!(
            euid, 0,
            "run as root (as CI does): the switch is what is tested"
        );
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o711),
        )
        .unwrap();
        let path = dir.path().join("s.sock");
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        // As a server's socket is: anyone may connect (connect(2) needs write permission).
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o777))
            .unwrap();
        let nobody = user_by_name(DEFAULT_SOCKET_USER).unwrap().unwrap();
        let identity = SocketIdentity::resolve(None).unwrap();
        assert_eq!(identity.user(), Some(DEFAULT_SOCKET_USER));
        for _ in 0..2 {
            let _client = identity.connect(&path).await.unwrap();
            let (server_side, _) = listener.accept().await.unwrap();
            let cred = server_side.peer_cred().unwrap();
            assert_eq!((cred.uid(), cred.gid()), (nobody.uid, nobody.gid));
        }
        // The rest of the process is still root.
        // SAFETY: no preconditions.
        assert_eq!(unsafe { libc::syscall(libc::SYS_geteuid) }, 0);
        let _client = SocketIdentity::own().connect(&path).await.unwrap();
        let (server_side, _) = listener.accept().await.unwrap();
        assert_eq!(server_side.peer_cred().unwrap().uid(), 0);
    }

    #[tokio::test]
    async fn a_socket_the_user_cannot_reach_fails_with_the_os_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .unwrap();
        let path = dir.path().join("s.sock");
        let _listener = tokio::net::UnixListener::bind(&path).unwrap();
        let identity = SocketIdentity::resolve(None).unwrap();
        let e = identity.connect(&path).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
    }
}
