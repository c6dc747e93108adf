//! Who the tool runs as, set-ID files, the helper's mount checks.

use super::*;

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
pub(super) const USERNS_ENGINE: &str = "unix:///run/toolhost-userns-docker.sock";

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
