//! The WASI context of one call, built from its plan: argv, environment,
//! stdin, capped stdout and stderr, each allowed dir preopened under its
//! guest path and the cwd as `.`.
//!
//! On Linux, the preopens of a call whose cwd is an allowed dir itself (the
//! default) are made once per backend and cloned for each call ([`Preopens`]): a
//! wasmtime-wasi preopen holds its directory in an `Arc`, so a clone costs
//! no system call, where opening one cost a few microseconds per dir, and
//! closing it as much again when the store was dropped.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use cap_std::fs::Dir;
use wasmtime_wasi::filesystem::WasiFilesystemCtx;
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
/// cwd as `.` (none when it is the dir preopened as `/`). When the preopens
/// come from `cache`, the builder has none and the third value holds them:
/// install it in the built context ([`install`]).
pub(super) fn build_wasi(
    plan: &ExecPlan,
    name: &str,
    stdout: &CappedPipe,
    stderr: &CappedPipe,
    cache: &Preopens,
    inline: bool,
) -> Result<(WasiCtxBuilder, protect::Guard, Option<Shared>), Outcome> {
    let invalid = |m: String| Outcome::new(OutcomeKind::InvalidRequest, m);
    let mut b = WasiCtxBuilder::new();
    b.arg(name);
    for (i, a) in plan.argv.iter().enumerate().skip(1) {
        b.arg(
            a.to_str()
                .ok_or_else(|| invalid(format!("argv[{i}] is not valid UTF-8")))?,
        );
    }
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
    // File operations run on the thread polling the call when it holds an
    // `inline_io` slot, else each on the blocking pool. A preview-1 guest's
    // sleep, which wasmtime-wasi then makes a blocking `std::thread::sleep`,
    // stays a timer (`sleep_p1`).
    b.allow_blocking_current_thread(inline);
    // A preopen at or under a protected dir (a cwd inside `.git`) is made
    // read-only before the guest's first change (`protect`).
    let guard = protect::Guard::new(plan);
    let list = preopen_list(plan, &guard)?;
    if let Some(fs) = cache.get(&list, inline)? {
        return Ok((b, guard, Some(fs)));
    }
    for p in &list {
        let host = match p.dir {
            Some(d) => preopen_path(d, p.path),
            None => p.path.to_path_buf(),
        };
        add(&mut b, &host, p.guest, p.read_only)?;
    }
    Ok((b, guard, None))
}

/// Preopens made by [`Preopens`] for a call, and the dirs they were made
/// from.
pub(super) struct Shared {
    fs: WasiFilesystemCtx,
    dirs: PreopenDirs,
}

/// The dirs a set of shared preopens was made from, in order: each one's
/// handle (the very directory its preopen holds: it was opened through
/// this handle, `preopen_path`), guest path and mode.
pub(super) type PreopenDirs = Arc<[(Arc<Dir>, String, bool)]>;

/// Puts preopens made by [`Preopens`] in a built context; the dirs they
/// were made from, if so.
pub(super) fn install(
    ctx: &mut wasmtime_wasi::WasiCtx,
    shared: Option<Shared>,
) -> Option<PreopenDirs> {
    let shared = shared?;
    *ctx.filesystem() = shared.fs;
    Some(shared.dirs)
}

/// The handle of the preopen named `guest` among `dirs`, when exactly one
/// has that name.
#[cfg(target_os = "linux")]
pub(super) fn preopen_named<'a>(dirs: &'a PreopenDirs, guest: &[u8]) -> Option<&'a Dir> {
    let mut found = dirs.iter().filter(|(_, g, _)| g.as_bytes() == guest);
    let (dir, _, _) = found.next()?;
    found.next().is_none().then_some(&**dir)
}

/// One preopen of a call: the dir by the call's handle on it (when the plan
/// has one), the guest path and the mode; `shared`, the allowed dir's own
/// handle when the dir is exactly one (what a shared preopen is made from).
struct Preopen<'a> {
    dir: Option<&'a Arc<Dir>>,
    shared: Option<&'a Arc<Dir>>,
    path: &'a Path,
    guest: &'a str,
    read_only: bool,
}

fn add(b: &mut WasiCtxBuilder, host: &Path, guest: &str, ro: bool) -> Result<(), Outcome> {
    let perms = if ro {
        FsPerms::ReadOnly
    } else {
        FsPerms::ReadWrite
    };
    b.preopened_dir(host, guest, perms)
        .map(|_| ())
        .map_err(|e| {
            let what = if guest == "." {
                "the cwd".to_string()
            } else {
                guest.to_string()
            };
            Outcome::new(
                OutcomeKind::LaunchFailed,
                format!("cannot preopen {what}: {}", first_line(&e)),
            )
        })
}

/// The call's preopens in order: each allowed dir, then the cwd as `.`.
fn preopen_list<'a>(
    plan: &'a ExecPlan,
    guard: &protect::Guard,
) -> Result<Vec<Preopen<'a>>, Outcome> {
    let invalid = |m: String| Outcome::new(OutcomeKind::InvalidRequest, m);
    let mut list = Vec::with_capacity(plan.mounts.len() + 1);
    for m in plan.mounts.iter() {
        let guest = m
            .guest
            .to_str()
            .ok_or_else(|| invalid(format!("allowed dir {:?} is not valid UTF-8", m.guest)))?;
        let dir = plan
            .mount_dirs
            .iter()
            .find(|(p, _)| p == &m.path)
            .map(|(_, d)| d);
        list.push(Preopen {
            shared: dir,
            dir,
            path: &m.path,
            guest,
            read_only: m.read_only,
        });
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
            || cwd_inside(guard, plan, cwd);
        list.push(Preopen {
            shared: same_dir_as_mount(plan, cwd),
            dir: Some(&cwd.dir),
            path: &cwd.path,
            guest: ".",
            read_only: cwd_ro,
        });
    }
    Ok(list)
}

/// The handle of the allowed dir the cwd's handle is a clone of: same
/// path, and the two open handles on one directory (file identity, read
/// while both are open, so it cannot be a reused inode). `None` for a cwd
/// below an allowed dir.
fn same_dir_as_mount<'a>(plan: &'a ExecPlan, cwd: &crate::plan::WorkDir) -> Option<&'a Arc<Dir>> {
    let (_, dir) = plan.mount_dirs.iter().find(|(p, _)| p == &cwd.path)?;
    // The same handle (how `Sandbox::plan` enters an allowed dir itself).
    if Arc::ptr_eq(dir, &cwd.dir) {
        return Some(dir);
    }
    let id = |d: &Dir| crate::sys::file_id::of_dir(d).ok();
    (id(dir)? == id(&cwd.dir)?).then_some(dir)
}

/// Preopens made once per backend, by the allowed dirs' handles and modes,
/// and cloned for each call (see the module doc). A call whose cwd is below
/// an allowed dir, or whose plan has a dir without a handle, opens its own.
#[derive(Default)]
pub(super) struct Preopens {
    made: Mutex<Vec<(PreopenKey, WasiFilesystemCtx)>>,
}

impl std::fmt::Debug for Preopens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.made.lock().map_or(0, |m| m.len());
        f.debug_struct("Preopens").field("sets", &n).finish()
    }
}

/// Most sets of preopens kept (a backend serves one sandbox: one set per
/// cwd that is an allowed dir, and per mode of the cwd).
const MAX_PREOPEN_SETS: usize = 16;

/// What a set of preopens is made of: each allowed dir's handle (held, so
/// that no other dir can take its address), guest path and mode, in order;
/// and whether their file operations run inline (a preopen keeps the
/// setting it was made with, and so does every file opened through it).
struct PreopenKey(PreopenDirs, bool);

impl PreopenKey {
    fn matches(&self, list: &[Preopen<'_>], inline: bool) -> bool {
        self.1 == inline
            && self.0.len() == list.len()
            && self.0.iter().zip(list).all(|((d, g, ro), p)| {
                p.shared.is_some_and(|s| Arc::ptr_eq(d, s)) && g == p.guest && *ro == p.read_only
            })
    }
}

impl Preopens {
    /// The shared preopens of `list`, made from the allowed dirs' handles on
    /// first use; `None` when they cannot be shared: some dir is not an
    /// allowed dir's own handle (a cwd below one), or not on Linux, where a
    /// preopen is opened by its path (`preopen_path`) and a path swapped at
    /// the first call would stay for every later one.
    fn get(&self, list: &[Preopen<'_>], inline: bool) -> Result<Option<Shared>, Outcome> {
        if cfg!(not(target_os = "linux")) || list.iter().any(|p| p.shared.is_none()) {
            return Ok(None);
        }
        let mut made = self.made.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((k, fs)) = made.iter().find(|(k, _)| k.matches(list, inline)) {
            return Ok(Some(Shared {
                fs: fs.clone(),
                dirs: k.0.clone(),
            }));
        }
        let mut b = WasiCtxBuilder::new();
        b.allow_blocking_current_thread(inline);
        let mut key = Vec::with_capacity(list.len());
        for p in list {
            let Some(dir) = p.shared else {
                return Ok(None);
            };
            add(&mut b, &preopen_path(dir, p.path), p.guest, p.read_only)?;
            key.push((dir.clone(), p.guest.to_string(), p.read_only));
        }
        let fs = b.build().filesystem().clone();
        if made.len() >= MAX_PREOPEN_SETS {
            made.remove(0);
        }
        let dirs: PreopenDirs = key.into();
        made.push((PreopenKey(dirs.clone(), inline), fs.clone()));
        Ok(Some(Shared { fs, dirs }))
    }
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

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// A preopen is found by its exact name, and only when no other has it.
    #[test]
    fn a_preopen_is_named_by_exactly_one_dir() {
        let a = tempfile::tempdir().expect("a");
        let b = tempfile::tempdir().expect("b");
        let open = |p: &Path| {
            Arc::new(Dir::open_ambient_dir(p, cap_std::ambient_authority()).expect("dir"))
        };
        let id = |d: &Dir| crate::sys::file_id::of_dir(d).ok();
        let (da, db) = (open(a.path()), open(b.path()));
        let dirs: PreopenDirs = vec![
            (da.clone(), "/w".to_string(), false),
            (db.clone(), ".".to_string(), true),
        ]
        .into();
        assert_eq!(preopen_named(&dirs, b"/w").and_then(id), id(&da));
        assert_eq!(preopen_named(&dirs, b".").and_then(id), id(&db));
        for other in [&b""[..], b"/w/", b"/", b"./", b"/W"] {
            assert!(preopen_named(&dirs, other).is_none(), "{other:?}");
        }
        let twice: PreopenDirs =
            vec![(da, "/w".to_string(), false), (db, "/w".to_string(), true)].into();
        assert!(preopen_named(&twice, b"/w").is_none());
    }
}
