//! Benchmark of the `docker` backend against the Docker CLI, in the same run:
//! per-call latency p50/p99 of `true` through `Sandbox::run` (a container per
//! call, and warm mode: a request to the helper in the session's container) against
//! `docker run --rm --network=none IMAGE true`, interleaved call by call; and,
//! when the engine has `scripts/docker-setup`'s gVisor runtime
//! (`toolhost-runsc`), the same container per call, warm mode and CLI under
//! runsc; and, where `scripts/docker-setup`'s Podman
//! services run, a container per call and warm mode on rootful Podman
//! against `podman run`, and a container per call on the rootless one
//! (warm mode is refused there: it has no cgroup controllers). Its last
//! line is JSON:
//! `{"bench":"docker","cli_p50_ms":…,"per_call_p50_ms":…,"warm_p50_ms":…,"runsc_cli_p50_ms":…,"runsc_per_call_p50_ms":…,"runsc_warm_p50_ms":…,"podman_cli_p50_ms":…,"podman_per_call_p50_ms":…,"podman_warm_p50_ms":…,"podman_rootless_per_call_p50_ms":…}`
//! (`null` for an engine or runtime that is not there).
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

/// The rootful Podman service `scripts/docker-setup` starts.
const PODMAN: &str = "unix:///run/toolhost-podman.sock";
/// The user whose rootless Podman it starts.
const ROOTLESS_USER: &str = "toolhost-podman";

/// Whether the engine at `host` answers and has `image`.
fn engine_has(host: &str, image: &str) -> bool {
    Command::new("docker")
        .args(["-H", host, "image", "inspect", image])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The uid and gid of [`ROOTLESS_USER`].
fn rootless_ids() -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        if f.first() != Some(&ROOTLESS_USER) {
            return None;
        }
        Some((f.get(2)?.parse().ok()?, f.get(3)?.parse().ok()?))
    })
}

fn main() {
    // The docker helper's dir must be one a rootless engine's user can
    // read: this process's own cache dir (root's is 0700).
    let cache = tempfile::tempdir().expect("tempdir");
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(cache.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
    }
    // SAFETY: the first statement that could start a thread is below; no
    // other thread reads the environment yet.
    unsafe { std::env::set_var("XDG_CACHE_HOME", cache.path()) };
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
    let on = |host: Option<&str>, ws: &std::path::Path, warm: bool, runtime: Option<&str>| {
        let mut c = SandboxConfig {
            backend: BackendChoice::Docker,
            ..SandboxConfig::default()
        };
        c.docker.image = Some(image.clone());
        c.docker.warm = warm;
        c.docker.runtime = runtime.map(str::to_string);
        c.docker.host = host.map(str::to_string);
        Sandbox::new([ws], c).expect("sandbox")
    };
    let sandbox = |warm: bool, runtime: Option<&str>| on(None, ws.path(), warm, runtime);
    // Podman: the rootless engine's workspace is its user's.
    let rootless_ws = tempfile::tempdir().expect("tempdir");
    let rootless = rootless_ids().and_then(|(uid, gid)| {
        // scripts/docker-setup's rootless service.
        let host = "unix:///run/toolhost-podman-rootless/podman.sock".to_string();
        std::os::unix::fs::chown(rootless_ws.path(), Some(uid), Some(gid)).ok()?;
        engine_has(&host, &image).then_some(host)
    });
    let podman = engine_has(PODMAN, &image).then_some(PODMAN);
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
    let gvisor_warm = runsc.map(|r| sandbox(true, Some(r)));
    let podman_cold = podman.map(|h| on(Some(h), ws.path(), false, None));
    let podman_warm = podman.map(|h| on(Some(h), ws.path(), true, None));
    let rootless_cold = rootless
        .as_deref()
        .map(|h| on(Some(h), rootless_ws.path(), false, None));
    // `podman run` as toolhost asks: an engine without CAP_SYS_RESOURCE
    // cannot raise nproc and nofile to Podman's default of 1048576.
    let pid_max = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "32768".into());
    let podman_cli = || {
        let t = Instant::now();
        // conmon may leave a file `oom` in the directory it was started in.
        let s = Command::new("podman")
            .current_dir(ws.path())
            .args([
                "run",
                "--rm",
                "--network=none",
                "--ulimit",
                "nofile=4096:4096",
            ])
            .arg(format!("--ulimit=nproc={pid_max}:{pid_max}"))
            .args([&image, "true"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("podman");
        assert!(s.success());
        t.elapsed()
    };
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
        if let (Some(g), Some(w)) = (&gvisor, &gvisor_warm) {
            call(g);
            call(w);
            cli(runsc);
        }
        if let (Some(c), Some(w)) = (&podman_cold, &podman_warm) {
            call(c);
            call(w);
            podman_cli();
        }
        if let Some(r) = &rootless_cold {
            call(r);
        }
    }
    let (mut f, mut g, mut h, mut i, mut j) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut a, mut b, mut c, mut d, mut e) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..iters {
        a.push(cli(None));
        b.push(call(&cold));
        c.push(call(&warm));
        if let (Some(g), Some(w)) = (&gvisor, &gvisor_warm) {
            d.push(cli(runsc));
            e.push(call(g));
            j.push(call(w));
        }
        if let (Some(cold), Some(w)) = (&podman_cold, &podman_warm) {
            f.push(podman_cli());
            g.push(call(cold));
            h.push(call(w));
        }
        if let Some(r) = &rootless_cold {
            i.push(call(r));
        }
    }
    for v in [
        &mut a, &mut b, &mut c, &mut d, &mut e, &mut f, &mut g, &mut h, &mut i, &mut j,
    ] {
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
        ("Sandbox::run (docker, runsc, warm mode: helper)", &j),
        ("podman run --rm --network=none IMAGE true (CLI)", &f),
        ("Sandbox::run (podman, a container per call)", &g),
        ("Sandbox::run (podman, warm mode: helper)", &h),
        ("Sandbox::run (podman rootless, a container per call)", &i),
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
            "runsc/runc per call at p50: {:.2}x, warm: {:.2}x; CLI/per-call under runsc: {:.2}x, CLI/warm: {:.0}x",
            ms(pct(&e, 0.5)) / ms(pct(&b, 0.5)),
            ms(pct(&j, 0.5)) / ms(pct(&c, 0.5)),
            ms(pct(&d, 0.5)) / ms(pct(&e, 0.5)),
            ms(pct(&d, 0.5)) / ms(pct(&j, 0.5))
        );
    }
    if !g.is_empty() {
        println!(
            "podman/docker per call at p50: {:.2}x, warm: {:.2}x; podman CLI/per-call: {:.2}x",
            ms(pct(&g, 0.5)) / ms(pct(&b, 0.5)),
            ms(pct(&h, 0.5)) / ms(pct(&c, 0.5)),
            ms(pct(&f, 0.5)) / ms(pct(&g, 0.5))
        );
    }
    if !i.is_empty() {
        println!(
            "podman rootless/docker per call at p50: {:.2}x",
            ms(pct(&i, 0.5)) / ms(pct(&b, 0.5))
        );
    }
    rt.block_on(warm.docker_backend().shutdown());
    if let Some(w) = &gvisor_warm {
        rt.block_on(w.docker_backend().shutdown());
    }
    if let Some(w) = &podman_warm {
        rt.block_on(w.docker_backend().shutdown());
    }
    println!(
        "{{\"bench\":\"docker\",\"cli_p50_ms\":{},\"per_call_p50_ms\":{},\"warm_p50_ms\":{},\"runsc_cli_p50_ms\":{},\"runsc_per_call_p50_ms\":{},\"runsc_warm_p50_ms\":{},\"podman_cli_p50_ms\":{},\"podman_per_call_p50_ms\":{},\"podman_warm_p50_ms\":{},\"podman_rootless_per_call_p50_ms\":{}}}",
        p50(&a),
        p50(&b),
        p50(&c),
        p50(&d),
        p50(&e),
        p50(&j),
        p50(&f),
        p50(&g),
        p50(&h),
        p50(&i)
    );
}

/// The gVisor runtime `scripts/docker-setup` registers.
const RUNSC: &str = "toolhost-runsc";
