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
//!
//! The parts: [`DockerBackend`] and a call's run here; `engine` (reaching the
//! engine, the image, owners); `spec` (the container's host config and
//! mounts); `finish` (how a call ended); `cleanup` (removal in every case);
//! `gate` (what stands in for the helper's mount check under gVisor);
//! `user` (who the tool runs as); `runtime` (the OCI runtime, checked
//! before and after the create); `podman` (what differs on Podman);
//! [`warm`] (warm mode).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use bollard::Docker;
use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{
    AttachContainerOptions, KillContainerOptions, WaitContainerOptions,
};
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;

use crate::config::DockerConfig;
use crate::outcome::{Outcome, OutcomeKind, RunOutput};
use crate::output::CappedBuffer;
use crate::plan::BackendKind;
use crate::plan::ExecPlan;
use cleanup::{create_guarded, spawn_removal};
use engine::owner;
use finish::{Ended, drain, finish, launch_failed, start_refusal};
use spec::{no_healthcheck, to_guest_paths};

mod cleanup;
mod engine;
mod finish;
mod gate;
mod podman;
mod probe;
mod runtime;
mod spec;
mod user;
pub mod warm;

pub use cleanup::flush_removals;
pub use engine::EngineProbe;

/// Label every toolhost container carries.
pub const LABEL: &str = "toolhost";
/// Label naming the backend instance (the session) a container belongs to.
pub const LABEL_SESSION: &str = "toolhost.session";
/// Label naming the process that owns a container: `HOST/PID/STARTTIME`.
pub const LABEL_OWNER: &str = "toolhost.owner";

/// Seconds bollard waits for an engine request.
const REQUEST_TIMEOUT_SECS: u64 = 120;

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
    /// Where the runtime shows no host inodes (`gate.rs`).
    gate: gate::Gate,
}

impl std::fmt::Debug for DockerBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerBackend")
            .field("session", &self.session)
            .field("image", &self.config.image)
            .finish()
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
            gate: std::sync::Arc::new(tokio::sync::RwLock::new(())),
        }
    }

    /// This backend's session id (the value of the `toolhost.session` label).
    pub fn session(&self) -> &str {
        &self.session
    }

    fn labels(&self) -> HashMap<String, String> {
        HashMap::from([
            (LABEL.to_string(), "1".to_string()),
            (LABEL_SESSION.to_string(), self.session.clone()),
            (LABEL_OWNER.to_string(), owner()),
        ])
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
    ///
    /// What the call made at a protected path that did not exist is moved
    /// aside once the container is gone (`backend::protect`).
    pub async fn run(&self, plan: &ExecPlan) -> RunOutput {
        let mut sweep = crate::backend::protect::Sweep::unarmed();
        let mut out = self.run_unscrubbed(plan, &mut sweep).await;
        sweep.finish(&mut out);
        out.outcome.message = to_guest_paths(plan, &out.outcome.message);
        out
    }

    async fn run_unscrubbed(
        &self,
        plan: &ExecPlan,
        sweep: &mut crate::backend::protect::Sweep,
    ) -> RunOutput {
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
        // the binds and the helper's mount check all see this one list, and
        // what it did not find is swept after the call (the gVisor gate
        // looks again, and its look replaces this one).
        let look = crate::backend::protect::look(plan);
        sweep.arm(look.after);
        let held = look.held;
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
        // `host_config` names the same runtime, and the create checks it.
        let runtime = match runtime::for_call(
            &self.config,
            plan.allow_network,
            &facts.runtimes,
            &self.engine_address(),
        ) {
            Ok(r) => r,
            Err(o) => return refuse(o),
        };
        let gvisor = runtime::is_gvisor(&facts.runtimes, runtime.as_deref());
        if let Some(why) = facts.podman.as_ref().and_then(podman::PodmanFacts::refusal) {
            return refuse(engine::unavailable(why));
        }
        if self.config.warm && !facts.enforces_limits() {
            return refuse(engine::unavailable(
                "warm mode is refused on this Podman engine: it applies no cgroup limits (rootless, without cgroup controllers), so toolhost holds each container by rlimits, and in warm mode one container serves every call; set [docker] warm = false (docs/src/docker.md#podman)",
            ));
        }
        if self.config.warm {
            return self
                .run_warm(
                    docker,
                    &image,
                    plan,
                    (argv, env),
                    (user, held, gvisor),
                    (start, sweep),
                )
                .await;
        }
        // Where the helper cannot check the mounts' inodes, the gate keeps
        // every other tool of this backend from redirecting them meanwhile.
        let waiting = Instant::now();
        let (pass, held, waited) = if !gvisor {
            (None, held, std::time::Duration::ZERO)
        } else {
            match self.enter_gate_in_time(plan, held, sweep).await {
                Ok((p, h)) => (Some(p), h, waiting.elapsed()),
                Err(o) => return refuse(o),
            }
        };
        let mut host_config = self.host_config(
            plan,
            &held,
            spec::Quirks {
                gvisor,
                podman: facts.podman.as_ref(),
            },
        );
        // The tool runs under toolhost's filter, exec'd by the helper, where
        // the helper runs (`user`).
        let (entrypoint, cmd) = match (&facts.helper, user::filter_hex()) {
            (Ok(()), Some(hex)) => {
                let (helper, expect) = match warm::helper_mount(plan)
                    .and_then(|h| Ok((h, warm::expected_mounts(plan, &held, !gvisor)?)))
                {
                    Ok(m) => m,
                    Err(o) => return refuse(o),
                };
                if let Some(m) = host_config.mounts.as_mut() {
                    m.push(helper);
                }
                let mut cmd = vec!["--seccomp".to_string(), hex.to_string()];
                cmd.extend(expect);
                // Under gVisor the pids limit counts host threads (and its
                // cgroupfs is its own): not checked there.
                if !gvisor {
                    cmd.extend(podman::cgroup_check(plan, facts.podman.as_ref()));
                }
                // The container's ulimits again, set by the helper: an
                // engine may drop them (rootless Podman's API does).
                for u in host_config.ulimits.iter().flatten() {
                    if let (Some(name), Some(soft), Some(hard)) = (&u.name, u.soft, u.hard) {
                        cmd.push("--rlimit".into());
                        cmd.push(format!("{name}={soft}:{hard}"));
                    }
                }
                cmd.push("--exec".into());
                cmd.extend(argv);
                (Some(vec![warm::HELPER_TARGET.to_string()]), cmd)
            }
            // A rootless Podman drops the container's ulimits, which only
            // the helper can set then.
            (helper, _) if facts.rootless_podman().is_some() => {
                let why = match helper {
                    Err(why) => why.clone(),
                    Ok(()) => "toolhost has no seccomp filter for this platform".to_string(),
                };
                return refuse(engine::unavailable(format!(
                    "the Podman engine is rootless, and its API drops a container's ulimits (CPU seconds, file size, processes, memory where it has no cgroup controllers), which toolhost's helper sets instead; the helper cannot run here ({why}) (docs/src/docker.md#podman)"
                )));
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
        let podman = facts.podman.as_ref().map(|_| self.engine_address());
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
        let (mut guard, created_id) =
            match create_guarded(docker, name, body, (&image, plan), pass, podman.as_deref()).await
            {
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
                // No key sequence in the tool's stdin ends the attach
                // (Podman applies ctrl-p,ctrl-q without a TTY too; an empty
                // value turns them off there).
                detach_keys: podman.as_ref().map(|_| String::new()),
            };
            let attached = docker
                .attach_container(id, Some(attach))
                .await
                .map_err(|e| launch_failed(&e))?;
            docker
                .start_container(id, None)
                .await
                .map_err(|e| start_refusal(&e))?;
            guard.started();
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
            if let Some(address) = &podman {
                return exit_by_inspect(address, id).await;
            }
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
        // The wait at the gate came out of the call's time.
        let ended = tokio::time::timeout(limits.timeout.saturating_sub(waited), call).await;
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
                // The engine marks an OOM kill when it handles the kernel's
                // OOM event, which can come after the exit that ended the
                // wait (containerd#12260). A main process killed by SIGKILL
                // (137, from the init) is what an OOM kill leaves, and 128
                // is what gVisor's own containerd shim reports for a sandbox
                // the host killed: with a memory limit, read again until the
                // engine says, or 0.3 s after the stop, at most 2 s, past the
                // timeout if need be (the call has ended; this only names
                // how). Podman reports no OOM kill at all.
                oom: oom
                    || (plan.limits.memory_bytes.is_some()
                        && (code == 128 + 9 || gvisor && code == 128)
                        && podman.is_none()
                        && finish::oom_killed_once_stopped(docker, id).await),
                by_init: true,
            },
        };
        guard.remove_now().await;
        finish(plan, start, result, out, err)
    }

    /// Drops the session's warm container.
    async fn discard_warm(&self, docker: &Docker) {
        if let Some(w) = self.warm.lock().await.take() {
            cleanup::remove_warm(docker, w).await;
        }
    }

    /// Removes this backend's warm container, if any, and waits for every
    /// container removal still running in the background. Call before
    /// dropping the backend for a prompt cleanup; dropping it also spawns the
    /// removal of the warm container.
    pub async fn shutdown(&self) {
        // A warm container exists only once the engine was reached.
        if let Some(Ok(docker)) = self.client.get() {
            self.discard_warm(docker).await;
        }
        flush_removals().await;
    }
}

impl crate::backend::Backend for DockerBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Docker
    }

    async fn run(&self, plan: &ExecPlan) -> RunOutput {
        DockerBackend::run(self, plan).await
    }

    async fn probe(&self, _limits: &crate::plan::Limits) -> crate::probe::Probe {
        self.probe_host().await
    }

    async fn shutdown(&self) {
        DockerBackend::shutdown(self).await
    }
}

impl Drop for DockerBackend {
    fn drop(&mut self) {
        let warm = self.warm.get_mut().take();
        if let (Some(w), Some(Ok(docker))) = (warm, self.client.get()) {
            spawn_removal(docker.clone(), w.id, w.pass);
        }
    }
}

/// How a Podman container that has closed its output ended: its exit code
/// and whether Podman saw an OOM kill, read from its own inspect until it
/// has stopped. Podman's compatible `wait` polls every 250 ms (a `true`
/// took 370-560 ms to be seen ending there), and its compatible inspect
/// reports states bollard cannot read (`stopped`); the inspects here start
/// 2 ms apart and back off to 20 ms. Bounded by the call's timeout.
async fn exit_by_inspect(address: &str, id: &str) -> Result<(i64, bool), Outcome> {
    let timeout = std::time::Duration::from_secs(REQUEST_TIMEOUT_SECS);
    let mut pause = std::time::Duration::from_millis(2);
    let mut waited = std::time::Duration::ZERO;
    loop {
        match podman::container_exit(address, id, timeout).await {
            Ok(Some(end)) => return Ok(end),
            Ok(None) => {}
            Err(e) => {
                return Err(Outcome::new(
                    OutcomeKind::LaunchFailed,
                    format!("Podman engine: the call's end could not be read: {e}"),
                ));
            }
        }
        tokio::time::sleep(pause).await;
        // 20 ms apart for the first second or so, then 250 ms (a tool that
        // closed its output and runs on).
        pause = if waited >= std::time::Duration::from_secs(1) {
            std::time::Duration::from_millis(250)
        } else {
            (pause * 2).min(std::time::Duration::from_millis(20))
        };
        waited += pause;
    }
}
