//! `toolhost call`: one call of a typed tool (the `toolhost:tool` world).

use std::io::Write;

use anyhow::{Context, bail};
use clap::Args;

use super::run::{
    SandboxArgs, build_sandbox, build_sandbox_with, cwd, read_stdin_within, stdin_timed_out,
};

/// Call a typed tool (a component of the toolhost:tool world, see wit/) with a
/// JSON input, and print its JSON result.
///
/// The input is the INPUT argument, or standard input when INPUT is absent or
/// "-". The tool runs on the wasm backend with the sandbox's dirs, environment
/// and limits, whatever backend the config names.
///
/// Exit status: 0 the tool returned a result (printed on stdout); 1 the tool
/// returned an error (printed on stderr); 124 timed out; 125 toolhost refused
/// (bad flags or input, not a typed tool); 127 no such tool; 137 memory limit;
/// 152 CPU limit; 153 file-size limit; 134 the guest trapped. With --json one
/// object is printed on stdout: {"output", "error", "stdout", "stderr",
/// "returncode", "timed_out", "truncated", "outcome", "backend", "duration_ms"}.
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct CallArgs {
    #[command(flatten)]
    sandbox: SandboxArgs,

    /// Print one JSON object with the result and how the call ended
    #[arg(long)]
    json: bool,

    /// The typed tool: a name from `toolhost tools`, or the path of its .wasm file
    name: String,

    /// The input, as JSON text ("-" or absent: read standard input)
    input: Option<String>,
}

pub fn main(args: CallArgs) -> anyhow::Result<i32> {
    let mut sandbox = build_sandbox(&args.sandbox, None)?;
    let text = match args.input.as_deref() {
        Some(t) if t != "-" => t.to_string(),
        _ => {
            // The timeout covers reading the input.
            let timeout = sandbox.config().timeout;
            let started = std::time::Instant::now();
            let Some(bytes) = read_stdin_within(timeout)? else {
                let run = stdin_timed_out(toolhost::BackendKind::Wasm, timeout);
                eprintln!("toolhost: {}", run.outcome.message);
                return Ok(run.cli_exit_code());
            };
            let spent = started.elapsed();
            if spent > std::time::Duration::from_millis(5) {
                let mut config = sandbox.config().clone();
                config.timeout = timeout
                    .saturating_sub(spent)
                    .max(std::time::Duration::from_millis(1));
                sandbox = build_sandbox_with(&args.sandbox, config)?;
            }
            String::from_utf8(bytes.unwrap_or_default())
                .context("the input on stdin is not UTF-8")?
        }
    };
    let input: serde_json::Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => bail!("the input is not valid JSON: {e}"),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let cwd = cwd(&args.sandbox);
    let result = runtime.block_on(async {
        let r = sandbox.call_tool(&args.name, &input, cwd.as_deref()).await;
        sandbox.shutdown().await;
        r
    });
    // As in `run`: a guest's blocking-pool thread stuck in open(2) must not
    // keep the process alive.
    runtime.shutdown_background();
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer(&mut out, &result)?;
        writeln!(out)?;
    } else {
        if let Some(v) = &result.output {
            serde_json::to_writer_pretty(&mut out, v)?;
            writeln!(out)?;
        }
        let mut err = std::io::stderr().lock();
        err.write_all(result.run.stderr.as_bytes())?;
        match (&result.error, result.run.returncode) {
            // The tool ran and returned an error.
            (Some(e), Some(_)) => writeln!(err, "toolhost: {}: {e}", args.name)?,
            // Refused, timed out, a limit hit: the message names the tool.
            (Some(e), None) => writeln!(err, "toolhost: {e}")?,
            (None, _) => {}
        }
    }
    out.flush()?;
    Ok(result.run.cli_exit_code())
}
