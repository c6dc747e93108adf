use std::io::Write;

use regex::bytes::RegexBuilder;

common::describe!(b"grep: search files for a regular expression (-r recursive, -n line numbers, -i ignore case, -l names only, -v invert, -c count)");

const HELP: &str = "Usage: grep [-rnilvcE] PATTERN [FILE]...\nSearch FILEs (or standard input) for lines matching PATTERN (Rust regex syntax).\n  -r  search directories recursively   -n  prefix line numbers\n  -i  ignore case                      -l  print only names of matching files\n  -v  select non-matching lines        -c  print only a count per file\n  -E  extended syntax (the default here)\nExit status: 0 if a line was selected, 1 if none, 2 on error.\n";

struct Opts {
    recursive: bool,
    number: bool,
    names: bool,
    invert: bool,
    count: bool,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    common::help(&args, HELP);
    let mut o = Opts {
        recursive: false,
        number: false,
        names: false,
        invert: false,
        count: false,
    };
    let mut ignore_case = false;
    let mut rest = Vec::new();
    let mut only_args = false;
    for a in &args {
        if !only_args && a == "--" {
            only_args = true;
        } else if !only_args && a.starts_with('-') && a.len() > 1 {
            for c in a[1..].chars() {
                match c {
                    'r' | 'R' => o.recursive = true,
                    'n' => o.number = true,
                    'i' => ignore_case = true,
                    'l' => o.names = true,
                    'v' => o.invert = true,
                    'c' => o.count = true,
                    'E' => {}
                    _ => common::die("grep", 2, format!("invalid option -- '{c}'")),
                }
            }
        } else {
            rest.push(a.clone());
        }
    }
    if rest.is_empty() {
        common::die("grep", 2, "no pattern given (grep --help)");
    }
    let pattern = rest.remove(0);
    let re = match RegexBuilder::new(&pattern)
        .case_insensitive(ignore_case)
        .build()
    {
        Ok(r) => r,
        Err(e) => common::die("grep", 2, format!("invalid pattern: {e}")),
    };
    let mut files: Vec<String> = Vec::new();
    let mut status_err = false;
    if rest.is_empty() {
        rest.push(if o.recursive { ".".into() } else { "-".into() });
    }
    for f in &rest {
        if o.recursive && std::fs::metadata(f).map(|m| m.is_dir()).unwrap_or(false) {
            let mut found: Vec<String> = walkdir::WalkDir::new(f)
                .sort_by_file_name()
                .into_iter()
                .filter_map(|e| match e {
                    Ok(e) if e.file_type().is_file() => {
                        Some(e.path().to_string_lossy().into_owned())
                    }
                    Ok(_) => None,
                    Err(err) => {
                        eprintln!("grep: {err}");
                        None
                    }
                })
                .collect();
            files.append(&mut found);
        } else {
            files.push(f.clone());
        }
    }
    let show_names = files.len() > 1 || o.recursive;
    let mut out = std::io::stdout().lock();
    let mut any = false;
    for f in &files {
        let data = match common::read_input(f) {
            Ok(d) => d,
            Err(e) => {
                eprintln!("grep: {f}: {}", common::reason(&e));
                status_err = true;
                continue;
            }
        };
        let name = if f == "-" { "(standard input)" } else { f };
        let mut n = 0usize;
        let body = data.strip_suffix(b"\n").unwrap_or(&data);
        if data.is_empty() {
            // no lines
        } else {
            for (i, line) in body.split(|&b| b == b'\n').enumerate() {
                if re.is_match(line) != o.invert {
                    n += 1;
                    if o.names || o.count {
                        continue;
                    }
                    if show_names {
                        let _ = write!(out, "{name}:");
                    }
                    if o.number {
                        let _ = write!(out, "{}:", i + 1);
                    }
                    let _ = out.write_all(line);
                    let _ = out.write_all(b"\n");
                }
            }
        }
        if o.count {
            if show_names {
                let _ = writeln!(out, "{name}:{n}");
            } else {
                let _ = writeln!(out, "{n}");
            }
        } else if o.names && n > 0 {
            let _ = writeln!(out, "{name}");
        }
        any |= n > 0;
    }
    std::process::exit(if status_err {
        2
    } else if any {
        0
    } else {
        1
    });
}
