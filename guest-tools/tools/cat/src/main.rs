use std::io::Write;

common::describe!(b"cat: concatenate files (or stdin) to standard output; -n numbers lines");

const HELP: &str = "Usage: cat [-n] [FILE]...\nConcatenate FILEs (or standard input, also for -) to standard output.\n  -n  number all output lines\n";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    common::help(&args, HELP);
    let number = args.iter().any(|a| a == "-n");
    let mut files: Vec<&str> = args
        .iter()
        .filter(|a| *a != "-n")
        .map(String::as_str)
        .collect();
    if let Some(bad) = files.iter().find(|f| f.starts_with('-') && f.len() > 1) {
        common::die("cat", 1, format!("invalid option -- '{}'", &bad[1..]));
    }
    if files.is_empty() {
        files.push("-");
    }
    let mut out = std::io::stdout().lock();
    let mut status = 0;
    let mut line_no = 1usize;
    let mut at_line_start = true;
    for f in files {
        match common::read_input(f) {
            Ok(data) if number => {
                for chunk in data.split_inclusive(|&b| b == b'\n') {
                    if at_line_start {
                        let _ = write!(out, "{line_no:6}\t");
                        line_no += 1;
                    }
                    let _ = out.write_all(chunk);
                    at_line_start = chunk.ends_with(b"\n");
                }
            }
            Ok(data) => {
                let _ = out.write_all(&data);
            }
            Err(e) => {
                eprintln!("cat: {f}: {}", common::reason(&e));
                status = 1;
            }
        }
    }
    let _ = out.flush();
    std::process::exit(status);
}
