//! Special files (attack 10): FIFOs, devices and sockets a guest tries to open.

use super::*;

// Unix only: FIFOs
#[cfg(unix)]
/// Contract case 10 through the CLI: a guest's open of a FIFO with no writer is
/// refused at once (before, it blocked a host thread in open(2), the call ran
/// into its timeout and `toolhost run` hung after printing its result).
/// Control: the same guest reads a plain file.
#[test]
fn a_guest_opening_a_fifo_through_the_cli_is_refused_and_the_cli_exits() {
    let t = Tmp::new();
    std::fs::copy(probe_path(), t.ws().join("probe.wasm")).unwrap();
    let fifo = std::ffi::CString::new(t.ws().join("fifo").to_string_lossy().as_bytes()).unwrap();
    // SAFETY: mkfifo with a valid path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    std::fs::write(t.ws().join("plain.txt"), "plain").unwrap();
    let run = |file: &str| {
        let mut child = std::process::Command::new(toolhost_bin())
            .args([
                "run",
                "--backend",
                "wasm",
                "--timeout",
                "10",
                "--",
                "./probe.wasm",
                "read",
                file,
            ])
            .current_dir(t.ws())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .env_remove("TOOLHOST_CONFIG")
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                let mut out = String::new();
                std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut out).unwrap();
                return (status.code(), out);
            }
            if std::time::Instant::now() > deadline {
                child.kill().unwrap();
                child.wait().unwrap();
                panic!("toolhost run did not exit (reading {file})");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    assert_eq!(
        run("fifo"),
        (
            Some(3),
            "ERR Operation not permitted (os error 63)\n".to_string()
        )
    );
    assert_eq!(run("plain.txt"), (Some(0), "plain".to_string()));
    // A tool file that is a FIFO is refused at once (its open used to block
    // the CLI's only executor thread).
    mkfifo(&t.ws().join("fifo.wasm"));
    let out = toolhost(
        &t.ws(),
        &[
            "run",
            "--backend",
            "wasm",
            "--timeout",
            "10",
            "--",
            "./fifo.wasm",
        ],
        &[],
    );
    assert_ne!(out.status.code(), Some(124), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("not a regular file")
            || String::from_utf8_lossy(&out.stderr).contains("not a regular file"),
        "{out:?}"
    );
}

// Unix only: FIFOs
#[cfg(unix)]
pub(crate) fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.to_string_lossy().as_bytes()).unwrap();
    // SAFETY: mkfifo with a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "{path:?}");
}

/// A guest's call on the probe, preview 1 or preview 2.
pub(super) async fn probe_either(sb: &Sandbox, p2: bool, args: &[&str]) -> RunOutput {
    if p2 {
        probe2(sb, args).await
    } else {
        probe(sb, args).await
    }
}

pub(super) const EPERM: &str = "ERR Operation not permitted (os error 63)\n";

/// Skips the check before opening while alive (tests of the watchdog and of
/// the check after opening); hold `FIFO_TESTS` meanwhile.
pub(crate) struct SkipPrecheck;

impl SkipPrecheck {
    pub(crate) fn new() -> Self {
        toolhost::backend::wasm::skip_special_file_precheck(true);
        SkipPrecheck
    }
}

impl Drop for SkipPrecheck {
    fn drop(&mut self) {
        toolhost::backend::wasm::skip_special_file_precheck(false);
    }
}

// Unix only: FIFOs and device nodes; Windows's reserved names are in windows.rs
#[cfg(unix)]
/// Attack 10 (special files), preview 1 and preview 2. A FIFO with no writer
/// (read, created for writing, through a symlink, its times set by path,
/// which wasmtime-wasi does by opening it), a FIFO with a writer, a unix
/// socket and, as root, a character device node (/dev/zero's numbers) are
/// refused with EPERM by the check before opening: nothing waits and the
/// watchdog interrupts nothing. With that check skipped, each open reaches the
/// kernel: the FIFO waits are ended by the watchdog (its counter rises by one
/// per wait at least) and refused, far inside the call's timeout, and what
/// opens at once (the FIFO with a writer, the device) is refused after the
/// open; the guest never holds one. No thread of this process is left
/// waiting. Control: a plain file, and a symlink to it, read and touched.
#[tokio::test]
async fn attack_10_a_guest_never_holds_or_waits_on_a_special_file() {
    let _counter = FIFO_TESTS.lock().await;
    let (t, sb) = setup_p2(SandboxConfig {
        timeout: Duration::from_secs(20),
        ..wasm_config()
    });
    mkfifo(&t.ws().join("fifo"));
    std::os::unix::fs::symlink("fifo", t.ws().join("to-fifo")).unwrap();
    mkfifo(&t.ws().join("fifo-w"));
    let _writer = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(t.ws().join("fifo-w"))
        .unwrap();
    let _sock = std::os::unix::net::UnixListener::bind(t.ws().join("sock")).unwrap();
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if root {
        let c = std::ffi::CString::new(t.ws().join("zero").to_string_lossy().as_bytes()).unwrap();
        // SAFETY: mknod with a valid C string: /dev/zero's numbers (1, 5).
        let rc = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o644, libc::makedev(1, 5)) };
        assert_eq!(rc, 0, "mknod as root");
    }
    t.write("plain.txt", "plain");
    std::os::unix::fs::symlink("plain.txt", t.ws().join("to-plain")).unwrap();
    let waits: [&[&str]; 4] = [
        &["read", "fifo"],
        &["read", "to-fifo"],
        &["write", "fifo", "10"],
        &["touch", "fifo"],
    ];
    let refused = |args: &[&str]| {
        if args[0] == "write" {
            "ERR open Operation not permitted (os error 63)\n"
        } else {
            EPERM
        }
    };
    let by_preopen = toolhost::backend::wasm::special_files_refused_by_preopen_lookup();
    for skip in [false, true] {
        let _skip = skip.then(SkipPrecheck::new);
        for (kind, p2) in [("p1", false), ("p2", true)] {
            let before = toolhost::backend::wasm::fifo_opens_interrupted();
            for args in waits {
                let r = probe_either(&sb, p2, args).await;
                assert_eq!(
                    r.outcome.kind,
                    OutcomeKind::Exited,
                    "{kind} {skip} {args:?}: {r:?}"
                );
                // Past the check, times are set by name, unfollowed, through
                // the protected-path walk (the workspace holds `.git` rules):
                // nothing opens the FIFO, so nothing waits.
                let want = if skip && args[0] == "touch" {
                    "touched\n"
                } else {
                    refused(args)
                };
                assert_eq!(r.stdout, want, "{kind} {skip} {args:?}: {r:?}");
            }
            let interrupted = toolhost::backend::wasm::fifo_opens_interrupted() - before;
            if skip {
                assert!(interrupted >= 3, "{kind}: {interrupted} waits interrupted");
            } else {
                assert_eq!(interrupted, 0, "{kind}: an open reached a FIFO");
            }
            let r = probe_either(&sb, p2, &["read", "fifo-w"]).await;
            assert_eq!(r.stdout, EPERM, "{kind} {skip} fifo with a writer: {r:?}");
            let r = probe_either(&sb, p2, &["opens", "fifo-w", "3"]).await;
            assert!(
                r.stdout.starts_with("ok 0 special 0 "),
                "{kind} {skip}: {r:?}"
            );
            let r = probe_either(&sb, p2, &["read", "sock"]).await;
            if skip {
                // It fails to open by itself (ENXIO).
                assert!(
                    r.stdout.starts_with("ERR ") && !r.success(),
                    "{kind} sock: {r:?}"
                );
            } else {
                assert_eq!(r.stdout, EPERM, "{kind} sock: {r:?}");
            }
            if root {
                let r = probe_either(&sb, p2, &["read", "zero"]).await;
                assert_eq!(r.stdout, EPERM, "{kind} {skip} char device: {r:?}");
            }
            for p in ["plain.txt", "to-plain"] {
                let r = probe_either(&sb, p2, &["read", p]).await;
                assert_eq!(
                    (r.stdout.as_str(), r.success()),
                    ("plain", true),
                    "{kind} {p}: {r:?}"
                );
            }
            let r = probe_either(&sb, p2, &["touch", "plain.txt"]).await;
            assert_eq!(r.stdout, "touched\n", "{kind}: {r:?}");
        }
    }
    assert_eq!(threads_waiting_on_a_fifo(), 0);
    // On a single-thread runtime no call runs its file operations inline,
    // so none was checked by toolhost's own (blocking) lookup: that would
    // run on the runtime's one thread.
    assert_eq!(
        toolhost::backend::wasm::special_files_refused_by_preopen_lookup() - by_preopen,
        0,
        "a lookup ran on the runtime's thread"
    );
    use std::os::unix::fs::FileTypeExt;
    assert!(
        std::fs::symlink_metadata(t.ws().join("fifo"))
            .unwrap()
            .file_type()
            .is_fifo()
    );
}

// Unix only: FIFOs
#[cfg(unix)]
/// Attack 10, a call dropped (cancelled) while its open of a FIFO waits,
/// before the watchdog's first look at 20 ms: the watchdog goes on after the
/// call, and no thread is left waiting. Preview 1 and preview 2.
#[tokio::test]
async fn attack_10_a_call_dropped_during_a_fifo_open_leaves_no_thread_waiting() {
    let _counter = FIFO_TESTS.lock().await;
    let _skip = SkipPrecheck::new();
    let (t, sb) = setup_p2(wasm_config());
    mkfifo(&t.ws().join("fifo"));
    let sb = std::sync::Arc::new(sb);
    for (kind, p2) in [("p1", false), ("p2", true)] {
        let before = toolhost::backend::wasm::fifo_opens_interrupted();
        let call = {
            let sb = sb.clone();
            tokio::spawn(async move { probe_either(&sb, p2, &["read", "fifo"]).await })
        };
        // Dropped as soon as its open waits.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while threads_waiting_now() == 0 && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        call.abort();
        let _ = call.await;
        assert_eq!(threads_waiting_on_a_fifo(), 0, "{kind}");
        assert!(
            toolhost::backend::wasm::fifo_opens_interrupted() > before,
            "{kind}: the open never waited"
        );
    }
}

// Unix only: FIFOs and setuid
#[cfg(unix)]
/// Attack 10 with toolhost not root (uid 65534 when the tests run as root):
/// toolhost makes itself non-dumpable by default (`protect_host_environ`), so
/// `/proc/self/task/*/syscall` is closed to it; the watchdog's self-test still
/// passes (`toolhost check`), and a guest's read of a FIFO and setting its
/// times are refused. Control: a plain file, through the same CLI as the same
/// user.
#[test]
fn attack_10_an_unprivileged_toolhost_ends_a_guest_waiting_on_a_fifo() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let t = Tmp::new();
    // SAFETY: geteuid, getuid and getgid have no preconditions.
    let (root, uid, gid) = unsafe { (libc::geteuid() == 0, libc::getuid(), libc::getgid()) };
    let (uid, gid) = if root { (65534, 65534) } else { (uid, gid) };
    std::fs::set_permissions(&t.root, std::fs::Permissions::from_mode(0o755)).unwrap();
    let home = t.root.join("home");
    std::fs::create_dir(&home).unwrap();
    std::fs::copy(probe_path(), t.ws().join("probe.wasm")).unwrap();
    mkfifo(&t.ws().join("fifo"));
    t.write("plain.txt", "plain");
    for p in [
        t.ws(),
        home.clone(),
        t.ws().join("fifo"),
        t.ws().join("plain.txt"),
    ] {
        std::os::unix::fs::chown(&p, Some(uid), Some(gid)).unwrap();
    }
    let cli = |args: &[&str]| {
        let mut cmd = std::process::Command::new(toolhost_bin());
        cmd.args(args)
            .current_dir(t.ws())
            .stdin(std::process::Stdio::null())
            .env_remove("TOOLHOST_CONFIG")
            .env_remove("TOOLHOST_LOG")
            .env("HOME", &home)
            .env("XDG_CACHE_HOME", home.join(".cache"));
        if root {
            cmd.uid(uid).gid(gid);
        }
        cmd.output().unwrap()
    };
    // The watchdog works for this user in a non-dumpable process: `toolhost
    // check` waits for its self-test (a thread blocked on a private FIFO, seen
    // through /proc and interrupted).
    let out = cli(&["check", "--json", "--backend", "wasm"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "special files")
        .cloned();
    assert_eq!(row.map(|r| r["status"].clone()), Some("ok".into()), "{v}");
    let run = |args: &[&str]| {
        let mut cmd = std::process::Command::new(toolhost_bin());
        cmd.args([
            "run",
            "--backend",
            "wasm",
            "--timeout",
            "10",
            "--",
            "./probe.wasm",
        ])
        .args(args)
        .current_dir(t.ws())
        .stdin(std::process::Stdio::null())
        .env_remove("TOOLHOST_CONFIG")
        .env_remove("TOOLHOST_LOG")
        .env("HOME", &home)
        .env("XDG_CACHE_HOME", home.join(".cache"));
        if root {
            cmd.uid(uid).gid(gid);
        }
        let out = cmd.output().unwrap();
        // The watchdog was available (not the fallback, which warns).
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("watchdog is unavailable"), "{stderr}");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    assert_eq!(run(&["read", "fifo"]), (Some(3), EPERM.to_string()));
    assert_eq!(run(&["touch", "fifo"]), (Some(3), EPERM.to_string()));
    assert_eq!(run(&["read", "plain.txt"]), (Some(0), "plain".to_string()));
    assert_eq!(
        run(&["touch", "plain.txt"]),
        (Some(0), "touched\n".to_string())
    );
}

// Unix only: FIFOs
#[cfg(unix)]
/// Attack 10 under a race: another thread swaps the path a guest opens in a
/// loop between a regular file and a FIFO (a third with a writer, a third
/// removed again at once, so that no path leads to it), while the guest opens
/// it hundreds of times. Every call ends by itself, the guest never holds a
/// special file, every failed open is EPERM (or the path missing for a
/// moment), and no thread is left waiting. Preview 1 and preview 2.
#[tokio::test]
async fn attack_10_a_fifo_swapped_in_under_the_guest_never_holds_a_thread() {
    let _counter = FIFO_TESTS.lock().await;
    let (t, sb) = setup_p2(SandboxConfig {
        timeout: Duration::from_secs(60),
        ..wasm_config()
    });
    t.write("target", "file");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (ws, stop) = (t.ws(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                i += 1;
                mkfifo(&ws.join("f.new"));
                let _writer = (i % 3 == 1).then(|| {
                    std::fs::OpenOptions::new()
                        .read(true)
                        .write(true)
                        .open(ws.join("f.new"))
                        .unwrap()
                });
                std::fs::rename(ws.join("f.new"), ws.join("target")).unwrap();
                std::thread::sleep(Duration::from_micros(200));
                if i.is_multiple_of(3) {
                    std::fs::remove_file(ws.join("target")).unwrap();
                }
                std::fs::write(ws.join("r.new"), "file").unwrap();
                std::fs::rename(ws.join("r.new"), ws.join("target")).unwrap();
                std::thread::sleep(Duration::from_micros(200));
            }
        })
    };
    for (kind, p2) in [("p1", false), ("p2", true)] {
        let (mut ok, mut refused, mut rounds) = (0, 0, 0);
        // At least 3 rounds, and more (for up to 60 s) until the race has
        // gone both ways: on a loaded machine (CI runs the suite in
        // parallel on 2 cores) the swapper may lag for a while.
        let until = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            if rounds >= 3 && ok > 0 && refused > 0 || std::time::Instant::now() > until {
                break;
            }
            rounds += 1;
            let r = probe_either(&sb, p2, &["opens", "target", "100"]).await;
            assert!(r.success(), "{kind}: {r:?}");
            assert!(r.stdout.contains(" special 0 "), "{kind}: {r:?}");
            let errors = r.stdout.split_once("errors ").map(|(_, e)| e).unwrap_or("");
            for e in errors
                .trim()
                .trim_matches(|c| c == '{' || c == '}')
                .split(", ")
            {
                assert!(
                    e.is_empty()
                        || e.starts_with("\"Operation not permitted (os error 63)\"")
                        || e.starts_with("\"No such file or directory"),
                    "{kind}: {e} in {r:?}"
                );
                refused += usize::from(e.contains("not permitted"));
            }
            ok += usize::from(!r.stdout.starts_with("ok 0 "));
        }
        assert!(
            ok > 0 && refused > 0,
            "{kind}: the race did not run both ways in {rounds} rounds: {ok} with an open, {refused} refusals"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    swapper.join().unwrap();
    assert_eq!(threads_waiting_on_a_fifo(), 0);
}

// Unix only: FIFOs
#[cfg(unix)]
/// Attack 10 from a cwd below the allowed dir: that call's preopens are its
/// own, not the sandbox's shared ones, so the check before an open is
/// wasmtime-wasi's lookup, not toolhost's on a shared preopen's dir. A FIFO
/// (by name, by a symlink, by `..` from a deeper dir) is still refused
/// before any open, and a file beside it still read.
#[tokio::test]
async fn attack_10_a_fifo_is_refused_from_a_cwd_below_the_allowed_dir() {
    let _counter = FIFO_TESTS.lock().await;
    let (t, sb) = setup(SandboxConfig {
        timeout: Duration::from_secs(20),
        ..wasm_config()
    });
    std::fs::create_dir_all(t.ws().join("sub/deeper")).unwrap();
    mkfifo(&t.ws().join("sub/fifo"));
    std::os::unix::fs::symlink("fifo", t.ws().join("sub/to-fifo")).unwrap();
    t.write("sub/plain.txt", "plain");
    std::fs::copy(probe_path(), t.ws().join("sub/probe.wasm")).unwrap();
    let before = toolhost::backend::wasm::fifo_opens_interrupted();
    let run = |args: &[&str]| {
        let mut argv = vec!["./probe.wasm"];
        argv.extend_from_slice(args);
        sb.run(RunRequest::new(argv).cwd(t.ws().join("sub")))
    };
    for p in ["fifo", "to-fifo", "deeper/../fifo"] {
        let r = run(&["read", p]).await;
        assert_eq!(r.stdout, EPERM, "{p}: {r:?}");
    }
    let r = run(&["read", "plain.txt"]).await;
    assert_eq!((r.stdout.as_str(), r.success()), ("plain", true), "{r:?}");
    assert_eq!(
        toolhost::backend::wasm::fifo_opens_interrupted() - before,
        0,
        "an open reached the FIFO"
    );
}

// Linux only: inline file operations (the FIFO watchdog's self-test)
#[cfg(target_os = "linux")]
/// Attack 10 under two allowed dirs, on a multi-thread runtime (file
/// operations inline, so the check before an open is toolhost's own lookup
/// on the shared preopen's dir): a FIFO in the second dir, opened by its
/// path there, is refused before any open, although the first dir (and
/// the cwd) holds a plain file of the same name, which a lookup in the
/// wrong dir would find and let through to the FIFO's open (where the
/// watchdog would have to interrupt it). The plain file is still read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attack_10_a_fifo_in_a_second_allowed_dir_is_refused_before_its_open() {
    let _counter = FIFO_TESTS.lock().await;
    // Inline file operations wait for the watchdog's self-test.
    assert!(toolhost::backend::wasm::fifo_watchdog_available());
    let t = Tmp::new();
    std::fs::copy(probe_path(), t.ws().join("probe.wasm")).unwrap();
    let other_dir = tempfile::tempdir().unwrap();
    let other = other_dir.path().canonicalize().unwrap();
    mkfifo(&other.join("fifo"));
    t.write("fifo", "plain");
    let sb = Sandbox::new(
        [t.ws(), other.clone()],
        SandboxConfig {
            timeout: Duration::from_secs(20),
            ..wasm_config()
        },
    )
    .unwrap();
    let before = toolhost::backend::wasm::fifo_opens_interrupted();
    let by_preopen = toolhost::backend::wasm::special_files_refused_by_preopen_lookup();
    let in_other = other.join("fifo");
    let in_other = in_other.to_str().unwrap();
    for _ in 0..3 {
        let r = probe(&sb, &["read", in_other]).await;
        assert_eq!(r.stdout, EPERM, "{r:?}");
        let r = probe(&sb, &["read", "fifo"]).await;
        assert_eq!((r.stdout.as_str(), r.success()), ("plain", true), "{r:?}");
    }
    assert_eq!(
        toolhost::backend::wasm::fifo_opens_interrupted() - before,
        0,
        "an open reached the FIFO"
    );
    let refused = toolhost::backend::wasm::special_files_refused_by_preopen_lookup() - by_preopen;
    // Exactly this test's: every other test of an in-process guest's
    // special files holds `FIFO_TESTS`.
    assert_eq!(refused, 3, "refused by the preopen lookup");
}
