//! The OCI runtime a container runs under (`[docker] runtime` and
//! `network_runtime`, for gVisor's `runsc` say): checked against the
//! runtimes the engine has registered before the call, and against the
//! container the engine made after its creation, so that a call never runs
//! under a weaker runtime than the one configured.

use std::collections::BTreeMap;

use bollard::Docker;
use bollard::models::SystemInfo;

use super::engine::{engine_error, unavailable};
use crate::config::DockerConfig;
use crate::outcome::{Outcome, OutcomeKind};

/// The runtimes an engine has registered, as its `info` tells them.
#[derive(Debug, Clone, Default)]
pub(super) struct Runtimes {
    /// Name to the runtime's path and arguments; `None` when the engine
    /// does not say.
    pub registered: Option<BTreeMap<String, (String, Vec<String>)>>,
    /// The engine's default runtime, when it says.
    pub default: Option<String>,
}

impl Runtimes {
    pub(super) fn from_info(info: &SystemInfo) -> Self {
        Runtimes {
            registered: info.runtimes.as_ref().map(|r| {
                r.iter()
                    .map(|(name, rt)| {
                        (
                            name.clone(),
                            (
                                rt.path.clone().unwrap_or_default(),
                                rt.runtime_args.clone().unwrap_or_default(),
                            ),
                        )
                    })
                    .collect()
            }),
            default: info.default_runtime.clone().filter(|d| !d.is_empty()),
        }
    }
}

/// Whether a runtime's arguments give its sandbox no network (runsc's
/// `--network=none`, in any spelling its flag parser takes).
pub(super) fn without_network(args: &[String]) -> bool {
    let flag = |a: &str| a == "-network" || a == "--network";
    args.iter()
        .enumerate()
        .any(|(i, a)| match a.split_once('=') {
            Some((f, v)) => flag(f) && v == "none",
            None => flag(a) && args.get(i + 1).is_some_and(|v| v == "none"),
        })
}

/// The runtime a call that does (or does not) allow the network runs
/// under, checked against the engine's: `Ok(None)` is the engine's default.
pub(super) fn for_call(
    config: &DockerConfig,
    allow_network: bool,
    engine: &Runtimes,
    address: &str,
) -> Result<Option<String>, Outcome> {
    let Some(name) = config.runtime_for(allow_network) else {
        return Ok(None);
    };
    let key = if allow_network && config.network_runtime.is_some() {
        "network_runtime"
    } else {
        "runtime"
    };
    let Some(registered) = &engine.registered else {
        // The engine does not list its runtimes: the name goes to the
        // engine, and `verify` checks what it made.
        return Ok(Some(name.to_string()));
    };
    let Some((_, args)) = registered.get(name) else {
        let known: Vec<&str> = registered.keys().map(String::as_str).collect();
        return Err(unavailable(format!(
            "[docker] {key} = {name:?}, and the engine at {address} has no runtime of that name (it has: {}); register it with the engine (Docker: \"runtimes\": {{\"{name}\": {{\"path\": \"/usr/bin/runsc\"}}}} in its daemon.json, then SIGHUP dockerd; Podman: [engine.runtimes] in containers.conf), or change [docker] {key}",
            known.join(", ")
        )));
    };
    if allow_network && without_network(args) {
        return Err(Outcome::new(
            OutcomeKind::InvalidRequest,
            format!(
                "the sandbox allows the network, and the engine registered runtime {name:?} with --network=none, so the call would have none; set [docker] network_runtime to a runtime registered without it (docs/src/docker.md#runtimes-gvisor)"
            ),
        ));
    }
    Ok(Some(name.to_string()))
}

/// Whether the runtime a call runs under (`name`, or the engine's default)
/// is gVisor's `runsc`, known by its program's name (or the runtime's, when
/// the engine does not list its runtimes). Two things differ there: its
/// files show the sandbox's own inode numbers, not the host's (so the
/// helper cannot check the mounts: `gate.rs`), and each of the tool's
/// tasks is several host threads of the sandbox (so the container's pids
/// limit cannot count the tool's processes: `spec.rs`). Another runtime
/// that hides host inodes fails the helper's mount check: refused, not run
/// unchecked.
pub(super) fn is_gvisor(engine: &Runtimes, name: Option<&str>) -> bool {
    let Some(name) = name.or(engine.default.as_deref()) else {
        return false;
    };
    let program = engine
        .registered
        .as_ref()
        .and_then(|r| r.get(name))
        .map(|(path, _)| path.as_str())
        .filter(|p| !p.is_empty())
        .unwrap_or(name);
    runs_gvisor(program)
}

/// Whether a runtime's program (a path or a name) is gVisor's `runsc`.
fn runs_gvisor(program: &str) -> bool {
    std::path::Path::new(program)
        .file_name()
        .and_then(|f| f.to_str())
        .is_some_and(|f| f.starts_with("runsc"))
}

/// The `toolhost check` row of the runtimes: the configured ones and the
/// engine's; not `Ok` when a configured one is missing.
pub(super) fn describe(
    config: &DockerConfig,
    engine: &super::EngineProbe,
) -> (crate::probe::Status, String) {
    use crate::probe::Status;
    let find = |name: &str| engine.runtimes.iter().flatten().find(|(n, _, _)| n == name);
    let show = |name: &str| match find(name) {
        Some((_, path, args)) if args.is_empty() => format!("{name} ({path})"),
        Some((_, path, args)) => format!("{name} ({path} {})", args.join(" ")),
        None => name.to_string(),
    };
    let has = |name: &str| match &engine.runtimes {
        Some(r) => r.iter().any(|(n, _, _)| n == name),
        None => true,
    };
    let listed = match &engine.runtimes {
        Some(r) => {
            let names: Vec<String> = r
                .iter()
                .map(|(n, _, _)| {
                    if engine.default_runtime.as_deref() == Some(n) {
                        format!("{n} (default)")
                    } else {
                        n.clone()
                    }
                })
                .collect();
            format!("the engine has {}", names.join(", "))
        }
        None => "the engine does not list its runtimes".to_string(),
    };
    let Some(rt) = &config.runtime else {
        let default = engine.default_runtime.as_deref().unwrap_or("unnamed");
        return (
            Status::Ok,
            format!("the engine's default, {}; {listed}", show(default)),
        );
    };
    let missing: Vec<&str> = [Some(rt), config.network_runtime.as_ref()]
        .into_iter()
        .flatten()
        .map(String::as_str)
        .filter(|n| !has(n))
        .collect();
    if !missing.is_empty() {
        return (
            Status::Missing,
            format!(
                "runtime {} not registered with the engine ({listed}): see docs/src/docker.md#runtimes-gvisor",
                missing.join(" and ")
            ),
        );
    }
    let network = match &config.network_runtime {
        Some(n) => format!("; calls with the network: {}", show(n)),
        None if find(rt).is_some_and(|(_, _, args)| without_network(args)) => {
            "; calls that allow the network are refused (it has none: set network_runtime)".into()
        }
        None => String::new(),
    };
    let program = find(rt)
        .map(|(_, p, _)| p.as_str())
        .filter(|p| !p.is_empty())
        .unwrap_or(rt);
    let notes = if runs_gvisor(program) {
        "; gVisor: max_cpu_seconds is held by the helper's RLIMIT_CPU (gVisor ignores the container's ulimit), warm mode is refused, calls whose mounts a tool could redirect run one at a time"
    } else {
        ""
    };
    (
        Status::Ok,
        format!("{}{network}; {listed}{notes}", show(rt)),
    )
}

/// Checks that the engine created container `id` under runtime `wanted`:
/// an engine that ignored the name would run the call under its default.
/// `podman`: the engine's address when it is Podman, asked through its own
/// API (its compatible inspect names every runtime `oci`).
/// The container is the caller's to remove on an error.
pub(super) async fn verify(
    docker: &Docker,
    id: &str,
    wanted: &str,
    podman: Option<&str>,
) -> Result<(), Outcome> {
    let got = if let Some(address) = podman {
        super::podman::container_runtime(
            address,
            id,
            std::time::Duration::from_secs(super::REQUEST_TIMEOUT_SECS),
        )
        .await
        .map_err(|e| unavailable(format!("cannot check the new container's runtime: {e}")))?
    } else {
        docker
            .inspect_container(id, None)
            .await
            .map_err(|e| {
                unavailable(format!(
                    "cannot inspect the new container to check its runtime: {}",
                    engine_error(&e)
                ))
            })?
            .host_config
            .and_then(|h| h.runtime)
            .unwrap_or_default()
    };
    if got != wanted {
        return Err(Outcome::new(
            OutcomeKind::BackendUnavailable,
            format!(
                "the engine created the container under runtime {got:?}, not the configured {wanted:?}; refused"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_runtime_without_network_is_seen_in_every_spelling() {
        for v in [
            &["--network=none"][..],
            &["-network=none"],
            &["--network", "none"],
            &["--debug", "-network", "none"],
        ] {
            assert!(without_network(&args(v)), "{v:?}");
        }
        for v in [
            &[][..],
            &["--network=host"],
            &["--network=sandbox"],
            &["--network"],
            &["--networks=none"],
            &["none"],
        ] {
            assert!(!without_network(&args(v)), "{v:?}");
        }
    }

    fn engine(v: &[(&str, &[&str])]) -> Runtimes {
        Runtimes {
            registered: Some(
                v.iter()
                    .map(|(n, a)| (n.to_string(), ("/usr/bin/x".to_string(), args(a))))
                    .collect(),
            ),
            default: Some("runc".into()),
        }
    }

    #[test]
    fn a_call_gets_the_runtime_for_its_network_or_a_clear_refusal() {
        let mut c = DockerConfig::default();
        let e = engine(&[
            ("runc", &[]),
            ("runsc", &["--network=none"]),
            ("runsc-net", &["--network=host"]),
        ]);
        assert_eq!(
            for_call(&c, false, &e, "x").map_err(|o| o.message),
            Ok(None)
        );
        c.runtime = Some("runsc".into());
        assert_eq!(
            for_call(&c, false, &e, "x").ok(),
            Some(Some("runsc".into()))
        );
        // With the network on, a runtime without one is refused...
        let o = for_call(&c, true, &e, "x").unwrap_err();
        assert_eq!(o.kind, OutcomeKind::InvalidRequest);
        assert!(o.message.contains("network_runtime"), "{}", o.message);
        // ... and network_runtime serves those calls.
        c.network_runtime = Some("runsc-net".into());
        assert_eq!(
            for_call(&c, true, &e, "x").ok(),
            Some(Some("runsc-net".into()))
        );
        assert_eq!(
            for_call(&c, false, &e, "x").ok(),
            Some(Some("runsc".into()))
        );
        // A name the engine lacks names what it has and how to register.
        c.runtime = Some("kata".into());
        let o = for_call(&c, false, &e, "unix:///s").unwrap_err();
        assert_eq!(o.kind, OutcomeKind::BackendUnavailable);
        for part in [
            "\"kata\"",
            "runc, runsc, runsc-net",
            "daemon.json",
            "SIGHUP",
        ] {
            assert!(o.message.contains(part), "{part}: {}", o.message);
        }
        // An engine that lists none: the name is passed on (and verified).
        let quiet = Runtimes::default();
        assert_eq!(
            for_call(&c, false, &quiet, "x").ok(),
            Some(Some("kata".into()))
        );
    }
}
