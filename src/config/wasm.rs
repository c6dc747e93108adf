//! The `[wasm]` section: where tools are found, CPU metering, the compile
//! cache and the instance pool.

use serde::{Deserialize, Serialize};

use super::ConfigError;

/// How the wasm backend meters guest CPU time for `max_cpu_seconds`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CpuMeter {
    /// Epoch deadlines: a tick every 10 ms of wall-clock time while the guest
    /// runs; cheap. The default.
    #[default]
    Epoch,
    /// Fuel: counts executed WebAssembly instructions, calibrated to seconds of
    /// guest compute on the reference machine; deterministic, slower.
    Fuel,
}

impl std::str::FromStr for CpuMeter {
    type Err = crate::plan::UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "epoch" => Ok(CpuMeter::Epoch),
            "fuel" => Ok(CpuMeter::Fuel),
            other => Err(crate::plan::UnknownName::new(
                "cpu meter",
                other,
                "epoch or fuel",
            )),
        }
    }
}

/// Settings of the `[wasm]` section.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields, expecting = "a table")]
#[non_exhaustive]
pub struct WasmConfig {
    /// Directories searched for `NAME.wasm` tools, in order, before the built-in
    /// collection.
    pub tool_dirs: Vec<std::path::PathBuf>,
    /// Whether the built-in tool collection is searched. Default true.
    pub builtin_tools: bool,
    /// CPU metering for `max_cpu_seconds`. Default epoch.
    #[serde(deserialize_with = "super::keys::parsed")]
    pub cpu_meter: CpuMeter,
    /// Whether compiled modules are cached on disk. Default true.
    pub cache: bool,
    /// Cache directory; default `$XDG_CACHE_HOME/toolhost/wasm` or
    /// `~/.cache/toolhost/wasm` (on Windows `%LOCALAPPDATA%\toolhost\wasm`
    /// first).
    #[serde(
        deserialize_with = "super::keys::some",
        skip_serializing_if = "Option::is_none"
    )]
    pub cache_dir: Option<std::path::PathBuf>,
    /// Most MiB the disk cache holds: past it, the entries used least recently
    /// are removed after each new entry is written. 0 means no cap.
    /// Default 512.
    pub cache_max_mb: u64,
    /// Instances kept in wasmtime's pooling allocator: the most calls that run
    /// at once (further calls wait for a slot, within their timeout). 0 uses
    /// on-demand allocation instead. Default 64; at most 4096.
    pub pool_size: u32,
    /// Whether a tool with no compiled code yet (in this process or in the
    /// disk cache) is first compiled by Winch, wasmtime's baseline compiler:
    /// its first call starts sooner and runs slower code, while Cranelift's
    /// optimized code is compiled in the background for the calls after it
    /// and for the disk cache. Only on Linux x86-64 (elsewhere it does
    /// nothing). Default true.
    pub baseline_compile: bool,
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
            baseline_compile: true,
        }
    }
}

impl WasmConfig {
    /// Checks the section's values; [`crate::SandboxConfig::validate`] runs
    /// it. Run it yourself before giving a config built in code to
    /// [`crate::backend::wasm::WasmBackend::new`] directly.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self
            .cache_dir
            .as_ref()
            .is_some_and(|d| d.as_os_str().is_empty())
        {
            return Err(ConfigError::key(
                "wasm.cache_dir",
                "must not be empty (use cache = false)",
            ));
        }
        if self.pool_size > MAX_WASM_POOL_SIZE {
            return Err(ConfigError::key(
                "wasm.pool_size",
                format!("must be at most {MAX_WASM_POOL_SIZE}"),
            ));
        }
        Ok(())
    }
}
