//! Network and output cases (28-35): sockets with the network off and on,
//! name lookup, capped and lossily decoded output.

use super::*;

/// The cases of this part, run on `c`'s target (`d`) in `sb`.
pub(super) async fn case(c: &Ctx, sb: Sandbox, d: Target, case: u32) -> CaseResult {
    match case {
        // TCP to a listening loopback port: refused with the network off,
        // reaches it with the network on (direct, wasm) or gets a route
        // (docker: its loopback is its own, so the control is the network
        // being there at all).
        28 => {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.set_nonblocking(true).unwrap();
            let addr = l.local_addr().unwrap().to_string();
            let port = l.local_addr().unwrap().port();
            let script = if d.is_docker() {
                "ip route 2>/dev/null | grep -q default && echo route || echo noroute; nc -w 2 127.0.0.1 1 </dev/null; cat /proc/net/dev | grep -c :".to_string()
            } else {
                format!(
                    "python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3).sendall(b'x'); print('connected')\""
                )
            };
            let r = c.run(&sb, &script, &["connect", &addr]).await;
            ensure(
                !r.stdout.contains("connected") && l.accept().is_err(),
                || format!("network off: {r:?}"),
            )?;
            if d.is_docker() {
                // Only the loopback interface exists in the container.
                ensure(r.stdout.trim_end().ends_with('1'), || {
                    format!("interfaces: {r:?}")
                })?;
                return docker_network_twin(c, &sb).await;
            }
            let on = c.sandbox_with(|cfg| cfg.allow_network = true);
            let r = c.run(&on, &script, &["connect", &addr]).await;
            if d == Target::Wasm {
                // wasm has no sockets at all: the control is that the
                // refusal names the capability, not a failed connection.
                return ensure(r.stdout.contains("ERR") || !r.success(), || {
                    format!("wasm sockets: {r:?}")
                });
            }
            l.set_nonblocking(false).unwrap();
            ensure(r.stdout.contains("connected"), || {
                format!("network on: {r:?}")
            })?;
            let (mut s, _) = l.accept().unwrap();
            let mut b = [0u8; 1];
            s.read_exact(&mut b).map_err(|e| e.to_string())
        }
        // DNS, UDP, raw sockets: refused with the network off.
        29 => {
            let script = if d.is_docker() {
                "nslookup example.com 2>&1 | tail -2; echo x | nc -u -w 1 1.1.1.1 53 && echo sent"
                    .to_string()
            } else {
                "python3 -c \"
import socket
for fam, kind in ((socket.AF_INET, socket.SOCK_DGRAM), (socket.AF_INET, socket.SOCK_RAW), (socket.AF_INET6, socket.SOCK_DGRAM)):
try:
    s = socket.socket(fam, kind, 1 if kind == socket.SOCK_RAW else 0); s.sendto(b'x', ('127.0.0.1' if fam == socket.AF_INET else '::1', 53)); print('sent')
except OSError as e:
    print('refused', e.errno)
try:
socket.getaddrinfo('example.com', 80); print('resolved')
except OSError:
print('no dns')
\"".to_string()
            };
            let r = c.run(&sb, &script, &["resolve", "example.com"]).await;
            ensure(
                !r.stdout.contains("sent")
                    && !r.stdout.contains("resolved")
                    && !r.stdout.contains("Address: "),
                || format!("{r:?}"),
            )?;
            ensure(!r.stdout.is_empty() || !r.success(), || {
                format!("nothing ran: {r:?}")
            })
        }
        // Host unix sockets (docker.sock and friends).
        #[cfg(unix)]
        30 => {
            use std::os::unix::net::{UnixDatagram, UnixListener};
            let path = c.t.outside().join("daemon.sock");
            let l = UnixListener::bind(&path).unwrap();
            l.set_nonblocking(true).unwrap();
            // And a datagram one, as /dev/log is.
            let log_path = c.t.outside().join("log.sock");
            let log = UnixDatagram::bind(&log_path).unwrap();
            log.set_nonblocking(true).unwrap();
            let p = path.to_string_lossy();
            let lp = log_path.to_string_lossy();
            let script = if d.is_docker() {
                format!(
                    "ls -l {p} {lp} /var/run/docker.sock /run/docker.sock 2>&1 | grep -c 'No such file'"
                )
            } else {
                format!(
                    "python3 -c \"import socket\ntry:\n    socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b'x', '{lp}'); print('sent')\nexcept OSError as e:\n    print('refused', e.errno)\ns = socket.socket(socket.AF_UNIX); s.connect('{p}'); print('connected')\""
                )
            };
            let r = c.run(&sb, &script, &[]).await;
            let mut buf = [0u8; 8];
            ensure(
                !r.stdout.contains("connected")
                    && !r.stdout.contains("sent")
                    && l.accept().is_err()
                    && log.recv(&mut buf).is_err(),
                || format!("{r:?}"),
            )?;
            if d.is_docker() {
                ensure(r.stdout.trim() == "4", || format!("sockets visible: {r:?}"))?;
            } else {
                ensure(r.stdout.starts_with("refused 1\n"), || format!("{r:?}"))?;
            }
            Ok(())
        }
        // wasi:sockets: denied.
        31 => {
            let r = c.run(&sb, "", &["connect", "127.0.0.1:9"]).await;
            ensure(
                r.stdout.starts_with("ERR")
                    || r.stdout.contains("denied")
                    || r.stdout.contains("not supported")
                    || !r.success(),
                || format!("{r:?}"),
            )?;
            let r = c.run(&sb, "", &["resolve", "localhost"]).await;
            ensure(!r.stdout.contains("127.0.0.1"), || format!("{r:?}"))
        }
        // Output flood: truncated while streaming, host memory bounded.
        32 | 33 => {
            let sb = c.sandbox_with(|cfg| {
                cfg.max_output_bytes = 100_000;
                cfg.timeout = Duration::from_secs(10);
            });
            let (script, wasm) = if case == 32 {
                ("head -c 50000000 /dev/zero", ["flood", "50000000"])
            } else {
                (
                    "head -c 50000000 /dev/zero >&2; echo out",
                    ["flood-err", "50000000"],
                )
            };
            let r = c.run(&sb, script, &wasm).await;
            let total = r.stdout.len() + r.stderr.len();
            ensure(r.truncated && total <= 100_000 && !r.timed_out, || {
                format!(
                    "{} bytes, truncated {}, {:?}",
                    total, r.truncated, r.outcome
                )
            })
        }
        // One huge line, invalid UTF-8, NULs, escapes: capped, decoded lossily.
        34 => {
            let sb = c.sandbox_with(|cfg| cfg.max_output_bytes = 10_000);
            let r = c
                .run(
                    &sb,
                    "printf 'a\\377\\000\\033[2Jb'; head -c 100000 /dev/zero | tr '\\0' x",
                    &["bytes"],
                )
                .await;
            ensure(r.stdout.len() <= 10_000, || {
                format!("{} bytes", r.stdout.len())
            })?;
            if d != Target::Wasm {
                ensure(
                    r.stdout.starts_with("a\u{fffd}\0\u{1b}[2Jb") && r.truncated,
                    || format!("{:?}", &r.stdout[..20.min(r.stdout.len())]),
                )?;
            }
            Ok(())
        }
        // stdin never given: EOF at once.
        35 => {
            let t0 = Instant::now();
            let r = c.run(&sb, "cat; echo eof", &["stdin"]).await;
            ensure(r.success() && t0.elapsed() < Duration::from_secs(5), || {
                format!("{r:?}")
            })?;
            let r = c
                .run_req(&sb, "cat", &["stdin"], |r| r.stdin(b"given".to_vec()))
                .await;
            ensure(
                r.stdout.contains("given") || r.stdout.contains("5 bytes"),
                || format!("control: {r:?}"),
            )
        }
        _ => Err(format!("case {case} is not one of this part's")),
    }
}

/// Docker's twin of case 28: with the network on, a connection through the
/// container's default route reaches a listener of the host's (the
/// container's loopback is its own); with it off, the same address is
/// unreachable and the listener gets nothing.
async fn docker_network_twin(c: &Ctx, off: &Sandbox) -> CaseResult {
    // A listener on every host address that accepts and closes at once,
    // counting connections.
    let l = TcpListener::bind("0.0.0.0:0").map_err(|e| e.to_string())?;
    let port = l.local_addr().map_err(|e| e.to_string())?.port();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    {
        let accepted = accepted.clone();
        std::thread::spawn(move || {
            for s in l.incoming() {
                if s.is_ok() {
                    accepted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            }
        });
    }
    let count = || accepted.load(std::sync::atomic::Ordering::SeqCst);
    let on = c.sandbox_with(|cfg| cfg.allow_network = true);
    // Through the container's default route to the host: its gateway, or
    // under a rootless Podman's slirp4netns (whose gateway is no host
    // address: it keeps the host's loopback out) the host's own address.
    let gw = if c.target == Target::Docker(Engine::PodmanRootless) {
        host_address().ok_or("the host has no address of its own")?
    } else {
        "$(ip route | awk '/^default/ {print $3}')".to_string()
    };
    let r = c
        .run(
            &on,
            &format!("gw={gw}; echo GW=$gw; echo hi | nc -w 3 $gw {port} && echo CONNECTED"),
            &[],
        )
        .await;
    let gw = r
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("GW="))
        .unwrap_or_default()
        .to_string();
    ensure(
        r.stdout.contains("CONNECTED") && gw.parse::<std::net::Ipv4Addr>().is_ok() && count() == 1,
        || format!("network on ({} accepted): {r:?}", count()),
    )?;
    let r = c
        .run(
            off,
            &format!("echo hi | nc -w 3 {gw} {port} && echo CONNECTED"),
            &[],
        )
        .await;
    ensure(
        !r.stdout.contains("CONNECTED")
            && (r.stderr.contains("unreachable") || r.stderr.contains("No route to host")),
        || format!("network off: {r:?}"),
    )?;
    ensure(count() == 1, || {
        "network off: a connection reached the host".into()
    })
}

/// The host's own IPv4 address: the source of its route to the world
/// (a route lookup; nothing is sent).
fn host_address() -> Option<String> {
    let out = std::process::Command::new("ip")
        .args(["-4", "route", "get", "1.1.1.1"])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut words = text.split_whitespace();
    words.find(|w| *w == "src")?;
    words.next().map(str::to_string)
}
