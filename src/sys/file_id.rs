//! A file's identity on the host, whatever name, link or spelling reaches it:
//! device and inode on Unix; volume serial number and file index on Windows,
//! where one file has many names (case, 8.3 short names, trailing dots,
//! `\\?\` prefixes, junctions). It is the pair wasmtime-wasi hashes into a
//! guest's preview-1 `ino` and preview-2 `metadata-hash`.
//!
//! Invariant: an identity is read from an open handle, never from a name
//! looked up twice; [`of_path`] opens once and reads the handle it got.

use std::path::Path;

/// A file's identity: `(device, inode)` on Unix, `(volume serial, file
/// index)` on Windows.
pub(crate) type FileId = (u64, u64);

/// The identity of the open file `f`.
pub(crate) fn of_file(f: &std::fs::File) -> std::io::Result<FileId> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt as _;
        f.metadata().map(|m| (m.dev(), m.ino()))
    }
    #[cfg(windows)]
    {
        windows::of_file(f)
    }
    #[cfg(not(any(unix, windows)))]
    {
        let _ = f;
        Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
    }
}

/// The identity of the open directory `d` (one `fstat` on Unix).
pub(crate) fn of_dir(d: &cap_std::fs::Dir) -> std::io::Result<FileId> {
    #[cfg(unix)]
    {
        use cap_std::fs::MetadataExt as _;
        d.dir_metadata().map(|m| (m.dev(), m.ino()))
    }
    #[cfg(not(unix))]
    {
        of_file(&d.try_clone()?.into_std_file())
    }
}

/// The identity of what `p` names, symlinks followed (a directory too).
pub(crate) fn of_path(p: &Path) -> std::io::Result<FileId> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt as _;
        std::fs::metadata(p).map(|m| (m.dev(), m.ino()))
    }
    #[cfg(windows)]
    {
        of_file(&windows::open_for_identity(p)?)
    }
    #[cfg(not(any(unix, windows)))]
    {
        let _ = p;
        Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
    }
}

/// Where the open file `f` is on the host, as the filesystem names it now:
/// long names, links and junctions resolved, a `\\?\` path.
#[cfg(windows)]
pub(crate) fn final_path(f: &std::fs::File) -> std::io::Result<std::path::PathBuf> {
    windows::final_path(f)
}

/// Where `p` leads on the host, as the filesystem names it now (see
/// [`final_path`]).
#[cfg(windows)]
pub(crate) fn final_path_of(p: &Path) -> std::io::Result<std::path::PathBuf> {
    final_path(&windows::open_for_identity(p)?)
}

/// The identity of the entry `p` names itself: a final symlink (or
/// junction) is not followed.
pub(crate) fn of_path_unfollowed(p: &Path) -> std::io::Result<FileId> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt as _;
        std::fs::symlink_metadata(p).map(|m| (m.dev(), m.ino()))
    }
    #[cfg(windows)]
    {
        of_file(&windows::open_meta(p, true)?)
    }
    #[cfg(not(any(unix, windows)))]
    {
        let _ = p;
        Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
    }
}

/// The identity of the entry `name` in the directory open as `dir`, not
/// followed; `Ok(None)` when there is none. On Windows one entry answers to
/// several names (an 8.3 short name such as `GIT~1`): whichever the name is,
/// this is the entry it finds, by a `\\?\` path (taken as written).
#[cfg(windows)]
pub(crate) fn of_entry(dir: &std::fs::File, name: &str) -> std::io::Result<Option<FileId>> {
    if name.is_empty() || name.contains(['/', '\\']) {
        return Ok(None);
    }
    match of_path_unfollowed(&final_path(dir)?.join(name)) {
        Ok(id) => Ok(Some(id)),
        Err(e) if is_missing(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether `e` says there is no such file (or no such dir on the way).
#[cfg(windows)]
fn is_missing(e: &std::io::Error) -> bool {
    // ERROR_FILE_NOT_FOUND, ERROR_PATH_NOT_FOUND, ERROR_INVALID_NAME.
    e.kind() == std::io::ErrorKind::NotFound || matches!(e.raw_os_error(), Some(2 | 3 | 123))
}

/// The name the entry `p` names (not followed) has on disk: for an 8.3
/// short name such as `GIT~1`, the long name it stands for. Read from a
/// handle on the entry (`\\?\` paths and paths of any length work), as the
/// last name of the path the filesystem gives it. `Ok(None)`: there is no
/// such entry; `Err`: there is one, and its name cannot be told.
#[cfg(windows)]
pub(crate) fn name_on_disk(p: &Path) -> std::io::Result<Option<std::ffi::OsString>> {
    let f = match windows::open_meta(p, true) {
        Ok(f) => f,
        Err(e) if is_missing(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    let real = final_path(&f)?;
    match real.file_name() {
        Some(n) => Ok(Some(n.to_os_string())),
        None => Err(std::io::Error::other("the entry's path has no name")),
    }
}

#[cfg(windows)]
mod windows {
    use std::os::windows::ffi::OsStringExt as _;
    use std::os::windows::fs::OpenOptionsExt as _;
    use std::os::windows::io::AsRawHandle as _;
    use std::path::{Path, PathBuf};

    use windows_sys::Win32::Storage::FileSystem::{
        BY_HANDLE_FILE_INFORMATION, FILE_FLAG_BACKUP_SEMANTICS, FILE_FLAG_OPEN_REPARSE_POINT,
        FILE_NAME_NORMALIZED, FILE_SHARE_DELETE, FILE_SHARE_READ, FILE_SHARE_WRITE,
        GetFileInformationByHandle, GetFinalPathNameByHandleW, VOLUME_NAME_DOS,
    };

    use super::FileId;

    pub(super) fn of_file(f: &std::fs::File) -> std::io::Result<FileId> {
        let mut info = BY_HANDLE_FILE_INFORMATION::default();
        // SAFETY: `f` owns an open handle for the duration of the call, and
        // `info` is a valid, writable BY_HANDLE_FILE_INFORMATION.
        if unsafe { GetFileInformationByHandle(f.as_raw_handle(), &mut info) } == 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok((
            u64::from(info.dwVolumeSerialNumber),
            (u64::from(info.nFileIndexHigh) << 32) | u64::from(info.nFileIndexLow),
        ))
    }

    /// `p` opened for its metadata only (no access rights, so no sharing
    /// conflict), a directory too; links followed unless `no_follow`.
    pub(super) fn open_meta(p: &Path, no_follow: bool) -> std::io::Result<std::fs::File> {
        let mut flags = FILE_FLAG_BACKUP_SEMANTICS;
        if no_follow {
            flags |= FILE_FLAG_OPEN_REPARSE_POINT;
        }
        std::fs::OpenOptions::new()
            .access_mode(0)
            .share_mode(FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE)
            .custom_flags(flags)
            .open(p)
    }

    pub(super) fn open_for_identity(p: &Path) -> std::io::Result<std::fs::File> {
        open_meta(p, false)
    }

    pub(super) fn final_path(f: &std::fs::File) -> std::io::Result<PathBuf> {
        let mut buf = vec![0u16; 512];
        loop {
            // SAFETY: `f` owns an open handle; the buffer is writable for
            // the length passed.
            let n = unsafe {
                GetFinalPathNameByHandleW(
                    f.as_raw_handle(),
                    buf.as_mut_ptr(),
                    buf.len() as u32,
                    FILE_NAME_NORMALIZED | VOLUME_NAME_DOS,
                )
            } as usize;
            if n == 0 {
                return Err(std::io::Error::last_os_error());
            }
            if n < buf.len() {
                buf.truncate(n);
                return Ok(PathBuf::from(std::ffi::OsString::from_wide(&buf)));
            }
            // Too small: `n` is the length needed, the NUL included.
            if n > 1 << 16 {
                return Err(std::io::Error::other("path too long"));
            }
            buf.resize(n, 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_has_one_identity_by_handle_and_by_path() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a.txt");
        std::fs::write(&a, "x").unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        let by_path = of_path(&a).unwrap();
        let by_handle = of_file(&std::fs::File::open(&a).unwrap()).unwrap();
        assert_eq!(by_path, by_handle);
        // Another file, and a directory, differ.
        std::fs::write(d.path().join("b.txt"), "x").unwrap();
        assert_ne!(of_path(&d.path().join("b.txt")).unwrap(), by_path);
        assert_ne!(of_path(&d.path().join("sub")).unwrap(), by_path);
        // The same dir by another spelling (`sub/.`) is the same file.
        assert_eq!(
            of_path(&d.path().join("sub")).unwrap(),
            of_path(&d.path().join("sub").join(".")).unwrap()
        );
        assert!(of_path(&d.path().join("missing")).is_err());
    }

    #[test]
    fn an_entry_is_itself_unfollowed() {
        let d = tempfile::tempdir().unwrap();
        let sub = d.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        assert_eq!(of_path_unfollowed(&sub).unwrap(), of_path(&sub).unwrap());
        #[cfg(unix)]
        {
            let l = d.path().join("l");
            std::os::unix::fs::symlink(&sub, &l).unwrap();
            assert_eq!(of_path(&l).unwrap(), of_path(&sub).unwrap());
            assert_ne!(of_path_unfollowed(&l).unwrap(), of_path(&sub).unwrap());
        }
    }

    #[cfg(windows)]
    #[test]
    fn an_entry_is_found_by_any_of_its_names() {
        let d = tempfile::tempdir().unwrap();
        let long = d.path().join("Long Directory Name");
        std::fs::create_dir(&long).unwrap();
        let dir = windows::open_meta(d.path(), false).unwrap();
        let want = of_path(&long).unwrap();
        assert_eq!(of_entry(&dir, "long directory name").unwrap(), Some(want));
        // Relative to a handle a name is taken as written (a `\\?\` path): a
        // trailing dot is its own name here. Some of wasmtime-wasi's calls
        // (rename) go through a plain Win32 path, which drops it: the guard
        // looks names up without it (`protect::win32_base`).
        assert_eq!(of_entry(&dir, "Long Directory Name.").unwrap(), None);
        assert_eq!(of_entry(&dir, "missing").unwrap(), None);
        assert_eq!(of_entry(&dir, "a/b").unwrap(), None);
        assert_eq!(name_on_disk(&d.path().join("missing")).unwrap(), None);
        assert_eq!(name_on_disk(&d.path().join("no/such")).unwrap(), None);
        let long_name = std::ffi::OsStr::new("Long Directory Name");
        assert_eq!(name_on_disk(&long).unwrap().as_deref(), Some(long_name));
        // By its 8.3 name, where the volume makes them, also in a `\\?\`
        // path and in one longer than MAX_PATH.
        let wide: Vec<u16> = {
            use std::os::windows::ffi::OsStrExt as _;
            long.as_os_str().encode_wide().chain([0]).collect()
        };
        let mut buf = vec![0u16; 1024];
        // SAFETY: a NUL-terminated path and a buffer of the length given.
        let n = unsafe {
            windows_sys::Win32::Storage::FileSystem::GetShortPathNameW(
                wide.as_ptr(),
                buf.as_mut_ptr(),
                buf.len() as u32,
            )
        } as usize;
        let short = std::path::PathBuf::from(String::from_utf16_lossy(&buf[..n.min(buf.len())]));
        if n > 0 && short.file_name() != Some(long_name) {
            let short_name = short.file_name().unwrap();
            let verbatim = std::fs::canonicalize(d.path()).unwrap();
            assert_eq!(
                name_on_disk(&verbatim.join(short_name)).unwrap().as_deref(),
                Some(long_name)
            );
            let deep = verbatim.join("d".repeat(200)).join("e".repeat(100));
            std::fs::create_dir_all(deep.join("Another Long Name")).unwrap();
            let mut buf = vec![0u16; 1024];
            let wide: Vec<u16> = {
                use std::os::windows::ffi::OsStrExt as _;
                deep.join("Another Long Name")
                    .as_os_str()
                    .encode_wide()
                    .chain([0])
                    .collect()
            };
            // SAFETY: as above.
            let n = unsafe {
                windows_sys::Win32::Storage::FileSystem::GetShortPathNameW(
                    wide.as_ptr(),
                    buf.as_mut_ptr(),
                    buf.len() as u32,
                )
            } as usize;
            let deep_short =
                std::path::PathBuf::from(String::from_utf16_lossy(&buf[..n.min(buf.len())]));
            if let Some(name) = deep_short.file_name().filter(|_| n > 0) {
                let got = name_on_disk(&deep.join(name));
                if std::fs::canonicalize(deep.join("Another Long Name")).is_ok() {
                    assert_eq!(
                        got.unwrap().as_deref(),
                        Some(std::ffi::OsStr::new("Another Long Name"))
                    );
                } else {
                    // Wine 8 names no handle past MAX_PATH (ERROR_MORE_DATA,
                    // std's canonicalize too): the name cannot be told, and
                    // that is an error, never the short name taken as is.
                    println!("this host gives no final path past MAX_PATH: {got:?}");
                    assert!(got.is_err(), "{got:?}");
                }
            }
        }
    }
}
