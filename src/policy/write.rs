//! The write policy: which file names may be written.
//!
//! Invariant: the extension check looks at the final component of the path
//! that will be written (after resolution), case-insensitively, and at every
//! extension in it (`x.sh.txt` is not refused, `x.txt.sh` is; `X.SH` is).
//! The name is taken as Windows would write it, on every platform: an NTFS
//! stream suffix (`x.sh::$DATA`, `x.sh:s`) and trailing dots and spaces are
//! dropped first, since `x.sh::$DATA` and `x.sh. ` create `x.sh` there.

use super::Decision;

/// The decision for writing a file named `name` (its final component).
pub fn check_name(name: &str, denied_extensions: &[String]) -> Decision {
    let lower = name.to_ascii_lowercase();
    // Both readings of a colon: on Unix it is part of the name (`a:b.sh` is a
    // `.sh` file); on Windows `x.exe::$DATA` and `x.exe:s` write (a stream
    // of) `x.exe`. Trailing dots and spaces are dropped by Windows: `x.exe.`
    // is `x.exe`.
    let stream_file = lower.split(':').next().unwrap_or("");
    for candidate in [lower.as_str(), stream_file] {
        let trimmed = candidate.trim_end_matches(['.', ' ']);
        for ext in denied_extensions {
            let ext = ext.to_ascii_lowercase();
            let ext = ext.trim_start_matches('.');
            if ext.is_empty() {
                continue;
            }
            if trimmed
                .rsplit_once('.')
                .is_some_and(|(stem, e)| e == ext && !stem.is_empty())
                || trimmed == format!(".{ext}")
            {
                return Decision::deny(
                    "write.extension",
                    format!("writing .{ext} files is not allowed (write_denied_extensions)"),
                );
            }
        }
    }
    Decision::Allow
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn final_extension_case_insensitive() {
        let denied: Vec<String> = [".sh", ".exe"].iter().map(|s| s.to_string()).collect();
        for bad in [
            "x.sh",
            "X.SH",
            "a.txt.sh",
            "run.exe",
            "run.exe.",
            "run.exe ",
            ".sh",
            // NTFS stream suffixes, with trailing dots and spaces before them.
            "x.sh::$DATA",
            "X.SH::$data",
            "x.sh:stream",
            "x.sh:stream:$DATA",
            "x.sh. ::$DATA",
            "run.exe .:s",
            // On Unix a colon is part of the name: these are .sh and .exe files.
            "a:b.sh",
            "run:me.exe",
        ] {
            assert!(!check_name(bad, &denied).allowed(), "{bad:?}");
        }
        for ok in [
            "x.sh.txt",
            "notes.md",
            "sh",
            "shell",
            "x.shx",
            "notes.md::$DATA",
            "x.txt:sh",
        ] {
            assert!(check_name(ok, &denied).allowed(), "{ok:?}");
        }
    }
}
