//! The engine: reaching it (socket, TCP or TLS), the image, what
//! `toolhost check` learns from it, and who owns a container (so that a
//! dead owner's containers are removed).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use bollard::Docker;
use bollard::query_parameters::{CreateImageOptions, ListContainersOptions};
use futures_util::StreamExt;

use super::cleanup::remove;
use super::{DockerBackend, LABEL, LABEL_OWNER, REQUEST_TIMEOUT_SECS};
use crate::outcome::{Outcome, OutcomeKind};

/// Cleanup of dead owners' containers runs once per process.
pub(super) static CLEANED: AtomicBool = AtomicBool::new(false);

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
    /// What the engine is: `Docker` or `Podman`.
    pub product: String,
    /// Its uid mapping: `rootless`, `userns-remap`, or `None` (the host's
    /// uids).
    pub remap: Option<&'static str>,
    /// The runtimes it has registered (name, path and arguments), when it
    /// says, and its default.
    pub runtimes: Option<Vec<(String, String, Vec<String>)>>,
    /// The engine's default runtime, when it says.
    pub default_runtime: Option<String>,
    /// On Podman, what its own API says: rootful or rootless (and the uid
    /// its containers' root is), and the cgroup version.
    pub podman: Option<String>,
    /// Whether the engine holds containers to their memory and pids limits
    /// by cgroup (a rootless Podman without cgroup controllers does not:
    /// toolhost then sets rlimits instead).
    pub cgroup_limits: bool,
    /// Why the engine cannot hold a call to its limits, when it cannot
    /// (a Podman with neither cgroup controllers nor the rlimits' ground).
    pub refusal: Option<String>,
    /// The configured image and whether the engine has it.
    pub image: Option<(String, Result<(), String>)>,
}

/// This process, as the owner label spells it: `MACHINE/PID/STARTTIME`.
pub(super) fn owner() -> String {
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
pub(super) fn machine() -> String {
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
pub(super) fn start_time(pid: u32) -> String {
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
pub(super) fn owner_alive(owner: &str) -> bool {
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

pub(super) fn unavailable(msg: impl Into<String>) -> Outcome {
    Outcome::new(OutcomeKind::BackendUnavailable, msg)
}

pub(super) fn engine_error(e: &bollard::errors::Error) -> String {
    match e {
        bollard::errors::Error::DockerResponseServerError { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

pub(super) fn status(e: &bollard::errors::Error) -> Option<u16> {
    match e {
        bollard::errors::Error::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

impl DockerBackend {
    /// The engine address this backend talks to.
    pub fn engine_address(&self) -> String {
        self.config
            .host
            .clone()
            .or_else(|| std::env::var("DOCKER_HOST").ok().filter(|h| !h.is_empty()))
            .unwrap_or_else(|| "unix:///var/run/docker.sock".into())
    }

    /// Whether the engine is reached over TLS (as [`Self::connect`] decides).
    pub(super) fn uses_tls(&self) -> bool {
        let addr = self.engine_address();
        if addr.starts_with("unix://") {
            return false;
        }
        addr.starts_with("https://")
            || (self.config.tls_ca.is_some()
                && self.config.tls_cert.is_some()
                && self.config.tls_key.is_some())
            || std::env::var("DOCKER_TLS_VERIFY").is_ok_and(|v| !v.is_empty() && v != "0")
    }

    pub(super) fn connect(&self) -> Result<Docker, String> {
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

    pub(super) async fn ensure_image(&self, docker: &Docker) -> Result<String, Outcome> {
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
    pub async fn engine_probe(&self) -> Result<EngineProbe, String> {
        let docker = self.client().await.map_err(|o| o.message)?;
        let v = docker
            .version()
            .await
            .map_err(|e| format!("version: {}", engine_error(&e)))?;
        let info = docker
            .info()
            .await
            .map_err(|e| format!("info: {}", engine_error(&e)))?;
        let runtimes = super::runtime::Runtimes::from_info(&info);
        let product = product(&v);
        let facts = self.engine_facts(docker).await.map_err(|o| o.message)?;
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
            product,
            remap: facts.remap,
            podman: facts
                .podman
                .as_ref()
                .map(super::podman::PodmanFacts::describe),
            cgroup_limits: facts.enforces_limits(),
            refusal: facts
                .podman
                .as_ref()
                .and_then(super::podman::PodmanFacts::refusal),
            runtimes: runtimes.registered.map(|r| {
                r.into_iter()
                    .map(|(name, (path, args))| (name, path, args))
                    .collect()
            }),
            default_runtime: runtimes.default,
            image,
        })
    }
}

/// What an engine's version says it is: `Podman` when a component is
/// Podman's engine, else `Docker`.
pub(super) fn product(v: &bollard::models::SystemVersion) -> String {
    let podman = v
        .components
        .iter()
        .flatten()
        .any(|c| c.name.to_ascii_lowercase().contains("podman"))
        || v.platform
            .as_ref()
            .is_some_and(|p| p.name.to_ascii_lowercase().contains("podman"));
    if podman { "Podman" } else { "Docker" }.to_string()
}

/// Removes toolhost containers whose owner process (on this host) is gone.
pub(super) async fn remove_dead_owners(docker: &Docker) -> usize {
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
