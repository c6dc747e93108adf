//! seccomp: the classic-BPF filter of denied system calls (named in
//! `DENIED_SYSCALL_NAMES`), assembled once per process, and the set-ID
//! filter the docker helper installs in containers.

use std::sync::OnceLock;

use libc::c_int;

/// BPF_LD | BPF_W | BPF_ABS (the first two are 0).
pub(super) const BPF_LD_W_ABS: u16 = 0x20;
pub(super) const BPF_JMP_JEQ_K: u16 = 0x05 | 0x10;
pub(super) const BPF_JMP_JGE_K: u16 = 0x05 | 0x30;
pub(super) const BPF_JMP_JSET_K: u16 = 0x05 | 0x40;
pub(super) const BPF_RET_K: u16 = 0x06;
pub(super) const RET_ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
pub(super) const RET_KILL: u32 = libc::SECCOMP_RET_KILL_PROCESS;
pub(super) const fn ret_errno(e: c_int) -> u32 {
    libc::SECCOMP_RET_ERRNO | (e as u32 & 0xffff)
}
pub(super) const OFFSET_NR: u32 = 0;
pub(super) const OFFSET_ARCH: u32 = 4;
/// Low 32 bits of the first argument (little-endian).
pub(super) const OFFSET_ARG0: u32 = 16;
/// Low 32 bits of argument `n`.
pub(super) const fn offset_arg(n: u8) -> u32 {
    OFFSET_ARG0 + 8 * n as u32
}
/// The set-user-ID and set-group-ID mode bits.
pub(super) const SETID_BITS: u32 = libc::S_ISUID | libc::S_ISGID;
/// Open flags that create a file, and so use the mode argument.
pub(super) const CREATE_FLAGS: u32 =
    (libc::O_CREAT | (libc::O_TMPFILE & !libc::O_DIRECTORY)) as u32;
/// Low 32 bits of the instruction pointer.
pub(super) const OFFSET_IP: u32 = 8;

#[cfg(target_arch = "x86_64")]
pub(super) const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
pub(super) const AUDIT_ARCH: u32 = 0xC000_00B7;

/// Namespace flags `clone` may not carry in the tool.
pub(super) const CLONE_NS_FLAGS: u32 = (libc::CLONE_NEWNS
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
pub(super) const DENIED_SYSCALLS: &[libc::c_long] = &[
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

pub(super) fn stmt(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

pub(super) fn jump(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// What the filter does with one syscall number.
#[derive(Debug, Clone, Copy)]
pub(super) enum Action {
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
    pub(super) fn code(self) -> Vec<libc::sock_filter> {
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
pub(super) fn search(entries: &[(u32, Action)]) -> Vec<libc::sock_filter> {
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
pub(super) fn prologue() -> Vec<libc::sock_filter> {
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
pub(super) fn no_setid_entries() -> Vec<(u32, Action)> {
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
pub(super) fn build_filter(network_off: bool) -> Vec<libc::sock_filter> {
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
pub(super) fn seccomp_filter(network_off: bool) -> Option<&'static [libc::sock_filter]> {
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

#[cfg(all(test, any(target_arch = "x86_64", target_arch = "aarch64")))]
mod tests {
    use super::*;

    /// Runs a classic BPF program the way the kernel would, on one
    /// seccomp_data; returns the action and the number of steps taken.
    pub(super) fn eval(f: &[libc::sock_filter], arch: u32, nr: u32, arg0: u32) -> (u32, usize) {
        eval_args(f, arch, nr, [arg0, 0, 0, 0])
    }

    pub(super) fn eval_args(
        f: &[libc::sock_filter],
        arch: u32,
        nr: u32,
        args: [u32; 4],
    ) -> (u32, usize) {
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
    pub(super) fn the_filter_denies_exactly_its_list_and_stays_shallow() {
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
