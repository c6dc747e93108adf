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
//! 1. The path is stat'ed first (on the blocking pool), following symlinks as
//!    the open will, and a FIFO, socket or device is refused with EPERM
//!    before any open.
//! 2. Another process can swap the path for a FIFO between that check and the
//!    open. While the real call runs, and for a while after it is dropped
//!    unfinished (its timeout, a cancel), a watchdog (Linux) looks for
//!    threads of this process waiting for a FIFO partner in an open
//!    (`/proc/self/task/*/wchan`, and the syscall number where
//!    `/proc/self/task/*/syscall` is readable) and interrupts them with
//!    `SIGURG`, whose no-op handler has no `SA_RESTART`: the open fails with
//!    EINTR, which the guest gets as EPERM. The wait is found by the kernel's
//!    state, not by path, so renaming or removing the FIFO does not hide it.
//!    The handler is installed only over `SIGURG`'s default disposition
//!    (ignored), and the watchdog acts only after a self-test passed (a thread
//!    of ours blocked on a private FIFO is seen and interrupted).
//! 3. What `path_open`/`open-at` returned is checked: a special file (a FIFO
//!    that got a writer meanwhile does not block) is closed and refused.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use wasmtime_wasi::p1::types::Filetype;
use wasmtime_wasi::p2::bindings::filesystem::types::DescriptorType;

/// Threads the watchdog has interrupted in this process.
pub(crate) static INTERRUPTED: AtomicU64 = AtomicU64::new(0);

/// Special files the check before an open refused by toolhost's own lookup
/// on a shared preopen's directory ([`found_at`]).
pub(crate) static REFUSED_BY_PREOPEN: AtomicU64 = AtomicU64::new(0);

/// Set by tests: skip the check before opening, so that a guest's open of a
/// FIFO reaches the real open and the watchdog (how it is tested without a
/// race).
pub(crate) static SKIP_PRECHECK: AtomicBool = AtomicBool::new(false);

/// Whether a preview-1 file type may be held by a guest (a FIFO is
/// `Unknown` there).
pub(crate) fn p1_allowed(t: Filetype) -> bool {
    matches!(t, Filetype::RegularFile | Filetype::Directory)
}

/// Whether a preview-2 descriptor type may be held by a guest.
pub(crate) fn p2_allowed(t: DescriptorType) -> bool {
    matches!(t, DescriptorType::RegularFile | DescriptorType::Directory)
}

/// Whether the path is stat'ed before the call (step 1).
pub(crate) fn precheck() -> bool {
    !SKIP_PRECHECK.load(Ordering::Relaxed)
}

/// What a path under a preopen is, for the check before an open (step 1),
/// looked up by toolhost itself on the preopen's own directory ([`found_at`]).
#[cfg(target_os = "linux")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// A file, a directory or (not followed) a symlink: the open may go on.
    Allowed,
    /// A FIFO, socket or device: refused before any open.
    Special,
    /// Nothing there (`ENOENT`): the open goes on and reports its own error.
    Missing,
    /// Anything else (an escape refused, `openat2` unavailable or refused,
    /// a rename racing the lookup): wasmtime-wasi's own lookup decides.
    Unknown,
}

/// What `path` names under `dir`, resolved as wasmtime-wasi's own stat
/// resolves it (`openat2` beneath `dir`, no magic links, the last
/// component followed when `follow`), where wasmtime-wasi's preview-1
/// `path_filestat_get` makes two lookups (a stat, then another for the
/// inode's hash). A path that is one name is a plain `fstatat` of it,
/// unfollowed; only a symlink there to follow is then resolved through
/// `openat2`. Every outcome but a type or `ENOENT` is [`Found::Unknown`].
#[cfg(target_os = "linux")]
pub(crate) fn found_at(dir: &cap_std::fs::Dir, path: &str, follow: bool) -> Found {
    use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
    use rustix::io::Errno;
    let single = {
        let mut c = std::path::Path::new(path).components();
        match (c.next(), c.next()) {
            // Exactly the name: not `name/` nor `name/.`, which a
            // lookup of `name` alone would not answer as the open does.
            (Some(std::path::Component::Normal(one)), None) if one == path => Some(one),
            _ => None,
        }
    };
    let resolved = || {
        let mut flags = OFlags::PATH | OFlags::CLOEXEC;
        if !follow {
            flags |= OFlags::NOFOLLOW;
        }
        let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
        rustix::fs::openat2(dir, path, flags, Mode::empty(), resolve)
            .and_then(|fd| rustix::fs::fstat(&fd))
    };
    let stat = match single {
        // One name, looked at where it is: what it is, unless it is a
        // symlink to follow (then resolved beneath `dir`, as below). A
        // name with nothing there is missing followed or not.
        Some(one) => match rustix::fs::statat(dir, one, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if follow && FileType::from_raw_mode(st.st_mode) == FileType::Symlink => {
                resolved()
            }
            r => r,
        },
        None => resolved(),
    };
    match stat {
        Ok(st) => match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile | FileType::Directory | FileType::Symlink => Found::Allowed,
            _ => Found::Special,
        },
        Err(Errno::NOENT) => Found::Missing,
        Err(_) => Found::Unknown,
    }
}

/// Whether the watchdog can end a guest's open blocked on a FIFO here (for
/// `toolhost check`: waits for the self-test).
pub(crate) fn watchdog_available() -> bool {
    watchdog::wait_for_self_test();
    watchdog::available()
}

/// Whether a guest's file operations may run on the thread that polls its
/// call (wasmtime-wasi's `allow_blocking_current_thread`) instead of each
/// making a round trip to tokio's blocking pool (tens of microseconds of
/// thread hand-offs per operation).
///
/// This is the FIFO part of that decision (`inline_io` makes the rest). The
/// one open of a file kind that could wait without bound, a FIFO swapped
/// in after the check, is ended by the watchdog's own thread whichever
/// thread it blocks; so this holds only once that thread runs and its
/// self-test passed (Linux; the thread is started here if it is not
/// running). Until then, and elsewhere, each operation goes to the pool.
pub(crate) fn inline_ok() -> bool {
    watchdog::ready()
}

/// Waits (a few ms) for a self-test that has started, so that a process
/// about to exit does not leave its private FIFO dir behind.
pub(crate) fn settle() {
    watchdog::wait_if_started();
}

/// Whether [`settle`] would wait: a self-test started and not ended.
pub(crate) fn unsettled() -> bool {
    watchdog::running()
}

/// First look of the watchdog, and the longest wait between two: an open of
/// a file takes microseconds; only a call still running after this long is
/// looked at.
const FIRST_LOOK: Duration = Duration::from_millis(20);
const MAX_WAIT: Duration = Duration::from_millis(200);
/// How long the watchdog goes on looking after a call was dropped unfinished:
/// a blocking task that had not started is cancelled with the call, one that
/// had is in its open within microseconds.
const AFTER_DROP: Duration = Duration::from_secs(2);

/// The result of a watched call, and whether the watchdog interrupted a
/// thread meanwhile (then an EINTR is the refusal of a special file).
pub(crate) struct Watched<T> {
    pub(crate) result: T,
    pub(crate) interrupted: bool,
}

/// Runs `call` (a real open, or a set-times that opens) and, while it has not
/// returned, has the watchdog's thread interrupt the threads of this process
/// blocked in a FIFO open; if it is dropped unfinished, the watchdog goes on
/// doing so for a while. The watchdog runs on a thread of its own, so it
/// would also end an open that blocks the thread polling `call`.
pub(crate) async fn watched<F: Future>(call: F) -> Watched<F::Output> {
    let before = INTERRUPTED.load(Ordering::SeqCst);
    #[cfg(target_os = "linux")]
    let result = {
        let watch = watchdog::watch();
        let result = if watch.has_thread() {
            call.await
        } else {
            // No watchdog thread (it could not be spawned): look from this
            // future, as long as it is polled.
            let mut call = std::pin::pin!(call);
            let mut wait = FIRST_LOOK;
            loop {
                tokio::select! {
                    r = &mut call => break r,
                    _ = tokio::time::sleep(wait) => {
                        watchdog::interrupt();
                        wait = (wait * 2).min(MAX_WAIT);
                    }
                }
            }
        };
        watch.finish();
        result
    };
    #[cfg(not(target_os = "linux"))]
    let result = {
        let _ = (FIRST_LOOK, MAX_WAIT, AFTER_DROP);
        call.await
    };
    Watched {
        result,
        interrupted: INTERRUPTED.load(Ordering::SeqCst) != before,
    }
}

#[cfg(not(target_os = "linux"))]
mod watchdog {
    pub(super) fn available() -> bool {
        false
    }
    pub(super) fn wait_for_self_test() {}
    pub(super) fn wait_if_started() {}
    pub(super) fn running() -> bool {
        false
    }
    pub(super) fn ready() -> bool {
        false
    }
}

#[cfg(target_os = "linux")]
mod watchdog {
    use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
    use std::sync::{Mutex, Once, OnceLock};
    use std::time::{Duration, Instant};

    use crate::sys::fifo_signal::{handler_installed as handler, signal_thread};

    const UNKNOWN: u8 = 0;
    const PASSED: u8 = 1;
    const FAILED: u8 = 2;
    static SELF_TEST: AtomicU8 = AtomicU8::new(UNKNOWN);
    static STARTED: Once = Once::new();

    /// Starts the self-test once, on a thread of its own (it blocks a few
    /// milliseconds); the watchdog acts once it has passed.
    pub(super) fn start_self_test() {
        STARTED.call_once(|| {
            let spawned = std::thread::Builder::new()
                .name("toolhost-fifo-selftest".into())
                .spawn(|| {
                    let ok = self_test();
                    if !ok {
                        tracing::warn!(
                            "wasm: the FIFO-open watchdog is unavailable here (SIGURG is handled or \
                             ignored by the program, no private FIFO could be made, or /proc does \
                             not show a thread waiting on one); a FIFO swapped in after the check \
                             of a guest's path can hold a thread until a partner appears"
                        );
                    }
                    SELF_TEST.store(if ok { PASSED } else { FAILED }, Ordering::Release);
                });
            if spawned.is_err() {
                SELF_TEST.store(FAILED, Ordering::Release);
            }
        });
    }

    pub(super) fn wait_if_started() {
        if STARTED.is_completed() {
            wait_for_self_test();
        }
    }

    /// A self-test started and has not ended (its result is stored once
    /// its FIFO dir is gone).
    pub(super) fn running() -> bool {
        STARTED.is_completed() && SELF_TEST.load(Ordering::Acquire) == UNKNOWN
    }

    pub(super) fn wait_for_self_test() {
        start_self_test();
        let deadline = Instant::now() + Duration::from_secs(5);
        while SELF_TEST.load(Ordering::Acquire) == UNKNOWN && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// The self-test passed and the handler is still ours.
    pub(super) fn available() -> bool {
        SELF_TEST.load(Ordering::Acquire) == PASSED && handler()
    }

    /// The self-test passed and the watchdog's thread runs (started here if
    /// it is not yet; not woken). Whether the handler is still ours is
    /// checked before each signal (`interrupt`), not here: one system call
    /// less per call, and a call that moved to a task of its own
    /// (`inline_io`) keeps its timeout even if an open there is never
    /// interrupted.
    pub(super) fn ready() -> bool {
        if SELF_TEST.load(Ordering::Acquire) != PASSED {
            return false;
        }
        let mut thread = THREAD.lock().unwrap_or_else(|p| p.into_inner());
        if thread.is_none() {
            spawn(&mut thread);
        }
        thread.is_some()
    }

    /// What the kernel shows for a thread waiting for a FIFO partner.
    fn waiting_on_fifo(wchan: &str) -> bool {
        matches!(wchan.trim(), "wait_for_partner" | "fifo_open")
    }

    /// Signals every thread of this process that waits for a FIFO partner in
    /// an open (where its syscall is readable; a non-dumpable process that is
    /// not root cannot read it, and then the wait alone decides), if the
    /// watchdog is available.
    pub(super) fn interrupt() {
        if !available() {
            return;
        }
        let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
            return;
        };
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
            // Counted before the signal: a call that sees its open fail with
            // EINTR must also see the count changed (see `watched`).
            super::INTERRUPTED.fetch_add(1, Ordering::SeqCst);
            if !send(tid) {
                super::INTERRUPTED.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }

    fn is_open(nr: i64) -> bool {
        #[cfg(target_arch = "x86_64")]
        if nr == libc::SYS_open {
            return true;
        }
        nr == libc::SYS_openat || nr == libc::SYS_openat2
    }

    fn send(tid: i32) -> bool {
        signal_thread(tid)
    }

    /// Until when the watchdog looks after calls dropped unfinished, in ms
    /// since `EPOCH`; when it was last asked to watch; the opens being
    /// watched (an id and when each started).
    static SWEEP_UNTIL: AtomicU64 = AtomicU64::new(0);
    static LAST_USE: AtomicU64 = AtomicU64::new(0);
    static IN_FLIGHT: Mutex<Vec<(u64, u64)>> = Mutex::new(Vec::new());
    static NEXT_ID: AtomicU64 = AtomicU64::new(0);
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    /// The watchdog's thread (`None` until one could be spawned: a failed
    /// spawn is tried again at the next request, and logged once).
    static THREAD: Mutex<Option<std::thread::Thread>> = Mutex::new(None);
    static SPAWN_FAILED: AtomicBool = AtomicBool::new(false);
    /// How long the thread stays awake after its last request.
    const IDLE_MS: u64 = 1000;

    fn now_ms() -> u64 {
        EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64
    }

    /// One open being watched: deregistered when dropped, and if it had not
    /// returned, the watchdog goes on looking for `AFTER_DROP`.
    pub(super) struct Watch {
        id: u64,
        finished: bool,
        thread: bool,
    }

    impl Watch {
        pub(super) fn finish(mut self) {
            self.finished = true;
        }

        /// Whether the watchdog's thread runs (else the caller looks).
        pub(super) fn has_thread(&self) -> bool {
            self.thread
        }
    }

    impl Drop for Watch {
        fn drop(&mut self) {
            {
                let mut f = IN_FLIGHT.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(i) = f.iter().position(|(id, _)| *id == self.id) {
                    f.swap_remove(i);
                }
            }
            if !self.finished {
                sweep_for(super::AFTER_DROP);
            }
        }
    }

    /// Starts watching one open (and the self-test, once).
    pub(super) fn watch() -> Watch {
        start_self_test();
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let now = now_ms();
        IN_FLIGHT
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((id, now));
        LAST_USE.fetch_max(now, Ordering::AcqRel);
        let thread = wake();
        Watch {
            id,
            finished: false,
            thread,
        }
    }

    /// Looks for blocked FIFO opens every 20 ms for `d` from now.
    pub(super) fn sweep_for(d: Duration) {
        let until = now_ms() + d.as_millis() as u64;
        SWEEP_UNTIL.fetch_max(until, Ordering::AcqRel);
        LAST_USE.fetch_max(until, Ordering::AcqRel);
        wake();
    }

    /// Starts the watchdog's thread, or wakes it; whether it runs. `unpark` is an atomic swap
    /// that makes a system call only when the thread is parked; unparked
    /// every time, the thread cannot miss a request made as it parks.
    fn wake() -> bool {
        let mut thread = THREAD.lock().unwrap_or_else(|p| p.into_inner());
        match thread.as_ref() {
            Some(t) => t.unpark(),
            None => spawn(&mut thread),
        }
        thread.is_some()
    }

    /// Starts the watchdog's thread into `slot` (left `None` if it cannot).
    fn spawn(slot: &mut Option<std::thread::Thread>) {
        *slot = std::thread::Builder::new()
            .name("toolhost-fifo-watch".into())
            .spawn(run)
            .ok()
            .map(|h| h.thread().clone());
        if slot.is_none() && !SPAWN_FAILED.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "wasm: the FIFO-open watchdog's thread could not start; each open is \
                 watched from its own call until it can (tried again at each open)"
            );
        }
    }

    /// Whether the watchdog has something to look at now: a call dropped
    /// unfinished a short while ago, or an open running for `FIRST_LOOK`.
    fn due(now: u64) -> bool {
        if now < SWEEP_UNTIL.load(Ordering::Acquire) {
            return true;
        }
        let first = super::FIRST_LOOK.as_millis() as u64;
        IN_FLIGHT
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .any(|(_, start)| now.saturating_sub(*start) >= first)
    }

    /// Whether it may park: nothing watched, and nothing asked for a while.
    fn idle(now: u64) -> bool {
        IN_FLIGHT
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
            && now >= SWEEP_UNTIL.load(Ordering::Acquire)
            && now >= LAST_USE.load(Ordering::Acquire) + IDLE_MS
    }

    /// The watchdog's thread: every `FIRST_LOOK` while anything is due
    /// (backing off to `MAX_WAIT` until a new open is registered), parked
    /// when idle.
    fn run() {
        let mut wait = super::FIRST_LOOK;
        let mut seen = NEXT_ID.load(Ordering::Acquire);
        loop {
            std::thread::sleep(wait);
            let now = now_ms();
            // A new open since the last look starts the backoff again.
            let newest = NEXT_ID.load(Ordering::Acquire);
            if newest != seen {
                seen = newest;
                wait = super::FIRST_LOOK;
            }
            if due(now) {
                interrupt();
                wait = (wait * 2).min(super::MAX_WAIT);
                continue;
            }
            wait = super::FIRST_LOOK;
            // Every request unparks the thread (a token when it is not
            // parked yet), so one made after this check is not missed.
            if idle(now) {
                std::thread::park();
            }
        }
    }

    /// A thread of ours opens a FIFO in a private directory, with no writer:
    /// the test passes if the kernel shows it waiting and our signal ends its
    /// open with EINTR.
    fn self_test() -> bool {
        if !handler() {
            return false;
        }
        // In toolhost's own cache dir (out of every writable allowed dir, see
        // `state_dirs`), or the temp dir when there is none.
        let base = crate::state_dirs::cache_base()
            .filter(|d| crate::sys::private_dir(d).is_ok())
            .unwrap_or_else(std::env::temp_dir);
        let Some(dir) = private_temp_dir(&base) else {
            return false;
        };
        let fifo = dir.join("fifo");
        let made = rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        );
        let ok = made.is_ok() && run_test(fifo.clone());
        let _ = std::fs::remove_file(&fifo);
        let _ = std::fs::remove_dir(&dir);
        ok
    }

    /// A new dir in `base`, mode 0700, with a name no one else has (as
    /// mkdtemp makes).
    fn private_temp_dir(base: &std::path::Path) -> Option<std::path::PathBuf> {
        use std::hash::{BuildHasher, RandomState};
        use std::os::unix::fs::DirBuilderExt;
        for attempt in 0..16u32 {
            let n = RandomState::new().hash_one((std::process::id(), attempt));
            let dir = base.join(format!("fifo-selftest-{n:016x}"));
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => return Some(dir),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(_) => return None,
            }
        }
        None
    }

    fn run_test(fifo: std::path::PathBuf) -> bool {
        use rustix::fs::{Mode, OFlags};
        let (tx, rx) = std::sync::mpsc::channel::<(i32, i32)>();
        let path = fifo.clone();
        let opener = std::thread::Builder::new()
            .name("toolhost-fifo-selftest-open".into())
            .spawn(move || {
                let tid = rustix::thread::gettid().as_raw_nonzero().get();
                let _ = tx.send((tid, 0));
                // A plain open(2), which returns EINTR (std's File::open
                // would retry); the fd, if any, closes at once.
                let opened =
                    rustix::fs::open(&path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty());
                let _ = tx.send(match opened {
                    Ok(_fd) => (0, 0),
                    Err(e) => (-1, e.raw_os_error()),
                });
            });
        if opener.is_err() {
            return false;
        }
        let Ok((tid, _)) = rx.recv_timeout(Duration::from_millis(500)) else {
            return false;
        };
        let wchan = format!("/proc/self/task/{tid}/wchan");
        let deadline = Instant::now() + Duration::from_millis(500);
        let mut seen = false;
        while Instant::now() < deadline {
            if std::fs::read_to_string(&wchan).is_ok_and(|w| waiting_on_fifo(&w)) {
                seen = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let result = if seen && send(tid) {
            rx.recv_timeout(Duration::from_millis(500)).ok()
        } else {
            None
        };
        if result.is_none() {
            // Release the opener: with a reader and writer of our own open,
            // its open returns (or does not block, if it had not started).
            // The fd is closed once it has reported, else left open: a
            // thread stuck for good is worse than one fd. O_RDWR on a FIFO
            // never blocks on Linux.
            let flags = OFlags::RDWR | OFlags::NONBLOCK | OFlags::CLOEXEC;
            if let Ok(fd) = rustix::fs::open(&fifo, flags, Mode::empty())
                && rx.recv_timeout(Duration::from_millis(500)).is_err()
            {
                std::mem::forget(fd);
            }
        }
        matches!(result, Some((fd, errno)) if fd < 0 && errno == libc::EINTR)
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    fn mkfifo(p: &std::path::Path) {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            p,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .expect("mkfifo");
    }

    /// toolhost's own lookup for the check before an open: a FIFO, direct
    /// or behind a followed symlink (also through a subdir), a socket and a
    /// device are special; a file, a dir and an unfollowed symlink are not;
    /// nothing there is missing; a path that leaves the dir (by `..`, an
    /// absolute path or an absolute symlink) is left to wasmtime-wasi's own
    /// lookup. Nothing is opened but by `O_PATH`: the FIFO has no reader,
    /// so an open of it would not return.
    #[test]
    fn a_path_under_a_preopen_is_looked_up_once_and_beneath_it() {
        let t = tempfile::tempdir().expect("tempdir");
        let root = t.path();
        std::fs::create_dir(root.join("sub")).expect("sub");
        mkfifo(&root.join("fifo"));
        mkfifo(&root.join("sub/fifo"));
        std::fs::write(root.join("plain"), "x").expect("plain");
        std::os::unix::fs::symlink("fifo", root.join("to-fifo")).expect("link");
        std::os::unix::fs::symlink("../fifo", root.join("sub/up-fifo")).expect("link");
        std::os::unix::fs::symlink("/dev/null", root.join("abs")).expect("link");
        std::os::unix::fs::symlink("none", root.join("dangling")).expect("link");
        std::os::unix::fs::symlink("sub", root.join("to-sub")).expect("link");
        std::os::unix::fs::symlink("sock", root.join("to-sock")).expect("link");
        std::os::unix::fs::symlink("../outside", root.join("out")).expect("link");
        let _sock = std::os::unix::net::UnixListener::bind(root.join("sock")).expect("sock");
        let dir = cap_std::fs::Dir::open_ambient_dir(root, cap_std::ambient_authority())
            .expect("open dir");
        let cases: &[(&str, bool, Found)] = &[
            ("fifo", true, Found::Special),
            ("fifo", false, Found::Special),
            ("sub/fifo", true, Found::Special),
            ("./sub/../fifo", true, Found::Special),
            ("to-fifo", true, Found::Special),
            ("to-fifo", false, Found::Allowed),
            ("sub/up-fifo", true, Found::Special),
            ("sub/up-fifo", false, Found::Allowed),
            ("sock", true, Found::Special),
            ("plain", true, Found::Allowed),
            ("plain", false, Found::Allowed),
            ("sub", true, Found::Allowed),
            ("sub/", true, Found::Allowed),
            ("fifo/", true, Found::Unknown),
            ("none", true, Found::Missing),
            ("sub/none", false, Found::Missing),
            ("../x", true, Found::Unknown),
            ("sub/../../x", false, Found::Unknown),
            ("/dev/null", true, Found::Unknown),
            ("abs", true, Found::Unknown),
            ("abs", false, Found::Allowed),
            // One name, followed: a symlink there is resolved beneath the
            // dir, whatever it points to.
            ("dangling", true, Found::Missing),
            ("dangling", false, Found::Allowed),
            ("to-sub", true, Found::Allowed),
            ("to-sock", true, Found::Special),
            ("out", true, Found::Unknown),
            ("out", false, Found::Allowed),
            ("plain/", true, Found::Unknown),
            ("sub/.", true, Found::Allowed),
        ];
        for (path, follow, want) in cases {
            assert_eq!(
                found_at(&dir, path, *follow),
                *want,
                "{path} follow={follow}"
            );
        }
        // A device: /dev's own null, by a handle on /dev.
        let dev =
            cap_std::fs::Dir::open_ambient_dir("/dev", cap_std::ambient_authority()).expect("/dev");
        assert_eq!(found_at(&dev, "null", true), Found::Special);
        assert_eq!(found_at(&dev, "null", false), Found::Special);
    }
}
