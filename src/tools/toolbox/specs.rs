//! The built-in tools as the model sees them: name, description, JSON
//! Schema of the input, permission level and capabilities.

use serde_json::{Value, json};

use super::result::{ToolKind, ToolSpec};
use crate::policy::{Capability, Level, Permission};

pub(super) fn schema(properties: Value, required: &[&str]) -> Value {
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

/// The built-in tools: name, description, schema, permission.
pub(super) fn builtins(allow_strings: bool) -> Vec<ToolSpec> {
    use Capability::*;
    let path = json!({"type": "string", "description": "relative to the workspace, or absolute inside an allowed dir"});
    let spec =
        |name: &str, description: &str, input_schema: Value, level, caps: &[Capability]| ToolSpec {
            name: name.into(),
            description: description.into(),
            input_schema,
            permission: Permission::new(level, caps),
            kind: ToolKind::Builtin,
        };
    let shell_desc = if allow_strings {
        "Run an allowed program: `args` as a list ([program, arg, ...]; the program a bare name on the allowlist), or `command` as one string (no shell metacharacters). No shell interprets it."
    } else {
        "Run an allowed program: `args` as a list ([program, arg, ...]; the program a bare name on the allowlist). No shell interprets it."
    };
    let mut shell_props = json!({
        "args": {"type": "array", "items": {"type": "string"}, "description": "program and arguments"},
        "cwd": path,
        "stdin": {"type": "string", "description": "text for standard input"},
    });
    if allow_strings {
        shell_props["command"] =
            json!({"type": "string", "description": "a command line, split like a shell would"});
    }
    vec![
        spec(
            "shell",
            shell_desc,
            schema(shell_props, &[]),
            Level::Dangerous,
            &[Shell, Filesystem],
        ),
        spec(
            "file_read",
            "Read a text file: `limit` lines from line `offset` (0-based). Binary files are reported, not returned.",
            schema(
                json!({"path": path, "offset": {"type": "integer", "minimum": 0}, "limit": {"type": "integer", "minimum": 0}}),
                &["path"],
            ),
            Level::Safe,
            &[Filesystem],
        ),
        spec(
            "file_write",
            "Write a text file (replacing it atomically, or appending), creating parent directories.",
            schema(
                json!({"path": path, "content": {"type": "string"}, "append": {"type": "boolean"}}),
                &["path", "content"],
            ),
            Level::Cautious,
            &[Filesystem],
        ),
        spec(
            "file_list",
            "List a directory (`name/` for directories, `name@` for symlinks, `name<TAB>size` for files).",
            schema(json!({"path": path, "recursive": {"type": "boolean"}}), &[]),
            Level::Safe,
            &[Filesystem],
        ),
        spec(
            "file_stat",
            "Type, size, read-only flag and modification time of a path.",
            schema(json!({"path": path}), &["path"]),
            Level::Safe,
            &[Filesystem],
        ),
        spec(
            "file_mkdir",
            "Create a directory and its parents.",
            schema(json!({"path": path}), &["path"]),
            Level::Cautious,
            &[Filesystem],
        ),
        spec(
            "file_move",
            "Move or rename a file or directory within the sandbox.",
            schema(
                json!({"from": path, "to": path, "overwrite": {"type": "boolean"}}),
                &["from", "to"],
            ),
            Level::Cautious,
            &[Filesystem],
        ),
        spec(
            "file_delete",
            "Delete a file, a symlink, or a directory (non-empty only with `recursive`).",
            schema(
                json!({"path": path, "recursive": {"type": "boolean"}}),
                &["path"],
            ),
            Level::Cautious,
            &[Filesystem],
        ),
        spec(
            "file_search",
            "Find files under `path` (default: the workspace) by name `glob` (*, ?, [a-z]) and/or lines containing `text`.",
            schema(
                json!({"path": path, "glob": {"type": "string"}, "text": {"type": "string"}}),
                &[],
            ),
            Level::Safe,
            &[Filesystem],
        ),
    ]
}
