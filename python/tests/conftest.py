"""Shared helpers of the toolhost pytest suite: a fresh workspace per test,
and `run` for a coroutine (no pytest plugin needed)."""

import asyncio
import os
import time

import pytest


@pytest.fixture
def ws(tmp_path):
    """A workspace dir, the first allowed dir of the sandboxes made here."""
    d = tmp_path / "ws"
    d.mkdir()
    return d


def run(coro):
    return asyncio.run(coro)


def pid_alive(pid: int) -> bool:
    """Whether a process (not a zombie) has this pid."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def wait_gone(pid: int, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.02)
    return not pid_alive(pid)


def written(path):
    """The text of `path` once it has some, else None."""
    if os.path.exists(path):
        text = open(path).read()
        if text.strip():
            return text
    return None


def wait_file(path, seconds: float = 5.0) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        text = written(path)
        if text is not None:
            return text
        time.sleep(0.01)
    raise AssertionError(f"{path} was not written within {seconds} s")


async def file_written(path, seconds: float = 5.0) -> str:
    """`wait_file` without a thread: polled from the running loop."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        text = written(path)
        if text is not None:
            return text
        await asyncio.sleep(0.01)
    raise AssertionError(f"{path} was not written within {seconds} s")
