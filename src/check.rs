//! `toolhost check`: what this host can enforce, backend by backend.
//!
//! Invariant: every line is measured on this host, not assumed: the kernel is
//! asked (Landlock ABI, seccomp, namespaces), the Docker engine is asked, the
//! wasm engine is built, and a probe call (`true`; `cmd.exe /d /c exit 0` on
//! Windows) runs through the `direct`
//! backend with the configured isolation, whose report says which layers it
//! actually got. `ok` is false when the configured backend and isolation level
//! cannot be met here.

use serde::Serialize;

use crate::backend::Backend;
pub use crate::probe::{Check, Status};

use crate::config::BackendChoice;
use crate::isolation::IsolationLevel;
use crate::outcome::OutcomeKind;
use crate::plan::BackendKind;
use crate::sandbox::{RunRequest, Sandbox};

/// The configuration the report was made for.
#[derive(Debug, Clone, Serialize)]
pub struct Configured {
    /// The configured backend.
    pub backend: BackendChoice,
    /// The configured isolation level of `direct`.
    pub isolation: IsolationLevel,
    /// Whether calls may use the network.
    pub allow_network: bool,
}

/// What `toolhost check` prints.
#[derive(Debug, Clone, Serialize)]
pub struct CheckReport {
    /// OS, architecture and kernel.
    pub platform: String,
    /// The configuration checked against.
    pub configured: Configured,
    /// One line per capability.
    pub checks: Vec<Check>,
    /// Whether the configured backend and isolation level can be met.
    pub ok: bool,
    /// Why not, when `ok` is false.
    pub problems: Vec<String>,
}

fn push(
    out: &mut Vec<Check>,
    backend: &'static str,
    name: &'static str,
    status: Status,
    detail: impl Into<String>,
) {
    out.push(Check {
        backend,
        name,
        status,
        detail: detail.into(),
    });
}

fn platform() -> String {
    #[cfg_attr(not(unix), allow(unused_mut))]
    let mut s = format!("{} {}", std::env::consts::OS, std::env::consts::ARCH);
    #[cfg(unix)]
    {
        let u = rustix::system::uname();
        s.push_str(&format!(", kernel {}", u.release().to_string_lossy()));
    }
    s
}

/// The probe call: a program every host of the platform has, that exits 0.
#[cfg(not(windows))]
const PROBE_ARGV: &[&str] = &["true"];
#[cfg(windows)]
const PROBE_ARGV: &[&str] = &["cmd.exe", "/d", "/c", "exit 0"];

/// Checks what this host can enforce for `sandbox`'s configuration.
pub async fn check(sandbox: &Sandbox) -> CheckReport {
    let config = sandbox.config();
    let mut checks = Vec::new();
    let mut problems = Vec::new();
    let backend = config.backend;
    let uses_direct = matches!(backend, BackendChoice::Direct | BackendChoice::Auto);

    let limits = config.limits();
    checks.extend(sandbox.direct_backend().probe(&limits).await.checks);
    // The probe call: the configured isolation, measured.
    let probe = sandbox
        .run(RunRequest::new(PROBE_ARGV.iter().copied()).backend(BackendKind::Direct))
        .await;
    let (status, detail) = match (&probe.outcome.kind, &probe.isolation) {
        (OutcomeKind::Exited, Some(iso)) if probe.returncode == Some(0) => {
            let mut d = format!(
                "`{}` ran with isolation {}: {}",
                PROBE_ARGV.join(" "),
                iso.level.as_str(),
                iso.applied.join(", ")
            );
            if !iso.missing.is_empty() {
                d.push_str(&format!("; missing here: {}", iso.missing.join(", ")));
            }
            (
                if iso.missing.is_empty() {
                    Status::Ok
                } else {
                    Status::Partial
                },
                d,
            )
        }
        (OutcomeKind::Exited, None) if probe.returncode == Some(0) => (
            Status::Partial,
            format!("`{}` ran; no isolation report", PROBE_ARGV.join(" ")),
        ),
        _ => {
            if uses_direct {
                problems.push(format!(
                    "direct: the probe call failed: {}",
                    probe.outcome.message
                ));
            }
            (Status::Error, probe.outcome.message.clone())
        }
    };
    push(&mut checks, "direct", "probe call", status, detail);

    // wasm
    let uses_wasm = matches!(backend, BackendChoice::Wasm | BackendChoice::Auto);
    match sandbox.wasm_backend() {
        Ok(w) => checks.extend(w.probe(&limits).await.checks),
        Err(e) => {
            if uses_wasm {
                problems.push(format!("wasm: the engine cannot be built: {e}"));
            }
            push(&mut checks, "wasm", "engine", Status::Error, e);
            checks.extend(crate::backend::wasm::probe_without_engine(&config.wasm).checks);
        }
    }

    // docker
    let docker = sandbox.docker_backend().probe(&limits).await;
    checks.extend(docker.checks);
    if backend == BackendChoice::Docker {
        problems.extend(docker.unusable);
    }

    CheckReport {
        platform: platform(),
        configured: Configured {
            backend,
            isolation: config.isolation,
            allow_network: config.allow_network,
        },
        ok: problems.is_empty(),
        checks,
        problems,
    }
}

impl CheckReport {
    /// The report as an aligned text table.
    pub fn table(&self) -> String {
        let mut s = format!(
            "toolhost check: {}; backend {}, isolation {}, network {}\n\n",
            self.platform,
            self.configured.backend,
            self.configured.isolation.as_str(),
            if self.configured.allow_network {
                "on"
            } else {
                "off"
            }
        );
        let w = self
            .checks
            .iter()
            .map(|c| c.name.len())
            .max()
            .unwrap_or(5)
            .max(5);
        s.push_str(&format!(
            "{:<7} {:<w$} {:<8} DETAIL\n",
            "BACKEND", "CHECK", "STATUS"
        ));
        for c in &self.checks {
            s.push_str(&format!(
                "{:<7} {:<w$} {:<8} {}\n",
                c.backend,
                c.name,
                c.status.as_str(),
                c.detail
            ));
        }
        s.push('\n');
        if self.ok {
            s.push_str("result: ok: the configured backend and isolation can be enforced here\n");
        } else {
            s.push_str("result: NOT MET\n");
            for p in &self.problems {
                s.push_str(&format!("  - {p}\n"));
            }
        }
        s
    }
}
