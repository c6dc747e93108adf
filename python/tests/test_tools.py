"""Typed WASI tools, the wasm backend, and the agent tools (Toolbox)."""

import os

import pytest

from toolhost import Sandbox, SandboxConfig, ToolError

from conftest import run


def test_a_typed_tool_takes_and_returns_json(ws):
    s = Sandbox([ws])
    out = run(s.call_tool("text-stats", {"text": "a b\nc a", "top": 1}))
    assert out["lines"] == 2 and out["words"] == 4 and out["bytes"] == 7
    assert out["top"] == [{"word": "a", "count": 2}]
    with pytest.raises(ToolError, match="text"):
        run(s.call_tool("text-stats", {"nope": 1}))
    with pytest.raises(ToolError, match="no typed tool"):
        run(s.call_tool("no-such-tool", {}))
    whole = run(s.call_tool_result("text-stats", {"nope": 1}))
    assert whole["output"] is None and whole["backend"] == "wasm"
    names = [t["name"] for t in run(s.typed_tools())]
    assert "text-stats" in names and "file-digest" in names


def test_a_typed_tool_reads_only_inside_the_sandbox(ws):
    (ws / "data.txt").write_text("abc")
    s = Sandbox([ws])
    out = run(s.call_tool("file-digest", {"paths": ["data.txt"]}))
    assert "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" in str(out)
    with pytest.raises(ToolError):
        run(s.call_tool("file-digest", {"paths": ["/etc/passwd"]}))


def test_the_wasm_backend_runs_built_in_commands(ws):
    (ws / "note.txt").write_text("1\n2\n3\n")
    s = Sandbox([ws], SandboxConfig(backend="wasm"))
    r = run(s.run(["wc", "-l"], stdin="a\nb\n"))
    assert (r.backend, r.returncode, r.stdout.split()[0]) == ("wasm", 0, "2")
    assert run(s.run_subprocess(["wc", "-l", "note.txt"])).stdout.split()[0] == "3"
    r = run(s.run_subprocess(["cat", "/etc/passwd"]))
    assert r.returncode != 0 and "root:" not in r.stdout
    names = {t["name"] for t in s.wasm_tools()}
    assert {"wc", "cat", "grep"} <= names
    # A per-call backend on a direct sandbox.
    d = Sandbox([ws])
    assert run(d.run(["wc", "-l", "note.txt"], backend="wasm")).backend == "wasm"
    with pytest.raises(ValueError):
        run(d.run(["true"], backend="gpu"))


def test_the_agent_tools_hold_their_policy(ws):
    s = Sandbox([ws], SandboxConfig(shell_allowed_binaries=["echo"], rate_limit_calls=0))
    tb = s.toolbox()
    names = {t["name"] for t in run(tb.tools())}
    assert {"shell", "file_read", "file_write", "file_list", "text-stats"} <= names
    r = run(tb.call("shell", {"args": ["echo", "hi"]}))
    assert not r.is_error and "hi" in r.text and r.run["returncode"] == 0
    r = run(tb.call("shell", {"args": ["ls"]}))
    assert r.is_error and r.status == "denied"
    r = run(tb.call("file_write", {"path": "notes/a.txt", "content": "x"}))
    assert not r.is_error and (ws / "notes" / "a.txt").read_text() == "x"
    assert run(tb.call("file_read", {"path": "notes/a.txt"})).text.endswith("x")
    r = run(tb.call("file_write", {"path": "run.sh", "content": "x"}))
    assert r.is_error and r.status == "denied" and not (ws / "run.sh").exists()
    r = run(tb.call("file_read", {"path": "../../etc/passwd"}))
    assert r.is_error and "root:" not in r.text
    r = run(tb.call("no_such_tool", {}))
    assert r.is_error and r.status == "unknown_tool"
    assert tb.calls == 7 and tb.denials >= 2
    # Arguments that are not JSON (a lone surrogate) are a refusal as data.
    r = run(tb.call("file_read", {"path": "\udcff"}))
    assert r.is_error and r.status == "invalid_request"


def test_the_shell_tool_is_off_until_allowed(ws):
    tb = Sandbox([ws]).toolbox()
    r = run(tb.call("shell", {"args": ["echo", "hi"]}))
    assert r.is_error and "shell_allowed_binaries" in r.text


def test_the_rate_limit_refuses_past_its_budget(ws):
    s = Sandbox([ws], SandboxConfig(rate_limit_calls=2, rate_limit_window=60))
    tb = s.toolbox()
    statuses = [run(tb.call("file_list", {})).status for _ in range(3)]
    assert statuses == ["ok", "ok", "rate_limited"]
    assert tb.denials == 1


def test_auto_picks_wasm_for_a_registered_tool_and_direct_otherwise(ws):
    s = Sandbox([ws], SandboxConfig(backend="auto"))
    assert run(s.run(["wc", "-c"], stdin="abc")).backend == "wasm"
    assert run(s.run(["true"])).backend == "direct"


@pytest.mark.skipif(
    not os.environ.get("TOOLHOST_TEST_IMAGE"),
    reason="no Docker engine and test image (scripts/docker-setup; CI always has them)",
)
def test_the_docker_backend_from_python(ws):
    image = os.environ["TOOLHOST_TEST_IMAGE"]
    (ws / "note.txt").write_text("a\nb\n")
    s = Sandbox([ws], SandboxConfig(backend="docker", docker={"image": image}, timeout=60))
    r = run(s.run(["sh", "-c", "wc -l < note.txt; echo made > out.txt; cat /etc/hostname >/dev/null; echo $HOME"]))
    assert (r.backend, r.returncode) == ("docker", 0), r
    assert r.stdout.split()[0] == "2" and (ws / "out.txt").read_text() == "made\n"
    # No network in the container: only the loopback interface.
    r = run(s.run(["ls", "/sys/class/net"]))
    assert r.stdout.split() == ["lo"], r
    quick = Sandbox([ws], SandboxConfig(backend="docker", docker={"image": image}, timeout=3))
    r = run(quick.run_subprocess(["sleep", "30"]))
    assert r.timed_out is True and r.returncode is None
    run(s.aclose())
