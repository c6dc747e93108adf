//! Backends execute an [`ExecPlan`]; each backend is one module.
//!
//! Invariant: a backend never decides policy. Everything it needs (argv, env,
//! cwd handle, limits) is fixed in the plan, and whatever happens comes back as a
//! [`RunOutput`], never as a panic or an error the caller must map.

use std::future::Future;

use crate::outcome::RunOutput;
use crate::plan::{BackendKind, ExecPlan, Limits};
use crate::probe::Probe;

// The unsafe island, part two: process creation, post-fork code, kernel
// isolation and Windows jobs (part one is `crate::sys`).
#[allow(unsafe_code)]
pub mod direct;
pub mod docker;
pub(crate) mod protect;

pub mod wasm;

/// Something that runs plans: `direct`, `docker` and `wasm` each implement
/// it, and the sandbox dispatches a plan to the one it names.
pub trait Backend: Send + Sync {
    /// Which backend this is.
    fn kind(&self) -> BackendKind;
    /// Runs the plan to completion, within its limits.
    fn run(&self, plan: &ExecPlan) -> impl Future<Output = RunOutput> + Send;
    /// What this backend can enforce on this host for calls held to
    /// `limits` (`toolhost check` merges the probes of all three).
    fn probe(&self, limits: &Limits) -> impl Future<Output = Probe> + Send;
    /// Waits for what the backend still does in the background after its
    /// calls (removals, temporary dirs, self-tests), and releases what it
    /// keeps between calls. The backend still works afterwards.
    fn shutdown(&self) -> impl Future<Output = ()> + Send;
}
