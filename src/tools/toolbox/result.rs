//! What a tool call gives back: `ToolResult` (text for the model, a status,
//! the run), and the `ToolSpec` each tool is listed with.

use serde::Serialize;
use serde_json::Value;

use super::fs::{FsError, FsErrorKind};
use crate::outcome::RunOutput;
use crate::policy::Permission;

/// What kind of tool it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    /// One of toolhost's own tools (shell, file_*).
    Builtin,
    /// A registered WASI command.
    Command,
    /// A typed tool of the `toolhost:tool` world.
    Typed,
}

/// A tool as the agent sees it.
#[derive(Debug, Clone, Serialize)]
pub struct ToolSpec {
    /// Name to call it by.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON Schema of its arguments.
    pub input_schema: Value,
    /// Its declared permission.
    pub permission: Permission,
    /// Builtin, WASI command or typed tool.
    pub kind: ToolKind,
}

/// The result of one tool call.
#[derive(Debug, Clone, Serialize)]
pub struct ToolResult {
    /// Text for the model.
    pub text: String,
    /// Whether the call failed (refused, invalid, or the tool failed).
    pub is_error: bool,
    /// `ok`, `rate_limited`, `unknown_tool`, `invalid_request`, `denied`, or
    /// how the tool ended (an outcome kind, or a file tool's error kind).
    pub status: String,
    /// The policy rule that decided, when one refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// When the rate limit refused: milliseconds until a call is admitted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// Structured output (a typed tool's JSON result, `file_stat`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub structured: Option<Value>,
    /// The run, for tools that ran a program.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run: Option<RunOutput>,
}

impl ToolResult {
    pub(super) fn ok(text: impl Into<String>) -> Self {
        ToolResult {
            text: text.into(),
            is_error: false,
            status: "ok".into(),
            rule: None,
            retry_after_ms: None,
            structured: None,
            run: None,
        }
    }

    pub(super) fn error(status: &str, text: impl Into<String>) -> Self {
        ToolResult {
            is_error: true,
            status: status.into(),
            ..ToolResult::ok(text)
        }
    }

    pub(super) fn denied(rule: String, reason: String) -> Self {
        ToolResult {
            rule: Some(rule),
            ..ToolResult::error("denied", reason)
        }
    }
}

impl From<FsError> for ToolResult {
    fn from(e: FsError) -> Self {
        match e.rule {
            Some(rule) => ToolResult {
                status: if e.kind == FsErrorKind::Policy {
                    "denied"
                } else {
                    e.kind.as_str()
                }
                .into(),
                ..ToolResult::denied(rule, e.message)
            },
            None => ToolResult::error(e.kind.as_str(), e.message),
        }
    }
}

/// The text of a program's run: stdout, then `[stderr]` and stderr, then
/// `[exit code: N]` or how it ended, and a note when output was cut.
pub(super) fn run_result(r: RunOutput) -> ToolResult {
    let mut text = r.stdout.clone();
    if !r.stderr.is_empty() {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str("[stderr]\n");
        text.push_str(&r.stderr);
    }
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    match r.returncode {
        Some(code) if r.outcome.kind == crate::outcome::OutcomeKind::Exited => {
            text.push_str(&format!("[exit code: {code}]"));
        }
        _ => text.push_str(&format!(
            "[{}: {}]",
            r.outcome.kind.as_str(),
            r.outcome.message
        )),
    }
    if r.truncated {
        text.push_str("\n[output truncated: the output limit was reached]");
    }
    let ok = r.success();
    let status = if ok {
        "ok".to_string()
    } else {
        r.outcome.kind.as_str().to_string()
    };
    ToolResult {
        text,
        is_error: !ok,
        status,
        run: Some(r),
        ..ToolResult::ok("")
    }
}
