//! Handles: the tool's standard handles (pipes, NUL), the list of the
//! only handles it inherits, and toolhost's own process closed to its
//! tools (its DACL).

use std::ffi::{OsStr, c_void};
use std::io;
use std::os::windows::io::{AsRawHandle, FromRawHandle, OwnedHandle};

use windows_sys::Win32::Foundation::{
    GENERIC_READ, HANDLE, HANDLE_FLAG_INHERIT, INVALID_HANDLE_VALUE, SetHandleInformation,
};
use windows_sys::Win32::Security::SECURITY_ATTRIBUTES;
use windows_sys::Win32::Storage::FileSystem::{
    CreateFileW, FILE_SHARE_READ, FILE_SHARE_WRITE, OPEN_EXISTING,
};
use windows_sys::Win32::System::Pipes::CreatePipe;
use windows_sys::Win32::System::Threading::{
    DeleteProcThreadAttributeList, InitializeProcThreadAttributeList,
    PROC_THREAD_ATTRIBUTE_HANDLE_LIST, UpdateProcThreadAttribute,
};

use super::cmdline::wide_nul;

/// An anonymous pipe: (read end, write end), neither inheritable.
pub(super) fn pipe() -> io::Result<(OwnedHandle, OwnedHandle)> {
    let mut read: HANDLE = std::ptr::null_mut();
    let mut write: HANDLE = std::ptr::null_mut();
    // SAFETY: out-pointers to two locals; no security attributes (not
    // inheritable); the default buffer size.
    if unsafe { CreatePipe(&mut read, &mut write, std::ptr::null(), 0) } == 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: CreatePipe succeeded: both handles are open and ours.
    Ok(unsafe {
        (
            OwnedHandle::from_raw_handle(read),
            OwnedHandle::from_raw_handle(write),
        )
    })
}

/// The NUL device, for reading: the stdin of a call without input.
pub(super) fn nul() -> io::Result<OwnedHandle> {
    let name = wide_nul(OsStr::new("NUL"))?;
    let sa = SECURITY_ATTRIBUTES {
        nLength: std::mem::size_of::<SECURITY_ATTRIBUTES>() as u32,
        lpSecurityDescriptor: std::ptr::null_mut(),
        bInheritHandle: 0,
    };
    // SAFETY: a NUL-terminated name; attributes that live through the call.
    let h = unsafe {
        CreateFileW(
            name.as_ptr(),
            GENERIC_READ,
            FILE_SHARE_READ | FILE_SHARE_WRITE,
            &sa,
            OPEN_EXISTING,
            0,
            std::ptr::null_mut(),
        )
    };
    if h == INVALID_HANDLE_VALUE {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: CreateFileW succeeded: the handle is open and ours.
    Ok(unsafe { OwnedHandle::from_raw_handle(h) })
}

/// Marks `h` inheritable: the handle list still decides what is inherited.
pub(super) fn inheritable(h: &OwnedHandle) -> io::Result<()> {
    // SAFETY: an open handle we own.
    if unsafe { SetHandleInformation(h.as_raw_handle(), HANDLE_FLAG_INHERIT, HANDLE_FLAG_INHERIT) }
        == 0
    {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub(super) fn async_file(h: OwnedHandle) -> tokio::fs::File {
    tokio::fs::File::from_std(std::fs::File::from(h))
}

/// A process-thread attribute list with one attribute: the handles a new
/// process inherits. It borrows the handle array it names.
pub(super) struct HandleList<'a> {
    /// The list's storage; `list` points into it (from `as_mut_ptr`, as
    /// Windows writes through it).
    pub(super) _buf: Vec<usize>,
    pub(super) list: *mut c_void,
    pub(super) _handles: &'a [HANDLE],
}

impl<'a> HandleList<'a> {
    pub(super) fn new(handles: &'a [HANDLE]) -> io::Result<Self> {
        let mut size = 0usize;
        // SAFETY: the documented size query: a null list, one attribute. It
        // fails with ERROR_INSUFFICIENT_BUFFER and sets `size`.
        unsafe { InitializeProcThreadAttributeList(std::ptr::null_mut(), 1, 0, &mut size) };
        if size == 0 {
            return Err(io::Error::last_os_error());
        }
        // usize-aligned storage of at least `size` bytes.
        let mut buf = vec![0usize; size.div_ceil(std::mem::size_of::<usize>())];
        let list = buf.as_mut_ptr().cast::<c_void>();
        // SAFETY: `list` points to `size` writable bytes, aligned for the list.
        if unsafe { InitializeProcThreadAttributeList(list, 1, 0, &mut size) } == 0 {
            return Err(io::Error::last_os_error());
        }
        let this = HandleList {
            _buf: buf,
            list,
            _handles: handles,
        };
        // SAFETY: an initialised list with room for one attribute; the value
        // is the handle array, which `this` borrows for as long as it lives.
        let ok = unsafe {
            UpdateProcThreadAttribute(
                list,
                0,
                PROC_THREAD_ATTRIBUTE_HANDLE_LIST as usize,
                handles.as_ptr().cast::<c_void>(),
                std::mem::size_of_val(handles),
                std::ptr::null_mut(),
                std::ptr::null(),
            )
        };
        if ok == 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(this)
    }

    pub(super) fn as_ptr(&self) -> *mut c_void {
        self.list
    }
}

impl Drop for HandleList<'_> {
    fn drop(&mut self) {
        // SAFETY: the list was initialised in `new` (a failed init never
        // builds a HandleList) and is deleted once.
        unsafe { DeleteProcThreadAttributeList(self.as_ptr()) };
    }
}

/// Closes toolhost's process object to the tools it starts, once per
/// process: they run as the same user, and the owner of a process may by
/// default read and write its memory and duplicate its handles (to read the
/// host's secrets out of its environment, or write to its stdout: the MCP
/// channel). The new DACL grants only synchronize, terminate and limited
/// queries, to the owner too (an `OWNER RIGHTS` entry replaces the owner's
/// implicit right to change the DACL back), and to SYSTEM.
///
/// A hurdle, not a boundary: toolhost's threads keep the default DACL of
/// its token, so a tool can open one and get code run in toolhost (an APC,
/// a changed context); a token with `SeDebugPrivilege` bypasses DACLs
/// altogether. Closing that needs tools started with a restricted token
/// (issue 18, open). The Linux counterpart is toolhost being non-dumpable
/// and the tool's Landlock domain.
pub(super) fn close_own_process() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if let Err(e) = set_own_dacl() {
            tracing::warn!(
                backend = "direct",
                "could not close toolhost's process to its tools ({e}): a tool can read toolhost's memory"
            );
        }
    });
}

pub(super) fn set_own_dacl() -> io::Result<()> {
    use windows_sys::Win32::Foundation::LocalFree;
    use windows_sys::Win32::Security::Authorization::{
        ConvertStringSecurityDescriptorToSecurityDescriptorW, SDDL_REVISION_1,
    };
    use windows_sys::Win32::Security::{
        DACL_SECURITY_INFORMATION, PSECURITY_DESCRIPTOR, SetKernelObjectSecurity,
    };
    use windows_sys::Win32::System::Threading::GetCurrentProcess;
    // Protected DACL: SYNCHRONIZE (0x100000) | PROCESS_QUERY_LIMITED_INFORMATION
    // (0x1000) | PROCESS_TERMINATE (0x1: the user can still stop toolhost) for
    // OWNER RIGHTS and for SYSTEM; nothing for anyone else.
    let sddl = wide_nul(OsStr::new("D:P(A;;0x101001;;;OW)(A;;0x101001;;;SY)"))?;
    let mut sd: PSECURITY_DESCRIPTOR = std::ptr::null_mut();
    // SAFETY: a NUL-terminated SDDL string; `sd` receives a LocalAlloc'd
    // descriptor, freed below.
    let ok = unsafe {
        ConvertStringSecurityDescriptorToSecurityDescriptorW(
            sddl.as_ptr(),
            SDDL_REVISION_1,
            &mut sd,
            std::ptr::null_mut(),
        )
    };
    if ok == 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the pseudo handle of this process (full access); a valid
    // self-relative descriptor holding a DACL.
    let set =
        unsafe { SetKernelObjectSecurity(GetCurrentProcess(), DACL_SECURITY_INFORMATION, sd) };
    let e = io::Error::last_os_error();
    // SAFETY: allocated by the conversion above; freed once.
    unsafe { LocalFree(sd.cast()) };
    if set == 0 {
        return Err(e);
    }
    Ok(())
}
