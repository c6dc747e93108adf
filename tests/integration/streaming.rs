//! The built-in tools stream: each of cat, head, tail, wc, sha256sum, grep,
//! base64, sort and diff runs on a 1 GiB file through the toolhost CLI
//! (`run --backend wasm`) under the default limits, each call its own
//! process, and that process (wasmtime, the guest's linear memory and all)
//! peaks under 64 MiB RSS, measured by `wait4`. The output is the native
//! tool's (Debian coreutils, grep, diffutils) on the same file, or its prefix
//! where the 8 MiB stdout cap truncates it; sort, which must hold its input,
//! refuses it with its budget named.
//!
//! The 1 GiB file (and its copy for diff) is written once per test process
//! and removed when the process exits. Each tool is run once (`--help`)
//! first, so that the measured call loads its compiled code from the cache
//! (compiling is a one-time cost, not the tool's: grep's, the largest module,
//! peaks near 70 MiB whatever the input). The tests run one at a time (see
//! [`one_at_a_time`]), each call spawned from a small helper process so that
//! its RSS figure is its own (see [`toolhost_run`]).
#![cfg(target_os = "linux")]

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::util::{FIFO_TESTS, toolhost_bin};

/// The test file's size.
const SIZE: usize = 1 << 30;
/// The block the file repeats (each copy with its own first line).
const BLOCK: usize = 1 << 20;
/// The peak RSS every call must stay under, in KiB.
const RSS_LIMIT_KIB: i64 = 64 * 1024;
/// What toolhost keeps of a tool's stdout under the default output budget.
const STDOUT_CAP: usize = 8 * 1024 * 1024;

/// The shared files, in a dir of their own (the tools' allowed dir), with
/// the compile cache beside it.
struct Files {
    root: PathBuf,
    dir: PathBuf,
    cache: PathBuf,
}

impl Files {
    /// The 1 GiB file.
    const BIG: &'static str = "big.txt";
    /// A byte-for-byte copy of it, written separately.
    const COPY: &'static str = "copy.txt";
    /// Its first two blocks, with one byte changed.
    const DIFFERENT: &'static str = "different.txt";
    /// Its first 20000 lines, for sort.
    const SMALL: &'static str = "small.txt";
    /// Base64 of its first 48 MiB, for base64 -d.
    const ENCODED: &'static str = "encoded.b64";
}

/// Where [`files`] put its dir, for the exit handler to remove it.
static DIR: OnceLock<PathBuf> = OnceLock::new();

extern "C" fn remove_files() {
    if let Some(dir) = DIR.get() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// One block of varied text: numbered lines of one to eight words.
fn block() -> Vec<u8> {
    const WORDS: &[&str] = &[
        "alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa",
        "lambda", "mu", "nu", "xi", "omicron", "pi", "rho", "sigma", "tau", "upsilon", "phi",
        "chi", "psi", "omega",
    ];
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        // xorshift64*: fixed, varied, no dependency.
        seed ^= seed >> 12;
        seed ^= seed << 25;
        seed ^= seed >> 27;
        (seed.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize
    };
    let mut out = Vec::with_capacity(BLOCK + 128);
    out.extend_from_slice(b"block 00000\n");
    let mut n = 0;
    while out.len() < BLOCK {
        n += 1;
        let mut line = format!("{n}");
        for _ in 0..1 + next() % 8 {
            line.push(' ');
            line.push_str(WORDS[next() % WORDS.len()]);
        }
        line.push('\n');
        out.extend_from_slice(line.as_bytes());
    }
    // Cut back to a whole line and pad the last one to exactly one block.
    out.truncate(BLOCK);
    let cut = out.iter().rposition(|&b| b == b'\n').unwrap_or(0);
    out.truncate(cut);
    out.push(b' ');
    out.resize(BLOCK - 1, b'x');
    out.push(b'\n');
    out
}

/// The shared files, written on first use.
fn files() -> &'static Files {
    static FILES: OnceLock<Files> = OnceLock::new();
    FILES.get_or_init(|| {
        let started = Instant::now();
        let root = tempfile::Builder::new()
            .prefix("toolhost-streaming-")
            .tempdir()
            .expect("tempdir")
            .keep();
        let root = std::fs::canonicalize(root).expect("canonicalize");
        DIR.set(root.clone()).expect("set once");
        // SAFETY: registers a plain function with no arguments.
        assert_eq!(unsafe { libc::atexit(remove_files) }, 0);
        let dir = root.join("data");
        let cache = root.join("cache");
        std::fs::create_dir(&dir).unwrap();
        std::fs::create_dir(&cache).unwrap();

        let mut block = block();
        let mut big = std::io::BufWriter::new(std::fs::File::create(dir.join(Files::BIG)).unwrap());
        let mut copy =
            std::io::BufWriter::new(std::fs::File::create(dir.join(Files::COPY)).unwrap());
        for i in 0..SIZE / BLOCK {
            block[..12].copy_from_slice(format!("block {i:05}\n").as_bytes());
            big.write_all(&block).unwrap();
            copy.write_all(&block).unwrap();
        }
        big.flush().unwrap();
        copy.flush().unwrap();
        drop((big, copy));

        let mut head = Vec::new();
        std::fs::File::open(dir.join(Files::BIG))
            .unwrap()
            .take(48 << 20)
            .read_to_end(&mut head)
            .unwrap();
        let mut different = head[..2 * BLOCK].to_vec();
        let at = BLOCK + 100;
        different[at] = if different[at] == b'Q' { b'R' } else { b'Q' };
        std::fs::write(dir.join(Files::DIFFERENT), &different).unwrap();
        let small: Vec<u8> = head
            .split_inclusive(|&b| b == b'\n')
            .take(20_000)
            .flatten()
            .copied()
            .collect();
        std::fs::write(dir.join(Files::SMALL), &small).unwrap();
        let encoded = native(&dir, &["/usr/bin/base64"], Some(&head[..]));
        assert!(encoded.status.success());
        std::fs::write(dir.join(Files::ENCODED), &encoded.stdout).unwrap();
        eprintln!(
            "streaming: wrote the test files in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        Files { root, dir, cache }
    })
}

/// What a toolhost call returned, and what it cost.
struct Call {
    code: i32,
    stdout: Vec<u8>,
    stderr: String,
    truncated: bool,
    maxrss_kib: i64,
    /// The RSS mark of the process it was spawned from: the figure's floor.
    floor_kib: i64,
    took: Duration,
}

/// Set in the environment of [`measure_one_call`]: the call to run (JSON).
const CALL_ENV: &str = "TOOLHOST_STREAMING_CALL";

/// Runs `toolhost run --backend wasm --json --allow-dir DIR -- ARGV` in the
/// files' dir, in a process of its own, and returns what it printed and its
/// peak RSS.
///
/// The RSS high-water mark a child reports (`ru_maxrss`) starts at the RSS
/// of the process it was spawned from, not at zero: Linux carries the
/// spawning process's mark over the `exec`. The test process holds large
/// buffers and shares its memory with parallel tests, so the call is spawned
/// from a fresh, small process instead: this test binary run as
/// [`measure_one_call`], which spawns toolhost, waits for it alone with
/// `wait4` and writes down its `ru_maxrss`. Its own mark (the floor of the
/// figure) is reported too and is far below the limit.
fn toolhost_run(files: &Files, argv: &[&str]) -> Call {
    let out = tempfile::tempdir_in(&files.root).expect("a dir for the call's output");
    let spec = serde_json::json!({
        "argv": argv,
        "dir": files.dir,
        "cache": files.cache,
        "out": out.path(),
    });
    let helper = Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--exact",
            "streaming::measure_one_call",
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CALL_ENV, spec.to_string())
        .stdin(Stdio::null())
        .output()
        .expect("run the helper");
    assert!(
        helper.status.success(),
        "{argv:?}: the helper failed: {}{}",
        String::from_utf8_lossy(&helper.stdout),
        String::from_utf8_lossy(&helper.stderr)
    );
    let read =
        |name: &str| std::fs::read(out.path().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    let result: serde_json::Value =
        serde_json::from_slice(&read("result")).expect("the helper's result");
    let json = read("stdout");
    let v: serde_json::Value = serde_json::from_slice(&json).unwrap_or_else(|e| {
        panic!(
            "{argv:?}: not JSON ({e}): {}; stderr: {}",
            String::from_utf8_lossy(&json[..json.len().min(2000)]),
            String::from_utf8_lossy(&read("stderr"))
        )
    });
    let code = v["returncode"].as_i64().map(|c| c as i32).unwrap_or(-1);
    assert_eq!(
        result["exit"].as_i64(),
        Some(i64::from(code)),
        "{argv:?}: toolhost's exit status is the tool's: {v:.2000}"
    );
    Call {
        code,
        stdout: v["stdout"].as_str().unwrap_or("").as_bytes().to_vec(),
        stderr: v["stderr"].as_str().unwrap_or("").to_string(),
        truncated: v["truncated"].as_bool().unwrap_or(false),
        maxrss_kib: result["maxrss_kib"].as_i64().unwrap_or(i64::MAX),
        floor_kib: result["floor_kib"].as_i64().unwrap_or(i64::MAX),
        took: Duration::from_secs_f64(result["seconds"].as_f64().unwrap_or(f64::NAN)),
    }
}

/// Not a test of its own: [`toolhost_run`] runs this test binary with only
/// this, and [`CALL_ENV`] set, to make one toolhost call from a small process
/// and measure it (without it set, it does nothing).
#[test]
#[ignore = "a helper process of the streaming tests"]
fn measure_one_call() {
    let Ok(spec) = std::env::var(CALL_ENV) else {
        return;
    };
    let spec: serde_json::Value = serde_json::from_str(&spec).expect("the call");
    let path = |k: &str| PathBuf::from(spec[k].as_str().unwrap_or_else(|| panic!("{k}")));
    let argv: Vec<String> = serde_json::from_value(spec["argv"].clone()).expect("argv");
    let (dir, out) = (path("dir"), path("out"));
    let create = |name: &str| std::fs::File::create(out.join(name)).expect("an output file");
    let floor_kib = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<i64>().ok())
        })
        .unwrap_or(-1);
    let started = Instant::now();
    #[expect(
        clippy::zombie_processes,
        reason = "reaped by wait4 below, which also returns its rusage"
    )]
    let child = Command::new(toolhost_bin())
        .args(["run", "--backend", "wasm", "--json", "--allow-dir"])
        .arg(&dir)
        .arg("--")
        .args(&argv)
        .current_dir(&dir)
        .env_remove("TOOLHOST_CONFIG")
        .env_remove("TOOLHOST_LOG")
        .env_remove("TOOLHOST_BUILTIN_TOOLS")
        .env_remove(CALL_ENV)
        .env("XDG_CACHE_HOME", path("cache"))
        .stdin(Stdio::null())
        .stdout(create("stdout"))
        .stderr(create("stderr"))
        .spawn()
        .expect("run toolhost");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: rusage is plain data that wait4 fills in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: pid is this process's own child, waited for nowhere else.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(waited, pid, "wait4: {}", std::io::Error::last_os_error());
    let seconds = started.elapsed().as_secs_f64();
    let exit = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    let result = serde_json::json!({
        "exit": exit,
        "maxrss_kib": usage.ru_maxrss,
        "floor_kib": floor_kib,
        "seconds": seconds,
    });
    std::fs::write(out.join("result"), result.to_string()).expect("write the result");
}

/// Runs a native tool in `dir` under the C locale, with `stdin` if given.
fn native(dir: &Path, argv: &[&str], stdin: Option<&[u8]>) -> std::process::Output {
    let mut child = Command::new(argv[0])
        .args(&argv[1..])
        .current_dir(dir)
        .env("LC_ALL", "C")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run {}: {e}", argv[0]));
    if let Some(data) = stdin {
        let mut pipe = child.stdin.take().expect("stdin");
        let data = data.to_vec();
        std::thread::spawn(move || {
            let _ = pipe.write_all(&data);
        });
    }
    child.wait_with_output().expect("native tool")
}

/// The first `n` bytes of a native tool's stdout (the tool is then stopped).
fn native_prefix(dir: &Path, argv: &[&str], n: usize) -> Vec<u8> {
    let mut child = Command::new(argv[0])
        .args(&argv[1..])
        .current_dir(dir)
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run {}: {e}", argv[0]));
    let mut out = Vec::with_capacity(n);
    child
        .stdout
        .take()
        .expect("stdout")
        .take(n as u64)
        .read_to_end(&mut out)
        .expect("read");
    let _ = child.kill();
    let _ = child.wait();
    out
}

/// Runs `argv` as a built-in tool on the shared files: once with `--help` to
/// have its code compiled and cached, then for real. Checks and prints
/// the measured call's peak RSS and time.
fn measured(argv: &[&str]) -> Call {
    let files = files();
    let warm = toolhost_run(files, &[argv[0], "--help"]);
    assert_eq!(warm.code, 0, "{} --help: {}", argv[0], warm.stderr);
    let call = toolhost_run(files, argv);
    eprintln!(
        "streaming: {}: peak RSS {:.1} MiB (floor {:.1}), {:.2} s, exit {}, {} bytes of stdout{}",
        argv.join(" "),
        call.maxrss_kib as f64 / 1024.0,
        call.floor_kib as f64 / 1024.0,
        call.took.as_secs_f64(),
        call.code,
        call.stdout.len(),
        if call.truncated { " (truncated)" } else { "" }
    );
    assert!(
        call.maxrss_kib < RSS_LIMIT_KIB,
        "{argv:?}: peak RSS {} KiB, over the {} KiB limit",
        call.maxrss_kib,
        RSS_LIMIT_KIB
    );
    call
}

/// A short view of bytes for assertion messages.
fn show(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(&b[..b.len().min(300)]);
    format!("{s:?}{}", if b.len() > 300 { "..." } else { "" })
}

/// The call's whole stdout and exit code are the native tool's.
fn same_as_native(call: &Call, argv: &[&str], native_argv: &[&str]) {
    let n = native(&files().dir, native_argv, None);
    assert!(!call.truncated, "{argv:?}: output truncated");
    assert_eq!(
        Some(call.code),
        n.status.code(),
        "{argv:?}: exit code; stderr: {}",
        call.stderr
    );
    assert!(
        call.stdout == n.stdout,
        "{argv:?}: stdout {} differs from {native_argv:?}'s {}",
        show(&call.stdout),
        show(&n.stdout)
    );
}

/// The call's stdout was cut at the cap, and what was kept is the native
/// tool's output's prefix.
fn prefix_of_native(call: &Call, argv: &[&str], native_argv: &[&str]) {
    assert_eq!(call.code, 0, "{argv:?}: {}", call.stderr);
    assert!(call.truncated, "{argv:?}: output over the cap is truncated");
    assert_eq!(
        call.stdout.len(),
        STDOUT_CAP,
        "{argv:?}: kept the whole cap"
    );
    let n = native_prefix(&files().dir, native_argv, call.stdout.len());
    let at = call
        .stdout
        .iter()
        .zip(&n)
        .position(|(a, b)| a != b)
        .unwrap_or(call.stdout.len().min(n.len()));
    assert!(
        call.stdout == n,
        "{argv:?}: differs from {native_argv:?} at byte {at}: {} vs {}",
        show(&call.stdout[at..]),
        show(&n[at.min(n.len())..])
    );
}

/// Held for the whole of each streaming test. They keep a core busy for
/// seconds at a time (the guest, then the native tool), so they run one at a
/// time, each measured call with a core to itself on a 2-core machine, well
/// within the default 15 s timeout; and they take the lock the FIFO tests
/// hold, whose races are timing-sensitive, so as not to run beside those.
fn one_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    FIFO_TESTS.blocking_lock()
}

#[test]
fn cat_streams_a_1_gib_file() {
    let _turn = one_at_a_time();
    let argv = ["cat", Files::BIG];
    let call = measured(&argv);
    prefix_of_native(&call, &argv, &["/usr/bin/cat", Files::BIG]);
}

#[test]
fn cat_n_streams_a_1_gib_file() {
    let _turn = one_at_a_time();
    let argv = ["cat", "-n", Files::BIG];
    let call = measured(&argv);
    prefix_of_native(&call, &argv, &["/usr/bin/cat", "-n", Files::BIG]);
}

#[test]
fn head_streams_a_1_gib_file() {
    let _turn = one_at_a_time();
    for argv in [
        &["head", "-n", "25", Files::BIG][..],
        &["head", "-c", "3000000", Files::BIG][..],
    ] {
        let call = measured(argv);
        let mut native_argv = vec!["/usr/bin/head"];
        native_argv.extend_from_slice(&argv[1..]);
        same_as_native(&call, argv, &native_argv);
    }
}

#[test]
fn tail_streams_a_1_gib_file() {
    let _turn = one_at_a_time();
    for argv in [
        &["tail", "-n", "25", Files::BIG][..],
        &["tail", "-n", "100000", Files::BIG][..],
        &["tail", "-c", "3000000", Files::BIG][..],
    ] {
        let call = measured(argv);
        let mut native_argv = vec!["/usr/bin/tail"];
        native_argv.extend_from_slice(&argv[1..]);
        same_as_native(&call, argv, &native_argv);
    }
}

#[test]
fn wc_streams_a_1_gib_file() {
    let _turn = one_at_a_time();
    let argv = ["wc", Files::BIG];
    let call = measured(&argv);
    same_as_native(&call, &argv, &["/usr/bin/wc", Files::BIG]);
}

#[test]
fn sha256sum_streams_a_1_gib_file() {
    let _turn = one_at_a_time();
    let argv = ["sha256sum", Files::BIG];
    let call = measured(&argv);
    same_as_native(&call, &argv, &["/usr/bin/sha256sum", Files::BIG]);
}

#[test]
fn grep_streams_a_1_gib_file() {
    let _turn = one_at_a_time();
    // About one line in 700: all of them fit under the output cap.
    let pattern = "omega (psi|chi) [a-z]+a$";
    let argv = ["grep", "-n", pattern, Files::BIG];
    let call = measured(&argv);
    assert!(call.stdout.len() > 100_000, "{}", show(&call.stdout));
    same_as_native(
        &call,
        &argv,
        &["/usr/bin/grep", "-E", "-n", pattern, Files::BIG],
    );
}

#[test]
fn base64_streams_a_1_gib_file() {
    let _turn = one_at_a_time();
    let argv = ["base64", Files::BIG];
    let call = measured(&argv);
    prefix_of_native(&call, &argv, &["/usr/bin/base64", Files::BIG]);
    // Decoding streams too (a 64 MiB encoding of the file's first 48 MiB).
    let argv = ["base64", "-d", Files::ENCODED];
    let call = measured(&argv);
    prefix_of_native(&call, &argv, &["/usr/bin/base64", "-d", Files::ENCODED]);
}

#[test]
fn sort_refuses_a_1_gib_file_naming_its_budget() {
    let _turn = one_at_a_time();
    let call = measured(&["sort", Files::BIG]);
    assert_eq!(call.code, 2, "{}", call.stderr);
    assert_eq!(
        call.stderr,
        "sort: input exceeds the 16 MiB in-memory budget\n"
    );
    assert!(call.stdout.is_empty());
    // Within the budget, the output is C-locale sort's.
    for flags in [&[][..], &["-r"][..], &["-u"][..]] {
        let mut argv = vec!["sort"];
        argv.extend_from_slice(flags);
        argv.push(Files::SMALL);
        let call = measured(&argv);
        let mut native_argv = vec!["/usr/bin/sort"];
        native_argv.extend_from_slice(&argv[1..]);
        same_as_native(&call, &argv, &native_argv);
    }
}

#[test]
fn diff_streams_two_identical_1_gib_files() {
    let _turn = one_at_a_time();
    let argv = ["diff", Files::BIG, Files::COPY];
    let call = measured(&argv);
    same_as_native(&call, &argv, &["/usr/bin/diff", Files::BIG, Files::COPY]);
    assert_eq!((call.code, call.stdout.len()), (0, 0));
    // Different, and too large to show how: a clear error, status 2.
    let argv = ["diff", Files::BIG, Files::DIFFERENT];
    let call = measured(&argv);
    let n = native(
        &files().dir,
        &["/usr/bin/diff", "-q", Files::BIG, Files::DIFFERENT],
        None,
    );
    assert_eq!(n.status.code(), Some(1), "native diff finds them different");
    assert_eq!(call.code, 2, "{}", call.stderr);
    assert_eq!(
        call.stderr,
        "diff: big.txt and different.txt differ; showing how needs more than the 16 MiB \
         in-memory budget (both files, plus 48 bytes per line)\n"
    );
    assert!(call.stdout.is_empty());
}
