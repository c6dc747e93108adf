//! `toolhost check`: what this host can enforce for the configured backend and
//! isolation level.

use clap::Args;

use super::run::{SandboxArgs, build_sandbox};
use toolhost::BackendChoice;

/// Report what this host can enforce, backend by backend: Landlock ABI,
/// seccomp, namespaces, cgroups, rlimits, the Docker engine and its version,
/// the wasm engine and its cache dir, and platform caveats. A probe call
/// (`true`) runs through the direct backend with the configured isolation and
/// reports the layers it got.
///
/// Exit status: 0 the configured backend and isolation level can be met here;
/// 1 they cannot (the report says why); 125 bad flags or config.
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct CheckArgs {
    #[arg(
        long,
        value_name = "B",
        help = super::run::or_the_configs("Backend to check for: direct, docker, wasm or auto", "backend")
    )]
    backend: Option<BackendChoice>,

    /// Print one JSON object instead of the table
    #[arg(long)]
    json: bool,

    #[command(flatten)]
    sandbox: SandboxArgs,
}

pub fn main(args: CheckArgs) -> anyhow::Result<i32> {
    let sandbox = build_sandbox(&args.sandbox, args.backend)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let report = runtime.block_on(async {
        let r = toolhost::check(&sandbox).await;
        sandbox.shutdown().await;
        r
    });
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.table());
    }
    Ok(if report.ok { 0 } else { 1 })
}
