"""Per-call latency from Python against the same calls from Rust, in one run.

    python benches/python.py      (BENCH_ITERS calls per series, default 300)

Two calls: `/bin/true` on the `direct` backend (hardened, the default) and
a trivial WASI tool (the built-in `cat`, empty stdin) on `wasm`. From
Python, each is `await sandbox.run(...)` in one asyncio loop, one at a
time; from Rust, the same request through `Sandbox::run`, `block_on` one at
a time (`toolhost._native.bench_rust_calls`), on the same sandbox. The two
alternate in rounds, so noise falls on both. The last line is JSON:

    {"bench":"python","true_py_p50_us":…,"true_rust_p50_us":…,"true_ratio":…,
     "wasm_py_p50_us":…,"wasm_rust_p50_us":…,"wasm_ratio":…}
"""

import asyncio
import json
import os
import statistics
import tempfile
import time

import toolhost
from toolhost import _native

ITERS = int(os.environ.get("BENCH_ITERS", "300"))
ROUNDS = 5


async def python_calls(sandbox, argv, backend, n):
    took = []
    for _ in range(n):
        start = time.perf_counter()
        r = await sandbox.run(argv, backend=backend)
        took.append(time.perf_counter() - start)
        if not r.ok:
            raise SystemExit(f"{argv} failed: {r.message}")
    return took


def main():
    ws = tempfile.mkdtemp(prefix="toolhost-pybench-")
    sandbox = toolhost.Sandbox([ws])
    cases = {"true": (["true"], "direct"), "wasm": (["cat"], "wasm")}
    py = {k: [] for k in cases}
    rust = {k: [] for k in cases}
    for name, (argv, backend) in cases.items():  # warm up: engines, caches
        asyncio.run(python_calls(sandbox, argv, backend, 20))
        _native.bench_rust_calls(sandbox._native, argv, 20, backend)
    per_round = max(ITERS // ROUNDS, 1)
    for _ in range(ROUNDS):
        for name, (argv, backend) in cases.items():
            py[name] += asyncio.run(python_calls(sandbox, argv, backend, per_round))
            rust[name] += _native.bench_rust_calls(sandbox._native, argv, per_round, backend)
    out = {"bench": "python"}
    print(f"{'call':<8}{'python p50 us':>16}{'rust p50 us':>14}{'ratio':>8}")
    for name in cases:
        p = statistics.median(py[name]) * 1e6
        r = statistics.median(rust[name]) * 1e6
        print(f"{name:<8}{p:>16.1f}{r:>14.1f}{p / r:>8.2f}")
        out[f"{name}_py_p50_us"] = round(p, 1)
        out[f"{name}_rust_p50_us"] = round(r, 1)
        out[f"{name}_ratio"] = round(p / r, 3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
