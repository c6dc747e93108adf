//! Kernel isolation of the `direct` backend on Linux (issue 6): Landlock
//! filesystem and network rules, the empty network namespace, the seccomp
//! filter, the private tmp, capability drops and the `strict` level failing
//! closed. Every denied case runs next to its allowed twin: the same program
//! under `isolation = "off"` or with the network on, so the layer is what makes
//! the difference.

use std::io::Read;
use std::net::{TcpListener, UdpSocket};
use std::time::Duration;

use toolhost::isolation::IsolationLevel;
use toolhost::{AllowedDirSpec, OutcomeKind, RunOutput, RunRequest, SandboxConfig};

use crate::util::*;

fn level(l: IsolationLevel) -> SandboxConfig {
    SandboxConfig {
        isolation: l,
        ..config()
    }
}

fn applied(r: &RunOutput) -> Vec<&'static str> {
    r.isolation
        .as_ref()
        .map(|i| i.applied.clone())
        .unwrap_or_default()
}

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

#[tokio::test]
async fn landlock_confines_reads_and_writes_to_the_allowed_dirs() {
    let t = Tmp::new();
    let ro = t.root.join("ro");
    std::fs::create_dir(&ro).unwrap();
    std::fs::write(ro.join("data"), "ro-data").unwrap();
    let secret = t.outside().join("secret.txt");
    let before = sha256_file(&secret);
    let script = format!(
        "cat {secret}; echo planted > {out}/planted; echo w > ws-file && cat ws-file; \
         cat {ro}/data; echo x > {ro}/new; : > {ro}/data",
        secret = secret.display(),
        out = t.outside().display(),
        ro = ro.display()
    );
    let dirs = || {
        [
            AllowedDirSpec::read_write(t.ws()),
            AllowedDirSpec::read_only(ro.clone()),
        ]
    };

    let hardened = toolhost::Sandbox::new(dirs(), level(IsolationLevel::BestEffort)).unwrap();
    let r = sh(&hardened, &script).await;
    assert!(applied(&r).contains(&"landlock_fs"), "{r:?}");
    // Denied: the canary outside, a write outside, a write and a truncation
    // in the read-only dir.
    assert!(!r.stdout.contains(CANARY), "{r:?}");
    assert!(r.stderr.contains("Permission denied"), "{r:?}");
    assert!(!t.outside().join("planted").exists());
    assert!(!ro.join("new").exists());
    assert_eq!(std::fs::read_to_string(ro.join("data")).unwrap(), "ro-data");
    assert_eq!(sha256_file(&secret), before);
    // Allowed: the workspace, and reading the read-only dir.
    assert!(r.stdout.contains("w\nro-data"), "{r:?}");

    // Twin: the same script without the kernel layers reads the canary and
    // writes outside (the host user may): Landlock made the difference.
    let off = toolhost::Sandbox::new(dirs(), level(IsolationLevel::Off)).unwrap();
    let r = sh(&off, &script).await;
    assert!(r.stdout.contains(CANARY), "{r:?}");
    assert!(t.outside().join("planted").exists());
    assert_eq!(applied(&r), vec!["no_new_privs", "subreaper"]);
}

#[tokio::test]
async fn system_dirs_are_readable_and_not_writable() {
    let t = Tmp::new();
    let sb = t.sandbox(level(IsolationLevel::BestEffort));
    // Programs, libraries, the resolver config and /proc are readable...
    let r = sh(&sb, "ls /usr/bin >/dev/null && head -c 1 /etc/passwd && cat /proc/self/status | grep -c NoNewPrivs").await;
    assert!(r.success(), "{r:?}");
    assert_eq!(r.stdout, "r1\n");
    // ...but nothing of the host outside them is writable, not even /tmp or /dev/shm.
    let marker = format!("toolhost-isolation-{}", std::process::id());
    let r = sh(
        &sb,
        &format!("touch /tmp/{marker} /dev/shm/{marker} /usr/{marker} 2>&1; echo done"),
    )
    .await;
    // Refused by the read-only view of the host where it applies (the mount
    // is checked before Landlock), else by Landlock.
    let refusal = if applied(&r).contains(&"readonly_host") {
        "Read-only file system"
    } else {
        "Permission denied"
    };
    assert_eq!(r.stdout.matches(refusal).count(), 3, "{r:?}");
    for d in ["/tmp", "/dev/shm", "/usr"] {
        assert!(!std::path::Path::new(d).join(&marker).exists(), "{d}");
    }
    // Custom read paths: a dir not on the list stays closed until listed.
    let extra = t.root.join("tools");
    std::fs::create_dir(&extra).unwrap();
    std::fs::write(extra.join("note"), "listed").unwrap();
    let r = run(&sb, &["cat", extra.join("note").to_str().unwrap()]).await;
    assert!(r.stderr.contains("Permission denied"), "{r:?}");
    let mut cfg = level(IsolationLevel::BestEffort);
    cfg.isolation_read_paths.push(extra.clone());
    let sb = t.sandbox(cfg);
    let r = run(&sb, &["cat", extra.join("note").to_str().unwrap()]).await;
    assert_eq!(r.stdout, "listed", "{r:?}");
}

/// Read paths that are files are opened once and kept while the dir
/// holding them reads the same by its path; a file replaced by rename, one
/// created where none was and one removed are each seen at the next call,
/// and a file of that dir that is not on the list stays closed.
#[tokio::test]
async fn read_path_files_follow_renames_creations_and_removals() {
    let t = Tmp::new();
    let etc = t.root.join("etc");
    std::fs::create_dir(&etc).unwrap();
    let (conf, later, other) = (etc.join("conf"), etc.join("later"), etc.join("other"));
    std::fs::write(&conf, "one").unwrap();
    std::fs::write(&other, "not listed").unwrap();
    let mut cfg = level(IsolationLevel::BestEffort);
    cfg.isolation_read_paths.push(conf.clone());
    cfg.isolation_read_paths.push(later.clone());
    let sb = t.sandbox(cfg);
    // Past the window in which a change to the dir could share its
    // timestamps (then the look at the files is kept).
    std::thread::sleep(Duration::from_millis(2200));
    let cat = |p: &std::path::Path| {
        let p = p.to_str().unwrap().to_string();
        let sb = &sb;
        async move { run(sb, &["cat", &p]).await }
    };
    for _ in 0..2 {
        assert_eq!(cat(&conf).await.stdout, "one");
        let r = cat(&other).await;
        assert!(r.stderr.contains("Permission denied"), "{r:?}");
        assert!(cat(&later).await.stderr.contains("No such file"));
    }
    std::fs::write(etc.join("conf.new"), "two").unwrap();
    std::fs::rename(etc.join("conf.new"), &conf).unwrap();
    let r = cat(&conf).await;
    assert_eq!(r.stdout, "two", "a renamed-over file read as before: {r:?}");
    std::fs::write(&later, "three").unwrap();
    assert_eq!(cat(&later).await.stdout, "three");
    std::fs::remove_file(&conf).unwrap();
    assert!(cat(&conf).await.stderr.contains("No such file"));
    let r = cat(&other).await;
    assert!(r.stderr.contains("Permission denied"), "{r:?}");
    // The same with the dir aged again, so the new look was kept.
    std::fs::write(&conf, "four").unwrap();
    std::thread::sleep(Duration::from_millis(2200));
    assert_eq!(cat(&conf).await.stdout, "four");
    std::fs::write(etc.join("conf.new"), "five").unwrap();
    std::fs::rename(etc.join("conf.new"), &conf).unwrap();
    assert_eq!(cat(&conf).await.stdout, "five");
    if !is_root() {
        return;
    }
    // A mount over the listed file (which leaves the dir's times alone) is
    // seen at the next call, and once it is gone the file below is again
    // the one read; the mount's source, not listed, is never readable.
    std::thread::sleep(Duration::from_millis(2200));
    assert_eq!(cat(&conf).await.stdout, "five");
    let src = t.outside().join("src");
    std::fs::write(&src, "mounted").unwrap();
    let mount = |args: &[&std::path::Path]| {
        std::process::Command::new(args[0])
            .args(&args[1..])
            .status()
            .unwrap()
            .success()
    };
    let (m, u) = (
        std::path::Path::new("mount"),
        std::path::Path::new("umount"),
    );
    assert!(mount(&[m, std::path::Path::new("--bind"), &src, &conf]));
    let r = cat(&conf).await;
    assert!(mount(&[u, &conf]), "the mount is not held by toolhost");
    assert_eq!(r.stdout, "mounted", "{r:?}");
    std::fs::write(&src, CANARY).unwrap();
    assert_eq!(cat(&conf).await.stdout, "five");
    let r = cat(&src).await;
    assert!(r.stderr.contains("Permission denied"), "{r:?}");
    assert!(!r.stdout.contains(CANARY));
}

#[tokio::test]
async fn each_call_gets_a_private_tmp_removed_after_it() {
    let t = Tmp::new();
    let sb = t.sandbox(level(IsolationLevel::BestEffort));
    let script = "echo \"$TMPDIR\"; mkdir \"$TMPDIR/d\" && echo data > \"$TMPDIR/d/f\" && ln -s / \"$TMPDIR/root\" && cat \"$TMPDIR/d/f\"";
    let a = sh(&sb, script).await;
    let b = sh(&sb, script).await;
    assert!(a.success() && b.success(), "{a:?} {b:?}");
    assert!(applied(&a).contains(&"private_tmp"));
    let (ta, tb) = (
        a.stdout.lines().next().unwrap(),
        b.stdout.lines().next().unwrap(),
    );
    assert_ne!(ta, tb);
    assert!(a.stdout.ends_with("data\n"));
    // Removed in the background; shutdown waits for it.
    sb.shutdown().await;
    // Gone with everything in it (the symlink was removed, not followed).
    assert!(!std::path::Path::new(ta).exists() && !std::path::Path::new(tb).exists());
    assert!(std::path::Path::new("/usr/bin").exists());
}

/// A DNS server on loopback that answers every A query with 10.1.2.3.
fn fake_dns() -> (u16, std::thread::JoinHandle<u32>) {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(4))).unwrap();
    let port = sock.local_addr().unwrap().port();
    let h = std::thread::spawn(move || {
        let mut answered = 0;
        let mut buf = [0u8; 512];
        while let Ok((n, from)) = sock.recv_from(&mut buf) {
            let mut resp = buf[..n].to_vec();
            resp[2] = 0x81;
            resp[3] = 0x80;
            resp[7] = 1; // ANCOUNT
            resp.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 10, 1, 2, 3]);
            let _ = sock.send_to(&resp, from);
            answered += 1;
        }
        answered
    });
    (port, h)
}

const NET_PROBE: &str = r#"
import socket, struct, sys
tcp_port, dns_port = int(sys.argv[1]), int(sys.argv[2])
try:
    socket.create_connection(("127.0.0.1", tcp_port), timeout=3).sendall(b"hello")
    print("tcp: connected")
except OSError as e:
    print("tcp:", e.strerror)
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(3)
    q = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0) + b"\x07example\x03com\x00\x00\x01\x00\x01"
    s.sendto(q, ("127.0.0.1", dns_port))
    r = s.recv(512)
    print("dns: answer", ".".join(str(b) for b in r[-4:]))
except OSError as e:
    print("dns:", e.strerror)
try:
    socket.getaddrinfo("pypi.org", 443)
    print("resolver: resolved")
except OSError as e:
    print("resolver: failed")
"#;

#[tokio::test]
async fn network_off_is_enforced_by_the_kernel_and_on_works() {
    let t = Tmp::new();
    t.write("probe.py", NET_PROBE);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let tcp_port = listener.local_addr().unwrap().port().to_string();

    // Off: no TCP connection reaches the loopback listener, no DNS datagram
    // reaches the server, and the system resolver fails.
    let (dns_port, dns) = fake_dns();
    let sb = t.sandbox(level(IsolationLevel::BestEffort));
    let r = run(
        &sb,
        &["python3", "probe.py", &tcp_port, &dns_port.to_string()],
    )
    .await;
    let layers = applied(&r);
    for l in ["seccomp_net", "landlock_net"] {
        assert!(layers.contains(&l), "{l}: {r:?}");
    }
    if is_root() {
        assert!(layers.contains(&"netns"), "{r:?}");
    }
    assert!(r.stdout.contains("tcp: Operation not permitted"), "{r:?}");
    assert!(r.stdout.contains("dns: Operation not permitted"), "{r:?}");
    assert!(r.stdout.contains("resolver: failed"), "{r:?}");
    assert!(listener.accept().is_err(), "a connection got through");
    assert_eq!(dns.join().unwrap(), 0, "a DNS query got through");

    // On: the same probe connects and gets its DNS answer.
    let (dns_port, dns) = fake_dns();
    let mut cfg = level(IsolationLevel::BestEffort);
    cfg.allow_network = true;
    let sb = t.sandbox(cfg);
    let r = run(
        &sb,
        &["python3", "probe.py", &tcp_port, &dns_port.to_string()],
    )
    .await;
    assert!(r.stdout.contains("tcp: connected"), "{r:?}");
    assert!(r.stdout.contains("dns: answer 10.1.2.3"), "{r:?}");
    let layers = applied(&r);
    assert!(
        !layers.contains(&"netns") && !layers.contains(&"seccomp_net"),
        "{r:?}"
    );
    listener.set_nonblocking(false).unwrap();
    let (mut conn, _) = listener.accept().unwrap();
    let mut got = String::new();
    conn.read_to_string(&mut got).unwrap();
    assert_eq!(got, "hello");
    assert_eq!(dns.join().unwrap(), 1);
}

#[tokio::test]
async fn abstract_unix_sockets_of_the_host_are_out_of_reach() {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener};
    let name = format!("toolhost-test-{}", std::process::id());
    let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let listener = UnixListener::bind_addr(&addr).unwrap();
    listener.set_nonblocking(true).unwrap();
    let t = Tmp::new();
    t.write(
        "probe.py",
        &format!(
            "import socket\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect('\\0{name}'); s.sendall(b'x'); print('connected')\nexcept OSError as e:\n    print('refused', e.strerror)\n"
        ),
    );
    // With the network on there is no network namespace: Landlock's scope
    // (ABI 6+) is what refuses. The twin without isolation connects.
    let mut cfg = level(IsolationLevel::BestEffort);
    cfg.allow_network = true;
    let r = run(&t.sandbox(cfg), &["python3", "probe.py"]).await;
    if applied(&r).contains(&"landlock_scope") {
        assert!(r.stdout.starts_with("refused"), "{r:?}");
        assert!(listener.accept().is_err());
    }
    let r = run(
        &t.sandbox(level(IsolationLevel::BestEffort)),
        &["python3", "probe.py"],
    )
    .await;
    assert!(r.stdout.starts_with("refused"), "{r:?}");
    assert!(listener.accept().is_err());
    let r = run(
        &t.sandbox(level(IsolationLevel::Off)),
        &["python3", "probe.py"],
    )
    .await;
    assert_eq!(r.stdout, "connected\n", "{r:?}");
    listener.set_nonblocking(false).unwrap();
    let (mut c, _) = listener.accept().unwrap();
    let mut b = [0u8; 1];
    c.read_exact(&mut b).unwrap();
}

const SYSCALL_PROBE: &str = r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def call(name, *args):
    r = libc.syscall(*args)
    print(name, "ok" if r >= 0 else os.strerror(ctypes.get_errno()))
# x86_64 and aarch64 numbers
import platform
x86 = platform.machine() == "x86_64"
call("keyctl", 250 if x86 else 219, 0, -3, 0)
call("unshare", 272 if x86 else 97, 0x04000000)
call("ptrace", 101 if x86 else 117, 16, os.getppid(), 0, 0)
call("bpf", 321 if x86 else 280, 0, 0, 0)
call("io_uring_setup", 425, 0, 0)
call("clone3", 435, 0, 0)
call("mount", 165 if x86 else 40, 0, 0, 0, 0, 0)
call("pidfd_getfd", 438, -1, 0, 0)
call("getpid", 39 if x86 else 172)
"#;

#[tokio::test]
async fn seccomp_refuses_what_no_tool_needs() {
    let t = Tmp::new();
    t.write("probe.py", SYSCALL_PROBE);
    let r = run(
        &t.sandbox(level(IsolationLevel::BestEffort)),
        &["python3", "probe.py"],
    )
    .await;
    assert!(applied(&r).contains(&"seccomp"), "{r:?}");
    let want = "keyctl Operation not permitted\nunshare Operation not permitted\n\
                ptrace Operation not permitted\nbpf Operation not permitted\n\
                io_uring_setup Operation not permitted\nclone3 Function not implemented\n\
                mount Operation not permitted\npidfd_getfd Operation not permitted\ngetpid ok\n";
    assert_eq!(r.stdout, want, "{r:?}");
    // Threads and subprocesses still work (clone without namespace flags).
    let r = run(
        &t.sandbox(level(IsolationLevel::BestEffort)),
        &["python3", "-c", "import threading, subprocess; t = threading.Thread(target=lambda: print('thread', flush=True)); t.start(); t.join(); subprocess.run(['echo', 'child'])"],
    )
    .await;
    assert_eq!(r.stdout, "thread\nchild\n", "{r:?}");
    // Twin: without the filter the same calls reach the kernel, which
    // answers with its own errors for their (deliberately bad) arguments, and
    // the session keyring answers.
    let r = run(
        &t.sandbox(level(IsolationLevel::Off)),
        &["python3", "probe.py"],
    )
    .await;
    let want = "keyctl ok\nbpf Invalid argument\nio_uring_setup Bad address\n\
                clone3 Invalid argument\nmount Bad address\npidfd_getfd Bad file descriptor\ngetpid ok\n";
    let got: String = r
        .stdout
        .lines()
        .filter(|l| !l.starts_with("unshare") && !l.starts_with("ptrace"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(got, want, "{r:?}");
}

const METADATA_PROBE: &str = r#"
import os, sys
host, ro = sys.argv[1], sys.argv[2]
def t(name, f):
    try:
        f(); print(name, "ok")
    except OSError as e:
        print(name, e.errno)
t("chmod", lambda: os.chmod(host, 0o666))
t("chown", lambda: os.chown(host, 1, 1))
t("utime", lambda: os.utime(host, (0, 0)))
t("xattr", lambda: os.setxattr(host, "user.toolhost", b"1"))
fd = os.open(ro, os.O_RDONLY)
t("fchmod", lambda: os.fchmod(fd, 0o666))
t("ws", lambda: (open("mine", "w").close(), os.chmod("mine", 0o700), os.utime("mine", (0, 0))))
tmp = os.path.join(os.environ.get("TMPDIR", "."), "x")
t("tmp", lambda: (open(tmp, "w").close(), os.chmod(tmp, 0o600), os.setxattr(tmp, "user.toolhost", b"1")))
st = os.fstat(0)
print("stdin", os.major(st.st_rdev), os.minor(st.st_rdev))
t("stdin-fchmod", lambda: os.fchmod(0, st.st_mode & 0o7777))
t("stdin-futimens", lambda: os.utime(0))
"#;

/// A root tool cannot change a host file's metadata, which Landlock does
/// not confine: in the call's mount namespace every host mount is
/// read-only but its writable places. chmod, chown, times and extended
/// attributes of a host file outside the allowed dirs (named by path), and
/// fchmod of a file of a read-only allowed dir (opened to read), each fail
/// with EROFS, and the file's mode, owner, times and attributes are as
/// before; the same on a file of the workspace and of the private tmp
/// work. A call without stdin has `/dev/null` at fd 0, opened in the view:
/// fchmod and futimens on it fail with EROFS too (opened in toolhost's
/// namespace, it would be the host's, writable). Twin under `off`: each
/// change to the host file is made, and to the host's `/dev/null` through
/// fd 0 (its own mode, and its times set to now).
#[tokio::test]
async fn a_root_tool_cannot_change_the_metadata_of_host_files() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if !is_root() {
        return;
    }
    let t = Tmp::new();
    let host = t.outside().join("host.txt");
    std::fs::write(&host, CANARY).unwrap();
    std::fs::set_permissions(&host, std::fs::Permissions::from_mode(0o640)).unwrap();
    let ro = t.root.join("ro");
    std::fs::create_dir(&ro).unwrap();
    let ro_file = ro.join("file");
    std::fs::write(&ro_file, "ro").unwrap();
    std::fs::set_permissions(&ro_file, std::fs::Permissions::from_mode(0o640)).unwrap();
    t.write("probe.py", METADATA_PROBE);
    let look = |p: &std::path::Path| {
        let m = std::fs::metadata(p).unwrap();
        // The attribute the probe sets: absent (ENODATA) unless it did.
        let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
        let mut buf = [0u8; 8];
        // SAFETY: NUL-terminated strings and a buffer of the length given.
        let xattr = unsafe {
            libc::getxattr(
                c.as_ptr(),
                c"user.toolhost".as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        (m.mode(), m.uid(), m.gid(), m.mtime(), m.mtime_nsec(), xattr)
    };
    let (host_before, ro_before) = (look(&host), look(&ro_file));
    assert_eq!(host_before.5, -1, "no attribute yet");
    let argv = [
        "python3",
        "probe.py",
        host.to_str().unwrap(),
        ro_file.to_str().unwrap(),
    ];
    let dirs = || {
        [
            AllowedDirSpec::read_write(t.ws()),
            AllowedDirSpec::read_only(ro.clone()),
        ]
    };
    let sb = toolhost::Sandbox::new(dirs(), level(IsolationLevel::BestEffort)).unwrap();
    let r = run(&sb, &argv).await;
    assert!(applied(&r).contains(&"readonly_host"), "{r:?}");
    assert_eq!(
        r.stdout,
        "chmod 30\nchown 30\nutime 30\nxattr 30\nfchmod 30\nws ok\ntmp ok\n\
         stdin 1 3\nstdin-fchmod 30\nstdin-futimens 30\n",
        "{r:?}"
    );
    assert_eq!(look(&host), host_before);
    assert_eq!(look(&ro_file), ro_before);
    let mine = std::fs::metadata(t.ws().join("mine")).unwrap();
    assert_eq!((mine.mode() & 0o7777, mine.mtime()), (0o700, 0));

    // Twin: without the kernel layers each change is made.
    let off = toolhost::Sandbox::new(dirs(), level(IsolationLevel::Off)).unwrap();
    let r = run(&off, &argv).await;
    assert_eq!(
        r.stdout,
        "chmod ok\nchown ok\nutime ok\nxattr ok\nfchmod ok\nws ok\ntmp ok\n\
         stdin 1 3\nstdin-fchmod ok\nstdin-futimens ok\n",
        "{r:?}"
    );
    let after = look(&host);
    assert_eq!(
        (after.0 & 0o7777, after.1, after.3, after.5),
        (0o666, 1, 0, 1)
    );
}

/// The read-only view keeps at most 32 places writable (the call's private
/// tmp is one). With 31 writable allowed dirs `strict` runs with the view;
/// with 32 it refuses the call, naming the layer, and the tool writes
/// nothing; best effort runs it and reports the layer missing.
#[tokio::test]
async fn strict_refuses_a_call_with_more_writable_places_than_the_view_keeps() {
    if !is_root() {
        return;
    }
    let t = Tmp::new();
    let dirs = |n: usize| -> Vec<AllowedDirSpec> {
        let mut d = vec![AllowedDirSpec::read_write(t.ws())];
        for i in 1..n {
            let p = t.root.join(format!("w{i}"));
            std::fs::create_dir_all(&p).unwrap();
            d.push(AllowedDirSpec::read_write(p));
        }
        d
    };
    let go = |n: usize, l: IsolationLevel| {
        let sb = toolhost::Sandbox::new(dirs(n), level(l)).unwrap();
        async move { sh(&sb, "echo ran > ran.txt && echo ok").await }
    };
    let r = go(31, IsolationLevel::Strict).await;
    assert_eq!(r.stdout, "ok\n", "{r:?}");
    assert!(applied(&r).contains(&"readonly_host"), "{r:?}");
    std::fs::remove_file(t.ws().join("ran.txt")).unwrap();

    let r = go(32, IsolationLevel::Strict).await;
    assert_eq!(r.outcome.kind, OutcomeKind::IsolationUnavailable, "{r:?}");
    assert!(
        r.outcome.message.contains("readonly_host") && r.outcome.message.contains("33 writable"),
        "{r:?}"
    );
    assert!(!t.ws().join("ran.txt").exists());

    let r = go(32, IsolationLevel::BestEffort).await;
    assert_eq!(r.stdout, "ok\n", "{r:?}");
    let iso = r.isolation.unwrap();
    assert!(!iso.applied.contains(&"readonly_host"), "{iso:?}");
    assert!(iso.missing.contains(&"readonly_host"), "{iso:?}");
}

/// A read-only allowed dir nested in a writable one stays read-only (the
/// writable dir's Landlock rights reach into it; a read-only mount of it
/// in the call's namespace does not let them): a write, a chmod and a
/// rename of it fail, and so does a rename of the dir between it and the
/// writable one (which would move it away and let a new one take its
/// place, from a review); its canary and mode are as before, while a
/// writable dir nested in it, and the outer dir, are written. For a root
/// toolhost (the view of the host) and an unprivileged one (through its
/// user namespace). Twin under `off`: each is made.
#[test]
fn a_read_only_dir_nested_in_a_writable_one_stays_read_only() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::os::unix::process::CommandExt;
    let t = Tmp::new();
    std::fs::set_permissions(&t.root, std::fs::Permissions::from_mode(0o755)).unwrap();
    let ro = t.ws().join("a").join("ro");
    let inner = ro.join("w");
    std::fs::create_dir_all(&inner).unwrap();
    std::fs::write(ro.join("canary"), CANARY).unwrap();
    let (uid, gid) = (65534u32, 65534u32);
    if is_root() {
        for p in [
            t.ws(),
            t.ws().join("a"),
            ro.clone(),
            inner.clone(),
            ro.join("canary"),
        ] {
            std::os::unix::fs::chown(p, Some(uid), Some(gid)).unwrap();
        }
    }
    let script = "echo x > a/ro/canary; echo write=$?; chmod 700 a/ro; echo chmod=$?; \
                  mv a/ro a/ro2; echo mv=$?; mv a b; echo mvparent=$?; \
                  echo y > a/ro/w/inner; echo inner=$?; echo z > outer; echo outer=$?";
    let run = |isolation: &str, unprivileged: bool| {
        let ws = t.ws();
        let ro_arg = format!("{}:ro", ro.display());
        let mut cmd = std::process::Command::new(toolhost_bin());
        cmd.args(["run", "--json", "--isolation", isolation, "--allow-dir"])
            .arg(&ws)
            .args(["--allow-dir", &ro_arg, "--allow-dir"])
            .arg(&inner)
            .args(["--", "sh", "-c", script])
            .current_dir(&ws)
            .stdin(std::process::Stdio::null())
            .env_remove("TOOLHOST_CONFIG")
            .env_remove("TOOLHOST_LOG");
        if unprivileged && is_root() {
            cmd.uid(uid).gid(gid);
        }
        let out = cmd.output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        v
    };
    let mode = || std::fs::metadata(&ro).unwrap().mode() & 0o7777;
    let before = mode();
    for unprivileged in [false, true] {
        if unprivileged && !is_root() {
            continue; // the run above was already unprivileged
        }
        let v = run("best-effort", unprivileged);
        assert_eq!(
            v["stdout"], "write=2\nchmod=1\nmv=1\nmvparent=1\ninner=0\nouter=0\n",
            "unprivileged {unprivileged}: {v}"
        );
        let applied = v["isolation"]["applied"].as_array().unwrap();
        assert!(applied.iter().any(|l| l == "protected_paths"), "{v}");
        assert_eq!(std::fs::read_to_string(ro.join("canary")).unwrap(), CANARY);
        assert_eq!(mode(), before);
        assert!(ro.is_dir() && !t.ws().join("b").exists());
        assert_eq!(std::fs::read_to_string(inner.join("inner")).unwrap(), "y\n");
        std::fs::remove_file(inner.join("inner")).unwrap();
        std::fs::remove_file(t.ws().join("outer")).unwrap();
    }
    // Twin: without the kernel layers nothing holds it.
    let v = run("off", false);
    assert_eq!(
        v["stdout"], "write=0\nchmod=0\nmv=0\nmvparent=0\ninner=2\nouter=0\n",
        "{v}"
    );
    let moved = t.ws().join("b").join("ro2");
    assert_eq!(
        std::fs::read_to_string(moved.join("canary")).unwrap(),
        "x\n"
    );
    assert_eq!(std::fs::metadata(&moved).unwrap().mode() & 0o7777, 0o700);
}

/// `sh -c script` in a private mount namespace (root): the bind mounts it
/// makes end with it. No stdin, and toolhost's config and log unset.
fn in_private_mount_ns(script: &str) -> std::process::Output {
    std::process::Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", script])
        .env_remove("TOOLHOST_CONFIG")
        .env_remove("TOOLHOST_LOG")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

/// The same through a bind mount (from a review): a read-only allowed dir
/// named by a path through a bind mount of the writable dir is the same
/// directory, which Landlock's rights reach through the writable dir's
/// path; it is read-only by both paths, for a root and an unprivileged
/// toolhost. Twin: a read-only dir that no writable dir reaches gets no
/// mount, and the writable dir is written. In a private mount namespace
/// (root, as in CI).
#[test]
fn a_read_only_dir_reached_through_a_bind_mount_stays_read_only() {
    use std::os::unix::fs::PermissionsExt;
    if !is_root() {
        return;
    }
    let t = Tmp::new();
    std::fs::set_permissions(&t.root, std::fs::Permissions::from_mode(0o755)).unwrap();
    let ws = t.ws();
    std::fs::create_dir_all(ws.join("ro")).unwrap();
    std::fs::write(ws.join("ro").join("f"), CANARY).unwrap();
    let alias = t.root.join("alias");
    let apart = t.root.join("apart");
    std::fs::create_dir_all(&alias).unwrap();
    std::fs::create_dir_all(&apart).unwrap();
    for p in [ws.clone(), ws.join("ro"), ws.join("ro").join("f")] {
        std::os::unix::fs::chown(p, Some(65534), Some(65534)).unwrap();
    }
    let run = |user: &str, ro: &std::path::Path| {
        let script = format!(
            "mount --bind {ws} {alias} && cd {ws} && exec {user} {bin} run --allow-dir {ws} --allow-dir {ro}:ro -- \
             sh -c 'echo x > {ws}/ro/f; echo w=$?; echo x > {alias}/ro/f; echo a=$?; echo ok > out; echo out=$?'",
            ws = ws.display(),
            alias = alias.display(),
            ro = ro.display(),
            bin = toolhost_bin().display(),
        );
        let out = in_private_mount_ns(&script);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let unprivileged = "setpriv --reuid=65534 --regid=65534 --clear-groups";
    for user in ["", unprivileged] {
        assert_eq!(
            run(user, &alias.join("ro")),
            "w=2\na=2\nout=0\n",
            "user {user:?}"
        );
        assert_eq!(
            std::fs::read_to_string(ws.join("ro").join("f")).unwrap(),
            CANARY
        );
        std::fs::remove_file(ws.join("out")).unwrap();
    }
    // Twin: a read-only dir apart from the writable one; the workspace's
    // own `ro` is then only the writable dir's, by both paths (unprivileged:
    // a root toolhost's view keeps only the writable dir's own path
    // writable).
    assert_eq!(run(unprivileged, &apart), "w=0\na=0\nout=0\n");
    assert_eq!(
        std::fs::read_to_string(ws.join("ro").join("f")).unwrap(),
        "x\n"
    );
}

/// Host mounts below a held read-only dir and its pinned parents stay as
/// the host has them (from a review: the pins and binds were made without
/// the mounts below them, which hid them, and an unprivileged toolhost's
/// calls failed): a writable allowed dir that is a host mount inside the
/// read-only dir is written, a sibling host mount is read, and the private
/// tmp, reached through a symlinked `TMPDIR` inside the read-only dir, is
/// written; the read-only dir itself is not. Root and unprivileged, in a
/// private mount namespace (root, as in CI).
#[test]
fn host_mounts_below_a_held_dir_stay_as_the_host_has_them() {
    use std::os::unix::fs::PermissionsExt;
    if !is_root() {
        return;
    }
    let t = Tmp::new();
    let ws = t.ws();
    for d in ["a/ro/w", "a/ro/tmpbase", "a/cache"] {
        std::fs::create_dir_all(ws.join(d)).unwrap();
    }
    let wdata = t.root.join("wdata");
    let cachefs = t.root.join("cachefs");
    std::fs::create_dir_all(&wdata).unwrap();
    std::fs::create_dir_all(&cachefs).unwrap();
    std::fs::write(cachefs.join("c"), CANARY).unwrap();
    let link = t.root.join("tl");
    std::os::unix::fs::symlink(ws.join("a/ro/tmpbase"), &link).unwrap();
    for d in [
        &t.root,
        &ws,
        &ws.join("a"),
        &ws.join("a/ro"),
        &ws.join("a/ro/w"),
        &ws.join("a/ro/tmpbase"),
        &ws.join("a/cache"),
        &wdata,
        &cachefs,
    ] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let script = format!(
        "mount --bind {wdata} {ws}/a/ro/w && mount --bind {cachefs} {ws}/a/cache && cd {ws} && \
         for u in '' 'setpriv --reuid=65534 --regid=65534 --clear-groups'; do \
         TMPDIR={link} $u {bin} run --allow-dir {ws} --allow-dir {ws}/a/ro:ro --allow-dir {ws}/a/ro/w -- \
         sh -c 'echo x > a/ro/w/n$(id -u); echo w=$?; cat a/cache/c; echo; echo x > $TMPDIR/x; echo tmp=$?; echo y > a/ro/y; echo ro=$?'; done",
        wdata = wdata.display(),
        cachefs = cachefs.display(),
        ws = ws.display(),
        link = link.display(),
        bin = toolhost_bin().display(),
    );
    let out = in_private_mount_ns(&script);
    let once = format!("w=0\n{CANARY}\ntmp=0\nro=2\n");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        once.repeat(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The writes went to the host's mount, not to the dir it covers.
    assert!(wdata.join("n0").exists() && wdata.join("n65534").exists());
    assert!(!ws.join("a/ro/w/n0").exists() && !ws.join("a/ro/y").exists());
}

/// A mount, unmounted (lazily) on drop, so that a failed assertion leaves
/// none.
struct Mounted(std::ffi::CString);

impl Drop for Mounted {
    fn drop(&mut self) {
        // SAFETY: a NUL-terminated path owned by self.
        unsafe { libc::umount2(self.0.as_ptr(), libc::MNT_DETACH) };
    }
}

/// A tmpfs mounted at `at` (made if missing), on the host.
fn mount_tmpfs(at: &std::path::Path) -> Mounted {
    std::fs::create_dir_all(at).unwrap();
    let c = std::ffi::CString::new(at.to_str().unwrap()).unwrap();
    // SAFETY: NUL-terminated strings; no data argument.
    let rc = unsafe {
        libc::mount(
            c"tmpfs".as_ptr(),
            c.as_ptr(),
            c"tmpfs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    Mounted(c)
}

/// The read-only view holds in every call of a sandbox, those that take
/// the spare and the supervisor made ahead of them too: a root tool cannot
/// chmod a host file (the mode is as before), while it can in the
/// workspace. A host mount made between calls is in the next call, and
/// read-only there: anything made ahead of it must not be used. A view
/// made ahead would show it writable where the host's mounts propagate
/// (the place is a shared mount here, as `/` is on a systemd host), and
/// not at all where they do not. Twin under `off`: the chmod is made.
#[tokio::test]
async fn the_view_holds_in_every_call_and_after_a_host_mount() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if !is_root() {
        return;
    }
    let t = Tmp::new();
    let host = t.outside().join("host.txt");
    std::fs::write(&host, CANARY).unwrap();
    std::fs::set_permissions(&host, std::fs::Permissions::from_mode(0o640)).unwrap();
    // The host's mounts below `outside` propagate to the calls' views.
    let out = std::ffi::CString::new(t.outside().to_str().unwrap()).unwrap();
    // SAFETY: NUL-terminated strings; no data argument.
    let rc = unsafe {
        libc::mount(
            out.as_ptr(),
            out.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    let _bound = Mounted(out.clone());
    // SAFETY: as above.
    let rc = unsafe {
        libc::mount(
            std::ptr::null(),
            out.as_ptr(),
            std::ptr::null(),
            libc::MS_SHARED,
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    let script = |p: &std::path::Path| {
        format!(
            "stat -c %a {p}; chmod 666 {p} 2>/dev/null; echo rc=$?; touch mine && chmod 600 mine; echo ws=$?",
            p = p.display()
        )
    };
    let sb = t.sandbox(level(IsolationLevel::BestEffort));
    for i in 0..4 {
        let r = sh(&sb, &script(&host)).await;
        assert_eq!(r.stdout, "640\nrc=1\nws=0\n", "call {i}: {r:?}");
        assert!(applied(&r).contains(&"readonly_host"), "{r:?}");
    }
    assert_eq!(std::fs::metadata(&host).unwrap().mode() & 0o7777, 0o640);
    // What is made ahead of the next call is made by now.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let m = t.outside().join("m");
    let _mounted = mount_tmpfs(&m);
    let f = m.join("f");
    std::fs::write(&f, CANARY).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).unwrap();
    for i in 0..2 {
        let r = sh(&sb, &script(&f)).await;
        assert_eq!(
            r.stdout, "640\nrc=1\nws=0\n",
            "after the mount, call {i}: {r:?}"
        );
    }
    assert_eq!(std::fs::metadata(&f).unwrap().mode() & 0o7777, 0o640);
    // Twin: without the kernel layers the chmod is made.
    let off = t.sandbox(level(IsolationLevel::Off));
    let r = sh(&off, &script(&f)).await;
    assert_eq!(r.stdout, "640\nrc=0\nws=0\n", "{r:?}");
    assert_eq!(std::fs::metadata(&f).unwrap().mode() & 0o7777, 0o666);
}

#[tokio::test]
async fn a_root_tool_cannot_make_device_nodes_or_administer_the_network() {
    if !is_root() {
        // Without root neither mknod nor CAP_NET_ADMIN exist to take away;
        // the Landlock rights are checked by the tests above.
        return;
    }
    let t = Tmp::new();
    // A character device (the unhardened level's own Landlock domain already
    // refuses block devices).
    let script = "mknod dev c 1 3 && echo made; grep CapBnd /proc/self/status";
    let r = sh(&t.sandbox(level(IsolationLevel::BestEffort)), script).await;
    assert!(
        !r.stdout.contains("made") && !t.ws().join("dev").exists(),
        "{r:?}"
    );
    let bnd = r.stdout.trim().rsplit('\t').next().unwrap_or("");
    let caps = u64::from_str_radix(bnd, 16).unwrap();
    for cap in [12, 13, 16, 17, 19, 21, 27] {
        assert_eq!(caps & (1 << cap), 0, "cap {cap} still in {bnd}");
    }
    // Twin: without isolation root can (then we clean up).
    let r = sh(&t.sandbox(level(IsolationLevel::Off)), script).await;
    assert!(r.stdout.contains("made"), "{r:?}");
    std::fs::remove_file(t.ws().join("dev")).unwrap();
}

#[test]
fn strict_fails_closed_when_a_layer_cannot_be_applied() {
    let t = Tmp::new();
    // No usable temp dir for toolhost: the private tmp cannot be made.
    let args = |lvl: &str| {
        vec![
            "run".to_string(),
            "--json".into(),
            "--isolation".into(),
            lvl.into(),
            "--".into(),
            "sh".into(),
            "-c".into(),
            "echo ran > ran.txt".into(),
        ]
    };
    let go = |lvl: &str| {
        let a = args(lvl);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        toolhost(&t.ws(), &a, &[("TMPDIR", "/nonexistent/toolhost-test")])
    };
    let out = go("strict");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["outcome"]["kind"], "isolation_unavailable", "{v}");
    assert!(
        v["outcome"]["message"]
            .as_str()
            .unwrap()
            .contains("private_tmp"),
        "{v}"
    );
    assert_eq!(out.status.code(), Some(125));
    assert!(!t.ws().join("ran.txt").exists());
    // Best effort runs the call and says what was missing.
    let out = go("best-effort");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["returncode"], 0, "{v}");
    assert!(t.ws().join("ran.txt").exists());
    assert_eq!(
        v["isolation"]["missing"],
        serde_json::json!(["private_tmp"]),
        "{v}"
    );
    // The other layers still hold.
    let applied = v["isolation"]["applied"].as_array().unwrap();
    assert!(applied.iter().any(|l| l == "landlock_fs"), "{v}");
}

#[tokio::test]
async fn strict_runs_with_every_required_layer_on_this_host() {
    let t = Tmp::new();
    let r = sh(&t.sandbox(level(IsolationLevel::Strict)), "echo ok").await;
    assert_eq!(r.outcome.kind, OutcomeKind::Exited, "{r:?}");
    let iso = r.isolation.unwrap();
    assert_eq!(iso.level, IsolationLevel::Strict);
    for l in [
        "no_new_privs",
        "landlock_fs",
        "seccomp",
        "seccomp_net",
        "subreaper",
        "private_tmp",
    ] {
        assert!(iso.applied.contains(&l), "{l}: {iso:?}");
    }
}

fn check_json(t: &Tmp, args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, serde_json::Value) {
    let mut a = vec!["check", "--json"];
    a.extend_from_slice(args);
    let out = toolhost(&t.ws(), &a, env);
    let v = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code(), v)
}

fn check_line<'a>(v: &'a serde_json::Value, backend: &str, name: &str) -> &'a serde_json::Value {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["backend"] == backend && c["name"] == name)
        .unwrap_or_else(|| panic!("no {backend}/{name} in {v}"))
}

#[test]
fn check_reports_what_this_host_enforces() {
    let t = Tmp::new();
    let (code, v) = check_json(&t, &[], &[]);
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["ok"], true);
    assert_eq!(v["configured"]["isolation"], "best-effort");
    // The Landlock line names the ABI the kernel answered with.
    let ll = check_line(&v, "direct", "landlock");
    assert!(ll["detail"].as_str().unwrap().starts_with("ABI "), "{ll}");
    // The probe call ran through the configured isolation and lists its layers.
    let probe = check_line(&v, "direct", "probe call");
    let detail = probe["detail"].as_str().unwrap();
    for l in ["landlock_fs", "seccomp", "subreaper", "private_tmp"] {
        assert!(detail.contains(l), "{l}: {probe}");
    }
    assert_eq!(check_line(&v, "wasm", "engine")["status"], "ok");
    // Root, or an unprivileged user with user namespaces: a PID namespace per call.
    assert_eq!(check_line(&v, "direct", "pid namespace")["status"], "ok");
    assert!(detail.contains("pidns"), "{probe}");
    // The table form says the same.
    let out = toolhost(&t.ws(), &["check"], &[]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("probe call") && table.contains("result: ok"),
        "{table}"
    );

    // Strict on a host where a layer cannot be applied: not met, exit 1.
    let (code, v) = check_json(
        &t,
        &["--isolation", "strict"],
        &[("TMPDIR", "/nonexistent/toolhost-test")],
    );
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(v["ok"], false);
    assert!(
        v["problems"][0].as_str().unwrap().contains("private_tmp"),
        "{v}"
    );
    // Best effort on the same host is met, and the missing layer is named.
    let (code, v) = check_json(
        &t,
        &["--isolation", "best-effort"],
        &[("TMPDIR", "/nonexistent/toolhost-test")],
    );
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(check_line(&v, "direct", "probe call")["status"], "partial");
}

#[test]
fn check_fails_when_the_configured_docker_backend_cannot_run() {
    let Some(image) = crate::docker::image() else {
        return;
    };
    let t = Tmp::new();
    // No image configured: the docker backend cannot run calls.
    let (code, v) = check_json(&t, &["--backend", "docker"], &[]);
    assert_eq!(code, Some(1), "{v}");
    assert!(v["problems"][0].as_str().unwrap().contains("image"), "{v}");
    assert_eq!(check_line(&v, "docker", "engine")["status"], "ok");
    // An image that is not there, and one that is.
    let cfg = t.root.join("cfg.toml");
    std::fs::write(&cfg, "[docker]\nimage = \"toolhost-no-such-image:0\"\n").unwrap();
    let (code, v) = check_json(
        &t,
        &["--backend", "docker", "--config", cfg.to_str().unwrap()],
        &[],
    );
    assert_eq!(code, Some(1), "{v}");
    std::fs::write(&cfg, format!("[docker]\nimage = \"{image}\"\n")).unwrap();
    let (code, v) = check_json(
        &t,
        &["--backend", "docker", "--config", cfg.to_str().unwrap()],
        &[],
    );
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(check_line(&v, "docker", "image")["status"], "ok");
    assert!(
        check_line(&v, "docker", "engine")["detail"]
            .as_str()
            .unwrap()
            .starts_with("Docker ")
    );
    // The direct backend does not need the engine: the same host is fine for it.
    let (code, _) = check_json(&t, &["--config", cfg.to_str().unwrap()], &[]);
    assert_eq!(code, Some(0));
}

const UNIX_PROBE: &str = r#"
import socket, sys
daemon, log = sys.argv[1], sys.argv[2]
a, b = socket.socketpair(); a.sendall(b'p'); print('pair', b.recv(1).decode())
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET); a.sendall(b'q'); print('seqpacket', b.recv(1).decode())
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(daemon); s.sendall(b'x'); print('connected')
except OSError as e:
    print('refused', e.strerror)
for name, make in (
    ('dgram', lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)),
    ('raw', lambda: socket.socket(socket.AF_UNIX, socket.SOCK_RAW)),
    ('dgram pair', lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)[0]),
):
    try:
        make().sendto(name.encode(), log); print(name, 'sent')
    except OSError as e:
        print(name, 'refused', e.strerror)
"#;

/// With the network off, a tool reaches no host unix socket by its path:
/// neither a daemon's stream socket (`connect` refused) nor a datagram one
/// such as `/dev/log` (datagram unix sockets and pairs refused: they
/// `sendto` any path). Connected pairs of stream and seqpacket sockets
/// still work. Twin under `off`: the same probe reaches both.
#[tokio::test]
async fn host_unix_sockets_are_unreachable_with_the_network_off() {
    use std::os::unix::net::{UnixDatagram, UnixListener};
    let t = Tmp::new();
    // A host daemon's socket, by path (as /var/run/docker.sock would be),
    // and a host log socket (as /dev/log is).
    let path = t.outside().join("daemon.sock");
    let listener = UnixListener::bind(&path).unwrap();
    listener.set_nonblocking(true).unwrap();
    let log_path = t.outside().join("log.sock");
    let log = UnixDatagram::bind(&log_path).unwrap();
    log.set_nonblocking(true).unwrap();
    t.write("probe.py", UNIX_PROBE);
    let argv = [
        "python3",
        "probe.py",
        path.to_str().unwrap(),
        log_path.to_str().unwrap(),
    ];
    let r = run(&t.sandbox(level(IsolationLevel::BestEffort)), &argv).await;
    assert!(applied(&r).contains(&"seccomp_net"), "{r:?}");
    assert_eq!(
        r.stdout,
        "pair p\nseqpacket q\nrefused Operation not permitted\n\
         dgram refused Operation not permitted\nraw refused Operation not permitted\n\
         dgram pair refused Operation not permitted\n",
        "{r:?}"
    );
    assert!(listener.accept().is_err(), "the daemon was reached");
    let mut buf = [0u8; 64];
    assert!(log.recv(&mut buf).is_err(), "a datagram got through");
    // Twin: without the kernel layers the same probe reaches both.
    let r = run(&t.sandbox(level(IsolationLevel::Off)), &argv).await;
    assert_eq!(
        r.stdout, "pair p\nseqpacket q\nconnected\ndgram sent\nraw sent\ndgram pair sent\n",
        "{r:?}"
    );
    listener.set_nonblocking(false).unwrap();
    let (mut c, _) = listener.accept().unwrap();
    let mut b = [0u8; 1];
    c.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"x");
    let mut got = Vec::new();
    while let Ok(n) = log.recv(&mut buf) {
        got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    assert_eq!(got, ["dgram", "raw", "dgram pair"]);
}

/// Containment by a PID namespace: the tool is pid 2 under the namespace's
/// init, in a namespace that is not the host's; a `kill -9 -1` from a root
/// tool reaches only the call's own processes (its background sleeper dies, a
/// host process of the same user survives); signals the kernel sends still
/// arrive (the CPU limit is SIGXCPU, not the hard limit's SIGKILL). Twin
/// under `off`: the tool's pid is a host pid, in the host's namespace.
#[tokio::test]
async fn each_call_runs_in_a_pid_namespace_of_its_own() {
    let t = Tmp::new();
    let host_ns = std::fs::read_link("/proc/self/ns/pid").unwrap();
    let script = "echo $$; readlink /proc/self/ns/pid";
    let r = sh(&t.sandbox(level(IsolationLevel::BestEffort)), script).await;
    assert!(applied(&r).contains(&"pidns"), "{r:?}");
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines.first(), Some(&"2"), "{r:?}");
    assert_ne!(lines.get(1).copied(), host_ns.to_str(), "{r:?}");

    let off = sh(&t.sandbox(level(IsolationLevel::Off)), script).await;
    let lines: Vec<&str> = off.stdout.lines().collect();
    let pid: i32 = lines[0].parse().unwrap();
    assert!(pid > 2, "{off:?}");
    assert_eq!(lines.get(1).copied(), host_ns.to_str(), "{off:?}");
    assert!(!applied(&off).contains(&"pidns"), "{off:?}");

    // kill -1 only once the layers that keep it in the call are known to hold.
    if is_root() && applied(&r).contains(&"landlock_scope") {
        let mut canary = std::process::Command::new("sleep")
            .arg("9641")
            .spawn()
            .unwrap();
        let r = sh(
            &t.sandbox(level(IsolationLevel::BestEffort)),
            "sleep 9642 & echo started; kill -9 -1; sleep 0.5; echo after",
        )
        .await;
        assert!(r.stdout.starts_with("started\n"), "{r:?}");
        assert!(
            crate::util::alive(canary.id() as i32),
            "the host process survived"
        );
        assert_eq!(survivors("sleep 9642"), Vec::<i32>::new());
        canary.kill().unwrap();
        canary.wait().unwrap();
    }

    let sb = t.sandbox(SandboxConfig {
        max_cpu_seconds: 1,
        ..level(IsolationLevel::BestEffort)
    });
    let r = sh(&sb, "while :; do :; done").await;
    assert_eq!(r.outcome.kind, OutcomeKind::CpuLimit, "{r:?}");
    assert_eq!(r.outcome.signal, Some(libc::SIGXCPU), "{r:?}");
    assert!(applied(&r).contains(&"pidns"), "{r:?}");
}

/// The call's own processes can name its PID namespace's init (pid 1: for a
/// root toolhost the supervisor itself, which ends the call on a kill
/// request): what they send it neither ends the call nor changes its
/// result: by `kill`, by `rt_sigqueueinfo` claiming to come from outside
/// the namespace (sender pid 0), or after a flood of real-time signals
/// past the pending-signal limit (the kernel then drops the siginfo, and the
/// signal reads as a `kill` from outside). Landlock's signal scoping refuses
/// all of them where the kernel has it; the supervisor takes a kill request
/// only once toolhost has marked it in the call's shared memory. toolhost's
/// own kill request at the timeout does end the call.
#[tokio::test]
async fn signals_to_pid_1_from_inside_the_call_do_not_end_it() {
    let t = Tmp::new();
    let sb = t.sandbox(level(IsolationLevel::BestEffort));
    // rt_sigqueueinfo (129 on x86_64) with si_code SI_QUEUE (-1) and si_pid
    // 0; then 100,000 SIGRTMIN+1 (35) to pass the pending-signal limit, and
    // kill requests with their siginfo dropped.
    let forge = if cfg!(target_arch = "x86_64") {
        r#"for s in 12 15 2 1 10; do perl -e 'my $s = shift; syscall(129, 1, $s, pack("iiiiiI", $s, 0, -1, 0, 0, 0) . "\0" x 104)' $s; done;
           perl -e 'kill 35, 1 for 1 .. 100000; syscall(234, 1, 1, $_) for 12, 15, 2, 1';"#
    } else {
        ""
    };
    let r = sh(
        &sb,
        &format!(
            "for s in USR2 TERM INT HUP USR1 CHLD; do kill -$s 1 2>/dev/null; done; \
             {forge} sleep 0.3; echo done"
        ),
    )
    .await;
    assert!(applied(&r).contains(&"pidns"), "{r:?}");
    assert!(r.success(), "{r:?}");
    assert_eq!(r.stdout, "done\n", "{r:?}");

    let sb = t.sandbox(SandboxConfig {
        timeout: Duration::from_millis(500),
        ..level(IsolationLevel::BestEffort)
    });
    let r = sh(&sb, "kill -USR2 1 2>/dev/null; sleep 30; echo late").await;
    assert!(r.timed_out, "{r:?}");
    assert!(r.duration < Duration::from_secs(10), "{r:?}");
    assert!(!r.stdout.contains("late"), "{r:?}");
}

/// An unprivileged toolhost (here: the CLI run as `nobody` when the tests run
/// as root) gets its network and PID namespaces through a user namespace that
/// maps only its own uid: TCP to a listening loopback port of the host fails
/// and the listener sees nothing, the tool is pid 2 and keeps its uid, and a
/// `setsid` sleeper is gone after the call. Twin under `off`, same user: the
/// connection reaches the listener.
#[test]
fn an_unprivileged_toolhost_gets_user_network_and_pid_namespaces() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let t = Tmp::new();
    let (uid, gid) = if is_root() {
        (65534u32, 65534u32)
    } else {
        // SAFETY: getuid and getgid cannot fail.
        unsafe { (libc::getuid(), libc::getgid()) }
    };
    std::fs::set_permissions(&t.root, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(t.ws(), Some(uid), Some(gid)).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let script = format!(
        "echo pid=$$; cat /proc/self/uid_map; readlink /proc/self/ns/net; \
         python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3); print('connected')\" 2>/dev/null; \
         setsid sleep 9651 > /dev/null 2>&1 & echo started"
    );
    let run = |isolation: &str| {
        let mut cmd = std::process::Command::new(toolhost_bin());
        cmd.args([
            "run",
            "--json",
            "--isolation",
            isolation,
            "--",
            "sh",
            "-c",
            &script,
        ])
        .current_dir(t.ws())
        .stdin(std::process::Stdio::null())
        .env_remove("TOOLHOST_CONFIG")
        .env_remove("TOOLHOST_LOG");
        if is_root() {
            cmd.uid(uid).gid(gid);
        }
        let out = cmd.output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        v
    };
    let accepted = |l: &TcpListener| {
        std::thread::sleep(Duration::from_millis(200));
        l.accept().is_ok()
    };

    let v = run("best-effort");
    let out = v["stdout"].as_str().unwrap();
    let applied: Vec<&str> = v["isolation"]["applied"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l.as_str())
        .collect();
    for l in ["userns", "netns", "pidns", "landlock_fs", "seccomp"] {
        assert!(applied.contains(&l), "{l}: {v}");
    }
    assert!(out.starts_with("pid=2\n"), "{v}");
    let map: Vec<&str> = out
        .lines()
        .nth(1)
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(
        map,
        [uid.to_string(), uid.to_string(), "1".to_string()],
        "{v}"
    );
    assert!(!out.contains("connected") && out.contains("started"), "{v}");
    assert!(!accepted(&listener), "the listener saw a connection: {v}");
    // The network namespace is not the host's (seccomp_net alone would also
    // have stopped the connection).
    let host_net = std::fs::read_link("/proc/self/ns/net").unwrap();
    let net = out.lines().nth(2).unwrap_or("");
    assert!(
        net.starts_with("net:[") && Some(net) != host_net.to_str(),
        "{v}"
    );
    assert_eq!(survivors("sleep 9651"), Vec::<i32>::new());

    let v = run("off");
    let out = v["stdout"].as_str().unwrap();
    assert!(out.contains("connected"), "{v}");
    assert_eq!(out.lines().nth(2), host_net.to_str(), "{v}");
    assert!(accepted(&listener), "twin: the listener saw it");
    assert!(!out.starts_with("pid=2\n"), "{v}");
    assert_eq!(survivors("sleep 9651"), Vec::<i32>::new());
}

/// A held `.git` renamed away by another call and made anew by the
/// holding call is moved aside after it: a new dir, and the same file
/// linked back (`util::a_protected_path_renamed_away_and_made_anew`).
#[tokio::test]
async fn a_protected_path_renamed_away_by_another_call_and_made_anew_is_moved_aside() {
    for anew in [Anew::Dir, Anew::LinkedBack, Anew::Removed] {
        let t = Tmp::new();
        let mut cfg = level(IsolationLevel::BestEffort);
        cfg.timeout = Duration::from_secs(30);
        let sb = t.sandbox(cfg);
        a_protected_path_renamed_away_and_made_anew(&sb, &t.ws(), false, anew).await;
    }
}

/// Case 44 on `direct`, what the contract row does not see: the call's mount
/// namespace leaves no mount behind in toolhost's, strict reports the layer,
/// a cwd inside the workspace still resolves relative paths under the
/// mounts, and a sandbox with nothing to protect reports it applied too.
#[tokio::test]
async fn protected_paths_are_mounts_of_the_call_only() {
    let t = Tmp::new();
    let git = t.ws().join(".git");
    std::fs::create_dir_all(git.join("hooks")).unwrap();
    std::fs::write(git.join("config"), "[core]\n").unwrap();
    std::fs::create_dir_all(t.ws().join("sub")).unwrap();
    let ws = t.ws().display().to_string();
    let mounts_under_ws = || {
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .filter(|l| l.contains(&ws))
            .count()
    };
    let before = mounts_under_ws();
    let sb = t.sandbox(level(IsolationLevel::Strict));
    let r = sb
        .run(
            RunRequest::new([
                "sh",
                "-c",
                "printf x > ../.git/config; echo rc=$?; printf ok > ../ok",
            ])
            .cwd(t.ws().join("sub")),
        )
        .await;
    assert!(applied(&r).contains(&"protected_paths"), "{r:?}");
    assert!(
        r.stdout.contains("rc=1") || r.stdout.contains("rc=2"),
        "{r:?}"
    );
    assert_eq!(
        std::fs::read_to_string(git.join("config")).unwrap(),
        "[core]\n"
    );
    assert_eq!(std::fs::read_to_string(t.ws().join("ok")).unwrap(), "ok");
    assert_eq!(
        mounts_under_ws(),
        before,
        "a mount leaked into toolhost's namespace"
    );
    // Allowed twin: nothing protected here, and the layer still reports held.
    let other = Tmp::new();
    let r = sh(&other.sandbox(level(IsolationLevel::Strict)), "echo ok").await;
    assert!(applied(&r).contains(&"protected_paths"), "{r:?}");
}

/// A supervisor made ahead of a call (a root toolhost's, with the read-only
/// view) is used only where its mounts are the ones the call makes now: a
/// protected path made after it (a `.git` created between two calls) is
/// held read-only in the next call, as in a call that makes its own
/// supervisor. Twin: the workspace stays writable in the same call.
#[tokio::test]
async fn a_protected_path_made_between_calls_is_held_in_the_next() {
    let t = Tmp::new();
    let sb = t.sandbox(level(IsolationLevel::BestEffort));
    for i in 0..3 {
        let r = sh(&sb, "true").await;
        assert!(r.success(), "call {i}: {r:?}");
    }
    // What is made ahead of the next call is made by now, without a `.git`.
    tokio::time::sleep(Duration::from_millis(300)).await;
    std::fs::create_dir(t.ws().join(".git")).unwrap();
    let r = sh(
        &sb,
        "touch .git/config 2>/dev/null; echo git=$?; echo ok > ok.txt; echo ws=$?",
    )
    .await;
    assert_eq!(r.stdout, "git=1\nws=0\n", "{r:?}");
    assert!(!t.ws().join(".git/config").exists());
    assert_eq!(
        std::fs::read_to_string(t.ws().join("ok.txt")).unwrap(),
        "ok\n"
    );
}

/// Set for the helper of [`a_supervisor_made_ahead_goes_with_its_sandbox_and_with_toolhost`].
const AHEAD_ENV: &str = "TOOLHOST_TEST_AHEAD";

/// Host pids of this process's children (those of each of its threads).
fn children() -> Vec<i32> {
    let mut out = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        if let Ok(s) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(s.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
        }
    }
    out
}

/// A supervisor made ahead of a sandbox's next call (a root toolhost's) is
/// a process that waits: it must never outlive what it waits for. In a
/// process of its own, whose children are all toolhost's (this test binary
/// run as [`supervisor_ahead_helper`]):
/// - after three calls, one child waits, the init of a PID namespace of
///   its own, and the next call's tool is its child (the call took it);
/// - the one made during that call exits by itself when the host's mount
///   table changes (it would hold a copy of unmounted filesystems);
/// - once the sandbox is shut down, no child is left;
/// - with a second sandbox's supervisor waiting, the helper is killed
///   (SIGKILL): the waiting supervisor is gone within a few seconds.
#[test]
fn a_supervisor_made_ahead_goes_with_its_sandbox_and_with_toolhost() {
    use std::io::BufRead;
    if !is_root() {
        return;
    }
    let mut helper = std::process::Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--exact",
            "isolation::supervisor_ahead_helper",
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(AHEAD_ENV, "1")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .expect("run the helper");
    let _guard = HangGuard::new("the supervisor-ahead helper", Duration::from_secs(60));
    let mut lines = std::io::BufReader::new(helper.stdout.take().unwrap()).lines();
    let mut waiting = None;
    let mut shut = false;
    for line in lines.by_ref() {
        // The harness prints the test's name, then its output, on one line.
        let line = line.unwrap();
        if line.ends_with("shutdown: none left") {
            shut = true;
        } else if let Some((_, pid)) = line.split_once("waiting: ") {
            waiting = pid.trim().parse::<i32>().ok();
            break;
        }
    }
    assert!(shut, "the helper's first sandbox");
    let pid = waiting.expect("a supervisor waiting for the second sandbox");
    assert!(alive(pid), "{pid} waits while the helper lives");
    // SAFETY: kill of the helper, our own child.
    unsafe { libc::kill(helper.id() as i32, libc::SIGKILL) };
    let _ = helper.wait();
    assert_eq!(
        still_alive(&[pid], Duration::from_secs(5)),
        Vec::<i32>::new(),
        "the waiting supervisor outlived toolhost"
    );
}

/// The helper of [`a_supervisor_made_ahead_goes_with_its_sandbox_and_with_toolhost`]
/// (without its variable set, it does nothing).
#[test]
#[ignore = "run by a_supervisor_made_ahead_goes_with_its_sandbox_and_with_toolhost, in a process of its own"]
fn supervisor_ahead_helper() {
    if std::env::var_os(AHEAD_ENV).is_none() {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let t = Tmp::new();
    let made = |sb: &toolhost::Sandbox| {
        for i in 0..3 {
            let r = rt.block_on(sh(sb, "true"));
            assert!(r.success(), "call {i}: {r:?}");
        }
        // The last call's supervisor reaped, the next one's made.
        std::thread::sleep(Duration::from_millis(500));
        let kids = children();
        assert_eq!(kids.len(), 1, "one supervisor waits: {kids:?}");
        let status = std::fs::read_to_string(format!("/proc/{}/status", kids[0])).unwrap();
        let nspid = status
            .lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .unwrap_or_default();
        assert_eq!(nspid.len(), 2, "in a PID namespace of its own: {status}");
        assert_eq!(nspid[1], "1", "its init: {status}");
        kids[0]
    };
    let sb = t.sandbox(level(IsolationLevel::BestEffort));
    let first = made(&sb);
    // The tool's parent, as the host sees it (`/proc` is the host's).
    let r = rt.block_on(sh(
        &sb,
        "read a b c ppid rest < /proc/self/stat; echo $ppid",
    ));
    assert_eq!(
        r.stdout.trim(),
        first.to_string(),
        "the call took it: {r:?}"
    );
    std::thread::sleep(Duration::from_millis(500));
    let next: Vec<i32> = children()
        .into_iter()
        .filter(|&k| k != first && alive(k))
        .collect();
    assert_eq!(next.len(), 1, "the next call's: {next:?}");
    // A mount made and unmounted on the host: the waiting one goes.
    drop(mount_tmpfs(&t.outside().join("m")));
    assert_eq!(
        still_alive(&next, Duration::from_secs(5)),
        Vec::<i32>::new(),
        "it went with the mount table's change"
    );
    rt.block_on(sb.shutdown());
    drop(sb);
    assert_eq!(
        still_alive(&[first], Duration::from_secs(5)),
        Vec::<i32>::new()
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !children().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(children(), Vec::<i32>::new(), "reaped");
    println!("shutdown: none left");
    let sb = t.sandbox(level(IsolationLevel::BestEffort));
    let second = made(&sb);
    println!("waiting: {second}");
    std::thread::sleep(Duration::from_secs(50));
}
