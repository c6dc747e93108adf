//! Protected paths of a `direct` call (Linux): a mount namespace of the call
//! in which each protected path that exists is a read-only bind mount of
//! itself, and each directory on the way to one (and each symlink: a mount
//! can cover a symlink too) is a bind mount of itself (`backend::protect`). A mount point cannot be renamed, removed or
//! replaced, and writes under a read-only one fail with EROFS, whatever
//! Landlock allows. The tool cannot undo them: the seccomp filter refuses
//! every mount call, and root tools lose CAP_SYS_ADMIN.
//!
//! Split like `harden`: [`MountPlan::prepare`] runs in toolhost and finds the
//! places (with every other path to them through bind mounts of their
//! filesystem); [`MountPlan::apply`] runs in the supervisor and only makes
//! raw system calls (`sys`). Each place is opened with `openat2` and
//! `RESOLVE_NO_SYMLINKS`, so a symlink swapped in after `prepare` makes the
//! call fail instead of moving a mount; the mounts are made through fds with
//! the new mount API (`open_tree`, `mount_setattr`, `move_mount`), read-only
//! before they are attached. The tool's working directory is reopened in the
//! new namespace (an fd opened before it refers to the old one, where the
//! mounts do not exist) and must be the same directory.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt as _;

use libc::c_int;

use super::sys;
use crate::plan::ExecPlan;

const OPEN_TREE_CLONE: libc::c_uint = 1;
const AT_EMPTY_PATH: libc::c_uint = 0x1000;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x40;
const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const RESOLVE_NO_MAGICLINKS: u64 = 0x2;
const RESOLVE_NO_SYMLINKS: u64 = 0x4;

#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// The mounts of one call, prepared before the supervisor starts.
#[derive(Debug, Clone)]
pub(super) struct MountPlan {
    /// (place, read-only, a symlink itself), shallowest first.
    binds: Vec<(CString, bool, bool)>,
    /// The tool's working directory, by path.
    cwd: CString,
}

impl MountPlan {
    /// The mounts `plan` needs; `None` when no protected path exists.
    pub(super) fn prepare(plan: &ExecPlan) -> Option<MountPlan> {
        let held = crate::backend::protect::held(plan);
        if held.is_empty() {
            return None;
        }
        let mut binds: Vec<(CString, bool, bool)> = Vec::new();
        for h in &held {
            let mut places = vec![h.source.clone()];
            places.extend(crate::reach::mount_aliases(&h.source));
            for p in places {
                // A path with a NUL byte cannot exist.
                if let Ok(c) = CString::new(p.as_os_str().as_bytes())
                    && !binds.iter().any(|(b, _, l)| *b == c && *l == h.link)
                {
                    binds.push((c, h.read_only, h.link));
                }
            }
        }
        binds.sort_by_key(|(c, _, _)| c.as_bytes().iter().filter(|&&b| b == b'/').count());
        let cwd = CString::new(plan.cwd.as_ref()?.path.as_os_str().as_bytes()).ok()?;
        Some(MountPlan { binds, cwd })
    }

    /// In the supervisor, before the tool is created: a new mount namespace
    /// (slave to toolhost's, so nothing here reaches the host) with the
    /// mounts, and `cwd_fd` replaced by the same directory opened in it.
    /// `Err` is the errno, and whether the namespace was made: once it is,
    /// a failure leaves the call half protected (or its cwd in toolhost's
    /// namespace, where nothing is mounted), so the caller must not run it.
    ///
    /// # Safety
    /// Only in the supervisor (raw system calls only); `cwd_fd` is open.
    pub(super) unsafe fn apply(&self, cwd_fd: c_int) -> Result<(), (c_int, bool)> {
        // SAFETY: unshare takes no pointers; `make` has the same contract.
        unsafe {
            sys::unshare(libc::CLONE_NEWNS).map_err(|e| (e, false))?;
            self.make(cwd_fd).map_err(|e| (e, true))
        }
    }

    /// The mounts and the cwd, in the new namespace.
    ///
    /// # Safety
    /// As [`apply`](Self::apply), after `unshare(CLONE_NEWNS)`.
    unsafe fn make(&self, cwd_fd: c_int) -> Result<(), c_int> {
        // SAFETY: only system calls on NUL-terminated strings owned by `self`
        // or literals, on fds opened here or `cwd_fd` (open by the caller's
        // contract), and on stat buffers on this stack.
        unsafe {
            sys::call(
                libc::SYS_mount,
                [
                    0,
                    c"/".as_ptr() as usize,
                    0,
                    (libc::MS_REC | libc::MS_SLAVE) as usize,
                    0,
                    0,
                ],
            )?;
            for (place, read_only, link) in &self.binds {
                // A symlink itself: O_PATH | O_NOFOLLOW opens the link (the
                // one symlink openat2 then allows), and the mount covers it.
                let flags = if *link {
                    libc::O_PATH | libc::O_NOFOLLOW
                } else {
                    libc::O_PATH
                };
                let fd = match open_no_symlinks(place, flags) {
                    Ok(fd) => fd,
                    // Gone since `prepare`: nothing there to protect. An
                    // alias hidden under another mount is not reachable.
                    Err(libc::ENOENT) => continue,
                    Err(e) => return Err(e),
                };
                let r = bind_over(fd, *read_only);
                let _ = sys::close(fd);
                r?;
            }
            let new = match open_no_symlinks(&self.cwd, libc::O_PATH | libc::O_DIRECTORY) {
                Ok(fd) => fd,
                // A symlink in the cwd's own path (the plan keeps the path
                // it was given): follow it, then compare identities.
                Err(_) => sys::openat(
                    libc::AT_FDCWD,
                    self.cwd.as_ptr(),
                    libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
                )? as c_int,
            };
            let mut a: libc::stat = std::mem::zeroed();
            let mut b: libc::stat = std::mem::zeroed();
            if sys::fstat(cwd_fd, &mut a).is_err()
                || sys::fstat(new, &mut b).is_err()
                || a.st_dev != b.st_dev
                || a.st_ino != b.st_ino
            {
                let _ = sys::close(new);
                return Err(libc::ESTALE);
            }
            let r = sys::dup3(new, cwd_fd, libc::O_CLOEXEC);
            let _ = sys::close(new);
            r?;
            Ok(())
        }
    }
}

/// `openat2(AT_FDCWD, path, flags | O_CLOEXEC)` refusing every symlink.
///
/// # Safety
/// Only in the supervisor before the tool exists: raw system calls only.
unsafe fn open_no_symlinks(path: &CString, flags: c_int) -> Result<c_int, c_int> {
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: `path` is NUL-terminated and `how` is a valid open_how of the
    // size passed; the kernel only reads both.
    unsafe {
        sys::call(
            libc::SYS_openat2,
            [
                libc::AT_FDCWD as usize,
                path.as_ptr() as usize,
                &how as *const OpenHow as usize,
                std::mem::size_of::<OpenHow>(),
                0,
                0,
            ],
        )
        .map(|fd| fd as c_int)
    }
}

/// Mounts the place open as `fd` over itself, read-only (and nosuid, nodev)
/// or as it is.
///
/// # Safety
/// Only in the supervisor before the tool exists: raw system calls only.
unsafe fn bind_over(fd: c_int, read_only: bool) -> Result<(), c_int> {
    // SAFETY: every pointer passed is a NUL-terminated literal or a valid
    // mount_attr of the size passed; the fds are open.
    unsafe {
        let tree = sys::call(
            libc::SYS_open_tree,
            [
                fd as usize,
                c"".as_ptr() as usize,
                (OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | AT_EMPTY_PATH) as usize,
                0,
                0,
                0,
            ],
        )? as c_int;
        if read_only {
            let attr = MountAttr {
                attr_set: MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                attr_clr: 0,
                propagation: 0,
                userns_fd: 0,
            };
            if let Err(e) = sys::call(
                libc::SYS_mount_setattr,
                [
                    tree as usize,
                    c"".as_ptr() as usize,
                    AT_EMPTY_PATH as usize,
                    &attr as *const MountAttr as usize,
                    std::mem::size_of::<MountAttr>(),
                    0,
                ],
            ) {
                let _ = sys::close(tree);
                return Err(e);
            }
        }
        let r = sys::call(
            libc::SYS_move_mount,
            [
                tree as usize,
                c"".as_ptr() as usize,
                fd as usize,
                c"".as_ptr() as usize,
                (MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) as usize,
                0,
            ],
        );
        let _ = sys::close(tree);
        r.map(|_| ())
    }
}
