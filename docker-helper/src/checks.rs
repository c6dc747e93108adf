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
    for (text, (resource, cur, max)) in parse_limits(specs) {
        if !lower_limit(resource, cur, max) {
            let why = std::io::Error::from_raw_os_error(sys::errno());
            eprintln!("[FATAL toolhost-helper] cannot set --rlimit {text}: {why}");
            std::process::exit(125);
        }
    }
}

/// Each `--rlimit NAME=SOFT:HARD` as it was given and as (resource, soft,
/// hard); a bad one exits 125.
pub(crate) fn parse_limits(specs: &[&std::ffi::OsStr]) -> Vec<(String, (i32, u64, u64))> {
    let mut out = Vec::new();
    for spec in specs {
        let text = spec.to_string_lossy().into_owned();
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
        let Some(limit) = parsed else {
            eprintln!("[FATAL toolhost-helper] bad --rlimit {text:?}");
            std::process::exit(125);
        };
        out.push((text, limit));
    }
    out
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
/// container with no cgroup (Podman with `cgroups = "disabled"`). Each
/// controller is read where its hierarchy is mounted (`/proc/self/mountinfo`),
/// and only if that mount shows this process's own cgroup
/// (`/proc/self/cgroup`), not an ancestor shared with others: cgroup v2's
/// `memory.max`, `memory.swap.max` (0: memory is memory plus swap) and
/// `pids.max`, or v1's `memory.limit_in_bytes`, `memory.memsw.limit_in_bytes`
/// (where swap is accounted) and `pids.max`. A limit that is missing,
/// unreadable or above the one asked exits 125, and nothing runs.
pub(crate) fn verify_cgroup_limits(spec: &std::ffi::OsStr) {
    let text = spec.to_string_lossy();
    let fail = |why: String| -> ! {
        eprintln!("[FATAL toolhost-helper] cgroup limits not as asked: {why}");
        std::process::exit(125);
    };
    let parse = |v: &str| -> Option<Option<u64>> {
        if v == "-" {
            Some(None)
        } else {
            v.parse().ok().map(Some)
        }
    };
    let Some((Some(memory), Some(pids))) = text.split_once(':').map(|(m, p)| (parse(m), parse(p)))
    else {
        fail(format!("bad --cgroup-limits {text:?}"));
    };
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let read = |dir: &str, file: &str| -> Option<String> {
        std::fs::read_to_string(format!("{dir}/{file}"))
            .ok()
            .map(|v| v.trim().to_string())
    };
    let at_most = |what: String, have: Option<String>, want: u64| match have
        .as_deref()
        .map(|h| (h, h.parse::<u64>()))
    {
        Some((_, Ok(n))) if n <= want => {}
        Some((h, _)) => fail(format!("{what} is {h:?}, above the {want} asked")),
        None => fail(format!("{what} cannot be read")),
    };
    for (want, controller) in [(memory, "memory"), (pids, "pids")] {
        let Some(want) = want else { continue };
        let Some((dir, v2)) = own_cgroup_dir(&own, &mounts, controller) else {
            fail(format!(
                "no {controller} hierarchy here shows this process's own cgroup"
            ));
        };
        match (controller, v2) {
            ("memory", true) => {
                at_most(format!("{dir}/memory.max"), read(&dir, "memory.max"), want);
                if let Some(swap) = read(&dir, "memory.swap.max") {
                    at_most(format!("{dir}/memory.swap.max"), Some(swap), 0);
                }
            }
            ("memory", false) => {
                at_most(
                    format!("{dir}/memory.limit_in_bytes"),
                    read(&dir, "memory.limit_in_bytes"),
                    want,
                );
                if let Some(memsw) = read(&dir, "memory.memsw.limit_in_bytes") {
                    at_most(
                        format!("{dir}/memory.memsw.limit_in_bytes"),
                        Some(memsw),
                        want,
                    );
                }
            }
            _ => at_most(format!("{dir}/pids.max"), read(&dir, "pids.max"), want),
        }
    }
}

/// Where `controller`'s hierarchy is mounted showing this process's own
/// cgroup: the mount point, and whether it is cgroup v2. `own` is
/// `/proc/self/cgroup`, `mounts` `/proc/self/mountinfo`.
pub(crate) fn own_cgroup_dir(own: &str, mounts: &str, controller: &str) -> Option<(String, bool)> {
    // v1: `ID:CONTROLLERS:PATH` naming the controller; v2: `0::PATH`.
    let v1 = own.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, names, path) = (f.next()?, f.next()?, f.next()?);
        names.split(',').any(|n| n == controller).then_some(path)
    });
    let v2 = own.lines().find_map(|l| l.strip_prefix("0::"));
    for line in mounts.lines() {
        // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS
        let Some((head, tail)) = line.split_once(" - ") else {
            continue;
        };
        let f: Vec<&str> = head.split(' ').collect();
        let t: Vec<&str> = tail.split(' ').collect();
        let (Some(root), Some(point), Some(fstype)) = (f.get(3), f.get(4), t.first()) else {
            continue;
        };
        let superopts = t.get(2).copied().unwrap_or("");
        match *fstype {
            "cgroup" if superopts.split(',').any(|o| o == controller) && v1 == Some(*root) => {
                return Some((point.to_string(), false));
            }
            "cgroup2" if v1.is_none() && v2 == Some(*root) => {
                return Some((point.to_string(), true));
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::own_cgroup_dir;

    const V1_CGROUP: &str = "9:name=systemd:/libpod_parent/libpod-abc\n\
        8:pids:/libpod_parent/libpod-abc\n\
        4:memory:/libpod_parent/libpod-abc\n";

    fn v1_mounts(memory_root: &str) -> String {
        format!(
            "600 590 0:50 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro\n\
             601 600 0:30 /libpod_parent/libpod-abc /sys/fs/cgroup/pids ro - cgroup cgroup rw,pids\n\
             602 600 0:31 {memory_root} /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n"
        )
    }

    #[test]
    fn a_v1_hierarchy_counts_only_when_it_shows_this_cgroup() {
        let mounts = v1_mounts("/libpod_parent/libpod-abc");
        assert_eq!(
            own_cgroup_dir(V1_CGROUP, &mounts, "memory"),
            Some(("/sys/fs/cgroup/memory".to_string(), false))
        );
        assert_eq!(
            own_cgroup_dir(V1_CGROUP, &mounts, "pids"),
            Some(("/sys/fs/cgroup/pids".to_string(), false))
        );
        // An ancestor (shared with others) mounted there: not this cgroup.
        let shared = v1_mounts("/libpod_parent");
        assert_eq!(own_cgroup_dir(V1_CGROUP, &shared, "memory"), None);
        // No hierarchy for the controller at all.
        assert_eq!(own_cgroup_dir("0::/\n", &mounts, "memory"), None);
    }

    #[test]
    fn a_v2_hierarchy_counts_at_this_cgroup_only() {
        let mounts = "700 690 0:40 / /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n";
        assert_eq!(
            own_cgroup_dir("0::/\n", mounts, "memory"),
            Some(("/sys/fs/cgroup".to_string(), true))
        );
        // In the host's cgroup namespace the process sits below the root.
        assert_eq!(own_cgroup_dir("0::/system.slice/x\n", mounts, "pids"), None);
    }
}
