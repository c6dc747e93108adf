//! Kernel isolation of a `direct` tool on Linux (see [`crate::isolation`]).
//!
//! Split in two halves:
//! - [`prepare`] runs in toolhost before the spawn and does everything that may
//!   allocate or fail slowly: it builds the Landlock ruleset (an fd), picks the
//!   seccomp program (built once per process), finds the shared empty network
//!   namespace (created once), and creates the call's private tmp.
//! - [`apply_in_tool`] runs in the tool process between clone and exec, and
//!   only makes system calls: setns, capability bounding-set drops,
//!   no_new_privs, landlock_restrict_self, seccomp. It records which layers it
//!   applied in the supervisor's memory (the tool shares it until exec).
//!
//! Order in the tool: setns first (it needs CAP_SYS_ADMIN, and the seccomp
//! filter refuses it), then the capability drops, no_new_privs, Landlock, and
//! the seccomp filter last.
//!
//! The supervisor applies the namespaces the tool is created in (see
//! `supervisor`): an unprivileged toolhost's user namespace ([`shared_userns`],
//! entered with setns) and the call's PID namespace (unshare).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, mpsc};

use libc::c_int;

use crate::isolation::{IsolationLevel, Layer};
use crate::outcome::{Outcome, OutcomeKind};
use crate::plan::ExecPlan;

// ---------------------------------------------------------------- Landlock

const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
const LANDLOCK_RULE_PATH_BENEATH: libc::c_int = 1;

const FS_EXECUTE: u64 = 1 << 0;
const FS_WRITE_FILE: u64 = 1 << 1;
const FS_READ_FILE: u64 = 1 << 2;
const FS_READ_DIR: u64 = 1 << 3;
const FS_MAKE_CHAR: u64 = 1 << 6;
const FS_MAKE_BLOCK: u64 = 1 << 11;
/// ABI 1: rights 0..=12.
const FS_ABI1: u64 = (1 << 13) - 1;
const FS_REFER: u64 = 1 << 13;
const FS_TRUNCATE: u64 = 1 << 14;
const FS_IOCTL_DEV: u64 = 1 << 15;
/// Rights that make sense on a file (the kernel refuses others on a file rule).
const FS_FILE_RIGHTS: u64 = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV;
const NET_BIND_TCP: u64 = 1 << 0;
const NET_CONNECT_TCP: u64 = 1 << 1;
const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
const SCOPE_SIGNAL: u64 = 1 << 1;

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
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

fn handled_fs(abi: u32) -> u64 {
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

fn create_ruleset(fs: u64, net: u64, scoped: u64, abi: u32) -> io::Result<OwnedFd> {
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

fn add_rule(ruleset: &OwnedFd, parent: RawFd, access: u64) -> io::Result<()> {
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

fn open_path(p: &Path) -> io::Result<OwnedFd> {
    use std::os::unix::ffi::OsStrExt;
    let c = CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL byte"))?;
    // SAFETY: open with a valid C string.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn is_dir(fd: &OwnedFd) -> bool {
    // SAFETY: fstat only writes the struct; O_PATH fds support fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    unsafe {
        libc::fstat(fd.as_raw_fd(), &mut st) == 0 && (st.st_mode & libc::S_IFMT) == libc::S_IFDIR
    }
}

/// One entry of `isolation_read_paths`, as the ruleset needs it.
enum ReadPath {
    /// A directory, opened once per process (system dirs are not replaced).
    Dir(OwnedFd),
    /// Anything else, opened per call; paths that do not exist grant nothing.
    File(PathBuf),
}

/// The read paths of a sandbox, with their directories opened (once per
/// distinct list and process).
fn read_paths(paths: &Arc<[PathBuf]>) -> Arc<Vec<ReadPath>> {
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
fn build_ruleset(plan: &ExecPlan, tmp: Option<&OwnedFd>, abi: u32) -> io::Result<(OwnedFd, u32)> {
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

// ---------------------------------------------------------------- seccomp

/// BPF_LD | BPF_W | BPF_ABS (the first two are 0).
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JMP_JEQ_K: u16 = 0x05 | 0x10;
const BPF_JMP_JGE_K: u16 = 0x05 | 0x30;
const BPF_JMP_JSET_K: u16 = 0x05 | 0x40;
const BPF_RET_K: u16 = 0x06;
const RET_ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
const RET_KILL: u32 = libc::SECCOMP_RET_KILL_PROCESS;
const fn ret_errno(e: c_int) -> u32 {
    libc::SECCOMP_RET_ERRNO | (e as u32 & 0xffff)
}
const OFFSET_NR: u32 = 0;
const OFFSET_ARCH: u32 = 4;
/// Low 32 bits of the first argument (little-endian).
const OFFSET_ARG0: u32 = 16;
/// Low 32 bits of argument `n`.
const fn offset_arg(n: u8) -> u32 {
    OFFSET_ARG0 + 8 * n as u32
}
/// The set-user-ID and set-group-ID mode bits.
const SETID_BITS: u32 = libc::S_ISUID | libc::S_ISGID;
/// Open flags that create a file, and so use the mode argument.
const CREATE_FLAGS: u32 = (libc::O_CREAT | (libc::O_TMPFILE & !libc::O_DIRECTORY)) as u32;
/// Low 32 bits of the instruction pointer.
const OFFSET_IP: u32 = 8;

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// Namespace flags `clone` may not carry in the tool.
const CLONE_NS_FLAGS: u32 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET) as u32;

/// Syscalls no tool needs, refused with EPERM: debugging and reading other
/// processes, kernel keyrings, eBPF, mounts and namespaces, io_uring (it can
/// open sockets and files outside the filter's view), perf, modules, kexec,
/// swap, reboot, clocks, host names, file handles (open_by_handle_at escapes
/// path-based confinement).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
const DENIED_SYSCALLS: &[libc::c_long] = &[
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_bpf,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_mount_setattr,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_perf_event_open,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_reboot,
    libc::SYS_acct,
    libc::SYS_userfaultfd,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_quotactl,
    libc::SYS_syslog,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_clock_adjtime,
    libc::SYS_adjtimex,
    libc::SYS_sethostname,
    libc::SYS_setdomainname,
    libc::SYS_vhangup,
    libc::SYS_lookup_dcookie,
    libc::SYS_kcmp,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_iopl,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_ioperm,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_modify_ldt,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_uselib,
];

/// The names of [`DENIED_SYSCALLS`], for reports.
pub(crate) const DENIED_SYSCALL_NAMES: &str = "connect and sockets other than unix while the network is off, chmod, fchmod, fchmodat, fchmodat2, mknod, mknodat, creat, open and openat with a set-user-ID or set-group-ID mode, openat2 (ENOSYS, so libc falls back to openat), ptrace, process_vm_readv/writev, keyctl, add_key, request_key, bpf, mount and the new mount API, umount2, pivot_root, chroot, unshare, setns, clone with namespace flags, clone3 (ENOSYS, so libc falls back to clone), io_uring_*, perf_event_open, kexec_*, *_module, swapon/off, reboot, acct, userfaultfd, open_by_handle_at, name_to_handle_at, quotactl, syslog, clock and time setting, sethostname, setdomainname, vhangup, lookup_dcookie, kcmp";

fn stmt(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// What the filter does with one syscall number.
#[derive(Debug, Clone, Copy)]
enum Action {
    Errno(c_int),
    /// `clone`: EPERM when the flags ask for a namespace.
    CloneFlags,
    /// `socket`: EPERM unless the family is `AF_UNIX`.
    UnixOnly,
    /// chmod, mknod and the creating opens: EPERM when the mode (argument
    /// `mode`) carries a set-user-ID or set-group-ID bit; for opens
    /// (`flags: Some(arg)`), only when the flags create a file.
    NoSetId {
        mode: u8,
        flags: Option<u8>,
    },
}

impl Action {
    fn code(self) -> Vec<libc::sock_filter> {
        let eperm = ret_errno(libc::EPERM);
        match self {
            Action::Errno(e) => vec![stmt(BPF_RET_K, ret_errno(e))],
            Action::CloneFlags => vec![
                stmt(BPF_LD_W_ABS, OFFSET_ARG0),
                jump(BPF_JMP_JSET_K, CLONE_NS_FLAGS, 0, 1),
                stmt(BPF_RET_K, eperm),
                stmt(BPF_RET_K, RET_ALLOW),
            ],
            Action::UnixOnly => vec![
                stmt(BPF_LD_W_ABS, OFFSET_ARG0),
                jump(BPF_JMP_JEQ_K, libc::AF_UNIX as u32, 1, 0),
                stmt(BPF_RET_K, eperm),
                stmt(BPF_RET_K, RET_ALLOW),
            ],
            Action::NoSetId { mode, flags } => {
                let mut f = Vec::new();
                if let Some(flags) = flags {
                    // Not creating: the mode is unused; allow (3 ahead).
                    f.push(stmt(BPF_LD_W_ABS, offset_arg(flags)));
                    f.push(jump(BPF_JMP_JSET_K, CREATE_FLAGS, 0, 3));
                }
                f.extend([
                    stmt(BPF_LD_W_ABS, offset_arg(mode)),
                    jump(BPF_JMP_JSET_K, SETID_BITS, 0, 1),
                    stmt(BPF_RET_K, eperm),
                    stmt(BPF_RET_K, RET_ALLOW),
                ]);
                f
            }
        }
    }
}

/// A binary search over the sorted syscall numbers, each leaf ending in
/// ALLOW: a syscall costs about log2(n) comparisons, and so does the kernel's
/// per-number cache computation when the filter is attached (a linear list of
/// 60 numbers made every spawn about 0.3 ms slower, measured).
fn search(entries: &[(u32, Action)]) -> Vec<libc::sock_filter> {
    if entries.len() <= 3 {
        let mut f = Vec::new();
        for &(nr, action) in entries {
            let code = action.code();
            f.push(jump(BPF_JMP_JEQ_K, nr, 0, code.len() as u8));
            f.extend(code);
        }
        f.push(stmt(BPF_RET_K, RET_ALLOW));
        return f;
    }
    let mid = entries.len() / 2;
    let left = search(&entries[..mid]);
    let right = search(&entries[mid..]);
    // Jump offsets are 8 bits; the tree keeps each half far below that.
    let skip = u8::try_from(left.len()).unwrap_or(u8::MAX);
    let mut f = vec![jump(BPF_JMP_JGE_K, entries[mid].0, skip, 0)];
    f.extend(left);
    f.extend(right);
    f
}

/// The start of both filters: the architecture check, then the syscall
/// number loaded.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn prologue() -> Vec<libc::sock_filter> {
    let mut f = vec![
        // A load the kernel cannot treat as constant, first. When a filter is
        // attached, the kernel runs it in an emulator for every syscall
        // number of every ABI, to cache the ones it always allows; it stops
        // at the first non-constant load. Without this, that emulation is
        // most of the filter's cost (about 0.2 ms per tool, measured: it is
        // paid in every process, since each call attaches the filter anew),
        // while running the JIT-compiled filter on each syscall instead
        // costs nanoseconds. The value is overwritten by the next load.
        stmt(BPF_LD_W_ABS, OFFSET_IP),
        stmt(BPF_LD_W_ABS, OFFSET_ARCH),
        jump(BPF_JMP_JEQ_K, AUDIT_ARCH, 1, 0),
        // Another ABI (i386 through int 0x80): no tool here needs it, and its
        // syscall numbers differ from the ones checked below.
        stmt(BPF_RET_K, RET_KILL),
        stmt(BPF_LD_W_ABS, OFFSET_NR),
    ];
    if cfg!(target_arch = "x86_64") {
        // x32 syscalls (bit 30) would alias the numbers below.
        f.push(jump(BPF_JMP_JGE_K, 0x4000_0000, 0, 1));
        f.push(stmt(BPF_RET_K, ret_errno(libc::EPERM)));
    }
    f
}

/// No set-user-ID or set-group-ID file: not by chmod, nor created so.
/// openat2 passes its mode in memory: ENOSYS makes libc and runtimes fall
/// back to openat.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn no_setid_entries() -> Vec<(u32, Action)> {
    let no_setid = |mode, flags| Action::NoSetId { mode, flags };
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
    let mut entries = vec![
        (libc::SYS_fchmod as u32, no_setid(1, None)),
        (libc::SYS_fchmodat as u32, no_setid(2, None)),
        (libc::SYS_fchmodat2 as u32, no_setid(2, None)),
        (libc::SYS_mknodat as u32, no_setid(2, None)),
        (libc::SYS_openat as u32, no_setid(3, Some(2))),
        (libc::SYS_openat2 as u32, Action::Errno(libc::ENOSYS)),
    ];
    #[cfg(target_arch = "x86_64")]
    entries.extend([
        (libc::SYS_chmod as u32, no_setid(1, None)),
        (libc::SYS_mknod as u32, no_setid(1, None)),
        (libc::SYS_creat as u32, no_setid(1, None)),
        (libc::SYS_open as u32, no_setid(2, Some(1))),
    ]);
    entries
}

/// The tool's seccomp filter; with `network_off`, sockets of any family but
/// `AF_UNIX` are refused too.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn build_filter(network_off: bool) -> Vec<libc::sock_filter> {
    let mut f = prologue();
    let mut entries: Vec<(u32, Action)> = DENIED_SYSCALLS
        .iter()
        .map(|&nr| (nr as u32, Action::Errno(libc::EPERM)))
        .collect();
    // clone3 passes its flags in memory, where a filter cannot look: ENOSYS
    // makes libc fall back to clone, whose flags are checked.
    entries.push((libc::SYS_clone3 as u32, Action::Errno(libc::ENOSYS)));
    entries.push((libc::SYS_clone as u32, Action::CloneFlags));
    entries.extend(no_setid_entries());
    if network_off {
        entries.push((libc::SYS_socket as u32, Action::UnixOnly));
        // Only unix sockets exist then, and connecting one reaches a host
        // daemon by path (docker.sock and friends), which Landlock before ABI 8
        // does not confine. socketpair() still works.
        entries.push((libc::SYS_connect as u32, Action::Errno(libc::EPERM)));
    }
    entries.sort_by_key(|e| e.0);
    entries.dedup_by_key(|e| e.0);
    f.extend(search(&entries));
    f
}

/// The filter the docker backend's helper puts on a container's tool
/// (contract case 42 there): no set-user-ID or set-group-ID file, by chmod,
/// mknod or a creating open; openat2 ENOSYS (its mode is in memory);
/// io_uring refused (its opens are out of the filter's sight). The engine's
/// own profile does the rest. Other ABIs are killed, as in [`build_filter`].
/// As the kernel takes it: 8-byte `sock_filter` records, native byte order.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub(crate) fn container_filter() -> Vec<u8> {
    let mut f = prologue();
    let mut entries = no_setid_entries();
    entries.extend([
        (libc::SYS_io_uring_setup as u32, Action::Errno(libc::EPERM)),
        (libc::SYS_io_uring_enter as u32, Action::Errno(libc::EPERM)),
        (
            libc::SYS_io_uring_register as u32,
            Action::Errno(libc::EPERM),
        ),
    ]);
    entries.sort_by_key(|e| e.0);
    f.extend(search(&entries));
    let mut bytes = Vec::with_capacity(f.len() * 8);
    for i in f {
        bytes.extend_from_slice(&i.code.to_ne_bytes());
        bytes.push(i.jt);
        bytes.push(i.jf);
        bytes.extend_from_slice(&i.k.to_ne_bytes());
    }
    bytes
}

/// The filter for this network setting, built once per process; `None` on
/// architectures the filter does not know.
fn seccomp_filter(network_off: bool) -> Option<&'static [libc::sock_filter]> {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    {
        static OFF: OnceLock<Vec<libc::sock_filter>> = OnceLock::new();
        static ON: OnceLock<Vec<libc::sock_filter>> = OnceLock::new();
        let cell = if network_off { &OFF } else { &ON };
        Some(cell.get_or_init(|| build_filter(network_off)).as_slice())
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        let _ = network_off;
        None
    }
}

/// Whether the kernel has seccomp filtering (`PR_GET_SECCOMP` answers).
pub(crate) fn seccomp_available() -> bool {
    // SAFETY: PR_GET_SECCOMP reads the calling thread's mode.
    let r = unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) };
    r >= 0 && seccomp_filter(true).is_some()
}

// ---------------------------------------------------------------- network namespace

/// An empty network namespace shared by the calls of this process, created
/// the first time it is needed (root only). Sharing it costs nothing per call,
/// where a new namespace per call costs about half a millisecond; the tools
/// cannot use it to meet each other: no interface is up, CAP_NET_ADMIN is
/// dropped (so none can be brought up), and abstract unix sockets are scoped
/// by Landlock on ABI 6+.
pub(crate) fn shared_netns() -> Result<RawFd, String> {
    static NS: OnceLock<Result<OwnedFd, String>> = OnceLock::new();
    NS.get_or_init(|| {
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return Err("toolhost is not root (setns needs CAP_SYS_ADMIN)".into());
        }
        // A namespace is per thread: make it on a thread of its own, which
        // exits afterwards, so no toolhost thread leaves the host's network.
        std::thread::Builder::new()
            .name("toolhost-netns".into())
            .spawn(|| {
                // SAFETY: affects only this thread.
                if unsafe { libc::unshare(libc::CLONE_NEWNET) } < 0 {
                    return Err(format!(
                        "unshare(CLONE_NEWNET): {}",
                        io::Error::last_os_error()
                    ));
                }
                let fd = unsafe {
                    libc::open(
                        c"/proc/thread-self/ns/net".as_ptr(),
                        libc::O_RDONLY | libc::O_CLOEXEC,
                    )
                };
                if fd < 0 {
                    return Err(format!(
                        "open /proc/thread-self/ns/net: {}",
                        io::Error::last_os_error()
                    ));
                }
                // SAFETY: a fresh fd.
                Ok(unsafe { OwnedFd::from_raw_fd(fd) })
            })
            .map_err(|e| format!("thread: {e}"))?
            .join()
            .map_err(|_| "netns thread panicked".to_string())?
    })
    .as_ref()
    .map(|fd| fd.as_raw_fd())
    .map_err(Clone::clone)
}

/// The user namespace (and the empty network namespace it owns) that an
/// unprivileged toolhost runs its tools in, created once per process: as
/// `(user ns fd, net ns fd)`. It maps only toolhost's own uid and gid (to
/// themselves), so a tool keeps its identity and gains no capability once it
/// execs (its uid is not 0 there); owning the namespace is what lets the
/// supervisor create a PID namespace and the tool enter the network one.
///
/// A namespace needs a single-threaded process to create it: a short-lived
/// forked child makes both, toolhost opens them through /proc and kills it.
pub(crate) fn shared_userns() -> Result<(RawFd, RawFd), String> {
    static NS: OnceLock<Result<(OwnedFd, OwnedFd), String>> = OnceLock::new();
    NS.get_or_init(make_userns)
        .as_ref()
        .map(|(u, n)| (u.as_raw_fd(), n.as_raw_fd()))
        .map_err(Clone::clone)
}

fn make_userns() -> Result<(OwnedFd, OwnedFd), String> {
    // SAFETY: these cannot fail.
    let (uid, gid, me) = unsafe { (libc::geteuid(), libc::getegid(), libc::getpid()) };
    if uid == 0 {
        return Err("toolhost is root: it needs no user namespace".into());
    }
    let uid_map = format!("{uid} {uid} 1\n");
    let gid_map = format!("{gid} {gid} 1\n");
    let mut fds = [0; 2];
    // SAFETY: socketpair writes two fds into the array.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    } < 0
    {
        return Err(format!("socketpair: {}", io::Error::last_os_error()));
    }
    // SAFETY: fresh fds owned by nobody else.
    let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: the child makes system calls only, on data prepared above.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", io::Error::last_os_error()));
    }
    if pid == 0 {
        // SAFETY: in the forked child: system calls only, then _exit.
        unsafe { userns_child(theirs.as_raw_fd(), me, &uid_map, &gid_map) }
    }
    drop(theirs);
    let received = receive_ns_fds(&ours);
    // SAFETY: our own child, not yet reaped: its pid cannot have been reused.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        while libc::waitpid(pid, std::ptr::null_mut(), 0) < 0
            && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
        {}
    }
    received
}

/// The namespace helper, in a forked copy of toolhost: makes the user and
/// network namespaces, writes the maps, and sends their fds back on `sock`
/// (with a status: the failed step and errno). The copy is made dumpable
/// (toolhost is not, which makes /proc/self/* root's and the maps unwritable)
/// only for the three writes, then not again, before it reads anything back.
unsafe fn userns_child(sock: c_int, parent: libc::pid_t, uid_map: &str, gid_map: &str) -> ! {
    unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        );
        if libc::getppid() != parent {
            libc::_exit(1);
        }
        let mut step: u8 = 0;
        if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) < 0 {
            step = 1;
        } else {
            libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0);
            if !write_proc(c"/proc/self/setgroups", b"deny") {
                step = 2;
            } else if !write_proc(c"/proc/self/uid_map", uid_map.as_bytes()) {
                step = 3;
            } else if !write_proc(c"/proc/self/gid_map", gid_map.as_bytes()) {
                step = 4;
            }
            let e = errno_byte();
            libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
            set_errno_raw(e);
        }
        let mut fds = [-1 as c_int; 2];
        if step == 0 {
            fds[0] = libc::open(
                c"/proc/self/ns/user".as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC,
            );
            fds[1] = libc::open(
                c"/proc/self/ns/net".as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC,
            );
            if fds[0] < 0 || fds[1] < 0 {
                step = 5;
            }
        }
        let mut msg = [step, errno_byte()];
        let mut iov = libc::iovec {
            iov_base: msg.as_mut_ptr().cast(),
            iov_len: msg.len(),
        };
        #[repr(C, align(8))]
        struct Cmsg([u8; 64]);
        let mut control = Cmsg([0; 64]);
        let mut hdr: libc::msghdr = std::mem::zeroed();
        hdr.msg_iov = &mut iov;
        hdr.msg_iovlen = 1;
        if step == 0 {
            let payload = (2 * std::mem::size_of::<c_int>()) as u32;
            hdr.msg_control = control.0.as_mut_ptr().cast();
            hdr.msg_controllen = libc::CMSG_SPACE(payload) as _;
            let c = libc::CMSG_FIRSTHDR(&hdr);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(payload) as _;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr().cast::<u8>(),
                libc::CMSG_DATA(c),
                payload as usize,
            );
        }
        libc::sendmsg(sock, &hdr, 0);
        libc::_exit(0)
    }
}

/// Receives the helper's status and, on success, the two namespace fds.
fn receive_ns_fds(sock: &OwnedFd) -> Result<(OwnedFd, OwnedFd), String> {
    let mut msg = [0u8; 2];
    let mut iov = libc::iovec {
        iov_base: msg.as_mut_ptr().cast(),
        iov_len: msg.len(),
    };
    #[repr(C, align(8))]
    struct Cmsg([u8; 64]);
    let mut control = Cmsg([0; 64]);
    // SAFETY: a zeroed msghdr is valid; the pointers set below outlive the call.
    let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
    hdr.msg_iov = &mut iov;
    hdr.msg_iovlen = 1;
    hdr.msg_control = control.0.as_mut_ptr().cast();
    hdr.msg_controllen = control.0.len() as _;
    let n = loop {
        // SAFETY: recvmsg into the buffers above.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut hdr, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        break n;
    };
    // Take ownership of any fds that came, whatever else happened.
    let mut got: Vec<OwnedFd> = Vec::new();
    // SAFETY: walks the control messages the kernel filled in.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&hdr);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let len = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let data = libc::CMSG_DATA(c);
                for k in 0..len / std::mem::size_of::<c_int>() {
                    let mut fd: c_int = 0;
                    std::ptr::copy_nonoverlapping(
                        data.add(k * std::mem::size_of::<c_int>()),
                        (&mut fd as *mut c_int).cast::<u8>(),
                        std::mem::size_of::<c_int>(),
                    );
                    if fd >= 0 {
                        got.push(OwnedFd::from_raw_fd(fd));
                    }
                }
            }
            c = libc::CMSG_NXTHDR(&hdr, c);
        }
    }
    if n != 2 {
        return Err("the namespace helper died".into());
    }
    if msg[0] != 0 {
        let what = [
            "",
            "unshare(CLONE_NEWUSER | CLONE_NEWNET)",
            "write setgroups",
            "write uid_map",
            "write gid_map",
            "open /proc/self/ns",
        ];
        return Err(format!(
            "{}: {}",
            what[msg[0] as usize % what.len()],
            io::Error::from_raw_os_error(msg[1] as i32)
        ));
    }
    let mut it = got.into_iter();
    match (it.next(), it.next()) {
        (Some(user), Some(net)) => Ok((user, net)),
        _ => Err("the namespace helper sent no namespaces".into()),
    }
}

fn set_errno_raw(e: u8) {
    // SAFETY: writes this thread's errno.
    unsafe { *libc::__errno_location() = c_int::from(e) };
}

/// Writes `data` to a /proc file in one write. Forked child only.
unsafe fn write_proc(path: &std::ffi::CStr, data: &[u8]) -> bool {
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return false;
        }
        let ok = libc::write(fd, data.as_ptr().cast(), data.len()) == data.len() as isize;
        libc::close(fd);
        ok
    }
}

fn errno_byte() -> u8 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(0)
        .clamp(0, 255) as u8
}

// ---------------------------------------------------------------- private tmp

/// The call's private `TMPDIR`: created before the spawn, removed (with what
/// the tool left in it) when the call is over.
pub(super) struct PrivateTmp {
    path: PathBuf,
    fd: OwnedFd,
}

impl PrivateTmp {
    fn create() -> io::Result<Self> {
        use std::os::unix::fs::DirBuilderExt;
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let base = std::env::temp_dir();
        // SAFETY: getpid cannot fail.
        let pid = unsafe { libc::getpid() };
        let mut last = None;
        for _ in 0..8 {
            let n = SEQ.fetch_add(1, Ordering::Relaxed);
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
            let path = base.join(format!("toolhost-tmp-{pid}-{n}-{nanos:08x}"));
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => {
                    let fd = open_path(&path)?;
                    return Ok(PrivateTmp { path, fd });
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("no free name")))
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }
}

fn remove_tmp(path: &Path) {
    // std's remove_dir_all does not follow symlinks the tool left.
    if let Err(e) = std::fs::remove_dir_all(path)
        && e.kind() != io::ErrorKind::NotFound
    {
        tracing::warn!(path = %path.display(), "direct backend: could not remove a call's private tmp: {e}");
    }
}

enum ReaperMsg {
    Remove(PathBuf),
    Flush(mpsc::Sender<()>),
}

/// Private tmps are removed on a thread of their own, off the call's path
/// (about 50 µs of directory removal per call, measured).
fn reaper() -> Option<&'static Mutex<mpsc::Sender<ReaperMsg>>> {
    static REAPER: OnceLock<Option<Mutex<mpsc::Sender<ReaperMsg>>>> = OnceLock::new();
    REAPER
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel::<ReaperMsg>();
            std::thread::Builder::new()
                .name("toolhost-tmp-reaper".into())
                .spawn(move || {
                    for msg in rx {
                        match msg {
                            ReaperMsg::Remove(p) => remove_tmp(&p),
                            ReaperMsg::Flush(ack) => {
                                let _ = ack.send(());
                            }
                        }
                    }
                })
                .ok()
                .map(|_| Mutex::new(tx))
        })
        .as_ref()
}

/// Waits until the private tmps of finished calls are removed (up to 10 s).
/// [`crate::Sandbox::shutdown`] calls it.
pub fn flush_private_tmps() {
    let Some(r) = reaper() else { return };
    let (ack, done) = mpsc::channel();
    let sent = r
        .lock()
        .map(|tx| tx.send(ReaperMsg::Flush(ack)).is_ok())
        .unwrap_or(false);
    if sent {
        let _ = done.recv_timeout(std::time::Duration::from_secs(10));
    }
}

impl Drop for PrivateTmp {
    fn drop(&mut self) {
        let path = std::mem::take(&mut self.path);
        let queued = reaper().is_some_and(|r| {
            r.lock()
                .map(|tx| tx.send(ReaperMsg::Remove(path.clone())).is_ok())
                .unwrap_or(false)
        });
        if !queued {
            remove_tmp(&path);
        }
    }
}

// ---------------------------------------------------------------- capabilities

/// Capabilities dropped from a root tool's bounding set when isolation is on
/// (they are gone after exec): CAP_FSETID (4: set-ID bits kept on write and
/// set for a group it is not in), CAP_LINUX_IMMUTABLE (9: immutable and
/// append-only flags), CAP_NET_ADMIN (12), CAP_SYS_MODULE (16), CAP_SYS_RAWIO
/// (17), CAP_SYS_PTRACE (19), CAP_SYS_ADMIN (21), CAP_SYS_BOOT (22),
/// CAP_SYS_NICE (23: priority, real-time scheduling, other processes'
/// priorities), CAP_SYS_RESOURCE (24: raising hard rlimits), CAP_SYS_TIME
/// (25), CAP_MKNOD (27), CAP_AUDIT_CONTROL (30), CAP_SETFCAP (31: file
/// capabilities), CAP_MAC_OVERRIDE (32), CAP_MAC_ADMIN (33), CAP_SYSLOG (34),
/// CAP_PERFMON (38), CAP_BPF (39), CAP_CHECKPOINT_RESTORE (40).
const DROPPED_CAPS: [libc::c_ulong; 20] = [
    4, 9, 12, 16, 17, 19, 21, 22, 23, 24, 25, 27, 30, 31, 32, 33, 34, 38, 39, 40,
];
/// CAP_NET_RAW, dropped too while the network is off.
const CAP_NET_RAW: libc::c_ulong = 13;
/// What the `off` level drops (as before isolation levels existed): the
/// capabilities that read another process's memory and environment through
/// /proc: CAP_SYS_PTRACE, CAP_SYS_ADMIN, CAP_PERFMON.
const PROC_PEEK_CAPS: [libc::c_ulong; 3] = [19, 21, 38];

// ---------------------------------------------------------------- the two halves

/// What the tool process needs, as plain values (no allocation after fork).
#[derive(Debug, Clone, Copy)]
pub(super) struct ToolHardening {
    /// Landlock ruleset to enforce, or -1.
    pub ruleset_fd: c_int,
    /// Layers the ruleset carries.
    pub ruleset_layers: u32,
    /// Landlock ABI (for the minimal domain of the `off` level).
    pub landlock_abi: u32,
    /// User namespace the supervisor enters (unprivileged toolhost), or -1.
    pub userns_fd: c_int,
    /// Network namespace to enter, or -1.
    pub netns_fd: c_int,
    /// Whether the supervisor runs the tool in a PID namespace of its own.
    pub pidns: bool,
    /// The seccomp program, or null.
    pub seccomp: *const libc::sock_filter,
    pub seccomp_len: u16,
    pub seccomp_layers: u32,
    /// Whether to drop capabilities from the bounding set (root only).
    pub drop_caps: bool,
    pub drop_net_raw: bool,
    /// Whether any layer failing stops the tool before exec.
    pub strict: bool,
    /// Whether to apply the kernel layers at all (level is not `off`).
    pub hardened: bool,
}

// SAFETY: the seccomp pointer points into a process-lifetime static.
unsafe impl Send for ToolHardening {}
// SAFETY: as above; only read.
unsafe impl Sync for ToolHardening {}

/// Everything prepared for one call; dropping it removes the private tmp and
/// closes the ruleset.
pub(super) struct Prepared {
    pub level: IsolationLevel,
    pub tool: ToolHardening,
    /// Layers this level wanted here.
    pub wanted: u32,
    /// Layers applied by toolhost itself (subreaper, private tmp).
    pub parent_applied: u32,
    pub tmp: Option<PrivateTmp>,
    /// The call's mount namespace over its protected paths, if any exist.
    pub mounts: Option<super::mounts::MountPlan>,
    _ruleset: Option<OwnedFd>,
}

/// Logs, once per process, why an unprivileged toolhost has no user namespace.
fn warn_once_userns(why: &str) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        tracing::warn!(
            "direct backend: no user namespace ({why}): tools run without pidns and netns; containment is the subreaper, the network is denied by seccomp and Landlock"
        );
    });
}

fn unavailable(layer: Layer, why: &str) -> Outcome {
    Outcome::new(
        OutcomeKind::IsolationUnavailable,
        format!(
            "isolation = \"strict\": {} cannot be applied on this host ({why}); the call did not run",
            layer.name()
        ),
    )
}

/// Prepares the isolation of one call. Fails only under `strict`.
pub(super) fn prepare(plan: &ExecPlan) -> Result<Prepared, Outcome> {
    let level = plan.isolation;
    let abi = landlock_abi();
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let mut tool = ToolHardening {
        ruleset_fd: -1,
        ruleset_layers: 0,
        landlock_abi: abi,
        userns_fd: -1,
        netns_fd: -1,
        pidns: false,
        seccomp: std::ptr::null(),
        seccomp_len: 0,
        seccomp_layers: 0,
        drop_caps: root,
        drop_net_raw: false,
        strict: level == IsolationLevel::Strict,
        hardened: level != IsolationLevel::Off,
    };
    let base = Layer::NoNewPrivs.bit() | Layer::Subreaper.bit();
    if level == IsolationLevel::Off {
        return Ok(Prepared {
            level,
            tool,
            wanted: base,
            parent_applied: Layer::Subreaper.bit(),
            tmp: None,
            mounts: None,
            _ruleset: None,
        });
    }
    let strict = level == IsolationLevel::Strict;
    let net_off = !plan.allow_network;
    let mut wanted = base
        | Layer::LandlockFs.bit()
        | Layer::LandlockScope.bit()
        | Layer::Seccomp.bit()
        | Layer::PrivateTmp.bit();
    if net_off {
        wanted |= Layer::LandlockNet.bit() | Layer::NetNamespace.bit() | Layer::SeccompNet.bit();
    }
    // Namespaces: as root directly; otherwise through toolhost's user
    // namespace, where the host allows unprivileged ones.
    let userns = if root {
        None
    } else {
        wanted |= Layer::UserNamespace.bit();
        match shared_userns() {
            Ok(fds) => Some(fds),
            Err(why) => {
                warn_once_userns(&why);
                None
            }
        }
    };
    if let Some((user, _)) = userns {
        tool.userns_fd = user;
    }
    tool.pidns = root || userns.is_some();
    wanted |= Layer::PidNamespace.bit();
    let mut parent_applied = Layer::Subreaper.bit();

    // Protected paths: a mount namespace over those that exist (the
    // supervisor makes it and reports the layer); none to hold is held.
    wanted |= Layer::ProtectedPaths.bit();
    let mounts = super::mounts::MountPlan::prepare(plan);
    if mounts.is_none() {
        parent_applied |= Layer::ProtectedPaths.bit();
    } else if !tool.pidns {
        // No namespaces at all here (neither root nor a user namespace).
        if strict {
            return Err(unavailable(
                Layer::ProtectedPaths,
                "holding the protected paths needs a mount namespace (root, or a user namespace)",
            ));
        }
        tracing::warn!(
            "direct backend: no mount namespace for this call: its protected paths are not held"
        );
    }
    let mounts = mounts.filter(|_| tool.pidns);

    let tmp = match PrivateTmp::create() {
        Ok(t) => {
            parent_applied |= Layer::PrivateTmp.bit();
            Some(t)
        }
        Err(e) if strict => return Err(unavailable(Layer::PrivateTmp, &e.to_string())),
        Err(e) => {
            tracing::warn!("direct backend: no private tmp for this call: {e}");
            None
        }
    };

    let mut ruleset = None;
    match abi {
        0 if strict => {
            return Err(unavailable(Layer::LandlockFs, "the kernel has no Landlock"));
        }
        1 | 2 if strict => {
            return Err(unavailable(
                Layer::LandlockFs,
                "Landlock ABI below 3 cannot confine truncation",
            ));
        }
        1.. => match build_ruleset(plan, tmp.as_ref().map(|t| &t.fd), abi) {
            Ok((fd, layers)) => {
                tool.ruleset_fd = fd.as_raw_fd();
                tool.ruleset_layers = layers;
                ruleset = Some(fd);
            }
            Err(e) if strict => return Err(unavailable(Layer::LandlockFs, &e.to_string())),
            Err(e) => tracing::warn!("direct backend: no Landlock rules for this call: {e}"),
        },
        _ => {}
    }

    match seccomp_filter(net_off) {
        Some(f) if seccomp_available() => {
            tool.seccomp = f.as_ptr();
            tool.seccomp_len = f.len() as u16;
            tool.seccomp_layers =
                Layer::Seccomp.bit() | if net_off { Layer::SeccompNet.bit() } else { 0 };
        }
        _ if strict => {
            return Err(unavailable(
                Layer::Seccomp,
                "no seccomp filtering for this kernel or architecture",
            ));
        }
        _ => {}
    }

    if net_off {
        let netns = match userns {
            Some((_, net)) => Ok(net),
            None => shared_netns(),
        };
        match netns {
            Ok(fd) => tool.netns_fd = fd,
            Err(why) => {
                if tool.seccomp.is_null() && strict {
                    return Err(unavailable(Layer::NetNamespace, &why));
                }
            }
        }
        tool.drop_net_raw = true;
    }

    Ok(Prepared {
        level,
        tool,
        wanted,
        parent_applied,
        tmp,
        mounts,
        _ruleset: ruleset,
    })
}

/// Applies the layers in the tool process. Returns the applied layers, or
/// the layer that failed under `strict` (errno set).
///
/// # Safety
/// Only between clone and exec, in the tool process: system calls only.
pub(super) unsafe fn apply_in_tool(h: &ToolHardening) -> Result<u32, Layer> {
    unsafe {
        let mut applied = 0u32;
        if h.netns_fd >= 0 {
            if libc::setns(h.netns_fd, libc::CLONE_NEWNET) == 0 {
                applied |= Layer::NetNamespace.bit();
            } else if h.strict && h.seccomp.is_null() {
                return Err(Layer::NetNamespace);
            }
        }
        if h.drop_caps {
            // Dropped from the bounding set, they are gone from the tool
            // after exec.
            if h.hardened {
                for cap in DROPPED_CAPS {
                    libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
                }
                if h.drop_net_raw {
                    libc::prctl(libc::PR_CAPBSET_DROP, CAP_NET_RAW, 0, 0, 0);
                }
            } else {
                for cap in PROC_PEEK_CAPS {
                    libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
                }
            }
        }
        // No setuid/file-capability gains in the tool's tree (and the
        // precondition for an unprivileged Landlock domain and seccomp).
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 {
            return Err(Layer::NoNewPrivs);
        }
        applied |= Layer::NoNewPrivs.bit();
        if h.ruleset_fd >= 0 {
            let r = libc::syscall(
                libc::SYS_landlock_restrict_self,
                h.ruleset_fd,
                0 as libc::c_uint,
            );
            if r == 0 {
                applied |= h.ruleset_layers;
            } else if h.strict {
                return Err(Layer::LandlockFs);
            }
        } else if h.landlock_abi >= 1 {
            // Even unhardened, the tool gets a Landlock domain of its own: a
            // process in it cannot ptrace or read /proc/<pid>/environ of
            // processes outside it (and, on ABI 6+, cannot signal them).
            // Defence in depth (toolhost and the supervisor are non-dumpable
            // too), so a kernel refusing it does not stop the call.
            minimal_domain(h.landlock_abi);
        }
        if !h.seccomp.is_null() {
            let prog = libc::sock_fprog {
                len: h.seccomp_len,
                filter: h.seccomp.cast_mut(),
            };
            let r = libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                0 as libc::c_uint,
                &prog as *const libc::sock_fprog,
            );
            if r == 0 {
                applied |= h.seccomp_layers;
            } else if h.strict {
                return Err(Layer::Seccomp);
            }
        }
        Ok(applied)
    }
}

/// The `off` level's Landlock domain: it handles (and so denies) only making
/// block devices, which no tool needs; the domain itself is the point.
unsafe fn minimal_domain(abi: u32) {
    let attr = RulesetAttr {
        handled_access_fs: FS_MAKE_BLOCK,
        handled_access_net: 0,
        scoped: if abi >= 6 { SCOPE_SIGNAL } else { 0 },
    };
    let size = if abi >= 6 { 24usize } else { 8 };
    unsafe {
        let fd = libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &attr as *const RulesetAttr,
            size,
            0 as libc::c_uint,
        );
        if fd < 0 {
            return;
        }
        libc::syscall(
            libc::SYS_landlock_restrict_self,
            fd as c_int,
            0 as libc::c_uint,
        );
        libc::close(fd as c_int);
    }
}

#[cfg(all(test, any(target_arch = "x86_64", target_arch = "aarch64")))]
mod tests {
    use super::*;

    /// Runs a classic BPF program the way the kernel would, on one
    /// seccomp_data; returns the action and the number of steps taken.
    fn eval(f: &[libc::sock_filter], arch: u32, nr: u32, arg0: u32) -> (u32, usize) {
        eval_args(f, arch, nr, [arg0, 0, 0, 0])
    }

    fn eval_args(f: &[libc::sock_filter], arch: u32, nr: u32, args: [u32; 4]) -> (u32, usize) {
        let mut a = 0u32;
        let mut pc = 0usize;
        let mut steps = 0;
        loop {
            steps += 1;
            let i = f[pc];
            match i.code {
                BPF_LD_W_ABS => {
                    a = match i.k {
                        OFFSET_NR => nr,
                        OFFSET_ARCH => arch,
                        OFFSET_IP => 0x7fff_0000,
                        k if (OFFSET_ARG0..OFFSET_ARG0 + 32).contains(&k) && k % 8 == 0 => {
                            args[((k - OFFSET_ARG0) / 8) as usize]
                        }
                        k => panic!("load of offset {k}"),
                    }
                }
                BPF_RET_K => return (i.k, steps),
                BPF_JMP_JEQ_K | BPF_JMP_JGE_K | BPF_JMP_JSET_K => {
                    let taken = match i.code {
                        BPF_JMP_JEQ_K => a == i.k,
                        BPF_JMP_JGE_K => a >= i.k,
                        _ => a & i.k != 0,
                    };
                    pc += usize::from(if taken { i.jt } else { i.jf });
                }
                c => panic!("unexpected opcode {c:#x}"),
            }
            pc += 1;
        }
    }

    #[test]
    fn the_filter_denies_exactly_its_list_and_stays_shallow() {
        for network_off in [false, true] {
            let f = build_filter(network_off);
            assert!(f.len() < 4096);
            // The kernel's constant-action cache emulation stops here.
            assert_eq!((f[0].code, f[0].k), (BPF_LD_W_ABS, OFFSET_IP));
            let eperm = ret_errno(libc::EPERM);
            let mut deepest = 0;
            for nr in 0..1024u32 {
                let (action, steps) = eval(&f, AUDIT_ARCH, nr, 0);
                deepest = deepest.max(steps);
                let denied = DENIED_SYSCALLS.iter().any(|&d| d as u32 == nr);
                let want = if denied {
                    eperm
                } else if nr == libc::SYS_clone3 as u32 || nr == libc::SYS_openat2 as u32 {
                    ret_errno(libc::ENOSYS)
                } else if (nr == libc::SYS_socket as u32 || nr == libc::SYS_connect as u32)
                    && network_off
                {
                    eperm // socket: family 0 is not AF_UNIX
                } else {
                    RET_ALLOW
                };
                assert_eq!(action, want, "nr {nr}, network_off {network_off}");
            }
            // A binary search, not a list: a syscall costs a few comparisons.
            assert!(deepest <= 21, "deepest path {deepest}");
            // Arguments: namespaces in clone, socket families.
            let clone = libc::SYS_clone as u32;
            assert_eq!(
                eval(&f, AUDIT_ARCH, clone, libc::SIGCHLD as u32).0,
                RET_ALLOW
            );
            let ns = (libc::CLONE_NEWUSER | libc::SIGCHLD) as u32;
            assert_eq!(eval(&f, AUDIT_ARCH, clone, ns).0, eperm);
            let socket = libc::SYS_socket as u32;
            assert_eq!(
                eval(&f, AUDIT_ARCH, socket, libc::AF_UNIX as u32).0,
                RET_ALLOW
            );
            let inet = eval(&f, AUDIT_ARCH, socket, libc::AF_INET as u32).0;
            assert_eq!(inet, if network_off { eperm } else { RET_ALLOW });
            // Set-ID mode bits, by chmod and by creating opens; the plain
            // modes (and any mode without O_CREAT) are allowed.
            let at = |nr: libc::c_long, args| eval_args(&f, AUDIT_ARCH, nr as u32, args).0;
            for mode in [0o4755, 0o2755, 0o6777, 0o104755] {
                assert_eq!(at(libc::SYS_fchmod, [3, mode, 0, 0]), eperm, "{mode:o}");
                assert_eq!(at(libc::SYS_fchmodat, [3, 0, mode, 0]), eperm);
                assert_eq!(at(libc::SYS_fchmodat2, [3, 0, mode, 0]), eperm);
                assert_eq!(at(libc::SYS_mknodat, [3, 0, mode, 0]), eperm);
                let creat = libc::O_CREAT as u32 | libc::O_WRONLY as u32;
                assert_eq!(at(libc::SYS_openat, [3, 0, creat, mode]), eperm);
                let tmpfile = libc::O_TMPFILE as u32 | libc::O_RDWR as u32;
                assert_eq!(at(libc::SYS_openat, [3, 0, tmpfile, mode]), eperm);
                assert_eq!(at(libc::SYS_openat, [3, 0, 0, mode]), RET_ALLOW);
                let dir = libc::O_DIRECTORY as u32;
                assert_eq!(at(libc::SYS_openat, [3, 0, dir, mode]), RET_ALLOW);
                #[cfg(target_arch = "x86_64")]
                {
                    assert_eq!(at(libc::SYS_chmod, [0, mode, 0, 0]), eperm);
                    assert_eq!(at(libc::SYS_creat, [0, mode, 0, 0]), eperm);
                    assert_eq!(at(libc::SYS_mknod, [0, mode, 0, 0]), eperm);
                    assert_eq!(at(libc::SYS_open, [0, creat, mode, 0]), eperm);
                    assert_eq!(at(libc::SYS_open, [0, 0, mode, 0]), RET_ALLOW);
                }
            }
            for mode in [0o755, 0o1777, 0o644, 0o100644] {
                assert_eq!(at(libc::SYS_fchmod, [3, mode, 0, 0]), RET_ALLOW);
                assert_eq!(at(libc::SYS_fchmodat, [3, 0, mode, 0]), RET_ALLOW);
                let creat = libc::O_CREAT as u32 | libc::O_WRONLY as u32;
                assert_eq!(at(libc::SYS_openat, [3, 0, creat, mode]), RET_ALLOW);
                #[cfg(target_arch = "x86_64")]
                assert_eq!(at(libc::SYS_chmod, [0, mode, 0, 0]), RET_ALLOW);
            }
            // Another ABI is killed; x32 numbers are refused.
            assert_eq!(eval(&f, 0x4000_0003, 1, 0).0, RET_KILL);
            if cfg!(target_arch = "x86_64") {
                assert_eq!(eval(&f, AUDIT_ARCH, 0x4000_0000 | 59, 0).0, eperm);
            }
        }
    }
}
