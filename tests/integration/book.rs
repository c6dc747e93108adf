//! The book (`docs/`) against the code: the configuration reference in
//! `docs/src/config.md` lists every key `SandboxConfig` accepts, once, with the
//! code's defaults; and the README stays short, its links into the book whole.

use std::collections::BTreeSet;
use std::path::Path;

use toolhost::SandboxConfig;

const CONFIG_PAGE: &str = "docs/src/config.md";
const README_MAX_LINES: usize = 250;

fn read(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// One row of the configuration table.
struct Row {
    line: usize,
    key: String,
    default: String,
    meaning: String,
}

/// The cells of a table line: `| a | b |` gives `["a", "b"]`.
fn cells(line: &str) -> Vec<String> {
    let line = line.trim();
    let inner = line.strip_prefix('|').unwrap_or(line);
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    inner.split('|').map(|c| c.trim().to_string()).collect()
}

/// The one `key | default | meaning` table of the configuration page.
fn config_rows() -> Vec<Row> {
    let text = read(CONFIG_PAGE);
    let mut rows = Vec::new();
    let mut tables = 0;
    let mut in_table = false;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if !line.trim_start().starts_with('|') {
            in_table = false;
            continue;
        }
        let cells = cells(line);
        if !in_table {
            if cells == ["key", "default", "meaning"] {
                in_table = true;
                tables += 1;
            }
            continue;
        }
        if cells
            .iter()
            .all(|c| !c.is_empty() && c.chars().all(|ch| "-:".contains(ch)))
        {
            continue; // the separator row
        }
        assert_eq!(
            cells.len(),
            3,
            "{CONFIG_PAGE} line {n}: a row has three cells (key | default | meaning), \
             this one {}: {line}",
            cells.len()
        );
        let key = literal(&cells[0]).unwrap_or_else(|| {
            panic!(
                "{CONFIG_PAGE} line {n}: the key cell must be one dotted key in backticks, \
                 found {:?}",
                cells[0]
            )
        });
        rows.push(Row {
            line: n,
            key: key.to_string(),
            default: cells[1].clone(),
            meaning: cells[2].clone(),
        });
    }
    assert_eq!(
        tables, 1,
        "{CONFIG_PAGE} must hold exactly one table with the header `key | default | meaning`"
    );
    assert!(!rows.is_empty(), "{CONFIG_PAGE}: the table has no rows");
    rows
}

/// The text of a cell that is one code span and nothing else: `` `15` `` gives `15`.
fn literal(cell: &str) -> Option<&str> {
    let inner = cell.strip_prefix('`')?.strip_suffix('`')?;
    (!inner.is_empty() && !inner.contains('`')).then_some(inner)
}

/// The lines of the pretty `Debug` forms of two configs that differ, for messages.
fn differences(book: &SandboxConfig, code: &SandboxConfig) -> String {
    let book = format!("{book:#?}");
    let code = format!("{code:#?}");
    let diff: Vec<String> = book
        .lines()
        .zip(code.lines())
        .filter(|(b, c)| b != c)
        .map(|(b, c)| format!("book {} / code {}", b.trim(), c.trim()))
        .take(5)
        .collect();
    if diff.is_empty() {
        "the configs differ in length".to_string()
    } else {
        diff.join("; ")
    }
}

#[test]
fn every_config_key_is_in_the_book() {
    let rows = config_rows();
    let mut book = BTreeSet::new();
    let mut twice = Vec::new();
    for row in &rows {
        if !book.insert(row.key.clone()) {
            twice.push(format!("{} (again on line {})", row.key, row.line));
        }
    }
    let code: BTreeSet<String> = SandboxConfig::keys().into_iter().collect();
    let missing: Vec<&String> = code.difference(&book).collect();
    let extra: Vec<&String> = book.difference(&code).collect();
    assert!(
        missing.is_empty() && extra.is_empty() && twice.is_empty(),
        "{CONFIG_PAGE} against SandboxConfig::keys(): missing from the book {missing:?}; \
         in the book but not keys of the code {extra:?}; listed twice {twice:?}"
    );
}

#[test]
fn the_book_defaults_are_the_code_defaults() {
    let code = SandboxConfig::default();
    let mut failures = Vec::new();
    let mut literals = 0;
    for row in config_rows() {
        let key = &row.key;
        if row.meaning.is_empty() {
            failures.push(format!("`{key}` (line {}): the meaning is empty", row.line));
        }
        if !row.default.starts_with('`') {
            if row.default.is_empty() {
                failures.push(format!("`{key}` (line {}): the default is empty", row.line));
            }
            continue;
        }
        let Some(value) = literal(&row.default) else {
            failures.push(format!(
                "`{key}` (line {}): a default that starts with a backtick must be one TOML \
                 literal in backticks (write prose otherwise), found {:?}",
                row.line, row.default
            ));
            continue;
        };
        literals += 1;
        let toml = match key.split_once('.') {
            Some((section, name)) => format!("[{section}]\n{name} = {value}\n"),
            None => format!("{key} = {value}\n"),
        };
        let parsed = SandboxConfig::from_toml_str(&toml).map(|mut book| {
            // Windows adds its own variables, which the meaning names.
            if cfg!(windows) && key == "env_allowlist" {
                for name in toolhost::config::WINDOWS_ENV_ALLOWLIST {
                    if !row.meaning.contains(&format!("`{name}`")) {
                        failures.push(format!("`{key}`: the meaning does not name `{name}`"));
                    }
                    book.env_allowlist.push(name.to_string());
                }
            }
            book
        });
        match parsed {
            Ok(book) if book == code => {}
            Ok(book) => failures.push(format!(
                "`{key}` (line {}): the book's default {value} is not the code's: {}",
                row.line,
                differences(&book, &code)
            )),
            Err(e) => failures.push(format!(
                "`{key}` (line {}): the book's default {value} does not parse ({toml:?}): {e}",
                row.line
            )),
        }
    }
    assert!(
        literals >= 20,
        "{CONFIG_PAGE}: only {literals} defaults are TOML literals; write the default as \
         the literal in backticks wherever it is one, so that this test checks it"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The targets of the inline links in markdown text: `[text](target)`.
fn link_targets(text: &str) -> Vec<&str> {
    let mut targets = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        let end = rest.find([')', ' ']).unwrap_or(rest.len());
        targets.push(&rest[..end]);
        rest = &rest[end..];
    }
    targets
}

/// The ids mdbook gives the headings of a page (`## What toolhost trusts: its
/// own state` is `what-toolhost-trusts-its-own-state`).
fn heading_ids(page: &str) -> BTreeSet<String> {
    let mut in_code = false;
    let mut ids = BTreeSet::new();
    for line in page.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
        }
        if in_code || !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#').trim();
        let id: String = title
            .chars()
            .filter_map(|c| {
                if c.is_alphanumeric() || c == '_' || c == '-' {
                    Some(c.to_ascii_lowercase())
                } else if c.is_whitespace() {
                    Some('-')
                } else {
                    None
                }
            })
            .collect();
        ids.insert(id);
    }
    ids
}

#[test]
fn the_readme_fits_on_a_screen() {
    let readme = read("README.md");
    let lines = readme.lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines, at most {README_MAX_LINES} are allowed: move the detail \
         into the book (docs/src)"
    );
    let mut checked = 0;
    let mut broken = Vec::new();
    for target in link_targets(&readme) {
        let target = target.strip_prefix("./").unwrap_or(target);
        if !target.starts_with("docs/") {
            continue;
        }
        checked += 1;
        let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
        if !path.starts_with("docs/src/") || !path.ends_with(".md") {
            broken.push(format!("{target}: not a page of the book (docs/src/*.md)"));
            continue;
        }
        let file = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
        let Ok(page) = std::fs::read_to_string(&file) else {
            broken.push(format!("{target}: no such file"));
            continue;
        };
        if !anchor.is_empty() && !heading_ids(&page).contains(anchor) {
            broken.push(format!(
                "{target}: no heading of {path} has the id {anchor:?}"
            ));
        }
    }
    assert!(checked > 0, "README.md links to no page of the book");
    assert!(
        broken.is_empty(),
        "README.md links into docs/ that do not resolve:\n{}",
        broken.join("\n")
    );
}
