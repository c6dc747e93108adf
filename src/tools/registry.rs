//! The WASI tool registry: where a tool is found by name.
//!
//! Invariant: a registered tool is a `NAME.wasm` file directly inside a
//! configured tool dir (or the built-in collection), opened through a handle on
//! that dir; names are plain (`[A-Za-z0-9._-]`, no path), so a name can never
//! reach outside the tool dirs.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cap_std::ambient_authority;
use cap_std::fs::Dir;

use crate::config::WasmConfig;

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

/// A tool file found in a tool dir (or a `.wasm` file inside the sandbox).
#[derive(Debug, Clone)]
pub struct ToolFile {
    /// The tool's name (file stem).
    pub name: String,
    /// Handle on the directory holding the file.
    pub dir: Arc<Dir>,
    /// File name relative to `dir`.
    pub rel: PathBuf,
    /// Host path, for messages and listings.
    pub host_path: PathBuf,
}

/// A listing entry of `toolhost tools`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ToolInfo {
    /// Name to call it by.
    pub name: String,
    /// One line, from the tool's `toolhost-description` custom section.
    pub description: String,
    /// Where it was found.
    pub path: PathBuf,
    /// Whether it is a WASI preview-2 component (a command component, or a
    /// typed tool of the `toolhost:tool` world) rather than a preview-1 module.
    pub component: bool,
}

/// Tool dirs, searched in order.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    dirs: Vec<(PathBuf, Arc<Dir>)>,
}

/// The built-in collection: `$TOOLHOST_BUILTIN_TOOLS`, else `guest-tools/dist` of
/// the source tree toolhost was built from, when it exists.
pub fn builtin_dir() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TOOLHOST_BUILTIN_TOOLS") {
        return Some(PathBuf::from(p));
    }
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("guest-tools/dist");
    p.is_dir().then_some(p)
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
        if config.builtin_tools {
            match builtin_dir() {
                Some(d) => match Dir::open_ambient_dir(&d, ambient_authority()) {
                    Ok(dir) => dirs.push((d, Arc::new(dir))),
                    Err(e) => tracing::warn!("built-in wasm tools at {}: {e}", d.display()),
                },
                None => tracing::info!(
                    "no built-in wasm tool collection (run scripts/build-guest-tools)"
                ),
            }
        }
        Ok(Registry { dirs })
    }

    /// Finds a tool by name.
    pub fn find(&self, name: &str) -> Option<ToolFile> {
        if !valid_name(name) {
            return None;
        }
        let file = format!("{name}.wasm");
        self.dirs.iter().find_map(|(path, dir)| {
            let meta = dir.metadata(&file).ok()?;
            meta.is_file().then(|| ToolFile {
                name: name.to_string(),
                dir: dir.clone(),
                rel: PathBuf::from(&file),
                host_path: path.join(&file),
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
                    component: wasmparser::Parser::is_component(&bytes),
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
