//! Tiered compiles: with `[wasm] baseline_compile`, a tool with no compiled
//! code in memory or in the disk cache is compiled first by Winch,
//! wasmtime's baseline compiler (here 4-6x faster to compile than
//! Cranelift, its code slower), and its call runs that code at once.
//! Cranelift's optimized code follows in the background (a tier-up): it is
//! written to the disk cache and takes the baseline code's place for the
//! calls after it.
//!
//! Where Winch is not built in (anywhere but Linux on x86-64), every
//! compile is Cranelift's and the setting does nothing.
//!
//! Parts:
//! - [`Baseline`]: the second engine (Winch, with the same CPU meter and
//!   epoch checks, instances allocated on demand: the store's limiter holds
//!   them to the pool's counts and sizes, `limits::Limiter`, and its epoch
//!   ticked by `epoch`) and its linkers; made on a [`WasmEngine`]'s first baseline
//!   compile.
//! - [`WasmEngine::reserve_tier_up`]: a tier-up's place, taken before the
//!   baseline compile. At most [`MAX_TIER_UPS`] tier-ups, holding at most
//!   [`MAX_TIER_UP_BYTES`] of tools in all (the first always fits), wait or
//!   run per engine, or are kept per process; without a place, the call
//!   compiles Cranelift's code itself, so no tool stays on baseline code
//!   for want of one.
//! - [`WasmEngine::start_tier_up`]: the optimized compile, on the blocking
//!   pool, one at a time per engine (a slot apart from the compile slots),
//!   inside a rayon pool of one thread of its own, so that its functions
//!   never queue before a first call's compile on rayon's global pool.
//! - [`TierUps::done`]: what `WasmBackend::shutdown` waits for (10 s at
//!   most): the tier-ups its own calls started, so that a process that
//!   shuts its sandboxes down leaves their optimized code in the disk
//!   cache, and no sandbox waits for another's.
//! - The hand-off, for a process whose end is its call's (the CLI's `run`,
//!   `call` and `tools`): [`defer_tier_ups`] keeps each tier-up's bytes
//!   instead of compiling them, and [`hand_off_tier_ups`] gives them to
//!   detached processes of this binary (`toolhost tier-up`, the bytes on a
//!   sealed memfd, no other descriptor and no environment), which compile
//!   them into the disk cache after this process has exited
//!   ([`compile_into_cache`]): one at a time per cache dir and at most
//!   [`HELPER_PLACES`] waiting, on one thread, each bytes once an hour at
//!   most (a claim that outlives a failed or killed attempt), within the
//!   CPU the CLI gives it.
//!
//! What a tool runs on is the same in either tier: the same linkers (the
//! file budget, the guards of paths, the sleeps), limits (memory, the
//! epoch or fuel meter, the wall-clock timeout) and WASI context; only the
//! machine code differs. A module Winch refuses (it lacks tail calls, GC
//! types, exceptions and relaxed SIMD) is compiled by Cranelift at once.

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use wasmtime::{Engine, Linker};

use super::CState;
use super::engine::{FileKey, How, WasmEngine};
use super::p1::State;
use crate::plan::ToolFile;

/// Whether this build has a baseline compiler.
pub(super) const BUILT_IN: bool = cfg!(all(target_os = "linux", target_arch = "x86_64"));

/// How long `WasmBackend::shutdown` waits for its tier-ups under way.
const TIER_UP_WAIT: Duration = Duration::from_secs(10);

/// Tier-ups that may wait or run at once, per engine (and deferred ones
/// per process): each holds its tool's bytes until it ends.
pub(super) const MAX_TIER_UPS: usize = 8;

/// The most bytes of tools those tier-ups hold, unless one alone is more.
pub(super) const MAX_TIER_UP_BYTES: u64 = 256 << 20;

/// Whether one more tier-up of `len` bytes fits beside `count` others of
/// `bytes` in all.
fn fits(count: usize, bytes: u64, len: u64) -> bool {
    count == 0 || (count < MAX_TIER_UPS && bytes.saturating_add(len) <= MAX_TIER_UP_BYTES)
}

/// Detached tier-ups that may wait or run at once per cache dir, one
/// compiling at a time; past that, one gives up at once (and a CLI call
/// that finds none free compiles optimized code itself).
const HELPER_PLACES: usize = 32;

/// Whether tier-ups are kept for [`hand_off_tier_ups`] instead of run.
static DEFER: AtomicBool = AtomicBool::new(false);

/// The tier-ups kept for [`hand_off_tier_ups`].
static DEFERRED: Mutex<Vec<Deferred>> = Mutex::new(Vec::new());

/// A tier-up kept for a helper process: the tool's bytes and the
/// settings of the engine whose disk cache it fills.
struct Deferred {
    name: String,
    bytes: Vec<u8>,
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    args: Vec<std::ffi::OsString>,
}

/// The baseline tier's engine and linkers.
pub(super) struct Baseline {
    pub(super) engine: Engine,
    pub(super) linker: Linker<State>,
    pub(super) component_linker: wasmtime::component::Linker<CState>,
}

/// Tier-ups counted (how many, and the bytes they hold), and a wake-up
/// when one ends: an engine's (what bounds them) and a backend's (what its
/// shutdown waits for).
#[derive(Debug, Default)]
pub(crate) struct TierUps {
    running: Mutex<(usize, u64)>,
    ended: tokio::sync::Notify,
}

impl TierUps {
    fn lock(&self) -> std::sync::MutexGuard<'_, (usize, u64)> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many wait or run.
    pub(super) fn count(&self) -> usize {
        self.lock().0
    }

    /// Counts one more of `len` bytes, if it fits ([`fits`]) or if
    /// `bounded` is false.
    fn add(&self, len: u64, bounded: bool) -> bool {
        let mut r = self.lock();
        if bounded && !fits(r.0, r.1, len) {
            return false;
        }
        r.0 += 1;
        r.1 = r.1.saturating_add(len);
        true
    }

    fn remove(&self, len: u64) {
        {
            let mut r = self.lock();
            r.0 = r.0.saturating_sub(1);
            r.1 = r.1.saturating_sub(len);
        }
        self.ended.notify_waiters();
    }

    /// Waits until none waits or runs, at most [`TIER_UP_WAIT`]; returns
    /// at once, with no timer, when none does.
    pub(super) async fn done(&self) {
        if self.count() == 0 {
            return;
        }
        let all_ended = async {
            loop {
                let ended = self.ended.notified();
                tokio::pin!(ended);
                // Registered before the count is read: an end in between
                // is not missed.
                ended.as_mut().enable();
                if self.count() == 0 {
                    return;
                }
                ended.await;
            }
        };
        if tokio::time::timeout(TIER_UP_WAIT, all_ended).await.is_err() {
            tracing::debug!("tier-ups still under way after {TIER_UP_WAIT:?}");
        }
    }
}

/// A tier-up's place ([`WasmEngine::reserve_tier_up`]).
pub(super) enum TierUpPlace {
    /// In this process: counted in its engine's and its owner's
    /// [`TierUps`] until dropped.
    Here(Reserved),
    /// Kept for [`hand_off_tier_ups`].
    Deferred,
}

/// A place counted in an engine's and a backend's [`TierUps`].
pub(super) struct Reserved {
    engine: Arc<WasmEngine>,
    owner: Arc<TierUps>,
    len: u64,
}

impl Drop for Reserved {
    fn drop(&mut self) {
        self.engine.tier_ups.remove(self.len);
        self.owner.remove(self.len);
    }
}

impl Baseline {
    /// The Winch engine of `meter` (its epoch ticked by `epoch`) and linkers.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    fn new(meter: crate::config::CpuMeter) -> wasmtime::Result<Baseline> {
        use super::{component, engine::engine_config, p1::build_linker};
        // On demand, not pooled: baseline code runs for a tool's first calls
        // only, and a second pool would reserve its address space for as long
        // as its engine lives.
        // The store's limiter holds instances to the pool's counts and
        // sizes all the same (`limits::Limiter`).
        let mut c = engine_config(meter, 0);
        c.strategy(wasmtime::Strategy::Winch);
        let engine = Engine::new(&c)?;
        super::epoch::register(&engine)?;
        Ok(Baseline {
            linker: build_linker(&engine)?,
            component_linker: component::build_linker(&engine)?,
            engine,
        })
    }

    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    fn new(_meter: crate::config::CpuMeter) -> wasmtime::Result<Baseline> {
        wasmtime::bail!("no baseline compiler in this build")
    }
}

/// Runs `f` in the tier-ups' rayon pool of one thread (made on first use;
/// on the caller's thread if it cannot be): wasmtime's parallel compile
/// then runs its functions there, one at a time, never on the global pool
/// that first calls' compiles use.
fn in_tier_up_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    let pool = POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .thread_name(|_| "toolhost-tier-up".into())
            .build()
            .ok()
    });
    match pool {
        Some(p) => p.install(f),
        None => f(),
    }
}

impl WasmEngine {
    /// The baseline tier, made on first use; `None` when this engine
    /// compiles with Cranelift only (the setting is off, this build has no
    /// Winch, or its engine could not be made: logged once).
    pub(super) fn baseline(&self) -> Option<&Baseline> {
        if !self.baseline_compile || !BUILT_IN {
            return None;
        }
        static FAILED: OnceLock<()> = OnceLock::new();
        self.baseline
            .get_or_init(|| match Baseline::new(self.meter) {
                Ok(b) => Some(b),
                Err(e) => {
                    FAILED.get_or_init(|| {
                        tracing::warn!("no baseline compiles: {e:#}");
                    });
                    None
                }
            })
            .as_ref()
    }

    /// A place for the tier-up of a tool of `len` bytes whose call `owner`
    /// (a backend's tier-ups) makes, if this engine compiles baseline code
    /// first and one is free; `None`: the call compiles optimized code.
    pub(super) fn reserve_tier_up(
        self: &Arc<Self>,
        bytes: &[u8],
        owner: &Arc<TierUps>,
    ) -> Option<TierUpPlace> {
        let len = bytes.len() as u64;
        if !self.baseline_compile || !BUILT_IN || NO_BASELINE.load(SeqCst) {
            return None;
        }
        if DEFER.load(SeqCst) {
            // Only where a helper can take it now: a free place in its
            // queue, and no recent attempt at these bytes that failed.
            // Elsewhere (or with no disk cache) the call compiles optimized
            // code, so that no tool stays on baseline code in the CLI.
            if !self.cache.background_compile_possible(bytes, HELPER_PLACES) {
                return None;
            }
            let kept = DEFERRED.lock().unwrap_or_else(|e| e.into_inner());
            let held = kept.iter().map(|d| d.bytes.len() as u64).sum();
            return fits(kept.len(), held, len).then_some(TierUpPlace::Deferred);
        }
        if !self.tier_ups.add(len, true) {
            tracing::debug!("{MAX_TIER_UPS} tier-ups under way: an optimized compile in the call");
            return None;
        }
        owner.add(len, false);
        Some(TierUpPlace::Here(Reserved {
            engine: self.clone(),
            owner: owner.clone(),
            len,
        }))
    }

    /// Compiles `bytes` (whose baseline code now runs under `key`) with
    /// Cranelift in the background, through the disk cache; its result
    /// replaces the baseline code under `key`. In the engine's tier-up
    /// slot, on the blocking pool, in the tier-ups' rayon pool. A deferred
    /// place keeps the bytes for [`hand_off_tier_ups`] instead.
    pub(super) fn start_tier_up(
        self: &Arc<Self>,
        place: TierUpPlace,
        tool: ToolFile,
        bytes: Vec<u8>,
        key: FileKey,
    ) {
        let reserved = match place {
            TierUpPlace::Deferred => return self.defer(tool.name, bytes),
            TierUpPlace::Here(r) => r,
        };
        let slot = self.tier_up_slot.clone();
        tokio::spawn(async move {
            let Ok(permit) = slot.acquire_owned().await else {
                return;
            };
            let _ = tokio::task::spawn_blocking(move || {
                let _permit = permit;
                let engine = reserved.engine.clone();
                let done = in_tier_up_pool(|| engine.prepare(&tool, &bytes, &key, How::Optimized));
                match done {
                    Ok(_) => tracing::debug!("{}: optimized code in place", tool.name),
                    Err(o) => tracing::debug!("{}: no optimized code: {}", tool.name, o.message),
                }
                drop(reserved);
            })
            .await;
        });
    }

    /// Keeps a tier-up for [`hand_off_tier_ups`]; nothing to keep when this
    /// engine has no disk cache to fill.
    fn defer(&self, name: String, bytes: Vec<u8>) {
        let Some(dir) = self.cache.dir() else { return };
        let mut kept = DEFERRED.lock().unwrap_or_else(|e| e.into_inner());
        let held = kept.iter().map(|d| d.bytes.len() as u64).sum();
        if !fits(kept.len(), held, bytes.len() as u64) {
            return;
        }
        let meter = match self.meter {
            crate::config::CpuMeter::Epoch => "epoch",
            crate::config::CpuMeter::Fuel => "fuel",
        };
        let args = [
            "--cpu-meter".into(),
            meter.into(),
            "--pool-size".into(),
            self.pool_size.to_string().into(),
            "--cache-max-mb".into(),
            self.cache_max_mb.to_string().into(),
            "--cache-dir".into(),
            dir.as_os_str().to_owned(),
        ];
        kept.push(Deferred {
            name,
            bytes,
            args: args.into(),
        });
    }
}

/// For the toolhost binary only: from now on, this process keeps its
/// tier-ups for [`hand_off_tier_ups`] instead of compiling them, as a
/// process that ends with its call. Every descriptor it holds past stdio
/// is marked close-on-exec first, so that no process it starts inherits
/// one (what its own parent gave it included); where that cannot be done
/// (`close_range` with `CLOSE_RANGE_CLOEXEC` needs Linux 5.11), nothing
/// is deferred and a first call compiles optimized code, as with
/// `baseline_compile = false`.
#[doc(hidden)]
pub fn defer_tier_ups() {
    #[cfg(target_os = "linux")]
    if crate::sys::close_on_exec_from_3() {
        DEFER.store(true, SeqCst);
        return;
    }
    // No safe hand-off here: no baseline compile in this process either.
    NO_BASELINE.store(true, SeqCst);
}

/// Set when this process can neither hand tier-ups off nor should run
/// them itself ([`defer_tier_ups`] failed).
static NO_BASELINE: AtomicBool = AtomicBool::new(false);

/// For the toolhost binary only (it runs this process's own executable
/// with the hidden `tier-up` subcommand): starts a detached process for
/// each tier-up kept since [`defer_tier_ups`]; it compiles the tool's
/// optimized code into the disk cache ([`compile_into_cache`]) and
/// outlives this process. Its stdin is a sealed memfd holding the bytes
/// this process compiled (not the tool's file, which may have changed
/// since); every other descriptor of this process is marked close-on-exec
/// first; it gets no environment and its output goes nowhere. A failure
/// to start one is logged and costs only speed: the next process compiles
/// the tool again.
#[doc(hidden)]
pub fn hand_off_tier_ups() {
    let kept = std::mem::take(&mut *DEFERRED.lock().unwrap_or_else(|e| e.into_inner()));
    for d in kept {
        match spawn_helper(&d) {
            Ok(()) => tracing::debug!("{}: optimized compile handed off", d.name),
            Err(e) => tracing::debug!("{}: no optimized compile: {e}", d.name),
        }
    }
}

#[cfg(target_os = "linux")]
fn spawn_helper(d: &Deferred) -> std::io::Result<()> {
    use rustix::fs::{MemfdFlags, SealFlags};
    use std::io::{Seek, Write};
    use std::os::unix::process::CommandExt;
    let fd = rustix::fs::memfd_create(
        "toolhost-tier-up",
        MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
    )?;
    let mut bytes = std::fs::File::from(fd);
    bytes.write_all(&d.bytes)?;
    rustix::fs::fcntl_add_seals(
        &bytes,
        SealFlags::WRITE | SealFlags::GROW | SealFlags::SHRINK | SealFlags::SEAL,
    )?;
    bytes.rewind()?;
    // What this process got from its parent beyond stdio (a shell's
    // `3>&1`, a harness's pipes) must not stay open in a process that
    // outlives it: marked at `defer_tier_ups`, and again for what was
    // opened since.
    if !crate::sys::close_on_exec_from_3() {
        return Err(std::io::Error::other(
            "cannot mark descriptors close-on-exec",
        ));
    }
    // This very binary, even if its file was replaced since it started.
    let _detached = std::process::Command::new("/proc/self/exe")
        .arg("tier-up")
        .args(&d.args)
        .env_clear()
        .stdin(bytes)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .current_dir("/")
        // Not in the caller's process group: a Ctrl-C at the terminal
        // that ran this call does not reach it.
        .process_group(0)
        .spawn()?;
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn spawn_helper(_d: &Deferred) -> std::io::Result<()> {
    Err(std::io::Error::other("no tier-up helper on this platform"))
}

/// For the toolhost binary only (`toolhost tier-up`, what
/// [`hand_off_tier_ups`] starts): reads a module or component (at most
/// the size of a tool) from `input` and compiles it with the optimizing
/// compiler of the engine `config` describes into that engine's disk
/// cache, on one thread, once no other process compiles for that dir.
/// Nothing is done when the cache dir is gone (its owner removed it), when
/// [`HELPER_PLACES`] such processes wait or run already, when one compiles
/// the same bytes or an attempt at them ended without an entry in the last
/// hour (killed, or failed), or when the cache holds them already.
#[doc(hidden)]
pub fn compile_into_cache(
    config: &crate::config::WasmConfig,
    input: &mut dyn std::io::Read,
) -> Result<(), String> {
    let mut config = config.clone();
    config.baseline_compile = false;
    config.validate().map_err(|e| e.to_string())?;
    // Not made again: a dir its owner removed stays removed.
    if !config.cache_dir.as_ref().is_some_and(|d| d.is_dir()) {
        return Ok(());
    }
    let engine = WasmEngine::shared(&config).map_err(|e| format!("{e:#}"))?;
    // A place, then the turn, before the bytes are read: a helper that
    // waits holds only its stdin.
    let Some(_place) = engine.cache.claim_place(HELPER_PLACES) else {
        return Ok(());
    };
    let Some(_turn) = engine.cache.wait_turn() else {
        return Ok(());
    };
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(input, super::MAX_TOOL_BYTES + 1),
        &mut bytes,
    )
    .map_err(|e| format!("reading the module: {e}"))?;
    if bytes.len() as u64 > super::MAX_TOOL_BYTES {
        return Err("the module is larger than a tool may be".into());
    }
    let Some(mut claim) = engine.cache.claim(&bytes) else {
        return Ok(());
    };
    if claim.tried() {
        return Ok(());
    }
    claim.mark_attempt();
    let compiled = in_tier_up_pool(|| {
        if wasmparser::Parser::is_component(&bytes) {
            engine.compile_component(&bytes).map(drop)
        } else {
            engine.compile(&bytes).map(drop)
        }
    });
    compiled.map_err(|e| format!("{e:#}"))?;
    claim.done();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::engine::Lookup;
    use super::*;
    use crate::config::WasmConfig;
    use crate::plan::ToolSource;
    use wasmtime::Module;

    /// A built-in tool made unique by a custom section naming `salt`, so
    /// that no engine of the process and no disk cache has its code.
    fn salted(salt: &str) -> &'static [u8] {
        let mut m = crate::backend::wasm::builtin::get("wc")
            .expect("the built-in wc")
            .to_vec();
        let name = format!("{salt}-{:?}", std::time::SystemTime::now());
        m.push(0);
        m.push((name.len() + 1) as u8);
        m.push(name.len() as u8);
        m.extend(name.as_bytes());
        Box::leak(m.into_boxed_slice())
    }

    fn tool(name: &str, bytes: &'static [u8]) -> ToolFile {
        ToolFile {
            name: name.into(),
            source: ToolSource::Builtin(bytes),
            host_path: format!("builtin:{name}.wasm").into(),
        }
    }

    fn config(cache: &std::path::Path, baseline: bool) -> WasmConfig {
        WasmConfig {
            cache_dir: Some(cache.to_path_buf()),
            baseline_compile: baseline,
            ..WasmConfig::default()
        }
    }

    fn deadline() -> tokio::time::Instant {
        tokio::time::Instant::now() + Duration::from_secs(120)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_first_compile_runs_baseline_code_until_optimized_code_replaces_it() {
        let cache = tempfile::tempdir().expect("cache dir");
        let engine = WasmEngine::shared(&config(cache.path(), true)).expect("engine");
        let bytes = salted("tiered");
        let wc = tool("tiered", bytes);
        let owner = Arc::<TierUps>::default();
        let first = engine
            .load_by(&wc, deadline(), &owner)
            .await
            .expect("loaded");
        if !BUILT_IN {
            // No Winch in this build: the setting does nothing.
            assert!(engine.baseline().is_none());
            assert!(Engine::same(first.engine(), &engine.engine));
            return;
        }
        let baseline = engine.baseline().expect("a baseline tier");
        assert!(Engine::same(first.engine(), &baseline.engine));
        assert!(!Engine::same(first.engine(), &engine.engine));
        owner.done().await;
        assert_eq!(owner.count(), 0);
        assert_eq!(engine.tier_ups.count(), 0);
        let Ok(Lookup::Loaded(now)) = engine.lookup(&wc) else {
            panic!("the tool is no longer loaded");
        };
        assert!(
            Engine::same(now.engine(), &engine.engine),
            "still baseline code"
        );
        assert!(
            engine
                .cache
                .lookup::<Module>(&engine.engine, bytes)
                .is_some(),
            "the optimized code is not in the disk cache"
        );
        // A later load finds the optimized code; no second tier-up.
        let again = engine
            .load_by(&wc, deadline(), &owner)
            .await
            .expect("loaded");
        assert!(Engine::same(again.engine(), &engine.engine));
        assert_eq!(engine.tier_ups.count(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn without_the_setting_every_compile_is_cranelifts_and_cached_at_once() {
        let cache = tempfile::tempdir().expect("cache dir");
        let engine = WasmEngine::shared(&config(cache.path(), false)).expect("engine");
        let bytes = salted("plain");
        let loaded = engine
            .load_by(&tool("plain", bytes), deadline(), &Arc::default())
            .await
            .expect("loaded");
        assert!(Engine::same(loaded.engine(), &engine.engine));
        assert!(engine.baseline().is_none());
        assert_eq!(engine.tier_ups.count(), 0);
        assert!(
            engine
                .cache
                .lookup::<Module>(&engine.engine, bytes)
                .is_some()
        );
    }

    /// `(module (func $g) (func (export "_start") return_call $g))`: tail
    /// calls, which Winch lacks.
    const TAIL_CALL: &[u8] = &[
        0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // header
        0x01, 0x04, 0x01, 0x60, 0x00, 0x00, // type () -> ()
        0x03, 0x03, 0x02, 0x00, 0x00, // two functions of it
        0x07, 0x0a, 0x01, 0x06, b'_', b's', b't', b'a', b'r', b't', 0x00, 0x01, // export
        0x0a, 0x09, 0x02, 0x02, 0x00, 0x0b, 0x04, 0x00, 0x12, 0x00, 0x0b, // code
    ];

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_module_winch_refuses_is_compiled_by_cranelift_at_once() {
        let cache = tempfile::tempdir().expect("cache dir");
        let engine = WasmEngine::shared(&config(cache.path(), true)).expect("engine");
        let loaded = engine
            .load_by(&tool("tail", TAIL_CALL), deadline(), &Arc::default())
            .await
            .expect("a tail-calling module loads");
        assert!(Engine::same(loaded.engine(), &engine.engine));
        assert_eq!(engine.tier_ups.count(), 0);
        assert!(
            engine
                .cache
                .lookup::<Module>(&engine.engine, TAIL_CALL)
                .is_some()
        );
        // Allowed twin: the baseline tier exists and compiles what it can.
        if BUILT_IN {
            let b = engine.baseline().expect("a baseline tier");
            assert!(Module::new(&b.engine, salted("twin")).is_ok());
            assert!(Module::new(&b.engine, TAIL_CALL).is_err());
        }
    }
}
