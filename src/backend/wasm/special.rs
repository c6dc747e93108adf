//! Special files (FIFOs, sockets, devices) a guest tries to open.
//!
//! wasmtime-wasi opens a guest's file with a blocking open(2) on a thread of
//! tokio's blocking pool. On a FIFO with no writer that open waits for a
//! partner, and neither the call's timeout nor dropping the call ends it: the
//! thread stays until a writer appears, and enough of them stall every file
//! operation of the process (the contract suite's case 10 found this). So the
//! opens a guest asks for (`path_open` in preview 1, `open-at` in preview 2)
//! are shadowed, and only files, directories and symlinks are opened:
//!
//! 1. The path is stat'ed first, following symlinks as the open will, and
//!    anything else is refused with EPERM before any open.
//! 2. If another process swaps the path for a FIFO between that check and the
//!    open, the open blocks. While it runs, a watchdog (Linux) looks for a
//!    thread of this process blocked in a FIFO open of that path and
//!    interrupts it with `SIGURG`, for which a no-op handler without
//!    `SA_RESTART` is installed the first time it is needed (only if the
//!    signal still has its default disposition, which is to be ignored). The
//!    open then fails with EINTR, and the guest gets EPERM.
//! 3. What the open returned is checked again; a special file (a FIFO that got
//!    a writer meanwhile) is closed and refused.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use wasmtime_wasi::p1::types::Filetype;

/// Opens the watchdog has interrupted in this process.
pub(crate) static INTERRUPTED: AtomicU64 = AtomicU64::new(0);

/// Whether a preview-1 file type may be opened (a FIFO is `Unknown` there).
pub(crate) fn p1_allowed(t: Filetype) -> bool {
    matches!(
        t,
        Filetype::RegularFile | Filetype::Directory | Filetype::SymbolicLink
    )
}

/// Whether `path` under the directory `dir` may be opened, without opening
/// it (following a final symlink if `follow`, as the open will): `None` when
/// it cannot be stat'ed (the open then reports its own error).
pub(crate) fn host_allowed(dir: &std::fs::File, path: &str, follow: bool) -> Option<bool> {
    let follow = if follow {
        cap_primitives::fs::FollowSymlinks::Yes
    } else {
        cap_primitives::fs::FollowSymlinks::No
    };
    let t = cap_primitives::fs::stat(dir, std::path::Path::new(path), follow)
        .ok()?
        .file_type();
    Some(t.is_file() || t.is_dir() || t.is_symlink())
}

/// First check of the watchdog, and the longest wait between two: an open of
/// a file or a directory takes microseconds; only one that is still running
/// after this long is looked at.
const FIRST_LOOK: Duration = Duration::from_millis(20);
const MAX_WAIT: Duration = Duration::from_millis(200);

/// Runs `open` (the real open of `path`) and, while it has not returned,
/// interrupts any thread of this process blocked in a FIFO open of `path`.
/// Sets `fired` when it interrupted one.
pub(crate) async fn watched<F: Future>(path: &str, fired: &AtomicBool, open: F) -> F::Output {
    let open = std::pin::pin!(open);
    #[cfg(target_os = "linux")]
    {
        let mut open = open;
        let mut wait = FIRST_LOOK;
        loop {
            tokio::select! {
                r = &mut open => return r,
                _ = tokio::time::sleep(wait) => {
                    if stuck::interrupt(path) {
                        fired.store(true, Ordering::Relaxed);
                    }
                    wait = (wait * 2).min(MAX_WAIT);
                }
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (path, fired, FIRST_LOOK, MAX_WAIT);
        open.await
    }
}

/// Whether the watchdog interrupted the open.
pub(crate) fn fired(flag: &AtomicBool) -> bool {
    flag.load(Ordering::Relaxed)
}

#[cfg(target_os = "linux")]
mod stuck {
    use std::os::unix::fs::FileExt;
    use std::sync::OnceLock;

    const SIGNAL: libc::c_int = libc::SIGURG;

    extern "C" fn on_signal(_: libc::c_int) {}

    /// Installs the no-op handler once; false if the signal is taken.
    fn handler() -> bool {
        static INSTALLED: OnceLock<bool> = OnceLock::new();
        *INSTALLED.get_or_init(|| {
            // SAFETY: sigaction with valid, zero-initialised structs; the
            // handler does nothing, so it is async-signal-safe.
            unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(SIGNAL, std::ptr::null(), &mut old) != 0 {
                    return false;
                }
                let ours = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
                if old.sa_sigaction == ours {
                    return true;
                }
                if old.sa_sigaction != libc::SIG_DFL {
                    tracing::warn!(
                        "SIGURG has a handler already: a wasm guest's open of a FIFO swapped in \
                         after toolhost's check cannot be interrupted"
                    );
                    return false;
                }
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = ours;
                // No SA_RESTART: the interrupted open returns EINTR.
                sa.sa_flags = 0;
                libc::sigemptyset(&mut sa.sa_mask);
                libc::sigaction(SIGNAL, &sa, std::ptr::null_mut()) == 0
            }
        })
    }

    /// Signals every thread of this process that is blocked in a FIFO open
    /// (openat2, or openat relative to a directory fd) of `path` or of its
    /// last component. Returns whether it signalled one.
    pub(super) fn interrupt(path: &str) -> bool {
        let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
            return false;
        };
        let Ok(mem) = std::fs::File::open("/proc/self/mem") else {
            return false;
        };
        let last = path.rsplit('/').find(|c| !c.is_empty()).unwrap_or(path);
        let mut hit = false;
        for t in tasks.flatten() {
            let Some(tid) = t.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            let Ok(sc) = std::fs::read_to_string(t.path().join("syscall")) else {
                continue;
            };
            let f: Vec<&str> = sc.split_whitespace().collect();
            let hex = |i: usize| {
                f.get(i)
                    .and_then(|s| s.strip_prefix("0x"))
                    .and_then(|s| u64::from_str_radix(s, 16).ok())
            };
            let Some(nr) = f.first().and_then(|s| s.parse::<i64>().ok()) else {
                continue;
            };
            let (Some(dirfd), Some(ptr)) = (hex(1), hex(2)) else {
                continue;
            };
            let at_cwd = dirfd as u32 as i32 == libc::AT_FDCWD;
            if !(nr == libc::SYS_openat2 || (nr == libc::SYS_openat && !at_cwd)) {
                continue;
            }
            // Where the kernel shows it, the thread must be waiting for a
            // FIFO partner (no other open is interrupted).
            if let Ok(w) = std::fs::read_to_string(t.path().join("wchan")) {
                let w = w.trim();
                if !w.is_empty() && w != "0" && w != "wait_for_partner" {
                    continue;
                }
            }
            let mut buf = vec![0u8; path.len() + 1];
            let Ok(n) = mem.read_at(&mut buf, ptr) else {
                continue;
            };
            let named =
                |p: &str| n > p.len() && &buf[..p.len()] == p.as_bytes() && buf[p.len()] == 0;
            if !(named(path) || named(last)) {
                continue;
            }
            if !handler() {
                return false;
            }
            // SAFETY: tgkill to a thread of this process with a signal whose
            // handler is installed above.
            let rc = unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, SIGNAL) };
            if rc == 0 {
                hit = true;
                super::INTERRUPTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        hit
    }
}
