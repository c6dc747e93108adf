use std::io::Write;

common::describe!(b"tail: print the last lines (-n N, default 10) or bytes (-c N) of files");

const HELP: &str = "Usage: tail [-n N | -c N] [FILE]...\nPrint the last 10 lines of each FILE (or standard input).\n  -n N  print the last N lines\n  -c N  print the last N bytes\n";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    common::help(&args, HELP);
    let (mut lines, mut bytes) = (10usize, None);
    let mut files = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-n" => lines = common::count("tail", "-n", it.next()),
            "-c" => bytes = Some(common::count("tail", "-c", it.next())),
            s if s.starts_with("-n") => {
                lines = common::count("tail", "-n", Some(&s[2..].to_string()))
            }
            s if s.starts_with('-') && s.len() > 1 => {
                common::die("tail", 1, format!("invalid option -- '{}'", &s[1..]))
            }
            s => files.push(s.to_string()),
        }
    }
    if files.is_empty() {
        files.push("-".into());
    }
    let many = files.len() > 1;
    let mut out = std::io::stdout().lock();
    let mut status = 0;
    for (i, f) in files.iter().enumerate() {
        match common::read_input(f) {
            Ok(data) => {
                if many {
                    let name = if f == "-" { "standard input" } else { f };
                    let _ = writeln!(out, "{}==> {name} <==", if i > 0 { "\n" } else { "" });
                }
                let start = match bytes {
                    Some(n) => data.len().saturating_sub(n),
                    None => {
                        // Skip a final newline, then walk back `lines` line breaks.
                        let body = data.strip_suffix(b"\n").unwrap_or(&data);
                        if lines == 0 {
                            data.len()
                        } else {
                            body.iter()
                                .enumerate()
                                .rev()
                                .filter(|(_, b)| **b == b'\n')
                                .nth(lines - 1)
                                .map(|(i, _)| i + 1)
                                .unwrap_or(0)
                        }
                    }
                };
                let _ = out.write_all(&data[start..]);
            }
            Err(e) => {
                eprintln!(
                    "tail: cannot open '{f}' for reading: {}",
                    common::reason(&e)
                );
                status = 1;
            }
        }
    }
    std::process::exit(status);
}
