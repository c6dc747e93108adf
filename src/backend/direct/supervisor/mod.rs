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
use std::ffi::{CString, c_char, c_void};
use std::io;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};

use libc::{c_int, pid_t};

use super::harden::ToolHardening;
use super::mounts::MountPlan;
use crate::isolation::Layer;
use reap::{errno, report_not_started, supervise};
use tool::{close_from, exec_tool, prepare_tool};

mod reap;
mod tool;

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
///
/// # Safety
/// Only in the forked supervisor or the tool process, between fork and
/// exec (see the module doc): it makes async-signal-safe system calls
/// only, with no allocation and no locks.
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
