//! The protected paths (`protected`) that exist in a plan's writable
//! dirs, as the mounts that hold them: read-only over each protected path,
//! and the same place mounted over itself (writable) for each directory on
//! the way to one below the dir (`.git` for `.git/hooks`), since a mount
//! point cannot be renamed or removed in the namespace that has it. The
//! `direct` backend makes them in a mount namespace of the call (Linux), the
//! `docker` backend as extra binds.
//!
//! What does not exist cannot be a mount point: a protected path missing when
//! the call starts is not held by mounts (the file tools and the wasm backend
//! refuse it by name); what a call makes there is moved aside after it
//! ([`move_aside_created`]). A protected path that is a symlink (or lies
//! through one) is held where it leads, and the link itself is a mount too.
//!
//! One look ([`look`]) decides both: each protected path is either held (it
//! existed) or swept after the call (it did not), never neither. A backend
//! takes the look where it takes its mounts, and again if it looks again
//! (the gVisor gate); a held place gone, or another file, by the time it is
//! mounted fails the call (the direct backend; an engine refuses a bind of a
//! missing source).
//!
//! A mount holds a file, not a name, and only in the call's namespace: a
//! writer outside it (another call, the host) can rename a held file away,
//! and the call then make the name anew. So the walk to each protected path
//! is taken again after the call, and the first file on it that the look did
//! not meet there is moved aside ([`move_aside_replaced`]).
//!
//! The parts: [`Held`] and [`resolve_entry`] (one protected path, walked);
//! [`look`] (the plan's, once); [`Sweep`] (armed with a look's [`After`],
//! run once the call's processes are gone, or by a thread if the call is
//! dropped); [`move_aside_created`] and [`move_aside_replaced`] (the two
//! checks).

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
    /// What the look found there (a place or a link; `None` for the
    /// directories on the way, and where the platform gives no identity).
    pub id: Id,
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
    /// The first name on the way found missing (its parent exists, as
    /// resolved): where a call could make the path. `None` when it exists,
    /// or ends at a link that cannot be followed (which is pinned).
    pub missing: Option<PathBuf>,
    /// Each name met that exists, in order (the links, the dirs entered, the
    /// place), with what it is: after the call, the same walk must meet the
    /// same files, or what differs was put there during it.
    pub chain: Vec<(PathBuf, Id)>,
}

/// What a walk met at a name, where the platform says (`None` elsewhere:
/// walks then compare paths only).
pub(crate) type Id = Option<Seen>;

/// A file as a walk met it: its device and inode; its birth time, where the
/// filesystem keeps one (an inode number freed and given to a new file
/// differs there); and, for what is not a directory, its change time (a
/// hard link made to it, or a rename of it, changes that: a file held by a
/// mount can come back under its name through another link, where no mount
/// holds it). A directory has one name, and its change time moves with
/// every entry made in it (git's lock files), so it is left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seen {
    pub dev: u64,
    pub ino: u64,
    birth: Option<std::time::SystemTime>,
    change: Option<(i64, i64)>,
}

/// What the file `m` describes is.
#[cfg(unix)]
fn id_of(m: &std::fs::Metadata) -> Id {
    use std::os::unix::fs::MetadataExt as _;
    Some(Seen {
        dev: m.dev(),
        ino: m.ino(),
        birth: m.created().ok(),
        change: (!m.is_dir()).then(|| (m.ctime(), m.ctime_nsec())),
    })
}

/// No stable identity here: walks compare paths only.
#[cfg(not(unix))]
fn id_of(_: &std::fs::Metadata) -> Id {
    None
}

/// Resolves `raw` (a protected path's names) under the canonical dir `root`,
/// symlink by symlink (at most 40), the way a tool's path would go.
pub(crate) fn resolve_entry(root: &Path, raw: &[String]) -> Resolved {
    use std::collections::VecDeque;
    use std::path::Component;
    let mut rest: VecDeque<std::ffi::OsString> = raw.iter().map(Into::into).collect();
    let mut cur = root.to_path_buf();
    let mut links = Vec::new();
    let mut chain = Vec::new();
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
                let mut place = next.clone();
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
                    missing: Some(next),
                    chain,
                };
            }
            Ok(m) if m.file_type().is_symlink() => {
                chain.push((next.clone(), id_of(&m)));
                hops += 1;
                let target = std::fs::read_link(&next).ok().filter(|_| hops <= 40);
                links.push(next.clone());
                let Some(target) = target else {
                    return Resolved {
                        links,
                        place: next,
                        exists: false,
                        missing: None,
                        chain,
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
                chain.push((next.clone(), id_of(&m)));
                return Resolved {
                    links,
                    place: next,
                    exists: true,
                    missing: None,
                    chain,
                };
            }
            Ok(m) => {
                chain.push((next.clone(), id_of(&m)));
                cur = next;
            }
        }
    }
    Resolved {
        links,
        place: cur,
        exists: true,
        missing: None,
        chain,
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

/// What one look at a plan's protected paths found: the mounts that hold
/// those that exist, and what to check once the call is over.
#[derive(Debug, Default)]
pub(crate) struct Look {
    /// The mounts that hold those that exist, shallowest first.
    pub held: Vec<Held>,
    /// What to check after the call ([`Sweep::arm`]).
    pub after: After,
}

/// What to check after a call, from its look: the first missing name of
/// each protected path that did not exist, and the walk to each that did
/// (or to the part of it that did).
#[derive(Debug, Default)]
pub(crate) struct After {
    absent: Vec<Absent>,
    kept: Vec<Kept>,
}

impl After {
    fn is_empty(&self) -> bool {
        self.absent.is_empty() && self.kept.is_empty()
    }
}

/// The walk to a protected path that (in part) existed at the look, to be
/// walked again after the call ([`move_aside_replaced`]).
#[derive(Debug)]
struct Kept {
    /// The writable allowed dir it is resolved from, and its names.
    from: PathBuf,
    raw: Vec<String>,
    /// What the look met on the way ([`Resolved::chain`]).
    chain: Vec<(PathBuf, Id)>,
    /// Each of those files, held open (`O_PATH`, Linux) until the walk after
    /// the call: while a descriptor holds an inode, its number cannot be
    /// given to a new file, so a file with the same device and inode is the
    /// same file even where the filesystem keeps no birth time.
    _pins: Vec<std::fs::File>,
    /// The writable allowed dirs, with their handles, and the plan's
    /// mounts (for the guest path a note shows).
    dirs: std::sync::Arc<[(PathBuf, std::sync::Arc<cap_std::fs::Dir>)]>,
    mounts: std::sync::Arc<[crate::plan::Mount]>,
}

/// At most this many files are held open per look ([`pin`]); a walk that
/// meets more (a symlink whose target runs through thousands of names) has
/// the rest compared by identity only.
const MAX_PINS: usize = 64;

/// Opens each file of `chain` that lies in a writable dir (`O_PATH`, not
/// following a last symlink), once per path, and keeps it open
/// ([`Kept::_pins`]), within `budget`. Fails closed: where the file cannot
/// be opened or read, or is not the one the walk met (swapped since), its
/// identity is dropped, so that the walk after the call finds it differing.
#[cfg(target_os = "linux")]
fn pin(
    chain: &mut [(PathBuf, Id)],
    mounts: &[crate::plan::Mount],
    budget: &mut usize,
) -> Vec<std::fs::File> {
    use rustix::fs::{Mode, OFlags};
    let mut pins = Vec::new();
    for i in 0..chain.len() {
        let (head, rest) = chain.split_at_mut(i);
        let Some((path, id)) = rest.first_mut() else {
            break;
        };
        if outermost_writable(mounts, path).is_none() {
            continue;
        }
        if let Some((_, first)) = head.iter().find(|(p, _)| p == path) {
            *id = *first;
            continue;
        }
        if *budget == 0 {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| {
                tracing::warn!(
                    "a protected path's walk met more than {MAX_PINS} files: the rest are compared by identity only"
                );
            });
            continue;
        }
        *budget -= 1;
        let held = rustix::fs::open(
            path.as_path(),
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()
        .map(std::fs::File::from)
        .and_then(|f| Some((f.metadata().ok().and_then(|m| id_of(&m))?, f)));
        match held {
            Some((seen, f)) if Some(seen) == *id => pins.push(f),
            _ => *id = None,
        }
    }
    pins
}

/// Elsewhere no descriptor holds a file without opening it for reading.
#[cfg(not(target_os = "linux"))]
fn pin(_: &mut [(PathBuf, Id)], _: &[crate::plan::Mount], _: &mut usize) -> Vec<std::fs::File> {
    Vec::new()
}

/// Looks once at the protected paths of `plan`'s writable dirs; empty when
/// nothing is protected. Each protected path is resolved once, and that one
/// answer decides both what is held and what is checked after the call:
/// looking twice (once for the mounts, once for the sweep) would let
/// another writer make it exist for one look and not for the other, so
/// that neither covers it.
///
/// Held ([`Look::held`]): each protected place is read-only; each symlink
/// on the way is pinned (a mount over the link itself), and so is each
/// directory between the outermost writable dir holding one of them and it
/// (renaming one of those would move the repository away and let a new one
/// take its place: a symlink's target elsewhere in the workspace, an allowed
/// dir nested in another). Each place and link carries its identity, which
/// the mount must find (the direct backend).
///
/// After ([`Look::after`]):
/// - the first missing name on the way (`.git` where there is none), inside
///   a writable dir: what a call may create where no mount can hold it, to
///   be moved aside after the call. Each is found again two ways: through a
///   handle on the dir it would be made in (opened now: whatever that dir's
///   path becomes) and by its path under the outermost writable dir's handle
///   (a dir renamed away and made anew);
/// - the walk to what existed: a mount holds a file, not a name, and a
///   writer outside the call (another call, in its own mount namespace, or
///   the host) can rename the held file away, after which the call may make
///   the name anew. After the call the walk is taken again, and the first
///   file on it that is not the one met now is moved aside.
pub(crate) fn look(plan: &ExecPlan) -> Look {
    let mut look = Look::default();
    if plan.protected.is_empty() {
        return look;
    }
    let out = &mut look.held;
    let add = |out: &mut Vec<Held>, h: Held| match out
        .iter_mut()
        .find(|o| o.source == h.source && o.link == h.link)
    {
        Some(o) => o.read_only |= h.read_only,
        None => out.push(h),
    };
    let id_in = |chain: &[(PathBuf, Id)], p: &Path| {
        chain
            .iter()
            .rev()
            .find(|(c, _)| c == p)
            .and_then(|(_, id)| *id)
    };
    let mut anchors: Vec<PathBuf> = Vec::new();
    let mut budget = MAX_PINS;
    for m in plan.mounts.iter().filter(|m| !m.read_only) {
        for (_, raw) in plan.protected.entries_raw() {
            let lexical: PathBuf = raw.iter().fold(m.path.clone(), |p, n| p.join(n));
            let mut r = resolve_entry(&m.path, raw);
            let pins = pin(&mut r.chain, &plan.mounts, &mut budget);
            for l in &r.links {
                add(
                    out,
                    Held {
                        target: l.clone(),
                        source: l.clone(),
                        read_only: false,
                        link: true,
                        id: id_in(&r.chain, l),
                    },
                );
                anchors.push(l.clone());
            }
            if r.exists && honoured(&plan.mounts, &r.place) {
                add(
                    out,
                    Held {
                        target: lexical,
                        source: r.place.clone(),
                        read_only: true,
                        link: false,
                        id: id_in(&r.chain, &r.place),
                    },
                );
                anchors.push(r.place);
            } else if let Some(first) = r.missing {
                absent_at(plan, first, &mut look.after.absent);
            }
            if !r.chain.is_empty() {
                look.after.kept.push(Kept {
                    from: m.path.clone(),
                    raw: raw.to_vec(),
                    chain: r.chain,
                    _pins: pins,
                    dirs: std::sync::Arc::clone(&plan.mount_dirs),
                    mounts: std::sync::Arc::clone(&plan.mounts),
                });
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
                out,
                Held {
                    target: cur.clone(),
                    source: cur.clone(),
                    read_only: false,
                    link: false,
                    id: None,
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
    look
}

/// Adds `first`, a protected path's first missing name, to `out`: when it
/// lies in a writable dir and is not there already. Nothing is looked at
/// again: whether it exists was decided by the look (a name made since is
/// swept too).
fn absent_at(plan: &ExecPlan, first: PathBuf, out: &mut Vec<Absent>) {
    let (Some(parent), Some(name)) = (first.parent(), first.file_name()) else {
        return;
    };
    if !plan
        .mounts
        .iter()
        .any(|w| !w.read_only && parent.starts_with(&w.path))
        || out.iter().any(|a| a.host == first)
    {
        return;
    }
    // By path from the outermost writable dir holding it: a nested allowed
    // dir can itself be renamed away and made anew.
    let Some((outer, root)) = outermost_writable(&plan.mounts, &first)
        .and_then(|o| plan.mount_dirs.iter().find(|(p, _)| p == o))
    else {
        return;
    };
    // The dir it would be made in, if it can be opened now (if not, the
    // path under the allowed dir still finds what is made there later).
    let dir = cap_std::fs::Dir::open_ambient_dir(parent, cap_std::ambient_authority()).ok();
    out.push(Absent {
        // What the call's stderr names: where the tool sees it.
        path: plan.guest_of(&first).unwrap_or_else(|| first.clone()),
        host: first.clone(),
        dir,
        name: name.to_os_string(),
        root: std::sync::Arc::clone(root),
        rel: first.strip_prefix(outer).ok().map(Path::to_path_buf),
    });
}

/// A protected name that does not exist, and where to look for it after.
#[derive(Debug)]
pub(crate) struct Absent {
    /// Where the tool sees it (its guest path): only shown.
    path: PathBuf,
    /// Its host path.
    host: PathBuf,
    /// The dir it would be made in (when it could be opened), and the name.
    dir: Option<cap_std::fs::Dir>,
    name: std::ffi::OsString,
    /// The writable allowed dir it lies in, and the path from there.
    root: std::sync::Arc<cap_std::fs::Dir>,
    rel: Option<PathBuf>,
}

/// Moves aside what was made during a call at its protected paths (see
/// [`move_aside_created`] and [`move_aside_replaced`]) once its processes
/// are gone, also when the call is dropped before it ends (an MCP cancel, a
/// signal to the CLI): then a thread sweeps a few times while the backend's
/// cleanup finishes, and [`sweep_cancelled`] sweeps what is left before the
/// process exits.
pub(crate) struct Sweep {
    after: Option<std::sync::Arc<After>>,
}

static CANCELLED: std::sync::Mutex<Vec<std::sync::Arc<After>>> = std::sync::Mutex::new(Vec::new());

impl Sweep {
    /// A sweep with nothing to sweep yet.
    pub(crate) fn unarmed() -> Self {
        Sweep { after: None }
    }

    /// What to check: the [`After`] of the look the call's mounts come
    /// from. Armed before the tool can run; a later look (the gVisor gate's)
    /// replaces an earlier one's, which is let go unchecked (the mounts come
    /// from the later one).
    pub(crate) fn arm(&mut self, after: After) {
        self.after = (!after.is_empty()).then(|| std::sync::Arc::new(after));
    }

    /// After the call ended: moves aside, with notes on `out`'s stderr.
    pub(crate) fn finish(mut self, out: &mut crate::outcome::RunOutput) {
        if let Some(a) = self.after.take() {
            sweep(&a, Some(out));
        }
    }
}

impl Drop for Sweep {
    fn drop(&mut self) {
        let Some(a) = self.after.take() else { return };
        if let Ok(mut c) = CANCELLED.lock() {
            // Kept for the sweep at exit; a bounded number (each holds dir
            // handles), the oldest dropped first.
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
                    sweep(&a, None);
                }
                // Done: the sweep at exit would be against a look long
                // past (what the user has made since is theirs).
                if let Ok(mut c) = CANCELLED.lock() {
                    c.retain(|o| !std::sync::Arc::ptr_eq(o, &a));
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
        sweep(&a, None);
    }
}

/// Both checks of `after`, the notes on `out`'s stderr (or, for a
/// cancelled call, in the log).
fn sweep(after: &After, out: Option<&mut crate::outcome::RunOutput>) {
    let mut notes = String::new();
    move_aside_created(&after.absent, &mut notes);
    move_aside_replaced(&after.kept, &mut notes);
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

/// After a call (its processes gone): each protected name that was missing
/// at the call's look and exists now was made during the call (by the call,
/// or by another writer: they cannot be told apart). It is renamed aside in
/// its dir (`NAME.toolhost-refused-PID-NANOS-N`, which git does not read),
/// found by the dir's handle and by its path in the allowed dir, and a note
/// says so. Nothing is removed.
fn move_aside_created(absent: &[Absent], notes: &mut String) {
    for a in absent {
        // The dir held since before the call (it may have moved), then the
        // path as it is now (under the allowed dir's handle: a symlink out
        // of it is not followed).
        let by_path = a.rel.as_ref().and_then(|rel| under(&a.root, rel));
        let held_dir = a.dir.as_ref().and_then(|d| d.try_clone().ok());
        let places = std::iter::once(held_dir.map(|d| (d, a.name.clone())))
            .chain(std::iter::once(by_path))
            .flatten();
        for (dir, name) in places {
            if dir.symlink_metadata(&name).is_err() {
                continue;
            }
            notes.push_str(&note(
                &a.path,
                "did not exist when the call started, so nothing held it; it was made during the call",
                move_aside(&dir, &name),
            ));
        }
    }
}

/// After a call (its processes gone): each protected path that existed (in
/// part) at the call's look is walked again; the first file met that is not
/// the one met at the look (a mount holds a file, not a name: a writer
/// outside the call can rename the held file away, and the call then make
/// the name anew) is renamed aside, by its path under its writable allowed
/// dir's handle, and a note says so. Where nothing holds the path (no mount
/// namespace), a file the call itself put in its place is found the same way.
fn move_aside_replaced(kept: &[Kept], notes: &mut String) {
    const WHY: &str = "existed when the call started, but what is there now is another file (what was there was moved away and the name made anew during the call)";
    for k in kept {
        // A few tries: the dir opened to rename in must be the one the walk
        // went through (a writer swapping a dir on the way would otherwise
        // have another dir's entry renamed).
        for attempt in 0..4 {
            match replaced_once(k) {
                Replaced::Same => break,
                Replaced::Moved(shown, to) => {
                    notes.push_str(&note(&shown, WHY, to));
                    break;
                }
                Replaced::Raced(shown) if attempt == 3 => {
                    notes.push_str(&note(&shown, WHY, None));
                }
                Replaced::Raced(_) => std::thread::yield_now(),
            }
        }
    }
}

/// What one walk of [`move_aside_replaced`] did.
enum Replaced {
    /// Nothing differs (or what differs is not in a writable dir).
    Same,
    /// What differed (as the tool sees it), moved aside to a new name or not.
    Moved(PathBuf, Option<std::ffi::OsString>),
    /// The dir that holds what differs changed under the walk.
    Raced(PathBuf),
}

fn replaced_once(k: &Kept) -> Replaced {
    let from_now = std::fs::symlink_metadata(&k.from)
        .ok()
        .and_then(|m| id_of(&m));
    let now = resolve_entry(&k.from, &k.raw);
    let Some(i) = now.chain.iter().zip(&k.chain).position(|(a, b)| a != b) else {
        return Replaced::Same;
    };
    let p = &now.chain[i].0;
    let Some((outer, root)) =
        outermost_writable(&k.mounts, p).and_then(|o| k.dirs.iter().find(|(d, _)| d == o))
    else {
        return Replaced::Same;
    };
    let shown = crate::plan::guest_in(&k.mounts, p).unwrap_or_else(|| p.clone());
    // The dir the walk found it in: an earlier step of the walk, or where
    // it started.
    let parent = p.parent();
    let expect = now.chain[..i]
        .iter()
        .rev()
        .find(|(c, _)| Some(c.as_path()) == parent)
        .map(|(_, id)| *id)
        .or_else(|| (parent == Some(k.from.as_path())).then_some(from_now));
    let Some((dir, name)) = p.strip_prefix(outer).ok().and_then(|rel| under(root, rel)) else {
        return Replaced::Raced(shown);
    };
    match expect {
        // Where the platform gives no identity, none is compared.
        Some(None) => {}
        Some(Some(seen)) => {
            if crate::sys::file_id::of_dir(&dir).ok() != Some((seen.dev, seen.ino)) {
                return Replaced::Raced(shown);
            }
        }
        None => return Replaced::Raced(shown),
    }
    if dir.symlink_metadata(&name).is_err() {
        return Replaced::Raced(shown);
    }
    let to = move_aside(&dir, &name);
    Replaced::Moved(shown, to)
}

/// The dir that holds `rel` under `root` (a handle: no symlink out of
/// `root` is followed), and its last name.
fn under(root: &cap_std::fs::Dir, rel: &Path) -> Option<(cap_std::fs::Dir, std::ffi::OsString)> {
    let parent = rel.parent().filter(|p| !p.as_os_str().is_empty());
    let dir = match parent {
        Some(p) => root.open_dir(p).ok()?,
        None => root.try_clone().ok()?,
    };
    Some((dir, rel.file_name()?.to_os_string()))
}

/// The note for `path` (as the tool sees it), which `why`, moved to `to`
/// (beside it) or not.
fn note(path: &Path, why: &str, to: Option<std::ffi::OsString>) -> String {
    let note = match to {
        Some(to) => format!(
            "toolhost: {} is a protected path (protected_paths) that {why}; moved to {}\n",
            path.display(),
            path.with_file_name(&to).display()
        ),
        None => format!(
            "toolhost: {} is a protected path (protected_paths) that {why}, and could not be moved aside: remove it before running git there\n",
            path.display()
        ),
    };
    tracing::debug!("{}", note.trim_end());
    note
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
