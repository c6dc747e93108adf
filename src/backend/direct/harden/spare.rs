//! The next call's private tmp and Landlock ruleset, made ahead of it.
//!
//! Making a call's private tmp (a `mkdir` in the host's tmp) and its
//! ruleset (one rule per allowed dir and read path) takes about a tenth of
//! a hardened call of `/bin/true`. A sandbox that has made a call before
//! has them made for its next call on the private tmps' reaper thread,
//! once this one's tool has started (while it runs), and keeps them in its
//! [`Spares`]. The next call takes
//! them only if they are what it would make itself:
//! - the plan's inputs to the ruleset are the same: the same sandbox
//!   handles (allowed dirs and read paths, compared by `Arc` identity), the
//!   same network setting, level and Landlock ABI, the same base of tmps
//!   (`std::env::temp_dir`);
//! - the look at the read files is the same one (`Arc` identity with the
//!   look the call finds current, see `landlock::SeenFiles`);
//! - the tmp is still exactly as made (`PrivateTmp::still_fresh`: the same
//!   directory at its path and by its fd, the same owner, group, mode and
//!   change time, empty).
//!
//! For a root toolhost the spare also holds the next call's supervisor,
//! started ahead and waiting in its namespaces with the call's read-only
//! view made (`linux::Waiting`, see [`super::waiting_for`]); the call takes
//! it only if its mounts are the ones the call makes now, and a spare whose
//! supervisor is still on its way is left for a later call.
//!
//! Rules on paths that are opened at every call (`/dev/null`, read files
//! that are symlinks or mounts) are added when the call takes the spare.
//! Anything else is made anew, on the call's path, as without a spare. A
//! sandbox's first call makes no spare (a CLI makes one call only), at most
//! one is made at a time, and none after `Sandbox::shutdown`. A spare that
//! does not hold is removed on the reaper thread (a tool may have filled
//! it), unless its path now leads to a directory toolhost did not make,
//! which is left alone. The tmps' names are random (128 bits), so that no
//! tool of another call can find a spare by its name.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::landlock::{Grants, PartRuleset, SeenFiles, read_files, start_ruleset};
use super::tmp::{PrivateTmp, run_on_reaper};
use crate::backend::direct::platform::Waiting;
use crate::isolation::IsolationLevel;
use crate::plan::ExecPlan;

/// What a ruleset is made from, besides the read files' look.
struct Key {
    grants: Grants,
    level: IsolationLevel,
    abi: u32,
    /// The plan of the call that had the spare made, where a supervisor
    /// is made ahead too (`super::waiting_for`).
    plan: Option<Box<ExecPlan>>,
}

impl Key {
    fn matches(&self, plan: &ExecPlan, abi: u32) -> bool {
        self.grants.same_as(plan) && self.level == plan.isolation && self.abi == abi
    }
}

/// A private tmp and the first part of a ruleset that grants it.
pub(super) struct Spare {
    key: Key,
    pub(super) tmp: PrivateTmp,
    pub(super) ruleset: PartRuleset,
    /// The next call's supervisor, waiting in its namespaces, where one
    /// could be made (dropped unused, it is killed).
    pub(super) waiting: Option<Waiting>,
}

/// A sandbox's spare, if one is made.
#[derive(Default)]
pub(in crate::backend::direct) struct Spares {
    slot: Mutex<Option<Spare>>,
    /// Calls that have reached their spawn, in this sandbox.
    calls: AtomicU64,
    /// Whether a spare is being made.
    making: AtomicBool,
    /// Set by [`close`](Spares::close): no spare is made any more.
    closed: AtomicBool,
}

/// Clears `making` when a fill ends, however it ends.
struct Making<'a>(&'a AtomicBool);

impl Drop for Making<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl std::fmt::Debug for Spares {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spares")
            .field("calls", &self.calls.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// Whether a call at this level and ABI gets a ruleset at all (else it has
/// no use for a spare).
fn has_ruleset(level: IsolationLevel, abi: u32) -> bool {
    match level {
        IsolationLevel::Off => false,
        IsolationLevel::Strict => abi >= 3,
        _ => abi >= 1,
    }
}

impl Spares {
    /// The spare, if it was made for this plan and still holds, given the
    /// look at the read files the call finds current (see the module). A
    /// spare that does not hold is removed.
    pub(super) fn take(&self, plan: &ExecPlan, abi: u32, files: &Arc<SeenFiles>) -> Option<Spare> {
        let spare = {
            let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
            // Its supervisor is being made (a call right after the one that
            // stocked it): left for a later call, not wasted.
            if slot
                .as_ref()
                .and_then(|s| s.waiting.as_ref())
                .is_some_and(Waiting::starting)
            {
                return None;
            }
            slot.take()?
        };
        if spare.key.matches(plan, abi)
            && Arc::ptr_eq(spare.ruleset.files(), files)
            && spare.tmp.path().parent() == Some(std::env::temp_dir().as_path())
            && spare.tmp.still_fresh()
        {
            Some(spare)
        } else {
            // Removed on the reaper: a tool may have filled it.
            spare.tmp.discard(false);
            None
        }
    }

    /// After a call's spawn: has the next call's spare made on the reaper
    /// thread, unless this is the sandbox's first call, or one is there or
    /// being made.
    pub(in crate::backend::direct) fn stock(self: &Arc<Self>, plan: &ExecPlan, abi: u32) {
        if !has_ruleset(plan.isolation, abi)
            || self.calls.fetch_add(1, Ordering::Relaxed) == 0
            || self.closed.load(Ordering::Acquire)
        {
            return;
        }
        let full = self
            .slot
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some();
        if full || self.making.swap(true, Ordering::Acquire) {
            return;
        }
        let key = Key {
            grants: Grants::of(plan),
            level: plan.isolation,
            abi,
            // Its grants and places only: not the call's argv, environment
            // or input, which the spare would keep until the next call.
            plan: super::supervisor_ahead().then(|| {
                Box::new(ExecPlan {
                    argv: Vec::new(),
                    env: Vec::new(),
                    stdin: None,
                    ..plan.clone()
                })
            }),
        };
        let spares = Arc::clone(self);
        let queued = run_on_reaper(Box::new(move || {
            spares.fill(key);
        }));
        if !queued {
            self.making.store(false, Ordering::Release);
        }
    }

    /// On the reaper: makes the spare and keeps it, unless the spares were
    /// closed meanwhile.
    fn fill(&self, key: Key) {
        let _making = Making(&self.making);
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        if let Some(spare) = make(key) {
            let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
            if slot.is_none() && !self.closed.load(Ordering::Acquire) {
                *slot = Some(spare);
            } else {
                drop(slot);
                spare.tmp.discard(true);
            }
        }
    }

    /// No more spares (`Sandbox::shutdown`): the one there is removed on
    /// the reaper, after what is queued there, so that a flush of the
    /// private tmps that follows waits for it, and for any spare being made
    /// (which then keeps nothing).
    pub(in crate::backend::direct) fn close(&self) {
        let spare = {
            let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
            self.closed.store(true, Ordering::Release);
            slot.take()
        };
        if let Some(spare) = spare {
            spare.tmp.discard(false);
        }
    }
}

impl Drop for Spares {
    /// The sandbox is gone (and no fill holds it): its spare is removed
    /// here and now, since the process may be about to exit.
    fn drop(&mut self) {
        let spare = self
            .slot
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(spare) = spare {
            spare.tmp.discard(true);
        }
    }
}

/// A spare for `key`, if the read files' look it would use is the kept one
/// (another would never be taken) and the tmp and rules can be made.
fn make(key: Key) -> Option<Spare> {
    let (files, kept) = read_files(&key.grants.read_paths);
    if !kept {
        return None;
    }
    let tmp = PrivateTmp::create().ok()?;
    match start_ruleset(&key.grants, Some(&tmp.fd), key.abi, files) {
        Ok(ruleset) => {
            let waiting = key
                .plan
                .as_deref()
                .and_then(|plan| super::waiting_for(plan, &tmp, &ruleset));
            Some(Spare {
                key,
                tmp,
                ruleset,
                waiting,
            })
        }
        Err(_) => {
            tmp.discard(true);
            None
        }
    }
}
