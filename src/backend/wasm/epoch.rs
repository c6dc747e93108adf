//! The epoch ticker: one thread per process advances the epoch of every
//! wasm engine every [`EPOCH_TICK`], while at least one store runs.
//!
//! A guest is interrupted at each tick (its store's deadline is one tick
//! ahead, see `execute`): that is how its CPU limit is counted under the
//! `epoch` meter, and how a running guest yields, under either meter, so
//! that its call's timeout can end it. Between calls nothing needs the
//! epoch, so the ticker sleeps, and a process that holds an engine but runs
//! no wasm (an idle MCP server, a server making `direct` calls) is not
//! woken 100 times a second per engine. The first store to run wakes it;
//! its first tick comes one [`EPOCH_TICK`] after that, as a steady ticker's
//! would at the latest.
//!
//! Invariant: every store that runs guest code does so under a [`Running`]
//! hold (`execute` keeps it beside the store until the store is dropped).
//! A store run without one would never be interrupted: no CPU limit under
//! `epoch`, and no timeout under either meter.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

use wasmtime::{Engine, EngineWeak};

use super::EPOCH_TICK;

/// The process's ticker (see the module).
static TICKER: Ticker = Ticker::new();

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
}

impl Ticker {
    const fn new() -> Ticker {
        Ticker {
            state: Mutex::new(State {
                engines: Vec::new(),
                running: 0,
                started: false,
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
        state.engines.push(engine.weak());
        Ok(())
    }

    fn hold(&'static self) -> Running {
        let mut state = self.lock();
        state.running += 1;
        if state.running == 1 {
            self.wake.notify_one();
        }
        Running(self)
    }

    /// The thread: asleep while nothing runs; else a tick of every engine
    /// each [`EPOCH_TICK`].
    fn run(&self) {
        loop {
            let mut state = self.lock();
            while state.running == 0 {
                state = self.wake.wait(state).unwrap_or_else(|e| e.into_inner());
            }
            drop(state);
            std::thread::sleep(EPOCH_TICK);
            let mut state = self.lock();
            state.engines.retain(|weak| match weak.upgrade() {
                Some(engine) => {
                    engine.increment_epoch();
                    true
                }
                None => false,
            });
            self.ticks.fetch_add(1, Ordering::Relaxed);
        }
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

    /// Rounds ticked once `ticker` has ticked at least `n` more than
    /// `from` (or 2 s have passed).
    fn ticks_reach(ticker: &Ticker, from: u64, n: u64) -> u64 {
        let start = Instant::now();
        loop {
            let now = ticker.ticks.load(Ordering::Relaxed);
            if now >= from + n || start.elapsed() > Duration::from_secs(2) {
                return now;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn the_ticker_ticks_while_a_store_runs_and_sleeps_between() {
        // A ticker of this test's own: the process's is shared with
        // every other test that runs wasm.
        let ticker: &'static Ticker = Box::leak(Box::new(Ticker::new()));
        let mut config = wasmtime::Config::new();
        config.epoch_interruption(true);
        let engine = Engine::new(&config).expect("engine");
        ticker.register(&engine).expect("ticker thread");

        // Nothing runs: no tick in 10 periods.
        std::thread::sleep(EPOCH_TICK * 10);
        assert_eq!(ticker.ticks.load(Ordering::Relaxed), 0);

        // A store runs: ticks come.
        let held = ticker.hold();
        let ticked = ticks_reach(ticker, 0, 3);
        assert!(ticked >= 3, "{ticked} ticks while held");

        // Two holds, one let go: still ticking.
        let second = ticker.hold();
        drop(held);
        let more = ticks_reach(ticker, ticked, 2);
        assert!(more >= ticked + 2, "{more} after {ticked}, one hold left");

        // None left: at most the round under way ends, then none.
        drop(second);
        std::thread::sleep(EPOCH_TICK * 2);
        let settled = ticker.ticks.load(Ordering::Relaxed);
        std::thread::sleep(EPOCH_TICK * 10);
        assert_eq!(ticker.ticks.load(Ordering::Relaxed), settled);

        // And it wakes again for the next store.
        let again = ticker.hold();
        let woke = ticks_reach(ticker, settled, 2);
        assert!(woke >= settled + 2, "{woke} after {settled}, held again");
        drop(again);
        drop(engine);
    }
}
