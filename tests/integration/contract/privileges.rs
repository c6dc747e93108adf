//! Privileges left behind (42) and programs planted on the PATH (43).

use super::*;

/// The attack of case 42 (run as the tool): set-ID files by chmod and by a
/// creating open or mknod, a file capability, the immutable and append-only
/// flags, real-time scheduling and a raised priority; each next to its
/// allowed twin (chmod 755, a plain create, a user xattr, the nodump flag,
/// nice 10, an ordinary write).
pub(super) const PRIVILEGE_ATTACK: &str = r#"
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
pub(super) async fn setid_in_container_case(c: &Ctx) -> CaseResult {
    use std::os::unix::fs::PermissionsExt;
    // Warm mode is refused on a rootless Podman without cgroup controllers
    // (`docker::podman::warm_mode_is_refused_where_podman_applies_no_limits`).
    let modes: &[bool] = if c.target == Target::Docker(Engine::PodmanRootless) {
        &[false]
    } else {
        &[false, true]
    };
    for &warm in modes {
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
        // gVisor keeps a named pipe made in a mounted dir in its own
        // kernel, not on the host: there the control is the tool's `fifo2=0`.
        ensure(
            mode("fifo2").is_some() || c.target == Target::Docker(Engine::Runsc),
            || format!("warm={warm}: control fifo2"),
        )?;
    }
    Ok(())
}

#[cfg(unix)]
/// Case 42 on the file tools: `file_write` over a set-ID file (one a tool
/// could make where toolhost's filter does not run) keeps the permission bits but never the
/// set-ID ones: the new file is toolhost's, root's in CI, and would be a
/// set-ID program of root with the agent's content. Allowed twin: a 0755
/// file stays 0755.
pub(super) fn replaced_setid_file_case(c: &Ctx) -> CaseResult {
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
pub(super) async fn privileges_left_behind_case(c: &Ctx) -> CaseResult {
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
pub(super) fn mcp_session(
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
pub(super) async fn planted_on_path_case(c: &Ctx) -> CaseResult {
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
