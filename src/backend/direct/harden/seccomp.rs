//! seccomp: the filter of denied system calls a direct tool runs under,
//! and the set-ID filter the docker helper installs in containers.
//!
//! The policy is data: [`DENIED_SYSCALLS`], the ENOSYS list and the
//! argument rules below. The tool's program is assembled from it
//! ([`assemble`]). The container filter's is compiled by `seccompiler`, one
//! program per action (EPERM, ENOSYS); [`chain`] joins them into one
//! program, and [`finish`] adds the two instructions seccompiler has no
//! words for (a first load the kernel cannot treat as constant, and the
//! x32 guard). Both splices check the shape they rely on. seccompiler's
//! program for the tool's policy is the tests' reference for the assembled
//! one, and the tests run each on every syscall number.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use libc::c_int;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// The classic-BPF opcodes the splices write and check.
pub(super) const BPF_LD_W_ABS: u16 = 0x20;
pub(super) const BPF_JMP_JA: u16 = 0x05;
pub(super) const BPF_JMP_JEQ_K: u16 = 0x05 | 0x10;
pub(super) const BPF_JMP_JGE_K: u16 = 0x05 | 0x30;
pub(super) const BPF_RET_K: u16 = 0x06;
pub(super) const RET_ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
pub(super) const RET_KILL: u32 = libc::SECCOMP_RET_KILL_PROCESS;
pub(super) const fn ret_errno(e: c_int) -> u32 {
    libc::SECCOMP_RET_ERRNO | (e as u32 & 0xffff)
}
/// Offsets into `struct seccomp_data`.
pub(super) const OFFSET_NR: u32 = 0;
pub(super) const OFFSET_ARCH: u32 = 4;
/// Low 32 bits of the instruction pointer.
pub(super) const OFFSET_IP: u32 = 8;
/// The set-user-ID and set-group-ID mode bits.
pub(super) const SETID_BITS: [u32; 2] = [libc::S_ISUID, libc::S_ISGID];
/// Open flags that create a file, and so use the mode argument
/// (`O_TMPFILE` without the `O_DIRECTORY` it carries).
pub(super) const CREATE_FLAGS: [u32; 2] = [
    libc::O_CREAT as u32,
    (libc::O_TMPFILE & !libc::O_DIRECTORY) as u32,
];

#[cfg(target_arch = "x86_64")]
pub(super) const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
pub(super) const AUDIT_ARCH: u32 = 0xC000_00B7;
#[cfg(target_arch = "x86_64")]
const TARGET_ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const TARGET_ARCH: TargetArch = TargetArch::aarch64;

/// The bits of a socket's type argument that name the type (the kernel's
/// `SOCK_TYPE_MASK`); the others are flags (`SOCK_NONBLOCK`, `SOCK_CLOEXEC`).
pub(super) const SOCK_TYPE_MASK: u32 = 0xf;
/// The socket types a tool may make while the network is off: unix sockets
/// that must be connected to carry data. A datagram unix socket
/// (`SOCK_DGRAM`, or `SOCK_RAW`, which a unix socket turns into one) can
/// `sendto` any host datagram socket by its path (`/dev/log`, journald's),
/// connected or not, even one of a `socketpair`; so it is refused, and
/// `connect` is.
pub(super) const LOCAL_SOCKET_TYPES: [u32; 2] =
    [libc::SOCK_STREAM as u32, libc::SOCK_SEQPACKET as u32];

/// Namespace flags `clone` may not carry in the tool.
pub(super) const CLONE_NS_FLAGS: u32 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET) as u32;

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
/// Syscalls no tool needs, refused with EPERM: debugging and reading other
/// processes, kernel keyrings, eBPF, mounts and namespaces, io_uring (it can
/// open sockets and files outside the filter's view), perf, modules, kexec,
/// swap, reboot, clocks, host names, file handles (open_by_handle_at escapes
/// path-based confinement).
pub(super) const DENIED_SYSCALLS: &[libc::c_long] = &[
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_pidfd_getfd,
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
pub(crate) const DENIED_SYSCALL_NAMES: &str = "while the network is off, connect and sockets (and pairs) other than unix stream and seqpacket ones; chmod, fchmod, fchmodat, fchmodat2, mknod, mknodat, creat, open and openat with a set-user-ID or set-group-ID mode, openat2 (ENOSYS, so libc falls back to openat), ptrace, process_vm_readv/writev, pidfd_getfd, keyctl, add_key, request_key, bpf, mount and the new mount API, umount2, pivot_root, chroot, unshare, setns, clone with namespace flags, clone3 (ENOSYS, so libc falls back to clone), io_uring_*, perf_event_open, kexec_*, *_module, swapon/off, reboot, acct, userfaultfd, open_by_handle_at, name_to_handle_at, quotactl, syslog, clock and time setting, sethostname, setdomainname, vhangup, lookup_dcookie, kcmp";

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
/// Why a filter could not be built: seccompiler refused the rules, or its
/// program did not have the shape the splices rely on.
#[derive(Debug)]
pub(crate) enum FilterError {
    Compile(seccompiler::BackendError),
    Shape(&'static str),
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
impl std::fmt::Display for FilterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FilterError::Compile(e) => write!(f, "seccomp filter: {e}"),
            FilterError::Shape(what) => write!(f, "seccomp filter: unexpected program: {what}"),
        }
    }
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
impl From<seccompiler::BackendError> for FilterError {
    fn from(e: seccompiler::BackendError) -> Self {
        FilterError::Compile(e)
    }
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
/// Rules per syscall number; an empty list matches on the number alone.
type Rules = BTreeMap<i64, Vec<SeccompRule>>;

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
/// Argument `arg` (its low 32 bits) has bit `bit` set.
fn has_bit(arg: u8, bit: u32) -> Result<SeccompCondition, FilterError> {
    Ok(SeccompCondition::new(
        arg,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::MaskedEq(u64::from(bit)),
        u64::from(bit),
    )?)
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
/// Argument `arg` has any bit of `bits` set: one rule per bit (the rules of
/// a syscall are alternatives).
fn any_bit(arg: u8, bits: u32) -> Result<Vec<SeccompRule>, FilterError> {
    (0..32)
        .map(|i| 1u32 << i)
        .filter(|b| bits & b != 0)
        .map(|b| Ok(SeccompRule::new(vec![has_bit(arg, b)?])?))
        .collect()
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
/// A set-user-ID or set-group-ID bit in the mode (argument `mode`); for
/// opens (`flags: Some(arg)`), only when the flags create a file (the mode
/// is unused otherwise).
fn setid_mode(mode: u8, flags: Option<u8>) -> Result<Vec<SeccompRule>, FilterError> {
    let mut rules = Vec::new();
    for id in SETID_BITS {
        match flags {
            None => rules.push(SeccompRule::new(vec![has_bit(mode, id)?])?),
            Some(flags) => {
                for create in CREATE_FLAGS {
                    rules.push(SeccompRule::new(vec![
                        has_bit(flags, create)?,
                        has_bit(mode, id)?,
                    ])?);
                }
            }
        }
    }
    Ok(rules)
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
/// No set-user-ID or set-group-ID file: not by chmod, nor created so.
fn no_setid_rules(rules: &mut Rules) -> Result<(), FilterError> {
    rules.insert(libc::SYS_fchmod, setid_mode(1, None)?);
    rules.insert(libc::SYS_fchmodat, setid_mode(2, None)?);
    rules.insert(libc::SYS_fchmodat2, setid_mode(2, None)?);
    rules.insert(libc::SYS_mknodat, setid_mode(2, None)?);
    rules.insert(libc::SYS_openat, setid_mode(3, Some(2))?);
    #[cfg(target_arch = "x86_64")]
    {
        rules.insert(libc::SYS_chmod, setid_mode(1, None)?);
        rules.insert(libc::SYS_mknod, setid_mode(1, None)?);
        rules.insert(libc::SYS_creat, setid_mode(1, None)?);
        rules.insert(libc::SYS_open, setid_mode(2, Some(1))?);
    }
    Ok(())
}

#[cfg(all(test, any(target_arch = "x86_64", target_arch = "aarch64")))]
/// What a direct tool is refused with EPERM; with `network_off`, sockets
/// (and socket pairs) of any family but `AF_UNIX` or any type but
/// [`LOCAL_SOCKET_TYPES`], and connect: the policy as seccompiler rules, the
/// reference the assembled filter ([`assemble`]) is checked against.
fn eperm_rules(network_off: bool) -> Result<Rules, FilterError> {
    let mut rules: Rules = DENIED_SYSCALLS.iter().map(|&nr| (nr, Vec::new())).collect();
    rules.insert(libc::SYS_clone, any_bit(0, CLONE_NS_FLAGS)?);
    no_setid_rules(&mut rules)?;
    if network_off {
        // Refused if the family is not unix, or if the type is not a local
        // one. seccompiler has no masked "not equal": the types refused are
        // those with bit 0 clear, bit 1 set or bit 3 set (each a masked
        // equality), which leaves 1 and 5, as checked here on every type.
        const REFUSED_TYPES: [(u32, u32); 3] = [(0x1, 0), (0x2, 0x2), (0x8, 0x8)];
        for t in 0..=SOCK_TYPE_MASK {
            let refused = REFUSED_TYPES.iter().any(|&(m, v)| t & m == v);
            if refused == LOCAL_SOCKET_TYPES.contains(&t) {
                return Err(FilterError::Shape("socket type rules"));
            }
        }
        let mut local_only = vec![SeccompRule::new(vec![SeccompCondition::new(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Ne,
            libc::AF_UNIX as u64,
        )?])?];
        for (mask, value) in REFUSED_TYPES {
            local_only.push(SeccompRule::new(vec![SeccompCondition::new(
                1,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::MaskedEq(u64::from(mask)),
                u64::from(value),
            )?])?);
        }
        rules.insert(libc::SYS_socket, local_only.clone());
        rules.insert(libc::SYS_socketpair, local_only);
        // Only unix sockets exist then, and connecting one reaches a host
        // daemon by path (docker.sock and friends), which Landlock before ABI 8
        // does not confine. A pair of connected sockets still works.
        rules.insert(libc::SYS_connect, Vec::new());
    }
    Ok(rules)
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
/// What is refused with ENOSYS, so that libc and runtimes fall back to the
/// older call whose arguments the filter can see: clone3 passes its flags
/// in memory (the fallback is clone), openat2 its mode (openat).
fn enosys_rules() -> Rules {
    [libc::SYS_clone3, libc::SYS_openat2]
        .into_iter()
        .map(|nr| (nr, Vec::new()))
        .collect()
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
/// seccompiler's program for `rules`: matches return `errno`, the rest
/// is allowed.
fn compile(rules: Rules, errno: c_int) -> Result<Vec<libc::sock_filter>, FilterError> {
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno as u32),
        TARGET_ARCH,
    )?;
    let program = BpfProgram::try_from(filter)?;
    Ok(program
        .into_iter()
        .map(|i| libc::sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect())
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn stmt(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn jump(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
/// The length of seccompiler's architecture check, which every program it
/// makes starts with: load the arch, go on if it is ours, kill otherwise
/// (another ABI, such as i386 through int 0x80, numbers its syscalls
/// differently). The syscall number is loaded right after it.
const ARCH_CHECK: usize = 3;

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn is(i: &libc::sock_filter, code: u16, k: u32) -> bool {
    i.code == code && i.k == k
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
/// Checks the start the splices rely on: the arch check, whose only jump
/// lands on the load of the syscall number that follows it.
fn check_start(p: &[libc::sock_filter]) -> Result<(), FilterError> {
    let ok = p.len() > ARCH_CHECK
        && is(&p[0], BPF_LD_W_ABS, OFFSET_ARCH)
        && is(&p[1], BPF_JMP_JEQ_K, AUDIT_ARCH)
        && (p[1].jt, p[1].jf) == (1, 0)
        && is(&p[2], BPF_RET_K, RET_KILL)
        && is(&p[3], BPF_LD_W_ABS, OFFSET_NR);
    if ok {
        Ok(())
    } else {
        Err(FilterError::Shape("no architecture check at the start"))
    }
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
/// One program that runs `first` and, where `first` allows, `then`: each
/// ALLOW of `first` becomes a jump to `then`'s syscall-number load (its
/// arch check is `first`'s). Lengths are unchanged, so no other jump moves.
fn chain(
    mut first: Vec<libc::sock_filter>,
    then: &[libc::sock_filter],
) -> Result<Vec<libc::sock_filter>, FilterError> {
    check_start(&first)?;
    check_start(then)?;
    let end = first.len();
    for (i, ins) in first.iter_mut().enumerate() {
        if is(ins, BPF_RET_K, RET_ALLOW) {
            let k = u32::try_from(end - i - 1).map_err(|_| FilterError::Shape("too long"))?;
            *ins = stmt(BPF_JMP_JA, k);
        }
    }
    first.extend_from_slice(&then[ARCH_CHECK..]);
    Ok(first)
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
/// The program as installed:
/// - first, a load the kernel cannot treat as constant. When a filter is
///   attached, the kernel runs it in an emulator for every syscall number
///   of every ABI, to cache the ones it always allows; it stops at the
///   first non-constant load. Without this, that emulation is most of the
///   filter's cost (about 0.2 ms per tool, measured: it is paid in every
///   process, since each call attaches the filter anew), while running the
///   JIT-compiled filter on each syscall costs nanoseconds. The value is
///   overwritten by the next load;
/// - on x86_64, after the syscall number is loaded: x32 syscalls (bit 30)
///   refused, since they would alias the numbers the rules check.
///
/// Nothing before the insertion point jumps past it ([`check_start`]).
fn finish(p: Vec<libc::sock_filter>) -> Result<Vec<libc::sock_filter>, FilterError> {
    check_start(&p)?;
    let mut out = Vec::with_capacity(p.len() + 3);
    out.push(stmt(BPF_LD_W_ABS, OFFSET_IP));
    out.extend_from_slice(&p[..=ARCH_CHECK]);
    if cfg!(target_arch = "x86_64") {
        out.push(jump(BPF_JMP_JGE_K, 0x4000_0000, 0, 1));
        out.push(stmt(BPF_RET_K, ret_errno(libc::EPERM)));
    }
    out.extend_from_slice(&p[ARCH_CHECK + 1..]);
    // BPF_MAXINSNS: the kernel refuses longer programs, and the u16 length
    // of `sock_fprog` holds it.
    if out.len() > 4096 {
        return Err(FilterError::Shape("longer than 4096 instructions"));
    }
    Ok(out)
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
/// `p` without the jumps to jumps seccompiler writes (a syscall's test is
/// `jeq nr; ja rules; ja next`): every jump goes straight to where the
/// chain of unconditional jumps it lands on ends, and what nothing reaches
/// any more is left out. The kernel converts and JIT-compiles the program
/// at every attach (once per tool), at a cost that grows with its length;
/// this about halves it. The same decisions in the same order: only jumps
/// change. `None` if a conditional jump would then span more than 255
/// instructions (the caller keeps `p`).
fn compact(p: &[libc::sock_filter]) -> Option<Vec<libc::sock_filter>> {
    const CLASS_JMP: u16 = 0x05;
    const CLASS_RET: u16 = 0x06;
    let n = p.len();
    let class = |i: usize| p[i].code & 0x07;
    let is_ja = |i: usize| p[i].code == BPF_JMP_JA;
    // Where a jump to `t` ends up: past every unconditional jump. Jumps in
    // classic BPF only go forward, so this ends.
    let settle = |mut t: usize| {
        while t < n && is_ja(t) {
            t = t.checked_add(1)?.checked_add(p[t].k as usize)?;
        }
        (t < n).then_some(t)
    };
    // What runs after instruction `i`, threaded.
    let next = |i: usize| -> Option<Vec<usize>> {
        Some(match class(i) {
            CLASS_RET => Vec::new(),
            CLASS_JMP if is_ja(i) => vec![settle(i + 1 + p[i].k as usize)?],
            CLASS_JMP => vec![
                settle(i + 1 + usize::from(p[i].jt))?,
                settle(i + 1 + usize::from(p[i].jf))?,
            ],
            // Falls through to the very next instruction, kept as it is.
            _ => vec![(i + 1 < n).then_some(i + 1)?],
        })
    };
    if n == 0 || is_ja(0) {
        return None;
    }
    let mut live = vec![false; n];
    let mut todo = vec![0];
    while let Some(i) = todo.pop() {
        if !std::mem::replace(&mut live[i], true) {
            todo.extend(next(i)?);
        }
    }
    // New positions, in the old order.
    let mut at = vec![usize::MAX; n];
    let mut out = Vec::new();
    for i in (0..n).filter(|&i| live[i]) {
        at[i] = out.len();
        out.push(p[i]);
    }
    for i in (0..n).filter(|&i| live[i]) {
        let here = at[i];
        let span = |t: usize| at[t].checked_sub(here + 1);
        let ins = &mut out[here];
        if class(i) != CLASS_JMP {
            continue;
        }
        let targets = next(i)?;
        if is_ja(i) {
            ins.k = u32::try_from(span(targets[0])?).ok()?;
        } else {
            ins.jt = u8::try_from(span(targets[0])?).ok()?;
            ins.jf = u8::try_from(span(targets[1])?).ok()?;
        }
    }
    // The kernel wants a return last.
    (out.last()?.code & 0x07 == CLASS_RET).then_some(out)
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
/// The tool's seccomp filter; with `network_off`, `connect`, and sockets
/// and socket pairs of any family but `AF_UNIX` or any type but
/// [`LOCAL_SOCKET_TYPES`], are refused too. Assembled by [`assemble`] from the same
/// policy that [`eperm_rules`] and [`enosys_rules`] give seccompiler; the
/// tests check, syscall by syscall and on argument values at every edge of
/// the rules, that it decides as seccompiler's program does.
pub(super) fn build_filter(network_off: bool) -> Result<Vec<libc::sock_filter>, FilterError> {
    assemble(network_off)
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
/// How a syscall's arguments decide (the argument rules, as data). Each
/// reads the low 32 bits of an argument, as seccompiler's `Dword`
/// conditions do.
#[derive(Clone, Copy)]
enum ArgTest {
    /// Refused if argument `arg` has any bit of `mask` set.
    AnyBit { arg: u8, mask: u32 },
    /// Refused if argument `flags` has any bit of `flags_mask` set and
    /// argument `mode` any bit of `mode_mask`.
    BothAnyBit {
        flags: u8,
        flags_mask: u32,
        mode: u8,
        mode_mask: u32,
    },
    /// Refused unless argument `arg` is `value` and argument `masked`,
    /// masked with `mask`, is one of `one_of`.
    Only {
        arg: u8,
        value: u32,
        masked: u8,
        mask: u32,
        one_of: &'static [u32],
    },
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
/// The argument rules of [`eperm_rules`] (refused with EPERM), as
/// [`ArgTest`]s.
fn arg_tests(network_off: bool) -> Vec<(libc::c_long, ArgTest)> {
    let setid = SETID_BITS[0] | SETID_BITS[1];
    let create = CREATE_FLAGS[0] | CREATE_FLAGS[1];
    let mode = |arg| ArgTest::AnyBit { arg, mask: setid };
    let open = |flags, mode| ArgTest::BothAnyBit {
        flags,
        flags_mask: create,
        mode,
        mode_mask: setid,
    };
    let mut v = vec![
        (
            libc::SYS_clone,
            ArgTest::AnyBit {
                arg: 0,
                mask: CLONE_NS_FLAGS,
            },
        ),
        (libc::SYS_fchmod, mode(1)),
        (libc::SYS_fchmodat, mode(2)),
        (libc::SYS_fchmodat2, mode(2)),
        (libc::SYS_mknodat, mode(2)),
        (libc::SYS_openat, open(2, 3)),
    ];
    #[cfg(target_arch = "x86_64")]
    v.extend([
        (libc::SYS_chmod, mode(1)),
        (libc::SYS_mknod, mode(1)),
        (libc::SYS_creat, mode(1)),
        (libc::SYS_open, open(1, 2)),
    ]);
    if network_off {
        let local_only = ArgTest::Only {
            arg: 0,
            value: libc::AF_UNIX as u32,
            masked: 1,
            mask: SOCK_TYPE_MASK,
            one_of: &LOCAL_SOCKET_TYPES,
        };
        v.push((libc::SYS_socket, local_only));
        v.push((libc::SYS_socketpair, local_only));
    }
    v
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
/// The low half of argument `n` in `struct seccomp_data`.
const fn arg_low(n: u8) -> u32 {
    16 + 8 * n as u32
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
/// The tool's filter, as short as its policy allows: the kernel converts
/// and JIT-compiles the program at every attach (once per tool), at a cost
/// that grows with its length (measured: 66 µs of a hardened call of
/// `/bin/true` for seccompiler's 271 instructions, after [`compact`];
/// this one has 113 with the network off, 98 with it allowed).
///
/// The program:
/// - a load the kernel cannot treat as constant, the architecture check
///   (other ABIs killed), the syscall number, and on x86_64 the x32 guard
///   (as [`finish`] writes them);
/// - one comparison per syscall the policy names, in ascending order: a
///   syscall refused outright jumps to the shared `EPERM` or `ENOSYS`
///   return; one with argument rules jumps to its test;
/// - `ALLOW` for every other syscall;
/// - the argument tests, each one or two masked tests (`jset`), or
///   comparisons with a value and with a short list of values (after an
///   `and`), ending in the shared returns;
/// - the shared returns: `EPERM`, `ALLOW`, `ENOSYS`.
///
/// Every jump goes forward, and no further than 255 instructions (checked).
fn assemble(network_off: bool) -> Result<Vec<libc::sock_filter>, FilterError> {
    const BPF_JMP_JSET_K: u16 = 0x05 | 0x40;
    const BPF_ALU_AND_K: u16 = 0x04 | 0x50;
    #[derive(Clone, Copy)]
    enum To {
        Eperm,
        Allow,
        Enosys,
        Test(usize),
        Next,
    }
    // What each named syscall does, by number. A syscall is named once:
    // the policy gives each one decision (two would need an order).
    let mut named: BTreeMap<i64, To> = BTreeMap::new();
    let mut name = |nr: i64, to: To| match named.insert(nr, to) {
        None => Ok(()),
        Some(_) => Err(FilterError::Shape("a syscall named by two rules")),
    };
    for &nr in DENIED_SYSCALLS {
        name(nr, To::Eperm)?;
    }
    if network_off {
        name(libc::SYS_connect, To::Eperm)?;
    }
    for nr in enosys_rules().into_keys() {
        name(nr, To::Enosys)?;
    }
    let tests = arg_tests(network_off);
    for (i, (nr, _)) in tests.iter().enumerate() {
        name(*nr, To::Test(i))?;
    }
    // Instructions with symbolic targets, resolved below.
    let mut prog: Vec<(libc::sock_filter, To, To)> = Vec::new();
    let plain = |i: libc::sock_filter| (i, To::Next, To::Next);
    prog.push(plain(stmt(BPF_LD_W_ABS, OFFSET_IP)));
    prog.push(plain(stmt(BPF_LD_W_ABS, OFFSET_ARCH)));
    prog.push(plain(jump(BPF_JMP_JEQ_K, AUDIT_ARCH, 1, 0)));
    prog.push(plain(stmt(BPF_RET_K, RET_KILL)));
    prog.push(plain(stmt(BPF_LD_W_ABS, OFFSET_NR)));
    if cfg!(target_arch = "x86_64") {
        prog.push((jump(BPF_JMP_JGE_K, 0x4000_0000, 0, 0), To::Eperm, To::Next));
    }
    for (&nr, &to) in &named {
        let nr = u32::try_from(nr).map_err(|_| FilterError::Shape("syscall number"))?;
        prog.push((jump(BPF_JMP_JEQ_K, nr, 0, 0), to, To::Next));
    }
    prog.push(plain(stmt(BPF_RET_K, RET_ALLOW)));
    let mut test_at = Vec::with_capacity(tests.len());
    for (_, t) in &tests {
        test_at.push(prog.len());
        let ld = |arg| plain(stmt(BPF_LD_W_ABS, arg_low(arg)));
        match *t {
            ArgTest::AnyBit { arg, mask } => {
                prog.push(ld(arg));
                prog.push((jump(BPF_JMP_JSET_K, mask, 0, 0), To::Eperm, To::Allow));
            }
            ArgTest::BothAnyBit {
                flags,
                flags_mask,
                mode,
                mode_mask,
            } => {
                prog.push(ld(flags));
                prog.push((jump(BPF_JMP_JSET_K, flags_mask, 0, 0), To::Next, To::Allow));
                prog.push(ld(mode));
                prog.push((jump(BPF_JMP_JSET_K, mode_mask, 0, 0), To::Eperm, To::Allow));
            }
            ArgTest::Only {
                arg,
                value,
                masked,
                mask,
                one_of,
            } => {
                prog.push(ld(arg));
                prog.push((jump(BPF_JMP_JEQ_K, value, 0, 0), To::Next, To::Eperm));
                prog.push(ld(masked));
                prog.push(plain(stmt(BPF_ALU_AND_K, mask)));
                let Some((last, rest)) = one_of.split_last() else {
                    return Err(FilterError::Shape("a test that allows nothing"));
                };
                for &t in rest {
                    prog.push((jump(BPF_JMP_JEQ_K, t, 0, 0), To::Allow, To::Next));
                }
                prog.push((jump(BPF_JMP_JEQ_K, *last, 0, 0), To::Allow, To::Eperm));
            }
        }
    }
    let eperm_at = prog.len();
    prog.push(plain(stmt(BPF_RET_K, ret_errno(libc::EPERM))));
    let allow_at = prog.len();
    prog.push(plain(stmt(BPF_RET_K, RET_ALLOW)));
    let enosys_at = prog.len();
    prog.push(plain(stmt(BPF_RET_K, ret_errno(libc::ENOSYS))));
    // Resolve: a jump's offset counts from the instruction after it.
    let mut out = Vec::with_capacity(prog.len());
    for (pc, (mut ins, jt, jf)) in prog.iter().copied().enumerate() {
        let off = |to: To| -> Result<u8, FilterError> {
            let target = match to {
                To::Next => return Ok(0),
                To::Eperm => eperm_at,
                To::Allow => allow_at,
                To::Enosys => enosys_at,
                To::Test(i) => *test_at.get(i).ok_or(FilterError::Shape("no such test"))?,
            };
            target
                .checked_sub(pc + 1)
                .and_then(|d| u8::try_from(d).ok())
                .ok_or(FilterError::Shape("a jump out of reach"))
        };
        if ins.code & 0x07 == 0x05 && ins.code != BPF_JMP_JA {
            ins.jt = ins.jt.max(off(jt)?);
            ins.jf = ins.jf.max(off(jf)?);
        }
        out.push(ins);
    }
    if out.len() > 4096 {
        return Err(FilterError::Shape("longer than 4096 instructions"));
    }
    Ok(out)
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
/// The installed program for a policy: what `eperm` names refused with
/// EPERM, then what `enosys` names with ENOSYS, the rest allowed.
fn program(eperm: Rules, enosys: Rules) -> Result<Vec<libc::sock_filter>, FilterError> {
    let eperm = compile(eperm, libc::EPERM)?;
    let enosys = compile(enosys, libc::ENOSYS)?;
    let p = finish(chain(eperm, &enosys)?)?;
    Ok(compact(&p).unwrap_or(p))
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
/// The filter the docker backend's helper puts on a container's tool
/// (contract case 42 there): no set-user-ID or set-group-ID file, by chmod,
/// mknod or a creating open; openat2 ENOSYS (its mode is in memory);
/// io_uring refused (its opens are out of the filter's sight). The engine's
/// own profile does the rest. Other ABIs are killed, as in [`build_filter`].
/// As the kernel takes it: 8-byte `sock_filter` records, native byte order.
pub(crate) fn container_filter() -> Result<Vec<u8>, FilterError> {
    let (eperm, enosys) = container_rules()?;
    let f = program(eperm, enosys)?;
    let mut bytes = Vec::with_capacity(f.len() * 8);
    for i in f {
        bytes.extend_from_slice(&i.code.to_ne_bytes());
        bytes.push(i.jt);
        bytes.push(i.jf);
        bytes.extend_from_slice(&i.k.to_ne_bytes());
    }
    Ok(bytes)
}

/// The filter for this network setting, built once per process; `None` on
/// architectures the filter does not know, or if it could not be built
/// (logged once).
pub(super) fn seccomp_filter(network_off: bool) -> Option<&'static [libc::sock_filter]> {
    static OFF: OnceLock<Option<Vec<libc::sock_filter>>> = OnceLock::new();
    static ON: OnceLock<Option<Vec<libc::sock_filter>>> = OnceLock::new();
    let cell = if network_off { &OFF } else { &ON };
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    let build = || {
        build_filter(network_off)
            .inspect_err(|e| tracing::error!("direct backend: {e}"))
            .ok()
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let build = || None;
    cell.get_or_init(build).as_deref()
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
/// The container filter's policy: (refused with EPERM, with ENOSYS). Set-ID
/// modes, io_uring, and namespaces (`unshare`, `setns`, `clone` with a
/// namespace flag; `clone3` gets ENOSYS): the engine's own profile refuses
/// those under runc, but gVisor's runsc does not apply it, and in a user
/// namespace of its own a tool would hold capabilities over its own files
/// and get past gVisor's `RLIMIT_NPROC`.
fn container_rules() -> Result<(Rules, Rules), FilterError> {
    let mut eperm = Rules::new();
    no_setid_rules(&mut eperm)?;
    for nr in [
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_unshare,
        libc::SYS_setns,
    ] {
        eperm.insert(nr, Vec::new());
    }
    eperm.insert(libc::SYS_clone, any_bit(0, CLONE_NS_FLAGS)?);
    let enosys = [libc::SYS_openat2, libc::SYS_clone3]
        .into_iter()
        .map(|nr| (nr, Vec::new()))
        .collect();
    Ok((eperm, enosys))
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

    const BPF_ALU_AND_K: u16 = 0x04 | 0x50;
    const BPF_JMP_JGT_K: u16 = 0x05 | 0x20;
    const BPF_JMP_JSET_K: u16 = 0x05 | 0x40;
    /// The first argument in `struct seccomp_data`.
    const OFFSET_ARG0: u32 = 16;

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
                        k if (OFFSET_ARG0..OFFSET_ARG0 + 48).contains(&k)
                            && k.is_multiple_of(4) =>
                        {
                            let n = ((k - OFFSET_ARG0) / 8) as usize;
                            // Low halves carry the argument, high halves 0.
                            if (k - OFFSET_ARG0).is_multiple_of(8) {
                                args.get(n).copied().unwrap_or(0)
                            } else {
                                0
                            }
                        }
                        k => panic!("load of offset {k}"),
                    }
                }
                BPF_ALU_AND_K => a &= i.k,
                BPF_RET_K => return (i.k, steps),
                BPF_JMP_JA => pc += i.k as usize,
                BPF_JMP_JEQ_K | BPF_JMP_JGE_K | BPF_JMP_JGT_K | BPF_JMP_JSET_K => {
                    let taken = match i.code {
                        BPF_JMP_JEQ_K => a == i.k,
                        BPF_JMP_JGE_K => a >= i.k,
                        BPF_JMP_JGT_K => a > i.k,
                        _ => a & i.k != 0,
                    };
                    pc += usize::from(if taken { i.jt } else { i.jf });
                }
                c => panic!("unexpected opcode {c:#x}"),
            }
            pc += 1;
            assert!(pc < f.len(), "ran off the end");
        }
    }

    #[test]
    pub(super) fn the_filter_denies_exactly_its_list() {
        for network_off in [false, true] {
            let f = build_filter(network_off).unwrap();
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
                } else if [libc::SYS_socket, libc::SYS_socketpair, libc::SYS_connect]
                    .iter()
                    .any(|&s| s as u32 == nr)
                    && network_off
                {
                    eperm // socket(pair): family 0 is not AF_UNIX
                } else {
                    RET_ALLOW
                };
                assert_eq!(action, want, "nr {nr}, network_off {network_off}");
            }
            // The path of a syscall that no rule names runs every
            // number comparison once: a bounded, short list.
            assert!(deepest <= 2 * 90, "deepest path {deepest}");
            // Arguments: namespaces in clone, socket families.
            let clone = libc::SYS_clone as u32;
            assert_eq!(
                eval(&f, AUDIT_ARCH, clone, libc::SIGCHLD as u32).0,
                RET_ALLOW
            );
            let ns = (libc::CLONE_NEWUSER | libc::SIGCHLD) as u32;
            assert_eq!(eval(&f, AUDIT_ARCH, clone, ns).0, eperm);
            let at = |nr: libc::c_long, args| eval_args(&f, AUDIT_ARCH, nr as u32, args).0;
            let off_eperm = if network_off { eperm } else { RET_ALLOW };
            for nr in [libc::SYS_socket, libc::SYS_socketpair] {
                let unix = libc::AF_UNIX as u32;
                let flags = (libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK) as u32;
                for ty in [libc::SOCK_STREAM, libc::SOCK_SEQPACKET] {
                    assert_eq!(at(nr, [unix, ty as u32, 0, 0]), RET_ALLOW);
                    assert_eq!(at(nr, [unix, ty as u32 | flags, 0, 0]), RET_ALLOW);
                    let inet = libc::AF_INET as u32;
                    assert_eq!(at(nr, [inet, ty as u32, 0, 0]), off_eperm);
                }
                // Datagram unix sockets reach host sockets by path.
                for ty in [libc::SOCK_DGRAM, libc::SOCK_RAW] {
                    assert_eq!(at(nr, [unix, ty as u32, 0, 0]), off_eperm);
                    assert_eq!(at(nr, [unix, ty as u32 | flags, 0, 0]), off_eperm);
                }
            }
            // Set-ID mode bits, by chmod and by creating opens; the plain
            // modes (and any mode without O_CREAT) are allowed.
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

    /// The compacted program decides as seccompiler's did, on every
    /// syscall number and the argument values the rules look at, and it is
    /// much shorter: for the container filter's policy (where it is used)
    /// and for the tool's with the network on (a larger one of the same
    /// shape). With the network off the tool's policy is too long for it
    /// (a jump would span more than 255 instructions): the tests' reference
    /// there is seccompiler's program as it is.
    #[test]
    fn the_compacted_filter_decides_as_the_original() {
        let args = edge_args();
        let (container_eperm, container_enosys) = container_rules().unwrap();
        let policies = [
            (container_eperm, container_enosys),
            (eperm_rules(false).unwrap(), enosys_rules()),
        ];
        for (eperm, enosys) in policies {
            let eperm = compile(eperm, libc::EPERM).unwrap();
            let enosys = compile(enosys, libc::ENOSYS).unwrap();
            let original = finish(chain(eperm, &enosys).unwrap()).unwrap();
            let compact = compact(&original).expect("compacts");
            assert!(
                compact.len() * 4 < original.len() * 3,
                "{} of {} instructions",
                compact.len(),
                original.len()
            );
            same_decisions(&compact, &original, &args);
        }
    }

    /// The installed filter decides as seccompiler's program for the same
    /// policy, on every syscall number of both ABIs and x32, with argument
    /// values at every edge of the rules; and it is well under half as
    /// long (what makes attaching it cheaper).
    #[test]
    fn the_assembled_filter_decides_as_seccompilers() {
        let args = edge_args();
        for network_off in [false, true] {
            let assembled = build_filter(network_off).unwrap();
            let reference = program(eperm_rules(network_off).unwrap(), enosys_rules()).unwrap();
            assert!(
                assembled.len() * 2 < reference.len(),
                "{} against {} instructions",
                assembled.len(),
                reference.len()
            );
            same_decisions(&assembled, &reference, &args);
        }
    }

    fn same_decisions(a: &[libc::sock_filter], b: &[libc::sock_filter], args: &[[u32; 4]]) {
        for arch in [AUDIT_ARCH, 0x4000_0003] {
            for nr in (0..1024u32).chain([0x4000_0000 | 59, 0x4000_0000 | 2, u32::MAX]) {
                for x in args {
                    assert_eq!(
                        eval_args(a, arch, nr, *x).0,
                        eval_args(b, arch, nr, *x).0,
                        "arch {arch:#x} nr {nr} args {x:?}"
                    );
                }
            }
        }
    }

    /// Argument values at the edges of the rules: each bit the rules test,
    /// alone and together, in each position, and the flags-and-mode pairs.
    fn edge_args() -> Vec<[u32; 4]> {
        let setid = libc::S_ISUID | libc::S_ISGID;
        let creat = (libc::O_CREAT | libc::O_WRONLY) as u32;
        let tmpfile = (libc::O_TMPFILE | libc::O_RDWR) as u32;
        let mut args: Vec<[u32; 4]> = vec![[0; 4], [u32::MAX; 4]];
        for v in [
            libc::AF_UNIX as u32,
            libc::AF_INET as u32,
            libc::S_ISUID,
            libc::S_ISGID,
            0o755,
            creat,
            tmpfile,
            libc::SIGCHLD as u32,
        ]
        .into_iter()
        .chain(
            (0..32)
                .map(|b| 1u32 << b)
                .filter(|b| b & CLONE_NS_FLAGS != 0),
        ) {
            for pos in 0..4 {
                let mut a = [0; 4];
                a[pos] = v;
                args.push(a);
            }
        }
        for (flags, mode) in [
            (creat, setid),
            (tmpfile, setid),
            (creat, 0o644),
            (0, setid),
            (libc::O_CREAT as u32, libc::S_ISUID),
            (tmpfile, libc::S_ISGID),
            (libc::O_DIRECTORY as u32, setid),
            (u32::MAX ^ (libc::O_CREAT as u32 | CREATE_FLAGS[1]), setid),
            (creat, u32::MAX ^ setid),
        ] {
            args.push([3, 0, flags, mode]);
            args.push([0, flags, mode, 0]);
            args.push([3, 0, mode, 0]);
            args.push([0, mode, 0, 0]);
        }
        // Every family number around AF_UNIX, and every single bit.
        for v in (0..64u32).chain((0..32).map(|b| 1u32 << b)) {
            args.push([v, 0, 0, 0]);
            args.push([v | libc::SIGCHLD as u32, v, v, v]);
        }
        // Every socket type, bare, with its flags and with other high bits,
        // for a unix family and another.
        let flags = (libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK) as u32;
        for ty in 0..=2 * SOCK_TYPE_MASK + 1 {
            for high in [0, flags, !SOCK_TYPE_MASK, 1 << 31] {
                for family in [libc::AF_UNIX as u32, libc::AF_INET as u32, 0] {
                    args.push([family, ty | high, 0, 0]);
                }
            }
        }
        args
    }

    /// The docker helper's filter, read back from the bytes it is given:
    /// set-ID modes, io_uring and namespaces refused, openat2 and clone3
    /// ENOSYS, the rest allowed.
    #[test]
    fn the_container_filter_refuses_setid_modes_io_uring_and_namespaces_only() {
        let bytes = container_filter().unwrap();
        assert_eq!(bytes.len() % 8, 0);
        let f: Vec<libc::sock_filter> = bytes
            .chunks_exact(8)
            .map(|c| libc::sock_filter {
                code: u16::from_ne_bytes([c[0], c[1]]),
                jt: c[2],
                jf: c[3],
                k: u32::from_ne_bytes([c[4], c[5], c[6], c[7]]),
            })
            .collect();
        assert_eq!((f[0].code, f[0].k), (BPF_LD_W_ABS, OFFSET_IP));
        let eperm = ret_errno(libc::EPERM);
        let at = |nr: libc::c_long, args| eval_args(&f, AUDIT_ARCH, nr as u32, args).0;
        for nr in 0..1024u32 {
            let want = if [
                libc::SYS_io_uring_setup,
                libc::SYS_io_uring_enter,
                libc::SYS_io_uring_register,
                libc::SYS_unshare,
                libc::SYS_setns,
            ]
            .contains(&(nr as libc::c_long))
            {
                eperm
            } else if nr == libc::SYS_openat2 as u32 || nr == libc::SYS_clone3 as u32 {
                ret_errno(libc::ENOSYS)
            } else {
                RET_ALLOW
            };
            assert_eq!(eval(&f, AUDIT_ARCH, nr, 0).0, want, "nr {nr}");
        }
        assert_eq!(at(libc::SYS_fchmodat, [3, 0, 0o4755, 0]), eperm);
        assert_eq!(at(libc::SYS_fchmodat, [3, 0, 0o755, 0]), RET_ALLOW);
        let creat = libc::O_CREAT as u32 | libc::O_WRONLY as u32;
        assert_eq!(at(libc::SYS_openat, [3, 0, creat, 0o2755]), eperm);
        assert_eq!(at(libc::SYS_openat, [3, 0, 0, 0o2755]), RET_ALLOW);
        // A clone with any namespace flag is refused, a plain fork or thread
        // is not.
        for flag in [
            libc::CLONE_NEWUSER,
            libc::CLONE_NEWNS,
            libc::CLONE_NEWPID,
            libc::CLONE_NEWNET,
        ] {
            let ns = (flag | libc::SIGCHLD) as u32;
            assert_eq!(at(libc::SYS_clone, [ns, 0, 0, 0]), eperm, "{flag:#x}");
        }
        let fork = libc::SIGCHLD as u32;
        assert_eq!(at(libc::SYS_clone, [fork, 0, 0, 0]), RET_ALLOW);
        let thread = (libc::CLONE_VM | libc::CLONE_THREAD | libc::CLONE_SIGHAND) as u32;
        assert_eq!(at(libc::SYS_clone, [thread, 0, 0, 0]), RET_ALLOW);
        // Policy the container does not carry: ptrace (the engine's).
        assert_eq!(at(libc::SYS_ptrace, [0, 0, 0, 0]), RET_ALLOW);
        assert_eq!(eval(&f, 0x4000_0003, 1, 0).0, RET_KILL);
    }

    /// The splices refuse a program that does not start with the arch
    /// check they rely on, rather than misplace a jump.
    #[test]
    fn the_splices_refuse_a_program_of_another_shape() {
        let good = compile(enosys_rules(), libc::ENOSYS).unwrap();
        assert!(finish(good.clone()).is_ok());
        assert!(chain(good.clone(), &good).is_ok());
        let mut moved = good.clone();
        moved[1].jt = 2;
        assert!(matches!(finish(moved.clone()), Err(FilterError::Shape(_))));
        assert!(matches!(
            chain(good.clone(), &moved),
            Err(FilterError::Shape(_))
        ));
        let other_arch = {
            let mut p = good.clone();
            p[1].k ^= 1;
            p
        };
        assert!(matches!(finish(other_arch), Err(FilterError::Shape(_))));
        assert!(matches!(
            finish(good[..3].to_vec()),
            Err(FilterError::Shape(_))
        ));
    }
}
