//! The `wasm` backend (docs/src/attacks.md W cases), the built-in guest tools against
//! native coreutils on the same fixtures, the registry and the compile cache.
//! The guests are built by build.rs (`TOOLHOST_BUILD_GUEST_TESTS`).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use toolhost::config::{CpuMeter, WasmConfig};
use toolhost::{
    BackendChoice, BackendKind, OutcomeKind, RunOutput, RunRequest, Sandbox, SandboxConfig,
};

use crate::util::*;

pub(crate) fn probe_path() -> PathBuf {
    let p = Path::new(env!("TOOLHOST_BUILD_GUEST_TESTS")).join("probe.wasm");
    assert!(p.exists(), "{} is missing: build.rs builds it", p.display());
    p
}

fn builtin_tools_built() {
    let p = Path::new(env!("TOOLHOST_BUILD_GUEST_DIST")).join("cat.wasm");
    assert!(p.exists(), "{} is missing: build.rs builds it", p.display());
}

/// One cache dir for the whole test process, so every test shares one engine.
fn cache_dir() -> PathBuf {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("cache dir"))
        .path()
        .to_path_buf()
}

pub(crate) fn wasm_config() -> SandboxConfig {
    let mut wasm = WasmConfig::default();
    wasm.cache_dir = Some(cache_dir());
    SandboxConfig {
        backend: BackendChoice::Wasm,
        timeout: Duration::from_secs(30),
        wasm,
        ..SandboxConfig::default()
    }
}

/// A workspace with the probe copied in, and a sandbox on the wasm backend.
pub(crate) fn setup(config: SandboxConfig) -> (Tmp, Sandbox) {
    builtin_tools_built();
    let t = Tmp::new();
    std::fs::copy(probe_path(), t.ws().join("probe.wasm")).unwrap();
    let sb = t.sandbox(config);
    (t, sb)
}

pub(crate) async fn probe(sb: &Sandbox, args: &[&str]) -> RunOutput {
    let mut argv = vec!["./probe.wasm"];
    argv.extend_from_slice(args);
    sb.run(RunRequest::new(argv)).await
}

#[tokio::test]
async fn runs_a_wasi_command_with_exit_codes_and_stdin() {
    let (_t, sb) = setup(wasm_config());
    let r = probe(&sb, &["args", "a b", "ü"]).await;
    assert!(r.success(), "{r:?}");
    assert_eq!(r.backend, BackendKind::Wasm);
    assert_eq!(r.stdout, "probe\nargs\na b\nü\n");
    let r = probe(&sb, &["exit", "7"]).await;
    assert_eq!(
        (r.returncode, r.outcome.kind),
        (Some(7), OutcomeKind::Exited)
    );
    assert_eq!(r.cli_exit_code(), 7);
    // Attack 35: no stdin given is an empty stdin, at once.
    let r = probe(&sb, &["stdin"]).await;
    assert_eq!(r.stdout, "stdin 0 bytes\n");
    let r = sb
        .run(RunRequest::new(["./probe.wasm", "stdin"]).stdin(vec![7u8; 100_000]))
        .await;
    assert_eq!(r.stdout, "stdin 100000 bytes\n");
}

// Unix only: symlinks to /etc; the Windows spellings are in windows.rs
#[cfg(unix)]
#[tokio::test]
async fn attack_01_02_03_paths_outside_the_preopens_are_invisible() {
    let (t, sb) = setup(wasm_config());
    t.write("inside.txt", "inside");
    std::os::unix::fs::symlink("/etc", t.ws().join("l")).unwrap();
    std::os::unix::fs::symlink(t.outside(), t.ws().join("out")).unwrap();
    let secret = t.outside().join("secret.txt");
    for p in [
        "../outside/secret.txt",
        "../../etc/passwd",
        "/etc/passwd",
        secret.to_str().unwrap(),
        "l/passwd",
        "out/secret.txt",
        "l/",
        "out/.",
    ] {
        let r = probe(&sb, &["read", p]).await;
        assert!(
            !r.stdout.contains(CANARY) && !r.stdout.contains("root:"),
            "{p}: {r:?}"
        );
        assert_eq!(r.returncode, Some(3), "{p}: {r:?}");
    }
    // Allowed twins: relative to the cwd, and by the allowed dir's absolute path.
    let abs = t.ws().join("inside.txt");
    for p in ["inside.txt", "./inside.txt", abs.to_str().unwrap()] {
        let r = probe(&sb, &["read", p]).await;
        assert_eq!(r.stdout, "inside", "{p}: {r:?}");
    }
}

// Unix only: runs native POSIX commands (sh, echo, true); the Windows CLI and direct are tested in windows.rs
#[cfg(unix)]
#[tokio::test]
async fn attack_04_symlink_made_by_a_native_call_is_not_followed_out() {
    let (t, sb) = setup(wasm_config());
    let native = t.sandbox(config());
    let r = sh(
        &native,
        &format!(
            "ln -s {} esc && mkdir d && ln -s d ok && echo in > d/f",
            t.outside().display()
        ),
    )
    .await;
    assert!(r.success(), "{r:?}");
    let r = probe(&sb, &["read", "esc/secret.txt"]).await;
    assert!(!r.stdout.contains(CANARY), "{r:?}");
    let r = probe(&sb, &["read", "ok/f"]).await;
    assert_eq!(r.stdout, "in\n");
}

// Unix only: it names dirs by host path, which a guest can use only where host paths are WASI paths; windows.rs holds a read-only dir by guest path
#[cfg(unix)]
#[tokio::test]
async fn read_only_dirs_are_read_only_in_the_guest() {
    builtin_tools_built();
    let t = Tmp::new();
    std::fs::copy(probe_path(), t.ws().join("probe.wasm")).unwrap();
    let ro = t.outside();
    let before = sha256_file(&ro.join("secret.txt"));
    let sb = Sandbox::new(
        [
            toolhost::AllowedDirSpec::read_write(t.ws()),
            toolhost::AllowedDirSpec::read_only(&ro),
        ],
        wasm_config(),
    )
    .unwrap();
    let target = ro.join("secret.txt");
    let r = probe(&sb, &["write", target.to_str().unwrap(), "10"]).await;
    assert_eq!(r.returncode, Some(3), "{r:?}");
    let r = probe(&sb, &["write", ro.join("new").to_str().unwrap(), "10"]).await;
    assert_eq!(r.returncode, Some(3), "{r:?}");
    assert_eq!(sha256_file(&target), before);
    assert!(!ro.join("new").exists());
    // Readable, though; and the read-write dir is writable (allowed twin).
    let r = probe(&sb, &["read", target.to_str().unwrap()]).await;
    assert_eq!(r.stdout, CANARY);
    let r = probe(&sb, &["write", "ok.bin", "10"]).await;
    assert_eq!(r.stdout, "wrote 10\n", "{r:?}");
    assert_eq!(std::fs::metadata(t.ws().join("ok.bin")).unwrap().len(), 10);
}

#[tokio::test]
async fn attack_11_cwd_outside_and_cwd_preopen() {
    let (t, sb) = setup(wasm_config());
    std::fs::create_dir(t.ws().join("sub")).unwrap();
    t.write("sub/x", "in-sub");
    let r = sb
        .run(RunRequest::new(["probe.wasm", "read", "x"]).cwd("/etc"))
        .await;
    assert_eq!(r.outcome.kind, OutcomeKind::CwdOutside);
    // The cwd is preopened as `.`: relative paths resolve there.
    std::fs::copy(probe_path(), t.ws().join("sub/probe.wasm")).unwrap();
    let r = sb
        .run(RunRequest::new(["./probe.wasm", "read", "x"]).cwd("sub"))
        .await;
    assert_eq!(r.stdout, "in-sub", "{r:?}");
}

#[test]
fn attack_12_13_env_canaries_through_the_cli() {
    builtin_tools_built();
    let t = Tmp::new();
    std::fs::copy(probe_path(), t.ws().join("probe.wasm")).unwrap();
    let out = toolhost(
        &t.ws(),
        &[
            "run",
            "--backend",
            "wasm",
            "--env-allow",
            "GITHUB_TOKEN",
            "--env-allow",
            "VISIBLE",
            "--env",
            "FROM_FLAG=yes",
            "--",
            "./probe.wasm",
            "env",
        ],
        &[
            ("GITHUB_TOKEN", CANARY),
            ("ANTHROPIC_API_KEY", CANARY),
            ("UNLISTED", CANARY),
            ("VISIBLE", "v"),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains(CANARY), "{stdout}");
    assert!(
        stdout.contains("VISIBLE=v") && stdout.contains("FROM_FLAG=yes"),
        "{stdout}"
    );
    // --env cannot set a deny-listed name either.
    let out = toolhost(
        &t.ws(),
        &[
            "run",
            "--backend",
            "wasm",
            "--env",
            "LD_PRELOAD=x",
            "--",
            "./probe.wasm",
            "env",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(125));
}

#[tokio::test]
async fn attack_17_memory_bomb_is_a_memory_limit() {
    let (_t, sb) = setup(SandboxConfig {
        max_memory_mb: 64,
        ..wasm_config()
    });
    for args in [&["alloc", "100000"][..], &["grow"][..]] {
        let r = probe(&sb, args).await;
        assert_eq!(r.outcome.kind, OutcomeKind::MemoryLimit, "{args:?}: {r:?}");
        assert!(r.outcome.message.contains("64 MiB"));
        assert_eq!(r.cli_exit_code(), 137);
    }
    // Allowed twin: under the limit.
    let r = probe(&sb, &["alloc", "16"]).await;
    assert_eq!(r.stdout, "allocated 16 MiB\n", "{r:?}");
}

#[tokio::test]
async fn attack_18_cpu_spin_epoch_and_fuel() {
    for meter in [CpuMeter::Epoch, CpuMeter::Fuel] {
        let mut cfg = wasm_config();
        cfg.wasm.cpu_meter = meter;
        cfg.max_cpu_seconds = 1;
        let (_t, sb) = setup(cfg);
        let r = probe(&sb, &["spin"]).await;
        assert_eq!(r.outcome.kind, OutcomeKind::CpuLimit, "{meter:?}: {r:?}");
        assert!(r.duration < Duration::from_secs(10), "{:?}", r.duration);
        // Allowed twin: bounded work finishes.
        let r = probe(&sb, &["count", "1000"]).await;
        assert!(r.success(), "{meter:?}: {r:?}");
    }
    // Without a CPU limit the timeout ends a spinning guest.
    let (_t, sb) = setup(SandboxConfig {
        max_cpu_seconds: 0,
        timeout: Duration::from_secs(1),
        ..wasm_config()
    });
    let r = probe(&sb, &["spin"]).await;
    assert!(r.timed_out, "{r:?}");
    assert!(r.duration < Duration::from_secs(3));
}

#[tokio::test]
async fn attack_20_file_writes_are_held_to_the_budget() {
    let (t, sb) = setup(SandboxConfig {
        max_file_size_mb: 1,
        ..wasm_config()
    });
    let r = probe(&sb, &["write", "big", "5000000"]).await;
    assert_eq!(r.outcome.kind, OutcomeKind::FileSizeLimit, "{r:?}");
    assert!(std::fs::metadata(t.ws().join("big")).unwrap().len() <= 1 << 20);
    let r = probe(&sb, &["truncate", "sparse", "100000000000"]).await;
    assert_eq!(r.outcome.kind, OutcomeKind::FileSizeLimit, "{r:?}");
    assert!(std::fs::metadata(t.ws().join("sparse")).unwrap().len() <= 1 << 20);
    // Allowed twin.
    let r = probe(&sb, &["write", "small", "500000"]).await;
    assert_eq!(r.stdout, "wrote 500000\n");
    assert!(r.success());
}

#[tokio::test]
async fn attack_22_blocked_in_a_host_call_still_times_out() {
    let (_t, sb) = setup(SandboxConfig {
        timeout: Duration::from_secs(1),
        ..wasm_config()
    });
    let r = probe(&sb, &["sleep", "30"]).await;
    assert!(r.timed_out, "{r:?}");
    assert_eq!(r.outcome.kind, OutcomeKind::TimedOut);
    assert!(r.duration < Duration::from_secs(3), "{:?}", r.duration);
    // Allowed twin: a short sleep completes.
    let (_t, sb) = setup(wasm_config());
    let r = probe(&sb, &["sleep", "0"]).await;
    assert_eq!(r.stdout, "woke\n");
}

#[tokio::test]
async fn attack_28_29_31_no_sockets_no_name_lookup() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    // Positive control: the port really listens.
    assert!(std::net::TcpStream::connect(&addr).is_ok());
    let (_t, sb) = setup(wasm_config());
    let r = probe(&sb, &["connect", &addr]).await;
    assert_eq!(r.returncode, Some(3), "{r:?}");
    assert!(!r.stdout.contains("CONNECTED"));
    let r = probe(&sb, &["resolve", "localhost"]).await;
    assert_eq!(r.returncode, Some(3), "{r:?}");
    assert!(!r.stdout.contains("RESOLVED"));
}

#[tokio::test]
async fn attack_32_33_34_output_is_capped_and_decoded_lossily() {
    let (_t, sb) = setup(wasm_config());
    let r = probe(&sb, &["flood", "300000000"]).await;
    assert!(r.success() && r.truncated, "{}", r.outcome.message);
    assert_eq!(r.stdout.len(), 8 * 1024 * 1024);
    assert_eq!(r.stderr, "flood done\n");
    let r = probe(&sb, &["flood-err", "50000000"]).await;
    assert!(r.success() && r.truncated);
    assert_eq!(
        (r.stdout.as_str(), r.stderr.len()),
        ("done\n", 2 * 1024 * 1024)
    );
    let r = probe(&sb, &["bytes"]).await;
    assert_eq!(r.stdout, "a\u{fffd}\0\u{1b}[31mX");
}

#[tokio::test]
async fn pooled_slots_leak_nothing_between_calls_and_queue_when_full() {
    // One slot: every call reuses the same memory, table and stack slot.
    let mut config = wasm_config();
    config.wasm.pool_size = 1;
    let (_t, sb) = setup(config);
    let canary = "POOL-CANARY-7f3a9c";
    // Allowed twin: the scan finds the canary while it is in this call's memory.
    let r = probe(&sb, &["plant", canary, "--scan"]).await;
    assert_eq!((r.success(), r.stdout.as_str()), (true, "found\n"), "{r:?}");
    for _ in 0..3 {
        let r = probe(&sb, &["plant", canary]).await;
        assert!(r.success(), "{r:?}");
        // Denied case: the next call in the same slot sees none of it.
        let r = probe(&sb, &["scan", canary]).await;
        assert_eq!(
            (r.success(), r.stdout.as_str()),
            (true, "not found\n"),
            "{r:?}"
        );
    }
    // More concurrent calls than slots: they wait for the slot, none fails.
    let sb = std::sync::Arc::new(sb);
    let calls: Vec<_> = (0..8)
        .map(|i| {
            let sb = sb.clone();
            tokio::spawn(async move {
                let code = (i + 1).to_string();
                probe(&sb, &["exit", &code]).await
            })
        })
        .collect();
    for (i, c) in calls.into_iter().enumerate() {
        let r = c.await.unwrap();
        assert_eq!(r.returncode, Some(i as i32 + 1), "{r:?}");
    }
}

#[tokio::test]
async fn traps_are_typed() {
    let (_t, sb) = setup(wasm_config());
    let r = probe(&sb, &["unreachable"]).await;
    assert_eq!(r.outcome.kind, OutcomeKind::Trapped, "{r:?}");
    assert!(
        r.outcome.message.contains("unreachable"),
        "{}",
        r.outcome.message
    );
    let r = probe(&sb, &["recurse"]).await;
    assert_eq!(r.outcome.kind, OutcomeKind::Trapped);
    assert!(
        r.outcome.message.contains("call stack exhausted"),
        "{}",
        r.outcome.message
    );
    assert_eq!(r.cli_exit_code(), 134);
}

// Unix only: runs native POSIX commands (sh, echo, true); the Windows CLI and direct are tested in windows.rs
#[cfg(unix)]
#[tokio::test]
async fn registry_names_paths_and_the_auto_backend() {
    let (t, sb) = setup(wasm_config());
    t.write("a.txt", "one\ntwo\n");
    let r = run(&sb, &["wc", "-l", "a.txt"]).await;
    assert_eq!(r.stdout, "2 a.txt\n", "{r:?}");
    assert_eq!(r.backend, BackendKind::Wasm);
    let r = run(&sb, &["no-such-tool"]).await;
    assert_eq!(r.outcome.kind, OutcomeKind::NotFound);
    assert!(r.outcome.message.contains("toolhost tools"));
    // A name cannot be a path into the tool dirs' parents.
    let r = run(&sb, &["../dist/cat"]).await;
    assert_ne!(r.outcome.kind, OutcomeKind::Exited);
    let names: Vec<String> = sb.wasm_tools().into_iter().map(|t| t.name).collect();
    for n in [
        "base64",
        "cat",
        "diff",
        "find",
        "grep",
        "head",
        "ls",
        "sha256sum",
        "sort",
        "tail",
        "tree",
        "uniq",
        "wc",
    ] {
        assert!(names.iter().any(|x| x == n), "{n} missing from {names:?}");
    }
    assert!(
        !names.iter().any(|x| x == "probe"),
        "test guests are not built-in tools"
    );
    // auto: wasm when a tool exists, else direct.
    let auto = t.sandbox(SandboxConfig {
        backend: BackendChoice::Auto,
        ..wasm_config()
    });
    let r = run(&auto, &["wc", "-l", "a.txt"]).await;
    assert_eq!(
        (r.backend, r.stdout.as_str()),
        (BackendKind::Wasm, "2 a.txt\n")
    );
    let r = run(&auto, &["printf", "native"]).await;
    assert_eq!(
        (r.backend, r.stdout.as_str()),
        (BackendKind::Direct, "native")
    );
}

/// Runs the same command natively and as the built-in wasm tool, in the same
/// workspace, and compares stdout and exit code.
async fn same_as_native(t: &Tmp, native: &Sandbox, wasm: &Sandbox, argv: &[&str]) {
    let n = run(native, argv).await;
    let w = run(wasm, argv).await;
    assert_eq!(w.backend, BackendKind::Wasm);
    assert_eq!(
        (w.stdout.as_str(), w.returncode),
        (n.stdout.as_str(), n.returncode),
        "{argv:?} in {}\nwasm stderr: {}",
        t.ws().display(),
        w.stderr
    );
}

// Unix only: compares with native coreutils; windows.rs checks the built-ins' output on Windows
#[cfg(unix)]
#[tokio::test]
async fn guest_tools_match_coreutils_on_fixtures() {
    let (t, wasm) = setup(wasm_config());
    std::fs::remove_file(t.ws().join("probe.wasm")).unwrap();
    let native = t.sandbox(config());
    t.write("a.txt", "banana\napple\ncherry\napple\n\nDate 10\ndate 9\n");
    t.write("b.txt", "banana\napricot\ncherry\napple\n");
    t.write("nums", "10\n9\n100\n-3\n2.5\n");
    t.write("dir/one.rs", "fn main() {}\n// TODO: x\n");
    t.write("dir/sub/two.rs", "todo later\nTODO now\n");
    t.write("dir/sub/three.txt", "nothing\n");
    t.write("dups", "a\na\nb\nc\nc\nc\na\n");
    t.write("noeol", "no newline at end");
    let cases: &[&[&str]] = &[
        &["cat", "a.txt", "b.txt"],
        &["cat", "-n", "a.txt"],
        &["cat", "missing"],
        &["head", "-n", "3", "a.txt"],
        &["head", "-c", "5", "a.txt"],
        &["head", "a.txt", "b.txt"],
        &["tail", "-n", "2", "a.txt"],
        &["tail", "-n", "1", "noeol"],
        &["tail", "-c", "4", "a.txt"],
        &["wc", "-l", "a.txt"],
        &["wc", "-w", "a.txt"],
        &["wc", "-c", "a.txt"],
        &["grep", "apple", "a.txt"],
        &["grep", "-n", "-i", "date", "a.txt"],
        &["grep", "-c", "a", "a.txt"],
        &["grep", "-v", "a", "a.txt"],
        &[
            "grep",
            "-l",
            "TODO",
            "dir/one.rs",
            "dir/sub/two.rs",
            "dir/sub/three.txt",
        ],
        &["grep", "nomatch", "a.txt"],
        &["grep", "x", "missing"],
        &["sha256sum", "a.txt", "b.txt"],
        &["sort", "a.txt"],
        &["sort", "-r", "b.txt"],
        &["sort", "-u", "a.txt"],
        &["uniq", "dups"],
        &["uniq", "-c", "dups"],
        &["uniq", "-d", "dups"],
        &["base64", "a.txt"],
    ];
    for argv in cases {
        same_as_native(&t, &native, &wasm, argv).await;
    }
    // GNU find lists in directory order; ours sorts by name. Same set of paths.
    for argv in [
        &["find", "dir", "-name", "*.rs"][..],
        &["find", "dir", "-type", "d"][..],
    ] {
        let sorted = |s: &str| {
            let mut v: Vec<String> = s.lines().map(str::to_string).collect();
            v.sort();
            v
        };
        let (n, w) = (run(&native, argv).await, run(&wasm, argv).await);
        assert_eq!(sorted(&w.stdout), sorted(&n.stdout), "{argv:?}");
        assert_eq!(w.returncode, Some(0));
    }
    // jq: a subset of jq, checked against the outputs jq gives for these filters.
    t.write(
        "j.json",
        r#"{"a":[{"n":1,"name":"x"},{"n":5,"name":"y"}],"b":"s","c":null}"#,
    );
    let jq_cases: &[(&[&str], &str)] = &[
        (&["jq", ".b", "j.json"], "\"s\"\n"),
        (
            &["jq", "-r", ".a[] | select(.n > 2) | .name", "j.json"],
            "y\n",
        ),
        (
            &[
                "jq",
                "-c",
                "{b, total: (.a | map(.n) | add), names: [.a[].name]}",
                "j.json",
            ],
            "{\"b\":\"s\",\"total\":6,\"names\":[\"x\",\"y\"]}\n",
        ),
        (&["jq", "-c", "keys", "j.json"], "[\"a\",\"b\",\"c\"]\n"),
        (&["jq", ".a | length", "j.json"], "2\n"),
        (&["jq", ".c // \"default\"", "j.json"], "\"default\"\n"),
        (
            &["jq", "-c", ".a[0]", "j.json"],
            "{\"n\":1,\"name\":\"x\"}\n",
        ),
        (
            &["jq", ".a[0]", "j.json"],
            "{\n  \"n\": 1,\n  \"name\": \"x\"\n}\n",
        ),
        (
            &["jq", "-r", ".a | map(.name) | join(\",\")", "j.json"],
            "x,y\n",
        ),
    ];
    for (argv, want) in jq_cases {
        let r = run(&wasm, argv).await;
        assert_eq!(r.stdout, *want, "{argv:?}: {r:?}");
    }
    let r = run(&wasm, &["jq", ".b.c", "j.json"]).await;
    assert_eq!(r.returncode, Some(5), "{r:?}");
    assert!(r.stderr.contains("Cannot index string"), "{r:?}");
    let r = run(&wasm, &["jq", ".[", "j.json"]).await;
    assert_eq!(r.returncode, Some(3), "{r:?}");
    // Sorting numbers, C-locale collation and unified diffs differ in small ways
    // between implementations; check the exact expected output instead.
    let r = run(&wasm, &["sort", "-n", "nums"]).await;
    assert_eq!(r.stdout, "-3\n2.5\n9\n10\n100\n");
    let r = run(&wasm, &["grep", "-r", "-n", "TODO", "dir"]).await;
    assert_eq!(
        r.stdout,
        "dir/one.rs:2:// TODO: x\ndir/sub/two.rs:2:TODO now\n"
    );
    let r = run(&wasm, &["diff", "-u", "a.txt", "b.txt"]).await;
    assert_eq!(r.returncode, Some(1));
    assert!(
        r.stdout.starts_with("--- a.txt\n+++ b.txt\n@@ -1,"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("-apple\n-cherry\n") || r.stdout.contains("+apricot\n"),
        "{}",
        r.stdout
    );
    let r = run(&wasm, &["diff", "a.txt", "a.txt"]).await;
    assert_eq!((r.returncode, r.stdout.as_str()), (Some(0), ""));
    let r = wasm
        .run(RunRequest::new(["base64", "-d"]).stdin("aGVsbG8gd29ybGQ=\n"))
        .await;
    assert_eq!(r.stdout, "hello world");
    let r = run(&wasm, &["ls", "dir"]).await;
    assert_eq!(r.stdout, "one.rs\nsub\n");
    let r = run(&wasm, &["tree", "dir"]).await;
    assert_eq!(
        r.stdout,
        "dir\n|-- one.rs\n`-- sub\n    |-- three.txt\n    `-- two.rs\n\n1 directory, 3 files\n"
    );
    for tool in [
        "cat",
        "head",
        "tail",
        "wc",
        "ls",
        "grep",
        "find",
        "sha256sum",
        "sort",
        "uniq",
        "diff",
        "base64",
        "tree",
    ] {
        let r = run(&wasm, &[tool, "--help"]).await;
        assert!(
            r.success() && r.stdout.starts_with("Usage: "),
            "{tool} --help: {r:?}"
        );
    }
}

#[test]
fn compile_cache_is_reused_and_corruption_is_recompiled() {
    builtin_tools_built();
    let t = Tmp::new();
    t.write("a.txt", "x\ny\n");
    let cache = t.root.join("cache");
    std::fs::write(
        t.root.join("cfg.toml"),
        format!("[wasm]\ncache_dir = {:?}\n", cache.to_str().unwrap()),
    )
    .unwrap();
    let cfg = t.root.join("cfg.toml");
    let run_tool = |tool: &[&str]| {
        let mut args = vec![
            "run",
            "--config",
            cfg.to_str().unwrap(),
            "--backend",
            "wasm",
            "--",
        ];
        args.extend_from_slice(tool);
        toolhost(&t.ws(), &args, &[("TOOLHOST_LOG", "toolhost=debug")])
    };
    let run_wc = || run_tool(&["wc", "-l", "a.txt"]);
    let first = run_wc();
    assert_eq!(String::from_utf8_lossy(&first.stdout), "2 a.txt\n");
    assert!(
        String::from_utf8_lossy(&first.stderr).contains("compiled"),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let entries: Vec<PathBuf> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    // A second process (a second Engine) loads the entry.
    let second = run_wc();
    assert_eq!(String::from_utf8_lossy(&second.stdout), "2 a.txt\n");
    assert!(
        String::from_utf8_lossy(&second.stderr).contains("from the disk cache"),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    // Corrupt it: flip bytes in the middle. It is refused and recompiled.
    let mut data = std::fs::read(&entries[0]).unwrap();
    let mid = data.len() / 2;
    for b in &mut data[mid..mid + 64] {
        *b ^= 0xff;
    }
    std::fs::write(&entries[0], &data).unwrap();
    let third = run_wc();
    assert_eq!(String::from_utf8_lossy(&third.stdout), "2 a.txt\n");
    let err = String::from_utf8_lossy(&third.stderr);
    assert!(err.contains("corrupt") && err.contains("compiled"), "{err}");
    // Truncated to its header: same.
    std::fs::write(&entries[0], b"THCWASM1").unwrap();
    let fourth = run_wc();
    assert_eq!(String::from_utf8_lossy(&fourth.stdout), "2 a.txt\n");
    // And the rewritten entry is valid again.
    let fifth = run_wc();
    assert!(String::from_utf8_lossy(&fifth.stderr).contains("from the disk cache"));
    // Attack 41: another module's entry (cat's), valid in every byte, copied
    // under wc's entry name. wc's call must run wc's code: the entry carries
    // the hash of the wasm it came from, and is recompiled.
    let run_cat = || run_tool(&["cat", "a.txt"]);
    let cat = run_cat();
    assert_eq!(String::from_utf8_lossy(&cat.stdout), "x\ny\n");
    let cat_entry: Vec<PathBuf> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| *p != entries[0])
        .collect();
    assert_eq!(cat_entry.len(), 1, "{cat_entry:?}");
    let cat_bytes = std::fs::read(&cat_entry[0]).unwrap();
    std::fs::write(&entries[0], &cat_bytes).unwrap();
    let sixth = run_wc();
    assert_eq!(String::from_utf8_lossy(&sixth.stdout), "2 a.txt\n");
    let err = String::from_utf8_lossy(&sixth.stderr);
    assert!(
        err.contains("is foreign") && err.contains("compiled"),
        "{err}"
    );
    assert_ne!(std::fs::read(&entries[0]).unwrap(), cat_bytes);
    // Allowed twin: cat's own entry, where it belongs, still loads.
    let cat = run_cat();
    assert_eq!(String::from_utf8_lossy(&cat.stdout), "x\ny\n");
    assert!(String::from_utf8_lossy(&cat.stderr).contains("from the disk cache"));

    // Components (a typed tool) go through the same cache.
    let cache2 = t.root.join("cache2");
    let cfg2 = t.root.join("cfg2.toml");
    std::fs::write(
        &cfg2,
        format!("[wasm]\ncache_dir = {:?}\n", cache2.to_str().unwrap()),
    )
    .unwrap();
    let call = || {
        let out = toolhost(
            &t.ws(),
            &[
                "call",
                "--config",
                cfg2.to_str().unwrap(),
                "text-stats",
                r#"{"text":"a b"}"#,
            ],
            &[("TOOLHOST_LOG", "toolhost=debug")],
        );
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["words"], 2);
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(call().contains("compiled"));
    assert!(call().contains("from the disk cache"));
    let entries: Vec<PathBuf> = std::fs::read_dir(&cache2)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    let mut data = std::fs::read(&entries[0]).unwrap();
    let mid = data.len() / 2;
    data[mid] ^= 0x5a;
    std::fs::write(&entries[0], &data).unwrap();
    let err = call();
    assert!(err.contains("corrupt") && err.contains("compiled"), "{err}");
}

#[test]
fn tools_subcommand_lists_descriptions() {
    builtin_tools_built();
    let t = Tmp::new();
    let out = toolhost(&t.ws(), &["tools"], &[]);
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(
        s.lines()
            .any(|l| l.starts_with("grep ") && l.contains("regular expression")),
        "{s}"
    );
    let out = toolhost(&t.ws(), &["tools", "--json"], &[]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v.as_array().unwrap().len() >= 13);
}

pub(crate) fn probe_p2_path() -> PathBuf {
    let p = Path::new(env!("TOOLHOST_BUILD_GUEST_TESTS")).join("probe-p2.wasm");
    assert!(p.exists(), "{} is missing: build.rs builds it", p.display());
    p
}

/// The probe built as a WASI preview-2 command component (`wasm32-wasip2`).
async fn probe2(sb: &Sandbox, args: &[&str]) -> RunOutput {
    let mut argv = vec!["./probe2.wasm"];
    argv.extend_from_slice(args);
    sb.run(RunRequest::new(argv)).await
}

fn setup_p2(config: SandboxConfig) -> (Tmp, Sandbox) {
    let (t, sb) = setup(config);
    std::fs::copy(probe_p2_path(), t.ws().join("probe2.wasm")).unwrap();
    (t, sb)
}

#[tokio::test]
async fn preview2_command_components_are_held_like_modules() {
    let (t, sb) = setup_p2(SandboxConfig {
        max_file_size_mb: 1,
        max_memory_mb: 64,
        ..wasm_config()
    });
    t.write("inside.txt", "inside");
    assert!(
        wasmparser::Parser::is_component(&std::fs::read(t.ws().join("probe2.wasm")).unwrap()),
        "the p2 probe must be a component"
    );
    // argv, env, exit status (WASI 0.2 reports success or failure only).
    let r = probe2(&sb, &["args", "a b"]).await;
    assert_eq!(
        (r.returncode, r.stdout.as_str()),
        (Some(0), "probe2\nargs\na b\n"),
        "{r:?}"
    );
    let r = probe2(&sb, &["exit", "7"]).await;
    assert_eq!(
        (r.returncode, r.outcome.kind),
        (Some(1), OutcomeKind::Exited),
        "{r:?}"
    );
    // Attacks 1-3: nothing outside the preopens; the allowed twin reads.
    let secret = t.outside().join("secret.txt");
    for p in [
        "../outside/secret.txt",
        "/etc/passwd",
        secret.to_str().unwrap(),
    ] {
        let r = probe2(&sb, &["read", p]).await;
        assert!(
            !r.stdout.contains(CANARY) && !r.stdout.contains("root:"),
            "{p}: {r:?}"
        );
        assert_eq!(r.returncode, Some(1), "{p}: {r:?}");
    }
    let r = probe2(&sb, &["read", "inside.txt"]).await;
    assert_eq!(r.stdout, "inside", "{r:?}");
    // Attack 20: file writes through streams and set-size are held to the budget.
    let r = probe2(&sb, &["write", "big", "5000000"]).await;
    assert_eq!(r.outcome.kind, OutcomeKind::FileSizeLimit, "{r:?}");
    assert!(std::fs::metadata(t.ws().join("big")).unwrap().len() <= 1 << 20);
    let r = probe2(&sb, &["truncate", "sparse", "100000000000"]).await;
    assert_eq!(r.outcome.kind, OutcomeKind::FileSizeLimit, "{r:?}");
    assert!(std::fs::metadata(t.ws().join("sparse")).unwrap().len() <= 1 << 20);
    let r = probe2(&sb, &["write", "small", "500000"]).await;
    assert_eq!(
        (r.success(), r.stdout.as_str()),
        (true, "wrote 500000\n"),
        "{r:?}"
    );
    assert_eq!(
        std::fs::metadata(t.ws().join("small")).unwrap().len(),
        500000
    );
    // Attack 17: memory bomb; the allowed twin allocates under the limit.
    let r = probe2(&sb, &["alloc", "100000"]).await;
    assert_eq!(r.outcome.kind, OutcomeKind::MemoryLimit, "{r:?}");
    let r = probe2(&sb, &["alloc", "16"]).await;
    assert_eq!(r.stdout, "allocated 16 MiB\n", "{r:?}");
    // Attacks 28, 29, 31: preview 2 has socket interfaces; none reaches out.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    assert!(std::net::TcpStream::connect(&addr).is_ok());
    let r = probe2(&sb, &["connect", &addr]).await;
    assert!(
        !r.stdout.contains("CONNECTED") && r.returncode == Some(1),
        "{r:?}"
    );
    let r = probe2(&sb, &["resolve", "localhost"]).await;
    assert!(
        !r.stdout.contains("RESOLVED") && r.returncode == Some(1),
        "{r:?}"
    );
    // Attacks 32-34: output capped while the guest keeps running.
    let r = probe2(&sb, &["flood", "30000000"]).await;
    assert!(r.success() && r.truncated, "{}", r.outcome.message);
    assert_eq!(r.stdout.len(), 8 * 1024 * 1024);
}

#[tokio::test]
async fn preview2_cpu_limit_and_host_call_timeout() {
    let mut cfg = wasm_config();
    cfg.max_cpu_seconds = 1;
    let (_t, sb) = setup_p2(cfg);
    let r = probe2(&sb, &["spin"]).await;
    assert_eq!(r.outcome.kind, OutcomeKind::CpuLimit, "{r:?}");
    let r = probe2(&sb, &["count", "1000"]).await;
    assert!(r.success(), "{r:?}");
    let (_t, sb) = setup_p2(SandboxConfig {
        timeout: Duration::from_secs(1),
        ..wasm_config()
    });
    let r = probe2(&sb, &["sleep", "30"]).await;
    assert!(r.timed_out && r.duration < Duration::from_secs(3), "{r:?}");
    let r = probe2(&sb, &["sleep", "0"]).await;
    assert_eq!(r.stdout, "woke\n", "{r:?}");
}

#[tokio::test]
async fn typed_tools_are_discovered_and_called_by_name_with_json() {
    let (t, sb) = setup(wasm_config());
    t.write("notes.txt", "hello typed world\n");
    let tools: Vec<_> = sb.typed_tools().await;
    let names: Vec<&str> = tools
        .iter()
        .map(|t| t.as_ref().map(|t| t.name.as_str()).unwrap_or("ERR"))
        .collect();
    assert!(
        names.contains(&"text-stats") && names.contains(&"file-digest"),
        "{tools:?}"
    );
    for t in tools.iter().flatten() {
        assert_eq!(t.input_schema["type"], "object", "{t:?}");
        assert!(!t.description.is_empty());
    }
    // text-stats: pure computation.
    let r = sb
        .call_tool(
            "text-stats",
            &serde_json::json!({"text": "b a b\nc", "top": 1}),
            None,
        )
        .await;
    assert!(r.is_ok(), "{r:?}");
    let out = r.output.unwrap();
    assert_eq!(
        (
            out["lines"].as_u64(),
            out["words"].as_u64(),
            out["bytes"].as_u64()
        ),
        (Some(2), Some(4), Some(7))
    );
    assert_eq!(out["top"], serde_json::json!([{"word": "b", "count": 2}]));
    // file-digest reads through the preopens: the digest matches the host's.
    let r = sb
        .call_tool(
            "file-digest",
            &serde_json::json!({"paths": ["notes.txt"]}),
            None,
        )
        .await;
    assert!(r.is_ok(), "{r:?}");
    let out = r.output.unwrap();
    assert_eq!(
        out["files"][0]["sha256"],
        sha256_file(&t.ws().join("notes.txt"))
    );
    assert_eq!(out["files"][0]["bytes"], 18);
    // Denied twin: a file outside the sandbox is an error result, no canary.
    let secret = t.outside().join("secret.txt");
    let r = sb
        .call_tool(
            "file-digest",
            &serde_json::json!({"paths": [secret.to_str().unwrap()]}),
            None,
        )
        .await;
    assert!(r.output.is_none() && r.error.is_some(), "{r:?}");
    assert!(!format!("{r:?}").contains(&sha256_file(&secret)));
    assert_eq!((r.run.returncode, r.run.cli_exit_code()), (Some(1), 1));
    // Bad input is the tool's error result; the session keeps working.
    for bad in [
        serde_json::json!([1, 2]),
        serde_json::json!({"paths": "x"}),
        serde_json::json!({"paths": []}),
        serde_json::json!({"nope": 1}),
    ] {
        let r = sb.call_tool("file-digest", &bad, None).await;
        assert!(r.error.is_some() && r.output.is_none(), "{bad}: {r:?}");
    }
    // Unknown tools, commands called as typed tools and typed tools run as
    // commands are refused with a reason.
    let r = sb
        .call_tool("no-such-tool", &serde_json::json!({}), None)
        .await;
    assert_eq!(r.run.outcome.kind, OutcomeKind::NotFound, "{r:?}");
    let r = sb.call_tool("wc", &serde_json::json!({}), None).await;
    assert_eq!(r.run.outcome.kind, OutcomeKind::InvalidRequest, "{r:?}");
    let r = sb.run(RunRequest::new(["text-stats"])).await;
    assert_eq!(r.outcome.kind, OutcomeKind::InvalidRequest, "{r:?}");
    assert!(r.outcome.message.contains("typed tool"), "{r:?}");
}

#[tokio::test]
async fn typed_tools_keep_the_limits_and_names_must_match() {
    // The call's limits hold for typed tools: text-stats asked to measure a
    // text that does not fit in its memory limit ends with memory_limit.
    let (t, sb) = setup(SandboxConfig {
        max_memory_mb: 16,
        ..wasm_config()
    });
    let big = "word ".repeat(4 << 20);
    let r = sb
        .call_tool("text-stats", &serde_json::json!({"text": big}), None)
        .await;
    assert_eq!(
        r.run.outcome.kind,
        OutcomeKind::MemoryLimit,
        "{:?}",
        r.run.outcome
    );
    assert!(r.output.is_none() && r.error.is_some());
    let r = sb
        .call_tool("text-stats", &serde_json::json!({"text": "small"}), None)
        .await;
    assert!(r.is_ok(), "{r:?}");
    // The output cap holds for a typed tool's result and error too.
    let long = "x".repeat(3000);
    let (_t3, capped) = setup(SandboxConfig {
        max_output_bytes: 1000,
        ..wasm_config()
    });
    let r = capped
        .call_tool("file-digest", &serde_json::json!({"paths": [long]}), None)
        .await;
    let e = r.error.as_deref().unwrap_or("");
    assert!(
        r.run.truncated && !e.is_empty() && e.len() <= 800,
        "{}",
        e.len()
    );
    let (t2, small) = setup(SandboxConfig {
        max_output_bytes: 1000,
        ..wasm_config()
    });
    let paths: Vec<String> = (0..20).map(|i| format!("f{i}")).collect();
    for p in &paths {
        std::fs::write(t2.ws().join(p), p).unwrap();
    }
    let r = small
        .call_tool("file-digest", &serde_json::json!({"paths": paths}), None)
        .await;
    assert!(r.output.is_none() && r.run.truncated, "{r:?}");
    assert!(
        r.error.as_deref().unwrap_or("").contains("output cap"),
        "{r:?}"
    );
    let r = small
        .call_tool("file-digest", &serde_json::json!({"paths": ["f1"]}), None)
        .await;
    assert!(r.is_ok(), "{r:?}");
    // A typed tool whose file name differs from the name it declares is
    // listed as unusable, not silently renamed.
    let dir = t.ws().join("tools");
    std::fs::create_dir(&dir).unwrap();
    let builtin = Path::new(env!("TOOLHOST_BUILD_GUEST_DIST")).join("text-stats.wasm");
    std::fs::copy(&builtin, dir.join("renamed.wasm")).unwrap();
    let mut cfg = wasm_config();
    cfg.wasm.tool_dirs = vec![dir];
    let sb = t.sandbox(cfg);
    let listed = sb.typed_tools().await;
    let err = listed
        .iter()
        .find_map(|t| t.as_ref().err())
        .expect("renamed tool refused");
    assert!(
        err.message.contains("renamed") && err.message.contains("text-stats"),
        "{err:?}"
    );
}

#[test]
fn call_subcommand_prints_json_results_and_exit_codes() {
    builtin_tools_built();
    let t = Tmp::new();
    t.write("a.txt", "abc");
    let out = toolhost(
        &t.ws(),
        &["call", "file-digest", r#"{"paths":["a.txt"]}"#],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["files"][0]["sha256"], sha256_file(&t.ws().join("a.txt")));
    let out = toolhost(
        &t.ws(),
        &["call", "--json", "file-digest", r#"{"paths":["zz"]}"#],
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v["output"].is_null() && v["error"].as_str().unwrap().contains("zz"),
        "{v}"
    );
    let out = toolhost(&t.ws(), &["call", "text-stats", "{not json"], &[]);
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    let out = toolhost(&t.ws(), &["call", "no-such", "{}"], &[]);
    assert_eq!(out.status.code(), Some(127), "{out:?}");
    let out = toolhost(&t.ws(), &["tools", "--json"], &[]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let stats = v
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "text-stats")
        .expect("listed");
    assert_eq!(stats["kind"], "typed");
    assert_eq!(stats["input_schema"]["required"][0], "text");
}

/// From a review: the file budget is decided by what a descriptor is (not its
/// number), bounds where a write lands (not only how much is written), and
/// counts growth by resizing.
#[tokio::test]
async fn file_budget_holds_against_renumbering_sparse_offsets_and_resizes() {
    let (t, sb) = setup_p2(SandboxConfig {
        max_file_size_mb: 1,
        ..wasm_config()
    });
    let len = |name: &str| {
        std::fs::metadata(t.ws().join(name))
            .map(|m| m.len())
            .unwrap_or(0)
    };
    // A file moved onto fd 1 is still a file (preview 1).
    let r = probe(&sb, &["renumber", "moved", "10000000"]).await;
    assert_eq!(r.outcome.kind, OutcomeKind::FileSizeLimit, "{r:?}");
    assert!(len("moved") <= 1 << 20, "{}", len("moved"));
    let r = probe(&sb, &["renumber", "moved-small", "100000"]).await;
    assert!(r.success() && r.stderr.contains("wrote"), "{r:?}");
    for (which, run) in [("p1", false), ("p2", true)] {
        let call = |args: Vec<String>| {
            let sb = &sb;
            async move {
                let a: Vec<&str> = args.iter().map(String::as_str).collect();
                if run {
                    probe2(sb, &a).await
                } else {
                    probe(sb, &a).await
                }
            }
        };
        // One byte at 1 TiB would make a 1 TiB file.
        let f = format!("sparse-{which}");
        let r = call(vec!["sparse".into(), f.clone(), (1u64 << 40).to_string()]).await;
        assert_eq!(r.outcome.kind, OutcomeKind::FileSizeLimit, "{which}: {r:?}");
        assert!(len(&f) <= 1 << 20, "{which}: {}", len(&f));
        // Allowed twin: inside the limit.
        let f = format!("sparse-ok-{which}");
        let r = call(vec!["sparse".into(), f.clone(), "100000".into()]).await;
        assert!(r.success(), "{which}: {r:?}");
        assert_eq!(len(&f), 100001, "{which}");
        // Three files grown to 512 KiB each: 1.5 MiB of growth in one call.
        let prefix = format!("grown-{which}-");
        let r = call(vec![
            "setsize".into(),
            prefix.clone(),
            "3".into(),
            "524288".into(),
        ])
        .await;
        assert_eq!(r.outcome.kind, OutcomeKind::FileSizeLimit, "{which}: {r:?}");
        let total: u64 = (0..3).map(|i| len(&format!("{prefix}{i}"))).sum();
        assert!(total <= 1 << 20, "{which}: {total}");
        // Allowed twin: two of them fit.
        let prefix = format!("grown-ok-{which}-");
        let r = call(vec!["setsize".into(), prefix, "2".into(), "524288".into()]).await;
        assert!(r.success(), "{which}: {r:?}");
    }
}

#[tokio::test]
async fn a_huge_file_named_as_a_tool_is_refused_without_reading_it() {
    let (t, sb) = setup(wasm_config());
    let f = std::fs::File::create(t.ws().join("huge.wasm")).unwrap();
    f.set_len(1 << 40).unwrap();
    drop(f);
    let r = sb.run(RunRequest::new(["./huge.wasm"])).await;
    assert_eq!(r.outcome.kind, OutcomeKind::PermissionDenied, "{r:?}");
    assert!(r.outcome.message.contains("too large"), "{r:?}");
    let r = sb
        .call_tool("./huge.wasm", &serde_json::json!({}), None)
        .await;
    assert_eq!(r.run.outcome.kind, OutcomeKind::PermissionDenied, "{r:?}");
    // Allowed twin: the probe next to it runs.
    let r = probe(&sb, &["exit", "0"]).await;
    assert!(r.success(), "{r:?}");
}

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
async fn probe_either(sb: &Sandbox, p2: bool, args: &[&str]) -> RunOutput {
    if p2 {
        probe2(sb, args).await
    } else {
        probe(sb, args).await
    }
}

const EPERM: &str = "ERR Operation not permitted (os error 63)\n";

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
        let (mut ok, mut refused) = (0, 0);
        // At least 3 rounds, and more (up to 30) until the race has gone
        // both ways: on a loaded machine the swapper may lag for a while.
        for round in 0..30 {
            if round >= 3 && ok > 0 && refused > 0 {
                break;
            }
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
            "{kind}: the race did not run both ways"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    swapper.join().unwrap();
    assert_eq!(threads_waiting_on_a_fifo(), 0);
}

/// From issue 15: a guest path far longer than any host takes (120 MiB made
/// toolhost hold three more copies for one `path_open`) gets `nametoolong`
/// at once, before it is copied for the check and the open, on preview 1
/// and 2. Allowed twin: a long path under the limit reaches the real open,
/// which reports the missing file.
#[tokio::test]
async fn a_path_longer_than_any_host_takes_is_refused_before_the_open() {
    let (t, sb) = setup_p2(wasm_config());
    let huge = "a".repeat(8 << 20);
    let long = format!("{}/x", "d".repeat(200));
    for p2 in [false, true] {
        let run = |path: &str| {
            let path = path.to_string();
            let sb = &sb;
            async move {
                let probe = if p2 { "./probe2.wasm" } else { "./probe.wasm" };
                sb.run(RunRequest::new([probe, "read", &path])).await
            }
        };
        // Preview 2 has no exit codes but 0 and 1.
        let failed = Some(if p2 { 1 } else { 3 });
        let r = run(&huge).await;
        assert_eq!(r.returncode, failed, "{r:?}");
        assert!(
            r.stdout.to_lowercase().contains("name too long")
                || r.stdout.to_lowercase().contains("too long"),
            "p2 {p2}: {}",
            &r.stdout[..r.stdout.len().min(200)]
        );
        let r = run(&long).await;
        assert_eq!(r.returncode, failed, "{r:?}");
        assert!(
            r.stdout.contains("No such file") || r.stdout.contains("not found"),
            "p2 {p2}: {}",
            &r.stdout[..r.stdout.len().min(200)]
        );
    }
    drop(t);
}

/// A wasm sandbox on `t`'s workspace with nothing protected.
pub(crate) fn unprotected(t: &Tmp) -> Sandbox {
    let config = SandboxConfig {
        protected_paths: vec![],
        ..wasm_config()
    };
    Sandbox::new([t.ws()], config).unwrap()
}

// Unix only: relative symlinks made with std::os::unix
#[cfg(unix)]
/// A `.git` and symlinks that climb with `..`: `a/b/up -> ../x`, `a/hop ->
/// b/up` (two hops), `a/b/cfg -> ../../.git/config`; the path `a/x`.
pub(crate) fn climbing_links(t: &Tmp) -> PathBuf {
    std::fs::create_dir_all(t.ws().join("a/b")).unwrap();
    std::fs::create_dir_all(t.ws().join(".git")).unwrap();
    t.write(".git/config", "[core]\n");
    for (target, at) in [
        ("../x", "a/b/up"),
        ("b/up", "a/hop"),
        ("../../.git/config", "a/b/cfg"),
    ] {
        std::os::unix::fs::symlink(target, t.ws().join(at)).unwrap();
    }
    t.ws().join("a/x")
}

// Unix only: Unix symlinks
#[cfg(unix)]
/// Under the guard an open for writing follows a final symlink itself, hop
/// by hop, naming each target from the call's directory: a target that
/// climbs with `..` lands where the host would put it, on preview 1 and 2
/// alike, and one that climbs into `.git` is refused, `.git/config` intact.
#[tokio::test]
async fn writes_through_symlinks_that_climb_land_where_the_host_puts_them() {
    let (t, sb) = setup_p2(wasm_config());
    std::fs::copy(probe_path(), t.ws().join("probe.wasm")).unwrap();
    let x = climbing_links(&t);
    for p2 in [false, true] {
        for (path, n) in [("a/b/up", 3), ("a/hop", 2)] {
            let _ = std::fs::remove_file(&x);
            let r = probe_either(&sb, p2, &["write", path, &n.to_string()]).await;
            assert_eq!(r.stdout, format!("wrote {n}\n"), "p2={p2} {path}: {r:?}");
            assert_eq!(std::fs::metadata(&x).unwrap().len(), n, "p2={p2} {path}");
            assert!(t.ws().join(path).is_symlink(), "p2={p2} {path}");
        }
        let r = probe_either(&sb, p2, &["write", "a/b/cfg", "1"]).await;
        assert!(r.stdout.starts_with("ERR"), "p2={p2} {r:?}");
        assert_eq!(
            std::fs::read_to_string(t.ws().join(".git/config")).unwrap(),
            "[core]\n"
        );
    }
}

// Unix only: Unix symlinks
#[cfg(unix)]
/// Times set through a link whose target ends in `/` (`L -> y/`): the host
/// follows `y` at the set itself, whatever it was at the check, so toolhost
/// sets them through a handle on what `y/` names (restricted inside `.git`).
/// A host thread swaps `y` between a dir and a link to `.git` meanwhile;
/// `.git`'s mtime never changes, and the touch lands while `y` is the dir,
/// on previews 1, 2 and 3. Allowed twin without the race: `L2 -> gd/`, `gd`
/// a link to a dir.
#[tokio::test]
async fn times_through_a_link_ending_in_a_slash_never_reach_git() {
    let (t, sb) = setup_p2(wasm_config());
    let ws = t.ws();
    let p3 = Path::new(env!("TOOLHOST_BUILD_GUEST_TESTS")).join("probe-p3.wasm");
    std::fs::copy(p3, ws.join("probe3.wasm")).unwrap();
    for d in [".git", "y", "git"] {
        std::fs::create_dir_all(ws.join(d)).unwrap();
    }
    for (target, at) in [(".git", "yl"), ("y/", "L"), ("git", "gd"), ("gd/", "L2")] {
        std::os::unix::fs::symlink(target, ws.join(at)).unwrap();
    }
    let old = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    let set_old = |p: &str| {
        std::fs::File::open(ws.join(p))
            .unwrap()
            .set_modified(old)
            .unwrap()
    };
    let mtime = |p: &str| std::fs::metadata(ws.join(p)).unwrap().modified().unwrap();
    // A touch by path in each preview: whether it landed.
    let touch = |kind: &'static str, path: &'static str| {
        let sb = &sb;
        async move {
            let r = match kind {
                "p1" => probe(sb, &["touch", path]).await,
                "p2" => probe2(sb, &["touch", path]).await,
                _ => {
                    sb.run(RunRequest::new(["./probe3.wasm", "touch", ".", path]))
                        .await
                }
            };
            let landed = r.stdout == "touched\n" || r.stdout == "ok\n";
            assert!(
                landed || r.returncode.is_some_and(|c| c != 0),
                "{kind}: {r:?}"
            );
            (landed, r)
        }
    };
    set_old(".git");
    for kind in ["p1", "p2", "p3"] {
        set_old("git");
        let (landed, r) = touch(kind, "L2").await;
        assert!(landed, "{kind}: {r:?}");
        assert_ne!(mtime("git"), old, "{kind}");
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (ws, stop) = (ws.clone(), stop.clone());
        std::thread::spawn(move || {
            let mv = |a: &str, b: &str| std::fs::rename(ws.join(a), ws.join(b)).unwrap();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                mv("y", "yd");
                mv("yl", "y");
                std::thread::sleep(Duration::from_micros(100));
                mv("y", "yl");
                mv("yd", "y");
                std::thread::sleep(Duration::from_micros(100));
            }
        })
    };
    for kind in ["p1", "p2", "p3"] {
        let (mut ok, mut refused) = (0, 0);
        for round in 0..600 {
            if round >= 200 && ok > 0 && refused > 0 {
                break;
            }
            let (landed, r) = touch(kind, "L").await;
            ok += usize::from(landed);
            refused += usize::from(!landed);
            assert_eq!(mtime(".git"), old, "{kind} round {round}: {r:?}");
        }
        assert!(
            ok > 0 && refused > 0,
            "{kind}: the race did not run both ways"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    swapper.join().unwrap();
    assert_eq!(mtime(".git"), old);
}

// Unix only: Unix symlinks and modes
#[cfg(unix)]
/// Case 44 for preview-2 components and preview-1 modules side by side, with
/// what the contract row does not try: a `.git` absent when the call starts
/// is refused by name, a cwd inside `.git` is read-only, a finer list keeps
/// `.git/index` writable but `.git` itself unmovable, and a hard link out of
/// `.git` is refused.
#[tokio::test]
async fn protected_paths_hold_for_modules_and_components() {
    for p2 in [false, true] {
        let (t, sb) = setup_p2(wasm_config());
        std::fs::copy(probe_path(), t.ws().join("probe.wasm")).unwrap();
        async fn run_probe(
            sb: &Sandbox,
            p2: bool,
            args: &[&str],
            cwd: Option<PathBuf>,
        ) -> RunOutput {
            let mut argv = vec![if p2 { "./probe2.wasm" } else { "./probe.wasm" }];
            argv.extend_from_slice(args);
            let mut req = RunRequest::new(argv);
            if let Some(c) = cwd {
                req = req.cwd(c);
            }
            sb.run(req).await
        }
        let go = |sb, args, cwd| run_probe(sb, p2, args, cwd);
        // No `.git` yet: creating one is refused; the allowed twin lands.
        let r = go(&sb, &["mkdir", ".git"], None).await;
        assert!(r.stdout.contains("ERR"), "p2={p2} {r:?}");
        assert!(!t.ws().join(".git").exists());
        let r = go(&sb, &["mkdir", "git"], None).await;
        assert!(r.stdout.contains("ok"), "p2={p2} {r:?}");
        // A repository: a cwd inside it is read-only, a hard link out refused.
        std::fs::create_dir_all(t.ws().join(".git/hooks")).unwrap();
        std::fs::write(t.ws().join(".git/config"), "[core]\n").unwrap();
        let probe = if p2 { "probe2.wasm" } else { "probe.wasm" };
        std::fs::copy(t.ws().join(probe), t.ws().join(".git/hooks").join(probe)).unwrap();
        let r = go(&sb, &["write", "x", "1"], Some(t.ws().join(".git/hooks"))).await;
        assert!(r.stdout.contains("ERR"), "p2={p2} {r:?}");
        assert!(!t.ws().join(".git/hooks/x").exists());
        let r = go(&sb, &["link", ".git/config", "cfg"], None).await;
        assert!(r.stdout.contains("ERR"), "p2={p2} {r:?}");
        assert!(!t.ws().join("cfg").exists());
        // Times by path: through a symlink into `.git`, or on `.git` named
        // by `.` or `..`, refused; `.git`'s and its file's mtimes unchanged.
        let old = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        let kept = [".git", ".git/config", ".git/hooks"];
        for p in kept {
            std::fs::File::open(t.ws().join(p))
                .unwrap()
                .set_modified(old)
                .unwrap();
        }
        std::os::unix::fs::symlink(".git/config", t.ws().join("cfg-link")).unwrap();
        std::os::unix::fs::symlink(".git", t.ws().join("gl")).unwrap();
        std::os::unix::fs::symlink(".git/hooks", t.ws().join("hl")).unwrap();
        for args in [
            &["touch", "cfg-link"][..],
            &["touch", ".git/."],
            &["touch", ".git/hooks/.."],
            // A trailing slash: the host follows the link even unfollowed.
            &["touch", "gl/", "nofollow"],
            &["touch", "hl/", "nofollow"],
            &["touch", "gl/"],
            // Through a descriptor opened for reading (by name, through a
            // symlink, on `.git` itself) or for writing.
            &["ftouch", ".git/config", "r"],
            &["ftouch", "cfg-link", "r"],
            &["ftouch", ".git", "r"],
            &["ftouch", ".git/config", "w"],
        ] {
            let r = go(&sb, args, None).await;
            assert!(r.stdout.contains("ERR"), "p2={p2} {args:?}: {r:?}");
        }
        for p in kept {
            let m = std::fs::metadata(t.ws().join(p))
                .unwrap()
                .modified()
                .unwrap();
            assert_eq!(m, old, "p2={p2} {p}");
        }
        std::os::unix::fs::symlink("git", t.ws().join("git-link")).unwrap();
        for args in [
            &["touch", "git-link"][..],
            &["touch", "git-link/", "nofollow"],
        ] {
            let r = go(&sb, args, None).await;
            assert_eq!(r.stdout, "touched\n", "p2={p2} {args:?}: {r:?}");
        }
        // Outside `.git`, a file opened for writing is touched through its
        // descriptor; one opened for reading is refused while anything is
        // protected, and touched when nothing is.
        let f = t.ws().join("git/f");
        let set_old = || {
            std::fs::write(&f, "x").unwrap();
            std::fs::File::open(&f).unwrap().set_modified(old).unwrap();
        };
        let mtime = || std::fs::metadata(&f).unwrap().modified().unwrap();
        set_old();
        let r = go(&sb, &["ftouch", "git/f", "w"], None).await;
        assert_eq!(r.stdout, "touched\n", "p2={p2} {r:?}");
        assert_ne!(mtime(), old, "p2={p2}");
        set_old();
        let r = go(&sb, &["ftouch", "git/f", "r"], None).await;
        assert!(r.stdout.starts_with("ERR"), "p2={p2} {r:?}");
        assert_eq!(mtime(), old, "p2={p2}");
        let open = unprotected(&t);
        let r = go(&open, &["ftouch", "git/f", "r"], None).await;
        assert_eq!(r.stdout, "touched\n", "p2={p2} {r:?}");
        assert_ne!(mtime(), old, "p2={p2}");
        // A finer list: `.git/index` is written, `.git/hooks` and `.git` are not.
        let fine = Sandbox::new(
            [t.ws()],
            SandboxConfig {
                protected_paths: vec![".git/hooks".into(), ".git/config".into()],
                ..wasm_config()
            },
        )
        .unwrap();
        let r = go(&fine, &["write", ".git/index", "3"], None).await;
        assert!(r.stdout.contains("wrote 3"), "p2={p2} {r:?}");
        for args in [
            &["write", ".git/hooks/pre-commit", "1"][..],
            &["append", ".git/config", "X"],
            &["rename", ".git", "g2"],
            &["rename", ".git/hooks", ".git/h2"],
        ] {
            let r = go(&fine, args, None).await;
            assert!(r.stdout.contains("ERR"), "p2={p2} {args:?}: {r:?}");
        }
        assert!(!t.ws().join(".git/hooks/pre-commit").exists());
        assert_eq!(
            std::fs::read_to_string(t.ws().join(".git/config")).unwrap(),
            "[core]\n"
        );
        assert!(t.ws().join(".git/hooks").is_dir() && !t.ws().join("g2").exists());
    }
}
