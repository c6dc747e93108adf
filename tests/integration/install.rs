//! The installed binary: a copy of `toolhost` with the source tree and the
//! build dir out of reach (a tmpfs over each, in a private mount namespace)
//! still lists and runs every built-in WASI tool, and compiles each once:
//! a second process loads it from the disk cache.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::*;

/// How each built-in tool is run, and a line its output must contain. Every
/// built-in tool must have a case here (a new tool without one fails).
const CASES: &[(&str, &str, &str)] = &[
    (
        "base64",
        "run --backend wasm -- base64 a.txt",
        "aGVsbG8gd29ybGQK",
    ),
    ("cat", "run --backend wasm -- cat a.txt", "hello world"),
    (
        "diff",
        "run --backend wasm -- diff a.txt b.txt",
        "+hello there",
    ),
    (
        "file-digest",
        r#"call file-digest {"paths":["a.txt"]}"#,
        "a948904f2f0f479b8f8197694b30184b0d2ed1c1cd2a1ec0fb85d299a192a447",
    ),
    ("find", "run --backend wasm -- find . -name b.txt", "b.txt"),
    (
        "grep",
        "run --backend wasm -- grep -n there b.txt",
        "1:hello there",
    ),
    (
        "head",
        "run --backend wasm -- head -n 1 b.txt",
        "hello there",
    ),
    ("jq", "run --backend wasm -- jq -r .name d.json", "toolhost"),
    ("ls", "run --backend wasm -- ls", "d.json"),
    (
        "sha256sum",
        "run --backend wasm -- sha256sum a.txt",
        "a948904f2f0f479b8f8197694b30184b0d2ed1c1cd2a1ec0fb85d299a192a447",
    ),
    ("sort", "run --backend wasm -- sort -r b.txt", "zeta"),
    ("tail", "run --backend wasm -- tail -n 1 b.txt", "zeta"),
    (
        "text-stats",
        r#"call text-stats {"text":"a b a"}"#,
        "\"words\": 3",
    ),
    ("tree", "run --backend wasm -- tree", "a.txt"),
    ("uniq", "run --backend wasm -- uniq -c b.txt", "1 zeta"),
    ("wc", "run --backend wasm -- wc -l b.txt", "2 b.txt"),
];

/// The built-in tools as build.rs built them.
fn built_in_names() -> BTreeSet<String> {
    let dist = Path::new(env!("TOOLHOST_BUILD_GUEST_DIST"));
    std::fs::read_dir(dist)
        .expect("build.rs's tool dir")
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.strip_suffix(".wasm").map(str::to_string)
        })
        .collect()
}

/// The cargo target dir the test binary was built in: the outermost
/// ancestor marked with `CACHEDIR.TAG`.
fn target_dir() -> Option<PathBuf> {
    toolhost_bin()
        .ancestors()
        .filter(|a| a.join("CACHEDIR.TAG").is_file())
        .last()
        .map(Path::to_path_buf)
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Runs `script` in a private mount namespace in which `hide` are covered by
/// empty tmpfs mounts. As root, or through a user namespace otherwise.
fn hidden(hide: &[PathBuf], script: &str) -> std::process::Output {
    let mut full = String::from("set -e\n");
    for h in hide {
        full.push_str(&format!(
            "mount -t tmpfs toolhost-hide {}\n",
            quote(&h.to_string_lossy())
        ));
    }
    full.push_str(script);
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let mut cmd = Command::new("unshare");
    if !root {
        cmd.arg("-r");
    }
    cmd.args(["-m", "--propagation", "private", "sh", "-c", &full])
        .env_remove("TOOLHOST_CONFIG")
        .env_remove("TOOLHOST_BUILTIN_TOOLS")
        .env_remove("TOOLHOST_LOG")
        .output()
        .expect("run unshare")
}

#[test]
fn the_installed_binary_carries_every_built_in_tool() {
    let names = built_in_names();
    let cased: BTreeSet<String> = CASES.iter().map(|c| c.0.to_string()).collect();
    assert_eq!(
        names, cased,
        "every built-in tool needs a case here, and only those"
    );

    let t = Tmp::new();
    let bin_dir = t.root.join("bin");
    std::fs::create_dir(&bin_dir).unwrap();
    let bin = bin_dir.join("toolhost");
    std::fs::copy(toolhost_bin(), &bin).expect("copy the binary");
    t.write("a.txt", "hello world\n");
    t.write("b.txt", "hello there\nzeta\n");
    t.write("d.json", r#"{"name":"toolhost"}"#);
    let out_dir = t.root.join("out");
    std::fs::create_dir(&out_dir).unwrap();

    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut hide = vec![source.clone()];
    if let Some(target) = target_dir().filter(|d| !d.starts_with(&source)) {
        hide.push(target);
    }
    for h in &hide {
        assert!(
            !t.root.starts_with(h),
            "the test dir {} is inside {}",
            t.root.display(),
            h.display()
        );
    }

    // Two rounds, each call its own process: the first compiles each tool
    // (into an empty cache, or for a detached process to), the second loads
    // each from the cache.
    let mut script = format!(
        "test ! -e {src}/Cargo.toml\ncd {ws}\nexport HOME={home} XDG_CACHE_HOME={cache} TOOLHOST_LOG=toolhost=debug\n",
        src = quote(&source.to_string_lossy()),
        ws = quote(&t.ws().to_string_lossy()),
        home = quote(&t.root.join("home").to_string_lossy()),
        cache = quote(&t.root.join("cache").to_string_lossy()),
    );
    for round in 1..=2 {
        if round == 2 {
            // A first call ran baseline code and left the optimized compile
            // to a detached process: wait (at most a minute) for every
            // tool's entry.
            script.push_str(&format!(
                "for i in $(seq 1 1200); do [ \"$(ls {wasm} 2>/dev/null | grep -c '\\.cwasm$')\" -ge {n} ] && break; sleep 0.05; done\n",
                wasm = quote(&t.root.join("cache/toolhost/wasm").to_string_lossy()),
                n = CASES.len(),
            ));
        }
        for (name, args, _) in CASES {
            let mut words: Vec<String> = Vec::new();
            let (head, json) = match args.find(" {") {
                Some(i) => (&args[..i], Some(&args[i + 1..])),
                None => (&args[..], None),
            };
            words.extend(head.split(' ').map(quote));
            words.extend(json.map(quote));
            script.push_str(&format!(
                "{bin} {args} > {out}/{name}.{round}.out 2> {out}/{name}.{round}.err || echo $? > {out}/{name}.{round}.code\n",
                bin = quote(&bin.to_string_lossy()),
                args = words.join(" "),
                out = quote(&out_dir.to_string_lossy()),
            ));
        }
    }
    // Listed last: listing describes the typed tools, which compiles them.
    script.push_str(&format!(
        "{} tools --json > {}/list.json\n",
        quote(&bin.to_string_lossy()),
        quote(&out_dir.to_string_lossy())
    ));
    let out = hidden(&hide, &script);
    assert!(out.status.success(), "{out:?}");

    let read = |f: &str| std::fs::read_to_string(out_dir.join(f)).unwrap_or_default();
    let list: serde_json::Value = serde_json::from_str(&read("list.json")).expect("tools --json");
    let listed: BTreeSet<String> = list
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_string))
        .collect();
    assert_eq!(listed, names, "tools listed with the source hidden");
    for t in list.as_array().into_iter().flatten() {
        assert_eq!(
            t["path"].as_str(),
            Some(format!("builtin:{}.wasm", t["name"].as_str().unwrap_or("")).as_str()),
            "{t}"
        );
        assert!(t.get("error").is_none(), "{t}");
    }
    for (name, _, want) in CASES {
        for round in 1..=2 {
            let stdout = read(&format!("{name}.{round}.out"));
            let stderr = read(&format!("{name}.{round}.err"));
            let code = read(&format!("{name}.{round}.code"));
            // diff exits 1 when the files differ, as they do here.
            let want_code = if *name == "diff" { "1\n" } else { "" };
            assert_eq!(code, want_code, "{name} round {round}: {stderr}");
            assert!(
                stdout.contains(want),
                "{name} round {round}: {stdout:?} lacks {want:?}; {stderr}"
            );
            let compiled = stderr.contains("wasm code compiled and cached");
            let baseline = stderr.contains("compiled by the baseline compiler");
            let cached = stderr.contains("wasm code loaded from the disk cache");
            if round == 1 {
                // Where Winch is built in, a first call runs baseline code.
                let first = if cfg!(target_arch = "x86_64") {
                    baseline && !compiled
                } else {
                    compiled && !baseline
                };
                assert!(
                    first && !cached,
                    "{name}: the first process compiles it: {stderr}"
                );
            } else {
                assert!(
                    cached && !compiled && !baseline,
                    "{name}: a later process loads it from the cache: {stderr}"
                );
            }
        }
    }
}
