//! The `backend` a config or a request asks for: one of the three, or
//! `auto`, which the sandbox resolves per call (`Sandbox::plan`) to the
//! [`BackendKind`] that runs it.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use crate::plan::{BackendKind, UnknownName};

/// Which backend a config or a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendChoice {
    /// A native subprocess.
    Direct,
    /// An ephemeral, locked-down container per call on a Docker engine.
    Docker,
    /// A WASI tool in wasmtime.
    Wasm,
    /// wasm when a WASI tool of that name is registered (or `argv[0]` is a
    /// `.wasm` file in the sandbox), else direct.
    Auto,
}

impl BackendChoice {
    /// The name used in config files and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            BackendChoice::Auto => "auto",
            BackendChoice::Direct => "direct",
            BackendChoice::Docker => "docker",
            BackendChoice::Wasm => "wasm",
        }
    }

    /// The backend asked for, or `None` for `auto`.
    pub fn fixed(self) -> Option<BackendKind> {
        match self {
            BackendChoice::Auto => None,
            BackendChoice::Direct => Some(BackendKind::Direct),
            BackendChoice::Docker => Some(BackendKind::Docker),
            BackendChoice::Wasm => Some(BackendKind::Wasm),
        }
    }
}

impl From<BackendKind> for BackendChoice {
    fn from(kind: BackendKind) -> Self {
        match kind {
            BackendKind::Direct => BackendChoice::Direct,
            BackendKind::Docker => BackendChoice::Docker,
            BackendKind::Wasm => BackendChoice::Wasm,
        }
    }
}

impl fmt::Display for BackendChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for BackendChoice {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, UnknownName> {
        match s {
            "auto" => Ok(BackendChoice::Auto),
            other => other
                .parse::<BackendKind>()
                .map(Into::into)
                .map_err(|_| UnknownName::new("backend", other, "direct, docker, wasm or auto")),
        }
    }
}
