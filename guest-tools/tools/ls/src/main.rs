use std::io::Write;

common::describe!(b"ls: list directory contents, sorted (-a all, -l long, -1 one per line)");

const HELP: &str = "Usage: ls [-a] [-l] [-1] [PATH]...\nList each directory's entries (or the file itself), sorted by name.\n  -a  include entries starting with .\n  -l  long format: type, size, name\n  -1  one entry per line (always the case here)\n";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    common::help(&args, HELP);
    let (set, mut paths) = common::flags("ls", &args, "al1", 2);
    let (all, long) = (set.contains(&'a'), set.contains(&'l'));
    if paths.is_empty() {
        paths.push(".".into());
    }
    let many = paths.len() > 1;
    let mut out = std::io::stdout().lock();
    let mut status = 0;
    let entry = |out: &mut std::io::StdoutLock, name: &str, meta: Option<std::fs::Metadata>| {
        if long {
            let (kind, size) = match &meta {
                Some(m) if m.is_dir() => ('d', m.len()),
                Some(m) if m.file_type().is_symlink() => ('l', m.len()),
                Some(m) => ('-', m.len()),
                None => ('?', 0),
            };
            let _ = writeln!(out, "{kind} {size:>10} {name}");
        } else {
            let _ = writeln!(out, "{name}");
        }
    };
    for (i, p) in paths.iter().enumerate() {
        let meta = match std::fs::metadata(p) {
            Ok(m) => m,
            Err(e) => {
                eprintln!("ls: cannot access '{p}': {}", common::reason(&e));
                status = 2;
                continue;
            }
        };
        if !meta.is_dir() {
            entry(&mut out, p, Some(meta));
            continue;
        }
        if many {
            let _ = writeln!(out, "{}{p}:", if i > 0 { "\n" } else { "" });
        }
        let rd = match std::fs::read_dir(p) {
            Ok(rd) => rd,
            Err(e) => {
                eprintln!("ls: cannot open directory '{p}': {}", common::reason(&e));
                status = 2;
                continue;
            }
        };
        let mut names: Vec<(String, Option<std::fs::Metadata>)> = rd
            .flatten()
            .map(|e| {
                (
                    e.file_name().to_string_lossy().into_owned(),
                    e.path().symlink_metadata().ok(),
                )
            })
            .filter(|(n, _)| all || !n.starts_with('.'))
            .collect();
        names.sort_by(|a, b| a.0.cmp(&b.0));
        for (n, m) in names {
            entry(&mut out, &n, m);
        }
    }
    std::process::exit(status);
}
