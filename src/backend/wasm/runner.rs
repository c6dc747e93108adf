//! The threads a preview-1 call moves to at its first file operation
//! (`inline_io`), kept for the next calls that move.
//!
//! A call that moves stops running in its caller's task and goes on, to
//! its end, on a runner, where a file operation may wait (see
//! `inline_io`); the caller only waits for its result meanwhile. What a
//! move costs beyond the hand-off itself depends on where the runner runs:
//! woken on another CPU, the call finds none of its memory (its store, its
//! instance, the guest's pages, the WASI context) in that CPU's caches.
//! On the 2-core development machine a `wc -l note.txt` took 48-56 µs with
//! tokio's blocking pool, wherever the scheduler put its thread, and
//! 24-27 µs with every thread of the process held to one CPU. So a runner
//! is bound to the CPU its caller runs on (where the call's memory is)
//! before it is given the call, and the caller, which only waits, leaves
//! that CPU to it.
//!
//! Binding is a preference no call depends on:
//! - where the kernel refuses it (a cpuset without that CPU) or there is no
//!   such call (not Linux), the runner runs wherever the scheduler puts it;
//! - a runner lets go of its CPU at the first epoch tick of its call
//!   ([`release_cpu`]), back to the CPUs it inherited from the thread that
//!   started it: a long call is not held to one CPU, and a short one ends
//!   before a tick.
//!
//! A runner that has finished its call goes back on the idle list and
//! waits for the next one; one left idle for [`KEEP_ALIVE`] exits. A
//! runner whose call waits (a file operation that does not return) is not
//! on the list and gets no other call: the next move takes another
//! runner, or starts one. Runners busy at once are the calls moved at
//! once, which their inline slots bound (`inline_io`); idle ones are at
//! most as many, for [`KEEP_ALIVE`]. If no runner can be started, the call
//! goes to tokio's blocking pool as before.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, sync_channel};
use std::time::Duration;

/// How long an idle runner waits for a call before it exits.
#[cfg(not(test))]
const KEEP_ALIVE: Duration = Duration::from_secs(10);
#[cfg(test)]
const KEEP_ALIVE: Duration = Duration::from_millis(300);

/// Work for a runner: a moved call, which sends its own result.
pub(super) type Job = Box<dyn FnOnce() + Send + 'static>;

/// A call for a runner, and the CPU the runner is bound to for it, if any.
type Sent = (Job, Option<usize>);

/// An idle runner: where to send its next call, which thread it is, and
/// the CPU it is bound to, if any.
struct Idle {
    id: u64,
    jobs: SyncSender<Sent>,
    #[cfg(target_os = "linux")]
    tid: rustix::thread::Pid,
    bound: Option<usize>,
}

/// Runners waiting for a call, the most recently idle last. A runner is
/// taken off only under this lock, by a call that then sends it a job, or
/// by itself when it exits (see `serve`).
static IDLE: Mutex<Vec<Idle>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// Runs `job` on a runner bound to the CPU this thread runs on. When no
/// runner could be started, the job comes back, unrun.
pub(super) fn run(job: Job) -> Result<(), Job> {
    let cpu = cpu::current();
    let idle = IDLE.lock().unwrap_or_else(|e| e.into_inner()).pop();
    let (jobs, bound) = match idle {
        Some(r) => {
            let bound = match cpu {
                Some(c) if r.bound != Some(c) => cpu::bind(&r, c).or(r.bound),
                _ => r.bound,
            };
            (r.jobs, bound)
        }
        None => match start(cpu) {
            Ok(started) => started,
            Err(_) => return Err(job),
        },
    };
    // A runner taken off the list (or just started) waits for this job
    // and has room for it: the send fails only if it died.
    jobs.send((job, bound)).map_err(|e| e.0.0)
}

/// Lets the runner this is called on use every CPU it would have had
/// again, if it is bound to one for its call (see the module doc). Called
/// at each epoch tick of a call: a long call is not held to one CPU.
pub(super) fn release_cpu() {
    cpu::release();
}

/// Starts a runner, bound to `cpu` if given and the kernel lets it; where
/// to send its first call, and the CPU it is bound to.
fn start(cpu: Option<usize>) -> std::io::Result<(SyncSender<Sent>, Option<usize>)> {
    let (jobs, rx) = sync_channel::<Sent>(1);
    let (told, bound) = sync_channel::<Option<usize>>(1);
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let tx = jobs.clone();
    std::thread::Builder::new()
        .name("toolhost-wasm-io".into())
        .spawn(move || {
            let _ = told.send(cpu.and_then(cpu::bind_self));
            serve(id, tx, rx)
        })?;
    let bound = bound.recv().unwrap_or(None);
    Ok((jobs, bound))
}

/// A runner's life: its calls, one after another, until it has waited
/// [`KEEP_ALIVE`] for one.
fn serve(id: u64, jobs: SyncSender<Sent>, rx: Receiver<Sent>) {
    let Ok((mut job, mut bound)) = rx.recv() else {
        return;
    };
    loop {
        cpu::set_bound(bound);
        // A panic of the call's own code reaches its caller through the
        // call's result (see `execute`); none gets here.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
        IDLE.lock().unwrap_or_else(|e| e.into_inner()).push(Idle {
            id,
            jobs: jobs.clone(),
            #[cfg(target_os = "linux")]
            tid: rustix::thread::gettid(),
            bound: cpu::bound(),
        });
        let next = match rx.recv_timeout(KEEP_ALIVE) {
            Ok(next) => next,
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                let mut idle = IDLE.lock().unwrap_or_else(|e| e.into_inner());
                match idle.iter().position(|r| r.id == id) {
                    // Still listed: no call has it, none can now.
                    Some(i) => {
                        idle.swap_remove(i);
                        return;
                    }
                    // A call took it off the list and is sending its job.
                    None => {
                        drop(idle);
                        match rx.recv() {
                            Ok(next) => next,
                            Err(_) => return,
                        }
                    }
                }
            }
        };
        (job, bound) = next;
    }
}

/// Binding a runner to a CPU: Linux only (elsewhere no runner is bound).
#[cfg(target_os = "linux")]
mod cpu {
    use std::cell::Cell;

    use rustix::thread::{CpuSet, Pid, sched_getaffinity, sched_getcpu, sched_setaffinity};

    thread_local! {
        /// On a runner: the CPUs it would have had unbound (inherited from
        /// the thread that started it), and the CPU it is bound to now.
        static STATE: Cell<Option<(CpuSet, Option<usize>)>> = const { Cell::new(None) };
    }

    /// The CPU this thread runs on.
    pub(super) fn current() -> Option<usize> {
        Some(sched_getcpu())
    }

    fn one(cpu: usize) -> CpuSet {
        let mut set = CpuSet::new();
        set.set(cpu);
        set
    }

    /// Binds idle runner `r` to `cpu`; the CPU if the kernel let it.
    pub(super) fn bind(r: &super::Idle, cpu: usize) -> Option<usize> {
        sched_setaffinity(Some(r.tid), &one(cpu)).ok().map(|()| cpu)
    }

    /// Binds this new runner to `cpu`, first keeping the CPUs it had.
    pub(super) fn bind_self(cpu: usize) -> Option<usize> {
        let home = sched_getaffinity(None).ok()?;
        let bound = sched_setaffinity(None, &one(cpu)).ok().map(|()| cpu);
        STATE.with(|s| s.set(Some((home, bound))));
        bound
    }

    /// Records the CPU this runner is bound to for its next call.
    pub(super) fn set_bound(bound: Option<usize>) {
        STATE.with(|s| s.set(s.get().map(|(home, _)| (home, bound))));
    }

    /// The CPU this runner is bound to.
    pub(super) fn bound() -> Option<usize> {
        STATE.with(Cell::get).and_then(|(_, b)| b)
    }

    /// Back to the CPUs this runner would have had (see `release_cpu`).
    pub(super) fn release() {
        if let Some((home, Some(_))) = STATE.with(Cell::get) {
            let _ = sched_setaffinity(None::<Pid>, &home);
            STATE.with(|s| s.set(Some((home, None))));
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod cpu {
    pub(super) fn current() -> Option<usize> {
        None
    }
    pub(super) fn bind(_: &super::Idle, _: usize) -> Option<usize> {
        None
    }
    pub(super) fn bind_self(_: usize) -> Option<usize> {
        None
    }
    pub(super) fn set_bound(_: Option<usize>) {}
    pub(super) fn bound() -> Option<usize> {
        None
    }
    pub(super) fn release() {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::channel;

    /// What a job saw of the thread it ran on.
    #[derive(Debug)]
    struct Seen {
        name: Option<String>,
        #[cfg(target_os = "linux")]
        tid: i32,
        #[cfg(target_os = "linux")]
        cpus: usize,
    }

    fn look() -> Seen {
        Seen {
            name: std::thread::current().name().map(str::to_string),
            #[cfg(target_os = "linux")]
            tid: rustix::thread::gettid().as_raw_nonzero().get(),
            #[cfg(target_os = "linux")]
            cpus: rustix::thread::sched_getaffinity(None).map_or(0, |s| s.count() as usize),
        }
    }

    /// Runs `f` on a runner and waits for what it returns.
    fn on_runner<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = channel();
        let job: Job = Box::new(move || {
            let _ = tx.send(f());
        });
        assert!(run(job).is_ok(), "a runner must start");
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the job ran")
    }

    #[cfg(target_os = "linux")]
    fn cpus_here() -> usize {
        rustix::thread::sched_getaffinity(None).map_or(0, |s| s.count() as usize)
    }

    /// A job runs on a runner (not the caller's thread), bound to one CPU
    /// when the caller may use more; after `release_cpu` the runner has
    /// every CPU the caller has again.
    #[test]
    fn a_runner_is_bound_to_one_cpu_until_released() {
        let seen = on_runner(|| {
            let bound = look();
            release_cpu();
            (bound, look())
        });
        assert_eq!(seen.0.name.as_deref(), Some("toolhost-wasm-io"));
        #[cfg(target_os = "linux")]
        {
            assert_ne!(seen.0.tid, rustix::thread::gettid().as_raw_nonzero().get());
            let here = cpus_here();
            if here > 1 {
                assert_eq!(seen.0.cpus, 1, "{seen:?}");
            }
            assert_eq!(seen.1.cpus, here, "{seen:?}");
        }
    }

    /// Calls one after another reuse idle runners instead of starting one
    /// each (other tests may lend theirs: a few runners at most).
    #[cfg(target_os = "linux")]
    #[test]
    fn runners_are_reused() {
        let mut tids = std::collections::BTreeSet::new();
        for _ in 0..40 {
            tids.insert(on_runner(|| look().tid));
        }
        assert!(tids.len() <= 4, "{} runners for 40 calls", tids.len());
    }

    /// A runner whose job waits is not given another: a job sent while the
    /// first waits runs at once, on another runner.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_waiting_job_does_not_hold_back_the_next() {
        let (release, wait) = channel::<()>();
        let (started, first) = channel();
        let job: Job = Box::new(move || {
            let _ = started.send(look().tid);
            let _ = wait.recv_timeout(Duration::from_secs(20));
        });
        assert!(run(job).is_ok());
        let first = first
            .recv_timeout(Duration::from_secs(10))
            .expect("first ran");
        let second = on_runner(|| look().tid);
        assert_ne!(first, second);
        drop(release);
    }

    /// An idle runner exits after its keep-alive (shortened under test):
    /// its thread is gone, and the next job still runs (on a new runner).
    #[cfg(target_os = "linux")]
    #[test]
    fn an_idle_runner_exits_and_the_next_job_still_runs() {
        let tid = on_runner(|| look().tid);
        let task = std::path::PathBuf::from(format!("/proc/self/task/{tid}"));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while task.exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "runner {tid} still there"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(on_runner(|| 7), 7);
    }
}
