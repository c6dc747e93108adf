//! Warm mode: one container per backend, with toolhost's command server
//! (`docker-helper/`, a static binary bind-mounted read-only) as its PID 1.
//! Each call is one request on the container's attach stream; the helper
//! forks the tool, streams its output back, and, when the tool's main process
//! exits (or the host asks for a kill on a timeout), kills every other process
//! in the container and reports only once none is left. No engine `exec` is
//! made per call.
//!
//! Invariants: calls are serialized; a container whose stream breaks, whose
//! call is cancelled, or whose helper does not answer is removed and replaced;
//! a call's rlimits are set on the tool's process by the helper (the container
//! has none of its own, so that no limit ends the helper).

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::models::{ContainerCreateBody, Mount, MountType, ResourcesUlimits};
use bollard::query_parameters::AttachContainerOptions;
use futures_util::{FutureExt, Stream, StreamExt};
use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::DockerBackend;
use super::cleanup::{WarmSlot, remove};
use super::engine::{engine_error, unavailable};
use super::finish::{Ended, finish, start_refusal};
use crate::outcome::{Outcome, OutcomeKind, RunOutput};
use crate::output::CappedBuffer;
use crate::plan::BackendKind;
use crate::plan::ExecPlan;

/// The helper, built by build.rs for the target (empty where it cannot be).
static HELPER: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/toolhost-docker-helper"));
/// Where the helper is mounted in the container.
pub const HELPER_TARGET: &str = "/.toolhost-helper";
/// The hello the helper sends when it starts.
const HELLO: &[u8] = b"toolhost-docker-helper 1";
/// Largest frame accepted from the helper (it sends at most 64 KiB).
const FRAME_MAX: usize = 1 << 20;
/// Stdin is sent in frames of this size.
const STDIN_CHUNK: usize = 64 * 1024;
/// Stdin up to this size is always read by the helper at once (it buffers up
/// to 1 MiB), so a kill frame behind it is read promptly.
const KILL_STDIN_MAX: usize = 256 * 1024;
/// How long the helper has to start, to answer a ping, or to end a call after
/// a kill; past it the container is replaced.
const HELPER_GRACE: Duration = Duration::from_secs(10);

/// The session's warm container and its open attach stream.
pub(super) struct WarmContainer {
    pub(super) id: String,
    input: Pin<Box<dyn AsyncWrite + Send>>,
    reader: Reader,
    /// A call in it was OOM-killed (the engine's `OOMKilled` then stays set).
    oom_seen: bool,
    /// The protected-path mounts it was created with (`backend::protect`):
    /// a call that needs others gets a new container.
    held: Vec<crate::backend::protect::Held>,
    /// The user it runs calls as.
    user: String,
}

/// The helper's side of the attach stream, parsed into frames.
struct Reader {
    output: Pin<Box<dyn Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>,
    buf: Vec<u8>,
}

async fn send(input: &mut Pin<Box<dyn AsyncWrite + Send>>, bytes: &[u8]) -> Result<(), String> {
    let fail = |e: std::io::Error| format!("attach stream: {e}");
    input.write_all(bytes).await.map_err(fail)?;
    input.flush().await.map_err(fail)
}

fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(payload.len() + 5);
    f.push(kind);
    // Payloads are built here: a run request is bounded by the plan, which
    // the sandbox bounds; stdin goes in 64 KiB frames.
    f.extend_from_slice(
        &u32::try_from(payload.len())
            .unwrap_or(u32::MAX)
            .to_le_bytes(),
    );
    f.extend_from_slice(payload);
    f
}

fn put_str(p: &mut Vec<u8>, s: &str) {
    p.extend_from_slice(&u32::try_from(s.len()).unwrap_or(u32::MAX).to_le_bytes());
    p.extend_from_slice(s.as_bytes());
}

fn put_strs(p: &mut Vec<u8>, v: &[String]) {
    p.extend_from_slice(&u32::try_from(v.len()).unwrap_or(u32::MAX).to_le_bytes());
    for s in v {
        put_str(p, s);
    }
}

/// The run request frame.
fn run_request(plan: &ExecPlan, argv: &[String], env: &[String]) -> Result<Vec<u8>, Outcome> {
    let mut p = Vec::new();
    put_strs(&mut p, argv);
    put_strs(&mut p, env);
    // A plan without allowed dirs runs in the container's root.
    let cwd = plan
        .cwd
        .as_ref()
        .map_or_else(|| "/".into(), |c| c.guest.to_string_lossy());
    put_str(&mut p, &cwd);
    let l = &plan.limits;
    p.extend_from_slice(&l.cpu_seconds.unwrap_or(u64::MAX).to_le_bytes());
    p.extend_from_slice(&l.file_size_bytes.unwrap_or(u64::MAX).to_le_bytes());
    p.push(u8::from(plan.stdin.is_some()));
    p.extend_from_slice(&(l.stdout_cap as u64).to_le_bytes());
    p.extend_from_slice(&(l.stderr_cap as u64).to_le_bytes());
    if p.len() > FRAME_MAX || argv.iter().chain(env).any(|s| s.contains('\0')) {
        return Err(Outcome::new(
            OutcomeKind::InvalidRequest,
            "the command line and environment must be under 1 MiB, without NUL bytes, in warm mode",
        ));
    }
    Ok(frame(b'R', &p))
}

/// The helper's `X` frame.
struct Exit {
    kind: i32,
    value: i32,
    errno: i32,
    oom: bool,
    others: bool,
}

fn parse_exit(p: &[u8]) -> Result<Exit, String> {
    if p.len() != 15 {
        return Err(format!("malformed exit frame ({} bytes)", p.len()));
    }
    let i = |at: usize| i32::from_le_bytes([p[at], p[at + 1], p[at + 2], p[at + 3]]);
    Ok(Exit {
        kind: i(0),
        value: i(4),
        errno: i(8),
        oom: p[12] != 0,
        others: p[13] != 0,
    })
}

impl Reader {
    /// The next whole frame from the helper.
    async fn next_frame(&mut self) -> Result<(u8, Vec<u8>), String> {
        loop {
            if self.buf.len() >= 5 {
                let b = &self.buf;
                let len = u32::from_le_bytes([b[1], b[2], b[3], b[4]]) as usize;
                if len > FRAME_MAX {
                    return Err(format!("frame of {len} bytes from the helper"));
                }
                if b.len() >= 5 + len {
                    let kind = b[0];
                    let payload = b[5..5 + len].to_vec();
                    self.buf.drain(..5 + len);
                    return Ok((kind, payload));
                }
            }
            match self.output.next().await {
                Some(Ok(LogOutput::StdOut { message })) => self.buf.extend_from_slice(&message),
                Some(Ok(LogOutput::StdErr { message })) => {
                    tracing::warn!(
                        "docker helper: {}",
                        String::from_utf8_lossy(&message).trim()
                    );
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(format!("attach stream: {}", engine_error(&e))),
                None => return Err("the warm container's helper exited".into()),
            }
        }
    }

    /// Output frames until the call's end.
    async fn until_exit(
        &mut self,
        out: &mut CappedBuffer,
        err: &mut CappedBuffer,
    ) -> Result<Exit, String> {
        loop {
            match self.next_frame().await? {
                (b'o', p) => out.push(&p),
                (b'e', p) => err.push(&p),
                (b'X', p) => return parse_exit(&p),
                (k, _) => return Err(format!("unexpected frame {k} from the helper")),
            }
        }
    }

    /// Whether the helper is there and idle: a dead container's stream has
    /// ended (then the call goes to a new one, and runs once).
    fn alive(&mut self) -> bool {
        match self.output.next().now_or_never() {
            None => true,
            Some(Some(Ok(LogOutput::StdErr { message }))) => {
                tracing::warn!(
                    "docker helper: {}",
                    String::from_utf8_lossy(&message).trim()
                );
                true
            }
            Some(_) => false,
        }
    }
}

/// The helper binary on this machine's disk, where the engine can bind-mount
/// it: `docker/` in toolhost's cache dir (or `$XDG_RUNTIME_DIR/toolhost`),
/// a directory of this user that no one else can write. Checked every time
/// (just before a container mounts it) to be this build's helper, a regular
/// file of this user that no one can write, and rewritten if not; every file
/// operation refuses symlinks.
pub(super) fn helper_file() -> Result<PathBuf, String> {
    static DIR: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    if HELPER.is_empty() {
        return Err(
            "this build of toolhost has no docker helper (it is built for 64-bit x86_64 and aarch64 Linux with a static C library); set [docker] warm = false, and [docker] user to a non-root uid for a root-owned workspace".into(),
        );
    }
    let dir = DIR.get_or_init(helper_dir).clone()?;
    use sha2::Digest as _;
    let hash = sha2::Sha256::digest(HELPER);
    let hex: String = hash[..8].iter().map(|b| format!("{b:02x}")).collect();
    let name = format!("toolhost-docker-helper-{hex}");
    let path = dir.join(&name);
    if is_our_helper(&path) {
        return Ok(path);
    }
    write_helper(&dir, &name)
        .map_err(|e| format!("cannot write the docker helper to {}: {e}", dir.display()))?;
    if is_our_helper(&path) {
        Ok(path)
    } else {
        Err(format!(
            "the docker helper at {} does not check out after writing it",
            path.display()
        ))
    }
}

/// The helper's directory, created if needed: never a shared temp dir.
fn helper_dir() -> Result<PathBuf, String> {
    let dir = crate::state_dirs::cache_base()
        .map(|d| d.join("docker"))
        .or_else(crate::state_dirs::runtime_dir)
        .ok_or(
            "warm mode needs a private directory for its helper: set HOME, XDG_CACHE_HOME or XDG_RUNTIME_DIR",
        )?;
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
        let meta =
            std::fs::symlink_metadata(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        if !meta.is_dir() || meta.uid() != uid() {
            return Err(format!(
                "{} is not a directory of this user (a symlink, or someone else's); refused",
                dir.display()
            ));
        }
        if meta.mode() & 0o022 != 0 {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| format!("{}: writable by others: {e}", dir.display()))?;
        }
    }
    Ok(dir)
}

/// Whether `path` is this build's helper: a regular file (not a symlink) of
/// this user, one link, writable by no one, with the embedded bytes.
fn is_our_helper(path: &std::path::Path) -> bool {
    #[cfg(unix)]
    {
        use std::io::Read as _;
        use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
        let Ok(mut f) = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
        else {
            return false;
        };
        let Ok(meta) = f.metadata() else {
            return false;
        };
        if !meta.is_file()
            || meta.uid() != uid()
            || meta.nlink() != 1
            || meta.mode() & 0o222 != 0
            || meta.len() != HELPER.len() as u64
        {
            return false;
        }
        let mut bytes = Vec::with_capacity(HELPER.len());
        f.read_to_end(&mut bytes).is_ok() && bytes == HELPER
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        false
    }
}

/// Writes the helper under a fresh temporary name (created exclusively, no
/// symlink followed), makes it read-only and executable, and renames it into
/// place.
fn write_helper(dir: &std::path::Path, name: &str) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::io::Write as _;
        use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
        let tmp = dir.join(format!(
            ".{name}.{}.{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0)
        ));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        let written = (|| {
            f.write_all(HELPER)?;
            f.sync_all()?;
            f.set_permissions(std::fs::Permissions::from_mode(0o555))?;
            std::fs::rename(&tmp, dir.join(name))
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        } else if let Ok(entries) = std::fs::read_dir(dir) {
            // Helpers of other builds: unused by this one.
            for e in entries.flatten() {
                let n = e.file_name().to_string_lossy().into_owned();
                if n.starts_with("toolhost-docker-helper-") && n != name {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        written
    }
    #[cfg(not(unix))]
    {
        let _ = (dir, name);
        Err(std::io::Error::other("warm mode needs a Unix host"))
    }
}

#[cfg(unix)]
fn uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// The read-only mount of the helper at [`HELPER_TARGET`]. A call must not be
/// able to replace the helper of later containers: refused if a writable
/// allowed dir holds it.
pub(super) fn helper_mount(plan: &ExecPlan) -> Result<Mount, Outcome> {
    let helper = helper_file().map_err(unavailable)?;
    let real = std::fs::canonicalize(&helper).unwrap_or_else(|_| helper.clone());
    if let Some(m) = plan
        .mounts
        .iter()
        .find(|m| !m.read_only && real.starts_with(&m.path))
    {
        return Err(Outcome::new(
            OutcomeKind::PermissionDenied,
            format!(
                "the writable allowed dir {} contains toolhost's docker helper {}; refused (allow a narrower dir)",
                m.path.display(),
                real.display()
            ),
        ));
    }
    Ok(Mount {
        target: Some(HELPER_TARGET.into()),
        source: Some(helper.to_string_lossy().into_owned()),
        typ: Some(MountType::BIND),
        read_only: Some(true),
        ..Default::default()
    })
}

/// The helper's `--expect DEV:INO:PATH` arguments: every allowed dir and
/// every protected-path mount, with the device and inode toolhost sees now.
/// The helper checks, before anything runs, that each is a mount point
/// showing that inode: the engine resolves the paths again when it mounts
/// them, and a concurrent call may have swapped one for a symlink since.
pub(super) fn expected_mounts(
    plan: &ExecPlan,
    held: &[crate::backend::protect::Held],
) -> Result<Vec<String>, Outcome> {
    #[cfg_attr(not(unix), allow(unused_mut))]
    let mut out = Vec::new();
    #[cfg(unix)]
    {
        use cap_std::fs::MetadataExt as _;
        use std::os::unix::fs::MetadataExt as _;
        let changed = |p: &std::path::Path, why: String| {
            Outcome::new(
                OutcomeKind::PermissionDenied,
                format!(
                    "{}: {why} (something was renamed or replaced while the call was being made); refused",
                    p.display()
                ),
            )
        };
        // The allowed dir `m`, open as `dir`, must be seen at `at`.
        let expect_dir = |out: &mut Vec<String>,
                          m: &crate::plan::Mount,
                          dir: &cap_std::fs::Dir,
                          at: &std::path::Path| {
            let meta = dir
                .dir_metadata()
                .map_err(|e| changed(&m.guest, e.to_string()))?;
            out.push("--expect".to_string());
            out.push(format!("{}:{}:{}", meta.dev(), meta.ino(), at.display()));
            Ok::<(), Outcome>(())
        };
        for (m, (_, dir)) in plan.mounts.iter().zip(&plan.mount_dirs) {
            expect_dir(&mut out, m, dir, &m.guest)?;
        }
        for (target, m) in super::spec::ro_elsewhere(plan) {
            let Some((_, dir)) = plan.mount_dirs.iter().find(|(p, _)| p == &m.path) else {
                return Err(changed(&m.guest, "has no handle".into()));
            };
            expect_dir(&mut out, m, dir, &target)?;
        }
        for h in held.iter().filter(|h| !h.link) {
            // With no symlink on the way (a link is refused), the place is
            // its own path: the engine resolves both ends from that path,
            // and what it finds there must be what is found now.
            let seen = |p: &std::path::Path| plan.guest_of(p).unwrap_or_else(|| p.to_path_buf());
            if h.source != h.target {
                return Err(changed(
                    &seen(&h.target),
                    format!("resolves to {}", seen(&h.source).display()),
                ));
            }
            // Every place the container sees it (refused before if none).
            let places = plan.guest_places(&h.target);
            let bound = super::spec::held_places(plan, h);
            if places.is_empty() {
                return Err(changed(
                    &seen(&h.target),
                    "lies outside every allowed dir".into(),
                ));
            }
            let meta = std::fs::symlink_metadata(&h.source)
                .map_err(|e| changed(&seen(&h.target), e.to_string()))?;
            if meta.file_type().is_symlink() {
                return Err(changed(&seen(&h.target), "now a symlink".into()));
            }
            for target in bound {
                out.push("--expect".to_string());
                out.push(format!(
                    "{}:{}:{}",
                    meta.dev(),
                    meta.ino(),
                    target.display()
                ));
            }
        }
    }
    #[cfg(not(unix))]
    let _ = (plan, held);
    Ok(out)
}

/// Whether an engine of Docker architecture `arch` (Linux) runs this build's
/// helper.
pub(super) fn engine_runs_helper(arch: &str) -> bool {
    cfg!(target_os = "linux") && arch == engine_arch()
}

/// Whether this build carries the helper, or why not.
pub(super) fn helper_available() -> Result<(), String> {
    if HELPER.is_empty() {
        return Err("this build of toolhost has no docker helper (it is built for 64-bit x86_64 and aarch64 Linux with a static C library)".into());
    }
    Ok(())
}

/// Docker's name for this machine's architecture.
fn engine_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "arm" => "arm",
        "powerpc64" => "ppc64le",
        "s390x" => "s390x",
        "riscv64" => "riscv64",
        other => other,
    }
}

impl DockerBackend {
    /// The helper can run on this engine: a Linux engine of this machine's
    /// architecture (the helper is built for the machine toolhost runs on).
    async fn check_warm_engine(&self, docker: &Docker) -> Result<(), Outcome> {
        let v = docker
            .version()
            .await
            .map_err(|e| unavailable(format!("Docker engine: {}", engine_error(&e))))?;
        let os = v.os.unwrap_or_default();
        let arch = v.arch.unwrap_or_default();
        if os != "linux" || arch != engine_arch() || !cfg!(target_os = "linux") {
            return Err(unavailable(format!(
                "warm mode runs toolhost's helper (built for {}/{}) in the container, and the engine is {os}/{arch}; set [docker] warm = false",
                std::env::consts::OS,
                engine_arch()
            )));
        }
        Ok(())
    }

    /// Creates and starts the session's warm container and waits for its
    /// helper's hello.
    async fn start_warm(
        &self,
        docker: &Docker,
        image: &str,
        plan: &ExecPlan,
        user: &str,
        held: &[crate::backend::protect::Held],
    ) -> Result<WarmContainer, Outcome> {
        self.check_warm_engine(docker).await?;
        let Some(filter) = super::user::filter_hex() else {
            return Err(unavailable(
                "toolhost has no seccomp filter for this platform, and warm mode needs it; set [docker] warm = false",
            ));
        };
        let helper = helper_mount(plan)?;
        let expect = expected_mounts(plan, held)?;
        let mut host = self.host_config(plan, held);
        // The helper is the init (it reaps, and kills what a call leaves).
        host.init = Some(false);
        // No container-wide CPU or file-size limit: it would end the helper,
        // which serves every call; the helper sets them on each call's process.
        host.ulimits = Some(vec![
            ResourcesUlimits {
                name: Some("core".into()),
                soft: Some(0),
                hard: Some(0),
            },
            super::spec::nofile_ulimit(),
        ]);
        if let Some(m) = host.mounts.as_mut() {
            m.push(helper);
        }
        let body = ContainerCreateBody {
            image: Some(image.to_string()),
            entrypoint: Some(vec![HELPER_TARGET.into()]),
            // On the helper, and so on every call it runs.
            cmd: Some(
                ["--seccomp".to_string(), filter.to_string()]
                    .into_iter()
                    .chain(expect)
                    .collect(),
            ),
            working_dir: Some("/".into()),
            user: Some(user.to_string()),
            labels: Some(self.labels()),
            attach_stdin: Some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            open_stdin: Some(true),
            // When toolhost goes (even killed), the attach closes the helper's
            // stdin, and the helper kills everything and exits.
            stdin_once: Some(true),
            tty: Some(false),
            network_disabled: Some(!plan.allow_network),
            healthcheck: Some(super::spec::no_healthcheck()),
            host_config: Some(host),
            ..Default::default()
        };
        // Removed if this fails or the future is dropped before the slot
        // holds it.
        let (mut guard, created_id) =
            super::cleanup::create_guarded(docker, self.next_name(), body, image, plan).await?;
        let attach = AttachContainerOptions {
            stream: true,
            stdin: true,
            stdout: true,
            stderr: true,
            logs: false,
            ..Default::default()
        };
        let attached = match docker.attach_container(&created_id, Some(attach)).await {
            Ok(a) => a,
            Err(e) => {
                guard.remove_now().await;
                return Err(super::finish::launch_failed(&e));
            }
        };
        if let Err(e) = docker.start_container(&created_id, None).await {
            guard.remove_now().await;
            return Err(start_refusal(&e));
        }
        let mut warm = WarmContainer {
            id: created_id.clone(),
            input: attached.input,
            reader: Reader {
                output: attached.output,
                buf: Vec::new(),
            },
            oom_seen: false,
            held: held.to_vec(),
            user: user.to_string(),
        };
        match tokio::time::timeout(HELPER_GRACE, warm.reader.next_frame()).await {
            Ok(Ok((b'H', v))) if v == HELLO => {}
            other => {
                guard.remove_now().await;
                let why = match other {
                    Ok(Ok((_, v))) => format!("unexpected hello {:?}", String::from_utf8_lossy(&v)),
                    Ok(Err(e)) => e,
                    Err(_) => "no hello in time".into(),
                };
                return Err(Outcome::new(
                    OutcomeKind::LaunchFailed,
                    format!("the warm container's helper did not start: {why}"),
                ));
            }
        }
        guard.disarm();
        Ok(warm)
    }

    /// Warm mode: one call at a time, as a request to the helper in the
    /// session's container.
    pub(super) async fn run_warm(
        &self,
        docker: &Docker,
        image: &str,
        plan: &ExecPlan,
        (argv, env): (Vec<String>, Vec<String>),
        (user, held): (String, &[crate::backend::protect::Held]),
        start: Instant,
    ) -> RunOutput {
        let refused = |o: Outcome| RunOutput::refused(BackendKind::Docker, o, start.elapsed());
        let request = match run_request(plan, &argv, &env) {
            Ok(r) => r,
            Err(o) => return refused(o),
        };
        // Serialized: a call's sweep of leftover processes must only meet
        // its own, and a replaced container must not be in use.
        let mut slot = WarmSlot {
            slot: self.warm.lock().await,
            docker: docker.clone(),
            keep: false,
        };
        if slot.slot.as_mut().is_some_and(|w| !w.reader.alive())
            && let Some(dead) = slot.slot.take()
        {
            remove(docker, &dead.id).await;
        }
        // A protected path that appeared (or went) since the container was
        // made: its mounts are fixed, so it is replaced.
        // So is one whose user is no longer the call's (the allowed dirs
        // changed owner).
        if slot
            .slot
            .as_ref()
            .is_some_and(|w| w.held != held || w.user != user)
            && let Some(old) = slot.slot.take()
        {
            remove(docker, &old.id).await;
        }
        if slot.slot.is_none() {
            match self.start_warm(docker, image, plan, &user, held).await {
                Ok(w) => *slot.slot = Some(w),
                Err(o) => {
                    slot.keep = true;
                    return refused(o);
                }
            }
        }
        let Some(warm) = slot.slot.as_mut() else {
            return refused(Outcome::new(OutcomeKind::LaunchFailed, "no warm container"));
        };
        let limits = &plan.limits;
        let mut out = CappedBuffer::new(limits.stdout_cap);
        let mut err = CappedBuffer::new(limits.stderr_cap);
        let request_sent = AtomicBool::new(false);
        let stdin_sent = AtomicBool::new(plan.stdin.is_none());
        let call = async {
            let WarmContainer { input, reader, .. } = &mut *warm;
            send(input, &request).await?;
            request_sent.store(true, Ordering::SeqCst);
            // Stdin goes out while output comes in.
            let feed = async {
                if let Some(bytes) = &plan.stdin {
                    for chunk in bytes.chunks(STDIN_CHUNK) {
                        send(input, &frame(b'I', chunk)).await?;
                    }
                    send(input, &frame(b'E', &[])).await?;
                }
                stdin_sent.store(true, Ordering::SeqCst);
                Ok::<(), String>(())
            };
            // A broken stream ends both at once.
            let ((), exit) = tokio::try_join!(feed, reader.until_exit(&mut out, &mut err))?;
            Ok::<Exit, String>(exit)
        };
        let ended = tokio::time::timeout(limits.timeout, call).await;
        let result = match ended {
            Ok(Ok(exit)) => {
                slot.keep = true;
                warm.oom_seen |= exit.oom;
                if exit.others {
                    tracing::debug!("warm call left processes behind; the helper killed them");
                }
                self.ended(plan, exit)
            }
            Ok(Err(why)) => {
                // The helper or its stream is gone: the container goes, and
                // a helper killed for memory means the call hit the limit.
                let oom = docker
                    .inspect_container(&warm.id, None)
                    .await
                    .ok()
                    .and_then(|i| i.state)
                    .and_then(|s| s.oom_killed)
                    .unwrap_or(false);
                if oom && !warm.oom_seen {
                    Ended::Exited {
                        code: 137,
                        oom: true,
                        by_init: false,
                    }
                } else if request_sent.load(Ordering::SeqCst) {
                    Ended::Refused(Outcome::new(
                        OutcomeKind::LaunchFailed,
                        format!(
                            "the warm container stopped during the call ({why}); the tool may have run"
                        ),
                    ))
                } else {
                    Ended::Refused(Outcome::new(
                        OutcomeKind::LaunchFailed,
                        format!("warm container: {why}; the tool did not run"),
                    ))
                }
            }
            Err(_) => {
                // Timed out. With all its stdin sent (and little enough that
                // the helper has read it all, so the kill is not queued
                // behind it), the call is killed in place: the helper kills
                // every process and says when none is left, and the container
                // stays. Otherwise the container goes.
                let small = plan
                    .stdin
                    .as_ref()
                    .is_none_or(|b| b.len() <= KILL_STDIN_MAX);
                let whole =
                    request_sent.load(Ordering::SeqCst) && stdin_sent.load(Ordering::SeqCst);
                if small && whole {
                    let mut sink_out = CappedBuffer::new(0);
                    let mut sink_err = CappedBuffer::new(0);
                    let killed = tokio::time::timeout(HELPER_GRACE, async {
                        send(&mut warm.input, &frame(b'K', &[])).await?;
                        warm.reader.until_exit(&mut sink_out, &mut sink_err).await
                    })
                    .await;
                    slot.keep = matches!(killed, Ok(Ok(_)));
                }
                Ended::TimedOut
            }
        };
        slot.release().await;
        finish(plan, start, result, out, err)
    }

    /// What the helper's exit frame means for the call.
    fn ended(&self, plan: &ExecPlan, exit: Exit) -> Ended {
        const END_EXITED: i32 = 0;
        const END_SIGNALLED: i32 = 1;
        const END_SPAWN_FAILED: i32 = 2;
        const STAGE_CWD: i32 = 1;
        const STAGE_RLIMIT: i32 = 3;
        let program = plan
            .argv
            .first()
            .map(|a| a.to_string_lossy().into_owned())
            .unwrap_or_default();
        match exit.kind {
            END_EXITED => Ended::Exited {
                code: i64::from(exit.value),
                oom: exit.oom,
                by_init: false,
            },
            // As docker reports a signal death: 128 + the signal.
            END_SIGNALLED => Ended::Exited {
                code: 128 + i64::from(exit.value),
                oom: exit.oom,
                by_init: false,
            },
            END_SPAWN_FAILED => {
                let e = std::io::Error::from_raw_os_error(exit.errno);
                let o = if exit.value == STAGE_RLIMIT {
                    Outcome::new(
                        OutcomeKind::LaunchFailed,
                        format!("cannot set the call's limits in the container: {e}"),
                    )
                } else if exit.value == STAGE_CWD {
                    Outcome::new(
                        OutcomeKind::LaunchFailed,
                        format!(
                            "cannot enter {} in the container: {e}",
                            plan.cwd
                                .as_ref()
                                .map_or_else(|| "/".into(), |c| c.guest.display().to_string())
                        ),
                    )
                } else if exit.errno == 2 {
                    Outcome::new(
                        OutcomeKind::NotFound,
                        format!("{program}: not found in the container"),
                    )
                } else if exit.errno == 13 {
                    Outcome::new(
                        OutcomeKind::PermissionDenied,
                        format!("{program}: not executable in the container ({e})"),
                    )
                } else {
                    Outcome::new(
                        OutcomeKind::LaunchFailed,
                        format!("{program}: cannot run in the container: {e}"),
                    )
                };
                Ended::Refused(o)
            }
            _ => Ended::Refused(Outcome::new(
                OutcomeKind::LaunchFailed,
                "the warm container's helper refused the request",
            )),
        }
    }
}
