//! The supervisor's watch: it waits for the tool (or its PID namespace's
//! init), ends the call by killing every child it has, round after round,
//! and writes the report. System calls only.

use std::io;
use std::sync::atomic::Ordering;

use libc::{c_int, pid_t};

use super::tool::close_from;
use super::{
    CLEANUP_BUDGET_NS, PARENT_DEATH, Params, REASON_EXITED, REASON_KILLED, REASON_NOT_STARTED,
    REASON_PARENT_GONE, Report, STAGE_ISOLATION, STAGE_SETUP, TOOL_ERRNO, TOOL_LAYERS, TOOL_REAPED,
    TOOL_STAGE, TOOL_STATUS, supervisor_signals,
};

pub(super) fn now_ns() -> i64 {
    // SAFETY: all zeroes is a valid timespec (plain integers).
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: `ts` is a valid timespec for clock_gettime to write.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

pub(super) fn errno() -> c_int {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Waits for `child` (the tool, or in a PID namespace its init), ends the call
/// and reports. `ns_layers`: the namespace layers applied here.
///
/// # Safety
/// Only in the forked supervisor or the tool process, between fork and
/// exec (see the module doc): it makes async-signal-safe system calls
/// only, with no allocation and no locks.
pub(super) unsafe fn supervise(p: &Params, child: pid_t, in_pidns: bool, ns_layers: u32) -> ! {
    // SAFETY: runs in the supervisor after fork (see `# Safety`): waitpid,
    // kill, write and _exit on this process's children and on the status fd
    // in `p`; no allocation.
    unsafe {
        let tool = child;
        let (failure, stage) = if tool < 0 {
            (errno(), STAGE_SETUP)
        } else {
            (
                TOOL_ERRNO.load(Ordering::SeqCst),
                TOOL_STAGE.load(Ordering::SeqCst),
            )
        };
        let failed_layer = TOOL_STAGE.load(Ordering::SeqCst) == STAGE_ISOLATION;
        let layers = TOOL_LAYERS.load(Ordering::SeqCst) | if failed_layer { 0 } else { ns_layers };
        if failure != 0 {
            // The tool never ran (and, if it was created, has exited).
            if tool > 0 {
                libc::waitpid(tool, std::ptr::null_mut(), libc::__WALL);
            }
            report_not_started(p, failure, stage, layers);
        }
        // Keep nothing of toolhost's but the status pipe; in particular not the
        // output pipes, so they reach EOF as soon as the tool's tree is gone.
        close_from(3, p.status_fd - 1);
        close_from(p.status_fd + 1, c_int::MAX);
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            for fd in 0..3 {
                libc::dup2(null, fd);
            }
            if null > 2 {
                libc::close(null);
            }
        }

        // A write to a status pipe whose reader is gone must not kill us.
        let mut ign: libc::sigaction = std::mem::zeroed();
        ign.sa_sigaction = libc::SIG_IGN;
        libc::sigaction(libc::SIGPIPE, &ign, std::ptr::null_mut());

        let mut report = Report {
            reason: REASON_EXITED,
            layers,
            ..Report::default()
        };
        // The signals of `supervisor_signals` stay blocked; we take them with
        // sigwaitinfo. Each round first looks for exited children without
        // blocking (the tool's zombie is left unreaped: it keeps its
        // process-group id reserved until the group has been killed), then
        // waits for the next signal. A signal that arrives at any point stays
        // pending until the next sigwaitinfo, so none is lost.
        let set = supervisor_signals();
        'wait: loop {
            loop {
                let mut info: libc::siginfo_t = std::mem::zeroed();
                let r = libc::waitid(
                    libc::P_ALL,
                    0,
                    &mut info,
                    libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
                );
                let pid = info.si_pid();
                if r != 0 || pid == 0 {
                    break; // no exited child right now
                }
                if pid == tool {
                    break 'wait;
                }
                libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG);
            }
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let sig = libc::sigwaitinfo(&set, &mut info);
            if sig == libc::SIGCHLD || sig < 0 {
                continue;
            }
            if sig == PARENT_DEATH {
                if libc::getppid() != p.toolhost_pid {
                    report.reason = REASON_PARENT_GONE;
                    break;
                }
                // Only the spawning thread exited: follow the new parent thread.
                libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    PARENT_DEATH as libc::c_ulong,
                    0,
                    0,
                    0,
                );
                if libc::getppid() != p.toolhost_pid {
                    report.reason = REASON_PARENT_GONE;
                    break;
                }
                continue;
            }
            // KILL_REQUEST, SIGTERM, SIGINT, SIGHUP.
            report.reason = REASON_KILLED;
            break;
        }

        if in_pidns {
            // Killing the init kills every process of the namespace; by the
            // time it can be reaped, they are gone. (The tool's pid is a pid
            // of that namespace, meaningless here.)
            libc::kill(child, libc::SIGKILL);
        } else {
            libc::kill(-tool, libc::SIGKILL);
            libc::kill(tool, libc::SIGKILL);
        }
        let mut status: c_int = 0;
        let mut ru: libc::rusage = std::mem::zeroed();
        // The init can be reaped only once every process of its namespace is
        // gone; one stuck in the kernel (D state: a hung network or FUSE
        // mount) would hold us: wait within the cleanup budget, then report
        // it as a survivor.
        let reaped = if in_pidns {
            let deadline = now_ns() + CLEANUP_BUDGET_NS;
            loop {
                let r = libc::wait4(child, &mut status, libc::WNOHANG, &mut ru);
                if r != 0 || now_ns() > deadline {
                    break r;
                }
                let ts = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 1_000_000,
                };
                libc::nanosleep(&ts, std::ptr::null_mut());
            }
        } else {
            libc::wait4(child, &mut status, 0, &mut ru)
        };
        let stuck = in_pidns && reaped != child;
        if reaped == child {
            report.wait_status = status;
            let us = |t: libc::timeval| (t.tv_sec as u64) * 1_000_000 + t.tv_usec as u64;
            // In a PID namespace: the init's and all it reaped, the tool first.
            report.cpu_micros = us(ru.ru_utime) + us(ru.ru_stime);
        }
        if in_pidns {
            report.wait_status = if TOOL_REAPED.load(Ordering::SeqCst) == 1 {
                TOOL_STATUS.load(Ordering::SeqCst)
            } else {
                // Killed with its namespace before it exited.
                libc::SIGKILL
            };
        }
        report.survivors = kill_all_children() + u32::from(stuck);

        let bytes = report.encode();
        libc::write(p.status_fd, bytes.as_ptr().cast(), bytes.len());
        libc::_exit(0)
    }
}

/// Reports a call whose tool never ran, and exits.
///
/// # Safety
/// Only in the forked supervisor or the tool process, between fork and
/// exec (see the module doc): it makes async-signal-safe system calls
/// only, with no allocation and no locks.
pub(super) unsafe fn report_not_started(p: &Params, errno: c_int, stage: u32, layers: u32) -> ! {
    // SAFETY: writes a report held on this stack frame to the status fd in
    // `p`, then exits; no allocation.
    unsafe {
        let report = Report {
            reason: REASON_NOT_STARTED,
            wait_status: errno,
            cpu_micros: 0,
            survivors: stage,
            layers,
        };
        let bytes = report.encode();
        libc::write(p.status_fd, bytes.as_ptr().cast(), bytes.len());
        libc::_exit(0)
    }
}

/// Kills every child of this (subreaper) process, round after round, until it has
/// none; returns how many were still there when the budget ran out.
///
/// # Safety
/// Only in the forked supervisor or the tool process, between fork and
/// exec (see the module doc): it makes async-signal-safe system calls
/// only, with no allocation and no locks.
pub(super) unsafe fn kill_all_children() -> u32 {
    // SAFETY: signals and reaps only this process's own children (pids it is
    // subreaper of), and sleeps; no allocation.
    unsafe {
        let deadline = now_ns() + CLEANUP_BUDGET_NS;
        let mut buf = [0u8; 4096];
        loop {
            let r = loop {
                let r = libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG | libc::__WALL);
                if r <= 0 {
                    break r;
                }
            };
            if r < 0 && errno() == libc::ECHILD {
                return 0;
            }
            let killed = kill_listed_children(&mut buf);
            if now_ns() > deadline {
                return killed.max(1);
            }
            let ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 200_000,
            };
            libc::nanosleep(&ts, std::ptr::null_mut());
        }
    }
}

/// Reads `/proc/thread-self/children` and SIGKILLs each pid in it. Children of
/// this process cannot be reused pids: they stay ours until reaped.
///
/// # Safety
/// Only in the forked supervisor or the tool process, between fork and
/// exec (see the module doc): it makes async-signal-safe system calls
/// only, with no allocation and no locks.
pub(super) unsafe fn kill_listed_children(buf: &mut [u8; 4096]) -> u32 {
    // SAFETY: reads /proc/thread-self/children into `buf`, within its length,
    // and signals the listed children of this process, which stay ours until
    // reaped.
    unsafe {
        let fd = libc::open(
            c"/proc/thread-self/children".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return 0;
        }
        let mut count = 0;
        let mut pid: pid_t = 0;
        let mut in_number = false;
        loop {
            let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
            if n <= 0 {
                break;
            }
            for &c in &buf[..n as usize] {
                if c.is_ascii_digit() {
                    pid = pid.saturating_mul(10).saturating_add((c - b'0') as pid_t);
                    in_number = true;
                } else if in_number {
                    libc::kill(pid, libc::SIGKILL);
                    count += 1;
                    pid = 0;
                    in_number = false;
                }
            }
        }
        if in_number {
            libc::kill(pid, libc::SIGKILL);
            count += 1;
        }
        libc::close(fd);
        count
    }
}
