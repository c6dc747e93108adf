//! Engines reached over TCP and TLS, and engines that cannot serve a call.

use super::*;

#[tokio::test]
async fn engine_over_tcp_and_clear_refusals() {
    let Some(image) = image() else { return };
    let t = tmp();
    // The same engine on its loopback TCP port.
    let mut cfg = docker_config(&image);
    cfg.docker.host = Some("tcp://127.0.0.1:2375".into());
    let sb = t.sandbox(cfg);
    let r = dsh(&sb, "echo over-tcp").await;
    assert_eq!(r.stdout, "over-tcp\n", "{r:?}");
    assert_eq!(sb.docker_backend().engine_address(), "tcp://127.0.0.1:2375");
    // Unreachable engine.
    let mut cfg = docker_config(&image);
    cfg.docker.host = Some("tcp://127.0.0.1:1".into());
    let r = dsh(&t.sandbox(cfg), "true").await;
    assert_eq!(r.outcome.kind, OutcomeKind::BackendUnavailable, "{r:?}");
    assert!(r.outcome.message.contains("unreachable"), "{r:?}");
    // Missing image, and no image configured.
    let r = dsh(
        &t.sandbox(docker_config("toolhost-no-such-image:0")),
        "true",
    )
    .await;
    assert_eq!(r.outcome.kind, OutcomeKind::BackendUnavailable, "{r:?}");
    assert!(r.outcome.message.contains("docker build"), "{r:?}");
    let mut cfg = docker_config(&image);
    cfg.docker.image = None;
    let r = dsh(&t.sandbox(cfg), "true").await;
    assert_eq!(r.outcome.kind, OutcomeKind::BackendUnavailable, "{r:?}");
    assert!(r.outcome.message.contains("[docker] image"), "{r:?}");
    assert_eq!(r.cli_exit_code(), 125);
}

/// Bind mounts need an engine that sees this machine's filesystem. A dir that
/// exists only in a private mount namespace of toolhost is one the engine
/// cannot see (as a remote engine cannot see any of this machine's dirs).
#[test]
fn an_engine_that_cannot_see_the_allowed_dir_is_a_clear_refusal() {
    let Some(image) = image() else { return };
    let t = tmp();
    let cfg = t.root.join("docker.toml");
    std::fs::write(&cfg, format!("[docker]\nimage = {image:?}\n")).unwrap();
    let private = t.root.join("private");
    std::fs::create_dir(&private).unwrap();
    let run = |mount: &str, ws: &str| {
        let script = format!(
            "{mount} mkdir -p {p}/{ws} && chmod 777 {p}/{ws} && cd {p}/{ws} && exec {bin} run --config {cfg} --backend docker --json -- sh -c 'echo seen'",
            p = private.display(),
            bin = toolhost_bin().display(),
            cfg = cfg.display(),
        );
        Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c", &script])
            .output()
            .unwrap()
    };
    // Allowed twin: the same dir, visible to the engine, runs.
    let out = run("", "visible");
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("seen"),
        "{out:?}"
    );
    // Hidden from the engine by a tmpfs in toolhost's own mount namespace.
    let out = run(
        &format!("mount -t tmpfs tmpfs {} &&", private.display()),
        "hidden",
    );
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    let json = String::from_utf8_lossy(&out.stdout);
    assert!(json.contains("backend_unavailable"), "{json}");
    assert!(json.contains("shares this machine's filesystem"), "{json}");
}

/// A TLS engine endpoint with client certificates: stunnel terminates TLS (the
/// server certificate for 127.0.0.1 and client verification against a test
/// CA) in front of the engine's socket. Certificates come from openssl here.
#[tokio::test]
async fn engine_over_tls_with_client_certificates() {
    let Some(image) = image() else { return };
    let t = tmp();
    let d = t.root.join("tls");
    std::fs::create_dir(&d).unwrap();
    let key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    let script = format!(
        "set -e
        openssl req -x509 {key} -keyout ca-key.pem -out ca.pem -days 2 -subj /CN=toolhost-test-ca
        openssl req -x509 {key} -keyout other-ca-key.pem -out other-ca.pem -days 2 -subj /CN=other-ca
        openssl req {key} -keyout server-key.pem -out server.csr -subj /CN=127.0.0.1
        printf 'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth\\n' > server.ext
        openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -out server.pem -days 2 -extfile server.ext
        printf 'extendedKeyUsage=clientAuth\\n' > client.ext
        openssl req {key} -keyout key.pem -out client.csr -subj /CN=client
        openssl x509 -req -in client.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -out cert.pem -days 2 -extfile client.ext
        openssl req {key} -keyout other-key.pem -out other.csr -subj /CN=intruder
        openssl x509 -req -in other.csr -CA other-ca.pem -CAkey other-ca-key.pem -CAcreateserial -out other-cert.pem -days 2 -extfile client.ext"
    );
    let out = Command::new("sh")
        .args(["-c", &script])
        .current_dir(&d)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    std::fs::write(
        d.join("stunnel.conf"),
        format!(
            "foreground = yes\npid =\n[engine]\naccept = 127.0.0.1:{port}\nconnect = /var/run/docker.sock\ncert = server.pem\nkey = server-key.pem\nCAfile = ca.pem\nverifyChain = yes\nrequireCert = yes\n"
        ),
    )
    .unwrap();
    let _stunnel = Kill(
        Command::new("stunnel")
            .arg("stunnel.conf")
            .current_dir(&d)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("stunnel (scripts/docker-setup installs it)"),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "stunnel did not listen"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let tls = |cert: &str, key: &str, scheme: &str| {
        let mut cfg = docker_config(&image);
        cfg.docker.host = Some(format!("{scheme}://127.0.0.1:{port}"));
        cfg.docker.tls_ca = Some(d.join("ca.pem"));
        cfg.docker.tls_cert = Some(d.join(cert));
        cfg.docker.tls_key = Some(d.join(key));
        t.sandbox(cfg)
    };
    // The client certificate the endpoint trusts: calls run, over tcp:// with
    // TLS files and over https://.
    for scheme in ["tcp", "https"] {
        let r = dsh(&tls("cert.pem", "key.pem", scheme), "echo over-tls").await;
        assert_eq!(r.stdout, "over-tls\n", "{scheme}: {r:?}");
    }
    // One from another CA is refused by the endpoint: no call runs.
    let r = dsh(&tls("other-cert.pem", "other-key.pem", "https"), "echo no").await;
    assert_eq!(r.outcome.kind, OutcomeKind::BackendUnavailable, "{r:?}");
    assert_eq!(r.stdout, "");
    // Plain HTTP to the TLS endpoint, and https without the TLS files.
    let mut cfg = docker_config(&image);
    cfg.docker.host = Some(format!("tcp://127.0.0.1:{port}"));
    let r = dsh(&t.sandbox(cfg), "echo no").await;
    assert_eq!(r.outcome.kind, OutcomeKind::BackendUnavailable, "{r:?}");
    let mut cfg = docker_config(&image);
    cfg.docker.host = Some(format!("https://127.0.0.1:{port}"));
    let r = dsh(&t.sandbox(cfg), "echo no").await;
    assert_eq!(r.outcome.kind, OutcomeKind::BackendUnavailable, "{r:?}");
    assert!(r.outcome.message.contains("tls_ca"), "{r:?}");
}
