//! Removal of containers in every case: now, or in the background when a
//! call's future is dropped (`flush_removals` waits for those); the
//! guards that make sure of it.

use bollard::Docker;
use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{CreateContainerOptions, RemoveContainerOptions};

use super::engine::{engine_error, status};
use super::finish::create_refusal;
use super::gate::Pass;
use super::warm;
use crate::outcome::Outcome;
use crate::plan::ExecPlan;

pub(super) async fn remove(docker: &Docker, id: &str) {
    let opts = RemoveContainerOptions {
        force: true,
        v: true,
        ..Default::default()
    };
    if let Err(e) = docker.remove_container(id, Some(opts)).await
        && status(&e) != Some(404)
    {
        tracing::warn!("cannot remove container {id}: {}", engine_error(&e));
    }
}

/// Removals spawned by dropped calls, so that a process about to exit can
/// wait for them ([`flush_removals`]).
pub(super) static PENDING: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>> =
    std::sync::Mutex::new(Vec::new());

/// Waits for the container removals that dropped calls have spawned. A
/// process that stops its calls before exiting (on a signal, say) calls this
/// so that their containers are gone when it exits.
pub async fn flush_removals() {
    loop {
        let pending: Vec<_> = {
            let mut p = PENDING.lock().unwrap_or_else(|e| e.into_inner());
            p.drain(..).collect()
        };
        if pending.is_empty() {
            return;
        }
        for h in pending {
            let _ = h.await;
        }
    }
}

/// Removes container `id` in the background, and only then lets go of its
/// pass through the gate (`gate.rs`).
pub(super) fn spawn_removal(docker: Docker, id: String, pass: Option<Pass>) {
    match tokio::runtime::Handle::try_current() {
        Ok(h) => {
            let task = h.spawn(async move {
                remove(&docker, &id).await;
                drop(pass);
            });
            let mut p = PENDING.lock().unwrap_or_else(|e| e.into_inner());
            p.retain(|t| !t.is_finished());
            p.push(task);
        }
        Err(_) => tracing::warn!(
            "container {id} left running: no async runtime to remove it (it is removed at the next start)"
        ),
    }
}

/// The locked warm slot of a call in progress. Unless the call ends cleanly
/// (`keep`), its container is removed: now by `release`, or in the
/// background if the call's future is dropped.
pub(super) struct WarmSlot<'a> {
    pub(super) slot: tokio::sync::MutexGuard<'a, Option<warm::WarmContainer>>,
    pub(super) docker: Docker,
    pub(super) keep: bool,
}

impl WarmSlot<'_> {
    pub(super) async fn release(&mut self) {
        if !self.keep
            && let Some(w) = self.slot.take()
        {
            remove_warm(&self.docker, w).await;
        }
        self.keep = true;
    }
}

/// Removes a warm container, letting go of its pass through the gate only
/// once it is gone: also when the caller is dropped while waiting (the
/// removal then goes on in the background, [`Removal`]).
pub(super) async fn remove_warm(docker: &Docker, mut w: warm::WarmContainer) {
    let mut guard = Removal::new(docker.clone(), w.id.clone());
    guard.pass = w.pass.take();
    guard.remove_now().await;
}

impl Drop for WarmSlot<'_> {
    fn drop(&mut self) {
        if !self.keep
            && let Some(w) = self.slot.take()
        {
            spawn_removal(self.docker.clone(), w.id, w.pass);
        }
    }
}

/// Creates a container named `name`, removed whatever happens from here on:
/// by name until the engine has given its id (a dropped create leaves none),
/// then by id through the returned guard. A container made under another
/// runtime than its body names is removed and refused (`podman`: the
/// engine's address, when it is Podman).
pub(super) async fn create_guarded(
    docker: &Docker,
    name: String,
    body: ContainerCreateBody,
    (image, plan): (&str, &ExecPlan),
    pass: Option<Pass>,
    podman: Option<&str>,
) -> Result<(Removal, String), Outcome> {
    let opts = CreateContainerOptions {
        name: Some(name.clone()),
        ..Default::default()
    };
    let wanted = body.host_config.as_ref().and_then(|h| h.runtime.clone());
    let mut guard = Removal::new(docker.clone(), name);
    guard.pass = pass;
    match docker.create_container(Some(opts), body).await {
        Ok(c) => {
            guard.id = Some(c.id.clone());
            if let Some(wanted) = wanted
                && let Err(o) = super::runtime::verify(docker, &c.id, &wanted, podman).await
            {
                guard.remove_now().await;
                return Err(o);
            }
            Ok((guard, c.id))
        }
        Err(e) => {
            guard.remove_now().await;
            Err(create_refusal(&e, image, plan))
        }
    }
}

/// Removes the container when dropped, unless already removed, and holds
/// its pass through the gate until then.
pub(super) struct Removal {
    pub(super) docker: Docker,
    pub(super) id: Option<String>,
    pub(super) pass: Option<Pass>,
}

impl Removal {
    pub(super) fn new(docker: Docker, id: String) -> Self {
        Removal {
            docker,
            id: Some(id),
            pass: None,
        }
    }

    /// Removes the container now; if this is dropped while it waits for
    /// the engine, the removal goes on in the background, still holding the
    /// pass.
    pub(super) async fn remove_now(&mut self) {
        if let Some(id) = self.id.clone() {
            remove(&self.docker, &id).await;
            self.id = None;
        }
        self.pass = None;
    }

    /// The engine has started the container: an exclusive pass turns shared.
    pub(super) fn started(&mut self) {
        self.pass = self.pass.take().map(Pass::share);
    }

    /// Hands the container (and its pass) to the caller.
    pub(super) fn disarm(&mut self) -> Option<Pass> {
        self.id = None;
        self.pass.take()
    }
}

impl Drop for Removal {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            spawn_removal(self.docker.clone(), id, self.pass.take());
        }
    }
}
