use std::io::Write;

use regex::bytes::{Regex, RegexBuilder};
use regex_syntax::hir::{
    Capture, Class, ClassBytes, ClassBytesRange, ClassUnicode, ClassUnicodeRange, Hir, HirKind,
    Look, Repetition,
};

common::describe!(b"grep: search files for a regular expression (-r recursive, -n line numbers, -i ignore case, -l names only, -v invert, -c count)");

const HELP: &str = "Usage: grep [-rnilvcE] PATTERN [FILE]...\nSearch FILEs (or standard input) for lines matching PATTERN (Rust regex syntax).\n  -r  search directories recursively   -n  prefix line numbers\n  -i  ignore case                      -l  print only names of matching files\n  -v  select non-matching lines        -c  print only a count per file\n  -E  extended syntax (the default here)\nLines are searched one at a time, each at most 8 MiB long: a longer line is an\nerror for its file.\nExit status: 0 if a line was selected, 1 if none, 2 on error.\n";

/// The longest line searched, newline included: a line is matched whole, so
/// the buffer must hold it. A longer line ends the search of its file with
/// an error (exit status 2), after the lines before it were reported.
const MAX_LINE: usize = 8 << 20;

struct Opts {
    recursive: bool,
    number: bool,
    names: bool,
    invert: bool,
    count: bool,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    common::help(&args, HELP);
    let mut o = Opts {
        recursive: false,
        number: false,
        names: false,
        invert: false,
        count: false,
    };
    let mut ignore_case = false;
    let mut rest = Vec::new();
    let mut only_args = false;
    for a in &args {
        if !only_args && a == "--" {
            only_args = true;
        } else if !only_args && a.starts_with('-') && a.len() > 1 {
            for c in a[1..].chars() {
                match c {
                    'r' | 'R' => o.recursive = true,
                    'n' => o.number = true,
                    'i' => ignore_case = true,
                    'l' => o.names = true,
                    'v' => o.invert = true,
                    'c' => o.count = true,
                    'E' => {}
                    _ => common::die("grep", 2, format!("invalid option -- '{c}'")),
                }
            }
        } else {
            rest.push(a.clone());
        }
    }
    if rest.is_empty() {
        common::die("grep", 2, "no pattern given (grep --help)");
    }
    let pattern = rest.remove(0);
    let re = match RegexBuilder::new(&pattern)
        .case_insensitive(ignore_case)
        .build()
    {
        Ok(r) => r,
        Err(e) => common::die("grep", 2, format!("invalid pattern: {e}")),
    };
    let mut files: Vec<String> = Vec::new();
    let mut status_err = false;
    if rest.is_empty() {
        rest.push(if o.recursive { ".".into() } else { "-".into() });
    }
    for f in &rest {
        if o.recursive && std::fs::metadata(f).map(|m| m.is_dir()).unwrap_or(false) {
            let mut found: Vec<String> = walkdir::WalkDir::new(f)
                .sort_by_file_name()
                .into_iter()
                .filter_map(|e| match e {
                    Ok(e) if e.file_type().is_file() => {
                        Some(e.path().to_string_lossy().into_owned())
                    }
                    Ok(_) => None,
                    Err(err) => {
                        eprintln!("grep: {err}");
                        None
                    }
                })
                .collect();
            files.append(&mut found);
        } else {
            files.push(f.clone());
        }
    }
    let show_names = files.len() > 1 || o.recursive;
    let finder = block_finder(&pattern, ignore_case);
    let mut out = common::Out::new("grep", 2);
    let mut any = false;
    let mut prefix = Vec::new();
    for f in &files {
        let name = if f == "-" { "(standard input)" } else { f };
        let mut lines = match common::open_input(f) {
            Ok(input) => common::Lines::new(input, MAX_LINE),
            Err(e) => {
                out.flush();
                eprintln!("grep: {f}: {}", common::reason(&e));
                status_err = true;
                continue;
            }
        };
        let mut n = 0usize;
        let mut line_no = 0u64;
        let mut select = |no: u64, line: &[u8], out: &mut common::Out| -> bool {
            n += 1;
            if o.names && !o.count {
                // One line names the file: the rest need not be read.
                return false;
            }
            if o.count {
                return true;
            }
            prefix.clear();
            if show_names {
                prefix.extend_from_slice(name.as_bytes());
                prefix.push(b':');
            }
            if o.number {
                common::push_number(&mut prefix, no, 0);
                prefix.push(b':');
            }
            out.put(&prefix);
            out.put(line);
            out.put(b"\n");
            true
        };
        let failed = loop {
            let block = match lines.next_block() {
                Ok(Some(block)) => block,
                Ok(None) => break false,
                Err(common::LineError::Io(e)) => {
                    out.flush();
                    eprintln!("grep: {f}: {}", common::reason(&e));
                    break true;
                }
                Err(common::LineError::TooLong) => {
                    out.flush();
                    eprintln!(
                        "grep: {f}: line {} is longer than the {} MiB line limit",
                        line_no + 1,
                        MAX_LINE >> 20
                    );
                    break true;
                }
            };
            let go_on = search_block(
                block,
                &re,
                finder.as_ref(),
                o.invert,
                &mut line_no,
                |no, line| select(no, line, &mut out),
            );
            if !go_on {
                break false;
            }
        };
        if failed {
            // The file was not read to its end: no count or name for it.
            status_err = true;
            any |= n > 0;
            continue;
        }
        if o.count {
            if show_names {
                let _ = writeln!(out, "{name}:{n}");
            } else {
                let _ = writeln!(out, "{n}");
            }
        } else if o.names && n > 0 {
            let _ = writeln!(out, "{name}");
        }
        any |= n > 0;
    }
    out.flush();
    std::process::exit(if status_err {
        2
    } else if any {
        0
    } else {
        1
    });
}

/// The lines of `block` (each ends with a newline, but maybe the last).
fn lines_of(block: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = block;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let (line, after) = match memchr::memchr(b'\n', rest) {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, &rest[rest.len()..]),
        };
        rest = after;
        Some(line)
    })
}

/// Counts the lines of `region`, which cannot match, and with `invert`
/// selects each. Returns false when `select` asked to stop.
fn unmatched(
    region: &[u8],
    invert: bool,
    line_no: &mut u64,
    select: &mut impl FnMut(u64, &[u8]) -> bool,
) -> bool {
    if invert {
        for line in lines_of(region) {
            *line_no += 1;
            if !select(*line_no, line) {
                return false;
            }
        }
    } else {
        let whole = common::count_newlines(region);
        let last = usize::from(!region.is_empty() && !region.ends_with(b"\n"));
        *line_no += (whole + last) as u64;
    }
    true
}

/// Calls `select(number, line)` for each line of `block` (whole lines) that
/// `re` matches (or, with `invert`, does not), numbering on from
/// `*line_no`. Each line is matched on its own, as the haystack, as before;
/// `finder`, when there is one, only skips the lines in which no match can
/// start, by searching the whole block at once. Returns false when `select`
/// asked to stop.
fn search_block(
    block: &[u8],
    re: &Regex,
    finder: Option<&Regex>,
    invert: bool,
    line_no: &mut u64,
    mut select: impl FnMut(u64, &[u8]) -> bool,
) -> bool {
    let Some(finder) = finder else {
        for line in lines_of(block) {
            *line_no += 1;
            if re.is_match(line) != invert && !select(*line_no, line) {
                return false;
            }
        }
        return true;
    };
    let mut pos = 0;
    while pos < block.len() {
        // The line where the first match from `pos` on starts, if any.
        let start = finder.find_at(block, pos).and_then(|m| {
            let line = memchr::memrchr(b'\n', &block[pos..m.start()]).map_or(pos, |i| pos + i + 1);
            (line < block.len()).then_some(line)
        });
        let Some(start) = start else {
            return unmatched(&block[pos..], invert, line_no, &mut select);
        };
        if !unmatched(&block[pos..start], invert, line_no, &mut select) {
            return false;
        }
        let end = memchr::memchr(b'\n', &block[start..]).map_or(block.len(), |i| start + i);
        let line = &block[start..end];
        *line_no += 1;
        if re.is_match(line) != invert && !select(*line_no, line) {
            return false;
        }
        pos = end + 1;
    }
    true
}

/// A regex that finds, in a block of lines, where a match of the pattern in
/// one line can start: the pattern in multi-line mode (`^` and `$` at line
/// breaks), with the newline taken out of every class and literal, so that
/// it matches within one line only and scans no further. A match of the
/// pattern in a line is then one of this in the block at the same place.
/// None for a pattern that needs the line to be the whole haystack (`\A`,
/// `\z`, `(?-m)^`): those lines are matched one by one.
fn block_finder(pattern: &str, ignore_case: bool) -> Option<Regex> {
    let hir = regex_syntax::ParserBuilder::new()
        .case_insensitive(ignore_case)
        .multi_line(true)
        .utf8(false)
        .build()
        .parse(pattern)
        .ok()?;
    let looks = hir.properties().look_set();
    if looks.contains(Look::Start) || looks.contains(Look::End) {
        return None;
    }
    RegexBuilder::new(&without_newline(&hir).to_string())
        .build()
        .ok()
}

/// `hir` with the newline taken out of what it can match.
fn without_newline(hir: &Hir) -> Hir {
    match hir.kind() {
        HirKind::Empty | HirKind::Look(_) => hir.clone(),
        HirKind::Literal(lit) if lit.0.contains(&b'\n') => Hir::fail(),
        HirKind::Literal(_) => hir.clone(),
        HirKind::Class(Class::Unicode(c)) => {
            let mut c = c.clone();
            c.difference(&ClassUnicode::new([ClassUnicodeRange::new('\n', '\n')]));
            Hir::class(Class::Unicode(c))
        }
        HirKind::Class(Class::Bytes(c)) => {
            let mut c = c.clone();
            c.difference(&ClassBytes::new([ClassBytesRange::new(b'\n', b'\n')]));
            Hir::class(Class::Bytes(c))
        }
        HirKind::Repetition(r) => Hir::repetition(Repetition {
            sub: Box::new(without_newline(&r.sub)),
            ..r.clone()
        }),
        HirKind::Capture(c) => Hir::capture(Capture {
            sub: Box::new(without_newline(&c.sub)),
            ..c.clone()
        }),
        HirKind::Concat(subs) => Hir::concat(subs.iter().map(without_newline).collect()),
        HirKind::Alternation(subs) => Hir::alternation(subs.iter().map(without_newline).collect()),
    }
}
