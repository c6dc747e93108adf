//! What a wasm guest sees (docs/src/wasm.md, "What a guest sees"): its
//! preopens, under their guest paths, and exactly the environment it was
//! given; and how the other backends treat a dir given a guest path. The
//! probe is called by name from the test-guest dir (`[wasm] tool_dirs`), so
//! it needs no allowed dir of its own.

use std::path::PathBuf;

use toolhost::{
    AllowedDirSpec, BackendChoice, BackendKind, OutcomeKind, RunOutput, RunRequest, Sandbox,
    SandboxConfig,
};

use crate::util::*;

fn guests() -> PathBuf {
    let d = PathBuf::from(env!("TOOLHOST_BUILD_GUEST_TESTS"));
    assert!(d.join("probe.wasm").exists(), "build.rs builds the probe");
    d
}

/// The wasm tests' config (one engine for the test process), with the
/// test-guest dir as a tool dir.
fn wasm_config() -> SandboxConfig {
    let mut c = crate::wasm::wasm_config();
    c.wasm.tool_dirs = vec![guests()];
    c
}

fn sandbox(dirs: Vec<AllowedDirSpec>, config: SandboxConfig) -> Sandbox {
    Sandbox::new(dirs, config).expect("sandbox")
}

async fn probe(sb: &Sandbox, args: &[&str], cwd: Option<&str>) -> RunOutput {
    let mut argv = vec!["probe"];
    argv.extend_from_slice(args);
    let mut req = RunRequest::new(argv);
    if let Some(c) = cwd {
        req = req.cwd(c);
    }
    sb.run(req).await
}

/// The preopens the probe lists, as (fd, name) lines without the end marker.
async fn preopens(sb: &Sandbox, cwd: Option<&str>) -> Vec<String> {
    let r = probe(sb, &["preopens"], cwd).await;
    assert!(r.success(), "{r:?}");
    let lines: Vec<String> = r.stdout.lines().map(str::to_string).collect();
    let (last, rest) = lines.split_last().expect("an end line");
    // The first fd past the preopens is not a descriptor at all (EBADF).
    assert!(
        last.starts_with("end ") && last.ends_with(" errno 8"),
        "{last}"
    );
    rest.to_vec()
}

#[tokio::test]
async fn a_guest_sees_exactly_the_preopens_it_was_given() {
    let t = Tmp::new();
    t.write("f", "at-root");
    t.write("sub/f", "in-sub");
    let ws = t.ws();
    let host = ws.to_str().unwrap();

    // The default: each dir at its host path, and the cwd as `.`.
    let sb = sandbox(vec![AllowedDirSpec::read_write(&ws)], wasm_config());
    assert_eq!(
        preopens(&sb, None).await,
        [format!("3 {host} 0"), "4 . 0".to_string()]
    );

    // Given as `/`: that one preopen, and the cwd adds none (relative paths
    // already start in `/`).
    let sb = sandbox(vec![AllowedDirSpec::read_write(&ws).at("/")], wasm_config());
    assert_eq!(preopens(&sb, None).await, ["3 / 0"]);
    for path in ["f", "/f", "./f"] {
        let r = probe(&sb, &["read", path], None).await;
        assert_eq!(r.stdout, "at-root", "{path}: {r:?}");
    }
    let r = probe(&sb, &["read", host], None).await;
    assert_ne!(r.stdout, "at-root", "the host path is no name in the guest");

    // The cwd named by its guest path: `/` is that dir.
    let r = probe(&sb, &["read", "f"], Some("/")).await;
    assert_eq!(r.stdout, "at-root", "{r:?}");
    // A cwd below `/` would need a `.` preopen, which wasi-libc would give
    // `/f` too: refused, saying why.
    let r = probe(&sb, &["read", "f"], Some("/sub")).await;
    assert_eq!(r.outcome.kind, OutcomeKind::InvalidRequest, "{r:?}");
    assert!(r.outcome.message.contains("can only be `/`"), "{r:?}");
    // The host path of the cwd is no name for it any more.
    let r = probe(&sb, &["read", "f"], Some(ws.join("sub").to_str().unwrap())).await;
    assert_eq!(r.outcome.kind, OutcomeKind::CwdOutside, "{r:?}");

    // Under another guest path, a cwd below it is `.`, and absolute paths
    // under the guest path still reach the dir's root.
    let sb = sandbox(
        vec![AllowedDirSpec::read_write(&ws).at("/data")],
        wasm_config(),
    );
    assert_eq!(
        preopens(&sb, Some("/data/sub")).await,
        ["3 /data 0", "4 . 0"]
    );
    let r = probe(&sb, &["read", "f"], Some("/data/sub")).await;
    assert_eq!(r.stdout, "in-sub", "{r:?}");
    let r = probe(&sb, &["read", "/data/f"], Some("/data/sub")).await;
    assert_eq!(r.stdout, "at-root", "{r:?}");

    // No dir at all: nothing is preopened (fd 3 is EBADF), and nothing can
    // be read; the same guest with a dir reads it.
    let sb = sandbox(vec![], wasm_config());
    assert!(preopens(&sb, None).await.is_empty());
    let r = probe(&sb, &["read", "f"], None).await;
    assert!(r.stdout.starts_with("ERR"), "{r:?}");
    let r = probe(&sb, &["args", "pure"], None).await;
    assert_eq!(r.stdout, "probe\nargs\npure\n", "{r:?}");
}

#[tokio::test]
async fn a_read_only_guest_path_is_read_only_wherever_it_is_seen() {
    let t = Tmp::new();
    t.write("data/in.txt", CANARY);
    let data = t.ws().join("data");
    let before = sha256_file(&data.join("in.txt"));
    let sb = sandbox(
        vec![
            AllowedDirSpec::read_write(t.ws()).at("/w"),
            AllowedDirSpec::read_only(&data).at("/ro"),
        ],
        wasm_config(),
    );
    assert_eq!(preopens(&sb, None).await, ["3 /w 0", "4 /ro 0", "5 . 0"]);
    let r = probe(&sb, &["write", "/ro/in.txt", "10"], None).await;
    assert_eq!(r.returncode, Some(3), "{r:?}");
    assert_eq!(sha256_file(&data.join("in.txt")), before);
    let r = probe(&sb, &["read", "/ro/in.txt"], None).await;
    assert_eq!(r.stdout, CANARY);
    // Nor through the writable dir that holds it, by its path there or
    // relative to the cwd (`.`); nor renamed away.
    for (path, cwd) in [
        ("/w/data/in.txt", None),
        ("data/in.txt", None),
        ("in.txt", Some("/w/data")),
    ] {
        let r = probe(&sb, &["write", path, "10"], cwd).await;
        assert_ne!(r.stdout, "wrote 10\n", "{path} {cwd:?}: {r:?}");
    }
    let r = probe(&sb, &["rename", "/w/data", "/w/moved"], None).await;
    assert!(
        t.ws().join("data").is_dir() && !t.ws().join("moved").exists(),
        "{r:?}"
    );
    assert_eq!(sha256_file(&data.join("in.txt")), before);
    // The read-write twin.
    let r = probe(&sb, &["write", "/w/out.bin", "10"], None).await;
    assert_eq!(r.stdout, "wrote 10\n", "{r:?}");
    assert_eq!(std::fs::metadata(t.ws().join("out.bin")).unwrap().len(), 10);
}

#[tokio::test]
async fn one_dir_twice_is_one_preopen_read_only_if_either_is() {
    let t = Tmp::new();
    t.write("f", CANARY);
    let before = sha256_file(&t.ws().join("f"));
    let sb = sandbox(
        vec![
            AllowedDirSpec::read_only(t.ws()).at("/a"),
            AllowedDirSpec::read_write(t.ws()).at("/a"),
        ],
        wasm_config(),
    );
    assert_eq!(preopens(&sb, None).await, ["3 /a 0", "4 . 0"]);
    let r = probe(&sb, &["write", "/a/f", "3"], None).await;
    assert_eq!(r.returncode, Some(3), "{r:?}");
    assert_eq!(sha256_file(&t.ws().join("f")), before);
    // Given once read-write, it is writable.
    let sb = sandbox(
        vec![AllowedDirSpec::read_write(t.ws()).at("/a")],
        wasm_config(),
    );
    let r = probe(&sb, &["write", "/a/g", "3"], None).await;
    assert_eq!(r.stdout, "wrote 3\n", "{r:?}");
}

#[test]
fn a_dir_seen_below_another_must_lie_there_on_the_host() {
    let t = Tmp::new();
    std::fs::create_dir_all(t.ws().join("sub")).unwrap();
    let e = Sandbox::new(
        [
            AllowedDirSpec::read_write(t.ws()).at("/a"),
            AllowedDirSpec::read_write(t.outside()).at("/a/l"),
        ],
        SandboxConfig::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("below the one seen at /a"), "{e}");
    // Nested alike, or mapped apart, is fine.
    for inner in ["/a/sub", "/b"] {
        Sandbox::new(
            [
                AllowedDirSpec::read_write(t.ws()).at("/a"),
                AllowedDirSpec::read_only(t.ws().join("sub")).at(inner),
            ],
            SandboxConfig::default(),
        )
        .unwrap();
    }
}

// Unix only: the host's HOME and PATH
#[cfg(unix)]
#[tokio::test]
async fn a_guest_sees_exactly_the_environment_it_was_given() {
    let t = Tmp::new();
    let env_of = |r: &RunOutput| -> Vec<String> { r.stdout.lines().map(str::to_string).collect() };
    // Nothing allowlisted: no variable at all (no PATH, no PWD).
    let none = SandboxConfig {
        env_allowlist: vec![],
        ..wasm_config()
    };
    let sb = sandbox(vec![AllowedDirSpec::read_write(t.ws())], none.clone());
    let r = probe(&sb, &["env"], None).await;
    assert!(r.success(), "{r:?}");
    assert_eq!(env_of(&r), Vec::<String>::new());
    // Set for the call: exactly those.
    let r = sb
        .run(
            RunRequest::new(["probe", "env"])
                .env("FOO", "bar")
                .env("PWD", "/asked"),
        )
        .await;
    assert_eq!(env_of(&r), ["FOO=bar", "PWD=/asked"]);
    // An allowlisted host variable passes; the host's layout (PATH, HOME,
    // TMPDIR: host paths) does not, even allowlisted, unless set for the call.
    // Any variable of this process that is neither host layout nor denied.
    let (name, value) = std::env::vars()
        .filter(|(k, _)| !["PATH", "HOME", "TMPDIR"].contains(&k.as_str()))
        .filter(|(k, v)| !v.contains('\n') && !toolhost::env::is_denied(k, false))
        .min()
        .expect("a plain variable in the test's environment");
    let host = SandboxConfig {
        env_allowlist: vec!["PATH".into(), "HOME".into(), "TMPDIR".into(), name.clone()],
        ..wasm_config()
    };
    assert!(std::env::var("HOME").is_ok() && std::env::var("PATH").is_ok());
    let sb = sandbox(vec![AllowedDirSpec::read_write(t.ws())], host);
    let r = probe(&sb, &["env"], None).await;
    assert_eq!(env_of(&r), [format!("{name}={value}")]);
    let r = sb
        .run(RunRequest::new(["probe", "env"]).env("HOME", "/home/guest"))
        .await;
    assert_eq!(
        env_of(&r),
        [format!("{name}={value}"), "HOME=/home/guest".to_string()]
    );
    // A native call of the same empty allowlist still gets its PATH.
    let sb = sandbox(
        vec![AllowedDirSpec::read_write(t.ws())],
        SandboxConfig {
            backend: BackendChoice::Direct,
            ..none
        },
    );
    let r = run(&sb, &["env"]).await;
    assert!(r.success(), "{r:?}");
    assert!(r.stdout.lines().any(|l| l.starts_with("PATH=")), "{r:?}");
}

// Unix only: runs native POSIX commands (sh, echo, true); the Windows CLI and direct are tested in windows.rs
#[cfg(unix)]
#[tokio::test]
async fn direct_refuses_a_mapped_dir_and_no_dir_without_showing_the_host_path() {
    let t = Tmp::new();
    let host = t.ws().to_string_lossy().into_owned();
    let cfg = SandboxConfig {
        backend: BackendChoice::Direct,
        ..wasm_config()
    };
    let sb = sandbox(
        vec![AllowedDirSpec::read_write(t.ws()).at("/data")],
        cfg.clone(),
    );
    let r = run(&sb, &["true"]).await;
    assert_eq!(r.outcome.kind, OutcomeKind::InvalidRequest, "{r:?}");
    assert!(r.outcome.message.contains("/data"), "{r:?}");
    assert!(r.outcome.message.contains("guest path"), "{r:?}");
    assert!(!r.outcome.message.contains(&host), "{r:?}");
    // The same sandbox runs the wasm guest there.
    let r = sb
        .run(RunRequest::new(["probe", "args"]).backend(BackendKind::Wasm))
        .await;
    assert!(r.success(), "{r:?}");
    // No dir: refused too; the unmapped twin runs.
    let sb = sandbox(vec![], cfg.clone());
    let r = run(&sb, &["true"]).await;
    assert_eq!(r.outcome.kind, OutcomeKind::InvalidRequest, "{r:?}");
    assert!(r.outcome.message.contains("needs an allowed dir"), "{r:?}");
    let sb = sandbox(vec![AllowedDirSpec::read_write(t.ws())], cfg);
    assert!(run(&sb, &["true"]).await.success());
}

#[tokio::test]
async fn no_outcome_shows_the_host_path_of_a_mapped_dir() {
    let t = Tmp::new();
    t.write("sub/f", "x");
    let host = t.root.to_string_lossy().into_owned();
    let sb = sandbox(
        vec![AllowedDirSpec::read_write(t.ws()).at("/data")],
        wasm_config(),
    );
    let calls = [
        RunRequest::new(["probe", "read", "/data/missing"]),
        RunRequest::new(["probe", "ls", "/data"]),
        RunRequest::new(["probe", "cwd"]).cwd("/data/sub"),
        RunRequest::new(["probe", "read", "f"]).cwd("/data/missing"),
        RunRequest::new(["/data/nope.wasm"]),
        RunRequest::new(["./sub/f"]).cwd("/data"),
        RunRequest::new(["probe", "read", "../../etc/passwd"]).cwd("/data/sub"),
    ];
    for req in calls {
        let r = sb.run(req.clone()).await;
        let all = format!("{} {} {}", r.stdout, r.stderr, r.outcome.message);
        assert!(!all.contains(&host), "{req:?} showed the host path: {r:?}");
    }
    // The listing names what is there, so the check above can fail.
    let r = probe(&sb, &["ls", "/data"], None).await;
    assert!(r.stdout.contains("sub"), "{r:?}");
}

#[test]
fn the_cli_takes_host_guest_dirs_and_no_dirs() {
    let t = Tmp::new();
    t.write("f", "via-cli");
    let tools = format!("[wasm]\ntool_dirs = [{:?}]\n", guests());
    std::fs::write(t.root.join("c.toml"), tools).unwrap();
    let spec = format!("{}::/", t.ws().display());
    let cfg = t.root.join("c.toml");
    let cfg = cfg.to_str().unwrap();
    let base = ["run", "--backend", "wasm", "--config", cfg];
    let out = toolhost(
        &t.root,
        &[
            &base[..],
            &["--allow-dir", &spec, "--", "probe", "preopens"],
        ]
        .concat(),
        &[],
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "3 / 0\nend 4 errno 8\n"
    );
    let out = toolhost(
        &t.root,
        &[
            &base[..],
            &["--allow-dir", &spec, "--", "probe", "read", "/f"],
        ]
        .concat(),
        &[],
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "via-cli");
    let ro = format!("{}::/:ro", t.ws().display());
    let out = toolhost(
        &t.root,
        &[
            &base[..],
            &["--allow-dir", &ro, "--", "probe", "write", "/g", "1"],
        ]
        .concat(),
        &[],
    );
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(!t.ws().join("g").exists());
    let out = toolhost(
        &t.root,
        &[&base[..], &["--no-dirs", "--", "probe", "preopens"]].concat(),
        &[],
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "end 3 errno 8\n");
    // A bad guest path is refused before anything runs (exit 125).
    let bad = format!("{}::rel", t.ws().display());
    let out = toolhost(
        &t.root,
        &[&base[..], &["--allow-dir", &bad, "--", "probe", "args"]].concat(),
        &[],
    );
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("not absolute"));
    // --no-dirs and --allow-dir do not go together.
    let out = toolhost(
        &t.root,
        &[
            &base[..],
            &["--no-dirs", "--allow-dir", &spec, "--", "probe"],
        ]
        .concat(),
        &[],
    );
    assert_ne!(out.status.code(), Some(0));
}
