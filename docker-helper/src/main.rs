//! toolhost's helper in the docker backend's containers, bind-mounted
//! read-only at `/.toolhost-helper` and statically linked so that it runs in
//! any Linux image. Two modes:
//!
//! - `--seccomp HEX --exec PROGRAM ARGS...` (a per-call container): installs
//!   the seccomp filter toolhost built (no set-ID files; see
//!   `container_filter` in toolhost's `backend/direct/harden/seccomp.rs`), then execs
//!   the tool, found on `PATH`. A program that cannot be run ends it with 127
//!   (not found) or 126, and `[FATAL toolhost-helper] exec PROGRAM failed:
//!   REASON` on stderr, as docker's init says it.
//! - `--seccomp HEX` (warm mode): the command server below. It runs as PID 1
//!   of the warm container and runs each call as its own child, instead of
//!   one engine `exec` per call; the filter is on the helper, so every call
//!   inherits it.
//!
//! Both may take `--cgroup-limits MEMORY:PIDS` (after the `--expect`s): the
//! cgroup limits toolhost asked the engine for, checked in the container's
//! own cgroup before anything runs (an engine can list the controllers and
//! still give a container no cgroup). A per-call tool also takes `--rlimit
//! NAME=SOFT:HARD` (repeated, after that): its ulimits, set on the helper
//! just before the exec, since an engine may drop the container's own
//! (rootless Podman's compatible API does); given to the server, they are
//! each call's.
//!
//! Both take `--expect DEV:INO:PATH` (repeated, after `--seccomp`): each bind
//! mount toolhost asked for, with the device and inode toolhost checked on the
//! host. The engine resolves mount sources and targets by path when the
//! container starts, after toolhost's checks, so a concurrent call that swaps
//! a dir for a symlink could get another place mounted, or the right one
//! mounted elsewhere. Before anything runs the helper checks that each PATH is
//! a mount point here (`/proc/self/mountinfo`) showing that inode.
//! Under a runtime that shows no host inode numbers (gVisor's) toolhost sends
//! `--expect ctime:SEC.NSEC:PATH` instead for a mount a tool could redirect
//! (its source lies inside a writable allowed dir): the host's inode change
//! time, which gVisor shows (a best-effort check; the gate of toolhost's
//! `gate.rs` is what keeps the sandbox's own tools out); and `--expect
//! -:-:PATH` (a mount point, nothing more) for one whose path no tool can
//! change.
//!
//! No filter or a mount not as checked, no tool: the helper exits (125, and
//! `[FATAL toolhost-helper] ...` on stderr; in warm mode before its hello)
//! before anything runs.
//!
//! Built for 64-bit x86_64 and aarch64 Linux only: the syscall types and
//! constants below are theirs.
//!
//! Invariants:
//! - The protocol runs on the helper's stdin and stdout (the container's attach
//!   stream). A tool never gets them: its fds 0-2 are pipes of the helper's
//!   (or /dev/null), everything else is close-on-exec. With `--call-user
//!   UID:GID --serve-as UID:GID [--hide-protocol]` (`user.rs`) the helper
//!   serves as a uid no tool has and each call takes its own user before the
//!   exec, so a tool can neither signal the helper nor open its `/proc`
//!   files on any kernel (`--hide-protocol`, under gVisor: the fds' own mode
//!   is 0 too). Without (a user by name), it runs as the tool's uid and is
//!   not dumpable, so that Linux keeps a tool from `/proc/1/fd/*` and
//!   ptrace; as PID 1 of its namespace it cannot be killed from inside.
//! - No process outlives its call: when the call's main process exits (or the
//!   host asks for a kill), the helper sends SIGKILL to every other process in
//!   the container (`kill(-1)`) and reports the exit only once it has no child
//!   left at all, so every process in the namespace is gone.
//! - Per-call rlimits (CPU seconds, file size, no core, 4096 open files, and
//!   any `--rlimit` the server was given, such as nproc under gVisor) are set
//!   in the child before exec, only ever lowered; the helper itself has
//!   none, so that no limit ends it.
//!
//! Frames, both ways: a kind byte, a u32 little-endian length, the payload.
//! Host to helper: `R` run (argv, env, cwd, limits, caps), `I` stdin bytes,
//! `E` end of stdin, `K` kill the call. Helper to host: `H` hello (the
//! protocol version), `o`/`e` the call's stdout/stderr bytes (at most cap + 1
//! each), `X` the call's end.

use std::ffi::{CString, c_char};

/// Protocol version, sent in the hello frame.
const VERSION: &[u8] = b"toolhost-docker-helper 1";
/// Open files per call in warm mode: toolhost's `CONTAINER_NOFILE`.
const NOFILE: u64 = 4096;
/// Largest frame accepted from the host.
const FRAME_MAX: usize = 1 << 20;
/// Stdin held for a tool that is not reading: past this the helper stops
/// reading its own input (the host waits), except for a kill.
const PENDING_MAX: usize = 1 << 20;

mod checks;
mod protocol;
mod sys;
mod user;

use checks::*;
use protocol::*;

/// The `oom_kill` count of the container's memory cgroup (v2, then v1).
fn oom_kills() -> Option<u64> {
    for path in [
        "/sys/fs/cgroup/memory.events",
        "/sys/fs/cgroup/memory/memory.oom_control",
    ] {
        if let Ok(text) = std::fs::read_to_string(path) {
            for line in text.lines() {
                if let Some(n) = line.strip_prefix("oom_kill ") {
                    return n.trim().parse().ok();
                }
            }
        }
    }
    None
}

/// The `X` frame: how the call ended, a value (exit code, signal, or spawn
/// stage), an errno (spawn failures), and flags: the memory cgroup OOM-killed
/// something, other processes had to be killed, the host asked for the kill.
fn end(kind: i32, value: i32, errno: i32, oom: bool, others: bool, killed: bool) {
    let mut p = Vec::with_capacity(15);
    p.extend_from_slice(&kind.to_le_bytes());
    p.extend_from_slice(&value.to_le_bytes());
    p.extend_from_slice(&errno.to_le_bytes());
    p.extend_from_slice(&[oom as u8, others as u8, killed as u8]);
    send(b'X', &p);
}

fn cstring(b: &[u8]) -> CString {
    // Requests with NUL bytes are refused by `parse`.
    CString::new(b).unwrap_or_default()
}

fn close(fd: &mut i32) {
    if *fd >= 0 {
        // SAFETY: closing an fd this helper owns.
        unsafe { sys::close(*fd) };
        *fd = -1;
    }
}

fn pipe() -> Option<[i32; 2]> {
    let mut fds = [-1; 2];
    // SAFETY: pipe2 writes two fds.
    if unsafe { sys::pipe2(fds.as_mut_ptr(), sys::O_CLOEXEC) } < 0 {
        return None;
    }
    Some(fds)
}

/// What every call of the server shares.
struct Server {
    /// The environment the container gave the helper.
    base_env: Vec<Vec<u8>>,
    /// The signalfd that wakes the call loop when a child exits.
    sigchld: i32,
    /// The user each call takes before its exec (`--call-user`) and the one
    /// the helper serves as (`--serve-as`, `user.rs`), when they differ.
    call_user: Option<(u32, u32)>,
    serve_as: (u32, u32),
    /// Each call's rlimits besides the request's (`--rlimit`).
    limits: Vec<(i32, u64, u64)>,
    /// `/dev/null`, opened at the start: the stdin of calls without one.
    devnull: i32,
}

/// Runs one call to its end (the helper exits if the host goes away).
fn run(input: &mut Input, server: &Server, req: Request) {
    let (base_env, sigchld) = (&server.base_env, server.sigchld);
    // The environment: the image's, then the request's on top.
    let mut env: Vec<Vec<u8>> = Vec::new();
    let key = |e: &[u8]| e.split(|&b| b == b'=').next().map(<[u8]>::to_vec);
    for e in base_env.iter().chain(req.env.iter()) {
        let k = key(e);
        env.retain(|old| key(old) != k);
        env.push(e.clone());
    }
    let path = env
        .iter()
        .find_map(|e| e.strip_prefix(b"PATH=").map(<[u8]>::to_vec))
        .unwrap_or_else(|| {
            b"/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_vec()
        });
    let program = &req.argv[0];
    let candidates: Vec<CString> = if program.contains(&b'/') {
        vec![cstring(program)]
    } else {
        path.split(|&b| b == b':')
            .map(|dir| {
                let dir: &[u8] = if dir.is_empty() { b"." } else { dir };
                let mut p = dir.to_vec();
                p.push(b'/');
                p.extend_from_slice(program);
                cstring(&p)
            })
            .collect()
    };
    let argv: Vec<CString> = req.argv.iter().map(|a| cstring(a)).collect();
    let envp: Vec<CString> = env.iter().map(|e| cstring(e)).collect();
    let mut argv_p: Vec<*const c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_p.push(std::ptr::null());
    let mut envp_p: Vec<*const c_char> = envp.iter().map(|e| e.as_ptr()).collect();
    envp_p.push(std::ptr::null());
    let cwd = cstring(&req.cwd);
    let limits = [
        (sys::RLIMIT_CORE, 0, 0),
        (
            sys::RLIMIT_CPU,
            req.cpu_seconds,
            req.cpu_seconds.saturating_add(1),
        ),
        (sys::RLIMIT_FSIZE, req.file_size, req.file_size),
        // As the per-call containers' ulimit (an engine may have dropped
        // the warm container's, as rootless Podman's API does).
        (sys::RLIMIT_NOFILE, NOFILE, NOFILE),
    ];
    let call_user = server.call_user;
    let extra_limits = &server.limits[..];

    // The call's stdio pipes, its user's where it has one of its own (so
    // that it may open them again as /dev/stdout). The exec verdict's pipe
    // stays the helper's: a tool that could open it could forge a failed
    // exec.
    let make = || [pipe(), pipe(), req.stdin.then(pipe).flatten()];
    let [out, err, stdin_pipe] = match call_user {
        Some(ids) => user::with_call_ids(ids, server.serve_as, make).unwrap_or([None, None, None]),
        None => make(),
    };
    let pipes = [out, err, pipe(), stdin_pipe];
    let [Some(out), Some(err), Some(status), stdin_pipe] = pipes else {
        let errno = sys::errno();
        for mut fd in pipes.into_iter().flatten().flatten() {
            close(&mut fd);
        }
        end(END_SPAWN_FAILED, STAGE_EXEC, errno, false, false, false);
        return;
    };
    let (mut out_r, mut out_w) = (out[0], out[1]);
    let (mut err_r, mut err_w) = (err[0], err[1]);
    let (mut status_r, mut status_w) = (status[0], status[1]);
    let (mut in_r, mut in_w) = if req.stdin {
        match stdin_pipe {
            Some(p) => (p[0], p[1]),
            None => (-1, -1),
        }
    } else {
        // The helper's own /dev/null, opened before any tool ran (a root
        // tool owns the container's /dev, and could put a FIFO there).
        // SAFETY: fcntl on an fd of this process.
        let fd = unsafe { sys::fcntl(server.devnull, sys::F_DUPFD_CLOEXEC, 0) };
        (fd, -1)
    };
    let oom_before = oom_kills();

    // SAFETY: the helper is single-threaded; between fork and exec the child
    // only makes syscalls on memory prepared above.
    let pid = unsafe { sys::fork() };
    if pid == 0 {
        unsafe {
            let fail = |stage: i32| -> ! {
                let mut b = [0u8; 8];
                b[..4].copy_from_slice(&stage.to_le_bytes());
                b[4..].copy_from_slice(&sys::errno().to_le_bytes());
                sys::write(status_w, b.as_ptr(), 8);
                sys::_exit(127)
            };
            sys::setsid();
            // The helper ignores SIGPIPE (Rust's default) and blocks SIGCHLD
            // (for its signalfd); the tool gets the defaults.
            sys::signal(sys::SIGPIPE, sys::SIG_DFL);
            let mut empty = sys::SigSet([0; 16]);
            sys::sigemptyset(&mut empty);
            sys::sigprocmask(sys::SIG_SETMASK, &empty, std::ptr::null_mut());
            // The call's pipes over the protocol's fds first: the child
            // holds no fd of the protocol once it is the call's user.
            if in_r < 0
                || sys::dup2(in_r, 0) < 0
                || sys::dup2(out_w, 1) < 0
                || sys::dup2(err_w, 2) < 0
            {
                fail(STAGE_EXEC);
            }
            if let Some(ids) = call_user
                && !user::take_call_user(ids)
            {
                fail(STAGE_USER);
            }
            for &(res, cur, max) in limits.iter().chain(extra_limits) {
                // A limit that cannot be set is a call that does not run.
                if cur != u64::MAX && !lower_limit(res, cur, max) {
                    fail(STAGE_RLIMIT);
                }
            }
            if sys::chdir(cwd.as_ptr()) < 0 {
                fail(STAGE_CWD);
            }
            let mut denied = false;
            for c in &candidates {
                sys::execve(c.as_ptr(), argv_p.as_ptr(), envp_p.as_ptr());
                match sys::errno() {
                    sys::EACCES => denied = true,
                    sys::ENOENT | sys::ENOTDIR => {}
                    _ => fail(STAGE_EXEC),
                }
            }
            if denied {
                *sys::__errno_location() = sys::EACCES;
            }
            fail(STAGE_EXEC)
        }
    }
    let fork_errno = sys::errno();
    close(&mut out_w);
    close(&mut err_w);
    close(&mut status_w);
    close(&mut in_r);
    if pid < 0 {
        for fd in [&mut out_r, &mut err_r, &mut status_r, &mut in_w] {
            close(fd);
        }
        end(
            END_SPAWN_FAILED,
            STAGE_EXEC,
            fork_errno,
            false,
            false,
            false,
        );
        return;
    }
    // The exec's verdict: end of stream (close-on-exec) means it ran.
    let mut verdict = [0u8; 8];
    let mut got = 0;
    while got < 8 {
        // SAFETY: the buffer is valid for the remaining length.
        let n = unsafe { sys::read(status_r, verdict[got..].as_mut_ptr(), 8 - got) };
        if n < 0 && sys::errno() == sys::EINTR {
            continue;
        }
        if n <= 0 {
            break;
        }
        got += n as usize;
    }
    close(&mut status_r);
    if got == 8 {
        // Whatever the verdict says, nothing of the call may stay: the
        // same sweep as at a call's end.
        loop {
            let mut st = 0;
            // SAFETY: signals every process of this namespace but PID 1,
            // then reaps one child.
            let r = unsafe {
                sys::kill(-1, sys::SIGKILL);
                sys::waitpid(-1, &mut st, 0)
            };
            if r < 0 && sys::errno() != sys::EINTR {
                break;
            }
        }
        for fd in [&mut out_r, &mut err_r, &mut in_w] {
            close(fd);
        }
        let stage = i32::from_le_bytes([verdict[0], verdict[1], verdict[2], verdict[3]]);
        let errno = i32::from_le_bytes([verdict[4], verdict[5], verdict[6], verdict[7]]);
        end(END_SPAWN_FAILED, stage, errno, false, false, false);
        return;
    }
    if in_w >= 0 {
        // SAFETY: fcntl on our own fd.
        unsafe {
            let fl = sys::fcntl(in_w, sys::F_GETFL);
            sys::fcntl(in_w, sys::F_SETFL, fl | sys::O_NONBLOCK);
        }
    }
    let mut status: Option<i32> = None;
    let mut swept = false;
    let mut others = false;
    let mut killed = false;
    let mut pending: Vec<u8> = Vec::new();
    let mut stdin_end = !req.stdin;
    let mut forwarded = [0u64; 2];
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        // Reap everything that has exited: the call's process, and orphans
        // (the helper is their reaper, as PID 1).
        let mut childless = false;
        loop {
            let mut st = 0;
            // SAFETY: reaping children.
            let r = unsafe { sys::waitpid(-1, &mut st, sys::WNOHANG) };
            if r > 0 {
                if r == pid {
                    status = Some(st);
                }
                continue;
            }
            if r < 0 && sys::errno() != sys::EINTR {
                childless = true;
            }
            break;
        }
        if status.is_some() && !swept {
            // The call is over: nothing it started may outlive it.
            swept = true;
            // SAFETY: signals every process of this namespace but PID 1.
            others = unsafe { sys::kill(-1, sys::SIGKILL) } == 0;
            close(&mut in_w);
            pending.clear();
            continue;
        }
        if status.is_some() && childless && out_r < 0 && err_r < 0 {
            break;
        }
        if swept && !childless {
            // Again on every pass until none is left: nothing started
            // between the first kill and its delivery may stay.
            // SAFETY: signals every process of this namespace but PID 1.
            unsafe { sys::kill(-1, sys::SIGKILL) };
        }
        // Frames read so far, including any that came with the run request.
        while let Some((kind, payload)) = input.take() {
            match kind {
                b'I' if in_w >= 0 => pending.extend_from_slice(&payload),
                b'E' => stdin_end = true,
                b'K' => {
                    killed = true;
                    // SAFETY: signals every process of this namespace but PID 1.
                    unsafe { sys::kill(-1, sys::SIGKILL) };
                }
                b'I' => {}
                // A run request during a call, or garbage: the host is not
                // speaking the protocol; end everything.
                _ => host_gone(),
            }
        }
        if in_w >= 0 && pending.is_empty() && stdin_end {
            close(&mut in_w);
        }
        let mut fds: Vec<sys::PollFd> = Vec::with_capacity(5);
        let read_input = pending.len() < PENDING_MAX || in_w < 0;
        for (fd, events) in [
            (if read_input { 0 } else { -1 }, sys::POLLIN),
            (out_r, sys::POLLIN),
            (err_r, sys::POLLIN),
            (if pending.is_empty() { -1 } else { in_w }, sys::POLLOUT),
            (sigchld, sys::POLLIN),
        ] {
            fds.push(sys::PollFd {
                fd,
                events,
                revents: 0,
            });
        }
        // Exits wake the loop through the signalfd; without one it polls.
        let timeout = if status.is_some() || sigchld < 0 {
            10
        } else {
            1000
        };
        // SAFETY: the array is valid for its length; negative fds are skipped.
        let n = unsafe { sys::poll(fds.as_mut_ptr(), fds.len(), timeout) };
        if n < 0 {
            if sys::errno() == sys::EINTR {
                continue;
            }
            host_gone();
        }
        if sigchld >= 0 && fds[4].revents != 0 {
            // Drain it; the reaping happens at the top of the loop.
            let mut info = [0u8; 128];
            // SAFETY: the buffer is valid for its length; the fd is non-blocking.
            while unsafe { sys::read(sigchld, info.as_mut_ptr(), info.len()) } > 0 {}
        }
        let ready = |i: usize| {
            fds[i].revents & (sys::POLLIN | sys::POLLHUP | sys::POLLERR | sys::POLLNVAL) != 0
        };
        if ready(0) && !input.fill() {
            host_gone();
        }
        for (i, fd, kind) in [(1, &mut out_r, b'o'), (2, &mut err_r, b'e')] {
            if !ready(i) {
                continue;
            }
            // SAFETY: the buffer is valid for its length.
            let n = unsafe { sys::read(*fd, chunk.as_mut_ptr(), chunk.len()) };
            if n < 0 && matches!(sys::errno(), sys::EINTR | sys::EAGAIN) {
                continue;
            }
            if n <= 0 {
                close(fd);
                continue;
            }
            // Past its cap a stream is read and dropped; one byte over tells
            // the host it was truncated.
            let s = i - 1;
            let room = req.caps[s].saturating_add(1).saturating_sub(forwarded[s]);
            let take = (n as u64).min(room) as usize;
            if take > 0 {
                send(kind, &chunk[..take]);
                forwarded[s] += take as u64;
            }
        }
        if fds[3].revents != 0 && in_w >= 0 {
            // SAFETY: the buffer is valid for its length.
            let n = unsafe { sys::write(in_w, pending.as_ptr(), pending.len()) };
            if n > 0 {
                pending.drain(..n as usize);
            } else if n < 0 && !matches!(sys::errno(), sys::EINTR | sys::EAGAIN) {
                // The tool closed its stdin: the rest is dropped.
                pending.clear();
                close(&mut in_w);
            }
        }
    }
    close(&mut in_w);
    let oom = match (oom_before, oom_kills()) {
        (Some(a), Some(b)) => b > a,
        _ => false,
    };
    let st = status.unwrap_or(0);
    let (kind, value) = if st & 0x7f == 0 {
        (END_EXITED, (st >> 8) & 0xff)
    } else {
        (END_SIGNALLED, st & 0x7f)
    };
    end(kind, value, 0, oom, others, killed);
}

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let mut rest = &args[1.min(args.len())..];
    if rest.first().is_some_and(|a| a == "--seccomp") {
        use std::os::unix::ffi::OsStrExt;
        let hex = rest.get(1).map(|h| h.as_bytes()).unwrap_or_default();
        install_filter(hex);
        rest = &rest[2.min(rest.len())..];
    }
    let mut expect = Vec::new();
    while rest.first().is_some_and(|a| a == "--expect") {
        if let Some(e) = rest.get(1) {
            expect.push(e.as_os_str());
        }
        rest = &rest[2.min(rest.len())..];
    }
    verify_mounts(&expect);
    if rest.first().is_some_and(|a| a == "--cgroup-limits") {
        if let Some(spec) = rest.get(1) {
            verify_cgroup_limits(spec);
        }
        rest = &rest[2.min(rest.len())..];
    }
    let mut limits = Vec::new();
    while rest.first().is_some_and(|a| a == "--rlimit") {
        if let Some(l) = rest.get(1) {
            limits.push(l.as_os_str());
        }
        rest = &rest[2.min(rest.len())..];
    }
    if rest.first().is_some_and(|a| a == "--exec") {
        set_limits(&limits);
        exec(&rest[1..]);
    }
    // The server: `--rlimit`s are each call's (on the helper itself they
    // would end every call).
    let limits: Vec<(i32, u64, u64)> = parse_limits(&limits).into_iter().map(|(_, l)| l).collect();
    let mut call_user = None;
    let mut serve_as = (0, 0);
    if rest.first().is_some_and(|a| a == "--call-user") {
        let ids = |i: usize| {
            rest.get(i)
                .and_then(|a| a.to_str())
                .and_then(user::parse_ids)
        };
        match (
            ids(1),
            rest.get(2).is_some_and(|a| a == "--serve-as"),
            ids(3),
        ) {
            (Some(call), true, Some(serve)) => {
                rest = &rest[4.min(rest.len())..];
                let hide = rest.first().is_some_and(|a| a == "--hide-protocol");
                if hide {
                    rest = &rest[1..];
                }
                user::serve_as(serve, call, hide);
                call_user = Some(call);
                serve_as = serve;
            }
            _ => {
                eprintln!(
                    "[FATAL toolhost-helper] expected --call-user UID:GID --serve-as UID:GID [--hide-protocol]"
                );
                std::process::exit(125);
            }
        }
    } else {
        // Not dumpable: a tool running as the same uid cannot ptrace the
        // helper or open its /proc files (its fds are the protocol), on a
        // kernel that keeps this rule (gVisor does not: `user.rs`).
        // SAFETY: a plain prctl.
        unsafe { sys::prctl(sys::PR_SET_DUMPABLE, 0u64, 0u64, 0u64, 0u64) };
    }
    if let Some(extra) = rest.first() {
        eprintln!("[FATAL toolhost-helper] unexpected argument {extra:?}");
        std::process::exit(125);
    }
    // Rust's SIGSEGV/SIGBUS handlers (stack overflow reports) are signals a
    // tool could send to PID 1 (whose other signals are ignored): gone.
    // SIGCHLD is blocked and read from a signalfd, so the call loop wakes
    // (and reaps) whenever any child exits.
    // SAFETY: plain signal-mask syscalls on valid sets.
    let sigchld = unsafe {
        sys::signal(sys::SIGSEGV, sys::SIG_DFL);
        sys::signal(sys::SIGBUS, sys::SIG_DFL);
        let mut set = sys::SigSet([0; 16]);
        sys::sigemptyset(&mut set);
        sys::sigaddset(&mut set, sys::SIGCHLD);
        sys::sigprocmask(sys::SIG_BLOCK, &set, std::ptr::null_mut());
        sys::signalfd(-1, &set, sys::O_NONBLOCK | sys::O_CLOEXEC)
    };
    use std::os::unix::ffi::OsStringExt;
    let mut base_env: Vec<Vec<u8>> = std::env::vars_os()
        .map(|(k, v)| {
            let mut e = k.into_vec();
            e.push(b'=');
            e.extend_from_slice(&v.into_vec());
            e
        })
        .collect();
    if let Some((uid, _)) = call_user {
        // The engine set HOME for the container's user (0): the call's
        // user gets its own, as the engine would give it, unless the image
        // set another.
        let passwd = std::fs::read("/etc/passwd").unwrap_or_default();
        let root_home = [b"HOME=".as_slice(), &user::home_of(0, &passwd)].concat();
        for e in base_env.iter_mut() {
            if *e == root_home {
                *e = [b"HOME=".as_slice(), &user::home_of(uid, &passwd)].concat();
            }
        }
    }
    // SAFETY: the path is a valid C string.
    let devnull = unsafe { sys::open(c"/dev/null".as_ptr(), sys::O_RDONLY | sys::O_CLOEXEC) };
    let server = Server {
        devnull,
        base_env,
        sigchld,
        call_user,
        serve_as,
        limits,
    };
    send(b'H', VERSION);
    let mut input = Input { buf: Vec::new() };
    loop {
        let frame = loop {
            if let Some(f) = input.take() {
                break f;
            }
            if !input.fill() {
                host_gone();
            }
        };
        match frame {
            (b'R', payload) => match parse(&payload) {
                Some(req) => run(&mut input, &server, req),
                None => end(END_BAD_REQUEST, 0, sys::EINVAL, false, false, false),
            },
            // Stdin for a call that has ended, or a late kill: nothing to do.
            (b'I' | b'E' | b'K', _) => {}
            (kind, _) => {
                eprintln!("toolhost-docker-helper: unknown frame kind {kind}");
                host_gone();
            }
        }
    }
}
