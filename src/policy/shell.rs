//! The `shell` tool's argument policy: which command lines may run.
//!
//! Invariant: a command line is allowed only if its program is a bare name on
//! the allowlist, is not a network client while the network is off, and is
//! not a scripting interpreter unless string mode is on; string mode refuses every shell metacharacter
//! before splitting, so what runs is exactly the argv this module returns,
//! never a shell's interpretation of it.
//!
//! The policy judges the program name only: an allowed program that can run
//! others ([`RUNNERS`] such as `env`, `xargs`, `timeout`, `find -exec`; also
//! `git -c core.pager=...`) runs them, so allowlisting one allows anything.
//! The backend's isolation, not this list, is what contains a call.

use std::fmt;

/// Network clients refused while the network is off (matched on the name).
pub const NETWORK_BINARIES: &[&str] = &[
    "curl",
    "wget",
    "nc",
    "ncat",
    "netcat",
    "socat",
    "ssh",
    "scp",
    "sftp",
    "rsync",
    "telnet",
    "ftp",
    // Windows's own downloaders.
    "tftp",
    "certutil",
    "bitsadmin",
];

/// Scripting interpreters: they run arbitrary code from their arguments, so
/// they need `shell_allow_strings`.
pub const INTERPRETERS: &[&str] = &[
    "sh",
    "bash",
    "zsh",
    "fish",
    "dash",
    "ksh",
    "mksh",
    "csh",
    "tcsh",
    "ash",
    "busybox",
    "perl",
    "ruby",
    "node",
    "nodejs",
    "deno",
    "bun",
    "pwsh",
    "powershell",
    "php",
    "lua",
    "luajit",
    "tclsh",
    "wish",
    "osascript",
    "awk",
    "gawk",
    "mawk",
    "nawk",
    "expect",
    "rscript",
    "r",
    "julia",
    "irb",
    "guile",
    "sbcl",
    "ghci",
    "erl",
    "elixir",
    "iex",
    "jshell",
    "vim",
    "vi",
    "nvim",
    "ex",
    "emacs",
    "m4",
    "make",
    "gmake",
    // Windows's own: shells, script hosts, the Python launcher, and build
    // and runtime hosts that run code from their arguments or a project.
    "cmd",
    "cscript",
    "wscript",
    "mshta",
    "py",
    "pyw",
    "powershell_ise",
    "dotnet",
    "msbuild",
    "csi",
];

/// Programs that run another program named in their arguments. They run only
/// when allowlisted by name, like any program, and allowlisting one is
/// equivalent to allowing anything (so is `find`, through `-exec`); docs/src/security.md
/// says so.
pub const RUNNERS: &[&str] = &[
    "env",
    "xargs",
    "nice",
    "timeout",
    "nohup",
    "setsid",
    "stdbuf",
    "chroot",
    "sudo",
    "doas",
    "su",
    "strace",
    "ltrace",
    "gdb",
    "time",
    "watch",
    "flock",
    "ionice",
    "taskset",
    "unshare",
    "nsenter",
    "script",
    "find", // Windows's own:
    "rundll32",
    "regsvr32",
    "forfiles",
    "start",
    "runas",
    "schtasks",
    "wmic",
    "wsl",
    "msiexec",
    "installutil",
    "regasm",
    "regsvcs",
    "cmstp",
    "pcalua",
];

/// Characters refused anywhere in string mode: command separators,
/// substitutions, redirections, globbing a shell would expand, and line
/// continuations.
pub const METACHARACTERS: &[char] = &[';', '&', '|', '`', '$', '>', '<', '\n', '\r', '\\'];

/// Why a command line is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShellDenial {
    /// The allowlist is empty: the tool is off.
    Disabled,
    /// No program.
    Empty,
    /// `args[0]` has a path separator.
    NotBareName(String),
    /// Not on the allowlist.
    NotAllowed(String),
    /// A network client while the network is off.
    Network(String),
    /// An interpreter without string mode.
    Interpreter(String),
    /// A string command while string mode is off.
    StringsOff,
    /// A metacharacter in string mode.
    Metacharacter(char),
    /// Unbalanced quotes in string mode.
    Unbalanced,
    /// The bare name is found first in a `PATH` entry inside a writable
    /// allowed dir (a program the agent could have written).
    WritablePath(String, std::path::PathBuf),
}

impl ShellDenial {
    /// The policy rule that refused: a stable name for audit logs.
    pub fn rule(&self) -> &'static str {
        match self {
            ShellDenial::Disabled => "shell.disabled",
            ShellDenial::Empty => "shell.empty",
            ShellDenial::NotBareName(_) => "shell.bare_name",
            ShellDenial::NotAllowed(_) => "shell.allowlist",
            ShellDenial::Network(_) => "shell.network_binary",
            ShellDenial::Interpreter(_) => "shell.interpreter",
            ShellDenial::StringsOff => "shell.strings_off",
            ShellDenial::Metacharacter(_) => "shell.metacharacter",
            ShellDenial::Unbalanced => "shell.unbalanced_quotes",
            ShellDenial::WritablePath(..) => "shell.writable_path",
        }
    }
}

impl fmt::Display for ShellDenial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShellDenial::Disabled => write!(
                f,
                "the shell tool is disabled: no binaries are allowed (set shell_allowed_binaries in the config)"
            ),
            ShellDenial::Empty => write!(f, "no command given"),
            ShellDenial::NotBareName(p) => write!(
                f,
                "{p:?}: give the program as a bare name on the allowlist, not a path"
            ),
            ShellDenial::NotAllowed(p) => write!(
                f,
                "{p:?} is not on the shell allowlist (shell_allowed_binaries)"
            ),
            ShellDenial::Network(p) => {
                write!(f, "{p:?} is a network client and the network is off")
            }
            ShellDenial::Interpreter(p) => write!(
                f,
                "{p:?} is a scripting interpreter: it needs shell_allow_strings"
            ),
            ShellDenial::StringsOff => write!(
                f,
                "string commands are off: give `args` as a list (or set shell_allow_strings)"
            ),
            ShellDenial::Metacharacter(c) => write!(
                f,
                "shell metacharacter {c:?} refused: give `args` as a list, one argument each"
            ),
            ShellDenial::Unbalanced => write!(f, "unbalanced quotes in the command"),
            ShellDenial::WritablePath(p, found) => write!(
                f,
                "{p:?} would run {}, inside a writable allowed dir (a program a tool could have written); PATH entries there are not searched (set shell_allow_writable_path to allow it)",
                found.display()
            ),
        }
    }
}

/// The `PATH` the shell tool gives `name`: `path` without its relative
/// entries and those whose resolution passes through a `writable` dir (the
/// entry, or a symlink on its way, inside one), the others written as the
/// places they resolve to. So no program a tool could write runs by a bare
/// name, even one written or a symlink swapped after this check. Refuses the
/// name when a file of that name sits in such an entry before any other entry
/// has it (`host_visible`: the other entries are this machine's, as on
/// `direct`; on docker they are the image's and are not looked at), or when
/// the program it resolves to leads into a writable dir. Returns `None` when
/// `path` stays as it is.
///
/// # Ambient Authority
/// Looks at the host paths of `PATH`'s entries (metadata and symlinks only):
/// the operator's `PATH`, not the agent's.
pub fn shell_path(
    name: &str,
    path: &std::ffi::OsStr,
    writable: &[&std::path::Path],
    host_visible: bool,
) -> Result<Option<std::ffi::OsString>, ShellDenial> {
    use crate::reach::{Writable, resolution_trail};
    let w = Writable::new(writable.iter().copied());
    let is_program = |p: &std::path::Path| {
        std::fs::metadata(p).is_ok_and(|m| {
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                m.is_file() && m.permissions().mode() & 0o111 != 0
            }
            #[cfg(not(unix))]
            {
                m.is_file()
            }
        })
    };
    let mut kept = Vec::new();
    let mut changed = false;
    let mut resolved = false;
    for entry in std::env::split_paths(path) {
        if !entry.is_absolute() {
            changed = true;
            continue;
        }
        let trail = resolution_trail(&entry);
        let real = trail.last().cloned().unwrap_or_else(|| entry.clone());
        if trail.iter().any(|place| w.holding(place).is_some()) {
            changed = true;
            let written = program_names(name)
                .into_iter()
                .map(|n| entry.join(n))
                .find(|p| std::fs::symlink_metadata(p).is_ok());
            if !resolved && let Some(written) = written {
                return Err(ShellDenial::WritablePath(name.into(), written));
            }
            continue;
        }
        changed |= real != entry;
        let candidate = program_names(name)
            .into_iter()
            .map(|n| real.join(n))
            .find(|p| is_program(p));
        if host_visible
            && !resolved
            && let Some(candidate) = candidate
        {
            resolved = true;
            // The program, and the interpreters of its `#!` chain (the kernel
            // follows up to 4), must all lie out of a tool's reach.
            let mut program = candidate.clone();
            for _ in 0..5 {
                if let Some((place, _)) = w.on_trail(&program) {
                    return Err(ShellDenial::WritablePath(name.into(), place));
                }
                match interpreter(&program) {
                    Some(next) => program = next,
                    None => break,
                }
            }
        }
        kept.push(real);
    }
    if !changed {
        return Ok(None);
    }
    Ok(Some(std::env::join_paths(kept).unwrap_or_default()))
}

/// The file names a bare `name` runs as, in the order they are tried: on
/// Windows `name.exe` first, then `name` (as `direct` resolves it), unless
/// it ends in `.exe` or `.com`; elsewhere `name`.
fn program_names(name: &str) -> Vec<String> {
    let lower = name.to_ascii_lowercase();
    if cfg!(windows) && !lower.ends_with(".exe") && !lower.ends_with(".com") {
        vec![format!("{name}.exe"), name.to_string()]
    } else {
        vec![name.to_string()]
    }
}

/// The interpreter a `#!` line names, if `program` starts with one and names
/// an absolute path.
fn interpreter(program: &std::path::Path) -> Option<std::path::PathBuf> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(program).ok()?.read(&mut head).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = line.split(|&b| b == b'\n').next()?;
    let text = std::str::from_utf8(line).ok()?;
    let path = std::path::PathBuf::from(text.split_whitespace().next()?);
    path.is_absolute().then_some(path)
}

/// The shell policy of one sandbox.
#[derive(Debug, Clone)]
pub struct ShellPolicy {
    /// Bare names that may run.
    pub allowed: Vec<String>,
    /// Whether `{command: "..."}` and interpreters are allowed.
    pub allow_strings: bool,
    /// Whether the network is on.
    pub allow_network: bool,
}

/// A program's name without a version suffix and `.exe`: `python3.12` and
/// `python` are both `python`.
fn family(name: &str) -> String {
    let lower = name.to_ascii_lowercase();
    // Debian's alternatives (`nc.openbsd`, `telnet.netkit`), versions
    // (`python3.12`) and `.exe`: the part before the first dot.
    let base = lower.split('.').next().unwrap_or(&lower);
    let trimmed = base.trim_end_matches(|c: char| c.is_ascii_digit() || c == '-');
    trimmed.to_string()
}

fn is_interpreter(name: &str) -> bool {
    let f = family(name);
    INTERPRETERS.contains(&f.as_str()) || f.starts_with("python") || f == "pypy"
}

impl ShellPolicy {
    /// Checks an argv (`{args: [...]}`).
    pub fn check_args(&self, args: &[String]) -> Result<(), ShellDenial> {
        if self.allowed.is_empty() {
            return Err(ShellDenial::Disabled);
        }
        let Some(program) = args.first() else {
            return Err(ShellDenial::Empty);
        };
        if program.is_empty() {
            return Err(ShellDenial::Empty);
        }
        if program.contains('/') || program.contains('\\') || program == "." || program == ".." {
            return Err(ShellDenial::NotBareName(program.clone()));
        }
        if !self.allowed.iter().any(|a| a == program) {
            return Err(ShellDenial::NotAllowed(program.clone()));
        }
        if !self.allow_network && NETWORK_BINARIES.contains(&family(program).as_str()) {
            return Err(ShellDenial::Network(program.clone()));
        }
        if !self.allow_strings && is_interpreter(program) {
            return Err(ShellDenial::Interpreter(program.clone()));
        }
        Ok(())
    }

    /// Checks a string command (`{command: "..."}`) and splits it into the
    /// argv that runs (no shell runs it).
    pub fn check_string(&self, command: &str) -> Result<Vec<String>, ShellDenial> {
        if self.allowed.is_empty() {
            return Err(ShellDenial::Disabled);
        }
        if !self.allow_strings {
            return Err(ShellDenial::StringsOff);
        }
        if let Some(c) = command.chars().find(|c| METACHARACTERS.contains(c)) {
            return Err(ShellDenial::Metacharacter(c));
        }
        let args = split(command)?;
        self.check_args(&args)?;
        Ok(args)
    }
}

/// Splits a command line the way a POSIX shell splits words, for the subset
/// string mode allows: whitespace separates, single and double quotes group
/// (no escapes: backslashes are refused before this runs).
pub fn split(command: &str) -> Result<Vec<String>, ShellDenial> {
    let mut args = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    for c in command.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    args.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            (None, c) => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if quote.is_some() {
        return Err(ShellDenial::Unbalanced);
    }
    if in_word {
        args.push(cur);
    }
    Ok(args)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allowed: &[&str], strings: bool, network: bool) -> ShellPolicy {
        ShellPolicy {
            allowed: allowed.iter().map(|s| s.to_string()).collect(),
            allow_strings: strings,
            allow_network: network,
        }
    }

    fn argv(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn allowlist_bare_names_network_and_interpreters() {
        let p = policy(&["ls", "curl", "python3", "bash"], false, false);
        assert_eq!(p.check_args(&argv(&["ls", "-la"])), Ok(()));
        assert_eq!(
            p.check_args(&argv(&["/bin/ls"])),
            Err(ShellDenial::NotBareName("/bin/ls".into()))
        );
        assert_eq!(
            p.check_args(&argv(&["./ls"])),
            Err(ShellDenial::NotBareName("./ls".into()))
        );
        assert_eq!(
            p.check_args(&argv(&["cat"])),
            Err(ShellDenial::NotAllowed("cat".into()))
        );
        assert_eq!(
            p.check_args(&argv(&["curl", "x"])),
            Err(ShellDenial::Network("curl".into()))
        );
        let nc = policy(&["nc.openbsd", "telnet.netkit"], false, false);
        for a in ["nc.openbsd", "telnet.netkit"] {
            assert_eq!(
                nc.check_args(&argv(&[a])),
                Err(ShellDenial::Network(a.into()))
            );
        }
        assert_eq!(
            p.check_args(&argv(&["python3"])),
            Err(ShellDenial::Interpreter("python3".into()))
        );
        assert_eq!(
            p.check_args(&argv(&["bash"])),
            Err(ShellDenial::Interpreter("bash".into()))
        );
        // With the network and strings on, the same calls pass.
        let p = policy(&["ls", "curl", "python3", "bash"], true, true);
        for a in ["curl", "python3", "bash"] {
            assert_eq!(p.check_args(&argv(&[a])), Ok(()), "{a}");
        }
        assert_eq!(
            policy(&[], true, true).check_args(&argv(&["ls"])),
            Err(ShellDenial::Disabled)
        );
        assert_eq!(p.check_args(&[]), Err(ShellDenial::Empty));
    }

    #[test]
    fn string_mode_refuses_metacharacters_and_splits() {
        let p = policy(&["echo", "grep"], true, false);
        assert_eq!(
            p.check_string("grep -n 'two words' \"a b\" file"),
            Ok(argv(&["grep", "-n", "two words", "a b", "file"]))
        );
        for bad in [
            "echo a; rm x",
            "echo a && b",
            "echo a | b",
            "echo `id`",
            "echo $(id)",
            "echo $HOME",
            "echo a > f",
            "echo < f",
            "echo a \\\n b",
            "echo a\nrm x",
        ] {
            assert!(
                matches!(p.check_string(bad), Err(ShellDenial::Metacharacter(_))),
                "{bad:?}"
            );
        }
        assert_eq!(p.check_string("echo 'open"), Err(ShellDenial::Unbalanced));
        assert_eq!(
            policy(&["echo"], false, false).check_string("echo hi"),
            Err(ShellDenial::StringsOff)
        );
        // The split argv is checked like an argv.
        assert_eq!(
            p.check_string("rm -rf x"),
            Err(ShellDenial::NotAllowed("rm".into()))
        );
        assert_eq!(p.check_string("   "), Err(ShellDenial::Empty));
    }

    #[cfg(unix)]
    #[test]
    fn writable_path_entries_are_dropped_and_a_name_found_there_refused() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(t.path()).expect("canonicalize");
        let ws = root.join("ws");
        let sys = root.join("sys");
        for d in [ws.join(".venv/bin"), sys.clone()] {
            std::fs::create_dir_all(&d).expect("mkdir");
        }
        let exe = |p: &std::path::Path| {
            std::fs::write(p, "#!/bin/sh\n").expect("write");
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        };
        exe(&ws.join(".venv/bin/pytest"));
        exe(&sys.join("ls"));
        exe(&sys.join("pytest"));
        std::os::unix::fs::symlink(ws.join(".venv/bin/pytest"), sys.join("linked")).expect("ln");
        let venv = ws.join(".venv/bin");
        let path =
            std::env::join_paths([venv.as_path(), sys.as_path(), std::path::Path::new("rel")])
                .expect("join");
        let w = [ws.as_path()];
        // Planted first on PATH: refused, with its rule.
        let e = shell_path("pytest", &path, &w, true).unwrap_err();
        assert_eq!(e.rule(), "shell.writable_path");
        assert!(e.to_string().contains(".venv/bin/pytest"), "{e}");
        // A symlink from a system dir into the workspace: refused.
        let e = shell_path("linked", &path, &w, true).unwrap_err();
        assert_eq!(e.rule(), "shell.writable_path");
        // Allowed twin: a name not planted runs, with the writable and the
        // relative entries off its PATH.
        let p = shell_path("ls", &path, &w, true)
            .expect("ls")
            .expect("changed");
        assert_eq!(p, sys.as_os_str());
        // Found first in a system dir: the workspace copy behind it is moot.
        let path2 = std::env::join_paths([sys.as_path(), venv.as_path()]).expect("join");
        assert_eq!(
            shell_path("pytest", &path2, &w, true).expect("pytest"),
            Some(sys.clone().into_os_string())
        );
        // Nothing writable on PATH: unchanged.
        assert_eq!(
            shell_path("ls", sys.as_os_str(), &w, true).expect("ls"),
            None
        );
    }

    #[test]
    fn windows_downloaders_are_network_clients() {
        for name in ["certutil", "CertUtil.exe", "bitsadmin", "tftp"] {
            let off = policy(&[name], false, false);
            assert_eq!(
                off.check_args(&argv(&[name, "-urlcache", "x"])),
                Err(ShellDenial::Network(name.to_string()))
            );
            let on = policy(&[name], false, true);
            assert_eq!(on.check_args(&argv(&[name, "x"])), Ok(()), "{name}");
        }
    }

    /// On Windows a bare name runs as `name.exe`: one planted in a writable
    /// `PATH` entry is refused, and so is a system entry's `name.exe` that
    /// is a link into the workspace; the allowed twin found in a system dir
    /// runs, with the writable entry off its `PATH`.
    #[cfg(windows)]
    #[test]
    fn writable_path_entries_hold_for_exe_names() {
        let t = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(t.path()).expect("canonicalize");
        let (ws, sys) = (root.join("ws"), root.join("sys"));
        let venv = ws.join(".venv").join("Scripts");
        for d in [&venv, &sys] {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        std::fs::write(venv.join("pytest.exe"), "MZ").expect("write");
        std::fs::write(sys.join("where.exe"), "MZ").expect("write");
        let path = std::env::join_paths([venv.as_path(), sys.as_path()]).expect("join");
        let w = [ws.as_path()];
        let e = shell_path("pytest", &path, &w, true).unwrap_err();
        assert_eq!(e.rule(), "shell.writable_path");
        assert!(e.to_string().contains("pytest.exe"), "{e}");
        let p = shell_path("where", &path, &w, true)
            .expect("where")
            .expect("changed");
        assert_eq!(p, sys.as_os_str());
    }

    #[test]
    fn interpreter_families() {
        for name in [
            "python",
            "python3.12",
            "PYTHON3",
            "perl5.36",
            "node.exe",
            "pwsh",
            "py",
            "PY.EXE",
            "pyw",
            "powershell_ise",
            "dotnet",
            "MSBuild.exe",
        ] {
            assert!(is_interpreter(name), "{name}");
        }
        assert!(!is_interpreter("ls"));
        assert!(!is_interpreter("grep"));
    }
}
