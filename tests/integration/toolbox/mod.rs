//! The agent's tools (`Toolbox`): shell and file tools under policy, the
//! permission cap, the rate limit, WASI and typed tools, bad input. docs/src/attacks.md
//! cases marked F and 36-40, each next to its allowed twin.

use std::sync::Arc;
#[cfg(unix)]
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use toolhost::policy::{Capability, Level, PermissionPolicy};
use toolhost::tools::toolbox::{ToolKind, Toolbox};
use toolhost::{Sandbox, SandboxConfig};

use crate::util::*;

mod audit;

#[allow(unused_imports)]
pub(crate) use audit::*;

pub(super) fn cfg(allowed: &[&str]) -> SandboxConfig {
    let mut c = config();
    // Off here: these tests make many calls; attack_40 tests the limit.
    c.rate_limit_calls = 0;
    c.shell_allowed_binaries = allowed.iter().map(|s| s.to_string()).collect();
    c
}

pub(super) async fn toolbox(t: &Tmp, c: SandboxConfig) -> Toolbox {
    toolbox_with(t, c, PermissionPolicy::default()).await
}

pub(super) async fn toolbox_with(t: &Tmp, c: SandboxConfig, p: PermissionPolicy) -> Toolbox {
    let sb = Sandbox::new(
        [
            toolhost::AllowedDirSpec::read_write(t.ws()),
            toolhost::AllowedDirSpec::read_only(t.root.join("ro")),
        ],
        c,
    )
    .expect("sandbox");
    Toolbox::new(Arc::new(sb), p).await
}

pub(super) fn tmp() -> Tmp {
    let t = Tmp::new();
    std::fs::create_dir(t.root.join("ro")).unwrap();
    std::fs::write(t.root.join("ro/keep.txt"), "read-only\n").unwrap();
    std::fs::write(t.outside().join("secret"), CANARY).unwrap();
    t
}

#[tokio::test]
async fn lists_builtin_wasi_and_typed_tools_with_schemas() {
    let t = tmp();
    let tb = toolbox(&t, cfg(&[])).await;
    let tools = tb.tools();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    for n in [
        "shell",
        "file_read",
        "file_write",
        "file_list",
        "file_stat",
        "file_mkdir",
        "file_move",
        "file_delete",
        "file_search",
        "wc",
        "text-stats",
    ] {
        assert!(names.contains(&n), "{n} missing from {names:?}");
    }
    let find = |n: &str| tools.iter().find(|t| t.name == n).unwrap();
    assert_eq!(find("wc").kind, ToolKind::Command);
    assert_eq!(find("text-stats").kind, ToolKind::Typed);
    assert_eq!(find("shell").permission.level, Level::Dangerous);
    assert_eq!(find("file_read").permission.level, Level::Safe);
    assert_eq!(find("file_write").permission.level, Level::Cautious);
    for t in &tools {
        assert_eq!(t.input_schema["type"], "object", "{}", t.name);
    }
    // String mode off: the shell schema has no `command`.
    assert!(find("shell").input_schema["properties"]["command"].is_null());
}

// Unix only: runs native POSIX commands (sh, echo, true); the Windows CLI and direct are tested in windows.rs
#[cfg(unix)]
#[tokio::test]
async fn shell_policy_36_to_39_with_allowed_twins() {
    let t = tmp();
    // An empty allowlist: the tool says it is off and how to turn it on.
    let off = toolbox(&t, cfg(&[])).await;
    let r = off.call("shell", &json!({"args": ["echo", "hi"]})).await;
    assert!(
        r.is_error && r.rule.as_deref() == Some("shell.disabled"),
        "{r:?}"
    );
    assert!(r.text.contains("shell_allowed_binaries"), "{r:?}");

    let tb = toolbox(&t, cfg(&["echo", "cat", "curl", "sh", "env", "touch"])).await;
    let r = tb.call("shell", &json!({"args": ["echo", "hi"]})).await;
    assert_eq!((r.is_error, r.text.as_str()), (false, "hi\n[exit code: 0]"));
    let r = tb
        .call("shell", &json!({"args": ["cat"], "stdin": "from stdin"}))
        .await;
    assert_eq!(r.text, "from stdin\n[exit code: 0]");
    let r = tb
        .call("shell", &json!({"args": ["sh", "-c", "echo x"]}))
        .await;
    assert_eq!(r.rule.as_deref(), Some("shell.interpreter"), "{r:?}");
    // 36: paths and look-alikes for args[0].
    for program in [
        "/bin/echo",
        "./echo",
        "../bin/echo",
        "ｅｃｈｏ",
        "ec\u{200b}ho",
        "echo ",
    ] {
        let r = tb.call("shell", &json!({"args": [program, "x"]})).await;
        assert!(r.is_error && r.status == "denied", "{program:?}: {r:?}");
        assert!(r.run.is_none(), "{program:?} ran");
    }
    // 37: a wrapper runs only when allowlisted (env is; nice is not).
    let r = tb
        .call("shell", &json!({"args": ["nice", "echo", "x"]}))
        .await;
    assert_eq!(r.rule.as_deref(), Some("shell.allowlist"), "{r:?}");
    let r = tb
        .call("shell", &json!({"args": ["env", "echo", "via-env"]}))
        .await;
    assert!(r.text.starts_with("via-env"), "{r:?}");
    // 38: string mode is off here: `command` is refused outright.
    let r = tb.call("shell", &json!({"command": "echo hi"})).await;
    assert!(r.is_error && r.status == "invalid_request", "{r:?}");
    // 39: an allowlisted network client while the network is off.
    let r = tb
        .call("shell", &json!({"args": ["curl", "http://127.0.0.1:9"]}))
        .await;
    assert_eq!(r.rule.as_deref(), Some("shell.network_binary"), "{r:?}");
    // A failing program is an error result with its exit code.
    let r = tb.call("shell", &json!({"args": ["cat", "missing"]})).await;
    assert!(
        r.is_error && r.text.contains("[stderr]") && r.text.ends_with("[exit code: 1]"),
        "{r:?}"
    );
    // A program that is not there.
    let mut c = cfg(&["no-such-program-x"]);
    c.timeout = Duration::from_secs(5);
    let r = toolbox(&t, c)
        .await
        .call("shell", &json!({"args": ["no-such-program-x"]}))
        .await;
    assert_eq!(r.status, "not_found", "{r:?}");
}

// Unix only: runs native POSIX commands (sh, echo, true); the Windows CLI and direct are tested in windows.rs
#[cfg(unix)]
#[tokio::test]
async fn string_mode_38_refuses_metacharacters() {
    let t = tmp();
    let mut c = cfg(&["echo", "touch", "sh"]);
    c.shell_allow_strings = true;
    let tb = toolbox(&t, c).await;
    let r = tb
        .call("shell", &json!({"command": "echo 'two words' x"}))
        .await;
    assert_eq!(r.text, "two words x\n[exit code: 0]", "{r:?}");
    let canary = t.ws().join("pwned");
    for bad in [
        "echo a; touch pwned",
        "echo a && touch pwned",
        "echo a | touch pwned",
        "echo $(touch pwned)",
        "echo `touch pwned`",
        "echo a > pwned",
        "echo a\ntouch pwned",
    ] {
        let r = tb.call("shell", &json!({"command": bad})).await;
        assert_eq!(
            r.rule.as_deref(),
            Some("shell.metacharacter"),
            "{bad:?}: {r:?}"
        );
    }
    assert!(!canary.exists());
    // The allowed twin: touch itself runs.
    let r = tb.call("shell", &json!({"command": "touch pwned"})).await;
    assert!(!r.is_error, "{r:?}");
    assert!(canary.exists());
    // Interpreters are allowed in string mode (when allowlisted).
    let r = tb
        .call("shell", &json!({"args": ["sh", "-c", "echo in-sh"]}))
        .await;
    assert!(r.text.starts_with("in-sh"), "{r:?}");
}

#[tokio::test]
async fn file_tools_read_write_and_the_write_policy() {
    let t = tmp();
    let mut c = cfg(&[]);
    c.max_file_size_mb = 1;
    let tb = toolbox(&t, c).await;
    let r = tb
        .call(
            "file_write",
            &json!({"path": "a/b/notes.txt", "content": "one\ntwo\nthree\n"}),
        )
        .await;
    assert!(!r.is_error, "{r:?}");
    let r = tb
        .call("file_read", &json!({"path": "a/b/notes.txt"}))
        .await;
    assert_eq!(r.text, "one\ntwo\nthree\n");
    let r = tb
        .call(
            "file_read",
            &json!({"path": "a/b/notes.txt", "offset": 1, "limit": 1}),
        )
        .await;
    assert_eq!(r.text, "two\n");
    let r = tb
        .call(
            "file_write",
            &json!({"path": "a/b/notes.txt", "content": "four\n", "append": true}),
        )
        .await;
    assert!(!r.is_error, "{r:?}");
    assert_eq!(
        std::fs::read_to_string(t.ws().join("a/b/notes.txt")).unwrap(),
        "one\ntwo\nthree\nfour\n"
    );
    // Atomic replace leaves no temporary file behind.
    let r = tb
        .call(
            "file_write",
            &json!({"path": "a/b/notes.txt", "content": "new"}),
        )
        .await;
    assert!(!r.is_error);
    let names: Vec<_> = std::fs::read_dir(t.ws().join("a/b")).unwrap().collect();
    assert_eq!(names.len(), 1, "{names:?}");
    // The extension denylist, on the final name, any case.
    for bad in ["run.sh", "RUN.SH", "x.txt.exe", "lib.so"] {
        let r = tb
            .call("file_write", &json!({"path": bad, "content": "x"}))
            .await;
        assert_eq!(r.rule.as_deref(), Some("write.extension"), "{bad}: {r:?}");
        assert!(!t.ws().join(bad).exists());
    }
    let r = tb
        .call("file_write", &json!({"path": "x.sh.txt", "content": "x"}))
        .await;
    assert!(!r.is_error, "{r:?}");
    // Renaming onto a denied extension is a write too.
    let r = tb
        .call("file_move", &json!({"from": "x.sh.txt", "to": "x.sh"}))
        .await;
    assert_eq!(r.rule.as_deref(), Some("write.extension"), "{r:?}");
    // The size cap, for a write and for an append that would pass it.
    let big = "x".repeat((1 << 20) + 1);
    let r = tb
        .call("file_write", &json!({"path": "big.txt", "content": big}))
        .await;
    assert_eq!(r.status, "too_large", "{r:?}");
    let r = tb
        .call(
            "file_write",
            &json!({"path": "big.txt", "content": "x".repeat(1 << 20)}),
        )
        .await;
    assert!(!r.is_error, "{r:?}");
    let r = tb
        .call(
            "file_write",
            &json!({"path": "big.txt", "content": "y", "append": true}),
        )
        .await;
    assert_eq!(r.status, "too_large", "{r:?}");
    // A read-only allowed dir: read yes, write/delete/move no (file unchanged).
    let ro = t.root.join("ro/keep.txt");
    let before = sha256_file(&ro);
    let ro_path = ro.to_str().unwrap();
    let r = tb.call("file_read", &json!({"path": ro_path})).await;
    assert_eq!(r.text, "read-only\n");
    for (tool, args) in [
        ("file_write", json!({"path": ro_path, "content": "x"})),
        (
            "file_write",
            json!({"path": ro_path, "content": "x", "append": true}),
        ),
        ("file_delete", json!({"path": ro_path})),
        ("file_move", json!({"from": ro_path, "to": "stolen.txt"})),
    ] {
        let r = tb.call(tool, &args).await;
        assert_eq!(r.status, "denied", "{tool}: {r:?}");
        assert_eq!(
            r.rule.as_deref(),
            Some("sandbox.read_only"),
            "{tool}: {r:?}"
        );
    }
    assert_eq!(sha256_file(&ro), before);
    // Binary files are reported, not returned.
    std::fs::write(t.ws().join("bin.dat"), b"\x7fELF\0\0\x01").unwrap();
    let r = tb.call("file_read", &json!({"path": "bin.dat"})).await;
    assert!(r.text.starts_with("[binary file"), "{r:?}");
}

// Unix only: Unix symlinks; the Windows cases are in windows.rs
#[cfg(unix)]
#[tokio::test]
async fn file_tools_never_leave_the_sandbox() {
    let t = tmp();
    let tb = toolbox(&t, cfg(&[])).await;
    let secret = t.outside().join("secret");
    let before = sha256_file(&secret);
    std::os::unix::fs::symlink(t.outside(), t.ws().join("l")).unwrap();
    std::os::unix::fs::symlink(&secret, t.ws().join("ls")).unwrap();
    let evil = format!("{}-evil/x", t.ws().display());
    let outside = secret.to_str().unwrap().to_string();
    // 1, 2, 3, 6, 7: every form of escape, for every file tool.
    for path in [
        "../outside/secret",
        "a/../../outside/secret",
        outside.as_str(),
        "file:///etc/passwd",
        "l/secret",
        "l/",
        "l/.",
        "ls",
        evil.as_str(),
    ] {
        for (tool, args) in [
            ("file_read", json!({"path": path})),
            ("file_write", json!({"path": path, "content": "pwned"})),
            (
                "file_write",
                json!({"path": path, "content": "pwned", "append": true}),
            ),
            ("file_list", json!({"path": path})),
            ("file_stat", json!({"path": path})),
            ("file_delete", json!({"path": path, "recursive": true})),
            ("file_move", json!({"from": path, "to": "moved"})),
            ("file_move", json!({"from": "moved-src", "to": path})),
            ("file_search", json!({"path": path, "text": "CANARY"})),
        ] {
            let r = tb.call(tool, &args).await;
            assert!(!r.text.contains(CANARY), "{tool} {path}: leaked: {r:?}");
            // `ls` names a link in the workspace: stat, delete and move act
            // on the link itself (inside), not on its target.
            let on_link = path == "ls" && matches!(tool, "file_stat" | "file_delete" | "file_move");
            if tool != "file_stat" && !on_link {
                assert!(r.is_error, "{tool} {path}: {r:?}");
            }
        }
    }
    assert_eq!(sha256_file(&secret), before, "the outside file changed");
    // Deleting the links removed the links only.
    assert!(secret.exists());
    // Allowed twins: the same tools inside work.
    std::fs::write(t.ws().join("inside.txt"), "inside\n").unwrap();
    let r = tb.call("file_read", &json!({"path": "inside.txt"})).await;
    assert_eq!(r.text, "inside\n");
    let r = tb.call("file_search", &json!({"text": "inside"})).await;
    assert_eq!(r.text, "inside.txt:1: inside", "{r:?}");
    let r = tb.call("file_search", &json!({"glob": "*.txt"})).await;
    assert_eq!(r.text, "inside.txt", "{r:?}");
    let r = tb.call("file_mkdir", &json!({"path": "d/e"})).await;
    assert!(!r.is_error);
    let r = tb
        .call(
            "file_move",
            &json!({"from": "inside.txt", "to": "d/e/moved.txt"}),
        )
        .await;
    assert!(!r.is_error, "{r:?}");
    let r = tb.call("file_list", &json!({"recursive": true})).await;
    assert!(r.text.contains("d/e/moved.txt\t7"), "{r:?}");
    let r = tb
        .call("file_stat", &json!({"path": "d/e/moved.txt"}))
        .await;
    assert_eq!(r.structured.as_ref().unwrap()["size"], 7, "{r:?}");
    let r = tb.call("file_delete", &json!({"path": "d"})).await;
    assert!(r.is_error, "a non-empty dir needs recursive: {r:?}");
    let r = tb
        .call("file_delete", &json!({"path": "d", "recursive": true}))
        .await;
    assert!(!r.is_error && !t.ws().join("d").exists(), "{r:?}");
}

// Unix only: Unix symlinks
#[cfg(unix)]
/// 5: another thread swaps a directory for a symlink to the outside while
/// file_write and file_read run; nothing outside is read or written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attack_05_swap_race_through_the_file_tools() {
    let t = tmp();
    let tb = toolbox(&t, cfg(&[])).await;
    let secret = t.outside().join("f");
    std::fs::write(&secret, CANARY).unwrap();
    let before = sha256_file(&secret);
    let listing = || {
        let mut v: Vec<_> = std::fs::read_dir(t.outside())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        v.sort();
        v
    };
    let files_before = listing();
    std::fs::create_dir(t.ws().join("real")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (stop, ws, outside) = (stop.clone(), t.ws(), t.outside());
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let link = ws.join("d.link");
                let _ = std::fs::remove_file(&link);
                let target = if swaps.is_multiple_of(2) {
                    outside.clone()
                } else {
                    "real".into()
                };
                let _ = std::os::unix::fs::symlink(&target, &link);
                let _ = std::fs::rename(&link, ws.join("d"));
                swaps += 1;
            }
            swaps
        })
    };
    let (mut writes, mut reads) = (0, 0);
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while std::time::Instant::now() < deadline || writes == 0 || reads == 0 {
        let w = tb
            .call("file_write", &json!({"path": "d/f", "content": "inside"}))
            .await;
        writes += usize::from(!w.is_error);
        let r = tb.call("file_read", &json!({"path": "d/f"})).await;
        assert!(!r.text.contains(CANARY), "read outside: {r:?}");
        reads += usize::from(!r.is_error);
        if std::time::Instant::now() > deadline + Duration::from_secs(60) {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    assert!(swaps > 100, "the race did not run ({swaps})");
    assert!(writes > 0 && reads > 0, "writes {writes}, reads {reads}");
    assert_eq!(sha256_file(&secret), before, "the outside file changed");
    assert_eq!(listing(), files_before, "files appeared outside");
}

#[tokio::test]
async fn permissions_cap_the_level_and_block_capabilities() {
    let t = tmp();
    let capped = toolbox_with(
        &t,
        cfg(&["echo"]),
        PermissionPolicy {
            max_level: Level::Safe,
            blocked: vec![],
        },
    )
    .await;
    let r = capped
        .call("file_write", &json!({"path": "x.txt", "content": "x"}))
        .await;
    assert_eq!(r.rule.as_deref(), Some("permission.level"), "{r:?}");
    assert!(!t.ws().join("x.txt").exists());
    let r = capped.call("shell", &json!({"args": ["echo", "x"]})).await;
    assert_eq!(r.rule.as_deref(), Some("permission.level"), "{r:?}");
    std::fs::write(t.ws().join("y.txt"), "y").unwrap();
    let r = capped.call("file_read", &json!({"path": "y.txt"})).await;
    assert_eq!(r.text, "y", "{r:?}");
    assert_eq!(capped.denials(), 2);
    let no_shell = toolbox_with(
        &t,
        cfg(&["echo"]),
        PermissionPolicy {
            max_level: Level::Dangerous,
            blocked: vec![Capability::Shell],
        },
    )
    .await;
    let r = no_shell
        .call("shell", &json!({"args": ["echo", "x"]}))
        .await;
    assert_eq!(
        r.rule.as_deref(),
        Some("permission.capability.shell"),
        "{r:?}"
    );
    let r = no_shell
        .call("file_write", &json!({"path": "x.txt", "content": "x"}))
        .await;
    assert!(!r.is_error, "{r:?}");
}

// Unix only: runs native POSIX commands (sh, echo, true); the Windows CLI and direct are tested in windows.rs
#[cfg(unix)]
#[tokio::test]
async fn bad_input_is_a_clear_error_and_the_session_goes_on() {
    let t = tmp();
    let tb = toolbox(&t, cfg(&["echo"])).await;
    let cases: Vec<(&str, Value, &str)> = vec![
        ("file_read", json!("not an object"), "must be a JSON object"),
        ("file_read", json!({}), "is required"),
        ("file_read", json!({"path": 7}), "must be a string"),
        (
            "file_read",
            json!({"path": "x", "offset": -1}),
            "non-negative integer",
        ),
        (
            "file_read",
            json!({"path": "x", "bogus": 1}),
            "unknown argument",
        ),
        (
            "file_write",
            json!({"path": "x", "content": ["a"]}),
            "must be a string",
        ),
        (
            "file_write",
            json!({"path": "x", "content": "a", "append": "yes"}),
            "true or false",
        ),
        ("shell", json!({"args": "echo hi"}), "list of strings"),
        ("shell", json!({"args": ["echo", 1]}), "list of strings"),
        ("shell", json!({}), "required"),
        ("file_read", json!({"path": "a\u{0}b"}), "NUL"),
        ("file_read", json!({"path": ""}), "empty"),
        ("nope", json!({}), "unknown tool"),
    ];
    for (tool, args, want) in cases {
        let r = tb.call(tool, &args).await;
        assert!(r.is_error, "{tool} {args}: {r:?}");
        assert!(r.text.contains(want), "{tool} {args}: {r:?}");
    }
    let long = "a/".repeat(5000) + "x";
    let r = tb.call("file_read", &json!({"path": long})).await;
    assert!(r.is_error, "{r:?}");
    let r = tb.call("shell", &json!({"args": vec!["echo"; 5000]})).await;
    assert!(r.is_error && r.text.contains("at most"), "{r:?}");
    // Still working.
    let r = tb.call("shell", &json!({"args": ["echo", "alive"]})).await;
    assert_eq!(r.text, "alive\n[exit code: 0]");
}

#[tokio::test]
async fn wasi_and_typed_tools_are_tools() {
    let t = tmp();
    let tb = toolbox(&t, cfg(&[])).await;
    let r = tb
        .call("wc", &json!({"args": ["-l"], "stdin": "a\nb\nc\n"}))
        .await;
    assert!(!r.is_error, "{r:?}");
    assert_eq!(r.text.split_whitespace().next(), Some("3"), "{r:?}");
    let r = tb
        .call("text-stats", &json!({"text": "two words\nand more"}))
        .await;
    assert!(!r.is_error, "{r:?}");
    assert_eq!(r.structured.as_ref().unwrap()["words"], 4, "{r:?}");
    let r = tb.call("text-stats", &json!({"wrong": 1})).await;
    assert!(r.is_error, "{r:?}");
}

// Unix only: Unix modes and FIFOs
/// A NUL in a change's final name is refused, whatever follows it, and the
/// file named before it is not touched (found by review: on Windows a wide
/// string cut at the NUL made `victim.txt\0x` delete `victim.txt`). The
/// allowed twin deletes it by its own name.
#[tokio::test]
async fn a_nul_in_a_final_name_changes_nothing() {
    let t = tmp();
    let tb = toolbox(&t, cfg(&[])).await;
    t.write("victim.txt", "keep");
    t.write("other", "other");
    for (tool, args) in [
        ("file_delete", json!({"path": "victim.txt\u{0}x"})),
        (
            "file_write",
            json!({"path": "victim.txt\u{0}x", "content": "PWNED"}),
        ),
        (
            "file_move",
            json!({"from": "victim.txt\u{0}x", "to": "moved"}),
        ),
        (
            "file_move",
            json!({"from": "other", "to": "victim.txt\u{0}x", "overwrite": true}),
        ),
        ("file_mkdir", json!({"path": "victim.txt\u{0}x"})),
    ] {
        let r = tb.call(tool, &args).await;
        assert!(r.is_error && r.text.contains("NUL"), "{tool} {args}: {r:?}");
        assert_eq!(
            std::fs::read_to_string(t.ws().join("victim.txt")).unwrap(),
            "keep",
            "{tool} {args}"
        );
    }
    assert!(t.ws().join("other").exists() && !t.ws().join("moved").exists());
    let r = tb.call("file_delete", &json!({"path": "victim.txt"})).await;
    assert!(!r.is_error, "{r:?}");
    assert!(!t.ws().join("victim.txt").exists());
}

#[cfg(unix)]
/// From a review of the file tools: nested read-only dirs, symlinks at the
/// final name, FIFOs, deep trees, long names, modes, long globs.
#[tokio::test]
async fn file_tools_review_findings() {
    let t = tmp();
    // A read-only dir nested in the read-write workspace.
    let ro = t.ws().join("p/ro");
    std::fs::create_dir_all(&ro).unwrap();
    std::fs::write(ro.join("keep.txt"), "keep\n").unwrap();
    let before = sha256_file(&ro.join("keep.txt"));
    let sb = Sandbox::new(
        [
            toolhost::AllowedDirSpec::read_write(t.ws()),
            toolhost::AllowedDirSpec::read_only(&ro),
        ],
        cfg(&[]),
    )
    .unwrap();
    let tb = Toolbox::new(Arc::new(sb), PermissionPolicy::default()).await;
    for (tool, args) in [
        ("file_delete", json!({"path": "p", "recursive": true})),
        ("file_move", json!({"from": "p", "to": "q"})),
        ("file_move", json!({"from": "p/ro", "to": "q"})),
        ("file_delete", json!({"path": "p/ro", "recursive": true})),
        (
            "file_write",
            json!({"path": "p/ro/keep.txt", "content": "x"}),
        ),
        (
            "file_write",
            json!({"path": "p/ro/new.txt", "content": "x"}),
        ),
    ] {
        let r = tb.call(tool, &args).await;
        assert_eq!(r.status, "denied", "{tool} {args}: {r:?}");
        assert_eq!(r.rule.as_deref(), Some("sandbox.read_only"), "{r:?}");
    }
    assert_eq!(sha256_file(&ro.join("keep.txt")), before);
    assert!(!ro.join("new.txt").exists());
    // Allowed twin: a sibling of the read-only dir moves and goes.
    std::fs::write(t.ws().join("p/other.txt"), "o").unwrap();
    let r = tb
        .call("file_move", &json!({"from": "p/other.txt", "to": "o.txt"}))
        .await;
    assert!(!r.is_error, "{r:?}");
    // A symlink at the final name is the link, not its target.
    std::fs::write(t.ws().join("target.txt"), "target\n").unwrap();
    std::os::unix::fs::symlink("target.txt", t.ws().join("link")).unwrap();
    let r = tb.call("file_stat", &json!({"path": "link"})).await;
    assert_eq!(r.structured.as_ref().unwrap()["type"], "symlink", "{r:?}");
    let r = tb.call("file_read", &json!({"path": "link"})).await;
    assert_eq!(r.text, "target\n", "reads follow links inside");
    let r = tb
        .call(
            "file_write",
            &json!({"path": "link", "content": "x", "append": true}),
        )
        .await;
    assert!(r.is_error, "append through a link: {r:?}");
    let r = tb.call("file_delete", &json!({"path": "link"})).await;
    assert!(!r.is_error, "{r:?}");
    assert!(t.ws().join("target.txt").exists(), "the target survived");
    assert!(std::fs::symlink_metadata(t.ws().join("link")).is_err());
    // A FIFO: an error, not a hang.
    let fifo = t.ws().join("pipe");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo on a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    for args in [
        json!({"path": "pipe"}),
        json!({"path": "pipe", "content": "x", "append": true}),
    ] {
        let tool = if args.get("content").is_some() {
            "file_write"
        } else {
            "file_read"
        };
        let r = tokio::time::timeout(Duration::from_secs(20), tb.call(tool, &args))
            .await
            .expect("a FIFO blocked the call");
        assert!(r.is_error, "{r:?}");
    }
    // A deep tree: bounded, no crash.
    let deep = t.ws().join(["d"; 100].join("/"));
    std::fs::create_dir_all(&deep).unwrap();
    std::fs::write(deep.join("bottom.txt"), "x").unwrap();
    let r = tb.call("file_search", &json!({"glob": "*.txt"})).await;
    assert!(r.text.contains("deeper than 64"), "{r:?}");
    let r = tb.call("file_list", &json!({"recursive": true})).await;
    assert!(r.text.contains("deeper than 64"), "{r:?}");
    // A long name fits (the temporary name is short); a mode is kept.
    let long = "n".repeat(240) + ".txt";
    let r = tb
        .call("file_write", &json!({"path": long, "content": "a"}))
        .await;
    assert!(!r.is_error, "{r:?}");
    let r = tb
        .call("file_write", &json!({"path": long, "content": "b"}))
        .await;
    assert!(!r.is_error, "{r:?}");
    let secret = t.ws().join("private.txt");
    std::fs::write(&secret, "s").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let r = tb
        .call(
            "file_write",
            &json!({"path": "private.txt", "content": "t"}),
        )
        .await;
    assert!(!r.is_error, "{r:?}");
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(&secret).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // A refused name creates no parent dirs.
    let r = tb
        .call(
            "file_write",
            &json!({"path": "newdir/deeper/run.sh", "content": "x"}),
        )
        .await;
    assert_eq!(r.rule.as_deref(), Some("write.extension"));
    assert!(!t.ws().join("newdir").exists());
    let r = tb
        .call("file_search", &json!({"glob": "[".repeat(600)}))
        .await;
    assert!(r.is_error && r.text.contains("longer than"), "{r:?}");
}
