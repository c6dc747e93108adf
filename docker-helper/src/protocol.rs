//! The frames on the helper's stdin and stdout: a call's request read,
//! its output and end written.

use super::*;

/// How a call ended, as the `X` frame says.
pub(crate) const END_EXITED: i32 = 0;
pub(crate) const END_SIGNALLED: i32 = 1;
pub(crate) const END_SPAWN_FAILED: i32 = 2;
pub(crate) const END_BAD_REQUEST: i32 = 3;

/// Spawn failure stages in the `X` frame.
pub(crate) const STAGE_CWD: i32 = 1;
pub(crate) const STAGE_EXEC: i32 = 2;
pub(crate) const STAGE_RLIMIT: i32 = 3;
pub(crate) const STAGE_USER: i32 = 4;

/// Writes a whole frame to stdout; the host is gone if that fails.
pub(crate) fn send(kind: u8, payload: &[u8]) {
    let mut frame = Vec::with_capacity(payload.len() + 5);
    frame.push(kind);
    frame.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    frame.extend_from_slice(payload);
    let mut rest = &frame[..];
    while !rest.is_empty() {
        // SAFETY: the buffer is valid for its length.
        let n = unsafe { sys::write(1, rest.as_ptr(), rest.len()) };
        if n < 0 {
            if sys::errno() == sys::EINTR {
                continue;
            }
            host_gone();
        }
        rest = &rest[n as usize..];
    }
}

/// The host closed the stream (or it broke): nothing may outlive it.
pub(crate) fn host_gone() -> ! {
    // SAFETY: plain syscalls; exiting PID 1 ends the container.
    unsafe {
        sys::kill(-1, sys::SIGKILL);
        sys::_exit(0)
    }
}

/// Frames read from stdin.
pub(crate) struct Input {
    pub(crate) buf: Vec<u8>,
}

impl Input {
    /// Reads once from stdin; false at end of stream.
    pub(crate) fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 64 * 1024];
        loop {
            // SAFETY: the buffer is valid for its length.
            let n = unsafe { sys::read(0, chunk.as_mut_ptr(), chunk.len()) };
            if n < 0 && sys::errno() == sys::EINTR {
                continue;
            }
            if n <= 0 {
                return false;
            }
            self.buf.extend_from_slice(&chunk[..n as usize]);
            return true;
        }
    }

    /// The next whole frame in the buffer, if any.
    pub(crate) fn take(&mut self) -> Option<(u8, Vec<u8>)> {
        if self.buf.len() < 5 {
            return None;
        }
        let len = u32::from_le_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]) as usize;
        if len > FRAME_MAX {
            eprintln!("toolhost-docker-helper: frame of {len} bytes refused");
            host_gone();
        }
        if self.buf.len() < 5 + len {
            return None;
        }
        let kind = self.buf[0];
        let payload = self.buf[5..5 + len].to_vec();
        self.buf.drain(..5 + len);
        Some((kind, payload))
    }
}

/// A run request.
pub(crate) struct Request {
    pub(crate) argv: Vec<Vec<u8>>,
    pub(crate) env: Vec<Vec<u8>>,
    pub(crate) cwd: Vec<u8>,
    pub(crate) cpu_seconds: u64,
    pub(crate) file_size: u64,
    pub(crate) stdin: bool,
    pub(crate) caps: [u64; 2],
}

pub(crate) struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    pub(crate) fn bytes(&mut self, n: usize) -> Option<&[u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }
    pub(crate) fn u32(&mut self) -> Option<u32> {
        self.bytes(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub(crate) fn u64(&mut self) -> Option<u64> {
        let b = self.bytes(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Some(u64::from_le_bytes(a))
    }
    pub(crate) fn string(&mut self) -> Option<Vec<u8>> {
        let n = self.u32()? as usize;
        let s = self.bytes(n)?;
        if s.contains(&0) {
            return None;
        }
        Some(s.to_vec())
    }
    pub(crate) fn strings(&mut self) -> Option<Vec<Vec<u8>>> {
        let n = self.u32()? as usize;
        let mut v = Vec::new();
        for _ in 0..n {
            v.push(self.string()?);
        }
        Some(v)
    }
}

pub(crate) fn parse(payload: &[u8]) -> Option<Request> {
    let mut c = Cursor(payload);
    let r = Request {
        argv: c.strings()?,
        env: c.strings()?,
        cwd: c.string()?,
        cpu_seconds: c.u64()?,
        file_size: c.u64()?,
        stdin: c.bytes(1)?[0] != 0,
        caps: [c.u64()?, c.u64()?],
    };
    if r.argv.is_empty() || r.argv[0].is_empty() {
        return None;
    }
    Some(r)
}
