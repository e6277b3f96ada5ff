"""The OpenAI Responses API (/v1/responses), driven by the official `openai`
client (`responses.create` and `responses.stream`) and the OpenAI Agents SDK,
with every streamed event and every response validated against the SDK's own
types."""

import asyncio
import base64
import json
import re
import time

import httpx
import openai
import pydantic
import pytest
from openai.types.responses import Response, ResponseStreamEvent

from conftest import mock_tokens, start_server, stop_server

KEY = "test-key"
PROMPT = "Tell me about the Rock 5B @mock(length=40)"
WEATHER = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
]
ASK = "What is the weather in Paris? @mock(tool_call=1)"

EVENTS = pydantic.TypeAdapter(ResponseStreamEvent)
RESPONSE = pydantic.TypeAdapter(Response)


def client_for(base: str, **kwargs) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key=KEY, **kwargs)


def raw_events(base: str, body: dict, headers: dict | None = None) -> list[dict]:
    """Posts a streaming request and reads its SSE frames: each frame's
    `event:` name must be its payload's `type`, and each payload must
    validate as one of the SDK's stream events."""
    events = []
    with httpx.stream(
        "POST",
        base + "/v1/responses",
        json={**body, "stream": True},
        headers={"Authorization": f"Bearer {KEY}", **(headers or {})},
        timeout=60,
    ) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        name = None
        for line in response.iter_lines():
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                payload = json.loads(line.removeprefix("data: "))
                assert payload["type"] == name, (name, payload)
                EVENTS.validate_python(payload)
                events.append(payload)
    return events


def check_stream(events: list[dict]) -> dict:
    """What every stream must be: created, then in_progress; sequence
    numbers from 0, one apart; each item event's index and id those of the
    item in the final output; the final output the items' `.done`
    payloads. Returns the final response."""
    assert [e["type"] for e in events[:2]] == ["response.created", "response.in_progress"]
    assert events[0]["response"]["output"] == [] and events[0]["response"]["status"] == "in_progress"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    final = events[-1]
    assert final["type"] in ("response.completed", "response.incomplete", "response.failed")
    response = final["response"]
    RESPONSE.validate_python(response)
    assert response["id"] == events[0]["response"]["id"]
    done = [e for e in events if e["type"] == "response.output_item.done"]
    assert [e["output_index"] for e in done] == list(range(len(done)))
    assert response["output"] == [e["item"] for e in done]
    output = response["output"]
    for event in events:
        if "output_index" in event:
            item = output[event["output_index"]]
            assert event.get("item_id", event.get("item", {}).get("id")) == item["id"], event
        if "content_index" in event:
            assert event["content_index"] == 0
    # Deltas add up to the item's text.
    for index, item in enumerate(output):
        deltas = "".join(
            e["delta"]
            for e in events
            if e.get("output_index") == index and e["type"].endswith(".delta")
        )
        if item["type"] == "message":
            assert deltas == item["content"][0]["text"]
        elif item["type"] == "reasoning":
            assert deltas == item["content"][0]["text"]
        elif item["type"] == "function_call" and deltas:
            assert json.loads(deltas) == json.loads(item["arguments"])
    return response


@pytest.fixture
def server():
    proc, base = start_server("--mock-tokens-per-second", "400", "--api-key", KEY)
    yield base
    stop_server(proc)


def test_text_whole_and_streamed(server):
    client = client_for(server)
    whole = client.responses.create(model="mock", input=PROMPT, instructions="Be brief.")
    RESPONSE.validate_python(whole.model_dump())
    assert whole.id.startswith("resp_") and whole.object == "response" and whole.status == "completed"
    assert whole.output_text and [item.type for item in whole.output] == ["message"]
    assert whole.output[0].id.startswith("msg_") and whole.output[0].content[0].annotations == []
    usage = whole.usage
    assert usage.output_tokens > 0 and usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert usage.input_tokens_details.cached_tokens == 0
    assert whole.instructions == "Be brief." and whole.tool_choice == "auto" and whole.error is None

    with client.responses.stream(model="mock", input=PROMPT, instructions="Be brief.") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == whole.output_text == final.output_text
    assert final.usage.output_tokens == whole.usage.output_tokens

    check_stream(raw_events(server, {"model": "mock", "input": PROMPT}))


def test_a_function_call_round_trip(server):
    client = client_for(server)
    first = client.responses.create(model="mock", input=ASK, tools=WEATHER)
    calls = [item for item in first.output if item.type == "function_call"]
    assert len(calls) == 1 and first.status == "completed"
    call = calls[0]
    assert call.name == "get_weather" and call.call_id and call.id.startswith("fc_")
    assert json.loads(call.arguments) == {"city": "test"}
    assert first.tools[0].name == "get_weather"

    # Streamed: the call's arguments in deltas, then whole in `.done`.
    events = raw_events(server, {"model": "mock", "input": ASK, "tools": WEATHER})
    response = check_stream(events)
    assert [item["type"] for item in response["output"]] == ["function_call"]
    assert any(e["type"] == "response.function_call_arguments.delta" for e in events)
    args_done = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert json.loads(args_done[0]["arguments"]) == {"city": "test"}

    # The call and its output sent back (as Codex does: our items with their
    # ids and status) are answered with text.
    history = [
        {"role": "user", "content": [{"type": "input_text", "text": ASK}]},
        *[item.model_dump(exclude_none=True) for item in first.output],
        {"type": "function_call_output", "id": "fco_1", "call_id": call.call_id, "output": '{"temperature": 21}'},
    ]
    answer = client.responses.create(model="mock", input=history, tools=WEATHER)
    assert answer.status == "completed" and answer.output_text
    assert [item.type for item in answer.output] == ["message"]
    with client.responses.stream(model="mock", input=history, tools=WEATHER) as stream:
        assert stream.get_final_response().output_text == answer.output_text


def requests_counted(base: str) -> float:
    text = httpx.get(base + "/metrics", headers={"Authorization": f"Bearer {KEY}"}).text
    found = re.search(r'^rkllm_http_requests_total\{api="responses"\} (\S+)$', text, flags=re.M)
    return float(found.group(1)) if found else 0.0


def test_each_request_is_counted_refused_ones_included(server):
    client = client_for(server, max_retries=0)
    client.responses.create(model="mock", input=PROMPT)
    with client.responses.stream(model="mock", input=PROMPT) as stream:
        stream.get_final_response()
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="no-such-model", input=PROMPT)
    assert requests_counted(server) == 3


def test_reasoning_is_its_own_item(server):
    client = client_for(server)
    thinking = "Why is the sky blue? @mock(think=1)"
    whole = client.responses.create(model="mock", input=thinking, reasoning={"effort": "high", "summary": "auto"})
    assert [item.type for item in whole.output] == ["reasoning", "message"]
    reasoning = whole.output[0]
    assert reasoning.id.startswith("rs_") and reasoning.summary == []
    assert reasoning.content[0].type == "reasoning_text" and reasoning.content[0].text
    assert "<think>" not in whole.output_text and "</think>" not in whole.output_text
    assert whole.usage.output_tokens_details.reasoning_tokens > 0

    events = raw_events(server, {"model": "mock", "input": thinking, "reasoning": {"effort": "high"}})
    response = check_stream(events)
    assert [item["type"] for item in response["output"]] == ["reasoning", "message"]
    assert any(e["type"] == "response.reasoning_text.delta" for e in events)
    assert response["output"][0]["content"][0]["text"] == reasoning.content[0].text

    # Effort "none" switches thinking off: no reasoning item.
    off = client.responses.create(model="mock", input=thinking, reasoning={"effort": "none"})
    assert [item.type for item in off.output] == ["message"]
    assert "<think>" not in off.output_text


def test_the_token_limit_makes_an_incomplete_response(server):
    client = client_for(server)
    cut = client.responses.create(model="mock", input=PROMPT, max_output_tokens=5)
    assert cut.status == "incomplete" and cut.incomplete_details.reason == "max_output_tokens"
    assert cut.usage.output_tokens == 5 and cut.max_output_tokens == 5
    events = raw_events(server, {"model": "mock", "input": PROMPT, "max_output_tokens": 5})
    response = check_stream(events)
    assert events[-1]["type"] == "response.incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    with client.responses.stream(model="mock", input=PROMPT, max_output_tokens=5) as stream:
        assert [e.type for e in stream][-1] == "response.incomplete"


def test_a_failure_mid_stream_is_response_failed(server):
    events = raw_events(server, {"model": "mock", "input": "fail @mock(length=40) @mock(error_after=3)"})
    response = check_stream(events)
    assert events[-1]["type"] == "response.failed"
    assert response["status"] == "failed" and response["error"]["code"] == "server_error"
    with pytest.raises(openai.InternalServerError):
        client_for(server, max_retries=0).responses.create(model="mock", input="fail @mock(error_after=3)")


def test_previous_response_id_continues_the_kept_conversation(server):
    client = client_for(server)
    first = client.responses.create(model="mock", input="My name is Ada. @mock(length=6)")
    # Another conversation in between: the model's runtime no longer holds
    # the first one, so the whole of it is sent again.
    client.responses.create(model="mock", input="Something else entirely @mock(length=3)")
    second = client.responses.create(model="mock", input="What is my name?", previous_response_id=first.id)
    assert second.previous_response_id == first.id and second.status == "completed"
    transcript = f"user: My name is Ada. @mock(length=6)\nassistant: {first.output_text}\nuser: What is my name?"
    # The mock counts prefill with its tokenizer.
    assert second.usage.input_tokens == mock_tokens(transcript)

    counted = httpx.post(
        server + "/v1/responses/input_tokens",
        json={"model": "mock", "input": "What is my name?", "previous_response_id": first.id},
        headers={"Authorization": f"Bearer {KEY}"},
    ).json()
    assert counted == {"object": "response.input_tokens", "input_tokens": mock_tokens(transcript)}

    # A chain: the second's conversation holds the first's.
    third = client.responses.create(model="mock", input="And again?", previous_response_id=second.id)
    assert third.status == "completed"

    # Not kept (store: false), or never made: refused, never answered
    # without the history.
    unkept = client.responses.create(model="mock", input="secret @mock(length=3)", store=False)
    for missing in (unkept.id, "resp_doesnotexist"):
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(model="mock", input="more", previous_response_id=missing)
        assert refused.value.body["param"] == "previous_response_id"
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="mock", input="x", conversation="conv_1")
    assert refused.value.body["param"] == "conversation"


def test_a_store_turned_off_refuses_previous_response_id(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text("[responses]\nstore_max_entries = 0\n")
    proc, base = start_server("--config", str(config), "--mock-tokens-per-second", "0")
    try:
        client = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0)
        first = client.responses.create(model="mock", input="hi @mock(length=3)")
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(model="mock", input="more", previous_response_id=first.id)
        assert "store_max_entries = 0" in refused.value.body["message"]
    finally:
        stop_server(proc)


def test_a_prompt_over_the_context_is_context_length_exceeded(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('[[models]]\nname = "small"\nmax_context_len = 16\n')
    proc, base = start_server("--config", str(config), "--mock-tokens-per-second", "0")
    try:
        long_input = "word " * 100
        with pytest.raises(openai.BadRequestError) as refused:
            openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0).responses.create(
                model="small", input=long_input
            )
        assert refused.value.body["code"] == "context_length_exceeded"
        assert refused.value.body["param"] == "input"
        events = []
        with httpx.stream("POST", base + "/v1/responses", json={"model": "small", "input": long_input, "stream": True}) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if line.startswith("data: "):
                    events.append(json.loads(line.removeprefix("data: ")))
        assert [e["type"] for e in events] == ["response.created", "response.in_progress", "response.failed"]
        # The code Codex reads (the SDK's type does not list it yet: the
        # rest of the event is checked against it).
        assert events[-1]["response"]["error"]["code"] == "context_length_exceeded"
        events[-1]["response"]["error"]["code"] = "invalid_prompt"
        for event in events:
            EVENTS.validate_python(event)
    finally:
        stop_server(proc)


def test_the_agents_sdk_completes_a_one_tool_task(server):
    from agents import Agent, Runner, function_tool, set_default_openai_client, set_tracing_disabled

    calls = []

    @function_tool
    def get_weather(city: str) -> str:
        """Current weather in a city."""
        calls.append(city)
        return "21 C and sunny"

    set_tracing_disabled(True)
    set_default_openai_client(openai.AsyncOpenAI(base_url=server + "/v1", api_key=KEY, max_retries=0))
    agent = Agent(name="weather", instructions="Answer with the tool.", model="mock", tools=[get_weather])

    async def both():
        whole = await Runner.run(agent, ASK)
        streamed = Runner.run_streamed(agent, ASK)
        kinds = [event.type async for event in streamed.stream_events()]
        return whole, streamed, kinds

    result, streamed, kinds = asyncio.run(both())
    assert calls == ["test", "test"]
    assert isinstance(result.final_output, str) and result.final_output
    items = [item.type for item in result.new_items]
    assert items == ["tool_call_item", "tool_call_output_item", "message_output_item"]
    assert streamed.final_output == result.final_output
    assert "raw_response_event" in kinds and "run_item_stream_event" in kinds


# A Codex-sized body (instructions, tools, one user message) compressed with
# zstd at level 3 by the reference library: once as one frame with its size,
# once by a streaming encoder (no size, as a client compressing as it sends
# writes it); and 2 MiB of spaces at level 19 (81 bytes).
ZSTD_TOOLS = [
    {"type": "function", "name": f"tool_{i}", "description": f"Does thing number {i} in the workspace",
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}
    for i in range(6)
]
ZSTD_BODY = json.dumps(
    {
        "model": "mock",
        "instructions": "Answer briefly and use the tools when asked. " * 20,
        "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": PROMPT}]}],
        "tools": ZSTD_TOOLS,
    },
    separators=(",", ":"),
).encode()
ZSTD_WHOLE = base64.b64decode(
    "KLUv/WBpB9UJAObRNyMgi7gNZ5ik1VZXHki+bQ1xIMUOAdxXAPXQbdRWGIkSABIADiwALQAuALxQ84EgR6015tOY/LDRhZHokWwX3ISwFjw5"
    "a2PNvG1WdnWIadKTR9k06Q0BBgyEmIbQry0LU8IoyoQnV2+GbIdma2Ouvskvanv1dBZzpov0GxrJ+zkUaBIKjqFtEGV4wM1FeoqOsqeRsx08"
    "uWPLcDZXPzikpVfX97hSJmV6wGEx8LSjGQEQYJPCYCwWCkUigUCoaVIayZtc9hZyr6bpjrJtfnq5ZL3p2jomFZaWnDc7pbXLMSsiIKAiERwL"
    "PUsqII8xxUgKI3UgGWNKSB4jxYCUGxUwNOFoCSOhd3S0On0lZQTv9htGZGRgqwCDKGzrmdmC/x0WyJKjN6n64tOurt8nR4rNyMxc0FCF1TID"
)
ZSTD_STREAMED = base64.b64decode(
    "KLUv/QBY1QkA5hM8I0CLmwN7xEXCHVvEbLVmUXovqo3K4X3HhI54uHqYkHIVRY0LMQAwADMAHV0KLOrAlasNJOHD3KlNp8KYy66MPA9tT8mn"
    "ELgFV4fLrVl8Dbc93WEMXf3RhaE3BBBBGjDSYYzQkZWVCuXzaMLV05tB29HRbVvtZfb0pzBeXR9+T1dmQajQ1dVF+g0N9Q46jyHb8pBPFShu"
    "MtuaTqh8cPXl1q49BnV5+sGhrtDap298PCVREj3gsBhomll9ABzGAVHCYCwWCkUigUCkKEoa6ou+Fhf0PUXRmW2vYdPLaeunjp97ejNVUFgd"
    "Pm2F1lvu6cpWGgALpAKQxwAUA0hhAOoAkjEAJQB5DEAxQMrNVMCUJsBoSRkR9AbSVjh3OG1Ukyik4BlmO3zRnOhCapXr16mrzOKyhiqs1Bk="
)
ZSTD_BOMB = base64.b64decode(
    "KLUv/aAAACAATAAACCABAPz/ORACAgAQIAIAECACABAgAgAQIAIAECACABAgAgAQIAIAECACABAgAgAQIAIAECACABAgAgAQIAIAECADABAg"
)


def test_a_zstd_body_is_read(server):
    auth = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    headers = {**auth, "Content-Encoding": "zstd"}
    plain = httpx.post(server + "/v1/responses", content=ZSTD_BODY, headers=auth)
    assert plain.status_code == 200, plain.text
    expected = plain.json()["output"][0]["content"][0]["text"]
    for packed in (ZSTD_WHOLE, ZSTD_STREAMED):
        assert len(packed) < len(ZSTD_BODY) // 4
        answer = httpx.post(server + "/v1/responses", content=packed, headers=headers)
        assert answer.status_code == 200, answer.text
        assert answer.json()["output"][0]["content"][0]["text"] == expected
        assert [t["name"] for t in answer.json()["tools"]] == [t["name"] for t in ZSTD_TOOLS]
    # Past the body limit once decoded: 413, in OpenAI's shape.
    refused = httpx.post(server + "/v1/responses", content=ZSTD_BOMB, headers=headers)
    assert refused.status_code == 413 and "max_request_bytes" in refused.json()["error"]["message"]
    corrupt = httpx.post(server + "/v1/responses", content=b"not zstd", headers=headers)
    assert corrupt.status_code == 400 and corrupt.json()["error"]["param"] == "body"
    gzip = httpx.post(server + "/v1/responses", content=ZSTD_BODY, headers={**auth, "Content-Encoding": "gzip"})
    assert gzip.status_code == 415 and gzip.json()["error"]["message"].startswith("`Content-Encoding: gzip`")


def test_the_websocket_attempt_is_refused_at_once(server):
    answer = httpx.get(
        server + "/v1/responses",
        headers={
            "Authorization": f"Bearer {KEY}",
            "Connection": "Upgrade",
            "Upgrade": "websocket",
            "Sec-WebSocket-Version": "13",
            "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
            "openai-beta": "responses_websockets=2026-02-06",
        },
    )
    assert answer.status_code == 405 and answer.headers["allow"] == "POST"
    assert answer.json()["error"]["type"] == "invalid_request_error"


def disconnect_aborts(base: str) -> int:
    text = httpx.get(base + "/metrics", headers={"Authorization": f"Bearer {KEY}"}).text
    match = re.search(r'^rkllm_aborts_total\{cause="disconnect"\} (\d+)', text, re.M)
    return int(match.group(1)) if match else 0


def test_a_client_that_disconnects_mid_stream_aborts_its_generation():
    proc, base = start_server("--mock-tokens-per-second", "20", "--api-key", KEY)
    try:
        before = disconnect_aborts(base)
        client = client_for(base, max_retries=0, timeout=30)
        with client.responses.stream(model="mock", input="forever @mock(length=100000)") as stream:
            for event in stream:
                if event.type == "response.output_text.delta":
                    break
        deadline = time.monotonic() + 30
        while disconnect_aborts(base) == before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert disconnect_aborts(base) == before + 1
        # Had the generation gone on (5000 s), this would wait behind it.
        after = client.responses.create(model="mock", input="after @mock(length=3)")
        assert after.status == "completed"
    finally:
        stop_server(proc)
