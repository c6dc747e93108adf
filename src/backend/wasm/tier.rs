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
//!   epoch checks, instances allocated on demand), its linkers and its
//!   epoch ticker; made on a [`WasmEngine`]'s first baseline compile.
//! - [`WasmEngine::baseline`]: that engine, if this one compiles so.
//! - [`WasmEngine::start_tier_up`]: the optimized compile, on the blocking
//!   pool, in the engine's one tier-up slot (apart from its compile slots:
//!   a first call's compile never waits for a tier-up), counted while it
//!   waits or runs.
//! - [`WasmEngine::tier_ups_done`]: waits (bounded) until none runs;
//!   `WasmBackend::shutdown` awaits it, so a process that shuts its
//!   sandboxes down leaves its tools' optimized code in the disk cache.
//! - The hand-off, for a process whose end is its call's (the CLI's `run`,
//!   `call` and `tools`): [`defer_tier_ups`] keeps each tier-up's bytes
//!   instead of compiling them, and [`hand_off_tier_ups`] gives them to
//!   detached processes of this binary (`toolhost tier-up`, on a memfd),
//!   which compile them into the disk cache after this process has exited
//!   ([`compile_into_cache`]). A cold call then ends as soon as its
//!   baseline code has run, and the next process finds optimized code.
//! - At most [`MAX_TIER_UPS`] tier-ups, holding at most
//!   [`MAX_TIER_UP_BYTES`] of tools in all (the first always fits), wait or
//!   run at once per engine, or are kept per process; past that, a tool
//!   stays on baseline code in this process and its next process compiles
//!   it again.
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
use super::engine::{FileKey, WasmEngine};
use super::p1::State;
use crate::plan::ToolFile;

/// Whether this build has a baseline compiler.
pub(super) const BUILT_IN: bool = cfg!(all(target_os = "linux", target_arch = "x86_64"));

/// How long `WasmBackend::shutdown` waits for tier-ups under way.
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

/// The tier-ups of one engine under way (how many, and the bytes they
/// hold), and a wake-up when one ends.
#[derive(Default)]
pub(super) struct TierUps {
    running: Mutex<(usize, u64)>,
    ended: tokio::sync::Notify,
}

impl TierUps {
    fn lock(&self) -> std::sync::MutexGuard<'_, (usize, u64)> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many run.
    pub(super) fn count(&self) -> usize {
        self.lock().0
    }
}

/// One tier-up of `.1` bytes counted in [`TierUps`] until dropped.
struct Running(Arc<WasmEngine>, u64);

impl Drop for Running {
    fn drop(&mut self) {
        {
            let mut r = self.0.tier_ups.lock();
            r.0 = r.0.saturating_sub(1);
            r.1 = r.1.saturating_sub(self.1);
        }
        self.0.tier_ups.ended.notify_waiters();
    }
}

impl Baseline {
    /// The Winch engine of `meter`, its epoch ticker and linkers.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    fn new(meter: crate::config::CpuMeter) -> wasmtime::Result<Baseline> {
        use super::{component, engine::engine_config, p1::build_linker};
        // On demand, not pooled: baseline code runs for a tool's first calls
        // only, and a second pool would reserve its address space for good.
        let mut c = engine_config(meter, 0);
        c.strategy(wasmtime::Strategy::Winch);
        let engine = Engine::new(&c)?;
        super::engine::start_epoch_ticker(&engine)?;
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

    /// Compiles `bytes` (whose baseline code now runs under `key`) with
    /// Cranelift in the background, through the disk cache; its result
    /// replaces the baseline code under `key`. In the engine's tier-up
    /// slot, on the blocking pool.
    pub(super) fn start_tier_up(self: &Arc<Self>, tool: ToolFile, bytes: Vec<u8>, key: FileKey) {
        if DEFER.load(SeqCst) {
            return self.defer(tool.name, bytes);
        }
        let len = bytes.len() as u64;
        {
            let mut r = self.tier_ups.lock();
            if !fits(r.0, r.1, len) {
                tracing::debug!("{}: too many tier-ups under way; none for it", tool.name);
                return;
            }
            r.0 += 1;
            r.1 = r.1.saturating_add(len);
        }
        let running = Running(self.clone(), len);
        let slots = self.tier_up_slot.clone();
        tokio::spawn(async move {
            let Ok(permit) = slots.acquire_owned().await else {
                return;
            };
            let _ = tokio::task::spawn_blocking(move || {
                let _permit = permit;
                let engine = running.0.clone();
                match engine.prepare(&tool, &bytes, &key, super::engine::How::Optimized) {
                    Ok(_) => tracing::debug!("{}: optimized code in place", tool.name),
                    Err(o) => tracing::debug!("{}: no optimized code: {}", tool.name, o.message),
                }
                drop(running);
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

    /// Waits until no tier-up of this engine runs, at most
    /// [`TIER_UP_WAIT`]; returns at once, with no timer, when none does.
    pub(super) async fn tier_ups_done(&self) {
        let all_ended = async {
            loop {
                let ended = self.tier_ups.ended.notified();
                tokio::pin!(ended);
                // Registered before the count is read: an end in between
                // is not missed.
                ended.as_mut().enable();
                if self.tier_ups.count() == 0 {
                    return;
                }
                ended.await;
            }
        };
        if self.tier_ups.count() == 0 {
            return;
        }
        if tokio::time::timeout(TIER_UP_WAIT, all_ended).await.is_err() {
            tracing::debug!("tier-ups still under way after {TIER_UP_WAIT:?}");
        }
    }
}

/// From now on, this process keeps its tier-ups for [`hand_off_tier_ups`]
/// instead of compiling them: for a process that ends with its call.
pub fn defer_tier_ups() {
    DEFER.store(true, SeqCst);
}

/// Starts a detached process of this binary (`toolhost tier-up`) for each
/// tier-up kept since [`defer_tier_ups`]; it compiles the tool's optimized
/// code into the disk cache, at a lower priority, and outlives this
/// process. Its stdin is a memfd holding the bytes this process compiled
/// (not the tool's file, which may have changed since); its output goes
/// nowhere. A failure to start one is logged and costs only speed: the
/// next process compiles the tool again.
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
    use std::io::{Seek, Write};
    use std::os::unix::process::CommandExt;
    let fd = rustix::fs::memfd_create("toolhost-tier-up", rustix::fs::MemfdFlags::CLOEXEC)?;
    let mut bytes = std::fs::File::from(fd);
    bytes.write_all(&d.bytes)?;
    bytes.rewind()?;
    // This very binary, even if its file was replaced since it started.
    let _detached = std::process::Command::new("/proc/self/exe")
        .arg("tier-up")
        .args(&d.args)
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

/// `toolhost tier-up`: reads a module or component (at most the size of a
/// tool) from `input` and compiles it with the optimizing compiler of the
/// engine `config` describes into that engine's disk cache, unless another
/// process is compiling the same bytes for it (it holds the lock of their
/// entry's `.lock` file), or the cache holds them already. What
/// [`hand_off_tier_ups`] starts.
pub fn compile_into_cache(
    config: &crate::config::WasmConfig,
    input: &mut dyn std::io::Read,
) -> Result<(), String> {
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(input, super::MAX_TOOL_BYTES + 1),
        &mut bytes,
    )
    .map_err(|e| format!("reading the module: {e}"))?;
    if bytes.len() as u64 > super::MAX_TOOL_BYTES {
        return Err("the module is larger than a tool may be".into());
    }
    let mut config = config.clone();
    config.baseline_compile = false;
    config.validate().map_err(|e| e.to_string())?;
    let engine = WasmEngine::shared(&config).map_err(|e| format!("{e:#}"))?;
    if engine.cache.dir().is_none() {
        return Err("no disk cache to compile into".into());
    }
    // One process compiles given bytes at a time; the others have
    // nothing to add.
    let Some(_claim) = engine.cache.claim(&bytes) else {
        return Ok(());
    };
    let compiled = if wasmparser::Parser::is_component(&bytes) {
        engine.compile_component(&bytes).map(drop)
    } else {
        engine.compile(&bytes).map(drop)
    };
    compiled.map_err(|e| format!("{e:#}"))
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
        let first = engine.load_by(&wc, deadline()).await.expect("loaded");
        if !BUILT_IN {
            // No Winch in this build: the setting does nothing.
            assert!(engine.baseline().is_none());
            assert!(Engine::same(first.engine(), &engine.engine));
            return;
        }
        let baseline = engine.baseline().expect("a baseline tier");
        assert!(Engine::same(first.engine(), &baseline.engine));
        assert!(!Engine::same(first.engine(), &engine.engine));
        engine.tier_ups_done().await;
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
        let again = engine.load_by(&wc, deadline()).await.expect("loaded");
        assert!(Engine::same(again.engine(), &engine.engine));
        assert_eq!(engine.tier_ups.count(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn without_the_setting_every_compile_is_cranelifts_and_cached_at_once() {
        let cache = tempfile::tempdir().expect("cache dir");
        let engine = WasmEngine::shared(&config(cache.path(), false)).expect("engine");
        let bytes = salted("plain");
        let loaded = engine
            .load_by(&tool("plain", bytes), deadline())
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
            .load_by(&tool("tail", TAIL_CALL), deadline())
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
