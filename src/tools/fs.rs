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

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use cap_std::fs::{Dir, OpenOptions};

use crate::paths::{AllowedDirs, PathError, same_path, strip_dir, within};
use crate::policy::{Decision, write};
use crate::protected::{ProtectedPaths, Relation};

/// Why a file tool failed: a stable kind (for the audit log) and a message
/// for the agent that names no host path outside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsError {
    /// `invalid_request`, `permission_denied`, `not_found`, `too_large`,
    /// `policy` or `io`.
    pub kind: &'static str,
    /// Why.
    pub message: String,
    /// The policy rule, when a rule refused.
    pub rule: Option<String>,
}

impl FsError {
    fn new(kind: &'static str, message: impl Into<String>) -> Self {
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
            kind: "policy",
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
            PathError::NotFound(_) => "not_found",
            PathError::Io { .. } => "io",
            _ => "invalid_request",
        };
        FsError::new(kind, e.to_string())
    }
}

fn io_error(path: &str, e: &std::io::Error) -> FsError {
    use std::io::ErrorKind as K;
    let kind = match e.kind() {
        K::NotFound => "not_found",
        K::PermissionDenied => "permission_denied",
        _ => "io",
    };
    // cap-std's escape error names no host path; neither does the OS reason.
    let reason = e.to_string();
    let reason = reason.split(" (os error").next().unwrap_or(&reason);
    if kind == "permission_denied" && reason.contains("outside of the filesystem") {
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
    if policy.protected.is_empty() {
        return Ok(());
    }
    let refused = |what: String| {
        Err(FsError::boundary(
            PROTECTED,
            format!("{}: {what} (protected_paths)", shown(path)),
        ))
    };
    // Moving or deleting an allowed dir nested in another (or a dir holding
    // one) would take its protected paths with it.
    if change == Change::Replace
        && let Some(d) = dirs.as_slice().iter().find(|d| within(d.path(), host))
    {
        return refused(format!(
            "is (or holds) the allowed dir {}",
            d.guest_path().display()
        ));
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
                "invalid_request",
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
            "invalid_request",
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
        "invalid_request",
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
            kind: "policy",
            message: reason,
            rule: Some(rule),
        });
    }
    Ok(())
}

/// `file_read`: up to `limit` lines from line `offset` (0-based), at most
/// `max_read_bytes` bytes. Binary files are reported, not returned.
pub fn read(
    dirs: &AllowedDirs,
    policy: &FsPolicy,
    path: &str,
    offset: u64,
    limit: Option<u64>,
) -> Result<String, FsError> {
    // Reads follow symlinks that stay inside (resolved, then confined again
    // by cap-std at the open).
    let resolved = dirs.resolve(Path::new(path), None)?;
    let root = dirs.dir_of(&resolved);
    let rel = resolved.relative();
    if rel.as_os_str().is_empty() {
        return Err(FsError::new(
            "invalid_request",
            format!("{}: is a directory (use file_list)", shown(path)),
        ));
    }
    let mut opts = OpenOptions::new();
    opts.read(true);
    no_block(&mut opts, false);
    let mut file = root
        .open_with(rel, &opts)
        .map_err(|e| io_error(&shown(path), &e))?;
    let meta = file.metadata().map_err(|e| io_error(&shown(path), &e))?;
    if meta.is_dir() {
        return Err(FsError::new(
            "invalid_request",
            format!("{}: is a directory (use file_list)", shown(path)),
        ));
    }
    if !meta.is_file() {
        return Err(not_regular(path));
    }
    let mut head = vec![0u8; 8192];
    let n = read_full(&mut file, &mut head).map_err(|e| io_error(&shown(path), &e))?;
    head.truncate(n);
    if head.contains(&0) {
        return Ok(format!("[binary file: {} bytes, not shown]", meta.len()));
    }
    file.seek(SeekFrom::Start(0))
        .map_err(|e| io_error(&shown(path), &e))?;
    let mut bytes = Vec::new();
    let cap = policy.max_read_bytes;
    (&mut file)
        .take(cap.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| io_error(&shown(path), &e))?;
    let truncated = bytes.len() as u64 > cap;
    bytes.truncate(usize::try_from(cap).unwrap_or(usize::MAX));
    let text = match String::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => {
            let valid = e.utf8_error().valid_up_to();
            // A cut inside a multi-byte character at the cap is not binary.
            if truncated && e.as_bytes().len() - valid < 4 {
                let mut b = e.into_bytes();
                b.truncate(valid);
                String::from_utf8(b).unwrap_or_default()
            } else {
                return Ok(format!(
                    "[binary file (not UTF-8): {} bytes, not shown]",
                    meta.len()
                ));
            }
        }
    };
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let start = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(lines.len());
    let end = match limit {
        Some(l) => start.saturating_add(usize::try_from(l).unwrap_or(usize::MAX)),
        None => lines.len(),
    }
    .min(lines.len());
    let mut out: String = lines[start..end].concat();
    if truncated && end == lines.len() {
        out.push_str(&format!(
            "\n[truncated: the file is {} bytes; {} were read]",
            meta.len(),
            cap
        ));
    }
    Ok(out)
}

fn read_full(f: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// `file_write`: replaces the file atomically (or appends), creating parent
/// dirs inside the sandbox. Returns a short confirmation.
pub fn write(
    dirs: &AllowedDirs,
    policy: &FsPolicy,
    path: &str,
    content: &[u8],
    append: bool,
) -> Result<String, FsError> {
    // Every check before any change: the name's policy, then read-only.
    if let Some(Component::Normal(n)) = Path::new(path).components().next_back()
        && let Decision::Deny { rule, reason } =
            write::check_name(&n.to_string_lossy(), &policy.denied_extensions)
    {
        return Err(FsError {
            kind: "policy",
            message: reason,
            rule: Some(rule),
        });
    }
    let resolved = dirs.resolve(Path::new(path), None)?;
    if resolved.read_only() {
        return Err(FsError::boundary(
            READ_ONLY,
            format!("{}: the allowed dir is read-only", shown(path)),
        ));
    }
    // Before its parents are created.
    refuse_protected(dirs, policy, resolved.host_path(), path, Change::Replace)?;
    if let Some(parent) = Path::new(path).parent()
        && !parent.as_os_str().is_empty()
    {
        // Created through the resolver (symlinks in it stay inside) and the
        // allowed dir's handle.
        let pr = dirs.resolve(parent, None)?;
        if pr.read_only() {
            return Err(FsError::boundary(
                READ_ONLY,
                format!("{}: the allowed dir is read-only", shown(path)),
            ));
        }
        if !pr.relative().as_os_str().is_empty() {
            dirs.dir_of(&pr)
                .create_dir_all(pr.relative())
                .map_err(|e| io_error(&shown(path), &e))?;
        }
    }
    let t = target(dirs, path)?;
    writable(&t, path)?;
    refuse_protected(dirs, policy, &t.host, path, Change::Replace)?;
    check_extension(&t, policy)?;
    let existing_meta = t.parent.symlink_metadata(&t.name).ok();
    let existing = match &existing_meta {
        Some(m) if m.is_dir() => {
            return Err(FsError::new(
                "invalid_request",
                format!("{}: is a directory", shown(path)),
            ));
        }
        Some(m) if m.is_file() => m.len(),
        _ => 0,
    };
    let total = if append {
        existing.saturating_add(content.len() as u64)
    } else {
        content.len() as u64
    };
    if let Some(max) = policy.max_file_size
        && total > max
    {
        return Err(FsError {
            kind: "too_large",
            message: format!(
                "{}: {total} bytes would exceed max_file_size_mb ({} MiB)",
                shown(path),
                max >> 20
            ),
            rule: Some("write.max_file_size".into()),
        });
    }
    if append {
        // Appends go to the file itself: never through a symlink (O_NOFOLLOW),
        // never to a FIFO or device, never to an inode with other names (a
        // hard link to a read-only file).
        let mut opts = OpenOptions::new();
        opts.append(true).create(true);
        no_block(&mut opts, true);
        let mut f = t
            .parent
            .open_with(&t.name, &opts)
            .map_err(|e| io_error(&shown(path), &e))?;
        let meta = f.metadata().map_err(|e| io_error(&shown(path), &e))?;
        if !meta.is_file() {
            return Err(not_regular(path));
        }
        #[cfg(unix)]
        {
            use cap_std::fs::MetadataExt as _;
            if meta.nlink() > 1 {
                return Err(FsError::new(
                    "permission_denied",
                    format!("{}: has other hard links; append refused", shown(path)),
                ));
            }
            // The kernel clears set-ID bits on a write, except for a writer
            // with CAP_FSETID (toolhost as root): clear them first, so that
            // appending to a set-ID file leaves no set-ID program of changed
            // content behind.
            use cap_std::fs::PermissionsExt as _;
            let mode = meta.permissions().mode();
            if mode & 0o6000 != 0 {
                f.set_permissions(cap_std::fs::Permissions::from_mode(mode & 0o777))
                    .map_err(|e| io_error(&shown(path), &e))?;
            }
        }
        if let Some(max) = policy.max_file_size
            && meta.len().saturating_add(content.len() as u64) > max
        {
            return Err(FsError {
                kind: "too_large",
                message: format!(
                    "{}: the append would exceed max_file_size_mb ({} MiB)",
                    shown(path),
                    max >> 20
                ),
                rule: Some("write.max_file_size".into()),
            });
        }
        f.write_all(content)
            .map_err(|e| io_error(&shown(path), &e))?;
        return Ok(format!("appended {} bytes to {path}", content.len()));
    }
    // A short temporary name (a long final name must still fit NAME_MAX).
    let tmp = PathBuf::from(format!(
        ".toolhost-{}-{}.tmp",
        std::process::id(),
        TMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let mut opts = OpenOptions::new();
    opts.write(true).create_new(true);
    no_block(&mut opts, true);
    let result = (|| {
        let f = t.parent.open_with(&tmp, &opts)?;
        (&f).write_all(content)?;
        // A replaced file keeps its permission bits, never its set-user-ID or
        // set-group-ID bit: the new file is toolhost's (root's, when toolhost
        // runs as root), so a kept bit would make whatever the agent wrote a
        // set-ID program of toolhost's user (contract case 42, file tools).
        if let Some(m) = existing_meta.as_ref().filter(|m| m.is_file()) {
            #[cfg(unix)]
            {
                use cap_std::fs::PermissionsExt;
                f.set_permissions(cap_std::fs::Permissions::from_mode(
                    m.permissions().mode() & 0o777,
                ))?;
            }
            #[cfg(not(unix))]
            f.set_permissions(m.permissions())?;
        }
        f.sync_all()?;
        t.parent.rename(&tmp, &t.parent, &t.name)
    })();
    if let Err(e) = result {
        let _ = t.parent.remove_file(&tmp);
        return Err(io_error(&shown(path), &e));
    }
    Ok(format!("wrote {} bytes to {path}", content.len()))
}

/// Deepest directory level `file_list` and `file_search` descend to.
pub const MAX_DEPTH: usize = 64;
/// Most directory entries one `file_list` or `file_search` looks at.
pub const MAX_VISIT: usize = 200_000;
/// Longest glob `file_search` takes.
pub const MAX_GLOB: usize = 512;

/// Walks `root` breadth-first without recursion (a deep tree cannot
/// exhaust the stack), one directory fd open at a time, at most `MAX_DEPTH`
/// levels and `MAX_VISIT` entries. `visit` gets each entry's relative path,
/// type and the directory it is in; it returns false to stop. Returns a note
/// when a bound cut the walk short.
fn walk_tree(
    root: &Dir,
    recursive: bool,
    mut visit: impl FnMut(&Dir, &Path, &cap_std::fs::FileType) -> std::io::Result<bool>,
) -> std::io::Result<Option<String>> {
    let mut queue: std::collections::VecDeque<(PathBuf, usize)> =
        std::collections::VecDeque::from([(PathBuf::new(), 0)]);
    let mut visited = 0usize;
    let mut note = None;
    while let Some((prefix, depth)) = queue.pop_front() {
        let dir = if prefix.as_os_str().is_empty() {
            root.try_clone()?
        } else {
            match root.open_dir(&prefix) {
                Ok(d) => d,
                // Gone or replaced since it was listed: skipped.
                Err(_) => continue,
            }
        };
        let mut names: Vec<(std::ffi::OsString, cap_std::fs::FileType)> = Vec::new();
        for entry in dir.entries()? {
            let entry = entry?;
            visited += 1;
            if visited > MAX_VISIT {
                return Ok(Some(format!("[stopped after {MAX_VISIT} entries]")));
            }
            names.push((entry.file_name(), entry.file_type()?));
        }
        names.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, ft) in names {
            let rel = prefix.join(&name);
            if !visit(&dir, &rel, &ft)? {
                return Ok(note);
            }
            if recursive && ft.is_dir() {
                if depth + 1 < MAX_DEPTH {
                    queue.push_back((rel, depth + 1));
                } else {
                    note = Some(format!(
                        "[directories deeper than {MAX_DEPTH} levels not shown]"
                    ));
                }
            }
        }
    }
    Ok(note)
}

/// `file_list`: the entries of a directory (recursively: breadth-first, up
/// to `max_entries`).
pub fn list(
    dirs: &AllowedDirs,
    path: &str,
    recursive: bool,
    max_entries: usize,
) -> Result<String, FsError> {
    let resolved = dirs.resolve(Path::new(path), None)?;
    let dir = dirs
        .open_dir(&resolved)
        .map_err(|e| io_error(&shown(path), &e))?;
    let mut out = Vec::new();
    let mut full = false;
    let note = walk_tree(&dir, recursive, |d, rel, ft| {
        if out.len() >= max_entries {
            full = true;
            return Ok(false);
        }
        let shown = rel.to_string_lossy();
        if ft.is_dir() {
            out.push(format!("{shown}/"));
        } else if ft.is_symlink() {
            out.push(format!("{shown}@"));
        } else {
            let name = rel.file_name().unwrap_or_default();
            let len = d.symlink_metadata(name).map(|m| m.len()).unwrap_or(0);
            out.push(format!("{shown}\t{len}"));
        }
        Ok(true)
    })
    .map_err(|e| io_error(&shown(path), &e))?;
    out.sort();
    let mut text = out.join("\n");
    if full {
        text.push_str(&format!("\n[truncated at {max_entries} entries]"));
    }
    if let Some(n) = note {
        text.push('\n');
        text.push_str(&n);
    }
    Ok(text)
}

/// `file_stat`: type (a symlink is reported as one), size, read-only, and
/// modification time.
pub fn stat(dirs: &AllowedDirs, path: &str) -> Result<serde_json::Value, FsError> {
    let resolved = dirs.resolve(Path::new(path), None)?;
    let (meta, read_only) = if resolved.relative().as_os_str().is_empty() {
        let m = dirs
            .dir_of(&resolved)
            .dir_metadata()
            .map_err(|e| io_error(&shown(path), &e))?;
        (m, resolved.read_only())
    } else {
        let t = target(dirs, path)?;
        let m = t
            .parent
            .symlink_metadata(&t.name)
            .map_err(|e| io_error(&shown(path), &e))?;
        (m, t.read_only)
    };
    let kind = if meta.is_dir() {
        "directory"
    } else if meta.file_type().is_symlink() {
        "symlink"
    } else if meta.is_file() {
        "file"
    } else {
        "other"
    };
    let modified = meta
        .modified()
        .ok()
        .map(|t| t.into_std())
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_secs());
    Ok(serde_json::json!({
        "path": path,
        "type": kind,
        "size": meta.len(),
        "read_only": read_only || meta.permissions().readonly(),
        "modified_unix": modified,
    }))
}

/// `file_mkdir`: creates a directory and its parents.
pub fn mkdir(dirs: &AllowedDirs, policy: &FsPolicy, path: &str) -> Result<String, FsError> {
    let resolved = dirs.resolve(Path::new(path), None)?;
    if resolved.read_only() {
        return Err(FsError::boundary(
            READ_ONLY,
            format!("{}: the allowed dir is read-only", shown(path)),
        ));
    }
    refuse_protected(dirs, policy, resolved.host_path(), path, Change::MakeDir)?;
    let rel = resolved.relative();
    if rel.as_os_str().is_empty() {
        return Ok(format!("{path} exists"));
    }
    dirs.dir_of(&resolved)
        .create_dir_all(rel)
        .map_err(|e| io_error(&shown(path), &e))?;
    Ok(format!("created {path}"))
}

/// `file_move`: renames a file or directory within the sandbox (both ends
/// writable, the destination's name checked like a write).
pub fn rename(
    dirs: &AllowedDirs,
    policy: &FsPolicy,
    from: &str,
    to: &str,
    overwrite: bool,
) -> Result<String, FsError> {
    let src = target(dirs, from)?;
    writable(&src, from)?;
    refuse_protected(dirs, policy, &src.host, from, Change::Replace)?;
    let dst = target(dirs, to)?;
    writable(&dst, to)?;
    refuse_protected(dirs, policy, &dst.host, to, Change::Replace)?;
    check_extension(&dst, policy)?;
    src.parent
        .symlink_metadata(&src.name)
        .map_err(|e| io_error(&shown(from), &e))?;
    if !overwrite && dst.parent.symlink_metadata(&dst.name).is_ok() {
        return Err(FsError::new(
            "invalid_request",
            format!("{}: exists (set overwrite to replace it)", shown(to)),
        ));
    }
    src.parent
        .rename(&src.name, &dst.parent, &dst.name)
        .map_err(|e| io_error(&format!("{} -> {}", shown(from), shown(to)), &e))?;
    Ok(format!("moved {from} to {to}"))
}

/// `file_delete`: removes a file, a symlink (not its target), or a directory
/// (only empty unless `recursive`).
pub fn delete(
    dirs: &AllowedDirs,
    policy: &FsPolicy,
    path: &str,
    recursive: bool,
) -> Result<String, FsError> {
    let t = target(dirs, path)?;
    writable(&t, path)?;
    refuse_protected(dirs, policy, &t.host, path, Change::Replace)?;
    let meta = t
        .parent
        .symlink_metadata(&t.name)
        .map_err(|e| io_error(&shown(path), &e))?;
    let r = if meta.is_dir() {
        if recursive {
            t.parent.remove_dir_all(&t.name)
        } else {
            t.parent.remove_dir(&t.name)
        }
    } else {
        t.parent.remove_file(&t.name)
    };
    r.map_err(|e| io_error(&shown(path), &e))?;
    Ok(format!("deleted {path}"))
}

/// Whether `name` matches a glob with `*`, `?` and `[...]` classes (`!` or
/// `^` negates, `a-z` ranges). Linear backtracking: O(len(pattern) x
/// len(name)) whatever the pattern.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    // The class at p[i] ('['): whether c is in it, and the index after it.
    let class = |i: usize, c: char| -> Option<(bool, usize)> {
        let close = p[i + 1..]
            .iter()
            .position(|&x| x == ']')
            .map(|k| k + i + 1)?;
        let mut body = &p[i + 1..close];
        if body.is_empty() {
            return None;
        }
        let neg = matches!(body[0], '!' | '^');
        if neg {
            body = &body[1..];
        }
        let mut hit = false;
        let mut k = 0;
        while k < body.len() {
            if k + 2 < body.len() && body[k + 1] == '-' {
                hit |= body[k] <= c && c <= body[k + 2];
                k += 3;
            } else {
                hit |= body[k] == c;
                k += 1;
            }
        }
        Some((hit != neg, close + 1))
    };
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() {
            match p[pi] {
                '*' => {
                    star = Some((pi, ni));
                    pi += 1;
                    continue;
                }
                '?' => {
                    pi += 1;
                    ni += 1;
                    continue;
                }
                '[' => match class(pi, n[ni]) {
                    Some((true, next)) => {
                        pi = next;
                        ni += 1;
                        continue;
                    }
                    Some((false, _)) => {}
                    None if n[ni] == '[' => {
                        pi += 1;
                        ni += 1;
                        continue;
                    }
                    None => {}
                },
                c if c == n[ni] => {
                    pi += 1;
                    ni += 1;
                    continue;
                }
                _ => {}
            }
        }
        match star {
            Some((sp, sn)) => {
                pi = sp + 1;
                ni = sn + 1;
                star = Some((sp, sn + 1));
            }
            None => return false,
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

/// `file_search`: files under `path` whose name matches `glob` and, if `text`
/// is given, lines containing it (`path:line: text`), up to `max_results`.
/// Bounded: the walk's limits, and `4 x max_read_bytes` of file content read.
pub fn search(
    dirs: &AllowedDirs,
    policy: &FsPolicy,
    path: &str,
    glob: Option<&str>,
    text: Option<&str>,
    max_results: usize,
) -> Result<String, FsError> {
    if glob.is_none() && text.is_none() {
        return Err(FsError::new(
            "invalid_request",
            "file_search needs a glob, a text, or both",
        ));
    }
    if glob.is_some_and(|g| g.chars().count() > MAX_GLOB) {
        return Err(FsError::new(
            "invalid_request",
            format!("file_search: the glob is longer than {MAX_GLOB} characters"),
        ));
    }
    let resolved = dirs.resolve(Path::new(path), None)?;
    let dir = dirs
        .open_dir(&resolved)
        .map_err(|e| io_error(&shown(path), &e))?;
    let mut results: Vec<String> = Vec::new();
    let mut budget = policy.max_read_bytes.saturating_mul(4);
    let mut stopped: Option<String> = None;
    let note = walk_tree(&dir, true, |d, rel, ft| {
        if results.len() >= max_results {
            stopped = Some(format!("[stopped at {max_results} results]"));
            return Ok(false);
        }
        if !ft.is_file() {
            return Ok(true);
        }
        let name = rel.file_name().unwrap_or_default();
        if let Some(g) = glob
            && !glob_match(g, &name.to_string_lossy())
        {
            return Ok(true);
        }
        let Some(needle) = text else {
            results.push(rel.to_string_lossy().into_owned());
            return Ok(true);
        };
        if budget == 0 {
            stopped = Some("[stopped: the search read its byte budget]".into());
            return Ok(false);
        }
        let mut opts = OpenOptions::new();
        opts.read(true);
        no_block(&mut opts, true);
        let Ok(f) = d.open_with(name, &opts) else {
            return Ok(true);
        };
        if !f.metadata().is_ok_and(|m| m.is_file()) {
            return Ok(true);
        }
        let mut bytes = Vec::new();
        f.take(budget.min(8 << 20)).read_to_end(&mut bytes)?;
        budget = budget.saturating_sub(bytes.len() as u64);
        if bytes.contains(&0) {
            return Ok(true);
        }
        let content = String::from_utf8_lossy(&bytes);
        for (i, line) in content.lines().enumerate() {
            if line.contains(needle) {
                let line: String = line.chars().take(300).collect();
                results.push(format!("{}:{}: {line}", rel.to_string_lossy(), i + 1));
                if results.len() >= max_results {
                    break;
                }
            }
        }
        Ok(true)
    })
    .map_err(|e| io_error(&shown(path), &e))?;
    let mut out = if results.is_empty() {
        "no matches".to_string()
    } else {
        results.join("\n")
    };
    for n in [stopped, note].into_iter().flatten() {
        out.push('\n');
        out.push_str(&n);
    }
    Ok(out)
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
