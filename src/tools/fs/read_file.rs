//! `file_read`: lines of a text file, bounded in lines and bytes.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use cap_std::fs::OpenOptions;

use super::{FsError, FsErrorKind, FsPolicy, io_error, no_block, not_regular, shown};
use crate::paths::AllowedDirs;

/// `file_read`: up to `limit` lines from line `offset` (0-based), at most
/// `max_read_bytes` bytes. Binary files are reported, not returned.
pub fn read(
    dirs: &AllowedDirs,
    policy: &FsPolicy,
    path: &str,
    offset: u64,
    limit: Option<u64>,
) -> Result<String, FsError> {
    // Reads follow symlinks that stay inside (resolved, then confined again
    // by cap-std at the open).
    let resolved = dirs.resolve(Path::new(path), None)?;
    let root = dirs.dir_of(&resolved);
    let rel = resolved.relative();
    if rel.as_os_str().is_empty() {
        return Err(FsError::new(
            FsErrorKind::InvalidRequest,
            format!("{}: is a directory (use file_list)", shown(path)),
        ));
    }
    let mut opts = OpenOptions::new();
    opts.read(true);
    no_block(&mut opts, false);
    let mut file = root
        .open_with(rel, &opts)
        .map_err(|e| io_error(&shown(path), &e))?;
    let meta = file.metadata().map_err(|e| io_error(&shown(path), &e))?;
    if meta.is_dir() {
        return Err(FsError::new(
            FsErrorKind::InvalidRequest,
            format!("{}: is a directory (use file_list)", shown(path)),
        ));
    }
    if !meta.is_file() {
        return Err(not_regular(path));
    }
    let mut head = vec![0u8; 8192];
    let n = read_full(&mut file, &mut head).map_err(|e| io_error(&shown(path), &e))?;
    head.truncate(n);
    if head.contains(&0) {
        return Ok(format!("[binary file: {} bytes, not shown]", meta.len()));
    }
    file.seek(SeekFrom::Start(0))
        .map_err(|e| io_error(&shown(path), &e))?;
    let mut bytes = Vec::new();
    let cap = policy.max_read_bytes;
    (&mut file)
        .take(cap.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| io_error(&shown(path), &e))?;
    let truncated = bytes.len() as u64 > cap;
    bytes.truncate(usize::try_from(cap).unwrap_or(usize::MAX));
    let text = match String::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => {
            let valid = e.utf8_error().valid_up_to();
            // A cut inside a multi-byte character at the cap is not binary.
            if truncated && e.as_bytes().len() - valid < 4 {
                let mut b = e.into_bytes();
                b.truncate(valid);
                String::from_utf8(b).unwrap_or_default()
            } else {
                return Ok(format!(
                    "[binary file (not UTF-8): {} bytes, not shown]",
                    meta.len()
                ));
            }
        }
    };
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let start = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(lines.len());
    let end = match limit {
        Some(l) => start.saturating_add(usize::try_from(l).unwrap_or(usize::MAX)),
        None => lines.len(),
    }
    .min(lines.len());
    let mut out: String = lines[start..end].concat();
    if truncated && end == lines.len() {
        out.push_str(&format!(
            "\n[truncated: the file is {} bytes; {} were read]",
            meta.len(),
            cap
        ));
    }
    Ok(out)
}

pub(super) fn read_full(f: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}
