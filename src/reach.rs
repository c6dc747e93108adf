//! Where a host path leads, and which writable allowed dir can reach it.
//!
//! Invariant: a place counts as out of a tool's reach only if no place on
//! its resolution trail is in a writable allowed dir, by path or (Linux) by
//! its position in its filesystem: a symlink or a bind mount inside a
//! writable dir that leads elsewhere could be swapped by the tool after any
//! check of where it leads. Used by the state checks
//! ([`crate::state_dirs`]), the shell policy's `PATH` check and the direct
//! backend's mounts; it reads the host (`/proc/self/mountinfo`, links) and
//! changes nothing.

use std::path::{Path, PathBuf};

use crate::paths::AllowedDirs;
use crate::paths::within;

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
pub(crate) fn fs_position(
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
///
/// `mounts` is the mount table ([`mount_table`], read once for many).
#[cfg(target_os = "linux")]
pub(crate) fn mount_aliases_in(
    mounts: &[(String, PathBuf, PathBuf)],
    canonical: &Path,
) -> Vec<PathBuf> {
    let Some((dev, pos)) = fs_position(canonical, mounts) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = Vec::new();
    for (d, root, point) in mounts {
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
pub(crate) fn mount_table() -> Vec<(String, PathBuf, PathBuf)> {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            Some((
                f.get(2)?.to_string(),
                unescape_mount_path(f.get(3)?),
                unescape_mount_path(f.get(4)?),
            ))
        })
        .collect()
}

/// A path field of `/proc/self/mountinfo`, its octal escapes (`\040` for a
/// space) undone.
#[cfg(target_os = "linux")]
pub(crate) fn unescape_mount_path(s: &str) -> PathBuf {
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

    /// The mount table read when these were looked at.
    #[cfg(target_os = "linux")]
    pub(crate) fn mount_table(&self) -> &[(String, PathBuf, PathBuf)] {
        &self.mounts
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
