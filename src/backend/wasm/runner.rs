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
//! - where the kernel refuses it (a cpuset without that CPU), the CPU
//!   cannot be named (past `CpuSet::MAX_CPU`), or there is no such call
//!   (not Linux), the runner runs wherever the scheduler puts it;
//! - a runner lets go of its CPU at the first epoch tick of its call
//!   ([`release_cpu`]): back to the CPUs its caller could use at the move,
//!   or, should the kernel refuse those (a cpuset changed meanwhile), to
//!   every CPU its cpuset allows. A long call is not held to one CPU, and
//!   a short one ends before a tick. (A tick is seen when the guest's code
//!   runs: one long host operation, a large read, keeps the CPU until it
//!   returns.)
//! - only runners are ever bound: no thread of the caller's or of the
//!   embedding program is touched.
//!
//! A runner that has finished its call goes back on the idle list, then
//! sends the result (so that the caller, woken by it, finds the runner
//! there for its next move), and waits for the next call in its mailbox
//! ([`Mailbox`]); one left idle for [`KEEP_ALIVE`] exits (closing its
//! mailbox first, so that a late send fails and its call goes to another
//! runner). A runner whose call waits (a file operation
//! that does not return) is not on the list and gets no other call: the
//! next move takes another runner, or starts one. Runners busy at once are
//! the calls moved at once, which their inline slots bound (`inline_io`);
//! idle ones are at most as many, for [`KEEP_ALIVE`]. If no runner can be
//! started (or a new one gave up waiting for its first call, its starter
//! stalled for [`KEEP_ALIVE`]), the call goes to tokio's blocking pool as
//! before.
//!
//! How the caller waits ([`wait_here`]): a caller that sleeps until the
//! result arrives is woken by the runner while the runner still holds
//! their CPU, so the kernel wakes it on another CPU if one is idle, and
//! the caller goes on (its result, the next call's instance) with none of
//! its memory in that CPU's caches: on the 2-core development machine a
//! `wc -l note.txt` took 40-62 µs that way, and about 30 µs with the
//! process held to one CPU. So a caller still on the CPU its runner is
//! bound to, whose call is the only one of its engine running inline,
//! and whose runner has a time-sharing policy (a real-time one would keep
//! the CPU for its whole call), first gives its CPU to the runner
//! (`sched_yield`) until the result is there, for at most [`SPIN`] and
//! never past the call's deadline: it stays runnable where it is, and
//! goes on there as soon as the runner waits for its next call. (A yield
//! can last longer than that when other threads want the CPU: one of
//! their time slices, as the wake-up of a sleeping caller would wait for
//! them too.) A wait that runs out (a long call, or a caller with a
//! real-time policy, which the runner cannot preempt) makes the thread
//! sleep at once for its next [`BACK_OFF`] moved calls that could wait so.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::sync_channel;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long an idle runner waits for a call before it exits.
#[cfg(not(test))]
const KEEP_ALIVE: Duration = Duration::from_secs(10);
#[cfg(test)]
const KEEP_ALIVE: Duration = Duration::from_millis(300);

/// How long a caller gives its CPU to its runner, at most, before it
/// sleeps until its result ([`wait_here`]). A short file-opening call
/// (`wc -l` of a small file) takes 15-20 µs on its runner here, in a
/// release build; a debug build's code is several times slower.
#[cfg(not(debug_assertions))]
const SPIN: Duration = Duration::from_micros(50);
#[cfg(debug_assertions)]
const SPIN: Duration = Duration::from_millis(1);
/// Moved calls for which a thread whose last [`wait_here`] ran out sleeps
/// at once.
const BACK_OFF: u32 = 64;

thread_local! {
    /// Moved calls left for which this thread sleeps at once ([`BACK_OFF`]).
    static SLEEP_AT_ONCE: Cell<u32> = const { Cell::new(0) };
}

/// How a caller waited for its moved call's result (`runner::wait_here`
/// in the source has the rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// The result was there while it gave its CPU to the runner.
    Yielded,
    /// It gave its CPU to the runner for as long as it may (50 µs, 1 ms in
    /// a debug build, or what was left to its deadline), or until it found
    /// itself moved to another CPU, then slept.
    RanOut,
    /// It slept at once: its runner was not bound to the CPU it ran on
    /// (not Linux; the kernel refused; no runner could start) or had a
    /// real-time policy, another call of its engine ran inline, its
    /// deadline had passed, or a recent wait had run out.
    Slept,
    /// The result will never come (the reply was dropped unsent: a panic
    /// outside the job's own catch); the call ends as timed out.
    Lost,
}

/// Where a moved call went ([`run`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Placed {
    /// The CPU its caller ran on, where its runner is bound, when that
    /// runner has a time-sharing policy; else `None`.
    pub(super) here: Option<usize>,
}

/// Work for a runner: a moved call. What it returns sends the call's
/// result, once the runner is back on the idle list (so that the caller,
/// woken by it, finds the runner there for its next move).
pub(super) type Job = Box<dyn FnOnce() -> Reply + Send + 'static>;
/// Sends a call's result (see [`Job`]).
pub(super) type Reply = Box<dyn FnOnce() + Send + 'static>;

/// A call for a runner: the job, the CPU the runner is bound to for it
/// (if any), and the CPUs its caller may use (where a release goes back).
struct Sent {
    job: Job,
    bound: Option<usize>,
    home: Option<cpu::Set>,
}

/// Where a runner's next call is left: a slot, and the runner's thread to
/// wake. A send wakes the runner only once it has let go of the slot's
/// lock. (With std's `sync_channel`, whose send wakes the receiver while
/// it holds the channel's own lock, the runner, woken on the caller's CPU,
/// preempted the caller there at once, and at the end of the call found
/// that lock still held and slept on it: two more switches between the
/// threads per call.)
struct Mailbox {
    slot: Mutex<Slot>,
    runner: std::thread::Thread,
}

#[derive(Default)]
struct Slot {
    next: Option<Sent>,
    /// The runner has exited, or is about to: a send fails. A runner
    /// closes its mailbox before it exits, however it exits ([`Closer`]).
    closed: bool,
}

impl Mailbox {
    /// Leaves `job` for the runner and wakes it. `bind` runs first, under
    /// the slot's lock, where the runner is known to be alive (it closes
    /// its mailbox under that lock before it exits, so its thread id names
    /// no other thread), and says which CPU the runner is bound to for the
    /// call. `Err` gives the job back, unrun, when the runner has exited
    /// (or, which the callers rule out, has a call waiting already).
    fn send(
        &self,
        job: Job,
        home: Option<cpu::Set>,
        bind: impl FnOnce() -> Option<usize>,
    ) -> Result<Option<usize>, Job> {
        let bound = {
            let mut slot = self.slot.lock().unwrap_or_else(PoisonError::into_inner);
            if slot.closed || slot.next.is_some() {
                return Err(job);
            }
            let bound = bind();
            slot.next = Some(Sent { job, bound, home });
            bound
        };
        self.runner.unpark();
        Ok(bound)
    }

    /// Closes the mailbox: later sends fail. What was left in it unrun is
    /// dropped (its caller sees its reply dropped: `Wait::Lost`).
    fn close(&self) {
        let left = {
            let mut slot = self.slot.lock().unwrap_or_else(PoisonError::into_inner);
            slot.closed = true;
            slot.next.take()
        };
        drop(left);
    }

    /// On the runner: its next call, waited for up to `wait`. When none
    /// came and `close`, the mailbox is closed in the same step (a later
    /// send fails), and the runner may exit.
    fn recv(&self, wait: Duration, close: bool) -> Option<Sent> {
        let until = Instant::now() + wait;
        loop {
            {
                let mut slot = self.slot.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(next) = slot.next.take() {
                    return Some(next);
                }
                if Instant::now() >= until {
                    slot.closed |= close;
                    return None;
                }
            }
            // A park may return early (a wake-up meant for an earlier
            // wait, or none at all): the slot is looked at again.
            std::thread::park_timeout(until.saturating_duration_since(Instant::now()));
        }
    }
}

/// An idle runner: where to send its next call, which thread it is, and
/// the CPU it is bound to, if any.
struct Idle {
    id: u64,
    mail: Arc<Mailbox>,
    tid: cpu::Tid,
    bound: Option<usize>,
    /// Whether it has a time-sharing policy (a thread starts with its
    /// starter's), as of its last call's end.
    shared: bool,
}

/// Runners waiting for a call, the most recently idle last. A runner is
/// taken off only under this lock: by a call, which sends it its job right
/// after it lets go of the lock, or by the runner itself when it exits (see
/// `serve`). So a runner off the list is running a job, or has its next one
/// in its mailbox or about to be. The job is sent after the lock is let go
/// of: the send wakes the runner on the caller's CPU, where it may preempt
/// the caller at once, and a caller preempted while it held the lock made
/// the runner, done with the call, wait for it (on the development machine
/// 4% of a loop of short moved calls went to that runner's spin on the
/// lock, and two more switches between the threads per call).
static IDLE: Mutex<Vec<Idle>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// Runs `job` on a runner bound to the CPU this thread runs on. When no
/// runner could be started, the job comes back, unrun.
pub(super) fn run(job: Job) -> Result<Placed, Job> {
    let cpu = cpu::current();
    let placed = |bound: Option<usize>, shared: bool| Placed {
        here: bound.filter(|b| shared && Some(*b) == cpu),
    };
    let home = cpu::mine();
    let mut job = job;
    let taken = {
        let mut idle = IDLE.lock().unwrap_or_else(PoisonError::into_inner);
        // The most recent one bound to this CPU already, else the most
        // recent.
        let pick = match cpu {
            Some(_) => idle.iter().rposition(|r| r.bound == cpu),
            None => None,
        }
        .or(idle.len().checked_sub(1));
        pick.map(|i| idle.remove(i))
    };
    if let Some(r) = taken {
        let bind = || match cpu {
            Some(c) if r.bound != Some(c) => cpu::bind(r.tid, c).or(r.bound),
            _ => r.bound,
        };
        // It was listed, so it waits with an empty slot: this send fails
        // only if the runner has exited since (it does so only off the
        // list, or unwinding).
        match r.mail.send(job, home, bind) {
            Ok(bound) => return Ok(placed(bound, r.shared)),
            Err(back) => job = back,
        }
    }
    let Ok((mail, tid, shared)) = start() else {
        return Err(job);
    };
    mail.send(job, home, || cpu.and_then(|c| cpu::bind(tid, c)))
        .map(|bound| placed(bound, shared))
}

/// Whether a moved call's result has come ([`wait_here`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ready {
    /// Not yet.
    No,
    /// Here.
    Yes,
    /// Never will.
    Never,
}

/// The caller's wait for a moved call (see the module doc): when `placed`
/// here, this thread still runs there, and `alone`, gives this thread's
/// CPU to the runner until `ready` says the result is there (or that it
/// never will be), for at most [`SPIN`] or `left` (the time to the call's
/// deadline), the shorter. The caller then sleeps until the result, unless
/// it is there.
pub(super) fn wait_here(
    placed: Placed,
    alone: bool,
    left: Duration,
    ready: impl FnMut() -> Ready,
) -> Wait {
    wait_for(SPIN.min(left), placed, alone, ready)
}

/// [`wait_here`], with `spin` for the time it may wait.
fn wait_for(spin: Duration, placed: Placed, alone: bool, mut ready: impl FnMut() -> Ready) -> Wait {
    if !alone || spin.is_zero() || placed.here.is_none() || cpu::current() != placed.here {
        return Wait::Slept;
    }
    let skip = SLEEP_AT_ONCE.with(|s| {
        let left = s.get();
        s.set(left.saturating_sub(1));
        left > 0
    });
    if skip {
        return Wait::Slept;
    }
    let start = Instant::now();
    loop {
        match ready() {
            Ready::Yes => return Wait::Yielded,
            Ready::Never => return Wait::Lost,
            Ready::No => {}
        }
        if start.elapsed() >= spin {
            // Only a wait that had all of SPIN says the calls are long; one
            // cut short by its deadline does not.
            if spin >= SPIN {
                SLEEP_AT_ONCE.with(|s| s.set(BACK_OFF));
            }
            return Wait::RanOut;
        }
        // Moved to another CPU meanwhile, a yield there would return at
        // once: a spin, holding that CPU for nothing.
        if cpu::current() != placed.here {
            return Wait::RanOut;
        }
        std::thread::yield_now();
    }
}

/// Lets the runner this is called on use the CPUs its caller may use
/// again, if it is bound to one for its call (see the module doc). Called
/// at each epoch tick of a call: a long call is not held to one CPU.
pub(super) fn release_cpu() {
    cpu::release();
}

/// On a runner, after its call: whether it was bound to one CPU when the
/// call started, and whether it was let go of it during the call. A
/// diagnostic for the tests.
pub(super) fn this_call() -> (bool, bool) {
    cpu::this_call()
}

/// Starts a runner: where to send its first call, and its thread.
fn start() -> std::io::Result<(Arc<Mailbox>, cpu::Tid, bool)> {
    let (told, started) = sync_channel::<(Arc<Mailbox>, cpu::Tid, bool)>(1);
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    std::thread::Builder::new()
        .name("toolhost-wasm-io".into())
        .spawn(move || {
            let mail = Arc::new(Mailbox {
                slot: Mutex::new(Slot::default()),
                runner: std::thread::current(),
            });
            let _ = told.send((mail.clone(), cpu::me(), cpu::time_shared()));
            serve(id, &mail)
        })?;
    started
        .recv()
        .map_err(|_| std::io::Error::other("the runner did not start"))
}

/// Closes a runner's mailbox when the runner exits, also by unwinding: a
/// caller that took it off the idle list then gets its job back from the
/// send and starts another runner, instead of leaving it in a mailbox no
/// thread reads.
struct Closer<'a>(&'a Mailbox);

impl Drop for Closer<'_> {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// A runner's life: its calls, one after another, until it has waited
/// [`KEEP_ALIVE`] for one (twice that when a call took it off the idle
/// list just as it gave up waiting, and then sent nothing).
fn serve(id: u64, mail: &Arc<Mailbox>) {
    let _closer = Closer(mail);
    let tid = cpu::me();
    // Its starter sends the first call at once; should it not (it would
    // then take the call back and hand it to the blocking pool), go.
    let Some(mut next) = mail.recv(KEEP_ALIVE, true) else {
        return;
    };
    loop {
        cpu::start_call(next.bound, next.home);
        // The job catches a panic of the call's own code and sends it to
        // the caller (see `execute`); none gets here.
        let reply = std::panic::catch_unwind(std::panic::AssertUnwindSafe(next.job));
        // Made before the lock is taken (a system call), not under it.
        let me = Idle {
            id,
            mail: mail.clone(),
            tid,
            bound: cpu::bound(),
            // Read again after each call: a policy can be changed from
            // outside (`chrt -a -p`).
            shared: cpu::time_shared(),
        };
        IDLE.lock().unwrap_or_else(PoisonError::into_inner).push(me);
        match reply {
            Ok(reply) => {
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(reply));
            }
            Err(panic) => drop(panic),
        }
        next = match mail.recv(KEEP_ALIVE, false) {
            Some(n) => n,
            None => {
                let mut idle = IDLE.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(i) = idle.iter().position(|r| r.id == id) {
                    // Still listed: no call has it, and none can now.
                    idle.remove(i);
                    return;
                }
                drop(idle);
                // Taken off by a call, which sends its job right after it
                // let go of the lock (should it never, this one closes its
                // mailbox and goes: a send then fails, and the call starts
                // another runner).
                match mail.recv(KEEP_ALIVE, true) {
                    Some(n) => n,
                    None => return,
                }
            }
        };
    }
}

/// Binding a runner to a CPU: Linux only (elsewhere no runner is bound).
#[cfg(target_os = "linux")]
mod cpu {
    use std::cell::Cell;

    use rustix::thread::{CpuSet, Pid, gettid, sched_getaffinity, sched_setaffinity};

    pub(super) type Set = CpuSet;
    pub(super) type Tid = Pid;

    /// A runner's state for its call: the CPUs its caller may use, the
    /// CPU it is bound to now, whether it was bound at the start, and
    /// whether it was let go of it since.
    #[derive(Clone, Copy)]
    struct State {
        home: Option<CpuSet>,
        bound: Option<usize>,
        bound_at_start: bool,
        released: bool,
    }

    thread_local! {
        static STATE: Cell<Option<State>> = const { Cell::new(None) };
    }

    /// The CPU this thread runs on, if a set can name it.
    pub(super) fn current() -> Option<usize> {
        let cpu = crate::sys::current_cpu()?;
        (cpu < CpuSet::MAX_CPU).then_some(cpu)
    }

    /// The CPUs this thread may use.
    pub(super) fn mine() -> Option<CpuSet> {
        sched_getaffinity(None).ok()
    }

    /// This thread.
    pub(super) fn me() -> Pid {
        gettid()
    }

    /// Whether this thread has a time-sharing policy (`SCHED_OTHER`,
    /// `SCHED_BATCH`, `SCHED_IDLE`), not a real-time or deadline one.
    pub(super) fn time_shared() -> bool {
        crate::sys::time_shared()
    }

    /// Binds runner `tid` to `cpu` (below `MAX_CPU`: `current`); the CPU
    /// if the kernel let it.
    pub(super) fn bind(tid: Pid, cpu: usize) -> Option<usize> {
        let mut set = CpuSet::new();
        set.set(cpu);
        sched_setaffinity(Some(tid), &set).ok().map(|()| cpu)
    }

    /// At the start of a call on this runner.
    pub(super) fn start_call(bound: Option<usize>, home: Option<CpuSet>) {
        STATE.with(|s| {
            s.set(Some(State {
                home,
                bound,
                bound_at_start: bound.is_some(),
                released: false,
            }))
        });
    }

    /// The CPU this runner is bound to.
    pub(super) fn bound() -> Option<usize> {
        STATE.with(Cell::get).and_then(|s| s.bound)
    }

    /// See `runner::this_call`.
    pub(super) fn this_call() -> (bool, bool) {
        STATE
            .with(Cell::get)
            .map_or((false, false), |s| (s.bound_at_start, s.released))
    }

    /// Back to the CPUs the caller may use (see `release_cpu`); should the
    /// kernel refuse those (a cpuset changed since), to every CPU, which
    /// the kernel narrows to the runner's cpuset. Still bound if both
    /// fail (the next tick tries again).
    pub(super) fn release() {
        let Some(mut s) = STATE.with(Cell::get) else {
            return;
        };
        if s.bound.is_none() {
            return;
        }
        let home_ok = s
            .home
            .is_some_and(|home| sched_setaffinity(None, &home).is_ok());
        let ok = home_ok || {
            let mut all = CpuSet::new();
            for cpu in 0..CpuSet::MAX_CPU {
                all.set(cpu);
            }
            sched_setaffinity(None, &all).is_ok()
        };
        if ok {
            s.bound = None;
            s.released = true;
            STATE.with(|c| c.set(Some(s)));
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod cpu {
    /// Placeholders: nothing is bound here.
    pub(super) type Set = u8;
    pub(super) type Tid = u8;
    pub(super) fn current() -> Option<usize> {
        None
    }
    pub(super) fn mine() -> Option<Set> {
        None
    }
    pub(super) fn me() -> Tid {
        0
    }
    pub(super) fn time_shared() -> bool {
        false
    }
    pub(super) fn bind(_: Tid, _: usize) -> Option<usize> {
        None
    }
    pub(super) fn start_call(_: Option<usize>, _: Option<Set>) {}
    pub(super) fn bound() -> Option<usize> {
        None
    }
    pub(super) fn this_call() -> (bool, bool) {
        (false, false)
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

    /// The runner tests one at a time: no other takes a listed runner
    /// meanwhile (no other test of this binary uses runners).
    fn serial() -> std::sync::MutexGuard<'static, ()> {
        static ONE: Mutex<()> = Mutex::new(());
        ONE.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on a runner and waits for what it returns, sent by the
    /// job's reply.
    fn on_runner<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = channel();
        let job: Job = Box::new(move || {
            let v = f();
            Box::new(move || {
                let _ = tx.send(v);
            })
        });
        assert!(run(job).is_ok(), "a runner must start");
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the job ran")
    }

    #[cfg(target_os = "linux")]
    fn cpus_here() -> usize {
        rustix::thread::sched_getaffinity(None).map_or(0, |s| s.count() as usize)
    }

    /// A job as sent to a runner, marked by `n` (what it replies).
    fn marked(n: u32, to: std::sync::mpsc::Sender<u32>) -> Job {
        Box::new(move || {
            Box::new(move || {
                let _ = to.send(n);
            })
        })
    }

    /// A mailbox hands over what was sent before or during the wait, not
    /// before it (a stray wake-up of the thread does not end the wait
    /// early), with the CPU its send's `bind` named; a wait that closes
    /// makes every later send fail, give its job back and not bind; one
    /// that does not close leaves sends open.
    #[test]
    fn a_mailbox_hands_over_or_gives_back() {
        let mail = Mailbox {
            slot: Mutex::new(Slot::default()),
            runner: std::thread::current(),
        };
        let (tx, rx) = channel();
        // Sent first: received at once, with what `bind` said.
        assert_eq!(
            mail.send(marked(1, tx.clone()), None, || Some(7)).ok(),
            Some(Some(7))
        );
        // A second send while one waits is refused, its job back, unbound.
        let bound = Cell::new(false);
        let back = mail
            .send(marked(2, tx.clone()), None, || {
                bound.set(true);
                None
            })
            .expect_err("refused");
        assert!(!bound.get());
        back()();
        assert_eq!(rx.try_recv(), Ok(2));
        let got = mail.recv(Duration::from_secs(5), true).expect("the first");
        assert_eq!(got.bound, Some(7));
        (got.job)()();
        assert_eq!(rx.try_recv(), Ok(1));
        // Nothing sent, a stray wake-up: the wait still lasts its time.
        std::thread::current().unpark();
        let t = Instant::now();
        assert!(mail.recv(Duration::from_millis(30), false).is_none());
        assert!(
            t.elapsed() >= Duration::from_millis(30),
            "{:?}",
            t.elapsed()
        );
        // Not closed by that wait: a send from another thread during the
        // next wait wakes it.
        let sent = std::thread::scope(|scope| {
            let mail = &mail;
            let tx = tx.clone();
            scope.spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                mail.send(marked(3, tx), None, || None).is_ok()
            });
            let t = Instant::now();
            let got = mail.recv(Duration::from_secs(10), true).expect("the third");
            assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
            got
        });
        (sent.job)()();
        assert_eq!(rx.try_recv(), Ok(3));
        // A wait that closes: later sends fail, their jobs back, unrun and
        // unbound.
        assert!(mail.recv(Duration::from_millis(1), true).is_none());
        let back = mail
            .send(marked(4, tx.clone()), None, || {
                bound.set(true);
                None
            })
            .expect_err("closed");
        assert!(!bound.get());
        assert_eq!(rx.try_recv(), Err(std::sync::mpsc::TryRecvError::Empty));
        back()();
        assert_eq!(rx.try_recv(), Ok(4));
    }

    /// A runner that exits by unwinding closes its mailbox (`Closer`): a
    /// send then fails and gives its job back, where an open mailbox would
    /// take the job and no thread would run it. Side by side, a mailbox
    /// whose thread lives on still takes a send.
    #[test]
    fn a_runner_that_unwinds_closes_its_mailbox() {
        let open = Mailbox {
            slot: Mutex::new(Slot::default()),
            runner: std::thread::current(),
        };
        let unwound = Mailbox {
            slot: Mutex::new(Slot::default()),
            runner: std::thread::current(),
        };
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _closer = Closer(&unwound);
            panic!("a runner's own code panics");
        }));
        assert!(r.is_err());
        let (tx, rx) = channel();
        let back = unwound
            .send(marked(1, tx.clone()), None, || None)
            .expect_err("closed by the unwind");
        back()();
        assert_eq!(rx.try_recv(), Ok(1));
        assert!(open.send(marked(2, tx), None, || None).is_ok());
        let got = open.recv(Duration::from_secs(1), true).expect("taken");
        (got.job)()();
        assert_eq!(rx.try_recv(), Ok(2));
    }

    /// A job runs on a runner (not the caller's thread), bound to one CPU
    /// where the kernel lets it; after `release_cpu` the runner has the
    /// caller's CPUs again.
    #[test]
    fn a_runner_is_bound_to_one_cpu_until_released() {
        let _one = serial();
        let seen = on_runner(|| {
            let bound = look();
            let at_start = this_call();
            release_cpu();
            (bound, at_start, look(), this_call())
        });
        assert_eq!(seen.0.name.as_deref(), Some("toolhost-wasm-io"));
        #[cfg(target_os = "linux")]
        {
            assert_ne!(seen.0.tid, rustix::thread::gettid().as_raw_nonzero().get());
            let here = cpus_here();
            match seen.1 {
                // Bound: one CPU, then the caller's, released.
                (true, false) => {
                    assert_eq!(seen.0.cpus, 1, "{seen:?}");
                    assert_eq!(seen.2.cpus, here, "{seen:?}");
                    assert_eq!(seen.3, (true, true), "{seen:?}");
                }
                // The kernel refused: the caller's CPUs throughout.
                (false, false) => {
                    assert_eq!(seen.0.cpus, here, "{seen:?}");
                    assert_eq!(seen.3, (false, false), "{seen:?}");
                }
                other => panic!("a call's start: {other:?}"),
            }
        }
    }

    /// A runner is back on the idle list before its caller is woken (so
    /// the caller's next move finds it there), every time.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_runner_is_listed_before_its_caller_wakes() {
        let _one = serial();
        for _ in 0..40 {
            let tid = on_runner(|| look().tid);
            let listed = IDLE
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .any(|r| r.tid.as_raw_nonzero().get() == tid);
            assert!(listed, "runner {tid} not listed when its caller woke");
        }
    }

    /// A runner whose job waits is not given another: a job sent while the
    /// first waits runs at once, on another runner.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_waiting_job_does_not_hold_back_the_next() {
        let _one = serial();
        let (release, wait) = channel::<()>();
        let (started, first) = channel();
        let job: Job = Box::new(move || {
            let _ = started.send(look().tid);
            let _ = wait.recv_timeout(Duration::from_secs(20));
            Box::new(|| {})
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
        let _one = serial();
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
    /// `wait_here` gives the CPU away only for a call placed here (a
    /// runner bound to the CPU this thread runs on), alone, and before its
    /// deadline (each twin sleeps at once, without asking); sees a result
    /// that arrives while it waits, or that none will; and after a wait
    /// that ran out its whole `SPIN` (not one cut short by the deadline)
    /// sleeps at once for the next `BACK_OFF` calls, then waits again. (With a wait of 10 s where a result must be seen: a
    /// yield can hand the CPU to another test's thread for longer than
    /// `SPIN`.)
    #[cfg(target_os = "linux")]
    #[test]
    fn a_caller_waits_here_only_when_placed_here_and_alone() {
        SLEEP_AT_ONCE.with(|s| s.set(0));
        let long = Duration::from_secs(10);
        // Held to the CPU it runs on, so that "here" stays here.
        let at = rustix::thread::sched_getcpu();
        let mut one = rustix::thread::CpuSet::new();
        one.set(at);
        let before = rustix::thread::sched_getaffinity(None).expect("affinity");
        rustix::thread::sched_setaffinity(None, &one).expect("bind the test thread");
        let here = Placed { here: Some(at) };
        let asked = Cell::new(0);
        let never = || {
            asked.set(asked.get() + 1);
            Ready::No
        };
        assert_eq!(
            wait_for(long, Placed { here: None }, true, never),
            Wait::Slept
        );
        let elsewhere = Placed { here: Some(at + 1) };
        assert_eq!(wait_for(long, elsewhere, true, never), Wait::Slept);
        assert_eq!(wait_for(long, here, false, never), Wait::Slept);
        assert_eq!(wait_here(here, true, Duration::ZERO, never), Wait::Slept);
        assert_eq!(asked.get(), 0, "asked though it slept at once");

        let mut polls = 0;
        let third = || {
            polls += 1;
            if polls == 3 { Ready::Yes } else { Ready::No }
        };
        assert_eq!(wait_for(long, here, true, third), Wait::Yielded);
        assert_eq!(polls, 3);
        assert_eq!(wait_for(long, here, true, || Ready::Never), Wait::Lost);
        // Cut short by the deadline: runs out, and does not back off.
        let short = SPIN / 5;
        assert_eq!(wait_here(here, true, short, never), Wait::RanOut);
        assert_eq!(wait_for(long, here, true, || Ready::Yes), Wait::Yielded);
        asked.set(0);

        let start = Instant::now();
        assert_eq!(wait_here(here, true, long, never), Wait::RanOut);
        assert!(
            start.elapsed() >= SPIN,
            "ran out after {:?}",
            start.elapsed()
        );
        assert!(asked.get() > 0);
        asked.set(0);
        for i in 0..BACK_OFF {
            assert_eq!(wait_for(long, here, true, never), Wait::Slept, "call {i}");
        }
        assert_eq!(asked.get(), 0, "asked while backing off");
        assert_eq!(wait_for(long, here, true, || Ready::Yes), Wait::Yielded);
        rustix::thread::sched_setaffinity(None, &before).expect("unbind");
    }

    /// `run` says where a job went: here (the CPU its caller runs on)
    /// exactly when its runner was bound to one CPU, which is this one
    /// (`a_runner_is_bound_to_one_cpu_until_released` covers the binding),
    /// with this thread's time-sharing policy.
    #[cfg(target_os = "linux")]
    #[test]
    fn run_says_when_the_runner_is_bound_here() {
        let _one = serial();
        let (tx, rx) = channel();
        let job: Job = Box::new(move || {
            let cpus = look().cpus;
            let at = rustix::thread::sched_getcpu();
            Box::new(move || {
                let _ = tx.send((cpus, at));
            })
        });
        let placed = run(job).unwrap_or_else(|_| panic!("a runner must start"));
        let (cpus, at) = rx.recv_timeout(Duration::from_secs(10)).expect("ran");
        assert!(cpu::time_shared());
        match placed.here {
            Some(c) => assert_eq!((cpus, at), (1, c), "placed {placed:?}"),
            None => assert!(cpus > 1, "bound to one CPU but not said"),
        }
    }
}
