//! The contract suite: ATTACKS.md as one table, run against every target each
//! case applies to.
//!
//! `EXPECTATIONS` has one row per target (the three backends, the file tools
//! and the shell tool's policy) and one column per case. A case is written
//! once, against the `Target` driver (how to read a file, open a socket, flood
//! stdout... on that target); a new backend gets the whole suite by adding a
//! row of expectations and its arm in the driver. Every case runs its attack
//! next to its positive control and checks precisely (a canary, a hash, a pid).
//!
//! Marks: `H` held: the case runs here and must hold; `-` not applicable
//! (ATTACKS.md does not list the target); `d` held by a dedicated test of the
//! target's own module (named in `DEDICATED`), not yet written against the
//! driver; `p` pending: listed by ATTACKS.md for the target, not covered yet
//! (printed as such, and in the README). No case is `d` or `p` now, and
//! `the_expectations_cover_attacks_md_and_every_listed_target` wants every
//! listed target held. The summary table is printed (`cargo test contract -- --nocapture`)
//! and kept in the README.

use std::io::Read;
use std::net::TcpListener;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use toolhost::{BackendKind, OutcomeKind, RunOutput, RunRequest, Sandbox, SandboxConfig};

use crate::util::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Direct,
    Docker,
    Wasm,
    Files,
    Shell,
}

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::Direct => "direct",
            Target::Docker => "docker",
            Target::Wasm => "wasm",
            Target::Files => "file tools",
            Target::Shell => "shell policy",
        }
    }
}

/// What each target promises for cases 1 to 40 (ATTACKS.md numbering).
///                                    1         2         3         4
///                           1234567890123456789012345678901234567890
const EXPECTATIONS: &[(Target, &str)] = &[
    (Target::Direct, "--HH------HHHHHHHHHHH-HHHHHHHH-HHHH-----"),
    (Target::Docker, "--HH------HHHHHHHHHHH-HHHHHHHH-HHHH-----"),
    (Target::Wasm, "HHHHHH-HHHHHH--HHH-HHH-----HH-HHHHH-----"),
    (Target::Files, "HHHHHHHHHH-----H------------------------"),
    (Target::Shell, "-----------------------------------HHHHH"),
];

/// Where the `d` cases are checked (none left: every case runs in the driver).
const DEDICATED: &[(u32, &str)] = &[];

fn expectation(t: Target, case: u32) -> char {
    let row = EXPECTATIONS
        .iter()
        .find(|(x, _)| *x == t)
        .map(|(_, r)| *r)
        .unwrap_or("");
    row.chars().nth(case as usize - 1).unwrap_or('-')
}

// ---------------------------------------------------------------- the driver

struct Ctx {
    t: Tmp,
    target: Target,
    image: Option<String>,
}

fn probe_wasm() -> PathBuf {
    let p =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("guest-tools/dist-test/probe.wasm");
    assert!(
        p.exists(),
        "{} is missing: run scripts/build-guest-tools",
        p.display()
    );
    p
}

impl Ctx {
    fn new(target: Target, image: Option<String>) -> Self {
        let t = Tmp::new();
        if target == Target::Docker {
            use std::os::unix::fs::PermissionsExt;
            for (p, mode) in [
                (t.root.clone(), 0o755),
                (t.ws(), 0o777),
                (t.outside(), 0o755),
            ] {
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            }
        }
        if target == Target::Wasm {
            std::fs::copy(probe_wasm(), t.ws().join("probe.wasm")).unwrap();
        }
        std::fs::create_dir_all(t.root.join("ro")).unwrap();
        std::fs::write(t.root.join("ro/keep.txt"), "KEEP").unwrap();
        Ctx { t, target, image }
    }

    fn config(&self) -> SandboxConfig {
        let mut c = SandboxConfig {
            timeout: Duration::from_secs(20),
            ..SandboxConfig::default()
        };
        match self.target {
            Target::Docker => {
                c.backend = BackendKind::Docker;
                c.docker.image = self.image.clone();
            }
            Target::Wasm => c.backend = BackendKind::Wasm,
            _ => {}
        }
        c
    }

    fn sandbox_with(&self, f: impl FnOnce(&mut SandboxConfig)) -> Sandbox {
        let mut c = self.config();
        f(&mut c);
        let dirs = [
            toolhost::AllowedDirSpec::read_write(self.t.ws()),
            toolhost::AllowedDirSpec::read_only(self.t.root.join("ro")),
        ];
        Sandbox::new(dirs, c).expect("sandbox")
    }

    fn sandbox(&self) -> Sandbox {
        self.sandbox_with(|_| {})
    }

    /// Runs `script` (direct, docker) or the probe mode `wasm` (wasm).
    async fn run(&self, sb: &Sandbox, script: &str, wasm: &[&str]) -> RunOutput {
        self.run_req(sb, script, wasm, |r| r).await
    }

    async fn run_req(
        &self,
        sb: &Sandbox,
        script: &str,
        wasm: &[&str],
        f: impl FnOnce(RunRequest) -> RunRequest,
    ) -> RunOutput {
        let req = match self.target {
            Target::Wasm => {
                let probe = self
                    .t
                    .ws()
                    .join("probe.wasm")
                    .to_string_lossy()
                    .into_owned();
                let mut argv = vec![probe.as_str()];
                argv.extend_from_slice(wasm);
                RunRequest::new(argv)
            }
            _ => RunRequest::new(["sh", "-c", script]),
        };
        sb.run(f(req)).await
    }

    /// Reads `path` through the target; `Ok(content)` or `Err(message)`.
    async fn read(&self, sb: &Sandbox, path: &str) -> Result<String, String> {
        match self.target {
            Target::Files => {
                let fs_policy = files_policy();
                toolhost::tools::fs::read(sb.dirs(), &fs_policy, path, 0, None)
                    .map_err(|e| e.message)
            }
            _ => {
                let r = self
                    .run(sb, &format!("cat '{path}'"), &["read", path])
                    .await;
                if r.success() {
                    Ok(r.stdout)
                } else {
                    Err(format!("{} {}", r.stdout, r.stderr))
                }
            }
        }
    }

    /// Writes `data` to `path` through the target.
    async fn write(&self, sb: &Sandbox, path: &str) -> Result<(), String> {
        match self.target {
            Target::Files => {
                toolhost::tools::fs::write(sb.dirs(), &files_policy(), path, b"PWNED", false)
                    .map(|_| ())
                    .map_err(|e| e.message)
            }
            _ => {
                let r = self
                    .run(
                        sb,
                        &format!("printf PWNED > '{path}'"),
                        &["write", path, "5"],
                    )
                    .await;
                if r.success() {
                    Ok(())
                } else {
                    Err(format!("{} {}", r.stdout, r.stderr))
                }
            }
        }
    }
}

fn files_policy() -> toolhost::tools::fs::FsPolicy {
    toolhost::tools::fs::FsPolicy {
        max_file_size: Some(1 << 20),
        max_read_bytes: 1 << 20,
        denied_extensions: Vec::new(),
    }
}

// ---------------------------------------------------------------- the cases

type CaseResult = Result<(), String>;

fn ensure(cond: bool, what: impl FnOnce() -> String) -> CaseResult {
    if cond { Ok(()) } else { Err(what()) }
}

/// The outside canary, as each target sees the host path.
fn canary_path(c: &Ctx) -> String {
    c.t.outside()
        .join("secret.txt")
        .to_string_lossy()
        .into_owned()
}

async fn run_case(c: &Ctx, case: u32) -> CaseResult {
    if c.target == Target::Shell {
        return if case == 40 {
            rate_limit_case(c).await
        } else {
            shell_case(case)
        };
    }
    let sb = c.sandbox();
    let d = c.target;
    match case {
        // Path escapes, read side: none of the hostile spellings reads the
        // canary; the control reads a workspace file.
        1 | 2 | 3 | 6 | 9 => {
            c.t.write("inside.txt", "INSIDE");
            std::os::unix::fs::symlink(c.t.outside(), c.t.ws().join("l")).ok();
            std::os::unix::fs::symlink("l_loop", c.t.ws().join("l_loop")).ok();
            let abs = canary_path(c);
            let paths: Vec<String> = match case {
                1 => vec![
                    "../outside/secret.txt".into(),
                    "a/../../outside/secret.txt".into(),
                    "./.././../outside/secret.txt".into(),
                ],
                2 => vec![
                    abs.clone(),
                    format!("/{abs}"),
                    "file:///etc/passwd".into(),
                    "C:\\Windows\\win.ini".into(),
                    "\\\\?\\C:\\".into(),
                ],
                3 => vec!["l/secret.txt".into()],
                6 => vec![
                    "l/".into(),
                    "l/.".into(),
                    "l/../outside/secret.txt".into(),
                    "l/./secret.txt".into(),
                ],
                _ => vec![
                    "\u{ff0e}\u{ff0e}/outside/secret.txt".into(),
                    format!("{}/x", "n".repeat(5000)),
                    "l_loop/x".into(),
                ],
            };
            for p in paths {
                if let Ok(out) = c.read(&sb, &p).await {
                    ensure(!out.contains(CANARY), || format!("{p}: read the canary"))?;
                }
            }
            let inside = c.read(&sb, "inside.txt").await;
            ensure(inside.as_deref() == Ok("INSIDE"), || {
                format!("control: {inside:?}")
            })
        }
        // A symlink created by one call and followed by the next.
        4 => {
            let first: CaseResult = match d {
                Target::Files => {
                    // The file tools cannot make symlinks; the agent's
                    // other tools can: plant it as they would.
                    std::os::unix::fs::symlink(c.t.outside(), c.t.ws().join("made"))
                        .map_err(|e| e.to_string())
                }
                Target::Wasm => std::os::unix::fs::symlink(c.t.outside(), c.t.ws().join("made"))
                    .map_err(|e| e.to_string()),
                _ => {
                    let target = c.t.outside().to_string_lossy().into_owned();
                    let r = c
                        .run(&sb, &format!("ln -s {target} made && echo made"), &[])
                        .await;
                    ensure(r.stdout == "made\n", || format!("first call: {r:?}"))
                }
            };
            first?;
            match c.read(&sb, "made/secret.txt").await {
                Ok(out) => ensure(!out.contains(CANARY), || format!("followed: {out}")),
                Err(_) => Ok(()),
            }?;
            // Writing through it does not land outside either.
            let _ = c.write(&sb, "made/planted").await;
            ensure(!c.t.outside().join("planted").exists(), || {
                "wrote outside".into()
            })?;
            c.write(&sb, "ok.txt")
                .await
                .map_err(|e| format!("control write: {e}"))?;
            let len = std::fs::metadata(c.t.ws().join("ok.txt")).map_or(0, |m| m.len());
            ensure(len == 5, || format!("control: {len} bytes written"))
        }
        // Prefix confusion: the root is `<root>/ws`, the request names the
        // sibling `<root>/ws-evil`.
        7 => {
            let evil = c.t.root.join("ws-evil");
            std::fs::create_dir_all(&evil).unwrap();
            std::fs::write(evil.join("x"), CANARY).unwrap();
            let before = sha256_file(&evil.join("x"));
            let abs = evil.join("x").to_string_lossy().into_owned();
            for p in [abs.as_str(), "../ws-evil/x"] {
                let r = c.read(&sb, p).await;
                ensure(r.as_ref().is_err_and(|e| !e.contains(CANARY)), || {
                    format!("read {p}: {r:?}")
                })?;
                let w = c.write(&sb, p).await;
                ensure(w.is_err() && sha256_file(&evil.join("x")) == before, || {
                    format!("write {p}: {w:?}")
                })?;
            }
            c.t.write("x", "inside");
            let inside = c.t.ws().join("x").to_string_lossy().into_owned();
            let r = c.read(&sb, &inside).await;
            ensure(r.as_deref() == Ok("inside"), || format!("control: {r:?}"))
        }
        // A read-only file renamed or linked into the writable dir, then
        // written: refused, the file unchanged.
        8 => {
            let ro = c.t.root.join("ro/keep.txt");
            let before = sha256_file(&ro);
            let ro_s = ro.to_string_lossy().into_owned();
            c.t.write("a.txt", "a");
            if d == Target::Wasm {
                // The guest's own rename(2) and link(2) of the read-only file.
                for (mode, dest) in [("rename", "moved.txt"), ("link", "linked.txt")] {
                    let r = c.run(&sb, "", &[mode, &ro_s, dest]).await;
                    ensure(
                        !r.success()
                            && r.stdout.starts_with("ERR ")
                            && !c.t.ws().join(dest).exists(),
                        || format!("{mode}: {r:?}"),
                    )?;
                }
            } else {
                let moved = toolhost::tools::fs::rename(
                    sb.dirs(),
                    &files_policy(),
                    &ro_s,
                    "moved.txt",
                    false,
                );
                ensure(moved.is_err(), || "rename out of the read-only dir".into())?;
            }
            let w = c.write(&sb, &ro_s).await;
            ensure(
                w.is_err() && sha256_file(&ro) == before && !c.t.ws().join("moved.txt").exists(),
                || format!("write: {w:?}"),
            )?;
            // Control: the same operations inside the writable dir.
            if d == Target::Wasm {
                let r = c.run(&sb, "", &["link", "a.txt", "c.txt"]).await;
                ensure(r.stdout == "linked\n", || format!("control link: {r:?}"))?;
                let r = c.run(&sb, "", &["rename", "a.txt", "b.txt"]).await;
                ensure(r.stdout == "renamed\n", || format!("control rename: {r:?}"))?;
                ensure(c.t.ws().join("b.txt").exists(), || {
                    "control: no b.txt".into()
                })
            } else {
                let r = toolhost::tools::fs::rename(
                    sb.dirs(),
                    &files_policy(),
                    "a.txt",
                    "b.txt",
                    false,
                );
                ensure(r.is_ok(), || format!("control rename: {r:?}"))
            }
        }
        // Symlink swap race: a thread swaps `d` between a symlink to a dir
        // inside and one leading outside, thousands of times, while reads
        // and writes go through `d/f`. Nothing outside is read or written
        // (canary, hash, listing); the control: accesses went through while
        // the link pointed inside.
        5 => {
            use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
            let secret = c.t.outside().join("f");
            std::fs::write(&secret, CANARY).map_err(|e| e.to_string())?;
            let before = sha256_file(&secret);
            let listing = || {
                let mut v: Vec<_> = std::fs::read_dir(c.t.outside())
                    .map(|d| d.flatten().map(|e| e.file_name()).collect())
                    .unwrap_or_default();
                v.sort();
                v
            };
            let files_before = listing();
            std::fs::create_dir(c.t.ws().join("real")).map_err(|e| e.to_string())?;
            std::fs::write(c.t.ws().join("real/f"), "inside").map_err(|e| e.to_string())?;
            let stop = std::sync::Arc::new(AtomicBool::new(false));
            let swaps = std::sync::Arc::new(AtomicU64::new(0));
            let swapper = {
                let (stop, swaps, ws, out) = (stop.clone(), swaps.clone(), c.t.ws(), c.t.outside());
                std::thread::spawn(move || {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let target: PathBuf = if n.is_multiple_of(2) {
                            out.clone()
                        } else {
                            "real".into()
                        };
                        let _ = std::fs::remove_file(ws.join("d.tmp"));
                        let _ = std::os::unix::fs::symlink(&target, ws.join("d.tmp"));
                        let _ = std::fs::rename(ws.join("d.tmp"), ws.join("d"));
                        n += 1;
                        swaps.store(n, Ordering::Relaxed);
                    }
                })
            };
            let (mut reads, mut reads_ok, mut writes_ok) = (0, 0, 0);
            let mut seen = Err(String::new());
            let deadline = Instant::now() + Duration::from_secs(30);
            while (reads < 150
                || swaps.load(Ordering::Relaxed) <= 1000
                || reads_ok == 0
                || writes_ok == 0)
                && Instant::now() < deadline
            {
                reads += 1;
                if let Ok(s) = c.read(&sb, "d/f").await {
                    if s.contains(CANARY) {
                        seen = Ok(s);
                        break;
                    }
                    reads_ok += 1;
                }
                writes_ok += usize::from(c.write(&sb, "d/f").await.is_ok());
            }
            stop.store(true, Ordering::Relaxed);
            let _ = swapper.join();
            ensure(seen.is_err(), || format!("read outside: {seen:?}"))?;
            ensure(sha256_file(&secret) == before, || {
                "the outside file changed".into()
            })?;
            ensure(listing() == files_before, || {
                "files appeared outside".into()
            })?;
            let n = swaps.load(Ordering::Relaxed);
            ensure(n > 1000, || format!("the race did not run ({n} swaps)"))?;
            ensure(reads_ok > 0 && writes_ok > 0, || {
                format!("control: {reads_ok} reads and {writes_ok} writes of {reads} went through")
            })
        }
        // toolhost itself killed (SIGKILL, no cleanup code runs) mid-call:
        // the tool's processes do not live on: on direct at once, on docker
        // once the next toolhost starts (it removes the containers labelled
        // with a dead owner).
        27 => {
            let (marker, script) = match d {
                Target::Direct => ("sleep 9541", "m=95; sleep ${m}41 & wait"),
                _ => ("sleep 9542", "m=95; sleep ${m}42 & wait"),
            };
            let mut args: Vec<String> = ["run", "--timeout", "120"].map(String::from).to_vec();
            if d == Target::Docker {
                let cfg = c.t.root.join("docker.toml");
                let image = c.image.clone().unwrap_or_default();
                std::fs::write(&cfg, format!("[docker]\nimage = {image:?}\n"))
                    .map_err(|e| e.to_string())?;
                args.extend(["--config".into(), cfg.to_string_lossy().into_owned()]);
                args.extend(["--backend".into(), "docker".into()]);
            }
            args.extend(["--", "sh", "-c", script].map(String::from));
            let mut child = std::process::Command::new(toolhost_bin())
                .args(&args)
                .current_dir(c.t.ws())
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .env_remove("TOOLHOST_CONFIG")
                .spawn()
                .map_err(|e| e.to_string())?;
            let deadline = Instant::now() + Duration::from_secs(30);
            let pids = loop {
                let p = processes_with(marker);
                if !p.is_empty() || Instant::now() > deadline {
                    break p;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            };
            let _ = child.kill();
            let _ = child.wait();
            ensure(pids.len() == 1, || {
                format!("control: the tool never ran ({pids:?})")
            })?;
            if d == Target::Docker {
                let mut next: Vec<&str> = args
                    .iter()
                    .take_while(|a| *a != "--")
                    .map(|a| a.as_str())
                    .collect();
                next.extend(["--", "true"]);
                let out = toolhost(&c.t.ws(), &next, &[]);
                ensure(out.status.success(), || format!("the next start: {out:?}"))?;
            }
            let left = still_alive(&pids, Duration::from_secs(5));
            ensure(left.is_empty(), || {
                format!("{marker} outlived toolhost: {left:?}")
            })
        }
        // Special files: a FIFO nobody writes, a symlink to /dev/zero: the
        // read ends (refused or bounded), never blocks forever.
        10 => {
            // Wasm and the file tools run in this process: no thread of it
            // may be left waiting on the FIFO (the suite found wasm leaving
            // one in open(2)). The lock keeps the race test's transient ones
            // out of the count.
            let in_process = matches!(c.target, Target::Wasm | Target::Files);
            let _fifo_tests = if in_process {
                Some(FIFO_TESTS.lock().await)
            } else {
                None
            };
            let fifo = c.t.ws().join("fifo");
            let c_path = std::ffi::CString::new(fifo.to_string_lossy().as_bytes()).unwrap();
            // SAFETY: mkfifo with a valid path.
            unsafe { libc::mkfifo(c_path.as_ptr(), 0o644) };
            std::os::unix::fs::symlink("/dev/zero", c.t.ws().join("zero")).ok();
            let sb = c.sandbox_with(|cfg| cfg.timeout = Duration::from_secs(3));
            for p in ["fifo", "zero"] {
                let t0 = Instant::now();
                let r = c.read(&sb, p).await;
                ensure(t0.elapsed() < Duration::from_secs(10), || {
                    format!("{p}: took {:?}", t0.elapsed())
                })?;
                if let Ok(out) = r {
                    ensure(out.len() <= 1 << 20, || format!("{p}: {} bytes", out.len()))?;
                }
            }
            if in_process {
                let n = threads_waiting_on_a_fifo();
                ensure(n == 0, || format!("{n} threads left waiting on the FIFO"))?;
            }
            c.t.write("plain.txt", "plain");
            let r = c.read(&sb, "plain.txt").await;
            ensure(r.as_deref() == Ok("plain"), || format!("control: {r:?}"))
        }
        // cwd outside, or a symlink leading out.
        11 => {
            std::os::unix::fs::symlink(c.t.outside(), c.t.ws().join("out")).ok();
            std::fs::create_dir_all(c.t.ws().join("sub")).ok();
            let outside = c.t.outside().to_string_lossy().into_owned();
            for cwd in [outside.as_str(), "out", "..", "/"] {
                let r = c.run_req(&sb, "pwd", &["cwd"], |r| r.cwd(cwd)).await;
                ensure(r.outcome.kind == OutcomeKind::CwdOutside, || {
                    format!("{cwd}: {r:?}")
                })?;
            }
            c.t.write("sub/marker", "in-sub");
            let r = c
                .run_req(&sb, "cat marker", &["read", "marker"], |r| r.cwd("sub"))
                .await;
            ensure(r.stdout == "in-sub", || format!("control: {r:?}"))
        }
        // Environment: only allowlisted names, deny-listed ones stripped
        // even when allowlisted, no canary.
        12 | 13 => {
            // SAFETY: set once per name; the tests that read these names
            // compare against the marker, not the absence.
            unsafe {
                std::env::set_var("TOOLHOST_CONTRACT_CANARY", CANARY);
                std::env::set_var("LD_PRELOAD", "/tmp/evil-contract.so");
                std::env::set_var("HTTP_PROXY", "http://evil.invalid:1");
                std::env::set_var("TOOLHOST_CONTRACT_OK", "allowed-value");
            }
            let sb = c.sandbox_with(|cfg| {
                cfg.env_allowlist.extend(
                    [
                        "TOOLHOST_CONTRACT_OK",
                        "LD_PRELOAD",
                        "HTTP_PROXY",
                        "BASH_ENV",
                    ]
                    .map(String::from),
                );
            });
            let r = c.run(&sb, "env", &["env"]).await;
            ensure(r.success(), || format!("{r:?}"))?;
            ensure(!r.stdout.contains(CANARY), || "canary in env".into())?;
            ensure(
                !r.stdout.contains("LD_PRELOAD") && !r.stdout.contains("evil"),
                || format!("deny-listed name: {}", r.stdout),
            )?;
            ensure(
                r.stdout.contains("TOOLHOST_CONTRACT_OK=allowed-value"),
                || format!("control: {}", r.stdout),
            )
        }
        // /proc: no canary from the parent's or init's environment.
        14 => {
            unsafe { std::env::set_var("TOOLHOST_CONTRACT_CANARY", CANARY) };
            let r = c.run(&sb, "cat /proc/$PPID/environ /proc/1/environ /proc/self/root/proc/1/environ 2>&1; echo; cat /proc/self/status | head -1", &[]).await;
            ensure(
                !r.stdout.contains(CANARY) && !r.stderr.contains(CANARY),
                || "canary via /proc".into(),
            )?;
            ensure(r.stdout.contains("Name:"), || format!("control: {r:?}"))
        }
        // Only fds 0-2 open in the tool.
        15 => {
            let r = c.run(&sb, "ls /proc/self/fd", &[]).await;
            let fds: Vec<&str> = r.stdout.split_whitespace().collect();
            // `ls` itself opens one fd to read the directory.
            ensure(fds.len() == 4 && fds[..3] == ["0", "1", "2"], || {
                format!("fds: {fds:?}")
            })
        }
        // Error messages carry no host secret and no host path outside.
        16 => {
            let outside = c.t.outside().to_string_lossy().into_owned();
            let msg = match c.target {
                Target::Files => c
                    .read(&sb, "../outside/secret.txt")
                    .await
                    .err()
                    .unwrap_or_default(),
                _ => {
                    let r = c
                        .run_req(&sb, "true", &["cwd"], |r| r.cwd(outside.as_str()))
                        .await;
                    r.outcome.message
                }
            };
            ensure(!msg.is_empty() && !msg.contains(CANARY), || {
                format!("message: {msg:?}")
            })?;
            ensure(!msg.contains(&format!("{outside}/")), || {
                format!("host path in {msg:?}")
            })
        }
        // Memory bomb.
        17 => {
            let sb = c.sandbox_with(|cfg| cfg.max_memory_mb = 64);
            let r = c
                .run(
                    &sb,
                    if d == Target::Docker {
                        "head -c 300000000 /dev/zero | tail > /dev/null; echo survived"
                    } else {
                        "python3 -c 'b = bytearray(3 * 1024**3)'"
                    },
                    &["alloc", "4096"],
                )
                .await;
            ensure(
                matches!(
                    r.outcome.kind,
                    OutcomeKind::MemoryLimit | OutcomeKind::Signalled
                ) || (d == Target::Docker && !r.success()),
                || format!("{r:?}"),
            )?;
            let r = c.run(&sb, "echo small", &["alloc", "4"]).await;
            ensure(r.success(), || format!("control: {r:?}"))
        }
        // CPU spin: a limit or the timeout, on time.
        18 => {
            let sb = c.sandbox_with(|cfg| {
                cfg.timeout = Duration::from_secs(3);
                cfg.max_cpu_seconds = 1;
            });
            let t0 = Instant::now();
            let r = c.run(&sb, "while :; do :; done", &["spin"]).await;
            ensure(
                matches!(
                    r.outcome.kind,
                    OutcomeKind::CpuLimit | OutcomeKind::TimedOut
                ) && t0.elapsed() < Duration::from_secs(10),
                || format!("{r:?} after {:?}", t0.elapsed()),
            )
        }
        // Many small files, and handle exhaustion: a clear error in the
        // call, the host's fds bounded, the next call runs.
        21 => {
            let many =
                "i=0; while [ $i -lt 2000 ]; do echo x > m-$i; i=$((i+1)); done; echo created $i";
            let exhaust = match d {
                // busybox tail -f keeps every file it follows open.
                Target::Docker => {
                    "i=0; while [ $i -lt 5000 ]; do : > fd-$i; i=$((i+1)); done; timeout 2 tail -f fd-* 2>&1 | grep -c 'Too many open files'"
                }
                _ => {
                    "python3 -c \"import os\nfds = []\ntry:\n    while True: fds.append(os.open('/dev/null', os.O_RDONLY))\nexcept OSError as e:\n    print(1 if e.errno == 24 and len(fds) > 100 else 0)\""
                }
            };
            let r = c.run(&sb, many, &["many", "2000"]).await;
            ensure(r.stdout == "created 2000\n", || format!("{r:?}"))?;
            let on_host = std::fs::read_dir(c.t.ws())
                .map(|d| {
                    d.flatten()
                        .filter(|e| e.file_name().to_string_lossy().starts_with("m-"))
                        .count()
                })
                .unwrap_or(0);
            ensure(on_host == 2000, || format!("{on_host} files on the host"))?;
            let r = c.run(&sb, exhaust, &["fds", "100000"]).await;
            if d != Target::Wasm {
                let refused: u32 = r.stdout.trim().parse().unwrap_or(0);
                ensure(refused > 0, || format!("{r:?}"))?;
            } else {
                // The guest is stopped at its handle cap (each handle is a host
                // fd of toolhost's), long before toolhost's own fd limit: its
                // progress lines stop below 1024.
                let last: usize = r
                    .stdout
                    .lines()
                    .last()
                    .and_then(|l| l.strip_prefix("opened "))
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(usize::MAX);
                ensure(
                    r.outcome.kind == OutcomeKind::Trapped
                        && r.outcome.message.contains("handles at once")
                        && (512..1024).contains(&last),
                    || format!("{r:?}"),
                )?;
            }
            let r = c.run(&sb, "echo next", &["args"]).await;
            ensure(r.success(), || format!("control: {r:?}"))
        }
        // Huge file write: stopped at max_file_size_mb.
        20 => {
            let sb = c.sandbox_with(|cfg| cfg.max_file_size_mb = 1);
            let r = c
                .run(
                    &sb,
                    "head -c 5000000 /dev/zero > big",
                    &["write", "big", "5000000"],
                )
                .await;
            let size = std::fs::metadata(c.t.ws().join("big"))
                .map(|m| m.len())
                .unwrap_or(0);
            ensure(!r.success() && size <= 1 << 20, || {
                format!("{r:?}, {size} bytes")
            })?;
            let r = c
                .run(
                    &sb,
                    "head -c 1000 /dev/zero > small",
                    &["write", "small", "1000"],
                )
                .await;
            ensure(r.success(), || format!("control: {r:?}"))
        }
        // Guest blocked in a host call: the timeout still ends it.
        22 => {
            let sb = c.sandbox_with(|cfg| cfg.timeout = Duration::from_secs(1));
            let t0 = Instant::now();
            let r = c.run(&sb, "", &["sleep", "60"]).await;
            ensure(
                r.outcome.kind == OutcomeKind::TimedOut && t0.elapsed() < Duration::from_secs(5),
                || format!("{r:?}"),
            )
        }
        // Process floods: 400 sleepers, half double-forked out of the
        // tool's tree, until the timeout: all reaped, the host can still spawn.
        19 => {
            let marker = format!("{}.5", 4000 + std::process::id() % 1000);
            let sb = c.sandbox_with(|cfg| cfg.timeout = Duration::from_secs(2));
            let r = c
                .run(
                    &sb,
                    &format!(
                        "i=0; while [ $i -lt 200 ]; do sleep {marker} & (sleep {marker} &); i=$((i+1)); done 2>/dev/null; echo started; wait"
                    ),
                    &[],
                )
                .await;
            // Docker's pids limit may end the flood first (the shell cannot
            // fork: exit 2); either way it is contained.
            let contained = r.timed_out && r.stdout == "started\n"
                || d == Target::Docker && r.returncode == Some(2);
            ensure(contained, || format!("{r:?}"))?;
            let left = still_alive(
                &processes_with(&format!("sleep {marker}")),
                Duration::from_secs(5),
            );
            ensure(left.is_empty(), || {
                format!("{} sleepers survived", left.len())
            })?;
            let host = std::process::Command::new("true").status();
            ensure(host.as_ref().is_ok_and(|s| s.success()), || {
                format!("the host cannot spawn: {host:?}")
            })?;
            let r = c.run(&sb, "echo next", &[]).await;
            ensure(r.success(), || format!("control: {r:?}"))
        }
        // A grandchild holds stdout open past the timeout: the call still
        // returns on time, and it is gone.
        26 => {
            let marker = format!("{}.5", 5000 + std::process::id() % 1000);
            let sb = c.sandbox_with(|cfg| cfg.timeout = Duration::from_secs(1));
            let t0 = Instant::now();
            let r = c
                .run(
                    &sb,
                    &format!("(sleep {marker}; echo late) & echo started; exec sleep {marker}"),
                    &[],
                )
                .await;
            ensure(
                r.timed_out && r.stdout == "started\n" && t0.elapsed() < Duration::from_secs(8),
                || format!("{r:?} after {:?}", t0.elapsed()),
            )?;
            let left = still_alive(
                &processes_with(&format!("sleep {marker}")),
                Duration::from_secs(5),
            );
            ensure(left.is_empty(), || format!("survivors: {left:?}"))?;
            let r = c.run(&sb, "echo fast", &[]).await;
            ensure(r.success() && r.stdout == "fast\n", || {
                format!("control: {r:?}")
            })
        }
        // Background, setsid, double fork, nohup, trap '' TERM: nothing survives.
        23..=25 => {
            let marker = format!("{}", 3000 + case * 7 + std::process::id() % 1000);
            let script = match case {
                23 => format!("sleep {marker} & echo started"),
                24 => format!(
                    "setsid sleep {marker} & (sh -c 'sleep {marker} &' &); nohup sleep {marker} >/dev/null 2>&1 & echo started"
                ),
                _ => format!("sh -c \"trap '' TERM; sleep {marker}\" & echo started"),
            };
            let r = c.run(&sb, &script, &[]).await;
            ensure(r.stdout == "started\n", || format!("{r:?}"))?;
            let left = still_alive(
                &processes_with(&format!("sleep {marker}")),
                Duration::from_secs(5),
            );
            ensure(left.is_empty(), || format!("survivors: {left:?}"))
        }
        // TCP to a listening loopback port: refused with the network off,
        // reaches it with the network on (direct, wasm) or gets a route
        // (docker: its loopback is its own, so the control is the network
        // being there at all).
        28 => {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.set_nonblocking(true).unwrap();
            let addr = l.local_addr().unwrap().to_string();
            let port = l.local_addr().unwrap().port();
            let script = if d == Target::Docker {
                "ip route 2>/dev/null | grep -q default && echo route || echo noroute; nc -w 2 127.0.0.1 1 </dev/null; cat /proc/net/dev | grep -c :".to_string()
            } else {
                format!(
                    "python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3).sendall(b'x'); print('connected')\""
                )
            };
            let r = c.run(&sb, &script, &["connect", &addr]).await;
            ensure(
                !r.stdout.contains("connected") && l.accept().is_err(),
                || format!("network off: {r:?}"),
            )?;
            if d == Target::Docker {
                // Only the loopback interface exists in the container.
                ensure(r.stdout.trim_end().ends_with('1'), || {
                    format!("interfaces: {r:?}")
                })?;
                return Ok(());
            }
            let on = c.sandbox_with(|cfg| cfg.allow_network = true);
            let r = c.run(&on, &script, &["connect", &addr]).await;
            if d == Target::Wasm {
                // wasm has no sockets at all: the control is that the
                // refusal names the capability, not a failed connection.
                return ensure(r.stdout.contains("ERR") || !r.success(), || {
                    format!("wasm sockets: {r:?}")
                });
            }
            l.set_nonblocking(false).unwrap();
            ensure(r.stdout.contains("connected"), || {
                format!("network on: {r:?}")
            })?;
            let (mut s, _) = l.accept().unwrap();
            let mut b = [0u8; 1];
            s.read_exact(&mut b).map_err(|e| e.to_string())
        }
        // DNS, UDP, raw sockets: refused with the network off.
        29 => {
            let script = if d == Target::Docker {
                "nslookup example.com 2>&1 | tail -2; echo x | nc -u -w 1 1.1.1.1 53 && echo sent"
                    .to_string()
            } else {
                "python3 -c \"
import socket
for fam, kind in ((socket.AF_INET, socket.SOCK_DGRAM), (socket.AF_INET, socket.SOCK_RAW), (socket.AF_INET6, socket.SOCK_DGRAM)):
    try:
        s = socket.socket(fam, kind, 1 if kind == socket.SOCK_RAW else 0); s.sendto(b'x', ('127.0.0.1' if fam == socket.AF_INET else '::1', 53)); print('sent')
    except OSError as e:
        print('refused', e.errno)
try:
    socket.getaddrinfo('example.com', 80); print('resolved')
except OSError:
    print('no dns')
\"".to_string()
            };
            let r = c.run(&sb, &script, &["resolve", "example.com"]).await;
            ensure(
                !r.stdout.contains("sent")
                    && !r.stdout.contains("resolved")
                    && !r.stdout.contains("Address: "),
                || format!("{r:?}"),
            )?;
            ensure(!r.stdout.is_empty() || !r.success(), || {
                format!("nothing ran: {r:?}")
            })
        }
        // Host unix sockets (docker.sock and friends).
        30 => {
            use std::os::unix::net::UnixListener;
            let path = c.t.outside().join("daemon.sock");
            let l = UnixListener::bind(&path).unwrap();
            l.set_nonblocking(true).unwrap();
            let p = path.to_string_lossy();
            let script = if d == Target::Docker {
                format!(
                    "ls -l {p} /var/run/docker.sock /run/docker.sock 2>&1 | grep -c 'No such file'"
                )
            } else {
                format!(
                    "python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('{p}'); print('connected')\""
                )
            };
            let r = c.run(&sb, &script, &[]).await;
            ensure(
                !r.stdout.contains("connected") && l.accept().is_err(),
                || format!("{r:?}"),
            )?;
            if d == Target::Docker {
                ensure(r.stdout.trim() == "3", || format!("sockets visible: {r:?}"))?;
            }
            Ok(())
        }
        // wasi:sockets: denied.
        31 => {
            let r = c.run(&sb, "", &["connect", "127.0.0.1:9"]).await;
            ensure(
                r.stdout.starts_with("ERR")
                    || r.stdout.contains("denied")
                    || r.stdout.contains("not supported")
                    || !r.success(),
                || format!("{r:?}"),
            )?;
            let r = c.run(&sb, "", &["resolve", "localhost"]).await;
            ensure(!r.stdout.contains("127.0.0.1"), || format!("{r:?}"))
        }
        // Output flood: truncated while streaming, host memory bounded.
        32 | 33 => {
            let sb = c.sandbox_with(|cfg| {
                cfg.max_output_bytes = 100_000;
                cfg.timeout = Duration::from_secs(10);
            });
            let (script, wasm) = if case == 32 {
                ("head -c 50000000 /dev/zero", ["flood", "50000000"])
            } else {
                (
                    "head -c 50000000 /dev/zero >&2; echo out",
                    ["flood-err", "50000000"],
                )
            };
            let r = c.run(&sb, script, &wasm).await;
            let total = r.stdout.len() + r.stderr.len();
            ensure(r.truncated && total <= 100_000 && !r.timed_out, || {
                format!(
                    "{} bytes, truncated {}, {:?}",
                    total, r.truncated, r.outcome
                )
            })
        }
        // One huge line, invalid UTF-8, NULs, escapes: capped, decoded lossily.
        34 => {
            let sb = c.sandbox_with(|cfg| cfg.max_output_bytes = 10_000);
            let r = c
                .run(
                    &sb,
                    "printf 'a\\377\\000\\033[2Jb'; head -c 100000 /dev/zero | tr '\\0' x",
                    &["bytes"],
                )
                .await;
            ensure(r.stdout.len() <= 10_000, || {
                format!("{} bytes", r.stdout.len())
            })?;
            if d != Target::Wasm {
                ensure(
                    r.stdout.starts_with("a\u{fffd}\0\u{1b}[2Jb") && r.truncated,
                    || format!("{:?}", &r.stdout[..20.min(r.stdout.len())]),
                )?;
            }
            Ok(())
        }
        // stdin never given: EOF at once.
        35 => {
            let t0 = Instant::now();
            let r = c.run(&sb, "cat; echo eof", &["stdin"]).await;
            ensure(r.success() && t0.elapsed() < Duration::from_secs(5), || {
                format!("{r:?}")
            })?;
            let r = c
                .run_req(&sb, "cat", &["stdin"], |r| r.stdin(b"given".to_vec()))
                .await;
            ensure(
                r.stdout.contains("given") || r.stdout.contains("5 bytes"),
                || format!("control: {r:?}"),
            )
        }
        // Shell policy: paths and look-alikes, wrappers, metacharacters,
        // network clients with the network off.
        36..=39 => shell_case(case),
        _ => Err(format!("case {case} has no generic implementation")),
    }
}

/// Case 40 through the agent's tools: N+1 calls inside the window get a
/// typed `rate_limited` result, unknown, denied and failed calls count too, and
/// of 20 concurrent calls exactly the limit gets through.
async fn rate_limit_case(c: &Ctx) -> CaseResult {
    use serde_json::json;
    use toolhost::tools::toolbox::Toolbox;
    let toolbox = |calls: u64| {
        let mut cfg = c.config();
        cfg.shell_allowed_binaries = vec!["echo".into()];
        cfg.rate_limit_calls = calls;
        cfg.rate_limit_window = Duration::from_secs(600);
        let dirs = [toolhost::AllowedDirSpec::read_write(c.t.ws())];
        let sb = Sandbox::new(dirs, cfg).expect("sandbox");
        Toolbox::new(std::sync::Arc::new(sb), Default::default())
    };
    let tb = toolbox(3).await;
    let r = tb.call("no_such_tool", &json!({})).await;
    ensure(r.status == "unknown_tool", || format!("{r:?}"))?;
    let r = tb.call("shell", &json!({"args": ["rm", "x"]})).await;
    ensure(r.status == "denied", || format!("{r:?}"))?;
    let r = tb.call("file_read", &json!({"path": "missing"})).await;
    ensure(r.status == "not_found", || format!("{r:?}"))?;
    let r = tb.call("shell", &json!({"args": ["echo", "x"]})).await;
    ensure(
        r.status == "rate_limited" && r.rule.as_deref() == Some("rate_limit"),
        || format!("the 4th call: {r:?}"),
    )?;
    let wait = r.retry_after_ms.unwrap_or(0);
    ensure(wait > 590_000 && wait <= 600_000, || {
        format!("retry after {wait} ms")
    })?;
    // Control: a fresh window admits the same call.
    let r = toolbox(3)
        .await
        .call("shell", &json!({"args": ["echo", "x"]}))
        .await;
    ensure(r.status == "ok" && r.text.contains('x'), || {
        format!("control: {r:?}")
    })?;
    // Concurrently: exactly the limit gets through.
    let tb = std::sync::Arc::new(toolbox(5).await);
    let calls: Vec<_> = (0..20)
        .map(|_| {
            let tb = tb.clone();
            tokio::spawn(
                async move { tb.call("file_list", &json!({})).await.status != "rate_limited" },
            )
        })
        .collect();
    let mut admitted = 0;
    for call in calls {
        admitted += usize::from(call.await.map_err(|e| e.to_string())?);
    }
    ensure(admitted == 5 && tb.denials() == 15, || {
        format!("{admitted} admitted, {} denied", tb.denials())
    })
}

fn shell_case(case: u32) -> CaseResult {
    use toolhost::policy::shell::ShellPolicy;
    let allowed: Vec<String> = ["ls", "cat", "curl", "grep"].map(String::from).to_vec();
    let p = ShellPolicy {
        allowed: allowed.clone(),
        allow_strings: true,
        allow_network: false,
    };
    let argv = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let refused: Vec<Vec<String>> = match case {
        36 => [
            "/bin/rm",
            "./ls",
            "../bin/ls",
            "\u{ff4c}s",
            "l\u{200b}s",
            "/bin/ls",
        ]
        .iter()
        .map(|a| argv(&[a, "x"]))
        .collect(),
        37 => ["env", "xargs", "nice", "timeout", "busybox", "find"]
            .iter()
            .map(|a| argv(&[a, "rm", "-rf", "/"]))
            .collect(),
        39 => vec![argv(&["curl", "http://example.com"])],
        _ => Vec::new(),
    };
    for a in &refused {
        ensure(p.check_args(a).is_err(), || format!("{a:?} allowed"))?;
    }
    if case == 38 {
        for cmd in [
            "ls; rm -rf /",
            "ls && id",
            "ls | sh",
            "ls $(id)",
            "ls `id`",
            "ls > /etc/x",
            "ls\nid",
        ] {
            ensure(p.check_string(cmd).is_err(), || format!("{cmd:?} allowed"))?;
        }
    }
    if case == 39 {
        let on = ShellPolicy {
            allow_network: true,
            ..p.clone()
        };
        ensure(on.check_args(&argv(&["curl", "x"])).is_ok(), || {
            "control: curl with network on".into()
        })?;
    }
    // Control: an allowlisted bare name, as args and as a string.
    ensure(p.check_args(&argv(&["ls", "-la"])).is_ok(), || {
        "control args".into()
    })?;
    ensure(p.check_string("grep -n 'a b' file").is_ok(), || {
        "control string".into()
    })
}

#[test]
fn contract_suite_every_case_on_every_target() {
    let image = crate::docker::image();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut failures = Vec::new();
    let mut table: Vec<(Target, Vec<String>)> = Vec::new();
    for &(target, row) in EXPECTATIONS {
        assert_eq!(row.len(), 40, "{target:?} row must have 40 marks");
        let mut cells = Vec::new();
        for case in 1..=40u32 {
            let cell = match expectation(target, case) {
                '-' => "n/a".to_string(),
                'd' => {
                    assert!(
                        DEDICATED.iter().any(|(n, _)| *n == case),
                        "case {case} marked d without a dedicated test"
                    );
                    "held (dedicated)".to_string()
                }
                'p' => "PENDING".to_string(),
                'H' => {
                    if target == Target::Docker && image.is_none() {
                        "skipped (no engine)".to_string()
                    } else {
                        let ctx = Ctx::new(target, image.clone());
                        let r = rt.block_on(async {
                            tokio::time::timeout(Duration::from_secs(60), run_case(&ctx, case))
                                .await
                                .unwrap_or_else(|_| Err("case timed out".into()))
                        });
                        match r {
                            Ok(()) => "held".to_string(),
                            Err(e) => {
                                failures.push(format!("case {case} on {}: {e}", target.name()));
                                "FAILED".to_string()
                            }
                        }
                    }
                }
                m => panic!("unknown mark {m:?}"),
            };
            cells.push(cell);
        }
        table.push((target, cells));
    }
    rt.block_on(toolhost::backend::docker::flush_removals());
    // The summary table, case x target.
    let mut out = String::from("\ncontract suite (ATTACKS.md)\ncase");
    for (t, _) in &table {
        out.push_str(&format!(" | {}", t.name()));
    }
    out.push('\n');
    for case in 1..=40usize {
        out.push_str(&format!("{case:>4}"));
        for (_, cells) in &table {
            out.push_str(&format!(" | {}", cells[case - 1]));
        }
        out.push('\n');
    }
    println!("{out}");
    assert!(failures.is_empty(), "{}\n{out}", failures.join("\n"));
}

#[test]
fn the_expectations_cover_attacks_md_and_every_listed_target() {
    // ATTACKS.md's own target letters, per case: every listed target is held
    // here (H or d), none is left n/a.
    let listed: [(&str, &[Target]); 35] = [
        ("1", &[Target::Files, Target::Wasm]),
        ("2", &[Target::Files, Target::Wasm]),
        (
            "3",
            &[Target::Files, Target::Wasm, Target::Direct, Target::Docker],
        ),
        (
            "4",
            &[Target::Files, Target::Wasm, Target::Direct, Target::Docker],
        ),
        ("5", &[Target::Files, Target::Wasm]),
        ("6", &[Target::Files, Target::Wasm]),
        ("7", &[Target::Files]),
        ("8", &[Target::Files, Target::Wasm]),
        ("9", &[Target::Files, Target::Wasm]),
        ("10", &[Target::Files, Target::Wasm]),
        ("11", &[Target::Direct, Target::Docker, Target::Wasm]),
        ("12", &[Target::Direct, Target::Docker, Target::Wasm]),
        ("13", &[Target::Direct, Target::Docker, Target::Wasm]),
        ("14", &[Target::Direct, Target::Docker]),
        ("15", &[Target::Direct, Target::Docker]),
        ("17", &[Target::Direct, Target::Docker, Target::Wasm]),
        ("18", &[Target::Direct, Target::Docker, Target::Wasm]),
        ("19", &[Target::Direct, Target::Docker]),
        ("20", &[Target::Direct, Target::Docker, Target::Wasm]),
        ("21", &[Target::Direct, Target::Docker, Target::Wasm]),
        ("22", &[Target::Wasm]),
        ("23", &[Target::Direct, Target::Docker]),
        ("24", &[Target::Direct, Target::Docker]),
        ("25", &[Target::Direct, Target::Docker]),
        ("26", &[Target::Direct, Target::Docker]),
        ("27", &[Target::Direct, Target::Docker]),
        ("28", &[Target::Direct, Target::Docker, Target::Wasm]),
        ("29", &[Target::Direct, Target::Docker, Target::Wasm]),
        ("30", &[Target::Direct, Target::Docker]),
        ("31", &[Target::Wasm]),
        ("32", &[Target::Direct, Target::Docker, Target::Wasm]),
        ("33", &[Target::Direct, Target::Docker, Target::Wasm]),
        ("34", &[Target::Direct, Target::Docker, Target::Wasm]),
        ("35", &[Target::Direct, Target::Docker, Target::Wasm]),
        ("36", &[Target::Shell]),
    ];
    for (case, targets) in listed {
        let n: u32 = case.parse().unwrap();
        for t in targets {
            let m = expectation(*t, n);
            assert!(m == 'H' || m == 'd', "case {n} on {}: {m}", t.name());
        }
    }
    for n in 36..=40 {
        assert_ne!(expectation(Target::Shell, n), '-', "case {n}");
    }
    // 16 applies to every target that runs or reads something.
    for (t, _) in EXPECTATIONS.iter().filter(|(t, _)| *t != Target::Shell) {
        assert_ne!(expectation(*t, 16), '-', "case 16 on {}", t.name());
    }
}
