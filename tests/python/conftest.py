"""Shared fixtures: the server binary and a server on HTTP."""

import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def server_binary() -> str:
    """The rkllm-server binary built by `cargo test` (or RKLLM_SERVER_BIN)."""
    path = os.environ.get("RKLLM_SERVER_BIN") or str(ROOT / "target" / "debug" / "rkllm-server")
    if not os.path.exists(path):
        pytest.fail(f"{path} does not exist: build it first (scripts/test does)")
    return path


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def http_server():
    """Starts the server on 127.0.0.1:0 and yields its /mcp URL."""
    proc = subprocess.Popen(
        [server_binary(), "--listen", "127.0.0.1:0", "--mock-tokens-per-second", "20"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = None
    for line in proc.stderr:
        if line.startswith("rkllm-server listening on http://"):
            url = line.strip().removeprefix("rkllm-server listening on ") + "/mcp"
            break
    if url is None:
        proc.kill()
        pytest.fail("the server did not start")
    yield url
    proc.terminate()
    assert proc.wait(timeout=10) == 0
