//! `toolhost tools`: the WASI tools available to `--backend wasm`.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use toolhost::SandboxConfig;
use toolhost::tools::registry::Registry;

/// List the WASI tools that `toolhost run --backend wasm -- NAME` can run: the
/// configured [wasm] tool_dirs, then the built-in collection.
#[derive(Debug, Args)]
pub struct ToolsArgs {
    /// TOML config file (its [wasm] section says where tools are)
    #[arg(long, value_name = "FILE", env = "TOOLHOST_CONFIG")]
    config: Option<PathBuf>,

    /// Print a JSON array of {name, description, path}
    #[arg(long)]
    json: bool,
}

pub fn main(args: ToolsArgs) -> anyhow::Result<i32> {
    let config = match &args.config {
        Some(p) => SandboxConfig::from_file(p)?,
        None => SandboxConfig::default(),
    };
    let tools = Registry::open(&config.wasm)?.list();
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &tools)?;
        writeln!(out)?;
    } else if tools.is_empty() {
        writeln!(
            out,
            "no WASI tools found (build the built-in ones with scripts/build-guest-tools, or set [wasm] tool_dirs)"
        )?;
    } else {
        let width = tools.iter().map(|t| t.name.len()).max().unwrap_or(0);
        for t in &tools {
            writeln!(out, "{:<width$}  {}", t.name, t.description)?;
        }
    }
    Ok(0)
}
