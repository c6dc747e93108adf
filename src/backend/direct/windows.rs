//! Windows: every call runs in a Job Object of its own.
//!
//! The parts of this file, in order:
//! - [`spawn`]: resolves the program, builds its command line and its
//!   environment block, makes its three standard handles, and creates it
//!   suspended, inheriting those three handles and no other
//!   (`PROC_THREAD_ATTRIBUTE_HANDLE_LIST`). It is put in a new job, and only
//!   then resumed, so every process it starts the ordinary way is in the job.
//! - [`Job`]: the job and its limits. It is terminated at the timeout and at
//!   the end of every call, and it is `KILL_ON_JOB_CLOSE`, so that nothing the
//!   tool started outlives the call, however the call ends (the caller dropping
//!   the call's future closes the job).
//! - [`Child`]: what the shared code of `direct` waits on and reads from.
//! - [`Hardening`]: what a call reports, and `strict` refused.
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

use std::ffi::{OsStr, OsString, c_void};
use std::io;
use std::os::windows::ffi::OsStrExt;
use std::os::windows::io::{AsRawHandle, FromRawHandle, OwnedHandle};
use std::os::windows::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::process::Command;
use windows_sys::Win32::Foundation::{
    GENERIC_READ, HANDLE, HANDLE_FLAG_INHERIT, INVALID_HANDLE_VALUE, SetHandleInformation,
    WAIT_OBJECT_0,
};
use windows_sys::Win32::Security::SECURITY_ATTRIBUTES;
use windows_sys::Win32::Storage::FileSystem::{
    CreateFileW, FILE_SHARE_READ, FILE_SHARE_WRITE, OPEN_EXISTING,
};
use windows_sys::Win32::System::IO::{
    CreateIoCompletionPort, GetQueuedCompletionStatus, OVERLAPPED,
};
use windows_sys::Win32::System::JobObjects::{
    AssignProcessToJobObject, CreateJobObjectW, JOB_OBJECT_LIMIT_ACTIVE_PROCESS,
    JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION, JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
    JOB_OBJECT_LIMIT_PROCESS_MEMORY, JOB_OBJECT_LIMIT_PROCESS_TIME,
    JOBOBJECT_ASSOCIATE_COMPLETION_PORT, JOBOBJECT_BASIC_ACCOUNTING_INFORMATION,
    JOBOBJECT_EXTENDED_LIMIT_INFORMATION, JobObjectAssociateCompletionPortInformation,
    JobObjectBasicAccountingInformation, JobObjectExtendedLimitInformation,
    QueryInformationJobObject, SetInformationJobObject, TerminateJobObject,
};
use windows_sys::Win32::System::Pipes::CreatePipe;
use windows_sys::Win32::System::SystemServices::{
    JOB_OBJECT_MSG_END_OF_PROCESS_TIME, JOB_OBJECT_MSG_PROCESS_MEMORY_LIMIT,
};
use windows_sys::Win32::System::Threading::{
    CREATE_NO_WINDOW, CREATE_SUSPENDED, CREATE_UNICODE_ENVIRONMENT, DeleteProcThreadAttributeList,
    EXTENDED_STARTUPINFO_PRESENT, GetExitCodeProcess, INFINITE, InitializeProcThreadAttributeList,
    PROC_THREAD_ATTRIBUTE_HANDLE_LIST, PROCESS_INFORMATION, ResumeThread, STARTF_USESTDHANDLES,
    STARTUPINFOEXW, TerminateProcess, UpdateProcThreadAttribute, WaitForSingleObject,
};

use super::{Finished, LimitHit, Termination};
use crate::isolation::{IsolationLevel, IsolationReport, Layer};
use crate::outcome::{Outcome, OutcomeKind};
use crate::plan::{ExecPlan, Limits};

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

/// The program to run: a path (anything with a separator or a drive) taken
/// from the working directory, or a bare name looked up on the tool's `PATH`
/// (absolute entries only; the working directory is not searched, unlike
/// `cmd.exe`). A name without `.exe` or `.com` is tried with `.exe` first.
fn resolve(program: &OsStr, cwd: &Path, env: &[(OsString, OsString)]) -> io::Result<PathBuf> {
    let text = program.to_string_lossy();
    let lower = text.to_ascii_lowercase();
    let names = |base: PathBuf| -> Vec<PathBuf> {
        if lower.ends_with(".exe") || lower.ends_with(".com") {
            vec![base]
        } else {
            let mut exe = base.clone().into_os_string();
            exe.push(".exe");
            vec![PathBuf::from(exe), base]
        }
    };
    let is_file = |p: &PathBuf| std::fs::metadata(p).is_ok_and(|m| m.is_file());
    let path_like = text.contains(['\\', '/']) || Path::new(program).has_root() || {
        let b = text.as_bytes();
        b.len() >= 2 && b[1] == b':'
    };
    if path_like {
        return names(cwd.join(program))
            .into_iter()
            .find(is_file)
            .ok_or_else(|| io::ErrorKind::NotFound.into());
    }
    let path = env
        .iter()
        .find(|(k, _)| k.to_str().is_some_and(|k| k.eq_ignore_ascii_case("PATH")))
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    std::env::split_paths(&path)
        .filter(|d| d.is_absolute())
        .flat_map(|d| names(d.join(program)))
        .find(is_file)
        .ok_or_else(|| io::ErrorKind::NotFound.into())
}

/// Refuses `.bat` and `.cmd` files (see the module's notes), and programs
/// named through an NTFS stream (`x::$DATA`) or without a file name.
/// `program` is absolute and normalized.
fn refuse_batch(program: &Path) -> io::Result<()> {
    let Some(name) = program.file_name() else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the program's path names no file",
        ));
    };
    let name = name
        .to_string_lossy()
        .trim_end_matches(['.', ' '])
        .to_ascii_lowercase();
    if name.contains(':') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the program is named through an NTFS stream",
        ));
    }
    if name.ends_with(".bat") || name.ends_with(".cmd") {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a batch file runs through cmd.exe, which parses its arguments by other rules: run `cmd.exe /c ...` explicitly if the policy allows it",
        ));
    }
    Ok(())
}

/// `argv` as one command line, quoted by the rules of the Microsoft C
/// runtime (and `CommandLineToArgvW`): an argument with a space, a tab or
/// nothing in it is quoted; a quote is escaped with a backslash, and
/// backslashes before a quote are doubled. The program is always quoted and
/// may not contain a quote.
fn command_line(argv: &[OsString]) -> io::Result<Vec<u16>> {
    let mut out: Vec<u16> = Vec::new();
    for (i, arg) in argv.iter().enumerate() {
        if i > 0 {
            out.push(u16::from(b' '));
        }
        let wide: Vec<u16> = arg.encode_wide().collect();
        if wide.contains(&0) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "an argument contains NUL",
            ));
        }
        if i == 0 {
            if wide.contains(&u16::from(b'"')) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "the program's name contains a quote",
                ));
            }
            out.push(u16::from(b'"'));
            out.extend_from_slice(&wide);
            out.push(u16::from(b'"'));
            continue;
        }
        let quote = wide.is_empty()
            || wide
                .iter()
                .any(|&c| c == u16::from(b' ') || c == u16::from(b'\t'));
        if quote {
            out.push(u16::from(b'"'));
        }
        let mut backslashes = 0usize;
        for &c in &wide {
            if c == u16::from(b'\\') {
                backslashes += 1;
            } else {
                if c == u16::from(b'"') {
                    // n backslashes before a quote become 2n + 1.
                    out.extend(std::iter::repeat_n(u16::from(b'\\'), backslashes + 1));
                }
                backslashes = 0;
            }
            out.push(c);
        }
        if quote {
            // n backslashes before the closing quote become 2n.
            out.extend(std::iter::repeat_n(u16::from(b'\\'), backslashes));
            out.push(u16::from(b'"'));
        }
    }
    out.push(0);
    Ok(out)
}

/// The plan's environment, with `NoDefaultCurrentDirectoryInExePath` set:
/// a program the tool starts by a bare name is then not looked for in the
/// working directory first (which the tool can write) by `CreateProcess`
/// and `cmd.exe`.
fn tool_env(env: &[(OsString, OsString)]) -> Vec<(OsString, OsString)> {
    const NAME: &str = "NoDefaultCurrentDirectoryInExePath";
    let mut out: Vec<(OsString, OsString)> = env
        .iter()
        .filter(|(k, _)| !k.to_str().is_some_and(|k| k.eq_ignore_ascii_case(NAME)))
        .cloned()
        .collect();
    out.push((NAME.into(), "1".into()));
    out
}

/// The plan's environment as a Unicode environment block: `NAME=value`
/// entries sorted by upper-cased name, as Windows wants them, each ended by
/// NUL, and one more NUL. An empty environment is two NULs.
fn env_block(env: &[(OsString, OsString)]) -> Vec<u16> {
    let mut vars: Vec<&(OsString, OsString)> = env.iter().collect();
    vars.sort_by_key(|(k, _)| k.to_string_lossy().to_uppercase());
    let mut out: Vec<u16> = Vec::new();
    for (k, v) in vars {
        out.extend(k.encode_wide());
        out.push(u16::from(b'='));
        out.extend(v.encode_wide());
        out.push(0);
    }
    if out.is_empty() {
        out.push(0);
    }
    out.push(0);
    out
}

/// `s` as a NUL-terminated UTF-16 string.
fn wide_nul(s: &OsStr) -> io::Result<Vec<u16>> {
    let mut w: Vec<u16> = s.encode_wide().collect();
    if w.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a path contains NUL",
        ));
    }
    w.push(0);
    Ok(w)
}

/// `p` without its verbatim prefix where a plain path names the same place
/// (`\\?\C:\x` as `C:\x`, `\\?\UNC\s\h\x` as `\\s\h\x`): programs given a
/// verbatim working directory often fail.
fn plain(p: &Path) -> PathBuf {
    let s = p.to_string_lossy();
    let short_enough = s.len() < 250;
    let clean = !s.split('\\').skip(1).any(|c| c.ends_with(['.', ' ']));
    if short_enough && clean {
        if let Some(rest) = s.strip_prefix(r"\\?\UNC\") {
            return PathBuf::from(format!(r"\\{rest}"));
        }
        if let Some(rest) = s.strip_prefix(r"\\?\")
            && rest.as_bytes().get(1) == Some(&b':')
        {
            return PathBuf::from(rest);
        }
    }
    p.to_path_buf()
}

/// An anonymous pipe: (read end, write end), neither inheritable.
fn pipe() -> io::Result<(OwnedHandle, OwnedHandle)> {
    let mut read: HANDLE = std::ptr::null_mut();
    let mut write: HANDLE = std::ptr::null_mut();
    // SAFETY: out-pointers to two locals; no security attributes (not
    // inheritable); the default buffer size.
    if unsafe { CreatePipe(&mut read, &mut write, std::ptr::null(), 0) } == 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: CreatePipe succeeded: both handles are open and ours.
    Ok(unsafe {
        (
            OwnedHandle::from_raw_handle(read),
            OwnedHandle::from_raw_handle(write),
        )
    })
}

/// The NUL device, for reading: the stdin of a call without input.
fn nul() -> io::Result<OwnedHandle> {
    let name = wide_nul(OsStr::new("NUL"))?;
    let sa = SECURITY_ATTRIBUTES {
        nLength: std::mem::size_of::<SECURITY_ATTRIBUTES>() as u32,
        lpSecurityDescriptor: std::ptr::null_mut(),
        bInheritHandle: 0,
    };
    // SAFETY: a NUL-terminated name; attributes that live through the call.
    let h = unsafe {
        CreateFileW(
            name.as_ptr(),
            GENERIC_READ,
            FILE_SHARE_READ | FILE_SHARE_WRITE,
            &sa,
            OPEN_EXISTING,
            0,
            std::ptr::null_mut(),
        )
    };
    if h == INVALID_HANDLE_VALUE {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: CreateFileW succeeded: the handle is open and ours.
    Ok(unsafe { OwnedHandle::from_raw_handle(h) })
}

/// Marks `h` inheritable: the handle list still decides what is inherited.
fn inheritable(h: &OwnedHandle) -> io::Result<()> {
    // SAFETY: an open handle we own.
    if unsafe { SetHandleInformation(h.as_raw_handle(), HANDLE_FLAG_INHERIT, HANDLE_FLAG_INHERIT) }
        == 0
    {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn async_file(h: OwnedHandle) -> tokio::fs::File {
    tokio::fs::File::from_std(std::fs::File::from(h))
}

/// A process-thread attribute list with one attribute: the handles a new
/// process inherits. It borrows the handle array it names.
struct HandleList<'a> {
    /// The list's storage; `list` points into it (from `as_mut_ptr`, as
    /// Windows writes through it).
    _buf: Vec<usize>,
    list: *mut c_void,
    _handles: &'a [HANDLE],
}

impl<'a> HandleList<'a> {
    fn new(handles: &'a [HANDLE]) -> io::Result<Self> {
        let mut size = 0usize;
        // SAFETY: the documented size query: a null list, one attribute. It
        // fails with ERROR_INSUFFICIENT_BUFFER and sets `size`.
        unsafe { InitializeProcThreadAttributeList(std::ptr::null_mut(), 1, 0, &mut size) };
        if size == 0 {
            return Err(io::Error::last_os_error());
        }
        // usize-aligned storage of at least `size` bytes.
        let mut buf = vec![0usize; size.div_ceil(std::mem::size_of::<usize>())];
        let list = buf.as_mut_ptr().cast::<c_void>();
        // SAFETY: `list` points to `size` writable bytes, aligned for the list.
        if unsafe { InitializeProcThreadAttributeList(list, 1, 0, &mut size) } == 0 {
            return Err(io::Error::last_os_error());
        }
        let this = HandleList {
            _buf: buf,
            list,
            _handles: handles,
        };
        // SAFETY: an initialised list with room for one attribute; the value
        // is the handle array, which `this` borrows for as long as it lives.
        let ok = unsafe {
            UpdateProcThreadAttribute(
                list,
                0,
                PROC_THREAD_ATTRIBUTE_HANDLE_LIST as usize,
                handles.as_ptr().cast::<c_void>(),
                std::mem::size_of_val(handles),
                std::ptr::null_mut(),
                std::ptr::null(),
            )
        };
        if ok == 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(this)
    }

    fn as_ptr(&self) -> *mut c_void {
        self.list
    }
}

impl Drop for HandleList<'_> {
    fn drop(&mut self) {
        // SAFETY: the list was initialised in `new` (a failed init never
        // builds a HandleList) and is deleted once.
        unsafe { DeleteProcThreadAttributeList(self.as_ptr()) };
    }
}

/// Closes toolhost's process object to the tools it starts, once per
/// process: they run as the same user, and the owner of a process may by
/// default read and write its memory and duplicate its handles (to read the
/// host's secrets out of its environment, or write to its stdout: the MCP
/// channel). The new DACL grants only synchronize, terminate and limited
/// queries, to the owner too (an `OWNER RIGHTS` entry replaces the owner's
/// implicit right to change the DACL back), and to SYSTEM.
///
/// A hurdle, not a boundary: toolhost's threads keep the default DACL of
/// its token, so a tool can open one and get code run in toolhost (an APC,
/// a changed context); a token with `SeDebugPrivilege` bypasses DACLs
/// altogether. Closing that needs tools started with a restricted token
/// (issue 18, open). The Linux counterpart is toolhost being non-dumpable
/// and the tool's Landlock domain.
fn close_own_process() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if let Err(e) = set_own_dacl() {
            tracing::warn!(
                backend = "direct",
                "could not close toolhost's process to its tools ({e}): a tool can read toolhost's memory"
            );
        }
    });
}

fn set_own_dacl() -> io::Result<()> {
    use windows_sys::Win32::Foundation::LocalFree;
    use windows_sys::Win32::Security::Authorization::{
        ConvertStringSecurityDescriptorToSecurityDescriptorW, SDDL_REVISION_1,
    };
    use windows_sys::Win32::Security::{
        DACL_SECURITY_INFORMATION, PSECURITY_DESCRIPTOR, SetKernelObjectSecurity,
    };
    use windows_sys::Win32::System::Threading::GetCurrentProcess;
    // Protected DACL: SYNCHRONIZE (0x100000) | PROCESS_QUERY_LIMITED_INFORMATION
    // (0x1000) | PROCESS_TERMINATE (0x1: the user can still stop toolhost) for
    // OWNER RIGHTS and for SYSTEM; nothing for anyone else.
    let sddl = wide_nul(OsStr::new("D:P(A;;0x101001;;;OW)(A;;0x101001;;;SY)"))?;
    let mut sd: PSECURITY_DESCRIPTOR = std::ptr::null_mut();
    // SAFETY: a NUL-terminated SDDL string; `sd` receives a LocalAlloc'd
    // descriptor, freed below.
    let ok = unsafe {
        ConvertStringSecurityDescriptorToSecurityDescriptorW(
            sddl.as_ptr(),
            SDDL_REVISION_1,
            &mut sd,
            std::ptr::null_mut(),
        )
    };
    if ok == 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the pseudo handle of this process (full access); a valid
    // self-relative descriptor holding a DACL.
    let set =
        unsafe { SetKernelObjectSecurity(GetCurrentProcess(), DACL_SECURITY_INFORMATION, sd) };
    let e = io::Error::last_os_error();
    // SAFETY: allocated by the conversion above; freed once.
    unsafe { LocalFree(sd.cast()) };
    if set == 0 {
        return Err(e);
    }
    Ok(())
}

// ------------------------------------------------------------------ the job

/// A job object and the completion port its notifications arrive on.
struct Job {
    handle: OwnedHandle,
    port: Option<OwnedHandle>,
}

impl Job {
    /// A new job that kills its processes when closed, lets none break away,
    /// ends a process on an unhandled exception (no error dialog holding it),
    /// and holds `limits`.
    fn new(limits: &Limits) -> io::Result<Job> {
        // SAFETY: no attributes and no name: a new anonymous job.
        let raw = unsafe { CreateJobObjectW(std::ptr::null(), std::ptr::null()) };
        if raw.is_null() {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: CreateJobObjectW succeeded: the handle is open and ours.
        let handle = unsafe { OwnedHandle::from_raw_handle(raw) };
        let mut info = JOBOBJECT_EXTENDED_LIMIT_INFORMATION {
            BasicLimitInformation: Default::default(),
            IoInfo: Default::default(),
            ProcessMemoryLimit: 0,
            JobMemoryLimit: 0,
            PeakProcessMemoryUsed: 0,
            PeakJobMemoryUsed: 0,
        };
        let basic = &mut info.BasicLimitInformation;
        basic.LimitFlags =
            JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE | JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION;
        if let Some(bytes) = limits.memory_bytes {
            basic.LimitFlags |= JOB_OBJECT_LIMIT_PROCESS_MEMORY;
            info.ProcessMemoryLimit = usize::try_from(bytes).unwrap_or(usize::MAX);
        }
        let basic = &mut info.BasicLimitInformation;
        if let Some(secs) = limits.cpu_seconds {
            basic.LimitFlags |= JOB_OBJECT_LIMIT_PROCESS_TIME;
            // In units of 100 ns.
            basic.PerProcessUserTimeLimit = i64::try_from(secs)
                .ok()
                .and_then(|s| s.checked_mul(10_000_000))
                .unwrap_or(i64::MAX);
        }
        if let Some(n) = limits.processes {
            basic.LimitFlags |= JOB_OBJECT_LIMIT_ACTIVE_PROCESS;
            basic.ActiveProcessLimit = u32::try_from(n).unwrap_or(u32::MAX);
        }
        // SAFETY: an open job; the struct and its size match the class.
        let ok = unsafe {
            SetInformationJobObject(
                handle.as_raw_handle(),
                JobObjectExtendedLimitInformation,
                (&raw const info).cast::<c_void>(),
                std::mem::size_of_val(&info) as u32,
            )
        };
        if ok == 0 {
            return Err(io::Error::last_os_error());
        }
        let port = Self::notifications(&handle);
        Ok(Job { handle, port })
    }

    /// A completion port for the job's notifications (which limit was hit).
    /// Without one, outcomes fall back on the tool's output and times.
    fn notifications(job: &OwnedHandle) -> Option<OwnedHandle> {
        // SAFETY: a new port, not tied to a file; one concurrent thread.
        let raw =
            unsafe { CreateIoCompletionPort(INVALID_HANDLE_VALUE, std::ptr::null_mut(), 0, 1) };
        if raw.is_null() {
            return None;
        }
        // SAFETY: CreateIoCompletionPort succeeded: the handle is ours.
        let port = unsafe { OwnedHandle::from_raw_handle(raw) };
        let assoc = JOBOBJECT_ASSOCIATE_COMPLETION_PORT {
            CompletionKey: std::ptr::null_mut(),
            CompletionPort: port.as_raw_handle(),
        };
        // SAFETY: an open job and port; the struct and its size match the class.
        let ok = unsafe {
            SetInformationJobObject(
                job.as_raw_handle(),
                JobObjectAssociateCompletionPortInformation,
                (&raw const assoc).cast::<c_void>(),
                std::mem::size_of_val(&assoc) as u32,
            )
        };
        (ok != 0).then_some(port)
    }

    /// The notifications queued so far: (message id, process id).
    fn messages(&self) -> Vec<(u32, usize)> {
        let Some(port) = &self.port else {
            return Vec::new();
        };
        let mut out = Vec::new();
        while out.len() < 4096 {
            let mut id = 0u32;
            let mut key = 0usize;
            let mut overlapped: *mut OVERLAPPED = std::ptr::null_mut();
            // SAFETY: out-pointers to locals; a zero timeout. For a job's
            // port `overlapped` carries a process id and is never dereferenced.
            let ok = unsafe {
                GetQueuedCompletionStatus(
                    port.as_raw_handle(),
                    &mut id,
                    &mut key,
                    &mut overlapped,
                    0,
                )
            };
            if ok == 0 {
                break;
            }
            out.push((id, overlapped as usize));
        }
        out
    }

    /// Ends every process in the job.
    fn terminate(&self) {
        // SAFETY: an open job handle.
        unsafe { TerminateJobObject(self.handle.as_raw_handle(), KILLED_EXIT_CODE) };
    }

    fn accounting(&self) -> Option<JOBOBJECT_BASIC_ACCOUNTING_INFORMATION> {
        let mut info = JOBOBJECT_BASIC_ACCOUNTING_INFORMATION::default();
        // SAFETY: an open job; the struct and its size match the class.
        let ok = unsafe {
            QueryInformationJobObject(
                self.handle.as_raw_handle(),
                JobObjectBasicAccountingInformation,
                (&raw mut info).cast::<c_void>(),
                std::mem::size_of_val(&info) as u32,
                std::ptr::null_mut(),
            )
        };
        (ok != 0).then_some(info)
    }

    /// How many processes are in the job now.
    fn active(&self) -> u32 {
        self.accounting().map_or(0, |a| a.ActiveProcesses)
    }
}

/// The call's job, ended with the call.
pub(super) struct Control {
    job: Job,
    /// The tool's main process: the limits it hit decide the outcome.
    pid: u32,
    finished: bool,
}

impl Control {
    pub fn kill_tree(&mut self, _child: &mut Child) {
        self.job.terminate();
    }

    /// Ends whatever the tool left running, and waits (up to
    /// [`EMPTY_WAIT`], on the runtime's timer: no thread is held) until no
    /// process is left in the job.
    pub async fn settle(&mut self) {
        self.job.terminate();
        let until = Instant::now() + EMPTY_WAIT;
        while self.job.active() > 0 && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The call's result; after [`settle`](Self::settle), which emptied
    /// the job (what is left is counted as survivors).
    pub fn finish(&mut self, status: Option<ExitStatus>) -> Finished {
        self.finished = true;
        let messages = self.job.messages();
        self.job.terminate();
        let survivors = self.job.active();
        let cpu_time = self.job.accounting().map(|a| {
            let ticks = a.TotalUserTime.saturating_add(a.TotalKernelTime).max(0) as u64;
            Duration::from_nanos(ticks.saturating_mul(100))
        });
        let main_hit = |msg: u32| messages.contains(&(msg, self.pid as usize));
        let limit_hit = if main_hit(JOB_OBJECT_MSG_END_OF_PROCESS_TIME) {
            Some(LimitHit::Cpu)
        } else if main_hit(JOB_OBJECT_MSG_PROCESS_MEMORY_LIMIT) {
            Some(LimitHit::Memory)
        } else {
            None
        };
        Finished {
            termination: match status.and_then(|s| s.code()) {
                Some(c) => Termination::Exited(c),
                None => Termination::Unknown,
            },
            cpu_time,
            survivors,
            layers: Layer::JobObject.bit(),
            limit_hit,
        }
    }
}

impl Drop for Control {
    fn drop(&mut self) {
        if !self.finished {
            // Closing the job kills its processes too (KILL_ON_JOB_CLOSE);
            // terminating first does not wait for the last handle to close.
            self.job.terminate();
        }
    }
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

pub(super) fn harden(plan: &ExecPlan) -> Result<Hardening, Outcome> {
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
