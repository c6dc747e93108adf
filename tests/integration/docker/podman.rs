//! The docker backend on Podman: what differs from Docker's engine
//! (src/backend/docker/podman.rs), each with its twin. The rootless tests
//! run as the engine's user, as toolhost would there: this test binary
//! again, for the one test ([`rerun_as_rootless`]).

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use super::*;

/// Runs the test `name` of this binary as [`ROOTLESS_USER`] when this
/// process is root, and fails when it fails; `true` when it did (the
/// caller returns), `false` when this process is to run it itself.
pub(crate) fn rerun_as_rootless(name: &str) -> bool {
    if !rustix::process::geteuid().is_root() {
        return false;
    }
    let Some((uid, _)) = rootless_ids() else {
        let why = format!(
            "the rootless Podman tests need the user {ROOTLESS_USER} (run scripts/docker-setup)"
        );
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{why}");
        }
        eprintln!("\n*** SKIPPED: {why} ***\n");
        return true;
    };
    let exe = std::env::current_exe().expect("the test binary");
    let out = Command::new("runuser")
        .args(["-u", ROOTLESS_USER, "--"])
        .arg(&exe)
        .args([name, "--exact", "--nocapture", "--test-threads", "1"])
        .env("XDG_RUNTIME_DIR", format!("/run/user/{uid}"))
        .env("HOME", format!("/home/{ROOTLESS_USER}"))
        .env_remove("TOOLHOST_CONFIG")
        .current_dir("/tmp")
        .output()
        .expect("runuser");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && text.contains("1 passed"),
        "{name}, as {ROOTLESS_USER}: {text}"
    );
    true
}

/// The fixture root of a rootless test: made by root before the rerun
/// (`TOOLHOST_ROOTLESS_FIXTURE`), with `theirs`, a dir of root's that the
/// engine's user may write (group-writable, not shared), and `mine`, the
/// user's own.
const FIXTURE: &str = "TOOLHOST_ROOTLESS_FIXTURE";

fn make_fixture() -> tempfile::TempDir {
    let (uid, gid) = rootless_ids().expect("the rootless user");
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    for (name, owner, mode) in [("theirs", (0, gid), 0o775), ("mine", (uid, gid), 0o755)] {
        let p = dir.path().join(name);
        std::fs::create_dir(&p).unwrap();
        std::os::unix::fs::chown(&p, Some(owner.0), Some(owner.1)).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    dir
}

fn rootless_config(image: &str) -> SandboxConfig {
    let mut c = docker_config(image);
    Engine::PodmanRootless.configure(&mut c.docker);
    c
}

/// A rootless Podman keeps only its user as itself: a workspace of another
/// uid is refused before any container is made; the user's own runs, and
/// what the tool writes belongs to that user on the host.
#[tokio::test]
async fn a_rootless_podman_runs_only_in_its_users_workspace() {
    const NAME: &str = "docker::podman::a_rootless_podman_runs_only_in_its_users_workspace";
    if std::env::var_os(FIXTURE).is_none() && rustix::process::geteuid().is_root() {
        let fixture = make_fixture();
        // SAFETY: set before the rerun, read only by the child; no other
        // test of this binary reads this variable.
        unsafe { std::env::set_var(FIXTURE, fixture.path()) };
        let reran = rerun_as_rootless(NAME);
        assert!(reran);
        return;
    }
    let Some(image) = image_on(Engine::PodmanRootless) else {
        return;
    };
    let root = std::path::PathBuf::from(std::env::var_os(FIXTURE).expect("the fixture"));
    let (uid, gid) = rootless_ids().expect("the rootless user");
    let since = std::time::SystemTime::now();

    let theirs = root.join("theirs");
    let sb = Sandbox::new(
        [toolhost::AllowedDirSpec::read_write(&theirs)],
        rootless_config(&image),
    )
    .expect("sandbox");
    let r = sb
        .run(RunRequest::new(["sh", "-c", "echo x > canary"]).cwd(theirs.to_str().unwrap()))
        .await;
    assert_eq!(r.outcome.kind, OutcomeKind::PermissionDenied, "{r:?}");
    assert!(r.outcome.message.contains("rootless"), "{r:?}");
    assert!(!theirs.join("canary").exists());
    assert!(session_containers_since(&sb, since).is_empty());

    let mine = root.join("mine");
    let sb = Sandbox::new(
        [toolhost::AllowedDirSpec::read_write(&mine)],
        rootless_config(&image),
    )
    .expect("sandbox");
    let r = sb
        .run(RunRequest::new(["sh", "-c", "echo x > canary; id -u"]).cwd(mine.to_str().unwrap()))
        .await;
    assert!(r.success(), "{r:?}");
    assert_eq!(r.stdout.trim(), uid.to_string(), "{r:?}");
    let meta = std::fs::metadata(mine.join("canary")).expect("the canary");
    assert_eq!((meta.uid(), meta.gid()), (uid, gid));
}

/// Where a rootless Podman applies no cgroup limits, warm mode is refused
/// (one container would serve every call, held only by the helper's
/// rlimits), with no container made; a container per call runs, held to
/// `max_processes` by `RLIMIT_NPROC` and to `max_memory_mb` by `RLIMIT_AS`.
#[tokio::test]
async fn warm_mode_is_refused_where_podman_applies_no_limits() {
    const NAME: &str = "docker::podman::warm_mode_is_refused_where_podman_applies_no_limits";
    if rerun_as_rootless(NAME) {
        return;
    }
    let Some(image) = image_on(Engine::PodmanRootless) else {
        return;
    };
    let t = Tmp::new();
    let since = std::time::SystemTime::now();
    let mut cfg = rootless_config(&image);
    cfg.docker.warm = true;
    let sb = t.sandbox(cfg);
    let r = dsh(&sb, "echo x > canary").await;
    assert_eq!(r.outcome.kind, OutcomeKind::BackendUnavailable, "{r:?}");
    assert!(r.outcome.message.contains("warm mode is refused"), "{r:?}");
    assert!(!t.ws().join("canary").exists());
    assert!(session_containers_since(&sb, since).is_empty());

    let mut cfg = rootless_config(&image);
    cfg.max_processes = 8;
    cfg.max_memory_mb = 64;
    let sb = t.sandbox(cfg);
    // The memory hog first: the fork bomb ends the shell ("can't fork").
    let r = dsh(
        &sb,
        "echo x > canary; ulimit -u; ulimit -v; \
         head -c 100000000 /dev/zero | tail > /dev/null; echo tail=$?; \
         n=0; while [ $n -lt 12 ]; do sleep 5 & n=$((n+1)); done; echo never",
    )
    .await;
    assert!(t.ws().join("canary").exists(), "{r:?}");
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines.first(), Some(&"8"), "{r:?}");
    assert_eq!(
        lines.get(1),
        Some(&(64 * 1024).to_string().as_str()),
        "{r:?}"
    );
    assert!(
        r.stderr.contains("can't fork") && !r.stdout.contains("never"),
        "{r:?}"
    );
    assert!(
        r.stdout.contains("tail=1") && r.stderr.contains("out of memory"),
        "{r:?}"
    );
    // The control: within the limits, the same work runs.
    let r = dsh(
        &sb,
        "head -c 1000000 /dev/zero | tail > /dev/null; echo tail=$?; \
         n=0; while [ $n -lt 4 ]; do sleep 1 & n=$((n+1)); done; wait; echo done",
    )
    .await;
    assert!(r.stdout == "tail=0\ndone\n", "{r:?}");
}

/// On a rootful Podman the engine holds the limits: memory by the cgroup
/// (the hog is killed), processes by the pids limit; `nproc` is a ceiling
/// that never binds, not Podman's 1048576 (which an engine without
/// `CAP_SYS_RESOURCE` cannot set: every create would fail).
#[tokio::test]
async fn a_rootful_podman_holds_the_limits_by_cgroup() {
    let Some(image) = image_on(Engine::Podman) else {
        return;
    };
    let t = tmp();
    let mut cfg = docker_config(&image);
    Engine::Podman.configure(&mut cfg.docker);
    cfg.max_processes = 8;
    cfg.max_memory_mb = 64;
    let sb = t.sandbox(cfg);
    let r = dsh(&sb, "ulimit -u; ulimit -v").await;
    // The ceiling that never binds: pid_max, or this process's own hard
    // limit when lower (the helper only lowers it further, never raises).
    let pid_max: u64 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let own = rustix::process::getrlimit(rustix::process::Resource::Nproc)
        .maximum
        .unwrap_or(u64::MAX);
    // No address-space limit: the cgroup holds memory.
    assert_eq!(
        r.stdout,
        format!("{}\nunlimited\n", pid_max.min(own)),
        "{r:?}"
    );
    // The hog is killed by the cgroup's OOM killer: `tail`, or (the
    // kernel's choice) the shell with it.
    let r = dsh(
        &sb,
        "head -c 300000000 /dev/zero | tail > /dev/null; echo tail=$?",
    )
    .await;
    assert!(
        r.stdout == "tail=137\n" || (r.stdout.is_empty() && r.returncode == Some(137)),
        "{r:?}"
    );
    let r = dsh(
        &sb,
        "n=0; while [ $n -lt 12 ]; do sleep 5 & n=$((n+1)); done; echo never",
    )
    .await;
    assert!(
        r.stderr.contains("can't fork") && !r.stdout.contains("never"),
        "{r:?}"
    );
    // The control: within the limits, the same work runs.
    let r = dsh(
        &sb,
        "head -c 1000000 /dev/zero | tail > /dev/null; echo tail=$?; \
         n=0; while [ $n -lt 4 ]; do sleep 1 & n=$((n+1)); done; wait; echo done",
    )
    .await;
    assert!(r.stdout == "tail=0\ndone\n", "{r:?}");
}

/// Podman's compatible inspect names every runtime `oci`, and Podman may
/// create a container under its default when the runtime named is not
/// installed: the runtime is checked through Podman's own inspect. A
/// runtime Podman lists but lacks (its program missing) is refused after
/// the create, the container removed, the canary not written; `runc` runs.
#[tokio::test]
async fn on_podman_the_runtime_is_checked_through_its_own_api() {
    let Some(image) = image_on(Engine::Podman) else {
        return;
    };
    // Runtimes as `NAME PATH` lines; one whose program is not there.
    let out = Engine::Podman
        .cli()
        .args([
            "info",
            "--format",
            "{{range $k, $v := .Runtimes}}{{$k}} {{$v.Path}}\n{{end}}",
        ])
        .output()
        .expect("docker info");
    let listed = String::from_utf8_lossy(&out.stdout).into_owned();
    let lacking = listed
        .lines()
        .filter_map(|l| l.split_once(' '))
        .find(|(_, path)| !std::path::Path::new(path).exists())
        .map(|(name, _)| name.to_string())
        .unwrap_or_else(|| panic!("Podman lists no runtime it lacks: {listed}"));
    let t = tmp();
    let mut cfg = docker_config(&image);
    Engine::Podman.configure(&mut cfg.docker);
    cfg.docker.runtime = Some(lacking.clone());
    let sb = t.sandbox(cfg);
    let r = dsh(&sb, "echo x > canary").await;
    assert_eq!(r.outcome.kind, OutcomeKind::BackendUnavailable, "{r:?}");
    assert!(
        r.outcome
            .message
            .contains(&format!("\"runc\", not the configured {lacking:?}")),
        "{r:?}"
    );
    assert!(!t.ws().join("canary").exists());
    // Created (the message says under what) and removed: nothing of the
    // session is left on the engine.
    let session = sb.docker_backend().session().to_string();
    let left = Engine::Podman
        .cli()
        .args([
            "ps",
            "-a",
            "-q",
            "--filter",
            &format!("label=toolhost.session={session}"),
        ])
        .output()
        .expect("docker ps");
    assert!(
        left.status.success() && String::from_utf8_lossy(&left.stdout).trim().is_empty(),
        "{left:?}"
    );

    let mut cfg = docker_config(&image);
    Engine::Podman.configure(&mut cfg.docker);
    cfg.docker.runtime = Some("runc".into());
    let sb = t.sandbox(cfg);
    let r = dsh(&sb, "echo x > canary").await;
    assert!(r.success(), "{r:?}");
    assert!(t.ws().join("canary").exists());
}

/// The tool's stdin reaches it whole on Podman, ctrl-p ctrl-q included
/// (Podman's default detach keys, which would end the attach mid-call);
/// the twin without them, the same.
#[tokio::test]
async fn on_podman_stdin_with_the_detach_keys_reaches_the_tool() {
    let Some(image) = image_on(Engine::Podman) else {
        return;
    };
    let t = tmp();
    let mut cfg = docker_config(&image);
    Engine::Podman.configure(&mut cfg.docker);
    let sb = t.sandbox(cfg);
    for input in [&b"a\x10\x11b\nafter\n"[..], &b"ab\nafter\n"[..]] {
        let r = sb
            .run(
                RunRequest::new(["sh", "-c", "od -An -c | tr -s ' '; echo end"])
                    .stdin(input.to_vec()),
            )
            .await;
        assert!(r.success(), "{r:?}");
        let expected = if input.len() == 11 {
            " a 020 021 b \\n a f t e r \\n\nend\n"
        } else {
            " a b \\n a f t e r \\n\nend\n"
        };
        assert_eq!(r.stdout, expected, "{r:?}");
    }
}
