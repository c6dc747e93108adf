//! `file_search`: names by glob and lines by text under a directory,
//! bounded by the walk's limits and the bytes read.

use std::io::Read;
use std::path::Path;

use cap_std::fs::OpenOptions;

use super::list_dir::{MAX_GLOB, walk_tree};
use super::{FsError, FsErrorKind, FsPolicy, io_error, no_block, shown};
use crate::paths::AllowedDirs;

/// Whether `name` matches a glob with `*`, `?` and `[...]` classes (`!` or
/// `^` negates, `a-z` ranges). Linear backtracking: O(len(pattern) x
/// len(name)) whatever the pattern.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    // The class at p[i] ('['): whether c is in it, and the index after it.
    let class = |i: usize, c: char| -> Option<(bool, usize)> {
        let close = p[i + 1..]
            .iter()
            .position(|&x| x == ']')
            .map(|k| k + i + 1)?;
        let mut body = &p[i + 1..close];
        if body.is_empty() {
            return None;
        }
        let neg = matches!(body[0], '!' | '^');
        if neg {
            body = &body[1..];
        }
        let mut hit = false;
        let mut k = 0;
        while k < body.len() {
            if k + 2 < body.len() && body[k + 1] == '-' {
                hit |= body[k] <= c && c <= body[k + 2];
                k += 3;
            } else {
                hit |= body[k] == c;
                k += 1;
            }
        }
        Some((hit != neg, close + 1))
    };
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() {
            match p[pi] {
                '*' => {
                    star = Some((pi, ni));
                    pi += 1;
                    continue;
                }
                '?' => {
                    pi += 1;
                    ni += 1;
                    continue;
                }
                '[' => match class(pi, n[ni]) {
                    Some((true, next)) => {
                        pi = next;
                        ni += 1;
                        continue;
                    }
                    Some((false, _)) => {}
                    None if n[ni] == '[' => {
                        pi += 1;
                        ni += 1;
                        continue;
                    }
                    None => {}
                },
                c if c == n[ni] => {
                    pi += 1;
                    ni += 1;
                    continue;
                }
                _ => {}
            }
        }
        match star {
            Some((sp, sn)) => {
                pi = sp + 1;
                ni = sn + 1;
                star = Some((sp, sn + 1));
            }
            None => return false,
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

/// `file_search`: files under `path` whose name matches `glob` and, if `text`
/// is given, lines containing it (`path:line: text`), up to `max_results`.
/// Bounded: the walk's limits, and `4 x max_read_bytes` of file content read.
pub fn search(
    dirs: &AllowedDirs,
    policy: &FsPolicy,
    path: &str,
    glob: Option<&str>,
    text: Option<&str>,
    max_results: usize,
) -> Result<String, FsError> {
    if glob.is_none() && text.is_none() {
        return Err(FsError::new(
            FsErrorKind::InvalidRequest,
            "file_search needs a glob, a text, or both",
        ));
    }
    if glob.is_some_and(|g| g.chars().count() > MAX_GLOB) {
        return Err(FsError::new(
            FsErrorKind::InvalidRequest,
            format!("file_search: the glob is longer than {MAX_GLOB} characters"),
        ));
    }
    let resolved = dirs.resolve(Path::new(path), None)?;
    let dir = dirs
        .open_dir(&resolved)
        .map_err(|e| io_error(&shown(path), &e))?;
    let mut results: Vec<String> = Vec::new();
    let mut budget = policy.max_read_bytes.saturating_mul(4);
    let mut stopped: Option<String> = None;
    let note = walk_tree(&dir, true, |d, rel, ft| {
        if results.len() >= max_results {
            stopped = Some(format!("[stopped at {max_results} results]"));
            return Ok(false);
        }
        if !ft.is_file() {
            return Ok(true);
        }
        let name = rel.file_name().unwrap_or_default();
        if let Some(g) = glob
            && !glob_match(g, &name.to_string_lossy())
        {
            return Ok(true);
        }
        let Some(needle) = text else {
            results.push(rel.to_string_lossy().into_owned());
            return Ok(true);
        };
        if budget == 0 {
            stopped = Some("[stopped: the search read its byte budget]".into());
            return Ok(false);
        }
        let mut opts = OpenOptions::new();
        opts.read(true);
        no_block(&mut opts, true);
        let Ok(f) = d.open_with(name, &opts) else {
            return Ok(true);
        };
        if !f.metadata().is_ok_and(|m| m.is_file()) {
            return Ok(true);
        }
        let mut bytes = Vec::new();
        f.take(budget.min(8 << 20)).read_to_end(&mut bytes)?;
        budget = budget.saturating_sub(bytes.len() as u64);
        if bytes.contains(&0) {
            return Ok(true);
        }
        let content = String::from_utf8_lossy(&bytes);
        for (i, line) in content.lines().enumerate() {
            if line.contains(needle) {
                let line: String = line.chars().take(300).collect();
                results.push(format!("{}:{}: {line}", rel.to_string_lossy(), i + 1));
                if results.len() >= max_results {
                    break;
                }
            }
        }
        Ok(true)
    })
    .map_err(|e| io_error(&shown(path), &e))?;
    let mut out = if results.is_empty() {
        "no matches".to_string()
    } else {
        results.join("\n")
    };
    for n in [stopped, note].into_iter().flatten() {
        out.push('\n');
        out.push_str(&n);
    }
    Ok(out)
}
