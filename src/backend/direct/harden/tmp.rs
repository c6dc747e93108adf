//! The call's private tmp: a fresh dir per call, removed after it by a
//! reaper thread (`flush_private_tmps` waits for it).

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
    /// name, opened without following a symlink and checked to be the
    /// directory made (toolhost's, 0700).
    pub(super) fn create() -> io::Result<Self> {
        use rustix::fs::{FileType, Mode, OFlags};
        use std::os::unix::fs::DirBuilderExt;
        let base = std::env::temp_dir();
        let mut last = None;
        for _ in 0..8 {
            let path = base.join(format!("toolhost-tmp-{}", random_hex()?));
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => {
                    let fd = rustix::fs::open(
                        &path,
                        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                        Mode::empty(),
                    )?;
                    let st = rustix::fs::fstat(&fd)?;
                    let made = Made::of(&st);
                    // The permission bits only: a set-group-ID base
                    // dir makes its new dirs set-group-ID too.
                    if FileType::from_raw_mode(st.st_mode) != FileType::Directory
                        || st.st_mode & 0o777 != 0o700
                        || st.st_uid != rustix::process::geteuid().as_raw()
                    {
                        // Not the directory made: what is there is not
                        // toolhost's to remove.
                        return Err(io::Error::other(
                            "the private tmp was replaced as it was made",
                        ));
                    }
                    return Ok(PrivateTmp { path, fd, made });
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => return Err(e),
            }
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
            remove_tmp(&std::mem::take(&mut self.path));
        }
        // Otherwise Drop queues it on the reaper.
    }
}

pub(super) fn remove_tmp(path: &Path) {
    // std's remove_dir_all does not follow symlinks the tool left.
    if let Err(e) = std::fs::remove_dir_all(path)
        && e.kind() != io::ErrorKind::NotFound
    {
        tracing::warn!(path = %path.display(), "direct backend: could not remove a call's private tmp: {e}");
    }
}

pub(super) enum ReaperMsg {
    Remove(PathBuf),
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
                    for msg in rx {
                        match msg {
                            ReaperMsg::Remove(p) => remove_tmp(&p),
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
        let queued = reaper().is_some_and(|r| {
            r.lock()
                .map(|tx| tx.send(ReaperMsg::Remove(path.clone())).is_ok())
                .unwrap_or(false)
        });
        if !queued {
            remove_tmp(&path);
        }
    }
}
