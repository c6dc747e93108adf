//! The cost of the MCP server: three tool calls made in-process through the
//! library (`Toolbox::call`) and the same calls through `toolhost mcp`, in
//! one run (ratios and differences are what to compare; these machines are
//! shared and noisy).
//!
//! Calls: (a) `file_read` of a small file, (b) a trivial WASI tool (`wc -l`
//! on a short stdin), (c) `shell` with `true` on the direct backend.
//! Clients:
//! - in-process: `Toolbox::call` on the runtime `toolhost mcp` uses;
//! - raw pipe: a minimal client in this process writing JSON-RPC lines to the
//!   server's stdin and reading its stdout: the server and the protocol, with
//!   no client library. In-process and raw-pipe calls alternate in blocks of
//!   100, so both series share the machine's noise;
//! - Python SDK: the official `mcp` client (`tests/mcp/client.py`), what an
//!   agent would run: the server, the protocol and that client's own cost.
//!
//! Needs, for the Python client,
//! TOOLHOST_TEST_MCP_PYTHON (scripts/mcp-client-setup; without it that
//! column is skipped). Run: `cargo bench --bench mcp`. `BENCH_ITERS` sets the
//! calls per series (default 2000).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolhost::policy::PermissionPolicy;
use toolhost::tools::toolbox::Toolbox;
use toolhost::{BackendChoice, Sandbox, SandboxConfig};

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

struct Stats {
    p50: Duration,
    p99: Duration,
    per_s: f64,
}

fn stats(mut v: Vec<Duration>) -> Stats {
    v.sort();
    let total: Duration = v.iter().sum();
    Stats {
        p50: pct(&v, 0.5),
        p99: pct(&v, 0.99),
        per_s: v.len() as f64 / total.as_secs_f64(),
    }
}

/// The three calls: (key, tool, arguments).
fn calls() -> Vec<(&'static str, &'static str, Value)> {
    vec![
        ("file_read", "file_read", json!({"path": "small.txt"})),
        (
            "wasm_wc",
            "wc",
            json!({"args": ["-l"], "stdin": "one\ntwo\nthree\n"}),
        ),
        ("shell_true", "shell", json!({"args": ["true"]})),
    ]
}

fn config_text() -> &'static str {
    "backend = \"direct\"\nrate_limit_calls = 0\nshell_allowed_binaries = [\"true\"]\ntimeout = 30\n"
}

/// `toolhost mcp` on raw pipes: a minimal client writing JSON-RPC lines and
/// reading the replies, one call at a time.
struct RawClient {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
    id: u64,
    line: String,
}

impl RawClient {
    fn start(bin: &Path, cfg: &Path, ws: &Path) -> RawClient {
        let mut child = Command::new(bin)
            .args(["mcp", "--config"])
            .arg(cfg)
            .arg("--allow-dir")
            .arg(ws)
            .current_dir(ws)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start toolhost mcp");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut c = RawClient {
            child,
            stdin,
            stdout,
            id: 0,
            line: String::new(),
        };
        c.roundtrip(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}),
        );
        c.stdin
            .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")
            .expect("write");
        c
    }

    fn roundtrip(&mut self, method: &str, params: Value) -> Value {
        self.id += 1;
        let mut msg = serde_json::to_vec(
            &json!({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params}),
        )
        .expect("json");
        msg.push(b'\n');
        self.stdin.write_all(&msg).expect("write");
        self.stdin.flush().expect("flush");
        self.line.clear();
        self.stdout.read_line(&mut self.line).expect("read");
        let v: Value = serde_json::from_str(&self.line).expect("reply is JSON");
        assert_eq!(v["id"], self.id, "{v}");
        v
    }

    fn close(mut self) {
        drop(self.stdin);
        let status = self.child.wait().expect("wait");
        assert!(status.success(), "toolhost mcp: {status}");
    }
}

/// Per call, then the `ping` series.
type Series = (Vec<Vec<Duration>>, Vec<Duration>);

/// Each call in-process and through the raw pipe, in alternating blocks of
/// 100 calls (both series share the machine's noise); then the pipe's ping.
fn in_process_and_raw(
    rt: &tokio::runtime::Runtime,
    tb: &Toolbox,
    raw: &mut RawClient,
    iters: usize,
) -> (Vec<Vec<Duration>>, Series) {
    let block = 100;
    let mut inproc = Vec::new();
    let mut piped = Vec::new();
    for (_, tool, args) in calls() {
        let params = json!({"name": tool, "arguments": args});
        let direct = || {
            let t = Instant::now();
            let r = rt.block_on(tb.call(tool, &args));
            let d = t.elapsed();
            assert!(!r.is_error, "{tool}: {r:?}");
            d
        };
        let mcp = |raw: &mut RawClient| {
            let t = Instant::now();
            let v = raw.roundtrip("tools/call", params.clone());
            let d = t.elapsed();
            assert_eq!(v["result"]["isError"], false, "{tool}: {v}");
            d
        };
        for _ in 0..100 {
            direct();
            mcp(raw);
        }
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for _ in 0..iters.div_ceil(block) {
            a.extend((0..block).map(|_| direct()));
            b.extend((0..block).map(|_| mcp(raw)));
        }
        inproc.push(a);
        piped.push(b);
    }
    let ping: Vec<Duration> = (0..iters + 100)
        .map(|_| {
            let t = Instant::now();
            let v = raw.roundtrip("ping", json!({}));
            let d = t.elapsed();
            assert!(v.get("result").is_some(), "{v}");
            d
        })
        .skip(100)
        .collect();
    (inproc, (piped, ping))
}

/// The calls through `toolhost mcp` with the official Python SDK as client.
fn python_sdk(python: &Path, bin: &Path, cfg: &Path, ws: &Path, iters: usize) -> Series {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut bench: Vec<Value> = calls()
        .iter()
        .map(|(key, tool, args)| json!({"key": key, "tool": tool, "args": args, "iters": iters, "warmup": 100}))
        .collect();
    bench.push(json!({"key": "ping", "ping": true, "iters": iters, "warmup": 100}));
    let plan = json!({
        "server": [bin, "mcp", "--config", cfg, "--allow-dir", ws],
        "cwd": ws,
        "bench": bench,
    });
    let plan_path = ws.parent().expect("parent").join("plan.json");
    std::fs::write(&plan_path, serde_json::to_vec(&plan).expect("json")).expect("plan");
    let out = Command::new(python)
        .arg(root.join("tests/mcp/client.py"))
        .arg(&plan_path)
        .output()
        .expect("run the Python client");
    assert!(
        out.status.success(),
        "python client: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("client output is JSON");
    let series = |key: &str| -> Vec<Duration> {
        let b = &v["bench"][key];
        assert_eq!(b["errors"], 0, "{key}: {b}");
        b["ns"]
            .as_array()
            .expect("ns")
            .iter()
            .map(|n| Duration::from_nanos(n.as_u64().expect("ns")))
            .collect()
    };
    (
        calls().iter().map(|(key, _, _)| series(key)).collect(),
        series("ping"),
    )
}

fn main() {
    let iters: usize = std::env::var("BENCH_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_toolhost"));
    let python = std::env::var_os("TOOLHOST_TEST_MCP_PYTHON").map(PathBuf::from);

    let tmp = tempfile::tempdir().expect("tempdir");
    let ws = tmp.path().join("ws");
    std::fs::create_dir(&ws).expect("ws");
    std::fs::write(
        ws.join("small.txt"),
        "a small file\nof three lines\nfor file_read\n",
    )
    .expect("small file");
    let cfg = tmp.path().join("toolhost.toml");
    std::fs::write(&cfg, config_text()).expect("config");

    // The runtime `toolhost mcp` runs on: like with like.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let config = SandboxConfig::from_file(&cfg).expect("config");
    assert_eq!(config.backend, BackendChoice::Direct);
    let sb = Arc::new(Sandbox::new([&ws], config).expect("sandbox"));
    let tb = rt.block_on(Toolbox::new(sb, PermissionPolicy::default()));

    let mut raw_client = RawClient::start(&bin, &cfg, &ws);
    let (inproc, (raw, raw_ping)) = in_process_and_raw(&rt, &tb, &mut raw_client, iters);
    raw_client.close();
    let py = python
        .as_deref()
        .map(|p| python_sdk(p, &bin, &cfg, &ws, iters));

    println!("\nMCP server cost, {iters} sequential calls per series (p50 / p99 in µs, calls/s)\n");
    println!(
        "| call | in-process p50 / p99 | calls/s | MCP, raw pipe p50 / p99 | calls/s | server adds (p50) | MCP, Python SDK p50 / p99 | calls/s | added with the SDK (p50) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let row = |name: &str, a: Option<&Stats>, r: &Stats, p: Option<&Stats>| {
        let (a_cols, r_add) = match a {
            Some(a) => (
                format!("{:.0} / {:.0} | {:.0}", us(a.p50), us(a.p99), a.per_s),
                format!("{:+.0} µs", us(r.p50) - us(a.p50)),
            ),
            None => ("- | -".to_string(), "-".to_string()),
        };
        let p_cols = match p {
            Some(p) => format!(
                "{:.0} / {:.0} | {:.0} | {}",
                us(p.p50),
                us(p.p99),
                p.per_s,
                a.map_or("-".to_string(), |a| format!(
                    "{:+.0} µs",
                    us(p.p50) - us(a.p50)
                ))
            ),
            None => "skipped | | ".to_string(),
        };
        println!(
            "| {name} | {a_cols} | {:.0} / {:.0} | {:.0} | {r_add} | {p_cols} |",
            us(r.p50),
            us(r.p99),
            r.per_s
        );
    };
    let mut p50 = Vec::new();
    for (i, (key, _, _)) in calls().iter().enumerate() {
        let a = stats(inproc[i].clone());
        let r = stats(raw[i].clone());
        let p = py.as_ref().map(|(c, _)| stats(c[i].clone()));
        row(key, Some(&a), &r, p.as_ref());
        p50.push((r.p50, p.map(|p| p.p50)));
    }
    let r_ping = stats(raw_ping);
    let p_ping = py.as_ref().map(|(_, ping)| stats(ping.clone()));
    row("ping (protocol only)", None, &r_ping, p_ping.as_ref());
    if let Some(p) = &p_ping {
        println!(
            "\nThe Python SDK's own cost per round trip (its ping minus the raw pipe's): {:.0} µs p50",
            us(p.p50) - us(r_ping.p50)
        );
    }
    let ratio = |shell: Duration, wasm: Duration| shell.as_secs_f64() / wasm.as_secs_f64();
    println!(
        "wasm tool vs direct shell through MCP, p50: {:.1}x faster on the raw pipe{}",
        ratio(p50[2].0, p50[1].0),
        match (p50[1].1, p50[2].1) {
            (Some(w), Some(s)) => format!(", {:.1}x with the Python SDK", ratio(s, w)),
            _ => String::new(),
        }
    );
    println!(
        "targets: the server adds under 300 µs p50; wasm through MCP at least 2x faster than shell"
    );
    if python.is_none() {
        println!(
            "(the Python SDK columns need TOOLHOST_TEST_MCP_PYTHON: run scripts/mcp-client-setup)"
        );
    }
}
