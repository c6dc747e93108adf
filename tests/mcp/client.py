"""A real MCP client for toolhost's tests and benchmark: the official `mcp`
Python SDK, talking to `toolhost mcp` over stdio.

    python client.py PLAN.json

PLAN: {"server": [argv...], "cwd": DIR,
       "calls": [{"key", "tool", "args"}...],          # in order
       "until_rate_limited": {"tool", "args", "max"},   # optional, after calls
       "bench": [{"key", "tool", "args", "iters", "warmup"} or
                 {"key", "ping": true, "iters", "warmup"}...]}  # optional
Prints one JSON object: the server's initialize result, its tools, each
call's result (as the SDK parsed it, dumped back to JSON), and for "bench"
each call's latencies in nanoseconds as the client saw them.
"""

import asyncio
import json
import sys
import time

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def dump(model):
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


async def main(plan):
    params = StdioServerParameters(
        command=plan["server"][0], args=plan["server"][1:], cwd=plan.get("cwd")
    )
    out = {"results": {}, "bench": {}}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            out["initialize"] = dump(init)
            out["tools"] = [dump(t) for t in (await session.list_tools()).tools]

            for c in plan.get("calls", []):
                r = await session.call_tool(c["tool"], c.get("args"))
                out["results"][c["key"]] = dump(r)

            u = plan.get("until_rate_limited")
            if u:
                admitted = 0
                limited = None
                for _ in range(u["max"]):
                    r = await session.call_tool(u["tool"], u.get("args"))
                    meta = (dump(r).get("_meta") or {}).get("toolhost/call") or {}
                    if meta.get("status") == "rate_limited":
                        limited = dump(r)
                        break
                    admitted += 1
                out["rate_limit"] = {"admitted": admitted, "limited": limited}
                # The session keeps working: a ping still answers.
                await session.send_ping()
                out["rate_limit"]["ping_after"] = True

            for b in plan.get("bench", []):
                # A "ping" series measures the protocol and this client alone.
                if b.get("ping"):
                    async def one():
                        await session.send_ping()
                        return False
                else:
                    async def one():
                        r = await session.call_tool(b["tool"], b.get("args"))
                        return bool(r.is_error)
                for _ in range(b.get("warmup", 20)):
                    await one()
                times = []
                errors = 0
                for _ in range(b["iters"]):
                    t0 = time.perf_counter_ns()
                    errors += await one()
                    times.append(time.perf_counter_ns() - t0)
                out["bench"][b["key"]] = {"ns": times, "errors": errors}
    return out


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        plan = json.load(f)
    result = asyncio.run(main(plan))
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
