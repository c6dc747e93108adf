//! The container's spec: its host config (isolation and limits from the
//! plan), the mounts and what may not be mounted, the ulimits.

use std::collections::HashMap;

use bollard::models::{HostConfig, Mount, MountType, ResourcesUlimits};

use super::podman::PodmanFacts;
use super::{DockerBackend, warm};
use crate::outcome::{Outcome, OutcomeKind};
use crate::plan::ExecPlan;

impl DockerBackend {
    /// The container's host config: isolation and limits from the plan, on
    /// the engine `engine` describes.
    pub(super) fn host_config(
        &self,
        plan: &ExecPlan,
        held: &[crate::backend::protect::Held],
        engine: Quirks<'_>,
    ) -> HostConfig {
        let Quirks { gvisor, podman } = engine;
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
        ulimits.extend(nproc_ulimit(plan, engine));
        if let (Some(b), Some(p)) = (limits.memory_bytes, podman)
            && !p.enforces_limits()
        {
            // No cgroup holds the container: each process is held instead.
            let b = i64::try_from(b).unwrap_or(i64::MAX);
            ulimits.push(ResourcesUlimits {
                name: Some("as".into()),
                soft: Some(b),
                hard: Some(b),
            });
        }
        let memory = limits
            .memory_bytes
            .map(|b| i64::try_from(b).unwrap_or(i64::MAX));
        HostConfig {
            mounts: Some(mounts),
            network_mode: Some(
                match (plan.allow_network, podman.is_some_and(|p| p.rootless)) {
                    (false, _) => "none",
                    // A rootless Podman's own network (its default in 4.x):
                    // its bridge needs a rootless netns set-up that fails on
                    // hosts without a systemd user session. The host's
                    // loopback stays out whatever containers.conf says.
                    (true, true) => "slirp4netns:allow_host_loopback=false",
                    (true, false) => "bridge",
                }
                .into(),
            ),
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
            pids_limit: limits.processes.map(|p| {
                let p = i64::try_from(p).unwrap_or(i64::MAX);
                if gvisor { gvisor_host_threads(p) } else { p }
            }),
            ulimits: Some(ulimits),
            init: Some(true),
            ipc_mode: Some("private".into()),
            // A rootless Podman's user as itself (`podman.rs`).
            userns_mode: podman
                .is_some_and(|p| p.rootless)
                .then(|| "keep-id".to_string()),
            // Checked against the engine's before the call
            // (`runtime::for_call`), and after the create.
            runtime: self
                .config
                .runtime_for(plan.allow_network)
                .map(str::to_string),
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
    pub(super) fn check_mounts(
        &self,
        plan: &ExecPlan,
        held: &[crate::backend::protect::Held],
    ) -> Result<(), Outcome> {
        let refuse = |m: String| Outcome::new(OutcomeKind::PermissionDenied, m);
        for m in plan.mounts.iter() {
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
        for (m, (path, dir)) in plan.mounts.iter().zip(plan.mount_dirs.iter()) {
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
}

/// The health check that turns off the image's own.
pub(super) fn no_healthcheck() -> bollard::models::HealthConfig {
    bollard::models::HealthConfig {
        test: Some(vec!["NONE".to_string()]),
        ..Default::default()
    }
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
pub(super) fn unmountable_guest_path(guest: &std::path::Path) -> Option<&'static str> {
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
pub(super) fn to_guest_paths(plan: &ExecPlan, msg: &str) -> String {
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

/// Under gVisor the tool's processes are tasks of gVisor's own kernel, and
/// each is several host threads of the sandbox (about 9 per process with
/// the ptrace platform, measured here, besides some 44 of the sandbox
/// itself): the container's pids limit counts those, and would end the
/// sandbox (a Go panic, exit 2) long before the tool reached `max_processes`.
/// There it is only the host's backstop, 64 plus 16 per process, and the
/// tool's processes are held to the limit by `RLIMIT_NPROC`
/// ([`nproc_ulimit`]), which gVisor counts within its sandbox.
pub(super) fn gvisor_host_threads(processes: i64) -> i64 {
    processes.saturating_mul(16).saturating_add(64)
}

/// The `nproc` ulimit, when there is one:
/// - under gVisor, `max_processes` tasks of the tool's uid in the sandbox
///   (its init, docker's or the helper, among them, as the pids limit counts
///   it under runc);
/// - on a Podman that applies no cgroup limits (rootless on cgroup v1),
///   `max_processes` too, which the kernel counts in the container's own
///   user namespace (keep-id makes one per container);
/// - on any other Podman, [`super::podman::nproc_ceiling`], a limit that
///   never binds, since Podman would otherwise ask for more than an engine
///   without `CAP_SYS_RESOURCE` may set;
/// - on Docker with runc none: on the host's kernel `RLIMIT_NPROC` counts
///   every process of the uid on the host, and the pids limit holds the
///   container.
pub(super) fn nproc_ulimit(plan: &ExecPlan, engine: Quirks<'_>) -> Option<ResourcesUlimits> {
    let processes = plan
        .limits
        .processes
        .map(|p| i64::try_from(p).unwrap_or(i64::MAX));
    let held_here = engine.gvisor || engine.podman.is_some_and(|p| !p.enforces_limits());
    let n = match processes {
        Some(n) if held_here => n,
        _ if engine.podman.is_some() => super::podman::nproc_ceiling(),
        _ => return None,
    };
    Some(ResourcesUlimits {
        name: Some("nproc".into()),
        soft: Some(n),
        hard: Some(n),
    })
}

/// What a container's spec must allow for on its engine.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Quirks<'a> {
    /// The runtime is gVisor's `runsc` (`runtime.rs`).
    pub gvisor: bool,
    /// The engine is Podman, and what its own API says (`podman.rs`).
    pub podman: Option<&'a PodmanFacts>,
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
