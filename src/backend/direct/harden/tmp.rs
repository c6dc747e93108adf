//! The call's private tmp: a fresh dir per call, removed after it by a
//! reaper thread (`flush_private_tmps` waits for it).
//!
//! Each tmp is locked (`flock`) by the process that made it, from the
//! moment it has its name until it is removed. A process killed with
//! SIGKILL removes nothing; the lock goes with it, and the next process
//! to start a reaper removes what it left (`sweep_abandoned`).

use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, mpsc};

/// The call's private `TMPDIR`: created before the spawn, removed (with what
/// the tool left in it) when the call is over.
pub(in crate::backend::direct) struct PrivateTmp {
    pub(super) path: PathBuf,
    pub(super) fd: OwnedFd,
    /// The directory as `create` left it: identity, owner, mode, and its
    /// change time, which any change to it sets (an entry made or removed,
    /// a chmod, a chown, an extended attribute or ACL). Asking for it now
    /// makes the next change's time fine-grained where the filesystem keeps
    /// such times (multigrain timestamps), so it cannot fall in the same tick.
    made: Made,
}

#[derive(Clone, Copy, PartialEq, Eq)]
struct Made {
    dev: u64,
    ino: u64,
    uid: u32,
    gid: u32,
    mode: u32,
    ctime: (i64, i64),
}

impl Made {
    // `st_dev` and `st_ino` are `u64` on Linux, not on every Unix.
    #[allow(clippy::unnecessary_cast)]
    fn of(st: &rustix::fs::Stat) -> Self {
        Made {
            dev: st.st_dev as u64,
            ino: st.st_ino as u64,
            uid: st.st_uid,
            gid: st.st_gid,
            mode: st.st_mode,
            ctime: (st.st_ctime as i64, st.st_ctime_nsec as i64),
        }
    }
}

/// 128 random bits, as hex, for a name no other process can guess (a tool
/// of a concurrent call, which can stat paths it cannot list).
fn random_hex() -> io::Result<String> {
    let mut b = [0u8; 16];
    let mut got = 0;
    while got < b.len() {
        let rest = &mut b[got..];
        // SAFETY: getrandom writes at most `rest.len()` bytes into `rest`.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        got += n as usize;
    }
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

impl PrivateTmp {
    /// A new directory in `std::env::temp_dir()`, mode 0700, under a random
    /// name, opened without following a symlink, checked to be the
    /// directory made (toolhost's, 0700) and locked (`flock`) for as long
    /// as this process (or the call's supervisor, which shares its fds)
    /// holds it: that is how a later process tells a tmp that was
    /// abandoned (`sweep_abandoned`) from one in use. It is made and locked
    /// under a staging name (`.new`) and then renamed, so that a tmp under
    /// its final name is locked from the first moment it has that name.
    pub(super) fn create() -> io::Result<Self> {
        use rustix::fs::{AtFlags, CWD, FileType, FlockOperation, Mode, OFlags};
        let base = std::env::temp_dir();
        let base_fd = rustix::fs::open(
            &base,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let mut last = None;
        for _ in 0..8 {
            let name = format!("{PREFIX}{}", random_hex()?);
            let staging = format!("{name}{STAGING}");
            match rustix::fs::mkdirat(&base_fd, &staging, Mode::from_raw_mode(0o700)) {
                Ok(()) => {}
                Err(e) if e == rustix::io::Errno::EXIST => {
                    last = Some(io::Error::from(e));
                    continue;
                }
                Err(e) => return Err(e.into()),
            }
            let fd = rustix::fs::openat(
                &base_fd,
                &staging,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            let st = rustix::fs::fstat(&fd)?;
            // The permission bits only: a set-group-ID base dir makes its
            // new dirs set-group-ID too.
            if FileType::from_raw_mode(st.st_mode) != FileType::Directory
                || st.st_mode & 0o777 != 0o700
                || st.st_uid != rustix::process::geteuid().as_raw()
            {
                // Not the directory made: what is there is not toolhost's
                // to remove.
                return Err(io::Error::other(
                    "the private tmp was replaced as it was made",
                ));
            }
            // Another process's sweep may hold it for a moment (it leaves a
            // young staging dir alone): then take another name. On a
            // filesystem without locks the tmp goes unlocked; no sweep can
            // lock it either, so none removes it.
            if rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive)
                == Err(rustix::io::Errno::WOULDBLOCK)
            {
                last = Some(io::Error::from(rustix::io::Errno::WOULDBLOCK));
                let _ = rustix::fs::unlinkat(&base_fd, &staging, AtFlags::REMOVEDIR);
                continue;
            }
            if let Err(e) = rename_new(&base_fd, &staging, &name) {
                let _ = rustix::fs::unlinkat(&base_fd, &staging, AtFlags::REMOVEDIR);
                return Err(e);
            }
            // The rename changed its change time: what it is now is what
            // `still_fresh` compares with.
            let path = base.join(&name);
            let st = rustix::fs::fstat(&fd)?;
            let here = rustix::fs::statat(CWD, &path, AtFlags::SYMLINK_NOFOLLOW)?;
            if (here.st_dev, here.st_ino) != (st.st_dev, st.st_ino) {
                return Err(io::Error::other(
                    "the private tmp was replaced as it was made",
                ));
            }
            let made = Made::of(&st);
            return Ok(PrivateTmp { path, fd, made });
        }
        Err(last.unwrap_or_else(|| io::Error::other("no free name")))
    }

    pub(in crate::backend::direct) fn path(&self) -> &Path {
        &self.path
    }

    /// How the directory at the tmp's path is now, if it is the one
    /// [`create`](Self::create) made (the same device and inode, not
    /// through a symlink).
    fn at_its_path(&self) -> Option<Made> {
        use rustix::fs::{AtFlags, CWD};
        let st = rustix::fs::statat(CWD, &self.path, AtFlags::SYMLINK_NOFOLLOW).ok()?;
        let now = Made::of(&st);
        (now.dev == self.made.dev && now.ino == self.made.ino).then_some(now)
    }

    /// Whether this tmp, made ahead of its call (`spare`), is still exactly
    /// as [`create`](Self::create) left it: at its path, with the same
    /// owner, group, mode and change time (nothing added, removed or
    /// changed in or on it), and empty.
    pub(super) fn still_fresh(&self) -> bool {
        use rustix::fs::{Mode, OFlags};
        if self.at_its_path() != Some(self.made)
            || rustix::fs::fstat(&self.fd).map(|st| Made::of(&st)) != Ok(self.made)
        {
            return false;
        }
        // Empty: nothing but `.` and `..` in it (the change time says so
        // already; this does not rest on it alone).
        let Ok(dir) = rustix::fs::openat(
            &self.fd,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
        ) else {
            return false;
        };
        let Ok(mut entries) = rustix::fs::Dir::new(dir) else {
            return false;
        };
        let mut n = 0;
        for e in entries.by_ref() {
            match e {
                Ok(e) if matches!(e.file_name().to_bytes(), b"." | b"..") => n += 1,
                _ => return false,
            }
        }
        n == 2
    }

    /// Lets go of a tmp made ahead that no call will use. If its path
    /// still leads to it, it is removed: `here` now, on this thread (the
    /// reaper itself, or a process that may be about to exit); else on the
    /// reaper, off the calls' path (a tool may have filled it). If its path
    /// leads elsewhere, what is there is not toolhost's to remove, and is
    /// left alone.
    pub(super) fn discard(mut self, here: bool) {
        if self.at_its_path().is_none() {
            self.path = PathBuf::new(); // nothing to remove (see Drop)
        } else if here {
            let path = std::mem::take(&mut self.path);
            match self.fd.try_clone() {
                Ok(fd) => remove_tmp(&path, fd),
                Err(_) => remove_by_path(&path),
            }
        }
        // Otherwise Drop queues it on the reaper.
    }
}

/// Removes a tmp while it stays locked (`fd`, its own handle): its
/// contents through that handle, so nothing is followed and what is
/// emptied is the tmp itself even if its path leads elsewhere now; then
/// the directory at `path`, if that is still the tmp.
pub(super) fn remove_tmp(path: &Path, fd: OwnedFd) {
    let dir = cap_std::fs::Dir::from_std_file(std::fs::File::from(fd));
    let r = empty(&dir).and_then(|()| {
        use rustix::fs::{AtFlags, CWD};
        let here = rustix::fs::statat(CWD, path, AtFlags::SYMLINK_NOFOLLOW)?;
        let st = rustix::fs::fstat(&dir)?;
        if (here.st_dev, here.st_ino) == (st.st_dev, st.st_ino) {
            std::fs::remove_dir(path)?;
        }
        Ok(())
    });
    if let Err(e) = r
        && e.kind() != io::ErrorKind::NotFound
    {
        tracing::warn!(path = %path.display(), "direct backend: could not remove a call's private tmp: {e}");
    }
}

/// What is in `dir`, removed without following a symlink (one is removed
/// itself). An entry gone meanwhile is no error.
fn empty(dir: &cap_std::fs::Dir) -> io::Result<()> {
    for e in dir.entries()? {
        let e = e?;
        let name = e.file_name();
        let r = if e.file_type()?.is_dir() {
            dir.remove_dir_all(&name)
        } else {
            dir.remove_file(&name)
        };
        match r {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

/// Removes a tmp by its path, when no handle of it is left to do it
/// through (the fd table full): std's `remove_dir_all` follows no
/// symlink either.
fn remove_by_path(path: &Path) {
    if let Err(e) = std::fs::remove_dir_all(path)
        && e.kind() != io::ErrorKind::NotFound
    {
        tracing::warn!(path = %path.display(), "direct backend: could not remove a call's private tmp: {e}");
    }
}

/// A private tmp's name: this prefix, then 32 hex digits (128 random
/// bits), then [`STAGING`] while it is being made (`create`).
const PREFIX: &str = "toolhost-call-";
const STAGING: &str = ".new";
/// A staging dir is locked within microseconds of being made; one that
/// is not, this long after, was left by a process that died in between.
const STAGING_AGE: std::time::Duration = std::time::Duration::from_secs(60);

/// Renames the staging dir `from` to `to` in `base`, never over anything
/// (where the filesystem cannot promise that, a plain rename: the name is
/// 128 random bits).
fn rename_new(base: &OwnedFd, from: &str, to: &str) -> io::Result<()> {
    use rustix::fs::RenameFlags;
    match rustix::fs::renameat_with(base, from, base, to, RenameFlags::NOREPLACE) {
        Err(e) if e == rustix::io::Errno::INVAL || e == rustix::io::Errno::NOSYS => {
            Ok(rustix::fs::renameat(base, from, base, to)?)
        }
        r => Ok(r?),
    }
}

/// Removes the private tmps that toolhost processes killed by SIGKILL
/// left in `std::env::temp_dir()` (nothing of theirs ran to remove them;
/// the supervisor that outlives them makes no system call beyond its
/// cleanup). One is removed only if it has the name of a private tmp,
/// is a directory owned by this user, and no process holds its lock
/// (each process holds the locks of its tmps until they are removed;
/// the lock goes with the last process that holds it). A staging dir is
/// removed only once it is [`STAGING_AGE`] old. Tmps of an earlier form
/// (`toolhost-tmp-…`, never locked) are left alone: one may belong to a
/// running process of an earlier version. Runs once per process, first
/// on the reaper's thread.
fn sweep_abandoned() {
    use rustix::fs::{AtFlags, FlockOperation, Mode, OFlags};
    let base = std::env::temp_dir();
    let Ok(base_fd) = rustix::fs::open(
        &base,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return;
    };
    let Ok(entries) = std::fs::read_dir(&base) else {
        return;
    };
    let euid = rustix::process::geteuid().as_raw();
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(PREFIX)) else {
            continue;
        };
        let (hex, staging) = match rest.strip_suffix(STAGING) {
            Some(hex) => (hex, true),
            None => (rest, false),
        };
        if hex.len() != 32 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            continue;
        }
        let Ok(fd) = rustix::fs::openat(
            &base_fd,
            &name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) else {
            continue;
        };
        let Ok(st) = rustix::fs::fstat(&fd) else {
            continue;
        };
        if st.st_uid != euid
            || (rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive).is_err())
        {
            continue;
        }
        if staging {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64);
            #[allow(clippy::unnecessary_cast)]
            if now.saturating_sub(st.st_ctime as i64) < STAGING_AGE.as_secs() as i64 {
                continue;
            }
        }
        // Still at its name: a sweep of another process may have removed
        // it between our open and our lock.
        match rustix::fs::statat(&base_fd, &name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(here) if (here.st_dev, here.st_ino) == (st.st_dev, st.st_ino) => {
                remove_tmp(&base.join(&name), fd);
            }
            _ => {}
        }
    }
}

pub(super) enum ReaperMsg {
    /// A tmp to remove, and its handle, which holds its lock until then.
    Remove(PathBuf, OwnedFd),
    Flush(tokio::sync::oneshot::Sender<()>),
    /// Work off the calls' path (the next call's spare, `spare`).
    Run(Box<dyn FnOnce() + Send>),
}

static REAPER: OnceLock<Option<Mutex<mpsc::Sender<ReaperMsg>>>> = OnceLock::new();

/// Private tmps are removed on a thread of their own, off the call's path
/// (about 50 µs of directory removal per call, measured); the next call's
/// spare is made there too (`run_on_reaper`).
pub(super) fn reaper() -> Option<&'static Mutex<mpsc::Sender<ReaperMsg>>> {
    REAPER
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel::<ReaperMsg>();
            std::thread::Builder::new()
                .name("toolhost-tmp-reaper".into())
                .spawn(move || {
                    sweep_abandoned();
                    for msg in rx {
                        match msg {
                            ReaperMsg::Remove(p, fd) => remove_tmp(&p, fd),
                            ReaperMsg::Flush(ack) => {
                                let _ = ack.send(());
                            }
                            // A job that panics is the job's loss, not
                            // the reaper's: removals and flushes go on.
                            ReaperMsg::Run(job) => {
                                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                            }
                        }
                    }
                })
                .ok()
                .map(|_| Mutex::new(tx))
        })
        .as_ref()
}

/// Runs `job` on the reaper's thread, after what is queued there; false
/// if there is no reaper (the job is dropped, not run).
pub(super) fn run_on_reaper(job: Box<dyn FnOnce() + Send>) -> bool {
    reaper().is_some_and(|r| {
        r.lock()
            .map(|tx| tx.send(ReaperMsg::Run(job)).is_ok())
            .unwrap_or(false)
    })
}

/// The reaper, if it was started (a private tmp dropped, or `warm_up`).
fn started_reaper() -> Option<&'static Mutex<mpsc::Sender<ReaperMsg>>> {
    REAPER.get().and_then(Option::as_ref)
}

/// Waits until the private tmps of finished calls are removed (up to 10 s),
/// without holding a thread: the reaper answers on a oneshot.
/// [`crate::Sandbox::shutdown`] awaits it.
pub async fn flush_private_tmps() {
    let Some(r) = started_reaper() else { return };
    let (ack, done) = tokio::sync::oneshot::channel();
    let sent = r
        .lock()
        .map(|tx| tx.send(ReaperMsg::Flush(ack)).is_ok())
        .unwrap_or(false);
    if sent {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(10), done).await;
    }
}

impl Drop for PrivateTmp {
    fn drop(&mut self) {
        let path = std::mem::take(&mut self.path);
        if path.as_os_str().is_empty() {
            return; // removed or let go already (`discard`)
        }
        // A second handle of the same open directory: the lock stays with
        // it (this one closes when `self` is dropped) until it is removed.
        let Ok(fd) = self.fd.try_clone() else {
            remove_by_path(&path);
            return;
        };
        let unsent = match reaper() {
            Some(r) => match r.lock() {
                Ok(tx) => tx.send(ReaperMsg::Remove(path, fd)).err().map(|e| e.0),
                Err(_) => Some(ReaperMsg::Remove(path, fd)),
            },
            None => Some(ReaperMsg::Remove(path, fd)),
        };
        if let Some(ReaperMsg::Remove(path, fd)) = unsent {
            remove_tmp(&path, fd);
        }
    }
}
