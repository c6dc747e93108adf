//! The contract suite: the attack corpus (docs/src/attacks.md) as one table, run against every target each
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
//! (docs/src/attacks.md does not list the target); `d` held by a dedicated test of the
//! target's own module (named in `DEDICATED`), not yet written against the
//! driver; `p` pending: listed by docs/src/attacks.md for the target, not covered yet
//! (printed as such, and in docs/src/contract.md). No case is `d` or `p` now, and
//! `the_expectations_cover_attacks_md_and_every_listed_target` wants every
//! listed target held. The summary table is printed (`cargo test contract -- --nocapture`)
//! and kept in docs/src/contract.md.

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

/// What each target promises for cases 1 to 50 (docs/src/attacks.md numbering).
///                                    1         2         3         4         5
///                           12345678901234567890123456789012345678901234567890
#[rustfmt::skip]
const EXPECTATIONS: &[(Target, &str)] = &[
    (Target::Direct, "--HH------HHHHHHHHHHH-HHHHHHHH-HHHH-----HHHH----H-"),
    (Target::Docker, "--HH------HHHHHHHHHHH-HHHHHHHH-HHHH-----HH-H----H-"),
    (Target::Wasm,   "HHHHHH-HHHHHH--HHH-HHH-----HH-HHHHH-----H--HHHH-H-"),
    (Target::Files,  "HHHHHHHHHH-----H------------------------HHHH------"),
    (Target::Shell,  "-----------------------------------HHHHH----------"),
];

/// The number of cases.
const CASES: u32 = 50;

/// Cases still pending somewhere.
const PENDING: &[u32] = &[];

/// Where the `d` cases are checked (none left: every case runs in the driver).
const DEDICATED: &[(u32, &str)] = &[];

/// What does not run on this platform, and why: a whole target (`None`) or
/// one case. Nothing on Unix. On Windows the driver's native attacks are
/// POSIX shell scripts and the docker engine is a Linux one; `direct`'s
/// Windows cases (Job Objects, handles, the environment) are in `windows`.
#[cfg(unix)]
const NOT_ON_THIS_PLATFORM: &[(Target, Option<u32>, &str)] = &[];
#[cfg(windows)]
const NOT_ON_THIS_PLATFORM: &[(Target, Option<u32>, &str)] = &[
    (
        Target::Direct,
        None,
        "its attacks are POSIX shell scripts (Windows: tests/integration/windows.rs)",
    ),
    (Target::Docker, None, "a Linux Docker engine"),
    (Target::Files, Some(42), "set-ID bits are Unix's"),
    (
        Target::Files,
        Some(43),
        "the planted program is a shell script on a Unix PATH",
    ),
];

/// Why `case` does not run on `t` on this platform, if it does not.
fn not_here(t: Target, case: u32) -> Option<&'static str> {
    NOT_ON_THIS_PLATFORM
        .iter()
        .find(|(x, c, _)| *x == t && c.is_none_or(|c| c == case))
        .map(|(_, _, why)| *why)
}

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
    let p = std::path::Path::new(env!("TOOLHOST_BUILD_GUEST_TESTS")).join("probe.wasm");
    assert!(p.exists(), "{} is missing: build.rs builds it", p.display());
    p
}

impl Ctx {
    fn new(target: Target, image: Option<String>) -> Self {
        let t = Tmp::new();
        #[cfg(unix)]
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
        protected: toolhost::protected::ProtectedPaths::default_list(),
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
            symlink(c.t.outside(), &c.t.ws().join("l")).ok();
            symlink("l_loop", &c.t.ws().join("l_loop")).ok();
            let abs = canary_path(c);
            let mut paths: Vec<String> = match case {
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
            // Windows: its own spellings of the same escapes (drive,
            // verbatim, device, UNC, drive-relative, rooted, `\`).
            if cfg!(windows) {
                let plain = abs.trim_start_matches(r"\\?\").to_string();
                let (drive, rest) = plain.split_at(2.min(plain.len()));
                paths.extend(match case {
                    1 => vec![
                        r"..\outside\secret.txt".into(),
                        r"a\..\..\outside\secret.txt".into(),
                        r"a/..\../outside/secret.txt".into(),
                    ],
                    2 => vec![
                        plain.clone(),
                        plain.replace('\\', "/"),
                        format!(r"\\.\{plain}"),
                        format!(
                            r"\\localhost\{}$\{}",
                            &drive[..1],
                            rest.trim_start_matches('\\')
                        ),
                        format!(r"{drive}..\outside\secret.txt"),
                        rest.to_string(),
                    ],
                    6 => vec![
                        r"l\".into(),
                        r"l\.".into(),
                        r"l\..\outside\secret.txt".into(),
                    ],
                    _ => vec![],
                });
            }
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
                // The file tools cannot make symlinks, and the probe makes
                // them only where they lead inside; the agent's other tools
                // can: plant it as they would.
                Target::Files | Target::Wasm => {
                    symlink(c.t.outside(), &c.t.ws().join("made")).map_err(|e| e.to_string())
                }
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
            // Unix: `d` is replaced at once by a link to `real` or one out.
            #[cfg(unix)]
            fn swap(ws: &std::path::Path, out: &std::path::Path, n: u64) {
                let target: PathBuf = if n.is_multiple_of(2) {
                    out.to_path_buf()
                } else {
                    "real".into()
                };
                let _ = std::fs::remove_file(ws.join("d.tmp"));
                let _ = std::os::unix::fs::symlink(&target, ws.join("d.tmp"));
                let _ = std::fs::rename(ws.join("d.tmp"), ws.join("d"));
            }
            // Windows (and Wine, which follows no link a Windows call
            // made): `d` is by turns the real dir and a link out.
            #[cfg(windows)]
            fn swap(ws: &std::path::Path, out: &std::path::Path, n: u64) {
                let d = ws.join("d");
                if n.is_multiple_of(2) {
                    let _ = std::fs::rename(&d, ws.join("real"));
                    let _ = std::os::windows::fs::symlink_dir(out, &d);
                } else {
                    let _ = std::fs::remove_dir(&d);
                    let _ = std::fs::rename(ws.join("real"), &d);
                }
            }
            let stop = std::sync::Arc::new(AtomicBool::new(false));
            let swaps = std::sync::Arc::new(AtomicU64::new(0));
            let swapper = {
                let (stop, swaps, ws, out) = (stop.clone(), swaps.clone(), c.t.ws(), c.t.outside());
                std::thread::spawn(move || {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        swap(&ws, &out, n);
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
        // Special files: the read ends (refused or bounded), never blocks
        // forever.
        10 => special_files_case(c).await,
        // cwd outside, or a symlink leading out.
        11 => {
            symlink(c.t.outside(), &c.t.ws().join("out")).ok();
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
            ensure(
                !msg.contains(&format!("{outside}{}", std::path::MAIN_SEPARATOR)),
                || format!("host path in {msg:?}"),
            )
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
            // Wine looks a name up by reading the whole Unix directory, so
            // 2000 creates take it 15 to 25 s: give them time there.
            let sb = if cfg!(windows) {
                c.sandbox_with(|cfg| cfg.timeout = Duration::from_secs(90))
            } else {
                sb
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
        #[cfg(unix)]
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
        41 => planted_state_case(c).await,
        #[cfg(unix)]
        42 if d == Target::Files => replaced_setid_file_case(c),
        #[cfg(unix)]
        42 if d == Target::Docker => setid_in_container_case(c).await,
        #[cfg(unix)]
        42 => privileges_left_behind_case(c).await,
        #[cfg(unix)]
        43 => planted_on_path_case(c).await,
        44 => protected_paths_case(c).await,
        45 => slow_compile_case(c).await,
        46 => cache_cap_case(c).await,
        47 => engine_log_case(c),
        49 => open_stdin_case(c),
        _ => Err(format!("case {case} has no generic implementation")),
    }
}

/// Case 10 on Unix: a FIFO nobody writes, a symlink to /dev/zero.
#[cfg(unix)]
async fn special_files_case(c: &Ctx) -> CaseResult {
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
        read_ends(c, &sb, p, 1 << 20).await?;
    }
    if in_process {
        let n = threads_waiting_on_a_fifo();
        ensure(n == 0, || format!("{n} threads left waiting on the FIFO"))?;
    }
    plain_read(c, &sb).await
}

/// Reads the special file `p`: the read ends within 10 s (refused, or with
/// at most `max` bytes).
async fn read_ends(c: &Ctx, sb: &Sandbox, p: &str, max: usize) -> CaseResult {
    let t0 = Instant::now();
    let r = c.read(sb, p).await;
    ensure(t0.elapsed() < Duration::from_secs(10), || {
        format!("{p}: took {:?}", t0.elapsed())
    })?;
    match r {
        Ok(out) => ensure(out.len() <= max, || {
            format!("{p}: read {} bytes", out.len())
        }),
        Err(_) => Ok(()),
    }
}

/// The control of case 10: a plain file reads.
async fn plain_read(c: &Ctx, sb: &Sandbox) -> CaseResult {
    c.t.write("plain.txt", "plain");
    let r = c.read(sb, "plain.txt").await;
    ensure(r.as_deref() == Ok("plain"), || format!("control: {r:?}"))
}

/// Case 10 on Windows: its special files are devices, which a bare reserved
/// name reaches in any directory (`CON`, `NUL`, `CONIN$`, `COM1`, `AUX.txt`,
/// also below a dir): a read of one is refused or reads a plain file, never
/// the console, and never blocks.
#[cfg(windows)]
async fn special_files_case(c: &Ctx) -> CaseResult {
    let sb = c.sandbox_with(|cfg| cfg.timeout = Duration::from_secs(3));
    std::fs::create_dir_all(c.t.ws().join("sub")).map_err(|e| e.to_string())?;
    for p in [
        "CON",
        "con",
        "NUL",
        "CONIN$",
        "CONOUT$",
        "COM1",
        "AUX.txt",
        r"sub\NUL",
        "sub/con.log",
        "LPT1",
    ] {
        read_ends(c, &sb, p, 0).await?;
    }
    plain_read(c, &sb).await
}

/// Case 41: toolhost's own state (the compile cache, the audit log) is never
/// writable by a call. A sandbox whose writable dir holds it, or lies inside
/// it, is refused with a message naming the dir and what moves the state;
/// with the cache beside the workspace (the allowed twin) the target writes
/// its workspace but neither rewrites a planted entry nor adds one.
async fn planted_state_case(c: &Ctx) -> CaseResult {
    let ws = c.t.ws();
    let ws_s = ws.display().to_string();
    let refused = |f: &dyn Fn(&mut SandboxConfig), wants: &[&str]| -> CaseResult {
        let mut cfg = c.config();
        f(&mut cfg);
        let dirs = [
            toolhost::AllowedDirSpec::read_write(ws.clone()),
            toolhost::AllowedDirSpec::read_only(c.t.root.join("ro")),
        ];
        match Sandbox::new(dirs, cfg) {
            Ok(_) => Err(format!("built a sandbox that exposes state ({wants:?})")),
            Err(e) => {
                let e = e.to_string();
                ensure(wants.iter().all(|w| e.contains(w)), || e.clone())
            }
        }
    };
    let in_ws = ws.join(".cache/toolhost/wasm");
    refused(
        &|cfg| cfg.wasm.cache_dir = Some(in_ws.clone()),
        &[
            &ws_s,
            "contains toolhost's compile cache",
            "[wasm] cache_dir",
        ],
    )?;
    let root = c.t.root.clone();
    refused(
        &|cfg| cfg.wasm.cache_dir = Some(root.clone()),
        &[&ws_s, "is inside toolhost's compile cache"],
    )?;
    let log = ws.join("audit.jsonl");
    refused(
        &|cfg| cfg.audit_log = Some(log.clone()),
        &[&ws_s, "audit log", "audit_log"],
    )?;
    // Allowed twin: the cache beside the workspace, with an entry in it.
    let cache = c.t.root.join("cache");
    std::fs::create_dir_all(&cache).map_err(|e| e.to_string())?;
    let entry = cache.join("planted.cwasm");
    std::fs::write(&entry, "ENTRY").map_err(|e| e.to_string())?;
    let sb = c.sandbox_with(|cfg| cfg.wasm.cache_dir = Some(cache.clone()));
    for p in [entry.clone(), cache.join("new.cwasm")] {
        let _ = c.write(&sb, &p.to_string_lossy()).await;
    }
    let now = std::fs::read_to_string(&entry).map_err(|e| e.to_string())?;
    ensure(now == "ENTRY", || {
        format!("the entry was rewritten: {now:?}")
    })?;
    ensure(!cache.join("new.cwasm").exists(), || {
        "an entry was planted in the cache".into()
    })?;
    c.write(&sb, "ok.txt").await?;
    let ok = std::fs::read_to_string(ws.join("ok.txt")).map_err(|e| e.to_string())?;
    // The probe writes as many x's as asked.
    let want = if c.target == Target::Wasm {
        "xxxxx"
    } else {
        "PWNED"
    };
    ensure(ok == want, || format!("control: {ok:?}"))
}

/// Everything under `dir` (names, types, modes, contents, link targets), as
/// one string to compare before and after.
fn tree_digest(dir: &std::path::Path) -> String {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            out.push(format!("{}: unreadable", d.display()));
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let Ok(m) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            #[cfg(unix)]
            let mode = std::os::unix::fs::PermissionsExt::mode(&m.permissions());
            #[cfg(not(unix))]
            let mode = u32::from(m.permissions().readonly());
            let what = if m.file_type().is_symlink() {
                format!("link {:?}", std::fs::read_link(&p).ok())
            } else if m.is_dir() {
                stack.push(p.clone());
                "dir".to_string()
            } else {
                format!("file {:?}", std::fs::read(&p).ok())
            };
            out.push(format!("{} {mode:o} {what}", p.display()));
        }
    }
    out.sort();
    out.join("\n")
}

/// Case 44: code planted for the host to run later. The workspace is a git
/// repository (its `.git` writable by the tool's uid); a call tries to write
/// a hook, to move the executable sample hook into place, to append to
/// `.git/config`, to replace `.git` (moved away, a `gitdir:` file in its
/// place), to reach `.git` through a symlink, and to hard-link `.git/config`
/// out. Everything under `.git` must be unchanged (names, modes, contents).
/// Allowed twins: the same writes into a `notgit` dir land, and with
/// `protected_paths = []` the first attack does reach `.git`.
async fn protected_paths_case(c: &Ctx) -> CaseResult {
    let ws = c.t.ws();
    let git = ws.join(".git");
    // No repository yet: a `.git` made by the call does not survive it
    // (refused by name, or moved aside after the call where no mount can
    // hold a name that did not exist).
    {
        let sb = c.sandbox();
        match c.target {
            Target::Direct | Target::Docker => {
                let r = c
                    .run(
                        &sb,
                        "mkdir -p .git/hooks && printf x > .git/hooks/pre-commit",
                        &[],
                    )
                    .await;
                ensure(r.stderr.contains("is a protected path"), || {
                    format!("{r:?}")
                })?;
                let aside = std::fs::read_dir(&ws)
                    .map_err(|e| e.to_string())?
                    .flatten()
                    .map(|e| e.path())
                    .find(|p| {
                        p.file_name().is_some_and(|n| {
                            n.to_string_lossy().starts_with(".git.toolhost-refused-")
                        })
                    })
                    .ok_or("the created .git was not moved aside")?;
                ensure(aside.join("hooks/pre-commit").exists(), || {
                    format!("{} lacks the hook", aside.display())
                })?;
                std::fs::remove_dir_all(&aside).map_err(|e| e.to_string())?;
            }
            Target::Wasm => {
                // Windows reads these names as `.git` too.
                let spellings: &[&str] = if cfg!(windows) {
                    &[
                        ".git",
                        ".GIT",
                        ".git.",
                        ".git ",
                        r"sub\..\.git",
                        ".git::$INDEX_ALLOCATION",
                    ]
                } else {
                    &[".git"]
                };
                std::fs::create_dir_all(ws.join("sub")).map_err(|e| e.to_string())?;
                for name in spellings {
                    let r = c.run(&sb, "", &["mkdir", name]).await;
                    ensure(r.stdout.contains("ERR"), || format!("mkdir {name}: {r:?}"))?;
                }
            }
            Target::Files => {
                let r = toolhost::tools::fs::mkdir(sb.dirs(), &files_policy(), ".git");
                ensure(
                    matches!(&r, Err(e) if e.rule.as_deref() == Some("sandbox.protected")),
                    || format!("{r:?}"),
                )?;
            }
            Target::Shell => {}
        }
        ensure(!git.exists(), || ".git survived the call".into())?;
    }
    for d in [git.join("hooks"), git.join("objects"), git.join("refs")] {
        std::fs::create_dir_all(&d).map_err(|e| e.to_string())?;
    }
    let files = [
        ("HEAD", "ref: refs/heads/main\n", 0o666),
        ("config", "[core]\n\tbare = false\n", 0o666),
        ("hooks/pre-commit.sample", "#!/bin/sh\nexit 0\n", 0o777),
    ];
    for (name, text, _mode) in files {
        let p = git.join(name);
        std::fs::write(&p, text).map_err(|e| e.to_string())?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(_mode))
                .map_err(|e| e.to_string())?;
        }
    }
    #[cfg(unix)]
    for d in [
        &git,
        &git.join("hooks"),
        &git.join("objects"),
        &git.join("refs"),
    ] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777))
            .map_err(|e| e.to_string())?;
    }
    symlink(".git", &ws.join("lg")).map_err(|e| e.to_string())?;
    // Wine follows no link a Windows call made: there the attack through
    // `lg` cannot reach `.git` whatever the guard does, and is not counted.
    let link_followed = std::fs::metadata(ws.join("lg/hooks")).is_ok();
    if !link_followed {
        println!("case 44: the host does not follow the link lg -> .git (Wine): not tried");
    }
    let before = tree_digest(&git);
    let sb = c.sandbox();
    let mut refusals = Vec::new();
    match c.target {
        Target::Direct | Target::Docker => {
            let script = "\
                printf 'x' > .git/hooks/pre-commit; echo \"write=$?\"; \
                chmod 755 .git/hooks/pre-commit.sample; echo \"chmod=$?\"; \
                mv .git/hooks/pre-commit.sample .git/hooks/pre-commit; echo \"mv=$?\"; \
                printf '[core]\\n\\tfsmonitor = touch ran\\n' >> .git/config; echo \"config=$?\"; \
                mv .git .git-old; echo \"mvgit=$?\"; \
                rm -rf .git; echo \"rm=$?\"; \
                printf x > lg/hooks/post-checkout; echo \"link=$?\"; \
                ln .git/config cfg && printf X >> cfg; echo \"hardlink=$?\"; \
                mkdir -p notgit/hooks && printf ok > notgit/hooks/pre-commit && printf ok > notgit/config; echo \"twin=$?\"";
            let r = c.run(&sb, script, &[]).await;
            ensure(r.stdout.contains("twin=0"), || format!("twin: {r:?}"))?;
            for step in ["write", "mv", "config", "mvgit", "link", "hardlink"] {
                ensure(!r.stdout.contains(&format!("{step}=0")), || {
                    format!("{step} succeeded: {r:?}")
                })?;
            }
            refusals.push(r.stdout.clone());
        }
        Target::Wasm => {
            // Windows: the same attacks by its other names for `.git`
            // (case, trailing dot, stream, `\`, the 8.3 short name).
            #[cfg(windows)]
            let short = short_name(&git).unwrap_or_else(|| ".git".into());
            #[cfg(windows)]
            let (short_hook, short_moved) = (format!("{short}/hooks/pre-commit"), short.clone());
            #[cfg(windows)]
            let windows: Vec<Vec<&str>> = vec![
                vec!["write", r".git\hooks\pre-commit", "5"],
                vec!["write", ".GIT/Hooks/pre-commit", "5"],
                vec!["write", ".git./hooks/pre-commit", "5"],
                vec!["append", r"sub\..\.git\config", "X"],
                vec!["rename", ".git.", ".git-old"],
                vec!["rename", ".GIT", ".git-old"],
                vec!["rename", ".git::$INDEX_ALLOCATION", ".git-old"],
                vec!["write", &short_hook, "5"],
                vec!["rename", &short_moved, ".git-old"],
                vec!["rm", &short_moved],
            ];
            #[cfg(windows)]
            println!("case 44 on wasm: the 8.3 name of .git is {short:?}");
            #[cfg(not(windows))]
            let windows: Vec<Vec<&str>> = Vec::new();
            for args in windows.iter().map(Vec::as_slice).chain([
                &["write", ".git/hooks/pre-commit", "5"][..],
                &[
                    "rename",
                    ".git/hooks/pre-commit.sample",
                    ".git/hooks/pre-commit",
                ],
                &["append", ".git/config", "X"],
                &["rename", ".git", ".git-old"],
                &["rm", ".git/HEAD"],
                &["mkdir", ".git/hooks/sub"],
                &["write", "lg/hooks/post-checkout", "5"],
                &["link", ".git/config", "cfg"],
                &["symlink", "x", ".git/hooks/l"],
            ]) {
                if !link_followed && args[1].starts_with("lg/") {
                    continue;
                }
                let r = c.run(&sb, "", args).await;
                ensure(!r.success() && r.stdout.contains("ERR"), || {
                    format!("{args:?}: {r:?}")
                })?;
                refusals.push(r.stdout.clone());
            }
            for args in [
                &["mkdir", "notgit"][..],
                &["mkdir", "notgit/hooks"],
                &["write", "notgit/hooks/pre-commit", "5"],
                &["write", "notgit/config", "5"],
            ] {
                let r = c.run(&sb, "", args).await;
                ensure(r.success(), || format!("twin {args:?}: {r:?}"))?;
            }
        }
        Target::Files => {
            use toolhost::tools::fs;
            let (dirs, p) = (sb.dirs(), files_policy());
            let mut tries: Vec<(&str, Result<String, fs::FsError>)> = vec![
                (
                    "write",
                    fs::write(dirs, &p, ".git/hooks/pre-commit", b"x", false),
                ),
                ("append", fs::write(dirs, &p, ".git/config", b"X", true)),
                (
                    "case",
                    fs::write(dirs, &p, ".GIT/Hooks/pre-commit", b"x", false),
                ),
                (
                    "move in",
                    fs::rename(
                        dirs,
                        &p,
                        ".git/hooks/pre-commit.sample",
                        ".git/hooks/pre-commit",
                        false,
                    ),
                ),
                ("move .git", fs::rename(dirs, &p, ".git", "git-old", false)),
                ("delete", fs::delete(dirs, &p, ".git/config", false)),
                ("mkdir", fs::mkdir(dirs, &p, ".git/hooks/sub")),
            ];
            if link_followed {
                tries.push((
                    "via link",
                    fs::write(dirs, &p, "lg/hooks/post-checkout", b"x", false),
                ));
            }
            // Windows: `.git` by its other names (the 8.3 short name, a
            // trailing dot, a stream, `\`).
            #[cfg(windows)]
            let tries = {
                let mut tries = tries;
                let short = short_name(&git).unwrap_or_else(|| ".git".into());
                println!("case 44 on the file tools: the 8.3 name of .git is {short:?}");
                let hook = format!("{short}/hooks/pre-commit");
                tries.extend([
                    ("short write", fs::write(dirs, &p, &hook, b"x", false)),
                    ("short move", fs::rename(dirs, &p, &short, "git-old", false)),
                    ("short delete", fs::delete(dirs, &p, &short, true)),
                    ("dot move", fs::rename(dirs, &p, ".git.", "git-old", false)),
                    (
                        "stream move",
                        fs::rename(dirs, &p, ".git::$INDEX_ALLOCATION", "git-old", false),
                    ),
                    (
                        "backslash",
                        fs::write(dirs, &p, r"sub\..\.git\config", b"X", true),
                    ),
                ]);
                tries
            };
            for (what, r) in tries {
                match r {
                    Err(e) if e.rule.as_deref() == Some("sandbox.protected") => {
                        refusals.push(e.message)
                    }
                    other => return Err(format!("{what}: {other:?}")),
                }
            }
            fs::write(dirs, &p, "notgit/hooks/pre-commit", b"ok", false).map_err(|e| e.message)?;
            fs::write(dirs, &p, "notgit/config", b"ok", false).map_err(|e| e.message)?;
        }
        Target::Shell => return Err("not a shell-policy case".into()),
    }
    ensure(tree_digest(&git) == before, || {
        format!(
            "{} changed: {refusals:?}\nnow:\n{}",
            git.display(),
            tree_digest(&git)
        )
    })?;
    ensure(!ws.join("ran").exists() && !ws.join("cfg").exists(), || {
        "a planted file is there".into()
    })?;
    let twin =
        std::fs::read_to_string(ws.join("notgit/hooks/pre-commit")).map_err(|e| e.to_string())?;
    ensure(twin == "ok" || twin == "xxxxx", || {
        format!("twin: {twin:?}")
    })?;
    // The same first attack with nothing protected reaches `.git`: what
    // refused it above is the protection.
    let open = c.sandbox_with(|cfg| cfg.protected_paths.clear());
    let hook = git.join("hooks/pre-commit");
    match c.target {
        Target::Files => {
            toolhost::tools::fs::write(
                open.dirs(),
                &toolhost::tools::fs::FsPolicy {
                    protected: Default::default(),
                    ..files_policy()
                },
                ".git/hooks/pre-commit",
                b"x",
                false,
            )
            .map_err(|e| e.message)?;
        }
        _ => {
            let r = c
                .run(
                    &open,
                    "printf x > .git/hooks/pre-commit",
                    &["write", ".git/hooks/pre-commit", "1"],
                )
                .await;
            ensure(r.success(), || format!("unprotected write: {r:?}"))?;
        }
    }
    ensure(hook.exists(), || {
        "the unprotected write did not land".into()
    })
}

/// The attack of case 42 (run as the tool): set-ID files by chmod and by a
/// creating open or mknod, a file capability, the immutable and append-only
/// flags, real-time scheduling and a raised priority; each next to its
/// allowed twin (chmod 755, a plain create, a user xattr, the nodump flag,
/// nice 10, an ordinary write).
const PRIVILEGE_ATTACK: &str = r#"
import errno, fcntl, json, os, shutil, struct
res = {}
def t(name, f):
    try:
        f()
        res[name] = "ok"
    except OSError as e:
        res[name] = errno.errorcode.get(e.errno, str(e.errno))
shutil.copy("/bin/sh", "r")
t("chmod_4755", lambda: os.chmod("r", 0o4755))
t("chmod_2755", lambda: os.chmod("r", 0o2755))
fd = os.open("r", os.O_RDONLY)
t("fchmod_6755", lambda: os.fchmod(fd, 0o6755))
t("create_4755", lambda: os.close(os.open("c", os.O_CREAT | os.O_WRONLY, 0o4755)))
t("mknod_2755", lambda: os.mknod("n", 0o2755 | 0o100000))
cap = struct.pack("<IIIII", 0x02000001, 1 << 21, 0, 0, 0)
t("setcap", lambda: os.setxattr("r", "security.capability", cap))
t("user_xattr", lambda: os.setxattr("r", "user.toolhost", b"1"))
t("chmod_755", lambda: os.chmod("r", 0o755))
t("create_644", lambda: os.close(os.open("d", os.O_CREAT | os.O_WRONLY, 0o644)))
def setflag(flag):
    f = os.open("i", os.O_RDONLY)
    old = struct.unpack("i", fcntl.ioctl(f, 0x80086601, struct.pack("i", 0)))[0]
    try:
        fcntl.ioctl(f, 0x40086602, struct.pack("i", old | flag))
    finally:
        os.close(f)
open("i", "w").write("data")
t("immutable", lambda: setflag(0x10))
t("append_only", lambda: setflag(0x20))
t("nodump", lambda: setflag(0x40))
t("fifo_99", lambda: os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(99)))
t("rr_1", lambda: os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(1)))
t("nice_-20", lambda: os.setpriority(os.PRIO_PROCESS, 0, -20))
t("nice_10", lambda: os.setpriority(os.PRIO_PROCESS, 0, 10))
res["nice"] = os.getpriority(os.PRIO_PROCESS, 0)
t("write", lambda: open("i", "a").write("more"))
print(json.dumps(res))
"#;

#[cfg(unix)]
/// Case 42 on docker: the tool runs as the workspace's owner (root in CI),
/// under toolhost's set-ID filter, per call and in warm mode: set-user-ID
/// and set-group-ID modes by chmod and mknod fail, and the host sees no such
/// bit; the plain modes work beside them.
async fn setid_in_container_case(c: &Ctx) -> CaseResult {
    use std::os::unix::fs::PermissionsExt;
    for warm in [false, true] {
        for f in ["s", "g", "p", "fifo", "fifo2"] {
            let _ = std::fs::remove_file(c.t.ws().join(f));
        }
        let sb = c.sandbox_with(|cfg| cfg.docker.warm = warm);
        let r = c
            .run(
                &sb,
                "cp /bin/busybox s; cp /bin/busybox g; cp /bin/busybox p; \
                 chmod 4755 s; echo s=$?; chmod 2755 g; echo g=$?; chmod u+s,g+s g; echo ug=$?; \
                 mknod -m 4644 fifo p; echo fifo=$?; chmod 755 p; echo p=$?; \
                 mknod -m 644 fifo2 p; echo fifo2=$?",
                &[],
            )
            .await;
        ensure(r.stdout == "s=1\ng=1\nug=1\nfifo=1\np=0\nfifo2=0\n", || {
            format!("warm={warm}: {r:?}")
        })?;
        let mode = |f: &str| {
            std::fs::metadata(c.t.ws().join(f))
                .map(|m| m.permissions().mode() & 0o7777)
                .ok()
        };
        for f in ["s", "g"] {
            ensure(mode(f).is_some_and(|m| m & 0o6000 == 0), || {
                format!("warm={warm}: {f} is {:o}", mode(f).unwrap_or(0))
            })?;
        }
        ensure(mode("p") == Some(0o755), || {
            format!("warm={warm}: p {:?}", mode("p"))
        })?;
        ensure(mode("fifo").is_none(), || format!("warm={warm}: fifo made"))?;
        ensure(mode("fifo2").is_some(), || {
            format!("warm={warm}: control fifo2")
        })?;
    }
    Ok(())
}

#[cfg(unix)]
/// Case 42 on the file tools: `file_write` over a set-ID file (one a tool
/// could make where toolhost's filter does not run) keeps the permission bits but never the
/// set-ID ones: the new file is toolhost's, root's in CI, and would be a
/// set-ID program of root with the agent's content. Allowed twin: a 0755
/// file stays 0755.
fn replaced_setid_file_case(c: &Ctx) -> CaseResult {
    use std::os::unix::fs::PermissionsExt;
    let sb = c.sandbox();
    for (name, before, after) in [
        ("s", 0o6755, 0o755),
        ("x", 0o755, 0o755),
        ("g", 0o2750, 0o750),
    ] {
        let p = c.t.ws().join(name);
        std::fs::write(&p, "old").map_err(|e| e.to_string())?;
        // Replaced, then appended to after the bits are set again: the new
        // file drops them, and so does the append.
        for (content, append) in [(&b"#!/bin/sh\nid\n"[..], false), (&b"more\n"[..], true)] {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(before))
                .map_err(|e| e.to_string())?;
            toolhost::tools::fs::write(sb.dirs(), &files_policy(), name, content, append)
                .map_err(|e| e.message)?;
            let mode = std::fs::metadata(&p)
                .map_err(|e| e.to_string())?
                .permissions()
                .mode()
                & 0o7777;
            ensure(mode == after, || {
                format!("{name} (append {append}): {before:o} became {mode:o}")
            })?;
        }
        let content = std::fs::read_to_string(&p).map_err(|e| e.to_string())?;
        ensure(content == "#!/bin/sh\nid\nmore\n", || {
            format!("{name}: {content:?}")
        })?;
    }
    Ok(())
}

#[cfg(unix)]
/// Case 42: what a root tool could leave behind or take (toolhost runs as
/// root in CI; as another user the same calls are refused too). The results
/// are checked in the tool's report and again on disk: modes, xattrs, flags.
async fn privileges_left_behind_case(c: &Ctx) -> CaseResult {
    use std::os::unix::fs::PermissionsExt;
    c.t.write("attack.py", PRIVILEGE_ATTACK);
    for level in [
        toolhost::isolation::IsolationLevel::BestEffort,
        toolhost::isolation::IsolationLevel::Strict,
    ] {
        for f in ["r", "c", "n", "d", "i"] {
            let p = c.t.ws().join(f);
            if p.exists() {
                std::process::Command::new("chattr")
                    .args(["-i", "-a"])
                    .arg(&p)
                    .output()
                    .ok();
                std::fs::remove_file(&p).map_err(|e| format!("{f}: {e}"))?;
            }
        }
        let sb = c.sandbox_with(|cfg| cfg.isolation = level);
        let r = c.run(&sb, "/usr/bin/python3 attack.py", &[]).await;
        let v: serde_json::Value =
            serde_json::from_str(r.stdout.trim()).map_err(|e| format!("{level:?}: {e}: {r:?}"))?;
        let got = |k: &str| v[k].as_str().unwrap_or("?").to_string();
        for k in [
            "chmod_4755",
            "chmod_2755",
            "fchmod_6755",
            "create_4755",
            "mknod_2755",
            "setcap",
            "immutable",
            "append_only",
            "fifo_99",
            "rr_1",
            "nice_-20",
        ] {
            ensure(got(k) != "ok", || format!("{level:?}: {k} succeeded: {v}"))?;
        }
        for k in [
            "user_xattr",
            "chmod_755",
            "create_644",
            "nodump",
            "nice_10",
            "write",
        ] {
            ensure(got(k) == "ok", || format!("{level:?}: control {k}: {v}"))?;
        }
        ensure(v["nice"] == 10, || format!("{level:?}: niceness {v}"))?;
        // On disk.
        let mode = |f: &str| {
            std::fs::metadata(c.t.ws().join(f))
                .map(|m| m.permissions().mode() & 0o7777)
                .ok()
        };
        ensure(mode("r") == Some(0o755), || format!("r: {:?}", mode("r")))?;
        ensure(mode("d") == Some(0o644), || format!("d: {:?}", mode("d")))?;
        ensure(mode("c").is_none() && mode("n").is_none(), || {
            format!("c, n: {:?} {:?}", mode("c"), mode("n"))
        })?;
        let xattr = |f: &str, name: &str| {
            let path =
                std::ffi::CString::new(c.t.ws().join(f).into_os_string().into_encoded_bytes())
                    .unwrap_or_default();
            let name = std::ffi::CString::new(name).unwrap_or_default();
            let mut buf = [0u8; 64];
            // SAFETY: valid C strings and a buffer of the given size.
            unsafe {
                libc::getxattr(
                    path.as_ptr(),
                    name.as_ptr(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                )
            }
        };
        ensure(xattr("r", "security.capability") < 0, || {
            "r carries a file capability".into()
        })?;
        ensure(xattr("r", "user.toolhost") == 1, || {
            "control: user xattr".into()
        })?;
        let flags = std::process::Command::new("lsattr")
            .arg(c.t.ws().join("i"))
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        let flags = flags.split_whitespace().next().unwrap_or("").to_string();
        ensure(
            flags.contains('d') && !flags.contains('i') && !flags.contains('a'),
            || format!("{level:?}: i has flags {flags:?}"),
        )?;
        let i = std::fs::read_to_string(c.t.ws().join("i")).map_err(|e| e.to_string())?;
        ensure(i == "datamore", || format!("control write: {i:?}"))?;
    }
    Ok(())
}

/// One `toolhost mcp` session: `calls` (tool name, arguments) sent after the
/// handshake, stdin closed, and the results in order. `path` is the server's
/// `PATH`.
fn mcp_session(
    c: &Ctx,
    extra_config: &str,
    path: &str,
    calls: &[(&str, serde_json::Value)],
) -> Result<Vec<serde_json::Value>, String> {
    use serde_json::json;
    let cfg = c.t.root.join("mcp.toml");
    std::fs::write(
        &cfg,
        format!("timeout = 20\nshell_allowed_binaries = [\"pytest\", \"ls\"]\n{extra_config}"),
    )
    .map_err(|e| e.to_string())?;
    let mut input = String::new();
    input.push_str(&json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "contract", "version": "1"}}}).to_string());
    input.push_str("\n{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n");
    for (i, (tool, args)) in calls.iter().enumerate() {
        input.push_str(&json!({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call", "params": {"name": tool, "arguments": args}}).to_string());
        input.push('\n');
    }
    let stdin = c.t.root.join("mcp-input.jsonl");
    std::fs::write(&stdin, input).map_err(|e| e.to_string())?;
    let out = std::process::Command::new(toolhost_bin())
        .args(["mcp", "--config"])
        .arg(&cfg)
        .arg("--allow-dir")
        .arg(c.t.ws())
        .current_dir(c.t.ws())
        .env_remove("TOOLHOST_CONFIG")
        .env_remove("TOOLHOST_LOG")
        .env("PATH", path)
        .stdin(std::fs::File::open(&stdin).map_err(|e| e.to_string())?)
        .output()
        .map_err(|e| e.to_string())?;
    let mut results = vec![serde_json::Value::Null; calls.len()];
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("{e}: {line}"))?;
        if let Some(id) = v["id"]
            .as_u64()
            .filter(|&i| i >= 1 && i as usize <= calls.len())
        {
            results[id as usize - 1] = v["result"].clone();
        }
    }
    Ok(results)
}

#[cfg(unix)]
/// Case 43: a program written into a writable dir that is on `PATH`
/// (`$WS/.venv/bin`) under an allowlisted name, then called by that bare name
/// through the shell tool: refused (rule `shell.writable_path`), and it never
/// runs. Planted by a direct call (D) or by `file_write` over an executable
/// file, which keeps its mode (F). Allowed twins: another allowlisted name
/// runs; with `shell_allow_writable_path` the planted program does run (the
/// attack is real).
async fn planted_on_path_case(c: &Ctx) -> CaseResult {
    use serde_json::json;
    let bin = c.t.ws().join(".venv/bin");
    std::fs::create_dir_all(&bin).map_err(|e| e.to_string())?;
    let planted = format!(
        "#!/bin/sh\ntouch {}/planted-ran\necho PLANTED\n",
        c.t.ws().display()
    );
    let mut calls = Vec::new();
    if c.target == Target::Direct {
        let sb = c.sandbox();
        let r = c
            .run(
                &sb,
                &format!(
                    "printf '%s' '{planted}' > .venv/bin/pytest && chmod 755 .venv/bin/pytest"
                ),
                &[],
            )
            .await;
        ensure(r.success(), || format!("plant: {r:?}"))?;
    } else {
        use std::os::unix::fs::PermissionsExt;
        let p = bin.join("pytest");
        std::fs::write(&p, "#!/bin/sh\necho real\n").map_err(|e| e.to_string())?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| e.to_string())?;
        calls.push((
            "file_write",
            json!({"path": ".venv/bin/pytest", "content": planted}),
        ));
    }
    calls.push(("shell", json!({"args": ["pytest"]})));
    calls.push(("shell", json!({"args": ["ls", ".venv"]})));
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display());
    let r = mcp_session(c, "", &path, &calls)?;
    let n = r.len();
    if c.target == Target::Files {
        ensure(r[0]["isError"] != true, || format!("file_write: {}", r[0]))?;
    }
    let pytest = &r[n - 2];
    ensure(pytest["isError"] == true, || {
        format!("pytest ran: {pytest}")
    })?;
    let rule = &pytest["_meta"]["toolhost/call"]["rule"];
    ensure(rule == "shell.writable_path", || format!("rule: {pytest}"))?;
    ensure(!c.t.ws().join("planted-ran").exists(), || {
        "the planted program ran".into()
    })?;
    let ls = &r[n - 1];
    ensure(
        ls["isError"] != true && ls.to_string().contains("bin"),
        || format!("control ls: {ls}"),
    )?;
    // With the config's explicit consent the same name runs the planted file.
    let r = mcp_session(
        c,
        "shell_allow_writable_path = true\n",
        &path,
        &[("shell", json!({"args": ["pytest"]}))],
    )?;
    ensure(r[0].to_string().contains("PLANTED"), || {
        format!("allowed: {}", r[0])
    })?;
    ensure(c.t.ws().join("planted-ran").exists(), || {
        "allowed: the planted program did not run".into()
    })
}

/// Case 46: distinct modules without end (the probe with a custom section
/// that makes each unique) keep the disk cache under `[wasm] cache_max_mb`,
/// the entries used least recently going first; with no cap (the allowed
/// twin) every entry stays.
async fn cache_cap_case(c: &Ctx) -> CaseResult {
    let probe = std::fs::read(c.t.ws().join("probe.wasm")).map_err(|e| e.to_string())?;
    let salt = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let mut modules = Vec::new();
    for i in 0..8 {
        let name = format!("salt-{i}-{salt}");
        let mut m = probe.clone();
        m.push(0); // a custom section
        m.push((name.len() + 1) as u8);
        m.push(name.len() as u8);
        m.extend(name.as_bytes());
        let p = c.t.ws().join(format!("m{i}.wasm"));
        std::fs::write(&p, m).map_err(|e| e.to_string())?;
        modules.push(p);
    }
    let entries = |dir: &std::path::Path| -> Vec<(std::path::PathBuf, u64)> {
        std::fs::read_dir(dir)
            .map(|rd| {
                rd.flatten()
                    .filter(|e| e.file_name().to_string_lossy().ends_with(".cwasm"))
                    .map(|e| (e.path(), e.metadata().map(|m| m.len()).unwrap_or(0)))
                    .collect()
            })
            .unwrap_or_default()
    };
    // No cap: four modules, four entries.
    let free = c.t.root.join("cache-free");
    let sb = c.sandbox_with(|cfg| {
        cfg.wasm.cache_dir = Some(free.clone());
        cfg.wasm.cache_max_mb = 0;
    });
    for m in &modules[..4] {
        let r = sb.run(RunRequest::new([m.clone()])).await;
        ensure(r.outcome.kind == OutcomeKind::Exited, || format!("{r:?}"))?;
    }
    let e = entries(&free);
    ensure(e.len() == 4, || format!("no cap: {e:?}"))?;
    let size = e.iter().map(|(_, n)| *n).max().unwrap_or(0);
    // A cap of about three and a half entries.
    let cap_mb = (size * 7 / 2).div_ceil(1 << 20).max(1);
    let capped = c.t.root.join("cache-capped");
    let sb = c.sandbox_with(|cfg| {
        cfg.wasm.cache_dir = Some(capped.clone());
        cfg.wasm.cache_max_mb = cap_mb;
    });
    let mut written: Vec<std::path::PathBuf> = Vec::new();
    for m in &modules {
        let before: Vec<_> = entries(&capped).into_iter().map(|(p, _)| p).collect();
        let r = sb.run(RunRequest::new([m.clone()])).await;
        ensure(r.outcome.kind == OutcomeKind::Exited, || format!("{r:?}"))?;
        let now = entries(&capped);
        let total: u64 = now.iter().map(|(_, n)| *n).sum();
        ensure(total <= cap_mb << 20, || {
            format!("{total} bytes in the cache, cap {cap_mb} MiB")
        })?;
        if let Some((p, _)) = now.iter().find(|(p, _)| !before.contains(p)) {
            written.push(p.clone());
        }
        // The entry just written is there.
        ensure(
            written
                .last()
                .is_some_and(|w| now.iter().any(|(p, _)| p == w)),
            || format!("the newest entry is gone: {now:?}"),
        )?;
    }
    let now: Vec<_> = entries(&capped).into_iter().map(|(p, _)| p).collect();
    ensure(
        now.len() < modules.len() && written.len() == modules.len(),
        || format!("nothing evicted: {now:?}"),
    )?;
    // The survivors are the entries written last.
    let newest = &written[written.len() - now.len()..];
    ensure(newest.iter().all(|w| now.contains(w)), || {
        format!("kept {now:?}, newest {newest:?}")
    })
}

/// Case 47: a guest calls `sock_shutdown` 10^6 times (wasmtime-wasi logs a
/// warning on each): toolhost's stderr stays small, and the socket calls
/// still answer as before (ENOTSOCK on a descriptor, EBADF on a bad one).
/// Through the CLI, whose log this is.
fn engine_log_case(c: &Ctx) -> CaseResult {
    let run = |n: &str| {
        toolhost(
            &c.t.ws(),
            &[
                "run",
                "--backend",
                "wasm",
                "--timeout",
                "120",
                "--",
                "./probe.wasm",
                "sockcalls",
                n,
            ],
            &[],
        )
    };
    let want = "[57, 57, 57, 57, 8, 8, 8, 8]\n";
    // Allowed twin: a few calls, the same answers.
    let out = run("1");
    ensure(String::from_utf8_lossy(&out.stdout) == want, || {
        format!("control: {out:?}")
    })?;
    let out = run("1000000");
    ensure(String::from_utf8_lossy(&out.stdout) == want, || {
        format!("{:?}", String::from_utf8_lossy(&out.stdout))
    })?;
    ensure(out.stderr.len() < 16 * 1024, || {
        format!(
            "{} bytes on toolhost's stderr: {:?}",
            out.stderr.len(),
            String::from_utf8_lossy(&out.stderr[..out.stderr.len().min(300)])
        )
    })
}

/// Case 49: `toolhost run --timeout 1` whose stdin is a pipe held open with
/// no data ends on time, `timed_out` (exit 124); the allowed twin with data
/// on a closed pipe passes the data through.
fn open_stdin_case(c: &Ctx) -> CaseResult {
    use std::io::Write;
    let cfg = c.t.root.join("stdin.toml");
    let backend = match c.target {
        Target::Docker => {
            let image = c.image.clone().unwrap_or_default();
            std::fs::write(&cfg, format!("[docker]\nimage = {image:?}\n"))
                .map_err(|e| e.to_string())?;
            "docker"
        }
        Target::Wasm => {
            std::fs::write(&cfg, "").map_err(|e| e.to_string())?;
            "wasm"
        }
        _ => {
            std::fs::write(&cfg, "").map_err(|e| e.to_string())?;
            "direct"
        }
    };
    let program: &[&str] = if c.target == Target::Wasm {
        &["./probe.wasm", "stdin"]
    } else {
        &["sh", "-c", "printf 'stdin %s bytes\\n' $(wc -c)"]
    };
    let cfg_s = cfg.to_string_lossy().into_owned();
    let run = |data: Option<&[u8]>| -> Result<(std::process::Output, Duration), String> {
        let mut args = vec![
            "run",
            "--config",
            &cfg_s,
            "--backend",
            backend,
            "--timeout",
            "1",
            "--",
        ];
        args.extend_from_slice(program);
        let mut child = std::process::Command::new(toolhost_bin())
            .args(&args)
            .current_dir(c.t.ws())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .env_remove("TOOLHOST_CONFIG")
            .env_remove("TOOLHOST_LOG")
            .spawn()
            .map_err(|e| e.to_string())?;
        let t0 = Instant::now();
        let mut stdin = child.stdin.take();
        if let Some(d) = data {
            stdin.as_mut().map(|s| s.write_all(d));
            drop(stdin.take());
        }
        // Without data the write end stays open (held here) until the end.
        let out = child.wait_with_output().map_err(|e| e.to_string())?;
        drop(stdin);
        Ok((out, t0.elapsed()))
    };
    let (out, took) = run(None)?;
    ensure(
        out.status.code() == Some(124) && took < Duration::from_millis(2500),
        || format!("held-open stdin: {took:?} {out:?}"),
    )?;
    ensure(
        String::from_utf8_lossy(&out.stderr).contains("reading standard input"),
        || format!("{out:?}"),
    )?;
    let (out, _) = run(Some(b"hello"))?;
    ensure(
        out.status.code() == Some(0)
            && String::from_utf8_lossy(&out.stdout).contains("stdin 5 bytes"),
        || format!("control: {out:?}"),
    )
}

/// A module that is slow to compile: one function whose `n` i64 locals are
/// all live across a loop (register allocation is superlinear in them).
/// `salt` makes its bytes unique, so no cache holds it.
pub fn slow_to_compile_module(n: u32, salt: i64) -> Vec<u8> {
    fn uleb(mut v: u64, out: &mut Vec<u8>) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }
    fn sleb(mut v: i64, out: &mut Vec<u8>) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if (v == 0 && b & 0x40 == 0) || (v == -1 && b & 0x40 != 0) {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }
    fn section(id: u8, body: &[u8], out: &mut Vec<u8>) {
        out.push(id);
        uleb(body.len() as u64, out);
        out.extend_from_slice(body);
    }
    let mut code = Vec::new();
    for i in 0..n {
        code.push(0x42); // i64.const
        sleb(i as i64 ^ salt, &mut code);
        code.push(0x21); // local.set
        uleb(i.into(), &mut code);
    }
    code.extend([0x03, 0x40]); // loop
    for i in 0..n {
        code.push(0x20);
        uleb(i.into(), &mut code);
        code.extend([0x42, 0x01, 0x7c, 0x21]); // +1, local.set
        uleb(i.into(), &mut code);
    }
    // Loop while local 0 is below its start plus 4.
    code.extend([0x20, 0x00, 0x42]);
    sleb(salt.wrapping_add(4), &mut code);
    code.extend([0x53, 0x0d, 0x00, 0x0b]); // i64.lt_s, br_if 0, end
    code.extend([0x20, 0x00]);
    for i in 1..n {
        code.push(0x20);
        uleb(i.into(), &mut code);
        code.push(0x7c);
    }
    code.extend([0x1a, 0x0b]); // drop, end
    let mut body = vec![0x01];
    uleb(n.into(), &mut body);
    body.push(0x7e);
    body.extend(code);
    let mut m = b"\0asm\x01\0\0\0".to_vec();
    section(1, &[0x01, 0x60, 0x00, 0x00], &mut m);
    section(3, &[0x01, 0x00], &mut m);
    section(5, &[0x01, 0x00, 0x01], &mut m);
    let mut exports = vec![0x02, 6];
    exports.extend(b"_start\x00\x00");
    exports.push(6);
    exports.extend(b"memory\x02\x00");
    section(7, &exports, &mut m);
    let mut codesec = vec![0x01];
    uleb(body.len() as u64, &mut codesec);
    codesec.extend(body);
    section(10, &codesec, &mut m);
    m
}

/// Case 45: two modules that take seconds to compile, called at once
/// with a 1 s timeout, come back `timed_out` on time, while a call of a
/// compiled tool in the same sandbox is answered at once (compiling runs on
/// the blocking pool, not on an executor thread, and inside the timeout).
async fn slow_compile_case(c: &Ctx) -> CaseResult {
    let salt = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(7);
    for (i, n) in [(1, 10_000), (2, 9_500)] {
        std::fs::write(
            c.t.ws().join(format!("slow{i}.wasm")),
            slow_to_compile_module(n, salt),
        )
        .map_err(|e| e.to_string())?;
    }
    c.t.write("inside.txt", "INSIDE");
    // One engine for both sandboxes (same cache dir): they share its two
    // compile slots, which the slow modules take.
    let cache = c.t.root.join("cache45");
    let sb = std::sync::Arc::new(c.sandbox_with(|cfg| {
        cfg.timeout = Duration::from_secs(1);
        cfg.wasm.cache_dir = Some(cache.clone());
    }));
    // Control first: the probe compiles (into the disk cache) and answers
    // (its compile is within the timeout too, so give it a sandbox of its
    // own with a longer one).
    let quick = c.sandbox_with(|cfg| cfg.wasm.cache_dir = Some(cache.clone()));
    let r = c.run(&quick, "", &["read", "inside.txt"]).await;
    ensure(r.success() && r.stdout == "INSIDE", || {
        format!("control: {r:?}")
    })?;
    // A copy of the probe: a file not loaded yet, whose code the disk cache
    // holds. Loading it needs no compile slot.
    std::fs::copy(c.t.ws().join("probe.wasm"), c.t.ws().join("probe2.wasm"))
        .map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    let slow: Vec<_> = ["slow1.wasm", "slow2.wasm"]
        .into_iter()
        .map(|m| {
            let sb = sb.clone();
            let p = c.t.ws().join(m);
            tokio::spawn(async move { sb.run(RunRequest::new([p])).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let t1 = Instant::now();
    let r = c.run(&quick, "", &["read", "inside.txt"]).await;
    let answered = t1.elapsed();
    ensure(r.success() && r.stdout == "INSIDE", || {
        format!("during: {r:?}")
    })?;
    let probe2 = c.t.ws().join("probe2.wasm");
    let r = quick
        .run(RunRequest::new([
            probe2.as_os_str(),
            "read".as_ref(),
            "inside.txt".as_ref(),
        ]))
        .await;
    let first_load = t1.elapsed();
    ensure(r.success() && r.stdout == "INSIDE", || {
        format!("a cached tool's first load during the compiles: {r:?}")
    })?;
    for h in slow {
        let r = h.await.map_err(|e| e.to_string())?;
        ensure(
            r.timed_out && r.outcome.kind == OutcomeKind::TimedOut,
            || format!("slow module: {r:?}"),
        )?;
        ensure(r.outcome.message.contains("compiling"), || {
            format!("slow module: {r:?}")
        })?;
    }
    let took = t0.elapsed();
    println!(
        "case 45: slow modules timed out after {took:?}; a call meanwhile took {answered:?}, a cached tool's first load {:?}",
        first_load - answered
    );
    ensure(took < Duration::from_secs(3), || {
        format!("the 1 s timeout took {took:?}")
    })?;
    ensure(first_load < Duration::from_secs(1), || {
        format!("a concurrent call took {answered:?}, then a cached tool {first_load:?}")
    })
}

/// Case 40 through the agent's tools: N+1 calls inside the window get a
/// typed `rate_limited` result, unknown, denied and failed calls count too, and
/// of 20 concurrent calls exactly the limit gets through.
async fn rate_limit_case(c: &Ctx) -> CaseResult {
    use serde_json::json;
    use toolhost::tools::toolbox::Toolbox;
    let toolbox = |calls: u64| {
        let mut cfg = c.config();
        cfg.shell_allowed_binaries = vec!["echo".into(), "hostname".into()];
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
    // A program every host has: `echo` here, `hostname.exe` on Windows.
    let call = if cfg!(windows) {
        json!({"args": ["hostname"]})
    } else {
        json!({"args": ["echo", "x"]})
    };
    let r = tb.call("shell", &call).await;
    ensure(
        r.status == "rate_limited" && r.rule.as_deref() == Some("rate_limit"),
        || format!("the 4th call: {r:?}"),
    )?;
    let wait = r.retry_after_ms.unwrap_or(0);
    ensure(wait > 590_000 && wait <= 600_000, || {
        format!("retry after {wait} ms")
    })?;
    // Control: a fresh window admits the same call.
    let r = toolbox(3).await.call("shell", &call).await;
    ensure(r.status == "ok" && !r.text.trim().is_empty(), || {
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
    #[cfg(unix)]
    let image = crate::docker::image();
    #[cfg(not(unix))]
    let image = None;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut failures = Vec::new();
    let mut table: Vec<(Target, Vec<String>)> = Vec::new();
    for &(target, row) in EXPECTATIONS {
        assert_eq!(
            row.len(),
            CASES as usize,
            "{target:?} row must have {CASES} marks"
        );
        let mut cells = Vec::new();
        for case in 1..=CASES {
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
                    if let Some(why) = not_here(target, case) {
                        format!("n/a here: {why}")
                    } else if target == Target::Docker && image.is_none() {
                        "skipped (no engine)".to_string()
                    } else {
                        let ctx = Ctx::new(target, image.clone());
                        let r = rt.block_on(async {
                            tokio::time::timeout(Duration::from_secs(120), run_case(&ctx, case))
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
    let mut out = String::from("\ncontract suite (docs/src/attacks.md)\ncase");
    for (t, _) in &table {
        out.push_str(&format!(" | {}", t.name()));
    }
    out.push('\n');
    for case in 1..=CASES as usize {
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
    // docs/src/attacks.md's own target letters, per case: every listed target is held
    // here (H or d), none is left n/a.
    let listed: [(&str, &[Target]); 43] = [
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
        (
            "41",
            &[Target::Direct, Target::Docker, Target::Wasm, Target::Files],
        ),
        ("42", &[Target::Direct, Target::Docker, Target::Files]),
        ("43", &[Target::Direct, Target::Files]),
        (
            "44",
            &[Target::Direct, Target::Docker, Target::Wasm, Target::Files],
        ),
        ("45", &[Target::Wasm]),
        ("46", &[Target::Wasm]),
        ("47", &[Target::Wasm]),
        ("49", &[Target::Direct, Target::Docker, Target::Wasm]),
    ];
    for (case, targets) in listed {
        let n: u32 = case.parse().unwrap();
        for t in targets {
            let m = expectation(*t, n);
            let ok = m == 'H' || m == 'd' || (m == 'p' && PENDING.contains(&n));
            assert!(ok, "case {n} on {}: {m}", t.name());
        }
    }
    // A pending mark only where docs/src/attacks.md lists the target.
    for &(t, row) in EXPECTATIONS {
        for (i, m) in row.chars().enumerate() {
            let n = i as u32 + 1;
            if m == 'p' {
                assert!(
                    listed
                        .iter()
                        .any(|(c, ts)| c.parse::<u32>() == Ok(n) && ts.contains(&t)),
                    "case {n} pending on {}, which docs/src/attacks.md does not list",
                    t.name()
                );
            }
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
