//! Preview-2 command components and typed tools, `toolhost call`.

use super::*;

/// The probe built as a WASI preview-2 command component (`wasm32-wasip2`).
pub(super) async fn probe2(sb: &Sandbox, args: &[&str]) -> RunOutput {
    let mut argv = vec!["./probe2.wasm"];
    argv.extend_from_slice(args);
    sb.run(RunRequest::new(argv)).await
}

pub(super) fn setup_p2(config: SandboxConfig) -> (Tmp, Sandbox) {
    let (t, sb) = setup(config);
    std::fs::copy(probe_p2_path(), t.ws().join("probe2.wasm")).unwrap();
    (t, sb)
}

#[tokio::test]
async fn preview2_command_components_are_held_like_modules() {
    let (t, sb) = setup_p2(SandboxConfig {
        max_file_size_mb: 1,
        max_memory_mb: 64,
        ..wasm_config()
    });
    t.write("inside.txt", "inside");
    assert!(
        wasmparser::Parser::is_component(&std::fs::read(t.ws().join("probe2.wasm")).unwrap()),
        "the p2 probe must be a component"
    );
    // argv, env, exit status (WASI 0.2 reports success or failure only).
    let r = probe2(&sb, &["args", "a b"]).await;
    assert_eq!(
        (r.returncode, r.stdout.as_str()),
        (Some(0), "probe2\nargs\na b\n"),
        "{r:?}"
    );
    let r = probe2(&sb, &["exit", "7"]).await;
    assert_eq!(
        (r.returncode, r.outcome.kind),
        (Some(1), OutcomeKind::Exited),
        "{r:?}"
    );
    // Attacks 1-3: nothing outside the preopens; the allowed twin reads.
    let secret = t.outside().join("secret.txt");
    for p in [
        "../outside/secret.txt",
        "/etc/passwd",
        secret.to_str().unwrap(),
    ] {
        let r = probe2(&sb, &["read", p]).await;
        assert!(
            !r.stdout.contains(CANARY) && !r.stdout.contains("root:"),
            "{p}: {r:?}"
        );
        assert_eq!(r.returncode, Some(1), "{p}: {r:?}");
    }
    let r = probe2(&sb, &["read", "inside.txt"]).await;
    assert_eq!(r.stdout, "inside", "{r:?}");
    // Attack 20: file writes through streams and set-size are held to the budget.
    let r = probe2(&sb, &["write", "big", "5000000"]).await;
    assert_eq!(r.outcome.kind, OutcomeKind::FileSizeLimit, "{r:?}");
    assert!(std::fs::metadata(t.ws().join("big")).unwrap().len() <= 1 << 20);
    let r = probe2(&sb, &["truncate", "sparse", "100000000000"]).await;
    assert_eq!(r.outcome.kind, OutcomeKind::FileSizeLimit, "{r:?}");
    assert!(std::fs::metadata(t.ws().join("sparse")).unwrap().len() <= 1 << 20);
    let r = probe2(&sb, &["write", "small", "500000"]).await;
    assert_eq!(
        (r.success(), r.stdout.as_str()),
        (true, "wrote 500000\n"),
        "{r:?}"
    );
    assert_eq!(
        std::fs::metadata(t.ws().join("small")).unwrap().len(),
        500000
    );
    // Attack 17: memory bomb; the allowed twin allocates under the limit.
    let r = probe2(&sb, &["alloc", "100000"]).await;
    assert_eq!(r.outcome.kind, OutcomeKind::MemoryLimit, "{r:?}");
    let r = probe2(&sb, &["alloc", "16"]).await;
    assert_eq!(r.stdout, "allocated 16 MiB\n", "{r:?}");
    // Attacks 28, 29, 31: preview 2 has socket interfaces; none reaches out.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    assert!(std::net::TcpStream::connect(&addr).is_ok());
    let r = probe2(&sb, &["connect", &addr]).await;
    assert!(
        !r.stdout.contains("CONNECTED") && r.returncode == Some(1),
        "{r:?}"
    );
    let r = probe2(&sb, &["resolve", "localhost"]).await;
    assert!(
        !r.stdout.contains("RESOLVED") && r.returncode == Some(1),
        "{r:?}"
    );
    // Attacks 32-34: output capped while the guest keeps running.
    let r = probe2(&sb, &["flood", "30000000"]).await;
    assert!(r.success() && r.truncated, "{}", r.outcome.message);
    assert_eq!(r.stdout.len(), 8 * 1024 * 1024);
}

#[tokio::test]
async fn preview2_cpu_limit_and_host_call_timeout() {
    let mut cfg = wasm_config();
    cfg.max_cpu_seconds = 1;
    let (_t, sb) = setup_p2(cfg);
    let r = probe2(&sb, &["spin"]).await;
    assert_eq!(r.outcome.kind, OutcomeKind::CpuLimit, "{r:?}");
    let r = probe2(&sb, &["count", "1000"]).await;
    assert!(r.success(), "{r:?}");
    let (_t, sb) = setup_p2(SandboxConfig {
        timeout: Duration::from_secs(1),
        ..wasm_config()
    });
    let r = probe2(&sb, &["sleep", "30"]).await;
    assert!(r.timed_out && r.duration < Duration::from_secs(3), "{r:?}");
    let r = probe2(&sb, &["sleep", "0"]).await;
    assert_eq!(r.stdout, "woke\n", "{r:?}");
}

#[tokio::test]
async fn typed_tools_are_discovered_and_called_by_name_with_json() {
    let (t, sb) = setup(wasm_config());
    t.write("notes.txt", "hello typed world\n");
    let tools: Vec<_> = sb.typed_tools().await;
    let names: Vec<&str> = tools
        .iter()
        .map(|t| t.as_ref().map(|t| t.name.as_str()).unwrap_or("ERR"))
        .collect();
    assert!(
        names.contains(&"text-stats") && names.contains(&"file-digest"),
        "{tools:?}"
    );
    for t in tools.iter().flatten() {
        assert_eq!(t.input_schema["type"], "object", "{t:?}");
        assert!(!t.description.is_empty());
    }
    // text-stats: pure computation.
    let r = sb
        .call_tool(
            "text-stats",
            &serde_json::json!({"text": "b a b\nc", "top": 1}),
            None,
        )
        .await;
    assert!(r.is_ok(), "{r:?}");
    let out = r.output.unwrap();
    assert_eq!(
        (
            out["lines"].as_u64(),
            out["words"].as_u64(),
            out["bytes"].as_u64()
        ),
        (Some(2), Some(4), Some(7))
    );
    assert_eq!(out["top"], serde_json::json!([{"word": "b", "count": 2}]));
    // file-digest reads through the preopens: the digest matches the host's.
    let r = sb
        .call_tool(
            "file-digest",
            &serde_json::json!({"paths": ["notes.txt"]}),
            None,
        )
        .await;
    assert!(r.is_ok(), "{r:?}");
    let out = r.output.unwrap();
    assert_eq!(
        out["files"][0]["sha256"],
        sha256_file(&t.ws().join("notes.txt"))
    );
    assert_eq!(out["files"][0]["bytes"], 18);
    // Denied twin: a file outside the sandbox is an error result, no canary.
    let secret = t.outside().join("secret.txt");
    let r = sb
        .call_tool(
            "file-digest",
            &serde_json::json!({"paths": [secret.to_str().unwrap()]}),
            None,
        )
        .await;
    assert!(r.output.is_none() && r.error.is_some(), "{r:?}");
    assert!(!format!("{r:?}").contains(&sha256_file(&secret)));
    assert_eq!((r.run.returncode, r.run.cli_exit_code()), (Some(1), 1));
    // Bad input is the tool's error result; the session keeps working.
    for bad in [
        serde_json::json!([1, 2]),
        serde_json::json!({"paths": "x"}),
        serde_json::json!({"paths": []}),
        serde_json::json!({"nope": 1}),
    ] {
        let r = sb.call_tool("file-digest", &bad, None).await;
        assert!(r.error.is_some() && r.output.is_none(), "{bad}: {r:?}");
    }
    // Unknown tools, commands called as typed tools and typed tools run as
    // commands are refused with a reason.
    let r = sb
        .call_tool("no-such-tool", &serde_json::json!({}), None)
        .await;
    assert_eq!(r.run.outcome.kind, OutcomeKind::NotFound, "{r:?}");
    let r = sb.call_tool("wc", &serde_json::json!({}), None).await;
    assert_eq!(r.run.outcome.kind, OutcomeKind::InvalidRequest, "{r:?}");
    let r = sb.run(RunRequest::new(["text-stats"])).await;
    assert_eq!(r.outcome.kind, OutcomeKind::InvalidRequest, "{r:?}");
    assert!(r.outcome.message.contains("typed tool"), "{r:?}");
}

#[tokio::test]
async fn typed_tools_keep_the_limits_and_names_must_match() {
    // The call's limits hold for typed tools: text-stats asked to measure a
    // text that does not fit in its memory limit ends with memory_limit.
    let (t, sb) = setup(SandboxConfig {
        max_memory_mb: 16,
        ..wasm_config()
    });
    let big = "word ".repeat(4 << 20);
    let r = sb
        .call_tool("text-stats", &serde_json::json!({"text": big}), None)
        .await;
    assert_eq!(
        r.run.outcome.kind,
        OutcomeKind::MemoryLimit,
        "{:?}",
        r.run.outcome
    );
    assert!(r.output.is_none() && r.error.is_some());
    let r = sb
        .call_tool("text-stats", &serde_json::json!({"text": "small"}), None)
        .await;
    assert!(r.is_ok(), "{r:?}");
    // The output cap holds for a typed tool's result and error too.
    let long = "x".repeat(3000);
    let (_t3, capped) = setup(SandboxConfig {
        max_output_bytes: 1000,
        ..wasm_config()
    });
    let r = capped
        .call_tool("file-digest", &serde_json::json!({"paths": [long]}), None)
        .await;
    let e = r.error.as_deref().unwrap_or("");
    assert!(
        r.run.truncated && !e.is_empty() && e.len() <= 800,
        "{}",
        e.len()
    );
    let (t2, small) = setup(SandboxConfig {
        max_output_bytes: 1000,
        ..wasm_config()
    });
    let paths: Vec<String> = (0..20).map(|i| format!("f{i}")).collect();
    for p in &paths {
        std::fs::write(t2.ws().join(p), p).unwrap();
    }
    let r = small
        .call_tool("file-digest", &serde_json::json!({"paths": paths}), None)
        .await;
    assert!(r.output.is_none() && r.run.truncated, "{r:?}");
    assert!(
        r.error.as_deref().unwrap_or("").contains("output cap"),
        "{r:?}"
    );
    let r = small
        .call_tool("file-digest", &serde_json::json!({"paths": ["f1"]}), None)
        .await;
    assert!(r.is_ok(), "{r:?}");
    // A typed tool whose file name differs from the name it declares is
    // listed as unusable, not silently renamed.
    let dir = t.ws().join("tools");
    std::fs::create_dir(&dir).unwrap();
    let builtin = Path::new(env!("TOOLHOST_BUILD_GUEST_DIST")).join("text-stats.wasm");
    std::fs::copy(&builtin, dir.join("renamed.wasm")).unwrap();
    let mut cfg = wasm_config();
    cfg.wasm.tool_dirs = vec![dir];
    let sb = t.sandbox(cfg);
    let listed = sb.typed_tools().await;
    let err = listed
        .iter()
        .find_map(|t| t.as_ref().err())
        .expect("renamed tool refused");
    assert!(
        err.message.contains("renamed") && err.message.contains("text-stats"),
        "{err:?}"
    );
}

#[test]
fn call_subcommand_prints_json_results_and_exit_codes() {
    builtin_tools_built();
    let t = Tmp::new();
    t.write("a.txt", "abc");
    let out = toolhost(
        &t.ws(),
        &["call", "file-digest", r#"{"paths":["a.txt"]}"#],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["files"][0]["sha256"], sha256_file(&t.ws().join("a.txt")));
    let out = toolhost(
        &t.ws(),
        &["call", "--json", "file-digest", r#"{"paths":["zz"]}"#],
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v["output"].is_null() && v["error"].as_str().unwrap().contains("zz"),
        "{v}"
    );
    let out = toolhost(&t.ws(), &["call", "text-stats", "{not json"], &[]);
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    let out = toolhost(&t.ws(), &["call", "no-such", "{}"], &[]);
    assert_eq!(out.status.code(), Some(127), "{out:?}");
    let out = toolhost(&t.ws(), &["tools", "--json"], &[]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let stats = v
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "text-stats")
        .expect("listed");
    assert_eq!(stats["kind"], "typed");
    assert_eq!(stats["input_schema"]["required"][0], "text");
}
