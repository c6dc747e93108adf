//! Which calls do their file I/O on the calling thread.
//!
//! wasmtime-wasi runs each filesystem operation of a guest either on the
//! thread that polls the call (`allow_blocking_current_thread`) or on tokio's
//! blocking pool, one round trip per operation. On this 2-core machine a
//! round trip costs 20 to 80 µs, so a guest that opens one file and reads it
//! spent seven times as long as the same guest reading stdin.
//!
//! On the calling thread the call's timeout cannot end an operation that
//! waits: the timeout is a future polled on that same thread. So a call does
//! its I/O inline only where no operation waits for long: every dir it gets
//! (the allowed dirs and the cwd) lies on a local disk or memory filesystem
//! (`LOCAL`), and so does every filesystem mounted anywhere below them. A
//! dir on procfs, sysfs, tracefs, FUSE, NFS, SMB, 9p or any type not listed
//! (where a read can wait for a kernel event, a daemon or a server), or with
//! such a mount below it, sends every operation of the call to the pool as
//! before, where the timeout ends the call whatever the operation does.
//! FIFOs and devices are refused on every filesystem (`special`), and the
//! watchdog that ends an open of a FIFO swapped in after the check also
//! watches inline opens.
//!
//! The mount table is read from `/proc/self/mountinfo`, and read again by a
//! thread of its own that waits in `poll` for the kernel to report a change:
//! a filesystem mounted below an allowed dir during a call is seen by the
//! calls that start after the thread has read it (microseconds later).
//! Where the table cannot be read or watched, and elsewhere than Linux,
//! every call uses the pool.

use std::path::Path;

/// Whether a call whose dirs are `dirs` (absolute host paths) may do its file
/// I/O on the calling thread.
pub(super) fn allowed<'a>(dirs: impl IntoIterator<Item = &'a Path>) -> bool {
    imp::allowed(dirs)
}

/// A number that changes when the mount table has changed: a verdict of
/// [`allowed`] stays good while it does not (no system call).
pub(super) fn generation() -> u64 {
    imp::generation()
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use std::path::Path;

    pub(super) fn allowed<'a>(_dirs: impl IntoIterator<Item = &'a Path>) -> bool {
        false
    }

    pub(super) fn generation() -> u64 {
        0
    }
}

/// Filesystem types whose operations do not wait on anything but the local
/// disk: block-device and memory filesystems (`overlay` is taken as its
/// layers usually are). Everything else is not, including `fuse*`,
/// `nfs*`, `cifs`/`smb3`, `9p`, `virtiofs`, `ceph`, `autofs`, `proc`, `sysfs`,
/// `tracefs`, `debugfs`, `devtmpfs` and `cgroup*`.
#[cfg(target_os = "linux")]
const LOCAL: &[&str] = &[
    "ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "ramfs", "overlay", "f2fs", "vfat", "msdos",
    "exfat", "ntfs3", "zfs", "squashfs", "iso9660", "udf", "erofs", "bcachefs", "jfs", "reiserfs",
    "hfsplus", "nilfs2",
];

/// One line of `/proc/self/mountinfo`: the mount point, unescaped, and
/// whether its filesystem type is `LOCAL`. `None` for a line that does not
/// parse.
#[cfg(target_os = "linux")]
fn parse_line(line: &str) -> Option<(std::path::PathBuf, bool)> {
    // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER
    let mut fields = line.split(' ');
    let point = fields.nth(4)?;
    let fstype = fields.skip_while(|f| *f != "-").nth(1)?;
    Some((unescape(point)?, LOCAL.contains(&fstype)))
}

/// A mount point as the kernel writes it: space, tab, newline and backslash
/// as three-digit octal escapes.
#[cfg(target_os = "linux")]
fn unescape(s: &str) -> Option<std::path::PathBuf> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' {
            let digits = b.get(i + 1..i + 4)?;
            let mut v: u32 = 0;
            for d in digits {
                if !(b'0'..=b'7').contains(d) {
                    return None;
                }
                v = v * 8 + u32::from(d - b'0');
            }
            out.push(u8::try_from(v).ok()?);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    use std::os::unix::ffi::OsStringExt;
    Some(std::path::PathBuf::from(std::ffi::OsString::from_vec(out)))
}

/// Whether `dir` and everything mounted below it is local, by the mount
/// table `mounts` (in the table's order, later mounts over earlier ones).
#[cfg(target_os = "linux")]
fn dir_is_local(mounts: &[(std::path::PathBuf, bool)], dir: &Path) -> bool {
    if !dir.is_absolute() {
        return false;
    }
    // The filesystem holding `dir`: the last mount at the deepest point that
    // contains it (a mount over another at the same point hides it).
    let mut holder: Option<(usize, bool)> = None;
    for (point, local) in mounts {
        if dir.starts_with(point) {
            let depth = point.components().count();
            if holder.is_none_or(|(d, _)| depth >= d) {
                holder = Some((depth, *local));
            }
        } else if point.starts_with(dir) && !local {
            // Below it, and not local.
            return false;
        }
    }
    holder.is_some_and(|(_, local)| local)
}

#[cfg(target_os = "linux")]
mod imp {
    use std::fs::File;
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Mutex, OnceLock};

    use rustix::event::{PollFd, PollFlags, poll};

    /// The mount table and the verdicts given since it was read.
    struct Table {
        mounts: Vec<(PathBuf, bool)>,
        verdicts: Vec<(PathBuf, bool)>,
    }

    /// Verdicts kept per table (one per allowed dir and cwd in use).
    const MAX_VERDICTS: usize = 64;

    static TABLE: Mutex<Option<Table>> = Mutex::new(None);
    /// Bumped by the watcher each time it has read a changed table.
    static GENERATION: AtomicU64 = AtomicU64::new(0);
    /// Whether the watcher runs (`false`: it could not start, and every call
    /// uses the pool).
    static WATCHER: OnceLock<bool> = OnceLock::new();

    fn read() -> Option<Vec<(PathBuf, bool)>> {
        let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        text.lines().map(super::parse_line).collect()
    }

    /// Reads the table into `TABLE` (`None` there when it cannot be read).
    fn reload() {
        let table = read().map(|mounts| Table {
            mounts,
            verdicts: Vec::new(),
        });
        *TABLE.lock().unwrap_or_else(|e| e.into_inner()) = table;
        GENERATION.fetch_add(1, Ordering::AcqRel);
    }

    /// Starts the watcher once: a thread that waits in `poll` on the mount
    /// table for a change (`POLLPRI`; the kernel resets the event as it
    /// reports it, so a change during the read is reported next) and reads
    /// it again.
    fn watcher() -> bool {
        *WATCHER.get_or_init(|| {
            let Ok(file) = File::open("/proc/self/mountinfo") else {
                return false;
            };
            // Consume the event a fresh file may report, then read.
            let mut fds = [PollFd::new(&file, PollFlags::PRI)];
            let _ = poll(&mut fds, Some(&rustix::event::Timespec::default()));
            reload();
            std::thread::Builder::new()
                .name("toolhost-mounts".into())
                .spawn(move || {
                    loop {
                        let mut fds = [PollFd::new(&file, PollFlags::PRI)];
                        match poll(&mut fds, None) {
                            Ok(_) => reload(),
                            Err(rustix::io::Errno::INTR) => {}
                            Err(_) => {
                                // Cannot watch: no table, so every call
                                // uses the pool from now on.
                                *TABLE.lock().unwrap_or_else(|e| e.into_inner()) = None;
                                GENERATION.fetch_add(1, Ordering::AcqRel);
                                return;
                            }
                        }
                    }
                })
                .is_ok()
        })
    }

    pub(super) fn generation() -> u64 {
        if !watcher() {
            return 0;
        }
        GENERATION.load(Ordering::Acquire)
    }

    pub(super) fn allowed<'a>(dirs: impl IntoIterator<Item = &'a Path>) -> bool {
        if !watcher() {
            return false;
        }
        let mut slot = TABLE.lock().unwrap_or_else(|e| e.into_inner());
        let Some(table) = slot.as_mut() else {
            return false;
        };
        for dir in dirs {
            let local = match table.verdicts.iter().find(|(d, _)| d == dir) {
                Some((_, v)) => *v,
                None => {
                    let v = super::dir_is_local(&table.mounts, dir);
                    if table.verdicts.len() >= MAX_VERDICTS {
                        table.verdicts.remove(0);
                    }
                    table.verdicts.push((dir.to_path_buf(), v));
                    v
                }
            };
            if !local {
                return false;
            }
        }
        true
    }
}

/// The mount table's format is Linux's.
#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn table(lines: &[&str]) -> Vec<(PathBuf, bool)> {
        lines.iter().map(|l| parse_line(l).expect(l)).collect()
    }

    const MOUNTS: &[&str] = &[
        "22 1 0:21 / /proc rw,nosuid - proc proc rw",
        "25 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw",
        "26 25 0:23 / /sys rw - sysfs sysfs rw",
        "40 25 0:40 / /work/ws/fuse rw master:3 - fuse.sshfs host:/x rw",
        "41 25 0:41 / /work/my\\040dir rw - tmpfs tmpfs rw",
        "42 25 0:42 / /work/wsx rw - nfs4 server:/ rw",
    ];

    #[test]
    fn a_dir_on_a_local_filesystem_with_nothing_remote_below_is_local() {
        let t = table(MOUNTS);
        assert!(
            !dir_is_local(&t, Path::new("/work")),
            "/work has FUSE below"
        );
        assert!(dir_is_local(&t, Path::new("/work/other")));
        // `/work/ws` has a FUSE mount below it; its sibling `/work/wsx` is
        // NFS itself, but is not below `/work/ws` (components, not bytes).
        assert!(!dir_is_local(&t, Path::new("/work/ws")));
        assert!(!dir_is_local(&t, Path::new("/work/ws/fuse/a")));
        assert!(!dir_is_local(&t, Path::new("/work/wsx")));
        assert!(dir_is_local(&t, Path::new("/work/wsy")));
        assert!(dir_is_local(&t, Path::new("/work/my dir/a")));
        assert!(!dir_is_local(&t, Path::new("/proc/self")));
        assert!(!dir_is_local(&t, Path::new("/sys")));
        // The root holds /proc and /sys.
        assert!(!dir_is_local(&t, Path::new("/")));
        assert!(!dir_is_local(&t, Path::new("relative")));
    }

    #[test]
    fn a_later_mount_at_the_same_point_hides_the_earlier_one() {
        let over = table(&[
            "25 1 254:0 / / rw - ext4 /dev/vda rw",
            "30 25 0:30 / /mnt rw - tmpfs tmpfs rw",
            "31 30 0:31 / /mnt rw - fuse.x x rw",
        ]);
        assert!(!dir_is_local(&over, Path::new("/mnt/a")));
        let under = table(&[
            "25 1 254:0 / / rw - ext4 /dev/vda rw",
            "31 25 0:31 / /mnt rw - 9p x rw",
            "30 31 0:30 / /mnt rw - tmpfs tmpfs rw",
        ]);
        // The 9p mount is hidden below the tmpfs one, but it is still a mount
        // below `/`: only a dir under the tmpfs mount is local.
        assert!(dir_is_local(&under, Path::new("/mnt/a")));
        assert!(!dir_is_local(&under, Path::new("/")));
    }

    #[test]
    fn mount_points_are_unescaped_and_bad_lines_refused() {
        assert_eq!(
            parse_line("1 0 0:1 / /a\\134b\\011c rw - ext4 x rw"),
            Some((PathBuf::from("/a\\b\tc"), true))
        );
        assert_eq!(parse_line("1 0 0:1 / /a\\9 rw - ext4 x rw"), None);
        assert_eq!(parse_line("1 0 0:1 / /a rw"), None);
        assert_eq!(parse_line("garbage"), None);
    }

    #[test]
    fn this_machines_proc_is_not_local_and_a_temp_dir_is() {
        let tmp = tempfile::tempdir().unwrap();
        let tmp = tmp.path().canonicalize().unwrap();
        assert!(!allowed([Path::new("/proc")]));
        assert!(!allowed([tmp.as_path(), Path::new("/proc/self")]));
        // The test machines keep their temp dir on ext4.
        assert!(allowed([tmp.as_path()]), "{}", tmp.display());
    }

    /// A filesystem mounted below a dir after its first verdict is seen
    /// (the watcher re-reads the table), and so is its unmount. Mounts procfs
    /// in this process's mount namespace, below a fresh temp dir (root).
    #[test]
    fn a_mount_below_a_dir_is_seen_by_the_next_verdict() {
        use std::process::Command;
        use std::time::{Duration, Instant};
        struct Unmount(PathBuf);
        impl Drop for Unmount {
            fn drop(&mut self) {
                let _ = Command::new("umount").arg("-l").arg(&self.0).status();
            }
        }
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().canonicalize().unwrap();
        let below = dir.join("a").join("p");
        std::fs::create_dir_all(&below).unwrap();
        let until = |want: bool| {
            let deadline = Instant::now() + Duration::from_secs(5);
            while allowed([dir.as_path()]) != want && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            allowed([dir.as_path()]) == want
        };
        assert!(allowed([dir.as_path()]));
        let before = generation();
        let ok = Command::new("mount")
            .args(["-t", "proc", "proc"])
            .arg(&below)
            .status()
            .unwrap();
        assert!(ok.success(), "mount needs root");
        let mounted = Unmount(below.clone());
        assert!(until(false), "the procfs mount below was not seen");
        assert_ne!(generation(), before);
        // A sibling dir, not above the mount, stays local.
        let sibling = tmp.path().canonicalize().unwrap().join("b");
        assert!(allowed([sibling.as_path()]));
        drop(mounted);
        assert!(until(true), "the unmount was not seen");
    }
}
