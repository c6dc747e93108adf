//! Streaming, capped capture of a tool's output.
//!
//! Invariant: memory held for one stream never exceeds its cap plus one read
//! buffer, whatever the tool writes. Bytes past the cap are read and dropped (so
//! the tool never blocks on a full pipe) and the capture is marked truncated.

use std::future::Future;

use tokio::io::{AsyncRead, AsyncReadExt};

/// Size of the buffer each stream is read with.
pub const READ_CHUNK: usize = 64 * 1024;

/// How a budget of `max_output_bytes` is split: stdout keeps 80%, stderr the rest.
pub fn split_budget(max_output_bytes: u64) -> (usize, usize) {
    let total = usize::try_from(max_output_bytes).unwrap_or(usize::MAX);
    let stdout = (total / 5).saturating_mul(4) + (total % 5) * 4 / 5;
    (stdout, total - stdout)
}

/// Bytes kept from one stream, at most `cap` of them.
#[derive(Debug, Default)]
pub struct CappedBuffer {
    buf: Vec<u8>,
    cap: usize,
    truncated: bool,
    seen: u64,
}

impl CappedBuffer {
    /// An empty buffer that keeps at most `cap` bytes.
    pub fn new(cap: usize) -> Self {
        CappedBuffer {
            buf: Vec::new(),
            cap,
            truncated: false,
            seen: 0,
        }
    }

    /// Appends what fits; notes that the rest was dropped.
    pub fn push(&mut self, data: &[u8]) {
        self.seen += data.len() as u64;
        let room = self.cap - self.buf.len();
        if data.len() > room {
            self.truncated = true;
        }
        self.buf.extend_from_slice(&data[..data.len().min(room)]);
    }

    /// The most bytes this buffer keeps.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Whether bytes were dropped.
    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// Total bytes the stream produced, kept or not.
    pub fn seen(&self) -> u64 {
        self.seen
    }

    /// The kept bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// The kept bytes as text, invalid UTF-8 replaced.
    pub fn into_string(self) -> String {
        match String::from_utf8(self.buf) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        }
    }
}

/// Reads `reader` to its end, or until `stop` completes, keeping at most `cap` bytes.
///
/// `stop` lets the caller give up on a stream that a stray process keeps open; what
/// was read until then is kept. Read errors end the stream.
pub async fn drain<R, S>(reader: Option<R>, cap: usize, stop: S) -> CappedBuffer
where
    R: AsyncRead + Unpin,
    S: Future<Output = ()>,
{
    let mut out = CappedBuffer::new(cap);
    let Some(mut reader) = reader else {
        return out;
    };
    let mut chunk = vec![0u8; READ_CHUNK];
    tokio::pin!(stop);
    loop {
        tokio::select! {
            biased;
            r = reader.read(&mut chunk) => match r {
                Ok(0) | Err(_) => break,
                Ok(n) => out.push(&chunk[..n]),
            },
            _ = &mut stop => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_split_is_80_20_and_exact() {
        assert_eq!(split_budget(10), (8, 2));
        assert_eq!(split_budget(10 * 1024 * 1024), (8_388_608, 2_097_152));
        for n in 0..50u64 {
            let (a, b) = split_budget(n);
            assert_eq!((a + b) as u64, n);
            assert_eq!(a, (n * 4 / 5) as usize);
        }
    }

    #[test]
    fn capped_buffer_keeps_the_prefix() {
        let mut b = CappedBuffer::new(5);
        b.push(b"abc");
        assert!(!b.truncated());
        b.push(b"defg");
        b.push(b"h");
        assert!(b.truncated());
        assert_eq!(b.bytes(), b"abcde");
        assert_eq!(b.seen(), 8);
        let mut b = CappedBuffer::new(3);
        b.push(b"abc");
        assert!(!b.truncated(), "exactly the cap is not truncation");
    }

    #[test]
    fn invalid_utf8_is_replaced() {
        let mut b = CappedBuffer::new(10);
        b.push(b"a\xffb\0");
        assert_eq!(b.into_string(), "a\u{fffd}b\0");
    }
}
