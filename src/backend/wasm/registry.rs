//! The WASI tool registry: where a tool is found by name.
//!
//! Invariant: a registered tool is a `NAME.wasm` file directly inside a
//! configured tool dir (or the built-in collection), opened through a handle on
//! that dir, or one of the built-in tools carried in the binary
//! ([`crate::backend::wasm::builtin`]); names are plain (`[A-Za-z0-9._-]`, no path), so
//! a name can never reach outside the tool dirs.

use std::path::PathBuf;
use std::sync::Arc;

use cap_std::ambient_authority;
use cap_std::fs::Dir;

use super::builtin;
use crate::config::WasmConfig;
use crate::plan::{ToolFile, ToolSource};

/// Custom section in which a tool describes itself in one line.
pub const DESCRIPTION_SECTION: &str = "toolhost-description";

/// The bytes of `name` under `dir` if it is a regular file. Opened without
/// blocking: a FIFO named `*.wasm` must not hold the caller in open(2).
fn read_regular(dir: &cap_std::fs::Dir, name: &str) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut opts = cap_std::fs::OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    cap_std::fs::OpenOptionsExt::custom_flags(&mut opts, libc::O_NONBLOCK);
    let mut f = dir.open_with(name, &opts).ok()?;
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

/// A listing entry of `toolhost tools`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ToolInfo {
    /// Name to call it by.
    pub name: String,
    /// One line, from the tool's `toolhost-description` custom section.
    pub description: String,
    /// Where it was found (`builtin:NAME.wasm` for a built-in tool).
    pub path: PathBuf,
    /// Whether it is one of the built-in tools carried in the binary.
    pub builtin: bool,
    /// Whether it is a WASI component (a preview-2 or preview-3 command
    /// component, or a typed tool of the `toolhost:tool` world) rather than a
    /// preview-1 module.
    pub component: bool,
    /// The WASI preview it is built for: `"p1"` (a module), `"p2"` or `"p3"`
    /// (a component; see [`wasi_preview`]).
    pub wasi: &'static str,
}

/// The WASI preview of a tool's bytes: `"p1"` for a core module, `"p3"` for a
/// component that exports or imports a `wasi:` interface at version 0.3 (a
/// preview-3 command exports `wasi:cli/run@0.3.x`), else `"p2"`.
pub fn wasi_preview(wasm: &[u8]) -> &'static str {
    if !wasmparser::Parser::is_component(wasm) {
        return "p1";
    }
    let p3 = |name: &str| name.starts_with("wasi:") && name.contains("@0.3");
    // Only the outer component's own sections: those of nested modules and
    // components (between their section and their `End`) are not looked at.
    let mut depth = 0usize;
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        match payload {
            Err(_) => return "p2",
            Ok(wasmparser::Payload::ComponentImportSection(r)) if depth == 0 => {
                if r.into_iter().flatten().any(|i| p3(i.name.name)) {
                    return "p3";
                }
            }
            Ok(wasmparser::Payload::ComponentExportSection(r)) if depth == 0 => {
                if r.into_iter().flatten().any(|e| p3(e.name.name)) {
                    return "p3";
                }
            }
            Ok(wasmparser::Payload::ModuleSection { .. })
            | Ok(wasmparser::Payload::ComponentSection { .. }) => depth += 1,
            Ok(wasmparser::Payload::End(_)) => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => return "p2",
            },
            Ok(_) => {}
        }
    }
    "p2"
}

/// Tool dirs, searched in order, then the built-in collection.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    dirs: Vec<(PathBuf, Arc<Dir>)>,
    /// Whether the embedded built-in tools are searched after `dirs`.
    embedded: bool,
}

/// A dir that stands in for the embedded built-in collection:
/// `$TOOLHOST_BUILTIN_TOOLS` of toolhost's own environment, when set.
pub fn builtin_dir_override() -> Option<PathBuf> {
    std::env::var_os("TOOLHOST_BUILTIN_TOOLS").map(PathBuf::from)
}

/// The host path shown for a built-in tool.
fn builtin_path(name: &str) -> PathBuf {
    PathBuf::from(format!("builtin:{name}.wasm"))
}

/// Whether `name` can be a registered tool's name.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

impl Registry {
    /// Opens the configured tool dirs. A configured dir that cannot be opened is
    /// an error; a missing built-in collection is not (it is logged).
    ///
    /// # Ambient Authority
    /// Opens operator-configured host paths.
    pub fn open(config: &WasmConfig) -> std::io::Result<Self> {
        let mut dirs = Vec::new();
        for d in &config.tool_dirs {
            let dir = Dir::open_ambient_dir(d, ambient_authority()).map_err(|e| {
                std::io::Error::new(e.kind(), format!("wasm tool dir {}: {e}", d.display()))
            })?;
            dirs.push((d.clone(), Arc::new(dir)));
        }
        let mut embedded = false;
        if config.builtin_tools {
            match builtin_dir_override() {
                Some(d) => match Dir::open_ambient_dir(&d, ambient_authority()) {
                    Ok(dir) => dirs.push((d, Arc::new(dir))),
                    Err(e) => tracing::warn!(
                        "built-in wasm tools at {} ($TOOLHOST_BUILTIN_TOOLS): {e}",
                        d.display()
                    ),
                },
                None => embedded = true,
            }
        }
        Ok(Registry { dirs, embedded })
    }

    /// Finds a tool by name.
    pub fn find(&self, name: &str) -> Option<ToolFile> {
        if !valid_name(name) {
            return None;
        }
        let file = format!("{name}.wasm");
        let found = self.dirs.iter().find_map(|(path, dir)| {
            let meta = dir.metadata(&file).ok()?;
            meta.is_file().then(|| ToolFile {
                name: name.to_string(),
                source: ToolSource::File {
                    dir: dir.clone(),
                    rel: PathBuf::from(&file),
                    stamp: None,
                },
                host_path: path.join(&file),
            })
        });
        found.or_else(|| {
            let bytes = self.embedded.then(|| builtin::get(name)).flatten()?;
            Some(ToolFile {
                name: name.to_string(),
                source: ToolSource::Builtin(bytes),
                host_path: builtin_path(name),
            })
        })
    }

    /// Every tool, first occurrence of each name, sorted by name.
    pub fn list(&self) -> Vec<ToolInfo> {
        let mut out: Vec<ToolInfo> = Vec::new();
        for (path, dir) in &self.dirs {
            let Ok(entries) = dir.entries() else { continue };
            for e in entries.flatten() {
                let fname = e.file_name().to_string_lossy().into_owned();
                let Some(name) = fname.strip_suffix(".wasm") else {
                    continue;
                };
                if !valid_name(name) || out.iter().any(|t| t.name == name) {
                    continue;
                }
                let Some(bytes) = read_regular(dir, &fname) else {
                    continue;
                };
                out.push(ToolInfo {
                    name: name.to_string(),
                    description: describe(&bytes).unwrap_or_default(),
                    path: path.join(&fname),
                    builtin: false,
                    component: wasmparser::Parser::is_component(&bytes),
                    wasi: wasi_preview(&bytes),
                });
            }
        }
        if self.embedded {
            for (name, bytes) in builtin::all() {
                if out.iter().any(|t| t.name == name) {
                    continue;
                }
                out.push(ToolInfo {
                    name: name.to_string(),
                    description: describe(bytes).unwrap_or_default(),
                    path: builtin_path(name),
                    builtin: true,
                    component: wasmparser::Parser::is_component(bytes),
                    wasi: wasi_preview(bytes),
                });
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }
}

/// The one-line description a module or component carries in its
/// `toolhost-description` custom section.
pub fn describe(wasm: &[u8]) -> Option<String> {
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        match payload {
            Ok(wasmparser::Payload::CustomSection(c)) if c.name() == DESCRIPTION_SECTION => {
                let text = String::from_utf8_lossy(c.data());
                return Some(text.lines().next().unwrap_or("").trim().to_string());
            }
            Ok(_) => {}
            Err(_) => return None,
        }
    }
    None
}
