//! The file tools' dispatch: a `file_*` call's arguments read and passed
//! to `crate::tools::fs`.

use serde_json::Value;

use super::args::{ArgResult, Args, MAX_LIST, MAX_SEARCH};
use super::fs::{self, FsError, FsPolicy};
use super::result::ToolResult;

pub(super) fn file_tool(
    name: &str,
    v: &Value,
    dirs: &crate::paths::AllowedDirs,
    policy: &FsPolicy,
) -> ArgResult<ToolResult> {
    let r: Result<ToolResult, FsError> = match name {
        "file_read" => {
            let a = Args::new(name, v, &["path", "offset", "limit"])?;
            fs::read(
                dirs,
                policy,
                a.req_str("path")?,
                a.u64("offset")?.unwrap_or(0),
                a.u64("limit")?,
            )
            .map(ToolResult::ok)
        }
        "file_write" => {
            let a = Args::new(name, v, &["path", "content", "append"])?;
            fs::write(
                dirs,
                policy,
                a.req_str("path")?,
                a.req_str("content")?.as_bytes(),
                a.bool("append")?,
            )
            .map(ToolResult::ok)
        }
        "file_list" => {
            let a = Args::new(name, v, &["path", "recursive"])?;
            fs::list(
                dirs,
                a.str("path")?.unwrap_or("."),
                a.bool("recursive")?,
                MAX_LIST,
            )
            .map(ToolResult::ok)
        }
        "file_stat" => {
            let a = Args::new(name, v, &["path"])?;
            fs::stat(dirs, a.req_str("path")?).map(|s| ToolResult {
                text: s.to_string(),
                structured: Some(s),
                ..ToolResult::ok("")
            })
        }
        "file_mkdir" => {
            let a = Args::new(name, v, &["path"])?;
            fs::mkdir(dirs, policy, a.req_str("path")?).map(ToolResult::ok)
        }
        "file_move" => {
            let a = Args::new(name, v, &["from", "to", "overwrite"])?;
            fs::rename(
                dirs,
                policy,
                a.req_str("from")?,
                a.req_str("to")?,
                a.bool("overwrite")?,
            )
            .map(ToolResult::ok)
        }
        "file_delete" => {
            let a = Args::new(name, v, &["path", "recursive"])?;
            fs::delete(dirs, policy, a.req_str("path")?, a.bool("recursive")?).map(ToolResult::ok)
        }
        "file_search" => {
            let a = Args::new(name, v, &["path", "glob", "text"])?;
            fs::search(
                dirs,
                policy,
                a.str("path")?.unwrap_or("."),
                a.str("glob")?,
                a.str("text")?,
                MAX_SEARCH,
            )
            .map(ToolResult::ok)
        }
        other => Ok(ToolResult::error(
            "unknown_tool",
            format!("unknown tool {other:?}"),
        )),
    };
    Ok(r.unwrap_or_else(ToolResult::from))
}
