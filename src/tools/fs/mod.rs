//! The file tools an agent sees: read, write, list, stat, mkdir, move,
//! delete, search. Paths are relative to the workspace (the first allowed
//! dir) or absolute inside an allowed dir.
//!
//! Invariant: every access goes through the cap-std handle of the allowed dir
//! the path resolved into (the resolver in `paths` refuses escapes first, and
//! cap-std refuses them again at the access, so a symlink swapped in between
//! cannot lead outside). Writes go to a temporary file in the target's own
//! directory handle and are renamed over the name, so a reader never sees a
//! half-written file and a symlink at the name is replaced, not followed.
//! Nothing is written under a read-only allowed dir, and no protected path
//! of a writable one (`protected`) is written, created, moved or
//! deleted, nor an ancestor of one moved, deleted or replaced.
//!
//! One operation per file (`read_file`, `write_file`, `list_dir`, `stat`,
//! `mkdir`, `rename`, `delete`, `search`); here, what they share: the
//! error, the policy, and the resolution of a path to its `Target`.

use std::path::{Component, Path, PathBuf};

use cap_std::fs::{Dir, OpenOptions};

use crate::paths::{AllowedDirs, PathError, same_path, strip_dir, within};
use crate::policy::{Decision, write};
use crate::protected::{ProtectedPaths, Relation};

mod delete;
mod list_dir;
mod mkdir;
mod read_file;
mod rename;
mod search;
mod stat;
mod write_file;

pub use delete::delete;
pub use list_dir::{MAX_DEPTH, MAX_GLOB, MAX_VISIT, list};
pub use mkdir::mkdir;
pub use read_file::read;
pub use rename::rename;
pub use search::{glob_match, search};
pub use stat::stat;
pub use write_file::write;

/// What kind of failure a file tool had. Its name ([`FsErrorKind::as_str`])
/// is the status the agent and the audit log see.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FsErrorKind {
    /// The arguments cannot be used (a path that is not one, a bad range).
    InvalidRequest,
    /// The host refused access.
    PermissionDenied,
    /// Nothing at the path.
    NotFound,
    /// Past a size limit (the file cap, the read limit).
    TooLarge,
    /// A rule refused it: the sandbox's boundary, or the write policy.
    Policy,
    /// Any other I/O failure.
    Io,
}

impl FsErrorKind {
    /// The stable name: `invalid_request`, `permission_denied`, `not_found`,
    /// `too_large`, `policy` or `io`.
    pub fn as_str(self) -> &'static str {
        match self {
            FsErrorKind::InvalidRequest => "invalid_request",
            FsErrorKind::PermissionDenied => "permission_denied",
            FsErrorKind::NotFound => "not_found",
            FsErrorKind::TooLarge => "too_large",
            FsErrorKind::Policy => "policy",
            FsErrorKind::Io => "io",
        }
    }
}

/// Why a file tool failed: a stable kind (for the audit log) and a message
/// for the agent that names no host path outside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsError {
    /// What kind of failure.
    pub kind: FsErrorKind,
    /// Why.
    pub message: String,
    /// The policy rule, when a rule refused.
    pub rule: Option<String>,
}

impl FsError {
    fn new(kind: FsErrorKind, message: impl Into<String>) -> Self {
        FsError {
            kind,
            message: message.into(),
            rule: None,
        }
    }

    /// A refusal at the sandbox's boundary: outside every allowed dir, or a
    /// write into a read-only one.
    fn boundary(rule: &str, message: impl Into<String>) -> Self {
        FsError {
            kind: FsErrorKind::Policy,
            message: message.into(),
            rule: Some(rule.to_string()),
        }
    }
}

/// Rules of the sandbox's boundary.
const OUTSIDE: &str = "sandbox.outside";
const READ_ONLY: &str = "sandbox.read_only";
const PROTECTED: &str = "sandbox.protected";

impl std::fmt::Display for FsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<PathError> for FsError {
    fn from(e: PathError) -> Self {
        let kind = match e {
            PathError::Outside(_) => return FsError::boundary(OUTSIDE, e.to_string()),
            PathError::NotFound(_) => FsErrorKind::NotFound,
            PathError::Io { .. } => FsErrorKind::Io,
            _ => FsErrorKind::InvalidRequest,
        };
        FsError::new(kind, e.to_string())
    }
}

fn io_error(path: &str, e: &std::io::Error) -> FsError {
    use std::io::ErrorKind as K;
    let kind = match e.kind() {
        K::NotFound => FsErrorKind::NotFound,
        K::PermissionDenied => FsErrorKind::PermissionDenied,
        _ => FsErrorKind::Io,
    };
    // cap-std's escape error names no host path; neither does the OS reason.
    let reason = e.to_string();
    let reason = reason.split(" (os error").next().unwrap_or(&reason);
    if kind == FsErrorKind::PermissionDenied && reason.contains("outside of the filesystem") {
        // cap-std caught an escape (a symlink out, found while opening).
        return FsError::boundary(OUTSIDE, format!("{path}: leads outside the sandbox"));
    }
    FsError::new(kind, format!("{path}: {reason}"))
}

/// Limits and policy the file tools apply.
#[derive(Debug, Clone)]
pub struct FsPolicy {
    /// Largest file written, bytes; `None` for no limit.
    pub max_file_size: Option<u64>,
    /// Most bytes a read returns.
    pub max_read_bytes: u64,
    /// Extensions that may not be written.
    pub denied_extensions: Vec<String>,
    /// Paths in the writable allowed dirs that may not change.
    pub protected: ProtectedPaths,
}

/// What a change does to the path it names, for [`refuse_protected`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Change {
    /// Creates a directory that is missing (an ancestor of a protected path
    /// may be created: nothing protected can be made inside it).
    MakeDir,
    /// Writes, moves or deletes it (an ancestor may not be replaced).
    Replace,
}

/// Refuses a change at `host` (inside the sandbox: its parent resolved, its
/// final name literal) that touches a protected path of a writable allowed
/// dir: at or under one, under the real location of one that is a symlink,
/// or (for [`Change::Replace`]) an ancestor of one.
fn refuse_protected(
    dirs: &AllowedDirs,
    policy: &FsPolicy,
    host: &Path,
    path: &str,
    change: Change,
) -> Result<(), FsError> {
    let refused = |what: String| {
        Err(FsError::boundary(
            PROTECTED,
            format!("{}: {what} (protected_paths)", shown(path)),
        ))
    };
    // Moving or deleting an allowed dir nested in another (or a dir holding
    // one) would take its protected paths with it, and, with or without
    // them, would let a symlink put in its place redirect where the docker
    // backend's engine mounts that dir.
    if change == Change::Replace
        && let Some(d) = dirs.as_slice().iter().find(|d| within(d.path(), host))
    {
        return Err(FsError::boundary(
            PROTECTED,
            format!(
                "{}: is (or holds) the allowed dir {}",
                shown(path),
                d.guest_path().display()
            ),
        ));
    }
    if policy.protected.is_empty() {
        return Ok(());
    }
    for d in dirs.as_slice().iter().filter(|d| !d.read_only()) {
        if let Some(rel) = strip_dir(host, d.path()) {
            match policy.protected.judge(&rel) {
                Relation::Free => {}
                Relation::Protected(p) => return refused(format!("inside protected path {p}")),
                Relation::Ancestor(p) if change == Change::Replace => {
                    return refused(format!("would replace protected path {p}"));
                }
                Relation::Ancestor(_) => {}
            }
        }
        // Where each protected path really leads (through symlinks, also
        // to a place that does not exist yet): nothing under it changes,
        // and neither it, a link on the way, nor a dir holding one is
        // replaced.
        for (_, raw) in policy.protected.entries_raw() {
            let r = crate::backend::protect::resolve_entry(d.path(), raw);
            if dirs.as_slice().iter().any(|a| within(a.path(), &r.place)) {
                continue; // a link to `/` or `..`: no repository to keep
            }
            if within(host, &r.place) {
                return refused(format!("inside protected path {}", raw.join("/")));
            }
            if change == Change::Replace
                && !same_path(host, d.path())
                && (within(&r.place, host) || r.links.iter().any(|l| within(l, host)))
            {
                return refused(format!("would replace protected path {}", raw.join("/")));
            }
        }
    }
    Ok(())
}

/// The directory handle a name lives in and the name itself, as written:
/// writes, moves, deletes and stats act on the name (a symlink there is the
/// link, never its target).
struct Target {
    parent: Dir,
    name: PathBuf,
    /// Host path: the parent resolved, the name literal.
    host: PathBuf,
    /// Under a read-only allowed dir, or itself (or an ancestor of) one: a
    /// nested read-only dir cannot be moved or deleted through its parent.
    read_only: bool,
}

fn shown(p: &str) -> String {
    format!("{p:?}")
}

/// The parent (resolved: symlinks in it followed while they stay inside)
/// and the literal final name of `path`.
fn target(dirs: &AllowedDirs, path: &str) -> Result<Target, FsError> {
    let p = Path::new(path);
    if p.as_os_str().is_empty() {
        return Err(PathError::Empty.into());
    }
    // A NUL ends the name for the host (and on Windows a wide string cut
    // there would name another file than the one judged).
    if path.contains('\0') {
        return Err(PathError::Nul.into());
    }
    let name = match p.components().next_back() {
        Some(Component::Normal(n)) => PathBuf::from(n),
        _ => {
            return Err(FsError::new(
                FsErrorKind::InvalidRequest,
                format!("{}: does not end in a file name", shown(path)),
            ));
        }
    };
    let parent_path = match p.parent() {
        Some(q) if !q.as_os_str().is_empty() => q,
        _ => Path::new("."),
    };
    let parent = dirs.resolve(parent_path, None)?;
    let handle = dirs
        .open_dir(&parent)
        .map_err(|e| io_error(&shown(path), &e))?;
    // `x/` and `x/.` name a directory: a symlink there (or a file) is not one.
    if (path.ends_with('/') || path.ends_with("/."))
        && !handle.symlink_metadata(&name).is_ok_and(|m| m.is_dir())
    {
        return Err(FsError::new(
            FsErrorKind::InvalidRequest,
            format!(
                "{}: not a directory (a trailing slash names one)",
                shown(path)
            ),
        ));
    }
    // Windows: an existing entry named by its 8.3 short name (`GIT~1`, also
    // with the trailing dots or a stream Win32 drops) is judged, and
    // changed, by its long name: the protected paths and the extension
    // denylist are names. One whose long name cannot be told is refused.
    #[cfg(windows)]
    let name = {
        use crate::protected::{normalize, win32_base};
        let text = name.to_string_lossy().into_owned();
        let base = win32_base(&text);
        if base.contains('~') {
            match crate::sys::file_id::name_on_disk(&parent.host_path().join(base)) {
                Ok(Some(real)) if normalize(&real.to_string_lossy()) != normalize(base) => {
                    let mut n = real;
                    n.push(text.find(':').map_or("", |i| &text[i..]));
                    PathBuf::from(n)
                }
                Ok(_) => name,
                Err(e) => return Err(io_error(&shown(path), &e)),
            }
        } else {
            name
        }
    };
    let host = parent.host_path().join(&name);
    let read_only = parent.read_only()
        || dirs
            .as_slice()
            .iter()
            .any(|d| d.read_only() && within(d.path(), &host));
    Ok(Target {
        parent: handle,
        name,
        host,
        read_only,
    })
}

fn writable(t: &Target, path: &str) -> Result<(), FsError> {
    if t.read_only {
        return Err(FsError::boundary(
            READ_ONLY,
            format!(
                "{}: in (or containing) a read-only allowed dir",
                shown(path)
            ),
        ));
    }
    Ok(())
}

/// Opens flags: never block on a FIFO or device, and (for writes) never
/// follow a symlink at the name.
#[cfg(unix)]
fn no_block(opts: &mut OpenOptions, no_follow: bool) {
    use cap_std::fs::OpenOptionsExt as _;
    let flags = libc::O_NONBLOCK | if no_follow { libc::O_NOFOLLOW } else { 0 };
    opts.custom_flags(flags);
}

#[cfg(not(unix))]
fn no_block(_: &mut OpenOptions, _: bool) {}

fn not_regular(path: &str) -> FsError {
    FsError::new(
        FsErrorKind::InvalidRequest,
        format!(
            "{}: not a regular file (a FIFO, socket or device)",
            shown(path)
        ),
    )
}

fn check_extension(t: &Target, policy: &FsPolicy) -> Result<(), FsError> {
    let name = t.name.to_string_lossy();
    if let Decision::Deny { rule, reason } = write::check_name(&name, &policy.denied_extensions) {
        return Err(FsError {
            kind: FsErrorKind::Policy,
            message: reason,
            rule: Some(rule),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn globs() {
        assert!(glob_match("*.rs", "main.rs"));
        assert!(!glob_match("*.rs", "main.rsx"));
        assert!(glob_match("a?c", "abc"));
        assert!(glob_match("[a-c]x", "bx"));
        assert!(!glob_match("[!a-c]x", "bx"));
        assert!(glob_match("*", ""));
        assert!(glob_match("*.tar.gz", "x.tar.gz"));
        assert!(glob_match("[x", "[x"));
        // Linear: a pattern that backtracks exponentially elsewhere.
        let long = "a".repeat(5000);
        assert!(!glob_match("*a*a*a*a*a*a*a*a*a*a*b", &long));
    }
}
