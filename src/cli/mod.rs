//! Command-line front end. `main` maps every failure to an exit code in one place.

use clap::{Parser, Subcommand};

mod audit;
mod call;
mod check;
mod mcp;
mod run;
mod tier_up;
mod tools;

/// Exit code when toolhost itself refuses or fails (bad flags, bad config, ...).
pub const EXIT_TOOLHOST: i32 = 125;

#[derive(Debug, Parser)]
#[command(
    name = "toolhost",
    version,
    about = "Run agent tool calls inside a sandbox: checked, limited, and reported as structured results.",
    long_about = None,
)]
struct Cli {
    /// More log output on stderr (-v info, -vv debug, -vvv trace). Quiet by default;
    /// TOOLHOST_LOG=<filter> overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    Run(Box<run::RunArgs>),
    Call(Box<call::CallArgs>),
    Tools(tools::ToolsArgs),
    Mcp(Box<mcp::McpArgs>),
    Audit(audit::AuditArgs),
    Check(Box<check::CheckArgs>),
    #[command(hide = true)]
    TierUp(tier_up::TierUpArgs),
}

fn init_logging(verbose: u8) {
    use tracing_subscriber::EnvFilter;
    let filter = match std::env::var("TOOLHOST_LOG") {
        Ok(f) if !f.is_empty() => EnvFilter::new(f),
        _ => EnvFilter::new(match verbose {
            // The MCP SDK warns about every error it answers: a client's bad
            // request is not toolhost's problem.
            0 => "warn,rmcp=error",
            1 => "info",
            2 => "debug",
            _ => "trace",
        }),
    };
    use tracing_subscriber::prelude::*;
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_target(false)
        // Asked per event (a `filter_fn` would be asked once per callsite).
        .with_filter(
            tracing_subscriber::filter::DynFilterFn::new(|meta, _| engine_event_budget(meta))
                .with_callsite_filter(|_| tracing::subscriber::Interest::sometimes()),
        );
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .try_init();
}

/// Events logged from each place in the engine's own code (wasmtime,
/// cranelift) before that place goes quiet: what a guest does drives them (a
/// warning per call of an unimplemented host function), and nothing a tool
/// does may make toolhost's log grow without bound. toolhost's own messages
/// are logged once per cause where a tool could repeat them.
const ENGINE_EVENTS_PER_SITE: u32 = 20;

fn engine_event_budget(meta: &tracing::Metadata<'_>) -> bool {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    let target = meta.target();
    if !meta.is_event() || !(target.starts_with("wasmtime") || target.starts_with("cranelift")) {
        return true;
    }
    static SEEN: OnceLock<Mutex<HashMap<tracing::callsite::Identifier, u32>>> = OnceLock::new();
    let mut seen = SEEN
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let n = seen.entry(meta.callsite()).or_insert(0);
    *n = n.saturating_add(1);
    if *n == ENGINE_EVENTS_PER_SITE + 1 {
        eprintln!(
            "toolhost: further messages from {target} ({}:{}) are not logged",
            meta.file().unwrap_or("?"),
            meta.line().unwrap_or(0)
        );
    }
    *n <= ENGINE_EVENTS_PER_SITE
}

/// Parses the command line, runs the subcommand and returns the process exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_TOOLHOST } else { 0 };
            let _ = e.print();
            return code;
        }
    };
    init_logging(cli.verbose);
    // A process that ends with its call leaves the optimized compile of a
    // tool it ran on baseline code to a detached process of its own
    // (`toolhost tier-up`), started once its result is out.
    let one_call = matches!(
        cli.command,
        Command::Run(_) | Command::Call(_) | Command::Tools(_)
    );
    if one_call {
        toolhost::defer_tier_ups();
    }
    let result = match cli.command {
        Command::Run(args) => run::main(*args),
        Command::Call(args) => call::main(*args),
        Command::Tools(args) => tools::main(args),
        Command::Mcp(args) => mcp::main(*args),
        Command::Audit(args) => audit::main(args),
        Command::Check(args) => check::main(*args),
        Command::TierUp(args) => tier_up::main(args),
    };
    if one_call {
        toolhost::hand_off_tier_ups();
    }
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("toolhost: error: {e:#}");
            EXIT_TOOLHOST
        }
    }
}
