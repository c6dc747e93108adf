"""A WebAssembly/wasi-testsuite runtime adapter for toolhost's wasm backend.

Each test runs as `toolhost run --backend wasm` with the defaults of a
sandbox (limits, timeout, no network), the test's root preopened as `/`
(`--allow-dir ROOT::/`, as the suite's wasmtime adapter passes `--dir
ROOT::/`) or no dir at all (`--no-dirs`), exactly the test's environment
(`env_allowlist = []` and one `--env` per variable), and the `.wasm` called by
name from a `[wasm] tool_dirs` entry for its directory. Standard input is
empty: the CLI reads a piped stdin to its end before the call, so the tests
that talk to a guest over stdin (operation-based specs) are not for it.

TOOLHOST names the binary (default: `toolhost` on PATH).
"""

import os
import shlex
import subprocess
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

TOOLHOST = shlex.split(os.getenv("TOOLHOST", "toolhost"))
_CONFIGS: Dict[str, str] = {}
_TMP = tempfile.mkdtemp(prefix="toolhost-wasi-testsuite-")


def get_name() -> str:
    return "toolhost"


def get_version() -> str:
    out = subprocess.run(TOOLHOST[0:1] + ["--version"], encoding="UTF-8",
                         capture_output=True, check=True).stdout
    return out.split()[1]


def get_wasi_versions() -> List[str]:
    return ["wasm32-wasip1", "wasm32-wasip3"]


def get_wasi_worlds() -> List[str]:
    return ["wasi:cli/command"]


def _config_for(tool_dir: str) -> str:
    if tool_dir not in _CONFIGS:
        path = os.path.join(_TMP, f"config-{len(_CONFIGS)}.toml")
        with open(path, "w", encoding="UTF-8") as f:
            f.write("env_allowlist = []\n[wasm]\n")
            f.write(f"tool_dirs = [{tool_dir!r}]\n".replace("'", '"'))
        _CONFIGS[tool_dir] = path
    return _CONFIGS[tool_dir]


def compute_argv(test_path: str,
                 args_env_root: Tuple[List[str], Dict[str, str], Optional[str]],
                 proposals: List[str],
                 wasi_world: str,
                 wasi_version: str) -> List[str]:
    args, env, root = args_env_root
    wasm = Path(test_path).resolve()
    # The shell keeps the runner's stdin pipe open (unread), so a test that
    # writes to it does not fail on a broken pipe.
    argv = ["sh", "-c", '"$@" </dev/null', "sh"] + TOOLHOST
    argv += ["run", "--backend", "wasm", "--config", _config_for(str(wasm.parent))]
    for k, v in env.items():
        argv += ["--env", f"{k}={v}"]
    if root:
        argv += ["--allow-dir", f"{Path(root).resolve()}::/"]  # noqa: E231
    else:
        argv += ["--no-dirs"]
    argv += ["--", wasm.stem] + list(args)
    return argv
