use std::io::Write;

common::describe!(b"tree: show a directory as an indented tree (-a all, -L depth), with counts");

const HELP: &str = "Usage: tree [-a] [-L DEPTH] [PATH]\nList PATH (default .) as a tree, sorted by name, then count directories and files.\n  -a        include entries starting with .\n  -L DEPTH  descend at most DEPTH levels\n";

struct Walk<'a> {
    out: std::io::StdoutLock<'a>,
    all: bool,
    max: usize,
    dirs: usize,
    files: usize,
}

impl Walk<'_> {
    fn dir(&mut self, path: &std::path::Path, prefix: &str, depth: usize) {
        if depth >= self.max {
            return;
        }
        let Ok(rd) = std::fs::read_dir(path) else {
            return;
        };
        let mut entries: Vec<_> = rd
            .flatten()
            .filter(|e| self.all || !e.file_name().to_string_lossy().starts_with('.'))
            .collect();
        entries.sort_by_key(|e| e.file_name());
        let n = entries.len();
        for (i, e) in entries.into_iter().enumerate() {
            let last = i + 1 == n;
            let name = e.file_name().to_string_lossy().into_owned();
            let _ = writeln!(
                self.out,
                "{prefix}{}{name}",
                if last { "`-- " } else { "|-- " }
            );
            let is_dir = e.file_type().map(|t| t.is_dir()).unwrap_or(false);
            if is_dir {
                self.dirs += 1;
                let deeper = format!("{prefix}{}", if last { "    " } else { "|   " });
                self.dir(&e.path(), &deeper, depth + 1);
            } else {
                self.files += 1;
            }
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    common::help(&args, HELP);
    let mut all = false;
    let mut max = usize::MAX;
    let mut root = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-a" => all = true,
            "-L" => max = common::count("tree", "-L", it.next()),
            s if s.starts_with('-') && s.len() > 1 => {
                common::die("tree", 1, format!("invalid option -- '{}'", &s[1..]))
            }
            s => root = Some(s.to_string()),
        }
    }
    let root = root.unwrap_or_else(|| ".".into());
    if !std::fs::metadata(&root)
        .map(|m| m.is_dir())
        .unwrap_or(false)
    {
        common::die("tree", 2, format!("{root} [error opening dir]"));
    }
    let mut w = Walk {
        out: std::io::stdout().lock(),
        all,
        max,
        dirs: 0,
        files: 0,
    };
    let _ = writeln!(w.out, "{root}");
    w.dir(std::path::Path::new(&root), "", 0);
    let (d, f) = (w.dirs, w.files);
    let _ = writeln!(
        w.out,
        "\n{d} director{}, {f} file{}",
        if d == 1 { "y" } else { "ies" },
        if f == 1 { "" } else { "s" }
    );
}
