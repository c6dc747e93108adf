//! A preview-1 guest's sleep: `poll_oneoff` on one relative clock.
//!
//! When a call's file operations run on the thread polling it
//! (`special::inline_ok`), wasmtime-wasi takes that setting as leave to
//! sleep the thread too: a lone relative clock subscription becomes
//! `std::thread::sleep`, which neither the call's timeout nor a cancel can
//! end, and which holds a runtime thread for as long as the guest asks. This
//! shadow answers that one case with a timer, exactly as wasmtime-wasi's
//! general path does (a zero duration yields once, an unrepresentable one
//! never fires); every other subscription list goes to wasmtime-wasi.

use std::time::Duration;

use wasmtime::{Caller, Linker};
use wasmtime_wasi::p1::types;
use wiggle::{GuestMemory, GuestPtr};

use super::p1::{State, call_p1};

/// Preview-1 `errno::inval`.
const ERRNO_INVAL: i32 = 28;

/// A lone relative clock subscription: its userdata and how long to wait,
/// or `Err(errno)` for a clock that has no relative sleep.
type LoneSleep = Result<(types::Userdata, Duration), i32>;

pub(super) fn add_to_linker(linker: &mut Linker<State>) -> wasmtime::Result<()> {
    linker.func_wrap_async(
        "wasi_snapshot_preview1",
        "poll_oneoff",
        |mut caller: Caller<'_, State>, (subs, events, n, out): (i32, i32, i32, i32)| {
            Box::new(async move {
                let (userdata, wait) = match lone_sleep(&mut caller, subs, n) {
                    None => return call_p1!(caller, poll_oneoff(subs, events, n, out)),
                    Some(Err(errno)) => return Ok(errno),
                    Some(Ok(s)) => s,
                };
                sleep(wait).await;
                let event = types::Event {
                    userdata,
                    error: types::Errno::Success,
                    type_: types::Eventtype::Clock,
                    fd_readwrite: types::EventFdReadwrite {
                        flags: types::Eventrwflags::empty(),
                        nbytes: 0,
                    },
                };
                let Some(m) = super::p1::guest_memory(&mut caller) else {
                    return Err(wasmtime::format_err!("missing required memory export"));
                };
                let mut mem = GuestMemory::Unshared(m.data_mut(&mut caller));
                // An out-of-bounds or misaligned pointer traps, as in
                // wasmtime-wasi (and after the sleep, as there).
                mem.write(GuestPtr::<types::Event>::new(events as u32), event)
                    .and_then(|()| mem.write(GuestPtr::<u32>::new(out as u32), 1))
                    .map_err(wasmtime::Error::new)?;
                Ok(0)
            })
        },
    )?;
    Ok(())
}

/// The sleep `poll_oneoff(subs, _, n)` asks for when it is one relative
/// clock; `None` for anything else, including a subscription that cannot be
/// read (wasmtime-wasi then reports it before waiting on anything).
fn lone_sleep(caller: &mut Caller<'_, State>, subs: i32, n: i32) -> Option<LoneSleep> {
    if n != 1 {
        return None;
    }
    let m = super::p1::guest_memory(caller)?;
    let mem = GuestMemory::Unshared(m.data_mut(&mut *caller));
    let sub = mem
        .read(GuestPtr::<types::Subscription>::new(subs as u32))
        .ok()?;
    let types::SubscriptionU::Clock(clock) = sub.u else {
        return None;
    };
    if clock
        .flags
        .contains(types::Subclockflags::SUBSCRIPTION_CLOCK_ABSTIME)
    {
        return None;
    }
    // The clocks wasmtime-wasi's general path sleeps on; it refuses the
    // CPU-time clocks with `inval`.
    Some(match clock.id {
        types::Clockid::Monotonic | types::Clockid::Realtime => {
            Ok((sub.userdata, Duration::from_nanos(clock.timeout)))
        }
        _ => Err(ERRNO_INVAL),
    })
}

/// Waits as wasmtime-wasi's monotonic-clock subscription does: a zero
/// duration yields to the runtime once, one too far to represent never ends
/// (the call's timeout does).
async fn sleep(wait: Duration) {
    if wait.is_zero() {
        tokio::task::yield_now().await;
    } else if let Some(at) = tokio::time::Instant::now().checked_add(wait) {
        tokio::time::sleep_until(at).await;
    } else {
        std::future::pending::<()>().await;
    }
}
