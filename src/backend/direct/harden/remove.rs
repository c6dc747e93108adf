//! Removing a directory tree a tool filled (the call's private tmp).
//!
//! A tool controls what is in its tmp: how deep it nests, how many
//! entries, symlinks, and the permission bits of each directory. So the
//! removal:
//! - has no recursion and a handful of fds open at once (the top, a
//!   directory or two below it, and a listing of each), whatever the depth: a
//!   recursive removal (std's, cap-std's) holds one fd and one stack frame
//!   per level, and a chain of a few thousand nested directories, made in
//!   a fraction of a second, overflows a thread's stack (an abort of the
//!   whole process) or runs out of fds;
//! - works through handles: the top by the caller's handle, each directory
//!   below by a handle opened from its parent's without following a
//!   symlink or crossing a mount, so nothing outside the tree is reached
//!   through a link or a swapped path;
//! - gives a directory its owner's `rwx` back before it reads it (what its
//!   owner, and so an unprivileged toolhost, may do), through the handle
//!   (`/proc/self/fd`), and goes on past an entry it cannot remove.
//!
//! How: the top `T` is emptied level by level. For each directory `S` in
//! `T`, the directories in `S` are moved up into `T` (renamed, under fresh
//! names), the rest of `S` is removed, then `S`; `T` is read again until it
//! is empty. Each move takes a directory one level up, so this ends. A
//! pass that removes and moves nothing (a move can fail where a removal
//! would not: a full filesystem) goes down instead, from the top, one
//! deepest directory at a time (`dive`). A removal gives up after a
//! minute (`BUDGET`).

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags, ResolveFlags};
use rustix::io::Errno;

/// Empties the directory `top` (a handle of it) without following a
/// symlink: everything in it is removed, at any depth; `top` itself stays.
/// Gives up after [`BUDGET`] (a writer that outlived its call would keep it
/// going).
pub(super) fn empty_tree(top: BorrowedFd<'_>) -> io::Result<()> {
    let deadline = std::time::Instant::now() + BUDGET;
    let mut fresh: u64 = 0;
    loop {
        let mut seen = false;
        let mut progress = false;
        let mut first_err: Option<io::Error> = None;
        for entry in listing(top)? {
            let (name, ft) = entry?;
            seen = true;
            let r = if ft == Some(FileType::Directory) || ft.is_none() && is_dir(top, &name) {
                empty_one_level(top, &name, &mut fresh)
            } else {
                unlink(top, &name, AtFlags::empty())
            };
            match r {
                Ok(p) => progress |= p,
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        if !seen {
            return Ok(());
        }
        if !progress {
            // A move can fail where a removal would not (ENOSPC: a full
            // filesystem has no room for a new entry in the top; EXDEV,
            // ENOKEY): then down, by handles, from the top each time.
            return dive(top, deadline).map_err(|e| first_err.unwrap_or(e));
        }
        if std::time::Instant::now() > deadline {
            return Err(io::Error::other(
                "still changing after the removal's time budget",
            ));
        }
    }
}

/// How long a removal may take.
const BUDGET: std::time::Duration = std::time::Duration::from_secs(60);

/// Empties `top` without moving anything: goes down the first directory at
/// each level to one that holds none, removing the other entries of each
/// level on the way (which frees space first), removes that directory, and
/// starts again from the top. Two directories open at a time; each round
/// removes one directory, so this ends (in time quadratic in the depth:
/// only for what the level-by-level removal could not do).
fn dive(top: BorrowedFd<'_>, deadline: std::time::Instant) -> io::Result<()> {
    loop {
        let mut parent: Option<OwnedFd> = None;
        let mut cur: Option<(OwnedFd, CString)> = None;
        loop {
            let here = cur.as_ref().map_or(top, |(fd, _)| fd.as_fd());
            let mut sub = None;
            for entry in listing(here)? {
                let (name, ft) = entry?;
                if ft == Some(FileType::Directory) || ft.is_none() && is_dir(here, &name) {
                    sub.get_or_insert(name);
                } else {
                    unlink(here, &name, AtFlags::empty())?;
                }
            }
            let Some(sub) = sub else { break };
            let next = open_dir(here, &sub)?;
            parent = cur.map(|(fd, _)| fd);
            cur = Some((next, sub));
        }
        let Some((fd, name)) = cur else {
            return Ok(()); // the top holds no directory, and nothing else
        };
        drop(fd);
        unlink(
            parent.as_ref().map_or(top, |p| p.as_fd()),
            &name,
            AtFlags::REMOVEDIR,
        )?;
        if std::time::Instant::now() > deadline {
            return Err(io::Error::other(
                "still changing after the removal's time budget",
            ));
        }
    }
}

/// Moves the directories in `parent/name` up into `parent`, removes its
/// other entries and then it (if it is empty by then): whether anything
/// was moved or removed.
fn empty_one_level(parent: BorrowedFd<'_>, name: &CStr, fresh: &mut u64) -> io::Result<bool> {
    let dir = open_dir(parent, name)?;
    let mut progress = false;
    let mut first_err = None;
    for entry in listing(dir.as_fd())? {
        let (child, ft) = entry?;
        let r = if ft == Some(FileType::Directory) || ft.is_none() && is_dir(dir.as_fd(), &child) {
            move_up(dir.as_fd(), &child, parent, fresh)
        } else {
            unlink(dir.as_fd(), &child, AtFlags::empty())
        };
        match r {
            Ok(p) => progress |= p,
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    drop(dir);
    match unlink(parent, name, AtFlags::REMOVEDIR) {
        Ok(p) => Ok(progress | p),
        // Not empty yet: what could not be removed, or what was moved in
        // meanwhile; the next pass sees it.
        Err(_) if progress => Ok(true),
        Err(e) => Err(first_err.unwrap_or(e)),
    }
}

/// Renames the directory `from/name` to a fresh name in `to`. Moving a
/// directory to another parent needs write permission on it (its `..`
/// changes): one without is given its owner's `rwx` first.
fn move_up(
    from: BorrowedFd<'_>,
    name: &CStr,
    to: BorrowedFd<'_>,
    fresh: &mut u64,
) -> io::Result<bool> {
    match rename_fresh(from, name, to, fresh) {
        Err(e) if e.raw_os_error() == Some(Errno::ACCESS.raw_os_error()) => {
            owner_rwx(&open_beneath(from, name, OFlags::PATH)?)?;
            rename_fresh(from, name, to, fresh)
        }
        r => r,
    }
}

fn rename_fresh(
    from: BorrowedFd<'_>,
    name: &CStr,
    to: BorrowedFd<'_>,
    fresh: &mut u64,
) -> io::Result<bool> {
    for _ in 0..64 {
        *fresh += 1;
        let new = CString::new(format!(".toolhost-rm-{}", *fresh))
            .map_err(|_| io::Error::other("a name with a NUL"))?;
        match rustix::fs::renameat_with(from, name, to, &new, RenameFlags::NOREPLACE) {
            Ok(()) => return Ok(true),
            Err(Errno::EXIST) => continue,
            // No RENAME_NOREPLACE here: a plain rename, to a name that is
            // free now (only this removal writes in the tree).
            Err(Errno::INVAL | Errno::NOSYS | Errno::PERM) => {
                if rustix::fs::statat(to, &new, AtFlags::SYMLINK_NOFOLLOW).is_ok() {
                    continue;
                }
                rustix::fs::renameat(from, name, to, &new)?;
                return Ok(true);
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(io::Error::other("no free name to move a directory to"))
}

/// Removes `dir/name` (a directory with `REMOVEDIR`); a name gone
/// meanwhile is no error (and no progress).
fn unlink(dir: BorrowedFd<'_>, name: &CStr, flags: AtFlags) -> io::Result<bool> {
    match rustix::fs::unlinkat(dir, name, flags) {
        Ok(()) => Ok(true),
        Err(Errno::NOENT) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Whether `dir/name` is a directory (not following a symlink), for a
/// listing that did not say.
fn is_dir(dir: BorrowedFd<'_>, name: &CStr) -> bool {
    rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory)
}

/// Opens the directory `parent/name` to read and change it: not through a
/// symlink, not across a mount; with `rwx` for its owner first if it lacks
/// them (set through a handle of it that needs no permission, so a path
/// swapped meanwhile is not what is changed).
pub(super) fn open_dir(parent: BorrowedFd<'_>, name: &CStr) -> io::Result<OwnedFd> {
    let path = open_beneath(parent, name, OFlags::PATH)?;
    owner_rwx(&path)?;
    reopen(&path)
}

/// A handle to read the directory `dir` (an `O_PATH` handle) through.
pub(super) fn reopen(dir: &OwnedFd) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat(
        dir,
        c".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Gives the directory `dir` (a handle, `O_PATH` will do) `rwx` for its
/// owner if it lacks them, through the handle (`/proc/self/fd`), never a
/// path that could lead elsewhere meanwhile.
pub(super) fn owner_rwx(dir: &OwnedFd) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let st = rustix::fs::fstat(dir)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        return Err(Errno::NOTDIR.into());
    }
    if st.st_mode & 0o700 != 0o700 {
        let me = format!("/proc/self/fd/{}", dir.as_raw_fd());
        rustix::fs::chmod(
            me.as_str(),
            Mode::from_raw_mode((st.st_mode & 0o7777) | 0o700),
        )?;
    }
    Ok(())
}

/// Puts back the permission bits `mode` of `dir` (a handle), through the
/// handle; best effort.
pub(super) fn set_mode(dir: &OwnedFd, mode: rustix::fs::RawMode) {
    use std::os::fd::AsRawFd;
    let me = format!("/proc/self/fd/{}", dir.as_raw_fd());
    let _ = rustix::fs::chmod(me.as_str(), Mode::from_raw_mode(mode & 0o7777));
}

/// The directory `parent/name`, one component, opened with `flags`:
/// never through a symlink or across a mount (`openat2`; where the kernel
/// has none, or a seccomp profile refuses it with EPERM, `O_NOFOLLOW`, and
/// a directory of another device than `parent` is refused).
pub(super) fn open_beneath(
    parent: BorrowedFd<'_>,
    name: &CStr,
    flags: OFlags,
) -> io::Result<OwnedFd> {
    let flags = flags | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_XDEV;
    match rustix::fs::openat2(parent, name, flags, Mode::empty(), resolve) {
        Err(Errno::NOSYS | Errno::PERM) => {
            let fd = rustix::fs::openat(parent, name, flags, Mode::empty())?;
            if rustix::fs::fstat(&fd)?.st_dev != rustix::fs::fstat(parent)?.st_dev {
                return Err(Errno::XDEV.into());
            }
            Ok(fd)
        }
        r => Ok(r?),
    }
}

/// The entries of `dir` but `.` and `..`: each name and its type if the
/// listing gave one.
fn listing(
    dir: BorrowedFd<'_>,
) -> io::Result<impl Iterator<Item = io::Result<(CString, Option<FileType>)>>> {
    let fd = rustix::fs::openat(
        dir,
        c".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let entries = rustix::fs::Dir::new(fd)?;
    Ok(entries.filter_map(|e| match e {
        Ok(e) => {
            let name = e.file_name();
            if name == c"." || name == c".." {
                return None;
            }
            let ft = e.file_type();
            let ft = (ft != FileType::Unknown).then_some(ft);
            Some(Ok((name.to_owned(), ft)))
        }
        Err(e) => Some(Err(e.into())),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn open(p: &Path) -> OwnedFd {
        rustix::fs::open(p, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap()
    }

    /// `depth` nested dirs `d/d/…` in `dir`, by handles (the path is far
    /// longer than PATH_MAX), with a file at the bottom.
    fn chain(dir: &Path, depth: usize) {
        let mut fd = open(dir);
        for _ in 0..depth {
            rustix::fs::mkdirat(&fd, "d", Mode::from_raw_mode(0o700)).unwrap();
            fd = rustix::fs::openat(&fd, "d", OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty())
                .unwrap();
        }
        rustix::fs::openat(
            &fd,
            "leaf",
            OFlags::CREATE | OFlags::WRONLY,
            Mode::from_raw_mode(0o600),
        )
        .unwrap();
    }

    /// On a thread of `stack` bytes.
    fn on_thread<T: Send + 'static>(stack: usize, f: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::Builder::new()
            .stack_size(stack)
            .spawn(f)
            .unwrap()
            .join()
            .unwrap()
    }

    #[test]
    fn a_chain_deeper_than_a_stack_is_removed_on_a_small_one() {
        let t = tempfile::tempdir().unwrap();
        let top = t.path().join("top");
        std::fs::create_dir(&top).unwrap();
        chain(&top, 20_000);
        // Twin: a shallow tree on the same small stack.
        let shallow = t.path().join("shallow");
        std::fs::create_dir(&shallow).unwrap();
        chain(&shallow, 3);
        for dir in [shallow, top] {
            let fd = open(&dir);
            let r = on_thread(64 * 1024, move || {
                empty_tree(fd.as_fd()).map_err(|e| e.to_string())
            });
            assert_eq!(r, Ok(()), "{dir:?}");
            assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "{dir:?}");
        }
    }

    /// The fallback that moves nothing (for a full filesystem, where a
    /// move needs room a removal does not) empties a mixed tree alone.
    #[test]
    fn the_dive_alone_empties_a_tree() {
        let t = tempfile::tempdir().unwrap();
        let top = t.path().join("top");
        for d in ["a/b/c", "a/b2", "e", "f/g/h/i"] {
            std::fs::create_dir_all(top.join(d)).unwrap();
            std::fs::write(top.join(d).join("file"), "x").unwrap();
        }
        std::fs::write(top.join("loose"), "x").unwrap();
        chain(&top.join("e"), 50);
        let deadline = std::time::Instant::now() + BUDGET;
        dive(open(&top).as_fd(), deadline).unwrap();
        assert_eq!(std::fs::read_dir(&top).unwrap().count(), 0);
    }

    #[test]
    fn a_symlink_in_the_tree_is_removed_not_followed() {
        let t = tempfile::tempdir().unwrap();
        let outside = t.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("canary"), "kept").unwrap();
        let top = t.path().join("top");
        std::fs::create_dir_all(top.join("a/b")).unwrap();
        std::os::unix::fs::symlink(&outside, top.join("dirlink")).unwrap();
        std::os::unix::fs::symlink(outside.join("canary"), top.join("a/b/filelink")).unwrap();
        std::os::unix::fs::symlink("../../../outside", top.join("a/b/rel")).unwrap();
        empty_tree(open(&top).as_fd()).unwrap();
        assert_eq!(std::fs::read_dir(&top).unwrap().count(), 0);
        assert_eq!(
            std::fs::read_to_string(outside.join("canary")).unwrap(),
            "kept"
        );
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1);
    }

    /// A directory without permissions for its owner (a tool's `chmod 0`)
    /// is given them back and emptied, by a thread without the
    /// capabilities that pass over permissions (an unprivileged toolhost).
    /// Twin: that thread cannot read such a directory directly.
    #[test]
    fn a_directory_without_permissions_is_emptied_by_its_owner() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let top = t.path().join("top");
        std::fs::create_dir_all(top.join("a/b/c")).unwrap();
        std::fs::write(top.join("a/b/c/f"), "x").unwrap();
        std::fs::write(top.join("a/f"), "x").unwrap();
        for d in ["a/b/c", "a/b", "a"] {
            std::fs::set_permissions(top.join(d), std::fs::Permissions::from_mode(0o000)).unwrap();
        }
        let fd = open(&top);
        let a = top.join("a");
        let (direct, r) = on_thread(1 << 20, move || {
            if let Ok(mut caps) = rustix::thread::capabilities(None) {
                use rustix::thread::CapabilitySet as C;
                caps.effective
                    .remove(C::DAC_OVERRIDE | C::DAC_READ_SEARCH | C::FOWNER);
                rustix::thread::set_capabilities(None, caps).unwrap();
            }
            let direct =
                rustix::fs::open(&a, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).map(|_| ());
            (direct, empty_tree(fd.as_fd()).map_err(|e| e.to_string()))
        });
        assert_eq!(direct, Err(Errno::ACCESS));
        assert_eq!(r, Ok(()));
        assert_eq!(std::fs::read_dir(&top).unwrap().count(), 0);
    }
}
