"""How far a long prompt's prefill in chunks has come, as the official
clients see it, on the runtime test double (tests/fake-rkllmrt, ABI 1.3.0)
prefilling about 1.4 s in chunks of 256 tokens.

The MCP Python SDK's progress callback gets the share prefilled (below 1,
no message) before the tokens generated (1 and up, each with its text);
the openai and anthropic clients read the SSE comments `: prefill t/of`
past, and their streams give the same answer as without them."""

import os

import anthropic
import openai
import pytest
from mcp import Client

from conftest import ROOT, build_fake, start_server, stop_server

ANSWER = "Chunked answer."
TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# About 3,500 of the mock tokenizer's tokens: 14 chunks of 256.
LONG = "Please read this log line of the board and keep it in mind. " * 57


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prefill-progress")
    runtime = build_fake(tmp)
    tokenizer = ROOT / "server" / "assets" / "mock-tokenizer.json"
    model = tmp / "chat.rkllm"
    model.write_text(f"@fake-vocab={tokenizer}\n{ANSWER}")
    config = tmp / "rkllm-server.toml"
    config.write_text(
        "[[models]]\n"
        'name = "chat"\n'
        f"path = {str(model)!r}\n"
        f"tokenizer = {str(tokenizer)!r}\n"
        f"chat_template = {TEMPLATE!r}\n"
        "prefill_chunk_tokens = 256\n"
        "snapshots = false\n"
    )
    env = {
        "FAKE_RKLLM_LOG": str(tmp / "fake.log"),
        "FAKE_RKLLM_TOKEN_MS": "0",
        "FAKE_RKLLM_PREFILL_US_PER_BYTE": "400",
    }
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        proc, url = start_server("--backend", "rkllm", "--runtime", str(runtime), "--config", str(config))
    finally:
        for key, value in saved.items():
            if value is None:
                del os.environ[key]
            else:
                os.environ[key] = value
    yield url
    stop_server(proc)


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_mcp_progress_tells_the_prefill_as_a_share_below_one_then_the_tokens(base, mode):
    updates = []

    async def on_progress(progress, total, message):
        updates.append((progress, total, message))

    async with Client(base + "/mcp", mode=mode) as client:
        result = await client.call_tool(
            "generate", {"prompt": LONG, "model": "chat", "max_tokens": 40}, progress_callback=on_progress
        )
    assert not result.is_error, result
    assert result.structured_content["text"] == ANSWER
    progress = [p for p, _, _ in updates]
    assert progress == sorted(set(progress)), f"progress rises: {updates}"
    prefill = [u for u in updates if u[0] < 1]
    answer = [u for u in updates if u[0] >= 1]
    assert len(prefill) >= 3, updates
    assert updates[: len(prefill)] == prefill, "the prefill comes first"
    assert all(total is None and message is None for _, total, message in prefill), prefill
    assert all(total == 40 for _, total, _ in answer), answer
    assert "".join(message for _, _, message in answer) == ANSWER


def test_openai_stream_reads_past_the_prefill_comments(base):
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
    with client.chat.completions.with_streaming_response.create(
        model="chat", stream=True, messages=[{"role": "user", "content": LONG}]
    ) as response:
        raw = response.read().decode()
    assert raw.count(": prefill ") >= 3, raw
    stream = client.chat.completions.create(model="chat", stream=True, messages=[{"role": "user", "content": LONG}])
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == ANSWER


def test_anthropic_stream_reads_past_the_prefill_comments(base):
    client = anthropic.Anthropic(base_url=base, api_key="unused", max_retries=0)
    with client.messages.stream(
        model="chat", max_tokens=40, messages=[{"role": "user", "content": LONG}]
    ) as stream:
        message = stream.get_final_message()
    assert message.content[0].text == ANSWER
    assert message.usage.input_tokens > 3000
