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
//!
//! The parts: [`serve`] and the message cap here; `handler` (the rmcp
//! handler over the toolbox); `transport` (the line transport and its flow
//! control); `salvage` (what bad input gets back).

use std::sync::Arc;
use std::time::Duration;

use rmcp::ServiceExt;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::tools::toolbox::Toolbox;

mod handler;
mod salvage;
mod transport;

pub use handler::{McpServer, mcp_result};
pub use transport::{Flusher, LineTransport, MAX_IN_FLIGHT};

/// Smallest cap on one incoming message (one line).
pub const MIN_MESSAGE_BYTES: usize = 16 << 20;
/// Largest cap on one incoming message.
pub const MAX_MESSAGE_BYTES: usize = 1 << 30;
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

#[cfg(test)]
mod tests {
    use super::salvage::{
        INVALID_PARAMS, PARSE_ERROR, Salvaged, bad_input_reply, salvage, too_many_values,
    };
    use super::*;
    use serde_json::{Value, json};

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
