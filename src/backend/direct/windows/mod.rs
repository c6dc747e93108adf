//! Windows: every call runs in a Job Object of its own.
//!
//! The parts, in order:
//! - [`spawn`] (here): resolves the program, builds its command line and
//!   its environment block (`cmdline`), makes its three standard handles
//!   (`handles`), and creates it suspended, inheriting those three handles
//!   and no other (`PROC_THREAD_ATTRIBUTE_HANDLE_LIST`). It is put in a new
//!   job, and only then resumed, so every process it starts the ordinary
//!   way is in the job.
//! - `job`: the job and its limits. It is terminated at the timeout and at
//!   the end of every call, and it is `KILL_ON_JOB_CLOSE`, so that nothing the
//!   tool started outlives the call, however the call ends (the caller dropping
//!   the call's future closes the job).
//! - [`Child`] (here): what the shared code of `direct` waits on and reads from.
//! - [`Hardening`] (here): what a call reports, and `strict` refused.
//!
//! Limits, from the job, per process of the tool's tree: `max_memory_mb` as
//! committed memory (`JOB_OBJECT_LIMIT_PROCESS_MEMORY`), `max_cpu_seconds` as
//! user time (`JOB_OBJECT_LIMIT_PROCESS_TIME`), and `max_processes` as the
//! processes alive at once in the job (`JOB_OBJECT_LIMIT_ACTIVE_PROCESS`).
//! `max_file_size_mb` has no Windows mechanism and is not applied.
//!
//! What a job cannot do is confine the filesystem or the network, or
//! separate the tool from its user: the tool runs with toolhost's own token,
//! so it can open other processes of that user and start processes outside
//! the job through them (a spoofed parent, WMI, the task scheduler).
//! toolhost's process object is closed to it by a DACL
//! ([`close_own_process`]), but its threads and its token are not: a tool
//! can still get code run inside toolhost through a thread of it.
//! `toolhost check`, docs/src/windows.md and a warning logged once say so.
//!
//! Batch files (`.bat`, `.cmd`) are refused: Windows runs them through
//! `cmd.exe`, which parses the command line by other rules than the ones it is
//! quoted by here, so an argument could become a command.

use std::ffi::c_void;
use std::io;
use std::os::windows::io::{AsRawHandle, FromRawHandle, OwnedHandle};
use std::os::windows::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use tokio::process::Command;
use windows_sys::Win32::Foundation::{HANDLE, WAIT_OBJECT_0};
use windows_sys::Win32::System::JobObjects::AssignProcessToJobObject;
use windows_sys::Win32::System::Threading::{
    CREATE_NO_WINDOW, CREATE_SUSPENDED, CREATE_UNICODE_ENVIRONMENT, EXTENDED_STARTUPINFO_PRESENT,
    GetExitCodeProcess, INFINITE, PROCESS_INFORMATION, ResumeThread, STARTF_USESTDHANDLES,
    STARTUPINFOEXW, TerminateProcess, WaitForSingleObject,
};

use super::{Finished, LimitHit, Termination};
use crate::isolation::{IsolationLevel, IsolationReport, Layer};
use crate::outcome::{Outcome, OutcomeKind};
use crate::plan::ExecPlan;
use cmdline::{command_line, env_block, plain, refuse_batch, resolve, tool_env, wide_nul};
use handles::{HandleList, async_file, close_own_process, inheritable, nul, pipe};
pub(super) use job::Control;
use job::Job;

mod cmdline;
mod handles;
mod job;

/// The exit code the tool's processes get when toolhost ends them.
const KILLED_EXIT_CODE: u32 = 1;

/// How long the end of a call waits for the job's processes to be gone.
const EMPTY_WAIT: Duration = Duration::from_millis(500);

// ------------------------------------------------------------------ spawn

/// A running call. `control` is declared first so that it is dropped first:
/// if the caller drops the call's future, the job closes and kills the tree.
pub(super) struct Spawned {
    pub control: Control,
    pub child: Child,
}

/// Starts the plan's program in a new job. `_cmd` is not used: std's
/// `Command` passes every inheritable handle of this process to the child,
/// and cannot create it suspended in a job.
pub(super) fn spawn(_cmd: &mut Command, plan: &ExecPlan, _h: &Hardening) -> io::Result<Spawned> {
    let cwd = plan
        .cwd
        .as_ref()
        .ok_or_else(|| io::Error::other("no working directory"))?;
    let cwd = plain(&cwd.path);
    close_own_process();
    let program = resolve(&plan.argv[0], &cwd, &plan.env)?;
    // The path as Windows will take it (`..`, trailing dots and spaces gone),
    // checked and passed as one string.
    let program = std::path::absolute(&program)?;
    refuse_batch(&program)?;
    let mut command_line = command_line(&plan.argv)?;
    let env = env_block(&tool_env(&plan.env));
    let app = wide_nul(program.as_os_str())?;
    let dir = wide_nul(cwd.as_os_str())?;

    // The tool's ends of its standard handles, made inheritable; ours are not.
    let (stdin_theirs, stdin_ours) = if plan.stdin.is_some() {
        let (read, write) = pipe()?;
        (read, Some(write))
    } else {
        (nul()?, None)
    };
    let (stdout_ours, stdout_theirs) = pipe()?;
    let (stderr_ours, stderr_theirs) = pipe()?;
    for h in [&stdin_theirs, &stdout_theirs, &stderr_theirs] {
        inheritable(h)?;
    }
    let handles: [HANDLE; 3] = [
        stdin_theirs.as_raw_handle(),
        stdout_theirs.as_raw_handle(),
        stderr_theirs.as_raw_handle(),
    ];
    let attributes = HandleList::new(&handles)?;
    let job = Job::new(&plan.limits)?;

    let mut startup = STARTUPINFOEXW::default();
    startup.StartupInfo.cb = std::mem::size_of::<STARTUPINFOEXW>() as u32;
    startup.StartupInfo.dwFlags = STARTF_USESTDHANDLES;
    startup.StartupInfo.hStdInput = handles[0];
    startup.StartupInfo.hStdOutput = handles[1];
    startup.StartupInfo.hStdError = handles[2];
    startup.lpAttributeList = attributes.as_ptr();
    let mut info = PROCESS_INFORMATION::default();
    let flags = CREATE_SUSPENDED
        | CREATE_UNICODE_ENVIRONMENT
        | EXTENDED_STARTUPINFO_PRESENT
        | CREATE_NO_WINDOW;
    // SAFETY: every pointer is to a NUL-terminated UTF-16 buffer or a struct
    // that lives until the call returns (the STARTUPINFOEXW whole: with
    // EXTENDED_STARTUPINFO_PRESENT Windows reads its attribute list too); `command_line` is mutable as
    // CreateProcessW requires; the attribute list names three open handles
    // (`handles`, kept alive by the OwnedHandles above). Inheritance is on but
    // restricted to that list.
    let ok = unsafe {
        windows_sys::Win32::System::Threading::CreateProcessW(
            app.as_ptr(),
            command_line.as_mut_ptr(),
            std::ptr::null(),
            std::ptr::null(),
            1,
            flags,
            env.as_ptr().cast::<c_void>(),
            dir.as_ptr(),
            (&raw const startup).cast::<windows_sys::Win32::System::Threading::STARTUPINFOW>(),
            &mut info,
        )
    };
    if ok == 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: CreateProcessW succeeded: both handles are open and ours.
    let (process, thread) = unsafe {
        (
            OwnedHandle::from_raw_handle(info.hProcess),
            OwnedHandle::from_raw_handle(info.hThread),
        )
    };
    // SAFETY: two open handles: the job and the suspended process.
    if unsafe { AssignProcessToJobObject(job.handle.as_raw_handle(), process.as_raw_handle()) } == 0
    {
        let e = io::Error::last_os_error();
        // SAFETY: the process handle is open; it has not run a single instruction.
        unsafe { TerminateProcess(process.as_raw_handle(), KILLED_EXIT_CODE) };
        return Err(e);
    }
    // SAFETY: the handle of the process's main thread, created suspended.
    if unsafe { ResumeThread(thread.as_raw_handle()) } == u32::MAX {
        let e = io::Error::last_os_error();
        job.terminate();
        return Err(e);
    }
    drop(thread);
    // The tool has its copies: closing ours lets its output end when it does.
    drop((stdin_theirs, stdout_theirs, stderr_theirs));
    Ok(Spawned {
        control: Control {
            job,
            pid: info.dwProcessId,
            finished: false,
        },
        child: Child {
            stdin: stdin_ours.map(async_file),
            stdout: Some(async_file(stdout_ours)),
            stderr: Some(async_file(stderr_ours)),
            process: Arc::new(process),
            waiter: None,
            status: None,
        },
    })
}

// ------------------------------------------------------------------ the child

/// The tool's main process and toolhost's ends of its standard handles.
pub(super) struct Child {
    pub stdin: Option<tokio::fs::File>,
    pub stdout: Option<tokio::fs::File>,
    pub stderr: Option<tokio::fs::File>,
    process: Arc<OwnedHandle>,
    /// The thread waiting for the process to end; kept across cancelled
    /// `wait`s, so that waiting again does not start another.
    waiter: Option<tokio::task::JoinHandle<io::Result<ExitStatus>>>,
    status: Option<ExitStatus>,
}

impl Child {
    /// Waits for the tool's main process to end (cancel-safe).
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        if let Some(s) = self.status {
            return Ok(s);
        }
        let process = Arc::clone(&self.process);
        let waiter = self
            .waiter
            .get_or_insert_with(|| tokio::task::spawn_blocking(move || wait_exit(&process)));
        let r = waiter.await.map_err(io::Error::other);
        self.waiter = None;
        let s = r??;
        self.status = Some(s);
        Ok(s)
    }

    /// Ends the tool's main process.
    pub fn start_kill(&mut self) -> io::Result<()> {
        // SAFETY: an open process handle (kept until `self` drops).
        if unsafe { TerminateProcess(self.process.as_raw_handle(), KILLED_EXIT_CODE) } == 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

fn wait_exit(process: &OwnedHandle) -> io::Result<ExitStatus> {
    // SAFETY: an open process handle, kept alive by the caller's Arc.
    if unsafe { WaitForSingleObject(process.as_raw_handle(), INFINITE) } != WAIT_OBJECT_0 {
        return Err(io::Error::last_os_error());
    }
    let mut code = 0u32;
    // SAFETY: an open process handle that has ended; an out-pointer to a local.
    if unsafe { GetExitCodeProcess(process.as_raw_handle(), &mut code) } == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(ExitStatus::from_raw(code))
}

// ------------------------------------------------------------------ hardening

/// What a call on Windows reports: the job always; no layer confines the
/// filesystem or the network, so `strict` refuses to run.
pub(super) struct Hardening {
    level: IsolationLevel,
}

/// Nothing here holds a path by mounts (`_held`): only the sweep covers
/// the protected paths.
pub(super) fn harden(
    plan: &ExecPlan,
    _spares: &super::Spares,
    _held: Vec<crate::backend::protect::Held>,
) -> Result<Hardening, Outcome> {
    if plan.isolation == IsolationLevel::Strict {
        return Err(Outcome::new(
            OutcomeKind::IsolationUnavailable,
            "isolation = \"strict\" needs Linux (Landlock, seccomp); on Windows a Job Object holds the process tree and its limits, but nothing confines its filesystem or network; the call did not run",
        ));
    }
    Ok(Hardening {
        level: plan.isolation,
    })
}

impl Hardening {
    pub fn report(&self, f: &Finished) -> Option<IsolationReport> {
        let wanted = match self.level {
            IsolationLevel::Off => Layer::JobObject.bit(),
            _ => Layer::JobObject.bit() | Layer::LandlockFs.bit() | Layer::Seccomp.bit(),
        };
        Some(IsolationReport::new(self.level, f.layers, wanted))
    }

    pub fn failure(&self, _layer: u32, _errno: i32) -> Outcome {
        Outcome::new(OutcomeKind::IsolationUnavailable, "isolation failed")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;
    use std::path::{Path, PathBuf};

    fn line(args: &[&str]) -> String {
        let argv: Vec<OsString> = args.iter().map(OsString::from).collect();
        let w = command_line(&argv).expect("command line");
        String::from_utf16(&w[..w.len() - 1]).expect("utf-16")
    }

    #[test]
    fn arguments_are_quoted_by_the_c_runtime_rules() {
        assert_eq!(line(&["p"]), r#""p""#);
        assert_eq!(line(&["p", "a b", ""]), r#""p" "a b" """#);
        assert_eq!(line(&["p", r#"say "hi""#]), r#""p" "say \"hi\"""#);
        assert_eq!(line(&["p", r"a\b\"]), r#""p" a\b\"#);
        assert_eq!(line(&["p", r"a b\"]), r#""p" "a b\\""#);
        assert_eq!(line(&["p", r#"a\"b"#]), r#""p" a\\\"b"#);
        let argv = vec![OsString::from("p\"q")];
        assert!(command_line(&argv).is_err());
    }

    #[test]
    fn the_environment_block_is_sorted_and_ends_in_two_nuls() {
        let env = vec![
            (OsString::from("b"), OsString::from("2")),
            (OsString::from("A"), OsString::from("1")),
        ];
        let w = env_block(&env);
        assert_eq!(String::from_utf16(&w).expect("utf-16"), "A=1\0b=2\0\0");
        assert_eq!(env_block(&[]), vec![0, 0]);
    }

    #[test]
    fn verbatim_paths_are_made_plain_where_that_names_the_same_place() {
        assert_eq!(plain(Path::new(r"\\?\C:\w\x")), PathBuf::from(r"C:\w\x"));
        assert_eq!(
            plain(Path::new(r"\\?\UNC\s\h\x")),
            PathBuf::from(r"\\s\h\x")
        );
        // A trailing dot is a different name only in the verbatim form.
        assert_eq!(
            plain(Path::new(r"\\?\C:\w.\x")),
            PathBuf::from(r"\\?\C:\w.\x")
        );
    }

    #[test]
    fn batch_files_are_refused_however_they_are_spelled() {
        for p in [
            r"C:\x\a.bat",
            r"C:\x\A.CMD",
            r"C:\x\a.bat. ",
            r"C:\x\a.Cmd.",
        ] {
            assert!(refuse_batch(Path::new(p)).is_err(), "{p}");
        }
        assert!(refuse_batch(Path::new(r"C:\x\a.exe")).is_ok());
    }
}
