//! Platforms without POSIX process control (Windows): the tool runs with the
//! plan's environment, cwd and capped output, and is killed at the timeout, but
//! rlimits cannot be applied and only the tool itself (not its children) is
//! killed. `Sandbox::new` logs this once; `toolhost check` reports it.

use std::io;
use std::process::ExitStatus;

use tokio::process::{Child, Command};

use super::{Finished, Termination};
use crate::sandbox::ExecPlan;

pub(super) struct Spawned {
    pub control: Control,
    pub child: Child,
}

pub(super) struct Control;

impl Control {
    pub fn kill_tree(&mut self, child: &mut Child) {
        let _ = child.start_kill();
    }

    pub fn finish(&mut self, status: Option<ExitStatus>) -> Finished {
        Finished {
            termination: match status.and_then(|s| s.code()) {
                Some(c) => Termination::Exited(c),
                None => Termination::Unknown,
            },
            cpu_time: None,
            survivors: 0,
        }
    }
}

pub(super) fn spawn(cmd: &mut Command, plan: &ExecPlan) -> io::Result<Spawned> {
    cmd.args(&plan.argv[1..])
        .env_clear()
        .envs(plan.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&plan.cwd)
        .kill_on_drop(true);
    let child = cmd.spawn()?;
    Ok(Spawned {
        control: Control,
        child,
    })
}
