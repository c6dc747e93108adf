//! Linux: spawn through the per-call supervisor (see `supervisor`).

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::ExitStatus;
use std::time::Duration;

use tokio::process::{Child, Command};

use super::harden::{self, Prepared};
use super::supervisor::{self, Params, RLimit, Report};
use super::{Finished, Termination};
use crate::isolation::{ALL_LAYERS, IsolationReport};
use crate::outcome::Outcome;
use crate::plan::ExecPlan;

/// The call's isolation, prepared before the spawn (see `harden`).
pub(super) struct Hardening(Prepared);

/// Prepares the call's isolation; fails only under `strict`.
pub(super) fn harden(plan: &ExecPlan) -> Result<Hardening, Outcome> {
    harden::prepare(plan).map(Hardening)
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

    /// The message of a `strict` call stopped by a layer that failed in the tool.
    pub fn failure(&self, layer: u32, errno: i32) -> Outcome {
        let name = ALL_LAYERS
            .iter()
            .find(|l| l.bit() == layer)
            .map_or("a layer", |l| l.name());
        Outcome::new(
            crate::outcome::OutcomeKind::IsolationUnavailable,
            format!(
                "isolation = \"strict\": {name} could not be applied to the tool ({}); the call did not run",
                io::Error::from_raw_os_error(errno)
            ),
        )
    }
}

/// A running call. `control` is declared first so that it is dropped first: if
/// the caller drops the call's future, the supervisor is told to kill the tree
/// while it is still our unreaped child (its pid cannot have been reused).
pub(super) struct Spawned {
    pub control: Control,
    pub child: Child,
}

pub(super) struct Control {
    supervisor: Option<u32>,
    status: File,
    finished: bool,
}

impl Control {
    /// Asks the supervisor to kill the tool's whole tree and exit.
    pub fn kill_tree(&mut self, _child: &mut Child) {
        if let Some(pid) = self.supervisor {
            // SAFETY: kill(2) with a pid we spawned and have not reaped.
            unsafe { libc::kill(pid as libc::pid_t, supervisor::KILL_REQUEST) };
        }
    }

    /// Nothing to wait for here before [`finish`](Self::finish).
    pub async fn settle(&mut self) {}

    /// Reads the supervisor's report, once it has exited.
    pub fn finish(&mut self, _status: Option<ExitStatus>) -> Finished {
        self.finished = true;
        let mut buf = [0u8; supervisor::REPORT_LEN];
        let report = match self.status.read(&mut buf) {
            Ok(n) => Report::decode(&buf[..n]),
            Err(_) => None,
        };
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
        let termination = if r.reason == supervisor::REASON_NOT_STARTED
            && r.survivors == supervisor::STAGE_ISOLATION
        {
            Termination::IsolationFailed {
                errno: st,
                layer: r.layers,
            }
        } else if r.reason == supervisor::REASON_NOT_STARTED {
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

impl Drop for Control {
    fn drop(&mut self) {
        if !self.finished
            && let Some(pid) = self.supervisor
        {
            // SAFETY: as in kill_tree; the Child is dropped after us.
            unsafe { libc::kill(pid as libc::pid_t, supervisor::KILL_REQUEST) };
        }
    }
}

fn status_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both fds are fresh and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

pub(super) fn spawn(cmd: &mut Command, plan: &ExecPlan, h: &Hardening) -> io::Result<Spawned> {
    let cwd = plan
        .cwd
        .as_ref()
        .ok_or_else(|| io::Error::other("no working directory"))?;
    let (read, write) = status_pipe()?;
    let l = &plan.limits;
    let limit = |resource: libc::__rlimit_resource_t, v: Option<u64>| {
        v.map(|value| RLimit {
            resource: resource as libc::c_int,
            value,
        })
    };
    let params = Params::new(
        // SAFETY: getpid cannot fail.
        unsafe { libc::getpid() },
        write.as_raw_fd(),
        cwd.dir.as_raw_fd(),
        [
            limit(libc::RLIMIT_AS, l.memory_bytes),
            limit(libc::RLIMIT_CPU, l.cpu_seconds),
            limit(libc::RLIMIT_NPROC, l.processes),
            limit(libc::RLIMIT_FSIZE, l.file_size_bytes),
        ],
        h.0.tool,
        &plan.argv,
        &plan.env,
        h.0.tmp.as_ref().map(|t| t.path()),
    )?;
    let mut params = params;
    params.mounts = h.0.mounts.clone();
    // SAFETY: `enter` only makes async-signal-safe calls (see `supervisor`), and
    // every fd it uses (status pipe, cwd handle) outlives the spawn.
    unsafe {
        cmd.pre_exec(move || supervisor::enter(&params));
    }
    // The supervisor never returns to std's exec; should that ever change, std
    // must not exec with toolhost's own environment.
    cmd.env_clear();
    let child = cmd.spawn()?;
    drop(write);
    Ok(Spawned {
        control: Control {
            supervisor: child.id(),
            status: File::from(read),
            finished: false,
        },
        child,
    })
}
