common::describe!(
    b"diff: compare two files line by line, as a unified diff (-u, the default here)"
);

const HELP: &str = "Usage: diff [-u] [-U N] FILE1 FILE2\nCompare FILE1 and FILE2 line by line and print a unified diff.\n  -u     unified format with 3 lines of context (the default)\n  -U N   N lines of context\nInputs are compared a block at a time: same ones are never held in memory.\nShowing differences holds both, within a 16 MiB budget (their bytes plus 48\nper line); past it diff says so and exits 2.\nExit status: 0 if the inputs are the same, 1 if different, 2 if trouble.\n";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    common::help(&args, HELP);
    let mut context = 3usize;
    let mut files = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-u" => {}
            "-U" => context = common::count("diff", "-U", it.next()),
            s if s.starts_with("-U") => {
                context = common::count("diff", "-U", Some(&s[2..].to_string()))
            }
            s if s.starts_with('-') && s.len() > 1 => {
                common::die("diff", 2, format!("invalid option -- '{}'", &s[1..]))
            }
            s => files.push(s.to_string()),
        }
    }
    if files.len() != 2 {
        common::die("diff", 2, "expected two files (diff --help)");
    }
    // Standard input against itself: the same (as GNU diff says), and
    // never opened twice.
    if files[0] == "-" && files[1] == "-" {
        std::process::exit(0);
    }
    let open = |f: &str| {
        common::open_input(f)
            .unwrap_or_else(|e| common::die("diff", 2, format!("{f}: {}", common::reason(&e))))
    };
    let mut inputs = [open(&files[0]), open(&files[1])];
    let kept = match compare(&mut inputs, &files) {
        Compared::Same => std::process::exit(0),
        Compared::Differ(kept) => kept,
    };
    let [a, b] = kept.map(|k| {
        String::from_utf8(k).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    });
    // Bytes that differ only where they are not UTF-8 read the same here.
    if a == b {
        std::process::exit(0);
    }
    let d = similar::TextDiff::from_lines(&a, &b);
    let mut out = common::Out::new("diff", 2);
    if let Err(e) = d
        .unified_diff()
        .context_radius(context)
        .header(&files[0], &files[1])
        .to_writer(&mut out)
    {
        out.die(2, format!("write error: {}", common::reason(&e)));
    }
    out.exit(1);
}

/// The most diff holds to show differences: both inputs' bytes, plus
/// [`PER_LINE`] bytes per line for the line lists and the edit script.
const BUDGET: usize = 16 << 20;

/// What showing differences costs per line, beyond the line's bytes
/// (measured: about 24 to 50).
const PER_LINE: usize = 48;

/// What comparing the inputs found.
enum Compared {
    /// Byte for byte the same.
    Same,
    /// Different, and both inputs are within the budget: all of each.
    Differ([Vec<u8>; 2]),
}

/// Reads both inputs in step, a block at a time, keeping what was read only
/// while both together fit in the budget. Same inputs are never held; when
/// they differ, the rest of each is read (within the budget) to diff them.
/// Exits with status 2 when they differ but do not fit, or a read fails.
fn compare(inputs: &mut [common::Input; 2], files: &[String]) -> Compared {
    let fail = |i: usize, e: std::io::Error| -> ! {
        common::die("diff", 2, format!("{}: {}", files[i], common::reason(&e)))
    };
    let too_big = || -> ! {
        common::die(
            "diff",
            2,
            format!(
                "{} and {} differ; showing how needs more than the {} MiB in-memory budget (both files, plus {PER_LINE} bytes per line)",
                files[0],
                files[1],
                BUDGET >> 20
            ),
        )
    };
    let mut bufs = [common::read_buffer(), common::read_buffer()];
    // Regular files too large together are never kept; ones that fit get
    // room for all of each at once. Streams grow as they are read.
    let sizes = [0, 1].map(|i| inputs[i].regular_file().map(|(_, len)| len));
    let room = |i: usize| sizes[i].unwrap_or(0);
    let mut kept = if room(0).saturating_add(room(1)) > BUDGET as u64 {
        None
    } else {
        // Each at most the budget, which fits in usize.
        Some([0, 1].map(|i| Vec::with_capacity(room(i) as usize)))
    };
    let mut held = 0usize;
    let mut ends = [false; 2];
    let mut differ = false;
    loop {
        let mut got = [0usize; 2];
        for i in 0..2 {
            if !ends[i] {
                // Full blocks, so that both inputs stay at the same offset.
                got[i] =
                    common::read_full(&mut inputs[i], &mut bufs[i]).unwrap_or_else(|e| fail(i, e));
                ends[i] = got[i] < bufs[i].len();
            }
        }
        if !differ && !same(&bufs[0][..got[0]], &bufs[1][..got[1]]) {
            differ = true;
        }
        held = held.saturating_add(got[0] + got[1]);
        match &mut kept {
            Some(k) if held <= BUDGET => {
                k[0].extend_from_slice(&bufs[0][..got[0]]);
                k[1].extend_from_slice(&bufs[1][..got[1]]);
            }
            _ if differ => too_big(),
            _ => kept = None,
        }
        if ends[0] && ends[1] {
            break;
        }
        // Both grow alike while neither has ended.
        for i in 0..2 {
            common::grow_after(&mut bufs[i], got[i], common::BLOCK);
        }
    }
    if !differ {
        return Compared::Same;
    }
    match kept {
        Some(k) => {
            let lines = k.iter().map(|d| common::count_newlines(d)).sum::<usize>();
            if held.saturating_add(lines.saturating_mul(PER_LINE)) > BUDGET {
                too_big();
            }
            Compared::Differ(k)
        }
        None => too_big(),
    }
}

/// Whether `a` and `b` hold the same bytes, compared eight at a time (slice
/// equality goes a byte at a time in wasm).
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let (wa, ra) = a.as_chunks::<8>();
    let (wb, rb) = b.as_chunks::<8>();
    wa.iter()
        .zip(wb)
        .all(|(x, y)| u64::from_ne_bytes(*x) == u64::from_ne_bytes(*y))
        && ra == rb
}
