//! `toolhost mcp`: the [`Toolbox`] served over the Model Context Protocol.
//!
//! The protocol (initialize, version negotiation, `tools/list`, `tools/call`,
//! cancellation, ping) is the official Rust SDK's (`rmcp`). The line transport
//! is toolhost's own, because it must answer bad input that the SDK's transport
//! drops or answers without an id:
//!
//! - a line that is not JSON, or not UTF-8, or holds a lone UTF-16 surrogate
//!   (what a non-UTF-8 path becomes in a client's JSON), gets a parse error,
//!   with the request's id when one can be read from the line;
//! - JSON that is not a request the protocol knows gets "invalid request" (or
//!   "invalid params") with its id;
//! - a line longer than the message cap is skipped without being buffered and
//!   answered the same way;
//! - a `tools/call` whose request cannot be read at all still gets a tool
//!   result with `isError` and the reason, so the model sees why.
//!
//! Everything else about a call (unknown tool, wrong argument types, policy,
//! rate limit, a failing tool) is decided by [`Toolbox::call`] and comes back
//! as a tool result with `isError`: never a protocol error, never a crash. The
//! session keeps working after each of them.
//!
//! Replies go through one writer task, so a cancelled request can never leave
//! half a message on the stream.

use std::borrow::Cow;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientRequest, ContentBlock,
    Implementation, InitializeResult, JsonRpcMessage, ListToolsResult, MetaObject,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot};

use crate::policy::{Capability, Level};
use crate::tools::toolbox::{ToolResult, ToolSpec, Toolbox};

/// Smallest cap on one incoming message (one line).
pub const MIN_MESSAGE_BYTES: usize = 16 << 20;
/// Largest cap on one incoming message.
pub const MAX_MESSAGE_BYTES: usize = 1 << 30;
/// How much of an oversized line is kept to find its id.
const SALVAGE_PREFIX: usize = 64 << 10;

/// JSON-RPC error codes.
const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const INVALID_PARAMS: i64 = -32602;

/// The cap on one incoming message for a sandbox whose `file_write` takes
/// files up to `max_file_size` bytes (`None`: no cap): 16 MiB, or twice the
/// largest file plus 1 MiB when that is more (a file's content travels as a
/// JSON string), at most 1 GiB. Without a file cap, 256 MiB.
pub fn message_cap(max_file_size: Option<u64>) -> usize {
    let want = match max_file_size {
        Some(n) => n.saturating_mul(2).saturating_add(1 << 20),
        None => 256 << 20,
    };
    usize::try_from(want)
        .unwrap_or(usize::MAX)
        .clamp(MIN_MESSAGE_BYTES, MAX_MESSAGE_BYTES)
}

/// Serves `toolbox` over MCP on `read`/`write` (newline-delimited JSON-RPC)
/// until the client closes its side or the stream breaks.
pub async fn serve<R, W>(toolbox: Arc<Toolbox>, read: R, write: W) -> anyhow::Result<()>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let max = {
        let c = toolbox.sandbox().config();
        message_cap((c.max_file_size_mb != 0).then_some(c.max_file_size_mb << 20))
    };
    let transport = LineTransport::new(read, write, max);
    let server = McpServer::new(toolbox);
    let running = server
        .serve(transport)
        .await
        .map_err(|e| anyhow::anyhow!("MCP session did not start: {e}"))?;
    let reason = running.waiting().await?;
    tracing::info!("MCP session ended: {reason:?}");
    Ok(())
}

/// The MCP side of a [`Toolbox`]: its tools, listed with their schemas and
/// called through [`Toolbox::call`].
#[derive(Clone)]
pub struct McpServer {
    toolbox: Arc<Toolbox>,
    tools: Arc<Vec<Tool>>,
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
fn mcp_tool(spec: &ToolSpec) -> Tool {
    let schema = match &spec.input_schema {
        Value::Object(m) => m.clone(),
        _ => {
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
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = Value::Object(request.arguments.unwrap_or_default());
        let r = self.toolbox.call(&request.name, &args).await;
        Ok(mcp_result(r).into())
    }
}

/// What can be read of a request that did not parse: its id and method.
#[derive(Debug, Default, PartialEq)]
struct Salvaged {
    id: Option<Value>,
    method: Option<String>,
}

/// Finds the top-level `"id"` and `"method"` of a JSON object in `line`, which
/// may be cut short, not UTF-8, or otherwise broken. Only values that are
/// valid JSON on their own are taken.
fn salvage(line: &[u8]) -> Salvaged {
    let mut out = Salvaged::default();
    let start = line.iter().position(|b| !b.is_ascii_whitespace());
    if start.map(|i| line[i]) != Some(b'{') {
        return out;
    }
    let mut i = 0;
    let mut depth = 0usize;
    let mut expect_key = false;
    let mut key: Option<&[u8]> = None;
    let mut value_of: Option<&[u8]> = None;
    while i < line.len() {
        let b = line[i];
        match b {
            b'"' => {
                // The string's extent, escapes skipped.
                let mut j = i + 1;
                while j < line.len() && line[j] != b'"' {
                    j += if line[j] == b'\\' { 2 } else { 1 };
                }
                if j >= line.len() {
                    return out;
                }
                let raw = &line[i..=j];
                if depth == 1 {
                    if expect_key {
                        key = Some(&raw[1..raw.len() - 1]);
                        expect_key = false;
                    } else if let Some(k) = value_of.take()
                        && let Ok(v) = serde_json::from_slice::<Value>(raw)
                    {
                        match k {
                            b"id" => out.id = Some(v),
                            b"method" => out.method = v.as_str().map(str::to_string),
                            _ => {}
                        }
                    }
                }
                i = j + 1;
                continue;
            }
            b'{' | b'[' => {
                depth += 1;
                value_of = None;
                if depth == 1 {
                    expect_key = b == b'{';
                }
            }
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return out;
                }
            }
            b',' if depth == 1 => {
                expect_key = true;
                value_of = None;
            }
            b':' if depth == 1 => value_of = key.take(),
            b'-' | b'0'..=b'9' if depth == 1 => {
                let end = line[i..]
                    .iter()
                    .position(|c| !matches!(c, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'))
                    .map_or(line.len(), |n| i + n);
                if value_of.take() == Some(b"id".as_slice())
                    && end < line.len()
                    && let Ok(v @ Value::Number(_)) = serde_json::from_slice::<Value>(&line[i..end])
                {
                    out.id = Some(v);
                }
                i = end;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// A request id the protocol accepts: an integer or a string.
fn valid_id(v: &Value) -> bool {
    v.is_string() || v.as_i64().is_some()
}

/// The reply to a line that is not a message the server can handle: a tool
/// error result for a `tools/call` with an id, else a JSON-RPC error (with the
/// id when known).
fn bad_input_reply(found: &Salvaged, code: i64, reason: &str) -> Option<Vec<u8>> {
    let id = found.id.as_ref().filter(|v| valid_id(v));
    let msg = match (id, found.method.as_deref()) {
        (Some(id), Some("tools/call")) => json!({
            "jsonrpc": "2.0",
            "id": id,
            "result": {
                "content": [{"type": "text", "text": format!("invalid tool call: {reason}")}],
                "isError": true,
                "_meta": {"toolhost/call": {"status": "invalid_request"}},
            },
        }),
        (id, _) => {
            let mut m = json!({
                "jsonrpc": "2.0",
                "error": {"code": code, "message": reason},
            });
            if let Some(id) = id {
                m["id"] = id.clone();
            }
            m
        }
    };
    let mut bytes = serde_json::to_vec(&msg).ok()?;
    bytes.push(b'\n');
    Some(bytes)
}

/// Methods of the protocol a client may call on a server.
const PROTOCOL_METHODS: [&str; 13] = [
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
];

/// Why the params of a protocol method do not fit it.
fn misfit_params(method: &str, params: Option<&Value>) -> String {
    let detail = match (method, params) {
        ("tools/call", Some(Value::Object(p))) => match (p.get("name"), p.get("arguments")) {
            (Some(Value::String(_)), Some(a)) if !a.is_object() && !a.is_null() => {
                format!("\"arguments\" must be a JSON object, not {}", json_kind(a))
            }
            (Some(Value::String(_)), _) => "the params do not fit tools/call".to_string(),
            _ => "\"name\" must be the tool's name, as a string".to_string(),
        },
        ("tools/call", _) => "params must be an object with \"name\" and \"arguments\"".into(),
        _ => format!("the params do not fit {method}"),
    };
    format!("invalid params for {method}: {detail}")
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Why a line did not parse, for the model and the client.
fn parse_reason(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let hint = if text.contains("surrogate") || text.contains("unicode") || text.contains("UTF-8") {
        " (a string holds invalid UTF-8 or a lone UTF-16 surrogate: paths and \
         arguments must be valid Unicode text)"
    } else {
        ""
    };
    format!("the message is not valid JSON: {text}{hint}")
}

type Outgoing = (Vec<u8>, Option<oneshot::Sender<std::io::Result<()>>>);

/// Newline-delimited JSON-RPC over a byte stream, with a cap on the size of a
/// message, answers to bad input, and one writer task for every reply.
pub struct LineTransport<R> {
    read: BufReader<R>,
    line: Vec<u8>,
    max: usize,
    /// An oversized line being skipped: its first bytes and its length so far.
    oversized: Option<(Vec<u8>, usize)>,
    out: mpsc::UnboundedSender<Outgoing>,
}

impl<R: AsyncRead + Unpin + Send> LineTransport<R> {
    /// A transport reading `read` and writing `write`, taking messages of at
    /// most `max` bytes.
    pub fn new<W>(read: R, write: W, max: usize) -> Self
    where
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (tx, mut rx) = mpsc::unbounded_channel::<Outgoing>();
        tokio::spawn(async move {
            let mut write = write;
            let mut broken: Option<std::io::ErrorKind> = None;
            while let Some((bytes, ack)) = rx.recv().await {
                let r = match broken {
                    Some(kind) => Err(std::io::Error::from(kind)),
                    None => {
                        let r = async {
                            write.write_all(&bytes).await?;
                            write.flush().await
                        }
                        .await;
                        if let Err(e) = &r {
                            tracing::warn!("MCP output stream: {e}");
                            broken = Some(e.kind());
                        }
                        r
                    }
                };
                if let Some(ack) = ack {
                    let _ = ack.send(r);
                }
            }
        });
        LineTransport {
            read: BufReader::with_capacity(64 << 10, read),
            line: Vec::new(),
            max,
            oversized: None,
            out: tx,
        }
    }

    fn reply(&self, bytes: Option<Vec<u8>>) {
        if let Some(b) = bytes {
            let _ = self.out.send((b, None));
        }
    }

    /// Handles one complete line: a message for the service, or `None` when it
    /// was answered here (or ignored).
    fn parse(&self, raw: &[u8]) -> Option<RxJsonRpcMessage<RoleServer>> {
        let mut line = raw.strip_suffix(b"\n").unwrap_or(raw);
        line = line.strip_suffix(b"\r").unwrap_or(line);
        line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        let err = match serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(line) {
            Ok(JsonRpcMessage::Request(req)) => {
                // A protocol method whose params did not fit becomes a
                // custom request in the SDK, which would answer "method
                // not found": say what is wrong instead.
                if let ClientRequest::CustomRequest(c) = &req.request
                    && PROTOCOL_METHODS.contains(&c.method.as_str())
                {
                    let found = Salvaged {
                        id: serde_json::to_value(&req.id).ok(),
                        method: Some(c.method.clone()),
                    };
                    let reason = misfit_params(&c.method, c.params.as_ref());
                    self.reply(bad_input_reply(&found, INVALID_PARAMS, &reason));
                    return None;
                }
                return Some(JsonRpcMessage::Request(req));
            }
            Ok(m) => return Some(m),
            Err(e) => e,
        };
        match serde_json::from_slice::<Value>(line) {
            Ok(v) => {
                let found = Salvaged {
                    id: v.get("id").cloned(),
                    method: v.get("method").and_then(Value::as_str).map(str::to_string),
                };
                let is_request = v.get("id").is_some();
                if !is_request && v.get("method").is_some() {
                    // A notification the protocol does not know, or with bad
                    // params: nothing to answer.
                    tracing::debug!("ignoring notification that did not parse: {err}");
                    return None;
                }
                let (code, reason) = match &found.method {
                    Some(m) => (INVALID_PARAMS, format!("invalid params for {m:?}: {err}")),
                    None => (
                        INVALID_REQUEST,
                        format!("not a JSON-RPC 2.0 request: {err}"),
                    ),
                };
                self.reply(bad_input_reply(&found, code, &reason));
            }
            Err(e) => {
                let found = salvage(line);
                self.reply(bad_input_reply(&found, PARSE_ERROR, &parse_reason(&e)));
            }
        }
        None
    }

    /// Ends the skipping of an oversized line: answers it.
    fn finish_oversized(&mut self) {
        if let Some((prefix, total)) = self.oversized.take() {
            tracing::warn!("skipped a {total}-byte message: over the {} cap", self.max);
            let found = salvage(&prefix);
            let reason = format!(
                "the message is {total} bytes, more than the {} bytes a message may have",
                self.max
            );
            self.reply(bad_input_reply(&found, INVALID_REQUEST, &reason));
        }
    }

    /// Reads up to the next message. Cancel-safe: bytes read stay in `line`
    /// (or `oversized`) for the next call.
    async fn next(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            let (take, newline) = {
                let avail = match self.read.fill_buf().await {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!("MCP input stream: {e}");
                        return None;
                    }
                };
                if avail.is_empty() {
                    return None;
                }
                let nl = avail.iter().position(|b| *b == b'\n');
                let take = nl.map_or(avail.len(), |i| i + 1);
                let chunk = &avail[..take];
                if let Some((prefix, total)) = &mut self.oversized {
                    let room = SALVAGE_PREFIX.saturating_sub(prefix.len());
                    prefix.extend_from_slice(&chunk[..room.min(chunk.len())]);
                    *total += take;
                } else if self.line.len() + take > self.max {
                    let total = self.line.len() + take;
                    let mut prefix = std::mem::take(&mut self.line);
                    prefix.truncate(SALVAGE_PREFIX);
                    let room = SALVAGE_PREFIX.saturating_sub(prefix.len());
                    prefix.extend_from_slice(&chunk[..room.min(chunk.len())]);
                    self.oversized = Some((prefix, total));
                    // The line buffer may have grown large: give it back.
                    self.line = Vec::new();
                } else {
                    self.line.extend_from_slice(chunk);
                }
                (take, nl.is_some())
            };
            self.read.consume(take);
            if !newline {
                continue;
            }
            if self.oversized.is_some() {
                self.finish_oversized();
                continue;
            }
            let line = std::mem::take(&mut self.line);
            let msg = self.parse(&line);
            // Keep the allocation for the next line unless it was a big one.
            if line.capacity() <= (1 << 20) {
                self.line = line;
                self.line.clear();
            }
            if let Some(m) = msg {
                return Some(m);
            }
        }
    }
}

impl<R: AsyncRead + Unpin + Send + 'static> rmcp::transport::Transport<RoleServer>
    for LineTransport<R>
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let tx = self.out.clone();
        async move {
            let mut bytes = serde_json::to_vec(&item).map_err(std::io::Error::other)?;
            bytes.push(b'\n');
            let (ack, done) = oneshot::channel();
            tx.send((bytes, Some(ack)))
                .map_err(|_| std::io::Error::from(std::io::ErrorKind::BrokenPipe))?;
            done.await
                .map_err(|_| std::io::Error::from(std::io::ErrorKind::BrokenPipe))?
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleServer>>> + Send {
        self.next()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn salvage_finds_top_level_id_and_method_in_broken_lines() {
        let s = salvage(br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"arguments":{"path":"\udc80"}}}"#);
        assert_eq!(s.id, Some(json!(7)));
        assert_eq!(s.method.as_deref(), Some("tools/call"));
        // Nested ids and methods are not the request's.
        let s = salvage(br#"{"params":{"id":1,"method":"x"},"id":"a","method":"ping""#);
        assert_eq!(s.id, Some(json!("a")));
        assert_eq!(s.method.as_deref(), Some("ping"));
        // Cut short, non-UTF-8 bytes before the id.
        let mut line =
            b"{\"method\":\"tools/call\",\"x\":\"\xff\xfe\",\"id\":42,\"params\":{\"a\":\""
                .to_vec();
        line.extend(std::iter::repeat_n(b'a', 1000));
        let s = salvage(&line);
        assert_eq!(s.id, Some(json!(42)));
        // A number cut off at the end of the prefix is not taken.
        assert_eq!(salvage(br#"{"id":12"#).id, None);
        assert_eq!(salvage(b"[1,2]"), Salvaged::default());
        assert_eq!(salvage(b"garbage"), Salvaged::default());
        // An id that is an object is found but not valid as a request id.
        let s = salvage(br#"{"id":{"x":1},"method":"m","#);
        assert_eq!(s.id, None);
    }

    #[test]
    fn message_cap_follows_the_file_cap() {
        assert_eq!(message_cap(Some(1 << 20)), MIN_MESSAGE_BYTES);
        assert_eq!(message_cap(Some(50 << 20)), (101 << 20));
        assert_eq!(message_cap(None), 256 << 20);
        assert_eq!(message_cap(Some(u64::MAX)), MAX_MESSAGE_BYTES);
    }

    #[test]
    fn bad_tool_calls_get_a_tool_error_and_others_a_protocol_error() {
        let found = Salvaged {
            id: Some(json!(3)),
            method: Some("tools/call".into()),
        };
        let r: Value =
            serde_json::from_slice(&bad_input_reply(&found, PARSE_ERROR, "why").unwrap()).unwrap();
        assert_eq!(r["id"], 3);
        assert_eq!(r["result"]["isError"], true);
        assert!(
            r["result"]["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains("why")
        );
        let found = Salvaged {
            id: Some(json!("x")),
            method: Some("resources/read".into()),
        };
        let r: Value =
            serde_json::from_slice(&bad_input_reply(&found, INVALID_PARAMS, "why").unwrap())
                .unwrap();
        assert_eq!(r["id"], "x");
        assert_eq!(r["error"]["code"], INVALID_PARAMS);
        let r: Value = serde_json::from_slice(
            &bad_input_reply(&Salvaged::default(), PARSE_ERROR, "why").unwrap(),
        )
        .unwrap();
        assert!(r.get("id").is_none());
        assert_eq!(r["error"]["code"], PARSE_ERROR);
    }
}
