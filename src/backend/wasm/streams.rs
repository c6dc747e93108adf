//! Guest stdout/stderr: capped in-memory pipes.
//!
//! Invariant: the guest may write as much as it likes and never traps or blocks
//! for it; toolhost keeps at most the cap (the same 80/20 split as the native
//! backends) and records that the rest was dropped. wasmtime-wasi's own
//! `MemoryOutputPipe` traps on overflow, which would turn a chatty tool into a
//! crash, hence this type.

use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

use crate::output::CappedBuffer;

/// The largest write permit handed to the guest at once.
const PERMIT: usize = 1 << 20;

/// A capped pipe; clones share the same buffer.
#[derive(Clone)]
pub(crate) struct CappedPipe {
    inner: Arc<Mutex<CappedBuffer>>,
}

impl CappedPipe {
    pub(crate) fn new(cap: usize) -> Self {
        CappedPipe {
            inner: Arc::new(Mutex::new(CappedBuffer::new(cap))),
        }
    }

    fn lock(&self) -> MutexGuard<'_, CappedBuffer> {
        // A poisoned lock only means a writer panicked mid-push; the buffer is
        // still a valid prefix.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes what was kept.
    pub(crate) fn take(&self) -> CappedBuffer {
        let mut g = self.lock();
        let cap = g.cap();
        std::mem::replace(&mut *g, CappedBuffer::new(cap))
    }
}

impl IsTerminal for CappedPipe {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CappedPipe {
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }

    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl OutputStream for CappedPipe {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.lock().push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(PERMIT)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for CappedPipe {
    async fn ready(&mut self) {}
}

impl AsyncWrite for CappedPipe {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.lock().push(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
