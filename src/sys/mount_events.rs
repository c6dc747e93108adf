//! The mount table of this process's mount namespace, read once and then
//! watched: `poll` on an open `/proc/self/mountinfo` reports `POLLPRI` once
//! a mount or unmount happened in the namespace after the file was opened.

use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;

/// The mount table as read, and the open file that tells when it changed.
pub(crate) struct MountTable {
    file: File,
    text: String,
}

impl MountTable {
    /// Opens and reads `/proc/self/mountinfo`. A mount made after the open
    /// is either in the text or reported by [`MountTable::changed`].
    pub(crate) fn read() -> std::io::Result<Self> {
        let mut file = File::open("/proc/self/mountinfo")?;
        let mut text = String::new();
        file.read_to_string(&mut text)?;
        Ok(MountTable { file, text })
    }

    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// Whether the table may have changed since it was read (also when the
    /// poll itself fails).
    pub(crate) fn changed(&self) -> bool {
        let mut pfd = libc::pollfd {
            fd: self.file.as_raw_fd(),
            events: libc::POLLPRI,
            revents: 0,
        };
        // SAFETY: one valid pollfd on a file we hold open, borrowed for the
        // call; timeout 0, so it does not wait.
        let r = unsafe { libc::poll(&mut pfd, 1, 0) };
        r != 0
    }
}
