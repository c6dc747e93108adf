//! The per-call supervisor of the `direct` backend on Linux.
//!
//! Invariant: when a call ends, for any reason, no process it started is left.
//!
//! How: the process toolhost starts is not the tool. It is a supervisor that
//! becomes a *child subreaper* and creates the tool. Every descendant of the
//! tool, including those that call `setsid` or double fork, stays in the
//! supervisor's subtree: when a process's parent dies, the kernel reparents
//! it to the nearest subreaper, which is the supervisor. When the tool exits,
//! when toolhost asks (SIGUSR2: timeout or cancellation), or when toolhost
//! dies (parent-death signal), the supervisor kills the tool's process group
//! and then every child it has, round after round, until none is left. It
//! then reports the tool's wait status and CPU time on a pipe and exits.
//!
//! The supervisor is not a fork of toolhost. On x86_64 it is created with
//! `clone3(CLONE_VM)`, as a thread would be but as a process of its own (own
//! fds, own signal dispositions, own namespaces): it shares toolhost's
//! memory, so creating it copies no page table, and toolhost takes no
//! copy-on-write faults while it runs, however large toolhost is (the MCP
//! server's case). It runs on a stack of the call's own [`Region`] (guard
//! pages below each stack), and everything it and the tool share lives
//! there or in the call's [`Params`], which toolhost keeps until it has
//! reaped the supervisor. It makes raw system calls only (`super::sys`):
//! it shares the thread area of the thread that created it, and a C
//! library call would write that thread's `errno`. Elsewhere (aarch64 and
//! other architectures, untested here) the same code runs in a forked copy.
//!
//! The tool itself is created from the supervisor with `clone(CLONE_VM |
//! CLONE_VFORK)`, as `posix_spawn` does, and execs directly.
//!
//! With isolation on (and where the host allows: root, or through toolhost's
//! user namespace), the call also gets a PID namespace. The tool's escapees
//! cannot leave it, and its signals by pid reach only the namespace. The
//! tool is pid 2 there, not pid 1, because pid 1 ignores signals it has no
//! handler for, SIGXCPU of the CPU limit included. Two ways, one per kind
//! of toolhost:
//! - **root**: the supervisor itself is the namespace's init (`clone3`
//!   with `CLONE_NEWPID`), one process fewer per call. It starts the tool
//!   as pid 2, and ends the call by killing every process of the namespace
//!   (`kill(-1)`, which from pid 1 reaches all of them but itself) and
//!   reaping them. Signals sent by the call's own processes never end the
//!   call: no siginfo proves its sender (over the pending-signal limit the
//!   kernel drops it, and a dropped one reads as a `kill` from outside), so
//!   a kill request counts only once toolhost has also set a word of the
//!   call's shared memory (`Shared::kill_requested`), which no process of
//!   the call can reach. (Hence only where the supervisor shares toolhost's
//!   memory: x86_64.) `getppid()` means nothing to a namespace's init, so
//!   it knows toolhost
//!   gone by a pidfd of toolhost (`Params::toolhost_pidfd`), looked at on
//!   each parent-death signal and, after the first, every 100 ms (the
//!   signal may come while toolhost's last thread is still exiting).
//! - **unprivileged**, through toolhost's user namespace: the supervisor
//!   enters it, unshares a PID namespace and starts a small init in it
//!   (`init_main`, sharing the supervisor's memory), which starts the tool
//!   (pid 2 there) and reaps the namespace. When the tool exits, the init
//!   exits, and the kernel kills every process left in the namespace before
//!   the init can be reaped; to end the call early, the supervisor SIGKILLs
//!   the init.
//!
//! A root toolhost makes the supervisor of a sandbox's next call ahead of
//! it (`linux::Waiting`, with the spare of `harden::spare`): it stops once
//! its namespaces and mounts are made, and waits for its go
//! (`wait_for_go`); the call then writes its part of the [`Params`] and
//! sends the go, and the supervisor checks its mounts again and enters the
//! call's cwd before it starts the tool.
//!
//! toolhost takes the call as ended when the report arrives (the status
//! pipe is readable), not when the supervisor has exited: what the
//! supervisor's exit tears down (the call's mount and PID namespaces) is
//! off the call's path, and the supervisor is reaped later (`linux`).
//!
//! The parent-death signal is tied to the *thread* that created the
//! supervisor, which may be a tokio worker that exits later. The supervisor
//! therefore checks, when the signal comes, whether toolhost itself is gone
//! (`getppid()` changed); if only the thread went, it re-arms the signal and
//! carries on.
//!
//! Every signal is blocked in the supervisor from its first instruction
//! (toolhost blocks them around the clone), and every handler it inherits is
//! back to the default (`clone3` with `CLONE_CLEAR_SIGHAND`, or
//! `default_handlers`): no handler of toolhost's ever runs there, in the
//! init or in the tool before exec. It takes the signals it waits for with
//! `sigtimedwait`.
//! Nothing here allocates or takes a lock.

// Code here runs in the supervisor, its init and the tool before exec,
// on a toolhost thread's state: nothing may panic (std's handler would run).
#![deny(
    clippy::indexing_slicing,
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used
)]

use std::ffi::{CString, c_char, c_void};
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};

use libc::{c_int, pid_t};

use super::harden::ToolHardening;
use super::mounts::MountPlan;
use super::sys::{self, SigSet, sig_bit};
use crate::isolation::Layer;
use reap::{Contain, report_not_started, supervise};
use tool::{close_all_but, close_from, exec_tool, prepare_tool};

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
    /// A pidfd of toolhost's own process (readable once it has exited),
    /// above 2, or -1. With one, and a PID namespace wanted without a user
    /// namespace, the supervisor is the namespace's init.
    pub toolhost_pidfd: c_int,
    /// The tool's stdin, stdout and stderr, moved to 0, 1 and 2 in the
    /// supervisor. Like every fd here, above 2 in toolhost (`linux::spawn`).
    pub stdio: [c_int; 3],
    pub status_fd: c_int,
    pub cwd_fd: c_int,
    pub limits: [Option<RLimit>; 4],
    /// The kernel isolation layers to apply in the tool.
    pub harden: ToolHardening,
    /// The mount namespace over the protected paths, if any (`mounts`).
    pub mounts: Option<MountPlan>,
    /// Whether the tool's stdin is `/dev/null` (the call has none).
    pub stdin_null: bool,
    /// A supervisor made ahead of its call (`linux::Waiting`): the read end
    /// of the pipe its go comes on (else -1). Made ahead, it stops once its
    /// namespaces and mounts are made, and waits there (`wait_for_go`);
    /// what it reads after that (the exec arguments, the limits, the
    /// isolation, the mounts' cwd, `cwd_id`, `stdin_null`) toolhost writes
    /// before the go.
    pub go_fd: c_int,
    /// The device and inode the cwd must be, where the supervisor has no
    /// fd of it (made ahead).
    pub cwd_id: (u64, u64),
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
            toolhost_pidfd: -1,
            stdio: [-1; 3],
            status_fd,
            cwd_fd,
            limits,
            harden,
            mounts: None,
            stdin_null: false,
            go_fd: -1,
            cwd_id: (0, 0),
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

impl Params {
    /// The parameters of a supervisor made ahead of its call: its own
    /// fds, with no call yet (an empty argv, never exec'd: `set_call` gives
    /// the call's before the go).
    pub fn ahead(toolhost_pid: pid_t, status_fd: c_int, harden: ToolHardening) -> io::Result<Self> {
        Params::new(
            toolhost_pid,
            status_fd,
            -1,
            [None; 4],
            harden,
            &[std::ffi::OsString::new()],
            &[],
            None,
        )
    }

    /// The call's exec arguments, limits and isolation, for a supervisor
    /// made ahead (before its go): everything of [`Params::new`] but the
    /// fds, which are the waiting supervisor's.
    #[allow(clippy::too_many_arguments)]
    pub fn set_call(
        &mut self,
        limits: [Option<RLimit>; 4],
        harden: ToolHardening,
        argv: &[std::ffi::OsString],
        env: &[(std::ffi::OsString, std::ffi::OsString)],
        tmpdir: Option<&std::path::Path>,
    ) -> io::Result<()> {
        let new = Params::new(
            self.toolhost_pid,
            self.status_fd,
            self.cwd_fd,
            limits,
            harden,
            argv,
            env,
            tmpdir,
        )?;
        self.limits = new.limits;
        self.harden = new.harden;
        self.exec = new.exec;
        Ok(())
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
        let fields = MAGIC
            .to_ne_bytes()
            .into_iter()
            .chain(self.reason.to_ne_bytes())
            .chain(self.wait_status.to_ne_bytes())
            .chain(self.cpu_micros.to_ne_bytes())
            .chain(self.survivors.to_ne_bytes())
            .chain(self.layers.to_ne_bytes());
        for (slot, byte) in b.iter_mut().zip(fields) {
            *slot = byte;
        }
        b
    }

    pub(super) fn decode(b: &[u8]) -> Option<Self> {
        if b.len() != REPORT_LEN {
            return None;
        }
        let u32_at = |i: usize| -> Option<u32> {
            Some(u32::from_ne_bytes(b.get(i..i + 4)?.try_into().ok()?))
        };
        if u32_at(0)? != MAGIC {
            return None;
        }
        Some(Report {
            reason: u32_at(4)?,
            wait_status: u32_at(8)? as i32,
            cpu_micros: u64::from_ne_bytes(b.get(12..20)?.try_into().ok()?),
            survivors: u32_at(20)?,
            layers: u32_at(24)?,
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

/// Signals the supervisor takes with `sigtimedwait` (all are blocked in
/// it): child exits, the parent-death signal and kill requests.
const SUPERVISOR_SIGNALS: SigSet = sig_bit(libc::SIGCHLD)
    | sig_bit(PARENT_DEATH)
    | sig_bit(KILL_REQUEST)
    | sig_bit(libc::SIGTERM)
    | sig_bit(libc::SIGINT)
    | sig_bit(libc::SIGHUP);
const ALL_SIGNALS: SigSet = !0;

/// What the supervisor, its init and the tool (before exec) share, at the
/// start of the call's [`Region`]. Written by toolhost before the clone;
/// after it, only the children write it, but for `kill_requested`, and
/// toolhost reads nothing of it (the report comes on the status pipe).
#[repr(C)]
struct Shared {
    params: *const Params,
    /// Set by the tool when it fails before or at exec.
    tool_errno: AtomicI32,
    tool_stage: AtomicU32,
    /// Isolation layers the tool applied (or, at STAGE_ISOLATION, the one
    /// that failed).
    tool_layers: AtomicU32,
    /// A futex word: `LAUNCH_PENDING` until the init has started the tool
    /// (`LAUNCH_DONE`) or has exited (0, written by the kernel:
    /// CLONE_CHILD_CLEARTID).
    launched: AtomicU32,
    /// Set by the init (to 1) once it has tried to start the tool, before it
    /// sets `LAUNCH_DONE`: unlike `launched`, the kernel never clears it.
    tool_started: AtomicU32,
    /// The tool's wait status, when the init reaped it (`tool_reaped` = 1).
    tool_status: AtomicI32,
    tool_reaped: AtomicU32,
    /// A pidfd of the supervisor, for the init to check it is still there.
    supervisor_pidfd: AtomicI32,
    /// `/proc` as toolhost's mount namespace has it (writable), opened by
    /// the supervisor before it makes the call's read-only view, for the
    /// tool to set its OOM score there; -1 without a view.
    proc_dir: AtomicI32,
    /// 1 when the supervisor was created with CLONE_CLEAR_SIGHAND.
    handlers_cleared: AtomicU32,
    /// Set to 1 by toolhost before it sends a kill request: the one word
    /// toolhost writes after the clone. A supervisor that is its PID
    /// namespace's init takes a kill request only with it set, since the
    /// call's own processes can signal pid 1 and no siginfo proves the
    /// sender (see `reap::supervise`).
    kill_requested: AtomicU32,
    /// Set by a supervisor made ahead once its namespaces and mounts are
    /// made and it waits for its go ([`READY`]); read by toolhost, which
    /// takes only a ready one.
    ready: AtomicU32,
    /// 1 once the call's parameters are written: before the clone, or by
    /// toolhost before the go of a supervisor made ahead.
    go: AtomicU32,
    /// The fd of the cwd the tool enters, set by the supervisor.
    cwd_fd: AtomicI32,
    /// The stack tops, in this region.
    init_stack_top: *mut c_void,
    tool_stack_top: *mut c_void,
}

/// `Shared::ready`: waiting for its go; taken by a call (toolhost's, once
/// it has checked it: the supervisor then waits for the go whatever else
/// happens); leaving (it exits without a call).
const READY: u32 = 1;
const TAKEN: u32 = 2;
const LEAVING: u32 = 3;
const LAUNCH_PENDING: u32 = 1;
const LAUNCH_DONE: u32 = 2;

const SUPERVISOR_STACK: usize = 128 * 1024;
const INIT_STACK: usize = 32 * 1024;
const TOOL_STACK: usize = 64 * 1024;

/// The memory of one call's children: a page for [`Shared`], then three
/// stacks (the supervisor's, the init's, the tool's), each above a guard
/// page, so that an overflow faults instead of writing over toolhost's
/// memory. Made with mmap, and given back to a small pool once toolhost has
/// reaped a supervisor that reported (nothing of the call can touch it
/// then). A region whose call may still have a process in it (no report,
/// or a process that could not be killed) is never reused nor unmapped: a
/// late `CLONE_CHILD_CLEARTID` write of the kernel would land in whatever
/// took its place.
pub(super) struct Region {
    base: NonNull<u8>,
}

// SAFETY: a Region is an exclusively owned mapping; any thread may hold it.
unsafe impl Send for Region {}

static POOL: Mutex<Vec<Region>> = Mutex::new(Vec::new());
const POOL_MAX: usize = 32;

fn page_size() -> usize {
    // SAFETY: sysconf takes a plain constant.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as usize } else { 4096 }
}

/// Offsets in a region: (shared, supervisor stack top, init stack top, tool
/// stack top, length). Each stack sits right above its guard page.
fn layout() -> (usize, usize, usize, usize) {
    let page = page_size();
    let round = |n: usize| n.div_ceil(page) * page;
    let sup = page + page + round(SUPERVISOR_STACK);
    let init = sup + page + round(INIT_STACK);
    let tool = init + page + round(TOOL_STACK);
    (sup, init, tool, tool)
}

impl Region {
    fn take() -> io::Result<Region> {
        if let Some(r) = POOL.lock().unwrap_or_else(|e| e.into_inner()).pop() {
            return Ok(r);
        }
        let (sup, init, tool, len) = layout();
        let page = page_size();
        // SAFETY: a fresh anonymous private mapping; nothing else refers to it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let region = Region {
            base: NonNull::new(base.cast::<u8>()).ok_or_else(|| io::Error::other("mmap"))?,
        };
        for (top, size) in [
            (sup, SUPERVISOR_STACK),
            (init, INIT_STACK),
            (tool, TOOL_STACK),
        ] {
            let guard = top - size.div_ceil(page) * page - page;
            // SAFETY: a page inside the mapping made above.
            if unsafe { libc::mprotect(base.cast::<u8>().add(guard).cast(), page, libc::PROT_NONE) }
                < 0
            {
                let e = io::Error::last_os_error();
                region.unmap();
                return Err(e);
            }
        }
        Ok(region)
    }

    fn at(&self, off: usize) -> *mut c_void {
        // SAFETY: every offset used is within the mapping (`layout`).
        unsafe { self.base.as_ptr().add(off).cast() }
    }

    fn shared(&self) -> *mut Shared {
        self.base.as_ptr().cast()
    }

    /// Marks a kill request of toolhost's, before the signal that carries
    /// it (see `Shared::kill_requested`).
    pub(super) fn request_kill(&self) {
        // SAFETY: the region's first page holds the call's Shared, written
        // before the clone and alive as long as the region.
        unsafe { (*self.shared()).kill_requested.store(1, Ordering::SeqCst) };
    }

    /// Whether its supervisor, made ahead, is still on its way to waiting
    /// for its go (nor waiting, taken or leaving).
    pub(super) fn making(&self) -> bool {
        // SAFETY: as in `request_kill`.
        unsafe { (*self.shared()).ready.load(Ordering::SeqCst) == 0 }
    }

    /// Takes its supervisor, made ahead and waiting, for a call: from
    /// here on it waits for the go (or toolhost gone, or its go pipe
    /// closed) rather than leave on its own. Whether it was waiting.
    pub(super) fn claim(&self) -> bool {
        // SAFETY: as in `request_kill`.
        unsafe {
            (*self.shared())
                .ready
                .compare_exchange(READY, TAKEN, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        }
    }

    /// Marks the call's parameters written, before the go byte.
    pub(super) fn mark_go(&self) {
        // SAFETY: as in `request_kill`.
        unsafe { (*self.shared()).go.store(1, Ordering::SeqCst) };
    }

    /// Back to the pool: the call's processes are all gone.
    pub(super) fn release(self) {
        let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
        if pool.len() < POOL_MAX {
            pool.push(self);
        } else {
            drop(pool);
            self.unmap();
        }
    }

    /// Kept mapped for the life of the process (see the type's doc):
    /// Region has no Drop, so letting it go leaves the mapping in place.
    pub(super) fn abandon(self) {}

    fn unmap(self) {
        let (_, _, _, len) = layout();
        // SAFETY: our own mapping, of that length, which nothing uses any more.
        unsafe { libc::munmap(self.base.as_ptr().cast(), len) };
    }
}

/// A supervisor started for a call.
pub(super) struct Started {
    pub pidfd: OwnedFd,
    pub region: Region,
}

/// Starts the supervisor of a call. `params` must stay where it is, unread
/// and unchanged by anyone else, until the supervisor has been reaped; but
/// for a supervisor made ahead (`Params::go_fd`), whose call's part toolhost
/// writes before the go, while the supervisor holds no reference to them
/// (`supervisor_main`).
pub(super) fn start(params: &Params) -> io::Result<Started> {
    let region = Region::take()?;
    let (sup, init, tool, _) = layout();
    let shared = region.shared();
    // SAFETY: the region is ours alone (fresh, or back from the pool after
    // its call ended); the first page holds a Shared (page-aligned, far
    // smaller than a page).
    unsafe {
        shared.write(Shared {
            params: params as *const Params,
            tool_errno: AtomicI32::new(0),
            tool_stage: AtomicU32::new(0),
            tool_layers: AtomicU32::new(0),
            launched: AtomicU32::new(LAUNCH_PENDING),
            tool_started: AtomicU32::new(0),
            tool_status: AtomicI32::new(0),
            tool_reaped: AtomicU32::new(0),
            supervisor_pidfd: AtomicI32::new(-1),
            proc_dir: AtomicI32::new(-1),
            handlers_cleared: AtomicU32::new(1),
            kill_requested: AtomicU32::new(0),
            ready: AtomicU32::new(0),
            go: AtomicU32::new(u32::from(params.go_fd < 0)),
            cwd_fd: AtomicI32::new(params.cwd_fd),
            init_stack_top: region.at(init),
            tool_stack_top: region.at(tool),
        });
    }
    let flags = libc::CLONE_PIDFD | libc::SIGCHLD | if sys::SHARED_VM { libc::CLONE_VM } else { 0 };
    // The supervisor as the init of the call's PID namespace: where
    // toolhost can make one itself (root: no user namespace to enter
    // first), and can be watched from inside it (its pidfd).
    // With shared memory only: a kill request is proved by a word of the
    // region (`Shared::kill_requested`).
    let as_init = sys::SHARED_VM
        && params.harden.pidns
        && params.harden.userns_fd < 0
        && params.toolhost_pidfd >= 0;
    let mut pidfd: c_int = -1;
    // Every signal blocked in this thread across the clone: the supervisor
    // starts with them all blocked, so no handler of toolhost's runs in it.
    let all = ALL_SIGNALS;
    let mut old: SigSet = 0;
    // SAFETY: rt_sigprocmask on this thread with two u64 sets on this stack;
    // then the clone: the stack top is the supervisor stack's in the region,
    // 16-byte aligned (page-aligned); `supervisor_main` only makes raw system
    // calls; `shared` and `params` outlive the supervisor (the caller's
    // contract: toolhost keeps both until it has reaped it); the old mask is
    // restored whatever the clone did.
    let r = unsafe {
        let _ = sys::call(
            libc::SYS_rt_sigprocmask,
            [
                libc::SIG_SETMASK as usize,
                &all as *const SigSet as usize,
                &mut old as *mut SigSet as usize,
                8,
                0,
                0,
            ],
        );
        // clone3 with CLONE_CLEAR_SIGHAND: the kernel sets every handler
        // of toolhost's back to the default in the supervisor. Where clone3
        // or the flag is missing (before Linux 5.5), clone, and the
        // supervisor resets them itself (`default_handlers`).
        let stack_size = SUPERVISOR_STACK.div_ceil(page_size()) * page_size();
        let mut args = sys::CloneArgs {
            flags: flags as u64 & !(libc::SIGCHLD as u64) | sys::CLONE_CLEAR_SIGHAND,
            pidfd: &mut pidfd as *mut c_int as u64,
            child_tid: 0,
            parent_tid: 0,
            exit_signal: libc::SIGCHLD as u64,
            stack: region.at(sup - stack_size) as u64,
            stack_size: stack_size as u64,
            tls: 0,
        };
        let mut r = Err(libc::EINVAL);
        if as_init {
            args.flags |= libc::CLONE_NEWPID as u64;
            r = sys::clone3(&args, supervisor_main, shared.cast());
            args.flags &= !(libc::CLONE_NEWPID as u64);
        }
        // Without a namespace of its own (a host that refuses one: the
        // supervisor then tries `unshare`, and reports what it got).
        if !as_init
            || matches!(
                r,
                Err(libc::EPERM | libc::EINVAL | libc::ENOSPC | libc::EUSERS)
            )
        {
            r = sys::clone3(&args, supervisor_main, shared.cast());
        }
        let r = match r {
            Err(libc::ENOSYS | libc::EINVAL | libc::E2BIG | libc::EPERM) => {
                (*shared).handlers_cleared.store(0, Ordering::SeqCst);
                sys::clone(
                    flags,
                    region.at(sup),
                    &mut pidfd,
                    std::ptr::null_mut(),
                    supervisor_main,
                    shared.cast(),
                )
            }
            r => r,
        };
        let _ = sys::sigprocmask(libc::SIG_SETMASK, &old);
        r
    };
    match r {
        Ok(_) => Ok(Started {
            // SAFETY: CLONE_PIDFD stored a fresh pidfd that nobody else owns.
            pidfd: unsafe { OwnedFd::from_raw_fd(pidfd) },
            region,
        }),
        Err(e) => {
            region.release();
            Err(io::Error::from_raw_os_error(e))
        }
    }
}

/// The supervisor: sets itself up, creates the tool and supervises it. It
/// never returns: it exits when the call is over. One made ahead of its
/// call (`Params::go_fd`) stops once its namespaces and mounts are made,
/// until its go; should anything fail before, it exits without a report
/// (toolhost then does not take it).
extern "C" fn supervisor_main(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the call's Shared, whose Params outlive us (`start`).
    // Raw system calls only, on plain values and on fds and memory of this
    // call; nothing allocates or takes a lock. The Params are read through
    // a reference taken anew after the go: toolhost writes the call's part
    // of them before it.
    unsafe {
        let sh = &*(arg as *const Shared);
        let mut ns_layers = 0;
        let as_init;
        let ahead;
        // Made ahead: its go pipe, toolhost's pidfd, and toolhost's mount
        // table (`wait_for_go`), taken before the wait: toolhost writes the
        // Params before the go, and no reference to them is held across it.
        let (go_fd, toolhost_pidfd);
        let mut watch = -1;
        {
            let p = &*sh.params;
            ahead = p.go_fd >= 0;
            // Made ahead, a failure is no call's: exit, unreported.
            let fail = |errno, stage, layers| -> ! {
                if ahead {
                    sys::exit(1)
                }
                report_not_started(p, errno, stage, layers)
            };
            let _ = sys::sigprocmask(libc::SIG_SETMASK, &ALL_SIGNALS);
            if sh.handlers_cleared.load(Ordering::SeqCst) == 1 {
                // The kernel reset the handlers; an ignored SIGCHLD stays
                // ignored by CLONE_CLEAR_SIGHAND (see `default_handlers`).
                let _ = sys::set_disposition(libc::SIGCHLD, libc::SIG_DFL);
            } else {
                default_handlers();
            }
            if sys::setsid().is_err() {
                sys::exit(1);
            }
            let _ = sys::prctl(libc::PR_SET_CHILD_SUBREAPER, 1);
            let _ = sys::prctl(libc::PR_SET_PDEATHSIG, PARENT_DEATH as usize);
            // pid 1: the init of the call's PID namespace (`start`).
            as_init = sys::getpid() == 1;
            if toolhost_gone(p, as_init) || (ahead && !as_init) {
                sys::exit(1);
            }
            if !sys::SHARED_VM {
                // A forked copy of toolhost: keep a same-user tool from reading
                // toolhost's environment through /proc/<supervisor>/environ.
                // (Shared memory is toolhost's own mm, dumpable or not as
                // `protect_host_environ` says.)
                let _ = sys::prctl(libc::PR_SET_DUMPABLE, 0);
            }
            // The tool's stdio at 0-2, and nothing else of toolhost's but the
            // fds this call uses (each above 2: `linux::spawn`).
            for (i, &fd) in p.stdio.iter().enumerate() {
                if sys::dup3(fd, i as c_int, 0).is_err() {
                    fail(libc::EBADF, STAGE_SETUP, 0);
                }
            }
            let mut keep = [
                p.status_fd,
                p.toolhost_pidfd,
                p.cwd_fd,
                p.harden.ruleset_fd,
                p.harden.netns_fd,
                p.harden.userns_fd,
                p.go_fd,
            ];
            close_all_but(&mut keep);

            // An unprivileged toolhost's user namespace: it lets us make the PID
            // namespace below, and the tool enter the network namespace.
            if p.harden.userns_fd >= 0
                && sys::setns(p.harden.userns_fd, libc::CLONE_NEWUSER).is_ok()
            {
                ns_layers |= Layer::UserNamespace.bit();
            }
            // The call's mount namespace, before anything of the tool's exists.
            if let Some(m) = &p.mounts {
                if m.readonly_host() {
                    // Close-on-exec: the tool uses it before exec, and only
                    // there, to set its OOM score (`/proc` is read-only in the
                    // view). Without it the tool would lose that: no call.
                    match sys::openat(
                        libc::AT_FDCWD,
                        c"/proc".as_ptr(),
                        libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
                    ) {
                        Ok(fd) => sh.proc_dir.store(fd as c_int, Ordering::SeqCst),
                        Err(e) => fail(e, STAGE_SETUP, 0),
                    }
                }
                let r = if ahead {
                    // toolhost's mount table, before this namespace exists.
                    match sys::openat(
                        libc::AT_FDCWD,
                        c"/proc/self/mountinfo".as_ptr(),
                        libc::O_RDONLY | libc::O_CLOEXEC,
                    ) {
                        Ok(fd) => watch = fd as c_int,
                        Err(e) => fail(e, STAGE_SETUP, 0),
                    }
                    // The places checked as a call's go checks them (a
                    // kernel that cannot say a mount's root: no wait).
                    m.apply_mounts().and_then(|()| {
                        m.recheck()
                            .map_err(|(errno, layer)| super::mounts::MountFailure {
                                errno,
                                layer,
                                made: true,
                            })
                    })
                } else {
                    m.apply(p.cwd_fd)
                };
                match r {
                    Ok(()) => {
                        ns_layers |= Layer::ProtectedPaths.bit();
                        if m.readonly_host() {
                            ns_layers |= Layer::ReadonlyHost.bit();
                        }
                    }
                    // Half made (or the cwd changed under us): never run.
                    Err(f) if f.made || p.harden.strict || ahead => {
                        fail(f.errno, STAGE_ISOLATION, f.layer.bit())
                    }
                    // No mount namespace at all, best effort: the call runs, and
                    // reports the layer missing.
                    Err(_) => {}
                }
            }
            (go_fd, toolhost_pidfd) = (p.go_fd, p.toolhost_pidfd);
        }
        if ahead {
            sh.ready.store(READY, Ordering::SeqCst);
            match wait_for_go(sh, go_fd, toolhost_pidfd, watch) {
                Go::Run => {}
                Go::Stale => report_not_started(
                    &*sh.params,
                    libc::ESTALE,
                    STAGE_ISOLATION,
                    Layer::ReadonlyHost.bit(),
                ),
                Go::Gone => sys::exit(1),
            }
        }
        // The call's parameters, complete from here on.
        let p = &*sh.params;
        if let Some(m) = &p.mounts
            && ns_layers & Layer::ProtectedPaths.bit() != 0
        {
            if ahead {
                // What `apply_mounts` checked, checked again at the call,
                // and the call's cwd, by path in this namespace: the
                // directory toolhost planned the call with, or no call.
                if let Err((e, layer)) = m.recheck() {
                    report_not_started(p, e, STAGE_ISOLATION, layer.bit());
                }
                match m.enter_cwd(p.cwd_id) {
                    Ok(fd) => sh.cwd_fd.store(fd, Ordering::SeqCst),
                    Err((e, layer)) => report_not_started(p, e, STAGE_ISOLATION, layer.bit()),
                }
            }
            // An fd opened in toolhost's namespace reaches the host's
            // mounts, read-only view or not: a call without stdin gets the
            // view's `/dev/null`, so that a root tool cannot fchmod, fchown
            // or futimens the host's through its fd 0.
            if m.readonly_host() && p.stdin_null && !reopen_null_stdin() {
                report_not_started(p, libc::EBADF, STAGE_ISOLATION, Layer::ReadonlyHost.bit());
            }
        }
        if as_init {
            // The tool is pid 2 of our namespace; its orphans come to us.
            let tool = start_tool(sh, arg);
            supervise(
                p,
                sh,
                tool,
                Contain::AsInit,
                ns_layers | Layer::PidNamespace.bit(),
            )
        } else if p.harden.pidns && sys::unshare(libc::CLONE_NEWPID).is_ok() {
            // Our next child is the init of a new PID namespace; it starts
            // the tool (pid 2 there) and reaps what is orphaned in it.
            sh.supervisor_pidfd.store(
                sys::pidfd_open(sys::getpid()).map_or(-1, |fd| fd as c_int),
                Ordering::SeqCst,
            );
            // CLONE_CHILD_CLEARTID: the kernel zeroes `launched` and wakes us
            // when the init exits, should it die before it has launched.
            let init = sys::clone(
                libc::CLONE_VM | libc::CLONE_CHILD_CLEARTID | libc::SIGCHLD,
                sh.init_stack_top,
                std::ptr::null_mut(),
                sh.launched.as_ptr(),
                init_main,
                arg,
            );
            let pidfd = sh.supervisor_pidfd.load(Ordering::SeqCst);
            if let Ok(init) = init {
                wait_launched(sh);
                // Not `launched` itself: the kernel zeroes it when the init
                // exits, which may already have happened after a launch.
                if sh.tool_started.load(Ordering::SeqCst) == 0 {
                    // The init died (killed from outside) before it had
                    // launched the tool. Once it is reaped, nothing of its
                    // namespace is left: report a call that did not start.
                    let mut st = 0;
                    let _ = sys::wait4(init as pid_t, &mut st, libc::__WALL, None);
                    report_not_started(p, libc::ESRCH, STAGE_SETUP, 0);
                }
                ns_layers |= Layer::PidNamespace.bit();
            }
            if pidfd >= 0 {
                let _ = sys::close(pidfd);
            }
            supervise(
                p,
                sh,
                init.map(|pid| pid as pid_t),
                Contain::Init,
                ns_layers,
            )
        } else {
            let tool = start_tool(sh, arg);
            supervise(p, sh, tool, Contain::Group, ns_layers)
        }
    }
}

/// How long a supervisor made ahead waits for its go before it exits: a
/// sandbox idle that long has its next call start its own.
const AHEAD_WAIT_NS: i64 = 30_000_000_000;

/// A supervisor made ahead: waits for its go (a byte on `go_fd`, with
/// `Shared::go` set): [`Go::Run`], or [`Go::Stale`] when toolhost's mount
/// table changed after a call took it. Anything else ends the supervisor,
/// with the namespaces it holds: toolhost gone (its pidfd
/// readable); the go pipe closed unwritten (toolhost does not want it); a
/// change of toolhost's mount table (`watch`: its `mountinfo`, opened
/// before this namespace was made; its mounts would no longer be the
/// host's, and a host filesystem unmounted would stay mounted here); or
/// [`AHEAD_WAIT_NS`] without a call.
///
/// # Safety
/// In the supervisor only: raw system calls on fds of its own.
unsafe fn wait_for_go(sh: &Shared, go_fd: c_int, toolhost_pidfd: c_int, watch: c_int) -> Go {
    let mut stale = false;
    let mut fds = [
        libc::pollfd {
            fd: go_fd,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: toolhost_pidfd,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: watch,
            events: libc::POLLPRI,
            revents: 0,
        },
    ];
    // SAFETY: pollfds on this stack; fds of our own.
    unsafe {
        loop {
            for f in fds.iter_mut() {
                f.revents = 0;
            }
            if sys::wait_any(&mut fds, AHEAD_WAIT_NS).is_err() {
                return Go::Gone;
            }
            let [go, gone, changed] = &mut fds;
            if go.revents != 0 {
                break;
            }
            if gone.revents != 0 {
                return Go::Gone;
            }
            // The timeout or a mount change: leave, unless a call has
            // taken us (its go is on its way: toolhost checked the mount
            // table itself, up to its claim).
            if sh
                .ready
                .compare_exchange(READY, LEAVING, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                return Go::Gone;
            }
            // Taken: a change since is the call's to know (`GoneStale`).
            if changed.revents != 0 {
                stale = true;
            }
            changed.fd = -1;
        }
        let mut b = [0u8; 1];
        let read = sys::read(go_fd, &mut b);
        let _ = sys::close(go_fd);
        // A change up to the go: the view may lack a host mount made
        // since, or hold it writable (propagated); the call must not run.
        if !stale && changed_now(watch) {
            stale = true;
        }
        let _ = sys::close(watch);
        if read != Ok(1) || sh.go.load(Ordering::SeqCst) != 1 {
            return Go::Gone;
        }
        if stale { Go::Stale } else { Go::Run }
    }
}

/// How a supervisor made ahead stopped waiting (`wait_for_go`).
#[derive(PartialEq, Eq)]
enum Go {
    /// Its go came: the call runs.
    Run,
    /// Its go came, but toolhost's mount table changed after the call took
    /// it: the call does not run.
    Stale,
    /// No go: the supervisor exits.
    Gone,
}

/// Whether toolhost's mount table changed since `watch` (its `mountinfo`)
/// last said (a zero-timeout poll); -1: no.
///
/// # Safety
/// In the supervisor only: a poll of an fd of its own.
unsafe fn changed_now(watch: c_int) -> bool {
    let mut fds = [libc::pollfd {
        fd: watch,
        events: libc::POLLPRI,
        revents: 0,
    }];
    // SAFETY: one pollfd on this stack; zero timeout.
    watch >= 0 && matches!(unsafe { sys::wait_any(&mut fds, 0) }, Ok(n) if n > 0)
}

/// Starts the tool (`tool_main`) as a child of this process; returns once
/// it has exec'd or failed. The tool runs on its own stack, in our memory,
/// until it execs; we are suspended meanwhile (CLONE_VFORK), so nothing
/// else touches either.
///
/// # Safety
/// In the supervisor or its init, with `arg` the call's Shared.
unsafe fn start_tool(sh: &Shared, arg: *mut c_void) -> Result<pid_t, c_int> {
    // SAFETY: the tool stack of the call's region, used by nothing else
    // while the tool runs before exec (we are suspended); `tool_main` makes
    // raw system calls only.
    unsafe {
        sys::clone(
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            sh.tool_stack_top,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            tool_main,
            arg,
        )
        .map(|pid| pid as pid_t)
    }
}

/// Whether the process of `pidfd` has exited (a zero-timeout poll).
///
/// # Safety
/// `pidfd` is an open pidfd.
pub(super) unsafe fn exited(pidfd: c_int) -> bool {
    // SAFETY: the caller's contract.
    unsafe { sys::poll_in(pidfd) }
}

/// Whether toolhost has exited. The supervisor's parent is the toolhost
/// thread that created it, or another of toolhost's threads once that one
/// has exited; outside a PID namespace of its own `getppid()` tells, inside
/// it is 0, and toolhost's pidfd tells (readable once every thread of
/// toolhost has exited).
///
/// # Safety
/// Only in the supervisor: raw system calls only.
pub(super) unsafe fn toolhost_gone(p: &Params, as_init: bool) -> bool {
    // SAFETY: getppid, and a zero-timeout poll of an fd of this call.
    unsafe {
        if as_init {
            p.toolhost_pidfd < 0 || sys::poll_in(p.toolhost_pidfd)
        } else {
            sys::getppid() != p.toolhost_pid
        }
    }
}

/// fd 0 replaced by `/dev/null` opened in this (the call's) mount
/// namespace; whether it was.
///
/// # Safety
/// Only in the supervisor: raw system calls only.
unsafe fn reopen_null_stdin() -> bool {
    // SAFETY: a NUL-terminated literal; fds opened here.
    unsafe {
        let Ok(null) = sys::openat(libc::AT_FDCWD, c"/dev/null".as_ptr(), libc::O_RDONLY) else {
            return false;
        };
        let null = null as c_int;
        if null == 0 {
            return true;
        }
        let r = sys::dup3(null, 0, 0);
        let _ = sys::close(null);
        r.is_ok()
    }
}

/// Every handler inherited from toolhost back to the default, as
/// `posix_spawn` does for its child: our dispositions are our own (no
/// CLONE_SIGHAND), and the init and the tool inherit them. Without this, a
/// signal that reached the tool between unblocking and exec would run one of
/// toolhost's handlers there, in toolhost's memory, with a toolhost thread's
/// thread area. Ignored signals stay ignored (the tool resets SIGPIPE, as
/// std's spawn does), except SIGCHLD: ignored, children would reap
/// themselves and the waits here would fail.
///
/// # Safety
/// In the supervisor, every signal blocked: raw system calls only.
unsafe fn default_handlers() {
    for sig in 1..=64 {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: rt_sigaction on this process's own dispositions.
        unsafe {
            if let Ok(old) = sys::swap_disposition(sig, libc::SIG_DFL)
                && old == libc::SIG_IGN
                && sig != libc::SIGCHLD
            {
                let _ = sys::set_disposition(sig, libc::SIG_IGN);
            }
        }
    }
}

/// The init of the call's PID namespace. It shares the supervisor's memory
/// (CLONE_VM, its own stack) but not its fds. It starts the tool as the
/// supervisor would, tells the supervisor it did (`launched`), drops every fd
/// (the output pipes must reach EOF once the tree is gone), and reaps every
/// process of the namespace until the tool itself exits. It then records the
/// tool's wait status and exits, and the kernel kills whatever is left in the
/// namespace before the supervisor can reap us: nothing started in the call
/// outlives it, setsid and double forks included.
///
/// Every signal is blocked here (SIGKILL aside, which only the supervisor
/// can send from outside the namespace): no handler inherited from toolhost
/// ever runs in the init.
extern "C" fn init_main(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the call's Shared, alive as long as the supervisor,
    // and we die with it (parent-death signal, checked below). Raw system
    // calls only.
    unsafe {
        let sh = &*(arg as *const Shared);
        let _ = sys::sigprocmask(libc::SIG_SETMASK, &ALL_SIGNALS);
        let _ = sys::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as usize);
        // The supervisor may have died before the line above took effect:
        // its pidfd is readable once it has.
        let pidfd = sh.supervisor_pidfd.load(Ordering::SeqCst);
        if pidfd >= 0 && sys::poll_in(pidfd) {
            sys::exit(1);
        }
        let tool = start_tool(sh, arg);
        if let Err(e) = tool {
            sh.tool_errno.store(e.max(1), Ordering::SeqCst);
            sh.tool_stage.store(STAGE_SETUP, Ordering::SeqCst);
        }
        sh.tool_started.store(1, Ordering::SeqCst);
        sh.launched.store(LAUNCH_DONE, Ordering::SeqCst);
        sys::futex_wake(sh.launched.as_ptr());
        close_from(0, c_int::MAX);
        let Ok(tool) = tool else {
            sys::exit(1);
        };
        // With every signal blocked, waiting fails only with ECHILD.
        loop {
            let mut status: c_int = 0;
            match sys::wait4(-1, &mut status, libc::__WALL, None) {
                Ok(r) if r == tool as usize => {
                    sh.tool_status.store(status, Ordering::SeqCst);
                    sh.tool_reaped.store(1, Ordering::SeqCst);
                    sys::exit(0);
                }
                Ok(_) => {}
                Err(_) => sys::exit(0),
            }
        }
    }
}

/// Blocks until the init has started the tool (the tool has exec'd or
/// failed), or has exited.
///
/// # Safety
/// In the supervisor only: a futex wait on the call's Shared.
unsafe fn wait_launched(sh: &Shared) {
    while sh.launched.load(Ordering::SeqCst) == LAUNCH_PENDING {
        // SAFETY: `launched` is a live, aligned u32 of the call's region.
        unsafe { sys::futex_wait(sh.launched.as_ptr(), LAUNCH_PENDING) };
    }
}

extern "C" fn tool_main(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the call's Shared, alive while we run (our parent is
    // suspended until we exec or exit). Raw system calls only.
    unsafe {
        let sh = &*(arg as *const Shared);
        let p = &*sh.params;
        let stage = match prepare_tool(p, sh) {
            Ok(()) => {
                let e = exec_tool(&p.exec);
                sh.tool_errno.store(e.max(1), Ordering::SeqCst);
                STAGE_EXEC
            }
            Err((e, Some(layer))) => {
                sh.tool_errno.store(e.max(1), Ordering::SeqCst);
                sh.tool_layers.store(layer.bit(), Ordering::SeqCst);
                STAGE_ISOLATION
            }
            Err((e, None)) => {
                sh.tool_errno.store(e.max(1), Ordering::SeqCst);
                STAGE_SETUP
            }
        };
        sh.tool_stage.store(stage, Ordering::SeqCst);
        sys::exit(127)
    }
}
