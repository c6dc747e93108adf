"""What toolhost does better than the seed, asserted from Python, and the
asyncio contract: concurrency, cancellation, loops and threads."""

import asyncio
import os
import sys
import threading
import time

import pytest

from toolhost import Sandbox, SandboxConfig

from conftest import file_written, pid_alive, run, wait_gone

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


def tree(last: str) -> list:
    """A call that starts a `setsid` grandchild and writes its host pid and
    its own (the call has a PID namespace; /proc is the host's) to gc.pid
    and child.pid, then runs `last`."""
    return [
        "sh",
        "-c",
        "setsid sh -c 'read p x < /proc/self/stat; echo $p > gc.pid; exec sleep 60' & "
        f"read p x < /proc/self/stat; echo $p > child.pid; {last}",
    ]


async def both_pids(ws):
    """The two pids of `tree`, once written, and whether both run now."""
    gc = int(await file_written(ws / "gc.pid"))
    child = int(await file_written(ws / "child.pid"))
    return gc, child, pid_alive(gc) and pid_alive(child)


def test_setsid_grandchildren_die_at_the_timeout(ws):
    s = Sandbox([ws], timeout=1.0)

    async def go():
        task = asyncio.ensure_future(s.run_subprocess(tree("wait")))
        # Positive control: both run during the call.
        gc, child, alive = await both_pids(ws)
        return await task, gc, child, alive

    r, gc, child, alive = run(go())
    assert alive
    assert r.timed_out is True and r.returncode is None
    assert wait_gone(gc) and wait_gone(child)


def test_the_hosts_stdin_is_never_inherited(ws):
    s = Sandbox([ws])
    read_end, write_end = os.pipe()
    os.write(write_end, b"HOST-STDIN-CANARY")
    saved = os.dup(0)
    os.dup2(read_end, 0)
    try:
        r = run(s.run_subprocess(["cat"]))
        given = run(s.run_subprocess(["cat"], stdin=b"given"))
    finally:
        os.dup2(saved, 0)
        os.close(saved)
    os.close(write_end)
    assert (r.returncode, r.stdout) == (0, "")
    assert given.stdout == "given"
    # Nothing was read from the host's stdin.
    assert os.read(read_end, 100) == b"HOST-STDIN-CANARY"
    os.close(read_end)


@linux
def test_linux_isolation_hides_what_is_outside_the_sandbox(ws, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "canary.txt").write_text("OUTSIDE-CANARY")
    (ws / "inside.txt").write_text("INSIDE")
    s = Sandbox([ws])
    r = run(s.run(["cat", str(outside / "canary.txt")]))
    assert r.returncode != 0 and "OUTSIDE-CANARY" not in r.stdout
    assert r.isolation is not None and "landlock_fs" in r.isolation["applied"]
    assert run(s.run(["cat", "inside.txt"])).stdout == "INSIDE"
    # No network: not even loopback is up.
    r = run(s.run(["cat", "/proc/net/dev"]))
    assert "netns" in r.isolation["applied"]
    up = [l.split(":")[0].strip() for l in r.stdout.splitlines()[2:]]
    assert up in ([], ["lo"])
    # The twin: with isolation off, the same read succeeds (the layer denies).
    off = Sandbox([ws], SandboxConfig(isolation="off"))
    r = run(off.run(["cat", str(outside / "canary.txt")]))
    assert r.stdout == "OUTSIDE-CANARY" and "landlock_fs" not in r.isolation["applied"]


def test_a_cancelled_task_leaves_no_process(ws):
    s = Sandbox([ws], timeout=60)

    async def go():
        task = asyncio.ensure_future(s.run_subprocess(tree("exec sleep 60")))
        gc, child, alive = await both_pids(ws)
        started = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return gc, child, alive, time.monotonic() - started

    gc, child, alive, took = run(go())
    assert alive
    assert took < 10
    assert wait_gone(gc) and wait_gone(child)
    # The sandbox goes on serving calls.
    assert run(s.run_subprocess(["echo", "after"])).stdout == "after\n"


def test_wait_for_a_timeout_of_the_caller_kills_the_call(ws):
    s = Sandbox([ws], timeout=60)

    async def go():
        started = time.monotonic()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(
                s.run_subprocess(
                    ["sh", "-c", "read p x < /proc/self/stat; echo $p > p.pid; exec sleep 60"]
                ),
                1.0,
            )
        return time.monotonic() - started

    assert run(go()) < 10
    assert wait_gone(int((ws / "p.pid").read_text()))


def task_count() -> int:
    return len(os.listdir("/proc/self/task"))


def test_32_concurrent_calls_from_one_loop(ws):
    s = Sandbox([ws])
    run(s.run_subprocess(["true"]))  # the runtime's threads exist now
    before = task_count()
    seen = []

    async def one(i):
        r = await s.run_subprocess(
            ["sh", "-c", 'date +%s.%N; sleep 1; echo "$0"; date +%s.%N', str(i)]
        )
        seen.append(task_count())
        start, name, end = r.stdout.split()
        return int(name), float(start), float(end)

    async def all_of_them():
        return await asyncio.gather(*(one(i) for i in range(32)))

    results = run(all_of_them())
    assert sorted(r[0] for r in results) == list(range(32))
    # All 32 ran at once: each started before any ended.
    assert max(r[1] for r in results) < min(r[2] for r in results)
    # No thread per call.
    assert max(seen) < before + 16, (before, max(seen))


def test_calls_from_several_threads_and_event_loops(ws):
    s = Sandbox([ws])
    out = {}

    def thread(t):
        async def calls():
            return await asyncio.gather(
                *(s.run_subprocess(["echo", f"{t}-{i}"]) for i in range(4))
            )

        out[t] = [r.stdout.strip() for r in asyncio.run(calls())]

    threads = [threading.Thread(target=thread, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == {t: [f"{t}-{i}" for i in range(4)] for t in range(4)}
    # A second loop on this thread, one after the other.
    assert run(s.run_subprocess(["echo", "a"])).stdout == "a\n"
    assert run(s.run_subprocess(["echo", "b"])).stdout == "b\n"


def test_the_gil_is_released_while_a_call_runs(ws):
    s = Sandbox([ws])
    done = threading.Event()

    def caller():
        asyncio.run(s.run_subprocess(["sleep", "1"]))
        done.set()

    t = threading.Thread(target=caller)
    t.start()
    spins = 0
    while not done.is_set():
        spins += 1
    t.join()
    # The main thread ran Python code all through the call.
    assert spins > 10_000


@linux
def test_a_forked_child_gets_a_clear_error(ws):
    s = Sandbox([ws])
    assert run(s.run_subprocess(["true"])).returncode == 0
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            run(s.run_subprocess(["true"]))
            code = 1
        except RuntimeError as e:
            code = 0 if "fork" in str(e) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert run(s.run_subprocess(["true"])).returncode == 0


def socket_count() -> int:
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return n


def test_a_loop_closed_with_a_call_pending_ends_the_call_and_frees_the_loop(ws):
    import gc
    import weakref

    s = Sandbox([ws], timeout=60)
    run(s.run_subprocess(["true"]))
    sockets = socket_count()
    loop = asyncio.new_event_loop()
    task = loop.create_task(s.run_subprocess(tree("exec sleep 60")))
    gc_pid, child, alive = loop.run_until_complete(both_pids(ws))
    loop.close()  # the task is still pending, and is never cancelled
    freed = weakref.ref(loop)
    del task, loop
    # Another thread may hold it a moment longer (a thread pool's last
    # work item); nothing of toolhost's does.
    deadline = time.monotonic() + 5
    while gc.collect() >= 0 and freed() is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert alive
    assert freed() is None
    assert wait_gone(gc_pid) and wait_gone(child)
    # The loop's channel (a socket pair) went with it.
    assert socket_count() <= sockets


def test_a_wasm_call_with_a_large_stdin_leaves_the_callers_thread_at_once(ws):
    from toolhost import _native

    s = Sandbox([ws])
    run(s.run(["wc", "-c"], backend="wasm"))  # loaded: no compile on the path
    ch = _native.Channel()
    small = [s._native.start_run(ch, ["wc", "-c"], None, b"x" * 1000, [], "wasm").done for _ in range(3)]
    large = s._native.start_run(ch, ["wc", "-c"], None, b"x" * (1 << 20), [], "wasm")
    # A warm call with a small stdin ends in its first step (one may cross
    # an epoch tick); a large stdin is handed to the runtime at once.
    assert sum(small) >= 2 and not large.done
    assert run(s.run(["wc", "-c"], stdin=b"x" * (1 << 20), backend="wasm")).stdout.split()[0] == str(1 << 20)
