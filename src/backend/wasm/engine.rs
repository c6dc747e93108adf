//! The engine map and tool loading: one wasmtime `Engine` per
//! configuration while something holds it (`WasmEngine::shared`,
//! [`Engines`]), tools read from their dir with a size
//! cap, compiled once (the disk cache in `crate::sys::code_cache`, at most
//! `COMPILE_SLOTS` at a time) and kept as `InstancePre`s while the file is
//! unchanged (`FileKey`: device, inode, size, mtime and ctime).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use wasmtime::{Config, Engine, InstancePre, Linker, Module};

use super::classify::{first_line, os_reason};
use super::p1::{State, build_linker};
use super::{CState, MAX_CORE_INSTANCES_PER_COMPONENT, MAX_TOOL_BYTES, component};
use crate::config::{CpuMeter, WasmConfig};
use crate::outcome::{Outcome, OutcomeKind};
use crate::paths::FileStamp;
use crate::plan::{ToolFile, ToolSource};

/// A loaded tool: compiled, linked, ready to instantiate.
pub(super) enum Loaded {
    /// A WASI preview-1 command module.
    Module(InstancePre<State>),
    /// A WASI preview-2 command component (`wasi:cli/run@0.2`).
    Command(wasmtime_wasi::p2::bindings::CommandPre<CState>),
    /// A WASI preview-3 command component (`wasi:cli/run@0.3`, `p3`).
    CommandP3(wasmtime_wasi::p3::bindings::CommandPre<CState>),
    /// A typed tool (the `toolhost:tool` world), with its description once known.
    Typed(component::ToolPre<CState>, OnceLock<TypedToolInfo>),
}

impl Loaded {
    /// The engine the tool was compiled for (a call's store is made on
    /// it): the shared engine, or its baseline tier's (`tier`).
    pub(super) fn engine(&self) -> &Engine {
        match self {
            Loaded::Module(pre) => pre.module().engine(),
            Loaded::Command(pre) => pre.instance_pre().engine(),
            Loaded::CommandP3(pre) => pre.instance_pre().engine(),
            Loaded::Typed(pre, _) => pre.instance_pre().engine(),
        }
    }
}

/// Where [`WasmEngine::prepare`] takes a tool's code from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum How {
    /// The disk cache only: a miss is `Ok(None)`.
    CacheOnly,
    /// Cranelift, through the disk cache.
    Optimized,
    /// Winch, the baseline tier (`tier`), not cached on disk: `Ok(None)`
    /// when this engine has none.
    Baseline,
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
pub(super) struct FileKey {
    /// A built-in tool (its `path` is `builtin:NAME.wasm`), never a file.
    pub(super) builtin: bool,
    pub(super) dev: u64,
    pub(super) ino: u64,
    pub(super) size: u64,
    pub(super) mtime_ns: i128,
    /// The inode's change time (Unix; 0 elsewhere): a guest can set a
    /// file's mtime back after rewriting it, but not its ctime.
    pub(super) ctime_ns: i128,
    pub(super) path: PathBuf,
}

/// The engine of one configuration, shared by the process's sandboxes of
/// it ([`Engines`]).
pub(crate) struct WasmEngine {
    pub(super) engine: Engine,
    pub(super) meter: CpuMeter,
    pub(super) linker: Linker<State>,
    pub(super) component_linker: wasmtime::component::Linker<CState>,
    pub(super) cache: crate::sys::code_cache::DiskCache,
    pub(super) loaded: Mutex<HashMap<FileKey, Arc<Loaded>>>,
    /// Compiles under way, by file: a second call for the same file waits for
    /// the same compile instead of starting another.
    pub(super) compiling: Mutex<HashMap<FileKey, (u64, SharedLoad)>>,
    /// At most [`COMPILE_SLOTS`] compiles at once, abandoned ones included.
    pub(super) compile_slots: Arc<tokio::sync::Semaphore>,
    /// One permit per pool slot: calls beyond the pool wait instead of failing.
    pub(super) slots: Option<Arc<tokio::sync::Semaphore>>,
    /// Calls that run their file operations inline, from their claim to
    /// their end wherever they run, and how many may at once
    /// (`inline_io::claim`).
    pub(super) inline_calls: Arc<std::sync::atomic::AtomicUsize>,
    pub(super) max_inline_calls: usize,
    /// `[wasm] baseline_compile`: a tool's first compile is Winch's
    /// (`tier`).
    pub(super) baseline_compile: bool,
    /// `[wasm] pool_size` and `cache_max_mb`, for a tier-up's helper.
    pub(super) pool_size: u32,
    pub(super) cache_max_mb: u64,
    /// The baseline tier, made on first use (`None`: not available).
    pub(super) baseline: OnceLock<Option<super::tier::Baseline>>,
    /// Optimized compiles under way after a baseline one.
    pub(super) tier_ups: super::tier::TierUps,
    /// The one slot tier-ups compile in, one at a time: apart from the
    /// compile slots, so that a first call's compile never waits for one.
    pub(super) tier_up_slot: Arc<tokio::sync::Semaphore>,
}

/// A compile on the blocking pool that any number of calls may wait for.
pub(super) type SharedLoad = futures_util::future::Shared<
    futures_util::future::BoxFuture<'static, Result<Arc<Loaded>, Outcome>>,
>;

/// Compiles that may run at once. A compile cannot be stopped halfway, so one
/// whose call timed out runs to its end (its result is cached); this bounds
/// the CPU such abandoned compiles can take, whatever the calls ask.
pub(super) const COMPILE_SLOTS: usize = 2;

impl std::fmt::Debug for WasmEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmEngine")
            .field("meter", &self.meter)
            .finish()
    }
}

/// What [`WasmEngine::lookup`] found.
pub(super) enum Lookup {
    /// Loaded before.
    Loaded(Arc<Loaded>),
    /// Not yet: the open file (or the built-in bytes) and its key.
    Open(Box<(Opened, FileKey)>),
}

/// A tool's bytes, not read yet.
pub(super) enum Opened {
    /// An open file and its metadata.
    File(cap_std::fs::File, cap_std::fs::Metadata),
    /// A built-in tool.
    Builtin(&'static [u8]),
}

/// What an engine is shared by: (CPU meter, cache dir, cache cap, pool
/// size, baseline compiles).
type EngineKey = (CpuMeter, Option<PathBuf>, u64, u32, bool);

/// Engines that nothing else holds, kept for the next sandbox of their
/// configuration: the most recently asked for.
pub(super) const KEPT_ENGINES: usize = 4;

/// The process's engines ([`WasmEngine::shared`]): each found by its
/// configuration while anything holds it (a sandbox's backend, a call's
/// store, a compile or tier-up under way), and the last [`KEPT_ENGINES`]
/// asked for kept even when nothing does, so that a sandbox made per
/// request finds its engine warm, with the tools it loaded. Any other
/// engine goes with its last holder: a pooled engine reserves address
/// space for its whole pool (about 540 GB for the default 64 slots) and
/// keeps its tools' code, and a process that made sandboxes of ever new
/// configurations (a cache dir per tenant) ran out of address space after
/// some 240 of them when every engine was kept.
pub(super) struct Engines {
    by_key: HashMap<EngineKey, std::sync::Weak<WasmEngine>>,
    recent: Recent<WasmEngine>,
}

impl Default for Engines {
    fn default() -> Self {
        Engines {
            by_key: HashMap::new(),
            recent: Recent::new(KEPT_ENGINES),
        }
    }
}

/// The last `cap` items asked for, oldest first: what keeps them alive
/// when nothing else does.
struct Recent<T> {
    items: std::collections::VecDeque<Arc<T>>,
    cap: usize,
}

impl<T> Recent<T> {
    fn new(cap: usize) -> Self {
        Recent {
            items: std::collections::VecDeque::new(),
            cap,
        }
    }

    /// Marks `item` the most recently asked for; returns the one it puts
    /// out, if any, for the caller to drop outside its lock (dropping an
    /// engine unmaps its pool).
    fn keep(&mut self, item: &Arc<T>) -> Option<Arc<T>> {
        self.items.retain(|e| !Arc::ptr_eq(e, item));
        self.items.push_back(Arc::clone(item));
        (self.items.len() > self.cap)
            .then(|| self.items.pop_front())
            .flatten()
    }

    /// Takes out the items nothing else holds.
    fn take_unheld(&mut self) -> Vec<Arc<T>> {
        let (unheld, held): (std::collections::VecDeque<_>, _) = std::mem::take(&mut self.items)
            .into_iter()
            .partition(|e| Arc::strong_count(e) == 1);
        self.items = held;
        unheld.into()
    }
}

pub(super) static ENGINES: OnceLock<Mutex<Engines>> = OnceLock::new();

pub(super) fn engine_config(meter: CpuMeter, pool_size: u32) -> Config {
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
            .max_memories_per_component(super::limits::MAX_MEMORIES as u32)
            .max_tables_per_component(super::limits::MAX_TABLES as u32)
            // A module may use what the store's limiter allows a store
            // (so baseline code runs nothing that Cranelift's would not).
            .max_memories_per_module(super::limits::MAX_MEMORIES as u32)
            .max_tables_per_module(super::limits::MAX_TABLES as u32)
            .table_elements(super::MAX_TABLE_ELEMENTS);
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

/// The compile cache's dir as configured: `[wasm] cache_dir`, else the
/// default under toolhost's cache dir; `None` when the cache is off.
pub(super) fn configured_cache_dir(config: &WasmConfig) -> Option<PathBuf> {
    if !config.cache {
        return None;
    }
    config
        .cache_dir
        .clone()
        .or_else(crate::state_dirs::default_wasm_cache)
}

impl WasmEngine {
    /// The engine for this configuration: the one the process has while
    /// anything holds it or it is among the last kept ([`Engines`]), else
    /// a new one.
    pub(crate) fn shared(config: &WasmConfig) -> wasmtime::Result<Arc<WasmEngine>> {
        let cache_dir = configured_cache_dir(config);
        let key = (
            config.cpu_meter,
            cache_dir.clone(),
            config.cache_max_mb,
            config.pool_size,
            config.baseline_compile,
        );
        let engines = ENGINES.get_or_init(Mutex::default);
        let mut engines = engines.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = engines.by_key.get(&key).and_then(std::sync::Weak::upgrade) {
            let out = engines.recent.keep(&e);
            drop(engines);
            drop(out);
            return Ok(e);
        }
        let e = match WasmEngine::make(config, cache_dir.clone()) {
            Ok(e) => e,
            Err(first) => {
                // The kept engines nothing else holds may hold the address
                // space this one lacks (a large pool each): let them go,
                // and try once more. (A failure path: their pools are
                // unmapped under the lock.)
                let idle = engines.recent.take_unheld();
                if idle.is_empty() {
                    return Err(first);
                }
                drop(idle);
                WasmEngine::make(config, cache_dir)?
            }
        };
        let e = Arc::new(e);
        engines.by_key.retain(|_, w| w.strong_count() > 0);
        engines.by_key.insert(key, Arc::downgrade(&e));
        let out = engines.recent.keep(&e);
        drop(engines);
        drop(out);
        Ok(e)
    }

    /// A new engine for `config`, its cache in `cache_dir`.
    fn make(config: &WasmConfig, cache_dir: Option<PathBuf>) -> wasmtime::Result<WasmEngine> {
        let engine = Engine::new(&engine_config(config.cpu_meter, config.pool_size))?;
        super::epoch::register(&engine)?;
        let linker = build_linker(&engine)?;
        let component_linker = component::build_linker(&engine)?;
        Ok(WasmEngine {
            component_linker,
            cache: crate::sys::code_cache::DiskCache::new(
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
            inline_calls: Arc::default(),
            // A quarter of the pool; without one, as many as of a pool of 64.
            max_inline_calls: match config.pool_size {
                0 => 16,
                n => n as usize / 4,
            },
            baseline_compile: config.baseline_compile,
            pool_size: config.pool_size,
            cache_max_mb: config.cache_max_mb,
            baseline: OnceLock::new(),
            tier_ups: Default::default(),
            tier_up_slot: Arc::new(tokio::sync::Semaphore::new(1)),
        })
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
    pub(super) fn compile_component(
        &self,
        wasm: &[u8],
    ) -> wasmtime::Result<wasmtime::component::Component> {
        self.cache.load(&self.engine, wasm).map(|(c, _)| c)
    }

    /// Loads `tool` by `deadline`: from memory when this file (same inode,
    /// size and mtime) was loaded before, else read and compiled (through the
    /// disk cache) on the blocking pool, never on the calling executor
    /// thread. Past the deadline the call gets `timed_out`; the compile goes
    /// on in the background and its result is kept for the next call. A
    /// tier-up a baseline compile started is counted in `owner` (the
    /// calling backend's, `tier`).
    pub(super) async fn load_by(
        self: &Arc<Self>,
        tool: &ToolFile,
        deadline: tokio::time::Instant,
        owner: &Arc<super::tier::TierUps>,
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
                    let owner = owner.clone();
                    // A task of its own: it runs to the end (and takes itself
                    // out of `compiling`) even if every waiting call is gone.
                    let task = tokio::spawn(async move {
                        let r = engine.read_and_compile(tool, opened, k, id, owner).await;
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
    pub(super) fn lookup(&self, tool: &ToolFile) -> Result<Lookup, Outcome> {
        let fail = |kind, msg: String| Outcome::new(kind, msg);
        let (dir, rel, stamp) = match &tool.source {
            ToolSource::Builtin(bytes) => {
                let key = FileKey {
                    builtin: true,
                    dev: 0,
                    ino: 0,
                    size: bytes.len() as u64,
                    mtime_ns: 0,
                    ctime_ns: 0,
                    path: tool.host_path.clone(),
                };
                if let Some(l) = self.lock_loaded().get(&key) {
                    return Ok(Lookup::Loaded(l.clone()));
                }
                return Ok(Lookup::Open(Box::new((Opened::Builtin(bytes), key))));
            }
            ToolSource::File { dir, rel, stamp } => (dir, rel, stamp),
        };
        // The stamp of the sandbox's resolution, else a `stat` of our own.
        #[cfg(unix)]
        let seen = stamp
            .map(|s| key_of_stamp(s, &tool.host_path))
            .or_else(|| stat_key(dir, rel, &tool.host_path));
        #[cfg(not(unix))]
        let seen = stamp.map(|s| key_of_stamp(s, &tool.host_path));
        if let Some(key) = seen
            && let Some(l) = self.lock_loaded().get(&key)
        {
            return Ok(Lookup::Loaded(l.clone()));
        }
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
        #[cfg(unix)]
        let key = rustix::fs::fstat(&file)
            .map_err(|e| {
                fail(
                    OutcomeKind::LaunchFailed,
                    format!("{}: {}", tool.name, os_reason(&e.into())),
                )
            })
            .and_then(|st| {
                FileStamp::of_stat(&st).ok_or_else(|| {
                    fail(
                        OutcomeKind::PermissionDenied,
                        format!("{}: not a regular file", tool.name),
                    )
                })
            })
            .map(|s| key_of_stamp(s, &tool.host_path))?;
        #[cfg(not(unix))]
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
    pub(super) async fn read_and_compile(
        self: &Arc<Self>,
        tool: ToolFile,
        opened: Opened,
        key: FileKey,
        id: u64,
        owner: Arc<super::tier::TierUps>,
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
            let hit = e.prepare(&tool, &bytes, &key, How::CacheOnly)?;
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
        let (prepared, tier_up) = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            // Baseline code first, when this engine has a baseline tier
            // and a place for the tier-up after it; anything Winch refuses
            // is Cranelift's at once (and an error is then reported as
            // Cranelift finds it).
            if let Some(place) = e.reserve_tier_up(&bytes, &owner) {
                match e.prepare(&tool, &bytes, &key, How::Baseline) {
                    Ok(Some(l)) => return (Ok(Some(l)), Some((place, tool, bytes, key))),
                    Ok(None) => {}
                    Err(o) => tracing::debug!("{}: no baseline code: {}", tool.name, o.message),
                }
            }
            (e.prepare(&tool, &bytes, &key, How::Optimized), None)
        })
        .await
        .map_err(failed)?;
        if let Some((place, tool, bytes, key)) = tier_up {
            tracing::debug!(
                "wasm code compiled by the baseline compiler (Winch): {}; its optimized compile follows",
                tool.name
            );
            self.start_tier_up(place, tool, bytes, key);
        }
        prepared.and_then(|l| {
            l.ok_or_else(|| {
                Outcome::new(
                    OutcomeKind::LaunchFailed,
                    "compiling gave no result".to_string(),
                )
            })
        })
    }

    /// Makes `bytes` ready to run and keeps the result under `key` (in the
    /// place of what was there), its code taken as `how` says. Blocking.
    pub(super) fn prepare(
        &self,
        tool: &ToolFile,
        bytes: &[u8],
        key: &FileKey,
        how: How,
    ) -> Result<Option<Arc<Loaded>>, Outcome> {
        let fail = |kind, msg: String| Outcome::new(kind, msg);
        let baseline = match how {
            How::Baseline => match self.baseline() {
                Some(b) => Some(b),
                None => return Ok(None),
            },
            How::CacheOnly | How::Optimized => None,
        };
        let link_failed = |e: wasmtime::Error| {
            fail(
                OutcomeKind::LaunchFailed,
                format!("{}: cannot link: {}", tool.name, first_line(&e)),
            )
        };
        let loaded = if wasmparser::Parser::is_component(bytes) {
            let invalid = |e: wasmtime::Error| {
                fail(
                    OutcomeKind::LaunchFailed,
                    format!(
                        "{}: invalid WebAssembly component: {}",
                        tool.name,
                        first_line(&e)
                    ),
                )
            };
            let component = match (how, baseline) {
                (_, Some(b)) => {
                    wasmtime::component::Component::new(&b.engine, bytes).map_err(invalid)?
                }
                (How::CacheOnly, _) => match self.cache.lookup(&self.engine, bytes) {
                    Some(c) => c,
                    None => return Ok(None),
                },
                _ => self.compile_component(bytes).map_err(invalid)?,
            };
            let linker = baseline.map_or(&self.component_linker, |b| &b.component_linker);
            let pre = linker.instantiate_pre(&component).map_err(link_failed)?;
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
            let invalid = |e: wasmtime::Error| {
                fail(
                    OutcomeKind::LaunchFailed,
                    format!("{}: invalid WebAssembly: {}", tool.name, first_line(&e)),
                )
            };
            let module = match (how, baseline) {
                (_, Some(b)) => Module::new(&b.engine, bytes).map_err(invalid)?,
                (How::CacheOnly, _) => match self.cache.lookup(&self.engine, bytes) {
                    Some(m) => m,
                    None => return Ok(None),
                },
                _ => self.compile(bytes).map_err(invalid)?.0,
            };
            let linker = baseline.map_or(&self.linker, |b| &b.linker);
            Loaded::Module(linker.instantiate_pre(&module).map_err(link_failed)?)
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

    pub(super) fn lock_loaded(&self) -> std::sync::MutexGuard<'_, HashMap<FileKey, Arc<Loaded>>> {
        self.loaded.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The bytes of an open tool file, at most [`MAX_TOOL_BYTES`]. Blocking.
pub(super) fn read_tool(
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

/// The key of a tool file named by one plain name in `dir`, from one
/// `fstatat` that does not follow a symlink: a loaded tool is found without
/// opening its file. A key is the file's identity and version (device,
/// inode, size, mtime, and the ctime no guest can set back) and its path,
/// so a hit is the file that was opened (through the capability handle)
/// and compiled before, unchanged since. (On NFS, a stat may answer from
/// the client's attribute cache, up to `acregmax`, where an open would
/// have revalidated it.)
/// `None` for a longer path (a name to walk), a symlink, anything but a
/// regular file, or an error: the caller then opens the file as on a miss.
#[cfg(unix)]
fn stat_key(dir: &cap_std::fs::Dir, rel: &Path, path: &Path) -> Option<FileKey> {
    use rustix::fs::{AtFlags, statat};
    let mut names = rel.components();
    let (Some(std::path::Component::Normal(name)), None) = (names.next(), names.next()) else {
        return None;
    };
    let st = statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).ok()?;
    FileStamp::of_stat(&st).map(|s| key_of_stamp(s, path))
}

/// The key of a tool file from its stamp (the open path, [`stat_key`] and
/// the sandbox's resolution read the same fields the same way).
fn key_of_stamp(s: FileStamp, path: &Path) -> FileKey {
    FileKey {
        builtin: false,
        dev: s.dev,
        ino: s.ino,
        size: s.size,
        mtime_ns: s.mtime_ns,
        ctime_ns: s.ctime_ns,
        path: path.to_path_buf(),
    }
}

/// Elsewhere (Windows), by size and mtime: a file rewritten to the same
/// size with its mtime set back is not seen as changed.
#[cfg(not(unix))]
pub(super) fn file_key(meta: &cap_std::fs::Metadata, path: &Path) -> FileKey {
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
            ctime_ns: 0,
            path: path.to_path_buf(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A configuration of its own (no other test uses the dir), without a
    /// pool, so that its engine is cheap to make.
    fn config(cache: &Path) -> WasmConfig {
        WasmConfig {
            cache_dir: Some(cache.to_path_buf()),
            pool_size: 0,
            ..WasmConfig::default()
        }
    }

    #[test]
    fn an_engine_goes_with_its_last_holder_once_newer_ones_are_kept() {
        let dirs: Vec<_> = (0..KEPT_ENGINES + 3)
            .map(|_| tempfile::tempdir().expect("dir"))
            .collect();
        let engine = |i: usize| WasmEngine::shared(&config(dirs[i].path())).expect("engine");
        let held = engine(0);
        let let_go = engine(1);
        let gone = Arc::downgrade(&let_go);
        // One engine per configuration while something holds it.
        assert!(Arc::ptr_eq(&held, &engine(0)));
        assert!(Arc::ptr_eq(&let_go, &engine(1)));
        drop(let_go);
        // More configurations than are kept, each let go at once (other
        // tests' engines, made meanwhile, only push the unheld one out
        // sooner; one of them may hold it for a moment on its way to
        // dropping it, so its end is waited for).
        for i in 2..dirs.len() {
            drop(engine(i));
        }
        let start = std::time::Instant::now();
        while gone.upgrade().is_some() && start.elapsed() < std::time::Duration::from_secs(5) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(
            gone.upgrade().is_none(),
            "an engine nothing holds outlived {} newer ones",
            dirs.len() - 2
        );
        // The held one is still the one its configuration gets; the one
        // let go is made anew when asked for again, and that new one is
        // then the one its configuration gets.
        assert!(Arc::ptr_eq(&held, &engine(0)));
        let again = engine(1);
        assert!(Arc::ptr_eq(&again, &engine(1)));
    }

    #[test]
    fn the_kept_ones_are_the_last_asked_for() {
        let mut recent = Recent::new(2);
        let (a, b, c) = (Arc::new('a'), Arc::new('b'), Arc::new('c'));
        assert!(recent.keep(&a).is_none());
        assert!(recent.keep(&b).is_none());
        // Asked for again: the newest, so `b` is the oldest.
        assert!(recent.keep(&a).is_none());
        let out = recent.keep(&c).expect("one put out");
        assert!(Arc::ptr_eq(&out, &b));
        assert_eq!(recent.items.len(), 2);
        // Only what nothing else holds is taken out.
        drop((out, b, c));
        let unheld = recent.take_unheld();
        assert_eq!(unheld.iter().map(|e| **e).collect::<Vec<_>>(), ['c']);
        assert_eq!(recent.items.len(), 1);
        assert!(Arc::ptr_eq(&recent.items[0], &a));
    }
}
