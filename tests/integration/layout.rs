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
        let (mut depth, mut start) = (0, 0);
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand(&prefix, &inner[start..i], out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        expand(&prefix, &inner[start..], out);
    } else if !body.is_empty() {
        let body = body.split(" as ").next().unwrap_or(body).trim();
        out.push(if prefix.is_empty() {
            body.to_string()
        } else {
            format!("{prefix}::{body}")
        });
    }
}

/// Every `crate::` path in `text`.
fn crate_paths(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("crate::") {
        let before = rest[..i].chars().next_back();
        let after = &rest[i + "crate::".len()..];
        rest = after;
        if before.is_some_and(|c| c.is_alphanumeric() || matches!(c, '_' | ':' | '$')) {
            continue; // `$crate::`, `foo_crate::`
        }
        let is_use = text_before_is_use(&text[..text.len() - after.len() - "crate::".len()]);
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
