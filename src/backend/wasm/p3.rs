//! WASI preview-3 command components (`wasi:cli/run@0.3.0`, on the component
//! model's async ABI), held to the limits of preview 1 and 2.
//!
//! wasmtime-wasi's p3 interfaces share the preview-2 context: the same
//! environment, stdio pipes, preopens (with their permissions), clocks and
//! socket rules, and the same resource table of descriptors. The store's
//! limiter, epoch or fuel and the wall-clock timeout are the store's, as for
//! every guest. What this file adds is the file checks, by shadowing the
//! functions of `wasi:filesystem/types@0.3.0` that create, change or open:
//!
//! - **File budget** (`write-via-stream`, `append-via-stream`, `set-size`):
//!   a write stream is consumed here ([`BudgetedWrite`]), each chunk admitted
//!   against the call's budget before it reaches the file; a resize is
//!   admitted as in preview 2.
//! - **Special files** (`open-at`, `set-times-at`): the path is checked
//!   before the call, the call is watched, and what `open-at` returns must be
//!   a file or a directory (`special`).
//! - **Protected paths** (`open-at` for writing, `set-times-at`,
//!   `create-directory-at`, `remove-directory-at`, `unlink-file-at`,
//!   `symlink-at`, `rename-at`, `link-at`): through a fresh handle on the
//!   parent (`guard_path`, [`P3Fs`]); a directory a guest opens inside a
//!   protected dir is made read-only, and `set-times` through a file opened
//!   for reading is refused (`protect`).
//!
//! Each shadow checks, then calls wasmtime-wasi's own implementation.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use wasmtime::StoreContextMut;
use wasmtime::component::{
    Accessor, FutureReader, Linker, LinkerInstance, Resource, Source, StreamConsumer, StreamReader,
    StreamResult,
};
use wasmtime_wasi::filesystem::{
    Descriptor, WasiFilesystem, WasiFilesystemCtxView, WasiFilesystemView,
};
use wasmtime_wasi::p3::bindings::filesystem::types::{
    DescriptorFlags, DescriptorType, ErrorCode, HostDescriptorWithStore, NewTimestamp, OpenFlags,
    PathFlags,
};

use super::component::CState;
use super::guard_path::{self, PathFs, Target};
use super::protect::Guard;
use super::{FileBudget, special};

/// The filesystem interface of wasmtime-wasi's p3 WIT.
const FS_TYPES: &str = "wasi:filesystem/types@0.3.0";

/// Bytes a write stream takes from the guest per write (the budget is
/// checked per chunk).
const CHUNK: usize = 64 << 10;

/// The accessor wasmtime-wasi's filesystem functions take.
type Fs = Accessor<CState, WasiFilesystem>;

type Host = WasiFilesystem;

fn fs_view(s: &mut CState) -> WasiFilesystemCtxView<'_> {
    s.filesystem()
}

fn fs_of(acc: &Accessor<CState>) -> Fs {
    acc.with_getter::<WasiFilesystem>(fs_view)
}

fn borrow(rep: u32) -> Resource<Descriptor> {
    Resource::new_borrow(rep)
}

/// A trap stays a trap; an error code is the guest's.
fn code(e: wasmtime_wasi::p3::filesystem::FilesystemError) -> wasmtime::Result<ErrorCode> {
    e.downcast()
}

/// Adds wasmtime-wasi's p3 interfaces to `linker` (which holds preview 2
/// already, shadowing allowed), with the file checks above.
pub(crate) fn add_to_linker(linker: &mut Linker<CState>) -> wasmtime::Result<()> {
    wasmtime_wasi::p3::add_to_linker(linker)?;
    let mut fs = linker.instance(FS_TYPES)?;
    add_writes(&mut fs)?;
    add_opens(&mut fs)?;
    add_changes(&mut fs)?;
    Ok(())
}

// ---------------------------------------------------------------------------
// File budget

fn add_writes(fs: &mut LinkerInstance<'_, CState>) -> wasmtime::Result<()> {
    fs.func_wrap(
        "[method]descriptor.write-via-stream",
        |store: StoreContextMut<'_, CState>,
         (fd, data, offset): (Resource<Descriptor>, StreamReader<u8>, u64)| {
            write_stream(store, fd, data, Some(offset))
        },
    )?;
    fs.func_wrap(
        "[method]descriptor.append-via-stream",
        |store: StoreContextMut<'_, CState>,
         (fd, data): (Resource<Descriptor>, StreamReader<u8>)| {
            write_stream(store, fd, data, None)
        },
    )?;
    fs.func_wrap_concurrent(
        "[method]descriptor.set-size",
        |acc: &Accessor<CState>, (fd, size): (Resource<Descriptor>, u64)| {
            Box::pin(async move {
                let found = acc.with(|mut a| {
                    let s = a.get();
                    let file = match s.table.get(&fd) {
                        Ok(Descriptor::File(f)) => Some(f.file.clone()),
                        _ => None,
                    };
                    (s.common.files.clone(), file)
                });
                let (budget, file) = found;
                // A dir or a stale handle: the real call reports it.
                let current = file.and_then(|f| f.metadata().ok()).map(|m| m.len());
                let growth = size.saturating_sub(current.unwrap_or(size));
                // Reserved before the resize: resizes and writes in flight
                // at once cannot all pass against the same total.
                if !budget.reserve_resize(size, growth) {
                    return Ok((Err(ErrorCode::FileTooLarge),));
                }
                let fs = fs_of(acc);
                match <Host as HostDescriptorWithStore<CState>>::set_size(&fs, fd, size).await {
                    Ok(()) => Ok((Ok(()),)),
                    Err(e) => {
                        budget.refund(growth);
                        Ok((Err(code(e)?),))
                    }
                }
            })
        },
    )?;
    Ok(())
}

type WriteReturn = (FutureReader<Result<(), ErrorCode>>,);

/// `write-via-stream` (at `offset`) or `append-via-stream` (`None`): the
/// guest's stream is piped into a [`BudgetedWrite`] on the file.
fn write_stream(
    mut store: StoreContextMut<'_, CState>,
    fd: Resource<Descriptor>,
    mut data: StreamReader<u8>,
    offset: Option<u64>,
) -> wasmtime::Result<WriteReturn> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let budget = store.data().common.files.clone();
    let file = match store.data().table.get(&fd) {
        Ok(Descriptor::File(f)) if f.perms.write_not_permitted() => Err(ErrorCode::NotPermitted),
        Ok(Descriptor::File(f)) => Ok(f.file.clone()),
        Ok(Descriptor::Dir(_)) => Err(ErrorCode::BadDescriptor),
        Err(_) => Err(ErrorCode::BadDescriptor),
    };
    match file {
        Ok(file) => data.pipe(
            &mut store,
            BudgetedWrite {
                file,
                offset,
                budget,
                result: Some(tx),
                task: None,
            },
        )?,
        Err(e) => {
            data.close(&mut store)?;
            let _ = tx.send(Err(e));
        }
    }
    let result = FutureReader::new(&mut store, async move {
        wasmtime::error::Ok(rx.await.unwrap_or(Ok(())))
    })?;
    Ok((result,))
}

/// A write in progress on the blocking pool: the bytes and how many were
/// written.
type WriteTask = tokio::task::JoinHandle<Result<usize, WriteFail>>;

/// Consumes a guest's write stream into a file, each chunk admitted against
/// the call's file budget first (no file grows past the limit, and no call
/// writes more than its budget). Writes run on the blocking pool.
struct BudgetedWrite {
    file: Arc<std::fs::File>,
    /// Where the next chunk goes; `None`: at the end (append).
    offset: Option<u64>,
    budget: Arc<FileBudget>,
    result: Option<tokio::sync::oneshot::Sender<Result<(), ErrorCode>>>,
    task: Option<WriteTask>,
}

impl BudgetedWrite {
    fn close(&mut self, r: Result<(), ErrorCode>) {
        if let Some(tx) = self.result.take() {
            let _ = tx.send(r);
        }
    }

    /// Ends the stream with `code`.
    fn fail(&mut self, code: ErrorCode) -> Poll<wasmtime::Result<StreamResult>> {
        self.close(Err(code));
        Poll::Ready(Ok(StreamResult::Dropped))
    }
}

impl Drop for BudgetedWrite {
    fn drop(&mut self) {
        self.close(Ok(()));
    }
}

impl StreamConsumer<CState> for BudgetedWrite {
    type Item = u8;

    fn poll_consume(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        store: StoreContextMut<'_, CState>,
        src: Source<'_, Self::Item>,
        _finish: bool,
    ) -> Poll<wasmtime::Result<StreamResult>> {
        let mut src = src.as_direct(store);
        let me = &mut *self;
        if me.task.is_none() {
            let remaining = src.remaining();
            let n = remaining.len().min(CHUNK);
            if n == 0 {
                return Poll::Ready(Ok(StreamResult::Completed));
            }
            let file = me.file.clone();
            let at = match me.offset {
                Some(at) => at,
                // Appends start at the end: a file already at the limit
                // cannot grow through its append stream.
                None => match file.metadata() {
                    Ok(m) => m.len(),
                    Err(e) => return me.fail(ErrorCode::from(e)),
                },
            };
            // Reserved before the write starts, refunded for what it did
            // not write: streams in flight at once share one total.
            if !me.budget.reserve_write(at, n as u64) {
                return me.fail(ErrorCode::FileTooLarge);
            }
            let buf = remaining[..n].to_vec();
            let append = me.offset.is_none();
            let budget = me.budget.clone();
            me.task = Some(tokio::task::spawn_blocking(move || {
                let r = write_at(&file, &buf, at, append, &budget);
                let written = r.as_ref().map_or(0, |n| *n);
                budget.refund(n.saturating_sub(written) as u64);
                r
            }));
        }
        let Some(task) = me.task.as_mut() else {
            return Poll::Ready(Ok(StreamResult::Completed));
        };
        // A write that has begun is not cancelled: it is waited for.
        let done = match Pin::new(task).poll(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(r) => r,
        };
        me.task = None;
        match done {
            Ok(Ok(n)) => {
                src.mark_read(n);
                if let Some(at) = me.offset.as_mut() {
                    *at = at.saturating_add(n as u64);
                }
                Poll::Ready(Ok(StreamResult::Completed))
            }
            Ok(Err(WriteFail::Io(e))) => me.fail(ErrorCode::from(e)),
            Ok(Err(WriteFail::TooLarge)) => me.fail(ErrorCode::FileTooLarge),
            Err(_) => me.fail(ErrorCode::Io),
        }
    }
}

/// Why a chunk was not written.
enum WriteFail {
    Io(std::io::Error),
    /// An append found the file grown meanwhile (another stream, a resize):
    /// at its real end the chunk would take it past the limit.
    TooLarge,
}

/// One write of `buf` at `at`. An append writes at the end as it is now (a
/// resize or another stream may have grown the file since it was admitted)
/// and is checked against the limit there again.
fn write_at(
    file: &std::fs::File,
    buf: &[u8],
    at: u64,
    append: bool,
    budget: &FileBudget,
) -> Result<usize, WriteFail> {
    let at = if append {
        let end = file.metadata().map_err(WriteFail::Io)?.len();
        if !budget.fits_file(end, buf.len() as u64) {
            return Err(WriteFail::TooLarge);
        }
        end
    } else {
        at
    };
    #[cfg(unix)]
    let r = std::os::unix::fs::FileExt::write_at(file, buf, at);
    #[cfg(windows)]
    let r = std::os::windows::fs::FileExt::seek_write(file, buf, at);
    r.map_err(WriteFail::Io)
}

// ---------------------------------------------------------------------------
// Opens and set-times: special files and protected paths

fn add_opens(fs: &mut LinkerInstance<'_, CState>) -> wasmtime::Result<()> {
    fs.func_wrap_concurrent(
        "[method]descriptor.open-at",
        |acc: &Accessor<CState>,
         (fd, path_flags, path, oflags, flags): (
            Resource<Descriptor>,
            PathFlags,
            String,
            OpenFlags,
            DescriptorFlags,
        )| {
            Box::pin(async move {
                if path.len() > super::MAX_GUEST_PATH {
                    return Ok((Err(ErrorCode::NameTooLong),));
                }
                let guard = guard_of(acc);
                let fs = fs_of(acc);
                let write = oflags.intersects(OpenFlags::CREATE | OpenFlags::TRUNCATE)
                    || flags.contains(DescriptorFlags::WRITE);
                if guard.active() && write {
                    let follow = path_flags.contains(PathFlags::SYMLINK_FOLLOW);
                    let mut pfs = P3Fs(&fs);
                    match guard_path::open_target(&mut pfs, &guard, fd.rep(), follow, &path).await?
                    {
                        Ok(Some(t)) => {
                            // The last name unfollowed (the only path flag).
                            let r = open_checked(
                                &fs,
                                &guard,
                                borrow(t.rep),
                                PathFlags::empty(),
                                t.name.clone(),
                                oflags,
                                flags,
                            )
                            .await;
                            guard_path::release(&mut pfs, &t)?;
                            return r;
                        }
                        Ok(None) => {}
                        Err(e) => return Ok((Err(e),)),
                    }
                }
                open_checked(&fs, &guard, fd, path_flags, path, oflags, flags).await
            })
        },
    )?;
    fs.func_wrap_concurrent(
        "[method]descriptor.set-times-at",
        |acc: &Accessor<CState>,
         (fd, path_flags, path, atim, mtim): (
            Resource<Descriptor>,
            PathFlags,
            String,
            NewTimestamp,
            NewTimestamp,
        )| {
            Box::pin(async move {
                if path.len() > super::MAX_GUEST_PATH {
                    return Ok((Err(ErrorCode::NameTooLong),));
                }
                let guard = guard_of(acc);
                let fs = fs_of(acc);
                let mut pfs = P3Fs(&fs);
                let follow = path_flags.contains(PathFlags::SYMLINK_FOLLOW);
                let t = match guard_path::times_target(&mut pfs, &guard, fd.rep(), follow, &path)
                    .await?
                {
                    Ok(t) => t,
                    Err(e) => return Ok((Err(e),)),
                };
                // Through a target, its last name is not a symlink to follow.
                let (dir, path, path_flags) = match &t {
                    Some(t) => (borrow(t.rep), t.name.clone(), PathFlags::empty()),
                    None => (fd, path, path_flags),
                };
                let r = if precheck(&fs, &dir, path_flags, &path).await {
                    let set = <Host as HostDescriptorWithStore<CState>>::set_times_at(
                        &fs, dir, path_flags, path, atim, mtim,
                    );
                    let watched = special::watched(set).await;
                    match watched.result {
                        Ok(()) => Ok(()),
                        Err(e) => Err(refusal(code(e)?, watched.interrupted)),
                    }
                } else {
                    Err(ErrorCode::NotPermitted)
                };
                if let Some(t) = &t {
                    guard_path::release(&mut pfs, t)?;
                }
                Ok((r,))
            })
        },
    )?;
    Ok(())
}

fn guard_of(acc: &Accessor<CState>) -> Guard {
    acc.with(|mut a| a.get().common.guard.clone())
}

type OpenReturn = (Result<Resource<Descriptor>, ErrorCode>,);

/// `open-at` with the special-file checks (`special`); a directory opened
/// inside a protected dir is made read-only (`protect`).
async fn open_checked(
    fs: &Fs,
    guard: &Guard,
    fd: Resource<Descriptor>,
    path_flags: PathFlags,
    path: String,
    oflags: OpenFlags,
    flags: DescriptorFlags,
) -> wasmtime::Result<OpenReturn> {
    if !precheck(fs, &fd, path_flags, &path).await {
        return Ok((Err(ErrorCode::NotPermitted),));
    }
    let open =
        <Host as HostDescriptorWithStore<CState>>::open_at(fs, fd, path_flags, path, oflags, flags);
    let watched = special::watched(open).await;
    let new = match watched.result {
        Ok(new) => new,
        Err(e) => return Ok((Err(refusal(code(e)?, watched.interrupted)),)),
    };
    // What was opened must be a file or a directory (`special`).
    let ty = <Host as HostDescriptorWithStore<CState>>::get_type(fs, borrow(new.rep())).await;
    match ty {
        Ok(t) if p3_allowed(&t) => {
            if matches!(t, DescriptorType::Directory) && guard.active() {
                fs.with(|mut a| {
                    let view = a.get();
                    guard.sweep_once(view.table);
                    restrict(view.table, guard, new.rep());
                });
            }
            Ok((Ok(new),))
        }
        _ => {
            fs.with(|mut a| a.get().table.delete(new))?;
            Ok((Err(ErrorCode::NotPermitted),))
        }
    }
}

/// Whether a p3 descriptor type may be held by a guest.
fn p3_allowed(t: &DescriptorType) -> bool {
    matches!(t, DescriptorType::RegularFile | DescriptorType::Directory)
}

/// Before a call that opens a path (`special`): false if `path` under `dir`
/// is a special file. A path that cannot be stat'ed goes on to the call,
/// which reports its own error.
async fn precheck(fs: &Fs, dir: &Resource<Descriptor>, path_flags: PathFlags, path: &str) -> bool {
    if !special::precheck() {
        return true;
    }
    let st = <Host as HostDescriptorWithStore<CState>>::stat_at(
        fs,
        borrow(dir.rep()),
        path_flags,
        path.to_string(),
    )
    .await;
    match st {
        Ok(st) => p3_allowed(&st.type_) || matches!(st.type_, DescriptorType::SymbolicLink),
        Err(_) => true,
    }
}

/// An error code after a watched call: EINTR while the watchdog interrupted a
/// thread is the refusal of a special file.
fn refusal(code: ErrorCode, interrupted: bool) -> ErrorCode {
    match code {
        ErrorCode::Interrupted if interrupted => ErrorCode::NotPermitted,
        code => code,
    }
}

/// The directory handle `rep` made read-only if inside a protected dir.
fn restrict(table: &mut wasmtime::component::ResourceTable, guard: &Guard, rep: u32) {
    if let Ok(Descriptor::Dir(d)) = table.get_mut(&borrow(rep)) {
        guard.restrict(d);
    }
}

// ---------------------------------------------------------------------------
// Changes by path: protected paths

fn add_changes(fs: &mut LinkerInstance<'_, CState>) -> wasmtime::Result<()> {
    macro_rules! one_path {
        ($name:literal, $method:ident) => {
            fs.func_wrap_concurrent(
                $name,
                |acc: &Accessor<CState>, (fd, path): (Resource<Descriptor>, String)| {
                    Box::pin(async move {
                        let guard = guard_of(acc);
                        let fs = fs_of(acc);
                        let mut pfs = P3Fs(&fs);
                        let t = match guard_path::change_target(&mut pfs, &guard, fd.rep(), &path)
                            .await?
                        {
                            Ok(t) => t,
                            Err(e) => return Ok((Err(e),)),
                        };
                        let (dir, name) = at(&t, fd, path);
                        let r = <Host as HostDescriptorWithStore<CState>>::$method(&fs, dir, name)
                            .await;
                        finish(&mut pfs, t.as_ref(), None, r)
                    })
                },
            )?;
        };
    }
    one_path!(
        "[method]descriptor.create-directory-at",
        create_directory_at
    );
    one_path!(
        "[method]descriptor.remove-directory-at",
        remove_directory_at
    );
    one_path!("[method]descriptor.unlink-file-at", unlink_file_at);
    // Times through a descriptor: not through a file opened for reading
    // (`Guard::refuses_times`).
    fs.func_wrap_concurrent(
        "[method]descriptor.set-times",
        |acc: &Accessor<CState>,
         (fd, atim, mtim): (Resource<Descriptor>, NewTimestamp, NewTimestamp)| {
            Box::pin(async move {
                let refused = acc.with(|mut a| {
                    let s = a.get();
                    let guard = s.common.guard.clone();
                    matches!(s.table.get(&fd), Ok(d) if guard.refuses_times(d))
                });
                if refused {
                    return Ok((Err(ErrorCode::NotPermitted),));
                }
                let fs = fs_of(acc);
                match <Host as HostDescriptorWithStore<CState>>::set_times(&fs, fd, atim, mtim)
                    .await
                {
                    Ok(()) => Ok((Ok(()),)),
                    Err(e) => Ok((Err(code(e)?),)),
                }
            })
        },
    )?;
    fs.func_wrap_concurrent(
        "[method]descriptor.symlink-at",
        |acc: &Accessor<CState>, (fd, old, new): (Resource<Descriptor>, String, String)| {
            Box::pin(async move {
                let guard = guard_of(acc);
                let fs = fs_of(acc);
                let mut pfs = P3Fs(&fs);
                let t = match guard_path::change_target(&mut pfs, &guard, fd.rep(), &new).await? {
                    Ok(t) => t,
                    Err(e) => return Ok((Err(e),)),
                };
                let (dir, name) = at(&t, fd, new);
                let r = <Host as HostDescriptorWithStore<CState>>::symlink_at(&fs, dir, old, name)
                    .await;
                finish(&mut pfs, t.as_ref(), None, r)
            })
        },
    )?;
    fs.func_wrap_concurrent(
        "[method]descriptor.rename-at",
        |acc: &Accessor<CState>,
         (fd, old, new_fd, new): (Resource<Descriptor>, String, Resource<Descriptor>, String)| {
            Box::pin(async move {
                let guard = guard_of(acc);
                let fs = fs_of(acc);
                let mut pfs = P3Fs(&fs);
                let two = match two_ends(&mut pfs, &guard, (fd, old), (new_fd, new)).await? {
                    Ok(two) => two,
                    Err(e) => return Ok((Err(e),)),
                };
                let ((dir_a, old), (dir_b, new)) = (two.a.clone_at(), two.b.clone_at());
                let r = <Host as HostDescriptorWithStore<CState>>::rename_at(
                    &fs, dir_a, old, dir_b, new,
                )
                .await;
                two.finish(&mut pfs, r)
            })
        },
    )?;
    fs.func_wrap_concurrent(
        "[method]descriptor.link-at",
        |acc: &Accessor<CState>,
         (fd, old_flags, old, new_fd, new): (
            Resource<Descriptor>,
            PathFlags,
            String,
            Resource<Descriptor>,
            String,
        )| {
            Box::pin(async move {
                let guard = guard_of(acc);
                let fs = fs_of(acc);
                let mut pfs = P3Fs(&fs);
                let two = match two_ends(&mut pfs, &guard, (fd, old), (new_fd, new)).await? {
                    Ok(two) => two,
                    Err(e) => return Ok((Err(e),)),
                };
                let ((dir_a, old), (dir_b, new)) = (two.a.clone_at(), two.b.clone_at());
                let r = <Host as HostDescriptorWithStore<CState>>::link_at(
                    &fs, dir_a, old_flags, old, dir_b, new,
                )
                .await;
                two.finish(&mut pfs, r)
            })
        },
    )?;
    Ok(())
}

/// Both ends of a rename or link: where each goes, and the targets to
/// release after the change.
struct TwoEnds {
    targets: Option<(Target, Target)>,
    a: End,
    b: End,
}

/// One end of a change: the handle and the name it goes through.
struct End(u32, String);

impl End {
    fn clone_at(&self) -> (Resource<Descriptor>, String) {
        (borrow(self.0), self.1.clone())
    }
}

impl TwoEnds {
    fn finish(
        &self,
        pfs: &mut P3Fs<'_>,
        r: wasmtime_wasi::p3::filesystem::FilesystemResult<()>,
    ) -> wasmtime::Result<(Result<(), ErrorCode>,)> {
        let (a, b) = match &self.targets {
            Some((a, b)) => (Some(a), Some(b)),
            None => (None, None),
        };
        finish(pfs, a, b, r)
    }
}

/// The checked ends of a rename or link (`guard_path::two_targets`).
async fn two_ends(
    pfs: &mut P3Fs<'_>,
    guard: &Guard,
    (fd_a, a): (Resource<Descriptor>, String),
    (fd_b, b): (Resource<Descriptor>, String),
) -> wasmtime::Result<Result<TwoEnds, ErrorCode>> {
    let targets =
        match guard_path::two_targets(pfs, guard, (fd_a.rep(), &a), (fd_b.rep(), &b)).await? {
            Ok(t) => t,
            Err(e) => return Ok(Err(e)),
        };
    let (end_a, end_b) = match &targets {
        Some((ta, tb)) => (End(ta.rep, ta.name.clone()), End(tb.rep, tb.name.clone())),
        None => (End(fd_a.rep(), a), End(fd_b.rep(), b)),
    };
    Ok(Ok(TwoEnds {
        targets,
        a: end_a,
        b: end_b,
    }))
}

/// Where a change goes: through the checked target, or unchanged.
fn at(
    t: &Option<Target>,
    fd: Resource<Descriptor>,
    path: String,
) -> (Resource<Descriptor>, String) {
    at_ref(t.as_ref(), fd, path)
}

fn at_ref(
    t: Option<&Target>,
    fd: Resource<Descriptor>,
    path: String,
) -> (Resource<Descriptor>, String) {
    match t {
        Some(t) => (borrow(t.rep), t.name.clone()),
        None => (fd, path),
    }
}

/// Releases the targets and gives the guest the change's result.
fn finish(
    pfs: &mut P3Fs<'_>,
    a: Option<&Target>,
    b: Option<&Target>,
    r: wasmtime_wasi::p3::filesystem::FilesystemResult<()>,
) -> wasmtime::Result<(Result<(), ErrorCode>,)> {
    for t in [a, b].into_iter().flatten() {
        guard_path::release(pfs, t)?;
    }
    match r {
        Ok(()) => Ok((Ok(()),)),
        Err(e) => Ok((Err(code(e)?),)),
    }
}

/// The walk's directory operations through wasmtime-wasi's p3 functions.
struct P3Fs<'a>(&'a Fs);

impl PathFs for P3Fs<'_> {
    type Code = ErrorCode;

    fn not_permitted() -> ErrorCode {
        ErrorCode::NotPermitted
    }

    fn too_many_hops() -> ErrorCode {
        ErrorCode::Loop
    }

    async fn open_dir(
        &mut self,
        guard: &Guard,
        dir: u32,
        path: &str,
    ) -> wasmtime::Result<Result<u32, ErrorCode>> {
        let opened = <Host as HostDescriptorWithStore<CState>>::open_at(
            self.0,
            borrow(dir),
            PathFlags::SYMLINK_FOLLOW,
            path.to_string(),
            OpenFlags::DIRECTORY,
            DescriptorFlags::READ,
        )
        .await;
        match opened {
            Ok(r) => {
                let rep = r.rep();
                self.0.with(|mut a| restrict(a.get().table, guard, rep));
                Ok(Ok(rep))
            }
            Err(e) => Ok(Err(code(e)?)),
        }
    }

    async fn is_symlink(&mut self, dir: u32, name: &str) -> bool {
        let st = <Host as HostDescriptorWithStore<CState>>::stat_at(
            self.0,
            borrow(dir),
            PathFlags::empty(),
            name.to_string(),
        )
        .await;
        matches!(st, Ok(st) if matches!(st.type_, DescriptorType::SymbolicLink))
    }

    async fn readlink(
        &mut self,
        dir: u32,
        name: &str,
    ) -> wasmtime::Result<Result<String, ErrorCode>> {
        let r = <Host as HostDescriptorWithStore<CState>>::readlink_at(
            self.0,
            borrow(dir),
            name.to_string(),
        )
        .await;
        match r {
            Ok(l) => Ok(Ok(l)),
            Err(e) => Ok(Err(code(e)?)),
        }
    }

    fn named(&mut self, guard: &Guard, dir: u32, name: &str) -> bool {
        self.0.with(|mut a| match a.get().table.get(&borrow(dir)) {
            Ok(Descriptor::Dir(d)) => guard.named(&d.dir, name),
            Ok(Descriptor::File(_)) => false,
            Err(_) => true,
        })
    }

    fn close(&mut self, rep: u32) -> wasmtime::Result<()> {
        self.0.with(|mut a| {
            a.get()
                .table
                .delete(Resource::<Descriptor>::new_own(rep))
                .map(|_| ())
                .map_err(wasmtime::Error::from)
        })
    }
}
