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
//! The verdict for a dir, from `/proc/self/mountinfo`, is no when
//! - the mount it lies in is not of a listed type;
//! - a mount at or below it is not;
//! - or a mount not of a listed type could be moved inside it by a rename:
//!   one mounted on the mount the dir lies in (or on one below the dir),
//!   two or more levels below that mount's top (a dir on the way can then be
//!   renamed; a mount point itself, or anything at the top of its mount,
//!   cannot). `/proc` on `/` cannot be moved; `/home/alice` on NFS, with the
//!   dir on `/`, could be.
//!
//! Verdicts are kept until the mount table changes (seen by `poll`, one
//! system call per call). A dir is judged by the path it had when the
//! sandbox was made, and only while that path still names the dir the
//! sandbox holds (checked with each verdict).

use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Filesystems that end each operation without waiting on another party.
const LOCAL: &[&str] = &[
    "ext2", "ext3", "ext4", "xfs", "btrfs", "bcachefs", "f2fs", "jfs", "reiserfs", "nilfs2", "zfs",
    "tmpfs", "ramfs", "overlay", "squashfs", "erofs", "iso9660", "udf", "vfat", "msdos", "exfat",
    "ntfs", "ntfs3", "hfsplus",
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

#[cfg(target_os = "linux")]
struct Look {
    table: crate::sys::mount_events::MountTable,
    mounts: Option<Vec<Mount>>,
    verdicts: Vec<(PathBuf, bool)>,
}

#[cfg(not(target_os = "linux"))]
struct Look;

/// One line of the mount table.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
struct Mount {
    id: u32,
    parent: u32,
    point: PathBuf,
    local: bool,
}

/// Most dirs judged per mount table (a sandbox has a handful).
const MAX_VERDICTS: usize = 64;

impl LocalFs {
    /// Whether every dir of `dirs` (its path, and the sandbox's handle on
    /// it) reaches only listed filesystems (always no where the mount table
    /// cannot be read, and off Linux). A dir whose path no longer names its
    /// handle when it is judged (renamed, and something else put there) is
    /// no.
    pub(super) fn only_local<'a>(
        &self,
        dirs: impl IntoIterator<Item = (&'a Path, Option<&'a cap_std::fs::Dir>)>,
    ) -> bool {
        #[cfg(target_os = "linux")]
        {
            let mut look = self.look.lock().unwrap_or_else(|e| e.into_inner());
            if look.as_ref().is_none_or(|l| l.table.changed()) {
                *look = None;
                let Ok(table) = crate::sys::mount_events::MountTable::read() else {
                    return false;
                };
                let mounts = parse(table.text());
                *look = Some(Look {
                    table,
                    mounts,
                    verdicts: Vec::new(),
                });
            }
            let Some(look) = look.as_mut() else {
                return false;
            };
            for (dir, handle) in dirs {
                let ok = match look
                    .verdicts
                    .iter()
                    .find(|(p, _)| p.as_os_str() == dir.as_os_str())
                {
                    Some((_, ok)) => *ok,
                    None => {
                        let ok = look.mounts.as_ref().is_some_and(|t| verdict(dir, t))
                            && same_dir(dir, handle);
                        if look.verdicts.len() >= MAX_VERDICTS {
                            look.verdicts.clear();
                        }
                        look.verdicts.push((dir.to_path_buf(), ok));
                        ok
                    }
                };
                if !ok {
                    return false;
                }
            }
            true
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (dirs.into_iter().count(), LOCAL, MAX_VERDICTS, &self.look);
            let _ = movable_into;
            false
        }
    }
}

/// Whether `path` names the dir `handle` holds (no handle: yes, the path is
/// all there is). Judged with the verdict, so at the first call and after
/// each change of the mount table: a rename alone moves the dir with every
/// mount under it and keeps it on its mount, which leaves the verdict true
/// of the handle.
#[cfg(target_os = "linux")]
fn same_dir(path: &Path, handle: Option<&cap_std::fs::Dir>) -> bool {
    use crate::sys::file_id;
    handle.is_none_or(|d| match (file_id::of_path(path), file_id::of_dir(d)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    })
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

/// The verdict for `dir` (see the module doc).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn verdict(dir: &Path, mounts: &[Mount]) -> bool {
    // The mount `dir` lies in: the deepest mount point on its path (the
    // last one listed there is on top; all there must be listed types).
    let Some(depth) = mounts
        .iter()
        .filter(|m| dir.starts_with(&m.point))
        .map(|m| m.point.components().count())
        .max()
    else {
        return false;
    };
    let home: Vec<&Mount> = mounts
        .iter()
        .filter(|m| dir.starts_with(&m.point) && m.point.components().count() == depth)
        .collect();
    if home.iter().any(|m| !m.local) {
        return false;
    }
    for m in mounts {
        if m.local {
            continue;
        }
        if m.point.starts_with(dir) {
            return false;
        }
        if movable_into(m, dir, &home, mounts) {
            return false;
        }
    }
    true
}

/// Whether a rename could move mount `m` inside `dir`: the mount of its
/// chain of parents that hangs on `dir`'s own mount (or on one below `dir`)
/// hangs two or more levels below that mount's top. A rename moves a
/// directory with every mount under it, so a mount on a movable mount moves
/// too; renames inside any other mount keep what they move there.
fn movable_into(m: &Mount, dir: &Path, home: &[&Mount], mounts: &[Mount]) -> bool {
    let mut link = m;
    // At most one step per mount: a table with a loop ends here.
    for _ in 0..mounts.len() {
        let Some(parent) = mounts.iter().find(|p| p.id == link.parent) else {
            return false;
        };
        if home.iter().any(|h| h.id == parent.id) || parent.point.starts_with(dir) {
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

    fn m(id: u32, parent: u32, point: &str, local: bool) -> Mount {
        Mount {
            id,
            parent,
            point: PathBuf::from(point),
            local,
        }
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
        assert!(verdict(Path::new("/tmp/ws"), &t));
        assert!(verdict(Path::new("/root/ws"), &t));
        assert!(verdict(Path::new("/var/lib/docker/x"), &t));
    }

    #[test]
    fn a_dir_on_or_above_a_kernel_filesystem_is_not() {
        let t = host();
        assert!(!verdict(Path::new("/proc"), &t));
        assert!(!verdict(Path::new("/proc/self"), &t));
        assert!(!verdict(Path::new("/sys/kernel"), &t));
        // `/` holds `/proc`; `/dev/..` lies in devtmpfs.
        assert!(!verdict(Path::new("/"), &t));
        assert!(!verdict(Path::new("/dev/shm"), &t));
    }

    #[test]
    fn a_kernel_mount_below_the_dir_makes_it_not_local() {
        let mut t = host();
        t.push(m(60, 50, "/tmp/ws/sub", false));
        assert!(!verdict(Path::new("/tmp/ws"), &t));
        assert!(!verdict(Path::new("/tmp/ws/sub"), &t));
        // A sibling dir on the same tmpfs: `/tmp/ws` can be renamed into it.
        assert!(!verdict(Path::new("/tmp/other"), &t));
        // A mount at the top of `/tmp` cannot be moved by a rename.
        t.pop();
        t.push(m(61, 50, "/tmp/top", false));
        assert!(verdict(Path::new("/tmp/other"), &t));
        assert!(!verdict(Path::new("/tmp"), &t));
    }

    #[test]
    fn a_movable_network_mount_on_the_dirs_filesystem_makes_it_not_local() {
        let mut t = host();
        t.push(m(70, 27, "/home/alice", false));
        // `/home` can be renamed into `/root/ws`: not local.
        assert!(!verdict(Path::new("/root/ws"), &t));
        // `/tmp` is another mount: nothing on `/` can be renamed into it.
        assert!(verdict(Path::new("/tmp/ws"), &t));
        // A mount of its own type at the top of `/` cannot move.
        t.pop();
        t.push(m(71, 27, "/net", false));
        assert!(verdict(Path::new("/root/ws"), &t));
    }

    #[test]
    fn a_kernel_mount_on_a_movable_mount_moves_with_it() {
        let mut t = host();
        // procfs at the top of a tmpfs that hangs two levels below `/`'s
        // top: renaming `/srv/a` brings both into `/root/ws`.
        t.push(m(90, 27, "/srv/a/t", true));
        t.push(m(91, 90, "/srv/a/t/p", false));
        assert!(!verdict(Path::new("/root/ws"), &t));
        // The same tmpfs at the top of `/` cannot move.
        t.retain(|x| x.id < 90);
        t.push(m(90, 27, "/t", true));
        t.push(m(91, 90, "/t/p", false));
        assert!(verdict(Path::new("/root/ws"), &t));
        // A mount deep inside another filesystem moves only inside it.
        t.push(m(92, 23, "/sys/a/b/c", false));
        assert!(verdict(Path::new("/root/ws"), &t));
        // A table whose parents loop ends the walk.
        t.push(m(93, 94, "/x/y/z", false));
        t.push(m(94, 93, "/x", true));
        assert!(verdict(Path::new("/root/ws"), &t));
    }

    #[test]
    fn stacked_mounts_count_all_and_a_bad_table_is_no_table() {
        let mut t = host();
        t.push(m(80, 50, "/tmp", false));
        assert!(!verdict(Path::new("/tmp/ws"), &t));
        #[cfg(target_os = "linux")]
        {
            let text = "27 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n\
                        50 27 0:40 / /tmp\\040x rw - tmpfs tmpfs rw\n";
            let t = parse(text).expect("parses");
            assert_eq!(t[1], m(50, 27, "/tmp x", true));
            assert!(verdict(Path::new("/tmp x/ws"), &t));
            assert_eq!(parse(&format!("{text}garbage\n")), None);
        }
    }
}
