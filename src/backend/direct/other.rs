//! Platforms without POSIX process control or Windows jobs: the tool runs with the
//! plan's environment, cwd and capped output, and is killed at the timeout, but
//! rlimits cannot be applied and only the tool itself (not its children) is
//! killed. `Sandbox::new` logs this once; `toolhost check` reports it.

use std::io;
use std::process::ExitStatus;

use tokio::process::{Child, Command};

use super::{Finished, Termination};
use crate::plan::ExecPlan;

pub(super) struct Spawned {
    pub control: Control,
    pub child: Child,
}

pub(super) struct Control;

impl Control {
    pub fn kill_tree(&mut self, child: &mut Child) {
        let _ = child.start_kill();
    }

    /// Nothing to wait for here before [`finish`](Self::finish).
    pub async fn settle(&mut self) {}

    pub fn finish(&mut self, status: Option<ExitStatus>) -> Finished {
        Finished {
            termination: match status.and_then(|s| s.code()) {
                Some(c) => Termination::Exited(c),
                None => Termination::Unknown,
            },
            cpu_time: None,
            survivors: 0,
            layers: 0,
            limit_hit: None,
        }
    }
}

pub(super) fn spawn(cmd: &mut Command, plan: &ExecPlan, _h: &Hardening) -> io::Result<Spawned> {
    let cwd = plan
        .cwd
        .as_ref()
        .ok_or_else(|| io::Error::other("no working directory"))?;
    cmd.args(&plan.argv[1..])
        .env_clear()
        .envs(plan.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&cwd.path)
        .kill_on_drop(true);
    let child = cmd.spawn()?;
    Ok(Spawned {
        control: Control,
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
