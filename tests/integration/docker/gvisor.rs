//! What stands in for the helper's mount check under gVisor (the gate of
//! `src/backend/docker/gate.rs`): gVisor shows no host inodes, so while a
//! call whose mounts a tool could redirect is set up, no other container of
//! the sandbox exists.

use super::*;

/// A sandbox of the workspace and a read-only dir nested in it, `a/b`,
/// holding `canary` = INSIDE; `outside/b/canary` = OUTSIDE.
fn nested(t: &Tmp, image: &str, engine: Engine) -> (Sandbox, std::path::PathBuf) {
    let nested = t.ws().join("a/b");
    std::fs::create_dir_all(&nested).unwrap();
    std::fs::write(nested.join("canary"), "INSIDE").unwrap();
    std::fs::set_permissions(t.ws().join("a"), std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::create_dir_all(t.outside().join("b")).unwrap();
    std::fs::write(t.outside().join("b/canary"), "OUTSIDE").unwrap();
    let dirs = [
        toolhost::AllowedDirSpec::read_write(t.ws()),
        toolhost::AllowedDirSpec::read_only(&nested),
    ];
    let mut cfg = docker_config_on(image, engine);
    // Calls wait at the gate out of their own time.
    cfg.timeout = Duration::from_secs(20);
    (Sandbox::new(dirs, cfg).unwrap(), nested)
}

/// Two calls at once: the first waits up to about 2 s for a file the
/// second makes (`met`), else ends alone.
async fn side_by_side(sb: &Sandbox) -> (RunOutput, RunOutput) {
    tokio::join!(
        dsh(
            sb,
            "i=0; while [ ! -e go ] && [ $i -lt 40 ]; do sleep 0.05; i=$((i+1)); done; [ -e go ] && echo met || echo alone"
        ),
        async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            dsh(sb, "touch go; echo made").await
        }
    )
}

/// Under gVisor, calls whose mounts a tool could redirect (a read-only dir
/// nested in the writable workspace) do not run side by side: the first
/// call never sees the second's file, which is made only once it is gone.
/// Allowed twins: the same calls overlap under gVisor when nothing is
/// nested, and under runc, whose helper checks the mounts' inodes.
#[tokio::test]
async fn under_gvisor_calls_with_a_redirectable_mount_run_one_at_a_time() {
    let Some(image) = image_on(Engine::Runsc) else {
        return;
    };
    let t = tmp();
    let (sb, _) = nested(&t, &image, Engine::Runsc);
    let (first, second) = side_by_side(&sb).await;
    assert_eq!(first.stdout, "alone\n", "{first:?}");
    assert_eq!(second.stdout, "made\n", "{second:?}");
    std::fs::remove_file(t.ws().join("go")).unwrap();
    // Nothing nested: side by side.
    let plain = tmp();
    let sb = plain.sandbox(docker_config_on(&image, Engine::Runsc));
    let (first, second) = side_by_side(&sb).await;
    assert_eq!(first.stdout, "met\n", "{first:?}");
    assert_eq!(second.stdout, "made\n", "{second:?}");
    // runc: side by side, nested or not.
    let Some(image) = image_on(Engine::Runc) else {
        return;
    };
    let (sb, _) = nested(&t, &image, Engine::Runc);
    let (first, second) = side_by_side(&sb).await;
    assert_eq!(first.stdout, "met\n", "{first:?}");
    assert_eq!(second.stdout, "made\n", "{second:?}");
}

/// The race the gate closes: one call keeps swapping the nested dir's
/// parent for a symlink to the outside and back while others start; the
/// engine resolves mount sources by path when it starts a container, so
/// without the gate one of them could get `outside/b` mounted at `a/b`.
/// Under gVisor none reads OUTSIDE; each reads INSIDE or is refused (the
/// swap left in place). Control: the swapping call ran and swapped.
#[tokio::test]
async fn under_gvisor_a_swapped_parent_never_gets_the_outside_mounted() {
    let Some(image) = image_on(Engine::Runsc) else {
        return;
    };
    let t = tmp();
    let (sb, _) = nested(&t, &image, Engine::Runsc);
    let sb = std::sync::Arc::new(sb);
    let swap = format!(
        "cd {ws}; n=0; end=$(( $(date +%s) + 2 )); while [ $(date +%s) -lt $end ]; do mv a a.x && ln -s {out} a && n=$((n+1)); rm a; mv a.x a; done; echo swaps=$n",
        ws = t.ws().display(),
        out = t.outside().display()
    );
    let swapper = {
        let sb = sb.clone();
        tokio::spawn(async move { dsh(&sb, &swap).await })
    };
    let mut readers = Vec::new();
    for i in 0..6 {
        let sb = sb.clone();
        readers.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(150 * i)).await;
            dsh(&sb, "cat a/b/canary").await
        }));
    }
    let swapped = swapper.await.unwrap();
    let swaps: u32 = swapped
        .stdout
        .trim()
        .strip_prefix("swaps=")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(swaps > 0, "the swapping call never swapped: {swapped:?}");
    for r in readers {
        let r = r.await.unwrap();
        assert!(
            !r.stdout.contains("OUTSIDE"),
            "the outside was mounted: {r:?}"
        );
        assert!(
            r.stdout == "INSIDE" || r.outcome.kind == OutcomeKind::PermissionDenied,
            "{r:?}"
        );
    }
}

/// The gate keeps out only the sandbox's own tools. Another writer (here
/// this process, as another sandbox or the host could be) keeps swapping
/// the protected `.git` for a symlink to an outside repository and back
/// while calls start: no call reads the outside one; each reads the
/// workspace's or fails. Each swap is one `renameat2(RENAME_EXCHANGE)`, so
/// `.git` is never missing. After a call, what is at `.git` must be what
/// the call's look found there: a mount holds a file, not a name, and a
/// writer outside the call could have put anything in its place (the call
/// too, once the held one was moved away). So when a call ends mid-swap,
/// what is at `.git` then is moved aside, and the writer, finding its
/// names gone, stops. The helper's ctime check is best effort against
/// such a writer (docs/src/docker.md#runtimes-gvisor), and this engine did
/// not mount the outside in these races even without it: the test guards
/// the outcome, not that check. Control: the swaps happened, and with them
/// stopped and `.git` made again the calls read it.
#[tokio::test]
async fn under_gvisor_a_mount_swapped_by_another_writer_is_refused() {
    let Some(image) = image_on(Engine::Runsc) else {
        return;
    };
    let t = tmp();
    let git = t.ws().join(".git");
    let make_git = || {
        std::fs::create_dir_all(&git).unwrap();
        std::fs::write(git.join("config"), "INSIDE").unwrap();
    };
    make_git();
    let repo = t.outside().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(repo.join("config"), "OUTSIDE").unwrap();
    let sb = t.sandbox(docker_config_on(&image, Engine::Runsc));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // The symlink out waits beside `.git`, and trades places with it.
    std::os::unix::fs::symlink(&repo, t.ws().join(".git.alt")).unwrap();
    let swapper = {
        let (stop, ws) = (stop.clone(), t.ws());
        std::thread::spawn(move || {
            use rustix::fs::{CWD, RenameFlags, renameat_with};
            let (git, alt) = (ws.join(".git"), ws.join(".git.alt"));
            let exchange = || renameat_with(CWD, &git, CWD, &alt, RenameFlags::EXCHANGE);
            let mut swaps = 0u32;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                // A name moved aside after a call ends the swaps.
                if exchange().is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(2));
                if exchange().is_err() {
                    break;
                }
                swaps += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
            swaps
        })
    };
    let mut results = Vec::new();
    for _ in 0..8 {
        results.push(dsh(&sb, "cat .git/config").await);
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let swaps = swapper.join().unwrap();
    assert!(swaps > 0, "no swap happened");
    for r in &results {
        assert!(
            !r.stdout.contains("OUTSIDE"),
            "the outside was mounted: {r:?}"
        );
        assert!(r.stdout == "INSIDE" || !r.success(), "{r:?}");
    }
    // The outside repository is whole, wherever its link went.
    assert_eq!(
        std::fs::read_to_string(repo.join("config")).unwrap(),
        "OUTSIDE"
    );
    for e in std::fs::read_dir(t.ws()).unwrap() {
        let p = e.unwrap().path();
        if std::fs::symlink_metadata(&p)
            .unwrap()
            .file_type()
            .is_symlink()
        {
            std::fs::remove_file(&p).unwrap();
        }
    }
    if std::fs::symlink_metadata(&git).is_err() {
        make_git();
    }
    let r = dsh(&sb, "cat .git/config").await;
    assert_eq!(r.stdout, "INSIDE", "{r:?}");
}

/// A held dir taken away by a writer outside the gate does not come back
/// changed. A `direct` call (no gate) makes `.git`; a gVisor call starts
/// with it there and holds it; the direct call renames it to `moved`, puts
/// a hook in it and ends. The gVisor call cannot rename `moved` back to
/// `.git` (the mount followed the dir, and a mount point cannot be moved
/// in the namespace that has it), so no `.git` with the hook appears, and
/// the walk after the call has nothing to miss (it would see the same dir).
/// Allowed twin, in the same call: renaming a dir of its own works.
#[tokio::test]
async fn under_gvisor_a_held_dir_moved_away_by_another_writer_cannot_come_back() {
    let Some(image) = image_on(Engine::Runsc) else {
        return;
    };
    let t = tmp();
    let ws = t.ws();
    let mut cfg = docker_config_on(&image, Engine::Runsc);
    cfg.timeout = Duration::from_secs(30);
    let gvisor = t.sandbox(cfg);
    let direct = t.sandbox(SandboxConfig {
        timeout: Duration::from_secs(30),
        ..SandboxConfig::default()
    });
    let a = "mkdir .git && i=0; while [ ! -e b-started ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; mv .git moved && mkdir moved/hooks && echo EVIL > moved/hooks/post-checkout && echo renamed";
    let b = "touch b-started; i=0; while [ ! -e a-done ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; mv moved .git; echo back=$?; mkdir mine && mv mine mine2; echo twin=$?";
    let git = ws.join(".git");
    let (ra, rb) = tokio::join!(
        async {
            let r = direct.run(RunRequest::new(["sh", "-c", a])).await;
            std::fs::write(ws.join("a-done"), "").unwrap();
            r
        },
        async {
            for _ in 0..400 {
                if git.exists() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            assert!(git.exists(), "the direct call made no .git");
            gvisor.run(RunRequest::new(["sh", "-c", b])).await
        }
    );
    // Control: the other writer moved the held dir and wrote into it.
    assert_eq!(ra.stdout, "renamed\n", "{ra:?}");
    assert_eq!(
        std::fs::read_to_string(ws.join("moved/hooks/post-checkout")).unwrap(),
        "EVIL\n"
    );
    // Denied: it did not come back as `.git`: `moved` is busy (a mount
    // point in the call's namespace).
    assert!(rb.stdout.starts_with("back=1\n"), "{rb:?}");
    assert!(
        rb.stderr
            .contains("can't rename 'moved': Device or resource busy"),
        "{rb:?}"
    );
    assert!(std::fs::symlink_metadata(&git).is_err(), "{rb:?}");
    // Allowed twin.
    assert!(rb.stdout.ends_with("twin=0\n"), "{rb:?}");
    assert!(ws.join("mine2").is_dir());
}
