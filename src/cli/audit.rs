//! `toolhost audit verify FILE`: checks an audit log's hash chain.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use toolhost::{AuditError, verify_audit_log as verify};

/// Work with audit logs (the `audit_log` config key).
#[derive(Debug, Args)]
pub struct AuditArgs {
    #[command(subcommand)]
    command: AuditCommand,
}

#[derive(Debug, Subcommand)]
enum AuditCommand {
    /// Check that no record was changed, removed, inserted or reordered (exit
    /// 0 intact, 1 broken, 125 unreadable). Records cut from the end leave a
    /// valid shorter chain: compare the last hash printed here with one kept
    /// elsewhere.
    Verify {
        /// The log file.
        file: PathBuf,
    },
}

/// Runs `toolhost audit ...`; returns the exit code.
pub fn main(args: AuditArgs) -> anyhow::Result<i32> {
    match args.command {
        AuditCommand::Verify { file } => match verify(&file) {
            Ok((n, last)) => {
                println!(
                    "{}: {n} records, chain intact; last hash {last}",
                    file.display()
                );
                Ok(0)
            }
            Err(e @ AuditError::Broken { .. }) => {
                println!("{e}");
                Ok(1)
            }
            Err(e) => Err(e.into()),
        },
    }
}
