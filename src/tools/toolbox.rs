//! The tools an agent sees, with policy and the session's rate limit: what
//! `toolhost mcp` serves and a library embeds to run an agent loop.
//!
//! Invariant: [`Toolbox::call`] never panics and never fails as a whole; every
//! call (also an unknown tool, bad arguments, a denial) first takes a slot of
//! the rate limit, then passes the permission policy, then its own tool's
//! policy, and only then runs. Whatever happens comes back as a
//! [`ToolResult`] with a reason the model can act on.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::fs::{self, FsError, FsPolicy};
use crate::audit::{AuditError, AuditLog};
use crate::outcome::RunOutput;
use crate::plan::BackendKind;
use crate::policy::rate::RateLimiter;
use crate::policy::shell::ShellPolicy;
use crate::policy::{Capability, Decision, Level, Permission, PermissionPolicy};
use crate::sandbox::{RunRequest, Sandbox};

/// Most entries `file_list` returns.
const MAX_LIST: usize = 2000;
/// Most results `file_search` returns.
const MAX_SEARCH: usize = 500;
/// Most arguments a command line may have.
const MAX_ARGS: usize = 4096;
/// Arguments that name a path, and the longest such path (Linux's PATH_MAX).
const PATH_ARGS: [&str; 4] = ["path", "from", "to", "cwd"];
const MAX_PATH_ARG: usize = 4096;
/// Longest text of a refusal (unknown tool, bad arguments, denied): it may
/// quote what the call sent.
const MAX_REFUSAL_TEXT: usize = 4096;

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
    fn ok(text: impl Into<String>) -> Self {
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

    fn error(status: &str, text: impl Into<String>) -> Self {
        ToolResult {
            is_error: true,
            status: status.into(),
            ..ToolResult::ok(text)
        }
    }

    fn denied(rule: String, reason: String) -> Self {
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
                status: if e.kind == "policy" { "denied" } else { e.kind }.into(),
                ..ToolResult::denied(rule, e.message)
            },
            None => ToolResult::error(e.kind, e.message),
        }
    }
}

/// The agent's tools over one sandbox, for one session.
pub struct Toolbox {
    sandbox: Arc<Sandbox>,
    permissions: PermissionPolicy,
    rate: RateLimiter,
    fs: FsPolicy,
    shell: ShellPolicy,
    denials: AtomicU64,
    calls: AtomicU64,
    builtin: Vec<ToolSpec>,
    wasm: Vec<ToolSpec>,
    audit: Option<Arc<AuditLog>>,
    session: String,
}

impl std::fmt::Debug for Toolbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Toolbox")
            .field("permissions", &self.permissions)
            .finish()
    }
}

/// Arguments of one call, checked against the names a tool takes.
struct Args<'a> {
    tool: &'a str,
    map: Map<String, Value>,
}

type ArgResult<T> = Result<T, Box<ToolResult>>;

impl<'a> Args<'a> {
    fn new(tool: &'a str, v: &Value, known: &[&str]) -> ArgResult<Self> {
        let map = match v {
            Value::Object(m) => m.clone(),
            Value::Null => Map::new(),
            other => {
                return Err(Box::new(ToolResult::error(
                    "invalid_request",
                    format!(
                        "{tool}: arguments must be a JSON object, not {}",
                        kind_of(other)
                    ),
                )));
            }
        };
        if let Some(k) = map.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(Box::new(ToolResult::error(
                "invalid_request",
                format!(
                    "{tool}: unknown argument {k:?} (it takes: {})",
                    known.join(", ")
                ),
            )));
        }
        Ok(Args { tool, map })
    }

    fn bad(&self, key: &str, want: &str, got: &Value) -> ToolResult {
        ToolResult::error(
            "invalid_request",
            format!(
                "{}: argument {key:?} must be {want}, not {}",
                self.tool,
                kind_of(got)
            ),
        )
    }

    fn str(&self, key: &str) -> ArgResult<Option<&str>> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if PATH_ARGS.contains(&key) && s.len() > MAX_PATH_ARG => {
                Err(Box::new(ToolResult::error(
                    "invalid_request",
                    format!(
                        "{}: argument {key:?} is {} bytes; a path is at most {MAX_PATH_ARG}",
                        self.tool,
                        s.len()
                    ),
                )))
            }
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(Box::new(self.bad(key, "a string", v))),
        }
    }

    fn req_str(&self, key: &str) -> ArgResult<&str> {
        self.str(key)?.ok_or_else(|| {
            Box::new(ToolResult::error(
                "invalid_request",
                format!("{}: argument {key:?} is required", self.tool),
            ))
        })
    }

    fn bool(&self, key: &str) -> ArgResult<bool> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(v) => Err(Box::new(self.bad(key, "true or false", v))),
        }
    }

    fn u64(&self, key: &str) -> ArgResult<Option<u64>> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_u64()
                .map(Some)
                .ok_or_else(|| Box::new(self.bad(key, "a non-negative integer", v))),
        }
    }

    fn strings(&self, key: &str) -> ArgResult<Option<Vec<String>>> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(items)) => {
                if items.len() > MAX_ARGS {
                    return Err(Box::new(ToolResult::error(
                        "invalid_request",
                        format!("{}: at most {MAX_ARGS} arguments", self.tool),
                    )));
                }
                items
                    .iter()
                    .map(|i| match i {
                        Value::String(s) => Ok(s.clone()),
                        other => Err(Box::new(self.bad(key, "a list of strings", other))),
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map(Some)
            }
            Some(v) => Err(Box::new(self.bad(key, "a list of strings", v))),
        }
    }
}

/// What kind of JSON value `v` is, for messages ("a string", "a list", ...).
pub(crate) fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn schema(properties: Value, required: &[&str]) -> Value {
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

/// The built-in tools: name, description, schema, permission.
fn builtins(allow_strings: bool) -> Vec<ToolSpec> {
    use Capability::*;
    let path = json!({"type": "string", "description": "relative to the workspace, or absolute inside an allowed dir"});
    let spec =
        |name: &str, description: &str, input_schema: Value, level, caps: &[Capability]| ToolSpec {
            name: name.into(),
            description: description.into(),
            input_schema,
            permission: Permission::new(level, caps),
            kind: ToolKind::Builtin,
        };
    let shell_desc = if allow_strings {
        "Run an allowed program: `args` as a list ([program, arg, ...]; the program a bare name on the allowlist), or `command` as one string (no shell metacharacters). No shell interprets it."
    } else {
        "Run an allowed program: `args` as a list ([program, arg, ...]; the program a bare name on the allowlist). No shell interprets it."
    };
    let mut shell_props = json!({
        "args": {"type": "array", "items": {"type": "string"}, "description": "program and arguments"},
        "cwd": path,
        "stdin": {"type": "string", "description": "text for standard input"},
    });
    if allow_strings {
        shell_props["command"] =
            json!({"type": "string", "description": "a command line, split like a shell would"});
    }
    vec![
        spec(
            "shell",
            shell_desc,
            schema(shell_props, &[]),
            Level::Dangerous,
            &[Shell, Filesystem],
        ),
        spec(
            "file_read",
            "Read a text file: `limit` lines from line `offset` (0-based). Binary files are reported, not returned.",
            schema(
                json!({"path": path, "offset": {"type": "integer", "minimum": 0}, "limit": {"type": "integer", "minimum": 0}}),
                &["path"],
            ),
            Level::Safe,
            &[Filesystem],
        ),
        spec(
            "file_write",
            "Write a text file (replacing it atomically, or appending), creating parent directories.",
            schema(
                json!({"path": path, "content": {"type": "string"}, "append": {"type": "boolean"}}),
                &["path", "content"],
            ),
            Level::Cautious,
            &[Filesystem],
        ),
        spec(
            "file_list",
            "List a directory (`name/` for directories, `name@` for symlinks, `name<TAB>size` for files).",
            schema(json!({"path": path, "recursive": {"type": "boolean"}}), &[]),
            Level::Safe,
            &[Filesystem],
        ),
        spec(
            "file_stat",
            "Type, size, read-only flag and modification time of a path.",
            schema(json!({"path": path}), &["path"]),
            Level::Safe,
            &[Filesystem],
        ),
        spec(
            "file_mkdir",
            "Create a directory and its parents.",
            schema(json!({"path": path}), &["path"]),
            Level::Cautious,
            &[Filesystem],
        ),
        spec(
            "file_move",
            "Move or rename a file or directory within the sandbox.",
            schema(
                json!({"from": path, "to": path, "overwrite": {"type": "boolean"}}),
                &["from", "to"],
            ),
            Level::Cautious,
            &[Filesystem],
        ),
        spec(
            "file_delete",
            "Delete a file, a symlink, or a directory (non-empty only with `recursive`).",
            schema(
                json!({"path": path, "recursive": {"type": "boolean"}}),
                &["path"],
            ),
            Level::Cautious,
            &[Filesystem],
        ),
        spec(
            "file_search",
            "Find files under `path` (default: the workspace) by name `glob` (*, ?, [a-z]) and/or lines containing `text`.",
            schema(
                json!({"path": path, "glob": {"type": "string"}, "text": {"type": "string"}}),
                &[],
            ),
            Level::Safe,
            &[Filesystem],
        ),
    ]
}

impl Toolbox {
    /// The tools of `sandbox` under `permissions`, with the sandbox config's
    /// shell policy, write policy and rate limit. Typed tools describe
    /// themselves once, here.
    pub async fn new(sandbox: Arc<Sandbox>, permissions: PermissionPolicy) -> Self {
        let c = sandbox.config();
        let fs = FsPolicy {
            max_file_size: (c.max_file_size_mb != 0).then_some(c.max_file_size_mb << 20),
            max_read_bytes: c.max_output_bytes,
            denied_extensions: c.write_denied_extensions.clone(),
            protected: sandbox.protected_paths().clone(),
        };
        let shell = ShellPolicy {
            allowed: c.shell_allowed_binaries.clone(),
            allow_strings: c.shell_allow_strings,
            allow_network: c.allow_network,
        };
        let rate = RateLimiter::new(c.rate_limit_calls, c.rate_limit_window);
        let allow_strings = c.shell_allow_strings;
        let reserved: Vec<String> = builtins(true).into_iter().map(|t| t.name).collect();
        let mut wasm = Vec::new();
        let typed = sandbox.typed_tools().await;
        let typed_names: Vec<String> = typed
            .iter()
            .filter_map(|t| t.as_ref().ok().map(|t| t.name.clone()))
            .collect();
        for t in typed.into_iter().flatten() {
            wasm.push(ToolSpec {
                name: t.name,
                description: t.description,
                input_schema: t.input_schema,
                permission: Permission::new(Level::Cautious, &[Capability::Filesystem]),
                kind: ToolKind::Typed,
            });
        }
        for info in sandbox.wasm_tools() {
            if typed_names.contains(&info.name) {
                continue;
            }
            let description = if info.description.is_empty() {
                format!("WASI tool {}", info.name)
            } else {
                info.description.clone()
            };
            wasm.push(ToolSpec {
                name: info.name,
                description,
                input_schema: schema(
                    json!({
                        "args": {"type": "array", "items": {"type": "string"}, "description": "arguments (after the tool's name)"},
                        "stdin": {"type": "string"},
                        "cwd": {"type": "string"},
                    }),
                    &[],
                ),
                permission: Permission::new(Level::Cautious, &[Capability::Filesystem]),
                kind: ToolKind::Command,
            });
        }
        wasm.retain(|t| {
            let clash = reserved.contains(&t.name);
            if clash {
                tracing::warn!(
                    "WASI tool {} is hidden: the name is a built-in tool's",
                    t.name
                );
            }
            !clash
        });
        Toolbox {
            sandbox,
            permissions,
            rate,
            fs,
            shell,
            denials: AtomicU64::new(0),
            calls: AtomicU64::new(0),
            builtin: builtins(allow_strings),
            wasm,
            audit: None,
            session: format!(
                "{:x}-{:x}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() & 0xffff_ffff_ffff)
                    .unwrap_or(0)
            ),
        }
    }

    /// The tools of `sandbox` as its config says: the permission cap and
    /// blocked capabilities, and the audit log (opened, its chain verified).
    pub async fn from_config(sandbox: Arc<Sandbox>) -> Result<Self, AuditError> {
        let c = sandbox.config();
        let permissions = PermissionPolicy {
            max_level: c.max_permission_level,
            blocked: c.blocked_capabilities.clone(),
        };
        let audit = match &c.audit_log {
            Some(p) => Some(Arc::new(AuditLog::open(p)?)),
            None => None,
        };
        let mut tb = Toolbox::new(sandbox, permissions).await;
        tb.audit = audit;
        Ok(tb)
    }

    /// Records every call in `log` from now on.
    pub fn with_audit_log(mut self, log: Arc<AuditLog>) -> Self {
        self.audit = Some(log);
        self
    }

    /// This session's id (in the audit log).
    pub fn session(&self) -> &str {
        &self.session
    }

    /// The sandbox the tools run in.
    pub fn sandbox(&self) -> &Arc<Sandbox> {
        &self.sandbox
    }

    /// Every tool, built-in first, with its schema and permission (also the
    /// ones the permission policy refuses: calling them says why).
    pub fn tools(&self) -> Vec<ToolSpec> {
        let mut v = self.builtin.clone();
        v.extend(self.wasm.iter().cloned());
        v
    }

    /// Calls refused by policy or the rate limit so far.
    pub fn denials(&self) -> u64 {
        self.denials.load(Ordering::Relaxed)
    }

    /// Calls made so far (all of them, refused ones too).
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Calls a tool by name with JSON arguments (and records it in the audit
    /// log, if there is one).
    pub async fn call(&self, name: &str, args: &Value) -> ToolResult {
        self.call_or_stop(name, args, std::future::pending()).await
    }

    /// [`Toolbox::call`] that gives up when `stop` completes first (a client
    /// cancelled the call): the run is dropped, which stops its process tree,
    /// guest or container, and the result's status is `cancelled`. File
    /// tools are not stopped (they run to the end on a blocking thread, and
    /// their result says so). The call is in the audit log either way.
    pub async fn call_or_stop(
        &self,
        name: &str,
        args: &Value,
        stop: impl std::future::Future<Output = ()>,
    ) -> ToolResult {
        let start = std::time::Instant::now();
        // Fail closed: while the audit log cannot be written, no call runs
        // unrecorded.
        if let Some(why) = self.audit.as_ref().and_then(|log| log.failure()) {
            return ToolResult::denied(
                "audit.unavailable".into(),
                format!("the audit log cannot be written ({why}); calls are refused until it can"),
            );
        }
        // File tools run on a blocking thread that cannot be stopped once it
        // has started; they are short (size and walk caps) and run to the end,
        // so the result and the audit log say what happened.
        let stoppable = self
            .find(name)
            .is_none_or(|s| s.kind != ToolKind::Builtin || s.name == "shell");
        let mut result = if stoppable {
            tokio::select! {
                r = self.call_inner(name, args) => r,
                () = stop => ToolResult::error(
                    "cancelled",
                    "the call was cancelled; what it was running was stopped",
                ),
            }
        } else {
            self.call_inner(name, args).await
        };
        let refusal = matches!(
            result.status.as_str(),
            "invalid_request" | "unknown_tool" | "denied"
        );
        if refusal && result.text.len() > MAX_REFUSAL_TEXT {
            let mut cut = MAX_REFUSAL_TEXT;
            while !result.text.is_char_boundary(cut) {
                cut -= 1;
            }
            result.text.truncate(cut);
            result
                .text
                .push_str(&format!(" [... message cut at {MAX_REFUSAL_TEXT} bytes]"));
        }
        if let Some(log) = &self.audit {
            let record = self.audit_record(name, args, &result, start.elapsed());
            if let Err(e) = log.append(record) {
                tracing::error!("audit log: {e}");
            }
        }
        result
    }

    fn audit_record(
        &self,
        name: &str,
        args: &Value,
        r: &ToolResult,
        took: Duration,
    ) -> Map<String, Value> {
        use sha2::Digest as _;
        let mut m = Map::new();
        m.insert("time".into(), json!(crate::audit::now_rfc3339()));
        m.insert("session".into(), json!(self.session));
        m.insert("tool".into(), crate::audit::redact_args(&json!(name)));
        m.insert("args".into(), crate::audit::redact_args(args));
        let decision = match r.status.as_str() {
            "denied" | "rate_limited" => "deny",
            "unknown_tool" | "invalid_request" => "invalid",
            _ => "allow",
        };
        m.insert("decision".into(), json!(decision));
        m.insert("rule".into(), json!(r.rule));
        m.insert("status".into(), json!(r.status));
        let limits = [
            "timed_out",
            "memory_limit",
            "cpu_limit",
            "file_size_limit",
            "too_large",
        ];
        let mut hit: Vec<&str> = limits.iter().copied().filter(|l| r.status == *l).collect();
        if let Some(run) = &r.run {
            m.insert("backend".into(), json!(run.backend));
            m.insert("returncode".into(), json!(run.returncode));
            m.insert("stdout_bytes".into(), json!(run.stdout.len()));
            m.insert("stderr_bytes".into(), json!(run.stderr.len()));
            if run.truncated {
                hit.push("output");
            }
        }
        m.insert("limits_hit".into(), json!(hit));
        m.insert(
            "duration_us".into(),
            json!(u64::try_from(took.as_micros()).unwrap_or(u64::MAX)),
        );
        m.insert("output_bytes".into(), json!(r.text.len()));
        m.insert(
            "output_sha256".into(),
            json!(crate::audit::hex(&sha2::Sha256::digest(r.text.as_bytes()))),
        );
        m
    }

    async fn call_inner(&self, name: &str, args: &Value) -> ToolResult {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if let Err(wait) = self.rate.admit() {
            self.denials.fetch_add(1, Ordering::Relaxed);
            let ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1);
            return ToolResult {
                rule: Some("rate_limit".into()),
                retry_after_ms: Some(ms),
                ..ToolResult::error(
                    "rate_limited",
                    format!(
                        "rate limit: {} calls per {} s in this session; retry in {:.1} s",
                        self.rate.calls(),
                        self.rate.window().as_secs_f64(),
                        Duration::from_millis(ms).as_secs_f64()
                    ),
                )
            };
        }
        let Some(spec) = self.find(name) else {
            return ToolResult::error(
                "unknown_tool",
                format!("unknown tool {name:?}; the tools are listed by tools/list"),
            );
        };
        if let Decision::Deny { rule, reason } = self.permissions.check(name, &spec.permission) {
            self.denials.fetch_add(1, Ordering::Relaxed);
            return ToolResult::denied(rule, reason);
        }
        let r = match spec.kind {
            ToolKind::Builtin => self.builtin(name, args).await,
            ToolKind::Command => self.command(name, args).await,
            ToolKind::Typed => self.typed(name, args).await,
        };
        let result = r.unwrap_or_else(|e| *e);
        if result.status == "denied" {
            self.denials.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    fn find(&self, name: &str) -> Option<&ToolSpec> {
        self.builtin
            .iter()
            .chain(self.wasm.iter())
            .find(|t| t.name == name)
    }

    async fn builtin(&self, name: &str, v: &Value) -> ArgResult<ToolResult> {
        if name == "shell" {
            return self.shell(v).await;
        }
        let dirs = self.sandbox.dirs().clone();
        let policy = self.fs.clone();
        let name = name.to_string();
        let v = v.clone();
        // File tools do blocking I/O: off the async workers.
        tokio::task::spawn_blocking(move || file_tool(&name, &v, &dirs, &policy))
            .await
            .map_err(|e| {
                Box::new(ToolResult::error(
                    "internal",
                    format!("file tool failed: {e}"),
                ))
            })?
    }

    async fn shell(&self, v: &Value) -> ArgResult<ToolResult> {
        let known: &[&str] = if self.shell.allow_strings {
            &["args", "command", "cwd", "stdin"]
        } else {
            &["args", "cwd", "stdin"]
        };
        let a = Args::new("shell", v, known)?;
        let argv = match (a.strings("args")?, a.str("command")?) {
            (Some(_), Some(_)) => {
                return Err(Box::new(ToolResult::error(
                    "invalid_request",
                    "shell: give `args` or `command`, not both",
                )));
            }
            (Some(args), None) => {
                if let Err(d) = self.shell.check_args(&args) {
                    return Err(Box::new(ToolResult::denied(d.rule().into(), d.to_string())));
                }
                args
            }
            (None, Some(cmd)) => match self.shell.check_string(cmd) {
                Ok(args) => args,
                Err(d) => return Err(Box::new(ToolResult::denied(d.rule().into(), d.to_string()))),
            },
            (None, None) => {
                if self.shell.allowed.is_empty() {
                    let d = crate::policy::shell::ShellDenial::Disabled;
                    return Err(Box::new(ToolResult::denied(d.rule().into(), d.to_string())));
                }
                return Err(Box::new(ToolResult::error(
                    "invalid_request",
                    "shell: `args` is required",
                )));
            }
        };
        let config = self.sandbox.config();
        let backend = match config.backend {
            // The shell runs native programs: never a WASI tool of the same name.
            BackendKind::Auto => BackendKind::Direct,
            b => b,
        };
        let mut req = RunRequest::new(argv.clone());
        if config.backend == BackendKind::Auto {
            req = req.backend(BackendKind::Direct);
        }
        // No program a tool could have written runs by a bare name.
        if !config.shell_allow_writable_path && backend != BackendKind::Wasm {
            let writable: Vec<&std::path::Path> = self
                .sandbox
                .allowed_dirs()
                .iter()
                .filter(|d| !d.read_only())
                .map(|d| d.path())
                .collect();
            let env = self.sandbox.build_env(&[]);
            let path = env
                .iter()
                .find(|(k, _)| k == "PATH")
                .map(|(_, v)| v.clone())
                .unwrap_or_default();
            let name = argv.first().map(String::as_str).unwrap_or("");
            match crate::policy::shell::shell_path(
                name,
                &path,
                &writable,
                backend == BackendKind::Direct,
            ) {
                Ok(None) => {}
                Ok(Some(p)) => req = req.env("PATH", p.to_string_lossy()),
                Err(d) => {
                    return Err(Box::new(ToolResult::denied(d.rule().into(), d.to_string())));
                }
            }
        }
        if let Some(cwd) = a.str("cwd")? {
            req = req.cwd(cwd);
        }
        if let Some(stdin) = a.str("stdin")? {
            req = req.stdin(stdin.as_bytes().to_vec());
        }
        Ok(run_result(self.sandbox.run(req).await))
    }

    async fn command(&self, name: &str, v: &Value) -> ArgResult<ToolResult> {
        let a = Args::new(name, v, &["args", "stdin", "cwd"])?;
        let mut argv = vec![name.to_string()];
        argv.extend(a.strings("args")?.unwrap_or_default());
        let mut req = RunRequest::new(argv).backend(BackendKind::Wasm);
        if let Some(cwd) = a.str("cwd")? {
            req = req.cwd(cwd);
        }
        if let Some(stdin) = a.str("stdin")? {
            req = req.stdin(stdin.as_bytes().to_vec());
        }
        Ok(run_result(self.sandbox.run(req).await))
    }

    async fn typed(&self, name: &str, v: &Value) -> ArgResult<ToolResult> {
        let out = self.sandbox.call_tool(name, v, None).await;
        let status = out.run.outcome.kind.as_str().to_string();
        Ok(match (out.output, out.error) {
            (Some(o), _) => ToolResult {
                text: o.to_string(),
                structured: Some(o),
                run: Some(out.run),
                ..ToolResult::ok("")
            },
            (None, e) => ToolResult {
                run: Some(out.run),
                ..ToolResult::error(
                    if status == "exited" {
                        "tool_error"
                    } else {
                        &status
                    },
                    e.unwrap_or_else(|| "the tool returned no result".into()),
                )
            },
        })
    }
}

/// The text of a program's run: stdout, then `[stderr]` and stderr, then
/// `[exit code: N]` or how it ended, and a note when output was cut.
fn run_result(r: RunOutput) -> ToolResult {
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

fn file_tool(
    name: &str,
    v: &Value,
    dirs: &crate::paths::AllowedDirs,
    policy: &FsPolicy,
) -> ArgResult<ToolResult> {
    let r: Result<ToolResult, FsError> = match name {
        "file_read" => {
            let a = Args::new(name, v, &["path", "offset", "limit"])?;
            fs::read(
                dirs,
                policy,
                a.req_str("path")?,
                a.u64("offset")?.unwrap_or(0),
                a.u64("limit")?,
            )
            .map(ToolResult::ok)
        }
        "file_write" => {
            let a = Args::new(name, v, &["path", "content", "append"])?;
            fs::write(
                dirs,
                policy,
                a.req_str("path")?,
                a.req_str("content")?.as_bytes(),
                a.bool("append")?,
            )
            .map(ToolResult::ok)
        }
        "file_list" => {
            let a = Args::new(name, v, &["path", "recursive"])?;
            fs::list(
                dirs,
                a.str("path")?.unwrap_or("."),
                a.bool("recursive")?,
                MAX_LIST,
            )
            .map(ToolResult::ok)
        }
        "file_stat" => {
            let a = Args::new(name, v, &["path"])?;
            fs::stat(dirs, a.req_str("path")?).map(|s| ToolResult {
                text: s.to_string(),
                structured: Some(s),
                ..ToolResult::ok("")
            })
        }
        "file_mkdir" => {
            let a = Args::new(name, v, &["path"])?;
            fs::mkdir(dirs, policy, a.req_str("path")?).map(ToolResult::ok)
        }
        "file_move" => {
            let a = Args::new(name, v, &["from", "to", "overwrite"])?;
            fs::rename(
                dirs,
                policy,
                a.req_str("from")?,
                a.req_str("to")?,
                a.bool("overwrite")?,
            )
            .map(ToolResult::ok)
        }
        "file_delete" => {
            let a = Args::new(name, v, &["path", "recursive"])?;
            fs::delete(dirs, policy, a.req_str("path")?, a.bool("recursive")?).map(ToolResult::ok)
        }
        "file_search" => {
            let a = Args::new(name, v, &["path", "glob", "text"])?;
            fs::search(
                dirs,
                policy,
                a.str("path")?.unwrap_or("."),
                a.str("glob")?,
                a.str("text")?,
                MAX_SEARCH,
            )
            .map(ToolResult::ok)
        }
        other => Ok(ToolResult::error(
            "unknown_tool",
            format!("unknown tool {other:?}"),
        )),
    };
    Ok(r.unwrap_or_else(ToolResult::from))
}
