//! Shared bits of the guest tools.

use std::io::{self, Read};

/// Embeds the tool's one-line description in the `toolhost-description` custom
/// section, where `toolhost tools` reads it.
#[macro_export]
macro_rules! describe {
    ($text:literal) => {
        #[unsafe(link_section = "toolhost-description")]
        #[used]
        static TOOLHOST_DESCRIPTION: [u8; $text.len()] = *$text;
    };
}

/// Prints `tool: message` on stderr and exits with `code`.
pub fn die(tool: &str, code: i32, message: impl std::fmt::Display) -> ! {
    eprintln!("{tool}: {message}");
    std::process::exit(code)
}

/// The OS reason of an I/O error, as coreutils phrase it.
pub fn reason(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => "No such file or directory".into(),
        io::ErrorKind::PermissionDenied => "Permission denied".into(),
        io::ErrorKind::IsADirectory => "Is a directory".into(),
        _ => {
            let s = e.to_string();
            match s.find(" (os error") {
                Some(i) => s[..i].to_string(),
                None => s,
            }
        }
    }
}

/// Reads a named file, or stdin for `-`.
pub fn read_input(name: &str) -> io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    if name == "-" {
        io::stdin().lock().read_to_end(&mut buf)?;
    } else {
        if std::fs::metadata(name)?.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                "Is a directory",
            ));
        }
        buf = std::fs::read(name)?;
    }
    Ok(buf)
}

/// Prints the help text and exits 0 when `--help` is among the arguments.
pub fn help(args: &[String], text: &str) {
    if args.iter().any(|a| a == "--help") {
        print!("{text}");
        std::process::exit(0);
    }
}

/// Parses a count argument or exits with a usage error.
pub fn count(tool: &str, flag: &str, v: Option<&String>) -> usize {
    match v.and_then(|s| s.parse().ok()) {
        Some(n) => n,
        None => die(
            tool,
            1,
            format!(
                "invalid number for {flag}: {:?}",
                v.map(String::as_str).unwrap_or("")
            ),
        ),
    }
}

/// Splits arguments into single-letter flags (grouped like `-lw`, each one of
/// `allowed`) and operands; an unknown flag exits with `code` and a coreutils
/// style message. A lone `-` is an operand (standard input).
pub fn flags(tool: &str, args: &[String], allowed: &str, code: i32) -> (Vec<char>, Vec<String>) {
    let mut set = Vec::new();
    let mut operands = Vec::new();
    for a in args {
        if a.starts_with('-') && a.len() > 1 {
            for c in a[1..].chars() {
                if !allowed.contains(c) {
                    die(tool, code, format!("invalid option -- '{c}'"));
                }
                set.push(c);
            }
        } else {
            operands.push(a.clone());
        }
    }
    (set, operands)
}

/// The options head and tail share: `-n N` lines (default 10) or `-c N` bytes
/// (also written `-nN`, `-cN`), and the files (`-` when none is given).
pub struct Span {
    /// Lines to keep.
    pub lines: usize,
    /// Bytes to keep instead of lines, when given.
    pub bytes: Option<usize>,
    /// Inputs.
    pub files: Vec<String>,
}

/// Parses head/tail arguments, exiting on a bad option.
pub fn span_args(tool: &str, args: &[String]) -> Span {
    let mut span = Span {
        lines: 10,
        bytes: None,
        files: Vec::new(),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-n" => span.lines = count(tool, "-n", it.next()),
            "-c" => span.bytes = Some(count(tool, "-c", it.next())),
            s if s.starts_with("-n") => span.lines = count(tool, "-n", Some(&s[2..].to_string())),
            s if s.starts_with("-c") => {
                span.bytes = Some(count(tool, "-c", Some(&s[2..].to_string())))
            }
            s if s.starts_with('-') && s.len() > 1 => {
                die(tool, 1, format!("invalid option -- '{}'", &s[1..]))
            }
            s => span.files.push(s.to_string()),
        }
    }
    if span.files.is_empty() {
        span.files.push("-".into());
    }
    span
}

/// Writes `pick(data)` for each input, with `==> NAME <==` headers when there
/// are several, as head and tail do. Returns the exit status.
pub fn each_input(tool: &str, files: &[String], pick: impl Fn(&[u8]) -> &[u8]) -> i32 {
    use std::io::Write;
    let many = files.len() > 1;
    let mut out = std::io::stdout().lock();
    let mut status = 0;
    for (i, f) in files.iter().enumerate() {
        match read_input(f) {
            Ok(data) => {
                if many {
                    let name = if f == "-" { "standard input" } else { f };
                    let _ = writeln!(out, "{}==> {name} <==", if i > 0 { "\n" } else { "" });
                }
                let _ = out.write_all(pick(&data));
            }
            Err(e) => {
                eprintln!("{tool}: cannot open '{f}' for reading: {}", reason(&e));
                status = 1;
            }
        }
    }
    let _ = out.flush();
    status
}
