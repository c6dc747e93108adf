//! Kernel isolation of a `direct` tool on Linux (see [`crate::isolation`]).
//!
//! Split in two halves:
//! - [`prepare`] runs in toolhost before the spawn and does everything that may
//!   allocate or fail slowly: it builds the Landlock ruleset (an fd), picks the
//!   seccomp program (built once per process), finds the shared empty network
//!   namespace (created once), and creates the call's private tmp (or takes
//!   the sandbox's spare ruleset and tmp, where they hold).
//! - [`apply_in_tool`] runs in the tool process between clone and exec, and
//!   only makes system calls: setns, capability bounding-set drops,
//!   no_new_privs, landlock_restrict_self, seccomp. It records which layers it
//!   applied in the supervisor's memory (the tool shares it until exec).
//!
//! Order in the tool: setns first (it needs CAP_SYS_ADMIN, and the seccomp
//! filter refuses it), then the capability drops, no_new_privs, Landlock, and
//! the seccomp filter last.
//!
//! The supervisor applies the namespaces the tool is created in (see
//! `supervisor`): an unprivileged toolhost's user namespace ([`shared_userns`],
//! entered with setns) and the call's PID namespace (unshare).

//! The parts, one kernel mechanism per file: [`landlock`], [`seccomp`],
//! [`ns`] (network and user namespaces), [`caps`] (capabilities), [`tmp`]
//! (the private tmp, and the sweep of those killed processes left),
//! [`remove`] (removing a tree a tool filled), and [`spare`] (the next
//! call's tmp and ruleset, made ahead of it while the last call's tool
//! runs); this file joins them into the two halves.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU8, Ordering};

use libc::c_int;

use super::platform::Waiting;
use super::sys;
use crate::isolation::{IsolationLevel, Layer};
use crate::outcome::{Outcome, OutcomeKind};
use crate::plan::ExecPlan;

mod caps;
mod landlock;
mod ns;
mod remove;
mod seccomp;
mod spare;
mod tmp;

use caps::{CAP_NET_RAW, DROPPED_CAPS, PROC_PEEK_CAPS};
pub(crate) use landlock::landlock_abi;
use landlock::{Grants, finish_ruleset, minimal_ruleset, read_files, start_ruleset};
pub(crate) use ns::{shared_netns, shared_userns};
use seccomp::seccomp_filter;
pub(crate) use seccomp::{DENIED_SYSCALL_NAMES, container_filter, seccomp_available};
pub(super) use spare::Spares;
pub use tmp::flush_private_tmps;
use tmp::{PrivateTmp, ReapersPending};

/// What the tool process needs, as plain values (no allocation after fork).
#[derive(Debug, Clone, Copy)]
pub(super) struct ToolHardening {
    /// Landlock ruleset to enforce, or -1: the call's, or the minimal
    /// domain (see [`minimal_domain`]).
    pub ruleset_fd: c_int,
    /// Layers the ruleset carries (none for the minimal domain).
    pub ruleset_layers: u32,
    /// User namespace the supervisor enters (unprivileged toolhost), or -1.
    pub userns_fd: c_int,
    /// Network namespace to enter, or -1.
    pub netns_fd: c_int,
    /// Whether the supervisor runs the tool in a PID namespace of its own.
    pub pidns: bool,
    /// The seccomp program (built once per process, so `'static`), if any.
    pub seccomp: Option<&'static [libc::sock_filter]>,
    pub seccomp_layers: u32,
    /// Whether to drop capabilities from the bounding set (root only).
    pub drop_caps: bool,
    pub drop_net_raw: bool,
    /// Whether any layer failing stops the tool before exec.
    pub strict: bool,
    /// Whether to apply the kernel layers at all (level is not `off`).
    pub hardened: bool,
}

/// Everything prepared for one call; dropping it removes the private tmp and
/// closes the ruleset.
pub(super) struct Prepared {
    pub level: IsolationLevel,
    pub tool: ToolHardening,
    /// Layers this level wanted here.
    pub wanted: u32,
    /// Layers applied by toolhost itself (subreaper, private tmp).
    pub parent_applied: u32,
    pub tmp: Option<PrivateTmp>,
    /// The call's mount namespace over its protected paths, if any exist.
    pub mounts: Option<super::mounts::MountPlan>,
    /// The supervisor made ahead for this call, where the spare had one
    /// that holds for it (`spare`); `spawn` takes it.
    waiting: std::sync::Mutex<Option<Waiting>>,
    _ruleset: Option<OwnedFd>,
}

impl Prepared {
    /// The supervisor made ahead for this call, if there is one (once).
    pub(super) fn take_waiting(&self) -> Option<Waiting> {
        self.waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }
}

/// Whether this process makes supervisors ahead of calls (with the spare
/// tmp and ruleset): a root toolhost, where the supervisor shares its
/// memory (the go's parameters are written there).
fn supervisor_ahead() -> bool {
    // SAFETY: geteuid cannot fail.
    sys::SHARED_VM && unsafe { libc::geteuid() } == 0
}

/// On the reaper, with the spare for the next call of `plan`'s sandbox: a
/// supervisor made ahead for it, in its PID namespace and its mount
/// namespace with the read-only view made (`linux::Waiting`), planned as
/// `prepare` would plan it now, with `tmp` and `ruleset`. Only for a call
/// that has the view (a root toolhost's default); `None` where it cannot
/// be made, and the call then makes its own.
fn waiting_for(
    plan: &ExecPlan,
    tmp: &PrivateTmp,
    ruleset: &landlock::PartRuleset,
) -> Option<Waiting> {
    if !supervisor_ahead() || plan.isolation == IsolationLevel::Off {
        return None;
    }
    // Before anything is planned: a mount made after this shows.
    let watch = std::fs::File::open("/proc/self/mountinfo").ok()?;
    let look = crate::backend::protect::look(plan);
    let places = writable_places(plan, Some(tmp));
    if !view_wanted(plan, &places).ok()? {
        return None;
    }
    let mounts = super::mounts::MountPlan::prepare(plan, places.ok()?, true, look.held).ok()??;
    if !mounts.ahead_ok() {
        return None;
    }
    let netns_fd = if plan.allow_network {
        -1
    } else {
        shared_netns().ok()?
    };
    // Only its fds count until the go, which gives the call's own.
    let tool = ToolHardening {
        ruleset_fd: -1,
        ruleset_layers: 0,
        userns_fd: -1,
        netns_fd,
        pidns: true,
        seccomp: None,
        seccomp_layers: 0,
        drop_caps: true,
        drop_net_raw: false,
        strict: plan.isolation == IsolationLevel::Strict,
        hardened: true,
    };
    Waiting::make(tool, ruleset.dup_fd().ok()?, mounts, watch)
        .inspect_err(|e| tracing::debug!("direct backend: no supervisor made ahead: {e}"))
        .ok()
}

/// Logs, once per process, why an unprivileged toolhost has no user namespace.
fn warn_once_userns(why: &str) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        tracing::warn!(
            "direct backend: no user namespace ({why}): tools run without pidns and netns; containment is the subreaper, the network is denied by seccomp and Landlock"
        );
    });
}

/// `strict` refusing a call whose own configuration keeps `layer` from it.
fn refused_for_call(layer: Layer, why: &str) -> Outcome {
    Outcome::new(
        OutcomeKind::IsolationUnavailable,
        format!(
            "isolation = \"strict\": {} cannot be applied to this call ({why}); the call did not run",
            layer.name()
        ),
    )
}

fn unavailable(layer: Layer, why: &str) -> Outcome {
    Outcome::new(
        OutcomeKind::IsolationUnavailable,
        format!(
            "isolation = \"strict\": {} cannot be applied on this host ({why}); the call did not run",
            layer.name()
        ),
    )
}

/// Starts now the threads the first call of this process at `level` would
/// start on its own path, each once per process and each to live as long
/// as the process: the supervisors' reaper
/// (`platform::start_supervisor_reaper`) and, but at level `off`, the
/// private tmps' reaper (with the sweep of abandoned tmps it starts). On the
/// calling thread, so that they run where its threads run (not on the
/// warm-up's CPUs, see [`warm_up`]).
fn start_reapers(level: IsolationLevel) {
    super::platform::start_supervisor_reaper();
    if level != IsolationLevel::Off {
        let _ = tmp::reaper();
    }
}

/// A start of the reapers at `level` that a thread of the caller's will
/// make ([`start_reapers`]), unless one was asked for before for the same
/// reapers (a process that warms up many sandboxes starts them once).
/// `None` when there is nothing to start.
pub(crate) fn reapers_to_start(level: IsolationLevel) -> Option<ReapersStart> {
    let wanted = SUPERVISORS
        | if level == IsolationLevel::Off {
            0
        } else {
            TMPS
        };
    let new = wanted & !ASKED.fetch_or(wanted, Ordering::SeqCst);
    (new != 0).then(|| ReapersStart {
        new,
        tmps: (new & TMPS != 0).then(ReapersPending::new),
    })
}

const SUPERVISORS: u8 = 1;
const TMPS: u8 = 2;
/// The reapers whose start was asked for ([`reapers_to_start`]).
static ASKED: AtomicU8 = AtomicU8::new(0);

/// A start of reapers asked for ([`reapers_to_start`]). The private tmps'
/// reaper's is announced to `flush_private_tmps`, which waits for it (and
/// the sweep it starts) until this is dropped; the supervisors' reaper is
/// not waited for by anything. Dropped unstarted (its thread could not be
/// made), it is asked for no more, so a later warm-up asks again.
pub(crate) struct ReapersStart {
    new: u8,
    tmps: Option<ReapersPending>,
}

impl ReapersStart {
    /// Starts them ([`start_reapers`]), then ends the announcement.
    pub(crate) fn make(mut self, level: IsolationLevel) {
        start_reapers(level);
        self.new = 0;
        self.tmps = None;
    }
}

impl Drop for ReapersStart {
    fn drop(&mut self) {
        if self.new != 0 {
            ASKED.fetch_and(!self.new, Ordering::SeqCst);
        }
    }
}

/// Makes now what the first call of this process at `level` would make on
/// its own path, each once per process: the Landlock probe, the seccomp
/// program, the shared network namespace (root) or user namespace
/// (otherwise). A call that starts meanwhile waits for what it needs.
/// Nothing here depends on a call or on what the host's paths lead to: the
/// read paths' handles, which do (a directory swapped for another between
/// now and the call), are left to the call. Nothing here starts a thread
/// that outlives it ([`start_reapers`] does that): it runs on a thread
/// bound to other CPUs than its starter's (`sys::beside`), and a thread
/// inherits its starter's binding.
pub(crate) fn warm_up(net_off: bool, level: IsolationLevel) {
    let abi = landlock_abi();
    if level == IsolationLevel::Off {
        let _ = minimal_domain(abi);
        return;
    }
    let _ = seccomp_available();
    let _ = seccomp_filter(net_off);
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        let _ = shared_userns();
    } else if net_off {
        let _ = shared_netns();
    }
}

/// Prepares the isolation of one call, with the sandbox's spare tmp and
/// ruleset if they hold for it (`spare`). Fails only under `strict`.
pub(super) fn prepare(
    plan: &ExecPlan,
    spares: &Spares,
    held: Vec<crate::backend::protect::Held>,
) -> Result<Prepared, Outcome> {
    let level = plan.isolation;
    let abi = landlock_abi();
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let mut tool = ToolHardening {
        ruleset_fd: -1,
        ruleset_layers: 0,
        userns_fd: -1,
        netns_fd: -1,
        pidns: false,
        seccomp: None,
        seccomp_layers: 0,
        drop_caps: root,
        drop_net_raw: false,
        strict: level == IsolationLevel::Strict,
        hardened: level != IsolationLevel::Off,
    };
    let base = Layer::NoNewPrivs.bit() | Layer::Subreaper.bit();
    if level == IsolationLevel::Off {
        tool.ruleset_fd = minimal_domain(abi);
        return Ok(Prepared {
            level,
            tool,
            wanted: base,
            parent_applied: Layer::Subreaper.bit(),
            tmp: None,
            mounts: None,
            waiting: std::sync::Mutex::new(None),
            _ruleset: None,
        });
    }
    let strict = level == IsolationLevel::Strict;
    let net_off = !plan.allow_network;
    let mut wanted = base
        | Layer::LandlockFs.bit()
        | Layer::LandlockScope.bit()
        | Layer::Seccomp.bit()
        | Layer::PrivateTmp.bit();
    if net_off {
        wanted |= Layer::LandlockNet.bit() | Layer::NetNamespace.bit() | Layer::SeccompNet.bit();
    }
    // Namespaces: as root directly; otherwise through toolhost's user
    // namespace, where the host allows unprivileged ones.
    let userns = if root {
        None
    } else {
        wanted |= Layer::UserNamespace.bit();
        match shared_userns() {
            Ok(fds) => Some(fds),
            Err(why) => {
                warn_once_userns(&why);
                None
            }
        }
    };
    if let Some((user, _)) = userns {
        tool.userns_fd = user;
    }
    tool.pidns = root || userns.is_some();
    wanted |= Layer::PidNamespace.bit();
    let mut parent_applied = Layer::Subreaper.bit();

    // The read files as the call finds them; the spare, if made with this
    // same look.
    let files = (abi >= 1).then(|| read_files(&plan.isolation_read_paths).0);
    let spare = files.as_ref().and_then(|f| spares.take(plan, abi, f));
    let (tmp, part, waiting) = match spare {
        Some(s) => (Ok(s.tmp), Some(s.ruleset), s.waiting),
        None => (PrivateTmp::create(), None, None),
    };
    let tmp = match tmp {
        Ok(t) => {
            parent_applied |= Layer::PrivateTmp.bit();
            Some(t)
        }
        Err(e) if strict => return Err(unavailable(Layer::PrivateTmp, &e.to_string())),
        Err(e) => {
            tracing::warn!("direct backend: no private tmp for this call: {e}");
            None
        }
    };

    // The call's mount namespace (the supervisor makes it and reports the
    // layers): for a root toolhost, a read-only view of the host but the
    // call's writable places (an unprivileged toolhost's tools have only
    // its user's power over host files); and the protected paths that
    // exist (none to hold is held).
    wanted |= Layer::ProtectedPaths.bit();
    // Needed for the view, or to keep places writable inside held
    // read-only dirs; else not looked at (no system calls).
    let places = if root || plan.mounts.iter().any(|m| m.read_only) {
        writable_places(plan, tmp.as_ref())
    } else {
        Ok(Vec::new())
    };
    let view = if root {
        match view_wanted(plan, &places) {
            Ok(view) => {
                if view {
                    wanted |= Layer::ReadonlyHost.bit();
                }
                view
            }
            Err(why) => {
                if strict {
                    return Err(refused_for_call(Layer::ReadonlyHost, &why));
                }
                wanted |= Layer::ReadonlyHost.bit();
                tracing::warn!(
                    "direct backend: no read-only view of the host for this call: {why}"
                );
                false
            }
        }
    } else {
        false
    };
    // Err: the paths to hold need more places kept writable than the
    // supervisor can hold (wanted, not applied: reported missing).
    let (mounts, unheld) =
        match super::mounts::MountPlan::prepare(plan, places.unwrap_or_default(), view, held) {
            Ok(m) => (m, false),
            Err(why) if strict => return Err(refused_for_call(Layer::ProtectedPaths, &why)),
            Err(why) => {
                tracing::warn!("direct backend: no mount namespace for this call: {why}");
                (None, true)
            }
        };
    if !unheld && mounts.as_ref().is_none_or(|m| !m.holds_paths()) {
        parent_applied |= Layer::ProtectedPaths.bit();
    } else if !unheld && !tool.pidns {
        // No namespaces at all here (neither root nor a user namespace).
        if strict {
            return Err(unavailable(
                Layer::ProtectedPaths,
                "holding the protected paths, and the read-only allowed dirs nested in writable ones, needs a mount namespace (root, or a user namespace)",
            ));
        }
        tracing::warn!(
            "direct backend: no mount namespace for this call: its protected paths, and its read-only allowed dirs nested in writable ones, are not held"
        );
    }
    let mounts = mounts.filter(|_| tool.pidns);

    let mut ruleset = None;
    // Whether the call's ruleset is the spare's (the one a supervisor made
    // ahead holds).
    let mut spare_ruleset = false;
    match abi {
        0 if strict => {
            return Err(unavailable(Layer::LandlockFs, "the kernel has no Landlock"));
        }
        1 | 2 if strict => {
            return Err(unavailable(
                Layer::LandlockFs,
                "Landlock ABI below 3 cannot confine truncation",
            ));
        }
        1.. => {
            // The spare's rules, else this call's own.
            let part = match (part, files) {
                (Some(part), _) => {
                    spare_ruleset = true;
                    Ok(part)
                }
                (None, Some(files)) => {
                    start_ruleset(&Grants::of(plan), tmp.as_ref().map(|t| &t.fd), abi, files)
                }
                // `files` is read whenever there is an ABI.
                (None, None) => Err(std::io::Error::other("the read paths were not read")),
            };
            match part.and_then(|p| finish_ruleset(p, abi)) {
                Ok((fd, layers)) => {
                    tool.ruleset_fd = fd.as_raw_fd();
                    tool.ruleset_layers = layers;
                    ruleset = Some(fd);
                }
                Err(e) if strict => return Err(unavailable(Layer::LandlockFs, &e.to_string())),
                Err(e) => {
                    tracing::warn!("direct backend: no Landlock rules for this call: {e}");
                    tool.ruleset_fd = minimal_domain(abi);
                    spare_ruleset = false;
                }
            }
        }
        _ => {}
    }

    match seccomp_filter(net_off) {
        Some(f) if seccomp_available() => {
            tool.seccomp = Some(f);
            tool.seccomp_layers =
                Layer::Seccomp.bit() | if net_off { Layer::SeccompNet.bit() } else { 0 };
        }
        _ if strict => {
            return Err(unavailable(
                Layer::Seccomp,
                "no seccomp filtering for this kernel or architecture",
            ));
        }
        _ => {}
    }

    if net_off {
        let netns = match userns {
            Some((_, net)) => Ok(net),
            None => shared_netns(),
        };
        match netns {
            Ok(fd) => tool.netns_fd = fd,
            Err(why) => {
                if tool.seccomp.is_none() && strict {
                    return Err(unavailable(Layer::NetNamespace, &why));
                }
            }
        }
        tool.drop_net_raw = true;
    }

    // The spare's supervisor, if it is what this call would start: the
    // same ruleset, the same namespaces, the same mounts (else dropped:
    // killed).
    let waiting = waiting.filter(|w| {
        spare_ruleset
            && tool.pidns
            && tool.userns_fd < 0
            && (tool.netns_fd >= 0) == (w.fds().1 >= 0)
            && mounts.as_ref().is_some_and(|m| w.usable(m))
    });
    Ok(Prepared {
        level,
        tool,
        wanted,
        parent_applied,
        tmp,
        mounts,
        waiting: std::sync::Mutex::new(waiting),
        _ruleset: ruleset,
    })
}

/// The places a call may write: its writable allowed dirs and its private
/// tmp, by path and by what they are now. `Err` if one cannot be named.
fn writable_places(
    plan: &ExecPlan,
    tmp: Option<&PrivateTmp>,
) -> Result<Vec<super::mounts::Writable>, String> {
    use std::os::fd::AsFd;
    let unnamed =
        |p: &std::path::Path| format!("the writable place {} cannot be named", p.display());
    let mut w = Vec::new();
    for (m, (path, dir)) in plan.mounts.iter().zip(plan.mount_dirs.iter()) {
        if !m.read_only {
            w.push(super::mounts::Writable::of(path, dir.as_fd()).ok_or_else(|| unnamed(path))?);
        }
    }
    if let Some(t) = tmp {
        // Its path as the mounts see it (TMPDIR may lead through a
        // symlink), when a read-only dir may be held around it: a place
        // kept writable in one is found, and ordered, by its path.
        let path = if plan.mounts.iter().any(|m| m.read_only) {
            use std::os::fd::AsRawFd;
            std::fs::read_link(format!("/proc/self/fd/{}", t.fd.as_raw_fd()))
                .unwrap_or_else(|_| t.path.clone())
        } else {
            t.path.clone()
        };
        w.push(super::mounts::Writable::of(&path, t.fd.as_fd()).ok_or_else(|| unnamed(&path))?);
    }
    Ok(w)
}

/// Whether a root toolhost's call gets the read-only view of the host:
/// not when `/` is a writable allowed dir (the call may write every host
/// file, its metadata with it: there is no read-only host to view); `Err`
/// when the view cannot keep the call's writable places.
fn view_wanted(
    plan: &ExecPlan,
    places: &Result<Vec<super::mounts::Writable>, String>,
) -> Result<bool, String> {
    if plan
        .mounts
        .iter()
        .any(|m| !m.read_only && m.path.parent().is_none())
    {
        return Ok(false);
    }
    let places = places.as_ref().map_err(String::clone)?;
    if places.len() > super::mounts::MAX_WRITABLE {
        return Err(format!(
            "{} writable places, more than the {} a read-only view of the host keeps",
            places.len(),
            super::mounts::MAX_WRITABLE
        ));
    }
    Ok(true)
}

/// Applies the layers in the tool process. Returns the applied layers, or
/// the errno and the layer that failed under `strict`.
///
/// # Safety
/// Only between clone and exec, in the tool process: raw system calls only
/// (`sys`).
pub(super) unsafe fn apply_in_tool(h: &ToolHardening) -> Result<u32, (c_int, Option<Layer>)> {
    // SAFETY: between clone and exec (see `# Safety`): setns, prctl,
    // landlock and seccomp system calls on the fds and the filter in `h`,
    // prepared before the spawn and alive until exec.
    unsafe {
        let mut applied = 0u32;
        if h.netns_fd >= 0 {
            match sys::setns(h.netns_fd, libc::CLONE_NEWNET) {
                Ok(_) => applied |= Layer::NetNamespace.bit(),
                Err(e) if h.strict && h.seccomp.is_none() => {
                    return Err((e, Some(Layer::NetNamespace)));
                }
                Err(_) => {}
            }
        }
        if h.drop_caps {
            // Dropped from the bounding set, they are gone from the tool
            // after exec.
            if h.hardened {
                for cap in DROPPED_CAPS {
                    let _ = sys::prctl(libc::PR_CAPBSET_DROP, cap as usize);
                }
                if h.drop_net_raw {
                    let _ = sys::prctl(libc::PR_CAPBSET_DROP, CAP_NET_RAW as usize);
                }
            } else {
                for cap in PROC_PEEK_CAPS {
                    let _ = sys::prctl(libc::PR_CAPBSET_DROP, cap as usize);
                }
            }
        }
        // No setuid/file-capability gains in the tool's tree (and the
        // precondition for an unprivileged Landlock domain and seccomp).
        if let Err(e) = sys::prctl(libc::PR_SET_NO_NEW_PRIVS, 1) {
            return Err((e, Some(Layer::NoNewPrivs)));
        }
        applied |= Layer::NoNewPrivs.bit();
        if h.ruleset_fd >= 0 {
            match sys::call(
                libc::SYS_landlock_restrict_self,
                [h.ruleset_fd as usize, 0, 0, 0, 0, 0],
            ) {
                Ok(_) => applied |= h.ruleset_layers,
                Err(e) if h.strict => return Err((e, Some(Layer::LandlockFs))),
                Err(_) => {}
            }
        }
        if let Some(filter) = h.seccomp {
            // The filter is shorter than BPF_MAXINSNS (4096 instructions;
            // `seccomp`'s tests check it), so its length fits the u16.
            let prog = libc::sock_fprog {
                len: filter.len() as u16,
                filter: filter.as_ptr().cast_mut(),
            };
            match sys::call(
                libc::SYS_seccomp,
                [
                    libc::SECCOMP_SET_MODE_FILTER as usize,
                    0,
                    &prog as *const libc::sock_fprog as usize,
                    0,
                    0,
                    0,
                ],
            ) {
                Ok(_) => applied |= h.seccomp_layers,
                Err(e) if h.strict => return Err((e, Some(Layer::Seccomp))),
                Err(_) => {}
            }
        }
        Ok(applied)
    }
}

/// The Landlock domain a tool gets even unhardened (the `off` level), or
/// when its ruleset could not be built: a process in a domain of its own
/// cannot ptrace or read /proc/<pid>/environ of processes outside it (and,
/// on ABI 6+, cannot signal them). Defence in depth (toolhost and the
/// supervisor are non-dumpable too), so a kernel refusing it does not stop
/// the call. The ruleset holds no path, so one per process serves every
/// call (each tool restricts itself to it); its fd, or -1.
fn minimal_domain(abi: u32) -> c_int {
    static MINIMAL: std::sync::OnceLock<Option<OwnedFd>> = std::sync::OnceLock::new();
    MINIMAL
        .get_or_init(|| {
            (abi != 0)
                .then(|| {
                    minimal_ruleset(abi)
                        .inspect_err(|e| {
                            tracing::debug!("direct backend: no minimal Landlock domain: {e}")
                        })
                        .ok()
                })
                .flatten()
        })
        .as_ref()
        .map_or(-1, |fd| fd.as_raw_fd())
}
