"""A request that names no length is never cut by the server: through the
official clients of every API that lets a client leave the length out
(OpenAI chat and completions, the Responses API, Ollama chat and generate,
and JSON-RPC `run`, whose parameters the MCP `generate` tool shares), a
2,000-token answer of the
mock (`@mock(length=2000)`) comes whole, ended by the model. Anthropic
requires `max_tokens`, so it has no such case.

An operator who wants a cap sets `[limits] default_max_tokens`: that server
cuts such an answer there, with the finish reason that says so."""

import httpx
import ollama
import openai
import pytest

from conftest import start_server, stop_server

CONFIG = """
[mock]
tokens_per_second = 0
prefill_ms = 0
"""
PROMPT = "Tell me everything. @mock(length=2000)"
LENGTH = 2000


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    config = tmp_path_factory.mktemp("no-length") / "rkllm-server.toml"
    config.write_text(CONFIG)
    proc, url = start_server("--config", str(config))
    yield url
    stop_server(proc)


@pytest.fixture(scope="module")
def capped(tmp_path_factory):
    config = tmp_path_factory.mktemp("capped") / "rkllm-server.toml"
    config.write_text(CONFIG + "\n[limits]\ndefault_max_tokens = 100\n")
    proc, url = start_server("--config", str(config))
    yield url
    stop_server(proc)


def openai_client(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=60)


def test_openai_chat_and_completions_run_to_the_models_end(base):
    client = openai_client(base)
    chat = client.chat.completions.create(
        model="mock", messages=[{"role": "user", "content": PROMPT}])
    assert chat.choices[0].finish_reason == "stop"
    assert chat.usage.completion_tokens == LENGTH
    completion = client.completions.create(model="mock", prompt=PROMPT)
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage.completion_tokens == LENGTH
    streamed = client.chat.completions.create(
        model="mock", messages=[{"role": "user", "content": PROMPT}], stream=True,
        stream_options={"include_usage": True})
    chunks = list(streamed)
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage.completion_tokens == LENGTH


def test_the_responses_api_runs_to_the_models_end(base):
    response = openai_client(base).responses.create(model="mock", input=PROMPT)
    assert response.status == "completed"
    assert response.usage.output_tokens == LENGTH


def test_ollama_chat_and_generate_run_to_the_models_end(base):
    client = ollama.Client(host=base)
    chat = client.chat(model="mock", messages=[{"role": "user", "content": PROMPT}])
    assert chat.done_reason == "stop" and chat.eval_count == LENGTH
    generated = client.generate(model="mock", prompt=PROMPT)
    assert generated.done_reason == "stop" and generated.eval_count == LENGTH


def test_json_rpc_runs_to_the_models_end(base):
    result = httpx.post(base + "/mcp", json={
        "jsonrpc": "2.0", "id": 1, "method": "run", "params": {"prompt": PROMPT}}, timeout=60).json()
    assert result["result"]["finish_reason"] == "stop", result
    assert result["result"]["usage"]["completion_tokens"] == LENGTH


def test_an_operators_default_cap_cuts_what_names_no_length(capped):
    client = openai_client(capped)
    chat = client.chat.completions.create(
        model="mock", messages=[{"role": "user", "content": PROMPT}])
    assert chat.choices[0].finish_reason == "length"
    assert chat.usage.completion_tokens == 100
    # A request that names its length is not affected.
    chat = client.chat.completions.create(
        model="mock", messages=[{"role": "user", "content": PROMPT}], max_tokens=300)
    assert chat.usage.completion_tokens == 300
