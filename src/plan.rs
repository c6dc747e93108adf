//! The plan of one call: what a backend runs, fixed before it runs.
//!
//! Invariant: an [`ExecPlan`] is complete. Everything a backend needs (argv,
//! environment, the working directory as a handle, limits, mounts, protected
//! paths, the wasm tool's file) is in it, decided by
//! [`crate::Sandbox::plan`]; a backend decides no policy of its own.
//!
//! This module sits below the backends and the sandbox, and imports only the
//! leaf modules (`paths`-level data: [`crate::isolation`], [`crate::protected`]).

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use cap_std::fs::Dir;
use serde::Serialize;

pub use crate::paths::FileStamp;
use crate::paths::strip_dir;
use crate::protected::ProtectedPaths;

/// Which backend runs a call: what a plan and its output name. What a
/// config or a request asks for, `auto` included, is a
/// [`BackendChoice`](crate::config::BackendChoice).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendKind {
    /// A native subprocess.
    Direct,
    /// An ephemeral, locked-down container per call on a Docker engine.
    Docker,
    /// A WASI tool in wasmtime.
    Wasm,
}

impl BackendKind {
    /// The name used in config files, on the command line and in outputs.
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Direct => "direct",
            BackendKind::Docker => "docker",
            BackendKind::Wasm => "wasm",
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for BackendKind {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, UnknownName> {
        match s {
            "direct" => Ok(BackendKind::Direct),
            "docker" => Ok(BackendKind::Docker),
            "wasm" => Ok(BackendKind::Wasm),
            other => Err(UnknownName::new("backend", other, "direct, docker or wasm")),
        }
    }
}

/// A name that is none of a setting's values (`"podman"` for a backend):
/// the `FromStr` error of toolhost's named settings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {given:?} (expected {expected})")]
pub struct UnknownName {
    /// The setting (`backend`, `capability`, ...).
    pub what: &'static str,
    /// The name given.
    pub given: String,
    /// The names it takes, as a sentence (`direct, docker or wasm`).
    pub expected: &'static str,
}

impl UnknownName {
    pub(crate) fn new(what: &'static str, given: &str, expected: &'static str) -> Self {
        UnknownName {
            what,
            given: given.to_string(),
            expected,
        }
    }
}

/// Limits of one call, in the units backends apply. `None` disables a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock limit of the whole call.
    pub timeout: Duration,
    /// Bytes of stdout kept.
    pub stdout_cap: usize,
    /// Bytes of stderr kept.
    pub stderr_cap: usize,
    /// Address-space bytes.
    pub memory_bytes: Option<u64>,
    /// CPU seconds.
    pub cpu_seconds: Option<u64>,
    /// Processes (per user on `direct`).
    pub processes: Option<u64>,
    /// Bytes of the largest file written.
    pub file_size_bytes: Option<u64>,
}

/// A directory visible to the call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Absolute host path.
    pub path: PathBuf,
    /// Where the tool sees it: its guest path, or the host path when the dir
    /// is not mapped (the default).
    pub guest: PathBuf,
    /// Whether the call may only read it.
    pub read_only: bool,
}

/// The working directory of a call.
#[derive(Debug, Clone)]
pub struct WorkDir {
    /// Absolute host path.
    pub path: PathBuf,
    /// The path the tool sees (below its allowed dir's guest path).
    pub guest: PathBuf,
    /// Capability handle on it (backends enter it by handle, so a symlink
    /// swapped in after planning cannot move the call outside).
    pub dir: Arc<Dir>,
}

/// Everything a backend needs to run one call, fixed by [`crate::Sandbox::plan`].
#[derive(Debug, Clone)]
pub struct ExecPlan {
    /// Backend that should run it.
    pub backend: BackendKind,
    /// Program and arguments; never empty, no NUL bytes.
    pub argv: Vec<OsString>,
    /// The complete environment of the tool.
    pub env: Vec<(OsString, OsString)>,
    /// Working directory, inside an allowed dir; `None` only in a sandbox
    /// without allowed dirs (`direct` never gets such a plan).
    pub cwd: Option<WorkDir>,
    /// Standard input; `None` is empty input.
    pub stdin: Option<Arc<[u8]>>,
    /// Limits.
    pub limits: Limits,
    /// Whether the network is allowed.
    pub allow_network: bool,
    /// Kernel isolation of the `direct` backend.
    pub isolation: crate::isolation::IsolationLevel,
    /// Paths a `direct` tool may read and execute besides the allowed dirs.
    pub isolation_read_paths: Arc<[PathBuf]>,
    /// Paths inside the writable allowed dirs no tool may change.
    pub protected: ProtectedPaths,
    /// The allowed dirs (shared by every plan of a sandbox).
    pub mounts: Arc<[Mount]>,
    /// Capability handles on the allowed dirs, by path (the wasm backend preopens
    /// these handles, not the paths).
    pub mount_dirs: Arc<[(PathBuf, Arc<Dir>)]>,
    /// The WASI tool to run, when the backend is `wasm`.
    pub wasm: Option<ToolFile>,
}

impl ExecPlan {
    /// Every place the tool sees the host path `host` at: below the guest
    /// path of each allowed dir that holds it (one place unless dirs nest
    /// and are mapped apart), most specific dir first.
    pub fn guest_places(&self, host: &Path) -> Vec<PathBuf> {
        let mut holders: Vec<(&Mount, PathBuf)> = self
            .mounts
            .iter()
            .filter_map(|m| strip_dir(host, &m.path).map(|rest| (m, rest)))
            .collect();
        holders.sort_by_key(|(m, _)| std::cmp::Reverse(m.path.components().count()));
        let mut out: Vec<PathBuf> = Vec::new();
        for (m, rest) in holders {
            let p = if rest.as_os_str().is_empty() {
                m.guest.clone()
            } else {
                m.guest.join(rest)
            };
            if !out.contains(&p) {
                out.push(p);
            }
        }
        out
    }

    /// Where the tool sees the host path `host`: below the guest path of the
    /// most specific allowed dir (by host path) that holds it; `None` when
    /// none does.
    pub fn guest_of(&self, host: &Path) -> Option<PathBuf> {
        guest_in(&self.mounts, host)
    }
}

/// [`ExecPlan::guest_of`] over `mounts`.
pub(crate) fn guest_in(mounts: &[Mount], host: &Path) -> Option<PathBuf> {
    mounts
        .iter()
        .filter_map(|m| strip_dir(host, &m.path).map(|rest| (m, rest)))
        .max_by_key(|(m, _)| m.path.components().count())
        .map(|(m, rest)| {
            if rest.as_os_str().is_empty() {
                m.guest.clone()
            } else {
                m.guest.join(rest)
            }
        })
}

/// A tool found in a tool dir, in the built-in collection, or a `.wasm` file
/// inside the sandbox.
#[derive(Debug, Clone)]
pub struct ToolFile {
    /// The tool's name (file stem).
    pub name: String,
    /// Where its bytes are.
    pub source: ToolSource,
    /// Host path, for messages and listings (`builtin:NAME.wasm` for a
    /// built-in tool).
    pub host_path: PathBuf,
}

/// Where a tool's bytes are.
#[derive(Debug, Clone)]
pub enum ToolSource {
    /// A file, by its name relative to a handle on its directory.
    File {
        /// Handle on the directory holding the file.
        dir: Arc<Dir>,
        /// File name relative to `dir`.
        rel: PathBuf,
        /// What a `stat` of it showed when it was found, if one was made
        /// then: the wasm engine keys its loaded tools by it, without a
        /// `stat` of its own. `None`: the engine makes one.
        stamp: Option<FileStamp>,
    },
    /// The built-in collection carried in the binary.
    Builtin(&'static [u8]),
}
