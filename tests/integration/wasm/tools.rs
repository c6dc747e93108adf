//! The built-in tools against coreutils, the compile cache, `toolhost tools`.

use super::*;

/// Runs the same command natively and as the built-in wasm tool, in the same
/// workspace, and compares stdout and exit code.
pub(super) async fn same_as_native(t: &Tmp, native: &Sandbox, wasm: &Sandbox, argv: &[&str]) {
    let n = run(native, argv).await;
    let w = run(wasm, argv).await;
    assert_eq!(w.backend, BackendKind::Wasm);
    assert_eq!(
        (w.stdout.as_str(), w.returncode),
        (n.stdout.as_str(), n.returncode),
        "{argv:?} in {}\nwasm stderr: {}",
        t.ws().display(),
        w.stderr
    );
}

// Unix only: compares with native coreutils; windows.rs checks the built-ins' output on Windows
#[cfg(unix)]
#[tokio::test]
async fn guest_tools_match_coreutils_on_fixtures() {
    let (t, wasm) = setup(wasm_config());
    std::fs::remove_file(t.ws().join("probe.wasm")).unwrap();
    let native = t.sandbox(config());
    t.write("a.txt", "banana\napple\ncherry\napple\n\nDate 10\ndate 9\n");
    t.write("b.txt", "banana\napricot\ncherry\napple\n");
    t.write("nums", "10\n9\n100\n-3\n2.5\n");
    t.write("dir/one.rs", "fn main() {}\n// TODO: x\n");
    t.write("dir/sub/two.rs", "todo later\nTODO now\n");
    t.write("dir/sub/three.txt", "nothing\n");
    t.write("dups", "a\na\nb\nc\nc\nc\na\n");
    t.write("noeol", "no newline at end");
    // Over two of the tools' first read buffers (16 KiB, doubled after each
    // full read): a read that fills one, then a larger one.
    let mid: String = (0..4000).map(|i| format!("line {i:05}\n")).collect();
    assert!(mid.len() > 2 * 16 * 1024 && mid.len() < 3 * 16 * 1024);
    t.write("mid", &mid);
    let encoded = std::process::Command::new("base64")
        .arg(t.ws().join("mid"))
        .output()
        .unwrap();
    assert!(encoded.status.success());
    t.write("mid.b64", std::str::from_utf8(&encoded.stdout).unwrap());
    // One line changed past the first buffer.
    t.write("mid2", &mid.replace("line 03500\n", "line 3500\n"));
    let cases: &[&[&str]] = &[
        &["cat", "a.txt", "b.txt"],
        &["cat", "-n", "a.txt"],
        &["cat", "missing"],
        &["head", "-n", "3", "a.txt"],
        &["head", "-c", "5", "a.txt"],
        &["head", "a.txt", "b.txt"],
        &["tail", "-n", "2", "a.txt"],
        &["tail", "-n", "1", "noeol"],
        &["tail", "-c", "4", "a.txt"],
        &["wc", "-l", "a.txt"],
        &["wc", "-w", "a.txt"],
        &["wc", "-c", "a.txt"],
        &["grep", "apple", "a.txt"],
        &["grep", "-n", "-i", "date", "a.txt"],
        &["grep", "-c", "a", "a.txt"],
        &["grep", "-v", "a", "a.txt"],
        &[
            "grep",
            "-l",
            "TODO",
            "dir/one.rs",
            "dir/sub/two.rs",
            "dir/sub/three.txt",
        ],
        &["grep", "nomatch", "a.txt"],
        &["grep", "x", "missing"],
        &["sha256sum", "a.txt", "b.txt"],
        &["sort", "a.txt"],
        &["sort", "-r", "b.txt"],
        &["sort", "-u", "a.txt"],
        &["uniq", "dups"],
        &["uniq", "-c", "dups"],
        &["uniq", "-d", "dups"],
        &["base64", "a.txt"],
        &["cat", "-n", "mid"],
        &["head", "-c", "20000", "mid"],
        &["tail", "-n", "3000", "mid"],
        &["wc", "mid"],
        &["sha256sum", "mid"],
        &["sort", "-r", "mid"],
        &["base64", "mid"],
        &["base64", "-d", "mid.b64"],
    ];
    for argv in cases {
        same_as_native(&t, &native, &wasm, argv).await;
    }
    // GNU find lists in directory order; ours sorts by name. Same set of paths.
    for argv in [
        &["find", "dir", "-name", "*.rs"][..],
        &["find", "dir", "-type", "d"][..],
    ] {
        let sorted = |s: &str| {
            let mut v: Vec<String> = s.lines().map(str::to_string).collect();
            v.sort();
            v
        };
        let (n, w) = (run(&native, argv).await, run(&wasm, argv).await);
        assert_eq!(sorted(&w.stdout), sorted(&n.stdout), "{argv:?}");
        assert_eq!(w.returncode, Some(0));
    }
    // jq: a subset of jq, checked against the outputs jq gives for these filters.
    t.write(
        "j.json",
        r#"{"a":[{"n":1,"name":"x"},{"n":5,"name":"y"}],"b":"s","c":null}"#,
    );
    let jq_cases: &[(&[&str], &str)] = &[
        (&["jq", ".b", "j.json"], "\"s\"\n"),
        (
            &["jq", "-r", ".a[] | select(.n > 2) | .name", "j.json"],
            "y\n",
        ),
        (
            &[
                "jq",
                "-c",
                "{b, total: (.a | map(.n) | add), names: [.a[].name]}",
                "j.json",
            ],
            "{\"b\":\"s\",\"total\":6,\"names\":[\"x\",\"y\"]}\n",
        ),
        (&["jq", "-c", "keys", "j.json"], "[\"a\",\"b\",\"c\"]\n"),
        (&["jq", ".a | length", "j.json"], "2\n"),
        (&["jq", ".c // \"default\"", "j.json"], "\"default\"\n"),
        (
            &["jq", "-c", ".a[0]", "j.json"],
            "{\"n\":1,\"name\":\"x\"}\n",
        ),
        (
            &["jq", ".a[0]", "j.json"],
            "{\n  \"n\": 1,\n  \"name\": \"x\"\n}\n",
        ),
        (
            &["jq", "-r", ".a | map(.name) | join(\",\")", "j.json"],
            "x,y\n",
        ),
    ];
    for (argv, want) in jq_cases {
        let r = run(&wasm, argv).await;
        assert_eq!(r.stdout, *want, "{argv:?}: {r:?}");
    }
    let r = run(&wasm, &["jq", ".b.c", "j.json"]).await;
    assert_eq!(r.returncode, Some(5), "{r:?}");
    assert!(r.stderr.contains("Cannot index string"), "{r:?}");
    let r = run(&wasm, &["jq", ".[", "j.json"]).await;
    assert_eq!(r.returncode, Some(3), "{r:?}");
    // Sorting numbers, C-locale collation and unified diffs differ in small ways
    // between implementations; check the exact expected output instead.
    let r = run(&wasm, &["sort", "-n", "nums"]).await;
    assert_eq!(r.stdout, "-3\n2.5\n9\n10\n100\n");
    let r = run(&wasm, &["grep", "-r", "-n", "TODO", "dir"]).await;
    assert_eq!(
        r.stdout,
        "dir/one.rs:2:// TODO: x\ndir/sub/two.rs:2:TODO now\n"
    );
    let r = run(&wasm, &["diff", "-u", "a.txt", "b.txt"]).await;
    assert_eq!(r.returncode, Some(1));
    assert!(
        r.stdout.starts_with("--- a.txt\n+++ b.txt\n@@ -1,"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("-apple\n-cherry\n") || r.stdout.contains("+apricot\n"),
        "{}",
        r.stdout
    );
    let r = run(&wasm, &["diff", "a.txt", "a.txt"]).await;
    assert_eq!((r.returncode, r.stdout.as_str()), (Some(0), ""));
    // Past the first read buffer: the same hunk as GNU's (whose header
    // lines carry times).
    let r = run(&wasm, &["diff", "-u", "mid", "mid2"]).await;
    let n = run(&native, &["diff", "-u", "mid", "mid2"]).await;
    let hunks = |s: &str| s.lines().skip(2).collect::<Vec<_>>().join("\n");
    assert_eq!(r.returncode, Some(1), "{}", r.stderr);
    assert_eq!(n.returncode, Some(1));
    assert!(
        r.stdout.starts_with("--- mid\n+++ mid2\n@@ -3498,"),
        "{}",
        r.stdout
    );
    assert_eq!(hunks(&r.stdout), hunks(&n.stdout));
    // Standard input against itself is the same, and against a file is read.
    let r = wasm
        .run(RunRequest::new(["diff", "-", "-"]).stdin("x\n"))
        .await;
    assert_eq!((r.returncode, r.stdout.as_str()), (Some(0), ""), "{r:?}");
    let a = std::fs::read_to_string(t.ws().join("a.txt")).unwrap();
    let r = wasm
        .run(RunRequest::new(["diff", "-", "a.txt"]).stdin(a.clone()))
        .await;
    assert_eq!((r.returncode, r.stdout.as_str()), (Some(0), ""), "{r:?}");
    let r = wasm
        .run(RunRequest::new(["diff", "-", "a.txt"]).stdin(a + "more\n"))
        .await;
    assert_eq!(r.returncode, Some(1), "{r:?}");
    assert!(r.stdout.contains("\n-more\n"), "{}", r.stdout);
    let r = wasm
        .run(RunRequest::new(["base64", "-d"]).stdin("aGVsbG8gd29ybGQ=\n"))
        .await;
    assert_eq!(r.stdout, "hello world");
    let r = run(&wasm, &["ls", "dir"]).await;
    assert_eq!(r.stdout, "one.rs\nsub\n");
    let r = run(&wasm, &["tree", "dir"]).await;
    assert_eq!(
        r.stdout,
        "dir\n|-- one.rs\n`-- sub\n    |-- three.txt\n    `-- two.rs\n\n1 directory, 3 files\n"
    );
    for tool in [
        "cat",
        "head",
        "tail",
        "wc",
        "ls",
        "grep",
        "find",
        "sha256sum",
        "sort",
        "uniq",
        "diff",
        "base64",
        "tree",
    ] {
        let r = run(&wasm, &[tool, "--help"]).await;
        assert!(
            r.success() && r.stdout.starts_with("Usage: "),
            "{tool} --help: {r:?}"
        );
    }
}

/// The disk cache's checks, through the CLI with the optimized compile in
/// the call (`baseline_compile = false`; the hand-off of a baseline call's
/// compile is `a_cold_cli_call_leaves_optimized_code_in_the_cache`).
#[test]
fn compile_cache_is_reused_and_corruption_is_recompiled() {
    builtin_tools_built();
    let t = Tmp::new();
    t.write("a.txt", "x\ny\n");
    let cache = t.root.join("cache");
    std::fs::write(
        t.root.join("cfg.toml"),
        format!(
            "[wasm]\ncache_dir = {:?}\nbaseline_compile = false\n",
            cache.to_str().unwrap()
        ),
    )
    .unwrap();
    let cfg = t.root.join("cfg.toml");
    let run_tool = |tool: &[&str]| {
        let mut args = vec![
            "run",
            "--config",
            cfg.to_str().unwrap(),
            "--backend",
            "wasm",
            "--",
        ];
        args.extend_from_slice(tool);
        toolhost(&t.ws(), &args, &[("TOOLHOST_LOG", "toolhost=debug")])
    };
    let run_wc = || run_tool(&["wc", "-l", "a.txt"]);
    let first = run_wc();
    assert_eq!(String::from_utf8_lossy(&first.stdout), "2 a.txt\n");
    assert!(
        String::from_utf8_lossy(&first.stderr).contains("compiled"),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let entries: Vec<PathBuf> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    // A second process (a second Engine) loads the entry.
    let second = run_wc();
    assert_eq!(String::from_utf8_lossy(&second.stdout), "2 a.txt\n");
    assert!(
        String::from_utf8_lossy(&second.stderr).contains("from the disk cache"),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    // Corrupt it: flip bytes in the middle. It is refused and recompiled.
    let mut data = std::fs::read(&entries[0]).unwrap();
    let mid = data.len() / 2;
    for b in &mut data[mid..mid + 64] {
        *b ^= 0xff;
    }
    std::fs::write(&entries[0], &data).unwrap();
    let third = run_wc();
    assert_eq!(String::from_utf8_lossy(&third.stdout), "2 a.txt\n");
    let err = String::from_utf8_lossy(&third.stderr);
    assert!(err.contains("corrupt") && err.contains("compiled"), "{err}");
    // Truncated to its header: same.
    std::fs::write(&entries[0], b"THCWASM1").unwrap();
    let fourth = run_wc();
    assert_eq!(String::from_utf8_lossy(&fourth.stdout), "2 a.txt\n");
    // And the rewritten entry is valid again.
    let fifth = run_wc();
    assert!(String::from_utf8_lossy(&fifth.stderr).contains("from the disk cache"));
    // Attack 41: another module's entry (cat's), valid in every byte, copied
    // under wc's entry name. wc's call must run wc's code: the entry carries
    // the hash of the wasm it came from, and is recompiled.
    let run_cat = || run_tool(&["cat", "a.txt"]);
    let cat = run_cat();
    assert_eq!(String::from_utf8_lossy(&cat.stdout), "x\ny\n");
    let cat_entry: Vec<PathBuf> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| *p != entries[0])
        .collect();
    assert_eq!(cat_entry.len(), 1, "{cat_entry:?}");
    let cat_bytes = std::fs::read(&cat_entry[0]).unwrap();
    std::fs::write(&entries[0], &cat_bytes).unwrap();
    let sixth = run_wc();
    assert_eq!(String::from_utf8_lossy(&sixth.stdout), "2 a.txt\n");
    let err = String::from_utf8_lossy(&sixth.stderr);
    assert!(
        err.contains("is foreign") && err.contains("compiled"),
        "{err}"
    );
    assert_ne!(std::fs::read(&entries[0]).unwrap(), cat_bytes);
    // Allowed twin: cat's own entry, where it belongs, still loads.
    let cat = run_cat();
    assert_eq!(String::from_utf8_lossy(&cat.stdout), "x\ny\n");
    assert!(String::from_utf8_lossy(&cat.stderr).contains("from the disk cache"));

    // Components (a typed tool) go through the same cache.
    let cache2 = t.root.join("cache2");
    let cfg2 = t.root.join("cfg2.toml");
    std::fs::write(
        &cfg2,
        format!(
            "[wasm]\ncache_dir = {:?}\nbaseline_compile = false\n",
            cache2.to_str().unwrap()
        ),
    )
    .unwrap();
    let call = || {
        let out = toolhost(
            &t.ws(),
            &[
                "call",
                "--config",
                cfg2.to_str().unwrap(),
                "text-stats",
                r#"{"text":"a b"}"#,
            ],
            &[("TOOLHOST_LOG", "toolhost=debug")],
        );
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["words"], 2);
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(call().contains("compiled"));
    assert!(call().contains("from the disk cache"));
    let entries: Vec<PathBuf> = std::fs::read_dir(&cache2)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    let mut data = std::fs::read(&entries[0]).unwrap();
    let mid = data.len() / 2;
    data[mid] ^= 0x5a;
    std::fs::write(&entries[0], &data).unwrap();
    let err = call();
    assert!(err.contains("corrupt") && err.contains("compiled"), "{err}");
}

#[test]
fn tools_subcommand_lists_descriptions() {
    builtin_tools_built();
    let t = Tmp::new();
    let out = toolhost(&t.ws(), &["tools"], &[]);
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(
        s.lines()
            .any(|l| l.starts_with("grep ") && l.contains("regular expression")),
        "{s}"
    );
    let out = toolhost(&t.ws(), &["tools", "--json"], &[]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v.as_array().unwrap().len() >= 13);
}

pub(crate) fn probe_p2_path() -> PathBuf {
    let p = Path::new(env!("TOOLHOST_BUILD_GUEST_TESTS")).join("probe-p2.wasm");
    assert!(p.exists(), "{} is missing: build.rs builds it", p.display());
    p
}
