use std::io::Read;

common::describe!(b"sort: sort lines of files (-r reverse, -n numeric, -u unique)");

const HELP: &str = "Usage: sort [-r] [-n] [-u] [FILE]...\nWrite the sorted concatenation of FILEs (or standard input) to standard output.\n  -r  reverse   -n  compare by leading number   -u  output only the first of equal lines\nsort holds its whole input in memory, within a 16 MiB budget that counts the\ninput's bytes and 8 bytes per line (16 with -n); a larger input is an error\n(exit status 2).\n";

/// The most memory sort holds: the input's bytes plus its line index.
const BUDGET: usize = 16 << 20;

fn over_budget() -> ! {
    common::die(
        "sort",
        2,
        format!("input exceeds the {} MiB in-memory budget", BUDGET >> 20),
    )
}

fn num(line: &[u8]) -> f64 {
    let s = String::from_utf8_lossy(line);
    let t = s.trim_start();
    let end = t
        .char_indices()
        .take_while(|(i, c)| c.is_ascii_digit() || *c == '.' || (*i == 0 && *c == '-'))
        .count();
    t[..end].parse().unwrap_or(0.0)
}

/// Appends all of `input` to `data`, never holding more than the budget:
/// growth is capped there, and an input that goes past it is an error.
fn read_capped(
    input: &mut impl Read,
    data: &mut Vec<u8>,
    buf: &mut Vec<u8>,
) -> std::io::Result<()> {
    loop {
        let n = common::read_some(input, buf)?;
        if n == 0 {
            return Ok(());
        }
        if n > BUDGET - data.len().min(BUDGET) {
            over_budget();
        }
        if data.capacity() - data.len() < n {
            let want = data
                .capacity()
                .saturating_mul(2)
                .max(data.len() + n)
                .min(BUDGET + 1);
            data.reserve_exact(want - data.len());
        }
        data.extend_from_slice(&buf[..n]);
        common::grow_after(buf, n, common::BLOCK);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    common::help(&args, HELP);
    let (set, mut files) = common::flags("sort", &args, "rnu", 2);
    let (rev, numeric, uniq) = (set.contains(&'r'), set.contains(&'n'), set.contains(&'u'));
    if files.is_empty() {
        files.push("-".into());
    }
    let cannot_read = |f: &str, e: std::io::Error| -> ! {
        common::die(
            "sort",
            2,
            format!("cannot read: {f}: {}", common::reason(&e)),
        )
    };
    let mut data = Vec::new();
    let mut buf = common::read_buffer();
    for f in &files {
        let mut input = common::open_input(f).unwrap_or_else(|e| cannot_read(f, e));
        if let Some((_, len)) = input.regular_file() {
            // Refused before reading when its size alone is too much; else
            // room for all of it (and a newline) at once.
            let room = (BUDGET - data.len().min(BUDGET)) as u64;
            if len > room {
                over_budget();
            }
            // At most the budget, which fits in usize.
            data.reserve_exact(len as usize + 1);
        }
        let start = data.len();
        if let Err(e) = read_capped(&mut input, &mut data, &mut buf) {
            cannot_read(f, e);
        }
        if data.len() > start && !data.ends_with(b"\n") {
            data.push(b'\n');
        }
    }
    drop(buf);
    let lines = common::count_newlines(&data);
    let per_line = if numeric {
        std::mem::size_of::<(f64, &[u8])>()
    } else {
        std::mem::size_of::<&[u8]>()
    };
    if data.len().saturating_add(lines.saturating_mul(per_line)) > BUDGET {
        over_budget();
    }
    let body = data.strip_suffix(b"\n").unwrap_or(&data);
    let split = || body.split(|&b| b == b'\n');
    let mut out = common::Out::new("sort", 2);
    let mut write = |l: &[u8]| {
        out.put(l);
        out.put(b"\n");
    };
    if data.is_empty() {
        // no lines
    } else if numeric {
        // Each line's number once, not at every comparison. Lines that
        // compare equal are the same bytes, so an unstable sort gives the
        // same output as a stable one.
        let mut keyed: Vec<(f64, &[u8])> = Vec::with_capacity(lines);
        keyed.extend(split().map(|l| (num(l), l)));
        keyed.sort_unstable_by(|a, b| {
            a.0.partial_cmp(&b.0)
                .unwrap_or(std::cmp::Ordering::Equal)
                .then_with(|| a.1.cmp(b.1))
        });
        if uniq {
            keyed.dedup_by(|a, b| a.0 == b.0);
        }
        if rev {
            keyed.iter().rev().for_each(|k| write(k.1));
        } else {
            keyed.iter().for_each(|k| write(k.1));
        }
    } else {
        let mut sorted: Vec<&[u8]> = Vec::with_capacity(lines);
        sorted.extend(split());
        sorted.sort_unstable();
        if uniq {
            sorted.dedup();
        }
        if rev {
            sorted.iter().rev().for_each(|l| write(l));
        } else {
            sorted.iter().for_each(|l| write(l));
        }
    }
    out.exit(0);
}
