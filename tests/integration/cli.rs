//! `toolhost run`: exit codes, `--json` shape, flags, config files, stdin.

use std::io::Write;
use std::process::{Command, Stdio};

use crate::util::*;

fn code(t: &Tmp, args: &[&str]) -> (i32, String, String) {
    let out = toolhost(&t.ws(), args, &[]);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

// Unix only: runs native POSIX commands (sh, echo, true); the Windows CLI and direct are tested in windows.rs
#[cfg(unix)]
#[test]
fn exit_codes_follow_the_convention() {
    let t = Tmp::new();
    t.write("plain.txt", "x");
    std::fs::write(t.root.join("bad.toml"), "timeout = \"soon\"\n").unwrap();
    let bad = t.root.join("bad.toml");
    let cases: Vec<(Vec<&str>, i32)> = vec![
        (vec!["run", "--", "true"], 0),
        (vec!["run", "--", "sh", "-c", "exit 3"], 3),
        (vec!["run", "--timeout", "0.5", "--", "sleep", "10"], 124),
        (
            vec!["run", "--config", bad.to_str().unwrap(), "--", "true"],
            125,
        ),
        (vec!["run", "--timeout", "0", "--", "true"], 125),
        (vec!["run", "--timeout", "abc", "--", "true"], 125),
        (vec!["run", "--cwd", "/", "--", "true"], 125),
        (
            vec!["run", "--allow-dir", "/no/such/dir", "--", "true"],
            125,
        ),
        (vec!["run", "--backend", "docker", "--", "true"], 125),
        (vec!["run", "--backend", "nope", "--", "true"], 125),
        (vec!["run", "--", ""], 125),
        (vec!["run"], 125),
        (vec!["run", "--", "./plain.txt"], 126),
        (vec!["run", "--", "no-such-program-zz"], 127),
        (vec!["run", "--", "sh", "-c", "kill -9 $$"], 137),
        (vec!["run", "--", "sh", "-c", "kill -TERM $$"], 143),
        (
            vec![
                "run",
                "--max-cpu-seconds",
                "1",
                "--",
                "sh",
                "-c",
                "while :; do :; done",
            ],
            152,
        ),
        (
            vec![
                "run",
                "--max-file-size-mb",
                "1",
                "--",
                "dd",
                "if=/dev/zero",
                "of=f",
                "bs=1M",
                "count=3",
            ],
            153,
        ),
    ];
    for (args, want) in cases {
        let (got, _, stderr) = code(&t, &args);
        assert_eq!(got, want, "{args:?}: {stderr}");
        if want >= 124 && want != 137 && want != 143 {
            assert!(
                stderr.contains("toolhost:") || stderr.contains("error"),
                "{args:?}: {stderr}"
            );
        }
    }
}

// Unix only: runs native POSIX commands (sh, echo, true); the Windows CLI and direct are tested in windows.rs
#[cfg(unix)]
#[test]
fn plain_mode_passes_output_through() {
    let t = Tmp::new();
    let (c, out, err) = code(&t, &["run", "--", "sh", "-c", "echo out; echo err >&2"]);
    assert_eq!((c, out.as_str(), err.as_str()), (0, "out\n", "err\n"));
}

// Unix only: runs native POSIX commands (sh, echo, true); the Windows CLI and direct are tested in windows.rs
#[cfg(unix)]
#[test]
fn json_mode_prints_one_object_with_every_field() {
    let t = Tmp::new();
    let (c, out, _) = code(&t, &["run", "--json", "--", "sh", "-c", "echo hi; exit 4"]);
    assert_eq!(c, 4);
    assert_eq!(out.lines().count(), 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["stdout"], "hi\n");
    assert_eq!(v["stderr"], "");
    assert_eq!(v["returncode"], 4);
    assert_eq!(v["timed_out"], false);
    assert_eq!(v["truncated"], false);
    assert_eq!(v["outcome"]["kind"], "exited");
    assert_eq!(v["outcome"]["message"], "exited with code 4");
    assert_eq!(v["backend"], "direct");
    assert!(v["duration_ms"].as_f64().unwrap() > 0.0);
    assert_eq!(v["isolation"]["level"], "best-effort");
    assert!(
        v["isolation"]["applied"].as_array().unwrap().len() >= 2,
        "{v}"
    );
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert_eq!(keys.len(), 9, "{keys:?}");

    let (c, out, _) = code(
        &t,
        &["run", "--json", "--timeout", "0.3", "--", "sleep", "5"],
    );
    assert_eq!(c, 124);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["outcome"]["kind"], "timed_out");
    assert_eq!(v["returncode"], serde_json::Value::Null);
    assert_eq!(v["timed_out"], true);

    let (c, out, _) = code(&t, &["run", "--json", "--", "sh", "-c", "kill -9 $$"]);
    assert_eq!(c, 137);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["outcome"]["kind"], "signalled");
    assert_eq!(v["outcome"]["signal"], 9);

    let (c, out, _) = code(&t, &["run", "--json", "--cwd", "/etc", "--", "true"]);
    assert_eq!(c, 125);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["outcome"]["kind"], "cwd_outside");
}

// Unix only: runs native POSIX commands (sh, echo, true); the Windows CLI and direct are tested in windows.rs
#[cfg(unix)]
#[test]
fn flags_set_the_limits() {
    let t = Tmp::new();
    let (_, out, _) = code(
        &t,
        &[
            "run",
            "--json",
            "--max-output-bytes",
            "10",
            "--",
            "printf",
            "0123456789abcdef",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["stdout"], "01234567");
    assert_eq!(v["truncated"], true);
    let (_, out, _) = code(
        &t,
        &[
            "run",
            "--max-memory-mb",
            "64",
            "--",
            "python3",
            "-c",
            "import resource; print(resource.getrlimit(resource.RLIMIT_AS)[0] >> 20)",
        ],
    );
    assert_eq!(out, "64\n");
    let limits = "import resource as r\nfor n in ('NPROC', 'CORE', 'FSIZE', 'CPU'):\n    print(n, *r.getrlimit(getattr(r, 'RLIMIT_' + n)))";
    let (_, out, _) = code(
        &t,
        &["run", "--max-processes", "7", "--", "python3", "-c", limits],
    );
    let mb50 = 50 * 1024 * 1024;
    assert_eq!(
        out,
        format!("NPROC 7 7\nCORE 0 0\nFSIZE {mb50} {mb50}\nCPU 30 31\n")
    );
    let (_, out, _) = code(
        &t,
        &[
            "run",
            "--max-processes",
            "0",
            "--max-cpu-seconds",
            "0",
            "--",
            "python3",
            "-c",
            limits,
        ],
    );
    assert!(
        !out.contains("NPROC 7 7") && !out.contains("CPU 30"),
        "{out}"
    );
}

// Unix only: runs native POSIX commands (sh, echo, true); the Windows CLI and direct are tested in windows.rs
#[cfg(unix)]
#[test]
fn allow_dir_ro_cwd_and_default_dir() {
    let t = Tmp::new();
    std::fs::create_dir(t.ws().join("sub")).unwrap();
    let ws = t.ws();
    let outside = format!("{}:ro", t.outside().display());
    let (c, out, err) = code(
        &t,
        &[
            "run",
            "--allow-dir",
            ws.to_str().unwrap(),
            "--allow-dir",
            &outside,
            "--cwd",
            t.outside().to_str().unwrap(),
            "--",
            "cat",
            "secret.txt",
        ],
    );
    assert_eq!((c, out.as_str()), (0, CANARY), "{err}");
    let (_, out, _) = code(&t, &["run", "--cwd", "sub", "--", "pwd"]);
    assert_eq!(out.trim_end(), ws.join("sub").to_string_lossy());
}

// Unix only: runs native POSIX commands (sh, echo, true); the Windows CLI and direct are tested in windows.rs
#[cfg(unix)]
#[test]
fn config_file_is_read_only_when_named() {
    let t = Tmp::new();
    // An agent-written toolhost.toml in the workspace is ignored...
    t.write("toolhost.toml", "max_output_bytes = 3\n");
    let (_, out, _) = code(&t, &["run", "--", "echo", "hello"]);
    assert_eq!(out, "hello\n");
    // ...and refused when named there: a tool could rewrite it for the
    // next run (it is toolhost state, like the cache).
    let inside = t.ws().join("toolhost.toml");
    let (status, _, err) = code(
        &t,
        &[
            "run",
            "--config",
            inside.to_str().unwrap(),
            "--",
            "echo",
            "hello",
        ],
    );
    assert_eq!(status, 125, "{err}");
    assert!(err.contains("contains toolhost's config file"), "{err}");
    // Honoured when the operator names one outside the writable dirs.
    let cfg = t.root.join("toolhost.toml");
    std::fs::write(&cfg, "max_output_bytes = 3\n").unwrap();
    let (_, out, _) = code(
        &t,
        &[
            "run",
            "--config",
            cfg.to_str().unwrap(),
            "--",
            "echo",
            "hello",
        ],
    );
    assert_eq!(out, "he");
    // Refused while a hard link to it lies in the workspace (a tool would
    // change it through that name), taken again once the link is gone.
    let link = t.ws().join("linked.toml");
    std::fs::hard_link(&cfg, &link).unwrap();
    let (status, _, err) = code(
        &t,
        &[
            "run",
            "--config",
            cfg.to_str().unwrap(),
            "--",
            "echo",
            "hello",
        ],
    );
    assert_eq!(status, 125, "{err}");
    assert!(
        err.contains("config file") && err.contains("2 hard links"),
        "{err}"
    );
    std::fs::remove_file(&link).unwrap();
    // Named relative to the workspace, through `..`: the same two places.
    let (_, out, err) = code(
        &t,
        &["run", "--config", "../toolhost.toml", "--", "echo", "hello"],
    );
    assert_eq!(out, "he", "{err}");
    let (status, _, err) = code(
        &t,
        &[
            "run",
            "--config",
            "../ws/toolhost.toml",
            "--",
            "echo",
            "hello",
        ],
    );
    assert_eq!(status, 125, "{err}");
    assert!(err.contains("contains toolhost's config file"), "{err}");
    // Flags override the file.
    let (_, out, _) = code(
        &t,
        &[
            "run",
            "--config",
            cfg.to_str().unwrap(),
            "--max-output-bytes",
            "100",
            "--",
            "echo",
            "hello",
        ],
    );
    assert_eq!(out, "hello\n");
    // Unknown keys are refused, naming the key.
    std::fs::write(t.root.join("typo.toml"), "max_memroy_mb = 1\n").unwrap();
    let typo = t.root.join("typo.toml");
    let (c, _, err) = code(
        &t,
        &["run", "--config", typo.to_str().unwrap(), "--", "true"],
    );
    assert_eq!(c, 125);
    assert!(err.contains("`max_memroy_mb`"), "{err}");
}

// Unix only: runs native POSIX commands (sh, echo, true); the Windows CLI and direct are tested in windows.rs
#[cfg(unix)]
#[test]
fn stdin_is_forwarded_when_piped() {
    let t = Tmp::new();
    let mut child = Command::new(toolhost_bin())
        .args(["run", "--", "tr", "a-z", "A-Z"])
        .current_dir(t.ws())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"hello sandbox")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "HELLO SANDBOX");
}

/// `/dev/null` as stdin is read without a thread (it ends at once); a file
/// is read as a pipe is. The tool gets what each holds.
#[cfg(unix)]
#[test]
fn stdin_from_dev_null_or_a_file_reaches_the_tool() {
    let t = Tmp::new();
    std::fs::write(t.root.join("in.txt"), "four\n").unwrap();
    let count = |stdin: Stdio| {
        let out = Command::new(toolhost_bin())
            .args(["run", "--", "wc", "-c"])
            .current_dir(t.ws())
            .stdin(stdin)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(count(Stdio::null()), "0");
    let file = std::fs::File::open(t.root.join("in.txt")).unwrap();
    assert_eq!(count(Stdio::from(file)), "5");
}

#[test]
fn help_documents_every_flag_and_exit_code() {
    let t = Tmp::new();
    let (c, out, _) = code(&t, &["run", "--help"]);
    assert_eq!(c, 0);
    for flag in [
        "--backend",
        "--allow-dir",
        "--cwd",
        "--config",
        "--timeout",
        "--max-memory-mb",
        "--max-cpu-seconds",
        "--max-output-bytes",
        "--max-processes",
        "--max-file-size-mb",
        "--allow-network",
        "--env-allow",
        "--json",
        "124",
        "125",
        "126",
        "127",
        "128+N",
    ] {
        assert!(out.contains(flag), "--help lacks {flag}");
    }
    let (c, out, _) = code(&t, &["--help"]);
    assert_eq!(c, 0);
    assert!(out.contains("run"));
}

/// The help's defaults are the config's (`SandboxConfig::default_of`, read
/// from `SandboxConfig::default`), not numbers written a second time.
#[test]
fn help_shows_the_configs_defaults() {
    let t = Tmp::new();
    let (c, out, _) = code(&t, &["run", "--help"]);
    assert_eq!(c, 0);
    let out = out.split_whitespace().collect::<Vec<_>>().join(" ");
    for key in [
        "timeout",
        "max_memory_mb",
        "max_cpu_seconds",
        "max_output_bytes",
        "max_processes",
        "max_file_size_mb",
    ] {
        let d = toolhost::SandboxConfig::default_of(key).expect("a default");
        assert!(
            out.contains(&format!("[default: {d}]")),
            "--help lacks {key}'s default {d}"
        );
    }
    for key in ["backend", "isolation"] {
        let d = toolhost::SandboxConfig::default_of(key).expect("a default");
        let d = d.trim_matches('"');
        assert!(
            out.contains(&format!("[default: {d}, or the config's]")),
            "--help lacks {key}'s default {d}"
        );
    }
    assert_eq!(
        toolhost::SandboxConfig::default_of("timeout").as_deref(),
        Some("15")
    );
    assert_eq!(toolhost::SandboxConfig::default_of("env_allowlist"), None);
}

// Unix only: execvp's search of Unix modes
#[cfg(unix)]
#[test]
fn bare_names_are_searched_on_the_tools_path_like_execvp() {
    use std::os::unix::fs::PermissionsExt;
    let t = Tmp::new();
    t.write("a/both", "#!/bin/sh\necho from-a\n");
    t.write("b/both", "#!/bin/sh\necho from-b\n");
    t.write("b/only-b", "#!/bin/sh\necho only-b\n");
    t.write("a/noexec", "#!/bin/sh\necho never\n");
    for f in ["b/both", "b/only-b"] {
        std::fs::set_permissions(t.ws().join(f), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let path = format!(
        "/nonexistent:{}:{}:/usr/bin:/bin",
        t.ws().join("a").display(),
        t.ws().join("b").display()
    );
    let run = |prog: &str| {
        let out = toolhost(&t.ws(), &["run", "--", prog], &[("PATH", &path)]);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    // a/both is not executable (EACCES): the search goes on to b/both.
    assert_eq!(run("both"), (Some(0), "from-b\n".into()));
    assert_eq!(run("only-b"), (Some(0), "only-b\n".into()));
    // Found but never executable anywhere: 126, not 127.
    assert_eq!(run("noexec").0, Some(126));
    assert_eq!(run("nowhere-at-all").0, Some(127));
    // Standard tools still resolve through the later entries.
    assert_eq!(run("true").0, Some(0));
}

// Unix only: bind mounts
#[cfg(unix)]
/// Attack 41 through a bind mount (from a review): the cache dir reached
/// through a bind mount of a subdir of the workspace is the workspace's, and
/// refused (the check compares where places sit in their filesystem); the
/// allowed twin, the cache in a dir of its own, runs. In a private mount
/// namespace (root, as in CI).
#[test]
fn a_cache_reached_through_a_bind_mount_of_the_workspace_is_refused() {
    if unsafe_is_root() {
        let t = Tmp::new();
        std::fs::create_dir_all(t.ws().join("sub")).unwrap();
        std::fs::create_dir_all(t.root.join("alias")).unwrap();
        std::fs::create_dir_all(t.root.join("own")).unwrap();
        let run = |cache: &str| {
            let script = format!(
                "mount --bind {ws}/sub {root}/alias && XDG_CACHE_HOME={root}/{cache} exec {bin} run --allow-dir {ws} -- true",
                ws = t.ws().display(),
                root = t.root.display(),
                bin = toolhost_bin().display(),
            );
            Command::new("unshare")
                .args(["-m", "--propagation", "private", "sh", "-c", &script])
                .env_remove("TOOLHOST_CONFIG")
                .output()
                .unwrap()
        };
        let out = run("alias");
        assert_eq!(out.status.code(), Some(125), "{out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("contains toolhost's"), "{err}");
        let out = run("own");
        assert_eq!(out.status.code(), Some(0), "{out:?}");
    }
}

// Unix only: geteuid
#[cfg(unix)]
fn unsafe_is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// `toolhost run` makes the namespaces and programs of a direct call on a
/// thread of its own while it starts (`Sandbox::warm_up_in_background`); its
/// call waits for what it needs. The call has every layer an in-process call
/// has, and its tool is in the empty network namespace, unless the network
/// is allowed: then it is in the host's.
#[cfg(target_os = "linux")]
#[test]
fn a_cli_call_has_the_layers_of_an_in_process_call() {
    let t = Tmp::new();
    let host_ns = std::fs::read_link("/proc/self/ns/net").unwrap();
    let host_ns = host_ns.to_str().unwrap();
    let layers = |v: &serde_json::Value| -> Vec<String> {
        let mut l: Vec<String> = v["isolation"]["applied"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_string())
            .collect();
        l.sort();
        l
    };
    let run = |extra: &[&str]| {
        let mut args = vec!["run", "--json"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", "readlink", "/proc/self/ns/net"]);
        let (c, out, err) = code(&t, &args);
        assert_eq!(c, 0, "{out} {err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        (v["stdout"].as_str().unwrap().trim().to_string(), layers(&v))
    };
    let (denied_ns, cli_layers) = run(&[]);
    let (allowed_ns, _) = run(&["--allow-network"]);
    assert!(denied_ns.starts_with("net:["), "{denied_ns}");
    assert_ne!(denied_ns, host_ns, "the tool is in the host's network");
    assert_eq!(allowed_ns, host_ns, "--allow-network keeps the host's");

    let sandbox = toolhost::Sandbox::new([t.ws()], toolhost::SandboxConfig::default()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let r = rt.block_on(sandbox.run(toolhost::RunRequest::new(["true"])));
    assert!(r.success(), "{r:?}");
    let in_process = layers(&serde_json::to_value(&r).unwrap());
    assert!(cli_layers.contains(&"netns".to_string()), "{cli_layers:?}");
    assert_eq!(cli_layers, in_process);
}

/// The read paths' handles are the call's, not the start-up warm-up's: a
/// read-path dir swapped for another while stdin is still open is read as
/// it is when the call starts, and the old one, moved away, is not
/// readable (found by the review of the warm-up).
#[cfg(target_os = "linux")]
#[test]
fn a_read_path_swapped_while_stdin_is_open_is_read_as_the_call_finds_it() {
    let t = Tmp::new();
    let rp = t.root.join("rp");
    let moved = t.root.join("moved");
    std::fs::create_dir(&rp).unwrap();
    std::fs::write(rp.join("f"), "old\n").unwrap();
    let mut paths: Vec<String> = toolhost::SandboxConfig::default()
        .isolation_read_paths
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    paths.push(rp.display().to_string());
    let cfg = t.root.join("rp.toml");
    std::fs::write(
        &cfg,
        format!(
            "isolation_read_paths = {}\n",
            serde_json::to_string(&paths).unwrap()
        ),
    )
    .unwrap();
    let script = format!("cat {}/f; cat {}/f", rp.display(), moved.display());
    let mut child = Command::new(toolhost_bin())
        .args(["run", "--config", cfg.to_str().unwrap(), "--json", "--"])
        .args(["sh", "-c", &script])
        .current_dir(t.ws())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    std::fs::rename(&rp, &moved).unwrap();
    std::fs::create_dir(&rp).unwrap();
    std::fs::write(rp.join("f"), "new\n").unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["stdout"], "new\n", "{v}");
    assert!(
        v["stderr"].as_str().unwrap().contains("Permission denied"),
        "{v}"
    );
}

/// A tmp base dir that is set-group-ID (its new dirs inherit the bit) still
/// gives each call a private tmp, removed after it: the check of the new
/// dir looks at its permission bits, 0700 (found by the review of the
/// random tmp names). Side by side with a plain base.
#[cfg(target_os = "linux")]
#[test]
fn a_set_group_id_tmp_base_still_gives_a_private_tmp() {
    use std::os::unix::fs::PermissionsExt;
    let t = Tmp::new();
    for mode in [0o777, 0o2777] {
        let base = t.outside().join(format!("tmp-{mode:o}"));
        std::fs::create_dir(&base).unwrap();
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(mode)).unwrap();
        let base_s = base.to_str().unwrap();
        let out = toolhost(
            &t.ws(),
            &["run", "--json", "--", "sh", "-c", "echo \"$TMPDIR\""],
            &[("TMPDIR", base_s)],
        );
        assert!(out.status.success(), "{out:?}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let applied = v["isolation"]["applied"].to_string();
        assert!(applied.contains("private_tmp"), "mode {mode:o}: {applied}");
        let tmp = v["stdout"].as_str().unwrap().trim().to_string();
        assert!(
            tmp.starts_with(&format!("{base_s}/toolhost-call-")),
            "mode {mode:o}: {tmp}"
        );
        let left: Vec<_> = std::fs::read_dir(&base).unwrap().collect();
        assert!(left.is_empty(), "mode {mode:o}: left {left:?}");
    }
}
