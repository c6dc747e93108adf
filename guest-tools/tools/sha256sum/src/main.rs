use std::io::{Read, Write};

use sha2::{Digest, Sha256};

common::describe!(b"sha256sum: print the SHA-256 digest of files (or stdin)");

const HELP: &str = "Usage: sha256sum [FILE]...\nPrint the SHA-256 checksum of each FILE (or standard input, also for -).\n";

fn digest(name: &str) -> std::io::Result<String> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut input: Box<dyn Read> = if name == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        if std::fs::metadata(name)?.is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::IsADirectory,
                "Is a directory",
            ));
        }
        Box::new(std::fs::File::open(name)?)
    };
    loop {
        let n = input.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
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
