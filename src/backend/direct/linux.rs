//! Linux: spawn through the per-call supervisor (see `supervisor`).

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::ExitStatus;
use std::time::Duration;

use tokio::process::{Child, Command};

use super::supervisor::{self, Params, RLimit, Report};
use super::{Finished, Termination};
use crate::sandbox::ExecPlan;

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
            };
        };
        let st = r.wait_status;
        let termination = if r.reason == supervisor::REASON_NOT_STARTED {
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
        let survivors = match termination {
            Termination::NotStarted { .. } => 0,
            _ => r.survivors,
        };
        Finished {
            termination,
            cpu_time: Some(Duration::from_micros(r.cpu_micros)),
            survivors,
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

pub(super) fn spawn(cmd: &mut Command, plan: &ExecPlan) -> io::Result<Spawned> {
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
        plan.cwd_dir.as_raw_fd(),
        [
            limit(libc::RLIMIT_AS, l.memory_bytes),
            limit(libc::RLIMIT_CPU, l.cpu_seconds),
            limit(libc::RLIMIT_NPROC, l.processes),
            limit(libc::RLIMIT_FSIZE, l.file_size_bytes),
        ],
        // SAFETY: geteuid cannot fail.
        unsafe { libc::geteuid() } == 0,
        &plan.argv,
        &plan.env,
    )?;
    // SAFETY: `enter` only makes async-signal-safe calls (see supervisor.rs), and
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
