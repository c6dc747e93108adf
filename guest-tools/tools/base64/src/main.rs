use std::io::Write;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

common::describe!(
    b"base64: base64-encode a file or stdin (wrapped at 76 columns), or decode it with -d"
);

const HELP: &str = "Usage: base64 [-d] [-w COLS] [FILE]\nBase64 encode or decode FILE (or standard input) to standard output.\n  -d       decode\n  -w COLS  wrap encoded lines after COLS characters (default 76; 0 disables)\n";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    common::help(&args, HELP);
    let mut decode = false;
    let mut wrap = 76usize;
    let mut file = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-d" | "--decode" => decode = true,
            "-w" => wrap = common::count("base64", "-w", it.next()),
            s if s.starts_with('-') && s.len() > 1 => {
                common::die("base64", 1, format!("invalid option -- '{}'", &s[1..]))
            }
            s => file = Some(s.to_string()),
        }
    }
    let f = file.unwrap_or_else(|| "-".into());
    let data = common::read_input(&f)
        .unwrap_or_else(|e| common::die("base64", 1, format!("{f}: {}", common::reason(&e))));
    let mut out = std::io::stdout().lock();
    if decode {
        let clean: Vec<u8> = data
            .into_iter()
            .filter(|b| !b.is_ascii_whitespace())
            .collect();
        match STANDARD.decode(&clean) {
            Ok(bytes) => {
                let _ = out.write_all(&bytes);
            }
            Err(_) => common::die("base64", 1, "invalid input"),
        }
        return;
    }
    let enc = STANDARD.encode(&data);
    if wrap == 0 {
        let _ = writeln!(out, "{enc}");
    } else {
        for chunk in enc.as_bytes().chunks(wrap) {
            let _ = out.write_all(chunk);
            let _ = out.write_all(b"\n");
        }
    }
}
