"""The Anthropic Messages API, driven by the official `anthropic` client
(and by raw HTTP where the wire itself is checked)."""

import base64
import json
import re
import shutil
import subprocess
import time

import anthropic
import httpx
import pytest

from conftest import ROOT, mock_tokens, start_server, stop_server
from test_docs_curl import commands
from test_vision import GREEN, RED, colours, vision_server  # noqa: F401 (a fixture)

PROMPT = "Tell me about the Rock 5B @mock(length=40)"
KEY = "test-key"
WEATHER = [
    {
        "name": "get_weather",
        "description": "Current weather in a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
]


@pytest.fixture
def server():
    """A server with API keys; yields its base URL."""
    proc, base = start_server("--mock-tokens-per-second", "400", "--api-key", KEY)
    yield base
    stop_server(proc)


def client_for(base: str, **kwargs) -> anthropic.Anthropic:
    """The official client: it sends the key as `x-api-key`."""
    return anthropic.Anthropic(base_url=base, api_key=KEY, **kwargs)


def user(text: str) -> list:
    return [{"role": "user", "content": text}]


def metric(base: str, name: str) -> float:
    text = httpx.get(base + "/metrics", headers={"Authorization": f"Bearer {KEY}"}).text
    found = re.search(r"^" + re.escape(name) + r" (\S+)$", text, flags=re.M)
    return float(found.group(1)) if found else 0.0


def test_create_and_stream_with_the_sdks_accumulator(server):
    client = client_for(server)
    whole = client.messages.create(model="mock", max_tokens=200, messages=user(PROMPT))
    assert whole.id.startswith("msg_") and whole.type == "message" and whole.role == "assistant"
    assert whole.model == "mock" and whole.stop_reason == "end_turn" and whole.stop_sequence is None
    [block] = whole.content
    assert block.type == "text" and block.text
    assert whole.usage.input_tokens == mock_tokens(PROMPT) and whole.usage.output_tokens == 40

    with client.messages.stream(model="mock", max_tokens=200, messages=user(PROMPT)) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == block.text
    assert [b.type for b in final.content] == ["text"] and final.content[0].text == block.text
    assert final.stop_reason == "end_turn" and final.usage.output_tokens == 40
    assert final.usage.input_tokens == whole.usage.input_tokens

    capped = client.messages.create(model="mock", max_tokens=5, messages=user(PROMPT))
    assert capped.stop_reason == "max_tokens" and capped.usage.output_tokens == 5
    assert block.text.startswith(capped.content[0].text)


def test_a_tool_round_trip(server):
    client = client_for(server)
    ask = user("What is the weather in Paris? @mock(tool_call=1)")
    first = client.messages.create(model="mock", max_tokens=200, messages=ask, tools=WEATHER)
    assert first.stop_reason == "tool_use"
    [call] = [b for b in first.content if b.type == "tool_use"]
    assert call.id.startswith("toolu_") and call.name == "get_weather" and call.input == {"city": "test"}
    assert not any("<tool_call>" in getattr(b, "text", "") for b in first.content)

    with client.messages.stream(model="mock", max_tokens=200, messages=ask, tools=WEATHER) as stream:
        events = list(stream)
        final = stream.get_final_message()
    [streamed] = [b for b in final.content if b.type == "tool_use"]
    assert streamed.name == "get_weather" and streamed.input == {"city": "test"} and streamed.id.startswith("toolu_")
    assert final.stop_reason == "tool_use"
    fragments = [e.delta.partial_json for e in events if e.type == "content_block_delta" and e.delta.type == "input_json_delta"]
    assert json.loads("".join(fragments)) == {"city": "test"}
    starts = [e.index for e in events if e.type == "content_block_start"]
    assert starts == list(range(len(final.content)))

    answer = client.messages.create(
        model="mock",
        max_tokens=200,
        tools=WEATHER,
        messages=[
            *ask,
            {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": '{"temperature": 21}'}]},
        ],
    )
    assert answer.stop_reason == "end_turn"
    assert [b.type for b in answer.content] == ["text"] and answer.content[0].text


def test_a_failed_tool_result_reaches_the_model_before_the_users_text(server):
    client = client_for(server)
    # The mock repeats the prompt after the directive: the transcript the model read.
    reply = client.messages.create(
        model="mock",
        max_tokens=500,
        messages=[
            {"role": "user", "content": "run it @mock(echo=1)"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "I should run it.", "signature": "sig"},
                {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "false"}},
            ]},
            {"role": "user", "content": [
                {"type": "text", "text": "now what?"},
                {"type": "tool_result", "tool_use_id": "toolu_1", "is_error": True, "content": [{"type": "text", "text": "exit 1"}]},
            ]},
        ],
    )
    text = reply.content[0].text
    assert text.endswith("tool: Error: exit 1\nuser: now what?"), text
    assert "I should run it." not in text and '"command":"false"' in text


def test_images_as_base64(vision_server):  # noqa: F811
    client = anthropic.Anthropic(base_url=vision_server, api_key="unused", max_retries=0)

    def image(picture: bytes) -> dict:
        return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": base64.b64encode(picture).decode()}}

    reply = client.messages.create(
        model="vl", max_tokens=100, messages=[{"role": "user", "content": [image(GREEN), {"type": "text", "text": "versus"}, image(RED)]}]
    )
    assert colours(reply.content[0].text) == ["32,223,32", "223,32,32"]
    with pytest.raises(anthropic.BadRequestError, match="does not take images") as refused:
        client.messages.create(model="text", max_tokens=10, messages=[{"role": "user", "content": [image(RED)]}])
    assert refused.value.body["error"]["type"] == "invalid_request_error"


def test_thinking_on_gives_a_thinking_block_before_the_text_and_off_none(server):
    client = client_for(server)
    ask = user("Why? @mock(think=1)")
    on = client.messages.create(model="mock", max_tokens=200, messages=ask, thinking={"type": "enabled", "budget_tokens": 1024})
    assert [b.type for b in on.content] == ["thinking", "text"]
    assert on.content[0].thinking and on.content[0].signature == ""
    assert "<think>" not in on.content[1].text and "</think>" not in on.content[1].text

    with client.messages.stream(model="mock", max_tokens=200, messages=ask, thinking={"type": "enabled", "budget_tokens": 1024}) as stream:
        final = stream.get_final_message()
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert final.content[0].thinking == on.content[0].thinking and final.content[1].text == on.content[1].text

    for thinking in [{"type": "disabled"}, {"type": "adaptive"}]:
        off = client.messages.create(model="mock", max_tokens=200, messages=ask, thinking=thinking)
        assert [b.type for b in off.content] == ["text"], thinking


def test_a_stop_sequence_ends_the_answer_and_is_named(server):
    client = client_for(server)
    text = client.messages.create(model="mock", max_tokens=200, messages=user(PROMPT)).content[0].text
    words = text.split()
    stop = words[len(words) // 2]
    cut = client.messages.create(model="mock", max_tokens=200, messages=user(PROMPT), stop_sequences=["@@never", stop])
    assert cut.stop_reason == "stop_sequence" and cut.stop_sequence == stop
    assert cut.content[0].text == text[: text.index(stop)]
    with client.messages.stream(model="mock", max_tokens=200, messages=user(PROMPT), stop_sequences=[stop]) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == stop
    with pytest.raises(anthropic.BadRequestError, match="stop_sequences"):
        client.messages.create(model="mock", max_tokens=20, messages=user("x"), stop_sequences=[""])


def test_count_tokens_matches_what_a_request_is_charged(server):
    client = client_for(server)
    system, question = "Be brief.", "How fast is the NPU?"
    counted = client.messages.count_tokens(model="mock", system=system, messages=user(question))
    # The mock counts a prompt as bytes / 4, rounded up: the system text, a blank line, the question.
    assert counted.input_tokens == mock_tokens(f"{system}\n\n{question}")
    sent = client.messages.create(model="mock", max_tokens=10, system=system, messages=user(question))
    assert sent.usage.input_tokens == counted.input_tokens
    with_tools = client.messages.count_tokens(model="mock", messages=user(question), tools=WEATHER)
    assert with_tools.input_tokens > client.messages.count_tokens(model="mock", messages=user(question)).input_tokens
    with pytest.raises(anthropic.NotFoundError):
        client.messages.count_tokens(model="nope", messages=user(question))


def test_errors_in_anthropics_shape(server):
    client = client_for(server, max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as bad:
        client.messages.create(model="mock", max_tokens=0, messages=user("x"))
    assert bad.value.body == {"type": "error", "error": {"type": "invalid_request_error", "message": "`max_tokens` must be at least 1, got 0"}}
    with pytest.raises(anthropic.AuthenticationError) as unauthorized:
        anthropic.Anthropic(base_url=server, api_key="wrong", max_retries=0).messages.create(model="mock", max_tokens=5, messages=user("x"))
    assert unauthorized.value.body["error"]["type"] == "authentication_error"
    with pytest.raises(anthropic.NotFoundError) as missing:
        client.messages.create(model="nope", max_tokens=5, messages=user("x"))
    assert missing.value.body["error"]["type"] == "not_found_error" and "mock" in missing.value.message
    # What cannot be followed is refused naming its field.
    with pytest.raises(anthropic.BadRequestError, match="tool_choice") as unknown:
        client.messages.create(model="mock", max_tokens=5, messages=user("x"), tools=WEATHER, tool_choice={"type": "tool", "name": "nope"})
    assert "nope" in unknown.value.message
    with pytest.raises(anthropic.BadRequestError, match="tool_choice"):
        client.messages.create(model="mock", max_tokens=5, messages=user("x"), tool_choice={"type": "any"})
    with pytest.raises(anthropic.BadRequestError, match="output_config.format"):
        client.messages.create(
            model="mock",
            max_tokens=5,
            messages=user("x"),
            output_config={"format": {"type": "json_schema", "schema": {"$ref": "#/$defs/missing"}}},
        )
    # Raw: a missing max_tokens, an unknown path under the API, a wrong method.
    headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
    for method, path, body, status in [
        ("POST", "/v1/messages", {"model": "mock", "messages": user("x")}, 400),
        ("POST", "/v1/messages/batches", {}, 404),
        ("GET", "/v1/messages", None, 405),
    ]:
        answer = httpx.request(method, server + path, json=body, headers=headers)
        assert answer.status_code == status, answer.text
        assert answer.json()["type"] == "error" and answer.json()["error"]["message"], answer.text
    assert httpx.post(server + "/v1/messages/batches", json={}, headers=headers).json()["error"]["type"] == "not_found_error"


def test_a_forced_tool_call_is_a_tool_use_block_whole_and_streamed(server):
    client = client_for(server)
    for choice in [{"type": "any"}, {"type": "tool", "name": "get_weather"}]:
        message = client.messages.create(model="mock", max_tokens=200, messages=user("weather?"), tools=WEATHER, tool_choice=choice)
        assert message.stop_reason == "tool_use", message
        calls = [b for b in message.content if b.type == "tool_use"]
        assert len(calls) == 1 and calls[0].name == "get_weather", message.content
        assert isinstance(calls[0].input.get("city"), str), calls[0].input
        with client.messages.stream(model="mock", max_tokens=200, messages=user("weather?"), tools=WEATHER, tool_choice=choice) as stream:
            final = stream.get_final_message()
        streamed = [b for b in final.content if b.type == "tool_use"]
        assert final.stop_reason == "tool_use" and len(streamed) == 1, final
        assert streamed[0].name == "get_weather" and isinstance(streamed[0].input.get("city"), str)


def test_an_output_schema_holds_the_answer(server):
    client = client_for(server)
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    message = client.messages.create(
        model="mock", max_tokens=300, messages=user("a person"), output_config={"format": {"type": "json_schema", "schema": schema}}
    )
    answer = json.loads("".join(b.text for b in message.content if b.type == "text"))
    assert set(answer) == {"name", "age"} and isinstance(answer["name"], str) and isinstance(answer["age"], int), answer
    assert message.stop_reason == "end_turn"


def test_a_failure_mid_stream_is_an_error_event_and_before_it_a_500(server):
    client = client_for(server, max_retries=0)
    ask = user("fail soon @mock(error_after=3)")
    with pytest.raises(anthropic.APIStatusError) as failed:
        with client.messages.stream(model="mock", max_tokens=50, messages=ask) as stream:
            for _ in stream:
                pass
    assert failed.value.body["type"] == "error" and failed.value.body["error"]["type"] == "api_error"
    assert "error_after" in failed.value.body["error"]["message"]
    with pytest.raises(anthropic.InternalServerError) as whole:
        client.messages.create(model="mock", max_tokens=50, messages=ask)
    assert whole.value.status_code == 500 and whole.value.body["error"]["type"] == "api_error"


def test_a_body_over_the_limit_is_413_request_too_large(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text("[limits]\nmax_request_bytes = 4096\nmax_prompt_bytes = 1024\n")
    proc, base = start_server("--config", str(config))
    try:
        client = anthropic.Anthropic(base_url=base, api_key="unused", max_retries=0)
        with pytest.raises(anthropic.APIStatusError) as too_large:
            client.messages.create(model="mock", max_tokens=5, messages=user("x" * 5000))
        assert too_large.value.status_code == 413
        assert too_large.value.body["error"]["type"] == "request_too_large"
        assert "limits.max_request_bytes" in too_large.value.body["error"]["message"]
    finally:
        stop_server(proc)


def test_a_full_queue_is_529_overloaded_with_retry_after(tmp_path):
    proc, base = start_server("--mock-tokens-per-second", "2", "--config", "/dev/null")
    try:
        client = anthropic.Anthropic(base_url=base, api_key="unused", max_retries=0)
        # 1 running + 16 waiting fill the queue.
        slow = [
            client.messages.create(model="mock", max_tokens=1000, stream=True, messages=user(f"slow {i} @mock(length=1000)"))
            for i in range(17)
        ]
        requests = 'rkllm_http_requests_total{api="anthropic"}'
        before = metric(base, requests)
        with pytest.raises(anthropic.OverloadedError) as busy:
            client.messages.create(model="mock", max_tokens=5, messages=user("one too many"))
        assert busy.value.status_code == 529
        assert busy.value.body["error"]["type"] == "overloaded_error"
        assert int(busy.value.response.headers["retry-after"]) >= 1
        # max_retries=0: one request; with a retry allowed, the client waits
        # Retry-After and asks again.
        assert metric(base, requests) == before + 1
        with pytest.raises(anthropic.OverloadedError):
            anthropic.Anthropic(base_url=base, api_key="unused", max_retries=1).messages.create(
                model="mock", max_tokens=5, messages=user("one too many")
            )
        assert metric(base, requests) == before + 3
        for stream in slow:
            stream.close()
    finally:
        stop_server(proc)


def test_the_beta_namespace_and_its_query(server):
    client = client_for(server)
    raw = client.beta.messages.with_raw_response.create(
        model="mock",
        max_tokens=20,
        messages=user(PROMPT),
        betas=["interleaved-thinking-2025-05-14"],
        extra_query={"beta": "true"},
    )
    assert raw.http_request.url.params["beta"] == "true"
    message = raw.parse()
    assert message.type == "message" and message.content[0].text


def test_the_billing_block_leaves_the_prompt_alone_and_a_late_system_message_stays_where_it_was_sent(server):
    client = client_for(server)
    plain = client.messages.create(model="mock", max_tokens=100, system="Be brief.", messages=user("Hello NPU"))
    assert plain.usage.input_tokens == mock_tokens("Be brief.\n\nHello NPU")

    def billed(n: int) -> anthropic.types.Message:
        return client.messages.create(
            model="mock",
            max_tokens=100,
            system=[
                {"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1.330; cc_entrypoint=cli; cch={n:05};"},
                {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}},
            ],
            messages=user("Hello NPU"),
        )

    # The mock's reply is a function of the prompt: the same reply is the same prompt.
    for n in (1, 2):
        reply = billed(n)
        assert reply.content[0].text == plain.content[0].text and reply.usage.input_tokens == plain.usage.input_tokens

    # Claude Code's system message after the user's (last in the list) stays
    # where it was sent, so that the system prompt before the turns never
    # changes (docs/agents.md): the mock's template takes one system prompt
    # only, so it joins the user message before it, as if sent in it.
    inside = client.messages.create(
        model="mock",
        max_tokens=100,
        messages=[{"role": "user", "content": "Hello NPU"}, {"role": "system", "content": "Be brief."}],
    )
    joined = client.messages.create(model="mock", max_tokens=100, messages=user("Hello NPU\n\nBe brief."))
    assert inside.content[0].text == joined.content[0].text
    assert inside.usage.input_tokens == joined.usage.input_tokens == mock_tokens("Hello NPU\n\nBe brief.")


def test_a_deferred_tool_is_offered_only_after_a_tool_reference(server):
    headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01", "anthropic-beta": "advanced-tool-use-2025-11-20"}
    tools = [
        {"name": "WebFetch", "input_schema": {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]}, "defer_loading": True},
        {"type": "web_search_20250305", "name": "web_search"},
        {"name": "ToolSearch", "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}},
    ]

    def called(messages: list) -> str:
        body = {"model": "mock", "max_tokens": 200, "tools": tools, "messages": messages}
        answer = httpx.post(server + "/v1/messages?beta=true", json=body, headers=headers)
        assert answer.status_code == 200, answer.text
        [call] = [b for b in answer.json()["content"] if b["type"] == "tool_use"]
        return call["name"]

    # The mock calls the first tool offered.
    ask = {"role": "user", "content": "fetch the page @mock(tool_call=1)"}
    assert called([ask]) == "ToolSearch"
    assert called([
        ask,
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "ToolSearch", "input": {"query": "fetch"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "tool_reference", "tool_name": "WebFetch"}]},
            {"type": "text", "text": "go on"},
        ]},
    ]) == "WebFetch"


def test_pings_go_out_during_a_long_prefill(server):
    body = {"model": "mock", "max_tokens": 5, "stream": True, "messages": user("slow start @mock(prefill_ms=5000)")}
    names = []
    with httpx.stream("POST", server + "/v1/messages", json=body, headers={"x-api-key": KEY}, timeout=60) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("event: "):
                names.append(line.removeprefix("event: "))
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    first_block = names.index("content_block_start")
    assert "ping" in names[1:first_block], names


def test_a_client_that_disconnects_mid_stream_aborts_the_generation():
    proc, base = start_server("--mock-tokens-per-second", "20")
    try:
        client = anthropic.Anthropic(base_url=base, api_key="unused", max_retries=0, timeout=30)
        aborts = 'rkllm_aborts_total{cause="disconnect"}'
        before = metric(base, aborts)
        with client.messages.stream(model="mock", max_tokens=8000, messages=user("forever @mock(length=100000)")) as stream:
            next(iter(stream.text_stream))
        deadline = time.monotonic() + 30
        while metric(base, aborts) <= before and time.monotonic() < deadline:
            time.sleep(0.02)
        assert metric(base, aborts) == before + 1
        # Had the generation gone on (5000 s), this would time out.
        after = client.messages.create(model="mock", max_tokens=10, messages=user("after @mock(length=3)"))
        assert after.stop_reason == "end_turn"
    finally:
        stop_server(proc)


def doc_examples() -> list:
    """The ```sh blocks of the Anthropic section of docs/anthropic-responses.md."""
    text = (ROOT / "docs" / "anthropic-responses.md").read_text(encoding="utf-8")
    section = text.split("## Anthropic Messages", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)```", section.split("### With curl", 1)[1], flags=re.S)


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_the_docs_curl_examples_work_as_written():
    proc, base = start_server("--mock-tokens-per-second", "0")
    try:
        blocks = doc_examples()
        assert len(blocks) == 4
        for block in blocks:
            for command in commands(block):
                done = subprocess.run(
                    ["bash", "-c", command.replace("localhost:8080", base.removeprefix("http://"))],
                    capture_output=True, text=True, timeout=60,
                )
                assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
                body = done.stdout.strip()
                if body.startswith("event:"):
                    data = [json.loads(l.removeprefix("data:")) for l in body.splitlines() if l.startswith("data:")]
                    assert data[0]["type"] == "message_start" and data[-1]["type"] == "message_stop", body
                else:
                    assert "error" not in json.loads(body), body
    finally:
        stop_server(proc)
