//! toolhost's own state on the host: what it later loads, executes or trusts.
//!
//! Invariant: no tool can write any of it. Each entry of [`state_paths`] is
//! kept out of every writable allowed dir (a sandbox whose writable dir
//! contains one, or lies inside one, is refused by [`refuse_exposed_state`]),
//! and the backends reach the host only through the allowed dirs: the direct
//! backend's Landlock rules grant writes to the writable allowed dirs and a
//! private tmp only, docker mounts only the allowed dirs, wasm preopens only
//! them. So whoever can write these paths is trusted like the toolhost binary
//! itself (the compile cache holds native code toolhost maps and runs), and
//! that is the user who runs toolhost, never a tool.
//!
//! The state:
//! - the compiled-module cache (`[wasm] cache_dir`, default
//!   `$XDG_CACHE_HOME/toolhost/wasm` or `~/.cache/toolhost/wasm`);
//! - toolhost's cache base (`$XDG_CACHE_HOME/toolhost` or `~/.cache/toolhost`):
//!   the docker warm-mode helper (PID 1 of warm containers) and the special-file
//!   watchdog's self-test dirs;
//! - `$XDG_RUNTIME_DIR/toolhost`, where the helper goes when there is no base;
//! - the audit log (`audit_log`), which `toolhost audit verify` trusts and
//!   every session chains from.

use std::path::{Path, PathBuf};

use crate::config::SandboxConfig;
use crate::paths::AllowedDirs;

/// One piece of toolhost's state, with what moves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatePath {
    /// What it is, for messages.
    pub what: &'static str,
    /// Where it is.
    pub path: PathBuf,
    /// The config key or environment variable that moves it.
    pub moved_by: &'static str,
}

/// An absolute path from the environment variable `name`, if set to one
/// (the XDG spec says relative values are to be ignored).
fn absolute_var(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
}

/// toolhost's cache base: `$XDG_CACHE_HOME/toolhost` or `~/.cache/toolhost`.
pub fn cache_base() -> Option<PathBuf> {
    absolute_var("XDG_CACHE_HOME")
        .or_else(|| absolute_var("HOME").map(|h| h.join(".cache")))
        .map(|b| b.join("toolhost"))
}

/// `$XDG_RUNTIME_DIR/toolhost`.
pub fn runtime_dir() -> Option<PathBuf> {
    absolute_var("XDG_RUNTIME_DIR").map(|d| d.join("toolhost"))
}

/// The default compile cache: `<cache base>/wasm`.
pub fn default_wasm_cache() -> Option<PathBuf> {
    Some(cache_base()?.join("wasm"))
}

/// The compile cache a config uses, if caching is on.
pub fn wasm_cache(config: &SandboxConfig) -> Option<PathBuf> {
    if !config.wasm.cache {
        return None;
    }
    config.wasm.cache_dir.clone().or_else(default_wasm_cache)
}

/// Every piece of state a sandbox with `config` may load, execute or trust.
pub fn state_paths(config: &SandboxConfig) -> Vec<StatePath> {
    let mut out = Vec::new();
    if let Some(path) = wasm_cache(config) {
        out.push(StatePath {
            what: "compile cache (native code toolhost runs)",
            path,
            moved_by: if config.wasm.cache_dir.is_some() {
                "[wasm] cache_dir"
            } else {
                "[wasm] cache_dir, XDG_CACHE_HOME or HOME"
            },
        });
    }
    match cache_base() {
        Some(path) => out.push(StatePath {
            what: "cache dir (the docker warm-mode helper, self-test dirs)",
            path,
            moved_by: "XDG_CACHE_HOME or HOME",
        }),
        None => {
            if let Some(path) = runtime_dir() {
                out.push(StatePath {
                    what: "runtime dir (the docker warm-mode helper)",
                    path,
                    moved_by: "XDG_RUNTIME_DIR",
                });
            }
        }
    }
    if let Some(path) = &config.audit_log {
        out.push(StatePath {
            what: "audit log",
            path: path.clone(),
            moved_by: "audit_log",
        });
    }
    out
}

/// Creates `dir` if needed and checks that only this user can write to it.
pub(crate) fn private_dir(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let meta = std::fs::metadata(dir).map_err(|e| e.to_string())?;
        // SAFETY: geteuid cannot fail.
        let me = unsafe { libc::geteuid() };
        if meta.uid() != me {
            return Err("not owned by this user".into());
        }
        if meta.mode() & 0o022 != 0 {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| format!("writable by others and cannot be fixed: {e}"))?;
        }
    }
    Ok(())
}

/// The longest existing prefix of `p`, canonicalized, with the rest appended
/// (`..` in the rest is kept as it is, and compared as a plain name).
pub(crate) fn canonical_prefix(p: &Path) -> PathBuf {
    let mut existing = p.to_path_buf();
    let mut rest = Vec::new();
    loop {
        if let Ok(mut c) = std::fs::canonicalize(&existing) {
            for r in rest.iter().rev() {
                c.push(r);
            }
            return c;
        }
        match (
            existing.file_name().map(|n| n.to_os_string()),
            existing.parent(),
        ) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent.to_path_buf();
            }
            _ => return p.to_path_buf(),
        }
    }
}

/// Refuses allowed dirs that would let a call write toolhost's state: a
/// writable allowed dir that contains a state path, or lies inside one. The
/// message names the allowed dir, the state and what moves it. Read-only
/// allowed dirs are fine (a call may read compiled code; it cannot change it).
pub fn refuse_exposed_state(dirs: &AllowedDirs, config: &SandboxConfig) -> Result<(), String> {
    for state in state_paths(config) {
        if !state.path.is_absolute() {
            return Err(format!(
                "toolhost's {} is at the relative path {}: make it absolute ({})",
                state.what,
                state.path.display(),
                state.moved_by
            ));
        }
        let path = canonical_prefix(&state.path);
        for d in dirs.as_slice().iter().filter(|d| !d.read_only()) {
            if path.starts_with(d.path()) || d.path().starts_with(&path) {
                return Err(format!(
                    "the writable allowed dir {} {} toolhost's {} {}: a tool could plant what toolhost later loads. Allow a narrower dir, make it read-only (DIR:ro), or move the state elsewhere ({})",
                    d.path().display(),
                    if path.starts_with(d.path()) {
                        "contains"
                    } else {
                        "is inside"
                    },
                    state.what,
                    path.display(),
                    state.moved_by
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paths::AllowedDirSpec;

    fn dirs(root: &Path, ro: bool) -> AllowedDirs {
        let spec = if ro {
            AllowedDirSpec::read_only(root)
        } else {
            AllowedDirSpec::read_write(root)
        };
        AllowedDirs::open([spec]).expect("open")
    }

    #[test]
    fn a_writable_dir_over_or_under_the_cache_is_refused_and_a_sibling_is_not() {
        let t = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(t.path()).expect("canonicalize");
        std::fs::create_dir_all(root.join("ws/.cache")).expect("mkdir");
        std::fs::create_dir_all(root.join("other")).expect("mkdir");
        let mut c = SandboxConfig::default();
        c.wasm.cache_dir = Some(root.join("ws/.cache/toolhost/wasm"));
        let e = refuse_exposed_state(&dirs(&root.join("ws"), false), &c).unwrap_err();
        assert!(e.contains("contains toolhost's compile cache"), "{e}");
        assert!(e.contains("[wasm] cache_dir"), "{e}");
        assert!(e.contains(&root.join("ws").display().to_string()), "{e}");
        // The allowed dir inside the cache.
        c.wasm.cache_dir = Some(root.clone());
        let e = refuse_exposed_state(&dirs(&root.join("ws"), false), &c).unwrap_err();
        assert!(e.contains("is inside"), "{e}");
        // Allowed twins: read-only, or a sibling.
        c.wasm.cache_dir = Some(root.join("ws/.cache/toolhost/wasm"));
        refuse_exposed_state(&dirs(&root.join("ws"), true), &c).expect("read-only");
        c.wasm.cache_dir = Some(root.join("other/wasm"));
        if cache_base().is_some_and(|b| canonical_prefix(&b).starts_with(&root)) {
            return;
        }
        refuse_exposed_state(&dirs(&root.join("ws"), false), &c).expect("sibling");
        // The audit log is state too.
        c.audit_log = Some(root.join("ws/audit.jsonl"));
        let e = refuse_exposed_state(&dirs(&root.join("ws"), false), &c).unwrap_err();
        assert!(e.contains("audit log") && e.contains("audit_log"), "{e}");
    }

    #[test]
    fn a_symlink_leading_into_the_workspace_is_followed() {
        let t = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(t.path()).expect("canonicalize");
        std::fs::create_dir_all(root.join("ws/c")).expect("mkdir");
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(root.join("ws/c"), root.join("link")).expect("symlink");
            let mut c = SandboxConfig::default();
            c.wasm.cache_dir = Some(root.join("link/wasm"));
            let e = refuse_exposed_state(&dirs(&root.join("ws"), false), &c).unwrap_err();
            assert!(e.contains("contains toolhost's compile cache"), "{e}");
        }
    }
}
