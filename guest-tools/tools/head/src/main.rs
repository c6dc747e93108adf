use std::io::Write;

common::describe!(b"head: print the first lines (-n N, default 10) or bytes (-c N) of files");

const HELP: &str = "Usage: head [-n N | -c N] [FILE]...\nPrint the first 10 lines of each FILE (or standard input).\n  -n N  print the first N lines\n  -c N  print the first N bytes\n";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    common::help(&args, HELP);
    let (mut lines, mut bytes) = (10usize, None);
    let mut files = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-n" => lines = common::count("head", "-n", it.next()),
            "-c" => bytes = Some(common::count("head", "-c", it.next())),
            s if s.starts_with("-n") => {
                lines = common::count("head", "-n", Some(&s[2..].to_string()))
            }
            s if s.starts_with("-c") => {
                bytes = Some(common::count("head", "-c", Some(&s[2..].to_string())))
            }
            s if s.starts_with('-') && s.len() > 1 => {
                common::die("head", 1, format!("invalid option -- '{}'", &s[1..]))
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
                let end = match bytes {
                    Some(n) => n.min(data.len()),
                    None => data
                        .iter()
                        .enumerate()
                        .filter(|(_, b)| **b == b'\n')
                        .nth(lines.wrapping_sub(1))
                        .map(|(i, _)| i + 1)
                        .filter(|_| lines > 0)
                        .unwrap_or(if lines == 0 { 0 } else { data.len() }),
                };
                let _ = out.write_all(&data[..end]);
            }
            Err(e) => {
                eprintln!(
                    "head: cannot open '{f}' for reading: {}",
                    common::reason(&e)
                );
                status = 1;
            }
        }
    }
    std::process::exit(status);
}
