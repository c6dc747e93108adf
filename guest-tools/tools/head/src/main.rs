common::describe!(b"head: print the first lines (-n N, default 10) or bytes (-c N) of files");

const HELP: &str = "Usage: head [-n N | -c N] [FILE]...\nPrint the first 10 lines of each FILE (or standard input).\n  -n N  print the first N lines\n  -c N  print the first N bytes\n";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    common::help(&args, HELP);
    let span = common::span_args("head", &args);
    let status = common::each_input("head", &span.files, |data| {
        let end = match span.bytes {
            Some(n) => n.min(data.len()),
            None if span.lines == 0 => 0,
            None => data
                .iter()
                .enumerate()
                .filter(|(_, b)| **b == b'\n')
                .nth(span.lines - 1)
                .map(|(i, _)| i + 1)
                .unwrap_or(data.len()),
        };
        &data[..end]
    });
    std::process::exit(status);
}
