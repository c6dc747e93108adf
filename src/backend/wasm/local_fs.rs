//! Whether every filesystem a call's preopens reach ends each operation by
//! itself, so that its file operations may run on the thread polling the
//! call (with `special::inline_ok`, see `ctx`).
//!
//! A disk or memory filesystem (ext4, xfs, btrfs, tmpfs, overlay, ...) ends
//! each open, read or write after the work is done. Others may wait on
//! someone: a kernel file (`/proc/kmsg` waits for the next kernel message),
//! a FUSE server, a network server (NFS, SMB, 9p). A wait on the thread that
//! polls the call is one its timeout cannot end, so such a call keeps each
//! operation on tokio's blocking pool, where the timeout still ends the call
//! (the thread waits on).
//!
//! A dir is judged by the handle the sandbox holds on it, never by a name:
//! the mount the handle lies in (its mount id, from `statx`) and the path
//! the kernel gives the handle now (`/proc/self/fd`). The verdict, from
//! `/proc/self/mountinfo`, is no when
//! - the handle's mount is not of a listed type;
//! - a mount at or below the handle's path is not;
//! - or a mount not of a listed type could be moved inside it by a rename:
//!   one mounted on the handle's mount (or on one below the dir), two or
//!   more levels below that mount's top (a dir on the way can then be
//!   renamed; a mount point itself, or anything at the top of its mount,
//!   cannot). `/proc` on `/` cannot be moved; `/home/alice` on NFS, with the
//!   dir on `/`, could be.
//!
//! A mount hidden under a later one on the same path, or a bind mount of
//! the dir put where the dir was, changes nothing: what the handle reaches
//! hangs on the handle's own mount, and that is the one judged.
//!
//! A handle's verdict holds until the mount table changes (seen by `poll`,
//! one system call per call): renames move a dir with every mount under it
//! and keep it on its mount, which leaves every part of the verdict true.
//! A verdict is made against a table read at that moment, between two reads
//! of the handle's path that must agree, so the table's paths and the
//! handle's are of one moment.

use std::sync::{Arc, Mutex};

use cap_std::fs::Dir;

#[cfg(target_os = "linux")]
use std::path::PathBuf;
#[cfg(target_os = "linux")]
use std::sync::Weak;

/// Filesystems that end each operation without waiting on another party.
/// Not `overlay`: its layers are other mounts, named only in its options
/// (a FUSE lower layer made an inline `fstat` wait without end, in review).
const LOCAL: &[&str] = &[
    "ext2", "ext3", "ext4", "xfs", "btrfs", "bcachefs", "f2fs", "jfs", "reiserfs", "nilfs2", "zfs",
    "tmpfs", "ramfs", "squashfs", "erofs", "iso9660", "udf", "vfat", "msdos", "exfat", "ntfs",
    "ntfs3", "hfsplus",
];

/// The verdicts of the current mount table.
#[derive(Default)]
pub(super) struct LocalFs {
    look: Mutex<Option<Look>>,
}

impl std::fmt::Debug for LocalFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalFs").finish_non_exhaustive()
    }
}

/// The table the verdicts were made under, and the verdicts by handle. A
/// `Weak` keeps its handle's allocation, so no other handle can take its
/// address while the verdict is kept.
#[cfg(target_os = "linux")]
struct Look {
    table: crate::sys::mount_events::MountTable,
    verdicts: Vec<(Weak<Dir>, bool)>,
    /// Verdicts for working dirs, by mount and file ([`mount_of`]).
    by_id: Vec<(HandleKey, bool)>,
}

#[cfg(not(target_os = "linux"))]
struct Look;

/// A mount id, and a file's device and inode in it.
#[cfg(target_os = "linux")]
type HandleKey = (u64, (u64, u64));

/// One line of the mount table.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
struct Mount {
    id: u64,
    parent: u64,
    point: std::path::PathBuf,
    local: bool,
}

/// Most handles judged per mount table (a sandbox has a handful).
const MAX_VERDICTS: usize = 64;

impl LocalFs {
    /// Whether every dir of `dirs` (the sandbox's handles on its allowed
    /// dirs) reaches only listed filesystems: always no for a dir with no
    /// handle, where the mount table or a handle's mount or path cannot be
    /// read, and off Linux.
    ///
    /// `cwd`, the handle of a call's working dir when it is not one of
    /// `dirs` (a dir below one, opened per call), is judged too, its verdict
    /// kept by the mount and file it is (one `statx` per call).
    pub(super) fn only_local<'a>(
        &self,
        dirs: impl IntoIterator<Item = Option<&'a Arc<Dir>>>,
        cwd: Option<&Dir>,
    ) -> bool {
        #[cfg(target_os = "linux")]
        {
            let mut look = self.look.lock().unwrap_or_else(|e| e.into_inner());
            if look.as_ref().is_none_or(|l| l.table.changed()) {
                *look = None;
                let Ok(table) = crate::sys::mount_events::MountTable::read() else {
                    return false;
                };
                *look = Some(Look {
                    table,
                    verdicts: Vec::new(),
                    by_id: Vec::new(),
                });
            }
            let Some(look) = look.as_mut() else {
                return false;
            };
            for dir in dirs {
                let Some(dir) = dir else {
                    return false;
                };
                let known = look
                    .verdicts
                    .iter()
                    .find(|(w, _)| std::ptr::eq(w.as_ptr(), Arc::as_ptr(dir)));
                let ok = match known {
                    Some((_, ok)) => *ok,
                    None => {
                        let Some(ok) = mount_of(dir).and_then(|(m, _)| judge(look, dir, m)) else {
                            return false;
                        };
                        if look.verdicts.len() >= MAX_VERDICTS {
                            look.verdicts.clear();
                        }
                        look.verdicts.push((Arc::downgrade(dir), ok));
                        ok
                    }
                };
                if !ok {
                    return false;
                }
            }
            let Some(cwd) = cwd else {
                return true;
            };
            let Some((mnt, file)) = mount_of(cwd) else {
                return false;
            };
            let key = (mnt, file);
            if let Some((_, ok)) = look.by_id.iter().find(|(k, _)| *k == key) {
                return *ok;
            }
            let Some(ok) = judge(look, cwd, mnt) else {
                return false;
            };
            if look.by_id.len() >= MAX_VERDICTS {
                look.by_id.clear();
            }
            look.by_id.push((key, ok));
            ok
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (
                dirs.into_iter().count(),
                cwd,
                LOCAL,
                MAX_VERDICTS,
                &self.look,
            );
            let _ = (movable_into, verdict);
            false
        }
    }
}

/// The verdict for `dir` against a mount table read now (which replaces
/// `look`'s, dropping its verdicts if it differs); `None` when it cannot be
/// made (a handle, table or path that cannot be read, a dir renamed
/// meanwhile), which is no, not kept.
#[cfg(target_os = "linux")]
fn judge(look: &mut Look, dir: &Dir, mnt: u64) -> Option<bool> {
    let before = path_of(dir)?;
    let table = crate::sys::mount_events::MountTable::read().ok()?;
    let after = path_of(dir)?;
    if before != after {
        return None;
    }
    let mounts = parse(table.text());
    if table.text() != look.table.text() {
        look.verdicts.clear();
        look.by_id.clear();
    }
    look.table = table;
    Some(verdict(mnt, &after, &mounts?))
}

/// The id of the mount the open dir `dir` lies in, and its file identity
/// (device and inode) there: the key of a verdict for a handle that is
/// opened per call. A dir's inode is freed only once the dir is removed,
/// empty and no mount point; a new dir given it has no mount below it
/// unless one is made, which changes the table.
#[cfg(target_os = "linux")]
fn mount_of(dir: &Dir) -> Option<HandleKey> {
    use rustix::fs::{AtFlags, StatxFlags, statx};
    use std::os::fd::AsFd as _;
    let want = StatxFlags::MNT_ID | StatxFlags::INO;
    let st = statx(dir.as_fd(), "", AtFlags::EMPTY_PATH, want).ok()?;
    if st.stx_mask & want.bits() != want.bits() {
        return None;
    }
    let dev = (u64::from(st.stx_dev_major) << 32) | u64::from(st.stx_dev_minor);
    Some((st.stx_mnt_id, (dev, st.stx_ino)))
}

/// The path the kernel gives the open dir `dir` now; `None` when it is not
/// an absolute path below this process's root, or the dir was removed.
#[cfg(target_os = "linux")]
fn path_of(dir: &Dir) -> Option<PathBuf> {
    use std::os::fd::AsRawFd as _;
    let p = std::fs::read_link(format!("/proc/self/fd/{}", dir.as_raw_fd())).ok()?;
    let removed = p.as_os_str().as_encoded_bytes().ends_with(b" (deleted)");
    (p.is_absolute() && !removed).then_some(p)
}

/// The mount table's lines; `None` if one does not parse (every verdict is
/// then no).
#[cfg(target_os = "linux")]
fn parse(text: &str) -> Option<Vec<Mount>> {
    text.lines().map(parse_line).collect()
}

/// `id parent major:minor root point options [optional...] - type source
/// super-options`.
#[cfg(target_os = "linux")]
fn parse_line(l: &str) -> Option<Mount> {
    let (head, tail) = l.split_once(" - ")?;
    let f: Vec<&str> = head.split(' ').collect();
    let fstype = tail.split(' ').next()?;
    Some(Mount {
        id: f.first()?.parse().ok()?,
        parent: f.get(1)?.parse().ok()?,
        point: crate::reach::unescape_mount_path(f.get(4)?),
        local: LOCAL.contains(&fstype),
    })
}

/// The verdict for a dir that lies in mount `home` (its id) at `dir` (see
/// the module doc).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn verdict(home: u64, dir: &std::path::Path, mounts: &[Mount]) -> bool {
    if !mounts.iter().any(|m| m.id == home && m.local) {
        return false;
    }
    for m in mounts {
        if m.local {
            continue;
        }
        if m.point.starts_with(dir) {
            return false;
        }
        if movable_into(m, dir, home, mounts) {
            return false;
        }
    }
    true
}

/// Whether a rename could move mount `m` inside `dir`: the mount of its
/// chain of parents that hangs on `dir`'s own mount (`home`, or on one
/// below `dir`) hangs two or more levels below that mount's top. A rename
/// moves a directory with every mount under it, so a mount on a movable
/// mount moves too; renames inside any other mount keep what they move
/// there.
fn movable_into(m: &Mount, dir: &std::path::Path, home: u64, mounts: &[Mount]) -> bool {
    let mut link = m;
    // At most one step per mount: a table with a loop ends here.
    for _ in 0..mounts.len() {
        let Some(parent) = mounts.iter().find(|p| p.id == link.parent) else {
            return false;
        };
        if parent.id == home || parent.point.starts_with(dir) {
            let levels = link
                .point
                .strip_prefix(&parent.point)
                .map_or(usize::MAX, |r| r.components().count());
            return levels >= 2;
        }
        link = parent;
    }
    false
}
#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    fn m(id: u64, parent: u64, point: &str, local: bool) -> Mount {
        Mount {
            id,
            parent,
            point: PathBuf::from(point),
            local,
        }
    }

    /// The verdict for a handle opened on `dir` by its path: it lies in the
    /// mount on top of the deepest mount point on that path.
    fn by_path(dir: &Path, mounts: &[Mount]) -> bool {
        let depth = mounts
            .iter()
            .filter(|m| dir.starts_with(&m.point))
            .map(|m| m.point.components().count())
            .max();
        let home = mounts
            .iter()
            .rfind(|m| dir.starts_with(&m.point) && Some(m.point.components().count()) == depth);
        home.is_some_and(|h| verdict(h.id, dir, mounts))
    }

    /// A table like a usual host's: `/` on ext4, kernel filesystems at the
    /// top of `/` or below them, a tmpfs in `/tmp`.
    fn host() -> Vec<Mount> {
        vec![
            m(27, 1, "/", true),
            m(22, 27, "/proc", false),
            m(23, 27, "/sys", false),
            m(24, 27, "/dev", false),
            m(26, 24, "/dev/pts", false),
            m(45, 23, "/sys/kernel/tracing", false),
            m(50, 27, "/tmp", true),
            m(51, 27, "/var/lib/docker", true),
        ]
    }

    #[test]
    fn a_dir_on_a_disk_with_kernel_filesystems_out_of_reach_is_local() {
        let t = host();
        assert!(by_path(Path::new("/tmp/ws"), &t));
        assert!(by_path(Path::new("/root/ws"), &t));
        assert!(by_path(Path::new("/var/lib/docker/x"), &t));
    }

    #[test]
    fn a_dir_on_or_above_a_kernel_filesystem_is_not() {
        let t = host();
        assert!(!by_path(Path::new("/proc"), &t));
        assert!(!by_path(Path::new("/proc/self"), &t));
        assert!(!by_path(Path::new("/sys/kernel"), &t));
        // `/` holds `/proc`; `/dev/..` lies in devtmpfs.
        assert!(!by_path(Path::new("/"), &t));
        assert!(!by_path(Path::new("/dev/shm"), &t));
    }

    #[test]
    fn a_kernel_mount_below_the_dir_makes_it_not_local() {
        let mut t = host();
        t.push(m(60, 50, "/tmp/ws/sub", false));
        assert!(!by_path(Path::new("/tmp/ws"), &t));
        assert!(!by_path(Path::new("/tmp/ws/sub"), &t));
        // A sibling dir on the same tmpfs: `/tmp/ws` can be renamed into it.
        assert!(!by_path(Path::new("/tmp/other"), &t));
        // A mount at the top of `/tmp` cannot be moved by a rename.
        t.pop();
        t.push(m(61, 50, "/tmp/top", false));
        assert!(by_path(Path::new("/tmp/other"), &t));
        assert!(!by_path(Path::new("/tmp"), &t));
    }

    #[test]
    fn a_movable_network_mount_on_the_dirs_filesystem_makes_it_not_local() {
        let mut t = host();
        t.push(m(70, 27, "/home/alice", false));
        // `/home` can be renamed into `/root/ws`: not local.
        assert!(!by_path(Path::new("/root/ws"), &t));
        // `/tmp` is another mount: nothing on `/` can be renamed into it.
        assert!(by_path(Path::new("/tmp/ws"), &t));
        // A mount of its own type at the top of `/` cannot move.
        t.pop();
        t.push(m(71, 27, "/net", false));
        assert!(by_path(Path::new("/root/ws"), &t));
    }

    #[test]
    fn a_kernel_mount_on_a_movable_mount_moves_with_it() {
        let mut t = host();
        // procfs at the top of a tmpfs that hangs two levels below `/`'s
        // top: renaming `/srv/a` brings both into `/root/ws`.
        t.push(m(90, 27, "/srv/a/t", true));
        t.push(m(91, 90, "/srv/a/t/p", false));
        assert!(!by_path(Path::new("/root/ws"), &t));
        // The same tmpfs at the top of `/` cannot move.
        t.retain(|x| x.id < 90);
        t.push(m(90, 27, "/t", true));
        t.push(m(91, 90, "/t/p", false));
        assert!(by_path(Path::new("/root/ws"), &t));
        // A mount deep inside another filesystem moves only inside it.
        t.push(m(92, 23, "/sys/a/b/c", false));
        assert!(by_path(Path::new("/root/ws"), &t));
        // A table whose parents loop ends the walk.
        t.push(m(93, 94, "/x/y/z", false));
        t.push(m(94, 93, "/x", true));
        assert!(by_path(Path::new("/root/ws"), &t));
    }

    #[test]
    fn a_mount_on_top_is_the_dirs_and_a_bad_table_is_no_table() {
        let mut t = host();
        t.push(m(80, 50, "/tmp", false));
        assert!(!by_path(Path::new("/tmp/ws"), &t));
        // A handle opened before the kernel mount was stacked on `/tmp`
        // still lies in the tmpfs below it, and reaches only that.
        assert!(verdict(50, Path::new("/tmp/ws"), &t));
        #[cfg(target_os = "linux")]
        {
            let text = "27 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n\
                        50 27 0:40 / /tmp\\040x rw - tmpfs tmpfs rw\n";
            let t = parse(text).expect("parses");
            assert_eq!(t[1], m(50, 27, "/tmp x", true));
            assert!(by_path(Path::new("/tmp x/ws"), &t));
            assert_eq!(parse(&format!("{text}garbage\n")), None);
        }
    }

    #[test]
    fn a_mount_hidden_under_a_later_one_does_not_judge_the_dir() {
        // A tmpfs at `/tmp/t/per_cpu`, then tracefs mounted at `/tmp/t`:
        // `/tmp/t/per_cpu/cpu0` now lies in tracefs, though the deepest
        // mount point on its path is the hidden tmpfs.
        let mut t = host();
        t.push(m(90, 50, "/tmp/t/per_cpu", true));
        t.push(m(91, 50, "/tmp/t", false));
        assert!(!verdict(91, Path::new("/tmp/t/per_cpu/cpu0"), &t));
        // A handle opened in the tmpfs before the overmount reaches only it.
        assert!(verdict(90, Path::new("/tmp/t/per_cpu/cpu0"), &t));
    }

    #[test]
    fn a_dir_bound_back_where_it_was_is_judged_where_its_handle_lies() {
        // `/tmp/ws` renamed to `/tmp/away`, procfs mounted inside it, and
        // the dir bind-mounted (not recursively) back at `/tmp/ws`.
        let mut t = host();
        t.push(m(95, 50, "/tmp/away/p", false));
        t.push(m(96, 50, "/tmp/ws", true));
        // The sandbox's handle: in the tmpfs, at `/tmp/away` now.
        assert!(!verdict(50, Path::new("/tmp/away"), &t));
        // A handle opened by the path now lies in the bind mount, which
        // has nothing mounted under it.
        assert!(verdict(96, Path::new("/tmp/ws"), &t));
        assert!(by_path(Path::new("/tmp/ws"), &t));
    }
}
