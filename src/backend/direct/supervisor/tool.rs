//! The tool process's side, between clone and exec: its limits, its
//! capabilities, its fds, its isolation, then the exec (PATH searched as
//! execvp does). Raw system calls only (`sys`).

// Code here runs in the supervisor, its init and the tool before exec,
// on a toolhost thread's state: nothing may panic (std's handler would run).
#![deny(
    clippy::indexing_slicing,
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used
)]

use std::ffi::CStr;
use std::sync::atomic::Ordering;

use libc::c_int;

use super::{CLOSE_RANGE_CLOEXEC, ExecArgs, Params, Shared};
use crate::backend::direct::harden::apply_in_tool;
use crate::backend::direct::sys;
use crate::isolation::Layer;

/// In the tool process, sharing the supervisor's memory: only system calls.
/// `Err((errno, Some(layer)))`: a required isolation layer failed.
///
/// # Safety
/// Only in the tool process, between clone and exec (see the module doc):
/// raw system calls only, with no allocation and no locks.
pub(super) unsafe fn prepare_tool(p: &Params, sh: &Shared) -> Result<(), (c_int, Option<Layer>)> {
    // SAFETY: runs in the tool process, which shares the supervisor's memory
    // until exec (see `# Safety`): only system calls on plain values and on
    // the fds and pointers in `p`, which outlive the call.
    unsafe {
        // First: should the supervisor (or the init) be gone, so are we.
        let parent = sys::getppid();
        let _ = sys::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as usize);
        if sys::getppid() != parent {
            sys::exit(127);
        }
        let _ = sys::setpgid(0, 0);
        // The supervisor and the init share toolhost's memory, and the
        // kernel's OOM killer kills every process sharing the memory of the
        // one it picks: the tool's tree is always picked first (raising the
        // score needs no privilege; lowering it again needs
        // CAP_SYS_RESOURCE, dropped from root tools). Through the `/proc`
        // of toolhost's mount namespace where the call has a read-only view.
        let proc_dir = sh.proc_dir.load(Ordering::SeqCst);
        let (dir, path) = if proc_dir >= 0 {
            (proc_dir, c"self/oom_score_adj")
        } else {
            (libc::AT_FDCWD, c"/proc/self/oom_score_adj")
        };
        if let Ok(fd) = sys::openat(dir, path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) {
            let _ = sys::write(fd as c_int, b"1000");
            let _ = sys::close(fd as c_int);
        }
        // The cwd toolhost opened, or the one the supervisor opened in the
        // call's mount namespace (`supervisor_main`).
        sys::fchdir(sh.cwd_fd.load(Ordering::SeqCst)).map_err(|e| (e, None))?;
        for l in p.limits.iter().flatten() {
            set_limit(l.resource, l.value).map_err(|e| (e, None))?;
        }
        // Core dumps would write tool memory into the workspace.
        set_limit(libc::RLIMIT_CORE as c_int, 0).map_err(|e| (e, None))?;
        // No real-time scheduling and no raised priority: without
        // CAP_SYS_NICE (dropped from root tools when isolation is on) these
        // are what the kernel allows, and at 0 a tool can only lower its
        // priority (nice 10 works, nice -20 and SCHED_FIFO do not).
        set_limit(libc::RLIMIT_RTPRIO as c_int, 0).map_err(|e| (e, None))?;
        set_limit(libc::RLIMIT_NICE as c_int, 0).map_err(|e| (e, None))?;
        cloexec_from(3);
        // Nothing inherited or ambient survives exec, whoever we are.
        clear_inheritable_caps();
        let _ = sys::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as usize,
        );
        let applied = apply_in_tool(&p.harden)?;
        sh.tool_layers.store(applied, Ordering::SeqCst);
        // Rust ignores SIGPIPE in toolhost, and an ignored signal stays
        // ignored across exec: the tool gets the default, as std's spawn
        // gives it. Then every signal unblocked.
        let _ = sys::set_disposition(libc::SIGPIPE, libc::SIG_DFL);
        let _ = sys::sigprocmask(libc::SIG_SETMASK, &0);
        Ok(())
    }
}

/// Clears the inheritable capability set (capset, v3 header).
///
/// # Safety
/// Only in the tool process, between clone and exec: raw system calls only.
pub(super) unsafe fn clear_inheritable_caps() {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const V3: u32 = 0x2008_0522;
    let mut h = Header {
        version: V3,
        pid: 0,
    };
    let mut d = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: capget/capset on this thread with `h` and `d` laid out as the
    // kernel's v3 header and two data structs (`#[repr(C)]`), both live
    // through the calls.
    unsafe {
        if sys::call(
            libc::SYS_capget,
            [
                &mut h as *mut Header as usize,
                d.as_mut_ptr() as usize,
                0,
                0,
                0,
                0,
            ],
        )
        .is_err()
        {
            return;
        }
        if d[0].inheritable == 0 && d[1].inheritable == 0 {
            return;
        }
        d[0].inheritable = 0;
        d[1].inheritable = 0;
        let _ = sys::call(
            libc::SYS_capset,
            [
                &mut h as *mut Header as usize,
                d.as_ptr() as usize,
                0,
                0,
                0,
                0,
            ],
        );
    }
}

/// execve, searching PATH like execvp when the program has no slash. Returns
/// only on failure, with the errno execvp would give.
///
/// # Safety
/// Only in the tool process, between clone and exec: raw system calls only.
pub(super) unsafe fn exec_tool(e: &ExecArgs) -> c_int {
    // SAFETY: `e`'s pointer arrays are NULL-terminated and point into C
    // strings that `e` owns (built before the clone), so execve and the PATH
    // search read only valid memory.
    unsafe {
        let argv = e.argv_ptrs.as_ptr();
        let envp = e.envp_ptrs.as_ptr();
        let Some(path) = &e.search_path else {
            return sys::execve(e.program.as_ptr(), argv, envp)
                .err()
                .unwrap_or(libc::ENOEXEC);
        };
        let name = e.program.as_bytes();
        let mut buf = [0u8; 4096];
        let mut saw_eacces = false;
        for dir in path.as_bytes().split(|&b| b == b':') {
            // Relative entries (and empty ones, which mean ".") would search the
            // cwd, which the agent can write: never.
            if !dir.starts_with(b"/") {
                continue;
            }
            // dir, '/', name, NUL; too long for the buffer: skipped. No
            // indexing that could panic (a panic here would run std's
            // handler on a toolhost thread's state).
            let Some(full) = join_path(&mut buf, dir, name) else {
                continue;
            };
            match sys::execve(full.as_ptr(), argv, envp) {
                Err(libc::EACCES) => saw_eacces = true,
                Err(libc::ENOENT | libc::ENOTDIR | libc::ELOOP | libc::ENAMETOOLONG) => {}
                Err(e) => return e,
                Ok(_) => return libc::ENOEXEC,
            }
        }
        if saw_eacces {
            libc::EACCES
        } else {
            libc::ENOENT
        }
    }
}

/// `dir/name` with its NUL in `buf`, or `None` if it does not fit or holds a
/// NUL already.
fn join_path<'b>(buf: &'b mut [u8; 4096], dir: &[u8], name: &[u8]) -> Option<&'b CStr> {
    let mut at = 0usize;
    for part in [dir, b"/", name, b"\0"] {
        let end = at.checked_add(part.len())?;
        buf.get_mut(at..end)?.copy_from_slice(part);
        at = end;
    }
    CStr::from_bytes_with_nul(buf.get(..at)?).ok()
}

/// # Safety
/// Only in the tool process, between clone and exec: raw system calls only.
pub(super) unsafe fn set_limit(resource: c_int, value: u64) -> Result<(), c_int> {
    let mut cur = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: prlimit64 reads and writes rlimit structs on this stack frame.
    unsafe {
        sys::prlimit(resource, None, Some(&mut cur))?;
        let extra = if resource == libc::RLIMIT_CPU as c_int {
            1
        } else {
            0
        };
        let hard = (value as libc::rlim_t)
            .saturating_add(extra)
            .min(cur.rlim_max);
        let new = libc::rlimit {
            rlim_cur: (value as libc::rlim_t).min(hard),
            rlim_max: hard,
        };
        sys::prlimit(resource, Some(&new), None)?;
        Ok(())
    }
}

/// Marks every fd from `first` up close-on-exec, so the tool inherits only 0-2.
///
/// # Safety
/// Only in the call's processes before exec: raw system calls only.
pub(super) unsafe fn cloexec_from(first: c_int) {
    // SAFETY: close_range and fcntl take plain integers; setting close-on-exec
    // on an fd we do not own only affects this process's exec.
    unsafe {
        if sys::close_range(first as u32, u32::MAX, CLOSE_RANGE_CLOEXEC).is_ok() {
            return;
        }
        for fd in first..max_fd() {
            let _ = sys::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC as usize);
        }
    }
}

/// Closes the fds from `first` to `last`.
///
/// # Safety
/// Only in the call's processes before exec, on fds the caller is done with:
/// raw system calls only.
pub(super) unsafe fn close_from(first: c_int, last: c_int) {
    if first > last {
        return;
    }
    // SAFETY: close_range and close take plain integers; the fds from `first`
    // to `last` are ones the caller is done with (see the callers).
    unsafe {
        if sys::close_range(first as u32, last as u32, 0).is_ok() {
            return;
        }
        for fd in first..=last.min(max_fd()) {
            let _ = sys::close(fd);
        }
    }
}

/// Closes every fd from 3 up but those in `keep` (-1 entries are ignored).
///
/// # Safety
/// Only in the supervisor or its init: the fds closed are ones it is done
/// with.
pub(super) unsafe fn close_all_but(keep: &mut [c_int]) {
    keep.sort_unstable();
    let mut next: c_int = 3;
    for &fd in keep.iter() {
        if fd >= next {
            // SAFETY: the caller's contract.
            unsafe { close_from(next, fd - 1) };
            next = fd + 1;
        }
    }
    // SAFETY: the caller's contract.
    unsafe { close_from(next, c_int::MAX) };
}

pub(super) fn max_fd() -> c_int {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `l` is a valid rlimit for prlimit64 to write.
    if unsafe { sys::prlimit(libc::RLIMIT_NOFILE as c_int, None, Some(&mut l)) }.is_err() {
        return 1024;
    }
    l.rlim_cur.min(65_536) as c_int
}
