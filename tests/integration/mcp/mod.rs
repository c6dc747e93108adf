//! `toolhost mcp`: the agent's tools over the Model Context Protocol.
//!
//! End to end with the official `mcp` Python SDK as the client (installed from
//! PyPI into a virtualenv by `scripts/mcp-client-setup`, which `scripts/test`
//! runs and exports as TOOLHOST_TEST_MCP_PYTHON; with CI=true it must be there,
//! elsewhere the test skips loudly without it), and byte by byte over raw pipes
//! for input no well-behaved client sends: malformed JSON, non-UTF-8, lone
//! surrogates, oversized messages, and tools that go after the server's stdio.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::util::*;

mod stdio;

#[allow(unused_imports)]
pub(crate) use stdio::*;

/// The virtualenv python with the `mcp` SDK, or `None` (loudly) outside CI.
pub(super) fn mcp_python() -> Option<PathBuf> {
    match std::env::var_os("TOOLHOST_TEST_MCP_PYTHON") {
        Some(p) if Path::new(&p).exists() => Some(PathBuf::from(p)),
        other => {
            let why = format!(
                "the MCP end-to-end test needs TOOLHOST_TEST_MCP_PYTHON (run scripts/mcp-client-setup): {other:?}"
            );
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("{why}");
            }
            eprintln!("\n*** SKIPPED: {why} ***\n");
            None
        }
    }
}

/// The Python client script.
pub(super) fn client_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/client.py")
}

/// A workspace with a text file, a read-only dir, a canary outside, and a
/// config file with the given extra TOML lines.
pub(super) fn setup(extra: &str) -> (Tmp, PathBuf) {
    let t = Tmp::new();
    t.write("notes.txt", "hello-notes\nsecond line\n");
    let cfg = t.root.join("toolhost.toml");
    std::fs::write(
        &cfg,
        format!("timeout = 20\nshell_allowed_binaries = [\"cat\", \"true\", \"ls\", \"tee\", \"curl\", \"sleep\"]\n{extra}"),
    )
    .unwrap();
    (t, cfg)
}

pub(super) fn text_of(r: &Value) -> String {
    r["content"]
        .as_array()
        .map(|c| {
            c.iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join("")
        })
        .unwrap_or_default()
}

pub(super) fn call_meta(r: &Value) -> &Value {
    &r["_meta"]["toolhost/call"]
}

/// The docs/src/attacks.md F and 36-40 cases through a real MCP client: tools listed
/// with schemas; shell, file, WASI and typed tools called; denials, a failing
/// tool, an unknown tool and bad argument types come back as tool errors with
/// the reason; the rate limit admits exactly its budget (refused and failed
/// calls counted) and says when to retry; the audit log holds every call and
/// verifies.
#[test]
fn python_sdk_client_lists_and_calls_tools_end_to_end() {
    let Some(python) = mcp_python() else { return };
    let (t, cfg) = setup("rate_limit_calls = 40\nrate_limit_window = 600\n");
    // The audit log goes next to the config, outside the workspace.
    let audit_path = t.root.join("audit.jsonl");
    let mut f = std::fs::OpenOptions::new().append(true).open(&cfg).unwrap();
    writeln!(f, "audit_log = {:?}", audit_path.to_str().unwrap()).unwrap();
    drop(f);

    let new_content = format!("written through MCP {CANARY}-2\n");
    let calls = json!([
        {"key": "write", "tool": "file_write", "args": {"path": "out/new.txt", "content": new_content}},
        {"key": "read", "tool": "file_read", "args": {"path": "notes.txt"}},
        {"key": "shell_cat", "tool": "shell", "args": {"args": ["cat", "notes.txt"]}},
        {"key": "shell_true", "tool": "shell", "args": {"args": ["true"]}},
        {"key": "shell_fails", "tool": "shell", "args": {"args": ["cat", "missing.txt"]}},
        {"key": "wasm_wc", "tool": "wc", "args": {"args": ["-l"], "stdin": "a\nb\nc\n"}},
        {"key": "typed", "tool": "text-stats", "args": {"text": "two words\nand more"}},
        {"key": "deny_ext", "tool": "file_write", "args": {"path": "evil.sh", "content": "rm -rf /"}},
        {"key": "deny_escape", "tool": "file_read", "args": {"path": "../outside/secret.txt"}},
        {"key": "deny_network", "tool": "shell", "args": {"args": ["curl", "http://127.0.0.1:9/"]}},
        {"key": "deny_unlisted", "tool": "shell", "args": {"args": ["rm", "-rf", "."]}},
        {"key": "unknown", "tool": "no_such_tool", "args": {}},
        {"key": "bad_type", "tool": "file_read", "args": {"path": 5}},
    ]);
    let n_calls = calls.as_array().unwrap().len() as u64;
    let plan = json!({
        "server": [toolhost_bin(), "mcp", "--config", cfg, "--allow-dir", t.ws()],
        "cwd": t.ws(),
        "calls": calls,
        "until_rate_limited": {"tool": "file_stat", "args": {"path": "notes.txt"}, "max": 100},
    });
    let out = run_client(&python, &t, &plan);

    assert_eq!(out["initialize"]["serverInfo"]["name"], "toolhost");
    let tools = out["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
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
    for tool in tools {
        assert_eq!(tool["inputSchema"]["type"], "object", "{tool}");
    }
    let find = |n: &str| tools.iter().find(|t| t["name"] == n).unwrap();
    assert_eq!(find("file_read")["annotations"]["readOnlyHint"], true);
    assert_eq!(find("shell")["annotations"]["destructiveHint"], true);
    assert_eq!(
        find("text-stats")["inputSchema"]["required"],
        json!(["text"])
    );

    let r = &out["results"];
    let ok = |k: &str| {
        assert_eq!(r[k]["isError"], false, "{k}: {}", r[k]);
        assert_eq!(call_meta(&r[k])["status"], "ok", "{k}: {}", r[k]);
        text_of(&r[k])
    };
    ok("write");
    assert_eq!(
        std::fs::read_to_string(t.ws().join("out/new.txt")).unwrap(),
        new_content
    );
    assert!(ok("read").contains("hello-notes"));
    assert!(ok("shell_cat").contains("hello-notes"));
    assert_eq!(call_meta(&r["shell_cat"])["backend"], "direct");
    assert_eq!(call_meta(&r["shell_cat"])["returncode"], 0);
    ok("shell_true");
    assert_eq!(ok("wasm_wc").split_whitespace().next(), Some("3"));
    assert_eq!(call_meta(&r["wasm_wc"])["backend"], "wasm");
    ok("typed");
    assert_eq!(
        r["typed"]["structuredContent"]["words"], 4,
        "{}",
        r["typed"]
    );

    // A tool that ran and failed: an error result with its exit code.
    assert_eq!(r["shell_fails"]["isError"], true);
    assert_eq!(call_meta(&r["shell_fails"])["returncode"], 1);
    assert!(text_of(&r["shell_fails"]).contains("missing.txt"));

    let denied = |k: &str, rule_part: &str| {
        assert_eq!(r[k]["isError"], true, "{k}: {}", r[k]);
        let m = call_meta(&r[k]);
        assert_eq!(m["status"], "denied", "{k}: {}", r[k]);
        let rule = m["rule"].as_str().unwrap_or_default();
        assert!(rule.contains(rule_part), "{k}: rule {rule:?}");
        let text = text_of(&r[k]);
        assert!(!text.is_empty() && !text.contains(CANARY), "{k}: {text}");
    };
    denied("deny_ext", "extension");
    assert!(!t.ws().join("evil.sh").exists());
    denied("deny_escape", "sandbox.outside");
    denied("deny_network", "network");
    denied("deny_unlisted", "");
    assert!(t.ws().join("notes.txt").exists());

    assert_eq!(r["unknown"]["isError"], true);
    assert_eq!(call_meta(&r["unknown"])["status"], "unknown_tool");
    assert_eq!(r["bad_type"]["isError"], true);
    assert_eq!(call_meta(&r["bad_type"])["status"], "invalid_request");
    assert!(text_of(&r["bad_type"]).contains("must be a string"));

    // The budget is 40 calls: every call above counted, refused or not.
    let rl = &out["rate_limit"];
    assert_eq!(rl["admitted"].as_u64().unwrap() + n_calls, 40, "{rl}");
    let limited = &rl["limited"];
    assert_eq!(limited["isError"], true, "{rl}");
    assert_eq!(call_meta(limited)["rule"], "rate_limit");
    assert!(call_meta(limited)["retry_after_ms"].as_u64().unwrap() > 0);
    assert_eq!(rl["ping_after"], true);

    // One audit line per call, the refused ones too, and the chain verifies.
    let log = std::fs::read_to_string(&audit_path).unwrap();
    assert_eq!(log.lines().count(), 41, "{log}");
    assert!(!log.contains(CANARY), "file contents are not logged");
    let v = toolhost(
        &t.root,
        &["audit", "verify", audit_path.to_str().unwrap()],
        &[],
    );
    assert!(v.status.success(), "{v:?}");
}

/// Runs the Python client with `plan`; its JSON output.
pub(super) fn run_client(python: &Path, t: &Tmp, plan: &Value) -> Value {
    let plan_path = t.root.join("plan.json");
    std::fs::write(&plan_path, serde_json::to_vec(plan).unwrap()).unwrap();
    let out = Command::new(python)
        .arg(client_script())
        .arg(&plan_path)
        .env_remove("TOOLHOST_CONFIG")
        .env_remove("TOOLHOST_LOG")
        .output()
        .expect("run the python MCP client");
    assert!(
        out.status.success(),
        "client failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "client output is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// `toolhost mcp` on raw pipes (or a socket).
pub(super) struct Raw {
    child: Child,
    stdin: Option<Box<dyn Write + Send>>,
    /// The fd of this side of the server's stdin.
    stdin_fd: i32,
    lines: mpsc::Receiver<Vec<u8>>,
    next_id: i64,
}

impl Raw {
    fn command(t: &Tmp, cfg: &Path) -> Command {
        let mut cmd = Command::new(toolhost_bin());
        cmd.args(["mcp", "--config"])
            .arg(cfg)
            .arg("--allow-dir")
            .arg(t.ws())
            .current_dir(t.ws())
            .env_remove("TOOLHOST_CONFIG")
            .env_remove("TOOLHOST_LOG")
            .stderr(Stdio::inherit());
        cmd
    }

    fn with(
        child: Child,
        stdin: Box<dyn Write + Send>,
        stdin_fd: i32,
        stdout: impl std::io::Read + Send + 'static,
    ) -> Raw {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            loop {
                let mut line = Vec::new();
                match r.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        if tx.send(line).is_err() {
                            break;
                        }
                    }
                }
            }
        });
        Raw {
            child,
            stdin: Some(stdin),
            stdin_fd,
            lines: rx,
            next_id: 100,
        }
    }

    /// The server on pipes, not yet initialized.
    fn spawn(t: &Tmp, cfg: &Path) -> Raw {
        Self::spawn_cmd(Self::command(t, cfg))
    }

    /// `cmd` (a [`Raw::command`]) on pipes, not yet initialized.
    fn spawn_cmd(mut cmd: Command) -> Raw {
        use std::os::fd::AsRawFd;
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start toolhost mcp");
        let stdout = child.stdout.take().unwrap();
        let stdin = child.stdin.take().unwrap();
        let fd = stdin.as_raw_fd();
        Self::with(child, Box::new(stdin), fd, stdout)
    }

    /// The server with one non-blocking unix socket as stdin and stdout (as
    /// libuv-based clients such as Node's hand over), not yet initialized.
    fn spawn_on_socket(t: &Tmp, cfg: &Path) -> (Raw, std::os::unix::net::UnixStream) {
        use std::os::fd::{AsRawFd, OwnedFd};
        use std::os::unix::net::UnixStream;
        let (ours, theirs) = UnixStream::pair().unwrap();
        theirs.set_nonblocking(true).unwrap();
        let theirs2 = theirs.try_clone().unwrap();
        let child = Self::command(t, cfg)
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::from(OwnedFd::from(theirs2)))
            .spawn()
            .expect("start toolhost mcp");
        let fd = ours.as_raw_fd();
        let reader = ours.try_clone().unwrap();
        let ctl = ours.try_clone().unwrap();
        (Self::with(child, Box::new(ours), fd, reader), ctl)
    }

    fn init(&mut self) {
        let init = self.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}),
        );
        assert_eq!(init["result"]["serverInfo"]["name"], "toolhost", "{init}");
        self.send(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    }

    fn start(t: &Tmp, cfg: &Path) -> Raw {
        let mut raw = Self::spawn(t, cfg);
        raw.init();
        raw
    }

    /// Sends a tools/call without waiting; its id.
    fn call_async(&mut self, tool: &str, args: Value) -> i64 {
        self.next_id += 1;
        let id = self.next_id;
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": args}});
        self.send(&serde_json::to_vec(&msg).unwrap());
        id
    }

    fn send(&mut self, line: &[u8]) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    /// The next line the server writes: it must be one JSON object.
    fn recv(&mut self) -> Value {
        let line = self
            .lines
            .recv_timeout(Duration::from_secs(30))
            .expect("the server answers within 30 s");
        serde_json::from_slice(&line).unwrap_or_else(|e| {
            panic!(
                "server wrote a line that is not JSON ({e}): {:?}",
                String::from_utf8_lossy(&line)
            )
        })
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send(&serde_json::to_vec(&msg).unwrap());
        let r = self.recv();
        assert_eq!(r["id"], id, "{r}");
        r
    }

    fn call(&mut self, tool: &str, args: Value) -> Value {
        let r = self.request("tools/call", json!({"name": tool, "arguments": args}));
        r["result"].clone()
    }

    /// The session still works: a file read answers with the file.
    fn still_works(&mut self) {
        let r = self.call("file_read", json!({"path": "notes.txt"}));
        assert!(text_of(&r).contains("hello-notes"), "{r}");
    }

    fn close(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        let start = std::time::Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "the server did not exit when its stdin closed"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Bad input no SDK would send: each gets a clear answer, with the request's
/// id whenever it can be read, and the session keeps working after it.
#[test]
fn bad_input_gets_clear_errors_and_the_session_continues() {
    // A 1 MiB file cap makes the message cap 16 MiB.
    let (t, cfg) = setup("rate_limit_calls = 0\nmax_file_size_mb = 1\n");
    let mut s = Raw::start(&t, &cfg);

    // Not JSON at all: a parse error (no id to answer to).
    s.send(b"this is not json");
    let r = s.recv();
    assert_eq!(r["error"]["code"], -32700, "{r}");
    assert_eq!(
        r["id"],
        Value::Null,
        "JSON-RPC: an unreadable id is null: {r}"
    );
    s.still_works();

    // A path with a lone surrogate (what a non-UTF-8 file name becomes in a
    // client's JSON): a tool error for this id, saying why.
    s.send(br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"file_read","arguments":{"path":"bad\udc80name"}}}"#);
    let r = s.recv();
    assert_eq!(r["id"], 7, "{r}");
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert!(text_of(&r["result"]).contains("surrogate"), "{r}");
    s.still_works();

    // Raw bytes that are not UTF-8, the id after them.
    s.send(b"{\"jsonrpc\":\"2.0\",\"method\":\"tools/call\",\"params\":{\"name\":\"file_read\",\"arguments\":{\"path\":\"\xff\xfe\"}},\"id\":8}");
    let r = s.recv();
    assert_eq!(r["id"], 8, "{r}");
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert!(text_of(&r["result"]).contains("UTF-8"), "{r}");
    s.still_works();

    // Arguments that are not an object; a missing tool name.
    s.send(br#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"file_read","arguments":"notes.txt"}}"#);
    let r = s.recv();
    assert_eq!(r["id"], 9, "{r}");
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert!(
        text_of(&r["result"]).contains("\"arguments\" must be a JSON object, not a string"),
        "{r}"
    );
    s.send(br#"{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"arguments":{}}}"#);
    let r = s.recv();
    assert_eq!(r["id"], 10, "{r}");
    assert!(text_of(&r["result"]).contains("\"name\""), "{r}");
    s.still_works();

    // Wrong types inside the arguments; an unknown tool; an unknown method.
    let r = s.call("file_read", json!({"path": ["a"]}));
    assert_eq!(r["isError"], true);
    assert!(text_of(&r).contains("must be a string, not a list"), "{r}");
    let r = s.call(
        "file_write",
        json!({"path": "x.txt", "content": "y", "mode": 7}),
    );
    assert!(text_of(&r).contains("unknown argument"), "{r}");
    let r = s.call("rm_everything", json!({}));
    assert_eq!(call_meta(&r)["status"], "unknown_tool", "{r}");
    let r = s.request("bogus/method", json!({}));
    assert_eq!(r["error"]["code"], -32601, "{r}");
    // JSON that is no JSON-RPC request; a batch.
    s.send(br#"{"hello":"world","id":11}"#);
    let r = s.recv();
    assert_eq!(r["id"], 11, "{r}");
    assert_eq!(r["error"]["code"], -32600, "{r}");
    // Not JSON-RPC 2.0, or an id of the wrong type: invalid request.
    for bad in [
        br#"{"id":15,"method":"ping"}"#.as_slice(),
        br#"{"jsonrpc":"1.0","id":16,"method":"ping"}"#,
        br#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#,
    ] {
        s.send(bad);
        let r = s.recv();
        assert_eq!(r["error"]["code"], -32600, "{r}");
    }
    s.send(br#"[{"jsonrpc":"2.0","id":12,"method":"ping"}]"#);
    let r = s.recv();
    assert!(r.get("error").is_some(), "{r}");
    // Blank lines are skipped.
    s.send(b"   ");
    s.still_works();

    // Huge arguments under the message cap: a short, clear refusal.
    let huge = "a".repeat(5 << 20);
    let r = s.call("file_read", json!({"path": huge}));
    assert_eq!(r["isError"], true);
    let text = text_of(&r);
    assert!(text.contains("a path is at most 4096"), "{}", &text[..200]);
    assert!(text.len() < 8192, "{} bytes", text.len());
    let r = s.call(&huge, json!({}));
    assert!(text_of(&r).len() < 8192);
    let r = s.call(
        "file_write",
        json!({"path": "big.bin", "content": "b".repeat(2 << 20)}),
    );
    assert_eq!(r["isError"], true, "over max_file_size_mb");
    assert!(!t.ws().join("big.bin").exists());
    s.still_works();

    // Over the message cap: skipped without being buffered, answered with its id.
    let mut line = br#"{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":"file_write","arguments":{"path":"over.txt","content":""#.to_vec();
    line.extend(std::iter::repeat_n(b'c', 17 << 20));
    line.extend_from_slice(br#""}}}"#);
    s.send(&line);
    let r = s.recv();
    assert_eq!(r["id"], 13, "{r}");
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert!(text_of(&r["result"]).contains("more than the"), "{r}");
    assert!(!t.ws().join("over.txt").exists());
    s.still_works();

    // An id already in flight is refused (the SDK would run both and answer
    // one); the first request still gets its answer.
    s.send(br#"{"jsonrpc":"2.0","id":900,"method":"tools/call","params":{"name":"shell","arguments":{"args":["sleep","1"]}}}"#);
    s.send(br#"{"jsonrpc":"2.0","id":900,"method":"tools/call","params":{"name":"shell","arguments":{"args":["sleep","1"]}}}"#);
    let r = s.recv();
    assert_eq!(r["id"], 900, "{r}");
    assert_eq!(r["error"]["code"], -32600, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("already used"),
        "{r}"
    );
    let r = s.recv();
    assert_eq!(r["id"], 900, "{r}");
    assert_eq!(r["result"]["isError"], false, "{r}");

    // Requests in flight when the client closes stdin are still answered.
    s.send(br#"{"jsonrpc":"2.0","id":14,"method":"tools/call","params":{"name":"shell","arguments":{"args":["cat"],"stdin":"last words"}}}"#);
    drop(s.stdin.take());
    let r = s.recv();
    assert_eq!(r["id"], 14, "{r}");
    assert!(text_of(&r["result"]).contains("last words"), "{r}");
    assert!(s.close().success());
}

/// A sandbox makes its next call's private tmp (and Landlock ruleset) ahead
/// of it, while the last call's tool runs. A call takes it only while it is
/// as it was made: one with a file planted in it, or changed and changed
/// back, is removed and the call gets a new one; one whose path now leads
/// to another directory is left
/// to whoever put that there, unused; one left alone is the call's, empty
/// and 0700. None is left once the server has exited.
#[cfg(target_os = "linux")]
#[test]
fn a_tmp_made_ahead_is_taken_only_while_it_is_as_made() {
    let t = Tmp::new();
    // The server's tmps go here (its TMPDIR), where only its own are.
    let tmps = t.outside().join("tmps");
    std::fs::create_dir(&tmps).unwrap();
    let cfg = t.root.join("toolhost.toml");
    std::fs::write(
        &cfg,
        "timeout = 20\nshell_allowed_binaries = [\"sh\"]\nshell_allow_strings = true\n",
    )
    .unwrap();
    let mut cmd = Raw::command(&t, &cfg);
    cmd.env("TMPDIR", &tmps);
    let mut s = Raw::spawn_cmd(cmd);
    s.init();
    // The call's TMPDIR, and what it found in it.
    let call = |s: &mut Raw| -> (PathBuf, String) {
        let script = "echo \"$TMPDIR\"; stat -c %a \"$TMPDIR\"; ls -A \"$TMPDIR\"";
        let r = s.call("shell", json!({"args": ["sh", "-c", script]}));
        assert_eq!(call_meta(&r)["returncode"], 0, "{r}");
        let out = text_of(&r);
        let mut lines = out.lines();
        let dir = PathBuf::from(lines.next().unwrap());
        assert_eq!(lines.next(), Some("700"), "{out}");
        let listing = lines.take_while(|l| !l.starts_with('[')).collect();
        (dir, listing)
    };
    let ours = |p: &Path| {
        p.file_name().is_some_and(|n| {
            let n = n.to_string_lossy();
            // Not a staging name (`.new`), which is the tmp's only
            // while it is being made.
            n.starts_with("toolhost-call-") && !n.ends_with(".new")
        })
    };
    let entries = || -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(&tmps)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        v.sort();
        v
    };
    // The spare made after the last call: once the calls' own tmps are
    // removed, the only tmp of the server's left that is not in `skip`.
    let spare = |skip: &[PathBuf]| -> PathBuf {
        let start = std::time::Instant::now();
        loop {
            let left: Vec<PathBuf> = entries()
                .into_iter()
                .filter(|p| ours(p) && !skip.contains(p))
                .collect();
            if let [one] = left.as_slice() {
                return one.clone();
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "no single spare tmp: {left:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let (t1, l1) = call(&mut s);
    let (t2, l2) = call(&mut s);
    assert!(t1.starts_with(&tmps) && t1 != t2, "{t1:?} {t2:?}");
    assert_eq!((l1.as_str(), l2.as_str()), ("", ""));

    // Denied: a file planted in the spare.
    let s1 = spare(&[t1.clone(), t2.clone()]);
    std::fs::write(s1.join("planted"), CANARY).unwrap();
    let (t3, l3) = call(&mut s);
    assert_ne!(t3, s1, "a tmp with a file planted in it was used");
    assert_eq!(l3, "", "the call's tmp is not empty");
    assert!(!s1.exists(), "the tampered spare was not removed");

    // Denied: the spare changed and changed back (a mode, here): only its
    // change time tells.
    let s1b = spare(std::slice::from_ref(&t3));
    {
        use std::os::unix::fs::PermissionsExt;
        let set = |m| std::fs::set_permissions(&s1b, std::fs::Permissions::from_mode(m));
        set(0o777).unwrap();
        set(0o700).unwrap();
    }
    let (t3b, l3b) = call(&mut s);
    assert_ne!(t3b, s1b, "a tmp changed since it was made was used");
    assert_eq!(l3b, "");

    // Denied: the spare's path swapped for another directory.
    let s2 = spare(&[t3.clone(), t3b.clone(), s1b.clone()]);
    let moved = tmps.join("moved");
    std::fs::rename(&s2, &moved).unwrap();
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().mode(0o700).create(&s2).unwrap();
    }
    let (t4, l4) = call(&mut s);
    assert_ne!(t4, s2, "a swapped-in directory was used as the tmp");
    assert_eq!(l4, "");
    assert!(
        s2.is_dir() && moved.is_dir(),
        "what is not toolhost's was removed"
    );

    // Allowed: a spare left alone is the next call's.
    let s3 = spare(&[t4.clone(), s2.clone()]);
    let (t5, l5) = call(&mut s);
    assert_eq!(t5, s3, "the spare was not used");
    assert_eq!(l5, "");

    assert!(s.close().success());
    let left: Vec<PathBuf> = entries().into_iter().filter(|p| ours(p)).collect();
    assert_eq!(left, vec![s2.clone()], "tmps left after exit");
}

/// The voluntary context switches of the server's epoch ticker thread
/// (`toolhost-epoch`), if it has one.
#[cfg(target_os = "linux")]
fn ticker_switches(pid: u32) -> Option<u64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    for task in tasks.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim() == "toolhost-epoch" {
            let status = std::fs::read_to_string(task.path().join("status")).ok()?;
            return status
                .lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|v| v.trim().parse().ok());
        }
    }
    None
}

/// A server that holds a wasm engine but runs no guest is not woken by its
/// epoch ticker once its grace rounds are over (it woke every 10 ms for
/// good after its first wasm call), and the ticker wakes for the next guest.
#[cfg(target_os = "linux")]
#[test]
fn an_idle_server_with_a_wasm_engine_is_not_woken_by_its_ticker() {
    let (t, cfg) = setup("");
    let mut s = Raw::spawn(&t, &cfg);
    s.init();
    let pid = s.child.id();
    let wc = |s: &mut Raw| {
        let r = s.call("wc", json!({"args": ["-l"], "stdin": "a\nb\nc\n"}));
        assert_eq!(text_of(&r).split_whitespace().next(), Some("3"), "{r}");
        assert_eq!(call_meta(&r)["backend"], "wasm", "{r}");
    };
    wc(&mut s);
    // Done with the call, and with the ticker's grace rounds after it
    // (100 ms): two readings 200 ms apart agree (within 5 s).
    let start = std::time::Instant::now();
    let mut idle_from = ticker_switches(pid).expect("the server has an epoch ticker");
    loop {
        std::thread::sleep(Duration::from_millis(200));
        let now = ticker_switches(pid).expect("ticker");
        if now == idle_from || start.elapsed() > Duration::from_secs(5) {
            break;
        }
        idle_from = now;
    }
    std::thread::sleep(Duration::from_millis(600));
    let idle_to = ticker_switches(pid).expect("ticker");
    // Denied: waking while nothing runs (60 times in 600 ms before).
    assert_eq!(idle_to, idle_from, "the ticker woke while no guest ran");
    // Allowed: a guest runs, the ticker wakes for it.
    wc(&mut s);
    std::thread::sleep(Duration::from_millis(100));
    let after_call = ticker_switches(pid).expect("ticker");
    assert!(
        after_call > idle_to,
        "the ticker did not wake for a guest: {after_call} after {idle_to}"
    );
    assert!(s.close().success());
}
