//! `toolhost tier-up` (hidden): the detached process that compiles a tool's
//! optimized code into the disk cache after a CLI call that ran baseline
//! code has exited (`toolhost::hand_off_tier_ups`).

use std::path::PathBuf;

use clap::Args;

use toolhost::SandboxConfig;

/// Compile the WebAssembly on stdin into a compile cache (started by toolhost
/// itself; not for use by hand).
#[derive(Debug, Args)]
pub struct TierUpArgs {
    /// The engine's CPU meter: epoch or fuel
    #[arg(long)]
    cpu_meter: String,
    /// The engine's `[wasm] pool_size`
    #[arg(long)]
    pool_size: u32,
    /// The cache's `[wasm] cache_max_mb`
    #[arg(long)]
    cache_max_mb: u64,
    /// The cache's directory
    #[arg(long)]
    cache_dir: PathBuf,
}

/// CPU seconds a tier-up's compile may take.
#[cfg(unix)]
const MAX_CPU_SECONDS: u64 = 120;

pub fn main(args: TierUpArgs) -> anyhow::Result<i32> {
    // Behind whatever the user runs next: this compile only saves time later.
    #[cfg(unix)]
    let _ = rustix::process::setpriority_process(None, 10);
    // And bounded: a module made to be slow to compile (which Winch ran
    // quickly) is given up after this much CPU, by the kernel.
    #[cfg(unix)]
    {
        use rustix::process::{Resource, Rlimit, setrlimit};
        let cap = Some(MAX_CPU_SECONDS);
        let _ = setrlimit(
            Resource::Cpu,
            Rlimit {
                current: cap,
                maximum: cap,
            },
        );
        // Given up so, it leaves no core dump behind, nor a record by a
        // piped core handler (which ignores RLIMIT_CORE).
        #[cfg(target_os = "linux")]
        let _ =
            rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable);
        let none = Some(0);
        let _ = setrlimit(
            Resource::Core,
            Rlimit {
                current: none,
                maximum: none,
            },
        );
    }
    let mut config = SandboxConfig::default().wasm;
    config.cpu_meter = args.cpu_meter.parse()?;
    config.pool_size = args.pool_size;
    config.cache_max_mb = args.cache_max_mb;
    config.cache_dir = Some(args.cache_dir);
    toolhost::compile_into_cache(&config, &mut std::io::stdin().lock())
        .map_err(anyhow::Error::msg)?;
    Ok(0)
}
