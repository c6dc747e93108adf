//! Protected paths: places inside a writable allowed dir that no tool may
//! change (docs/src/attacks.md case 44), such as `.git/hooks` and `.git/config`, where a
//! file written by a tool would run on the host at the user's next `git
//! commit` or `git status`.
//!
//! Invariant: this module is pure. A protected path is a list of names
//! relative to each writable allowed dir. A path relative to such a dir is
//! judged by its names alone, as Windows would read each one on every platform
//! (case-insensitively, an NTFS stream suffix and trailing dots and spaces
//! dropped), so `.GIT/Hooks/x`, `.git::$DATA` and `.git./config` are judged as
//! `.git/hooks/x`, `.git` and `.git/config` (with `.git/hooks` and
//! `.git/config` protected):
//! - at or under a protected path: refused (write, create, move, delete);
//! - a proper ancestor of one (`.git` for `.git/hooks`): refused to create,
//!   move or delete (replacing `.git` would replace what it protects), while
//!   files beside the protected ones (`.git/index`) stay writable.
//!
//! Each backend holds the same rule its own way: the file tools by this
//! judgement (`tools::fs`), `direct` and `docker` with mounts
//! (`backend::protect`, `backend::direct::mounts`), `wasm` by handle
//! permissions and checked names (`backend::wasm::protect`).

use std::path::{Component, Path};
use std::sync::Arc;

/// The default list: a repository's whole `.git`, as Codex keeps it. Its hooks
/// run at the next commit, and its config can name programs to run
/// (`core.hooksPath`, `core.fsmonitor`, `core.pager`, aliases); so can files
/// that move where git reads those from (`commondir`, `config.worktree`,
/// `modules/*/`), and `.git` itself can be replaced by a `gitdir:` file. A
/// finer list (`.git/hooks`, `.git/config`, ...) lets tools commit, but see
/// the book: a backend that holds protected paths with mounts cannot protect
/// a name that does not exist yet.
pub const DEFAULT_PROTECTED_PATHS: &[&str] = &[".git"];

/// The protected paths of a sandbox, parsed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProtectedPaths {
    /// Each path's names, normalized by [`normalize`].
    list: Arc<[Vec<String>]>,
    /// Each path's names as configured (to look them up on the host).
    raw: Arc<[Vec<String>]>,
    /// Each path as configured (for messages).
    shown: Arc<[String]>,
}

/// How a path relates to the protected paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Relation {
    /// Neither protected nor an ancestor of a protected path.
    Free,
    /// At or under the protected path shown.
    Protected(String),
    /// A proper ancestor of the protected path shown.
    Ancestor(String),
}

/// One name as Windows compares it: its [`win32_base`] in [`fold_case`].
pub fn normalize(name: &str) -> String {
    fold_case(win32_base(name))
}

/// `name` with each letter in the one case NTFS compares names in (its
/// upcase table, Unicode's simple uppercase mapping: `ü` and `Ü` are one
/// name, as `a` and `A` are, and so are `ᾀ` and `ᾈ`), ASCII then written
/// lowercase. A letter without a one-letter uppercase (`ß`) stays as it is.
pub fn fold_case(name: &str) -> String {
    name.chars()
        .map(|c| {
            if let Some(u) = simple_upper_special(c) {
                return u;
            }
            let mut up = c.to_uppercase();
            match (up.next(), up.next()) {
                (Some(u), None) => u.to_ascii_lowercase(),
                _ => c,
            }
        })
        .collect()
}

/// The simple uppercase mapping of the letters whose full mapping (Rust's
/// `to_uppercase`) is more than one letter but whose simple one is a
/// letter: the Greek letters with a subscript iota, folded to their
/// titlecase forms (UnicodeData.txt; every other multi-letter uppercase
/// has no simple mapping).
fn simple_upper_special(c: char) -> Option<char> {
    let u = match c as u32 {
        0x1F80..=0x1F87 | 0x1F90..=0x1F97 | 0x1FA0..=0x1FA7 => c as u32 + 8,
        0x1FB3 => 0x1FBC,
        0x1FC3 => 0x1FCC,
        0x1FF3 => 0x1FFC,
        _ => return None,
    };
    char::from_u32(u)
}

/// The name a Win32 path reaches: an NTFS stream suffix (`:stream`,
/// `::$DATA`) and trailing dots and spaces dropped (`.git. ` is `.git`).
pub fn win32_base(name: &str) -> &str {
    name.split(':')
        .next()
        .unwrap_or("")
        .trim_end_matches(['.', ' '])
}

impl ProtectedPaths {
    /// Parses a configured list: each entry a relative path of plain names
    /// (no `.`, `..`, root or drive), `/` or `\` separated.
    pub fn parse(entries: &[String]) -> Result<Self, String> {
        let mut list = Vec::new();
        let mut raw = Vec::new();
        let mut shown = Vec::new();
        for e in entries {
            let (names, given) = Self::names_of(e)?;
            if !list.contains(&names) {
                list.push(names);
                raw.push(given);
                shown.push(e.clone());
            }
        }
        Ok(ProtectedPaths {
            list: list.into(),
            raw: raw.into(),
            shown: shown.into(),
        })
    }

    fn names_of(e: &str) -> Result<(Vec<String>, Vec<String>), String> {
        if e.contains('\0') {
            return Err(format!("{e:?} contains a NUL byte"));
        }
        let mut names = Vec::new();
        let mut given = Vec::new();
        for part in e.split(['/', '\\']) {
            if part.is_empty() {
                continue;
            }
            let n = normalize(part);
            if n.is_empty() || n == "." || n == ".." || part.contains(':') {
                return Err(format!(
                    "{e:?} must be a relative path of plain names (no \".\", \"..\", drive or stream)"
                ));
            }
            names.push(n);
            given.push(part.to_string());
        }
        if names.is_empty() || e.starts_with(['/', '\\']) {
            return Err(format!(
                "{e:?} must be a non-empty path relative to each writable dir"
            ));
        }
        Ok((names, given))
    }

    /// The default list ([`DEFAULT_PROTECTED_PATHS`]).
    pub fn default_list() -> Self {
        let v: Vec<String> = DEFAULT_PROTECTED_PATHS
            .iter()
            .map(|s| s.to_string())
            .collect();
        // The defaults are plain names.
        Self::parse(&v).unwrap_or_default()
    }

    /// Whether the list is empty (nothing protected).
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Each protected path's normalized names and the path as configured.
    pub fn entries(&self) -> impl Iterator<Item = (&[String], &str)> {
        self.list
            .iter()
            .map(Vec::as_slice)
            .zip(self.shown.iter().map(String::as_str))
    }

    /// Each protected path's normalized names and its names as configured.
    pub fn entries_raw(&self) -> impl Iterator<Item = (&[String], &[String])> {
        self.list
            .iter()
            .map(Vec::as_slice)
            .zip(self.raw.iter().map(Vec::as_slice))
    }

    /// How `rel`, a path relative to a writable dir (no `..`: resolved),
    /// relates to the protected paths. `.` components are skipped; any other
    /// non-name component makes the path [`Relation::Free`] (it cannot be
    /// relative to the dir).
    pub fn judge(&self, rel: &Path) -> Relation {
        let mut names = Vec::new();
        for c in rel.components() {
            match c {
                Component::Normal(n) => names.push(normalize(&n.to_string_lossy())),
                Component::CurDir => {}
                _ => return Relation::Free,
            }
        }
        self.judge_names(&names)
    }

    /// [`judge`](Self::judge) on names already normalized.
    pub fn judge_names(&self, names: &[String]) -> Relation {
        let mut ancestor = None;
        for (p, shown) in self.entries() {
            if names.len() >= p.len() && names[..p.len()] == *p {
                return Relation::Protected(shown.to_string());
            }
            if !names.is_empty() && p.len() > names.len() && p[..names.len()] == *names {
                ancestor.get_or_insert_with(|| shown.to_string());
            }
        }
        match ancestor {
            Some(s) => Relation::Ancestor(s),
            None => Relation::Free,
        }
    }

    /// Whether a change of the entry `name` in a directory at `dir` (names
    /// relative to a writable dir) would touch a protected path: the entry is
    /// one, is under one, or is an ancestor of one.
    pub fn touches(&self, dir: &[String], name: &str) -> Option<String> {
        let mut names = dir.to_vec();
        names.push(normalize(name));
        match self.judge_names(&names) {
            Relation::Free => None,
            Relation::Protected(s) | Relation::Ancestor(s) => Some(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list() -> ProtectedPaths {
        ProtectedPaths::parse(&[".git/hooks".into(), ".git/config".into()]).expect("valid")
    }

    #[test]
    fn the_default_protects_all_of_dot_git() {
        let p = ProtectedPaths::default_list();
        assert!(matches!(p.judge(Path::new(".git")), Relation::Protected(_)));
        assert!(matches!(
            p.judge(Path::new(".git/index")),
            Relation::Protected(_)
        ));
        assert!(matches!(
            p.judge(Path::new(".Git/commondir")),
            Relation::Protected(_)
        ));
        assert_eq!(p.judge(Path::new(".gitignore")), Relation::Free);
        assert_eq!(p.judge(Path::new("src/.git/config")), Relation::Free);
    }

    #[test]
    fn protected_ancestor_and_free_paths() {
        let p = list();
        for (rel, want) in [
            (".git/hooks", "protected"),
            (".git/hooks/pre-commit", "protected"),
            ("./.git/hooks/sub/x", "protected"),
            (".git/config", "protected"),
            (".GIT/Config", "protected"),
            (".git/hooks./pre-commit", "protected"),
            (".git::$DATA/config", "protected"),
            (".git/config:evil", "protected"),
            (".git/config. ", "protected"),
            (".git", "ancestor"),
            (".Git.", "ancestor"),
            (".git/index", "free"),
            (".git/objects/ab/cd", "free"),
            (".git/configs", "free"),
            ("src/.git/hooks/pre-commit", "free"),
            ("hooks/pre-commit", "free"),
            (".gitignore", "free"),
            ("", "free"),
        ] {
            let got = match p.judge(Path::new(rel)) {
                Relation::Free => "free",
                Relation::Protected(_) => "protected",
                Relation::Ancestor(_) => "ancestor",
            };
            assert_eq!(got, want, "{rel:?}");
        }
        assert_eq!(
            p.touches(&[".git".into()], "HOOKS"),
            Some(".git/hooks".into())
        );
        assert_eq!(p.touches(&[], ".git"), Some(".git/hooks".into()));
        assert_eq!(p.touches(&[".git".into()], "index.lock"), None);
    }

    /// Names NTFS compares as one: any letter's case, ASCII or not.
    #[test]
    fn names_compare_as_ntfs_does() {
        let p = ProtectedPaths::parse(&[".git".into(), "ärger".into()]).expect("valid");
        for rel in ["ÄRGER", "Ärger/x", "ärger. ", ".GIT", "ÄRGER::$DATA"] {
            assert!(
                matches!(p.judge(Path::new(rel)), Relation::Protected(_)),
                "{rel:?}"
            );
        }
        assert_eq!(normalize("ÄRGER"), normalize("ärger"));
        assert_eq!(normalize("Ünter"), normalize("üNTER"));
        assert_eq!(normalize(".GIT. ."), ".git");
        assert_eq!(normalize("Straße"), normalize("STRAßE"));
        assert_eq!(p.judge(Path::new("arger")), Relation::Free);
        assert_eq!(win32_base("x.txt:hidden.sh"), "x.txt");
        assert_eq!(win32_base("_GIT~IBP. ."), "_GIT~IBP");
    }

    /// Letters whose full uppercase is two letters fold by their simple
    /// mapping, as NTFS's upcase table does: `ᾀ` (U+1F80) and `ᾈ` (U+1F88)
    /// are one name; `ß` is not `SS`.
    #[test]
    fn greek_iota_subscript_folds_as_ntfs_does() {
        let p = ProtectedPaths::parse(&["ᾀrchive".into()]).expect("valid");
        for rel in ["ᾈrchive", "ᾈRCHIVE/x", "ᾀrchive"] {
            assert!(
                matches!(p.judge(Path::new(rel)), Relation::Protected(_)),
                "{rel:?}"
            );
        }
        for (a, b) in [("ᾳ", "ᾼ"), ("ῃ", "ῌ"), ("ῳ", "ῼ"), ("ᾧ", "ᾯ"), ("ᾐ", "ᾘ")]
        {
            assert_eq!(fold_case(a), fold_case(b), "{a} {b}");
        }
        assert_ne!(fold_case("ß"), fold_case("SS"));
        assert_ne!(fold_case("ᾀ"), fold_case("ἀ"));
        assert_eq!(p.judge(Path::new("ἀrchive")), Relation::Free);
    }

    #[test]
    fn bad_entries_are_refused() {
        for bad in [
            "", "/", "/etc", "../x", "a/../b", "./x/.", "c:x", "a\0b", "\\x",
        ] {
            assert!(
                ProtectedPaths::parse(&[bad.to_string()]).is_err(),
                "{bad:?}"
            );
        }
        let p = ProtectedPaths::parse(&["secrets\\keys".into(), "secrets/keys/".into()]);
        let p = p.expect("valid");
        assert_eq!(p.entries().count(), 1);
        assert!(ProtectedPaths::parse(&[]).expect("empty").is_empty());
    }
}
