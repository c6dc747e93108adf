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
//!   a write stream is consumed here (`writes::BudgetedWrite`), each chunk admitted
//!   against the call's budget before it reaches the file; a resize is
//!   admitted as in preview 2.
//! - **Special files** (`open-at`, `set-times-at`): the path is checked
//!   before the call, the call is watched, and what `open-at` returns must be
//!   a file or a directory (`special`).
//! - **Protected paths** (`open-at` for writing, `set-times-at`,
//!   `create-directory-at`, `remove-directory-at`, `unlink-file-at`,
//!   `symlink-at`, `rename-at`, `link-at`): through a fresh handle on the
//!   parent (`guard_path`, `changes::P3Fs`); a directory a guest opens inside a
//!   protected dir is made read-only, and `set-times` through a file opened
//!   for reading is refused (`protect`).
//!
//! Each shadow checks, then calls wasmtime-wasi's own implementation. The
//! parts: `writes` (the file budget), `opens` (opens and set-times),
//! `changes` (changes by path); this file registers them.

use wasmtime::component::{Accessor, Linker, Resource};
use wasmtime_wasi::filesystem::{
    Descriptor, WasiFilesystem, WasiFilesystemCtxView, WasiFilesystemView,
};
use wasmtime_wasi::p3::bindings::filesystem::types::ErrorCode;

use super::component::CState;
use changes::add_changes;
use opens::add_opens;
use writes::add_writes;

mod changes;
mod opens;
mod writes;

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
