//! What `CreateProcessW` is given: the program resolved (bare names on the
//! tool's PATH, never the cwd), the command line quoted as the C runtime
//! parses it, the environment block, and paths without a verbatim prefix.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::windows::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The program to run: a path (anything with a separator or a drive) taken
/// from the working directory, or a bare name looked up on the tool's `PATH`
/// (absolute entries only; the working directory is not searched, unlike
/// `cmd.exe`). A name without `.exe` or `.com` is tried with `.exe` first.
pub(super) fn resolve(
    program: &OsStr,
    cwd: &Path,
    env: &[(OsString, OsString)],
) -> io::Result<PathBuf> {
    let text = program.to_string_lossy();
    let lower = text.to_ascii_lowercase();
    let names = |base: PathBuf| -> Vec<PathBuf> {
        if lower.ends_with(".exe") || lower.ends_with(".com") {
            vec![base]
        } else {
            let mut exe = base.clone().into_os_string();
            exe.push(".exe");
            vec![PathBuf::from(exe), base]
        }
    };
    let is_file = |p: &PathBuf| std::fs::metadata(p).is_ok_and(|m| m.is_file());
    let path_like = text.contains(['\\', '/']) || Path::new(program).has_root() || {
        let b = text.as_bytes();
        b.len() >= 2 && b[1] == b':'
    };
    if path_like {
        return names(cwd.join(program))
            .into_iter()
            .find(is_file)
            .ok_or_else(|| io::ErrorKind::NotFound.into());
    }
    let path = env
        .iter()
        .find(|(k, _)| k.to_str().is_some_and(|k| k.eq_ignore_ascii_case("PATH")))
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    std::env::split_paths(&path)
        .filter(|d| d.is_absolute())
        .flat_map(|d| names(d.join(program)))
        .find(is_file)
        .ok_or_else(|| io::ErrorKind::NotFound.into())
}

/// Refuses `.bat` and `.cmd` files (see the module's notes), and programs
/// named through an NTFS stream (`x::$DATA`) or without a file name.
/// `program` is absolute and normalized.
pub(super) fn refuse_batch(program: &Path) -> io::Result<()> {
    let Some(name) = program.file_name() else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the program's path names no file",
        ));
    };
    let name = name
        .to_string_lossy()
        .trim_end_matches(['.', ' '])
        .to_ascii_lowercase();
    if name.contains(':') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the program is named through an NTFS stream",
        ));
    }
    if name.ends_with(".bat") || name.ends_with(".cmd") {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a batch file runs through cmd.exe, which parses its arguments by other rules: run `cmd.exe /c ...` explicitly if the policy allows it",
        ));
    }
    Ok(())
}

/// `argv` as one command line, quoted by the rules of the Microsoft C
/// runtime (and `CommandLineToArgvW`): an argument with a space, a tab or
/// nothing in it is quoted; a quote is escaped with a backslash, and
/// backslashes before a quote are doubled. The program is always quoted and
/// may not contain a quote.
pub(super) fn command_line(argv: &[OsString]) -> io::Result<Vec<u16>> {
    let mut out: Vec<u16> = Vec::new();
    for (i, arg) in argv.iter().enumerate() {
        if i > 0 {
            out.push(u16::from(b' '));
        }
        let wide: Vec<u16> = arg.encode_wide().collect();
        if wide.contains(&0) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "an argument contains NUL",
            ));
        }
        if i == 0 {
            if wide.contains(&u16::from(b'"')) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "the program's name contains a quote",
                ));
            }
            out.push(u16::from(b'"'));
            out.extend_from_slice(&wide);
            out.push(u16::from(b'"'));
            continue;
        }
        let quote = wide.is_empty()
            || wide
                .iter()
                .any(|&c| c == u16::from(b' ') || c == u16::from(b'\t'));
        if quote {
            out.push(u16::from(b'"'));
        }
        let mut backslashes = 0usize;
        for &c in &wide {
            if c == u16::from(b'\\') {
                backslashes += 1;
            } else {
                if c == u16::from(b'"') {
                    // n backslashes before a quote become 2n + 1.
                    out.extend(std::iter::repeat_n(u16::from(b'\\'), backslashes + 1));
                }
                backslashes = 0;
            }
            out.push(c);
        }
        if quote {
            // n backslashes before the closing quote become 2n.
            out.extend(std::iter::repeat_n(u16::from(b'\\'), backslashes));
            out.push(u16::from(b'"'));
        }
    }
    out.push(0);
    Ok(out)
}

/// The plan's environment, with `NoDefaultCurrentDirectoryInExePath` set:
/// a program the tool starts by a bare name is then not looked for in the
/// working directory first (which the tool can write) by `CreateProcess`
/// and `cmd.exe`.
pub(super) fn tool_env(env: &[(OsString, OsString)]) -> Vec<(OsString, OsString)> {
    const NAME: &str = "NoDefaultCurrentDirectoryInExePath";
    let mut out: Vec<(OsString, OsString)> = env
        .iter()
        .filter(|(k, _)| !k.to_str().is_some_and(|k| k.eq_ignore_ascii_case(NAME)))
        .cloned()
        .collect();
    out.push((NAME.into(), "1".into()));
    out
}

/// The plan's environment as a Unicode environment block: `NAME=value`
/// entries sorted by upper-cased name, as Windows wants them, each ended by
/// NUL, and one more NUL. An empty environment is two NULs.
pub(super) fn env_block(env: &[(OsString, OsString)]) -> Vec<u16> {
    let mut vars: Vec<&(OsString, OsString)> = env.iter().collect();
    vars.sort_by_key(|(k, _)| k.to_string_lossy().to_uppercase());
    let mut out: Vec<u16> = Vec::new();
    for (k, v) in vars {
        out.extend(k.encode_wide());
        out.push(u16::from(b'='));
        out.extend(v.encode_wide());
        out.push(0);
    }
    if out.is_empty() {
        out.push(0);
    }
    out.push(0);
    out
}

/// `s` as a NUL-terminated UTF-16 string.
pub(super) fn wide_nul(s: &OsStr) -> io::Result<Vec<u16>> {
    let mut w: Vec<u16> = s.encode_wide().collect();
    if w.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a path contains NUL",
        ));
    }
    w.push(0);
    Ok(w)
}

/// `p` without its verbatim prefix where a plain path names the same place
/// (`\\?\C:\x` as `C:\x`, `\\?\UNC\s\h\x` as `\\s\h\x`): programs given a
/// verbatim working directory often fail.
pub(super) fn plain(p: &Path) -> PathBuf {
    let s = p.to_string_lossy();
    let short_enough = s.len() < 250;
    let clean = !s.split('\\').skip(1).any(|c| c.ends_with(['.', ' ']));
    if short_enough && clean {
        if let Some(rest) = s.strip_prefix(r"\\?\UNC\") {
            return PathBuf::from(format!(r"\\{rest}"));
        }
        if let Some(rest) = s.strip_prefix(r"\\?\")
            && rest.as_bytes().get(1) == Some(&b':')
        {
            return PathBuf::from(rest);
        }
    }
    p.to_path_buf()
}
