use std::io::Write;

common::describe!(b"find: walk directories listing paths, filtered by -name GLOB and -type f|d");

const HELP: &str = "Usage: find [PATH]... [-name GLOB] [-type f|d] [-maxdepth N]\nList every path under each PATH (default .), depth first, sorted by name.\n  -name GLOB   keep entries whose file name matches GLOB (*, ?, [..], {a,b})\n  -type f|d    keep only files (f) or directories (d)\n  -maxdepth N  descend at most N levels below each PATH\n";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    common::help(&args, HELP);
    let mut roots = Vec::new();
    let mut name: Option<globset::GlobMatcher> = None;
    let mut kind: Option<char> = None;
    let mut maxdepth = usize::MAX;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-name" => {
                let g = it
                    .next()
                    .unwrap_or_else(|| common::die("find", 1, "missing argument to -name"));
                match globset::Glob::new(g) {
                    Ok(g) => name = Some(g.compile_matcher()),
                    Err(e) => common::die("find", 1, format!("invalid glob {g:?}: {e}")),
                }
            }
            "-type" => match it.next().map(String::as_str) {
                Some("f") => kind = Some('f'),
                Some("d") => kind = Some('d'),
                other => common::die(
                    "find",
                    1,
                    format!("unknown argument to -type: {}", other.unwrap_or("")),
                ),
            },
            "-maxdepth" => maxdepth = common::count("find", "-maxdepth", it.next()),
            s if s.starts_with('-') => common::die("find", 1, format!("unknown predicate '{s}'")),
            s => roots.push(s.to_string()),
        }
    }
    if roots.is_empty() {
        roots.push(".".into());
    }
    let mut out = std::io::stdout().lock();
    let mut status = 0;
    for root in &roots {
        for e in walkdir::WalkDir::new(root)
            .max_depth(maxdepth)
            .sort_by_file_name()
        {
            let e = match e {
                Ok(e) => e,
                Err(err) => {
                    let shown = err
                        .path()
                        .map(|p| p.display().to_string())
                        .unwrap_or_default();
                    let why = err
                        .io_error()
                        .map(common::reason)
                        .unwrap_or_else(|| err.to_string());
                    eprintln!("find: '{shown}': {why}");
                    status = 1;
                    continue;
                }
            };
            let ft = e.file_type();
            let keep_kind = match kind {
                Some('f') => ft.is_file(),
                Some('d') => ft.is_dir(),
                _ => true,
            };
            let keep_name = name.as_ref().is_none_or(|m| m.is_match(e.file_name()));
            if keep_kind && keep_name {
                let _ = writeln!(out, "{}", e.path().display());
            }
        }
    }
    std::process::exit(status);
}
