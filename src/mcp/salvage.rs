//! Bad input, answered: what can be read of a line that did not parse (its
//! id and method, `salvage`), the JSON-RPC error it gets, and the count of
//! values that bounds what one message may cost to parse.

use serde_json::{Value, json};

use crate::tools::toolbox::kind_of;

/// How much of an oversized line is kept to find its id.
pub(super) const SALVAGE_PREFIX: usize = 64 << 10;

/// JSON values one incoming message may hold, per byte of the message cap:
/// parsed, each value costs the SDK's types some 200 bytes (one 47 MiB line
/// of 25 million numbers took 4.75 GB; 827,000 values 192 MiB), so a message
/// may hold one value per 256 bytes of the cap (about 400,000 under the
/// default cap): its parse then takes about the cap again at most. A file's
/// content is one value, however long.
pub(super) const CAP_BYTES_PER_VALUE: usize = 256;

/// Whether `line` holds more than `limit` JSON values (counted as the commas,
/// colons and opening brackets outside strings, plus one): one pass, no
/// allocation.
pub(super) fn too_many_values(line: &[u8], limit: usize) -> bool {
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
pub(super) const PARSE_ERROR: i64 = -32700;
pub(super) const INVALID_REQUEST: i64 = -32600;
pub(super) const INVALID_PARAMS: i64 = -32602;

/// What can be read of a request that did not parse: its id and method.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Salvaged {
    pub(super) id: Option<Value>,
    pub(super) method: Option<String>,
}

/// Finds the top-level `"id"` and `"method"` of a JSON object in `line`, which
/// may be cut short, not UTF-8, or otherwise broken. Only values that are
/// valid JSON on their own are taken.
pub(super) fn salvage(line: &[u8]) -> Salvaged {
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
pub(super) fn valid_id(v: &Value) -> bool {
    v.is_string() || v.as_i64().is_some()
}

/// The reply to a line that is not a message the server can handle: a tool
/// error result for a `tools/call` with an id, else a JSON-RPC error (with the
/// id when known).
pub(super) fn bad_input_reply(found: &Salvaged, code: i64, reason: &str) -> Option<Vec<u8>> {
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
pub(super) const PROTOCOL_METHODS: [&str; 13] = [
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
pub(super) fn misfit_params(method: &str, params: Option<&Value>) -> String {
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
pub(super) fn parse_reason(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let hint = if text.contains("surrogate") || text.contains("unicode") || text.contains("UTF-8") {
        " (a string holds invalid UTF-8 or a lone UTF-16 surrogate: paths and \
         arguments must be valid Unicode text)"
    } else {
        ""
    };
    format!("the message is not valid JSON: {text}{hint}")
}
