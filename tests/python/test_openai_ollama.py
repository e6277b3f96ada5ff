"""The OpenAI and Ollama APIs, driven by their official Python clients."""

import datetime
import time

import httpx
import ollama
import openai
import pytest

from conftest import mock_tokens, start_server, stop_server

PROMPT = "Tell me about the Rock 5B @mock(length=40)"


def openai_client(base: str, **kwargs) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key="test-key", **kwargs)


def test_openai_models_chat_and_completions(api_server):
    client = openai_client(api_server)
    assert [m.id for m in client.models.list()] == ["mock"]

    whole = client.chat.completions.create(model="mock", messages=[{"role": "user", "content": PROMPT}])
    text = whole.choices[0].message.content
    assert text and whole.choices[0].finish_reason == "stop"
    assert whole.usage.completion_tokens > 0
    assert whole.usage.total_tokens == whole.usage.prompt_tokens + whole.usage.completion_tokens

    chunks = list(client.chat.completions.create(model="mock", messages=[{"role": "user", "content": PROMPT}], stream=True))
    assert len({c.id for c in chunks}) == 1 and len({c.created for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == text
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert all(c.usage is None for c in chunks)

    with_usage = list(
        client.chat.completions.create(
            model="mock", messages=[{"role": "user", "content": PROMPT}], stream=True, stream_options={"include_usage": True}
        )
    )
    assert with_usage[-1].choices == [] and with_usage[-1].usage.completion_tokens == whole.usage.completion_tokens

    capped = client.chat.completions.create(model="mock", messages=[{"role": "user", "content": PROMPT}], max_tokens=5)
    assert capped.choices[0].finish_reason == "length"

    completion = client.completions.create(model="mock", prompt=PROMPT)
    assert completion.object == "text_completion" and completion.choices[0].text == text
    streamed = list(client.completions.create(model="mock", prompt=PROMPT, stream=True))
    assert "".join(c.choices[0].text for c in streamed) == text


def test_openai_errors_have_the_right_status():
    proc, base = start_server("--mock-tokens-per-second", "2", "--config", "/dev/null")
    try:
        client = openai_client(base, max_retries=0)
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model="mock", messages=[])
        # Fill the queue (1 running + 16 waiting), then one more is refused with 503 + Retry-After.
        slow = [
            client.chat.completions.create(model="mock", messages=[{"role": "user", "content": f"slow {i} @mock(length=1000)"}], stream=True)
            for i in range(17)
        ]
        with pytest.raises(openai.InternalServerError) as busy:
            client.chat.completions.create(model="mock", messages=[{"role": "user", "content": "one too many"}])
        assert busy.value.status_code == 503
        assert int(busy.value.response.headers["retry-after"]) >= 1
        for stream in slow:
            stream.close()
    finally:
        stop_server(proc)


def test_openai_needs_the_api_key(api_server):
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=api_server + "/v1", api_key="wrong", max_retries=0).models.list()


def test_a_client_that_disconnects_mid_stream_frees_the_model():
    proc, base = start_server("--mock-tokens-per-second", "20")
    try:
        client = openai_client(base, max_retries=0, timeout=30)
        stream = client.chat.completions.create(
            model="mock", messages=[{"role": "user", "content": "forever @mock(length=100000)"}], stream=True
        )
        next(iter(stream))
        stream.close()
        # Had the generation gone on (5000 s), this would time out.
        after = client.chat.completions.create(model="mock", messages=[{"role": "user", "content": "after @mock(length=3)"}])
        assert after.choices[0].finish_reason == "stop"
    finally:
        stop_server(proc)


def test_ollama_chat_generate_and_model_listing(api_server):
    client = ollama.Client(host=api_server, headers={"Authorization": "Bearer test-key"})
    assert httpx.get(api_server + "/api/version").status_code == 401
    assert httpx.get(api_server + "/api/version", headers={"Authorization": "Bearer test-key"}).json()["version"]
    assert [m.model for m in client.list().models] == ["mock"]
    # Models load on demand: none is loaded before the first request.
    assert client.ps().models == []
    shown = client.show("mock")
    assert shown.modelinfo is not None and "completion" in shown.capabilities

    whole = client.chat(model="mock", messages=[{"role": "user", "content": PROMPT}])
    text = whole.message.content
    assert text and whole.done and whole.done_reason == "stop"
    assert isinstance(whole.eval_duration, int) and whole.eval_count > 0
    parts = list(client.chat(model="mock", messages=[{"role": "user", "content": PROMPT}], stream=True))
    assert all(p.message.role == "assistant" for p in parts)
    assert "".join(p.message.content for p in parts) == text
    assert parts[-1].done and parts[-1].done_reason == "stop"

    assert [m.model for m in client.ps().models] == ["mock"]

    generated = client.generate(model="mock", prompt=PROMPT)
    assert generated.response == text and generated.prompt_eval_count > 0
    streamed = list(client.generate(model="mock:latest", prompt=PROMPT, stream=True, options={"num_predict": 5}))
    assert streamed[-1].done_reason == "length"

    with pytest.raises(ollama.ResponseError) as missing:
        client.chat(model="nope", messages=[{"role": "user", "content": "x"}])
    assert missing.value.status_code == 404


def test_a_multi_turn_chat_prefills_only_the_new_turn(api_server):
    client = openai_client(api_server)
    history = [{"role": "system", "content": "You are brief."}, {"role": "user", "content": "Tell me about RK3588 boards."}]
    first = client.chat.completions.create(model="mock", messages=history)
    history.append({"role": "assistant", "content": first.choices[0].message.content})
    new_turn = "And the NPU?"
    history.append({"role": "user", "content": new_turn})
    second = client.chat.completions.create(model="mock", messages=history)
    # The mock counts prefill with its tokenizer.
    assert second.usage.prompt_tokens == mock_tokens(new_turn)
    assert first.usage.prompt_tokens > second.usage.prompt_tokens
    # A different chat is prefilled in full.
    other = client.chat.completions.create(model="mock", messages=[{"role": "user", "content": "x" * 80}])
    assert other.usage.prompt_tokens == mock_tokens("x" * 80)


WEATHER = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
ASK = {"role": "user", "content": "What is the weather in Paris? @mock(tool_call=1)"}


def test_openai_tool_call_round_trip(api_server):
    import json

    client = openai_client(api_server)
    first = client.chat.completions.create(model="mock", messages=[ASK], tools=WEATHER)
    assert first.choices[0].finish_reason == "tool_calls"
    call = first.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "test"}

    chunks = list(client.chat.completions.create(model="mock", messages=[ASK], tools=WEATHER, stream=True))
    streamed = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    # As OpenAI streams a call: id, type and name first, then the arguments in fragments.
    assert streamed[0].id and streamed[0].type == "function" and streamed[0].function.name == "get_weather"
    arguments = "".join(tc.function.arguments or "" for tc in streamed if tc.index == 0)
    assert json.loads(arguments) == {"city": "test"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert not any("<tool_call>" in (c.choices[0].delta.content or "") for c in chunks if c.choices)

    messages = [
        ASK,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": '{"temperature": 21}'},
    ]
    answer = client.chat.completions.create(model="mock", messages=messages, tools=WEATHER)
    assert answer.choices[0].finish_reason == "stop" and answer.choices[0].message.content


def test_ollama_tool_call_round_trip(api_server):
    client = ollama.Client(host=api_server, headers={"Authorization": "Bearer test-key"})
    first = client.chat(model="mock", messages=[ASK], tools=WEATHER)
    call = first.message.tool_calls[0]
    assert call.function.name == "get_weather" and call.function.arguments == {"city": "test"}
    parts = list(client.chat(model="mock", messages=[ASK], tools=WEATHER, stream=True))
    assert any(p.message.tool_calls for p in parts) and parts[-1].done
    assert "<tool_call>" not in "".join(p.message.content or "" for p in parts)
    answer = client.chat(
        model="mock",
        messages=[ASK, {"role": "assistant", "content": "", "tool_calls": [call]}, {"role": "tool", "content": '{"temperature": 21}'}],
        tools=WEATHER,
    )
    assert answer.message.content and not answer.message.tool_calls


def test_ollama_client_that_disconnects_mid_stream_frees_the_model():
    proc, base = start_server("--mock-tokens-per-second", "20")
    try:
        with httpx.stream("POST", base + "/api/chat", json={"model": "mock", "messages": [
            {"role": "user", "content": "forever @mock(length=100000)"}]}, timeout=30) as response:
            next(response.iter_lines())
        client = ollama.Client(host=base, timeout=30)
        after = client.chat(model="mock", messages=[{"role": "user", "content": "after @mock(length=3)"}])
        assert after.done_reason == "stop"
    finally:
        stop_server(proc)


def test_both_clients_against_the_fake_runtime(fake_server):
    from conftest import FAKE_TEXT

    base, log = fake_server
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused")
    [model] = [m.id for m in client.models.list()]
    whole = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}])
    assert whole.choices[0].message.content == FAKE_TEXT
    assert whole.usage.completion_tokens > 0 and whole.usage.prompt_tokens > 0
    chunks = list(client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hi"}], stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == FAKE_TEXT
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert client.completions.create(model=model, prompt="hi").choices[0].text == FAKE_TEXT

    # A second turn that continues the chat prefills only the new message
    # (the fake counts prompt bytes / 4 + 1).
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": FAKE_TEXT},
               {"role": "user", "content": "again"}]
    client.chat.completions.create(model=model, messages=history[:1])
    second = client.chat.completions.create(model=model, messages=history)
    assert second.usage.prompt_tokens == len("again") // 4 + 1
    assert "keep_history=1 prompt=again" in log.read_text()

    ollama_client = ollama.Client(host=base)
    chat = ollama_client.chat(model=model, messages=[{"role": "user", "content": "hi"}])
    assert chat.message.content == FAKE_TEXT and chat.eval_count > 0 and isinstance(chat.eval_duration, int)
    parts = list(ollama_client.generate(model=model, prompt="hi", stream=True))
    assert "".join(p.response for p in parts) == FAKE_TEXT and parts[-1].done_reason == "stop"
    assert ollama_client.show(model).modelinfo is not None


def test_a_tool_call_from_the_fake_runtime_reaches_both_clients(tmp_path):
    import json

    from conftest import build_fake

    runtime = build_fake(tmp_path)
    model = tmp_path / "tools.rkllm"
    model.write_text('<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>')
    proc, base = start_server("--backend", "rkllm", "--runtime", str(runtime), "--model", str(model))
    try:
        client = openai.OpenAI(base_url=base + "/v1", api_key="unused")
        first = client.chat.completions.create(model="tools", messages=[{"role": "user", "content": "weather?"}], tools=WEATHER)
        call = first.choices[0].message.tool_calls[0]
        assert first.choices[0].finish_reason == "tool_calls"
        assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
        result = ollama.Client(host=base).chat(model="tools", messages=[{"role": "user", "content": "weather?"}], tools=WEATHER)
        assert result.message.tool_calls[0].function.arguments == {"city": "Paris"}
    finally:
        stop_server(proc)


def test_ollama_keep_alive_loads_and_unloads_models_in_runners():
    """The official client's keep_alive against models in runner processes."""
    proc, base = start_server("--mock-tokens-per-second", "0", "--mock-runner", "process")
    try:
        client = ollama.Client(host=base, timeout=30)
        assert client.ps().models == []

        loaded = client.generate(model="mock", keep_alive="10m")
        assert loaded.done and loaded.done_reason == "load"
        [running] = client.ps().models
        assert running.model == "mock"
        left = (running.expires_at - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
        assert 590 <= left <= 601, left
        assert running.size > 0

        # keep_alive=0 with a prompt: the answer, then the model unloads.
        answered = client.generate(model="mock", prompt=PROMPT, keep_alive=0)
        assert answered.done_reason == "stop" and answered.response
        deadline = time.monotonic() + 30
        while client.ps().models and time.monotonic() < deadline:
            time.sleep(0.02)
        assert client.ps().models == []

        # -1: loaded for good (shown as a date far ahead).
        chat = client.chat(model="mock", messages=[{"role": "user", "content": PROMPT}], keep_alive=-1)
        assert chat.message.content == answered.response
        [running] = client.ps().models
        assert running.expires_at.year >= datetime.datetime.now().year + 5

        unloaded = client.generate(model="mock", keep_alive=0)
        assert unloaded.done_reason == "unload"
        assert client.ps().models == []

        with pytest.raises(ollama.ResponseError) as bad:
            client.generate(model="mock", prompt="x", keep_alive="whenever")
        assert bad.value.status_code == 400
    finally:
        stop_server(proc)
