//! The tools an agent sees, with policy and the session's rate limit: what
//! `toolhost mcp` serves and a library embeds to run an agent loop.
//!
//! Invariant: [`Toolbox::call`] never panics and never fails as a whole; every
//! call (also an unknown tool, bad arguments, a denial) first takes a slot of
//! the rate limit, then passes the permission policy, then its own tool's
//! policy, and only then runs. Whatever happens comes back as a
//! [`ToolResult`] with a reason the model can act on.
//!
//! The parts: [`Toolbox`] (listing and dispatch) here; `result` (what a
//! call returns, how a tool is listed); `args` (a call's arguments, checked);
//! `specs` (the built-in tools' schemas); `files` (the file tools' dispatch).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::fs::{self, FsPolicy};
use crate::audit::{AuditError, AuditLog};
use crate::plan::BackendKind;
use crate::policy::rate::RateLimiter;
use crate::policy::shell::ShellPolicy;
use crate::policy::{Capability, Decision, Level, Permission, PermissionPolicy};
use crate::sandbox::{RunRequest, Sandbox};

mod args;
mod files;
mod result;
mod specs;

pub(crate) use args::kind_of;
use args::{ArgResult, Args, MAX_REFUSAL_TEXT};
use files::file_tool;
use result::run_result;
pub use result::{ToolKind, ToolResult, ToolSpec};
use specs::{builtins, schema};

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
        // The shell runs native programs: never a WASI tool of the same name.
        let backend = config.backend.fixed().unwrap_or(BackendKind::Direct);
        let mut req = RunRequest::new(argv.clone());
        if config.backend.fixed().is_none() {
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
