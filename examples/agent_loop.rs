//! Embedding toolhost in an async agent loop.
//!
//! A stand-in "model" proposes tool calls; each runs concurrently through one
//! shared `Sandbox`, and the structured result is what goes back to the model.
//!
//! Run: `cargo run --example agent_loop -- WORKSPACE_DIR`

use std::sync::Arc;
use std::time::Duration;

use toolhost::{RunRequest, Sandbox, SandboxConfig};

/// What a model might ask for in one turn: some useful, some hostile.
fn proposed_calls() -> Vec<(&'static str, RunRequest)> {
    vec![
        ("list the workspace", RunRequest::new(["ls", "-1"])),
        (
            "read a file, relative to a subdir",
            RunRequest::new(["cat", "../notes.txt"]).cwd("src"),
        ),
        (
            "look for the operator's API key",
            RunRequest::new(["sh", "-c", "echo key=${ANTHROPIC_API_KEY:-<unset>}"]),
        ),
        (
            "work outside the sandbox",
            RunRequest::new(["cat", "passwd"]).cwd("/etc"),
        ),
        (
            "leave a daemon behind and hang",
            RunRequest::new(["sh", "-c", "setsid sleep 600 & sleep 600"]),
        ),
        (
            "allocate 100 GB",
            RunRequest::new(["python3", "-c", "b = bytearray(100 * 1024**3)"]),
        ),
        ("flood stdout", RunRequest::new(["yes", "spam"])),
        (
            "pipe data through a tool",
            RunRequest::new(["tr", "a-z", "A-Z"]).stdin("shout this"),
        ),
    ]
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let workspace = std::env::args()
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("usage: agent_loop WORKSPACE_DIR"))?;
    let config = SandboxConfig {
        timeout: Duration::from_secs(2),
        max_output_bytes: 64 * 1024,
        ..SandboxConfig::default()
    };
    let sandbox = Arc::new(Sandbox::new([workspace], config)?);

    let mut turns = Vec::new();
    for (intent, request) in proposed_calls() {
        let sandbox = Arc::clone(&sandbox);
        turns.push(tokio::spawn(
            async move { (intent, sandbox.run(request).await) },
        ));
    }
    for turn in turns {
        let (intent, r) = turn.await?;
        let first_line = r.stdout.lines().next().unwrap_or("");
        println!(
            "{intent:<36} -> {:<16} {:>7.1} ms  {}{}",
            r.outcome.kind.as_str(),
            r.duration.as_secs_f64() * 1e3,
            r.outcome.message,
            if first_line.is_empty() {
                String::new()
            } else {
                format!(
                    " | stdout: {first_line:.40}{}",
                    if r.truncated { " [truncated]" } else { "" }
                )
            }
        );
    }
    println!();
    println!("what goes back to the model for the last call, as JSON:");
    let last = sandbox
        .run(RunRequest::new(["sh", "-c", "echo done; exit 3"]))
        .await;
    println!("{}", serde_json::to_string_pretty(&last)?);
    // Before exiting: wait for the cleanups that run in the background.
    sandbox.shutdown().await;
    Ok(())
}
