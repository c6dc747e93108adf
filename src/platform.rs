//! What this platform can enforce for the `direct` backend, logged once.
//!
//! Invariant (DESIGN 7): the first sandbox of a process says which guarantees
//! hold here, once, so an operator never assumes a limit that is not applied.

use std::sync::Once;

/// One line per guarantee of the `direct` backend on this platform.
pub fn direct_guarantees() -> &'static [&'static str] {
    if cfg!(target_os = "linux") {
        &[
            "rlimits applied: RLIMIT_AS, RLIMIT_CPU, RLIMIT_NPROC (per user; not for root), RLIMIT_FSIZE, RLIMIT_CORE=0",
            "process tree killed at the end of every call, setsid and double-fork escapees included (per-call subreaper supervisor)",
            "tool stopped if toolhost dies (parent-death signal, re-armed when the spawning thread exits)",
            "environment from an allowlist, deny list always stripped; only fds 0-2 inherited; stdin never the host's",
            "tool in its own Landlock domain (kernel ABI 1+): no ptrace or /proc/<pid>/environ of processes outside it; on ABI 6+ it cannot signal them (toolhost, its supervisor); no_new_privs; no inheritable or ambient capabilities",
            "with isolation best-effort (default) or strict: Landlock filesystem rules, network denial (network namespace as root, seccomp, Landlock TCP rules), a seccomp syscall filter, a private TMPDIR; each call reports the layers it got (`toolhost check` lists what this host offers)",
        ]
    } else if cfg!(unix) {
        &[
            "rlimits applied: RLIMIT_AS, RLIMIT_CPU, RLIMIT_NPROC (per user), RLIMIT_FSIZE, RLIMIT_CORE=0",
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
