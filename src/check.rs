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

use crate::config::BackendChoice;
use crate::isolation::IsolationLevel;
use crate::outcome::OutcomeKind;
use crate::plan::BackendKind;
use crate::sandbox::{RunRequest, Sandbox};

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
    fn as_str(self) -> &'static str {
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

    direct_host_checks(&mut checks);
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
        Ok(_) => {
            push(
                &mut checks,
                "wasm",
                "engine",
                Status::Ok,
                format!(
                    "wasmtime 48, CPU meter {:?}, memory limit {} MiB, no sockets (none can be created, no name lookup)",
                    config.wasm.cpu_meter, config.max_memory_mb
                ),
            );
            push(
                &mut checks,
                "wasm",
                "wasi versions",
                Status::Ok,
                "p1 command modules (wasi_snapshot_preview1); p2 command components (wasi:cli/run@0.2) and typed tools (toolhost:tool); p3 command components (wasi:cli/run@0.3.0 on component-model-async; wasmtime-wasi marks its p3 experimental)",
            );
        }
        Err(e) => {
            if uses_wasm {
                problems.push(format!("wasm: the engine cannot be built: {e}"));
            }
            push(&mut checks, "wasm", "engine", Status::Error, e);
        }
    }
    if crate::backend::wasm::fifo_watchdog_available() {
        push(
            &mut checks,
            "wasm",
            "special files",
            Status::Ok,
            "a guest holds only files and directories (paths checked before and after opening); an open that waits on a FIFO swapped in is ended (SIGURG watchdog, self-tested)",
        );
    } else {
        push(
            &mut checks,
            "wasm",
            "special files",
            Status::Partial,
            "paths are checked before they are opened; a FIFO swapped in after the check can hold a thread until a partner appears (the watchdog needs Linux, SIGURG at its default, a private dir for its self-test and /proc showing a thread waiting on a FIFO)",
        );
    }
    let cache_dir = crate::state_dirs::wasm_cache(config);
    match cache_dir {
        None => push(
            &mut checks,
            "wasm",
            "compile cache",
            Status::Missing,
            "off: every process compiles its tools again",
        ),
        Some(d) => {
            let probe = d.join(format!(".toolhost-check-{}", std::process::id()));
            let w = std::fs::create_dir_all(&d).and_then(|()| std::fs::write(&probe, b"x"));
            let _ = std::fs::remove_file(&probe);
            match w {
                Ok(()) => push(
                    &mut checks,
                    "wasm",
                    "compile cache",
                    Status::Ok,
                    format!("{} (writable)", d.display()),
                ),
                Err(e) => push(
                    &mut checks,
                    "wasm",
                    "compile cache",
                    Status::Error,
                    format!(
                        "{}: {e} (tools are compiled in memory instead)",
                        d.display()
                    ),
                ),
            }
        }
    }

    // docker
    let uses_docker = backend == BackendChoice::Docker;
    match sandbox.docker_backend().probe().await {
        Ok(p) => {
            push(
                &mut checks,
                "docker",
                "engine",
                Status::Ok,
                format!(
                    "Docker {} (API {}, {}) at {}",
                    p.version, p.api_version, p.os, p.address
                ),
            );
            match p.image {
                None => {
                    if uses_docker {
                        problems.push("docker: no [docker] image configured".into());
                    }
                    push(
                        &mut checks,
                        "docker",
                        "image",
                        Status::Missing,
                        "no [docker] image configured",
                    );
                }
                Some((name, Ok(()))) => push(&mut checks, "docker", "image", Status::Ok, name),
                Some((name, Err(e))) => {
                    if uses_docker {
                        problems.push(format!("docker: image {name}: {e}"));
                    }
                    push(
                        &mut checks,
                        "docker",
                        "image",
                        Status::Missing,
                        format!("{name}: {e}"),
                    );
                }
            }
            push(
                &mut checks,
                "docker",
                "container limits",
                Status::Ok,
                "no network, all capabilities dropped, read-only root, no_new_privs, memory/pids/CPU limits (enforced by the engine)",
            );
        }
        Err(e) => {
            if uses_docker {
                problems.push(format!("docker: {e}"));
            }
            push(&mut checks, "docker", "engine", Status::Missing, e);
        }
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

#[cfg(target_os = "linux")]
fn direct_host_checks(out: &mut Vec<Check>) {
    use crate::backend::direct as d;
    let abi = d::landlock_abi();
    let (status, detail) = match abi {
        0 => (Status::Missing, "no Landlock in this kernel: no filesystem confinement of native tools (use docker or wasm)".to_string()),
        1 | 2 => (Status::Partial, format!("ABI {abi}: filesystem rules, but truncation is not confined (strict needs ABI 3+), no TCP rules, no scoping")),
        3 => (Status::Partial, "ABI 3: filesystem rules; no TCP rules (ABI 4+), no scoping (ABI 6+)".to_string()),
        4 | 5 => (Status::Partial, format!("ABI {abi}: filesystem rules, TCP bind/connect; no signal or abstract-socket scoping (ABI 6+)")),
        _ => (Status::Ok, format!("ABI {abi}: filesystem rules, TCP bind/connect, signal and abstract unix socket scoping")),
    };
    push(out, "direct", "landlock", status, detail);
    if d::seccomp_available() {
        push(
            out,
            "direct",
            "seccomp",
            Status::Ok,
            format!(
                "EPERM for: {}; sockets other than unix while the network is off",
                d::DENIED_SYSCALL_NAMES
            ),
        );
    } else {
        push(
            out,
            "direct",
            "seccomp",
            Status::Missing,
            "no seccomp filtering for this kernel or architecture",
        );
    }
    let root = rustix::process::geteuid().is_root();
    let userns = if root { None } else { Some(d::shared_userns()) };
    let netns = match &userns {
        None => d::shared_netns().map(|_| ()),
        Some(r) => r.as_ref().map(|_| ()).map_err(Clone::clone),
    };
    match netns {
        Ok(()) => push(
            out,
            "direct",
            "network namespace",
            Status::Ok,
            "an empty network namespace (no interface up), shared by the calls of a toolhost process; no tool holds CAP_NET_ADMIN there",
        ),
        Err(why) => push(
            out,
            "direct",
            "network namespace",
            Status::Missing,
            format!(
                "{why}: the network is denied by seccomp (sockets other than unix) and Landlock (TCP, ABI 4+) instead"
            ),
        ),
    }
    match &userns {
        None => push(
            out,
            "direct",
            "user namespaces",
            Status::Unused,
            "not needed: toolhost runs as root and creates the namespaces itself",
        ),
        Some(Ok(_)) => push(
            out,
            "direct",
            "user namespaces",
            Status::Ok,
            "one user namespace per toolhost process, mapping only its own uid and gid: it gives an unprivileged toolhost the network and PID namespaces; in it, files of other users show as owned by the overflow uid (65534)",
        ),
        Some(Err(why)) => push(
            out,
            "direct",
            "user namespaces",
            Status::Missing,
            format!("{why}: an unprivileged toolhost has no network or PID namespace here"),
        ),
    }
    let pidns = root || matches!(userns, Some(Ok(_)));
    if pidns {
        push(
            out,
            "direct",
            "pid namespace",
            Status::Ok,
            "one per call: the tool is pid 2 under a small init; nothing it starts leaves the namespace, and the kernel kills what is left in it when the call ends; signals by pid reach only the namespace's processes (/proc still lists the host's)",
        );
        push(
            out,
            "direct",
            "process containment",
            Status::Ok,
            "the call's PID namespace (isolation best-effort or strict; a per-call child subreaper under isolation = off); parent-death signal if toolhost dies",
        );
    } else {
        push(
            out,
            "direct",
            "pid namespace",
            Status::Missing,
            "not available to this unprivileged toolhost",
        );
        push(
            out,
            "direct",
            "process containment",
            Status::Ok,
            "per-call child subreaper: setsid and double-fork escapees stay in the call's tree and are killed at its end; parent-death signal if toolhost dies",
        );
    }
    if pidns {
        push(
            out,
            "direct",
            "protected paths",
            Status::Ok,
            "the protected paths that exist in the writable dirs (protected_paths, default .git) are read-only bind mounts in a mount namespace of the call; one missing when the call starts and made by it is renamed aside after the call (the file tools and wasm refuse it by name)",
        );
    } else {
        push(
            out,
            "direct",
            "protected paths",
            Status::Missing,
            "no mount namespace for this unprivileged toolhost: .git and the other protected paths are writable by native tools (strict refuses a call that has one)",
        );
    }
    let cgroup = if std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        "cgroup v2"
    } else if std::path::Path::new("/sys/fs/cgroup/pids").exists()
        || std::path::Path::new("/sys/fs/cgroup/memory").exists()
    {
        "cgroup v1"
    } else {
        "no cgroup hierarchy mounted"
    };
    push(
        out,
        "direct",
        "cgroups",
        Status::Unused,
        format!(
            "{cgroup}; not used: limits are rlimits (RLIMIT_NPROC counts per user and does not bind root)"
        ),
    );
    push(
        out,
        "direct",
        "rlimits",
        Status::Ok,
        "RLIMIT_AS, RLIMIT_CPU, RLIMIT_NPROC (per user; not for root), RLIMIT_FSIZE, RLIMIT_CORE=0",
    );
    push(
        out,
        "direct",
        "pathname unix sockets",
        Status::Partial,
        "network off: connect() is refused by seccomp, so host daemons (docker.sock...) are unreachable; network on: Landlock before ABI 8 does not confine connecting to a socket file the user may open",
    );
}

#[cfg(all(unix, not(target_os = "linux")))]
fn direct_host_checks(out: &mut Vec<Check>) {
    push(
        out,
        "direct",
        "landlock",
        Status::Missing,
        "Linux only: no filesystem confinement of native tools here (use docker or wasm)",
    );
    push(
        out,
        "direct",
        "seccomp",
        Status::Missing,
        "Linux only: no syscall filter, no kernel network denial",
    );
    push(
        out,
        "direct",
        "process containment",
        Status::Partial,
        "the tool's process group is killed; a process that calls setsid can escape it",
    );
    push(
        out,
        "direct",
        "protected paths",
        Status::Missing,
        "Linux only: native tools can write .git and the other protected paths (the file tools refuse them)",
    );
    push(
        out,
        "direct",
        "rlimits",
        Status::Ok,
        "RLIMIT_AS, RLIMIT_CPU, RLIMIT_NPROC (per user), RLIMIT_FSIZE, RLIMIT_CORE=0",
    );
}

#[cfg(windows)]
fn direct_host_checks(out: &mut Vec<Check>) {
    push(
        out,
        "direct",
        "landlock",
        Status::Missing,
        "Linux only: no filesystem confinement of native tools on Windows (a Job Object confines none); use wasm or docker",
    );
    push(
        out,
        "direct",
        "seccomp",
        Status::Missing,
        "Linux only: no syscall filter and no network denial of native tools on Windows",
    );
    push(
        out,
        "direct",
        "process containment",
        Status::Partial,
        "a Job Object per call (KILL_ON_JOB_CLOSE, no breakaway): the processes the tool starts are killed at the timeout and at the end of every call; but the tool runs with toolhost's token, so it can start processes outside the job through another process of the user (a spoofed parent, WMI, the task scheduler). toolhost's process object is closed to it by its DACL, but not its threads: a tool can get code run inside toolhost, so keep secrets out of a toolhost that runs untrusted native tools (use wasm)",
    );
    push(
        out,
        "direct",
        "protected paths",
        Status::Missing,
        "Linux only: native tools can write .git and the other protected paths (the file tools refuse them)",
    );
    push(
        out,
        "direct",
        "rlimits",
        Status::Partial,
        "job limits per process: max_memory_mb (committed memory), max_cpu_seconds (user time), max_processes (alive at once); max_file_size_mb is not applied",
    );
    push(
        out,
        "direct",
        "handles",
        Status::Ok,
        "only the three standard handles are inherited (PROC_THREAD_ATTRIBUTE_HANDLE_LIST); stdin is never toolhost's",
    );
}

#[cfg(not(any(unix, windows)))]
fn direct_host_checks(out: &mut Vec<Check>) {
    push(
        out,
        "direct",
        "process containment",
        Status::Partial,
        "only the tool itself is killed at the timeout, not processes it started",
    );
    push(
        out,
        "direct",
        "rlimits",
        Status::Advisory,
        "memory, CPU, process and file-size limits are not applied on this platform",
    );
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
