//! The compile cache's cap (46), a slow compile (45), the engine's log
//! (47) and an open stdin (49).

use super::*;

/// Case 46: distinct modules without end (the probe with a custom section
/// that makes each unique) keep the disk cache under `[wasm] cache_max_mb`,
/// the entries used least recently going first; with no cap (the allowed
/// twin) every entry stays.
pub(super) async fn cache_cap_case(c: &Ctx) -> CaseResult {
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
        // A first call may run baseline code: its optimized code reaches
        // the disk cache once the tier-up ends, which shutdown waits for.
        sb.shutdown().await;
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
        sb.shutdown().await;
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
pub(super) fn engine_log_case(c: &Ctx) -> CaseResult {
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
pub(super) fn open_stdin_case(c: &Ctx) -> CaseResult {
    use std::io::Write;
    let cfg = c.t.root.join("stdin.toml");
    let backend = match c.target {
        Target::Docker(_) => {
            std::fs::write(&cfg, c.docker_toml()).map_err(|e| e.to_string())?;
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
    use crate::util::uleb;
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
/// The modules are slow for Cranelift, so the sandboxes compile with it
/// alone (`baseline_compile = false`); with baseline compiles (Winch, whose
/// time grows with a module's size only) the same modules come back on
/// time too, run or timed out.
pub(super) async fn slow_compile_case(c: &Ctx) -> CaseResult {
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
        cfg.wasm.baseline_compile = false;
    }));
    // Control first: the probe compiles (into the disk cache) and answers
    // (its compile is within the timeout too, so give it a sandbox of its
    // own with a longer one).
    let quick = c.sandbox_with(|cfg| {
        cfg.wasm.cache_dir = Some(cache.clone());
        cfg.wasm.baseline_compile = false;
    });
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
    })?;
    // With baseline compiles: new modules as slow for Cranelift, the same
    // 1 s timeout, an engine of their own.
    for (i, n) in [(1, 10_000), (2, 9_500)] {
        std::fs::write(
            c.t.ws().join(format!("base{i}.wasm")),
            slow_to_compile_module(n, salt ^ 0x5a5a),
        )
        .map_err(|e| e.to_string())?;
    }
    let based = std::sync::Arc::new(c.sandbox_with(|cfg| {
        cfg.timeout = Duration::from_secs(1);
        cfg.wasm.cache_dir = Some(c.t.root.join("cache45b"));
        cfg.wasm.baseline_compile = true;
    }));
    let t0 = Instant::now();
    let calls: Vec<_> = ["base1.wasm", "base2.wasm"]
        .into_iter()
        .map(|m| {
            let sb = based.clone();
            let p = c.t.ws().join(m);
            tokio::spawn(async move { sb.run(RunRequest::new([p])).await })
        })
        .collect();
    for h in calls {
        let r = h.await.map_err(|e| e.to_string())?;
        ensure(
            r.success()
                || (r.timed_out
                    && r.outcome.kind == OutcomeKind::TimedOut
                    && r.outcome.message.contains("compiling")),
            || format!("slow module, baseline compiles: {r:?}"),
        )?;
    }
    let took = t0.elapsed();
    println!("case 45: with baseline compiles, the slow modules came back after {took:?}");
    ensure(took < Duration::from_secs(3), || {
        format!("with baseline compiles, the 1 s timeout took {took:?}")
    })
}
