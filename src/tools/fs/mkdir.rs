//! `file_mkdir`: a directory and its parents, inside a writable allowed dir.

use std::path::Path;

use super::{Change, FsError, FsPolicy, READ_ONLY, io_error, refuse_protected, shown};
use crate::paths::AllowedDirs;

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
