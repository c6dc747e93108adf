//! What `docker` can enforce here: the engine reached, the image, and the
//! container limits the engine applies (the rows of `toolhost check` for
//! `docker`).

use crate::probe::{Probe, Status};

use super::DockerBackend;

impl DockerBackend {
    /// The rows of `toolhost check` for this backend; `unusable` says why
    /// calls cannot run (no engine, no image).
    pub(super) async fn probe_host(&self) -> Probe {
        let mut out = Probe::default();
        match self.engine_probe().await {
            Ok(p) => {
                out.push(
                    "docker",
                    "engine",
                    Status::Ok,
                    format!(
                        "{} {} (API {}, {}{}) at {}",
                        p.product,
                        p.version,
                        p.api_version,
                        p.os,
                        match (&p.podman, p.remap) {
                            (Some(podman), _) => format!(", {podman}"),
                            (None, Some(r)) => format!(", {r}"),
                            (None, None) => String::new(),
                        },
                        p.address
                    ),
                );
                let (status, text) = super::runtime::describe(&self.config, &p);
                if status != Status::Ok {
                    out.unusable.push(format!("docker: {text}"));
                }
                out.push("docker", "runtime", status, text);
                match p.image {
                    None => {
                        out.unusable
                            .push("docker: no [docker] image configured".into());
                        out.push(
                            "docker",
                            "image",
                            Status::Missing,
                            "no [docker] image configured",
                        );
                    }
                    Some((name, Ok(()))) => out.push("docker", "image", Status::Ok, name),
                    Some((name, Err(e))) => {
                        out.unusable.push(format!("docker: image {name}: {e}"));
                        out.push("docker", "image", Status::Missing, format!("{name}: {e}"));
                    }
                }
                if let Some(why) = &p.refusal {
                    out.unusable.push(format!("docker: {why}"));
                    out.push("docker", "container limits", Status::Missing, why.clone());
                } else if p.cgroup_limits {
                    out.push(
                        "docker",
                        "container limits",
                        Status::Ok,
                        "no network, all capabilities dropped, read-only root, no_new_privs, memory/pids/CPU limits (enforced by the engine)",
                    );
                } else {
                    out.push(
                        "docker",
                        "container limits",
                        Status::Partial,
                        "no network, all capabilities dropped, read-only root, no_new_privs; the engine applies no cgroup limits (rootless, without cgroup controllers), so memory is held per process (RLIMIT_AS), processes per container (RLIMIT_NPROC in its user namespace), CPU per process (RLIMIT_CPU); warm mode is refused",
                    );
                }
            }
            Err(e) => {
                out.unusable.push(format!("docker: {e}"));
                out.push("docker", "engine", Status::Missing, e);
            }
        }
        out
    }
}
