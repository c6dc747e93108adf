"""The seed module's behaviour (DESIGN.md, "Seed behaviour"), asserted
through the Python API: each refusal with its allowed twin."""

import asyncio
import os

import pytest

import toolhost
from toolhost import (
    ConfigError,
    PathSafetyError,
    ResolvedPath,
    Sandbox,
    SandboxConfig,
    SubprocessResult,
)

from conftest import run

SEED_DEFAULTS = {
    "timeout": 15.0,
    "max_output_bytes": 10 * 1024 * 1024,
    "max_memory_mb": 256,
    "max_cpu_seconds": 30,
    "max_processes": 64,
    "max_file_size_mb": 50,
    "allow_network": False,
    "env_allowlist": ["PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR"],
    "shell_allowed_binaries": [],
    "shell_allow_strings": False,
    "write_denied_extensions": [
        ".exe", ".bat", ".cmd", ".ps1", ".psm1", ".sh", ".bash", ".zsh", ".fish",
        ".so", ".dylib", ".dll", ".com", ".scr", ".msi",
    ],
    "backend": "direct",
    "rate_limit_calls": 60,
    "rate_limit_window": 60.0,
}


def test_defaults_are_the_seeds():
    c = SandboxConfig()
    for key, value in SEED_DEFAULTS.items():
        assert getattr(c, key) == value, key
    assert isinstance(c.timeout, float) and isinstance(c.rate_limit_window, float)
    # Lists are not shared between configs.
    c.env_allowlist.append("FOO")
    assert SandboxConfig().env_allowlist == SEED_DEFAULTS["env_allowlist"]


def test_every_toml_key_is_a_field():
    import dataclasses

    fields = [f.name for f in dataclasses.fields(SandboxConfig) if f.name != "config_file"]
    keys = toolhost._native.config_keys()
    assert sorted(fields) == sorted({k.split(".")[0] for k in keys})
    # Each key of a section is one of its defaults' keys or has none.
    c = SandboxConfig()
    for k in keys:
        if "." in k:
            section, name = k.split(".")
            assert isinstance(getattr(c, section), dict), k


def test_timeout_shorthand_and_properties(ws):
    s = Sandbox([ws], timeout=2.5)
    assert s.timeout == 2.5 and s.config.timeout == 2.5
    s = Sandbox([ws], SandboxConfig(timeout=7))
    assert s.timeout == 7.0
    assert s.get_allowed_dirs() == [ws.resolve()]


@pytest.mark.parametrize(
    "kwargs, key",
    [
        ({"timeout": 0}, "timeout"),
        ({"timeout": -1}, "timeout"),
        ({"timeout": "3"}, "timeout"),
        ({"max_output_bytes": 0}, "max_output_bytes"),
        ({"max_memory_mb": -5}, "max_memory_mb"),
        ({"backend": "gpu"}, "backend"),
        ({"isolation": "maybe"}, "isolation"),
        ({"env_allowlist": ["PATH", 3]}, "env_allowlist[1]"),
        ({"docker": {"imgae": "x"}}, "docker.imgae"),
        ({"wasm": {"cpu_meter": "gas"}}, "wasm.cpu_meter"),
        ({"timeout": None}, "timeout"),
        ({"max_memory_mb": None}, "max_memory_mb"),
        ({"docker": {"pull": None}}, "docker.pull"),
        ({"max_processes": True}, "max_processes"),
        ({"timeout": float("nan")}, "timeout"),
        ({"rate_limit_window": float("inf")}, "rate_limit_window"),
        ({"max_output_bytes": 10**400}, "max_output_bytes"),
        ({"max_memory_mb": 2**64}, "max_memory_mb"),
        ({"protected_paths": [b".git"]}, "protected_paths[0]"),
        ({"docker": {True: 1}}, "docker"),
    ],
)
def test_a_bad_value_raises_a_value_error_naming_the_key(kwargs, key):
    with pytest.raises(ConfigError) as e:
        SandboxConfig(**kwargs)
    assert isinstance(e.value, ValueError)
    assert e.value.key == key
    if key is not None:
        assert f"`{key}`" in str(e.value)


def test_a_good_value_of_each_checked_key_is_taken():
    c = SandboxConfig(
        timeout=0.5, max_output_bytes=1, max_memory_mb=0, backend="auto",
        isolation="off", docker={"image": "x"}, wasm={"cpu_meter": "fuel"},
    )
    assert (c.timeout, c.backend, c.docker["image"]) == (0.5, "auto", "x")
    # None is no value where a key may have none.
    c = SandboxConfig(audit_log=None, docker={"image": None, "warm": True})
    assert c.docker["image"] is None


def test_a_value_changed_after_the_check_is_checked_by_the_sandbox(ws):
    c = SandboxConfig()
    c.timeout = 0
    with pytest.raises(ConfigError) as e:
        Sandbox([ws], c)
    assert e.value.key == "timeout"


def test_a_toml_path_is_a_config(ws, tmp_path):
    path = tmp_path / "toolhost.toml"
    path.write_text('timeout = 2\nmax_output_bytes = 4096\n[wasm]\npool_size = 4\n')
    s = Sandbox([ws], str(path))
    assert s.timeout == 2.0 and s.config.max_output_bytes == 4096
    assert s.config.wasm["pool_size"] == 4
    assert s.config.max_memory_mb == 256  # not in the file: the default
    assert SandboxConfig.from_toml(path).max_output_bytes == 4096
    assert Sandbox([ws], path, timeout=1).timeout == 1.0
    path.write_text("timeout = 2\n[docker]\nimgae = 'x'\n")
    with pytest.raises(ConfigError) as e:
        Sandbox([ws], path)
    assert e.value.key == "docker.imgae" and str(path) in str(e.value)
    with pytest.raises(ConfigError):
        SandboxConfig.from_toml(tmp_path / "missing.toml")


def test_a_config_file_inside_a_writable_dir_is_refused(ws):
    # toolhost state: a tool could loosen the next session's limits.
    path = ws / "toolhost.toml"
    path.write_text("timeout = 2\n")
    with pytest.raises(ValueError, match="toolhost.toml"):
        Sandbox([ws], path)
    # Also once read, changed, or given with the timeout shorthand.
    import dataclasses

    read = SandboxConfig.from_toml(path)
    for config in (read, dataclasses.replace(read, timeout=3)):
        with pytest.raises(ValueError, match="toolhost.toml"):
            Sandbox([ws], config)
    with pytest.raises(ValueError, match="toolhost.toml"):
        Sandbox([ws], path, timeout=1)
    # A second hard link: refused while the sandbox has a writable dir (the
    # link could be in it), taken by a sandbox with read-only dirs only.
    outside = ws.parent / "etc.toml"
    outside.write_text("timeout = 2\n")
    os.link(outside, ws.parent / "backup.toml")
    with pytest.raises(ValueError, match="2 hard links"):
        Sandbox([ws], outside)
    assert Sandbox([], outside, read_only_dirs=[ws]).timeout == 2.0
    os.unlink(ws.parent / "backup.toml")
    assert Sandbox([ws], outside).timeout == 2.0
    # Read by a relative path, then the cwd changes.
    cwd = os.getcwd()
    os.chdir(ws)
    try:
        relative = SandboxConfig.from_toml("toolhost.toml")
    finally:
        os.chdir(cwd)
    with pytest.raises(ValueError, match="toolhost.toml"):
        Sandbox([ws], relative)
    assert Sandbox([ws], SandboxConfig(timeout=2)).timeout == 2.0


def test_env_is_scrubbed(ws, monkeypatch):
    secrets = {
        "ANTHROPIC_API_KEY": "sk-canary-1",
        "GITHUB_TOKEN": "ghp-canary-2",
        "AWS_SECRET_ACCESS_KEY": "aws-canary-3",
        "HTTP_PROXY": "http://proxy-canary-4",
        "LD_PRELOAD": "/canary-5.so",
        "NOT_ALLOWED": "canary-6",
    }
    for k, v in secrets.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("LANG", "C.UTF-8")
    s = Sandbox([ws])
    env = s.build_env()
    assert "PATH" in env and env["LANG"] == "C.UTF-8"
    for k in secrets:
        assert k not in env, k
    r = run(s.run_subprocess(["env"]))
    assert r.returncode == 0 and "LANG=C.UTF-8" in r.stdout
    for v in secrets.values():
        assert v not in r.stdout, v
    # An allowlisted name passes; a denied one never does, allowlisted or not.
    s = Sandbox([ws], SandboxConfig(env_allowlist=["PATH", "NOT_ALLOWED", "GITHUB_TOKEN"]))
    r = run(s.run_subprocess(["env"]))
    assert "NOT_ALLOWED=canary-6" in r.stdout
    assert "ghp-canary-2" not in r.stdout
    assert s.build_env(["ANTHROPIC_API_KEY"]).get("ANTHROPIC_API_KEY") is None


def test_cwd_outside_the_sandbox_is_refused_as_data(ws):
    s = Sandbox([ws])
    r = run(s.run_subprocess(["pwd"], cwd="/etc"))
    assert r == SubprocessResult("", "cwd outside sandbox: /etc", None, False, False)
    r = run(s.run_subprocess(["pwd"], cwd=ws / ".." / ".."))
    assert r.returncode is None and r.stderr.startswith("cwd outside sandbox: ")
    (ws / "sub").mkdir()
    r = run(s.run_subprocess(["pwd"], cwd=ws / "sub"))
    assert (r.returncode, r.stdout) == (0, f"{(ws / 'sub').resolve()}\n")
    r = run(s.run_subprocess(["pwd"], cwd="sub"))
    assert r.stdout == f"{(ws / 'sub').resolve()}\n"
    r = run(s.run_subprocess(["pwd"]))
    assert r.stdout == f"{ws.resolve()}\n"


def test_empty_argv_is_refused_as_data(ws):
    s = Sandbox([ws])
    assert run(s.run_subprocess([])) == SubprocessResult("", "argv is empty", None, False, False)
    with pytest.raises(TypeError):
        run(s.run_subprocess("echo hi"))
    assert run(s.run_subprocess(["echo", "hi"])).stdout == "hi\n"


def test_binary_not_found_is_refused_as_data(ws):
    s = Sandbox([ws])
    r = run(s.run_subprocess(["no-such-binary-4711", "x"]))
    assert r == SubprocessResult("", "binary not found: no-such-binary-4711", None, False, False)
    r = run(s.run_subprocess(["./missing.bin"]))
    assert r.returncode is None and r.stderr == "binary not found: ./missing.bin"
    assert run(s.run_subprocess(["true"])).returncode == 0
    assert run(s.run_subprocess(["false"])).returncode == 1


def test_timeout_kills_and_reports(ws):
    s = Sandbox([ws], timeout=0.5)
    r = run(s.run_subprocess(["sleep", "30"]))
    assert r.timed_out is True and r.returncode is None
    full = run(s.run(["sleep", "30"]))
    assert full.kind == "timed_out" and full.duration < 5.0
    r = run(s.run_subprocess(["sleep", "0.05"]))
    assert (r.timed_out, r.returncode) == (False, 0)


def test_output_cap_keeps_80_percent_for_stdout(ws):
    s = Sandbox([ws], SandboxConfig(max_output_bytes=1000))
    r = run(s.run_subprocess(
        ["sh", "-c", "head -c 5000 /dev/zero | tr '\\0' o; head -c 5000 /dev/zero | tr '\\0' e >&2"]
    ))
    assert r.truncated is True and r.returncode == 0
    assert r.stdout.count("o") == 800 and r.stderr.count("e") == 200
    r = run(s.run_subprocess(["sh", "-c", "printf %0500d 0; printf %0100d 0 >&2"]))
    assert r.truncated is False and len(r.stdout) == 500 and len(r.stderr) == 100


def test_stdin_bytes_reach_the_program_and_output_decodes_with_replacement(ws):
    s = Sandbox([ws])
    data = bytes(range(256)) * 4
    assert run(s.run_subprocess(["wc", "-c"], stdin=data)).stdout.strip() == "1024"
    r = run(s.run_subprocess(["cat"], stdin=b"ok \xff\xfe end"))
    assert r.stdout == "ok \ufffd\ufffd end"
    assert run(s.run_subprocess(["cat"], stdin="text ü")).stdout == "text ü"
    assert run(s.run_subprocess(["cat"])).stdout == ""


def test_rlimit_as_holds_the_memory_limit(ws):
    s = Sandbox([ws], SandboxConfig(max_memory_mb=64))
    r = run(s.run_subprocess(["cat", "/proc/self/limits"]))
    line = next(l for l in r.stdout.splitlines() if l.startswith("Max address space"))
    assert line.split()[3:5] == [str(64 << 20), str(64 << 20)]
    big = ["perl", "-e", "my $x = 'a' x (200 * 1024 * 1024); print length($x)"]
    r = run(s.run_subprocess(big))
    assert r.returncode not in (0, None) and str(200 * 1024 * 1024) not in r.stdout
    unlimited = Sandbox([ws], SandboxConfig(max_memory_mb=0))
    r = run(unlimited.run_subprocess(big))
    assert (r.returncode, r.stdout) == (0, str(200 * 1024 * 1024))
    r = run(unlimited.run_subprocess(["cat", "/proc/self/limits"]))
    line = next(l for l in r.stdout.splitlines() if l.startswith("Max address space"))
    assert line.split()[3] == "unlimited"


def test_paths_resolve_inside_and_escapes_raise(ws, tmp_path):
    (ws / "a.txt").write_text("a")
    (ws / "link").symlink_to("/etc")
    ro = tmp_path / "ro"
    ro.mkdir()
    s = Sandbox([ws], read_only_dirs=[ro])
    p = s.resolve_path("a.txt")
    assert isinstance(p, ResolvedPath) and p == (ws / "a.txt").resolve()
    assert p.read_text() == "a" and p.allowed_dir == ws.resolve() and p.read_only is False
    assert s.resolve_path("new/dir/f.txt") == ws.resolve() / "new" / "dir" / "f.txt"
    assert s.resolve_path("f", base_dir=ro).read_only is True
    for bad in ["../x", "/etc/passwd", "link/passwd", "missing/../../etc", "a.txt/../../x", ""]:
        with pytest.raises(PathSafetyError):
            s.resolve_path(bad)
        assert not s.validate_file_path(bad)
    with pytest.raises(ValueError):
        s.resolve_path("x", base_dir="/etc")
    assert s.validate_file_path(ws / "a.txt") and s.validate_file_path("a.txt")
    assert s.validate_file_path(b"a.txt") and s.resolve_path(b"a.txt") == p
    # A dangling symlink into a read-only dir is refused; once its target
    # exists it resolves there, read-only.
    inner = ws / "inner"
    inner.mkdir()
    nested = Sandbox([ws], read_only_dirs=[inner])
    (ws / "dl").symlink_to("inner/newfile")
    (ws / "sub").mkdir()
    (ws / "sub" / "dang").symlink_to("../inner/newfile")
    for form in ("dl", "./dl/", "sub/dang", "sub/dang/", "sub/../dl/"):
        with pytest.raises(PathSafetyError, match="symlink"):
            nested.resolve_path(form)
        assert not nested.validate_file_path(form)
    (inner / "newfile").write_text("n")
    r = nested.resolve_path("dl")
    assert r == (inner / "newfile").resolve() and r.read_only is True
    assert s.get_read_only_dirs() == [ro.resolve()]


def test_a_seed_agent_loop_runs_unchanged(ws):
    """Written against the seed's API, as an agent loop would call it."""

    async def agent_loop():
        sandbox = Sandbox(allowed_dirs=[str(ws)], config=SandboxConfig(timeout=5, max_output_bytes=4096))
        transcript = []
        for argv in (["echo", "hello"], ["ls", "-a"], ["no-such-tool"], []):
            result = await sandbox.run_subprocess(argv, cwd=str(ws))
            if result.returncode is None:
                transcript.append(f"error: {result.stderr}")
            else:
                transcript.append(result.stdout.strip())
        target = sandbox.resolve_path("notes.txt")
        with open(target, "w") as f:
            f.write("\n".join(transcript))
        assert sandbox.validate_file_path(target)
        result = await sandbox.run_subprocess(["cat", "notes.txt"])
        return result.stdout, sandbox.timeout, sandbox.get_allowed_dirs()

    out, timeout, dirs = asyncio.run(agent_loop())
    assert out.splitlines() == [
        "hello", ".", "..", "error: binary not found: no-such-tool", "error: argv is empty",
    ]
    assert timeout == 5.0 and dirs == [ws.resolve()]
