//! Podman behind its Docker-compatible API: what toolhost must know of it
//! that the compatible API does not say, and what it does differently there.
//!
//! - **What is asked.** Podman's `/info` names neither a rootless engine nor
//!   the cgroup controllers it may use (it says `MemoryLimit: true` on an
//!   engine that ignores every limit), so toolhost also reads Podman's own
//!   `/v4.0.0/libpod/info` ([`libpod_info`]): whether it is rootless, the
//!   host uid its containers' root maps to, and its cgroup controllers.
//! - **The user, rootless.** A rootless engine's containers run in a user
//!   namespace where uid 0 is the engine's user and every other uid is one of
//!   its subordinate uids. Each container gets `--userns=keep-id`, which maps
//!   the engine's user to itself; a tool runs as that uid, so what it
//!   creates belongs to that user on the host. A call that would run as any
//!   other uid is refused (`user.rs`).
//! - **Limits without cgroups.** A rootless engine on cgroup v1 (or on v2
//!   without delegated controllers) applies no memory, pids or CPU limit, and
//!   says so only in a warning on its own log. There toolhost sets rlimits
//!   instead (as the `direct` backend does): `RLIMIT_AS` per process for
//!   memory, and `RLIMIT_NPROC` for processes, which the kernel counts per
//!   user namespace, that is per container under keep-id. Warm mode is
//!   refused there: one container serves every call, and its limits would
//!   be the helper's.
//! - **`nproc`.** Unless told, Podman raises a container's `RLIMIT_NPROC`
//!   (and `RLIMIT_NOFILE`, which toolhost always sets) to 1048576, which an
//!   engine without `CAP_SYS_RESOURCE` (in a container, in some VMs) cannot
//!   do: every create then fails "error setting rlimit type 6". toolhost asks
//!   for the kernel's `pid_max` instead, a limit no uid can reach.

use std::time::Duration;

/// What Podman's own API says of the engine.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct PodmanFacts {
    /// The engine runs as an unprivileged user.
    pub rootless: bool,
    /// The host uid and gid its containers' uid 0 maps to (rootless: the
    /// engine's user); `None` when uids are the host's.
    pub host_ids: Option<(u32, u32)>,
    /// The cgroup controllers it can use for its containers (`memory`,
    /// `pids`, ...); empty for rootless on cgroup v1.
    pub controllers: Vec<String>,
    /// `v1` or `v2`.
    pub cgroup_version: String,
    /// The engine host's kernel release (`6.1.0-...`).
    pub kernel: String,
}

impl PodmanFacts {
    /// Whether the engine holds containers to their memory and pids limits.
    pub(super) fn enforces_limits(&self) -> bool {
        ["memory", "pids"]
            .iter()
            .all(|c| self.controllers.iter().any(|have| have == c))
    }

    /// Why calls cannot be held here, when they cannot: an engine that
    /// applies no cgroup limits is held by rlimits only where it is
    /// rootless (each container its own user namespace, where the kernel
    /// counts `RLIMIT_NPROC`) on Linux 5.14 or later (before, the count is
    /// of every process of the uid on the host, and root is not counted).
    pub(super) fn refusal(&self) -> Option<String> {
        if self.enforces_limits() {
            return None;
        }
        if !self.rootless {
            return Some(format!(
                "the Podman engine is rootful and applies no memory and pids limits (its cgroup controllers: {:?}), and rlimits cannot stand in for them as root: refused (docs/src/docker.md#podman)",
                self.controllers
            ));
        }
        let version: Vec<u32> = self
            .kernel
            .split(|c: char| !c.is_ascii_digit())
            .take(2)
            .map(|n| n.parse().unwrap_or(0))
            .collect();
        if version.as_slice() < [5, 14].as_slice() {
            return Some(format!(
                "the Podman engine is rootless without cgroup controllers, so toolhost holds its containers by rlimits, and its kernel ({:?}) counts RLIMIT_NPROC across every container of the user before Linux 5.14: refused (docs/src/docker.md#podman)",
                self.kernel
            ));
        }
        None
    }

    /// Reads the facts out of `/libpod/info`'s JSON.
    pub(super) fn from_info(info: &serde_json::Value) -> Result<Self, String> {
        let host = info
            .get("host")
            .ok_or("libpod info has no \"host\" object")?;
        let rootless = host
            .pointer("/security/rootless")
            .and_then(|v| v.as_bool())
            .ok_or("libpod info has no host.security.rootless")?;
        let root_of = |map: &str| -> Option<u32> {
            host.pointer(&format!("/idMappings/{map}"))?
                .as_array()?
                .iter()
                .find(|m| m.get("container_id").and_then(|v| v.as_u64()) == Some(0))
                .and_then(|m| m.get("host_id")?.as_u64())
                .and_then(|id| u32::try_from(id).ok())
        };
        let host_ids = match (root_of("uidmap"), root_of("gidmap")) {
            (Some(u), Some(g)) => Some((u, g)),
            _ if rootless => {
                return Err("libpod info of a rootless engine has no uid and gid mapping".into());
            }
            _ => None,
        };
        let controllers = host
            .get("cgroupControllers")
            .and_then(|v| v.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|c| c.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let cgroup_version = host
            .get("cgroupVersion")
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string();
        let kernel = host
            .get("kernel")
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string();
        Ok(PodmanFacts {
            rootless,
            host_ids,
            controllers,
            cgroup_version,
            kernel,
        })
    }

    /// For `toolhost check`'s engine row.
    pub(super) fn describe(&self) -> String {
        let who = match (self.rootless, self.host_ids) {
            (true, Some((u, _))) => format!("rootless (its containers' root is uid {u})"),
            (true, None) => "rootless".to_string(),
            (false, _) => "rootful".to_string(),
        };
        format!("{who}, cgroup {}", self.cgroup_version)
    }
}

/// The helper's `--cgroup-limits MEMORY:PIDS` for a container on a Podman
/// that holds containers by cgroup: a Podman that lists the controllers
/// may still give a container no cgroup (`cgroups = "disabled"`), and the
/// helper checks, before anything runs, that the limits it finds there
/// are the ones asked. Nothing elsewhere (Docker; a Podman that holds its
/// containers by rlimits).
pub(super) fn cgroup_check(
    plan: &crate::plan::ExecPlan,
    podman: Option<&PodmanFacts>,
) -> Vec<String> {
    if !podman.is_some_and(PodmanFacts::enforces_limits) {
        return Vec::new();
    }
    let or_none = |v: Option<u64>| v.map_or("-".to_string(), |n| n.to_string());
    vec![
        "--cgroup-limits".to_string(),
        format!(
            "{}:{}",
            or_none(plan.limits.memory_bytes),
            or_none(plan.limits.processes)
        ),
    ]
}

/// The largest response toolhost reads from Podman's own API (its info is
/// a few KiB; a container's inspect repeats the call's argv and
/// environment, which Linux bounds at a few MiB).
const MAX_INFO: u64 = 16 << 20;

/// Reads Podman's `/v4.0.0/libpod/info` at `address` (`unix://PATH`,
/// `tcp://HOST:PORT` or `http://HOST:PORT`), with HTTP/1.0 so that the
/// body comes whole, up to the connection's end (as every libpod request
/// here).
/// `Ok(None)` when the engine has no libpod API (a 404: Docker's).
pub(super) async fn libpod_info(
    address: &str,
    timeout: Duration,
) -> Result<Option<PodmanFacts>, String> {
    match libpod_get(address, "info", timeout).await {
        Ok(info) => PodmanFacts::from_info(&info).map(Some),
        Err(Fetch::NotFound) => Ok(None),
        Err(Fetch::Failed(e)) => Err(e),
    }
}

/// How a libpod request failed.
enum Fetch {
    /// The engine answered 404: it has no such API (or no such container).
    NotFound,
    Failed(String),
}

impl From<String> for Fetch {
    fn from(e: String) -> Self {
        Fetch::Failed(e)
    }
}

/// How a Podman container stands, from its own inspect: `None` until it
/// has exited (paused or being stopped included), then its exit code and
/// whether Podman saw an OOM kill; an error in any other state (removing,
/// unknown, none said).
pub(super) async fn container_exit(
    address: &str,
    id: &str,
    timeout: Duration,
) -> Result<Option<(i64, bool)>, String> {
    let c = libpod_container(address, id, timeout).await?;
    let state = c.get("State").ok_or("libpod inspect has no State")?;
    state_end(id, state)
}

/// The end a libpod `State` says, if it says one (see [`container_exit`]).
fn state_end(id: &str, state: &serde_json::Value) -> Result<Option<(i64, bool)>, String> {
    let status = state.get("Status").and_then(|v| v.as_str()).unwrap_or("");
    match status {
        // Ended: what libpod says of a container whose process has exited.
        "exited" | "stopped" => {}
        // Not yet, or paused or being stopped from outside: still the call's.
        "created" | "configured" | "initialized" | "running" | "paused" | "stopping" => {
            return Ok(None);
        }
        other => return Err(format!("container {id} is {other:?}")),
    }
    let code = state
        .get("ExitCode")
        .and_then(|v| v.as_i64())
        .ok_or("libpod inspect has no ExitCode")?;
    let oom = state
        .get("OOMKilled")
        .and_then(|v| v.as_bool())
        .unwrap_or(false);
    Ok(Some((code, oom)))
}

async fn libpod_container(
    address: &str,
    id: &str,
    timeout: Duration,
) -> Result<serde_json::Value, String> {
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(format!("container id {id:?} is not alphanumeric"));
    }
    libpod_get(address, &format!("containers/{id}/json"), timeout)
        .await
        .map_err(|e| match e {
            Fetch::NotFound => format!("{address}: no container {id}"),
            Fetch::Failed(e) => e,
        })
}

/// The OCI runtime Podman created container `id` under (its own inspect's
/// `OCIRuntime`: the compatible one says `oci` whatever it was).
pub(super) async fn container_runtime(
    address: &str,
    id: &str,
    timeout: Duration,
) -> Result<String, String> {
    let c = libpod_container(address, id, timeout).await?;
    c.get("OCIRuntime")
        .and_then(|v| v.as_str())
        .map(str::to_string)
        .ok_or_else(|| "libpod inspect has no OCIRuntime".to_string())
}

/// GETs `/v4.0.0/libpod/PATH` at `address`, as JSON.
async fn libpod_get(
    address: &str,
    path: &str,
    timeout: Duration,
) -> Result<serde_json::Value, Fetch> {
    let body = tokio::time::timeout(timeout, fetch(address, path))
        .await
        .map_err(|_| format!("no answer from {address} in {timeout:?}"))??;
    Ok(serde_json::from_slice(&body).map_err(|e| format!("libpod {path}: {e}"))?)
}

async fn fetch(address: &str, path: &str) -> Result<Vec<u8>, Fetch> {
    let request = format!(
        "GET /v4.0.0/libpod/{path} HTTP/1.0\r\nHost: podman\r\nUser-Agent: toolhost\r\n\r\n"
    );
    let request = request.as_bytes();
    let io = |e: std::io::Error| format!("{address}: {e}");
    let raw = if let Some(path) = address.strip_prefix("unix://") {
        #[cfg(unix)]
        {
            let s = tokio::net::UnixStream::connect(path).await.map_err(io)?;
            exchange(s, request).await.map_err(io)?
        }
        #[cfg(not(unix))]
        {
            let _ = path;
            return Err(Fetch::Failed(format!(
                "{address}: no unix sockets on this platform"
            )));
        }
    } else if let Some(hostport) = address
        .strip_prefix("tcp://")
        .or_else(|| address.strip_prefix("http://"))
    {
        let hostport = hostport.trim_end_matches('/');
        let s = tokio::net::TcpStream::connect(hostport).await.map_err(io)?;
        exchange(s, request).await.map_err(io)?
    } else {
        return Err(Fetch::Failed(format!(
            "{address}: toolhost reads Podman's own API only over a unix socket or plain TCP"
        )));
    };
    body_of(&raw).map_err(|e| match e {
        Fetch::Failed(e) => Fetch::Failed(format!("{address}: {e}")),
        e => e,
    })
}

/// Writes `request` and reads the whole response, up to [`MAX_INFO`].
async fn exchange<S>(mut s: S, request: &[u8]) -> std::io::Result<Vec<u8>>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    s.write_all(request).await?;
    let mut raw = Vec::new();
    (&mut s).take(MAX_INFO).read_to_end(&mut raw).await?;
    Ok(raw)
}

/// The body of a whole HTTP/1.0 response, when its status is 200.
fn body_of(raw: &[u8]) -> Result<Vec<u8>, Fetch> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| Fetch::Failed("no complete HTTP response".into()))?;
    let head = String::from_utf8_lossy(&raw[..split]);
    let status = head.lines().next().unwrap_or_default();
    match status.split_whitespace().nth(1) {
        Some("200") => Ok(raw[split + 4..].to_vec()),
        Some("404") => Err(Fetch::NotFound),
        _ => Err(Fetch::Failed(format!("libpod: {status}"))),
    }
}

/// The `nproc` ulimit toolhost asks Podman for when the engine holds the
/// processes by cgroup: one that never binds, so that Podman does not try
/// to raise it to 1048576 (see the module's text). That is the kernel's
/// `pid_max` (no uid's processes can exceed it), or this process's own
/// hard limit when lower: an engine without `CAP_SYS_RESOURCE` cannot go
/// past its own, which on its host is most likely the same (systemd sets
/// `pid_max` to 4194304 and leaves users some 100,000). 32768, the
/// kernel's default `pid_max`, when neither can be read. The helper only
/// ever lowers a limit, so a ceiling above the engine's own is held by that.
pub(super) fn nproc_ceiling() -> i64 {
    let pid_max = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .filter(|n| *n > 0);
    #[cfg(unix)]
    let own = rustix::process::getrlimit(rustix::process::Resource::Nproc)
        .maximum
        .and_then(|m| i64::try_from(m).ok())
        .filter(|n| *n > 0);
    #[cfg(not(unix))]
    let own: Option<i64> = None;
    match (pid_max, own) {
        (Some(p), Some(o)) => p.min(o),
        (Some(n), None) | (None, Some(n)) => n,
        (None, None) => 32768,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(json: &str) -> Result<PodmanFacts, String> {
        PodmanFacts::from_info(&serde_json::from_str(json).expect("json"))
    }

    #[test]
    fn a_rootless_engine_is_read_with_its_mapping() {
        let f = info(
            r#"{"host": {"cgroupVersion": "v1", "cgroupControllers": [],
                "security": {"rootless": true},
                "idMappings": {
                  "uidmap": [{"container_id": 0, "host_id": 1001, "size": 1},
                             {"container_id": 1, "host_id": 165536, "size": 65536}],
                  "gidmap": [{"container_id": 1, "host_id": 165536, "size": 65536},
                             {"container_id": 0, "host_id": 1002, "size": 1}]}}}"#,
        )
        .expect("facts");
        assert!(f.rootless);
        assert_eq!(f.host_ids, Some((1001, 1002)));
        assert!(!f.enforces_limits());
        assert_eq!(
            f.describe(),
            "rootless (its containers' root is uid 1001), cgroup v1"
        );
    }

    #[test]
    fn a_rootful_engine_enforces_limits_with_its_controllers() {
        let f = info(
            r#"{"host": {"cgroupVersion": "v1",
                "cgroupControllers": ["cpu", "memory", "pids"],
                "security": {"rootless": false},
                "idMappings": {"uidmap": null, "gidmap": null}}}"#,
        )
        .expect("facts");
        assert!(!f.rootless);
        assert_eq!(f.host_ids, None);
        assert!(f.enforces_limits());
        // Memory alone is not enough.
        let f =
            info(r#"{"host": {"cgroupControllers": ["memory"], "security": {"rootless": false}}}"#)
                .expect("facts");
        assert!(!f.enforces_limits());
    }

    #[test]
    fn rlimits_stand_in_only_rootless_on_a_recent_kernel() {
        let facts = |rootless: bool, controllers: &[&str], kernel: &str| PodmanFacts {
            rootless,
            host_ids: rootless.then_some((1000, 1000)),
            controllers: controllers.iter().map(|c| c.to_string()).collect(),
            cgroup_version: "v1".into(),
            kernel: kernel.into(),
        };
        assert_eq!(facts(false, &["memory", "pids"], "4.18.0").refusal(), None);
        assert_eq!(facts(true, &["memory", "pids"], "4.18.0").refusal(), None);
        assert_eq!(facts(true, &[], "6.18.44-fc-v1252").refusal(), None);
        assert_eq!(facts(true, &[], "5.14.0-284.el9").refusal(), None);
        for kernel in ["5.13.19", "4.18.0-513.el8", "", "garbage"] {
            let why = facts(true, &[], kernel).refusal().expect("refused");
            assert!(why.contains("5.14"), "{kernel}: {why}");
        }
        let why = facts(false, &["memory"], "6.1.0")
            .refusal()
            .expect("refused");
        assert!(why.contains("rootful"), "{why}");
    }

    #[test]
    fn a_rootless_engine_without_a_mapping_is_an_error() {
        let e = info(r#"{"host": {"security": {"rootless": true}}}"#).expect_err("refused");
        assert!(e.contains("mapping"), "{e}");
        let e = info(r#"{"version": {}}"#).expect_err("refused");
        assert!(e.contains("host"), "{e}");
    }

    #[test]
    fn only_a_200_response_has_a_body() {
        assert!(matches!(
            body_of(b"HTTP/1.0 200 OK\r\nA: b\r\n\r\n{}").as_deref(),
            Ok(b"{}")
        ));
        assert!(matches!(
            body_of(b"HTTP/1.0 404 Not Found\r\n\r\nNot Found"),
            Err(Fetch::NotFound)
        ));
        assert!(matches!(
            body_of(b"HTTP/1.0 500 Internal Server Error\r\n\r\n{}"),
            Err(Fetch::Failed(e)) if e.contains("500")
        ));
        assert!(matches!(
            body_of(b"HTTP/1.0 200 OK\r\n"),
            Err(Fetch::Failed(_))
        ));
    }

    #[test]
    fn only_an_exited_or_stopped_container_has_ended() {
        let state = |json: &str| state_end("c1", &serde_json::from_str(json).expect("json"));
        assert_eq!(
            state(r#"{"Status": "exited", "Running": false, "ExitCode": 3, "OOMKilled": true}"#),
            Ok(Some((3, true)))
        );
        assert_eq!(
            state(r#"{"Status": "stopped", "Running": false, "ExitCode": 0}"#),
            Ok(Some((0, false)))
        );
        for status in [
            "created",
            "configured",
            "initialized",
            "running",
            "paused",
            "stopping",
        ] {
            let json = format!(r#"{{"Status": "{status}", "Running": false, "ExitCode": 0}}"#);
            assert_eq!(state(&json), Ok(None), "{status}");
        }
        for json in [
            r#"{"Status": "removing", "Running": false, "ExitCode": 0}"#,
            r#"{"Status": "unknown", "Running": false, "ExitCode": 0}"#,
            r#"{"Running": false, "ExitCode": 0}"#,
            r#"{"Status": "exited", "Running": false}"#,
        ] {
            assert!(state(json).is_err(), "{json}");
        }
    }

    #[test]
    fn the_nproc_ceiling_is_positive() {
        assert!(nproc_ceiling() > 0);
    }
}
