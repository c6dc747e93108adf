//! A call's arguments, checked against the names and types its tool takes,
//! with the bounds every call is held to (arguments, path lengths, the
//! length of a refusal's text).

use serde_json::{Map, Value};

use super::result::ToolResult;

/// Most entries `file_list` returns.
pub(super) const MAX_LIST: usize = 2000;
/// Most results `file_search` returns.
pub(super) const MAX_SEARCH: usize = 500;
/// Most arguments a command line may have.
pub(super) const MAX_ARGS: usize = 4096;
/// Arguments that name a path, and the longest such path (Linux's PATH_MAX).
pub(super) const PATH_ARGS: [&str; 4] = ["path", "from", "to", "cwd"];
pub(super) const MAX_PATH_ARG: usize = 4096;
/// Longest text of a refusal (unknown tool, bad arguments, denied): it may
/// quote what the call sent.
pub(super) const MAX_REFUSAL_TEXT: usize = 4096;

/// Arguments of one call, checked against the names a tool takes.
pub(super) struct Args<'a> {
    pub(super) tool: &'a str,
    pub(super) map: Map<String, Value>,
}

pub(super) type ArgResult<T> = Result<T, Box<ToolResult>>;

impl<'a> Args<'a> {
    pub(super) fn new(tool: &'a str, v: &Value, known: &[&str]) -> ArgResult<Self> {
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

    pub(super) fn bad(&self, key: &str, want: &str, got: &Value) -> ToolResult {
        ToolResult::error(
            "invalid_request",
            format!(
                "{}: argument {key:?} must be {want}, not {}",
                self.tool,
                kind_of(got)
            ),
        )
    }

    pub(super) fn str(&self, key: &str) -> ArgResult<Option<&str>> {
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

    pub(super) fn req_str(&self, key: &str) -> ArgResult<&str> {
        self.str(key)?.ok_or_else(|| {
            Box::new(ToolResult::error(
                "invalid_request",
                format!("{}: argument {key:?} is required", self.tool),
            ))
        })
    }

    pub(super) fn bool(&self, key: &str) -> ArgResult<bool> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(v) => Err(Box::new(self.bad(key, "true or false", v))),
        }
    }

    pub(super) fn u64(&self, key: &str) -> ArgResult<Option<u64>> {
        match self.map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_u64()
                .map(Some)
                .ok_or_else(|| Box::new(self.bad(key, "a non-negative integer", v))),
        }
    }

    pub(super) fn strings(&self, key: &str) -> ArgResult<Option<Vec<String>>> {
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
