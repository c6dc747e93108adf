//! The native half of the `toolhost` Python package: `toolhost._native`.
//!
//! The package's Python half (`toolhost/__init__.py`) holds the seed's API;
//! this module holds a [`toolhost::Sandbox`] and starts its calls. Its parts:
//!
//! - [`runtime`]: the process's one tokio runtime, started at first use. A
//!   process forked after that gets a clear error, not a hang: the
//!   runtime's threads did not follow it.
//! - [`Channel`]: how results reach an asyncio event loop. A call runs as a
//!   task on the runtime, never on the loop's thread and without the GIL.
//!   Its task queues the result and writes a byte to a socket that the loop
//!   watches (`loop.add_reader`). The loop's callback, [`Channel::drain`],
//!   turns the queue into Python objects on the loop's own thread, where
//!   the GIL is held anyway. No runtime thread waits for the GIL.
//! - [`Call`]: a started call. [`Call::cancel`] drops its future, which
//!   stops its process tree, guest or container (as dropping
//!   `Sandbox::run` does in Rust); the channel then gets `None` for it.
//! - [`NativeSandbox`]: the sandbox, its agent tools ([`Toolbox`], made on
//!   first use), and the calls it starts.
//! - The config crosses as JSON: [`toolhost::SandboxConfig::from_json_str`]
//!   checks it, so a bad value fails here with the key that holds it
//!   ([`ConfigError`], a `ValueError`).
//! - Results cross as Python objects ([`run_tuple`], [`json_to_py`]),
//!   made on the caller's thread ([`Channel::drain`], [`Call::take`]).

#![deny(unsafe_code)]

use std::ffi::OsString;
use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use pyo3::exceptions::{PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};

use toolhost::{
    AllowedDirSpec, BackendChoice, PathError, RunOutput, RunRequest, Sandbox, SandboxConfig,
    SandboxError, Toolbox,
};

pyo3::create_exception!(
    toolhost,
    ConfigError,
    PyValueError,
    "A config value toolhost refuses; `key` names it (`timeout`, `docker.image`), or is None."
);
pyo3::create_exception!(
    toolhost,
    PathSafetyError,
    PyValueError,
    "A path that leads outside the sandbox's allowed dirs, or cannot be resolved."
);

/// The process's tokio runtime and the pid that started it.
static RUNTIME: OnceLock<Result<(u32, tokio::runtime::Runtime), String>> = OnceLock::new();

/// The runtime every call runs on, started at first use.
fn runtime() -> PyResult<&'static tokio::runtime::Runtime> {
    let started = RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .thread_name("toolhost")
            .enable_all()
            .build()
            .map(|rt| (std::process::id(), rt))
            .map_err(|e| format!("cannot start toolhost's runtime: {e}"))
    });
    match started {
        Ok((pid, rt)) if *pid == std::process::id() => Ok(rt),
        Ok(_) => Err(PyRuntimeError::new_err(
            "toolhost was used in this process's parent before it forked, and its threads \
             did not follow the fork: use toolhost only in the parent, or start child \
             processes with multiprocessing's 'spawn' or 'forkserver' method",
        )),
        Err(e) => Err(PyRuntimeError::new_err(e.clone())),
    }
}

/// What a finished call gives back.
enum Done {
    /// A program's or WASI command's run.
    Run(RunOutput),
    /// A result that crosses as JSON (tool results, tool lists).
    Json(serde_json::Value),
    /// Nothing (a shutdown).
    Unit,
    /// The call was cancelled: its future was dropped.
    Cancelled,
}

/// The results queued for one event loop, and the socket that tells it.
#[derive(Debug)]
struct ChannelInner {
    queue: Mutex<Vec<(u64, DoneBox)>>,
    /// Written by the runtime's threads, one byte per result.
    tx: UnixStream,
    /// Watched by the loop (`add_reader`), read empty by `drain`.
    rx: UnixStream,
}

/// [`Done`] with a `Debug` that says only its kind.
struct DoneBox(Done);

impl std::fmt::Debug for DoneBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.0 {
            Done::Run(_) => "Run",
            Done::Json(_) => "Json",
            Done::Unit => "Unit",
            Done::Cancelled => "Cancelled",
        })
    }
}

impl ChannelInner {
    /// Queues a result, then wakes the loop. Never blocks: a full socket
    /// buffer means a wake-up is pending already.
    fn post(&self, id: u64, done: Done) {
        match self.queue.lock() {
            Ok(mut q) => q.push((id, DoneBox(done))),
            Err(poisoned) => poisoned.into_inner().push((id, DoneBox(done))),
        }
        let _ = (&self.tx).write(&[1]);
    }
}

/// Where the calls started from one asyncio event loop report: see the
/// module doc. The Python half keeps one per loop.
#[pyclass(frozen, module = "toolhost._native")]
struct Channel {
    inner: Arc<ChannelInner>,
}

#[pymethods]
impl Channel {
    #[new]
    fn new() -> PyResult<Self> {
        let (tx, rx) = UnixStream::pair().map_err(os_error)?;
        tx.set_nonblocking(true).map_err(os_error)?;
        rx.set_nonblocking(true).map_err(os_error)?;
        Ok(Channel {
            inner: Arc::new(ChannelInner {
                queue: Mutex::new(Vec::new()),
                tx,
                rx,
            }),
        })
    }

    /// The descriptor the loop watches for readability.
    fn fileno(&self) -> i32 {
        use std::os::fd::AsRawFd;
        self.inner.rx.as_raw_fd()
    }

    /// The results that arrived, as `(call id, value)` pairs: a run as a
    /// tuple, a JSON result as Python objects, `None` for a cancelled call.
    fn drain<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        // Read the wake-ups first: a result queued after this read wakes
        // the loop again, so none is left behind.
        let mut buf = [0u8; 256];
        loop {
            match (&self.inner.rx).read(&mut buf) {
                Ok(0) => break,
                Ok(n) if n < buf.len() => break,
                Ok(_) => continue,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        let done = std::mem::take(&mut *match self.inner.queue.lock() {
            Ok(q) => q,
            Err(poisoned) => poisoned.into_inner(),
        });
        let out = PyList::empty(py);
        for (id, DoneBox(d)) in done {
            out.append((id, done_to_py(py, d)?))?;
        }
        Ok(out)
    }
}

/// A started call.
#[pyclass(frozen, module = "toolhost._native")]
struct Call {
    #[pyo3(get)]
    id: u64,
    cancel: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    /// The result, when the call ended in its first step ([`start`]); its
    /// channel then gets nothing for it.
    ready: Mutex<Option<Done>>,
}

#[pymethods]
impl Call {
    /// Stops the call: its future is dropped on the runtime, which kills
    /// its process tree, guest or container, and its channel then gets
    /// `None` for it. False when it had already ended or been cancelled
    /// (its result is then queued, or on its way).
    fn cancel(&self) -> bool {
        let tx = match self.cancel.lock() {
            Ok(mut c) => c.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        tx.is_some_and(|tx| tx.send(()).is_ok())
    }

    /// The result of a call that ended in its first step, once (as
    /// [`Channel::drain`] gives it); `NotImplemented`... no: a `LookupError`
    /// when it did not, and its result comes through the channel.
    fn take<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let done = match self.ready.lock() {
            Ok(mut r) => r.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        match done {
            Some(d) => done_to_py(py, d),
            None => Err(pyo3::exceptions::PyLookupError::new_err(
                "the call did not end in its first step: its result comes through its channel",
            )),
        }
    }

    /// Whether the call ended in its first step (see [`Call::take`]).
    #[getter]
    fn done(&self) -> bool {
        match self.ready.lock() {
            Ok(r) => r.is_some(),
            Err(poisoned) => poisoned.into_inner().is_some(),
        }
    }
}

/// The most stdin (or typed-tool input) a WASI call may have for its first
/// step to run on the caller's thread ([`start`]).
const INLINE_STDIN_MAX: usize = 64 * 1024;

/// Ids of calls, unique in the process.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Runs `call` on the runtime; its result goes to `channel`. A cancel (or
/// the [`Call`] dropped unanswered) drops the future instead.
///
/// With `first_step_here`, the call's first step (its first poll) runs on
/// this thread, without the GIL and inside the runtime, before it is handed
/// to the runtime: a call that ends there (a warm WASI call that touches no
/// file) costs no hand-off between threads. A WASI call's first step ends
/// at its first file operation (which moves it to a thread of its own) or
/// its first yield (an epoch tick, 10 ms), so the caller's thread is held
/// no longer than that. Not taken for `direct`, `docker` or `auto` calls,
/// whose first step starts processes or talks to an engine, nor for a
/// stdin of more than [`INLINE_STDIN_MAX`] bytes, copied in that step.
fn start<F>(py: Python<'_>, channel: &Channel, first_step_here: bool, call: F) -> PyResult<Call>
where
    F: std::future::Future<Output = Done> + Send + 'static,
{
    let rt = runtime()?;
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let mut call = Box::pin(call);
    if first_step_here {
        let first = py.detach(|| {
            let _enter = rt.enter();
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            call.as_mut().poll(&mut cx)
        });
        if let std::task::Poll::Ready(done) = first {
            return Ok(Call {
                id,
                cancel: Mutex::new(None),
                ready: Mutex::new(Some(done)),
            });
        }
    }
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let inner = channel.inner.clone();
    // The runtime's first poll of the task replaces the waker of the first
    // step: whatever the call waits on is looked at again then.
    rt.spawn(async move {
        let done = tokio::select! {
            biased;
            _ = rx => Done::Cancelled,
            done = call => done,
        };
        inner.post(id, done);
    });
    Ok(Call {
        id,
        cancel: Mutex::new(Some(tx)),
        ready: Mutex::new(None),
    })
}

/// A sandbox and its agent tools.
#[pyclass(frozen, module = "toolhost._native")]
struct NativeSandbox {
    sandbox: Arc<Sandbox>,
    /// The agent tools, made at their first use (typed tools describe
    /// themselves then), or why they cannot be.
    toolbox: Arc<tokio::sync::OnceCell<Result<Arc<Toolbox>, String>>>,
}

#[pymethods]
impl NativeSandbox {
    /// `dirs` are `(host path, read-only)` pairs, the first the workspace;
    /// `config_json` a config as `SandboxConfig::from_json_str` reads it;
    /// `config_file` the file it came from, if any (toolhost state that no
    /// writable dir may hold).
    #[new]
    #[pyo3(signature = (dirs, config_json, config_file=None))]
    fn new(
        py: Python<'_>,
        dirs: Vec<(PathBuf, bool)>,
        config_json: &str,
        config_file: Option<PathBuf>,
    ) -> PyResult<Self> {
        let mut config = parse_config(py, config_json)?;
        if let Some(file) = config_file {
            config.set_config_file(&file);
        }
        let rt = runtime()?;
        let specs: Vec<AllowedDirSpec> = dirs
            .into_iter()
            .map(|(path, ro)| {
                if ro {
                    AllowedDirSpec::read_only(path)
                } else {
                    AllowedDirSpec::read_write(path)
                }
            })
            .collect();
        let sandbox = py
            .detach(|| {
                let _enter = rt.enter();
                Sandbox::new(specs, config).inspect(|s| s.warm_up_in_background())
            })
            .map_err(|e| match e {
                SandboxError::Config(c) => config_error(py, c),
                other => PyValueError::new_err(other.to_string()),
            })?;
        Ok(NativeSandbox {
            sandbox: Arc::new(sandbox),
            toolbox: Arc::new(tokio::sync::OnceCell::new()),
        })
    }

    /// The config in effect, as JSON.
    fn config_json(&self) -> PyResult<String> {
        self.sandbox
            .config()
            .to_json()
            .map_err(|e| PyValueError::new_err(e.to_string()))
    }

    /// The allowed dirs as `(host path, read-only)`, the workspace first.
    fn allowed_dirs(&self) -> Vec<(OsString, bool)> {
        self.sandbox
            .allowed_dirs()
            .iter()
            .map(|d| (d.path().as_os_str().to_owned(), d.read_only()))
            .collect()
    }

    /// Whether `path` resolves inside an allowed dir.
    fn validate_file_path(&self, py: Python<'_>, path: PathBuf) -> bool {
        py.detach(|| self.sandbox.validate_file_path(&path))
    }

    /// `(host path, guest path, allowed dir, read-only)` of `user_path`
    /// resolved inside `base_dir` (or the workspace), or `PathSafetyError`.
    /// Missing last components resolve to where they would be created, each
    /// a plain name; a dangling symlink is refused.
    #[pyo3(signature = (user_path, base_dir=None))]
    fn resolve_path(
        &self,
        py: Python<'_>,
        user_path: PathBuf,
        base_dir: Option<PathBuf>,
    ) -> PyResult<(OsString, OsString, OsString, bool)> {
        py.detach(|| resolve(&self.sandbox, &user_path, base_dir.as_deref()))
            .map_err(|e| PathSafetyError::new_err(e.to_string()))
    }

    /// The environment a tool gets, as `(name, value)` pairs: the allowlist
    /// plus `extra_allow`, minus the deny list, `PATH` always set.
    #[pyo3(signature = (extra_allow=Vec::new()))]
    fn build_env(&self, extra_allow: Vec<String>) -> Vec<(OsString, OsString)> {
        self.sandbox.build_env(&extra_allow)
    }

    /// The registered WASI tools, as dicts (`name`, `description`, `path`,
    /// `builtin`, `component`).
    fn wasm_tools<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for t in self.sandbox.wasm_tools() {
            let d = PyDict::new(py);
            d.set_item("name", &t.name)?;
            d.set_item("description", &t.description)?;
            d.set_item("path", t.path.as_os_str())?;
            d.set_item("builtin", t.builtin)?;
            d.set_item("component", t.component)?;
            out.append(d)?;
        }
        Ok(out)
    }

    /// Starts a program (argv mode): its run (a tuple, see [`run_tuple`])
    /// goes to `channel`, or [`Call::take`] has it.
    #[pyo3(signature = (channel, argv, cwd=None, stdin=None, env=Vec::new(), backend=None))]
    #[allow(clippy::too_many_arguments)]
    fn start_run(
        &self,
        py: Python<'_>,
        channel: &Channel,
        argv: Vec<OsString>,
        cwd: Option<PathBuf>,
        stdin: Option<Vec<u8>>,
        env: Vec<(String, String)>,
        backend: Option<&str>,
    ) -> PyResult<Call> {
        let mut request = RunRequest::new(argv);
        request.cwd = cwd;
        request.stdin = stdin;
        request.env = env;
        if let Some(b) = backend {
            request.backend = Some(
                b.parse::<BackendChoice>()
                    .map_err(|e| PyValueError::new_err(e.to_string()))?,
            );
        }
        // The first step runs here for a WASI call (see `start`) whose stdin
        // is small: a large one is copied into the guest's stdin in that
        // step, which would hold the caller's thread.
        let here = request.backend.unwrap_or(self.sandbox.config().backend) == BackendChoice::Wasm
            && request
                .stdin
                .as_ref()
                .is_none_or(|b| b.len() <= INLINE_STDIN_MAX);
        let sandbox = self.sandbox.clone();
        start(py, channel, here, async move {
            Done::Run(sandbox.run(request).await)
        })
    }

    /// Starts a typed tool call with a JSON input: its output dict
    /// (`output`, `error` and the run's fields) goes to `channel`.
    #[pyo3(signature = (channel, name, input_json, cwd=None))]
    fn start_call_tool(
        &self,
        py: Python<'_>,
        channel: &Channel,
        name: String,
        input_json: &str,
        cwd: Option<PathBuf>,
    ) -> PyResult<Call> {
        // Parsed without the GIL; a large input skips the first step here,
        // as a large stdin does.
        let here = input_json.len() <= INLINE_STDIN_MAX;
        let input: serde_json::Value = py
            .detach(|| serde_json::from_str(input_json))
            .map_err(|e| PyValueError::new_err(format!("the tool's input is not JSON: {e}")))?;
        let sandbox = self.sandbox.clone();
        start(py, channel, here, async move {
            let out = sandbox.call_tool(&name, &input, cwd.as_deref()).await;
            Done::Json(serde_json::to_value(out).unwrap_or_else(json_failure))
        })
    }

    /// Starts the listing of the typed tools (each `{name, description,
    /// input_schema, path}`, or `{error}` for one that cannot be used).
    fn start_typed_tools(&self, py: Python<'_>, channel: &Channel) -> PyResult<Call> {
        let sandbox = self.sandbox.clone();
        start(py, channel, false, async move {
            let tools: Vec<serde_json::Value> = sandbox
                .typed_tools()
                .await
                .into_iter()
                .map(|t| match t {
                    Ok(t) => serde_json::to_value(t).unwrap_or_else(json_failure),
                    Err(o) => serde_json::json!({ "error": o.message, "kind": o.kind.as_str() }),
                })
                .collect();
            Done::Json(serde_json::Value::Array(tools))
        })
    }

    /// Starts an agent tool call (`shell`, `file_read`, ..., a WASI tool)
    /// with JSON arguments, under the config's policy, rate limit and audit
    /// log: the tool result dict goes to `channel`. A cancel stops the run
    /// and records the call as cancelled.
    fn start_tool_call(&self, channel: &Channel, name: String, args_json: &str) -> PyResult<Call> {
        // Arguments that are not JSON (a lone surrogate in a str) are a
        // refusal as data, as every other bad call is.
        let args: Result<serde_json::Value, String> = serde_json::from_str(args_json)
            .map_err(|e| format!("the arguments are not valid JSON: {e}"));
        let (sandbox, cell) = (self.sandbox.clone(), self.toolbox.clone());
        let rt = runtime()?;
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let inner = channel.inner.clone();
        rt.spawn(async move {
            let done = match (toolbox(&cell, sandbox).await, args) {
                (_, Err(e)) => Done::Json(serde_json::json!({
                    "text": e, "is_error": true, "status": "invalid_request"
                })),
                (Ok(tb), Ok(args)) => {
                    let stop = async {
                        let _ = rx.await;
                    };
                    let result = tb.call_or_stop(&name, &args, stop).await;
                    Done::Json(serde_json::to_value(result).unwrap_or_else(json_failure))
                }
                (Err(e), Ok(_)) => Done::Json(serde_json::json!({
                    "text": e, "is_error": true, "status": "unavailable"
                })),
            };
            inner.post(id, done);
        });
        Ok(Call {
            id,
            cancel: Mutex::new(Some(tx)),
            ready: Mutex::new(None),
        })
    }

    /// Starts the listing of the agent tools (`ToolSpec`s as dicts).
    fn start_tools(&self, py: Python<'_>, channel: &Channel) -> PyResult<Call> {
        let (sandbox, cell) = (self.sandbox.clone(), self.toolbox.clone());
        start(py, channel, false, async move {
            match toolbox(&cell, sandbox).await {
                Ok(tb) => Done::Json(serde_json::to_value(tb.tools()).unwrap_or_else(json_failure)),
                Err(e) => Done::Json(serde_json::json!({ "error": e })),
            }
        })
    }

    /// `(calls, denials)` of the agent tools so far.
    fn tool_counts(&self) -> (u64, u64) {
        match self.toolbox.get() {
            Some(Ok(tb)) => (tb.calls(), tb.denials()),
            _ => (0, 0),
        }
    }

    /// Starts the sandbox's shutdown: it waits for every background
    /// cleanup (private tmps, warm containers). `True` goes to `channel`.
    fn start_shutdown(&self, py: Python<'_>, channel: &Channel) -> PyResult<Call> {
        let sandbox = self.sandbox.clone();
        start(py, channel, false, async move {
            sandbox.shutdown().await;
            Done::Unit
        })
    }
}

/// The agent tools of `sandbox`, made once.
async fn toolbox(
    cell: &tokio::sync::OnceCell<Result<Arc<Toolbox>, String>>,
    sandbox: Arc<Sandbox>,
) -> Result<Arc<Toolbox>, String> {
    cell.get_or_init(|| async move {
        Toolbox::from_config(sandbox)
            .await
            .map(Arc::new)
            .map_err(|e| format!("the agent tools are unavailable: {e}"))
    })
    .await
    .clone()
}

/// A value that could not be written as JSON (none of toolhost's results
/// can fail so; kept as data rather than a panic).
fn json_failure(e: serde_json::Error) -> serde_json::Value {
    serde_json::json!({ "error": format!("cannot convert the result: {e}") })
}

/// [`Sandbox::resolve_path`] as `(host path, guest path, allowed dir,
/// read-only)`.
fn resolve(
    sandbox: &Sandbox,
    user_path: &Path,
    base_dir: Option<&Path>,
) -> Result<(OsString, OsString, OsString, bool), PathError> {
    let r = sandbox.resolve_path(user_path, base_dir)?;
    let dir = sandbox
        .allowed_dirs()
        .get(r.root_index())
        .map(|d| d.path().as_os_str().to_owned())
        .unwrap_or_default();
    Ok((
        r.host_path().as_os_str().to_owned(),
        r.guest_path().as_os_str().to_owned(),
        dir,
        r.read_only(),
    ))
}

/// Reads a config from JSON, or the `ConfigError` that names its key.
fn parse_config(py: Python<'_>, json: &str) -> PyResult<SandboxConfig> {
    SandboxConfig::from_json_str(json).map_err(|e| config_error(py, e))
}

/// A `ConfigError` exception with its `key` attribute set.
fn config_error(py: Python<'_>, e: toolhost::ConfigError) -> PyErr {
    let err = ConfigError::new_err(e.to_string());
    let _ = err.value(py).setattr("key", e.key);
    err
}

fn os_error(e: std::io::Error) -> PyErr {
    PyOSError::new_err(e.to_string())
}

/// A result as Python objects: a run as a tuple ([`run_tuple`]), a JSON result as Python
/// objects, `True` for a shutdown, `None` for a cancelled call.
fn done_to_py(py: Python<'_>, done: Done) -> PyResult<Bound<'_, PyAny>> {
    Ok(match done {
        Done::Run(run) => run_tuple(py, &run)?.into_any(),
        Done::Json(v) => json_to_py(py, &v)?,
        Done::Unit => true.into_pyobject(py)?.to_owned().into_any(),
        Done::Cancelled => py.None().into_bound(py),
    })
}

/// A run as a tuple in the order of the Python `RunResult`'s fields: the
/// seed's five (`stdout`, `stderr`, `returncode`, `timed_out`,
/// `truncated`), then how it ended (`kind`, `message`, `signal`,
/// `never_ran`), `backend`, `duration` in seconds and `isolation` (a dict
/// for `direct`, else `None`). A tuple, not a dict: it is made on every
/// call, and the Python side wraps it without copying (`RunResult._make`).
fn run_tuple<'py>(py: Python<'py>, run: &RunOutput) -> PyResult<Bound<'py, PyTuple>> {
    let isolation = match &run.isolation {
        Some(iso) => json_to_py(py, &serde_json::to_value(iso).unwrap_or_else(json_failure))?,
        None => py.None().into_bound(py),
    };
    (
        PyString::new(py, &run.stdout),
        PyString::new(py, &run.stderr),
        run.returncode,
        run.timed_out,
        run.truncated,
        run.outcome.kind.as_str(),
        run.outcome.message.as_str(),
        run.outcome.signal,
        run.outcome.kind.never_ran(),
        run.backend.as_str(),
        run.duration.as_secs_f64(),
        isolation,
    )
        .into_pyobject(py)
}

/// A JSON value as Python objects (dict, list, str, int, float, bool, None).
fn json_to_py<'py>(py: Python<'py>, v: &serde_json::Value) -> PyResult<Bound<'py, PyAny>> {
    use serde_json::Value;
    Ok(match v {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => b.into_pyobject(py)?.to_owned().into_any(),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => i.into_pyobject(py)?.into_any(),
            (None, Some(u)) => u.into_pyobject(py)?.into_any(),
            _ => n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any(),
        },
        Value::String(s) => PyString::new(py, s).into_any(),
        Value::Array(a) => {
            let l = PyList::empty(py);
            for item in a {
                l.append(json_to_py(py, item)?)?;
            }
            l.into_any()
        }
        Value::Object(o) => {
            let d = PyDict::new(py);
            for (k, item) in o {
                d.set_item(k, json_to_py(py, item)?)?;
            }
            d.into_any()
        }
    })
}

/// The default config as JSON (the Python `SandboxConfig`'s defaults).
#[pyfunction]
fn default_config_json() -> PyResult<String> {
    SandboxConfig::default()
        .to_json()
        .map_err(|e| PyValueError::new_err(e.to_string()))
}

/// Checks a config given as JSON: the same config back as JSON (every key),
/// or `ConfigError`.
#[pyfunction]
fn check_config_json(py: Python<'_>, json: &str) -> PyResult<String> {
    parse_config(py, json)?
        .to_json()
        .map_err(|e| PyValueError::new_err(e.to_string()))
}

/// Reads a TOML config file: the config as JSON, or `ConfigError`.
#[pyfunction]
fn config_file_json(py: Python<'_>, path: PathBuf) -> PyResult<String> {
    py.detach(|| SandboxConfig::from_file(&path))
        .map_err(|e| config_error(py, e))?
        .to_json()
        .map_err(|e| PyValueError::new_err(e.to_string()))
}

/// The top-level config keys, as the TOML file spells them.
#[pyfunction]
fn config_keys() -> Vec<String> {
    SandboxConfig::keys()
}

/// The benchmark's baseline: the same call as `start_run`, made `n` times
/// from Rust (`Runtime::block_on` of `Sandbox::run`, one call at a time, as
/// the Rust benches call), on this thread with the GIL released. Each
/// call's wall-clock seconds; an error if one did not succeed.
#[pyfunction]
#[pyo3(signature = (sandbox, argv, n, backend=None))]
fn bench_rust_calls(
    py: Python<'_>,
    sandbox: &NativeSandbox,
    argv: Vec<OsString>,
    n: usize,
    backend: Option<&str>,
) -> PyResult<Vec<f64>> {
    let rt = runtime()?;
    let mut request = RunRequest::new(argv);
    if let Some(b) = backend {
        request.backend = Some(
            b.parse::<BackendChoice>()
                .map_err(|e| PyValueError::new_err(e.to_string()))?,
        );
    }
    let sandbox = sandbox.sandbox.clone();
    py.detach(|| {
        let mut took = Vec::with_capacity(n);
        for _ in 0..n {
            let start = std::time::Instant::now();
            let out = rt.block_on(sandbox.run(request.clone()));
            took.push(start.elapsed().as_secs_f64());
            if !out.success() {
                return Err(format!("the call failed: {}", out.outcome.message));
            }
        }
        Ok(took)
    })
    .map_err(PyRuntimeError::new_err)
}

/// toolhost's version.
#[pyfunction]
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Channel>()?;
    m.add_class::<Call>()?;
    m.add_class::<NativeSandbox>()?;
    m.add("ConfigError", m.py().get_type::<ConfigError>())?;
    m.add("PathSafetyError", m.py().get_type::<PathSafetyError>())?;
    m.add_function(wrap_pyfunction!(default_config_json, m)?)?;
    m.add_function(wrap_pyfunction!(check_config_json, m)?)?;
    m.add_function(wrap_pyfunction!(config_file_json, m)?)?;
    m.add_function(wrap_pyfunction!(config_keys, m)?)?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    m.add_function(wrap_pyfunction!(bench_rust_calls, m)?)?;
    Ok(())
}
