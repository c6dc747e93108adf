//! Landlock: the ruleset a tool is confined to (the allowed dirs, the
//! read paths, the call's private tmp), built in toolhost before the spawn
//! through the `landlock` crate, and kept as an fd; the tool restricts
//! itself to it after clone with one raw `landlock_restrict_self`.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetError, Scope,
};

use crate::isolation::Layer;
use crate::plan::{ExecPlan, Mount};

/// The version query of `landlock_create_ruleset` (no attr, size 0).
const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;

/// The kernel's Landlock ABI version, 0 when Landlock is unavailable.
///
/// The `landlock` crate asks the kernel the same question inside
/// `Ruleset::default()` but does not export the answer, which the probe and
/// the strict checks need before any ruleset exists.
pub(crate) fn landlock_abi() -> u32 {
    static ABI: OnceLock<u32> = OnceLock::new();
    *ABI.get_or_init(|| {
        // SAFETY: the version query takes no attr (null, size 0) and writes
        // nothing; it only returns a number.
        let r = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<u8>(),
                0usize,
                LANDLOCK_CREATE_RULESET_VERSION,
            )
        };
        u32::try_from(r).unwrap_or(0)
    })
}

/// The filesystem rights toolhost handles on a kernel of ABI `abi`: every
/// right up to ABI 5 (the last that toolhost grants by directory). Rights of
/// later ABIs (such as resolving unix sockets by path) stay unhandled, so
/// a newer kernel does not change what a tool may do.
pub(super) fn handled_fs(abi: u32) -> BitFlags<AccessFs> {
    AccessFs::from_all(crate_abi(abi.min(5)))
}

fn crate_abi(abi: u32) -> ABI {
    ABI::from(i32::try_from(abi).unwrap_or(i32::MAX))
}

/// Rights a rule on a directory that is mounted read-only grants, and the
/// read paths: run, read, list.
fn read_only_dir() -> BitFlags<AccessFs> {
    AccessFs::Execute | AccessFs::ReadFile | AccessFs::ReadDir
}

/// Rights that make sense on a file (the kernel refuses others on a file rule).
fn file_rights() -> BitFlags<AccessFs> {
    AccessFs::Execute
        | AccessFs::WriteFile
        | AccessFs::ReadFile
        | AccessFs::Truncate
        | AccessFs::IoctlDev
}

/// A ruleset that handles `fs`, `net` and `scoped` exactly: the crate is
/// told each is a hard requirement, so a kernel that lacks one fails the
/// build instead of silently dropping it.
fn create_ruleset(
    fs: BitFlags<AccessFs>,
    net: BitFlags<AccessNet>,
    scoped: BitFlags<Scope>,
) -> io::Result<RulesetCreated> {
    let mut r = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(fs)
        .map_err(ll)?;
    if !net.is_empty() {
        r = r.handle_access(net).map_err(ll)?;
    }
    if !scoped.is_empty() {
        r = r.scope(scoped).map_err(ll)?;
    }
    r.create().map_err(ll)
}

fn add_rule(
    ruleset: RulesetCreated,
    parent: BorrowedFd<'_>,
    access: BitFlags<AccessFs>,
) -> io::Result<RulesetCreated> {
    if access.is_empty() {
        return Ok(ruleset);
    }
    ruleset
        .add_rule(PathBeneath::new(parent, access))
        .map_err(ll)
}

/// The ruleset's fd, which the tool hands to `landlock_restrict_self` after
/// clone (the crate's `restrict_self` also sets no_new_privs and builds a
/// status, which is not for the post-fork window).
fn into_fd(ruleset: RulesetCreated) -> io::Result<OwnedFd> {
    Option::<OwnedFd>::from(ruleset).ok_or_else(|| io::Error::other("Landlock ruleset has no fd"))
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

/// `isolation_read_paths` as the ruleset needs them: the directories
/// opened once per process (system dirs are not replaced), the other paths
/// opened again only when a directory holding them changed.
pub(super) struct ReadPaths {
    dirs: Vec<OwnedFd>,
    /// Everything else, as configured: files, and paths that do not exist
    /// (they grant nothing).
    files: Vec<PathBuf>,
    seen: Mutex<Option<Arc<SeenFiles>>>,
}

/// The `files` of [`ReadPaths`] as one look at them found them.
///
/// Files such as `/etc/resolv.conf` are replaced by rename, and a rule
/// follows the inode, so a file opened once may not be the one its path
/// names later. But every rename, link, unlink or create in a directory
/// changes that directory's mtime and ctime, and whatever replaces the
/// directory itself (a rename of it or of a parent, a mount over it, a
/// retargeted symlink) gives its path another inode: while the directory
/// holding each file reads the same by its path, every name in it still
/// leads to what was opened. A look is kept only if no such directory
/// changed while the files were opened, and none had changed in the two
/// seconds before (its timestamps have the kernel's coarse granularity, so a change
/// within the same tick would not show), and it is dropped when the mount
/// table changes (a mount over a file or a dir does not touch the dir's
/// times). Files that are symlinks (whose targets live elsewhere) or mounts
/// of their own are opened at every call.
pub(super) struct SeenFiles {
    /// The directories holding `files`, each with its stamp by path.
    parents: Vec<(PathBuf, DirStamp)>,
    /// The files opened, and whether each is a directory.
    opened: Vec<(OwnedFd, bool)>,
    /// Files to open at each call.
    per_call: Vec<PathBuf>,
    /// `/proc/self/mountinfo`, read to its end when the look was made.
    mounts: Option<std::fs::File>,
}

/// Whether `f` is a symlink (its target lives elsewhere) or a mount of its
/// own (a bind-mounted `/etc/resolv.conf`: holding it open would keep it
/// from being unmounted): such files are opened at every call.
fn elsewhere(f: &Path) -> bool {
    use rustix::fs::{AtFlags, CWD, FileType, StatxAttributes, StatxFlags, statx};
    // When this cannot tell, at every call (always correct).
    statx(CWD, f, AtFlags::SYMLINK_NOFOLLOW, StatxFlags::TYPE).map_or(true, |st| {
        FileType::from_raw_mode(u32::from(st.stx_mode)) == FileType::Symlink
            || (st.stx_attributes & st.stx_attributes_mask).contains(StatxAttributes::MOUNT_ROOT)
    })
}

/// What a `stat` of a directory by its path shows: its identity and the
/// times any change to its entries sets.
#[derive(Clone, Copy, PartialEq, Eq)]
struct DirStamp {
    dev: u64,
    ino: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl DirStamp {
    // `st_dev` and `st_ino` are `u64` on Linux, not on every Unix.
    #[allow(clippy::unnecessary_cast)]
    fn of(path: &Path) -> Option<Self> {
        let st = rustix::fs::stat(path).ok()?;
        Some(DirStamp {
            dev: st.st_dev as u64,
            ino: st.st_ino as u64,
            mtime: (st.st_mtime as i64, st.st_mtime_nsec as i64),
            ctime: (st.st_ctime as i64, st.st_ctime_nsec as i64),
        })
    }

    /// Whether it changed within the last two seconds of `now` (a change
    /// within the same timestamp tick would not show).
    fn recent(&self, now: i64) -> bool {
        now.saturating_sub(self.mtime.0.max(self.ctime.0)) < 2
    }
}

impl SeenFiles {
    /// Opens `files` (one look); `cacheable` says whether the look may be
    /// kept (see [`SeenFiles`]).
    fn look(files: &[PathBuf]) -> (Self, bool) {
        let mut parents: Vec<(PathBuf, DirStamp)> = Vec::new();
        let mut cacheable = true;
        for f in files {
            let Some(parent) = f.parent() else {
                cacheable = false;
                continue;
            };
            if !parents.iter().any(|(p, _)| p == parent) {
                match DirStamp::of(parent) {
                    Some(st) => parents.push((parent.to_path_buf(), st)),
                    None => cacheable = false,
                }
            }
        }
        let mut opened = Vec::new();
        let mut per_call = Vec::new();
        // The mount table as it is now, read to its end: `poll` then tells
        // when it changes (see `current`).
        let mounts = std::fs::File::open("/proc/self/mountinfo")
            .ok()
            .filter(|mut m| std::io::copy(&mut m, &mut std::io::sink()).is_ok());
        cacheable &= mounts.is_some();
        for f in files {
            if elsewhere(f) {
                per_call.push(f.clone());
            } else if let Ok(fd) = open_path(f) {
                let dir = is_dir(&fd);
                opened.push((fd, dir));
            }
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(i64::MAX, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        cacheable &= parents.iter().all(|(_, st)| !st.recent(now));
        let look = SeenFiles {
            parents,
            opened,
            per_call,
            mounts,
        };
        // Nothing changed while the files were opened (mounts included).
        let cacheable = cacheable && look.current();
        (look, cacheable)
    }

    /// Whether the mount table is as it was, and every directory holding
    /// the files still reads the same.
    fn current(&self) -> bool {
        let Some(mounts) = &self.mounts else {
            return false;
        };
        let mut pfd = libc::pollfd {
            fd: mounts.as_raw_fd(),
            events: libc::POLLPRI,
            revents: 0,
        };
        // SAFETY: one valid pollfd, borrowed for the call; timeout 0.
        let r = unsafe { libc::poll(&mut pfd, 1, 0) };
        // A change since the table was read shows as POLLPRI | POLLERR.
        r == 0
            && self
                .parents
                .iter()
                .all(|(p, st)| DirStamp::of(p) == Some(*st))
    }
}

impl ReadPaths {
    /// The files, opened: the kept look while it is current, else a new one
    /// (kept if it may be); and whether the look returned is the kept one.
    fn files(&self) -> (Arc<SeenFiles>, bool) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = seen.as_ref()
            && s.current()
        {
            return (Arc::clone(s), true);
        }
        let (look, cacheable) = SeenFiles::look(&self.files);
        let look = Arc::new(look);
        *seen = cacheable.then(|| Arc::clone(&look));
        (look, cacheable)
    }
}

/// The read paths of `plan` that are not directories, as the call finds
/// them now (see [`SeenFiles`]), and whether that look is kept: a ruleset
/// made with a kept look holds for as long as
/// [`Arc::ptr_eq`] with a later `read_files` says it is the same look.
pub(super) fn read_files(read_paths_of: &Arc<[PathBuf]>) -> (Arc<SeenFiles>, bool) {
    read_paths(read_paths_of).files()
}

/// What a call's ruleset grants, from its plan: the sandbox's allowed dirs
/// (with their handles) and read paths, and whether the network is allowed.
/// All shared by the sandbox's calls, so it can be kept (`spare`).
#[derive(Clone)]
pub(super) struct Grants {
    pub(super) mounts: Arc<[Mount]>,
    pub(super) mount_dirs: Arc<[(PathBuf, Arc<cap_std::fs::Dir>)]>,
    pub(super) read_paths: Arc<[PathBuf]>,
    pub(super) allow_network: bool,
}

impl Grants {
    pub(super) fn of(plan: &ExecPlan) -> Self {
        Grants {
            mounts: Arc::clone(&plan.mounts),
            mount_dirs: Arc::clone(&plan.mount_dirs),
            read_paths: Arc::clone(&plan.isolation_read_paths),
            allow_network: plan.allow_network,
        }
    }

    /// Whether `plan` grants the same (the same sandbox handles, by `Arc`
    /// identity, and the same network setting).
    pub(super) fn same_as(&self, plan: &ExecPlan) -> bool {
        Arc::ptr_eq(&self.mounts, &plan.mounts)
            && Arc::ptr_eq(&self.mount_dirs, &plan.mount_dirs)
            && Arc::ptr_eq(&self.read_paths, &plan.isolation_read_paths)
            && self.allow_network == plan.allow_network
    }
}

/// The read paths of a sandbox, with their directories opened (once per
/// distinct list and process).
pub(super) fn read_paths(paths: &Arc<[PathBuf]>) -> Arc<ReadPaths> {
    type Cache = Vec<(Arc<[PathBuf]>, Arc<ReadPaths>)>;
    static CACHE: Mutex<Cache> = Mutex::new(Vec::new());
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, v)) = cache
        .iter()
        .find(|(k, _)| Arc::ptr_eq(k, paths) || **k == **paths)
    {
        return Arc::clone(v);
    }
    let mut dirs = Vec::new();
    let mut files = Vec::new();
    for p in paths.iter() {
        match open_path(p) {
            Ok(fd) if is_dir(&fd) => dirs.push(fd),
            _ => files.push(p.clone()),
        }
    }
    let v = Arc::new(ReadPaths {
        dirs,
        files,
        seen: Mutex::new(None),
    });
    // Bounded: a process builds few sandboxes, but never let it grow.
    if cache.len() >= 16 {
        cache.remove(0);
    }
    cache.push((Arc::clone(paths), Arc::clone(&v)));
    v
}

/// A ruleset with every rule of a call but those its paths must be opened
/// for at the call itself ([`finish_ruleset`] adds them), and the layers it
/// carries. It can be made ahead of the call (`spare`): what it holds is
/// the sandbox's handles (its allowed dirs, the read paths' dirs), the look
/// at the read files given, and the call's private tmp.
pub(super) struct PartRuleset {
    ruleset: RulesetCreated,
    layers: u32,
    files: Arc<SeenFiles>,
}

impl PartRuleset {
    /// The look at the read files the rules were made from.
    pub(super) fn files(&self) -> &Arc<SeenFiles> {
        &self.files
    }

    /// A duplicate of the ruleset's fd: a rule added through either is in
    /// both (one ruleset).
    pub(super) fn dup_fd(&self) -> io::Result<OwnedFd> {
        into_fd(self.ruleset.try_clone()?)
    }
}

/// The first part of a call's ruleset (see [`PartRuleset`]): the allowed
/// dirs, the private tmp, the read paths' dirs and the read files of
/// `files`.
pub(super) fn start_ruleset(
    grants: &Grants,
    tmp: Option<&OwnedFd>,
    abi: u32,
    files: Arc<SeenFiles>,
) -> io::Result<PartRuleset> {
    let fs = handled_fs(abi);
    let net = if abi >= 4 && !grants.allow_network {
        AccessNet::BindTcp | AccessNet::ConnectTcp
    } else {
        BitFlags::EMPTY
    };
    let scoped = if abi >= 6 {
        Scope::AbstractUnixSocket | Scope::Signal
    } else {
        BitFlags::EMPTY
    };
    let mut ruleset = create_ruleset(fs, net, scoped)?;
    // Read-write dirs: everything but device nodes (a root tool could otherwise
    // make a block device of the host's disk in the workspace and open it).
    let rw = fs & !(AccessFs::MakeChar | AccessFs::MakeBlock | AccessFs::IoctlDev);
    let ro_dir = read_only_dir();
    for (mount, (_, dir)) in grants.mounts.iter().zip(grants.mount_dirs.iter()) {
        let access = if mount.read_only { ro_dir } else { rw };
        ruleset = add_rule(ruleset, dir.as_fd(), access)?;
    }
    if let Some(tmp) = tmp {
        ruleset = add_rule(ruleset, tmp.as_fd(), rw)?;
    }
    let read = read_paths(&grants.read_paths);
    for fd in &read.dirs {
        ruleset = add_rule(ruleset, fd.as_fd(), ro_dir)?;
    }
    for (fd, dir) in &files.opened {
        ruleset = add_rule(ruleset, fd.as_fd(), file_access(*dir))?;
    }
    let mut layers = Layer::LandlockFs.bit();
    if !net.is_empty() {
        layers |= Layer::LandlockNet.bit();
    }
    if !scoped.is_empty() {
        layers |= Layer::LandlockScope.bit();
    }
    Ok(PartRuleset {
        ruleset,
        layers,
        files,
    })
}

/// Rights of a rule on a read path: a directory's, or those of them that
/// make sense on a file.
fn file_access(dir: bool) -> BitFlags<AccessFs> {
    if dir {
        read_only_dir()
    } else {
        read_only_dir() & file_rights()
    }
}

/// The rest of the call's ruleset, opened now: `/dev/null`, and the read
/// files that are opened at every call (symlinks, mounts). Returns the
/// ruleset's fd and the layers it carries.
pub(super) fn finish_ruleset(part: PartRuleset, abi: u32) -> io::Result<(OwnedFd, u32)> {
    let fs = handled_fs(abi);
    let PartRuleset {
        mut ruleset,
        layers,
        files,
    } = part;
    let null = open_path(Path::new("/dev/null"))?;
    ruleset = add_rule(
        ruleset,
        null.as_fd(),
        (AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev) & fs,
    )?;
    for path in &files.per_call {
        if let Ok(fd) = open_path(path) {
            ruleset = add_rule(ruleset, fd.as_fd(), file_access(is_dir(&fd)))?;
        }
    }
    Ok((into_fd(ruleset)?, layers))
}

/// The `off` level's Landlock domain: it handles (and so denies) only making
/// block devices, which no tool needs, and on ABI 6+ scopes signals; the
/// domain itself is the point (see `apply_in_tool`).
pub(super) fn minimal_ruleset(abi: u32) -> io::Result<OwnedFd> {
    let scoped = if abi >= 6 {
        BitFlags::from(Scope::Signal)
    } else {
        BitFlags::EMPTY
    };
    let ruleset = create_ruleset(AccessFs::MakeBlock.into(), BitFlags::EMPTY, scoped)?;
    into_fd(ruleset)
}

/// The crate's error, as the `io::Error` the rest of the hardening reports.
fn ll(e: RulesetError) -> io::Error {
    io::Error::other(e)
}
