use std::io::{Read, Write};

common::describe!(b"wc: count lines (-l), words (-w) and bytes (-c) of files");

const HELP: &str = "Usage: wc [-l] [-w] [-c] [FILE]...\nPrint newline, word and byte counts for each FILE (or standard input),\nand a total line when more than one FILE is given.\n  -l  lines   -w  words   -c  bytes\n";

/// Counts lines, words and bytes of `input`, a block at a time (a word that
/// spans two blocks counts once).
fn counts(input: &mut impl Read, buf: &mut Vec<u8>) -> std::io::Result<[u64; 3]> {
    let (mut lines, mut words, mut bytes) = (0u64, 0u64, 0u64);
    let mut in_word = false;
    loop {
        let n = common::read_some(input, buf)?;
        if n == 0 {
            return Ok([lines, words, bytes]);
        }
        let data = &buf[..n];
        bytes += n as u64;
        let (l, w) = common::count_lines_words(data, &mut in_word);
        lines += l;
        words += w;
        common::grow_after(buf, n, common::BLOCK);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    common::help(&args, HELP);
    let (set, mut files) = common::flags("wc", &args, "lwc", 1);
    let mut show = [set.contains(&'l'), set.contains(&'w'), set.contains(&'c')];
    if !show.iter().any(|s| *s) {
        show = [true; 3];
    }
    let from_stdin = files.is_empty();
    if from_stdin {
        files.push("-".into());
    }
    let mut rows: Vec<([u64; 3], String)> = Vec::new();
    let mut total = [0u64; 3];
    let mut status = 0;
    let mut buf = common::read_buffer();
    for f in &files {
        let counted = common::open_input(f).and_then(|mut input| {
            // Bytes alone: a regular file's size is its count, nothing to read.
            if show == [false, false, true]
                && let Some((_, len)) = input.regular_file()
            {
                return Ok([0, 0, len]);
            }
            counts(&mut input, &mut buf)
        });
        match counted {
            Ok(c) => {
                for i in 0..3 {
                    total[i] += c[i];
                }
                rows.push((c, if from_stdin { String::new() } else { f.clone() }));
            }
            Err(e) => {
                eprintln!("wc: {f}: {}", common::reason(&e));
                status = 1;
            }
        }
    }
    if files.len() > 1 {
        rows.push((total, "total".into()));
    }
    let columns = show.iter().filter(|s| **s).count();
    let width = if columns == 1 && rows.len() == 1 {
        1
    } else {
        rows.iter()
            .flat_map(|(c, _)| c.iter().copied())
            .max()
            .unwrap_or(0)
            .to_string()
            .len()
    };
    let mut out = std::io::stdout().lock();
    for (c, name) in rows {
        let nums: Vec<String> = (0..3)
            .filter(|i| show[*i])
            .map(|i| format!("{:>width$}", c[i]))
            .collect();
        let line = nums.join(" ");
        if name.is_empty() {
            let _ = writeln!(out, "{line}");
        } else {
            let _ = writeln!(out, "{line} {name}");
        }
    }
    std::process::exit(status);
}
