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
//! Nothing is written under a read-only allowed dir.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use cap_std::fs::{Dir, OpenOptions};

use crate::paths::{AllowedDirs, PathError, ResolvedPath};
use crate::policy::{Decision, write};

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
}

impl std::fmt::Display for FsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<PathError> for FsError {
    fn from(e: PathError) -> Self {
        let kind = match e {
            PathError::Outside(_) => "permission_denied",
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
}

/// A resolved path with the handle of its parent directory and its final
/// name (for writes, moves and deletes, which act on the name).
struct Target {
    parent: Dir,
    name: PathBuf,
    resolved: ResolvedPath,
}

fn shown(p: &str) -> String {
    format!("{p:?}")
}

/// The parent directory handle and final name of a resolved path.
fn target(dirs: &AllowedDirs, path: &str) -> Result<Target, FsError> {
    let resolved = dirs.resolve(Path::new(path), None)?;
    let rel = resolved.relative().to_path_buf();
    let name = match rel.components().next_back() {
        Some(Component::Normal(n)) => PathBuf::from(n),
        _ => {
            return Err(FsError::new(
                "invalid_request",
                format!(
                    "{}: is an allowed dir itself, not a file in it",
                    shown(path)
                ),
            ));
        }
    };
    let root = dirs.dir_of(&resolved);
    let parent = match rel.parent() {
        Some(p) if !p.as_os_str().is_empty() => root.open_dir(p),
        _ => root.try_clone(),
    }
    .map_err(|e| io_error(&shown(path), &e))?;
    Ok(Target {
        parent,
        name,
        resolved,
    })
}

fn writable(t: &Target, path: &str) -> Result<(), FsError> {
    if t.resolved.read_only() {
        return Err(FsError::new(
            "permission_denied",
            format!("{}: the allowed dir is read-only", shown(path)),
        ));
    }
    Ok(())
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
    let t = target(dirs, path)?;
    let mut file = t
        .parent
        .open(&t.name)
        .map_err(|e| io_error(&shown(path), &e))?;
    let meta = file.metadata().map_err(|e| io_error(&shown(path), &e))?;
    if meta.is_dir() {
        return Err(FsError::new(
            "invalid_request",
            format!("{}: is a directory (use file_list)", shown(path)),
        ));
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
    // Parents first: `target` needs the parent to exist.
    let resolved = dirs.resolve(Path::new(path), None)?;
    if resolved.read_only() {
        return Err(FsError::new(
            "permission_denied",
            format!("{}: the allowed dir is read-only", shown(path)),
        ));
    }
    if let Some(parent) = resolved.relative().parent()
        && !parent.as_os_str().is_empty()
    {
        dirs.dir_of(&resolved)
            .create_dir_all(parent)
            .map_err(|e| io_error(&shown(path), &e))?;
    }
    let t = target(dirs, path)?;
    writable(&t, path)?;
    check_extension(&t, policy)?;
    let existing = match t.parent.symlink_metadata(&t.name) {
        Ok(m) if m.is_dir() => {
            return Err(FsError::new(
                "invalid_request",
                format!("{}: is a directory", shown(path)),
            ));
        }
        Ok(m) if m.is_file() => m.len(),
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
        // Appends go to the file itself, never through a symlink.
        let is_link = t
            .parent
            .symlink_metadata(&t.name)
            .is_ok_and(|m| m.file_type().is_symlink());
        if is_link {
            return Err(FsError::new(
                "permission_denied",
                format!("{}: is a symlink; append refused", shown(path)),
            ));
        }
        let mut opts = OpenOptions::new();
        opts.append(true).create(true);
        let mut f = t
            .parent
            .open_with(&t.name, &opts)
            .map_err(|e| io_error(&shown(path), &e))?;
        f.write_all(content)
            .map_err(|e| io_error(&shown(path), &e))?;
        return Ok(format!("appended {} bytes to {path}", content.len()));
    }
    let tmp = PathBuf::from(format!(
        ".{}.toolhost-{}-{}.tmp",
        t.name.to_string_lossy(),
        std::process::id(),
        TMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let mut opts = OpenOptions::new();
    opts.write(true).create_new(true);
    let result = (|| {
        let mut f = t.parent.open_with(&tmp, &opts)?;
        f.write_all(content)?;
        f.sync_all()?;
        t.parent.rename(&tmp, &t.parent, &t.name)
    })();
    if let Err(e) = result {
        let _ = t.parent.remove_file(&tmp);
        return Err(io_error(&shown(path), &e));
    }
    Ok(format!("wrote {} bytes to {path}", content.len()))
}

/// `file_list`: the entries of a directory (recursively up to `max_entries`).
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
    let mut truncated = false;
    walk(
        &dir,
        PathBuf::new(),
        recursive,
        max_entries,
        &mut out,
        &mut truncated,
    )
    .map_err(|e| io_error(&shown(path), &e))?;
    out.sort();
    let mut text = out.join("\n");
    if truncated {
        text.push_str(&format!("\n[truncated at {max_entries} entries]"));
    }
    Ok(text)
}

fn walk(
    dir: &Dir,
    prefix: PathBuf,
    recursive: bool,
    max: usize,
    out: &mut Vec<String>,
    truncated: &mut bool,
) -> std::io::Result<()> {
    for entry in dir.entries()? {
        let entry = entry?;
        if out.len() >= max {
            *truncated = true;
            return Ok(());
        }
        let name = prefix.join(entry.file_name());
        let ft = entry.file_type()?;
        let shown = name.to_string_lossy();
        if ft.is_dir() {
            out.push(format!("{shown}/"));
            if recursive {
                let sub = entry.open_dir()?;
                walk(&sub, name, recursive, max, out, truncated)?;
            }
        } else if ft.is_symlink() {
            out.push(format!("{shown}@"));
        } else {
            let len = entry.metadata().map(|m| m.len()).unwrap_or(0);
            out.push(format!("{shown}\t{len}"));
        }
    }
    Ok(())
}

/// `file_stat`: type, size, read-only, and modification time.
pub fn stat(dirs: &AllowedDirs, path: &str) -> Result<serde_json::Value, FsError> {
    let resolved = dirs.resolve(Path::new(path), None)?;
    let root = dirs.dir_of(&resolved);
    let rel = resolved.relative();
    let meta = if rel.as_os_str().is_empty() {
        root.dir_metadata()
    } else {
        root.symlink_metadata(rel)
    }
    .map_err(|e| io_error(&shown(path), &e))?;
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
        "read_only": resolved.read_only() || meta.permissions().readonly(),
        "modified_unix": modified,
    }))
}

/// `file_mkdir`: creates a directory and its parents.
pub fn mkdir(dirs: &AllowedDirs, path: &str) -> Result<String, FsError> {
    let resolved = dirs.resolve(Path::new(path), None)?;
    if resolved.read_only() {
        return Err(FsError::new(
            "permission_denied",
            format!("{}: the allowed dir is read-only", shown(path)),
        ));
    }
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
    let dst = target(dirs, to)?;
    writable(&dst, to)?;
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
pub fn delete(dirs: &AllowedDirs, path: &str, recursive: bool) -> Result<String, FsError> {
    let t = target(dirs, path)?;
    writable(&t, path)?;
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
    let resolved = dirs.resolve(Path::new(path), None)?;
    let dir = dirs
        .open_dir(&resolved)
        .map_err(|e| io_error(&shown(path), &e))?;
    let mut results = Vec::new();
    let mut budget = policy.max_read_bytes.saturating_mul(4);
    search_in(
        &dir,
        PathBuf::new(),
        glob,
        text,
        max_results,
        &mut budget,
        &mut results,
    )
    .map_err(|e| io_error(&shown(path), &e))?;
    let full = results.len() >= max_results;
    let mut out = results.join("\n");
    if full {
        out.push_str(&format!("\n[stopped at {max_results} results]"));
    }
    if out.is_empty() {
        out = "no matches".into();
    }
    Ok(out)
}

fn search_in(
    dir: &Dir,
    prefix: PathBuf,
    glob: Option<&str>,
    text: Option<&str>,
    max: usize,
    budget: &mut u64,
    out: &mut Vec<String>,
) -> std::io::Result<()> {
    let mut entries: Vec<_> = dir.entries()?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        if out.len() >= max {
            return Ok(());
        }
        let name = entry.file_name();
        let rel = prefix.join(&name);
        let ft = entry.file_type()?;
        if ft.is_dir() {
            let sub = entry.open_dir()?;
            search_in(&sub, rel, glob, text, max, budget, out)?;
            continue;
        }
        if !ft.is_file() {
            continue;
        }
        if let Some(g) = glob
            && !glob_match(g, &name.to_string_lossy())
        {
            continue;
        }
        let Some(needle) = text else {
            out.push(rel.to_string_lossy().into_owned());
            continue;
        };
        if *budget == 0 {
            return Ok(());
        }
        let mut bytes = Vec::new();
        entry
            .open()?
            .take((*budget).min(8 << 20))
            .read_to_end(&mut bytes)?;
        *budget = budget.saturating_sub(bytes.len() as u64);
        if bytes.contains(&0) {
            continue;
        }
        let content = String::from_utf8_lossy(&bytes);
        for (i, line) in content.lines().enumerate() {
            if line.contains(needle) {
                let line: String = line.chars().take(300).collect();
                out.push(format!("{}:{}: {line}", rel.to_string_lossy(), i + 1));
                if out.len() >= max {
                    return Ok(());
                }
            }
        }
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
