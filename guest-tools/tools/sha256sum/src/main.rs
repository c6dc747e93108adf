use std::io::Write;

use sha2::{Digest, Sha256};

common::describe!(b"sha256sum: print the SHA-256 digest of files (or stdin)");

const HELP: &str = "Usage: sha256sum [FILE]...\nPrint the SHA-256 checksum of each FILE (or standard input, also for -).\n";

/// The digest of a file (or stdin for `-`), read a block at a time.
fn digest(name: &str) -> std::io::Result<String> {
    let mut h = Sha256::new();
    let mut buf = common::read_buffer();
    let mut input = common::open_input(name)?;
    loop {
        let n = common::read_some(&mut input, &mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        common::grow_after(&mut buf, n, common::BLOCK);
    }
    Ok(format!("{:x}", h.finalize()))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    common::help(&args, HELP);
    let mut files = args;
    if files.is_empty() {
        files.push("-".into());
    }
    let mut out = std::io::stdout().lock();
    let mut status = 0;
    for f in &files {
        match digest(f) {
            Ok(d) => {
                let _ = writeln!(out, "{d}  {f}");
            }
            Err(e) => {
                eprintln!("sha256sum: {f}: {}", common::reason(&e));
                status = 1;
            }
        }
    }
    std::process::exit(status);
}
