"""Claude Code and Codex CLI, the real programs from the npm registry
(tests/agents, installed by scripts/test with `npm ci`), each completing a
one-tool task against the mock, offline.

Each run happens in a child process of this file (`python test_agents.py
SCENARIO DIR`, the `main` below): where the machine allows it, that child
lives in a network namespace of its own (`unshare -rn`) that has nothing but
a loopback interface, so the agent cannot reach anything but the server,
whatever it tries. The child starts the server (a mock model with a context
large enough for the agent's prompt, and a small one that is not), puts a
relay in front of it that keeps every byte the agent sent, runs the agent
with its privacy switches on, and prints what happened as one JSON line:
the agent's output, the requests the server got, its metrics and the files
the agent wrote. The tests below read that line.

The task text reaches the model verbatim, so `@mock(tool_call=1)` in it
makes the mock call the first tool offered, with only its required
parameters (strings "test"): Claude Code's `Write` writes the file `test`
holding `test`; Codex's `exec_command` runs the command `test`, which exits
with 1. A tool's result is answered with text, so each run is two requests.
"""

import json
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import urllib.request
import warnings

import pytest

from conftest import ROOT, server_binary, start_server, stop_server

AGENTS = ROOT / "tests" / "agents"
CLAUDE = AGENTS / "node_modules" / ".bin" / "claude"
CODEX = AGENTS / "node_modules" / ".bin" / "codex"
DOC = ROOT / "docs" / "agents.md"
KEY = "agent-key"
TASK = "Write the file hello.txt @mock(tool_call=1)"
# The same task whose final answer is 2,000 tokens long: far past any cap
# a client that names no length could meet.
LONG_TASK = "Write the file hello.txt @mock(tool_call=1, length=2000)"
# The mock model the agents use, with a context that holds their trimmed
# prompts (about 2,400 tokens for Claude Code with one tool, 700 for Codex
# with an empty base prompt), and one whose context does not.
CONFIG = """
[[models]]
name = "agent"
max_context_len = 16384

[[models]]
name = "small"
max_context_len = 256
"""
# What the agents get of the host's environment: nothing but a PATH.
PATH = "/usr/local/bin:/usr/bin:/bin"
# A run takes 1-3 s, 8 s for Codex's built-in provider (its WebSocket
# retries); the bound is for liveness only.
RUN_TIMEOUT = 90


def agents_missing() -> str | None:
    """Why the agents cannot run here, or None."""
    if not (CLAUDE.exists() and CODEX.exists()):
        return "tests/agents/node_modules is missing (scripts/test runs npm ci there, when npm and the registry are at hand)"
    if shutil.which("node") is None:
        return "node is not installed (Codex's launcher is a node script)"
    return None


pytestmark = pytest.mark.skipif(agents_missing() is not None, reason=str(agents_missing()))


# --- in the test process ---------------------------------------------------


def offline_prefix() -> tuple[list[str], str | None]:
    """The command that runs a child in a network namespace with only a
    loopback interface, or an empty one and why it cannot be had."""
    prefix = ["unshare", "-rn", "sh", "-c", 'ip link set lo up && exec "$@"', "sh"]
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return [], "unshare or ip is missing"
    probe = subprocess.run([*prefix, "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return [], f"no network namespace here ({probe.stderr.strip()})"
    return prefix, None


def run_scenario(scenario: str) -> dict:
    """Runs one scenario in a child (offline where possible) and returns
    what it saw. The agents' homes are in target/tmp: Codex will not set
    up its helper links under /tmp."""
    prefix, why = offline_prefix()
    if why:
        warnings.warn(f"the agent runs without a network namespace of its own: {why}; only its privacy switches keep it offline")
    scratch_root = ROOT / "target" / "tmp"
    scratch_root.mkdir(parents=True, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix=f"agents-{scenario}-", dir=scratch_root)
    try:
        done = subprocess.run(
            [*prefix, sys.executable, __file__, scenario, scratch],
            env=dict(os.environ, RKLLM_SERVER_BIN=server_binary()),
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT * 3,
        )
        assert done.returncode == 0, done.stderr[-4000:]
        return json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def body(request: dict) -> dict:
    assert request["headers"].get("content-type", "").startswith("application/json"), request["headers"]
    return json.loads(request["body"])


def counter(metrics: str, api: str) -> float:
    found = re.search(r'^rkllm_http_requests_total\{api="' + api + r'"\} (\S+)$', metrics, flags=re.M)
    return float(found.group(1)) if found else 0.0


def test_claude_code_writes_a_file_through_the_messages_api():
    seen = run_scenario("claude")
    done = seen["agent"]
    assert done["rc"] == 0, done["stderr"][-2000:]
    result = json.loads(done["stdout"])
    assert result["type"] == "result" and result["subtype"] == "success" and not result["is_error"]
    assert result["num_turns"] == 2 and result["stop_reason"] == "end_turn" and result["result"]
    # The Write tool ran with the mock's arguments.
    assert seen["files"] == {"test": "test"}

    # Two streamed requests on the beta path, with the key in x-api-key.
    requests = seen["requests"]
    assert [(r["method"], r["target"]) for r in requests] == [("POST", "/v1/messages?beta=true")] * 2
    assert all(r["headers"]["x-api-key"] == KEY and r["headers"]["anthropic-version"] for r in requests)
    first, second = (body(r) for r in requests)
    assert first["model"] == second["model"] == "agent" and first["stream"] and second["stream"]
    # Its placeholder tool is deferred, so the model was offered only Write.
    assert [(t["name"], t.get("defer_loading", False)) for t in first["tools"]] == [
        ("DeferredToolPlaceholder", True),
        ("Write", False),
    ]
    # The billing block is not sent (CLAUDE_CODE_ATTRIBUTION_HEADER=0).
    assert not any("x-anthropic-billing-header" in block["text"] for block in first["system"])
    assert first["messages"][0]["role"] == "user" and TASK in json.dumps(first["messages"][0])
    # Its environment comes as a system message, the last of the first request.
    assert first["messages"][-1]["role"] == "system"

    # The second request carries the call the server made and the tool's result.
    *_, asked, answered = second["messages"]
    [call] = [b for b in asked["content"] if b["type"] == "tool_use"]
    assert asked["role"] == "assistant" and call["name"] == "Write" and call["id"].startswith("toolu_")
    assert call["input"] == {"file_path": "test", "content": "test"}
    [tool_result] = [b for b in answered["content"] if b["type"] == "tool_result"]
    assert tool_result["tool_use_id"] == call["id"] and not tool_result.get("is_error")
    assert "test" in json.dumps(tool_result["content"])

    assert counter(seen["metrics"], "anthropic") == 2


def test_claude_code_is_told_when_its_prompt_does_not_fit():
    seen = run_scenario("claude-small")
    done = seen["agent"]
    assert done["rc"] == 1
    result = json.loads(done["stdout"])
    # The server's words (`prompt is too long: …`) are Anthropic's, which
    # Claude Code knows: it says so and does not send the request again
    # (other words for a 400 make it retry with fewer betas, 6 requests).
    assert result["is_error"] and result["api_error_status"] == 400
    assert result["terminal_reason"] == "prompt_too_long"
    assert result["result"].startswith("Prompt is too long"), result["result"]
    assert seen["files"] == {}
    assert [r["target"] for r in seen["requests"]] == ["/v1/messages?beta=true"]


def codex_events(done: dict) -> list[dict]:
    return [json.loads(line) for line in done["stdout"].splitlines() if line.startswith("{")]


def test_codex_runs_a_command_through_the_responses_api():
    seen = run_scenario("codex")
    done = seen["agent"]
    assert done["rc"] == 0, done["stderr"][-2000:]
    events = codex_events(done)
    types = [e["type"] for e in events]
    assert types[0] == "thread.started" and types[-1] == "turn.completed", types
    # No error item: the model catalog names the model.
    assert not [e for e in events if e.get("item", {}).get("type") == "error"]
    [command] = [e["item"] for e in events if e["type"] == "item.completed" and e["item"]["type"] == "command_execution"]
    assert command["command"].endswith("test") and command["exit_code"] == 1
    [message] = [e["item"] for e in events if e["type"] == "item.completed" and e["item"]["type"] == "agent_message"]
    assert message["text"]

    requests = seen["requests"]
    assert [(r["method"], r["target"]) for r in requests] == [("POST", "/v1/responses")] * 2
    assert all(r["headers"]["authorization"] == f"Bearer {KEY}" for r in requests)
    assert all("content-encoding" not in r["headers"] for r in requests)
    first, second = (body(r) for r in requests)
    assert first["model"] == "agent" and first["stream"] and "instructions" not in first
    assert first["tools"][0]["name"] == "exec_command"
    assert TASK in json.dumps(first["input"][-1])
    # The second request carries the call the server made and the command's output.
    [call] = [i for i in second["input"] if i.get("type") == "function_call"]
    assert call["name"] == "exec_command" and json.loads(call["arguments"]) == {"cmd": "test"}
    [output] = [i for i in second["input"] if i.get("type") == "function_call_output"]
    assert output["call_id"] == call["call_id"]
    assert "exited with code 1" in json.dumps(output["output"])

    assert counter(seen["metrics"], "responses") == 2


def test_codex_completes_a_task_whose_answer_is_longer_than_any_default_cap():
    # Codex names no length (no max_output_tokens): the answer runs until
    # the model ends it, 2,000 tokens here, and the turn completes.
    seen = run_scenario("codex-long")
    done = seen["agent"]
    assert done["rc"] == 0, done["stderr"][-2000:]
    events = codex_events(done)
    types = [e["type"] for e in events]
    assert types[-1] == "turn.completed", types
    assert not [e for e in events if e["type"] in ("error", "turn.failed")], events
    [message] = [e["item"] for e in events if e["type"] == "item.completed" and e["item"]["type"] == "agent_message"]
    assert message["text"]
    # The answer's 2,000 tokens (and the first answer's few), as Codex counts them.
    [completed] = [e for e in events if e["type"] == "turn.completed"]
    assert completed["usage"]["output_tokens"] >= 2000, completed
    requests = seen["requests"]
    assert all("max_output_tokens" not in body(r) for r in requests)


def test_codex_with_its_built_in_provider_falls_back_from_the_websocket():
    seen = run_scenario("codex-builtin")
    done = seen["agent"]
    assert done["rc"] == 0, done["stderr"][-2000:]
    events = codex_events(done)
    # Each WebSocket attempt is refused at once with 405; after its last
    # retry Codex posts, and the task completes.
    retries = [e["message"] for e in events if e["type"] == "error"]
    assert retries and all("405 Method Not Allowed" in m for m in retries), retries
    assert any(e["type"] == "item.completed" and e["item"]["type"] == "agent_message" for e in events)
    upgrades = [r for r in seen["requests"] if r["method"] == "GET"]
    assert upgrades and all(r["target"] == "/v1/responses" and r["headers"]["upgrade"] == "websocket" for r in upgrades)
    posts = [r for r in seen["requests"] if r["method"] == "POST"]
    assert [r["target"] for r in posts] == ["/v1/responses"] * 2
    assert counter(seen["metrics"], "responses") >= 2


def test_codex_is_told_when_its_prompt_does_not_fit():
    seen = run_scenario("codex-small")
    done = seen["agent"]
    events = codex_events(done)
    errors = [e for e in events if e["type"] in ("error", "turn.failed")]
    assert errors, events
    assert any("context" in json.dumps(e).lower() for e in errors), errors
    assert not [e for e in events if e.get("item", {}).get("type") == "command_execution"]


# --- in the child (python test_agents.py SCENARIO DIR) ---------------------


class Relay:
    """A TCP relay in front of the server that keeps the bytes each
    connection sent to it (the agent's requests), as a recording proxy
    would, without touching what goes either way."""

    def __init__(self, port: int):
        self.port = port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.sent: list[bytearray] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    def _accept(self) -> None:
        while True:
            client, _ = self.listener.accept()
            upstream = socket.create_connection(("127.0.0.1", self.port))
            kept = bytearray()
            self.sent.append(kept)
            threading.Thread(target=pump, args=(client, upstream, kept), daemon=True).start()
            threading.Thread(target=pump, args=(upstream, client, None), daemon=True).start()

    def requests(self) -> list[dict]:
        return [request for kept in self.sent for request in parse_requests(bytes(kept))]


def pump(source: socket.socket, sink: socket.socket, kept: bytearray | None) -> None:
    try:
        while data := source.recv(65536):
            if kept is not None:
                kept += data
            sink.sendall(data)
    except OSError:
        pass
    finally:
        try:
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def parse_requests(raw: bytes) -> list[dict]:
    """The HTTP/1.1 requests in what one connection sent (bodies with a
    content-length or chunked)."""
    found = []
    while raw:
        head, sep, raw = raw.partition(b"\r\n\r\n")
        if not sep:
            break
        line, *fields = head.decode("latin-1").split("\r\n")
        method, target, _ = line.split(" ", 2)
        headers = {}
        for field in fields:
            name, _, value = field.partition(":")
            headers[name.strip().lower()] = value.strip()
        if "content-length" in headers:
            size = int(headers["content-length"])
            content, raw = raw[:size], raw[size:]
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            content = b""
            while True:
                size_line, _, raw = raw.partition(b"\r\n")
                size = int(size_line.split(b";")[0], 16)
                content, raw = content + raw[:size], raw[size + 2 :]
                if size == 0:
                    break
        else:
            content = b""
        found.append({"method": method, "target": target, "headers": headers, "body": content.decode("utf-8", "replace")})
    return found


def doc_block(heading: str, language: str) -> str:
    """The first ```language block of the section `## heading` of
    docs/agents.md: the page's settings are the ones tested."""
    section = DOC.read_text(encoding="utf-8").split(f"\n## {heading}\n", 1)[1]
    section = re.split(r"\n## ", section, maxsplit=1)[0]
    return re.findall(rf"```{language}\n(.*?)```", section, flags=re.S)[0]


def fill(text: str, base: str, model: str) -> str:
    return text.replace("http://<board>:8080", base).replace("<model>", model).replace("<key>", KEY)


def claude_command(base: str, model: str, home: pathlib.Path) -> tuple[list[str], dict]:
    # The page's `export NAME=VALUE ...` lines (a comment after them).
    env = {"PATH": PATH, "HOME": str(home)}
    for line in fill(doc_block("Claude Code", "sh"), base, model).splitlines():
        if line.startswith("export "):
            for setting in line.removeprefix("export ").split(" #")[0].split():
                name, _, value = setting.partition("=")
                env[name] = value
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1" and env["ANTHROPIC_MODEL"] == model
    # The scratch folder is inside this repository: not a git work tree for it.
    env["GIT_CEILING_DIRECTORIES"] = str(home.parent)
    # `--tools Write` offers that one tool (the prompt shrinks from 12k
    # tokens to 2.4k); `--allowedTools Write` lets it run without asking.
    command = [str(CLAUDE), "-p", TASK, "--tools", "Write", "--allowedTools", "Write", "--output-format", "json"]
    return command, env


def codex_command(base: str, model: str, home: pathlib.Path, builtin: bool, long: bool = False) -> tuple[list[str], dict]:
    codex_home = home / ".codex"
    codex_home.mkdir()
    config = fill(doc_block("Codex CLI", "toml"), base, model).replace("/home/<user>/.codex", str(codex_home))
    catalog = json.loads(fill(doc_block("Codex CLI", "json"), base, model))
    (codex_home / "rkllm-models.json").write_text(json.dumps(catalog))
    if builtin:
        # The built-in provider pointed at the server, as the page says:
        # it tries a WebSocket first.
        config = re.sub(r'model_provider = "rkllm"\n', "", config)
        config = re.sub(r"\[model_providers\.rkllm\]\n(.+\n)+", "", config)
        config = f'openai_base_url = "{base}/v1"\n' + config
    (codex_home / "config.toml").write_text(config)
    env = {"PATH": PATH, "HOME": str(home), "CODEX_HOME": str(codex_home), "RKLLM_API_KEY": KEY}
    task = LONG_TASK if long else TASK
    command = [str(CODEX), "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", "--ephemeral", "--json", task]
    return command, env


def main(scenario: str, scratch: str) -> None:
    root = pathlib.Path(scratch).resolve()
    config = root / "server.toml"
    config.write_text(CONFIG)
    agent, _, variant = scenario.partition("-")
    # Codex's built-in provider sends no key (it wants `codex login`): that
    # server has none.
    keys = [] if variant == "builtin" else ["--api-key", KEY]
    proc, base = start_server("--config", str(config), *keys, "--mock-tokens-per-second", "0")
    try:
        relay = Relay(int(base.rsplit(":", 1)[1]))
        home, work = root / "home", root / "work"
        home.mkdir()
        work.mkdir()
        model = "small" if variant == "small" else "agent"
        if agent == "claude":
            command, env = claude_command(relay.base, model, home)
        else:
            command, env = codex_command(relay.base, model, home, builtin=variant == "builtin", long=variant == "long")
        done = subprocess.run(command, cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=RUN_TIMEOUT)
        metrics = urllib.request.Request(base + "/metrics", headers={"Authorization": f"Bearer {KEY}"} if keys else {})
        seen = {
            "agent": {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr},
            "requests": relay.requests(),
            "metrics": urllib.request.urlopen(metrics, timeout=10).read().decode(),
            "files": {p.name: p.read_text() for p in work.iterdir() if p.is_file()},
        }
    finally:
        stop_server(proc)
    print(json.dumps(seen))


if __name__ == "__main__":
    main(*sys.argv[1:])
