//! Which calls run their file operations without a round trip per operation.
//!
//! By default wasmtime-wasi sends each file operation of a guest to tokio's
//! blocking pool: a round trip between threads (tens of microseconds here)
//! per open, read, write or stat, several per opened file. A preview-1 call
//! that is [`claim`]ed runs them on the thread polling it instead
//! (`allow_blocking_current_thread`), and that thread is never a runtime
//! worker: the call starts in its caller's task, and before its first
//! function that can reach the host's filesystem ([`before_fd_op`],
//! [`before_file_op`]) it moves, whole, to a thread of its own (a runner,
//! `runner`, bound to the caller's CPU while the call is short: `execute`),
//! where it runs to its end. An operation that waits (a lease another
//! process holds, a FUSE or NFS server that stopped answering, a frozen
//! device, a FIFO swapped in) then holds that one runner, as it would hold a
//! pool thread under wasmtime-wasi's own hand-off; no worker, no timer and
//! not the caller, which gets its `timed_out` on time. The call is then
//! dropped at its next yield, and its next file operation traps
//! ([`still_wanted`]). A call that touches no file never moves.
//!
//! Before the move a call has only stdio (fds 0 to 2, in memory) and its
//! preopened dirs (3 and up): a path only an open (guarded) can reach, and
//! a preopen only an fd of 3 or more (or a renumber, guarded) names. So
//! every function that names a path, an fd of 3 or more, or renumbers,
//! moves first. Left as they are: the functions wasmtime-wasi keeps
//! synchronous (`fd_prestat_get`, `fd_prestat_dir_name`, `fd_tell`,
//! `fd_allocate`, `fd_fdstat_set_flags`, `fd_fdstat_set_rights`), which
//! read or set the guest's table only, and `poll_oneoff`, which before the
//! move can subscribe only to stdio streams and timers (a sleep stays a
//! timer, `sleep_p1`).
//!
//! What waits keeps more than wasmtime-wasi's hand-off would: the whole
//! call, its store and its pool slot, until the operation returns, also
//! after its caller gave up. So at most a quarter of an engine's pool runs
//! inline at once ([`InlineSlot`], held from the claim to the call's end
//! wherever it runs); other calls use the hand-off per operation, where
//! what waits holds a pool thread and no store. A claim also needs a
//! multi-thread runtime and the FIFO watchdog running after its self-test
//! (`special::inline_ok`, Linux). Otherwise (the CLI's single-thread
//! runtime, components, typed tools) each operation goes to the pool, as
//! before.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use wasmtime::{Caller, Linker};

use super::limits::HasCommon;
use super::p1::{State, call_p1};
use super::special;

thread_local! {
    /// Whether the last call prepared on this thread was claimed
    /// (`last_call_file_io_inline`).
    pub(super) static LAST: std::cell::Cell<Option<bool>> = const { std::cell::Cell::new(None) };
}

/// Called first by every preview-1 function that can reach the host's
/// filesystem by a path (the shadows in `p1`, `guard_p1` and here): at the
/// first, a claimed call asks to move to a runner (`runner`) and yields
/// once; `execute` then moves it, and the operation runs there.
///
/// Traps instead once the caller is done with the call ([`still_wanted`]).
pub(super) async fn before_file_op<T: HasCommon>(
    caller: &mut wasmtime::Caller<'_, T>,
) -> wasmtime::Result<()> {
    still_wanted(caller)?;
    if let Some(flag) = caller.data_mut().common().move_to_task.take() {
        flag.store(true, Ordering::Release);
        tokio::task::yield_now().await;
        // The caller may have given up while the call moved.
        still_wanted(caller)?;
    }
    Ok(())
}

/// Called first by every preview-1 function that acts on a descriptor: as
/// [`before_file_op`], unless `fd` is 0, 1 or 2, which until the move are
/// stdio (or closed): in memory, never the host's filesystem.
pub(super) async fn before_fd_op<T: HasCommon>(
    caller: &mut wasmtime::Caller<'_, T>,
    fd: i32,
) -> wasmtime::Result<()> {
    if (0..3).contains(&fd) {
        return still_wanted(caller);
    }
    before_file_op(caller).await
}

/// A trap once the caller of a call that moved has stopped waiting for it
/// (its timeout fired, or it was dropped). The call is then dropped at its
/// next yield; host functions that do not yield (an inline write, an open)
/// would otherwise go on changing files until then. Checked by
/// [`before_file_op`] and [`before_fd_op`].
pub(super) fn still_wanted<T: HasCommon>(
    caller: &mut wasmtime::Caller<'_, T>,
) -> wasmtime::Result<()> {
    match &caller.data_mut().common().ended {
        Some(e) if e.load(Ordering::Acquire) => Err(wasmtime::format_err!(
            "the call's caller stopped waiting for it (timed out or cancelled)"
        )),
        _ => Ok(()),
    }
}

/// A slot for a preview-1 call prepared now to run its file operations
/// inline (see the module doc), if it may have one: `calls` are those of
/// its engine that hold one, `max` how many may. Whether it got one is
/// remembered for `last_call_file_io_inline`.
pub(super) fn claim(calls: &Arc<AtomicUsize>, max: usize) -> Option<InlineSlot> {
    let slot = (tokio::runtime::Handle::try_current()
        .is_ok_and(|rt| rt.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
        && special::inline_ok())
    .then(|| {
        let slot = InlineSlot(calls.clone());
        // Counted first (the slot uncounts itself when dropped), so that
        // claims at once never pass `max` together.
        (calls.fetch_add(1, Ordering::AcqRel) < max).then_some(slot)
    })
    .flatten();
    LAST.with(|l| l.set(Some(slot.is_some())));
    slot
}

/// Guards the preview-1 functions that reach the filesystem and that no
/// other shadow covers: each moves the call first ([`before_file_op`] for a
/// path, [`before_fd_op`] for a descriptor), then is wasmtime-wasi's own.
/// Added before the other shadows, so that one of theirs (which moves the
/// call itself) wins over one here.
pub(super) fn add_to_linker(linker: &mut Linker<State>) -> wasmtime::Result<()> {
    macro_rules! guarded {
        ($func:ident ( $($arg:ident : $ty:ty),* ), $before:expr) => {
            linker.func_wrap_async(
                "wasi_snapshot_preview1",
                stringify!($func),
                |mut caller: Caller<'_, State>, ($($arg,)*): ($($ty,)*)| {
                    Box::new(async move {
                        let before: Before = $before;
                        match before {
                            Before::Path => before_file_op(&mut caller).await?,
                            Before::Fd(fd) => before_fd_op(&mut caller, fd).await?,
                        }
                        call_p1!(caller, $func($($arg),*))
                    })
                },
            )?;
        };
    }
    use Before::{Fd, Path};
    guarded!(path_filestat_get(fd: i32, flags: i32, path: i32, len: i32, buf: i32), Path);
    guarded!(path_readlink(fd: i32, path: i32, len: i32, buf: i32, buf_len: i32, used: i32), Path);
    // A renumber can put a preopen on 0, 1 or 2.
    guarded!(fd_renumber(fd: i32, to: i32), Path);
    guarded!(fd_readdir(fd: i32, buf: i32, buf_len: i32, cookie: i64, used: i32), Fd(fd));
    guarded!(fd_sync(fd: i32), Fd(fd));
    guarded!(fd_datasync(fd: i32), Fd(fd));
    guarded!(fd_advise(fd: i32, offset: i64, len: i64, advice: i32), Fd(fd));
    guarded!(fd_close(fd: i32), Fd(fd));
    guarded!(fd_fdstat_get(fd: i32, buf: i32), Fd(fd));
    guarded!(fd_filestat_get(fd: i32, buf: i32), Fd(fd));
    guarded!(fd_pread(fd: i32, iovs: i32, n: i32, offset: i64, read: i32), Fd(fd));
    guarded!(fd_read(fd: i32, iovs: i32, n: i32, read: i32), Fd(fd));
    guarded!(fd_seek(fd: i32, offset: i64, whence: i32, new: i32), Fd(fd));
    Ok(())
}

/// What a guarded function names: a path (it moves always) or a descriptor.
enum Before {
    Path,
    Fd(i32),
}

/// A claim to run a call's file operations inline: counted from the claim
/// until the call has ended (it moves with the call, and is dropped after
/// its store, on the call's thread if it moved).
#[derive(Debug)]
pub(super) struct InlineSlot(Arc<AtomicUsize>);

impl Drop for InlineSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}
