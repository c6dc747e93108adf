//! `toolhost mcp`: the agent's tools as an MCP server on stdio.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use tokio::io::{AsyncRead, AsyncWrite};

use toolhost::{BackendChoice, Toolbox};

use super::run::{SandboxArgs, build_config, build_sandbox_with};

/// Serve the agent's tools over the Model Context Protocol on stdin/stdout.
///
/// The tools are shell, file_read, file_write, file_list, file_stat,
/// file_mkdir, file_move, file_delete, file_search, every registered WASI tool
/// and every typed tool, each with its JSON input schema (`toolhost tools`
/// lists the WASI and typed ones). A refused or failed call is a tool result
/// with isError and the reason, never a protocol error; its
/// _meta["toolhost/call"] says how it ended (status, rule, retry_after_ms,
/// returncode, outcome, backend).
///
/// The sandbox takes the same flags and config as `toolhost run`; the config
/// also sets the shell allowlist, the write denylist, the rate limit
/// (rate_limit_calls per rate_limit_window), max_permission_level,
/// blocked_capabilities and audit_log. Logs go to stderr; nothing a tool does
/// reaches the server's stdin or stdout. The server ends when the client
/// closes stdin. Exit status: 0 the client closed the session; 125 the
/// sandbox could not be set up (bad flags or config, audit log broken).
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct McpArgs {
    #[arg(
        long,
        value_name = "B",
        help = super::run::or_the_configs(
            "Backend of the shell tool: direct, docker, wasm or auto (WASI and typed tools always run on wasm)",
            "backend"
        )
    )]
    backend: Option<BackendChoice>,

    #[command(flatten)]
    sandbox: SandboxArgs,

    /// Append a hash-chained record of every call to FILE (overrides the
    /// config's audit_log; check it with `toolhost audit verify FILE`)
    #[arg(long, value_name = "FILE")]
    audit_log: Option<PathBuf>,
}

pub fn main(args: McpArgs) -> anyhow::Result<i32> {
    let mut config = build_config(&args.sandbox, args.backend)?;
    if let Some(p) = args.audit_log {
        config.audit_log = Some(p);
    }
    // Before anything else can write to it, the protocol's stdout is taken
    // out of reach: fd 1 becomes a copy of stderr and fd 0 /dev/null.
    let (read, write) = protocol_stdio()?;
    let sandbox = Arc::new(build_sandbox_with(&args.sandbox, config)?);
    // One thread runs the protocol and the tools (file tools do their
    // blocking work on tokio's pool, programs and containers are awaited):
    // no hand-off between workers on each message. Measured in benches/mcp.rs.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let toolbox = Toolbox::from_config(Arc::clone(&sandbox))
            .await
            .context("audit log")?;
        tracing::info!(
            "MCP server: session {}, {} tools",
            toolbox.session(),
            toolbox.tools().len()
        );
        let (read, write) = (async_reader(read), async_writer(write));
        let r = toolhost::serve_mcp(Arc::new(toolbox), read, write).await;
        sandbox.shutdown().await;
        r
    })?;
    // Reading stdin may still hold a runtime thread; nothing is left to do.
    runtime.shutdown_background();
    Ok(0)
}

type BoxRead = Box<dyn AsyncRead + Unpin + Send>;
type BoxWrite = Box<dyn AsyncWrite + Unpin + Send>;

/// The protocol's input and output, moved off fds 0 and 1: fd 0 is then
/// /dev/null and fd 1 a copy of stderr, so a stray print in this process or a
/// child that inherits stdio cannot touch the stream. The new fds are
/// close-on-exec, and this process is non-dumpable (see `Sandbox::new`), so a
/// tool cannot reach them through /proc either.
#[cfg(unix)]
fn protocol_stdio() -> anyhow::Result<(std::fs::File, std::fs::File)> {
    use rustix::io::fcntl_dupfd_cloexec;
    let moved = fcntl_dupfd_cloexec(std::io::stdin(), 3)
        .and_then(|i| Ok((i, fcntl_dupfd_cloexec(std::io::stdout(), 3)?)));
    let (input, output) = match moved {
        Ok(fds) => fds,
        Err(e) => anyhow::bail!("stdin and stdout must be open: {}", std::io::Error::from(e)),
    };
    let null = rustix::fs::open(
        "/dev/null",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    );
    let replaced = null.and_then(|null| {
        rustix::stdio::dup2_stdin(&null)?;
        rustix::stdio::dup2_stdout(std::io::stderr())
    });
    if let Err(e) = replaced {
        anyhow::bail!(
            "cannot move the protocol off stdin and stdout: {}",
            std::io::Error::from(e)
        );
    }
    Ok((std::fs::File::from(input), std::fs::File::from(output)))
}

#[cfg(not(unix))]
fn protocol_stdio() -> anyhow::Result<((), ())> {
    Ok(((), ()))
}

/// A pipe reopened through /proc, non-blocking: a fresh open file
/// description, so its flags touch nobody else's. `None` when `f` is not a
/// pipe or cannot be reopened.
#[cfg(target_os = "linux")]
fn reopen_fifo(f: &std::fs::File, write: bool) -> Option<std::fs::File> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    if !f.metadata().ok()?.file_type().is_fifo() {
        return None;
    }
    std::fs::OpenOptions::new()
        .read(!write)
        .write(write)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(format!("/proc/self/fd/{}", f.as_raw_fd()))
        .ok()
}

/// Whether `f` is a unix-domain socket (what libuv-based clients hand over).
#[cfg(unix)]
fn is_unix_socket(f: &std::fs::File) -> bool {
    use std::os::unix::fs::FileTypeExt;
    if !f.metadata().is_ok_and(|m| m.file_type().is_socket()) {
        return false;
    }
    rustix::net::getsockname(f)
        .is_ok_and(|a| a.address_family() == rustix::net::AddressFamily::UNIX)
}

/// `f` as a unix stream on the reactor (non-blocking, as a client that hands
/// over a socket has usually made it already).
#[cfg(unix)]
fn unix_stream(f: std::fs::File) -> Option<tokio::net::UnixStream> {
    let s = std::os::unix::net::UnixStream::from(std::os::fd::OwnedFd::from(f));
    s.set_nonblocking(true).ok()?;
    tokio::net::UnixStream::from_std(s).ok()
}

/// `f` with blocking reads and writes, for tokio's thread pool (a tty or a
/// socket left non-blocking would otherwise read as the end of input).
#[cfg(unix)]
fn blocking(f: std::fs::File) -> tokio::fs::File {
    use rustix::fs::{OFlags, fcntl_getfl, fcntl_setfl};
    if let Ok(flags) = fcntl_getfl(&f)
        && flags.contains(OFlags::NONBLOCK)
    {
        let _ = fcntl_setfl(&f, flags - OFlags::NONBLOCK);
    }
    tokio::fs::File::from_std(f)
}

/// The input as an async reader: a pipe or a unix socket on the reactor,
/// else blocking reads on tokio's thread pool. Inside the runtime only.
#[cfg(unix)]
fn async_reader(f: std::fs::File) -> BoxRead {
    #[cfg(target_os = "linux")]
    if let Some(r) =
        reopen_fifo(&f, false).and_then(|p| tokio::net::unix::pipe::Receiver::from_file(p).ok())
    {
        return Box::new(r);
    }
    if is_unix_socket(&f) {
        match f.try_clone().ok().and_then(unix_stream) {
            Some(s) => return Box::new(s),
            None => tracing::warn!("stdin: cannot use the socket on the reactor"),
        }
    }
    Box::new(blocking(f))
}

/// The output as an async writer, like [`async_reader`].
#[cfg(unix)]
fn async_writer(f: std::fs::File) -> BoxWrite {
    #[cfg(target_os = "linux")]
    if let Some(w) =
        reopen_fifo(&f, true).and_then(|p| tokio::net::unix::pipe::Sender::from_file(p).ok())
    {
        return Box::new(w);
    }
    if is_unix_socket(&f) {
        match f.try_clone().ok().and_then(unix_stream) {
            Some(s) => return Box::new(s),
            None => tracing::warn!("stdout: cannot use the socket on the reactor"),
        }
    }
    Box::new(blocking(f))
}

#[cfg(not(unix))]
fn async_reader(_: ()) -> BoxRead {
    Box::new(tokio::io::stdin())
}

#[cfg(not(unix))]
fn async_writer(_: ()) -> BoxWrite {
    Box::new(tokio::io::stdout())
}
