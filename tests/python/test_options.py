"""docs/options.md walked against the server: every row of its tables sends
its fragment, merged into a small valid request of its API, and the answer
must be what the row says (honoured, ignored or not applied: 200; refused:
400 naming the option). A row cannot be left out by mistake: the table's
options for each API are checked against the fields the walker knows each
API's clients send, and an option Ollama ignores is ignored with a warning
naming it in the server's log.

Effects of the options that change an answer are checked here where the
mock can show them, and elsewhere for the rest (named in the docs)."""

import json
import re

import httpx
import pytest

from conftest import ROOT, start_server, stop_server

DOC = ROOT / "docs" / "options.md"

BASE = {
    "/v1/chat/completions": {"model": "mock", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]},
    "/v1/completions": {"model": "mock", "max_tokens": 4, "prompt": "hi"},
    "/api/chat": {
        "model": "mock",
        "stream": False,
        "options": {"num_predict": 4},
        "messages": [{"role": "user", "content": "hi"}],
    },
    "/api/generate": {"model": "mock", "stream": False, "options": {"num_predict": 4}, "prompt": "hi"},
    "/v1/messages": {"model": "mock", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]},
    "/v1/responses": {"model": "mock", "max_output_tokens": 4, "input": "hi"},
}

# The options the issue that asked for the table lists, per API: each must
# have a row (so that the table cannot quietly lose one).
REQUIRED = {
    "/v1/chat/completions": [
        "seed", "logit_bias", "presence_penalty", "frequency_penalty", "logprobs", "top_logprobs", "n",
        "stop", "response_format", "tool_choice", "parallel_tool_calls", "reasoning_effort",
        "stream_options", "service_tier", "prediction", "modalities", "audio", "store", "metadata", "user",
    ],
    "/api/chat": [
        "options.num_ctx", "options.seed", "options.mirostat", "options.mirostat_tau", "options.mirostat_eta",
        "options.num_predict", "options.repeat_penalty", "options.repeat_last_n", "options.min_p",
        "options.typical_p", "options.tfs_z", "options.num_keep", "penalize_newline", "logprobs",
        "top_logprobs", "think", "format", "keep_alive", "images",
    ],
    "/api/generate": ["raw", "suffix", "format", "keep_alive", "images", "context"],
    "/v1/messages": [
        "thinking.budget_tokens", "top_k", "stop_sequences", "tool_choice", "metadata", "service_tier",
    ],
    "/v1/responses": [
        "reasoning.effort", "text.format", "truncation", "include", "parallel_tool_calls", "max_tool_calls",
        "store", "previous_response_id",
    ],
}

STATES = {"honoured", "honoured (best effort)", "refused", "ignored", "not applied"}


def rows():
    """(path, option cell, sent fragment, state) for every row of the doc."""
    path = None
    found = []
    for line in DOC.read_text().splitlines():
        heading = re.match(r"^## .*\(`POST (/[^`]+)`\)", line)
        if heading:
            path = heading.group(1)
            continue
        if line.startswith("## "):
            path = None
            continue
        if path is None or not line.startswith("| `"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        assert len(cells) == 4, f"a row of four cells: {line}"
        option, sent, state, _how = cells
        assert sent.startswith("`") and sent.endswith("`"), line
        assert state in STATES, f"unknown state {state!r}: {line}"
        found.append((path, option, json.loads(sent[1:-1]), state))
    return found


ROWS = rows()


def merged(base, extra):
    out = json.loads(json.dumps(base))
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


def names(option: str):
    """The option names of a row's first cell (`a`, `b` and `c`)."""
    return re.findall(r"`([^`]+)`", option)


@pytest.fixture(scope="module")
def server():
    log: list[str] = []
    proc, base = start_server("--mock-tokens-per-second", "0", log=log)
    with httpx.Client(base_url=base, timeout=60) as client:
        yield client, log
    stop_server(proc)


def test_the_doc_has_a_row_for_every_option_asked_for():
    for path, required in REQUIRED.items():
        covered = set()
        for row_path, option, _, _ in ROWS:
            if row_path == path:
                for name in names(option):
                    covered.add(name)
                    covered.add(name.removeprefix("options."))
        missing = [o for o in required if o not in covered and o.removeprefix("options.") not in covered]
        assert not missing, f"{path}: no row for {missing}"
    assert len(ROWS) > 100


@pytest.mark.parametrize(
    "path,option,sent,state",
    ROWS,
    ids=[f"{p}:{o.split('`')[1]}:{s}" for p, o, _, s in ROWS],
)
def test_each_row_is_what_the_server_does(server, path, option, sent, state):
    client, _ = server
    response = client.post(path, json=merged(BASE[path], sent))
    if state == "refused":
        assert response.status_code == 400, f"{option}: {response.status_code} {response.text}"
        # The error names the option (its last part at least: an Ollama
        # error is one sentence, an OpenAI one has `param`).
        named = [n.rsplit(".", 1)[-1] for n in names(option)]
        assert any(n in response.text for n in named), f"{option}: {response.text}"
    else:
        assert response.status_code == 200, f"{option}: {response.status_code} {response.text}"


def test_options_ollama_ignores_are_ignored_with_a_warning_naming_each(server):
    client, log = server
    body = merged(BASE["/api/chat"], {"options": {"tfs_z": 0.9, "an_option_nobody_knows": 1}})
    assert client.post("/api/chat", json=body).status_code == 200
    warned = [line for line in log if "Ollama does not read either" in line]
    assert any("tfs_z" in line for line in warned), warned
    assert any("an_option_nobody_knows" in line for line in warned), warned


def test_num_ctx_bounds_the_answer_a_prompt_over_it_is_refused_and_one_above_the_model_is_clamped(server):
    client, _ = server
    body = merged(BASE["/api/generate"], {"prompt": "@mock(length=500) x", "options": {"num_predict": -1, "num_ctx": 60}})
    answer = client.post("/api/generate", json=body).json()
    assert answer.get("done_reason") == "length", answer
    assert answer["prompt_eval_count"] + answer["eval_count"] <= 60, answer
    body = merged(BASE["/api/generate"], {"prompt": "x " * 400, "options": {"num_ctx": 60}})
    refused = client.post("/api/generate", json=body)
    assert refused.status_code == 400 and "num_ctx" in refused.text, refused.text
    # Above the model's context: clamped to it, as Ollama does.
    body = merged(BASE["/api/generate"], {"prompt": "@mock(length=5) x", "options": {"num_ctx": 10**9}})
    clamped = client.post("/api/generate", json=body)
    assert clamped.status_code == 200, clamped.text
    assert clamped.json()["done"] is True, clamped.text


def test_sampling_options_change_what_the_mock_says(server):
    client, _ = server
    def said(options):
        body = merged(BASE["/api/generate"], {"options": dict(options, num_predict=12)})
        return client.post("/api/generate", json=body).json()["response"]
    plain = said({})
    assert said({}) == plain
    assert said({"mirostat": 2, "mirostat_tau": 3.0}) != plain
    assert said({"temperature": 0.3}) != plain


def test_one_tool_call_when_parallel_calls_are_off(server):
    client, _ = server
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    call = '<tool_call>\n{"name": "f", "arguments": {"n": %d}}\n</tool_call>\n'
    reply = "@mock(echo=1) " + call % 1 + call % 2
    def calls(extra):
        body = merged(
            BASE["/v1/chat/completions"],
            dict(extra, max_tokens=400, tools=[tool], messages=[{"role": "user", "content": reply}]),
        )
        answer = client.post("/v1/chat/completions", json=body).json()
        return [c["function"]["arguments"] for c in answer["choices"][0]["message"]["tool_calls"]]
    assert [json.loads(a)["n"] for a in calls({})] == [1, 2]
    assert [json.loads(a)["n"] for a in calls({"parallel_tool_calls": False})] == [1]


SMALL = """
[mock]
tokens_per_second = 0
prefill_ms = 0

[[models]]
name = "small"
max_context_len = 120
"""


def test_responses_truncation_auto_drops_the_oldest_messages_to_fit(tmp_path):
    config = tmp_path / "rkllm-server.toml"
    config.write_text(SMALL)
    proc, base = start_server("--config", str(config))
    try:
        long = "many words of an old turn " * 4
        items = []
        for n in range(6):
            items.append({"role": "user", "content": f"question {n}: {long}"})
            items.append({"role": "assistant", "content": f"answer {n}: {long}"})
        items.append({"role": "user", "content": "and now?"})
        body = {"model": "small", "instructions": "Be brief.", "input": items, "max_output_tokens": 8}
        with httpx.Client(base_url=base, timeout=60) as client:
            refused = client.post("/v1/responses", json=body)
            assert refused.status_code == 400, refused.text
            assert "context" in refused.text
            body["truncation"] = "auto"
            answer = client.post("/v1/responses", json=body)
            assert answer.status_code == 200, answer.text
            response = answer.json()
            assert response["truncation"] == "auto"
            # What the model was given fits its context with room for the answer.
            assert response["usage"]["input_tokens"] + 8 <= 120, response["usage"]
            # And it kept the latest messages: counting the same input with
            # only its last turn gives fewer tokens.
            last = client.post(
                "/v1/responses/input_tokens",
                json={"model": "small", "instructions": "Be brief.", "input": items[-1:]},
            ).json()
            assert last["input_tokens"] <= response["usage"]["input_tokens"], (last, response["usage"])
    finally:
        stop_server(proc)
