//! The WASI context of one call, built from its plan: argv, environment,
//! stdin, capped stdout and stderr, each allowed dir preopened under its
//! guest path and the cwd as `.`.

use std::path::{Path, PathBuf};

use wasmtime_wasi::p2::pipe::MemoryInputPipe;
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

use super::classify::first_line;
use super::{CappedPipe, protect};
use crate::outcome::{Outcome, OutcomeKind};
use crate::plan::ExecPlan;

/// The path wasmtime-wasi should open to get exactly the directory `dir`
/// refers to: on Linux the handle itself via /proc, so a symlink swapped in
/// after planning cannot redirect the preopen.
pub(super) fn preopen_path(dir: &cap_std::fs::Dir, fallback: &Path) -> PathBuf {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let _ = fallback;
        PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = dir;
        fallback.to_path_buf()
    }
}

/// The WASI context of a call: argv (`argv[0]` the tool's name), env, stdin,
/// capped stdout/stderr, the allowed dirs under their guest paths and the
/// cwd as `.` (none when it is the dir preopened as `/`).
pub(super) fn build_wasi(
    plan: &ExecPlan,
    name: &str,
    stdout: &CappedPipe,
    stderr: &CappedPipe,
) -> Result<(WasiCtxBuilder, protect::Guard), Outcome> {
    let invalid = |m: String| Outcome::new(OutcomeKind::InvalidRequest, m);
    let mut b = WasiCtxBuilder::new();
    let mut args = Vec::with_capacity(plan.argv.len());
    args.push(name.to_string());
    for (i, a) in plan.argv.iter().enumerate().skip(1) {
        args.push(
            a.to_str()
                .ok_or_else(|| invalid(format!("argv[{i}] is not valid UTF-8")))?
                .to_string(),
        );
    }
    b.args(&args);
    for (k, v) in &plan.env {
        if let (Some(k), Some(v)) = (k.to_str(), v.to_str()) {
            b.env(k, v);
        }
    }
    let stdin = plan
        .stdin
        .as_deref()
        .map(<[u8]>::to_vec)
        .unwrap_or_default();
    b.stdin(MemoryInputPipe::new(stdin));
    b.stdout(stdout.clone());
    b.stderr(stderr.clone());
    // No sockets (preview 2 and 3 link the socket interfaces): none can be
    // created, and no address would pass the (default, empty) address check.
    b.allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false);
    // Not `allow_blocking_current_thread`: with it, a guest's sleep blocks the
    // thread in std::thread::sleep and the timeout could not end the call.
    let perms = |ro: bool| {
        if ro {
            FsPerms::ReadOnly
        } else {
            FsPerms::ReadWrite
        }
    };
    // A preopen at or under a protected dir (a cwd inside `.git`) is made
    // read-only before the guest's first change (`protect`).
    let guard = protect::Guard::new(plan);
    for m in &plan.mounts {
        let guest = m
            .guest
            .to_str()
            .ok_or_else(|| invalid(format!("allowed dir {:?} is not valid UTF-8", m.guest)))?;
        let dir = plan.mount_dirs.iter().find(|(p, _)| p == &m.path);
        let host = dir
            .map(|(_, d)| preopen_path(d, &m.path))
            .unwrap_or_else(|| m.path.clone());
        b.preopened_dir(&host, guest, perms(m.read_only))
            .map_err(|e| {
                Outcome::new(
                    OutcomeKind::LaunchFailed,
                    format!("cannot preopen {guest}: {}", first_line(&e)),
                )
            })?;
    }
    if let Some(cwd) = &plan.cwd
        && !cwd_is_guest_root(plan, cwd)
    {
        // wasi-libc gives a `.` preopen every path no longer prefix takes,
        // as it does a `/` one: with both, `/f` would open the cwd's `f`.
        if plan.mounts.iter().any(|m| m.guest == Path::new("/")) {
            return Err(invalid(format!(
                "cwd {}: a wasm guest starts in `/`, and with an allowed dir preopened as `/` its cwd can only be `/` (a `.` preopen for another dir would also take absolute paths); run in `/`, or give that dir another guest path",
                cwd.guest.display()
            )));
        }
        let cwd_ro = plan
            .mounts
            .iter()
            .filter(|m| cwd.path.starts_with(&m.path))
            .max_by_key(|m| m.path.components().count())
            .is_some_and(|m| m.read_only)
            || cwd_inside(&guard, plan, cwd);
        b.preopened_dir(preopen_path(&cwd.dir, &cwd.path), ".", perms(cwd_ro))
            .map_err(|e| {
                Outcome::new(
                    OutcomeKind::LaunchFailed,
                    format!("cannot preopen the cwd: {}", first_line(&e)),
                )
            })?;
    }
    Ok((b, guard))
}

/// Whether the cwd is the allowed dir preopened as `/`. A guest's relative
/// paths then already reach it (wasi-libc starts in `/` and resolves them
/// from there), so it gets no `.` preopen of its own and sees exactly the
/// dirs it was given.
pub(super) fn cwd_is_guest_root(plan: &ExecPlan, cwd: &crate::plan::WorkDir) -> bool {
    plan.mounts
        .iter()
        .any(|m| m.guest == Path::new("/") && m.path == cwd.path)
}

/// Whether the cwd lies at or under a protected dir (its preopen is then
/// read-only). An allowed dir itself cannot (`Sandbox::new` refuses one
/// inside another's protected path), so only a cwd below one is walked.
pub(super) fn cwd_inside(
    guard: &protect::Guard,
    plan: &ExecPlan,
    cwd: &crate::plan::WorkDir,
) -> bool {
    guard.active()
        && !plan.mounts.iter().any(|m| m.path == cwd.path)
        && cwd
            .dir
            .try_clone()
            .map_or(true, |d| guard.inside(&d.into_std_file()))
}
