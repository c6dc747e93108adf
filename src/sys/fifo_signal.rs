//! The signal that interrupts a blocked open of a FIFO (Linux): SIGURG
//! with a handler that does nothing and no `SA_RESTART`, sent to one
//! thread, makes its `open` return EINTR. The wasm backend's FIFO watchdog
//! (`backend/wasm/special.rs`) decides when to send it.

/// The signal: SIGURG, ignored by default and used by no one else here.
pub(crate) const SIGNAL: libc::c_int = libc::SIGURG;

extern "C" fn on_signal(_: libc::c_int) {}

fn ours() -> libc::sighandler_t {
    on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t
}

/// Whether our handler is in place, installing it over the default
/// disposition. Checked before every signal: if something replaced it
/// since, nothing is sent.
pub(crate) fn handler_installed() -> bool {
    // SAFETY: a zeroed `sigaction` is a valid value of the plain C struct.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a query (null new action) writing into a valid struct we own.
    if unsafe { libc::sigaction(SIGNAL, std::ptr::null(), &mut old) } != 0 {
        return false;
    }
    if old.sa_sigaction == ours() {
        return old.sa_flags & libc::SA_RESTART == 0;
    }
    if old.sa_sigaction != libc::SIG_DFL {
        return false;
    }
    // SAFETY: as above.
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    sa.sa_sigaction = ours();
    // No SA_RESTART: the interrupted open returns EINTR.
    sa.sa_flags = 0;
    // SAFETY: sigemptyset initialises the mask of a struct we own.
    unsafe { libc::sigemptyset(&mut sa.sa_mask) };
    // SAFETY: a valid action whose handler does nothing, so it is
    // async-signal-safe whichever thread it interrupts.
    unsafe { libc::sigaction(SIGNAL, &sa, std::ptr::null_mut()) == 0 }
}

/// Sends [`SIGNAL`] to thread `tid` of this process. Only when
/// [`handler_installed`] said yes: with the default disposition the signal
/// is ignored, but with someone else's handler it would run that.
pub(crate) fn signal_thread(tid: i32) -> bool {
    // SAFETY: tgkill takes plain integers, and targets a thread of this
    // process only; the caller checked that our no-op handler is in place.
    unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, SIGNAL) == 0 }
}
