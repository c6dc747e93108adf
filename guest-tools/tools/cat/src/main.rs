use std::io::Read;

common::describe!(b"cat: concatenate files (or stdin) to standard output; -n numbers lines");

const HELP: &str = "Usage: cat [-n] [FILE]...\nConcatenate FILEs (or standard input, also for -) to standard output.\n  -n  number all output lines\n";

/// Line numbering across all the inputs, as GNU cat -n does.
struct Numbering {
    line_no: common::LineNumber,
    at_line_start: bool,
    scratch: Vec<u8>,
}

impl Numbering {
    /// Writes `data` with a `{n:6}\t` prefix at the start of each line.
    fn write(&mut self, data: &[u8], out: &mut common::Out) {
        self.scratch.clear();
        let mut from = 0;
        let ends = memchr::memchr_iter(b'\n', data).map(|i| i + 1);
        for to in ends.chain((!data.is_empty()).then_some(data.len())) {
            if to <= from {
                continue;
            }
            if self.at_line_start {
                self.line_no.push(&mut self.scratch, 6);
                self.scratch.push(b'\t');
                self.line_no.next();
            }
            self.scratch.extend_from_slice(&data[from..to]);
            self.at_line_start = data[to - 1] == b'\n';
            from = to;
        }
        out.put(&self.scratch);
    }
}

/// Copies `input` to `out` a block at a time.
fn copy(
    input: &mut impl Read,
    buf: &mut Vec<u8>,
    numbering: &mut Option<Numbering>,
    out: &mut common::Out,
) -> std::io::Result<()> {
    loop {
        let n = common::read_some(input, buf)?;
        if n == 0 {
            return Ok(());
        }
        match numbering {
            Some(numbering) => numbering.write(&buf[..n], out),
            None => out.put(&buf[..n]),
        }
        common::grow_after(buf, n, common::BLOCK);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    common::help(&args, HELP);
    let number = args.iter().any(|a| a == "-n");
    let mut files: Vec<&str> = args
        .iter()
        .filter(|a| *a != "-n")
        .map(String::as_str)
        .collect();
    if let Some(bad) = files.iter().find(|f| f.starts_with('-') && f.len() > 1) {
        common::die("cat", 1, format!("invalid option -- '{}'", &bad[1..]));
    }
    if files.is_empty() {
        files.push("-");
    }
    let mut out = common::Out::new("cat", 1);
    let mut buf = common::read_buffer();
    let mut numbering = number.then(|| Numbering {
        line_no: common::LineNumber::one(),
        at_line_start: true,
        scratch: Vec::with_capacity(common::BLOCK * 2),
    });
    let mut status = 0;
    for f in files {
        let result = common::open_input(f)
            .and_then(|mut input| copy(&mut input, &mut buf, &mut numbering, &mut out));
        if let Err(e) = result {
            out.flush();
            eprintln!("cat: {f}: {}", common::reason(&e));
            status = 1;
        }
    }
    out.exit(status);
}
