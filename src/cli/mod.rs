//! Command-line front end. `main` maps every failure to an exit code in one place.

use clap::{Parser, Subcommand};

mod audit;
mod call;
mod check;
mod mcp;
mod run;
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
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
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
    let result = match cli.command {
        Command::Run(args) => run::main(*args),
        Command::Call(args) => call::main(*args),
        Command::Tools(args) => tools::main(args),
        Command::Mcp(args) => mcp::main(*args),
        Command::Audit(args) => audit::main(args),
        Command::Check(args) => check::main(*args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("toolhost: error: {e:#}");
            EXIT_TOOLHOST
        }
    }
}
