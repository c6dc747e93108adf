//! The per-call supervisor of the `direct` backend on Linux.
//!
//! Invariant: when a call ends, for any reason, no process it started is left.
//!
//! How: the process toolhost spawns is not the tool. It is a forked copy of
//! toolhost (never exec'd) that becomes a *child subreaper* and forks the tool.
//! The tool itself is created from the supervisor with `clone(CLONE_VM |
//! CLONE_VFORK)`, as `posix_spawn` does, and execs directly: only one full
//! `fork` of toolhost per call.
//! Every descendant of the tool, including those that call `setsid` or double
//! fork, stays in the supervisor's subtree: when a process's parent dies, the
//! kernel reparents it to the nearest subreaper, which is the supervisor. When the
//! tool exits, when toolhost asks (SIGUSR2: timeout or cancellation), or when
//! toolhost dies (parent-death signal), the supervisor kills the tool's process
//! group and then every child it has, round after round, until none is left. It
//! then reports the tool's wait status and CPU time on a pipe and exits.
//!
//! With isolation on (and where the host allows: root, or through toolhost's
//! user namespace), the call also gets a PID namespace: the supervisor
//! unshares one and starts a small init in it (`init_main`, sharing the
//! supervisor's memory), which starts the tool (pid 2 there) and reaps the
//! namespace. When the tool exits, the init exits, and the kernel kills every
//! process left in the namespace before the init can be reaped; to end the
//! call early, the supervisor SIGKILLs the init. The tool's escapees cannot
//! leave the namespace, and its signals by pid reach only the namespace. The
//! tool is not pid 1 itself because pid 1 ignores signals it has no handler
//! for, SIGXCPU of the CPU limit included.
//!
//! The parent-death signal is tied to the *thread* that forked, which may be a
//! tokio worker that exits later. The supervisor therefore checks, when the
//! signal comes, whether toolhost itself is gone (`getppid()` changed); if only
//! the thread went, it re-arms the signal and carries on.
//!
//! Everything here runs between `fork` and `exec` in a copy of a multi-threaded
//! process, so it only makes async-signal-safe system calls: no allocation, no
//! locks, no std I/O.

use std::cell::UnsafeCell;
use std::ffi::{CStr, CString, c_char, c_void};
use std::io;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};

use libc::{c_int, pid_t};

use super::harden::{ToolHardening, apply_in_tool};
use super::mounts::MountPlan;
use crate::isolation::Layer;

/// Resources limited in the tool: (resource, soft limit). The hard limit is the
/// soft limit, except RLIMIT_CPU where one more second lets SIGXCPU be handled
/// before SIGKILL.
#[derive(Debug, Clone, Copy)]
pub(super) struct RLimit {
    pub resource: c_int,
    pub value: u64,
}

/// Everything the supervisor and the tool need, computed before the fork, so
/// that nothing is allocated after it.
#[derive(Debug)]
pub(super) struct Params {
    pub toolhost_pid: pid_t,
    pub status_fd: c_int,
    pub cwd_fd: c_int,
    pub limits: [Option<RLimit>; 4],
    /// The kernel isolation layers to apply in the tool.
    pub harden: ToolHardening,
    /// The mount namespace over the protected paths, if any (`mounts`).
    pub mounts: Option<MountPlan>,
    exec: ExecArgs,
}

/// argv and envp as C arrays, and the PATH to search when `argv[0]` has no slash.
#[derive(Debug)]
struct ExecArgs {
    program: CString,
    search_path: Option<CString>,
    _argv: Vec<CString>,
    argv_ptrs: Vec<*const c_char>,
    _envp: Vec<CString>,
    envp_ptrs: Vec<*const c_char>,
}

// SAFETY: the pointers point into the CStrings owned by the same struct, which
// is never mutated after construction.
unsafe impl Send for ExecArgs {}
// SAFETY: as above; shared access only reads.
unsafe impl Sync for ExecArgs {}

impl Params {
    /// Builds the parameters; fails on NUL bytes (the plan has refused those).
    /// One argument per field of the call: a struct of them would only move
    /// the list.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        toolhost_pid: pid_t,
        status_fd: c_int,
        cwd_fd: c_int,
        limits: [Option<RLimit>; 4],
        harden: ToolHardening,
        argv: &[std::ffi::OsString],
        env: &[(std::ffi::OsString, std::ffi::OsString)],
        tmpdir: Option<&std::path::Path>,
    ) -> io::Result<Self> {
        use std::os::unix::ffi::OsStrExt;
        let cstr = |b: &[u8]| {
            CString::new(b).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL byte"))
        };
        let argv: Vec<CString> = argv
            .iter()
            .map(|a| cstr(a.as_bytes()))
            .collect::<io::Result<_>>()?;
        let program = argv
            .first()
            .cloned()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty argv"))?;
        let mut search_path = None;
        let mut envp = Vec::with_capacity(env.len() + 1);
        if let Some(t) = tmpdir {
            let mut kv = b"TMPDIR=".to_vec();
            kv.extend_from_slice(t.as_os_str().as_bytes());
            envp.push(cstr(&kv)?);
        }
        for (k, v) in env {
            if tmpdir.is_some() && k == "TMPDIR" {
                continue;
            }
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            envp.push(cstr(&kv)?);
            if k == "PATH" {
                search_path = Some(cstr(v.as_bytes())?);
            }
        }
        if program.as_bytes().contains(&b'/') {
            search_path = None;
        } else if search_path.is_none() {
            search_path = Some(cstr(crate::env::DEFAULT_PATH.as_bytes())?);
        }
        let mut argv_ptrs: Vec<*const c_char> = argv.iter().map(|a| a.as_ptr()).collect();
        argv_ptrs.push(std::ptr::null());
        let mut envp_ptrs: Vec<*const c_char> = envp.iter().map(|e| e.as_ptr()).collect();
        envp_ptrs.push(std::ptr::null());
        Ok(Params {
            toolhost_pid,
            status_fd,
            cwd_fd,
            limits,
            harden,
            mounts: None,
            exec: ExecArgs {
                program,
                search_path,
                _argv: argv,
                argv_ptrs,
                _envp: envp,
                envp_ptrs,
            },
        })
    }
}

/// What the supervisor reports, as fixed-size bytes on the status pipe.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Report {
    /// 0: the tool exited; 1: killed because toolhost asked; 2: toolhost went away.
    pub reason: u32,
    /// The tool's raw wait status.
    pub wait_status: i32,
    /// User + system CPU time of the tool and the children it waited for, in µs.
    pub cpu_micros: u64,
    /// Processes still alive when the supervisor gave up on them (normally 0).
    pub survivors: u32,
    /// Isolation layers the tool applied before exec; when it never ran
    /// because of isolation, the layer that failed.
    pub layers: u32,
}

pub(super) const REPORT_LEN: usize = 28;
/// `reason` when the tool never ran: `wait_status` holds the errno and
/// `survivors` the stage ([`STAGE_SETUP`] or [`STAGE_EXEC`]).
pub(super) const REASON_NOT_STARTED: u32 = 3;
/// Preparing the tool (cwd, rlimits, clone) failed.
pub(super) const STAGE_SETUP: u32 = 1;
/// The exec itself failed.
pub(super) const STAGE_EXEC: u32 = 2;
/// A required isolation layer (`strict`) could not be applied.
pub(super) const STAGE_ISOLATION: u32 = 3;
const MAGIC: u32 = 0x7448_5331;

impl Report {
    fn encode(&self) -> [u8; REPORT_LEN] {
        let mut b = [0u8; REPORT_LEN];
        b[0..4].copy_from_slice(&MAGIC.to_ne_bytes());
        b[4..8].copy_from_slice(&self.reason.to_ne_bytes());
        b[8..12].copy_from_slice(&self.wait_status.to_ne_bytes());
        b[12..20].copy_from_slice(&self.cpu_micros.to_ne_bytes());
        b[20..24].copy_from_slice(&self.survivors.to_ne_bytes());
        b[24..28].copy_from_slice(&self.layers.to_ne_bytes());
        b
    }

    pub(super) fn decode(b: &[u8]) -> Option<Self> {
        if b.len() != REPORT_LEN {
            return None;
        }
        let u32_at = |i: usize| u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        if u32_at(0) != MAGIC {
            return None;
        }
        let mut cpu = [0u8; 8];
        cpu.copy_from_slice(&b[12..20]);
        Some(Report {
            reason: u32_at(4),
            wait_status: u32_at(8) as i32,
            cpu_micros: u64::from_ne_bytes(cpu),
            survivors: u32_at(20),
            layers: u32_at(24),
        })
    }
}

const REASON_EXITED: u32 = 0;
const REASON_KILLED: u32 = 1;
const REASON_PARENT_GONE: u32 = 2;

/// Signal toolhost sends to ask the supervisor to kill the tree and exit.
pub(super) const KILL_REQUEST: c_int = libc::SIGUSR2;
const PARENT_DEATH: c_int = libc::SIGUSR1;

const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
/// How long the supervisor keeps killing before it reports survivors.
const CLEANUP_BUDGET_NS: i64 = 3_000_000_000;

/// Signals the supervisor keeps blocked for its whole life and takes with
/// `sigwaitinfo`: child exits, the parent-death signal and kill requests.
/// Blocked signals stay pending, so none of them can be missed.
fn supervisor_signals() -> libc::sigset_t {
    // SAFETY: sigset manipulation on a local.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [
            libc::SIGCHLD,
            PARENT_DEATH,
            KILL_REQUEST,
            libc::SIGTERM,
            libc::SIGINT,
            libc::SIGHUP,
        ] {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Entry point, called by `pre_exec` in the forked child, which becomes the
/// supervisor. It never returns `Ok`: it creates and execs the tool itself and
/// exits when the call is over. An `Err` (setsid failed) aborts the spawn.
///
/// # Safety
/// Must only be called between `fork` and `exec`.
pub(super) unsafe fn enter(p: &Params) -> io::Result<()> {
    // SAFETY: the caller runs this in the forked child before exec (see
    // `# Safety`): each call below is a raw system call on plain values and
    // on fds and memory this process owns; nothing allocates or takes a lock.
    unsafe {
        // Blocked from the first instruction: a kill request that arrives
        // before we wait for it stays pending (see `supervise`).
        let set = supervisor_signals();
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        // The wasm backend's no-op SIGURG handler (wasm/special.rs) would
        // make a stray SIGURG interrupt our waits: back to the default (ignored).
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(libc::SIGURG, &dfl, std::ptr::null_mut());

        if libc::setsid() < 0 {
            return Err(io::Error::last_os_error());
        }
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            PARENT_DEATH as libc::c_ulong,
            0,
            0,
            0,
        );
        if libc::getppid() != p.toolhost_pid {
            libc::_exit(1);
        }
        // Keeps a same-user tool from reading toolhost's environment through
        // /proc/<supervisor>/environ (it is a copy of toolhost).
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);

        TOOL_ERRNO.store(0, Ordering::SeqCst);
        TOOL_STAGE.store(0, Ordering::SeqCst);
        TOOL_LAYERS.store(0, Ordering::SeqCst);
        TOOL_REAPED.store(0, Ordering::SeqCst);
        LAUNCHED.store(LAUNCH_PENDING, Ordering::SeqCst);
        TOOL_STARTED.store(0, Ordering::SeqCst);

        // An unprivileged toolhost's user namespace: it lets us make the PID
        // namespace below, and the tool enter the network namespace.
        let mut ns_layers = 0;
        if p.harden.userns_fd >= 0 && libc::setns(p.harden.userns_fd, libc::CLONE_NEWUSER) == 0 {
            ns_layers |= Layer::UserNamespace.bit();
        }
        // The protected paths, before anything of the tool's exists.
        if let Some(m) = &p.mounts {
            match m.apply(p.cwd_fd) {
                Ok(()) => ns_layers |= Layer::ProtectedPaths.bit(),
                // Half made (or the cwd changed under us): never run.
                Err((e, true)) => {
                    report_not_started(p, e, STAGE_ISOLATION, Layer::ProtectedPaths.bit())
                }
                Err((e, false)) if p.harden.strict => {
                    report_not_started(p, e, STAGE_ISOLATION, Layer::ProtectedPaths.bit())
                }
                // No mount namespace at all, best effort: the call runs, and
                // reports the layer missing.
                Err((_, false)) => {}
            }
        }
        let arg = (p as *const Params).cast_mut().cast::<c_void>();
        if p.harden.pidns && libc::unshare(libc::CLONE_NEWPID) == 0 {
            // Our next child is the init of a new PID namespace; it starts
            // the tool (pid 2 there) and reaps what is orphaned in it.
            SUPERVISOR_PIDFD.store(
                libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) as c_int,
                Ordering::SeqCst,
            );
            let stack = INIT_STACK.0.get().cast::<u8>();
            // CLONE_CHILD_CLEARTID: the kernel zeroes LAUNCHED and wakes us
            // when the init exits, should it die before it has launched.
            let init = libc::clone(
                init_main,
                stack.add(INIT_STACK_SIZE).cast::<c_void>(),
                libc::CLONE_VM | libc::CLONE_CHILD_CLEARTID | libc::SIGCHLD,
                arg,
                std::ptr::null_mut::<pid_t>(),
                std::ptr::null_mut::<c_void>(),
                LAUNCHED.as_ptr().cast::<pid_t>(),
            );
            let pidfd = SUPERVISOR_PIDFD.load(Ordering::SeqCst);
            if init > 0 {
                wait_launched();
                // Not LAUNCHED itself: the kernel zeroes it when the init
                // exits, which may already have happened after a launch.
                if TOOL_STARTED.load(Ordering::SeqCst) == 0 {
                    // The init died (killed from outside) before it had
                    // launched the tool. Once it is reaped, nothing of its
                    // namespace is left: report a call that did not start.
                    libc::waitpid(init, std::ptr::null_mut(), libc::__WALL);
                    report_not_started(p, libc::ESRCH, STAGE_SETUP, 0);
                }
                ns_layers |= Layer::PidNamespace.bit();
            }
            if pidfd >= 0 {
                libc::close(pidfd);
            }
            supervise(p, init, true, ns_layers)
        } else {
            // The tool runs on this stack, in our memory, until it execs; we are
            // suspended meanwhile (CLONE_VFORK), so nothing else touches either.
            let tool = libc::clone(
                tool_main,
                tool_stack_top(),
                libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                arg,
            );
            supervise(p, tool, false, ns_layers)
        }
    }
}

fn tool_stack_top() -> *mut c_void {
    // SAFETY: one past the end of the static stack, which clone grows down from.
    unsafe {
        TOOL_STACK
            .0
            .get()
            .cast::<u8>()
            .add(TOOL_STACK_SIZE)
            .cast::<c_void>()
    }
}

/// The init of the call's PID namespace. It shares the supervisor's memory
/// (CLONE_VM, its own stack) but not its fds. It starts the tool as the
/// supervisor would, tells the supervisor it did (`LAUNCHED`), drops every fd
/// (the output pipes must reach EOF once the tree is gone), and reaps every
/// process of the namespace until the tool itself exits. It then records the
/// tool's wait status and exits, and the kernel kills whatever is left in the
/// namespace before the supervisor can reap us: nothing started in the call
/// outlives it, setsid and double forks included.
///
/// Every signal is blocked here (SIGKILL aside, which only the supervisor
/// can send from outside the namespace): no handler inherited from toolhost
/// ever runs in the init.
///
/// The init, the supervisor and the tool before its exec share one thread
/// area, hence one `errno`: while the tool runs before exec, the supervisor is
/// blocked in a futex wait and the init suspended by CLONE_VFORK, so neither
/// writes it; after that, the init never reads it.
extern "C" fn init_main(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the supervisor's `Params`, alive as long as the
    // supervisor, and we die with it (parent-death signal, checked below).
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::sigprocmask(libc::SIG_SETMASK, &all, std::ptr::null_mut());
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        );
        // The supervisor may have died before the line above took effect:
        // its pidfd is readable once it has.
        let pidfd = SUPERVISOR_PIDFD.load(Ordering::SeqCst);
        if pidfd >= 0 {
            let mut pfd = libc::pollfd {
                fd: pidfd,
                events: libc::POLLIN,
                revents: 0,
            };
            if libc::poll(&mut pfd, 1, 0) > 0 {
                libc::_exit(1);
            }
        }
        let tool = libc::clone(
            tool_main,
            tool_stack_top(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            arg,
        );
        if tool < 0 {
            TOOL_ERRNO.store(errno().max(1), Ordering::SeqCst);
            TOOL_STAGE.store(STAGE_SETUP, Ordering::SeqCst);
        }
        TOOL_STARTED.store(1, Ordering::SeqCst);
        LAUNCHED.store(LAUNCH_DONE, Ordering::SeqCst);
        libc::syscall(libc::SYS_futex, LAUNCHED.as_ptr(), libc::FUTEX_WAKE, 1);
        close_from(0, c_int::MAX);
        if tool < 0 {
            libc::_exit(1);
        }
        // With every signal blocked, waitpid fails only with ECHILD.
        loop {
            let mut status: c_int = 0;
            let r = libc::waitpid(-1, &mut status, libc::__WALL);
            if r == tool {
                TOOL_STATUS.store(status, Ordering::SeqCst);
                TOOL_REAPED.store(1, Ordering::SeqCst);
                libc::_exit(0);
            }
            if r < 0 {
                libc::_exit(0);
            }
        }
    }
}

/// Blocks until the init has started the tool (the tool has exec'd or
/// failed), or has exited. No timeout: the wait must not write errno while
/// the tool may still read it (see `init_main`).
unsafe fn wait_launched() {
    // SAFETY: reads an atomic in memory shared with the init (CLONE_VM) and
    // sleeps with nanosleep; no allocation, as post-fork code requires.
    unsafe {
        while LAUNCHED.load(Ordering::SeqCst) == LAUNCH_PENDING {
            libc::syscall(
                libc::SYS_futex,
                LAUNCHED.as_ptr(),
                libc::FUTEX_WAIT,
                LAUNCH_PENDING,
                std::ptr::null::<libc::timespec>(),
            );
        }
    }
}

const TOOL_STACK_SIZE: usize = 64 * 1024;
const INIT_STACK_SIZE: usize = 32 * 1024;
#[repr(C, align(16))]
struct InitStack(UnsafeCell<[u8; INIT_STACK_SIZE]>);
// SAFETY: used only by the PID namespace's init, which is its sole user.
unsafe impl Sync for InitStack {}
static INIT_STACK: InitStack = InitStack(UnsafeCell::new([0; INIT_STACK_SIZE]));
/// A futex word: `LAUNCH_PENDING` until the init has started the tool
/// (`LAUNCH_DONE`) or has exited (0, written by the kernel: CLONE_CHILD_CLEARTID).
static LAUNCHED: AtomicU32 = AtomicU32::new(LAUNCH_PENDING);
const LAUNCH_PENDING: u32 = 1;
/// Set by the init (to 1) once it has tried to start the tool, before it
/// sets `LAUNCH_DONE`: unlike `LAUNCHED`, the kernel never clears it.
static TOOL_STARTED: AtomicU32 = AtomicU32::new(0);
const LAUNCH_DONE: u32 = 2;
/// The tool's wait status, when the init reaped it (`TOOL_REAPED` = 1).
static TOOL_STATUS: AtomicI32 = AtomicI32::new(0);
static TOOL_REAPED: AtomicU32 = AtomicU32::new(0);
/// A pidfd of the supervisor, for the init to check it is still there.
static SUPERVISOR_PIDFD: AtomicI32 = AtomicI32::new(-1);
#[repr(C, align(16))]
struct ToolStack(UnsafeCell<[u8; TOOL_STACK_SIZE]>);
// SAFETY: used only by the single-threaded supervisor process (its own copy
// after fork) and by the vfork child while the supervisor is suspended.
unsafe impl Sync for ToolStack {}
static TOOL_STACK: ToolStack = ToolStack(UnsafeCell::new([0; TOOL_STACK_SIZE]));
/// Set by the tool, in the supervisor's memory, when it fails before or at exec.
static TOOL_ERRNO: AtomicI32 = AtomicI32::new(0);
static TOOL_STAGE: AtomicU32 = AtomicU32::new(0);
/// Isolation layers the tool applied (or, at STAGE_ISOLATION, the one that failed).
static TOOL_LAYERS: AtomicU32 = AtomicU32::new(0);

extern "C" fn tool_main(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the supervisor's `Params`, alive while we run (the
    // supervisor is suspended until we exec or exit).
    unsafe {
        let p = &*(arg as *const Params);
        let stage = match prepare_tool(p) {
            Ok(()) => {
                exec_tool(&p.exec);
                STAGE_EXEC
            }
            Err(Some(layer)) => {
                TOOL_LAYERS.store(layer.bit(), Ordering::SeqCst);
                STAGE_ISOLATION
            }
            Err(None) => STAGE_SETUP,
        };
        TOOL_ERRNO.store(errno().max(1), Ordering::SeqCst);
        TOOL_STAGE.store(stage, Ordering::SeqCst);
        libc::_exit(127)
    }
}

/// In the tool process, sharing the supervisor's memory: only system calls.
/// `Err(Some(layer))`: a required isolation layer failed.
unsafe fn prepare_tool(p: &Params) -> Result<(), Option<Layer>> {
    // SAFETY: runs in the tool process, which shares the supervisor's memory
    // until exec (see `# Safety`): only system calls on plain values and on
    // the fds and pointers in `p`, which outlive the call.
    unsafe {
        let supervisor = libc::getppid();
        libc::setpgid(0, 0);
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        );
        if libc::getppid() != supervisor {
            libc::_exit(127);
        }
        if libc::fchdir(p.cwd_fd) < 0 {
            return Err(None);
        }
        for l in p.limits.iter().flatten() {
            set_limit(l.resource, l.value).map_err(|()| None)?;
        }
        // Core dumps would write tool memory into the workspace.
        set_limit(libc::RLIMIT_CORE as c_int, 0).map_err(|()| None)?;
        // No real-time scheduling and no raised priority: without
        // CAP_SYS_NICE (dropped from root tools when isolation is on) these
        // are what the kernel allows, and at 0 a tool can only lower its
        // priority (nice 10 works, nice -20 and SCHED_FIFO do not).
        set_limit(libc::RLIMIT_RTPRIO as c_int, 0).map_err(|()| None)?;
        set_limit(libc::RLIMIT_NICE as c_int, 0).map_err(|()| None)?;
        cloexec_from(3);
        // Nothing inherited or ambient survives exec, whoever we are.
        clear_inheritable_caps();
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        );
        let applied = apply_in_tool(&p.harden).map_err(Some)?;
        TOOL_LAYERS.store(applied, Ordering::SeqCst);
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        Ok(())
    }
}

/// Clears the inheritable capability set (capset, v3 header).
unsafe fn clear_inheritable_caps() {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const V3: u32 = 0x2008_0522;
    // SAFETY: capget/capset on this thread with `h` and `d` laid out as the
    // kernel's v3 header and two data structs (`#[repr(C)]`), both live
    // through the calls.
    unsafe {
        let mut h = Header {
            version: V3,
            pid: 0,
        };
        let mut d = [Data {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        if libc::syscall(libc::SYS_capget, &mut h as *mut Header, d.as_mut_ptr()) < 0 {
            return;
        }
        if d[0].inheritable == 0 && d[1].inheritable == 0 {
            return;
        }
        d[0].inheritable = 0;
        d[1].inheritable = 0;
        libc::syscall(libc::SYS_capset, &mut h as *mut Header, d.as_ptr());
    }
}

/// execve, searching PATH like execvp when the program has no slash. Returns
/// only on failure, with errno set as execvp would.
unsafe fn exec_tool(e: &ExecArgs) {
    // SAFETY: `e`'s pointer arrays are NUL-terminated and point into C strings
    // that `e` owns (built before the fork), so execve and the PATH search
    // read only valid memory.
    unsafe {
        let argv = e.argv_ptrs.as_ptr();
        let envp = e.envp_ptrs.as_ptr();
        let Some(path) = &e.search_path else {
            libc::execve(e.program.as_ptr(), argv, envp);
            return;
        };
        let name = e.program.as_bytes();
        let mut buf = [0u8; 4096];
        let mut saw_eacces = false;
        for dir in path.as_bytes().split(|&b| b == b':') {
            // Relative entries (and empty ones, which mean ".") would search the
            // cwd, which the agent can write: never.
            if !dir.starts_with(b"/") {
                continue;
            }
            if dir.len() + 1 + name.len() + 1 > buf.len() {
                continue;
            }
            buf[..dir.len()].copy_from_slice(dir);
            buf[dir.len()] = b'/';
            buf[dir.len() + 1..dir.len() + 1 + name.len()].copy_from_slice(name);
            buf[dir.len() + 1 + name.len()] = 0;
            let full = CStr::from_bytes_until_nul(&buf).unwrap_or(c"");
            libc::execve(full.as_ptr(), argv, envp);
            match errno() {
                libc::EACCES => saw_eacces = true,
                libc::ENOENT | libc::ENOTDIR | libc::ELOOP | libc::ENAMETOOLONG => {}
                _ => return,
            }
        }
        set_errno(if saw_eacces {
            libc::EACCES
        } else {
            libc::ENOENT
        });
    }
}

fn set_errno(e: c_int) {
    // SAFETY: writes this thread's errno.
    unsafe { *libc::__errno_location() = e };
}

unsafe fn set_limit(resource: c_int, value: u64) -> Result<(), ()> {
    // SAFETY: getrlimit and setrlimit write and read `rlimit` structs on this
    // stack frame.
    unsafe {
        let mut cur: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(resource as _, &mut cur) < 0 {
            return Err(());
        }
        let extra = if resource == libc::RLIMIT_CPU as c_int {
            1
        } else {
            0
        };
        let hard = (value as libc::rlim_t)
            .saturating_add(extra)
            .min(cur.rlim_max);
        let new = libc::rlimit {
            rlim_cur: (value as libc::rlim_t).min(hard),
            rlim_max: hard,
        };
        if libc::setrlimit(resource as _, &new) < 0 {
            return Err(());
        }
        Ok(())
    }
}

/// Marks every fd from `first` up close-on-exec, so the tool inherits only 0-2
/// while std can still report an exec failure on its own pipe.
unsafe fn cloexec_from(first: c_int) {
    // SAFETY: close_range and fcntl take plain integers; setting close-on-exec
    // on an fd we do not own only affects this process's exec.
    unsafe {
        let r = libc::syscall(
            libc::SYS_close_range,
            first as libc::c_uint,
            libc::c_uint::MAX,
            CLOSE_RANGE_CLOEXEC,
        );
        if r == 0 {
            return;
        }
        for fd in first..max_fd() {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
}

unsafe fn close_from(first: c_int, last: c_int) {
    // SAFETY: close_range and close take plain integers; the fds from `first`
    // to `last` are ones the caller is done with (see the callers).
    unsafe {
        if first > last {
            return;
        }
        let r = libc::syscall(
            libc::SYS_close_range,
            first as libc::c_uint,
            last as libc::c_uint,
            0 as libc::c_uint,
        );
        if r == 0 {
            return;
        }
        for fd in first..=last.min(max_fd()) {
            libc::close(fd);
        }
    }
}

fn max_fd() -> c_int {
    // SAFETY: all zeroes is a valid rlimit (plain integers).
    let mut l: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: `l` is a valid rlimit for getrlimit to write.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } < 0 {
        return 1024;
    }
    l.rlim_cur.min(65_536) as c_int
}

fn now_ns() -> i64 {
    // SAFETY: all zeroes is a valid timespec (plain integers).
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: `ts` is a valid timespec for clock_gettime to write.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

fn errno() -> c_int {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Waits for `child` (the tool, or in a PID namespace its init), ends the call
/// and reports. `ns_layers`: the namespace layers applied here.
unsafe fn supervise(p: &Params, child: pid_t, in_pidns: bool, ns_layers: u32) -> ! {
    // SAFETY: runs in the supervisor after fork (see `# Safety`): waitpid,
    // kill, write and _exit on this process's children and on the status fd
    // in `p`; no allocation.
    unsafe {
        let tool = child;
        let (failure, stage) = if tool < 0 {
            (errno(), STAGE_SETUP)
        } else {
            (
                TOOL_ERRNO.load(Ordering::SeqCst),
                TOOL_STAGE.load(Ordering::SeqCst),
            )
        };
        let failed_layer = TOOL_STAGE.load(Ordering::SeqCst) == STAGE_ISOLATION;
        let layers = TOOL_LAYERS.load(Ordering::SeqCst) | if failed_layer { 0 } else { ns_layers };
        if failure != 0 {
            // The tool never ran (and, if it was created, has exited).
            if tool > 0 {
                libc::waitpid(tool, std::ptr::null_mut(), libc::__WALL);
            }
            report_not_started(p, failure, stage, layers);
        }
        // Keep nothing of toolhost's but the status pipe; in particular not the
        // output pipes, so they reach EOF as soon as the tool's tree is gone.
        close_from(3, p.status_fd - 1);
        close_from(p.status_fd + 1, c_int::MAX);
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            for fd in 0..3 {
                libc::dup2(null, fd);
            }
            if null > 2 {
                libc::close(null);
            }
        }

        // A write to a status pipe whose reader is gone must not kill us.
        let mut ign: libc::sigaction = std::mem::zeroed();
        ign.sa_sigaction = libc::SIG_IGN;
        libc::sigaction(libc::SIGPIPE, &ign, std::ptr::null_mut());

        let mut report = Report {
            reason: REASON_EXITED,
            layers,
            ..Report::default()
        };
        // The signals of `supervisor_signals` stay blocked; we take them with
        // sigwaitinfo. Each round first looks for exited children without
        // blocking (the tool's zombie is left unreaped: it keeps its
        // process-group id reserved until the group has been killed), then
        // waits for the next signal. A signal that arrives at any point stays
        // pending until the next sigwaitinfo, so none is lost.
        let set = supervisor_signals();
        'wait: loop {
            loop {
                let mut info: libc::siginfo_t = std::mem::zeroed();
                let r = libc::waitid(
                    libc::P_ALL,
                    0,
                    &mut info,
                    libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
                );
                let pid = info.si_pid();
                if r != 0 || pid == 0 {
                    break; // no exited child right now
                }
                if pid == tool {
                    break 'wait;
                }
                libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG);
            }
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let sig = libc::sigwaitinfo(&set, &mut info);
            if sig == libc::SIGCHLD || sig < 0 {
                continue;
            }
            if sig == PARENT_DEATH {
                if libc::getppid() != p.toolhost_pid {
                    report.reason = REASON_PARENT_GONE;
                    break;
                }
                // Only the spawning thread exited: follow the new parent thread.
                libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    PARENT_DEATH as libc::c_ulong,
                    0,
                    0,
                    0,
                );
                if libc::getppid() != p.toolhost_pid {
                    report.reason = REASON_PARENT_GONE;
                    break;
                }
                continue;
            }
            // KILL_REQUEST, SIGTERM, SIGINT, SIGHUP.
            report.reason = REASON_KILLED;
            break;
        }

        if in_pidns {
            // Killing the init kills every process of the namespace; by the
            // time it can be reaped, they are gone. (The tool's pid is a pid
            // of that namespace, meaningless here.)
            libc::kill(child, libc::SIGKILL);
        } else {
            libc::kill(-tool, libc::SIGKILL);
            libc::kill(tool, libc::SIGKILL);
        }
        let mut status: c_int = 0;
        let mut ru: libc::rusage = std::mem::zeroed();
        // The init can be reaped only once every process of its namespace is
        // gone; one stuck in the kernel (D state: a hung network or FUSE
        // mount) would hold us: wait within the cleanup budget, then report
        // it as a survivor.
        let reaped = if in_pidns {
            let deadline = now_ns() + CLEANUP_BUDGET_NS;
            loop {
                let r = libc::wait4(child, &mut status, libc::WNOHANG, &mut ru);
                if r != 0 || now_ns() > deadline {
                    break r;
                }
                let ts = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 1_000_000,
                };
                libc::nanosleep(&ts, std::ptr::null_mut());
            }
        } else {
            libc::wait4(child, &mut status, 0, &mut ru)
        };
        let stuck = in_pidns && reaped != child;
        if reaped == child {
            report.wait_status = status;
            let us = |t: libc::timeval| (t.tv_sec as u64) * 1_000_000 + t.tv_usec as u64;
            // In a PID namespace: the init's and all it reaped, the tool first.
            report.cpu_micros = us(ru.ru_utime) + us(ru.ru_stime);
        }
        if in_pidns {
            report.wait_status = if TOOL_REAPED.load(Ordering::SeqCst) == 1 {
                TOOL_STATUS.load(Ordering::SeqCst)
            } else {
                // Killed with its namespace before it exited.
                libc::SIGKILL
            };
        }
        report.survivors = kill_all_children() + u32::from(stuck);

        let bytes = report.encode();
        libc::write(p.status_fd, bytes.as_ptr().cast(), bytes.len());
        libc::_exit(0)
    }
}

/// Reports a call whose tool never ran, and exits.
unsafe fn report_not_started(p: &Params, errno: c_int, stage: u32, layers: u32) -> ! {
    // SAFETY: writes a report held on this stack frame to the status fd in
    // `p`, then exits; no allocation.
    unsafe {
        let report = Report {
            reason: REASON_NOT_STARTED,
            wait_status: errno,
            cpu_micros: 0,
            survivors: stage,
            layers,
        };
        let bytes = report.encode();
        libc::write(p.status_fd, bytes.as_ptr().cast(), bytes.len());
        libc::_exit(0)
    }
}

/// Kills every child of this (subreaper) process, round after round, until it has
/// none; returns how many were still there when the budget ran out.
unsafe fn kill_all_children() -> u32 {
    // SAFETY: signals and reaps only this process's own children (pids it is
    // subreaper of), and sleeps; no allocation.
    unsafe {
        let deadline = now_ns() + CLEANUP_BUDGET_NS;
        let mut buf = [0u8; 4096];
        loop {
            let r = loop {
                let r = libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG | libc::__WALL);
                if r <= 0 {
                    break r;
                }
            };
            if r < 0 && errno() == libc::ECHILD {
                return 0;
            }
            let killed = kill_listed_children(&mut buf);
            if now_ns() > deadline {
                return killed.max(1);
            }
            let ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 200_000,
            };
            libc::nanosleep(&ts, std::ptr::null_mut());
        }
    }
}

/// Reads `/proc/thread-self/children` and SIGKILLs each pid in it. Children of
/// this process cannot be reused pids: they stay ours until reaped.
unsafe fn kill_listed_children(buf: &mut [u8; 4096]) -> u32 {
    // SAFETY: reads /proc/thread-self/children into `buf`, within its length,
    // and signals the listed children of this process, which stay ours until
    // reaped.
    unsafe {
        let fd = libc::open(
            c"/proc/thread-self/children".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return 0;
        }
        let mut count = 0;
        let mut pid: pid_t = 0;
        let mut in_number = false;
        loop {
            let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
            if n <= 0 {
                break;
            }
            for &c in &buf[..n as usize] {
                if c.is_ascii_digit() {
                    pid = pid.saturating_mul(10).saturating_add((c - b'0') as pid_t);
                    in_number = true;
                } else if in_number {
                    libc::kill(pid, libc::SIGKILL);
                    count += 1;
                    pid = 0;
                    in_number = false;
                }
            }
        }
        if in_number {
            libc::kill(pid, libc::SIGKILL);
            count += 1;
        }
        libc::close(fd);
        count
    }
}
