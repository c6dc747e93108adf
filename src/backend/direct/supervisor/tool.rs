//! The tool process's side, between clone and exec: its limits, its
//! capabilities, its fds, its isolation, then the exec (PATH searched as
//! execvp does). System calls only.

use std::ffi::CStr;
use std::sync::atomic::Ordering;

use libc::c_int;

use super::reap::errno;
use super::{CLOSE_RANGE_CLOEXEC, ExecArgs, Params, TOOL_LAYERS};
use crate::backend::direct::harden::apply_in_tool;
use crate::isolation::Layer;

/// In the tool process, sharing the supervisor's memory: only system calls.
/// `Err(Some(layer))`: a required isolation layer failed.
///
/// # Safety
/// Only in the forked supervisor or the tool process, between fork and
/// exec (see the module doc): it makes async-signal-safe system calls
/// only, with no allocation and no locks.
pub(super) unsafe fn prepare_tool(p: &Params) -> Result<(), Option<Layer>> {
    // SAFETY: runs in the tool process, which shares the supervisor's memory
    // until exec (see `# Safety`): only system calls on plain values and on
    // the fds and pointers in `p`, which outlive the call.
    unsafe {
        let supervisor = libc::getppid();
        libc::setpgid(0, 0);
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        );
        if libc::getppid() != supervisor {
            libc::_exit(127);
        }
        if libc::fchdir(p.cwd_fd) < 0 {
            return Err(None);
        }
        for l in p.limits.iter().flatten() {
            set_limit(l.resource, l.value).map_err(|()| None)?;
        }
        // Core dumps would write tool memory into the workspace.
        set_limit(libc::RLIMIT_CORE as c_int, 0).map_err(|()| None)?;
        // No real-time scheduling and no raised priority: without
        // CAP_SYS_NICE (dropped from root tools when isolation is on) these
        // are what the kernel allows, and at 0 a tool can only lower its
        // priority (nice 10 works, nice -20 and SCHED_FIFO do not).
        set_limit(libc::RLIMIT_RTPRIO as c_int, 0).map_err(|()| None)?;
        set_limit(libc::RLIMIT_NICE as c_int, 0).map_err(|()| None)?;
        cloexec_from(3);
        // Nothing inherited or ambient survives exec, whoever we are.
        clear_inheritable_caps();
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        );
        let applied = apply_in_tool(&p.harden).map_err(Some)?;
        TOOL_LAYERS.store(applied, Ordering::SeqCst);
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        Ok(())
    }
}

/// Clears the inheritable capability set (capset, v3 header).
///
/// # Safety
/// Only in the forked supervisor or the tool process, between fork and
/// exec (see the module doc): it makes async-signal-safe system calls
/// only, with no allocation and no locks.
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
    // SAFETY: capget/capset on this thread with `h` and `d` laid out as the
    // kernel's v3 header and two data structs (`#[repr(C)]`), both live
    // through the calls.
    unsafe {
        let mut h = Header {
            version: V3,
            pid: 0,
        };
        let mut d = [Data {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        if libc::syscall(libc::SYS_capget, &mut h as *mut Header, d.as_mut_ptr()) < 0 {
            return;
        }
        if d[0].inheritable == 0 && d[1].inheritable == 0 {
            return;
        }
        d[0].inheritable = 0;
        d[1].inheritable = 0;
        libc::syscall(libc::SYS_capset, &mut h as *mut Header, d.as_ptr());
    }
}

/// execve, searching PATH like execvp when the program has no slash. Returns
/// only on failure, with errno set as execvp would.
///
/// # Safety
/// Only in the forked supervisor or the tool process, between fork and
/// exec (see the module doc): it makes async-signal-safe system calls
/// only, with no allocation and no locks.
pub(super) unsafe fn exec_tool(e: &ExecArgs) {
    // SAFETY: `e`'s pointer arrays are NUL-terminated and point into C strings
    // that `e` owns (built before the fork), so execve and the PATH search
    // read only valid memory.
    unsafe {
        let argv = e.argv_ptrs.as_ptr();
        let envp = e.envp_ptrs.as_ptr();
        let Some(path) = &e.search_path else {
            libc::execve(e.program.as_ptr(), argv, envp);
            return;
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
            if dir.len() + 1 + name.len() + 1 > buf.len() {
                continue;
            }
            buf[..dir.len()].copy_from_slice(dir);
            buf[dir.len()] = b'/';
            buf[dir.len() + 1..dir.len() + 1 + name.len()].copy_from_slice(name);
            buf[dir.len() + 1 + name.len()] = 0;
            let full = CStr::from_bytes_until_nul(&buf).unwrap_or(c"");
            libc::execve(full.as_ptr(), argv, envp);
            match errno() {
                libc::EACCES => saw_eacces = true,
                libc::ENOENT | libc::ENOTDIR | libc::ELOOP | libc::ENAMETOOLONG => {}
                _ => return,
            }
        }
        set_errno(if saw_eacces {
            libc::EACCES
        } else {
            libc::ENOENT
        });
    }
}

pub(super) fn set_errno(e: c_int) {
    // SAFETY: writes this thread's errno.
    unsafe { *libc::__errno_location() = e };
}

/// # Safety
/// Only in the forked supervisor or the tool process, between fork and
/// exec (see the module doc): it makes async-signal-safe system calls
/// only, with no allocation and no locks.
pub(super) unsafe fn set_limit(resource: c_int, value: u64) -> Result<(), ()> {
    // SAFETY: getrlimit and setrlimit write and read `rlimit` structs on this
    // stack frame.
    unsafe {
        let mut cur: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(resource as _, &mut cur) < 0 {
            return Err(());
        }
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
        if libc::setrlimit(resource as _, &new) < 0 {
            return Err(());
        }
        Ok(())
    }
}

/// Marks every fd from `first` up close-on-exec, so the tool inherits only 0-2
/// while std can still report an exec failure on its own pipe.
///
/// # Safety
/// Only in the forked supervisor or the tool process, between fork and
/// exec (see the module doc): it makes async-signal-safe system calls
/// only, with no allocation and no locks.
pub(super) unsafe fn cloexec_from(first: c_int) {
    // SAFETY: close_range and fcntl take plain integers; setting close-on-exec
    // on an fd we do not own only affects this process's exec.
    unsafe {
        let r = libc::syscall(
            libc::SYS_close_range,
            first as libc::c_uint,
            libc::c_uint::MAX,
            CLOSE_RANGE_CLOEXEC,
        );
        if r == 0 {
            return;
        }
        for fd in first..max_fd() {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
}

/// # Safety
/// Only in the forked supervisor or the tool process, between fork and
/// exec (see the module doc): it makes async-signal-safe system calls
/// only, with no allocation and no locks.
pub(super) unsafe fn close_from(first: c_int, last: c_int) {
    // SAFETY: close_range and close take plain integers; the fds from `first`
    // to `last` are ones the caller is done with (see the callers).
    unsafe {
        if first > last {
            return;
        }
        let r = libc::syscall(
            libc::SYS_close_range,
            first as libc::c_uint,
            last as libc::c_uint,
            0 as libc::c_uint,
        );
        if r == 0 {
            return;
        }
        for fd in first..=last.min(max_fd()) {
            libc::close(fd);
        }
    }
}

pub(super) fn max_fd() -> c_int {
    // SAFETY: all zeroes is a valid rlimit (plain integers).
    let mut l: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: `l` is a valid rlimit for getrlimit to write.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } < 0 {
        return 1024;
    }
    l.rlim_cur.min(65_536) as c_int
}
