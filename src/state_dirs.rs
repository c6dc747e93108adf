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
//!   `$XDG_CACHE_HOME/toolhost/wasm` or `~/.cache/toolhost/wasm`; on Windows
//!   `%LOCALAPPDATA%\toolhost\wasm`);
//! - toolhost's cache base (`$XDG_CACHE_HOME/toolhost` or `~/.cache/toolhost`;
//!   on Windows `%LOCALAPPDATA%\toolhost`):
//!   the docker warm-mode helper (PID 1 of warm containers) and the special-file
//!   watchdog's self-test dirs;
//! - `$XDG_RUNTIME_DIR/toolhost`, where the helper goes when there is no base;
//! - the audit log (`audit_log`), which `toolhost audit verify` trusts and
//!   every session chains from;
//! - the config file a sandbox was read from (its limits and policy).

use std::path::PathBuf;

use crate::config::SandboxConfig;
use crate::paths::AllowedDirs;
#[cfg(target_os = "linux")]
use crate::reach::fs_position;
use crate::reach::{Writable, resolution_trail};

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

/// The variables that set the cache base, in the order they are tried.
pub const CACHE_BASE_VARS: &str = if cfg!(windows) {
    "LOCALAPPDATA, XDG_CACHE_HOME or HOME"
} else {
    "XDG_CACHE_HOME or HOME"
};

/// toolhost's cache base: `$XDG_CACHE_HOME/toolhost` or `~/.cache/toolhost`;
/// on Windows `%LOCALAPPDATA%\toolhost` first (where Windows keeps a user's
/// caches; `HOME` is rarely set there).
pub fn cache_base() -> Option<PathBuf> {
    let local = if cfg!(windows) {
        absolute_var("LOCALAPPDATA")
    } else {
        None
    };
    local
        .or_else(|| absolute_var("XDG_CACHE_HOME"))
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
                if cfg!(windows) {
                    "[wasm] cache_dir, LOCALAPPDATA, XDG_CACHE_HOME or HOME"
                } else {
                    "[wasm] cache_dir, XDG_CACHE_HOME or HOME"
                }
            },
        });
    }
    match cache_base() {
        Some(path) => out.push(StatePath {
            what: "cache dir (the docker warm-mode helper, self-test dirs)",
            path,
            moved_by: CACHE_BASE_VARS,
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
    if let Some(path) = &config.config_file {
        out.push(StatePath {
            what: "config file",
            path: path.clone(),
            moved_by: "--config or TOOLHOST_CONFIG",
        });
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

/// Refuses allowed dirs that would let a call write toolhost's state: a
/// writable allowed dir that any place on a state path's resolution trail
/// lies in (the state itself, or a symlink or dir on the way to it), or that
/// lies inside the state. The message names the allowed dir, the state and
/// what moves it. Read-only allowed dirs are fine (a call may read compiled
/// code; it cannot change it). A state path must be absolute, without `..`.
pub fn refuse_exposed_state(dirs: &AllowedDirs, config: &SandboxConfig) -> Result<(), String> {
    let writable = Writable::of(dirs);
    for state in state_paths(config) {
        if !state.path.is_absolute()
            || state
                .path
                .components()
                .any(|c| c == std::path::Component::ParentDir)
        {
            return Err(format!(
                "toolhost's {} is at {}: it must be an absolute path without `..` ({})",
                state.what,
                state.path.display(),
                state.moved_by
            ));
        }
        // An NTFS stream or attribute spelling (`ws::$INDEX_ALLOCATION\x` is
        // `ws\x`) would slip past the comparisons below.
        if cfg!(windows)
            && state
                .path
                .components()
                .skip(1)
                .any(|c| c.as_os_str().to_string_lossy().contains(':'))
        {
            return Err(format!(
                "toolhost's {} is at {}: a component names an NTFS stream (`:`); name the dir plainly ({})",
                state.what,
                state.path.display(),
                state.moved_by
            ));
        }
        let trail = resolution_trail(&state.path);
        let resolved = trail.last().cloned().unwrap_or_else(|| state.path.clone());
        // A file with more than one name may have one in a writable dir,
        // which no path comparison can see (where its other names are
        // cannot be asked). Checked when the sandbox is built, as the rest.
        #[cfg(unix)]
        if let Ok(m) = std::fs::metadata(&resolved) {
            use std::os::unix::fs::MetadataExt;
            if m.is_file() && m.nlink() > 1 && dirs.as_slice().iter().any(|d| !d.read_only()) {
                return Err(format!(
                    "toolhost's {} {} has {} hard links: one may be in a writable allowed dir, where a tool could change it, and toolhost cannot tell where the others are. Give it a single name (copy it) ({})",
                    state.what,
                    state.path.display(),
                    m.nlink(),
                    state.moved_by
                ));
            }
        }
        let hit = trail
            .iter()
            .find_map(|place| writable.holding(place).map(|w| (w, "contains")))
            .or_else(|| writable.overlaps(&resolved).map(|w| (w, "is inside")));
        if let Some((d, how)) = hit {
            return Err(format!(
                "the writable allowed dir {} {how} toolhost's {} {}: a tool could plant what toolhost later loads. Allow a narrower dir, make it read-only (DIR:ro), or move the state elsewhere ({})",
                d.display(),
                state.what,
                state.path.display(),
                state.moved_by
            ));
        }
    }
    Ok(())
}

/// Refuses allowed dirs that would reach a protected path
/// (`protected`) of a writable allowed dir another way than through
/// that dir, where the backends could not tell it is protected: a writable
/// allowed dir inside an existing protected path (nested, or a bind mount of a
/// place in it), or a mount of a place inside one whose mount point lies in a
/// writable dir.
pub fn refuse_aliased_protected(
    dirs: &AllowedDirs,
    protected: &crate::protected::ProtectedPaths,
) -> Result<(), String> {
    if protected.is_empty() {
        return Ok(());
    }
    // The writable dirs and the mount table they were placed by: one read.
    let writable = Writable::of(dirs);
    #[cfg(target_os = "linux")]
    let mounts = writable.mount_table();
    for d in dirs.as_slice().iter().filter(|d| !d.read_only()) {
        for (_, raw) in protected.entries_raw() {
            let lexical: PathBuf = raw.iter().fold(d.path().to_path_buf(), |p, n| p.join(n));
            let Ok(place) = std::fs::canonicalize(&lexical) else {
                continue;
            };
            if let Some(w) = writable.overlaps(&place) {
                return Err(format!(
                    "the writable allowed dir {} lies inside the protected path {} of {} (protected_paths): a tool could change it there. Allow it read-only (DIR:ro), or drop it",
                    w.display(),
                    raw.join("/"),
                    d.path().display()
                ));
            }
            #[cfg(target_os = "linux")]
            if let Some((dev, pos)) = fs_position(&place, mounts) {
                for (mdev, root, point) in mounts {
                    // By path: a mount point outside every allowed dir's path
                    // is out of reach (Landlock walks the mount tree).
                    if *mdev == dev
                        && root.starts_with(&pos)
                        && point != &place
                        && let Some(w) = dirs
                            .as_slice()
                            .iter()
                            .find(|w| !w.read_only() && point.starts_with(w.path()))
                            .map(|w| w.path())
                    {
                        return Err(format!(
                            "{} (in the writable allowed dir {}) is a mount of a place inside the protected path {} of {} (protected_paths): a tool could change it there. Unmount it, or allow {} read-only (DIR:ro)",
                            point.display(),
                            w.display(),
                            raw.join("/"),
                            d.path().display(),
                            w.display()
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paths::AllowedDirSpec;
    use std::path::Path;

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
        if cache_base().is_some_and(|b| resolution_trail(&b).iter().any(|p| p.starts_with(&root))) {
            return;
        }
        refuse_exposed_state(&dirs(&root.join("ws"), false), &c).expect("sibling");
        // The audit log is state too.
        c.audit_log = Some(root.join("ws/audit.jsonl"));
        let e = refuse_exposed_state(&dirs(&root.join("ws"), false), &c).unwrap_err();
        assert!(e.contains("audit log") && e.contains("audit_log"), "{e}");
    }

    #[cfg(unix)]
    #[test]
    fn a_symlink_inside_the_workspace_leading_out_is_refused_and_dotdot_too() {
        let t = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(t.path()).expect("canonicalize");
        std::fs::create_dir_all(root.join("ws")).expect("mkdir");
        std::fs::create_dir_all(root.join("out")).expect("mkdir");
        // ws/cachelink -> out: resolves outside, but the tool can swap it.
        std::os::unix::fs::symlink(root.join("out"), root.join("ws/cachelink")).expect("ln");
        // other/l1 -> ws/l2 -> out: a link of the workspace in the middle.
        std::fs::create_dir_all(root.join("other")).expect("mkdir");
        std::os::unix::fs::symlink(root.join("out"), root.join("ws/l2")).expect("ln");
        std::os::unix::fs::symlink(root.join("ws/l2"), root.join("other/l1")).expect("ln");
        let mut c = SandboxConfig::default();
        for p in [root.join("ws/cachelink/wasm"), root.join("other/l1/wasm")] {
            c.wasm.cache_dir = Some(p.clone());
            let e = refuse_exposed_state(&dirs(&root.join("ws"), false), &c).unwrap_err();
            assert!(
                e.contains("contains toolhost's compile cache"),
                "{p:?}: {e}"
            );
        }
        c.wasm.cache_dir = Some(root.join("nonexist/../ws/wasm"));
        let e = refuse_exposed_state(&dirs(&root.join("ws"), false), &c).unwrap_err();
        assert!(e.contains("without `..`"), "{e}");
        // The trail itself handles `..` after a missing component as
        // create_dir_all does.
        let trail = resolution_trail(&root.join("nonexist/../ws/x"));
        assert!(trail.contains(&root.join("ws")), "{trail:?}");
        // Allowed twin: the link's target itself, reached directly.
        c.wasm.cache_dir = Some(root.join("out/wasm"));
        if cache_base().is_some_and(|b| resolution_trail(&b).iter().any(|p| p.starts_with(&root))) {
            return;
        }
        refuse_exposed_state(&dirs(&root.join("ws"), false), &c).expect("out of reach");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn places_are_compared_where_they_sit_in_their_filesystem() {
        let mounts = vec![
            ("8:1".to_string(), PathBuf::from("/"), PathBuf::from("/")),
            // /alias is a bind mount of /ws/sub.
            (
                "8:1".to_string(),
                PathBuf::from("/ws/sub"),
                PathBuf::from("/alias"),
            ),
        ];
        assert_eq!(
            fs_position(Path::new("/alias/c/x"), &mounts),
            Some(("8:1".into(), PathBuf::from("/ws/sub/c/x")))
        );
        assert_eq!(
            fs_position(Path::new("/ws/a"), &mounts),
            Some(("8:1".into(), PathBuf::from("/ws/a")))
        );
        assert!(!crate::reach::mount_table().is_empty());
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
