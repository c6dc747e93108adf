use std::io::Write;

common::describe!(
    b"diff: compare two files line by line, as a unified diff (-u, the default here)"
);

const HELP: &str = "Usage: diff [-u] [-U N] FILE1 FILE2\nCompare FILE1 and FILE2 line by line and print a unified diff.\n  -u     unified format with 3 lines of context (the default)\n  -U N   N lines of context\nExit status: 0 if the inputs are the same, 1 if different, 2 if trouble.\n";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    common::help(&args, HELP);
    let mut context = 3usize;
    let mut files = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-u" => {}
            "-U" => context = common::count("diff", "-U", it.next()),
            s if s.starts_with("-U") => {
                context = common::count("diff", "-U", Some(&s[2..].to_string()))
            }
            s if s.starts_with('-') && s.len() > 1 => {
                common::die("diff", 2, format!("invalid option -- '{}'", &s[1..]))
            }
            s => files.push(s.to_string()),
        }
    }
    if files.len() != 2 {
        common::die("diff", 2, "expected two files (diff --help)");
    }
    let read = |f: &str| -> String {
        match common::read_input(f) {
            Ok(d) => String::from_utf8_lossy(&d).into_owned(),
            Err(e) => common::die("diff", 2, format!("{f}: {}", common::reason(&e))),
        }
    };
    let (a, b) = (read(&files[0]), read(&files[1]));
    if a == b {
        std::process::exit(0);
    }
    let d = similar::TextDiff::from_lines(&a, &b);
    let text = d
        .unified_diff()
        .context_radius(context)
        .header(&files[0], &files[1])
        .to_string();
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    std::process::exit(1);
}
