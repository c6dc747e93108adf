//! Benchmark of the `docker` backend against the Docker CLI, in the same run:
//! per-call latency p50/p99 of `true` through `Sandbox::run` (a container per
//! call, and warm mode: a request to the helper in the session's container) against
//! `docker run --rm --network=none IMAGE true`, interleaved call by call; and,
//! when the engine has `scripts/docker-setup`'s gVisor runtime
//! (`toolhost-runsc`), the same container per call and CLI under runsc (warm
//! mode is refused there). Its last line is JSON:
//! `{"bench":"docker","cli_p50_ms":…,"per_call_p50_ms":…,"warm_p50_ms":…,"runsc_cli_p50_ms":…,"runsc_per_call_p50_ms":…}`
//! (the runsc figures `null` without the runtime).
//!
//! Needs an engine and an image: `scripts/docker-setup` (which prints the
//! image name). Run: `TOOLHOST_TEST_IMAGE=$(scripts/docker-setup) cargo bench
//! --bench docker`. `BENCH_ITERS` sets the calls per series (default 40).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use toolhost::{BackendChoice, RunRequest, Sandbox, SandboxConfig};

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let Ok(image) = std::env::var("TOOLHOST_TEST_IMAGE") else {
        println!(
            "docker benchmark SKIPPED: set TOOLHOST_TEST_IMAGE (scripts/docker-setup prints it)"
        );
        return;
    };
    let iters: usize = std::env::var("BENCH_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    let ws = tempfile::tempdir().expect("tempdir");
    let sandbox = |warm: bool, runtime: Option<&str>| {
        let mut c = SandboxConfig {
            backend: BackendChoice::Docker,
            ..SandboxConfig::default()
        };
        c.docker.image = Some(image.clone());
        c.docker.warm = warm;
        c.docker.runtime = runtime.map(str::to_string);
        Sandbox::new([ws.path()], c).expect("sandbox")
    };
    let runtimes = Command::new("docker")
        .args([
            "info",
            "--format",
            "{{range $k, $v := .Runtimes}}{{$k}} {{end}}",
        ])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let runsc = runtimes
        .split_whitespace()
        .any(|r| r == RUNSC)
        .then_some(RUNSC);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let cold = sandbox(false, None);
    let warm = sandbox(true, None);
    let gvisor = runsc.map(|r| sandbox(false, Some(r)));
    let call = |sb: &Sandbox| {
        let t = Instant::now();
        let r = rt.block_on(sb.run(RunRequest::new(["true"])));
        assert!(r.success(), "{r:?}");
        t.elapsed()
    };
    let cli = |runtime: Option<&str>| {
        let t = Instant::now();
        let runtime = runtime.map(|r| format!("--runtime={r}"));
        let s = Command::new("docker")
            .args(["run", "--rm", "--network=none"])
            .args(runtime.as_slice())
            .args([&image, "true"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("docker");
        assert!(s.success());
        t.elapsed()
    };
    // Warm up: image metadata, the engine's caches, the warm container.
    for _ in 0..3 {
        call(&cold);
        call(&warm);
        cli(None);
        if let Some(g) = &gvisor {
            call(g);
            cli(runsc);
        }
    }
    let (mut a, mut b, mut c, mut d, mut e) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..iters {
        a.push(cli(None));
        b.push(call(&cold));
        c.push(call(&warm));
        if let Some(g) = &gvisor {
            d.push(cli(runsc));
            e.push(call(g));
        }
    }
    for v in [&mut a, &mut b, &mut c, &mut d, &mut e] {
        v.sort();
    }
    println!("docker backend: per-call latency of `true` ({iters} calls each, interleaved)");
    println!("{:<52} {:>9} {:>9}", "", "p50 (ms)", "p99 (ms)");
    for (name, v) in [
        ("docker run --rm --network=none IMAGE true (CLI)", &a),
        ("Sandbox::run (docker, a container per call)", &b),
        ("Sandbox::run (docker, warm mode: helper)", &c),
        ("docker run --runtime=toolhost-runsc ... (CLI)", &d),
        ("Sandbox::run (docker, runsc, a container per call)", &e),
    ] {
        if v.is_empty() {
            continue;
        }
        println!(
            "{name:<52} {:>9.2} {:>9.2}",
            ms(pct(v, 0.5)),
            ms(pct(v, 0.99))
        );
    }
    println!(
        "CLI/per-call at p50: {:.2}x (target >= 1: no slower than the CLI); CLI/warm at p50: {:.0}x (target >= 5x)",
        ms(pct(&a, 0.5)) / ms(pct(&b, 0.5)),
        ms(pct(&a, 0.5)) / ms(pct(&c, 0.5))
    );
    let p50 = |v: &[Duration]| {
        if v.is_empty() {
            "null".to_string()
        } else {
            format!("{:.1}", ms(pct(v, 0.5)))
        }
    };
    if !e.is_empty() {
        println!(
            "runsc/runc per call at p50: {:.2}x; CLI/per-call under runsc: {:.2}x",
            ms(pct(&e, 0.5)) / ms(pct(&b, 0.5)),
            ms(pct(&d, 0.5)) / ms(pct(&e, 0.5))
        );
    }
    rt.block_on(warm.docker_backend().shutdown());
    println!(
        "{{\"bench\":\"docker\",\"cli_p50_ms\":{},\"per_call_p50_ms\":{},\"warm_p50_ms\":{},\"runsc_cli_p50_ms\":{},\"runsc_per_call_p50_ms\":{}}}",
        p50(&a),
        p50(&b),
        p50(&c),
        p50(&d),
        p50(&e)
    );
}

/// The gVisor runtime `scripts/docker-setup` registers.
const RUNSC: &str = "toolhost-runsc";
