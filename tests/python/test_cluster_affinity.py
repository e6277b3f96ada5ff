"""Conversation affinity through Debian's haproxy with the shipped config
(deploy/haproxy/haproxy.cfg, rewritten for loopback as in test_cluster.py),
in front of three servers on the RKLLM runtime test double
(tests/fake-rkllmrt): a model with the mock tokenizer and Qwen2.5's own chat
template, conversation snapshots on, each board with its own snapshot
directory and its own double's log.

A conversation's next turn is cheap only on the board that answered it
before: there the runtime starts from the conversation's snapshot and
prefills the new messages; anywhere else it prefills the conversation again.
The shipped config keeps a conversation on its board by the key the client
sends (`stick on var(txn.conversation)`). Six conversations of four turns
each are sent interleaved, turn 1 of all six, then turn 2 of all six, and so
on: two over Anthropic's /v1/messages with X-Claude-Code-Session-Id, two
over OpenAI chat with `prompt_cache_key` in the body, two over OpenAI chat
with X-OpenWebUI-Chat-Id. All share a long system prompt; each opens with
its own user message (a pasted file) and every later turn sends the
conversation again with the previous answer and a new user message. Within
each round the order rotates by one: with six conversations on three
boards, plain round robin in a fixed order would put every turn of a
conversation on the same board by coincidence.

Checked:
- every later turn lands on the board that answered its conversation's
  first turn (X-Rkllm-Node), and every answer names its conversation with
  the same X-Rkllm-Conversation key;
- there it prefills its new messages and at most a small constant more (the
  template's markers around them), by the double's log and by the board's
  `rkllm_prompt_tokens_prefilled_total`, per request (requests are sent one
  at a time, so what a board's log and counter gained between two requests
  belongs to the first);
- first turns are spread over the boards (round robin by the agents'
  weights, equal on idle boards);
- each board exports the gauges a KV-cache- and LoRA-aware router reads
  (`rkllm_kv_cache_tokens`, `rkllm_kv_cache_utilization`,
  `rkllm_lora_adapters_loaded`, `rkllm_lora_requests`) and the prompt-token
  counters;
- the same conversations prefill less in all with the affinity than with the
  config's `stick on var(txn.conversation)` line removed (round robin); the
  figures of both are printed;
- a board stopped after turn 2 (SIGKILL, then taken out by HAProxy's health
  check) loses no conversation: turn 3 of a conversation that lived there is
  answered (200) by another board, and turn 4 sticks to that board and
  prefills only what is new there.
"""

import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field

import httpx
import pytest

from conftest import ROOT, balancer_config, build_fake, free_port, mock_tokens, start_server, stop_server

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
if not os.path.exists(HAPROXY):
    pytest.skip(
        "cluster tests skipped: haproxy is not installed; scripts/test installs Debian's haproxy with "
        "apt-get where it can",
        allow_module_level=True,
    )

NODES = ["board1", "board2", "board3"]
MODEL = "agent"
# What the double generates: the model file's text after its vocabulary line.
ANSWER = "I will read the code before I change anything."
TOKENIZER = ROOT / "server" / "assets" / "mock-tokenizer.json"
TEMPLATE = ROOT / "tests" / "fixtures" / "chat-templates" / "qwen2.5.jinja"
AFFINITY_LINE = "    stick on var(txn.conversation) table conversations if { var(txn.conversation) -m found }\n"

# What a later turn may prefill beyond the text of its new messages (the
# previous answer and the new user message): Qwen2.5's markers around them,
# `<|im_end|>\n` after the answer, `<|im_start|>user\n` ... `<|im_end|>\n`
# around the message and the next `<|im_start|>assistant\n`, 61 bytes, with
# room for a cut a token or a few earlier. The mock tokenizer has a token per
# byte of this text, so the same bound holds for tokens. A turn prefilled
# whole is several times its bound (checked, so that the bound can fail).
SLACK = 128

GAUGES = ["rkllm_kv_cache_tokens", "rkllm_kv_cache_utilization", "rkllm_lora_adapters_loaded"]
COUNTERS = ["rkllm_prompt_tokens_prefilled_total", "rkllm_prompt_tokens_reused_total"]


# ---- the cluster ---------------------------------------------------------------

@dataclass
class Board:
    name: str
    proc: subprocess.Popen
    base: str
    agent_port: int
    log: pathlib.Path

    @property
    def port(self) -> int:
        return int(self.base.rsplit(":", 1)[1])

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_bytes(self) -> bytes:
        try:
            return self.log.read_bytes()
        except FileNotFoundError:
            return b""

    def log_size(self) -> int:
        return self.log.stat().st_size if self.log.exists() else 0

    def metrics(self) -> str:
        return httpx.get(self.base + "/metrics", timeout=10).text

    def prefilled_tokens(self):
        """The board's prefilled-tokens counter; None once it is stopped."""
        if not self.alive():
            return None
        return counter(self.metrics(), "rkllm_prompt_tokens_prefilled_total")


def start_board(tmp: pathlib.Path, name: str, runtime: pathlib.Path) -> Board:
    """A server on the double: the model with a tokenizer and its own
    template, snapshots in a directory of its own, the double logging to a
    file of its own. A first request loads the model (and probes the
    runtime) before the balancer sends it anything, so that the agent
    reports it idle with a model loaded, as the others, and the log and
    counters hold only the conversations' requests from then on."""
    home = tmp / name
    home.mkdir()
    model = home / "agent.rkllm"
    model.write_text(f"@fake-vocab={TOKENIZER}\n{ANSWER}")
    config = home / "node.toml"
    config.write_text(
        f'[rkllm]\nsnapshot_dir = "{home / "snapshots"}"\nsnapshot_max_mb = 64\n'
        f'[[models]]\nname = "{MODEL}"\npath = "{model}"\ntokenizer = "{TOKENIZER}"\n'
        f"max_context_len = 8192\n"
        f'chat_template = {{ jinja = "{TEMPLATE}", eos_token = "<|im_end|>" }}\n'
    )
    log = home / "fake.log"
    os.environ.update(FAKE_RKLLM_LOG=str(log), FAKE_RKLLM_TOKEN_MS="0")
    try:
        proc, base = start_server("--config", str(config), "--node-id", name, "--agent-listen", "127.0.0.1:0",
                                  "--backend", "rkllm", "--runtime", str(runtime), "--log-level", "warn")
    finally:
        del os.environ["FAKE_RKLLM_LOG"], os.environ["FAKE_RKLLM_TOKEN_MS"]
    agent_line = next(line for line in proc.startup_lines if "agent check on tcp://" in line)
    board = Board(name, proc, base, int(agent_line.strip().rsplit(":", 1)[1]), log)
    warm = httpx.post(base + "/v1/chat/completions", timeout=60, json={
        "model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "Load the model."}]})
    assert warm.status_code == 200, warm.text
    return board


class Cluster:
    """Three boards on the double behind haproxy."""

    def __init__(self, tmp: pathlib.Path, runtime: pathlib.Path, affinity: bool):
        self.tmp = tmp
        self.boards = {name: start_board(tmp, name, runtime) for name in NODES}
        self.sock = tmp / "admin.sock"
        front = free_port()
        config = tmp / "haproxy.cfg"
        shipped = (ROOT / "deploy" / "haproxy" / "haproxy.cfg").read_text()
        assert shipped.count(AFFINITY_LINE) == 1, "the shipped config has no conversation affinity line"
        config.write_text(balancer_config({n: b.port for n, b in self.boards.items()},
                                          {n: b.agent_port for n, b in self.boards.items()},
                                          front, free_port(), free_port(), self.sock,
                                          without=() if affinity else (AFFINITY_LINE,)))
        check = subprocess.run([HAPROXY, "-c", "-f", str(config)], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
        self.log = open(tmp / "haproxy.log", "w")
        self.haproxy = subprocess.Popen([HAPROXY, "-db", "-f", str(config)], stdout=self.log,
                                        stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{front}"
        # Up, and idle with a model loaded: the same weight on each board.
        self.wait_for(lambda rows: all(r["status"] == "UP" and r["weight"] == "100" for r in rows.values())
                      and len(rows) == len(NODES), "the boards up at full weight")

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
        try:
            lines = self.admin("show stat").splitlines()
        except OSError:
            return {}
        header = lines[0].lstrip("# ").split(",")
        rows = {}
        for line in lines[1:]:
            row = dict(zip(header, line.split(",")))
            if row.get("pxname") == "boards" and row.get("svname", "").startswith("board"):
                row["status"] = row["status"].split()[0]
                rows[row["svname"]] = row
        return rows

    def wait_for(self, condition, what: str):
        """Waits for `condition` on the boards' stats (a guard against a
        hang, not a measure of time)."""
        deadline = time.monotonic() + 30
        while not condition(rows := self.stats()):
            assert self.haproxy.poll() is None, (self.tmp / "haproxy.log").read_text()
            assert time.monotonic() < deadline, f"waiting for {what}: {rows}"
            time.sleep(0.1)

    def close(self):
        self.haproxy.terminate()
        self.haproxy.wait(timeout=10)
        self.log.close()
        for board in self.boards.values():
            if board.alive():
                stop_server(board.proc)


# ---- the conversations -----------------------------------------------------------

def system_prompt() -> str:
    """About 2.6 KB, shared by every conversation, as an agent's is."""
    rules = [
        "You are an agent that helps the user with software engineering tasks in their repository.",
        "Use the tools offered to read files, search the code, edit files and run commands.",
        "Read a file before you edit it, and never guess at the contents of a file you have not read.",
        "Keep your answers short: the user reads them in a terminal, one screen at a time.",
        "When you change code, keep to the style of the code around it, its names and its comments.",
        "Run the project's tests after a change, and say which ones fail and why before going on.",
        "Do not commit, push or change branches unless the user asks you to.",
        "Prefer editing an existing file to creating a new one; never create documentation unasked.",
        "When a command fails, read its output and fix the cause instead of trying it again unchanged.",
        "Ask the user when a task is ambiguous rather than choosing an interpretation silently.",
        "Say what you are about to do in one sentence before each tool call, then make the call.",
        "Do not print secrets, keys or tokens that you come across in files or in a command's output.",
    ]
    text = ""
    for section in ("Doing tasks", "Tool use"):
        text += f"# {section}\n" + "".join(f"{n + 1}. {rule}\n" for n, rule in enumerate(rules)) + "\n"
    return text + "The working directory is /home/user/rkllm-server, a git repository."


SYSTEM = system_prompt()


def opening(name: str) -> str:
    """The conversation's first user message, its own: a task and about a
    kilobyte of a file pasted into it."""
    lines = "".join(f"{n:3}\t    let {name.replace('-', '_')}_{n} = plan.step({n}, &{name!r}).await?;\n"
                    for n in range(1, 19))
    return f"In the conversation {name}: this function fails its test since yesterday. Why?\n\n{lines}"


def follow_up(name: str, turn: int) -> str:
    return (f"Turn {turn} of {name}: that did not fix it. The test still fails with `assertion failed: "
            f"left == right` at line {40 + turn}, and the log shows the step {turn} ran twice. Read the "
            f"caller in server/src/plan/steps.rs and tell me which of the two calls is wrong, and why.")


@dataclass
class Conversation:
    """A conversation of one of the three kinds: `claude` (Anthropic's
    /v1/messages with X-Claude-Code-Session-Id), `cache-key` (OpenAI chat
    with `prompt_cache_key`) or `openwebui` (OpenAI chat with
    X-OpenWebUI-Chat-Id)."""

    name: str
    kind: str
    messages: list = field(default_factory=list)

    def add_turn(self, turn: int, answer: str | None) -> str:
        """Adds the previous answer and this turn's user message; returns
        the text new since the previous request."""
        user = opening(self.name) if turn == 1 else follow_up(self.name, turn)
        new = ""
        if answer is not None:
            self.messages.append({"role": "assistant", "content": answer})
            new += answer
        self.messages.append({"role": "user", "content": user})
        return new + user

    def request(self):
        """Path, headers and body of the conversation so far."""
        key = f"{self.kind}-{self.name}"
        if self.kind == "claude":
            return ("/v1/messages", {"X-Claude-Code-Session-Id": key},
                    {"model": MODEL, "max_tokens": 64, "system": SYSTEM, "messages": self.messages})
        body = {"model": MODEL, "max_tokens": 64,
                "messages": [{"role": "system", "content": SYSTEM}, *self.messages]}
        if self.kind == "cache-key":
            return "/v1/chat/completions", {}, dict(body, prompt_cache_key=key)
        return "/v1/chat/completions", {"X-OpenWebUI-Chat-Id": key}, body

    def answer(self, response: dict) -> str:
        if self.kind == "claude":
            return "".join(b["text"] for b in response["content"] if b["type"] == "text")
        return response["choices"][0]["message"]["content"]


def conversations(prefix: str) -> list:
    kinds = ["claude", "cache-key", "openwebui"]
    return [Conversation(f"{prefix}-{kind}-{i}", kind) for i in (1, 2) for kind in kinds]


# ---- measuring -------------------------------------------------------------------

def counter(metrics: str, name: str):
    wanted = f'{name}{{model="{MODEL}"}} '
    for line in metrics.splitlines():
        if line.startswith(wanted):
            return float(line[len(wanted):])
    return None


def prefilled(log: str):
    """What the double prefilled in a stretch of its log (as
    tests/e2e/agent_cache.rs reads it): the bytes of prompt text its runs
    prefilled past what a loaded snapshot covered (`run-cached bytes=`) or,
    for a run that goes on after a pause (a chunk of a chunked prefill),
    past what the generation held; and the bytes of the whole prompt the
    last generation held."""
    total = held = cached = 0
    continues = False
    for line in log.splitlines():
        if line.startswith("run-cached bytes="):
            cached = int(line.removeprefix("run-cached bytes="))
        elif line.startswith("run-tokens "):
            continues = "paused=0" not in line
        elif line == "run-continues-paused":
            continues = True
        elif line.startswith("prefilled held="):
            now = int(line.removeprefix("prefilled held=").split(" ")[0])
            total += max(0, now - (held if continues else cached))
            held = now
            cached = 0
            continues = False
    return total, held


@dataclass
class Turn:
    """One request: its conversation and turn, the board that answered,
    and what it prefilled there."""

    conversation: str
    turn: int
    node: str
    # The X-Rkllm-Conversation it was answered with.
    key: str | None
    new_bytes: int
    new_tokens: int
    prefilled_bytes: int = 0
    prompt_bytes: int = 0
    prefilled_tokens: float = 0.0


def send_rounds(cluster: Cluster, convs: list, turns: range, answers: dict) -> list:
    """Sends `turns` of `convs`, one round (a turn of every conversation)
    after the other, the order rotated by one each round; `answers` holds
    each conversation's last answer. Returns a Turn per request with what
    the board that answered it prefilled, from its double's log and its
    counter."""
    records, marks = [], []

    def mark():
        return {n: (b.log_size(), b.prefilled_tokens()) for n, b in cluster.boards.items()}

    with httpx.Client(timeout=60) as http:
        for turn in turns:
            order = convs[turn - 1:] + convs[:turn - 1]
            for conv in order:
                new = conv.add_turn(turn, answers.get(conv.name))
                path, headers, body = conv.request()
                marks.append(mark())
                response = http.post(cluster.url + path, headers=headers, json=body)
                assert response.status_code == 200, (conv.name, turn, response.status_code, response.text)
                answers[conv.name] = conv.answer(response.json())
                assert answers[conv.name] == ANSWER, response.text
                records.append(Turn(conv.name, turn, response.headers["x-rkllm-node"],
                                    response.headers.get("x-rkllm-conversation"),
                                    len(new.encode()), mock_tokens(new)))
    marks.append(mark())
    # What a board's log and counter gained from the request's start until
    # the next request's start is the request's.
    logs = {n: b.log_bytes() for n, b in cluster.boards.items()}
    for i, record in enumerate(records):
        (start, before), (end, after) = marks[i][record.node], marks[i + 1][record.node]
        log = logs[record.node][start:end].decode("utf-8", errors="replace")
        record.prefilled_bytes, record.prompt_bytes = prefilled(log)
        record.prefilled_tokens = after - before
    return records


@dataclass
class Run:
    cluster: Cluster
    records: list
    metrics: dict

    def turns_of(self, name: str) -> list:
        return sorted((r for r in self.records if r.conversation == name), key=lambda r: r.turn)

    def names(self) -> list:
        return sorted({r.conversation for r in self.records})

    def totals(self):
        """Tokens prefilled in all (the sum of the boards' counters since
        the conversations began) and bytes by the doubles' logs."""
        return (sum(r.prefilled_tokens for r in self.records), sum(r.prefilled_bytes for r in self.records))

    def table(self) -> str:
        return "\n".join(f"  {r.conversation} turn {r.turn} on {r.node}: {r.new_bytes} new bytes, prefilled "
                         f"{r.prefilled_bytes} bytes ({r.prefilled_tokens:.0f} tokens) of a {r.prompt_bytes}-byte prompt"
                         for r in sorted(self.records, key=lambda r: (r.conversation, r.turn)))


def six_conversations(tmp_path_factory, runtime, affinity: bool) -> Run:
    label = "affinity" if affinity else "round-robin"
    cluster = Cluster(tmp_path_factory.mktemp(label), runtime, affinity)
    try:
        records = send_rounds(cluster, conversations("conversation"), range(1, 5), {})
        metrics = {n: b.metrics() for n, b in cluster.boards.items()}
    except BaseException:
        cluster.close()
        raise
    return Run(cluster, records, metrics)


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    return build_fake(tmp_path_factory.mktemp("runtime"))


@pytest.fixture(scope="module")
def with_affinity(tmp_path_factory, runtime):
    """The six conversations through the shipped config; the cluster stays
    up for the tests after."""
    run = six_conversations(tmp_path_factory, runtime, affinity=True)
    yield run
    run.cluster.close()


@pytest.fixture(scope="module")
def without_affinity(tmp_path_factory, runtime):
    """The same six conversations with the affinity line removed."""
    run = six_conversations(tmp_path_factory, runtime, affinity=False)
    run.cluster.close()
    return run


def check_prefilled_only_what_is_new(record: Turn, table: str):
    where = f"{record.conversation} turn {record.turn} on {record.node}"
    # Prefilled whole, the turn would be far past the bound.
    assert record.prompt_bytes > 2 * (record.new_bytes + SLACK), f"{where} is too short to tell\n{table}"
    # Its new text was never sent before: no snapshot can have held it.
    assert record.prefilled_bytes >= record.new_bytes, f"{where}\n{table}"
    assert record.prefilled_bytes <= record.new_bytes + SLACK, f"{where}\n{table}"
    assert 0 < record.prefilled_tokens <= record.new_tokens + SLACK, f"{where}\n{table}"


# ---- tests -----------------------------------------------------------------------

def test_every_later_turn_lands_on_the_board_that_answered_the_conversations_first_turn(with_affinity):
    for name in with_affinity.names():
        turns = with_affinity.turns_of(name)
        assert [t.turn for t in turns] == [1, 2, 3, 4]
        assert {t.node for t in turns} == {turns[0].node}, (name, [(t.turn, t.node) for t in turns])
        # Every answer names the conversation, with the same key each turn.
        assert turns[0].key and {t.key for t in turns} == {turns[0].key}, (name, [t.key for t in turns])


def test_every_later_turn_prefills_only_its_new_messages_on_that_board(with_affinity):
    table = with_affinity.table()
    print(f"\nwith the affinity:\n{table}")
    for record in with_affinity.records:
        if record.turn > 1:
            check_prefilled_only_what_is_new(record, table)


def test_first_turns_are_spread_over_the_boards(with_affinity):
    first = {r.conversation: r.node for r in with_affinity.records if r.turn == 1}
    assert len(first) == 6
    assert len(set(first.values())) >= 2, first


def test_each_board_exports_the_kv_cache_lora_and_prompt_token_metrics(with_affinity):
    for name, metrics in with_affinity.metrics.items():
        for gauge in GAUGES:
            assert re.search(rf'^# TYPE {gauge} gauge$', metrics, re.M), (name, gauge)
        tokens = counter(metrics, "rkllm_kv_cache_tokens")
        utilization = counter(metrics, "rkllm_kv_cache_utilization")
        assert tokens is not None and tokens >= 0, (name, tokens)
        assert utilization is not None and 0 <= utilization <= 1, (name, utilization)
        # No adapters configured: none loaded, none running or waiting.
        assert counter(metrics, "rkllm_lora_adapters_loaded") == 0, name
        lora = re.search(r'^rkllm_lora_requests\{(.*)\} \S+$', metrics, re.M)
        assert lora, (name, [line for line in metrics.splitlines() if "lora" in line])
        labels = dict(re.findall(r'(\w+)="([^"]*)"', lora.group(1)))
        assert labels == {"running_lora_adapters": "", "waiting_lora_adapters": "", "max_lora": "0"}, labels
        # Each board answered first turns and the turns after them.
        for total in COUNTERS:
            assert counter(metrics, total) > 0, (name, total)


def test_conversations_prefill_less_with_affinity_than_round_robin(with_affinity, without_affinity):
    print(f"\nwithout the affinity (round robin):\n{without_affinity.table()}")
    with_tokens, with_bytes = with_affinity.totals()
    without_tokens, without_bytes = without_affinity.totals()
    print(f"\nsix conversations of four turns on three boards: prefilled {with_tokens:.0f} tokens "
          f"({with_bytes} bytes) with the affinity, {without_tokens:.0f} tokens ({without_bytes} bytes) "
          f"without it")
    moved = [(r.conversation, r.turn) for r in without_affinity.records if r.turn > 1
             and r.node != without_affinity.turns_of(r.conversation)[r.turn - 2].node]
    assert moved, "round robin kept every conversation on its board: nothing to compare"
    assert with_tokens < without_tokens
    assert with_bytes < without_bytes


def test_a_stopped_boards_conversations_continue_on_another_board_and_stick_there(with_affinity):
    cluster = with_affinity.cluster
    convs = conversations("failover")
    answers = {}
    before = send_rounds(cluster, convs, range(1, 3), answers)
    home = {r.conversation: r.node for r in before if r.turn == 1}
    assert all(r.node == home[r.conversation] for r in before), [(r.conversation, r.turn, r.node) for r in before]
    # The board that holds the first conversation is stopped; HAProxy's
    # health check takes it out.
    victim = home[convs[0].name]
    board = cluster.boards[victim]
    board.proc.send_signal(signal.SIGKILL)
    board.proc.wait()
    cluster.wait_for(lambda rows: rows.get(victim, {}).get("status") == "DOWN", f"{victim} down")

    after = send_rounds(cluster, convs, range(3, 5), answers)
    moved = [name for name, node in home.items() if node == victim]
    table = Run(cluster, before + after, {}).table()
    print(f"\n{victim} stopped after turn 2:\n{table}")
    for name in home:
        third, fourth = sorted((r for r in after if r.conversation == name), key=lambda r: r.turn)
        if name in moved:
            # Answered elsewhere, and the next turn stays there, where it
            # prefills only what is new.
            assert third.node != victim, table
            assert fourth.node == third.node, table
            check_prefilled_only_what_is_new(fourth, table)
        else:
            assert third.node == fourth.node == home[name], table
