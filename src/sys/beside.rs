//! Starting a short-lived thread beside its starter, on another CPU (Linux).
//!
//! A thread made to work *beside* the one that starts it (the direct
//! backend's warm-up, `Sandbox::warm_up_for`) gains nothing if it waits
//! for that one's CPU. Most schedulers place a new thread on an idle CPU
//! when there is one; some do not (a VM kernel whose scheduler packs new
//! threads onto busy vCPUs left the warm-up waiting a millisecond behind
//! `toolhost run`'s main thread while the other vCPU idled, and the call
//! then made its network namespace itself). So the starter, right after the
//! thread is made, lets it run only on the starter's other CPUs; the kernel
//! moves it to one of them (not necessarily an idle one, with three CPUs or
//! more).
//!
//! The binding is never undone: the kernel keeps it as the thread's own
//! request, which no later call can take back to what a plain thread has
//! (no request, the cpuset's CPUs). So the thread must be short-lived, and
//! must not start threads that outlive it (they would inherit the binding);
//! it cannot run on its starter's CPU even when that one idles, and with
//! the other CPUs busy it starts later than a plain thread would. A starter
//! with a real-time policy starts it plainly.
//!
//! The handshake: the thread, when it starts (before `f`), either claims
//! that no binding is coming, or parks until the starter has bound it (or
//! failed to). So the starter binds a thread that is alive (not yet run, or
//! waiting at its start), never one that has exited: glibc passes the
//! thread's recorded kernel id straight to `sched_setaffinity`, and an
//! exited thread's id reads 0, which names the caller.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use rustix::thread::{CpuSet, sched_getaffinity};

/// Nothing decided yet.
const FREE: u8 = 0;
/// The starter is binding the thread.
const BINDING: u8 = 1;
/// The starter is done: the thread may go on.
const DONE: u8 = 2;
/// The thread started first: no binding.
const SKIPPED: u8 = 3;

/// How [`spawn_beside`] started its thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placement {
    /// Plainly: no other CPU to use, a starter with a real-time policy, or
    /// a kernel that would not say which CPUs the starter may use or runs
    /// on.
    Plain,
    /// The thread started before the starter could bind it: not bound.
    Skipped,
    /// Bound to the starter's other CPUs.
    Bound,
    /// The kernel refused the binding: not bound.
    Refused,
}

/// Stores DONE and wakes the thread however the binding ends (a panic
/// included): a thread that found BINDING waits for it.
struct Release<'a> {
    state: &'a AtomicU8,
    thread: &'a std::thread::Thread,
}

impl Drop for Release<'_> {
    fn drop(&mut self) {
        self.state.store(DONE, Ordering::Release);
        self.thread.unpark();
    }
}

/// Starts `f` on a thread named `name`, bound to the calling thread's
/// other CPUs where it has any; see the module's doc (`f` must be
/// short-lived and start no thread that outlives it). Fails only as
/// [`std::thread::Builder::spawn`] does.
pub(crate) fn spawn_beside<F>(name: &str, f: F) -> io::Result<Placement>
where
    F: FnOnce() + Send + 'static,
{
    let mine = sched_getaffinity(None)
        .ok()
        .filter(|_| super::time_shared());
    let state = Arc::new(AtomicU8::new(FREE));
    let seen = Arc::clone(&state);
    let handle = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            if seen
                .compare_exchange(FREE, SKIPPED, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                // Being bound: wait for the starter's one system call.
                while seen.load(Ordering::Acquire) != DONE {
                    std::thread::park();
                }
            }
            f()
        })?;
    // The CPU read after the spawn, which may have moved the starter.
    let elsewhere = mine.and_then(|set| {
        let cpu = super::current_cpu()?;
        if cpu >= CpuSet::MAX_CPU || !set.is_set(cpu) {
            return None;
        }
        let mut others = set;
        others.unset(cpu);
        (others.count() > 0).then_some(others)
    });
    let Some(others) = elsewhere else {
        return Ok(Placement::Plain);
    };
    #[cfg(test)]
    tests::hold_starter(&handle);
    if state
        .compare_exchange(FREE, BINDING, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return Ok(Placement::Skipped);
    }
    let _release = Release {
        state: &state,
        thread: handle.thread(),
    };
    Ok(if bind(&handle, &others) {
        Placement::Bound
    } else {
        Placement::Refused
    })
}

/// Lets the thread of `handle` run only on `cpus`; whether the kernel did.
fn bind(handle: &std::thread::JoinHandle<()>, cpus: &CpuSet) -> bool {
    use std::os::unix::thread::JoinHandleExt;
    // SAFETY: cpu_set_t is plain data; all zeros is the empty set.
    let mut raw: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for cpu in 0..CpuSet::MAX_CPU.min(libc::CPU_SETSIZE as usize) {
        if cpus.is_set(cpu) {
            // SAFETY: `cpu` is below CPU_SETSIZE, the set's size in CPUs.
            unsafe { libc::CPU_SET(cpu, &mut raw) };
        }
    }
    // SAFETY: the pthread_t is the live thread's: `handle` is held (not
    // joined or detached), and the thread cannot get past its start, let
    // alone exit, before `spawn_beside` stores DONE after this call (it
    // found BINDING, so it waits), so glibc's record of it holds its kernel
    // thread id (an exited thread's reads 0, which would bind the caller).
    // `raw` is a valid cpu_set_t of the size passed.
    unsafe {
        libc::pthread_setaffinity_np(
            handle.as_pthread_t(),
            std::mem::size_of::<libc::cpu_set_t>(),
            &raw,
        ) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::sync::mpsc;
    use std::time::Duration;

    thread_local! {
        /// Whether a starter on this thread waits, before its
        /// compare-and-swap, until the thread has ended.
        static HOLD: Cell<bool> = const { Cell::new(false) };
    }

    /// Holds the starters of this thread while it lives.
    struct Hold;

    impl Hold {
        fn new() -> Self {
            HOLD.with(|h| h.set(true));
            Hold
        }
    }

    impl Drop for Hold {
        fn drop(&mut self) {
            HOLD.with(|h| h.set(false));
        }
    }

    pub(super) fn hold_starter(handle: &std::thread::JoinHandle<()>) {
        if !HOLD.with(Cell::get) {
            return;
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !handle.is_finished() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        // Its closure has returned; let the kernel thread end too (its id
        // then reads 0: a starter that bound it would bind itself).
        std::thread::sleep(Duration::from_millis(20));
    }

    fn others_than(set: CpuSet, cpu: usize) -> CpuSet {
        let mut others = set;
        if cpu < CpuSet::MAX_CPU {
            others.unset(cpu);
        }
        others
    }

    /// The thread runs `f`: bound to its starter's other CPUs when the
    /// starter says so (and then on one of them), else with its starter's
    /// CPUs; on a machine with two CPUs or more the starter binds it at
    /// least once in 200 starts; the starter's own CPUs are untouched.
    #[test]
    fn a_thread_started_beside_runs_on_its_starters_other_cpus() {
        let Ok(mine) = sched_getaffinity(None) else {
            return;
        };
        let (mut bound, mut refused) = (0, 0);
        for _ in 0..200 {
            let (tx, rx) = mpsc::channel();
            let placement = spawn_beside("beside-test", move || {
                let _ = tx.send((crate::sys::current_cpu(), sched_getaffinity(None).ok()));
            })
            .expect("spawn");
            let (cpu, got) = rx
                .recv_timeout(Duration::from_secs(10))
                .expect("the thread ran");
            let got = got.expect("the thread's CPUs");
            match placement {
                Placement::Bound => {
                    bound += 1;
                    assert_eq!(got.count() + 1, mine.count(), "one CPU fewer");
                    if let Some(cpu) = cpu {
                        assert!(got.is_set(cpu), "runs where it is bound");
                    }
                    // Exactly the starter's CPUs but one.
                    let missing: Vec<usize> = (0..CpuSet::MAX_CPU)
                        .filter(|&c| mine.is_set(c) && !got.is_set(c))
                        .collect();
                    assert_eq!(missing.len(), 1);
                    assert_eq!(others_than(mine, missing[0]), got);
                }
                _ => {
                    refused += usize::from(placement == Placement::Refused);
                    assert_eq!(got, mine, "{placement:?}");
                }
            }
        }
        if mine.count() >= 2 && crate::sys::time_shared() && crate::sys::current_cpu().is_some() {
            // The starter won the handshake at least once (the kernel may
            // refuse the binding itself, under a seccomp filter say).
            assert!(bound + refused > 0, "never bound in 200 starts");
        } else {
            assert_eq!(bound, 0);
        }
        assert_eq!(sched_getaffinity(None).ok(), Some(mine));
    }

    /// A thread that has started, and ended, before its starter got to
    /// bind it is left alone: the starter binds neither it nor (through an
    /// exited thread's id, 0) itself.
    #[test]
    fn a_thread_that_ends_before_its_binding_is_left_alone() {
        let Ok(mine) = sched_getaffinity(None) else {
            return;
        };
        let _hold = Hold::new();
        for _ in 0..5 {
            let (tx, rx) = mpsc::channel();
            let placement = spawn_beside("beside-test", move || {
                let _ = tx.send(sched_getaffinity(None).ok());
            })
            .expect("spawn");
            let got = rx
                .recv_timeout(Duration::from_secs(10))
                .expect("the thread ran");
            assert_eq!(got, Some(mine));
            if mine.count() >= 2 && crate::sys::time_shared() && crate::sys::current_cpu().is_some()
            {
                assert_eq!(placement, Placement::Skipped);
            }
            assert_eq!(sched_getaffinity(None).ok(), Some(mine));
        }
    }
}
