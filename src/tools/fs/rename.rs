//! `file_move`: a rename within the sandbox, both ends writable.

use super::{
    Change, FsError, FsErrorKind, FsPolicy, check_extension, io_error, refuse_protected, shown,
    target, writable,
};
use crate::paths::AllowedDirs;

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
            FsErrorKind::InvalidRequest,
            format!("{}: exists (set overwrite to replace it)", shown(to)),
        ));
    }
    src.parent
        .rename(&src.name, &dst.parent, &dst.name)
        .map_err(|e| io_error(&format!("{} -> {}", shown(from), shown(to)), &e))?;
    Ok(format!("moved {from} to {to}"))
}
