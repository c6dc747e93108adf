use std::io::Read;

common::describe!(b"head: print the first lines (-n N, default 10) or bytes (-c N) of files");

const HELP: &str = "Usage: head [-n N | -c N] [FILE]...\nPrint the first 10 lines of each FILE (or standard input).\n  -n N  print the first N lines\n  -c N  print the first N bytes\n";

/// Copies the first `bytes` bytes, or else the first `lines` lines, of
/// `input`, and stops reading there.
fn head(
    input: &mut impl Read,
    bytes: Option<usize>,
    lines: usize,
    buf: &mut Vec<u8>,
    out: &mut common::Out,
) -> std::io::Result<()> {
    match bytes {
        Some(mut left) => {
            while left > 0 {
                let want = left.min(buf.len());
                let n = common::read_some(input, &mut buf[..want])?;
                if n == 0 {
                    break;
                }
                out.put(&buf[..n]);
                left -= n;
                common::grow_after(buf, n, common::BLOCK);
            }
        }
        None => {
            let mut left = lines;
            while left > 0 {
                let n = common::read_some(input, buf)?;
                if n == 0 {
                    break;
                }
                let data = &buf[..n];
                // Up to the end of the `left`-th line, if it is in this block.
                let mut seen = 0;
                let mut cut = n;
                for i in memchr::memchr_iter(b'\n', data) {
                    seen += 1;
                    if seen == left {
                        cut = i + 1;
                        break;
                    }
                }
                out.put(&data[..cut]);
                left -= seen;
                common::grow_after(buf, n, common::BLOCK);
            }
        }
    }
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    common::help(&args, HELP);
    let span = common::span_args("head", &args);
    let mut buf = common::read_buffer();
    let (status, out) = common::each_input("head", &span.files, |input, out| {
        head(input, span.bytes, span.lines, &mut buf, out)
    });
    out.exit(status);
}
