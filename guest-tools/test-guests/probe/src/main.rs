//! Test guest (not shipped as a tool): does whatever hostile thing its
//! arguments say, so the host's tests can check each limit precisely.

use std::io::{Read, Write};

common::describe!(b"TEST GUEST: hostile probe for toolhost's attack tests");

/// wasi-libc's `symlink` (std's is unstable on WASI).
fn symlink(target: &str, link: &str) -> std::io::Result<()> {
    unsafe extern "C" {
        fn symlink(target: *const std::ffi::c_char, link: *const std::ffi::c_char) -> i32;
    }
    let (t, l) = (
        std::ffi::CString::new(target)?,
        std::ffi::CString::new(link)?,
    );
    // SAFETY: both are NUL-terminated strings that outlive the call.
    if unsafe { symlink(t.as_ptr(), l.as_ptr()) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// preopens: one line per preopened dir, `FD NAME`, from fd 3 up to the
/// first fd that is not one (preview 1 only).
#[cfg(target_env = "p1")]
fn preopens() {
    #[link(wasm_import_module = "wasi_snapshot_preview1")]
    unsafe extern "C" {
        fn fd_prestat_get(fd: u32, buf: *mut u32) -> u16;
        fn fd_prestat_dir_name(fd: u32, path: *mut u8, len: u32) -> u16;
    }
    for fd in 3u32.. {
        // A prestat is a tag (0: dir) and the name's length, 4 bytes each.
        let mut st = [0u32; 2];
        // SAFETY: the host writes 8 bytes into `st`, which has 8.
        let errno = unsafe { fd_prestat_get(fd, st.as_mut_ptr()) };
        if errno != 0 {
            println!("end {fd} errno {errno}");
            return;
        }
        let mut name = vec![0u8; st[1] as usize];
        // SAFETY: the host writes at most `len` bytes into `name`.
        let errno = unsafe { fd_prestat_dir_name(fd, name.as_mut_ptr(), st[1]) };
        println!("{fd} {} {errno}", String::from_utf8_lossy(&name));
    }
}

#[cfg(not(target_env = "p1"))]
fn preopens() {
    println!("preopens: preview 1 only");
    std::process::exit(2);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize| args.get(i).cloned().unwrap_or_default();
    let num = |i: usize| arg(i).parse::<u64>().unwrap_or(0);
    match arg(1).as_str() {
        "read" => match std::fs::read(arg(2)) {
            Ok(d) => {
                std::io::stdout().write_all(&d).unwrap();
            }
            Err(e) => {
                println!("ERR {e}");
                std::process::exit(3);
            }
        },
        "write" => {
            // write PATH BYTES: in 64 KiB chunks, report how far it got.
            let mut f = match std::fs::File::create(arg(2)) {
                Ok(f) => f,
                Err(e) => {
                    println!("ERR open {e}");
                    std::process::exit(3);
                }
            };
            let chunk = vec![b'x'; 65536];
            let mut left = num(3);
            let mut done = 0u64;
            while left > 0 {
                let n = left.min(chunk.len() as u64) as usize;
                if let Err(e) = f.write_all(&chunk[..n]) {
                    println!("ERR after {done}: {e}");
                    std::process::exit(4);
                }
                done += n as u64;
                left -= n as u64;
            }
            println!("wrote {done}");
        }
        "truncate" => match std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(arg(2))
            .and_then(|f| f.set_len(num(3)))
        {
            Ok(()) => println!("truncated"),
            Err(e) => {
                println!("ERR {e}");
                std::process::exit(3);
            }
        },
        "rename" => match std::fs::rename(arg(2), arg(3)) {
            Ok(()) => println!("renamed"),
            Err(e) => {
                println!("ERR {e}");
                std::process::exit(3);
            }
        },
        // Changes by path, each reporting `ok` or `ERR`: mkdir, rmdir, rm
        // (a file), symlink TARGET LINK, append PATH TEXT.
        "mkdir" | "rmdir" | "rm" | "symlink" | "append" => {
            let r = match arg(1).as_str() {
                "mkdir" => std::fs::create_dir(arg(2)),
                "rmdir" => std::fs::remove_dir(arg(2)),
                "rm" => std::fs::remove_file(arg(2)),
                "symlink" => symlink(&arg(2), &arg(3)),
                _ => std::fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(arg(2))
                    .and_then(|mut f| f.write_all(arg(3).as_bytes())),
            };
            match r {
                Ok(()) => println!("ok"),
                Err(e) => {
                    println!("ERR {e}");
                    std::process::exit(3);
                }
            }
        }
        "link" => match std::fs::hard_link(arg(2), arg(3)) {
            Ok(()) => println!("linked"),
            Err(e) => {
                println!("ERR {e}");
                std::process::exit(3);
            }
        },
        "fds" => {
            // fds N: opens (creates) up to N files and keeps them all open;
            // reports how many it got and the error that stopped it.
            let mut open = Vec::new();
            for i in 0..num(2) {
                if i % 256 == 0 {
                    println!("opened {i}");
                }
                match std::fs::File::create(format!("fd-{i}")) {
                    Ok(f) => open.push(f),
                    Err(e) => {
                        println!("opened {} ERR {e}", open.len());
                        return;
                    }
                }
            }
            println!("opened {}", open.len());
        }
        "many" => {
            // many N: N small files, each closed at once.
            for i in 0..num(2) {
                if let Err(e) = std::fs::write(format!("m-{i}"), b"x") {
                    println!("created {i} ERR {e}");
                    std::process::exit(3);
                }
            }
            println!("created {}", num(2));
        }
        "sleepread" => {
            // sleepread MS PATH: sleeps MS milliseconds, then reads PATH.
            std::thread::sleep(std::time::Duration::from_millis(num(2)));
            match std::fs::read(arg(3)) {
                Ok(d) => std::io::stdout().write_all(&d).unwrap(),
                Err(e) => println!("ERR {e}"),
            }
        }
        "touch" => {
            // touch PATH [nofollow]: sets its times to now, by path
            // (wasi-libc's utimensat: path_filestat_set_times /
            // set-times-at), a final symlink followed unless `nofollow`.
            unsafe extern "C" {
                fn utimensat(dirfd: i32, path: *const u8, times: *const u8, flags: i32) -> i32;
            }
            const AT_FDCWD: i32 = -2; // wasi-libc's
            const AT_SYMLINK_NOFOLLOW: i32 = 1;
            let flags = if arg(3) == "nofollow" {
                AT_SYMLINK_NOFOLLOW
            } else {
                0
            };
            let path = std::ffi::CString::new(arg(2)).unwrap();
            // SAFETY: a valid C string; NULL times means now.
            let rc = unsafe { utimensat(AT_FDCWD, path.as_ptr().cast(), std::ptr::null(), flags) };
            if rc == 0 {
                println!("touched");
            } else {
                println!("ERR {}", std::io::Error::last_os_error());
                std::process::exit(3);
            }
        }
        "ftouch" => {
            // ftouch PATH r|w: opens PATH for reading (r) or writing (w, no
            // create), then sets its times to now through the descriptor
            // (futimens: fd_filestat_set_times / descriptor.set-times).
            let mut o = std::fs::OpenOptions::new();
            if arg(3) == "w" {
                o.write(true);
            } else {
                o.read(true);
            }
            let now = std::time::SystemTime::now();
            let times = std::fs::FileTimes::new()
                .set_accessed(now)
                .set_modified(now);
            match o.open(arg(2)).and_then(|f| f.set_times(times)) {
                Ok(()) => println!("touched"),
                Err(e) => {
                    println!("ERR {e}");
                    std::process::exit(3);
                }
            }
        }
        "opens" => {
            // opens PATH N: opens PATH for reading N times (each closed at
            // once); reports how many opens worked, how many of those gave
            // something other than a file or a directory, and how many
            // failed, by error.
            let mut ok = 0u64;
            let mut special = 0u64;
            let mut errs: std::collections::BTreeMap<String, u64> = Default::default();
            for _ in 0..num(3) {
                match std::fs::File::open(arg(2)) {
                    Ok(f) => {
                        ok += 1;
                        if !f.metadata().is_ok_and(|m| m.is_file() || m.is_dir()) {
                            special += 1;
                        }
                    }
                    Err(e) => *errs.entry(e.to_string()).or_default() += 1,
                }
            }
            println!("ok {ok} special {special} errors {errs:?}");
        }
        "ls" => match std::fs::read_dir(arg(2)) {
            Ok(rd) => {
                let mut names: Vec<String> = rd
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect();
                names.sort();
                for n in names {
                    println!("{n}");
                }
            }
            Err(e) => {
                println!("ERR {e}");
                std::process::exit(3);
            }
        },
        "preopens" => preopens(),
        "env" => {
            for (k, v) in std::env::vars() {
                println!("{k}={v}");
            }
        }
        "args" => {
            for a in &args {
                println!("{a}");
            }
        }
        "cwd" => println!(
            "{}",
            std::env::current_dir()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|e| format!("ERR {e}"))
        ),
        "alloc" => {
            // alloc MB: grow memory MB MiB at a time until told amount or failure.
            let mut keep: Vec<Vec<u8>> = Vec::new();
            for i in 0..num(2) {
                let mut v = Vec::new();
                if v.try_reserve_exact(1 << 20).is_err() {
                    println!("reserve failed after {i} MiB");
                    std::process::exit(5);
                }
                v.resize(1 << 20, 1u8);
                keep.push(v);
            }
            println!("allocated {} MiB", keep.len());
        }
        "grow" => {
            // Raw memory.grow loop: what a guest that ignores -1 would do.
            let mut pages = 0usize;
            loop {
                let r = core::arch::wasm32::memory_grow(0, 16);
                if r == usize::MAX {
                    println!("grow returned -1 after {pages} pages");
                    std::process::exit(6);
                }
                pages += 16;
            }
        }
        "spin" => {
            let mut x: u64 = 1;
            loop {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                if x == 42 {
                    break;
                }
            }
            println!("{x}");
        }
        "count" => {
            // count N: a fixed amount of compute, for fuel calibration.
            let mut x: u64 = 1;
            for _ in 0..num(2) {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
            println!("{x}");
        }
        "sleep" => {
            std::thread::sleep(std::time::Duration::from_secs(num(2)));
            println!("woke");
        }
        "stdin" => {
            let mut buf = Vec::new();
            std::io::stdin().read_to_end(&mut buf).unwrap();
            println!("stdin {} bytes", buf.len());
        }
        "flood" => {
            let chunk = vec![b'y'; 65536];
            let mut out = std::io::stdout().lock();
            let mut left = num(2);
            while left > 0 {
                let n = left.min(65536) as usize;
                out.write_all(&chunk[..n]).unwrap();
                left -= n as u64;
            }
            drop(out);
            eprintln!("flood done");
        }
        "flood-err" => {
            let chunk = vec![b'e'; 65536];
            let mut err = std::io::stderr().lock();
            for _ in 0..num(2) / 65536 {
                err.write_all(&chunk).unwrap();
            }
            drop(err);
            println!("done");
        }
        "bytes" => {
            std::io::stdout().write_all(b"a\xff\x00\x1b[31mX").unwrap();
        }
        "connect" => match std::net::TcpStream::connect(arg(2)) {
            Ok(_) => println!("CONNECTED"),
            Err(e) => {
                println!("ERR {e}");
                std::process::exit(3);
            }
        },
        "resolve" => {
            use std::net::ToSocketAddrs;
            match (arg(2).as_str(), 80).to_socket_addrs() {
                Ok(a) => println!("RESOLVED {:?}", a.collect::<Vec<_>>()),
                Err(e) => {
                    println!("ERR {e}");
                    std::process::exit(3);
                }
            }
        }
        "exit" => std::process::exit(num(2) as i32),
        "unreachable" => core::arch::wasm32::unreachable(),
        "recurse" => {
            // Recursion with no frame in linear memory: exhausts the wasm
            // call stack itself.
            fn r(n: u64) -> u64 {
                if n == u64::MAX {
                    return 0;
                }
                std::hint::black_box(r(std::hint::black_box(n + 1))) + 1
            }
            println!("{}", r(0));
        }
        "renumber" => {
            // renumber PATH BYTES: move a new file onto fd 1 (stdout) and write
            // BYTES through "stdout"; report on stderr. Preview 1 only.
            #[cfg(target_env = "p1")]
            {
                use std::os::fd::AsRawFd;
                #[link(wasm_import_module = "wasi_snapshot_preview1")]
                unsafe extern "C" {
                    fn fd_renumber(from: u32, to: u32) -> u16;
                }
                let f = std::fs::File::create(arg(2)).unwrap();
                // SAFETY: both are descriptors of this process.
                let r = unsafe { fd_renumber(f.as_raw_fd() as u32, 1) };
                std::mem::forget(f);
                eprintln!("renumber: {r}");
                let chunk = vec![b'r'; 64 * 1024];
                let mut done = 0u64;
                let mut out = std::io::stdout();
                while done < num(3) {
                    if let Err(e) = out.write_all(&chunk).and_then(|_| out.flush()) {
                        eprintln!("ERR after {done}: {e}");
                        std::process::exit(3);
                    }
                    done += chunk.len() as u64;
                }
                eprintln!("wrote {done}");
            }
            #[cfg(not(target_env = "p1"))]
            {
                eprintln!("renumber: preview 1 only");
                std::process::exit(2);
            }
        }
        "sockcalls" => {
            // sockcalls N: sock_shutdown N times on stdin, then each of the
            // four preview-1 socket calls wasmtime-wasi leaves unimplemented
            // on stdin (a valid fd, not a socket) and on a bad fd; prints
            // their errnos.
            #[cfg(target_env = "p1")]
            {
                #[link(wasm_import_module = "wasi_snapshot_preview1")]
                unsafe extern "C" {
                    fn sock_shutdown(fd: u32, how: u32) -> u16;
                    fn sock_accept(fd: u32, flags: u32, out: *mut u32) -> u16;
                    fn sock_recv(
                        fd: u32,
                        iovs: u32,
                        n: u32,
                        fl: u32,
                        len: *mut u32,
                        ofl: *mut u16,
                    ) -> u16;
                    fn sock_send(fd: u32, iovs: u32, n: u32, fl: u32, len: *mut u32) -> u16;
                }
                let (mut out, mut len, mut ofl) = (0u32, 0u32, 0u16);
                for _ in 0..num(2) {
                    // SAFETY: an import with plain integer arguments.
                    unsafe { sock_shutdown(0, 3) };
                }
                let mut last = Vec::new();
                for fd in [0u32, 999] {
                    // SAFETY: the out-pointers are valid locals; zero iovecs.
                    unsafe {
                        last.push(sock_shutdown(fd, 3));
                        last.push(sock_accept(fd, 0, &mut out));
                        last.push(sock_recv(fd, 0, 0, 0, &mut len, &mut ofl));
                        last.push(sock_send(fd, 0, 0, 0, &mut len));
                    }
                }
                println!("{last:?}");
            }
            #[cfg(not(target_env = "p1"))]
            {
                eprintln!("sockcalls: preview 1 only");
                std::process::exit(2);
            }
        }
        "sparse" => {
            // sparse PATH OFFSET: write one byte at OFFSET (seek, then write).
            use std::io::{Seek, SeekFrom};
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(arg(2))
                .unwrap();
            let r = f
                .seek(SeekFrom::Start(num(3)))
                .and_then(|_| f.write_all(b"s"))
                .and_then(|_| f.flush());
            match r {
                Ok(()) => println!("wrote 1 at {}", num(3)),
                Err(e) => {
                    println!("ERR {e}");
                    std::process::exit(3);
                }
            }
        }
        "setsize" => {
            // setsize PREFIX N SIZE: resize N new files to SIZE bytes each.
            for i in 0..num(3) {
                let f = std::fs::File::create(format!("{}{i}", arg(2))).unwrap();
                if let Err(e) = f.set_len(num(4)) {
                    println!("ERR at file {i}: {e}");
                    std::process::exit(3);
                }
            }
            println!("resized {}", num(3));
        }
        "plant" => {
            // plant CANARY [--scan]: fill 4 MiB of heap with the canary reversed
            // (so the argument itself never matches), leave it there and exit;
            // with --scan, first check that `scan` finds it in this very call.
            let canary = arg(2).into_bytes();
            let rev: Vec<u8> = canary.iter().rev().copied().collect();
            let buf: Vec<u8> = rev.iter().copied().cycle().take(4 << 20).collect();
            std::hint::black_box(&buf);
            if arg(3) == "--scan" {
                println!("{}", if scan(&canary) { "found" } else { "not found" });
            }
            std::mem::forget(buf);
        }
        "scan" => {
            // scan CANARY: grow memory by 8 MiB of fresh pages, then look for
            // the reversed canary anywhere in linear memory.
            core::arch::wasm32::memory_grow(0, 128);
            println!(
                "{}",
                if scan(arg(2).as_bytes()) {
                    "found"
                } else {
                    "not found"
                }
            );
        }
        other => {
            eprintln!("probe: unknown command {other:?}");
            std::process::exit(2);
        }
    }
}

/// Whether the reverse of `canary` occurs anywhere in linear memory (above the
/// first KiB), compared byte by byte so that the reversed needle is never
/// itself stored in memory.
fn scan(canary: &[u8]) -> bool {
    let n = canary.len();
    if n == 0 {
        return false;
    }
    let size = core::arch::wasm32::memory_size(0) * 65536;
    let at = |i: usize| {
        // SAFETY: every address in [1024, size) is inside linear memory.
        unsafe { std::ptr::read_volatile(i as *const u8) }
    };
    (1024..size.saturating_sub(n)).any(|i| (0..n).all(|j| at(i + j) == canary[n - 1 - j]))
}
