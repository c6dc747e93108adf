//! A FUSE filesystem served by a thread of the test, on raw `/dev/fuse`: an
//! empty root dir that answers every request until [`HangFs::hang`], and
//! then none until [`HangFs::answer`], so that each operation on it waits (as on a FUSE or network
//! server that stopped answering). Dropping it ends the connection (a
//! waiting operation then fails) and unmounts it. Root only.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub(super) struct HangFs {
    at: PathBuf,
    hang: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    server: Option<std::thread::JoinHandle<()>>,
}

impl HangFs {
    /// Mounts it on the empty dir `at`.
    pub(super) fn mount(at: &Path) -> HangFs {
        let dev = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
            .expect("open /dev/fuse");
        let c = |s: &[u8]| std::ffi::CString::new(s).unwrap();
        let opts = format!(
            "fd={},rootmode=40000,user_id=0,group_id=0,allow_other",
            dev.as_raw_fd()
        );
        let (src, target, fstype, data) = (
            c(b"hangfs"),
            c(at.as_os_str().as_bytes()),
            c(b"fuse"),
            c(opts.as_bytes()),
        );
        // SAFETY: four NUL-terminated strings that outlive the call.
        let r = unsafe {
            libc::mount(
                src.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                0,
                data.as_ptr().cast(),
            )
        };
        assert_eq!(r, 0, "mount fuse: {}", std::io::Error::last_os_error());
        let hang = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let (h, s) = (hang.clone(), stop.clone());
        let server = std::thread::spawn(move || serve(dev, &h, &s));
        HangFs {
            at: at.to_path_buf(),
            hang,
            stop,
            server: Some(server),
        }
    }

    /// From now on no request is answered.
    pub(super) fn hang(&self) {
        self.hang.store(true, Ordering::SeqCst);
    }

    /// From now on every request is answered again, the waiting ones first.
    pub(super) fn answer(&self) {
        self.hang.store(false, Ordering::SeqCst);
    }
}

impl Drop for HangFs {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // The server closes the device: the connection ends.
        if let Some(s) = self.server.take() {
            let _ = s.join();
        }
        let target = std::ffi::CString::new(self.at.as_os_str().as_bytes()).unwrap();
        // SAFETY: a NUL-terminated path that outlives the call.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    }
}

const ENOENT: i32 = 2;
const ENOSYS: i32 = 38;
const ENODATA: i32 = 61;

/// A directory's attributes (`fuse_attr`, 88 bytes).
fn dir_attr(ino: u64) -> Vec<u8> {
    let mut a = Vec::with_capacity(88);
    a.extend(ino.to_le_bytes());
    a.extend([0u8; 5 * 8]); // size, blocks, atime, mtime, ctime
    a.extend([0u8; 3 * 4]); // their nanoseconds
    for v in [0o40755u32, 2, 0, 0, 0, 4096, 0] {
        a.extend(v.to_le_bytes()); // mode, nlink, uid, gid, rdev, blksize, flags
    }
    a
}

fn serve(mut dev: File, hang: &AtomicBool, stop: &AtomicBool) {
    let mut buf = vec![0u8; (1 << 20) + 4096];
    while !stop.load(Ordering::SeqCst) {
        let mut pfd = libc::pollfd {
            fd: dev.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, on a descriptor this thread owns.
        if unsafe { libc::poll(&mut pfd, 1, 50) } <= 0 {
            continue;
        }
        if hang.load(Ordering::SeqCst) {
            // Leave the requests waiting.
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        let n = match dev.read(&mut buf) {
            Ok(n) if n >= 40 => n,
            Ok(_) => continue,
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => return,
            Err(_) => continue,
        };
        let req = &buf[..n];
        let opcode = u32::from_le_bytes(req[4..8].try_into().unwrap());
        let unique = u64::from_le_bytes(req[8..16].try_into().unwrap());
        let node = u64::from_le_bytes(req[16..24].try_into().unwrap());
        let (err, body): (i32, Vec<u8>) = match opcode {
            // INIT: protocol 7.31, no flags, max_write 4096.
            26 => {
                let mut b = Vec::new();
                for v in [7u32, 31, 0, 0] {
                    b.extend(v.to_le_bytes());
                }
                b.extend([0u8; 4]); // max_background, congestion_threshold
                b.extend(4096u32.to_le_bytes()); // max_write
                b.extend(1u32.to_le_bytes()); // time_gran
                b.resize(64, 0);
                (0, b)
            }
            // GETATTR, never cached (attr_valid 0).
            3 => {
                let mut b = vec![0u8; 16];
                b.extend(dir_attr(node));
                (0, b)
            }
            // OPENDIR: a handle.
            27 => {
                let mut b = 1u64.to_le_bytes().to_vec();
                b.extend([0u8; 8]);
                (0, b)
            }
            // READDIR (empty), RELEASEDIR, FLUSH.
            28 | 29 | 25 => (0, Vec::new()),
            // STATFS.
            17 => {
                let mut b = vec![0u8; 5 * 8];
                for v in [4096u32, 255, 4096, 0] {
                    b.extend(v.to_le_bytes());
                }
                b.resize(80, 0);
                (0, b)
            }
            1 => (ENOENT, Vec::new()),
            // FORGET, BATCH_FORGET: no answer.
            2 | 42 => continue,
            22 | 23 => (ENODATA, Vec::new()),
            _ => (ENOSYS, Vec::new()),
        };
        let mut out = Vec::with_capacity(16 + body.len());
        out.extend(((16 + body.len()) as u32).to_le_bytes());
        out.extend((-err).to_le_bytes());
        out.extend(unique.to_le_bytes());
        out.extend(body);
        let _ = dev.write_all(&out);
    }
}
