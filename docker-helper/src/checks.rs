//! What the helper checks and installs before anything runs: the seccomp
//! filter, the bind mounts as toolhost checked them, the rlimits of a
//! per-call tool; then its exec.

use super::*;

/// Decodes the filter's hex and installs it (with no_new_privs, which the
/// engine's `no-new-privileges` also sets). Exits 125 if it cannot.
pub(crate) fn install_filter(hex: &[u8]) {
    let fail = |why: String| -> ! {
        eprintln!("[FATAL toolhost-helper] cannot install the seccomp filter: {why}");
        std::process::exit(125);
    };
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    if hex.is_empty() || !hex.len().is_multiple_of(16) {
        fail(format!(
            "{} hex digits is not whole instructions",
            hex.len()
        ));
    }
    let mut bytes = Vec::with_capacity(hex.len() / 2);
    for pair in hex.chunks(2) {
        match (digit(pair[0]), digit(pair[1])) {
            (Some(h), Some(l)) => bytes.push(h << 4 | l),
            _ => fail("not lowercase hex".into()),
        }
    }
    let Ok(len) = u16::try_from(bytes.len() / 8) else {
        fail("too many instructions".into());
    };
    let prog = sys::SockFprog {
        len,
        filter: bytes.as_ptr(),
    };
    // SAFETY: plain prctls; `prog` points at `len` 8-byte instructions in
    // `bytes`, which outlives the call (the kernel copies the program).
    let r = unsafe {
        sys::prctl(sys::PR_SET_NO_NEW_PRIVS, 1u64, 0u64, 0u64, 0u64);
        sys::prctl(
            sys::PR_SET_SECCOMP,
            sys::SECCOMP_MODE_FILTER,
            &prog as *const sys::SockFprog,
            0u64,
            0u64,
        )
    };
    if r != 0 {
        fail(format!("errno {}", sys::errno()));
    }
}

/// The mount points of this mount namespace, as `/proc/self/mountinfo`
/// spells them (field 5, with `\ooo` escapes undone).
pub(crate) fn mount_points() -> Vec<Vec<u8>> {
    let Ok(text) = std::fs::read("/proc/self/mountinfo") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for line in text.split(|b| *b == b'\n') {
        let Some(field) = line.split(|b| *b == b' ').nth(4) else {
            continue;
        };
        let mut p = Vec::with_capacity(field.len());
        let mut i = 0;
        while i < field.len() {
            let oct = |b: u8| (b'0'..=b'7').contains(&b).then(|| b - b'0');
            if field[i] == b'\\'
                && let (Some(a), Some(b), Some(c)) = (
                    field.get(i + 1).copied().and_then(oct),
                    field.get(i + 2).copied().and_then(oct),
                    field.get(i + 3).copied().and_then(oct),
                )
            {
                p.push(a << 6 | b << 3 | c);
                i += 4;
                continue;
            }
            p.push(field[i]);
            i += 1;
        }
        out.push(p);
    }
    out
}

/// Checks every `DEV:INO:PATH`: PATH is a mount point showing that device
/// and inode (not followed if it is a symlink); `ctime:SEC.NSEC:PATH` one
/// showing that inode change time (a runtime that shows no host inodes,
/// gVisor, shows the host's times; a best-effort check, since a writer of
/// two places can give both the same time); `-:-:PATH` only that PATH is a
/// mount point. Exits 125 if one is not.
pub(crate) fn verify_mounts(expect: &[&std::ffi::OsStr]) {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    if expect.is_empty() {
        return;
    }
    let fail = |what: &[u8], why: &str| -> ! {
        eprintln!(
            "[FATAL toolhost-helper] mount check failed: {}: {why}",
            String::from_utf8_lossy(what)
        );
        std::process::exit(125);
    };
    let points = mount_points();
    for e in expect {
        let bytes = e.as_bytes();
        let mut parts = bytes.splitn(3, |b| *b == b':');
        let num = |p: Option<&[u8]>| {
            p.and_then(|p| std::str::from_utf8(p).ok())
                .and_then(|s| s.parse::<u64>().ok())
        };
        /// What a mount must show.
        enum Shows {
            Inode(u64, u64),
            Ctime(i64, i64),
            Anything,
        }
        let (dev, ino, path) = (parts.next(), parts.next(), parts.next());
        let (shows, path) = match (dev, ino, path) {
            (Some(b"-"), Some(b"-"), Some(path)) => (Shows::Anything, path),
            (Some(b"ctime"), Some(t), Some(path)) => {
                let t = std::str::from_utf8(t).ok().and_then(|t| t.split_once('.'));
                match t.map(|(s, n)| (s.parse::<i64>(), n.parse::<i64>())) {
                    Some((Ok(s), Ok(n))) => (Shows::Ctime(s, n), path),
                    _ => fail(bytes, "not ctime:SEC.NSEC:PATH"),
                }
            }
            (dev, ino, Some(path)) => match (num(dev), num(ino)) {
                (Some(dev), Some(ino)) => (Shows::Inode(dev, ino), path),
                _ => fail(bytes, "not DEV:INO:PATH"),
            },
            _ => fail(bytes, "not DEV:INO:PATH"),
        };
        if !points.iter().any(|p| p == path) {
            fail(
                path,
                "not a mount point here (the engine mounted it elsewhere)",
            );
        }
        let meta = std::fs::symlink_metadata(std::ffi::OsStr::from_bytes(path));
        match (shows, meta) {
            (Shows::Anything, _) => {}
            (Shows::Ctime(s, n), Ok(m)) if (m.ctime(), m.ctime_nsec()) == (s, n) => {}
            (Shows::Ctime(..), Ok(_)) => fail(
                path,
                "another place is mounted there than toolhost checked (or it changed meanwhile)",
            ),
            (_, Err(e)) => fail(path, &e.to_string()),
            (Shows::Inode(dev, ino), Ok(m)) if (m.dev(), m.ino()) == (dev, ino) => {}
            (Shows::Inode(..), Ok(_)) => {
                fail(path, "another place is mounted there than toolhost checked")
            }
        }
    }
}

/// Execs the tool `args[0]` (found on `PATH`) with `args`; returns only if
/// it cannot, by exiting as docker's init does.
pub(crate) fn exec(args: &[std::ffi::OsString]) -> ! {
    use std::os::unix::ffi::OsStrExt;
    let Some(program) = args.first() else {
        eprintln!("[FATAL toolhost-helper] exec failed: no program");
        std::process::exit(127);
    };
    let owned: Vec<CString> = args.iter().map(|a| cstring(a.as_bytes())).collect();
    let mut argv: Vec<*const c_char> = owned.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    // Rust's runtime ignores SIGPIPE; a tool gets the default back (as the
    // server's children do), or `yes | head` would not end.
    // SAFETY: `argv` is a null-terminated array of C strings that `owned`
    // keeps alive; execvp returns only on failure.
    unsafe {
        sys::signal(sys::SIGPIPE, sys::SIG_DFL);
        sys::execvp(argv[0], argv.as_ptr());
    }
    let errno = sys::errno();
    let why = std::io::Error::from_raw_os_error(errno);
    eprintln!(
        "[FATAL toolhost-helper] exec {} failed: {why}",
        program.to_string_lossy()
    );
    std::process::exit(if errno == sys::ENOENT || errno == sys::ENOTDIR {
        127
    } else {
        126
    });
}

/// Sets the rlimits of a per-call tool (`--rlimit NAME=SOFT:HARD`, `NAME`
/// one of cpu, fsize, core, nproc, nofile, as) on the helper, which the exec
/// passes on: the engine's ulimits say the same, but an engine may drop
/// them (rootless Podman's Docker-compatible API does). Only ever lowered
/// ([`lower_limit`]): a limit that cannot be set exits 125, and nothing runs.
pub(crate) fn set_limits(specs: &[&std::ffi::OsStr]) {
    for spec in specs {
        let text = spec.to_string_lossy();
        let parsed = text.split_once('=').and_then(|(name, v)| {
            let (soft, hard) = v.split_once(':')?;
            let resource = match name {
                "cpu" => sys::RLIMIT_CPU,
                "fsize" => sys::RLIMIT_FSIZE,
                "core" => sys::RLIMIT_CORE,
                "nproc" => sys::RLIMIT_NPROC,
                "nofile" => sys::RLIMIT_NOFILE,
                "as" => sys::RLIMIT_AS,
                _ => return None,
            };
            let (cur, max) = (soft.parse::<u64>().ok()?, hard.parse::<u64>().ok()?);
            (cur <= max).then_some((resource, cur, max))
        });
        let Some((resource, cur, max)) = parsed else {
            eprintln!("[FATAL toolhost-helper] bad --rlimit {text:?}");
            std::process::exit(125);
        };
        if !lower_limit(resource, cur, max) {
            let why = std::io::Error::from_raw_os_error(sys::errno());
            eprintln!("[FATAL toolhost-helper] cannot set --rlimit {text}: {why}");
            std::process::exit(125);
        }
    }
}

/// Sets `resource` to at most `cur` and `max`, never above what it is now
/// (a ceiling asked for above the current one is already held by it);
/// `false` when the kernel refused.
pub(crate) fn lower_limit(resource: i32, cur: u64, max: u64) -> bool {
    let mut now = sys::Rlimit { cur: 0, max: 0 };
    // SAFETY: getrlimit and setrlimit of valid structs.
    unsafe {
        if sys::getrlimit(resource, &mut now) < 0 {
            return false;
        }
        let max = max.min(now.max);
        let cur = cur.min(max);
        sys::setrlimit(resource, &sys::Rlimit { cur, max }) == 0
    }
}

/// Checks that the container's cgroup holds it to the limits toolhost asked
/// the engine for (`--cgroup-limits MEMORY:PIDS`, bytes and processes, `-`
/// for none): an engine can list the controllers and still create a
/// container with no cgroup (Podman with `cgroups = "disabled"`). Reads
/// cgroup v2's `memory.max` and `pids.max`, or v1's
/// `memory/memory.limit_in_bytes` and `pids/pids.max`. A limit that is
/// missing, unreadable or above the one asked exits 125, and nothing runs.
pub(crate) fn verify_cgroup_limits(spec: &std::ffi::OsStr) {
    let text = spec.to_string_lossy();
    let fail = |why: String| -> ! {
        eprintln!("[FATAL toolhost-helper] cgroup limits not as asked: {why}");
        std::process::exit(125);
    };
    let Some((memory, pids)) = text.split_once(':') else {
        fail(format!("bad --cgroup-limits {text:?}"));
    };
    let read = |paths: [&str; 2]| -> Option<(String, String)> {
        paths.iter().find_map(|p| {
            std::fs::read_to_string(p)
                .ok()
                .map(|v| (p.to_string(), v.trim().to_string()))
        })
    };
    for (want, paths, name) in [
        (
            memory,
            [
                "/sys/fs/cgroup/memory.max",
                "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            ],
            "memory",
        ),
        (
            pids,
            ["/sys/fs/cgroup/pids.max", "/sys/fs/cgroup/pids/pids.max"],
            "pids",
        ),
    ] {
        if want == "-" {
            continue;
        }
        let Ok(want) = want.parse::<u64>() else {
            fail(format!("bad --cgroup-limits {text:?}"));
        };
        let Some((path, have)) = read(paths) else {
            fail(format!("no {name} limit to read ({})", paths.join(", ")));
        };
        match have.parse::<u64>() {
            Ok(have) if have <= want => {}
            _ => fail(format!("{path} is {have:?}, above the {want} asked")),
        }
    }
}
