"""rkllm-server driven by Node.js clients from the npm registry, installed
by scripts/test into tests/node/node_modules: the MCP TypeScript SDK's
client (@modelcontextprotocol/client), which in its `auto` mode probes
`server/discover` first: the server answers it, so the client speaks the
stateless revision 2026-07-28."""

import json
import os
import pathlib
import shutil
import subprocess

import pytest
import httpx

from conftest import ROOT, server_binary, start_server, stop_server

NODE = ROOT / "tests" / "node"


def node_ready() -> str | None:
    """Why the Node.js clients cannot run here, or None."""
    node = shutil.which("node")
    if node is None:
        return "node is not installed (scripts/test installs it with apt-get where it can)"
    major = int(subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip().lstrip("v").split(".")[0])
    if major < 20:
        return f"node {major} is older than the clients need (20)"
    if not (NODE / "node_modules" / "@modelcontextprotocol" / "client").is_dir():
        return "tests/node/node_modules is missing (scripts/test runs npm ci there)"
    return None


pytestmark = pytest.mark.skipif(node_ready() is not None, reason=str(node_ready()))


def run_node(script: str, *args: str, env: dict | None = None) -> dict:
    done = subprocess.run(
        ["node", script, *args], cwd=NODE, capture_output=True, text=True, timeout=120,
        env=None if env is None else dict(os.environ, **env),
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def check_generate(seen: dict) -> None:
    # The probe was answered, so the client speaks the stateless revision
    # (a silent server would have held it 10 minutes, beyond the time
    # limit above).
    assert seen["era"] == "modern"
    assert seen["protocolVersion"] == "2026-07-28"
    assert seen["server"]["name"] == "rkllm-server"
    assert seen["tools"] == ["generate"]
    assert not seen["isError"]
    assert seen["text"] and seen["structured"]["text"] == seen["text"]
    assert seen["structured"]["finish_reason"] == "length"
    assert seen["structured"]["usage"]["completion_tokens"] == 12
    assert seen["progress"] >= 1


def test_the_typescript_sdk_in_auto_mode_over_http():
    proc, base = start_server("--mock-tokens-per-second", "400")
    try:
        # What the probe gets: the revisions, at once, before any
        # initialize — never a 5xx or a wait.
        probe = {"jsonrpc": "2.0", "id": "server-discover-probe-1", "method": "server/discover",
                 "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                                      "io.modelcontextprotocol/clientCapabilities": {}}}}
        reply = httpx.post(base + "/mcp", json=probe, timeout=10,
                           headers={"accept": "application/json, text/event-stream",
                                    "mcp-protocol-version": "2026-07-28",
                                    "mcp-method": "server/discover"})
        assert reply.status_code == 200
        result = reply.json()["result"]
        assert reply.json()["id"] == "server-discover-probe-1"
        assert result["supportedVersions"][0] == "2026-07-28" and "2025-11-25" in result["supportedVersions"]
        assert result["resultType"] == "complete"
        assert "`generate` tool" in result["instructions"]
        check_generate(run_node("mcp_auto.mjs", "http", base + "/mcp"))
    finally:
        stop_server(proc)


def test_the_typescript_sdk_in_auto_mode_over_stdio():
    check_generate(run_node("mcp_auto.mjs", "stdio", server_binary(), "--stdio", "--mock-tokens-per-second", "400"))


def test_the_typescript_sdk_pinned_to_2026_07_28_over_http_and_stdio():
    pinned = {"MCP_MODE": "2026-07-28"}
    proc, base = start_server("--mock-tokens-per-second", "400")
    try:
        check_generate(run_node("mcp_auto.mjs", "http", base + "/mcp", env=pinned))
    finally:
        stop_server(proc)
    check_generate(run_node("mcp_auto.mjs", "stdio", server_binary(), "--stdio", "--mock-tokens-per-second", "400",
                            env=pinned))
