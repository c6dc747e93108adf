//! The system calls of the supervisor, its PID namespace's init and the tool
//! before exec: raw, with no C library in between.
//!
//! Why raw: on x86_64 the supervisor is created with `CLONE_VM` (see the
//! module doc of `supervisor`): it shares toolhost's memory and runs beside
//! toolhost's threads, with the thread area of the thread that created it. A
//! C library wrapper would write `errno` there, and its cancellation points
//! would touch that thread's state: a failing call in the supervisor could
//! change the `errno` a tokio worker is about to read. Here every call is
//! the `syscall` instruction itself, and a failure comes back as a value,
//! `Err(errno)`. Nothing here allocates, takes a lock or touches thread-local
//! storage.
//!
//! Elsewhere (aarch64 and the rest, where the `CLONE_VM` supervisor is not
//! built and the supervisor is a forked copy of toolhost) the calls go
//! through `libc::syscall`, whose `errno` is then the copy's own.

// Code here runs in the supervisor, its init and the tool before exec,
// on a toolhost thread's state: nothing may panic (std's handler would run).
#![deny(
    clippy::indexing_slicing,
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used
)]

use libc::{c_int, c_long, c_void, pid_t};

/// A system call's result: the value, or the errno.
pub(super) type SysResult = Result<usize, c_int>;

/// Whether the supervisor shares toolhost's memory (`CLONE_VM`) here.
pub(super) const SHARED_VM: bool = cfg!(target_arch = "x86_64");

#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn raw6(nr: c_long, a: [usize; 6]) -> isize {
    let ret: isize;
    // SAFETY: the `syscall` instruction with the x86_64 Linux calling
    // convention (number in rax, arguments in rdi, rsi, rdx, r10, r8, r9; rcx
    // and r11 clobbered). What the call does with its arguments is the
    // caller's contract.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") nr as isize => ret,
            in("rdi") a[0],
            in("rsi") a[1],
            in("rdx") a[2],
            in("r10") a[3],
            in("r8") a[4],
            in("r9") a[5],
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
unsafe fn raw6(nr: c_long, a: [usize; 6]) -> isize {
    // SAFETY: the C library's generic system call entry; the caller's
    // contract covers the arguments. It writes errno, which is this
    // process's own here (a forked supervisor: see the module doc).
    unsafe {
        let r = libc::syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
        if r < 0 {
            -(*libc::__errno_location() as isize)
        } else {
            r as isize
        }
    }
}

/// A system call with up to six arguments.
///
/// # Safety
/// The arguments must be what the kernel expects for `nr`: valid pointers
/// for as long as the call reads or writes them.
#[inline(always)]
pub(super) unsafe fn call(nr: c_long, a: [usize; 6]) -> SysResult {
    // SAFETY: the caller's contract.
    result(unsafe { raw6(nr, a) })
}

/// A raw return value: -4095..-1 is an errno.
fn result(r: isize) -> SysResult {
    if (-4095..0).contains(&r) {
        Err((-r) as c_int)
    } else {
        Ok(r as usize)
    }
}

macro_rules! sys {
    ($nr:expr) => { call($nr as c_long, [0; 6]) };
    ($nr:expr, $($a:expr),+) => {{
        let mut args = [0usize; 6];
        for (slot, v) in args.iter_mut().zip([$($a as usize),+]) {
            *slot = v;
        }
        call($nr as c_long, args)
    }};
}

/// Creates a process (or, with `CLONE_VM`, one sharing our memory) that
/// starts in `f(arg)` on `stack_top` and exits with what it returns.
/// `ptid` receives a pidfd with `CLONE_PIDFD`; the kernel clears `ctid`
/// when the child exits with `CLONE_CHILD_CLEARTID`.
///
/// # Safety
/// `stack_top` is the 16-byte aligned top of memory that no one else uses
/// while the child runs; `f` only makes the calls of this module (it shares
/// the caller's thread area); `ptid` and `ctid` are valid or null.
pub(super) unsafe fn clone(
    flags: c_int,
    stack_top: *mut c_void,
    ptid: *mut c_int,
    ctid: *mut u32,
    f: extern "C" fn(*mut c_void) -> c_int,
    arg: *mut c_void,
) -> SysResult {
    // SAFETY: clone(2) with the x86_64 argument order (flags, stack, ptid,
    // ctid, tls); the rest is the caller's contract.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        start_child(
            libc::SYS_clone,
            [
                flags as usize,
                stack_top as usize,
                ptid as usize,
                ctid as usize,
                0,
            ],
            f,
            arg,
        )
    }
    // SAFETY: the C library's wrapper (a forked supervisor: its errno is
    // its own); the rest is the caller's contract.
    #[cfg(not(target_arch = "x86_64"))]
    unsafe {
        let r = libc::clone(
            f,
            stack_top,
            flags,
            arg,
            ptid,
            std::ptr::null_mut::<c_void>(),
            ctid.cast::<pid_t>(),
        );
        if r < 0 {
            Err(*libc::__errno_location())
        } else {
            Ok(r as usize)
        }
    }
}

/// The system call `nr` (clone or clone3) whose child, on the stack the
/// call gives it, runs `f(arg)` and exits with its value.
///
/// # Safety
/// That of [`clone`] and [`clone3`].
#[cfg(target_arch = "x86_64")]
unsafe fn start_child(
    nr: c_long,
    a: [usize; 5],
    f: extern "C" fn(*mut c_void) -> c_int,
    arg: *mut c_void,
) -> SysResult {
    let ret: isize;
    // SAFETY: the parent returns with the child's pid in rax. The child
    // returns with rax = 0 on its new stack and never leaves this block: it
    // calls f(arg) there (rsp is 16-byte aligned at the call, as the ABI
    // wants: the stack tops are page-aligned; r12 and r13 survive the system
    // call) and exits with its value.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "xor ebp, ebp",
            "mov rdi, r13",
            "call r12",
            "mov edi, eax",
            "mov eax, {exit}",
            "syscall",
            "ud2",
            "2:",
            exit = const libc::SYS_exit_group,
            inlateout("rax") nr as isize => ret,
            in("rdi") a[0],
            in("rsi") a[1],
            in("rdx") a[2],
            in("r10") a[3],
            in("r8") a[4],
            in("r12") f,
            in("r13") arg,
            lateout("rcx") _,
            lateout("r11") _,
        );
    }
    result(ret)
}

/// `clone3`'s arguments (the first version of the struct, 64 bytes).
#[repr(C)]
pub(super) struct CloneArgs {
    pub flags: u64,
    pub pidfd: u64,
    pub child_tid: u64,
    pub parent_tid: u64,
    pub exit_signal: u64,
    pub stack: u64,
    pub stack_size: u64,
    pub tls: u64,
}

/// Every signal with a handler set back to `SIG_DFL` in the child (Linux
/// 5.5; `clone3` only).
pub(super) const CLONE_CLEAR_SIGHAND: u64 = 0x1_0000_0000;

/// `clone3`, starting the child in `f(arg)` on the stack `args` gives (its
/// lowest address and size), as [`clone`] does.
///
/// # Safety
/// As [`clone`]: the stack is the caller's alone while the child runs, `f`
/// makes only the calls of this module, and the pointers in `args` are
/// valid or zero.
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn clone3(
    args: &CloneArgs,
    f: extern "C" fn(*mut c_void) -> c_int,
    arg: *mut c_void,
) -> SysResult {
    // SAFETY: clone3(2), its args and their size; the kernel sets the
    // child's rsp to stack + stack_size. The rest is the caller's contract.
    unsafe {
        start_child(
            libc::SYS_clone3,
            [
                args as *const CloneArgs as usize,
                std::mem::size_of::<CloneArgs>(),
                0,
                0,
                0,
            ],
            f,
            arg,
        )
    }
}

/// Not used here (a forked supervisor): always ENOSYS, so the caller takes
/// [`clone`].
///
/// # Safety
/// None needed; kept `unsafe` to match the x86_64 one.
#[cfg(not(target_arch = "x86_64"))]
pub(super) unsafe fn clone3(
    _args: &CloneArgs,
    _f: extern "C" fn(*mut c_void) -> c_int,
    _arg: *mut c_void,
) -> SysResult {
    Err(libc::ENOSYS)
}

/// The signal set of the kernel (not the C library's 128-byte `sigset_t`).
pub(super) type SigSet = u64;

pub(super) const fn sig_bit(sig: c_int) -> SigSet {
    1 << (sig - 1)
}

/// The kernel's `struct sigaction` (the same on x86_64 and aarch64).
#[repr(C)]
struct KernelSigaction {
    handler: usize,
    flags: u64,
    restorer: usize,
    mask: SigSet,
}

// Each wrapper below is a single system call; the `# Safety` of each is that
// of [`call`]: pointers valid for the call.

pub(super) unsafe fn sigprocmask(how: c_int, set: &SigSet) -> SysResult {
    // SAFETY: `set` is a live u64 of the size passed.
    unsafe {
        sys!(
            libc::SYS_rt_sigprocmask,
            how,
            set as *const SigSet,
            0usize,
            8usize
        )
    }
}

/// Sets `sig` to `SIG_DFL` or `SIG_IGN` (no handler: no restorer needed).
pub(super) unsafe fn set_disposition(sig: c_int, disposition: libc::sighandler_t) -> SysResult {
    // SAFETY: as swap_disposition's.
    unsafe { swap_disposition(sig, disposition).map(|_| 0) }
}

/// Sets `sig` to `disposition` (`SIG_DFL` or `SIG_IGN`) and returns the
/// handler it had.
pub(super) unsafe fn swap_disposition(
    sig: c_int,
    disposition: libc::sighandler_t,
) -> Result<libc::sighandler_t, c_int> {
    let act = KernelSigaction {
        handler: disposition,
        flags: 0,
        restorer: 0,
        mask: 0,
    };
    let mut old = KernelSigaction {
        handler: 0,
        flags: 0,
        restorer: 0,
        mask: 0,
    };
    // SAFETY: two kernel sigactions of the size the kernel expects.
    unsafe {
        sys!(
            libc::SYS_rt_sigaction,
            sig,
            &act as *const KernelSigaction,
            &mut old as *mut KernelSigaction,
            8usize
        )?;
    }
    Ok(old.handler)
}

/// Waits for a signal of `set` (blocked), for at most `timeout_ns` if
/// given (then `Err(EAGAIN)`); returns its number.
pub(super) unsafe fn sigwait(set: &SigSet, timeout_ns: Option<i64>) -> Result<c_int, c_int> {
    // SAFETY: all zeroes is a valid siginfo_t (plain integers and padding).
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let ts = timeout_ns.map(|ns| libc::timespec {
        tv_sec: ns / 1_000_000_000,
        tv_nsec: ns % 1_000_000_000,
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: a siginfo buffer and a timespec (or null) on this stack.
    unsafe {
        let sig = sys!(
            libc::SYS_rt_sigtimedwait,
            set as *const SigSet,
            &mut info as *mut libc::siginfo_t,
            ts_ptr,
            8usize
        )?;
        Ok(sig as c_int)
    }
}

pub(super) unsafe fn prctl(option: c_int, a2: usize) -> SysResult {
    // SAFETY: the options used here take plain integers.
    unsafe { sys!(libc::SYS_prctl, option, a2, 0usize, 0usize, 0usize) }
}

pub(super) unsafe fn getpid() -> pid_t {
    // SAFETY: no arguments; cannot fail.
    unsafe { sys!(libc::SYS_getpid).unwrap_or(0) as pid_t }
}

pub(super) unsafe fn getppid() -> pid_t {
    // SAFETY: no arguments; cannot fail.
    unsafe { sys!(libc::SYS_getppid).unwrap_or(0) as pid_t }
}

pub(super) unsafe fn setsid() -> SysResult {
    // SAFETY: no arguments.
    unsafe { sys!(libc::SYS_setsid) }
}

pub(super) unsafe fn setpgid(pid: pid_t, pgid: pid_t) -> SysResult {
    // SAFETY: plain integers.
    unsafe { sys!(libc::SYS_setpgid, pid, pgid) }
}

pub(super) unsafe fn setns(fd: c_int, nstype: c_int) -> SysResult {
    // SAFETY: plain integers.
    unsafe { sys!(libc::SYS_setns, fd, nstype) }
}

pub(super) unsafe fn unshare(flags: c_int) -> SysResult {
    // SAFETY: plain integers.
    unsafe { sys!(libc::SYS_unshare, flags) }
}

pub(super) unsafe fn kill(pid: pid_t, sig: c_int) -> SysResult {
    // SAFETY: plain integers.
    unsafe { sys!(libc::SYS_kill, pid, sig) }
}

pub(super) unsafe fn pidfd_open(pid: pid_t) -> SysResult {
    // SAFETY: plain integers.
    unsafe { sys!(libc::SYS_pidfd_open, pid, 0usize) }
}

pub(super) unsafe fn fchdir(fd: c_int) -> SysResult {
    // SAFETY: plain integers.
    unsafe { sys!(libc::SYS_fchdir, fd) }
}

pub(super) unsafe fn close(fd: c_int) -> SysResult {
    // SAFETY: plain integers.
    unsafe { sys!(libc::SYS_close, fd) }
}

pub(super) unsafe fn close_range(first: u32, last: u32, flags: u32) -> SysResult {
    // SAFETY: plain integers.
    unsafe { sys!(libc::SYS_close_range, first, last, flags) }
}

pub(super) unsafe fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> SysResult {
    // SAFETY: the commands used here take integers.
    unsafe { sys!(libc::SYS_fcntl, fd, cmd, arg) }
}

pub(super) unsafe fn dup3(old: c_int, new: c_int, flags: c_int) -> SysResult {
    // SAFETY: plain integers.
    unsafe { sys!(libc::SYS_dup3, old, new, flags) }
}

pub(super) unsafe fn openat(dir: c_int, path: *const libc::c_char, flags: c_int) -> SysResult {
    // SAFETY: `path` is NUL-terminated (caller).
    unsafe { sys!(libc::SYS_openat, dir, path, flags, 0usize) }
}

pub(super) unsafe fn read(fd: c_int, buf: &mut [u8]) -> SysResult {
    // SAFETY: `buf` is writable for its length.
    unsafe { sys!(libc::SYS_read, fd, buf.as_mut_ptr(), buf.len()) }
}

pub(super) unsafe fn write(fd: c_int, buf: &[u8]) -> SysResult {
    // SAFETY: `buf` is readable for its length.
    unsafe { sys!(libc::SYS_write, fd, buf.as_ptr(), buf.len()) }
}

pub(super) unsafe fn fstat(fd: c_int, st: &mut libc::stat) -> SysResult {
    // SAFETY: `st` is a writable stat struct (the kernel's layout on 64-bit).
    unsafe { sys!(libc::SYS_fstat, fd, st as *mut libc::stat) }
}

/// Whether the file open as `fd` is the root of a mount (`statx`'s
/// `STATX_ATTR_MOUNT_ROOT`); `Err(ENOTSUP)` where the kernel does not say
/// (before Linux 5.8).
pub(super) unsafe fn is_mount_root(fd: c_int) -> Result<bool, c_int> {
    // SAFETY: all zeroes is a valid statx (plain integers).
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: an empty NUL-terminated path with AT_EMPTY_PATH, and a
    // writable statx on this stack.
    unsafe {
        sys!(
            libc::SYS_statx,
            fd,
            c"".as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
            0usize,
            &mut st as *mut libc::statx
        )?;
    }
    let bit = libc::STATX_ATTR_MOUNT_ROOT as u64;
    if st.stx_attributes_mask & bit == 0 {
        return Err(libc::ENOTSUP);
    }
    Ok(st.stx_attributes & bit != 0)
}

pub(super) unsafe fn prlimit(
    resource: c_int,
    new: Option<&libc::rlimit>,
    old: Option<&mut libc::rlimit>,
) -> SysResult {
    let new = new.map_or(std::ptr::null(), |r| r as *const libc::rlimit);
    let old = old.map_or(std::ptr::null_mut(), |r| r as *mut libc::rlimit);
    // SAFETY: rlimit structs (two u64) or null, for this process (pid 0).
    unsafe { sys!(libc::SYS_prlimit64, 0usize, resource, new, old) }
}

pub(super) unsafe fn execve(
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
) -> SysResult {
    // SAFETY: NUL-terminated path and NULL-terminated arrays (caller).
    unsafe { sys!(libc::SYS_execve, path, argv, envp) }
}

/// Ends this process (thread group), whatever else shares its memory.
pub(super) unsafe fn exit(code: c_int) -> ! {
    // SAFETY: exit_group never returns.
    unsafe {
        let _ = sys!(libc::SYS_exit_group, code);
    }
    loop {
        std::hint::spin_loop();
    }
}

pub(super) unsafe fn wait4(
    pid: pid_t,
    status: &mut c_int,
    options: c_int,
    ru: Option<&mut libc::rusage>,
) -> SysResult {
    let ru = ru.map_or(std::ptr::null_mut(), |r| r as *mut libc::rusage);
    // SAFETY: a status int and an rusage (the kernel's layout) or null.
    unsafe { sys!(libc::SYS_wait4, pid, status as *mut c_int, options, ru) }
}

/// waitid(P_ALL) that leaves the child waitable: the pid of an exited child,
/// or 0.
pub(super) unsafe fn exited_child_nowait() -> SysResult {
    // SAFETY: all zeroes is a valid siginfo_t (plain integers and padding).
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: a siginfo buffer on this stack; no rusage.
    unsafe {
        sys!(
            libc::SYS_waitid,
            libc::P_ALL,
            0usize,
            &mut info as *mut libc::siginfo_t,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            0usize
        )?;
        Ok(info.si_pid() as usize)
    }
}

pub(super) unsafe fn nanosleep(ns: i64) {
    let ts = libc::timespec {
        tv_sec: ns / 1_000_000_000,
        tv_nsec: ns % 1_000_000_000,
    };
    // SAFETY: a timespec on this stack; no remainder.
    unsafe {
        let _ = sys!(
            libc::SYS_clock_nanosleep,
            libc::CLOCK_MONOTONIC,
            0usize,
            &ts as *const libc::timespec,
            0usize
        );
    }
}

pub(super) fn now_ns() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a timespec on this stack for the kernel to write.
    let _ = unsafe {
        sys!(
            libc::SYS_clock_gettime,
            libc::CLOCK_MONOTONIC,
            &mut ts as *mut libc::timespec
        )
    };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

pub(super) unsafe fn poll_in(fd: c_int) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: one pollfd and a zero timeout on this stack; no signal mask.
    unsafe {
        matches!(
            sys!(
                libc::SYS_ppoll,
                &mut pfd as *mut libc::pollfd,
                1usize,
                &ts as *const libc::timespec,
                0usize,
                8usize
            ),
            Ok(n) if n > 0
        )
    }
}

/// Waits until one of `fds` has one of its events (or an error, a hang-up)
/// or `timeout_ns` has passed; the number of fds with events (0: the
/// timeout). EINTR is retried with the whole timeout.
pub(super) unsafe fn wait_any(fds: &mut [libc::pollfd], timeout_ns: i64) -> Result<usize, c_int> {
    loop {
        // The kernel writes the time left into it.
        let mut ts = libc::timespec {
            tv_sec: timeout_ns / 1_000_000_000,
            tv_nsec: timeout_ns % 1_000_000_000,
        };
        // SAFETY: `fds` is a live slice of pollfds, for the kernel to write
        // their `revents`; a writable timespec on this stack; no signal mask.
        match unsafe {
            sys!(
                libc::SYS_ppoll,
                fds.as_mut_ptr(),
                fds.len(),
                &mut ts as *mut libc::timespec,
                0usize,
                8usize
            )
        } {
            Err(libc::EINTR) => continue,
            r => return r,
        }
    }
}

pub(super) unsafe fn futex_wait(word: *const u32, expected: u32) {
    // SAFETY: `word` is a live, aligned u32 (caller); no timeout.
    unsafe {
        let _ = sys!(
            libc::SYS_futex,
            word,
            libc::FUTEX_WAIT,
            expected,
            0usize,
            0usize,
            0usize
        );
    }
}

pub(super) unsafe fn futex_wake(word: *const u32) {
    // SAFETY: `word` is a live, aligned u32 (caller).
    unsafe {
        let _ = sys!(libc::SYS_futex, word, libc::FUTEX_WAKE, 1usize);
    }
}
