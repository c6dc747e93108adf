//! The mount namespace of a `direct` call (Linux): a read-only view of the
//! host, and its protected paths.
//!
//! The read-only view (`readonly_host`): every mount of the host is
//! read-only in the call's namespace but the places the call may write (its
//! writable allowed dirs and its private tmp), which are bind mounts of
//! themselves as the host has them. Landlock confines where a tool reads and
//! writes, but it has no right for a file's metadata: without this, a root
//! tool could chmod, chown, set times and extended attributes of any host
//! file it can name (`/etc/shadow` world-readable). On a read-only mount
//! each of those fails with EROFS. Writes that Landlock refuses fail with
//! EROFS too now (the mount is checked first).
//!
//! Protected paths: each protected path that exists is a read-only bind
//! mount of itself, and each directory on the way to one (and each symlink: a mount
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
const AT_RECURSIVE: libc::c_uint = 0x8000;
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

/// Most places a read-only view keeps writable (the supervisor holds their
/// trees in an array of this size: it cannot allocate).
pub(super) const MAX_WRITABLE: usize = 32;

/// A place kept writable in the read-only view: its path, and the device
/// and inode it must lead to.
#[derive(Debug, Clone)]
pub(super) struct Writable {
    path: CString,
    dev: u64,
    ino: u64,
}

impl Writable {
    /// The place at `path`, which must be the directory open as `fd`;
    /// `None` if it cannot be named or stat'ed.
    // `st_dev` and `st_ino` are `u64` on Linux, not on every Unix.
    #[allow(clippy::unnecessary_cast)]
    pub(super) fn of(path: &std::path::Path, fd: std::os::fd::BorrowedFd<'_>) -> Option<Self> {
        let st = rustix::fs::fstat(fd).ok()?;
        Some(Writable {
            path: CString::new(path.as_os_str().as_bytes()).ok()?,
            dev: st.st_dev as u64,
            ino: st.st_ino as u64,
        })
    }
}

/// The mounts of one call, prepared before the supervisor starts.
#[derive(Debug, Clone)]
pub(super) struct MountPlan {
    /// (place, read-only, a symlink itself), shallowest first.
    binds: Vec<(CString, bool, bool)>,
    /// The places kept writable in a read-only view of the host; `None`
    /// when the call gets no such view.
    writable: Option<Vec<Writable>>,
    /// The tool's working directory, by path.
    cwd: CString,
}

impl MountPlan {
    /// The mounts `plan` needs: the read-only view keeping `writable`
    /// writable (`None`: no view), and the protected paths that exist.
    /// `None` when it needs neither.
    pub(super) fn prepare(plan: &ExecPlan, writable: Option<Vec<Writable>>) -> Option<MountPlan> {
        let held = crate::backend::protect::held(plan);
        if held.is_empty() && writable.is_none() {
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
        Some(MountPlan {
            binds,
            writable,
            cwd,
        })
    }

    /// Whether the plan makes the read-only view of the host.
    pub(super) fn readonly_host(&self) -> bool {
        self.writable.is_some()
    }

    /// Whether the plan holds protected paths (some exist).
    pub(super) fn holds_paths(&self) -> bool {
        !self.binds.is_empty()
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
            if let Some(writable) = &self.writable {
                readonly_view(writable)?;
            }
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

/// Every mount of the namespace read-only, but `writable`: each is cloned
/// (with the mounts below it) as the host has it, before the rest is made
/// read-only, and put back over itself after. Each place must be the
/// directory `prepare` found, before and after.
///
/// # Safety
/// Only in the supervisor, in the call's new mount namespace: raw system
/// calls only.
unsafe fn readonly_view(writable: &[Writable]) -> Result<(), c_int> {
    let mut trees: [c_int; MAX_WRITABLE] = [-1; MAX_WRITABLE];
    // SAFETY: raw system calls on NUL-terminated strings owned by
    // `writable`, on fds opened here, and on a mount_attr on this stack.
    let r = unsafe {
        (|| {
            if writable.len() > MAX_WRITABLE {
                return Err(libc::E2BIG);
            }
            for (w, tree) in writable.iter().zip(trees.iter_mut()) {
                let fd = open_same_dir(w)?;
                let t = sys::call(
                    libc::SYS_open_tree,
                    [
                        fd as usize,
                        c"".as_ptr() as usize,
                        (OPEN_TREE_CLONE
                            | AT_RECURSIVE
                            | libc::O_CLOEXEC as libc::c_uint
                            | AT_EMPTY_PATH) as usize,
                        0,
                        0,
                        0,
                    ],
                );
                let _ = sys::close(fd);
                *tree = t? as c_int;
            }
            let attr = MountAttr {
                attr_set: MOUNT_ATTR_RDONLY,
                attr_clr: 0,
                propagation: 0,
                userns_fd: 0,
            };
            sys::call(
                libc::SYS_mount_setattr,
                [
                    libc::AT_FDCWD as usize,
                    c"/".as_ptr() as usize,
                    AT_RECURSIVE as usize,
                    &attr as *const MountAttr as usize,
                    std::mem::size_of::<MountAttr>(),
                    0,
                ],
            )?;
            for (w, &tree) in writable.iter().zip(trees.iter()) {
                let fd = open_same_dir(w)?;
                let r = move_over(tree, fd);
                let _ = sys::close(fd);
                r?;
            }
            Ok(())
        })()
    };
    for t in trees.into_iter().filter(|&t| t >= 0) {
        // SAFETY: an fd opened above.
        let _ = unsafe { sys::close(t) };
    }
    r
}

/// The directory `w` names, opened `O_PATH`, if it is the one `prepare`
/// found (else ESTALE). Symlinks on the way are followed (a `TMPDIR` may
/// have one): what counts is the directory reached, which is checked.
///
/// # Safety
/// Only in the supervisor: raw system calls only.
unsafe fn open_same_dir(w: &Writable) -> Result<c_int, c_int> {
    // SAFETY: the path is NUL-terminated; the stat buffer is on this stack.
    unsafe {
        let fd = sys::openat(
            libc::AT_FDCWD,
            w.path.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )? as c_int;
        let mut st: libc::stat = std::mem::zeroed();
        if sys::fstat(fd, &mut st).is_err()
            || st.st_dev as u64 != w.dev
            || st.st_ino as u64 != w.ino
        {
            let _ = sys::close(fd);
            return Err(libc::ESTALE);
        }
        Ok(fd)
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
        let r = move_over(tree, fd);
        let _ = sys::close(tree);
        r
    }
}

/// Attaches the detached mount tree `tree` over the place open as `fd`.
///
/// # Safety
/// Only in the supervisor: raw system calls only; both fds are open.
unsafe fn move_over(tree: c_int, fd: c_int) -> Result<(), c_int> {
    // SAFETY: the empty paths are NUL-terminated literals; the fds are open
    // (the caller's contract).
    unsafe {
        sys::call(
            libc::SYS_move_mount,
            [
                tree as usize,
                c"".as_ptr() as usize,
                fd as usize,
                c"".as_ptr() as usize,
                (MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) as usize,
                0,
            ],
        )
        .map(|_| ())
    }
}
