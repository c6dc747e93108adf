//! The `[wasm]` section: where tools are found, CPU metering, the compile
//! cache and the instance pool.

use super::ConfigError;
use super::keys::{WASM_KEYS, boolean, strings, type_error, uint};

/// How the wasm backend meters guest CPU time for `max_cpu_seconds`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum CpuMeter {
    /// Epoch deadlines: a tick every 10 ms of wall-clock time while the guest
    /// runs; cheap. The default.
    #[default]
    Epoch,
    /// Fuel: counts executed WebAssembly instructions, calibrated to seconds of
    /// guest compute on the reference machine; deterministic, slower.
    Fuel,
}

/// Settings of the `[wasm]` section.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WasmConfig {
    /// Directories searched for `NAME.wasm` tools, in order, before the built-in
    /// collection.
    pub tool_dirs: Vec<std::path::PathBuf>,
    /// Whether the built-in tool collection is searched. Default true.
    pub builtin_tools: bool,
    /// CPU metering for `max_cpu_seconds`. Default epoch.
    pub cpu_meter: CpuMeter,
    /// Whether compiled modules are cached on disk. Default true.
    pub cache: bool,
    /// Cache directory; default `$XDG_CACHE_HOME/toolhost/wasm` or
    /// `~/.cache/toolhost/wasm` (on Windows `%LOCALAPPDATA%\toolhost\wasm`
    /// first).
    pub cache_dir: Option<std::path::PathBuf>,
    /// Most MiB the disk cache holds: past it, the entries used least recently
    /// are removed after each new entry is written. 0 means no cap.
    /// Default 512.
    pub cache_max_mb: u64,
    /// Instances kept in wasmtime's pooling allocator: the most calls that run
    /// at once (further calls wait for a slot, within their timeout). 0 uses
    /// on-demand allocation instead. Default 64; at most 4096.
    pub pool_size: u32,
}

/// Largest `[wasm] pool_size`.
pub const MAX_WASM_POOL_SIZE: u32 = 4096;

impl Default for WasmConfig {
    fn default() -> Self {
        WasmConfig {
            tool_dirs: Vec::new(),
            builtin_tools: true,
            cpu_meter: CpuMeter::Epoch,
            cache: true,
            cache_dir: None,
            cache_max_mb: 512,
            pool_size: 64,
        }
    }
}

impl WasmConfig {
    pub(super) fn apply(
        &mut self,
        full: &str,
        key: &str,
        v: &toml::Value,
    ) -> Result<(), ConfigError> {
        match key {
            "tool_dirs" => {
                self.tool_dirs = strings(full, v)?.into_iter().map(Into::into).collect();
            }
            "builtin_tools" => self.builtin_tools = boolean(full, v)?,
            "cpu_meter" => {
                self.cpu_meter = match v.as_str() {
                    Some("epoch") => CpuMeter::Epoch,
                    Some("fuel") => CpuMeter::Fuel,
                    Some(other) => {
                        return Err(ConfigError::key(
                            full,
                            format!("unknown meter {other:?} (expected \"epoch\" or \"fuel\")"),
                        ));
                    }
                    None => return Err(type_error(full, "a string", v)),
                }
            }
            "cache" => self.cache = boolean(full, v)?,
            "cache_dir" => {
                let s = v.as_str().ok_or_else(|| type_error(full, "a string", v))?;
                if s.is_empty() {
                    return Err(ConfigError::key(
                        full,
                        "must not be empty (use cache = false)",
                    ));
                }
                self.cache_dir = Some(s.into());
            }
            "cache_max_mb" => self.cache_max_mb = uint(full, v)?,
            "pool_size" => {
                let n = uint(full, v)?;
                self.pool_size = u32::try_from(n)
                    .ok()
                    .filter(|n| *n <= MAX_WASM_POOL_SIZE)
                    .ok_or_else(|| {
                        ConfigError::key(full, format!("must be at most {MAX_WASM_POOL_SIZE}"))
                    })?;
            }
            _ => {
                return Err(ConfigError::key(
                    full,
                    format!("unknown key (known keys: {})", WASM_KEYS.join(", ")),
                ));
            }
        }
        Ok(())
    }
}
