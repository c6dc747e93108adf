"""toolhost for Python: the security boundary between an agent loop and the host.

A drop-in for the seed module ``autonoma.executor.sandbox``: the same names,
fields and defaults, on asyncio::

    from toolhost import Sandbox, SandboxConfig

    sandbox = Sandbox(["/srv/workspace"], SandboxConfig(timeout=5))
    result = await sandbox.run_subprocess(["ls", "-l"])

Each call runs on toolhost's own threads (Rust, tokio), never on the event
loop's thread and without the GIL; its result reaches the loop through a
socket the loop watches. Cancelling the awaiting task stops the call: the
cancellation goes on once the kill of its whole process tree (guest,
container) has been sent.

The parts of this file:

- ``SandboxConfig``: the config as a dataclass, defaults read from toolhost
  itself; every value is checked by toolhost (``ConfigError``, a
  ``ValueError`` that names the key).
- ``SubprocessResult``, ``RunResult``, ``ResolvedPath``: what calls return.
- The event-loop plumbing (``_LoopChannel``, ``_await_call``).
- ``Sandbox``: the seed's methods, then ``run``, ``call_tool`` and friends.
- ``Toolbox``: the agent tools (shell, file tools, WASI tools) with policy,
  rate limit and audit log.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import os
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import (
    Any,
    Callable,
    Dict,
    List,
    Mapping,
    NamedTuple,
    Optional,
    Sequence,
    Union,
)

from . import _native
from ._native import ConfigError, PathSafetyError

__all__ = [
    "ConfigError",
    "PathSafetyError",
    "ResolvedPath",
    "RunResult",
    "Sandbox",
    "SandboxConfig",
    "SubprocessResult",
    "ToolError",
    "Toolbox",
    "ToolResult",
    "__version__",
]

__version__: str = _native.version()

PathLike = Union[str, "os.PathLike[str]"]

# The defaults, as toolhost itself has them (one place writes them: the Rust
# `SandboxConfig::default`). Platform-dependent ones (isolation, the
# environment allowlist on Windows) are this platform's.
_DEFAULTS: Dict[str, Any] = json.loads(_native.default_config_json())


def _default(key: str) -> Any:
    value = _DEFAULTS.get(key)
    if isinstance(value, (list, dict)):
        return field(default_factory=lambda: json.loads(json.dumps(value)))
    return field(default=value)


@dataclass
class SandboxConfig:
    """Limits and policy for one sandbox: the seed's fields and defaults, and
    toolhost's own settings. Every field is a key of the TOML config file
    (``docs/src/config.md``), with the same meaning.

    Values are checked when the config is made (and again when a ``Sandbox``
    is built from it): a bad one raises ``ConfigError``, a ``ValueError``
    whose ``key`` names it.
    """

    # The seed's fields.
    timeout: float = _default("timeout")
    max_output_bytes: int = _default("max_output_bytes")
    max_memory_mb: int = _default("max_memory_mb")
    max_cpu_seconds: int = _default("max_cpu_seconds")
    max_processes: int = _default("max_processes")
    max_file_size_mb: int = _default("max_file_size_mb")
    allow_network: bool = _default("allow_network")
    env_allowlist: List[str] = _default("env_allowlist")
    shell_allowed_binaries: List[str] = _default("shell_allowed_binaries")
    shell_allow_strings: bool = _default("shell_allow_strings")
    write_denied_extensions: List[str] = _default("write_denied_extensions")
    backend: str = _default("backend")
    rate_limit_calls: int = _default("rate_limit_calls")
    rate_limit_window: float = _default("rate_limit_window")
    # toolhost's own.
    isolation: str = _default("isolation")
    isolation_read_paths: List[str] = _default("isolation_read_paths")
    shell_allow_writable_path: bool = _default("shell_allow_writable_path")
    protected_paths: List[str] = _default("protected_paths")
    protect_host_environ: bool = _default("protect_host_environ")
    audit_log: Optional[str] = _default("audit_log")
    max_permission_level: str = _default("max_permission_level")
    blocked_capabilities: List[str] = _default("blocked_capabilities")
    docker: Dict[str, Any] = _default("docker")
    wasm: Dict[str, Any] = _default("wasm")
    # Not a key: the file this config was read from (`from_toml`), if any.
    # toolhost state: a sandbox refuses it inside a writable allowed dir (a
    # tool could loosen the next session's limits). A field, so that
    # `dataclasses.replace` keeps it.
    config_file: Optional[str] = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.config_file is not None and not isinstance(self.config_file, (str, os.PathLike)):
            raise TypeError(f"config_file must be a path, not {type(self.config_file).__name__}")
        _native.check_config_json(self._to_json())

    @classmethod
    def from_toml(cls, path: PathLike) -> "SandboxConfig":
        """Reads a TOML config file; keys it does not set keep their defaults."""
        values = json.loads(_native.config_file_json(os.fspath(path)))
        # Absolute: the state check must find it whatever the cwd is then.
        return cls(**values, config_file=os.path.abspath(os.fspath(path)))

    def to_dict(self) -> Dict[str, Any]:
        """The config as the TOML file's keys and values. ``config_file`` is
        not a key: a config made again from this dict has none, and the
        sandbox cannot tell it came from a file."""
        values = dataclasses.asdict(self)
        del values["config_file"]
        plain: Dict[str, Any] = _plain(values)
        return plain

    def _to_json(self) -> str:
        return json.dumps(self.to_dict())


def _plain(value: Any, key: str = "") -> Any:
    """A config value as JSON takes it: paths as strings, tuples as lists.
    ``None`` is JSON's null: no value for a key that may have none
    (``audit_log``, ``docker["image"]``), a ``ConfigError`` for any other.
    What has no JSON spelling toolhost reads (NaN, the infinities, an int
    past 64 bits, bytes, a key that is not a str) is a ``ConfigError``
    naming the key here."""

    def refuse(message: str) -> ConfigError:
        error = ConfigError(f"config key `{key}`: {message}")
        error.key = key
        return error

    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise refuse(f"its keys must be str, not {type(k).__name__} ({k!r})")
            out[k] = _plain(v, f"{key}.{k}" if key else k)
        return out
    if isinstance(value, (list, tuple)):
        return [_plain(v, f"{key}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, float) and not math.isfinite(value):
        raise refuse(f"must be a finite number (got {value})")
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**64:
        raise refuse(f"{value} is out of range")
    if isinstance(value, (bytes, bytearray)):
        raise refuse("must be a str, not bytes")
    return value


@dataclass(frozen=True)
class SubprocessResult:
    """The seed's result: ``returncode`` is ``None`` when the program never
    ran (the reason is then in ``stderr``) or was killed."""

    stdout: str
    stderr: str
    returncode: Optional[int]
    timed_out: bool
    truncated: bool


class RunResult(NamedTuple):
    """A call's full result: the seed's fields, then how it ended.

    ``kind`` is one of toolhost's outcome kinds (``exited``, ``signalled``,
    ``timed_out``, ``memory_limit``, ``cpu_limit``, ``file_size_limit``,
    ``trapped``, ``empty_argv``, ``invalid_request``, ``cwd_outside``,
    ``not_found``, ``permission_denied``, ``launch_failed``,
    ``backend_unavailable``, ``isolation_unavailable``), ``message`` one line
    about it, ``signal`` the signal that ended the program, ``never_ran``
    whether it never started, ``backend`` the backend that ran or refused
    the call, ``duration`` its wall-clock seconds, ``isolation`` the kernel
    layers a ``direct`` call got (``{"level": ..., "applied": [...], ...}``;
    else ``None``).
    """

    stdout: str
    stderr: str
    returncode: Optional[int]
    timed_out: bool
    truncated: bool
    kind: str
    message: str
    signal: Optional[int]
    never_ran: bool
    backend: str
    duration: float
    isolation: Optional[Dict[str, Any]]

    @property
    def ok(self) -> bool:
        """Whether the program ran and exited with code 0."""
        return self.kind == "exited" and self.returncode == 0


def _subprocess_result(run: RunResult, argv: Sequence[Any], cwd: Any) -> SubprocessResult:
    stderr = run.stderr
    if run.never_ran:
        # The seed's refusals, as data: callers branch on these texts.
        if run.kind == "empty_argv":
            stderr = "argv is empty"
        elif run.kind == "cwd_outside":
            stderr = f"cwd outside sandbox: {os.fspath(cwd) if cwd is not None else ''}"
        elif run.kind == "not_found":
            stderr = f"binary not found: {_text(argv[0])}"
        else:
            stderr = run.message
    return SubprocessResult(run.stdout, stderr, run.returncode, run.timed_out, run.truncated)


def _text(arg: Any) -> str:
    if isinstance(arg, bytes):
        return arg.decode("utf-8", "replace")
    return os.fspath(arg) if isinstance(arg, os.PathLike) else str(arg)


class ResolvedPath(type(Path())):  # type: ignore[misc]
    """A path resolved inside the sandbox: a ``pathlib.Path`` (the host path),
    with the allowed dir it lies in, whether that dir is read-only, and the
    path tools see (``guest_path``).

    It was inside when it was resolved; opening it later by path is the
    seed's realpath-then-open race. toolhost's own file tools
    (``Toolbox``) open through handles and do not have it.
    """

    allowed_dir: Optional[Path] = None
    read_only: bool = False
    guest_path: Optional[Path] = None

    @classmethod
    def _make(cls, host: str, guest: str, allowed_dir: str, read_only: bool) -> "ResolvedPath":
        p = cls(host)
        p.allowed_dir = Path(allowed_dir)
        p.read_only = read_only
        p.guest_path = Path(guest)
        return p


# --- Event-loop plumbing --------------------------------------------------

class _LoopChannel:
    """Where the calls started from one event loop report (see the module
    doc of ``toolhost._native``)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.native = _native.Channel()
        self.waiting: Dict[int, "asyncio.Future[Any]"] = {}
        loop.add_reader(self.native.fileno(), self._drain)

    def _drain(self) -> None:
        for call_id, value in self.native.drain():
            fut = self.waiting.pop(call_id, None)
            if fut is not None and not fut.done():
                fut.set_result(value)


# Loops that take attributes carry their channel (`_toolhost_channel`): a
# loop closed with calls pending is then freed with its channel, whose
# pending futures hold the loop (a weak-keyed map would keep both forever),
# and the calls it held are cancelled. Other loops (uvloop's) are found in
# a weak-keyed map.
_channels: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopChannel]" = (
    weakref.WeakKeyDictionary()
)
_channels_lock = threading.Lock()


def _channel(loop: asyncio.AbstractEventLoop) -> _LoopChannel:
    found: Optional[_LoopChannel] = getattr(loop, "_toolhost_channel", None)
    if found is not None:
        return found
    with _channels_lock:
        ch = _channels.get(loop)
        if ch is None:
            ch = _LoopChannel(loop)
            try:
                loop._toolhost_channel = ch  # type: ignore[attr-defined]
            except AttributeError:
                _channels[loop] = ch
        return ch


async def _await_call(start: Callable[[Any], Any]) -> Any:
    """Starts a call on toolhost's runtime and waits for its result. A
    cancel stops the call, and waits until its future is dropped (the kill
    of its process tree sent) before it goes on."""
    loop = asyncio.get_running_loop()
    ch = _channel(loop)
    call = start(ch.native)
    if call.done:
        # It ended in its first step, on this thread (a warm WASI call).
        return call.take()
    return await _wait_for(loop, ch, call)


async def _wait_for(loop: asyncio.AbstractEventLoop, ch: _LoopChannel, call: Any) -> Any:
    """The result of a started call that did not end in its first step,
    through the loop's channel (``_await_call``)."""
    fut = loop.create_future()
    ch.waiting[call.id] = fut
    try:
        return await fut
    except asyncio.CancelledError:
        ch.waiting.pop(call.id, None)
        if call.cancel():
            dropped = loop.create_future()
            ch.waiting[call.id] = dropped
            try:
                await dropped
            except asyncio.CancelledError:
                pass
        raise


# --- Sandbox --------------------------------------------------------------

def _argv(argv: Sequence[Any]) -> List[Any]:
    if isinstance(argv, (str, bytes)):
        raise TypeError(
            "argv must be a list of arguments (argv mode, no shell), not a single string"
        )
    out: List[Any] = []
    for a in argv:
        if isinstance(a, (str, bytes)):
            out.append(os.fsdecode(a) if isinstance(a, bytes) else a)
        elif isinstance(a, os.PathLike):
            out.append(os.fspath(a))
        else:
            raise TypeError(f"argv entries must be str, bytes or paths, not {type(a).__name__}")
    return out


def _stdin(stdin: Union[bytes, bytearray, memoryview, str, None]) -> Optional[bytes]:
    if stdin is None:
        return None
    if isinstance(stdin, str):
        return stdin.encode("utf-8")
    if isinstance(stdin, (bytes, bytearray, memoryview)):
        return bytes(stdin)
    raise TypeError(f"stdin must be bytes or str, not {type(stdin).__name__}")


class Sandbox:
    """The sandbox: allowed dirs, config, and the calls run in it.

    ``allowed_dirs``: the dirs tools may use, the first the workspace (the
    default cwd); ``None`` means the current directory. ``read_only_dirs``:
    more dirs tools may only read. ``config``: a ``SandboxConfig``, a dict of
    its fields, or the path of a TOML file. ``timeout``: the seed's shorthand
    for ``config.timeout``.

    Calls may run concurrently from many tasks, event loops and threads.
    ``aclose()`` (or ``async with``) waits for background cleanups.
    """

    def __init__(
        self,
        allowed_dirs: Optional[Union[PathLike, Sequence[PathLike]]] = None,
        config: Optional[Union[SandboxConfig, Mapping[str, Any], PathLike]] = None,
        timeout: Optional[float] = None,
        *,
        read_only_dirs: Sequence[PathLike] = (),
    ) -> None:
        if config is None:
            config = SandboxConfig()
        elif isinstance(config, (str, os.PathLike)):
            config = SandboxConfig.from_toml(config)
        elif isinstance(config, Mapping):
            config = SandboxConfig(**config)
        elif not isinstance(config, SandboxConfig):
            raise TypeError(
                f"config must be a SandboxConfig, a dict or a TOML path, not {type(config).__name__}"
            )
        if timeout is not None:
            config = dataclasses.replace(config, timeout=timeout)
        if allowed_dirs is None:
            dirs: List[PathLike] = [os.getcwd()]
        elif isinstance(allowed_dirs, (str, os.PathLike)):
            dirs = [allowed_dirs]
        else:
            dirs = list(allowed_dirs)
        pairs = [(os.fspath(d), False) for d in dirs] + [
            (os.fspath(d), True) for d in read_only_dirs
        ]
        source = None if config.config_file is None else os.fspath(config.config_file)
        self._native = _native.NativeSandbox(pairs, config._to_json(), source)
        self._config = config
        self._toolbox: Optional[Toolbox] = None

    # The seed's properties and methods.

    @property
    def timeout(self) -> float:
        """The wall-clock limit of one call, in seconds."""
        return float(self._config.timeout)

    @property
    def config(self) -> SandboxConfig:
        """The config this sandbox was built with."""
        return self._config

    def get_allowed_dirs(self) -> List[Path]:
        """The allowed dirs (canonical host paths), the workspace first."""
        return [Path(p) for p, _ in self._native.allowed_dirs()]

    def get_read_only_dirs(self) -> List[Path]:
        """The allowed dirs tools may only read."""
        return [Path(p) for p, ro in self._native.allowed_dirs() if ro]

    def validate_file_path(self, path: Union[PathLike, bytes]) -> bool:
        """Whether ``path`` resolves inside an allowed dir."""
        return self._native.validate_file_path(os.fsdecode(path))

    def resolve_path(
        self, user_path: Union[PathLike, bytes], base_dir: Optional[Union[PathLike, bytes]] = None
    ) -> ResolvedPath:
        """Resolves ``user_path`` inside ``base_dir`` (which must itself be
        inside the sandbox) or the workspace; raises ``PathSafetyError`` (a
        ``ValueError``) on any escape."""
        host, guest, allowed, ro = self._native.resolve_path(
            os.fsdecode(user_path), None if base_dir is None else os.fsdecode(base_dir)
        )
        return ResolvedPath._make(host, guest, allowed, ro)

    def build_env(self, extra_allow: Sequence[str] = ()) -> Dict[str, str]:
        """The environment a tool gets: the allowlist (plus ``extra_allow``)
        minus the deny list, with ``PATH`` always set."""
        return dict(self._native.build_env(list(extra_allow)))

    async def run_subprocess(
        self,
        argv: Sequence[Union[str, bytes, PathLike]],
        *,
        cwd: Optional[PathLike] = None,
        stdin: Union[bytes, str, None] = None,
    ) -> SubprocessResult:
        """Runs ``argv`` (no shell) in the sandbox: the seed's call.

        ``cwd`` must lie inside the sandbox (default: the workspace);
        ``stdin`` is the bytes (or text) the program reads, or nothing (EOF
        at once; the host's own stdin is never passed on). A refusal comes
        back as data: ``returncode`` ``None`` and the reason in ``stderr``.
        """
        args = _argv(argv)
        return _subprocess_result(await self.run(args, cwd=cwd, stdin=stdin), args, cwd)

    # toolhost's own.

    async def run(
        self,
        argv: Sequence[Union[str, bytes, PathLike]],
        *,
        cwd: Optional[PathLike] = None,
        stdin: Union[bytes, str, None] = None,
        env: Optional[Mapping[str, str]] = None,
        backend: Optional[str] = None,
    ) -> RunResult:
        """``run_subprocess`` with the full result. ``env`` sets variables for
        this call (the deny list still applies); ``backend`` (``direct``,
        ``docker``, ``wasm``, ``auto``) overrides the config's."""
        # `_await_call` inlined: this is the hot path, and a warm WASI call
        # ends in its first step, inside `start_run`.
        args = _argv(argv)
        cwd_s = None if cwd is None else os.fspath(cwd)
        stdin_b = _stdin(stdin)
        env_l = [] if not env else list(env.items())
        loop = asyncio.get_running_loop()
        ch = _channel(loop)
        call = self._native.start_run(ch.native, args, cwd_s, stdin_b, env_l, backend)
        run = call.take() if call.done else await _wait_for(loop, ch, call)
        return RunResult._make(run)

    def wasm_tools(self) -> List[Dict[str, Any]]:
        """The registered WASI tools (``name``, ``description``, ``path``,
        ``builtin``, ``component``)."""
        return self._native.wasm_tools()

    async def typed_tools(self) -> List[Dict[str, Any]]:
        """The typed tools (``toolhost:tool`` world) as they describe
        themselves: ``name``, ``description``, ``input_schema``, ``path``."""
        tools: List[Dict[str, Any]] = await _await_call(self._native.start_typed_tools)
        return tools

    async def call_tool(
        self, name: str, input: Mapping[str, Any], *, cwd: Optional[PathLike] = None
    ) -> Dict[str, Any]:
        """Calls a typed WASI tool with a JSON-shaped input; returns its JSON
        output (a dict, usually). Raises ``ToolError`` when it returned an
        error or did not complete (refused, timed out, a limit, a trap)."""
        out = await self._call_tool(name, input, cwd)
        if out.get("output") is None:
            raise ToolError(out.get("error") or out.get("message") or "the tool failed", out)
        output: Dict[str, Any] = out["output"]
        return output

    async def call_tool_result(
        self, name: str, input: Mapping[str, Any], *, cwd: Optional[PathLike] = None
    ) -> Dict[str, Any]:
        """``call_tool`` that returns the whole result as data: ``output``,
        ``error`` and the run's fields."""
        return await self._call_tool(name, input, cwd)

    async def _call_tool(
        self, name: str, input: Mapping[str, Any], cwd: Optional[PathLike]
    ) -> Dict[str, Any]:
        text = json.dumps(input)
        cwd_s = None if cwd is None else os.fspath(cwd)
        out: Dict[str, Any] = await _await_call(
            lambda ch: self._native.start_call_tool(ch, name, text, cwd_s)
        )
        return out

    def toolbox(self) -> "Toolbox":
        """The agent tools of this sandbox (one session: one rate limit and
        one audit-log session)."""
        if self._toolbox is None:
            self._toolbox = Toolbox(self)
        return self._toolbox

    async def aclose(self) -> None:
        """Waits for the sandbox's background cleanups (private tmps, warm
        containers). The sandbox stays usable."""
        await _await_call(self._native.start_shutdown)

    async def __aenter__(self) -> "Sandbox":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


class ToolError(RuntimeError):
    """A typed tool returned an error or did not complete; ``result`` holds
    the whole result."""

    def __init__(self, message: str, result: Dict[str, Any]) -> None:
        super().__init__(message)
        self.result = result


@dataclass(frozen=True)
class ToolResult:
    """An agent tool call's result: ``text`` for the model, ``is_error``,
    ``status`` (``ok``, ``rate_limited``, ``unknown_tool``,
    ``invalid_request``, ``denied``, ``cancelled``, or how the tool ended),
    the policy ``rule`` that refused, ``retry_after_ms`` for the rate limit,
    ``structured`` output, and the ``run`` of a program."""

    text: str
    is_error: bool
    status: str
    rule: Optional[str] = None
    retry_after_ms: Optional[int] = None
    structured: Any = None
    run: Optional[Dict[str, Any]] = None


class Toolbox:
    """The agent tools: ``shell``, ``file_read``, ``file_write``,
    ``file_list`` and more, and one tool per registered WASI tool, under the
    config's permission cap, shell and write policy, rate limit and audit
    log. What an MCP client sees, for an agent loop written in Python."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sandbox = sandbox

    async def tools(self) -> List[Dict[str, Any]]:
        """Every tool: ``name``, ``description``, ``input_schema``,
        ``permission``, ``kind``."""
        out = await _await_call(self._sandbox._native.start_tools)
        if isinstance(out, dict) and "error" in out:
            raise RuntimeError(out["error"])
        tools: List[Dict[str, Any]] = out
        return tools

    async def call(self, name: str, args: Optional[Mapping[str, Any]] = None) -> ToolResult:
        """Calls a tool by name. Refusals, limits and failures are results
        (``is_error``), never exceptions."""
        text = json.dumps(dict(args or {}))
        out = await _await_call(
            lambda ch: self._sandbox._native.start_tool_call(ch, name, text)
        )
        return ToolResult(**out)

    @property
    def calls(self) -> int:
        """Calls made so far, refused ones too."""
        return self._sandbox._native.tool_counts()[0]

    @property
    def denials(self) -> int:
        """Calls refused by policy or the rate limit so far."""
        return self._sandbox._native.tool_counts()[1]
