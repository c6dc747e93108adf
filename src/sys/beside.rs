//! Starting a thread beside its starter, on another CPU (Linux).
//!
//! A thread made to work *beside* the one that starts it (the direct
//! backend's warm-up, `Sandbox::warm_up_for`) gains nothing if it waits
//! for that one's CPU. Most schedulers place a new thread on an idle CPU
//! when there is one; some do not (a VM kernel whose scheduler packs new
//! threads onto busy vCPUs left the warm-up waiting a millisecond behind
//! `toolhost run`'s main thread while the other vCPU idled, and the call
//! then made its network namespace itself). So the starter, right after the
//! thread is made, lets it run only on the starter's other CPUs (the kernel
//! moves it to one of them, not necessarily an idle one); the thread, once
//! it runs, takes back its starter's CPUs, so that it and the threads it
//! starts run where a thread started plainly would.
//!
//! The handshake: the thread, when it starts (before `f`), either claims
//! that no binding is coming, or parks until the starter has bound it (or
//! failed to). So the starter binds a thread that is alive (not yet run, or
//! waiting at its start), never one that has exited, whose kernel thread id
//! would be gone.
//!
//! What is not quite as plain:
//! - Giving the CPUs back is itself a request the kernel records: the
//!   thread asks for every CPU (which the kernel narrows to its cpuset) when
//!   its starter could use every online CPU, so a cpuset widened later
//!   still reaches it; else it asks for its starter's set as read at the
//!   start, which a later widening does not reach.
//! - If its affinity was changed by someone else meanwhile (`taskset -a`
//!   between the starter's read and the thread's start), the thread keeps
//!   that change and does not give anything back.
//! - Until it starts, the thread cannot run on its starter's CPU even once
//!   that one idles: with the other CPUs busy, it starts later than a plain
//!   thread would. A starter with a real-time policy starts it plainly.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use rustix::thread::{CpuSet, sched_getaffinity, sched_getcpu, sched_setaffinity};

/// Nothing decided yet.
const FREE: u8 = 0;
/// The starter is binding the thread.
const BINDING: u8 = 1;
/// The starter bound the thread.
const BOUND: u8 = 2;
/// The kernel refused the binding.
const REFUSED: u8 = 3;
/// The thread started first: no binding.
const SKIPPED: u8 = 4;

/// How [`spawn_beside`] started its thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placement {
    /// Plainly: no other CPU to use, or a starter with a real-time policy.
    Plain,
    /// The thread started before the starter could bind it: not bound.
    Skipped,
    /// Bound to the starter's other CPUs until it started.
    Bound,
    /// The kernel refused the binding: not bound.
    Refused,
}

/// Starts `f` on a thread named `name`, on another CPU than the calling
/// thread's where it may use another; see the module's doc. Fails only as
/// [`std::thread::Builder::spawn`] does.
pub(crate) fn spawn_beside<F>(name: &str, f: F) -> io::Result<Placement>
where
    F: FnOnce() + Send + 'static,
{
    let mine = sched_getaffinity(None).ok();
    let elsewhere = mine.filter(|_| super::time_shared()).and_then(|set| {
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
                let end = loop {
                    let s = seen.load(Ordering::Acquire);
                    if s == BOUND || s == REFUSED {
                        break s;
                    }
                    std::thread::park();
                };
                if end == BOUND
                    && let (Some(mine), Some(others)) = (mine, elsewhere)
                {
                    unbind(&mine, &others);
                }
            }
            f()
        })?;
    let Some(others) = elsewhere else {
        return Ok(Placement::Plain);
    };
    if state
        .compare_exchange(FREE, BINDING, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return Ok(Placement::Skipped);
    }
    let bound = bind(&handle, &others);
    state.store(if bound { BOUND } else { REFUSED }, Ordering::Release);
    handle.thread().unpark();
    Ok(if bound {
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
    // alone exit, before `spawn_beside` stores the outcome after this call
    // (it found BINDING, so it waits), so glibc's record of it holds its
    // kernel thread id. `raw` is a valid cpu_set_t of the size passed.
    unsafe {
        libc::pthread_setaffinity_np(
            handle.as_pthread_t(),
            std::mem::size_of::<libc::cpu_set_t>(),
            &raw,
        ) == 0
    }
}

/// In the bound thread, once it runs: back to its starter's CPUs (`mine`),
/// unless its affinity is no longer the binding (`others`) it was given.
/// Asks for every CPU when `mine` is every online CPU (see the module's
/// doc).
fn unbind(mine: &CpuSet, others: &CpuSet) {
    if sched_getaffinity(None).ok().as_ref() != Some(others) {
        return;
    }
    // SAFETY: sysconf takes a plain constant.
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    let set = if online > 0 && i64::from(mine.count()) == online as i64 {
        let mut every = CpuSet::new();
        for cpu in 0..CpuSet::MAX_CPU {
            every.set(cpu);
        }
        every
    } else {
        *mine
    };
    let _ = sched_setaffinity(None, &set);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    /// The thread runs `f`, and ends up with its starter's CPUs whichever
    /// side wins the handshake (run many times to meet both); on a machine
    /// with two CPUs or more, the starter binds it at least once, and a
    /// bound thread runs on another CPU than its starter's.
    #[test]
    fn a_thread_started_beside_runs_and_keeps_its_starters_cpus() {
        let Ok(mine) = sched_getaffinity(None) else {
            return;
        };
        let (mut bound, mut moved) = (0, 0);
        for _ in 0..200 {
            let (tx, rx) = mpsc::channel();
            let starter_cpu = sched_getcpu();
            let placement = spawn_beside("beside-test", move || {
                let _ = tx.send((sched_getcpu(), sched_getaffinity(None).ok()));
            })
            .expect("spawn");
            let (cpu, got) = rx
                .recv_timeout(Duration::from_secs(10))
                .expect("the thread ran");
            assert_eq!(got, Some(mine), "{placement:?}");
            assert_ne!(placement, Placement::Refused);
            if placement == Placement::Bound {
                bound += 1;
                moved += usize::from(cpu != starter_cpu);
            }
        }
        if mine.count() >= 2 && crate::sys::time_shared() {
            assert!(bound > 0, "never bound in 200 starts");
            assert!(moved > 0, "bound {bound} times, never on another CPU");
        } else {
            assert_eq!(bound, 0);
        }
        // The starter's own affinity is untouched.
        assert_eq!(sched_getaffinity(None).ok(), Some(mine));
    }

    /// A thread whose affinity someone else changed after its binding keeps
    /// that change; one still bound gets its starter's CPUs back.
    #[test]
    fn unbinding_gives_back_the_starters_cpus_unless_someone_else_bound_it() {
        let Ok(mine) = sched_getaffinity(None) else {
            return;
        };
        let Some(first) = (0..CpuSet::MAX_CPU).find(|&c| mine.is_set(c)) else {
            return;
        };
        let mut one = CpuSet::new();
        one.set(first);
        std::thread::spawn(move || {
            // Bound to `one` by someone else: `others` is not what it has.
            sched_setaffinity(None, &one).expect("bind to one CPU");
            let mut others = mine;
            others.unset(first);
            unbind(&mine, &others);
            assert_eq!(sched_getaffinity(None).ok(), Some(one));
            // Still bound as given: back to the starter's.
            unbind(&mine, &one);
            assert_eq!(sched_getaffinity(None).ok(), Some(mine));
        })
        .join()
        .expect("the test thread");
    }
}
