//! Path escapes (cases 1-9) and a symlink swapped in during a call (27);
//! case 10's special files.

use super::*;

/// The cases of this part, run on `c`'s target (`d`) in `sb`.
pub(super) async fn case(c: &Ctx, sb: Sandbox, d: Target, case: u32) -> CaseResult {
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
            // A marker of each target's own: the targets' cases run at
            // once, and each looks for its tool among the host's processes.
            let n = match d {
                Target::Direct => 41,
                Target::Docker(Engine::Runc) => 42,
                Target::Docker(Engine::Runsc) => 43,
                Target::Docker(Engine::Podman) => 44,
                Target::Docker(Engine::PodmanRootless) => 45,
                _ => 46,
            };
            let marker = format!("sleep 95{n}");
            let script = match d {
                Target::Direct => format!("m=95; sleep ${{m}}{n} & wait"),
                _ => format!("m=95; sleep ${{m}}{n} & echo > ran; wait"),
            };
            let (marker, script) = (marker.as_str(), script.as_str());
            let mut args: Vec<String> = ["run", "--timeout", "120"].map(String::from).to_vec();
            if d.is_docker() {
                let cfg = c.t.root.join("docker.toml");
                std::fs::write(&cfg, c.docker_toml()).map_err(|e| e.to_string())?;
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
            // The tool's host processes, and on docker, once it has run,
            // those of its container (under runsc the tool's own are
            // inside gVisor's sandbox, not the host's).
            let deadline = Instant::now() + Duration::from_secs(30);
            let (tool, pids) = loop {
                let tool = processes_with(marker);
                #[cfg_attr(not(unix), allow(unused_mut))]
                let mut pids = tool.clone();
                #[cfg(unix)]
                if let Target::Docker(engine) = d
                    && c.t.ws().join("ran").exists()
                {
                    for id in crate::docker::containers_owned_by(engine, child.id()) {
                        pids.extend(processes_with(&id));
                    }
                }
                let ran = match d {
                    Target::Docker(Engine::Runsc) => pids.len() > tool.len(),
                    Target::Docker(_) => tool.len() == 1 && pids.len() > 1,
                    _ => tool.len() == 1,
                };
                if ran || Instant::now() > deadline {
                    break (tool, pids);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            };
            let _ = child.kill();
            let _ = child.wait();
            let ran = match d {
                Target::Docker(Engine::Runsc) => pids.len() > tool.len(),
                Target::Docker(_) => tool.len() == 1 && pids.len() > 1,
                _ => tool.len() == 1,
            };
            ensure(ran, || {
                format!("control: the tool never ran ({tool:?}, {pids:?})")
            })?;
            if d.is_docker() {
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
        _ => Err(format!("case {case} is not one of this part's")),
    }
}

/// Case 10 on Unix: a FIFO nobody writes, a symlink to /dev/zero.
#[cfg(unix)]
pub(super) async fn special_files_case(c: &Ctx) -> CaseResult {
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
pub(super) async fn read_ends(c: &Ctx, sb: &Sandbox, p: &str, max: usize) -> CaseResult {
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
pub(super) async fn plain_read(c: &Ctx, sb: &Sandbox) -> CaseResult {
    c.t.write("plain.txt", "plain");
    let r = c.read(sb, "plain.txt").await;
    ensure(r.as_deref() == Ok("plain"), || format!("control: {r:?}"))
}

/// Case 10 on Windows: its special files are devices, which a bare reserved
/// name reaches in any directory (`CON`, `NUL`, `CONIN$`, `COM1`, `AUX.txt`,
/// also below a dir): a read of one is refused or reads a plain file, never
/// the console, and never blocks.
#[cfg(windows)]
pub(super) async fn special_files_case(c: &Ctx) -> CaseResult {
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
