//! What a backend reports about this host: one [`Check`] per capability
//! (`toolhost check` prints them), and what makes the backend unusable.
//! Each backend makes its own (`Backend::probe`); `check` merges them.

use serde::Serialize;

/// How one capability stands on this host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Available and enforced.
    Ok,
    /// Enforced in part (the detail says what is not).
    Partial,
    /// Not available on this host.
    Missing,
    /// Available, deliberately not used (the detail says why and what is used instead).
    Unused,
    /// Applied on request only; nothing enforces it.
    Advisory,
    /// The check itself failed.
    Error,
}

impl Status {
    /// The status as `toolhost check` prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Partial => "partial",
            Status::Missing => "missing",
            Status::Unused => "unused",
            Status::Advisory => "advisory",
            Status::Error => "error",
        }
    }
}

/// One line of the report.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// `direct`, `docker` or `wasm`.
    pub backend: &'static str,
    /// What was checked.
    pub name: &'static str,
    /// How it stands.
    pub status: Status,
    /// What was found.
    pub detail: String,
}

/// What one backend found: its checks, and why it cannot be used here, if
/// it cannot (a problem when the configuration asks for it).
#[derive(Debug, Clone, Default)]
pub struct Probe {
    /// One line per capability.
    pub checks: Vec<Check>,
    /// What makes the backend unusable here.
    pub unusable: Vec<String>,
}

impl Probe {
    /// Adds a check.
    pub fn push(
        &mut self,
        backend: &'static str,
        name: &'static str,
        status: Status,
        detail: impl Into<String>,
    ) {
        self.checks.push(Check {
            backend,
            name,
            status,
            detail: detail.into(),
        });
    }
}
