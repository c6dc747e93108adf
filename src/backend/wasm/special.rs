//! Special files (FIFOs, sockets, devices) a guest tries to open.
//!
//! wasmtime-wasi opens a guest's file with a blocking open(2) on a thread of
//! tokio's blocking pool, both for `path_open`/`open-at` and inside
//! `path_filestat_set_times`/`set-times-at`. On a FIFO with no partner that
//! open waits, and neither the call's timeout nor dropping the call ends it:
//! the thread stays until a partner appears, and enough of them stall every
//! file operation of the process (the contract suite's case 10 found this).
//! wasmtime-wasi has no hook to add `O_NONBLOCK`, so those four functions are
//! shadowed, and a guest never holds anything but a file or a directory:
//!
//! 1. While the real call runs, a watchdog (Linux) looks, once it has run for
//!    20 ms, for threads of this process waiting for a FIFO partner in an
//!    open (`/proc/self/task/*/wchan`, and the syscall number where
//!    `/proc/self/task/*/syscall` is readable) and interrupts them with
//!    `SIGURG`, whose no-op handler has no `SA_RESTART`: the open fails with
//!    EINTR, and the guest gets EPERM. The wait is found by the kernel's
//!    state, not by path, so removing or renaming the FIFO meanwhile does not
//!    hide it. The handler is installed only over `SIGURG`'s default
//!    disposition (ignored), and the mechanism is used only after a self-test
//!    (a thread of ours blocked on a private FIFO is seen and interrupted).
//! 2. Where that watchdog is unavailable (other platforms, `SIGURG` taken, the
//!    self-test failed), the path is stat'ed first, following symlinks as the
//!    open will, and a special file is refused with EPERM before any open. A
//!    FIFO swapped in between that check and the open still blocks there.
//! 3. What `path_open`/`open-at` returned is checked: a special file (a FIFO
//!    with a writer does not block; a socket or a device node opens at once)
//!    is closed and refused with EPERM.
//!
//! Every check runs on the blocking pool like the call itself: a hung mount
//! holds a blocking-pool thread, never an executor thread.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use wasmtime_wasi::p1::types::Filetype;
use wasmtime_wasi::p2::bindings::filesystem::types::DescriptorType;

/// Opens the watchdog has interrupted in this process.
pub(crate) static INTERRUPTED: AtomicU64 = AtomicU64::new(0);

/// Set by tests: check paths before opening them even where the watchdog
/// works (how the fallback is tested on Linux).
pub(crate) static FORCE_PRECHECK: AtomicBool = AtomicBool::new(false);

/// Whether a preview-1 file type may be held by a guest (a FIFO is
/// `Unknown` there).
pub(crate) fn p1_allowed(t: Filetype) -> bool {
    matches!(t, Filetype::RegularFile | Filetype::Directory)
}

/// Whether a preview-2 descriptor type may be held by a guest.
pub(crate) fn p2_allowed(t: DescriptorType) -> bool {
    matches!(t, DescriptorType::RegularFile | DescriptorType::Directory)
}

/// Whether paths must be stat'ed before they are opened (step 2): where the
/// watchdog cannot end a blocked open.
pub(crate) fn precheck_needed() -> bool {
    FORCE_PRECHECK.load(Ordering::Relaxed) || !watchdog::available()
}

/// Whether the watchdog can end a guest's open blocked on a FIFO here (for
/// `toolhost check`; runs the self-test once).
pub(crate) fn watchdog_available() -> bool {
    watchdog::available()
}

/// First look of the watchdog, and the longest wait between two: an open of
/// a file takes microseconds; only a call still running after this long is
/// looked at.
const FIRST_LOOK: Duration = Duration::from_millis(20);
const MAX_WAIT: Duration = Duration::from_millis(200);

/// Runs `call` (a real open, or a set-times that opens) and, while it has not
/// returned, interrupts the threads of this process blocked in a FIFO open.
/// Sets `fired` when it interrupted one.
pub(crate) async fn watched<F: Future>(fired: &AtomicBool, call: F) -> F::Output {
    let call = std::pin::pin!(call);
    #[cfg(target_os = "linux")]
    {
        let mut call = call;
        let mut wait = FIRST_LOOK;
        loop {
            tokio::select! {
                r = &mut call => return r,
                _ = tokio::time::sleep(wait) => {
                    if watchdog::available() && watchdog::interrupt() {
                        fired.store(true, Ordering::Relaxed);
                    }
                    wait = (wait * 2).min(MAX_WAIT);
                }
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (fired, FIRST_LOOK, MAX_WAIT);
        call.await
    }
}

/// Whether the watchdog interrupted the call.
pub(crate) fn fired(flag: &AtomicBool) -> bool {
    flag.load(Ordering::Relaxed)
}

#[cfg(not(target_os = "linux"))]
mod watchdog {
    pub(super) fn available() -> bool {
        false
    }
}

#[cfg(target_os = "linux")]
mod watchdog {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    use std::sync::OnceLock;
    use std::sync::atomic::Ordering;
    use std::time::{Duration, Instant};

    const SIGNAL: libc::c_int = libc::SIGURG;

    extern "C" fn on_signal(_: libc::c_int) {}

    fn ours() -> libc::sighandler_t {
        on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t
    }

    /// Whether our handler is in place, installing it over the default
    /// disposition. Checked before every signal: if something replaced it
    /// since, nothing is sent (an unhandled SIGURG would just be ignored, and
    /// an `SA_RESTART` handler would restart the open).
    fn handler() -> bool {
        // SAFETY: sigaction with valid, zero-initialised structs; the handler
        // does nothing, so it is async-signal-safe.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(SIGNAL, std::ptr::null(), &mut old) != 0 {
                return false;
            }
            if old.sa_sigaction == ours() {
                return old.sa_flags & libc::SA_RESTART == 0;
            }
            if old.sa_sigaction != libc::SIG_DFL {
                return false;
            }
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = ours();
            // No SA_RESTART: the interrupted open returns EINTR.
            sa.sa_flags = 0;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(SIGNAL, &sa, std::ptr::null_mut()) == 0
        }
    }

    /// The watchdog can end a blocked open here: the self-test passed once,
    /// and the handler is still ours.
    pub(super) fn available() -> bool {
        static SELF_TEST: OnceLock<bool> = OnceLock::new();
        let passed = *SELF_TEST.get_or_init(|| {
            let ok = self_test();
            if !ok {
                tracing::warn!(
                    "wasm: the FIFO-open watchdog is unavailable here (SIGURG has a handler, or \
                     /proc does not show a thread waiting on a FIFO); guest opens are checked \
                     first instead, and a FIFO swapped in after that check can hold a thread"
                );
            }
            ok
        });
        passed && handler()
    }

    /// What the kernel shows for a thread waiting for a FIFO partner.
    fn waiting_on_fifo(wchan: &str) -> bool {
        matches!(wchan.trim(), "wait_for_partner" | "fifo_open")
    }

    /// Signals every thread of this process that waits for a FIFO partner in
    /// an open (where its syscall is readable; a non-dumpable process that is
    /// not root cannot read it, and then the wait alone decides). Returns
    /// whether it signalled one.
    pub(super) fn interrupt() -> bool {
        let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
            return false;
        };
        let mut hit = false;
        for t in tasks.flatten() {
            let Some(tid) = t.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            let Ok(w) = std::fs::read_to_string(t.path().join("wchan")) else {
                continue;
            };
            if !waiting_on_fifo(&w) {
                continue;
            }
            if let Ok(sc) = std::fs::read_to_string(t.path().join("syscall"))
                && let Some(nr) = sc
                    .split_whitespace()
                    .next()
                    .and_then(|s| s.parse::<i64>().ok())
                && !is_open(nr)
            {
                continue;
            }
            if send(tid) {
                hit = true;
                super::INTERRUPTED.fetch_add(1, Ordering::Relaxed);
            }
        }
        hit
    }

    fn is_open(nr: i64) -> bool {
        #[cfg(target_arch = "x86_64")]
        if nr == libc::SYS_open {
            return true;
        }
        nr == libc::SYS_openat || nr == libc::SYS_openat2
    }

    fn send(tid: i32) -> bool {
        // SAFETY: tgkill to a thread of this process, with a signal whose
        // handler was installed (by `available`) and does nothing.
        unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, SIGNAL) == 0 }
    }

    /// A thread of ours opens a FIFO in a private directory, with no writer:
    /// the test passes if the kernel shows it waiting and our signal ends its
    /// open with EINTR. The FIFO is released by opening its other end if
    /// anything fails.
    fn self_test() -> bool {
        if !handler() {
            return false;
        }
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "toolhost-fifo-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        if std::fs::create_dir(&dir).is_err() {
            return false;
        }
        let fifo = dir.join("fifo");
        let ok = match CString::new(fifo.as_os_str().as_bytes()) {
            // SAFETY: mkfifo with a valid C string.
            Ok(c) if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } == 0 => run_test(&c),
            _ => false,
        };
        let _ = std::fs::remove_file(&fifo);
        let _ = std::fs::remove_dir(&dir);
        ok
    }

    fn run_test(fifo: &CString) -> bool {
        let (tx, rx) = std::sync::mpsc::channel::<(i32, i32)>();
        let path = fifo.clone();
        let opener = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() };
            let _ = tx.send((tid, 0));
            // SAFETY: open with a valid C string; a plain open(2), which
            // returns EINTR (std's File::open would retry).
            let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
            let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            if fd >= 0 {
                // SAFETY: closing the fd just opened.
                unsafe { libc::close(fd) };
            }
            let _ = tx.send((fd, errno));
        });
        let release = || {
            // SAFETY: open with a valid C string; O_RDWR on a FIFO never
            // blocks on Linux and wakes the waiting reader.
            let fd = unsafe {
                libc::open(
                    fifo.as_ptr(),
                    libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
                )
            };
            if fd >= 0 {
                // SAFETY: closing the fd just opened.
                unsafe { libc::close(fd) };
            }
        };
        let Ok((tid, _)) = rx.recv_timeout(Duration::from_secs(2)) else {
            return false;
        };
        let wchan = format!("/proc/self/task/{tid}/wchan");
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut seen = false;
        while Instant::now() < deadline {
            if std::fs::read_to_string(&wchan).is_ok_and(|w| waiting_on_fifo(&w)) {
                seen = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let result = if seen && send(tid) {
            rx.recv_timeout(Duration::from_secs(2)).ok()
        } else {
            None
        };
        if result.is_none() {
            release();
        }
        let _ = opener.join();
        matches!(result, Some((fd, errno)) if fd < 0 && errno == libc::EINTR)
    }
}
