//! What `wasm` can enforce on this host: the engine, the WASI versions it
//! runs, the special-file watchdog and the compile cache (the rows of
//! `toolhost check` for `wasm`).

use std::path::Path;

use crate::config::WasmConfig;
use crate::plan::Limits;
use crate::probe::{Probe, Status};

use super::WasmBackend;

impl WasmBackend {
    /// The rows of `toolhost check` for this backend under `limits`.
    pub(super) async fn probe_host(&self, limits: &Limits) -> Probe {
        let mut p = Probe::default();
        p.push(
            "wasm",
            "engine",
            Status::Ok,
            format!(
                "wasmtime 48, CPU meter {:?}, memory limit {} MiB, no sockets (none can be created, no name lookup)",
                self.engine.meter,
                limits.memory_bytes.map_or(0, |b| b >> 20)
            ),
        );
        p.push(
            "wasm",
            "wasi versions",
            Status::Ok,
            "p1 command modules (wasi_snapshot_preview1); p2 command components (wasi:cli/run@0.2) and typed tools (toolhost:tool); p3 command components (wasi:cli/run@0.3.0 on component-model-async; wasmtime-wasi marks its p3 experimental)",
        );
        p.checks.extend(host_rows(self.cache_dir.as_deref()).checks);
        p
    }
}

/// The rows that need no engine: the special-file watchdog and the compile
/// cache at `cache_dir` (`None`: the cache is off).
fn host_rows(cache_dir: Option<&Path>) -> Probe {
    let mut p = Probe::default();
    if super::fifo_watchdog_available() {
        p.push(
            "wasm",
            "special files",
            Status::Ok,
            "a guest holds only files and directories (paths checked before and after opening); an open that waits on a FIFO swapped in is ended (SIGURG watchdog, self-tested)",
        );
    } else {
        p.push(
            "wasm",
            "special files",
            Status::Partial,
            "paths are checked before they are opened; a FIFO swapped in after the check can hold a thread until a partner appears (the watchdog needs Linux, SIGURG at its default, a private dir for its self-test and /proc showing a thread waiting on a FIFO)",
        );
    }
    match cache_dir {
        None => p.push(
            "wasm",
            "compile cache",
            Status::Missing,
            "off: every process compiles its tools again",
        ),
        Some(d) => {
            let probe = d.join(format!(".toolhost-check-{}", std::process::id()));
            let w = std::fs::create_dir_all(d).and_then(|()| std::fs::write(&probe, b"x"));
            let _ = std::fs::remove_file(&probe);
            match w {
                Ok(()) => p.push(
                    "wasm",
                    "compile cache",
                    Status::Ok,
                    format!("{} (writable)", d.display()),
                ),
                Err(e) => p.push(
                    "wasm",
                    "compile cache",
                    Status::Error,
                    format!(
                        "{}: {e} (tools are compiled in memory instead)",
                        d.display()
                    ),
                ),
            }
        }
    }
    p
}

/// The rows of `toolhost check` for `wasm` when its engine cannot be built:
/// what is known without one.
pub fn probe_without_engine(config: &WasmConfig) -> Probe {
    host_rows(super::engine::configured_cache_dir(config).as_deref())
}
