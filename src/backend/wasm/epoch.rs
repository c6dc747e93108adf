//! The epoch ticker: one thread per process advances the epoch of every
//! wasm engine every [`EPOCH_TICK`], while a call's store exists.
//!
//! A guest is interrupted at each tick (its store's deadline is one tick
//! ahead, see `execute`): that is how its CPU limit is counted under the
//! `epoch` meter, and how a running guest yields, under either meter, so
//! that its call's timeout can end it. Between calls nothing needs the
//! epoch, so the ticker sleeps, and a process that holds an engine but runs
//! no wasm (an idle MCP server, a server making `direct` calls) is not
//! woken 100 times a second per engine. The first store to be made wakes
//! it; its first tick comes one [`EPOCH_TICK`] after that (with the ticker
//! awake, within one). It goes back to sleep after [`GRACE_ROUNDS`] rounds
//! in a row in which no store was made or alive (100 ms), so calls a few
//! tens of ms apart keep it ticking rather than wake it each time.
//!
//! Invariant: every store holds a [`Running`] for as long as it lives: the
//! hold is a field of its data (`limits::Common`), taken when the data is
//! made. A store without one would never be interrupted: no CPU limit
//! under `epoch`, and no timeout under either meter. For the same reason a
//! panic on the ticker's thread aborts the process rather than leave every
//! later guest unlimited.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

use wasmtime::{Engine, EngineWeak};

use super::EPOCH_TICK;

/// The process's ticker (see the module).
static TICKER: Ticker = Ticker::new();

/// Rounds without a store that the ticker goes on ticking before it sleeps.
const GRACE_ROUNDS: u32 = 10;

/// Ticks `engine`'s epoch from now on, while stores run (its weak handle
/// is dropped once the engine is gone). Starts the ticker's thread on first
/// use; fails only if that thread cannot be made.
pub(super) fn register(engine: &Engine) -> std::io::Result<()> {
    TICKER.register(engine)
}

/// A hold that keeps the ticker going while a store runs (see the module).
pub(super) fn hold() -> Running {
    TICKER.hold()
}

/// Engines to tick, and whether anything runs.
struct Ticker {
    state: Mutex<State>,
    /// Signalled when the first hold is taken.
    wake: Condvar,
    /// Rounds ticked (for the tests).
    ticks: AtomicU64,
}

struct State {
    engines: Vec<EngineWeak>,
    /// Live [`Running`] holds.
    running: usize,
    /// Whether the thread is started.
    started: bool,
    /// Whether the thread waits for a hold (so the first one wakes it; a
    /// call in a burst finds it ticking and makes no system call).
    asleep: bool,
    /// Whether a hold was taken since the last round.
    held_lately: bool,
    /// Rounds in a row without a store.
    idle_rounds: u32,
}

impl State {
    /// The engines still alive, whose handles stay; the gone ones' handles
    /// are dropped. The caller drops the references after the lock, since
    /// the last one of an engine may be among them.
    fn live_engines(&mut self) -> Vec<Engine> {
        let mut live = Vec::with_capacity(self.engines.len());
        self.engines.retain(|weak| match weak.upgrade() {
            Some(engine) => {
                live.push(engine);
                true
            }
            None => false,
        });
        live
    }
}

impl Ticker {
    const fn new() -> Ticker {
        Ticker {
            state: Mutex::new(State {
                engines: Vec::new(),
                running: 0,
                started: false,
                asleep: false,
                held_lately: false,
                // Asleep from the start, until the first store.
                idle_rounds: GRACE_ROUNDS,
            }),
            wake: Condvar::new(),
            ticks: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn register(&'static self, engine: &Engine) -> std::io::Result<()> {
        let mut state = self.lock();
        if !state.started {
            std::thread::Builder::new()
                .name("toolhost-epoch".into())
                .spawn(move || self.run())?;
            state.started = true;
        }
        // Gone engines' handles go here too, not only at a tick (a last
        // reference taken meanwhile is dropped after the lock).
        let live = state.live_engines();
        state.engines.push(engine.weak());
        drop(state);
        drop(live);
        Ok(())
    }

    fn hold(&'static self) -> Running {
        let mut state = self.lock();
        state.running += 1;
        state.held_lately = true;
        let asleep = std::mem::replace(&mut state.asleep, false);
        drop(state);
        if asleep {
            self.wake.notify_one();
        }
        Running(self)
    }

    /// The thread: asleep while nothing runs; else a tick of every engine
    /// each [`EPOCH_TICK`]. A panic here would leave every later guest
    /// without a CPU limit or a timeout: it aborts the process instead.
    fn run(&self) {
        // The loop never returns: this thread ends only by a panic, and
        // then the guard's drop aborts (a message that fails to write,
        // stderr closed, cannot keep it from that).
        struct AbortOnExit;
        impl Drop for AbortOnExit {
            fn drop(&mut self) {
                use std::io::Write as _;
                let _ = writeln!(
                    std::io::stderr(),
                    "toolhost: the wasm epoch ticker failed; aborting (guests would run unlimited)"
                );
                std::process::abort();
            }
        }
        let _abort = AbortOnExit;
        loop {
            self.wait_for_holds();
            std::thread::sleep(EPOCH_TICK);
            self.tick();
        }
    }

    /// Returns when the next round is to be ticked: a store lives or was
    /// made since the last round, or fewer than [`GRACE_ROUNDS`] rounds in
    /// a row had none. Else waits for the next hold.
    fn wait_for_holds(&self) {
        let mut state = self.lock();
        loop {
            if state.running > 0 || state.held_lately {
                state.held_lately = false;
                state.idle_rounds = 0;
                break;
            }
            if state.idle_rounds < GRACE_ROUNDS {
                state.idle_rounds += 1;
                break;
            }
            state.asleep = true;
            state = self.wake.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        state.asleep = false;
    }

    /// One round: every live engine's epoch advanced. The engines are
    /// ticked, and the last reference to one that went meanwhile dropped,
    /// outside the lock, which calls take.
    fn tick(&self) {
        let engines = self.lock().live_engines();
        // Counted first (a test waits for the count once a guest was
        // interrupted).
        self.ticks.fetch_add(1, Ordering::Relaxed);
        for engine in &engines {
            engine.increment_epoch();
        }
        drop(engines);
    }
}

/// Keeps the ticker going until dropped ([`hold`]).
pub(super) struct Running(&'static Ticker);

impl Drop for Running {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.running = state.running.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    /// Waits (2 s at most) until `cond` holds of the ticker.
    fn until(ticker: &Ticker, cond: impl Fn(&Ticker) -> bool) -> bool {
        let start = Instant::now();
        while !cond(ticker) {
            if start.elapsed() > Duration::from_secs(2) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        true
    }

    fn asleep(t: &Ticker) -> bool {
        t.lock().asleep
    }

    fn ticks(t: &Ticker) -> u64 {
        t.ticks.load(Ordering::Relaxed)
    }

    /// `(module (func (export "spin") (loop (br 0))))`
    const SPIN: &[u8] = &[
        0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version
        0x01, 0x04, 0x01, 0x60, 0x00, 0x00, // type: () -> ()
        0x03, 0x02, 0x01, 0x00, // func 0 of type 0
        0x07, 0x08, 0x01, 0x04, b's', b'p', b'i', b'n', 0x00, 0x00, // export
        0x0a, 0x09, 0x01, 0x07, 0x00, 0x03, 0x40, 0x0c, 0x00, 0x0b, 0x0b, // code
    ];

    /// Runs `spin` on `engine` with its deadline one tick ahead; true if
    /// the deadline ended it within 5 s (it spins on otherwise, on a
    /// thread of its own, and the test fails).
    fn interrupted(engine: &Engine) -> bool {
        let engine = engine.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let module = wasmtime::Module::new(&engine, SPIN).expect("module");
            let mut store = wasmtime::Store::new(&engine, ());
            store.set_epoch_deadline(1);
            store.epoch_deadline_trap();
            let instance = wasmtime::Instance::new(&mut store, &module, &[]).expect("instance");
            let spin = instance
                .get_typed_func::<(), ()>(&mut store, "spin")
                .expect("spin");
            let trap = spin
                .call(&mut store, ())
                .err()
                .and_then(|e| e.downcast_ref::<wasmtime::Trap>().copied());
            let _ = tx.send(trap == Some(wasmtime::Trap::Interrupt));
        });
        rx.recv_timeout(Duration::from_secs(5)).unwrap_or(false)
    }

    #[test]
    fn the_ticker_ticks_engines_while_a_store_lives_and_sleeps_between() {
        // A ticker of this test's own: the process's is shared with
        // every other test that runs wasm.
        let ticker: &'static Ticker = Box::leak(Box::new(Ticker::new()));
        let mut config = wasmtime::Config::new();
        config.epoch_interruption(true);
        let engine = Engine::new(&config).expect("engine");
        ticker.register(&engine).expect("ticker thread");

        // Nothing held: asleep, and no tick in 10 periods.
        assert!(until(ticker, asleep), "the ticker never slept");
        std::thread::sleep(EPOCH_TICK * 10);
        assert_eq!(ticks(ticker), 0);

        // Held: the engine's epoch advances, and a spinning guest is
        // interrupted at its deadline.
        let held = ticker.hold();
        assert!(interrupted(&engine), "no tick reached the engine");
        // Waited for, not read once: the guest saw the engine's epoch, a
        // relaxed atomic that orders nothing else of the ticker's.
        assert!(until(ticker, |t| ticks(t) >= 1), "no round counted");

        // Two holds, one let go: still ticking.
        let second = ticker.hold();
        drop(held);
        let from = ticks(ticker);
        assert!(until(ticker, |t| ticks(t) >= from + 2), "one hold left");

        // None left: asleep after its grace rounds, and no tick since.
        drop(second);
        assert!(until(ticker, asleep), "the ticker did not go back to sleep");
        let settled = ticks(ticker);
        std::thread::sleep(EPOCH_TICK * 10);
        assert_eq!(ticks(ticker), settled);
        assert!(asleep(ticker));

        // It wakes again for the next store.
        let again = ticker.hold();
        assert!(interrupted(&engine), "no tick after waking again");
        drop(again);
        drop(engine);
    }
}
