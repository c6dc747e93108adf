//! Benchmarks of the `wasm` backend, each against a baseline measured in the
//! same run (ratios are what to compare; these machines are shared and noisy).
//!
//! 1. Warm per-call latency p50/p99 of a trivial WASI command through
//!    `Sandbox::run` (preopens, env, capped pipes) against a bare native spawn of
//!    `/bin/true`, in alternating blocks of 100 calls.
//! 2. Throughput of the same call with 16 concurrent callers.
//! 3. Cold `toolhost run --backend wasm -- wc ...` as a new process, warm disk
//!    cache against an empty one.
//! 4. Guest compute: sha256 of a 64 MiB file with the wasm `sha256sum` against
//!    native `sha256sum`, with the epoch meter and with fuel (medians of
//!    interleaved rounds); and the fuel calibration (fuel units per second of
//!    guest compute).
//!
//! Run: `cargo bench --bench wasm` (build.rs builds the guests).
//! `BENCH_ITERS` sets the calls per latency series (default 2000);
//! `BENCH_SECTIONS` picks sections by number (e.g. `1,4`; default all).

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use toolhost::config::{CpuMeter, WasmConfig};
use toolhost::{BackendChoice, RunRequest, Sandbox, SandboxConfig};

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn sandbox(ws: &Path, meter: CpuMeter, cache: &Path) -> Sandbox {
    let mut wasm = WasmConfig::default();
    wasm.cpu_meter = meter;
    wasm.cache_dir = Some(cache.to_path_buf());
    let config = SandboxConfig {
        backend: BackendChoice::Wasm,
        timeout: Duration::from_secs(120),
        max_cpu_seconds: 0,
        wasm,
        ..SandboxConfig::default()
    };
    Sandbox::new([ws], config).expect("sandbox")
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

    // 1. Warm latency, interleaved with the native baseline.
    if run_section("1") {
        for _ in 0..50 {
            assert!(rt.block_on(sb.run(call())).success());
        }
        // Alternating blocks of 100 calls: both series share the machine's
        // noise, and neither runs with caches just flushed by the other (a fork
        // and exec between every wasm call would measure that, not the call).
        let (mut wasm, mut native) = (Vec::new(), Vec::new());
        let block = 100;
        for b in 0..iters.div_ceil(block) {
            let n = block.min(iters - b * block);
            for _ in 0..n {
                let t = Instant::now();
                let r = rt.block_on(sb.run(call()));
                wasm.push(t.elapsed());
                assert!(r.success(), "{r:?}");
            }
            for _ in 0..n {
                let t = Instant::now();
                Command::new("/bin/true")
                    .stdin(Stdio::null())
                    .output()
                    .expect("true");
                native.push(t.elapsed());
            }
        }
        wasm.sort();
        native.sort();
        println!(
            "wasm backend: warm per-call latency ({iters} calls each, in alternating blocks of 100)"
        );
        println!("{:<46} {:>9} {:>9}", "", "p50 (us)", "p99 (us)");
        println!(
            "{:<46} {:>9.1} {:>9.1}",
            "native spawn of /bin/true (Command::output)",
            us(pct(&native, 0.5)),
            us(pct(&native, 0.99))
        );
        println!(
            "{:<46} {:>9.1} {:>9.1}",
            "Sandbox::run, trivial WASI command",
            us(pct(&wasm, 0.5)),
            us(pct(&wasm, 0.99))
        );
        println!(
            "native/wasm at p50: {:.1}x faster (targets: p50 <= 50 us, >= 10x)",
            us(pct(&native, 0.5)) / us(pct(&wasm, 0.5))
        );
    }
    // 2. Throughput with 16 concurrent callers.
    if run_section("2") {
        let total = (iters * 2).max(1600);
        let t = Instant::now();
        rt.block_on(async {
            let per = total / 16;
            let tasks: Vec<_> = (0..16)
                .map(|_| {
                    let sb = sb.clone();
                    tokio::spawn(async move {
                        for _ in 0..per {
                            let r = sb.run(RunRequest::new(["./probe.wasm", "exit", "0"])).await;
                            assert!(r.success());
                        }
                    })
                })
                .collect();
            for task in tasks {
                task.await.expect("task");
            }
        });
        let el = t.elapsed();
        println!();
        println!(
            "16 concurrent callers: {:.0} calls/s ({} calls in {:.2} s)",
            (total / 16 * 16) as f64 / el.as_secs_f64(),
            total / 16 * 16,
            el.as_secs_f64()
        );
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
        let cold = |clear: bool| {
            if clear {
                for e in std::fs::read_dir(cli_cache.path()).expect("ls").flatten() {
                    std::fs::remove_file(e.path()).expect("rm");
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
            t.elapsed()
        };
        let runs = 7;
        let mut empty: Vec<Duration> = (0..runs).map(|_| cold(true)).collect();
        cold(false);
        let mut warm: Vec<Duration> = (0..runs).map(|_| cold(false)).collect();
        empty.sort();
        warm.sort();
        println!();
        println!(
            "cold `toolhost run --backend wasm -- wc words.txt` as a new process (median of {runs})"
        );
        println!(
            "  compile cache empty: {:.1} ms",
            empty[runs / 2].as_secs_f64() * 1e3
        );
        println!(
            "  compile cache warm:  {:.1} ms",
            warm[runs / 2].as_secs_f64() * 1e3
        );
        println!(
            "  warm is {:.1}x faster (target >= 5x)",
            empty[runs / 2].as_secs_f64() / warm[runs / 2].as_secs_f64()
        );
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
}
