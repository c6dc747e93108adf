//! Small helpers: a temp workspace, sandbox builders, a CLI runner, process checks.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use toolhost::{RunOutput, RunRequest, Sandbox, SandboxConfig};

/// A temporary directory with a `ws` workspace and an `outside` sibling.
pub struct Tmp {
    _dir: tempfile::TempDir,
    pub root: PathBuf,
}

impl Tmp {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(dir.path()).expect("canonicalize");
        std::fs::create_dir(root.join("ws")).expect("mkdir ws");
        std::fs::create_dir(root.join("outside")).expect("mkdir outside");
        std::fs::write(root.join("outside/secret.txt"), CANARY).expect("write canary");
        Tmp { _dir: dir, root }
    }

    pub fn ws(&self) -> PathBuf {
        self.root.join("ws")
    }

    pub fn outside(&self) -> PathBuf {
        self.root.join("outside")
    }

    pub fn write(&self, rel: &str, data: &str) {
        let p = self.ws().join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(p, data).expect("write");
    }

    pub fn sandbox(&self, config: SandboxConfig) -> Sandbox {
        Sandbox::new([self.ws()], config).expect("sandbox")
    }
}

/// A value that must never show up where it does not belong.
pub const CANARY: &str = "CANARY-7f3a9c1e-do-not-leak";

pub fn config() -> SandboxConfig {
    SandboxConfig {
        timeout: Duration::from_secs(20),
        ..SandboxConfig::default()
    }
}

pub fn config_timeout(secs: f64) -> SandboxConfig {
    SandboxConfig {
        timeout: Duration::from_secs_f64(secs),
        ..SandboxConfig::default()
    }
}

pub async fn run(sb: &Sandbox, argv: &[&str]) -> RunOutput {
    sb.run(RunRequest::new(argv.iter().copied())).await
}

pub async fn sh(sb: &Sandbox, script: &str) -> RunOutput {
    run(sb, &["sh", "-c", script]).await
}

/// The toolhost binary built for these tests.
pub fn toolhost_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_toolhost"))
}

/// Runs `toolhost ARGS` in `cwd` with an empty stdin and the given extra env.
pub fn toolhost(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(toolhost_bin());
    cmd.args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .env_remove("TOOLHOST_CONFIG")
        .env_remove("TOOLHOST_LOG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run toolhost")
}

/// Whether `pid` is a live (non-zombie) process.
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            // state is the field after the parenthesised command name
            let after = stat
                .rsplit_once(')')
                .map(|(_, r)| r.trim_start())
                .unwrap_or("");
            !after.starts_with('Z') && !after.starts_with('X')
        }
        Err(_) => false,
    }
}

/// Waits up to `within` for every pid to be gone; returns the ones still alive.
pub fn still_alive(pids: &[i32], within: Duration) -> Vec<i32> {
    let deadline = std::time::Instant::now() + within;
    loop {
        let left: Vec<i32> = pids.iter().copied().filter(|p| alive(*p)).collect();
        if left.is_empty() || std::time::Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Host pids of the processes whose command line contains `marker` that are
/// still alive 2 s from now (normally none). A tool's `$$` and `$!` are pids
/// of its PID namespace, so tests find its processes on the host this way.
pub fn survivors(marker: &str) -> Vec<i32> {
    still_alive(&processes_with(marker), Duration::from_secs(2))
}

/// Parses every integer line of `text` as a pid.
pub fn pids_in(text: &str) -> Vec<i32> {
    text.lines().filter_map(|l| l.trim().parse().ok()).collect()
}

/// Pids of live processes whose command line (arguments joined by spaces)
/// contains `marker`.
pub fn processes_with(marker: &str) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in entries.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        // Arguments are NUL-separated there: match them joined by spaces.
        if let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline"))
            && String::from_utf8_lossy(&cmd)
                .replace('\0', " ")
                .contains(marker)
            && alive(pid)
        {
            out.push(pid);
        }
    }
    out
}

/// SHA-256 of a file, hex.
pub fn sha256_file(p: &Path) -> String {
    use sha2::{Digest, Sha256};
    let data = std::fs::read(p).expect("read for hash");
    format!("{:x}", Sha256::digest(data))
}

/// Threads of this process blocked opening a FIFO (waiting for a partner).
pub fn threads_waiting_now() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("wchan"))
                .is_ok_and(|w| matches!(w.trim(), "wait_for_partner" | "fifo_open"))
        })
        .count()
}

/// Threads of this process blocked opening a FIFO (waiting for a partner),
/// after giving any watchdog a moment to end them.
pub fn threads_waiting_on_a_fifo() -> usize {
    let count = threads_waiting_now;
    for _ in 0..60 {
        if count() == 0 {
            return 0;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    count()
}

/// Held by the tests that look at `fifo_opens_interrupted` or at threads
/// waiting on a FIFO, both of which count for the whole process (a guest's
/// FIFO open waits about 20 ms before the watchdog ends it).
pub static FIFO_TESTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A symlink at `at` to `target`. Windows has a file kind and a directory
/// kind: the kind of what the target names now (a missing target makes a
/// file link), and `/` in a relative target is its separator.
pub fn symlink(target: impl AsRef<Path>, at: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(target, at)
    }
    #[cfg(windows)]
    {
        let target = target.as_ref();
        let target = if target.is_absolute() {
            target.to_path_buf()
        } else {
            PathBuf::from(target.to_string_lossy().replace('/', "\\"))
        };
        let full = match at.parent() {
            Some(p) if !target.is_absolute() => p.join(&target),
            _ => target.clone(),
        };
        if full.is_dir() {
            std::os::windows::fs::symlink_dir(target, at)
        } else {
            std::os::windows::fs::symlink_file(target, at)
        }
    }
}

#[cfg(windows)]
/// The 8.3 short name of `p`, if the volume makes them.
pub fn short_name(p: &Path) -> Option<String> {
    use std::os::windows::ffi::OsStrExt;
    use windows_sys::Win32::Storage::FileSystem::GetShortPathNameW;
    let wide: Vec<u16> = p.as_os_str().encode_wide().chain([0]).collect();
    let mut buf = vec![0u16; 1024];
    // SAFETY: a NUL-terminated path and a buffer of the length given.
    let n = unsafe { GetShortPathNameW(wide.as_ptr(), buf.as_mut_ptr(), buf.len() as u32) };
    if n == 0 || n as usize >= buf.len() {
        return None;
    }
    let short = PathBuf::from(String::from_utf16_lossy(&buf[..n as usize]));
    let name = short.file_name()?.to_string_lossy().into_owned();
    let long = p.file_name()?.to_string_lossy().into_owned();
    (name != long).then_some(name)
}

/// Appends `v` in unsigned LEB128, as the wasm binary format counts sizes.
pub fn uleb(mut v: u64, out: &mut Vec<u8>) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// The engines and runtimes the docker backend's tests run on:
/// `scripts/docker-setup` makes each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Engine {
    /// The Docker engine's default runtime, runc.
    Runc,
    /// The same engine with gVisor: `toolhost-runsc` (`--network=none`) for
    /// calls without network, `toolhost-runsc-net` (`--network=host`) for
    /// calls with it.
    Runsc,
    /// Podman as root, on its Docker-compatible API at [`PODMAN_SOCK`].
    Podman,
    /// The rootless Podman of the user [`ROOTLESS_USER`], on that user's
    /// socket; its tests run as that user ([`Engine::host`]).
    PodmanRootless,
}

/// The socket of the rootful Podman service `scripts/docker-setup` starts.
pub(crate) const PODMAN_SOCK: &str = "/run/toolhost-podman.sock";
/// The unprivileged user whose rootless Podman service it starts.
pub(crate) const ROOTLESS_USER: &str = "toolhost-podman";
/// That service's socket, in a dir of that user's that Podman never
/// manages (its runtime dir, `/run/user/UID`, it may remove on a first
/// run: `scripts/docker-setup`).
pub(crate) const PODMAN_ROOTLESS_SOCK: &str = "/run/toolhost-podman-rootless/podman.sock";

/// The uid and gid of [`ROOTLESS_USER`], from the passwd file.
pub(crate) fn rootless_ids() -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.first() == Some(&ROOTLESS_USER))
            .then(|| Some((f.get(2)?.parse().ok()?, f.get(3)?.parse().ok()?)))?
    })
}

pub(crate) const RUNSC: &str = "toolhost-runsc";
pub(crate) const RUNSC_NET: &str = "toolhost-runsc-net";

impl Engine {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Engine::Runc => "docker",
            Engine::Runsc => "docker (runsc)",
            Engine::Podman => "podman",
            Engine::PodmanRootless => "podman (rootless)",
        }
    }

    /// The engine's address, when it is not Docker's default socket.
    pub(crate) fn host(self) -> Option<String> {
        match self {
            Engine::Runc | Engine::Runsc => None,
            Engine::Podman => Some(format!("unix://{PODMAN_SOCK}")),
            Engine::PodmanRootless => Some(format!("unix://{PODMAN_ROOTLESS_SOCK}")),
        }
    }

    /// Sets this engine's keys in a `[docker]` section.
    pub(crate) fn configure(self, d: &mut toolhost::config::DockerConfig) {
        if self == Engine::Runsc {
            d.runtime = Some(RUNSC.into());
            d.network_runtime = Some(RUNSC_NET.into());
        }
        d.host = self.host();
    }

    /// The same keys as TOML lines of a `[docker]` section.
    pub(crate) fn toml(self) -> String {
        match (self, self.host()) {
            (Engine::Runsc, _) => {
                format!("runtime = {RUNSC:?}\nnetwork_runtime = {RUNSC_NET:?}\n")
            }
            (_, Some(host)) => format!("host = {host:?}\n"),
            (_, None) => String::new(),
        }
    }

    /// A `docker` CLI command aimed at this engine.
    pub(crate) fn cli(self) -> std::process::Command {
        let mut c = std::process::Command::new("docker");
        if let Some(h) = self.host() {
            c.args(["-H", &h]);
        }
        c
    }
}

/// How call B makes `.git` anew in [`a_protected_path_renamed_away_and_made_anew`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Anew {
    /// `.git` is a dir; B makes a new one, with a hook.
    Dir,
    /// `.git` is a file (`gitdir: evil`); A makes a hard link to it
    /// (`keep`) before renaming it away, and B moves `keep` to `.git`: the
    /// same file, with its device and inode, back under the name.
    LinkedBack,
    /// `.git` is a dir; A removes it, and B makes a new one, with a hook.
    Removed,
}

/// A protected `.git` renamed away while a call holds it, and made anew by
/// that call. A mount holds a file, not a name: call A (in a mount
/// namespace or container of its own, where `.git` is no mount point; it
/// started before `.git` existed) makes `.git`; call B starts with it there,
/// so B's look holds it; A renames it to `moved` and ends, and B makes
/// `.git` anew (`anew`; [`Anew::Removed`]: A removes it instead). After B,
/// what B made must be moved aside: by the walk after the call (direct,
/// runc), or, where B waited at the gVisor gate
/// until A was gone (`gated`: A then renames `.git` on a timer, not when B
/// has started), by B's own look, which found `.git` missing. Allowed twin,
/// in the same call: the same thing made in `notgit` stays.
pub(crate) async fn a_protected_path_renamed_away_and_made_anew(
    sb: &Sandbox,
    ws: &Path,
    gated: bool,
    anew: Anew,
) {
    let make = match anew {
        Anew::Dir | Anew::Removed => "mkdir .git",
        Anew::LinkedBack => "printf 'gitdir: evil\\n' > .git",
    };
    let wait = if gated {
        "sleep 1"
    } else {
        "i=0; while [ ! -e b-started ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; [ -e b-started ]"
    };
    let away = match anew {
        Anew::Dir => "mv .git moved",
        Anew::LinkedBack => "ln .git keep && mv .git moved",
        Anew::Removed => "rm -rf .git",
    };
    let a = format!("{make} && {wait} && {away} && echo renamed");
    // B makes it once A is over (`a-running`, removed here when A's call
    // has returned; a removal, so that no new file takes a number A freed):
    // A's own sweep, of the `.git` it made, is done by then.
    let back = match anew {
        Anew::Dir | Anew::Removed => {
            "mkdir -p .git/hooks && echo EVIL > .git/hooks/post-checkout && echo wrote; mkdir -p notgit/hooks && echo EVIL > notgit/hooks/post-checkout && echo twin"
        }
        Anew::LinkedBack => {
            "mv keep .git && echo wrote; printf 'gitdir: evil\\n' > notgit && echo twin"
        }
    };
    let b = format!(
        "touch b-started; i=0; while [ -e a-running ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; {back}"
    );
    let git = ws.join(".git");
    std::fs::write(ws.join("a-running"), "").unwrap();
    let first = async {
        let r = sb.run(RunRequest::new(["sh", "-c", &a])).await;
        std::fs::remove_file(ws.join("a-running")).unwrap();
        r
    };
    let (ra, rb) = tokio::join!(first, async {
        // B starts once A's `.git` is there.
        for _ in 0..400 {
            if git.exists() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert!(git.exists(), "call A made no .git");
        sb.run(RunRequest::new(["sh", "-c", &b])).await
    });
    // Control: A renamed the held `.git` away (and had nothing to sweep),
    // and B made it anew.
    assert_eq!(ra.stdout, "renamed\n", "{ra:?}");
    assert!(!ra.stderr.contains("protected_paths"), "{ra:?}");
    assert_eq!(rb.stdout, "wrote\ntwin\n", "{rb:?}");
    assert_eq!(ws.join("moved").exists(), anew != Anew::Removed, "{ra:?}");
    // Denied: no `.git` is left; B's is beside it, whole, and B was told.
    assert!(
        std::fs::symlink_metadata(&git).is_err(),
        "the .git B made stayed: {rb:?}"
    );
    let aside: Vec<PathBuf> = std::fs::read_dir(ws)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(".git.toolhost-refused-"))
        })
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?} {rb:?}");
    assert!(
        rb.stderr.contains("is a protected path (protected_paths)")
            && rb.stderr.contains("moved to"),
        "{rb:?}"
    );
    match anew {
        Anew::Dir | Anew::Removed => {
            assert_eq!(
                std::fs::read_to_string(aside[0].join("hooks/post-checkout")).unwrap(),
                "EVIL\n"
            );
            // The held one got nothing from B.
            assert!(!ws.join("moved/hooks").exists(), "{rb:?}");
            // Allowed twin: the same hook outside `.git` stays.
            assert_eq!(
                std::fs::read_to_string(ws.join("notgit/hooks/post-checkout")).unwrap(),
                "EVIL\n"
            );
        }
        Anew::LinkedBack => {
            assert_eq!(
                std::fs::read_to_string(&aside[0]).unwrap(),
                "gitdir: evil\n"
            );
            assert_eq!(
                std::fs::read_to_string(ws.join("notgit")).unwrap(),
                "gitdir: evil\n"
            );
        }
    }
}

/// Aborts the test process, naming `what`, unless dropped within `limit`:
/// for a check whose failure is a hang (a guest never interrupted spins for
/// good, and cargo has no per-test timeout), so that it fails at once.
pub struct HangGuard(#[allow(dead_code)] std::sync::mpsc::Sender<()>);

impl HangGuard {
    pub fn new(what: &'static str, limit: std::time::Duration) -> HangGuard {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(limit) {
                eprintln!("{what}: still running after {limit:?}; aborting the test process");
                std::process::abort();
            }
        });
        HangGuard(tx)
    }
}
