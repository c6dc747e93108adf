//! The MCP handler: the toolbox's tools listed with their schemas
//! (`tools/list`) and called through `Toolbox::call` (`tools/call`), each
//! result a `CallToolResult`.

use std::borrow::Cow;
use std::sync::Arc;

use futures_util::FutureExt as _;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    InitializeResult, ListToolsResult, MetaObject, PaginatedRequestParams, ServerCapabilities,
    ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Map, Value, json};

use crate::policy::{Capability, Level};
use crate::tools::toolbox::{ToolResult, ToolSpec, Toolbox};

/// The MCP side of a [`Toolbox`]: its tools, listed with their schemas and
/// called through [`Toolbox::call`].
#[derive(Clone)]
pub struct McpServer {
    pub(super) toolbox: Arc<Toolbox>,
    pub(super) tools: Arc<Vec<Tool>>,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("tools", &self.tools.len())
            .finish()
    }
}

impl McpServer {
    /// A server for `toolbox`'s tools.
    pub fn new(toolbox: Arc<Toolbox>) -> Self {
        let tools = toolbox.tools().iter().map(mcp_tool).collect();
        McpServer {
            toolbox,
            tools: Arc::new(tools),
        }
    }

    /// The tools as `tools/list` returns them.
    pub fn tools(&self) -> &[Tool] {
        &self.tools
    }
}

/// A tool spec as MCP describes it, with hints from its permission.
pub(super) fn mcp_tool(spec: &ToolSpec) -> Tool {
    // The protocol's arguments are an object, and clients reject a tool list
    // in which a schema says otherwise.
    let schema = match &spec.input_schema {
        Value::Object(m) if m.get("type").is_none_or(|t| t == "object") => {
            let mut m = m.clone();
            m.insert("type".into(), json!("object"));
            m
        }
        other => {
            tracing::warn!(
                "tool {}: its input schema is not an object schema ({other}); listed as taking any object",
                spec.name
            );
            let mut m = Map::new();
            m.insert("type".into(), json!("object"));
            m
        }
    };
    let p = &spec.permission;
    let annotations = ToolAnnotations::new()
        .read_only(p.level == Level::Safe)
        .destructive(p.level == Level::Dangerous)
        .open_world(p.capabilities.contains(&Capability::Network));
    let mut meta = Map::new();
    meta.insert(
        "toolhost/permission".into(),
        serde_json::to_value(p).unwrap_or(Value::Null),
    );
    Tool::new(
        Cow::Owned(spec.name.clone()),
        Cow::Owned(spec.description.clone()),
        Arc::new(schema),
    )
    .with_annotations(annotations)
    .with_meta(MetaObject(meta))
}

/// A tool result as MCP carries it: the text for the model, `isError`, a
/// typed tool's JSON output as `structuredContent`, and how the call ended
/// under `_meta["toolhost/call"]`.
pub fn mcp_result(r: ToolResult) -> CallToolResult {
    let mut call = Map::new();
    call.insert("status".into(), json!(r.status));
    if let Some(rule) = &r.rule {
        call.insert("rule".into(), json!(rule));
    }
    if let Some(ms) = r.retry_after_ms {
        call.insert("retry_after_ms".into(), json!(ms));
    }
    if let Some(run) = &r.run {
        call.insert("returncode".into(), json!(run.returncode));
        call.insert("timed_out".into(), json!(run.timed_out));
        call.insert("truncated".into(), json!(run.truncated));
        call.insert("outcome".into(), json!(run.outcome.kind));
        call.insert("backend".into(), json!(run.backend));
        call.insert(
            "duration_ms".into(),
            json!((run.duration.as_secs_f64() * 1e6).round() / 1e3),
        );
    }
    let content = vec![ContentBlock::text(r.text)];
    let mut out = if r.is_error {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    };
    // Objects only: the protocol's structuredContent is a JSON object.
    if let Some(v @ Value::Object(_)) = r.structured {
        out.structured_content = Some(v);
    }
    let mut meta = Map::new();
    meta.insert("toolhost/call".into(), Value::Object(call));
    out.meta = Some(MetaObject(meta));
    out
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        let mut info = InitializeResult::new(ServerCapabilities::builder().enable_tools().build());
        info.server_info = Implementation::new("toolhost", env!("CARGO_PKG_VERSION"));
        info.with_instructions(
            "Tools run inside toolhost's sandbox: only the allowed dirs, no network unless \
             enabled, and limits on time, memory, output and call rate. A refused or failed \
             call is a tool result with isError and the reason; _meta[\"toolhost/call\"] says \
             how it ended (status, rule, retry_after_ms).",
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.to_vec()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = Value::Object(request.arguments.unwrap_or_default());
        let cancelled = context.ct.clone();
        let call = self
            .toolbox
            .call_or_stop(&request.name, &args, cancelled.cancelled_owned());
        // Toolbox::call does not panic; should it ever, the request is still
        // answered (an unanswered one would hold a slot of the flow control).
        match std::panic::AssertUnwindSafe(call).catch_unwind().await {
            Ok(r) => Ok(mcp_result(r).into()),
            Err(_) => Err(ErrorData::internal_error("the tool call panicked", None)),
        }
    }
}
