//! `file_list` and the bounded tree walk it shares with `file_search`.

use std::path::{Path, PathBuf};

use cap_std::fs::Dir;

use super::{FsError, io_error, shown};
use crate::paths::AllowedDirs;

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
pub(super) fn walk_tree(
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
