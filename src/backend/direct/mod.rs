//! The `direct` backend: a native subprocess.
//!
//! Invariants: the tool gets exactly the plan's environment, its stdin bytes or
//! an empty stdin (never the host's), only fds 0-2, the plan's rlimits, and the
//! plan's cwd entered by handle. Its output is captured with caps while it
//! streams. When the call ends (exit, timeout, or the caller dropping the
//! future) nothing the tool started is left running; on Linux this holds even
//! for `setsid` and double-fork escapees (see `supervisor`), on other Unix
//! systems for the tool's process group, on Windows for the tool itself.

use std::io;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::process::Command;
use tokio::sync::watch;

use crate::backend::Backend;
use crate::outcome::{Outcome, OutcomeKind, RunOutput};
use crate::output::drain;
use crate::plan::BackendKind;
use crate::plan::ExecPlan;

#[cfg(target_os = "linux")]
mod harden;
#[cfg(target_os = "linux")]
mod mounts;
mod probe;
#[cfg(target_os = "linux")]
mod supervisor;
#[cfg(target_os = "linux")]
mod sys;
#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
pub(crate) use harden::container_filter;
#[cfg(target_os = "linux")]
pub use harden::flush_private_tmps;
#[cfg(target_os = "linux")]
pub(crate) use harden::{
    DENIED_SYSCALL_NAMES, landlock_abi, reapers_to_start, seccomp_available, shared_netns,
    shared_userns, warm_up,
};

/// Waits until the private tmps of finished calls are removed (no private
/// tmps on this platform).
#[cfg(not(target_os = "linux"))]
pub async fn flush_private_tmps() {}

use probe::host_checks;
pub use probe::{direct_guarantees, log_guarantees_once};

#[cfg_attr(target_os = "linux", path = "linux.rs")]
#[cfg_attr(all(unix, not(target_os = "linux")), path = "unix.rs")]
#[cfg_attr(windows, path = "windows/mod.rs")]
#[cfg_attr(not(any(unix, windows)), path = "other.rs")]
mod platform;

/// How long output pipes are still read after the tool's tree is gone, for a
/// process that could not be killed but holds them open.
const DRAIN_GRACE: Duration = Duration::from_millis(500);
/// How long a kill request may take before toolhost stops waiting politely.
const KILL_GRACE: Duration = Duration::from_secs(5);

#[cfg(target_os = "linux")]
use platform::{Spares, stock};

/// What is made ahead of a call (Linux: `harden::spare`); nothing here.
#[cfg(not(target_os = "linux"))]
#[derive(Debug, Default)]
struct Spares;

#[cfg(not(target_os = "linux"))]
fn stock(_: &std::sync::Arc<Spares>, _: &ExecPlan) {}

/// Runs plans as native subprocesses.
#[derive(Debug, Default)]
pub struct DirectBackend {
    /// The next call's private tmp and Landlock ruleset, made while the
    /// last call's tool ran (Linux; used only if they hold for the call).
    spares: std::sync::Arc<Spares>,
}

impl DirectBackend {
    /// The backend. Everything a call needs is in its plan; the backend
    /// keeps only what it makes ahead of the next call.
    pub fn new() -> Self {
        DirectBackend::default()
    }
}

impl Backend for DirectBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Direct
    }

    fn run(&self, plan: &ExecPlan) -> impl std::future::Future<Output = RunOutput> + Send {
        run(plan, &self.spares)
    }

    async fn probe(&self, _limits: &crate::plan::Limits) -> crate::probe::Probe {
        let mut p = crate::probe::Probe::default();
        host_checks(&mut p);
        p
    }

    /// Waits until the private tmps of finished calls are removed (the
    /// reaper answers on a oneshot: no thread waits), and moves aside what
    /// cancelled calls made at protected paths (on a blocking thread, only
    /// when there are some).
    async fn shutdown(&self) {
        #[cfg(target_os = "linux")]
        self.spares.close();
        flush_private_tmps().await;
        if crate::backend::protect::any_cancelled() {
            let _ = tokio::task::spawn_blocking(crate::backend::protect::sweep_cancelled).await;
        }
    }
}

/// How the tool's life ended, as the platform layer saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Termination {
    Exited(i32),
    #[cfg_attr(not(unix), allow(dead_code))]
    Signalled(i32),
    /// The tool never ran: preparing it or exec failed with this errno.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    NotStarted {
        errno: i32,
        at_exec: bool,
    },
    /// `strict`: an isolation layer (bit) failed in the tool with this errno.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    IsolationFailed {
        errno: i32,
        layer: u32,
    },
    /// The supervisor vanished without a report.
    Unknown,
}

/// What the platform layer reports once the tool is gone.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Finished {
    pub termination: Termination,
    pub cpu_time: Option<Duration>,
    pub survivors: u32,
    /// Isolation layers the tool applied before exec.
    #[cfg_attr(not(any(target_os = "linux", windows)), allow(dead_code))]
    pub layers: u32,
    /// A limit the platform says the tool hit (Windows job notifications);
    /// elsewhere outcomes are read from signals and times.
    pub limit_hit: Option<LimitHit>,
}

/// A limit the platform reported as hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(windows), allow(dead_code))]
pub(crate) enum LimitHit {
    Memory,
    Cpu,
}

/// Runs `plan`; hardened, it holds the protected paths that exist and moves
/// aside, once the tool's processes are gone, what was made where one did
/// not (one look decides which: `backend::protect::look`).
async fn run(plan: &ExecPlan, spares: &std::sync::Arc<Spares>) -> RunOutput {
    let mut sweep = crate::backend::protect::Sweep::unarmed();
    let mut out = run_swept(plan, spares, &mut sweep).await;
    sweep.finish(&mut out);
    out
}

async fn run_swept(
    plan: &ExecPlan,
    spares: &std::sync::Arc<Spares>,
    sweep: &mut crate::backend::protect::Sweep,
) -> RunOutput {
    let start = Instant::now();
    // `Sandbox::plan` refuses these for direct; a plan built by hand is too.
    if plan.cwd.is_none() || plan.mounts.iter().any(|m| m.guest != m.path) {
        return RunOutput::refused(
            BackendKind::Direct,
            Outcome::new(
                OutcomeKind::InvalidRequest,
                "the direct backend runs native programs at host paths, in a working directory: it needs an allowed dir and cannot present one at a guest path",
            ),
            start.elapsed(),
        );
    }
    // Arguments and environment are the platform layer's business: on Linux
    // the supervisor execs the tool itself.
    let mut cmd = Command::new(&plan.argv[0]);
    cmd.stdin(if plan.stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());

    // `off` holds nothing and sweeps nothing.
    let look = if plan.isolation == crate::isolation::IsolationLevel::Off {
        crate::backend::protect::Look::default()
    } else {
        crate::backend::protect::look(plan)
    };
    let hardening = match platform::harden(plan, spares, look.held) {
        Ok(h) => h,
        Err(o) => return RunOutput::refused(BackendKind::Direct, o, start.elapsed()),
    };
    let mut spawned = match platform::spawn(&mut cmd, plan, &hardening) {
        Ok(s) => s,
        Err(e) => return launch_failure(plan, &e, start),
    };
    // The tool may run from here on: what it makes at an absent protected
    // path is swept, also if this call is dropped.
    sweep.arm(look.after);
    // The tool runs: the next call's tmp and ruleset are made meanwhile.
    stock(spares, plan);
    let stdout = spawned.child.stdout.take();
    let stderr = spawned.child.stderr.take();
    let stdin = spawned.child.stdin.take();

    let (done_tx, done_rx) = watch::channel(false);
    let stop = |mut rx: watch::Receiver<bool>, grace: Duration| async move {
        let _ = rx.wait_for(|done| *done).await;
        tokio::time::sleep(grace).await;
    };

    let feed = {
        let stop = stop(done_rx.clone(), Duration::ZERO);
        let data = plan.stdin.clone();
        async move {
            let (Some(mut w), Some(data)) = (stdin, data) else {
                return;
            };
            tokio::select! {
                // A tool that exits without reading makes this fail: that is fine.
                _ = async {
                    let _ = w.write_all(&data).await;
                    // Windows's pipe is a file written in the background.
                    let _ = w.flush().await;
                } => {}
                _ = stop => {}
            }
        }
    };
    let out = drain(
        stdout,
        plan.limits.stdout_cap,
        stop(done_rx.clone(), DRAIN_GRACE),
    );
    let err = drain(stderr, plan.limits.stderr_cap, stop(done_rx, DRAIN_GRACE));
    let wait = async {
        let mut status = None;
        let timed_out = tokio::select! {
            r = spawned.child.wait() => { status = r.ok(); false }
            _ = tokio::time::sleep(plan.limits.timeout) => true,
        };
        if timed_out {
            spawned.control.kill_tree(&mut spawned.child);
            match tokio::time::timeout(KILL_GRACE, spawned.child.wait()).await {
                Ok(r) => status = r.ok(),
                Err(_) => {
                    tracing::error!("direct backend: the call did not end after a kill request");
                    let _ = spawned.child.start_kill();
                    status = spawned.child.wait().await.ok();
                }
            }
        }
        spawned.control.settle().await;
        let finished = spawned.control.finish(status);
        let _ = done_tx.send(true);
        (timed_out, finished)
    };
    let ((timed_out, finished), out, err, ()) = tokio::join!(wait, out, err, feed);

    if finished.survivors > 0 {
        tracing::error!(
            survivors = finished.survivors,
            "direct backend: processes of a finished call could not be killed"
        );
    }
    if let Termination::IsolationFailed { errno, layer } = finished.termination {
        return RunOutput::refused(
            BackendKind::Direct,
            hardening.failure(layer, errno),
            start.elapsed(),
        );
    }
    if let Termination::NotStarted { errno, at_exec } = finished.termination {
        let e = io::Error::from_raw_os_error(errno);
        if at_exec {
            return launch_failure(plan, &e, start);
        }
        return RunOutput::refused(
            BackendKind::Direct,
            Outcome::new(
                OutcomeKind::LaunchFailed,
                format!("could not prepare the tool: {}", os_reason(&e)),
            ),
            start.elapsed(),
        );
    }
    let truncated = out.truncated() || err.truncated();
    let stdout = out.into_string();
    let stderr = err.into_string();
    let (outcome, returncode) = if timed_out {
        (
            Outcome::new(
                OutcomeKind::TimedOut,
                format!(
                    "timed out after {}; the process tree was killed",
                    fmt_secs(plan.limits.timeout)
                ),
            ),
            None,
        )
    } else {
        classify(plan, &finished, &stderr)
    };
    RunOutput {
        stdout,
        stderr,
        returncode,
        timed_out,
        truncated,
        outcome,
        backend: BackendKind::Direct,
        duration: start.elapsed(),
        isolation: hardening.report(&finished),
    }
}

pub(crate) fn fmt_secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{s:.0} s")
    } else {
        format!("{s:.3} s")
    }
}

/// Phrases a program prints when an allocation failed.
const OOM_MARKERS: &[&str] = &[
    "cannot allocate memory",
    "out of memory",
    "memory allocation",
    "memoryerror",
    "bad_alloc",
    "memory exhausted",
    "failed to allocate",
    "allocation failed",
];

fn looks_out_of_memory(stderr: &str) -> bool {
    let tail_start = stderr.len().saturating_sub(4096);
    let tail_start = (tail_start..=stderr.len())
        .find(|&i| stderr.is_char_boundary(i))
        .unwrap_or(stderr.len());
    let tail = stderr[tail_start..].to_ascii_lowercase();
    OOM_MARKERS.iter().any(|m| tail.contains(m))
}

fn classify(plan: &ExecPlan, f: &Finished, stderr: &str) -> (Outcome, Option<i32>) {
    let memory_limited = plan.limits.memory_bytes.is_some()
        && (f.limit_hit == Some(LimitHit::Memory) || looks_out_of_memory(stderr));
    match f.termination {
        Termination::Exited(code) if f.limit_hit == Some(LimitHit::Cpu) => (
            Outcome::new(
                OutcomeKind::CpuLimit,
                format!(
                    "ended by the job's CPU time limit of {} s (exit code {code})",
                    plan.limits.cpu_seconds.unwrap_or(0)
                ),
            ),
            Some(code),
        ),
        Termination::Exited(code) if code != 0 && memory_limited => (
            Outcome::new(
                OutcomeKind::MemoryLimit,
                format!(
                    "ran out of memory under the {} MiB limit (exit code {code})",
                    plan.limits.memory_bytes.unwrap_or(0) >> 20
                ),
            ),
            Some(code),
        ),
        Termination::Exited(code) => (
            Outcome::new(OutcomeKind::Exited, format!("exited with code {code}")),
            Some(code),
        ),
        Termination::Signalled(sig) => {
            let name = signal_name(sig);
            let cpu_out = match (plan.limits.cpu_seconds, f.cpu_time) {
                (Some(limit), Some(used)) => used.as_secs() >= limit,
                _ => false,
            };
            let (kind, message) = if is_signal(sig, SignalKind::Xcpu)
                || (is_signal(sig, SignalKind::Kill) && cpu_out)
            {
                (
                    OutcomeKind::CpuLimit,
                    format!(
                        "killed by {name}: CPU time limit of {} s reached",
                        plan.limits.cpu_seconds.unwrap_or(0)
                    ),
                )
            } else if is_signal(sig, SignalKind::Xfsz) {
                (
                    OutcomeKind::FileSizeLimit,
                    format!(
                        "killed by {name}: file size limit of {} MiB reached",
                        plan.limits.file_size_bytes.unwrap_or(0) >> 20
                    ),
                )
            } else if memory_limited {
                (
                    OutcomeKind::MemoryLimit,
                    format!(
                        "killed by {name} after running out of memory under the {} MiB limit",
                        plan.limits.memory_bytes.unwrap_or(0) >> 20
                    ),
                )
            } else {
                (
                    OutcomeKind::Signalled,
                    format!("killed by signal {sig} ({name})"),
                )
            };
            (
                Outcome {
                    kind,
                    message,
                    signal: Some(sig),
                },
                None,
            )
        }
        Termination::NotStarted { .. }
        | Termination::IsolationFailed { .. }
        | Termination::Unknown => (
            Outcome::new(
                OutcomeKind::LaunchFailed,
                "the call's supervisor ended without reporting how the tool ended",
            ),
            None,
        ),
    }
}

#[derive(Clone, Copy)]
enum SignalKind {
    Xcpu,
    Xfsz,
    Kill,
}

#[cfg(unix)]
fn is_signal(sig: i32, k: SignalKind) -> bool {
    sig == match k {
        SignalKind::Xcpu => libc::SIGXCPU,
        SignalKind::Xfsz => libc::SIGXFSZ,
        SignalKind::Kill => libc::SIGKILL,
    }
}

#[cfg(not(unix))]
fn is_signal(_sig: i32, _k: SignalKind) -> bool {
    false
}

/// Conventional name of a signal number.
pub fn signal_name(sig: i32) -> &'static str {
    const NAMES: &[&str] = &[
        "?",
        "SIGHUP",
        "SIGINT",
        "SIGQUIT",
        "SIGILL",
        "SIGTRAP",
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGKILL",
        "SIGUSR1",
        "SIGSEGV",
        "SIGUSR2",
        "SIGPIPE",
        "SIGALRM",
        "SIGTERM",
        "SIGSTKFLT",
        "SIGCHLD",
        "SIGCONT",
        "SIGSTOP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGWINCH",
        "SIGIO",
        "SIGPWR",
        "SIGSYS",
    ];
    if cfg!(target_os = "linux") {
        NAMES.get(sig as usize).copied().unwrap_or("unknown signal")
    } else {
        "signal"
    }
}

fn launch_failure(plan: &ExecPlan, e: &io::Error, start: Instant) -> RunOutput {
    let program = plan.argv[0].to_string_lossy();
    let (kind, message) = match e.kind() {
        io::ErrorKind::NotFound => (
            OutcomeKind::NotFound,
            if program.contains('/') || (cfg!(windows) && program.contains('\\')) {
                format!("{program}: no such file")
            } else {
                format!("{program}: command not found on the tool's PATH")
            },
        ),
        io::ErrorKind::PermissionDenied => (
            OutcomeKind::PermissionDenied,
            format!("{program}: permission denied (not executable)"),
        ),
        _ => match e.raw_os_error() {
            #[cfg(unix)]
            Some(libc::ENOEXEC) => (
                OutcomeKind::PermissionDenied,
                format!("{program}: not an executable format"),
            ),
            #[cfg(unix)]
            Some(libc::ENOTDIR) => (
                OutcomeKind::NotFound,
                format!("{program}: no such file (a path component is not a directory)"),
            ),
            #[cfg(unix)]
            Some(libc::E2BIG) => (
                OutcomeKind::InvalidRequest,
                "argument list too long".to_string(),
            ),
            _ => (
                OutcomeKind::LaunchFailed,
                format!("{program}: could not start: {}", os_reason(e)),
            ),
        },
    };
    RunOutput::refused(
        BackendKind::Direct,
        Outcome::new(kind, message),
        start.elapsed(),
    )
}

fn os_reason(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(code) => io::Error::from_raw_os_error(code).to_string(),
        None => e
            .get_ref()
            .map_or_else(|| e.kind().to_string(), |inner| inner.to_string()),
    }
}
