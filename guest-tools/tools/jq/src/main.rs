//! A jq subset: paths, iteration, pipes, commas, comparisons, arithmetic,
//! array/object construction and the common builtins.

use std::io::Write;

use serde_json::{Map, Value};

common::describe!(b"jq: query JSON with a jq subset (paths, .[], |, select, map, keys, length...; -r raw, -c compact)");

const HELP: &str = "Usage: jq [-r] [-c] [-n] FILTER [FILE]...\nApply FILTER to each JSON value in FILEs (or standard input).\n  -r  print strings without quotes   -c  compact output   -n  use null as the input\nFilters: . .foo .\"k\" .[N] .[] .. | , ( ) [ ] {a: f, \"b\": f, c} literals\n  == != < <= > >= and or not  + - * / %  f? //\n  keys length type select(f) map(f) has(k) add first last sort sort_by(f)\n  reverse unique min max tostring tonumber to_entries from_entries values\n  empty error  ascii_downcase ascii_upcase split(s) join(s) test(s) startswith(s) endswith(s)\nExit status: 0, 2 usage or input error, 3 filter error, 5 runtime error.\n";

mod builtins;
mod eval;
mod parse;

use builtins::*;
use eval::*;
use parse::*;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    common::help(&args, HELP);
    let (mut raw, mut compact, mut null_input) = (false, false, false);
    let mut rest = Vec::new();
    for a in &args {
        match a.as_str() {
            "-r" => raw = true,
            "-c" => compact = true,
            "-n" => null_input = true,
            "-rc" | "-cr" => {
                raw = true;
                compact = true;
            }
            s if s.starts_with('-') && s.len() > 1 => {
                common::die("jq", 2, format!("unknown option {s}"))
            }
            s => rest.push(s.to_string()),
        }
    }
    if rest.is_empty() {
        common::die("jq", 2, "no filter given (jq --help)");
    }
    let filter = rest.remove(0);
    let mut p = Parser {
        s: filter.as_bytes(),
        i: 0,
    };
    let ast = match p.pipe() {
        Ok(a) if p.peek().is_none() => a,
        Ok(_) => common::die(
            "jq",
            3,
            format!("error: syntax error at offset {} in filter", p.i),
        ),
        Err(e) => common::die("jq", 3, format!("error: {e}")),
    };
    let mut inputs = Vec::new();
    if null_input {
        inputs.push(Value::Null);
    } else {
        if rest.is_empty() {
            rest.push("-".into());
        }
        for f in &rest {
            let data = common::read_input(f).unwrap_or_else(|e| {
                common::die(
                    "jq",
                    2,
                    format!("error: Could not open {f}: {}", common::reason(&e)),
                )
            });
            for v in serde_json::Deserializer::from_slice(&data).into_iter::<Value>() {
                match v {
                    Ok(v) => inputs.push(v),
                    Err(e) => common::die("jq", 2, format!("error (at {f}): {e}")),
                }
            }
        }
    }
    let mut out = std::io::stdout().lock();
    for input in inputs {
        match eval(&ast, &input) {
            Ok(results) => {
                for r in results {
                    let text = match (&r, raw) {
                        (Value::String(s), true) => s.clone(),
                        _ if compact => r.to_string(),
                        _ => serde_json::to_string_pretty(&r).unwrap_or_default(),
                    };
                    let _ = writeln!(out, "{text}");
                }
            }
            Err(e) => {
                let _ = out.flush();
                common::die("jq", 5, format!("error: {e}"));
            }
        }
    }
}
