//! Who a docker tool runs as, and the filter it runs under.
//!
//! - **The user.** `[docker] user` when set; else the owner (uid:gid) of the
//!   read-write allowed dirs, read from the sandbox's handles on them;
//!   `65534:65534` when none is writable (a read-only `/etc` must not be read
//!   as root) or one is shared (world-writable or sticky, like `/var/tmp`:
//!   its owner's rights there reach other users' files). So the tool can read and write its workspace whoever runs
//!   toolhost, even a 0700 one, and what it creates belongs on the host to the
//!   workspace's owner. It gets no more than that owner has over the mounted
//!   files, and less: every capability is dropped, with no-new-privileges.
//!   Nor more than toolhost: a toolhost that is not root runs its tools with
//!   its own gid, and those of a dir someone else owns as its own uid too.
//!   Refused before the call: writable dirs of different owners (one uid
//!   cannot be both), and an engine that maps container uids to others on the
//!   host (userns-remap, a rootless Docker), where the owner's uid would not
//!   be the owner on the host; both say to set `[docker] user`. A rootless
//!   Podman keeps its own user's uid as itself (`podman.rs`): the tool runs
//!   as that uid, and a workspace of another uid is refused.
//! - **The filter.** The helper (`docker-helper/`, mounted read-only) puts
//!   toolhost's seccomp filter on the tool before it execs it: no set-user-ID
//!   or set-group-ID file, whatever the uid (a tool running as the
//!   workspace's owner could otherwise leave a set-ID program of that owner,
//!   of root when root owns it, for the host to run). Where the helper cannot
//!   run (another OS or architecture, a build without it), calls of a uid
//!   other than 0 run without it, as the engine's profile allows; a call that
//!   would run as root is refused.

use bollard::Docker;

use super::DockerBackend;
use super::engine::{engine_error, unavailable};
use crate::outcome::{Outcome, OutcomeKind};
use crate::plan::ExecPlan;

/// What toolhost needs to know of the engine, asked once per backend.
#[derive(Debug, Clone)]
pub(super) struct EngineFacts {
    /// How the engine maps container uids to host uids, when not one to one.
    pub remap: Option<&'static str>,
    /// Whether the helper can run there, or why not.
    pub helper: Result<(), String>,
    /// The runtimes it has registered.
    pub runtimes: super::runtime::Runtimes,
    /// What Podman's own API says, when the engine is Podman.
    pub podman: Option<super::podman::PodmanFacts>,
}

impl EngineFacts {
    /// Whether the engine holds a container to its memory and pids limits
    /// (a rootless Podman without cgroup controllers does not).
    pub(super) fn enforces_limits(&self) -> bool {
        self.podman
            .as_ref()
            .is_none_or(super::podman::PodmanFacts::enforces_limits)
    }

    /// A rootless Podman's user: the host uid and gid its containers' root
    /// maps to, which keep-id maps to itself.
    pub(super) fn rootless_podman(&self) -> Option<(u32, u32)> {
        self.podman
            .as_ref()
            .filter(|p| p.rootless)
            .and_then(|p| p.host_ids)
    }
}

/// The uid mapping the engine's security options name: `userns` (the daemon's
/// `userns-remap`) or `rootless`; `None` when uids are the host's.
pub(super) fn uid_remap(security_options: &[String]) -> Option<&'static str> {
    let named = |n: &str| {
        security_options
            .iter()
            .any(|o| o.split(',').any(|kv| kv == format!("name={n}")))
    };
    if named("rootless") {
        Some("rootless")
    } else if named("userns") {
        Some("userns-remap")
    } else {
        None
    }
}

/// The owner the call runs as by default: of the writable allowed dirs;
/// `None` when there is none, or one is shared (world-writable or sticky).
#[cfg(unix)]
pub(super) fn owner(plan: &ExecPlan) -> Result<Option<(u32, u32)>, Outcome> {
    use cap_std::fs::MetadataExt as _;
    let mut found: Option<(u32, u32, &std::path::Path)> = None;
    for (m, (_, dir)) in plan.mounts.iter().zip(plan.mount_dirs.iter()) {
        if m.read_only {
            continue;
        }
        let meta = dir.dir_metadata().map_err(|e| {
            Outcome::new(
                OutcomeKind::PermissionDenied,
                format!("allowed dir {}: {e}", m.path.display()),
            )
        })?;
        if meta.mode() & 0o1002 != 0 {
            return Ok(None);
        }
        match found {
            None => found = Some((meta.uid(), meta.gid(), &m.path)),
            Some((uid, _, first)) if uid != meta.uid() => {
                return Err(Outcome::new(
                    OutcomeKind::PermissionDenied,
                    format!(
                        "the writable allowed dirs {} (uid {uid}) and {} (uid {}) belong to different users, and a docker tool runs as one: set [docker] user to the uid:gid it should run as",
                        first.display(),
                        m.path.display(),
                        meta.uid()
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    Ok(found.map(|(u, g, _)| (u, g)))
}

/// Host dirs carry no uid a container could take on this platform.
#[cfg(not(unix))]
pub(super) fn owner(_plan: &ExecPlan) -> Result<Option<(u32, u32)>, Outcome> {
    Ok(None)
}

/// A user given as numbers, `UID:GID`; `None` for a name or a uid alone
/// (which the image's files resolve).
pub(super) fn numeric_ids(user: &str) -> Option<(u32, u32)> {
    let (u, g) = user.split_once(':')?;
    Some((u.parse().ok()?, g.parse().ok()?))
}

/// The filter the helper installs, as the hex it takes; `None` where
/// toolhost has no filter for this platform.
pub(super) fn filter_hex() -> Option<&'static str> {
    #[cfg(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    ))]
    {
        static HEX: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
        HEX.get_or_init(|| match crate::backend::direct::container_filter() {
            Ok(bytes) => Some(bytes.iter().map(|b| format!("{b:02x}")).collect()),
            Err(e) => {
                tracing::error!("docker backend: no container filter: {e}");
                None
            }
        })
        .as_deref()
    }
    #[cfg(not(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    )))]
    None
}

impl DockerBackend {
    /// The engine's uid mapping and whether the helper runs there.
    pub(super) async fn engine_facts(&self, docker: &Docker) -> Result<EngineFacts, Outcome> {
        let r = self
            .facts
            .get_or_init(|| async {
                let info = docker
                    .info()
                    .await
                    .map_err(|e| format!("Docker engine info: {}", engine_error(&e)))?;
                let mut remap = uid_remap(info.security_options.as_deref().unwrap_or_default());
                let runtimes = super::runtime::Runtimes::from_info(&info);
                let v = docker
                    .version()
                    .await
                    .map_err(|e| format!("Docker engine version: {}", engine_error(&e)))?;
                // Podman's own API, asked of every engine toolhost can reach
                // it on: a Podman whose version does not say so is still
                // known by it (a 404 is Docker's answer).
                let named_podman = super::engine::product(&v) == "Podman";
                let address = self.engine_address();
                let timeout = std::time::Duration::from_secs(super::REQUEST_TIMEOUT_SECS);
                let libpod = if self.uses_tls() {
                    Err("toolhost reads Podman's own API only over a unix socket or plain TCP, and this engine is reached over TLS".to_string())
                } else {
                    super::podman::libpod_info(&address, timeout).await
                };
                let podman = match libpod {
                    Ok(Some(facts)) => Some(facts),
                    Ok(None) if !named_podman => None,
                    Err(e) if !named_podman => {
                        tracing::warn!(
                            "the engine at {address} did not answer Podman's API ({e}); taken for Docker, as its version says"
                        );
                        None
                    }
                    Ok(None) => {
                        return Err(format!(
                            "the engine at {address} is Podman, and its own API (/libpod/info) is not there"
                        ));
                    }
                    Err(e) => {
                        return Err(format!(
                            "the engine at {address} is Podman, and toolhost cannot read its own API's info (whether it is rootless, its uid mapping, its cgroup controllers): {e}"
                        ));
                    }
                };
                if podman.as_ref().is_some_and(|p| p.rootless) {
                    remap = Some("rootless");
                }
                let os = v.os.unwrap_or_default();
                let arch = v.arch.unwrap_or_default();
                let helper = if filter_hex().is_none() {
                    Err("toolhost has no seccomp filter for this platform".to_string())
                } else if os != "linux" || !super::warm::engine_runs_helper(&arch) {
                    Err(format!(
                        "the engine is {os}/{arch}, and the helper is built for linux/{}",
                        std::env::consts::ARCH
                    ))
                } else {
                    super::warm::helper_available()
                };
                Ok(EngineFacts {
                    remap,
                    helper,
                    runtimes,
                    podman,
                })
            })
            .await;
        r.clone().map_err(unavailable)
    }

    /// The user the call runs as (see the module's text), or why the call is
    /// refused.
    pub(super) fn call_user(
        &self,
        plan: &ExecPlan,
        facts: &EngineFacts,
    ) -> Result<String, Outcome> {
        let refuse = |m: String| Outcome::new(OutcomeKind::PermissionDenied, m);
        if let Some(u) = &self.config.user {
            return Ok(u.clone());
        }
        let Some((uid, gid)) = owner(plan)? else {
            return Ok("65534:65534".to_string());
        };
        // A rootless Podman runs each container with keep-id: its user is
        // itself there, every other uid one of its subordinate uids.
        if let Some((engine_uid, engine_gid)) = facts.rootless_podman() {
            if uid != engine_uid {
                return Err(refuse(format!(
                    "the Podman engine is rootless: a container's uids are its user's (uid {engine_uid}, kept as itself) or that user's subordinate uids, and the writable allowed dirs belong to uid {uid}, so a tool would not own its files as uid {uid} on the host: give the workspace to uid {engine_uid}, or set [docker] user (docs/src/docker.md#podman)"
                )));
            }
            return Ok(format!("{engine_uid}:{engine_gid}"));
        }
        if let Some(kind) = facts.remap {
            return Err(refuse(format!(
                "the Docker engine maps container uids to other host uids ({kind}), so a tool running as uid {uid} would not own its files as uid {uid} on the host: set [docker] user to the container uid:gid that the engine maps to the owner {uid}:{gid}"
            )));
        }
        // Never more than toolhost itself could do: a toolhost that is not
        // root cannot act as another owner, nor take a group it is not in,
        // so its tools run with its own gid, and as its own uid for a dir
        // someone else owns.
        #[cfg(unix)]
        {
            let me = rustix::process::geteuid().as_raw();
            let my_gid = rustix::process::getegid().as_raw();
            if me != 0 {
                return Ok(format!("{me}:{my_gid}"));
            }
        }
        if uid == 0
            && let Err(why) = &facts.helper
        {
            return Err(refuse(format!(
                "the allowed dirs belong to root, so the tool would run as root, and toolhost cannot put its set-ID filter in this container ({why}): set [docker] user to a non-root uid:gid that may write them"
            )));
        }
        Ok(format!("{uid}:{gid}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_uid_mapping_is_read_from_the_security_options() {
        let opts = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(uid_remap(&opts(&["name=seccomp,profile=default"])), None);
        assert_eq!(uid_remap(&opts(&[])), None);
        assert_eq!(
            uid_remap(&opts(&["name=seccomp,profile=default", "name=userns"])),
            Some("userns-remap")
        );
        assert_eq!(
            uid_remap(&opts(&[
                "name=seccomp,profile=default",
                "name=rootless",
                "name=cgroupns"
            ])),
            Some("rootless")
        );
        // A profile merely named so is not the option.
        assert_eq!(uid_remap(&opts(&["name=seccomp,profile=userns"])), None);
    }
}
