//! Namespaces: the shared empty network namespace and, for an unprivileged
//! toolhost, the shared user namespace, each made once per process by a
//! helper child and kept open as fds.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::OnceLock;

use libc::c_int;

/// An empty network namespace shared by the calls of this process, created
/// the first time it is needed (root only). Sharing it costs nothing per call,
/// where a new namespace per call costs about half a millisecond; the tools
/// cannot use it to meet each other: no interface is up, CAP_NET_ADMIN is
/// dropped (so none can be brought up), and abstract unix sockets are scoped
/// by Landlock on ABI 6+.
pub(crate) fn shared_netns() -> Result<RawFd, String> {
    static NS: OnceLock<Result<OwnedFd, String>> = OnceLock::new();
    NS.get_or_init(|| {
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return Err("toolhost is not root (setns needs CAP_SYS_ADMIN)".into());
        }
        // A namespace is per thread: make it on a thread of its own, which
        // exits afterwards, so no toolhost thread leaves the host's network.
        std::thread::Builder::new()
            .name("toolhost-netns".into())
            .spawn(|| {
                // SAFETY: affects only this thread.
                if unsafe { libc::unshare(libc::CLONE_NEWNET) } < 0 {
                    return Err(format!(
                        "unshare(CLONE_NEWNET): {}",
                        io::Error::last_os_error()
                    ));
                }
                // SAFETY: open with a NUL-terminated literal path.
                let fd = unsafe {
                    libc::open(
                        c"/proc/thread-self/ns/net".as_ptr(),
                        libc::O_RDONLY | libc::O_CLOEXEC,
                    )
                };
                if fd < 0 {
                    return Err(format!(
                        "open /proc/thread-self/ns/net: {}",
                        io::Error::last_os_error()
                    ));
                }
                // SAFETY: a fresh fd.
                Ok(unsafe { OwnedFd::from_raw_fd(fd) })
            })
            .map_err(|e| format!("thread: {e}"))?
            .join()
            .map_err(|_| "netns thread panicked".to_string())?
    })
    .as_ref()
    .map(|fd| fd.as_raw_fd())
    .map_err(Clone::clone)
}

/// The user namespace (and the empty network namespace it owns) that an
/// unprivileged toolhost runs its tools in, created once per process: as
/// `(user ns fd, net ns fd)`. It maps only toolhost's own uid and gid (to
/// themselves), so a tool keeps its identity and gains no capability once it
/// execs (its uid is not 0 there); owning the namespace is what lets the
/// supervisor create a PID namespace and the tool enter the network one.
///
/// A namespace needs a single-threaded process to create it: a short-lived
/// forked child makes both, toolhost opens them through /proc and kills it.
pub(crate) fn shared_userns() -> Result<(RawFd, RawFd), String> {
    static NS: OnceLock<Result<(OwnedFd, OwnedFd), String>> = OnceLock::new();
    NS.get_or_init(make_userns)
        .as_ref()
        .map(|(u, n)| (u.as_raw_fd(), n.as_raw_fd()))
        .map_err(Clone::clone)
}

pub(super) fn make_userns() -> Result<(OwnedFd, OwnedFd), String> {
    // SAFETY: these cannot fail.
    let (uid, gid, me) = unsafe { (libc::geteuid(), libc::getegid(), libc::getpid()) };
    if uid == 0 {
        return Err("toolhost is root: it needs no user namespace".into());
    }
    let uid_map = format!("{uid} {uid} 1\n");
    let gid_map = format!("{gid} {gid} 1\n");
    let mut fds = [0; 2];
    // SAFETY: socketpair writes two fds into the array.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    } < 0
    {
        return Err(format!("socketpair: {}", io::Error::last_os_error()));
    }
    // SAFETY: fresh fds owned by nobody else.
    let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: the child makes system calls only, on data prepared above.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", io::Error::last_os_error()));
    }
    if pid == 0 {
        // SAFETY: in the forked child: system calls only, then _exit.
        unsafe { userns_child(theirs.as_raw_fd(), me, &uid_map, &gid_map) }
    }
    drop(theirs);
    let received = receive_ns_fds(&ours);
    // SAFETY: our own child, not yet reaped: its pid cannot have been reused.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        while libc::waitpid(pid, std::ptr::null_mut(), 0) < 0
            && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
        {}
    }
    received
}

/// The namespace helper, in a forked copy of toolhost: makes the user and
/// network namespaces, writes the maps, and sends their fds back on `sock`
/// (with a status: the failed step and errno). The copy is made dumpable
/// (toolhost is not, which makes /proc/self/* root's and the maps unwritable)
/// only for the three writes, then not again, before it reads anything back.
///
/// # Safety
/// Only in a child just forked from toolhost, which it ends (`_exit`): it
/// makes only system calls, on `sock` and on memory the child owns.
pub(super) unsafe fn userns_child(
    sock: c_int,
    parent: libc::pid_t,
    uid_map: &str,
    gid_map: &str,
) -> ! {
    // SAFETY: in the forked child (see `# Safety`): system calls on plain
    // values, on `sock` and on the map strings, which live through them.
    unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        );
        if libc::getppid() != parent {
            libc::_exit(1);
        }
        let mut step: u8 = 0;
        if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) < 0 {
            step = 1;
        } else {
            libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0);
            if !write_proc(c"/proc/self/setgroups", b"deny") {
                step = 2;
            } else if !write_proc(c"/proc/self/uid_map", uid_map.as_bytes()) {
                step = 3;
            } else if !write_proc(c"/proc/self/gid_map", gid_map.as_bytes()) {
                step = 4;
            }
            let e = errno_byte();
            libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
            set_errno_raw(e);
        }
        let mut fds = [-1 as c_int; 2];
        if step == 0 {
            fds[0] = libc::open(
                c"/proc/self/ns/user".as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC,
            );
            fds[1] = libc::open(
                c"/proc/self/ns/net".as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC,
            );
            if fds[0] < 0 || fds[1] < 0 {
                step = 5;
            }
        }
        let mut msg = [step, errno_byte()];
        let mut iov = libc::iovec {
            iov_base: msg.as_mut_ptr().cast(),
            iov_len: msg.len(),
        };
        #[repr(C, align(8))]
        struct Cmsg([u8; 64]);
        let mut control = Cmsg([0; 64]);
        let mut hdr: libc::msghdr = std::mem::zeroed();
        hdr.msg_iov = &mut iov;
        hdr.msg_iovlen = 1;
        if step == 0 {
            let payload = (2 * std::mem::size_of::<c_int>()) as u32;
            hdr.msg_control = control.0.as_mut_ptr().cast();
            hdr.msg_controllen = libc::CMSG_SPACE(payload) as _;
            let c = libc::CMSG_FIRSTHDR(&hdr);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(payload) as _;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr().cast::<u8>(),
                libc::CMSG_DATA(c),
                payload as usize,
            );
        }
        libc::sendmsg(sock, &hdr, 0);
        libc::_exit(0)
    }
}

/// Receives the helper's status and, on success, the two namespace fds.
pub(super) fn receive_ns_fds(sock: &OwnedFd) -> Result<(OwnedFd, OwnedFd), String> {
    let mut msg = [0u8; 2];
    let mut iov = libc::iovec {
        iov_base: msg.as_mut_ptr().cast(),
        iov_len: msg.len(),
    };
    #[repr(C, align(8))]
    struct Cmsg([u8; 64]);
    let mut control = Cmsg([0; 64]);
    // SAFETY: a zeroed msghdr is valid; the pointers set below outlive the call.
    let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
    hdr.msg_iov = &mut iov;
    hdr.msg_iovlen = 1;
    hdr.msg_control = control.0.as_mut_ptr().cast();
    hdr.msg_controllen = control.0.len() as _;
    let n = loop {
        // SAFETY: recvmsg into the buffers above.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut hdr, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        break n;
    };
    // Take ownership of any fds that came, whatever else happened.
    let mut got: Vec<OwnedFd> = Vec::new();
    // SAFETY: walks the control messages the kernel filled in.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&hdr);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let len = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let data = libc::CMSG_DATA(c);
                for k in 0..len / std::mem::size_of::<c_int>() {
                    let mut fd: c_int = 0;
                    std::ptr::copy_nonoverlapping(
                        data.add(k * std::mem::size_of::<c_int>()),
                        (&mut fd as *mut c_int).cast::<u8>(),
                        std::mem::size_of::<c_int>(),
                    );
                    if fd >= 0 {
                        got.push(OwnedFd::from_raw_fd(fd));
                    }
                }
            }
            c = libc::CMSG_NXTHDR(&hdr, c);
        }
    }
    if n != 2 {
        return Err("the namespace helper died".into());
    }
    if msg[0] != 0 {
        let what = [
            "",
            "unshare(CLONE_NEWUSER | CLONE_NEWNET)",
            "write setgroups",
            "write uid_map",
            "write gid_map",
            "open /proc/self/ns",
        ];
        return Err(format!(
            "{}: {}",
            what[msg[0] as usize % what.len()],
            io::Error::from_raw_os_error(msg[1] as i32)
        ));
    }
    let mut it = got.into_iter();
    match (it.next(), it.next()) {
        (Some(user), Some(net)) => Ok((user, net)),
        _ => Err("the namespace helper sent no namespaces".into()),
    }
}

pub(super) fn set_errno_raw(e: u8) {
    // SAFETY: writes this thread's errno.
    unsafe { *libc::__errno_location() = c_int::from(e) };
}

/// Writes `data` to a /proc file in one write.
///
/// # Safety
/// Forked child only (see `userns_child`): no allocation, system calls only.
pub(super) unsafe fn write_proc(path: &std::ffi::CStr, data: &[u8]) -> bool {
    // SAFETY: open, write and close with a valid C string, a buffer of
    // `data.len()` bytes and the fd just opened.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return false;
        }
        let ok = libc::write(fd, data.as_ptr().cast(), data.len()) == data.len() as isize;
        libc::close(fd);
        ok
    }
}

pub(super) fn errno_byte() -> u8 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(0)
        .clamp(0, 255) as u8
}
