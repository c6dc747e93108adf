"""Prints, per suite and runtime, how many legacy-spec tests passed (a test's
`.json` without `operations`, `proposals` or `servers`, or no `.json` at all),
and the names of those that passed on one runtime and not on the other."""

import json
import sys
from pathlib import Path

suite = Path(sys.argv[1])


def legacy(suite_name: str, test: str) -> bool:
    lang = {"Rust": "rust", "C": "c", "AssemblyScript": "assemblyscript"}
    language = next(v for k, v in lang.items() if f"WASI {k} tests" in suite_name)
    version = suite_name.split("[")[1].rstrip("]")
    spec = suite / "tests" / language / "testsuite" / version / f"{test}.json"
    if not spec.exists():
        return True
    keys = json.loads(spec.read_text())
    return not any(k in keys for k in ("operations", "proposals", "servers"))


passed = {}
for f in sys.argv[2:]:
    for s in json.load(open(f))["results"]:
        runtime = s["runtime"]["name"]
        for t in s["tests"]:
            if legacy(s["name"], t["name"]):
                key = (s["name"], t["name"])
                passed.setdefault(runtime, {})[key] = t["outcome"] == "pass"
runtimes = sorted(passed)
suites = sorted({k[0] for r in runtimes for k in passed[r]})
for name in suites:
    row = []
    for r in runtimes:
        tests = {k: v for k, v in passed[r].items() if k[0] == name}
        row.append(f"{r} {sum(tests.values())}/{len(tests)}")
    print(f"{name}: " + ", ".join(row))
if len(runtimes) == 2:
    a, b = runtimes
    for x, y in ((a, b), (b, a)):
        only = sorted(k[1] for k, v in passed[x].items() if v and not passed[y].get(k))
        if only:
            print(f"passed by {x} only: {' '.join(only)}")
