//! The only resolver of agent-supplied paths.
//!
//! Invariant: every access on behalf of an agent goes through a `cap_std::fs::Dir`
//! opened on an allowed dir, with a path relative to it. cap-std resolves each
//! component itself and refuses any step (`..`, an absolute or escaping symlink)
//! that would leave the dir, at the moment of the access. A symlink swapped in
//! between [`AllowedDirs::resolve`] and the open therefore cannot lead outside:
//! the open fails instead. No `std::fs` call ever sees an agent's path.

use std::borrow::Cow;
use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use cap_std::ambient_authority;
use cap_std::fs::Dir;

/// A regular file as one `stat` that did not follow a symlink saw it:
/// enough to tell whether it changed since (the fields of the wasm
/// engine's key of a loaded tool).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    pub(crate) size: u64,
    pub(crate) mtime_ns: i128,
    pub(crate) ctime_ns: i128,
}

impl FileStamp {
    /// The stamp of what `st` describes, if it is a regular file.
    #[cfg(unix)]
    // `st_dev` and `st_ino` are `u64` on Linux, not on every Unix.
    #[allow(clippy::unnecessary_cast)]
    pub(crate) fn of_stat(st: &rustix::fs::Stat) -> Option<Self> {
        let file = rustix::fs::FileType::from_raw_mode(st.st_mode).is_file();
        file.then(|| FileStamp {
            dev: st.st_dev as u64,
            ino: st.st_ino as u64,
            size: st.st_size as u64,
            mtime_ns: st.st_mtime as i128 * 1_000_000_000 + st.st_mtime_nsec as i128,
            ctime_ns: st.st_ctime as i128 * 1_000_000_000 + st.st_ctime_nsec as i128,
        })
    }
}

/// How an allowed dir is given: a host path, whether tools may write in it,
/// and the path tools see it at.
///
/// Defaults: read-write, and seen at its own (canonical) host path in every
/// backend. A guest path (`HOST::GUEST`, as wasmtime's `--dir` spells it)
/// presents it elsewhere: `wasm` preopens it under that name and `docker`
/// mounts it there; `direct`, which runs native programs at host paths,
/// refuses calls while a dir is mapped. Agents then name it (and the cwd)
/// by the guest path only, and no message shows them the host path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedDirSpec {
    /// Host path of the dir. It is canonicalized when the sandbox is built.
    pub path: PathBuf,
    /// Whether the dir is read-only for tools.
    pub read_only: bool,
    /// Where tools see it: an absolute, normalized path (`/`, `/data`);
    /// `None` (the default): at its canonical host path.
    pub guest: Option<PathBuf>,
}

impl AllowedDirSpec {
    /// A read-write dir.
    pub fn read_write(path: impl Into<PathBuf>) -> Self {
        AllowedDirSpec {
            path: path.into(),
            read_only: false,
            guest: None,
        }
    }

    /// A read-only dir.
    pub fn read_only(path: impl Into<PathBuf>) -> Self {
        AllowedDirSpec {
            path: path.into(),
            read_only: true,
            guest: None,
        }
    }

    /// The same dir, seen by tools at `guest` (checked when the sandbox is
    /// built: absolute, without `.`, `..`, empty components or a trailing
    /// slash).
    pub fn at(mut self, guest: impl Into<PathBuf>) -> Self {
        self.guest = Some(guest.into());
        self
    }

    /// Parses the CLI form `HOST[::GUEST][:ro|:rw]`: `PATH`, `PATH:ro`,
    /// `PATH::/`, `PATH::/data:ro`. The first `::` separates the guest path.
    pub fn parse(s: &str) -> Self {
        let (rest, read_only) = if let Some(p) = s.strip_suffix(":ro") {
            (p, true)
        } else if let Some(p) = s.strip_suffix(":rw") {
            (p, false)
        } else {
            (s, false)
        };
        let (host, guest) = match rest.split_once("::") {
            Some((h, g)) => (h, Some(PathBuf::from(g))),
            None => (rest, None),
        };
        AllowedDirSpec {
            path: PathBuf::from(host),
            read_only,
            guest,
        }
    }
}

impl<P: Into<PathBuf>> From<P> for AllowedDirSpec {
    fn from(p: P) -> Self {
        AllowedDirSpec::read_write(p)
    }
}

/// Whether `inner`, if it is seen below `outer`'s guest path, lies at the
/// same place below `outer` on the host (true when it is not seen below it).
fn nests_alike(outer: &AllowedDir, inner: &AllowedDir) -> bool {
    match inner.guest_path().strip_prefix(outer.guest_path()) {
        Ok(rest) if !rest.as_os_str().is_empty() => inner.path == outer.path.join(rest),
        _ => true,
    }
}

/// Why `guest` is not a usable guest path, if it is not.
fn guest_path_problem(guest: &Path) -> Option<&'static str> {
    let Some(s) = guest.to_str() else {
        return Some("is not valid UTF-8");
    };
    if !s.starts_with('/') {
        return Some("is not absolute (it must start with `/`)");
    }
    if s.contains('\0') {
        return Some("contains a NUL byte");
    }
    if s == "/" {
        return None;
    }
    if s.ends_with('/') {
        return Some("ends with `/`");
    }
    if s[1..]
        .split('/')
        .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return Some("has an empty, `.` or `..` component");
    }
    None
}

/// One allowed dir: its canonical host path, the path tools see it at, and
/// the capability handle on it.
#[derive(Debug, Clone)]
pub struct AllowedDir {
    path: PathBuf,
    guest: Option<PathBuf>,
    read_only: bool,
    dir: Arc<Dir>,
}

impl AllowedDir {
    /// Canonical absolute host path.
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// The path tools and agents see it at: its guest path when it has one,
    /// else its host path.
    pub fn guest_path(&self) -> &Path {
        self.guest.as_deref().unwrap_or(&self.path)
    }
    /// Whether it is seen at a path other than its host path.
    pub fn is_mapped(&self) -> bool {
        self.guest.is_some()
    }
    /// Whether tools may only read in it.
    pub fn read_only(&self) -> bool {
        self.read_only
    }
    /// The capability handle: the only way to reach files below it.
    pub fn dir(&self) -> &Dir {
        &self.dir
    }
    /// The same handle, shared.
    pub fn shared_dir(&self) -> Arc<Dir> {
        self.dir.clone()
    }
}

/// Why a path was refused. Messages never contain host paths outside the sandbox.
#[derive(Debug, thiserror::Error)]
pub enum PathError {
    /// The empty string is not a path.
    #[error("empty path")]
    Empty,
    /// NUL bytes cannot appear in a path.
    #[error("path contains a NUL byte")]
    Nul,
    /// URLs are not paths.
    #[error("{0:?} is a URL, not a path")]
    Url(String),
    /// The path leads outside every allowed dir.
    #[error("{0:?} is outside the sandbox")]
    Outside(String),
    /// Some component does not exist (and is not the last one).
    #[error("{0:?}: no such file or directory")]
    NotFound(String),
    /// Any other failure while resolving, with the OS reason.
    #[error("{path:?}: {reason}")]
    Io {
        /// The path as the agent gave it.
        path: String,
        /// The OS error, without host paths.
        reason: String,
    },
}

/// A path known to lie inside an allowed dir, at the time it was resolved.
///
/// Use it through [`AllowedDirs::dir_of`] and [`ResolvedPath::relative`]: the
/// access itself is confined again by cap-std.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedPath {
    root: usize,
    rel: PathBuf,
    host_path: PathBuf,
    /// `None` when the allowed dir is not mapped: the host path then.
    guest_path: Option<PathBuf>,
    read_only: bool,
}

impl ResolvedPath {
    /// Index of the allowed dir it lies in (the most specific one).
    pub fn root_index(&self) -> usize {
        self.root
    }
    /// Path relative to that allowed dir, symlinks resolved; empty for the dir itself.
    pub fn relative(&self) -> &Path {
        &self.rel
    }
    /// Absolute host path.
    pub fn host_path(&self) -> &Path {
        &self.host_path
    }
    /// The path tools see: below the allowed dir's guest path (the host path
    /// when the dir is not mapped). The one to show an agent.
    pub fn guest_path(&self) -> &Path {
        self.guest_path.as_deref().unwrap_or(&self.host_path)
    }
    /// Whether the allowed dir it lies in is read-only.
    pub fn read_only(&self) -> bool {
        self.read_only
    }
    /// Its allowed dir's index, its path below that dir and its host path,
    /// taken without a copy.
    pub(crate) fn into_parts(self) -> (usize, PathBuf, PathBuf) {
        (self.root, self.rel, self.host_path)
    }
}

/// The set of allowed dirs of one sandbox.
#[derive(Debug, Clone)]
pub struct AllowedDirs {
    dirs: Vec<AllowedDir>,
    /// Whether some dir lies within another (a path below the outer one
    /// may then belong to the inner).
    nested: bool,
}

/// Why the allowed dirs themselves could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum AllowedDirsError {
    /// A guest path that cannot be used.
    #[error("allowed directory {path}: guest path {guest:?} {reason}")]
    GuestPath {
        /// The host path as given by the operator.
        path: PathBuf,
        /// The guest path as given.
        guest: PathBuf,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A dir seen below another's guest path, but not at that place on the
    /// host.
    #[error(
        "allowed directory seen at {inner} lies below the one seen at {outer} in the guest but not at that place on the host; give it a guest path outside {outer}"
    )]
    NestedApart {
        /// The outer dir's guest path.
        outer: PathBuf,
        /// The inner dir's guest path.
        inner: PathBuf,
    },
    /// One dir given at two places.
    #[error(
        "allowed directory {path} is given twice, seen at {first} and at {second}; give it once"
    )]
    TwoGuestPaths {
        /// The host path.
        path: PathBuf,
        /// Where the first is seen.
        first: PathBuf,
        /// Where the second is seen.
        second: PathBuf,
    },
    /// Two dirs would be seen at the same path.
    #[error("allowed directories {first} and {second} would both be seen at {guest}")]
    SameGuestPath {
        /// The host path of the first.
        first: PathBuf,
        /// The host path of the second.
        second: PathBuf,
        /// The path both would be seen at.
        guest: PathBuf,
    },
    /// The dir could not be opened (missing, not a directory, no permission).
    #[error("allowed directory {path}: {source}")]
    Open {
        /// The path as given by the operator.
        path: PathBuf,
        /// Why it failed.
        source: io::Error,
    },
}

/// `p` below `dir`: the rest of `p`, in `p`'s spelling (empty when `p` is
/// `dir`), or `None` when `p` does not lie there. Compared by components as
/// the host compares names: on Windows by `path_key` (no case, trailing
/// dots and spaces dropped, `\\?\C:\` as `C:\`), so that a tool's
/// `DATA FILES\x` is seen under the allowed dir `Data Files`; elsewhere as
/// written.
pub(crate) fn strip_dir(p: &Path, dir: &Path) -> Option<PathBuf> {
    #[cfg(not(windows))]
    {
        p.strip_prefix(dir).ok().map(Path::to_path_buf)
    }
    #[cfg(windows)]
    {
        let (pv, dv) = (is_verbatim(p), is_verbatim(dir));
        let mut rest = p.components();
        for d in dir.components() {
            let c = rest.next()?;
            if component_key(c, pv) != component_key(d, dv) {
                return None;
            }
        }
        Some(rest.as_path().to_path_buf())
    }
}

/// Whether `p` is `dir` or lies below it (see [`strip_dir`]).
pub(crate) fn within(p: &Path, dir: &Path) -> bool {
    strip_dir(p, dir).is_some()
}

/// Whether `a` and `b` name one place as the host compares paths (see
/// [`strip_dir`]).
pub(crate) fn same_path(a: &Path, b: &Path) -> bool {
    strip_dir(a, b).is_some_and(|rest| rest.as_os_str().is_empty())
}

/// `p` spelled one way for comparisons on Windows (see [`strip_dir`]): the
/// verbatim prefixes `\\?\C:` and `\\?\UNC\s\h` as `C:` and `\\s\h`, every
/// name in NTFS's case fold ([`crate::protected::fold_case`]), and, in a
/// path that is not verbatim, names without the trailing dots and spaces
/// Windows drops (`ws.` is `ws`). Short 8.3 names and links are not
/// resolved: callers compare canonical paths too.
#[cfg(windows)]
pub(crate) fn path_key(p: &Path) -> PathBuf {
    let verbatim = is_verbatim(p);
    p.components().map(|c| component_key(c, verbatim)).collect()
}

#[cfg(windows)]
fn is_verbatim(p: &Path) -> bool {
    matches!(p.components().next(), Some(Component::Prefix(pre)) if pre.kind().is_verbatim())
}

/// One component of a Windows path as [`path_key`] spells it.
#[cfg(windows)]
fn component_key(c: Component<'_>, verbatim: bool) -> String {
    use std::path::Prefix;
    let text = match c {
        Component::Normal(n) if !verbatim => {
            let n = n.to_string_lossy();
            let trimmed = n.trim_end_matches(['.', ' ']);
            if trimmed.is_empty() {
                n.into_owned()
            } else {
                trimmed.to_string()
            }
        }
        Component::Prefix(pre) => match pre.kind() {
            Prefix::VerbatimDisk(d) | Prefix::Disk(d) => {
                format!("{}:", char::from(d.to_ascii_uppercase()))
            }
            Prefix::VerbatimUNC(server, share) | Prefix::UNC(server, share) => format!(
                "\\\\{}\\{}",
                server.to_string_lossy(),
                share.to_string_lossy()
            ),
            _ => c.as_os_str().to_string_lossy().into_owned(),
        },
        other => other.as_os_str().to_string_lossy().into_owned(),
    };
    crate::protected::fold_case(&text)
}

fn display(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

fn io_reason(e: &io::Error) -> String {
    // io::Error from cap-std carries no paths; keep only the OS reason.
    match e.raw_os_error() {
        Some(code) => io::Error::from_raw_os_error(code).to_string(),
        None => e.to_string(),
    }
}

fn is_escape(e: &io::Error) -> bool {
    // cap-std reports escapes as PermissionDenied with this message.
    e.kind() == io::ErrorKind::PermissionDenied && e.raw_os_error().is_none()
}

impl AllowedDirs {
    /// Opens a handle on each dir and checks the guest paths. No dir at all
    /// is allowed: a sandbox without one gives tools no file system (`wasm`
    /// preopens nothing; `direct` then refuses calls, as it needs a cwd).
    ///
    /// # Ambient Authority
    /// Opens the given host paths with the process's own authority. They must
    /// come from the operator (config, CLI flags), never from an agent.
    pub fn open(specs: impl IntoIterator<Item = AllowedDirSpec>) -> Result<Self, AllowedDirsError> {
        let mut dirs: Vec<AllowedDir> = Vec::new();
        for spec in specs {
            let open_err = |source| AllowedDirsError::Open {
                path: spec.path.clone(),
                source,
            };
            if let Some(g) = &spec.guest
                && let Some(reason) = guest_path_problem(g)
            {
                return Err(AllowedDirsError::GuestPath {
                    path: spec.path.clone(),
                    guest: g.clone(),
                    reason,
                });
            }
            let path = std::fs::canonicalize(&spec.path).map_err(open_err)?;
            let dir = Dir::open_ambient_dir(&path, ambient_authority()).map_err(open_err)?;
            // A guest path equal to the host path is no mapping at all.
            let guest = spec.guest.filter(|g| *g != path);
            let d = AllowedDir {
                path,
                guest,
                read_only: spec.read_only,
                dir: Arc::new(dir),
            };
            // The same host dir may be given twice at one place (read-only
            // wins), not at two: a tool would write through the other.
            if let Some(other) = dirs
                .iter()
                .find(|o| o.path == d.path && o.guest_path() != d.guest_path())
            {
                return Err(AllowedDirsError::TwoGuestPaths {
                    path: d.path.clone(),
                    first: other.guest_path().to_path_buf(),
                    second: d.guest_path().to_path_buf(),
                });
            }
            // Two different dirs may not be seen at one path.
            if let Some(other) = dirs
                .iter()
                .find(|o| o.guest_path() == d.guest_path() && o.path != d.path)
            {
                return Err(AllowedDirsError::SameGuestPath {
                    first: other.path.clone(),
                    second: d.path.clone(),
                    guest: d.guest_path().to_path_buf(),
                });
            }
            // A dir seen below another's guest path must lie at that place
            // on the host too: else its mount point would be a plain dir of
            // the other, which a tool could replace or redirect.
            if let Some(other) = dirs
                .iter()
                .find(|o| !nests_alike(o, &d) || !nests_alike(&d, o))
            {
                return Err(AllowedDirsError::NestedApart {
                    outer: other.guest_path().to_path_buf(),
                    inner: d.guest_path().to_path_buf(),
                });
            }
            // The same dir twice at one place is one dir, read-only if
            // either is (each is preopened or mounted once).
            if let Some(same) = dirs.iter_mut().find(|o| o.path == d.path) {
                same.read_only |= d.read_only;
                continue;
            }
            dirs.push(d);
        }
        let nested = dirs.iter().enumerate().any(|(i, outer)| {
            dirs.iter()
                .enumerate()
                .any(|(j, inner)| i != j && within(&inner.path, &outer.path))
        });
        Ok(AllowedDirs { dirs, nested })
    }

    /// The dirs, in the order given; the first is the default workspace.
    pub fn as_slice(&self) -> &[AllowedDir] {
        &self.dirs
    }

    /// Whether there is no dir at all.
    pub fn is_empty(&self) -> bool {
        self.dirs.is_empty()
    }

    /// Whether some dir is seen at a path other than its host path.
    pub fn any_mapped(&self) -> bool {
        self.dirs.iter().any(AllowedDir::is_mapped)
    }

    /// The capability handle of the dir `r` lies in.
    pub fn dir_of(&self, r: &ResolvedPath) -> &Dir {
        &self.dirs[r.root].dir
    }

    /// The most specific allowed dir whose path (host path, or the path
    /// tools see with `guest`) contains the absolute path `p`, and the rest.
    fn split_root(&self, p: &Path, guest: bool) -> Option<(usize, PathBuf)> {
        // Host paths as the host compares them; guest paths (which no
        // filesystem spells) exactly as configured.
        fn base(d: &AllowedDir, guest: bool) -> &Path {
            if guest { d.guest_path() } else { &d.path }
        }
        let mut best: Option<(usize, (usize, bool))> = None;
        for (i, d) in self.dirs.iter().enumerate() {
            let b = base(d, guest);
            let inside = if guest {
                p.starts_with(b)
            } else {
                within(p, b)
            };
            // Most specific; for the same dir given twice, read-only wins
            // (and of equals, the last).
            let rank = (b.components().count(), d.read_only);
            if inside && best.is_none_or(|(_, r)| rank >= r) {
                best = Some((i, rank));
            }
        }
        let (i, _) = best?;
        let b = base(&self.dirs[i], guest);
        let rest = if guest {
            p.strip_prefix(b).ok().map(Path::to_path_buf)
        } else {
            strip_dir(p, b)
        };
        rest.map(|rest| (i, rest))
    }

    /// Resolves `user_path` inside the sandbox.
    ///
    /// An absolute path must lie inside an allowed dir; a relative one is taken
    /// from `base_dir` (itself resolved, so it must be inside) or else the first
    /// allowed dir. Symlinks are followed only while they stay inside. The last
    /// components may not exist yet (a file about to be created), but they must be
    /// plain names: `missing/..` is refused.
    pub fn resolve(
        &self,
        user_path: &Path,
        base_dir: Option<&Path>,
    ) -> Result<ResolvedPath, PathError> {
        self.resolve_from(user_path, base_dir.map_or(Base::First, Base::Path))
            .map(|(r, _)| r)
    }

    /// [`resolve`](Self::resolve) from the first allowed dir, or from a
    /// base already resolved (its allowed dir and its path below it, as
    /// [`ResolvedPath`] gives them); with the stamp of the file when the
    /// resolution saw one (see [`FileStamp`]).
    pub(crate) fn resolve_file(
        &self,
        user_path: &Path,
        base: Option<(usize, &Path)>,
    ) -> Result<(ResolvedPath, Option<FileStamp>), PathError> {
        match base {
            Some((root, _)) if root >= self.dirs.len() => {
                Err(PathError::Outside(display(user_path)))
            }
            Some((root, rel)) => self.resolve_from(user_path, Base::Resolved(root, rel)),
            None => self.resolve_from(user_path, Base::First),
        }
    }

    /// The resolution, and the stamp of the file it names if a `stat` of
    /// it was made on the way (a name directly in its allowed dir, on Linux).
    fn resolve_from(
        &self,
        user_path: &Path,
        base: Base<'_>,
    ) -> Result<(ResolvedPath, Option<FileStamp>), PathError> {
        // The path as errors show it, made only for an error.
        let shown = || display(user_path);
        if user_path.as_os_str().is_empty() {
            return Err(PathError::Empty);
        }
        if has_nul(user_path) {
            return Err(PathError::Nul);
        }
        if user_path
            .as_os_str()
            .as_encoded_bytes()
            .starts_with(b"file:")
        {
            return Err(PathError::Url(shown()));
        }
        // A guest path (`/data/x`) is absolute to the tools that see it,
        // also on Windows, where a path with a root but no drive is not.
        // Below the base, borrowed when the base is an allowed dir itself.
        let (root, rel): (usize, Cow<'_, Path>) = if user_path.is_absolute() || user_path.has_root()
        {
            let (root, rel) = self
                .split_root(user_path, true)
                .ok_or_else(|| PathError::Outside(shown()))?;
            (root, Cow::Owned(rel))
        } else {
            match base {
                Base::Path(b) => {
                    let (b, _) = self.resolve_from(b, Base::First)?;
                    (b.root, Cow::Owned(b.rel.join(user_path)))
                }
                Base::Resolved(root, rel) if rel.as_os_str().is_empty() => {
                    (root, Cow::Borrowed(user_path))
                }
                Base::Resolved(root, rel) => (root, Cow::Owned(rel.join(user_path))),
                Base::First if self.dirs.is_empty() => return Err(PathError::Outside(shown())),
                Base::First => (0, Cow::Borrowed(user_path)),
            }
        };
        if escapes_lexically(&rel) {
            // Refused before any lookup, whether or not the components exist.
            return Err(PathError::Outside(shown()));
        }
        let (canon, stamp) = self.canonicalize_in(root, &rel, user_path)?;
        // A nested allowed dir is more specific (it may be read-only).
        let (root, rel) = if self.nested {
            let host_path = self.dirs[root].path.join(&canon);
            self.split_root(&host_path, false).unwrap_or((root, canon))
        } else {
            (root, canon)
        };
        let d = &self.dirs[root];
        let below = |base: &Path| {
            if rel.as_os_str().is_empty() {
                base.to_path_buf()
            } else {
                base.join(&rel)
            }
        };
        let resolved = ResolvedPath {
            root,
            read_only: d.read_only,
            host_path: below(&d.path),
            guest_path: d.guest.as_deref().map(below),
            rel,
        };
        Ok((resolved, stamp))
    }

    /// Canonicalizes `rel` below allowed dir `root` with cap-std; missing trailing
    /// components are kept as they are if they are plain names. The result
    /// is spelled as a join and a split would spell it: no `.`, no doubled
    /// or trailing `/` (cap-std may answer `.` for the dir itself).
    fn canonicalize_in(
        &self,
        root: usize,
        rel: &Path,
        user_path: &Path,
    ) -> Result<(PathBuf, Option<FileStamp>), PathError> {
        let shown = || display(user_path);
        let dir = &self.dirs[root].dir;
        // The common case, before any copy of the path.
        #[cfg(target_os = "linux")]
        if let Some(found) = canonical_without_symlinks(dir, rel) {
            return Ok(found);
        }
        let mut existing = rel.to_path_buf();
        let mut missing: Vec<OsString> = Vec::new();
        // The first round's fast path was tried above.
        #[cfg(target_os = "linux")]
        let mut first = true;
        loop {
            let target = if existing.as_os_str().is_empty() {
                Path::new(".")
            } else {
                existing.as_path()
            };
            #[cfg(target_os = "linux")]
            if !std::mem::take(&mut first)
                && let Some((mut canon, stamp)) = canonical_without_symlinks(dir, &existing)
            {
                for name in missing.iter().rev() {
                    canon.push(name);
                }
                return Ok((canon, stamp.filter(|_| missing.is_empty())));
            }
            match dir.canonicalize(target) {
                Ok(canon) => {
                    let canon: PathBuf = canon
                        .components()
                        .filter(|c| *c != Component::CurDir)
                        .collect();
                    #[cfg(windows)]
                    let canon =
                        long_names(&self.dirs[root].path, &canon).map_err(|e| PathError::Io {
                            path: shown(),
                            reason: format!(
                                "cannot tell the long name of a short one: {}",
                                io_reason(&e)
                            ),
                        })?;
                    let mut canon = canon;
                    for name in missing.iter().rev() {
                        canon.push(name);
                    }
                    return Ok((canon, None));
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    let last = existing.components().next_back();
                    match last {
                        // A dangling symlink is not a missing name: what it
                        // would create lies where it points, maybe in a
                        // read-only dir, so the path is refused. Looked at
                        // without a trailing slash, which would follow it.
                        Some(Component::Normal(_))
                            if dir
                                .symlink_metadata(existing.components().collect::<PathBuf>())
                                .is_ok_and(|m| m.is_symlink()) =>
                        {
                            return Err(PathError::Io {
                                path: shown(),
                                reason: "a symlink whose target does not exist".into(),
                            });
                        }
                        Some(Component::Normal(name)) => {
                            missing.push(name.to_os_string());
                            existing.pop();
                        }
                        Some(Component::CurDir) => {
                            existing.pop();
                        }
                        _ => return Err(PathError::NotFound(shown())),
                    }
                }
                Err(e) if is_escape(&e) => return Err(PathError::Outside(shown())),
                Err(e) => {
                    return Err(PathError::Io {
                        path: shown(),
                        reason: io_reason(&e),
                    });
                }
            }
        }
    }

    /// Opens the directory `r` names, through the capability handle.
    pub fn open_dir(&self, r: &ResolvedPath) -> io::Result<Dir> {
        let dir = self.dir_of(r);
        if r.rel.as_os_str().is_empty() {
            dir.try_clone()
        } else {
            dir.open_dir(&r.rel)
        }
    }
}

/// What a relative path is taken from.
#[derive(Clone, Copy)]
enum Base<'a> {
    /// The first allowed dir.
    First,
    /// A path, resolved first.
    Path(&'a Path),
    /// An allowed dir (by index) and a path below it, resolved before.
    Resolved(usize, &'a Path),
}

/// `rel` canonicalized below `dir` without cap-std's two readlinks of
/// `/proc/self/fd` (the most of a warm wasm call's cost, measured): when no
/// component of `rel` is a symlink or `..`, its canonical form is its own
/// names, and one `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`
/// proves that it exists and holds none (a bind mount inside the dir is seen
/// at its own path, as readlink shows it too). The root itself (`rel`
/// empty or `.`) takes no system call: the handle is the dir. `None` when
/// this cannot tell (a symlink, `..`, a trailing `/` or `/.`, a name with
/// `~`, an error, no `openat2`): cap-std's canonicalize then decides, with
/// its errors.
#[cfg(target_os = "linux")]
fn canonical_without_symlinks(dir: &Dir, rel: &Path) -> Option<(PathBuf, Option<FileStamp>)> {
    use rustix::fs::{Mode, OFlags, ResolveFlags, openat2};
    use std::os::unix::ffi::OsStrExt;
    // `f/` and `f/.` name a directory: the kernel refuses them for a file,
    // and so does cap-std; components would drop the slash.
    let raw = rel.as_os_str().as_bytes();
    if raw.len() > 1 && (raw.ends_with(b"/") || raw.ends_with(b"/.")) {
        return None;
    }
    let mut canon = PathBuf::new();
    for c in rel.components() {
        match c {
            // A name with `~` may be a short name (`GIT~1` on a vfat, ntfs3
            // or CIFS mount) whose long one cap-std's readlink tells.
            Component::Normal(name) if name.as_bytes().contains(&b'~') => return None,
            Component::Normal(name) => canon.push(name),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    if canon.as_os_str().is_empty() {
        return Some((canon, None));
    }
    // One name: a `stat` that does not follow it proves the same, in one
    // system call where `openat2` takes two (the open and the close).
    // Its stamp goes with it, for the wasm engine's cache of tools.
    let mut names = canon.components();
    if let (Some(_), None) = (names.next(), names.next()) {
        use rustix::fs::{AtFlags, FileType, statat};
        return statat(dir, &canon, AtFlags::SYMLINK_NOFOLLOW)
            .ok()
            .filter(|st| FileType::from_raw_mode(st.st_mode) != FileType::Symlink)
            .map(|st| (canon, FileStamp::of_stat(&st)));
    }
    openat2(
        dir,
        &canon,
        OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS,
    )
    .ok()
    .map(|_| (canon, None))
}

/// `rel` (existing, below `root`) with each name that may be an 8.3 short
/// name (it has a `~`, as every generated one does) in its long form: on
/// Windows an entry also answers to a short name (`GIT~1` for `.git`), and
/// what is judged by its names (protected paths, the extension denylist)
/// must see the long one. A short name whose long one cannot be told is an
/// error, never judged as it is.
#[cfg(windows)]
fn long_names(root: &Path, rel: &Path) -> io::Result<PathBuf> {
    let mut out = PathBuf::new();
    for c in rel.components() {
        match c {
            Component::Normal(name) if name.to_string_lossy().contains('~') => {
                match crate::sys::file_id::name_on_disk(&root.join(&out).join(name))? {
                    Some(real) => out.push(real),
                    None => out.push(name),
                }
            }
            other => out.push(other),
        }
    }
    Ok(out)
}

/// Whether `..` components climb above the start of `rel`, read as written.
/// Conservative: a symlink could make such a path land inside again, but a path
/// that reads as an escape is refused as one.
fn escapes_lexically(rel: &Path) -> bool {
    let mut depth: usize = 0;
    for c in rel.components() {
        match c {
            Component::ParentDir => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => return true,
            },
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return true,
        }
    }
    false
}

#[cfg(unix)]
fn has_nul(p: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    p.as_os_str().as_bytes().contains(&0)
}

#[cfg(not(unix))]
fn has_nul(p: &Path) -> bool {
    p.to_string_lossy().contains('\0')
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// The fast canonicalization answers only where it agrees with cap-std's,
    /// and leaves symlinks, `..` and missing names to it.
    #[test]
    fn canonical_without_symlinks_agrees_with_cap_std() {
        let t = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(t.path().join("a/b")).expect("mkdir");
        std::fs::write(t.path().join("a/b/f.txt"), "x").expect("write");
        std::os::unix::fs::symlink("b", t.path().join("a/link")).expect("symlink");
        std::os::unix::fs::symlink("/etc", t.path().join("out")).expect("symlink");
        std::fs::write(t.path().join("top.txt"), "xyz").expect("write");
        std::os::unix::fs::symlink("top.txt", t.path().join("in")).expect("symlink");
        let dir = Dir::open_ambient_dir(t.path(), ambient_authority()).expect("open");
        for (rel, fast) in [
            ("", Some("")),
            (".", Some("")),
            ("a", Some("a")),
            ("top.txt", Some("top.txt")),
            ("./top.txt", Some("top.txt")),
            ("in", None),
            ("./a/./b/f.txt", Some("a/b/f.txt")),
            ("a/b/", None),
            ("a/b/f.txt/", None),
            ("a/b/f.txt/.", None),
            ("GIT~1", None),
            ("a/link/f.txt", None),
            ("a/link", None),
            ("a/b/../b/f.txt", None),
            ("out", None),
            ("missing", None),
        ] {
            let got = canonical_without_symlinks(&dir, Path::new(rel));
            // A stamp only for a regular file named directly in the dir,
            // and it is that file's.
            let stamp = got.as_ref().and_then(|(_, s)| *s);
            if rel.ends_with("top.txt") {
                use std::os::unix::fs::MetadataExt;
                let m = std::fs::symlink_metadata(t.path().join("top.txt")).expect("stat");
                let s = stamp.expect("a stamp for a file in the dir");
                assert_eq!((s.dev, s.ino, s.size), (m.dev(), m.ino(), 3), "{rel:?}");
            } else {
                assert_eq!(stamp, None, "{rel:?}");
            }
            let got = got.map(|(p, _)| p);
            assert_eq!(got.as_deref(), fast.map(Path::new), "{rel:?}");
            if let Some(got) = got {
                let target = if rel.is_empty() { "." } else { rel };
                let slow = dir.canonicalize(target).expect("canonicalize");
                let slow: PathBuf = slow
                    .components()
                    .filter(|c| matches!(c, Component::Normal(_)))
                    .collect();
                assert_eq!(got, slow, "{rel:?}");
            }
        }
    }
}
