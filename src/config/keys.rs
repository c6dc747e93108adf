//! Reading TOML: the keys each section takes, and a value read as the type
//! its key wants, each error naming the key.

use std::path::Path;
use std::time::Duration;

use super::{ConfigError, MAX_TIMEOUT_SECS};

/// Where a config file was read from, for the state checks: the dir it names
/// resolved (so `../toolhost.toml` is the dir above, not a path with `..`
/// the checks would refuse), with the file's own name kept, so that a
/// symlink by that name still counts where it sits.
pub(super) fn where_read(path: &Path) -> std::path::PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    match (absolute.parent(), absolute.file_name()) {
        (Some(parent), Some(name)) => std::fs::canonicalize(parent)
            .map(|p| p.join(name))
            .unwrap_or(absolute.clone()),
        _ => absolute,
    }
}

pub(super) const TOP_LEVEL_KEYS: &[&str] = &[
    "timeout",
    "max_output_bytes",
    "max_memory_mb",
    "max_cpu_seconds",
    "max_processes",
    "max_file_size_mb",
    "allow_network",
    "env_allowlist",
    "shell_allowed_binaries",
    "shell_allow_strings",
    "shell_allow_writable_path",
    "write_denied_extensions",
    "protected_paths",
    "backend",
    "rate_limit_calls",
    "rate_limit_window",
    "protect_host_environ",
    "audit_log",
    "max_permission_level",
    "blocked_capabilities",
    "isolation",
    "isolation_read_paths",
    "docker",
    "wasm",
];

/// The keys of the `[docker]` section, in the order the book lists them.
pub(super) const DOCKER_KEYS: &[&str] = &[
    "image",
    "user",
    "extra_ro_mounts",
    "tmpfs_size_mb",
    "pull",
    "host",
    "tls_ca",
    "tls_cert",
    "tls_key",
    "warm",
];

/// The keys of the `[wasm]` section.
pub(super) const WASM_KEYS: &[&str] = &[
    "tool_dirs",
    "builtin_tools",
    "cpu_meter",
    "cache",
    "cache_dir",
    "cache_max_mb",
    "pool_size",
];

pub(super) fn check_duration(key: &str, d: Duration) -> Result<(), ConfigError> {
    if d.is_zero() || d.as_secs_f64() > MAX_TIMEOUT_SECS {
        return Err(ConfigError::key(
            key,
            format!("must be more than 0 and at most {MAX_TIMEOUT_SECS} seconds"),
        ));
    }
    Ok(())
}

pub(super) fn type_name(v: &toml::Value) -> &'static str {
    v.type_str()
}

pub(super) fn type_error(key: &str, expected: &str, v: &toml::Value) -> ConfigError {
    ConfigError::key(key, format!("expected {expected}, found {}", type_name(v)))
}

pub(super) fn uint(key: &str, v: &toml::Value) -> Result<u64, ConfigError> {
    match v {
        toml::Value::Integer(i) => u64::try_from(*i)
            .map_err(|_| ConfigError::key(key, format!("must not be negative (got {i})"))),
        _ => Err(type_error(key, "a non-negative integer", v)),
    }
}

pub(super) fn boolean(key: &str, v: &toml::Value) -> Result<bool, ConfigError> {
    v.as_bool()
        .ok_or_else(|| type_error(key, "true or false", v))
}

pub(super) fn seconds(key: &str, v: &toml::Value) -> Result<Duration, ConfigError> {
    let secs = match v {
        toml::Value::Integer(i) => *i as f64,
        toml::Value::Float(f) => *f,
        _ => return Err(type_error(key, "a number of seconds", v)),
    };
    if !secs.is_finite() || secs <= 0.0 || secs > MAX_TIMEOUT_SECS {
        return Err(ConfigError::key(
            key,
            format!("must be more than 0 and at most {MAX_TIMEOUT_SECS} seconds (got {secs})"),
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

pub(super) fn strings(key: &str, v: &toml::Value) -> Result<Vec<String>, ConfigError> {
    let arr = v
        .as_array()
        .ok_or_else(|| type_error(key, "an array of strings", v))?;
    arr.iter()
        .enumerate()
        .map(|(i, item)| {
            item.as_str().map(str::to_string).ok_or_else(|| {
                ConfigError::key(
                    &format!("{key}[{i}]"),
                    format!("expected a string, found {}", type_name(item)),
                )
            })
        })
        .collect()
}
