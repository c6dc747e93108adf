//! The layering of `src/` (the book: Design, "Layout"), checked on the
//! source: which module imports which.
//!
//! A module is a unit of the layout: a top-level module of the library
//! (`sandbox`, `plan`, `tools`, …), each backend counted apart
//! (`backend::wasm`, …). An import is any `crate::` path in a file of one
//! unit that names another: in a `use` (braces expanded) or written inline.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Units of the layers above the backends: a backend imports none of them.
const ABOVE_BACKENDS: &[&str] = &["sandbox", "check", "tools", "policy", "audit", "mcp"];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file of the library (not the binary's `cli`, `main.rs`) and
/// its module path (`backend::wasm::p3`; `lib.rs` is the empty path).
fn modules() -> BTreeMap<String, PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).expect("read src") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(&src(), &mut files);
    let mut out = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(src()).expect("under src").with_extension("");
        let mut parts: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if parts[0] == "cli" || parts == ["main"] {
            continue;
        }
        if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
            parts.pop();
        }
        out.insert(parts.join("::"), f);
    }
    out
}

/// Source without `//` comments (doc comments name paths that are not
/// imports).
fn code(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths a `use crate::…;` body names, braces expanded: `{a::b, c::{d,
/// e}}` is `a::b`, `c::d`, `c::e`.
fn expand(prefix: &str, body: &str, out: &mut Vec<String>) {
    let body = body.trim();
    if let Some(open) = body.find('{') {
        let head = body[..open].trim_end_matches("::").trim();
        let inner = &body[open + 1..body.rfind('}').expect("closing brace")];
        let prefix = match (prefix.is_empty(), head.is_empty()) {
            (_, true) => prefix.to_string(),
            (true, false) => head.to_string(),
            (false, false) => format!("{prefix}::{head}"),
        };
        for item in top_level_items(inner) {
            expand(&prefix, item, out);
        }
    } else if !body.is_empty() {
        let body = body.split(" as ").next().unwrap_or(body).trim();
        out.push(if prefix.is_empty() {
            body.to_string()
        } else {
            format!("{prefix}::{body}")
        });
    }
}

/// The items of a brace group's inside, split at its top-level commas.
fn top_level_items(inner: &str) -> Vec<&str> {
    let (mut depth, mut start, mut out) = (0, 0, Vec::new());
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&inner[start..]);
    out
}

/// Every `crate::` path in `text`.
fn crate_paths(text: &str) -> Vec<String> {
    paths_under("crate::", text)
}

/// Every path in `text` that starts with `root` (`crate::`, `toolhost::`),
/// without it.
fn paths_under(root: &str, text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(root) {
        let before = rest[..i].chars().next_back();
        let after = &rest[i + root.len()..];
        rest = after;
        if before.is_some_and(|c| c.is_alphanumeric() || matches!(c, '_' | ':' | '$')) {
            continue; // `$crate::`, `foo_crate::`
        }
        let is_use = text_before_is_use(&text[..text.len() - after.len() - root.len()]);
        if is_use {
            let end = after.find(';').unwrap_or(after.len());
            expand("", &after[..end], &mut out);
        } else {
            let end = after
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(after.len());
            out.push(after[..end].trim_end_matches(':').to_string());
        }
    }
    out
}

fn text_before_is_use(before: &str) -> bool {
    let t = before.trim_end();
    t.ends_with("use") && !t[..t.len() - 3].ends_with(|c: char| c.is_alphanumeric() || c == '_')
}

/// The names `lib.rs` exports at the crate root: its `pub use` items (by
/// their alias where renamed).
fn root_exports() -> BTreeSet<String> {
    let text = code(&std::fs::read_to_string(src().join("lib.rs")).expect("read lib.rs"));
    let mut out = BTreeSet::new();
    for stmt in text.split(';') {
        let stmt = stmt.trim();
        if let Some(body) = stmt.strip_prefix("pub use ") {
            let mut raw = Vec::new();
            expand_keeping_alias(body, &mut raw);
            out.extend(raw);
        }
    }
    out
}

/// As [`expand`], but each item is the name it is known by: the last name
/// of its path, or its alias.
fn expand_keeping_alias(body: &str, out: &mut Vec<String>) {
    let body = body.trim();
    if let Some(open) = body.find('{') {
        let inner = &body[open + 1..body.rfind('}').expect("closing brace")];
        for item in top_level_items(inner) {
            expand_keeping_alias(item, out);
        }
    } else if !body.is_empty() {
        let name = match body.split_once(" as ") {
            Some((_, alias)) => alias.trim(),
            None => body.rsplit("::").next().unwrap_or(body).trim(),
        };
        out.push(name.to_string());
    }
}

/// The `toolhost::` paths of the CLI (`src/cli/`, `src/main.rs`) that do
/// not start with a name the crate root exports, each with its file.
fn cli_paths_past_the_root(exports: &BTreeSet<String>) -> Vec<String> {
    let mut files = vec![src().join("main.rs")];
    for e in std::fs::read_dir(src().join("cli")).expect("read src/cli") {
        files.push(e.expect("entry").path());
    }
    let mut bad = Vec::new();
    for f in files {
        let text = code(&std::fs::read_to_string(&f).expect("read"));
        for path in paths_under("toolhost::", &text) {
            let first = path.split("::").next().unwrap_or_default();
            if !exports.contains(first) {
                bad.push(format!("{}: toolhost::{path}", f.display()));
            }
        }
    }
    bad
}

/// The unit of a module path: its first name, a backend's first two.
fn unit(module: &str) -> String {
    let mut parts = module.split("::");
    match (parts.next(), parts.next()) {
        (Some("backend"), Some(b)) => format!("backend::{b}"),
        (Some(""), _) | (None, _) => "lib".into(),
        (Some(first), _) => first.into(),
    }
}

/// Unit → the units it imports, each with one file and path that shows it.
fn graph() -> BTreeMap<String, BTreeMap<String, String>> {
    let mods = modules();
    let mut g: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for (module, file) in &mods {
        let text = code(&std::fs::read_to_string(file).expect("read"));
        let from = unit(module);
        g.entry(from.clone()).or_default();
        for path in crate_paths(&text) {
            // The longest module path the import names.
            let names: Vec<&str> = path.split("::").filter(|n| *n != "self").collect();
            let target = (0..=names.len())
                .rev()
                .map(|n| names[..n].join("::"))
                .find(|m| mods.contains_key(m))
                .unwrap_or_default();
            let to = unit(&target);
            if to != from && to != "lib" {
                g.entry(from.clone())
                    .or_default()
                    .entry(to)
                    .or_insert_with(|| {
                        format!(
                            "{} uses crate::{path}",
                            file.strip_prefix(src()).unwrap_or(file).display()
                        )
                    });
            }
        }
    }
    g
}

/// The strongly connected sets of more than one unit (Tarjan).
fn cycles(g: &BTreeMap<String, BTreeMap<String, String>>) -> Vec<BTreeSet<String>> {
    struct T<'a> {
        g: &'a BTreeMap<String, BTreeMap<String, String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        out: Vec<BTreeSet<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        let i = t.index.len();
        t.index.insert(v, i);
        t.low.insert(v, i);
        t.stack.push(v);
        let g = t.g;
        for w in g.get(v).into_iter().flat_map(|m| m.keys()) {
            let w = w.as_str();
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if t.stack.contains(&w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut set = BTreeSet::new();
            while let Some(w) = t.stack.pop() {
                set.insert(w.to_string());
                if w == v {
                    break;
                }
            }
            if set.len() > 1 {
                t.out.push(set);
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

/// The checker itself: it finds a cycle and a backend reaching up, and
/// reads braces, renames and inline paths.
#[test]
fn the_layout_check_finds_what_it_looks_for() {
    let mut out = Vec::new();
    expand("", "{a::b, c::{d, e::{f}}, g as h}", &mut out);
    assert_eq!(out, ["a::b", "c::d", "c::e::f", "g"]);
    let paths = crate_paths("use crate::x::{y, z};\nlet a = crate::w::v(1); $crate::no;");
    assert_eq!(paths, ["x::y", "x::z", "w::v"]);
    let mut g: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    g.entry("a".into())
        .or_default()
        .insert("b".into(), String::new());
    g.entry("b".into())
        .or_default()
        .insert("c".into(), String::new());
    g.entry("c".into())
        .or_default()
        .insert("a".into(), String::new());
    g.entry("d".into())
        .or_default()
        .insert("a".into(), String::new());
    let found = cycles(&g);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0], ["a", "b", "c"].map(String::from).into());
    assert_eq!(unit("backend::wasm::p3"), "backend::wasm");
    let mut names = Vec::new();
    expand_keeping_alias("a::{B, c::{D as E}}", &mut names);
    assert_eq!(names, ["B", "E"]);
    let exports: BTreeSet<String> = ["Sandbox", "check"].map(String::from).into();
    let uses = "use toolhost::{Sandbox, check};\nlet x = toolhost::backend::wasm::X;";
    let past: Vec<String> = paths_under("toolhost::", uses)
        .into_iter()
        .filter(|p| !exports.contains(p.split("::").next().unwrap_or_default()))
        .collect();
    assert_eq!(past, ["backend::wasm::X"]);
    assert_eq!(unit("tools::fs"), "tools");
}

/// No import cycle among the modules of `src/`.
#[test]
fn no_module_imports_a_module_that_imports_it_back() {
    let g = graph();
    let found = cycles(&g);
    let shown: Vec<String> = found
        .iter()
        .map(|set| {
            let edges: Vec<&String> = set
                .iter()
                .flat_map(|a| {
                    g[a].iter()
                        .filter(|(b, _)| set.contains(*b))
                        .map(|(_, why)| why)
                })
                .collect();
            format!(
                "{set:?}:\n  {}",
                edges
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join("\n  ")
            )
        })
        .collect();
    assert!(found.is_empty(), "import cycles:\n{}", shown.join("\n"));
    // The graph is real: the sandbox imports the plan and the backends.
    assert!(g["sandbox"].contains_key("plan") && g["sandbox"].contains_key("backend::wasm"));
}

/// The backends import nothing from the layers above them: the sandbox,
/// `check`, the agent's tools and policy, the audit log, MCP (the CLI is
/// another crate).
#[test]
fn backends_import_nothing_from_the_layers_above() {
    let g = graph();
    let mut bad = Vec::new();
    for (from, tos) in &g {
        if from != "backend" && !from.starts_with("backend::") {
            continue;
        }
        for (to, why) in tos {
            if ABOVE_BACKENDS.contains(&to.as_str()) {
                bad.push(why.clone());
            }
        }
    }
    assert!(bad.is_empty(), "backends reach up:\n{}", bad.join("\n"));
    assert!(g["backend::wasm"].contains_key("plan"));
}

/// The CLI is a user of the library like any other: it names only what the
/// crate root exports (`toolhost::Sandbox`, `toolhost::OutcomeKind::Exited`),
/// never a module's insides (`toolhost::backend::wasm::…`).
#[test]
fn the_cli_uses_only_what_the_crate_root_exports() {
    let exports = root_exports();
    assert!(exports.contains("Sandbox") && exports.contains("serve_mcp"));
    assert!(!exports.contains("backend"), "modules are not root exports");
    let bad = cli_paths_past_the_root(&exports);
    assert!(
        bad.is_empty(),
        "the CLI reaches past lib.rs:\n{}",
        bad.join("\n")
    );
}

/// The folders of the unsafe island: the only places `unsafe` may appear.
const UNSAFE_ISLAND: &[&str] = &["sys", "backend/direct"];

/// Each file of `src/` outside the island whose code (comments aside) says
/// `unsafe` other than in a lint attribute, with the line.
fn unsafe_outside_the_island(files: &[(PathBuf, String)]) -> Vec<String> {
    let mut bad = Vec::new();
    for (path, text) in files {
        let rel = path.strip_prefix(src()).unwrap_or(path);
        if UNSAFE_ISLAND.iter().any(|d| rel.starts_with(d)) {
            continue;
        }
        for (n, line) in code(text).lines().enumerate() {
            let line = line.replace("unsafe_code", "");
            let has_word = line.match_indices("unsafe").any(|(i, _)| {
                let before = line[..i].chars().next_back();
                let after = line[i + "unsafe".len()..].chars().next();
                !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
                    && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
            });
            if has_word {
                bad.push(format!("{}:{}: {}", rel.display(), n + 1, line.trim()));
            }
        }
    }
    bad
}

/// Every `.rs` file under `src/` (the binary's too), with its text.
fn all_sources() -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
        for e in std::fs::read_dir(dir).expect("read src") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&p).expect("read");
                out.push((p, text));
            }
        }
    }
    let mut out = Vec::new();
    walk(&src(), &mut out);
    out
}

/// `unsafe` lives in one island, `src/sys` and `src/backend/direct`: the
/// library and the binary deny it elsewhere (`#![deny(unsafe_code)]`), only
/// the island's two modules allow it, and Cargo.toml turns on the lints that
/// make every unsafe block and unsafe fn explain itself.
#[test]
fn unsafe_code_lives_in_one_island() {
    let files = all_sources();
    let bad = unsafe_outside_the_island(&files);
    assert!(
        bad.is_empty(),
        "unsafe outside the island:\n{}",
        bad.join("\n")
    );
    // The checker sees what it must, and not lint names or identifiers.
    let probe = vec![
        (
            src().join("paths.rs"),
            "let x = unsafe { f() };\n".to_string(),
        ),
        (
            src().join("env.rs"),
            "#![deny(unsafe_code)]\nfn not_unsafe_x() {}\n// unsafe\n".to_string(),
        ),
        (src().join("sys/x.rs"), "unsafe fn y() {}\n".to_string()),
    ];
    assert_eq!(unsafe_outside_the_island(&probe).len(), 1);
    // Where unsafe code is allowed: exactly the island's two modules.
    let allows: BTreeSet<String> = files
        .iter()
        .flat_map(|(p, t)| {
            let lines: Vec<&str> = t.lines().collect();
            lines
                .iter()
                .enumerate()
                .filter(|(_, l)| l.contains("allow(unsafe_code)"))
                .map(|(i, _)| {
                    let item = lines[i + 1..]
                        .iter()
                        .find(|l| {
                            !l.trim_start().starts_with("//") && !l.trim_start().starts_with("#[")
                        })
                        .map_or("", |l| l.trim());
                    format!("{}: {item}", p.strip_prefix(src()).unwrap_or(p).display())
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let expected: BTreeSet<String> = ["backend/mod.rs: pub mod direct;", "lib.rs: mod sys;"]
        .map(String::from)
        .into();
    assert_eq!(allows, expected, "modules that allow unsafe code");
    for root in ["lib.rs", "main.rs"] {
        let text = std::fs::read_to_string(src().join(root)).expect("read");
        assert!(
            text.contains("#![deny(unsafe_code)]"),
            "{root} must deny unsafe code"
        );
    }
    let manifest =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
            .expect("read Cargo.toml");
    let lints = manifest
        .split("[lints.clippy]")
        .nth(1)
        .expect("a [lints.clippy] table");
    for lint in ["undocumented_unsafe_blocks", "missing_safety_doc"] {
        assert!(
            lints
                .lines()
                .take_while(|l| !l.starts_with('['))
                .any(|l| l.starts_with(lint) && l.contains("deny")),
            "{lint} must be denied in [lints.clippy]"
        );
    }
}

/// The layout block of the book's "Layout and tests" page.
fn book_layout() -> String {
    let page = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/src/development.md"),
    )
    .expect("read docs/src/development.md");
    let start = page.find("## Layout\n").expect("a Layout section");
    let block = &page[start..];
    let open = block.find("```\n").expect("the layout block") + 4;
    let close = open + block[open..].find("```").expect("the block's end");
    block[open..close].to_string()
}

/// Each entry of the layout block: a `src/…` path that starts a line, with
/// the text that follows it up to the next such path.
fn layout_entries(block: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in block.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if !line.starts_with(' ') && first.starts_with("src/") {
            let rest = line[first.len()..].to_string();
            out.push((first.to_string(), rest));
        } else if line.starts_with(' ')
            && let Some(last) = out.last_mut()
        {
            last.1.push('\n');
            last.1.push_str(line);
        } else if !line.starts_with(' ') {
            out.push((first.to_string(), String::new()));
        }
    }
    out
}

/// The files of `src/` the layout block does not name: a file of `src/`
/// itself by its path, a file in a folder by its name in that folder's
/// entry (a folder's `mod.rs` by the folder's entry); and the `src/` paths
/// it names that do not exist.
fn layout_gaps(block: &str, files: &[PathBuf]) -> Vec<String> {
    let entries = layout_entries(block);
    let mut gaps = Vec::new();
    for f in files {
        let rel = f.strip_prefix(src()).unwrap_or(f);
        let rel_s = rel.to_string_lossy().replace('\\', "/");
        let named = match rel_s.rsplit_once('/') {
            None => entries.iter().any(|(p, _)| *p == format!("src/{rel_s}")),
            Some((dir, name)) => entries.iter().any(|(p, text)| {
                *p == format!("src/{dir}/") && (name == "mod.rs" || text.contains(name))
            }),
        };
        if !named {
            gaps.push(format!("not in the book: src/{rel_s}"));
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (p, _) in &entries {
        if p.starts_with("src/") && !root.join(p).exists() {
            gaps.push(format!("in the book but not in the tree: {p}"));
        }
    }
    gaps
}

/// The book's layout page matches the tree: every file of `src/` is named
/// in its folder's entry, and every path it names exists.
#[test]
fn the_books_layout_names_every_file_of_src() {
    let files: Vec<PathBuf> = all_sources().into_iter().map(|(p, _)| p).collect();
    let gaps = layout_gaps(&book_layout(), &files);
    assert!(
        gaps.is_empty(),
        "the layout page and the tree differ:\n{}",
        gaps.join("\n")
    );
    // The check sees a missing file, a missing name and a stale path.
    let block = "src/a.rs   x\nsrc/d/     one.rs\n           two.rs\nsrc/gone/  y\n";
    let probe = [
        src().join("a.rs"),
        src().join("d/two.rs"),
        src().join("d/three.rs"),
        src().join("b.rs"),
    ];
    let found = layout_gaps(block, &probe);
    assert!(
        found.iter().any(|g| g.ends_with("src/d/three.rs")),
        "{found:?}"
    );
    assert!(found.iter().any(|g| g.ends_with("src/b.rs")), "{found:?}");
    assert!(found.iter().any(|g| g.ends_with("src/gone/")), "{found:?}");
    assert!(
        !found.iter().any(|g| g.ends_with("src/d/two.rs")),
        "{found:?}"
    );
}
