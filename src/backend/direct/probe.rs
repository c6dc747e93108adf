//! What `direct` can enforce on this host, asked of the kernel (Landlock
//! ABI, seccomp, namespaces) or known for the platform: the rows of
//! `toolhost check` for `direct`, and the guarantees the first sandbox of a
//! process logs (DESIGN 7: an operator never assumes a limit that is not
//! applied). The probe call itself (a program run with the configured
//! isolation) is the sandbox's: it needs a plan.
use std::sync::Once;

use crate::probe::{Probe, Status};

/// The rlimits applied on Linux, as both lists say them.
macro_rules! rlimits_linux {
    () => {
        "RLIMIT_AS, RLIMIT_CPU, RLIMIT_NPROC (per user; not for root), RLIMIT_FSIZE, RLIMIT_CORE=0"
    };
}
/// The rlimits applied on other Unix systems.
macro_rules! rlimits_unix {
    () => {
        "RLIMIT_AS, RLIMIT_CPU, RLIMIT_NPROC (per user), RLIMIT_FSIZE, RLIMIT_CORE=0"
    };
}

#[cfg(target_os = "linux")]
pub(super) fn host_checks(out: &mut Probe) {
    let abi = super::landlock_abi();
    let (status, detail) = match abi {
        0 => (Status::Missing, "no Landlock in this kernel: no filesystem confinement of native tools (use docker or wasm)".to_string()),
        1 | 2 => (Status::Partial, format!("ABI {abi}: filesystem rules, but truncation is not confined (strict needs ABI 3+), no TCP rules, no scoping")),
        3 => (Status::Partial, "ABI 3: filesystem rules; no TCP rules (ABI 4+), no scoping (ABI 6+)".to_string()),
        4 | 5 => (Status::Partial, format!("ABI {abi}: filesystem rules, TCP bind/connect; no signal or abstract-socket scoping (ABI 6+)")),
        _ => (Status::Ok, format!("ABI {abi}: filesystem rules, TCP bind/connect, signal and abstract unix socket scoping")),
    };
    out.push("direct", "landlock", status, detail);
    if super::seccomp_available() {
        out.push(
            "direct",
            "seccomp",
            Status::Ok,
            format!("EPERM for: {}", super::DENIED_SYSCALL_NAMES),
        );
    } else {
        out.push(
            "direct",
            "seccomp",
            Status::Missing,
            "no seccomp filtering for this kernel or architecture",
        );
    }
    let root = rustix::process::geteuid().is_root();
    let userns = if root {
        None
    } else {
        Some(super::shared_userns())
    };
    let netns = match &userns {
        None => super::shared_netns().map(|_| ()),
        Some(r) => r.as_ref().map(|_| ()).map_err(Clone::clone),
    };
    match netns {
        Ok(()) => out.push(
            "direct",
            "network namespace",
            Status::Ok,
            "an empty network namespace (no interface up), shared by the calls of a toolhost process; no tool holds CAP_NET_ADMIN there",
        ),
        Err(why) => out.push(
            "direct",
            "network namespace",
            Status::Missing,
            format!(
                "{why}: the network is denied by seccomp (sockets other than unix stream and seqpacket ones, connect) and Landlock (TCP, ABI 4+) instead"
            ),
        ),
    }
    match &userns {
        None => out.push(
            "direct",
            "user namespaces",
            Status::Unused,
            "not needed: toolhost runs as root and creates the namespaces itself",
        ),
        Some(Ok(_)) => out.push(
            "direct",
            "user namespaces",
            Status::Ok,
            "one user namespace per toolhost process, mapping only its own uid and gid: it gives an unprivileged toolhost the network and PID namespaces; in it, files of other users show as owned by the overflow uid (65534)",
        ),
        Some(Err(why)) => out.push(
            "direct",
            "user namespaces",
            Status::Missing,
            format!("{why}: an unprivileged toolhost has no network or PID namespace here"),
        ),
    }
    let pidns = root || matches!(userns, Some(Ok(_)));
    if pidns {
        out.push(
            "direct",
            "pid namespace",
            Status::Ok,
            "one per call: the tool is pid 2 under a small init; nothing it starts leaves the namespace, and the kernel kills what is left in it when the call ends; signals by pid reach only the namespace's processes (/proc still lists the host's)",
        );
        out.push(
            "direct",
            "process containment",
            Status::Ok,
            "the call's PID namespace (isolation best-effort or strict; a per-call child subreaper under isolation = off); parent-death signal if toolhost dies",
        );
    } else {
        out.push(
            "direct",
            "pid namespace",
            Status::Missing,
            "not available to this unprivileged toolhost",
        );
        out.push(
            "direct",
            "process containment",
            Status::Ok,
            "per-call child subreaper: setsid and double-fork escapees stay in the call's tree and are killed at its end; parent-death signal if toolhost dies",
        );
    }
    if pidns {
        out.push(
            "direct",
            "protected paths",
            Status::Ok,
            "the protected paths that exist in the writable dirs (protected_paths, default .git) are read-only bind mounts in a mount namespace of the call; one missing when the call starts and made by it is renamed aside after the call (the file tools and wasm refuse it by name)",
        );
    } else {
        out.push(
            "direct",
            "protected paths",
            Status::Missing,
            "no mount namespace for this unprivileged toolhost: .git and the other protected paths are writable by native tools (strict refuses a call that has one)",
        );
    }
    if root {
        out.push(
            "direct",
            "host file metadata",
            Status::Ok,
            "every host mount is read-only in the call's mount namespace but its writable dirs and private tmp (readonly_host): no chmod, chown, times or xattrs of a host file (Landlock has no right for metadata)",
        );
    } else {
        out.push(
            "direct",
            "host file metadata",
            Status::Partial,
            "Landlock has no right for metadata: a tool can chmod, chown and set times of files this user owns outside the allowed dirs (readonly_host is for a root toolhost, whose tools would otherwise own every host file)",
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
    out.push(
        "direct",
        "cgroups",
        Status::Unused,
        format!(
            "{cgroup}; not used: limits are rlimits (RLIMIT_NPROC counts per user and does not bind root)"
        ),
    );
    out.push("direct", "rlimits", Status::Ok, rlimits_linux!());
    out.push(
        "direct",
        "pathname unix sockets",
        Status::Partial,
        "network off: connect() and datagram unix sockets are refused by seccomp, so no host socket (docker.sock, /dev/log...) is reachable by its path; network on: Landlock before ABI 8 does not confine connecting to a socket file the user may open",
    );
}

#[cfg(all(unix, not(target_os = "linux")))]
pub(super) fn host_checks(out: &mut Probe) {
    out.push(
        "direct",
        "landlock",
        Status::Missing,
        "Linux only: no filesystem confinement of native tools here (use docker or wasm)",
    );
    out.push(
        "direct",
        "seccomp",
        Status::Missing,
        "Linux only: no syscall filter, no kernel network denial",
    );
    out.push(
        "direct",
        "process containment",
        Status::Partial,
        "the tool's process group is killed; a process that calls setsid can escape it",
    );
    out.push(
        "direct",
        "protected paths",
        Status::Missing,
        "Linux only: native tools can write .git and the other protected paths (the file tools refuse them)",
    );
    out.push("direct", "rlimits", Status::Ok, rlimits_unix!());
}

#[cfg(windows)]
pub(super) fn host_checks(out: &mut Probe) {
    out.push(
        "direct",
        "landlock",
        Status::Missing,
        "Linux only: no filesystem confinement of native tools on Windows (a Job Object confines none); use wasm or docker",
    );
    out.push(
        "direct",
        "seccomp",
        Status::Missing,
        "Linux only: no syscall filter and no network denial of native tools on Windows",
    );
    out.push(
        "direct",
        "process containment",
        Status::Partial,
        "a Job Object per call (KILL_ON_JOB_CLOSE, no breakaway): the processes the tool starts are killed at the timeout and at the end of every call; but the tool runs with toolhost's token, so it can start processes outside the job through another process of the user (a spoofed parent, WMI, the task scheduler). toolhost's process object is closed to it by its DACL, but not its threads: a tool can get code run inside toolhost, so keep secrets out of a toolhost that runs untrusted native tools (use wasm)",
    );
    out.push(
        "direct",
        "protected paths",
        Status::Missing,
        "Linux only: native tools can write .git and the other protected paths (the file tools refuse them)",
    );
    out.push(
        "direct",
        "rlimits",
        Status::Partial,
        "job limits per process: max_memory_mb (committed memory), max_cpu_seconds (user time), max_processes (alive at once); max_file_size_mb is not applied",
    );
    out.push(
        "direct",
        "handles",
        Status::Ok,
        "only the three standard handles are inherited (PROC_THREAD_ATTRIBUTE_HANDLE_LIST); stdin is never toolhost's",
    );
}

#[cfg(not(any(unix, windows)))]
pub(super) fn host_checks(out: &mut Probe) {
    out.push(
        "direct",
        "process containment",
        Status::Partial,
        "only the tool itself is killed at the timeout, not processes it started",
    );
    out.push(
        "direct",
        "rlimits",
        Status::Advisory,
        "memory, CPU, process and file-size limits are not applied on this platform",
    );
}

/// One line per guarantee of the `direct` backend on this platform.
pub fn direct_guarantees() -> &'static [&'static str] {
    if cfg!(target_os = "linux") {
        &[
            concat!("rlimits applied: ", rlimits_linux!()),
            "process tree killed at the end of every call, setsid and double-fork escapees included (per-call subreaper supervisor)",
            "tool stopped if toolhost dies (parent-death signal, re-armed when the spawning thread exits)",
            "environment from an allowlist, deny list always stripped; only fds 0-2 inherited; stdin never the host's",
            "tool in its own Landlock domain (kernel ABI 1+): no ptrace or /proc/<pid>/environ of processes outside it; on ABI 6+ it cannot signal them (toolhost, its supervisor); no_new_privs; no inheritable or ambient capabilities",
            "with isolation best-effort (default) or strict: Landlock filesystem rules, network denial (network namespace as root, seccomp, Landlock TCP rules), a seccomp syscall filter, a private TMPDIR; each call reports the layers it got (`toolhost check` lists what this host offers)",
        ]
    } else if cfg!(unix) {
        &[
            concat!("rlimits applied: ", rlimits_unix!()),
            "the tool's process group is killed at the end of a call; processes that call setsid can escape it",
            "environment from an allowlist, deny list always stripped; only fds 0-2 inherited; stdin never the host's",
            "not enforced: filesystem confinement and network denial of native programs",
        ]
    } else if cfg!(windows) {
        &[
            "a Job Object per call: the processes a tool starts are killed at the timeout and at the end of every call (KILL_ON_JOB_CLOSE, no breakaway)",
            "NOT ENFORCED on Windows: separation from the user's account: a tool runs with toolhost's token, so it can reach the user's other processes and start processes outside its job through them; toolhost's process object is closed to it by its DACL, but its threads are not: a tool can get code run inside toolhost",
            "job limits applied per process: max_memory_mb (committed memory), max_cpu_seconds (user time), max_processes (processes alive at once); max_file_size_mb is not applied",
            "environment from an allowlist, deny list always stripped (names without case); only the three standard handles inherited (PROC_THREAD_ATTRIBUTE_HANDLE_LIST); stdin never the host's",
            "NOT ENFORCED on Windows: filesystem confinement and network denial of native programs (a job confines neither)",
        ]
    } else {
        &[
            "ADVISORY ONLY: memory, CPU, process and file-size limits are not applied on this platform",
            "only the tool itself is killed at the timeout, not processes it started",
            "environment from an allowlist, deny list always stripped; stdin never the host's",
            "not enforced: filesystem confinement and network denial of native programs",
        ]
    }
}

static ONCE: Once = Once::new();

/// Logs the platform's guarantees the first time it is called in a process.
pub fn log_guarantees_once() {
    ONCE.call_once(|| {
        // What does not hold is a warning; on a platform without POSIX
        // process control every line is.
        for g in direct_guarantees() {
            let gap = g.starts_with("NOT ") || g.starts_with("ADVISORY") || g.starts_with("not ");
            if gap || !cfg!(any(unix, windows)) {
                tracing::warn!(backend = "direct", "{g}");
            } else {
                tracing::info!(backend = "direct", "{g}");
            }
        }
    });
}
