//! The unsafe island, part one: every `unsafe` operation of the library
//! outside the direct backend's process code (`backend/direct`, part two).
//! Everything here is a small safe function over one system call or one
//! foreign API, with its safety argument beside the call; the rest of the
//! library is `#![deny(unsafe_code)]` and reaches the OS through std,
//! cap-std, rustix and these functions.
//!
//! - [`file_id`]: a file's identity (device and inode, or the Windows volume
//!   serial and file index), and Windows's final path and on-disk names.
//! - `file_lock` (Windows): the audit log's writer lock, one byte.
//! - [`code_cache`]: the on-disk cache of compiled wasm, the one place bytes
//!   from disk become native code (wasmtime's `deserialize`).
//! - `fifo_signal` (Linux): a no-op signal handler and a signal to one
//!   thread, which interrupt a wasm call's blocked open of a FIFO.
//! - [`private_dir`]: a state dir only this user can write.
//! - `beside` (Linux): a thread started beside its starter, on another CPU
//!   (the direct backend's warm-up).
//! - `current_cpu` (Linux): the CPU the calling thread runs on.
//! - `time_shared` (Linux): whether this thread's scheduling policy is a
//!   time-sharing one (a wasm runner's, `backend/wasm/runner.rs`).
//! - `close_on_exec_from_3` (Linux): marks every descriptor past stdio
//!   close-on-exec, before a detached process is started
//!   (`backend/wasm/tier.rs`).

use std::path::Path;

#[cfg(target_os = "linux")]
pub(crate) mod beside;
pub(crate) mod code_cache;
#[cfg(target_os = "linux")]
pub(crate) mod fifo_signal;
pub(crate) mod file_id;
#[cfg(windows)]
pub(crate) mod file_lock;

/// Whether the calling thread has a time-sharing scheduling policy
/// (`SCHED_OTHER`, `SCHED_BATCH` or `SCHED_IDLE`), not a real-time or
/// deadline one.
#[cfg(target_os = "linux")]
pub(crate) fn time_shared() -> bool {
    // SAFETY: sched_getscheduler has no preconditions and touches no
    // memory of ours; 0 names the calling thread.
    let policy = unsafe { libc::sched_getscheduler(0) } & !libc::SCHED_RESET_ON_FORK;
    matches!(
        policy,
        libc::SCHED_OTHER | libc::SCHED_BATCH | libc::SCHED_IDLE
    )
}

/// The CPU the calling thread runs on, if known: glibc reads it from the
/// thread's rseq area or the vDSO, and falls back to the `getcpu` system
/// call, which a seccomp profile may refuse (rustix's `sched_getcpu` makes
/// that call and reads its result even when it failed).
#[cfg(target_os = "linux")]
pub(crate) fn current_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu takes nothing and touches no memory of ours.
    let cpu = unsafe { libc::sched_getcpu() };
    usize::try_from(cpu).ok()
}

/// Marks every open descriptor numbered 3 or more close-on-exec
/// (`close_range` with `CLOSE_RANGE_CLOEXEC`, Linux 5.11+), so that a
/// process started after it inherits only its standard streams: those
/// this process got from its own parent (a shell's `3>&1`, a harness's
/// pipes, a jobserver) included. Whether it could.
#[cfg(target_os = "linux")]
pub(crate) fn close_on_exec_from_3() -> bool {
    // SAFETY: with CLOSE_RANGE_CLOEXEC the call closes nothing: it only
    // sets the close-on-exec flag of descriptors in the range, so no
    // descriptor any Rust object owns is invalidated, and it touches no
    // memory of ours.
    let r = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3 as libc::c_uint,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC as libc::c_uint,
        )
    };
    r == 0
}

/// Creates `dir` if needed and checks that only this user can write to it
/// (Unix: owned by the effective user; group and other write bits are
/// cleared, and a dir owned by another user is refused).
pub(crate) fn private_dir(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let meta = std::fs::metadata(dir).map_err(|e| e.to_string())?;
        if meta.uid() != rustix::process::geteuid().as_raw() {
            return Err("not owned by this user".into());
        }
        if meta.mode() & 0o022 != 0 {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| format!("writable by others and cannot be fixed: {e}"))?;
        }
    }
    Ok(())
}
