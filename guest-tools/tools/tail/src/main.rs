use std::io::{Read, Seek, SeekFrom};

common::describe!(b"tail: print the last lines (-n N, default 10) or bytes (-c N) of files");

const HELP: &str = "Usage: tail [-n N | -c N] [FILE]...\nPrint the last 10 lines of each FILE (or standard input).\n  -n N  print the last N lines\n  -c N  print the last N bytes\n";

/// Where the last `lines` lines of `data` start: skip a final newline, then
/// walk back `lines` line breaks (0 when there are fewer).
fn lines_start(data: &[u8], lines: usize) -> usize {
    if lines == 0 {
        return data.len();
    }
    let body = data.strip_suffix(b"\n").unwrap_or(data);
    memchr::memrchr_iter(b'\n', body)
        .nth(lines - 1)
        .map(|i| i + 1)
        .unwrap_or(0)
}

/// Copies the rest of `input` to `out`.
fn copy_rest(
    input: &mut impl Read,
    buf: &mut Vec<u8>,
    out: &mut common::Out,
) -> std::io::Result<()> {
    loop {
        let n = common::read_some(input, buf)?;
        if n == 0 {
            return Ok(());
        }
        out.put(&buf[..n]);
        common::grow_after(buf, n, common::BLOCK);
    }
}

/// A regular file of `len` bytes: find where the output starts by reading
/// backwards from the end a block at a time, then copy from there.
fn tail_file(
    file: &mut std::fs::File,
    len: u64,
    span: &common::Span,
    buf: &mut Vec<u8>,
    out: &mut common::Out,
) -> std::io::Result<()> {
    let start = match span.bytes {
        Some(n) => len.saturating_sub(n as u64),
        None if span.lines == 0 => return Ok(()),
        None => {
            let mut need = span.lines;
            let mut start = 0;
            let mut hi = len;
            'blocks: while hi > 0 {
                let lo = hi.saturating_sub(buf.len() as u64);
                file.seek(SeekFrom::Start(lo))?;
                // `hi - lo` is at most the buffer's length.
                let want = (hi - lo) as usize;
                let got = common::read_full(file, &mut buf[..want])?;
                let mut block = &buf[..got];
                if hi == len {
                    // A final newline ends the last line; it does not start one.
                    block = block.strip_suffix(b"\n").unwrap_or(block);
                }
                for i in memchr::memrchr_iter(b'\n', block) {
                    need -= 1;
                    if need == 0 {
                        start = lo + i as u64 + 1;
                        break 'blocks;
                    }
                }
                common::grow_after(buf, got, common::BLOCK);
                hi = lo;
            }
            start
        }
    };
    file.seek(SeekFrom::Start(start))?;
    copy_rest(file, buf, out)
}

/// A stream (standard input): keep only what may still be in the last lines
/// or bytes. What is kept is trimmed to them whenever it has doubled, so it
/// stays under twice their size plus a block.
fn tail_stream(
    input: &mut impl Read,
    span: &common::Span,
    buf: &mut Vec<u8>,
    out: &mut common::Out,
) -> std::io::Result<()> {
    let start = |kept: &[u8]| match span.bytes {
        Some(n) => kept.len().saturating_sub(n),
        None => lines_start(kept, span.lines),
    };
    let mut kept: Vec<u8> = Vec::new();
    let mut trim_at = buf.len();
    loop {
        let n = common::read_some(input, buf)?;
        if n == 0 {
            break;
        }
        kept.extend_from_slice(&buf[..n]);
        if kept.len() > trim_at {
            let s = start(&kept);
            kept.drain(..s);
            trim_at = kept.len().saturating_mul(2).max(buf.len());
        }
        common::grow_after(buf, n, common::BLOCK);
    }
    let s = start(&kept);
    out.put(&kept[s..]);
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    common::help(&args, HELP);
    let span = common::span_args("tail", &args);
    let mut buf = common::read_buffer();
    let (status, out) = common::each_input("tail", &span.files, |input, out| {
        match input.regular_file() {
            Some((file, len)) => tail_file(file, len, &span, &mut buf, out),
            None => tail_stream(input, &span, &mut buf, out),
        }
    });
    out.exit(status);
}
