//! The server's stdio and sessions: tools cannot reach it, edges, sockets, shared audit logs.

use super::*;

/// Nothing a tool does reaches the server's stdin or stdout: a tool that
/// reads stdin gets EOF at once (docs/src/attacks.md 35) and the requests behind it
/// stay the server's; the protocol's fds are not inherited; /proc/<server>/fd
/// is closed to tools, so writing into the server's stdout or reading its
/// stdin through it fails; the stream stays valid JSON throughout.
#[test]
fn tools_cannot_reach_the_servers_stdio() {
    let (t, cfg) = setup("rate_limit_calls = 0\n");
    let mut s = Raw::start(&t, &cfg);
    let server = s.child.id();

    // `cat` with no stdin, with two more requests already queued behind it.
    let id = 500;
    let mut batch = Vec::new();
    for (i, (tool, args)) in [
        ("shell", json!({"args": ["cat"]})),
        ("file_read", json!({"path": "notes.txt"})),
        ("shell", json!({"args": ["true"]})),
    ]
    .into_iter()
    .enumerate()
    {
        let msg = json!({"jsonrpc": "2.0", "id": id + i, "method": "tools/call", "params": {"name": tool, "arguments": args}});
        batch.extend(serde_json::to_vec(&msg).unwrap());
        batch.push(b'\n');
    }
    s.send(&batch[..batch.len() - 1]);
    let mut got = std::collections::HashMap::new();
    for _ in 0..3 {
        let r = s.recv();
        got.insert(r["id"].as_i64().unwrap(), r["result"].clone());
    }
    let cat = &got[&500];
    assert_eq!(cat["isError"], false, "{cat}");
    assert_eq!(call_meta(cat)["returncode"], 0);
    assert!(
        !text_of(cat).contains("jsonrpc"),
        "cat read the protocol: {cat}"
    );
    assert!(text_of(&got[&501]).contains("hello-notes"));

    // The tool's fds are 0, 1, 2 (and ls's own dir fd): none of the server's.
    let r = s.call("shell", json!({"args": ["ls", "/proc/self/fd"]}));
    let listing = text_of(&r);
    let fds: Vec<&str> = listing
        .lines()
        .take_while(|l| !l.starts_with('['))
        .collect();
    assert!(fds.len() <= 4, "inherited fds: {fds:?}");
    for fd in ["0", "1", "2"] {
        assert!(fds.contains(&fd), "{fds:?}");
    }

    // The protocol left fds 0 and 1: stdin is /dev/null, and the pipes to
    // this test are on other fds (found here, as root, by their inodes: the
    // pipes this process holds an end of; the server's other pipes, such as
    // those of a supervisor made ahead of the next call, come and go).
    let link = |p: String| std::fs::read_link(p).map(|l| l.to_string_lossy().into_owned());
    let our_in = link(format!("/proc/self/fd/{}", s.stdin_fd)).unwrap();
    let ours: Vec<String> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter_map(|e| link(e.path().to_string_lossy().into_owned()).ok())
        .filter(|t| t.starts_with("pipe:"))
        .collect();
    assert!(ours.contains(&our_in), "{our_in} among {ours:?}");
    assert_eq!(link(format!("/proc/{server}/fd/0")).unwrap(), "/dev/null");
    let mut proto = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{server}/fd")).unwrap() {
        let e = e.unwrap();
        let fd = e.file_name().to_string_lossy().into_owned();
        let Ok(target) = link(format!("/proc/{server}/fd/{fd}")) else {
            continue;
        };
        if ours.contains(&target) {
            proto.push(fd);
        }
    }
    assert!(proto.len() >= 2, "protocol fds of the server: {proto:?}");
    // Through /proc the server's fds are out of a tool's reach, for reading
    // its input...
    for fd in proto.iter().map(String::as_str).chain(["0", "1"]) {
        let r = s.call(
            "shell",
            json!({"args": ["cat", format!("/proc/{server}/fd/{fd}")]}),
        );
        assert_eq!(r["isError"], true, "fd {fd}: {r}");
        assert!(text_of(&r).contains("Permission denied"), "fd {fd}: {r}");
        // ...and for writing into its output.
        let r = s.call(
            "shell",
            json!({"args": ["tee", format!("/proc/{server}/fd/{fd}")], "stdin": "INJECTED-LINE\n"}),
        );
        assert_eq!(r["isError"], true, "fd {fd}: {r}");
        assert!(text_of(&r).contains("Permission denied"), "fd {fd}: {r}");
    }
    // The allowed twin: tee into a workspace file works, and its output is
    // the tool's, inside the result.
    let r = s.call(
        "shell",
        json!({"args": ["tee", "copy.txt"], "stdin": "TEE-OK\n"}),
    );
    assert_eq!(r["isError"], false, "{r}");
    assert!(text_of(&r).contains("TEE-OK"));
    assert_eq!(
        std::fs::read_to_string(t.ws().join("copy.txt")).unwrap(),
        "TEE-OK\n"
    );
    // Every line so far was a JSON reply (recv checks), and the next is too.
    s.still_works();
    assert!(s.close().success());
}

/// What a session's edges do: messages before `initialize` are ignored rather
/// than ending the session; a cancelled call's process is gone; a client that
/// stops reading does not make the server buffer without bound, and nothing is
/// lost once it reads again; at the end of input a call slower than the SDK's
/// 5-second grace is still answered, and a last line without a newline counts.
#[test]
fn session_edges_cancel_backpressure_and_end_of_input() {
    let (t, cfg) = setup("rate_limit_calls = 0\nmax_output_bytes = 4194304\n");
    let mut s = Raw::spawn(&t, &cfg);
    s.send(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    s.send(br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#);
    s.send(br#"{"jsonrpc":"2.0","id":99,"result":{}}"#);
    s.init();
    s.still_works();

    // Cancel: the tool's process goes, the session stays.
    let marker = "31.4159";
    let id = s.call_async("shell", json!({"args": ["sleep", marker]}));
    let start = std::time::Instant::now();
    while processes_with(marker).is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "sleep never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id, "reason": "test"}});
    s.send(&serde_json::to_vec(&cancel).unwrap());
    let start = std::time::Instant::now();
    while !processes_with(marker).is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the cancelled call's process is still there: {:?}",
            processes_with(marker)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // A reply to the cancelled request may come (clients ignore it); skip it.
    s.next_id += 1;
    let probe = s.next_id;
    let msg = json!({"jsonrpc": "2.0", "id": probe, "method": "ping"});
    s.send(&serde_json::to_vec(&msg).unwrap());
    loop {
        let r = s.recv();
        if r["id"] == probe {
            break;
        }
        assert_eq!(r["id"], id, "{r}");
    }

    // Backpressure: 300 reads of a 1 MiB file with nobody reading the
    // replies (300 MiB if buffered), then every reply, in full.
    std::fs::write(t.ws().join("big.txt"), "x".repeat(1 << 20)).unwrap();
    let n = 300;
    let pid = s.child.id();
    let ids: Vec<i64> = (0..n)
        .map(|_| s.call_async("file_read", json!({"path": "big.txt"})))
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    let rss_kb: u64 = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    eprintln!("server RSS with 300 unread replies of 1 MiB: {rss_kb} KiB");
    assert!(
        rss_kb < 192 * 1024,
        "server RSS {rss_kb} KiB with a client that does not read"
    );
    let mut seen = std::collections::HashSet::new();
    for _ in 0..n {
        let r = s.recv();
        assert_eq!(text_of(&r["result"]).len(), 1 << 20, "{}", r["id"]);
        seen.insert(r["id"].as_i64().unwrap());
    }
    assert_eq!(seen, ids.into_iter().collect());
    s.still_works();

    // End of input: a 6 s call (beyond the SDK's 5 s grace) and a last line
    // without a newline are both answered before the server exits.
    let slow = s.call_async("shell", json!({"args": ["sleep", "6"]}));
    let stdin = s.stdin.as_mut().unwrap();
    stdin
        .write_all(br#"{"jsonrpc":"2.0","id":777,"method":"ping"}"#)
        .unwrap();
    stdin.flush().unwrap();
    drop(s.stdin.take());
    let mut got = Vec::new();
    for _ in 0..2 {
        let r = s
            .lines
            .recv_timeout(Duration::from_secs(30))
            .expect("answer");
        let r: Value = serde_json::from_slice(&r).unwrap();
        got.push(r["id"].as_i64().unwrap());
        if r["id"] == slow {
            assert_eq!(r["result"]["isError"], false, "{r}");
        }
    }
    got.sort();
    assert_eq!(got, vec![slow, 777]);
    assert!(s.close().success());
}

/// A client that hands over one non-blocking unix socket as stdin and stdout
/// (libuv does) gets a working session, not an early end of input.
#[test]
fn works_over_a_non_blocking_socket() {
    let (t, cfg) = setup("rate_limit_calls = 0\n");
    let (mut s, sock) = Raw::spawn_on_socket(&t, &cfg);
    s.init();
    std::thread::sleep(Duration::from_millis(300));
    s.still_works();
    let r = s.call("shell", json!({"args": ["cat"], "stdin": "via socket"}));
    assert!(text_of(&r).contains("via socket"), "{r}");
    // The end of input on a socket is its shutdown.
    sock.shutdown(std::net::Shutdown::Write).unwrap();
    assert!(s.close().success());
}

/// Attack 50, processes: four `toolhost mcp` sessions share one audit log and
/// make 500 calls each at once. The log is one valid chain of 2,000 records
/// (before, each process chained from its own last hash and the chain broke
/// at line 2, after which no session would start).
#[test]
fn four_sessions_sharing_an_audit_log_make_one_chain() {
    let (t, cfg) = setup("rate_limit_calls = 0\n");
    let log = t.root.join("audit.jsonl");
    let mut f = std::fs::OpenOptions::new().append(true).open(&cfg).unwrap();
    writeln!(f, "audit_log = {:?}", log.to_str().unwrap()).unwrap();
    drop(f);
    let mut input = Vec::new();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}});
    input.extend(serde_json::to_vec(&init).unwrap());
    input.extend(b"\n{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n");
    for id in 0..500 {
        let msg = json!({"jsonrpc": "2.0", "id": 10 + id, "method": "tools/call", "params": {"name": "file_stat", "arguments": {"path": "notes.txt"}}});
        input.extend(serde_json::to_vec(&msg).unwrap());
        input.push(b'\n');
    }
    let input_path = t.root.join("input.jsonl");
    std::fs::write(&input_path, &input).unwrap();
    let servers: Vec<_> = (0..4)
        .map(|i| {
            let out = std::fs::File::create(t.root.join(format!("out{i}.jsonl"))).unwrap();
            Raw::command(&t, &cfg)
                .stdin(std::fs::File::open(&input_path).unwrap())
                .stdout(out)
                .spawn()
                .unwrap()
        })
        .collect();
    for mut s in servers {
        assert!(s.wait().unwrap().success());
    }
    for i in 0..4 {
        let out = std::fs::read_to_string(t.root.join(format!("out{i}.jsonl"))).unwrap();
        let answered = out.lines().filter(|l| l.contains("\"result\"")).count();
        assert_eq!(answered, 501, "server {i}");
    }
    let out = toolhost(&t.ws(), &["audit", "verify", log.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(": 2000 records, chain intact"),
        "{out:?}"
    );
    // And a fifth session starts and extends it.
    let mut raw = Raw::start(&t, &cfg);
    raw.still_works();
    assert!(raw.close().success());
    let out = toolhost(&t.ws(), &["audit", "verify", log.to_str().unwrap()], &[]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(": 2001 records"),
        "{out:?}"
    );
}

/// Attack 48: one `tools/call` line of 50 MB holding a 25-million-element
/// array (under the 101 MiB message cap) took the server to 4.75 GB. It is
/// now refused before it is parsed, as a tool error with its id, and the
/// server's peak memory stays a small multiple of the cap; the session goes
/// on (the allowed twin: a call with an array of 1,000 elements is parsed and
/// answered as usual).
#[test]
fn one_message_of_many_values_is_refused_with_bounded_memory() {
    let (t, cfg) = setup("");
    let mut raw = Raw::start(&t, &cfg);
    let twin = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "file_read", "arguments": {"path": "notes.txt", "x": vec![0; 1000]}}});
    raw.send(&serde_json::to_vec(&twin).unwrap());
    let r = raw.recv();
    assert_eq!(r["id"], 8, "{r}");
    assert!(!text_of(&r["result"]).contains("JSON values"), "{r}");
    let mut line = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"file_list","arguments":{"x":["#.to_vec();
    line.extend(b"0,".repeat(25_000_000));
    line.extend(b"0]}}}");
    raw.send(&line);
    drop(line);
    let r = raw.recv();
    assert_eq!(r["id"], 7, "{r}");
    // A tools/call that cannot be taken is a tool error the model can read.
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert!(text_of(&r["result"]).contains("JSON values"), "{r}");
    raw.still_works();
    let status = std::fs::read_to_string(format!("/proc/{}/status", raw.child.id())).unwrap();
    let peak_kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    println!("peak RSS of the server: {} MiB", peak_kb / 1024);
    // The cap is 101 MiB here (twice the 50 MiB file cap plus 1 MiB).
    assert!(peak_kb < 3 * 101 * 1024, "peak RSS {peak_kb} KiB");
    assert!(raw.close().success());
}
