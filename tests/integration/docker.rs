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

/// A workspace open to every user (most tests predate the owner's uid).
fn tmp() -> Tmp {
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

fn docker_config(image: &str) -> SandboxConfig {
    let mut c = SandboxConfig {
        backend: BackendChoice::Docker,
        timeout: Duration::from_secs(30),
        ..SandboxConfig::default()
    };
    c.docker.image = Some(image.to_string());
    c
}

async fn dsh(sb: &Sandbox, script: &str) -> RunOutput {
    sb.run(RunRequest::new(["sh", "-c", script])).await
}

/// Containers carrying a label (`key` or `key=value`), running or not.
fn containers(label: &str) -> Vec<String> {
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
fn sleeping_toolhost(
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

fn session_label(sb: &Sandbox) -> String {
    format!("toolhost.session={}", sb.docker_backend().session())
}

#[tokio::test]
async fn runs_in_a_locked_down_container_and_leaves_nothing() {
    let Some(image) = image() else { return };
    let t = tmp();
    t.write("in.txt", "inside\n");
    let sb = t.sandbox(docker_config(&image));
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
        "id -u; grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status; touch /etc/x 2>&1; touch /tmp/ok && echo tmp-ok; df -k /tmp | tail -1",
    )
    .await;
    let out = &r.stdout;
    // A world-writable workspace is shared: nobody, not its owner
    // (`docker::shared_and_read_only_dirs_run_as_nobody`).
    assert!(out.starts_with("65534\n"), "{out}");
    assert!(out.contains("CapEff:\t0000000000000000"), "{out}");
    assert!(out.contains("CapBnd:\t0000000000000000"), "{out}");
    assert!(out.contains("NoNewPrivs:\t1"), "{out}");
    assert!(out.contains("Read-only file system"), "{out}");
    assert!(out.contains("tmp-ok"), "{out}");
    assert!(out.contains("tmpfs") && out.contains("65536"), "{out}");
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

#[tokio::test]
async fn attack_k_paths_env_and_the_docker_socket() {
    let Some(image) = image() else { return };
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
    let mut cfg = docker_config(&image);
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

#[tokio::test]
async fn attack_k_limits_memory_cpu_file_size_processes_and_output() {
    let Some(image) = image() else { return };
    let t = tmp();
    let mut cfg = docker_config(&image);
    cfg.max_memory_mb = 64;
    cfg.max_cpu_seconds = 1;
    cfg.max_file_size_mb = 1;
    cfg.max_processes = 16;
    cfg.max_output_bytes = 100_000;
    let sb = t.sandbox(cfg);
    // Memory bomb: a 200 MB shell variable.
    let r = dsh(
        &sb,
        "x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo ${#x}",
    )
    .await;
    assert_eq!(r.outcome.kind, OutcomeKind::MemoryLimit, "{r:?}");
    let r = dsh(
        &sb,
        "x=$(head -c 1000000 /dev/zero | tr '\\0' a); echo ${#x}",
    )
    .await;
    assert_eq!(r.stdout, "1000000\n", "{r:?}");
    // CPU spin.
    let r = dsh(&sb, "while :; do :; done").await;
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
        "sh -c 'i=0; while [ $i -lt 100 ]; do sleep 30 & i=$((i+1)); done' 2>/dev/null; read n < /sys/fs/cgroup/pids/pids.current || read n < /sys/fs/cgroup/pids.current; echo $n",
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

#[tokio::test]
async fn attack_k_timeout_with_background_and_setsid_children_leaves_no_container() {
    let Some(image) = image() else { return };
    let t = tmp();
    let mut cfg = docker_config(&image);
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

#[tokio::test]
async fn attack_k_network_off_and_on() {
    let Some(image) = image() else { return };
    // A listener on every host address that accepts and closes at once,
    // counting connections.
    let listener = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    {
        let accepted = accepted.clone();
        std::thread::spawn(move || {
            for c in listener.incoming() {
                if c.is_ok() {
                    accepted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            }
        });
    }
    let count = || accepted.load(std::sync::atomic::Ordering::SeqCst);
    let t = tmp();
    // The host's address as a container sees it: the default route's gateway
    // of a container with the network on. An engine started for the first
    // time reports no gateway in `docker network inspect bridge`, so the
    // address is taken from the container's own routing table.
    let mut cfg = docker_config(&image);
    cfg.allow_network = true;
    let sb = t.sandbox(cfg);
    let r = dsh(
        &sb,
        &format!(
            "gw=$(ip route | awk '/^default/ {{print $3}}'); echo GW=$gw; \
             echo hi | nc -w 3 $gw {port} && echo CONNECTED"
        ),
    )
    .await;
    // Allowed twin: with the network on, the connect reaches the host.
    assert!(r.stdout.contains("CONNECTED"), "{r:?}");
    assert_eq!(count(), 1);
    let gw = r
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("GW="))
        .unwrap_or_default()
        .to_string();
    assert!(
        gw.parse::<std::net::Ipv4Addr>().is_ok(),
        "no default route in the container: {r:?}"
    );
    // Network off: the same connect to the same address is unreachable.
    let sb = t.sandbox(docker_config(&image));
    let r = dsh(
        &sb,
        &format!("echo hi | nc -w 3 {gw} {port} && echo CONNECTED"),
    )
    .await;
    assert!(!r.stdout.contains("CONNECTED"), "{r:?}");
    assert!(r.stderr.contains("unreachable"), "{r:?}");
    assert_eq!(count(), 1, "a connection got through with the network off");
}

#[tokio::test]
async fn engine_over_tcp_and_clear_refusals() {
    let Some(image) = image() else { return };
    let t = tmp();
    // The same engine on its loopback TCP port.
    let mut cfg = docker_config(&image);
    cfg.docker.host = Some("tcp://127.0.0.1:2375".into());
    let sb = t.sandbox(cfg);
    let r = dsh(&sb, "echo over-tcp").await;
    assert_eq!(r.stdout, "over-tcp\n", "{r:?}");
    assert_eq!(sb.docker_backend().engine_address(), "tcp://127.0.0.1:2375");
    // Unreachable engine.
    let mut cfg = docker_config(&image);
    cfg.docker.host = Some("tcp://127.0.0.1:1".into());
    let r = dsh(&t.sandbox(cfg), "true").await;
    assert_eq!(r.outcome.kind, OutcomeKind::BackendUnavailable, "{r:?}");
    assert!(r.outcome.message.contains("unreachable"), "{r:?}");
    // Missing image, and no image configured.
    let r = dsh(
        &t.sandbox(docker_config("toolhost-no-such-image:0")),
        "true",
    )
    .await;
    assert_eq!(r.outcome.kind, OutcomeKind::BackendUnavailable, "{r:?}");
    assert!(r.outcome.message.contains("docker build"), "{r:?}");
    let mut cfg = docker_config(&image);
    cfg.docker.image = None;
    let r = dsh(&t.sandbox(cfg), "true").await;
    assert_eq!(r.outcome.kind, OutcomeKind::BackendUnavailable, "{r:?}");
    assert!(r.outcome.message.contains("[docker] image"), "{r:?}");
    assert_eq!(r.cli_exit_code(), 125);
}

/// Bind mounts need an engine that sees this machine's filesystem. A dir that
/// exists only in a private mount namespace of toolhost is one the engine
/// cannot see (as a remote engine cannot see any of this machine's dirs).
#[test]
fn an_engine_that_cannot_see_the_allowed_dir_is_a_clear_refusal() {
    let Some(image) = image() else { return };
    let t = tmp();
    let cfg = t.root.join("docker.toml");
    std::fs::write(&cfg, format!("[docker]\nimage = {image:?}\n")).unwrap();
    let private = t.root.join("private");
    std::fs::create_dir(&private).unwrap();
    let run = |mount: &str, ws: &str| {
        let script = format!(
            "{mount} mkdir -p {p}/{ws} && chmod 777 {p}/{ws} && cd {p}/{ws} && exec {bin} run --config {cfg} --backend docker --json -- sh -c 'echo seen'",
            p = private.display(),
            bin = toolhost_bin().display(),
            cfg = cfg.display(),
        );
        Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c", &script])
            .output()
            .unwrap()
    };
    // Allowed twin: the same dir, visible to the engine, runs.
    let out = run("", "visible");
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("seen"),
        "{out:?}"
    );
    // Hidden from the engine by a tmpfs in toolhost's own mount namespace.
    let out = run(
        &format!("mount -t tmpfs tmpfs {} &&", private.display()),
        "hidden",
    );
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    let json = String::from_utf8_lossy(&out.stdout);
    assert!(json.contains("backend_unavailable"), "{json}");
    assert!(json.contains("shares this machine's filesystem"), "{json}");
}

/// A TLS engine endpoint with client certificates: stunnel terminates TLS (the
/// server certificate for 127.0.0.1 and client verification against a test
/// CA) in front of the engine's socket. Certificates come from openssl here.
#[tokio::test]
async fn engine_over_tls_with_client_certificates() {
    let Some(image) = image() else { return };
    let t = tmp();
    let d = t.root.join("tls");
    std::fs::create_dir(&d).unwrap();
    let key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    let script = format!(
        "set -e
        openssl req -x509 {key} -keyout ca-key.pem -out ca.pem -days 2 -subj /CN=toolhost-test-ca
        openssl req -x509 {key} -keyout other-ca-key.pem -out other-ca.pem -days 2 -subj /CN=other-ca
        openssl req {key} -keyout server-key.pem -out server.csr -subj /CN=127.0.0.1
        printf 'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth\\n' > server.ext
        openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -out server.pem -days 2 -extfile server.ext
        printf 'extendedKeyUsage=clientAuth\\n' > client.ext
        openssl req {key} -keyout key.pem -out client.csr -subj /CN=client
        openssl x509 -req -in client.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -out cert.pem -days 2 -extfile client.ext
        openssl req {key} -keyout other-key.pem -out other.csr -subj /CN=intruder
        openssl x509 -req -in other.csr -CA other-ca.pem -CAkey other-ca-key.pem -CAcreateserial -out other-cert.pem -days 2 -extfile client.ext"
    );
    let out = Command::new("sh")
        .args(["-c", &script])
        .current_dir(&d)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    std::fs::write(
        d.join("stunnel.conf"),
        format!(
            "foreground = yes\npid =\n[engine]\naccept = 127.0.0.1:{port}\nconnect = /var/run/docker.sock\ncert = server.pem\nkey = server-key.pem\nCAfile = ca.pem\nverifyChain = yes\nrequireCert = yes\n"
        ),
    )
    .unwrap();
    let _stunnel = Kill(
        Command::new("stunnel")
            .arg("stunnel.conf")
            .current_dir(&d)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("stunnel (scripts/docker-setup installs it)"),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "stunnel did not listen"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let tls = |cert: &str, key: &str, scheme: &str| {
        let mut cfg = docker_config(&image);
        cfg.docker.host = Some(format!("{scheme}://127.0.0.1:{port}"));
        cfg.docker.tls_ca = Some(d.join("ca.pem"));
        cfg.docker.tls_cert = Some(d.join(cert));
        cfg.docker.tls_key = Some(d.join(key));
        t.sandbox(cfg)
    };
    // The client certificate the endpoint trusts: calls run, over tcp:// with
    // TLS files and over https://.
    for scheme in ["tcp", "https"] {
        let r = dsh(&tls("cert.pem", "key.pem", scheme), "echo over-tls").await;
        assert_eq!(r.stdout, "over-tls\n", "{scheme}: {r:?}");
    }
    // One from another CA is refused by the endpoint: no call runs.
    let r = dsh(&tls("other-cert.pem", "other-key.pem", "https"), "echo no").await;
    assert_eq!(r.outcome.kind, OutcomeKind::BackendUnavailable, "{r:?}");
    assert_eq!(r.stdout, "");
    // Plain HTTP to the TLS endpoint, and https without the TLS files.
    let mut cfg = docker_config(&image);
    cfg.docker.host = Some(format!("tcp://127.0.0.1:{port}"));
    let r = dsh(&t.sandbox(cfg), "echo no").await;
    assert_eq!(r.outcome.kind, OutcomeKind::BackendUnavailable, "{r:?}");
    let mut cfg = docker_config(&image);
    cfg.docker.host = Some(format!("https://127.0.0.1:{port}"));
    let r = dsh(&t.sandbox(cfg), "echo no").await;
    assert_eq!(r.outcome.kind, OutcomeKind::BackendUnavailable, "{r:?}");
    assert!(r.outcome.message.contains("tls_ca"), "{r:?}");
}

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

#[tokio::test]
async fn warm_mode_runs_calls_in_one_container_with_the_same_limits() {
    let Some(image) = image() else { return };
    let t = tmp();
    let mut cfg = docker_config(&image);
    cfg.docker.warm = true;
    cfg.max_cpu_seconds = 1;
    cfg.max_memory_mb = 64;
    cfg.max_processes = 32;
    cfg.max_file_size_mb = 1;
    cfg.timeout = Duration::from_secs(3);
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
    assert_eq!(r.outcome.kind, OutcomeKind::MemoryLimit, "{r:?}");
    let r = dsh(&sb, "head -c 2000000 /dev/zero > /tmp/big").await;
    assert_eq!(r.outcome.kind, OutcomeKind::FileSizeLimit, "{r:?}");
    let r = dsh(
        &sb,
        "head -c 1000 /dev/zero > /tmp/small && wc -c < /tmp/small",
    )
    .await;
    assert_eq!(r.stdout.trim(), "1000", "{r:?}");
    assert_eq!(containers(&label), first, "calls reuse the container");
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

/// From a review: a call renames an ancestor of a nested allowed dir and puts
/// a symlink to the outside in its place; the engine resolves mount sources by
/// path, so the next call would get the outside mounted.
#[tokio::test]
async fn a_swapped_nested_allowed_dir_is_refused() {
    let Some(image) = image() else { return };
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
    let sb = Sandbox::new(dirs, docker_config(&image)).unwrap();
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

/// Issue 16.3: whoever runs toolhost, a docker tool reads and writes its
/// workspace, 0700 or 0755, as the workspace's owner: what it creates belongs
/// to that owner on the host, and `mktemp` works (`TMPDIR` is the
/// container's tmpfs). As root, also a workspace of another user (1000:1000)
/// and one of 65534: the tool takes that uid.
#[tokio::test]
async fn the_tool_runs_as_the_workspace_owner() {
    use std::os::unix::fs::MetadataExt;
    let Some(image) = image() else { return };
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let mut owners = vec![None];
    if root {
        owners.extend([Some((1000u32, 1000u32)), Some((65534, 65534))]);
    }
    for warm in [false, true] {
        for mode in [0o700, 0o755] {
            for owner in &owners {
                let t = Tmp::new();
                t.write("in.txt", "inside\n");
                std::fs::set_permissions(t.ws(), std::fs::Permissions::from_mode(mode)).unwrap();
                if let Some((u, g)) = owner {
                    std::os::unix::fs::chown(t.ws(), Some(*u), Some(*g)).unwrap();
                    std::os::unix::fs::chown(t.ws().join("in.txt"), Some(*u), Some(*g)).unwrap();
                }
                let meta = std::fs::metadata(t.ws()).unwrap();
                let (uid, gid) = (meta.uid(), meta.gid());
                let mut cfg = docker_config(&image);
                cfg.docker.warm = warm;
                let sb = t.sandbox(cfg);
                let what = format!("warm={warm} mode={mode:o} owner={uid}:{gid}");
                let r = dsh(
                    &sb,
                    "id -u; id -g; cat in.txt; echo made > new.txt && mkdir sub && touch sub/f; echo TMPDIR=$TMPDIR; f=$(mktemp) && echo tmp > \"$f\" && cat \"$f\"",
                )
                .await;
                assert!(r.success(), "{what}: {r:?}");
                assert_eq!(
                    r.stdout,
                    format!("{uid}\n{gid}\ninside\nTMPDIR=/tmp\ntmp\n"),
                    "{what}: {r:?}"
                );
                for f in ["new.txt", "sub", "sub/f"] {
                    let m = std::fs::metadata(t.ws().join(f)).unwrap();
                    assert_eq!((m.uid(), m.gid()), (uid, gid), "{what}: {f}");
                }
                assert_eq!(
                    std::fs::read_to_string(t.ws().join("new.txt")).unwrap(),
                    "made\n",
                    "{what}"
                );
            }
        }
    }
}

/// Writable allowed dirs of two owners: one uid cannot be both, so the call
/// is refused before it runs, saying what to set; with `[docker] user` set,
/// the same call runs as that user.
#[tokio::test]
async fn writable_dirs_of_two_owners_are_refused_until_user_is_set() {
    let Some(image) = image() else { return };
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("needs root to chown a dir to another user");
        return;
    }
    let t = Tmp::new();
    std::fs::set_permissions(&t.root, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(t.outside(), Some(1000), Some(1000)).unwrap();
    std::fs::set_permissions(t.outside(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let dirs = |cfg: SandboxConfig| Sandbox::new([t.ws(), t.outside()], cfg).expect("sandbox");
    let marker = t.outside().join("ran");
    let script = format!("touch {}", marker.display());
    let sb = dirs(docker_config(&image));
    let r = dsh(&sb, &script).await;
    assert_eq!(r.outcome.kind, OutcomeKind::PermissionDenied, "{r:?}");
    assert!(r.outcome.message.contains("[docker] user"), "{r:?}");
    assert!(r.outcome.message.contains("uid 1000"), "{r:?}");
    assert!(!marker.exists(), "the refused call ran");
    let mut cfg = docker_config(&image);
    cfg.docker.user = Some("1000:1000".into());
    let sb = dirs(cfg);
    let r = dsh(&sb, &format!("{script}; id -u")).await;
    assert!(r.success(), "{r:?}");
    assert_eq!(r.stdout, "1000\n", "{r:?}");
    assert!(marker.exists());
}

/// Case 42 on docker: a tool running as the workspace's owner (root, when
/// the tests run as root) cannot leave a set-user-ID or set-group-ID file,
/// per call and in warm mode; the plain modes still work beside it. Checked
/// on the host, by the mode bits of the files.
#[tokio::test]
async fn attack_42_no_set_id_file_from_a_container() {
    use std::os::unix::fs::MetadataExt;
    let Some(image) = image() else { return };
    for warm in [false, true] {
        let t = Tmp::new();
        let mut cfg = docker_config(&image);
        cfg.docker.warm = warm;
        let sb = t.sandbox(cfg);
        let r = dsh(
            &sb,
            "cp /bin/busybox s; cp /bin/busybox g; cp /bin/busybox p; \
             chmod 4755 s; echo s=$?; chmod 2755 g; echo g=$?; chmod u+s,g+s g; echo ug=$?; \
             mknod -m 4644 fifo p; echo fifo=$?; chmod 755 p; echo p=$?; \
             mknod -m 644 fifo2 p; echo fifo2=$?",
        )
        .await;
        assert!(r.success(), "warm={warm}: {r:?}");
        assert!(
            r.stdout.contains("s=1\ng=1\nug=1\nfifo=1\np=0\nfifo2=0\n"),
            "warm={warm}: {r:?}"
        );
        assert!(
            r.stderr.contains("Operation not permitted"),
            "warm={warm}: {r:?}"
        );
        for f in ["s", "g"] {
            let mode = std::fs::metadata(t.ws().join(f)).unwrap().mode();
            assert_eq!(mode & 0o6000, 0, "warm={warm}: {f} has mode {mode:o}");
        }
        assert!(!t.ws().join("fifo").exists(), "warm={warm}");
        assert_eq!(
            std::fs::metadata(t.ws().join("p")).unwrap().mode() & 0o7777,
            0o755
        );
        assert!(t.ws().join("fifo2").exists(), "warm={warm}");
    }
}

/// Never more than toolhost could do itself: a toolhost that is not root
/// (the CLI run as 65534, on the engine's TCP socket) runs the tool of a dir
/// that 1000 owns (group nogroup, group-writable) as its own uid and gid,
/// and the file it makes is its own; the twin, toolhost as root on the same
/// dir, runs it as the owner, 1000.
#[tokio::test]
async fn a_toolhost_that_is_not_root_runs_tools_as_itself() {
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::process::CommandExt;
    let Some(image) = image() else { return };
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("needs root to run the CLI as another user");
        return;
    }
    let t = tmp();
    std::os::unix::fs::chown(t.ws(), Some(1000), Some(65534)).unwrap();
    std::fs::set_permissions(t.ws(), std::fs::Permissions::from_mode(0o775)).unwrap();
    let home = t.root.join("home");
    std::fs::create_dir(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(65534), Some(65534)).unwrap();
    let cfg = t.root.join("docker.toml");
    std::fs::write(
        &cfg,
        format!("[docker]\nimage = \"{image}\"\nhost = \"tcp://127.0.0.1:2375\"\n"),
    )
    .unwrap();
    let out = Command::new(toolhost_bin())
        .args(["run", "--backend", "docker", "--config"])
        .arg(&cfg)
        .args(["--", "sh", "-c", "id -u; id -g; touch by-nobody"])
        .current_dir(t.ws())
        .env("HOME", &home)
        .env_remove("XDG_CACHE_HOME")
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("TOOLHOST_CONFIG")
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "65534\n65534\n",
        "{out:?}"
    );
    let m = std::fs::metadata(t.ws().join("by-nobody")).unwrap();
    assert_eq!((m.uid(), m.gid()), (65534, 65534));
    let sb = t.sandbox(docker_config(&image));
    let r = dsh(&sb, "id -u; touch by-root").await;
    assert_eq!(r.stdout, "1000\n", "{r:?}");
    assert_eq!(
        std::fs::metadata(t.ws().join("by-root")).unwrap().uid(),
        1000
    );
}

/// A shared writable dir (world-writable, or sticky like `/var/tmp`) is not
/// its owner's to lend: the tool runs as nobody there, even when root owns
/// it; so it does with only read-only dirs (a root-owned `:ro` dir must not
/// be read as root). Twin: a 0755 root-owned workspace runs as root.
#[tokio::test]
async fn shared_and_read_only_dirs_run_as_nobody() {
    let Some(image) = image() else { return };
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("needs root: the twin is a root-owned workspace");
        return;
    }
    for (mode, want) in [
        (0o1777, "65534"),
        (0o777, "65534"),
        (0o1755, "65534"),
        (0o755, "0"),
    ] {
        let t = Tmp::new();
        std::fs::set_permissions(t.ws(), std::fs::Permissions::from_mode(mode)).unwrap();
        let sb = t.sandbox(docker_config(&image));
        let r = dsh(&sb, "id -u").await;
        assert_eq!(r.stdout, format!("{want}\n"), "mode {mode:o}: {r:?}");
    }
    // Only a read-only dir: a 0700 root dir with a secret in it.
    let t = Tmp::new();
    std::fs::set_permissions(t.ws(), std::fs::Permissions::from_mode(0o700)).unwrap();
    t.write("secret", CANARY);
    std::fs::set_permissions(
        t.ws().join("secret"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let sb = Sandbox::new(
        [toolhost::AllowedDirSpec::read_only(t.ws())],
        docker_config(&image),
    )
    .expect("sandbox");
    let r = sb
        .run(RunRequest::new(["sh", "-c", "id -u; cat secret"]).cwd(t.ws()))
        .await;
    assert!(r.stdout.starts_with("65534\n"), "{r:?}");
    assert!(!r.stdout.contains(CANARY), "{r:?}");
}

/// The helper checks the mounts before anything runs: `--expect DEV:INO:PATH`
/// with the workspace's real device and inode lets the tool run; with another
/// inode, or for a path that is no mount point, it exits 125 naming the
/// path, and the tool never runs. The helper file is the one toolhost wrote.
#[tokio::test]
async fn the_helper_refuses_a_mount_other_than_checked() {
    use std::os::unix::fs::MetadataExt;
    let Some(image) = image() else { return };
    let t = Tmp::new();
    let sb = t.sandbox(docker_config(&image));
    assert!(dsh(&sb, "true").await.success());
    let helper = std::fs::read_dir(
        std::env::var("XDG_CACHE_HOME")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|_| {
                std::path::PathBuf::from(std::env::var("HOME").unwrap()).join(".cache")
            })
            .join("toolhost/docker"),
    )
    .expect("toolhost's helper dir")
    .flatten()
    .map(|e| e.path())
    .find(|p| {
        p.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("toolhost-docker-helper-"))
    })
    .expect("the helper file");
    let ws = t.ws();
    let m = std::fs::metadata(&ws).unwrap();
    let marker = ws.join("ran");
    let run = |expect: String| {
        Command::new("docker")
            .args(["run", "--rm", "--mount"])
            .arg(format!(
                "type=bind,source={},target=/.toolhost-helper,readonly",
                helper.display()
            ))
            .arg("--mount")
            .arg(format!("type=bind,source={0},target={0}", ws.display()))
            .args([
                "--entrypoint",
                "/.toolhost-helper",
                &image,
                "--expect",
                &expect,
                "--exec",
                "touch",
            ])
            .arg(&marker)
            .output()
            .expect("docker run")
    };
    let wrong = run(format!("{}:{}:{}", m.dev(), m.ino() + 1, ws.display()));
    assert_eq!(wrong.status.code(), Some(125), "{wrong:?}");
    let err = String::from_utf8_lossy(&wrong.stderr);
    assert!(
        err.contains("mount check failed") && err.contains("another place"),
        "{err}"
    );
    assert!(!marker.exists(), "the tool ran");
    let parent = ws.parent().unwrap();
    let pm = std::fs::metadata(parent).unwrap();
    let not_mounted = run(format!("{}:{}:{}", pm.dev(), pm.ino(), parent.display()));
    assert_eq!(not_mounted.status.code(), Some(125), "{not_mounted:?}");
    assert!(String::from_utf8_lossy(&not_mounted.stderr).contains("not a mount point"));
    assert!(!marker.exists(), "the tool ran");
    let right = run(format!("{}:{}:{}", m.dev(), m.ino(), ws.display()));
    assert!(right.status.success(), "{right:?}");
    assert!(marker.exists(), "the tool did not run");
}

/// The second engine `scripts/docker-setup` starts, with `--userns-remap`.
const USERNS_ENGINE: &str = "unix:///run/toolhost-userns-docker.sock";

/// An engine that maps container uids to other host uids (userns-remap): a
/// tool running as the workspace's owner would not own its files as that
/// owner on the host, so the call is refused before it runs, saying what to
/// set; with `[docker] user` set, the same call runs, and its file belongs on
/// the host to the uid the engine maps it to (dockremap's base + 1000).
#[tokio::test]
async fn an_engine_that_remaps_uids_is_refused_until_user_is_set() {
    use std::os::unix::fs::MetadataExt;
    let Some(image) = image() else { return };
    let answers = Command::new("docker")
        .args([
            "-H",
            USERNS_ENGINE,
            "info",
            "--format",
            "{{.SecurityOptions}}",
        ])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("name=userns"))
        .unwrap_or(false);
    if !answers {
        let why =
            format!("no userns-remap engine at {USERNS_ENGINE} (scripts/docker-setup starts it)");
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{why}");
        }
        eprintln!("\n*** SKIPPED: {why} ***\n");
        return;
    }
    // A workspace of the host uid that container uid 1000 becomes.
    let base: u32 = std::fs::read_to_string("/etc/subuid")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("dockremap:")?
                .split(':')
                .next()?
                .parse()
                .ok()
        })
        .expect("dockremap's subuid range");
    let t = Tmp::new();
    std::fs::set_permissions(&t.root, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(t.ws(), Some(base + 1000), Some(base + 1000)).unwrap();
    let mut cfg = docker_config(&image);
    cfg.docker.host = Some(USERNS_ENGINE.into());
    let sb = t.sandbox(cfg.clone());
    let r = dsh(&sb, "touch made").await;
    assert_eq!(r.outcome.kind, OutcomeKind::PermissionDenied, "{r:?}");
    assert!(r.outcome.message.contains("userns-remap"), "{r:?}");
    assert!(r.outcome.message.contains("[docker] user"), "{r:?}");
    assert!(!t.ws().join("made").exists(), "the refused call ran");
    cfg.docker.user = Some("1000:1000".into());
    let sb = t.sandbox(cfg);
    let r = dsh(&sb, "id -u; touch made").await;
    assert!(r.success(), "{r:?}");
    assert_eq!(r.stdout, "1000\n", "{r:?}");
    assert_eq!(
        std::fs::metadata(t.ws().join("made")).unwrap().uid(),
        base + 1000
    );
}

#[tokio::test]
async fn a_guest_path_is_where_the_container_sees_the_dir() {
    let Some(image) = image() else { return };
    let t = Tmp::new();
    t.write("sub/f", "in-sub");
    t.write(".git/HEAD", "ref: refs/heads/main\n");
    let head = t.ws().join(".git/HEAD");
    let before = sha256_file(&head);
    let mapped = |guest: &str| {
        Sandbox::new(
            [toolhost::AllowedDirSpec::read_write(t.ws()).at(guest)],
            docker_config(&image),
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
        docker_config(&image),
    )
    .unwrap();
    let r = dsh(&none, "pwd; grep -c ' /data ' /proc/self/mountinfo").await;
    assert_eq!(r.stdout, "/\n0\n", "{r:?}");
}

#[tokio::test]
async fn a_protected_path_seen_at_two_places_is_held_at_both() {
    let Some(image) = image() else { return };
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
        docker_config(&image),
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

#[tokio::test]
async fn a_read_only_dir_is_read_only_where_a_writable_one_shows_it() {
    let Some(image) = image() else { return };
    let t = Tmp::new();
    t.write("sub/f", "orig\n");
    let f = t.ws().join("sub/f");
    let sb = Sandbox::new(
        [
            toolhost::AllowedDirSpec::read_write(t.ws()).at("/a"),
            toolhost::AllowedDirSpec::read_only(t.ws().join("sub")).at("/b"),
        ],
        docker_config(&image),
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
