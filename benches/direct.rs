//! Benchmarks of the `direct` backend, with their baselines measured in the same
//! run (these machines are shared and noisy: compare ratios, not absolutes).
//!
//! 1. Per-call latency p50/p99 of `/bin/true` through `Sandbox::run` hardened
//!    (`isolation = "best-effort"`, the Linux default: Landlock, seccomp, the
//!    network namespace, the private tmp), unhardened (`isolation = "off"`),
//!    and a bare `std::process::Command` spawn of the same binary.
//! 2. The same hardened call and bare spawn, again once this
//!    process holds what an MCP server holds: a loaded wasm engine (a call
//!    made through it) and a few hundred MB of heap.
//! 3. Throughput with 16 concurrent callers, hardened against bare spawns
//!    (`tokio::process::Command`).
//! 4. Peak RSS of `toolhost run` while the tool writes 300 MB to stdout under the
//!    default cap, against `toolhost run -- true`.
//! 5. `toolhost run -- true` as a whole process (start, the call, exit),
//!    hardened and with `--isolation off`, against the tool itself started
//!    as a process the same way (`Command::status`).
//!
//! Sections 1, 2 and 5 measure in blocks: [`BLOCK`] calls of one series in
//! a row, the series in turn, the first call of each block not counted. A
//! call returns before all of its work is done: the supervisor is reaped,
//! and the call's namespaces torn down, after its report; its private tmp
//! is removed, and the next call's spare made, on a thread of their own; a
//! CLI's network namespace is freed by the kernel after the process has
//! exited. Interleaved call by call, that work would land in whichever call
//! is measured next (the bare spawn) and flatter the ratio; in a block,
//! each call pays for what the one before it, of the same series, left.
//!
//! The last line is JSON, for scripts: `{"bench":"direct","hardened_p50_us":...,
//! "off_p50_us":...,"bare_p50_us":...,"hardened_with_engine_p50_us":...,
//! "calls_per_s_16":...,"bare_calls_per_s_16":...}`.
//!
//! Run: `cargo bench --bench direct`. `BENCH_ITERS` sets the
//! number of calls per series (default 2000).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use toolhost::isolation::IsolationLevel;
use toolhost::{RunRequest, Sandbox, SandboxConfig};

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx]
}

/// Calls of one series in a row, in [`blocks`].
const BLOCK: usize = 20;

/// Runs each of `series` in blocks of [`BLOCK`] calls, in turn, until each
/// has `n` samples; the first call of a block (which pays for what the
/// series before it left) is not counted. One `Vec` of samples per series.
fn blocks(n: usize, series: &[&dyn Fn()]) -> Vec<Vec<Duration>> {
    let mut out: Vec<Vec<Duration>> = series.iter().map(|_| Vec::with_capacity(n)).collect();
    while out[0].len() < n {
        for (f, v) in series.iter().zip(out.iter_mut()) {
            f();
            for _ in 0..BLOCK.min(n - v.len()) {
                let t = Instant::now();
                f();
                v.push(t.elapsed());
            }
        }
    }
    out
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

struct Series {
    name: &'static str,
    samples: Vec<Duration>,
}

impl Series {
    fn new(name: &'static str, n: usize) -> Self {
        Series {
            name,
            samples: Vec::with_capacity(n),
        }
    }
    fn stats(&mut self) -> (Duration, Duration) {
        self.samples.sort();
        (
            percentile(&self.samples, 0.5),
            percentile(&self.samples, 0.99),
        )
    }
}

/// Peak RSS (KiB) of a command's process tree, via wait4's rusage.
fn peak_rss_kib(cmd: &mut Command) -> (i64, std::process::ExitStatus) {
    use std::os::unix::process::ExitStatusExt;
    let child = cmd.spawn().expect("spawn");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: rusage is plain data written by wait4.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 on our own child; std's Child is forgotten so it is not waited twice.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    assert_eq!(r, pid, "wait4");
    std::mem::forget(child);
    (ru.ru_maxrss, std::process::ExitStatus::from_raw(status))
}

fn main() {
    let iters: usize = std::env::var("BENCH_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    let bin = if std::path::Path::new("/bin/true").exists() {
        "/bin/true"
    } else {
        "/usr/bin/true"
    };
    let ws = tempfile::tempdir().expect("tempdir");
    let sandbox = Sandbox::new([ws.path()], SandboxConfig::default()).expect("sandbox");
    let unhardened = Sandbox::new(
        [ws.path()],
        SandboxConfig {
            isolation: IsolationLevel::Off,
            ..SandboxConfig::default()
        },
    )
    .expect("sandbox");
    // A workspace that is a git repository: its `.git` is a protected path,
    // which the hardened call holds with a mount namespace of its own.
    let repo = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(repo.path().join(".git/hooks")).expect("mkdir .git");
    std::fs::write(repo.path().join(".git/config"), "[core]\n").expect("config");
    let in_repo = Sandbox::new([repo.path()], SandboxConfig::default()).expect("sandbox");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");

    // Warm up both paths (page cache, allocator, runtime threads).
    for _ in 0..50 {
        let r = rt.block_on(sandbox.run(RunRequest::new([bin])));
        assert!(r.success(), "{r:?}");
        let r = rt.block_on(unhardened.run(RunRequest::new([bin])));
        assert!(r.success(), "{r:?}");
        let r = rt.block_on(in_repo.run(RunRequest::new([bin])));
        assert!(r.success(), "{r:?}");
        Command::new(bin)
            .stdin(Stdio::null())
            .output()
            .expect("bare");
    }

    let mut bare = Series::new("bare std::process::Command::output()", iters);
    let mut sandboxed = Series::new("Sandbox::run, hardened (best-effort)", iters);
    let mut plain = Series::new("Sandbox::run, unhardened (off)", iters);
    let mut repo_series = Series::new("Sandbox::run, hardened, in a git repo", iters);
    let layers = rt
        .block_on(sandbox.run(RunRequest::new([bin])))
        .isolation
        .map(|i| i.applied.join(", "))
        .unwrap_or_default();
    let bare_call = || {
        let out = Command::new(bin)
            .stdin(Stdio::null())
            .output()
            .expect("bare");
        assert!(out.status.success());
    };
    let call = |sb: &Sandbox| {
        let r = rt.block_on(sb.run(RunRequest::new([bin])));
        assert!(r.success(), "{r:?}");
    };
    let mut got = blocks(
        iters,
        &[
            &bare_call,
            &|| call(&sandbox),
            &|| call(&unhardened),
            &|| call(&in_repo),
        ],
    )
    .into_iter();
    for s in [&mut bare, &mut sandboxed, &mut plain, &mut repo_series] {
        s.samples = got.next().unwrap_or_default();
    }
    let (bare50, bare99) = bare.stats();
    println!(
        "direct backend, per-call latency of {bin} ({iters} calls each, in blocks of {BLOCK})"
    );
    println!("{:<40} {:>10} {:>10}", "", "p50 (us)", "p99 (us)");
    println!("hardened layers: {layers}");
    for s in [&mut bare, &mut plain, &mut sandboxed, &mut repo_series] {
        let (p50, p99) = s.stats();
        println!("{:<40} {:>10.0} {:>10.0}", s.name, us(p50), us(p99));
    }
    let (sb50, sb99) = sandboxed.stats();
    let (pl50, pl99) = plain.stats();
    let (rp50, rp99) = repo_series.stats();
    println!(
        "ratio unhardened/bare: p50 {:.2}x, p99 {:.2}x (target: p50 within 1.5x)",
        us(pl50) / us(bare50),
        us(pl99) / us(bare99)
    );
    println!(
        "ratio hardened/unhardened: p50 {:.2}x, p99 {:.2}x (target: under 1.5x); hardened/bare: p50 {:.2}x",
        us(sb50) / us(pl50),
        us(sb99) / us(pl99),
        us(sb50) / us(bare50)
    );
    println!(
        "ratio hardened in a git repo (protected .git mounted read-only)/hardened: p50 {:.2}x, p99 {:.2}x",
        us(rp50) / us(sb50),
        us(rp99) / us(sb99)
    );

    // 2. With a wasm engine loaded and 384 MiB of heap in use, as in an MCP
    // server: the hardened call against the bare spawn again.
    let heap: Vec<u8> = (0..384usize << 20).map(|i| (i >> 12) as u8 | 1).collect();
    let wasm_sb = Sandbox::new(
        [ws.path()],
        SandboxConfig {
            backend: toolhost::BackendChoice::Wasm,
            ..SandboxConfig::default()
        },
    )
    .expect("wasm sandbox");
    let r = rt.block_on(wasm_sb.run(RunRequest::new(["wc", "-l"]).stdin(b"a\nb\n".to_vec())));
    assert!(r.success(), "{r:?}");
    let mut bare_big = Series::new("bare std::process::Command::output()", iters);
    let mut hard_big = Series::new("Sandbox::run, hardened (best-effort)", iters);
    let mut got = blocks(iters, &[&bare_call, &|| call(&sandbox)]).into_iter();
    bare_big.samples = got.next().unwrap_or_default();
    hard_big.samples = got.next().unwrap_or_default();
    let (bb50, _) = bare_big.stats();
    let (hb50, hb99) = hard_big.stats();
    println!();
    println!(
        "with a wasm engine loaded and {} MiB of heap ({iters} calls each, in blocks of {BLOCK})",
        heap.len() >> 20
    );
    println!("{:<40} {:>10.0}", bare_big.name, us(bb50));
    println!(
        "{:<40} {:>10.0} {:>10.0}",
        hard_big.name,
        us(hb50),
        us(hb99)
    );
    println!(
        "ratio hardened/bare here: p50 {:.2}x; against the bare spawn of the small process: {:.2}x (goal <= 1.3x)",
        us(hb50) / us(bb50),
        us(hb50) / us(bare50)
    );
    drop(heap);
    drop(wasm_sb);

    // 3. 16 concurrent callers, hardened against bare spawns.
    let total = (iters * 2).max(800) / 16 * 16;
    let per = total / 16;
    let sandbox = std::sync::Arc::new(sandbox);
    let hardened_rate = || {
        let t = Instant::now();
        rt.block_on(async {
            let tasks: Vec<_> = (0..16)
                .map(|_| {
                    let sb = sandbox.clone();
                    tokio::spawn(async move {
                        for _ in 0..per {
                            let r = sb.run(RunRequest::new([bin])).await;
                            assert!(r.success(), "{r:?}");
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
                    tokio::spawn(async move {
                        for _ in 0..per {
                            let out = tokio::process::Command::new(bin)
                                .stdin(Stdio::null())
                                .output()
                                .await
                                .expect("bare");
                            assert!(out.status.success());
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
    let (mut hr, mut br) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        hr.push(hardened_rate());
        br.push(bare_rate());
    }
    hr.sort_by(f64::total_cmp);
    br.sort_by(f64::total_cmp);
    println!();
    println!(
        "16 concurrent callers ({total} calls, median of 3 rounds): hardened {:.0} calls/s, bare spawn {:.0} calls/s: {:.2}x (goal >= 0.7x)",
        hr[1],
        br[1],
        hr[1] / br[1]
    );

    // 4. Peak RSS of the CLI under a 300 MB flood, against an idle call.
    let toolhost = env!("CARGO_BIN_EXE_toolhost");
    let run = |argv: &[&str]| {
        let mut cmd = Command::new(toolhost);
        cmd.arg("run")
            .arg("--")
            .args(argv)
            .current_dir(ws.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        peak_rss_kib(&mut cmd)
    };
    let (idle, st) = run(&["true"]);
    assert!(st.success());
    let t = Instant::now();
    let (flood, st) = run(&["head", "-c", "300000000", "/dev/zero"]);
    let flood_time = t.elapsed();
    assert!(st.success(), "flood run failed: {st:?}");
    println!();
    println!("peak RSS of `toolhost run` (max over its process tree, from wait4)");
    println!(
        "{:<40} {:>10.1}",
        "toolhost run -- true (MiB)",
        idle as f64 / 1024.0
    );
    println!(
        "{:<40} {:>10.1}   ({:.2} s, default 10 MiB cap)",
        "toolhost run -- head -c 300MB (MiB)",
        flood as f64 / 1024.0,
        flood_time.as_secs_f64()
    );
    println!(
        "flood/idle: {:.2}x; target: under 40 MiB for the flood",
        flood as f64 / idle as f64
    );

    // 5. The whole CLI process, against the tool as a process of its own.
    let cli_iters = (iters / 4).max(20);
    let mut cli = Series::new("toolhost run -- true (process)", cli_iters);
    let mut cli_off = Series::new("toolhost run --isolation off -- true", cli_iters);
    let mut true_proc = Series::new("/bin/true (process)", cli_iters);
    let spawn_wait = |cmd: &mut Command| {
        let t = Instant::now();
        let st = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("spawn");
        assert!(st.success(), "{st:?}");
        t.elapsed()
    };
    let run_cli = |args: &[&str]| {
        spawn_wait(Command::new(toolhost).args(args).current_dir(ws.path()));
    };
    // Warm the page cache.
    for _ in 0..5 {
        spawn_wait(Command::new(bin).current_dir(ws.path()));
        run_cli(&["run", "--", "true"]);
    }
    let mut got = blocks(
        cli_iters,
        &[
            &|| {
                spawn_wait(Command::new(bin).current_dir(ws.path()));
            },
            &|| run_cli(&["run", "--", "true"]),
            &|| run_cli(&["run", "--isolation", "off", "--", "true"]),
        ],
    )
    .into_iter();
    for s in [&mut true_proc, &mut cli, &mut cli_off] {
        s.samples = got.next().unwrap_or_default();
    }
    let (t50, _) = true_proc.stats();
    println!();
    println!(
        "the CLI as a whole process ({cli_iters} runs each, in blocks of {BLOCK}, stdin /dev/null)"
    );
    println!("{:<40} {:>10} {:>10}", "", "p50 (us)", "p99 (us)");
    for s in [&mut true_proc, &mut cli_off, &mut cli] {
        let (p50, p99) = s.stats();
        println!(
            "{:<40} {:>10.0} {:>10.0}   {:.2}x",
            s.name,
            us(p50),
            us(p99),
            us(p50) / us(t50)
        );
    }
    println!("goal: toolhost run -- true within 3x of {bin} as a process");
    println!();
    println!(
        "{{\"bench\":\"direct\",\"hardened_p50_us\":{:.1},\"off_p50_us\":{:.1},\"bare_p50_us\":{:.1},\"hardened_with_engine_p50_us\":{:.1},\"calls_per_s_16\":{:.0},\"bare_calls_per_s_16\":{:.0}}}",
        us(sb50),
        us(pl50),
        us(bare50),
        us(hb50),
        hr[1],
        br[1]
    );
}
