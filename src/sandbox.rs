//! `Sandbox`: config, allowed dirs and environment, turned into an [`ExecPlan`].
//!
//! Invariant: `plan()` runs nothing. It validates the request (argv, cwd inside
//! the sandbox), builds the environment and fixes the limits; a backend then only
//! executes what the plan says. Every failure becomes a typed [`Outcome`].

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::backend::Backend;
use crate::backend::direct::DirectBackend;
use crate::backend::docker::DockerBackend;
use crate::backend::wasm::WasmBackend;
use crate::backend::wasm::registry::{Registry, ToolInfo};
use crate::config::BackendChoice;
use crate::config::{ConfigError, SandboxConfig};
use crate::env::{build_env_from, given_env_from, is_denied};
use crate::outcome::{Outcome, OutcomeKind, RunOutput};
use crate::paths::{
    AllowedDir, AllowedDirSpec, AllowedDirs, AllowedDirsError, PathError, ResolvedPath,
};
use crate::plan::BackendKind;
use crate::plan::{ExecPlan, Mount, ToolFile, ToolSource, WorkDir};
use crate::protected::ProtectedPaths;

/// Host variables that name places of the host's layout, which a wasm
/// guest does not see: not passed from the host to a guest, even when
/// allowlisted (a call may set them).
const HOST_LAYOUT_VARS: &[&str] = &[
    "PATH",
    "HOME",
    "TMPDIR",
    // Windows's own (compared without case there).
    #[cfg(windows)]
    "SystemRoot",
    #[cfg(windows)]
    "SystemDrive",
    #[cfg(windows)]
    "windir",
    #[cfg(windows)]
    "COMSPEC",
    #[cfg(windows)]
    "TEMP",
    #[cfg(windows)]
    "TMP",
];

/// One call: a program with its arguments, an optional working directory and
/// optional standard input.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunRequest {
    /// Program and arguments (argv mode; no shell is involved). `argv[0]` is a
    /// bare name looked up on the tool's `PATH`, or a path relative to the cwd.
    pub argv: Vec<OsString>,
    /// Working directory: absolute inside an allowed dir, or relative to the first
    /// allowed dir. Default: the first allowed dir.
    pub cwd: Option<PathBuf>,
    /// Bytes for standard input. `None` means empty input (EOF at once); the
    /// host's own stdin is never passed on.
    pub stdin: Option<Vec<u8>>,
    /// Variables set for this call only, on top of the allowlisted ones. The
    /// deny list still applies: a denied name here refuses the call.
    pub env: Vec<(String, String)>,
    /// The backend for this call, instead of the config's (the agent tools
    /// use it to run a registered WASI tool on wasm whatever the default).
    pub backend: Option<BackendChoice>,
}

impl RunRequest {
    /// A request to run `argv`.
    pub fn new<I, S>(argv: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        RunRequest {
            argv: argv.into_iter().map(Into::into).collect(),
            cwd: None,
            stdin: None,
            env: Vec::new(),
            backend: None,
        }
    }

    /// Runs this call on `backend` (a [`BackendKind`], or
    /// [`BackendChoice::Auto`]) instead of the configured one.
    pub fn backend(mut self, backend: impl Into<BackendChoice>) -> Self {
        self.backend = Some(backend.into());
        self
    }

    /// Sets a variable for this call.
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }

    /// Sets the working directory.
    pub fn cwd(mut self, cwd: impl Into<PathBuf>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }

    /// Sets standard input.
    pub fn stdin(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(bytes.into());
        self
    }
}

/// A typed tool (`toolhost:tool` world) as it describes itself.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TypedTool {
    /// Name to call it by.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON Schema of its input.
    pub input_schema: serde_json::Value,
    /// Its file.
    pub path: PathBuf,
}

/// The result of [`Sandbox::call_tool`].
#[derive(Debug, Clone, serde::Serialize)]
pub struct ToolCallOutput {
    /// The tool's JSON result, when it returned one.
    pub output: Option<serde_json::Value>,
    /// The tool's error message, or why there is no result (refused, timed
    /// out, a limit hit, a trap).
    pub error: Option<String>,
    /// What the tool printed (diagnostics), how the call ended, how long it took.
    #[serde(flatten)]
    pub run: RunOutput,
}

impl ToolCallOutput {
    /// Whether the tool returned a result.
    pub fn is_ok(&self) -> bool {
        self.output.is_some()
    }
}

/// Why a sandbox could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The config is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// An allowed dir could not be opened.
    #[error(transparent)]
    AllowedDirs(#[from] AllowedDirsError),
    /// A configured wasm tool dir could not be opened.
    #[error("{0}")]
    ToolDirs(String),
    /// A writable allowed dir contains (or lies inside) state toolhost
    /// itself loads, executes or trusts, or reach a protected path another
    /// way than through its dir (see [`crate::state_dirs`]).
    #[error("{0}")]
    StateExposed(String),
}

/// The sandbox: config, allowed dirs, environment and backends.
///
/// Cheap to share behind an `Arc`; `run` takes `&self` and calls may run
/// concurrently from many tasks.
#[derive(Debug)]
pub struct Sandbox {
    config: SandboxConfig,
    dirs: AllowedDirs,
    direct: DirectBackend,
    /// The host environment, read once when the sandbox was built.
    host_env: Vec<(OsString, OsString)>,
    /// `build_env(&[])`, computed once: every native call gets this environment.
    base_env: Vec<(OsString, OsString)>,
    /// The allowlisted host variables alone (no `PATH` seed), without the
    /// host's layout variables (`HOST_LAYOUT_VARS`): what a wasm guest gets.
    wasm_env: Vec<(OsString, OsString)>,
    registry: Registry,
    /// Created on first use: the engine costs a thread and some memory.
    /// A failure is not kept: the next wasm call tries again (an engine
    /// refused for want of address space may be made once others are let
    /// go).
    wasm: OnceLock<WasmBackend>,
    /// Created on first use; connects to the engine on its first call.
    docker: OnceLock<DockerBackend>,
    /// `config.isolation_read_paths`, shared by every plan.
    read_paths: Arc<[PathBuf]>,
    /// `config.protected_paths`, parsed.
    protected: ProtectedPaths,
    /// The allowed dirs as every plan holds them.
    mounts: Arc<[Mount]>,
    mount_dirs: Arc<[(PathBuf, Arc<cap_std::fs::Dir>)]>,
}

impl Sandbox {
    /// Builds a sandbox over `allowed_dirs` (the first is the default workspace).
    ///
    /// # Ambient Authority
    /// Opens the allowed dirs by host path, and reads the process environment
    /// (once: later changes to it are not seen). Both come from the operator,
    /// not from agents.
    pub fn new<I, D>(allowed_dirs: I, config: SandboxConfig) -> Result<Self, SandboxError>
    where
        I: IntoIterator<Item = D>,
        D: Into<AllowedDirSpec>,
    {
        config.validate()?;
        let dirs = AllowedDirs::open(allowed_dirs.into_iter().map(Into::into))?;
        crate::state_dirs::refuse_exposed_state(&dirs, &config)
            .map_err(SandboxError::StateExposed)?;
        // validate() parsed the same list.
        let protected = ProtectedPaths::parse(&config.protected_paths)
            .map_err(|m| ConfigError::key("protected_paths", m))?;
        // Its own look at the mounts, after the state's paths were walked
        // (a walk may trigger an automount).
        crate::state_dirs::refuse_aliased_protected(&dirs, &protected)
            .map_err(SandboxError::StateExposed)?;
        if config.protect_host_environ {
            protect_host_environ();
        }
        crate::backend::direct::log_guarantees_once();
        let host_env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
        let base_env = build_env_from(
            host_env.iter().map(|(k, v)| (k, v)),
            &config.env_allowlist,
            config.allow_network,
        );
        // The host's layout variables (PATH, HOME, TMPDIR: host paths a
        // guest does not have) pass to a guest only when set for the call,
        // as docker takes them from its image.
        let mut wasm_env = given_env_from(
            host_env.iter().map(|(k, v)| (k, v)),
            &config.env_allowlist,
            config.allow_network,
        );
        wasm_env.retain(|(k, _)| {
            !k.to_str()
                .is_some_and(|k| HOST_LAYOUT_VARS.iter().any(|v| crate::env::same_name(k, v)))
        });
        let registry =
            Registry::open(&config.wasm).map_err(|e| SandboxError::ToolDirs(e.to_string()))?;
        let mounts = dirs
            .as_slice()
            .iter()
            .map(|d| Mount {
                path: d.path().to_path_buf(),
                guest: d.guest_path().to_path_buf(),
                read_only: d.read_only(),
            })
            .collect();
        let mount_dirs = dirs
            .as_slice()
            .iter()
            .map(|d| (d.path().to_path_buf(), d.shared_dir()))
            .collect();
        Ok(Sandbox {
            protected,
            mounts,
            mount_dirs,
            read_paths: config.isolation_read_paths.clone().into(),
            config,
            dirs,
            direct: DirectBackend::new(),
            host_env,
            base_env,
            wasm_env,
            registry,
            wasm: OnceLock::new(),
            docker: OnceLock::new(),
        })
    }

    /// Starts, on a thread of its own, the work the first `direct` call of
    /// this process would otherwise do on its path (Linux; elsewhere, and
    /// when the configured backend is not `direct` or `auto`, nothing):
    /// the shared network or user namespace, the seccomp program, the
    /// Landlock probe. The caller binds that thread to its other CPUs
    /// (where it has any and a time-sharing policy, and unless the thread
    /// has started first), and it ends when its work is done; the reapers
    /// of the calls' processes and private tmps, which live as long as the
    /// process, are started afterwards from a plain thread of their own.
    /// Not the handles of `isolation_read_paths`: what a path leads to is
    /// looked at by the call. Each is made once per
    /// process, and a call that starts meanwhile waits for what it needs,
    /// so calling this changes no call's result, only when the work is
    /// done.
    pub fn warm_up_in_background(&self) {
        Self::warm_up_for(&self.config);
    }

    /// [`warm_up_in_background`](Self::warm_up_in_background) for the
    /// sandbox `config` would make, before it is made: what the warm-up
    /// makes depends only on the backend, the isolation level and the
    /// network setting. `toolhost run` calls it before [`Sandbox::new`],
    /// whose checks then run while the network namespace is made.
    pub fn warm_up_for(config: &SandboxConfig) {
        #[cfg(not(target_os = "linux"))]
        let _ = config;
        #[cfg(target_os = "linux")]
        if matches!(config.backend, BackendChoice::Direct | BackendChoice::Auto) {
            let net_off = !config.allow_network;
            let level = config.isolation;
            // Beside this thread, on another CPU (`sys::beside`): this one
            // is busy with what the warm-up runs beside.
            let (done, warmed) = std::sync::mpsc::channel::<()>();
            let started = crate::sys::beside::spawn_beside("toolhost-warm-up", move || {
                crate::backend::direct::warm_up(net_off, level);
                drop(done);
            });
            if let Err(e) = started {
                tracing::debug!("no warm-up thread: {e}");
            }
            // The threads that live as long as the process, started from a
            // plain thread, so that they run where this thread's threads
            // run; not on this thread's path, and once the warm-up is done
            // (the sweep of abandoned tmps they start would compete with
            // it). The channel closes when the warm-up ends, or was never
            // started. `shutdown` waits for the private tmps' reaper's
            // start (and the sweep it starts).
            if let Some(start) = crate::backend::direct::reapers_to_start(level) {
                let reapers = std::thread::Builder::new()
                    .name("toolhost-start".into())
                    .spawn(move || {
                        let _ = warmed.recv();
                        start.make(level);
                    });
                if let Err(e) = reapers {
                    tracing::debug!("no thread to start the reapers: {e}");
                }
            }
        }
    }

    /// The config.
    pub fn config(&self) -> &SandboxConfig {
        &self.config
    }

    /// The allowed dirs, canonicalized; the first is the default workspace.
    pub fn allowed_dirs(&self) -> &[AllowedDir] {
        self.dirs.as_slice()
    }

    /// The protected paths (`protected_paths`), parsed.
    pub fn protected_paths(&self) -> &ProtectedPaths {
        &self.protected
    }

    /// The allowed dirs as a set, for path resolution and access by handle.
    pub fn dirs(&self) -> &AllowedDirs {
        &self.dirs
    }

    /// Whether `path` resolves inside an allowed dir.
    pub fn validate_file_path(&self, path: impl AsRef<Path>) -> bool {
        self.dirs.resolve(path.as_ref(), None).is_ok()
    }

    /// Resolves `user_path` inside `base_dir` (which must be inside the sandbox)
    /// or the first allowed dir; any escape is an error.
    pub fn resolve_path(
        &self,
        user_path: impl AsRef<Path>,
        base_dir: Option<&Path>,
    ) -> Result<ResolvedPath, PathError> {
        self.dirs.resolve(user_path.as_ref(), base_dir)
    }

    /// The environment a tool gets: the allowlist from the config plus
    /// `extra_allow`, minus the deny list, with `PATH` always set.
    /// The host environment is the one the process had when the sandbox was built.
    pub fn build_env(&self, extra_allow: &[String]) -> Vec<(OsString, OsString)> {
        if extra_allow.is_empty() {
            return self.base_env.clone();
        }
        let mut allow = self.config.env_allowlist.clone();
        allow.extend(extra_allow.iter().cloned());
        build_env_from(
            self.host_env.iter().map(|(k, v)| (k, v)),
            &allow,
            self.config.allow_network,
        )
    }

    /// Turns a request into a plan, or the outcome that refuses it. Runs nothing.
    ///
    /// A plan may be run later and more than once, so it carries no stamp
    /// of its tool file: each run looks at the file again.
    pub fn plan(&self, request: &RunRequest) -> Result<ExecPlan, Outcome> {
        let mut plan = self.plan_now(request)?;
        if let Some(ToolFile {
            source: ToolSource::File { stamp, .. },
            ..
        }) = &mut plan.wasm
        {
            *stamp = None;
        }
        Ok(plan)
    }

    /// [`Sandbox::plan`] for a plan run at once: its tool file's stamp,
    /// taken while resolving it, keys the wasm engine's cache.
    fn plan_now(&self, request: &RunRequest) -> Result<ExecPlan, Outcome> {
        self.plan_argv(request, request.argv.clone())
    }

    /// [`Sandbox::plan_now`] with `argv` in place of the request's (which
    /// is not looked at): a caller that owns its request moves its argv in.
    fn plan_argv(&self, request: &RunRequest, argv: Vec<OsString>) -> Result<ExecPlan, Outcome> {
        let Some(program) = argv.first() else {
            return Err(Outcome::new(
                OutcomeKind::EmptyArgv,
                "empty argv: nothing to run",
            ));
        };
        if program.is_empty() {
            return Err(Outcome::new(OutcomeKind::EmptyArgv, "argv[0] is empty"));
        }
        if let Some(i) = argv.iter().position(|a| has_nul(a)) {
            return Err(Outcome::new(
                OutcomeKind::InvalidRequest,
                format!("argv[{i}] contains a NUL byte"),
            ));
        }
        let (cwd, cwd_at) = match self.plan_cwd(request.cwd.as_deref())? {
            Some((c, root, rel)) => (Some(c), Some((root, rel))),
            None => (None, None),
        };
        let kind = request.backend.unwrap_or(self.config.backend);
        let base = cwd_at.as_ref().map(|(root, rel)| (*root, rel.as_path()));
        let (backend, wasm) = self.choose_backend(kind, program, base)?;
        if backend == BackendKind::Direct {
            self.refuse_for_direct()?;
        }
        // A wasm guest gets exactly the variables it is given (`wasm_env`);
        // `PATH` is a native concern, set for `direct` and `docker` when not
        // given.
        let mut env = if backend == BackendKind::Wasm {
            self.wasm_env.clone()
        } else {
            self.build_env(&[])
        };
        for (k, v) in &request.env {
            if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
                return Err(Outcome::new(
                    OutcomeKind::InvalidRequest,
                    format!("invalid environment variable {k:?}"),
                ));
            }
            if is_denied(k, self.config.allow_network) {
                return Err(Outcome::new(
                    OutcomeKind::InvalidRequest,
                    format!("environment variable {k} is on the deny list"),
                ));
            }
            env.retain(|(name, _)| !name.to_str().is_some_and(|n| crate::env::same_name(n, k)));
            env.push((k.into(), v.into()));
        }
        Ok(ExecPlan {
            backend,
            wasm,
            argv,
            env,
            cwd,
            stdin: request.stdin.as_deref().map(Arc::from),
            limits: self.config.limits(),
            allow_network: self.config.allow_network,
            isolation: self.config.isolation,
            isolation_read_paths: Arc::clone(&self.read_paths),
            protected: self.protected.clone(),
            mounts: Arc::clone(&self.mounts),
            mount_dirs: Arc::clone(&self.mount_dirs),
        })
    }

    /// The working directory a request asks for (default: the first allowed
    /// dir), by the path tools see, with its allowed dir (by index) and its
    /// path below it; `None` when there is no allowed dir and none was asked
    /// for.
    #[allow(clippy::type_complexity)]
    fn plan_cwd(&self, asked: Option<&Path>) -> Result<Option<(WorkDir, usize, PathBuf)>, Outcome> {
        // An allowed dir itself is entered by its own handle, shared (the
        // wasm backend then shares its preopen too).
        let Some(asked) = asked else {
            let Some(root) = self.dirs.as_slice().first() else {
                return Ok(None);
            };
            let cwd = WorkDir {
                path: root.path().to_path_buf(),
                guest: root.guest_path().to_path_buf(),
                dir: root.shared_dir(),
            };
            return Ok(Some((cwd, 0, PathBuf::new())));
        };
        let shown = asked.to_string_lossy();
        let resolved = self
            .dirs
            .resolve(asked, None)
            .map_err(|e| cwd_refusal(&e.to_string()))?;
        let at = (resolved.root_index(), resolved.relative().to_path_buf());
        if resolved.relative().as_os_str().is_empty() {
            let root = &self.dirs.as_slice()[resolved.root_index()];
            let cwd = WorkDir {
                path: resolved.host_path().to_path_buf(),
                guest: resolved.guest_path().to_path_buf(),
                dir: root.shared_dir(),
            };
            return Ok(Some((cwd, at.0, at.1)));
        }
        let dir = self.dirs.open_dir(&resolved).map_err(|e| {
            let reason = match e.raw_os_error() {
                Some(_) => os_reason(&e),
                None => "outside the sandbox".to_string(),
            };
            cwd_refusal(&format!("{shown:?}: {reason}"))
        })?;
        let cwd = WorkDir {
            path: resolved.host_path().to_path_buf(),
            guest: resolved.guest_path().to_path_buf(),
            dir: Arc::new(dir),
        };
        Ok(Some((cwd, at.0, at.1)))
    }

    /// Why a `direct` call cannot run in this sandbox, if it cannot: it runs
    /// native programs at host paths, in a cwd. The message names only the
    /// path tools see.
    fn refuse_for_direct(&self) -> Result<(), Outcome> {
        if self.dirs.is_empty() {
            return Err(Outcome::new(
                OutcomeKind::InvalidRequest,
                "the direct backend needs an allowed dir for its working directory, and this sandbox has none (run on wasm or docker, or allow a dir)",
            ));
        }
        if let Some(d) = self.dirs.as_slice().iter().find(|d| d.is_mapped()) {
            return Err(Outcome::new(
                OutcomeKind::InvalidRequest,
                format!(
                    "allowed dir {} is given a guest path: the direct backend runs native programs at host paths and cannot present a dir elsewhere (run on wasm or docker, or allow the dir without `::GUEST`)",
                    d.guest_path().display()
                ),
            ));
        }
        Ok(())
    }

    /// The WASI tool `program` names: a registered tool, or a `.wasm` file (or any
    /// path with a slash) inside the sandbox, relative to the cwd.
    fn wasm_target(
        &self,
        program: &std::ffi::OsStr,
        cwd: Option<(usize, &Path)>,
    ) -> Result<Option<ToolFile>, Outcome> {
        let shown = program.to_string_lossy();
        let is_path = shown.contains('/') || shown.ends_with(".wasm");
        if !is_path {
            return Ok(self.registry.find(&shown));
        }
        let (resolved, stamp) = self
            .dirs
            .resolve_file(Path::new(program), cwd)
            .map_err(|e| Outcome::new(OutcomeKind::NotFound, e.to_string()))?;
        let name = resolved
            .host_path()
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| shown.to_string());
        let (root, rel, host_path) = resolved.into_parts();
        Ok(Some(ToolFile {
            name,
            source: ToolSource::File {
                dir: self.dirs.as_slice()[root].shared_dir(),
                rel,
                stamp,
            },
            host_path,
        }))
    }

    fn choose_backend(
        &self,
        choice: BackendChoice,
        program: &std::ffi::OsStr,
        cwd: Option<(usize, &Path)>,
    ) -> Result<(BackendKind, Option<ToolFile>), Outcome> {
        match choice {
            BackendChoice::Direct => Ok((BackendKind::Direct, None)),
            BackendChoice::Wasm => match self.wasm_target(program, cwd)? {
                Some(t) => Ok((BackendKind::Wasm, Some(t))),
                None => Err(Outcome::new(
                    OutcomeKind::NotFound,
                    format!(
                        "{}: no WASI tool of that name (`toolhost tools` lists them)",
                        program.to_string_lossy()
                    ),
                )),
            },
            BackendChoice::Auto => {
                let text = program.to_string_lossy();
                let is_wasm_path = text.ends_with(".wasm");
                let is_path = text.contains('/') || (cfg!(windows) && text.contains('\\'));
                let target = if is_wasm_path || !is_path {
                    self.wasm_target(program, cwd)?
                } else {
                    None
                };
                match target {
                    Some(t) => {
                        tracing::debug!(tool = %t.name, "auto backend: wasm");
                        Ok((BackendKind::Wasm, Some(t)))
                    }
                    None if cfg!(any(unix, windows)) => {
                        tracing::debug!(program = %program.to_string_lossy(), "auto backend: direct (no WASI tool of that name)");
                        Ok((BackendKind::Direct, None))
                    }
                    None => Err(Outcome::new(
                        OutcomeKind::NotFound,
                        format!(
                            "{}: no WASI tool of that name, and the auto backend falls back to direct only on POSIX systems and Windows",
                            program.to_string_lossy()
                        ),
                    )),
                }
            }
            BackendChoice::Docker => Ok((BackendKind::Docker, None)),
        }
    }

    /// Releases what the sandbox keeps between calls and waits for every
    /// cleanup still running in the background; call it before the process
    /// exits (the CLI does, after each call and when the MCP session ends).
    /// In order:
    /// - the docker backend's warm container is removed;
    /// - the containers of cancelled or timed-out docker calls, removed in
    ///   the background, are waited for (of every sandbox in the process);
    /// - the private tmps of finished `direct` calls are removed, and the
    ///   sweep of abandoned ones has ended, after the start of their
    ///   reaper that a warm-up (`warm_up_for`) asked for (up to 10 s in all
    ///   for the tmps, on a tokio timer; none is used when the process has
    ///   no such reaper, start or sweep, whichever sandbox made them);
    /// - what cancelled `direct` and `docker` calls made at protected paths
    ///   that did not exist is moved aside (after the containers are gone,
    ///   so none can still write there);
    /// - the wasm backend's background self-test (the FIFO watchdog's, a
    ///   few ms) is waited for, so that it leaves no temp dir behind.
    ///
    /// Dropping the sandbox inside a tokio runtime releases the warm
    /// container too, in the background, but waits for nothing. After
    /// `shutdown` the sandbox still works; calls made later need another
    /// `shutdown`.
    pub async fn shutdown(&self) {
        // Each backend's own: the docker backend's even if this sandbox made
        // no docker call (it connects to nothing for it), since removals
        // are waited for process-wide.
        Backend::shutdown(self.docker_backend()).await;
        Backend::shutdown(&self.direct).await;
        match self.wasm.get() {
            Some(wasm) => Backend::shutdown(wasm).await,
            // The FIFO watchdog's self-test is the process's: a wasm call of
            // another sandbox may have started it.
            _ => crate::backend::wasm::settle_background_checks_async().await,
        }
    }

    /// The direct backend.
    pub fn direct_backend(&self) -> &DirectBackend {
        &self.direct
    }

    /// The docker backend, created on first use (it contacts the engine on
    /// its first call, not here).
    pub fn docker_backend(&self) -> &DockerBackend {
        self.docker
            .get_or_init(|| DockerBackend::new(&self.config.docker))
    }

    /// The WASI tools this sandbox can run by name.
    pub fn wasm_tools(&self) -> Vec<ToolInfo> {
        self.registry.list()
    }

    /// The typed tools (components of the `toolhost:tool` world) among the
    /// registered WASI tools, each as it describes itself, or why it cannot be
    /// used. Each tool's `describe` runs once per tool file, with no dirs.
    pub async fn typed_tools(&self) -> Vec<Result<TypedTool, Outcome>> {
        let backend = match self.wasm_backend() {
            Ok(b) => b,
            Err(e) => return vec![Err(Outcome::new(OutcomeKind::BackendUnavailable, e))],
        };
        let limits = self.config.limits();
        let mut out = Vec::new();
        for info in self.registry.list().into_iter().filter(|t| t.component) {
            let Some(file) = self.registry.find(&info.name) else {
                continue;
            };
            match backend.describe(&file, &limits).await {
                Ok(Some(d)) => out.push(Ok(TypedTool {
                    name: d.name,
                    description: d.description,
                    input_schema: d.input_schema,
                    path: info.path,
                })),
                Ok(None) => {}
                Err(o) => out.push(Err(o)),
            }
        }
        out
    }

    /// Calls a typed tool (the `toolhost:tool` world) by name, or by the path
    /// of its `.wasm` file inside the sandbox, with a JSON input. It runs on the
    /// wasm backend whatever the configured backend, with this sandbox's dirs,
    /// environment and limits; `cwd` as in [`RunRequest::cwd`] (default: the
    /// first allowed dir). Never panics: refusals, limits and the tool's own
    /// errors are in the result.
    pub async fn call_tool(
        &self,
        name: &str,
        input: &serde_json::Value,
        cwd: Option<&Path>,
    ) -> ToolCallOutput {
        let start = Instant::now();
        let refused = |o: Outcome| ToolCallOutput {
            output: None,
            error: Some(o.message.clone()),
            run: RunOutput::refused(BackendKind::Wasm, o, start.elapsed()),
        };
        let backend = match self.wasm_backend() {
            Ok(b) => b,
            Err(e) => return refused(Outcome::new(OutcomeKind::BackendUnavailable, e)),
        };
        let mut request = RunRequest::new([name]);
        request.cwd = cwd.map(Path::to_path_buf);
        // Planned for wasm whatever the configured backend, with its
        // environment: the plan carries the tool.
        request.backend = Some(BackendChoice::Wasm);
        let is_path = name.contains('/') || name.ends_with(".wasm");
        let plan = match self.plan_now(&request) {
            Ok(p) => p,
            Err(o) if o.kind == OutcomeKind::NotFound && !is_path => {
                return refused(Outcome::new(
                    OutcomeKind::NotFound,
                    format!("{name}: no typed tool of that name (`toolhost tools` lists them)"),
                ));
            }
            Err(o) => return refused(o),
        };
        let call = backend.call_typed(&plan, &input.to_string()).await;
        let mut run = call.run;
        let cap = plan.limits.stdout_cap;
        let (output, error) = match call.result {
            // The output budget holds for results as for a command's stdout.
            Some(Ok(text)) if text.len() > cap => {
                run.truncated = true;
                (
                    None,
                    Some(format!(
                        "the tool's result ({} bytes) is larger than the output cap ({cap} bytes)",
                        text.len()
                    )),
                )
            }
            Some(Ok(text)) => match serde_json::from_str(&text) {
                Ok(v) => (Some(v), None),
                Err(e) => (None, Some(format!("the tool returned invalid JSON: {e}"))),
            },
            Some(Err(mut message)) => {
                if message.len() > cap {
                    let mut end = cap;
                    while !message.is_char_boundary(end) {
                        end -= 1;
                    }
                    message.truncate(end);
                    run.truncated = true;
                }
                (None, Some(message))
            }
            None => (None, Some(run.outcome.message.clone())),
        };
        if error.is_some() && run.outcome.kind == OutcomeKind::Exited && run.returncode == Some(0) {
            run.returncode = Some(1);
            run.outcome = Outcome::new(OutcomeKind::Exited, "the tool returned an error");
        }
        ToolCallOutput { output, error, run }
    }

    /// The wasm backend, created on first use. A failure to create it is
    /// returned, not kept: each use tries again until one succeeds. Two
    /// first uses at once may both create one (the engine itself is shared,
    /// `WasmEngine::shared`); the first kept is the one every use gets.
    pub fn wasm_backend(&self) -> Result<&WasmBackend, String> {
        if let Some(w) = self.wasm.get() {
            return Ok(w);
        }
        let made = WasmBackend::new(&self.config.wasm).map_err(|e| format!("wasm engine: {e}"))?;
        Ok(self.wasm.get_or_init(|| made))
    }

    /// Runs a request (the seed's `run_subprocess`). Never panics and never
    /// returns an error: refusals and failures are outcomes.
    pub async fn run(&self, mut request: RunRequest) -> RunOutput {
        let start = Instant::now();
        let argv = std::mem::take(&mut request.argv);
        match self.plan_argv(&request, argv) {
            Ok(plan) => self.run_plan(&plan).await,
            Err(outcome) => {
                let backend = self.config.backend.fixed().unwrap_or(BackendKind::Direct);
                RunOutput::refused(backend, outcome, start.elapsed())
            }
        }
    }

    /// Runs a plan made by [`Sandbox::plan`] on the backend it names.
    ///
    /// Each backend's future is boxed: held inline, the largest of them
    /// (kilobytes) would be this future's size, copied by every caller that
    /// moves it (measured: most of the copying of a warm wasm call).
    pub async fn run_plan(&self, plan: &ExecPlan) -> RunOutput {
        match plan.backend {
            // Each holds the protected paths that exist and moves aside,
            // after the call, what was made where one did not
            // (`backend::protect`).
            BackendKind::Direct => Box::pin(self.direct.run(plan)).await,
            BackendKind::Docker => Box::pin(Backend::run(self.docker_backend(), plan)).await,
            BackendKind::Wasm => match self.wasm_backend() {
                Ok(w) => Box::pin(Backend::run(w, plan)).await,
                Err(e) => RunOutput::refused(
                    BackendKind::Wasm,
                    Outcome::new(OutcomeKind::BackendUnavailable, e),
                    Duration::ZERO,
                ),
            },
        }
    }
}

/// The OS reason of an error, without any path.
fn os_reason(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(c) => std::io::Error::from_raw_os_error(c).to_string(),
        None => e.kind().to_string(),
    }
}

fn cwd_refusal(reason: &str) -> Outcome {
    Outcome::new(OutcomeKind::CwdOutside, format!("cwd refused: {reason}"))
}

#[cfg(unix)]
fn has_nul(s: &std::ffi::OsStr) -> bool {
    use std::os::unix::ffi::OsStrExt;
    s.as_bytes().contains(&0)
}

#[cfg(not(unix))]
fn has_nul(s: &std::ffi::OsStr) -> bool {
    s.to_string_lossy().contains('\0')
}

/// Makes this process non-dumpable, so that tools running as the same user cannot
/// read `/proc/<toolhost>/environ` and find host secrets there. Idempotent.
fn protect_host_environ() {
    #[cfg(target_os = "linux")]
    let _ = rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable);
}
