//! WASI preview-1 modules: the store state (`State`) and the linker, whose
//! file-writing calls go through the file budget and whose path-opening
//! calls go through the protected-path guard and the special-file checks
//! (`call_p1` calls wasmtime-wasi's own entry point after them).

use wasmtime::{Caller, Engine, Linker};
use wasmtime_wasi::p1::WasiP1Ctx;

/// Per-call store state of a preview-1 module.
pub(super) struct State {
    pub(super) wasi: WasiP1Ctx,
    pub(super) common: Common,
    /// Where the module exports `memory`, looked up once per call: each
    /// host function finds the guest's memory by it ([`guest_memory`])
    /// instead of by name (a hash of the name and a map lookup, several
    /// times per file operation).
    pub(super) memory: Option<wasmtime::ModuleExport>,
    /// The dirs the call's preopens were made from, when they are shared
    /// ones (`ctx::Preopens`) and the call's file operations run inline
    /// (`inline_io`: the lookup blocks, so it runs on the call's runner, or
    /// a blocking-pool thread if none could start, never on a runtime
    /// worker): the check before an open looks a path
    /// under a preopen up on that very directory ([`p1_precheck`]).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(super) dirs: Option<super::ctx::PreopenDirs>,
}

/// The calling guest's exported `memory`, as `Caller::get_export("memory")`
/// would find it (a store holds one instance, of the module `memory` was
/// looked up in; an export of another module finds nothing).
pub(super) fn guest_memory(caller: &mut Caller<'_, State>) -> Option<wasmtime::Memory> {
    let export = caller.data().memory?;
    caller.get_module_export(&export)?.into_memory()
}

impl HasCommon for State {
    fn common(&mut self) -> &mut Common {
        &mut self.common
    }
}

/// Calls a WASI preview-1 function's ABI entry point with the calling guest's
/// memory, exactly as wasmtime-wasi's own linker glue does.
macro_rules! call_p1 {
    ($caller:ident, $func:ident ( $($arg:expr),* )) => {{
        let fuel = wasmtime::AsContextMut::as_context_mut(&mut $caller).hostcall_fuel();
        match $crate::backend::wasm::p1::guest_memory(&mut $caller) {
            Some(m) => {
                let (mem, state) = m.data_and_store_mut(&mut $caller);
                let ctx = &mut state.wasi;
                wasmtime_wasi::p1::wasi_snapshot_preview1::WasiSnapshotPreview1::set_hostcall_fuel(ctx, fuel);
                let mut mem = wiggle::GuestMemory::Unshared(mem);
                Ok(wasmtime_wasi::p1::wasi_snapshot_preview1::$func(ctx, &mut mem, $($arg),*).await?)
            }
            _ => Err(wasmtime::format_err!("missing required memory export")),
        }
    }};
}
use super::limits::{Common, HasCommon};
use super::{ERRNO_FAULT, ERRNO_FBIG, ERRNO_INTR, ERRNO_NAMETOOLONG, ERRNO_PERM, MAX_GUEST_PATH};
use super::{guard_p1, inline_io, sleep_p1, special};
pub(crate) use call_p1;

/// Where a preview-1 write to `fd` would start, if `fd` is a regular file:
/// `at` for a positioned write, else the file's size when it was opened for
/// appending, else its current offset. `None` when `fd` is anything else
/// (stdio, a directory, a bad descriptor: the real call decides those).
pub(super) async fn file_write_start(
    caller: &mut Caller<'_, State>,
    fd: i32,
    at: Option<u64>,
) -> Option<u64> {
    use wasmtime_wasi::p1::types;
    use wasmtime_wasi::p1::wasi_snapshot_preview1::WasiSnapshotPreview1 as P1;
    let m = guest_memory(caller)?;
    let (mem, state) = m.data_and_store_mut(&mut *caller);
    let ctx = &mut state.wasi;
    let mut mem = wiggle::GuestMemory::Unshared(mem);
    let fd = types::Fd::from(fd as u32);
    let st = P1::fd_fdstat_get(ctx, &mut mem, fd).await.ok()?;
    if st.fs_filetype != types::Filetype::RegularFile {
        return None;
    }
    if let Some(at) = at {
        return Some(at);
    }
    if st.fs_flags.contains(types::Fdflags::APPEND) {
        return P1::fd_filestat_get(ctx, &mut mem, fd)
            .await
            .ok()
            .map(|f| f.size);
    }
    P1::fd_tell(ctx, &mut mem, fd).ok()
}

/// Admits a preview-1 write of the iovecs at `iovs` to `fd` (at `at` for a
/// positioned write) against the file budget: `Ok(Some(start))` for a file
/// write that may go ahead, `Ok(None)` when `fd` is not a file, `Err(errno)`
/// when the write is refused.
pub(super) async fn admit_file_write(
    caller: &mut Caller<'_, State>,
    fd: i32,
    iovs: i32,
    n: i32,
    at: Option<u64>,
) -> Result<Option<u64>, i32> {
    let Some(start) = file_write_start(caller, fd, at).await else {
        return Ok(None);
    };
    let Some(want) = iov_first(caller, iovs, n) else {
        return Err(ERRNO_FAULT);
    };
    if !caller.data().common.files.admit_write(start, want) {
        return Err(ERRNO_FBIG);
    }
    Ok(Some(start))
}

/// The errno of a preview-1 socket call on `fd`: EBADF when it is not a
/// descriptor of the guest, else ENOTSOCK.
pub(super) async fn not_a_socket(caller: &mut Caller<'_, State>, fd: i32) -> i32 {
    use wasmtime_wasi::p1::wasi_snapshot_preview1::WasiSnapshotPreview1 as P1;
    const ERRNO_BADF: i32 = 8;
    const ERRNO_NOTSOCK: i32 = 57;
    let Some(m) = guest_memory(caller) else {
        return ERRNO_BADF;
    };
    let (mem, state) = m.data_and_store_mut(&mut *caller);
    let mut mem = wiggle::GuestMemory::Unshared(mem);
    let fd = wasmtime_wasi::p1::types::Fd::from(fd as u32);
    match P1::fd_fdstat_get(&mut state.wasi, &mut mem, fd).await {
        Ok(_) => ERRNO_NOTSOCK,
        Err(_) => ERRNO_BADF,
    }
}

/// The current size of the regular file `fd`, if it is one.
pub(super) async fn file_size(caller: &mut Caller<'_, State>, fd: i32) -> Option<u64> {
    use wasmtime_wasi::p1::types;
    use wasmtime_wasi::p1::wasi_snapshot_preview1::WasiSnapshotPreview1 as P1;
    let m = guest_memory(caller)?;
    let (mem, state) = m.data_and_store_mut(&mut *caller);
    let mut mem = wiggle::GuestMemory::Unshared(mem);
    let f = P1::fd_filestat_get(&mut state.wasi, &mut mem, types::Fd::from(fd as u32))
        .await
        .ok()?;
    (f.filetype == types::Filetype::RegularFile).then_some(f.size)
}

/// The preview-1 linker, with the file-writing calls wrapped by the file
/// budget. Whether a write goes to a file is decided by the descriptor's type,
/// not its number (a guest can renumber a file onto fd 1).
pub(super) fn build_linker(engine: &Engine) -> wasmtime::Result<Linker<State>> {
    let mut linker: Linker<State> = Linker::new(engine);
    wasmtime_wasi::p1::add_to_linker_async(&mut linker, |s: &mut State| &mut s.wasi)?;
    linker.allow_shadowing(true);
    const M: &str = "wasi_snapshot_preview1";
    // The calls that name a path or a descriptor move an inline call off
    // its caller first (`inline_io`); each shadow after this one does too.
    inline_io::add_to_linker(&mut linker)?;
    // Changes by path go through a fresh handle on the parent (`protect`).
    guard_p1::add_to_linker(&mut linker)?;
    // A sleep stays a timer when file operations run inline (`sleep_p1`).
    sleep_p1::add_to_linker(&mut linker)?;

    // The preview-1 socket calls: wasmtime-wasi answers them with a warning
    // logged per call, which a guest looping on them turns into unbounded
    // host logs. The same answers, silently: EBADF for a bad descriptor,
    // ENOTSOCK for any other (no descriptor is a socket here).
    linker.func_wrap_async(
        M,
        "sock_shutdown",
        |mut caller: Caller<'_, State>, (fd, _how): (i32, i32)| {
            Box::new(async move {
                inline_io::before_fd_op(&mut caller, fd).await?;
                Ok(not_a_socket(&mut caller, fd).await)
            })
        },
    )?;
    linker.func_wrap_async(
        M,
        "sock_accept",
        |mut caller: Caller<'_, State>, (fd, _flags, _out): (i32, i32, i32)| {
            Box::new(async move {
                inline_io::before_fd_op(&mut caller, fd).await?;
                Ok(not_a_socket(&mut caller, fd).await)
            })
        },
    )?;
    linker.func_wrap_async(
        M,
        "sock_recv",
        |mut caller: Caller<'_, State>, (fd, ..): (i32, i32, i32, i32, i32, i32)| {
            Box::new(async move {
                inline_io::before_fd_op(&mut caller, fd).await?;
                Ok(not_a_socket(&mut caller, fd).await)
            })
        },
    )?;
    linker.func_wrap_async(
        M,
        "sock_send",
        |mut caller: Caller<'_, State>, (fd, ..): (i32, i32, i32, i32, i32)| {
            Box::new(async move {
                inline_io::before_fd_op(&mut caller, fd).await?;
                Ok(not_a_socket(&mut caller, fd).await)
            })
        },
    )?;
    linker.func_wrap_async(
        M,
        "fd_write",
        |mut caller: Caller<'_, State>, (fd, iovs, n, nwritten): (i32, i32, i32, i32)| {
            Box::new(async move {
                inline_io::before_fd_op(&mut caller, fd).await?;
                let start = match admit_file_write(&mut caller, fd, iovs, n, None).await {
                    Ok(start) => start,
                    Err(errno) => return Ok(errno),
                };
                let r: wasmtime::Result<i32> = call_p1!(caller, fd_write(fd, iovs, n, nwritten));
                let r = r?;
                if start.is_some() && r == 0 {
                    count_written(&mut caller, nwritten);
                }
                Ok(r)
            })
        },
    )?;
    linker.func_wrap_async(
        M,
        "fd_pwrite",
        |mut caller: Caller<'_, State>,
         (fd, iovs, n, offset, nwritten): (i32, i32, i32, i64, i32)| {
            Box::new(async move {
                let at = Some(offset as u64);
                inline_io::before_fd_op(&mut caller, fd).await?;
                let start = match admit_file_write(&mut caller, fd, iovs, n, at).await {
                    Ok(start) => start,
                    Err(errno) => return Ok(errno),
                };
                let r: wasmtime::Result<i32> =
                    call_p1!(caller, fd_pwrite(fd, iovs, n, offset, nwritten));
                let r = r?;
                if start.is_some() && r == 0 {
                    count_written(&mut caller, nwritten);
                }
                Ok(r)
            })
        },
    )?;
    linker.func_wrap_async(
        M,
        "fd_filestat_set_size",
        |mut caller: Caller<'_, State>, (fd, size): (i32, i64)| {
            Box::new(async move {
                inline_io::before_fd_op(&mut caller, fd).await?;
                let size = size as u64;
                let growth = match file_size(&mut caller, fd).await {
                    Some(current) => size.saturating_sub(current),
                    None => 0,
                };
                if !caller.data().common.files.admit_resize(size, growth) {
                    return Ok(ERRNO_FBIG);
                }
                let r: wasmtime::Result<i32> =
                    call_p1!(caller, fd_filestat_set_size(fd, size as i64));
                let r = r?;
                if r == 0 {
                    caller.data().common.files.add(growth);
                }
                Ok(r)
            })
        },
    )?;
    linker.func_wrap_async(
        M,
        "path_open",
        |mut caller: Caller<'_, State>,
         (fd, dirflags, path, path_len, oflags, base, inheriting, fdflags, opened): (
            i32,
            i32,
            i32,
            i32,
            i32,
            i64,
            i64,
            i32,
            i32,
        )| {
            Box::new(async move {
                inline_io::before_file_op(&mut caller).await?;
                if path_len as u32 as usize > MAX_GUEST_PATH {
                    return Ok(ERRNO_NAMETOOLONG);
                }
                // An open that may change a file: through the guard.
                const CREAT_OR_TRUNC: i32 = 1 | 8;
                const FD_WRITE: i64 = 1 << 6;
                if caller.data().common.guard.active()
                    && (oflags & CREAT_OR_TRUNC != 0 || base & FD_WRITE != 0)
                {
                    let p = match guard_p1::guest_str(&mut caller, path, path_len) {
                        Ok(p) => p,
                        Err(e) => return Ok(e),
                    };
                    let r = guard_p1::open_for_writing(
                        &mut caller,
                        fd,
                        dirflags,
                        &p,
                        oflags,
                        base,
                        inheriting,
                        fdflags,
                        opened,
                    )
                    .await?;
                    if let Some(errno) = r {
                        return Ok(errno);
                    }
                }
                if let Err(errno) = p1_precheck(&mut caller, fd, dirflags, path, path_len).await {
                    return Ok(errno);
                }
                let open = async {
                    let r: wasmtime::Result<i32> = call_p1!(
                        caller,
                        path_open(
                            fd, dirflags, path, path_len, oflags, base, inheriting, fdflags, opened
                        )
                    );
                    r
                };
                let watched = special::watched(open).await;
                let r = watched.result?;
                if r != 0 {
                    return Ok(refusal(r, watched.interrupted));
                }
                Ok(p1_postcheck(&mut caller, opened).await)
            })
        },
    )?;
    // wasmtime-wasi sets a path's times through a blocking open of it.
    linker.func_wrap_async(
        M,
        "path_filestat_set_times",
        |mut caller: Caller<'_, State>,
         (fd, flags, path, path_len, atim, mtim, fst_flags): (
            i32,
            i32,
            i32,
            i32,
            i64,
            i64,
            i32,
        )| {
            Box::new(async move {
                inline_io::before_file_op(&mut caller).await?;
                if path_len as u32 as usize > MAX_GUEST_PATH {
                    return Ok(ERRNO_NAMETOOLONG);
                }
                if caller.data().common.guard.active() {
                    let p = match guard_p1::guest_str(&mut caller, path, path_len) {
                        Ok(p) => p,
                        Err(e) => return Ok(e),
                    };
                    let r = guard_p1::set_times(&mut caller, fd, flags, &p, atim, mtim, fst_flags)
                        .await?;
                    if let Some(errno) = r {
                        return Ok(errno);
                    }
                }
                if let Err(errno) = p1_precheck(&mut caller, fd, flags, path, path_len).await {
                    return Ok(errno);
                }
                let set = async {
                    let r: wasmtime::Result<i32> = call_p1!(
                        caller,
                        path_filestat_set_times(fd, flags, path, path_len, atim, mtim, fst_flags)
                    );
                    r
                };
                let watched = special::watched(set).await;
                Ok(refusal(watched.result?, watched.interrupted))
            })
        },
    )?;
    Ok(linker)
}

/// A preview-1 errno after a watched call: EINTR while the watchdog
/// interrupted a thread is the refusal of a special file.
pub(super) fn refusal(errno: i32, interrupted: bool) -> i32 {
    if errno == ERRNO_INTR && interrupted {
        ERRNO_PERM
    } else {
        errno
    }
}

/// Before a preview-1 call that opens a path (`special`): the errno to return
/// (`ERRNO_PERM`) if the path is a special file. A path that cannot be
/// stat'ed goes on to the call, which reports its own error.
pub(super) async fn p1_precheck(
    caller: &mut Caller<'_, State>,
    fd: i32,
    dirflags: i32,
    path: i32,
    path_len: i32,
) -> Result<(), i32> {
    use wasmtime_wasi::p1::types;
    use wasmtime_wasi::p1::wasi_snapshot_preview1::WasiSnapshotPreview1 as P1;
    if !special::precheck() {
        return Ok(());
    }
    let fuel = wasmtime::AsContextMut::as_context_mut(&mut *caller).hostcall_fuel();
    let Some(m) = guest_memory(caller) else {
        return Ok(());
    };
    let (mem, state) = m.data_and_store_mut(&mut *caller);
    let ctx = &mut state.wasi;
    P1::set_hostcall_fuel(ctx, fuel);
    let Ok(flags) = types::Lookupflags::try_from(dirflags) else {
        return Ok(());
    };
    // Under a shared preopen, by toolhost's own lookup on its directory:
    // one lookup where wasmtime-wasi's makes two.
    #[cfg(target_os = "linux")]
    if let Some(dirs) = &state.dirs
        && let Some(dir) = preopen_of(ctx, dirs, fd)
        && let Some(name) = mem
            .get(path as u32 as usize..)
            .and_then(|m| m.get(..path_len as u32 as usize))
            .and_then(|b| std::str::from_utf8(b).ok())
    {
        let follow = flags.contains(types::Lookupflags::SYMLINK_FOLLOW);
        match special::found_at(dir, name, follow) {
            special::Found::Special => {
                special::REFUSED_BY_PREOPEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return Err(ERRNO_PERM);
            }
            special::Found::Allowed | special::Found::Missing => return Ok(()),
            special::Found::Unknown => {}
        }
    }
    let mut mem = wiggle::GuestMemory::Unshared(mem);
    let ptr = wiggle::GuestPtr::<str>::new((path as u32, path_len as u32));
    match P1::path_filestat_get(ctx, &mut mem, types::Fd::from(fd as u32), flags, ptr).await {
        Ok(st)
            if !special::p1_allowed(st.filetype)
                && st.filetype != types::Filetype::SymbolicLink =>
        {
            Err(ERRNO_PERM)
        }
        _ => Ok(()),
    }
}

/// The directory of the preopen the guest's `fd` is (renumbered or not),
/// found by the preopen's name among `dirs`; `None` for a descriptor that
/// is no preopen, or a name that is not exactly one of `dirs`.
#[cfg(target_os = "linux")]
fn preopen_of<'a>(
    ctx: &mut WasiP1Ctx,
    dirs: &'a super::ctx::PreopenDirs,
    fd: i32,
) -> Option<&'a cap_std::fs::Dir> {
    use wasmtime_wasi::p1::types;
    use wasmtime_wasi::p1::wasi_snapshot_preview1::WasiSnapshotPreview1 as P1;
    let fd = types::Fd::from(fd as u32);
    let mut name = [0u8; 256];
    let types::Prestat::Dir(d) =
        P1::fd_prestat_get(ctx, &mut wiggle::GuestMemory::Unshared(&mut []), fd).ok()?;
    let len = usize::try_from(d.pr_name_len).ok()?;
    let name = name.get_mut(..len)?;
    let mut mem = wiggle::GuestMemory::Unshared(name);
    P1::fd_prestat_dir_name(ctx, &mut mem, fd, wiggle::GuestPtr::new(0), len as u32).ok()?;
    super::ctx::preopen_named(dirs, name)
}

/// After a successful preview-1 `path_open`: 0, or `ERRNO_PERM` when what it
/// opened (its fd is at `opened` in guest memory) is a special file, which is
/// closed.
pub(super) async fn p1_postcheck(caller: &mut Caller<'_, State>, opened: i32) -> i32 {
    use wasmtime_wasi::p1::types;
    use wasmtime_wasi::p1::wasi_snapshot_preview1::WasiSnapshotPreview1 as P1;
    let Some(m) = guest_memory(caller) else {
        return ERRNO_FAULT;
    };
    let (mem, state) = m.data_and_store_mut(&mut *caller);
    let p = opened as u32 as usize;
    let Some(new) = mem
        .get(p..p.saturating_add(4))
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(u32::from_le_bytes)
    else {
        return ERRNO_FAULT;
    };
    let ctx = &mut state.wasi;
    let mut mem = wiggle::GuestMemory::Unshared(mem);
    let new = types::Fd::from(new);
    // Its type only: `fd_fdstat_get` reads the flags (`fcntl`) and, for a
    // file, the type (one `statx`), where `fd_filestat_get` makes two
    // `statx` (the second for the inode's hash). An open fd's type never
    // changes; what is not a file or a directory is closed.
    match P1::fd_fdstat_get(ctx, &mut mem, new).await {
        Ok(st) if special::p1_allowed(st.fs_filetype) => {
            if st.fs_filetype == types::Filetype::Directory {
                // A new directory handle: read-only if inside a protected dir.
                guard_p1::restrict_all(caller);
            }
            0
        }
        _ => {
            let _ = P1::fd_close(ctx, &mut mem, new).await;
            ERRNO_PERM
        }
    }
}

/// Length of the first non-empty iovec of an array in guest memory (what a
/// preview-1 write of wasmtime-wasi writes at most); `None` if out of bounds.
pub(super) fn iov_first(caller: &mut Caller<'_, State>, iovs: i32, n: i32) -> Option<u64> {
    let mem = guest_memory(caller)?;
    let data = mem.data(&*caller);
    let (start, n) = (iovs as u32 as usize, n as u32 as usize);
    let bytes = data.get(start..start.checked_add(n.checked_mul(8)?)?)?;
    Some(
        bytes
            .chunks_exact(8)
            .map(|iov| u32::from_le_bytes([iov[4], iov[5], iov[6], iov[7]]) as u64)
            .find(|len| *len > 0)
            .unwrap_or(0),
    )
}

pub(super) fn count_written(caller: &mut Caller<'_, State>, ptr: i32) {
    let Some(mem) = guest_memory(caller) else {
        return;
    };
    let p = ptr as u32 as usize;
    let n = mem
        .data(&*caller)
        .get(p..p.saturating_add(4))
        .and_then(|b| b.try_into().ok())
        .map(|b: [u8; 4]| u32::from_le_bytes(b) as u64)
        .unwrap_or(0);
    caller.data().common.files.add(n);
}
