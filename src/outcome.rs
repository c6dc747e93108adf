//! `RunOutput` and the typed `Outcome` of a call.
//!
//! Invariant: every way a call can end is data here, with a one-line message an
//! agent can act on; nothing in it carries host secrets or host paths outside the
//! sandbox.

use std::time::Duration;

use serde::Serialize;

use crate::plan::BackendKind;

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum OutcomeKind {
    /// The program ran and exited with a code (see `RunOutput::returncode`).
    Exited,
    /// The program was killed by a signal it did not ask for from us.
    Signalled,
    /// The wall-clock timeout fired; the whole process tree was killed.
    TimedOut,
    /// The program failed for lack of memory under the memory limit.
    MemoryLimit,
    /// The program used up its CPU-time limit.
    CpuLimit,
    /// The program tried to write a file larger than the file-size limit.
    FileSizeLimit,
    /// A WebAssembly guest trapped (unreachable, stack overflow, bad memory access...).
    Trapped,
    /// The request had no program to run.
    EmptyArgv,
    /// The request was malformed (e.g. a NUL byte in an argument).
    InvalidRequest,
    /// The working directory is outside the sandbox, missing, or not a directory.
    CwdOutside,
    /// The program was not found.
    NotFound,
    /// The program exists but may not be executed.
    PermissionDenied,
    /// Starting the program failed for another reason.
    LaunchFailed,
    /// The backend cannot run calls on this host or with this configuration.
    BackendUnavailable,
    /// `isolation = "strict"` and a required isolation layer cannot be applied.
    IsolationUnavailable,
}

impl OutcomeKind {
    /// The stable snake_case name used in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            OutcomeKind::Exited => "exited",
            OutcomeKind::Signalled => "signalled",
            OutcomeKind::TimedOut => "timed_out",
            OutcomeKind::MemoryLimit => "memory_limit",
            OutcomeKind::CpuLimit => "cpu_limit",
            OutcomeKind::FileSizeLimit => "file_size_limit",
            OutcomeKind::Trapped => "trapped",
            OutcomeKind::EmptyArgv => "empty_argv",
            OutcomeKind::InvalidRequest => "invalid_request",
            OutcomeKind::CwdOutside => "cwd_outside",
            OutcomeKind::NotFound => "not_found",
            OutcomeKind::PermissionDenied => "permission_denied",
            OutcomeKind::LaunchFailed => "launch_failed",
            OutcomeKind::BackendUnavailable => "backend_unavailable",
            OutcomeKind::IsolationUnavailable => "isolation_unavailable",
        }
    }

    /// Whether the program never started.
    pub fn never_ran(self) -> bool {
        matches!(
            self,
            OutcomeKind::EmptyArgv
                | OutcomeKind::InvalidRequest
                | OutcomeKind::CwdOutside
                | OutcomeKind::NotFound
                | OutcomeKind::PermissionDenied
                | OutcomeKind::LaunchFailed
                | OutcomeKind::BackendUnavailable
                | OutcomeKind::IsolationUnavailable
        )
    }
}

/// A typed outcome with its one-line message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Outcome {
    /// What happened.
    pub kind: OutcomeKind,
    /// One line for the agent.
    pub message: String,
    /// The signal that ended the program, when one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
}

impl Outcome {
    /// An outcome without a signal.
    pub fn new(kind: OutcomeKind, message: impl Into<String>) -> Self {
        Outcome {
            kind,
            message: message.into(),
            signal: None,
        }
    }
}

/// The result of one call, whatever happened.
#[derive(Debug, Clone, Serialize)]
pub struct RunOutput {
    /// Standard output, decoded as UTF-8 with replacement, capped.
    pub stdout: String,
    /// Standard error, decoded as UTF-8 with replacement, capped.
    pub stderr: String,
    /// Exit code; `None` when the program never ran or was killed.
    pub returncode: Option<i32>,
    /// Whether the timeout fired.
    pub timed_out: bool,
    /// Whether output was cut at the cap.
    pub truncated: bool,
    /// How the call ended.
    pub outcome: Outcome,
    /// The backend that ran (or refused) the call.
    pub backend: BackendKind,
    /// Wall-clock duration of the call.
    #[serde(rename = "duration_ms", serialize_with = "millis")]
    pub duration: Duration,
    /// The kernel isolation the call got (`direct` backend only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub isolation: Option<crate::isolation::IsolationReport>,
}

fn millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64((d.as_secs_f64() * 1e6).round() / 1e3)
}

impl RunOutput {
    /// A call that never ran.
    pub fn refused(backend: BackendKind, outcome: Outcome, duration: Duration) -> Self {
        RunOutput {
            stdout: String::new(),
            stderr: String::new(),
            returncode: None,
            timed_out: false,
            truncated: false,
            outcome,
            backend,
            duration,
            isolation: None,
        }
    }

    /// Marks a refusal whose outcome is `timed_out` (the call ran out of
    /// time before its tool started, e.g. while compiling) as timed out.
    pub fn timed_out_if_so(mut self) -> Self {
        if self.outcome.kind == OutcomeKind::TimedOut {
            self.timed_out = true;
        }
        self
    }

    /// Whether the program ran and exited with code 0.
    pub fn success(&self) -> bool {
        self.outcome.kind == OutcomeKind::Exited && self.returncode == Some(0)
    }

    /// The exit code `toolhost run` uses for this result: the tool's own code;
    /// 124 on timeout; 125 when toolhost refused or failed; 126 not executable;
    /// 127 not found; 128+N killed by signal N. A wasm guest stopped by a limit or
    /// a trap gets the code of the matching signal: CPU 152, file size 153,
    /// memory 137, trap 134.
    pub fn cli_exit_code(&self) -> i32 {
        match self.outcome.kind {
            OutcomeKind::TimedOut => 124,
            OutcomeKind::NotFound => 127,
            OutcomeKind::PermissionDenied => 126,
            k if k.never_ran() => 125,
            _ => match (self.returncode, self.outcome.signal) {
                (Some(code), _) => code,
                (None, Some(sig)) => 128 + sig,
                // Limits and traps without a signal (the wasm backend): the
                // codes a native program would get for the same event.
                (None, None) => match self.outcome.kind {
                    OutcomeKind::CpuLimit => 128 + 24,
                    OutcomeKind::FileSizeLimit => 128 + 25,
                    OutcomeKind::MemoryLimit => 128 + 9,
                    OutcomeKind::Trapped => 128 + 6,
                    _ => 125,
                },
            },
        }
    }
}
