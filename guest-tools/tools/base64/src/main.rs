use std::io::Read;

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
    let mut input = common::open_input(&f)
        .unwrap_or_else(|e| common::die("base64", 1, format!("{f}: {}", common::reason(&e))));
    let mut out = common::Out::new("base64", 1);
    let result = if decode {
        decode_stream(&mut input, &mut out)
    } else {
        encode_stream(&mut input, wrap, &mut out)
    };
    match result {
        Ok(()) => out.exit(0),
        Err(Failure::Read(e)) => out.die(1, format!("{f}: {}", common::reason(&e))),
        Err(Failure::Invalid) => out.die(1, "invalid input"),
    }
}

/// Why encoding or decoding stopped.
enum Failure {
    Read(std::io::Error),
    Invalid,
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Failure::Read(e)
    }
}

/// Input bytes encoded at a time, at first and at most: multiples of 3
/// (the one doubles to the other), so that only the last block can need
/// padding.
const FIRST_ENCODE_BLOCK: usize = 3 * (common::FIRST_BLOCK / 4);
const ENCODE_BLOCK: usize = 3 * (common::BLOCK / 4);

/// Encodes `input` a block at a time, wrapping lines after `wrap` characters
/// (0: one line), exactly as encoding it whole and cutting the result.
fn encode_stream(input: &mut impl Read, wrap: usize, out: &mut common::Out) -> Result<(), Failure> {
    let mut buf = vec![0u8; FIRST_ENCODE_BLOCK];
    let mut enc = vec![0u8; FIRST_ENCODE_BLOCK / 3 * 4];
    let mut column = 0usize;
    loop {
        // Full blocks (a multiple of 3 bytes) until the last one.
        let n = common::read_full(input, &mut buf)?;
        if n == 0 {
            break;
        }
        let len = STANDARD
            .encode_slice(&buf[..n], &mut enc)
            .map_err(|_| Failure::Invalid)?;
        let mut text = &enc[..len];
        if wrap == 0 {
            out.put(text);
        } else {
            while !text.is_empty() {
                let take = (wrap - column).min(text.len());
                out.put(&text[..take]);
                column += take;
                text = &text[take..];
                if column == wrap {
                    out.put(b"\n");
                    column = 0;
                }
            }
        }
        if n < buf.len() {
            break;
        }
        common::grow_after(&mut buf, n, ENCODE_BLOCK);
        enc.resize(buf.len() / 3 * 4, 0);
    }
    if wrap == 0 || column > 0 {
        out.put(b"\n");
    }
    Ok(())
}

/// Decodes `input` a block at a time, ignoring ASCII whitespace. Accepts
/// exactly what decoding the whole input would: padding only at the very
/// end (the last quantum is held back until the input ends). Output already
/// written stays written when a later block turns out to be invalid.
fn decode_stream(input: &mut impl Read, out: &mut common::Out) -> Result<(), Failure> {
    let mut buf = common::read_buffer();
    // Non-whitespace characters not decoded yet: fewer than 8 between blocks.
    let mut pending: Vec<u8> = Vec::with_capacity(buf.len() + 8);
    // Room for the quanta of `pending` at most.
    let mut dec = vec![0u8; buf.len() / 4 * 3 + 6];
    loop {
        let n = common::read_some(input, &mut buf)?;
        if n == 0 {
            break;
        }
        pending.extend(
            buf[..n]
                .iter()
                .copied()
                .filter(|b| !b.is_ascii_whitespace()),
        );
        // Decode whole quanta, keeping at least one back: it may be the last
        // and hold padding, which only the end of the input can tell.
        let keep = match pending.len() % 4 {
            0 => 4,
            r => r,
        };
        let ready = pending.len().saturating_sub(keep);
        if ready > 0 {
            let body = &pending[..ready];
            if body.contains(&b'=') {
                return Err(Failure::Invalid);
            }
            let len = STANDARD
                .decode_slice(body, &mut dec)
                .map_err(|_| Failure::Invalid)?;
            out.put(&dec[..len]);
            pending.drain(..ready);
        }
        common::grow_after(&mut buf, n, common::BLOCK);
        dec.resize(buf.len() / 4 * 3 + 6, 0);
    }
    let len = STANDARD
        .decode_slice(&pending, &mut dec)
        .map_err(|_| Failure::Invalid)?;
    out.put(&dec[..len]);
    Ok(())
}
