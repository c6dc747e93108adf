//! Which calls run their file operations on the thread that polls them.
//!
//! By default wasmtime-wasi sends each file operation of a guest to tokio's
//! blocking pool: a round trip between threads (tens of microseconds here)
//! per open, read, write or stat, several per opened file. A call that
//! claims an [`InlineSlot`] runs them on its own thread instead
//! (`allow_blocking_current_thread`), as a task of its own (`execute`),
//! while the caller keeps the call's timeout on another worker: an operation
//! that waits (a lease held by another process, a directory of a million
//! entries, a frozen filesystem) then holds that task's worker, not the
//! caller, which gets its `timed_out` on time; the task is aborted at its
//! next yield.
//!
//! A call claims a slot only when all of these hold:
//! - it runs on a multi-thread runtime, and fewer calls of that runtime hold
//!   a slot than it has workers less one (one worker always stays free for
//!   timers, timeouts and every other task);
//! - the FIFO watchdog's thread runs, so an open of a FIFO swapped in after
//!   the check is ended whichever thread it blocks (`special::inline_ok`);
//! - every filesystem its dirs reach ends each operation by itself
//!   (`local_fs`: not procfs, FUSE, NFS, ...).
//!
//! Otherwise (the CLI's single-thread runtime among others) each operation
//! goes to the pool, as before.

use std::path::Path;
use std::sync::Mutex;

use tokio::runtime::Id;

use super::local_fs::LocalFs;
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

/// A slot for a call whose allowed dirs are `dirs`, if it may have one.
pub(super) fn claim<'a>(
    local: &LocalFs,
    dirs: impl IntoIterator<Item = &'a Path>,
) -> Option<InlineSlot> {
    let slot = try_claim(local, dirs);
    LAST.with(|l| l.set(Some(slot.is_some())));
    slot
}

fn try_claim<'a>(local: &LocalFs, dirs: impl IntoIterator<Item = &'a Path>) -> Option<InlineSlot> {
    let rt = tokio::runtime::Handle::try_current().ok()?;
    if rt.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
        return None;
    }
    let spare = rt.metrics().num_workers().saturating_sub(1);
    if spare == 0 || !special::inline_ok() || !local.only_local(dirs) {
        return None;
    }
    let id = rt.id();
    let mut running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
    match running.iter_mut().find(|(r, _)| *r == id) {
        Some((_, n)) if *n >= spare => return None,
        Some((_, n)) => *n += 1,
        None => running.push((id, 1)),
    }
    Some(InlineSlot(id))
}
