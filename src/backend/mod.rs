//! Backends execute an [`ExecPlan`]; each backend is one module.
//!
//! Invariant: a backend never decides policy. Everything it needs (argv, env,
//! cwd handle, limits) is fixed in the plan, and whatever happens comes back as a
//! [`RunOutput`], never as a panic or an error the caller must map.

use std::fmt;
use std::future::Future;
use std::str::FromStr;

use serde::Serialize;

use crate::outcome::RunOutput;
use crate::sandbox::ExecPlan;

pub mod direct;
pub mod docker;
pub(crate) mod protect;

/// Moves aside what cancelled `direct` and `docker` calls made at protected
/// paths that did not exist (see the book: protected paths). Call it before
/// the process exits, after the docker backend's removals are flushed;
/// [`crate::Sandbox::shutdown`] calls it too.
pub fn sweep_cancelled_protected_paths() {
    protect::sweep_cancelled();
}
pub mod wasm;

/// Which backend runs a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendKind {
    /// A native subprocess.
    Direct,
    /// An ephemeral, locked-down container per call on a Docker engine.
    Docker,
    /// A WASI tool in wasmtime.
    Wasm,
    /// wasm when a WASI tool of that name is registered (or `argv[0]` is a `.wasm`
    /// file in the sandbox), else direct on POSIX systems.
    Auto,
}

impl BackendKind {
    /// The name used in config files and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Direct => "direct",
            BackendKind::Docker => "docker",
            BackendKind::Wasm => "wasm",
            BackendKind::Auto => "auto",
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for BackendKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "direct" => Ok(BackendKind::Direct),
            "docker" => Ok(BackendKind::Docker),
            "wasm" => Ok(BackendKind::Wasm),
            "auto" => Ok(BackendKind::Auto),
            other => Err(format!(
                "unknown backend {other:?} (expected direct, docker, wasm or auto)"
            )),
        }
    }
}

/// Something that runs plans.
pub trait Backend: Send + Sync {
    /// Which backend this is.
    fn kind(&self) -> BackendKind;
    /// Runs the plan to completion, within its limits.
    fn run(&self, plan: &ExecPlan) -> impl Future<Output = RunOutput> + Send;
}
