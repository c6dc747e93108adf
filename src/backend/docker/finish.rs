//! How a container call ended: its output drained into the capped
//! buffers, its exit read, and the engine's refusals as outcomes.

use std::time::{Duration, Instant};

use bollard::container::LogOutput;
use futures_util::{Stream, StreamExt};

use super::engine::{engine_error, status, unavailable};
use crate::outcome::{Outcome, OutcomeKind, RunOutput};
use crate::output::CappedBuffer;
use crate::plan::BackendKind;
use crate::plan::ExecPlan;

/// Drains a multiplexed output stream into the capped buffers.
pub(super) async fn drain(
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

pub(super) enum Ended {
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

pub(super) fn finish(
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
                    crate::backend::direct::fmt_secs(limits.timeout)
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

/// Whether exit code 126/127 came from docker's init (`[FATAL tini ...] exec
/// PROGRAM failed`) or the runtime (`OCI runtime exec failed`) rather than
/// from the tool: then the program never ran.
pub(super) fn launch_failure(
    code: i32,
    out: &CappedBuffer,
    err: &CappedBuffer,
) -> Option<OutcomeKind> {
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

pub(super) fn launch_failed(e: &bollard::errors::Error) -> Outcome {
    Outcome::new(
        OutcomeKind::LaunchFailed,
        format!("Docker engine: {}", engine_error(e)),
    )
}

/// Why the engine refused to create a container, in terms a user can act on.
pub(super) fn create_refusal(e: &bollard::errors::Error, image: &str, plan: &ExecPlan) -> Outcome {
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
pub(super) fn start_refusal(e: &bollard::errors::Error) -> Outcome {
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

/// How long a warm call whose helper went away (or a call's own container
/// whose tool was killed by SIGKILL) waits at most for the engine to say
/// whether an OOM kill ended its container. Past the call's
/// timeout if need be, as a timed-out call waits for its kill: the call has
/// already ended, and this only names how.
const STOP_SEEN_WITHIN: Duration = Duration::from_secs(2);

/// How long after the engine has seen the container stop an OOM kill may
/// still be marked: the engine handles the kernel's OOM event and the exit
/// apart, in either order (containerd#12260).
const OOM_AFTER_STOP: Duration = Duration::from_millis(300);

/// Whether the engine says an OOM kill ended container `id`. The engine
/// marks it when it handles the OOM event, which can come after the
/// helper's stream broke and after the container's exit (seen under gVisor
/// on a loaded machine: the call was reported as a broken container, not
/// the memory limit). So it is read again until it is set, until the
/// container has been stopped for [`OOM_AFTER_STOP`], or for at most
/// [`STOP_SEEN_WITHIN`]. An engine that does not answer counts as no OOM
/// kill.
pub(super) async fn oom_killed_once_stopped(docker: &bollard::Docker, id: &str) -> bool {
    let looked = tokio::time::timeout(STOP_SEEN_WITHIN, async {
        let mut stopped: Option<tokio::time::Instant> = None;
        loop {
            let Some(state) = docker
                .inspect_container(id, None)
                .await
                .ok()
                .and_then(|i| i.state)
            else {
                return false;
            };
            if state.oom_killed == Some(true) {
                return true;
            }
            if state.running != Some(true) {
                let since = *stopped.get_or_insert_with(tokio::time::Instant::now);
                if since.elapsed() >= OOM_AFTER_STOP {
                    return false;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    looked.unwrap_or(false)
}
