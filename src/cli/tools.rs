//! `toolhost tools`: the WASI tools available to `--backend wasm` and `toolhost call`.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use toolhost::{SandboxConfig, WasmToolKind, catalog};

/// List the WASI tools: commands, which `toolhost run --backend wasm -- NAME`
/// runs, and typed tools (toolhost:tool world), which `toolhost call NAME JSON`
/// calls. They come from the configured [wasm] tool_dirs, then the built-in
/// collection.
#[derive(Debug, Args)]
pub struct ToolsArgs {
    /// TOML config file (its [wasm] section says where tools are)
    #[arg(long, value_name = "FILE", env = "TOOLHOST_CONFIG")]
    config: Option<PathBuf>,

    /// Print a JSON array of {name, kind ("command" or "typed"), wasi ("p1",
    /// "p2" or "p3": the WASI preview), description, path, input_schema (typed
    /// tools), error (a tool that cannot be used)}
    #[arg(long)]
    json: bool,
}

pub fn main(args: ToolsArgs) -> anyhow::Result<i32> {
    let config = match &args.config {
        Some(p) => SandboxConfig::from_file(p)?,
        None => SandboxConfig::default(),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let listed = runtime.block_on(catalog(&config.wasm, &config.limits()))?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &listed)?;
        writeln!(out)?;
    } else if listed.is_empty() {
        writeln!(
            out,
            "no WASI tools found (the built-in ones are off: [wasm] builtin_tools = false, or $TOOLHOST_BUILTIN_TOOLS names an empty dir; set [wasm] tool_dirs)"
        )?;
    } else {
        let width = listed.iter().map(|t| t.name.len()).max().unwrap_or(0);
        for t in &listed {
            let text = match &t.error {
                Some(e) => format!("(unusable: {e})"),
                None if t.kind == WasmToolKind::Typed => format!("[typed] {}", t.description),
                None if t.wasi == "p3" => format!("[p3] {}", t.description),
                None => t.description.clone(),
            };
            writeln!(out, "{:<width$}  {text}", t.name)?;
        }
    }
    Ok(0)
}
