"""Every shell command of README.md and docs/*.md, run (issue 33).

Each fenced block whose info string is `sh`, `bash`, `shell` or `console` is
run, block after block in the page's order, in one session per page: a
temporary root, `HOME` and `XDG_*` inside it, the server and client binaries
first on `PATH`, the fake Hugging Face (tests/fake-hf) as the hub, the fake
sysfs (tests/fake-sys/rk3588) as the board, the fake runtime
(tests/fake-rkllmrt) as `/usr/lib/librkllmrt.so`. Commands run with bash as
written but for the rewrites of `REWRITES` and `PLACEHOLDERS` below (a free
port for 8080, the session root before the board's absolute paths, real
repositories for OWNER/REPO, the built binaries for `cargo run`). A command
that starts the server (`rkllm-server` with no subcommand, or `cargo run`)
is started in the background and serves the page's later blocks; a block
that talks to the server before one was started gets the page's default
server (`DEFAULT_SERVER`; `RKLLM_SERVER_LISTEN` gives a server started
without `--listen` the session's port, and the mock answers at once). Every
command must exit with 0 and a curl must print something (curl runs with
`--fail-with-body` unless it has `-f`); docs/board-setup.md must end with the
pulled model's answer streamed (`EXPECT`). In a `console` block the `$ `
lines are the commands.

A block that cannot run off a board (or at all in a test) says so on the
line before its fence:

    <!-- not-run: REASON -->              the whole block is not run
    <!-- not-run WORD...: REASON -->      only its commands that start with
                                          one of these words are not run

The reasons are printed (pytest's skip summary, `-rs`). A reason that says
"(run by PATH)" is checked: PATH exists and, for a script, holds each
command it covers; for a Python test, names the page. A block with neither
a marker nor a way to run fails `test_every_shell_block_is_run_or_marked`.

The section "Every endpoint with curl" of docs/openai-ollama.md is run by
test_docs_curl.py (with a stricter check of each answer); this file counts
those blocks as run there.
"""

import json
import os
import pathlib
import re
import shlex
import shutil
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass, field

import pytest

from conftest import ROOT, build_fake_rknn, server_binary
from test_docs_curl import examples as curl_doc_examples

SHELL_LANGS = {"sh", "bash", "shell", "console"}
MARKER = re.compile(r"^\s*<!--\s*not-run(?P<words>(?:\s+[^\s:]+)*)\s*:\s*(?P<reason>.+?)\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent> *)```(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```", re.S | re.M)

# The board's absolute paths, rooted in the session's folder.
BOARD_PATHS = ["/etc/rkllm-server", "/var/lib/rkllm-server", "/opt/models", "/usr/lib/librkllmrt.so",
               "/usr/lib/librknnrt.so"]
# Placeholders of the docs and the real values they take (the fake hub's repositories).
PLACEHOLDERS = [
    ("https://host/path/m.rkllm", "{hub}/acme/tiny/resolve/main/tiny_w8a8_rk3588.rkllm"),
    ("OWNER/REPO:FILE.rkllm", "acme/tiny:tiny_w8a8_rk3588.rkllm"),
    ("BASE/REPO", "acme/base"),
    ("OWNER/REPO", "acme/tiny"),
    ("show NAME", "show qwen"),
    ("rm NAME", "rm qwen"),
]
# Programs the docs run that this test gives its own way to run, and why.
REWRITES = [
    # `cargo run` would rebuild with other features than scripts/test's build
    # (minutes on CI); the binaries it would run are the ones built already.
    (re.compile(r"^cargo run -p rkllm-client --"), "rkllm-client"),
    (re.compile(r"^cargo run(?= |$)"), "rkllm-server"),
    # The board's service user: the test runs as the current user.
    (re.compile(r"^sudo -u rkllm "), ""),
]
SUBCOMMANDS = {"pull", "list", "show", "rm", "doctor"}
NOT_SERVING_FLAGS = {"--help", "-h", "--version", "-V", "--check-config", "--print-config", "--completions",
                     "--man-page", "--stdio"}

# The fake hub's repositories: the model the docs name, and acme/* for placeholders.
FAKE_TEXT = "Hello from the fake runtime: 東京 🦀 naïve café."
REPOS = {"repos": {
    "HanzoHuang/Qwen2.5-1.5B-Instruct-RKLLM": {"files": {
        "README.md": {"text": "# Qwen2.5 1.5B"},
        "Qwen2.5-1.5B-Instruct_w8a8_RK3588.rkllm": {"text": FAKE_TEXT},
        "Qwen2.5-1.5B-Instruct_w4a16_RK3576.rkllm": {"text": "the other chip"},
    }},
    "acme/tiny": {"files": {"tiny_w8a8_rk3588.rkllm": {"text": FAKE_TEXT * 100},
                            "tiny_w8a8_rk3576.rkllm": {"text": "the other chip"}}},
    "acme/base": {"files": {
        "tokenizer.json": {"text": (ROOT / "server" / "assets" / "mock-tokenizer.json").read_text(encoding="utf-8")},
    }},
}}


@dataclass
class Block:
    doc: pathlib.Path
    line: int
    text: str
    lang: str = "sh"
    skip_words: list = field(default_factory=list)
    reason: str | None = None
    whole: bool = False

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"


def docs() -> list[pathlib.Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def shell_blocks(doc: pathlib.Path, text: str | None = None) -> list[Block]:
    """The page's shell blocks, each with its marker."""
    text = doc.read_text(encoding="utf-8") if text is None else text
    out = []
    for m in FENCE.finditer(text):
        if m.group("info").strip().split(" ")[0] not in SHELL_LANGS:
            continue
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        lang = m.group("info").strip().split(" ")[0]
        body = m.group("body")
        if lang == "console":
            # A transcript: the `$ ` lines are the commands, the rest their output.
            body = "".join(line[2:] + "\n" for line in body.splitlines() if line.startswith("$ "))
        block = Block(doc, text[: m.start()].count("\n") + 1, body, lang)
        marker = MARKER.match(before)
        if marker:
            block.reason = marker.group("reason")
            block.skip_words = marker.group("words").split()
            block.whole = not block.skip_words
        out.append(block)
    return out


def commands(block: str, strict: bool = True) -> list[str]:
    """The block's commands: lines joined until bash reads a whole command
    (continued lines, open quotes, loops). Not `strict` (a block that is not
    run, which may hold placeholders such as `<key>`): a line bash cannot
    read ends its command."""
    out, current = [], ""
    for line in block.splitlines():
        current = f"{current}\n{line}" if current else line
        if not current.strip():
            current = ""
            continue
        if current.endswith("\\"):
            continue
        if not strict or subprocess.run(["bash", "-n", "-c", current], capture_output=True).returncode == 0:
            out.append(current)
            current = ""
    assert not current, f"an unfinished command: {current}"
    return out


def skipped(block: Block, command: str) -> bool:
    return block.whole or any(f"{command} ".startswith(f"{word} ") for word in block.skip_words)


def starts_server(command: str) -> bool:
    words = shlex.split(command, comments=True)
    if not words or words[0] != "rkllm-server":
        return False
    return not (set(words[1:]) & (SUBCOMMANDS | NOT_SERVING_FLAGS))


def with_fail(curl: re.Match) -> str:
    """curl fails on an error status: `--fail-with-body` unless it has `-f`."""
    flags = curl.group(1)
    if any("f" in flag for flag in flags.split()):
        return curl.group(0)
    return f"curl --fail-with-body{flags} "


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Session:
    """One page's run: its root, environment, hub and servers."""

    def __init__(self, root: pathlib.Path, hub: str, runtime: pathlib.Path):
        self.root, self.hub, self.port = root, hub, free_port()
        self.server = None
        self.outputs = []
        self.log = root / "server.log"
        for path in ["home", "data", "config", "bin", "usr/lib", "opt/models", "etc/rkllm-server",
                     "var/lib/rkllm-server/models"]:
            (root / path).mkdir(parents=True, exist_ok=True)
        shutil.copy(runtime, root / "usr/lib" / "librkllmrt.so")
        (root / "bin" / "rkllm-server").symlink_to(server_binary())
        client = os.environ.get("RKLLM_CLIENT_BIN") or str(ROOT / "target" / "debug" / "rkllm-client")
        (root / "bin" / "rkllm-client").symlink_to(client)
        self.config = root / "etc" / "rkllm-server" / "config.toml"
        self.write_config("")
        self.env = dict(
            os.environ,
            PATH=f"{root / 'bin'}:{os.environ['PATH']}",
            HOME=str(root / "home"),
            XDG_DATA_HOME=str(root / "data"),
            XDG_CONFIG_HOME=str(root / "config"),
            # What the installed package's /etc/rkllm-server/config.toml is on a board.
            RKLLM_SERVER_CONFIG=str(self.config),
            RKLLM_SERVER_LISTEN=f"127.0.0.1:{self.port}",
            RKLLM_SERVER_MOCK_TOKENS_PER_SECOND="0",
            # rustup and cargo keep their own homes (a page's `cargo` command).
            RUSTUP_HOME=os.environ.get("RUSTUP_HOME", str(pathlib.Path.home() / ".rustup")),
            CARGO_HOME=os.environ.get("CARGO_HOME", str(pathlib.Path.home() / ".cargo")),
        )

    def write_config(self, settings: str) -> None:
        """The page's settings, and the test doubles for the hub and the board."""
        self.config.write_text(self.rewrite(settings) + (
            f'\n[store]\nendpoint = "{self.hub}"\nplatform = "rk3588"\n'
            f'\n[board]\nsys_root = "{ROOT / "tests" / "fake-sys" / "rk3588"}"\n'
        ))

    def rewrite(self, command: str) -> str:
        for pattern, value in REWRITES:
            command = pattern.sub(value, command)
        for placeholder, value in PLACEHOLDERS:
            command = command.replace(placeholder, value.format(hub=self.hub))
        for address in ["localhost:8080", "127.0.0.1:8080", "0.0.0.0:8080", "http://<board>:8080"]:
            command = command.replace(address, f"127.0.0.1:{self.port}")
        for path in BOARD_PATHS:
            command = re.sub(rf"(?<![\w/.]){re.escape(path)}", f"{self.root}{path}", command)
        command = re.sub(r"(?<![\w-])curl((?: -[A-Za-z]+)*) ", with_fail, command)
        # The checkout's files, from the session's folder.
        command = re.sub(r"(?<![\w/.-])target/debug/rkllm-server\b", server_binary(), command)
        command = re.sub(r"(?<![\w/.-])(scripts|cross|packaging|config|systemd)/", rf"{ROOT}/\1/", command)
        # The client's default server, 127.0.0.1:8080, given as --url.
        if command.startswith("rkllm-client run ") and "--url" not in command and " -- " not in command:
            url = f"ws://127.0.0.1:{self.port}/ws" if "--transport ws" in command else f"http://127.0.0.1:{self.port}/mcp"
            command = command.replace("rkllm-client run ", f"rkllm-client run --url {url} ", 1)
        return command

    def start(self, command: str) -> None:
        self.stop()
        log = open(self.log, "a", encoding="utf-8", buffering=1)
        self.server = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=self.root, env=self.env,
                                       stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.PIPE, text=True)
        lines = []
        for line in self.server.stderr:
            lines.append(line)
            if line.startswith("rkllm-server listening on http://"):
                break
        else:
            self.server.wait()
            self.server = None
            raise AssertionError(f"the server did not start: {command}\n{''.join(lines)}")
        print("served by:", command.splitlines()[0])
        # Its log from now on goes to the log file (a pipe nobody reads fills up).
        log.writelines(lines)
        log.flush()
        threading.Thread(target=log.writelines, args=(self.server.stderr,), daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.terminate()
            self.server.wait(timeout=15)
            self.server = None

    def run(self, command: str, script: str | None = None) -> str:
        print("run:", command.splitlines()[0])
        done = subprocess.run(["bash", "-o", "pipefail", "-c", script or command], cwd=self.root, env=self.env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"exit {done.returncode}: {command}\n{done.stdout}\n{done.stderr}"
        if "curl " in command and "| jq" not in command:
            assert done.stdout.strip(), f"no output from: {command}"
        self.outputs.append((command, done.stdout))
        return done.stdout

    def run_block(self, block: Block, default_server: str) -> list[str]:
        """Runs the block's commands in order; returns the ones not run."""
        not_run = []
        for command in commands(block.text):
            if skipped(block, command):
                not_run.append(command)
                continue
            command = self.rewrite(command)
            if starts_server(command):
                self.start(command)
                continue
            if self.server is None and f"127.0.0.1:{self.port}" in command:
                self.start(self.rewrite(default_server))
            self.run_in_state(command)
        return not_run

    def run_in_state(self, command: str) -> None:
        """Runs the command in a shell that has the variables the page's
        earlier commands set, and keeps the ones it sets."""
        state = self.root / "state.sh"
        prelude = f". {shlex.quote(str(state))}\n" if state.exists() else ""
        self.run(command, f"{prelude}{command}\nstatus=$?\n"
                 f"declare -p | grep -vE '^declare -[a-zA-Z]*r' > {shlex.quote(str(state))}\nexit $status")


# What each page needs before its blocks run: its settings (the config the
# installed package reads, with the test doubles added), files it assumes, and
# the server a block gets when none was started before it.
def board_setup_config(session: Session) -> None:
    """docs/board-setup.md step 5: the settings it asks for at least."""
    text = (ROOT / "docs" / "board-setup.md").read_text(encoding="utf-8")
    step = text.split("## 5. Configure", 1)[1]
    session.write_config(re.findall(r"```toml\n(.*?)```", step, flags=re.S)[0])
    unit = (ROOT / "systemd" / "rkllm-server.service").read_text(encoding="utf-8")
    for name, value in re.findall(r"^Environment=(\w+)=(.*)$", unit, flags=re.M):
        session.env[name] = session.rewrite(value)


def unit_command() -> str:
    """The systemd unit's ExecStart: how the board starts the server."""
    unit = (ROOT / "systemd" / "rkllm-server.service").read_text(encoding="utf-8")
    return re.search(r"^ExecStart=/usr/bin/(.*)$", unit, flags=re.M).group(1)


def vision_config(session: Session) -> None:
    """docs/vision.md: a vision model on the fake runtimes (the mock runs
    no encoder), and a JPEG as photo.jpg."""
    rknn = build_fake_rknn(session.root)
    (session.root / "qwen2.5-vl-3b.rkllm").write_text("A picture, described.")
    (session.root / "qwen2.5-vl-3b.rknn").write_text(
        "fake-rknn width=64 height=64 channels=3 fmt=NHWC type=UINT8 tokens=8 dim=12 outputs=1")
    session.env["FAKE_RKLLM_EMBED_DIM"] = "12"
    shutil.copy(ROOT / "server" / "src" / "backend" / "image" / "testdata" / "progressive.jpg",
                session.root / "photo.jpg")
    session.write_config(
        f'backend = "rkllm"\nruntime = "/usr/lib/librkllmrt.so"\nrknn_runtime = "{rknn}"\n'
        f'[[models]]\nname = "qwen2.5-vl-3b"\npath = "{session.root / "qwen2.5-vl-3b.rkllm"}"\n'
        f'vision_encoder = "{session.root / "qwen2.5-vl-3b.rknn"}"\n'
    )


def streamed_text(output: str) -> str:
    """The text of an OpenAI stream (`data:` lines up to `[DONE]`)."""
    events = [l.removeprefix("data:").strip() for l in output.splitlines() if l.startswith("data:")]
    assert events and events[-1] == "[DONE]", output
    return "".join(c["delta"].get("content") or "" for e in events[:-1] for c in json.loads(e)["choices"])


def board_setup_answers(session: Session) -> None:
    """Step 7 streams the pulled model's answer: the fake runtime generates
    the text of the model file the fake hub served."""
    streams = [out for cmd, out in session.outputs if "/v1/chat/completions" in cmd and '"stream":true' in cmd]
    assert streams and streamed_text(streams[-1]) == FAKE_TEXT, streams


SETUP = {"docs/board-setup.md": board_setup_config, "docs/vision.md": vision_config}
EXPECT = {"docs/board-setup.md": board_setup_answers}
DEFAULT_SERVER = {"docs/board-setup.md": unit_command()}


def board_files(session: Session, block: Block) -> None:
    """A model file a command names under /opt/models (on a board, the
    user's own) holds the fake runtime's model text."""
    for name in re.findall(r"/opt/models/([\w.-]+\.rkllm)", block.text):
        (session.root / "opt" / "models" / name).write_text(FAKE_TEXT)


def curl_doc_blocks() -> set[str]:
    return {b.strip() for b in curl_doc_examples()}


def page_blocks(doc: pathlib.Path) -> list[Block]:
    """The page's blocks this file runs (not those test_docs_curl.py runs)."""
    covered = curl_doc_blocks()
    return [b for b in shell_blocks(doc) if b.text.strip() not in covered]


def runnable_docs() -> list[pathlib.Path]:
    return [doc for doc in docs() if any(not b.whole for b in page_blocks(doc))]


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hub")
    (tmp / "repos.json").write_text(json.dumps(REPOS))
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "fake-hf" / "fake_hf.py"), str(tmp / "repos.json"),
         str(tmp / "requests.log")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    hub_port = proc.stdout.readline().split()[0]
    yield f"http://127.0.0.1:{hub_port}"
    proc.kill()
    proc.wait()


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    """The fake runtime of the version docs/board-setup.md installs (1.2.3:
    `rkllm-server doctor` fails 1.3.0 on RK3588)."""
    out = tmp_path_factory.mktemp("runtime") / "librkllmrt.so"
    subprocess.run(
        [os.environ.get("RKLLM_FAKE_CC", "cc"), "-shared", "-fPIC", "-O1", "-DFAKE_ABI_V1_2",
         "-I", str(ROOT / "rkllm-sys" / "include"), str(ROOT / "tests" / "fake-rkllmrt" / "fake_rkllmrt.c"),
         "-o", str(out), "-lpthread"],
        check=True,
    )
    return out


@pytest.mark.skipif(shutil.which("curl") is None or shutil.which("jq") is None,
                    reason="curl or jq is not installed (scripts/test installs them)")
@pytest.mark.parametrize("doc", runnable_docs(), ids=lambda d: str(d.relative_to(ROOT)))
def test_each_page_runs_as_written(doc, hub, runtime, tmp_path):
    name = str(doc.relative_to(ROOT))
    session = Session(tmp_path, hub, runtime)
    try:
        if name in SETUP:
            SETUP[name](session)
        not_run = []
        for block in page_blocks(doc):
            if block.whole:
                continue
            board_files(session, block)
            try:
                for command in session.run_block(block, DEFAULT_SERVER.get(name, "rkllm-server")):
                    not_run.append(f"{block.where}: {command.splitlines()[0]} ({block.reason})")
            except AssertionError as e:
                log = session.log.read_text(encoding="utf-8", errors="replace") if session.log.exists() else ""
                raise AssertionError(f"{block.where}: {e}\nserver log:\n{log[-3000:]}") from None
        for line in not_run:
            print(f"not run: {line}")
        if name in EXPECT:
            EXPECT[name](session)
    finally:
        session.stop()


def marked_blocks() -> list[Block]:
    return [b for doc in docs() for b in shell_blocks(doc) if b.reason]


@pytest.mark.parametrize("block", marked_blocks(), ids=lambda b: b.where)
def test_a_marked_block_says_why_it_is_not_run(block):
    """Each marker names commands the block has, and a "(run by PATH)"
    claim holds; then the block is reported as skipped with its reason."""
    cmds = commands(block.text, strict=False)
    for word in block.skip_words:
        assert any(f"{c} ".startswith(f"{word} ") for c in cmds), f"{block.where}: no command starts with {word!r}"
    claim = re.search(r"\(run by ([^)\s]+)\)", block.reason)
    if claim:
        path = ROOT / claim.group(1)
        assert path.exists(), f"{block.where}: {path} does not exist"
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".py":
            assert block.doc.name in text, f"{block.where}: {path.name} does not read {block.doc.name}"
        else:
            lines = [l.split("#")[0].strip() for l in text.splitlines()]
            for command in (c for c in cmds if skipped(block, c)):
                program = command.split("#")[0].strip()
                assert any(l == program or l.startswith(program + " ") for l in lines), (
                    f"{block.where}: {path.name} does not run {program!r}"
                )
    for command in (c for c in cmds if skipped(block, c)):
        # A cargo test the page names exists.
        named = re.match(r"cargo test .*--test (\w+) (\w+)", command)
        if named:
            sources = (ROOT / "tests" / named.group(1)).rglob("*.rs")
            assert any(f"fn {named.group(2)}" in f.read_text(encoding="utf-8") for f in sources), command
    pytest.skip(f"{block.where} not run: {block.reason}")


def test_every_shell_block_is_run_or_marked():
    """The extractor finds every shell fence of every page (so none escapes
    both the runner and the markers), and test_docs_curl.py's blocks are
    among them."""
    fence = re.compile(r"^ *```(?:" + "|".join(SHELL_LANGS) + r")\b", re.M)
    found = []
    for doc in docs():
        blocks = shell_blocks(doc)
        assert len(blocks) == len(fence.findall(doc.read_text(encoding="utf-8"))), doc
        found += blocks
    covered = curl_doc_blocks()
    assert len(covered) >= 10 and covered <= {b.text.strip() for b in found}
    run = set(runnable_docs())
    for block in found:
        assert block.whole or block.text.strip() in covered or block.doc in run, block.where


def test_a_console_block_runs_its_dollar_lines():
    page = "```console\n$ echo hi\nhi\n$ true\n```\n<!-- not-run ssh: a board -->\n```bash\nssh b\nls\n```\n"
    blocks = shell_blocks(ROOT / "docs" / "page.md", page)
    assert [commands(b.text) for b in blocks] == [["echo hi", "true"], ["ssh b", "ls"]]
    assert [skipped(blocks[1], c) for c in commands(blocks[1].text)] == [True, False]


BROKEN_PAGE = """# A page

<!-- not-run: needs the NPU -->
```sh
cat /sys/kernel/debug/rknpu/version
```

```sh
curl -s localhost:8080/health
rkllm-server pull --no-such-flag OWNER/REPO
```
"""


def test_a_broken_command_in_a_page_fails(hub, runtime, tmp_path):
    """The extractor finds both blocks, honours the marker, and the runner
    fails on the broken command with its text."""
    blocks = shell_blocks(ROOT / "docs" / "broken.md", BROKEN_PAGE)
    assert [b.whole for b in blocks] == [True, False]
    assert blocks[0].reason == "needs the NPU"
    session = Session(tmp_path, hub, runtime)
    try:
        with pytest.raises(AssertionError, match="--no-such-flag acme/tiny"):
            session.run_block(blocks[1], "rkllm-server")
        assert session.server is not None, "the curl line got the default server"
        # A curl that gets an error status, and a server that does not start.
        with pytest.raises(AssertionError, match="/no/such/path"):
            session.run_block(Block(blocks[1].doc, 1, "curl -s localhost:8080/no/such/path\n"), "rkllm-server")
        with pytest.raises(AssertionError, match="did not start"):
            session.run_block(Block(blocks[1].doc, 1, "rkllm-server --listen 0.0.0.0:8080 --no-such-flag\n"), "")
    finally:
        session.stop()


def test_commands_are_split_as_bash_reads_them():
    block = "a=1\ncurl -s x -d '{\n  \"k\": 1}'\nwhile :; do\n  break\ndone; echo\nb \\\n  c   # note\n"
    assert commands(block) == ["a=1", "curl -s x -d '{\n  \"k\": 1}'", "while :; do\n  break\ndone; echo",
                               "b \\\n  c   # note"]
