//! The `wasm` backend: WASI tools in wasmtime.
//!
//! Invariants: a guest sees only what the plan gives it: its argv, exactly the
//! plan's environment, its stdin bytes (or EOF), capped stdout/stderr, and each
//! allowed dir preopened under its guest path (read-only ones read-only) plus
//! the cwd as `.` unless the cwd is the dir preopened as `/` (`build_wasi`);
//! with no allowed dir, no preopen at all. In them it opens only files,
//! directories and symlinks (`special`).
//! There are no sockets and no name lookup. Memory is held by a resource
//! limiter that ends the call on a failed grow; CPU by epoch deadlines or fuel;
//! bytes written to files by the host, per call; the whole call by a wall-clock
//! timeout that also ends a guest blocked inside a host call.
//!
//! One `Engine` per configuration while something holds it, and for the
//! last few configurations asked for (`engine::Engines`); compiled modules
//! are cached on disk
//! (`cache`) and as `InstancePre`s in memory; each call gets a fresh `Store`.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::task::Poll;
use std::time::{Duration, Instant};

use wasmtime::{Engine, Store, UpdateDeadline};
use wasmtime_wasi::{I32Exit, WasiCtxBuilder};

use crate::config::{CpuMeter, WasmConfig};
use crate::outcome::{Outcome, OutcomeKind, RunOutput};
use crate::plan::BackendKind;
use crate::plan::ToolFile;
use crate::plan::{ExecPlan, Limits};

pub mod builtin;
pub mod catalog;
mod classify;
mod component;
mod ctx;
mod engine;
mod epoch;
mod guard_p1;
mod guard_p2;
mod guard_path;
mod inline_io;
mod limits;
mod p1;
mod p3;
mod probe;
mod protect;
pub mod registry;
mod runner;
mod sleep_p1;
mod special;
mod streams;
mod tier;

use component::CState;

use classify::{Hits, classify, instantiation};
use ctx::build_wasi;
pub use engine::TypedToolInfo;
use engine::{Loaded, WasmEngine};
use limits::{Common, FileBudget, HasCommon, Limiter};
use p1::State;
pub use probe::probe_without_engine;
use streams::CappedPipe;
pub use tier::{compile_into_cache, defer_tier_ups, hand_off_tier_ups};

/// Epoch tick: the granularity of CPU accounting (epoch meter) and of yields
/// to the async executor, which is what lets the timeout fire on a spinning guest.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Fuel units per second of guest compute, measured on the reference machine
/// (2-core x86_64) by the `wasm` benchmark, which prints the current figures:
/// 8.7e9 to 1.5e10 per second for a tight integer loop and 9.8e9 to 1.8e10 for
/// sha256 (built at opt-level 3). A limit of N CPU seconds under fuel is N times
/// this much fuel.
pub const FUEL_PER_SECOND: u64 = 10_000_000_000;

static LAST_FUEL_USED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(u64::MAX);

/// Fuel consumed by the most recent fuel-metered call of this process, if any:
/// a diagnostic for calibrating [`FUEL_PER_SECOND`] (see the `wasm` benchmark).
pub fn fuel_used_by_last_call() -> Option<u64> {
    let v = LAST_FUEL_USED.load(std::sync::atomic::Ordering::Relaxed);
    (v != u64::MAX).then_some(v)
}

/// How many threads blocked opening a FIFO for a guest this process has
/// interrupted (Linux; see `special`): a diagnostic, and what the tests look
/// at.
pub fn fifo_opens_interrupted() -> u64 {
    special::INTERRUPTED.load(Relaxed)
}

/// How many special files a preview-1 guest's open was refused by
/// toolhost's own lookup on a shared preopen's directory (one lookup where
/// wasmtime-wasi's stat makes two; see `p1::p1_precheck`): a diagnostic,
/// and what the tests look at.
#[doc(hidden)]
pub fn special_files_refused_by_preopen_lookup() -> u64 {
    special::REFUSED_BY_PREOPEN.load(Relaxed)
}

/// Whether a wasm guest's open that waits on a FIFO is ended here (Linux,
/// with `SIGURG` free for toolhost's watchdog, which it self-tests once; this
/// waits for that test). Paths are checked before they are opened everywhere;
/// without the watchdog, a FIFO swapped in after that check can hold a
/// blocking-pool thread until a partner appears.
pub fn fifo_watchdog_available() -> bool {
    special::watchdog_available()
}

/// Whether the last wasm call prepared on this thread runs its file
/// operations on the thread that polls it (`None`: no call yet): a
/// preview-1 call on a multi-thread runtime, once the FIFO watchdog runs
/// (Linux), which moves to a thread of its own (`runner`) at its first
/// file operation; otherwise each operation goes to tokio's blocking pool.
/// A diagnostic, and what the tests look at.
#[doc(hidden)]
pub fn last_call_file_io_inline() -> Option<bool> {
    inline_io::LAST.with(|l| l.get())
}

thread_local! {
    static LAST_MOVED_CPU: std::cell::Cell<Option<(bool, bool)>> =
        const { std::cell::Cell::new(None) };
}

#[doc(hidden)]
pub use runner::Wait as MovedCallWait;

thread_local! {
    static LAST_MOVED_WAIT: std::cell::Cell<Option<runner::Wait>> =
        const { std::cell::Cell::new(None) };
}

/// For the last call started on this thread, if it moved to a runner and
/// returned to its caller here (else `None`): how the caller waited for
/// its result (`runner.rs` has why). A diagnostic, and what the tests look
/// at.
#[doc(hidden)]
pub fn last_moved_call_wait() -> Option<MovedCallWait> {
    LAST_MOVED_WAIT.with(|l| l.get())
}

/// For the last call that moved to a runner and returned to its caller on
/// this thread (`None`: none yet): whether the runner was bound to one CPU
/// when the call started there, and whether it was let go of it during
/// the call (at an epoch tick). A diagnostic, and what the tests look at.
#[doc(hidden)]
pub fn last_moved_call_cpu() -> Option<(bool, bool)> {
    LAST_MOVED_CPU.with(|l| l.get())
}

/// Waits for the FIFO watchdog's self-test if one has started (a few ms), so
/// that it leaves no temp dir behind ([`crate::Sandbox::shutdown`] calls it).
pub(crate) fn settle_background_checks() {
    special::settle();
}

/// Waits for the background checks on the blocking pool, if one runs:
/// most processes never start one, and need no thread for it.
pub(crate) async fn settle_background_checks_async() {
    if special::unsettled() {
        let _ = tokio::task::spawn_blocking(settle_background_checks).await;
    }
}

/// Tests only: skip the check of a path before a guest opens it, so that an
/// open of a FIFO reaches the real open and the watchdog (`special`).
#[doc(hidden)]
pub fn skip_special_file_precheck(on: bool) {
    special::SKIP_PRECHECK.store(on, Relaxed);
}

/// Core instances one component may hold in the pool (a Rust wasip2 component
/// has 3: its module, a shim and a fixup module).
const MAX_CORE_INSTANCES_PER_COMPONENT: u32 = 8;

/// Largest WebAssembly file accepted as a tool.
const MAX_TOOL_BYTES: u64 = 256 << 20;

/// Largest description and input schema a typed tool may declare.
const MAX_DESCRIPTION_BYTES: usize = 4096;
const MAX_SCHEMA_BYTES: usize = 64 << 10;

/// Largest table a guest may grow to (elements): the pooling allocator's
/// default, for a store of any engine (`limits::Limiter`).
const MAX_TABLE_ELEMENTS: usize = 20_000;
/// Handles (open files, dirs, streams...) one guest may hold at once. Each
/// open file is a host fd of toolhost's: without a cap, a guest opening files
/// in a loop took every fd of the process (4075 of 4096, measured) and every
/// other call failed meanwhile. Past the cap, the guest's open fails.
const MAX_GUEST_HANDLES: usize = 1024;

/// WASI preview-1 errno values used by the host-side file budget.
const ERRNO_FAULT: i32 = 21;
const ERRNO_FBIG: i32 = 22;
/// Preview-1 `errno::nametoolong`.
const ERRNO_NAMETOOLONG: i32 = 37;
/// The longest path a guest may pass to the calls toolhost checks before
/// they open (`path_open`, `open-at`, set-times): longer than any host takes
/// (Linux 4096 bytes; Windows 32,767 UTF-16 units, at most 96 KiB of
/// UTF-8), so such a path gets `nametoolong` at once instead of being copied
/// for the check and the open (a 120 MiB path was held three more times).
pub(crate) const MAX_GUEST_PATH: usize = 128 * 1024;
/// Refusal of a special file (`special`), and the EINTR its watchdog causes.
const ERRNO_PERM: i32 = 63;
const ERRNO_INTR: i32 = 27;

/// Runs plans as WASI guests.
#[derive(Debug)]
pub struct WasmBackend {
    engine: Arc<WasmEngine>,
    /// The preopens of calls whose cwd is an allowed dir (`ctx`).
    preopens: ctx::Preopens,
    /// The compile cache's dir as configured (`None`: the cache is off).
    cache_dir: Option<std::path::PathBuf>,
    /// The tier-ups this backend's calls started (`tier`): what its
    /// shutdown waits for.
    tier_ups: Arc<tier::TierUps>,
}

impl WasmBackend {
    /// The backend over the engine of this configuration, shared with the
    /// process's other backends of it (`engine::Engines`).
    pub fn new(config: &WasmConfig) -> wasmtime::Result<Self> {
        Ok(WasmBackend {
            engine: WasmEngine::shared(config)?,
            preopens: ctx::Preopens::default(),
            cache_dir: engine::configured_cache_dir(config),
            tier_ups: Arc::default(),
        })
    }

    /// The shared wasmtime engine (for tests and benchmarks).
    pub fn engine(&self) -> &Engine {
        self.engine.engine()
    }

    /// Compiles `wasm` through the disk cache; `true` when it came from the cache.
    pub fn compile_cached(&self, wasm: &[u8]) -> wasmtime::Result<bool> {
        self.engine.compile(wasm).map(|(_, hit)| hit)
    }

    /// Runs the plan's WASI tool: a preview-1 command module or a preview-2
    /// command component.
    pub async fn run(&self, plan: &ExecPlan) -> RunOutput {
        let start = Instant::now();
        let refuse = |o: Outcome| RunOutput::refused(BackendKind::Wasm, o, start.elapsed());
        let Some(target) = &plan.wasm else {
            return refuse(Outcome::new(
                OutcomeKind::InvalidRequest,
                "no WASI tool in the plan",
            ));
        };
        let deadline = tokio::time::Instant::from_std(start) + plan.limits.timeout;
        let loaded = match self.engine.load_by(target, deadline, &self.tier_ups).await {
            Ok(l) => l,
            Err(o) => return refuse(o).timed_out_if_so(),
        };
        let stdout = CappedPipe::new(plan.limits.stdout_cap);
        let stderr = CappedPipe::new(plan.limits.stderr_cap);
        // Preview-1 modules only: their sleep is kept a timer (`sleep_p1`).
        let inline = match &*loaded {
            Loaded::Module(_) => {
                inline_io::claim(&self.engine.inline_calls, self.engine.max_inline_calls)
            }
            _ => None,
        };
        let (builder, guard, fs) = match build_wasi(
            plan,
            &target.name,
            &stdout,
            &stderr,
            &self.preopens,
            inline.is_some(),
        ) {
            Ok(b) => b,
            Err(o) => return refuse(o),
        };
        let limits = &plan.limits;
        let ended = match &*loaded {
            Loaded::Module(pre) => {
                let mut builder = builder;
                let mut wasi = builder.build_p1();
                let view = wasmtime_wasi::WasiView::ctx(&mut wasi);
                view.table.set_max_capacity(MAX_GUEST_HANDLES);
                // toolhost's own lookup before an open is a blocking system
                // call: only for a call whose file operations run inline
                // (moved to a runner before its first), never on a runtime
                // worker, where a stuck FUSE or NFS server would hold it.
                let dirs = ctx::install(view.ctx, fs).filter(|_| inline.is_some());
                let mut common = self.common(limits);
                common.guard = guard;
                let memory = pre.module().get_export_index("memory");
                let state = State {
                    wasi,
                    common,
                    memory,
                    dirs,
                };
                let pre = pre.clone();
                self.execute(
                    loaded.engine(),
                    limits,
                    deadline,
                    state,
                    inline,
                    move |store| {
                        Box::pin(async move {
                            let instance = pre
                                .instantiate_async(&mut *store)
                                .await
                                .map_err(instantiation)?;
                            let main = instance.get_typed_func::<(), ()>(&mut *store, "_start")?;
                            main.call_async(&mut *store, ()).await
                        })
                    },
                )
                .await
            }
            Loaded::Command(pre) => {
                let mut state = self.component_state(builder, limits);
                ctx::install(&mut state.ctx, fs);
                state.common.guard = guard;
                let pre = pre.clone();
                self.execute(
                    loaded.engine(),
                    limits,
                    deadline,
                    state,
                    None,
                    move |store| {
                        Box::pin(async move {
                            let cmd = pre
                                .instantiate_async(&mut *store)
                                .await
                                .map_err(instantiation)?;
                            match cmd.wasi_cli_run().call_run(&mut *store).await? {
                                Ok(()) => Ok(()),
                                Err(()) => Err(I32Exit(1).into()),
                            }
                        })
                    },
                )
                .await
            }
            Loaded::CommandP3(pre) => {
                let mut state = self.component_state(builder, limits);
                ctx::install(&mut state.ctx, fs);
                state.common.guard = guard;
                let pre = pre.clone();
                self.execute(
                    loaded.engine(),
                    limits,
                    deadline,
                    state,
                    None,
                    move |store| {
                        Box::pin(async move {
                            let cmd = pre
                                .instantiate_async(&mut *store)
                                .await
                                .map_err(instantiation)?;
                            let ran = store
                                .run_concurrent(async move |acc| {
                                    cmd.wasi_cli_run().call_run(acc).await
                                })
                                .await??;
                            match ran {
                                Ok(()) => Ok(()),
                                Err(()) => Err(I32Exit(1).into()),
                            }
                        })
                    },
                )
                .await
            }
            Loaded::Typed(..) => {
                return refuse(Outcome::new(
                    OutcomeKind::InvalidRequest,
                    format!(
                        "{0} is a typed tool (toolhost:tool world): call it with a JSON input (`toolhost call {0} JSON`), not with arguments",
                        target.name
                    ),
                ));
            }
        };
        self.finish(limits, start, ended, &stdout, &stderr).0
    }

    /// Describes a typed tool (`Ok(None)` for a command), calling its
    /// `describe` once per tool file with no preopened dirs and no environment.
    pub async fn describe(
        &self,
        tool: &ToolFile,
        limits: &Limits,
    ) -> Result<Option<TypedToolInfo>, Outcome> {
        let start = Instant::now();
        let deadline = tokio::time::Instant::from_std(start) + limits.timeout;
        let loaded = self.engine.load_by(tool, deadline, &self.tier_ups).await?;
        let Loaded::Typed(pre, info) = &*loaded else {
            return Ok(None);
        };
        if let Some(i) = info.get() {
            return Ok(Some(i.clone()));
        }
        let fail =
            |m: String| Outcome::new(OutcomeKind::LaunchFailed, format!("{}: {m}", tool.name));
        let stdout = CappedPipe::new(limits.stdout_cap);
        let stderr = CappedPipe::new(limits.stderr_cap);
        let mut b = WasiCtxBuilder::new();
        b.args(std::slice::from_ref(&tool.name))
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        let state = self.component_state(b, limits);
        let pre = pre.clone();
        let ended = self
            .execute(
                loaded.engine(),
                limits,
                deadline,
                state,
                None,
                move |store| {
                    Box::pin(async move {
                        let t = pre
                            .instantiate_async(&mut *store)
                            .await
                            .map_err(instantiation)?;
                        t.toolhost_tool_typed_tool()
                            .call_describe(&mut *store)
                            .await
                    })
                },
            )
            .await;
        let (run, got) = self.finish(limits, start, ended, &stdout, &stderr);
        let Some(got) = got else {
            return Err(fail(format!("describe failed: {}", run.outcome.message)));
        };
        if got.name != tool.name {
            return Err(fail(format!(
                "the tool calls itself {:?}; its file must be named {:?}.wasm",
                got.name, got.name
            )));
        }
        if got.description.len() > MAX_DESCRIPTION_BYTES {
            return Err(fail(format!(
                "its description is longer than {MAX_DESCRIPTION_BYTES} bytes"
            )));
        }
        if got.input_schema.len() > MAX_SCHEMA_BYTES {
            return Err(fail(format!(
                "its input schema is longer than {MAX_SCHEMA_BYTES} bytes"
            )));
        }
        let input_schema: serde_json::Value = serde_json::from_str(&got.input_schema)
            .map_err(|e| fail(format!("its input schema is not JSON: {e}")))?;
        if !input_schema.is_object() {
            return Err(fail("its input schema is not a JSON object".into()));
        }
        let described = TypedToolInfo {
            name: got.name,
            description: got.description,
            input_schema,
        };
        Ok(Some(info.get_or_init(|| described).clone()))
    }

    /// Calls the plan's typed tool with `input` (JSON text). The plan's dirs,
    /// environment and limits apply as for a command.
    pub async fn call_typed(&self, plan: &ExecPlan, input: &str) -> TypedCall {
        let start = Instant::now();
        let refuse = |o: Outcome| TypedCall {
            result: None,
            run: RunOutput::refused(BackendKind::Wasm, o, start.elapsed()),
        };
        let Some(target) = &plan.wasm else {
            return refuse(Outcome::new(
                OutcomeKind::InvalidRequest,
                "no WASI tool in the plan",
            ));
        };
        let deadline = tokio::time::Instant::from_std(start) + plan.limits.timeout;
        let loaded = match self.engine.load_by(target, deadline, &self.tier_ups).await {
            Ok(l) => l,
            Err(o) => {
                let mut r = refuse(o);
                r.run = r.run.timed_out_if_so();
                return r;
            }
        };
        let Loaded::Typed(pre, _) = &*loaded else {
            return refuse(Outcome::new(
                OutcomeKind::InvalidRequest,
                format!(
                    "{0} is a WASI command, not a typed tool: run it with arguments (`toolhost run --backend wasm -- {0} ...`)",
                    target.name
                ),
            ));
        };
        let stdout = CappedPipe::new(plan.limits.stdout_cap);
        let stderr = CappedPipe::new(plan.limits.stderr_cap);
        let (builder, guard, fs) =
            match build_wasi(plan, &target.name, &stdout, &stderr, &self.preopens, false) {
                Ok(b) => b,
                Err(o) => return refuse(o),
            };
        let mut state = self.component_state(builder, &plan.limits);
        ctx::install(&mut state.ctx, fs);
        state.common.guard = guard;
        let pre = pre.clone();
        let input = input.to_string();
        let ended = self
            .execute(
                loaded.engine(),
                &plan.limits,
                deadline,
                state,
                None,
                move |store| {
                    Box::pin(async move {
                        let t = pre
                            .instantiate_async(&mut *store)
                            .await
                            .map_err(instantiation)?;
                        t.toolhost_tool_typed_tool()
                            .call_call(&mut *store, &input)
                            .await
                    })
                },
            )
            .await;
        let (run, result) = self.finish(&plan.limits, start, ended, &stdout, &stderr);
        TypedCall { result, run }
    }

    /// The RunOutput of an executed call, and the guest's return value if it
    /// returned one.
    fn finish<R>(
        &self,
        limits: &Limits,
        start: Instant,
        ended: Executed<R>,
        stdout: &CappedPipe,
        stderr: &CappedPipe,
    ) -> (RunOutput, Option<R>) {
        let out = stdout.take();
        let err = stderr.take();
        let truncated = out.truncated() || err.truncated();
        let (outcome, returncode, timed_out, value) = match ended {
            Executed::Refused(o) => (o, None, false, None),
            Executed::TimedOut => (
                Outcome::new(
                    OutcomeKind::TimedOut,
                    format!(
                        "timed out after {}; the guest was stopped",
                        super::direct::fmt_secs(limits.timeout)
                    ),
                ),
                None,
                true,
                None,
            ),
            Executed::Done(result, hits) => {
                let (result, value) = match result {
                    Ok(v) => (Ok(()), Some(v)),
                    Err(e) => (Err(e), None),
                };
                let (o, rc) = classify(limits, self.engine.meter, result, hits);
                (o, rc, false, value)
            }
        };
        let run = RunOutput {
            stdout: out.into_string(),
            stderr: err.into_string(),
            returncode,
            timed_out,
            truncated,
            outcome,
            backend: BackendKind::Wasm,
            duration: start.elapsed(),
            isolation: None,
        };
        (run, value)
    }

    fn common(&self, limits: &Limits) -> Common {
        let cpu_ticks = match self.engine.meter {
            CpuMeter::Epoch => limits
                .cpu_seconds
                .map(|s| s.saturating_mul(1000) / EPOCH_TICK.as_millis() as u64),
            CpuMeter::Fuel => None,
        };
        Common {
            limiter: Limiter::new(
                limits
                    .memory_bytes
                    .map(|b| usize::try_from(b).unwrap_or(usize::MAX)),
            ),
            files: Arc::new(FileBudget::new(limits.file_size_bytes)),
            cpu_ticks_left: cpu_ticks,
            cpu_hit: false,
            guard: protect::Guard::default(),
            move_to_task: None,
            ended: None,
            _ticking: epoch::hold(),
        }
    }

    fn component_state(&self, mut builder: WasiCtxBuilder, limits: &Limits) -> CState {
        let mut table = wasmtime::component::ResourceTable::new();
        table.set_max_capacity(MAX_GUEST_HANDLES);
        CState {
            ctx: builder.build(),
            table,
            common: self.common(limits),
        }
    }

    /// Runs `body` on a fresh store of `engine` (the tool's: the shared
    /// engine, or its baseline tier's) holding `state`, within the limits:
    /// the store's limiter, epoch or fuel, a pool slot, and the wall-clock
    /// timeout.
    /// An `inline` call (file operations on the thread that polls it) moves
    /// to a runner at its first file operation, and the timeout stays with
    /// the caller (`inline_io`, `runner`).
    async fn execute<T, R>(
        &self,
        engine: &Engine,
        limits: &Limits,
        deadline: tokio::time::Instant,
        state: T,
        inline: Option<inline_io::InlineSlot>,
        body: impl for<'s> FnOnce(
            &'s mut Store<T>,
        ) -> std::pin::Pin<
            Box<dyn std::future::Future<Output = wasmtime::Result<R>> + Send + 's>,
        > + Send
        + 'static,
    ) -> Executed<R>
    where
        T: HasCommon + Send + 'static,
        R: Send + 'static,
    {
        LAST_MOVED_WAIT.with(|l| l.set(None));
        let mut store = Store::new(engine, state);
        let moved = inline.as_ref().map(|_| Arc::new(AtomicBool::new(false)));
        let ended = inline.as_ref().map(|_| Arc::new(AtomicBool::new(false)));
        store.data_mut().common().move_to_task = moved.clone();
        store.data_mut().common().ended = ended.clone();
        store.limiter(|s| &mut s.common().limiter);
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(|mut ctx| {
            runner::release_cpu();
            let s = ctx.data_mut().common();
            if let Some(left) = s.cpu_ticks_left.as_mut() {
                if *left == 0 {
                    s.cpu_hit = true;
                    return Ok(UpdateDeadline::Interrupt);
                }
                *left -= 1;
            }
            Ok(UpdateDeadline::Yield(1))
        });
        let mut initial_fuel = None;
        if self.engine.meter == CpuMeter::Fuel {
            let fuel = limits
                .cpu_seconds
                .map(|s| s.saturating_mul(FUEL_PER_SECOND))
                .unwrap_or(u64::MAX);
            if store.set_fuel(fuel).is_err()
                || store
                    .fuel_async_yield_interval(Some(FUEL_PER_SECOND / 100))
                    .is_err()
            {
                return Executed::Refused(Outcome::new(
                    OutcomeKind::BackendUnavailable,
                    "fuel metering is not enabled in this engine",
                ));
            }
            initial_fuel = Some(fuel);
        }
        let slots = self.engine.slots.clone();
        let held_engine = Arc::clone(&self.engine);
        let call = async move {
            // The pool slot is released only after the store (and the instance
            // it holds) is gone, whether the call ends or is cancelled.
            let permit = match slots {
                Some(s) => match s.acquire_owned().await {
                    Ok(p) => Some(p),
                    Err(e) => return (Err(e.into()), Hits::default()),
                },
                None => None,
            };
            let mut held = PooledStore {
                store,
                _permit: permit,
                _inline: inline,
                _engine: held_engine,
            };
            let store = &mut held.store;
            let result = body(store).await;
            // Asked only under fuel: without it, `get_fuel` makes an error.
            if let Some(initial) = initial_fuel
                && let Ok(left) = store.get_fuel()
            {
                LAST_FUEL_USED.store(initial.saturating_sub(left), Relaxed);
            }
            let s = store.data_mut().common();
            let hits = Hits {
                memory: s.limiter.hit,
                cpu: s.cpu_hit,
                files: s.files.hit(),
            };
            (result, hits)
        };
        let (Some(moved), Some(ended)) = (moved, ended) else {
            return match tokio::time::timeout_at(deadline, call).await {
                Ok((result, hits)) => Executed::Done(result, hits),
                Err(_) => Executed::TimedOut,
            };
        };
        // In the caller's task until its first file operation asks to move
        // (`inline_io::before_file_op`); a call that touches no file ends here.
        let mut call = Box::pin(call);
        let first = std::future::poll_fn(|cx| match call.as_mut().poll(cx) {
            Poll::Ready(done) => Poll::Ready(Some(done)),
            Poll::Pending if moved.load(Acquire) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        });
        match tokio::time::timeout_at(deadline, first).await {
            Err(_) => return Executed::TimedOut,
            Ok(Some((result, hits))) => return Executed::Done(result, hits),
            Ok(None) => {}
        }
        // The rest runs on a runner (`runner`), to its end: an operation
        // that waits holds that thread, never a runtime worker, and the
        // caller's timeout fires on time. The call is dropped there too (a
        // close can wait as well), at its next yield once the caller is done
        // with it. A panic there comes back here with the result.
        let (cancel, cancelled) = tokio::sync::oneshot::channel::<()>();
        let (done, finished) = tokio::sync::oneshot::channel();
        let rt = tokio::runtime::Handle::current();
        let job: runner::Job = Box::new(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                rt.block_on(async move {
                    tokio::select! {
                        biased;
                        _ = cancelled => None,
                        done = call => Some(done),
                    }
                })
            }));
            let cpu = runner::this_call();
            Box::new(move || {
                let _ = done.send((r, cpu));
            })
        });
        // Read before the hand-off, while this call holds its inline slot:
        // once on its runner, the call may end (and give the slot back)
        // before this thread looks.
        let alone = self.engine.inline_calls.load(Acquire) == 1;
        let placed = match runner::run(job) {
            Ok(placed) => placed,
            Err(job) => {
                // No runner could start: tokio's blocking pool, as before
                // runners (which panics, as then, if it cannot start a
                // thread either).
                drop(tokio::task::spawn_blocking(move || job()()));
                runner::Placed { here: None }
            }
        };
        let _cancel = CancelOnDrop(Some(cancel), ended);
        // A short call's result, while this thread gave its CPU to the
        // runner (`runner::wait_here`), up to the deadline at most; after
        // `try_recv` has seen a result, or seen that none will come, the
        // receiver is done with and must not be awaited.
        use tokio::sync::oneshot::error::TryRecvError;
        let mut finished = finished;
        let mut early = None;
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let wait = runner::wait_here(placed, alone, left, || match finished.try_recv() {
            Ok(r) => {
                early = Some(r);
                runner::Ready::Yes
            }
            Err(TryRecvError::Closed) => runner::Ready::Never,
            Err(TryRecvError::Empty) => runner::Ready::No,
        });
        let got = match (early, wait) {
            (Some(r), _) => Ok(r),
            (None, runner::Wait::Lost) => return Executed::TimedOut,
            (None, _) => match tokio::time::timeout_at(deadline, finished).await {
                Ok(Ok(r)) => Ok(r),
                Ok(Err(_)) | Err(_) => Err(()),
            },
        };
        match got {
            Ok((r, cpu)) => {
                LAST_MOVED_CPU.with(|l| l.set(Some(cpu)));
                LAST_MOVED_WAIT.with(|l| l.set(Some(wait)));
                match r {
                    Ok(Some((result, hits))) => Executed::Done(result, hits),
                    Err(panic) => std::panic::resume_unwind(panic),
                    Ok(None) => Executed::TimedOut,
                }
            }
            Err(()) => Executed::TimedOut,
        }
    }
}

/// Cancels a call that moved to a thread of its own when the caller is done
/// with it, first telling its file operations to trap
/// (`inline_io::still_wanted`): the cancel only takes effect when the call
/// yields.
struct CancelOnDrop(Option<tokio::sync::oneshot::Sender<()>>, Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.1.store(true, Release);
        drop(self.0.take());
    }
}

/// A store and the pool slot it runs in; fields drop in order, so the slot is
/// released after the store's instances are deallocated.
struct PooledStore<T: 'static> {
    store: Store<T>,
    _permit: Option<tokio::sync::OwnedSemaphorePermit>,
    /// An inline call's slot, held to its end (`inline_io`).
    _inline: Option<inline_io::InlineSlot>,
    /// The engine whose pool and slots these are, held while the store
    /// lives: a call moved to a runner can outlive its sandbox, and while
    /// it does its configuration gets this engine (`engine::Engines`), not
    /// a new one with slots of its own.
    _engine: Arc<WasmEngine>,
}

/// How an executed call ended.
enum Executed<R> {
    /// It could not start.
    Refused(Outcome),
    /// The wall-clock timeout ended it.
    TimedOut,
    /// It returned (or trapped, or exited).
    Done(wasmtime::Result<R>, Hits),
}

/// The result of a typed tool call at the backend level.
#[derive(Debug, Clone)]
pub struct TypedCall {
    /// The tool's answer: its JSON result text or its error message. `None`
    /// when the call did not complete (see `run.outcome`).
    pub result: Option<Result<String, String>>,
    /// What the tool printed, how the call ended, and how long it took.
    pub run: RunOutput,
}

impl crate::backend::Backend for WasmBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Wasm
    }

    async fn run(&self, plan: &ExecPlan) -> RunOutput {
        WasmBackend::run(self, plan).await
    }

    async fn probe(&self, limits: &Limits) -> crate::probe::Probe {
        self.probe_host(limits).await
    }

    /// Waits for the FIFO watchdog's self-test if one has started.
    async fn shutdown(&self) {
        settle_background_checks_async().await;
        self.tier_ups.done().await;
    }
}
