//! `file_write`: a file replaced atomically through a temporary file in its
//! own directory, or appended to.

use std::io::Write;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use cap_std::fs::OpenOptions;

use super::{
    Change, FsError, FsErrorKind, FsPolicy, READ_ONLY, check_extension, io_error, no_block,
    not_regular, refuse_protected, shown, target, writable,
};
use crate::paths::AllowedDirs;
use crate::policy::{Decision, write};

pub(super) static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

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
            kind: FsErrorKind::Policy,
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
                FsErrorKind::InvalidRequest,
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
            kind: FsErrorKind::TooLarge,
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
                    FsErrorKind::PermissionDenied,
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
                kind: FsErrorKind::TooLarge,
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
