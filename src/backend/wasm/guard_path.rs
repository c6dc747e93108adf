//! Changes by path, made through a fresh handle on the parent (`protect` has
//! the rule and why), for any preview whose descriptors live in the
//! component's resource table: [`PathFs`] is what a preview provides
//! (preview 2 in `guard_p2`, preview 3 in `p3`), the walk itself is here.

use std::future::Future;

use super::protect::{self, Guard};

/// Symlink hops an open for writing follows (Linux's limit is 40).
const MAX_HOPS: usize = 40;

/// The directory operations the walk needs, on descriptors known by their
/// table index (`rep`), with the preview's own error codes.
pub(super) trait PathFs: Send {
    /// The preview's `error-code`.
    type Code: Send;
    /// `not-permitted`.
    fn not_permitted() -> Self::Code;
    /// `loop`.
    fn too_many_hops() -> Self::Code;
    /// Opens `path` under `dir` as a directory, following symlinks, and
    /// restricts the new handle (`Guard::restrict`); its rep.
    fn open_dir(
        &mut self,
        guard: &Guard,
        dir: u32,
        path: &str,
    ) -> impl Future<Output = wasmtime::Result<Result<u32, Self::Code>>> + Send;
    /// Whether `name` under `dir` is a symlink (not followed).
    fn is_symlink(&mut self, dir: u32, name: &str) -> impl Future<Output = bool> + Send;
    /// The target of the symlink `name` under `dir`.
    fn readlink(
        &mut self,
        dir: u32,
        name: &str,
    ) -> impl Future<Output = wasmtime::Result<Result<String, Self::Code>>> + Send;
    /// Whether a change may not name `name` in the directory `dir`: false
    /// when `dir` is a file (the change fails on its own), true when it
    /// cannot be told.
    fn named(&mut self, guard: &Guard, dir: u32, name: &str) -> bool;
    /// Drops a handle opened by [`open_dir`](Self::open_dir).
    fn close(&mut self, rep: u32) -> wasmtime::Result<()>;
}

/// The handle a change goes through and the final name it names there.
pub(super) struct Target {
    pub(super) rep: u32,
    /// Opened here (dropped by `release`), or the guest's own handle.
    owned: bool,
    pub(super) name: String,
}

pub(super) type Checked<C> = wasmtime::Result<Result<Option<Target>, C>>;

pub(super) fn release<F: PathFs>(fs: &mut F, t: &Target) -> wasmtime::Result<()> {
    if t.owned {
        fs.close(t.rep)?;
    }
    Ok(())
}

/// Opens the parent of `path` under `dir` (following symlinks, as the change
/// itself would) and checks the final name. `Ok(None)`: go on unchanged.
async fn target<F: PathFs>(fs: &mut F, guard: &Guard, dir: u32, path: &str) -> Checked<F::Code> {
    let path = &*protect::slashes(path);
    let Some((parent, name)) = protect::split(path) else {
        return Ok(Ok(None));
    };
    let (rep, owned) = match parent {
        None => (dir, false),
        Some(p) => match fs.open_dir(guard, dir, p).await? {
            Ok(rep) => (rep, true),
            Err(e) => return Ok(Err(e)),
        },
    };
    let t = Target {
        rep,
        owned,
        name: name.to_string(),
    };
    if fs.named(guard, rep, name.trim_end_matches('/')) {
        release(fs, &t)?;
        return Ok(Err(F::not_permitted()));
    }
    Ok(Ok(Some(t)))
}

/// The target of a change whose final name is not followed.
pub(super) async fn change_target<F: PathFs>(
    fs: &mut F,
    guard: &Guard,
    dir: u32,
    path: &str,
) -> Checked<F::Code> {
    if !guard.active() {
        return Ok(Ok(None));
    }
    target(fs, guard, dir, path).await
}

/// The target of an open for writing: a final symlink followed hop by hop
/// (when `follow`), so that the last name is opened without following.
pub(super) async fn open_target<F: PathFs>(
    fs: &mut F,
    guard: &Guard,
    dir: u32,
    follow: bool,
    path: &str,
) -> Checked<F::Code> {
    let mut t = match change_target(fs, guard, dir, path).await? {
        Ok(Some(t)) => t,
        other => return Ok(other),
    };
    if !follow {
        return Ok(Ok(Some(t)));
    }
    // The path reached so far, from `dir`: a link's target is taken from
    // its own directory, named from `dir` too, so that `..` in it may climb
    // as far as `dir` allows (not only to the link's directory).
    let mut cur = protect::slashes(path).into_owned();
    for _ in 0..MAX_HOPS {
        // A name ending in `/` must be a directory: the host follows it
        // there, and the caller acts on it as one.
        if t.name.ends_with('/') || !fs.is_symlink(t.rep, &t.name).await {
            return Ok(Ok(Some(t)));
        }
        let link = match fs.readlink(t.rep, &t.name).await? {
            Ok(l) => protect::slashes(&l).into_owned(),
            Err(e) => {
                release(fs, &t)?;
                return Ok(Err(e));
            }
        };
        // An absolute target stays absolute, and is refused below.
        cur = match cur.trim_end_matches('/').rfind('/') {
            Some(i) if !link.starts_with('/') => format!("{}/{link}", &cur[..i]),
            _ => link,
        };
        let next = match target(fs, guard, dir, &cur).await? {
            Ok(Some(n)) => n,
            // An absolute target, or one ending in `.` or `..`: not a file
            // this open could create or write inside the sandbox.
            Ok(None) => {
                release(fs, &t)?;
                return Ok(Err(F::not_permitted()));
            }
            Err(e) => {
                release(fs, &t)?;
                return Ok(Err(e));
            }
        };
        if next.rep == t.rep {
            t = Target {
                owned: t.owned,
                ..next
            };
        } else {
            release(fs, &t)?;
            t = next;
        }
    }
    release(fs, &t)?;
    Ok(Err(F::too_many_hops()))
}

/// The target of a set-times by path, set through it on its last name
/// *unfollowed*: a final symlink is followed hop by hop (when `follow`), as
/// for an open for writing, so a link into `.git` reaches `.git`'s handle,
/// which is read-only. A path that names a directory by `.` or `..` (no plain
/// final name), or ends in `/` (or whose last link's target does), is opened
/// itself (restricted like any directory handle) and its times are set
/// through it as `.`.
pub(super) async fn times_target<F: PathFs>(
    fs: &mut F,
    guard: &Guard,
    dir: u32,
    follow: bool,
    path: &str,
) -> Checked<F::Code> {
    if !guard.active() {
        return Ok(Ok(None));
    }
    let path = &*protect::slashes(path);
    // A trailing slash makes the host follow a final symlink even when told
    // not to (and again at the set, after any check), so such a path is
    // opened as the directory it must name: given so, or reached by
    // following a link whose target ends in `/`.
    if protect::split(path).is_none() || path.ends_with('/') {
        return dir_itself(fs, guard, dir, path).await;
    }
    let t = match open_target(fs, guard, dir, follow, path).await? {
        Ok(Some(t)) => t,
        other => return Ok(other),
    };
    if !t.name.ends_with('/') {
        return Ok(Ok(Some(t)));
    }
    let itself = dir_itself(fs, guard, t.rep, &t.name).await;
    release(fs, &t)?;
    itself
}

/// A fresh handle on the directory `path` names under `dir` (restricted),
/// to act on as `.`.
async fn dir_itself<F: PathFs>(
    fs: &mut F,
    guard: &Guard,
    dir: u32,
    path: &str,
) -> Checked<F::Code> {
    Ok(fs.open_dir(guard, dir, path).await?.map(|rep| {
        Some(Target {
            rep,
            owned: true,
            name: ".".to_string(),
        })
    }))
}

/// Both ends of a rename or link; `Ok(None)` when either goes on unchanged.
pub(super) async fn two_targets<F: PathFs>(
    fs: &mut F,
    guard: &Guard,
    (fd_a, a): (u32, &str),
    (fd_b, b): (u32, &str),
) -> wasmtime::Result<Result<Option<(Target, Target)>, F::Code>> {
    let ta = match change_target(fs, guard, fd_a, a).await? {
        Ok(Some(t)) => t,
        other => return Ok(other.map(|_| None)),
    };
    match change_target(fs, guard, fd_b, b).await? {
        Ok(Some(tb)) => Ok(Ok(Some((ta, tb)))),
        other => {
            release(fs, &ta)?;
            Ok(other.map(|_| None))
        }
    }
}
