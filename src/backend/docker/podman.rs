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
}

impl PodmanFacts {
    /// Whether the engine holds containers to their memory and pids limits.
    pub(super) fn enforces_limits(&self) -> bool {
        ["memory", "pids"]
            .iter()
            .all(|c| self.controllers.iter().any(|have| have == c))
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
        Ok(PodmanFacts {
            rootless,
            host_ids,
            controllers,
            cgroup_version,
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

/// The largest response toolhost reads from Podman's own API (its info and
/// a container's inspect are a few KiB).
const MAX_INFO: u64 = 1 << 20;

/// Reads Podman's `/v4.0.0/libpod/info` at `address` (`unix://PATH`,
/// `tcp://HOST:PORT` or `http://HOST:PORT`), with HTTP/1.0 so that the
/// body comes whole, up to the connection's end (as every libpod request
/// here).
pub(super) async fn libpod_info(address: &str, timeout: Duration) -> Result<PodmanFacts, String> {
    PodmanFacts::from_info(&libpod_get(address, "info", timeout).await?)
}

/// The OCI runtime Podman created container `id` under (its own inspect's
/// `OCIRuntime`: the compatible one says `oci` whatever it was).
pub(super) async fn container_runtime(
    address: &str,
    id: &str,
    timeout: Duration,
) -> Result<String, String> {
    if !id.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(format!("container id {id:?} is not alphanumeric"));
    }
    let c = libpod_get(address, &format!("containers/{id}/json"), timeout).await?;
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
) -> Result<serde_json::Value, String> {
    let body = tokio::time::timeout(timeout, fetch(address, path))
        .await
        .map_err(|_| format!("no answer from {address} in {timeout:?}"))??;
    serde_json::from_slice(&body).map_err(|e| format!("libpod {path}: {e}"))
}

async fn fetch(address: &str, path: &str) -> Result<Vec<u8>, String> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let request = format!(
        "GET /v4.0.0/libpod/{path} HTTP/1.0\r\nHost: podman\r\nUser-Agent: toolhost\r\n\r\n"
    );
    let request = request.as_bytes();
    let mut raw = Vec::new();
    let io = |e: std::io::Error| format!("{address}: {e}");
    if let Some(path) = address.strip_prefix("unix://") {
        #[cfg(unix)]
        {
            let mut s = tokio::net::UnixStream::connect(path).await.map_err(io)?;
            s.write_all(request).await.map_err(io)?;
            (&mut s)
                .take(MAX_INFO)
                .read_to_end(&mut raw)
                .await
                .map_err(io)?;
        }
        #[cfg(not(unix))]
        {
            let _ = path;
            return Err(format!("{address}: no unix sockets on this platform"));
        }
    } else if let Some(hostport) = address
        .strip_prefix("tcp://")
        .or_else(|| address.strip_prefix("http://"))
    {
        let hostport = hostport.trim_end_matches('/');
        let mut s = tokio::net::TcpStream::connect(hostport).await.map_err(io)?;
        s.write_all(request).await.map_err(io)?;
        (&mut s)
            .take(MAX_INFO)
            .read_to_end(&mut raw)
            .await
            .map_err(io)?;
    } else {
        return Err(format!(
            "{address}: toolhost reads Podman's own API only over a unix socket or plain TCP"
        ));
    }
    body_of(&raw).map_err(|e| format!("{address}: {e}"))
}

/// The body of a whole HTTP/1.0 response, when its status is 200.
fn body_of(raw: &[u8]) -> Result<Vec<u8>, String> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no complete HTTP response")?;
    let head = String::from_utf8_lossy(&raw[..split]);
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(format!("libpod info: {status}"));
    }
    Ok(raw[split + 4..].to_vec())
}

/// The `nproc` ulimit toolhost asks Podman for when the engine holds the
/// processes by cgroup: the kernel's `pid_max`, which no uid's processes
/// can exceed, so the limit never binds and Podman does not try to raise it
/// to 1048576 (see the module's text). 32768, the kernel's default, when
/// it cannot be read.
pub(super) fn nproc_ceiling() -> i64 {
    std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(32768)
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
    fn a_rootless_engine_without_a_mapping_is_an_error() {
        let e = info(r#"{"host": {"security": {"rootless": true}}}"#).expect_err("refused");
        assert!(e.contains("mapping"), "{e}");
        let e = info(r#"{"version": {}}"#).expect_err("refused");
        assert!(e.contains("host"), "{e}");
    }

    #[test]
    fn only_a_200_response_has_a_body() {
        assert_eq!(
            body_of(b"HTTP/1.0 200 OK\r\nA: b\r\n\r\n{}").expect("body"),
            b"{}"
        );
        let e = body_of(b"HTTP/1.0 404 Not Found\r\n\r\nNot Found").expect_err("404");
        assert!(e.contains("404"), "{e}");
        assert!(body_of(b"HTTP/1.0 200 OK\r\n").is_err());
    }

    #[test]
    fn the_nproc_ceiling_is_positive() {
        assert!(nproc_ceiling() > 0);
    }
}
