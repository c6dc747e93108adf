//! The call's Job Object: its limits, its completion port (which says when
//! a limit was hit and when the job is empty), and `Control`, which ends
//! the job with the call however it ends.

use std::ffi::c_void;
use std::io;
use std::os::windows::io::{AsRawHandle, FromRawHandle, OwnedHandle};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use windows_sys::Win32::Foundation::INVALID_HANDLE_VALUE;
use windows_sys::Win32::System::IO::{
    CreateIoCompletionPort, GetQueuedCompletionStatus, OVERLAPPED,
};
use windows_sys::Win32::System::JobObjects::{
    CreateJobObjectW, JOB_OBJECT_LIMIT_ACTIVE_PROCESS, JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION,
    JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE, JOB_OBJECT_LIMIT_PROCESS_MEMORY,
    JOB_OBJECT_LIMIT_PROCESS_TIME, JOBOBJECT_ASSOCIATE_COMPLETION_PORT,
    JOBOBJECT_BASIC_ACCOUNTING_INFORMATION, JOBOBJECT_EXTENDED_LIMIT_INFORMATION,
    JobObjectAssociateCompletionPortInformation, JobObjectBasicAccountingInformation,
    JobObjectExtendedLimitInformation, QueryInformationJobObject, SetInformationJobObject,
    TerminateJobObject,
};
use windows_sys::Win32::System::SystemServices::{
    JOB_OBJECT_MSG_END_OF_PROCESS_TIME, JOB_OBJECT_MSG_PROCESS_MEMORY_LIMIT,
};

use super::{Child, EMPTY_WAIT, KILLED_EXIT_CODE};
use super::{Finished, LimitHit, Termination};
use crate::isolation::Layer;
use crate::plan::Limits;

// ------------------------------------------------------------------ the job

/// A job object and the completion port its notifications arrive on.
pub(super) struct Job {
    pub(super) handle: OwnedHandle,
    pub(super) port: Option<OwnedHandle>,
}

impl Job {
    /// A new job that kills its processes when closed, lets none break away,
    /// ends a process on an unhandled exception (no error dialog holding it),
    /// and holds `limits`.
    pub(super) fn new(limits: &Limits) -> io::Result<Job> {
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
    pub(super) fn notifications(job: &OwnedHandle) -> Option<OwnedHandle> {
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
    pub(super) fn messages(&self) -> Vec<(u32, usize)> {
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
    pub(super) fn terminate(&self) {
        // SAFETY: an open job handle.
        unsafe { TerminateJobObject(self.handle.as_raw_handle(), KILLED_EXIT_CODE) };
    }

    pub(super) fn accounting(&self) -> Option<JOBOBJECT_BASIC_ACCOUNTING_INFORMATION> {
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
    pub(super) fn active(&self) -> u32 {
        self.accounting().map_or(0, |a| a.ActiveProcesses)
    }
}

/// The call's job, ended with the call.
pub(in crate::backend::direct) struct Control {
    pub(super) job: Job,
    /// The tool's main process: the limits it hit decide the outcome.
    pub(super) pid: u32,
    pub(super) finished: bool,
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
