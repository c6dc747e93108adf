//! The helper's protocol on the attach stream: frames out (a run request,
//! stdin, a kill) and frames in (output, the exit), and the hello.

use std::pin::Pin;

use bollard::container::LogOutput;
use futures_util::{FutureExt, Stream, StreamExt};
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::backend::docker::engine::engine_error;
use crate::outcome::{Outcome, OutcomeKind};
use crate::output::CappedBuffer;
use crate::plan::ExecPlan;

/// The hello the helper sends when it starts.
pub(super) const HELLO: &[u8] = b"toolhost-docker-helper 1";
/// Largest frame accepted from the helper (it sends at most 64 KiB).
pub(super) const FRAME_MAX: usize = 1 << 20;
/// Stdin is sent in frames of this size.
pub(super) const STDIN_CHUNK: usize = 64 * 1024;
/// Stdin up to this size is always read by the helper at once (it buffers up
/// to 1 MiB), so a kill frame behind it is read promptly.
pub(super) const KILL_STDIN_MAX: usize = 256 * 1024;
/// The helper's side of the attach stream, parsed into frames.
pub(super) struct Reader {
    pub(super) output:
        Pin<Box<dyn Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>,
    pub(super) buf: Vec<u8>,
}

pub(super) async fn send(
    input: &mut Pin<Box<dyn AsyncWrite + Send>>,
    bytes: &[u8],
) -> Result<(), String> {
    let fail = |e: std::io::Error| format!("attach stream: {e}");
    input.write_all(bytes).await.map_err(fail)?;
    input.flush().await.map_err(fail)
}

pub(super) fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(payload.len() + 5);
    f.push(kind);
    // Payloads are built here: a run request is bounded by the plan, which
    // the sandbox bounds; stdin goes in 64 KiB frames.
    f.extend_from_slice(
        &u32::try_from(payload.len())
            .unwrap_or(u32::MAX)
            .to_le_bytes(),
    );
    f.extend_from_slice(payload);
    f
}

pub(super) fn put_str(p: &mut Vec<u8>, s: &str) {
    p.extend_from_slice(&u32::try_from(s.len()).unwrap_or(u32::MAX).to_le_bytes());
    p.extend_from_slice(s.as_bytes());
}

pub(super) fn put_strs(p: &mut Vec<u8>, v: &[String]) {
    p.extend_from_slice(&u32::try_from(v.len()).unwrap_or(u32::MAX).to_le_bytes());
    for s in v {
        put_str(p, s);
    }
}

/// The run request frame.
pub(super) fn run_request(
    plan: &ExecPlan,
    argv: &[String],
    env: &[String],
) -> Result<Vec<u8>, Outcome> {
    let mut p = Vec::new();
    put_strs(&mut p, argv);
    put_strs(&mut p, env);
    // A plan without allowed dirs runs in the container's root.
    let cwd = plan
        .cwd
        .as_ref()
        .map_or_else(|| "/".into(), |c| c.guest.to_string_lossy());
    put_str(&mut p, &cwd);
    let l = &plan.limits;
    p.extend_from_slice(&l.cpu_seconds.unwrap_or(u64::MAX).to_le_bytes());
    p.extend_from_slice(&l.file_size_bytes.unwrap_or(u64::MAX).to_le_bytes());
    p.push(u8::from(plan.stdin.is_some()));
    p.extend_from_slice(&(l.stdout_cap as u64).to_le_bytes());
    p.extend_from_slice(&(l.stderr_cap as u64).to_le_bytes());
    if p.len() > FRAME_MAX || argv.iter().chain(env).any(|s| s.contains('\0')) {
        return Err(Outcome::new(
            OutcomeKind::InvalidRequest,
            "the command line and environment must be under 1 MiB, without NUL bytes, in warm mode",
        ));
    }
    Ok(frame(b'R', &p))
}

/// The helper's `X` frame.
pub(super) struct Exit {
    pub(super) kind: i32,
    pub(super) value: i32,
    pub(super) errno: i32,
    pub(super) oom: bool,
    pub(super) others: bool,
}

pub(super) fn parse_exit(p: &[u8]) -> Result<Exit, String> {
    if p.len() != 15 {
        return Err(format!("malformed exit frame ({} bytes)", p.len()));
    }
    let i = |at: usize| i32::from_le_bytes([p[at], p[at + 1], p[at + 2], p[at + 3]]);
    Ok(Exit {
        kind: i(0),
        value: i(4),
        errno: i(8),
        oom: p[12] != 0,
        others: p[13] != 0,
    })
}

impl Reader {
    /// The next whole frame from the helper.
    pub(super) async fn next_frame(&mut self) -> Result<(u8, Vec<u8>), String> {
        loop {
            if self.buf.len() >= 5 {
                let b = &self.buf;
                let len = u32::from_le_bytes([b[1], b[2], b[3], b[4]]) as usize;
                if len > FRAME_MAX {
                    return Err(format!("frame of {len} bytes from the helper"));
                }
                if b.len() >= 5 + len {
                    let kind = b[0];
                    let payload = b[5..5 + len].to_vec();
                    self.buf.drain(..5 + len);
                    return Ok((kind, payload));
                }
            }
            match self.output.next().await {
                Some(Ok(LogOutput::StdOut { message })) => self.buf.extend_from_slice(&message),
                Some(Ok(LogOutput::StdErr { message })) => {
                    tracing::warn!(
                        "docker helper: {}",
                        String::from_utf8_lossy(&message).trim()
                    );
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(format!("attach stream: {}", engine_error(&e))),
                None => return Err("the warm container's helper exited".into()),
            }
        }
    }

    /// Output frames until the call's end.
    pub(super) async fn until_exit(
        &mut self,
        out: &mut CappedBuffer,
        err: &mut CappedBuffer,
    ) -> Result<Exit, String> {
        loop {
            match self.next_frame().await? {
                (b'o', p) => out.push(&p),
                (b'e', p) => err.push(&p),
                (b'X', p) => return parse_exit(&p),
                (k, _) => return Err(format!("unexpected frame {k} from the helper")),
            }
        }
    }

    /// Whether the helper is there and idle: a dead container's stream has
    /// ended (then the call goes to a new one, and runs once).
    pub(super) fn alive(&mut self) -> bool {
        match self.output.next().now_or_never() {
            None => true,
            Some(Some(Ok(LogOutput::StdErr { message }))) => {
                tracing::warn!(
                    "docker helper: {}",
                    String::from_utf8_lossy(&message).trim()
                );
                true
            }
            Some(_) => false,
        }
    }
}
