//! What holds a guest to its limits inside its store: memory and table
//! growth (`Limiter`), the bytes it may still write to files (`FileBudget`),
//! and the per-call state every kind of guest carries (`Common`).

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};

use wasmtime::ResourceLimiter;

use super::{MAX_TABLE_ELEMENTS, protect};

/// Per-call state every kind of guest has: limits and what hit them.
pub(crate) struct Common {
    pub(super) limiter: Limiter,
    pub(super) files: Arc<FileBudget>,
    pub(super) cpu_ticks_left: Option<u64>,
    pub(super) cpu_hit: bool,
    /// The call's protected paths (`protect`).
    pub(crate) guard: protect::Guard,
    /// Set (and taken) at the call's first file operation when it holds an
    /// inline slot: the call then moves to a task of its own
    /// (`inline_io::before_file_op`).
    pub(super) move_to_task: Option<Arc<std::sync::atomic::AtomicBool>>,
    /// Set when the caller of a call that moved to its own task is done
    /// with it (timed out or dropped): each file operation after it traps
    /// (`inline_io::still_wanted`) rather than run until the task's next
    /// yield.
    pub(super) ended: Option<Arc<std::sync::atomic::AtomicBool>>,
    /// Keeps the epoch ticker going while the store that holds this lives:
    /// its guest is interrupted at each tick, for its CPU limit and its
    /// timeout (`epoch`). Taken with the state, so no store runs without.
    pub(super) _ticking: super::epoch::Running,
}

/// Store data that carries the [`Common`] state.
pub(crate) trait HasCommon: Send + 'static {
    fn common(&mut self) -> &mut Common;
}

/// A store's memories, tables and instances, held to the call's limits
/// whichever allocator made them: `max_memory` is for all of its linear
/// memories together, and the counts and sizes are the pooling
/// allocator's (`engine::engine_config`), so that a store of an engine
/// without the pool (`pool_size = 0`, or the baseline tier's) gets no more.
pub(super) struct Limiter {
    pub(super) max_memory: Option<usize>,
    pub(super) hit: bool,
    /// Bytes of linear memory granted so far (memories never shrink).
    pub(super) memory_bytes: usize,
}

impl Limiter {
    pub(super) fn new(max_memory: Option<usize>) -> Self {
        Limiter {
            max_memory,
            hit: false,
            memory_bytes: 0,
        }
    }
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // Past the memory's own maximum the growth fails anyway (wasmtime
        // asks the limiter first): refused here, it is not counted.
        if maximum.is_some_and(|m| desired > m) {
            return Ok(false);
        }
        let total = self
            .memory_bytes
            .saturating_add(desired.saturating_sub(current));
        match self.max_memory {
            Some(max) if total > max => {
                self.hit = true;
                Err(wasmtime::format_err!(
                    "memory limit: growing linear memory to {desired} bytes ({total} in all) exceeds {max}"
                ))
            }
            _ => {
                self.memory_bytes = total;
                Ok(true)
            }
        }
    }

    fn memory_grow_failed(&mut self, _error: wasmtime::Error) -> wasmtime::Result<()> {
        // Not grown after all (the host could not map it). What was counted
        // stays counted: wasmtime also calls this without asking first, so
        // it cannot say what to take back. Judged early, never late.
        Ok(())
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }

    fn instances(&self) -> usize {
        super::MAX_CORE_INSTANCES_PER_COMPONENT as usize
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES
    }

    fn tables(&self) -> usize {
        MAX_TABLES
    }
}

/// Linear memories a store may hold (a component's, as the pool allows).
pub(super) const MAX_MEMORIES: usize = 2;
/// Tables a store may hold (a component's, as the pool allows).
pub(super) const MAX_TABLES: usize = 4;

/// Bytes a call may still write to files (`max_file_size_mb`). Shared with the
/// budgeted file streams of preview-2 guests.
pub(crate) struct FileBudget {
    pub(super) limit: Option<u64>,
    pub(super) written: AtomicU64,
    pub(super) hit: AtomicBool,
}

impl FileBudget {
    pub(super) fn new(limit: Option<u64>) -> Self {
        FileBudget {
            limit,
            written: AtomicU64::new(0),
            hit: AtomicBool::new(false),
        }
    }

    /// Whether `bytes` more may be written; records the hit when not.
    pub(crate) fn admit(&self, bytes: u64) -> bool {
        match self.limit {
            Some(limit) if self.written.load(Relaxed).saturating_add(bytes) > limit => {
                self.hit.store(true, Relaxed);
                false
            }
            _ => true,
        }
    }

    /// Whether `len` bytes may be written at offset `start` of a file: the
    /// call's total stays within the budget and no file grows past it.
    pub(crate) fn admit_write(&self, start: u64, len: u64) -> bool {
        match self.limit {
            Some(limit) if start.saturating_add(len) > limit => {
                self.hit.store(true, Relaxed);
                false
            }
            _ => self.admit(len),
        }
    }

    /// Whether a file may be resized to `size` bytes, growing it by `growth`
    /// (which counts against the total, as written bytes do).
    pub(crate) fn admit_resize(&self, size: u64, growth: u64) -> bool {
        match self.limit {
            Some(limit) if size > limit => {
                self.hit.store(true, Relaxed);
                false
            }
            _ => self.admit(growth),
        }
    }

    /// Counts `bytes` written.
    pub(crate) fn add(&self, bytes: u64) {
        self.written.fetch_add(bytes, Relaxed);
    }

    /// Checks and counts `len` bytes at offset `start` in one step, so that
    /// writes in flight at once (preview 3's concurrent streams and calls)
    /// cannot all pass against the same total; [`refund`](Self::refund) what
    /// was not written. Records the hit when refused.
    pub(crate) fn reserve_write(&self, start: u64, len: u64) -> bool {
        if !self.fits_file(start, len) {
            return false;
        }
        self.reserve(len)
    }

    /// [`reserve_write`](Self::reserve_write) for a resize to `size` that
    /// grows a file by `growth`.
    pub(crate) fn reserve_resize(&self, size: u64, growth: u64) -> bool {
        if !self.fits_file(0, size) {
            return false;
        }
        self.reserve(growth)
    }

    /// Whether a file may reach `start + len` bytes (no file grows past the
    /// limit); records the hit when not.
    pub(crate) fn fits_file(&self, start: u64, len: u64) -> bool {
        match self.limit {
            Some(limit) if start.saturating_add(len) > limit => {
                self.hit.store(true, Relaxed);
                false
            }
            _ => true,
        }
    }

    pub(super) fn reserve(&self, bytes: u64) -> bool {
        let Some(limit) = self.limit else {
            self.written.fetch_add(bytes, Relaxed);
            return true;
        };
        let r = self.written.fetch_update(Relaxed, Relaxed, |w| {
            w.checked_add(bytes).filter(|total| *total <= limit)
        });
        if r.is_err() {
            self.hit.store(true, Relaxed);
        }
        r.is_ok()
    }

    /// Gives back `bytes` reserved and not written.
    pub(crate) fn refund(&self, bytes: u64) {
        let _ = self
            .written
            .fetch_update(Relaxed, Relaxed, |w| Some(w.saturating_sub(bytes)));
    }

    pub(super) fn hit(&self) -> bool {
        self.hit.load(Relaxed)
    }
}
