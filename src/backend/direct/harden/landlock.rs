//! Landlock: the ruleset a tool is confined to (the allowed dirs, the
//! read paths, the call's private tmp), built in toolhost before the spawn
//! as an fd; the tool restricts itself to it after clone.

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use crate::isolation::Layer;
use crate::plan::ExecPlan;

pub(super) const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
pub(super) const LANDLOCK_RULE_PATH_BENEATH: libc::c_int = 1;

pub(super) const FS_EXECUTE: u64 = 1 << 0;
pub(super) const FS_WRITE_FILE: u64 = 1 << 1;
pub(super) const FS_READ_FILE: u64 = 1 << 2;
pub(super) const FS_READ_DIR: u64 = 1 << 3;
pub(super) const FS_MAKE_CHAR: u64 = 1 << 6;
pub(super) const FS_MAKE_BLOCK: u64 = 1 << 11;
/// ABI 1: rights 0..=12.
pub(super) const FS_ABI1: u64 = (1 << 13) - 1;
pub(super) const FS_REFER: u64 = 1 << 13;
pub(super) const FS_TRUNCATE: u64 = 1 << 14;
pub(super) const FS_IOCTL_DEV: u64 = 1 << 15;
/// Rights that make sense on a file (the kernel refuses others on a file rule).
pub(super) const FS_FILE_RIGHTS: u64 =
    FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV;
pub(super) const NET_BIND_TCP: u64 = 1 << 0;
pub(super) const NET_CONNECT_TCP: u64 = 1 << 1;
pub(super) const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
pub(super) const SCOPE_SIGNAL: u64 = 1 << 1;

#[repr(C)]
pub(super) struct RulesetAttr {
    pub(super) handled_access_fs: u64,
    pub(super) handled_access_net: u64,
    pub(super) scoped: u64,
}

#[repr(C, packed)]
pub(super) struct PathBeneathAttr {
    pub(super) allowed_access: u64,
    pub(super) parent_fd: i32,
}

/// The kernel's Landlock ABI version, 0 when Landlock is unavailable.
pub(crate) fn landlock_abi() -> u32 {
    static ABI: OnceLock<u32> = OnceLock::new();
    *ABI.get_or_init(|| {
        // SAFETY: the version query takes no attr and writes nothing.
        let r = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<RulesetAttr>(),
                0usize,
                LANDLOCK_CREATE_RULESET_VERSION,
            )
        };
        u32::try_from(r).unwrap_or(0)
    })
}

pub(super) fn handled_fs(abi: u32) -> u64 {
    let mut h = FS_ABI1;
    if abi >= 2 {
        h |= FS_REFER;
    }
    if abi >= 3 {
        h |= FS_TRUNCATE;
    }
    if abi >= 5 {
        h |= FS_IOCTL_DEV;
    }
    h
}

pub(super) fn create_ruleset(fs: u64, net: u64, scoped: u64, abi: u32) -> io::Result<OwnedFd> {
    let attr = RulesetAttr {
        handled_access_fs: fs,
        handled_access_net: net,
        scoped,
    };
    // Older kernels refuse a struct larger than they know (unless the tail is 0).
    let size = if abi >= 6 {
        24
    } else if abi >= 4 {
        16
    } else {
        8
    };
    // SAFETY: attr is a valid ruleset attr of at least `size` bytes.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &attr as *const RulesetAttr,
            size as libc::size_t,
            0 as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd the kernel just gave us (close-on-exec by default).
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

pub(super) fn add_rule(ruleset: &OwnedFd, parent: RawFd, access: u64) -> io::Result<()> {
    if access == 0 {
        return Ok(());
    }
    let attr = PathBeneathAttr {
        allowed_access: access,
        parent_fd: parent,
    };
    // SAFETY: attr is a packed path-beneath attr; both fds are open.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_raw_fd(),
            LANDLOCK_RULE_PATH_BENEATH,
            &attr as *const PathBeneathAttr,
            0 as libc::c_uint,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub(super) fn open_path(p: &Path) -> io::Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    // rustix refuses a path with a NUL byte (InvalidInput).
    Ok(rustix::fs::open(
        p,
        OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

pub(super) fn is_dir(fd: &OwnedFd) -> bool {
    // O_PATH fds support fstat.
    rustix::fs::fstat(fd).is_ok_and(|st| {
        rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory
    })
}

/// One entry of `isolation_read_paths`, as the ruleset needs it.
pub(super) enum ReadPath {
    /// A directory, opened once per process (system dirs are not replaced).
    Dir(OwnedFd),
    /// Anything else, opened per call; paths that do not exist grant nothing.
    File(PathBuf),
}

/// The read paths of a sandbox, with their directories opened (once per
/// distinct list and process).
pub(super) fn read_paths(paths: &Arc<[PathBuf]>) -> Arc<Vec<ReadPath>> {
    type Cache = Vec<(Arc<[PathBuf]>, Arc<Vec<ReadPath>>)>;
    static CACHE: Mutex<Cache> = Mutex::new(Vec::new());
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, v)) = cache
        .iter()
        .find(|(k, _)| Arc::ptr_eq(k, paths) || **k == **paths)
    {
        return Arc::clone(v);
    }
    let v: Arc<Vec<ReadPath>> = Arc::new(
        paths
            .iter()
            .map(|p| match open_path(p) {
                Ok(fd) if is_dir(&fd) => ReadPath::Dir(fd),
                _ => ReadPath::File(p.clone()),
            })
            .collect(),
    );
    // Bounded: a process builds few sandboxes, but never let it grow.
    if cache.len() >= 16 {
        cache.remove(0);
    }
    cache.push((Arc::clone(paths), Arc::clone(&v)));
    v
}

/// The call's Landlock ruleset, and the layers it carries.
pub(super) fn build_ruleset(
    plan: &ExecPlan,
    tmp: Option<&OwnedFd>,
    abi: u32,
) -> io::Result<(OwnedFd, u32)> {
    let fs = handled_fs(abi);
    let net_off = !plan.allow_network;
    let net = if abi >= 4 && net_off {
        NET_BIND_TCP | NET_CONNECT_TCP
    } else {
        0
    };
    let scoped = if abi >= 6 {
        SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
    } else {
        0
    };
    let ruleset = create_ruleset(fs, net, scoped, abi)?;
    // Read-write dirs: everything but device nodes (a root tool could otherwise
    // make a block device of the host's disk in the workspace and open it).
    let rw = fs & !(FS_MAKE_CHAR | FS_MAKE_BLOCK | FS_IOCTL_DEV);
    let ro_dir = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR;
    for (mount, (_, dir)) in plan.mounts.iter().zip(&plan.mount_dirs) {
        let access = if mount.read_only { ro_dir } else { rw };
        add_rule(&ruleset, dir.as_fd().as_raw_fd(), access)?;
    }
    if let Some(tmp) = tmp {
        add_rule(&ruleset, tmp.as_raw_fd(), rw)?;
    }
    let null = open_path(Path::new("/dev/null"))?;
    add_rule(
        &ruleset,
        null.as_raw_fd(),
        (FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE | FS_IOCTL_DEV) & fs,
    )?;
    for p in read_paths(&plan.isolation_read_paths).iter() {
        match p {
            ReadPath::Dir(fd) => add_rule(&ruleset, fd.as_raw_fd(), ro_dir)?,
            ReadPath::File(path) => {
                // Opened per call: files such as /etc/resolv.conf are
                // replaced by rename, and a rule follows the inode.
                if let Ok(fd) = open_path(path) {
                    let access = if is_dir(&fd) {
                        ro_dir
                    } else {
                        ro_dir & FS_FILE_RIGHTS
                    };
                    add_rule(&ruleset, fd.as_raw_fd(), access)?;
                }
            }
        }
    }
    let mut layers = Layer::LandlockFs.bit();
    if net != 0 {
        layers |= Layer::LandlockNet.bit();
    }
    if scoped != 0 {
        layers |= Layer::LandlockScope.bit();
    }
    Ok((ruleset, layers))
}
