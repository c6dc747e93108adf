//! The call's private tmp: a fresh dir per call, removed after it by a
//! reaper thread (`flush_private_tmps` waits for it).

use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, mpsc};

use super::landlock::open_path;

/// The call's private `TMPDIR`: created before the spawn, removed (with what
/// the tool left in it) when the call is over.
pub(in crate::backend::direct) struct PrivateTmp {
    pub(super) path: PathBuf,
    pub(super) fd: OwnedFd,
}

impl PrivateTmp {
    pub(super) fn create() -> io::Result<Self> {
        use std::os::unix::fs::DirBuilderExt;
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let base = std::env::temp_dir();
        // SAFETY: getpid cannot fail.
        let pid = unsafe { libc::getpid() };
        let mut last = None;
        for _ in 0..8 {
            let n = SEQ.fetch_add(1, Ordering::Relaxed);
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
            let path = base.join(format!("toolhost-tmp-{pid}-{n}-{nanos:08x}"));
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => {
                    let fd = open_path(&path)?;
                    return Ok(PrivateTmp { path, fd });
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

    /// Whether the tmp's path still leads to the directory
    /// [`create`](Self::create) made (not a symlink, not another directory).
    fn at_its_path(&self) -> Option<rustix::fs::Stat> {
        use rustix::fs::{AtFlags, CWD, FileType};
        let by_path = rustix::fs::statat(CWD, &self.path, AtFlags::SYMLINK_NOFOLLOW).ok()?;
        let by_fd = rustix::fs::fstat(&self.fd).ok()?;
        (by_path.st_dev == by_fd.st_dev
            && by_path.st_ino == by_fd.st_ino
            && FileType::from_raw_mode(by_fd.st_mode) == FileType::Directory)
            .then_some(by_fd)
    }

    /// Whether this tmp, made ahead of its call (`spare`), is still as
    /// [`create`](Self::create) left it: at its path, toolhost's, mode 0700,
    /// and empty.
    pub(super) fn still_fresh(&self) -> bool {
        use rustix::fs::{Mode, OFlags};
        let Some(st) = self.at_its_path() else {
            return false;
        };
        if st.st_mode & 0o7777 != 0o700 || st.st_uid != rustix::process::geteuid().as_raw() {
            return false;
        }
        // Empty: nothing but `.` and `..` in it.
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

    /// Lets go of a tmp made ahead that no call will use: removed here and
    /// now if its path still leads to it (not on the reaper: the process may
    /// be about to exit); if its path leads elsewhere, what is there is not
    /// toolhost's to remove, and is left alone.
    pub(super) fn discard(self) {
        if self.at_its_path().is_some() {
            self.remove_now();
        } else {
            let mut t = self;
            t.path = PathBuf::new(); // nothing to remove (see Drop)
        }
    }

    /// Removes the tmp here and now, by its path.
    fn remove_now(mut self) {
        remove_tmp(&std::mem::take(&mut self.path));
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
                            ReaperMsg::Run(job) => job(),
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
