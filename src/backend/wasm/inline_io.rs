//! Which calls run their file operations on the thread that polls them.
//!
//! By default wasmtime-wasi sends each file operation of a guest to tokio's
//! blocking pool: a round trip between threads (tens of microseconds here)
//! per open, read, write or stat, several per opened file. A preview-1 call
//! that claims an [`InlineSlot`] runs them on the thread polling it instead
//! (`allow_blocking_current_thread`). It starts in its caller's task; at its
//! first operation that can reach a file or a dir ([`before_file_op`]) it
//! moves to a task of its own (`execute`), and the caller keeps the call's
//! timeout on another worker. An operation that waits (a lease another
//! process holds, a directory of a million entries, a frozen filesystem, a
//! FIFO swapped in) then holds that task's worker, not the caller, which
//! gets its `timed_out` on time; the task is aborted at its next yield. A
//! call that touches no file never changes task.
//!
//! A call claims a slot only when all of these hold:
//! - it runs on a multi-thread runtime, and fewer calls of that runtime hold
//!   a slot than it has workers less one: one worker always stays free for
//!   timers, timeouts and every other task, however many operations wait;
//! - the FIFO watchdog's thread runs and passed its self-test, so an open of
//!   a FIFO swapped in after the check is ended rather than holding a
//!   worker (`special::inline_ok`);
//! - every filesystem its dirs reach ends each operation by itself
//!   (`local_fs`: not procfs, FUSE, NFS, ...), so a worker is not held for
//!   good by a file that waits on someone.
//!
//! Otherwise (the CLI's single-thread runtime, components, typed tools) each
//! operation goes to the pool, as before.

use std::sync::{Arc, Mutex};

use cap_std::fs::Dir;

use tokio::runtime::Id;

use wasmtime::{Caller, Linker};

use super::limits::HasCommon;
use super::local_fs::LocalFs;
use super::p1::{State, call_p1};
use super::special;

/// How many calls hold a slot, per runtime that has any.
static RUNNING: Mutex<Vec<(Id, usize)>> = Mutex::new(Vec::new());

thread_local! {
    /// Whether the last call prepared on this thread claimed a slot
    /// (`last_call_file_io_inline`).
    pub(super) static LAST: std::cell::Cell<Option<bool>> = const { std::cell::Cell::new(None) };
}

/// Leave to run a call's file operations on its own thread; released when
/// dropped (with the call's task).
#[derive(Debug)]
pub(super) struct InlineSlot(Id);

impl Drop for InlineSlot {
    fn drop(&mut self) {
        let mut running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = running.iter().position(|(id, _)| *id == self.0) {
            running[i].1 = running[i].1.saturating_sub(1);
            if running[i].1 == 0 {
                running.swap_remove(i);
            }
        }
    }
}

/// Called first by every preview-1 function that can reach a file or a dir
/// (the shadows in `p1`, `guard_p1`, `sleep_p1`'s neighbours): at the
/// first, a call that holds a slot asks to move to a task of its own and
/// yields once; `execute` then moves it, and the operation runs there.
/// Until then the call runs in its caller's task (a call that touches no
/// file pays no task hand-off), doing nothing that can wait: the functions
/// left unguarded act on stdio, on a file (which only an open, guarded,
/// gives) or quickly on a dir (`fd_filestat_get`, `fd_read`).
///
/// Traps instead once the caller is done with the call ([`still_wanted`]).
pub(super) async fn before_file_op<T: HasCommon>(
    caller: &mut wasmtime::Caller<'_, T>,
) -> wasmtime::Result<()> {
    still_wanted(caller)?;
    if let Some(flag) = caller.data_mut().common().move_to_task.take() {
        flag.store(true, std::sync::atomic::Ordering::Release);
        tokio::task::yield_now().await;
    }
    Ok(())
}

/// A trap once the caller of a call moved to its own task has stopped
/// waiting for it (its timeout fired, or it was dropped). The task is then
/// aborted at its next yield; host functions that do not yield (an inline
/// write, an open) would otherwise go on changing files until then. Checked
/// by [`before_file_op`] and the shadows that write to files.
pub(super) fn still_wanted<T: HasCommon>(
    caller: &mut wasmtime::Caller<'_, T>,
) -> wasmtime::Result<()> {
    match &caller.data_mut().common().ended {
        Some(e) if e.load(std::sync::atomic::Ordering::Acquire) => Err(wasmtime::format_err!(
            "the call's caller stopped waiting for it (timed out or cancelled)"
        )),
        _ => Ok(()),
    }
}

/// A slot for a call whose allowed dirs' handles are `dirs` (and whose
/// working dir's is `cwd`, when not one of them), if it may have one.
pub(super) fn claim<'a>(
    local: &LocalFs,
    dirs: impl IntoIterator<Item = Option<&'a Arc<Dir>>>,
    cwd: Option<&Dir>,
) -> Option<InlineSlot> {
    let slot = try_claim(local, dirs, cwd);
    LAST.with(|l| l.set(Some(slot.is_some())));
    slot
}

fn try_claim<'a>(
    local: &LocalFs,
    dirs: impl IntoIterator<Item = Option<&'a Arc<Dir>>>,
    cwd: Option<&Dir>,
) -> Option<InlineSlot> {
    let rt = tokio::runtime::Handle::try_current().ok()?;
    if rt.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
        return None;
    }
    let spare = rt.metrics().num_workers().saturating_sub(1);
    if spare == 0 || !special::inline_ok() {
        return None;
    }
    let id = rt.id();
    let mut running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
    let held = running
        .iter()
        .find(|(r, _)| *r == id)
        .map_or(0, |(_, n)| *n);
    if held >= spare || !local.only_local(dirs, cwd) {
        return None;
    }
    match running.iter_mut().find(|(r, _)| *r == id) {
        Some((_, n)) => *n += 1,
        None => running.push((id, 1)),
    }
    Some(InlineSlot(id))
}

/// Guards the preview-1 functions that reach the filesystem and that no
/// other shadow covers: each moves the call first ([`before_file_op`]), then
/// is wasmtime-wasi's own.
pub(super) fn add_to_linker(linker: &mut Linker<State>) -> wasmtime::Result<()> {
    macro_rules! guarded {
        ($func:ident ( $($arg:ident : $ty:ty),* )) => {
            linker.func_wrap_async(
                "wasi_snapshot_preview1",
                stringify!($func),
                |mut caller: Caller<'_, State>, ($($arg,)*): ($($ty,)*)| {
                    Box::new(async move {
                        before_file_op(&mut caller).await?;
                        call_p1!(caller, $func($($arg),*))
                    })
                },
            )?;
        };
    }
    guarded!(path_filestat_get(fd: i32, flags: i32, path: i32, len: i32, buf: i32));
    guarded!(path_readlink(fd: i32, path: i32, len: i32, buf: i32, buf_len: i32, used: i32));
    guarded!(fd_readdir(fd: i32, buf: i32, buf_len: i32, cookie: i64, used: i32));
    guarded!(fd_sync(fd: i32));
    guarded!(fd_datasync(fd: i32));
    guarded!(fd_advise(fd: i32, offset: i64, len: i64, advice: i32));
    Ok(())
}
