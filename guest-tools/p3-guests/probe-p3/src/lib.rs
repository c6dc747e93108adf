//! Test guest (not shipped as a tool): a hostile probe as a WASI preview-3
//! command. It exports only `wasi:cli/run@0.3.0` (so the host sees a p3
//! command, not a p2 one) and does whatever its arguments say through the
//! `wasi:*@0.3.0` imports of `wit/` (a subset of wasmtime-wasi's p3 WIT).
//!
//! Its output goes through p3 `wasi:cli/stdout` (`write-via-stream`): one
//! stream, open for the whole run, each line written as it is made. A file
//! command names a preopen by its guest name and a path relative to it, and
//! prints `ok` (with data) or `err CODE`, CODE the WIT `error-code` case in
//! kebab case (then the run returns `Err`, exit status 1). A bad or missing
//! argument prints `usage`, and so does an unknown command.

wit_bindgen::generate!({ path: "wit", world: "probe-p3", generate_all });

use std::future::{Future, IntoFuture, poll_fn};
use std::pin::pin;
use std::task::Poll;

use exports::wasi::cli::run::Guest;
use wasi::cli::{environment, exit, stdout};
use wasi::clocks::monotonic_clock;
use wasi::filesystem::preopens;
use wasi::filesystem::types::{
    Descriptor, DescriptorFlags, DescriptorType, ErrorCode, NewTimestamp, OpenFlags, PathFlags,
};
use wasi::sockets::types::{
    ErrorCode as SockError, IpAddressFamily, IpSocketAddress, Ipv4SocketAddress, TcpSocket,
};
use wit_bindgen::{FutureReader, StreamWriter};

struct Probe;

export!(Probe);

impl Guest for Probe {
    async fn run() -> Result<(), ()> {
        let args = environment::get_arguments();
        let mut out = Out::new();
        let result = command(&args, &mut out).await;
        out.close().await;
        result
    }
}

/// The probe's stdout: one p3 stdout stream for the whole run.
struct Out {
    tx: Option<StreamWriter<u8>>,
    done: Option<FutureReader<Result<(), wasi::cli::types::ErrorCode>>>,
}

impl Out {
    fn new() -> Self {
        let (tx, rx) = wit_stream::new::<u8>();
        let done = stdout::write_via_stream(rx);
        Out {
            tx: Some(tx),
            done: Some(done),
        }
    }

    /// Writes `s` and a newline (dropped if the host has closed stdout).
    async fn line(&mut self, s: impl AsRef<str>) {
        let mut bytes = s.as_ref().as_bytes().to_vec();
        bytes.push(b'\n');
        if let Some(tx) = &mut self.tx
            && !tx.write_all(bytes).await.is_empty()
        {
            // The host dropped the readable end: nothing more gets out.
            self.tx = None;
        }
    }

    /// Ends the stream and waits until the host has written all of it.
    async fn close(&mut self) {
        drop(self.tx.take());
        if let Some(done) = self.done.take()
            && let Err(e) = done.await
        {
            eprintln!("probe-p3: p3 stdout failed: {e:?}");
        }
    }
}

/// What a command failed with: printed as one line, then the run fails.
enum Fail {
    Usage,
    Fs(ErrorCode),
    Sock(SockError),
    Other(&'static str),
}

impl From<ErrorCode> for Fail {
    fn from(e: ErrorCode) -> Self {
        Fail::Fs(e)
    }
}

impl From<SockError> for Fail {
    fn from(e: SockError) -> Self {
        Fail::Sock(e)
    }
}

async fn command(args: &[String], out: &mut Out) -> Result<(), ()> {
    let fail = match run_command(args, out).await {
        Ok(()) => return Ok(()),
        Err(f) => f,
    };
    let line = match &fail {
        Fail::Usage => "usage".to_string(),
        Fail::Fs(e) => {
            if let ErrorCode::Other(Some(msg)) = e {
                eprintln!("probe-p3: other: {msg}");
            }
            format!("err {}", fs_code(e))
        }
        Fail::Sock(e) => {
            if let SockError::Other(Some(msg)) = e {
                eprintln!("probe-p3: other: {msg}");
            }
            format!("err {}", sock_code(e))
        }
        Fail::Other(code) => format!("err {code}"),
    };
    out.line(line).await;
    Err(())
}

/// Argument `i` (0 is the tool name, 1 the command).
fn arg(args: &[String], i: usize) -> Result<&str, Fail> {
    args.get(i).map(String::as_str).ok_or(Fail::Usage)
}

fn num<T: std::str::FromStr>(args: &[String], i: usize) -> Result<T, Fail> {
    arg(args, i)?.parse().map_err(|_| Fail::Usage)
}

/// The preopen whose guest name is argument `i`.
fn preopen(args: &[String], i: usize) -> Result<Descriptor, Fail> {
    let name = arg(args, i)?;
    preopens::get_directories()
        .into_iter()
        .find(|(_, n)| n == name)
        .map(|(d, _)| d)
        .ok_or(Fail::Other("no-such-preopen"))
}

async fn run_command(args: &[String], out: &mut Out) -> Result<(), Fail> {
    let path = |i: usize| arg(args, i).map(str::to_string);
    let follow = PathFlags::SYMLINK_FOLLOW;
    match arg(args, 1)? {
        "hello" => out.line("hello from p3").await,
        "args" => {
            for a in &args[2..] {
                out.line(a).await;
            }
        }
        "env" => {
            for (k, v) in environment::get_environment() {
                out.line(format!("{k}={v}")).await;
            }
            out.line("end").await;
        }
        "preopens" => {
            for (_, name) in preopens::get_directories() {
                out.line(name).await;
            }
            out.line("end").await;
        }
        // write DIR PATH N / append DIR PATH N: N bytes of `x` through a
        // stream, in chunks of up to 64 KiB; `ok` with what the host took.
        cmd @ ("write" | "append") => {
            let dir = preopen(args, 2)?;
            let n: u64 = num(args, 4)?;
            let open = if cmd == "write" {
                OpenFlags::CREATE | OpenFlags::TRUNCATE
            } else {
                OpenFlags::empty()
            };
            let file = dir
                .open_at(follow, path(3)?, open, DescriptorFlags::WRITE)
                .await?;
            let (tx, rx) = wit_stream::new::<u8>();
            let done = if cmd == "write" {
                file.write_via_stream(rx, 0)
            } else {
                file.append_via_stream(rx)
            };
            let accepted = feed(tx, n, done).await?;
            out.line(format!("ok {accepted}")).await;
        }
        "setsize" => {
            let dir = preopen(args, 2)?;
            let size: u64 = num(args, 4)?;
            let file = dir
                .open_at(follow, path(3)?, OpenFlags::empty(), DescriptorFlags::WRITE)
                .await?;
            file.set_size(size).await?;
            out.line("ok").await;
        }
        "read" => {
            let dir = preopen(args, 2)?;
            let file = dir
                .open_at(follow, path(3)?, OpenFlags::empty(), DescriptorFlags::READ)
                .await?;
            let (mut rx, done) = file.read_via_stream(0);
            let mut data: Vec<u8> = Vec::new();
            loop {
                data.reserve(64 * 1024);
                let (status, buf) = rx.read(data).await;
                data = buf;
                if status == wit_bindgen::StreamResult::Dropped {
                    break;
                }
            }
            drop(rx);
            done.await?;
            out.line(format!("ok {}", String::from_utf8_lossy(&data)))
                .await;
        }
        "open" => {
            let dir = preopen(args, 2)?;
            let file = dir
                .open_at(
                    PathFlags::empty(),
                    path(3)?,
                    OpenFlags::empty(),
                    DescriptorFlags::READ,
                )
                .await?;
            let ty = file.get_type().await?;
            out.line(format!("ok {}", type_name(&ty))).await;
        }
        "mkdir" => {
            preopen(args, 2)?.create_directory_at(path(3)?).await?;
            out.line("ok").await;
        }
        "rmdir" => {
            preopen(args, 2)?.remove_directory_at(path(3)?).await?;
            out.line("ok").await;
        }
        "unlink" => {
            preopen(args, 2)?.unlink_file_at(path(3)?).await?;
            out.line("ok").await;
        }
        "symlink" => {
            preopen(args, 2)?.symlink_at(path(3)?, path(4)?).await?;
            out.line("ok").await;
        }
        "rename" => {
            let dir = preopen(args, 2)?;
            dir.rename_at(path(3)?, &dir, path(4)?).await?;
            out.line("ok").await;
        }
        "link" => {
            let dir = preopen(args, 2)?;
            dir.link_at(PathFlags::empty(), path(3)?, &dir, path(4)?)
                .await?;
            out.line("ok").await;
        }
        // touch DIR PATH [nofollow]: sets times by path.
        "touch" => {
            let dir = preopen(args, 2)?;
            let flags = if args.get(4).is_some_and(|m| m == "nofollow") {
                PathFlags::empty()
            } else {
                follow
            };
            dir.set_times_at(flags, path(3)?, NewTimestamp::Now, NewTimestamp::Now)
                .await?;
            out.line("ok").await;
        }
        // ftouch DIR PATH [w]: opens PATH for reading (with `w`: reading and
        // writing), then sets its times through the descriptor.
        "ftouch" => {
            let dir = preopen(args, 2)?;
            let flags = if args.get(4).is_some_and(|m| m == "w") {
                DescriptorFlags::READ | DescriptorFlags::WRITE
            } else {
                DescriptorFlags::READ
            };
            let file = dir
                .open_at(follow, path(3)?, OpenFlags::empty(), flags)
                .await?;
            file.set_times(NewTimestamp::Now, NewTimestamp::Now).await?;
            out.line("ok").await;
        }
        // stat follows a final symlink; lstat does not.
        cmd @ ("stat" | "lstat") => {
            let dir = preopen(args, 2)?;
            let flags = if cmd == "stat" {
                follow
            } else {
                PathFlags::empty()
            };
            let st = dir.stat_at(flags, path(3)?).await?;
            out.line(format!("ok {} {}", type_name(&st.type_), st.size))
                .await;
        }
        "spin" => {
            let mut x = 0u64;
            loop {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        }
        "alloc" => {
            let mib: usize = num(args, 2)?;
            let bytes = mib.checked_mul(1 << 20).ok_or(Fail::Usage)?;
            let mut v: Vec<u8> = Vec::new();
            v.try_reserve_exact(bytes)
                .map_err(|_| Fail::Other("alloc-failed"))?;
            // Writes every byte, so every page is really there.
            v.resize(bytes, 1);
            std::hint::black_box(&v);
            out.line("ok").await;
        }
        "sleep" => {
            let ms: u64 = num(args, 2)?;
            monotonic_clock::wait_for(ms.saturating_mul(1_000_000)).await;
            out.line("ok").await;
        }
        "connect" => {
            let addr: std::net::SocketAddrV4 = num(args, 2)?;
            let [a, b, c, d] = addr.ip().octets();
            let sock = TcpSocket::create(IpAddressFamily::Ipv4)?;
            sock.connect(IpSocketAddress::Ipv4(Ipv4SocketAddress {
                port: addr.port(),
                address: (a, b, c, d),
            }))
            .await?;
            out.line("ok").await;
        }
        "exit" => {
            let code: u8 = num(args, 2)?;
            // Let the host have all the output first: exit does not return.
            out.close().await;
            exit::exit_with_code(code);
            return Err(Fail::Other("exit-returned"));
        }
        _ => return Err(Fail::Usage),
    }
    Ok(())
}

/// Writes `n` bytes of `x` into `tx`, 64 KiB at a time, then closes it and
/// waits for `done`, the host's result for the whole write. Returns the bytes
/// the host took. Should the result come while a write is still waiting (a
/// host that stops reading without dropping the stream), the write is given
/// up rather than left to hang: an error result is reported as such, a
/// success as `err early-result`.
async fn feed(
    mut tx: StreamWriter<u8>,
    n: u64,
    done: FutureReader<Result<(), ErrorCode>>,
) -> Result<u64, Fail> {
    const CHUNK: u64 = 64 * 1024;
    let mut done = pin!(done.into_future());
    let mut left = n;
    let mut accepted = 0u64;
    while left > 0 {
        let chunk = left.min(CHUNK);
        let mut write = pin!(tx.write_all(vec![b'x'; chunk as usize]));
        let raced = poll_fn(|cx| {
            if let Poll::Ready(rest) = write.as_mut().poll(cx) {
                return Poll::Ready(Ok(rest.len() as u64));
            }
            done.as_mut().poll(cx).map(Err)
        })
        .await;
        match raced {
            Ok(rest) => {
                accepted += chunk - rest;
                if rest > 0 {
                    break; // the host dropped the stream
                }
                left -= chunk;
            }
            Err(result) => {
                result?;
                return Err(Fail::Other("early-result"));
            }
        }
    }
    // Dropping the writer ends the stream: the host then gives its result.
    drop(tx);
    done.await?;
    Ok(accepted)
}

fn type_name(t: &DescriptorType) -> &'static str {
    match t {
        DescriptorType::BlockDevice => "block-device",
        DescriptorType::CharacterDevice => "character-device",
        DescriptorType::Directory => "directory",
        DescriptorType::Fifo => "fifo",
        DescriptorType::SymbolicLink => "symbolic-link",
        DescriptorType::RegularFile => "regular-file",
        DescriptorType::Socket => "socket",
        DescriptorType::Other(_) => "other",
    }
}

fn fs_code(e: &ErrorCode) -> &'static str {
    match e {
        ErrorCode::Access => "access",
        ErrorCode::Already => "already",
        ErrorCode::BadDescriptor => "bad-descriptor",
        ErrorCode::Busy => "busy",
        ErrorCode::Deadlock => "deadlock",
        ErrorCode::Quota => "quota",
        ErrorCode::Exist => "exist",
        ErrorCode::FileTooLarge => "file-too-large",
        ErrorCode::IllegalByteSequence => "illegal-byte-sequence",
        ErrorCode::InProgress => "in-progress",
        ErrorCode::Interrupted => "interrupted",
        ErrorCode::Invalid => "invalid",
        ErrorCode::Io => "io",
        ErrorCode::IsDirectory => "is-directory",
        ErrorCode::Loop => "loop",
        ErrorCode::TooManyLinks => "too-many-links",
        ErrorCode::MessageSize => "message-size",
        ErrorCode::NameTooLong => "name-too-long",
        ErrorCode::NoDevice => "no-device",
        ErrorCode::NoEntry => "no-entry",
        ErrorCode::NoLock => "no-lock",
        ErrorCode::InsufficientMemory => "insufficient-memory",
        ErrorCode::InsufficientSpace => "insufficient-space",
        ErrorCode::NotDirectory => "not-directory",
        ErrorCode::NotEmpty => "not-empty",
        ErrorCode::NotRecoverable => "not-recoverable",
        ErrorCode::Unsupported => "unsupported",
        ErrorCode::NoTty => "no-tty",
        ErrorCode::NoSuchDevice => "no-such-device",
        ErrorCode::Overflow => "overflow",
        ErrorCode::NotPermitted => "not-permitted",
        ErrorCode::Pipe => "pipe",
        ErrorCode::ReadOnly => "read-only",
        ErrorCode::InvalidSeek => "invalid-seek",
        ErrorCode::TextFileBusy => "text-file-busy",
        ErrorCode::CrossDevice => "cross-device",
        ErrorCode::Other(_) => "other",
    }
}

fn sock_code(e: &SockError) -> &'static str {
    match e {
        SockError::AccessDenied => "access-denied",
        SockError::NotSupported => "not-supported",
        SockError::InvalidArgument => "invalid-argument",
        SockError::OutOfMemory => "out-of-memory",
        SockError::Timeout => "timeout",
        SockError::InvalidState => "invalid-state",
        SockError::AddressNotBindable => "address-not-bindable",
        SockError::AddressInUse => "address-in-use",
        SockError::RemoteUnreachable => "remote-unreachable",
        SockError::ConnectionRefused => "connection-refused",
        SockError::ConnectionBroken => "connection-broken",
        SockError::ConnectionReset => "connection-reset",
        SockError::ConnectionAborted => "connection-aborted",
        SockError::DatagramTooLarge => "datagram-too-large",
        SockError::Other(_) => "other",
    }
}
