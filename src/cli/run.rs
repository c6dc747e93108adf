//! `toolhost run`: one tool call through the sandbox.

use std::ffi::OsString;
use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;

use toolhost::{
    AllowedDirSpec, BackendChoice, BackendKind, RunOutput, RunRequest, Sandbox, SandboxConfig,
};

/// Largest standard input `toolhost run` forwards to a tool.
const MAX_FORWARDED_STDIN: u64 = 256 * 1024 * 1024;

/// Run one program inside the sandbox and report how it ended.
///
/// Exit status: the tool's own code; 124 timed out; 125 toolhost refused or
/// failed (bad flags or config, cwd outside the sandbox, backend unavailable,
/// empty argv); 126 not executable; 127 not found; 128+N killed by signal N
/// (including the CPU-time and file-size limits: SIGXCPU, SIGXFSZ). With --json
/// the same codes apply and one JSON object is printed on stdout:
/// {"stdout", "stderr", "returncode", "timed_out", "truncated",
/// "outcome": {"kind", "message", "signal"?}, "backend", "duration_ms"}.
///
/// Standard input is forwarded to the tool when it is not a terminal (up to
/// 256 MiB); otherwise the tool gets an empty stdin.
///
/// No config file is read unless --config (or TOOLHOST_CONFIG) names one: the
/// workspace is writable by the agent, so a toolhost.toml found there must not be
/// able to loosen the limits.
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct RunArgs {
    #[arg(
        long,
        value_name = "B",
        help = or_the_configs(
            "Backend: direct, wasm (a WASI tool: a registered name, or a .wasm file in the sandbox), auto (wasm when such a tool exists, else direct), docker (a locked-down container per call; needs [docker] image in the config)",
            "backend"
        )
    )]
    backend: Option<BackendChoice>,

    #[command(flatten)]
    sandbox: SandboxArgs,

    /// Set a variable for this call (any backend). A deny-listed NAME is refused. Repeatable.
    #[arg(long = "env", value_name = "NAME=VALUE", value_parser = parse_env_pair)]
    env: Vec<(String, String)>,

    /// Print one JSON object with the result instead of the tool's output
    #[arg(long)]
    json: bool,

    /// The program and its arguments (after --)
    #[arg(last = true, required = true, value_name = "PROGRAM [ARGS]...")]
    argv: Vec<OsString>,
}

/// The sandbox's dirs, config and limits: the flags `run` and `call` share.
#[derive(Debug, Args)]
pub struct SandboxArgs {
    /// A directory the tool may use, read-write, or read-only with a ":ro" suffix.
    /// HOST::GUEST shows it to the tool at GUEST instead (wasm preopens it
    /// there, docker mounts it there, direct refuses it). Repeatable; the first
    /// is the default cwd. Default: the current directory.
    #[arg(long = "allow-dir", value_name = "PATH[::GUEST][:ro]")]
    allow_dirs: Vec<String>,

    /// No directory at all: a wasm guest gets no preopened dir, a container no
    /// mount; direct refuses to run without a working directory.
    #[arg(long, conflicts_with = "allow_dirs")]
    no_dirs: bool,

    /// Working directory of the tool: inside an allowed dir, absolute or relative
    /// to the first one.
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,

    /// TOML config file (keys as in SandboxConfig); flags override it.
    #[arg(long, value_name = "FILE", env = "TOOLHOST_CONFIG")]
    config: Option<PathBuf>,

    #[arg(long, value_name = "S", help = with_default("Wall-clock timeout in seconds", "timeout"))]
    timeout: Option<f64>,

    #[arg(
        long,
        value_name = "N",
        help = with_default(
            "Address-space limit in MiB, 0 disables",
            "max_memory_mb"
        )
    )]
    max_memory_mb: Option<u64>,

    #[arg(
        long,
        value_name = "N",
        help = with_default(
            "CPU-time limit in seconds, 0 disables",
            "max_cpu_seconds"
        )
    )]
    max_cpu_seconds: Option<u64>,

    #[arg(
        long,
        value_name = "N",
        help = with_default(
            "Output budget in bytes: stdout keeps 80%, stderr 20%",
            "max_output_bytes"
        )
    )]
    max_output_bytes: Option<u64>,

    #[arg(
        long,
        value_name = "N",
        help = with_default(
            "Process limit (per user; not applied to root), 0 disables",
            "max_processes"
        )
    )]
    max_processes: Option<u64>,

    #[arg(
        long,
        value_name = "N",
        help = with_default(
            "Largest file the tool may write, in MiB, 0 disables",
            "max_file_size_mb"
        )
    )]
    max_file_size_mb: Option<u64>,

    /// Allow network access (keeps NO_PROXY; proxies are always stripped)
    #[arg(long)]
    allow_network: bool,

    /// Also pass this host environment variable (the deny list still applies). Repeatable.
    #[arg(long = "env-allow", value_name = "NAME")]
    env_allow: Vec<String>,

    #[arg(
        long,
        value_name = "LEVEL",
        value_parser = parse_isolation,
        help = or_the_configs(
            "Kernel isolation of the direct backend: strict (every required layer or the call does not run), best-effort, off",
            "isolation"
        )
    )]
    isolation: Option<toolhost::IsolationLevel>,
}

/// A flag's help with the default it has without a config file, read from
/// `SandboxConfig::default` (never written here a second time).
pub(crate) fn with_default(text: &str, key: &str) -> String {
    match SandboxConfig::default_of(key) {
        Some(d) => format!("{text} [default: {}]", d.trim_matches('"')),
        None => text.to_string(),
    }
}

/// As [`with_default`], for a flag whose default a config file can change.
pub(crate) fn or_the_configs(text: &str, key: &str) -> String {
    match SandboxConfig::default_of(key) {
        Some(d) => format!("{text} [default: {}, or the config's]", d.trim_matches('"')),
        None => text.to_string(),
    }
}

fn parse_isolation(s: &str) -> Result<toolhost::IsolationLevel, String> {
    toolhost::IsolationLevel::parse(s)
        .ok_or_else(|| format!("{s:?} is not one of strict, best-effort, off"))
}

fn parse_env_pair(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("expected NAME=VALUE, got {s:?}")),
    }
}

pub(crate) fn build_config(
    args: &SandboxArgs,
    backend: Option<BackendChoice>,
) -> anyhow::Result<SandboxConfig> {
    let mut cfg = match &args.config {
        Some(path) => SandboxConfig::from_file(path)?,
        None => SandboxConfig::default(),
    };
    if let Some(b) = backend {
        cfg.backend = b;
    }
    if let Some(t) = args.timeout {
        if !t.is_finite() || t <= 0.0 || t > toolhost::MAX_TIMEOUT_SECS {
            bail!(
                "--timeout must be more than 0 and at most {} seconds",
                toolhost::MAX_TIMEOUT_SECS
            );
        }
        cfg.timeout = Duration::from_secs_f64(t);
    }
    let set = |slot: &mut u64, v: Option<u64>| {
        if let Some(v) = v {
            *slot = v;
        }
    };
    set(&mut cfg.max_memory_mb, args.max_memory_mb);
    set(&mut cfg.max_cpu_seconds, args.max_cpu_seconds);
    set(&mut cfg.max_output_bytes, args.max_output_bytes);
    set(&mut cfg.max_processes, args.max_processes);
    set(&mut cfg.max_file_size_mb, args.max_file_size_mb);
    if args.allow_network {
        cfg.allow_network = true;
    }
    cfg.env_allowlist.extend(args.env_allow.iter().cloned());
    if let Some(l) = args.isolation {
        cfg.isolation = l;
    }
    cfg.validate().context("invalid flags")?;
    Ok(cfg)
}

/// The sandbox the flags describe (with `backend` overriding the config's).
pub(crate) fn build_sandbox(
    args: &SandboxArgs,
    backend: Option<BackendChoice>,
) -> anyhow::Result<Sandbox> {
    build_sandbox_with(args, build_config(args, backend)?)
}

/// The sandbox of the flags' dirs with `config`.
pub(crate) fn build_sandbox_with(
    args: &SandboxArgs,
    config: SandboxConfig,
) -> anyhow::Result<Sandbox> {
    let dirs: Vec<AllowedDirSpec> = if args.no_dirs {
        Vec::new()
    } else if args.allow_dirs.is_empty() {
        vec![AllowedDirSpec::read_write(
            std::env::current_dir().context("cannot determine the current directory")?,
        )]
    } else {
        args.allow_dirs
            .iter()
            .map(|s| AllowedDirSpec::parse(s))
            .collect()
    };
    Ok(Sandbox::new(dirs, config)?)
}

/// The working directory the flags ask for.
pub(crate) fn cwd(args: &SandboxArgs) -> Option<PathBuf> {
    args.cwd.clone()
}

/// The first of SIGINT, SIGTERM and SIGHUP to arrive, as (name, number).
#[cfg(unix)]
async fn stop_signal() -> (&'static str, i32) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term), Ok(mut hup)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => ("SIGINT", 2),
        _ = term.recv() => ("SIGTERM", 15),
        _ = hup.recv() => ("SIGHUP", 1),
    }
}

/// Ctrl-C, on platforms without Unix signals.
#[cfg(not(unix))]
async fn stop_signal() -> (&'static str, i32) {
    match tokio::signal::ctrl_c().await {
        Ok(()) => ("Ctrl-C", 2),
        Err(_) => std::future::pending().await,
    }
}

pub(crate) fn read_stdin() -> anyhow::Result<Option<Vec<u8>>> {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        return Ok(None);
    }
    let mut buf = Vec::new();
    match stdin
        .lock()
        .take(MAX_FORWARDED_STDIN + 1)
        .read_to_end(&mut buf)
    {
        Ok(_) if buf.len() as u64 > MAX_FORWARDED_STDIN => {
            bail!("standard input is larger than {MAX_FORWARDED_STDIN} bytes")
        }
        Ok(_) => Ok(Some(buf)),
        // A closed stdin is an empty one.
        Err(_) => Ok(None),
    }
}

/// Standard input, read within `timeout`: `None` when it did not end in
/// time (a pipe held open with no data). The reading thread is left behind;
/// the process is about to end.
pub(crate) fn read_stdin_within(timeout: Duration) -> anyhow::Result<Option<Option<Vec<u8>>>> {
    // `/dev/null` ends at once: no thread to read it.
    if stdin_is_dev_null() {
        return Ok(Some(Some(Vec::new())));
    }
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("toolhost-stdin".into())
        .spawn(move || {
            let _ = tx.send(read_stdin());
        })
        .context("cannot start a thread to read standard input")?;
    match rx.recv_timeout(timeout) {
        Ok(r) => r.map(Some),
        Err(_) => Ok(None),
    }
}

/// Whether standard input is the null device (Linux's 1:3), which reads as
/// empty at once.
#[cfg(target_os = "linux")]
fn stdin_is_dev_null() -> bool {
    use rustix::fs::{FileType, fstat, major, minor};
    fstat(std::io::stdin()).is_ok_and(|st| {
        FileType::from_raw_mode(st.st_mode) == FileType::CharacterDevice
            && major(st.st_rdev) == 1
            && minor(st.st_rdev) == 3
    })
}

#[cfg(not(target_os = "linux"))]
fn stdin_is_dev_null() -> bool {
    false
}

/// The result of a call whose standard input did not end within its timeout.
pub(crate) fn stdin_timed_out(backend: BackendKind, timeout: Duration) -> RunOutput {
    RunOutput::refused(
        backend,
        toolhost::Outcome::new(
            toolhost::OutcomeKind::TimedOut,
            format!(
                "timed out after {:.1} s reading standard input (it stayed open with no end); the tool did not start",
                timeout.as_secs_f64()
            ),
        ),
        timeout,
    )
    .timed_out_if_so()
}

pub fn main(args: RunArgs) -> anyhow::Result<i32> {
    let config = build_config(&args.sandbox, args.backend)?;
    // The namespaces and programs a direct call needs are made while the
    // sandbox is checked, stdin is read and the runtime starts.
    Sandbox::warm_up_for(&config);
    let mut sandbox = build_sandbox_with(&args.sandbox, config)?;
    let mut request = RunRequest::new(args.argv.clone());
    request.cwd = cwd(&args.sandbox);
    request.env = args.env.clone();
    // The timeout covers reading stdin: what reading took comes off the call's.
    let timeout = sandbox.config().timeout;
    let started = Instant::now();
    let Some(stdin) = read_stdin_within(timeout)? else {
        let backend = sandbox
            .config()
            .backend
            .fixed()
            .unwrap_or(BackendKind::Direct);
        let result = stdin_timed_out(backend, timeout);
        return print_result(args.json, &result);
    };
    request.stdin = stdin;
    let spent = started.elapsed();
    if spent > Duration::from_millis(5) {
        let mut config = sandbox.config().clone();
        config.timeout = timeout.saturating_sub(spent).max(Duration::from_millis(1));
        sandbox = build_sandbox_with(&args.sandbox, config)?;
    }

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    // SIGINT, SIGTERM or SIGHUP stop the call the way a timeout does (its
    // process tree, guest or container goes) before toolhost exits.
    let (result, signal) = runtime.block_on(async {
        let r = tokio::select! {
            r = sandbox.run(request) => (Some(r), None),
            s = stop_signal() => (None, Some(s)),
        };
        sandbox.shutdown().await;
        r
    });
    // Everything of the call's that must finish has (`Sandbox::shutdown`,
    // above). A wasm guest blocked in a host open(2) on a FIFO leaves a
    // blocking-pool thread that dropping the runtime would wait for
    // forever: do not wait.
    runtime.shutdown_background();
    let Some(result) = result else {
        let (name, number) = signal.unwrap_or(("a signal", 15));
        eprintln!("toolhost: stopped by {name}; the call was stopped and cleaned up");
        return Ok(128 + number);
    };
    print_result(args.json, &result)
}

/// Prints a call's result as `run` does; its exit code.
fn print_result(json: bool, result: &RunOutput) -> anyhow::Result<i32> {
    if json {
        let mut out = std::io::stdout().lock();
        serde_json::to_writer(&mut out, result)?;
        writeln!(out)?;
        out.flush()?;
    } else {
        std::io::stdout()
            .lock()
            .write_all(result.stdout.as_bytes())?;
        std::io::stdout().flush()?;
        let mut err = std::io::stderr().lock();
        err.write_all(result.stderr.as_bytes())?;
        if result.truncated {
            writeln!(err, "toolhost: output truncated at the cap")?;
        }
        let kind = result.outcome.kind;
        if kind != toolhost::OutcomeKind::Exited {
            writeln!(err, "toolhost: {}", result.outcome.message)?;
        }
    }
    Ok(result.cli_exit_code())
}
