//! Unix other than Linux: the tool leads its own session and process group,
//! which is killed at the end of the call. There is no subreaper here, so a
//! process that leaves the group (`setsid`) can outlive the call; `toolhost
//! check` and docs/src/direct.md say so.

use std::io;
use std::os::fd::AsRawFd;
use std::process::ExitStatus;
use std::time::Duration;

use tokio::process::{Child, Command};

use super::{Finished, Termination};
use crate::plan::ExecPlan;

pub(super) struct Spawned {
    pub control: Control,
    pub child: Child,
}

pub(super) struct Control {
    pgid: Option<u32>,
    finished: bool,
}

impl Control {
    pub fn kill_tree(&mut self, _child: &mut Child) {
        if let Some(pgid) = self.pgid {
            // SAFETY: kill(2) on the group our unreaped child leads.
            unsafe { libc::kill(-(pgid as libc::pid_t), libc::SIGKILL) };
        }
    }

    /// Nothing to wait for here before [`finish`](Self::finish).
    pub async fn settle(&mut self) {}

    pub fn finish(&mut self, status: Option<ExitStatus>) -> Finished {
        use std::os::unix::process::ExitStatusExt;
        self.finished = true;
        if let Some(pgid) = self.pgid {
            // Background members of the group may still run.
            // SAFETY: kill(2); the group id stays reserved while members exist.
            unsafe { libc::kill(-(pgid as libc::pid_t), libc::SIGKILL) };
        }
        let termination = match status {
            Some(s) => match (s.code(), s.signal()) {
                (Some(c), _) => Termination::Exited(c),
                (None, Some(sig)) => Termination::Signalled(sig),
                _ => Termination::Unknown,
            },
            None => Termination::Unknown,
        };
        Finished {
            termination,
            cpu_time: None::<Duration>,
            survivors: 0,
            layers: 0,
            limit_hit: None,
        }
    }
}

impl Drop for Control {
    fn drop(&mut self) {
        if !self.finished
            && let Some(pgid) = self.pgid
        {
            // SAFETY: as in kill_tree.
            unsafe { libc::kill(-(pgid as libc::pid_t), libc::SIGKILL) };
        }
    }
}

pub(super) fn spawn(cmd: &mut Command, plan: &ExecPlan, _h: &Hardening) -> io::Result<Spawned> {
    cmd.args(&plan.argv[1..])
        .env_clear()
        .envs(plan.env.iter().map(|(k, v)| (k, v)));
    let cwd_fd = plan
        .cwd
        .as_ref()
        .ok_or_else(|| io::Error::other("no working directory"))?
        .dir
        .as_raw_fd();
    let l = plan.limits;
    let limits = [
        (libc::RLIMIT_AS, l.memory_bytes),
        (libc::RLIMIT_CPU, l.cpu_seconds),
        (libc::RLIMIT_NPROC, l.processes),
        (libc::RLIMIT_FSIZE, l.file_size_bytes),
        (libc::RLIMIT_CORE, Some(0)),
    ];
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::fchdir(cwd_fd) < 0 {
                return Err(io::Error::last_os_error());
            }
            for (res, v) in limits {
                if let Some(v) = v {
                    let mut cur: libc::rlimit = std::mem::zeroed();
                    libc::getrlimit(res, &mut cur);
                    let hard = (v as libc::rlim_t).min(cur.rlim_max);
                    let new = libc::rlimit {
                        rlim_cur: hard,
                        rlim_max: hard,
                    };
                    if libc::setrlimit(res, &new) < 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
            }
            let mut nofile: libc::rlimit = std::mem::zeroed();
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut nofile);
            for fd in 3..(nofile.rlim_cur.min(65_536) as libc::c_int) {
                libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            }
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    Ok(Spawned {
        control: Control {
            pgid: child.id(),
            finished: false,
        },
        child,
    })
}

/// No kernel isolation layers on this platform: `strict` refuses to run.
pub(super) struct Hardening {
    level: crate::isolation::IsolationLevel,
}

pub(super) fn harden(
    plan: &ExecPlan,
    _spares: &super::Spares,
    // Nothing here holds a path by mounts: only the sweep covers them.
    _held: Vec<crate::backend::protect::Held>,
) -> Result<Hardening, crate::outcome::Outcome> {
    use crate::isolation::IsolationLevel;
    if plan.isolation == IsolationLevel::Strict {
        return Err(crate::outcome::Outcome::new(
            crate::outcome::OutcomeKind::IsolationUnavailable,
            "isolation = \"strict\" needs Linux (Landlock, seccomp); this platform has none of its layers; the call did not run",
        ));
    }
    Ok(Hardening {
        level: plan.isolation,
    })
}

impl Hardening {
    pub fn report(&self, _f: &Finished) -> Option<crate::isolation::IsolationReport> {
        use crate::isolation::{IsolationLevel, Layer};
        let wanted = match self.level {
            IsolationLevel::Off => 0,
            _ => Layer::LandlockFs.bit() | Layer::Seccomp.bit(),
        };
        Some(crate::isolation::IsolationReport::new(
            self.level, 0, wanted,
        ))
    }

    pub fn failure(&self, _layer: u32, _errno: i32) -> crate::outcome::Outcome {
        crate::outcome::Outcome::new(
            crate::outcome::OutcomeKind::IsolationUnavailable,
            "isolation failed",
        )
    }
}
