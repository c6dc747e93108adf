//! Windows (run under Wine by `scripts/test`): the wasm backend's contract
//! cases in Windows spellings, the file tools against NTFS's own ways of
//! naming one file, the compile cache's trust rules, and `direct` in a Job
//! Object: the tree killed at the timeout, the job's limits, the handles and
//! the environment a tool gets, and `auto`.
//!
//! Native helpers are this test binary itself, started with
//! `TOOLHOST_WIN_HELPER` set (see [`helper`]): Windows has no `sh`.
//!
//! Where Wine lacks what real Windows has, the test says so in its output and
//! asserts Wine's behaviour, so that a change either way is seen; the book
//! (docs/src/platforms.md) names each gap.

use std::io::Read as _;
use std::os::windows::io::{AsRawHandle, FromRawHandle};
use std::path::{Path, PathBuf};
use std::time::Duration;

use toolhost::tools::toolbox::Toolbox;
use toolhost::{
    AllowedDirSpec, BackendChoice, BackendKind, OutcomeKind, RunOutput, RunRequest, Sandbox,
    SandboxConfig,
};

use crate::util::*;
use crate::wasm::{setup, wasm_config};

mod direct;
mod file_tools;
mod wasm;

#[allow(unused_imports)]
pub(crate) use direct::*;
#[allow(unused_imports)]
pub(crate) use file_tools::*;
#[allow(unused_imports)]
pub(crate) use wasm::*;

/// Whether this runs under Wine, which puts its own variables in every
/// process's environment.
pub(super) fn under_wine() -> bool {
    std::env::var_os("WINECONFIGDIR").is_some() || std::env::var_os("WINELOADER").is_some()
}

// ------------------------------------------------------------------ helpers

/// The helper process: what it does is in `TOOLHOST_WIN_HELPER`. Not a test
/// of its own: the tests below start it (`helper_argv`).
#[test]
#[ignore = "the helper process of the windows tests, started by them"]
fn helper() {
    let Ok(what) = std::env::var("TOOLHOST_WIN_HELPER") else {
        return;
    };
    let mut words = what.split_whitespace();
    let verb = words.next().unwrap_or("");
    let num = |w: Option<&str>| w.and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
    match verb {
        // Starts a child that sleeps, says both pids, sleeps. The child is
        // never waited for: the job ends it with the call.
        #[allow(clippy::zombie_processes)]
        "tree" => {
            let child = std::process::Command::new(std::env::current_exe().unwrap())
                .args(helper_args())
                .env("TOOLHOST_WIN_HELPER", "sleep")
                .spawn()
                .unwrap();
            println!("PID {}", std::process::id());
            println!("PID {}", child.id());
            std::thread::sleep(Duration::from_secs(120));
        }
        "sleep" => std::thread::sleep(Duration::from_secs(120)),
        // Commits and touches N MiB.
        "hog" => {
            let n = num(words.next()) as usize;
            let mut v: Vec<Vec<u8>> = Vec::new();
            for _ in 0..n {
                v.push(vec![1u8; 1 << 20]);
            }
            println!("ALLOCATED {}", v.len());
        }
        "spin" => {
            let mut x = 0u64;
            loop {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        }
        // Starts N sleeping children; says how many started.
        "spawn" => {
            let n = num(words.next());
            let mut started = 0;
            for _ in 0..n {
                if let Ok(child) = std::process::Command::new(std::env::current_exe().unwrap())
                    .args(helper_args())
                    .env("TOOLHOST_WIN_HELPER", "sleep")
                    .spawn()
                {
                    println!("PID {}", child.id());
                    started += 1;
                }
            }
            println!("STARTED {started}");
        }
        // Reads through a handle value it did not open.
        "handle" => {
            let h = num(words.next()) as usize;
            // SAFETY: the point of the test: a value this process was not
            // meant to hold. ManuallyDrop: it is never closed here.
            let mut f = std::mem::ManuallyDrop::new(unsafe {
                std::fs::File::from_raw_handle(h as *mut std::ffi::c_void)
            });
            let mut s = String::new();
            match f.read_to_string(&mut s) {
                Ok(_) => println!("READ {s}"),
                Err(e) => println!("DENIED {e}"),
            }
        }
        "env" => {
            for (k, v) in std::env::vars_os() {
                println!("ENV {}={}", k.to_string_lossy(), v.to_string_lossy());
            }
        }
        // Opens a process for reading its memory and taking its handles.
        "open" => {
            use windows_sys::Win32::System::Threading::{
                OpenProcess, PROCESS_DUP_HANDLE, PROCESS_VM_READ,
            };
            let pid = match words.next() {
                Some("self") => std::process::id(),
                w => num(w) as u32,
            };
            // SAFETY: OpenProcess with a pid; the handle is leaked (the
            // process ends at once).
            let h = unsafe { OpenProcess(PROCESS_VM_READ | PROCESS_DUP_HANDLE, 0, pid) };
            println!("OPENED {}", !h.is_null());
        }
        "stdin" => {
            let mut buf = Vec::new();
            let n = std::io::stdin()
                .read_to_end(&mut buf)
                .map_or(-1, |n| n as i64);
            println!("STDIN {n}");
        }
        other => panic!("unknown helper verb {other:?}"),
    }
}

pub(super) fn helper_args() -> [&'static str; 5] {
    [
        "windows::helper",
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]
}

/// A direct call of the helper doing `what`.
pub(super) fn helper_request(what: &str) -> RunRequest {
    let exe = std::env::current_exe().unwrap();
    let mut argv = vec![exe.to_string_lossy().into_owned()];
    argv.extend(helper_args().iter().map(|s| s.to_string()));
    RunRequest::new(argv)
        .env("TOOLHOST_WIN_HELPER", what)
        .backend(BackendKind::Direct)
}

/// The values of the helper's `KEY value` lines (libtest may print its
/// `test ... ` before them on the same line).
pub(super) fn said<'a>(out: &'a str, key: &str) -> Vec<&'a str> {
    let marker = format!("{key} ");
    out.lines()
        .filter_map(|l| {
            let at = if l.starts_with(&marker) {
                0
            } else {
                l.find(&format!(" ... {marker}"))? + 5
            };
            Some(&l[at + marker.len()..])
        })
        .collect()
}

/// Whether process `pid` still runs.
pub(super) fn running(pid: u32) -> bool {
    use windows_sys::Win32::Foundation::{CloseHandle, WAIT_TIMEOUT};
    use windows_sys::Win32::System::Threading::{
        OpenProcess, PROCESS_QUERY_LIMITED_INFORMATION, PROCESS_SYNCHRONIZE, WaitForSingleObject,
    };
    // SAFETY: OpenProcess with a pid; the handle is checked and closed.
    let h = unsafe {
        OpenProcess(
            PROCESS_SYNCHRONIZE | PROCESS_QUERY_LIMITED_INFORMATION,
            0,
            pid,
        )
    };
    if h.is_null() {
        return false;
    }
    // SAFETY: an open process handle, closed right after.
    let alive = unsafe { WaitForSingleObject(h, 0) } == WAIT_TIMEOUT;
    // SAFETY: as above.
    unsafe { CloseHandle(h) };
    alive
}

pub(super) fn running_within(pids: &[u32], within: Duration) -> Vec<u32> {
    let until = std::time::Instant::now() + within;
    loop {
        let left: Vec<u32> = pids.iter().copied().filter(|p| running(*p)).collect();
        if left.is_empty() || std::time::Instant::now() > until {
            return left;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub(super) fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}
