//! The gate for runtimes that show no host inodes (gVisor's `runsc`: its
//! files carry the sandbox's own device and inode numbers).
//!
//! The engine resolves each mount source by path when a container starts,
//! after toolhost's checks, and a tool of a concurrent call could rename a
//! dir on the way and plant a symlink (a nested allowed dir, a protected
//! path: every source inside a writable allowed dir). Under runc the helper
//! closes that window by checking each mount's device and inode from inside
//! (`--expect`). Under gVisor it checks such a mount's inode change time
//! instead (the host's, which gVisor shows), and that only catches a
//! careless swap: a writer that changes a decoy and the source in one clock
//! tick gives both the same time. So while the engine resolves a source that
//! a tool could redirect, no tool of this backend runs: what toolhost
//! checked just before is what the engine finds. A writer outside the
//! backend (another sandbox over the same dirs, a host process) is not kept
//! out (docs/src/docker.md#runtimes-gvisor); the file tools refuse to move a
//! dir that holds an allowed dir.
//!
//! Every container of the backend holds a shared pass from before its start
//! until its removal has finished (also a removal spawned for a dropped
//! call). A container whose mounts a tool could redirect is created and
//! started under the exclusive pass, taken once every other container is
//! gone, with its protected paths found and checked again under it; the pass
//! turns shared once the engine has started it. Such calls therefore run one
//! at a time (docs/src/docker.md#runtimes-gvisor); the wait comes out of
//! the call's timeout. A warm container passes as well: it is made under the
//! exclusive pass when its mounts need it, and holds a shared one until it
//! is removed (`warm/mod.rs`). A removal that fails (the engine errs) lets go of its
//! pass with the container possibly still there (the engine then holds a
//! container toolhost could not remove; the next toolhost process that
//! connects removes it).

use std::sync::Arc;

use tokio::sync::{OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock};

use super::DockerBackend;
use crate::backend::protect::{self, Held};
use crate::outcome::Outcome;
use crate::plan::ExecPlan;

/// The gate of one backend.
pub(super) type Gate = Arc<RwLock<()>>;

/// A container's pass through the gate, held until it is removed.
#[derive(Debug)]
pub(super) enum Pass {
    /// Other containers may run.
    Shared(#[allow(dead_code)] OwnedRwLockReadGuard<()>),
    /// No other container of the backend exists.
    Exclusive(OwnedRwLockWriteGuard<()>),
}

impl Pass {
    /// Once the engine has mounted everything: others may run again.
    pub(super) fn share(self) -> Pass {
        match self {
            Pass::Exclusive(w) => Pass::Shared(w.downgrade()),
            shared => shared,
        }
    }
}

/// Whether a tool could redirect one of the call's mount sources: an
/// allowed dir or a protected-path mount that lies inside a writable
/// allowed dir, where a call can rename what is on its way.
pub(super) fn redirectable(plan: &ExecPlan, held: &[Held]) -> bool {
    let inside = |p: &std::path::Path| protect::outermost_writable(&plan.mounts, p).is_some();
    plan.mounts.iter().any(|m| inside(&m.path))
        || held.iter().any(|h| inside(&h.source) || inside(&h.target))
}

impl DockerBackend {
    /// The pass of a container about to be made for `plan` under a runtime
    /// that shows no host inodes, and the protected-path mounts to give it:
    /// when a tool could redirect a source, the exclusive pass, with the
    /// protected paths found again and the mounts checked again under it.
    /// That look replaces the earlier one for the call's `sweep` too: what
    /// it finds missing is what the container will not hold.
    pub(super) async fn enter_gate(
        &self,
        plan: &ExecPlan,
        held: Vec<Held>,
        sweep: &mut protect::Sweep,
    ) -> Result<(Pass, Vec<Held>), Outcome> {
        if !redirectable(plan, &held) {
            return Ok((Pass::Shared(self.gate.clone().read_owned().await), held));
        }
        let pass = self.gate.clone().write_owned().await;
        // No tool of this backend runs now: what is checked here is what
        // the engine will find.
        let look = protect::look(plan);
        sweep.arm(look.after);
        self.check_mounts(plan, &look.held)?;
        Ok((Pass::Exclusive(pass), look.held))
    }

    /// [`enter_gate`](Self::enter_gate) within the call's timeout: the wait
    /// comes out of the call's time, and past it the call is `timed_out`.
    pub(super) async fn enter_gate_in_time(
        &self,
        plan: &ExecPlan,
        held: Vec<Held>,
        sweep: &mut protect::Sweep,
    ) -> Result<(Pass, Vec<Held>), Outcome> {
        match tokio::time::timeout(plan.limits.timeout, self.enter_gate(plan, held, sweep)).await {
            Ok(entered) => entered,
            Err(_) => Err(Outcome::new(
                crate::outcome::OutcomeKind::TimedOut,
                "timed out waiting for the sandbox's other containers to go: under gVisor a container whose mounts a tool could redirect starts only when no other container of the sandbox exists (docs/src/docker.md#runtimes-gvisor)",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_exclusive_pass_waits_for_every_container_and_shares_after_the_start() {
        let gate: Gate = Arc::new(RwLock::new(()));
        let running = Pass::Shared(gate.clone().read_owned().await);
        // A redirectable create waits while a container runs...
        let mut waiting = Box::pin(gate.clone().write_owned());
        assert!(futures_util::poll!(waiting.as_mut()).is_pending());
        drop(running);
        // ... and gets through once it is removed.
        let exclusive = Pass::Exclusive(waiting.await);
        // Nothing else starts until the engine has mounted its dirs.
        assert!(gate.clone().try_read_owned().is_err());
        let shared = exclusive.share();
        assert!(matches!(shared, Pass::Shared(_)));
        let other = gate.clone().try_read_owned();
        assert!(other.is_ok());
        // But another exclusive one waits for both.
        assert!(gate.clone().try_write_owned().is_err());
        drop((shared, other));
        assert!(gate.clone().try_write_owned().is_ok());
    }
}
