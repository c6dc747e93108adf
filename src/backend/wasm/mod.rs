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
//! One `Engine` per process and CPU meter; compiled modules are cached on disk
//! (`cache`) and as `InstancePre`s in memory; each call gets a fresh `Store`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use wasmtime::{
    Caller, Config, Engine, InstancePre, Linker, Module, ResourceLimiter, Store, Trap,
    UpdateDeadline,
};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::p2::pipe::MemoryInputPipe;
use wasmtime_wasi::{FsPerms, I32Exit, WasiCtxBuilder};

use crate::config::{CpuMeter, WasmConfig};
use crate::outcome::{Outcome, OutcomeKind, RunOutput};
use crate::plan::BackendKind;
use crate::plan::{ExecPlan, Limits};
use crate::plan::{ToolFile, ToolSource};

pub mod builtin;
pub(crate) mod cache;
mod component;
mod guard_p1;
mod guard_p2;
mod guard_path;
mod p3;
mod protect;
pub mod registry;
mod special;
mod streams;

use component::CState;

use streams::CappedPipe;

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

/// Whether a wasm guest's open that waits on a FIFO is ended here (Linux,
/// with `SIGURG` free for toolhost's watchdog, which it self-tests once; this
/// waits for that test). Paths are checked before they are opened everywhere;
/// without the watchdog, a FIFO swapped in after that check can hold a
/// blocking-pool thread until a partner appears.
pub fn fifo_watchdog_available() -> bool {
    special::watchdog_available()
}

/// Waits for the FIFO watchdog's self-test if one has started (a few ms), so
/// that it leaves no temp dir behind ([`crate::Sandbox::shutdown`] calls it).
pub(crate) fn settle_background_checks() {
    special::settle();
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

/// Largest table a guest may grow to (elements).
const MAX_TABLE_ELEMENTS: usize = 1 << 20;
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

/// Per-call store state of a preview-1 module.
struct State {
    wasi: WasiP1Ctx,
    common: Common,
}

/// Per-call state every kind of guest has: limits and what hit them.
pub(crate) struct Common {
    limiter: Limiter,
    files: Arc<FileBudget>,
    cpu_ticks_left: Option<u64>,
    cpu_hit: bool,
    /// The call's protected paths (`protect`).
    pub(crate) guard: protect::Guard,
}

/// Store data that carries the [`Common`] state.
pub(crate) trait HasCommon: Send + 'static {
    fn common(&mut self) -> &mut Common;
}

impl HasCommon for State {
    fn common(&mut self) -> &mut Common {
        &mut self.common
    }
}

struct Limiter {
    max_memory: Option<usize>,
    hit: bool,
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        match self.max_memory {
            Some(max) if desired > max => {
                self.hit = true;
                Err(wasmtime::format_err!(
                    "memory limit: growing linear memory to {desired} bytes exceeds {max}"
                ))
            }
            _ => Ok(true),
        }
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}

/// Bytes a call may still write to files (`max_file_size_mb`). Shared with the
/// budgeted file streams of preview-2 guests.
pub(crate) struct FileBudget {
    limit: Option<u64>,
    written: AtomicU64,
    hit: AtomicBool,
}

impl FileBudget {
    fn new(limit: Option<u64>) -> Self {
        FileBudget {
            limit,
            written: AtomicU64::new(0),
            hit: AtomicBool::new(false),
        }
    }

    /// Whether `bytes` more may be written; records the hit when not.
    pub(crate) fn admit(&self, bytes: u64) -> bool {
        match self.limit {
            Some(limit) if self.written.load(Relaxed).saturating_add(bytes) > limit => {
                self.hit.store(true, Relaxed);
                false
            }
            _ => true,
        }
    }

    /// Whether `len` bytes may be written at offset `start` of a file: the
    /// call's total stays within the budget and no file grows past it.
    pub(crate) fn admit_write(&self, start: u64, len: u64) -> bool {
        match self.limit {
            Some(limit) if start.saturating_add(len) > limit => {
                self.hit.store(true, Relaxed);
                false
            }
            _ => self.admit(len),
        }
    }

    /// Whether a file may be resized to `size` bytes, growing it by `growth`
    /// (which counts against the total, as written bytes do).
    pub(crate) fn admit_resize(&self, size: u64, growth: u64) -> bool {
        match self.limit {
            Some(limit) if size > limit => {
                self.hit.store(true, Relaxed);
                false
            }
            _ => self.admit(growth),
        }
    }

    /// Counts `bytes` written.
    pub(crate) fn add(&self, bytes: u64) {
        self.written.fetch_add(bytes, Relaxed);
    }

    /// Checks and counts `len` bytes at offset `start` in one step, so that
    /// writes in flight at once (preview 3's concurrent streams and calls)
    /// cannot all pass against the same total; [`refund`](Self::refund) what
    /// was not written. Records the hit when refused.
    pub(crate) fn reserve_write(&self, start: u64, len: u64) -> bool {
        if !self.fits_file(start, len) {
            return false;
        }
        self.reserve(len)
    }

    /// [`reserve_write`](Self::reserve_write) for a resize to `size` that
    /// grows a file by `growth`.
    pub(crate) fn reserve_resize(&self, size: u64, growth: u64) -> bool {
        if !self.fits_file(0, size) {
            return false;
        }
        self.reserve(growth)
    }

    /// Whether a file may reach `start + len` bytes (no file grows past the
    /// limit); records the hit when not.
    pub(crate) fn fits_file(&self, start: u64, len: u64) -> bool {
        match self.limit {
            Some(limit) if start.saturating_add(len) > limit => {
                self.hit.store(true, Relaxed);
                false
            }
            _ => true,
        }
    }

    fn reserve(&self, bytes: u64) -> bool {
        let Some(limit) = self.limit else {
            self.written.fetch_add(bytes, Relaxed);
            return true;
        };
        let r = self.written.fetch_update(Relaxed, Relaxed, |w| {
            w.checked_add(bytes).filter(|total| *total <= limit)
        });
        if r.is_err() {
            self.hit.store(true, Relaxed);
        }
        r.is_ok()
    }

    /// Gives back `bytes` reserved and not written.
    pub(crate) fn refund(&self, bytes: u64) {
        let _ = self
            .written
            .fetch_update(Relaxed, Relaxed, |w| Some(w.saturating_sub(bytes)));
    }

    fn hit(&self) -> bool {
        self.hit.load(Relaxed)
    }
}

/// A loaded tool: compiled, linked, ready to instantiate.
enum Loaded {
    /// A WASI preview-1 command module.
    Module(InstancePre<State>),
    /// A WASI preview-2 command component (`wasi:cli/run@0.2`).
    Command(wasmtime_wasi::p2::bindings::CommandPre<CState>),
    /// A WASI preview-3 command component (`wasi:cli/run@0.3`, `p3`).
    CommandP3(wasmtime_wasi::p3::bindings::CommandPre<CState>),
    /// A typed tool (the `toolhost:tool` world), with its description once known.
    Typed(component::ToolPre<CState>, OnceLock<TypedToolInfo>),
}

/// A typed tool's description of itself (the `toolhost:tool` world's `describe`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TypedToolInfo {
    /// Name the tool gave itself.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON Schema of its input.
    pub input_schema: serde_json::Value,
}

/// Identity of a tool file, to reuse its `InstancePre` while it is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct FileKey {
    /// A built-in tool (its `path` is `builtin:NAME.wasm`), never a file.
    builtin: bool,
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    path: PathBuf,
}

/// The engine of one CPU meter, shared by every sandbox of the process.
pub(crate) struct WasmEngine {
    engine: Engine,
    meter: CpuMeter,
    linker: Linker<State>,
    component_linker: wasmtime::component::Linker<CState>,
    cache: cache::DiskCache,
    loaded: Mutex<HashMap<FileKey, Arc<Loaded>>>,
    /// Compiles under way, by file: a second call for the same file waits for
    /// the same compile instead of starting another.
    compiling: Mutex<HashMap<FileKey, (u64, SharedLoad)>>,
    /// At most [`COMPILE_SLOTS`] compiles at once, abandoned ones included.
    compile_slots: Arc<tokio::sync::Semaphore>,
    /// One permit per pool slot: calls beyond the pool wait instead of failing.
    slots: Option<Arc<tokio::sync::Semaphore>>,
}

/// A compile on the blocking pool that any number of calls may wait for.
type SharedLoad = futures_util::future::Shared<
    futures_util::future::BoxFuture<'static, Result<Arc<Loaded>, Outcome>>,
>;

/// Compiles that may run at once. A compile cannot be stopped halfway, so one
/// whose call timed out runs to its end (its result is cached); this bounds
/// the CPU such abandoned compiles can take, whatever the calls ask.
const COMPILE_SLOTS: usize = 2;

impl std::fmt::Debug for WasmEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmEngine")
            .field("meter", &self.meter)
            .finish()
    }
}

/// What [`WasmEngine::lookup`] found.
enum Lookup {
    /// Loaded before.
    Loaded(Arc<Loaded>),
    /// Not yet: the open file (or the built-in bytes) and its key.
    Open(Box<(Opened, FileKey)>),
}

/// A tool's bytes, not read yet.
enum Opened {
    /// An open file and its metadata.
    File(cap_std::fs::File, cap_std::fs::Metadata),
    /// A built-in tool.
    Builtin(&'static [u8]),
}

/// Engines by (CPU meter, cache dir, cache cap, pool size).
type EngineMap = HashMap<(CpuMeter, Option<PathBuf>, u64, u32), Arc<WasmEngine>>;
static ENGINES: OnceLock<Mutex<EngineMap>> = OnceLock::new();

fn engine_config(meter: CpuMeter, pool_size: u32) -> Config {
    let mut c = Config::new();
    c.epoch_interruption(true);
    c.consume_fuel(meter == CpuMeter::Fuel);
    // Preview 3 runs on the component model's async ABI.
    c.wasm_component_model_async(true);
    // proc_exit is an error return: with backtraces on, every exit would walk
    // the guest's address maps (measured as the largest cost of a warm call).
    c.wasm_backtrace_max_frames(None);
    if pool_size > 0 {
        // Reused slots (memories, tables, async stacks) instead of an mmap and
        // munmap per call: measured about 20% faster at p50 and 2x better at p99
        // here. wasmtime resets each slot before reuse. A component instance
        // (preview 2) holds a few core instances and tables; each is capped
        // per component, so one call can never take another call's slots.
        let mut p = wasmtime::PoolingAllocationConfig::new();
        p.total_component_instances(pool_size)
            .total_core_instances(pool_size.saturating_mul(MAX_CORE_INSTANCES_PER_COMPONENT))
            .total_memories(pool_size.saturating_mul(2))
            .total_tables(pool_size.saturating_mul(4))
            .total_stacks(pool_size)
            .max_core_instances_per_component(MAX_CORE_INSTANCES_PER_COMPONENT)
            .max_memories_per_component(2)
            .max_tables_per_component(4);
        // Reset a reused memory by rewriting only its dirty pages (PAGEMAP_SCAN,
        // Linux 6.7+) and keep its first MiB resident: the guest's stack and
        // data then need no page faults on the next call. Measured 25-35 us per
        // warm call against 55-70 us with madvise resets. Warm slots are capped,
        // which bounds the memory kept resident to about 16 MiB.
        p.pagemap_scan(wasmtime::Enabled::Auto)
            .linear_memory_keep_resident(1 << 20)
            .table_keep_resident(64 << 10)
            .max_unused_warm_slots(16);
        c.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(p));
    }
    c
}

impl WasmEngine {
    /// The process-wide engine for this configuration, created on first use.
    pub(crate) fn shared(config: &WasmConfig) -> wasmtime::Result<Arc<WasmEngine>> {
        let cache_dir = if config.cache {
            config
                .cache_dir
                .clone()
                .or_else(crate::state_dirs::default_wasm_cache)
        } else {
            None
        };
        let key = (
            config.cpu_meter,
            cache_dir.clone(),
            config.cache_max_mb,
            config.pool_size,
        );
        let map = ENGINES.get_or_init(|| Mutex::new(HashMap::new()));
        let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = map.get(&key) {
            return Ok(e.clone());
        }
        let engine = Engine::new(&engine_config(config.cpu_meter, config.pool_size))?;
        let weak = engine.weak();
        std::thread::Builder::new()
            .name("toolhost-epoch".into())
            .spawn(move || {
                while let Some(engine) = weak.upgrade() {
                    engine.increment_epoch();
                    drop(engine);
                    std::thread::sleep(EPOCH_TICK);
                }
            })?;
        let linker = build_linker(&engine)?;
        let component_linker = component::build_linker(&engine)?;
        let e = Arc::new(WasmEngine {
            component_linker,
            cache: cache::DiskCache::new(
                &engine,
                cache_dir,
                (config.cache_max_mb > 0).then(|| config.cache_max_mb.saturating_mul(1 << 20)),
            ),
            engine,
            meter: config.cpu_meter,
            linker,
            loaded: Mutex::new(HashMap::new()),
            compiling: Mutex::new(HashMap::new()),
            compile_slots: Arc::new(tokio::sync::Semaphore::new(COMPILE_SLOTS)),
            slots: (config.pool_size > 0)
                .then(|| Arc::new(tokio::sync::Semaphore::new(config.pool_size as usize))),
        });
        map.insert(key, e.clone());
        Ok(e)
    }

    /// The wasmtime engine.
    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Compiles (or fetches) a module for `wasm`, with the disk cache.
    pub(crate) fn compile(&self, wasm: &[u8]) -> wasmtime::Result<(Module, bool)> {
        self.cache.load(&self.engine, wasm)
    }

    /// Compiles (or fetches) a component, with the disk cache.
    fn compile_component(&self, wasm: &[u8]) -> wasmtime::Result<wasmtime::component::Component> {
        self.cache.load(&self.engine, wasm).map(|(c, _)| c)
    }

    /// Loads `tool` by `deadline`: from memory when this file (same inode,
    /// size and mtime) was loaded before, else read and compiled (through the
    /// disk cache) on the blocking pool, never on the calling executor
    /// thread. Past the deadline the call gets `timed_out`; the compile goes
    /// on in the background and its result is kept for the next call.
    async fn load_by(
        self: &Arc<Self>,
        tool: &ToolFile,
        deadline: tokio::time::Instant,
    ) -> Result<Arc<Loaded>, Outcome> {
        use futures_util::FutureExt as _;
        let (opened, key) = match self.lookup(tool)? {
            Lookup::Loaded(l) => return Ok(l),
            Lookup::Open(b) => *b,
        };
        let key_for_map = key.clone();
        let shared = {
            let mut compiling = self.compiling.lock().unwrap_or_else(|e| e.into_inner());
            match compiling.get(&key_for_map) {
                Some((_, f)) => f.clone(),
                None => {
                    static NEXT: std::sync::atomic::AtomicU64 =
                        std::sync::atomic::AtomicU64::new(0);
                    let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let engine = self.clone();
                    let tool = tool.clone();
                    let k = key.clone();
                    // A task of its own: it runs to the end (and takes itself
                    // out of `compiling`) even if every waiting call is gone.
                    let task = tokio::spawn(async move {
                        let r = engine.read_and_compile(tool, opened, k, id).await;
                        // This compile's entry only (a skipped one is gone
                        // already, and a later compile of the file may have
                        // its own).
                        let mut map = engine.compiling.lock().unwrap_or_else(|e| e.into_inner());
                        if map.get(&key).is_some_and(|(i, _)| *i == id) {
                            map.remove(&key);
                        }
                        r
                    });
                    let f = async move {
                        task.await.unwrap_or_else(|e| {
                            Err(Outcome::new(
                                OutcomeKind::LaunchFailed,
                                format!("compiling failed: {e}"),
                            ))
                        })
                    }
                    .boxed()
                    .shared();
                    compiling.insert(key_for_map, (id, f.clone()));
                    f
                }
            }
        };
        match tokio::time::timeout_at(deadline, shared).await {
            Ok(r) => r,
            Err(_) => Err(Outcome::new(
                OutcomeKind::TimedOut,
                format!(
                    "timed out while compiling {} (it goes on in the background, at most {COMPILE_SLOTS} at once; the next call uses its result)",
                    tool.name
                ),
            )),
        }
    }

    /// The loaded tool if this file was loaded before, else the open file.
    fn lookup(&self, tool: &ToolFile) -> Result<Lookup, Outcome> {
        let fail = |kind, msg: String| Outcome::new(kind, msg);
        let (dir, rel) = match &tool.source {
            ToolSource::Builtin(bytes) => {
                let key = FileKey {
                    builtin: true,
                    dev: 0,
                    ino: 0,
                    size: bytes.len() as u64,
                    mtime_ns: 0,
                    path: tool.host_path.clone(),
                };
                if let Some(l) = self.lock_loaded().get(&key) {
                    return Ok(Lookup::Loaded(l.clone()));
                }
                return Ok(Lookup::Open(Box::new((Opened::Builtin(bytes), key))));
            }
            ToolSource::File { dir, rel } => (dir, rel),
        };
        // Non-blocking: a tool file that is a FIFO must not hold this
        // (executor) thread in open(2); it is refused below as not a file.
        let mut opts = cap_std::fs::OpenOptions::new();
        opts.read(true);
        #[cfg(unix)]
        cap_std::fs::OpenOptionsExt::custom_flags(&mut opts, libc::O_NONBLOCK);
        let file = dir.open_with(rel, &opts).map_err(|e| {
            fail(
                OutcomeKind::NotFound,
                format!("{}: cannot open: {}", tool.name, os_reason(&e)),
            )
        })?;
        let meta = file.metadata().map_err(|e| {
            fail(
                OutcomeKind::LaunchFailed,
                format!("{}: {}", tool.name, os_reason(&e)),
            )
        })?;
        if !meta.is_file() {
            return Err(fail(
                OutcomeKind::PermissionDenied,
                format!("{}: not a regular file", tool.name),
            ));
        }
        let key = file_key(&meta, &tool.host_path);
        if let Some(l) = self.lock_loaded().get(&key) {
            return Ok(Lookup::Loaded(l.clone()));
        }
        Ok(Lookup::Open(Box::new((Opened::File(file, meta), key))))
    }

    /// Reads an open tool file and makes it ready to run: from the disk
    /// cache with no compile slot, else compiled in one of the
    /// [`COMPILE_SLOTS`] (taken only while some call still waits for this
    /// file: a compile every caller gave up on before it began is skipped).
    /// Reading and compiling run on the blocking pool.
    async fn read_and_compile(
        self: &Arc<Self>,
        tool: ToolFile,
        opened: Opened,
        key: FileKey,
        id: u64,
    ) -> Result<Arc<Loaded>, Outcome> {
        let failed = |e: tokio::task::JoinError| {
            Outcome::new(OutcomeKind::LaunchFailed, format!("compiling failed: {e}"))
        };
        let e = self.clone();
        let (tool, key, bytes, hit) = tokio::task::spawn_blocking(move || {
            let bytes = match opened {
                Opened::File(file, meta) => read_tool(&tool, file, &meta)?,
                Opened::Builtin(bytes) => bytes.to_vec(),
            };
            let hit = e.prepare(&tool, &bytes, &key, true)?;
            Ok::<_, Outcome>((tool, key, bytes, hit))
        })
        .await
        .map_err(failed)??;
        if let Some(loaded) = hit {
            return Ok(loaded);
        }
        let permit = self.compile_slots.clone().acquire_owned().await;
        {
            let mut compiling = self.compiling.lock().unwrap_or_else(|e| e.into_inner());
            // Only the map's own handle is left: no call waits any more.
            // Taken out under the same lock, so no call joins it after this.
            if compiling
                .get(&key)
                .is_some_and(|(i, f)| *i == id && f.strong_count() == Some(1))
            {
                compiling.remove(&key);
                return Err(Outcome::new(
                    OutcomeKind::TimedOut,
                    format!("{}: compile skipped, no call waits for it", tool.name),
                ));
            }
        }
        let e = self.clone();
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            e.prepare(&tool, &bytes, &key, false)
        })
        .await
        .map_err(failed)?
        .and_then(|l| {
            l.ok_or_else(|| {
                Outcome::new(
                    OutcomeKind::LaunchFailed,
                    "compiling gave no result".to_string(),
                )
            })
        })
    }

    /// Makes `bytes` ready to run and keeps the result under `key`: from
    /// the disk cache only (`Ok(None)` on a miss) when `cache_only`, else
    /// compiled (and cached) on a miss. Blocking.
    fn prepare(
        &self,
        tool: &ToolFile,
        bytes: &[u8],
        key: &FileKey,
        cache_only: bool,
    ) -> Result<Option<Arc<Loaded>>, Outcome> {
        let fail = |kind, msg: String| Outcome::new(kind, msg);
        let link_failed = |e: wasmtime::Error| {
            fail(
                OutcomeKind::LaunchFailed,
                format!("{}: cannot link: {}", tool.name, first_line(&e)),
            )
        };
        let loaded = if wasmparser::Parser::is_component(bytes) {
            let component = if cache_only {
                match self.cache.lookup(&self.engine, bytes) {
                    Some(c) => c,
                    None => return Ok(None),
                }
            } else {
                self.compile_component(bytes).map_err(|e| {
                    fail(
                        OutcomeKind::LaunchFailed,
                        format!(
                            "{}: invalid WebAssembly component: {}",
                            tool.name,
                            first_line(&e)
                        ),
                    )
                })?
            };
            let pre = self
                .component_linker
                .instantiate_pre(&component)
                .map_err(link_failed)?;
            if let Ok(cmd) = wasmtime_wasi::p3::bindings::CommandPre::new(pre.clone()) {
                Loaded::CommandP3(cmd)
            } else if let Ok(cmd) = wasmtime_wasi::p2::bindings::CommandPre::new(pre.clone()) {
                Loaded::Command(cmd)
            } else if let Ok(typed) = component::ToolPre::new(pre) {
                Loaded::Typed(typed, OnceLock::new())
            } else {
                return Err(fail(
                    OutcomeKind::PermissionDenied,
                    format!(
                        "{}: the component exports neither wasi:cli/run (a command, 0.2 or 0.3) nor toolhost:tool/typed-tool (a typed tool)",
                        tool.name
                    ),
                ));
            }
        } else if wasmparser::Parser::is_core_wasm(bytes) {
            let module = if cache_only {
                match self.cache.lookup(&self.engine, bytes) {
                    Some(m) => m,
                    None => return Ok(None),
                }
            } else {
                self.compile(bytes)
                    .map_err(|e| {
                        fail(
                            OutcomeKind::LaunchFailed,
                            format!("{}: invalid WebAssembly: {}", tool.name, first_line(&e)),
                        )
                    })?
                    .0
            };
            Loaded::Module(self.linker.instantiate_pre(&module).map_err(link_failed)?)
        } else {
            return Err(fail(
                OutcomeKind::PermissionDenied,
                format!("{}: not a WebAssembly module or component", tool.name),
            ));
        };
        let loaded = Arc::new(loaded);
        let mut map = self.lock_loaded();
        if map.len() > 1024 {
            map.clear();
        }
        map.insert(key.clone(), loaded.clone());
        Ok(Some(loaded))
    }

    fn lock_loaded(&self) -> std::sync::MutexGuard<'_, HashMap<FileKey, Arc<Loaded>>> {
        self.loaded.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The bytes of an open tool file, at most [`MAX_TOOL_BYTES`]. Blocking.
fn read_tool(
    tool: &ToolFile,
    mut file: cap_std::fs::File,
    meta: &cap_std::fs::Metadata,
) -> Result<Vec<u8>, Outcome> {
    if meta.len() > MAX_TOOL_BYTES {
        return Err(Outcome::new(
            OutcomeKind::PermissionDenied,
            format!(
                "{}: {} bytes is too large for a WebAssembly tool (at most {MAX_TOOL_BYTES})",
                tool.name,
                meta.len()
            ),
        ));
    }
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(&mut file, MAX_TOOL_BYTES),
        &mut bytes,
    )
    .map_err(|e| {
        Outcome::new(
            OutcomeKind::LaunchFailed,
            format!("{}: {}", tool.name, os_reason(&e)),
        )
    })?;
    Ok(bytes)
}

fn file_key(meta: &cap_std::fs::Metadata, path: &Path) -> FileKey {
    #[cfg(unix)]
    {
        use cap_std::fs::MetadataExt;
        FileKey {
            builtin: false,
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.len(),
            mtime_ns: meta.mtime() as i128 * 1_000_000_000 + meta.mtime_nsec() as i128,
            path: path.to_path_buf(),
        }
    }
    #[cfg(not(unix))]
    {
        let mtime_ns = meta
            .modified()
            .ok()
            .and_then(|t| t.into_std().duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_nanos() as i128)
            .unwrap_or(0);
        FileKey {
            builtin: false,
            dev: 0,
            ino: 0,
            size: meta.len(),
            mtime_ns,
            path: path.to_path_buf(),
        }
    }
}

/// Calls a WASI preview-1 function's ABI entry point with the calling guest's
/// memory, exactly as wasmtime-wasi's own linker glue does.
macro_rules! call_p1 {
    ($caller:ident, $func:ident ( $($arg:expr),* )) => {{
        let fuel = wasmtime::AsContextMut::as_context_mut(&mut $caller).hostcall_fuel();
        match $caller.get_export("memory") {
            Some(wasmtime::Extern::Memory(m)) => {
                let (mem, state) = m.data_and_store_mut(&mut $caller);
                let ctx = &mut state.wasi;
                wasmtime_wasi::p1::wasi_snapshot_preview1::WasiSnapshotPreview1::set_hostcall_fuel(ctx, fuel);
                let mut mem = wiggle::GuestMemory::Unshared(mem);
                Ok(wasmtime_wasi::p1::wasi_snapshot_preview1::$func(ctx, &mut mem, $($arg),*).await?)
            }
            _ => Err(wasmtime::format_err!("missing required memory export")),
        }
    }};
}
pub(crate) use call_p1;

/// Where a preview-1 write to `fd` would start, if `fd` is a regular file:
/// `at` for a positioned write, else the file's size when it was opened for
/// appending, else its current offset. `None` when `fd` is anything else
/// (stdio, a directory, a bad descriptor: the real call decides those).
async fn file_write_start(caller: &mut Caller<'_, State>, fd: i32, at: Option<u64>) -> Option<u64> {
    use wasmtime_wasi::p1::types;
    use wasmtime_wasi::p1::wasi_snapshot_preview1::WasiSnapshotPreview1 as P1;
    let Some(wasmtime::Extern::Memory(m)) = caller.get_export("memory") else {
        return None;
    };
    let (mem, state) = m.data_and_store_mut(&mut *caller);
    let ctx = &mut state.wasi;
    let mut mem = wiggle::GuestMemory::Unshared(mem);
    let fd = types::Fd::from(fd as u32);
    let st = P1::fd_fdstat_get(ctx, &mut mem, fd).await.ok()?;
    if st.fs_filetype != types::Filetype::RegularFile {
        return None;
    }
    if let Some(at) = at {
        return Some(at);
    }
    if st.fs_flags.contains(types::Fdflags::APPEND) {
        return P1::fd_filestat_get(ctx, &mut mem, fd)
            .await
            .ok()
            .map(|f| f.size);
    }
    P1::fd_tell(ctx, &mut mem, fd).ok()
}

/// Admits a preview-1 write of the iovecs at `iovs` to `fd` (at `at` for a
/// positioned write) against the file budget: `Ok(Some(start))` for a file
/// write that may go ahead, `Ok(None)` when `fd` is not a file, `Err(errno)`
/// when the write is refused.
async fn admit_file_write(
    caller: &mut Caller<'_, State>,
    fd: i32,
    iovs: i32,
    n: i32,
    at: Option<u64>,
) -> Result<Option<u64>, i32> {
    let Some(start) = file_write_start(caller, fd, at).await else {
        return Ok(None);
    };
    let Some(want) = iov_first(caller, iovs, n) else {
        return Err(ERRNO_FAULT);
    };
    if !caller.data().common.files.admit_write(start, want) {
        return Err(ERRNO_FBIG);
    }
    Ok(Some(start))
}

/// The errno of a preview-1 socket call on `fd`: EBADF when it is not a
/// descriptor of the guest, else ENOTSOCK.
async fn not_a_socket(caller: &mut Caller<'_, State>, fd: i32) -> i32 {
    use wasmtime_wasi::p1::wasi_snapshot_preview1::WasiSnapshotPreview1 as P1;
    const ERRNO_BADF: i32 = 8;
    const ERRNO_NOTSOCK: i32 = 57;
    let Some(wasmtime::Extern::Memory(m)) = caller.get_export("memory") else {
        return ERRNO_BADF;
    };
    let (mem, state) = m.data_and_store_mut(&mut *caller);
    let mut mem = wiggle::GuestMemory::Unshared(mem);
    let fd = wasmtime_wasi::p1::types::Fd::from(fd as u32);
    match P1::fd_fdstat_get(&mut state.wasi, &mut mem, fd).await {
        Ok(_) => ERRNO_NOTSOCK,
        Err(_) => ERRNO_BADF,
    }
}

/// The current size of the regular file `fd`, if it is one.
async fn file_size(caller: &mut Caller<'_, State>, fd: i32) -> Option<u64> {
    use wasmtime_wasi::p1::types;
    use wasmtime_wasi::p1::wasi_snapshot_preview1::WasiSnapshotPreview1 as P1;
    let Some(wasmtime::Extern::Memory(m)) = caller.get_export("memory") else {
        return None;
    };
    let (mem, state) = m.data_and_store_mut(&mut *caller);
    let mut mem = wiggle::GuestMemory::Unshared(mem);
    let f = P1::fd_filestat_get(&mut state.wasi, &mut mem, types::Fd::from(fd as u32))
        .await
        .ok()?;
    (f.filetype == types::Filetype::RegularFile).then_some(f.size)
}

/// The preview-1 linker, with the file-writing calls wrapped by the file
/// budget. Whether a write goes to a file is decided by the descriptor's type,
/// not its number (a guest can renumber a file onto fd 1).
fn build_linker(engine: &Engine) -> wasmtime::Result<Linker<State>> {
    let mut linker: Linker<State> = Linker::new(engine);
    wasmtime_wasi::p1::add_to_linker_async(&mut linker, |s: &mut State| &mut s.wasi)?;
    linker.allow_shadowing(true);
    const M: &str = "wasi_snapshot_preview1";
    // Changes by path go through a fresh handle on the parent (`protect`).
    guard_p1::add_to_linker(&mut linker)?;

    // The preview-1 socket calls: wasmtime-wasi answers them with a warning
    // logged per call, which a guest looping on them turns into unbounded
    // host logs. The same answers, silently: EBADF for a bad descriptor,
    // ENOTSOCK for any other (no descriptor is a socket here).
    linker.func_wrap_async(
        M,
        "sock_shutdown",
        |mut caller: Caller<'_, State>, (fd, _how): (i32, i32)| {
            Box::new(async move { Ok(not_a_socket(&mut caller, fd).await) })
        },
    )?;
    linker.func_wrap_async(
        M,
        "sock_accept",
        |mut caller: Caller<'_, State>, (fd, _flags, _out): (i32, i32, i32)| {
            Box::new(async move { Ok(not_a_socket(&mut caller, fd).await) })
        },
    )?;
    linker.func_wrap_async(
        M,
        "sock_recv",
        |mut caller: Caller<'_, State>, (fd, ..): (i32, i32, i32, i32, i32, i32)| {
            Box::new(async move { Ok(not_a_socket(&mut caller, fd).await) })
        },
    )?;
    linker.func_wrap_async(
        M,
        "sock_send",
        |mut caller: Caller<'_, State>, (fd, ..): (i32, i32, i32, i32, i32)| {
            Box::new(async move { Ok(not_a_socket(&mut caller, fd).await) })
        },
    )?;
    linker.func_wrap_async(
        M,
        "fd_write",
        |mut caller: Caller<'_, State>, (fd, iovs, n, nwritten): (i32, i32, i32, i32)| {
            Box::new(async move {
                let start = match admit_file_write(&mut caller, fd, iovs, n, None).await {
                    Ok(start) => start,
                    Err(errno) => return Ok(errno),
                };
                let r: wasmtime::Result<i32> = call_p1!(caller, fd_write(fd, iovs, n, nwritten));
                let r = r?;
                if start.is_some() && r == 0 {
                    count_written(&mut caller, nwritten);
                }
                Ok(r)
            })
        },
    )?;
    linker.func_wrap_async(
        M,
        "fd_pwrite",
        |mut caller: Caller<'_, State>,
         (fd, iovs, n, offset, nwritten): (i32, i32, i32, i64, i32)| {
            Box::new(async move {
                let at = Some(offset as u64);
                let start = match admit_file_write(&mut caller, fd, iovs, n, at).await {
                    Ok(start) => start,
                    Err(errno) => return Ok(errno),
                };
                let r: wasmtime::Result<i32> =
                    call_p1!(caller, fd_pwrite(fd, iovs, n, offset, nwritten));
                let r = r?;
                if start.is_some() && r == 0 {
                    count_written(&mut caller, nwritten);
                }
                Ok(r)
            })
        },
    )?;
    linker.func_wrap_async(
        M,
        "fd_filestat_set_size",
        |mut caller: Caller<'_, State>, (fd, size): (i32, i64)| {
            Box::new(async move {
                let size = size as u64;
                let growth = match file_size(&mut caller, fd).await {
                    Some(current) => size.saturating_sub(current),
                    None => 0,
                };
                if !caller.data().common.files.admit_resize(size, growth) {
                    return Ok(ERRNO_FBIG);
                }
                let r: wasmtime::Result<i32> =
                    call_p1!(caller, fd_filestat_set_size(fd, size as i64));
                let r = r?;
                if r == 0 {
                    caller.data().common.files.add(growth);
                }
                Ok(r)
            })
        },
    )?;
    linker.func_wrap_async(
        M,
        "path_open",
        |mut caller: Caller<'_, State>,
         (fd, dirflags, path, path_len, oflags, base, inheriting, fdflags, opened): (
            i32,
            i32,
            i32,
            i32,
            i32,
            i64,
            i64,
            i32,
            i32,
        )| {
            Box::new(async move {
                if path_len as u32 as usize > MAX_GUEST_PATH {
                    return Ok(ERRNO_NAMETOOLONG);
                }
                // An open that may change a file: through the guard.
                const CREAT_OR_TRUNC: i32 = 1 | 8;
                const FD_WRITE: i64 = 1 << 6;
                if caller.data().common.guard.active()
                    && (oflags & CREAT_OR_TRUNC != 0 || base & FD_WRITE != 0)
                {
                    let p = match guard_p1::guest_str(&mut caller, path, path_len) {
                        Ok(p) => p,
                        Err(e) => return Ok(e),
                    };
                    let r = guard_p1::open_for_writing(
                        &mut caller,
                        fd,
                        dirflags,
                        &p,
                        oflags,
                        base,
                        inheriting,
                        fdflags,
                        opened,
                    )
                    .await?;
                    if let Some(errno) = r {
                        return Ok(errno);
                    }
                }
                if let Err(errno) = p1_precheck(&mut caller, fd, dirflags, path, path_len).await {
                    return Ok(errno);
                }
                let open = async {
                    let r: wasmtime::Result<i32> = call_p1!(
                        caller,
                        path_open(
                            fd, dirflags, path, path_len, oflags, base, inheriting, fdflags, opened
                        )
                    );
                    r
                };
                let watched = special::watched(open).await;
                let r = watched.result?;
                if r != 0 {
                    return Ok(refusal(r, watched.interrupted));
                }
                Ok(p1_postcheck(&mut caller, opened).await)
            })
        },
    )?;
    // wasmtime-wasi sets a path's times through a blocking open of it.
    linker.func_wrap_async(
        M,
        "path_filestat_set_times",
        |mut caller: Caller<'_, State>,
         (fd, flags, path, path_len, atim, mtim, fst_flags): (
            i32,
            i32,
            i32,
            i32,
            i64,
            i64,
            i32,
        )| {
            Box::new(async move {
                if path_len as u32 as usize > MAX_GUEST_PATH {
                    return Ok(ERRNO_NAMETOOLONG);
                }
                if caller.data().common.guard.active() {
                    let p = match guard_p1::guest_str(&mut caller, path, path_len) {
                        Ok(p) => p,
                        Err(e) => return Ok(e),
                    };
                    let r = guard_p1::set_times(&mut caller, fd, flags, &p, atim, mtim, fst_flags)
                        .await?;
                    if let Some(errno) = r {
                        return Ok(errno);
                    }
                }
                if let Err(errno) = p1_precheck(&mut caller, fd, flags, path, path_len).await {
                    return Ok(errno);
                }
                let set = async {
                    let r: wasmtime::Result<i32> = call_p1!(
                        caller,
                        path_filestat_set_times(fd, flags, path, path_len, atim, mtim, fst_flags)
                    );
                    r
                };
                let watched = special::watched(set).await;
                Ok(refusal(watched.result?, watched.interrupted))
            })
        },
    )?;
    Ok(linker)
}

/// A preview-1 errno after a watched call: EINTR while the watchdog
/// interrupted a thread is the refusal of a special file.
fn refusal(errno: i32, interrupted: bool) -> i32 {
    if errno == ERRNO_INTR && interrupted {
        ERRNO_PERM
    } else {
        errno
    }
}

/// Before a preview-1 call that opens a path (`special`): the errno to return
/// (`ERRNO_PERM`) if the path is a special file. A path that cannot be
/// stat'ed goes on to the call, which reports its own error.
async fn p1_precheck(
    caller: &mut Caller<'_, State>,
    fd: i32,
    dirflags: i32,
    path: i32,
    path_len: i32,
) -> Result<(), i32> {
    use wasmtime_wasi::p1::types;
    use wasmtime_wasi::p1::wasi_snapshot_preview1::WasiSnapshotPreview1 as P1;
    if !special::precheck() {
        return Ok(());
    }
    let fuel = wasmtime::AsContextMut::as_context_mut(&mut *caller).hostcall_fuel();
    let Some(wasmtime::Extern::Memory(m)) = caller.get_export("memory") else {
        return Ok(());
    };
    let (mem, state) = m.data_and_store_mut(&mut *caller);
    let ctx = &mut state.wasi;
    P1::set_hostcall_fuel(ctx, fuel);
    let Ok(flags) = types::Lookupflags::try_from(dirflags) else {
        return Ok(());
    };
    let mut mem = wiggle::GuestMemory::Unshared(mem);
    let ptr = wiggle::GuestPtr::<str>::new((path as u32, path_len as u32));
    match P1::path_filestat_get(ctx, &mut mem, types::Fd::from(fd as u32), flags, ptr).await {
        Ok(st)
            if !special::p1_allowed(st.filetype)
                && st.filetype != types::Filetype::SymbolicLink =>
        {
            Err(ERRNO_PERM)
        }
        _ => Ok(()),
    }
}

/// After a successful preview-1 `path_open`: 0, or `ERRNO_PERM` when what it
/// opened (its fd is at `opened` in guest memory) is a special file, which is
/// closed.
async fn p1_postcheck(caller: &mut Caller<'_, State>, opened: i32) -> i32 {
    use wasmtime_wasi::p1::types;
    use wasmtime_wasi::p1::wasi_snapshot_preview1::WasiSnapshotPreview1 as P1;
    let Some(wasmtime::Extern::Memory(m)) = caller.get_export("memory") else {
        return ERRNO_FAULT;
    };
    let (mem, state) = m.data_and_store_mut(&mut *caller);
    let p = opened as u32 as usize;
    let Some(new) = mem
        .get(p..p.saturating_add(4))
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(u32::from_le_bytes)
    else {
        return ERRNO_FAULT;
    };
    let ctx = &mut state.wasi;
    let mut mem = wiggle::GuestMemory::Unshared(mem);
    let new = types::Fd::from(new);
    match P1::fd_filestat_get(ctx, &mut mem, new).await {
        Ok(st) if special::p1_allowed(st.filetype) => {
            if st.filetype == types::Filetype::Directory {
                // A new directory handle: read-only if inside a protected dir.
                guard_p1::restrict_all(caller);
            }
            0
        }
        _ => {
            let _ = P1::fd_close(ctx, &mut mem, new).await;
            ERRNO_PERM
        }
    }
}

/// Length of the first non-empty iovec of an array in guest memory (what a
/// preview-1 write of wasmtime-wasi writes at most); `None` if out of bounds.
fn iov_first(caller: &mut Caller<'_, State>, iovs: i32, n: i32) -> Option<u64> {
    let mem = caller.get_export("memory")?.into_memory()?;
    let data = mem.data(&*caller);
    let (start, n) = (iovs as u32 as usize, n as u32 as usize);
    let bytes = data.get(start..start.checked_add(n.checked_mul(8)?)?)?;
    Some(
        bytes
            .chunks_exact(8)
            .map(|iov| u32::from_le_bytes([iov[4], iov[5], iov[6], iov[7]]) as u64)
            .find(|len| *len > 0)
            .unwrap_or(0),
    )
}

fn count_written(caller: &mut Caller<'_, State>, ptr: i32) {
    let Some(mem) = caller.get_export("memory").and_then(|e| e.into_memory()) else {
        return;
    };
    let p = ptr as u32 as usize;
    let n = mem
        .data(&*caller)
        .get(p..p.saturating_add(4))
        .and_then(|b| b.try_into().ok())
        .map(|b: [u8; 4]| u32::from_le_bytes(b) as u64)
        .unwrap_or(0);
    caller.data().common.files.add(n);
}

/// An instantiation that failed (a link or pool error, not the guest's own
/// trap): reported as `launch_failed`.
#[derive(Debug)]
struct InstantiateFailed(String);

impl std::fmt::Display for InstantiateFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot instantiate: {}", self.0)
    }
}

impl std::error::Error for InstantiateFailed {}

fn instantiation(e: wasmtime::Error) -> wasmtime::Error {
    // A trap in a start function, or the limiter refusing the initial memory,
    // stays what it is.
    if e.downcast_ref::<Trap>().is_some() {
        return e;
    }
    wasmtime::Error::new(InstantiateFailed(first_line(&e)))
}

fn first_line(e: &impl std::fmt::Display) -> String {
    e.to_string().lines().next().unwrap_or("").to_string()
}

fn os_reason(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(c) => std::io::Error::from_raw_os_error(c).to_string(),
        None => e.kind().to_string(),
    }
}

/// The path wasmtime-wasi should open to get exactly the directory `dir`
/// refers to: on Linux the handle itself via /proc, so a symlink swapped in
/// after planning cannot redirect the preopen.
fn preopen_path(dir: &cap_std::fs::Dir, fallback: &Path) -> PathBuf {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let _ = fallback;
        PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = dir;
        fallback.to_path_buf()
    }
}

/// Runs plans as WASI guests.
#[derive(Debug)]
pub struct WasmBackend {
    engine: Arc<WasmEngine>,
}

impl WasmBackend {
    /// The backend over the process-wide engine for this configuration.
    pub fn new(config: &WasmConfig) -> wasmtime::Result<Self> {
        Ok(WasmBackend {
            engine: WasmEngine::shared(config)?,
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
        let loaded = match self.engine.load_by(target, deadline).await {
            Ok(l) => l,
            Err(o) => return refuse(o).timed_out_if_so(),
        };
        let stdout = CappedPipe::new(plan.limits.stdout_cap);
        let stderr = CappedPipe::new(plan.limits.stderr_cap);
        let (builder, guard) = match build_wasi(plan, &target.name, &stdout, &stderr) {
            Ok(b) => b,
            Err(o) => return refuse(o),
        };
        let limits = &plan.limits;
        let ended = match &*loaded {
            Loaded::Module(pre) => {
                let mut builder = builder;
                let mut wasi = builder.build_p1();
                wasmtime_wasi::WasiView::ctx(&mut wasi)
                    .table
                    .set_max_capacity(MAX_GUEST_HANDLES);
                let mut common = self.common(limits);
                common.guard = guard;
                let state = State { wasi, common };
                let pre = pre.clone();
                self.execute(limits, deadline, state, move |store| {
                    Box::pin(async move {
                        let instance = pre
                            .instantiate_async(&mut *store)
                            .await
                            .map_err(instantiation)?;
                        let main = instance.get_typed_func::<(), ()>(&mut *store, "_start")?;
                        main.call_async(&mut *store, ()).await
                    })
                })
                .await
            }
            Loaded::Command(pre) => {
                let mut state = self.component_state(builder, limits);
                state.common.guard = guard;
                let pre = pre.clone();
                self.execute(limits, deadline, state, move |store| {
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
                })
                .await
            }
            Loaded::CommandP3(pre) => {
                let mut state = self.component_state(builder, limits);
                state.common.guard = guard;
                let pre = pre.clone();
                self.execute(limits, deadline, state, move |store| {
                    Box::pin(async move {
                        let cmd = pre
                            .instantiate_async(&mut *store)
                            .await
                            .map_err(instantiation)?;
                        let ran = store
                            .run_concurrent(async move |acc| cmd.wasi_cli_run().call_run(acc).await)
                            .await??;
                        match ran {
                            Ok(()) => Ok(()),
                            Err(()) => Err(I32Exit(1).into()),
                        }
                    })
                })
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
        let loaded = self.engine.load_by(tool, deadline).await?;
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
            .execute(limits, deadline, state, move |store| {
                Box::pin(async move {
                    let t = pre
                        .instantiate_async(&mut *store)
                        .await
                        .map_err(instantiation)?;
                    t.toolhost_tool_typed_tool()
                        .call_describe(&mut *store)
                        .await
                })
            })
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
        let loaded = match self.engine.load_by(target, deadline).await {
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
        let (builder, guard) = match build_wasi(plan, &target.name, &stdout, &stderr) {
            Ok(b) => b,
            Err(o) => return refuse(o),
        };
        let mut state = self.component_state(builder, &plan.limits);
        state.common.guard = guard;
        let pre = pre.clone();
        let input = input.to_string();
        let ended = self
            .execute(&plan.limits, deadline, state, move |store| {
                Box::pin(async move {
                    let t = pre
                        .instantiate_async(&mut *store)
                        .await
                        .map_err(instantiation)?;
                    t.toolhost_tool_typed_tool()
                        .call_call(&mut *store, &input)
                        .await
                })
            })
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
            limiter: Limiter {
                max_memory: limits
                    .memory_bytes
                    .map(|b| usize::try_from(b).unwrap_or(usize::MAX)),
                hit: false,
            },
            files: Arc::new(FileBudget::new(limits.file_size_bytes)),
            cpu_ticks_left: cpu_ticks,
            cpu_hit: false,
            guard: protect::Guard::default(),
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

    /// Runs `body` on a fresh store holding `state`, within the limits: the
    /// store's limiter, epoch or fuel, a pool slot, and the wall-clock timeout.
    async fn execute<T, R>(
        &self,
        limits: &Limits,
        deadline: tokio::time::Instant,
        state: T,
        body: impl for<'s> FnOnce(
            &'s mut Store<T>,
        ) -> std::pin::Pin<
            Box<dyn std::future::Future<Output = wasmtime::Result<R>> + Send + 's>,
        > + Send,
    ) -> Executed<R>
    where
        T: HasCommon,
        R: Send,
    {
        let mut store = Store::new(&self.engine.engine, state);
        store.limiter(|s| &mut s.common().limiter);
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(|mut ctx| {
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
            };
            let store = &mut held.store;
            let result = body(store).await;
            if let (Some(initial), Ok(left)) = (initial_fuel, store.get_fuel()) {
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
        match tokio::time::timeout_at(deadline, call).await {
            Ok((result, hits)) => Executed::Done(result, hits),
            Err(_) => Executed::TimedOut,
        }
    }
}

/// The WASI context of a call: argv (argv[0] the tool's name), env, stdin,
/// capped stdout/stderr, the allowed dirs under their guest paths and the
/// cwd as `.` (none when it is the dir preopened as `/`).
fn build_wasi(
    plan: &ExecPlan,
    name: &str,
    stdout: &CappedPipe,
    stderr: &CappedPipe,
) -> Result<(WasiCtxBuilder, protect::Guard), Outcome> {
    let invalid = |m: String| Outcome::new(OutcomeKind::InvalidRequest, m);
    let mut b = WasiCtxBuilder::new();
    let mut args = Vec::with_capacity(plan.argv.len());
    args.push(name.to_string());
    for (i, a) in plan.argv.iter().enumerate().skip(1) {
        args.push(
            a.to_str()
                .ok_or_else(|| invalid(format!("argv[{i}] is not valid UTF-8")))?
                .to_string(),
        );
    }
    b.args(&args);
    for (k, v) in &plan.env {
        if let (Some(k), Some(v)) = (k.to_str(), v.to_str()) {
            b.env(k, v);
        }
    }
    let stdin = plan
        .stdin
        .as_deref()
        .map(<[u8]>::to_vec)
        .unwrap_or_default();
    b.stdin(MemoryInputPipe::new(stdin));
    b.stdout(stdout.clone());
    b.stderr(stderr.clone());
    // No sockets (preview 2 and 3 link the socket interfaces): none can be
    // created, and no address would pass the (default, empty) address check.
    b.allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false);
    // Not `allow_blocking_current_thread`: with it, a guest's sleep blocks the
    // thread in std::thread::sleep and the timeout could not end the call.
    let perms = |ro: bool| {
        if ro {
            FsPerms::ReadOnly
        } else {
            FsPerms::ReadWrite
        }
    };
    // A preopen at or under a protected dir (a cwd inside `.git`) is made
    // read-only before the guest's first change (`protect`).
    let guard = protect::Guard::new(plan);
    for m in &plan.mounts {
        let guest = m
            .guest
            .to_str()
            .ok_or_else(|| invalid(format!("allowed dir {:?} is not valid UTF-8", m.guest)))?;
        let dir = plan.mount_dirs.iter().find(|(p, _)| p == &m.path);
        let host = dir
            .map(|(_, d)| preopen_path(d, &m.path))
            .unwrap_or_else(|| m.path.clone());
        b.preopened_dir(&host, guest, perms(m.read_only))
            .map_err(|e| {
                Outcome::new(
                    OutcomeKind::LaunchFailed,
                    format!("cannot preopen {guest}: {}", first_line(&e)),
                )
            })?;
    }
    if let Some(cwd) = &plan.cwd
        && !cwd_is_guest_root(plan, cwd)
    {
        // wasi-libc gives a `.` preopen every path no longer prefix takes,
        // as it does a `/` one: with both, `/f` would open the cwd's `f`.
        if plan.mounts.iter().any(|m| m.guest == Path::new("/")) {
            return Err(invalid(format!(
                "cwd {}: a wasm guest starts in `/`, and with an allowed dir preopened as `/` its cwd can only be `/` (a `.` preopen for another dir would also take absolute paths); run in `/`, or give that dir another guest path",
                cwd.guest.display()
            )));
        }
        let cwd_ro = plan
            .mounts
            .iter()
            .filter(|m| cwd.path.starts_with(&m.path))
            .max_by_key(|m| m.path.components().count())
            .is_some_and(|m| m.read_only)
            || cwd_inside(&guard, plan, cwd);
        b.preopened_dir(preopen_path(&cwd.dir, &cwd.path), ".", perms(cwd_ro))
            .map_err(|e| {
                Outcome::new(
                    OutcomeKind::LaunchFailed,
                    format!("cannot preopen the cwd: {}", first_line(&e)),
                )
            })?;
    }
    Ok((b, guard))
}

/// Whether the cwd is the allowed dir preopened as `/`. A guest's relative
/// paths then already reach it (wasi-libc starts in `/` and resolves them
/// from there), so it gets no `.` preopen of its own and sees exactly the
/// dirs it was given.
fn cwd_is_guest_root(plan: &ExecPlan, cwd: &crate::plan::WorkDir) -> bool {
    plan.mounts
        .iter()
        .any(|m| m.guest == Path::new("/") && m.path == cwd.path)
}

/// Whether the cwd lies at or under a protected dir (its preopen is then
/// read-only). An allowed dir itself cannot (`Sandbox::new` refuses one
/// inside another's protected path), so only a cwd below one is walked.
fn cwd_inside(guard: &protect::Guard, plan: &ExecPlan, cwd: &crate::plan::WorkDir) -> bool {
    guard.active()
        && !plan.mounts.iter().any(|m| m.path == cwd.path)
        && cwd
            .dir
            .try_clone()
            .map_or(true, |d| guard.inside(&d.into_std_file()))
}

/// A store and the pool slot it runs in; fields drop in order, so the slot is
/// released after the store's instances are deallocated.
struct PooledStore<T: 'static> {
    store: Store<T>,
    _permit: Option<tokio::sync::OwnedSemaphorePermit>,
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

#[derive(Debug, Clone, Copy, Default)]
struct Hits {
    memory: bool,
    cpu: bool,
    files: bool,
}

fn classify(
    limits: &Limits,
    meter: CpuMeter,
    result: wasmtime::Result<()>,
    hits: Hits,
) -> (Outcome, Option<i32>) {
    let mb = |b: Option<u64>| b.unwrap_or(0) >> 20;
    let code = match &result {
        Ok(()) => Some(0),
        Err(e) => e.downcast_ref::<I32Exit>().map(|x| x.0),
    };
    if hits.files {
        return (
            Outcome::new(
                OutcomeKind::FileSizeLimit,
                format!(
                    "file write refused: the call's {} MiB file-size budget is used up",
                    mb(limits.file_size_bytes)
                ),
            ),
            code,
        );
    }
    if let Some(c) = code {
        return (
            Outcome::new(OutcomeKind::Exited, format!("exited with code {c}")),
            Some(c),
        );
    }
    let Err(e) = result else {
        return (
            Outcome::new(OutcomeKind::Exited, "exited with code 0"),
            Some(0),
        );
    };
    let trap = e.downcast_ref::<Trap>().copied();
    if hits.memory {
        return (
            Outcome::new(
                OutcomeKind::MemoryLimit,
                format!(
                    "stopped: linear memory would exceed the {} MiB limit",
                    mb(limits.memory_bytes)
                ),
            ),
            None,
        );
    }
    if hits.cpu || trap == Some(Trap::OutOfFuel) {
        let how = match meter {
            CpuMeter::Epoch => "epoch deadline",
            CpuMeter::Fuel => "fuel",
        };
        return (
            Outcome::new(
                OutcomeKind::CpuLimit,
                format!(
                    "stopped: CPU limit of {} s reached ({how})",
                    limits.cpu_seconds.unwrap_or(0)
                ),
            ),
            None,
        );
    }
    if let Some(i) = e.downcast_ref::<InstantiateFailed>() {
        return (Outcome::new(OutcomeKind::LaunchFailed, i.to_string()), None);
    }
    let table_full = e.chain().any(|c| {
        matches!(
            c.downcast_ref::<wasmtime::component::ResourceTableError>(),
            Some(wasmtime::component::ResourceTableError::Full)
        )
    });
    let message = match trap {
        Some(t) => t.to_string(),
        None if table_full => format!(
            "stopped: the tool held more than {MAX_GUEST_HANDLES} handles at once (open files, directories, streams); the cap keeps toolhost's own file descriptors free"
        ),
        None => format!("wasm error: {}", first_line(&e.root_cause())),
    };
    (Outcome::new(OutcomeKind::Trapped, message), None)
}
