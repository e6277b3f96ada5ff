"""Reasoning, stop strings, the tool-call stream and refused options,
through the official clients (openai, ollama, the MCP SDK, langchain-ollama,
the OpenAI Agents SDK) and raw HTTP, against the mock backend.

The mock thinks on request: `@mock(think=1)` opens its reply with a
`<think>` block (Qwen3's shape, model "mock"), `@mock(think=2)` only closes
one that the template opened (DeepSeek-R1's shape, model "r1" declared with
`reasoning = "implicit"`). `@mock(echo=1)` makes the reply a known text, in
token pieces of 2-4 bytes."""

import json
import re
import time

import httpx
import ollama
import openai
import pytest
from mcp import Client

from conftest import mock_tokens, start_server, stop_server

CONFIG = """
[mock]
tokens_per_second = 400
prefill_ms = 0

[[models]]
name = "mock"

[[models]]
name = "r1"
reasoning = "implicit"
"""

# (model, directive) for the two shapes of thinking.
SHAPES = [
    pytest.param("mock", "@mock(think=1)", id="opened"),
    pytest.param("r1", "@mock(think=2)", id="implicit"),
]
QUESTION = "Why is the sky blue?"
STREAMED = {"stream": True, "stream_options": {"include_usage": True}}


def start(tmp_path, *args: str):
    """A server with the models above; returns the process and base URL."""
    config = tmp_path / "rkllm-server.toml"
    config.write_text(CONFIG)
    return start_server("--config", str(config), *args)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    proc, url = start(tmp_path_factory.mktemp("reasoning"))
    yield url
    stop_server(proc)


def openai_client(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=60)


def ollama_client(base: str) -> ollama.Client:
    return ollama.Client(host=base, timeout=60)


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def prefill_tokens(text: str) -> int:
    """The mock counts prefill with its tokenizer."""
    return mock_tokens(text)


def assert_no_tags(*texts: str) -> None:
    """Neither tag, nor a piece of one, reaches a client."""
    for text in texts:
        assert "<think" not in text and "think>" not in text, text


def assert_apart(thinking: str, answer: str) -> None:
    """Thinking and an answer, each in its own field."""
    assert thinking and answer
    assert_no_tags(thinking, answer)
    assert thinking not in answer and answer not in thinking


def joined(items, field: str) -> str:
    return "".join(getattr(item, field, None) or "" for item in items)


def openai_stream(client: openai.OpenAI, **ask):
    """A streamed chat completion: its chunks and the deltas of its choice."""
    chunks = list(client.chat.completions.create(**ask, **STREAMED))
    return chunks, [c.choices[0].delta for c in chunks if c.choices]


# ------------------------------------------------- reasoning on every API


@pytest.mark.parametrize("switch", [
    pytest.param({"reasoning_effort": "high"}, id="reasoning_effort"),
    pytest.param({"extra_body": {"chat_template_kwargs": {"enable_thinking": True}}}, id="enable_thinking"),
])
@pytest.mark.parametrize("model,directive", SHAPES)
def test_openai_reasoning_content_apart_from_the_answer(base, model, directive, switch):
    client = openai_client(base)
    ask = dict(model=model, messages=user(f"{QUESTION} {directive}"), **switch)
    whole = client.chat.completions.create(**ask)
    message = whole.choices[0].message
    assert_apart(message.reasoning_content, message.content)
    assert whole.choices[0].finish_reason == "stop"
    reasoning_tokens = whole.usage.completion_tokens_details.reasoning_tokens
    assert 0 < reasoning_tokens < whole.usage.completion_tokens

    chunks, deltas = openai_stream(client, **ask)
    assert joined(deltas, "reasoning_content") == message.reasoning_content
    assert joined(deltas, "content") == message.content
    assert_no_tags(*(d.content or "" for d in deltas), *(getattr(d, "reasoning_content", None) or "" for d in deltas))
    assert chunks[-1].usage.completion_tokens_details.reasoning_tokens == reasoning_tokens


@pytest.mark.parametrize("switch", [
    pytest.param({"reasoning_effort": "none"}, id="reasoning_effort"),
    pytest.param({"extra_body": {"chat_template_kwargs": {"enable_thinking": False}}}, id="enable_thinking"),
])
@pytest.mark.parametrize("model,directive", SHAPES)
def test_openai_thinking_switched_off(base, model, directive, switch):
    client = openai_client(base)
    ask = dict(model=model, messages=user(f"{QUESTION} {directive}"), **switch)
    message = client.chat.completions.create(**ask).choices[0].message
    assert not getattr(message, "reasoning_content", None)
    assert message.content
    assert_no_tags(message.content)

    _, deltas = openai_stream(client, **ask)
    assert joined(deltas, "reasoning_content") == ""
    assert joined(deltas, "content") == message.content
    assert_no_tags(*(d.content or "" for d in deltas))


@pytest.mark.parametrize("think", [True, "high"])
@pytest.mark.parametrize("model,directive", SHAPES)
def test_ollama_thinking_apart_from_the_answer(base, model, directive, think):
    client = ollama_client(base)
    prompt = f"{QUESTION} {directive}"

    chat = client.chat(model=model, messages=user(prompt), think=think)
    assert_apart(chat.message.thinking, chat.message.content)
    assert chat.done_reason == "stop"
    parts = [p.message for p in client.chat(model=model, messages=user(prompt), think=think, stream=True)]
    assert joined(parts, "thinking") == chat.message.thinking
    assert joined(parts, "content") == chat.message.content
    assert_no_tags(*(p.content or "" for p in parts))

    generated = client.generate(model=model, prompt=prompt, think=think)
    assert_apart(generated.thinking, generated.response)
    parts = list(client.generate(model=model, prompt=prompt, think=think, stream=True))
    assert joined(parts, "thinking") == generated.thinking
    assert joined(parts, "response") == generated.response
    assert parts[-1].done_reason == "stop"


def test_the_max_effort_and_level_switch_thinking_on(base):
    # OpenAI's `reasoning_effort: "max"` and Ollama's `think: "max"` (the
    # raw request: the client's types stop at "high").
    prompt = f"{QUESTION} @mock(think=1)"
    chat = openai_client(base).chat.completions.create(
        model="mock", messages=user(prompt), reasoning_effort="max")
    assert_apart(chat.choices[0].message.reasoning_content, chat.choices[0].message.content)
    response = httpx.post(base + "/api/chat", json={
        "model": "mock", "messages": user(prompt), "think": "max", "stream": False}, timeout=60)
    assert response.status_code == 200, response.text
    assert_apart(response.json()["message"]["thinking"], response.json()["message"]["content"])


@pytest.mark.parametrize("model,directive", SHAPES)
def test_ollama_thinking_switched_off(base, model, directive):
    client = ollama_client(base)
    prompt = f"{QUESTION} {directive}"

    chat = client.chat(model=model, messages=user(prompt), think=False)
    assert not chat.message.thinking and chat.message.content
    assert_no_tags(chat.message.content)
    parts = [p.message for p in client.chat(model=model, messages=user(prompt), think=False, stream=True)]
    assert joined(parts, "thinking") == "" and joined(parts, "content") == chat.message.content

    generated = client.generate(model=model, prompt=prompt, think=False)
    assert not generated.thinking and generated.response
    assert_no_tags(generated.response)
    parts = list(client.generate(model=model, prompt=prompt, think=False, stream=True))
    assert joined(parts, "thinking") == "" and joined(parts, "response") == generated.response


def test_the_implicit_model_shows_the_thinking_capability(base):
    client = ollama_client(base)
    assert "thinking" in client.show("r1").capabilities
    assert "thinking" not in client.show("mock").capabilities


def rpc(base: str, method: str, params: dict) -> dict:
    """One JSON-RPC call over HTTP; its result."""
    reply = httpx.post(base + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, timeout=60)
    body = reply.json()
    assert "error" not in body, body
    return body["result"]


def rpc_stream(base: str, params: dict) -> list[dict]:
    """A streamed `run`, polled to its end chunk; its chunks."""
    stream_id = rpc(base, "run", {**params, "stream": True})["stream_id"]
    chunks: list[dict] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        polled = rpc(base, "run", {"stream_id": stream_id, "from_seq": len(chunks), "wait_ms": 5000})
        chunks += polled["chunks"]
        if not polled["has_more"]:
            assert [c["seq"] for c in chunks] == list(range(len(chunks)))
            assert chunks[-1]["end"] and not any(c["end"] for c in chunks[:-1])
            return chunks
    pytest.fail(f"stream {stream_id} did not end")


@pytest.mark.parametrize("model,directive", SHAPES)
def test_json_rpc_run_thinking(base, model, directive):
    params = {"model": model, "prompt": f"{QUESTION} {directive}", "enable_thinking": True}
    result = rpc(base, "run", params)
    assert_apart(result["thinking"], result["text"])
    assert result["finish_reason"] == "stop"
    assert 0 < result["usage"]["reasoning_tokens"] < result["usage"]["completion_tokens"]

    chunks = rpc_stream(base, params)
    thinking = [c for c in chunks if "thinking" in c]
    # Thinking comes in chunks of its own, before the answer.
    assert thinking and all(c["delta"] == "" for c in thinking)
    assert "".join(c["thinking"] for c in thinking) == result["thinking"]
    assert "".join(c["delta"] for c in chunks) == result["text"]
    first_text = next(i for i, c in enumerate(chunks) if c["delta"])
    assert all("thinking" not in c for c in chunks[first_text:])
    assert chunks[-1]["usage"]["reasoning_tokens"] == result["usage"]["reasoning_tokens"]

    off = rpc(base, "run", {**params, "enable_thinking": False})
    assert "thinking" not in off and off["text"]
    assert_no_tags(off["text"])
    chunks = rpc_stream(base, {**params, "enable_thinking": False})
    assert not any("thinking" in c for c in chunks)
    assert "".join(c["delta"] for c in chunks) == off["text"]


@pytest.mark.anyio
@pytest.mark.parametrize("model,directive", SHAPES)
async def test_mcp_generate_thinking(base, model, directive):
    async with Client(base + "/mcp") as client:
        fragments = []

        async def on_progress(progress, total, message):
            fragments.append(message)

        arguments = {"model": model, "prompt": f"{QUESTION} {directive}", "enable_thinking": True}
        result = await client.call_tool("generate", arguments, progress_callback=on_progress)
        assert not result.is_error
        structured = result.structured_content
        assert_apart(structured["thinking"], structured["text"])
        assert result.content[0].text == structured["text"]
        # Progress carries the thinking, then the answer.
        assert "".join(fragments) == structured["thinking"] + structured["text"]

        off = await client.call_tool("generate", {**arguments, "enable_thinking": False})
        assert not off.is_error
        assert "thinking" not in off.structured_content and off.structured_content["text"]
        assert_no_tags(off.structured_content["text"])


@pytest.mark.parametrize("model,directive", SHAPES)
def test_mcp_progress_marks_the_thinking(base, model, directive):
    """Raw Streamable HTTP: the SDK's progress callback does not show `_meta`."""
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "generate", "_meta": {"progressToken": "p"},
        "arguments": {"model": model, "prompt": f"{QUESTION} {directive}", "enable_thinking": True}}}
    reply = httpx.post(base + "/mcp", json=call, headers={"accept": "application/json, text/event-stream"}, timeout=60)
    *progress, result = [json.loads(line.removeprefix("data: ")) for line in reply.text.splitlines()
                         if line.startswith("data: ")]
    structured = result["result"]["structuredContent"]
    marked = [p["params"].get("_meta", {}).get("thinking", False) for p in progress]
    # Thinking first, marked; then the answer, unmarked.
    assert marked == sorted(marked, reverse=True) and True in marked and False in marked
    assert "".join(p["params"]["message"] for p, m in zip(progress, marked) if m) == structured["thinking"]
    assert "".join(p["params"]["message"] for p, m in zip(progress, marked) if not m) == structured["text"]


# ------------------------------------------ reasoning in other clients


def test_langchain_chat_ollama_reads_the_thinking_apart(base):
    from langchain_ollama import ChatOllama

    prompt = f"{QUESTION} @mock(think=2)"
    reply = ChatOllama(model="r1", base_url=base, reasoning=True).invoke(prompt)
    thinking = reply.additional_kwargs["reasoning_content"]
    assert_apart(thinking, reply.content)
    # The same as the ollama client gets.
    chat = ollama_client(base).chat(model="r1", messages=user(prompt), think=True)
    assert (thinking, reply.content) == (chat.message.thinking, chat.message.content)


@pytest.mark.anyio
@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
async def test_openai_agents_sdk_yields_a_reasoning_item(base, streamed):
    from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
    from agents.items import MessageOutputItem, ReasoningItem
    from openai.types.shared import Reasoning

    set_tracing_disabled(True)
    prompt = f"{QUESTION} @mock(think=2)"
    async with openai.AsyncOpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=60) as client:
        agent = Agent(
            name="reasoner",
            model=OpenAIChatCompletionsModel(model="r1", openai_client=client),
            model_settings=ModelSettings(reasoning=Reasoning(effort="high")),
        )
        if streamed:
            result = Runner.run_streamed(agent, prompt)
            async for _ in result.stream_events():
                pass
        else:
            result = await Runner.run(agent, prompt)
    assert [type(item) for item in result.new_items] == [ReasoningItem, MessageOutputItem]
    thinking = "".join(part.text for part in result.new_items[0].raw_item.summary)
    assert_apart(thinking, result.final_output)
    # The same as the plain client gets.
    plain = openai_client(base).chat.completions.create(model="r1", messages=user(prompt), reasoning_effort="high")
    assert (thinking, result.final_output) == (plain.choices[0].message.reasoning_content,
                                               plain.choices[0].message.content)
    # HTTP clients the SDK made and dropped are finalised now, while the
    # event loop runs: finalised after it closes, their close fails the
    # test with "Event loop is closed" though nothing was wrong.
    import asyncio
    import gc

    del result, agent
    # Their close runs in callbacks of its own: a few turns of the loop,
    # with time for the sockets' shutdown, let it finish.
    for _ in range(5):
        gc.collect()
        await asyncio.sleep(0.02)


# ----------------------------------------------------- reasoning details


def test_a_cap_reached_while_thinking_leaves_it_all_thinking(base):
    client = openai_client(base)
    ask = dict(model="r1", messages=user(f"{QUESTION} @mock(think=2)"), reasoning_effort="high", max_tokens=5)
    whole = client.chat.completions.create(**ask)
    message = whole.choices[0].message
    assert whole.choices[0].finish_reason == "length"
    assert not message.content and message.reasoning_content
    assert whole.usage.completion_tokens_details.reasoning_tokens == whole.usage.completion_tokens == 5
    _, deltas = openai_stream(client, **ask)
    assert joined(deltas, "reasoning_content") == message.reasoning_content
    assert joined(deltas, "content") == ""

    generated = ollama_client(base).generate(
        model="r1", prompt=f"{QUESTION} @mock(think=2)", think=True, options={"num_predict": 5})
    assert generated.done_reason == "length" and generated.response == ""
    assert generated.thinking == message.reasoning_content


@pytest.mark.parametrize("model,directive", SHAPES)
def test_stop_strings_end_the_answer_not_the_thinking(base, model, directive):
    client = openai_client(base)
    ask = dict(model=model, messages=user(f"{QUESTION} {directive}"), reasoning_effort="high")
    free = client.chat.completions.create(**ask).choices[0].message
    # A space: the thinking has several, the answer is cut after its first word.
    assert " " in free.reasoning_content
    stopped = client.chat.completions.create(**ask, stop=" ")
    message = stopped.choices[0].message
    assert message.reasoning_content == free.reasoning_content
    assert message.content == free.content.split(" ")[0] and stopped.choices[0].finish_reason == "stop"
    chat = ollama_client(base).chat(model=model, messages=ask["messages"], think=True, options={"stop": [" "]})
    assert (chat.message.thinking, chat.message.content) == (message.reasoning_content, message.content)


@pytest.mark.parametrize("runner", ["thread", "process"])
def test_a_thinking_chat_continues_with_only_the_new_turn(tmp_path, runner):
    """The model's history holds the answer, not the thinking: the client
    sends back the answer, and only its new message is prefilled. With a
    thinking budget (`reasoning_effort`) the chat is sent whole, as on the
    NPU, where the budget's pause is a single-turn run."""
    proc, base = start(tmp_path, "--mock-runner", runner)
    try:
        client = openai_client(base)
        history = user(f"{QUESTION} @mock(think=2)")
        # `max`: thinking on, with no budget.
        first = client.chat.completions.create(model="r1", messages=history, reasoning_effort="max").choices[0]
        assert first.message.reasoning_content
        new_turn = "And at sunset? @mock(think=2)"
        history += [{"role": "assistant", "content": first.message.content}, *user(new_turn)]
        second = client.chat.completions.create(model="r1", messages=history, reasoning_effort="max")
        assert_apart(second.choices[0].message.reasoning_content, second.choices[0].message.content)
        assert second.usage.prompt_tokens == prefill_tokens(new_turn)
        budgeted = client.chat.completions.create(model="r1", messages=history, reasoning_effort="high")
        assert budgeted.usage.prompt_tokens > prefill_tokens(new_turn)

        # Ollama's client sends the thinking back with the answer.
        chat = ollama_client(base)
        history = user(f"{QUESTION} @mock(think=1)")
        first = chat.chat(model="mock", messages=history, think=True).message
        new_turn = "And at sunset? @mock(think=1)"
        history += [first, *user(new_turn)]
        second = chat.chat(model="mock", messages=history, think=True)
        assert_apart(second.message.thinking, second.message.content)
        assert second.prompt_eval_count == prefill_tokens(new_turn)
    finally:
        stop_server(proc)


# ------------------------------------------------------------ stop strings

ECHO = "The rockchip NPU streams 東京タワー tokens to every client"
ECHOED = f"Repeat this. @mock(echo=1) {ECHO}"
# (stop strings, the answer before the first of them)
STOPS = [
    # 12 bytes: across at least three 2-4-byte tokens.
    pytest.param(["chip NPU str"], "The rock", id="across-tokens"),
    # Inside multi-byte characters the tokens split.
    pytest.param(["京タワ"], "The rockchip NPU streams 東", id="inside-characters"),
    pytest.param(["The ro"], "", id="at-the-start"),
    # Listed first but later in the text: the earliest in the text wins.
    pytest.param(["client", "tokens", "NPU s"], "The rockchip ", id="earliest-wins"),
    # Both end with the same token: the one that starts first wins.
    pytest.param(["ip NPU", "hip NPU"], "The rockc", id="ending-together"),
]


def as_sent(stops: list[str]):
    """One stop string as OpenAI's plain string, several as a list."""
    return stops[0] if len(stops) == 1 else stops


@pytest.mark.parametrize("stops,before", STOPS)
def test_openai_stop_strings(base, stops, before):
    client = openai_client(base)
    full = client.chat.completions.create(model="mock", messages=user(ECHOED))
    assert full.choices[0].message.content == ECHO

    ask = dict(model="mock", messages=user(ECHOED), stop=as_sent(stops))
    whole = client.chat.completions.create(**ask)
    assert whole.choices[0].message.content == before
    assert whole.choices[0].finish_reason == "stop"
    # The runtime stopped there, not at the end of the echo.
    assert whole.usage.completion_tokens < full.usage.completion_tokens

    chunks, deltas = openai_stream(client, **ask)
    assert joined(deltas, "content") == before
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage.completion_tokens < full.usage.completion_tokens

    completion = client.completions.create(model="mock", prompt=ECHOED, stop=as_sent(stops))
    assert completion.choices[0].text == before and completion.choices[0].finish_reason == "stop"


@pytest.mark.parametrize("stops,before", STOPS)
def test_ollama_stop_strings(base, stops, before):
    client = ollama_client(base)
    full = client.chat(model="mock", messages=user(ECHOED))
    assert full.message.content == ECHO

    chat = client.chat(model="mock", messages=user(ECHOED), options={"stop": stops})
    assert chat.message.content == before and chat.done_reason == "stop"
    assert chat.eval_count < full.eval_count
    parts = list(client.chat(model="mock", messages=user(ECHOED), options={"stop": stops}, stream=True))
    assert joined([p.message for p in parts], "content") == before
    assert parts[-1].done_reason == "stop" and parts[-1].eval_count < full.eval_count

    generated = client.generate(model="mock", prompt=ECHOED, options={"stop": stops})
    assert generated.response == before and generated.done_reason == "stop"
    parts = list(client.generate(model="mock", prompt=ECHOED, options={"stop": stops}, stream=True))
    assert joined(parts, "response") == before
    assert parts[-1].done_reason == "stop" and parts[-1].eval_count < full.eval_count


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_stop_string_that_never_completes_loses_no_text(base, stream):
    """The tail that might start a stop string is held back, then shown:
    at the end of the reply, and when the cap ends it."""
    client = openai_client(base)

    def answer(**extra):
        ask = dict(model="mock", messages=user(ECHOED), **extra)
        if stream:
            chunks, deltas = openai_stream(client, **ask)
            return joined(deltas, "content"), [c.choices[0].finish_reason for c in chunks if c.choices][-1]
        whole = client.chat.completions.create(**ask).choices[0]
        return whole.message.content, whole.finish_reason

    assert answer(stop="client!") == (ECHO, "stop")
    assert answer(stop=["ent.", "nt!"]) == (ECHO, "stop")
    capped, reason = answer(stop="rockchipX", max_tokens=4)
    assert reason == "length" and ECHO.startswith(capped) and len(capped) > len("The")
    assert capped == answer(max_tokens=4)[0]


LONG = "Tell me everything. @mock(length=5000)"


def test_a_stop_string_ends_a_long_generation_at_once(base):
    """5000 tokens would take 12.5 s at the mock's pace: the first space
    stops it after the first word, and the runtime generates no further."""
    client = openai_client(base)
    whole = client.chat.completions.create(model="mock", messages=user(LONG), stop=" ")
    word = whole.choices[0].message.content
    assert word and " " not in word and whole.choices[0].finish_reason == "stop"
    assert whole.usage.completion_tokens < 20

    chunks, deltas = openai_stream(client, model="mock", messages=user(LONG), stop=" ")
    assert joined(deltas, "content") == word
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens

    chat = ollama_client(base).chat(model="mock", messages=user(LONG), options={"stop": [" "]})
    assert chat.message.content == word and chat.done_reason == "stop"
    assert chat.eval_count == whole.usage.completion_tokens


# -------------------------------------------------------- tool-call stream

TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}, "metric": {"type": "boolean"}},
            "required": ["city"],
        },
    },
}]
# What the mock fills in: the required parameters only, strings as "test".
ARGUMENTS = {"city": "test"}
CALL = {"model": "mock", "messages": user("What is the weather in Paris? @mock(tool_call=1)"), "tools": TOOLS}


def check_tool_call_stream(chunks: list[dict], arguments: dict = ARGUMENTS) -> None:
    """A streamed call, field by field, as OpenAI streams one."""
    assert len({c["id"] for c in chunks}) == 1 and chunks[0]["id"].startswith("chatcmpl-")
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["created"] for c in chunks}) == 1 and all(c["model"] == "mock" for c in chunks)

    *with_choices, usage = chunks
    assert usage["choices"] == []
    assert usage["usage"]["completion_tokens"] > 0
    assert usage["usage"]["total_tokens"] == usage["usage"]["prompt_tokens"] + usage["usage"]["completion_tokens"]
    assert all(len(c["choices"]) == 1 and c["choices"][0]["index"] == 0 for c in with_choices)
    *body, finish = [c["choices"][0] for c in with_choices]
    assert finish["finish_reason"] == "tool_calls" and finish["delta"] == {}
    assert all(choice.get("finish_reason") is None for choice in body)

    deltas = [choice["delta"] for choice in body]
    assert deltas[0]["role"] == "assistant"
    assert not any("role" in d for d in deltas[1:])
    assert not "".join(d.get("content") or "" for d in deltas)

    first, *rest = [call for d in deltas for call in d.get("tool_calls") or []]
    assert set(first) == {"index", "id", "type", "function"}
    assert first["index"] == 0 and first["id"].startswith("call_") and first["type"] == "function"
    assert first["function"] == {"name": "get_weather", "arguments": ""}
    assert rest
    for call in rest:
        assert set(call) == {"index", "function"} and call["index"] == 0
        assert set(call["function"]) == {"arguments"}
    assert json.loads("".join(call["function"]["arguments"] for call in rest)) == arguments


def sse(base: str, body: dict) -> list[dict]:
    """A chat completion stream's events, read raw; `[DONE]` ends it."""
    with httpx.stream("POST", base + "/v1/chat/completions", json=body, timeout=60) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [line.removeprefix("data: ") for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [json.loads(event) for event in events[:-1]]


def test_the_tool_call_stream_as_raw_sse(base):
    check_tool_call_stream(sse(base, {**CALL, **STREAMED}))


def test_the_tool_call_stream_through_the_sdk(base):
    chunks, deltas = openai_stream(openai_client(base), **CALL)
    # The SDK's objects with the fields the server sent.
    check_tool_call_stream([chunk.to_dict() for chunk in chunks])
    calls = [call for d in deltas for call in d.tool_calls or []]
    assert calls[0].function.name == "get_weather" and calls[0].id
    assert json.loads("".join(call.function.arguments for call in calls)) == ARGUMENTS


def test_thinking_then_a_tool_call(base):
    """Qwen3's shape: a thinking block, then the call (the mock echoes it)."""
    reply = ('<think>\nThe user wants the weather. I call the tool.\n</think>\n\n'
             '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>')
    ask = {**CALL, "messages": user(f"Weather? @mock(echo=1) {reply}"), "reasoning_effort": "high"}
    choice = openai_client(base).chat.completions.create(**ask).choices[0]
    assert choice.finish_reason == "tool_calls" and not choice.message.content
    assert choice.message.reasoning_content == "The user wants the weather. I call the tool."
    [call] = choice.message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}

    chunks = sse(base, {**ask, **STREAMED})
    check_tool_call_stream(chunks, {"city": "Paris"})
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert "".join(d.get("reasoning_content") or "" for d in deltas) == choice.message.reasoning_content

    chat = ollama_client(base).chat(model="mock", messages=ask["messages"], tools=TOOLS, think=True)
    assert chat.message.thinking == choice.message.reasoning_content and not chat.message.content
    calls = [(c.function.name, c.function.arguments) for c in chat.message.tool_calls]
    assert calls == [("get_weather", {"city": "Paris"})]


# --------------------------------------------------------- refused options

CHAT = {"model": "mock", "messages": user("Hello")}
# (fields of a chat completion over CHAT's, the field the 400 names)
OPENAI_REFUSED = [
    # Structured output the server cannot follow (it follows the rest:
    # tests/python/test_structured_output.py).
    ({"response_format": {"type": "xml"}}, "response_format"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "w", "schema": {"$ref": "#/nowhere"}}}},
     "response_format"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_time"}}}, "tool_choice"),
    ({"n": 2}, "n"),
    ({"logprobs": True, "response_format": {"type": "json_object"}}, "logprobs"),
    ({"top_logprobs": 3}, "top_logprobs"),
    ({"seed": "x"}, "seed"),
    ({"user": 5}, "user"),
    ({"tool_choice": 5}, "tool_choice"),
    ({"stop": 5}, "stop"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"stop": ""}, "stop"),
    ({"temperature": "hot"}, "temperature"),
    ({"max_tokens": "many"}, "max_tokens"),
    ({"reasoning_effort": "maximal"}, "reasoning_effort"),
    ({"extra_body": {"chat_template_kwargs": {"enable_thinking": "yes"}}}, "chat_template_kwargs.enable_thinking"),
    ({"stream_options": {"include_usage": "yes"}}, "stream_options.include_usage"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
]


def names_field(message: str, field: str) -> bool:
    """Whether an error message names `field` (as `field`…)."""
    return re.search("`" + re.escape(field) + r"\b", message) is not None


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("extra,field", OPENAI_REFUSED, ids=[field for _, field in OPENAI_REFUSED])
def test_openai_refused_options_name_their_field(base, extra, field, stream):
    with pytest.raises(openai.BadRequestError) as refused:
        openai_client(base).chat.completions.create(**{**CHAT, **extra}, stream=stream)
    assert refused.value.status_code == 400
    assert refused.value.param == field
    assert names_field(refused.value.message, field), refused.value.message


@pytest.mark.parametrize("extra,field", [
    ({"n": 2}, "n"),
    ({"logprobs": 6}, "logprobs"),
    ({"echo": True}, "echo"),
    ({"suffix": "and then"}, "suffix"),
    ({"best_of": 3}, "best_of"),
    ({"stop": 5}, "stop"),
    ({"seed": "x"}, "seed"),
])
def test_openai_completions_refused_options_name_their_field(base, extra, field):
    with pytest.raises(openai.BadRequestError) as refused:
        openai_client(base).completions.create(model="mock", prompt="Hello", **extra)
    assert refused.value.param == field
    assert names_field(refused.value.message, field), refused.value.message


@pytest.mark.parametrize("extra", [
    {"n": 1},
    {"logprobs": False},
    {"response_format": {"type": "text"}},
    {"tools": TOOLS, "tool_choice": "auto"},
    {"tools": TOOLS, "tool_choice": "none"},
    {"seed": 7, "user": "someone", "parallel_tool_calls": False},
    {"stop": None},
    {"extra_body": {"an_unknown_field": {"ignored": True}}},
], ids=lambda extra: ",".join(extra))
def test_openai_neighbours_of_refused_options_are_accepted(base, extra):
    whole = openai_client(base).chat.completions.create(**CHAT, **extra)
    assert whole.choices[0].message.content and whole.choices[0].finish_reason == "stop"


# (ollama client method, its arguments, the field the 400 names)
OLLAMA_REFUSED = [
    ("generate", {"raw": True}, "raw"),
    ("generate", {"suffix": "end"}, "suffix"),
    ("generate", {"template": "{{ .Prompt }}"}, "template"),
    ("generate", {"context": [1, 2, 3]}, "context"),
    ("generate", {"format": {"$ref": "#/nowhere"}}, "format"),
    ("chat", {"format": {"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}}}, "format"),
    ("chat", {"think": "maybe"}, "think"),
    ("chat", {"options": {"temperature": "hot"}}, "options.temperature"),
    ("generate", {"options": {"stop": "x"}}, "options.stop"),
    ("generate", {"options": {"seed": 1.5}}, "options.seed"),
]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("method,extra,field", OLLAMA_REFUSED, ids=[f"{m}-{f}" for m, _, f in OLLAMA_REFUSED])
def test_ollama_refused_options_name_their_field(base, method, extra, field, stream):
    client = ollama_client(base)
    ask = {"prompt": "Hello"} if method == "generate" else {"messages": user("Hello")}
    with pytest.raises(ollama.ResponseError) as refused:
        reply = getattr(client, method)(model="mock", **ask, **extra, stream=stream)
        if stream:
            list(reply)
    assert refused.value.status_code == 400
    assert names_field(refused.value.error, field), refused.value.error


def test_ollama_neighbours_of_refused_options_are_accepted(base):
    client = ollama_client(base)
    assert client.generate(model="mock", prompt="Hello", raw=False, suffix="", template="", context=[]).response
    assert client.generate(model="mock", prompt="Hello", format="").response
    assert client.chat(model="mock", messages=user("Hello"), options={"seed": 3, "num_ctx": 4096}).message.content


# Raw HTTP (Ollama streams by default: the refusal still comes first):
# values the ollama client's own types refuse or change.
@pytest.mark.parametrize("path,body,field", [
    ("/api/generate", {"prompt": "Hello", "think": 1}, "think"),
    ("/api/generate", {"prompt": "Hello", "format": "yaml"}, "format"),
    ("/api/chat", {"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ("/api/chat", {"messages": [{"role": "user", "content": "Hello", "images": "x"}]}, "messages[0].images"),
])
def test_ollama_raw_type_errors_name_their_field(base, path, body, field):
    reply = httpx.post(base + path, json={"model": "mock", **body}, timeout=60)
    assert reply.status_code == 400
    assert names_field(reply.json()["error"], field), reply.text
