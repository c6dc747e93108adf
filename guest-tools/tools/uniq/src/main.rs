use std::io::Write;

common::describe!(
    b"uniq: collapse adjacent repeated lines (-c count, -d only repeated, -u only unique)"
);

const HELP: &str = "Usage: uniq [-c] [-d] [-u] [INPUT [OUTPUT]]\nFilter adjacent matching lines from INPUT (or standard input).\n  -c  prefix lines by the number of occurrences\n  -d  only print duplicate lines, one for each group\n  -u  only print unique lines\n";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    common::help(&args, HELP);
    let (set, files) = common::flags("uniq", &args, "cdu", 1);
    let (count, dup, uni) = (set.contains(&'c'), set.contains(&'d'), set.contains(&'u'));
    let input = files.first().cloned().unwrap_or_else(|| "-".into());
    let data = common::read_input(&input)
        .unwrap_or_else(|e| common::die("uniq", 1, format!("{input}: {}", common::reason(&e))));
    let body = data.strip_suffix(b"\n").unwrap_or(&data);
    let lines: Vec<&[u8]> = if data.is_empty() {
        Vec::new()
    } else {
        body.split(|&b| b == b'\n').collect()
    };
    let mut out: Box<dyn Write> = match files.get(1) {
        Some(o) => Box::new(
            std::fs::File::create(o)
                .unwrap_or_else(|e| common::die("uniq", 1, format!("{o}: {}", common::reason(&e)))),
        ),
        None => Box::new(std::io::stdout().lock()),
    };
    let mut i = 0;
    while i < lines.len() {
        let mut j = i + 1;
        while j < lines.len() && lines[j] == lines[i] {
            j += 1;
        }
        let n = j - i;
        let keep = (!dup || n > 1) && (!uni || n == 1);
        if keep {
            if count {
                let _ = write!(out, "{n:7} ");
            }
            let _ = out.write_all(lines[i]);
            let _ = out.write_all(b"\n");
        }
        i = j;
    }
    let _ = out.flush();
}
