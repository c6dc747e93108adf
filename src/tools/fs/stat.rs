//! `file_stat`: what a path is, without following a final symlink.

use std::path::Path;

use super::{FsError, io_error, shown, target};
use crate::paths::AllowedDirs;

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
