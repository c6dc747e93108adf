//! toolhost: the security boundary between an AI agent loop and the machine it
//! runs on.
//!
//! An agent asks for a tool call; toolhost checks it against the sandbox (allowed
//! dirs, environment allowlist, limits), runs it on a backend and returns a
//! [`RunOutput`] with a typed [`Outcome`]. Failures are data, never panics.
//!
//! Layers, top to bottom: front ends (the `toolhost` CLI) → [`Sandbox`] (config,
//! allowed dirs, env, [`Sandbox::plan`]) → backends ([`backend::direct`], a
//! native subprocess; [`backend::wasm`], WASI commands and typed tools in
//! wasmtime; [`backend::docker`], a container per call on a Docker engine).
//!
//! Typed tools (components of the `toolhost:tool` world in `wit/`) are listed
//! by [`Sandbox::typed_tools`] and called with JSON by [`Sandbox::call_tool`].
//!
//! # Embedding in an async agent loop
//!
//! ```no_run
//! use std::sync::Arc;
//! use toolhost::{RunRequest, Sandbox, SandboxConfig};
//!
//! # async fn next_tool_call() -> Option<Vec<String>> { None }
//! #[tokio::main]
//! async fn main() -> anyhow::Result<()> {
//!     let mut config = SandboxConfig::default();
//!     config.timeout = std::time::Duration::from_secs(10);
//!     // The first allowed dir is the workspace and the default cwd.
//!     let sandbox = Arc::new(Sandbox::new(["/srv/agent/workspace"], config)?);
//!
//!     while let Some(argv) = next_tool_call().await {
//!         let sandbox = Arc::clone(&sandbox);
//!         // Calls may run concurrently; each is held to its own limits.
//!         let result = tokio::spawn(async move { sandbox.run(RunRequest::new(argv)).await }).await?;
//!         // Hand the model something it can act on.
//!         println!("{}", serde_json::to_string(&result)?);
//!     }
//!     // Before exiting: wait for the cleanups that run in the background.
//!     sandbox.shutdown().await;
//!     Ok(())
//! }
//! ```
#![warn(missing_docs)]
// Unsafe code lives in one island: `sys` and `backend::direct` (the book:
// Design, "The unsafe island").
#![deny(unsafe_code)]

pub mod audit;
pub mod backend;
pub mod check;
pub mod config;
pub mod env;
pub mod isolation;
pub mod mcp;
pub mod outcome;
pub mod output;
pub mod paths;
pub mod plan;
pub mod policy;
pub mod probe;
pub mod protected;
mod reach;
pub mod sandbox;
pub mod state_dirs;
#[allow(unsafe_code)]
mod sys;
pub mod tools;

pub use audit::{AuditError, verify as verify_audit_log};
pub use backend::wasm::catalog::{CatalogEntry, WasmToolKind, catalog};
pub use backend::wasm::{compile_into_cache, defer_tier_ups, hand_off_tier_ups};
pub use check::{CheckReport, check};
pub use config::{BackendChoice, ConfigError, MAX_TIMEOUT_SECS, SandboxConfig};
pub use isolation::IsolationLevel;
pub use mcp::serve as serve_mcp;
pub use outcome::{Outcome, OutcomeKind, RunOutput};
pub use paths::{AllowedDir, AllowedDirSpec, PathError, ResolvedPath};
pub use plan::{BackendKind, ExecPlan, Limits, Mount, UnknownName};
pub use sandbox::{RunRequest, Sandbox, SandboxError, ToolCallOutput, TypedTool};
pub use tools::toolbox::Toolbox;
