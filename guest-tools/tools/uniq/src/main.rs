use std::io::Write;

common::describe!(
    b"uniq: collapse adjacent repeated lines (-c count, -d only repeated, -u only unique)"
);

const HELP: &str = "Usage: uniq [-c] [-d] [-u] [INPUT [OUTPUT]]\nFilter adjacent matching lines from INPUT (or standard input).\n  -c  prefix lines by the number of occurrences\n  -d  only print duplicate lines, one for each group\n  -u  only print unique lines\nLines are compared one at a time, each at most 8 MiB long.\n";

/// The longest line compared, newline included.
const MAX_LINE: usize = 8 << 20;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    common::help(&args, HELP);
    let (set, files) = common::flags("uniq", &args, "cdu", 1);
    let (count, dup, uni) = (set.contains(&'c'), set.contains(&'d'), set.contains(&'u'));
    let input = files.first().cloned().unwrap_or_else(|| "-".into());
    let opened = common::open_input(&input)
        .unwrap_or_else(|e| common::die("uniq", 1, format!("{input}: {}", common::reason(&e))));
    let mut out: Box<dyn Write> = match files.get(1) {
        Some(o) => Box::new(std::io::BufWriter::with_capacity(
            common::BLOCK,
            std::fs::File::create(o)
                .unwrap_or_else(|e| common::die("uniq", 1, format!("{o}: {}", common::reason(&e)))),
        )),
        None => Box::new(common::Out::new("uniq", 1)),
    };
    let mut emit = |line: &[u8], n: u64| {
        let keep = (!dup || n > 1) && (!uni || n == 1);
        if keep {
            if count {
                let _ = write!(out, "{n:7} ");
            }
            let _ = out.write_all(line);
            let _ = out.write_all(b"\n");
        }
    };
    // The current group: its line and how many times it came in a row.
    let mut prev: Vec<u8> = Vec::new();
    let mut n = 0u64;
    let mut lines = common::Lines::new(opened, MAX_LINE);
    let mut line_no = 0u64;
    loop {
        match lines.next_line() {
            Ok(Some(line)) => {
                line_no += 1;
                if n > 0 && line == prev.as_slice() {
                    n += 1;
                } else {
                    if n > 0 {
                        emit(&prev, n);
                    }
                    prev.clear();
                    prev.extend_from_slice(line);
                    n = 1;
                }
            }
            Ok(None) => break,
            Err(e) => {
                let _ = out.flush();
                let why = match e {
                    common::LineError::Io(e) => common::reason(&e),
                    common::LineError::TooLong => format!(
                        "line {} is longer than the {} MiB line limit",
                        line_no + 1,
                        MAX_LINE >> 20
                    ),
                };
                common::die("uniq", 1, format!("{input}: {why}"));
            }
        }
    }
    if n > 0 {
        emit(&prev, n);
    }
    let _ = out.flush();
}
