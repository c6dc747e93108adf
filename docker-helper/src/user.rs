//! Warm mode's two users (`--call-user UID:GID --serve-as UID:GID`): the
//! helper serves under a uid of its own, which no tool ever has, and each
//! call's process takes the call's user just before its exec.
//!
//! Why: a tool of the helper's uid is stopped from reading the helper's
//! `/proc/1/fd` (the protocol) or signalling it only by rules a kernel may
//! not keep: Linux's non-dumpable flag and PID 1's immunity. gVisor keeps
//! neither (it opens `/proc/1/fd/*` to the same uid and lets it kill PID 1).
//! A different uid is refused by the plainest checks of every kernel: a
//! signal needs the same uid or `CAP_KILL`, ptrace and `/proc/PID/fd` need
//! the same uids or `CAP_SYS_PTRACE`, and the helper's `/proc` files belong
//! to it (it stays dumpable, so that they are not root's: a root tool would
//! own those).
//!
//! The container starts the helper as uid 0 with only `CAP_KILL`,
//! `CAP_SETUID`, `CAP_SETGID` and `CAP_SETPCAP` (an engine gives a non-root
//! user none), and `CAP_CHOWN` under gVisor ([`hide_protocol`]). [`serve_as`] keeps those four across its change to the serving
//! uid, with no supplementary group. [`take_call_user`], in each call's
//! child: every capability out of the bounding set (so not even a root tool's
//! exec can get one back), the call's gid as its only group, its gid and uid,
//! then no capability at all, checked.

use super::*;

/// The capabilities the serving helper holds: to take a call's user, to
/// kill what a call leaves (of another uid), to empty a call's bounding set.
const SERVE_CAPS: u32 =
    1 << sys::CAP_KILL | 1 << sys::CAP_SETUID | 1 << sys::CAP_SETGID | 1 << sys::CAP_SETPCAP;

/// A `UID:GID` pair of numbers.
pub(crate) fn parse_ids(text: &str) -> Option<(u32, u32)> {
    let (u, g) = text.split_once(':')?;
    Some((u.parse().ok()?, g.parse().ok()?))
}

fn header() -> sys::CapHeader {
    sys::CapHeader {
        version: sys::LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    }
}

/// This process's capability sets (0-31, 32-63), or `None`.
fn caps() -> Option<[sys::CapData; 2]> {
    let mut h = header();
    let mut d = [sys::CapData::default(); 2];
    // SAFETY: capget writes two structs for version 3.
    (unsafe { sys::capget(&mut h, d.as_mut_ptr()) } == 0).then_some(d)
}

fn set_caps(effective_and_permitted: u32) -> bool {
    let mut h = header();
    let d = [
        sys::CapData {
            effective: effective_and_permitted,
            permitted: effective_and_permitted,
            inheritable: 0,
        },
        sys::CapData::default(),
    ];
    // SAFETY: capset reads two structs for version 3.
    unsafe { sys::capset(&mut h, d.as_ptr()) == 0 }
}

fn ids() -> ([u32; 3], [u32; 3]) {
    let (mut u, mut g) = ([u32::MAX; 3], [u32::MAX; 3]);
    // SAFETY: each call writes three u32s.
    unsafe {
        sys::getresuid(&mut u[0], &mut u[1], &mut u[2]);
        sys::getresgid(&mut g[0], &mut g[1], &mut g[2]);
    }
    (u, g)
}

fn fatal(what: &str) -> ! {
    let why = std::io::Error::from_raw_os_error(sys::errno());
    eprintln!("[FATAL toolhost-helper] {what}: {why}");
    std::process::exit(125)
}

/// Turns the helper (uid 0, holding [`SERVE_CAPS`]) into the serving uid
/// and gid, with no supplementary group, keeping those capabilities and no
/// others; exits 125 if any step fails or the result is not exactly that.
pub(crate) fn serve_as((uid, gid): (u32, u32), call: (u32, u32), hide: bool) {
    if uid == call.0 || gid == call.1 || uid == 0 || gid == 0 {
        eprintln!(
            "[FATAL toolhost-helper] the serving ids {uid}:{gid} must be neither the call's ({}:{}) nor 0",
            call.0, call.1
        );
        std::process::exit(125);
    }
    // Hiding the protocol gives its fds to the serving ids: CAP_CHOWN, for
    // that alone (dropped with the change of uid).
    let needed = SERVE_CAPS | if hide { 1 << sys::CAP_CHOWN } else { 0 };
    match caps() {
        Some(c) if c[0].effective & needed == needed => {}
        _ => {
            eprintln!(
                "[FATAL toolhost-helper] --serve-as needs CAP_KILL, CAP_SETUID, CAP_SETGID and CAP_SETPCAP, and CAP_CHOWN with --hide-protocol (the container's user must be 0 with those added)"
            );
            std::process::exit(125);
        }
    }
    if hide {
        hide_protocol((uid, gid));
    }
    // SAFETY: plain credential syscalls on this single-threaded process.
    unsafe {
        if sys::prctl(sys::PR_SET_KEEPCAPS, 1u64, 0u64, 0u64, 0u64) < 0 {
            fatal("PR_SET_KEEPCAPS");
        }
        if sys::setgroups(0, std::ptr::null()) < 0 {
            fatal("setgroups");
        }
        if sys::setresgid(gid, gid, gid) < 0 {
            fatal("setresgid");
        }
        if sys::setresuid(uid, uid, uid) < 0 {
            fatal("setresuid");
        }
    }
    // Keep-caps stays set: a call's pipes are made with the call's
    // effective uid (`with_call_ids`), which may be 0, and leaving 0 would
    // otherwise empty the permitted set. A call's exec resets it.
    if !set_caps(SERVE_CAPS) {
        fatal("capset");
    }
    dumpable();
    if !is_serving((uid, gid)) || groups_count() != 0 {
        eprintln!(
            "[FATAL toolhost-helper] the serving user is not {uid}:{gid} with only its four capabilities"
        );
        std::process::exit(125);
    }
}

/// Mode 0 on the protocol's fds (0-2, pipes or sockets of the engine),
/// then the serving ids as their owner, while the helper is still uid 0
/// (their owner) with `CAP_CHOWN`. gVisor opens `/proc/1/fd/N` to anyone
/// whom the file's own mode admits, and these belong to root there: a root
/// tool could read the next calls' requests or forge their answers, or chmod
/// them first as their owner. Owned by the serving uid with no permission
/// bit, they are open to no tool: none has that uid, and none has a
/// capability (the container filter refuses user namespaces, in which a
/// tool would hold some over its own files). Exits 125 if an fd is not a
/// pipe or socket (its mode may be another's to use, as `/dev/null`'s) or
/// keeps a bit.
fn hide_protocol((uid, gid): (u32, u32)) {
    use std::os::fd::FromRawFd;
    use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
    for fd in 0..3 {
        // SAFETY: fds 0-2 are open (the attach stream); ManuallyDrop keeps
        // them open when the File goes.
        let file = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(fd) });
        let kind = match file.metadata() {
            Ok(m) => m.file_type(),
            Err(e) => {
                eprintln!("[FATAL toolhost-helper] fd {fd}: {e}");
                std::process::exit(125);
            }
        };
        // gVisor shows a host pipe as of no known type.
        if kind.is_file()
            || kind.is_dir()
            || kind.is_symlink()
            || kind.is_char_device()
            || kind.is_block_device()
        {
            eprintln!(
                "[FATAL toolhost-helper] fd {fd} is not a pipe or socket: the protocol runs on the attach stream"
            );
            std::process::exit(125);
        }
        // The mode first, while the helper (uid 0) is their owner.
        // SAFETY: a plain fchmod and fchown of an fd of this process.
        if unsafe { sys::fchmod(fd, 0) } < 0 {
            fatal("chmod of the protocol's fds");
        }
        // SAFETY: as above.
        if unsafe { sys::fchown(fd, uid, gid) } < 0 {
            fatal("chown of the protocol's fds");
        }
        let now = file
            .metadata()
            .ok()
            .map(|m| (m.permissions().mode() & 0o7777, m.uid(), m.gid()));
        if now != Some((0, uid, gid)) {
            eprintln!("[FATAL toolhost-helper] fd {fd} is {now:?}, not mode 0 of {uid}:{gid}");
            std::process::exit(125);
        }
    }
}

fn groups_count() -> i32 {
    unsafe extern "C" {
        fn getgroups(n: i32, list: *mut u32) -> i32;
    }
    // SAFETY: with a size of 0, getgroups only counts.
    unsafe { getgroups(0, std::ptr::null_mut()) }
}

/// In a call's child, before its exec: no capability left in the bounding
/// set, the call's gid as its only group, its gid and uid, then no
/// capability in any set; `false` (with errno) if a step fails or any
/// capability or other id remains. Only syscalls: it runs between fork and
/// exec.
///
/// # Safety
/// Call only in the forked child of the (single-threaded) helper.
pub(crate) unsafe fn take_call_user((uid, gid): (u32, u32)) -> bool {
    // SAFETY: credential syscalls in the child, on values prepared before.
    unsafe {
        for cap in 0..64u64 {
            if sys::prctl(sys::PR_CAPBSET_DROP, cap, 0u64, 0u64, 0u64) < 0 {
                // Past the kernel's last capability.
                if sys::errno() == sys::EINVAL && cap > u64::from(sys::CAP_SETPCAP) {
                    break;
                }
                return false;
            }
            // Checked: capget does not show the bounding set.
            if sys::prctl(sys::PR_CAPBSET_READ, cap, 0u64, 0u64, 0u64) != 0 {
                *sys::__errno_location() = sys::EPERM;
                return false;
            }
        }
        let groups = [gid];
        if sys::setgroups(1, groups.as_ptr()) < 0
            || sys::setresgid(gid, gid, gid) < 0
            || sys::setresuid(uid, uid, uid) < 0
        {
            return false;
        }
    }
    if !set_caps(0) {
        return false;
    }
    if ids() != ([uid; 3], [gid; 3]) || caps() != Some([sys::CapData::default(); 2]) {
        // SAFETY: errno is this thread's.
        unsafe { *sys::__errno_location() = sys::EPERM };
        return false;
    }
    true
}

/// Runs `f` with the call's uid and gid as the helper's effective ones
/// (its real and saved ones stay the serving ids), then the serving ones
/// again: the pipes made there (the call's stdin, stdout and stderr) belong
/// to the call's user, who can then open them again as `/dev/stdout` or
/// `/proc/self/fd/N`, as a tool can in a container of its own. No tool runs
/// meanwhile: every process of the last call is gone before its end is
/// reported, and this call's starts after. `None` (errno set) if the ids
/// could not be taken; the helper exits if it cannot be the serving user
/// with its four capabilities again.
pub(crate) fn with_call_ids<T>(
    (uid, gid): (u32, u32),
    (serve_uid, serve_gid): (u32, u32),
    f: impl FnOnce() -> T,
) -> Option<T> {
    let keep = u32::MAX;
    // SAFETY: plain credential syscalls on this single-threaded process.
    let set =
        unsafe { sys::setresgid(keep, gid, keep) == 0 && sys::setresuid(keep, uid, keep) == 0 };
    let errno = if set { sys::EPERM } else { sys::errno() };
    let taken = set && ids() == ([serve_uid, uid, serve_uid], [serve_gid, gid, serve_gid]);
    let out = taken.then(f);
    // The gid first: leaving an effective uid of 0 empties the effective
    // set (keep-caps, set by `serve_as`, keeps the permitted one).
    // SAFETY: as above.
    let back = unsafe {
        sys::setresgid(keep, serve_gid, keep) == 0 && sys::setresuid(keep, serve_uid, keep) == 0
    };
    if back {
        dumpable();
    }
    if !back || !set_caps(SERVE_CAPS) || !is_serving((serve_uid, serve_gid)) {
        fatal("cannot be the serving user again");
    }
    if out.is_none() {
        // SAFETY: errno is this thread's.
        unsafe { *sys::__errno_location() = errno };
    }
    out
}

/// Whether this process is `uid:gid` (real, effective, saved) with exactly
/// [`SERVE_CAPS`] as its effective and permitted sets.
fn is_serving((uid, gid): (u32, u32)) -> bool {
    let want = sys::CapData {
        effective: SERVE_CAPS,
        permitted: SERVE_CAPS,
        inheritable: 0,
    };
    // SAFETY: a plain prctl.
    let dumpable = unsafe { sys::prctl(sys::PR_GET_DUMPABLE, 0u64, 0u64, 0u64, 0u64) };
    ids() == ([uid; 3], [gid; 3])
        && caps() == Some([want, sys::CapData::default()])
        && dumpable == 1
}

/// Dumpable again, so that the helper's `/proc` files are its own uid's:
/// every change of its effective ids clears the flag, and then they are
/// root's, whom a tool may be.
fn dumpable() {
    // SAFETY: a plain prctl.
    if unsafe { sys::prctl(sys::PR_SET_DUMPABLE, 1u64, 0u64, 0u64, 0u64) } < 0 {
        fatal("PR_SET_DUMPABLE");
    }
}

/// The home dir the container's `/etc/passwd` gives `uid`, as the engine
/// sets `HOME` for a container's user: the image's entry, else `/`.
pub(crate) fn home_of(uid: u32, passwd: &[u8]) -> Vec<u8> {
    for line in passwd.split(|&b| b == b'\n') {
        let fields: Vec<&[u8]> = line.split(|&b| b == b':').collect();
        if fields.len() >= 7
            && std::str::from_utf8(fields[2])
                .ok()
                .and_then(|u| u.parse::<u32>().ok())
                == Some(uid)
            && !fields[5].is_empty()
        {
            return fields[5].to_vec();
        }
    }
    b"/".to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_two_numbers() {
        assert_eq!(parse_ids("1000:1001"), Some((1000, 1001)));
        assert_eq!(parse_ids("0:0"), Some((0, 0)));
        for bad in [
            "1000",
            "nobody:1",
            "1:",
            ":1",
            "1:2:3",
            "-1:0",
            "4294967296:0",
        ] {
            assert_eq!(parse_ids(bad), None, "{bad}");
        }
    }

    #[test]
    fn home_is_the_passwd_entry_or_the_root_dir() {
        let passwd = b"root:x:0:0:root:/root:/bin/sh\nu:x:1000:1000::/home/u:/bin/sh\nbad:x:7\nnohome:x:5:5:::/bin/sh\n";
        assert_eq!(home_of(0, passwd), b"/root");
        assert_eq!(home_of(1000, passwd), b"/home/u");
        assert_eq!(home_of(7, passwd), b"/");
        assert_eq!(home_of(5, passwd), b"/");
        assert_eq!(home_of(42, b""), b"/");
    }
}
