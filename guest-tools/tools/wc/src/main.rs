use std::io::Write;

common::describe!(b"wc: count lines (-l), words (-w) and bytes (-c) of files");

const HELP: &str = "Usage: wc [-l] [-w] [-c] [FILE]...\nPrint newline, word and byte counts for each FILE (or standard input),\nand a total line when more than one FILE is given.\n  -l  lines   -w  words   -c  bytes\n";

fn counts(data: &[u8]) -> [u64; 3] {
    let lines = data.iter().filter(|&&b| b == b'\n').count() as u64;
    let words = data
        .split(|b| b.is_ascii_whitespace())
        .filter(|w| !w.is_empty())
        .count() as u64;
    [lines, words, data.len() as u64]
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
    for f in &files {
        match common::read_input(f) {
            Ok(data) => {
                let c = counts(&data);
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
