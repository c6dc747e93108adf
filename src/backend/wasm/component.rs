//! WASI preview-2 components: command components (`wasi:cli/run`) and typed
//! tools (the `toolhost:tool` world in `wit/`).
//!
//! They get the same limits as preview-1 modules: the store's limiter, epoch or
//! fuel, the wall-clock timeout and the per-call file budget. The budget is
//! kept by shadowing the `wasi:filesystem` functions that write: a descriptor's
//! `write` and `set-size` check it, and the output streams `write-via-stream`
//! and `append-via-stream` hand out are wrapped in a stream that counts bytes.

use std::sync::Arc;

use wasmtime::component::{Linker, Resource, ResourceTable};
use wasmtime::{Engine, StoreContextMut};
use wasmtime_wasi::filesystem::{Descriptor, WasiFilesystemView};
use wasmtime_wasi::p2::bindings::filesystem::types::{
    DescriptorFlags, DescriptorType, ErrorCode, Host as FsTypesHost, HostDescriptor, NewTimestamp,
    OpenFlags, PathFlags,
};
use wasmtime_wasi::p2::{DynOutputStream, OutputStream, Pollable, StreamError, StreamResult};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::{Common, FileBudget, HasCommon, guard_p2, guard_path, special};

/// Host bindings of the `toolhost:tool` world.
pub(crate) mod bindings {
    wasmtime::component::bindgen!({
        path: "wit",
        world: "tool",
        exports: { default: async },
    });
}

pub(crate) use bindings::ToolPre;

/// Per-call store state of a component.
pub(crate) struct CState {
    pub(crate) ctx: WasiCtx,
    pub(crate) table: ResourceTable,
    pub(crate) common: Common,
}

impl WasiView for CState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.ctx,
            table: &mut self.table,
        }
    }
}

impl HasCommon for CState {
    fn common(&mut self) -> &mut Common {
        &mut self.common
    }
}

/// The `wasi:filesystem/types` instance wasmtime-wasi defines (the version of
/// its WIT); guests importing an older 0.2.x resolve to it by semver.
const FS_TYPES: &str = "wasi:filesystem/types@0.2.12";

/// The preview-2 linker, with the file-writing functions held to the budget.
pub(crate) fn build_linker(engine: &Engine) -> wasmtime::Result<Linker<CState>> {
    let mut linker: Linker<CState> = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    linker.allow_shadowing(true);
    let mut fs = linker.instance(FS_TYPES)?;

    fs.func_wrap_async(
        "[method]descriptor.write",
        |mut store: StoreContextMut<'_, CState>,
         (fd, buf, offset): (Resource<Descriptor>, Vec<u8>, u64)| {
            Box::new(async move {
                let budget = store.data().common.files.clone();
                let want = buf.len() as u64;
                if !budget.reserve_write(offset, want) {
                    return Ok((Err(ErrorCode::FileTooLarge),));
                }
                let mut view = store.data_mut().filesystem();
                match HostDescriptor::write(&mut view, fd, buf, offset).await {
                    Ok(n) => {
                        budget.refund(want.saturating_sub(n));
                        Ok((Ok(n),))
                    }
                    Err(e) => {
                        budget.refund(want);
                        Ok((Err(view.convert_error_code(e)?),))
                    }
                }
            })
        },
    )?;
    fs.func_wrap_async(
        "[method]descriptor.set-size",
        |mut store: StoreContextMut<'_, CState>, (fd, size): (Resource<Descriptor>, u64)| {
            Box::new(async move {
                let budget = store.data().common.files.clone();
                let mut view = store.data_mut().filesystem();
                let current = file_size(&mut view, &fd).await;
                let growth = size.saturating_sub(current.unwrap_or(size));
                if !budget.reserve_resize(size, growth) {
                    return Ok((Err(ErrorCode::FileTooLarge),));
                }
                match HostDescriptor::set_size(&mut view, fd, size).await {
                    Ok(()) => Ok((Ok(()),)),
                    Err(e) => {
                        budget.refund(growth);
                        Ok((Err(view.convert_error_code(e)?),))
                    }
                }
            })
        },
    )?;
    fs.func_wrap(
        "[method]descriptor.write-via-stream",
        |mut store: StoreContextMut<'_, CState>, (fd, offset): (Resource<Descriptor>, u64)| {
            let budget = store.data().common.files.clone();
            let mut view = store.data_mut().filesystem();
            let r = HostDescriptor::write_via_stream(&mut view, fd, offset);
            wrap_stream(&mut view, budget, offset, None, r)
        },
    )?;
    fs.func_wrap_async(
        "[method]descriptor.append-via-stream",
        |mut store: StoreContextMut<'_, CState>, (fd,): (Resource<Descriptor>,)| {
            Box::new(async move {
                let budget = store.data().common.files.clone();
                let mut view = store.data_mut().filesystem();
                // Appends start at the end: a file already at the limit
                // cannot grow through its append stream.
                let end = file_size(&mut view, &fd).await.unwrap_or(0);
                // Each write is checked at the end as it is then: a resize
                // may grow the file while the stream is open.
                let file = match view.table.get(&fd) {
                    Ok(Descriptor::File(f)) => Some(f.file.clone()),
                    _ => None,
                };
                let r = HostDescriptor::append_via_stream(&mut view, fd);
                wrap_stream(&mut view, budget, end, file, r)
            })
        },
    )?;
    fs.func_wrap_async(
        "[method]descriptor.open-at",
        |mut store: StoreContextMut<'_, CState>,
         (fd, path_flags, path, oflags, flags): (
            Resource<Descriptor>,
            PathFlags,
            String,
            OpenFlags,
            DescriptorFlags,
        )| {
            Box::new(async move {
                if path.len() > super::MAX_GUEST_PATH {
                    return Ok((Err(ErrorCode::NameTooLong),));
                }
                let guard = store.data().common.guard.clone();
                let mut view = store.data_mut().filesystem();
                // An open that may change a file goes through the guard
                // (`protect`): the parent's handle, the last name unfollowed.
                let write = oflags.intersects(OpenFlags::CREATE | OpenFlags::TRUNCATE)
                    || flags.contains(DescriptorFlags::WRITE);
                if guard.active() && write {
                    match guard_path::open_target(
                        &mut view,
                        &guard,
                        fd.rep(),
                        path_flags.contains(PathFlags::SYMLINK_FOLLOW),
                        &path,
                    )
                    .await?
                    {
                        Ok(Some(t)) => {
                            let unfollowed = PathFlags::empty(); // its only flag is SYMLINK_FOLLOW
                            let r = open_checked(
                                &mut view,
                                &guard,
                                Resource::new_borrow(t.rep),
                                unfollowed,
                                t.name.clone(),
                                oflags,
                                flags,
                            )
                            .await;
                            guard_path::release(&mut view, &t)?;
                            return r;
                        }
                        Ok(None) => {}
                        Err(e) => return Ok((Err(e),)),
                    }
                }
                open_checked(&mut view, &guard, fd, path_flags, path, oflags, flags).await
            })
        },
    )?;
    // Changes by path go through a fresh handle on the parent (`protect`).
    guard_p2::add_to_linker(&mut fs)?;
    // wasmtime-wasi sets a path's times through a blocking open of it.
    fs.func_wrap_async(
        "[method]descriptor.set-times-at",
        |mut store: StoreContextMut<'_, CState>,
         (fd, path_flags, path, atim, mtim): (
            Resource<Descriptor>,
            PathFlags,
            String,
            NewTimestamp,
            NewTimestamp,
        )| {
            Box::new(async move {
                if path.len() > super::MAX_GUEST_PATH {
                    return Ok((Err(ErrorCode::NameTooLong),));
                }
                let guard = store.data().common.guard.clone();
                let mut view = store.data_mut().filesystem();
                let follow = path_flags.contains(PathFlags::SYMLINK_FOLLOW);
                let t = match guard_path::times_target(&mut view, &guard, fd.rep(), follow, &path)
                    .await?
                {
                    Ok(t) => t,
                    Err(e) => return Ok((Err(e),)),
                };
                // Through a target, its last name is not a symlink to follow.
                let (dir, path, path_flags) = match &t {
                    Some(t) => (
                        Resource::new_borrow(t.rep),
                        t.name.clone(),
                        PathFlags::empty(),
                    ),
                    None => (fd, path, path_flags),
                };
                let r = set_times_checked(&mut view, dir, path_flags, path, atim, mtim).await;
                if let Some(t) = &t {
                    guard_path::release(&mut view, t)?;
                }
                r
            })
        },
    )?;
    // Preview 3 beside it: the same context and table (`p3`).
    super::p3::add_to_linker(&mut linker)?;
    Ok(linker)
}

type OpenReturn = (Result<Resource<Descriptor>, ErrorCode>,);

/// `open-at` with the special-file checks (`special`); a directory opened
/// inside a protected dir is made read-only (`protect`).
async fn open_checked(
    view: &mut wasmtime_wasi::filesystem::WasiFilesystemCtxView<'_>,
    guard: &super::protect::Guard,
    fd: Resource<Descriptor>,
    path_flags: PathFlags,
    path: String,
    oflags: OpenFlags,
    flags: DescriptorFlags,
) -> wasmtime::Result<OpenReturn> {
    if !precheck(view, &fd, path_flags, &path).await {
        return Ok((Err(ErrorCode::NotPermitted),));
    }
    let open = HostDescriptor::open_at(view, fd, path_flags, path, oflags, flags);
    let watched = special::watched(open).await;
    let new = match watched.result {
        Ok(new) => new,
        Err(e) => {
            let code = view.convert_error_code(e)?;
            return Ok((Err(refusal(code, watched.interrupted)),));
        }
    };
    // What was opened must be a file or a directory (`special`).
    let opened = Resource::<Descriptor>::new_borrow(new.rep());
    match HostDescriptor::get_type(view, opened).await {
        Ok(t) if special::p2_allowed(t) => {
            if t == DescriptorType::Directory && guard.active() {
                guard.sweep_once(view.table);
                guard_p2::restrict(view, guard, &new);
            }
            Ok((Ok(new),))
        }
        _ => {
            HostDescriptor::drop(view, new)?;
            Ok((Err(ErrorCode::NotPermitted),))
        }
    }
}

/// `set-times-at` with the special-file checks (`special`).
async fn set_times_checked(
    view: &mut wasmtime_wasi::filesystem::WasiFilesystemCtxView<'_>,
    fd: Resource<Descriptor>,
    path_flags: PathFlags,
    path: String,
    atim: NewTimestamp,
    mtim: NewTimestamp,
) -> wasmtime::Result<(Result<(), ErrorCode>,)> {
    if !precheck(view, &fd, path_flags, &path).await {
        return Ok((Err(ErrorCode::NotPermitted),));
    }
    let set = HostDescriptor::set_times_at(view, fd, path_flags, path, atim, mtim);
    let watched = special::watched(set).await;
    match watched.result {
        Ok(()) => Ok((Ok(()),)),
        Err(e) => {
            let code = view.convert_error_code(e)?;
            Ok((Err(refusal(code, watched.interrupted)),))
        }
    }
}

/// Before a call that opens a path (`special`): false if `path` under `dir`
/// is a special file. A path that cannot be stat'ed goes on to the
/// call, which reports its own error.
async fn precheck(
    view: &mut wasmtime_wasi::filesystem::WasiFilesystemCtxView<'_>,
    dir: &Resource<Descriptor>,
    path_flags: PathFlags,
    path: &str,
) -> bool {
    if !special::precheck() {
        return true;
    }
    let dir = Resource::<Descriptor>::new_borrow(dir.rep());
    match HostDescriptor::stat_at(view, dir, path_flags, path.to_string()).await {
        Ok(st) => special::p2_allowed(st.type_) || st.type_ == DescriptorType::SymbolicLink,
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

type StreamReturn = (Result<Resource<DynOutputStream>, ErrorCode>,);

/// The size of the file a descriptor refers to (`None` if it cannot be
/// stat'ed: the real call then reports the error).
async fn file_size(
    view: &mut wasmtime_wasi::filesystem::WasiFilesystemCtxView<'_>,
    fd: &Resource<Descriptor>,
) -> Option<u64> {
    let borrowed = Resource::<Descriptor>::new_borrow(fd.rep());
    HostDescriptor::stat(view, borrowed)
        .await
        .ok()
        .map(|st| st.size)
}

/// Replaces a file output stream in the table by one that counts its bytes
/// against the call's budget, starting at offset `pos` of the file.
fn wrap_stream(
    view: &mut wasmtime_wasi::filesystem::WasiFilesystemCtxView<'_>,
    budget: Arc<FileBudget>,
    pos: u64,
    append: Option<Arc<std::fs::File>>,
    r: wasmtime_wasi::p2::FsResult<Resource<DynOutputStream>>,
) -> wasmtime::Result<StreamReturn> {
    let stream = match r {
        Ok(s) => s,
        Err(e) => return Ok((Err(view.convert_error_code(e)?),)),
    };
    let inner = view.table.delete(stream)?;
    let wrapped: DynOutputStream = Box::new(BudgetedStream {
        inner,
        budget,
        pos,
        append,
    });
    Ok((Ok(view.table.push(wrapped)?),))
}

/// A file output stream held to the call's file budget: the total written,
/// and the offset it writes at (no file grows past the limit).
struct BudgetedStream {
    inner: DynOutputStream,
    budget: Arc<FileBudget>,
    pos: u64,
    /// An append stream's file: each write is checked at its current end.
    append: Option<Arc<std::fs::File>>,
}

#[wasmtime_wasi::async_trait]
impl Pollable for BudgetedStream {
    async fn ready(&mut self) {
        self.inner.ready().await
    }
}

#[wasmtime_wasi::async_trait]
impl OutputStream for BudgetedStream {
    fn write(&mut self, bytes: bytes::Bytes) -> StreamResult<()> {
        let n = bytes.len() as u64;
        if let Some(f) = &self.append
            && let Ok(m) = f.metadata()
        {
            // Writes already queued land before this one.
            self.pos = self.pos.max(m.len());
        }
        if !self.budget.reserve_write(self.pos, n) {
            return Err(StreamError::LastOperationFailed(wasmtime::format_err!(
                "file size limit: the call's file-write budget is used up"
            )));
        }
        if let Err(e) = self.inner.write(bytes) {
            self.budget.refund(n);
            return Err(e);
        }
        self.pos = self.pos.saturating_add(n);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        self.inner.flush()
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        self.inner.check_write()
    }

    async fn cancel(&mut self) {
        self.inner.cancel().await
    }
}
