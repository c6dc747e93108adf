//! The audit log of the agent tools: every call recorded, tampering found.

use super::*;

/// The audit log: one hash-chained line per call, secrets and contents kept
/// out; `toolhost audit verify` finds a changed, removed or reordered line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_log_records_every_call_and_detects_tampering() {
    let t = tmp();
    let log = t.root.join("audit.jsonl");
    let mut c = cfg(&["echo"]);
    c.audit_log = Some(log.clone());
    c.max_permission_level = Level::Cautious;
    c.rate_limit_calls = 40;
    let sb =
        Arc::new(Sandbox::new([toolhost::AllowedDirSpec::read_write(t.ws())], c.clone()).unwrap());
    let tb = Arc::new(Toolbox::from_config(sb.clone()).await.unwrap());
    let secret = "sk-proj-SECRETVALUE0123456789";
    let body = "BODY-CANARY file contents";
    let r = tb
        .call("file_write", &json!({"path": "n.txt", "content": body}))
        .await;
    assert!(!r.is_error, "{r:?}");
    // Capped at cautious: the shell (dangerous) is denied, with its rule.
    let r = tb
        .call(
            "shell",
            &json!({"args": ["echo", format!("OPENAI_API_KEY={secret}")]}),
        )
        .await;
    assert_eq!(r.rule.as_deref(), Some("permission.level"));
    let r = tb.call("file_read", &json!({"path": "n.txt"})).await;
    assert_eq!(r.text, body);
    let calls: Vec<_> = (0..10)
        .map(|i| {
            let tb = tb.clone();
            tokio::spawn(
                async move { tb.call("file_stat", &json!({"path": format!("{i}")})).await },
            )
        })
        .collect();
    for c in calls {
        c.await.unwrap();
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 13);
    assert!(
        !text.contains(secret) && !text.contains("BODY-CANARY"),
        "{text}"
    );
    let first: Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(first["tool"], "file_write");
    assert_eq!(first["decision"], "allow");
    assert_eq!(first["args"]["content"]["bytes"], body.len());
    assert_eq!(first["session"], tb.session());
    let second: Value = serde_json::from_str(lines[1]).unwrap();
    assert_eq!(
        (second["decision"].as_str(), second["rule"].as_str()),
        (Some("deny"), Some("permission.level"))
    );
    let third: Value = serde_json::from_str(lines[2]).unwrap();
    assert_eq!(third["output_bytes"], body.len());
    let verify =
        |p: &std::path::Path| toolhost(&t.ws(), &["audit", "verify", p.to_str().unwrap()], &[]);
    let out = verify(&log);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("13 records"));
    // Reopened, the chain continues.
    drop(tb);
    let tb = Toolbox::from_config(sb.clone()).await.unwrap();
    tb.call("file_list", &json!({})).await;
    let out = verify(&log);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("14 records"),
        "{out:?}"
    );
    // Tampering, three ways: each breaks the chain at the line.
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    let write = |name: &str, v: &[String]| {
        let p = t.root.join(name);
        std::fs::write(&p, v.join("\n") + "\n").unwrap();
        p
    };
    let mut changed = lines.clone();
    changed[4] = changed[4].replace("file_stat", "file_read");
    let mut removed = lines.clone();
    removed.remove(5);
    let mut swapped = lines.clone();
    swapped.swap(6, 7);
    for (name, v, line) in [
        ("changed", changed, 5),
        ("removed", removed, 6),
        ("swapped", swapped, 7),
    ] {
        let p = write(name, &v);
        let out = verify(&p);
        assert_eq!(out.status.code(), Some(1), "{name}: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains(&format!("line {line}:")),
            "{name}: {out:?}"
        );
        // A broken log is not extended.
        assert!(toolhost::audit::AuditLog::open(&p).is_err(), "{name}");
    }
    // Attack 50: edits the parsed record would not show. A 0xff byte in line
    // 5, and a duplicated key in line 4 (serde keeps the last value, so the
    // record parses as the original): each found, with its line.
    let mut bytes: Vec<Vec<u8>> = lines.iter().map(|l| l.as_bytes().to_vec()).collect();
    let at = bytes[4].len() / 2;
    bytes[4].insert(at, 0xff);
    let p = t.root.join("non-utf8");
    let mut data = bytes.join(&b'\n');
    data.push(b'\n');
    std::fs::write(&p, data).unwrap();
    let mut dup = lines.clone();
    assert!(dup[3].starts_with('{') && dup[3].contains(r#""tool":"file_stat""#));
    dup[3] = dup[3].replacen('{', r#"{"tool":"forged","#, 1);
    let dup_path = write("duplicate-key", &dup);
    let mut spaced = lines.clone();
    spaced[2] = spaced[2].replacen(',', ", ", 1);
    let spaced_path = write("whitespace", &spaced);
    for (name, p, line) in [
        ("non-utf8", p, 5),
        ("duplicate key", dup_path, 4),
        ("whitespace", spaced_path, 3),
    ] {
        let out = verify(&p);
        assert_eq!(out.status.code(), Some(1), "{name}: {out:?}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains(&format!("line {line}:")), "{name}: {out:?}");
        assert!(toolhost::audit::AuditLog::open(&p).is_err(), "{name}");
    }
    // Allowed twin: the untouched log still verifies.
    assert_eq!(verify(&log).status.code(), Some(0));
}

/// A log that cannot be extended (another writer died mid-line) stops the
/// calls: none runs unrecorded. The call during which the append failed ran
/// (it was recorded after it ran); the next is refused with its rule, and
/// once the log is repaired a record of the resumption goes in and calls run
/// again.
#[tokio::test]
async fn calls_stop_while_the_audit_log_cannot_be_written() {
    use std::io::Write as _;
    let t = tmp();
    let log = t.root.join("audit.jsonl");
    let mut c = cfg(&[]);
    c.audit_log = Some(log.clone());
    let sb = Arc::new(Sandbox::new([toolhost::AllowedDirSpec::read_write(t.ws())], c).unwrap());
    let tb = Toolbox::from_config(sb).await.unwrap();
    t.write("n.txt", "N");
    // Allowed twin: the log works, the call runs.
    let r = tb.call("file_read", &json!({"path": "n.txt"})).await;
    assert_eq!(r.text, "N");
    let good = std::fs::read(&log).unwrap();
    std::fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .unwrap()
        .write_all(b"{\"half\":")
        .unwrap();
    let r = tb.call("file_read", &json!({"path": "n.txt"})).await;
    assert_eq!(r.text, "N", "this call ran before its record failed");
    let r = tb.call("file_read", &json!({"path": "n.txt"})).await;
    assert_eq!(r.rule.as_deref(), Some("audit.unavailable"), "{r:?}");
    assert!(r.text.contains("incomplete"), "{r:?}");
    // Repaired (the half line gone): calls run again, recorded.
    std::fs::write(&log, &good).unwrap();
    let r = tb.call("file_read", &json!({"path": "n.txt"})).await;
    assert_eq!(r.text, "N", "{r:?}");
    let (n, _) = toolhost::audit::verify(&log).unwrap();
    assert_eq!(n, 3, "the first call, the resumption, the last call");
    let text = std::fs::read_to_string(&log).unwrap();
    let resumed: Value = serde_json::from_str(text.lines().nth(1).unwrap()).unwrap();
    assert_eq!(resumed["event"], "audit_resumed");
}

/// Attack 50, threads: eight threads on one handle and eight on a second
/// handle of the same file (two sessions of one process) append 2,000
/// records; they form one valid chain.
#[test]
fn audit_log_concurrent_handles_and_threads_make_one_chain() {
    let t = tmp();
    let log = t.root.join("audit.jsonl");
    let a = Arc::new(toolhost::audit::AuditLog::open(&log).unwrap());
    let b = Arc::new(toolhost::audit::AuditLog::open(&log).unwrap());
    let threads: Vec<_> = (0..16)
        .map(|i| {
            let h = if i % 2 == 0 { a.clone() } else { b.clone() };
            std::thread::spawn(move || {
                for n in 0..125 {
                    let mut m = serde_json::Map::new();
                    m.insert("tool".into(), json!("t"));
                    m.insert("n".into(), json!(i * 1000 + n));
                    h.append(m).unwrap();
                }
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
    let (n, _) = toolhost::audit::verify(&log).unwrap();
    assert_eq!(n, 2000);
    // A third handle opened now continues the same chain.
    let c = toolhost::audit::AuditLog::open(&log).unwrap();
    c.append(serde_json::Map::new()).unwrap();
    a.append(serde_json::Map::new()).unwrap();
    assert_eq!(toolhost::audit::verify(&log).unwrap().0, 2002);
}
