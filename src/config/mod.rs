//! `SandboxConfig`: the seed module's settings and defaults, loadable from TOML.
//!
//! Invariant: a config that parsed is a config that can be enforced as written.
//! Every value is range-checked here, and every error names the key it is about,
//! so a typo in `toolhost.toml` is refused instead of silently falling back to a
//! default.
//!
//! The parts: [`SandboxConfig`] and its defaults here; `docker` and `wasm`
//! (their sections); `keys` (the serde helpers for values serde has no
//! type for, and the key list read back from the derived impls).
//!
//! Reading is two steps: serde checks each value's type as the file is read
//! (`deny_unknown_fields`, and `serde_path_to_error` for the key path of an
//! error, `docker.imgae` or `env_allowlist[0]`), then [`SandboxConfig::validate`]
//! checks the values, for configs built in code as well.

use std::path::Path;
use std::time::Duration;

use keys::{check_duration, field_names, where_read};

mod backend;
mod docker;
mod keys;
mod wasm;

pub use backend::BackendChoice;
pub use docker::DockerConfig;
pub use wasm::{CpuMeter, MAX_WASM_POOL_SIZE, WasmConfig};

/// Why a configuration was refused. `key` is the dotted TOML key at fault, when
/// there is one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", key.as_ref().map(|k| format!("config key `{k}`: ")).unwrap_or_default())]
pub struct ConfigError {
    /// The key the message is about (`timeout`, `docker.image`, ...), if any.
    pub key: Option<String>,
    /// What is wrong with it, in one line.
    pub message: String,
}

impl ConfigError {
    pub(crate) fn key(key: &str, message: impl Into<String>) -> Self {
        ConfigError {
            key: Some(key.to_string()),
            message: message.into(),
        }
    }
}

/// Limits and policy for one sandbox. `Default` gives the seed module's values.
///
/// Limits of 0 for `max_memory_mb`, `max_cpu_seconds`, `max_processes` and
/// `max_file_size_mb` disable that limit.
///
/// `Deserialize` reads the TOML shape (keys missing keep their defaults,
/// unknown keys are refused); [`SandboxConfig::from_toml_str`] adds the
/// key path to errors and runs [`SandboxConfig::validate`], which a config
/// read any other way must pass too ([`crate::Sandbox::new`] runs it).
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxConfig {
    /// Wall-clock limit for one call; the whole process tree is killed at it. Default 15 s.
    #[serde(
        deserialize_with = "keys::seconds",
        serialize_with = "keys::as_seconds"
    )]
    pub timeout: Duration,
    /// Output budget for one call: stdout keeps 80% of it, stderr the rest. Default 10 MiB.
    pub max_output_bytes: u64,
    /// Address-space limit (RLIMIT_AS on `direct`). Default 256.
    pub max_memory_mb: u64,
    /// CPU-time limit (RLIMIT_CPU on `direct`). Default 30.
    pub max_cpu_seconds: u64,
    /// Process limit (RLIMIT_NPROC on `direct`: per user, ignored for root). Default 64.
    pub max_processes: u64,
    /// Largest file a call may write (RLIMIT_FSIZE on `direct`). Default 50.
    pub max_file_size_mb: u64,
    /// Whether calls may use the network. Default false.
    pub allow_network: bool,
    /// Host environment variables passed to tools (the deny list still applies).
    pub env_allowlist: Vec<String>,
    /// Bare binary names the `shell` tool may run. Default: none.
    pub shell_allowed_binaries: Vec<String>,
    /// Whether the `shell` tool accepts command strings. Default false.
    pub shell_allow_strings: bool,
    /// Whether the `shell` tool keeps `PATH` entries inside writable allowed
    /// dirs (and relative ones), so that a bare name may run a program the
    /// agent could have written there (`$WS/.venv/bin/pytest`). Default false:
    /// they are taken off the shell tool's `PATH`, and a name found first in
    /// one is refused (rule `shell.writable_path`).
    pub shell_allow_writable_path: bool,
    /// File extensions file tools refuse to write (lowercase, with the dot).
    pub write_denied_extensions: Vec<String>,
    /// Paths inside every writable allowed dir that no tool may change, on
    /// any backend (see [`crate::protected`]): relative paths of plain
    /// names. Default [`crate::protected::DEFAULT_PROTECTED_PATHS`]
    /// (`.git`); an empty list protects nothing.
    pub protected_paths: Vec<String>,
    /// Backend that runs calls. Default `direct`.
    #[serde(deserialize_with = "keys::parsed")]
    pub backend: BackendChoice,
    /// Calls allowed per `rate_limit_window` per session; 0 disables. Default 60.
    pub rate_limit_calls: u64,
    /// Window of the rate limit. Default 60 s.
    #[serde(
        deserialize_with = "keys::seconds",
        serialize_with = "keys::as_seconds"
    )]
    pub rate_limit_window: Duration,
    /// On Linux, mark the toolhost process non-dumpable so that tools running as
    /// the same user cannot read its `/proc/PID/environ` (host secrets). Default true.
    pub protect_host_environ: bool,
    /// The agent tools' audit log (one hash-chained JSON line per call), if
    /// any. Default none.
    #[serde(
        deserialize_with = "keys::some",
        skip_serializing_if = "Option::is_none"
    )]
    pub audit_log: Option<std::path::PathBuf>,
    /// The highest permission level of a tool an agent may call. Default
    /// `dangerous` (no cap).
    #[serde(deserialize_with = "keys::parsed")]
    pub max_permission_level: crate::policy::Level,
    /// Capabilities no tool may have. Default none.
    #[serde(deserialize_with = "keys::parsed_list")]
    pub blocked_capabilities: Vec<crate::policy::Capability>,
    /// Kernel isolation of the `direct` backend (see [`crate::isolation`]).
    /// Default `best-effort` on Linux, `off` elsewhere.
    #[serde(deserialize_with = "keys::isolation")]
    pub isolation: crate::isolation::IsolationLevel,
    /// Paths every `direct` tool may read and execute under Landlock, besides
    /// the allowed dirs. Default [`crate::isolation::DEFAULT_SYSTEM_READ_PATHS`].
    pub isolation_read_paths: Vec<std::path::PathBuf>,
    /// `[docker]` section.
    #[serde(deserialize_with = "keys::table")]
    pub docker: DockerConfig,
    /// `[wasm]` section.
    #[serde(deserialize_with = "keys::table")]
    pub wasm: WasmConfig,
    /// The file this config was read from ([`SandboxConfig::from_file`]), if
    /// any: toolhost state, which no writable allowed dir may hold (a tool
    /// could otherwise loosen the next session's limits).
    #[serde(skip)]
    pub config_file: Option<std::path::PathBuf>,
}

/// The seed module's write denylist.
pub const DEFAULT_WRITE_DENIED_EXTENSIONS: &[&str] = &[
    ".exe", ".bat", ".cmd", ".ps1", ".psm1", ".sh", ".bash", ".zsh", ".fish", ".so", ".dylib",
    ".dll", ".com", ".scr", ".msi",
];

/// The seed module's environment allowlist (on Windows, with
/// [`WINDOWS_ENV_ALLOWLIST`] after it).
pub const DEFAULT_ENV_ALLOWLIST: &[&str] = &["PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR"];

/// Also passed by default on Windows: what native programs there need to
/// start and find the system (`SystemRoot`: Winsock and many DLLs fail
/// without it).
pub const WINDOWS_ENV_ALLOWLIST: &[&str] = &[
    "SystemRoot",
    "SystemDrive",
    "windir",
    "PATHEXT",
    "COMSPEC",
    "TEMP",
    "TMP",
];

/// Longest timeout a config may ask for (one day).
pub const MAX_TIMEOUT_SECS: f64 = 86_400.0;

/// The default `isolation_read_paths`: the system dirs of a Unix host (only
/// Linux's Landlock layer reads them). Off Unix there are none: `/bin` is not
/// an absolute path on Windows, and no layer there confines reads.
fn default_isolation_read_paths() -> Vec<std::path::PathBuf> {
    if cfg!(unix) {
        crate::isolation::DEFAULT_SYSTEM_READ_PATHS
            .iter()
            .map(std::path::PathBuf::from)
            .collect()
    } else {
        Vec::new()
    }
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            timeout: Duration::from_secs(15),
            max_output_bytes: 10 * 1024 * 1024,
            max_memory_mb: 256,
            max_cpu_seconds: 30,
            max_processes: 64,
            max_file_size_mb: 50,
            allow_network: false,
            env_allowlist: DEFAULT_ENV_ALLOWLIST
                .iter()
                .chain(if cfg!(windows) {
                    WINDOWS_ENV_ALLOWLIST
                } else {
                    &[]
                })
                .map(|s| s.to_string())
                .collect(),
            shell_allowed_binaries: Vec::new(),
            shell_allow_strings: false,
            shell_allow_writable_path: false,
            write_denied_extensions: DEFAULT_WRITE_DENIED_EXTENSIONS
                .iter()
                .map(|s| s.to_string())
                .collect(),
            protected_paths: crate::protected::DEFAULT_PROTECTED_PATHS
                .iter()
                .map(|s| s.to_string())
                .collect(),
            backend: BackendChoice::Direct,
            rate_limit_calls: 60,
            rate_limit_window: Duration::from_secs(60),
            protect_host_environ: true,
            audit_log: None,
            max_permission_level: crate::policy::Level::Dangerous,
            blocked_capabilities: Vec::new(),
            isolation: crate::isolation::IsolationLevel::default(),
            isolation_read_paths: default_isolation_read_paths(),
            docker: DockerConfig::default(),
            wasm: WasmConfig::default(),
            config_file: None,
        }
    }
}

impl SandboxConfig {
    /// The default of a top-level `key`, as TOML spells it (`15`,
    /// `"direct"`, `false`), read from [`SandboxConfig::default`]: the one
    /// place defaults are written. The command's help shows these; `None`
    /// for a key without a single-value default (a list, a path, a section).
    pub fn default_of(key: &str) -> Option<String> {
        // Made once: the command's help asks for some forty defaults at
        // every parse, and a whole config (its lists of paths and names)
        // for each cost `toolhost run` about 0.2 ms.
        static DEFAULT: std::sync::LazyLock<SandboxConfig> =
            std::sync::LazyLock::new(SandboxConfig::default);
        let d = &*DEFAULT;
        let secs = |t: Duration| {
            let s = t.as_secs_f64();
            if s.fract() == 0.0 {
                format!("{}", s as u64)
            } else {
                format!("{s}")
            }
        };
        Some(match key {
            "timeout" => secs(d.timeout),
            "max_output_bytes" => d.max_output_bytes.to_string(),
            "max_memory_mb" => d.max_memory_mb.to_string(),
            "max_cpu_seconds" => d.max_cpu_seconds.to_string(),
            "max_processes" => d.max_processes.to_string(),
            "max_file_size_mb" => d.max_file_size_mb.to_string(),
            "allow_network" => d.allow_network.to_string(),
            "shell_allow_strings" => d.shell_allow_strings.to_string(),
            "shell_allow_writable_path" => d.shell_allow_writable_path.to_string(),
            "backend" => format!("\"{}\"", d.backend.as_str()),
            "rate_limit_calls" => d.rate_limit_calls.to_string(),
            "rate_limit_window" => secs(d.rate_limit_window),
            "protect_host_environ" => d.protect_host_environ.to_string(),
            "max_permission_level" => format!("\"{}\"", d.max_permission_level.as_str()),
            "isolation" => format!("\"{}\"", d.isolation.as_str()),
            _ => return None,
        })
    }

    /// The limits of one call under this config, in the units backends
    /// apply (0 in a `max_*` key disables that limit).
    pub fn limits(&self) -> crate::plan::Limits {
        let nonzero = |v: u64| (v != 0).then_some(v);
        let (stdout_cap, stderr_cap) = crate::output::split_budget(self.max_output_bytes);
        crate::plan::Limits {
            timeout: self.timeout,
            stdout_cap,
            stderr_cap,
            memory_bytes: nonzero(self.max_memory_mb).map(|m| m.saturating_mul(1 << 20)),
            cpu_seconds: nonzero(self.max_cpu_seconds),
            processes: nonzero(self.max_processes),
            file_size_bytes: nonzero(self.max_file_size_mb).map(|m| m.saturating_mul(1 << 20)),
        }
    }

    /// Every key a config file may set, sections as `docker.image` and
    /// `wasm.tool_dirs` (the section names themselves are not listed).
    pub fn keys() -> Vec<String> {
        let top = field_names::<SandboxConfig>()
            .iter()
            .filter(|k| !matches!(**k, "docker" | "wasm"))
            .map(|k| k.to_string());
        let docker = field_names::<DockerConfig>()
            .iter()
            .map(|k| format!("docker.{k}"));
        let wasm = field_names::<WasmConfig>()
            .iter()
            .map(|k| format!("wasm.{k}"));
        top.chain(docker).chain(wasm).collect()
    }

    /// Reads and validates a TOML file. Keys not given keep their defaults.
    ///
    /// # Ambient Authority
    /// Reads `path` from the host filesystem: pass an operator-chosen path, never
    /// one that came from an agent.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            key: None,
            message: format!("cannot read config file {}: {e}", path.display()),
        })?;
        let mut config = Self::from_toml_str(&text).map_err(|e| ConfigError {
            key: e.key.clone(),
            message: format!("{} (in {})", e.message, path.display()),
        })?;
        config.config_file = Some(where_read(path));
        Ok(config)
    }

    /// Parses and validates TOML text. Keys not given keep their defaults.
    pub fn from_toml_str(text: &str) -> Result<Self, ConfigError> {
        let toml = toml::Deserializer::parse(text).map_err(|e| ConfigError {
            key: None,
            message: format!("invalid TOML: {}", e.message()),
        })?;
        let cfg: SandboxConfig = serde_path_to_error::deserialize(toml).map_err(|e| {
            let path = e.path().to_string();
            let message = e.into_inner().message().to_string();
            Self::key_error(path, message)
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Parses and validates a JSON object of the same keys and shapes as
    /// the TOML file (seconds as numbers, sections as objects). A key left
    /// out keeps its default; `null` is no value for a key that may have
    /// none (`audit_log`, `docker.image`, ...) and refused for any other.
    /// For bindings that build a config as data (the Python package).
    pub fn from_json_str(text: &str) -> Result<Self, ConfigError> {
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| ConfigError {
            key: None,
            message: format!("invalid JSON: {e}"),
        })?;
        // A derived struct would also take an array of its fields in order.
        if !value.is_object() {
            return Err(ConfigError {
                key: None,
                message: "the config must be a JSON object of keys".into(),
            });
        }
        let cfg: SandboxConfig = serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            Self::key_error(path, e.into_inner().to_string())
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// This config as JSON, in the shape [`SandboxConfig::from_json_str`]
    /// reads back (keys without a value left out). `config_file` is not a
    /// key and is not written.
    ///
    /// # Errors
    /// A path that is not UTF-8 has no JSON spelling.
    pub fn to_json(&self) -> Result<String, ConfigError> {
        serde_json::to_string(self).map_err(|e| ConfigError {
            key: None,
            message: format!("cannot write the config as JSON: {e}"),
        })
    }

    /// Records that this config was read from the file at `path` (as
    /// [`SandboxConfig::from_file`] does): toolhost state, which no writable
    /// allowed dir may hold.
    pub fn set_config_file(&mut self, path: &Path) {
        self.config_file = Some(where_read(path));
    }

    /// A `ConfigError` for a serde error at `path` (`.` is the whole file).
    fn key_error(path: String, message: String) -> ConfigError {
        // The toml crate hands a date-time to serde as a table of one
        // private key: name the key that holds it, not that one.
        let (path, message) = match path.split_once(".$__toml_private") {
            Some((holder, _)) => (holder.to_string(), "unexpected date-time".to_string()),
            None if path.starts_with("$__toml_private") => {
                (".".to_string(), "unexpected date-time".to_string())
            }
            None => (path, message),
        };
        ConfigError {
            key: (path != ".").then_some(path),
            message,
        }
    }

    /// Checks values that are valid TOML of the right type but cannot be enforced.
    /// Called by the parsers; call it yourself after building a config in code.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_duration("timeout", self.timeout)?;
        if self.max_output_bytes == 0 {
            return Err(ConfigError::key(
                "max_output_bytes",
                "must be at least 1 (the output budget cannot be disabled)",
            ));
        }
        if usize::try_from(self.max_output_bytes).is_err() {
            return Err(ConfigError::key(
                "max_output_bytes",
                "too large for this platform",
            ));
        }
        // TOML integers are 64-bit signed: a larger value is no number a
        // file could mean, and an rlimit that large is no limit at all.
        for (key, v) in [
            ("max_output_bytes", self.max_output_bytes),
            ("max_memory_mb", self.max_memory_mb),
            ("max_cpu_seconds", self.max_cpu_seconds),
            ("max_processes", self.max_processes),
            ("max_file_size_mb", self.max_file_size_mb),
            ("rate_limit_calls", self.rate_limit_calls),
            ("wasm.cache_max_mb", self.wasm.cache_max_mb),
        ] {
            if i64::try_from(v).is_err() {
                return Err(ConfigError::key(
                    key,
                    format!("{v} is out of range (at most {})", i64::MAX),
                ));
            }
        }
        // MiB values are multiplied into bytes; refuse values that overflow.
        for (key, v) in [
            ("max_memory_mb", self.max_memory_mb),
            ("max_file_size_mb", self.max_file_size_mb),
        ] {
            if v.checked_mul(1024 * 1024).is_none() {
                return Err(ConfigError::key(key, format!("{v} MiB is out of range")));
            }
        }
        for name in &self.env_allowlist {
            if name.is_empty() || name.contains('=') || name.contains('\0') {
                return Err(ConfigError::key(
                    "env_allowlist",
                    format!("{name:?} is not a valid environment variable name"),
                ));
            }
        }
        for bin in &self.shell_allowed_binaries {
            if bin.is_empty() || bin.contains('/') || bin.contains('\\') || bin.contains('\0') {
                return Err(ConfigError::key(
                    "shell_allowed_binaries",
                    format!("{bin:?} must be a bare program name, without any path"),
                ));
            }
        }
        for ext in &self.write_denied_extensions {
            let ok = ext.len() > 1
                && ext.starts_with('.')
                && !ext[1..].contains(['.', '/', '\\', '\0'])
                && ext.chars().all(|c| !c.is_ascii_uppercase());
            if !ok {
                return Err(ConfigError::key(
                    "write_denied_extensions",
                    format!("{ext:?} must look like \".ext\" (one dot, lowercase)"),
                ));
            }
        }
        crate::protected::ProtectedPaths::parse(&self.protected_paths)
            .map_err(|m| ConfigError::key("protected_paths", m))?;
        check_duration("rate_limit_window", self.rate_limit_window)?;
        if self
            .audit_log
            .as_ref()
            .is_some_and(|p| p.as_os_str().is_empty())
        {
            return Err(ConfigError::key("audit_log", "must be a non-empty path"));
        }
        for p in &self.isolation_read_paths {
            let s = p.to_string_lossy();
            if !p.is_absolute()
                || s.contains('\0')
                || p.components().any(|c| c == std::path::Component::ParentDir)
            {
                return Err(ConfigError::key(
                    "isolation_read_paths",
                    format!("{s:?} must be an absolute path without \"..\""),
                ));
            }
        }
        self.docker.validate()?;
        self.wasm.validate()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The defaults pass their own checks on every platform (on Windows the
    /// Unix read paths did not: `/bin` is not absolute there).
    #[test]
    fn defaults_validate_on_this_platform() {
        let c = SandboxConfig::default();
        c.validate().expect("the default config validates");
        assert_eq!(c.isolation_read_paths.is_empty(), !cfg!(unix));
    }

    #[test]
    fn defaults_are_the_seed_defaults() {
        let c = SandboxConfig::default();
        assert_eq!(c.timeout, Duration::from_secs(15));
        assert_eq!(c.max_output_bytes, 10 * 1024 * 1024);
        assert_eq!(
            (
                c.max_memory_mb,
                c.max_cpu_seconds,
                c.max_processes,
                c.max_file_size_mb
            ),
            (256, 30, 64, 50)
        );
        assert!(!c.allow_network && !c.shell_allow_strings);
        assert!(c.shell_allowed_binaries.is_empty());
        let mut seed: Vec<&str> = DEFAULT_ENV_ALLOWLIST.to_vec();
        if cfg!(windows) {
            seed.extend(WINDOWS_ENV_ALLOWLIST);
        }
        assert_eq!(c.env_allowlist, seed);
        assert_eq!(c.write_denied_extensions.len(), 15);
        assert_eq!(c.backend, BackendChoice::Direct);
        assert_eq!(
            (c.rate_limit_calls, c.rate_limit_window),
            (60, Duration::from_secs(60))
        );
        c.validate().unwrap();
    }

    #[test]
    fn empty_file_is_the_default() {
        assert_eq!(
            SandboxConfig::from_toml_str("").unwrap(),
            SandboxConfig::default()
        );
    }

    #[test]
    fn every_key_parses() {
        // Absolute paths of this platform (`C:/x` is absolute on Windows).
        let abs = if cfg!(windows) { "C:" } else { "" };
        // Docker's bind sources are host paths without `:` (its `-v` syntax):
        // none on Windows, where toolhost has no docker backend yet.
        let mounts = if cfg!(windows) {
            ""
        } else {
            r#""/usr/share/zoneinfo""#
        };
        let c = SandboxConfig::from_toml_str(&format!(
            r#"
            timeout = 2.5
            max_output_bytes = 1000
            max_memory_mb = 0
            max_cpu_seconds = 3
            max_processes = 0
            max_file_size_mb = 1
            allow_network = true
            env_allowlist = ["PATH", "FOO"]
            shell_allowed_binaries = ["ls"]
            shell_allow_strings = true
            write_denied_extensions = [".exe"]
            backend = "direct"
            rate_limit_calls = 0
            rate_limit_window = 10
            protect_host_environ = false
            audit_log = "{abs}/var/log/toolhost/audit.jsonl"
            max_permission_level = "cautious"
            blocked_capabilities = ["network", "shell"]
            [docker]
            image = "toolhost-test-busybox:1"
            user = "1000:1000"
            extra_ro_mounts = [{mounts}]
            tmpfs_size_mb = 16
            pull = true
            host = "tcp://127.0.0.1:2375"
            warm = true
            runtime = "runsc"
            network_runtime = "runsc-net"
            [wasm]
            tool_dirs = ["{abs}/opt/tools"]
            builtin_tools = false
            cpu_meter = "fuel"
            cache = false
            cache_dir = "{abs}/tmp/c"
            pool_size = 0
            "#,
        ))
        .unwrap();
        assert_eq!(c.timeout, Duration::from_millis(2500));
        assert_eq!(c.max_output_bytes, 1000);
        assert_eq!(c.max_memory_mb, 0);
        assert_eq!(c.env_allowlist, ["PATH", "FOO"]);
        assert!(c.allow_network && c.shell_allow_strings && !c.protect_host_environ);
        assert_eq!(c.rate_limit_window, Duration::from_secs(10));
        assert_eq!(
            c.wasm.tool_dirs,
            [std::path::PathBuf::from(format!("{abs}/opt/tools"))]
        );
        assert!(!c.wasm.builtin_tools && !c.wasm.cache);
        assert_eq!(c.wasm.cpu_meter, CpuMeter::Fuel);
        assert_eq!(c.wasm.pool_size, 0);
        assert_eq!(c.docker.image.as_deref(), Some("toolhost-test-busybox:1"));
        assert_eq!(c.docker.user.as_deref(), Some("1000:1000"));
        assert_eq!(c.docker.tmpfs_size_mb, 16);
        assert!(c.docker.pull && c.docker.warm);
        assert_eq!(c.docker.runtime_for(false), Some("runsc"));
        assert_eq!(c.docker.runtime_for(true), Some("runsc-net"));
        assert_eq!(c.docker.host.as_deref(), Some("tcp://127.0.0.1:2375"));
        assert_eq!(
            c.audit_log,
            Some(std::path::PathBuf::from(format!(
                "{abs}/var/log/toolhost/audit.jsonl"
            )))
        );
        assert_eq!(c.max_permission_level, crate::policy::Level::Cautious);
        assert_eq!(
            c.blocked_capabilities,
            [
                crate::policy::Capability::Network,
                crate::policy::Capability::Shell
            ]
        );
    }

    /// A config written as JSON reads back the same, the default and one
    /// with every key set off its default (through TOML too: the JSON shape
    /// is the file's).
    #[test]
    fn json_round_trips() {
        let d = SandboxConfig::default();
        let json = d.to_json().unwrap();
        assert_eq!(SandboxConfig::from_json_str(&json).unwrap(), d);
        assert_eq!(SandboxConfig::from_json_str("{}").unwrap(), d);
        let abs = if cfg!(windows) { "C:" } else { "" };
        let text = format!(
            r#"
            timeout = 2.5
            max_output_bytes = 1000
            max_memory_mb = 0
            allow_network = true
            env_allowlist = ["PATH", "FOO"]
            shell_allowed_binaries = ["ls"]
            backend = "auto"
            rate_limit_window = 0.25
            audit_log = "{abs}/var/log/toolhost/audit.jsonl"
            max_permission_level = "cautious"
            blocked_capabilities = ["network", "shell"]
            isolation = "off"
            protected_paths = []
            [docker]
            image = "toolhost-test-busybox:1"
            user = "1000:1000"
            warm = true
            [wasm]
            tool_dirs = ["{abs}/opt/tools"]
            cpu_meter = "fuel"
            cache_dir = "{abs}/tmp/c"
            pool_size = 0
            "#,
        );
        let c = SandboxConfig::from_toml_str(&text).unwrap();
        assert_ne!(c, d);
        let json = c.to_json().unwrap();
        assert_eq!(SandboxConfig::from_json_str(&json).unwrap(), c);
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(value["timeout"], 2.5);
        assert_eq!(value["isolation"], "off");
        assert_eq!(value["backend"], "auto");
        assert_eq!(value["wasm"]["cpu_meter"], "fuel");
        assert_eq!(value["blocked_capabilities"][1], "shell");
        // Every top-level key is written (this config gives each a value).
        let written: Vec<&String> = value.as_object().unwrap().keys().collect();
        let keys = SandboxConfig::keys();
        let top: std::collections::BTreeSet<&str> = keys
            .iter()
            .map(|k| k.split('.').next().unwrap_or(k))
            .collect();
        let written: std::collections::BTreeSet<&str> =
            written.into_iter().map(String::as_str).collect();
        assert_eq!(written, top);
        assert!(!json.contains("config_file"));
        let toml_text = toml::to_string(&c).unwrap();
        assert_eq!(SandboxConfig::from_toml_str(&toml_text).unwrap(), c);
    }

    /// `null` is no value for a key that may have none (as a key left out),
    /// and refused for any other.
    #[test]
    fn json_null_is_no_value_only_where_there_may_be_none() {
        let c = SandboxConfig::from_json_str(
            r#"{"audit_log": null, "docker": {"image": null, "host": null}, "wasm": {"cache_dir": null}}"#,
        )
        .unwrap();
        assert_eq!(c, SandboxConfig::default());
        let c = SandboxConfig::from_json_str(r#"{"docker": {"image": "x"}}"#).unwrap();
        assert_eq!(c.docker.image.as_deref(), Some("x"));
    }

    #[test]
    fn json_errors_name_the_key() {
        let cases: &[(&str, Option<&str>, &str)] = &[
            (r#"{"timeot": 3}"#, Some("timeot"), "unknown field"),
            (r#"{"timeout": "3"}"#, Some("timeout"), "seconds"),
            (r#"{"timeout": 0}"#, Some("timeout"), "more than 0"),
            (
                r#"{"max_output_bytes": -1}"#,
                Some("max_output_bytes"),
                "invalid value",
            ),
            (
                r#"{"env_allowlist": ["A", 1]}"#,
                Some("env_allowlist[1]"),
                "invalid type",
            ),
            (
                r#"{"docker": {"imgae": "x"}}"#,
                Some("docker.imgae"),
                "unknown field",
            ),
            (r#"{"timeout": null}"#, Some("timeout"), "invalid type"),
            (
                r#"{"max_memory_mb": null}"#,
                Some("max_memory_mb"),
                "invalid type",
            ),
            (
                r#"{"docker": {"pull": null}}"#,
                Some("docker.pull"),
                "invalid type",
            ),
            (
                r#"{"wasm": {"cpu_meter": "gas"}}"#,
                Some("wasm.cpu_meter"),
                "epoch or fuel",
            ),
            (r#"{"isolation": "some"}"#, Some("isolation"), "strict"),
            (
                r#"{"max_output_bytes": 0}"#,
                Some("max_output_bytes"),
                "at least 1",
            ),
            (r#"{"timeout": 1} x"#, None, "invalid JSON"),
            (r#"{"timeout": 1"#, None, "invalid JSON"),
            ("[]", None, "JSON object"),
            ("[15]", None, "JSON object"),
        ];
        for (text, key, message) in cases {
            let Err(e) = SandboxConfig::from_json_str(text) else {
                panic!("{text} was taken");
            };
            assert_eq!(e.key.as_deref(), *key, "{text}: {e}");
            assert!(e.message.contains(message), "{text}: {e}");
            // Where in the text: for a syntax error, not for a value.
            let syntax = message == &"invalid JSON";
            assert_eq!(e.message.contains(" at line "), syntax, "{text}: {e}");
        }
    }

    fn err(text: &str) -> ConfigError {
        SandboxConfig::from_toml_str(text).unwrap_err()
    }

    #[test]
    fn errors_name_the_key() {
        let cases: &[(&str, &str)] = &[
            ("timeot = 3", "timeot"),
            ("timeout = \"3\"", "timeout"),
            ("timeout = 0", "timeout"),
            ("timeout = -1", "timeout"),
            ("timeout = nan", "timeout"),
            ("timeout = 1e9", "timeout"),
            ("timeout = 1e30", "timeout"),
            ("timeout = inf", "timeout"),
            ("isolation = \"x\"", "isolation"),
            ("[wasm]\ncpu_meter = 1", "wasm.cpu_meter"),
            ("wasm = [1]", "wasm"),
            ("[wasm]\ncpu_meter = { fuel = {} }", "wasm.cpu_meter"),
            ("wasm = [[\"/x\"]]", "wasm"),
            ("docker = [\"img\"]", "docker"),
            ("max_memory_mb = -5", "max_memory_mb"),
            ("max_memory_mb = 1.5", "max_memory_mb"),
            ("max_file_size_mb = 9223372036854775807", "max_file_size_mb"),
            ("max_output_bytes = 0", "max_output_bytes"),
            ("allow_network = \"yes\"", "allow_network"),
            ("env_allowlist = \"PATH\"", "env_allowlist"),
            ("env_allowlist = [\"A=B\"]", "env_allowlist"),
            ("env_allowlist = [1]", "env_allowlist[0]"),
            (
                "shell_allowed_binaries = [\"/bin/ls\"]",
                "shell_allowed_binaries",
            ),
            (
                "write_denied_extensions = [\"exe\"]",
                "write_denied_extensions",
            ),
            (
                "write_denied_extensions = [\".EXE\"]",
                "write_denied_extensions",
            ),
            ("backend = \"podman\"", "backend"),
            ("rate_limit_window = 0", "rate_limit_window"),
            ("audit_log = \"\"", "audit_log"),
            ("max_permission_level = \"root\"", "max_permission_level"),
            ("blocked_capabilities = [\"disk\"]", "blocked_capabilities"),
            ("docker = 1", "docker"),
            ("[docker]\nimage = \"\"", "docker.image"),
            ("[docker]\nimgae = \"x\"", "docker.imgae"),
            ("[docker]\nhost = \"ssh://x\"", "docker.host"),
            (
                "[docker]\nextra_ro_mounts = [\"rel\"]",
                "docker.extra_ro_mounts[0]",
            ),
            ("[docker]\ntmpfs_size_mb = 0", "docker.tmpfs_size_mb"),
            ("[docker]\nuser = \"0:0\"", "docker.user"),
            ("[docker]\nuser = \"root\"", "docker.user"),
            ("[docker]\nuser = \"00:0\"", "docker.user"),
            ("[docker]\nuser = \"0\"", "docker.user"),
            ("[docker]\nuser = \"-0\"", "docker.user"),
            ("[docker]\nuser = \"-00:-0\"", "docker.user"),
            ("[docker]\nruntime = \"\"", "docker.runtime"),
            ("[docker]\nruntime = \"run sc\"", "docker.runtime"),
            ("[docker]\nruntime = \"-runsc\"", "docker.runtime"),
            ("[docker]\nruntime = \"/usr/bin/runsc\"", "docker.runtime"),
            (
                "[docker]\nnetwork_runtime = \"runsc\"",
                "docker.network_runtime",
            ),
            (
                "[docker]\nruntime = \"runsc\"\nnetwork_runtime = \"a:b\"",
                "docker.network_runtime",
            ),
            ("docker = 1979-05-27", "docker"),
            ("[wasm]\ncpu_meter = 1979-05-27T07:32:00Z", "wasm.cpu_meter"),
            ("max_cpu_seconds = 18446744073709551615", "max_cpu_seconds"),
            ("max_output_bytes = 9223372036854775808", "max_output_bytes"),
            ("[docker]\ntls_ca = \"/ca.pem\"", "docker.tls_ca"),
            ("[wasm]\nfuel = 1", "wasm.fuel"),
            ("[wasm]\ncpu_meter = \"cycles\"", "wasm.cpu_meter"),
            ("[wasm]\ntool_dirs = \"x\"", "wasm.tool_dirs"),
            ("[wasm]\ncache_dir = \"\"", "wasm.cache_dir"),
            ("[wasm]\npool_size = 5000", "wasm.pool_size"),
            ("[wasm]\npool_size = -1", "wasm.pool_size"),
        ];
        for (text, key) in cases {
            let e = err(text);
            assert_eq!(e.key.as_deref(), Some(*key), "{text}: {e}");
            assert!(e.to_string().contains(&format!("`{key}`")), "{text}: {e}");
        }
    }

    /// Users that name uid 0 as the engine reads them are refused; the
    /// others (names, other numbers, a group of 0) pass.
    #[test]
    fn docker_user_refuses_every_spelling_of_root() {
        for root in ["root", "0", "00", "+0", "-0", "-00:-0", "0:1000"] {
            let c = format!("[docker]\nuser = \"{root}\"");
            assert_eq!(err(&c).key.as_deref(), Some("docker.user"), "{root}");
        }
        for user in ["1000", "1000:1000", "nobody", "10", "-1", "1000:0", "0a"] {
            let c = format!("[docker]\nuser = \"{user}\"");
            let parsed = SandboxConfig::from_toml_str(&c).unwrap();
            assert_eq!(parsed.docker.user.as_deref(), Some(user));
        }
    }

    /// A config built in code passes the same value checks as a file: the
    /// refused case beside the accepted one.
    #[test]
    fn configs_built_in_code_are_checked_as_files_are() {
        let mut c = SandboxConfig::default();
        c.docker.user = Some("1000:1000".into());
        c.wasm.pool_size = MAX_WASM_POOL_SIZE;
        assert_eq!(c.validate(), Ok(()));
        for (edit, key) in [
            (
                (|c: &mut SandboxConfig| c.docker.user = Some("0:0".into()))
                    as fn(&mut SandboxConfig),
                "docker.user",
            ),
            (
                |c: &mut SandboxConfig| c.wasm.pool_size = MAX_WASM_POOL_SIZE + 1,
                "wasm.pool_size",
            ),
            (
                |c: &mut SandboxConfig| c.docker.extra_ro_mounts = vec!["rel".into()],
                "docker.extra_ro_mounts[0]",
            ),
            (
                |c: &mut SandboxConfig| c.audit_log = Some("".into()),
                "audit_log",
            ),
        ] {
            let mut bad = c.clone();
            edit(&mut bad);
            assert_eq!(bad.validate().unwrap_err().key.as_deref(), Some(key));
        }
    }

    #[test]
    fn syntax_errors_are_reported() {
        let e = err("timeout = ");
        assert!(e.key.is_none());
        assert!(e.to_string().contains("invalid TOML"), "{e}");
    }
}
