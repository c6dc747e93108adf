//! Linux: spawn through the per-call supervisor (see `supervisor`).
//!
//! The parts: [`Hardening`] (the call's isolation, prepared before the
//! spawn, and what it reports); [`spawn`], which makes the tool's pipes and
//! starts the supervisor; [`Child`], the tool's pipes and the supervisor's
//! pidfd, which the shared code of `direct` reads and waits on; [`Control`],
//! which asks the supervisor to end the call, reads its report, and keeps
//! what the supervisor reads until it has been reaped (a call dropped
//! unfinished hands that to a reaper thread).

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;
use tokio::process::Command;

use super::harden::{self, Prepared};
use super::supervisor::{self, Params, RLimit, Region, Report};
use super::{Finished, Termination};
use crate::isolation::{ALL_LAYERS, IsolationReport, Layer};
use crate::outcome::Outcome;
use crate::plan::ExecPlan;

/// The call's isolation, prepared before the spawn (see `harden`).
pub(super) struct Hardening(Prepared);

pub(super) use harden::Spares;

/// Prepares the call's isolation (with the sandbox's spare tmp and ruleset
/// where they hold); fails only under `strict`.
/// `held`: the mounts of the protected paths, from the call's one look.
pub(super) fn harden(
    plan: &ExecPlan,
    spares: &Spares,
    held: Vec<crate::backend::protect::Held>,
) -> Result<Hardening, Outcome> {
    harden::prepare(plan, spares, held).map(Hardening)
}

/// After the spawn: makes the sandbox's next call's tmp and ruleset while
/// the tool runs (`harden::spare`).
pub(super) fn stock(spares: &Arc<Spares>, plan: &ExecPlan) {
    spares.stock(plan, harden::landlock_abi());
}

impl Hardening {
    /// What the call got, from the layers the tool reported. The first call
    /// with a given set of layers logs it (once per process and set: an
    /// operator sees what holds, and when it changes).
    pub fn report(&self, f: &Finished) -> Option<IsolationReport> {
        let applied = f.layers | self.0.parent_applied;
        let r = IsolationReport::new(self.0.level, applied, self.0.wanted);
        static SEEN: std::sync::Mutex<Vec<(u8, u32, u32)>> = std::sync::Mutex::new(Vec::new());
        let key = (self.0.level as u8, applied, self.0.wanted);
        let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
        if !seen.contains(&key) && seen.len() < 64 {
            seen.push(key);
            if r.missing.is_empty() {
                tracing::info!(
                    backend = "direct",
                    "isolation {}: {}",
                    r.level.as_str(),
                    r.applied.join(", ")
                );
            } else {
                tracing::warn!(
                    backend = "direct",
                    "isolation {}: {}; not available here: {}",
                    r.level.as_str(),
                    r.applied.join(", "),
                    r.missing.join(", ")
                );
            }
        }
        Some(r)
    }

    /// The message of a call stopped by a layer that failed on its way to
    /// the tool: under `strict`, any required one; at any level, one left
    /// half made (the call's mount namespace).
    pub fn failure(&self, layer: u32, errno: i32) -> Outcome {
        let name = ALL_LAYERS
            .iter()
            .find(|l| l.bit() == layer)
            .map_or("a layer", |l| l.name());
        let level = if self.0.tool.strict {
            "isolation = \"strict\": "
        } else {
            ""
        };
        // What the call's look held was gone, or had changed kind, when it
        // was mounted: a race with another writer, not a missing feature.
        let why = if layer == Layer::ProtectedPaths.bit()
            && (errno == libc::ENOENT || errno == libc::ESTALE || errno == libc::ELOOP)
        {
            ": a path the call's mounts hold (a protected path, a read-only allowed dir, or a link or dir on the way to one) changed between the call's look at it and its mounts (another writer in the allowed dir?)"
        } else {
            ""
        };
        Outcome::new(
            crate::outcome::OutcomeKind::IsolationUnavailable,
            format!(
                "{level}{name} could not be applied to the tool ({}){why}; the call did not run",
                io::Error::from_raw_os_error(errno)
            ),
        )
    }
}

/// A running call. `control` is declared first so that it is dropped first:
/// if the caller drops the call's future, the supervisor is told to kill the
/// tree before anything of the call is let go.
pub(super) struct Spawned {
    pub control: Control,
    pub child: Child,
}

/// toolhost's ends of the tool's pipes, the supervisor's pidfd, and the
/// status pipe its report comes on.
pub(super) struct Child {
    pub stdin: Option<pipe::Sender>,
    pub stdout: Option<pipe::Receiver>,
    pub stderr: Option<pipe::Receiver>,
    pidfd: Arc<AsyncFd<OwnedFd>>,
    /// The status pipe (a duplicate of [`Control`]'s end), watched only.
    report: AsyncFd<OwnedFd>,
}

impl Child {
    /// Waits until the call is over (cancel-safe): the supervisor has
    /// written its report, which it does once every process of the call is
    /// gone, or has exited (the pipe then reaches EOF). The supervisor's own
    /// exit, with what it tears down, is not waited for: [`Control::finish`]
    /// reaps it if it is gone, else a thread does. The status is the
    /// report's business.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        // Both stay readable once they are: a report is read only after
        // this returns, and a pidfd is readable once its process has exited.
        tokio::select! {
            r = self.report.readable() => drop(r?),
            r = self.pidfd.readable() => drop(r?),
        }
        Ok(ExitStatus::from_raw(0))
    }

    /// Kills the supervisor itself (when a kill request went unanswered).
    pub fn start_kill(&mut self) -> io::Result<()> {
        pidfd_signal(self.pidfd.get_ref().as_raw_fd(), libc::SIGKILL)
    }
}

fn pidfd_signal(pidfd: RawFd, sig: libc::c_int) -> io::Result<()> {
    // SAFETY: pidfd_send_signal on our supervisor's pidfd (open while the
    // call's Child or Control lives): a pidfd names one process, never a
    // reused pid.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd,
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0u32,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// What the supervisor reads, kept until it is reaped: its parameters, its
/// region, and fds moved above 2 for it. Only [`settle`](Self::settle) lets
/// go of the parameters and the region; dropped any other way (a panic, a
/// reaper thread that could not start), a Kept leaks both, as it must while
/// a process of the call may still read them.
struct Kept {
    params: Option<Box<Params>>,
    region: Option<Region>,
    _fds: Vec<OwnedFd>,
}

impl Kept {
    /// After the supervisor is reaped: `clean` when it reported and nothing
    /// of the call is left, so that nothing can touch the region any more.
    fn settle(mut self, clean: bool) {
        if clean {
            if let Some(r) = self.region.take() {
                r.release();
            }
            self.params.take();
        }
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        // Unsettled, or settled unclean: a process of the call may remain
        // (see `Region`): never reuse, never free.
        if let Some(r) = self.region.take() {
            r.abandon();
        }
        if let Some(p) = self.params.take() {
            std::mem::forget(p);
        }
    }
}

pub(super) struct Control {
    pidfd: Arc<AsyncFd<OwnedFd>>,
    status: Option<File>,
    kept: Option<Kept>,
}

impl Control {
    /// Asks the supervisor to kill the tool's whole tree and exit.
    pub fn kill_tree(&mut self, _child: &mut Child) {
        self.mark_kill();
        let _ = pidfd_signal(self.pidfd.get_ref().as_raw_fd(), supervisor::KILL_REQUEST);
    }

    /// Marks the kill request in the call's shared memory, where the
    /// supervisor looks for it (`supervisor::Region::request_kill`).
    fn mark_kill(&self) {
        if let Some(r) = self.kept.as_ref().and_then(|k| k.region.as_ref()) {
            r.request_kill();
        }
    }

    /// Nothing to wait for here before [`finish`](Self::finish).
    pub async fn settle(&mut self) {}

    /// Reads the supervisor's report (the call is over: [`Child::wait`]),
    /// and reaps the supervisor, here if it has exited, else on the reaper
    /// thread (it exits right after its report).
    pub fn finish(&mut self, _status: Option<ExitStatus>) -> Finished {
        let report = self.status.take().and_then(read_report);
        let clean = report.is_some_and(|r| r.survivors == 0 || not_started(&r));
        if let Some(kept) = self.kept.take() {
            if reap(self.pidfd.get_ref().as_raw_fd(), false) {
                kept.settle(clean);
            } else {
                hand_to_reaper(self.pidfd.get_ref(), Reaped::After(clean), kept);
            }
        }
        let Some(r) = report else {
            return Finished {
                termination: Termination::Unknown,
                cpu_time: None,
                survivors: 0,
                layers: 0,
                limit_hit: None,
            };
        };
        let st = r.wait_status;
        let termination = if not_started(&r) && r.survivors == supervisor::STAGE_ISOLATION {
            Termination::IsolationFailed {
                errno: st,
                layer: r.layers,
            }
        } else if not_started(&r) {
            Termination::NotStarted {
                errno: st,
                at_exec: r.survivors == supervisor::STAGE_EXEC,
            }
        } else if libc::WIFEXITED(st) {
            Termination::Exited(libc::WEXITSTATUS(st))
        } else if libc::WIFSIGNALED(st) {
            Termination::Signalled(libc::WTERMSIG(st))
        } else {
            Termination::Unknown
        };
        let (survivors, layers) = match termination {
            Termination::NotStarted { .. } | Termination::IsolationFailed { .. } => (0, 0),
            _ => (r.survivors, r.layers),
        };
        Finished {
            termination,
            cpu_time: Some(Duration::from_micros(r.cpu_micros)),
            survivors,
            layers,
            limit_hit: None,
        }
    }
}

fn not_started(r: &Report) -> bool {
    r.reason == supervisor::REASON_NOT_STARTED
}

fn read_report(mut status: File) -> Option<Report> {
    let mut buf = [0u8; supervisor::REPORT_LEN];
    match status.read(&mut buf) {
        Ok(n) => Report::decode(&buf[..n]),
        Err(_) => None,
    }
}

/// waitid(P_PIDFD): true once the supervisor is reaped (or was, by someone
/// else: ECHILD).
fn reap(pidfd: RawFd, block: bool) -> bool {
    // SAFETY: all zeroes is a valid siginfo_t (plain integers and padding).
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let flags = libc::WEXITED | libc::__WALL | if block { 0 } else { libc::WNOHANG };
    loop {
        // SAFETY: waitid on our pidfd with a siginfo on this stack.
        let r = unsafe { libc::waitid(libc::P_PIDFD, pidfd as libc::id_t, &mut info, flags) };
        if r == 0 {
            // WNOHANG with nothing to reap leaves si_pid at 0.
            // SAFETY: the kernel filled (or we zeroed) `info`.
            return block || unsafe { info.si_pid() } != 0;
        }
        match io::Error::last_os_error().raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::ECHILD) => return true,
            _ => return false,
        }
    }
}

/// Whether the call of a supervisor handed to the reaper left nothing
/// behind: known from its report already, or to be read from it.
enum Reaped {
    /// The report was read: the call was clean (or not).
    After(bool),
    /// The status pipe, to read the report from once the supervisor is
    /// reaped (none: unknown, so not clean).
    Report(Option<File>),
}

/// A supervisor still running when its call let go (a dropped future, a
/// wait that failed, or a call that ended on its report while the
/// supervisor was still exiting): one thread, for the whole process, waits
/// for such supervisors in turn and settles what each reads. Each has been
/// sent a kill request or has reported, so it exits within its cleanup
/// budget; one that takes long only delays the settling of those queued
/// after it.
fn hand_to_reaper(pidfd: &OwnedFd, how: Reaped, kept: Kept) {
    let fd = match pidfd.try_clone() {
        Ok(fd) => fd,
        Err(e) => {
            tracing::error!("direct backend: cannot wait for a supervisor: {e}");
            return; // `kept` leaks (its Drop)
        }
    };
    match supervisor_reaper() {
        Some(tx) => {
            // A send fails only if the thread is gone; the job (and the
            // Kept in it) is then dropped, and leaks (its Drop).
            let _ = tx
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .send((fd, how, kept));
        }
        None => drop(kept), // leaks (its Drop)
    }
}

/// A supervisor to wait for, how to know its call clean, and what it reads.
type ReapJob = (OwnedFd, Reaped, Kept);

/// Starts the thread of [`hand_to_reaper`] (`start_reapers` does, so that
/// a CLI's only call does not start it on its way out).
pub(super) fn start_supervisor_reaper() {
    let _ = supervisor_reaper();
}

/// The thread of [`hand_to_reaper`], started on first use; `None` if it
/// could not be.
fn supervisor_reaper() -> Option<&'static std::sync::Mutex<std::sync::mpsc::Sender<ReapJob>>> {
    static REAPER: std::sync::OnceLock<Option<std::sync::Mutex<std::sync::mpsc::Sender<ReapJob>>>> =
        std::sync::OnceLock::new();
    REAPER
        .get_or_init(|| {
            let (tx, rx) = std::sync::mpsc::channel::<ReapJob>();
            std::thread::Builder::new()
                .name("toolhost-reap".into())
                .spawn(move || {
                    for (fd, how, kept) in rx {
                        let reaped = reap(fd.as_raw_fd(), true);
                        let clean = match how {
                            Reaped::After(clean) => clean,
                            Reaped::Report(status) => status
                                .and_then(read_report)
                                .is_some_and(|r| r.survivors == 0 || not_started(&r)),
                        };
                        kept.settle(reaped && clean);
                    }
                })
                .inspect_err(|e| {
                    tracing::error!("direct backend: no thread to reap supervisors: {e}")
                })
                .ok()
                .map(|_| std::sync::Mutex::new(tx))
        })
        .as_ref()
}

impl Drop for Control {
    fn drop(&mut self) {
        if let Some(kept) = self.kept.take() {
            // The call was let go unfinished: end it, then let a thread
            // wait for the supervisor.
            if let Some(r) = &kept.region {
                r.request_kill();
            }
            let _ = pidfd_signal(self.pidfd.get_ref().as_raw_fd(), supervisor::KILL_REQUEST);
            hand_to_reaper(
                self.pidfd.get_ref(),
                Reaped::Report(self.status.take()),
                kept,
            );
        }
    }
}

/// A pidfd of this process, made once, above 2 (for the supervisor to keep):
/// the supervisor that is its call's PID namespace's init watches it to know
/// toolhost gone. -1 where the kernel has none (before Linux 5.3): the
/// supervisor is then not the init (`supervisor::start`).
fn own_pidfd() -> RawFd {
    static OWN: std::sync::OnceLock<Option<OwnedFd>> = std::sync::OnceLock::new();
    OWN.get_or_init(|| {
        // SAFETY: pidfd_open of this process; the fd, if any, is fresh and
        // ours (close-on-exec, as every pidfd).
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) };
        if fd < 0 {
            return None;
        }
        // SAFETY: as above.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
        owned_above_stdio(fd).ok()
    })
    .as_ref()
    .map_or(-1, |fd| fd.as_raw_fd())
}

fn cloexec_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both fds are fresh and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn set_nonblocking(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: fcntl on an fd we own.
    unsafe {
        let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// `fd` if it is above 2; else a duplicate above 2, kept in `keep` (the
/// supervisor puts the tool's stdio at 0-2 and must not clobber it).
fn above_stdio(fd: RawFd, keep: &mut Vec<OwnedFd>) -> io::Result<RawFd> {
    if !(0..=2).contains(&fd) {
        return Ok(fd);
    }
    // SAFETY: F_DUPFD_CLOEXEC of an open fd; the new fd is ours.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    if new < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fresh fd, owned by nobody else.
    keep.push(unsafe { OwnedFd::from_raw_fd(new) });
    Ok(new)
}

fn owned_above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    let mut keep = Vec::new();
    above_stdio(fd.as_raw_fd(), &mut keep)?;
    Ok(keep.pop().unwrap_or(fd))
}

/// The tool's resource limits, from the plan.
fn limits_of(plan: &ExecPlan) -> [Option<RLimit>; 4] {
    let l = &plan.limits;
    let limit = |resource: libc::__rlimit_resource_t, v: Option<u64>| {
        v.map(|value| RLimit {
            resource: resource as libc::c_int,
            value,
        })
    };
    [
        limit(libc::RLIMIT_AS, l.memory_bytes),
        limit(libc::RLIMIT_CPU, l.cpu_seconds),
        limit(libc::RLIMIT_NPROC, l.processes),
        limit(libc::RLIMIT_FSIZE, l.file_size_bytes),
    ]
}

pub(super) fn spawn(_cmd: &mut Command, plan: &ExecPlan, h: &Hardening) -> io::Result<Spawned> {
    if let Some(w) = h.0.take_waiting() {
        return w.go(plan, &h.0);
    }
    let cwd = plan
        .cwd
        .as_ref()
        .ok_or_else(|| io::Error::other("no working directory"))?;
    let (status_read, status_write) = cloexec_pipe()?;
    set_nonblocking(&status_read)?;
    // SAFETY: a fresh duplicate, moved into the AsyncFd, which owns it
    // (open, the same pipe) until it is dropped.
    let report =
        unsafe { AsyncFd::register_with_interest(status_read.try_clone()?, Interest::READABLE) }
            .map_err(|e| e.into_parts().1)?;
    let status_write = owned_above_stdio(status_write)?;
    let (stdin_ours, stdin_tool) = match plan.stdin {
        Some(_) => {
            let (r, w) = cloexec_pipe()?;
            (Some(w), owned_above_stdio(r)?)
        }
        None => {
            let null = File::open("/dev/null")?;
            (None, owned_above_stdio(OwnedFd::from(null))?)
        }
    };
    let (stdout_ours, stdout_tool) = cloexec_pipe()?;
    let stdout_tool = owned_above_stdio(stdout_tool)?;
    let (stderr_ours, stderr_tool) = cloexec_pipe()?;
    let stderr_tool = owned_above_stdio(stderr_tool)?;

    let mut fds = Vec::new();
    let mut tool = h.0.tool;
    tool.ruleset_fd = above_stdio(tool.ruleset_fd, &mut fds)?;
    tool.netns_fd = above_stdio(tool.netns_fd, &mut fds)?;
    tool.userns_fd = above_stdio(tool.userns_fd, &mut fds)?;
    let mut params = Box::new(Params::new(
        // SAFETY: getpid cannot fail.
        unsafe { libc::getpid() },
        status_write.as_raw_fd(),
        above_stdio(cwd.dir.as_raw_fd(), &mut fds)?,
        limits_of(plan),
        tool,
        &plan.argv,
        &plan.env,
        h.0.tmp.as_ref().map(|t| t.path()),
    )?);
    params.stdio = [
        stdin_tool.as_raw_fd(),
        stdout_tool.as_raw_fd(),
        stderr_tool.as_raw_fd(),
    ];
    params.mounts = h.0.mounts.clone();
    params.stdin_null = plan.stdin.is_none();
    params.toolhost_pidfd = own_pidfd();
    // toolhost's ends, ready before the supervisor exists: nothing can fail
    // between its start and the Control that keeps what it reads.
    let receiver = |fd: OwnedFd| -> io::Result<pipe::Receiver> {
        set_nonblocking(&fd)?;
        pipe::Receiver::from_owned_fd_unchecked(fd)
    };
    let stdin = match stdin_ours {
        Some(w) => {
            set_nonblocking(&w)?;
            Some(pipe::Sender::from_owned_fd_unchecked(w)?)
        }
        None => None,
    };
    let stdout = receiver(stdout_ours)?;
    let stderr = receiver(stderr_ours)?;

    let started = supervisor::start(&params)?;
    // The supervisor has its own copies; toolhost's go now, so that the
    // pipes reach EOF when the tool's tree is gone.
    drop((status_write, stdin_tool, stdout_tool, stderr_tool));
    let kept = Kept {
        params: Some(params),
        region: Some(started.region),
        _fds: fds,
    };
    // SAFETY: the pidfd is an OwnedFd moved into the AsyncFd, which owns it
    // (open, the same file) until it is dropped.
    let pidfd = match unsafe { AsyncFd::register_with_interest(started.pidfd, Interest::READABLE) }
    {
        Ok(fd) => Arc::new(fd),
        Err(e) => {
            let (fd, e) = e.into_parts();
            // Not watchable: end the supervisor here and now.
            let _ = pidfd_signal(fd.as_raw_fd(), libc::SIGKILL);
            reap(fd.as_raw_fd(), true);
            kept.settle(false);
            return Err(e);
        }
    };
    Ok(Spawned::of(
        pidfd,
        status_read,
        kept,
        stdin,
        (stdout, stderr),
        report,
    ))
}

impl Spawned {
    /// A call started: its supervisor's pidfd, the status pipe's end (and
    /// its watched duplicate, `report`), what the supervisor reads, and
    /// toolhost's ends of the tool's pipes.
    fn of(
        pidfd: Arc<AsyncFd<OwnedFd>>,
        status: OwnedFd,
        kept: Kept,
        stdin: Option<pipe::Sender>,
        (stdout, stderr): (pipe::Receiver, pipe::Receiver),
        report: AsyncFd<OwnedFd>,
    ) -> Spawned {
        Spawned {
            control: Control {
                pidfd: Arc::clone(&pidfd),
                status: Some(File::from(status)),
                kept: Some(kept),
            },
            child: Child {
                stdin,
                stdout: Some(stdout),
                stderr: Some(stderr),
                pidfd,
                report,
            },
        }
    }
}

/// A supervisor made ahead of its call (`harden::spare`, for a root
/// toolhost's calls with the read-only view): already the init of the
/// call's PID namespace, in the call's mount namespace with its mounts
/// made, waiting for its go, with its pipes made. A call takes it only if
/// it is ready and its mounts are the ones the call would make now
/// ([`usable`](Self::usable)); the call then writes its part of the
/// parameters (argv, environment, limits, isolation, cwd) and sends the
/// go ([`go`](Self::go)). Dropped unused, the supervisor is killed (it has
/// no child yet) and reaped on the supervisors' reaper.
pub(super) struct Waiting {
    params: Option<Box<Params>>,
    region: Option<Region>,
    pidfd: Option<OwnedFd>,
    /// The write end of the go pipe.
    go: Option<OwnedFd>,
    /// toolhost's ends: the report, and the tool's stdin, stdout, stderr.
    status: Option<OwnedFd>,
    stdin: Option<OwnedFd>,
    stdout: Option<OwnedFd>,
    stderr: Option<OwnedFd>,
    /// `/proc/self/mountinfo`, opened before the mounts were planned: a
    /// change of toolhost's mount table since shows when it is polled.
    watch: File,
    /// Set once `watch` has shown a change (a poll shows each change once).
    changed: std::sync::atomic::AtomicBool,
    /// The supervisor's numbers of the ruleset and network namespace fds.
    ruleset_fd: RawFd,
    netns_fd: RawFd,
    _live: Live,
}

/// Supervisors made ahead and not yet taken or let go, in this process.
static LIVE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
/// At most this many wait at once (each holds a process, its PID and mount
/// namespaces, and six fds of toolhost's); sandboxes past it have their
/// calls start their own.
const MAX_LIVE: usize = 16;

/// One of [`LIVE`], given back when dropped.
struct Live;

impl Live {
    fn take() -> Option<Live> {
        use std::sync::atomic::Ordering;
        (LIVE.fetch_add(1, Ordering::AcqRel) < MAX_LIVE)
            .then_some(Live)
            .or_else(|| {
                LIVE.fetch_sub(1, Ordering::AcqRel);
                None
            })
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

impl Waiting {
    /// Starts a supervisor for a call with `mounts`, whose Landlock
    /// ruleset will be `ruleset` (a duplicate of the spare's, rules added
    /// to either reach both) and whose tool enters `netns_fd`. `watch`
    /// must have been opened before `mounts` were planned.
    pub(super) fn make(
        mut tool: harden::ToolHardening,
        ruleset: OwnedFd,
        mounts: super::mounts::MountPlan,
        watch: File,
    ) -> io::Result<Waiting> {
        let pidfd = own_pidfd();
        if pidfd < 0 || !tool.pidns || tool.userns_fd >= 0 || !mounts.readonly_host() {
            return Err(io::Error::other("no supervisor made ahead for this call"));
        }
        let live = Live::take().ok_or_else(|| {
            io::Error::other(format!("{MAX_LIVE} supervisors made ahead already wait"))
        })?;
        let (status_read, status_write) = cloexec_pipe()?;
        set_nonblocking(&status_read)?;
        let status_write = owned_above_stdio(status_write)?;
        let (stdin_tool, stdin_ours) = cloexec_pipe()?;
        let stdin_tool = owned_above_stdio(stdin_tool)?;
        let (stdout_ours, stdout_tool) = cloexec_pipe()?;
        let stdout_tool = owned_above_stdio(stdout_tool)?;
        let (stderr_ours, stderr_tool) = cloexec_pipe()?;
        let stderr_tool = owned_above_stdio(stderr_tool)?;
        let (go_read, go_write) = cloexec_pipe()?;
        let go_read = owned_above_stdio(go_read)?;
        let ruleset = owned_above_stdio(ruleset)?;
        let mut fds = Vec::new();
        tool.ruleset_fd = ruleset.as_raw_fd();
        tool.netns_fd = above_stdio(tool.netns_fd, &mut fds)?;
        let mut params = Box::new(Params::ahead(
            // SAFETY: getpid cannot fail.
            unsafe { libc::getpid() },
            status_write.as_raw_fd(),
            tool,
        )?);
        params.stdio = [
            stdin_tool.as_raw_fd(),
            stdout_tool.as_raw_fd(),
            stderr_tool.as_raw_fd(),
        ];
        params.mounts = Some(mounts);
        params.toolhost_pidfd = pidfd;
        params.go_fd = go_read.as_raw_fd();
        let started = supervisor::start(&params)?;
        // The supervisor has its own copies.
        drop((status_write, stdin_tool, stdout_tool, stderr_tool, go_read));
        Ok(Waiting {
            params: Some(params),
            region: Some(started.region),
            pidfd: Some(started.pidfd),
            go: Some(go_write),
            status: Some(status_read),
            stdin: Some(stdin_ours),
            stdout: Some(stdout_ours),
            stderr: Some(stderr_ours),
            watch,
            changed: std::sync::atomic::AtomicBool::new(false),
            ruleset_fd: ruleset.as_raw_fd(),
            netns_fd: tool.netns_fd,
            _live: live,
        })
        // `ruleset` and `fds` (toolhost's copies) close here.
    }

    /// Whether a call whose mounts are `call` may take it: the supervisor
    /// is waiting (its namespaces and mounts made, nothing failed), the
    /// mount table has not changed since its mounts were planned (a mount
    /// made since would show in its namespace as the host has it, not
    /// read-only), and its mounts are the ones `call` makes: the same places
    /// kept writable, each the same directory now, the same paths held.
    pub(super) fn usable(&self, call: &super::mounts::MountPlan) -> bool {
        let (Some(region), Some(pidfd), Some(params)) = (&self.region, &self.pidfd, &self.params)
        else {
            return false;
        };
        let mut pfd = [
            libc::pollfd {
                fd: self.watch.as_raw_fd(),
                events: libc::POLLPRI,
                revents: 0,
            },
            libc::pollfd {
                fd: pidfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two valid pollfds, borrowed for the call; timeout 0.
        let polled = unsafe { libc::poll(pfd.as_mut_ptr(), 2, 0) } != 0;
        let [watched, _] = &pfd;
        if watched.revents != 0 {
            self.changed
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        let changed = polled || self.changed.load(std::sync::atomic::Ordering::Relaxed);
        // Claimed last, once everything else holds: a supervisor that
        // leaves on its own (a timeout, a mount change) does so only if no
        // call claimed it first; one that failed never was waiting.
        !changed && params.mounts.as_ref().is_some_and(|m| m.same_mounts(call)) && region.claim()
    }

    /// Whether its supervisor is still on its way to waiting (neither
    /// waiting, taken, leaving nor gone): a call leaves it for a later one.
    pub(super) fn starting(&self) -> bool {
        let (Some(region), Some(pidfd)) = (&self.region, &self.pidfd) else {
            return false;
        };
        // SAFETY: a zero-timeout poll of our pidfd.
        region.making() && !unsafe { supervisor::exited(pidfd.as_raw_fd()) }
    }

    /// The numbers the call's isolation must use here, for the fds the
    /// supervisor holds.
    pub(super) fn fds(&self) -> (RawFd, RawFd) {
        (self.ruleset_fd, self.netns_fd)
    }

    /// Gives the supervisor its call, and sends the go.
    fn go(mut self, plan: &ExecPlan, prepared: &Prepared) -> io::Result<Spawned> {
        let cwd = plan
            .cwd
            .as_ref()
            .ok_or_else(|| io::Error::other("no working directory"))?;
        let st = rustix::fs::fstat(&cwd.dir)?;
        let mut tool = prepared.tool;
        (tool.ruleset_fd, tool.netns_fd) = self.fds();
        let (Some(mut params), Some(region), Some(pidfd), Some(go), Some(status)) = (
            self.params.take(),
            self.region.take(),
            self.pidfd.take(),
            self.go.take(),
            self.status.take(),
        ) else {
            return Err(io::Error::other("the supervisor made ahead was used"));
        };
        // From here on, what goes wrong lets go of the supervisor (`abandon`).
        let set = params.set_call(
            limits_of(plan),
            tool,
            &plan.argv,
            &plan.env,
            prepared.tmp.as_ref().map(|t| t.path()),
        );
        if let Err(e) = set {
            abandon(params, region, pidfd);
            return Err(e);
        }
        params.mounts = prepared.mounts.clone();
        params.stdin_null = plan.stdin.is_none();
        // `st_dev` and `st_ino` are `u64` on Linux.
        #[allow(clippy::unnecessary_cast)]
        {
            params.cwd_id = (st.st_dev as u64, st.st_ino as u64);
        }
        // toolhost's ends, ready before the go: nothing can fail after it.
        let ends = (|| -> io::Result<_> {
            // SAFETY: a fresh duplicate, moved into the AsyncFd, which owns it.
            let report =
                unsafe { AsyncFd::register_with_interest(status.try_clone()?, Interest::READABLE) }
                    .map_err(|e| e.into_parts().1)?;
            let receiver = |fd: Option<OwnedFd>| -> io::Result<pipe::Receiver> {
                let fd = fd.ok_or_else(|| io::Error::other("no pipe"))?;
                set_nonblocking(&fd)?;
                pipe::Receiver::from_owned_fd_unchecked(fd)
            };
            let stdin = match (plan.stdin.is_some(), self.stdin.take()) {
                (true, Some(w)) => {
                    set_nonblocking(&w)?;
                    Some(pipe::Sender::from_owned_fd_unchecked(w)?)
                }
                _ => None,
            };
            let stdout = receiver(self.stdout.take())?;
            let stderr = receiver(self.stderr.take())?;
            let watched = pidfd.try_clone()?;
            // SAFETY: the OwnedFd moved in is owned by the AsyncFd.
            let watched = unsafe { AsyncFd::register_with_interest(watched, Interest::READABLE) }
                .map_err(|e| e.into_parts().1)?;
            Ok((report, stdin, stdout, stderr, watched))
        })();
        let (report, stdin, stdout, stderr, watched) = match ends {
            Ok(ends) => ends,
            Err(e) => {
                abandon(params, region, pidfd);
                return Err(e);
            }
        };
        region.mark_go();
        // SAFETY: a one-byte write from this stack to our pipe's write end.
        let sent = unsafe { libc::write(go.as_raw_fd(), [1u8].as_ptr().cast(), 1) } == 1;
        drop(go);
        drop(pidfd);
        let pidfd = Arc::new(watched);
        let kept = Kept {
            params: Some(params),
            region: Some(region),
            _fds: Vec::new(),
        };
        if !sent {
            // The supervisor is gone: the call reads no report.
            let _ = pidfd_signal(pidfd.get_ref().as_raw_fd(), libc::SIGKILL);
        }
        Ok(Spawned::of(
            pidfd,
            status,
            kept,
            stdin,
            (stdout, stderr),
            report,
        ))
    }
}

impl Drop for Waiting {
    /// Unused: the supervisor is killed (it has no child) and reaped on the
    /// supervisors' reaper, which then gives its region back.
    fn drop(&mut self) {
        drop(self.go.take());
        if let (Some(params), Some(region), Some(pidfd)) =
            (self.params.take(), self.region.take(), self.pidfd.take())
        {
            abandon(params, region, pidfd);
        }
    }
}

/// A supervisor made ahead that no call will use: killed (it has no child
/// yet) and reaped on the supervisors' reaper, which then gives its region
/// back.
fn abandon(params: Box<Params>, region: Region, pidfd: OwnedFd) {
    let _ = pidfd_signal(pidfd.as_raw_fd(), libc::SIGKILL);
    hand_to_reaper(
        &pidfd,
        Reaped::After(true),
        Kept {
            params: Some(params),
            region: Some(region),
            _fds: Vec::new(),
        },
    );
}
