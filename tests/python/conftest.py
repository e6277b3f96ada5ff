"""Shared fixtures: the server binary and a server on HTTP."""

import gc
import os
import pathlib
import re
import socket
import subprocess
import threading

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def mock_tokens(text: str) -> int:
    """Tokens `text` is by the mock's tokenizer (server/assets/
    mock-tokenizer.json), counted by Hugging Face's own `tokenizers`: what
    the server's counts of the mock must equal."""
    from tokenizers import Tokenizer

    global _MOCK_TOKENIZER
    if _MOCK_TOKENIZER is None:
        _MOCK_TOKENIZER = Tokenizer.from_file(str(ROOT / "server" / "assets" / "mock-tokenizer.json"))
    return len(_MOCK_TOKENIZER.encode(text, add_special_tokens=False).ids)


_MOCK_TOKENIZER = None


def server_binary() -> str:
    """The rkllm-server binary built by `cargo test` (or RKLLM_SERVER_BIN)."""
    path = os.environ.get("RKLLM_SERVER_BIN") or str(ROOT / "target" / "debug" / "rkllm-server")
    if not os.path.exists(path):
        pytest.fail(f"{path} does not exist: build it first (scripts/test does)")
    return path


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture(autouse=True)
def _collect_what_async_tests_dropped(request):
    """After an async test, collects the HTTP clients its libraries made and
    dropped, once its event loop has stopped. Left to the collector, one
    would be finalised during a later async test: its close would then run
    in that test's loop on a transport of the closed one and fail that test
    with "Event loop is closed", though nothing was wrong with it."""
    yield
    if request.node.get_closest_marker("anyio") is not None:
        gc.collect()


def start_server(*args: str, listen: str = "127.0.0.1:0", log: list | None = None):
    """Starts the server on `listen` (a free port by default); returns the
    process and its base URL. The lines it printed before listening are
    kept in `proc.startup_lines`, and the later ones in `log` when given."""
    # Never the developer's own model store.
    env = dict(os.environ, XDG_DATA_HOME=str(ROOT / "target" / "tmp" / "no-store"))
    proc = subprocess.Popen(
        [server_binary(), "--listen", listen, *args],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = None
    proc.startup_lines = []
    for line in proc.stderr:
        proc.startup_lines.append(line)
        if line.startswith("rkllm-server listening on http://"):
            base = line.strip().removeprefix("rkllm-server listening on ")
            break
    if base is None:
        proc.kill()
        pytest.fail("the server did not start")
    # The log it writes from now on is read and dropped: a pipe nobody reads
    # fills up (64 KiB, a few hundred requests' log lines) and the server's
    # next write to it blocks.
    threading.Thread(target=_drain, args=(proc.stderr, log), daemon=True).start()
    return proc, base


def _drain(stream, log: list | None = None) -> None:
    for line in stream:
        if log is not None:
            log.append(line)


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


FAKE_TEXT = "Hello from the fake runtime: 東京 🦀 naïve café."


def build_fake(tmp: pathlib.Path) -> pathlib.Path:
    """Builds the fake librkllmrt.so (tests/fake-rkllmrt, ABI 1.3.0) with cc."""
    out = tmp / "librkllmrt-fake.so"
    subprocess.run(
        [
            os.environ.get("RKLLM_FAKE_CC", "cc"), "-shared", "-fPIC", "-O1", "-DFAKE_ABI_V1_3",
            "-I", str(ROOT / "rkllm-sys" / "include"), str(ROOT / "tests" / "fake-rkllmrt" / "fake_rkllmrt.c"),
            "-o", str(out), "-lpthread",
        ],
        check=True,
    )
    return out


@pytest.fixture
def fake_server(tmp_path):
    """A server on the rkllm backend with the fake runtime; its model file
    holds FAKE_TEXT, which the fake generates. Yields (base URL, log path)."""
    runtime = build_fake(tmp_path)
    model = tmp_path / "fake.rkllm"
    model.write_text(FAKE_TEXT)
    log = tmp_path / "fake.log"
    os.environ["FAKE_RKLLM_LOG"] = str(log)
    try:
        proc, base = start_server("--backend", "rkllm", "--runtime", str(runtime), "--model", str(model))
    finally:
        del os.environ["FAKE_RKLLM_LOG"]
    yield base, log
    stop_server(proc)


def build_fake_rknn(tmp: pathlib.Path) -> pathlib.Path:
    """Builds the fake librknnrt.so (tests/fake-rknnrt) with cc."""
    out = tmp / "librknnrt-fake.so"
    subprocess.run(
        [
            os.environ.get("RKLLM_FAKE_CC", "cc"), "-shared", "-fPIC", "-O1",
            "-I", str(ROOT / "rknn-sys" / "include"), str(ROOT / "tests" / "fake-rknnrt" / "fake_rknnrt.c"),
            "-o", str(out),
        ],
        check=True,
    )
    return out


def free_port() -> int:
    """A loopback port free now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def balancer_config(ports, agent_ports, front, peer, stats, sock, without=()) -> str:
    """The shipped HAProxy config (deploy/haproxy/haproxy.cfg) for boards on
    loopback: the boards of `ports` (name to port, with their agents'
    `agent_ports`) in place of its addresses, the others' lines removed,
    and each line of `without` (which must be in it once) removed."""
    text = (ROOT / "deploy" / "haproxy" / "haproxy.cfg").read_text()
    text = text.replace("    log /dev/log local0 info\n", "    log stdout format raw local0 info\n")
    text = text.replace("/run/haproxy/admin.sock", str(sock))
    text = text.replace("bind :8080", f"bind 127.0.0.1:{front}")
    text = text.replace("peer rkllm-balancer 127.0.0.1:10000", f"peer rkllm-balancer 127.0.0.1:{peer}")
    text = text.replace("bind 127.0.0.1:8404", f"bind 127.0.0.1:{stats}")
    for line in without:
        assert text.count(line) == 1, f"the shipped config has not {line!r} once"
        text = text.replace(line, "")
    lines = []
    for line in text.splitlines():
        match = re.match(r"    server (board\d) 192\.168\.1\.\d+:8080$", line)
        if match:
            name = match.group(1)
            if name not in ports:
                continue
            line = f"    server {name} 127.0.0.1:{ports[name]} agent-port {agent_ports[name]}"
        lines.append(line)
    out = "\n".join(lines) + "\n"
    assert all(f"server {n} 127.0.0.1:" in out for n in ports)
    return out
