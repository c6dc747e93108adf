//! Starting a thread on another CPU than its starter's (Linux).
//!
//! A thread made to work *beside* the one that starts it (the direct
//! backend's warm-up, `Sandbox::warm_up_for`) gains nothing if it waits
//! for that one's CPU. Most schedulers place a new thread on an idle CPU
//! when there is one; some do not (a VM kernel whose scheduler packs new
//! threads onto busy vCPUs left the warm-up waiting a millisecond behind
//! `toolhost run`'s main thread while the other vCPU idled, and the call
//! then made its network namespace itself). So the new thread is let run
//! only on the starter's other CPUs until it has started, and then given
//! back every CPU its starter may use: it and the threads it starts keep
//! the starter's affinity, as if it had been started plainly.
//!
//! The handshake: the thread, at its first instruction, either claims that
//! no binding is coming, or waits until the starter has bound it. So the
//! starter binds a thread that is alive (not yet run, or waiting at its
//! start), never one that has exited, whose kernel thread id would be gone.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use rustix::thread::{CpuSet, sched_getaffinity, sched_getcpu, sched_setaffinity};

/// Nothing decided yet.
const FREE: u8 = 0;
/// The starter is binding the thread.
const BINDING: u8 = 1;
/// The starter is done with the thread (bound, or the kernel refused).
const DONE: u8 = 2;
/// The thread started first: no binding.
const SKIPPED: u8 = 3;

/// Starts `f` on a thread named `name`, on another CPU than the calling
/// thread's if it may use another; see the module's doc. Fails only as
/// [`std::thread::Builder::spawn`] does.
pub(crate) fn spawn_beside<F>(name: &str, f: F) -> io::Result<()>
where
    F: FnOnce() + Send + 'static,
{
    let mine = sched_getaffinity(None).ok();
    let elsewhere = mine.and_then(|set| {
        let cpu = sched_getcpu();
        if cpu >= CpuSet::MAX_CPU || !set.is_set(cpu) {
            return None;
        }
        let mut others = set;
        others.unset(cpu);
        (others.count() > 0).then_some(others)
    });
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
                    std::thread::yield_now();
                }
                if let Some(set) = mine {
                    let _ = sched_setaffinity(None, &set);
                }
            }
            f()
        })?;
    if let Some(others) = elsewhere
        && state
            .compare_exchange(FREE, BINDING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    {
        bind(&handle, &others);
        state.store(DONE, Ordering::Release);
    }
    Ok(())
}

/// Lets the thread of `handle` run only on `cpus` (best effort).
fn bind(handle: &std::thread::JoinHandle<()>, cpus: &CpuSet) {
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
    // thread id. `raw` is a valid cpu_set_t of the size passed.
    unsafe {
        libc::pthread_setaffinity_np(
            handle.as_pthread_t(),
            std::mem::size_of::<libc::cpu_set_t>(),
            &raw,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn cpus(set: CpuSet) -> Vec<usize> {
        (0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect()
    }

    /// The thread runs `f`, and ends up with its starter's affinity
    /// whichever side wins the handshake (run many times to meet both).
    #[test]
    fn a_thread_started_beside_runs_and_keeps_its_starters_cpus() {
        let Ok(mine) = sched_getaffinity(None) else {
            return;
        };
        for _ in 0..200 {
            let (tx, rx) = mpsc::channel();
            spawn_beside("beside-test", move || {
                let _ = tx.send(sched_getaffinity(None).ok().map(cpus));
            })
            .expect("spawn");
            let got = rx
                .recv_timeout(std::time::Duration::from_secs(10))
                .expect("the thread ran");
            assert_eq!(got, Some(cpus(mine)));
        }
        // The starter's own affinity is untouched.
        assert_eq!(sched_getaffinity(None).ok().map(cpus), Some(cpus(mine)));
    }
}
