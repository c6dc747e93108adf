//! The invariants the fuzz targets (`fuzz/`) and the property tests (`props`)
//! both check, from raw bytes. This file is compiled into both: it depends on
//! `toolhost` and `std` only.
//!
//! - Paths: whatever file operations the bytes ask for (write, append, mkdir,
//!   move, delete, read) with whatever paths they spell (`..`, absolute paths,
//!   symlinks that lead out, loops, NULs, fullwidth dots, very long names),
//!   nothing outside the read-write allowed dir changes: the read-only allowed
//!   dir and the directory outside the sandbox are compared entry by entry,
//!   content included, after every operation. Every path the resolver accepts
//!   lies inside an allowed dir, also after following the symlinks on disk.
//! - Shell: whatever argv or command string the bytes spell, and whatever
//!   allowlist, the argv the policy lets run starts with a bare name on the
//!   allowlist, which is not a network client while the network is off and
//!   not an interpreter while strings are off, and no argument carries a shell
//!   metacharacter in string mode.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use toolhost::paths::{AllowedDirSpec, AllowedDirs};
use toolhost::policy::shell::ShellPolicy;
use toolhost::tools::fs::{self, FsPolicy};

/// Every entry under `dir` (symlinks not followed): kind, target or content.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let Ok(m) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            let what = if m.file_type().is_symlink() {
                format!("link {:?}", std::fs::read_link(&p).ok())
            } else if m.is_dir() {
                stack.push(p.clone());
                "dir".to_string()
            } else {
                format!("file {:?}", std::fs::read(&p).ok())
            };
            out.insert(p, what);
        }
    }
    out
}

/// A workspace with symlinks that lead out, a read-only allowed dir and an
/// outside dir with canaries.
pub struct PathFixture {
    root: PathBuf,
    dirs: AllowedDirs,
    policy: FsPolicy,
    ro: PathBuf,
    outside: PathBuf,
    before_ro: BTreeMap<PathBuf, String>,
    /// The workspace's `.git` (a protected path) and what it holds.
    git: PathBuf,
    before_git: BTreeMap<PathBuf, String>,
    before_outside: BTreeMap<PathBuf, String>,
}

impl Drop for PathFixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

const NAMES: &[&str] = &[
    "..",
    ".",
    "a",
    "b",
    "sub",
    "l_out",
    "l_abs",
    "l_ro",
    "l_loop",
    "l_up",
    "ro",
    "ws",
    "outside",
    "canary.txt",
    "x.txt",
    "",
    "\u{ff0e}\u{ff0e}",
    "a\u{200b}b",
    "n\0ul",
    "...",
    ".git",
    ".GIT.",
    "hooks",
    "config",
    "l_git",
];

impl PathFixture {
    /// Builds the fixture in a fresh directory under the system temp dir.
    pub fn new() -> Self {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let base = std::env::temp_dir().join(format!(
            "toolhost-inv-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).expect("fixture dir");
        let root = std::fs::canonicalize(&base).expect("canonicalize");
        let ws = root.join("ws");
        let ro = root.join("ro");
        let outside = root.join("outside");
        for d in [&ws, &ro, &outside, &ws.join("sub"), &outside.join("deep")] {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        std::fs::write(outside.join("canary.txt"), "CANARY").expect("canary");
        std::fs::write(outside.join("deep/canary.txt"), "CANARY2").expect("canary");
        std::fs::write(ro.join("canary.txt"), "RO").expect("ro file");
        std::fs::write(ws.join("x.txt"), "x").expect("ws file");
        let dir = true;
        symlink("../outside", &ws.join("l_out"), dir);
        symlink(&outside, &ws.join("l_abs"), dir);
        symlink("../ro", &ws.join("l_ro"), dir);
        symlink("l_loop", &ws.join("l_loop"), !dir);
        symlink("../..", &ws.join("sub/l_up"), dir);
        symlink("../outside/canary.txt", &ws.join("sub/l_file"), !dir);
        let git = ws.join(".git");
        std::fs::create_dir_all(git.join("hooks")).expect("mkdir .git");
        std::fs::write(git.join("config"), "[core]\n").expect("config");
        std::fs::write(git.join("hooks/pre-commit.sample"), "#!/bin/sh\n").expect("hook");
        symlink(".git", &ws.join("l_git"), dir);
        let dirs = AllowedDirs::open([
            AllowedDirSpec::read_write(&ws),
            AllowedDirSpec::read_only(&ro),
        ])
        .expect("allowed dirs");
        PathFixture {
            before_ro: snapshot(&ro),
            before_git: snapshot(&git),
            git,
            before_outside: snapshot(&outside),
            root,
            dirs,
            policy: FsPolicy {
                max_file_size: Some(1 << 20),
                max_read_bytes: 1 << 16,
                denied_extensions: vec![".sh".into()],
                protected: toolhost::protected::ProtectedPaths::default_list(),
            },
            ro,
            outside,
        }
    }

    /// The read-write allowed dir.
    pub fn ws(&self) -> PathBuf {
        self.root.join("ws")
    }

    /// The directory outside the sandbox.
    pub fn outside(&self) -> PathBuf {
        self.outside.clone()
    }

    /// A path spelled by `data` (consumed from the front).
    fn path(&self, data: &mut &[u8]) -> String {
        let mut take = || {
            let (b, rest) = data.split_first().map_or((0, &[][..]), |(b, r)| (*b, r));
            *data = rest;
            b
        };
        let head = take();
        let n = usize::from(take() % 8);
        let mut s = match head % 6 {
            0 | 1 => String::new(),
            2 => format!("{}/", self.root.join("ws").display()),
            3 => format!("{}/", self.root.display()),
            4 => "/".to_string(),
            _ => format!("{}/", self.outside.display()),
        };
        for i in 0..n {
            if i > 0 {
                s.push('/');
            }
            let b = take();
            if b >= 250 {
                // A long name (within and past NAME_MAX).
                s.push_str(&"n".repeat(200 + usize::from(b - 250) * 20));
            } else {
                s.push_str(NAMES[usize::from(b) % NAMES.len()]);
            }
        }
        s
    }

    /// Runs the file operations `data` spells, checking the invariant after each.
    pub fn check(&self, data: &[u8]) {
        let mut data = data;
        let mut ops = 0;
        while !data.is_empty() && ops < 8 {
            ops += 1;
            let op = data[0];
            data = &data[1..];
            let p = self.path(&mut data);
            // Every accepted path is inside an allowed dir, on disk too.
            if let Ok(r) = self.dirs.resolve(Path::new(&p), None) {
                let inside =
                    |q: &Path| self.dirs.as_slice().iter().any(|d| q.starts_with(d.path()));
                assert!(
                    inside(r.host_path()),
                    "{p:?} resolved to {:?}",
                    r.host_path()
                );
                let mut existing = r.host_path().to_path_buf();
                while !existing.exists() && existing.pop() {}
                if let Ok(c) = std::fs::canonicalize(&existing) {
                    assert!(inside(&c), "{p:?} leads to {c:?} on disk");
                }
            }
            let _ = match op % 7 {
                0 => fs::write(&self.dirs, &self.policy, &p, b"PWNED", false).map(|_| ()),
                1 => fs::write(&self.dirs, &self.policy, &p, b"PWNED", true).map(|_| ()),
                2 => fs::mkdir(&self.dirs, &self.policy, &p).map(|_| ()),
                3 => {
                    let q = self.path(&mut data);
                    fs::rename(&self.dirs, &self.policy, &p, &q, op & 0x80 != 0).map(|_| ())
                }
                4 => fs::delete(&self.dirs, &self.policy, &p, true).map(|_| ()),
                5 => fs::read(&self.dirs, &self.policy, &p, 0, None).map(|_| ()),
                _ => fs::stat(&self.dirs, &p).map(|_| ()),
            };
            assert_eq!(
                snapshot(&self.outside),
                self.before_outside,
                "outside changed after op {op} on {p:?}"
            );
            assert_eq!(
                snapshot(&self.ro),
                self.before_ro,
                "read-only dir changed after op {op} on {p:?}"
            );
            assert_eq!(
                snapshot(&self.git),
                self.before_git,
                "protected .git changed after op {op} on {p:?}"
            );
        }
    }
}

const WORDS: &[&str] = &[
    "ls",
    "cat",
    "rm",
    "echo",
    "git",
    "/bin/ls",
    "./ls",
    "../bin/ls",
    "curl",
    "nc.openbsd",
    "wget",
    "python3",
    "python3.12",
    "bash",
    "sh",
    "env",
    "xargs",
    "\u{ff4c}s",
    "l\u{200b}s",
    "ls.exe",
    "LS",
    "..",
    ".",
    "-c",
    "x;y",
    "a|b",
    "$(id)",
    "`id`",
    ">f",
    "&&",
    "\n",
    "'q'",
    "\"d\"",
    "'",
    "\\",
    "*",
    "~",
    "#",
];

/// Checks the shell policy on the argv and command string `data` spells.
pub fn check_shell(data: &[u8]) {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let Some((&n_allowed, rest)) = rest.split_first() else {
        return;
    };
    let allowed: Vec<String> = (0..n_allowed % 5)
        .map(|i| WORDS[(usize::from(n_allowed) / 5 + usize::from(i) * 7) % WORDS.len()].to_string())
        .collect();
    let policy = ShellPolicy {
        allowed: allowed.clone(),
        allow_strings: flags & 1 != 0,
        allow_network: flags & 2 != 0,
    };
    let words: Vec<String> = rest
        .iter()
        .map(|b| WORDS[usize::from(*b) % WORDS.len()].to_string())
        .collect();
    let holds = |argv: &[String]| {
        let program = &argv[0];
        assert!(
            allowed.contains(program),
            "{program:?} ran, allowlist {allowed:?}"
        );
        assert!(
            !program.contains('/') && !program.contains('\\'),
            "{program:?}"
        );
        let family = program.to_ascii_lowercase();
        let family = family.split('.').next().unwrap_or("");
        if !policy.allow_network {
            assert!(
                !["curl", "wget", "nc"].contains(&family),
                "{program:?} with the network off"
            );
        }
        if !policy.allow_strings {
            assert!(
                !["python3", "bash", "sh"].contains(&family),
                "{program:?} without strings"
            );
        }
    };
    if policy.check_args(&words).is_ok() {
        holds(&words);
    }
    let command: String = rest
        .iter()
        .map(|b| WORDS[usize::from(*b) % WORDS.len()])
        .collect::<Vec<_>>()
        .join(if flags & 4 != 0 { " " } else { "" });
    if let Ok(argv) = policy.check_string(&command) {
        assert!(policy.allow_strings);
        holds(&argv);
        for a in &argv {
            assert!(
                !a.contains([';', '|', '&', '$', '`', '>', '<', '\n', '\r', '\\']),
                "metacharacter in {a:?} from {command:?}"
            );
        }
    }
}

/// A symlink at `at` to `target` (`/` in a relative target is the platform's
/// separator). Windows has two kinds: `dir` picks the directory kind.
fn symlink(target: impl AsRef<Path>, at: &Path, dir: bool) {
    #[cfg(unix)]
    {
        let _ = dir;
        std::os::unix::fs::symlink(target, at).expect("symlink");
    }
    #[cfg(windows)]
    {
        let target = PathBuf::from(target.as_ref().to_string_lossy().replace('/', "\\"));
        if dir {
            std::os::windows::fs::symlink_dir(target, at).expect("symlink");
        } else {
            std::os::windows::fs::symlink_file(target, at).expect("symlink");
        }
    }
}
