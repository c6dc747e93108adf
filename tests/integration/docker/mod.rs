//! The `docker` backend against a real Docker engine (docs/src/attacks.md K cases), each
//! with its positive control. `scripts/test` runs `scripts/docker-setup` first
//! (engine on the local socket and on tcp://127.0.0.1:2375, and the busybox
//! image built FROM scratch) and exports TOOLHOST_TEST_IMAGE. With CI=true the
//! engine must be there; elsewhere these tests skip, loudly, when it is not.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;

use toolhost::{
    BackendChoice, BackendKind, OutcomeKind, RunOutput, RunRequest, Sandbox, SandboxConfig,
};

use crate::util::*;

/// A docker test run on each engine: `NAME_on_runc` and `NAME_on_runsc`
/// call `NAME(engine)`.
macro_rules! on_each_engine {
    ($($name:ident),* $(,)?) => {
        pastey::paste! {
            $(
                #[tokio::test]
                async fn [<$name _on_runc>]() {
                    $name(Engine::Runc).await
                }
                #[tokio::test]
                async fn [<$name _on_runsc>]() {
                    $name(Engine::Runsc).await
                }
            )*
        }
    };
}

mod engines;
mod gvisor;
mod podman;
mod users;
mod warm;

#[allow(unused_imports)]
pub(crate) use engines::*;
#[allow(unused_imports)]
pub(crate) use podman::rerun_as_rootless;
#[allow(unused_imports)]
pub(crate) use users::*;
#[allow(unused_imports)]
pub(crate) use warm::*;

/// The test image, or `None` (with a loud message) when no engine is usable
/// outside CI. In CI a missing engine fails the test.
pub(crate) fn image() -> Option<String> {
    let image = std::env::var("TOOLHOST_TEST_IMAGE").ok();
    let engine = Command::new("docker")
        .args(["info", "--format", "{{.ServerVersion}}"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    match (image, engine) {
        (Some(i), true) => Some(i),
        (i, e) => {
            let why = format!(
                "docker tests need an engine and TOOLHOST_TEST_IMAGE (run scripts/docker-setup): image={i:?}, engine reachable={e}"
            );
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("{why}");
            }
            eprintln!("\n*** SKIPPED: {why} ***\n");
            None
        }
    }
}

/// The test image, when the engine runs and has what `engine` needs (its
/// runtimes, the image); `None`, loudly, outside CI.
pub(crate) fn image_on(engine: Engine) -> Option<String> {
    // Podman's tests need no Docker engine (the rootless ones run as a
    // user who may not reach it).
    let image = match engine {
        Engine::Runc | Engine::Runsc => image()?,
        Engine::Podman | Engine::PodmanRootless => std::env::var("TOOLHOST_TEST_IMAGE")
            .unwrap_or_else(|_| "toolhost-test-busybox:2".to_string()),
    };
    let missing = |why: String| {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{why}");
        }
        eprintln!("\n*** SKIPPED: {why} ***\n");
        None
    };
    match engine {
        Engine::Runc => {}
        Engine::Runsc => {
            let out = Command::new("docker")
                .args([
                    "info",
                    "--format",
                    "{{range $k, $v := .Runtimes}}{{$k}} {{end}}",
                ])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            let have: Vec<&str> = out.split_whitespace().collect();
            if !(have.contains(&RUNSC) && have.contains(&RUNSC_NET)) {
                return missing(format!(
                    "the runsc tests need the runtimes {RUNSC} and {RUNSC_NET} (run scripts/docker-setup); the engine has {have:?}"
                ));
            }
        }
        Engine::Podman | Engine::PodmanRootless => {
            let has = engine
                .cli()
                .args(["image", "inspect", "--format", "{{.Id}}", &image])
                .output()
                .map(|o| o.status.success())
                .unwrap_or(false);
            if !has {
                return missing(format!(
                    "the {} tests need its service at {} with the image {image} (run scripts/docker-setup)",
                    engine.name(),
                    engine.host().unwrap_or_default()
                ));
            }
        }
    }
    Some(image)
}

/// The ids of the toolhost containers on `engine` whose owner is process
/// `pid`.
pub(crate) fn containers_owned_by(engine: Engine, pid: u32) -> Vec<String> {
    let out = engine
        .cli()
        .args([
            "ps",
            "-a",
            "--no-trunc",
            "--filter",
            "label=toolhost",
            "--format",
            "{{.ID}} {{.Label \"toolhost.owner\"}}",
        ])
        .output()
        .expect("docker ps");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (id, owner) = l.split_once(' ')?;
            (owner.split('/').nth(1) == Some(pid.to_string().as_str())).then(|| id.to_string())
        })
        .collect()
}

/// The ids of the containers made for `sb` since `since` (the engine's
/// create events of its session), removed or not. The session is matched
/// here: Podman's events take no label filter.
pub(crate) fn session_containers_since(sb: &Sandbox, since: std::time::SystemTime) -> Vec<String> {
    let secs = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
    };
    let backend = sb.docker_backend();
    let session = backend.session();
    let out = Command::new("docker")
        .args([
            "-H",
            &backend.engine_address(),
            "events",
            "--since",
            &secs(since).saturating_sub(1).to_string(),
            "--until",
            &(secs(std::time::SystemTime::now()) + 1).to_string(),
            "--filter",
            "event=create",
            "--format",
            "{{.ID}} {{index .Actor.Attributes \"toolhost.session\"}}",
        ])
        .output()
        .expect("docker events");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (id, s) = l.split_once(' ')?;
            (s.trim() == session).then(|| id.to_string())
        })
        .collect()
}

/// A workspace open to every user (most tests predate the owner's uid).
pub(super) fn tmp() -> Tmp {
    let t = Tmp::new();
    for (p, mode) in [
        (t.root.clone(), 0o755),
        (t.ws(), 0o777),
        (t.outside(), 0o755),
    ] {
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    t
}

/// `docker_config` with `engine`'s keys.
pub(super) fn docker_config_on(image: &str, engine: Engine) -> SandboxConfig {
    let mut c = docker_config(image);
    engine.configure(&mut c.docker);
    c
}

pub(super) fn docker_config(image: &str) -> SandboxConfig {
    let mut c = SandboxConfig {
        backend: BackendChoice::Docker,
        timeout: Duration::from_secs(30),
        ..SandboxConfig::default()
    };
    c.docker.image = Some(image.to_string());
    c
}

pub(super) async fn dsh(sb: &Sandbox, script: &str) -> RunOutput {
    sb.run(RunRequest::new(["sh", "-c", script])).await
}

/// Containers carrying a label (`key` or `key=value`), running or not.
pub(super) fn containers(label: &str) -> Vec<String> {
    let out = Command::new("docker")
        .args(["ps", "-aq", "--filter", &format!("label={label}")])
        .output()
        .expect("docker ps");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// `toolhost run` with the docker config `cfg`, running `sleep 600`.
pub(super) fn sleeping_toolhost(
    t: &Tmp,
    cfg: &std::path::Path,
    stderr: std::process::Stdio,
) -> std::process::Child {
    Command::new(toolhost_bin())
        .args([
            "run",
            "--config",
            cfg.to_str().unwrap(),
            "--backend",
            "docker",
            "--timeout",
            "600",
            "--",
            "sleep",
            "600",
        ])
        .current_dir(t.ws())
        .stdout(std::process::Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap()
}

pub(super) fn session_label(sb: &Sandbox) -> String {
    format!("toolhost.session={}", sb.docker_backend().session())
}

async fn runs_in_a_locked_down_container_and_leaves_nothing(engine: Engine) {
    let Some(image) = image_on(engine) else {
        return;
    };
    let t = tmp();
    t.write("in.txt", "inside\n");
    let sb = t.sandbox(docker_config_on(&image, engine));
    let r = dsh(&sb, "cat in.txt; pwd; echo err >&2; exit 3").await;
    assert_eq!(r.backend, BackendKind::Docker);
    assert_eq!(r.returncode, Some(3), "{r:?}");
    assert_eq!(r.stdout, format!("inside\n{}\n", t.ws().display()));
    assert_eq!(r.stderr, "err\n");
    // stdin bytes, and EOF without them.
    let r = sb
        .run(RunRequest::new(["cat"]).stdin(b"piped".to_vec()))
        .await;
    assert_eq!(r.stdout, "piped", "{r:?}");
    let r = sb.run(RunRequest::new(["cat"])).await;
    assert!(r.success() && r.stdout.is_empty(), "{r:?}");
    // Not root, no capabilities, no_new_privs, read-only root, a small /tmp.
    let r = dsh(
        &sb,
        "id -u; grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status; touch /etc/x 2>&1; touch /tmp/ok && echo tmp-ok; df -k /tmp | tail -1; grep -E '^[^ ]+ /(tmp)? ' /proc/mounts",
    )
    .await;
    let out = &r.stdout;
    // A world-writable workspace is shared: nobody, not its owner
    // (`docker::users::shared_and_read_only_dirs_run_as_nobody`).
    assert!(out.starts_with("65534\n"), "{out}");
    assert!(out.contains("CapEff:\t0000000000000000"), "{out}");
    assert!(out.contains("CapBnd:\t0000000000000000"), "{out}");
    // gVisor's /proc/PID/status has no NoNewPrivs line; there the tool
    // running at all shows it: the helper sets it before the seccomp
    // filter, which an unprivileged process cannot install without it.
    assert!(
        out.contains("NoNewPrivs:\t1") || engine == Engine::Runsc,
        "{out}"
    );
    // The root is mounted read-only (gVisor checks the dir's mode first).
    let root = out.lines().find(|l| l.split(' ').nth(1) == Some("/"));
    assert!(
        root.is_some_and(|l| l
            .split(' ')
            .nth(3)
            .is_some_and(|o| o.split(',').any(|o| o == "ro"))),
        "{out}"
    );
    assert!(
        out.contains("Read-only file system") || engine == Engine::Runsc,
        "{out}"
    );
    assert!(out.contains("tmp-ok"), "{out}");
    let tmp = out.lines().find(|l| l.split(' ').nth(1) == Some("/tmp"));
    assert!(
        tmp.is_some_and(|l| l.split(' ').nth(2) == Some("tmpfs")) && out.contains("65536"),
        "{out}"
    );
    // A missing program is not_found (127).
    let r = sb.run(RunRequest::new(["no-such-program"])).await;
    assert_eq!(r.outcome.kind, OutcomeKind::NotFound, "{r:?}");
    assert_eq!(r.cli_exit_code(), 127, "{r:?}");
    // A cwd that is not UTF-8 is refused, not approximated.
    let bad = std::ffi::OsStr::from_bytes(b"bad-\xff");
    std::fs::create_dir(t.ws().join(bad)).unwrap();
    let r = sb
        .run(RunRequest::new(["true"]).cwd(t.ws().join(bad)))
        .await;
    assert_eq!(r.outcome.kind, OutcomeKind::InvalidRequest, "{r:?}");
    // Every container of this sandbox is gone.
    assert_eq!(containers(&session_label(&sb)), Vec::<String>::new());
}

async fn attack_k_paths_env_and_the_docker_socket(engine: Engine) {
    let Some(image) = image_on(engine) else {
        return;
    };
    let t = tmp();
    let ro = t.root.join("ro");
    std::fs::create_dir(&ro).unwrap();
    std::fs::write(ro.join("keep.txt"), "keep").unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o777)).unwrap();
    let before = sha256_file(&ro.join("keep.txt"));
    std::os::unix::fs::symlink(t.outside().join("secret.txt"), t.ws().join("link")).unwrap();
    std::os::unix::fs::symlink(t.outside(), t.ws().join("outdir")).unwrap();
    let dirs = [
        toolhost::AllowedDirSpec::read_write(t.ws()),
        toolhost::AllowedDirSpec::read_only(&ro),
    ];
    let mut cfg = docker_config_on(&image, engine);
    cfg.env_allowlist.push("TOOLHOST_TEST_SECRET_TOKEN".into());
    cfg.env_allowlist.push("TOOLHOST_TEST_PLAIN".into());
    // SAFETY: set before the sandbox reads the environment; read by no other
    // test.
    unsafe {
        std::env::set_var("TOOLHOST_TEST_SECRET_TOKEN", CANARY);
        std::env::set_var("TOOLHOST_TEST_PLAIN", "plain-value");
    }
    let sb = Sandbox::new(dirs, cfg).unwrap();
    let secret = t.outside().join("secret.txt");
    let r = dsh(
        &sb,
        &format!(
            "cat link; cat outdir/secret.txt; cat {}; cat ../outside/secret.txt; ls -la /var/run/docker.sock /run/docker.sock; env",
            secret.display()
        ),
    )
    .await;
    let all = format!("{}{}", r.stdout, r.stderr);
    assert!(!all.contains(CANARY), "{all}");
    assert!(all.contains("TOOLHOST_TEST_PLAIN=plain-value"), "{all}");
    assert!(!all.contains("TOOLHOST_TEST_SECRET_TOKEN"), "{all}");
    assert!(!all.contains("srw"), "docker socket visible: {all}");
    // Positive control: the host does have the socket and the canary.
    assert!(std::path::Path::new("/var/run/docker.sock").exists());
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), CANARY);
    // Read-only dirs are read-only; the read-write one takes writes.
    let r = dsh(
        &sb,
        &format!(
            "echo x > {0}/keep.txt; echo y > {0}/new.txt; echo z > made.txt && echo made",
            ro.display()
        ),
    )
    .await;
    assert!(r.stdout.contains("made"), "{r:?}");
    assert_eq!(sha256_file(&ro.join("keep.txt")), before);
    assert!(!ro.join("new.txt").exists());
    assert_eq!(
        std::fs::read_to_string(t.ws().join("made.txt")).unwrap(),
        "z\n"
    );
}

async fn attack_k_limits_memory_cpu_file_size_processes_and_output(engine: Engine) {
    let Some(image) = image_on(engine) else {
        return;
    };
    let t = tmp();
    let mut cfg = docker_config_on(&image, engine);
    cfg.max_memory_mb = 64;
    cfg.max_cpu_seconds = 1;
    cfg.max_file_size_mb = 1;
    cfg.max_processes = 16;
    cfg.max_output_bytes = 100_000;
    let sb = t.sandbox(cfg.clone());
    // Memory bomb: a 200 MB shell variable. Under gVisor the sandbox
    // thrashes at the limit until the host's OOM killer ends it (about 30 s
    // here): the timeout may come first.
    let bomb = if engine == Engine::Runsc {
        t.sandbox(SandboxConfig {
            timeout: Duration::from_secs(5),
            ..cfg.clone()
        })
    } else {
        t.sandbox(cfg.clone())
    };
    let r = dsh(
        &bomb,
        "x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo ${#x}",
    )
    .await;
    // Under gVisor the thrashing burns CPU: the helper's RLIMIT_CPU (which
    // gVisor holds when a process inside sets it) may end it first.
    assert!(
        r.outcome.kind == OutcomeKind::MemoryLimit
            || engine == Engine::Runsc
                && matches!(
                    r.outcome.kind,
                    OutcomeKind::TimedOut | OutcomeKind::CpuLimit
                ),
        "{r:?}"
    );
    assert!(!r.stdout.contains("200000000"), "{r:?}");
    // Allowed twin: 1 MB fits. It is a memory case: under gVisor on a
    // loaded machine its pipe reads took more than the 1 s CPU limit once.
    let roomy = t.sandbox(SandboxConfig {
        max_cpu_seconds: 10,
        ..cfg.clone()
    });
    let r = dsh(
        &roomy,
        "x=$(head -c 1000000 /dev/zero | tr '\\0' a); echo ${#x}",
    )
    .await;
    assert_eq!(r.stdout, "1000000\n", "{r:?}");
    // CPU spin. gVisor (runsc 2022) ignores the container's ulimit `cpu`,
    // and holds the one the helper sets inside (docs/src/docker.md#runtimes-gvisor).
    let r = dsh(&bomb, "while :; do :; done").await;
    assert_eq!(r.outcome.kind, OutcomeKind::CpuLimit, "{r:?}");
    assert_eq!(r.cli_exit_code(), 152);
    // Huge file.
    let r = sb
        .run(RunRequest::new([
            "dd",
            "if=/dev/zero",
            "of=big",
            "bs=1M",
            "count=10",
        ]))
        .await;
    assert_eq!(r.outcome.kind, OutcomeKind::FileSizeLimit, "{r:?}");
    assert!(std::fs::metadata(t.ws().join("big")).unwrap().len() <= 1 << 20);
    let r = sb
        .run(RunRequest::new([
            "dd",
            "if=/dev/zero",
            "of=small",
            "bs=1k",
            "count=10",
        ]))
        .await;
    assert!(r.success(), "{r:?}");
    // Fork bomb (bounded): the pids limit stops it well short of 100.
    let r = dsh(
        &sb,
        // Only shell builtins after the loop: no fork is left to run anything.
        // The inner shell dies when a fork fails; the outer one then counts
        // with builtins only.
        // (A glob is the shell's own: the processes of the container.)
        "sh -c 'i=0; while [ $i -lt 100 ]; do sleep 30 & i=$((i+1)); done' 2>/dev/null; set -- /proc/[0-9]*; echo $#",
    )
    .await;
    let n: u32 = r.stdout.trim().parse().unwrap_or(999);
    assert!((2..=16).contains(&n), "{n} processes: {r:?}");
    // Output flood: capped while streaming, the call still ends.
    let r = dsh(&sb, "head -c 50000000 /dev/zero | tr '\\0' y").await;
    assert!(r.truncated && r.success(), "{:?}", r.outcome);
    assert_eq!(r.stdout.len(), 80_000);
    assert_eq!(containers(&session_label(&sb)), Vec::<String>::new());
}

async fn attack_k_timeout_with_background_and_setsid_children_leaves_no_container(engine: Engine) {
    let Some(image) = image_on(engine) else {
        return;
    };
    let t = tmp();
    let mut cfg = docker_config_on(&image, engine);
    cfg.timeout = Duration::from_secs(2);
    let sb = t.sandbox(cfg);
    let r = dsh(
        &sb,
        "sleep 300 & setsid sleep 300 & nohup sleep 300 & echo started; sleep 300",
    )
    .await;
    assert!(r.timed_out, "{r:?}");
    assert_eq!(r.cli_exit_code(), 124);
    assert_eq!(r.stdout, "started\n");
    assert_eq!(containers(&session_label(&sb)), Vec::<String>::new());
    // Dropping the call's future removes its container too.
    let sb = std::sync::Arc::new(sb);
    let call = {
        let sb = sb.clone();
        tokio::spawn(async move { dsh(&sb, "sleep 300").await })
    };
    let label = session_label(&sb);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while containers(&label).is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!containers(&label).is_empty(), "the call never started");
    call.abort();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !containers(&label).is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(containers(&label), Vec::<String>::new());
}

/// From a review: a call renames an ancestor of a nested allowed dir and puts
/// a symlink to the outside in its place; the engine resolves mount sources by
/// path, so the next call would get the outside mounted.
async fn a_swapped_nested_allowed_dir_is_refused(engine: Engine) {
    let Some(image) = image_on(engine) else {
        return;
    };
    let t = tmp();
    let nested = t.ws().join("a/b");
    std::fs::create_dir_all(&nested).unwrap();
    std::fs::set_permissions(t.ws().join("a"), std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::set_permissions(&nested, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::set_permissions(t.outside(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let dirs = [
        toolhost::AllowedDirSpec::read_write(t.ws()),
        toolhost::AllowedDirSpec::read_write(&nested),
    ];
    let sb = Sandbox::new(dirs, docker_config_on(&image, engine)).unwrap();
    let write = format!("echo pwned > {}/pwned && echo wrote", nested.display());
    // Allowed twin: before the swap the nested dir takes writes.
    let r = dsh(&sb, &write).await;
    assert_eq!(r.stdout, "wrote\n", "{r:?}");
    let r = dsh(
        &sb,
        &format!(
            "cd {} && mv a a.old && mkdir a && ln -s {} a/b && echo swapped",
            t.ws().display(),
            t.outside().display()
        ),
    )
    .await;
    assert_eq!(r.stdout, "swapped\n", "{r:?}");
    let r = dsh(&sb, &write).await;
    assert_eq!(r.outcome.kind, OutcomeKind::PermissionDenied, "{r:?}");
    assert!(!t.outside().join("pwned").exists());
}

#[tokio::test]
async fn the_engine_socket_is_never_mounted() {
    let Some(image) = image() else { return };
    assert!(std::path::Path::new("/var/run/docker.sock").exists());
    let sb = Sandbox::new(
        [toolhost::AllowedDirSpec::read_only("/run")],
        docker_config(&image),
    )
    .unwrap();
    let r = dsh(&sb, "ls -la /run/docker.sock").await;
    assert_eq!(r.outcome.kind, OutcomeKind::PermissionDenied, "{r:?}");
    assert!(r.outcome.message.contains("socket"), "{r:?}");
}

async fn a_guest_path_is_where_the_container_sees_the_dir(engine: Engine) {
    let Some(image) = image_on(engine) else {
        return;
    };
    let t = Tmp::new();
    t.write("sub/f", "in-sub");
    t.write(".git/HEAD", "ref: refs/heads/main\n");
    let head = t.ws().join(".git/HEAD");
    let before = sha256_file(&head);
    let mapped = |guest: &str| {
        Sandbox::new(
            [toolhost::AllowedDirSpec::read_write(t.ws()).at(guest)],
            docker_config_on(&image, engine),
        )
        .unwrap()
    };
    let sb = mapped("/data");
    let r = sb
        .run(
            RunRequest::new([
                "sh",
                "-c",
                "pwd; cat f; echo; echo w > new; echo x > /data/.git/HEAD; echo $?",
            ])
            .cwd("/data/sub"),
        )
        .await;
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines, ["/data/sub", "in-sub", "1"], "{r:?}");
    // The write below the guest path landed in the host dir; the protected
    // path held at its guest place did not change.
    assert_eq!(
        std::fs::read_to_string(t.ws().join("sub/new")).unwrap(),
        "w\n"
    );
    assert_eq!(sha256_file(&head), before);
    // The host path is not a path in the container.
    let r = dsh(
        &sb,
        &format!("test -e {} && echo there || echo absent", t.ws().display()),
    )
    .await;
    assert_eq!(r.stdout, "absent\n", "{r:?}");
    // Places a container cannot give a workspace are refused, clearly; the
    // mapped twin above ran.
    for guest in [
        "/",
        "/tmp",
        "/proc/x",
        "/dev",
        "/etc",
        "/etc/x",
        "/bin",
        "/usr/local/bin",
        "/usr/lib/x86_64-linux-gnu",
        "/usr",
        "/.toolhost-helper/x",
    ] {
        let r = dsh(&mapped(guest), "echo ran").await;
        assert_eq!(
            r.outcome.kind,
            OutcomeKind::InvalidRequest,
            "{guest}: {r:?}"
        );
        assert!(
            r.outcome.message.contains("cannot be mounted there"),
            "{r:?}"
        );
        assert!(r.stdout.is_empty());
    }
    // No dir at all: nothing mounted, the image's working directory.
    let none = Sandbox::new(
        Vec::<toolhost::AllowedDirSpec>::new(),
        docker_config_on(&image, engine),
    )
    .unwrap();
    let r = dsh(&none, "pwd; grep -c ' /data ' /proc/self/mountinfo").await;
    assert_eq!(r.stdout, "/\n0\n", "{r:?}");
}

async fn a_protected_path_seen_at_two_places_is_held_at_both(engine: Engine) {
    let Some(image) = image_on(engine) else {
        return;
    };
    let t = Tmp::new();
    t.write("sub/.git/HEAD", "ref: refs/heads/main\n");
    let head = t.ws().join("sub/.git/HEAD");
    let before = sha256_file(&head);
    // The nested dir is seen at /b and, through its parent, at /a/sub.
    let sb = Sandbox::new(
        [
            toolhost::AllowedDirSpec::read_write(t.ws()).at("/a"),
            toolhost::AllowedDirSpec::read_write(t.ws().join("sub")).at("/b"),
        ],
        docker_config_on(&image, engine),
    )
    .unwrap();
    let r = dsh(
        &sb,
        "for p in /a/sub/.git/HEAD /b/.git/HEAD; do echo x > $p; echo $?; done; echo y > /a/sub/free; echo y > /b/free2; cat /a/sub/free2",
    )
    .await;
    assert_eq!(r.stdout, "1\n1\ny\n", "{r:?}");
    assert_eq!(sha256_file(&head), before);
    assert_eq!(
        std::fs::read_to_string(t.ws().join("sub/free")).unwrap(),
        "y\n"
    );
}

/// A held `.git` renamed away by another call and made anew by the holding
/// call is moved aside after it (a new dir, and the same file linked back);
/// under gVisor the second call waits at the gate, and its own look finds
/// `.git` gone (`util::a_protected_path_renamed_away_and_made_anew`).
async fn a_protected_path_renamed_away_and_made_anew_is_moved_aside(engine: Engine) {
    let Some(image) = image_on(engine) else {
        return;
    };
    for anew in [Anew::Dir, Anew::LinkedBack, Anew::Removed] {
        let t = Tmp::new();
        let mut cfg = docker_config_on(&image, engine);
        cfg.timeout = Duration::from_secs(40);
        let sb = t.sandbox(cfg);
        a_protected_path_renamed_away_and_made_anew(&sb, &t.ws(), engine == Engine::Runsc, anew)
            .await;
    }
}

async fn a_read_only_dir_is_read_only_where_a_writable_one_shows_it(engine: Engine) {
    let Some(image) = image_on(engine) else {
        return;
    };
    let t = Tmp::new();
    t.write("sub/f", "orig\n");
    let f = t.ws().join("sub/f");
    let sb = Sandbox::new(
        [
            toolhost::AllowedDirSpec::read_write(t.ws()).at("/a"),
            toolhost::AllowedDirSpec::read_only(t.ws().join("sub")).at("/b"),
        ],
        docker_config_on(&image, engine),
    )
    .unwrap();
    let r = dsh(
        &sb,
        "echo x > /b/f; echo $?; echo x > /a/sub/f; echo $?; echo y > /a/free; echo $?",
    )
    .await;
    assert_eq!(r.stdout, "1\n1\n0\n", "{r:?}");
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "orig\n");
    assert_eq!(std::fs::read_to_string(t.ws().join("free")).unwrap(), "y\n");
}

on_each_engine!(
    runs_in_a_locked_down_container_and_leaves_nothing,
    attack_k_paths_env_and_the_docker_socket,
    attack_k_limits_memory_cpu_file_size_processes_and_output,
    attack_k_timeout_with_background_and_setsid_children_leaves_no_container,
    a_swapped_nested_allowed_dir_is_refused,
    a_guest_path_is_where_the_container_sees_the_dir,
    a_protected_path_seen_at_two_places_is_held_at_both,
    a_read_only_dir_is_read_only_where_a_writable_one_shows_it,
    a_protected_path_renamed_away_and_made_anew_is_moved_aside,
);
