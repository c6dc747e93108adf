//! The file budget for preview 3: `write-via-stream`, `append-via-stream`
//! and `set-size`, each byte admitted against the call's budget.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use wasmtime::StoreContextMut;
use wasmtime::component::{
    Accessor, FutureReader, LinkerInstance, Resource, Source, StreamConsumer, StreamReader,
    StreamResult,
};
use wasmtime_wasi::filesystem::Descriptor;
use wasmtime_wasi::p3::bindings::filesystem::types::{ErrorCode, HostDescriptorWithStore};

use super::{CHUNK, Host, code, fs_of};
use crate::backend::wasm::FileBudget;
use crate::backend::wasm::component::CState;

pub(super) fn add_writes(fs: &mut LinkerInstance<'_, CState>) -> wasmtime::Result<()> {
    fs.func_wrap(
        "[method]descriptor.write-via-stream",
        |store: StoreContextMut<'_, CState>,
         (fd, data, offset): (Resource<Descriptor>, StreamReader<u8>, u64)| {
            write_stream(store, fd, data, Some(offset))
        },
    )?;
    fs.func_wrap(
        "[method]descriptor.append-via-stream",
        |store: StoreContextMut<'_, CState>,
         (fd, data): (Resource<Descriptor>, StreamReader<u8>)| {
            write_stream(store, fd, data, None)
        },
    )?;
    fs.func_wrap_concurrent(
        "[method]descriptor.set-size",
        |acc: &Accessor<CState>, (fd, size): (Resource<Descriptor>, u64)| {
            Box::pin(async move {
                let found = acc.with(|mut a| {
                    let s = a.get();
                    let file = match s.table.get(&fd) {
                        Ok(Descriptor::File(f)) => Some(f.file.clone()),
                        _ => None,
                    };
                    (s.common.files.clone(), file)
                });
                let (budget, file) = found;
                // A dir or a stale handle: the real call reports it.
                let current = file.and_then(|f| f.metadata().ok()).map(|m| m.len());
                let growth = size.saturating_sub(current.unwrap_or(size));
                // Reserved before the resize: resizes and writes in flight
                // at once cannot all pass against the same total.
                if !budget.reserve_resize(size, growth) {
                    return Ok((Err(ErrorCode::FileTooLarge),));
                }
                let fs = fs_of(acc);
                match <Host as HostDescriptorWithStore<CState>>::set_size(&fs, fd, size).await {
                    Ok(()) => Ok((Ok(()),)),
                    Err(e) => {
                        budget.refund(growth);
                        Ok((Err(code(e)?),))
                    }
                }
            })
        },
    )?;
    Ok(())
}

pub(super) type WriteReturn = (FutureReader<Result<(), ErrorCode>>,);

/// `write-via-stream` (at `offset`) or `append-via-stream` (`None`): the
/// guest's stream is piped into a [`BudgetedWrite`] on the file.
pub(super) fn write_stream(
    mut store: StoreContextMut<'_, CState>,
    fd: Resource<Descriptor>,
    mut data: StreamReader<u8>,
    offset: Option<u64>,
) -> wasmtime::Result<WriteReturn> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let budget = store.data().common.files.clone();
    let file = match store.data().table.get(&fd) {
        Ok(Descriptor::File(f)) if f.perms.write_not_permitted() => Err(ErrorCode::NotPermitted),
        Ok(Descriptor::File(f)) => Ok(f.file.clone()),
        Ok(Descriptor::Dir(_)) => Err(ErrorCode::BadDescriptor),
        Err(_) => Err(ErrorCode::BadDescriptor),
    };
    match file {
        Ok(file) => data.pipe(
            &mut store,
            BudgetedWrite {
                file,
                offset,
                budget,
                result: Some(tx),
                task: None,
            },
        )?,
        Err(e) => {
            data.close(&mut store)?;
            let _ = tx.send(Err(e));
        }
    }
    let result = FutureReader::new(&mut store, async move {
        wasmtime::error::Ok(rx.await.unwrap_or(Ok(())))
    })?;
    Ok((result,))
}

/// A write in progress on the blocking pool: the bytes and how many were
/// written.
pub(super) type WriteTask = tokio::task::JoinHandle<Result<usize, WriteFail>>;

/// Consumes a guest's write stream into a file, each chunk admitted against
/// the call's file budget first (no file grows past the limit, and no call
/// writes more than its budget). Writes run on the blocking pool.
pub(super) struct BudgetedWrite {
    pub(super) file: Arc<std::fs::File>,
    /// Where the next chunk goes; `None`: at the end (append).
    pub(super) offset: Option<u64>,
    pub(super) budget: Arc<FileBudget>,
    pub(super) result: Option<tokio::sync::oneshot::Sender<Result<(), ErrorCode>>>,
    pub(super) task: Option<WriteTask>,
}

impl BudgetedWrite {
    pub(super) fn close(&mut self, r: Result<(), ErrorCode>) {
        if let Some(tx) = self.result.take() {
            let _ = tx.send(r);
        }
    }

    /// Ends the stream with `code`.
    pub(super) fn fail(&mut self, code: ErrorCode) -> Poll<wasmtime::Result<StreamResult>> {
        self.close(Err(code));
        Poll::Ready(Ok(StreamResult::Dropped))
    }
}

impl Drop for BudgetedWrite {
    fn drop(&mut self) {
        self.close(Ok(()));
    }
}

impl StreamConsumer<CState> for BudgetedWrite {
    type Item = u8;

    fn poll_consume(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        store: StoreContextMut<'_, CState>,
        src: Source<'_, Self::Item>,
        _finish: bool,
    ) -> Poll<wasmtime::Result<StreamResult>> {
        let mut src = src.as_direct(store);
        let me = &mut *self;
        if me.task.is_none() {
            let remaining = src.remaining();
            let n = remaining.len().min(CHUNK);
            if n == 0 {
                return Poll::Ready(Ok(StreamResult::Completed));
            }
            let file = me.file.clone();
            let at = match me.offset {
                Some(at) => at,
                // Appends start at the end: a file already at the limit
                // cannot grow through its append stream.
                None => match file.metadata() {
                    Ok(m) => m.len(),
                    Err(e) => return me.fail(ErrorCode::from(e)),
                },
            };
            // Reserved before the write starts, refunded for what it did
            // not write: streams in flight at once share one total.
            if !me.budget.reserve_write(at, n as u64) {
                return me.fail(ErrorCode::FileTooLarge);
            }
            let buf = remaining[..n].to_vec();
            let append = me.offset.is_none();
            let budget = me.budget.clone();
            me.task = Some(tokio::task::spawn_blocking(move || {
                let r = write_at(&file, &buf, at, append, &budget);
                let written = r.as_ref().map_or(0, |n| *n);
                budget.refund(n.saturating_sub(written) as u64);
                r
            }));
        }
        let Some(task) = me.task.as_mut() else {
            return Poll::Ready(Ok(StreamResult::Completed));
        };
        // A write that has begun is not cancelled: it is waited for.
        let done = match Pin::new(task).poll(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(r) => r,
        };
        me.task = None;
        match done {
            Ok(Ok(n)) => {
                src.mark_read(n);
                if let Some(at) = me.offset.as_mut() {
                    *at = at.saturating_add(n as u64);
                }
                Poll::Ready(Ok(StreamResult::Completed))
            }
            Ok(Err(WriteFail::Io(e))) => me.fail(ErrorCode::from(e)),
            Ok(Err(WriteFail::TooLarge)) => me.fail(ErrorCode::FileTooLarge),
            Err(_) => me.fail(ErrorCode::Io),
        }
    }
}

/// Why a chunk was not written.
pub(super) enum WriteFail {
    Io(std::io::Error),
    /// An append found the file grown meanwhile (another stream, a resize):
    /// at its real end the chunk would take it past the limit.
    TooLarge,
}

/// One write of `buf` at `at`. An append writes at the end as it is now (a
/// resize or another stream may have grown the file since it was admitted)
/// and is checked against the limit there again.
pub(super) fn write_at(
    file: &std::fs::File,
    buf: &[u8],
    at: u64,
    append: bool,
    budget: &FileBudget,
) -> Result<usize, WriteFail> {
    let at = if append {
        let end = file.metadata().map_err(WriteFail::Io)?.len();
        if !budget.fits_file(end, buf.len() as u64) {
            return Err(WriteFail::TooLarge);
        }
        end
    } else {
        at
    };
    #[cfg(unix)]
    let r = std::os::unix::fs::FileExt::write_at(file, buf, at);
    #[cfg(windows)]
    let r = std::os::windows::fs::FileExt::seek_write(file, buf, at);
    r.map_err(WriteFail::Io)
}
