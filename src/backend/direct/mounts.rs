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
//! Read-only allowed dirs a writable one reaches (nested in it, by its own
//! path or through a bind mount: Landlock's rights follow the directory,
//! whatever path leads to it) are read-only bind mounts of themselves, by
//! each such path, with the mounts below them; the directories between the
//! writable dir and each are pinned (bind mounts of themselves), so that
//! none can be moved away and replaced; a writable place nested in one is
//! cloned before and put back after, like the view's writable places.
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
use crate::isolation::Layer;
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
#[derive(Debug, Clone, PartialEq, Eq)]
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

/// Why a call's mount namespace could not be made: the errno, the layer
/// that failed, and whether the namespace exists (half made).
#[derive(Debug, Clone, Copy)]
pub(super) struct MountFailure {
    pub errno: c_int,
    pub layer: Layer,
    pub made: bool,
}

/// A bind mount of a place over itself, with the mounts below it (a clone
/// without them would hide them, and in a user namespace the kernel
/// refuses one that would uncover what a mount covers).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Bind {
    place: CString,
    /// Read-only (and nosuid, nodev), or as it is (a pin).
    read_only: bool,
    /// The place is a symlink, and the mount covers the link itself.
    link: bool,
    /// The device and inode the place must be (`None`: a place that is
    /// something else now is held as it is).
    expect: Option<(u64, u64)>,
    /// The place must still be there: a protected path (or a link or dir on
    /// the way to one) that existed at the call's look is not in its sweep
    /// of missing names, so if it is gone the call must not run. Not so for
    /// another path to it (through a host bind mount), which another mount
    /// may hide.
    required: bool,
}

impl Bind {
    /// How its place is opened: a symlink itself with `O_PATH |
    /// O_NOFOLLOW` (the one symlink openat2 then allows; the mount covers
    /// the link), else `O_PATH`.
    fn open_flags(&self) -> c_int {
        if self.link {
            libc::O_PATH | libc::O_NOFOLLOW
        } else {
            libc::O_PATH
        }
    }
}

/// One mount made in the call's namespace, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    /// The tree of `writable[i]`, cloned before anything was made
    /// read-only, put back over its place.
    Keep(usize),
    Bind(Bind),
}

/// The mounts of one call, prepared before the supervisor starts.
#[derive(Debug, Clone)]
pub(super) struct MountPlan {
    /// The places kept writable under what is made read-only: each is
    /// cloned first and put back by its [`Step::Keep`].
    writable: Vec<Writable>,
    /// Whether every host mount is made read-only (the view of the host)
    /// before the steps.
    view: bool,
    /// The mounts, shallowest first (a place is put back before anything
    /// is mounted below it).
    steps: Vec<Step>,
    /// The tool's working directory, by path.
    cwd: CString,
}

impl MountPlan {
    /// The mounts `plan` needs, from `places`, the places it may write (its
    /// writable allowed dirs and private tmp):
    /// - with `view`, the read-only view of the host keeping `places`
    ///   writable;
    /// - each read-only allowed dir that a writable one reaches, by every
    ///   path to it that lies in a writable dir (its own, or another
    ///   through the host's bind mounts: Landlock's rights follow the
    ///   directory, not the path), read-only with what is below it; the
    ///   directories between the writable dir and it pinned (a mount of
    ///   themselves, so that it cannot be moved away and another put in its
    ///   place); and, without the view, the places in it kept writable;
    /// - the protected paths that exist, as the call's one look found them
    ///   (`held`, from `backend::protect::look`).
    ///
    /// `None` when it needs none of these; `Err` when more places must be
    /// kept writable than the supervisor can hold.
    pub(super) fn prepare(
        plan: &ExecPlan,
        places: Vec<Writable>,
        view: bool,
        held: Vec<crate::backend::protect::Held>,
    ) -> Result<Option<MountPlan>, String> {
        use std::os::fd::AsFd as _;
        let cstr = |p: &std::path::Path| CString::new(p.as_os_str().as_bytes()).ok();
        // Every path to a writable dir: its own, and each through a bind
        // mount of it or of a dir above it (Landlock's rights follow the
        // directory whatever path reaches it).
        // The mount table, read once, and only when there is a read-only
        // dir that a writable one may reach or a protected path to hold.
        let any_ro = plan.mounts.iter().any(|m| m.read_only);
        let any_rw = plan.mounts.iter().any(|m| !m.read_only);
        let table = if (any_ro && any_rw) || !held.is_empty() {
            crate::reach::mount_table()
        } else {
            Vec::new()
        };
        let aliases = |p: &std::path::Path| crate::reach::mount_aliases_in(&table, p);
        let mut roots: Vec<std::path::PathBuf> = Vec::new();
        if any_ro {
            for m in plan.mounts.iter().filter(|m| !m.read_only) {
                roots.push(m.path.clone());
                roots.extend(aliases(&m.path));
            }
        }
        let in_writable = |p: &std::path::Path| roots.iter().any(|r| p.starts_with(r));
        // The shallowest of those that `p` lies strictly in.
        let outermost = |p: &std::path::Path| {
            roots
                .iter()
                .filter(|r| p != r.as_path() && p.starts_with(r))
                .min_by_key(|r| r.components().count())
                .cloned()
        };
        let mut binds: Vec<Bind> = Vec::new();
        let add = |binds: &mut Vec<Bind>, b: Bind| match binds
            .iter_mut()
            .find(|o| o.place == b.place && o.link == b.link)
        {
            Some(o) => {
                o.read_only |= b.read_only;
                o.expect = o.expect.or(b.expect);
                o.required |= b.required;
            }
            None => binds.push(b),
        };
        // Read-only allowed dirs a writable one reaches.
        let mut held_ro: Vec<std::path::PathBuf> = Vec::new();
        for (m, (path, dir)) in plan.mounts.iter().zip(plan.mount_dirs.iter()) {
            if !m.read_only || !any_rw {
                continue;
            }
            let Some(me) = Writable::of(path, dir.as_fd()) else {
                return Err(format!(
                    "the read-only dir {} cannot be named",
                    path.display()
                ));
            };
            let mut ways = vec![path.clone()];
            ways.extend(aliases(path));
            for (i, way) in ways.into_iter().enumerate() {
                if !in_writable(&way) {
                    continue;
                }
                let Some(place) = cstr(&way) else { continue };
                add(
                    &mut binds,
                    Bind {
                        place,
                        read_only: true,
                        link: false,
                        // Its own path must lead to it; another that no
                        // longer does (a mount over it) is no way in.
                        expect: (i == 0).then_some((me.dev, me.ino)),
                        required: false,
                    },
                );
                if let Some(outer) = outermost(&way) {
                    let mut cur = way.clone();
                    while cur.pop() && cur != outer && cur.starts_with(&outer) {
                        if let Some(place) = cstr(&cur) {
                            add(
                                &mut binds,
                                Bind {
                                    place,
                                    read_only: false,
                                    link: false,
                                    expect: None,
                                    required: false,
                                },
                            );
                        }
                    }
                }
                held_ro.push(way);
            }
        }
        for h in held {
            let mut ways = vec![h.source.clone()];
            ways.extend(aliases(&h.source));
            for (i, p) in ways.into_iter().enumerate() {
                // A path with a NUL byte cannot exist.
                if let Some(place) = cstr(&p) {
                    add(
                        &mut binds,
                        Bind {
                            place,
                            read_only: h.read_only,
                            link: h.link,
                            // What the look found (the sweep after the
                            // call walks from it): nothing else is held.
                            expect: if i == 0 {
                                h.id.map(|s| (s.dev, s.ino))
                            } else {
                                None
                            },
                            required: i == 0,
                        },
                    );
                }
            }
        }
        // The places kept writable: every one under the view; else those
        // in a read-only dir held above.
        let writable: Vec<Writable> = if view {
            places
        } else {
            places
                .into_iter()
                .filter(|w| {
                    let p = std::path::Path::new(std::ffi::OsStr::from_bytes(w.path.as_bytes()));
                    held_ro.iter().any(|r| p != r && p.starts_with(r))
                })
                .collect()
        };
        if writable.len() > MAX_WRITABLE {
            return Err(format!(
                "{} writable places inside read-only ones, more than the {MAX_WRITABLE} a call's mount namespace keeps",
                writable.len()
            ));
        }
        if binds.is_empty() && !view {
            return Ok(None);
        }
        let depth = |c: &CString| c.as_bytes().iter().filter(|&&b| b == b'/').count();
        let mut steps: Vec<(usize, Step)> = (0..writable.len())
            .map(|i| (depth(&writable[i].path), Step::Keep(i)))
            .collect();
        steps.extend(binds.into_iter().map(|b| (depth(&b.place), Step::Bind(b))));
        // Stable: at one depth a place is put back before it is bound over.
        steps.sort_by_key(|(d, _)| *d);
        let Some(cwd) = plan.cwd.as_ref().and_then(|c| cstr(&c.path)) else {
            return Ok(None);
        };
        Ok(Some(MountPlan {
            writable,
            view,
            steps: steps.into_iter().map(|(_, s)| s).collect(),
            cwd,
        }))
    }

    /// Whether the plan makes the read-only view of the host.
    pub(super) fn readonly_host(&self) -> bool {
        self.view
    }

    /// Whether the plan holds paths (protected paths, or read-only allowed
    /// dirs nested in writable ones, exist).
    pub(super) fn holds_paths(&self) -> bool {
        self.steps.iter().any(|s| matches!(s, Step::Bind(_)))
    }

    /// Whether `other` makes the same mounts (its cwd aside): the same
    /// places kept writable, each the same directory, the same view, the
    /// same steps with the same identities expected.
    pub(super) fn same_mounts(&self, other: &MountPlan) -> bool {
        self.writable == other.writable && self.view == other.view && self.steps == other.steps
    }

    /// In the supervisor, before the tool is created: a new mount namespace
    /// (slave to toolhost's, so nothing here reaches the host) with the
    /// mounts, and `cwd_fd` replaced by the same directory opened in it.
    /// On failure, the errno, the layer that failed and whether the
    /// namespace was made: once it is, a failure leaves the call half
    /// protected (or its cwd in toolhost's namespace, where nothing is
    /// mounted), so the caller must not run it.
    ///
    /// # Safety
    /// Only in the supervisor (raw system calls only); `cwd_fd` is open.
    pub(super) unsafe fn apply(&self, cwd_fd: c_int) -> Result<(), MountFailure> {
        // SAFETY: the contract of both.
        unsafe {
            self.apply_mounts()?;
            let mut want: libc::stat = std::mem::zeroed();
            let r = match sys::fstat(cwd_fd, &mut want) {
                Ok(_) => self.enter_cwd((want.st_dev as u64, want.st_ino as u64)),
                Err(e) => Err((e, self.first_layer())),
            };
            r.and_then(|new| {
                let r = sys::dup3(new, cwd_fd, libc::O_CLOEXEC);
                let _ = sys::close(new);
                r.map(|_| ()).map_err(|e| (e, self.first_layer()))
            })
            .map_err(|(errno, layer)| MountFailure {
                errno,
                layer,
                made: true,
            })
        }
    }

    /// The mount namespace and its mounts, without the cwd (a supervisor
    /// made ahead of its call, which learns its cwd later:
    /// [`enter_cwd`](Self::enter_cwd)).
    ///
    /// # Safety
    /// Only in the supervisor (raw system calls only).
    pub(super) unsafe fn apply_mounts(&self) -> Result<(), MountFailure> {
        // SAFETY: unshare takes no pointers; `make` has the same contract.
        unsafe {
            sys::unshare(libc::CLONE_NEWNS).map_err(|errno| MountFailure {
                errno,
                layer: self.first_layer(),
                made: false,
            })?;
            self.make().map_err(|(errno, layer)| MountFailure {
                errno,
                layer,
                made: true,
            })
        }
    }

    /// The layer a namespace that could not be made fails first.
    fn first_layer(&self) -> Layer {
        if self.readonly_host() {
            Layer::ReadonlyHost
        } else {
            Layer::ProtectedPaths
        }
    }

    /// The mounts, in the new namespace.
    ///
    /// # Safety
    /// As [`apply`](Self::apply), after `unshare(CLONE_NEWNS)`.
    unsafe fn make(&self) -> Result<(), (c_int, Layer)> {
        // SAFETY: only system calls on a literal and on fds opened here
        // (`mounts` has the same contract).
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
            )
            .map_err(|e| (e, self.first_layer()))?;
            let mut trees: [c_int; MAX_WRITABLE] = [-1; MAX_WRITABLE];
            let r = self.mounts(&mut trees);
            for t in trees.into_iter().filter(|&t| t >= 0) {
                let _ = sys::close(t);
            }
            r
        }
    }

    /// In a namespace made ahead of its call, at the call: each place kept
    /// writable is still the directory planned at its path, each held
    /// place that must be a given file or directory still is, and each is
    /// still the root of a mount (a host process may have moved one away
    /// and made another at its path since the mounts were made, or moved
    /// the same one out from under a pinned directory and back: the mount
    /// stays where it was). The checks `make` made, made again now, and
    /// the mounts' places; `Err` as they fail there (ENOTSUP where the
    /// kernel cannot say what a mount's root is).
    ///
    /// # Safety
    /// Only in the supervisor, in the call's namespace (after the mounts):
    /// raw system calls only.
    pub(super) unsafe fn recheck(&self) -> Result<(), (c_int, Layer)> {
        // SAFETY: system calls on NUL-terminated strings owned by `self`,
        // on fds opened here and on stat buffers on this stack.
        unsafe {
            for w in &self.writable {
                let fd = open_same_dir(w).map_err(|e| (e, self.first_layer()))?;
                let root = sys::is_mount_root(fd);
                let _ = sys::close(fd);
                match root {
                    Ok(true) => {}
                    Ok(false) => return Err((libc::ESTALE, self.first_layer())),
                    Err(e) => return Err((e, self.first_layer())),
                }
            }
            for step in &self.steps {
                let Step::Bind(b) = step else { continue };
                let fd = match open_no_symlinks(&b.place, b.open_flags()) {
                    Ok(fd) => fd,
                    // As `mounts`: an alias hidden under another mount.
                    Err(libc::ENOENT) if b.expect.is_none() && !b.required => continue,
                    Err(e) => return Err((e, Layer::ProtectedPaths)),
                };
                let mut st: libc::stat = std::mem::zeroed();
                let same = sys::fstat(fd, &mut st).is_ok()
                    && b.expect.is_none_or(|(dev, ino)| {
                        st.st_dev as u64 == dev && st.st_ino as u64 == ino
                    });
                let root = sys::is_mount_root(fd);
                let _ = sys::close(fd);
                match root {
                    Ok(true) if same => {}
                    Ok(_) => return Err((libc::ESTALE, Layer::ProtectedPaths)),
                    Err(e) => return Err((e, Layer::ProtectedPaths)),
                }
            }
            Ok(())
        }
    }

    /// Whether a supervisor may be made ahead with this plan: the view,
    /// and every held place one that must be a given file or directory
    /// (no pins and no aliases, which are held as they are found).
    pub(super) fn ahead_ok(&self) -> bool {
        self.view
            && self
                .steps
                .iter()
                .all(|s| !matches!(s, Step::Bind(b) if b.expect.is_none()))
    }

    /// The plan's cwd opened (`O_PATH`) in this namespace, which must be
    /// the directory `want` (device, inode) names: the working directory is
    /// the namespace's as a whole. Close-on-exec, for the tool to enter.
    ///
    /// # Safety
    /// Only in the supervisor, in the call's namespace (after the mounts):
    /// raw system calls only.
    pub(super) unsafe fn enter_cwd(&self, want: (u64, u64)) -> Result<c_int, (c_int, Layer)> {
        let whole = |e| (e, self.first_layer());
        // SAFETY: system calls on a NUL-terminated string owned by `self`,
        // on an fd opened here and on a stat buffer on this stack.
        unsafe {
            let new = match open_no_symlinks(&self.cwd, libc::O_PATH | libc::O_DIRECTORY) {
                Ok(fd) => fd,
                // A symlink in the cwd's own path (the plan keeps the path
                // it was given): follow it, then compare identities.
                Err(_) => sys::openat(
                    libc::AT_FDCWD,
                    self.cwd.as_ptr(),
                    libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
                )
                .map_err(whole)? as c_int,
            };
            let mut b: libc::stat = std::mem::zeroed();
            if sys::fstat(new, &mut b).is_err()
                || b.st_dev as u64 != want.0
                || b.st_ino as u64 != want.1
            {
                let _ = sys::close(new);
                return Err(whole(libc::ESTALE));
            }
            Ok(new)
        }
    }

    /// The writable places cloned (into `trees`, which the caller closes),
    /// with the submounts each has; then, for the view, every mount made
    /// read-only; then the steps in order. Each place kept writable must be
    /// the directory `prepare` found, when cloned and when put back.
    ///
    /// # Safety
    /// As [`make`](Self::make).
    unsafe fn mounts(&self, trees: &mut [c_int; MAX_WRITABLE]) -> Result<(), (c_int, Layer)> {
        let kept = |e| (e, self.first_layer());
        let paths = |e| (e, Layer::ProtectedPaths);
        if self.writable.len() > MAX_WRITABLE {
            return Err(kept(libc::E2BIG));
        }
        // SAFETY: raw system calls on NUL-terminated strings owned by
        // `self`, on fds opened here, and on a mount_attr on this stack.
        unsafe {
            for (w, tree) in self.writable.iter().zip(trees.iter_mut()) {
                let fd = open_same_dir(w).map_err(kept)?;
                let t = clone_tree(fd);
                let _ = sys::close(fd);
                *tree = t.map_err(kept)?;
            }
            if self.view {
                set_readonly(libc::AT_FDCWD, c"/").map_err(kept)?;
            }
            for step in &self.steps {
                match step {
                    Step::Keep(i) => {
                        let (Some(w), Some(&tree)) = (self.writable.get(*i), trees.get(*i)) else {
                            return Err(kept(libc::EINVAL));
                        };
                        let fd = open_same_dir(w).map_err(kept)?;
                        let r = move_over(tree, fd);
                        let _ = sys::close(fd);
                        r.map_err(kept)?;
                    }
                    Step::Bind(b) => {
                        let fd = match open_no_symlinks(&b.place, b.open_flags()) {
                            Ok(fd) => fd,
                            // An alias hidden under another mount is not
                            // reachable. A protected place gone since the
                            // look (`required`) fails the call: it is in
                            // neither the mounts nor the sweep.
                            Err(libc::ENOENT) if b.expect.is_none() && !b.required => continue,
                            Err(e) => return Err(paths(e)),
                        };
                        if let Some((dev, ino)) = b.expect {
                            let mut st: libc::stat = std::mem::zeroed();
                            if sys::fstat(fd, &mut st).is_err()
                                || st.st_dev as u64 != dev
                                || st.st_ino as u64 != ino
                            {
                                let _ = sys::close(fd);
                                return Err(paths(libc::ESTALE));
                            }
                        }
                        let r = bind_over(fd, b);
                        let _ = sys::close(fd);
                        r.map_err(paths)?;
                    }
                }
            }
            Ok(())
        }
    }
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

/// A detached copy of the mount at the place open as `fd`, with the mounts
/// below it; its fd.
///
/// # Safety
/// Only in the supervisor: raw system calls only; `fd` is open.
unsafe fn clone_tree(fd: c_int) -> Result<c_int, c_int> {
    // SAFETY: the empty path is a NUL-terminated literal; `fd` is open.
    unsafe {
        sys::call(
            libc::SYS_open_tree,
            [
                fd as usize,
                c"".as_ptr() as usize,
                (OPEN_TREE_CLONE | AT_RECURSIVE | libc::O_CLOEXEC as libc::c_uint | AT_EMPTY_PATH)
                    as usize,
                0,
                0,
                0,
            ],
        )
        .map(|t| t as c_int)
    }
}

/// Makes the mount at `path` from `dirfd` (`""`: the detached tree `dirfd`)
/// read-only, with the mounts below it; a detached tree's
/// also nosuid and nodev.
///
/// # Safety
/// Only in the supervisor: raw system calls only; `dirfd` is open or
/// `AT_FDCWD`.
unsafe fn set_readonly(dirfd: c_int, path: &std::ffi::CStr) -> Result<(), c_int> {
    let detached = path.is_empty();
    let attr = MountAttr {
        attr_set: if detached {
            MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV
        } else {
            MOUNT_ATTR_RDONLY
        },
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let flags = AT_RECURSIVE | if detached { AT_EMPTY_PATH } else { 0 };
    // SAFETY: `path` is NUL-terminated and `attr` a valid mount_attr of the
    // size passed, on this stack; the kernel only reads both.
    unsafe {
        sys::call(
            libc::SYS_mount_setattr,
            [
                dirfd as usize,
                path.as_ptr() as usize,
                flags as usize,
                &attr as *const MountAttr as usize,
                std::mem::size_of::<MountAttr>(),
                0,
            ],
        )
        .map(|_| ())
    }
}

/// Mounts the place open as `fd` over itself with the mounts below it, as
/// `b` says: read-only (and nosuid, nodev) or as it is.
///
/// # Safety
/// Only in the supervisor before the tool exists: raw system calls only.
unsafe fn bind_over(fd: c_int, b: &Bind) -> Result<(), c_int> {
    // SAFETY: the fds are open (the caller's, and the tree made here).
    unsafe {
        let tree = clone_tree(fd)?;
        if b.read_only
            && let Err(e) = set_readonly(tree, c"")
        {
            let _ = sys::close(tree);
            return Err(e);
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
