//! Backends execute an [`ExecPlan`]; each backend is one module.
//!
//! Invariant: a backend never decides policy. Everything it needs (argv, env,
//! cwd handle, limits) is fixed in the plan, and whatever happens comes back as a
//! [`RunOutput`], never as a panic or an error the caller must map.

use std::future::Future;

use crate::outcome::RunOutput;
use crate::plan::{BackendKind, ExecPlan};

// The unsafe island, part two: process creation, post-fork code, kernel
// isolation and Windows jobs (part one is `crate::sys`).
#[allow(unsafe_code)]
pub mod direct;
pub mod docker;
pub(crate) mod protect;

pub mod wasm;

/// Something that runs plans.
pub trait Backend: Send + Sync {
    /// Which backend this is.
    fn kind(&self) -> BackendKind;
    /// Runs the plan to completion, within its limits.
    fn run(&self, plan: &ExecPlan) -> impl Future<Output = RunOutput> + Send;
}
