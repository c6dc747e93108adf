//! Benchmarks of the `wasm` backend, each against a baseline measured in the
//! same run (ratios are what to compare; these machines are shared and noisy).
//!
//! 1. Warm per-call latency p50/p99 of a trivial WASI command through
//!    `Sandbox::run` (preopens, env, capped pipes) against bare wasmtime: the
//!    same module instantiated and run on the same engine with the same two
//!    preopens and nothing of toolhost's. Beside them, in alternating blocks
//!    of 100 calls: the same call with more allowed dirs (the cost of each),
//!    the built-in `wc -l` opening a file against the same tool on stdin, and
//!    a native spawn of `/bin/true`.
//! 2. Throughput with 16 concurrent callers, toolhost against bare wasmtime.
//! 3. Cold `toolhost run --backend wasm -- wc ...` as a new process, warm disk
//!    cache against an empty one.
//! 4. Guest compute: sha256 of a 64 MiB file with the wasm `sha256sum` against
//!    native `sha256sum`, with the epoch meter and with fuel (medians of
//!    interleaved rounds); and the fuel calibration (fuel units per second of
//!    guest compute).
//!
//! The last line is JSON, for scripts: `{"bench":"wasm","warm_p50_us":...,
//! "bare_p50_us":...,"per_dir_us":...,"file_open_p50_us":...,
//! "stdin_p50_us":...,"calls_per_s_16":...,"bare_calls_per_s_16":...}`
//! (`null` for a figure whose section did not run).
//!
//! Run: `cargo bench --bench wasm` (build.rs builds the guests).
//! `BENCH_ITERS` sets the calls per latency series (default 2000);
//! `BENCH_SECTIONS` picks sections by number (e.g. `1,4`; default all).

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use toolhost::backend::wasm::WasmBackend;
use toolhost::config::{CpuMeter, WasmConfig};
use toolhost::{BackendChoice, RunRequest, Sandbox, SandboxConfig};
use wasmtime::{Engine, InstancePre, Linker, Module, Store};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::{FsPerms, I32Exit, WasiCtxBuilder};

/// Allowed dirs added to measure the cost of one more.
const EXTRA_DIRS: usize = 8;

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn wasm_config(meter: CpuMeter, cache: &Path) -> WasmConfig {
    let mut wasm = WasmConfig::default();
    wasm.cpu_meter = meter;
    wasm.cache_dir = Some(cache.to_path_buf());
    wasm
}

fn sandbox_in(dirs: &[std::path::PathBuf], meter: CpuMeter, cache: &Path) -> Sandbox {
    let config = SandboxConfig {
        backend: BackendChoice::Wasm,
        timeout: Duration::from_secs(120),
        max_cpu_seconds: 0,
        wasm: wasm_config(meter, cache),
        ..SandboxConfig::default()
    };
    Sandbox::new(dirs, config).expect("sandbox")
}

fn sandbox(ws: &Path, meter: CpuMeter, cache: &Path) -> Sandbox {
    sandbox_in(&[ws.to_path_buf()], meter, cache)
}

/// Bare wasmtime: a preview-1 module on toolhost's own engine, with the
/// preopens a sandbox of one dir gives (the dir at its path, and as `.`),
/// the same epoch deadline and yield, and nothing else: no policy, no
/// checks, no capped pipes, no hold of the epoch ticker (its calls are
/// too short to meet a tick). What a call cannot cost less than.
#[derive(Clone)]
struct Bare {
    engine: Engine,
    pre: InstancePre<WasiP1Ctx>,
    dir: std::path::PathBuf,
}

impl Bare {
    fn new(engine: &Engine, wasm: &Path, dir: &Path) -> Self {
        let module = Module::from_file(engine, wasm).expect("compile");
        let mut linker = Linker::new(engine);
        wasmtime_wasi::p1::add_to_linker_async(&mut linker, |s| s).expect("link");
        let pre = linker.instantiate_pre(&module).expect("instantiate_pre");
        Bare {
            engine: engine.clone(),
            pre,
            dir: std::fs::canonicalize(dir).expect("canonicalize"),
        }
    }

    /// `probe exit 0`, which must exit 0.
    async fn call(&self) {
        let mut b = WasiCtxBuilder::new();
        b.args(&["probe", "exit", "0"]);
        let guest = self.dir.to_str().expect("utf8");
        b.preopened_dir(&self.dir, guest, FsPerms::ReadWrite)
            .expect("preopen");
        b.preopened_dir(&self.dir, ".", FsPerms::ReadWrite)
            .expect("preopen");
        let mut store = Store::new(&self.engine, b.build_p1());
        store.set_epoch_deadline(1);
        store.epoch_deadline_async_yield_and_update(1);
        let instance = self
            .pre
            .instantiate_async(&mut store)
            .await
            .expect("instantiate");
        let start = instance
            .get_typed_func::<(), ()>(&mut store, "_start")
            .expect("_start");
        if let Err(e) = start.call_async(&mut store, ()).await {
            assert_eq!(e.downcast_ref::<I32Exit>().map(|e| e.0), Some(0), "{e:?}");
        }
    }
}

/// How many compiled entries (`.cwasm`) a compile cache dir holds.
fn cwasm_entries(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .expect("ls cache")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".cwasm"))
        .count()
}

/// The figures of the JSON line; `None` where a section did not run.
#[derive(Default)]
struct Figures {
    warm: Option<f64>,
    bare: Option<f64>,
    per_dir: Option<f64>,
    file_open: Option<f64>,
    stdin: Option<f64>,
    rate16: Option<f64>,
    bare_rate16: Option<f64>,
}

impl Figures {
    fn json(&self) -> String {
        let f = |v: Option<f64>| v.map_or("null".to_string(), |v| format!("{v:.1}"));
        let n = |v: Option<f64>| v.map_or("null".to_string(), |v| format!("{v:.0}"));
        format!(
            "{{\"bench\":\"wasm\",\"warm_p50_us\":{},\"bare_p50_us\":{},\"per_dir_us\":{},\"file_open_p50_us\":{},\"stdin_p50_us\":{},\"calls_per_s_16\":{},\"bare_calls_per_s_16\":{}}}",
            f(self.warm),
            f(self.bare),
            f(self.per_dir),
            f(self.file_open),
            f(self.stdin),
            n(self.rate16),
            n(self.bare_rate16),
        )
    }
}

fn main() {
    let probe = Path::new(env!("TOOLHOST_BUILD_GUEST_TESTS")).join("probe.wasm");
    assert!(
        probe.exists(),
        "{} is missing: build.rs builds it",
        probe.display()
    );
    let iters: usize = std::env::var("BENCH_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    let sections = std::env::var("BENCH_SECTIONS").unwrap_or_default();
    let run_section = |n: &str| sections.is_empty() || sections.split(',').any(|s| s.trim() == n);
    let ws = tempfile::tempdir().expect("tempdir");
    let cache = tempfile::tempdir().expect("cache");
    std::fs::copy(&probe, ws.path().join("probe.wasm")).expect("copy probe");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let sb = Arc::new(sandbox(ws.path(), CpuMeter::Epoch, cache.path()));
    let call = || RunRequest::new(["./probe.wasm", "exit", "0"]);
    // Held for the whole run: the sandbox's engine is this one only while
    // something holds it (an engine no sandbox holds may go, and `sb` makes
    // its backend at its first call).
    let backend = WasmBackend::new(&wasm_config(CpuMeter::Epoch, cache.path())).expect("engine");
    let engine = backend.engine().clone();
    let bare = Bare::new(&engine, &probe, ws.path());

    // A tool's first compile is Winch's (`baseline_compile`) and Cranelift's
    // code follows in the background: a series that starts before it is in
    // place times baseline code, or a compile competing for the 2 cores.
    // Each section below first waits (untimed) for every tier-up its warm-up
    // started: a sandbox's shutdown waits for its own, and the optimized code
    // is then in the disk cache and in the engine's memory.
    let settle = |sbs: &[&Sandbox], tools: usize| {
        let t = Instant::now();
        loop {
            for sb in sbs {
                rt.block_on(sb.shutdown());
            }
            if cwasm_entries(cache.path()) >= tools {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(300),
                "the optimized code of {tools} tools never reached the cache"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        println!(
            "(waited {:.0} ms, untimed, for the optimized code of {tools} tools)",
            t.elapsed().as_secs_f64() * 1e3
        );
    };

    let mut figures = Figures::default();
    // 1. Warm latency of toolhost's call against bare wasmtime (the same module
    // on the same engine, with the same two preopens), and against a native
    // spawn; the cost of each extra allowed dir; a built-in tool opening a
    // file against the same tool reading stdin.
    if run_section("1") {
        let extra: Vec<tempfile::TempDir> = (0..EXTRA_DIRS)
            .map(|_| tempfile::tempdir().expect("extra dir"))
            .collect();
        let mut dirs = vec![ws.path().to_path_buf()];
        dirs.extend(extra.iter().map(|d| d.path().to_path_buf()));
        let sb_many = sandbox_in(&dirs, CpuMeter::Epoch, cache.path());
        std::fs::write(ws.path().join("note.txt"), "one\ntwo\nthree\n").expect("note");
        let wc_file = || RunRequest::new(["wc", "-l", "note.txt"]);
        let wc_stdin = || RunRequest::new(["wc", "-l"]).stdin(b"one\ntwo\nthree\n".to_vec());
        for _ in 0..50 {
            assert!(rt.block_on(sb.run(call())).success());
            assert!(rt.block_on(sb_many.run(call())).success());
            rt.block_on(bare.call());
            let r = rt.block_on(sb.run(wc_file()));
            assert_eq!(r.stdout.trim(), "3 note.txt", "{r:?}");
            let r = rt.block_on(sb.run(wc_stdin()));
            assert_eq!(r.stdout.trim(), "3", "{r:?}");
        }
        // probe.wasm and the built-in tools' module.
        settle(&[&sb, &sb_many], 2);
        for _ in 0..50 {
            assert!(rt.block_on(sb.run(call())).success());
            assert!(rt.block_on(sb_many.run(call())).success());
            assert!(rt.block_on(sb.run(wc_file())).success());
            assert!(rt.block_on(sb.run(wc_stdin())).success());
        }
        // Alternating blocks of 100 calls: every series shares the machine's
        // noise, and none runs with caches just flushed by another (a fork and
        // exec between every wasm call would measure that, not the call).
        let mut s: [Vec<Duration>; 6] = Default::default();
        let block = 100;
        for b in 0..iters.div_ceil(block) {
            let n = block.min(iters - b * block);
            let timed = |f: &mut dyn FnMut(), into: &mut Vec<Duration>| {
                for _ in 0..n {
                    let t = Instant::now();
                    f();
                    into.push(t.elapsed());
                }
            };
            timed(
                &mut || assert!(rt.block_on(sb.run(call())).success()),
                &mut s[0],
            );
            timed(&mut || rt.block_on(bare.call()), &mut s[1]);
            timed(
                &mut || assert!(rt.block_on(sb_many.run(call())).success()),
                &mut s[2],
            );
            timed(
                &mut || assert!(rt.block_on(sb.run(wc_file())).success()),
                &mut s[3],
            );
            timed(
                &mut || assert!(rt.block_on(sb.run(wc_stdin())).success()),
                &mut s[4],
            );
            timed(
                &mut || {
                    Command::new("/bin/true")
                        .stdin(Stdio::null())
                        .output()
                        .expect("true");
                },
                &mut s[5],
            );
        }
        for v in s.iter_mut() {
            v.sort();
        }
        let p50 = |i: usize| us(pct(&s[i], 0.5));
        let p99 = |i: usize| us(pct(&s[i], 0.99));
        println!(
            "wasm backend: warm per-call latency ({iters} calls each, in alternating blocks of 100)"
        );
        println!("{:<58} {:>9} {:>9}", "", "p50 (us)", "p99 (us)");
        let rows = [
            "Sandbox::run, trivial WASI command (2 preopens)",
            "bare wasmtime, same module, engine and preopens",
            &format!("Sandbox::run, the same with {EXTRA_DIRS} more allowed dirs"),
            "Sandbox::run, built-in wc -l note.txt (opens a file)",
            "Sandbox::run, built-in wc -l on stdin",
            "native spawn of /bin/true (Command::output)",
        ];
        for (i, name) in rows.iter().enumerate() {
            println!("{name:<58} {:>9.1} {:>9.1}", p50(i), p99(i));
        }
        figures.warm = Some(p50(0));
        figures.bare = Some(p50(1));
        figures.per_dir = Some((p50(2) - p50(0)) / EXTRA_DIRS as f64);
        figures.file_open = Some(p50(3));
        figures.stdin = Some(p50(4));
        println!(
            "toolhost/bare wasmtime at p50: {:.2}x (goal <= 1.3x); per extra dir: {:.2} us (goal <= 1 us)",
            p50(0) / p50(1),
            (p50(2) - p50(0)) / EXTRA_DIRS as f64
        );
        println!(
            "file-opening/stdin at p50: {:.2}x (goal <= 2x); native spawn/toolhost: {:.1}x",
            p50(3) / p50(4),
            p50(5) / p50(0)
        );
    }
    // 2. Throughput with 16 concurrent callers, toolhost against bare wasmtime.
    if run_section("2") {
        for _ in 0..50 {
            assert!(rt.block_on(sb.run(call())).success());
        }
        settle(&[&sb], 1);
        let total = (iters * 2).max(1600) / 16 * 16;
        let per = total / 16;
        let toolhost_rate = || {
            let t = Instant::now();
            rt.block_on(async {
                let tasks: Vec<_> = (0..16)
                    .map(|_| {
                        let sb = sb.clone();
                        tokio::spawn(async move {
                            for _ in 0..per {
                                let r =
                                    sb.run(RunRequest::new(["./probe.wasm", "exit", "0"])).await;
                                assert!(r.success());
                            }
                        })
                    })
                    .collect();
                for task in tasks {
                    task.await.expect("task");
                }
            });
            total as f64 / t.elapsed().as_secs_f64()
        };
        let bare_rate = || {
            let t = Instant::now();
            rt.block_on(async {
                let tasks: Vec<_> = (0..16)
                    .map(|_| {
                        let bare = bare.clone();
                        tokio::spawn(async move {
                            for _ in 0..per {
                                bare.call().await;
                            }
                        })
                    })
                    .collect();
                for task in tasks {
                    task.await.expect("task");
                }
            });
            total as f64 / t.elapsed().as_secs_f64()
        };
        // Three rounds in turn; the median of each.
        let (mut th, mut bw) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            th.push(toolhost_rate());
            bw.push(bare_rate());
        }
        th.sort_by(f64::total_cmp);
        bw.sort_by(f64::total_cmp);
        println!();
        println!(
            "16 concurrent callers ({total} calls, median of 3 rounds): toolhost {:.0} calls/s, bare wasmtime {:.0} calls/s: {:.2}x (goal >= 0.5x)",
            th[1],
            bw[1],
            th[1] / bw[1]
        );
        figures.rate16 = Some(th[1]);
        figures.bare_rate16 = Some(bw[1]);
    }
    // 3. Cold process, warm disk cache vs an empty one.
    if run_section("3") {
        std::fs::write(ws.path().join("words.txt"), "a b c\nd e\n".repeat(1000)).expect("write");
        let toolhost = env!("CARGO_BIN_EXE_toolhost");
        let cli_cache = tempfile::tempdir().expect("cli cache");
        // Beside the workspace: a config in a writable allowed dir is refused.
        let cfg_dir = tempfile::tempdir().expect("config dir");
        let cfg = cfg_dir.path().join("bench.toml");
        std::fs::write(
            &cfg,
            format!(
                "[wasm]\ncache_dir = {:?}\n",
                cli_cache.path().to_string_lossy()
            ),
        )
        .expect("cfg");
        // The same, compiling with the optimizing compiler in the call.
        let cfg_opt = cfg_dir.path().join("bench-opt.toml");
        std::fs::write(
            &cfg_opt,
            format!(
                "[wasm]\ncache_dir = {:?}\nbaseline_compile = false\n",
                cli_cache.path().to_string_lossy()
            ),
        )
        .expect("cfg");
        let entry = || cwasm_entries(cli_cache.path()) > 0;
        // Until the optimized code is in the cache, from a call's start.
        let ready = std::cell::RefCell::new(Vec::new());
        let cold_with = |cfg: &Path, clear: bool, baseline: bool| {
            if clear {
                for e in std::fs::read_dir(cli_cache.path()).expect("ls").flatten() {
                    match std::fs::remove_file(e.path()) {
                        Err(e) if e.kind() != std::io::ErrorKind::NotFound => panic!("rm: {e}"),
                        _ => {}
                    }
                }
            }
            let t = Instant::now();
            let out = Command::new(toolhost)
                .args([
                    "run",
                    "--config",
                    cfg.to_str().expect("utf8"),
                    "--backend",
                    "wasm",
                    "--",
                    "wc",
                    "words.txt",
                ])
                .current_dir(ws.path())
                .stdin(Stdio::null())
                .output()
                .expect("toolhost");
            assert!(out.status.success(), "{out:?}");
            let took = t.elapsed();
            // A call that ran baseline code left its optimized compile to a
            // detached process: wait for its entry (untimed), so that it
            // neither runs beside the next measure nor is missed by it.
            while !entry() && t.elapsed() < Duration::from_secs(60) {
                std::thread::sleep(Duration::from_millis(1));
            }
            if clear && baseline {
                ready.borrow_mut().push(t.elapsed());
            }
            took
        };
        let cold = |clear: bool| cold_with(&cfg, clear, true);
        let runs = 7;
        let (mut empty, mut empty_opt) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            empty.push(cold(true));
            empty_opt.push(cold_with(&cfg_opt, true, false));
        }
        cold(false);
        let mut warm: Vec<Duration> = (0..runs).map(|_| cold(false)).collect();
        empty.sort();
        empty_opt.sort();
        warm.sort();
        println!();
        println!(
            "cold `toolhost run --backend wasm -- wc words.txt` as a new process (median of {runs})"
        );
        println!(
            "  compile cache empty: {:.1} ms (baseline compile); {:.1} ms with the optimizing compile in the call (baseline_compile = false)",
            empty[runs / 2].as_secs_f64() * 1e3,
            empty_opt[runs / 2].as_secs_f64() * 1e3
        );
        println!(
            "  compile cache warm:  {:.1} ms",
            warm[runs / 2].as_secs_f64() * 1e3
        );
        println!(
            "  warm is {:.1}x faster than the optimizing compile it saves (target >= 5x), {:.1}x than a baseline compile",
            empty_opt[runs / 2].as_secs_f64() / warm[runs / 2].as_secs_f64(),
            empty[runs / 2].as_secs_f64() / warm[runs / 2].as_secs_f64()
        );
        let mut ready = ready.borrow().clone();
        ready.sort();
        println!(
            "  optimized code in the cache {:.1} ms after an empty-cache call's start (a detached compile after a baseline call)",
            ready[ready.len() / 2].as_secs_f64() * 1e3
        );
        cold_against_wasmtime_cli(runs, ws.path(), &cold);
    }
    // 4. Guest compute: sha256 of 64 MiB, wasm (epoch, fuel) vs native.
    if run_section("4") {
        let big = ws.path().join("big.bin");
        let data: Vec<u8> = (0..64u32 << 20)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        std::fs::write(&big, &data).expect("big");
        drop(data);
        let native_sha = || {
            let t = Instant::now();
            let out = Command::new("sha256sum")
                .arg(&big)
                .output()
                .expect("sha256sum");
            assert!(out.status.success());
            (
                t.elapsed(),
                String::from_utf8_lossy(&out.stdout)
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .to_string(),
            )
        };
        let sb_fuel = sandbox(ws.path(), CpuMeter::Fuel, cache.path());
        let wasm_sha = |sb: &Sandbox| {
            let r = rt.block_on(sb.run(RunRequest::new(["sha256sum", "big.bin"])));
            assert!(r.success(), "{r:?}");
            (
                r.duration,
                r.stdout.split_whitespace().next().unwrap_or("").to_string(),
            )
        };
        // Warm the compile caches and the page cache.
        wasm_sha(&sb);
        wasm_sha(&sb_fuel);
        native_sha();
        // Rounds of native, epoch, fuel in turn, so that the three share the
        // machine's drift; the median of each is reported.
        let rounds = 7;
        let (mut ns, mut es, mut fs) = (Vec::new(), Vec::new(), Vec::new());
        let (mut nh, mut eh, mut fh) = (String::new(), String::new(), String::new());
        for _ in 0..rounds {
            let (d, h) = native_sha();
            ns.push(d);
            nh = h;
            let (d, h) = wasm_sha(&sb);
            es.push(d);
            eh = h;
            let (d, h) = wasm_sha(&sb_fuel);
            fs.push(d);
            fh = h;
        }
        for v in [&mut ns, &mut es, &mut fs] {
            v.sort();
        }
        let (n, e, f) = (ns[rounds / 2], es[rounds / 2], fs[rounds / 2]);
        // The last fuel run was not necessarily the best one: measure one more.
        let (sha_secs, _) = wasm_sha(&sb_fuel);
        let sha_fuel = toolhost::backend::wasm::fuel_used_by_last_call().unwrap_or(0);
        assert_eq!(nh, eh, "digests differ");
        assert_eq!(nh, fh, "digests differ");
        println!();
        println!("sha256 of 64 MiB (median of {rounds} interleaved rounds)");
        println!("  native sha256sum:        {:.0} ms", n.as_secs_f64() * 1e3);
        println!(
            "  wasm sha256sum, epoch:   {:.0} ms ({:.2}x native)",
            e.as_secs_f64() * 1e3,
            e.as_secs_f64() / n.as_secs_f64()
        );
        println!(
            "  wasm sha256sum, fuel:    {:.0} ms ({:.2}x native)",
            f.as_secs_f64() * 1e3,
            f.as_secs_f64() / n.as_secs_f64()
        );
        println!(
            "  fuel/epoch: {:.2}x (target: cheaper mechanism within 2.5x of native)",
            f.as_secs_f64() / e.as_secs_f64()
        );

        println!(
            "  fuel rate of sha256: {sha_fuel} fuel in {:.2} s = {:.2e} fuel/s",
            sha_secs.as_secs_f64(),
            sha_fuel as f64 / sha_secs.as_secs_f64()
        );

        // Fuel calibration: how much fuel a second of guest compute burns here.
        let spin = 400_000_000u64;
        let t = Instant::now();
        let r = rt.block_on(sb_fuel.run(RunRequest::new([
            "./probe.wasm".to_string(),
            "count".into(),
            spin.to_string(),
        ])));
        let secs = t.elapsed().as_secs_f64();
        assert!(r.success(), "{r:?}");
        let fuel_used = toolhost::backend::wasm::fuel_used_by_last_call().unwrap_or(0);
        println!();
        println!(
            "fuel rate of a tight integer loop: {fuel_used} fuel in {:.2} s = {:.2e} fuel/s (toolhost uses {:.2e})",
            secs,
            fuel_used as f64 / secs,
            toolhost::backend::wasm::FUEL_PER_SECOND as f64
        );
    }
    println!();
    println!("{}", figures.json());
}

/// The same cold call (an empty compile cache, a new process) against
/// wasmtime's own CLI running the same module bytes, interleaved: plainly,
/// and with a timeout (`-W timeout`), which compiles in epoch checks as
/// toolhost always does (a guest's CPU and wall-clock limits need them).
/// The CLI is `$TOOLHOST_BENCH_WASMTIME`, else `wasmtime` on `PATH`.
fn cold_against_wasmtime_cli(runs: usize, ws: &Path, toolhost_cold: &dyn Fn(bool) -> Duration) {
    let cli = std::env::var_os("TOOLHOST_BENCH_WASMTIME").unwrap_or_else(|| "wasmtime".into());
    let version = Command::new(&cli).arg("--version").output();
    let Ok(version) = version.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()) else {
        println!("  wasmtime's CLI: not found (set TOOLHOST_BENCH_WASMTIME), not compared");
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let wc = dir.path().join("wc.wasm");
    std::fs::write(
        &wc,
        toolhost::backend::wasm::builtin::get("wc").expect("wc"),
    )
    .expect("wc");
    let wasmtime = |timeout: bool| {
        let mut c = Command::new(&cli);
        c.args(["run", "-C", "cache=n"]);
        if timeout {
            c.args(["-W", "timeout=30s"]);
        }
        let t = Instant::now();
        let out = c
            .args(["--dir", "."])
            .arg(&wc)
            .arg("words.txt")
            .current_dir(ws)
            .stdin(Stdio::null())
            .output()
            .expect("wasmtime");
        assert!(out.status.success(), "{out:?}");
        t.elapsed()
    };
    let (mut th, mut plain, mut timed) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        th.push(toolhost_cold(true));
        plain.push(wasmtime(false));
        timed.push(wasmtime(true));
    }
    for v in [&mut th, &mut plain, &mut timed] {
        v.sort();
    }
    let ms = |v: &[Duration]| v[runs / 2].as_secs_f64() * 1e3;
    println!("  against {version}, interleaved, compile caches off or empty (median of {runs}):");
    println!(
        "    toolhost {:.1} ms; `wasmtime run` {:.1} ms ({:.2}x); with `-W timeout=30s` {:.1} ms ({:.2}x)",
        ms(&th),
        ms(&plain),
        ms(&th) / ms(&plain),
        ms(&timed),
        ms(&th) / ms(&timed)
    );
}
