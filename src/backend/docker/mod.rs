//! The `docker` backend: an ephemeral, locked-down container per call, on a
//! real Docker engine (the local socket, or a remote engine over TCP/TLS).
//!
//! Invariants: every container is created with no network (unless the plan
//! allows it), all capabilities dropped, no-new-privileges, a read-only root,
//! a size-limited tmpfs at /tmp, memory = memory+swap, a pids limit, CPU and
//! file-size ulimits, the user who owns the allowed dirs with toolhost's
//! set-ID filter on the tool (`user.rs`), an init process (so the tool gets
//! normal signal semantics), `TMPDIR=/tmp`, and only the allowed dirs (and
//! configured read-only extras, and toolhost's helper) bind-mounted, each at
//! its own path. Each container
//! carries toolhost's labels and is removed in every case: success, error,
//! timeout, and a dropped call future (a removal is spawned). Containers left
//! by a toolhost process that died are removed when the next one connects.
//!
//! Warm mode (`[docker] warm = true`) keeps one container per backend, with
//! toolhost's command server as its init, and runs each call through it with
//! the same limits ([`warm`]); see docs/src/docker.md for what it gives up.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::models::{ContainerCreateBody, HostConfig, Mount, MountType, ResourcesUlimits};
use bollard::query_parameters::{
    AttachContainerOptions, CreateContainerOptions, CreateImageOptions, KillContainerOptions,
    ListContainersOptions, RemoveContainerOptions, WaitContainerOptions,
};
use futures_util::{Stream, StreamExt};
use tokio::io::AsyncWriteExt;

use crate::config::DockerConfig;
use crate::outcome::{Outcome, OutcomeKind, RunOutput};
use crate::output::CappedBuffer;
use crate::plan::BackendKind;
use crate::plan::ExecPlan;

mod user;
pub mod warm;

/// Label every toolhost container carries.
pub const LABEL: &str = "toolhost";
/// Label naming the backend instance (the session) a container belongs to.
pub const LABEL_SESSION: &str = "toolhost.session";
/// Label naming the process that owns a container: `HOST/PID/STARTTIME`.
pub const LABEL_OWNER: &str = "toolhost.owner";

/// Seconds bollard waits for an engine request.
const REQUEST_TIMEOUT_SECS: u64 = 120;

/// Cleanup of dead owners' containers runs once per process.
static CLEANED: AtomicBool = AtomicBool::new(false);

/// What `toolhost check` learns from the engine.
#[derive(Debug, Clone)]
pub struct EngineProbe {
    /// Where the engine was reached.
    pub address: String,
    /// Engine version.
    pub version: String,
    /// API version the engine speaks.
    pub api_version: String,
    /// Engine OS (`linux`).
    pub os: String,
    /// The configured image and whether the engine has it.
    pub image: Option<(String, Result<(), String>)>,
}

/// Runs plans in containers.
pub struct DockerBackend {
    config: DockerConfig,
    session: String,
    counter: AtomicU64,
    client: tokio::sync::OnceCell<Result<Docker, String>>,
    image_ok: AtomicBool,
    warm: tokio::sync::Mutex<Option<warm::WarmContainer>>,
    /// The engine's uid mapping and platform, asked once.
    facts: tokio::sync::OnceCell<Result<user::EngineFacts, String>>,
}

impl std::fmt::Debug for DockerBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerBackend")
            .field("session", &self.session)
            .field("image", &self.config.image)
            .finish()
    }
}

/// This process, as the owner label spells it: `MACHINE/PID/STARTTIME`.
fn owner() -> String {
    format!(
        "{}/{}/{}",
        machine(),
        std::process::id(),
        start_time(std::process::id())
    )
}

/// What identifies this kernel and pid namespace: a pid names the same
/// process only under the same boot id and pid namespace (hostnames repeat
/// across machines).
fn machine() -> String {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let pidns: String = std::fs::read_link("/proc/self/ns/pid")
        .map(|p| {
            p.to_string_lossy()
                .chars()
                .filter(char::is_ascii_digit)
                .collect()
        })
        .unwrap_or_default();
    if boot.is_empty() || pidns.is_empty() {
        return "unknown".into();
    }
    format!("{boot}:{pidns}")
}

/// A process's start time (clock ticks since boot, from /proc), "0" if unknown.
fn start_time(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            // Field 22, counted after the command name's closing parenthesis.
            let rest = &s[s.rfind(')')? + 1..];
            rest.split_whitespace().nth(19).map(str::to_string)
        })
        .unwrap_or_else(|| "0".into())
}

/// Whether the owner a label names is a live process on this host.
fn owner_alive(owner: &str) -> bool {
    let mut parts = owner.split('/');
    let (Some(host), Some(pid), Some(start)) = (parts.next(), parts.next(), parts.next()) else {
        return true;
    };
    let here = machine();
    if host != here || here == "unknown" {
        // Another machine's (or pid namespace's) process: not ours to judge.
        return true;
    }
    match pid.parse::<u32>() {
        Ok(pid) => start_time(pid) == start,
        Err(_) => true,
    }
}

fn unavailable(msg: impl Into<String>) -> Outcome {
    Outcome::new(OutcomeKind::BackendUnavailable, msg)
}

fn engine_error(e: &bollard::errors::Error) -> String {
    match e {
        bollard::errors::Error::DockerResponseServerError { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

fn status(e: &bollard::errors::Error) -> Option<u16> {
    match e {
        bollard::errors::Error::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

impl DockerBackend {
    /// A backend for this `[docker]` config; nothing is contacted until a call.
    pub fn new(config: &DockerConfig) -> Self {
        let session = format!(
            "{:x}{:x}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
                & 0xffff_ffff_ffff
        );
        DockerBackend {
            config: config.clone(),
            session,
            counter: AtomicU64::new(0),
            client: tokio::sync::OnceCell::new(),
            image_ok: AtomicBool::new(false),
            warm: tokio::sync::Mutex::new(None),
            facts: tokio::sync::OnceCell::new(),
        }
    }

    /// This backend's session id (the value of the `toolhost.session` label).
    pub fn session(&self) -> &str {
        &self.session
    }

    /// The engine address this backend talks to.
    pub fn engine_address(&self) -> String {
        self.config
            .host
            .clone()
            .or_else(|| std::env::var("DOCKER_HOST").ok().filter(|h| !h.is_empty()))
            .unwrap_or_else(|| "unix:///var/run/docker.sock".into())
    }

    fn connect(&self) -> Result<Docker, String> {
        let addr = self.engine_address();
        let version = bollard::API_DEFAULT_VERSION;
        let fail =
            |e: bollard::errors::Error| format!("cannot use the Docker engine at {addr}: {e}");
        if let Some(path) = addr.strip_prefix("unix://") {
            #[cfg(unix)]
            return Docker::connect_with_unix(path, REQUEST_TIMEOUT_SECS, version).map_err(fail);
            #[cfg(not(unix))]
            {
                let _ = path;
                return Err(format!(
                    "{addr}: unix sockets are not available on this platform"
                ));
            }
        }
        let tls = match (
            &self.config.tls_ca,
            &self.config.tls_cert,
            &self.config.tls_key,
        ) {
            (Some(ca), Some(cert), Some(key)) => Some((ca.clone(), cert.clone(), key.clone())),
            _ if std::env::var("DOCKER_TLS_VERIFY").is_ok_and(|v| !v.is_empty() && v != "0") => {
                let dir = std::env::var("DOCKER_CERT_PATH").map_err(|_| {
                    "DOCKER_TLS_VERIFY is set but DOCKER_CERT_PATH is not".to_string()
                })?;
                let dir = std::path::PathBuf::from(dir);
                Some((
                    dir.join("ca.pem"),
                    dir.join("cert.pem"),
                    dir.join("key.pem"),
                ))
            }
            _ => None,
        };
        match tls {
            Some((ca, cert, key)) => {
                let addr = addr.replacen("tcp://", "https://", 1);
                Docker::connect_with_ssl(&addr, &key, &cert, &ca, REQUEST_TIMEOUT_SECS, version)
                    .map_err(fail)
            }
            None if addr.starts_with("https://") => Err(format!(
                "{addr}: an https engine needs [docker] tls_ca, tls_cert and tls_key (or DOCKER_TLS_VERIFY and DOCKER_CERT_PATH)"
            )),
            None => Docker::connect_with_http(&addr, REQUEST_TIMEOUT_SECS, version).map_err(fail),
        }
    }

    /// The engine client: connected, version negotiated, and (once per
    /// process) containers of dead toolhost processes removed.
    pub async fn client(&self) -> Result<&Docker, Outcome> {
        let r = self
            .client
            .get_or_init(|| async {
                let docker = self.connect()?;
                let docker = docker.negotiate_version().await.map_err(|e| {
                    format!(
                        "the Docker engine at {} is unreachable: {}",
                        self.engine_address(),
                        engine_error(&e)
                    )
                })?;
                if !CLEANED.swap(true, Ordering::SeqCst) {
                    let n = remove_dead_owners(&docker).await;
                    if n > 0 {
                        tracing::info!(
                            "removed {n} container(s) left by toolhost processes that died"
                        );
                    }
                }
                Ok(docker)
            })
            .await;
        r.as_ref().map_err(|e| unavailable(e.clone()))
    }

    async fn ensure_image(&self, docker: &Docker) -> Result<String, Outcome> {
        let Some(image) = self.config.image.clone() else {
            return Err(unavailable(
                "the docker backend needs an image: set [docker] image in the config (docs/src/docker.md shows how to build a small one)",
            ));
        };
        if self.image_ok.load(Ordering::Relaxed) {
            return Ok(image);
        }
        match docker.inspect_image(&image).await {
            Ok(_) => {}
            Err(e) if status(&e) == Some(404) && self.config.pull => {
                let opts = CreateImageOptions {
                    from_image: Some(image.clone()),
                    ..Default::default()
                };
                let mut pull = docker.create_image(Some(opts), None, None);
                while let Some(step) = pull.next().await {
                    if let Err(e) = step {
                        return Err(unavailable(format!(
                            "cannot pull image {image}: {}",
                            engine_error(&e)
                        )));
                    }
                }
            }
            Err(e) if status(&e) == Some(404) => {
                return Err(unavailable(format!(
                    "image {image} is not on the Docker engine and [docker] pull is false: build it (`docker build -t {image} DIR`) or pull it (`docker pull {image}`), or set [docker] pull = true"
                )));
            }
            Err(e) => {
                return Err(unavailable(format!(
                    "cannot inspect image {image}: {}",
                    engine_error(&e)
                )));
            }
        }
        self.image_ok.store(true, Ordering::Relaxed);
        Ok(image)
    }

    /// For `toolhost check`: the engine's version (`Err`: unreachable), and,
    /// when an image is configured, whether the engine has it. Never pulls.
    pub async fn probe(&self) -> Result<EngineProbe, String> {
        let docker = self.client().await.map_err(|o| o.message)?;
        let v = docker
            .version()
            .await
            .map_err(|e| format!("version: {}", engine_error(&e)))?;
        let image = match &self.config.image {
            None => None,
            Some(i) => Some((
                i.clone(),
                match docker.inspect_image(i).await {
                    Ok(_) => Ok(()),
                    Err(e) if status(&e) == Some(404) && self.config.pull => Err(
                        "not on the engine; it will be pulled on first use ([docker] pull = true)"
                            .to_string(),
                    ),
                    Err(e) if status(&e) == Some(404) => {
                        Err("not on the engine and [docker] pull is false".to_string())
                    }
                    Err(e) => Err(engine_error(&e)),
                },
            )),
        };
        Ok(EngineProbe {
            address: self.engine_address(),
            version: v.version.unwrap_or_default(),
            api_version: v.api_version.unwrap_or_default(),
            os: v.os.unwrap_or_default(),
            image,
        })
    }

    fn labels(&self) -> HashMap<String, String> {
        HashMap::from([
            (LABEL.to_string(), "1".to_string()),
            (LABEL_SESSION.to_string(), self.session.clone()),
            (LABEL_OWNER.to_string(), owner()),
        ])
    }

    /// The container's host config: isolation and limits from the plan.
    fn host_config(&self, plan: &ExecPlan, held: &[crate::backend::protect::Held]) -> HostConfig {
        let limits = &plan.limits;
        let mut mounts: Vec<Mount> = plan
            .mounts
            .iter()
            .map(|m| Mount {
                target: Some(m.guest.to_string_lossy().into_owned()),
                source: Some(m.path.to_string_lossy().into_owned()),
                typ: Some(MountType::BIND),
                read_only: Some(m.read_only),
                ..Default::default()
            })
            .collect();
        // Protected paths (`backend::protect`): read-only binds over those
        // that exist, and writable ones over the dirs on the way to them.
        // A read-only dir nested (on the host) in a writable one mapped
        // apart is seen through the writable one too: read-only there also.
        for (target, m) in ro_elsewhere(plan) {
            mounts.push(Mount {
                target: Some(target.to_string_lossy().into_owned()),
                source: Some(m.path.to_string_lossy().into_owned()),
                typ: Some(MountType::BIND),
                read_only: Some(true),
                ..Default::default()
            });
        }
        // Held at every place the container sees it (dirs nested on the
        // host and mapped apart show one path at two places); `check_mounts`
        // refused one outside every mount.
        for h in held.iter().filter(|h| !h.link) {
            for target in held_places(plan, h) {
                mounts.push(Mount {
                    target: Some(target.to_string_lossy().into_owned()),
                    source: Some(h.source.to_string_lossy().into_owned()),
                    typ: Some(MountType::BIND),
                    read_only: Some(h.read_only),
                    ..Default::default()
                });
            }
        }
        for p in &self.config.extra_ro_mounts {
            mounts.push(Mount {
                target: Some(p.to_string_lossy().into_owned()),
                source: Some(p.to_string_lossy().into_owned()),
                typ: Some(MountType::BIND),
                read_only: Some(true),
                ..Default::default()
            });
        }
        let mut ulimits = Vec::new();
        if let Some(s) = limits.cpu_seconds {
            let s = i64::try_from(s).unwrap_or(i64::MAX);
            ulimits.push(ResourcesUlimits {
                name: Some("cpu".into()),
                soft: Some(s),
                hard: Some(s.saturating_add(1)),
            });
        }
        if let Some(b) = limits.file_size_bytes {
            let b = i64::try_from(b).unwrap_or(i64::MAX);
            ulimits.push(ResourcesUlimits {
                name: Some("fsize".into()),
                soft: Some(b),
                hard: Some(b),
            });
        }
        ulimits.push(ResourcesUlimits {
            name: Some("core".into()),
            soft: Some(0),
            hard: Some(0),
        });
        ulimits.push(nofile_ulimit());
        let memory = limits
            .memory_bytes
            .map(|b| i64::try_from(b).unwrap_or(i64::MAX));
        HostConfig {
            mounts: Some(mounts),
            network_mode: Some(if plan.allow_network { "bridge" } else { "none" }.into()),
            cap_drop: Some(vec!["ALL".into()]),
            security_opt: Some(vec!["no-new-privileges".into()]),
            readonly_rootfs: Some(true),
            tmpfs: Some(HashMap::from([(
                "/tmp".to_string(),
                format!(
                    "rw,nosuid,nodev,mode=1777,size={}m",
                    self.config.tmpfs_size_mb
                ),
            )])),
            memory,
            memory_swap: memory,
            pids_limit: limits
                .processes
                .map(|p| i64::try_from(p).unwrap_or(i64::MAX)),
            ulimits: Some(ulimits),
            init: Some(true),
            ipc_mode: Some("private".into()),
            // Output goes only through the attach stream and its cap: the
            // engine keeps no log of it on its disk.
            log_config: Some(bollard::models::HostConfigLogConfig {
                typ: Some("none".into()),
                config: None,
            }),
            ..Default::default()
        }
    }

    /// What the engine will mount, checked just before it does: the paths
    /// (resolved by the engine, following symlinks) must still be the dirs
    /// the sandbox holds handles on, since a call can rename an ancestor of a
    /// nested allowed dir and put a symlink in its place; paths must be UTF-8
    /// (the API takes strings); and no mount may expose the engine's socket.
    fn check_mounts(
        &self,
        plan: &ExecPlan,
        held: &[crate::backend::protect::Held],
    ) -> Result<(), Outcome> {
        let refuse = |m: String| Outcome::new(OutcomeKind::PermissionDenied, m);
        for m in &plan.mounts {
            if let Some(why) = unmountable_guest_path(&m.guest) {
                return Err(Outcome::new(
                    OutcomeKind::InvalidRequest,
                    format!(
                        "allowed dir {} cannot be mounted there in a container: {why}; give it another guest path",
                        m.guest.display()
                    ),
                ));
            }
        }
        for (m, (path, dir)) in plan.mounts.iter().zip(&plan.mount_dirs) {
            let shown = m.guest.display();
            if path.to_str().is_none() {
                return Err(Outcome::new(
                    OutcomeKind::InvalidRequest,
                    format!(
                        "allowed dir {shown} is not valid UTF-8 on the host (the Docker API takes UTF-8)"
                    ),
                ));
            }
            #[cfg(unix)]
            {
                use cap_std::fs::MetadataExt as _;
                use std::os::unix::fs::MetadataExt as _;
                let reason = |e: std::io::Error| match e.raw_os_error() {
                    Some(c) => std::io::Error::from_raw_os_error(c).to_string(),
                    None => e.kind().to_string(),
                };
                let held = dir
                    .dir_metadata()
                    .map_err(|e| refuse(format!("{shown}: {}", reason(e))))?;
                let now = std::fs::metadata(path)
                    .map_err(|e| refuse(format!("{shown}: {}", reason(e))))?;
                if (held.dev(), held.ino()) != (now.dev(), now.ino()) {
                    return Err(refuse(format!(
                        "allowed dir {shown} is no longer the directory the sandbox opened (something was renamed or replaced by a symlink); refused"
                    )));
                }
            }
            #[cfg(not(unix))]
            let _ = dir;
        }
        if plan
            .cwd
            .as_ref()
            .is_some_and(|c| c.guest.to_str().is_none())
        {
            return Err(Outcome::new(
                OutcomeKind::InvalidRequest,
                "the cwd is not valid UTF-8 (the Docker API takes UTF-8)",
            ));
        }
        // A protected path the engine could not be told about is not held;
        // nor one reached through a symlink, which a bind cannot cover here
        // (the engine resolves mount targets): the call could replace the link.
        let seen = |p: &std::path::Path| plan.guest_of(p).unwrap_or_else(|| p.to_path_buf());
        if let Some(h) = held.iter().find(|h| h.link) {
            // A link may lead anywhere: name it only where the tool sees it.
            let place = plan
                .guest_of(&h.target)
                .map(|p| format!(" ({})", p.display()))
                .unwrap_or_default();
            return Err(refuse(format!(
                "a protected path is a symlink (or lies through one){place}, which the docker backend cannot hold; refused (make it a directory, or change protected_paths)"
            )));
        }
        // Each held path must be seen inside the container.
        if let Some(h) = held.iter().find(|h| plan.guest_of(&h.target).is_none()) {
            return Err(refuse(format!(
                "protected path {} lies outside every allowed dir; refused",
                h.target.display()
            )));
        }
        if let Some(h) = held
            .iter()
            .find(|h| h.source.to_str().is_none() || h.target.to_str().is_none())
        {
            return Err(Outcome::new(
                OutcomeKind::InvalidRequest,
                format!(
                    "protected path {:?} leads to a path that is not valid UTF-8 (the Docker API takes UTF-8); refused",
                    seen(&h.target)
                ),
            ));
        }
        let mut sockets = vec![
            std::path::PathBuf::from("/var/run/docker.sock"),
            std::path::PathBuf::from("/run/docker.sock"),
        ];
        if let Some(p) = self.engine_address().strip_prefix("unix://") {
            sockets.push(p.into());
        }
        let resolved: Vec<std::path::PathBuf> = sockets
            .iter()
            .filter_map(|p| std::fs::canonicalize(p).ok())
            .collect();
        sockets.extend(resolved);
        // An extra mount inside a writable allowed dir could be swapped for
        // a symlink by a call, and the engine would mount where it leads.
        if let Some((p, m)) = self.config.extra_ro_mounts.iter().find_map(|p| {
            plan.mounts
                .iter()
                .find(|m| !m.read_only && p.starts_with(&m.path))
                .map(|m| (p, m))
        }) {
            return Err(refuse(format!(
                "[docker] extra_ro_mounts {} lies inside a writable allowed dir ({}), where a call could replace it; refused",
                p.display(),
                m.guest.display()
            )));
        }
        let mounts = plan
            .mounts
            .iter()
            .map(|m| m.path.as_path())
            .chain(self.config.extra_ro_mounts.iter().map(|p| p.as_path()));
        for m in mounts {
            if let Some(sock) = sockets.iter().find(|s| s.starts_with(m)) {
                return Err(refuse(format!(
                    "{} would expose the Docker engine's socket {} to the container; refused",
                    m.display(),
                    sock.display()
                )));
            }
        }
        Ok(())
    }

    fn next_name(&self) -> String {
        format!(
            "toolhost-{}-{}",
            self.session,
            self.counter.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// Runs the plan in a container (or, in warm mode, through the helper in
    /// the session's container). An engine's message that names a mapped
    /// dir's host path names its guest path instead.
    pub async fn run(&self, plan: &ExecPlan) -> RunOutput {
        let mut out = self.run_unscrubbed(plan).await;
        out.outcome.message = to_guest_paths(plan, &out.outcome.message);
        out
    }

    async fn run_unscrubbed(&self, plan: &ExecPlan) -> RunOutput {
        let start = Instant::now();
        let refuse = |o: Outcome| RunOutput::refused(BackendKind::Docker, o, start.elapsed());
        let mut argv = Vec::with_capacity(plan.argv.len());
        for (i, a) in plan.argv.iter().enumerate() {
            match a.to_str() {
                Some(s) => argv.push(s.to_string()),
                None => {
                    return refuse(Outcome::new(
                        OutcomeKind::InvalidRequest,
                        format!("argv[{i}] is not valid UTF-8 (the Docker API takes UTF-8)"),
                    ));
                }
            }
        }
        // The image defines PATH and HOME for its own layout: the host's
        // values would point at directories the container does not have.
        // TMPDIR names the container's own tmpfs: the host's temp dir is not
        // there.
        let mut env = Vec::with_capacity(plan.env.len() + 1);
        for (k, v) in &plan.env {
            if k == "PATH" || k == "HOME" || k == "TMPDIR" {
                continue;
            }
            if let (Some(k), Some(v)) = (k.to_str(), v.to_str()) {
                env.push(format!("{k}={v}"));
            }
        }
        env.push("TMPDIR=/tmp".to_string());
        // The protected-path mounts of this call, resolved once: the checks,
        // the binds and the helper's mount check all see this one list.
        let held = crate::backend::protect::held(plan);
        if let Err(o) = self.check_mounts(plan, &held) {
            return refuse(o);
        }
        let docker = match self.client().await {
            Ok(d) => d,
            Err(o) => return refuse(o),
        };
        let image = match self.ensure_image(docker).await {
            Ok(i) => i,
            Err(o) => return refuse(o),
        };
        let facts = match self.engine_facts(docker).await {
            Ok(f) => f,
            Err(o) => return refuse(o),
        };
        let user = match self.call_user(plan, &facts) {
            Ok(u) => u,
            Err(o) => return refuse(o),
        };
        if self.config.warm {
            return self
                .run_warm(docker, &image, plan, (argv, env), (user, &held), start)
                .await;
        }
        let mut host_config = self.host_config(plan, &held);
        // The tool runs under toolhost's filter, exec'd by the helper, where
        // the helper runs (`user`).
        let (entrypoint, cmd) = match (&facts.helper, user::filter_hex()) {
            (Ok(()), Some(hex)) => {
                let (helper, expect) = match warm::helper_mount(plan)
                    .and_then(|h| Ok((h, warm::expected_mounts(plan, &held)?)))
                {
                    Ok(m) => m,
                    Err(o) => return refuse(o),
                };
                if let Some(m) = host_config.mounts.as_mut() {
                    m.push(helper);
                }
                let mut cmd = vec!["--seccomp".to_string(), hex.to_string()];
                cmd.extend(expect);
                cmd.push("--exec".into());
                cmd.extend(argv);
                (Some(vec![warm::HELPER_TARGET.to_string()]), cmd)
            }
            // Without the helper nothing checks what the engine mounted, and
            // a protected path's bind is what a concurrent call can redirect
            // (a dir swapped for a symlink): refused, not run unchecked.
            (helper, _) if held.iter().any(|h| !h.link) => {
                let why = match helper {
                    Err(why) => why.clone(),
                    Ok(()) => "toolhost has no seccomp filter for this platform".to_string(),
                };
                return refuse(Outcome::new(
                    OutcomeKind::PermissionDenied,
                    format!(
                        "toolhost's docker helper cannot run here ({why}), and without it nothing checks that the engine mounted the protected paths where toolhost held them; refused (set protected_paths = [] to go without them on docker)"
                    ),
                ));
            }
            _ => (None, argv),
        };
        let name = self.next_name();
        let body = ContainerCreateBody {
            image: Some(image.clone()),
            entrypoint,
            cmd: Some(cmd),
            env: Some(env),
            // No allowed dir: the image's own working directory.
            working_dir: plan
                .cwd
                .as_ref()
                .map(|c| c.guest.to_string_lossy().into_owned()),
            user: Some(user),
            labels: Some(self.labels()),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            attach_stdin: Some(plan.stdin.is_some()),
            open_stdin: Some(plan.stdin.is_some()),
            stdin_once: Some(plan.stdin.is_some()),
            tty: Some(false),
            network_disabled: Some(!plan.allow_network),
            // An image's HEALTHCHECK would run a command of the image's in
            // the container, beside the tool and outside the helper's filter.
            healthcheck: Some(no_healthcheck()),
            host_config: Some(host_config),
            ..Default::default()
        };
        let (mut guard, created_id) = match create_guarded(docker, name, body, &image, plan).await {
            Ok(g) => g,
            Err(o) => return refuse(o),
        };
        let limits = &plan.limits;
        let mut out = CappedBuffer::new(limits.stdout_cap);
        let mut err = CappedBuffer::new(limits.stderr_cap);
        let id = created_id.as_str();
        let call = async {
            let attach = AttachContainerOptions {
                stream: true,
                stdout: true,
                stderr: true,
                stdin: plan.stdin.is_some(),
                // Attached before the start: nothing is missed, and logs
                // would repeat what the stream delivers.
                logs: false,
                ..Default::default()
            };
            let attached = docker
                .attach_container(id, Some(attach))
                .await
                .map_err(|e| launch_failed(&e))?;
            docker
                .start_container(id, None)
                .await
                .map_err(|e| start_refusal(&e))?;
            let mut input = attached.input;
            let stdin = plan.stdin.clone();
            let feed = async move {
                if let Some(bytes) = stdin {
                    // A tool that exits without reading its stdin closes the
                    // pipe: that is not an error of the call.
                    let _ = input.write_all(&bytes).await;
                }
                let _ = input.shutdown().await;
            };
            let drain = drain(attached.output, &mut out, &mut err);
            let ((), ()) = tokio::join!(feed, drain);
            let mut wait = docker.wait_container(id, None::<WaitContainerOptions>);
            let code = match wait.next().await {
                Some(Ok(w)) => w.status_code,
                // A non-zero exit comes back as an error carrying the code.
                Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => code,
                Some(Err(e)) => return Err(launch_failed(&e)),
                None => -1,
            };
            let oom = docker
                .inspect_container(id, None)
                .await
                .ok()
                .and_then(|i| i.state)
                .and_then(|s| s.oom_killed)
                .unwrap_or(false);
            Ok((code, oom))
        };
        let ended = tokio::time::timeout(limits.timeout, call).await;
        let result = match ended {
            Err(_) => {
                let _ = docker
                    .kill_container(
                        id,
                        Some(KillContainerOptions {
                            signal: "KILL".into(),
                        }),
                    )
                    .await;
                Ended::TimedOut
            }
            Ok(Err(o)) => Ended::Refused(o),
            Ok(Ok((code, oom))) => Ended::Exited {
                code,
                oom,
                by_init: true,
            },
        };
        guard.remove_now().await;
        finish(plan, start, result, out, err)
    }

    /// Drops the session's warm container.
    async fn discard_warm(&self, docker: &Docker) {
        if let Some(w) = self.warm.lock().await.take() {
            remove(docker, &w.id).await;
        }
    }

    /// Removes this backend's warm container, if any. Call before dropping
    /// the backend for a prompt cleanup; dropping it also spawns the removal.
    pub async fn shutdown(&self) {
        if let Ok(docker) = self.client().await {
            self.discard_warm(docker).await;
        }
    }
}

impl Drop for DockerBackend {
    fn drop(&mut self) {
        let warm = self.warm.get_mut().take();
        if let (Some(w), Some(Ok(docker))) = (warm, self.client.get()) {
            spawn_removal(docker.clone(), w.id);
        }
    }
}

/// Drains a multiplexed output stream into the capped buffers.
async fn drain(
    mut output: std::pin::Pin<
        Box<dyn Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>,
    >,
    out: &mut CappedBuffer,
    err: &mut CappedBuffer,
) {
    while let Some(item) = output.next().await {
        match item {
            Ok(LogOutput::StdOut { message }) | Ok(LogOutput::Console { message }) => {
                out.push(&message)
            }
            Ok(LogOutput::StdErr { message }) => err.push(&message),
            Ok(LogOutput::StdIn { .. }) => {}
            Err(_) => break,
        }
    }
}

enum Ended {
    Refused(Outcome),
    TimedOut,
    /// The tool's exit code, whether the memory limit killed it, and whether
    /// the code came from docker's init (whose own 126/127 mean the program
    /// never started; warm mode reports that explicitly instead).
    Exited {
        code: i64,
        oom: bool,
        by_init: bool,
    },
}

fn finish(
    plan: &ExecPlan,
    start: Instant,
    ended: Ended,
    out: CappedBuffer,
    err: CappedBuffer,
) -> RunOutput {
    let limits = &plan.limits;
    let mb = |b: Option<u64>| b.unwrap_or(0) >> 20;
    let (outcome, returncode, timed_out) = match ended {
        Ended::Refused(o) => (o, None, false),
        Ended::TimedOut => (
            Outcome::new(
                OutcomeKind::TimedOut,
                format!(
                    "timed out after {}; all its processes were killed",
                    super::direct::fmt_secs(limits.timeout)
                ),
            ),
            None,
            true,
        ),
        Ended::Exited { code, oom, by_init } => {
            let code = i32::try_from(code).unwrap_or(-1);
            let o = if oom {
                Outcome::new(
                    OutcomeKind::MemoryLimit,
                    format!(
                        "killed: the container's memory limit of {} MiB was reached",
                        mb(limits.memory_bytes)
                    ),
                )
            } else if code == 152 && limits.cpu_seconds.is_some() {
                Outcome::new(
                    OutcomeKind::CpuLimit,
                    format!(
                        "killed by SIGXCPU: CPU limit of {} s reached",
                        limits.cpu_seconds.unwrap_or(0)
                    ),
                )
            } else if code == 153 && limits.file_size_bytes.is_some() {
                Outcome::new(
                    OutcomeKind::FileSizeLimit,
                    format!(
                        "killed by SIGXFSZ: file size limit of {} MiB reached",
                        mb(limits.file_size_bytes)
                    ),
                )
            } else if let Some(kind) = launch_failure(code, &out, &err).filter(|_| by_init) {
                // The program could not be started: docker's init (or, for an
                // exec, the runtime) said so and exited 126/127; or the
                // helper refused to start it (125).
                if code == 125 {
                    let said = String::from_utf8_lossy(err.bytes());
                    let said = said
                        .lines()
                        .next()
                        .unwrap_or("")
                        .trim_start_matches("[FATAL toolhost-helper] ");
                    return RunOutput::refused(
                        BackendKind::Docker,
                        Outcome::new(
                            kind,
                            format!("toolhost's helper refused to start the tool: {said}"),
                        ),
                        start.elapsed(),
                    );
                }
                let why = if kind == OutcomeKind::NotFound {
                    "not found"
                } else {
                    "not executable"
                };
                let program = plan
                    .argv
                    .first()
                    .map(|a| a.to_string_lossy())
                    .unwrap_or_default();
                return RunOutput::refused(
                    BackendKind::Docker,
                    Outcome::new(kind, format!("{program}: {why} in the container")),
                    start.elapsed(),
                );
            } else {
                Outcome::new(OutcomeKind::Exited, format!("exited with code {code}"))
            };
            (o, Some(code), false)
        }
    };
    let truncated = out.truncated() || err.truncated();
    RunOutput {
        stdout: out.into_string(),
        stderr: err.into_string(),
        returncode,
        timed_out,
        truncated,
        outcome,
        backend: BackendKind::Docker,
        duration: start.elapsed(),
        isolation: None,
    }
}

/// The health check that turns off the image's own.
pub(super) fn no_healthcheck() -> bollard::models::HealthConfig {
    bollard::models::HealthConfig {
        test: Some(vec!["NONE".to_string()]),
        ..Default::default()
    }
}

/// Whether exit code 126/127 came from docker's init (`[FATAL tini ...] exec
/// PROGRAM failed`) or the runtime (`OCI runtime exec failed`) rather than
/// from the tool: then the program never ran.
fn launch_failure(code: i32, out: &CappedBuffer, err: &CappedBuffer) -> Option<OutcomeKind> {
    // The helper refused before the tool ran: a mount not as checked, or
    // no filter.
    if code == 125 && String::from_utf8_lossy(err.bytes()).starts_with("[FATAL toolhost-helper] ") {
        return Some(OutcomeKind::PermissionDenied);
    }
    if code != 126 && code != 127 {
        return None;
    }
    let text = |b: &CappedBuffer| String::from_utf8_lossy(b.bytes()).into_owned();
    let all = format!("{}{}", text(out), text(err));
    let from_init = (all.starts_with("[FATAL tini")
        || all.starts_with("[FATAL toolhost-helper] exec "))
        && all.contains(" failed: ");
    let from_runtime = all.contains("OCI runtime exec failed");
    if !(from_init || from_runtime) {
        return None;
    }
    let lower = all.to_lowercase();
    if lower.contains("permission denied") {
        Some(OutcomeKind::PermissionDenied)
    } else {
        Some(OutcomeKind::NotFound)
    }
}

fn launch_failed(e: &bollard::errors::Error) -> Outcome {
    Outcome::new(
        OutcomeKind::LaunchFailed,
        format!("Docker engine: {}", engine_error(e)),
    )
}

/// Each read-only allowed dir's places in the container other than its own
/// guest path (where a writable dir holding it on the host shows it).
pub(super) fn ro_elsewhere(plan: &ExecPlan) -> Vec<(std::path::PathBuf, &crate::plan::Mount)> {
    let mut out = Vec::new();
    for m in plan.mounts.iter().filter(|m| m.read_only) {
        for p in plan.guest_places(&m.path) {
            if p != m.guest && !plan.mounts.iter().any(|o| o.guest == p) {
                out.push((p, m));
            }
        }
    }
    out
}

/// The places in the container where `h` is bound: each place it is seen
/// at, except one that is an allowed dir's own mount point (a writable bind
/// over a dir on the way to a protected path, when that dir is a nested
/// allowed dir: its own mount already pins it, and a second mount at one
/// point is refused by the engine).
pub(super) fn held_places(
    plan: &ExecPlan,
    h: &crate::backend::protect::Held,
) -> Vec<std::path::PathBuf> {
    plan.guest_places(&h.target)
        .into_iter()
        .filter(|p| h.read_only || !plan.mounts.iter().any(|m| &m.guest == p))
        .collect()
}

/// Why a container cannot have an allowed dir mounted at `guest`, if it
/// cannot: the container's own root, its kernel file systems, `/etc`, its
/// tmpfs, the image's program dirs and the helper's place are not for the
/// workspace.
fn unmountable_guest_path(guest: &std::path::Path) -> Option<&'static str> {
    if guest == std::path::Path::new("/") {
        return Some("`/` is the container's own root file system");
    }
    for (reserved, why) in [
        ("/proc", "`/proc` is the container's process file system"),
        ("/sys", "`/sys` is the container's kernel file system"),
        ("/dev", "`/dev` holds the container's devices"),
        (
            "/etc",
            "`/etc` is where the engine and the tool's programs read users, groups and libraries from, which a tool could then write",
        ),
        (
            warm::HELPER_TARGET,
            "that is where toolhost's helper is mounted",
        ),
    ] {
        if guest.starts_with(reserved) {
            return Some(why);
        }
    }
    if guest == std::path::Path::new("/tmp") {
        return Some("`/tmp` is the container's own tmpfs");
    }
    // Over a dir of the image's programs or libraries, a tool would choose
    // what the next program run by name, or the next library loaded, is.
    const PROGRAM_TREES: &[&str] = &[
        "/bin",
        "/sbin",
        "/lib",
        "/lib32",
        "/lib64",
        "/libx32",
        "/usr/bin",
        "/usr/sbin",
        "/usr/lib",
        "/usr/lib32",
        "/usr/lib64",
        "/usr/libx32",
        "/usr/libexec",
        "/usr/local/bin",
        "/usr/local/sbin",
        "/usr/local/lib",
    ];
    if ["/usr", "/usr/local"]
        .iter()
        .any(|d| guest == std::path::Path::new(d))
        || PROGRAM_TREES.iter().any(|d| guest.starts_with(d))
    {
        return Some("it is (or lies in) one of the image's program or library dirs");
    }
    None
}

/// `msg` with each mapped dir's host path written as its guest path (the
/// longest host path first, so a nested dir's is replaced whole).
fn to_guest_paths(plan: &ExecPlan, msg: &str) -> String {
    let mut mapped: Vec<&crate::plan::Mount> =
        plan.mounts.iter().filter(|m| m.guest != m.path).collect();
    if mapped.is_empty() {
        return msg.to_string();
    }
    mapped.sort_by_key(|m| std::cmp::Reverse(m.path.as_os_str().len()));
    let mut out = msg.to_string();
    for m in mapped {
        if let (Some(host), Some(guest)) = (m.path.to_str(), m.guest.to_str()) {
            out = out.replace(host, guest);
        }
    }
    out
}

/// Why the engine refused to create a container, in terms a user can act on.
fn create_refusal(e: &bollard::errors::Error, image: &str, plan: &ExecPlan) -> Outcome {
    let msg = engine_error(e);
    if status(e) == Some(404) {
        return unavailable(format!(
            "image {image} is not on the Docker engine: build it (`docker build -t {image} DIR`) or pull it"
        ));
    }
    if msg.contains("bind source path does not exist") || msg.contains("invalid mount config") {
        let dirs: Vec<String> = plan
            .mounts
            .iter()
            .map(|m| m.guest.display().to_string())
            .collect();
        return unavailable(format!(
            "the Docker engine cannot bind-mount the allowed dirs ({}): bind mounts need an engine that shares this machine's filesystem ({msg})",
            dirs.join(", ")
        ));
    }
    Outcome::new(OutcomeKind::LaunchFailed, format!("Docker engine: {msg}"))
}

/// Why a container or exec could not start: a missing program is `not_found`.
fn start_refusal(e: &bollard::errors::Error) -> Outcome {
    let msg = engine_error(e);
    let lower = msg.to_lowercase();
    if lower.contains("executable file not found") || lower.contains("no such file or directory") {
        return Outcome::new(OutcomeKind::NotFound, format!("Docker engine: {msg}"));
    }
    if lower.contains("permission denied") {
        return Outcome::new(
            OutcomeKind::PermissionDenied,
            format!("Docker engine: {msg}"),
        );
    }
    launch_failed(e)
}

async fn remove(docker: &Docker, id: &str) {
    let opts = RemoveContainerOptions {
        force: true,
        v: true,
        ..Default::default()
    };
    if let Err(e) = docker.remove_container(id, Some(opts)).await
        && status(&e) != Some(404)
    {
        tracing::warn!("cannot remove container {id}: {}", engine_error(&e));
    }
}

/// Removals spawned by dropped calls, so that a process about to exit can
/// wait for them ([`flush_removals`]).
static PENDING: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>> =
    std::sync::Mutex::new(Vec::new());

/// Waits for the container removals that dropped calls have spawned. A
/// process that stops its calls before exiting (on a signal, say) calls this
/// so that their containers are gone when it exits.
pub async fn flush_removals() {
    loop {
        let pending: Vec<_> = {
            let mut p = PENDING.lock().unwrap_or_else(|e| e.into_inner());
            p.drain(..).collect()
        };
        if pending.is_empty() {
            return;
        }
        for h in pending {
            let _ = h.await;
        }
    }
}

fn spawn_removal(docker: Docker, id: String) {
    match tokio::runtime::Handle::try_current() {
        Ok(h) => {
            let task = h.spawn(async move { remove(&docker, &id).await });
            let mut p = PENDING.lock().unwrap_or_else(|e| e.into_inner());
            p.retain(|t| !t.is_finished());
            p.push(task);
        }
        Err(_) => tracing::warn!(
            "container {id} left running: no async runtime to remove it (it is removed at the next start)"
        ),
    }
}

/// The locked warm slot of a call in progress. Unless the call ends cleanly
/// (`keep`), its container is removed: now by `release`, or in the
/// background if the call's future is dropped.
struct WarmSlot<'a> {
    slot: tokio::sync::MutexGuard<'a, Option<warm::WarmContainer>>,
    docker: Docker,
    keep: bool,
}

impl WarmSlot<'_> {
    async fn release(&mut self) {
        if !self.keep
            && let Some(w) = self.slot.take()
        {
            remove(&self.docker, &w.id).await;
        }
        self.keep = true;
    }
}

impl Drop for WarmSlot<'_> {
    fn drop(&mut self) {
        if !self.keep
            && let Some(w) = self.slot.take()
        {
            spawn_removal(self.docker.clone(), w.id);
        }
    }
}

/// Creates a container named `name`, removed whatever happens from here on:
/// by name until the engine has given its id (a dropped create leaves none),
/// then by id through the returned guard.
async fn create_guarded(
    docker: &Docker,
    name: String,
    body: ContainerCreateBody,
    image: &str,
    plan: &ExecPlan,
) -> Result<(Removal, String), Outcome> {
    let opts = CreateContainerOptions {
        name: Some(name.clone()),
        ..Default::default()
    };
    let mut guard = Removal::new(docker.clone(), name);
    match docker.create_container(Some(opts), body).await {
        Ok(c) => {
            guard.id = Some(c.id.clone());
            Ok((guard, c.id))
        }
        Err(e) => {
            guard.remove_now().await;
            Err(create_refusal(&e, image, plan))
        }
    }
}

/// Removes the container when dropped, unless already removed.
struct Removal {
    docker: Docker,
    id: Option<String>,
}

impl Removal {
    fn new(docker: Docker, id: String) -> Self {
        Removal {
            docker,
            id: Some(id),
        }
    }

    async fn remove_now(&mut self) {
        if let Some(id) = self.id.take() {
            remove(&self.docker, &id).await;
        }
    }

    fn disarm(&mut self) {
        self.id = None;
    }
}

impl Drop for Removal {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            spawn_removal(self.docker.clone(), id);
        }
    }
}

/// Removes toolhost containers whose owner process (on this host) is gone.
async fn remove_dead_owners(docker: &Docker) -> usize {
    let opts = ListContainersOptions {
        all: true,
        filters: Some(HashMap::from([(
            "label".to_string(),
            vec![LABEL.to_string()],
        )])),
        ..Default::default()
    };
    let list = match docker.list_containers(Some(opts)).await {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!("cannot list toolhost containers: {}", engine_error(&e));
            return 0;
        }
    };
    let mut n = 0;
    for c in list {
        let owner = c
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_OWNER))
            .cloned()
            .unwrap_or_default();
        if owner_alive(&owner) {
            continue;
        }
        if let Some(id) = c.id {
            remove(docker, &id).await;
            n += 1;
        }
    }
    n
}

/// Open files per process in a container. Without it, a container inherits the
/// engine's own limit (20000 here, often 1M): a tool could hold that many files
/// of the host's kernel. 4096 is more than build tools ask for.
pub(super) const CONTAINER_NOFILE: i64 = 4096;

pub(super) fn nofile_ulimit() -> ResourcesUlimits {
    ResourcesUlimits {
        name: Some("nofile".into()),
        soft: Some(CONTAINER_NOFILE),
        hard: Some(CONTAINER_NOFILE),
    }
}
