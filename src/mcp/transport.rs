//! toolhost's line transport for rmcp: newline-delimited JSON-RPC read with
//! a cap per line and flow control (`Flow`: bytes queued out and in flight,
//! requests at once), every reply written by one task (`Flusher`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::RoleServer;
use rmcp::model::{ClientNotification, ClientRequest, JsonRpcMessage, RequestId, ServerResult};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{Notify, mpsc, oneshot};

use super::salvage::{
    CAP_BYTES_PER_VALUE, INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, PROTOCOL_METHODS,
    SALVAGE_PREFIX, Salvaged, bad_input_reply, misfit_params, parse_reason, salvage,
    too_many_values, valid_id,
};

pub(super) type Outgoing = (Vec<u8>, Option<oneshot::Sender<std::io::Result<()>>>);

/// Replies queued for the client beyond which no more input is read (a client
/// that stops reading its stdout stops the server taking work).
pub(super) const OUT_BUDGET: usize = 16 << 20;
/// Bytes of requests being served beyond which no more input is read (each
/// request's arguments stay in memory, in a few copies, until it is answered).
pub(super) const IN_FLIGHT_BUDGET: usize = 64 << 20;
/// Requests served at once; more wait, unread, in the client's pipe. Bounds
/// the replies being produced (each at most the output cap) beyond the queue.
pub const MAX_IN_FLIGHT: usize = 16;

/// What the reader, the writer and `send` share: the flow-control counters.
#[derive(Default)]
pub(super) struct Flow {
    /// Bytes queued to the writer and not yet written.
    pub(super) queued: AtomicUsize,
    /// Requests handed to the service and not yet answered: id (as JSON
    /// text) -> bytes.
    pub(super) in_flight: Mutex<HashMap<String, usize>>,
    pub(super) in_flight_bytes: AtomicUsize,
    /// Woken whenever a counter goes down.
    pub(super) changed: Notify,
    /// A session is open: the server has answered a request other than a
    /// ping (an `initialize`, or a request of a session without one).
    pub(super) live: AtomicBool,
}

impl Flow {
    pub(super) fn start(&self, id: &RequestId, bytes: usize) {
        let key = serde_json::to_string(id).unwrap_or_default();
        let mut m = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        *m.entry(key).or_default() += bytes;
        self.in_flight_bytes.fetch_add(bytes, Ordering::SeqCst);
    }

    pub(super) fn end(&self, id: &RequestId) {
        let key = serde_json::to_string(id).unwrap_or_default();
        let mut m = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(bytes) = m.remove(&key) {
            self.in_flight_bytes.fetch_sub(bytes, Ordering::SeqCst);
            self.changed.notify_waiters();
        }
    }

    pub(super) fn contains(&self, id: &RequestId) -> bool {
        let key = serde_json::to_string(id).unwrap_or_default();
        let m = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        m.contains_key(&key)
    }

    pub(super) fn pending(&self) -> usize {
        self.in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    pub(super) fn over_budget(&self) -> bool {
        self.queued.load(Ordering::SeqCst) > OUT_BUDGET
            || self.in_flight_bytes.load(Ordering::SeqCst) > IN_FLIGHT_BUDGET
            || self.pending() >= MAX_IN_FLIGHT
    }

    /// Waits until `cond` is false (re-checked whenever a counter goes down).
    pub(super) async fn wait_while(&self, cond: impl Fn(&Flow) -> bool) {
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
    pub(super) read: BufReader<R>,
    pub(super) line: Vec<u8>,
    pub(super) max: usize,
    /// An oversized line being skipped: its first bytes and its length so far.
    pub(super) oversized: Option<(Vec<u8>, usize)>,
    pub(super) out: mpsc::UnboundedSender<Outgoing>,
    pub(super) flow: Arc<Flow>,
    /// Whether an `initialize` request has gone to the service: before it,
    /// notifications and responses are dropped (the SDK would end the session).
    pub(super) initialized: bool,
    /// How long the end of input waits for requests in flight.
    pub(super) drain: Duration,
    /// When the end of input stops waiting (set when it is reached).
    pub(super) drain_until: Option<tokio::time::Instant>,
    pub(super) ended: bool,
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

    pub(super) fn reply(&self, bytes: Option<Vec<u8>>) {
        if let Some(b) = bytes {
            self.flow.queued.fetch_add(b.len(), Ordering::SeqCst);
            let _ = self.out.send((b, None));
        }
    }

    /// Handles one complete line (its newline removed): a message for the
    /// service, or `None` when it was answered here (or ignored).
    pub(super) fn parse(&mut self, raw: &[u8]) -> Option<RxJsonRpcMessage<RoleServer>> {
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
    pub(super) fn finish_oversized(&mut self) {
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
    pub(super) async fn at_end(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
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
    pub(super) async fn next(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
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
