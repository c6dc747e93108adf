//! The call's private tmp: a fresh dir per call, removed after it by a
//! reaper thread (`flush_private_tmps` waits for it).
//!
//! Each tmp is locked (`flock`) by the process that made it from the
//! moment it has its name until the call is over. A process killed with
//! SIGKILL removes nothing; its locks go with it, and the next toolhost
//! process that starts a reaper removes what it left, where a lock can
//! tell (`sweep_abandoned`). Every removal goes through `remove`: no
//! recursion, no symlink followed, whatever a tool left.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
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
    /// directory made (toolhost's, 0700) and locked (`flock`) while this
    /// process holds it: that is how a later process tells a tmp that was
    /// abandoned (`sweep_abandoned`) from one in use. It is made and locked
    /// under a staging name (`.new`) and then renamed, so that a tmp under
    /// its final name is locked from the first moment it has that name.
    /// (The call's supervisor closes its copy of the handle: once toolhost
    /// is gone, the lock is gone, while the supervisor kills the tool's
    /// tree, within milliseconds.)
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
            // Never under its final name unlocked (a sweep would take it for
            // abandoned): another process's sweep may hold it for a moment
            // (it leaves a young staging dir alone), or the kernel be short
            // of locks; then another name.
            if let Err(e) = rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive) {
                last = Some(io::Error::new(
                    io::Error::from(e).kind(),
                    format!("cannot lock the private tmp: {e}"),
                ));
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

    /// Lets go of its lock (its call is over), before it is removed: the
    /// removal takes the lock through a handle of its own.
    fn unlock(&self) {
        let _ = rustix::fs::flock(&self.fd, rustix::fs::FlockOperation::Unlock);
    }

    /// The directory's identity: its device and inode.
    fn id(&self) -> (u64, u64) {
        (self.made.dev, self.made.ino)
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
            self.unlock();
            remove_tmp(&std::mem::take(&mut self.path), self.id());
        }
        // Otherwise Drop queues it on the reaper.
    }
}

/// Removes the tmp at `path` if it is still the directory `id` (device,
/// inode): its contents through a handle of it (`remove`), then it.
pub(super) fn remove_tmp(path: &Path, id: (u64, u64)) {
    if let Err(e) = remove_at_path(path, id)
        && e.kind() != io::ErrorKind::NotFound
    {
        tracing::warn!(path = %path.display(), "direct backend: could not remove a call's private tmp: {e}");
    }
}

fn remove_at_path(path: &Path, id: (u64, u64)) -> io::Result<()> {
    use rustix::fs::{Mode, OFlags};
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(io::Error::other("not a tmp's path"));
    };
    let parent = rustix::fs::open(
        parent,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let name = std::ffi::CString::new(name.as_bytes()).map_err(|_| io::Error::other("a NUL"))?;
    remove_in(parent.as_fd(), &name, id, true)
}

/// Removes the directory `parent/name` if it is `id`: what it holds, then
/// it (after it is checked again: a path can change meanwhile; what a
/// change could make this remove is an empty directory).
fn remove_in(parent: BorrowedFd<'_>, name: &CStr, id: (u64, u64), lock: bool) -> io::Result<()> {
    use rustix::fs::AtFlags;
    // `st_dev` and `st_ino` are `u64` on Linux, not on every Unix.
    #[allow(clippy::unnecessary_cast)]
    let same = |st: &rustix::fs::Stat| (st.st_dev as u64, st.st_ino as u64) == id;
    use super::remove::{empty_tree, open_beneath, owner_rwx, reopen};
    let pinned = open_beneath(parent, name, rustix::fs::OFlags::PATH)?;
    if !same(&rustix::fs::fstat(&pinned)?) {
        return Ok(());
    }
    owner_rwx(&pinned)?;
    let dir = reopen(&pinned)?;
    // The lock (`lock`, unless the caller holds it), so that no sweep of
    // another process starts on it meanwhile. Taken or not, the removal
    // goes on: whatever holds it (a sweep that got there first, or a
    // process the tool handed a handle to) is no reason to leave the tmp,
    // and two removers at once only meet entries already gone.
    if lock {
        let _ = rustix::fs::flock(&dir, rustix::fs::FlockOperation::NonBlockingLockExclusive);
    }
    empty_tree(dir.as_fd())?;
    drop(dir);
    if same(&rustix::fs::statat(
        parent,
        name,
        AtFlags::SYMLINK_NOFOLLOW,
    )?) {
        rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR)?;
    }
    Ok(())
}

/// A private tmp's name: this prefix, then 32 hex digits (128 random
/// bits), then [`STAGING`] while it is being made (`create`).
const PREFIX: &str = "toolhost-call-";
const STAGING: &str = ".new";
/// A staging dir is locked within microseconds of being made; one that
/// is not, this long after, was left by a process that died in between.
const STAGING_AGE: std::time::Duration = std::time::Duration::from_secs(60);

/// Renames the staging dir `from` to `to` in `base`, never over anything
/// (where the filesystem or a seccomp profile does not allow that, a plain
/// rename: the name is 128 random bits).
fn rename_new(base: &OwnedFd, from: &str, to: &str) -> io::Result<()> {
    use rustix::fs::RenameFlags;
    use rustix::io::Errno;
    match rustix::fs::renameat_with(base, from, base, to, RenameFlags::NOREPLACE) {
        Err(Errno::INVAL | Errno::NOSYS | Errno::PERM) => {
            Ok(rustix::fs::renameat(base, from, base, to)?)
        }
        r => Ok(r?),
    }
}

/// Filesystems whose `flock` is one lock table for every process that can
/// reach the directory (the kernel's own): local ones. On NFS, CIFS, 9p or
/// FUSE, a lock is local to each host (or VM, or gVisor sandbox), so a tmp
/// in use elsewhere would look abandoned here. (`statfs` magic numbers.)
const LOCAL_FILESYSTEMS: [i64; 7] = [
    0x0102_1994, // tmpfs
    0xEF53,      // ext2, ext3, ext4
    0x5846_5342, // xfs
    0x9123_683E, // btrfs
    0x794C_7630, // overlayfs
    0xF2F5_2010, // f2fs
    0x2FC1_2FC1, // zfs
];

/// Whether abandoned tmps may be swept from `base` (a handle of it): on a
/// local filesystem ([`LOCAL_FILESYSTEMS`]); owned by root or this user;
/// and not open to other users' renames (sticky, or writable by its owner
/// only), so that no one else can put a directory of this user's under a
/// tmp's name.
fn sweepable(base: BorrowedFd<'_>) -> bool {
    let Ok(fs) = rustix::fs::fstatfs(base) else {
        return false;
    };
    #[allow(clippy::unnecessary_cast)]
    let kind = fs.f_type as i64;
    let Ok(st) = rustix::fs::fstat(base) else {
        return false;
    };
    let euid = rustix::process::geteuid().as_raw();
    LOCAL_FILESYSTEMS.contains(&kind)
        && (st.st_uid == 0 || st.st_uid == euid)
        && (st.st_mode & 0o1000 != 0 || st.st_mode & 0o022 == 0)
}

/// Removes the private tmps that toolhost processes killed by SIGKILL left
/// in `std::env::temp_dir()` (nothing of theirs ran to remove them; the
/// supervisor that outlives each kills the tool's tree, and removes
/// nothing). A directory is taken for an abandoned tmp if: its name has
/// the form of one; it is owned by this user with no permission for
/// others; no process holds its lock (each holds its tmps' until their
/// calls are over); and a staging dir, [`STAGING_AGE`] old. Only where
/// [`sweepable`]. Tmps of the earlier form (`toolhost-tmp-…`, never
/// locked) are left alone: one may belong to a running process of an
/// earlier version. Runs on a thread of its own, once per process.
fn sweep_abandoned() {
    use rustix::fs::{FlockOperation, Mode, OFlags};
    let base = std::env::temp_dir();
    let Ok(base_fd) = rustix::fs::open(
        &base,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return;
    };
    if !sweepable(base_fd.as_fd()) {
        return;
    }
    let Ok(entries) = rustix::fs::Dir::read_from(&base_fd) else {
        return;
    };
    let euid = rustix::process::geteuid().as_raw();
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().ok().and_then(|n| n.strip_prefix(PREFIX)) else {
            continue;
        };
        let (hex, staging) = match rest.strip_suffix(STAGING) {
            Some(hex) => (hex, true),
            None => (rest, false),
        };
        if hex.len() != 32 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            continue;
        }
        // A handle that needs no permission and crosses no mount (another
        // user's FUSE mount at such a name would answer, or never).
        let Ok(pinned) = super::remove::open_beneath(base_fd.as_fd(), name, OFlags::PATH) else {
            continue;
        };
        let Ok(st) = rustix::fs::fstat(&pinned) else {
            continue;
        };
        if st.st_uid != euid || st.st_mode & 0o077 != 0 {
            continue;
        }
        // The lock needs a handle opened for reading: one whose tool took
        // its owner's permissions away gets them back for it, and keeps
        // them only if it is abandoned (the mode is put back otherwise).
        let mut changed = false;
        let locked = match super::remove::reopen(&pinned) {
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::ACCESS.raw_os_error()) => {
                changed = true;
                match super::remove::owner_rwx(&pinned)
                    .and_then(|()| super::remove::reopen(&pinned))
                {
                    Ok(fd) => fd,
                    Err(_) => {
                        super::remove::set_mode(&pinned, st.st_mode);
                        continue;
                    }
                }
            }
            Err(_) => continue,
            Ok(fd) => fd,
        };
        if rustix::fs::flock(&locked, FlockOperation::NonBlockingLockExclusive).is_err() {
            if changed {
                super::remove::set_mode(&pinned, st.st_mode);
            }
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
        #[allow(clippy::unnecessary_cast)]
        let id = (st.st_dev as u64, st.st_ino as u64);
        if let Err(e) = remove_in(base_fd.as_fd(), name, id, false)
            && e.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(path = %base.join(std::ffi::OsStr::from_bytes(name.to_bytes())).display(), "direct backend: could not remove an abandoned private tmp: {e}");
        }
        drop(locked);
    }
}

/// Starts [`sweep_abandoned`] on a thread of its own, once per process:
/// what it removes can be large, and a call's removals and spares do not
/// wait for it. [`flush_private_tmps`] does, within its bound; a process
/// that exits before the sweep has ended leaves the rest to the next.
fn start_sweep() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| {
        SWEEPING.store(true, std::sync::atomic::Ordering::SeqCst);
        let started = std::thread::Builder::new()
            .name("toolhost-tmp-sweep".into())
            .spawn(|| {
                // Ended however the sweep ends (a panic included).
                struct Ended;
                impl Drop for Ended {
                    fn drop(&mut self) {
                        SWEEPING.store(false, std::sync::atomic::Ordering::SeqCst);
                        SWEPT.notify_waiters();
                    }
                }
                let _ended = Ended;
                sweep_abandoned();
            });
        if started.is_err() {
            SWEEPING.store(false, std::sync::atomic::Ordering::SeqCst);
            SWEPT.notify_waiters();
        }
    });
}

/// Starts of the private tmps' reaper announced ([`ReapersPending`]) and
/// not yet made; [`STARTS_DONE`] is notified when one ends.
static STARTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static STARTS_DONE: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// A start of the private tmps' reaper (and so of the sweep) that another
/// thread will make: [`flush_private_tmps`] waits for it, within its bound,
/// as for the reaper's queue and the sweep. Dropped once the start is
/// made, or given up (its thread never ran).
pub(crate) struct ReapersPending(());

impl ReapersPending {
    pub(crate) fn new() -> Self {
        STARTS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        ReapersPending(())
    }
}

impl Drop for ReapersPending {
    fn drop(&mut self) {
        STARTS.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        STARTS_DONE.notify_waiters();
    }
}

/// Waits until no announced start of the private tmps' reaper is pending.
async fn starts_done() {
    use std::sync::atomic::Ordering::SeqCst;
    loop {
        let ended = STARTS_DONE.notified();
        tokio::pin!(ended);
        // Registered before the count is read: an end in between is not
        // missed.
        ended.as_mut().enable();
        if STARTS.load(SeqCst) == 0 {
            return;
        }
        ended.await;
    }
}

/// Whether [`sweep_abandoned`] runs now; [`SWEPT`] is notified when it ends.
static SWEEPING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static SWEPT: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// Waits until a running sweep has ended.
async fn sweep_ended() {
    use std::sync::atomic::Ordering::SeqCst;
    let ended = SWEPT.notified();
    tokio::pin!(ended);
    // Registered before the flag is read: an end in between is not missed.
    ended.as_mut().enable();
    if SWEEPING.load(SeqCst) {
        ended.await;
    }
}

pub(super) enum ReaperMsg {
    /// A tmp to remove: its path and identity (device, inode).
    Remove(PathBuf, (u64, u64)),
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
            start_sweep();
            let (tx, rx) = mpsc::channel::<ReaperMsg>();
            std::thread::Builder::new()
                .name("toolhost-tmp-reaper".into())
                .spawn(move || {
                    for msg in rx {
                        match msg {
                            ReaperMsg::Remove(p, id) => remove_tmp(&p, id),
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

/// The reaper, if it was started (a private tmp dropped, or
/// `start_reapers`).
fn started_reaper() -> Option<&'static Mutex<mpsc::Sender<ReaperMsg>>> {
    REAPER.get().and_then(Option::as_ref)
}

/// Waits until the reaper, if there is one, has done what was queued before;
/// whether there was one.
async fn flush_reaper() -> bool {
    let Some(r) = started_reaper() else {
        return false;
    };
    let (ack, done) = tokio::sync::oneshot::channel();
    let sent = r
        .lock()
        .map(|tx| tx.send(ReaperMsg::Flush(ack)).is_ok())
        .unwrap_or(false);
    if sent {
        let _ = done.await;
    }
    true
}

/// Waits until the private tmps of finished calls are removed, and the
/// sweep of abandoned ones has ended, after any start of them announced
/// (up to 10 s in all), without holding a thread: the reaper answers on a
/// oneshot, the sweep and the starts on a `Notify`.
/// [`crate::Sandbox::shutdown`] awaits it.
pub async fn flush_private_tmps() {
    use std::sync::atomic::Ordering::SeqCst;
    // Nothing to wait for (and no timer needed): no reaper, none coming,
    // no sweep.
    if started_reaper().is_none() && STARTS.load(SeqCst) == 0 && !SWEEPING.load(SeqCst) {
        return;
    }
    let all = async {
        // The reaper's queue first: an announced start that is slow does
        // not keep the removals already queued from being waited for.
        let flushed = flush_reaper().await;
        // A start announced: the reaper and the sweep exist once it is made.
        starts_done().await;
        if !flushed {
            flush_reaper().await;
        }
        // The sweep is waited for even with no reaper: it is started
        // before the reaper is made, and runs when that fails.
        sweep_ended().await;
    };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), all).await;
}

impl Drop for PrivateTmp {
    fn drop(&mut self) {
        let path = std::mem::take(&mut self.path);
        if path.as_os_str().is_empty() {
            return; // removed or let go already (`discard`)
        }
        self.unlock();
        let id = self.id();
        let queued = reaper().is_some_and(|r| {
            r.lock()
                .map(|tx| tx.send(ReaperMsg::Remove(path.clone(), id)).is_ok())
                .unwrap_or(false)
        });
        if !queued {
            remove_tmp(&path, id);
        }
    }
}
