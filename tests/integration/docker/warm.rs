//! Warm mode: one container per backend, its helper, killed toolhosts.

use super::*;

/// From a review: the helper lives in toolhost's cache dir; a writable
/// allowed dir over that dir would let a call replace it (and the compiled
/// wasm cache). Such a sandbox is refused on every backend, and a helper file
/// changed on disk is rewritten before the next container.
#[tokio::test]
async fn warm_mode_helper_cannot_be_replaced() {
    let Some(image) = image() else { return };
    let home = std::env::var("HOME").expect("HOME");
    let base = std::env::var("XDG_CACHE_HOME")
        .ok()
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(&home).join(".cache"));
    std::fs::create_dir_all(base.join("toolhost")).unwrap();
    let mut cfg = docker_config(&image);
    cfg.docker.warm = true;
    for backend in [
        BackendChoice::Docker,
        BackendChoice::Wasm,
        BackendChoice::Direct,
        BackendChoice::Auto,
    ] {
        let c = SandboxConfig {
            backend,
            ..cfg.clone()
        };
        let e = Sandbox::new([toolhost::AllowedDirSpec::read_write(&base)], c.clone())
            .expect_err("a writable dir over the cache");
        let e = e.to_string();
        assert!(
            e.contains("contains toolhost's") && e.contains("a tool could plant"),
            "{e}"
        );
        // Allowed twins: the same dir read-only, and a dir beside it.
        Sandbox::new([toolhost::AllowedDirSpec::read_only(&base)], c).expect("read-only");
    }
    // Tampering runs in a toolhost process of its own, with its own cache
    // dir: the helper file is shared by every warm sandbox of a process.
    let t = tmp();
    let cache = t.root.join("cache");
    let conf = t.root.join("warm.toml");
    std::fs::write(&conf, format!("[docker]\nimage = {image:?}\nwarm = true\n")).unwrap();
    let call = |word: &str| {
        toolhost(
            &t.ws(),
            &[
                "run",
                "--config",
                conf.to_str().unwrap(),
                "--backend",
                "docker",
                "--",
                "echo",
                word,
            ],
            &[("XDG_CACHE_HOME", cache.to_str().unwrap())],
        )
    };
    let out = call("one");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "one\n", "{out:?}");
    let dir = cache.join("toolhost/docker");
    let helper = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("toolhost-docker-helper-"))
        })
        .expect("the helper file");
    let good = sha256_file(&helper);
    // Tamper with the helper on disk (as its owner could).
    std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(&helper, "#!/bin/sh\necho forged\n").unwrap();
    let out = call("two");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "two\n", "{out:?}");
    assert_eq!(sha256_file(&helper), good, "the helper was rewritten");
}

/// From a review: toolhost killed during a warm call; the helper sees its
/// input end and kills the call, so nothing keeps running until the next start.
#[test]
fn killed_toolhost_stops_its_warm_call() {
    let Some(image) = image() else { return };
    let t = tmp();
    let cfg = t.root.join("docker.toml");
    std::fs::write(&cfg, format!("[docker]\nimage = {image:?}\nwarm = true\n")).unwrap();
    let mut child = sleeping_toolhost(&t, &cfg, std::process::Stdio::null());
    let pid = child.id();
    let running = || {
        let out = Command::new("docker")
            .args(["ps", "--no-trunc", "--format", "{{.ID}} {{.Labels}}"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains(&format!("/{pid}/")))
            .count()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while running() == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(running(), 1, "the warm container never started");
    std::thread::sleep(Duration::from_millis(500));
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while running() > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        running(),
        0,
        "the warm call kept running after toolhost died"
    );
    // The next toolhost removes the stopped container.
    let out = toolhost(
        &t.ws(),
        &[
            "run",
            "--config",
            cfg.to_str().unwrap(),
            "--backend",
            "docker",
            "--",
            "true",
        ],
        &[],
    );
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn killed_toolhost_leaves_no_running_container_after_the_next_start() {
    let Some(image) = image() else { return };
    let t = tmp();
    let cfg = t.root.join("docker.toml");
    std::fs::write(&cfg, format!("[docker]\nimage = {image:?}\n")).unwrap();
    /// Kills the child if the test fails before it does.
    struct Child(std::process::Child);
    impl Drop for Child {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let child = sleeping_toolhost(
        &t,
        &cfg,
        std::fs::File::create(t.root.join("stderr.txt"))
            .unwrap()
            .into(),
    );
    let mut child = Child(child);
    let pid = child.0.id();
    // Our containers, by the owner label naming the child's pid.
    let find = || {
        let out = Command::new("docker")
            .args([
                "ps",
                "--no-trunc",
                "--filter",
                "label=toolhost.owner",
                "--format",
                "{{.ID}} {{.Labels}}",
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains(&format!("/{pid}/")))
            .map(|l| l.split_whitespace().next().unwrap_or("").to_string())
            .collect::<Vec<_>>()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while find().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    if find().is_empty() {
        let ps = Command::new("docker")
            .args(["ps", "-a", "--format", "{{.ID}} {{.Status}} {{.Labels}}"])
            .output()
            .unwrap();
        panic!(
            "the call never started (pid {pid}, exited: {:?}): {}\n{}",
            child.0.try_wait(),
            std::fs::read_to_string(t.root.join("stderr.txt")).unwrap_or_default(),
            String::from_utf8_lossy(&ps.stdout)
        );
    }
    // SIGKILL: toolhost gets no chance to clean up.
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    assert!(
        !find().is_empty(),
        "positive control: the container outlives toolhost"
    );
    // SIGTERM (and SIGINT, SIGHUP) stop the call and remove its container
    // before toolhost exits.
    let term = Child(
        Command::new(toolhost_bin())
            .args([
                "run",
                "--config",
                cfg.to_str().unwrap(),
                "--backend",
                "docker",
                "--",
                "sleep",
                "600",
            ])
            .current_dir(t.ws())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let term_pid = term.0.id();
    let mine = |pid: u32| {
        let out = Command::new("docker")
            .args(["ps", "-a", "--no-trunc", "--format", "{{.ID}} {{.Labels}}"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains(&format!("/{pid}/")))
            .count()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while mine(term_pid) == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(mine(term_pid), 1, "the call never started");
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(term_pid as i32, libc::SIGTERM) };
    let mut term = term;
    let status = term.0.wait().unwrap();
    assert_eq!(status.code(), Some(143));
    assert_eq!(mine(term_pid), 0, "SIGTERM left the container behind");
    // The next toolhost that connects removes it.
    let out = toolhost(
        &t.ws(),
        &[
            "run",
            "--config",
            cfg.to_str().unwrap(),
            "--backend",
            "docker",
            "--",
            "true",
        ],
        &[],
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(find(), Vec::<String>::new());
}

on_each_engine!(
    warm_mode_runs_calls_in_one_container_with_the_same_limits,
    warm_mode_keeps_the_helper_out_of_the_calls_reach,
);

async fn warm_mode_runs_calls_in_one_container_with_the_same_limits(engine: Engine) {
    let Some(image) = image_on(engine) else {
        return;
    };
    let t = tmp();
    let mut cfg = docker_config_on(&image, engine);
    cfg.docker.warm = true;
    cfg.max_cpu_seconds = 1;
    cfg.max_memory_mb = 64;
    cfg.max_processes = 32;
    cfg.max_file_size_mb = 1;
    // gVisor's forks are slow (its ptrace platform traps each syscall): the
    // reaping check's 300 processes took more than 3 s there on a busy
    // machine.
    cfg.timeout = Duration::from_secs(if engine == Engine::Runsc { 10 } else { 3 });
    let sb = t.sandbox(cfg);
    let r = dsh(
        &sb,
        "echo warm; id -u; grep CapEff /proc/self/status; cat /proc/1/comm",
    )
    .await;
    assert!(r.success(), "{r:?}");
    assert_eq!(
        r.stdout, "warm\n65534\nCapEff:\t0000000000000000\n.toolhost-helpe\n",
        "{r:?}"
    );
    let label = session_label(&sb);
    let first = containers(&label);
    assert_eq!(first.len(), 1, "one session container");
    let r = sb.run(RunRequest::new(["cat"]).stdin(b"in".to_vec())).await;
    assert_eq!(r.stdout, "in", "{r:?}");
    // More stdin than the helper buffers, for a tool that reads it all.
    let big = vec![b'x'; 3 << 20];
    let r = sb
        .run(RunRequest::new(["sh", "-c", "wc -c"]).stdin(big.clone()))
        .await;
    assert_eq!(r.stdout.trim(), "3145728", "{r:?}");
    // ...and for one that reads none of it.
    let r = sb.run(RunRequest::new(["true"]).stdin(big)).await;
    assert!(r.success(), "{r:?}");
    let r = dsh(&sb, "echo out; echo err >&2; exit 4").await;
    assert_eq!(
        (r.returncode, r.stdout.as_str(), r.stderr.as_str()),
        (Some(4), "out\n", "err\n")
    );
    let r = sb.run(RunRequest::new(["no-such-tool"])).await;
    assert_eq!(r.outcome.kind, OutcomeKind::NotFound, "{r:?}");
    let r = sb.run(RunRequest::new(["/etc"])).await;
    assert_eq!(r.outcome.kind, OutcomeKind::PermissionDenied, "{r:?}");
    // The limits, each with the container kept.
    let r = dsh(&sb, "while :; do :; done").await;
    assert_eq!(r.outcome.kind, OutcomeKind::CpuLimit, "{r:?}");
    let r = dsh(&sb, "x=aaaaaaaa; while :; do x=$x$x; done").await;
    if engine == Engine::Runsc {
        // The sandbox may thrash at its limit until the host's OOM killer
        // ends it (docs/src/docker.md#runtimes-gvisor): then the timeout or
        // the CPU limit comes first.
        assert!(
            r.timed_out
                || matches!(
                    r.outcome.kind,
                    OutcomeKind::CpuLimit | OutcomeKind::MemoryLimit
                ),
            "{r:?}"
        );
    } else {
        assert_eq!(r.outcome.kind, OutcomeKind::MemoryLimit, "{r:?}");
    }
    // Under gVisor the limit ends the whole sandbox, the helper with it:
    // the next call gets a new container.
    let first = if engine == Engine::Runsc {
        let r = dsh(&sb, "true").await;
        assert!(r.success(), "{r:?}");
        containers(&label)
    } else {
        first
    };
    let r = dsh(&sb, "head -c 2000000 /dev/zero > /tmp/big").await;
    assert_eq!(r.outcome.kind, OutcomeKind::FileSizeLimit, "{r:?}");
    let r = dsh(
        &sb,
        "head -c 1000 /dev/zero > /tmp/small && wc -c < /tmp/small",
    )
    .await;
    assert_eq!(r.stdout.trim(), "1000", "{r:?}");
    assert_eq!(containers(&label), first, "calls reuse the container");
    // max_processes holds the call (the helper is one of them, as docker's
    // init is per call): 40 sleeps asked, at most 32 processes in the
    // container; 10 asked, all run (the helper, sh and 10 sleeps). A
    // subshell starts them (a shell that cannot fork ends), and the count
    // is a glob, which needs no fork.
    let count = "set -- /proc/[0-9]*; echo $#";
    let r = dsh(
        &sb,
        &format!("(for i in $(seq 1 40); do sleep 5 & done) 2>/dev/null; {count}"),
    )
    .await;
    let n: usize = r.stdout.trim().parse().unwrap_or(usize::MAX);
    assert!((20..=32).contains(&n), "{n}: {r:?}");
    let r = dsh(
        &sb,
        &format!("(for i in $(seq 1 10); do sleep 5 & done); {count}"),
    )
    .await;
    assert_eq!(r.stdout.trim(), "12", "{r:?}");
    // Processes a call leaves behind (background, setsid, double fork) are
    // killed when it ends: alive during the call, gone after it.
    let r = dsh(
        &sb,
        "sleep 300 >/dev/null 2>&1 & echo $!; setsid sleep 301 >/dev/null 2>&1 & sh -c 'sleep 302 >/dev/null 2>&1 &'; sleep 0.2; ps -o args | grep -c '^sleep 30[012]'",
    )
    .await;
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{r:?}");
    let pid = lines[0];
    assert_eq!(lines[1], "3", "all three ran during the call: {r:?}");
    let r = dsh(
        &sb,
        &format!(
            "ps -o args | grep -c '^sleep 30[012]'; [ -e /proc/{pid} ] && echo alive || echo gone"
        ),
    )
    .await;
    assert_eq!(r.stdout, "0\ngone\n", "{r:?}");
    // From a review: orphans are reaped as they exit (they would hold pids
    // of the limit), as docker's init does per call.
    let r = dsh(
        &sb,
        "i=0; fail=0; while [ $i -lt 100 ]; do (true &) || fail=$((fail+1)); i=$((i+1)); sleep 0.005; done; echo fail=$fail",
    )
    .await;
    assert_eq!(r.stdout, "fail=0\n", "{r:?}");
    // From a review: the helper's fault handlers are gone, so SIGSEGV and
    // SIGBUS from a tool are ignored like every other signal to PID 1.
    let r = dsh(&sb, "kill -SEGV 1; kill -BUS 1; kill -KILL 1; echo sent").await;
    assert_eq!(r.stdout, "sent\n", "{r:?}");
    let r = dsh(&sb, "echo still").await;
    assert_eq!(r.stdout, "still\n", "{r:?}");
    assert_eq!(containers(&label), first, "the helper survived");
    // A timeout kills the call in place.
    let r = dsh(&sb, "sleep 300 & sleep 300").await;
    assert!(r.timed_out, "{r:?}");
    let r = dsh(&sb, "ps -o args | grep -c '^sleep 300' || true").await;
    assert_eq!(r.stdout.trim(), "0", "{r:?}");
    assert_eq!(containers(&label), first, "the container was kept");
    // A timed-out call with more stdin than the helper reads at once: the
    // container goes, and the next call gets a new one.
    let r = sb
        .run(RunRequest::new(["sleep", "300"]).stdin(vec![b'y'; 2 << 20]))
        .await;
    assert!(r.timed_out, "{r:?}");
    assert!(containers(&label).iter().all(|c| !first.contains(c)));
    let r = dsh(&sb, "echo next").await;
    assert_eq!(r.stdout, "next\n", "{r:?}");
    sb.docker_backend().shutdown().await;
    assert_eq!(containers(&label), Vec::<String>::new());
}

#[tokio::test]
async fn warm_mode_survives_cancellation_concurrency_and_a_killed_container() {
    let Some(image) = image() else { return };
    let t = tmp();
    let mut cfg = docker_config(&image);
    cfg.docker.warm = true;
    let sb = std::sync::Arc::new(t.sandbox(cfg));
    let label = session_label(&sb);
    // The engine keeps no log of the output.
    let r = dsh(&sb, "echo first").await;
    assert!(r.success(), "{r:?}");
    let ids = containers(&label);
    let inspect = Command::new("docker")
        .args([
            "inspect",
            "--format",
            "{{.HostConfig.LogConfig.Type}}",
            &ids[0],
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&inspect.stdout).trim(), "none");
    // Concurrent calls are serialized: both complete, neither kills the other.
    let (a, b) = tokio::join!(dsh(&sb, "sleep 1; echo long"), dsh(&sb, "echo short"));
    assert_eq!(
        (a.stdout.as_str(), b.stdout.as_str()),
        ("long\n", "short\n"),
        "{a:?} {b:?}"
    );
    // A cancelled call takes its container with it: nothing it started
    // reaches the next call.
    let call = {
        let sb = sb.clone();
        tokio::spawn(async move {
            dsh(&sb, "while :; do echo x > /tmp/survivor; sleep 0.1; done").await
        })
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    call.abort();
    let _ = call.await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let r = dsh(&sb, "cat /tmp/survivor 2>/dev/null || echo none").await;
    assert_eq!(r.stdout, "none\n", "{r:?}");
    // The helper (PID 1) is out of a call's reach: signals from inside are
    // ignored, and its /proc files (its fds are the protocol) are closed to
    // the tool, while the tool's own are open.
    let before = containers(&label);
    let r = dsh(
        &sb,
        "kill -9 1; kill 1; cat /proc/1/environ >/dev/null 2>&1 && echo environ-open; for f in 0 1 2 3; do readlink /proc/1/fd/$f >/dev/null 2>&1 && echo fd-$f-open; head -c0 /proc/1/fd/$f 2>/dev/null && echo fd-$f-read; done; cat /proc/self/environ >/dev/null && echo own-open; ls /proc/1/fd 2>&1 | tr '\\n' ' ' >&2",
    )
    .await;
    assert_eq!(r.stdout, "own-open\n", "{r:?}");
    let r = dsh(&sb, "echo after").await;
    assert_eq!(r.stdout, "after\n", "{r:?}");
    assert_eq!(containers(&label), before, "the container survived");
    // A container killed from outside is replaced at the next call.
    let killed = Command::new("docker")
        .args(["kill", &before[0]])
        .output()
        .unwrap();
    assert!(killed.status.success(), "{killed:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = dsh(&sb, "echo replaced").await;
    assert_eq!(r.stdout, "replaced\n", "{r:?}");
    assert!(containers(&label).iter().all(|c| !before.contains(c)));
    sb.shutdown().await;
    assert_eq!(containers(&label), Vec::<String>::new());
}

/// The helper serves as uid 65533, which no tool has, with only the
/// capabilities to take a call's user and kill what it leaves; each call
/// runs as its own user with no capability at all, the bounding set empty.
/// What the call tries against the helper (gVisor keeps neither Linux's
/// non-dumpable rule nor PID 1's immunity, and opens `/proc/1/fd/N` to
/// anyone the file's mode admits) fails, beside the same operations on the
/// tool's own files, which work: a kill of PID 1, opening its fds (the
/// protocol, which carries the next calls) to read or write, or to chmod
/// them (a root tool would own them under gVisor), its memory, its
/// `oom_score_adj`, a user namespace of its own.
/// As root (the owner of the workspace in CI) and as uid 1000. A user by
/// name is refused under gVisor, where the helper must take it itself.
async fn warm_mode_keeps_the_helper_out_of_the_calls_reach(engine: Engine) {
    let Some(image) = image_on(engine) else {
        return;
    };
    let t = Tmp::new();
    let mut cfg = docker_config_on(&image, engine);
    cfg.docker.warm = true;
    let owner = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(t.ws()).unwrap().uid()
    };
    let script = "id -u; id -G; grep -E '^Cap(Prm|Eff|Bnd)' /proc/self/status; grep ^Uid /proc/1/status; \
        kill -9 1 2>/dev/null && echo killed-1; \
        for f in 0 1 2; do (exec 3</proc/1/fd/$f) 2>/dev/null && echo read-$f; (exec 3>>/proc/1/fd/$f) 2>/dev/null && echo write-$f; done; \
        (exec 3</proc/1/mem) 2>/dev/null && echo mem-1; \
        (echo 500 > /proc/1/oom_score_adj) 2>/dev/null && echo oom-1; \
        chmod 600 /proc/1/fd/0 /proc/1/fd/1 2>/dev/null && echo chmod-1; \
        unshare -U -r true 2>/dev/null && echo userns; \
        (exec 3</proc/self/fd/1) && echo own-read; (exec 3>>/proc/self/fd/2) && echo own-write; \
        (exec 3</proc/self/mem) && echo own-mem; (echo 500 > /proc/self/oom_score_adj) && echo own-oom; \
        (: > /tmp/own; exec 4</tmp/own; chmod 600 /proc/self/fd/4) && echo own-chmod";
    for (user, uid) in [(None, owner), (Some("1000:1000"), 1000)] {
        let mut cfg = cfg.clone();
        cfg.docker.user = user.map(str::to_string);
        let sb = t.sandbox(cfg);
        let label = session_label(&sb);
        let r = dsh(&sb, script).await;
        let zero = "0000000000000000";
        assert_eq!(
            r.stdout,
            format!(
                "{uid}\n{gid}\nCapPrm:\t{zero}\nCapEff:\t{zero}\nCapBnd:\t{zero}\nUid:\t65533\t65533\t65533\t65533\nown-read\nown-write\nown-mem\nown-oom\nown-chmod\n",
                gid = if user.is_some() { 1000 } else { uid }
            ),
            "{user:?}: {r:?}"
        );
        let first = containers(&label);
        assert_eq!(first.len(), 1, "{r:?}");
        let r = dsh(&sb, "echo after").await;
        assert_eq!(r.stdout, "after\n", "{r:?}");
        assert_eq!(containers(&label), first, "the helper survived");
        sb.docker_backend().shutdown().await;
        assert_eq!(containers(&label), Vec::<String>::new());
    }
    if engine == Engine::Runsc {
        let mut named = cfg.clone();
        named.docker.user = Some("nobody".into());
        let sb = t.sandbox(named);
        let label = session_label(&sb);
        let r = dsh(&sb, "echo ran > canary").await;
        assert_eq!(r.outcome.kind, OutcomeKind::InvalidRequest, "{r:?}");
        assert!(r.outcome.message.contains("UID:GID"), "{r:?}");
        assert!(!t.ws().join("canary").exists());
        assert_eq!(containers(&label), Vec::<String>::new());
        // Allowed twin: the same call as the workspace's owner.
        let sb = t.sandbox(cfg);
        let r = dsh(&sb, "echo ran > canary; uname -r").await;
        assert!(r.success(), "{r:?}");
        assert_eq!(r.stdout, "4.4.0\n", "gVisor's kernel: {r:?}");
        assert_eq!(
            std::fs::read_to_string(t.ws().join("canary")).unwrap(),
            "ran\n"
        );
        sb.docker_backend().shutdown().await;
    }
}
