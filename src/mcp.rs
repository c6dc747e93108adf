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
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::FutureExt as _;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientNotification, ClientRequest,
    ContentBlock, Implementation, InitializeResult, JsonRpcMessage, ListToolsResult, MetaObject,
    PaginatedRequestParams, RequestId, ServerCapabilities, ServerConfig, ServerResult, Tool,
    ToolAnnotations,
};
use rmcp::service::{RequestContext, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{Notify, mpsc, oneshot};

use crate::policy::{Capability, Level};
use crate::tools::toolbox::{ToolResult, ToolSpec, Toolbox, kind_of};

/// Smallest cap on one incoming message (one line).
pub const MIN_MESSAGE_BYTES: usize = 16 << 20;
/// Largest cap on one incoming message.
pub const MAX_MESSAGE_BYTES: usize = 1 << 30;
/// How much of an oversized line is kept to find its id.
const SALVAGE_PREFIX: usize = 64 << 10;

/// JSON values one incoming message may hold, per byte of the message cap:
/// parsed, each value costs the SDK's types some 200 bytes (one 47 MiB line
/// of 25 million numbers took 4.75 GB; 827,000 values 192 MiB), so a message
/// may hold one value per 256 bytes of the cap (about 400,000 under the
/// default cap): its parse then takes about the cap again at most. A file's
/// content is one value, however long.
const CAP_BYTES_PER_VALUE: usize = 256;

/// Whether `line` holds more than `limit` JSON values (counted as the commas,
/// colons and opening brackets outside strings, plus one): one pass, no
/// allocation.
fn too_many_values(line: &[u8], limit: usize) -> bool {
    let mut n = 1usize;
    let mut in_string = false;
    let mut escaped = false;
    for &b in line {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b',' | b':' | b'[' | b'{' => {
                n += 1;
                if n > limit {
                    return true;
                }
            }
            _ => {}
        }
    }
    false
}

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
    // A call in flight at the end of input ends by its own timeout; then
    // its reply is written.
    let drain = toolbox.sandbox().config().timeout + Duration::from_secs(10);
    let transport = LineTransport::new(read, write, max, drain);
    let flusher = transport.flusher();
    let server = McpServer::new(toolbox);
    let result = match server.serve(transport).await {
        Ok(running) => running
            .waiting()
            .await
            .map(|reason| tracing::info!("MCP session ended: {reason:?}"))
            .map_err(anyhow::Error::from),
        Err(e) => Err(anyhow::anyhow!("MCP session did not start: {e}")),
    };
    // A client that stopped reading does not keep the server forever.
    if tokio::time::timeout(drain, flusher.flush()).await.is_err() {
        tracing::warn!("the client did not read the last replies within {drain:?}");
    }
    result
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
        // JSON-RPC 2.0: an id that cannot be read is null (clients reject a
        // reply without one).
        (id, _) => json!({
            "jsonrpc": "2.0",
            "id": id.cloned().unwrap_or(Value::Null),
            "error": {"code": code, "message": reason},
        }),
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
                format!("\"arguments\" must be a JSON object, not {}", kind_of(a))
            }
            (Some(Value::String(_)), _) => "the params do not fit tools/call".to_string(),
            _ => "\"name\" must be the tool's name, as a string".to_string(),
        },
        ("tools/call", _) => "params must be an object with \"name\" and \"arguments\"".into(),
        _ => format!("the params do not fit {method}"),
    };
    format!("invalid params for {method}: {detail}")
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

/// Replies queued for the client beyond which no more input is read (a client
/// that stops reading its stdout stops the server taking work).
const OUT_BUDGET: usize = 16 << 20;
/// Bytes of requests being served beyond which no more input is read (each
/// request's arguments stay in memory, in a few copies, until it is answered).
const IN_FLIGHT_BUDGET: usize = 64 << 20;
/// Requests served at once; more wait, unread, in the client's pipe. Bounds
/// the replies being produced (each at most the output cap) beyond the queue.
pub const MAX_IN_FLIGHT: usize = 16;

/// What the reader, the writer and `send` share: the flow-control counters.
#[derive(Default)]
struct Flow {
    /// Bytes queued to the writer and not yet written.
    queued: AtomicUsize,
    /// Requests handed to the service and not yet answered: id (as JSON
    /// text) -> bytes.
    in_flight: Mutex<HashMap<String, usize>>,
    in_flight_bytes: AtomicUsize,
    /// Woken whenever a counter goes down.
    changed: Notify,
    /// A session is open: the server has answered a request other than a
    /// ping (an `initialize`, or a request of a session without one).
    live: AtomicBool,
}

impl Flow {
    fn start(&self, id: &RequestId, bytes: usize) {
        let key = serde_json::to_string(id).unwrap_or_default();
        let mut m = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        *m.entry(key).or_default() += bytes;
        self.in_flight_bytes.fetch_add(bytes, Ordering::SeqCst);
    }

    fn end(&self, id: &RequestId) {
        let key = serde_json::to_string(id).unwrap_or_default();
        let mut m = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(bytes) = m.remove(&key) {
            self.in_flight_bytes.fetch_sub(bytes, Ordering::SeqCst);
            self.changed.notify_waiters();
        }
    }

    fn contains(&self, id: &RequestId) -> bool {
        let key = serde_json::to_string(id).unwrap_or_default();
        let m = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        m.contains_key(&key)
    }

    fn pending(&self) -> usize {
        self.in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    fn over_budget(&self) -> bool {
        self.queued.load(Ordering::SeqCst) > OUT_BUDGET
            || self.in_flight_bytes.load(Ordering::SeqCst) > IN_FLIGHT_BUDGET
            || self.pending() >= MAX_IN_FLIGHT
    }

    /// Waits until `cond` is false (re-checked whenever a counter goes down).
    async fn wait_while(&self, cond: impl Fn(&Flow) -> bool) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if !cond(self) {
                return;
            }
            changed.await;
        }
    }
}

/// Waits until everything queued before it has been written.
#[derive(Clone)]
pub struct Flusher(mpsc::UnboundedSender<Outgoing>);

impl Flusher {
    /// Returns when every reply queued so far is written (or the stream broke).
    pub async fn flush(&self) {
        let (ack, done) = oneshot::channel();
        if self.0.send((Vec::new(), Some(ack))).is_ok() {
            let _ = done.await;
        }
    }
}

/// Newline-delimited JSON-RPC over a byte stream, with a cap on the size of a
/// message, answers to bad input, flow control, and one writer task for every
/// reply.
///
/// Flow control: no more input is read while more than 16 MiB of replies wait
/// for a client that does not read them, while [`MAX_IN_FLIGHT`] requests are
/// being served, or while the requests being served hold more than 64 MiB. At the end of input, requests in flight are answered
/// (up to `drain`) before the session ends, and a last line without a newline
/// is still taken.
pub struct LineTransport<R> {
    read: BufReader<R>,
    line: Vec<u8>,
    max: usize,
    /// An oversized line being skipped: its first bytes and its length so far.
    oversized: Option<(Vec<u8>, usize)>,
    out: mpsc::UnboundedSender<Outgoing>,
    flow: Arc<Flow>,
    /// Whether an `initialize` request has gone to the service: before it,
    /// notifications and responses are dropped (the SDK would end the session).
    initialized: bool,
    /// How long the end of input waits for requests in flight.
    drain: Duration,
    /// When the end of input stops waiting (set when it is reached).
    drain_until: Option<tokio::time::Instant>,
    ended: bool,
}

impl<R: AsyncRead + Unpin + Send> LineTransport<R> {
    /// A transport reading `read` and writing `write`, taking messages of at
    /// most `max` bytes, and waiting up to `drain` at the end of input for
    /// the answers to requests in flight.
    pub fn new<W>(read: R, write: W, max: usize, drain: Duration) -> Self
    where
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let flow = Arc::new(Flow::default());
        let (tx, mut rx) = mpsc::unbounded_channel::<Outgoing>();
        let writer_flow = Arc::clone(&flow);
        tokio::spawn(async move {
            let mut write = write;
            let mut broken: Option<std::io::ErrorKind> = None;
            while let Some((bytes, ack)) = rx.recv().await {
                let r = match broken {
                    Some(kind) => Err(std::io::Error::from(kind)),
                    None if bytes.is_empty() => Ok(()),
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
                writer_flow.queued.fetch_sub(bytes.len(), Ordering::SeqCst);
                writer_flow.changed.notify_waiters();
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
            flow,
            initialized: false,
            drain,
            drain_until: None,
            ended: false,
        }
    }

    /// A handle that waits for the replies queued so far to be written.
    pub fn flusher(&self) -> Flusher {
        Flusher(self.out.clone())
    }

    fn reply(&self, bytes: Option<Vec<u8>>) {
        if let Some(b) = bytes {
            self.flow.queued.fetch_add(b.len(), Ordering::SeqCst);
            let _ = self.out.send((b, None));
        }
    }

    /// Handles one complete line (its newline removed): a message for the
    /// service, or `None` when it was answered here (or ignored).
    fn parse(&mut self, raw: &[u8]) -> Option<RxJsonRpcMessage<RoleServer>> {
        let mut line = raw.strip_suffix(b"\r").unwrap_or(raw);
        line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        let limit = (self.max / CAP_BYTES_PER_VALUE).max(1 << 16);
        if too_many_values(line, limit) {
            let found = salvage(line);
            let reason = format!(
                "the message holds more than {limit} JSON values (the server's limit for one message, from its {} MiB message cap); send fewer",
                self.max >> 20
            );
            self.reply(bad_input_reply(&found, INVALID_REQUEST, &reason));
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
                if matches!(req.request, ClientRequest::InitializeRequest(_)) {
                    self.initialized = true;
                }
                if self.flow.contains(&req.id) {
                    // The SDK would run both and answer one: refused.
                    let found = Salvaged {
                        id: serde_json::to_value(&req.id).ok(),
                        method: None,
                    };
                    let reason = "the id is already used by a request in flight";
                    self.reply(bad_input_reply(&found, INVALID_REQUEST, reason));
                    return None;
                }
                self.flow.start(&req.id, line.len());
                return Some(JsonRpcMessage::Request(req));
            }
            Ok(m) if !self.initialized && !self.flow.live.load(Ordering::SeqCst) => {
                // The SDK ends a session whose first message is not a request.
                tracing::debug!("ignoring a message before initialize: {m:?}");
                return None;
            }
            Ok(JsonRpcMessage::Notification(n)) => {
                if let ClientNotification::CancelledNotification(c) = &n.notification
                    && let Some(id) = &c.params.request_id
                {
                    // A cancelled request may never be answered.
                    self.flow.end(id);
                }
                return Some(JsonRpcMessage::Notification(n));
            }
            Ok(m) => return Some(m),
            Err(e) => e,
        };
        match serde_json::from_slice::<Value>(line) {
            Ok(v) => {
                let id = v.get("id");
                let method = v.get("method").and_then(Value::as_str);
                if id.is_none() && (method.is_some() || v.get("jsonrpc") == Some(&json!("2.0"))) {
                    // A notification (or a response) that does not parse:
                    // nothing to answer.
                    tracing::debug!("ignoring a message that did not parse: {err}");
                    return None;
                }
                let found = Salvaged {
                    id: id.cloned(),
                    method: method.map(str::to_string),
                };
                let (code, reason) = if !v.is_object() || v.get("jsonrpc") != Some(&json!("2.0")) {
                    (
                        INVALID_REQUEST,
                        "not a JSON-RPC 2.0 request (\"jsonrpc\": \"2.0\" is required)".to_string(),
                    )
                } else if !id.is_some_and(valid_id) {
                    (
                        INVALID_REQUEST,
                        "the request id must be a string or an integer".to_string(),
                    )
                } else if let Some(m) = method {
                    (INVALID_PARAMS, format!("invalid params for {m:?}: {err}"))
                } else {
                    (
                        INVALID_REQUEST,
                        format!("not a JSON-RPC 2.0 request: {err}"),
                    )
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

    /// The end of input: the last line without a newline is taken; then the
    /// requests in flight are answered (up to `drain`) before the session ends.
    async fn at_end(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        if !self.ended {
            self.ended = true;
            self.finish_oversized();
            let line = std::mem::take(&mut self.line);
            if let Some(m) = self.parse(&line) {
                return Some(m);
            }
        }
        let pending = self.flow.pending();
        if pending > 0 {
            tracing::info!("end of input: waiting for {pending} request(s) in flight");
            // One deadline from the end of input: this wait is restarted
            // whenever the service drops and re-polls `receive`.
            let until = *self
                .drain_until
                .get_or_insert_with(|| tokio::time::Instant::now() + self.drain);
            let flow = Arc::clone(&self.flow);
            let drained =
                tokio::time::timeout_at(until, flow.wait_while(|f| f.pending() > 0)).await;
            if drained.is_err() {
                tracing::warn!(
                    "end of input: {} request(s) still in flight after {:?}",
                    self.flow.pending(),
                    self.drain
                );
            }
        }
        None
    }

    /// Reads up to the next message. Cancel-safe: bytes read stay in `line`
    /// (or `oversized`) for the next call, and the waits change no state.
    async fn next(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            if self.ended {
                return self.at_end().await;
            }
            if self.flow.over_budget() {
                let flow = Arc::clone(&self.flow);
                flow.wait_while(Flow::over_budget).await;
            }
            let (take, newline) = {
                let avail = match self.read.fill_buf().await {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!("MCP input stream: {e}");
                        &[]
                    }
                };
                if avail.is_empty() {
                    return self.at_end().await;
                }
                let nl = avail.iter().position(|b| *b == b'\n');
                let take = nl.map_or(avail.len(), |i| i + 1);
                // The newline does not count against the cap.
                let chunk = &avail[..nl.unwrap_or(take)];
                if let Some((prefix, total)) = &mut self.oversized {
                    let room = SALVAGE_PREFIX.saturating_sub(prefix.len());
                    prefix.extend_from_slice(&chunk[..room.min(chunk.len())]);
                    *total += chunk.len();
                } else if self.line.len() + chunk.len() > self.max {
                    let total = self.line.len() + chunk.len();
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
        let flow = Arc::clone(&self.flow);
        async move {
            let answered = match &item {
                JsonRpcMessage::Response(r) => {
                    if !matches!(r.result, ServerResult::EmptyResult(_)) {
                        flow.live.store(true, Ordering::SeqCst);
                    }
                    Some(r.id.clone())
                }
                JsonRpcMessage::Error(e) => e.id.clone(),
                _ => None,
            };
            let bytes = serde_json::to_vec(&item).map_err(std::io::Error::other);
            // Answered once queued (the write's own backlog is `queued`), or
            // when the answer cannot be written at all.
            if let Some(id) = &answered {
                flow.end(id);
            }
            let mut bytes = bytes?;
            bytes.push(b'\n');
            flow.queued.fetch_add(bytes.len(), Ordering::SeqCst);
            let (ack, done) = oneshot::channel();
            let sent = tx.send((bytes, Some(ack)));
            sent.map_err(|_| std::io::Error::from(std::io::ErrorKind::BrokenPipe))?;
            done.await
                .map_err(|_| std::io::Error::from(std::io::ErrorKind::BrokenPipe))?
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleServer>>> + Send {
        self.next()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.flusher().flush().await;
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
    fn values_are_counted_outside_strings() {
        assert!(!too_many_values(br#"{"a":[1,2,3]}"#, 6));
        assert!(too_many_values(br#"{"a":[1,2,3,4]}"#, 6));
        // Commas, colons and brackets in strings (escaped quotes too) are text.
        assert!(!too_many_values(br#"{"a":"x,y:[{\",,,"}"#, 3));
        assert!(too_many_values(
            &[b"[".as_slice(), &b"0,".repeat(100)].concat(),
            100
        ));
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
        assert_eq!(r["id"], Value::Null);
        assert_eq!(r["error"]["code"], PARSE_ERROR);
    }
}
