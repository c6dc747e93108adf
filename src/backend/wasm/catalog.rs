//! The catalog of WASI tools: every tool the registry finds, and for each
//! component whether it is a typed tool (`toolhost:tool` world), as it
//! describes itself. `toolhost tools` prints it; an embedding program can
//! list tools the same way without building a [`Sandbox`](crate::Sandbox).

use std::path::PathBuf;

use crate::config::WasmConfig;
use crate::plan::Limits;

use super::WasmBackend;
use super::registry::Registry;

/// What kind of tool an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WasmToolKind {
    /// A command: `toolhost run --backend wasm -- NAME ARGS…` runs it.
    Command,
    /// A typed tool: `toolhost call NAME JSON` calls it.
    Typed,
}

/// One tool of the catalog.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CatalogEntry {
    /// Name to call it by.
    pub name: String,
    /// A command or a typed tool.
    pub kind: WasmToolKind,
    /// The WASI preview it is built for: `"p1"`, `"p2"` or `"p3"`.
    pub wasi: &'static str,
    /// One line: from the file's description section, or a typed tool's own.
    pub description: String,
    /// Where it was found (`builtin:NAME.wasm` for a built-in tool).
    pub path: PathBuf,
    /// A typed tool's JSON Schema of its input.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<serde_json::Value>,
    /// Why a component cannot be used (it failed to load or to describe
    /// itself); such a tool stays listed as a command.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Every WASI tool of `config` (its `tool_dirs`, then the built-in tools),
/// in the registry's order. Each component's `describe` runs once, with no
/// dirs, under `limits`. Fails when a tool dir cannot be opened, or when
/// there are components and the wasm engine cannot be built.
///
/// # Ambient Authority
/// Opens the configured tool dirs by host path: they come from the operator.
pub async fn catalog(config: &WasmConfig, limits: &Limits) -> std::io::Result<Vec<CatalogEntry>> {
    let registry = Registry::open(config)?;
    let tools = registry.list();
    let backend = if tools.iter().any(|t| t.component) {
        Some(
            WasmBackend::new(config)
                .map_err(|e| std::io::Error::other(format!("wasm engine: {e}")))?,
        )
    } else {
        None
    };
    let mut out = Vec::with_capacity(tools.len());
    for t in tools {
        let mut entry = CatalogEntry {
            name: t.name.clone(),
            kind: WasmToolKind::Command,
            wasi: t.wasi,
            description: t.description,
            path: t.path,
            input_schema: None,
            error: None,
        };
        if t.component
            && let (Some(backend), Some(file)) = (&backend, registry.find(&t.name))
        {
            match backend.describe(&file, limits).await {
                Ok(Some(info)) => {
                    entry.kind = WasmToolKind::Typed;
                    entry.description = info.description;
                    entry.input_schema = Some(info.input_schema);
                }
                Ok(None) => {}
                Err(o) => entry.error = Some(o.message),
            }
        }
        out.push(entry);
    }
    Ok(out)
}
