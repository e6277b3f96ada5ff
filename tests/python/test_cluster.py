"""Three servers behind Debian's haproxy with the shipped config
(deploy/haproxy/haproxy.cfg, addresses and ports rewritten for loopback,
the fourth board left out as docs/cluster.md says to remove a board), all on
127.0.0.1.

Streams go through the balancer over HTTP polling, WebSocket and OpenAI
SSE and must come back byte-exact with contiguous seq; every poll of a
stream must reach the node that holds it (the X-Rkllm-Node header names the
node that answered); subscribe and abort work through the balancer; the
busiest node gets fewer new streams; a killed node's streams end with an
error while the others finish and new work goes to the two left; a
restarted node rejoins.
"""

import asyncio
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import time
from collections import Counter

import httpx
import openai
import pytest

from conftest import ROOT, balancer_config, free_port, start_server, stop_server

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
if not os.path.exists(HAPROXY):
    pytest.skip(
        "cluster tests skipped: haproxy is not installed; scripts/test installs Debian's haproxy with "
        "apt-get where it can",
        allow_module_level=True,
    )

import websockets  # noqa: E402

NODES = ["board1", "board2", "board3"]
NODE_ARGS = ["--mock-tokens-per-second", "200", "--mock-lanes", "8", "--log-level", "warn"]


def start_node(name, config, listen="127.0.0.1:0", agent="127.0.0.1:0"):
    proc, base = start_server("--config", str(config), "--node-id", name, "--agent-listen", agent, *NODE_ARGS,
                              listen=listen)
    agent_line = next(line for line in proc.startup_lines if "agent check on tcp://" in line)
    agent_port = int(agent_line.strip().rsplit(":", 1)[1])
    return proc, base, agent_port


class Cluster:
    def __init__(self, tmp: pathlib.Path):
        self.tmp = tmp
        self.procs, self.bases, self.ports, self.agent_ports = {}, {}, {}, {}
        # Room for a burst: 100 streams on three nodes running 8 at a time.
        self.config = tmp / "node.toml"
        self.config.write_text("[engine]\nqueue_len = 64\n")
        for name in NODES:
            self.start(name)
        self.sock = tmp / "admin.sock"
        front = free_port()
        config = tmp / "haproxy.cfg"
        config.write_text(balancer_config(self.ports, self.agent_ports, front, free_port(), free_port(), self.sock))
        check = subprocess.run([HAPROXY, "-c", "-f", str(config)], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
        self.log = open(tmp / "haproxy.log", "w")
        self.haproxy = subprocess.Popen([HAPROXY, "-db", "-f", str(config)], stdout=self.log, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{front}"
        deadline = time.monotonic() + 20
        while self.states() != {n: "UP" for n in NODES}:
            assert self.haproxy.poll() is None, (tmp / "haproxy.log").read_text()
            assert time.monotonic() < deadline, f"servers not up: {self.states()}"
            time.sleep(0.1)

    def start(self, name, listen="127.0.0.1:0", agent="127.0.0.1:0"):
        proc, base, agent_port = start_node(name, self.config, listen, agent)
        self.procs[name], self.bases[name], self.agent_ports[name] = proc, base, agent_port
        self.ports[name] = int(base.rsplit(":", 1)[1])

    def admin(self, command: str) -> str:
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(self.sock))
            s.sendall(command.encode() + b"\n")
            chunks = []
            while chunk := s.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def stats(self) -> dict:
        """`show stat` for the boards: name -> row (status, weight, ...)."""
        lines = self.admin("show stat").splitlines()
        header = lines[0].lstrip("# ").split(",")
        rows = {}
        for line in lines[1:]:
            row = dict(zip(header, line.split(",")))
            if row.get("pxname") == "boards" and row.get("svname", "").startswith("board"):
                rows[row["svname"]] = row
        return rows

    def states(self) -> dict:
        try:
            return {name: row["status"].split()[0] for name, row in self.stats().items()}
        except OSError:
            return {}

    def close(self):
        self.haproxy.terminate()
        self.haproxy.wait(timeout=10)
        self.log.close()
        for proc in self.procs.values():
            if proc.poll() is None:
                stop_server(proc)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("cluster"))
    yield c
    c.close()


# ---- clients -------------------------------------------------------------------

async def rpc(http, url, method, params, session=None):
    headers = {"Mcp-Session-Id": session} if session else {}
    response = await http.post(url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
                               headers=headers)
    return response


def check_chunks(chunks):
    """Contiguous seq from 0, exactly one end chunk, last; the joined text."""
    assert [c["seq"] for c in chunks] == list(range(len(chunks))), [c["seq"] for c in chunks]
    assert [c["end"] for c in chunks].count(True) == 1 and chunks[-1]["end"]
    return "".join(c["delta"] for c in chunks), chunks[-1]


async def expected_text(http, url, prompt):
    response = await rpc(http, url, "run", {"prompt": prompt})
    return response.json()["result"]["text"]


async def polled_stream(http, url, prompt, started_on=None):
    """Starts a stream and polls it to the end; returns the node that
    started it, the chunks, the nodes that answered the polls, and the
    error that ended the polling, if any. The node is also put in
    `started_on[prompt]` as soon as it is known."""
    started = await rpc(http, url, "run", {"prompt": prompt, "stream": True})
    assert started.status_code == 200 and "result" in started.json(), started.text
    stream_id = started.json()["result"]["stream_id"]
    assert started.headers["x-rkllm-stream-id"] == stream_id
    node = started.headers["x-rkllm-node"]
    if started_on is not None:
        started_on[prompt] = node
    chunks, answered, seq = [], [], 0
    while not chunks or not chunks[-1]["end"]:
        try:
            polled = await rpc(http, url, "run", {"stream_id": stream_id, "from_seq": seq, "wait_ms": 5000})
        except httpx.TransportError as err:
            return node, chunks, answered, {"status": None, "code": None, "message": repr(err)}
        answered.append(polled.headers.get("x-rkllm-node"))
        # HAProxy's own errors are JSON too (http-error in the config).
        body = polled.json()
        if "error" in body:
            return node, chunks, answered, dict(body["error"], status=polled.status_code)
        chunks.extend(body["result"]["chunks"])
        seq = len(chunks)
    return node, chunks, answered, None


async def ws_stream(url, prompt):
    async with websockets.connect(url.replace("http://", "ws://") + "/ws") as ws:
        node = ws.response.headers["x-rkllm-node"]
        await ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "run",
                                  "params": {"prompt": prompt, "stream": True}}))
        chunks = []
        while not chunks or not chunks[-1]["end"]:
            message = json.loads(await ws.recv())
            if message.get("method") == "run":
                chunks.append(message["params"])
        return node, chunks


async def sse_stream(url, prompt):
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
    messages = [{"role": "user", "content": prompt}]
    whole = await client.chat.completions.create(model="mock", messages=messages)
    parts = []
    async for chunk in await client.chat.completions.create(model="mock", messages=messages, stream=True):
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
    await client.close()
    return whole.choices[0].message.content, "".join(parts)


# ---- tests ---------------------------------------------------------------------

def test_a_hundred_streams_over_polling_websocket_and_sse_are_exact(cluster):
    async def main():
        async with httpx.AsyncClient(timeout=60) as http:
            polled = [f"polled stream {i} @mock(length=40)" for i in range(40)]
            pushed = [f"pushed stream {i} @mock(length=40)" for i in range(30)]
            expected = dict(zip(polled + pushed, await asyncio.gather(
                *(expected_text(http, cluster.url, p) for p in polled + pushed))))
            results = await asyncio.gather(
                *(polled_stream(http, cluster.url, p) for p in polled),
                *(ws_stream(cluster.url, p) for p in pushed),
                *(sse_stream(cluster.url, f"sse stream {i} @mock(length=40)") for i in range(30)),
            )
        nodes = Counter()
        for prompt, (node, chunks, answered, error) in zip(polled, results[:40]):
            assert error is None, error
            text, end = check_chunks(chunks)
            assert text == expected[prompt] and end["finish_reason"] == "stop"
            # Every poll reached the node that holds the stream.
            assert set(answered) == {node}, (node, answered)
            nodes[node] += 1
        for prompt, (node, chunks) in zip(pushed, results[40:70]):
            text, _ = check_chunks(chunks)
            assert text == expected[prompt]
            nodes[node] += 1
        for whole, streamed in results[70:]:
            assert streamed == whole and whole
        assert set(nodes) == set(NODES), nodes

    asyncio.run(main())


def test_subscribe_abort_and_mcp_sessions_reach_the_node_that_holds_them(cluster):
    async def main():
        async with httpx.AsyncClient(timeout=30) as http:
            started = await rpc(http, cluster.url, "run", {"prompt": "long @mock(length=100000)", "stream": True})
            stream_id = started.json()["result"]["stream_id"]
            node = started.headers["x-rkllm-node"]
            # A WebSocket that names the stream lands on its node, where
            # `subscribe` finds it.
            url = cluster.url.replace("http://", "ws://") + f"/ws?stream_id={stream_id}"
            async with websockets.connect(url) as ws:
                assert ws.response.headers["x-rkllm-node"] == node
                await ws.send(json.dumps({"jsonrpc": "2.0", "id": 7, "method": "subscribe",
                                          "params": {"stream_id": stream_id, "from_seq": 0}}))
                chunks = []
                while len(chunks) < 5:
                    message = json.loads(await ws.recv())
                    if message.get("id") == 7:
                        assert message["result"]["status"] == "subscribed", message
                    elif message.get("method") == "run":
                        chunks.append(message["params"])
                status = await rpc(http, cluster.url, "stream_status", {"stream_id": stream_id})
                assert status.headers["x-rkllm-node"] == node
                assert status.json()["result"]["state"] == "active"
                aborted = await rpc(http, cluster.url, "abort", {"stream_id": stream_id})
                assert aborted.headers["x-rkllm-node"] == node
                assert aborted.json()["result"] == {"aborted": True}
                while not chunks[-1]["end"]:
                    message = json.loads(await ws.recv())
                    if message.get("method") == "run":
                        chunks.append(message["params"])
                _, end = check_chunks(chunks)
                assert end["finish_reason"] == "abort"

            # An MCP session stays on the node that opened it.
            opened = await http.post(cluster.url + "/mcp", json={
                "jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                           "clientInfo": {"name": "cluster-test", "version": "1"}}})
            session = opened.headers["mcp-session-id"]
            home = opened.headers["x-rkllm-node"]
            for i in range(6):
                listed = await http.post(cluster.url + "/mcp", headers={"Mcp-Session-Id": session,
                                                                        "MCP-Protocol-Version": "2025-06-18"},
                                         json={"jsonrpc": "2.0", "id": 2 + i, "method": "tools/list"})
                assert listed.status_code == 200, listed.text
                assert listed.headers["x-rkllm-node"] == home
                assert listed.json()["result"]["tools"]

    asyncio.run(main())


def test_the_busiest_node_gets_fewer_new_streams(cluster):
    async def main():
        async with httpx.AsyncClient(timeout=30) as http:
            # board1 runs six long generations, started on it directly.
            busy = cluster.bases["board1"]
            held = []
            for i in range(6):
                started = await rpc(http, busy, "run", {"prompt": f"busy {i} @mock(length=100000)", "stream": True})
                held.append(started.json()["result"]["stream_id"])
            # Its agent now reports a sixth of the others' weight.
            deadline = time.monotonic() + 10
            while int(cluster.stats()["board1"]["weight"]) > 20:
                assert time.monotonic() < deadline, cluster.stats()["board1"]
                await asyncio.sleep(0.1)
            counts = Counter()
            for i in range(30):
                started = await rpc(http, cluster.url, "run", {"prompt": f"new {i} @mock(length=5)", "stream": True})
                counts[started.headers["x-rkllm-node"]] += 1
            for stream_id in held:
                await rpc(http, busy, "abort", {"stream_id": stream_id})
            assert counts["board1"] < min(counts["board2"], counts["board3"]), counts

    asyncio.run(main())


def test_a_killed_node_ends_its_streams_with_an_error_and_a_restarted_one_rejoins(cluster):
    async def main():
        async with httpx.AsyncClient(timeout=30) as http:
            prompts = [f"survivor {i} @mock(length=400)" for i in range(24)]
            expected = dict(zip(prompts, await asyncio.gather(*(expected_text(http, cluster.url, p) for p in prompts))))
            started_on = {}
            polling = [asyncio.create_task(polled_stream(http, cluster.url, p, started_on)) for p in prompts]
            sse = [asyncio.create_task(sse_stream(cluster.url, f"sse survivor {i} @mock(length=400)"))
                   for i in range(6)]
            # Every stream started (the balancer placed it by weight), then
            # the node that holds the most of them is killed: which node
            # that is depends on the load the earlier tests left.
            deadline = time.monotonic() + 10
            while len(started_on) < len(prompts):
                assert time.monotonic() < deadline, started_on
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)
            victim = Counter(started_on.values()).most_common(1)[0][0]
            others = tuple(n for n in NODES if n != victim)
            killed_at = time.monotonic()
            cluster.procs[victim].send_signal(signal.SIGKILL)
            cluster.procs[victim].wait()

            # New requests right after the kill all succeed, on the others.
            for i in range(20):
                reply = await rpc(http, cluster.url, "run", {"prompt": f"after {i} @mock(length=3)"})
                assert reply.status_code == 200 and "result" in reply.json(), reply.text
                assert reply.headers["x-rkllm-node"] in others
            # HAProxy takes the dead node out within about 2 s.
            while cluster.states().get(victim) != "DOWN":
                assert time.monotonic() - killed_at < 3, cluster.states()
                await asyncio.sleep(0.05)

            results = await asyncio.gather(*polling)
            sse_results = await asyncio.gather(*sse, return_exceptions=True)
        lost = 0
        for prompt, (node, chunks, answered, error) in zip(prompts, results):
            if node == victim:
                # Its client is told: by the balancer when the poll was
                # waiting on the node (502, or the connection closed), else
                # by the node the poll is redispatched to, which does not
                # know the stream.
                assert error is not None, chunks[-1:]
                told = {(502, -32603), (200, -32001), (None, None)}
                assert (error["status"], error["code"]) in told, error
                lost += 1
            else:
                assert error is None, error
                text, _ = check_chunks(chunks)
                assert text == expected[prompt]
                assert set(answered) == {node}
        assert lost > 0, "no stream was on the killed node"
        for outcome in sse_results:
            if isinstance(outcome, Exception):
                # A stream cut by the kill: the client raises.
                assert isinstance(outcome, (openai.APIError, httpx.HTTPError)), repr(outcome)
            else:
                whole, streamed = outcome
                assert streamed == whole
        return victim

    victim = asyncio.run(main())

    # Restarted on its old ports, the node is back in rotation.
    cluster.start(victim, listen=f"127.0.0.1:{cluster.ports[victim]}",
                  agent=f"127.0.0.1:{cluster.agent_ports[victim]}")
    deadline = time.monotonic() + 10
    while cluster.states().get(victim) != "UP":
        assert time.monotonic() < deadline, cluster.states()
        time.sleep(0.1)
    seen = Counter()
    for i in range(12):
        reply = httpx.post(cluster.url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "run",
                                                       "params": {"prompt": f"back {i} @mock(length=3)"}})
        assert reply.status_code == 200
        seen[reply.headers["x-rkllm-node"]] += 1
    assert seen[victim] > 0, seen


def readme_examples() -> list:
    """The README's "Try it" curl blocks up to the WebSocket section: one
    whole answer, then a stream polled to its end."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Try it", 1)[1].split("### Streaming over WebSocket", 1)[0]
    return re.findall(r"```sh\n(.*?)```", section, flags=re.S)


def test_the_readme_examples_and_rkllm_client_work_unchanged_through_the_balancer(cluster):
    if not shutil.which("jq"):
        pytest.skip("the README's polling example needs jq, which is not installed (scripts/test installs it)")
    host = cluster.url.removeprefix("http://")
    whole = httpx.post(cluster.url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "run",
                                                   "params": {"prompt": "Hello NPU"}}).json()["result"]["text"]
    capped = httpx.post(cluster.url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "run",
                                                    "params": {"prompt": "Hello NPU", "max_tokens": 32}})
    one_call, polling = readme_examples()
    out = subprocess.run(["bash", "-c", one_call.replace("localhost:8080", host)],
                         capture_output=True, text=True, check=True).stdout
    result, expected = json.loads(out)["result"], capped.json()["result"]
    assert result["text"] == expected["text"] and result["usage"] == expected["usage"]
    # The polling loop prints the stream's text: each poll reaches the
    # node that holds the stream, or the loop would stop at an error.
    out = subprocess.run(["bash", "-c", polling.replace("localhost:8080", host)],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    assert out == whole + "\n"

    client = os.environ.get("RKLLM_CLIENT_BIN") or str(ROOT / "target" / "debug" / "rkllm-client")
    for extra in (["--url", cluster.url + "/mcp"], ["--transport", "ws", "--url", cluster.url.replace("http", "ws") + "/ws"]):
        run = subprocess.run([client, "run", "Hello NPU", "--stream", *extra],
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        assert run.stdout.rstrip("\n") == whole, (extra, run.stdout)
