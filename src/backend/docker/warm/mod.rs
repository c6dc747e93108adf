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
//! has none of its own, so that no limit ends the helper); for a numeric user
//! the helper serves as another uid (`serving_id`) and each call takes the
//! user before its exec (`docker-helper/src/user.rs`), on every runtime; under
//! gVisor a container is made under the gate's pass (`gate.rs`), which it
//! holds until it is removed.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::models::{ContainerCreateBody, ResourcesUlimits};
use bollard::query_parameters::AttachContainerOptions;
use tokio::io::AsyncWrite;

use super::DockerBackend;
use super::cleanup::{WarmSlot, remove_warm};
use super::engine::{engine_error, unavailable};
use super::finish::{Ended, finish, start_refusal};
use super::gate::Pass;
use crate::outcome::{Outcome, OutcomeKind, RunOutput};
use crate::output::CappedBuffer;
use crate::plan::BackendKind;
use crate::plan::ExecPlan;
use helper::engine_arch;
pub(super) use helper::{engine_runs_helper, expected_mounts, helper_available, helper_mount};
use protocol::{Exit, HELLO, KILL_STDIN_MAX, Reader, STDIN_CHUNK, frame, run_request, send};

mod helper;
mod protocol;

/// Errno numbers the helper reports from inside the (Linux) container,
/// whatever the host is: no such file, and permission denied.
const LINUX_ENOENT: i32 = 2;
const LINUX_EACCES: i32 = 13;

/// Where the helper is mounted in the container.
pub const HELPER_TARGET: &str = "/.toolhost-helper";
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
    /// Its pass through the gate (`gate.rs`, under gVisor), let go only
    /// once it is removed.
    pub(super) pass: Option<super::gate::Pass>,
}

/// The uid (or gid) the helper serves as, given the call's: one no tool of
/// this container has (`docker-helper/src/user.rs`). Below 65536, so that an
/// engine that maps uids (userns-remap, rootless) has it mapped.
pub(super) fn serving_id(call: u32) -> u32 {
    if call == 65533 { 65532 } else { 65533 }
}

/// The container's capabilities when the helper serves as its own uid: to
/// take each call's user, and to kill what a call leaves. The helper drops
/// them all in each call's process (the bounding set too) before its exec.
const SERVE_CAPS: [&str; 4] = ["KILL", "SETUID", "SETGID", "SETPCAP"];

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
    /// helper's hello. `pass`: its pass through the gate, under gVisor.
    async fn start_warm(
        &self,
        docker: &Docker,
        image: &str,
        plan: &ExecPlan,
        user: &str,
        (held, gvisor, pass): (&[crate::backend::protect::Held], bool, Option<Pass>),
    ) -> Result<WarmContainer, Outcome> {
        self.check_warm_engine(docker).await?;
        let Some(filter) = super::user::filter_hex() else {
            return Err(unavailable(
                "toolhost has no seccomp filter for this platform, and warm mode needs it; set [docker] warm = false",
            ));
        };
        // A numeric user is taken by each call from a helper serving as
        // another uid; a name (which only the image can resolve) is the
        // container's user, helper included, which gVisor does not allow.
        let call_ids = super::user::numeric_ids(user);
        if call_ids.is_none() && gvisor {
            return Err(Outcome::new(
                OutcomeKind::InvalidRequest,
                format!(
                    "warm mode under gVisor runs each call as a numeric uid:gid, taken from a helper of another uid, and [docker] user is {user:?}: set it to UID:GID (docs/src/docker.md#runtimes-gvisor)"
                ),
            ));
        }
        let helper = helper_mount(plan)?;
        // Under gVisor the helper cannot see host inodes: the gate holds
        // the mounts instead (`gate.rs`).
        let expect = expected_mounts(plan, held, !gvisor)?;
        let facts = self.engine_facts(docker).await?;
        let quirks = super::spec::Quirks {
            gvisor,
            podman: facts.podman.as_ref(),
        };
        let mut host = self.host_config(plan, held, quirks);
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
        // The seccomp filter is on the helper, and so on every call it runs.
        let mut cmd = vec!["--seccomp".to_string(), filter.to_string()];
        cmd.extend(expect);
        if gvisor {
            // The tool's processes are held by RLIMIT_NPROC, which gVisor
            // counts per uid within its sandbox (`spec::nproc_ulimit`): set
            // on each call, since the helper's uid is another. Under runc
            // the pids limit counts the helper as one of `max_processes`;
            // here the helper is not of the call's uid, nor is the call's
            // first process, which gVisor charges to the helper's uid that
            // forked it: two less.
            if let Some(p) = plan.limits.processes {
                let n = p.saturating_sub(2);
                cmd.extend(["--rlimit".to_string(), format!("nproc={n}:{n}")]);
            }
        } else {
            cmd.extend(super::podman::cgroup_check(plan, facts.podman.as_ref()));
            // Podman's nproc, which the engine would otherwise raise
            // (`podman.rs`); none on Docker.
            if let (Some(u), Some(n)) = (
                host.ulimits.as_mut(),
                super::spec::nproc_ulimit(plan, quirks),
            ) {
                u.push(n);
            }
        }
        let container_user = match call_ids {
            Some((uid, gid)) => {
                cmd.extend([
                    "--call-user".to_string(),
                    format!("{uid}:{gid}"),
                    "--serve-as".to_string(),
                    format!("{}:{}", serving_id(uid), serving_id(gid)),
                ]);
                if gvisor {
                    // gVisor lets anyone whom the file's mode admits open
                    // `/proc/1/fd/N`, and the attach stream's fds are
                    // root's there (a root tool's, so it could chmod them):
                    // the helper leaves them no mode bit and gives them to
                    // the serving ids.
                    cmd.push("--hide-protocol".to_string());
                }
                let mut caps: Vec<String> = SERVE_CAPS.iter().map(|c| c.to_string()).collect();
                if gvisor {
                    // To give the attach stream's fds to the serving ids
                    // before it leaves uid 0 (`--hide-protocol`).
                    caps.push("CHOWN".to_string());
                }
                host.cap_add = Some(caps);
                "0:0".to_string()
            }
            None => user.to_string(),
        };
        if let Some(m) = host.mounts.as_mut() {
            m.push(helper);
        }
        let body = ContainerCreateBody {
            image: Some(image.to_string()),
            entrypoint: Some(vec![HELPER_TARGET.into()]),
            cmd: Some(cmd),
            working_dir: Some("/".into()),
            user: Some(container_user),
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
        let (mut guard, created_id) = super::cleanup::create_guarded(
            docker,
            self.next_name(),
            body,
            (image, plan),
            pass,
            facts
                .podman
                .as_ref()
                .map(|_| self.engine_address())
                .as_deref(),
        )
        .await?;
        let attach = AttachContainerOptions {
            stream: true,
            stdin: true,
            stdout: true,
            stderr: true,
            logs: false,
            // The frames are binary: no key sequence may end the attach
            // (Podman applies ctrl-p,ctrl-q without a TTY too; an empty
            // value turns them off there).
            detach_keys: facts.podman.as_ref().map(|_| String::new()),
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
        guard.started();
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
            pass: None,
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
        warm.pass = guard.disarm();
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
        (user, held, gvisor): (String, Vec<crate::backend::protect::Held>, bool),
        (start, sweep): (Instant, &mut crate::backend::protect::Sweep),
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
            remove_warm(docker, dead).await;
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
            remove_warm(docker, old).await;
        }
        if slot.slot.is_none() {
            // Under gVisor, as a container per call (`gate.rs`): once every
            // container of the backend is gone (a dropped call's may still
            // be going), with the protected paths found again.
            let (pass, held) = if gvisor {
                match self.enter_gate_in_time(plan, held, sweep).await {
                    Ok((p, h)) => (Some(p), h),
                    Err(o) => {
                        slot.keep = true;
                        return refused(o);
                    }
                }
            } else {
                (None, held)
            };
            match self
                .start_warm(docker, image, plan, &user, (&held, gvisor, pass))
                .await
            {
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
                let oom = super::finish::oom_killed_once_stopped(docker, &warm.id).await;
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
        const STAGE_USER: i32 = 4;
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
                let o = if exit.value == STAGE_USER {
                    Outcome::new(
                        OutcomeKind::LaunchFailed,
                        format!("cannot take the call's user in the container: {e}"),
                    )
                } else if exit.value == STAGE_RLIMIT {
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
                } else if exit.errno == LINUX_ENOENT {
                    Outcome::new(
                        OutcomeKind::NotFound,
                        format!("{program}: not found in the container"),
                    )
                } else if exit.errno == LINUX_EACCES {
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
