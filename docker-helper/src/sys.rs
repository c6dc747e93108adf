//! The system calls the helper makes, declared by hand (a static binary
//! with no libc crate): their types and constants for 64-bit x86_64 and
//! aarch64 Linux.

use std::ffi::c_char;

#[repr(C)]
pub struct PollFd {
    pub fd: i32,
    pub events: i16,
    pub revents: i16,
}

/// glibc's `sigset_t` (1024 bits).
#[repr(C)]
pub struct SigSet(pub [u64; 16]);

#[repr(C)]
pub struct Rlimit {
    pub cur: u64,
    pub max: u64,
}

unsafe extern "C" {
    pub fn fork() -> i32;
    pub fn execve(
        path: *const c_char,
        argv: *const *const c_char,
        envp: *const *const c_char,
    ) -> i32;
    pub fn pipe2(fds: *mut i32, flags: i32) -> i32;
    pub fn poll(fds: *mut PollFd, n: usize, timeout: i32) -> i32;
    pub fn read(fd: i32, buf: *mut u8, n: usize) -> isize;
    pub fn write(fd: i32, buf: *const u8, n: usize) -> isize;
    pub fn close(fd: i32) -> i32;
    pub fn dup2(a: i32, b: i32) -> i32;
    pub fn chdir(path: *const c_char) -> i32;
    pub fn setsid() -> i32;
    pub fn setrlimit(resource: i32, r: *const Rlimit) -> i32;
    pub fn getrlimit(resource: i32, r: *mut Rlimit) -> i32;
    pub fn kill(pid: i32, sig: i32) -> i32;
    pub fn waitpid(pid: i32, status: *mut i32, options: i32) -> i32;
    pub fn prctl(op: i32, ...) -> i32;
    pub fn _exit(code: i32) -> !;
    pub fn signal(sig: i32, handler: usize) -> usize;
    pub fn fcntl(fd: i32, cmd: i32, ...) -> i32;
    pub fn open(path: *const c_char, flags: i32, ...) -> i32;
    pub fn __errno_location() -> *mut i32;
    pub fn sigemptyset(set: *mut SigSet) -> i32;
    pub fn sigaddset(set: *mut SigSet, sig: i32) -> i32;
    pub fn sigprocmask(how: i32, set: *const SigSet, old: *mut SigSet) -> i32;
    pub fn signalfd(fd: i32, mask: *const SigSet, flags: i32) -> i32;
    pub fn execvp(file: *const c_char, argv: *const *const c_char) -> i32;
    pub fn setresuid(r: u32, e: u32, s: u32) -> i32;
    pub fn setresgid(r: u32, e: u32, s: u32) -> i32;
    pub fn getresuid(r: *mut u32, e: *mut u32, s: *mut u32) -> i32;
    pub fn getresgid(r: *mut u32, e: *mut u32, s: *mut u32) -> i32;
    pub fn setgroups(n: usize, list: *const u32) -> i32;
    pub fn fchmod(fd: i32, mode: u32) -> i32;
    pub fn fchown(fd: i32, uid: u32, gid: u32) -> i32;
    pub fn capget(header: *mut CapHeader, data: *mut CapData) -> i32;
    pub fn capset(header: *mut CapHeader, data: *const CapData) -> i32;
}

/// The kernel's `struct __user_cap_header_struct`.
#[repr(C)]
pub struct CapHeader {
    pub version: u32,
    pub pid: i32,
}

/// The kernel's `struct __user_cap_data_struct` (two of them, for
/// capabilities 0-31 and 32-63, with version 3).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct CapData {
    pub effective: u32,
    pub permitted: u32,
    pub inheritable: u32,
}

pub const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
pub const CAP_CHOWN: u32 = 0;
pub const CAP_KILL: u32 = 5;
pub const CAP_SETGID: u32 = 6;
pub const CAP_SETUID: u32 = 7;
pub const CAP_SETPCAP: u32 = 8;
pub const PR_SET_KEEPCAPS: i32 = 8;
pub const PR_CAPBSET_DROP: i32 = 24;
pub const PR_CAPBSET_READ: i32 = 23;

/// The kernel's `struct sock_fprog`.
#[repr(C)]
pub struct SockFprog {
    pub len: u16,
    pub filter: *const u8,
}

pub const PR_SET_NO_NEW_PRIVS: i32 = 38;
pub const PR_SET_SECCOMP: i32 = 22;
pub const SECCOMP_MODE_FILTER: u64 = 2;

pub const O_RDONLY: i32 = 0;
pub const O_NONBLOCK: i32 = 0o4000;
pub const O_CLOEXEC: i32 = 0o2000000;
pub const F_GETFL: i32 = 3;
pub const F_SETFL: i32 = 4;
pub const F_DUPFD_CLOEXEC: i32 = 1030;
pub const POLLIN: i16 = 1;
pub const POLLOUT: i16 = 4;
pub const POLLERR: i16 = 8;
pub const POLLHUP: i16 = 16;
pub const POLLNVAL: i16 = 32;
pub const WNOHANG: i32 = 1;
pub const SIGKILL: i32 = 9;
pub const SIGPIPE: i32 = 13;
pub const SIGBUS: i32 = 7;
pub const SIGSEGV: i32 = 11;
pub const SIGCHLD: i32 = 17;
pub const SIG_BLOCK: i32 = 0;
pub const SIG_SETMASK: i32 = 2;
pub const SIG_DFL: usize = 0;
pub const RLIMIT_CPU: i32 = 0;
pub const RLIMIT_FSIZE: i32 = 1;
pub const RLIMIT_CORE: i32 = 4;
pub const RLIMIT_NPROC: i32 = 6;
pub const RLIMIT_NOFILE: i32 = 7;
pub const RLIMIT_AS: i32 = 9;
pub const PR_SET_DUMPABLE: i32 = 4;
pub const PR_GET_DUMPABLE: i32 = 3;
pub const EPERM: i32 = 1;
pub const EINTR: i32 = 4;
pub const EAGAIN: i32 = 11;
pub const ENOENT: i32 = 2;
pub const EACCES: i32 = 13;
pub const ENOTDIR: i32 = 20;
pub const EINVAL: i32 = 22;

pub fn errno() -> i32 {
    // SAFETY: glibc's per-thread errno slot is always valid.
    unsafe { *__errno_location() }
}
