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
