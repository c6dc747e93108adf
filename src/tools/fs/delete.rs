//! `file_delete`: a file, a symlink (not its target), or a directory.

use super::{Change, FsError, FsPolicy, io_error, refuse_protected, shown, target, writable};
use crate::paths::AllowedDirs;

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
