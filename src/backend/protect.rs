//! The protected paths (`protected`) that exist in a plan's writable
//! dirs, as the mounts that hold them: read-only over each protected path,
//! and the same place mounted over itself (writable) for each directory on
//! the way to one below the dir (`.git` for `.git/hooks`), since a mount
//! point cannot be renamed or removed. The `direct` backend makes them in a
//! mount namespace of the call (Linux), the `docker` backend as extra binds.
//!
//! What does not exist cannot be a mount point: a protected path missing when
//! the call starts is not held by mounts (the file tools and the wasm backend
//! refuse it by name); what a call makes there is moved aside after it
//! ([`move_aside_created`]). A protected path that is a symlink (or lies
//! through one) is held where it leads, and the link itself is a mount too.

use std::path::{Path, PathBuf};

use crate::plan::ExecPlan;

/// One mount that holds a protected path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Held {
    /// Where it is, as the call names it (inside a writable allowed dir).
    pub target: PathBuf,
    /// Where it really is: symlinks resolved, or for `link` the symlink
    /// itself (its parent resolved).
    pub source: PathBuf,
    /// Read-only (a protected path), or writable (a place on the way to one).
    pub read_only: bool,
    /// A symlink on the way (or the protected path itself): the link is
    /// mounted over, so that it cannot be replaced; what it leads to is held
    /// by the next entry.
    pub link: bool,
}

/// A protected path of a writable dir, resolved on the host now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resolved {
    /// Each symlink met on the way (its parent resolved), in order.
    pub links: Vec<PathBuf>,
    /// Where the path leads: a real path when it exists (a file met on the
    /// way ends it: `.git` a file, for `.git/hooks`), else where it would be
    /// (the rest of the names appended to the last place that exists).
    pub place: PathBuf,
    pub exists: bool,
}

/// Resolves `raw` (a protected path's names) under the canonical dir `root`,
/// symlink by symlink (at most 40), the way a tool's path would go.
pub(crate) fn resolve_entry(root: &Path, raw: &[String]) -> Resolved {
    use std::collections::VecDeque;
    use std::path::Component;
    let mut rest: VecDeque<std::ffi::OsString> = raw.iter().map(Into::into).collect();
    let mut cur = root.to_path_buf();
    let mut links = Vec::new();
    let mut hops = 0;
    while let Some(name) = rest.pop_front() {
        if name == ".." {
            cur.pop();
            continue;
        }
        if name == "." || name.is_empty() {
            continue;
        }
        let next = cur.join(&name);
        match std::fs::symlink_metadata(&next) {
            Err(_) => {
                // Where it would be: the rest appended, unless a `..` in it
                // makes that depend on what is created (then the first
                // missing name is all there is).
                let mut place = next;
                if !rest.iter().any(|r| r == "..") {
                    for r in rest {
                        if r != "." {
                            place.push(r);
                        }
                    }
                }
                return Resolved {
                    links,
                    place,
                    exists: false,
                };
            }
            Ok(m) if m.file_type().is_symlink() => {
                hops += 1;
                let target = std::fs::read_link(&next).ok().filter(|_| hops <= 40);
                links.push(next.clone());
                let Some(target) = target else {
                    return Resolved {
                        links,
                        place: next,
                        exists: false,
                    };
                };
                if target.has_root() {
                    // Its root: `/`, or on Windows `C:\` or `\\?\C:\`; a
                    // rooted target without a drive (`\x`) is on the link's
                    // own drive.
                    let own = matches!(target.components().next(), Some(Component::Prefix(_)));
                    let mut root: PathBuf = if own {
                        PathBuf::new()
                    } else {
                        cur.components()
                            .take_while(|c| matches!(c, Component::Prefix(_)))
                            .collect()
                    };
                    root.extend(
                        target
                            .components()
                            .take_while(|c| matches!(c, Component::Prefix(_) | Component::RootDir)),
                    );
                    cur = root;
                }
                let parts: Vec<std::ffi::OsString> = target
                    .components()
                    .filter_map(|c| match c {
                        Component::Normal(n) => Some(n.to_os_string()),
                        Component::ParentDir => Some("..".into()),
                        _ => None,
                    })
                    .collect();
                for p in parts.into_iter().rev() {
                    rest.push_front(p);
                }
            }
            Ok(m) if !m.is_dir() && !rest.is_empty() => {
                // A file on the way (a worktree's `.git` file): it is what
                // protects the rest.
                return Resolved {
                    links,
                    place: next,
                    exists: true,
                };
            }
            Ok(_) => cur = next,
        }
    }
    Resolved {
        links,
        place: cur,
        exists: true,
    }
}

/// Whether a resolved protected place is one to honour: not `/`, an allowed
/// dir or an ancestor of one (a link `.git -> ..` would make everything
/// protected; that is no repository to keep).
pub(crate) fn honoured(mounts: &[crate::plan::Mount], place: &Path) -> bool {
    !mounts.iter().any(|m| m.path.starts_with(place))
}

/// The outermost writable allowed dir of `mounts` that `p` lies strictly in.
pub(crate) fn outermost_writable<'a>(
    mounts: &'a [crate::plan::Mount],
    p: &Path,
) -> Option<&'a Path> {
    mounts
        .iter()
        .filter(|m| !m.read_only && p != m.path && p.starts_with(&m.path))
        .map(|m| m.path.as_path())
        .min_by_key(|m| m.components().count())
}

/// The mounts that hold the protected paths existing now in `plan`'s
/// writable dirs, shallowest first; empty when nothing is protected. Each
/// protected place is read-only; each symlink on the way is pinned (a mount
/// over the link itself), and so is each directory between the outermost
/// writable dir holding one of them and it (renaming one of those would move
/// the repository away and let a new one take its place: a symlink's target
/// elsewhere in the workspace, an allowed dir nested in another).
pub(crate) fn held(plan: &ExecPlan) -> Vec<Held> {
    let mut out: Vec<Held> = Vec::new();
    if plan.protected.is_empty() {
        return out;
    }
    let add = |out: &mut Vec<Held>, h: Held| match out
        .iter_mut()
        .find(|o| o.source == h.source && o.link == h.link)
    {
        Some(o) => o.read_only |= h.read_only,
        None => out.push(h),
    };
    let mut anchors: Vec<PathBuf> = Vec::new();
    for m in plan.mounts.iter().filter(|m| !m.read_only) {
        for (_, raw) in plan.protected.entries_raw() {
            let lexical: PathBuf = raw.iter().fold(m.path.clone(), |p, n| p.join(n));
            let r = resolve_entry(&m.path, raw);
            for l in &r.links {
                add(
                    &mut out,
                    Held {
                        target: l.clone(),
                        source: l.clone(),
                        read_only: false,
                        link: true,
                    },
                );
                anchors.push(l.clone());
            }
            if r.exists && honoured(&plan.mounts, &r.place) {
                add(
                    &mut out,
                    Held {
                        target: lexical,
                        source: r.place.clone(),
                        read_only: true,
                        link: false,
                    },
                );
                anchors.push(r.place);
            }
        }
    }
    for a in anchors {
        let Some(outer) = outermost_writable(&plan.mounts, &a) else {
            continue;
        };
        let mut cur = a.clone();
        while cur.pop() && cur.as_path() != outer && cur.starts_with(outer) {
            add(
                &mut out,
                Held {
                    target: cur.clone(),
                    source: cur.clone(),
                    read_only: false,
                    link: false,
                },
            );
        }
    }
    // A mount under a read-only one is not needed (and could not be made).
    let ro: Vec<PathBuf> = out
        .iter()
        .filter(|h| h.read_only)
        .map(|h| h.source.clone())
        .collect();
    out.retain(|h| !ro.iter().any(|r| h.source != *r && h.source.starts_with(r)));
    out.sort_by_key(|h| h.source.components().count());
    out
}

/// The first missing name of each protected path of `plan`'s writable dirs
/// (`.git` where there is none): what a call may create where no mount can
/// hold it, to be moved aside after the call. Each is found again after the
/// call two ways: through a handle on the dir it would be made in (opened
/// now: whatever that dir's path becomes) and by its path under the allowed
/// dir's handle (a dir renamed away and made anew). Only names that are
/// missing now and lie inside a writable dir.
pub(crate) fn absent(plan: &ExecPlan) -> Vec<Absent> {
    let mut out: Vec<Absent> = Vec::new();
    if plan.protected.is_empty() {
        return out;
    }
    for m in plan.mounts.iter().filter(|m| !m.read_only) {
        let Some((_, root)) = plan.mount_dirs.iter().find(|(p, _)| p == &m.path) else {
            continue;
        };
        for (_, raw) in plan.protected.entries_raw() {
            let r = resolve_entry(&m.path, raw);
            if r.exists {
                continue;
            }
            // The deepest existing dir on the way, and the next name.
            let mut first = r.place.clone();
            while let Some(parent) = first.parent() {
                if std::fs::symlink_metadata(parent).is_ok() {
                    break;
                }
                first = parent.to_path_buf();
            }
            let (Some(parent), Some(name)) = (first.parent(), first.file_name()) else {
                continue;
            };
            let inside = plan
                .mounts
                .iter()
                .any(|w| !w.read_only && parent.starts_with(&w.path));
            if !inside
                || std::fs::symlink_metadata(&first).is_ok()
                || out.iter().any(|a| a.host == first)
            {
                continue;
            }
            let Ok(dir) = cap_std::fs::Dir::open_ambient_dir(parent, cap_std::ambient_authority())
            else {
                continue;
            };
            // By path from the outermost writable dir holding it: a nested
            // allowed dir can itself be renamed away and made anew.
            let outer = outermost_writable(&plan.mounts, &first)
                .and_then(|o| plan.mount_dirs.iter().find(|(p, _)| p == o))
                .map(|(p, d)| (p, d))
                .unwrap_or((&m.path, root));
            let rel = first.strip_prefix(outer.0).ok().map(Path::to_path_buf);
            out.push(Absent {
                // What the call's stderr names: where the tool sees it.
                path: plan.guest_of(&first).unwrap_or_else(|| first.clone()),
                host: first.clone(),
                dir,
                name: name.to_os_string(),
                root: std::sync::Arc::clone(outer.1),
                rel,
            });
        }
    }
    out
}

/// A protected name that does not exist, and where to look for it after.
#[derive(Debug)]
pub(crate) struct Absent {
    /// Where the tool sees it (its guest path): only shown.
    path: PathBuf,
    /// Its host path.
    host: PathBuf,
    /// The dir it would be made in, and the name.
    dir: cap_std::fs::Dir,
    name: std::ffi::OsString,
    /// The writable allowed dir it lies in, and the path from there.
    root: std::sync::Arc<cap_std::fs::Dir>,
    rel: Option<PathBuf>,
}

/// Moves aside what a call made at the absent protected names (see
/// [`move_aside_created`]) once its processes are gone, also when the call is
/// dropped before it ends (an MCP cancel, a signal to the CLI): then a thread
/// sweeps a few times while the backend's cleanup finishes, and
/// [`sweep_cancelled`] sweeps what is left before the process exits.
pub(crate) struct Sweep {
    absent: Option<std::sync::Arc<Vec<Absent>>>,
}

static CANCELLED: std::sync::Mutex<Vec<std::sync::Arc<Vec<Absent>>>> =
    std::sync::Mutex::new(Vec::new());

impl Sweep {
    pub(crate) fn new(absent: Vec<Absent>) -> Self {
        Sweep {
            absent: (!absent.is_empty()).then(|| std::sync::Arc::new(absent)),
        }
    }

    /// After the call ended: moves aside, with notes on `out`'s stderr.
    pub(crate) fn finish(mut self, out: &mut crate::outcome::RunOutput) {
        if let Some(a) = self.absent.take() {
            move_aside_created(&a, Some(out));
        }
    }
}

impl Drop for Sweep {
    fn drop(&mut self) {
        let Some(a) = self.absent.take() else { return };
        if let Ok(mut c) = CANCELLED.lock() {
            // Kept for the sweep at exit; a bounded number (each holds two
            // dir handles), the oldest dropped first.
            if c.len() >= 64 {
                c.remove(0);
            }
            c.push(std::sync::Arc::clone(&a));
        }
        let spawned = std::thread::Builder::new()
            .name("toolhost-protect-sweep".into())
            .spawn(move || {
                for ms in [50, 500, 2000, 5000, 15000] {
                    std::thread::sleep(std::time::Duration::from_millis(ms));
                    move_aside_created(&a, None);
                }
            });
        if spawned.is_err() {
            tracing::warn!("no thread to sweep the protected paths of a cancelled call");
        }
    }
}

/// Whether a cancelled call left protected names to move aside.
pub(crate) fn any_cancelled() -> bool {
    CANCELLED.lock().map_or(true, |c| !c.is_empty())
}

/// Sweeps the protected paths of cancelled calls now (before the process
/// exits; `Sandbox::shutdown` calls it).
pub(crate) fn sweep_cancelled() {
    let pending: Vec<_> = CANCELLED.lock().map(|c| c.clone()).unwrap_or_default();
    for a in pending {
        move_aside_created(&a, None);
    }
}

/// After a call (its processes gone): each protected name that was missing
/// before it and exists now was made by the call. It is renamed aside in its
/// dir (`NAME.toolhost-refused-PID-NANOS-N`, which git does not read), found
/// by the dir's handle and by its path in the allowed dir, and the call's
/// stderr says so. Nothing is removed.
pub(crate) fn move_aside_created(absent: &[Absent], out: Option<&mut crate::outcome::RunOutput>) {
    let mut notes = String::new();
    for a in absent {
        // The dir held since before the call (it may have moved), then the
        // path as it is now (under the allowed dir's handle: a symlink out
        // of it is not followed).
        let by_path = a.rel.as_ref().and_then(|rel| {
            let parent = rel.parent().filter(|p| !p.as_os_str().is_empty());
            let dir = match parent {
                Some(p) => a.root.open_dir(p).ok()?,
                None => a.root.try_clone().ok()?,
            };
            Some((dir, rel.file_name()?.to_os_string()))
        });
        let places = std::iter::once(a.dir.try_clone().ok().map(|d| (d, a.name.clone())))
            .chain(std::iter::once(by_path))
            .flatten();
        for (dir, name) in places {
            if dir.symlink_metadata(&name).is_err() {
                continue;
            }
            let note = match move_aside(&dir, &name) {
                Some(to) => format!(
                    "toolhost: {} is a protected path (protected_paths) the call created; moved to {}\n",
                    a.path.display(),
                    a.path.with_file_name(&to).display()
                ),
                None => format!(
                    "toolhost: {} is a protected path (protected_paths) the call created, and could not be moved aside: remove it before running git there\n",
                    a.path.display()
                ),
            };
            tracing::debug!("{}", note.trim_end());
            notes.push_str(&note);
        }
    }
    match out {
        Some(out) if !notes.is_empty() => {
            if !out.stderr.is_empty() && !out.stderr.ends_with('\n') {
                out.stderr.push('\n');
            }
            out.stderr.push_str(&notes);
        }
        Some(_) => {}
        None if !notes.is_empty() => tracing::warn!("cancelled call: {}", notes.trim_end()),
        None => {}
    }
}

/// Renames `name` in `dir` to a fresh name beside it; the new name.
fn move_aside(dir: &cap_std::fs::Dir, name: &std::ffi::OsStr) -> Option<std::ffi::OsString> {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    (0..16).find_map(|_| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut aside = name.to_os_string();
        aside.push(format!(
            ".toolhost-refused-{}-{nanos:08x}-{n}",
            std::process::id()
        ));
        if dir.symlink_metadata(&aside).is_ok() {
            return None;
        }
        dir.rename(name, dir, &aside).ok().map(|()| aside)
    })
}
