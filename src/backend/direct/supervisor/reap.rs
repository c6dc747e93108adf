//! The supervisor's watch: it waits for the tool (or its PID namespace's
//! init), ends the call by killing every child it has, round after round,
//! and writes the report. Raw system calls only (`sys`).

// Code here runs in the supervisor, its init and the tool before exec,
// on a toolhost thread's state: nothing may panic (std's handler would run).
#![deny(
    clippy::indexing_slicing,
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used
)]

use std::sync::atomic::Ordering;

use libc::{c_int, pid_t};

use super::tool::close_all_but;
use super::{
    CLEANUP_BUDGET_NS, PARENT_DEATH, Params, REASON_EXITED, REASON_KILLED, REASON_NOT_STARTED,
    REASON_PARENT_GONE, Report, STAGE_ISOLATION, STAGE_SETUP, SUPERVISOR_SIGNALS, Shared,
    toolhost_gone,
};
use crate::backend::direct::sys::{self, now_ns};

/// How often the supervisor, as its namespace's init, looks whether
/// toolhost is gone once one of toolhost's threads has died (see the wait).
const WATCH_NS: i64 = 100_000_000;

/// How the call's processes are held, and so how they are ended.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Contain {
    /// No PID namespace: the tool's process group, then every child of this
    /// subreaper, round after round.
    Group,
    /// `child` is the init of the call's PID namespace: killing it kills
    /// the namespace.
    Init,
    /// This process is the init of the call's PID namespace and `child` the
    /// tool (pid 2): `kill(-1)` reaches every other process of it.
    AsInit,
}

/// Waits for `child` (the tool, or with [`Contain::Init`] the namespace's
/// init; `Err`, the errno of its clone), ends the call and reports.
/// `ns_layers`: the namespace layers applied here.
///
/// # Safety
/// Only in the supervisor: raw system calls only, with no allocation and no
/// locks.
pub(super) unsafe fn supervise(
    p: &Params,
    sh: &Shared,
    child: Result<pid_t, c_int>,
    contain: Contain,
    ns_layers: u32,
) -> ! {
    // Contain::Init: the namespace's init is our child; AsInit: we are it.
    let under_init = contain == Contain::Init;
    let as_init = contain == Contain::AsInit;
    // SAFETY: runs in the supervisor (see `# Safety`): waits, kills, write
    // and exit on this process's children and on the status fd in `p`.
    unsafe {
        let (failure, stage) = match child {
            Err(e) => (e.max(1), STAGE_SETUP),
            Ok(_) => (
                sh.tool_errno.load(Ordering::SeqCst),
                sh.tool_stage.load(Ordering::SeqCst),
            ),
        };
        let failed_layer = sh.tool_stage.load(Ordering::SeqCst) == STAGE_ISOLATION;
        let layers =
            sh.tool_layers.load(Ordering::SeqCst) | if failed_layer { 0 } else { ns_layers };
        if failure != 0 {
            // The tool never ran (and, if it was created, has exited).
            if let Ok(tool) = child {
                let mut st = 0;
                let _ = sys::wait4(tool, &mut st, libc::__WALL, None);
            }
            report_not_started(p, failure, stage, layers);
        }
        let Ok(tool) = child else {
            report_not_started(p, libc::ECHILD, STAGE_SETUP, layers);
        };
        // Keep nothing of toolhost's but the status pipe and toolhost's pidfd
        // (`toolhost_gone`); in particular not the output pipes, so they reach
        // EOF as soon as the tool's tree is gone.
        close_all_but(&mut [p.status_fd, p.toolhost_pidfd]);
        if let Ok(null) = sys::openat(libc::AT_FDCWD, c"/dev/null".as_ptr(), libc::O_RDWR) {
            let null = null as c_int;
            for fd in 0..3 {
                let _ = sys::dup3(null, fd, 0);
            }
            if null > 2 {
                let _ = sys::close(null);
            }
        }

        // A write to a status pipe whose reader is gone must not kill us
        // (our own dispositions: no CLONE_SIGHAND).
        let _ = sys::set_disposition(libc::SIGPIPE, libc::SIG_IGN);

        let mut report = Report {
            reason: REASON_EXITED,
            layers,
            ..Report::default()
        };
        // As the namespace's init, the CPU time of every process of it that
        // we reap (orphans come to us), as the init's own rusage counts them.
        let mut orphans_cpu: u64 = 0;
        // Whether to look at toolhost's pidfd between signals (as the init,
        // once a parent-death signal came while toolhost was still there).
        let mut watch_toolhost = false;
        // The signals of SUPERVISOR_SIGNALS stay blocked; we take them with
        // sigtimedwait. Each round first looks for exited children without
        // blocking (the tool's zombie is left unreaped: it keeps its
        // process-group id reserved until the group has been killed), then
        // waits for the next signal. A signal that arrives at any point stays
        // pending until the next wait, so none is lost.
        'wait: loop {
            loop {
                let pid = match sys::exited_child_nowait() {
                    Ok(pid) if pid != 0 => pid as pid_t,
                    _ => break, // no exited child right now
                };
                if pid == tool {
                    break 'wait;
                }
                let mut st = 0;
                let mut ru: libc::rusage = std::mem::zeroed();
                if matches!(sys::wait4(pid, &mut st, libc::WNOHANG, Some(&mut ru)), Ok(r) if r != 0)
                    && as_init
                {
                    orphans_cpu += cpu_micros(&ru);
                }
            }
            let sig = match sys::sigwait(&SUPERVISOR_SIGNALS, watch_toolhost.then_some(WATCH_NS)) {
                Ok(sig) => sig,
                Err(libc::EAGAIN) if toolhost_gone(p, as_init) => {
                    report.reason = REASON_PARENT_GONE;
                    break;
                }
                Err(_) => continue,
            };
            if sig == libc::SIGCHLD {
                continue;
            }
            if sig == PARENT_DEATH {
                if toolhost_gone(p, as_init) {
                    report.reason = REASON_PARENT_GONE;
                    break;
                }
                // Only the spawning thread exited: follow the new parent thread.
                let _ = sys::prctl(libc::PR_SET_PDEATHSIG, PARENT_DEATH as usize);
                if toolhost_gone(p, as_init) {
                    report.reason = REASON_PARENT_GONE;
                    break;
                }
                // As the init, toolhost's last thread may be exiting right
                // now (its pidfd turns readable only once it is gone, and we
                // may have been handed to a parent outside toolhost, whose
                // death would never tell us): look again every WATCH_NS
                // from now on.
                watch_toolhost = as_init;
                continue;
            }
            // KILL_REQUEST, SIGTERM, SIGINT, SIGHUP. As the init, the call's
            // own processes can send us those (pid 1), and no siginfo proves
            // a sender: a kill request counts only with toolhost's mark in
            // our shared memory. (A parent-death signal above only makes us
            // look at toolhost's pidfd, which nothing of the call can fake.)
            if as_init && sh.kill_requested.load(Ordering::SeqCst) == 0 {
                continue;
            }
            report.reason = REASON_KILLED;
            break;
        }

        // One budget for the whole cleanup, below toolhost's grace for a kill
        // request (KILL_GRACE in `direct`).
        let deadline = now_ns() + CLEANUP_BUDGET_NS;
        if under_init {
            // Killing the init kills every process of the namespace; by the
            // time it can be reaped, they are gone. (The tool's pid is a pid
            // of that namespace, meaningless here.)
            let _ = sys::kill(tool, libc::SIGKILL);
        } else if as_init {
            // Every process of our namespace but us; those that come to us
            // later (their parent killed first) are killed again below.
            let _ = sys::kill(-1, libc::SIGKILL);
        } else {
            let _ = sys::kill(-tool, libc::SIGKILL);
            let _ = sys::kill(tool, libc::SIGKILL);
        }
        let mut status: c_int = 0;
        let mut ru: libc::rusage = std::mem::zeroed();
        // The init can be reaped only once every process of its namespace is
        // gone; one stuck in the kernel (D state: a hung network or FUSE
        // mount) would hold us: wait within the cleanup budget, then report
        // it as a survivor. As the init, the same for the tool itself.
        let reaped = if under_init || as_init {
            loop {
                let r = sys::wait4(tool, &mut status, libc::WNOHANG, Some(&mut ru));
                if !matches!(r, Ok(0)) || now_ns() > deadline {
                    break r;
                }
                sys::nanosleep(1_000_000);
            }
        } else {
            sys::wait4(tool, &mut status, 0, Some(&mut ru))
        };
        let reaped = reaped == Ok(tool as usize);
        let stuck = under_init && !reaped;
        if reaped {
            report.wait_status = status;
            // In a PID namespace: the init's and all it reaped, the tool first.
            report.cpu_micros = cpu_micros(&ru);
        }
        if under_init {
            report.wait_status = if sh.tool_reaped.load(Ordering::SeqCst) == 1 {
                sh.tool_status.load(Ordering::SeqCst)
            } else {
                // Killed with its namespace before it exited.
                libc::SIGKILL
            };
        }
        let (left, cpu) = kill_all_children(deadline, as_init);
        if as_init {
            report.cpu_micros += orphans_cpu + cpu;
        }
        report.survivors = left + u32::from(stuck);

        let bytes = report.encode();
        let _ = sys::write(p.status_fd, &bytes);
        sys::exit(0)
    }
}

/// Reports a call whose tool never ran, and exits.
///
/// # Safety
/// Only in the supervisor: raw system calls only.
pub(super) unsafe fn report_not_started(p: &Params, errno: c_int, stage: u32, layers: u32) -> ! {
    let report = Report {
        reason: REASON_NOT_STARTED,
        wait_status: errno,
        cpu_micros: 0,
        survivors: stage,
        layers,
    };
    let bytes = report.encode();
    // SAFETY: writes a report held on this stack frame to the status fd in
    // `p`, then exits.
    unsafe {
        let _ = sys::write(p.status_fd, &bytes);
        sys::exit(0)
    }
}

/// Kills every child of this (subreaper) process, round after round, until it has
/// none; returns how many were still there at `deadline`, and the CPU time
/// (µs) of those it reaped. `as_init`: this process is the init of the
/// call's PID namespace, and each round also kills every process of it.
///
/// # Safety
/// Only in the supervisor: raw system calls only.
pub(super) unsafe fn kill_all_children(deadline: i64, as_init: bool) -> (u32, u64) {
    // SAFETY: signals and reaps only this process's own children (pids it is
    // subreaper of) or, as the namespace's init, the processes of its
    // namespace, and sleeps.
    unsafe {
        let mut buf = [0u8; 4096];
        let mut cpu = 0;
        loop {
            let r = loop {
                let mut st = 0;
                let mut ru: libc::rusage = std::mem::zeroed();
                match sys::wait4(-1, &mut st, libc::WNOHANG | libc::__WALL, Some(&mut ru)) {
                    Ok(0) => break Ok(0),
                    Ok(_) => cpu += cpu_micros(&ru),
                    Err(e) => break Err(e),
                }
            };
            if r == Err(libc::ECHILD) {
                return (0, cpu);
            }
            if as_init {
                let _ = sys::kill(-1, libc::SIGKILL);
            }
            let killed = kill_listed_children(&mut buf);
            if now_ns() > deadline {
                return (killed.max(1), cpu);
            }
            sys::nanosleep(200_000);
        }
    }
}

/// User + system time of a rusage, in µs.
fn cpu_micros(ru: &libc::rusage) -> u64 {
    let us = |t: libc::timeval| (t.tv_sec as u64) * 1_000_000 + t.tv_usec as u64;
    us(ru.ru_utime) + us(ru.ru_stime)
}

/// Reads `/proc/thread-self/children` and SIGKILLs each pid in it. Children of
/// this process cannot be reused pids: they stay ours until reaped.
///
/// # Safety
/// Only in the supervisor: raw system calls only.
pub(super) unsafe fn kill_listed_children(buf: &mut [u8; 4096]) -> u32 {
    // SAFETY: reads /proc/thread-self/children into `buf`, within its length,
    // and signals the listed children of this process, which stay ours until
    // reaped.
    unsafe {
        let Ok(fd) = sys::openat(
            libc::AT_FDCWD,
            c"/proc/thread-self/children".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        ) else {
            return 0;
        };
        let fd = fd as c_int;
        let mut count = 0;
        let mut pid: pid_t = 0;
        let mut in_number = false;
        loop {
            let n = match sys::read(fd, buf) {
                Ok(n) if n > 0 => n,
                _ => break,
            };
            for &c in buf.iter().take(n) {
                if c.is_ascii_digit() {
                    pid = pid.saturating_mul(10).saturating_add((c - b'0') as pid_t);
                    in_number = true;
                } else if in_number {
                    let _ = sys::kill(pid, libc::SIGKILL);
                    count += 1;
                    pid = 0;
                    in_number = false;
                }
            }
        }
        if in_number {
            let _ = sys::kill(pid, libc::SIGKILL);
            count += 1;
        }
        let _ = sys::close(fd);
        count
    }
}
