//! Protected paths in wasm guests (docs/src/attacks.md case 44; the rule is in
//! [`crate::protected`]). Held on Unix and Windows hosts.
//!
//! Three parts, the first two enforced by wasmtime-wasi's own permission
//! checks:
//! - **Directory handles.** A handle on a directory at or under an existing
//!   protected directory gets read-only permissions (`FsPerms::ReadOnly`).
//!   wasmtime-wasi checks them on every change made through the handle (create,
//!   open for writing, rename, link, symlink, unlink, rmdir, set times) and
//!   gives them to every handle opened under it. The call's sets are computed
//!   on first use (a call that changes nothing pays nothing). A cwd below an
//!   allowed dir is checked when the context is built (its preopen is then
//!   read-only), the other handles in the table before the first change, and
//!   a handle a guest opens right after the open (preview 1: every directory
//!   handle of the table; preview 2 and 3: the new one). Whether a
//!   directory is inside is decided on the host by identity
//!   ([`crate::sys::file_id`]): its physical parents are walked up (Unix: by `..`
//!   from the handle to `/`; Windows: the ancestors of the path the
//!   filesystem gives the handle now, links and 8.3 names resolved, up to an
//!   outermost writable allowed dir), so no name, symlink or `..` in the
//!   guest's path matters. What cannot be told counts as inside.
//! - **Changes by path.** Before a change, the parent of its final name is
//!   opened as a fresh handle (checked as above), and the change is made
//!   through that handle with the final name alone, so a symlink swapped into
//!   the path after the check cannot redirect it. The final name is refused
//!   when it is one of a protected path's names in the directory where that
//!   name lives (`.git` in a writable allowed dir, `hooks` in its `.git`, or
//!   the first missing name of an absent protected path), names compared as
//!   Windows reads them (`normalize`). On Windows, where an entry has other
//!   names (an 8.3 short name such as `GIT~1`), the entry a name that may be
//!   one finds ([`may_be_short_name`]), looked up as a Win32 path would
//!   (`GIT~1.` too: some host calls go through one), is also compared by
//!   identity with those protected names lead to. An open for writing
//!   follows a final symlink itself, hop by hop, and opens the last name
//!   without following.
//!
//! - **File descriptors.** A file opened for reading is not walked (it
//!   changes nothing), so one may be open on a file in `.git`; setting times
//!   through a file descriptor opened without write access is refused
//!   ([`Guard::refuses_times`]). Writes and resizes through it fail anyway.
//!
//! A final name that is not a plain name (`.`, `..`) names a directory that
//! exists, which no open for writing, create or rename can change: such calls
//! go on unchanged and the host refuses them.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use wasmtime::component::ResourceTable;
use wasmtime_wasi::filesystem::{Descriptor, Dir};

use crate::plan::ExecPlan;
use crate::protected::normalize;

/// A file's identity on the host ([`crate::sys::file_id`]).
pub(crate) type Id = crate::sys::file_id::FileId;

/// What one call protects, fixed when its context is built. Clones share it.
#[derive(Debug, Default, Clone)]
pub(crate) struct Guard {
    inner: Option<Arc<Mutex<Inner>>>,
}

#[derive(Debug, Default)]
struct Inner {
    /// The plan's allowed dirs and protected paths, until the sets below are
    /// computed (on first use: a call that changes nothing pays nothing).
    setup: Option<(
        std::sync::Arc<[crate::plan::Mount]>,
        crate::protected::ProtectedPaths,
    )>,
    /// Whether the handles made before the first check (the preopens) have
    /// been restricted.
    swept: bool,
    /// Existing protected directories (symlinks followed).
    dirs: HashSet<Id>,
    /// (directory, normalized name) pairs no change may name.
    names: HashSet<(Id, String)>,
    /// The same, keyed by the identity hash preview 1 reports as `ino`.
    names_hash: HashSet<(u64, String)>,
    /// The entries those names find, unfollowed, where they exist (Windows:
    /// a short name finds the same entry under another name).
    entries: HashSet<Id>,
    /// The same, by the identity hash preview 1 reports as `ino`.
    entries_hash: HashSet<u64>,
    /// Directories already walked: whether each is inside.
    walked: HashMap<WalkKey, bool>,
    /// Windows: where the outermost writable allowed dirs are (their final
    /// paths, compared as `paths::path_key` spells them): a walk up
    /// stops there, since no protected dir lies above one.
    #[cfg(windows)]
    roots: Vec<std::path::PathBuf>,
}

/// What a walk up is remembered by: a directory's identity; on Windows with
/// its final path too, since identities there are not always unique (Wine
/// gives every non-root Unix filesystem the volume serial 0, and ReFS file
/// indexes are 128-bit).
#[cfg(not(windows))]
type WalkKey = Id;
#[cfg(windows)]
type WalkKey = (Id, std::path::PathBuf);

/// Whether `m` is a read-only allowed dir inside a writable one.
fn ro_inside_writable(m: &crate::plan::Mount, mounts: &[crate::plan::Mount]) -> bool {
    m.read_only
        && mounts
            .iter()
            .any(|w| !w.read_only && w.path != m.path && m.path.starts_with(&w.path))
}

/// The identity hash wasmtime-wasi reports as a preview-1 `ino` and a
/// preview-2 `metadata-hash` (its `MetadataHashValue::new`: the standard
/// library's default hasher over the pair [`crate::sys::file_id`] reads, on Unix
/// and Windows alike). The contract tests that rename `.git` from a
/// preview-1 guest fail if this ever diverges.
pub(crate) fn guest_hash(id: Id) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    id.hash(&mut h);
    h.finish()
}

impl Guard {
    /// The guard of `plan`: nothing when no allowed dir is writable, or
    /// when nothing is protected and no read-only dir lies in a writable one.
    pub(crate) fn new(plan: &ExecPlan) -> Self {
        if !plan.mounts.iter().any(|m| !m.read_only) {
            return Guard::default();
        }
        if plan.protected.is_empty()
            && !plan
                .mounts
                .iter()
                .any(|m| ro_inside_writable(m, &plan.mounts))
        {
            return Guard::default();
        }
        let inner = Inner {
            setup: Some((plan.mounts.clone(), plan.protected.clone())),
            ..Inner::default()
        };
        Guard {
            inner: Some(Arc::new(Mutex::new(inner))),
        }
    }

    /// Whether anything is protected.
    pub(crate) fn active(&self) -> bool {
        self.inner.is_some()
    }

    fn lock(&self) -> Option<MutexGuard<'_, Inner>> {
        // A panic while locked leaves sets that are still valid.
        let mut i = self
            .inner
            .as_ref()
            .map(|m| m.lock().unwrap_or_else(|e| e.into_inner()))?;
        if let Some((mounts, protected)) = i.setup.take() {
            i.compute(&mounts, &protected);
        }
        Some(i)
    }

    /// Before the first check of a call: every directory handle the guest
    /// already holds (its preopens: the cwd may lie inside `.git`) is
    /// restricted like one it opens later.
    pub(crate) fn sweep_once(&self, table: &mut ResourceTable) {
        let first = self
            .lock()
            .is_some_and(|mut i| !std::mem::replace(&mut i.swept, true));
        if first {
            self.restrict_all(table);
        }
    }

    /// Whether the directory open as `f` is at or under a protected one.
    pub(crate) fn inside(&self, f: &std::fs::File) -> bool {
        self.lock().is_some_and(|mut i| i.inside(f))
    }

    /// Makes `d` read-only if it is inside a protected directory.
    pub(crate) fn restrict(&self, d: &mut Dir) {
        if !d.perms.write_not_permitted() && self.inside(&d.dir) {
            d.perms = wasmtime_wasi::FsPerms::ReadOnly;
        }
    }

    /// [`restrict`](Self::restrict) on every directory handle of `table`.
    pub(crate) fn restrict_all(&self, table: &mut ResourceTable) {
        let Some(mut i) = self.lock() else {
            return;
        };
        for entry in table.iter_mut() {
            if let Some(Descriptor::Dir(d)) = entry.downcast_mut::<Descriptor>()
                && !d.perms.write_not_permitted()
                && i.inside(&d.dir)
            {
                d.perms = wasmtime_wasi::FsPerms::ReadOnly;
            }
        }
    }

    /// Whether setting times through the descriptor `d` is refused: `d` is a
    /// file opened without write access, and something is protected. Every
    /// open for writing goes through the walk (refused inside a protected
    /// dir, or on a protected name); an open for reading does not, since it
    /// changes nothing, so a read-only file descriptor may name a file in
    /// `.git`. Its times are the one change it could still make: writes and
    /// resizes through it fail on the host.
    pub(crate) fn refuses_times(&self, d: &Descriptor) -> bool {
        self.active()
            && matches!(d, Descriptor::File(f) if !f.open_mode.contains(wasmtime_wasi::OpenMode::WRITE))
    }

    /// Whether a change may not name `name` in the directory open as `dir`.
    pub(crate) fn named(&self, dir: &std::fs::File, name: &str) -> bool {
        let Some(i) = self.lock() else {
            return false;
        };
        let Some(id) = identity(dir) else {
            return true; // cannot tell: refuse
        };
        if i.names.contains(&(id, normalize(name))) {
            return true;
        }
        // Windows: the entry the name finds, by identity (`GIT~1` is `.git`),
        // looked up as a Win32 path would (`GIT~1.` too); cannot tell: refuse.
        #[cfg(windows)]
        if may_be_short_name(name) && !i.entries.is_empty() {
            let base = crate::protected::win32_base(name);
            return match crate::sys::file_id::of_entry(dir, base) {
                Ok(Some(e)) => i.entries.contains(&e),
                Ok(None) => false,
                Err(_) => true,
            };
        }
        false
    }

    /// [`named`](Self::named) for a directory known by its preview-1 `ino`.
    pub(crate) fn named_hash(&self, hash: u64, name: &str) -> bool {
        self.lock()
            .is_some_and(|i| i.names_hash.contains(&(hash, normalize(name))))
    }

    /// Whether the entry whose preview-1 `ino` is `hash` (looked up without
    /// following) is one a protected name finds: on Windows the same entry
    /// has other names (8.3 short names), which [`named_hash`](Self::named_hash)
    /// cannot see.
    pub(crate) fn entry_named_hash(&self, hash: u64) -> bool {
        self.lock().is_some_and(|i| i.entries_hash.contains(&hash))
    }

    /// Whether entries have other names on this host (Windows), which
    /// [`entry_named_hash`](Self::entry_named_hash) must check.
    pub(crate) const ENTRIES_HAVE_OTHER_NAMES: bool = cfg!(windows);
}

impl Inner {
    /// The sets of the call, from its allowed dirs and protected paths.
    fn compute(
        &mut self,
        mounts: &[crate::plan::Mount],
        protected: &crate::protected::ProtectedPaths,
    ) {
        // A read-only allowed dir inside a writable one is held like a
        // protected dir: the writable one's preopen (or the cwd's `.`) must
        // not reach it for writing, nor rename it away.
        for m in mounts.iter().filter(|m| ro_inside_writable(m, mounts)) {
            if let Ok(id) = crate::sys::file_id::of_path(&m.path) {
                self.dirs.insert(id);
            }
            if let Some(outer) = crate::backend::protect::outermost_writable(mounts, &m.path) {
                self.name_chain(&m.path, outer);
            }
        }
        #[cfg(windows)]
        {
            self.roots = mounts
                .iter()
                .filter(|m| {
                    !m.read_only
                        && crate::backend::protect::outermost_writable(mounts, &m.path).is_none()
                })
                .filter_map(|m| crate::sys::file_id::final_path_of(&m.path).ok())
                .map(|p| crate::paths::path_key(&p))
                .collect();
        }
        for m in mounts.iter().filter(|m| !m.read_only) {
            self.add_root(&m.path, mounts, protected);
            // A writable dir inside another: its name, and that of each dir
            // on the way to it from the outer one, cannot be changed
            // (renaming one would move its protected paths away).
            if let Some(outer) = crate::backend::protect::outermost_writable(mounts, &m.path) {
                self.name_chain(&m.path, outer);
            }
        }
    }

    /// Records what the protected paths are in the writable dir `root`:
    /// each existing protected dir (where it leads), and as name rules each
    /// name on the way to it, and to each symlink met, from the outermost
    /// writable dir holding it (`backend::protect::resolve_entry`).
    fn add_root(
        &mut self,
        root: &std::path::Path,
        mounts: &[crate::plan::Mount],
        protected: &crate::protected::ProtectedPaths,
    ) {
        for (_, raw) in protected.entries_raw() {
            let r = crate::backend::protect::resolve_entry(root, raw);
            if !crate::backend::protect::honoured(mounts, &r.place) {
                continue; // a link to `/` or `..`: no repository to keep
            }
            if r.exists
                && std::fs::metadata(&r.place).is_ok_and(|m| m.is_dir())
                && let Ok(id) = crate::sys::file_id::of_path(&r.place)
            {
                self.dirs.insert(id);
            }
            for item in r.links.iter().chain(std::iter::once(&r.place)) {
                let outer =
                    crate::backend::protect::outermost_writable(mounts, item).unwrap_or(root);
                self.name_chain(item, outer);
            }
        }
    }

    /// Name rules for `item` and each dir on the way to it from `outer`
    /// (which holds it): none of those names may change in its parent.
    /// Where entries have other names (Windows), the entries themselves are
    /// recorded too, unfollowed.
    fn name_chain(&mut self, item: &std::path::Path, outer: &std::path::Path) {
        let mut cur = item.to_path_buf();
        while cur.as_path() != outer && cur.starts_with(outer) {
            let (Some(parent), Some(name)) = (cur.parent(), cur.file_name()) else {
                break;
            };
            if let Ok(id) = crate::sys::file_id::of_path(parent) {
                let n = normalize(&name.to_string_lossy());
                self.names.insert((id, n.clone()));
                self.names_hash.insert((guest_hash(id), n));
            }
            if Guard::ENTRIES_HAVE_OTHER_NAMES
                && let Ok(id) = crate::sys::file_id::of_path_unfollowed(&cur)
            {
                self.entries.insert(id);
                self.entries_hash.insert(guest_hash(id));
            }
            cur = parent.to_path_buf();
        }
    }

    /// Walks up from `f` (physically) looking for a protected directory:
    /// on Unix by `..` to `/` (a parent that cannot be opened ends the
    /// walk), on Windows through the ancestors of its final path up to an
    /// outermost writable allowed dir.
    fn inside(&mut self, f: &std::fs::File) -> bool {
        if self.dirs.is_empty() {
            return false;
        }
        let Some(start) = identity(f) else {
            return true;
        };
        #[cfg(not(windows))]
        let key = start;
        #[cfg(windows)]
        let key = match crate::sys::file_id::final_path(f) {
            Ok(p) => (start, p),
            Err(_) => return true, // cannot tell: inside
        };
        if let Some(&b) = self.walked.get(&key) {
            return b;
        }
        #[cfg(not(windows))]
        let found = walk_up(f, start, &self.dirs);
        #[cfg(windows)]
        let found = walk_up(&key.1, start, &self.dirs, &self.roots);
        self.walked.insert(key, found);
        found
    }
}

fn identity(f: &std::fs::File) -> Option<Id> {
    crate::sys::file_id::of_file(f).ok()
}

#[cfg(unix)]
fn walk_up(f: &std::fs::File, start: Id, dirs: &HashSet<Id>) -> bool {
    use rustix::fs::{Mode, OFlags};
    use std::os::fd::{AsFd, OwnedFd};
    #[cfg(target_os = "linux")]
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    #[cfg(not(target_os = "linux"))]
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let mut id = start;
    let mut cur: Option<OwnedFd> = None;
    // Deeper than any path the host resolves (PATH_MAX 4096: 2048 levels).
    for _ in 0..4096 {
        if dirs.contains(&id) {
            return true;
        }
        let fd = cur.as_ref().map_or(f.as_fd(), |o| o.as_fd());
        let Ok(up) = rustix::fs::openat(fd, "..", flags, Mode::empty()) else {
            return false;
        };
        let Ok(st) = rustix::fs::fstat(&up) else {
            return false;
        };
        #[allow(clippy::unnecessary_cast)]
        let next = (st.st_dev as u64, st.st_ino as u64);
        if next == id {
            return false; // `/`
        }
        id = next;
        cur = Some(up);
    }
    true
}

/// Windows: the ancestors of `path`, the path the filesystem gives the
/// handle now (links, junctions and short names resolved), each opened and
/// compared by identity, up to an outermost writable allowed dir (`roots`):
/// no protected dir lies above one, and the dirs above it may not even be
/// open to toolhost. A guest cannot move a protected dir or a dir on the way
/// to one (name rules), so the path cannot lead past one unseen; an
/// ancestor below a root that cannot be opened counts as inside.
#[cfg(windows)]
fn walk_up(
    path: &std::path::Path,
    start: Id,
    dirs: &HashSet<Id>,
    roots: &[std::path::PathBuf],
) -> bool {
    if dirs.contains(&start) {
        return true;
    }
    for up in path.ancestors().skip(1) {
        if roots.contains(&crate::paths::path_key(up)) {
            return false;
        }
        match crate::sys::file_id::of_path(up) {
            Ok(id) if dirs.contains(&id) => return true,
            Ok(_) => {}
            Err(_) => return true,
        }
    }
    false
}

#[cfg(not(any(unix, windows)))]
fn walk_up(_: &std::fs::File, _: Id, _: &HashSet<Id>) -> bool {
    false
}

/// Whether `name` may be an 8.3 short name, another name of an entry: on
/// Windows, a name with a `~` (every generated short name has one: NTFS's
/// `GIT~1`, Wine's `_GIT~IBP`; only an administrator can set another).
/// Elsewhere an entry has one name.
pub(crate) fn may_be_short_name(name: &str) -> bool {
    Guard::ENTRIES_HAVE_OTHER_NAMES && name.contains('~')
}

/// A guest path with `/` for every separator the host reads: on Windows
/// `\` separates names too, so the guard reads `a\..\.git` as the host
/// will. Elsewhere the path as it is.
pub(crate) fn slashes(path: &str) -> std::borrow::Cow<'_, str> {
    if cfg!(windows) && path.contains('\\') {
        std::borrow::Cow::Owned(path.replace('\\', "/"))
    } else {
        std::borrow::Cow::Borrowed(path)
    }
}

/// A guest path split for a change: the parent to open (if any: `None` means
/// the dir handle itself) and the final name, trailing slashes kept. `None`
/// when the final component is not a plain name (see the module doc), or the
/// path is absolute or empty. The path has `/` separators ([`slashes`]).
pub(crate) fn split(path: &str) -> Option<(Option<&str>, &str)> {
    if path.is_empty() || path.starts_with('/') {
        return None;
    }
    let trimmed = path.trim_end_matches('/');
    if trimmed.is_empty() {
        return None;
    }
    let (parent, last) = match trimmed.rfind('/') {
        Some(i) => (Some(&path[..i]), &trimmed[i + 1..]),
        None => (None, trimmed),
    };
    if last == "." || last == ".." {
        return None;
    }
    let name = match parent {
        Some(p) => &path[p.len() + 1..],
        None => path,
    };
    Some((parent, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_split_into_parent_and_final_name() {
        assert_eq!(split("x"), Some((None, "x")));
        assert_eq!(split("x/"), Some((None, "x/")));
        assert_eq!(split("a/b/c"), Some((Some("a/b"), "c")));
        assert_eq!(split("a//c"), Some((Some("a/"), "c")));
        assert_eq!(split("a/b/"), Some((Some("a"), "b/")));
        assert_eq!(split("a/.."), None);
        assert_eq!(split("."), None);
        assert_eq!(split("a/./"), None);
        assert_eq!(split("/etc/x"), None);
        assert_eq!(split(""), None);
    }

    #[test]
    fn backslashes_separate_names_where_the_host_reads_them_so() {
        let p = slashes("a\\..\\.git");
        if cfg!(windows) {
            assert_eq!(p, "a/../.git");
            assert_eq!(split(&p), Some((Some("a/.."), ".git")));
            assert_eq!(split(&slashes("\\\\?\\C:\\x")), None);
        } else {
            assert_eq!(p, "a\\..\\.git");
            assert_eq!(split(&p), Some((None, "a\\..\\.git")));
        }
        assert_eq!(slashes("a/b"), "a/b");
    }
}
