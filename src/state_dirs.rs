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

/// Every place the resolution of the absolute path `p` passes through, in
/// order: each component as it is reached (a symlink before it is followed),
/// then what the symlinks lead to; the last is where `p` resolves. Missing
/// components are taken as they are written, and `..` goes up from the place
/// reached so far (as `create_dir_all` and the kernel do). At most 40
/// symlinks are followed.
///
/// A path is out of a tool's reach only if no place on its trail is: a
/// symlink inside a writable dir that leads elsewhere could be swapped by the
/// tool after any check of where it leads.
pub fn resolution_trail(p: &Path) -> Vec<PathBuf> {
    use std::collections::VecDeque;
    use std::path::Component;
    let mut todo: VecDeque<std::ffi::OsString> = VecDeque::new();
    let mut cur = PathBuf::new();
    let mut trail = Vec::new();
    let mut links = 0;
    let push_path = |todo: &mut VecDeque<std::ffi::OsString>, cur: &mut PathBuf, path: &Path| {
        let mut comps = Vec::new();
        for c in path.components() {
            match c {
                Component::Prefix(_) => {
                    *cur = PathBuf::from(c.as_os_str());
                    comps.clear();
                }
                // A root keeps the prefix before it (`C:` then `\`), and a
                // link target rooted without one (`\x` on Windows) stays on
                // the drive it was reached from.
                Component::RootDir => {
                    let mut root: PathBuf = cur
                        .components()
                        .next()
                        .filter(|first| matches!(first, Component::Prefix(_)))
                        .map(|first| PathBuf::from(first.as_os_str()))
                        .unwrap_or_default();
                    root.push(c.as_os_str());
                    *cur = root;
                    comps.clear();
                }
                other => comps.push(other.as_os_str().to_os_string()),
            }
        }
        for c in comps.into_iter().rev() {
            todo.push_front(c);
        }
    };
    push_path(&mut todo, &mut cur, p);
    while let Some(c) = todo.pop_front() {
        if c == "." {
            continue;
        }
        if c == ".." {
            cur.pop();
            continue;
        }
        let next = cur.join(&c);
        trail.push(next.clone());
        match std::fs::symlink_metadata(&next) {
            Ok(m) if m.file_type().is_symlink() && links < 40 => {
                links += 1;
                match std::fs::read_link(&next) {
                    Ok(target) => push_path(&mut todo, &mut cur, &target),
                    Err(_) => cur = next,
                }
            }
            _ => cur = next,
        }
    }
    trail.push(cur);
    trail
}

/// Where a path sits in its filesystem: the device and the path from the
/// filesystem's root (Linux, from `/proc/self/mountinfo`), so that a place
/// reached through a bind mount of any dir (a whole workspace, or a subdir
/// of it) is seen where it really is.
#[cfg(target_os = "linux")]
fn fs_position(
    canonical: &Path,
    mounts: &[(String, PathBuf, PathBuf)],
) -> Option<(String, PathBuf)> {
    // The mount with the longest mount point holding the path (the last one
    // listed wins among equals: it is mounted over the others).
    let (dev, root, point) = mounts
        .iter()
        .filter(|(_, _, point)| canonical.starts_with(point))
        .max_by_key(|(_, _, point)| point.components().count())?;
    let rest = canonical.strip_prefix(point).ok()?;
    Some((dev.clone(), root.join(rest)))
}

/// Every other path to the place `canonical` (a resolved path) or into it:
/// the same spot through each other mount of its filesystem that holds it (a
/// bind mount of a dir above it), and the mount point of each mount of a dir
/// inside it. Linux; the mount points listed are those of
/// toolhost's mount namespace.
#[cfg(target_os = "linux")]
pub(crate) fn mount_aliases(canonical: &Path) -> Vec<PathBuf> {
    let mounts = mount_table();
    let Some((dev, pos)) = fs_position(canonical, &mounts) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = Vec::new();
    for (d, root, point) in &mounts {
        if *d != dev {
            continue;
        }
        // A mount of a dir above the place shows it under its mount point;
        // a mount of a dir inside it shows that part of it at the point.
        let alias = match pos.strip_prefix(root) {
            Ok(rest) => point.join(rest),
            Err(_) if root.starts_with(&pos) => point.clone(),
            Err(_) => continue,
        };
        if alias != canonical && !out.contains(&alias) {
            out.push(alias);
        }
    }
    out
}

/// `/proc/self/mountinfo` as (device, root in its filesystem, mount point).
#[cfg(target_os = "linux")]
fn mount_table() -> Vec<(String, PathBuf, PathBuf)> {
    // Octal escapes (`\040` for a space) in the two path fields.
    fn unescape(s: &str) -> PathBuf {
        let b = s.as_bytes();
        let mut out = Vec::with_capacity(b.len());
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'\\'
                && i + 3 < b.len()
                && let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8)
            {
                out.push(v);
                i += 4;
                continue;
            }
            out.push(b[i]);
            i += 1;
        }
        PathBuf::from(std::ffi::OsString::from(
            <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(&out),
        ))
    }
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            Some((
                f.get(2)?.to_string(),
                unescape(f.get(3)?),
                unescape(f.get(4)?),
            ))
        })
        .collect()
}

pub(crate) use crate::paths::within;

/// The writable allowed dirs of `dirs`: their paths and, on Linux, where
/// they sit in their filesystems (see [`fs_position`]), so that another path
/// to the same place (a bind mount of the dir or of a dir inside it) is seen
/// too.
pub(crate) struct Writable {
    paths: Vec<PathBuf>,
    #[cfg(target_os = "linux")]
    mounts: Vec<(String, PathBuf, PathBuf)>,
    #[cfg(target_os = "linux")]
    positions: Vec<Option<(String, PathBuf)>>,
}

impl Writable {
    /// The writable dirs among `paths` (canonical paths).
    pub(crate) fn new<'a>(paths: impl IntoIterator<Item = &'a Path>) -> Self {
        let paths: Vec<PathBuf> = paths.into_iter().map(Path::to_path_buf).collect();
        #[cfg(target_os = "linux")]
        {
            let mounts = mount_table();
            let positions = paths.iter().map(|p| fs_position(p, &mounts)).collect();
            Writable {
                paths,
                mounts,
                positions,
            }
        }
        #[cfg(not(target_os = "linux"))]
        Writable { paths }
    }

    /// The writable dirs of a sandbox.
    pub(crate) fn of(dirs: &AllowedDirs) -> Self {
        Self::new(
            dirs.as_slice()
                .iter()
                .filter(|d| !d.read_only())
                .map(|d| d.path()),
        )
    }

    /// The writable dir `place` is in (or is), if any.
    pub(crate) fn holding(&self, place: &Path) -> Option<&Path> {
        if let Some(w) = self.paths.iter().find(|w| within(place, w)) {
            return Some(w);
        }
        // Windows: the place's existing dir as the filesystem names it (long
        // names for 8.3 ones, junctions followed).
        #[cfg(windows)]
        {
            let (dir, name) = (place.parent()?, place.file_name()?);
            let real = std::fs::canonicalize(dir).ok()?.join(name);
            if let Some(w) = self.paths.iter().find(|w| within(&real, w)) {
                return Some(w);
            }
        }
        #[cfg(target_os = "linux")]
        {
            // The place as its filesystem sees it: its existing part
            // canonicalized (a symlink at its end is a place of its own).
            let (dir, name) = (place.parent()?, place.file_name()?);
            let real = std::fs::canonicalize(dir).ok()?.join(name);
            let (dev, at) = fs_position(&real, &self.mounts)?;
            if let Some(i) = self.positions.iter().position(|w| {
                w.as_ref()
                    .is_some_and(|(wdev, wat)| *wdev == dev && at.starts_with(wat))
            }) {
                return Some(&self.paths[i]);
            }
        }
        None
    }

    /// Whether `dir` (canonical) is a writable dir or lies inside one, or
    /// holds one (`inside = false`): by path and by filesystem position.
    pub(crate) fn overlaps(&self, dir: &Path) -> Option<&Path> {
        if let Some(w) = self.paths.iter().find(|w| within(w, dir)) {
            return Some(w);
        }
        #[cfg(windows)]
        if let Ok(real) = std::fs::canonicalize(dir)
            && let Some(w) = self.paths.iter().find(|w| within(w, &real))
        {
            return Some(w);
        }
        #[cfg(target_os = "linux")]
        {
            let (dev, at) = fs_position(dir, &self.mounts)?;
            if let Some(i) = self.positions.iter().position(|w| {
                w.as_ref()
                    .is_some_and(|(wdev, wat)| *wdev == dev && wat.starts_with(&at))
            }) {
                return Some(&self.paths[i]);
            }
        }
        None
    }

    /// The first place on `p`'s resolution trail that a writable dir holds,
    /// and that dir.
    pub(crate) fn on_trail(&self, p: &Path) -> Option<(PathBuf, &Path)> {
        resolution_trail(p)
            .into_iter()
            .find_map(|place| self.holding(&place).map(|w| (place.clone(), w)))
    }
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
    let writable = Writable::of(dirs);
    #[cfg(target_os = "linux")]
    let mounts = mount_table();
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
            if let Some((dev, pos)) = fs_position(&place, &mounts) {
                for (mdev, root, point) in &mounts {
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
        assert!(!mount_table().is_empty());
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
