//! How a call ended, as an `Outcome`: exit codes, traps, limits hit
//! (`Hits`), instantiation failures and the wall-clock timeout.

use wasmtime::Trap;
use wasmtime_wasi::I32Exit;

use super::MAX_GUEST_HANDLES;
use crate::config::CpuMeter;
use crate::outcome::{Outcome, OutcomeKind};
use crate::plan::Limits;

/// An instantiation that failed (a link or pool error, not the guest's own
/// trap): reported as `launch_failed`.
#[derive(Debug)]
pub(super) struct InstantiateFailed(String);

impl std::fmt::Display for InstantiateFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot instantiate: {}", self.0)
    }
}

impl std::error::Error for InstantiateFailed {}

pub(super) fn instantiation(e: wasmtime::Error) -> wasmtime::Error {
    // A trap in a start function, or the limiter refusing the initial memory,
    // stays what it is.
    if e.downcast_ref::<Trap>().is_some() {
        return e;
    }
    wasmtime::Error::new(InstantiateFailed(first_line(&e)))
}

pub(super) fn first_line(e: &impl std::fmt::Display) -> String {
    e.to_string().lines().next().unwrap_or("").to_string()
}

pub(super) fn os_reason(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(c) => std::io::Error::from_raw_os_error(c).to_string(),
        None => e.kind().to_string(),
    }
}

#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Hits {
    pub(super) memory: bool,
    pub(super) cpu: bool,
    pub(super) files: bool,
}

pub(super) fn classify(
    limits: &Limits,
    meter: CpuMeter,
    result: wasmtime::Result<()>,
    hits: Hits,
) -> (Outcome, Option<i32>) {
    let mb = |b: Option<u64>| b.unwrap_or(0) >> 20;
    let code = match &result {
        Ok(()) => Some(0),
        Err(e) => e.downcast_ref::<I32Exit>().map(|x| x.0),
    };
    if hits.files {
        return (
            Outcome::new(
                OutcomeKind::FileSizeLimit,
                format!(
                    "file write refused: the call's {} MiB file-size budget is used up",
                    mb(limits.file_size_bytes)
                ),
            ),
            code,
        );
    }
    if let Some(c) = code {
        return (
            Outcome::new(OutcomeKind::Exited, format!("exited with code {c}")),
            Some(c),
        );
    }
    let Err(e) = result else {
        return (
            Outcome::new(OutcomeKind::Exited, "exited with code 0"),
            Some(0),
        );
    };
    let trap = e.downcast_ref::<Trap>().copied();
    if hits.memory {
        return (
            Outcome::new(
                OutcomeKind::MemoryLimit,
                format!(
                    "stopped: linear memory would exceed the {} MiB limit",
                    mb(limits.memory_bytes)
                ),
            ),
            None,
        );
    }
    if hits.cpu || trap == Some(Trap::OutOfFuel) {
        let how = match meter {
            CpuMeter::Epoch => "epoch deadline",
            CpuMeter::Fuel => "fuel",
        };
        return (
            Outcome::new(
                OutcomeKind::CpuLimit,
                format!(
                    "stopped: CPU limit of {} s reached ({how})",
                    limits.cpu_seconds.unwrap_or(0)
                ),
            ),
            None,
        );
    }
    if let Some(i) = e.downcast_ref::<InstantiateFailed>() {
        return (Outcome::new(OutcomeKind::LaunchFailed, i.to_string()), None);
    }
    let table_full = e.chain().any(|c| {
        matches!(
            c.downcast_ref::<wasmtime::component::ResourceTableError>(),
            Some(wasmtime::component::ResourceTableError::Full)
        )
    });
    let message = match trap {
        Some(t) => t.to_string(),
        None if table_full => format!(
            "stopped: the tool held more than {MAX_GUEST_HANDLES} handles at once (open files, directories, streams); the cap keeps toolhost's own file descriptors free"
        ),
        None => format!("wasm error: {}", first_line(&e.root_cause())),
    };
    (Outcome::new(OutcomeKind::Trapped, message), None)
}
