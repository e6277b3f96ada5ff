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


def start_server(*args: str):
    """Starts the server on 127.0.0.1:0; returns the process and its base URL."""
    proc = subprocess.Popen(
        [server_binary(), "--listen", "127.0.0.1:0", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = None
    for line in proc.stderr:
        if line.startswith("rkllm-server listening on http://"):
            base = line.strip().removeprefix("rkllm-server listening on ")
            break
    if base is None:
        proc.kill()
        pytest.fail("the server did not start")
    return proc, base


def stop_server(proc) -> None:
    proc.terminate()
    assert proc.wait(timeout=10) == 0


@pytest.fixture
def http_server():
    """A server with the mock at 20 tokens/s; yields its /mcp URL."""
    proc, base = start_server("--mock-tokens-per-second", "20")
    yield base + "/mcp"
    stop_server(proc)


@pytest.fixture
def api_server():
    """A server for the OpenAI and Ollama APIs; yields its base URL."""
    proc, base = start_server("--mock-tokens-per-second", "400", "--api-key", "test-key")
    yield base
    stop_server(proc)
