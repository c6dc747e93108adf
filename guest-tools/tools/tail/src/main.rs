common::describe!(b"tail: print the last lines (-n N, default 10) or bytes (-c N) of files");

const HELP: &str = "Usage: tail [-n N | -c N] [FILE]...\nPrint the last 10 lines of each FILE (or standard input).\n  -n N  print the last N lines\n  -c N  print the last N bytes\n";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    common::help(&args, HELP);
    let span = common::span_args("tail", &args);
    let status = common::each_input("tail", &span.files, |data| {
        let start = match span.bytes {
            Some(n) => data.len().saturating_sub(n),
            None if span.lines == 0 => data.len(),
            None => {
                // Skip a final newline, then walk back `lines` line breaks.
                let body = data.strip_suffix(b"\n").unwrap_or(data);
                body.iter()
                    .enumerate()
                    .rev()
                    .filter(|(_, b)| **b == b'\n')
                    .nth(span.lines - 1)
                    .map(|(i, _)| i + 1)
                    .unwrap_or(0)
            }
        };
        &data[start..]
    });
    std::process::exit(status);
}
