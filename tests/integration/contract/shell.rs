//! The shell tool's policy (36-39) and the rate limit (40).

use super::*;

/// Case 40 through the agent's tools: N+1 calls inside the window get a
/// typed `rate_limited` result, unknown, denied and failed calls count too, and
/// of 20 concurrent calls exactly the limit gets through.
pub(super) async fn rate_limit_case(c: &Ctx) -> CaseResult {
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

pub(super) fn shell_case(case: u32) -> CaseResult {
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
