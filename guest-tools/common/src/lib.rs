//! Shared bits of the guest tools.

use std::io::{self, Read, Write};

/// Embeds the tool's one-line description in the `toolhost-description` custom
/// section, where `toolhost tools` reads it.
#[macro_export]
macro_rules! describe {
    ($text:literal) => {
        #[unsafe(link_section = "toolhost-description")]
        #[used]
        static TOOLHOST_DESCRIPTION: [u8; $text.len()] = *$text;
    };
}

/// Prints `tool: message` on stderr and exits with `code`.
pub fn die(tool: &str, code: i32, message: impl std::fmt::Display) -> ! {
    eprintln!("{tool}: {message}");
    std::process::exit(code)
}

/// The OS reason of an I/O error, as coreutils phrase it.
pub fn reason(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => "No such file or directory".into(),
        io::ErrorKind::PermissionDenied => "Permission denied".into(),
        io::ErrorKind::IsADirectory => "Is a directory".into(),
        _ => {
            let s = e.to_string();
            match s.find(" (os error") {
                Some(i) => s[..i].to_string(),
                None => s,
            }
        }
    }
}

/// How much a tool reads from its input at a time, and the size of the
/// output buffer. Every streaming tool's memory is a few of these, whatever
/// the size of its input.
pub const BLOCK: usize = 256 * 1024;

/// The first length of a read buffer ([`read_buffer`]).
pub const FIRST_BLOCK: usize = 16 * 1024;

/// A new buffer for reading an input a block at a time: [`FIRST_BLOCK`]
/// zeroed bytes, which [`grow_after`] doubles, up to [`BLOCK`], after each
/// read that fills them.
///
/// So the memory a call writes follows what it reads. Every page a call
/// writes is written twice more: zeroed by the allocator, then reset by the
/// engine when the call ends. A zeroed [`BLOCK`] in every call was over half
/// the time of a small one (`wc -l` of three lines on stdin: 33 µs against
/// 15 µs).
pub fn read_buffer() -> Vec<u8> {
    vec![0; FIRST_BLOCK]
}

/// After a read of `n` bytes into the whole of `buf`: when the read filled
/// it, doubles `buf` (up to `max`), so that a long input is read in blocks
/// of `max`. The bytes read stay where they are; `buf` never shrinks, and
/// a `buf` of `max` or more is left alone.
pub fn grow_after(buf: &mut Vec<u8>, n: usize, max: usize) {
    if n == buf.len() && buf.len() < max {
        let len = buf.len().saturating_mul(2).min(max);
        buf.resize(len, 0);
    }
}

/// An opened input: a file, or standard input for `-`.
pub enum Input {
    /// Standard input.
    Stdin(io::StdinLock<'static>),
    /// A file (a directory fails at its first read).
    File(std::fs::File),
}

impl Read for Input {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Input::Stdin(s) => s.read(buf),
            Input::File(f) => f.read(buf).map_err(|e| {
                // A directory opens (WASI opens it as one), and reading it
                // fails with EBADF: say what coreutils say.
                if f.metadata().is_ok_and(|m| m.is_dir()) {
                    io::Error::new(io::ErrorKind::IsADirectory, "Is a directory")
                } else {
                    e
                }
            }),
        }
    }
}

impl Input {
    /// The file, when this is a regular file (seekable, with a known size).
    pub fn regular_file(&mut self) -> Option<(&mut std::fs::File, u64)> {
        match self {
            Input::File(f) => match f.metadata() {
                Ok(m) if m.is_file() => Some((f, m.len())),
                _ => None,
            },
            Input::Stdin(_) => None,
        }
    }
}

/// Opens a named file, or stdin for `-`. The path is looked up once, by
/// the open; a directory is an error (`Is a directory`, as coreutils report
/// it) at the first read.
pub fn open_input(name: &str) -> io::Result<Input> {
    if name == "-" {
        return Ok(Input::Stdin(io::stdin().lock()));
    }
    Ok(Input::File(std::fs::File::open(name)?))
}

/// Reads a named file, or stdin for `-`, whole: for the tools that need all
/// of it at once (jq). The streaming tools use [`open_input`].
pub fn read_input(name: &str) -> io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    open_input(name)?.read_to_end(&mut buf)?;
    Ok(buf)
}

/// Reads until `buf` is full or the input ends, retrying interrupted reads.
/// Returns how much was read: less than `buf.len()` only at the end.
pub fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// One read, retrying an interrupted one: 0 only at the end.
pub fn read_some(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match r.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            other => return other,
        }
    }
}

/// Standard output through a [`BLOCK`] buffer (Rust's own stdout flushes at
/// every newline, a host call per line). A failed write ends the tool with
/// `tool: write error: REASON` and `code`; nothing input controls can make a
/// write fail, but a tool must not go on reading a huge input for nobody.
/// Call [`Out::flush`] before `process::exit`, which skips destructors.
pub struct Out {
    w: io::BufWriter<io::StdoutLock<'static>>,
    tool: &'static str,
    code: i32,
}

impl Out {
    /// Buffered stdout for `tool`, which exits with `code` if a write fails.
    pub fn new(tool: &'static str, code: i32) -> Out {
        Out {
            w: io::BufWriter::with_capacity(BLOCK, io::stdout().lock()),
            tool,
            code,
        }
    }

    /// Writes `bytes` (or ends the tool).
    pub fn put(&mut self, bytes: &[u8]) {
        if let Err(e) = self.w.write_all(bytes) {
            self.fail(&e)
        }
    }

    /// Writes out what is buffered (or ends the tool).
    pub fn flush(&mut self) {
        if let Err(e) = self.w.flush() {
            self.fail(&e)
        }
    }

    /// Flushes, then exits with `code`.
    pub fn exit(mut self, code: i32) -> ! {
        self.flush();
        std::process::exit(code)
    }

    /// Flushes what was written, then prints `tool: message` on stderr and
    /// exits with `code`.
    pub fn die(mut self, code: i32, message: impl std::fmt::Display) -> ! {
        self.flush();
        die(self.tool, code, message)
    }

    fn fail(&self, e: &io::Error) -> ! {
        die(self.tool, self.code, format!("write error: {}", reason(e)))
    }
}

impl Write for Out {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.put(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Out::flush(self);
        Ok(())
    }
}

/// Appends `n` in decimal, right-aligned in `width` columns, to `buf`:
/// `format!("{n:width$}")` without the formatting machinery (grep -n writes
/// one per selected line).
pub fn push_number(buf: &mut Vec<u8>, n: u64, width: usize) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut v = n;
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    let len = digits.len() - i;
    buf.extend(std::iter::repeat_n(b' ', width.saturating_sub(len)));
    buf.extend_from_slice(&digits[i..]);
}

/// A line number kept in decimal, counted up in place: cat -n writes one per
/// line, and a division per digit is slow in wasm (no 64-bit multiply-high
/// for the usual division by a constant).
pub struct LineNumber {
    digits: [u8; 20],
    first: usize,
}

impl LineNumber {
    /// Number 1.
    pub fn one() -> Self {
        let mut digits = [b'0'; 20];
        digits[19] = b'1';
        LineNumber { digits, first: 19 }
    }

    /// Appends the number, right-aligned in `width` columns, to `buf`.
    pub fn push(&self, buf: &mut Vec<u8>, width: usize) {
        let digits = &self.digits[self.first..];
        buf.extend(std::iter::repeat_n(
            b' ',
            width.saturating_sub(digits.len()),
        ));
        buf.extend_from_slice(digits);
    }

    /// Adds one.
    pub fn next(&mut self) {
        for i in (0..self.digits.len()).rev() {
            if self.digits[i] == b'9' {
                self.digits[i] = b'0';
            } else {
                self.digits[i] += 1;
                self.first = self.first.min(i);
                return;
            }
        }
    }
}

/// Eight bytes at a time (SWAR): the guests are built without SIMD, and
/// memchr's portable count goes a byte at a time.
const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;

/// The high bit of each byte of `x` that equals `b`, and no other bit.
#[inline(always)]
fn bytes_equal(x: u64, b: u8) -> u64 {
    let y = x ^ (LO * u64::from(b));
    // A byte of y is 0 exactly where x had b: without its high bit it
    // cannot carry into the next byte when 0x7f is added.
    !(((y & !HI) + !HI) | y) & HI
}

/// The 8-byte words of `data`, little-endian, and the bytes left over.
fn words(data: &[u8]) -> (impl Iterator<Item = u64> + '_, &[u8]) {
    let (words, rest) = data.as_chunks::<8>();
    (words.iter().map(|w| u64::from_le_bytes(*w)), rest)
}

/// Counts the newlines in `data`.
pub fn count_newlines(data: &[u8]) -> usize {
    let (words, rest) = words(data);
    let mut n = 0usize;
    for w in words {
        n += bytes_equal(w, b'\n').count_ones() as usize;
    }
    n + rest.iter().filter(|&&b| b == b'\n').count()
}

/// Counts lines and words as wc does, a block at a time: a word is a run of
/// bytes other than ASCII whitespace (`u8::is_ascii_whitespace`: space, \t,
/// \n, \x0c, \r), counted at its first byte. `in_word` carries over from
/// the previous block (false at the start of an input).
pub fn count_lines_words(data: &[u8], in_word: &mut bool) -> (u64, u64) {
    let (words, rest) = words(data);
    let (mut lines, mut starts) = (0u64, 0u64);
    // The high bit of the byte before the current word's first.
    let mut before = if *in_word { 0 } else { 1u64 << 7 };
    for w in words {
        let newline = bytes_equal(w, b'\n');
        let space = newline
            | bytes_equal(w, b' ')
            | bytes_equal(w, b'\t')
            | bytes_equal(w, 0x0c)
            | bytes_equal(w, b'\r');
        lines += u64::from(newline.count_ones());
        // Each byte's predecessor is whitespace: this word's mask moved up a
        // byte, with the last word's last byte shifted in.
        let prev_space = (space << 8) | before;
        starts += u64::from((!space & HI & prev_space).count_ones());
        before = (space >> 56) & 0x80;
    }
    let mut in_word_now = before == 0;
    for &b in rest {
        let space = b.is_ascii_whitespace();
        lines += u64::from(b == b'\n');
        starts += u64::from(!in_word_now && !space);
        in_word_now = !space;
    }
    *in_word = in_word_now;
    (lines, starts)
}

/// Prints the help text and exits 0 when `--help` is among the arguments.
pub fn help(args: &[String], text: &str) {
    if args.iter().any(|a| a == "--help") {
        print!("{text}");
        std::process::exit(0);
    }
}

/// Parses a count argument or exits with a usage error.
pub fn count(tool: &str, flag: &str, v: Option<&String>) -> usize {
    match v.and_then(|s| s.parse().ok()) {
        Some(n) => n,
        None => die(
            tool,
            1,
            format!(
                "invalid number for {flag}: {:?}",
                v.map(String::as_str).unwrap_or("")
            ),
        ),
    }
}

/// Splits arguments into single-letter flags (grouped like `-lw`, each one of
/// `allowed`) and operands; an unknown flag exits with `code` and a coreutils
/// style message. A lone `-` is an operand (standard input).
pub fn flags(tool: &str, args: &[String], allowed: &str, code: i32) -> (Vec<char>, Vec<String>) {
    let mut set = Vec::new();
    let mut operands = Vec::new();
    for a in args {
        if a.starts_with('-') && a.len() > 1 {
            for c in a[1..].chars() {
                if !allowed.contains(c) {
                    die(tool, code, format!("invalid option -- '{c}'"));
                }
                set.push(c);
            }
        } else {
            operands.push(a.clone());
        }
    }
    (set, operands)
}

/// The options head and tail share: `-n N` lines (default 10) or `-c N` bytes
/// (also written `-nN`, `-cN`), and the files (`-` when none is given).
pub struct Span {
    /// Lines to keep.
    pub lines: usize,
    /// Bytes to keep instead of lines, when given.
    pub bytes: Option<usize>,
    /// Inputs.
    pub files: Vec<String>,
}

/// Parses head/tail arguments, exiting on a bad option.
pub fn span_args(tool: &str, args: &[String]) -> Span {
    let mut span = Span {
        lines: 10,
        bytes: None,
        files: Vec::new(),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-n" => span.lines = count(tool, "-n", it.next()),
            "-c" => span.bytes = Some(count(tool, "-c", it.next())),
            s if s.starts_with("-n") => span.lines = count(tool, "-n", Some(&s[2..].to_string())),
            s if s.starts_with("-c") => {
                span.bytes = Some(count(tool, "-c", Some(&s[2..].to_string())))
            }
            s if s.starts_with('-') && s.len() > 1 => {
                die(tool, 1, format!("invalid option -- '{}'", &s[1..]))
            }
            s => span.files.push(s.to_string()),
        }
    }
    if span.files.is_empty() {
        span.files.push("-".into());
    }
    span
}

/// Runs `each(input, out)` for each input, with `==> NAME <==` headers when
/// there are several, as head and tail do. An input that cannot be opened is
/// reported as coreutils do (`cannot open 'F' for reading: REASON`); an error
/// `each` returns, as `error reading 'F': REASON`. Returns the exit status.
pub fn each_input(
    tool: &'static str,
    files: &[String],
    mut each: impl FnMut(&mut Input, &mut Out) -> io::Result<()>,
) -> (i32, Out) {
    let many = files.len() > 1;
    let mut out = Out::new(tool, 1);
    let mut status = 0;
    for (i, f) in files.iter().enumerate() {
        match open_input(f) {
            Ok(mut input) => {
                if many {
                    let name = if f == "-" { "standard input" } else { f };
                    let _ = writeln!(out, "{}==> {name} <==", if i > 0 { "\n" } else { "" });
                }
                if let Err(e) = each(&mut input, &mut out) {
                    out.flush();
                    eprintln!("{tool}: error reading '{f}': {}", reason(&e));
                    status = 1;
                }
            }
            Err(e) => {
                out.flush();
                eprintln!("{tool}: cannot open '{f}' for reading: {}", reason(&e));
                status = 1;
            }
        }
    }
    out.flush();
    (status, out)
}

/// Why [`Lines::next_line`] stopped.
#[derive(Debug)]
pub enum LineError {
    /// Reading failed.
    Io(io::Error),
    /// A line is longer than the reader's limit.
    TooLong,
}

impl From<io::Error> for LineError {
    fn from(e: io::Error) -> Self {
        LineError::Io(e)
    }
}

/// The lines of an input, read through a buffer that starts at
/// [`FIRST_BLOCK`] bytes ([`read_buffer`]) and doubles while the input goes
/// on, up to [`BLOCK`], and past that only for a longer line, up to `max`
/// bytes: a longer line is [`LineError::TooLong`]. Lines are split at `\n`,
/// which is not part of the line; a last line without one is still a line,
/// and an empty input has no lines (as `data.strip_suffix("\n").split('\n')`
/// of a non-empty input).
pub struct Lines<R> {
    r: R,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    eof: bool,
    /// Whether a read has been made: every read but the last fills the
    /// buffer, so a refill after one means the input goes on.
    read: bool,
    max: usize,
}

impl<R: Read> Lines<R> {
    /// Lines of `r`, each at most `max` bytes long (at least [`BLOCK`]).
    pub fn new(r: R, max: usize) -> Self {
        Lines {
            r,
            buf: read_buffer(),
            start: 0,
            end: 0,
            eof: false,
            read: false,
            max: max.max(BLOCK),
        }
    }

    /// The next run of whole lines: every line in it ends with its newline,
    /// but for a last line without one at the end of the input. About a
    /// buffer's worth at a time; `None` at the end.
    pub fn next_block(&mut self) -> Result<Option<&[u8]>, LineError> {
        loop {
            if let Some(i) = memchr::memrchr(b'\n', &self.buf[self.start..self.end]) {
                let block = self.start..self.start + i + 1;
                self.start += i + 1;
                return Ok(Some(&self.buf[block]));
            }
            if self.eof {
                if self.start < self.end {
                    let block = self.start..self.end;
                    self.start = self.end;
                    return Ok(Some(&self.buf[block]));
                }
                return Ok(None);
            }
            // A part of a line at most: move it to the front, fill the rest.
            self.refill()?;
        }
    }

    /// The next line, without its newline; `None` at the end.
    pub fn next_line(&mut self) -> Result<Option<&[u8]>, LineError> {
        loop {
            if let Some(i) = memchr::memchr(b'\n', &self.buf[self.start..self.end]) {
                let line = self.start..self.start + i;
                self.start += i + 1;
                return Ok(Some(&self.buf[line]));
            }
            if self.eof {
                if self.start < self.end {
                    let line = self.start..self.end;
                    self.start = self.end;
                    return Ok(Some(&self.buf[line]));
                }
                return Ok(None);
            }
            self.refill()?;
        }
    }

    /// Moves what is left to the front of the buffer, growing it if that is
    /// all of it or it is still under [`BLOCK`] after a read (which filled
    /// it: the input goes on), and reads until it is full or the input ends.
    fn refill(&mut self) -> Result<(), LineError> {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() || (self.read && self.buf.len() < BLOCK) {
            // A line as long as the whole buffer, with more to come: room
            // for its newline is needed too, hence `>=`.
            if self.buf.len() >= self.max {
                return Err(LineError::TooLong);
            }
            let grown = self.buf.len().saturating_mul(2).min(self.max);
            self.buf.resize(grown, 0);
        }
        let n = read_full(&mut self.r, &mut self.buf[self.end..])?;
        self.read = true;
        self.end += n;
        if self.end < self.buf.len() {
            self.eof = true;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// wc's counts the slow way, as it counted before.
    fn naive(data: &[u8]) -> (u64, u64) {
        let lines = data.iter().filter(|&&b| b == b'\n').count() as u64;
        let words = data
            .split(|b| b.is_ascii_whitespace())
            .filter(|w| !w.is_empty())
            .count() as u64;
        (lines, words)
    }

    #[test]
    fn counts_match_the_byte_at_a_time_ones_across_any_split() {
        let mut text = b"a b\tc\n\n  dd\x0b e\x0c\rf\n x".to_vec();
        text.extend((0..=255u8).cycle().take(700));
        text.extend_from_slice(b"word\nword word  \n");
        for split in 0..text.len() {
            let mut in_word = false;
            let (l1, w1) = count_lines_words(&text[..split], &mut in_word);
            let (l2, w2) = count_lines_words(&text[split..], &mut in_word);
            assert_eq!((l1 + l2, w1 + w2), naive(&text), "split at {split}");
        }
        assert_eq!(count_newlines(&text), naive(&text).0 as usize);
    }

    #[test]
    fn line_numbers_count_up_in_decimal() {
        let mut n = LineNumber::one();
        let mut buf = Vec::new();
        for i in 1..=100_500u64 {
            buf.clear();
            n.push(&mut buf, 6);
            assert_eq!(buf, format!("{i:6}").into_bytes());
            n.next();
        }
        buf.clear();
        push_number(&mut buf, 1234567, 3);
        assert_eq!(buf, b"1234567");
    }

    #[test]
    fn lines_and_blocks_split_as_before_and_refuse_long_lines() {
        let text = b"one\n\ntwo\nthree".repeat(40_000);
        let want: Vec<&[u8]> = text.split(|&b| b == b'\n').collect();
        let mut lines = Lines::new(&text[..], BLOCK);
        let mut got = Vec::new();
        while let Some(l) = lines.next_line().unwrap() {
            got.push(l.to_vec());
        }
        assert_eq!(got, want);
        let mut blocks = Lines::new(&text[..], BLOCK);
        let mut joined = Vec::new();
        while let Some(b) = blocks.next_block().unwrap() {
            assert!(b.ends_with(b"\n") || joined.len() + b.len() == text.len());
            joined.extend_from_slice(b);
        }
        assert_eq!(joined, text);
        let long = [vec![b'x'; 3 * BLOCK], b"\nshort\n".to_vec()].concat();
        let mut lines = Lines::new(&long[..], 4 * BLOCK);
        assert_eq!(lines.next_line().unwrap().map(<[u8]>::len), Some(3 * BLOCK));
        assert_eq!(lines.next_line().unwrap(), Some(&b"short"[..]));
        let mut lines = Lines::new(&long[..], 2 * BLOCK);
        assert!(matches!(lines.next_line(), Err(LineError::TooLong)));
        // A line just over the first buffer, and one just under the limit.
        let text = [vec![b'y'; FIRST_BLOCK + 1], b"\n".to_vec()].concat();
        let mut lines = Lines::new(&text[..], BLOCK);
        assert_eq!(
            lines.next_line().unwrap().map(<[u8]>::len),
            Some(FIRST_BLOCK + 1)
        );
        assert_eq!(lines.next_line().unwrap(), None);
        let text = vec![b'z'; BLOCK - 1];
        let mut lines = Lines::new(&text[..], BLOCK);
        assert_eq!(lines.next_line().unwrap().map(<[u8]>::len), Some(BLOCK - 1));
        assert!(lines.buf.len() <= BLOCK);
        // A short input keeps the first buffer; a long one grows it to BLOCK.
        let mut lines = Lines::new(&b"one\ntwo"[..], BLOCK);
        while lines.next_line().unwrap().is_some() {}
        assert_eq!(lines.buf.len(), FIRST_BLOCK);
        let text = b"one\n\ntwo\nthree".repeat(40_000);
        let mut lines = Lines::new(&text[..], BLOCK);
        while lines.next_line().unwrap().is_some() {}
        assert_eq!(lines.buf.len(), BLOCK);
    }

    /// A reader that gives at most `chunk` bytes per read.
    struct Dribble<'a>(&'a [u8], usize);

    impl Read for Dribble<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = buf.len().min(self.1).min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    /// Reads all of `input` as the streaming tools do; returns what it read
    /// and the buffer's length before each read.
    fn read_all(input: &mut impl Read) -> (Vec<u8>, Vec<usize>) {
        let (mut buf, mut got, mut sizes) = (read_buffer(), Vec::new(), Vec::new());
        loop {
            sizes.push(buf.len());
            let n = read_some(input, &mut buf).unwrap();
            if n == 0 {
                return (got, sizes);
            }
            got.extend_from_slice(&buf[..n]);
            grow_after(&mut buf, n, BLOCK);
        }
    }

    #[test]
    fn a_read_buffer_grows_with_its_input_up_to_a_block() {
        // A small input keeps the first buffer.
        let (got, sizes) = read_all(&mut &b"one\ntwo\n"[..]);
        assert_eq!(got, b"one\ntwo\n");
        assert_eq!(sizes, [FIRST_BLOCK, FIRST_BLOCK]);
        // A long one doubles it after each full read, up to BLOCK, and every
        // byte arrives once and in order.
        let text: Vec<u8> = (0..=255u8).cycle().take(4 * BLOCK + 7).collect();
        let (got, sizes) = read_all(&mut &text[..]);
        assert_eq!(got, text);
        let mut want = Vec::new();
        let mut size = FIRST_BLOCK;
        while size < BLOCK {
            want.push(size);
            size *= 2;
        }
        assert_eq!(&sizes[..want.len()], &want[..]);
        assert!(sizes[want.len()..].iter().all(|&s| s == BLOCK), "{sizes:?}");
        // Short reads do not grow it, however long the input.
        let (got, sizes) = read_all(&mut Dribble(&text, 1000));
        assert_eq!(got, text);
        assert!(sizes.iter().all(|&s| s == FIRST_BLOCK));
        // A buffer already over the limit is left alone.
        let mut big = vec![0u8; 2 * BLOCK];
        grow_after(&mut big, 2 * BLOCK, BLOCK);
        assert_eq!(big.len(), 2 * BLOCK);
    }
}
