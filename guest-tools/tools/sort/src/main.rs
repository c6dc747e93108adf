use std::io::Write;

common::describe!(b"sort: sort lines of files (-r reverse, -n numeric, -u unique)");

const HELP: &str = "Usage: sort [-r] [-n] [-u] [FILE]...\nWrite the sorted concatenation of FILEs (or standard input) to standard output.\n  -r  reverse   -n  compare by leading number   -u  output only the first of equal lines\n";

fn num(line: &[u8]) -> f64 {
    let s = String::from_utf8_lossy(line);
    let t = s.trim_start();
    let end = t
        .char_indices()
        .take_while(|(i, c)| c.is_ascii_digit() || *c == '.' || (*i == 0 && *c == '-'))
        .count();
    t[..end].parse().unwrap_or(0.0)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    common::help(&args, HELP);
    let (set, mut files) = common::flags("sort", &args, "rnu", 2);
    let (rev, numeric, uniq) = (set.contains(&'r'), set.contains(&'n'), set.contains(&'u'));
    if files.is_empty() {
        files.push("-".into());
    }
    let mut data = Vec::new();
    for f in &files {
        match common::read_input(f) {
            Ok(mut d) => {
                if !d.is_empty() && !d.ends_with(b"\n") {
                    d.push(b'\n');
                }
                data.extend_from_slice(&d);
            }
            Err(e) => common::die(
                "sort",
                2,
                format!("cannot read: {f}: {}", common::reason(&e)),
            ),
        }
    }
    let body = data.strip_suffix(b"\n").unwrap_or(&data);
    let mut lines: Vec<&[u8]> = if data.is_empty() {
        Vec::new()
    } else {
        body.split(|&b| b == b'\n').collect()
    };
    let cmp = |a: &&[u8], b: &&[u8]| {
        if numeric {
            num(a)
                .partial_cmp(&num(b))
                .unwrap_or(std::cmp::Ordering::Equal)
                .then_with(|| a.cmp(b))
        } else {
            a.cmp(b)
        }
    };
    lines.sort_by(cmp);
    if uniq {
        lines.dedup_by(|a, b| if numeric { num(a) == num(b) } else { a == b });
    }
    if rev {
        lines.reverse();
    }
    let mut out = std::io::stdout().lock();
    for l in lines {
        let _ = out.write_all(l);
        let _ = out.write_all(b"\n");
    }
}
