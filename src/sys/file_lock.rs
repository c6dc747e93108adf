//! The audit log's writer lock on Windows: one byte locked with
//! `LockFileEx`, far past the end of any real file, so that it never blocks
//! reads or writes of the log's content (Windows byte-range locks are
//! mandatory: std's `File::lock` would lock the whole file).

use std::fs::File;
use std::os::windows::io::AsRawHandle;

use windows_sys::Win32::Storage::FileSystem::{LOCKFILE_EXCLUSIVE_LOCK, LockFileEx, UnlockFileEx};
use windows_sys::Win32::System::IO::OVERLAPPED;

/// Where the writer lock lies: 2^62, past any file a disk holds.
const LOCK_OFFSET: u64 = 1 << 62;

fn at_lock_offset() -> OVERLAPPED {
    let mut ov = OVERLAPPED::default();
    ov.Anonymous.Anonymous.Offset = LOCK_OFFSET as u32;
    ov.Anonymous.Anonymous.OffsetHigh = (LOCK_OFFSET >> 32) as u32;
    ov
}

/// Takes the writer lock of `file`, waiting while another handle holds it.
pub(crate) fn lock_writer_byte(file: &File) -> std::io::Result<()> {
    let mut ov = at_lock_offset();
    // SAFETY: an open file handle (synchronous, so the call returns once the
    // lock is held); `ov` lives through the call and only carries the offset.
    let ok = unsafe {
        LockFileEx(
            file.as_raw_handle(),
            LOCKFILE_EXCLUSIVE_LOCK,
            0,
            1,
            0,
            &mut ov,
        )
    };
    if ok == 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Releases the lock [`lock_writer_byte`] took through the same handle.
pub(crate) fn unlock_writer_byte(file: &File) -> std::io::Result<()> {
    let mut ov = at_lock_offset();
    // SAFETY: as in `lock_writer_byte`: the same handle and byte.
    if unsafe { UnlockFileEx(file.as_raw_handle(), 0, 1, 0, &mut ov) } == 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
