//! The `wasm` backend (docs/src/attacks.md W cases), the built-in guest tools against
//! native coreutils on the same fixtures, the registry and the compile cache.
//! The guests are built by build.rs (`TOOLHOST_BUILD_GUEST_TESTS`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use toolhost::config::{CpuMeter, WasmConfig};
use toolhost::{
    BackendChoice, BackendKind, OutcomeKind, RunOutput, RunRequest, Sandbox, SandboxConfig,
};

use crate::util::*;

mod components;
mod files;
#[cfg(target_os = "linux")]
mod hangfs;
mod special;
mod tools;

#[allow(unused_imports)]
pub(crate) use components::*;
#[allow(unused_imports)]
pub(crate) use files::*;
#[allow(unused_imports)]
pub(crate) use special::*;
#[allow(unused_imports)]
pub(crate) use tools::*;

pub(crate) fn probe_path() -> PathBuf {
    let p = Path::new(env!("TOOLHOST_BUILD_GUEST_TESTS")).join("probe.wasm");
    assert!(p.exists(), "{} is missing: build.rs builds it", p.display());
    p
}

pub(super) fn builtin_tools_built() {
    let p = Path::new(env!("TOOLHOST_BUILD_GUEST_DIST")).join("cat.wasm");
    assert!(p.exists(), "{} is missing: build.rs builds it", p.display());
}

/// One cache dir for the whole test process, so every test shares one engine.
pub(super) fn cache_dir() -> PathBuf {
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

/// A loaded tool is found again by its file's identity and version: the
/// same file runs from memory, a file rewritten in place or replaced by a
/// symlink is looked at anew, never run from what was loaded before.
#[tokio::test]
async fn a_changed_tool_file_is_never_run_from_memory() {
    let (t, sb) = setup(wasm_config());
    let tool = t.ws().join("t.wasm");
    std::fs::copy(probe_path(), &tool).unwrap();
    let run = || sb.run(RunRequest::new(["./t.wasm", "args", "x"]));
    let r = run().await;
    assert_eq!(r.stdout, "t\nargs\nx\n", "{r:?}");
    let r = run().await;
    assert_eq!(
        r.stdout, "t\nargs\nx\n",
        "the same file, from memory: {r:?}"
    );
    // Rewritten in place (same inode): not a module any more. On Unix with
    // the same size and its mtime set back too (the key holds the ctime,
    // which no one can set back); Windows keys by size and mtime only.
    let meta = std::fs::metadata(&tool).unwrap();
    let mtime = meta.modified().unwrap();
    let mut junk = b"\0asm\x01\0\0\0 not a module".to_vec();
    if cfg!(unix) {
        junk.resize(meta.len() as usize, b'x');
    }
    std::fs::write(&tool, &junk).unwrap();
    if cfg!(unix) {
        std::fs::File::options()
            .write(true)
            .open(&tool)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        assert_eq!(std::fs::metadata(&tool).unwrap().modified().unwrap(), mtime);
    }
    let r = run().await;
    assert!(!r.success(), "the old module ran: {r:?}");
    assert_eq!(r.stdout, "", "{r:?}");
    // A plan kept and run again looks at the file again: replaced by
    // rename, then removed.
    std::fs::copy(probe_path(), &tool).unwrap();
    let plan = sb
        .plan(&RunRequest::new(["./t.wasm", "args", "x"]))
        .unwrap();
    assert_eq!(sb.run_plan(&plan).await.stdout, "t\nargs\nx\n");
    std::fs::write(t.ws().join("t.new"), &junk).unwrap();
    std::fs::rename(t.ws().join("t.new"), &tool).unwrap();
    let r = sb.run_plan(&plan).await;
    assert!(
        !r.success() && r.stdout.is_empty(),
        "a kept plan ran the old module: {r:?}"
    );
    std::fs::remove_file(&tool).unwrap();
    let r = sb.run_plan(&plan).await;
    assert_eq!(r.outcome.kind, OutcomeKind::NotFound, "{r:?}");
    std::fs::write(&tool, &junk).unwrap();
    // A symlink to a tool of the workspace: followed inside, and run (under
    // the name of the file it leads to).
    std::fs::remove_file(&tool).unwrap();
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink("probe.wasm", &tool).unwrap();
        let r = run().await;
        assert_eq!(r.stdout, "probe\nargs\nx\n", "{r:?}");
        // ... and a symlink out of the sandbox is refused, even to a copy of
        // the very tool loaded above.
        let outside = tempfile::tempdir().unwrap();
        std::fs::copy(probe_path(), outside.path().join("p.wasm")).unwrap();
        std::fs::remove_file(&tool).unwrap();
        std::os::unix::fs::symlink(outside.path().join("p.wasm"), &tool).unwrap();
        let r = run().await;
        assert!(!r.success(), "ran through a symlink out: {r:?}");
        assert_eq!(r.stdout, "", "{r:?}");
    }
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
    // A guest never interrupted (no epoch tick) would spin for good.
    let _hang = HangGuard::new("attack 18", Duration::from_secs(120));
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

/// A copy of the probe made unique by a custom section, under `name.wasm`
/// in the workspace: no engine and no disk cache has its code yet.
fn unique_probe(t: &Tmp, name: &str) -> String {
    let mut m = std::fs::read(probe_path()).unwrap();
    let salt = format!(
        "{name}-{:?}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
    );
    m.push(0);
    m.push((salt.len() + 1) as u8);
    m.push(salt.len() as u8);
    m.extend(salt.as_bytes());
    std::fs::write(t.ws().join(format!("{name}.wasm")), m).unwrap();
    format!("./{name}.wasm")
}

/// With `[wasm] baseline_compile`, a tool's first call runs Winch's code
/// (Linux x86-64; elsewhere Cranelift's). That code is held to the same
/// limits: CPU under either meter, the wall-clock timeout, memory. Each
/// check is the first call of a module no engine has seen (and its cache
/// dir is new); the allowed twins are first calls too.
#[tokio::test]
async fn a_first_call_on_baseline_code_is_held_to_every_limit() {
    let _hang = HangGuard::new("baseline limits", Duration::from_secs(180));
    let cache = tempfile::tempdir().unwrap();
    let baseline = |cfg: SandboxConfig, dir: &str| {
        let mut cfg = cfg;
        cfg.wasm.cache_dir = Some(cache.path().join(dir));
        cfg.wasm.baseline_compile = true;
        cfg
    };
    for meter in [CpuMeter::Epoch, CpuMeter::Fuel] {
        let mut cfg = baseline(wasm_config(), &format!("{meter:?}"));
        cfg.wasm.cpu_meter = meter;
        cfg.max_cpu_seconds = 1;
        let (t, sb) = setup(cfg);
        let spin = unique_probe(&t, "spin");
        let r = sb.run(RunRequest::new([spin.as_str(), "spin"])).await;
        assert_eq!(r.outcome.kind, OutcomeKind::CpuLimit, "{meter:?}: {r:?}");
        assert!(r.duration < Duration::from_secs(10), "{:?}", r.duration);
        // Allowed twin: bounded work finishes.
        let count = unique_probe(&t, "count");
        let r = sb
            .run(RunRequest::new([count.as_str(), "count", "1000"]))
            .await;
        assert!(r.success(), "{meter:?}: {r:?}");
        sb.shutdown().await;
    }
    let (t, sb) = setup(baseline(
        SandboxConfig {
            max_cpu_seconds: 0,
            timeout: Duration::from_secs(1),
            ..wasm_config()
        },
        "timeout",
    ));
    let spin = unique_probe(&t, "spin");
    let r = sb.run(RunRequest::new([spin.as_str(), "spin"])).await;
    assert!(r.timed_out, "{r:?}");
    assert!(r.duration < Duration::from_secs(3), "{:?}", r.duration);
    sb.shutdown().await;
    let (t, sb) = setup(baseline(
        SandboxConfig {
            max_memory_mb: 64,
            ..wasm_config()
        },
        "memory",
    ));
    let alloc = unique_probe(&t, "alloc");
    let r = sb
        .run(RunRequest::new([alloc.as_str(), "alloc", "100000"]))
        .await;
    assert_eq!(r.outcome.kind, OutcomeKind::MemoryLimit, "{r:?}");
    assert!(r.outcome.message.contains("64 MiB"), "{r:?}");
    // Allowed twin: under the limit.
    let small = unique_probe(&t, "small");
    let r = sb
        .run(RunRequest::new([small.as_str(), "alloc", "16"]))
        .await;
    assert_eq!(r.stdout, "allocated 16 MiB\n", "{r:?}");
    sb.shutdown().await;
}

/// The detached `toolhost tier-up` a CLI call leaves holds nothing of the
/// call's caller: a descriptor the caller gave beyond stdio (here the
/// output pipe, also as fd 3) closes when the call exits, while the helper
/// still compiles (a module slow for Cranelift, quick for Winch); the
/// helper has no environment. Allowed twin: the call's own output arrives.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[test]
fn the_detached_compile_holds_no_descriptor_of_the_caller() {
    builtin_tools_built();
    let t = Tmp::new();
    let salt = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    std::fs::write(
        t.ws().join("slow.wasm"),
        crate::contract::slow_to_compile_module(10_000, salt),
    )
    .unwrap();
    let cache = t.root.join("cache");
    let cfg = t.root.join("cfg.toml");
    std::fs::write(
        &cfg,
        format!("[wasm]\ncache_dir = {:?}\n", cache.to_string_lossy()),
    )
    .unwrap();
    let script = format!(
        "exec 3>&1; {} run --config {} --backend wasm --timeout 60 -- ./slow.wasm; echo exit $?",
        toolhost_bin().display(),
        cfg.display()
    );
    let out = Command::new("sh")
        .args(["-c", &script])
        .current_dir(t.ws())
        .env("SECRET_TOKEN", "canary-7f3a")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("exit 0"),
        "{out:?}"
    );
    // The pipe closed at the call's exit: the helper must still be there.
    let marker = cache.to_string_lossy().to_string();
    let helper = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| {
                    let c = String::from_utf8_lossy(&c);
                    c.contains("tier-up") && c.contains(&marker)
                })
                .unwrap_or(false)
        });
    let Some(pid) = helper else {
        panic!("no helper compiling after the call: did the pipe wait for it?");
    };
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    assert!(environ.is_empty(), "{}", String::from_utf8_lossy(&environ));
    // Its own descriptors only: the bytes (a memfd, as stdin), /dev/null,
    // its own /proc files (the engine's pagemap), and the cache's files
    // (its place, its turn, its claim, an entry being written), however
    // far along it is; no pipe, socket or file of the caller's. (A count
    // of them, as before, failed when it looked late.)
    let held: Vec<PathBuf> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .collect()
        })
        .unwrap_or_default();
    assert!(!held.is_empty(), "the helper's descriptors were not read");
    let theirs: Vec<&PathBuf> = held
        .iter()
        .filter(|p| {
            !(p.as_path() == Path::new("/dev/null")
                || p.to_string_lossy().starts_with("/memfd:")
                || p.starts_with(format!("/proc/{pid}"))
                || p.starts_with(&cache))
        })
        .collect();
    assert!(
        theirs.is_empty(),
        "the helper holds {theirs:?} (all: {held:?})"
    );
    // Done with it: no compile left behind by this test.
    let _ = Command::new("kill").arg(pid.to_string()).status();
}

/// Appends a module section: its id, its size and `body`.
fn section(id: u8, body: &[u8], out: &mut Vec<u8>) {
    out.push(id);
    uleb(body.len() as u64, out);
    out.extend_from_slice(body);
}

/// A module with `memories` linear memories of `pages` 64 KiB pages each
/// and, if given, a funcref table of `table` elements; its `_start` returns.
fn module_with(memories: usize, pages: u64, table: Option<u64>) -> Vec<u8> {
    let mut m = b"\0asm\x01\0\0\0".to_vec();
    section(1, &[1, 0x60, 0, 0], &mut m);
    section(3, &[1, 0], &mut m);
    if let Some(n) = table {
        let mut t = vec![1, 0x70, 0];
        uleb(n, &mut t);
        section(4, &t, &mut m);
    }
    let mut mem = Vec::new();
    uleb(memories as u64, &mut mem);
    for _ in 0..memories {
        mem.push(0);
        uleb(pages, &mut mem);
    }
    section(5, &mem, &mut m);
    section(7, b"\x01\x06_start\x00\x00", &mut m);
    section(10, &[1, 2, 0, 0x0b], &mut m);
    m
}

/// A module whose one memory may not grow past its first page, and whose
/// `_start` tries `memory.grow 1` `times` times (each fails, as it must).
fn module_growing_past_its_maximum(times: usize) -> Vec<u8> {
    let mut m = b"\0asm\x01\0\0\0".to_vec();
    section(1, &[1, 0x60, 0, 0], &mut m);
    section(3, &[1, 0], &mut m);
    section(5, &[1, 1, 1, 1], &mut m);
    section(7, b"\x01\x06_start\x00\x00", &mut m);
    let mut body = vec![0];
    for _ in 0..times {
        body.extend([0x41, 0x01, 0x40, 0x00, 0x1a]);
    }
    body.push(0x0b);
    let mut code = vec![1];
    uleb(body.len() as u64, &mut code);
    code.extend(body);
    section(10, &code, &mut m);
    m
}

/// Attack 17 on every engine: a store's memories count together against
/// `max_memory_mb`, and their number and a table's size are the pool's,
/// whether the tool runs on baseline code (an engine without the pool) or
/// on Cranelift's (with it), or on an engine without the pool
/// (`pool_size = 0`). Allowed twins: one memory, a small table.
#[tokio::test]
async fn memories_and_tables_are_held_to_the_limits_on_every_engine() {
    let cache = tempfile::tempdir().unwrap();
    for (name, baseline, pool) in [
        ("baseline", true, 64),
        ("optimized", false, 64),
        ("unpooled", false, 0),
    ] {
        let mut cfg = SandboxConfig {
            max_memory_mb: 24,
            ..wasm_config()
        };
        cfg.wasm.cache_dir = Some(cache.path().join(name));
        cfg.wasm.baseline_compile = baseline;
        cfg.wasm.pool_size = pool;
        let (t, sb) = setup(cfg);
        let run = |file: &str, bytes: Vec<u8>| {
            std::fs::write(t.ws().join(file), bytes).unwrap();
            sb.run(RunRequest::new([format!("./{file}")]))
        };
        // Two memories of 16 MiB: 32 MiB in all, over 24.
        let r = run("two.wasm", module_with(2, 256, None)).await;
        assert_eq!(r.outcome.kind, OutcomeKind::MemoryLimit, "{name}: {r:?}");
        // A hundred small ones: more memories than a store may hold.
        let r = run("many.wasm", module_with(100, 1, None)).await;
        assert!(!r.success(), "{name}: a hundred memories: {r:?}");
        // A table past the pool's 20,000 elements.
        let r = run("table.wasm", module_with(1, 1, Some(30_000))).await;
        assert!(!r.success(), "{name}: a large table: {r:?}");
        // Allowed twins.
        let r = run("one.wasm", module_with(1, 256, None)).await;
        assert!(r.success(), "{name}: one memory of 16 MiB: {r:?}");
        let r = run("small.wasm", module_with(1, 1, Some(10_000))).await;
        assert!(r.success(), "{name}: a table of 10,000: {r:?}");
        // Growths past a memory's own maximum fail and count for nothing:
        // 300 of them (19 MiB asked) leave a 64 KiB memory in the limit.
        let r = run("grow.wasm", module_growing_past_its_maximum(300)).await;
        assert!(r.success(), "{name}: failed growths: {r:?}");
        // Two memories of one page: what the pool allows a module.
        let r = run("pair.wasm", module_with(2, 1, None)).await;
        assert!(r.success(), "{name}: two small memories: {r:?}");
        sb.shutdown().await;
    }
}

/// A sandbox's shutdown waits for the optimized compile that follows a
/// baseline one: the disk cache then holds the tool's code, and a new
/// process would find it.
#[tokio::test]
async fn shutdown_leaves_the_optimized_code_in_the_disk_cache() {
    let cache = tempfile::tempdir().unwrap();
    let mut cfg = wasm_config();
    cfg.wasm.cache_dir = Some(cache.path().to_path_buf());
    cfg.wasm.baseline_compile = true;
    let (t, sb) = setup(cfg);
    let tool = unique_probe(&t, "fresh");
    let r = sb.run(RunRequest::new([tool.as_str(), "args", "x"])).await;
    assert_eq!(r.stdout, "fresh\nargs\nx\n", "{r:?}");
    sb.shutdown().await;
    let entries: Vec<_> = std::fs::read_dir(cache.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".cwasm"))
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    // The same bytes compiled by the shared engine are a cache hit.
    let backend = toolhost::backend::wasm::WasmBackend::new(&sb.config().wasm).unwrap();
    let bytes = std::fs::read(t.ws().join("fresh.wasm")).unwrap();
    assert!(backend.compile_cached(&bytes).unwrap());
}

/// The `.cwasm` entries of a compile cache dir.
fn cache_entries(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
                .collect()
        })
        .unwrap_or_default()
}

/// A CLI call of a tool no cache holds runs it and exits; with baseline
/// compiles (Linux x86-64) the optimized code is compiled afterwards by a
/// detached `toolhost tier-up`, whose entry then appears in the cache and
/// is the one a cache lookup of the same bytes finds. The twin, with
/// `baseline_compile = false`, has the entry in place when the call exits.
#[test]
fn a_cold_cli_call_leaves_optimized_code_in_the_cache() {
    builtin_tools_built();
    for baseline in [true, false] {
        let t = Tmp::new();
        let tool = unique_probe(&t, "cold");
        let cache = t.root.join("cache");
        let cfg = t.root.join("cfg.toml");
        std::fs::write(
            &cfg,
            format!(
                "[wasm]\ncache_dir = {:?}\nbaseline_compile = {baseline}\n",
                cache.to_string_lossy()
            ),
        )
        .unwrap();
        let out = toolhost(
            &t.ws(),
            &[
                "run",
                "--config",
                cfg.to_str().unwrap(),
                "--backend",
                "wasm",
                "--",
                &tool,
                "args",
                "x",
            ],
            &[],
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "cold\nargs\nx\n",
            "{out:?}"
        );
        if !baseline || !cfg!(all(target_os = "linux", target_arch = "x86_64")) {
            assert_eq!(cache_entries(&cache).len(), 1, "baseline {baseline}");
            continue;
        }
        let waited = std::time::Instant::now();
        while cache_entries(&cache).is_empty() && waited.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(10));
        }
        let entries = cache_entries(&cache);
        assert_eq!(entries.len(), 1, "{entries:?}");
        let mut wasm = WasmConfig::default();
        wasm.cache_dir = Some(cache.clone());
        wasm.baseline_compile = false;
        let backend = toolhost::backend::wasm::WasmBackend::new(&wasm).unwrap();
        let bytes = std::fs::read(t.ws().join("cold.wasm")).unwrap();
        assert!(
            backend.compile_cached(&bytes).unwrap(),
            "the helper's entry is not the engine's"
        );
        assert_eq!(cache_entries(&cache), entries);
    }
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

/// A guest's sleep is ended by the timeout, also when its file operations
/// run on the thread polling the call (Linux, once the FIFO watchdog runs):
/// wasmtime-wasi would then sleep that thread (`sleep_p1` keeps a timer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attack_22_blocked_in_a_host_call_still_times_out() {
    let (_t, sb) = setup(SandboxConfig {
        timeout: Duration::from_secs(1),
        ..wasm_config()
    });
    #[cfg(target_os = "linux")]
    assert!(toolhost::backend::wasm::fifo_watchdog_available());
    let r = probe(&sb, &["sleep", "30"]).await;
    #[cfg(target_os = "linux")]
    assert_eq!(
        toolhost::backend::wasm::last_call_file_io_inline(),
        Some(true)
    );
    assert!(r.timed_out, "{r:?}");
    assert_eq!(r.outcome.kind, OutcomeKind::TimedOut);
    assert!(r.duration < Duration::from_secs(3), "{:?}", r.duration);
    // Allowed twin: a short sleep completes, and a sleep of a second wakes
    // after a second with the event the guest's libc checks.
    let (_t, sb) = setup(wasm_config());
    let r = probe(&sb, &["sleep", "0"]).await;
    assert_eq!(r.stdout, "woke\n");
    let r = probe(&sb, &["sleep", "1"]).await;
    assert_eq!(r.stdout, "woke\n", "{r:?}");
    assert!(r.duration >= Duration::from_secs(1), "{:?}", r.duration);
}

/// A preview-1 call's file operations run on a thread of their own on any
/// filesystem (whatever waits there holds that thread, see the tests
/// below), on a multi-thread runtime: in a temp dir, and with an allowed
/// dir on procfs. Not on a single-thread runtime. The files read the same.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_io_runs_inline_except_on_a_single_thread_runtime() {
    use toolhost::backend::wasm::last_call_file_io_inline as inline;
    builtin_tools_built();
    assert!(toolhost::backend::wasm::fifo_watchdog_available());
    let t = Tmp::new();
    std::fs::write(t.ws().join("note.txt"), "one\ntwo\nthree\n").unwrap();
    let sb = t.sandbox(wasm_config());
    let r = sb.run(RunRequest::new(["wc", "-l", "note.txt"])).await;
    assert_eq!(r.stdout.trim(), "3 note.txt", "{r:?}");
    assert_eq!(inline(), Some(true));
    let sb = Sandbox::new(
        [
            toolhost::AllowedDirSpec::read_write(t.ws()),
            toolhost::AllowedDirSpec::read_only("/proc"),
        ],
        wasm_config(),
    )
    .unwrap();
    let r = sb
        .run(RunRequest::new(["cat", "/proc/sys/kernel/ostype"]))
        .await;
    assert_eq!(r.stdout, "Linux\n", "{r:?}");
    assert_eq!(inline(), Some(true));
    let r = sb.run(RunRequest::new(["wc", "-l", "note.txt"])).await;
    assert_eq!(r.stdout.trim(), "3 note.txt", "{r:?}");
    assert_eq!(inline(), Some(true));
    // A single-thread runtime has no other thread for the timeout: the pool.
    let ws = t.ws().to_path_buf();
    let (out, was) = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let sb = Sandbox::new([ws], wasm_config()).unwrap();
        let r = rt.block_on(sb.run(RunRequest::new(["wc", "-l", "note.txt"])));
        (r.stdout, inline())
    })
    .join()
    .unwrap();
    assert_eq!(out.trim(), "3 note.txt");
    assert_eq!(was, Some(false));
}

/// A call that moves runs on a runner bound to one CPU (its caller's) from
/// its start, and one that runs past an epoch tick (10 ms) is let go of
/// it: `sha256sum` of 32 MiB takes a few hundred ms here. The twin: `wc -l`
/// of a small file ends long before a tick (of five such calls, at least
/// one is never let go; a tick may fall in one).
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_call_is_held_to_one_cpu_only_until_a_tick() {
    use toolhost::backend::wasm::last_call_file_io_inline as inline;
    use toolhost::backend::wasm::last_moved_call_cpu as cpu;
    builtin_tools_built();
    assert!(toolhost::backend::wasm::fifo_watchdog_available());
    let t = Tmp::new();
    std::fs::write(t.ws().join("note.txt"), "one\ntwo\nthree\n").unwrap();
    std::fs::write(t.ws().join("big"), vec![7u8; 32 << 20]).unwrap();
    let sb = t.sandbox(wasm_config());
    let r = sb.run(RunRequest::new(["sha256sum", "big"])).await;
    assert!(r.success(), "{r:?}");
    assert_eq!(inline(), Some(true));
    assert_eq!(
        cpu(),
        Some((true, true)),
        "bound at its start, let go at a tick"
    );
    let mut short = Vec::new();
    for _ in 0..5 {
        let r = sb.run(RunRequest::new(["wc", "-l", "note.txt"])).await;
        assert_eq!(r.stdout.trim(), "3 note.txt", "{r:?}");
        assert_eq!(inline(), Some(true));
        short.push(cpu());
    }
    assert!(
        short.iter().all(|c| matches!(c, Some((true, _)))),
        "{short:?}"
    );
    assert!(short.contains(&Some((true, false))), "{short:?}");
}

/// The caller of a short moved call, alone in its engine, waits for it on
/// its own CPU, given to the runner (`Yielded`), and gets the same result.
/// The twins: while another call of the engine is in flight (a probe that
/// sleeps, holding its inline slot) the caller sleeps at once (`Slept`);
/// a long moved call (`sha256sum` of 32 MiB) runs the wait out, and the
/// caller then sleeps at once for its next moved calls.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_short_moved_call_is_awaited_on_its_cpu() {
    use toolhost::backend::wasm::MovedCallWait as Wait;
    use toolhost::backend::wasm::last_call_file_io_inline as inline;
    use toolhost::backend::wasm::last_moved_call_wait as wait;
    builtin_tools_built();
    assert!(toolhost::backend::wasm::fifo_watchdog_available());
    let t = Tmp::new();
    std::fs::copy(probe_path(), t.ws().join("probe.wasm")).unwrap();
    std::fs::write(t.ws().join("note.txt"), "one\ntwo\nthree\n").unwrap();
    std::fs::write(t.ws().join("big"), vec![7u8; 32 << 20]).unwrap();
    let sb = std::sync::Arc::new(t.sandbox(wasm_config()));
    let wc = || RunRequest::new(["wc", "-l", "note.txt"]);
    // Loaded once first: the holder below is then in flight within the
    // half second (no compile on its path).
    let r = probe(&sb, &["read", "note.txt"]).await;
    assert_eq!(r.stdout, "one\ntwo\nthree\n", "{r:?}");

    // Until one wait sees its result: the engine is the process's, so a
    // call of another test in flight makes this one sleep at once, and a
    // wait that runs out on a loaded machine makes the next 64 sleep. The
    // last one did, so this thread is not backing off below.
    let mut seen = Vec::new();
    let until = std::time::Instant::now() + Duration::from_secs(30);
    while std::time::Instant::now() < until {
        let r = sb.run(wc()).await;
        assert_eq!(r.stdout.trim(), "3 note.txt", "{r:?}");
        assert_eq!(inline(), Some(true));
        seen.push(wait());
        if wait() == Some(Wait::Yielded) {
            break;
        }
    }
    assert_eq!(
        seen.last(),
        Some(&Some(Wait::Yielded)),
        "{:?}",
        &seen[seen.len().saturating_sub(20)..]
    );

    let holder = {
        let sb = sb.clone();
        tokio::spawn(async move {
            sb.run(RunRequest::new([
                "./probe.wasm",
                "sleepread",
                "3000",
                "note.txt",
            ]))
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    for _ in 0..5 {
        let r = sb.run(wc()).await;
        assert_eq!(r.stdout.trim(), "3 note.txt", "{r:?}");
        assert_eq!(inline(), Some(true));
        assert_eq!(wait(), Some(Wait::Slept), "another call was in flight");
    }
    let held = holder.await.unwrap();
    assert_eq!(held.stdout, "one\ntwo\nthree\n", "{held:?}");

    // A long call, when alone (see above), runs its wait out; the next
    // moved call on this thread then sleeps at once.
    let mut long = Vec::new();
    while std::time::Instant::now() < until + Duration::from_secs(30) {
        let r = sb.run(RunRequest::new(["sha256sum", "big"])).await;
        assert!(r.success(), "{r:?}");
        long.push(wait());
        if wait() == Some(Wait::RanOut) {
            break;
        }
    }
    assert_eq!(long.last(), Some(&Some(Wait::RanOut)), "{long:?}");
    let r = sb.run(wc()).await;
    assert_eq!(r.stdout.trim(), "3 note.txt", "{r:?}");
    assert_eq!(wait(), Some(Wait::Slept), "backed off after a wait ran out");
}

/// Whether a mounting test can run (root), with the built-in tools built
/// and the FIFO watchdog up (inline file I/O needs it).
#[cfg(target_os = "linux")]
fn ready_to_mount() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: mounting needs root");
        return false;
    }
    builtin_tools_built();
    assert!(toolhost::backend::wasm::fifo_watchdog_available());
    true
}

/// A size or an index in the wasm binary format (`uleb`).
fn leb(n: usize, out: &mut Vec<u8>) {
    uleb(n as u64, out);
}

/// A preview-1 module: `imports` from `wasi_snapshot_preview1`, each
/// `(name, params, results)` in value types (0x7f i32, 0x7e i64) and
/// numbered from 0 in order; one page of memory holding `data` at 0; and
/// a `_start` whose code is `body` (without its final `end`).
fn p1_module(imports: &[(&str, &[u8], &[u8])], data: &[u8], body: &[u8]) -> Vec<u8> {
    fn section(id: u8, content: Vec<u8>, m: &mut Vec<u8>) {
        m.push(id);
        leb(content.len(), m);
        m.extend(content);
    }
    fn name(s: &[u8], out: &mut Vec<u8>) {
        leb(s.len(), out);
        out.extend(s);
    }
    let mut m = b"\0asm\x01\0\0\0".to_vec();
    let mut types = Vec::new();
    leb(imports.len() + 1, &mut types);
    for (_, params, results) in imports {
        types.push(0x60);
        leb(params.len(), &mut types);
        types.extend(*params);
        leb(results.len(), &mut types);
        types.extend(*results);
    }
    types.extend([0x60, 0, 0]);
    section(1, types, &mut m);
    let mut imps = Vec::new();
    leb(imports.len(), &mut imps);
    for (i, (n, _, _)) in imports.iter().enumerate() {
        name(b"wasi_snapshot_preview1", &mut imps);
        name(n.as_bytes(), &mut imps);
        imps.push(0);
        leb(i, &mut imps);
    }
    section(2, imps, &mut m);
    let mut funcs = vec![1];
    leb(imports.len(), &mut funcs);
    section(3, funcs, &mut m);
    section(5, vec![1, 0, 1], &mut m);
    let mut exports = vec![2];
    name(b"memory", &mut exports);
    exports.extend([2, 0]);
    name(b"_start", &mut exports);
    exports.push(0);
    leb(imports.len(), &mut exports);
    section(7, exports, &mut m);
    let mut code = vec![0u8];
    code.extend(body);
    code.push(0x0b);
    let mut codes = vec![1];
    leb(code.len(), &mut codes);
    codes.extend(code);
    section(10, codes, &mut m);
    let mut datas = vec![1, 0, 0x41, 0, 0x0b];
    leb(data.len(), &mut datas);
    datas.extend(data);
    section(11, datas, &mut m);
    m
}

/// A preview-1 module whose `_start` sleeps for `sleep_ms` (one relative
/// monotonic clock: a timer), then calls `fd_filestat_get` on fds 3 to 6 (a
/// call's preopens) and exits 0. No other host call: no open, no path.
fn sleep_then_fstat_module(sleep_ms: u64) -> Vec<u8> {
    const I32: u8 = 0x7f;
    let imports: &[(&str, &[u8], &[u8])] = &[
        ("poll_oneoff", &[I32; 4], &[I32]),
        ("fd_filestat_get", &[I32; 2], &[I32]),
        ("proc_exit", &[I32], &[]),
    ];
    // A clock subscription at 0 (userdata 0, tag 0, monotonic, relative).
    let mut data = vec![0u8; 48];
    data[16] = 1;
    data[24..32].copy_from_slice(&(sleep_ms * 1_000_000).to_le_bytes());
    // poll_oneoff(0, 64, 1, 128); drop.
    let mut body = vec![
        0x41, 0, 0x41, 0xc0, 0, 0x41, 1, 0x41, 0x80, 1, 0x10, 0, 0x1a,
    ];
    for fd in 3..=6 {
        // fd_filestat_get(fd, 256); drop.
        body.extend([0x41, fd, 0x41, 0x80, 2, 0x10, 1, 0x1a]);
    }
    // proc_exit(0).
    body.extend([0x41, 0, 0x10, 2]);
    p1_module(imports, &data, &body)
}

/// Asserts that both workers of a 2-worker runtime are free: two tasks that
/// each block their worker for a second take about a second together (two
/// when one worker is held).
async fn assert_both_workers_free() {
    let started = std::time::Instant::now();
    let a = tokio::spawn(async { std::thread::sleep(Duration::from_secs(1)) });
    let b = tokio::spawn(async { std::thread::sleep(Duration::from_secs(1)) });
    a.await.unwrap();
    b.await.unwrap();
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(1800),
        "a worker is held: {took:?}"
    );
}

/// Whatever filesystem a call's dirs are on, an operation there that waits
/// without end (here a FUSE server that stopped answering) holds neither
/// the caller nor a runtime worker: the call is `timed_out` on time and
/// both workers stay free. The operation is the guest's first that reaches
/// a file, and one that names no path: `fd_filestat_get` on its preopens,
/// after a sleep (the server stops answering meanwhile). The allowed twin:
/// the same module with the server answering ends well. Root only (it
/// mounts); CI runs as root.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waiting_on_a_dead_filesystem_holds_no_worker() {
    use toolhost::backend::wasm::last_call_file_io_inline as inline;
    if !ready_to_mount() {
        return;
    }
    let t = Tmp::new();
    std::fs::write(t.ws().join("t.wasm"), sleep_then_fstat_module(1000)).unwrap();
    let dead = t.root.join("dead");
    std::fs::create_dir(&dead).unwrap();
    let fs = hangfs::HangFs::mount(&dead);
    let dirs = || [t.ws(), dead.clone()];
    let sb = Sandbox::new(dirs(), wasm_config()).unwrap();
    let r = sb.run(RunRequest::new(["./t.wasm"])).await;
    assert!(r.success(), "{r:?}");
    assert_eq!(inline(), Some(true));
    let sb = Sandbox::new(
        dirs(),
        SandboxConfig {
            timeout: Duration::from_secs(2),
            ..wasm_config()
        },
    )
    .unwrap();
    let fs = std::sync::Arc::new(fs);
    let f = fs.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        f.hang();
        // Should the test's own thread wait (the bug this test is for),
        // let it go on, to fail rather than hang.
        tokio::time::sleep(Duration::from_secs(8)).await;
        f.answer();
    });
    let r = sb.run(RunRequest::new(["./t.wasm"])).await;
    assert_eq!(inline(), Some(true));
    assert!(r.timed_out, "{r:?}");
    assert!(r.duration < Duration::from_secs(4), "{:?}", r.duration);
    // The stat still waits: on its runner, not a worker.
    assert_both_workers_free().await;
    drop(fs);
    drop(sb);
}

/// A write lease on `leased.txt` in a workspace that also holds
/// `note.txt` (two lines): opening `leased.txt` waits while it is held.
#[cfg(target_os = "linux")]
struct Leased(std::fs::File);

#[cfg(target_os = "linux")]
impl Leased {
    fn take(t: &Tmp) -> Leased {
        use std::os::fd::AsRawFd;
        builtin_tools_built();
        assert!(toolhost::backend::wasm::fifo_watchdog_available());
        // SAFETY: ignoring SIGIO (a lease's break notice), which nothing in
        // this test process uses.
        unsafe { libc::signal(libc::SIGIO, libc::SIG_IGN) };
        std::fs::write(t.ws().join("note.txt"), "one\ntwo\n").unwrap();
        let file = t.ws().join("leased.txt");
        std::fs::write(&file, "held\n").unwrap();
        let held = std::fs::File::open(&file).unwrap();
        // SAFETY: fcntl on a descriptor we own.
        let r = unsafe { libc::fcntl(held.as_raw_fd(), libc::F_SETLEASE, libc::F_WRLCK) };
        assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
        Leased(held)
    }

    fn give_up(self) {
        use std::os::fd::AsRawFd;
        // SAFETY: fcntl on a descriptor we own.
        let r = unsafe { libc::fcntl(self.0.as_raw_fd(), libc::F_SETLEASE, libc::F_UNLCK) };
        assert_eq!(r, 0);
    }
}

/// Waits (10 s at most) until `wc -l note.txt` runs inline again: the
/// calls left waiting have ended.
#[cfg(target_os = "linux")]
async fn inline_again(sb: &Sandbox) {
    use toolhost::backend::wasm::last_call_file_io_inline as inline;
    let started = std::time::Instant::now();
    loop {
        let r = sb.run(RunRequest::new(["wc", "-l", "note.txt"])).await;
        assert_eq!(r.stdout.trim(), "2 note.txt", "{r:?}");
        if inline() == Some(true) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "never ended");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Four calls at once that read the leased file ([`Leased`]), each left
/// waiting on the lease past its timeout.
#[cfg(target_os = "linux")]
async fn four_left_waiting(sb: &Sandbox) {
    let cat = || sb.run(RunRequest::new(["cat", "leased.txt"]));
    let waited = tokio::join!(cat(), cat(), cat(), cat());
    for r in [waited.0, waited.1, waited.2, waited.3] {
        assert!(r.timed_out, "{r:?}");
    }
}

/// A moved call that waits keeps its store and pool slot until its
/// operation returns, so at most a quarter of an engine's pool runs inline
/// at once: with a pool of 4, four calls started together and left waiting
/// on a lease after their timeouts hold one slot (the others handed off
/// each operation and dropped their stores at their timeouts), and the
/// next calls run, by the hand-off per operation, until it has ended. The
/// allowed twin: once the lease is given up, calls run inline again.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_left_waiting_hold_at_most_a_quarter_of_the_pool() {
    use toolhost::backend::wasm::last_call_file_io_inline as inline;
    let t = Tmp::new();
    let held = Leased::take(&t);
    let mut config = wasm_config();
    config.wasm.pool_size = 4;
    config.timeout = Duration::from_secs(1);
    let sb = t.sandbox(config);
    let wc = || RunRequest::new(["wc", "-l", "note.txt"]);
    let r = sb.run(wc()).await;
    assert_eq!((r.stdout.trim(), inline()), ("2 note.txt", Some(true)));
    // As many calls at once as the pool has slots, each left waiting.
    four_left_waiting(&sb).await;
    for _ in 0..4 {
        let r = sb.run(wc()).await;
        assert_eq!(r.stdout.trim(), "2 note.txt", "{r:?}");
        assert_eq!(inline(), Some(false), "a quarter of the pool is held");
    }
    held.give_up();
    inline_again(&sb).await;
}

/// The same bound across sandboxes: calls left waiting on a lease after
/// their sandbox is gone keep their engine (whose pool slots they hold),
/// so a sandbox of the same configuration made after it, and after more
/// configurations than the process keeps unheld engines of, still finds
/// a quarter of the pool taken and hands each operation off. (An engine
/// made anew would have slots of its own: more calls left waiting, and
/// more pools reserved, with every sandbox made again.) The allowed twin:
/// once the lease is given up, its calls run inline again.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_left_waiting_keep_their_engine_after_their_sandbox() {
    use toolhost::backend::wasm::last_call_file_io_inline as inline;
    let t = Tmp::new();
    let held = Leased::take(&t);
    // A configuration of this test's own (its cache dir), with no tier-up
    // (which would hold the engine on its own while it runs), and the
    // tools compiled first, under a timeout long enough for that (the
    // timeout is not the engine's): the calls below wait on the lease,
    // not on a compile.
    let mut config = wasm_config();
    config.wasm.pool_size = 4;
    config.wasm.cache_dir = Some(t.root.join("cache"));
    config.wasm.baseline_compile = false;
    let warm = t.sandbox(config.clone());
    for tool in ["wc", "cat"] {
        let r = warm.run(RunRequest::new([tool, "note.txt"])).await;
        assert!(r.success(), "{r:?}");
    }
    config.timeout = Duration::from_secs(1);
    let wc = || RunRequest::new(["wc", "-l", "note.txt"]);
    {
        let sb = t.sandbox(config.clone());
        drop(warm);
        let r = sb.run(wc()).await;
        assert_eq!((r.stdout.trim(), inline()), ("2 note.txt", Some(true)));
        four_left_waiting(&sb).await;
    }
    // More configurations asked for than the process keeps unheld engines
    // of (4), each let go.
    let others: Vec<_> = (0..6).map(|i| t.root.join(format!("other-{i}"))).collect();
    for dir in &others {
        let mut other = wasm_config();
        other.wasm.cache_dir = Some(dir.clone());
        other.wasm.pool_size = 0;
        let sb = t.sandbox(other);
        sb.wasm_backend().expect("wasm backend");
    }
    let sb = t.sandbox(config);
    let r = sb.run(wc()).await;
    assert_eq!(r.stdout.trim(), "2 note.txt", "{r:?}");
    assert_eq!(inline(), Some(false), "a quarter of the pool is held");
    held.give_up();
    inline_again(&sb).await;
}

/// Set for the helper of [`an_engine_refused_once_is_made_at_the_next_call`].
#[cfg(target_os = "linux")]
const ENGINE_RETRY_ENV: &str = "TOOLHOST_TEST_ENGINE_RETRY";

/// A sandbox whose wasm engine could not be made (no address space for its
/// pool) makes it at its next wasm call once it can: the failure is not
/// kept. Both sides in one process, a fresh one (this test binary run as
/// [`engine_refused_then_made`]), since the address-space limit is the
/// process's: the denied call under a soft `RLIMIT_AS` of 4 GiB is refused
/// as the backend unavailable, and the allowed one, after the limit is
/// raised in the same process, runs.
#[cfg(target_os = "linux")]
#[test]
fn an_engine_refused_once_is_made_at_the_next_call() {
    let out = Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--exact",
            "wasm::engine_refused_then_made",
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(ENGINE_RETRY_ENV, "1")
        .stdin(Stdio::null())
        .output()
        .expect("run the helper");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the helper failed: {text}");
    assert!(text.contains("1 passed"), "the helper ran: {text}");
}

/// The helper of [`an_engine_refused_once_is_made_at_the_next_call`]
/// (without its variable set, it does nothing: it lowers the process's
/// address-space limit).
#[cfg(target_os = "linux")]
#[test]
#[ignore = "run by an_engine_refused_once_is_made_at_the_next_call, in a process of its own"]
fn engine_refused_then_made() {
    if std::env::var_os(ENGINE_RETRY_ENV).is_none() {
        return;
    }
    builtin_tools_built();
    let set_soft = |soft: u64| {
        let mut l = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit and setrlimit of this process, with a struct on
        // this stack.
        unsafe {
            assert_eq!(libc::getrlimit(libc::RLIMIT_AS, &mut l), 0);
            l.rlim_cur = soft.min(l.rlim_max);
            assert_eq!(libc::setrlimit(libc::RLIMIT_AS, &l), 0);
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let t = Tmp::new();
        std::fs::write(t.ws().join("note.txt"), "one\ntwo\n").expect("write note.txt");
        let mut config = wasm_config();
        config.wasm.cache_dir = Some(t.root.join("cache"));
        let sb = t.sandbox(config);
        let wc = || RunRequest::new(["wc", "-l", "note.txt"]);
        set_soft(4 << 30);
        let refused = sb.run(wc()).await;
        assert_eq!(
            refused.outcome.kind,
            OutcomeKind::BackendUnavailable,
            "{refused:?}"
        );
        assert!(
            refused.outcome.message.contains("wasm engine"),
            "{refused:?}"
        );
        assert!(sb.wasm_backend().is_err(), "still refused under the limit");
        set_soft(libc::RLIM_INFINITY);
        let r = sb.run(wc()).await;
        assert_eq!(r.stdout.trim(), "2 note.txt", "{r:?}");
        sb.shutdown().await;
    });
}

/// A guest whose first host call opens an existing file for writing (the
/// protected-path guard's own open, before any of wasmtime-wasi's) gets the
/// file: the guard gives wasmtime-wasi the call's host-call budget first.
/// The module exits with the open's errno.
#[tokio::test]
async fn a_write_open_as_the_first_host_call_succeeds() {
    const I32: u8 = 0x7f;
    const I64: u8 = 0x7e;
    builtin_tools_built();
    let t = Tmp::new();
    let imports: &[(&str, &[u8], &[u8])] = &[
        (
            "path_open",
            &[I32, I32, I32, I32, I32, I64, I64, I32, I32],
            &[I32],
        ),
        ("proc_exit", &[I32], &[]),
    ];
    // proc_exit(path_open(3, 0, "target.txt", 10, 0, FD_WRITE, 0, 0, 128)).
    let body = [
        0x41, 3, 0x41, 0, 0x41, 0, 0x41, 10, 0x41, 0, 0x42, 0xc0, 0, 0x42, 0, 0x41, 0, 0x41, 0x80,
        1, 0x10, 0, 0x10, 1,
    ];
    std::fs::write(
        t.ws().join("t.wasm"),
        p1_module(imports, b"target.txt", &body),
    )
    .unwrap();
    let sb = t.sandbox(wasm_config());
    // Denied twin: a file that is not there is ENOENT (44), not ENOMEM (48).
    let r = sb.run(RunRequest::new(["./t.wasm"])).await;
    assert_eq!(r.returncode, Some(44), "{r:?}");
    std::fs::write(t.ws().join("target.txt"), "x\n").unwrap();
    let r = sb.run(RunRequest::new(["./t.wasm"])).await;
    assert_eq!(r.returncode, Some(0), "{r:?}");
}

/// Once its caller stopped waiting, a call that moved to its own thread
/// changes no file, though that thread is still held by an open that waits
/// and the module calls on with no point where the task could be aborted
/// (no loop, no function entry between two host calls). The module opens
/// `leased.txt`, then creates `canary`. The test holds a write lease on
/// `leased.txt`, so the first open waits; the call times out, the lease is
/// given up, the open returns, and the create must trap. The allowed twin:
/// with no lease the same module creates `canary`.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_caller_gave_up_changes_no_file() {
    use std::os::fd::AsRawFd;
    use toolhost::backend::wasm::last_call_file_io_inline as inline;
    builtin_tools_built();
    assert!(toolhost::backend::wasm::fifo_watchdog_available());
    // SAFETY: ignoring SIGIO (a lease's break notice), which nothing in
    // this test process uses.
    unsafe { libc::signal(libc::SIGIO, libc::SIG_IGN) };
    let t = Tmp::new();
    std::fs::write(t.ws().join("t.wasm"), open_then_create_module()).unwrap();
    let file = t.ws().join("leased.txt");
    let canary = t.ws().join("canary");
    std::fs::write(&file, "held\n").unwrap();
    let held = std::fs::File::open(&file).unwrap();
    // SAFETY: fcntl on a descriptor we own.
    let r = unsafe { libc::fcntl(held.as_raw_fd(), libc::F_SETLEASE, libc::F_WRLCK) };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    let sb = t.sandbox(SandboxConfig {
        timeout: Duration::from_secs(1),
        ..wasm_config()
    });
    let r = sb.run(RunRequest::new(["./t.wasm"])).await;
    assert_eq!(inline(), Some(true));
    assert!(r.timed_out, "{r:?}");
    // SAFETY: as above.
    let r = unsafe { libc::fcntl(held.as_raw_fd(), libc::F_SETLEASE, libc::F_UNLCK) };
    assert_eq!(r, 0);
    drop(held);
    // The open returns as the lease is given up; the create would follow
    // at once, with no point where the call could be dropped before it.
    for _ in 0..50 {
        assert!(!canary.exists(), "a call that timed out created a file");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!canary.exists(), "a call that timed out created a file");
    let sb = t.sandbox(wasm_config());
    let r = sb.run(RunRequest::new(["./t.wasm"])).await;
    assert!(r.success(), "{r:?}");
    assert_eq!(inline(), Some(true));
    assert!(canary.is_file());
}

/// A preview-1 module whose `_start` opens `leased.txt` for reading, then
/// creates `canary`, both in the first preopen, in straight-line code:
/// wasmtime checks the epoch (where a task can yield) only at function
/// entries and loop heads.
fn open_then_create_module() -> Vec<u8> {
    let mut m = b"\0asm\x01\0\0\0".to_vec();
    // Types: 0 is path_open's (fd, dirflags, path, len, oflags, rights,
    // inheriting, fdflags, opened) -> errno; 1 is `_start`'s.
    m.extend([1, 17, 2]);
    m.extend([
        0x60, 9, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7e, 0x7e, 0x7f, 0x7f, 1, 0x7f,
    ]);
    m.extend([0x60, 0, 0]);
    m.extend([2, 36, 1, 22]);
    m.extend(b"wasi_snapshot_preview1");
    m.push(9);
    m.extend(b"path_open");
    m.extend([0, 0]);
    m.extend([3, 2, 1, 1]);
    m.extend([5, 3, 1, 0, 1]);
    m.extend([7, 19, 2, 6]);
    m.extend(b"memory");
    m.extend([2, 0, 6]);
    m.extend(b"_start");
    m.extend([0, 1]);
    // path_open(3, 0, 16, 10, 0, FD_READ, 0, 0, 64); then
    // path_open(3, 0, 32, 6, O_CREAT, FD_WRITE, 0, 0, 68); results dropped.
    let mut body = vec![0u8];
    body.extend([
        0x41, 3, 0x41, 0, 0x41, 16, 0x41, 10, 0x41, 0, 0x42, 2, 0x42, 0,
    ]);
    body.extend([0x41, 0, 0x41, 0xc0, 0, 0x10, 0, 0x1a]);
    body.extend([
        0x41, 3, 0x41, 0, 0x41, 32, 0x41, 6, 0x41, 1, 0x42, 0xc0, 0, 0x42, 0,
    ]);
    body.extend([0x41, 0, 0x41, 0xc4, 0, 0x10, 0, 0x1a, 0x0b]);
    m.extend([10, body.len() as u8 + 2, 1, body.len() as u8]);
    m.extend(body);
    m.extend([11, 27, 2, 0, 0x41, 16, 0x0b, 10]);
    m.extend(b"leased.txt");
    m.extend([0, 0x41, 32, 0x0b, 6]);
    m.extend(b"canary");
    m
}

/// An open that waits inline (another process holds a lease on the file:
/// the open waits for it to be given up, up to `fs.lease-break-time`, 45 s
/// by default) holds the call's own thread, not the caller and no runtime
/// worker: the call times out on time. Once the lease is gone the same file
/// reads.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_open_that_waits_still_times_out() {
    use std::os::fd::AsRawFd;
    use toolhost::backend::wasm::last_call_file_io_inline as inline;
    builtin_tools_built();
    assert!(toolhost::backend::wasm::fifo_watchdog_available());
    // The lease's break notice is SIGIO, fatal by default.
    // SAFETY: ignoring SIGIO, which nothing in this test process uses.
    unsafe { libc::signal(libc::SIGIO, libc::SIG_IGN) };
    let t = Tmp::new();
    let file = t.ws().join("leased.txt");
    std::fs::write(&file, "held\n").unwrap();
    let held = std::fs::File::open(&file).unwrap();
    // SAFETY: fcntl on a descriptor we own.
    let r = unsafe { libc::fcntl(held.as_raw_fd(), libc::F_SETLEASE, libc::F_WRLCK) };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    let sb = t.sandbox(SandboxConfig {
        timeout: Duration::from_secs(1),
        ..wasm_config()
    });
    let r = sb.run(RunRequest::new(["cat", "leased.txt"])).await;
    assert_eq!(inline(), Some(true));
    assert!(r.timed_out, "{r:?}");
    assert!(r.duration < Duration::from_secs(3), "{:?}", r.duration);
    // The open still waits, on its runner: both workers
    // are free.
    assert_both_workers_free().await;
    // SAFETY: as above.
    let r = unsafe { libc::fcntl(held.as_raw_fd(), libc::F_SETLEASE, libc::F_UNLCK) };
    assert_eq!(r, 0);
    drop(held);
    let r = sb.run(RunRequest::new(["cat", "leased.txt"])).await;
    assert_eq!(r.stdout, "held\n", "{r:?}");
}

/// A read that waits for the kernel, of `/proc/kmsg` (which answers `pread`
/// and, once drained, waits for the next kernel message), is ended by the
/// timeout: both with a local dir that has procfs mounted below it and with
/// the dir on procfs. (In process, on a runtime of one worker, the call's
/// file I/O runs inline on a thread of its own: the worker stays free for
/// the timeout.)
///
/// Root only (reading `/proc/kmsg` takes CAP_SYSLOG, a mount namespace
/// CAP_SYS_ADMIN): CI runs as root. It consumes pending kernel messages from
/// `/proc/kmsg`'s one reader position (`dmesg` still shows them). The CLI
/// part runs first, so that its reader is gone before the in-process one,
/// which the timeout leaves waiting on a blocking-pool thread until the next
/// kernel message: the runtime is this test's own, shut down without
/// waiting for its pool.
#[cfg(target_os = "linux")]
#[test]
fn attack_22_blocked_reading_a_kernel_file_still_times_out() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: reading /proc/kmsg and mounting procfs need root");
        return;
    }
    builtin_tools_built();
    let t = Tmp::new();
    let home = tempfile::tempdir().unwrap();

    // A local dir with procfs mounted below it, in a mount namespace of the
    // CLI's own (`unshare`): the mount decides, not the dir's own filesystem.
    let sub = t.ws().join("sub");
    std::fs::create_dir(&sub).unwrap();
    let run = |timeout: &str, file: &str| {
        let script = r#"mount -t proc proc "$1/sub" && cd "$1" && exec "$2" run --backend wasm --allow-dir "$1" --timeout "$3" -- cat "sub/$4""#;
        let started = std::time::Instant::now();
        let out = std::process::Command::new("unshare")
            .args([
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                script,
                "sh",
            ])
            .arg(t.ws())
            .arg(toolhost_bin())
            .args([timeout, file])
            .env_remove("TOOLHOST_CONFIG")
            .env_remove("TOOLHOST_LOG")
            .env("XDG_CACHE_HOME", home.path())
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        (out, started.elapsed())
    };
    // Allowed twin, under a long timeout: the mount is there, and the tool is
    // compiled into the cache, so the timeout below is the read's.
    let (out, _) = run("60", "sys/kernel/ostype");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "Linux\n", "{out:?}");
    let (out, took) = run("1", "kmsg");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("timed out"), "{out:?}");
    assert!(!stderr.contains("compil"), "{out:?}");
    assert!(took < Duration::from_secs(4), "{took:?}");
    assert!(!sub.join("kmsg").exists(), "the mount stayed private");

    // The dir on procfs, in this process.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let dirs = || {
        [
            toolhost::AllowedDirSpec::read_write(t.ws()),
            toolhost::AllowedDirSpec::read_only("/proc"),
        ]
    };
    let cat = |f: &str| RunRequest::new(["cat".to_string(), format!("/proc/{f}")]);
    // Allowed twin, under a long timeout (it also compiles the tool).
    let sb = Sandbox::new(dirs(), wasm_config()).unwrap();
    let r = rt.block_on(sb.run(cat("sys/kernel/ostype")));
    assert_eq!(r.stdout, "Linux\n", "{r:?}");
    let sb = Sandbox::new(
        dirs(),
        SandboxConfig {
            timeout: Duration::from_secs(1),
            ..wasm_config()
        },
    )
    .unwrap();
    let r = rt.block_on(sb.run(cat("kmsg")));
    assert!(r.timed_out, "{r:?}");
    assert!(!r.outcome.message.contains("compil"), "{r:?}");
    assert!(r.duration < Duration::from_secs(3), "{:?}", r.duration);
    drop(sb);
    rt.shutdown_background();
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
