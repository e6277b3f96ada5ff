"""The curl examples of docs/openai-ollama.md, run as written against the server.

Each ```sh block of the section "Every endpoint with curl" is run with bash,
with `localhost:8080` pointed at a test server. Every command must succeed
(`curl -f` fails on an error status) and print what its endpoint answers:
JSON, NDJSON lines, or SSE events.
"""

import json
import re
import shutil
import subprocess

import pytest

from conftest import ROOT, start_server, stop_server

DOC = ROOT / "docs" / "openai-ollama.md"


def examples() -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Every endpoint with curl", 1)[1]
    section = re.split(r"\n## ", section, maxsplit=1)[0]
    return re.findall(r"```sh\n(.*?)```", section, flags=re.S)


def commands(block: str) -> list[str]:
    """The block's commands, joining continued lines and open quotes."""
    out, current = [], ""
    for line in block.splitlines():
        current = f"{current}\n{line}" if current else line
        if current.endswith("\\") or current.count("'") % 2 == 1:
            continue
        if current.strip():
            out.append(current)
        current = ""
    return out


def check_output(command: str, output: str) -> None:
    body = output.strip()
    assert body, f"no output from: {command}"
    if body.startswith("data:"):
        events = [l.removeprefix("data:").strip() for l in body.splitlines() if l.startswith("data:")]
        assert events[-1] == "[DONE]", body
        for event in events[:-1]:
            json.loads(event)
        return
    lines = body.splitlines()
    values = [json.loads(line) for line in lines] if len(lines) > 1 else [json.loads(body)]
    for value in values:
        assert "error" not in value, f"{command}: {value}"


@pytest.fixture(scope="module")
def server():
    proc, base = start_server("--mock-tokens-per-second", "0")
    yield base.removeprefix("http://")
    stop_server(proc)


def test_the_doc_has_an_example_for_every_endpoint():
    text = "\n".join(examples())
    for endpoint in ["/v1/models", "/v1/chat/completions", "/v1/completions", "/api/version",
                     "/api/tags", "/api/ps", "/api/show", "/api/generate", "/api/chat"]:
        assert endpoint in text, endpoint


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
@pytest.mark.parametrize("block", examples())
def test_each_curl_example_works_as_written(server, block):
    for command in commands(block):
        command = command.replace("localhost:8080", server)
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
        check_output(command, done.stdout)
