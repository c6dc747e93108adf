//! WASI preview-3 command components (`wasi:cli/run@0.3.0`) on the wasm
//! backend, held to the limits of preview 1 and 2: CPU (epoch and fuel),
//! memory, the file budget, no sockets, the timeout, special files and
//! protected paths. The guest is `probe-p3` (guest-tools/p3-guests), built by
//! build.rs; every file command names a preopen (`.`, `/`, ...) and a path.

use std::path::{Path, PathBuf};
use std::time::Duration;

use toolhost::config::CpuMeter;
use toolhost::{AllowedDirSpec, OutcomeKind, RunOutput, RunRequest, Sandbox, SandboxConfig};

use crate::util::*;
#[cfg(unix)]
use crate::wasm::{SkipPrecheck, climbing_links, mkfifo, unprotected};
use crate::wasm::{setup, wasm_config};

pub(crate) fn probe_p3_path() -> PathBuf {
    let p = Path::new(env!("TOOLHOST_BUILD_GUEST_TESTS")).join("probe-p3.wasm");
    assert!(p.exists(), "{} is missing: build.rs builds it", p.display());
    p
}

/// A workspace with `probe3.wasm` in it, and a wasm sandbox on it.
fn setup_p3(config: SandboxConfig) -> (Tmp, Sandbox) {
    let (t, sb) = setup(config);
    std::fs::copy(probe_p3_path(), t.ws().join("probe3.wasm")).unwrap();
    (t, sb)
}

async fn probe3(sb: &Sandbox, args: &[&str]) -> RunOutput {
    probe3_in(sb, args, None).await
}

async fn probe3_in(sb: &Sandbox, args: &[&str], cwd: Option<PathBuf>) -> RunOutput {
    let mut argv = vec!["./probe3.wasm"];
    argv.extend_from_slice(args);
    let mut req = RunRequest::new(argv);
    if let Some(c) = cwd {
        req = req.cwd(c);
    }
    sb.run(req).await
}

fn mtime(p: &Path) -> std::time::SystemTime {
    std::fs::symlink_metadata(p).unwrap().modified().unwrap()
}

#[tokio::test]
async fn preview3_commands_see_exactly_their_args_env_and_preopens() {
    let mut cfg = wasm_config();
    cfg.env_allowlist = vec![];
    let (t, sb) = setup_p3(cfg.clone());
    let bytes = std::fs::read(t.ws().join("probe3.wasm")).unwrap();
    assert_eq!(
        toolhost::backend::wasm::registry::wasi_preview(&bytes),
        "p3"
    );
    let p2 = std::fs::read(Path::new(env!("TOOLHOST_BUILD_GUEST_TESTS")).join("probe-p2.wasm"));
    assert_eq!(
        toolhost::backend::wasm::registry::wasi_preview(&p2.unwrap()),
        "p2"
    );
    let p1 = std::fs::read(Path::new(env!("TOOLHOST_BUILD_GUEST_TESTS")).join("probe.wasm"));
    assert_eq!(
        toolhost::backend::wasm::registry::wasi_preview(&p1.unwrap()),
        "p1"
    );

    let r = probe3(&sb, &["hello"]).await;
    assert_eq!(
        (r.stdout.as_str(), r.returncode),
        ("hello from p3\n", Some(0)),
        "{r:?}"
    );
    let r = probe3(&sb, &["args", "a b", "ü"]).await;
    assert_eq!(r.stdout, "a b\nü\n", "{r:?}");
    // Exactly the given environment: none allowlisted, one set by the call.
    let r = sb
        .run(RunRequest::new(["./probe3.wasm", "env"]).env("FOO", "bar"))
        .await;
    assert_eq!(r.stdout, "FOO=bar\nend\n", "{r:?}");
    let r = probe3(&sb, &["env"]).await;
    assert_eq!(r.stdout, "end\n", "{r:?}");
    // Exit status: exit-with-code carries the number.
    let r = probe3(&sb, &["exit", "7"]).await;
    assert_eq!(
        (r.returncode, r.outcome.kind),
        (Some(7), OutcomeKind::Exited),
        "{r:?}"
    );
    let r = probe3(&sb, &["bogus"]).await;
    assert_eq!(
        (r.stdout.as_str(), r.returncode),
        ("usage\n", Some(1)),
        "{r:?}"
    );
    // Preopens: the allowed dir at its path and the cwd as `.`; with the dir
    // mapped to `/`, that alone.
    let r = probe3(&sb, &["preopens"]).await;
    assert_eq!(r.stdout, format!("{}\n.\nend\n", t.ws().display()), "{r:?}");
    let mapped = Sandbox::new([AllowedDirSpec::read_write(t.ws()).at("/")], cfg).unwrap();
    let r = probe3(&mapped, &["preopens"]).await;
    assert_eq!(r.stdout, "/\nend\n", "{r:?}");
    t.write("inside.txt", "inside");
    let r = probe3(&mapped, &["read", "/", "inside.txt"]).await;
    assert_eq!(r.stdout, "ok inside\n", "{r:?}");
    // Attacks 1-3: nothing outside the preopens.
    for p in ["../outside/secret.txt", "../../etc/passwd"] {
        let r = probe3(&sb, &["read", ".", p]).await;
        assert!(
            !r.stdout.contains(CANARY) && !r.stdout.contains("root:") && r.returncode == Some(1),
            "{p}: {r:?}"
        );
    }
    // `toolhost tools` says which preview each tool is.
    let cfg_file = t.root.join("tools.toml");
    std::fs::write(
        &cfg_file,
        format!("[wasm]\ntool_dirs = [{:?}]\n", t.ws().display().to_string()),
    )
    .unwrap();
    let out = toolhost(
        &t.ws(),
        &["tools", "--json", "--config", cfg_file.to_str().unwrap()],
        &[],
    );
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let wasi = |name: &str| {
        v.as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .map(|t| t["wasi"].clone())
    };
    assert_eq!(wasi("probe3"), Some(serde_json::json!("p3")), "{v}");
    assert_eq!(wasi("cat"), Some(serde_json::json!("p1")), "{v}");
    let out = toolhost(
        &t.ws(),
        &["tools", "--config", cfg_file.to_str().unwrap()],
        &[],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l.starts_with("probe3 ") && l.contains("[p3]")),
        "{text}"
    );
    let out = toolhost(&t.ws(), &["check", "--backend", "wasm"], &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l.contains("wasi versions") && l.contains("p3 command components")),
        "{text}"
    );
}

#[tokio::test]
async fn preview3_memory_cpu_and_timeout_limits() {
    let (_t, sb) = setup_p3(SandboxConfig {
        max_memory_mb: 64,
        max_cpu_seconds: 1,
        ..wasm_config()
    });
    // Attack 17: memory bomb; the allowed twin allocates under the limit.
    let r = probe3(&sb, &["alloc", "1000"]).await;
    assert_eq!(r.outcome.kind, OutcomeKind::MemoryLimit, "{r:?}");
    let r = probe3(&sb, &["alloc", "16"]).await;
    assert_eq!(r.stdout, "ok\n", "{r:?}");
    // CPU: epoch ticks end a spinning guest; fuel too.
    let r = probe3(&sb, &["spin"]).await;
    assert_eq!(r.outcome.kind, OutcomeKind::CpuLimit, "{r:?}");
    let mut fuel = SandboxConfig {
        max_cpu_seconds: 1,
        ..wasm_config()
    };
    fuel.wasm.cpu_meter = CpuMeter::Fuel;
    let (_t2, fsb) = setup_p3(fuel);
    let r = probe3(&fsb, &["spin"]).await;
    assert_eq!(r.outcome.kind, OutcomeKind::CpuLimit, "fuel: {r:?}");
    let r = probe3(&fsb, &["hello"]).await;
    assert!(r.success(), "fuel: {r:?}");
    // The wall clock ends a guest waiting inside a host call (an async
    // wait-for) and one spinning with no CPU limit.
    let (_t3, tsb) = setup_p3(SandboxConfig {
        timeout: Duration::from_secs(1),
        max_cpu_seconds: 0,
        ..wasm_config()
    });
    for args in [&["sleep", "30000"][..], &["spin"]] {
        let r = probe3(&tsb, args).await;
        assert!(
            r.timed_out
                && r.outcome.kind == OutcomeKind::TimedOut
                && r.duration < Duration::from_secs(4),
            "{args:?}: {r:?}"
        );
    }
    let r = probe3(&tsb, &["sleep", "10"]).await;
    assert_eq!(r.stdout, "ok\n", "{r:?}");
}

#[tokio::test]
async fn preview3_file_writes_are_held_to_the_budget() {
    let (t, sb) = setup_p3(SandboxConfig {
        max_file_size_mb: 1,
        ..wasm_config()
    });
    let size = |rel: &str| std::fs::metadata(t.ws().join(rel)).unwrap().len();
    // Attack 20: one stream past the limit; the allowed twin is exact.
    let r = probe3(&sb, &["write", ".", "big", "5000000"]).await;
    assert_eq!(r.outcome.kind, OutcomeKind::FileSizeLimit, "{r:?}");
    assert!(r.stdout.starts_with("err file-too-large"), "{r:?}");
    assert!(size("big") <= 1 << 20, "{}", size("big"));
    let r = probe3(&sb, &["write", ".", "small", "500000"]).await;
    assert_eq!(
        (r.stdout.as_str(), r.success()),
        ("ok 500000\n", true),
        "{r:?}"
    );
    assert_eq!(size("small"), 500000);
    // An append stream starts at the end: 500000 + 600000 > 1 MiB. The
    // chunk that would cross the limit is refused (those before it stay).
    let r = probe3(&sb, &["append", ".", "small", "600000"]).await;
    assert_eq!(r.outcome.kind, OutcomeKind::FileSizeLimit, "{r:?}");
    let grown = size("small");
    assert!((500000..=1 << 20).contains(&grown), "{grown}");
    let r = probe3(&sb, &["append", ".", "small", "1000"]).await;
    assert_eq!(r.stdout, "ok 1000\n", "{r:?}");
    assert_eq!(size("small"), grown + 1000);
    // set-size: a sparse giant is refused, a shrink is not.
    let r = probe3(&sb, &["setsize", ".", "small", "100000000000"]).await;
    assert_eq!(r.outcome.kind, OutcomeKind::FileSizeLimit, "{r:?}");
    assert_eq!(size("small"), grown + 1000);
    let r = probe3(&sb, &["setsize", ".", "small", "10"]).await;
    assert!(r.success(), "{r:?}");
    assert_eq!(size("small"), 10);
    // The budget is per call: each new call gets a whole one.
    for f in ["a", "b"] {
        let r = probe3(&sb, &["write", ".", f, "600000"]).await;
        assert_eq!(r.stdout, "ok 600000\n", "{f}: {r:?}");
    }
}

/// Attacks 28, 29, 31: p3 has socket interfaces; none is created and nothing
/// reaches a listener on loopback, which the host itself can reach.
#[tokio::test]
async fn preview3_has_no_sockets() {
    let (_t, sb) = setup_p3(wasm_config());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let r = probe3(&sb, &["connect", &addr]).await;
    assert_eq!(
        (r.stdout.as_str(), r.returncode),
        ("err access-denied\n", Some(1)),
        "{r:?}"
    );
    let err = listener.accept().map(|_| ()).unwrap_err();
    assert_eq!(
        err.kind(),
        std::io::ErrorKind::WouldBlock,
        "a connection arrived"
    );
    // Control: the address is reachable from the host.
    let _c = std::net::TcpStream::connect(&addr).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert!(listener.accept().is_ok());
}

// Unix only: FIFOs
#[cfg(unix)]
/// Attack 10 for preview 3: a FIFO with no writer (opened, read, created for
/// writing, its times set by path), one through a symlink, a FIFO with a
/// writer and a unix socket are refused with `not-permitted`; with the check
/// before opening skipped, the watchdog ends each wait and the check after
/// opening refuses what opened. No thread is left waiting. Control: a plain
/// file and a symlink to it.
#[tokio::test]
async fn preview3_never_holds_or_waits_on_a_special_file() {
    let _counter = FIFO_TESTS.lock().await;
    let (t, sb) = setup_p3(SandboxConfig {
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
    t.write("plain.txt", "plain");
    std::os::unix::fs::symlink("plain.txt", t.ws().join("to-plain")).unwrap();
    let waits: [&[&str]; 5] = [
        &["open", ".", "fifo"],
        &["read", ".", "fifo"],
        &["read", ".", "to-fifo"],
        &["write", ".", "fifo", "10"],
        &["touch", ".", "fifo"],
    ];
    for skip in [false, true] {
        let _skip = skip.then(SkipPrecheck::new);
        let before = toolhost::backend::wasm::fifo_opens_interrupted();
        for args in waits {
            let r = probe3(&sb, args).await;
            // Past the check, times are set by name, unfollowed (the
            // protected-path walk): nothing opens the FIFO.
            let want = if skip && args[0] == "touch" {
                "ok\n"
            } else {
                "err not-permitted\n"
            };
            assert_eq!(
                (r.stdout.as_str(), r.outcome.kind),
                (want, OutcomeKind::Exited),
                "skip={skip} {args:?}: {r:?}"
            );
            assert!(r.duration < Duration::from_secs(5), "{args:?}: {r:?}");
        }
        let interrupted = toolhost::backend::wasm::fifo_opens_interrupted() - before;
        if skip {
            assert!(interrupted >= 4, "{interrupted} waits interrupted");
        } else {
            assert_eq!(interrupted, 0, "an open reached a FIFO");
        }
        let r = probe3(&sb, &["read", ".", "fifo-w"]).await;
        assert_eq!(
            r.stdout, "err not-permitted\n",
            "skip={skip} fifo with a writer: {r:?}"
        );
        let r = probe3(&sb, &["read", ".", "sock"]).await;
        assert!(
            r.stdout.starts_with("err ") && !r.success(),
            "skip={skip} sock: {r:?}"
        );
        for p in ["plain.txt", "to-plain"] {
            let r = probe3(&sb, &["read", ".", p]).await;
            assert_eq!(
                (r.stdout.as_str(), r.success()),
                ("ok plain\n", true),
                "{p}: {r:?}"
            );
        }
        let r = probe3(&sb, &["touch", ".", "plain.txt"]).await;
        assert_eq!(r.stdout, "ok\n", "{r:?}");
    }
    assert_eq!(threads_waiting_on_a_fifo(), 0);
}

// Unix only: Unix symlinks
#[cfg(unix)]
/// Under the guard an open for writing follows a final symlink hop by hop,
/// each target named from the call's directory: one that climbs with `..`
/// lands where the host would put it; one that climbs into `.git` is refused.
#[tokio::test]
async fn preview3_writes_through_symlinks_that_climb_land_where_the_host_puts_them() {
    let (t, sb) = setup_p3(wasm_config());
    let x = climbing_links(&t);
    for (path, n) in [("a/b/up", 3), ("a/hop", 2)] {
        let _ = std::fs::remove_file(&x);
        let r = probe3(&sb, &["write", ".", path, &n.to_string()]).await;
        assert_eq!(r.stdout, format!("ok {n}\n"), "{path}: {r:?}");
        assert_eq!(std::fs::metadata(&x).unwrap().len(), n, "{path}");
    }
    let r = probe3(&sb, &["write", ".", "a/b/cfg", "1"]).await;
    assert_eq!(r.stdout, "err not-permitted\n", "{r:?}");
    assert_eq!(
        std::fs::read_to_string(t.ws().join(".git/config")).unwrap(),
        "[core]\n"
    );
}

// Unix only: Unix symlinks and modes
#[cfg(unix)]
/// Case 44 for preview 3: every change by path into `.git` is refused and
/// leaves its files as they were (content hash, mtime, names), a `.git`
/// absent when the call starts is refused by name, a symlink into `.git` is
/// not a way in, and a cwd inside `.git` is read-only. The allowed twin of
/// each change lands outside `.git`.
#[tokio::test]
async fn preview3_protected_paths_hold() {
    let (t, sb) = setup_p3(wasm_config());
    // No `.git` yet: creating one is refused; the twin lands.
    let r = probe3(&sb, &["mkdir", ".", ".git"]).await;
    assert_eq!(r.stdout, "err not-permitted\n", "{r:?}");
    assert!(!t.ws().join(".git").exists());
    let r = probe3(&sb, &["mkdir", ".", "git"]).await;
    assert_eq!(r.stdout, "ok\n", "{r:?}");
    // A repository.
    std::fs::create_dir_all(t.ws().join(".git/hooks")).unwrap();
    t.write(".git/config", "[core]\n");
    t.write("f", "data");
    std::os::unix::fs::symlink(".git/config", t.ws().join("cfg-link")).unwrap();
    std::os::unix::fs::symlink(".git", t.ws().join("git-link")).unwrap();
    let old = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    std::fs::File::options()
        .write(true)
        .open(t.ws().join(".git/config"))
        .unwrap()
        .set_modified(old)
        .unwrap();
    std::fs::File::open(t.ws().join(".git"))
        .unwrap()
        .set_modified(old)
        .unwrap();
    let config_hash = sha256_file(&t.ws().join(".git/config"));
    std::fs::File::open(t.ws().join(".git/hooks"))
        .unwrap()
        .set_modified(old)
        .unwrap();
    let refused: [&[&str]; 23] = [
        // A trailing slash: the host follows the link even unfollowed.
        &["touch", ".", "git-link/", "nofollow"],
        &["touch", ".", "git-link/hooks/", "nofollow"],
        // Times set through a descriptor opened for reading (by name, through
        // a symlink, on `.git` itself) or for writing.
        &["ftouch", ".", ".git/config"],
        &["ftouch", ".", "cfg-link"],
        &["ftouch", ".", ".git"],
        &["ftouch", ".", ".git/config", "w"],
        // Times set through a symlink, or on `.git` named by `.` or `..`.
        &["touch", ".", "cfg-link"],
        &["touch", ".", ".git/."],
        &["touch", ".", ".git/hooks/.."],
        &["write", ".", ".git/config", "3"],
        &["write", ".", ".git/hooks/pre-commit", "3"],
        &["write", ".", "cfg-link", "3"],
        &["write", ".", "git-link/hooks/post-checkout", "3"],
        &["append", ".", ".git/config", "3"],
        &["setsize", ".", ".git/config", "0"],
        &["touch", ".", ".git/config"],
        &["mkdir", ".", ".git/hooks/d"],
        &["rmdir", ".", ".git/hooks"],
        &["unlink", ".", ".git/config"],
        &["symlink", ".", "../f", ".git/hooks/pre-push"],
        &["rename", ".", ".git", "g2"],
        &["rename", ".", "f", ".git/hooks/pre-commit"],
        &["link", ".", "f", ".git/hooks/pre-commit"],
    ];
    for args in refused {
        let r = probe3(&sb, args).await;
        assert!(
            r.stdout.starts_with("err ") && r.returncode == Some(1),
            "{args:?}: {r:?}"
        );
    }
    assert_eq!(sha256_file(&t.ws().join(".git/config")), config_hash);
    assert_eq!(mtime(&t.ws().join(".git/config")), old);
    assert_eq!(mtime(&t.ws().join(".git")), old);
    assert_eq!(mtime(&t.ws().join(".git/hooks")), old);
    let mut names: Vec<_> = std::fs::read_dir(t.ws().join(".git/hooks"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert!(names.is_empty(), "{names:?}");
    assert!(t.ws().join(".git").is_dir() && !t.ws().join("g2").exists());
    assert!(t.ws().join("f").is_file());
    // A cwd inside `.git` is read-only.
    std::fs::copy(probe_p3_path(), t.ws().join(".git/hooks/probe3.wasm")).unwrap();
    let r = probe3_in(
        &sb,
        &["write", ".", "x", "1"],
        Some(t.ws().join(".git/hooks")),
    )
    .await;
    assert!(r.stdout.starts_with("err "), "{r:?}");
    assert!(!t.ws().join(".git/hooks/x").exists());
    // Reading `.git` is allowed.
    let r = probe3(&sb, &["read", ".", ".git/config"]).await;
    assert_eq!(r.stdout, "ok [core]\n\n", "{r:?}");
    // The allowed twins, outside `.git`.
    std::os::unix::fs::symlink("git", t.ws().join("gd-link")).unwrap();
    let allowed: [&[&str]; 12] = [
        &["touch", ".", "gd-link/", "nofollow"],
        &["write", ".", "git/config", "3"],
        &["append", ".", "git/config", "3"],
        &["setsize", ".", "git/config", "1"],
        &["touch", ".", "git/config"],
        &["mkdir", ".", "git/d"],
        &["symlink", ".", "../f", "git/l"],
        &["touch", ".", "git/l"],
        &["touch", ".", "git/."],
        &["link", ".", "f", "git/f2"],
        &["rename", ".", "git/f2", "git/f3"],
        &["unlink", ".", "git/f3"],
    ];
    for args in allowed {
        let r = probe3(&sb, args).await;
        assert!(r.success(), "{args:?}: {r:?}");
    }
    let r = probe3(&sb, &["rmdir", ".", "git/d"]).await;
    assert!(r.success(), "{r:?}");
    assert_eq!(std::fs::read(t.ws().join("git/config")).unwrap(), b"x");
    assert!(t.ws().join("git/l").is_symlink() && !t.ws().join("git/d").exists());
    // Times through a descriptor: a file opened for writing outside `.git`
    // is touched. One opened for reading is refused while anything is
    // protected, and touched when nothing is.
    let set_old = |p: &str| {
        std::fs::File::options()
            .write(true)
            .open(t.ws().join(p))
            .unwrap()
            .set_modified(old)
            .unwrap();
    };
    set_old("git/config");
    let r = probe3(&sb, &["ftouch", ".", "git/config", "w"]).await;
    assert_eq!(r.stdout, "ok\n", "{r:?}");
    assert_ne!(mtime(&t.ws().join("git/config")), old);
    set_old("git/config");
    let r = probe3(&sb, &["ftouch", ".", "git/config"]).await;
    assert_eq!(r.stdout, "err not-permitted\n", "{r:?}");
    assert_eq!(mtime(&t.ws().join("git/config")), old);
    let open = unprotected(&t);
    let r = probe3(&open, &["ftouch", ".", "git/config"]).await;
    assert_eq!(r.stdout, "ok\n", "{r:?}");
    assert_ne!(mtime(&t.ws().join("git/config")), old);
}
